//! The SQL front end under fuzzing: token soup drawn from SQL's vocabulary,
//! random text, and deep nesting go through the parser every statement
//! goes through ([`super::parse`]: size check, user statements, the
//! nesting guard, DataFusion's parser, the conversion of DDL and DML).
//! Each is parsed or refused with an error; none panics or overflows the
//! stack.

use proptest::prelude::*;

use super::parse;

const WORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "LIMIT",
    "HAVING",
    "JOIN",
    "ON",
    "AS",
    "UNION",
    "ALL",
    "DISTINCT",
    "EXPLAIN",
    "ANALYZE",
    "WITH",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "DROP",
    "ALTER",
    "USER",
    "USERS",
    "PASSWORD",
    "IDENTIFIED",
    "IF",
    "NOT",
    "EXISTS",
    "PRIMARY",
    "KEY",
    "BIGINT",
    "INT",
    "DECIMAL",
    "VARCHAR",
    "DATE",
    "DOUBLE",
    "BOOLEAN",
    "NULL",
    "TRUE",
    "FALSE",
    "AND",
    "OR",
    "IN",
    "BETWEEN",
    "LIKE",
    "IS",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "INTERVAL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "FOR",
    "SHOW",
    "TABLES",
    "DESCRIBE",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "(",
    ")",
    ",",
    ";",
    "*",
    "+",
    "-",
    "/",
    "%",
    "=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "||",
    ".",
    "'a'",
    "'1994-01-01'",
    "''",
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "99999999999999999999999",
    "0.05",
    "1e308",
    "$1",
    "?",
    "lineitem",
    "t",
    "x",
    "l_quantity",
    "\"quoted\"",
    "'",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS), 0..60).prop_map(|w| w.join(" "))
}

/// `depth` parentheses around an expression, inside a SELECT.
fn nested() -> impl Strategy<Value = String> {
    (0usize..400, prop::sample::select(WORDS)).prop_map(|(depth, inner)| {
        format!(
            "SELECT {}{inner}{} FROM t",
            "(".repeat(depth),
            ")".repeat(depth)
        )
    })
}

/// Cases per property: 4000, or `QUARRY_FUZZ_CASES` for longer runs
/// (`docs/failure-tests.md`).
fn cases() -> u32 {
    std::env::var("QUARRY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn token_soup_is_parsed_or_refused(text in soup()) {
        let _ = parse(&text, 4 << 20);
    }

    #[test]
    fn any_text_is_parsed_or_refused(text in any::<String>()) {
        let _ = parse(&text, 4 << 20);
    }

    #[test]
    fn deep_nesting_is_parsed_or_refused(text in nested()) {
        let _ = parse(&text, 4 << 20);
    }
}
