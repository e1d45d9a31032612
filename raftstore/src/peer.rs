//! A peer: this store's replica of one region.
//!
//! STATE HERE, BEHAVIOUR BESIDE IT (as in TiKV's raftstore-v2, where
//! `raft/peer.rs` holds the state and `operation/` the behaviours). A
//! [`Peer`] is the raft-rs `RawNode` over a [`PeerStorage`] plus what
//! waits on it: the proposals waiting to be applied, the reads waiting for
//! a read index, the leader lease. Its fields are private; each behaviour
//! that works on them is a submodule with its own `impl Peer` block:
//!
//! * [`propose`]: proposing commands and membership changes, and answering
//!   proposals once their entries apply;
//! * [`read`]: reads, under the lease or through ReadIndex;
//! * [`compact_log`]: when a leader truncates the raft log;
//! * [`balance`]: leadership transfers and the preferred leader.
//!
//! The store loop (`store.rs`) drives peers through the methods here and
//! there; apply (`apply.rs`) executes their committed entries.
//!
//! LEASE: a leader may serve reads from its local state, without a round
//! trip, while its lease holds. The lease is renewed whenever a quorum
//! provably followed this leader after a known instant: a ReadIndex round
//! that started then, or a proposal proposed then and now applied. It lasts
//! [`LEASE`], shorter than the minimum election timeout, so no other peer
//! can have been elected while it holds (assuming clocks drift little within
//! a second). It is only used once the leader has applied an entry of its
//! own term, so every write acknowledged by an earlier leader is visible.

pub mod balance;
pub mod compact_log;
pub mod propose;
pub mod read;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use quarry_proto::meta::{Peer as PeerMeta, Region, RegionError};
use quarry_proto::raft::RaftMessage;
use raft::eraftpb::{ConfChange, Message as RaftMsg};
use raft::{Config, LightReady, RawNode, Ready, StateRole};

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

pub struct Peer<E: Engine> {
    /// The raft-rs node; the store reaches it only through `Peer`'s
    /// methods.
    raft: RawNode<PeerStorage<E>>,
    meta: PeerMeta,
    proposals: VecDeque<propose::Proposal>,
    reads: VecDeque<read::PendingRead>,
    next_read_id: u64,
    lease_until: Option<Instant>,
    /// The term in which this leader raised max_ts to an oracle timestamp:
    /// it may commit in one phase while it leads in that term.
    one_pc_term: u64,
    /// Memory locks of one-phase commits proposed before this peer stepped
    /// down, by entry index: released once applied past.
    unsettled_locks: Vec<(u64, crate::concurrency::MemoryLocks)>,
    /// Ticks until this peer campaigns (a new region's preferred leader).
    campaign_in: Option<u32>,
    last_role: StateRole,
    /// Peers learned from incoming messages, for replying before this peer
    /// knows its region's peers (an uninitialized peer).
    peer_cache: HashMap<u64, PeerMeta>,
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
            one_pc_term: 0,
            unsettled_locks: Vec::new(),
            campaign_in: None,
            last_role: StateRole::Follower,
            peer_cache: HashMap::new(),
        })
    }

    // ------------------------------------------------------------ state

    /// This peer (its id and store).
    pub fn meta(&self) -> PeerMeta {
        self.meta
    }

    pub fn peer_id(&self) -> u64 {
        self.meta.id
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

    /// Tells raft that the snapshot for peer `to` has been sent (see
    /// `RaftStore::send`): the leader probes that peer again instead of
    /// waiting for the snapshot to be acknowledged.
    pub(crate) fn report_snapshot_sent(&mut self, to: u64) {
        self.raft.report_snapshot(to, raft::SnapshotStatus::Finish);
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

    /// The highest log index raft knows to be committed.
    pub fn commit_index(&self) -> u64 {
        self.raft.raft.raft_log.committed
    }

    /// The last index in raft's log (persisted or not).
    pub fn last_index(&self) -> u64 {
        self.raft.raft.raft_log.last_index()
    }

    pub fn is_initialized(&self) -> bool {
        self.storage().is_initialized()
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

    // ------------------------------------------------------------ raft

    /// Steps a message from another peer into raft.
    pub(crate) fn step(&mut self, msg: RaftMsg) -> raft::Result<()> {
        self.raft.step(msg)
    }

    /// Notes the sender of an incoming message, so that replies reach it
    /// before this peer knows its region's peers.
    pub(crate) fn remember_peer(&mut self, from: PeerMeta) {
        self.peer_cache.insert(from.id, from);
    }

    /// Wraps a raft message to another peer of this region for the
    /// transport; `None` if that peer is unknown here.
    pub(crate) fn to_raft_message(&self, msg: RaftMsg) -> Option<RaftMessage> {
        let r = self.region();
        let to = r
            .peers
            .iter()
            .find(|p| p.id == msg.to)
            .copied()
            .or_else(|| self.peer_cache.get(&msg.to).copied())?;
        let bytes = msg.write_to_bytes().ok()?;
        Some(RaftMessage {
            region_id: r.id,
            from_peer: Some(self.meta),
            to_peer: Some(to),
            region_epoch: r.epoch,
            message: bytes,
            start_key: r.start_key.clone(),
            end_key: r.end_key.clone(),
        })
    }

    /// Campaigns for leadership once `ticks` more ticks have passed (0:
    /// at the next tick).
    pub(crate) fn campaign_after(&mut self, ticks: u32) {
        self.campaign_in = Some(ticks);
    }

    /// One raft tick: advances raft's clock, (re)starts ReadIndex rounds
    /// that need it, and campaigns when a scheduled campaign is due.
    pub(crate) fn tick(&mut self, now: Instant) {
        self.raft.tick();
        self.drive_reads(now);
        if let Some(n) = self.campaign_in {
            if n == 0 {
                self.campaign_in = None;
                let _ = self.raft.campaign();
            } else {
                self.campaign_in = Some(n - 1);
            }
        }
    }

    pub(crate) fn has_ready(&self) -> bool {
        self.raft.has_ready()
    }

    pub(crate) fn ready(&mut self) -> Ready {
        self.raft.ready()
    }

    /// Tells raft a Ready has been persisted (its messages sent, its
    /// committed entries applied or about to be).
    pub(crate) fn advance(&mut self, ready: Ready) -> LightReady {
        self.raft.advance(ready)
    }

    /// Tells raft every committed entry it handed out has been applied.
    pub(crate) fn advance_apply(&mut self) {
        self.raft.advance_apply();
    }

    /// Applies a committed membership change to raft's configuration. A
    /// change raft refuses (it would remove the last voter, say) is refused
    /// by every replica alike, so it is a deterministic error.
    pub(crate) fn apply_conf_change(&mut self, cc: &ConfChange) -> Result<()> {
        match self.raft.apply_conf_change(cc) {
            Ok(_) => Ok(()),
            Err(e @ raft::Error::ConfChangeError(_)) => Err(Error::InvalidInput(format!(
                "membership change refused by raft: {e}"
            ))),
            Err(e) => Err(Error::Internal(format!("applying a conf change: {e}"))),
        }
    }

    // ------------------------------------------------------------ leases

    pub(crate) fn renew_lease(&mut self, since: Instant) {
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

    // ------------------------------------------------------------ role

    /// Called after every Ready: notices leadership changes. Losing
    /// leadership fails the reads waiting on this peer and drops the lease.
    pub(crate) fn on_role_change(&mut self) {
        let role = self.raft.raft.state;
        if role == self.last_role {
            return;
        }
        if self.last_role == StateRole::Leader {
            self.lease_until = None;
            let not_leader = self.not_leader();
            self.fail_reads(|| not_leader.clone());
            self.step_down_proposals();
        }
        self.last_role = role;
    }

    /// Fails everything waiting on this peer (it is being destroyed).
    pub(crate) fn fail_all(&mut self, e: impl Fn() -> Error) {
        self.fail_proposals(&e);
        self.fail_reads(&e);
    }
}
