//! Applying committed entries to the state machine.
//!
//! All entries of one Ready are applied into one [`WriteBatch`] together
//! with the peer's `ApplyState` (data and applied index can never
//! disagree). Apply is deterministic: every replica sees the same entries
//! in the same order and reaches the same result, including refusals
//! (a write against an older region epoch, a duplicate key, an unknown
//! conflict mode), which are decided from the data alone and so are the
//! same everywhere.
//!
//! ERRORS: a refusal is the command's answer: the proposer hears it, and
//! the applied index moves past the entry on every replica alike. An error
//! that is not deterministic ([`Error::is_deterministic`]: the engine
//! failed to read, a stored pack did not decode) is this replica's alone;
//! answering it and moving on would silently skip a write the other
//! replicas applied. [`apply_entries`] then stops at that entry and returns
//! the error without answering its proposer or moving the applied index
//! (proposals overtaken earlier in the round have already heard "stale
//! command": their outcome is unknown, which stays true), and the store
//! loop stops as it does after a failed write, before anything of the
//! round is written (`store::run_loop`). After a restart the entry is
//! applied again from the log. A command whose replicated bytes cannot be
//! executed at all (it does not decode) is the same on every replica:
//! `BadCommand`, a deterministic refusal.
//!
//! Commands:
//! * `KvWrite`: puts, deletes and range deletes inside the region, with an
//!   optional conflict check (INSERT). Checks see earlier writes of the same
//!   batch through an overlay, since they are not in RocksDB yet.
//! * `Txn`: a transaction's prewrite, commit, rollback or lock resolution,
//!   checked against the locks and versions stored (`txn.rs`).
//! * `Split`: the region keeps `[start, split_key)` and a new region takes
//!   `[split_key, end)` with new ids; both epochs' versions grow.
//! * `Ingest`: adds an uploaded SST file's pairs to the region whole
//!   (`import.rs`). Everything the round applied before it is written
//!   first, with the apply state just before it, so that the file's pairs
//!   land after the writes the log orders before them.
//! * `CompactLog`: truncates the raft log.
//! * Conf changes (raft-rs `ConfChange` entries) add or remove a peer.

use quarry_proto::failpoint::{fires_on, injected};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use prost::Message as _;
use protobuf::Message as _;
use quarry_coprocessor::codec::key::{classify_key, pack_key, KeyKind};
use quarry_coprocessor::codec::key::{decode_record_key, hex, record_prefix};
use quarry_coprocessor::codec::pack::PackView;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::meta::{Peer as PeerMeta, Region};
use quarry_proto::raft::{
    raft_cmd::Cmd, ChangePeerContext, Conflict, IngestSst, KvWrite, RaftCmd, SplitRequest,
};
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};

use crate::engine::{Cf, Engine, WriteBatch};
use crate::import::SstImporter;
use crate::peer::propose::{Outcome, Proposal};
use crate::peer::Peer;
use crate::peer_storage::PeerStorage;
use crate::{keys, region, Error, Result};

/// Side effects the store must carry out after an apply.
pub enum ExecResult<E: Engine> {
    /// The region split; `right` is this store's new peer for the right half.
    Split {
        left: Region,
        right: Box<PeerStorage<E>>,
        was_leader: bool,
    },
    /// Peers changed; `removed_self` if this peer left the region.
    ChangePeer { region: Region, removed_self: bool },
}

type PackMemo = (i64, Vec<u8>, Option<(Vec<u8>, Rc<Vec<u8>>)>);

pub struct ApplyCtx<'a, E: Engine> {
    pub engine: &'a Arc<E>,
    pub store_id: u64,
    pub wb: &'a mut WriteBatch,
    /// Point writes of this batch: key → value (None = deleted).
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    deleted_ranges: Vec<KeyRange>,
    /// Packs (column-layout blocks) written by this batch, by key, so an
    /// INSERT applied after a compaction in the same batch sees them.
    pack_puts: BTreeMap<Vec<u8>, Vec<u8>>,
    /// [`ApplyCtx::nearest_pack`]'s last answer: (table, the upper bound
    /// it looked from, the pack it found as key and value). A command's
    /// keys come sorted, so the next key scans back only to the previous
    /// one instead of over every delta row since the last pack (an INSERT
    /// of n rows after d delta rows cost n·d steps). Cleared whenever
    /// this batch writes or deletes a pack.
    pack_memo: RefCell<Option<PackMemo>>,
    pub results: Vec<ExecResult<E>>,
    pub finished: Vec<(Proposal, Result<Outcome>)>,
    /// Row KVs put, per region (a column table's delta; see `compaction`).
    pub delta_rows: HashMap<u64, u64>,
    /// The region of the command being applied.
    pub(crate) region_id: u64,
    /// The highest GC safe point a compaction applied here folded to.
    pub folded_to: u64,
    /// Where uploaded SST files wait (None: this store cannot ingest).
    pub importer: Option<Arc<SstImporter>>,
    /// SST files ingested by this round: the store deletes them once the
    /// round is durable.
    pub ingested: Vec<PathBuf>,
    /// Ranges this round deleted: the store has the engine reclaim their
    /// space once the round is written.
    pub reclaim: Vec<(Vec<u8>, Vec<u8>)>,
    /// The entry [`apply_entries`] applied last in its current call (None
    /// before the first): an ingest writes the round up to it.
    prev_entry: Option<(u64, u64)>,
}

impl<'a, E: Engine> ApplyCtx<'a, E> {
    pub fn new(engine: &'a Arc<E>, store_id: u64, wb: &'a mut WriteBatch) -> Self {
        ApplyCtx {
            engine,
            store_id,
            wb,
            overlay: BTreeMap::new(),
            deleted_ranges: Vec::new(),
            pack_puts: BTreeMap::new(),
            pack_memo: RefCell::new(None),
            results: Vec::new(),
            finished: Vec::new(),
            delta_rows: HashMap::new(),
            region_id: 0,
            folded_to: 0,
            importer: None,
            ingested: Vec::new(),
            reclaim: Vec::new(),
            prev_entry: None,
        }
    }

    /// The value of `key` as this batch will leave it.
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone());
        }
        if self.deleted_ranges.iter().any(|r| r.contains(key)) {
            return Ok(None);
        }
        if fires_on("apply_read_error", self.store_id) {
            return Err(Error::Engine(injected("apply_read_error")));
        }
        self.engine.get(Cf::Default, key)
    }

    /// The pairs in `[start, end)` as this batch will leave them, in key
    /// order.
    pub(crate) fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        self.engine.scan(Cf::Default, start, end, &mut |k, v| {
            if !self.is_deleted(k) {
                out.insert(k.to_vec(), v.to_vec());
            }
            true
        })?;
        for (k, v) in self.overlay.range(start.to_vec()..end.to_vec()) {
            match v {
                Some(v) => out.insert(k.clone(), v.clone()),
                None => out.remove(k),
            };
        }
        Ok(out.into_iter().collect())
    }

    /// Puts a pair: into the write batch, and into the overlay later
    /// commands of the batch read.
    pub(crate) fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.forget_packs(&key);
        self.overlay.insert(key.clone(), Some(value.clone()));
        self.wb.put(Cf::Default, key, value);
    }

    pub(crate) fn delete(&mut self, key: Vec<u8>) {
        self.forget_packs(&key);
        self.overlay.insert(key.clone(), None);
        self.wb.delete(Cf::Default, key);
    }

    /// Drops the pack memo when `key` is a pack's.
    fn forget_packs(&self, key: &[u8]) {
        if matches!(classify_key(key), KeyKind::Pack(_)) {
            self.pack_memo.borrow_mut().take();
        }
    }

    fn is_deleted(&self, key: &[u8]) -> bool {
        matches!(self.overlay.get(key), Some(None))
            || self.deleted_ranges.iter().any(|r| r.contains(key))
    }

    /// Whether a row is already stored under `key`, and if so whether it
    /// holds exactly `value`. A column table's row may sit in a pack
    /// rather than under its own key: the pack that could hold it is the
    /// last one starting at or before its handle (packs never overlap).
    pub(crate) fn existing(&self, key: &[u8], value: &[u8]) -> Result<Existing> {
        if let Some(v) = self.lookup(key)? {
            return Ok(if v == value {
                Existing::Same
            } else {
                Existing::Different
            });
        }
        let Ok((table, handle)) = decode_record_key(key) else {
            return Ok(Existing::Absent);
        };
        let Some(v) = self.nearest_pack(table, &pack_key(table, handle))? else {
            return Ok(Existing::Absent);
        };
        let pack = PackView::parse(&v).map_err(|e| Error::Internal(e.to_string()))?;
        let Some(i) = pack
            .find(handle)
            .map_err(|e| Error::Internal(e.to_string()))?
        else {
            return Ok(Existing::Absent);
        };
        let same = pack
            .row_equals(i, value)
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(if same {
            Existing::Same
        } else {
            Existing::Different
        })
    }

    /// Whether a bare row or a pack row is stored under the row key `key`
    /// (versions aside: `txn.rs` reads those).
    pub(crate) fn has_row(&self, key: &[u8]) -> Result<bool> {
        if self.lookup(key)?.is_some() {
            return Ok(true);
        }
        let Ok((table, handle)) = decode_record_key(key) else {
            return Ok(false);
        };
        let Some(v) = self.nearest_pack(table, &pack_key(table, handle))? else {
            return Ok(false);
        };
        let pack = PackView::parse(&v).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(pack
            .find(handle)
            .map_err(|e| Error::Internal(e.to_string()))?
            .is_some())
    }

    /// The first and last handle of the pack whose handle range holds the
    /// row key `key`'s handle, if any, as this batch leaves the data.
    pub(crate) fn pack_covering(&self, key: &[u8]) -> Result<Option<(i64, i64)>> {
        let Ok((table, handle)) = decode_record_key(key) else {
            return Ok(None);
        };
        let Some(v) = self.nearest_pack(table, &pack_key(table, handle))? else {
            return Ok(None);
        };
        let p = PackView::parse(&v).map_err(|e| Error::Internal(e.to_string()))?;
        Ok((p.last_handle() >= handle).then(|| (p.first_handle(), p.last_handle())))
    }

    /// The handle range of the nearest live pack before `key` (in the same
    /// table), as this batch leaves the data.
    pub(crate) fn pack_before(&self, key: &[u8]) -> Result<Option<(i64, i64)>> {
        let Ok((table, _)) = decode_record_key(key) else {
            return Ok(None);
        };
        // A pack key never equals a row key: "at or before" is "before".
        let Some(v) = self.nearest_pack(table, key)? else {
            return Ok(None);
        };
        let p = PackView::parse(&v).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(Some((p.first_handle(), p.last_handle())))
    }

    /// The value of `table`'s live pack with the greatest key at or before
    /// `upper`, as this batch leaves the data: packs this batch wrote, and
    /// the engine's unless this batch deleted or replaced them. Delta rows
    /// may sit in between and are passed over.
    fn nearest_pack(&self, table: i64, upper: &[u8]) -> Result<Option<Rc<Vec<u8>>>> {
        let lower = record_prefix(table);
        // What the memo knows: the answer for every key up to its bound.
        let (floor, known) = match &*self.pack_memo.borrow() {
            Some((t, bound, found)) if *t == table && bound.as_slice() <= upper => {
                (bound.clone(), found.clone())
            }
            _ => (lower.clone(), None),
        };
        let mut best: Option<(Vec<u8>, Rc<Vec<u8>>)> = self
            .pack_puts
            .range(floor.clone()..=upper.to_vec())
            .next_back()
            .map(|(k, v)| (k.clone(), Rc::new(v.clone())));
        self.engine
            .scan_back(Cf::Default, upper, &floor, &mut |k, v| {
                if !matches!(classify_key(k), KeyKind::Pack(_))
                    || self.is_deleted(k)
                    || self.pack_puts.contains_key(k)
                {
                    return true;
                }
                if best.as_ref().is_none_or(|(b, _)| k > b.as_slice()) {
                    best = Some((k.to_vec(), Rc::new(v.to_vec())));
                }
                false
            })?;
        let found = best.or(known);
        *self.pack_memo.borrow_mut() = Some((table, upper.to_vec(), found.clone()));
        Ok(found.map(|(_, v)| v))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
    Absent,
    Same,
    Different,
}

fn duplicate(key: &[u8]) -> Error {
    let what = match decode_record_key(key) {
        Ok((_, h)) => format!("handle {h}"),
        Err(_) => format!("key {}", hex(key)),
    };
    Error::InvalidInput(format!("duplicate key: a row with {what} already exists"))
}

pub(crate) fn exec_write<E: Engine>(
    region: &Region,
    epoch: Option<&quarry_proto::meta::RegionEpoch>,
    w: KvWrite,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    let cur = region::epoch(region);
    if epoch.is_none_or(|e| e.version != cur.version) {
        return Err(Error::region(region::epoch_not_match(epoch, region)));
    }
    for k in w.puts.iter().map(|p| &p.key).chain(&w.deletes) {
        if !region::contains(region, k) {
            return Err(Error::region(region::key_not_in_region(k, region)));
        }
    }
    if !w.must_exist_hash.is_empty() && w.must_exist_hash.len() != w.must_exist.len() {
        return Err(Error::InvalidInput(
            "must_exist_hash must match must_exist".into(),
        ));
    }
    let conflict = Conflict::try_from(w.conflict).map_err(|_| {
        Error::InvalidInput(format!(
            "unknown conflict mode {} in a write to region {}",
            w.conflict, region.id
        ))
    })?;
    for (i, k) in w.must_exist.iter().enumerate() {
        let changed = match ctx.lookup(k)? {
            None => true,
            Some(v) => w
                .must_exist_hash
                .get(i)
                .is_some_and(|h| crate::compaction::value_hash(&v) != *h),
        };
        if changed {
            return Err(Error::InvalidInput(format!(
                "region {}: key {} changed since the write was planned; it is refused whole",
                region.id,
                hex(k)
            )));
        }
    }
    for k in &w.must_not_exist {
        if ctx.lookup(k)?.is_some() {
            return Err(Error::InvalidInput(format!(
                "region {}: key {} appeared since the write was planned; it is refused whole",
                region.id,
                hex(k)
            )));
        }
    }
    let mut skip = vec![false; w.puts.len()];
    if conflict != Conflict::Overwrite {
        for (i, p) in w.puts.iter().enumerate() {
            match ctx.existing(&p.key, &p.value)? {
                Existing::Absent => {}
                Existing::Same if conflict == Conflict::FailIfDifferent => skip[i] = true,
                Existing::Same | Existing::Different => return Err(duplicate(&p.key)),
            }
        }
    }
    // Past every check: this write applies (and may change packs).
    ctx.pack_memo.borrow_mut().take();
    ctx.folded_to = ctx.folded_to.max(w.folded_to);
    let mut rows = 0u64;
    for (p, skip) in w.puts.into_iter().zip(skip) {
        if skip {
            continue;
        }
        rows += matches!(classify_key(&p.key), KeyKind::Row(_)) as u64;
        if matches!(classify_key(&p.key), KeyKind::Pack(_)) {
            ctx.pack_puts.insert(p.key.clone(), p.value.clone());
        }
        ctx.overlay.insert(p.key.clone(), Some(p.value.clone()));
        ctx.wb.put(Cf::Default, p.key, p.value);
    }
    for k in w.deletes {
        ctx.pack_puts.remove(&k);
        ctx.overlay.insert(k.clone(), None);
        ctx.wb.delete(Cf::Default, k);
    }
    for r in w.delete_ranges {
        let Some(range) = KeyRange::new(r.key, r.value).intersect(&KeyRange::of_region(region))
        else {
            continue;
        };
        ctx.overlay.retain(|k, _| !range.contains(k));
        ctx.pack_puts.retain(|k, _| !range.contains(k));
        let end = keys::concrete_end(&range.end);
        ctx.wb
            .delete_range(Cf::Default, range.start.clone(), end.clone());
        ctx.reclaim.push((range.start.clone(), end));
        ctx.deleted_ranges.push(range);
    }
    if rows > 0 {
        *ctx.delta_rows.entry(region.id).or_default() += rows;
    }
    Ok(Outcome::Done)
}

/// Ingests an uploaded SST file into the region (see `import.rs`).
fn exec_ingest<E: Engine>(
    peer: &mut Peer<E>,
    epoch: Option<&quarry_proto::meta::RegionEpoch>,
    req: IngestSst,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    let region = peer.region().clone();
    let sst = req
        .sst
        .ok_or_else(|| Error::BadCommand("an ingest without its SST".into()))?;
    // The exact epoch the loader uploaded for: a peer added since has no
    // copy of the file, and a split may have moved part of its range.
    let cur = region::epoch(&region);
    let uploaded_for = sst.region_epoch.unwrap_or_default();
    if epoch.is_none_or(|e| *e != cur) || uploaded_for != cur || sst.region_id != region.id {
        let mut e = region::epoch_not_match(Some(&uploaded_for), &region);
        e.message = format!("the SST was uploaded for another epoch: {}", e.message);
        return Err(Error::region(e));
    }
    for k in [&sst.first_key, &sst.last_key] {
        if !region::contains(&region, k) {
            return Err(Error::region(region::key_not_in_region(k, &region)));
        }
    }
    let Some(importer) = ctx.importer.clone() else {
        return Err(Error::Internal(format!(
            "store {} cannot ingest SST files",
            ctx.store_id
        )));
    };
    let path = importer.path(&sst.uuid)?;
    // Write what the round applied before this entry, with the apply state
    // just before it, so the file's pairs are newer than all of it, and so
    // the record of an ingest earlier in the round is in the engine for
    // the check below (otherwise whether a repeat re-ingests would depend
    // on where rounds end, which differs between replicas).
    if let Some((index, term)) = ctx.prev_entry {
        let s = peer.storage_mut();
        s.apply_state.applied_index = index;
        s.apply_state.applied_term = term;
        s.apply_state.commit_index = index;
        s.apply_state.commit_term = term;
        s.write_apply_state(ctx.wb);
    }
    if !ctx.wb.is_empty() {
        ctx.engine.write(ctx.wb, true)?;
        *ctx.wb = WriteBatch::new();
    }
    // All of it is in the engine now: the overlay has nothing to add.
    ctx.overlay.clear();
    ctx.deleted_ranges.clear();
    ctx.pack_puts.clear();
    ctx.pack_memo.borrow_mut().take();
    let record = keys::ingested_key(region.id, &sst.uuid);
    if ctx.engine.get(Cf::Raft, &record)?.is_some() {
        // A repeat of an ingest that applied.
        return Ok(Outcome::Done);
    }
    if !path.exists() {
        return Err(Error::Engine(format!(
            "the SST {} for region {} is missing on store {}, though it was uploaded to \
             every replica of this epoch",
            path.display(),
            region.id,
            ctx.store_id
        )));
    }
    ctx.engine.ingest(Cf::Default, &path)?;
    ctx.wb.put(Cf::Raft, record, Vec::new());
    ctx.ingested.push(path);
    tracing::debug!(region = region.id, bytes = sst.length, "ingested an SST");
    Ok(Outcome::Done)
}

fn exec_split<E: Engine>(
    peer: &mut Peer<E>,
    epoch: Option<&quarry_proto::meta::RegionEpoch>,
    req: SplitRequest,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    peer.check_epoch(epoch, true)?;
    let region = peer.region().clone();
    let key = req.split_key;
    if key.as_slice() <= region.start_key.as_slice()
        || !KeyRangeRef::of_region(&region).before_end(&key)
    {
        return Err(Error::InvalidInput(format!(
            "split key {} is not inside region {}",
            hex(&key),
            region.id
        )));
    }
    if let Some((first, last)) = ctx.pack_before(&key)? {
        // A pack's rows belong to the region holding its key: a split
        // inside its handle range would strand some of them.
        if let Ok((_, h)) = decode_record_key(&key) {
            if h <= last {
                return Err(Error::InvalidInput(format!(
                    "split key (handle {h}) falls inside a pack of handles [{first}, {last}]"
                )));
            }
        }
    }
    if req.new_peer_ids.len() != region.peers.len() {
        return Err(Error::InvalidInput(format!(
            "split of region {} needs {} new peer ids, got {}",
            region.id,
            region.peers.len(),
            req.new_peer_ids.len()
        )));
    }
    let mut left = region.clone();
    let mut epoch = region::epoch(&region);
    epoch.version += 1;
    left.end_key = key.clone();
    left.epoch = Some(epoch);
    let right = Region {
        id: req.new_region_id,
        start_key: key,
        end_key: region.end_key.clone(),
        epoch: Some(epoch),
        peers: region
            .peers
            .iter()
            .zip(&req.new_peer_ids)
            .map(|(p, id)| PeerMeta {
                id: *id,
                store_id: p.store_id,
            })
            .collect(),
    };
    let right_peer = right
        .peers
        .iter()
        .find(|p| p.store_id == ctx.store_id)
        .copied()
        .ok_or_else(|| Error::Internal("split: this store has no peer in the new region".into()))?;
    peer.storage_mut().region = left.clone();
    peer.storage().write_region_state(ctx.wb);
    let right_storage = PeerStorage::create(ctx.engine.clone(), right.clone(), right_peer, ctx.wb);
    ctx.results.push(ExecResult::Split {
        left: left.clone(),
        right: Box::new(right_storage),
        was_leader: peer.is_leader(),
    });
    Ok(Outcome::Split(left, right))
}

fn exec_change_peer<E: Engine>(
    peer: &mut Peer<E>,
    entry: &Entry,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    let mut cc = ConfChange::default();
    cc.merge_from_bytes(&entry.data)
        .map_err(|e| Error::BadCommand(format!("corrupt conf change: {e}")))?;
    let change = ChangePeerContext::decode(cc.get_context())
        .map_err(|e| Error::BadCommand(format!("corrupt conf change context: {e}")))?;
    let target = change
        .peer
        .ok_or_else(|| Error::BadCommand("conf change without a peer".into()))?;
    let mut region = peer.region().clone();
    let exists = region.peers.iter().any(|p| p.id == target.id);
    match (cc.get_change_type(), exists) {
        (ConfChangeType::AddNode, false) => region.peers.push(target),
        (ConfChangeType::RemoveNode, true) => region.peers.retain(|p| p.id != target.id),
        // Already done (a retried proposal): nothing changes, not even raft.
        _ => return Ok(Outcome::Region(region)),
    }
    peer.apply_conf_change(&cc)?;
    let mut epoch = region::epoch(&region);
    epoch.conf_ver += 1;
    region.epoch = Some(epoch);
    peer.storage_mut().region = region.clone();
    peer.storage().write_region_state(ctx.wb);
    let removed_self = target.id == peer.peer_id() && change.remove;
    ctx.results.push(ExecResult::ChangePeer {
        region: region.clone(),
        removed_self,
    });
    Ok(Outcome::Region(region))
}

/// Applies `entries` (committed, in order) to `peer` into `ctx`.
///
/// A deterministic error rejects its command (the proposer is answered) and
/// apply goes on. A non-deterministic one stops apply at its entry and is
/// returned: nothing is answered for it, the applied index stays before
/// it, and `ctx` and the peer's memory hold a partial round the caller must
/// not write or go on from (see the module docs).
pub fn apply_entries<E: Engine>(
    peer: &mut Peer<E>,
    entries: Vec<Entry>,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<()> {
    let Some(last) = entries.last() else {
        return Ok(());
    };
    if fires_on("apply_before", ctx.store_id) {
        return Err(Error::Internal(injected("apply_before")));
    }
    let _timer = crate::metrics::RAFT_APPLY.start_timer();
    let (last_index, last_term) = (last.index, last.term);
    ctx.prev_entry = None;
    for entry in entries {
        let result = exec_entry(peer, &entry, ctx);
        if let Err(e) = &result {
            if !e.is_deterministic() {
                tracing::error!(
                    region = peer.region_id(),
                    index = entry.index,
                    "apply failed on this replica alone, not moving past the entry: {e}"
                );
                return result.map(|_| ());
            }
        }
        if let Some(p) = peer.take_proposal(entry.index, entry.term) {
            ctx.finished.push((p, result));
        }
        ctx.prev_entry = Some((entry.index, entry.term));
    }
    let s = peer.storage_mut();
    s.apply_state.applied_index = last_index;
    s.apply_state.applied_term = last_term;
    s.apply_state.commit_index = last_index;
    s.apply_state.commit_term = last_term;
    s.write_apply_state(ctx.wb);
    Ok(())
}

/// Executes one committed entry.
fn exec_entry<E: Engine>(
    peer: &mut Peer<E>,
    entry: &Entry,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    match entry.get_entry_type() {
        EntryType::EntryNormal if entry.data.is_empty() => Ok(Outcome::Done),
        EntryType::EntryNormal => {
            let cmd = RaftCmd::decode(entry.data.as_ref())
                .map_err(|e| Error::BadCommand(format!("corrupt raft command: {e}")))?;
            match cmd.cmd {
                Some(Cmd::Write(w)) => {
                    let region = peer.region().clone();
                    exec_write(&region, cmd.epoch.as_ref(), w, ctx)
                }
                Some(Cmd::Txn(t)) => {
                    let region = peer.region().clone();
                    crate::txn::exec_txn(&region, cmd.epoch.as_ref(), t, ctx)
                }
                Some(Cmd::Split(s)) => exec_split(peer, cmd.epoch.as_ref(), s, ctx),
                Some(Cmd::Ingest(i)) => exec_ingest(peer, cmd.epoch.as_ref(), i, ctx),
                Some(Cmd::CompactLog(c)) => {
                    let (i, t) = (c.compact_index, c.compact_term);
                    if i > peer.storage().truncated_index() && i <= entry.index {
                        peer.storage_mut().compact_to(i, t, ctx.wb);
                    }
                    Ok(Outcome::Done)
                }
                None => Err(Error::BadCommand("empty raft command".into())),
            }
        }
        EntryType::EntryConfChange => exec_change_peer(peer, entry, ctx),
        EntryType::EntryConfChangeV2 => {
            Err(Error::BadCommand("unexpected ConfChangeV2 entry".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quarry_coprocessor::codec::key::{record_key, table_record_range};
    use quarry_proto::kv::KvPair;
    use quarry_proto::meta::{Region, RegionEpoch};
    use quarry_proto::raft::{Conflict, KvWrite};

    use super::{exec_write, ApplyCtx};
    use crate::engine::memory::MemEngine;
    use crate::engine::{Cf, WriteBatch};
    use crate::Error;

    const T: i64 = 7;

    fn region() -> Region {
        let (start_key, end_key) = table_record_range(T);
        Region {
            id: 10,
            start_key,
            end_key,
            epoch: Some(RegionEpoch {
                conf_ver: 1,
                version: 1,
            }),
            peers: vec![],
        }
    }

    fn put(conflict: i32) -> KvWrite {
        KvWrite {
            puts: vec![KvPair {
                key: record_key(T, 1),
                value: b"v".to_vec(),
            }],
            conflict,
            ..Default::default()
        }
    }

    #[test]
    fn an_unknown_conflict_mode_is_refused_not_taken_for_overwrite() {
        let engine = Arc::new(MemEngine::new());
        let r = region();
        let mut wb = WriteBatch::new();
        let mut ctx = ApplyCtx::new(&engine, 1, &mut wb);
        let Err(err) = exec_write(&r, r.epoch.as_ref(), put(7), &mut ctx) else {
            panic!("a write with conflict mode 7 applied")
        };
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
        assert!(err.is_deterministic(), "every replica refuses it alike");
        assert!(err.to_string().contains("unknown conflict mode 7"), "{err}");
        drop(ctx);
        assert!(wb.is_empty(), "a refused write writes nothing");
        // The known modes still apply.
        for mode in [
            Conflict::Overwrite,
            Conflict::FailIfExists,
            Conflict::FailIfDifferent,
        ] {
            let mut wb = WriteBatch::new();
            let mut ctx = ApplyCtx::new(&engine, 1, &mut wb);
            assert!(exec_write(&r, r.epoch.as_ref(), put(mode as i32), &mut ctx).is_ok());
        }
    }

    #[test]
    fn a_failed_engine_read_during_apply_is_not_deterministic() {
        let engine = Arc::new(MemEngine::new());
        engine.fail_reads(Cf::Default, true);
        let r = region();
        let mut wb = WriteBatch::new();
        let mut ctx = ApplyCtx::new(&engine, 1, &mut wb);
        // An INSERT looks for the key: the read fails.
        let Err(err) = exec_write(
            &r,
            r.epoch.as_ref(),
            put(Conflict::FailIfExists as i32),
            &mut ctx,
        ) else {
            panic!("an INSERT applied without reading")
        };
        assert!(matches!(err, Error::Engine(_)), "{err}");
        assert!(!err.is_deterministic());
        // An overwrite reads nothing.
        assert!(exec_write(&r, r.epoch.as_ref(), put(0), &mut ctx).is_ok());
    }
}
