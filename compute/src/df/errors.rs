//! DataFusion's errors in Quarry's categories and words.

use datafusion::common::DataFusionError;
use quarry_proto::meta::ViewDef;

use crate::Error;

/// DataFusion's "table 'quarry.public.x' not found", in Quarry's words:
/// the unknown name and the tables there are.
pub(super) fn unknown_table(e: DataFusionError, tables: &[String], views: &[ViewDef]) -> Error {
    if let DataFusionError::Plan(m) = e.find_root() {
        if let Some(name) = m
            .strip_prefix("table '")
            .and_then(|r| r.strip_suffix("' not found"))
        {
            let name = name.rsplit('.').next().unwrap_or(name);
            let mut names: Vec<&str> = tables.iter().map(String::as_str).collect();
            names.extend(views.iter().map(|v| v.name.as_str()));
            names.sort();
            return Error::InvalidInput(if names.is_empty() {
                format!("unknown table '{name}': there are no tables yet")
            } else {
                format!("unknown table '{name}'; tables are: {}", names.join(", "))
            });
        }
    }
    from_df(e)
}

/// A DataFusion error as Quarry's, by what the caller does next: Quarry's
/// own errors (from the regions) come back as they were; planning errors
/// are the user's to fix.
pub fn from_df(e: DataFusionError) -> Error {
    if let Some(q) = quarry_error(&e) {
        return q;
    }
    let root = e.find_root();
    if let Some(q) = quarry_error(root) {
        return q;
    }
    let msg = e.strip_backtrace();
    match root {
        DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::SQL(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::Configuration(_) => Error::InvalidInput(msg),
        DataFusionError::ResourcesExhausted(_) => Error::ResourceExhausted(format!(
            "{msg} (past the query's memory limit, compute.query-memory-limit-mb)"
        )),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            // Arrow's own words, without the planner rule or operator
            // that met them ("Overflow happened on: a + b").
            arrow::error::ArrowError::ArithmeticOverflow(m) => {
                Error::Overflow(format!("arithmetic overflow: {m}"))
            }
            // Kernels such as abs() report overflow this way, casts to a
            // narrower DECIMAL as "too large to store".
            arrow::error::ArrowError::ComputeError(m)
            | arrow::error::ArrowError::CastError(m)
            | arrow::error::ArrowError::InvalidArgumentError(m)
                if out_of_range(m) =>
            {
                Error::Overflow(msg)
            }
            // PostgreSQL's words, whichever kernel found it.
            arrow::error::ArrowError::DivideByZero => {
                Error::InvalidInput("division by zero".into())
            }
            arrow::error::ArrowError::CastError(_)
            | arrow::error::ArrowError::InvalidArgumentError(_)
            | arrow::error::ArrowError::ParseError(_) => Error::InvalidInput(msg),
            _ => Error::Internal(msg),
        },
        DataFusionError::Execution(m) if out_of_range(m) => Error::Overflow(msg),
        DataFusionError::Execution(_) => Error::InvalidInput(msg),
        _ => Error::Internal(msg),
    }
}

/// Whether a kernel's message says a value did not fit its type. Quoted
/// text (a value the user wrote, `CAST('overflow' AS BIGINT)`) is not
/// read.
fn out_of_range(m: &str) -> bool {
    let said: String = m
        .split('\'')
        .step_by(2)
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    said.contains("overflow")
        || said.contains("too large to store")
        || said.contains("exceeds the representable")
        || said.contains("out of range")
}

fn quarry_error(e: &DataFusionError) -> Option<Error> {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<Error>().cloned(),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::ExternalError(b) => b.downcast_ref::<Error>().cloned(),
            _ => None,
        },
        DataFusionError::Shared(s) => quarry_error(s),
        DataFusionError::Context(_, inner) => quarry_error(inner),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{from_df, out_of_range};
    use crate::Error;

    #[test]
    fn overflow_is_read_from_the_message_not_the_value() {
        assert!(out_of_range(
            "100000 is too large to store in a Decimal128 of precision 3. Max is 999"
        ));
        assert!(out_of_range(
            "Overflow happened on: 9223372036854775807 + 1"
        ));
        assert!(!out_of_range(
            "Cannot cast string 'overflow' to value of Int64 type"
        ));
    }

    #[test]
    fn an_arithmetic_overflow_says_what_overflowed_and_nothing_else() {
        let arrow = arrow::error::ArrowError::ArithmeticOverflow(
            "Overflow happened on: 9223372036854775807 + 1".into(),
        );
        let planned =
            datafusion::common::DataFusionError::from(arrow).context("checked_integer_constants");
        assert_eq!(
            from_df(planned),
            Error::Overflow(
                "arithmetic overflow: Overflow happened on: 9223372036854775807 + 1".into()
            )
        );
    }
}
