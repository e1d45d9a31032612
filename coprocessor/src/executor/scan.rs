//! The table scan: one executor for both storage layouts.
//!
//! A region's key range holds row-layout KVs (a row table's rows, or a
//! column table's *delta* of fresh writes) and packs (a column table's
//! column blocks, see [`crate::codec::pack`]); the key tells which is which.
//! The scan reads both in key order and hands the executors above it plain
//! Arrow batches of the requested columns, so nothing above knows the
//! layout:
//!
//! * a row is decoded straight into Arrow builders, only the requested
//!   columns, from the borrowed value ([`RowDecoder`]);
//! * a pack is first checked against the [`ZoneFilter`] (the conjuncts of
//!   the query's filter that bound a column by constants): a pack whose
//!   min/max cannot match is skipped without decoding anything
//!   (`blocks_skipped`). Otherwise only the requested columns are decoded;
//! * with no columns requested (`COUNT(*)`) a row-layout scan reads keys
//!   only, and a pack contributes its row count from its header: no value
//!   is decoded either way.
//!
//! [`KvScanner`] is the key-range walk shared with the fused aggregation
//! (`fused/`): ranges in order, counters, the resume point for a response
//! cut short by its byte limit, and the one loop step that tells rows from
//! packs by their key ([`KvScanner::next_data`]).

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, RecordBatchOptions};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use super::kernels::{
    all_rows, compare_range, indices, narrow_bloom, narrow_range, narrow_set, IntSet,
};
use super::{BatchExecutor, BatchResult, Chunk};
use crate::codec::key::{row_keys_end, KeyKind, RECORD_KEY_LEN, ROWID_COLUMN_ID};
use crate::codec::mvcc::{
    blocks, decode_lock, split_version_value, Seen, Visibility, VERSION_KEY_LEN,
};
use crate::codec::pack::{decode_columns, ColumnView, PackView};
use crate::codec::row::RowDecoder;
use crate::expr::{Bloom, CmpOp, Expr, LogicOp, ScalarValue};
use crate::storage::is_lock_key;
use crate::storage::{KeyRange, Storage};
use crate::{internal, Error, Result};
use quarry_proto::kv::LockInfo;

/// One pair of a table's key range, by what its key says it is.
pub enum TableData<'a> {
    /// A row-layout value: a row table's row, or a column table's delta row.
    Row(&'a [u8]),
    /// A column-layout pack, and when some of its rows are hidden from
    /// the snapshot (a newer version updated or deleted them) the bitmap
    /// of the rows it sees (bit i of word i / 64 for row i).
    Pack(PackView<'a>, Option<&'a [u64]>),
}

/// Walks a list of key ranges through a [`Storage`], remembering where it
/// is so that a response cut short can name the ranges left.
pub struct KvScanner<S: Storage> {
    storage: S,
    key_only: bool,
    /// The snapshot: what of each row's versions the scan returns.
    read_ts: u64,
    visibility: Visibility,
    ranges: Vec<KeyRange>,
    /// Index of the range being scanned; `ranges.len()` when done.
    current: usize,
    started: bool,
    /// The last key returned by the scan of `ranges[current]` (valid when
    /// `has_last_key`).
    last_key: Vec<u8>,
    has_last_key: bool,
    scanned_keys: u64,
    scanned_bytes: u64,
    /// The rows of the last pack returned that the snapshot sees.
    pack_live: Vec<u64>,
    /// The first handle of the last pack mark met: the pack that follows
    /// it may have rows the snapshot does not see.
    marked: Option<i64>,
    /// The row of the reader's own lock last returned ([`Seen::Own`]).
    own_row: Vec<u8>,
}

impl<S: Storage> KvScanner<S> {
    pub fn new(storage: S, ranges: Vec<KeyRange>, read_ts: u64, key_only: bool) -> Self {
        KvScanner {
            storage,
            key_only,
            read_ts,
            visibility: Visibility::default(),
            ranges,
            current: 0,
            started: false,
            last_key: Vec::new(),
            has_last_key: false,
            scanned_keys: 0,
            scanned_bytes: 0,
            pack_live: Vec::new(),
            marked: None,
            own_row: Vec::new(),
        }
    }

    /// The handle of the row [`KvScanner::next_data`] returned last.
    pub fn current_handle(&self) -> Result<i64> {
        let (k, _) = self
            .storage
            .current()
            .ok_or_else(|| internal!("storage lost its position"))?;
        match crate::codec::key::classify_key(k) {
            KeyKind::Row(h) | KeyKind::Lock(h) | KeyKind::Version { handle: h, .. } => Ok(h),
            _ => Err(internal!("the scan is not at a row")),
        }
    }

    /// Adds the keys and bytes read so far to `summary`.
    pub fn collect_summary(&self, summary: &mut ExecSummary) {
        summary.scanned_keys += self.scanned_keys;
        summary.scanned_bytes += self.scanned_bytes;
    }

    /// True once every range has been read.
    pub fn is_drained(&self) -> bool {
        self.current >= self.ranges.len()
    }

    /// The next row or pack the snapshot sees, in key order across all
    /// ranges, or None at the end; borrowed until the next call. The key
    /// tells which it is ([`crate::codec::key::classify_key`]) and whether the snapshot sees
    /// it ([`Visibility`]: versions newer than `read_ts`, older versions
    /// of a row already seen, deletes and rollbacks are passed over). A
    /// lock that may commit below the snapshot stops the scan with
    /// [`crate::Error::Locked`]; a key that is not table data is an error,
    /// and so is a pack in a key-only scan (only a row-layout table may be
    /// read without its values).
    pub fn next_data(&mut self) -> Result<Option<TableData<'_>>> {
        let read_ts = self.read_ts;
        let seen = loop {
            if !self.advance()? {
                return Ok(None);
            }
            let (k, v) = self
                .storage
                .current()
                .ok_or_else(|| internal!("storage lost its position"))?;
            match self.visibility.judge(k, v, read_ts)? {
                Seen::Skip => continue,
                Seen::PackMark(first) => {
                    self.marked = Some(first);
                    continue;
                }
                Seen::Locked(lock) => return Err(Error::Locked(lock)),
                Seen::Own(row) => {
                    self.own_row = row;
                    break Seen::Own(Vec::new());
                }
                seen => break seen,
            }
        };
        let (k, v) = self
            .storage
            .current()
            .ok_or_else(|| internal!("storage lost its position"))?;
        Ok(Some(match seen {
            Seen::Pack if self.key_only => {
                return Err(internal!(
                    "a key-only scan met a pack: the table is not row-layout"
                ))
            }
            Seen::Pack => {
                let pack = PackView::parse(v)?;
                // Only a marked pack can have hidden rows.
                let hidden = if self.marked.take() == Some(pack.first_handle()) {
                    hidden_pack_rows(&self.storage, k, &pack, read_ts)?
                } else {
                    Default::default()
                };
                if hidden.is_empty() {
                    TableData::Pack(pack, None)
                } else {
                    self.pack_live = all_rows(pack.rows());
                    let handles = pack.handles()?;
                    for i in 0..pack.rows() {
                        if hidden.contains(&handles.get(i)) {
                            self.pack_live[i / 64] &= !(1u64 << (i % 64));
                        }
                    }
                    TableData::Pack(pack, Some(&self.pack_live))
                }
            }
            Seen::Own(_) if self.key_only => TableData::Row(&[]),
            Seen::Own(_) => TableData::Row(&self.own_row),
            _ if k.len() == VERSION_KEY_LEN && !self.key_only => {
                TableData::Row(split_version_value(v)?.1)
            }
            _ => TableData::Row(v),
        }))
    }

    /// Moves to the next pair in key order across all ranges (then
    /// `storage.current()`); false at the end.
    fn advance(&mut self) -> Result<bool> {
        while self.current < self.ranges.len() {
            if !self.started {
                self.storage
                    .begin_scan(&self.ranges[self.current], self.key_only)?;
                self.started = true;
                self.has_last_key = false;
            }
            // Two-step to satisfy the borrow checker: probe, then re-borrow.
            if self.storage.scan_next()?.is_none() {
                self.current += 1;
                self.started = false;
                continue;
            }
            break;
        }
        if self.current >= self.ranges.len() {
            return Ok(false);
        }
        let (k, v) = self
            .storage
            .current()
            .ok_or_else(|| crate::internal!("storage lost its position"))?;
        self.scanned_keys += 1;
        self.scanned_bytes += (k.len() + v.len()) as u64;
        self.last_key.clear();
        self.last_key.extend_from_slice(k);
        self.has_last_key = true;
        Ok(true)
    }

    /// The key ranges not read yet. Each page of a cut response is read
    /// from a new snapshot at the same `read_ts`, so the cut must not let
    /// the next page see a row this one returned in another form:
    ///
    /// * after a row's visible version, the next page starts at the next
    ///   row, past its older versions;
    /// * after a bare row, likewise past the row's other keys (a commit
    ///   over it rewrites it as a version, which the next page would
    ///   return again); but first its lock, in this snapshot, is checked:
    ///   one of a transaction that may commit at or below `read_ts` stops
    ///   the page ([`crate::Error::Locked`]) as it would have had the
    ///   page gone on;
    /// * after a pack, just past its key: its handles' versions follow
    ///   (the locks over its rows were checked with them);
    /// * after the reader's own row (its transaction's lock), on over the
    ///   pack that may start at that handle, then past the row's versions.
    pub fn remaining_ranges(&self) -> Result<Vec<KeyRange>> {
        let mut out = Vec::new();
        if let Some(r) = self.ranges.get(self.current) {
            let last = self.started && self.has_last_key;
            if last && is_lock_key(&self.last_key) {
                // The reader's own row (`Seen::Own`): the pack that may
                // start at this handle (mark, then pack) sorts after the
                // lock and is still to come, the handle's older versions
                // must not come again.
                let row = &self.last_key[..RECORD_KEY_LEN];
                let (table, handle) = crate::codec::key::decode_record_key(row)?;
                let mut after = self.last_key.clone();
                after.push(0);
                let mut pack_end = crate::codec::key::pack_key(table, handle);
                pack_end.push(0);
                let rest = row_keys_end(row);
                let clip = |k: Vec<u8>| {
                    if r.end.is_empty() || k < r.end {
                        k
                    } else {
                        r.end.clone()
                    }
                };
                out.push(KeyRange::new(after, clip(pack_end)));
                if r.end.is_empty() || rest < r.end {
                    out.push(KeyRange::new(rest, r.end.clone()));
                }
                out.extend(self.ranges[self.current + 1..].iter().cloned());
                return Ok(out);
            }
            let start = if last && self.last_key.len() == VERSION_KEY_LEN {
                row_keys_end(&self.last_key[..RECORD_KEY_LEN])
            } else if last && self.last_key.len() == RECORD_KEY_LEN {
                let end = row_keys_end(&self.last_key);
                let mut after = self.last_key.clone();
                after.push(0);
                if let Some(lock) = self.blocking_lock(&KeyRange::new(after, end.clone()))? {
                    return Err(Error::Locked(Box::new(lock)));
                }
                end
            } else if last {
                let mut s = self.last_key.clone();
                s.push(0);
                s
            } else {
                r.start.clone()
            };
            out.push(KeyRange::new(start, r.end.clone()));
            out.extend(self.ranges[self.current + 1..].iter().cloned());
        }
        Ok(out)
    }

    /// The first lock in `range` (of this snapshot) of a transaction that
    /// may commit at or below `read_ts`.
    fn blocking_lock(&self, range: &KeyRange) -> Result<Option<LockInfo>> {
        let mut found = None;
        let mut bad = None;
        self.storage.peek(range, &mut |k, v| {
            if is_lock_key(k) {
                match decode_lock(v) {
                    Ok(l) if blocks(&l, self.read_ts) => {
                        found = Some(l);
                        return false;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        bad = Some(e);
                        return false;
                    }
                }
            }
            true
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }
}

/// The handles of the marked `pack` (at `pack_key`) whose row the
/// snapshot at `read_ts` does not see (or a lock it must wait for): a version committed at or before
/// `read_ts` replaced or deleted it. A pack row is older than every
/// snapshot, so any data version of its handle is newer; a version's key
/// sorts after the pack's key and before the next handle's row, so one
/// look past the pack, with a second cursor, finds them all.
fn hidden_pack_rows<S: Storage>(
    storage: &S,
    pack_key: &[u8],
    pack: &PackView<'_>,
    read_ts: u64,
) -> Result<std::collections::HashSet<i64>> {
    use crate::codec::key::{classify_key, decode_i64, record_key, KeyKind};
    let mut hidden = std::collections::HashSet::new();
    let table = decode_i64(&pack_key[1..9])?;
    // From the first handle's own keys: its lock sorts before the pack.
    let start = record_key(table, pack.first_handle());
    let end = row_keys_end(&record_key(table, pack.last_handle()));
    let mut locked = None;
    storage.peek(&KeyRange::new(start, end), &mut |k, v| {
        match classify_key(k) {
            KeyKind::Version {
                handle,
                commit_ts,
                kind,
            } if commit_ts <= read_ts && kind.is_data() => {
                hidden.insert(handle);
            }
            // A lock over a packed row stops the read now, before the
            // pack's row is returned: resumed later (a cut response), the
            // scan would not meet it before the row's new version.
            KeyKind::Lock(handle) => match decode_lock(v) {
                // The reader's own write replaces or deletes the row.
                Ok(l) if l.start_ts == read_ts => {
                    if l.op() != quarry_proto::kv::Op::Lock {
                        hidden.insert(handle);
                    }
                }
                Ok(l) if blocks(&l, read_ts) => {
                    locked = Some(Ok(l));
                    return false;
                }
                Ok(_) => {}
                Err(e) => {
                    locked = Some(Err(e));
                    return false;
                }
            },
            _ => {}
        }
        true
    })?;
    if let Some(l) = locked {
        return Err(Error::Locked(Box::new(l?)));
    }
    Ok(hidden)
}

/// Constant bounds on scan columns, from a filter's conjuncts: a pack whose
/// zone map falls outside any of them holds no matching row. A join's
/// Bloom filter on a BIGINT column also picks rows before decoding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneFilter {
    /// (column id, lowest, highest) allowed, inclusive, on the stored
    /// integer (days for DATE, the unscaled value for DECIMAL).
    bounds: Vec<(i64, i64, i64)>,
    /// (column id, the build keys a BIGINT column's value may be one of).
    blooms: Vec<(i64, Bloom)>,
    /// (column id, the stored integers an IN list allows): checked on the
    /// stored bytes like the bounds, so that a join's few keys (TPC-H
    /// Q17's and Q19's part keys) decode only the rows they keep.
    sets: Vec<(i64, IntSet)>,
}

/// A bound no value is inside.
const EMPTY: (i64, i64) = (1, 0);

/// A constant as the stored integer of a column of type `dt`, if the types
/// match exactly (the zone map's frame: no cast around the column).
fn as_stored_int(v: &ScalarValue, dt: &DataType) -> Option<i128> {
    match (v, dt) {
        (ScalarValue::Int64(x), DataType::Int64) => Some(*x as i128),
        (ScalarValue::Date(x), DataType::Date32) => Some(*x as i128),
        (ScalarValue::Decimal(x, _, s), DataType::Decimal128(p, ts)) if s == ts && *p <= 18 => {
            Some(*x)
        }
        _ => None,
    }
}

impl ZoneFilter {
    /// Collects bounds from `conditions` (ANDed) over scan `columns`
    /// (column id, type). Conditions of other shapes are ignored: the
    /// filter only ever skips packs, the conditions still run on the rest.
    pub fn from_conditions(conditions: &[Expr], columns: &[(i64, DataType)]) -> Self {
        let mut f = ZoneFilter::default();
        for c in conditions {
            f.add(c, columns);
        }
        f
    }

    fn add(&mut self, e: &Expr, columns: &[(i64, DataType)]) {
        match e {
            Expr::Logic {
                op: LogicOp::And,
                args,
            } => {
                for a in args {
                    self.add(a, columns);
                }
            }
            Expr::Compare { op, left, right } => {
                let (op, col, lit) = match (left.as_ref(), right.as_ref()) {
                    (Expr::Column { index, .. }, Expr::Literal(v)) => (*op, *index, v),
                    (Expr::Literal(v), Expr::Column { index, .. }) => (op.flip(), *index, v),
                    _ => return,
                };
                let Some((id, dt)) = columns.get(col) else {
                    return;
                };
                let Some(v) = as_stored_int(lit, dt) else {
                    return;
                };
                if op == CmpOp::Ne {
                    return;
                }
                let (lo, hi) = compare_range(op, v, 1).unwrap_or(EMPTY);
                self.bounds.push((*id, lo, hi));
            }
            Expr::InList {
                expr,
                list,
                negated: false,
                set,
            } => {
                let Expr::Column { index, .. } = expr.as_ref() else {
                    return;
                };
                let Some((id, dt)) = columns.get(*index) else {
                    return;
                };
                // A join's keys on a BIGINT column: the list's own set,
                // shared with the rest of the plan (`expr::IntSet`).
                if let (Some(set), DataType::Int64) = (set, dt) {
                    let members = set.members(list);
                    let (lo, hi) = members.bounds().unwrap_or(EMPTY);
                    self.bounds.push((*id, lo, hi));
                    if lo < hi {
                        self.sets.push((*id, members.clone()));
                    }
                    return;
                }
                let vals: Option<Vec<i128>> = list
                    .iter()
                    .filter(|v| !v.is_null())
                    .map(|v| as_stored_int(v, dt))
                    .collect();
                let Some(vals) = vals else {
                    return;
                };
                // The smallest range holding every value that can be equal.
                let eq: Vec<i64> = vals
                    .iter()
                    .filter_map(|v| compare_range(CmpOp::Eq, *v, 1))
                    .map(|(v, _)| v)
                    .collect();
                let (lo, hi) = match (eq.iter().min(), eq.iter().max()) {
                    (Some(lo), Some(hi)) => (*lo, *hi),
                    _ => EMPTY,
                };
                self.bounds.push((*id, lo, hi));
                if eq.len() > 1 {
                    self.sets.push((*id, IntSet::new(eq)));
                }
            }
            Expr::InBloom { expr, filter } => {
                if let Expr::Column { index, .. } = expr.as_ref() {
                    if let Some((id, DataType::Int64)) = columns.get(*index) {
                        self.blooms.push((*id, filter.clone()));
                    }
                }
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty() && self.blooms.is_empty() && self.sets.is_empty()
    }

    /// True if some row of `pack` may pass (false: skip the pack).
    pub fn may_match(&self, pack: &PackView<'_>) -> Result<bool> {
        for (id, lo, hi) in &self.bounds {
            match pack.column(*id)? {
                // A comparison with NULL is never true.
                ColumnView::Null => return Ok(false),
                ColumnView::Int(v) if v.max < *lo || v.min > *hi => return Ok(false),
                _ => {}
            }
        }
        for (id, set) in &self.sets {
            if let ColumnView::Int(v) = pack.column(*id)? {
                if !set.any_in(v.min, v.max) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The rows of `pack` inside every bound whose column is stored as
    /// integers (others are left to the filter above the scan), as a
    /// bitmap; checked on the stored bytes, before anything is decoded.
    pub fn rows(&self, pack: &PackView<'_>) -> Result<Vec<u64>> {
        let n = pack.rows();
        let mut bits = all_rows(n);
        for (id, lo, hi) in &self.bounds {
            match pack.column(*id)? {
                ColumnView::Null => bits.fill(0),
                ColumnView::Int(v) if !v.has_nulls() => narrow_range(&v, n, &mut bits, *lo, *hi),
                _ => {}
            }
        }
        for (id, set) in &self.sets {
            if let ColumnView::Int(v) = pack.column(*id)? {
                if !v.has_nulls() {
                    narrow_set(&v, n, &mut bits, set);
                }
            }
        }
        for (id, bloom) in &self.blooms {
            if let ColumnView::Int(v) = pack.column(*id)? {
                if !v.has_nulls() {
                    narrow_bloom(&v, n, &mut bits, bloom);
                }
            }
        }
        Ok(bits)
    }
}

pub struct TableScanExecutor<S: Storage> {
    scanner: KvScanner<S>,
    schema: SchemaRef,
    columns: Vec<(i64, DataType)>,
    decoder: RowDecoder,
    /// Where the rows' handles go among the output columns, when the
    /// request reads `ROWID_COLUMN_ID` (the decoder skips it: a row value
    /// does not hold its handle), and the handles of the rows decoded.
    rowid_at: Option<usize>,
    handles: Vec<i64>,
    zone: ZoneFilter,
    blocks_scanned: u64,
    blocks_skipped: u64,
    sel: Vec<u32>,
}

impl<S: Storage> TableScanExecutor<S> {
    /// `columns`: (column id, type) per output column. `key_only` may be
    /// set when no column is requested of a row-layout table (packs need
    /// their header read to count rows).
    pub fn new(
        storage: S,
        columns: &[(i64, DataType)],
        ranges: Vec<KeyRange>,
        read_ts: u64,
        key_only: bool,
        zone: ZoneFilter,
    ) -> Result<Self> {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(id, t)| Field::new(format!("col_{id}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ));
        let rowid_at = columns.iter().position(|(id, _)| *id == ROWID_COLUMN_ID);
        let stored: Vec<(i64, DataType)> = columns
            .iter()
            .filter(|(id, _)| *id != ROWID_COLUMN_ID)
            .cloned()
            .collect();
        Ok(TableScanExecutor {
            scanner: KvScanner::new(storage, ranges, read_ts, key_only && columns.is_empty()),
            schema,
            columns: columns.to_vec(),
            decoder: RowDecoder::new(&stored, 1024)?,
            rowid_at,
            handles: Vec::new(),
            zone,
            blocks_scanned: 0,
            blocks_skipped: 0,
            sel: Vec::new(),
        })
    }

    /// What a row without each column (in `columns` order) reads as:
    /// [`RowDecoder::with_defaults`].
    pub fn with_defaults(mut self, defaults: Vec<Option<Vec<u8>>>) -> Result<Self> {
        if defaults.iter().all(Option::is_none) {
            return Ok(self);
        }
        let stored: Vec<Option<Vec<u8>>> = self
            .columns
            .iter()
            .zip(defaults)
            .filter(|((id, _), _)| *id != ROWID_COLUMN_ID)
            .map(|(_, d)| d)
            .collect();
        self.decoder = self.decoder.with_defaults(stored)?;
        Ok(self)
    }

    fn batch(&self, columns: Vec<arrow::array::ArrayRef>, rows: usize) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }

    /// Rows decoded into the row builders so far, as a batch.
    fn flush_rows(&mut self, parts: &mut Vec<RecordBatch>) -> Result<()> {
        let n = self.decoder.rows();
        if n > 0 {
            let mut cols = self.decoder.finish()?;
            if let Some(i) = self.rowid_at {
                let handles = Int64Array::from(std::mem::take(&mut self.handles));
                cols.insert(i, Arc::new(handles));
            }
            parts.push(self.batch(cols, n)?);
        }
        Ok(())
    }
}

impl<S: Storage> BatchExecutor for TableScanExecutor<S> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let mut parts: Vec<RecordBatch> = Vec::new();
        let mut rows = 0usize;
        // Rows counted without decoding (COUNT(*) over keys or pack headers).
        let mut counted = 0usize;
        while rows + counted < scan_rows {
            let Some(data) = self.scanner.next_data()? else {
                break;
            };
            match data {
                TableData::Row(v) => {
                    if self.columns.is_empty() {
                        counted += 1;
                    } else {
                        self.decoder.decode(v)?;
                        if self.rowid_at.is_some() {
                            self.handles.push(self.scanner.current_handle()?);
                        }
                        rows += 1;
                    }
                }
                TableData::Pack(pack, live) => {
                    if !self.zone.is_empty() && !self.zone.may_match(&pack)? {
                        self.blocks_skipped += 1;
                        continue;
                    }
                    self.blocks_scanned += 1;
                    let live_rows =
                        live.map(|l| l.iter().map(|w| w.count_ones() as usize).sum::<usize>());
                    if self.columns.is_empty() {
                        counted += live_rows.unwrap_or(pack.rows());
                        continue;
                    }
                    let mut n = pack.rows();
                    // Late materialization: decode only the rows the zone
                    // filter's bounds (and the snapshot) keep, when they
                    // are fewer.
                    let cols = if self.zone.is_empty() && live.is_none() {
                        decode_columns(&pack, &self.columns)?
                    } else {
                        let mut bits = if self.zone.is_empty() {
                            all_rows(n)
                        } else {
                            self.zone.rows(&pack)?
                        };
                        if let Some(live) = live {
                            for (b, l) in bits.iter_mut().zip(live) {
                                *b &= l;
                            }
                        }
                        let kept: usize = bits.iter().map(|w| w.count_ones() as usize).sum();
                        if kept == 0 {
                            continue;
                        }
                        if kept == n {
                            decode_columns(&pack, &self.columns)?
                        } else {
                            indices(&bits, &mut self.sel);
                            n = kept;
                            self.columns
                                .iter()
                                .map(|(id, dt)| pack.column(*id)?.to_arrow_at(dt, &self.sel))
                                .collect::<Result<Vec<_>>>()?
                        }
                    };
                    // Keep key order: rows decoded before this pack first.
                    self.flush_rows(&mut parts)?;
                    parts.push(self.batch(cols, n)?);
                    rows += n;
                }
            }
        }
        self.flush_rows(&mut parts)?;
        let batch = if self.columns.is_empty() {
            self.batch(vec![], counted)?
        } else {
            match parts.len() {
                0 => RecordBatch::new_empty(self.schema.clone()),
                1 => parts.pop().expect("one part"),
                _ => concat_batches(&self.schema, &parts)?,
            }
        };
        Ok(BatchResult {
            chunk: Chunk::new(batch),
            is_drained: self.scanner.is_drained(),
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.scanner.collect_summary(s);
        s.blocks_skipped += self.blocks_skipped;
        s.blocks_scanned += self.blocks_scanned;
    }

    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        self.scanner.remaining_ranges()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(op: CmpOp, lit: ScalarValue) -> Expr {
        Expr::Compare {
            op,
            left: Box::new(Expr::Column {
                index: 0,
                data_type: lit.data_type(),
            }),
            right: Box::new(Expr::Literal(lit)),
        }
    }

    #[test]
    fn a_cut_after_a_bare_row_checks_its_lock_and_resumes_past_its_keys() {
        use crate::codec::key::record_key;
        use crate::codec::mvcc::{encode_lock, lock_key};
        use crate::storage::MemStorage;
        let lock = |start_ts: u64| {
            encode_lock(&LockInfo {
                primary: record_key(1, 2),
                start_ts,
                op: quarry_proto::kv::Op::Put as i32,
                ..Default::default()
            })
        };
        let store = |lock_ts: Option<u64>| {
            let mut s = MemStorage::new();
            for h in 1..=3 {
                s.put(record_key(1, h), vec![1]);
            }
            if let Some(ts) = lock_ts {
                s.put(lock_key(&record_key(1, 2)), lock(ts));
            }
            s
        };
        let all = vec![KeyRange::new(record_key(1, 0), record_key(1, 100))];
        for (lock_ts, blocked) in [(None, false), (Some(50), true), (Some(150), false)] {
            let mut scan = KvScanner::new(store(lock_ts), all.clone(), 100, false);
            // The page ends on bare row 2.
            for _ in 0..2 {
                assert!(matches!(scan.next_data().unwrap(), Some(TableData::Row(_))));
            }
            match scan.remaining_ranges() {
                Err(Error::Locked(l)) => assert!(blocked && l.start_ts == 50),
                Ok(r) => {
                    assert!(!blocked, "a lock at or below the snapshot was passed over");
                    assert_eq!(r[0].start, row_keys_end(&record_key(1, 2)));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn a_cut_after_the_readers_own_row_keeps_the_pack_after_it_and_not_its_versions() {
        use crate::codec::key::{pack_key, record_key};
        use crate::codec::mvcc::{encode_lock, lock_key, version_key, version_value, WriteKind};
        use crate::storage::MemStorage;
        let mut s = MemStorage::new();
        let own = LockInfo {
            primary: record_key(1, 5),
            start_ts: 100,
            op: quarry_proto::kv::Op::Put as i32,
            value: vec![7],
            ..Default::default()
        };
        s.put(lock_key(&record_key(1, 5)), encode_lock(&own));
        s.put(
            version_key(&record_key(1, 5), 40, WriteKind::Put),
            version_value(30, &[4]),
        );
        s.put(record_key(1, 6), vec![6]);
        let all = vec![KeyRange::new(record_key(1, 0), record_key(1, 100))];
        let mut scan = KvScanner::new(s.clone(), all, 100, false);
        assert!(matches!(
            scan.next_data().unwrap(),
            Some(TableData::Row(&[7]))
        ));
        let rest = scan.remaining_ranges().unwrap();
        let mut after = lock_key(&record_key(1, 5));
        after.push(0);
        let mut pack_end = pack_key(1, 5);
        pack_end.push(0);
        assert_eq!(rest[0], KeyRange::new(after, pack_end));
        assert_eq!(rest[1].start, row_keys_end(&record_key(1, 5)));
        // The next page: row 6 only, not handle 5's older version.
        let mut next = KvScanner::new(s, rest, 100, false);
        assert!(matches!(
            next.next_data().unwrap(),
            Some(TableData::Row(&[6]))
        ));
        assert!(next.next_data().unwrap().is_none());
    }

    #[test]
    fn an_in_list_keeps_its_members_not_just_its_bounds() {
        let columns = [(7, DataType::Int64)];
        let cond = Expr::InList {
            expr: Box::new(Expr::Column {
                index: 0,
                data_type: DataType::Int64,
            }),
            list: vec![
                ScalarValue::Int64(999),
                ScalarValue::Int64(3),
                ScalarValue::Null(DataType::Int64),
                ScalarValue::Int64(500),
            ]
            .into(),
            negated: false,
            set: None,
        };
        let f = ZoneFilter::from_conditions(std::slice::from_ref(&cond), &columns);
        assert_eq!(f.bounds, vec![(7, 3, 999)]);
        let [(7, set)] = &f.sets[..] else {
            panic!("{:?}", f.sets)
        };
        let kept: Vec<i64> = (-5..1005).filter(|v| set.contains(*v)).collect();
        assert_eq!(kept, vec![3, 500, 999]);
    }

    #[test]
    fn a_join_key_list_lends_the_zone_filter_its_own_set() {
        let columns = [(7, DataType::Int64)];
        let keys: Vec<i64> = (0..20).map(|v| v * 5 + 3).collect();
        let column = Expr::Column {
            index: 0,
            data_type: DataType::Int64,
        };
        let cond = Expr::in_int_list(column, &keys, false).unwrap();
        let f = ZoneFilter::from_conditions(std::slice::from_ref(&cond), &columns);
        assert_eq!(f.bounds, vec![(7, 3, 98)]);
        let Expr::InList {
            set: Some(set),
            list,
            ..
        } = &cond
        else {
            panic!("{cond:?}")
        };
        assert_eq!(f.sets, vec![(7, set.members(list).clone())]);
        let kept: Vec<i64> = (0..100).filter(|v| f.sets[0].1.contains(*v)).collect();
        assert_eq!(kept, keys);
    }

    #[test]
    fn zone_bounds_past_bigint_are_empty_or_full_never_clamped() {
        // DECIMAL(18,0) constants just past the ends of i64.
        let above = ScalarValue::Decimal(i64::MAX as i128 + 1, 18, 0);
        let below = ScalarValue::Decimal(i64::MIN as i128 - 1, 18, 0);
        let columns = [(7, DataType::Decimal128(18, 0))];
        let full = Some((7, i64::MIN, i64::MAX));
        for (cond, want) in [
            (cmp(CmpOp::Lt, above.clone()), full),
            (cmp(CmpOp::Le, above.clone()), full),
            (cmp(CmpOp::Gt, above.clone()), Some((7, 1, 0))),
            (cmp(CmpOp::Eq, above.clone()), Some((7, 1, 0))),
            (cmp(CmpOp::Ge, below.clone()), full),
            (cmp(CmpOp::Le, below.clone()), Some((7, 1, 0))),
            (cmp(CmpOp::Ne, above.clone()), None),
            (
                Expr::InList {
                    expr: Box::new(Expr::Column {
                        index: 0,
                        data_type: DataType::Decimal128(18, 0),
                    }),
                    list: vec![above.clone(), ScalarValue::Decimal(5, 18, 0), below].into(),
                    negated: false,
                    set: None,
                },
                Some((7, 5, 5)),
            ),
        ] {
            let f = ZoneFilter::from_conditions(std::slice::from_ref(&cond), &columns);
            assert_eq!(f.bounds.first().copied(), want, "{cond:?}");
        }
        // At the ends of BIGINT itself.
        let columns = [(7, DataType::Int64)];
        for (cond, want) in [
            (cmp(CmpOp::Lt, ScalarValue::Int64(i64::MIN)), (7, 1, 0)),
            (cmp(CmpOp::Gt, ScalarValue::Int64(i64::MAX)), (7, 1, 0)),
            (
                cmp(CmpOp::Le, ScalarValue::Int64(i64::MIN)),
                (7, i64::MIN, i64::MIN),
            ),
            (
                cmp(CmpOp::Lt, ScalarValue::Int64(i64::MAX)),
                (7, i64::MIN, i64::MAX - 1),
            ),
        ] {
            let f = ZoneFilter::from_conditions(std::slice::from_ref(&cond), &columns);
            assert_eq!(f.bounds, vec![want], "{cond:?}");
        }
    }
}
