//! Tables a crashed restore left behind, put right by the meta leader.
//!
//! A restore (`src/backup/read.rs`) builds each table under a name of its
//! own, `__restore_<name>`, and only when its rows are in and checked
//! renames it to `<name>`; `WITH REPLACE` first renames the old table
//! aside to `__replaced_<name>` and drops it once the new one has the
//! name. A restore that fails drops what it made. One whose process dies
//! cannot, and would leave a half-built table in SHOW TABLES, taking
//! space, or, between the two renames of a replacement, no `<name>` at
//! all.
//!
//! So a restore says it is alive the way a compute process says which
//! snapshot it reads: a GC hold ([`Meta::hold_gc`]) named
//! [`restore_holder`]`(<name>)`, taken before it makes anything and
//! renewed every second with a TTL of a few, released at its end. The
//! meta leader's duties ([`Meta::reap_restores`]) look at the tables
//! under the two prefixes whose restore no longer holds, and finish what
//! the crash interrupted the one way that loses nothing:
//!
//! * `__restore_<name>` made by a restore (its `created_by` starts with
//!   [`RESTORE_REQUEST`]) is dropped; if `<name>` is missing and
//!   `__replaced_<name>` is there, the old table is first renamed back:
//!   the replacement is undone, as a failed one is;
//! * `__replaced_<name>` beside a `<name>` that a restore made (the new
//!   table took its name; the crash came before the old one was dropped)
//!   is dropped, as the restore would have.
//!
//! No statement may name a table with either prefix (compute refuses it:
//! `RESTORE_PREFIXES` in `quarry_compute::sql::convert`), so the reaper
//! never meets a user's table; a restore drops a leftover of its own name
//! before it starts anyway.
//!
//! The holds live in the meta leader's memory, as all GC holds do: a new
//! leader reaps nothing until it has led for [`MAX_GC_HOLD_TTL`], by when
//! every live restore has renewed its hold with it. Each renewal holds at
//! a fresh timestamp, so a long restore keeps GC back by a second, not by
//! its length.
//!
//! CAVEAT: a restore that cannot renew for a whole TTL (5 s: a meta
//! leader that hangs, a process stopped) is taken for dead; its tables are
//! put right as above and the restore then fails (it finds its table
//! gone, or its name back), so nothing is lost, but the error it reports
//! may describe the state before the reaper's repair.

use std::time::Instant;

use prost::Message;
use quarry_proto::meta::TableDef;

use super::{Meta, MAX_GC_HOLD_TTL};
use crate::engine::Engine;
use crate::Result;

/// Prefix of the tables a restore is building (never backed up).
pub const RESTORING: &str = "__restore_";

/// Prefix of a table a restore WITH REPLACE renamed aside until the new
/// one has its name (never backed up).
pub const REPLACED: &str = "__replaced_";

/// How the `request_id` (and so the `created_by`) of a table a restore
/// creates starts.
pub const RESTORE_REQUEST: &[u8] = b"restore:";

/// The GC holder a restore of table `name` keeps while it runs.
pub fn restore_holder(name: &str) -> String {
    format!("restore:{name}")
}

fn made_by_restore(t: &TableDef) -> bool {
    t.created_by.starts_with(RESTORE_REQUEST)
}

impl<E: Engine> Meta<E> {
    /// Whether a restore of `name` has renewed its hold within its TTL.
    fn restore_running(&self, name: &str) -> bool {
        let now = Instant::now();
        self.gc_holds
            .lock()
            .get(&restore_holder(name))
            .is_some_and(|(_, until)| *until > now)
    }

    /// On the meta leader: puts right the tables of restores that stopped
    /// without finishing (see the module docs). Returns how many tables
    /// it dropped or renamed; a table it cannot put right (a rename back
    /// to a name taken since) is logged and tried again next round,
    /// without holding up the others.
    pub async fn reap_restores(&self) -> Result<usize> {
        if self.leading_for() < MAX_GC_HOLD_TTL {
            return Ok(0);
        }
        let tables = self.tables().await?;
        let mut done = 0;
        for t in &tables {
            match self.reap_one(t, &tables).await {
                Ok(n) => done += n,
                Err(e) => tracing::warn!(table = t.name, "an interrupted restore's table: {e}"),
            }
        }
        Ok(done)
    }

    async fn reap_one(&self, t: &TableDef, tables: &[TableDef]) -> Result<usize> {
        let named = |n: &str| tables.iter().find(|t| t.name == n);
        let mut done = 0;
        if let Some(name) = t.name.strip_prefix(RESTORING) {
            if !made_by_restore(t) || self.restore_running(name) {
                return Ok(0);
            }
            let aside = format!("{REPLACED}{name}");
            if let (None, Some(old)) = (named(name), named(&aside)) {
                let mut back = old.clone();
                back.name = name.to_string();
                self.alter_table(&aside, back, &old.encode_to_vec()).await?;
                tracing::warn!(
                    table = name,
                    "an interrupted restore had renamed the table aside; it has its name back"
                );
                done += 1;
            }
            self.drop_table(&t.name, true).await?;
            tracing::warn!(
                table = name,
                "dropped the half-built table of an interrupted restore"
            );
            done += 1;
        } else if let Some(name) = t.name.strip_prefix(REPLACED) {
            let restored = named(name).is_some_and(made_by_restore);
            let building = named(&format!("{RESTORING}{name}")).is_some();
            if !restored || building || self.restore_running(name) {
                return Ok(0);
            }
            self.drop_table(&t.name, true).await?;
            tracing::warn!(
                table = name,
                "dropped the old table an interrupted restore had replaced"
            );
            done += 1;
        }
        Ok(done)
    }
}
