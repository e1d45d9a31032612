//! Quarry's errors as PostgreSQL errors: a SQLSTATE code a client can act
//! on, from the error's category and, within "invalid input", from what
//! it names.
//!
//! | Quarry | SQLSTATE |
//! |---|---|
//! | syntax | 42601 syntax_error |
//! | unknown table or view | 42P01 undefined_table |
//! | unknown column | 42703 undefined_column |
//! | unknown function | 42883 undefined_function |
//! | division by zero | 22012 division_by_zero |
//! | a malformed value | 22P02 invalid_text_representation |
//! | duplicate key | 23505 unique_violation |
//! | a table or view that exists | 42P07 duplicate_table |
//! | another object that exists (user, index) | 42710 duplicate_object |
//! | NOT NULL column given NULL | 23502 not_null_violation |
//! | a statement in a failed transaction | 25P02 in_failed_sql_transaction |
//! | unsupported | 0A000 feature_not_supported |
//! | any other invalid input | 42000 syntax_error_or_access_rule_violation |
//! | overflow | 22003 numeric_value_out_of_range |
//! | write conflict | 40001 serialization_failure |
//! | deadline, cancel | 57014 query_canceled |
//! | memory | 53200 out_of_memory |
//! | other resource limits | 54000 program_limit_exceeded |
//! | a store or meta unavailable | 57P03 cannot_connect_now (retry) |
//! | no login | 28000 invalid_authorization_specification |
//! | not allowed | 42501 insufficient_privilege |
//! | internal | XX000 internal_error |

use pgwire::error::{ErrorInfo, PgWireError};

use crate::Error;

/// The SQLSTATE of `e`.
pub fn code(e: &Error) -> &'static str {
    match e {
        Error::InvalidInput(m) => invalid_input_code(m),
        Error::Overflow(_) => "22003",
        Error::Unavailable(_) => "57P03",
        Error::Deadline(_) | Error::Cancelled(_) => "57014",
        Error::ResourceExhausted(m) if m.contains("memory") => "53200",
        Error::ResourceExhausted(_) => "54000",
        Error::Internal(_) => "XX000",
        Error::Conflict(_) => "40001",
        Error::Unauthenticated(_) => "28000",
        Error::PermissionDenied(_) => "42501",
    }
}

fn invalid_input_code(m: &str) -> &'static str {
    let lower = m.to_ascii_lowercase();
    let has = |w: &str| lower.contains(w);
    if has("rolled back after an error") || has("current transaction is aborted") {
        "25P02"
    } else if has("syntax error")
        || has("sql parser error")
        || has("expected one statement")
        || has("expected:")
    {
        "42601"
    } else if has("unknown table") || (has("table '") && has("not found")) || has("no table named")
    {
        "42P01"
    } else if has("unknown column") || has("no field named") || has("column") && has("not found") {
        "42703"
    } else if has("invalid function") || has("unknown function") || has("no function matches") {
        "42883"
    } else if has("division by zero") || has("divide by zero") {
        "22012"
    } else if has("invalid input syntax")
        || has("cannot cast")
        || has("cast error")
        || has("parser error")
    {
        "22P02"
    } else if has("duplicate key") {
        "23505"
    } else if has("copy binary data") {
        // bad_copy_file_format (checked before "not supported": a binary
        // COPY with OIDs says both).
        "22P04"
    } else if has("already exists") && (has("table") || has("view")) {
        "42P07"
    } else if has("already exists") {
        "42710"
    } else if has("null value") || has("not null") {
        "23502"
    } else if has("unsupported") || has("not supported") || has("not implemented") {
        "0A000"
    } else {
        "42000"
    }
}

/// `e` as the ErrorResponse a client gets.
pub fn to_pg(e: Error) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code(&e).into(),
        e.to_string(),
    )))
}

/// An error of the session's own (`code`, message).
pub fn pg_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_messages_map_to_sqlstates() {
        let c = |e: Error| code(&e);
        assert_eq!(
            c(Error::InvalidInput(
                "unknown table 'x'; tables are: t".into()
            )),
            "42P01"
        );
        assert_eq!(
            c(Error::InvalidInput(
                "SQL error: ParserError(\"Expected: an expression\")".into()
            )),
            "42601"
        );
        assert_eq!(
            c(Error::InvalidInput(
                "Schema error: No field named nope. Valid fields are t.a.".into()
            )),
            "42703"
        );
        assert_eq!(c(Error::InvalidInput("division by zero".into())), "22012");
        assert_eq!(
            c(Error::InvalidInput(
                "COPY binary data: row 3 has 2 fields for 5 columns".into()
            )),
            "22P04"
        );
        assert_eq!(
            c(Error::InvalidInput(
                "the transaction was rolled back after an error (x); end it with ROLLBACK".into()
            )),
            "25P02"
        );
        assert_eq!(c(Error::Overflow("DECIMAL overflow".into())), "22003");
        assert_eq!(c(Error::Conflict("write conflict".into())), "40001");
        assert_eq!(c(Error::Deadline("deadline".into())), "57014");
        assert_eq!(
            c(Error::ResourceExhausted(
                "past the query's memory limit".into()
            )),
            "53200"
        );
        assert_eq!(c(Error::Internal("bug".into())), "XX000");
    }
}
