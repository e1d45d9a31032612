//! Regions of CREATE TABLEs that never committed, found and destroyed.
//!
//! CREATE TABLE (`Meta::create_table`) makes every region's peers on their
//! stores first and commits the table and its directory entries after, so
//! a table never names a region that does not exist. The cost is a window
//! in which peers exist that the directory does not know: if the create
//! stops inside it, nothing would ever destroy them. It stops there when
//! the meta leader's process dies while creating, and when the commit's
//! outcome is unknown: a proposal overtaken by a leader change
//! (`StaleCommand`) may commit under the next leader or be lost, so the
//! create cannot destroy its peers, and compute's retry (same request id)
//! makes a second set on the new leader if the first was lost. On a loaded
//! 2-core machine a 5,000-region create does lose the meta leadership now
//! and then: CI once found 10,001 region peers on a store that should hold
//! 5,001, for good.
//!
//! So a create first writes its regions to the meta region as *pending*
//! (`keys::PENDING_REGION`, one entry per region, the region as planned),
//! then makes the peers, then commits the table and the regions and
//! deletes the pending entries in that same write. A create that fails (a
//! store refused a peer) destroys what it made and moves its pending
//! entries to the dropped-regions queue (`meta/dropped.rs`), which
//! destroys them again until every peer is gone, so an undo that fails
//! half-way is finished there. A create whose store stopped leading the
//! meta region destroys what it made but cannot write to the meta region
//! any more; a create whose commit's outcome is unknown leaves its peers
//! (if the commit went in, its pending entries went with it). Either way
//! what is left is pending, and the next paragraph's reclaim finds it.
//!
//! The meta leader's duties ([`Meta::reclaim_abandoned_creates`]) move
//! entries that stay pending for [`ABANDONED_AFTER`] to the dropped queue.
//! A create running on this store holds the DDL lock, so a round that
//! cannot take it looks at nothing; the time counts from when this leader
//! first saw the entry (the clock restarts with each new leader), so a
//! create that a previous leader was running has had that long to commit
//! or fail, and a commit overtaken by the leader change has been decided
//! (committed with the new leader's first entry, or lost) long before.
//!
//! The reclaim and the commit exclude each other in the raft log, not by
//! timing: each is applied only if the regions are still pending
//! (`KvWrite::must_exist`), and each ends that, so whichever is applied
//! first wins and the other is refused whole. A commit refused that way
//! fails its statement ("try again"; compute's retry makes a new table),
//! and a refused reclaim looks again next round, when the committed
//! regions are no longer pending. A store that lost the meta leadership
//! stops making peers within a few hundred of them (it checks every
//! `LEADER_CHECK_EVERY`), long before a new leader reclaims anything.
//!
//! CAVEAT: a deposed leader stalled for longer than [`ABANDONED_AFTER`]
//! between its check and its next peers (a stopped process) can make
//! those peers after the reclaim destroyed the region's others; its
//! commit is then refused and it destroys them again, and only a peer
//! whose destruction also fails is left for good.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use prost::Message;
use quarry_proto::meta::Region;

use super::Meta;
use crate::engine::Engine;
use crate::keys;
use crate::Result;

/// How long a pending region stays pending, under one meta leader and with
/// no create running on it, before its peers are destroyed.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(30);

impl<E: Engine> Meta<E> {
    /// The meta-region write that records `regions` as pending.
    pub(super) fn pending_puts(regions: &[Region]) -> Vec<(Vec<u8>, Vec<u8>)> {
        regions
            .iter()
            .map(|r| (keys::pending_region_key(r.id), r.encode_to_vec()))
            .collect()
    }

    /// The deletes of `regions`' pending entries (made in the commit).
    pub(super) fn pending_deletes(regions: &[Region]) -> Vec<Vec<u8>> {
        regions
            .iter()
            .map(|r| keys::pending_region_key(r.id))
            .collect()
    }

    /// Moves `regions` from pending to the dropped-regions queue, whose
    /// collection destroys their peers; refused whole (`InvalidInput`)
    /// unless every one of them is still pending.
    pub(super) async fn abandon_pending(&self, regions: &[Region]) -> Result<()> {
        let puts = regions
            .iter()
            .map(|r| (keys::dropped_region_key(r.id), r.encode_to_vec()))
            .collect();
        let pending = Self::pending_deletes(regions);
        let meta_region = self.leader().await?;
        self.propose_if(&meta_region, puts, pending.clone(), pending)
            .await
    }

    /// On the meta leader: moves the regions pending for
    /// `ABANDONED_AFTER` (30 s; see the module docs) to the dropped queue.
    /// Returns how many it moved.
    pub async fn reclaim_abandoned_creates(&self) -> Result<usize> {
        // A create in progress here holds the lock; its regions wait.
        let Ok(_ddl) = self.ddl.try_lock() else {
            return Ok(0);
        };
        // (The round runs on the meta leader, and the move below is
        // proposed there and applied only if the regions are still
        // pending, so this local read needs no leadership check.)
        let pending: Vec<Region> = self.scan_all(keys::PENDING_REGION)?;
        let now = Instant::now();
        let abandoned: Vec<Region> = {
            let mut seen = self.pending_seen.lock();
            let ids: HashSet<u64> = pending.iter().map(|r| r.id).collect();
            seen.retain(|id, _| ids.contains(id));
            pending
                .into_iter()
                .filter(|r| now.duration_since(*seen.entry(r.id).or_insert(now)) >= ABANDONED_AFTER)
                .collect()
        };
        if abandoned.is_empty() {
            return Ok(0);
        }
        self.abandon_pending(&abandoned).await?;
        tracing::warn!(
            regions = abandoned.len(),
            first = abandoned[0].id,
            "a CREATE TABLE that never committed left regions behind; their peers are being destroyed"
        );
        Ok(abandoned.len())
    }
}
