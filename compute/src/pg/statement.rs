//! What the PostgreSQL front end does with a statement's text before the
//! engine sees it: splitting a simple Query into its statements,
//! answering the session's own statements (transaction control, `SET`,
//! `SHOW`, `RESET`, `DISCARD`), rewriting what PostgreSQL tools send
//! into SQL DataFusion plans, and the CommandComplete tag of each.
//!
//! Transaction control and settings are the session's (`session.rs`):
//! they never reach the engine, except `statement_timeout`, which the
//! engine keeps for every front end (`crate::sql::settings`).
//!
//! Tools' catalog queries are written for PostgreSQL's parser: schema-
//! qualified functions (`pg_catalog.pg_get_userbyid(…)`), `::regclass`
//! casts, `OPERATOR(pg_catalog.~)`, `COLLATE pg_catalog.default`.
//! `datafusion-pg-catalog`'s parser rewrites them; a statement is
//! rewritten only when it reads `pg_catalog` or `information_schema`, or
//! uses such syntax, so ordinary queries reach the engine as they were
//! typed (same text, same plan cache entry, same errors).

use datafusion::sql::sqlparser::ast::{BinaryOperator, DataType, Expr, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::{plan_err, Error, Result};

/// The statements of a simple Query's text, split at top-level
/// semicolons (not inside quotes, dollar quotes, identifiers or
/// comments); empty ones are dropped.
pub fn split(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        // A doubled quote stays inside.
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'$' => {
                // $tag$ … $tag$ (a placeholder $1 has no closing $).
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map(|p| i + 1 + p);
                match tag_end {
                    Some(e)
                        if b[e] == b'$' && !b[i + 1..e].first().is_some_and(u8::is_ascii_digit) =>
                    {
                        let tag = &text[i..=e];
                        match text[e + 1..].find(tag) {
                            Some(p) => i = e + 1 + p + tag.len(),
                            None => i = b.len(),
                        }
                    }
                    _ => i += 1,
                }
            }
            b';' => {
                out.push(&text[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push(&text[start.min(text.len())..]);
    out.into_iter()
        .filter(|s| !crate::sql::skip_comments(s).trim().is_empty())
        .collect()
}

/// The isolation levels a transaction may ask for. Quarry runs every
/// transaction at snapshot isolation, which PostgreSQL calls REPEATABLE
/// READ; a weaker level asked for gets it too (the standard allows a
/// stronger one), SERIALIZABLE is refused rather than pretended.
fn check_isolation(words: &[String]) -> Result<()> {
    let Some(at) = words.iter().position(|w| w == "isolation") else {
        return Ok(());
    };
    let level = words.get(at + 2..).unwrap_or_default();
    match level.first().map(String::as_str) {
        Some("serializable") => Err(Error::InvalidInput(
            "unsupported: SERIALIZABLE; Quarry runs transactions at snapshot isolation, \
             which PostgreSQL calls REPEATABLE READ"
                .into(),
        )),
        Some("repeatable") | Some("read") => Ok(()),
        _ => Err(plan_err!(
            "syntax error: expected an isolation level after ISOLATION LEVEL"
        )),
    }
}

/// A statement the session answers itself.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionStatement {
    Begin,
    Commit,
    Rollback,
    /// `SET name = value` (`None`: `SET name TO DEFAULT`).
    Set(String, Option<String>),
    /// `SET LOCAL name = value`: until the transaction ends.
    SetLocal(String, Option<String>),
    /// `SET TRANSACTION …` and `SET SESSION CHARACTERISTICS …`: the
    /// level is checked, nothing changes.
    SetTransaction,
    Reset(String),
    ResetAll,
    Show(String),
    ShowAll,
    /// `DISCARD ALL`: the settings back to their defaults.
    Discard,
    /// `DEALLOCATE …`: SQL-level prepared statements, of which there are
    /// none (protocol-level ones live in the connection).
    Deallocate,
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
    RollbackTo(String),
}

/// Words of `sql` (lower case, quotes kept), without comments and a
/// trailing semicolon.
fn words(sql: &str) -> Vec<String> {
    crate::sql::skip_comments(sql)
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect()
}

/// A setting's value as written: quotes taken off.
fn unquote(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        return v[1..v.len() - 1].replace("''", "'");
    }
    v.to_string()
}

/// The session statement `sql` is, if it is one (an error when it is
/// one, malformed or refused); None for the engine's statements.
pub fn session_statement(sql: &str) -> Option<Result<SessionStatement>> {
    use SessionStatement as S;
    let w = words(sql);
    let first = w.first()?.as_str();
    let rest = &w[1..];
    let statement = match first {
        "begin" | "start" => {
            if first == "start" && rest.first().map(String::as_str) != Some("transaction") {
                return None;
            }
            check_isolation(rest).map(|()| S::Begin)
        }
        "commit" | "end" => Ok(S::Commit),
        "rollback" | "abort" => match rest.iter().position(|w| w == "to") {
            Some(at) => savepoint_name(&rest[at + 1..]).map(S::RollbackTo),
            None => Ok(S::Rollback),
        },
        "savepoint" => savepoint_name(rest).map(S::Savepoint),
        "release" => savepoint_name(rest).map(S::Release),
        "discard" => Ok(S::Discard),
        "deallocate" => Ok(S::Deallocate),
        "show" => match rest {
            [name] if name == "all" => Ok(S::ShowAll),
            [t, i, l] if t == "transaction" && i == "isolation" && l == "level" => {
                Ok(S::Show("transaction_isolation".into()))
            }
            // Quarry's own: SHOW TABLES, SHOW USERS, SHOW statement_timeout,
            // SHOW mpp (the session's, else compute's).
            [name]
                if matches!(
                    name.as_str(),
                    "tables" | "users" | "statement_timeout" | "mpp"
                ) =>
            {
                return None
            }
            [name] => Ok(S::Show(name.trim_matches('"').to_string())),
            _ => return None,
        },
        "reset" => match rest {
            [name] if name == "all" => Ok(S::ResetAll),
            [name] if name == "statement_timeout" => return None,
            [name] => Ok(S::Reset(name.trim_matches('"').to_string())),
            _ => Err(plan_err!(
                "syntax error: RESET takes one setting's name, or ALL"
            )),
        },
        "set" => {
            let local = rest.first().is_some_and(|w| w == "local");
            match set_statement(sql, rest)? {
                Ok(S::Set(name, value)) if local => Ok(S::SetLocal(name, value)),
                other => other,
            }
        }
        _ => return None,
    };
    Some(statement)
}

/// The name in `[SAVEPOINT] name`.
fn savepoint_name(words: &[String]) -> Result<String> {
    match words {
        [kw, name] if kw == "savepoint" => Ok(name.trim_matches('"').to_string()),
        [name] => Ok(name.trim_matches('"').to_string()),
        _ => Err(plan_err!("syntax error: expected a savepoint's name")),
    }
}

/// `SET …` (None for `SET statement_timeout`, the engine's).
fn set_statement(sql: &str, rest: &[String]) -> Option<Result<SessionStatement>> {
    use SessionStatement as S;
    let mut rest = rest;
    if let Some(w) = rest.first() {
        if w == "session" && rest.get(1).is_some_and(|c| c == "characteristics") {
            return Some(check_isolation(rest).map(|()| S::SetTransaction));
        }
        if w == "session" || w == "local" {
            rest = &rest[1..];
        }
    }
    let name = rest.first()?.clone();
    if name == "transaction" {
        return Some(check_isolation(rest).map(|()| S::SetTransaction));
    }
    if name == "time" && rest.get(1).is_some_and(|z| z == "zone") {
        let value = original_tail(sql, "zone").map(|v| unquote(&v));
        return Some(Ok(S::Set(
            "timezone".into(),
            value
                .filter(|v| !v.eq_ignore_ascii_case("default") && !v.eq_ignore_ascii_case("local")),
        )));
    }
    if name == "names" {
        let value = original_tail(sql, "names").map(|v| unquote(&v));
        return Some(Ok(S::Set("client_encoding".into(), value)));
    }
    // name = value | name TO value, possibly without spaces around '='.
    let (name, value) = match name.split_once('=') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (name, None),
    };
    if name == "statement_timeout" {
        return None;
    }
    let text = crate::sql::skip_comments(sql).trim().trim_end_matches(';');
    // The value as typed (case kept): after the first '=' or ' to '.
    let lower = text.to_ascii_lowercase();
    let after = match (lower.find('='), value) {
        (Some(eq), _) => Some(text[eq + 1..].trim().to_string()),
        (None, _) => lower
            .find(" to ")
            .map(|at| text[at + 4..].trim().to_string()),
    };
    let Some(after) = after.filter(|v| !v.is_empty()) else {
        return Some(Err(plan_err!(
            "syntax error: SET {name} needs = or TO and a value"
        )));
    };
    let value = match after.eq_ignore_ascii_case("default") {
        true => None,
        false => Some(after.split(',').map(unquote).collect::<Vec<_>>().join(", ")),
    };
    Some(Ok(S::Set(name.trim_matches('"').to_string(), value)))
}

/// The original text of `sql` after the word `word` (case kept).
fn original_tail(sql: &str, word: &str) -> Option<String> {
    let text = crate::sql::skip_comments(sql).trim().trim_end_matches(';');
    let lower = text.to_ascii_lowercase();
    let at = lower.find(word)?;
    Some(text[at + word.len()..].trim().to_string())
}

/// How a statement the engine ran is reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Rows, then `SELECT n`.
    Rows,
    /// `INSERT 0 n`, `UPDATE n`, `DELETE n`: the count the engine answered.
    Count(&'static str),
    /// A tag alone: `CREATE TABLE`, `DROP VIEW`, `SET`.
    Tag(String),
}

/// The outcome of an engine statement, by its first words.
pub fn outcome(sql: &str) -> Outcome {
    let w = words(sql);
    let word = |i: usize| w.get(i).map(String::as_str).unwrap_or_default();
    match word(0) {
        "insert" => Outcome::Count("INSERT"),
        "update" => Outcome::Count("UPDATE"),
        "delete" => Outcome::Count("DELETE"),
        "create" | "drop" | "alter" => {
            let mut object = word(1);
            // CREATE [UNIQUE] INDEX, CREATE OR REPLACE VIEW, CREATE EXTERNAL TABLE.
            if object == "unique" || object == "external" {
                object = word(2);
            }
            if object == "or" {
                object = word(3);
            }
            // PostgreSQL reports users as roles.
            let object = match object {
                "user" => "role",
                o => o,
            };
            Outcome::Tag(format!("{} {}", word(0), object).to_ascii_uppercase())
        }
        "set" | "reset" => Outcome::Tag("SET".into()),
        _ => Outcome::Rows,
    }
}

/// Whether `sql` is a statement that Quarry does not run inside a
/// transaction: CREATE, DROP and ALTER of tables, views, indexes and
/// users, SHOW USERS, BACKUP, RESTORE, COPY (its batches are
/// transactions of their own outside one).
pub fn runs_outside_transactions(sql: &str) -> bool {
    let w = words(sql);
    let word = |i: usize| w.get(i).map(String::as_str);
    matches!(
        word(0),
        Some("create" | "drop" | "alter" | "backup" | "restore" | "copy")
    ) || (word(0) == Some("show") && word(1) == Some("users"))
}

/// True if `sql` needs PostgreSQL's catalog rewriting (it reads the
/// catalogs, or uses syntax only PostgreSQL's parser takes).
fn needs_rewrite(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    [
        "pg_",
        "information_schema",
        "::reg",
        "operator(",
        "collate",
        "current_user",
        "current_catalog",
        "current_schema",
        "version()",
        "array[",
        "generate_subscripts",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// `sql` as DataFusion plans it: rewritten by `datafusion-pg-catalog`
/// where it needs to be ([`needs_rewrite`]); as typed otherwise, or when
/// the rewriter cannot parse it (the engine then names the error).
pub fn rewrite(sql: &str) -> String {
    static PARSER: std::sync::OnceLock<PostgresCompatibilityParser> = std::sync::OnceLock::new();
    if !needs_rewrite(sql) {
        return sql.to_string();
    }
    let parser = PARSER.get_or_init(PostgresCompatibilityParser::new);
    let sql_in = search_path_lists(&regproc_literals(sql)).into_owned();
    let sql_in = generate_subscripts(&sql_in).into_owned();
    let sql_in = information_schema_views(&regclass_of_names(&sql_in)).into_owned();
    match parser.parse(&sql_in) {
        Ok(mut stmts) if stmts.len() == 1 => {
            let stmt = stmts.pop().expect("one");
            // Only queries: Quarry's own statements keep their words.
            match stmt {
                datafusion::sql::sqlparser::ast::Statement::Query(_) => stmt.to_string(),
                _ => sql.to_string(),
            }
        }
        _ => sql.to_string(),
    }
}

/// `sql` with each expression `change` rewrites (it says whether it
/// did). Text that does not parse, or where nothing changed, is returned
/// as it was: datafusion-pg-catalog knows some client queries by their
/// exact tokens, which re-printing would change.
fn rewrite_exprs(
    sql: &str,
    mut change: impl FnMut(&mut Expr) -> bool,
) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::ast::visit_expressions_mut;
    let Ok(mut stmts) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return sql.into();
    };
    let mut changed = false;
    for stmt in &mut stmts {
        let _ = visit_expressions_mut(stmt, |e| {
            changed |= change(e);
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
    match changed {
        true => printed(&stmts).into(),
        false => sql.into(),
    }
}

/// Statements as SQL text again.
fn printed(stmts: &[datafusion::sql::sqlparser::ast::Statement]) -> String {
    stmts
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The expression `text` is (None: it does not parse).
fn parse_expr(text: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// Whether a cast to `data_type` is one to PostgreSQL's type `name`
/// (`regclass`, `pg_catalog.regproc`, …).
fn casts_to(data_type: &DataType, name: &str) -> bool {
    let custom = match data_type {
        DataType::Regclass => return name == "regclass",
        DataType::Custom(custom, _) => custom.to_string().to_ascii_lowercase(),
        _ => return false,
    };
    custom.trim_start_matches("pg_catalog.") == name
}

/// `sql` with each cast of a built name to `regclass`
/// (`CAST(format('%I.%I', s, t) AS REGCLASS)`, Metabase's column query)
/// written as a look-up of the relation's OID by its quoted
/// `schema.table` name. `datafusion-pg-catalog` resolves casts of
/// literals (`'t'::regclass`) and of parameters, and reads a cast of a
/// column (`attrelid::regclass`) as the OID itself; a name built by an
/// expression it leaves to a cast to INT, which fails on the name. The
/// look-up is an equality, which DataFusion decorrelates; a built name
/// without its schema finds nothing (NULL).
fn regclass_of_names(sql: &str) -> std::borrow::Cow<'_, str> {
    if !sql.to_ascii_lowercase().contains("regclass") {
        return sql.into();
    }
    rewrite_exprs(sql, |e| {
        let Expr::Cast {
            data_type, expr, ..
        } = e
        else {
            return false;
        };
        let built = match expr.as_ref() {
            Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                ["format", "concat", "concat_ws", "quote_ident"].contains(&name.as_str())
            }
            Expr::BinaryOp {
                op: BinaryOperator::StringConcat,
                ..
            } => true,
            _ => false,
        };
        if !built || !casts_to(data_type, "regclass") {
            return false;
        }
        // (Aliases no client query uses, so that the name's own columns
        // stay the outer query's; quoted by the same `format` as the
        // name most likely was.)
        let lookup = parse_expr(&format!(
            "(SELECT quarry_rc.oid FROM pg_catalog.pg_class quarry_rc \
             JOIN pg_catalog.pg_namespace quarry_rn ON quarry_rc.relnamespace = quarry_rn.oid \
             WHERE format('%I.%I', quarry_rn.nspname, quarry_rc.relname) = {expr})"
        ));
        lookup.map(|l| *e = l).is_some()
    })
}

/// `sql` reading `information_schema.columns`, `table_constraints` and
/// `key_column_usage` from `pg_catalog` (`df/pg_catalog.rs`), which
/// serves them as PostgreSQL has them: DataFusion's information_schema
/// lacks the last two, and its `columns` has Arrow's type names and not
/// PostgreSQL's `udt_name`, which Metabase's column query reads.
fn information_schema_views(sql: &str) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::ast::{visit_relations_mut, Ident, ObjectName};
    const VIEWS: [&str; 3] = ["columns", "table_constraints", "key_column_usage"];
    if !sql.to_ascii_lowercase().contains("information_schema") {
        return sql.into();
    }
    let Ok(mut stmts) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return sql.into();
    };
    let mut changed = false;
    for stmt in &mut stmts {
        let _ = visit_relations_mut(stmt, |name| {
            let parts: Vec<String> = name
                .0
                .iter()
                .map(|p| p.to_string().trim_matches('"').to_ascii_lowercase())
                .collect();
            if let [schema, view] = parts.as_slice() {
                if schema == "information_schema" && VIEWS.contains(&view.as_str()) {
                    *name = ObjectName::from(vec![Ident::new("pg_catalog"), Ident::new(view)]);
                    changed = true;
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
    match changed {
        true => printed(&stmts).into(),
        false => sql.into(),
    }
}

/// `sql` with each `x IN (subquery over the search_path)` written as `x
/// IN (current_schema())`. Grafana lists tables and columns of the
/// schemas on the search path with a subquery that reads
/// `string_to_array(current_setting('search_path'), ',')` as a table,
/// which DataFusion cannot (and `datafusion-pg-catalog` replaces it by
/// `''`, which matches nothing: no columns at all). Quarry's only schema
/// is `public`, the current schema, so the list is that one name.
fn search_path_lists(sql: &str) -> std::borrow::Cow<'_, str> {
    let marker = |text: &str| {
        text.to_ascii_lowercase()
            .replace(char::is_whitespace, "")
            .contains("string_to_array(current_setting('search_path')")
    };
    if !marker(sql) {
        return sql.into();
    }
    let Some(current) = parse_expr("current_schema()") else {
        return sql.into();
    };
    rewrite_exprs(sql, |e| match e {
        Expr::InSubquery {
            expr,
            subquery,
            negated,
        } if marker(&subquery.to_string()) => {
            *e = Expr::InList {
                expr: expr.clone(),
                list: vec![current.clone()],
                negated: *negated,
            };
            true
        }
        _ => false,
    })
}

/// `sql` with each `'name'::regproc` written as the function's name,
/// `'name'`: `pg_catalog` keeps functions (`pg_type.typinput`) by name
/// where PostgreSQL keeps their OIDs (pgjdbc compares them). Text that
/// does not parse, or has no such cast, is returned as it was.
fn regproc_literals(sql: &str) -> std::borrow::Cow<'_, str> {
    if !sql.to_ascii_lowercase().contains("::regproc") {
        return sql.into();
    }
    rewrite_exprs(sql, |e| {
        let Expr::Cast {
            data_type, expr, ..
        } = e
        else {
            return false;
        };
        let name = match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => s.clone(),
                _ => return false,
            },
            _ => return false,
        };
        if !casts_to(data_type, "regproc") {
            return false;
        }
        let f = name
            .strip_prefix("pg_catalog.")
            .unwrap_or(&name)
            .to_string();
        *e = Expr::value(Value::SingleQuotedString(f));
        true
    })
}

/// `sql` with each `generate_subscripts(a, d)` written as
/// `unnest(generate_series(1, array_length(a, d)))`: the subscripts of an
/// array as rows beside `unnest(a)`, which SQLAlchemy's primary key and
/// index queries select together (`unnest(indkey) AS attnum,
/// generate_subscripts(indkey, 1) AS ord`). DataFusion has no
/// set-returning functions in a select list but unnest, and runs several
/// unnests in step, as PostgreSQL runs several set-returning functions.
fn generate_subscripts(sql: &str) -> std::borrow::Cow<'_, str> {
    if !sql.to_ascii_lowercase().contains("generate_subscripts") {
        return sql.into();
    }
    rewrite_exprs(sql, |e| {
        use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
        let Expr::Function(f) = e else {
            return false;
        };
        let name = f.name.to_string().to_ascii_lowercase();
        if !matches!(
            name.as_str(),
            "generate_subscripts" | "pg_catalog.generate_subscripts"
        ) {
            return false;
        }
        let FunctionArguments::List(list) = &f.args else {
            return false;
        };
        let args: Vec<String> = list
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.to_string()),
                _ => None,
            })
            .collect();
        let [array, dimension] = args.as_slice() else {
            return false;
        };
        match parse_expr(&format!(
            "unnest(generate_series(1, array_length({array}, {dimension})))"
        )) {
            Some(new) => {
                *e = new;
                true
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStatement as S;

    #[test]
    fn statements_split_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(split("SELECT 1; SELECT 2;"), ["SELECT 1", " SELECT 2"]);
        assert_eq!(split("SELECT ';' ; -- a; b\n"), ["SELECT ';' "]);
        assert_eq!(split("SELECT \"a;b\" FROM t"), ["SELECT \"a;b\" FROM t"]);
        assert_eq!(
            split("SELECT $$a;b$$; SELECT $1"),
            ["SELECT $$a;b$$", " SELECT $1"]
        );
        assert_eq!(
            split("/* x; */ SELECT 'it''s;'"),
            ["/* x; */ SELECT 'it''s;'"]
        );
        assert!(split(" ; ;").is_empty());
    }

    #[test]
    fn the_session_answers_transaction_control_and_settings() {
        let s = |sql: &str| session_statement(sql).map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(s("BEGIN"), Some(Ok(S::Begin)));
        assert_eq!(
            s("start transaction isolation level repeatable read"),
            Some(Ok(S::Begin))
        );
        assert!(s("BEGIN ISOLATION LEVEL SERIALIZABLE")
            .unwrap()
            .unwrap_err()
            .contains("snapshot isolation"));
        assert_eq!(s("end;"), Some(Ok(S::Commit)));
        assert_eq!(s("ABORT"), Some(Ok(S::Rollback)));
        assert_eq!(
            s("ROLLBACK TO SAVEPOINT a"),
            Some(Ok(S::RollbackTo("a".into())))
        );
        assert_eq!(s("release sp_1"), Some(Ok(S::Release("sp_1".into()))));
        assert_eq!(s("SAVEPOINT \"x\""), Some(Ok(S::Savepoint("x".into()))));
        assert_eq!(
            s("SET application_name = 'psql'"),
            Some(Ok(S::Set("application_name".into(), Some("psql".into()))))
        );
        assert_eq!(
            s("set extra_float_digits to 3"),
            Some(Ok(S::Set("extra_float_digits".into(), Some("3".into()))))
        );
        assert_eq!(
            s("SET DateStyle=ISO"),
            Some(Ok(S::Set("datestyle".into(), Some("ISO".into()))))
        );
        assert_eq!(
            s("SET search_path TO public, pg_catalog"),
            Some(Ok(S::Set(
                "search_path".into(),
                Some("public, pg_catalog".into())
            )))
        );
        assert_eq!(
            s("SET TIME ZONE 'UTC'"),
            Some(Ok(S::Set("timezone".into(), Some("UTC".into()))))
        );
        assert_eq!(
            s("SET LOCAL TimeZone TO 'Europe/Berlin'"),
            Some(Ok(S::SetLocal(
                "timezone".into(),
                Some("Europe/Berlin".into())
            )))
        );
        assert_eq!(
            s("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            Some(Ok(S::SetTransaction))
        );
        assert_eq!(
            s("SHOW TRANSACTION ISOLATION LEVEL"),
            Some(Ok(S::Show("transaction_isolation".into())))
        );
        assert_eq!(
            s("show server_version"),
            Some(Ok(S::Show("server_version".into())))
        );
        assert_eq!(s("RESET ALL"), Some(Ok(S::ResetAll)));
        // The engine's.
        assert_eq!(s("SET statement_timeout = 100"), None);
        assert_eq!(s("SHOW TABLES"), None);
        assert_eq!(s("SELECT 1"), None);
        assert_eq!(s("START"), None);
    }

    #[test]
    fn engine_statements_are_tagged_as_postgresql_tags_them() {
        assert_eq!(
            outcome("insert into t values (1)"),
            Outcome::Count("INSERT")
        );
        assert_eq!(
            outcome("CREATE TABLE t (a INT)"),
            Outcome::Tag("CREATE TABLE".into())
        );
        assert_eq!(
            outcome("create unique index i on t (a)"),
            Outcome::Tag("CREATE INDEX".into())
        );
        assert_eq!(
            outcome("CREATE OR REPLACE VIEW v AS SELECT 1"),
            Outcome::Tag("CREATE VIEW".into())
        );
        assert_eq!(
            outcome("CREATE USER u PASSWORD 'p'"),
            Outcome::Tag("CREATE ROLE".into())
        );
        assert_eq!(outcome(" -- x\nSELECT 1"), Outcome::Rows);
        assert_eq!(outcome("SHOW TABLES"), Outcome::Rows);
    }

    #[test]
    fn search_path_subqueries_are_the_current_schema() {
        let grafana = "SELECT column_name FROM information_schema.columns WHERE \
            quote_ident(table_schema) IN (SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user \
            ELSE trim(s[i]) END FROM generate_series(\
            array_lower(string_to_array(current_setting('search_path'),','),1), \
            array_upper(string_to_array(current_setting('search_path'),','),1)) as i, \
            string_to_array(current_setting('search_path'),',') s)";
        let out = rewrite(grafana);
        assert!(
            out.ends_with("WHERE quote_ident(table_schema) IN (current_schema())"),
            "{out}"
        );
        assert_eq!(search_path_lists("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn subscripts_beside_their_unnest_are_an_unnest_of_the_subscripts() {
        // SQLAlchemy's primary key query (its inner select).
        let sqlalchemy = "SELECT conname, unnest(pg_catalog.pg_index.indkey) AS attnum, \
            generate_subscripts(pg_catalog.pg_index.indkey, $1::INTEGER) AS ord FROM pg_catalog.pg_index";
        assert_eq!(
            generate_subscripts(sqlalchemy),
            "SELECT conname, unnest(pg_catalog.pg_index.indkey) AS attnum, \
             unnest(generate_series(1, array_length(pg_catalog.pg_index.indkey, $1::INTEGER))) \
             AS ord FROM pg_catalog.pg_index"
        );
        assert_eq!(generate_subscripts("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn built_names_cast_to_regclass_are_looked_up() {
        let metabase = "SELECT col_description(CAST(CAST(FORMAT('%I.%I', c.table_schema, \
            c.table_name) AS REGCLASS) AS OID), 1) FROM information_schema.columns AS c";
        let out = regclass_of_names(metabase);
        assert!(
            out.contains("WHERE format('%I.%I', quarry_rn.nspname, quarry_rc.relname) = FORMAT("),
            "{out}"
        );
        // Casts of columns and literals are left to datafusion-pg-catalog,
        // and text without a rewrite keeps its form (psql's \d sends a
        // statement the crate knows by its tokens).
        let psql = "SELECT oid, stxrelid::pg_catalog.regclass FROM pg_catalog.pg_statistic_ext";
        assert_eq!(regclass_of_names(psql), psql);
        // Views are renamed as tables, not as text.
        assert_eq!(
            information_schema_views(
                "SELECT 'information_schema.columns' FROM \"information_schema\".\"columns\" AS c"
            ),
            "SELECT 'information_schema.columns' FROM pg_catalog.columns AS c"
        );
        assert_eq!(
            information_schema_views("SELECT * FROM information_schema.tables"),
            "SELECT * FROM information_schema.tables"
        );
        assert_eq!(
            regproc_literals("SELECT 'x'::regproc::oid"),
            "SELECT 'x'::oid"
        );
    }

    #[test]
    fn only_catalog_queries_are_rewritten() {
        let q = "select  sum(x) from t";
        assert_eq!(rewrite(q), q);
        let r = rewrite("SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c");
        assert!(!r.contains("pg_catalog.pg_get_userbyid"), "{r}");
        let r =
            regproc_literals("SELECT typinput='pg_catalog.array_in'::regproc AS a FROM pg_type");
        assert_eq!(r, "SELECT typinput = 'array_in' AS a FROM pg_type");
    }
}
