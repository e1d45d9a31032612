//! A query's shape: its text with the constants of its WHERE comparisons
//! taken out (TiDB's non-prepared plan cache, DuckDB's and PostgreSQL's
//! generic plans), so that lookups that differ only in the value they
//! look for share one kept plan.
//!
//! WHY
//!
//! An indexed lookup sent as text (`… WHERE l_partkey = 1234`, as an ORM,
//! a dashboard or Python ADBC's `cursor.execute` sends it) carries a new
//! literal each time, so the plan cache, keyed by the statement's text,
//! never saw it before: each one was bound, optimized and physically
//! planned, ~1.5 ms of a ~6 ms lookup through ADBC
//! (`docs/performance.md`). With its constants as placeholders, the
//! statement is one shape, planned once; each run hands the values to the
//! region scans that read them, where they choose the index ranges and
//! the rows, as the literals did.
//!
//! WHAT IS TAKEN OUT
//!
//! Only the integer and string constants that a plain `SELECT`'s WHERE
//! clause compares with a column: `c = 5`, `5 < c`, `c IN (1, 2)`,
//! `c BETWEEN 1 AND 9`, under AND, OR and parentheses. Nothing in the
//! SELECT list (a constant there names its column), GROUP BY, ORDER BY
//! (positions) or LIMIT; nothing in a subquery, a CTE, a set operation or
//! a statement that already has placeholders. (A FOR UPDATE's read comes
//! here without its clause, taken off before planning: its rows are
//! locked apart from the plan.) Nothing over a view. Decimal
//! literals stay in the text (their precision and scale are part of their
//! type, and of the comparison's), as do dates and negative numbers.
//!
//! WHEN A SHAPE'S PLAN SERVES
//!
//! The shape is planned with placeholders `$1 … $n`, and its plan is used
//! only if nothing of it differs from the literal statement's plan but the
//! values (`SqlSession::plan_over`):
//! - each placeholder's type, as DataFusion infers it from the column it
//!   is compared with, is exactly the literal's type (`l_partkey = 5`:
//!   BIGINT both; a string compared with a DATE column is not, and that
//!   shape is planned with its literals, as before), so no coercion of a
//!   value could differ;
//! - every placeholder sits in a filter pushed into a region scan, and
//!   nowhere else: DataFusion's own operators cannot hold one (its
//!   physical planner refuses them), and the region scan translates its
//!   filters with the run's values when it starts (`RegionScanExec`), so
//!   the index it takes and the rows it reads are chosen for those values;
//! - the plan is one the plan cache may run again, and has no joins and
//!   no shared scans (`plan_cache::reusable_without_joins`): a join
//!   order chosen without the values could be worse than one chosen
//!   with them.
//!
//! A shape that fails any of these is remembered as one to plan with its
//! literals, so the attempt is made once per shape, catalog and types of
//! values (`s = 5` failing does not keep `s = 'x'` from its shape).
//!
//! What is lost against a literal plan: constant folding across values
//! (`c = 1 AND c = 2` is not seen to be empty) and estimates made from the
//! values at planning time. Neither changes an answer; the index choice,
//! which is the estimate that matters, is made at run time from the
//! values.

use datafusion::common::ScalarValue;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, SetExpr, Statement, Value, ValueWithSpan,
};

/// The cache key's prefix, which no statement's text has.
const KEY_PREFIX: &str = "shape\u{0}";

/// A query's shape and the constants taken out of it.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The statement with placeholders `$1 … $n` in place of the values.
    pub statement: DfStatement,
    /// The plan cache's key: the shape's text, marked as a shape.
    pub key: String,
    /// `$1 … $n`, in order.
    pub values: Vec<ScalarValue>,
}

/// The shape of `stmt`, if it has constants to take out.
pub fn shape_of(stmt: &DfStatement) -> Option<Shape> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let Statement::Query(q) = s.as_ref() else {
        return None;
    };
    if q.with.is_some() || !q.locks.is_empty() || q.for_clause.is_some() {
        return None;
    }
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    select.selection.as_ref()?;
    let text = stmt.to_string();
    // Placeholders of its own (a prepared statement's): not a shape.
    if text.contains('$') || text.contains('?') {
        return None;
    }
    let mut shaped = stmt.clone();
    let DfStatement::Statement(s) = &mut shaped else {
        return None;
    };
    let Statement::Query(q) = s.as_mut() else {
        return None;
    };
    let SetExpr::Select(select) = q.body.as_mut() else {
        return None;
    };
    let mut values = Vec::new();
    take_constants(select.selection.as_mut()?, &mut values);
    if values.is_empty() {
        return None;
    }
    let key = format!("{KEY_PREFIX}{shaped}");
    Some(Shape {
        statement: shaped,
        key,
        values,
    })
}

/// Replaces the constants `e` compares columns with by placeholders,
/// appending their values to `values`.
fn take_constants(e: &mut Expr, values: &mut Vec<ScalarValue>) {
    match e {
        Expr::Nested(inner) => take_constants(inner, values),
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::And | BinaryOperator::Or => {
                take_constants(left, values);
                take_constants(right, values);
            }
            BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq => {
                if is_column(left) {
                    take_one(right, values);
                } else if is_column(right) {
                    take_one(left, values);
                }
            }
            _ => {}
        },
        // All or none: a list half of values and half of constants would
        // be a different list's shape.
        Expr::InList { expr, list, .. }
            if is_column(expr) && list.iter().all(|x| constant(x).is_some()) =>
        {
            for x in list.iter_mut() {
                take_one(x, values);
            }
        }
        Expr::Between {
            expr, low, high, ..
        } if is_column(expr) => {
            take_one(low, values);
            take_one(high, values);
        }
        _ => {}
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// The value of a constant that a shape takes out, as DataFusion types
/// it: an integer that fits BIGINT, or a string.
fn constant(e: &Expr) -> Option<ScalarValue> {
    let Expr::Value(ValueWithSpan { value, .. }) = e else {
        return None;
    };
    match value {
        Value::Number(n, false) => n.parse::<i64>().ok().map(|v| ScalarValue::Int64(Some(v))),
        Value::SingleQuotedString(s) => Some(ScalarValue::Utf8(Some(s.clone()))),
        _ => None,
    }
}

/// Takes `e` out if it is such a constant.
fn take_one(e: &mut Expr, values: &mut Vec<ScalarValue>) {
    if let Some(v) = constant(e) {
        values.push(v);
        *e = Expr::value(Value::Placeholder(format!("${}", values.len())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn shape(sql: &str) -> Option<(String, Vec<ScalarValue>)> {
        let stmt = DFParser::parse_sql(sql).unwrap().pop_front().unwrap();
        shape_of(&stmt).map(|s| (s.statement.to_string(), s.values))
    }

    #[test]
    fn constants_compared_with_columns_are_taken_out() {
        let (text, values) = shape(
            "SELECT count(*), 7 FROM t WHERE a = 12 AND (b > 'x' OR 3 <= t.c) \
             AND d IN (1, 2) AND e BETWEEN 4 AND 5 GROUP BY 2 ORDER BY 1 LIMIT 3",
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT count(*), 7 FROM t WHERE a = $1 AND (b > $2 OR $3 <= t.c) \
             AND d IN ($4, $5) AND e BETWEEN $6 AND $7 GROUP BY 2 ORDER BY 1 LIMIT 3"
        );
        let want: Vec<ScalarValue> = vec![
            ScalarValue::Int64(Some(12)),
            ScalarValue::Utf8(Some("x".into())),
            ScalarValue::Int64(Some(3)),
            ScalarValue::Int64(Some(1)),
            ScalarValue::Int64(Some(2)),
            ScalarValue::Int64(Some(4)),
            ScalarValue::Int64(Some(5)),
        ];
        assert_eq!(values, want);
    }

    #[test]
    fn other_constants_and_statements_keep_their_literals() {
        // Decimals, dates, negative numbers, expressions, mixed IN lists.
        let (text, values) = shape(
            "SELECT a FROM t WHERE a = 1.5 AND b = DATE '1998-01-01' AND c = -3 \
             AND d = e + 1 AND f IN (1, g) AND h = 99999999999999999999 AND k = 2",
        )
        .unwrap();
        assert!(text.ends_with("AND k = $1"), "{text}");
        assert_eq!(values, vec![ScalarValue::Int64(Some(2))]);
        // Nothing to take out, or not a plain SELECT.
        for sql in [
            "SELECT a FROM t",
            "SELECT a FROM t WHERE a = b",
            "SELECT a FROM t WHERE a = $1 AND b = 2",
            "SELECT a FROM t WHERE a = 1 UNION SELECT a FROM t WHERE a = 2",
            "WITH x AS (SELECT 1 AS a) SELECT a FROM x WHERE a = 1",
            "SELECT a FROM t WHERE a = 1 FOR UPDATE",
            "INSERT INTO t VALUES (1)",
        ] {
            assert!(shape(sql).is_none(), "{sql}");
        }
    }
}
