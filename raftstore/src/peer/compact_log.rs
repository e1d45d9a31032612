//! Log compaction: when a leader truncates the raft log, and how far.
//!
//! Applied entries stay in the log only for followers that still need
//! them. Every election timeout a leader checks its log: once
//! `compact_log_entries` applied entries have piled up past the truncated
//! index, it proposes truncating up to what the slowest follower has
//! (`matched`), so that no follower needs a snapshot; but once more than
//! `max_log_entries` applied entries are in the log, it truncates up to its
//! applied index regardless, and a follower that far behind catches up
//! from a snapshot. The truncation stops one entry short of that target:
//! the target entry itself stays in the log.
//!
//! Truncation is a proposed command (`CompactLog`), not a local decision:
//! every replica truncates at the same entry when it applies it
//! (`apply.rs`, [`crate::peer_storage::PeerStorage::compact_to`]).

use std::time::Instant;

use quarry_proto::raft::{raft_cmd::Cmd, CompactLogRequest};

use super::propose::Callback;
use super::Peer;
use crate::engine::Engine;
use crate::store::RaftStoreConfig;

impl<E: Engine> Peer<E> {
    /// Proposes truncating the log if enough applied entries piled up (see
    /// the module docs). Called on the leader, every election timeout.
    pub(crate) fn maybe_compact_log(&mut self, cfg: &RaftStoreConfig, now: Instant) {
        let s = self.storage();
        let (applied, truncated) = (s.applied_index(), s.truncated_index());
        if applied < truncated + cfg.compact_log_entries {
            return;
        }
        let me = self.peer_id();
        let slowest = self
            .raft
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(_, p)| p.matched)
            .min()
            .unwrap_or(applied);
        let target = if applied - truncated > cfg.max_log_entries {
            applied
        } else {
            applied.min(slowest)
        };
        if target <= truncated + 1 {
            return;
        }
        let index = target - 1;
        let Ok(term) = raft::Storage::term(self.storage(), index) else {
            return;
        };
        let epoch = self.region().epoch;
        self.propose_cmd(
            epoch,
            Cmd::CompactLog(CompactLogRequest {
                compact_index: index,
                compact_term: term,
            }),
            Callback::None,
            now,
        );
    }
}
