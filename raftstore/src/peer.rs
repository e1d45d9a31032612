//! A peer: this store's replica of one region.
//!
//! State that does not depend on the threading model lives here (as in
//! TiKV's raftstore-v2 `raft/peer.rs`): the raft-rs `RawNode` over a
//! [`PeerStorage`], the proposals waiting to be applied, the reads waiting
//! for a read index, and the leader lease. The store loop
//! (`store.rs`) drives it and answers reads; apply is in `apply.rs`.
//!
//! LEASE: a leader may serve reads from its local state, without a round
//! trip, while its lease holds. The lease is renewed whenever a quorum
//! provably followed this leader after a known instant: a ReadIndex round
//! that started then, or a proposal proposed then and now applied. It lasts
//! [`LEASE`], shorter than the minimum election timeout, so no other peer
//! can have been elected while it holds (assuming clocks drift little within
//! a second). It is only used once the leader has applied an entry of its
//! own term, so every write acknowledged by an earlier leader is visible.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use quarry_proto::meta::{Peer as PeerMeta, Region, RegionError};
use raft::{Config, RawNode, StateRole};
use tokio::sync::oneshot;

use crate::engine::Engine;
use crate::peer_storage::PeerStorage;
use crate::{region, Error, Result};

/// The raft tick.
pub const TICK: Duration = Duration::from_millis(100);
/// Election timeout in ticks (raft-rs randomizes in [this, 2 × this)).
pub const ELECTION_TICKS: usize = 10;
pub const HEARTBEAT_TICKS: usize = 2;
/// The leader lease: below the minimum election timeout (1 s).
pub const LEASE: Duration = Duration::from_millis(800);

/// What a finished proposal reports.
pub enum Callback {
    Write(oneshot::Sender<Result<()>>),
    Split(oneshot::Sender<Result<(Region, Region)>>),
    ChangePeer(oneshot::Sender<Result<Region>>),
    None,
}

/// What applying a command produced, for its callback.
pub enum Outcome {
    Done,
    Split(Region, Region),
    Region(Region),
}

impl Callback {
    /// Answers the proposer with the outcome of applying its entry.
    pub fn finish(self, r: Result<Outcome>) {
        match (self, r) {
            (Callback::Write(c), Ok(_)) => drop(c.send(Ok(()))),
            (Callback::Split(c), Ok(Outcome::Split(l, r))) => drop(c.send(Ok((l, r)))),
            (Callback::ChangePeer(c), Ok(Outcome::Region(r))) => drop(c.send(Ok(r))),
            (Callback::None, _) => {}
            (cb, Ok(_)) => cb.fail(Error::Internal(
                "a command finished with the wrong outcome".into(),
            )),
            (cb, Err(e)) => cb.fail(e),
        }
    }

    pub fn fail(self, e: Error) {
        match self {
            Callback::Write(c) => drop(c.send(Err(e))),
            Callback::Split(c) => drop(c.send(Err(e))),
            Callback::ChangePeer(c) => drop(c.send(Err(e))),
            Callback::None => {}
        }
    }
}

pub struct Proposal {
    pub index: u64,
    pub term: u64,
    pub cb: Callback,
    pub proposed_at: Instant,
}

/// A read waiting for its read index to be confirmed and applied.
pub struct PendingRead {
    pub id: u64,
    pub requested_at: Instant,
    /// When the current ReadIndex round for it was started; None while it
    /// waits for the leader to commit an entry of its term (raft-rs drops
    /// ReadIndex requests before that).
    pub issued_at: Option<Instant>,
    pub index: Option<u64>,
    pub cbs: Vec<oneshot::Sender<Result<Region>>>,
}

pub struct Peer<E: Engine> {
    pub raft: RawNode<PeerStorage<E>>,
    pub meta: PeerMeta,
    pub proposals: VecDeque<Proposal>,
    pub reads: VecDeque<PendingRead>,
    next_read_id: u64,
    lease_until: Option<Instant>,
    /// Ticks until this peer campaigns (a new region's preferred leader).
    pub campaign_in: Option<u32>,
    last_role: StateRole,
    /// Peers learned from incoming messages, for replying before this peer
    /// knows its region's peers (an uninitialized peer).
    pub peer_cache: std::collections::HashMap<u64, PeerMeta>,
}

/// raft-rs logs through slog; forward its records to `tracing` at debug.
struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;
    fn log(&self, record: &slog::Record, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        tracing::debug!(target: "raft", "{}", record.msg());
        Ok(())
    }
}

pub fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

pub fn region_error(msg: String) -> Error {
    Error::region(RegionError {
        message: msg,
        ..Default::default()
    })
}

impl<E: Engine> Peer<E> {
    pub fn new(storage: PeerStorage<E>, logger: &slog::Logger) -> Result<Self> {
        let meta = storage.peer;
        let cfg = Config {
            id: meta.id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            applied: storage.applied_index(),
            max_size_per_msg: 16 << 20,
            max_inflight_msgs: 64,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        cfg.validate()
            .map_err(|e| Error::Internal(format!("raft config: {e}")))?;
        let raft = RawNode::new(&cfg, storage, logger)
            .map_err(|e| Error::Internal(format!("starting raft for a peer: {e}")))?;
        Ok(Peer {
            raft,
            meta,
            proposals: VecDeque::new(),
            reads: VecDeque::new(),
            next_read_id: 1,
            lease_until: None,
            campaign_in: None,
            last_role: StateRole::Follower,
            peer_cache: std::collections::HashMap::new(),
        })
    }

    pub fn region(&self) -> &Region {
        &self.raft.store().region
    }

    pub fn region_id(&self) -> u64 {
        self.raft.store().region.id
    }

    pub fn storage(&self) -> &PeerStorage<E> {
        self.raft.store()
    }

    pub fn storage_mut(&mut self) -> &mut PeerStorage<E> {
        self.raft.mut_store()
    }

    pub fn is_leader(&self) -> bool {
        self.raft.raft.state == StateRole::Leader
    }

    pub fn term(&self) -> u64 {
        self.raft.raft.term
    }

    pub fn leader_id(&self) -> u64 {
        self.raft.raft.leader_id
    }

    pub fn is_initialized(&self) -> bool {
        self.storage().is_initialized()
    }

    /// The peer this region prefers as leader: spreads leaders over stores.
    pub fn preferred_leader(&self) -> Option<PeerMeta> {
        let peers = &self.region().peers;
        (!peers.is_empty()).then(|| peers[(self.region_id() as usize) % peers.len()])
    }

    /// NotLeader with the leader we know of, if any.
    pub fn not_leader(&self) -> Error {
        let leader = self.leader_id();
        let hint = self
            .region()
            .peers
            .iter()
            .find(|p| p.id == leader && leader != 0)
            .copied();
        Error::region(RegionError {
            message: format!(
                "peer {} is not the leader of region {}{}",
                self.meta.id,
                self.region_id(),
                match hint {
                    Some(p) => format!(" (store {} leads it)", p.store_id),
                    None => " (no leader known)".into(),
                }
            ),
            not_leader: Some(quarry_proto::meta::NotLeader {
                region_id: self.region_id(),
                leader: hint,
                leader_store: None,
            }),
            ..Default::default()
        })
    }

    /// Checks a request's epoch against the region (version only for data;
    /// `check_conf` also compares conf_ver).
    pub fn check_epoch(
        &self,
        epoch: Option<&quarry_proto::meta::RegionEpoch>,
        check_conf: bool,
    ) -> Result<()> {
        let cur = region::epoch(self.region());
        match epoch {
            Some(e) if e.version == cur.version && (!check_conf || e.conf_ver == cur.conf_ver) => {
                Ok(())
            }
            asked => Err(Error::region(region::epoch_not_match(asked, self.region()))),
        }
    }

    // ------------------------------------------------------------ proposals

    /// Proposes `data`; `cb` is answered once the entry is applied.
    pub fn propose(&mut self, data: Vec<u8>, cb: Callback, now: Instant) {
        if !self.is_leader() {
            cb.fail(self.not_leader());
            return;
        }
        let before = self.raft.raft.raft_log.last_index();
        if let Err(e) = self.raft.propose(vec![], data) {
            cb.fail(region_error(format!("proposal dropped: {e}")));
            return;
        }
        let index = self.raft.raft.raft_log.last_index();
        if index == before {
            cb.fail(region_error("proposal dropped".into()));
            return;
        }
        self.proposals.push_back(Proposal {
            index,
            term: self.term(),
            cb,
            proposed_at: now,
        });
    }

    /// Answers the proposals an applied entry settles: earlier ones were
    /// overtaken, a matching one is done. Returns the matching callback.
    pub fn take_proposal(&mut self, index: u64, term: u64) -> Option<Proposal> {
        while let Some(p) = self.proposals.front() {
            if p.index > index {
                return None;
            }
            let p = self.proposals.pop_front().expect("non-empty");
            if p.index == index && p.term == term {
                if self.is_leader() {
                    self.renew_lease(p.proposed_at);
                }
                return Some(p);
            }
            p.cb.fail(stale_command(self.region_id()));
        }
        None
    }

    // ------------------------------------------------------------ leases

    pub fn renew_lease(&mut self, since: Instant) {
        let until = since + LEASE;
        if self.lease_until.is_none_or(|u| u < until) {
            self.lease_until = Some(until);
        }
    }

    /// True if a read may be served from local state right now. Not while
    /// a leadership transfer is pending: its target may be elected at once,
    /// inside the lease.
    pub fn lease_valid(&self, now: Instant) -> bool {
        self.is_leader()
            && self.raft.raft.lead_transferee.is_none()
            && self.lease_until.is_some_and(|u| now < u)
            && self.storage().apply_state.applied_term == self.term()
    }

    /// When the current lease ends (if it is valid at `now`).
    pub fn lease_end(&self, now: Instant) -> Option<Instant> {
        self.lease_until.filter(|_| self.lease_valid(now))
    }

    pub fn next_read_id(&mut self) -> u64 {
        let id = self.next_read_id;
        self.next_read_id += 1;
        id
    }

    /// Starts ReadIndex rounds for reads that have none, and restarts
    /// rounds unconfirmed for a second (a heartbeat or its answer was lost).
    /// Nothing starts before the leader has committed an entry of its term:
    /// raft-rs would drop the request without a word.
    pub fn drive_reads(&mut self, now: Instant) {
        if !self.is_leader() || !self.raft.raft.commit_to_current_term() {
            return;
        }
        let mut restart = Vec::new();
        for (i, r) in self.reads.iter().enumerate() {
            let stale = r.issued_at.is_some_and(|at| {
                r.index.is_none() && now.duration_since(at) > Duration::from_secs(1)
            });
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

    /// Called after every Ready: notices leadership changes. Losing
    /// leadership fails the reads waiting on this peer and drops the lease.
    pub fn on_role_change(&mut self) {
        let role = self.raft.raft.state;
        if role == self.last_role {
            return;
        }
        if self.last_role == StateRole::Leader {
            self.lease_until = None;
            let reads = std::mem::take(&mut self.reads);
            for r in reads {
                for cb in r.cbs {
                    let _ = cb.send(Err(self.not_leader()));
                }
            }
            let stale = std::mem::take(&mut self.proposals);
            for p in stale {
                p.cb.fail(stale_command(self.region_id()));
            }
        }
        self.last_role = role;
    }

    /// Fails everything waiting on this peer (it is being destroyed).
    pub fn fail_all(&mut self, e: impl Fn() -> Error) {
        for p in std::mem::take(&mut self.proposals) {
            p.cb.fail(e());
        }
        for r in std::mem::take(&mut self.reads) {
            for cb in r.cbs {
                let _ = cb.send(Err(e()));
            }
        }
    }
}

pub fn stale_command(region_id: u64) -> Error {
    Error::region(RegionError {
        message: format!(
            "region {region_id}: the proposal was overtaken by a leader change; its outcome is unknown"
        ),
        stale_command: Some(quarry_proto::meta::StaleCommand {}),
        ..Default::default()
    })
}
