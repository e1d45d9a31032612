//! The tables a transaction writes, as it planned its writes, checked at
//! its commit: the transaction layer's half of online index builds
//! (`index/mod.rs` tells the whole protocol).
//!
//! A write planned over one set of a table's indexes must not commit after
//! a build step changed that set unless it commits below the step's
//! snapshot. [`crate::txn::Txns::commit_checked`] takes a [`SchemaCheck`]:
//! a transaction that writes a table with an index commits in two phases
//! and verifies, after its commit_ts is taken, that every table's indexes
//! are still as planned; one that writes only tables without indexes may
//! commit in one phase, its commit_ts capped at its start_ts plus
//! [`SCHEMA_LEASE`], which a build waits out after its first step.
//!
//! It lives below the transactions (it needs only the catalog) so that
//! `txn` does not import the index module, which plans and writes above it.

use std::time::Duration;

use quarry_proto::meta::TableDef;

use crate::cluster::Cluster;
use crate::{Error, Result};

/// How long after an index build's first step a write planned without the
/// index may still commit (in one phase), and so how long the build waits
/// before its next step.
pub const SCHEMA_LEASE: Duration = Duration::from_secs(2);

/// [`SCHEMA_LEASE`] in timestamp units (physical ms << 18).
pub(crate) fn lease_ts() -> u64 {
    (SCHEMA_LEASE.as_millis() as u64) << 18
}

/// The indexes a statement planned its writes with: (id, state) each.
type Signature = Vec<(i64, i32)>;

fn signature(t: &TableDef) -> Signature {
    t.indexes.iter().map(|i| (i.id, i.state)).collect()
}

/// The tables a transaction writes, as it planned its writes: checked at
/// its commit ([`crate::txn::Txns::commit_checked`]).
#[derive(Debug, Clone, Default)]
pub struct SchemaCheck {
    /// (name, id, indexes) of each table.
    tables: Vec<(String, i64, Signature)>,
}

impl SchemaCheck {
    pub fn of(table: &TableDef) -> Self {
        let mut c = SchemaCheck::default();
        c.add(table);
        c
    }

    /// Adds `table` (once per table id).
    pub fn add(&mut self, table: &TableDef) {
        if !self.tables.iter().any(|(_, id, _)| *id == table.id) {
            self.tables
                .push((table.name.clone(), table.id, signature(table)));
        }
    }

    fn has_indexes(&self) -> bool {
        self.tables.iter().any(|(_, _, s)| !s.is_empty())
    }

    /// The highest commit_ts a one-phase commit of a transaction that
    /// started at `start_ts` may take; None: it must commit in two phases
    /// (a table it writes has an index, checked at commit).
    pub fn max_one_pc_commit_ts(&self, start_ts: u64) -> Option<u64> {
        (!self.has_indexes()).then(|| start_ts.saturating_add(lease_ts()))
    }

    /// Fails with a conflict (run the statement again) if a table's
    /// indexes are no longer as planned.
    pub async fn verify(&self, cluster: &Cluster) -> Result<()> {
        for (name, id, sig) in &self.tables {
            let now = cluster.get_table(name).await?;
            if now
                .as_ref()
                .is_some_and(|t| t.id == *id && signature(t) == *sig)
            {
                continue;
            }
            return Err(Error::Conflict(format!(
                "the indexes of table {name} changed while this transaction wrote it \
                 (an index is being built or dropped); nothing was written: run it again"
            )));
        }
        Ok(())
    }
}
