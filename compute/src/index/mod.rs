//! Secondary indexes: TiDB's model on Quarry's Percolator.
//!
//! WHAT AN INDEX IS. An index's entries are keys in its table's key
//! space, `t{table}_i{index, values, handle}` (`coprocessor::codec::index`
//! has the encoding), in the same regions as the table's first rows until
//! a split moves them out. They are written by the same transaction as
//! the row they describe, as MVCC keys like rows (locks, versions), so a
//! snapshot sees a row and its entries together or not at all. A UNIQUE
//! index's entry is keyed by the values alone and written with the
//! INSERT mutation, so the store refuses a second row with the same values
//! inside the writing transaction ([`Maintainer`]).
//!
//! WHO KEEPS THEM. Every writer derives its entries' mutations from its
//! rows' in one place, [`Maintainer`]: an INSERT puts the new row's
//! entries, a DELETE deletes the old row's, an UPDATE does both when the
//! indexed values change. `quarry load` into an existing table writes
//! each batch as one such transaction, entries included, checked as an
//! INSERT's. A load that creates its table writes around transactions:
//! an index created on that table while the load runs misses its rows.
//!
//! ONLINE BUILD (`engine/index_ddl.rs`). F1's protocol as TiDB runs it: the index goes
//! DELETE_ONLY → WRITE_ONLY → (backfill) → PUBLIC, one meta write each.
//! F1 leases the schema to each server and waits out the lease between
//! steps, so no two servers are more than one step apart. Quarry's compute
//! processes read the catalog per write statement instead (a query plans
//! over a kept catalog checked against its snapshot's catalog version,
//! `catalog_cache.rs`, so it reads the index states of its snapshot), and
//! a write to a table with an index checks at commit, after its commit_ts
//! is taken,
//! that the table's indexes are still in the states it planned with
//! ([`SchemaCheck`]); a change fails the statement (an autocommit one
//! runs again with the new definition). So a write that commits without
//! knowing a step committed before the step was taken, below the
//! backfill's snapshot. A write to a table without an index may commit in
//! one phase, with no such check; its commit_ts is capped at its start_ts
//! plus [`SCHEMA_LEASE`] (`PrewriteRequest.max_one_pc_commit_ts`), and the
//! build waits that long after its first step before going on: the lease,
//! bounded by a timestamp instead of a clock.
//!
//! READS (`access.rs`, `read.rs`). A scan of a row-layout table whose
//! pushed-down selection pins an index's leading column (`=`, `IN`, a
//! range) reads the index's entries at the scan's snapshot, then only
//! those rows (TiDB's IndexLookUp), when the statistics say few rows
//! match. The selection still runs over the rows, so the index only has to
//! find a superset. An index is used only at snapshots at or after its
//! `public_ts`: an older snapshot may miss entries the backfill wrote.

pub mod access;
pub mod read;

use std::collections::BTreeMap;

use quarry_coprocessor::codec::index::entry;
use quarry_coprocessor::codec::row::Datum;
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::{IndexDef, IndexState, TableDef};

pub use crate::schema_check::{SchemaCheck, SCHEMA_LEASE};
use crate::{plan_err, Error, Result};

/// One pending entry write of a statement.
struct EntryWrite {
    op: Op,
    value: Vec<u8>,
}

/// The entry mutations that go with a statement's row mutations.
pub struct Maintainer {
    table_id: i64,
    indexes: Vec<IndexDef>,
    writes: BTreeMap<Vec<u8>, EntryWrite>,
}

impl Maintainer {
    pub fn new(table: &TableDef) -> Self {
        Maintainer {
            table_id: table.id,
            indexes: table.indexes.clone(),
            writes: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.indexes.is_empty()
    }

    /// The ids of the columns some index reads, each once.
    pub fn column_ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .indexes
            .iter()
            .flat_map(|i| i.column_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The row `handle` goes from `old` to `new` (each the row's values by
    /// column id, at least the indexed ones; None: no row).
    pub fn change(
        &mut self,
        handle: i64,
        old: Option<&[(i64, Datum)]>,
        new: Option<&[(i64, Datum)]>,
    ) -> Result<()> {
        for i in 0..self.indexes.len() {
            let ix = &self.indexes[i];
            let entry_of = |row: &[(i64, Datum)]| {
                let values: Vec<Datum> = ix
                    .column_ids
                    .iter()
                    .map(|c| {
                        row.iter()
                            .find(|(id, _)| id == c)
                            .map_or(Datum::Null, |(_, d)| *d)
                    })
                    .collect();
                entry(self.table_id, ix.id, ix.unique, &values, handle)
            };
            let before = old.map(entry_of);
            let after = new
                .filter(|_| ix.state() != IndexState::DeleteOnly)
                .map(entry_of);
            if before == after {
                continue;
            }
            let (unique, name) = (ix.unique, ix.name.clone());
            if let Some((key, _)) = before {
                self.record(key, Op::Delete, Vec::new(), &name)?;
            }
            if let Some((key, value)) = after {
                // A unique entry (its key has no handle) must be new.
                let op = if unique && !value.is_empty() {
                    Op::Insert
                } else {
                    Op::Put
                };
                self.record(key, op, value, &name)?;
            }
        }
        Ok(())
    }

    fn record(&mut self, key: Vec<u8>, op: Op, value: Vec<u8>, index: &str) -> Result<()> {
        use std::collections::btree_map::Entry;
        match self.writes.entry(key) {
            Entry::Vacant(v) => {
                v.insert(EntryWrite { op, value });
            }
            Entry::Occupied(mut o) => {
                let w = o.get_mut();
                match (w.op, op) {
                    // One row leaves the values another takes: the entry
                    // now names the second row.
                    (Op::Delete, Op::Put | Op::Insert) => {
                        w.op = Op::Put;
                        w.value = value;
                    }
                    (Op::Put | Op::Insert, Op::Delete) => w.op = Op::Put,
                    (Op::Delete, Op::Delete) => {}
                    _ => return Err(duplicate(index)),
                }
            }
        }
        Ok(())
    }

    /// The entry mutations, in key order.
    pub fn into_mutations(self) -> Vec<Mutation> {
        self.writes
            .into_iter()
            .map(|(key, w)| Mutation {
                op: w.op as i32,
                key,
                value: w.value,
            })
            .collect()
    }
}

/// The error of a second row with a UNIQUE index's values.
pub fn duplicate(index: &str) -> Error {
    plan_err!("duplicate key value violates unique index {index}")
}

/// A store's duplicate-key error over one of `table`'s unique entries,
/// named by its index.
pub fn name_duplicate(e: Error, table: &TableDef) -> Error {
    let Error::InvalidInput(m) = &e else {
        return e;
    };
    if !m.starts_with("duplicate key: a row with index entry ") {
        return e;
    }
    let hex = m
        .trim_start_matches("duplicate key: a row with index entry ")
        .split_whitespace()
        .next()
        .unwrap_or_default();
    let id = (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Vec<u8>>();
    let index = quarry_coprocessor::codec::key::index_key_body(&id)
        .ok()
        .and_then(|b| quarry_coprocessor::codec::key::decode_i64(&b).ok())
        .and_then(|ix| table.indexes.iter().find(|i| i.id == ix));
    match index {
        Some(i) => duplicate(&i.name),
        None => e,
    }
}

/// The index named `name` in any of `tables`, with its table.
pub fn find<'t>(tables: &'t [TableDef], name: &str) -> Option<(&'t TableDef, &'t IndexDef)> {
    tables
        .iter()
        .find_map(|t| t.indexes.iter().find(|i| i.name == name).map(|i| (t, i)))
}
