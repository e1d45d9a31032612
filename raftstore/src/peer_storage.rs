//! One peer's durable raft state, as raft-rs's [`raft::Storage`].
//!
//! The log lives in the `raft` column family (`\x01l{region}{index}`), with
//! the HardState and the log's end in `RaftLocalState` and the applied,
//! committed and truncated positions in `ApplyState` (see `keys.rs`), and
//! the region, this peer and whether it was removed in `RegionLocalState`.
//! Only this module writes those keys: creating a peer, appending, moving
//! positions, installing a snapshot, and destroying a peer
//! ([`PeerStorage::destroy`]: the data, the log and the states go, and a
//! tombstone stays so that a late message cannot bring the peer back).
//! Recent entries are also kept in a bounded in-memory cache, so a leader
//! sending appends and applying committed entries rarely reads RocksDB.
//!
//! A new region's peers all start from the same empty log at index
//! [`RAFT_INIT_LOG_INDEX`] (term 5, as TiKV does), so they agree on a
//! common prefix without a snapshot. A peer created because a message
//! arrived for a region it does not know starts *uninitialized* (index 0,
//! no voters) and is filled by a snapshot from the leader.
//!
//! EARLY APPLY AND RESTART: committed entries may be applied before the
//! HardState carrying the new commit index is written (the TiDB 4.0
//! optimization, `early-apply`). `ApplyState` records the commit index and
//! term it applied under; on restart, [`PeerStorage::load`] moves the commit
//! index forward to it after checking the log still holds that entry at that
//! term, and refuses to start otherwise ("may lose data").

use quarry_proto::failpoint::{fires_on, injected};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use prost::Message as _;
use protobuf::Message as _;
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{Peer, Region};
use quarry_proto::raft::{ApplyState, PeerState, RaftLocalState, RegionLocalState, SnapshotData};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::engine::{Cf, Engine, WriteBatch};
use crate::keys;
use crate::{Error, Result};

/// Where every region's log starts.
pub const RAFT_INIT_LOG_INDEX: u64 = 5;
pub const RAFT_INIT_LOG_TERM: u64 = 5;

/// Bytes of recent entries kept in memory per peer.
const CACHE_BYTES: usize = 16 << 20;
/// Up to this many keys, a destroyed peer's data and log go as point
/// deletes rather than one range tombstone ([`PeerStorage::destroy`]).
pub(crate) const POINT_DELETES: usize = 1024;

pub struct PeerStorage<E: Engine> {
    engine: Arc<E>,
    pub region: Region,
    pub peer: Peer,
    pub raft_state: RaftLocalState,
    pub apply_state: ApplyState,
    last_term: u64,
    /// Contiguous recent entries, ending at `raft_state.last_index`.
    cache: VecDeque<Entry>,
    cache_bytes: usize,
    /// The last snapshot generated, reused while it is recent enough.
    snapshot: RefCell<Option<Snapshot>>,
}

fn storage_err(e: impl std::fmt::Display) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(std::io::Error::other(
        e.to_string(),
    ))))
}

pub fn decode_entry(bytes: &[u8]) -> Result<Entry> {
    let mut e = Entry::default();
    e.merge_from_bytes(bytes)
        .map_err(|err| Error::Internal(format!("corrupt raft entry: {err}")))?;
    Ok(e)
}

impl<E: Engine> PeerStorage<E> {
    /// Writes the initial state of a new region's peer into `wb` and
    /// returns its storage: every peer of a new region starts alike.
    pub fn create(engine: Arc<E>, region: Region, peer: Peer, wb: &mut WriteBatch) -> Self {
        let raft_state = RaftLocalState {
            term: RAFT_INIT_LOG_TERM,
            vote: 0,
            commit: RAFT_INIT_LOG_INDEX,
            last_index: RAFT_INIT_LOG_INDEX,
        };
        let apply_state = ApplyState {
            applied_index: RAFT_INIT_LOG_INDEX,
            applied_term: RAFT_INIT_LOG_TERM,
            commit_index: RAFT_INIT_LOG_INDEX,
            commit_term: RAFT_INIT_LOG_TERM,
            truncated_index: RAFT_INIT_LOG_INDEX,
            truncated_term: RAFT_INIT_LOG_TERM,
        };
        let s = PeerStorage {
            engine,
            region,
            peer,
            raft_state,
            apply_state,
            last_term: RAFT_INIT_LOG_TERM,
            cache: VecDeque::new(),
            cache_bytes: 0,
            snapshot: RefCell::new(None),
        };
        s.write_region_state(wb);
        s.write_raft_state(wb);
        s.write_apply_state(wb);
        s
    }

    /// A peer for a region known only from a message: empty until the
    /// leader's snapshot arrives. Nothing is persisted until then.
    pub fn uninitialized(engine: Arc<E>, region: Region, peer: Peer) -> Self {
        PeerStorage {
            engine,
            region,
            peer,
            raft_state: RaftLocalState::default(),
            apply_state: ApplyState::default(),
            last_term: 0,
            cache: VecDeque::new(),
            cache_bytes: 0,
            snapshot: RefCell::new(None),
        }
    }

    /// Loads a peer's state after a restart (see the module docs on early
    /// apply).
    pub fn load(engine: Arc<E>, state: RegionLocalState) -> Result<Self> {
        let region = state.region.unwrap_or_default();
        let peer = state.peer.unwrap_or_default();
        let id = region.id;
        let raft_state = match engine.get(Cf::Raft, &keys::raft_state_key(id))? {
            Some(b) => RaftLocalState::decode(b.as_slice())?,
            None => return Err(Error::Internal(format!("region {id} has no raft state"))),
        };
        let apply_state = match engine.get(Cf::Raft, &keys::apply_state_key(id))? {
            Some(b) => ApplyState::decode(b.as_slice())?,
            None => return Err(Error::Internal(format!("region {id} has no apply state"))),
        };
        let mut s = PeerStorage {
            engine,
            region,
            peer,
            raft_state,
            apply_state,
            last_term: 0,
            cache: VecDeque::new(),
            cache_bytes: 0,
            snapshot: RefCell::new(None),
        };
        s.last_term = s.stored_term(s.raft_state.last_index)?;
        let a = s.apply_state;
        if a.commit_index > s.raft_state.commit {
            // Applied ahead of the persisted commit index (early apply).
            let have = if a.commit_index <= s.raft_state.last_index {
                s.stored_term(a.commit_index).ok()
            } else {
                None
            };
            if have != Some(a.commit_term) {
                return Err(Error::Internal(format!(
                    "region {id} may lose data: entries up to index {} (term {}) were applied, \
                     but the raft log ends at index {} with term {:?} there; refusing to start",
                    a.commit_index, a.commit_term, s.raft_state.last_index, have
                )));
            }
            tracing::info!(
                region = id,
                from = s.raft_state.commit,
                to = a.commit_index,
                "moving the commit index forward from the apply state"
            );
            s.raft_state.commit = a.commit_index;
        }
        if a.applied_index > s.raft_state.commit {
            return Err(Error::Internal(format!(
                "region {id} may lose data: applied index {} is past the commit index {}",
                a.applied_index, s.raft_state.commit
            )));
        }
        Ok(s)
    }

    /// The region states of every peer this store holds or removed (the
    /// latter as tombstones), for loading them at start.
    pub fn region_states(engine: &E) -> Result<Vec<RegionLocalState>> {
        let mut states = Vec::new();
        let mut err = None;
        engine.scan(
            Cf::Raft,
            keys::REGION_STATE_PREFIX,
            &keys::prefix_end(keys::REGION_STATE_PREFIX),
            &mut |_, v| match RegionLocalState::decode(v) {
                Ok(s) => {
                    states.push(s);
                    true
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            },
        )?;
        match err {
            Some(e) => Err(e.into()),
            None => Ok(states),
        }
    }

    pub fn is_initialized(&self) -> bool {
        self.raft_state.last_index > 0
    }

    pub fn region_id(&self) -> u64 {
        self.region.id
    }

    pub fn applied_index(&self) -> u64 {
        self.apply_state.applied_index
    }

    pub fn truncated_index(&self) -> u64 {
        self.apply_state.truncated_index
    }

    fn conf_state(&self) -> ConfState {
        let mut cs = ConfState::default();
        cs.set_voters(self.region.peers.iter().map(|p| p.id).collect());
        cs
    }

    // ------------------------------------------------------------ writes

    pub fn write_region_state(&self, wb: &mut WriteBatch) {
        self.put_region_state(PeerState::Normal, wb);
    }

    fn put_region_state(&self, state: PeerState, wb: &mut WriteBatch) {
        let state = RegionLocalState {
            region: Some(self.region.clone()),
            state: state as i32,
            peer: Some(self.peer),
        };
        wb.put(
            Cf::Raft,
            keys::region_state_key(self.region.id),
            state.encode_to_vec(),
        );
    }

    pub fn write_raft_state(&self, wb: &mut WriteBatch) {
        wb.put(
            Cf::Raft,
            keys::raft_state_key(self.region.id),
            self.raft_state.encode_to_vec(),
        );
    }

    pub fn write_apply_state(&self, wb: &mut WriteBatch) {
        wb.put(
            Cf::Raft,
            keys::apply_state_key(self.region.id),
            self.apply_state.encode_to_vec(),
        );
    }

    /// Appends entries to the log (into `wb`), replacing any conflicting
    /// tail.
    pub fn append(&mut self, entries: &[Entry], wb: &mut WriteBatch) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let id = self.region.id;
        let last = entries.last().expect("non-empty");
        // Drop a tail the new entries replace (entries past the new last
        // one; the rest are overwritten in place).
        if first.index <= self.raft_state.last_index {
            if last.index < self.raft_state.last_index {
                wb.delete_range(
                    Cf::Raft,
                    keys::raft_log_key(id, last.index + 1),
                    keys::raft_log_key(id, self.raft_state.last_index + 1),
                );
            }
            while self.cache.back().is_some_and(|e| e.index >= first.index) {
                let e = self.cache.pop_back().expect("non-empty");
                self.cache_bytes -= e.compute_size() as usize;
            }
        }
        if self
            .cache
            .back()
            .is_some_and(|e| e.index + 1 != first.index)
        {
            self.cache.clear();
            self.cache_bytes = 0;
        }
        for e in entries {
            let bytes = e
                .write_to_bytes()
                .map_err(|err| Error::Internal(format!("encoding a raft entry: {err}")))?;
            self.cache_bytes += bytes.len();
            wb.put(Cf::Raft, keys::raft_log_key(id, e.index), bytes);
            self.cache.push_back(e.clone());
        }
        while self.cache_bytes > CACHE_BYTES && self.cache.len() > 1 {
            let e = self.cache.pop_front().expect("non-empty");
            self.cache_bytes -= e.compute_size() as usize;
        }
        self.raft_state.last_index = last.index;
        self.last_term = last.term;
        Ok(())
    }

    pub fn set_hard_state(&mut self, hs: &HardState) {
        self.raft_state.term = hs.term;
        self.raft_state.vote = hs.vote;
        self.raft_state.commit = hs.commit;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.raft_state.commit = commit;
    }

    /// Drops cached entries below `index` (they have been applied).
    pub fn trim_cache(&mut self, index: u64) {
        while self.cache.front().is_some_and(|e| e.index < index) && self.cache.len() > 1 {
            let e = self.cache.pop_front().expect("non-empty");
            self.cache_bytes -= e.compute_size() as usize;
        }
    }

    /// Truncates the log up to and including `index` (into `wb`).
    pub fn compact_to(&mut self, index: u64, term: u64, wb: &mut WriteBatch) {
        if index <= self.apply_state.truncated_index {
            return;
        }
        let id = self.region.id;
        wb.delete_range(
            Cf::Raft,
            keys::raft_log_key(id, 0),
            keys::raft_log_key(id, index + 1),
        );
        self.apply_state.truncated_index = index;
        self.apply_state.truncated_term = term;
        self.trim_cache(index + 1);
    }

    /// Writes into `wb` the removal of this peer from the store: the
    /// region's data (if this peer has any), then its raft state
    /// ([`PeerStorage::clear_meta`]).
    ///
    /// Small ranges go as point deletes, not range tombstones: every read
    /// of a memtable re-checks the range tombstones in it, so dropping a
    /// table of thousands of regions as thousands of tombstones slowed
    /// every read and write on the store until the memtable flushed (a
    /// 5,000-region DROP held the stores for over a minute). A region with
    /// more than `POINT_DELETES` (1,024) keys is one range tombstone, as before.
    pub fn destroy(&self, wb: &mut WriteBatch) -> Result<()> {
        if self.is_initialized() {
            let r = &self.region;
            let end = keys::concrete_end(&r.end_key);
            let mut keys = Vec::new();
            self.engine
                .scan(Cf::Default, &r.start_key, &end, &mut |k, _| {
                    keys.push(k.to_vec());
                    keys.len() <= POINT_DELETES
                })?;
            if keys.len() <= POINT_DELETES {
                for k in keys {
                    wb.delete(Cf::Default, k);
                }
            } else {
                wb.delete_range(Cf::Default, r.start_key.clone(), end);
            }
        }
        self.clear_meta(wb);
        Ok(())
    }

    /// Writes into `wb` the removal of this peer's raft state: its log, its
    /// raft and apply states, and a tombstone region state in place of the
    /// live one, naming the removed peer (a message for it, or for an
    /// older peer of the region, must not recreate it).
    ///
    /// The log's live entries are those after the truncated index up to
    /// the last (truncation and appends delete the rest): as point deletes
    /// while there are few ([`PeerStorage::destroy`] says why).
    pub fn clear_meta(&self, wb: &mut WriteBatch) {
        let id = self.region.id;
        let first = self.apply_state.truncated_index + 1;
        let last = self.raft_state.last_index;
        if last < first {
            // Nothing persisted (an uninitialized peer), or an empty log.
        } else if last - first < POINT_DELETES as u64 {
            for index in first..=last {
                wb.delete(Cf::Raft, keys::raft_log_key(id, index));
            }
        } else {
            let (s, e) = keys::raft_log_range(id);
            wb.delete_range(Cf::Raft, s, e);
        }
        wb.delete(Cf::Raft, keys::raft_state_key(id));
        wb.delete(Cf::Raft, keys::apply_state_key(id));
        self.put_region_state(PeerState::Tombstone, wb);
    }

    /// Installs a snapshot received from the leader (into `wb`): the
    /// region's data, its range and peers, and a log that starts after it.
    pub fn apply_snapshot(&mut self, snap: &Snapshot, wb: &mut WriteBatch) -> Result<()> {
        if fires_on("snapshot_apply", self.peer.store_id) {
            return Err(Error::Engine(injected("snapshot_apply")));
        }
        let meta = snap.get_metadata();
        let data = SnapshotData::decode(snap.get_data())
            .map_err(|e| Error::Internal(format!("corrupt snapshot: {e}")))?;
        let region = data
            .region
            .ok_or_else(|| Error::Internal("snapshot without a region".into()))?;
        let id = self.region.id;
        // Old data in the old and new ranges goes, the snapshot's comes in.
        for r in [&self.region, &region] {
            if !r.start_key.is_empty() || !r.end_key.is_empty() {
                wb.delete_range(
                    Cf::Default,
                    r.start_key.clone(),
                    keys::concrete_end(&r.end_key),
                );
            }
        }
        for KvPair { key, value } in data.pairs {
            wb.put(Cf::Default, key, value);
        }
        let (first, last) = keys::raft_log_range(id);
        wb.delete_range(Cf::Raft, first, last);
        self.region = region;
        self.raft_state.last_index = meta.index;
        self.raft_state.commit = self.raft_state.commit.max(meta.index);
        self.raft_state.term = self.raft_state.term.max(meta.term);
        self.last_term = meta.term;
        self.apply_state = ApplyState {
            applied_index: meta.index,
            applied_term: meta.term,
            commit_index: meta.index,
            commit_term: meta.term,
            truncated_index: meta.index,
            truncated_term: meta.term,
        };
        self.cache.clear();
        self.cache_bytes = 0;
        self.write_region_state(wb);
        self.write_raft_state(wb);
        self.write_apply_state(wb);
        Ok(())
    }

    // ------------------------------------------------------------ reads

    fn cached(&self, idx: u64) -> Option<&Entry> {
        let front = self.cache.front()?.index;
        if idx < front {
            return None;
        }
        self.cache.get((idx - front) as usize)
    }

    fn stored_term(&self, idx: u64) -> Result<u64> {
        if idx == self.apply_state.truncated_index {
            return Ok(self.apply_state.truncated_term);
        }
        if idx == self.raft_state.last_index && self.last_term > 0 {
            return Ok(self.last_term);
        }
        if let Some(e) = self.cached(idx) {
            return Ok(e.term);
        }
        match self
            .engine
            .get(Cf::Raft, &keys::raft_log_key(self.region.id, idx))?
        {
            Some(b) => Ok(decode_entry(&b)?.term),
            None => Err(Error::Internal(format!(
                "region {}: raft log entry {idx} is missing",
                self.region.id
            ))),
        }
    }

    /// Data and state of this region as a raft snapshot at the applied index.
    fn generate_snapshot(&self) -> Result<Snapshot> {
        let r = &self.region;
        let mut pairs = Vec::new();
        self.engine
            .scan(Cf::Default, &r.start_key, &r.end_key, &mut |k, v| {
                pairs.push(KvPair {
                    key: k.to_vec(),
                    value: v.to_vec(),
                });
                true
            })?;
        let data = SnapshotData {
            region: Some(r.clone()),
            pairs,
        };
        let mut snap = Snapshot::default();
        snap.set_data(data.encode_to_vec().into());
        let meta = snap.mut_metadata();
        meta.index = self.apply_state.applied_index;
        meta.term = self.apply_state.applied_term;
        meta.set_conf_state(self.conf_state());
        Ok(snap)
    }
}

impl<E: Engine> raft::Storage for PeerStorage<E> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        if !self.is_initialized() {
            return Ok(RaftState::default());
        }
        let hs = HardState {
            term: self.raft_state.term,
            vote: self.raft_state.vote,
            commit: self.raft_state.commit,
            ..Default::default()
        };
        Ok(RaftState {
            hard_state: hs,
            conf_state: self.conf_state(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into();
        if low <= self.apply_state.truncated_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.raft_state.last_index + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut out = Vec::with_capacity((high - low) as usize);
        let mut size = 0u64;
        let mut push = |e: Entry, out: &mut Vec<Entry>| -> bool {
            size += e.compute_size() as u64;
            let fits = out.is_empty() || max_size.is_none_or(|m| size <= m);
            if fits {
                out.push(e);
            }
            fits
        };
        let cache_front = self.cache.front().map(|e| e.index).unwrap_or(u64::MAX);
        let mut idx = low;
        if low < cache_front {
            let end = high.min(cache_front);
            let mut failed = None;
            let mut full = false;
            self.engine
                .scan(
                    Cf::Raft,
                    &keys::raft_log_key(self.region.id, low),
                    &keys::raft_log_key(self.region.id, end),
                    &mut |_, v| match decode_entry(v) {
                        Ok(e) => {
                            if e.index != idx {
                                failed = Some(format!("raft log gap at {idx}"));
                                return false;
                            }
                            idx += 1;
                            if !push(e, &mut out) {
                                full = true;
                                return false;
                            }
                            true
                        }
                        Err(e) => {
                            failed = Some(e.to_string());
                            false
                        }
                    },
                )
                .map_err(storage_err)?;
            if let Some(f) = failed {
                return Err(storage_err(f));
            }
            if full {
                return Ok(out);
            }
            if idx < end {
                return Err(storage_err(format!(
                    "region {}: raft log entries {idx}..{end} are missing",
                    self.region.id
                )));
            }
        }
        while idx < high {
            let e = self
                .cached(idx)
                .cloned()
                .ok_or_else(|| storage_err(format!("raft log entry {idx} not cached")))?;
            idx += 1;
            if !push(e, &mut out) {
                break;
            }
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.apply_state.truncated_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.raft_state.last_index {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        if !self.is_initialized() && idx == 0 {
            return Ok(0);
        }
        self.stored_term(idx).map_err(storage_err)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.apply_state.truncated_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.raft_state.last_index)
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if fires_on("snapshot_generate", self.peer.store_id) {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        if let Some(s) = self.snapshot.borrow().as_ref() {
            // A snapshot from before a membership change lacks the new peer
            // in its ConfState, and the new peer would refuse it forever.
            let meta = s.get_metadata();
            if meta.index >= request_index
                && meta.index + 1000 >= self.apply_state.applied_index
                && meta.get_conf_state().get_voters() == self.conf_state().get_voters()
            {
                return Ok(s.clone());
            }
        }
        if self.apply_state.applied_index < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let snap = self.generate_snapshot().map_err(storage_err)?;
        *self.snapshot.borrow_mut() = Some(snap.clone());
        Ok(snap)
    }
}
