//! `BACKUP` and `RESTORE`: the statements' grammar.
//!
//! ```sql
//! BACKUP [TABLE name [, name …]] TO 'location'
//! RESTORE [TABLE name [, name …]] FROM 'location' [WITH REPLACE]
//! ```
//!
//! The location is a directory on the compute process's host (or a
//! `file://` URL). Table names follow the engine's rules: unquoted names
//! are lower-cased, quoted ones kept as written. Without `TABLE`, BACKUP
//! takes every table and RESTORE every table in the backup. The work
//! itself is not here: compute only parses the statements and hands them
//! to the [`crate::engine::backup`] hook the binary installs.
//!
//! sqlparser has no such statements, so this is a small hand parser over
//! sqlparser's tokenizer (quoted names and string literals as in every
//! other statement); other statements are left to the other parsers.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::{plan_err, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupStatement {
    Backup {
        /// Empty: every table.
        tables: Vec<String>,
        location: String,
    },
    Restore {
        /// Empty: every table in the backup.
        tables: Vec<String>,
        location: String,
        /// Drop a table of the same name first (else its existence is an
        /// error).
        replace: bool,
    },
}

impl BackupStatement {
    pub fn word(&self) -> &'static str {
        match self {
            BackupStatement::Backup { .. } => "BACKUP",
            BackupStatement::Restore { .. } => "RESTORE",
        }
    }
}

/// The BACKUP or RESTORE statement `text` is (an error when it starts like
/// one but does not parse); None for any other statement.
pub fn parse(text: &str) -> Option<Result<BackupStatement>> {
    let first = text.split_whitespace().next()?;
    let backup = first.eq_ignore_ascii_case("backup");
    if !backup && !first.eq_ignore_ascii_case("restore") {
        return None;
    }
    Some(parse_tokens(text, backup))
}

fn parse_tokens(text: &str, backup: bool) -> Result<BackupStatement> {
    let word = if backup { "BACKUP" } else { "RESTORE" };
    let usage = || {
        if backup {
            "BACKUP [TABLE name [, name …]] TO 'directory'"
        } else {
            "RESTORE [TABLE name [, name …]] FROM 'directory' [WITH REPLACE]"
        }
    };
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize()
        .map_err(|e| plan_err!("{word}: {e}"))?;
    let mut toks = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
        .peekable();
    toks.next(); // BACKUP / RESTORE
    let keyword = |t: Option<&Token>, k: &str| matches!(t, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    let mut tables = Vec::new();
    if keyword(toks.peek(), "table") {
        toks.next();
        loop {
            match toks.next() {
                Some(Token::Word(w)) => {
                    let name = match w.quote_style {
                        Some(_) => w.value,
                        None => w.value.to_lowercase(),
                    };
                    if tables.contains(&name) {
                        return Err(plan_err!("{word}: table {name} is named twice"));
                    }
                    tables.push(name);
                }
                other => {
                    return Err(plan_err!(
                        "{word}: expected a table name, found {}; write {}",
                        other.map_or("the end".into(), |t| t.to_string()),
                        usage()
                    ))
                }
            }
            if toks.peek() == Some(&Token::Comma) {
                toks.next();
                continue;
            }
            break;
        }
    }
    let to = if backup { "to" } else { "from" };
    if !keyword(toks.peek(), to) {
        return Err(plan_err!(
            "{word}: expected {} 'directory', found {}; write {}",
            to.to_uppercase(),
            toks.peek().map_or("the end".into(), |t| t.to_string()),
            usage()
        ));
    }
    toks.next();
    let location = match toks.next() {
        Some(Token::SingleQuotedString(s)) if !s.trim().is_empty() => s,
        other => {
            return Err(plan_err!(
                "{word}: expected the directory as a quoted string, found {}; write {}",
                other.map_or("the end".into(), |t| t.to_string()),
                usage()
            ))
        }
    };
    let mut replace = false;
    if !backup && keyword(toks.peek(), "with") {
        toks.next();
        if !keyword(toks.peek(), "replace") {
            return Err(plan_err!(
                "RESTORE: the only option is WITH REPLACE; write {}",
                usage()
            ));
        }
        toks.next();
        replace = true;
    }
    if let Some(extra) = toks.next() {
        return Err(plan_err!(
            "{word}: unexpected {extra} after the directory; write {}",
            usage()
        ));
    }
    Ok(if backup {
        BackupStatement::Backup { tables, location }
    } else {
        BackupStatement::Restore {
            tables,
            location,
            replace,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> BackupStatement {
        parse(text).expect("a backup statement").expect("parses")
    }

    fn err(text: &str) -> String {
        parse(text)
            .expect("a backup statement")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn statements_parse_with_their_tables_location_and_option() {
        assert_eq!(
            ok("BACKUP TO '/tmp/b1';"),
            BackupStatement::Backup {
                tables: vec![],
                location: "/tmp/b1".into()
            }
        );
        assert_eq!(
            ok("backup table Orders, \"LineItem\" to 'file:///b'"),
            BackupStatement::Backup {
                tables: vec!["orders".into(), "LineItem".into()],
                location: "file:///b".into()
            }
        );
        assert_eq!(
            ok("RESTORE TABLE nation FROM 'b' WITH REPLACE"),
            BackupStatement::Restore {
                tables: vec!["nation".into()],
                location: "b".into(),
                replace: true
            }
        );
        assert_eq!(
            ok("restore from 'it''s'"),
            BackupStatement::Restore {
                tables: vec![],
                location: "it's".into(),
                replace: false
            }
        );
        assert!(parse("SELECT 1").is_none());
        assert!(parse("  ").is_none());
    }

    #[test]
    fn malformed_statements_say_what_was_expected() {
        assert!(err("BACKUP '/tmp'").contains("expected TO 'directory'"));
        assert!(err("BACKUP TABLE TO '/x'").contains("expected TO"));
        assert!(err("BACKUP TABLE , x TO '/x'").contains("expected a table name"));
        assert!(err("BACKUP TO /tmp").contains("quoted string"));
        assert!(err("BACKUP TO ''").contains("quoted string"));
        assert!(err("RESTORE FROM 'x' WITH OVERWRITE").contains("WITH REPLACE"));
        assert!(err("BACKUP TO 'x' WITH REPLACE").contains("unexpected WITH"));
        assert!(err("RESTORE TO 'x'").contains("expected FROM"));
        assert!(err("BACKUP TABLE t, T TO 'x'").contains("table t is named twice"));
    }
}
