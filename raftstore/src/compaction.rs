//! Column tables: merging the row delta into packs.
//!
//! A column-layout table keeps its rows in packs (`coprocessor::codec::pack`)
//! but takes fresh writes — `INSERT`s — as ordinary row-layout KVs, the
//! *delta*, because rewriting a whole pack (up to `PACK_ROWS` rows) per
//! inserted row would cost far more than the row. Scans read packs and
//! delta side by side; this module folds the delta back into packs so
//! scans stay on the fast path.
//!
//! HOW (TiFlash's delta merge, done the raft way)
//!
//! 1. Applying a write counts, per region, the row KVs it put
//!    ([`DeltaStats`]). The store loop does this; it costs a hash-map add.
//! 2. Every couple of seconds the worker looks at regions it leads whose
//!    count passed `compact-delta-rows` and that belong to a column table,
//!    reads the region from its own engine, and plans a rewrite
//!    ([`plan_compaction`]): the delta rows (at most [`MAX_ROWS_PER_ROUND`]
//!    of the lowest handles) plus every pack whose handle range overlaps
//!    theirs, merged in handle order and cut into new packs. Packs stay
//!    sorted and never overlap.
//! 3. The rewrite is proposed like any write: new packs as puts, the
//!    replaced delta rows and packs as deletes, and all of those as
//!    `must_exist`. Apply refuses it whole if any of them is gone (another
//!    compaction, e.g. by a new leader, got there first), so every replica
//!    makes the same decision and no row is lost or doubled. Only the
//!    leader spends CPU encoding packs; followers apply the bytes.
//!
//! What folds: bare rows always, and a handle's versions once all of them
//! are at or below the GC safe point and no lock is on it (`DeltaRows`);
//! its newest version replaces its pack row (a delete removes it). A
//! handle with a lock or a newer version stays in the delta ("pinned"),
//! and a scan hides its pack row from the snapshots that see a newer
//! version (`coprocessor::executor::scan`). Keys are never rewritten in
//! place — a transaction adds locks and versions, compaction removes them
//! — so a key the planner read is the same when the rewrite applies, or
//! it is gone and `must_exist` refuses the rewrite; a version committed
//! meanwhile is newer than the pack and simply stays in the delta.
//!
//! Pack marks (`t{t}_r{first}M`, see `coprocessor::codec::mvcc`) tell
//! scans which packs have rows hidden by versions. A new pack is marked
//! when it holds a handle whose locks or versions stay in the delta; the
//! marks of replaced packs go. A transaction's prewrite marks the pack it
//! changes, so a mark of a replaced pack that changed or appeared since
//! the plan read the region, or a lock on a folded handle, refuses the
//! rewrite (`KvWrite.must_not_exist` and the hashes).
//!
//! CAVEATS: the counts live in memory; after a restart a region's old delta
//! is compacted when the region next takes writes (or at the worker's first
//! pass, which checks every led region of a column table once).

use std::collections::HashMap;

use parking_lot::Mutex;
use quarry_coprocessor::codec::key::{
    classify_key, pack_key, pack_mark_key, record_key, table_record_range, KeyKind,
};
use quarry_coprocessor::codec::mvcc::lock_key;
use quarry_coprocessor::codec::pack::{PackBuilder, PackView, PACK_ROWS};
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{Region, TableDef};
use quarry_proto::raft::KvWrite;

use crate::engine::{Cf, Engine};
use crate::{Error, Result};

/// FNV-1a over a value: stable across builds and machines, so every
/// replica decides a compaction's guard the same way.
pub fn value_hash(v: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Most delta rows one compaction takes (the rest wait for the next round):
/// two packs' rows, as many as when packs held 4096. This bounds the delta
/// side of a round only: the old packs between its lowest and highest
/// folded handle are rewritten too, which for scattered changes can be
/// most of the region's packs.
pub const MAX_ROWS_PER_ROUND: usize = 2 * PACK_ROWS;

/// Row KVs written per region since its last compaction check.
#[derive(Default)]
pub struct DeltaStats {
    rows: Mutex<HashMap<u64, u64>>,
}

impl DeltaStats {
    pub fn add(&self, counts: &HashMap<u64, u64>) {
        if counts.is_empty() {
            return;
        }
        let mut rows = self.rows.lock();
        for (region, n) in counts {
            *rows.entry(*region).or_default() += n;
        }
    }

    /// Takes the regions at or past `threshold` rows out of the counts.
    pub fn take_ready(&self, threshold: u64) -> Vec<u64> {
        let mut rows = self.rows.lock();
        let ready: Vec<u64> = rows
            .iter()
            .filter(|(_, n)| **n >= threshold)
            .map(|(r, _)| *r)
            .collect();
        for r in &ready {
            rows.remove(r);
        }
        ready
    }

    /// Puts a region back (its compaction did not happen).
    pub fn restore(&self, region: u64, n: u64) {
        *self.rows.lock().entry(region).or_default() += n;
    }
}

/// What a planned compaction does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactionSummary {
    pub delta_rows: usize,
    pub packs_replaced: usize,
    pub packs_written: usize,
}

/// The rewrite that folds `region`'s delta rows of `table` into packs, or
/// None when there is nothing to fold, and how many rows stay in the delta
/// for now (versions above `safe_point`, or locked). Reads the region
/// from `engine` (the leader's applied state).
pub fn plan_compaction<E: Engine>(
    engine: &E,
    region: &Region,
    table: &TableDef,
    safe_point: u64,
) -> Result<(Option<(KvWrite, CompactionSummary)>, usize)> {
    let (tstart, tend) = table_record_range(table.id);
    let Some(KeyRange { start, end }) =
        KeyRange::new(tstart, tend).intersect(&KeyRange::of_region(region))
    else {
        return Ok((None, 0));
    };
    // Delta rows (the lowest handles first) and every pack's range.
    let mut delta = DeltaRows::new(safe_point);
    let mut packs: Vec<(i64, i64, Vec<u8>)> = Vec::new();
    // Pack marks: first handle → (key, value hash).
    let mut marks: HashMap<i64, (Vec<u8>, u64)> = HashMap::new();
    let mut bad = None;
    engine.scan(Cf::Default, &start, &end, &mut |k, v| {
        match classify_key(k) {
            KeyKind::PackMark(first) => {
                marks.insert(first, (k.to_vec(), value_hash(v)));
            }
            KeyKind::Pack(_) => match PackView::parse(v) {
                Ok(p) => packs.push((p.first_handle(), p.last_handle(), k.to_vec())),
                Err(e) => {
                    bad = Some(e.to_string());
                    return false;
                }
            },
            KeyKind::Other | KeyKind::Index { .. } => {}
            kind => {
                if let Err(e) = delta.add(kind, k, v) {
                    bad = Some(e.to_string());
                    return false;
                }
            }
        }
        true
    })?;
    if let Some(e) = bad {
        return Err(Error::Internal(format!("reading a region to compact: {e}")));
    }
    let (delta, unfolded, pinned) = delta.finish();
    let (Some(lo), Some(hi)) = (delta.first().map(|d| d.0), delta.last().map(|d| d.0)) else {
        return Ok((None, pinned));
    };
    let overlapping: Vec<&(i64, i64, Vec<u8>)> = packs
        .iter()
        .filter(|(first, last, _)| *first <= hi && *last >= lo)
        .collect();
    let mut old_values = Vec::with_capacity(overlapping.len());
    for (_, _, k) in &overlapping {
        let v = engine
            .get(Cf::Default, k)?
            .ok_or_else(|| Error::Internal("a pack vanished while compacting".into()))?;
        old_values.push(v);
    }
    let old: Vec<PackView> = old_values
        .iter()
        .map(|v| PackView::parse(v))
        .collect::<quarry_coprocessor::Result<_>>()
        .map_err(|e| Error::Internal(e.to_string()))?;

    let columns = table
        .columns
        .iter()
        .map(|c| {
            let ft = c
                .field_type
                .as_ref()
                .ok_or_else(|| Error::Internal(format!("column {} has no type", c.name)))?;
            Ok((
                c.id,
                arrow_type(ft).map_err(|e| Error::Internal(e.to_string()))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let cop = |e: quarry_coprocessor::Error| Error::Internal(format!("building a pack: {e}"));
    let mut builder = PackBuilder::new(&columns).map_err(cop)?;
    let mut puts: Vec<KvPair> = Vec::new();
    // A new pack holding a handle whose locks or versions stay in the
    // delta is marked: those versions hide its row from later snapshots.
    let flush = |b: &mut PackBuilder, puts: &mut Vec<KvPair>| -> Result<()> {
        if let (Some(first), Some(last)) = (b.first_handle(), b.last_handle()) {
            let from = unfolded.partition_point(|h| *h < first);
            if unfolded.get(from).is_some_and(|h| *h <= last) {
                puts.push(KvPair {
                    key: pack_mark_key(table.id, first),
                    value: 0u64.to_be_bytes().to_vec(),
                });
            }
            let (first, value) = b.finish().map_err(cop)?;
            puts.push(KvPair {
                key: pack_key(table.id, first),
                value,
            });
        }
        Ok(())
    };
    // Merge by handle: old packs' rows (in order) and the delta rows. A
    // delta row and a pack row with the same handle cannot both exist
    // (INSERT checks both); if they did, the delta row is the newer.
    // A folded handle's newest row (None: deleted, or nothing but
    // rollback records) replaces its pack row.
    let mut d = 0usize;
    let push_delta = |b: &mut PackBuilder, puts: &mut Vec<KvPair>, d: &FoldedRow| -> Result<()> {
        match &d.2 {
            Fold::Row(v) => b.push_row_value(d.0, v).map_err(cop)?,
            Fold::Delete | Fold::Nothing => return Ok(()),
        }
        if b.is_full() {
            flush(b, puts)?;
        }
        Ok(())
    };
    for pack in &old {
        let handles = pack.handles().map_err(cop)?;
        for i in 0..pack.rows() {
            let h = handles.get(i);
            while d < delta.len() && delta[d].0 < h {
                push_delta(&mut builder, &mut puts, &delta[d])?;
                d += 1;
            }
            if d < delta.len() && delta[d].0 == h {
                let keep_pack_row = matches!(delta[d].2, Fold::Nothing);
                push_delta(&mut builder, &mut puts, &delta[d])?;
                d += 1;
                if !keep_pack_row {
                    continue;
                }
            }
            builder.push_pack_row(pack, i).map_err(cop)?;
            if builder.is_full() {
                flush(&mut builder, &mut puts)?;
            }
        }
    }
    while d < delta.len() {
        push_delta(&mut builder, &mut puts, &delta[d])?;
        d += 1;
    }
    flush(&mut builder, &mut puts)?;

    let new_keys: std::collections::HashSet<&Vec<u8>> = puts.iter().map(|p| &p.key).collect();
    // The marks of the packs replaced go (new ones were made above); a
    // mark that changed or appeared since this read means a transaction
    // started changing rows of those packs: the rewrite is refused.
    let (mut old_marks, mut must_not_exist) = (Vec::new(), Vec::new());
    for (first, _, _) in &overlapping {
        match marks.get(first) {
            Some((k, h)) => old_marks.push((k.clone(), *h)),
            None => must_not_exist.push(pack_mark_key(table.id, *first)),
        }
    }
    // So does a lock on a folded handle: its row moves into a pack that
    // nobody would mark.
    must_not_exist.extend(delta.iter().map(|d| lock_key(&record_key(table.id, d.0))));
    let replaced: Vec<Vec<u8>> = delta
        .iter()
        .flat_map(|d| d.1.iter().map(|(k, _)| k.clone()))
        .chain(overlapping.iter().map(|(_, _, k)| k.clone()))
        .chain(old_marks.iter().map(|(k, _)| k.clone()))
        .collect();
    let hashes: Vec<u64> = delta
        .iter()
        .flat_map(|d| d.1.iter().map(|(_, h)| *h))
        .chain(old_values.iter().map(|v| value_hash(v)))
        .chain(old_marks.iter().map(|(_, h)| *h))
        .collect();
    let deletes: Vec<Vec<u8>> = replaced
        .iter()
        .filter(|k| !new_keys.contains(k))
        .cloned()
        .collect();
    let summary = CompactionSummary {
        delta_rows: delta.len(),
        packs_replaced: overlapping.len(),
        packs_written: puts
            .iter()
            .filter(|p| matches!(classify_key(&p.key), KeyKind::Pack(_)))
            .count(),
    };
    debug_assert!(puts
        .iter()
        .all(|p| p.key.as_slice() >= start.as_slice() && p.key.as_slice() < end.as_slice()));
    Ok((
        Some((
            KvWrite {
                puts,
                deletes,
                delete_ranges: vec![],
                conflict: 0,
                must_exist: replaced,
                must_exist_hash: hashes,
                must_not_exist,
                folded_to: safe_point,
            },
            summary,
        )),
        pinned,
    ))
}

/// What a folded handle leaves in the packs.
#[derive(Debug)]
enum Fold {
    /// This row (a bare row, or the newest version's).
    Row(Vec<u8>),
    /// No row: its newest version deletes it.
    Delete,
    /// Nothing new (only rollback or lock records): the pack row stays.
    Nothing,
}

/// A handle whose delta keys a compaction folds: (handle, the keys it
/// removes with their value hashes, what it leaves).
type FoldedRow = (i64, Vec<(Vec<u8>, u64)>, Fold);

/// The delta keys of a region in key order, grouped by handle into what a
/// compaction may fold: bare rows always, and a row's versions when all
/// of them are at or below the GC safe point and no lock is on it (a
/// snapshot at or above the safe point then sees exactly the newest one,
/// which is what a pack row is: older than every snapshot). At most
/// [`MAX_ROWS_PER_ROUND`] handles per round.
struct DeltaRows {
    safe_point: u64,
    /// Handles left in the delta for now.
    pinned: usize,
    /// Handles whose locks or versions stay in the delta after this round
    /// (pinned, or past this round's limit), ascending.
    unfolded: Vec<i64>,
    done: Vec<FoldedRow>,
    /// The handle being read.
    cur: Option<Handle>,
}

/// A handle being read by [`DeltaRows`]: its keys (with value hashes), its
/// newest data version's fold, and whether anything pins it in the delta.
struct Handle {
    handle: i64,
    keys: Vec<(Vec<u8>, u64)>,
    fold: Option<Fold>,
    pinned: bool,
}

impl DeltaRows {
    fn new(safe_point: u64) -> Self {
        DeltaRows {
            safe_point,
            pinned: 0,
            unfolded: Vec::new(),
            done: Vec::new(),
            cur: None,
        }
    }

    fn add(&mut self, kind: KeyKind, k: &[u8], v: &[u8]) -> quarry_coprocessor::Result<()> {
        use quarry_coprocessor::codec::mvcc::{split_version_value, WriteKind};
        let handle = match kind {
            KeyKind::Row(h) | KeyKind::Lock(h) => h,
            KeyKind::Version { handle, .. } => handle,
            KeyKind::Pack(_) | KeyKind::PackMark(_) | KeyKind::Other | KeyKind::Index { .. } => {
                return Ok(())
            }
        };
        if self.cur.as_ref().is_none_or(|c| c.handle != handle) {
            self.close();
            if self.done.len() >= MAX_ROWS_PER_ROUND {
                if !matches!(kind, KeyKind::Row(_)) && self.unfolded.last() != Some(&handle) {
                    self.unfolded.push(handle);
                }
                return Ok(());
            }
            self.cur = Some(Handle {
                handle,
                keys: Vec::new(),
                fold: None,
                pinned: false,
            });
        }
        let cur = self.cur.as_mut().expect("just set");
        match kind {
            KeyKind::Row(_) => {
                cur.keys.push((k.to_vec(), value_hash(v)));
                cur.fold = Some(Fold::Row(v.to_vec()));
            }
            KeyKind::Lock(_) => cur.pinned = true,
            KeyKind::Version {
                commit_ts, kind, ..
            } => {
                if commit_ts > self.safe_point {
                    cur.pinned = true;
                }
                cur.keys.push((k.to_vec(), value_hash(v)));
                // Newest first: the first data version decides.
                if cur.fold.is_none() && kind.is_data() {
                    cur.fold = Some(match kind {
                        WriteKind::Put => Fold::Row(split_version_value(v)?.1.to_vec()),
                        _ => Fold::Delete,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn close(&mut self) {
        if let Some(Handle {
            handle: h,
            keys,
            fold,
            pinned,
        }) = self.cur.take()
        {
            if pinned {
                self.pinned += 1;
                self.unfolded.push(h);
            } else if !keys.is_empty() {
                self.done.push((h, keys, fold.unwrap_or(Fold::Nothing)));
            }
        }
    }

    /// The handles folded this round, those whose locks or versions
    /// stay, and how many of those are pinned (counted once the last
    /// handle is closed: a lone pinned handle must still count).
    fn finish(mut self) -> (Vec<FoldedRow>, Vec<i64>, usize) {
        self.close();
        (self.done, self.unfolded, self.pinned)
    }
}

/// Snaps a split key so that no pack straddles the split: a pack key
/// becomes its first row's key; a row key inside the handle range of the
/// pack before it is not a valid split point (None).
pub fn split_point(key: &[u8], last_pack: Option<(i64, i64)>) -> Option<Vec<u8>> {
    match classify_key(key) {
        KeyKind::Pack(first) => {
            let table = quarry_coprocessor::codec::key::decode_i64(&key[1..9]).ok()?;
            Some(record_key(table, first))
        }
        // A pack's mark stays with it.
        KeyKind::PackMark(first) => {
            let table = quarry_coprocessor::codec::key::decode_i64(&key[1..9]).ok()?;
            Some(record_key(table, first))
        }
        // A row's lock and versions stay with it: split at its row key.
        KeyKind::Row(h) | KeyKind::Lock(h) | KeyKind::Version { handle: h, .. } => {
            match last_pack {
                Some((first, last)) if first <= h && h <= last => None,
                _ => {
                    let table = quarry_coprocessor::codec::key::decode_i64(&key[1..9]).ok()?;
                    Some(record_key(table, h))
                }
            }
        }
        // An index entry's lock and versions stay with it.
        KeyKind::Index { base_len, .. } => Some(key[..base_len].to_vec()),
        KeyKind::Other => Some(key.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::DataType;
    use quarry_coprocessor::codec::row::{Datum, RowEncoder};
    use quarry_coprocessor::types::field_type;
    use quarry_proto::meta::{ColumnDef, Layout};

    use super::*;
    use crate::engine::memory::MemEngine;
    use crate::engine::WriteBatch;

    const T: i64 = 5;

    fn table() -> TableDef {
        TableDef {
            id: T,
            name: "t".into(),
            columns: vec![
                ColumnDef {
                    id: 1,
                    name: "a".into(),
                    field_type: Some(field_type(&DataType::Int64, true).unwrap()),
                    ..Default::default()
                },
                ColumnDef {
                    id: 2,
                    name: "s".into(),
                    field_type: Some(field_type(&DataType::Utf8, true).unwrap()),
                    ..Default::default()
                },
            ],
            handle_column_id: 0,
            layout: Layout::Column as i32,
            ..Default::default()
        }
    }

    fn row(h: i64) -> Vec<u8> {
        let mut v = Vec::new();
        let s = format!("s{h}");
        RowEncoder::new()
            .encode(
                &[(1, Datum::Int(h * 10)), (2, Datum::Bytes(s.as_bytes()))],
                &mut v,
            )
            .unwrap();
        v
    }

    fn region() -> Region {
        let (s, e) = table_record_range(T);
        Region {
            id: 7,
            start_key: s,
            end_key: e,
            ..Default::default()
        }
    }

    fn apply(engine: &MemEngine, w: &KvWrite) {
        let mut wb = WriteBatch::new();
        for p in &w.puts {
            wb.put(Cf::Default, p.key.clone(), p.value.clone());
        }
        for k in &w.deletes {
            wb.delete(Cf::Default, k.clone());
        }
        engine.write(&wb, false).unwrap();
    }

    /// Writes `row(h)` at each handle, as delta rows.
    fn put_rows(engine: &MemEngine, handles: impl IntoIterator<Item = i64>) {
        let mut wb = WriteBatch::new();
        for h in handles {
            wb.put(Cf::Default, record_key(T, h), row(h));
        }
        engine.write(&wb, false).unwrap();
    }

    /// The version a committed UPDATE of handle `h` at `ts` left: `row(v)`.
    fn put_version(engine: &MemEngine, h: i64, ts: u64, v: i64) {
        use quarry_coprocessor::codec::mvcc::{version_key, version_value, WriteKind};
        let mut wb = WriteBatch::new();
        wb.put(
            Cf::Default,
            version_key(&record_key(T, h), ts, WriteKind::Put),
            version_value(ts - 1, &row(v)),
        );
        engine.write(&wb, false).unwrap();
    }

    /// The compaction the region's delta calls for (there must be one).
    fn plan(engine: &MemEngine) -> (KvWrite, CompactionSummary) {
        plan_compaction(engine, &region(), &table(), 0)
            .unwrap()
            .0
            .unwrap()
    }

    /// Every (handle, a) the region holds, packs and delta together.
    fn contents(engine: &MemEngine) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let r = region();
        engine
            .scan(Cf::Default, &r.start_key, &r.end_key, &mut |k, v| {
                match classify_key(k) {
                    KeyKind::Row(h) => {
                        let view = quarry_coprocessor::codec::row::RowView::new(v).unwrap();
                        assert!(matches!(
                            view.get(1).unwrap(),
                            quarry_coprocessor::codec::row::Lookup::Value(_)
                        ));
                        out.push((h, h * 10));
                    }
                    KeyKind::Pack(_) => {
                        let p = PackView::parse(v).unwrap();
                        let hs = p.handles().unwrap();
                        let a = p.column(1).unwrap();
                        for i in 0..p.rows() {
                            let quarry_coprocessor::codec::row::Datum::Int(x) = a.datum(i).unwrap()
                            else {
                                panic!("not an int")
                            };
                            out.push((hs.get(i), x));
                        }
                    }
                    other => panic!("stray key {other:?}"),
                }
                true
            })
            .unwrap();
        out.sort();
        out
    }

    #[test]
    fn delta_rows_merge_into_sorted_non_overlapping_packs() {
        let engine = Arc::new(MemEngine::new());
        // Round 1: a pack and a quarter of rows with even handles.
        let p = PACK_ROWS as i64;
        let n = p + p / 4;
        put_rows(&engine, (0..n).map(|h| h * 2));
        let (w, s) = plan(&engine);
        assert_eq!(
            (s.delta_rows, s.packs_replaced, s.packs_written),
            (n as usize, 0, 2)
        );
        apply(&engine, &w);
        // Round 2: odd handles land inside the first pack, inside the
        // second, and past the last.
        let odd = [1i64, 3, 2 * p + 1, 2 * n + 1];
        put_rows(&engine, odd);
        let (w, s) = plan(&engine);
        assert_eq!(s.delta_rows, 4);
        assert_eq!(s.packs_replaced, 2, "both packs overlap [1, {}]", 2 * n + 1);
        apply(&engine, &w);
        let got = contents(&engine);
        let mut want: Vec<(i64, i64)> = (0..n).map(|h| (h * 2, h * 20)).collect();
        want.extend(odd.map(|h| (h, h * 10)));
        want.sort();
        assert_eq!(got, want);
        assert!(plan_compaction(engine.as_ref(), &region(), &table(), 0)
            .unwrap()
            .0
            .is_none());
        // Packs are sorted and disjoint.
        let mut ranges = Vec::new();
        engine
            .scan(
                Cf::Default,
                &region().start_key,
                &region().end_key,
                &mut |_, v| {
                    let p = PackView::parse(v).unwrap();
                    ranges.push((p.first_handle(), p.last_handle()));
                    true
                },
            )
            .unwrap();
        assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "{ranges:?}");
    }

    #[test]
    fn inserts_find_rows_in_packs_past_delta_rows_and_splits_refuse_to_cut_packs() {
        use crate::apply::{ApplyCtx, Existing};
        let engine = Arc::new(MemEngine::new());
        put_rows(&engine, (0..100).map(|h| h * 2));
        let (w, _) = plan(&engine);
        apply(&engine, &w);
        // Delta rows 1 and 3 sit between the pack's key and handle 4's.
        put_rows(&engine, [1, 3]);
        let mut scratch = WriteBatch::new();
        let ctx = ApplyCtx::new(&engine, 1, &mut scratch);
        assert_eq!(
            ctx.existing(&record_key(T, 4), &row(4)).unwrap(),
            Existing::Same
        );
        assert_eq!(
            ctx.existing(&record_key(T, 4), &row(5)).unwrap(),
            Existing::Different
        );
        assert_eq!(
            ctx.existing(&record_key(T, 5), &row(5)).unwrap(),
            Existing::Absent
        );
        assert_eq!(
            ctx.existing(&record_key(T, 3), &row(3)).unwrap(),
            Existing::Same
        );
        assert_eq!(
            ctx.existing(&record_key(T, 999), &row(999)).unwrap(),
            Existing::Absent
        );
        // The pack holds handles 0..=198: a split inside it is refused.
        assert_eq!(ctx.pack_before(&record_key(T, 50)).unwrap(), Some((0, 198)));
        assert_eq!(ctx.pack_before(&record_key(T, 0)).unwrap(), None);
    }

    #[test]
    fn a_compaction_is_refused_once_what_it_read_changed() {
        use crate::apply::{exec_write, ApplyCtx};
        let engine = Arc::new(MemEngine::new());
        put_rows(&engine, 0..10);
        let (w, _) = plan(&engine);
        assert_eq!(w.must_exist.len(), w.must_exist_hash.len());
        assert_eq!(
            value_hash(b""),
            0xcbf2_9ce4_8422_2325,
            "FNV-1a offset basis"
        );
        let epoch = Some(crate::region::epoch(&region()));
        // Another writer changed row 3 since the plan read it.
        let mut wb = WriteBatch::new();
        wb.put(Cf::Default, record_key(T, 3), row(33));
        engine.write(&wb, false).unwrap();
        let mut out = WriteBatch::new();
        let mut ctx = ApplyCtx::new(&engine, 1, &mut out);
        let Err(err) = exec_write(&region(), epoch.as_ref(), w.clone(), &mut ctx) else {
            panic!("a compaction over a changed row applied")
        };
        assert!(err.to_string().contains("changed"), "{err}");
        drop(ctx);
        assert!(out.is_empty(), "a refused compaction writes nothing");
        // Unchanged, it applies.
        put_rows(&engine, [3]);
        let mut ctx = ApplyCtx::new(&engine, 1, &mut out);
        assert!(exec_write(&region(), epoch.as_ref(), w, &mut ctx).is_ok());
    }

    #[test]
    fn a_pack_stays_marked_while_versions_hide_its_rows_and_a_new_mark_refuses_a_planned_rewrite() {
        use crate::apply::{exec_write, ApplyCtx};
        let engine = Arc::new(MemEngine::new());
        put_rows(&engine, (0..100).map(|h| h * 2));
        let (w, _) = plan(&engine);
        assert!(!w.puts.iter().any(|p| p.key == pack_mark_key(T, 0)));
        apply(&engine, &w);
        // A committed UPDATE of packed handle 4 (a = 440): its version and
        // the pack's mark, as its prewrite left them.
        put_version(&engine, 4, 50 << 18, 44);
        let mut wb = WriteBatch::new();
        wb.put(
            Cf::Default,
            pack_mark_key(T, 0),
            7u64.to_be_bytes().to_vec(),
        );
        engine.write(&wb, false).unwrap();
        put_rows(&engine, [1, 3]);
        // Below the version's timestamp: it stays in the delta, so the
        // rewritten pack holding handle 4 is marked again.
        let (w, _) = plan_compaction(engine.as_ref(), &region(), &table(), 10 << 18)
            .unwrap()
            .0
            .unwrap();
        assert!(w.puts.iter().any(|p| p.key == pack_mark_key(T, 0)));
        assert!(w.must_exist.contains(&pack_mark_key(T, 0)));
        apply(&engine, &w);
        // Past it: the version folds into the pack and the mark goes.
        let (w, s) = plan_compaction(engine.as_ref(), &region(), &table(), 100 << 18)
            .unwrap()
            .0
            .unwrap();
        assert_eq!(s.delta_rows, 1);
        assert!(!w.puts.iter().any(|p| p.key == pack_mark_key(T, 0)));
        assert!(w.deletes.contains(&pack_mark_key(T, 0)));
        apply(&engine, &w);
        let got = contents(&engine);
        assert!(
            got.contains(&(4, 440)) && !got.contains(&(4, 40)),
            "{got:?}"
        );
        assert_eq!(got.len(), 102);
        // A prewrite that marks the pack after a compaction read it makes
        // that compaction's rewrite refuse to apply.
        put_rows(&engine, [5]);
        let (w, _) = plan(&engine);
        let mut wb = WriteBatch::new();
        wb.put(
            Cf::Default,
            pack_mark_key(T, 0),
            9u64.to_be_bytes().to_vec(),
        );
        engine.write(&wb, false).unwrap();
        let epoch = Some(crate::region::epoch(&region()));
        let mut out = WriteBatch::new();
        let mut ctx = ApplyCtx::new(&engine, 1, &mut out);
        let Err(err) = exec_write(&region(), epoch.as_ref(), w, &mut ctx) else {
            panic!("a compaction applied over a pack marked after it read it")
        };
        assert!(err.to_string().contains("appeared"), "{err}");
    }

    #[test]
    fn a_lone_version_above_the_safe_point_counts_as_pinned() {
        let engine = Arc::new(MemEngine::new());
        put_rows(&engine, (0..10).map(|h| h * 2));
        let (w, _) = plan(&engine);
        apply(&engine, &w);
        // One UPDATE of a packed row, newer than the safe point: nothing
        // folds yet, and the worker must come back for it.
        put_version(&engine, 4, 50 << 18, 44);
        let (planned, pinned) =
            plan_compaction(engine.as_ref(), &region(), &table(), 10 << 18).unwrap();
        assert!(planned.is_none());
        assert_eq!(pinned, 1, "the region would never be looked at again");
    }

    #[test]
    fn split_points_never_cut_a_pack() {
        let pk = pack_key(T, 100);
        assert_eq!(split_point(&pk, None), Some(record_key(T, 100)));
        assert_eq!(split_point(&record_key(T, 150), Some((100, 200))), None);
        assert_eq!(
            split_point(&record_key(T, 250), Some((100, 200))),
            Some(record_key(T, 250))
        );
    }
}
