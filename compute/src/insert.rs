//! INSERT ... VALUES: constant rows, checked against the table's types,
//! encoded as row values and written as one transaction
//! ([`crate::txn::Txns::write`]) of `Insert` mutations: a row whose key
//! exists already fails the prewrite, and then the whole statement, in
//! every region, and readers see all of the statement's rows or none.

use std::collections::HashSet;

use arrow::datatypes::DataType;
use quarry_coprocessor::codec::key::record_key;
use quarry_coprocessor::codec::row::{Datum, RowEncoder};
use quarry_coprocessor::expr::{ArithOp, CmpOp, Expr, LogicOp, ScalarValue};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::compute::{logical_expr::Kind, LogicalExpr};
use quarry_proto::coprocessor::FuncKind;
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::TableDef;

use crate::engine::QueryEngine;
use crate::session::OpenTxn;
use crate::sql::Insert;
use crate::{plan_err, Error, Result};

/// Evaluates a constant expression (an INSERT value): built with the
/// coprocessor's constructors, which fold constants with Quarry's type
/// rules, so it must end as a literal.
fn constant(e: &LogicalExpr) -> Result<ScalarValue> {
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
fn cast_value(value: ScalarValue, t: &DataType, max_len: u32, col: &str) -> Result<ScalarValue> {
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

fn datum<'a>(v: &'a ScalarValue) -> Datum<'a> {
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

/// Whether `table` keeps packs (the column layout).
pub fn is_packed(table: &TableDef) -> bool {
    table.layout == quarry_proto::meta::Layout::Column as i32
}

/// Inserts the rows, in `txn` or as a transaction of their own; returns
/// how many.
pub async fn insert(
    engine: &QueryEngine,
    table: &TableDef,
    ins: &Insert,
    txn: Option<&OpenTxn>,
) -> Result<usize> {
    if let Some(query) = &ins.query {
        return crate::dml::insert_select(engine, table, &ins.columns, query, txn).await;
    }
    let (mutations, n) = mutations(engine, table, ins).await?;
    if mutations.is_empty() {
        return Ok(0);
    }
    if let Some(txn) = txn {
        return engine
            .sessions()
            .write(txn, table, mutations)
            .await
            .map(|_| n)
            .map_err(|e| crate::index::name_duplicate(e, table));
    }
    // One transaction: readers see all of the rows or none. The table's
    // definition is checked once the snapshot is taken, so a write that
    // missed an index build's first step commits below its backfill
    // (`crate::index`); when an index build or drop moved on meanwhile,
    // the rows are encoded again by the new definition and written again.
    let txns = engine.txns();
    let (mut table, mut mutations) = (table.clone(), mutations);
    for attempt in 1.. {
        let start_ts = txns.timestamp().await?;
        let check = crate::index::SchemaCheck::of(&table);
        let written = match check.verify(&engine.cluster).await {
            Ok(()) => txns
                .write_checked(
                    start_ts,
                    mutations.clone(),
                    is_packed(&table),
                    crate::session_settings::write_deadline(),
                    Some(&check),
                )
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => break,
            Err(Error::Conflict(m))
                if m.contains("indexes of table") && attempt < crate::dml::MAX_ATTEMPTS =>
            {
                table = engine.table(&table.name).await?;
                mutations = self::mutations(engine, &table, ins).await?.0;
            }
            Err(e) => return Err(crate::index::name_duplicate(e, &table)),
        }
    }
    Ok(n)
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

/// The rows of `ins`, checked and encoded as `Insert` mutations, with
/// their index entries' mutations; and how many rows.
async fn mutations(
    engine: &QueryEngine,
    table: &TableDef,
    ins: &Insert,
) -> Result<(Vec<Mutation>, usize)> {
    if ins.rows.is_empty() {
        return Ok((vec![], 0));
    }
    let targets = target_positions(table, &ins.columns)?;
    let types = column_types(table)?;
    // A column the INSERT does not name gets its DEFAULT.
    let defaults: Vec<Option<ScalarValue>> = column_defaults(table)?
        .into_iter()
        .map(|d| {
            d.map(|a| ScalarValue::from_array(a.as_ref(), 0))
                .transpose()
                .map_err(Error::from)
        })
        .collect::<Result<_>>()?;
    let handle_pos = table.key_position();

    // Evaluate and check every value.
    let mut rows: Vec<Vec<ScalarValue>> = Vec::with_capacity(ins.rows.len());
    for (r, values) in ins.rows.iter().enumerate() {
        if values.len() != targets.len() {
            return Err(plan_err!(
                "row {} has {} values but {} columns are targeted",
                r + 1,
                values.len(),
                targets.len()
            ));
        }
        let mut row: Vec<ScalarValue> = types
            .iter()
            .zip(&defaults)
            .map(|((t, ..), d)| d.clone().unwrap_or_else(|| ScalarValue::Null(t.clone())))
            .collect();
        for (v, &pos) in values.iter().zip(&targets) {
            let (t, _, max_len) = &types[pos];
            let col = &table.columns[pos].name;
            row[pos] = cast_value(constant(v)?, t, *max_len, col)?;
        }
        for (pos, (_, nullable, _)) in types.iter().enumerate() {
            if !nullable && row[pos].is_null() {
                return Err(plan_err!(
                    "column {} is NOT NULL but row {} gives it no value",
                    table.columns[pos].name,
                    r + 1
                ));
            }
        }
        rows.push(row);
    }

    // Handles: the primary key, or fresh implicit ones.
    let handles: Vec<i64> = match handle_pos {
        Some(p) => rows
            .iter()
            .map(|row| match &row[p] {
                ScalarValue::Int64(h) => Ok(*h),
                _ => Err(Error::Internal("primary key is not a BIGINT".into())),
            })
            .collect::<Result<_>>()?,
        None => {
            let first = engine
                .cluster
                .alloc_handles(table.id, rows.len() as u64, 0)
                .await?;
            (0..rows.len() as i64).map(|i| first + i).collect()
        }
    };
    if let Some(h) = repeated_handle(&handles) {
        return Err(plan_err!(
            "duplicate key: handle {h} appears twice in this INSERT"
        ));
    }

    let mut enc = RowEncoder::new();
    let mut maint = crate::index::Maintainer::new(table);
    let mut mutations: Vec<Mutation> = Vec::with_capacity(rows.len());
    for (row, h) in rows.iter().zip(&handles) {
        let cols: Vec<(i64, Datum)> = table
            .columns
            .iter()
            .zip(row)
            .map(|(c, v)| (c.id, datum(v)))
            .collect();
        maint.change(*h, None, Some(&cols))?;
        let mut value = Vec::new();
        enc.encode(&cols, &mut value)?;
        mutations.push(Mutation {
            op: Op::Insert as i32,
            key: record_key(table.id, *h),
            value,
        });
    }
    let n = mutations.len();
    mutations.extend(maint.into_mutations());
    Ok((mutations, n))
}

/// The first handle of `handles` that an earlier one repeats, if any.
pub fn repeated_handle(handles: &[i64]) -> Option<i64> {
    let mut seen = HashSet::with_capacity(handles.len());
    handles.iter().copied().find(|h| !seen.insert(*h))
}
