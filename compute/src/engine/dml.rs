//! UPDATE, DELETE and INSERT … SELECT: a snapshot query finds the rows,
//! one transaction writes them.
//!
//! HOW
//!
//! 1. `start_ts` from the timestamp oracle.
//! 2. DataFusion runs `SELECT pk, <new values> FROM table WHERE cond` at
//!    `start_ts` — the same planner, pushdown and region scans as any
//!    query, so the condition and the SET expressions mean exactly what
//!    they mean in a SELECT. UPDATE's new values are cast to the columns'
//!    types with overflow checked (`DECIMAL(15,2)` stays exact).
//! 3. One transaction at that `start_ts` (`Txns::write_at`) writes a new
//!    version of each row (UPDATE) or a delete mark (DELETE). Its prewrite
//!    refuses a row that another transaction committed after `start_ts`
//!    (write conflict): snapshot isolation's first committer wins, so two
//!    concurrent `UPDATE ... SET v = v + 1` never lose an update.
//! 4. An autocommit statement that lost a conflict runs again from 1 with
//!    a new snapshot (at most [`MAX_ATTEMPTS`] times, backing off), as
//!    TiDB retries an autocommit statement: the statement is re-evaluated,
//!    so the retry is what the user asked for; past the limit the user
//!    gets the conflict, naming the key.
//!
//! CAVEATS: rows are found by their handle: the primary key, or for a
//! table without one the implicit handle that the `_rowid` pseudo-column
//! shows. The rows a statement changes are held in compute's memory until
//! the commit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Int64Type};
use quarry_coprocessor::codec::key::{is_index_key, record_key};
use quarry_coprocessor::codec::row::{array_datum, Datum, RowDecoder, RowEncoder};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::{Layout, TableDef};

use crate::engine::QueryEngine;
use crate::session::OpenTxn;
use crate::sql::{Delete, Update};
use crate::statement_deadline::write_deadline;
use crate::{plan_err, Error, Result};

/// Times an autocommit UPDATE or DELETE runs before its write conflict
/// reaches the user.
pub const MAX_ATTEMPTS: u32 = 10;

/// A SQL identifier, quoted (column names are stored lower-cased or as
/// quoted).
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table's primary key column: UPDATE and DELETE find rows by it.
/// The column that names a row's key: the primary key, or for a table
/// without one the row handle, `_rowid` (`df::ROWID`), which UPDATE's
/// and DELETE's queries see (TiDB's `_tidb_rowid`).
pub(crate) fn key_column(table: &TableDef) -> Result<&str> {
    if let Some(c) = table
        .columns
        .iter()
        .find(|c| c.id == table.handle_column_id && table.handle_column_id != 0)
    {
        return Ok(c.name.as_str());
    }
    if table.columns.iter().any(|c| c.name == crate::df::ROWID) {
        return Err(plan_err!(
            "table {} has no primary key and a column named {}, which hides the row \
             handle UPDATE and DELETE find rows by",
            table.name,
            crate::df::ROWID
        ));
    }
    Ok(crate::df::ROWID)
}

fn where_clause(selection: &Option<String>) -> String {
    selection
        .as_ref()
        .map_or(String::new(), |s| format!(" WHERE {s}"))
}

/// Runs `attempt` with a fresh snapshot until it does not lose a write
/// conflict, at most [`MAX_ATTEMPTS`] times; not again once `final_`
/// is set (the conflict is with an ALTER TABLE: running the statement
/// again as it was planned would lose it again).
async fn autocommit<F, Fut>(mut attempt: F, final_: &AtomicBool) -> Result<usize>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    let mut backoff = Duration::from_millis(2);
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await {
            Err(Error::Conflict(m)) if tries < MAX_ATTEMPTS && !final_.load(Ordering::Relaxed) => {
                tracing::debug!("statement lost a write conflict, retrying: {m}");
                let jitter = rand_jitter(backoff);
                tokio::time::sleep(backoff + jitter).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            Err(Error::Conflict(m)) => {
                return Err(Error::Conflict(format!(
                    "{m} (gave up after {MAX_ATTEMPTS} attempts)"
                )))
            }
            other => return other,
        }
    }
}

/// Up to `d` of jitter, so statements that conflicted do not retry in step.
fn rand_jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos() as u64);
    Duration::from_nanos(nanos % (d.as_nanos() as u64).max(1))
}

/// `DELETE FROM table WHERE ...`, in `txn` or on its own; returns the rows
/// deleted.
pub async fn delete(
    engine: &QueryEngine,
    table: &TableDef,
    del: &Delete,
    txn: Option<&OpenTxn>,
) -> Result<usize> {
    let rows_at = |start_ts: u64, table: TableDef| async move {
        let sql = key_query(&table, del, true)?;
        key_mutations(engine, &table, &sql, start_ts, Op::Delete).await
    };
    write(engine, table, txn, rows_at).await
}

/// `SELECT … FOR UPDATE` in `txn`: locks the rows the query reads (a
/// lock that writes nothing, which other writers wait for); returns how
/// many.
pub async fn lock(
    engine: &QueryEngine,
    table: &TableDef,
    rows: &Delete,
    txn: &OpenTxn,
) -> Result<usize> {
    let rows_at = |start_ts: u64, table: TableDef| async move {
        let sql = key_query(&table, rows, false)?;
        key_mutations(engine, &table, &sql, start_ts, Op::Lock).await
    };
    write(engine, table, Some(txn), rows_at).await
}

/// `SELECT … FOR UPDATE` in `txn` of rows a row table's primary key pins
/// to constants (`id = 5`, `id IN (…)`, as point reads find them): locks
/// those keys with one request per region that returns the rows
/// (`raftstore/src/pessimistic.rs`) instead of finding the rows first and
/// reading them again. The rows locked, as the transaction sees them, or
/// None when the selection pins no key (nothing is locked then).
pub async fn lock_points(
    engine: &QueryEngine,
    table: &TableDef,
    rows: &Delete,
    txn: &OpenTxn,
) -> Result<Option<RecordBatch>> {
    if table.layout != Layout::Row as i32 || table.handle_column_id == 0 {
        return Ok(None);
    }
    let sql = key_query(table, rows, false)?;
    // Planned over this table alone: a selection that reads another one
    // (a subquery) fails here and takes the general way.
    let Ok(plan) = engine
        .sql_session()
        .physical_plan_over(&sql, vec![table.clone()])
        .await
    else {
        return Ok(None);
    };
    let dags = crate::df::region_dags(&plan);
    let [dag] = dags.as_slice() else {
        return Ok(None);
    };
    let Some(handles) = crate::df::point_get::pinned_handles(table, dag) else {
        return Ok(None);
    };
    let keys = handles.iter().map(|h| record_key(table.id, *h)).collect();
    let got = engine.sessions().lock_rows(txn, keys).await?;
    let columns: Vec<(i64, DataType)> = table
        .columns
        .iter()
        .map(|c| Ok((c.id, arrow_type(&c.field_type.unwrap_or_default())?)))
        .collect::<Result<_>>()?;
    let defaults = table
        .columns
        .iter()
        .map(|c| c.has_default.then(|| c.default_value.clone()))
        .collect();
    let mut decoder = RowDecoder::new(&columns, got.len())?.with_defaults(defaults)?;
    for pair in &got {
        decoder.decode(&pair.value)?;
    }
    let schema = crate::df::table::table_schema(table)?;
    Ok(Some(RecordBatch::try_new(schema, decoder.finish()?)?))
}

/// `SELECT pk AS _key FROM … WHERE …`: the keys of the rows `rows` picks;
/// `with_indexed`: then the values of the columns the table's indexes
/// read ([`indexed_items`]), whose entries a DELETE deletes.
fn key_query(table: &TableDef, rows: &Delete, with_indexed: bool) -> Result<String> {
    let extra = if with_indexed {
        indexed_items(table)
    } else {
        String::new()
    };
    Ok(format!(
        "SELECT {} AS _key{extra} FROM {}{}",
        quote(key_column(table)?),
        rows.relation,
        where_clause(&rows.selection)
    ))
}

/// `, "c1" AS _old0, …`: the columns the table's indexes read (in
/// `Maintainer::column_ids` order), as a statement's rows had them.
fn indexed_items(table: &TableDef) -> String {
    crate::index::Maintainer::new(table)
        .column_ids()
        .iter()
        .enumerate()
        .filter_map(|(i, id)| {
            let c = table.columns.iter().find(|c| c.id == *id)?;
            Some(format!(", {} AS _old{i}", quote(&c.name)))
        })
        .collect()
}

/// The old indexed values of row `r` of `b`, whose columns from `first`
/// on are [`indexed_items`]'s (the columns `ids`), by column id.
fn old_values<'a>(
    ids: &[i64],
    b: &'a RecordBatch,
    first: usize,
    r: usize,
) -> Result<Vec<(i64, Datum<'a>)>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let col = b.column(first + i);
            Ok((*id, array_datum(col, col.data_type(), r)?))
        })
        .collect()
}

/// `op` on each row whose key `sql` ([`key_query`]) finds at `start_ts`.
async fn key_mutations(
    engine: &QueryEngine,
    table: &TableDef,
    sql: &str,
    start_ts: u64,
    op: Op,
) -> Result<Vec<Mutation>> {
    let out = engine.query_at(sql, start_ts, table).await?;
    let mut mutations = Vec::with_capacity(out.num_rows());
    let mut maint = crate::index::Maintainer::new(table);
    let ids = maint.column_ids();
    for b in &out.batches {
        let handles = b
            .column(0)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| Error::Internal("the primary key did not come back as BIGINT".into()))?;
        for (r, h) in handles.iter().enumerate() {
            let Some(h) = h else { continue };
            if op == Op::Delete && !maint.is_empty() {
                maint.change(h, Some(&old_values(&ids, b, 1, r)?), None)?;
            }
            mutations.push(Mutation {
                op: op as i32,
                key: record_key(table.id, h),
                value: vec![],
            });
        }
    }
    mutations.extend(maint.into_mutations());
    Ok(mutations)
}

/// `UPDATE table SET ... WHERE ...`, in `txn` or on its own; returns the
/// rows updated.
pub async fn update(
    engine: &QueryEngine,
    table: &TableDef,
    upd: &Update,
    txn: Option<&OpenTxn>,
) -> Result<usize> {
    update_query(table, upd)?;
    let rows_at = |start_ts: u64, table: TableDef| async move {
        let sql = update_query(&table, upd)?;
        let types = crate::engine::values::column_types(&table)?;
        let out = engine.query_at(&sql, start_ts, &table).await?;
        let mut enc = RowEncoder::new();
        let mut maint = crate::index::Maintainer::new(&table);
        let mut mutations = Vec::with_capacity(out.num_rows());
        for b in &out.batches {
            // The old indexed values follow the key and the new values.
            let old = Some(1 + table.columns.len());
            let rows = encode_rows(&table, &types, b, &mut enc, Op::Put, &mut maint, old)?;
            mutations.extend(rows);
        }
        mutations.extend(maint.into_mutations());
        Ok(mutations)
    };
    write(engine, table, txn, rows_at).await
}

/// `SELECT key AS _key, <each column's new value> AS _new{i}, <indexed
/// columns> AS _old{i} FROM … WHERE …`: the rows UPDATE `upd` changes.
fn update_query(table: &TableDef, upd: &Update) -> Result<String> {
    let key = key_column(table)?;
    // What each column becomes: its SET expression, or itself.
    let mut values: Vec<String> = table.columns.iter().map(|c| quote(&c.name)).collect();
    let value_items = |values: &[String]| -> String {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v} AS _new{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (col, expr) in &upd.assignments {
        let pos = table
            .columns
            .iter()
            .position(|c| &c.name == col)
            .ok_or_else(|| {
                let valid: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
                plan_err!(
                    "unknown column '{col}' in table {}; valid columns are: {}",
                    table.name,
                    valid.join(", ")
                )
            })?;
        if col == key {
            return Err(plan_err!(
                "UPDATE cannot change the primary key column {col}; \
                 DELETE the row and INSERT it again"
            ));
        }
        if upd.assignments.iter().filter(|(c, _)| c == col).count() > 1 {
            return Err(plan_err!("column {col} is assigned twice"));
        }
        values[pos] = format!("({expr})");
    }
    // Aliased: DataFusion wants distinct names (the key is a column too).
    Ok(format!(
        "SELECT {} AS _key, {}{} FROM {}{}",
        quote(key),
        value_items(&values),
        indexed_items(table),
        upd.relation,
        where_clause(&upd.selection)
    ))
}

/// Writes the rows `rows_at(start_ts, table)` finds: in `txn` at its
/// snapshot, or as an autocommit transaction ([`autocommit`]); returns
/// how many. `table` is the definition the statement was planned with;
/// when only its indexes changed meanwhile (an index built or dropped),
/// the rows are found again with the new definition.
async fn write<F, Fut>(
    engine: &QueryEngine,
    table: &TableDef,
    txn: Option<&OpenTxn>,
    rows_at: F,
) -> Result<usize>
where
    F: Fn(u64, TableDef) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Mutation>>>,
{
    let packed = crate::txn::is_packed(table);
    let def = parking_lot::Mutex::new(table.clone());
    let altered = AtomicBool::new(false);
    // The definition the rows were found with, if it is still the table's.
    let unchanged = |used: TableDef| {
        let (def, altered) = (&def, &altered);
        async move {
            match still_defined(engine, &used).await {
                Ok(None) => Ok(used),
                Ok(Some(now)) => {
                    *def.lock() = now;
                    Err(Error::Conflict(format!(
                        "the indexes of table {} changed while this statement ran",
                        used.name
                    )))
                }
                Err(e) => {
                    altered.store(true, Ordering::Relaxed);
                    Err(e)
                }
            }
        }
    };
    // The rows, found by `used`: a query built from a definition that an
    // ALTER has replaced may fail to plan (a column gone), and is then
    // the ALTER's conflict.
    let find = |start_ts: u64, used: TableDef| {
        let (rows_at, unchanged) = (&rows_at, &unchanged);
        async move {
            match rows_at(start_ts, used.clone()).await {
                Ok(m) => Ok(m),
                Err(e) => match unchanged(used).await {
                    Ok(_) => Err(e),
                    Err(changed) => Err(changed),
                },
            }
        }
    };
    // Rows, not their index entries.
    let rows_of = |m: &[Mutation]| m.iter().filter(|m| !is_index_key(&m.key)).count();
    if let Some(txn) = txn {
        let mut tries = 0;
        let (used, mutations) = loop {
            tries += 1;
            let used = def.lock().clone();
            let mutations = match find(txn.start_ts, used.clone()).await {
                Ok(m) => m,
                Err(Error::Conflict(_))
                    if tries < MAX_ATTEMPTS && !altered.load(Ordering::Relaxed) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            match unchanged(used).await {
                Ok(used) => break (used, mutations),
                Err(Error::Conflict(_))
                    if tries < MAX_ATTEMPTS && !altered.load(Ordering::Relaxed) => {}
                Err(e) => return Err(e),
            }
        };
        let n = rows_of(&mutations);
        return engine
            .sessions()
            .write(txn, &used, mutations)
            .await
            .map(|_| n)
            .map_err(|e| crate::index::name_duplicate(e, &used));
    }
    autocommit(
        || async {
            let start_ts = engine.txns().timestamp().await?;
            let used = def.lock().clone();
            let mutations = find(start_ts, used.clone()).await?;
            let used = unchanged(used).await?;
            let n = rows_of(&mutations);
            if n > 0 {
                let check = crate::schema_check::SchemaCheck::of(&used);
                engine
                    .txns()
                    .write_checked(start_ts, mutations, packed, write_deadline(), Some(&check))
                    .await
                    .map_err(|e| crate::index::name_duplicate(e, &used))?;
            }
            Ok(n)
        },
        &altered,
    )
    .await
}

/// Fails if `table`, as the statement read it, is no longer the table's
/// definition. The statement's rows were found by a query that read the
/// catalog again, and are encoded by `table`'s column ids: an ALTER
/// TABLE in between (columns renamed, the table renamed and another made
/// under its name) would write them into the wrong columns or table, and
/// a column added in between would be missing from the rows an UPDATE
/// rewrites, losing a value written to it since. Checked after the rows
/// were found, which is after the snapshot was taken: an ALTER after the
/// check is one whose new columns no row at the snapshot has, and a
/// write to them commits after the snapshot, so it conflicts with this
/// statement's (first committer wins).
///
/// Only the indexes changed (an index build or drop moved on): Ok with
/// the table's definition now, for the statement to find its rows again
/// (their index entries differ; the rows do not).
async fn still_defined(engine: &QueryEngine, table: &TableDef) -> Result<Option<TableDef>> {
    // What the rows are encoded by (the id counters meta keeps may move).
    let rows_part = |t: &TableDef| (t.id, t.columns.clone(), t.handle_column_id, t.layout);
    match engine.cluster.get_table(&table.name).await? {
        Some(now) if &now == table => Ok(None),
        Some(now) if rows_part(&now) == rows_part(table) => Ok(Some(now)),
        _ => Err(Error::Conflict(format!(
            "table {} was altered while this statement ran; nothing was written: run it again",
            table.name
        ))),
    }
}

/// `INSERT INTO table [(columns)] query`, in `txn` or on its own: the
/// query runs at the statement's snapshot (so `INSERT INTO t SELECT * FROM
/// t` reads the rows there were before it) and its rows are inserted as
/// one transaction, each value cast to its column's type and checked as
/// INSERT ... VALUES checks it; a row whose key exists fails the whole
/// statement. Returns how many rows.
pub async fn insert_select(
    engine: &QueryEngine,
    table: &TableDef,
    columns: &[String],
    query: &str,
    txn: Option<&OpenTxn>,
) -> Result<usize> {
    let targets = crate::engine::values::target_positions(table, columns)?;
    let types = crate::engine::values::column_types(table)?;
    // A column the INSERT does not name gets its DEFAULT.
    let defaults = crate::engine::values::column_defaults(table)?;
    let handle_pos = table.key_position();
    // (Only the indexes may differ from `table` in the definition `now`:
    // the columns, and so the targets and types, stay.)
    let rows_at = |start_ts: u64, now: TableDef| {
        let (targets, types, defaults) = (&targets, &types, &defaults);
        async move {
            let table = &now;
            let out = engine.query_at(query, start_ts, table).await?;
            let width = out.schema.fields().len();
            if width != targets.len() {
                return Err(plan_err!(
                    "INSERT into {} names {} columns but its query gives {width}",
                    table.name,
                    targets.len()
                ));
            }
            let rows = out.num_rows();
            let mut handles = match handle_pos {
                Some(_) => Vec::new(),
                None if rows == 0 => Vec::new(),
                None => {
                    let first = engine
                        .cluster
                        .alloc_handles(table.id, rows as u64, 0)
                        .await?;
                    (0..rows as i64).map(|i| first + i).collect()
                }
            }
            .into_iter();
            let mut enc = RowEncoder::new();
            let mut maint = crate::index::Maintainer::new(table);
            let mut seen = std::collections::HashSet::new();
            let mut mutations = Vec::with_capacity(rows);
            for b in &out.batches {
                // Every column of the table, in order; the ones not
                // targeted are NULL.
                let mut full: Vec<ArrayRef> = types
                    .iter()
                    .zip(defaults)
                    .map(|((dt, ..), d)| match d {
                        Some(one) => {
                            let idx = arrow::array::UInt32Array::from(vec![0u32; b.num_rows()]);
                            arrow::compute::take(one.as_ref(), &idx, None)
                        }
                        None => Ok(arrow::array::new_null_array(dt, b.num_rows())),
                    })
                    .collect::<std::result::Result<_, _>>()?;
                for (i, &pos) in targets.iter().enumerate() {
                    full[pos] = b.column(i).clone();
                }
                let keys: ArrayRef = match handle_pos {
                    Some(p) => cast_with_options(
                        &full[p],
                        &DataType::Int64,
                        &CastOptions {
                            safe: false,
                            ..Default::default()
                        },
                    )
                    .map_err(|e| plan_err!("primary key {}: {e}", table.columns[p].name))?,
                    None => Arc::new(arrow::array::Int64Array::from_iter_values(
                        handles.by_ref().take(b.num_rows()),
                    )),
                };
                let keys = keys.as_primitive::<Int64Type>();
                for r in 0..keys.len() {
                    if keys.is_null(r) {
                        let p = handle_pos.unwrap_or_default();
                        return Err(plan_err!(
                            "column {} is NOT NULL but a row of the query gives it no value",
                            table.columns[p].name
                        ));
                    }
                    if !seen.insert(keys.value(r)) {
                        return Err(plan_err!(
                            "duplicate key: handle {} appears twice in this INSERT",
                            keys.value(r)
                        ));
                    }
                }
                let mut columns = vec![Arc::new(keys.clone()) as ArrayRef];
                columns.extend(full);
                let batch = RecordBatch::try_new_with_options(
                    rows_schema(table, types),
                    columns,
                    &arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )?;
                mutations.extend(encode_rows(
                    table,
                    types,
                    &batch,
                    &mut enc,
                    Op::Insert,
                    &mut maint,
                    None,
                )?);
            }
            mutations.extend(maint.into_mutations());
            Ok(mutations)
        }
    };
    write(engine, table, txn, rows_at).await
}

/// The schema of [`encode_rows`]'s input for `table`: the handle, then
/// every column as a nullable field of its type.
fn rows_schema(table: &TableDef, types: &[(DataType, bool, u32)]) -> arrow::datatypes::SchemaRef {
    let mut fields = vec![arrow::datatypes::Field::new("_key", DataType::Int64, false)];
    for (c, (dt, ..)) in table.columns.iter().zip(types) {
        fields.push(arrow::datatypes::Field::new(&c.name, dt.clone(), true));
    }
    Arc::new(arrow::datatypes::Schema::new(fields))
}

/// The rows of `batch` (the key, then every column's value) as row
/// mutations of kind `op` (UPDATE's `Put`, INSERT's `Insert`), each value
/// cast to its column's type and checked against it; their index
/// entries go to `maint`, the old ones read from `batch`'s columns from
/// `old` on when the rows replace rows ([`indexed_items`]).
fn encode_rows(
    table: &TableDef,
    types: &[(DataType, bool, u32)],
    batch: &RecordBatch,
    enc: &mut RowEncoder,
    op: Op,
    maint: &mut crate::index::Maintainer,
    old: Option<usize>,
) -> Result<Vec<Mutation>> {
    let (what, verb) = match op {
        Op::Insert => ("value", "INSERT"),
        _ => ("new value", "UPDATE"),
    };
    let handles = batch
        .column(0)
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| Error::Internal("the primary key did not come back as BIGINT".into()))?;
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns: Vec<ArrayRef> = types
        .iter()
        .zip(&table.columns)
        .enumerate()
        .map(|(i, ((dt, ..), c))| {
            cast_with_options(batch.column(i + 1), dt, &strict).map_err(|e| {
                let out_of_range = matches!(e, arrow::error::ArrowError::ArithmeticOverflow(_))
                    || e.to_string().contains("too large")
                    || e.to_string().contains("overflow");
                let what = format!("{what} of column {} ", c.name);
                if out_of_range {
                    Error::Overflow(format!("{what}is out of range for {}: {e}", sql_name(dt)))
                } else {
                    plan_err!("{what}does not fit {}: {e}", sql_name(dt))
                }
            })
        })
        .collect::<Result<_>>()?;
    let ids = maint.column_ids();
    let mut out = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        if handles.is_null(r) {
            return Err(Error::Internal("a row without its primary key".into()));
        }
        let mut datums = Vec::with_capacity(columns.len());
        for ((col, (dt, nullable, max_len)), def) in columns.iter().zip(types).zip(&table.columns) {
            let d = array_datum(col, dt, r)?;
            match &d {
                Datum::Null if !nullable => {
                    return Err(plan_err!(
                        "column {} is NOT NULL: {verb} cannot set it to NULL",
                        def.name
                    ))
                }
                Datum::Bytes(b) if *max_len > 0 => {
                    let s = String::from_utf8_lossy(b);
                    if s.chars().count() > *max_len as usize {
                        return Err(plan_err!(
                            "{what} of column {} is too long for VARCHAR({max_len}): '{s}'",
                            def.name
                        ));
                    }
                }
                _ => {}
            }
            datums.push((def.id, d));
        }
        if !maint.is_empty() {
            let before = old
                .map(|first| old_values(&ids, batch, first, r))
                .transpose()?;
            maint.change(handles.value(r), before.as_deref(), Some(&datums))?;
        }
        let mut value = Vec::new();
        enc.encode(&datums, &mut value)?;
        out.push(Mutation {
            op: op as i32,
            key: record_key(table.id, handles.value(r)),
            value,
        });
    }
    Ok(out)
}
