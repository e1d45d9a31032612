//! The store loop: one thread per storage process drives every peer.
//!
//! Messages arrive on a channel ([`StoreMsg`]): raft messages from other
//! stores, writes and reads from the services, admin commands. Each round
//! the loop handles what arrived, ticks raft every [`TICK`], then runs the
//! raft-rs Ready procedure for every peer with work, in order
//! ([`RaftStore::handle_readies`]):
//!
//! 1. send the leader's messages (they may go before the local persist);
//! 2. install a snapshot, if the leader sent one;
//! 3. note confirmed read indexes;
//! 4. with `early-apply`, apply committed entries now (they are already in
//!    the local log): data and apply state into one write batch;
//! 5. append new entries and the HardState to the raft write batch;
//! 6. write the apply batch (no fsync: the log is the durable truth), then
//!    the raft batch of *all* peers with one fsync;
//! 7. without early apply, apply committed entries only now, after the
//!    commit index is durable;
//! 8. send the messages that had to wait for the persist, `advance`, apply
//!    what the LightReady brings, answer proposals and reads, and carry out
//!    splits and membership changes.
//!
//! Apply happens on this thread. Coprocessor reads do not: the loop only
//! confirms leadership (lease or ReadIndex) and that the apply caught up,
//! then the service reads a RocksDB snapshot on the read pool.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use prost::Message as _;
use protobuf::Message as _;
use quarry_proto::meta::{Peer as PeerMeta, Region, RegionEpoch, RegionStatus, StatusResponse};
use quarry_proto::raft::{
    raft_cmd::Cmd, ChangePeerContext, KvWrite, PeerState, RaftCmd, RaftMessage, SplitRequest,
};
use raft::eraftpb::{ConfChange, ConfChangeType, Message as RaftMsg, MessageType};
use raft::{ReadState, Ready};
use tokio::sync::oneshot;

use crate::apply::{apply_entries, ApplyCtx, ExecResult};
use crate::compaction::DeltaStats;
use crate::engine::{Engine, WriteBatch};
use crate::local_read::LocalReader;
use crate::peer::{Callback, Peer, PendingRead, ELECTION_TICKS, TICK};
use crate::peer_storage::PeerStorage;
use crate::transport::Transport;
use crate::{region, Error, Result};

/// Requests to the store loop.
pub enum StoreMsg {
    Raft(Box<RaftMessage>),
    Write {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        write: KvWrite,
        cb: oneshot::Sender<Result<()>>,
    },
    /// Answers with the region once a read may see every acknowledged write.
    Read {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        cb: oneshot::Sender<Result<Region>>,
    },
    CreatePeer {
        region: Region,
        cb: oneshot::Sender<Result<()>>,
    },
    DestroyPeer {
        region_id: u64,
        cb: oneshot::Sender<Result<()>>,
    },
    ChangePeer {
        region_id: u64,
        peer: PeerMeta,
        remove: bool,
        cb: oneshot::Sender<Result<Region>>,
    },
    Split {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        split: SplitRequest,
        cb: oneshot::Sender<Result<(Region, Region)>>,
    },
    TransferLeader {
        region_id: u64,
        to_peer_id: u64,
    },
    Status {
        cb: oneshot::Sender<StatusResponse>,
    },
}

#[derive(Debug, Clone)]
pub struct RaftStoreConfig {
    /// Apply committed entries before persisting the HardState.
    pub early_apply: bool,
    /// Truncate the log once this many applied entries are in it.
    pub compact_log_entries: u64,
    /// Truncate even past lagging followers beyond this many (they catch up
    /// from a snapshot).
    pub max_log_entries: u64,
    /// Hand leadership to each region's preferred peer when it is caught up.
    pub balance_leaders: bool,
}

impl Default for RaftStoreConfig {
    fn default() -> Self {
        RaftStoreConfig {
            early_apply: true,
            compact_log_entries: 256,
            max_log_entries: 2048,
            balance_leaders: true,
        }
    }
}

pub struct RaftStore<E: Engine, T: Transport> {
    pub store_id: u64,
    engine: Arc<E>,
    transport: T,
    peers: HashMap<u64, Peer<E>>,
    /// Regions removed from this store, by the peer id that was removed.
    tombstones: HashMap<u64, u64>,
    cfg: RaftStoreConfig,
    logger: slog::Logger,
    ticks: u64,
    /// Tests drive time by ticks: the clock is `start + ticks × TICK`.
    virtual_start: Option<Instant>,
    /// Row KVs applied per region, for the worker's compaction of column
    /// tables.
    delta: Arc<DeltaStats>,
    /// Leases published for reads that skip the loop (see `local_read`).
    local: Arc<LocalReader>,
    published: HashSet<u64>,
}

fn encode_cmd(region_id: u64, epoch: Option<RegionEpoch>, cmd: Cmd) -> Vec<u8> {
    RaftCmd {
        region_id,
        epoch,
        cmd: Some(cmd),
    }
    .encode_to_vec()
}

/// What one peer's Ready left for after the persist.
struct PendingReady {
    region_id: u64,
    ready: Ready,
    deferred: Vec<raft::eraftpb::Entry>,
}

impl<E: Engine, T: Transport> RaftStore<E, T> {
    /// Loads every peer this store holds.
    pub fn new(store_id: u64, engine: Arc<E>, transport: T, cfg: RaftStoreConfig) -> Result<Self> {
        let logger = crate::peer::raft_logger();
        let mut peers = HashMap::new();
        let mut tombstones = HashMap::new();
        let states = PeerStorage::region_states(engine.as_ref())?;
        for s in states {
            let id = s.region.as_ref().map_or(0, |r| r.id);
            if s.state == PeerState::Tombstone as i32 {
                tombstones.insert(id, s.peer.map_or(0, |p| p.id));
                continue;
            }
            let storage = PeerStorage::load(engine.clone(), s)?;
            peers.insert(id, Peer::new(storage, &logger)?);
        }
        Ok(RaftStore {
            store_id,
            engine,
            transport,
            peers,
            tombstones,
            cfg,
            logger,
            ticks: 0,
            virtual_start: None,
            delta: Arc::new(DeltaStats::default()),
            local: Arc::new(LocalReader::default()),
            published: HashSet::new(),
        })
    }

    /// Makes the store's clock (leases, read timeouts) advance only with
    /// ticks, for deterministic tests.
    pub fn use_virtual_time(&mut self) {
        self.virtual_start = Some(Instant::now());
    }

    fn now(&self) -> Instant {
        match self.virtual_start {
            Some(s) => s + TICK * self.ticks as u32,
            None => Instant::now(),
        }
    }

    pub fn peer(&self, region_id: u64) -> Option<&Peer<E>> {
        self.peers.get(&region_id)
    }

    /// The leases this store publishes for reads off the loop.
    pub fn local_reader(&self) -> Arc<LocalReader> {
        self.local.clone()
    }

    /// Publishes every leader's valid lease, and revokes the rest, for
    /// [`LocalReader`]. Real clocks only: tests on a virtual clock read
    /// through the loop.
    pub fn publish_leases(&mut self) {
        if self.virtual_start.is_some() {
            return;
        }
        let now = self.now();
        for (id, peer) in &self.peers {
            match peer.lease_end(now) {
                Some(until) => {
                    let current = self.local.published(*id);
                    if current.is_none_or(|(r, u)| u != until || &r != peer.region()) {
                        self.local.publish(peer.region(), until);
                    }
                    self.published.insert(*id);
                }
                None => {
                    if self.published.remove(id) {
                        self.local.revoke(*id);
                    }
                }
            }
        }
        let peers = &self.peers;
        let local = &self.local;
        self.published.retain(|id| {
            let keep = peers.contains_key(id);
            if !keep {
                local.revoke(*id);
            }
            keep
        });
    }

    /// Row KVs applied per region since the worker last looked.
    pub fn delta_stats(&self) -> Arc<DeltaStats> {
        self.delta.clone()
    }

    pub fn peers(&self) -> impl Iterator<Item = &Peer<E>> {
        self.peers.values()
    }

    // ------------------------------------------------------------ messages

    pub fn handle_msg(&mut self, msg: StoreMsg) {
        let now = self.now();
        match msg {
            StoreMsg::Raft(m) => self.on_raft_message(*m),
            StoreMsg::Write {
                region_id,
                epoch,
                write,
                cb,
            } => match self.leader_for(region_id, epoch.as_ref(), false) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(peer) => {
                    let r = peer.region();
                    if let Some(k) = write
                        .puts
                        .iter()
                        .map(|p| &p.key)
                        .chain(&write.deletes)
                        .find(|k| !region::contains(r, k))
                    {
                        let e = Error::region(region::key_not_in_region(k, r));
                        drop(cb.send(Err(e)));
                        return;
                    }
                    let data = encode_cmd(region_id, epoch, Cmd::Write(write));
                    peer.propose(data, Callback::Write(cb), now);
                }
            },
            StoreMsg::Read {
                region_id,
                epoch,
                cb,
            } => self.on_read(region_id, epoch, cb),
            StoreMsg::CreatePeer { region, cb } => drop(cb.send(self.create_peer(region))),
            StoreMsg::DestroyPeer { region_id, cb } => drop(cb.send(self.destroy_peer(region_id))),
            StoreMsg::ChangePeer {
                region_id,
                peer,
                remove,
                cb,
            } => match self.leader_for(region_id, None, false) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(p) => {
                    let mut cc = ConfChange::default();
                    cc.set_change_type(if remove {
                        ConfChangeType::RemoveNode
                    } else {
                        ConfChangeType::AddNode
                    });
                    cc.node_id = peer.id;
                    cc.context = ChangePeerContext {
                        peer: Some(peer),
                        remove,
                    }
                    .encode_to_vec()
                    .into();
                    let before = p.raft.raft.raft_log.last_index();
                    match p.raft.propose_conf_change(vec![], cc) {
                        Err(e) => drop(cb.send(Err(crate::peer::region_error(format!(
                            "membership change refused: {e}"
                        ))))),
                        Ok(()) if p.raft.raft.raft_log.last_index() == before => {
                            drop(cb.send(Err(crate::peer::region_error(
                                "membership change dropped (another is pending)".into(),
                            ))))
                        }
                        Ok(()) => {
                            let index = p.raft.raft.raft_log.last_index();
                            let term = p.term();
                            p.proposals.push_back(crate::peer::Proposal {
                                index,
                                term,
                                cb: Callback::ChangePeer(cb),
                                proposed_at: now,
                            });
                        }
                    }
                }
            },
            StoreMsg::Split {
                region_id,
                epoch,
                split,
                cb,
            } => match self.leader_for(region_id, epoch.as_ref(), true) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(peer) => {
                    let data = encode_cmd(region_id, epoch, Cmd::Split(split));
                    peer.propose(data, Callback::Split(cb), now);
                }
            },
            StoreMsg::TransferLeader {
                region_id,
                to_peer_id,
            } => {
                if let Some(p) = self.peers.get_mut(&region_id) {
                    if p.is_leader() {
                        // Stop local lease reads before the target can win.
                        self.local.revoke(region_id);
                        p.raft.transfer_leader(to_peer_id);
                    }
                }
            }
            StoreMsg::Status { cb } => drop(cb.send(self.status())),
        }
    }

    /// The peer of `region_id`, if it leads the region at `epoch`.
    fn leader_for(
        &mut self,
        region_id: u64,
        epoch: Option<&RegionEpoch>,
        check_conf: bool,
    ) -> Result<&mut Peer<E>> {
        let peer = self
            .peers
            .get_mut(&region_id)
            .ok_or_else(|| Error::region(region::not_found(region_id)))?;
        if !peer.is_leader() {
            return Err(peer.not_leader());
        }
        if epoch.is_some() {
            peer.check_epoch(epoch, check_conf)?;
        }
        Ok(peer)
    }

    fn on_read(
        &mut self,
        region_id: u64,
        epoch: Option<RegionEpoch>,
        cb: oneshot::Sender<Result<Region>>,
    ) {
        let now = self.now();
        let peer = match self.leader_for(region_id, epoch.as_ref(), false) {
            Ok(p) => p,
            Err(e) => return drop(cb.send(Err(e))),
        };
        if peer.lease_valid(now) {
            let _ = cb.send(Ok(peer.region().clone()));
            return;
        }
        // Join a ReadIndex round not sent yet, or start one. (A round already
        // sent may confirm leadership only as of before this read arrived.)
        if let Some(r) = peer.reads.back_mut().filter(|r| r.issued_at.is_none()) {
            r.cbs.push(cb);
            return;
        }
        let id = peer.next_read_id();
        peer.reads.push_back(PendingRead {
            id,
            requested_at: now,
            issued_at: None,
            index: None,
            cbs: vec![cb],
        });
        peer.drive_reads(now);
    }

    fn on_raft_message(&mut self, m: RaftMessage) {
        let mut msg = RaftMsg::default();
        if let Err(e) = msg.merge_from_bytes(&m.message) {
            tracing::warn!("dropping a corrupt raft message: {e}");
            return;
        }
        let Some(to) = m.to_peer else { return };
        if to.store_id != self.store_id {
            return;
        }
        if !self.peers.contains_key(&m.region_id) && !self.maybe_create_peer(&m, &msg) {
            return;
        }
        let Some(peer) = self.peers.get_mut(&m.region_id) else {
            return;
        };
        if peer.meta.id != to.id {
            // A message for another incarnation of our peer of this region.
            if to.id > peer.meta.id && !peer.is_initialized() {
                self.peers.remove(&m.region_id);
                if self.maybe_create_peer(&m, &msg) {
                    self.step(m.region_id, msg);
                }
            }
            return;
        }
        if let (Some(from), Some(peer)) = (m.from_peer, self.peers.get_mut(&m.region_id)) {
            peer.peer_cache.insert(from.id, from);
        }
        self.step(m.region_id, msg);
    }

    fn step(&mut self, region_id: u64, msg: RaftMsg) {
        if let Some(peer) = self.peers.get_mut(&region_id) {
            if let Err(e) = peer.raft.step(msg) {
                tracing::debug!(region = region_id, "raft step: {e}");
            }
        }
    }

    /// Creates an empty peer for a message about a region this store does
    /// not hold yet (a replica being added): the leader will send a snapshot.
    fn maybe_create_peer(&mut self, m: &RaftMessage, msg: &RaftMsg) -> bool {
        let creates = matches!(
            msg.get_msg_type(),
            MessageType::MsgRequestVote
                | MessageType::MsgRequestPreVote
                | MessageType::MsgAppend
                | MessageType::MsgHeartbeat
                | MessageType::MsgSnapshot
        );
        let to = m.to_peer.unwrap_or_default();
        if !creates
            || self
                .tombstones
                .get(&m.region_id)
                .is_some_and(|&t| to.id <= t)
        {
            return false;
        }
        // Never two initialized peers over the same keys.
        let (s, e) = (m.start_key.as_slice(), m.end_key.as_slice());
        if self.peers.values().any(|p| {
            let r = p.region();
            p.is_initialized()
                && (e.is_empty() || r.start_key.as_slice() < e)
                && (r.end_key.is_empty() || r.end_key.as_slice() > s)
        }) {
            return false;
        }
        let region = Region {
            id: m.region_id,
            start_key: m.start_key.clone(),
            end_key: m.end_key.clone(),
            epoch: None,
            peers: vec![],
        };
        let storage = PeerStorage::uninitialized(self.engine.clone(), region, to);
        match Peer::new(storage, &self.logger) {
            Ok(p) => {
                tracing::info!(
                    region = m.region_id,
                    peer = to.id,
                    "created a peer to receive a snapshot"
                );
                self.peers.insert(m.region_id, p);
                true
            }
            Err(e) => {
                tracing::warn!(region = m.region_id, "cannot create a peer: {e}");
                false
            }
        }
    }

    /// Creates this store's peer of a new region (all peers start alike).
    pub fn create_peer(&mut self, region: Region) -> Result<()> {
        let me = region
            .peers
            .iter()
            .find(|p| p.store_id == self.store_id)
            .copied()
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "region {} has no peer on store {}",
                    region.id, self.store_id
                ))
            })?;
        if let Some(p) = self.peers.get(&region.id) {
            if p.is_initialized() {
                let cur = p.region();
                if cur.start_key == region.start_key && cur.end_key == region.end_key {
                    return Ok(());
                }
                return Err(Error::InvalidInput(format!(
                    "region {} already exists with another range",
                    region.id
                )));
            }
            self.peers.remove(&region.id);
        }
        let mut wb = WriteBatch::new();
        let storage = PeerStorage::create(self.engine.clone(), region.clone(), me, &mut wb);
        self.engine.write(&wb, true)?;
        let mut peer = Peer::new(storage, &self.logger)?;
        if peer.preferred_leader().map(|p| p.id) == Some(me.id) {
            peer.campaign_in = Some(1);
        }
        self.peers.insert(region.id, peer);
        Ok(())
    }

    /// Removes this store's peer of `region_id` and its data.
    pub fn destroy_peer(&mut self, region_id: u64) -> Result<()> {
        let Some(mut peer) = self.peers.remove(&region_id) else {
            return Ok(());
        };
        peer.fail_all(|| Error::region(region::not_found(region_id)));
        let mut wb = WriteBatch::new();
        peer.storage().destroy(&mut wb);
        self.engine.write(&wb, true)?;
        self.tombstones.insert(region_id, peer.meta.id);
        tracing::info!(region = region_id, peer = peer.meta.id, "destroyed peer");
        Ok(())
    }

    fn status(&self) -> StatusResponse {
        let mut regions: Vec<RegionStatus> = self
            .peers
            .values()
            .map(|p| RegionStatus {
                region: Some(p.region().clone()),
                peer_id: p.meta.id,
                is_leader: p.is_leader(),
                leader_peer_id: p.leader_id(),
                term: p.term(),
                applied_index: p.storage().applied_index(),
                commit_index: p.raft.raft.raft_log.committed,
                last_index: p.raft.raft.raft_log.last_index(),
                truncated_index: p.storage().truncated_index(),
            })
            .collect();
        regions.sort_by_key(|r| r.region.as_ref().map_or(0, |r| r.id));
        StatusResponse {
            store_id: self.store_id,
            regions,
            // Filled in by the node, which owns the engine.
            background_work: false,
        }
    }

    // ------------------------------------------------------------ ticks

    pub fn tick(&mut self) {
        self.ticks += 1;
        let now = self.now();
        let periodic = self.ticks.is_multiple_of(ELECTION_TICKS as u64);
        let balance =
            self.cfg.balance_leaders && self.ticks.is_multiple_of(5 * ELECTION_TICKS as u64);
        for peer in self.peers.values_mut() {
            // Before `raft.tick()`: a leader's tick that ends an election
            // timeout clears its followers' `recent_active` (check quorum),
            // and a check right after it would find the preferred peer
            // inactive every time for a leader elected in step with it.
            if balance && peer.is_leader() {
                Self::maybe_transfer_to_preferred(peer, &self.local);
            }
            peer.raft.tick();
            peer.drive_reads(now);
            if let Some(n) = peer.campaign_in {
                if n == 0 {
                    peer.campaign_in = None;
                    let _ = peer.raft.campaign();
                } else {
                    peer.campaign_in = Some(n - 1);
                }
            }
            if periodic && peer.is_leader() {
                Self::maybe_compact_log(peer, &self.cfg, now);
            }
        }
    }

    fn maybe_compact_log(peer: &mut Peer<E>, cfg: &RaftStoreConfig, now: Instant) {
        let s = peer.storage();
        let (applied, truncated) = (s.applied_index(), s.truncated_index());
        if applied < truncated + cfg.compact_log_entries {
            return;
        }
        let me = peer.meta.id;
        let slowest = peer
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
        let Ok(term) = raft::Storage::term(peer.storage(), index) else {
            return;
        };
        let region_id = peer.region_id();
        let data = encode_cmd(
            region_id,
            peer.region().epoch,
            Cmd::CompactLog(quarry_proto::raft::CompactLogRequest {
                compact_index: index,
                compact_term: term,
            }),
        );
        peer.propose(data, Callback::None, now);
    }

    fn maybe_transfer_to_preferred(peer: &mut Peer<E>, local: &LocalReader) {
        let Some(pref) = peer.preferred_leader() else {
            return;
        };
        if pref.id == peer.meta.id {
            return;
        }
        let last = peer.raft.raft.raft_log.last_index();
        let caught_up = peer
            .raft
            .raft
            .prs()
            .get(pref.id)
            .is_some_and(|p| p.matched == last && p.recent_active);
        if caught_up {
            tracing::info!(
                region = peer.region_id(),
                to = pref.id,
                "handing leadership to the preferred peer"
            );
            // Stop local lease reads before the target can win.
            local.revoke(peer.region_id());
            peer.raft.transfer_leader(pref.id);
        }
    }

    // ------------------------------------------------------------ ready

    fn to_raft_message(&self, peer: &Peer<E>, msg: RaftMsg) -> Option<RaftMessage> {
        let r = peer.region();
        let to = r
            .peers
            .iter()
            .find(|p| p.id == msg.to)
            .copied()
            .or_else(|| peer.peer_cache.get(&msg.to).copied())?;
        let bytes = msg.write_to_bytes().ok()?;
        Some(RaftMessage {
            region_id: r.id,
            from_peer: Some(peer.meta),
            to_peer: Some(to),
            region_epoch: r.epoch,
            message: bytes,
            start_key: r.start_key.clone(),
            end_key: r.end_key.clone(),
        })
    }

    fn send(&mut self, region_id: u64, msgs: Vec<RaftMsg>) {
        let Some(peer) = self.peers.get(&region_id) else {
            return;
        };
        let out: Vec<RaftMessage> = msgs
            .into_iter()
            .filter_map(|m| self.to_raft_message(peer, m))
            .collect();
        for m in out {
            self.transport.send(m);
        }
    }

    fn on_read_states(peer: &mut Peer<E>, states: Vec<ReadState>) {
        for rs in states {
            let Ok(bytes) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) else {
                continue;
            };
            let id = u64::from_be_bytes(bytes);
            let mut renew = None;
            if let Some(r) = peer.reads.iter_mut().find(|r| r.id == id) {
                r.index = Some(rs.index);
                renew = r.issued_at;
            }
            if let Some(at) = renew {
                peer.renew_lease(at);
            }
        }
    }

    /// Answers reads whose read index has been applied.
    fn finish_reads(peer: &mut Peer<E>, now: Instant) {
        let applied = peer.storage().applied_index();
        while let Some(r) = peer.reads.front() {
            match r.index {
                Some(i) if i <= applied => {
                    let r = peer.reads.pop_front().expect("non-empty");
                    let region = peer.region().clone();
                    for cb in r.cbs {
                        let _ = cb.send(Ok(region.clone()));
                    }
                }
                _ => break,
            }
        }
        // Reads stuck without quorum give up; their callers see an error.
        peer.reads
            .retain(|r| now.duration_since(r.requested_at) < std::time::Duration::from_secs(10));
    }

    /// Runs the Ready procedure for every peer with work (see module docs).
    pub fn handle_readies(&mut self) -> Result<()> {
        let ids: Vec<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| p.raft.has_ready())
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut raft_wb = WriteBatch::new();
        let mut apply_wb = WriteBatch::new();
        let mut pending: Vec<PendingReady> = Vec::with_capacity(ids.len());
        let mut results = Vec::new();
        let mut finished = Vec::new();
        let engine = self.engine.clone();
        {
            let mut ctx = ApplyCtx::new(&engine, self.store_id, &mut apply_wb);
            for id in ids {
                let peer = self.peers.get_mut(&id).expect("listed");
                let mut ready = peer.raft.ready();
                let now_msgs = ready.take_messages();
                let has_snapshot = !ready.snapshot().is_empty();
                if has_snapshot {
                    let snap = ready.snapshot().clone();
                    peer.storage_mut().apply_snapshot(&snap, &mut raft_wb)?;
                    tracing::info!(
                        region = id,
                        index = snap.get_metadata().index,
                        "installed a snapshot"
                    );
                }
                Self::on_read_states(peer, ready.take_read_states());
                let committed = ready.take_committed_entries();
                let deferred = if self.cfg.early_apply && !has_snapshot {
                    apply_entries(peer, committed, &mut ctx);
                    vec![]
                } else {
                    committed
                };
                if !ready.entries().is_empty() {
                    peer.storage_mut().append(ready.entries(), &mut raft_wb)?;
                }
                if let Some(hs) = ready.hs() {
                    peer.storage_mut().set_hard_state(hs);
                }
                if !ready.entries().is_empty() || ready.hs().is_some() || has_snapshot {
                    peer.storage().write_raft_state(&mut raft_wb);
                }
                pending.push(PendingReady {
                    region_id: id,
                    ready,
                    deferred,
                });
                let _ = peer;
                self.send_later(id, now_msgs);
            }
            results.append(&mut ctx.results);
            finished.append(&mut ctx.finished);
            self.delta.add(&ctx.delta_rows);
        }
        if !apply_wb.is_empty() {
            self.engine.write(&apply_wb, false)?;
        }
        if !raft_wb.is_empty() {
            self.engine.write(&raft_wb, true)?;
        }

        // After the persist: late apply, persisted messages, advance.
        let mut late_wb = WriteBatch::new();
        {
            let mut ctx = ApplyCtx::new(&engine, self.store_id, &mut late_wb);
            for p in pending {
                let PendingReady {
                    region_id,
                    mut ready,
                    deferred,
                } = p;
                let peer = self.peers.get_mut(&region_id).expect("pending peer");
                apply_entries(peer, deferred, &mut ctx);
                let persisted = ready.take_persisted_messages();
                let mut light = peer.raft.advance(ready);
                if let Some(commit) = light.commit_index() {
                    peer.storage_mut().set_commit(commit);
                    peer.storage().write_raft_state(ctx.wb);
                }
                let light_msgs = light.take_messages();
                apply_entries(peer, light.take_committed_entries(), &mut ctx);
                peer.raft.advance_apply();
                self.send_later(region_id, persisted);
                self.send_later(region_id, light_msgs);
            }
            results.append(&mut ctx.results);
            finished.append(&mut ctx.finished);
            self.delta.add(&ctx.delta_rows);
        }
        if !late_wb.is_empty() {
            // A commit index from a LightReady must be durable before apply
            // is acknowledged when early apply is off; sync covers both.
            self.engine.write(&late_wb, !self.cfg.early_apply)?;
        }
        for (proposal, result) in finished {
            proposal.cb.finish(result);
        }
        let now = self.now();
        for peer in self.peers.values_mut() {
            let applied = peer.storage().applied_index();
            peer.storage_mut().trim_cache(applied);
            Self::finish_reads(peer, now);
            peer.on_role_change();
            peer.drive_reads(now);
        }
        for r in results {
            self.on_exec_result(r)?;
        }
        self.flush_messages();
        Ok(())
    }

    fn send_later(&mut self, region_id: u64, msgs: Vec<RaftMsg>) {
        if !msgs.is_empty() {
            self.send(region_id, msgs);
        }
    }

    fn flush_messages(&mut self) {
        self.transport.flush();
    }

    fn on_exec_result(&mut self, r: ExecResult<E>) -> Result<()> {
        match r {
            ExecResult::Split {
                left,
                right,
                was_leader,
            } => {
                let right_id = right.region.id;
                tracing::info!(left = left.id, right = right_id, "region split");
                if let Some(old) = self.peers.remove(&right_id) {
                    if old.is_initialized() {
                        // Never replace data we already have.
                        self.peers.insert(right_id, old);
                        return Ok(());
                    }
                }
                let mut peer = Peer::new(*right, &self.logger)?;
                if was_leader {
                    peer.campaign_in = Some(0);
                }
                self.peers.insert(right_id, peer);
            }
            ExecResult::ChangePeer {
                region,
                removed_self,
            } => {
                if removed_self {
                    self.destroy_peer(region.id)?;
                }
            }
        }
        Ok(())
    }
}

/// Runs the store loop until every sender of `rx` is gone.
pub fn run_loop<E: Engine, T: Transport>(mut store: RaftStore<E, T>, rx: Receiver<StoreMsg>) {
    let mut next_tick = Instant::now() + TICK;
    loop {
        let now = Instant::now();
        let wait = next_tick.saturating_duration_since(now);
        match rx.recv_timeout(wait) {
            Ok(m) => {
                store.handle_msg(m);
                for m in rx.try_iter().take(4096) {
                    store.handle_msg(m);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() >= next_tick {
            store.tick();
            next_tick += TICK;
            if next_tick < Instant::now() {
                next_tick = Instant::now() + TICK;
            }
        }
        let round = Instant::now();
        let result = store.handle_readies();
        store.publish_leases();
        if round.elapsed() > std::time::Duration::from_millis(500) {
            tracing::warn!(
                store = store.store_id,
                ms = round.elapsed().as_millis() as u64,
                "slow store loop round"
            );
        }
        if let Err(e) = result {
            // A failed RocksDB write leaves memory and disk disagreeing:
            // stop rather than acknowledge anything more.
            tracing::error!(store = store.store_id, "store loop stopped: {e}");
            eprintln!(
                "fatal: store {} cannot persist raft state: {e}",
                store.store_id
            );
            std::process::exit(2);
        }
    }
}
