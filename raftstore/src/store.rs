//! The store loop: one thread per storage process drives every peer.
//!
//! This module is the driver: it routes messages to peers, ticks them, and
//! runs the Ready procedure. What a peer does lives with the peer
//! ([`crate::peer`]: proposals, reads, log compaction, leadership
//! transfers), what its state is in [`crate::peer_storage`], and what
//! applying an entry does in [`crate::apply`].
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
//!    the raft batch of *all* peers with one fsync (why one for all:
//!    `docs/design-notes.md`, Replication);
//! 7. without early apply, apply committed entries only now, after the
//!    commit index is durable;
//! 8. send the messages that had to wait for the persist, `advance`, apply
//!    what the LightReady brings, answer proposals and reads, and carry out
//!    splits and membership changes;
//! 9. once the round is synced, delete the SST files it ingested.
//!
//! A round that fails (a write the engine refused, an apply error that is
//! not deterministic) returns its error before anything after it is
//! written or answered, and [`run_loop`] stops the process.
//!
//! Apply happens on this thread. Coprocessor reads do not: the loop only
//! confirms leadership (lease or ReadIndex) and that the apply caught up,
//! then the service reads a RocksDB snapshot on the read pool.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use protobuf::Message as _;
use quarry_proto::meta::{Peer as PeerMeta, Region, RegionEpoch, RegionStatus, StatusResponse};
use quarry_proto::raft::{raft_cmd::Cmd, IngestSst, KvWrite, PeerState, RaftMessage, SplitRequest};
use raft::eraftpb::Message as RaftMsg;
use raft::Ready;
use tokio::sync::oneshot;

use crate::apply::{apply_entries, ApplyCtx, ExecResult};
use crate::compaction::DeltaStats;
use crate::concurrency::ConcurrencyManager;
use crate::engine::{Engine, WriteBatch};
use crate::import::SstImporter;
use crate::local_read::LocalReader;
use crate::peer::propose::{Callback, TxnDone};
use crate::peer::{Peer, ELECTION_TICKS, TICK};
use crate::peer_storage::PeerStorage;
use crate::transport::Transport;
use crate::{region, Error, Result};
use quarry_proto::failpoint::{fires_on, injected};

mod life;
#[cfg(test)]
mod tests;

/// Requests to the store loop.
pub enum StoreMsg {
    Raft(Box<RaftMessage>),
    Write {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        write: KvWrite,
        cb: oneshot::Sender<Result<()>>,
    },
    /// Ingest an uploaded SST file (`import.rs`), answered once applied.
    Ingest {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        ingest: IngestSst,
        cb: oneshot::Sender<Result<()>>,
    },
    /// A transaction's step, answered once applied.
    Txn {
        region_id: u64,
        epoch: Option<RegionEpoch>,
        txn: quarry_proto::raft::TxnWrite,
        cb: oneshot::Sender<Result<TxnDone>>,
    },
    /// max_ts was raised to an oracle timestamp taken after the region's
    /// leader answered `TxnDone::unsynced_term` = `term`.
    SyncedMaxTs {
        region_id: u64,
        term: u64,
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
    /// Served reads and one-phase commits in flight (`concurrency.rs`).
    concurrency: Arc<ConcurrencyManager>,
    published: HashSet<u64>,
    /// Uploaded SST files (bulk load); None: this store refuses ingests.
    importer: Option<Arc<SstImporter>>,
    /// Peers created and destroyed in this drain of messages, not yet
    /// written (`store/life.rs`).
    life: life::LifeBatch,
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
            concurrency: ConcurrencyManager::new(),
            published: HashSet::new(),
            importer: None,
            life: life::LifeBatch::default(),
        })
    }

    /// Lets the store ingest SST files uploaded to `importer`.
    pub fn set_importer(&mut self, importer: Arc<SstImporter>) {
        self.importer = Some(importer);
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
    /// The store's served reads and one-phase commits, shared with the
    /// node's read path.
    pub fn concurrency(&self) -> Arc<ConcurrencyManager> {
        self.concurrency.clone()
    }

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
                Ok(peer) => peer.propose_write(epoch, write, cb, now),
            },
            StoreMsg::Ingest {
                region_id,
                epoch,
                ingest,
                cb,
            } => match self.leader_for(region_id, epoch.as_ref(), false) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(peer) => peer.propose_cmd(epoch, Cmd::Ingest(ingest), Callback::Write(cb), now),
            },
            StoreMsg::Txn {
                region_id,
                epoch,
                txn,
                cb,
            } => {
                let cm = self.concurrency.clone();
                match self.leader_for(region_id, epoch.as_ref(), false) {
                    Err(e) => drop(cb.send(Err(e))),
                    Ok(peer) => peer.propose_txn(epoch, txn, &cm, cb, now),
                }
            }
            StoreMsg::SyncedMaxTs { region_id, term } => {
                if let Some(peer) = self.peers.get_mut(&region_id) {
                    peer.synced_max_ts(term);
                }
            }
            StoreMsg::Read {
                region_id,
                epoch,
                cb,
            } => match self.leader_for(region_id, epoch.as_ref(), false) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(peer) => peer.on_read(cb, now),
            },
            StoreMsg::CreatePeer { region, cb } => {
                self.stage_life(cb, |s, batch| s.stage_create(region, batch))
            }
            StoreMsg::DestroyPeer { region_id, cb } => {
                self.stage_life(cb, |s, batch| s.stage_destroy(region_id, batch))
            }
            StoreMsg::ChangePeer {
                region_id,
                peer,
                remove,
                cb,
            } => match self.leader_for(region_id, None, false) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(p) => p.propose_change_peer(peer, remove, cb, now),
            },
            StoreMsg::Split {
                region_id,
                epoch,
                split,
                cb,
            } => match self.leader_for(region_id, epoch.as_ref(), true) {
                Err(e) => drop(cb.send(Err(e))),
                Ok(peer) => peer.propose_split(epoch, split, cb, now),
            },
            StoreMsg::TransferLeader {
                region_id,
                to_peer_id,
            } => {
                if let Some(p) = self.peers.get_mut(&region_id) {
                    if p.is_leader() {
                        p.transfer_leader(to_peer_id, &self.local);
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

    fn on_raft_message(&mut self, m: RaftMessage) {
        if fires_on("raft_isolate", self.store_id) {
            return;
        }
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
        if peer.peer_id() != to.id {
            // A message for another incarnation of our peer of this region.
            if to.id > peer.peer_id() && !peer.is_initialized() {
                self.peers.remove(&m.region_id);
                if self.maybe_create_peer(&m, &msg) {
                    self.step(m.region_id, msg);
                }
            }
            return;
        }
        if let (Some(from), Some(peer)) = (m.from_peer, self.peers.get_mut(&m.region_id)) {
            peer.remember_peer(from);
        }
        self.step(m.region_id, msg);
    }

    fn step(&mut self, region_id: u64, msg: RaftMsg) {
        if let Some(peer) = self.peers.get_mut(&region_id) {
            if let Err(e) = peer.step(msg) {
                tracing::debug!(region = region_id, "raft step: {e}");
            }
        }
    }

    fn status(&self) -> StatusResponse {
        let mut regions: Vec<RegionStatus> = self
            .peers
            .values()
            .map(|p| RegionStatus {
                region: Some(p.region().clone()),
                peer_id: p.peer_id(),
                is_leader: p.is_leader(),
                leader_peer_id: p.leader_id(),
                term: p.term(),
                applied_index: p.storage().applied_index(),
                commit_index: p.commit_index(),
                last_index: p.last_index(),
                truncated_index: p.storage().truncated_index(),
                // Filled in by the Admin service's answer.
                approximate_bytes: 0,
            })
            .collect();
        regions.sort_by_key(|r| r.region.as_ref().map_or(0, |r| r.id));
        StatusResponse {
            store_id: self.store_id,
            regions,
            // Filled in by the node, which owns the engine and the GC
            // settings.
            ..Default::default()
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
                peer.maybe_transfer_to_preferred(&self.local);
            }
            peer.tick(now);
            if periodic && peer.is_leader() {
                peer.maybe_compact_log(&self.cfg, now);
            }
        }
    }

    // ------------------------------------------------------------ ready

    fn send(&mut self, region_id: u64, msgs: Vec<RaftMsg>) {
        let Some(peer) = self.peers.get_mut(&region_id) else {
            return;
        };
        // A snapshot is reported sent as soon as it leaves: the leader
        // then probes the follower with the entries after it. Unreported,
        // raft-rs would wait for the follower to acknowledge it, forever
        // if the message is lost or the follower stops while installing
        // it (the leader sends nothing more to a peer awaiting a snapshot).
        let snapshots_to: Vec<u64> = msgs
            .iter()
            .filter(|m| m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot)
            .map(|m| m.to)
            .collect();
        let out: Vec<RaftMessage> = msgs
            .into_iter()
            .filter_map(|m| peer.to_raft_message(m))
            .collect();
        for to in snapshots_to {
            peer.report_snapshot_sent(to);
        }
        if fires_on("raft_isolate", self.store_id) {
            return;
        }
        for m in out {
            self.transport.send(m);
        }
    }

    /// Runs the Ready procedure for every peer with work (see module docs).
    pub fn handle_readies(&mut self) -> Result<()> {
        let ids: Vec<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| p.has_ready())
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
        let mut ingested = Vec::new();
        let mut reclaim = Vec::new();
        let engine = self.engine.clone();
        {
            let mut ctx = ApplyCtx::new(&engine, self.store_id, &mut apply_wb);
            ctx.importer = self.importer.clone();
            for id in ids {
                let peer = self.peers.get_mut(&id).expect("listed");
                let mut ready = peer.ready();
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
                peer.on_read_states(ready.take_read_states());
                let committed = ready.take_committed_entries();
                let deferred = if self.cfg.early_apply && !has_snapshot {
                    apply_entries(peer, committed, &mut ctx)?;
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
            ingested.append(&mut ctx.ingested);
            reclaim.append(&mut ctx.reclaim);
            self.delta.add(&ctx.delta_rows);
            // Before the write is visible: reads below it are refused.
            self.concurrency.note_folded(ctx.folded_to);
        }
        if !apply_wb.is_empty() {
            self.engine.write(&apply_wb, false)?;
        }
        if !raft_wb.is_empty() {
            if fires_on("raft_before_persist", self.store_id) {
                return Err(Error::Engine(injected("raft_before_persist")));
            }
            self.engine.write(&raft_wb, true)?;
            if fires_on("raft_after_persist", self.store_id) {
                return Err(Error::Engine(injected("raft_after_persist")));
            }
        }

        // After the persist: late apply, persisted messages, advance.
        let mut late_wb = WriteBatch::new();
        {
            let mut ctx = ApplyCtx::new(&engine, self.store_id, &mut late_wb);
            ctx.importer = self.importer.clone();
            for p in pending {
                let PendingReady {
                    region_id,
                    mut ready,
                    deferred,
                } = p;
                let peer = self.peers.get_mut(&region_id).expect("pending peer");
                apply_entries(peer, deferred, &mut ctx)?;
                let persisted = ready.take_persisted_messages();
                let mut light = peer.advance(ready);
                if let Some(commit) = light.commit_index() {
                    peer.storage_mut().set_commit(commit);
                    peer.storage().write_raft_state(ctx.wb);
                }
                let light_msgs = light.take_messages();
                apply_entries(peer, light.take_committed_entries(), &mut ctx)?;
                peer.advance_apply();
                self.send_later(region_id, persisted);
                self.send_later(region_id, light_msgs);
            }
            results.append(&mut ctx.results);
            finished.append(&mut ctx.finished);
            ingested.append(&mut ctx.ingested);
            reclaim.append(&mut ctx.reclaim);
            self.delta.add(&ctx.delta_rows);
            // Before the write is visible: reads below it are refused.
            self.concurrency.note_folded(ctx.folded_to);
        }
        if !late_wb.is_empty() {
            // A commit index from a LightReady must be durable before apply
            // is acknowledged when early apply is off; sync covers both.
            self.engine.write(&late_wb, !self.cfg.early_apply)?;
        }
        for (start, end) in &reclaim {
            self.engine.reclaim_range(start, end);
        }
        if !ingested.is_empty() {
            // The ingests' records and apply states are durable before
            // their files go: a replay after a crash needs the files.
            self.engine.sync_wal()?;
            if let Some(importer) = &self.importer {
                for path in &ingested {
                    importer.delete(path);
                }
            }
        }
        for (proposal, result) in finished {
            crate::metrics::RAFT_PROPOSE.observe(proposal.proposed_at.elapsed().as_secs_f64());
            proposal.cb.finish(result);
        }
        let now = self.now();
        for peer in self.peers.values_mut() {
            let applied = peer.storage().applied_index();
            peer.storage_mut().trim_cache(applied);
            peer.release_settled_locks(applied);
            peer.finish_reads(now);
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
                    peer.campaign_after(0);
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
///
/// A round that fails (the engine refused a write, or apply met an error
/// that is this replica's alone) leaves memory ahead of the disk: the
/// process stops at once, with the error logged and exit status 2, rather
/// than acknowledge anything more. A restart resumes from what was written.
pub fn run_loop<E: Engine, T: Transport>(mut store: RaftStore<E, T>, rx: Receiver<StoreMsg>) {
    if let Err(e) = drive(&mut store, &rx) {
        tracing::error!(store = store.store_id, "store loop stopped: {e}");
        eprintln!("fatal: store {} stopped: {e}", store.store_id);
        std::process::exit(2);
    }
}

/// The loop itself: returns once every sender of `rx` is gone, or with the
/// error of the first round that failed.
fn drive<E: Engine, T: Transport>(
    store: &mut RaftStore<E, T>,
    rx: &Receiver<StoreMsg>,
) -> Result<()> {
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
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        store.write_life()?;
        if Instant::now() >= next_tick {
            store.tick();
            next_tick += TICK;
            if next_tick < Instant::now() {
                next_tick = Instant::now() + TICK;
            }
        }
        let round = Instant::now();
        let result = store.handle_readies();
        if round.elapsed() > std::time::Duration::from_millis(500) {
            tracing::warn!(
                store = store.store_id,
                ms = round.elapsed().as_millis() as u64,
                "slow store loop round"
            );
        }
        // A failed round may have left regions in memory that were never
        // written: stop before any lease would vouch for them.
        result?;
        store.publish_leases();
    }
}
