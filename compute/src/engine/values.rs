//! How a statement's values become a table's: constants folded with
//! Quarry's type rules and cast to their column's type (INSERT … VALUES,
//! ALTER TABLE … ADD COLUMN … DEFAULT), the columns' defaults, types and
//! an INSERT's target positions. Shared by `insert.rs`, `dml.rs` and
//! `alter.rs`, and importing none of them.

use std::collections::HashSet;

use arrow::datatypes::DataType;
use quarry_coprocessor::codec::row::Datum;
use quarry_coprocessor::expr::{ArithOp, CmpOp, Expr, LogicOp, ScalarValue};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::compute::{logical_expr::Kind, LogicalExpr};
use quarry_proto::coprocessor::FuncKind;
use quarry_proto::meta::TableDef;

use crate::{plan_err, Error, Result};

/// Evaluates a constant expression (an INSERT value): built with the
/// coprocessor's constructors, which fold constants with Quarry's type
/// rules, so it must end as a literal.
pub(crate) fn constant(e: &LogicalExpr) -> Result<ScalarValue> {
    match bind_constant(e)? {
        Expr::Literal(v) => Ok(v),
        _ => Err(plan_err!("INSERT values must be constants")),
    }
}

fn bind_constant(e: &LogicalExpr) -> Result<Expr> {
    let sub = |x: &Option<Box<LogicalExpr>>| -> Result<Expr> {
        bind_constant(
            x.as_deref()
                .ok_or_else(|| plan_err!("incomplete expression"))?,
        )
    };
    Ok(match e.kind.as_ref() {
        None => return Err(plan_err!("empty expression")),
        Some(Kind::Column(c)) => {
            return Err(plan_err!("INSERT values must be constants, not column {c}"))
        }
        Some(Kind::Literal(l)) => Expr::literal(ScalarValue::from_proto(l)?),
        Some(Kind::Binary(b)) => {
            let l = sub(&b.left)?;
            let r = sub(&b.right)?;
            match FuncKind::try_from(b.op).unwrap_or(FuncKind::FuncUnspecified) {
                FuncKind::Plus => Expr::arith(ArithOp::Plus, l, r)?,
                FuncKind::Minus => Expr::arith(ArithOp::Minus, l, r)?,
                FuncKind::Multiply => Expr::arith(ArithOp::Multiply, l, r)?,
                FuncKind::Divide => Expr::arith(ArithOp::Divide, l, r)?,
                FuncKind::Eq => Expr::compare(CmpOp::Eq, l, r)?,
                FuncKind::Ne => Expr::compare(CmpOp::Ne, l, r)?,
                FuncKind::Lt => Expr::compare(CmpOp::Lt, l, r)?,
                FuncKind::Le => Expr::compare(CmpOp::Le, l, r)?,
                FuncKind::Gt => Expr::compare(CmpOp::Gt, l, r)?,
                FuncKind::Ge => Expr::compare(CmpOp::Ge, l, r)?,
                FuncKind::And => Expr::logic(LogicOp::And, l, r)?,
                FuncKind::Or => Expr::logic(LogicOp::Or, l, r)?,
                other => return Err(plan_err!("{other:?} is not a binary operator")),
            }
        }
        Some(Kind::Not(x)) => Expr::logical_not(bind_constant(x)?)?,
        Some(Kind::Negate(x)) => Expr::negate(bind_constant(x)?)?,
        Some(Kind::IsNull(x)) => Expr::is_null(sub(&x.expr)?, x.negated)?,
        Some(Kind::Between(x)) => {
            Expr::between(sub(&x.expr)?, sub(&x.low)?, sub(&x.high)?, x.negated)?
        }
        Some(Kind::InList(x)) => {
            let list = x
                .list
                .iter()
                .map(bind_constant)
                .collect::<Result<Vec<_>>>()?;
            Expr::in_list(sub(&x.expr)?, list, x.negated)?
        }
        Some(Kind::Like(x)) => Expr::like(sub(&x.expr)?, x.pattern.clone(), x.negated)?,
        Some(Kind::Cast(c)) => {
            let to =
                c.to.as_ref()
                    .ok_or_else(|| plan_err!("CAST without a type"))?;
            Expr::cast(sub(&c.expr)?, arrow_type(to)?)?
        }
    })
}

/// A constant (a column's DEFAULT) cast to `t`, the type of column
/// `col`, and checked as an INSERT value is; its row-codec encoding, or
/// None for NULL.
pub(crate) fn encoded_constant(
    e: &LogicalExpr,
    t: &DataType,
    max_len: u32,
    col: &str,
) -> Result<Option<Vec<u8>>> {
    let v = cast_value(constant(e)?, t, max_len, col)?;
    Ok(quarry_coprocessor::codec::row::encode_value(&datum(&v)))
}

/// `value` cast to `t` (column `col`'s type), with VARCHAR's length checked.
pub(crate) fn cast_value(
    value: ScalarValue,
    t: &DataType,
    max_len: u32,
    col: &str,
) -> Result<ScalarValue> {
    let cast = Expr::cast(Expr::Literal(value), t.clone()).map_err(|e| match e {
        quarry_coprocessor::Error::Overflow(m) => Error::Overflow(format!(
            "value for column {col} is out of range for {}: {m}",
            sql_name(t)
        )),
        other => plan_err!("value for column {col}: {other}"),
    })?;
    let Expr::Literal(v) = cast else {
        return Err(Error::Internal("cast of a constant did not fold".into()));
    };
    if let (ScalarValue::Utf8(s), true) = (&v, max_len > 0) {
        if s.chars().count() > max_len as usize {
            return Err(plan_err!(
                "value for column {col} is too long for VARCHAR({max_len}): '{s}'"
            ));
        }
    }
    Ok(v)
}

/// What each column of `table` is when an INSERT does not name it: its
/// DEFAULT, else NULL, as arrays of one row.
pub(crate) fn column_defaults(table: &TableDef) -> Result<Vec<Option<arrow::array::ArrayRef>>> {
    let types = column_types(table)?;
    table
        .columns
        .iter()
        .zip(types)
        .map(|(c, (t, ..))| match c.has_default {
            true => quarry_coprocessor::codec::row::decode_value(&c.default_value, &t)
                .map(Some)
                .map_err(Error::from),
            false => Ok(None),
        })
        .collect()
}

pub(crate) fn datum<'a>(v: &'a ScalarValue) -> Datum<'a> {
    match v {
        ScalarValue::Null(_) => Datum::Null,
        ScalarValue::Int64(x) => Datum::Int(*x),
        ScalarValue::Float64(x) => Datum::Float(*x),
        ScalarValue::Decimal(x, _, _) => Datum::Decimal(*x),
        ScalarValue::Date(x) => Datum::Date(*x),
        ScalarValue::Utf8(s) => Datum::Bytes(s.as_bytes()),
        ScalarValue::Boolean(b) => Datum::Bool(*b),
    }
}

/// Each column's (Arrow type, nullable, VARCHAR length limit or 0): what a
/// written value is checked against.
pub(crate) fn column_types(table: &TableDef) -> Result<Vec<(DataType, bool, u32)>> {
    table
        .columns
        .iter()
        .map(|c| {
            let ft = c.field_type.unwrap_or_default();
            Ok((arrow_type(&ft)?, ft.nullable, ft.max_len))
        })
        .collect()
}

/// The positions in `table` of the target columns `columns` of an
/// INSERT (empty: every column, in table order), each at most once.
pub(crate) fn target_positions(table: &TableDef, columns: &[String]) -> Result<Vec<usize>> {
    let targets: Vec<usize> = if columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        columns
            .iter()
            .map(|name| {
                table
                    .columns
                    .iter()
                    .position(|c| &c.name == name)
                    .ok_or_else(|| {
                        let valid: Vec<&str> =
                            table.columns.iter().map(|c| c.name.as_str()).collect();
                        plan_err!(
                            "unknown column '{name}' in table {}; valid columns are: {}",
                            table.name,
                            valid.join(", ")
                        )
                    })
            })
            .collect::<Result<_>>()?
    };
    let mut seen = HashSet::new();
    if let Some(dup) = targets.iter().find(|t| !seen.insert(**t)) {
        return Err(plan_err!(
            "column {} is listed twice",
            table.columns[*dup].name
        ));
    }
    Ok(targets)
}
