//! INSERT ... VALUES: constant rows, checked against the table's types,
//! encoded as row values and written as one transaction
//! ([`crate::txn::Txns::write`]) of `Insert` mutations: a row whose key
//! exists already fails the prewrite, and then the whole statement, in
//! every region, and readers see all of the statement's rows or none.

use std::collections::HashSet;

use quarry_coprocessor::codec::key::record_key;
use quarry_coprocessor::codec::row::{Datum, RowEncoder};
use quarry_coprocessor::expr::ScalarValue;
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::TableDef;

use super::values::{cast_value, column_defaults, column_types, constant, datum, target_positions};
use crate::engine::QueryEngine;
use crate::session::OpenTxn;
use crate::sql::Insert;
use crate::{plan_err, Error, Result};

/// Inserts the rows, in `txn` or as a transaction of their own; returns
/// how many.
pub async fn insert(
    engine: &QueryEngine,
    table: &TableDef,
    ins: &Insert,
    txn: Option<&OpenTxn>,
) -> Result<usize> {
    if let Some(query) = &ins.query {
        return crate::engine::dml::insert_select(engine, table, &ins.columns, query, txn).await;
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
        let check = crate::schema_check::SchemaCheck::of(&table);
        let written = match check.verify(&engine.cluster).await {
            Ok(()) => txns
                .write_checked(
                    start_ts,
                    mutations.clone(),
                    crate::txn::is_packed(&table),
                    crate::statement_deadline::write_deadline(),
                    Some(&check),
                )
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => break,
            Err(Error::Conflict(m))
                if m.contains("indexes of table") && attempt < crate::engine::dml::MAX_ATTEMPTS =>
            {
                table = engine.table(&table.name).await?;
                mutations = self::mutations(engine, &table, ins).await?.0;
            }
            Err(e) => return Err(crate::index::name_duplicate(e, &table)),
        }
    }
    Ok(n)
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
