//! Statement parameters: numbering a statement's placeholders, and binding
//! values to them.
//!
//! Clients write `?` (JDBC; ADBC's qmark style) or `$1`, `$2` … (the
//! PostgreSQL style DataFusion knows). Preparing a statement numbers every
//! `?` in the order it appears ([`number`]), so the statement DataFusion
//! infers the parameters' types from and the statement that runs later
//! agree on which value goes where.
//!
//! Binding ([`bind`]) replaces each placeholder of the parsed statement by
//! its value written as a SQL literal (a number, a quoted string,
//! `DATE '…'`, `TIMESTAMP '…'`, `TIMESTAMP WITH TIME ZONE '…Z'` for an
//! instant, `NULL`) and hands the resulting text to the path every
//! statement takes. A bound value therefore means exactly what
//! the same literal typed into the statement would mean, on DataFusion's
//! path (queries) and on Quarry's own (INSERT, UPDATE, DELETE), and there
//! is no second evaluation of parameters to keep in step with the first.
//! A value replaces one expression node of a statement already parsed, so
//! it can never change the statement's structure (no injection through a
//! bound string). The cost is one parse and print per bound row, small
//! beside running the statement.
//!
//! A statement without placeholders keeps its text byte for byte.

use std::ops::ControlFlow;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::array_value_to_string;
use sqlparser::ast::{visit_expressions_mut, Expr, Statement, Value};

use crate::{plan_err, Error, Result};

/// A statement whose placeholders are numbered `$1` … `$count`.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbered {
    pub sql: String,
    pub count: usize,
}

fn parse_one(sql: &str, max_bytes: usize) -> Option<Statement> {
    let mut stmts = crate::sql::parse_plain(sql, max_bytes).ok()?;
    (stmts.len() == 1).then(|| stmts.pop().expect("one"))
}

/// The placeholder's number if `e` is one (`$n`), or `Some(0)` for `?`.
fn placeholder(e: &Expr) -> Option<std::result::Result<usize, String>> {
    let Expr::Value(v) = e else { return None };
    let Value::Placeholder(p) = &v.value else {
        return None;
    };
    if p == "?" {
        return Some(Ok(0));
    }
    Some(
        p.strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| p.clone()),
    )
}

/// `sql` with each `?` numbered in order of appearance, and how many
/// parameters it takes (the highest `$n`). Text that does not parse as
/// one statement is returned unchanged with no parameters: running it
/// reports the syntax error.
pub fn number(sql: &str, max_bytes: usize) -> Result<Numbered> {
    let unchanged = || Numbered {
        sql: sql.to_string(),
        count: 0,
    };
    // (Too long or too deep: unchanged, and refused with its reason when
    // it runs.)
    let Some(mut stmt) = parse_one(sql, max_bytes) else {
        return Ok(unchanged());
    };
    let (mut qmarks, mut dollars, mut max) = (0usize, false, 0usize);
    let flow = visit_expressions_mut(&mut stmt, |e| {
        match placeholder(e) {
            Some(Ok(0)) => {
                qmarks += 1;
                max = qmarks;
                if let Expr::Value(v) = e {
                    v.value = Value::Placeholder(format!("${qmarks}"));
                }
            }
            Some(Ok(n)) => {
                dollars = true;
                max = max.max(n);
            }
            Some(Err(p)) => return ControlFlow::Break(p),
            None => {}
        }
        ControlFlow::Continue(())
    });
    if let ControlFlow::Break(p) = flow {
        return Err(plan_err!(
            "unsupported placeholder {p}: write ? or $1, $2, … for parameters"
        ));
    }
    if qmarks > 0 && dollars {
        return Err(plan_err!(
            "the statement mixes ? and $n placeholders: use one style"
        ));
    }
    if max == 0 {
        return Ok(unchanged());
    }
    Ok(Numbered {
        sql: stmt.to_string(),
        count: max,
    })
}

/// `stmt`'s text with `$n` replaced by row `row` of column `n - 1` of
/// `params`, which must have one column per parameter.
pub fn bind(stmt: &Numbered, params: &RecordBatch, row: usize) -> Result<String> {
    if params.num_columns() != stmt.count {
        return Err(plan_err!(
            "the statement takes {} parameter(s), but {} were bound",
            stmt.count,
            params.num_columns()
        ));
    }
    if stmt.count == 0 {
        return Ok(stmt.sql.clone());
    }
    // Numbered, so it parsed within the limits already.
    let mut parsed = parse_one(&stmt.sql, usize::MAX)
        .ok_or_else(|| Error::Internal(format!("a numbered statement must parse: {}", stmt.sql)))?;
    let flow = visit_expressions_mut(&mut parsed, |e| {
        if let Some(Ok(n)) = placeholder(e) {
            match literal(params.column(n - 1).as_ref(), row) {
                Ok(l) => *e = l,
                Err(err) => return ControlFlow::Break(err),
            }
        }
        ControlFlow::Continue(())
    });
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(parsed.to_string()),
    }
}

/// `stmt` with placeholder `$n` written `CAST($n AS type)` for each
/// `(n, type)` of `casts`: the statement typed by what a client declared
/// its parameters to be, not by what the planner would infer for them.
pub fn cast_placeholders(stmt: &Numbered, casts: &[(usize, &str)]) -> Result<Numbered> {
    if casts.is_empty() {
        return Ok(stmt.clone());
    }
    let mut parsed = parse_one(&stmt.sql, usize::MAX)
        .ok_or_else(|| Error::Internal(format!("a numbered statement must parse: {}", stmt.sql)))?;
    let flow = visit_expressions_mut(&mut parsed, |e| {
        let Some(Ok(n)) = placeholder(e) else {
            return ControlFlow::Continue(());
        };
        if let Some((_, type_name)) = casts.iter().find(|(i, _)| *i == n) {
            let sql = format!("CAST(${n} AS {type_name})");
            match sqlparser::parser::Parser::new(&sqlparser::dialect::GenericDialect {})
                .try_with_sql(&sql)
                .and_then(|mut p| p.parse_expr())
            {
                Ok(cast) => *e = cast,
                Err(err) => {
                    return ControlFlow::Break(Error::Internal(format!("{sql} must parse: {err}")))
                }
            }
        }
        ControlFlow::Continue(())
    });
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(Numbered {
            sql: parsed.to_string(),
            count: stmt.count,
        }),
    }
}

/// The placeholders that appear in a SELECT list of `stmt` (at any
/// depth): the ones that can give a result column its type, where one in
/// a WHERE clause cannot.
pub fn in_select_lists(stmt: &Numbered) -> Vec<usize> {
    struct Lists(Vec<usize>);
    impl sqlparser::ast::Visitor for Lists {
        type Break = ();
        fn pre_visit_select(&mut self, select: &sqlparser::ast::Select) -> ControlFlow<()> {
            for item in &select.projection {
                let _ = sqlparser::ast::visit_expressions(item, |e| {
                    if let Some(Ok(n)) = placeholder(e) {
                        if !self.0.contains(&n) {
                            self.0.push(n);
                        }
                    }
                    ControlFlow::<()>::Continue(())
                });
            }
            ControlFlow::Continue(())
        }
    }
    let Some(parsed) = parse_one(&stmt.sql, usize::MAX) else {
        return vec![];
    };
    let mut lists = Lists(vec![]);
    let _ = sqlparser::ast::Visit::visit(&parsed, &mut lists);
    lists.0
}

/// The type each placeholder is cast to where the statement casts it
/// directly (`$1::numeric`, `CAST($2 AS DATE)`): `(n, type)`, the first
/// such cast of each. This is the type PostgreSQL gives such a
/// parameter, which the planner's inference may not find.
pub fn cast_types(stmt: &Numbered) -> Vec<(usize, sqlparser::ast::DataType)> {
    let mut found: Vec<(usize, sqlparser::ast::DataType)> = vec![];
    let Some(mut parsed) = parse_one(&stmt.sql, usize::MAX) else {
        return found;
    };
    let _ = visit_expressions_mut(&mut parsed, |e| {
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            if let Some(Ok(n)) = placeholder(expr) {
                if !found.iter().any(|(i, _)| *i == n) {
                    found.push((n, data_type.clone()));
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

fn value(v: Value) -> Expr {
    Expr::value(v)
}

/// A typed literal such as `DATE '1998-12-01'`.
fn typed(type_name: &str, text: &str) -> Result<Expr> {
    let sql = format!("{type_name} '{}'", text.replace('\'', "''"));
    sqlparser::parser::Parser::new(&sqlparser::dialect::GenericDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| Error::Internal(format!("{sql} must parse: {e}")))
}

/// Row `row` of `a` as a SQL literal.
fn literal(a: &dyn Array, row: usize) -> Result<Expr> {
    if a.is_null(row) {
        return Ok(value(Value::Null));
    }
    let text = || array_value_to_string(a, row).map_err(Error::from);
    Ok(match a.data_type() {
        t if t.is_integer() || t.is_decimal() => value(Value::Number(text()?, false)),
        t if t.is_floating() => {
            let t = text()?;
            if !t.parse::<f64>().is_ok_and(f64::is_finite) {
                return Err(plan_err!("parameter value {t} is not a finite number"));
            }
            value(Value::Number(t, false))
        }
        DataType::Boolean => value(Value::Boolean(a.as_boolean().value(row))),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            value(Value::SingleQuotedString(text()?))
        }
        DataType::Date32 => typed("DATE", &text()?)?,
        DataType::Date64 => {
            let d = arrow::compute::cast(&a.slice(row, 1), &DataType::Date32)?;
            typed("DATE", &array_value_to_string(&d, 0)?)?
        }
        DataType::Timestamp(_, None) => typed("TIMESTAMP", &text()?)?,
        // An instant (a TIMESTAMPTZ parameter, a zoned Arrow value): its
        // text carries its offset, so the session's zone cannot move it.
        DataType::Timestamp(_, Some(_)) => typed("TIMESTAMP WITH TIME ZONE", &text()?)?,
        DataType::Dictionary(_, v) => {
            let plain = arrow::compute::cast(&a.slice(row, 1), v)?;
            literal(plain.as_ref(), 0)?
        }
        other => {
            return Err(plan_err!(
                "parameters of type {other} are not supported: bind a number, string, \
                 boolean, date or timestamp"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BooleanArray, Date32Array, Decimal128Array, Int64Array};
    use arrow::array::{Float64Array, StringArray};

    use super::*;

    fn numbered(sql: &str) -> Numbered {
        number(sql, usize::MAX).unwrap()
    }

    #[test]
    fn question_marks_are_numbered_in_order_and_other_text_stays() {
        let n = numbered("SELECT a FROM t WHERE b = ? AND c < ? LIMIT ?");
        assert_eq!(n.sql, "SELECT a FROM t WHERE b = $1 AND c < $2 LIMIT $3");
        assert_eq!(n.count, 3);
        let n = numbered("INSERT INTO t (a, b) VALUES (?, ?), (?, 'x')");
        assert_eq!(n.sql, "INSERT INTO t (a, b) VALUES ($1, $2), ($3, 'x')");
        let n = numbered("select  $2 ,$1 from t");
        assert_eq!((n.sql.as_str(), n.count), ("SELECT $2, $1 FROM t", 2));
        // Without placeholders the text is untouched, even its spacing.
        let q = "select\n  sum(x)  from t -- comment";
        assert_eq!(
            numbered(q),
            Numbered {
                sql: q.into(),
                count: 0
            }
        );
        assert_eq!(numbered("not sql at all").count, 0);
    }

    #[test]
    fn declared_types_cast_only_the_placeholders_named() {
        let n = numbered("SELECT a * $1, $2 FROM t WHERE b = $1");
        let cast = cast_placeholders(&n, &[(1, "DECIMAL(38, 10)")]).unwrap();
        assert_eq!(
            cast.sql,
            "SELECT a * CAST($1 AS DECIMAL(38,10)), $2 FROM t WHERE b = CAST($1 AS DECIMAL(38,10))"
        );
        assert_eq!(cast.count, 2);
        // The cast statement binds as any other.
        let row = RecordBatch::try_from_iter([
            ("$1", Arc::new(Int64Array::from(vec![7])) as ArrayRef),
            ("$2", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        ])
        .unwrap();
        assert_eq!(
            bind(&cast, &row, 0).unwrap(),
            "SELECT a * CAST(7 AS DECIMAL(38,10)), 'x' FROM t WHERE b = CAST(7 AS DECIMAL(38,10))"
        );
        assert_eq!(cast_placeholders(&n, &[]).unwrap(), n);
    }

    #[test]
    fn placeholders_in_select_lists_are_found_at_any_depth_and_no_others() {
        let n = numbered(
            "SELECT a * $1, (SELECT $2) FROM t WHERE b = $3 \
             UNION ALL SELECT $4 FROM (SELECT $5 AS x) s WHERE c < $6",
        );
        let mut found = in_select_lists(&n);
        found.sort();
        assert_eq!(found, vec![1, 2, 4, 5]);
    }

    #[test]
    fn placeholders_cast_in_the_statement_take_the_cast_type() {
        let n = numbered("SELECT a * $1::numeric FROM t WHERE d < CAST($2 AS DATE) AND e = $3");
        let found: Vec<(usize, String)> = cast_types(&n)
            .into_iter()
            .map(|(i, t)| (i, t.to_string()))
            .collect();
        assert_eq!(found, vec![(1, "NUMERIC".into()), (2, "DATE".into())]);
    }

    #[test]
    fn mixed_or_unknown_placeholders_are_refused_by_name() {
        let e = number("SELECT ? + $1", usize::MAX).unwrap_err().to_string();
        assert!(e.contains("mixes ? and $n"), "{e}");
        let e = number("SELECT $0", usize::MAX).unwrap_err().to_string();
        assert!(e.contains("unsupported placeholder $0"), "{e}");
    }

    fn batch(cols: Vec<ArrayRef>) -> RecordBatch {
        let fields: Vec<_> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                arrow::datatypes::Field::new(format!("p{i}"), c.data_type().clone(), true)
            })
            .collect();
        RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols).unwrap()
    }

    #[test]
    fn values_become_literals_and_strings_cannot_escape() {
        let stmt = numbered(
            "SELECT * FROM t WHERE a = ? AND b = ? AND c = ? AND d = ? AND e = ? AND f = ?",
        );
        let params = batch(vec![
            Arc::new(Int64Array::from(vec![Some(-7), None])) as ArrayRef,
            Arc::new(StringArray::from(vec!["x' OR '1'='1", "y"])),
            Arc::new(
                Decimal128Array::from(vec![6, 1])
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(Date32Array::from(vec![10561, 0])),
            Arc::new(BooleanArray::from(vec![true, false])),
            Arc::new(Float64Array::from(vec![0.5, 1.0])),
        ]);
        assert_eq!(
            bind(&stmt, &params, 0).unwrap(),
            "SELECT * FROM t WHERE a = -7 AND b = 'x'' OR ''1''=''1' AND c = 0.06 \
             AND d = DATE '1998-12-01' AND e = true AND f = 0.5"
        );
        assert!(bind(&stmt, &params, 1)
            .unwrap()
            .starts_with("SELECT * FROM t WHERE a = NULL"));
    }

    #[test]
    fn the_wrong_number_of_values_is_refused() {
        let stmt = numbered("SELECT ? + ?");
        let one = batch(vec![Arc::new(Int64Array::from(vec![1])) as ArrayRef]);
        let e = bind(&stmt, &one, 0).unwrap_err().to_string();
        assert!(e.contains("takes 2 parameter(s), but 1 were bound"), "{e}");
        let nan = batch(vec![
            Arc::new(Float64Array::from(vec![f64::NAN])) as ArrayRef,
            Arc::new(Float64Array::from(vec![1.0])),
        ]);
        let e = bind(&stmt, &nan, 0).unwrap_err().to_string();
        assert!(e.contains("not a finite number"), "{e}");
    }
}
