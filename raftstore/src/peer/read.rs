//! Reads: when a leader may answer that a read can see every acknowledged
//! write.
//!
//! A read here returns no data: it returns the region once reading the
//! local engine is safe, and the service then scans a snapshot off the
//! store loop. Under a valid lease ([`Peer::lease_valid`]) that is at once.
//! Otherwise the leader confirms it still leads with a ReadIndex round and
//! answers once it has applied up to the index the round returned.
//!
//! * Reads that arrive while a round has not been sent yet join it; a read
//!   never joins a round already sent, which may confirm leadership only as
//!   of before the read arrived.
//! * raft-rs drops a ReadIndex request, without a word, before the leader
//!   has committed an entry of its term, so rounds start only after that;
//!   a round unconfirmed for a second (a heartbeat or its answer was lost)
//!   is restarted under a new id (`Peer::drive_reads`).
//! * A confirmed round renews the lease from the instant it started.
//! * A read waiting longer than ten seconds is dropped: its caller sees the
//!   channel close. Losing leadership fails every waiting read with
//!   NotLeader (`Peer::on_role_change`).
//!
//! Reads under a lease usually do not reach the store loop at all: the
//! loop publishes leases for [`crate::local_read`].

use std::time::{Duration, Instant};

use quarry_proto::meta::Region;
use raft::ReadState;
use tokio::sync::oneshot;

use super::Peer;
use crate::engine::Engine;
use crate::{Error, Result};

/// How long a read waits for its round and apply before it gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a ReadIndex round goes unconfirmed before it is sent again.
const ROUND_RETRY: Duration = Duration::from_secs(1);

/// A read waiting for its read index to be confirmed and applied.
pub(super) struct PendingRead {
    /// The id of its current ReadIndex round (the request context).
    id: u64,
    requested_at: Instant,
    /// When the current ReadIndex round for it was started; None while it
    /// waits for the leader to commit an entry of its term (raft-rs drops
    /// ReadIndex requests before that).
    issued_at: Option<Instant>,
    /// The read index its round confirmed.
    index: Option<u64>,
    /// Every read that joined the round.
    cbs: Vec<oneshot::Sender<Result<Region>>>,
}

impl<E: Engine> Peer<E> {
    /// Answers `cb` with the region once a read may see every acknowledged
    /// write: at once under the lease, else after a ReadIndex round and
    /// apply have caught up. The caller has checked that this peer leads.
    pub(crate) fn on_read(&mut self, cb: oneshot::Sender<Result<Region>>, now: Instant) {
        if self.lease_valid(now) {
            let _ = cb.send(Ok(self.region().clone()));
            return;
        }
        // Join a ReadIndex round not sent yet, or start one. (A round already
        // sent may confirm leadership only as of before this read arrived.)
        if let Some(r) = self.reads.back_mut().filter(|r| r.issued_at.is_none()) {
            r.cbs.push(cb);
            return;
        }
        let id = self.next_read_id();
        self.reads.push_back(PendingRead {
            id,
            requested_at: now,
            issued_at: None,
            index: None,
            cbs: vec![cb],
        });
        self.drive_reads(now);
    }

    fn next_read_id(&mut self) -> u64 {
        let id = self.next_read_id;
        self.next_read_id += 1;
        id
    }

    /// Starts ReadIndex rounds for reads that have none, and restarts
    /// rounds unconfirmed for a second (a heartbeat or its answer was lost).
    /// Nothing starts before the leader has committed an entry of its term:
    /// raft-rs would drop the request without a word.
    pub(crate) fn drive_reads(&mut self, now: Instant) {
        if !self.is_leader() || !self.raft.raft.commit_to_current_term() {
            return;
        }
        let mut restart = Vec::new();
        for (i, r) in self.reads.iter().enumerate() {
            let stale = r
                .issued_at
                .is_some_and(|at| r.index.is_none() && now.duration_since(at) > ROUND_RETRY);
            if r.issued_at.is_none() || stale {
                restart.push(i);
            }
        }
        for i in restart {
            let id = self.next_read_id();
            let r = &mut self.reads[i];
            r.id = id;
            r.issued_at = Some(now);
            self.raft.read_index(id.to_be_bytes().to_vec());
        }
    }

    /// Notes the read indexes raft confirmed in a Ready, renewing the lease
    /// from the instant each round started.
    pub(crate) fn on_read_states(&mut self, states: Vec<ReadState>) {
        for rs in states {
            let Ok(bytes) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) else {
                continue;
            };
            let id = u64::from_be_bytes(bytes);
            let mut renew = None;
            if let Some(r) = self.reads.iter_mut().find(|r| r.id == id) {
                r.index = Some(rs.index);
                renew = r.issued_at;
            }
            if let Some(at) = renew {
                self.renew_lease(at);
            }
        }
    }

    /// Answers reads whose read index has been applied, and gives up on
    /// reads waiting too long.
    pub(crate) fn finish_reads(&mut self, now: Instant) {
        let applied = self.storage().applied_index();
        while self
            .reads
            .front()
            .is_some_and(|r| r.index.is_some_and(|i| i <= applied))
        {
            let Some(r) = self.reads.pop_front() else {
                break;
            };
            let region = self.region().clone();
            for cb in r.cbs {
                let _ = cb.send(Ok(region.clone()));
            }
        }
        // Reads stuck without quorum give up; their callers see an error.
        self.reads
            .retain(|r| now.duration_since(r.requested_at) < READ_TIMEOUT);
    }

    /// Fails every waiting read with `e()`.
    pub(super) fn fail_reads(&mut self, e: impl Fn() -> Error) {
        for r in std::mem::take(&mut self.reads) {
            for cb in r.cbs {
                let _ = cb.send(Err(e()));
            }
        }
    }
}
