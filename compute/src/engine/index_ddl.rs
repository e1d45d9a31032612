//! CREATE INDEX and DROP INDEX, online.
//!
//! CREATE INDEX (F1's states, `mod.rs` says why one lease suffices):
//!
//! 1. The index enters the table's definition as DELETE_ONLY. From here
//!    every write to the table commits in two phases and checks the
//!    table's indexes at commit.
//! 2. Wait [`SCHEMA_LEASE`](crate::index::SCHEMA_LEASE) by the timestamp oracle:
//!    a write planned before step 1 has committed below that (its
//!    one-phase commit_ts is capped) or fails its check.
//! 3. WRITE_ONLY: every write now keeps the index's entries.
//! 4. Backfill: the rows at a snapshot `b` taken after step 3, their
//!    entries written in chunks, each a transaction that *started* at `b`:
//!    an entry some writer touched after `b` is that writer's (it knew the
//!    index) and is left as it is. Before a chunk is written its entries'
//!    records are read; a lock is resolved first, an entry with a version
//!    newer than `b` is passed over, and for a UNIQUE index an entry that
//!    names another row fails the build if that row still holds the
//!    values (two rows do), as TiDB's `ADD UNIQUE INDEX` fails. A chunk
//!    that loses a race with a writer anyway (its prewrite conflicts) is
//!    read and written again.
//! 5. PUBLIC, with `public_ts` from the oracle after the last chunk
//!    committed: readers may use it at snapshots from there on.
//!
//! A failure in 4 drops the index again (its partial entries stay, unread,
//! until the table is dropped; index ids are never reused).
//!
//! DROP INDEX goes the other way: WRITE_ONLY (readers stop using it), a
//! lease, DELETE_ONLY, a lease, gone. Its entries stay in the key space,
//! unread (a range delete of them is left to do), until the table goes.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use prost::Message;
use quarry_coprocessor::codec::index::{entry, entry_handle};
use quarry_coprocessor::codec::row::{array_datum, Datum};
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::{IndexDef, IndexState, TableDef};

use crate::engine::dml::{key_column, quote};
use crate::engine::QueryEngine;
use crate::sql::CreateIndex;
use crate::{plan_err, Error, Result};

/// Entries per backfill transaction.
const CHUNK: usize = 4096;
/// Backfill transactions in flight at once.
const CHUNKS_AT_ONCE: usize = 4;
/// Times a chunk is read and written again after losing a race.
const CHUNK_ATTEMPTS: usize = 50;
/// Times a state change is tried again over a concurrent ALTER.
const STEP_ATTEMPTS: usize = 10;

/// The id the next index of `t` takes.
fn next_index_id(t: &TableDef) -> i64 {
    let past = t.indexes.iter().map(|i| i.id).max().unwrap_or(0) + 1;
    t.next_index_id.max(past)
}

/// Applies `change` to the stored definition of the table with id
/// `table_id` (named `name` when last seen), as one meta write that
/// succeeds only over the definition it was made from; returns the new
/// definition.
async fn step(
    engine: &QueryEngine,
    name: &str,
    table_id: i64,
    change: impl Fn(&mut TableDef) -> Result<()>,
) -> Result<TableDef> {
    let mut last = None;
    for _ in 0..STEP_ATTEMPTS {
        let Some(old) = engine.cluster.get_table(name).await? else {
            return Err(plan_err!("table {name} does not exist"));
        };
        if old.id != table_id {
            return Err(plan_err!("table {name} was dropped meanwhile"));
        }
        let mut new = old.clone();
        change(&mut new)?;
        match engine
            .cluster
            .alter_table(name, new, old.encode_to_vec())
            .await
        {
            Ok(t) => return Ok(t),
            Err(Error::InvalidInput(m)) if m.contains("changed by another statement") => {
                last = Some(m);
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(last.unwrap_or_default()))
}

fn set_state(t: &mut TableDef, id: i64, state: IndexState, public_ts: u64) -> Result<()> {
    let ix = t
        .indexes
        .iter_mut()
        .find(|i| i.id == id)
        .ok_or_else(|| plan_err!("the index was dropped meanwhile"))?;
    ix.set_state(state);
    ix.public_ts = public_ts;
    Ok(())
}

/// Waits until the oracle is [`crate::index::SCHEMA_LEASE`] past `since`.
async fn wait_lease(engine: &QueryEngine, since: u64) -> Result<()> {
    let until = since.saturating_add(crate::schema_check::lease_ts());
    loop {
        let now = engine.txns().timestamp().await?;
        if now >= until {
            return Ok(());
        }
        let ms = (until - now) >> 18;
        tokio::time::sleep(Duration::from_millis(ms.max(1))).await;
    }
}

/// `CREATE [UNIQUE] INDEX`: false when it existed (IF NOT EXISTS).
pub async fn create_index(engine: &QueryEngine, ci: &CreateIndex) -> Result<bool> {
    let tables = engine.cluster.list_tables().await?;
    if let Some((t, _)) = crate::index::find(&tables, &ci.name) {
        if ci.if_not_exists {
            return Ok(false);
        }
        return Err(plan_err!(
            "index {} already exists (on table {})",
            ci.name,
            t.name
        ));
    }
    let Some(table) = tables.iter().find(|t| t.name == ci.table) else {
        return Err(plan_err!("table {} does not exist", ci.table));
    };
    if !table.index_space {
        return Err(plan_err!(
            "table {} was created before Quarry had indexes: its key range has no room \
             for them; copy it into a new table (CREATE TABLE … then INSERT … SELECT)",
            table.name
        ));
    }
    let mut column_ids = Vec::new();
    for c in &ci.columns {
        let Some(col) = table.columns.iter().find(|x| &x.name == c) else {
            let valid: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
            return Err(plan_err!(
                "unknown column '{c}' in table {}; valid columns are: {}",
                table.name,
                valid.join(", ")
            ));
        };
        if column_ids.contains(&col.id) {
            return Err(plan_err!("column {c} is listed twice"));
        }
        column_ids.push(col.id);
    }
    if column_ids.is_empty() {
        return Err(plan_err!("an index needs at least one column"));
    }
    let id = next_index_id(table);
    let def = IndexDef {
        id,
        name: ci.name.clone(),
        column_ids,
        unique: ci.unique,
        state: IndexState::DeleteOnly as i32,
        public_ts: 0,
    };
    let (name, table_id) = (table.name.clone(), table.id);
    step(engine, &name, table_id, |t| {
        if t.indexes.iter().any(|i| i.name == def.name) {
            return Err(plan_err!("index {} already exists", def.name));
        }
        t.indexes.push(def.clone());
        t.next_index_id = id + 1;
        Ok(())
    })
    .await?;
    tracing::info!(index = ci.name, table = name, "index build: delete-only");
    let built = async {
        let since = engine.txns().timestamp().await?;
        wait_lease(engine, since).await?;
        let table = step(engine, &name, table_id, |t| {
            set_state(t, id, IndexState::WriteOnly, 0)
        })
        .await?;
        tracing::info!(index = ci.name, "index build: write-only, backfilling");
        let ix = table
            .indexes
            .iter()
            .find(|i| i.id == id)
            .cloned()
            .ok_or_else(|| plan_err!("the index was dropped meanwhile"))?;
        let written = backfill(engine, &table, &ix).await?;
        let public_ts = engine.txns().timestamp().await?;
        step(engine, &name, table_id, |t| {
            set_state(t, id, IndexState::Public, public_ts)
        })
        .await?;
        tracing::info!(index = ci.name, entries = written, "index build: public");
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = built {
        // Gone again; its partial entries are never read.
        let _ = step(engine, &name, table_id, |t| {
            t.indexes.retain(|i| i.id != id);
            Ok(())
        })
        .await;
        return Err(e.with_context(&format!(
            "CREATE INDEX {} failed; the index is dropped",
            ci.name
        )));
    }
    Ok(true)
}

/// `DROP INDEX`: false when there was none (IF EXISTS).
pub async fn drop_index(engine: &QueryEngine, name: &str, if_exists: bool) -> Result<bool> {
    let tables = engine.cluster.list_tables().await?;
    let Some((table, ix)) = crate::index::find(&tables, name) else {
        if if_exists {
            return Ok(false);
        }
        return Err(plan_err!("index {name} does not exist"));
    };
    let (tname, table_id, id) = (table.name.clone(), table.id, ix.id);
    if ix.state() == IndexState::Public {
        step(engine, &tname, table_id, |t| {
            set_state(t, id, IndexState::WriteOnly, 0)
        })
        .await?;
        let since = engine.txns().timestamp().await?;
        wait_lease(engine, since).await?;
    }
    step(engine, &tname, table_id, |t| {
        set_state(t, id, IndexState::DeleteOnly, 0)
    })
    .await?;
    let since = engine.txns().timestamp().await?;
    wait_lease(engine, since).await?;
    step(engine, &tname, table_id, |t| {
        t.indexes.retain(|i| i.id != id);
        Ok(())
    })
    .await?;
    Ok(true)
}

/// One entry the backfill writes: its key, value and row.
struct Pending {
    key: Vec<u8>,
    value: Vec<u8>,
    handle: i64,
}

/// Writes the entries of every row of `table` at a fresh snapshot;
/// returns how many entries were written.
async fn backfill(engine: &QueryEngine, table: &TableDef, ix: &IndexDef) -> Result<usize> {
    let txns = engine.txns();
    let b = txns.timestamp().await?;
    let _hold = txns.hold_read(b);
    let key = key_column(table)?.to_string();
    let mut items = String::new();
    for id in &ix.column_ids {
        let c = table
            .columns
            .iter()
            .find(|c| c.id == *id)
            .ok_or_else(|| plan_err!("an indexed column was dropped meanwhile"))?;
        items.push_str(&format!(", {}", quote(&c.name)));
    }
    let sql = format!(
        "SELECT {} AS _key{items} FROM {}",
        quote(&key),
        quote(&table.name)
    );
    let out = engine.query_at(&sql, b, table).await?;
    let mut written = 0;
    for batch in &out.batches {
        let handles = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .ok_or_else(|| Error::Internal("the row key did not come back as BIGINT".into()))?;
        let mut pending = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let values: Vec<Datum> = (1..batch.num_columns())
                .map(|c| {
                    let col = batch.column(c);
                    array_datum(col, col.data_type(), r)
                })
                .collect::<quarry_coprocessor::Result<_>>()?;
            let h = handles.value(r);
            let (key, value) = entry(table.id, ix.id, ix.unique, &values, h);
            pending.push(Pending {
                key,
                value,
                handle: h,
            });
        }
        pending.sort_by(|x, y| x.key.cmp(&y.key));
        for w in pending.windows(2) {
            if w[0].key == w[1].key {
                return Err(crate::index::duplicate(&ix.name)
                    .with_context(&format!("rows {} and {}", w[0].handle, w[1].handle)));
            }
        }
        let mut chunks = Vec::new();
        for chunk in pending.chunks(CHUNK) {
            chunks.push(write_chunk(engine, table, ix, chunk, b));
        }
        let counts: Vec<usize> = futures::stream::iter(chunks)
            .buffer_unordered(CHUNKS_AT_ONCE)
            .try_collect()
            .await?;
        written += counts.iter().sum::<usize>();
    }
    Ok(written)
}

/// Writes one chunk of entries (sorted by key) as a transaction that
/// started at `b`; returns how many it wrote. The store's prewrite is the
/// check: a version committed at or after `b` refuses a key (a writer's
/// since the snapshot: it knew the index, its entry stands, the key is
/// passed over), a lock is resolved first (`Txns`), and a UNIQUE entry
/// is an INSERT that finds an existing entry (the same row's: passed
/// over; another row's: a duplicate if our row still holds the values).
async fn write_chunk(
    engine: &QueryEngine,
    table: &TableDef,
    ix: &IndexDef,
    chunk: &[Pending],
    b: u64,
) -> Result<usize> {
    let txns = engine.txns();
    let mut last_err = None;
    // Entries a writer took since `b`, or that are there already.
    let mut skip: std::collections::HashSet<Vec<u8>> = Default::default();
    for _ in 0..CHUNK_ATTEMPTS {
        let deadline = Instant::now() + crate::txn::WRITE_DEADLINE;
        let mutations: Vec<Mutation> = chunk
            .iter()
            .filter(|p| !skip.contains(&p.key))
            .map(|p| Mutation {
                // A unique entry (no handle in its key) must be new.
                op: if ix.unique && !p.value.is_empty() {
                    Op::Insert as i32
                } else {
                    Op::Put as i32
                },
                key: p.key.clone(),
                value: p.value.clone(),
            })
            .collect();
        if mutations.is_empty() {
            return Ok(0);
        }
        let n = mutations.len();
        let keys: Vec<Vec<u8>> = mutations.iter().map(|m| m.key.clone()).collect();
        let primary = keys[0].clone();
        let e = match txns
            .prewrite(b, &primary, mutations, false, false, deadline)
            .await
        {
            Ok(()) => match txns.commit(b, keys.clone(), deadline).await {
                Ok(_) => return Ok(n),
                // The primary's commit may have applied: nothing is
                // rolled back; the next round finds its own records.
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            },
            Err(e) => e,
        };
        txns.rollback(b, keys.clone()).await;
        let message = e.to_string();
        if let Some(k) = named_key(&message, "write conflict on index entry ") {
            if keys.contains(&k) {
                // Every entry a writer touched since `b`, not only the one
                // named: one conflict a round would not keep up with busy
                // writers.
                let range = KeyRange::new(
                    keys[0].clone(),
                    quarry_coprocessor::codec::key::row_keys_end(&keys[keys.len() - 1]),
                );
                for newer in newer_than(txns, range, b, deadline).await? {
                    if !ix.unique && keys.contains(&newer) {
                        skip.insert(newer);
                    }
                }
                let p = chunk
                    .iter()
                    .find(|p| p.key == k)
                    .expect("a key of the chunk");
                if ix.unique
                    && still_holds(engine, table, ix, p).await?
                    && taken_by_other(engine, p).await?
                {
                    return Err(crate::index::duplicate(&ix.name));
                }
                skip.insert(k);
                last_err = Some(e);
                continue;
            }
        }
        if let Some(k) = named_key(&message, "duplicate key: a row with index entry ") {
            if let Some(p) = chunk.iter().find(|p| p.key == k) {
                if taken_by_other(engine, p).await? && still_holds(engine, table, ix, p).await? {
                    return Err(crate::index::duplicate(&ix.name));
                }
                skip.insert(k);
                last_err = Some(e);
                continue;
            }
        }
        match e {
            Error::Conflict(_) | Error::Unavailable(_) | Error::Deadline(_) => last_err = Some(e),
            e => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| Error::Conflict("the index backfill kept losing races".into())))
}

/// The entries in `range` with a version committed after `b` (a rollback
/// record aside).
async fn newer_than(
    txns: &std::sync::Arc<crate::txn::Txns>,
    range: KeyRange,
    b: u64,
    deadline: Instant,
) -> Result<Vec<Vec<u8>>> {
    use quarry_coprocessor::codec::key::{classify_key, IndexPart, KeyKind};
    let mut out = Vec::new();
    for p in crate::index::read::raw_records(txns, range, deadline).await? {
        if let KeyKind::Index {
            base_len,
            part: IndexPart::Version { commit_ts, kind },
        } = classify_key(&p.key)
        {
            if commit_ts > b && kind != quarry_coprocessor::codec::mvcc::WriteKind::Rollback {
                out.push(p.key[..base_len].to_vec());
            }
        }
    }
    Ok(out)
}

/// Whether `p`'s unique entry names another row now.
async fn taken_by_other(engine: &QueryEngine, p: &Pending) -> Result<bool> {
    let txns = engine.txns();
    let now = txns.timestamp().await?;
    let range = KeyRange::new(
        p.key.clone(),
        quarry_coprocessor::codec::key::row_keys_end(&p.key),
    );
    let deadline = Instant::now() + crate::txn::WRITE_DEADLINE;
    for e in crate::index::read::entries_at(txns, range, now, deadline).await? {
        if e.key == p.key && !e.value.is_empty() && entry_handle(&e.key, &e.value)? != p.handle {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The entry a store's error names after `lead` (its messages say "…
/// index entry HEX…", `raftstore/src/txn.rs::describe`).
fn named_key(message: &str, lead: &str) -> Option<Vec<u8>> {
    let (_, rest) = message.split_once(lead)?;
    let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether the row of `p` holds, now, the values `p`'s entry was made
/// from (read at a fresh snapshot).
async fn still_holds(
    engine: &QueryEngine,
    table: &TableDef,
    ix: &IndexDef,
    p: &Pending,
) -> Result<bool> {
    let now = engine.txns().timestamp().await?;
    let key = key_column(table)?.to_string();
    let mut items = Vec::new();
    for id in &ix.column_ids {
        if let Some(c) = table.columns.iter().find(|c| c.id == *id) {
            items.push(quote(&c.name));
        }
    }
    let sql = format!(
        "SELECT {} FROM {} WHERE {} = {}",
        items.join(", "),
        quote(&table.name),
        quote(&key),
        p.handle
    );
    let out = engine.query_at(&sql, now, table).await?;
    for batch in &out.batches {
        for r in 0..batch.num_rows() {
            let values: Vec<Datum> = (0..batch.num_columns())
                .map(|c| {
                    let col = batch.column(c);
                    array_datum(col, col.data_type(), r)
                })
                .collect::<quarry_coprocessor::Result<_>>()?;
            if entry(table.id, ix.id, ix.unique, &values, p.handle).0 == p.key {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
