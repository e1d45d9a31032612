//! User statements: `CREATE USER`, `ALTER USER`, `DROP USER`, `SHOW
//! USERS`.
//!
//! sqlparser knows these only in Snowflake's form (`CREATE USER u
//! PASSWORD='x'`), so they are read here, from sqlparser's tokens, in the
//! forms users of PostgreSQL and MySQL type:
//!
//! ```sql
//! CREATE USER [IF NOT EXISTS] name {WITH PASSWORD | PASSWORD [=] | IDENTIFIED BY} 'pw'
//! ALTER USER [IF EXISTS] name {WITH PASSWORD | PASSWORD [=] | IDENTIFIED BY} 'pw'
//! DROP USER [IF EXISTS] name
//! SHOW USERS
//! ```
//!
//! A statement that starts with these words is a user statement, and one
//! that then does not follow the grammar is refused here with what was
//! expected; any other text is left to the other parsers. The password is
//! kept in a [`Password`], whose `Debug` does not show it.

use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::{plan_err, Result};

/// A password as typed; `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserStatement {
    Create {
        name: String,
        password: Password,
        if_not_exists: bool,
    },
    Alter {
        name: String,
        password: Password,
        if_exists: bool,
    },
    Drop {
        name: String,
        if_exists: bool,
    },
    Show,
}

/// The tokens of `text` without whitespace and comments; None if it does
/// not tokenize (the other parsers report that).
fn tokens(text: &str) -> Option<Vec<Token>> {
    let all = Tokenizer::new(&GenericDialect {}, text).tokenize().ok()?;
    Some(
        all.into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect(),
    )
}

struct Cursor {
    tokens: Vec<Token>,
    at: usize,
}

impl Cursor {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    /// The next token is the unquoted word `k` (any case).
    fn keyword(&mut self, k: &str) -> bool {
        match self.peek() {
            Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn keywords(&mut self, ks: &[&str]) -> bool {
        let start = self.at;
        if ks.iter().all(|k| self.keyword(k)) {
            return true;
        }
        self.at = start;
        false
    }

    fn name(&mut self) -> Result<String> {
        match self.peek().cloned() {
            Some(Token::Word(w)) => {
                self.at += 1;
                Ok(w.value)
            }
            Some(Token::SingleQuotedString(s)) => {
                self.at += 1;
                Ok(s)
            }
            other => Err(expected("a user name", other.as_ref())),
        }
    }

    fn password(&mut self) -> Result<Password> {
        let introduced = self.keywords(&["WITH", "PASSWORD"])
            || self.keywords(&["IDENTIFIED", "BY"])
            || self.keyword("PASSWORD");
        if !introduced {
            return Err(expected(
                "WITH PASSWORD 'password' (or IDENTIFIED BY 'password')",
                self.peek(),
            ));
        }
        if self.peek() == Some(&Token::Eq) {
            self.at += 1;
        }
        match self.peek().cloned() {
            Some(Token::SingleQuotedString(s)) => {
                self.at += 1;
                Ok(Password(s))
            }
            other => Err(expected(
                "the password as a 'quoted string'",
                other.as_ref(),
            )),
        }
    }

    /// Only an optional `;` may follow.
    fn end(&mut self) -> Result<()> {
        if self.peek() == Some(&Token::SemiColon) {
            self.at += 1;
        }
        match self.peek() {
            None | Some(Token::EOF) => Ok(()),
            Some(t) => Err(plan_err!("unexpected '{t}' at the end of a user statement")),
        }
    }
}

fn expected(what: &str, found: Option<&Token>) -> crate::Error {
    match found {
        None | Some(Token::EOF) => plan_err!("expected {what}, found the end of the statement"),
        Some(t) => plan_err!("expected {what}, found '{t}'"),
    }
}

/// The user statement `text` is, if it starts like one (an error when it
/// then does not follow the grammar); None for any other statement.
pub fn parse(text: &str) -> Option<Result<UserStatement>> {
    // Most statements are not user statements: look at two words before
    // tokenizing the whole text.
    let mut words = text.split_whitespace().map(|w| w.trim_end_matches(';'));
    let starts = match (words.next(), words.next()) {
        (Some(a), Some(b)) => {
            let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
            (["create", "alter", "drop"].iter().any(|k| is(a, k)) && is(b, "user"))
                || (is(a, "show") && is(b, "users"))
        }
        _ => false,
    };
    if !starts {
        return None;
    }
    let mut c = Cursor {
        tokens: tokens(text)?,
        at: 0,
    };
    let stmt = if c.keywords(&["CREATE", "USER"]) {
        (|| {
            let if_not_exists = c.keywords(&["IF", "NOT", "EXISTS"]);
            let name = c.name()?;
            let password = c.password()?;
            Ok(UserStatement::Create {
                name,
                password,
                if_not_exists,
            })
        })()
    } else if c.keywords(&["ALTER", "USER"]) {
        (|| {
            let if_exists = c.keywords(&["IF", "EXISTS"]);
            let name = c.name()?;
            let password = c.password()?;
            Ok(UserStatement::Alter {
                name,
                password,
                if_exists,
            })
        })()
    } else if c.keywords(&["DROP", "USER"]) {
        (|| {
            let if_exists = c.keywords(&["IF", "EXISTS"]);
            Ok(UserStatement::Drop {
                name: c.name()?,
                if_exists,
            })
        })()
    } else if c.keywords(&["SHOW", "USERS"]) {
        Ok(UserStatement::Show)
    } else {
        return None;
    };
    Some(stmt.and_then(|s| c.end().map(|_| s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> UserStatement {
        parse(text).expect("a user statement").unwrap()
    }

    fn err(text: &str) -> String {
        parse(text)
            .expect("a user statement")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_forms_users_type() {
        let alice = |if_not_exists| UserStatement::Create {
            name: "alice".into(),
            password: Password("s3cret".into()),
            if_not_exists,
        };
        assert_eq!(ok("CREATE USER alice WITH PASSWORD 's3cret'"), alice(false));
        assert_eq!(
            ok("create user alice identified by 's3cret';"),
            alice(false)
        );
        assert_eq!(ok("CREATE USER alice PASSWORD = 's3cret'"), alice(false));
        assert_eq!(
            ok("CREATE USER IF NOT EXISTS \"alice\" PASSWORD 's3cret'"),
            alice(true)
        );
        assert_eq!(
            ok("ALTER USER IF EXISTS bob WITH PASSWORD 'it''s'"),
            UserStatement::Alter {
                name: "bob".into(),
                password: Password("it's".into()),
                if_exists: true
            }
        );
        assert_eq!(
            ok("DROP USER 'bob'"),
            UserStatement::Drop {
                name: "bob".into(),
                if_exists: false
            }
        );
        assert_eq!(ok("show users"), UserStatement::Show);
    }

    #[test]
    fn other_statements_are_left_alone() {
        for text in [
            "SELECT 1",
            "CREATE TABLE user (a BIGINT)",
            "DROP TABLE users",
            "SHOW TABLES",
            "'unterminated",
        ] {
            assert!(parse(text).is_none(), "{text}");
        }
    }

    #[test]
    fn mistakes_say_what_was_expected() {
        let e = err("CREATE USER alice");
        assert!(e.contains("expected WITH PASSWORD 'password'"), "{e}");
        assert!(e.contains("found the end of the statement"), "{e}");
        let e = err("CREATE USER alice WITH PASSWORD secret");
        assert!(
            e.contains("expected the password as a 'quoted string', found 'secret'"),
            "{e}"
        );
        let e = err("DROP USER alice, bob");
        assert!(e.contains("unexpected ','"), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let s = format!("{:?}", ok("CREATE USER a WITH PASSWORD 'hunter2'"));
        assert!(!s.contains("hunter2"), "{s}");
    }
}
