//! The column layout's unit of storage: a *pack*.
//!
//! A column-layout table keeps its rows in packs of up to [`PACK_ROWS`]
//! rows, one key-value pair per pack (TiFlash calls this a pack, Parquet a
//! row group). Inside the value every column is stored on its own, so a
//! scan reads the few bytes of the columns it needs and never touches the
//! others, and each column carries its min/max (a zone map) so a filter can
//! skip a whole pack without decoding it.
//!
//! KEYS. A pack sits at `t{table}_r{first_handle}P`: the row key of its
//! smallest handle plus one marker byte. Packs therefore live inside the
//! table's key range, between the row keys, and everything that works on
//! key ranges — regions, splits, raft snapshots, `DROP TABLE` — moves packs
//! without knowing what they are. Fresh writes still arrive as row-layout
//! KVs (the *row delta*, see `raftstore`'s compaction), and a scan reads
//! packs and delta rows side by side: the key alone says which is which
//! ([`classify_key`]). A pack's handles are sorted and packs never overlap:
//! the rows of a pack with handles `[first, last]` belong to the region that
//! holds the key `t{table}_r{first}`, so a region is only ever split at the
//! row key of a pack's first handle.
//!
//! VALUE (all integers little-endian):
//!
//! ```text
//! u8   version (1)
//! u32  rows
//! u16  columns (the handle column, id 0, is always the first)
//! columns × 40-byte directory entries:
//!      i64 column id · u8 encoding · u8 width · u8 flags · u8 pad
//!      u32 offset of the data (from the start of the value) · u32 length
//!      u32 pad · i64 min · i64 max  (integer encodings: the zone map)
//! column data, back to back:
//!      [validity bitmap, ceil(rows/8) bytes, Arrow's bit order] if FLAG_NULLS
//!      INT_FOR  rows × width bytes: value − min (frame of reference), width
//!               the fewest of 0/1/2/4/8 bytes that hold max − min
//!      F64      rows × 8 bytes
//!      I128     rows × 16 bytes (decimals wider than 18 digits)
//!      DICT     u16 entries · (entries+1) × u32 offsets · bytes · rows × u8 codes
//!      PLAIN    (rows+1) × u32 offsets · bytes
//!      NULL     nothing: every value is NULL
//! ```
//!
//! BIGINT, DATE and DECIMAL(p ≤ 18) are frame-of-reference integers (a
//! lineitem price takes 4 bytes, a quantity or a discount 1); strings with at
//! most 255 distinct values in the pack are dictionary codes (a CHAR(1) flag
//! takes 1 byte); other strings are stored plain. NULL slots of an integer
//! column hold `min`, so they never widen it.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::DataType;

use super::key::{append_record_key, decode_i64, RECORD_KEY_LEN};
use super::row::{Datum, Lookup, RowView};
use crate::types::fits_precision;
use crate::{internal, invalid_input, Result};

/// The marker byte after a pack's row key.
pub const PACK_MARKER: u8 = b'P';
/// Length of a pack key.
pub const PACK_KEY_LEN: usize = RECORD_KEY_LEN + 1;
/// Rows per pack (the loader's and the compaction's target).
pub const PACK_ROWS: usize = 4096;
/// The column id of the handles inside a pack.
pub const HANDLE_COLUMN_ID: i64 = 0;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 4 + 2;
const ENTRY_LEN: usize = 40;

const ENC_NULL: u8 = 0;
const ENC_INT_FOR: u8 = 1;
const ENC_F64: u8 = 2;
const ENC_I128: u8 = 3;
const ENC_DICT: u8 = 4;
const ENC_PLAIN: u8 = 5;

const FLAG_NULLS: u8 = 1;

/// Most distinct values a string column may have in a pack to be
/// dictionary-encoded.
const MAX_DICT: usize = 255;

/// What a data key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A row-layout KV (a row table's row, or a column table's delta row).
    Row(i64),
    /// A pack starting at this handle.
    Pack(i64),
    /// Anything else (not table data).
    Other,
}

/// Tells row keys from pack keys without looking at values.
#[inline]
pub fn classify_key(key: &[u8]) -> KeyKind {
    match key.len() {
        RECORD_KEY_LEN => match decode_i64(&key[11..19]) {
            Ok(h) => KeyKind::Row(h),
            Err(_) => KeyKind::Other,
        },
        PACK_KEY_LEN if key[RECORD_KEY_LEN] == PACK_MARKER => match decode_i64(&key[11..19]) {
            Ok(h) => KeyKind::Pack(h),
            Err(_) => KeyKind::Other,
        },
        _ => KeyKind::Other,
    }
}

/// `t{table_id}_r{first_handle}P`.
pub fn pack_key(table_id: i64, first_handle: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(PACK_KEY_LEN);
    append_record_key(&mut k, table_id, first_handle);
    k.push(PACK_MARKER);
    k
}

/// True if a column of this type is stored as a frame-of-reference integer.
pub fn is_int_type(dt: &DataType) -> bool {
    matches!(dt, DataType::Int64 | DataType::Date32)
        || matches!(dt, DataType::Decimal128(p, _) if *p <= 18)
}

// ------------------------------------------------------------------ building

enum ColumnBuffer {
    Int(Vec<i64>),
    F64(Vec<f64>),
    I128(Vec<i128>),
    Bytes { offsets: Vec<u32>, data: Vec<u8> },
}

struct ColumnBuilder {
    id: i64,
    data_type: DataType,
    values: ColumnBuffer,
    /// One per row; false = NULL.
    valid: Vec<bool>,
    nulls: usize,
}

impl ColumnBuilder {
    fn new(id: i64, data_type: DataType) -> Result<Self> {
        let values = match &data_type {
            t if is_int_type(t) => ColumnBuffer::Int(Vec::new()),
            DataType::Float64 => ColumnBuffer::F64(Vec::new()),
            DataType::Decimal128(..) => ColumnBuffer::I128(Vec::new()),
            DataType::Utf8 => ColumnBuffer::Bytes {
                offsets: vec![0],
                data: Vec::new(),
            },
            other => {
                return Err(invalid_input!(
                    "a pack cannot store a column of type {other}"
                ))
            }
        };
        Ok(ColumnBuilder {
            id,
            data_type,
            values,
            valid: Vec::new(),
            nulls: 0,
        })
    }

    fn push(&mut self, d: &Datum) -> Result<()> {
        let bad = |what: &str| {
            invalid_input!(
                "column {} ({}) cannot hold {what}",
                self.id,
                crate::types::sql_name(&self.data_type)
            )
        };
        let valid = !matches!(d, Datum::Null);
        match (&mut self.values, d) {
            (ColumnBuffer::Int(v), Datum::Null) => v.push(0),
            (ColumnBuffer::F64(v), Datum::Null) => v.push(0.0),
            (ColumnBuffer::I128(v), Datum::Null) => v.push(0),
            (ColumnBuffer::Bytes { offsets, data }, Datum::Null) => offsets.push(data.len() as u32),
            (ColumnBuffer::Int(v), Datum::Int(x)) => v.push(*x),
            (ColumnBuffer::Int(v), Datum::Date(x)) => v.push(*x as i64),
            (ColumnBuffer::Int(v), Datum::Decimal(x)) => {
                v.push(i64::try_from(*x).map_err(|_| bad("a decimal this wide"))?)
            }
            (ColumnBuffer::F64(v), Datum::Float(x)) => v.push(*x),
            (ColumnBuffer::I128(v), Datum::Decimal(x)) => v.push(*x),
            (ColumnBuffer::I128(v), Datum::Int(x)) => v.push(*x as i128),
            (ColumnBuffer::Bytes { offsets, data }, Datum::Bytes(b)) => {
                data.extend_from_slice(b);
                let end = u32::try_from(data.len())
                    .map_err(|_| invalid_input!("a pack's strings exceed 4 GiB"))?;
                offsets.push(end);
            }
            (_, other) => return Err(bad(&format!("{other:?}"))),
        }
        if !valid {
            self.nulls += 1;
        }
        self.valid.push(valid);
        Ok(())
    }

    /// Appends one value from a row-v2 value's bytes.
    fn push_encoded(&mut self, v: Lookup<'_>) -> Result<()> {
        let bytes = match v {
            Lookup::Value(b) => b,
            Lookup::Null | Lookup::Absent => return self.push(&Datum::Null),
        };
        let d = match &self.values {
            ColumnBuffer::Int(_) => match self.data_type {
                DataType::Int64 => Datum::Int(
                    i64::try_from(super::row::get_compact(bytes)?)
                        .map_err(|_| invalid_input!("corrupt row value: BIGINT out of range"))?,
                ),
                DataType::Date32 => Datum::Date(
                    i32::try_from(super::row::get_compact(bytes)?)
                        .map_err(|_| invalid_input!("corrupt row value: DATE out of range"))?,
                ),
                _ => Datum::Decimal(super::row::get_compact(bytes)?),
            },
            ColumnBuffer::I128(_) => Datum::Decimal(super::row::get_compact(bytes)?),
            ColumnBuffer::F64(_) => {
                Datum::Float(f64::from_le_bytes(bytes.try_into().map_err(|_| {
                    invalid_input!("corrupt row value: DOUBLE of {} bytes", bytes.len())
                })?))
            }
            ColumnBuffer::Bytes { .. } => Datum::Bytes(bytes),
        };
        self.push(&d)
    }

    /// Appends value `i` of a pack column.
    fn push_from_view(&mut self, v: &ColumnView<'_>, i: usize) -> Result<()> {
        let d = match v.datum(i)? {
            Datum::Int(x) if self.data_type == DataType::Date32 => Datum::Date(x as i32),
            Datum::Int(x) if matches!(self.data_type, DataType::Decimal128(..)) => {
                Datum::Decimal(x as i128)
            }
            d => d,
        };
        self.push(&d)
    }

    fn clear(&mut self) {
        match &mut self.values {
            ColumnBuffer::Int(v) => v.clear(),
            ColumnBuffer::F64(v) => v.clear(),
            ColumnBuffer::I128(v) => v.clear(),
            ColumnBuffer::Bytes { offsets, data } => {
                offsets.truncate(1);
                data.clear();
            }
        }
        self.valid.clear();
        self.nulls = 0;
    }
}

/// Directory entry being written.
struct Entry {
    id: i64,
    encoding: u8,
    width: u8,
    flags: u8,
    data: Vec<u8>,
    min: i64,
    max: i64,
}

fn validity_bitmap(valid: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; valid.len().div_ceil(8)];
    for (i, v) in valid.iter().enumerate() {
        if *v {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

fn width_for(range: u64) -> u8 {
    match range {
        0 => 0,
        1..=0xFF => 1,
        0x100..=0xFFFF => 2,
        0x1_0000..=0xFFFF_FFFF => 4,
        _ => 8,
    }
}

fn encode_ints(id: i64, vals: &[i64], valid: &[bool], nulls: usize) -> Entry {
    let (mut min, mut max) = (i64::MAX, i64::MIN);
    for (v, ok) in vals.iter().zip(valid) {
        if *ok {
            min = min.min(*v);
            max = max.max(*v);
        }
    }
    if nulls == vals.len() {
        return null_entry(id);
    }
    let width = width_for(max.wrapping_sub(min) as u64);
    let mut data = Vec::with_capacity(vals.len() * width as usize + vals.len() / 8 + 1);
    let mut flags = 0;
    if nulls > 0 {
        flags |= FLAG_NULLS;
        data.extend_from_slice(&validity_bitmap(valid));
    }
    for (v, ok) in vals.iter().zip(valid) {
        let d = if *ok { v.wrapping_sub(min) as u64 } else { 0 };
        match width {
            0 => {}
            1 => data.push(d as u8),
            2 => data.extend_from_slice(&(d as u16).to_le_bytes()),
            4 => data.extend_from_slice(&(d as u32).to_le_bytes()),
            _ => data.extend_from_slice(&d.to_le_bytes()),
        }
    }
    Entry {
        id,
        encoding: ENC_INT_FOR,
        width,
        flags,
        data,
        min,
        max,
    }
}

fn null_entry(id: i64) -> Entry {
    Entry {
        id,
        encoding: ENC_NULL,
        width: 0,
        flags: 0,
        data: Vec::new(),
        min: 0,
        max: 0,
    }
}

fn encode_column(c: &ColumnBuilder) -> Entry {
    let rows = c.valid.len();
    if c.nulls == rows {
        return null_entry(c.id);
    }
    let mut data = Vec::new();
    let mut flags = 0;
    if c.nulls > 0 {
        flags |= FLAG_NULLS;
        data.extend_from_slice(&validity_bitmap(&c.valid));
    }
    let (encoding, width) = match &c.values {
        ColumnBuffer::Int(v) => return encode_ints(c.id, v, &c.valid, c.nulls),
        ColumnBuffer::F64(v) => {
            for x in v {
                data.extend_from_slice(&x.to_le_bytes());
            }
            (ENC_F64, 8)
        }
        ColumnBuffer::I128(v) => {
            for x in v {
                data.extend_from_slice(&x.to_le_bytes());
            }
            (ENC_I128, 16)
        }
        ColumnBuffer::Bytes {
            offsets,
            data: bytes,
        } => {
            let mut dict: HashMap<&[u8], u8> = HashMap::new();
            let mut entries: Vec<&[u8]> = Vec::new();
            let mut codes = Vec::with_capacity(rows);
            let mut fits = true;
            for (i, ok) in c.valid.iter().enumerate() {
                if !ok {
                    codes.push(0);
                    continue;
                }
                let s = &bytes[offsets[i] as usize..offsets[i + 1] as usize];
                let code = match dict.get(s) {
                    Some(c) => *c,
                    None if entries.len() < MAX_DICT => {
                        let c = entries.len() as u8;
                        dict.insert(s, c);
                        entries.push(s);
                        c
                    }
                    None => {
                        fits = false;
                        break;
                    }
                };
                codes.push(code);
            }
            let dict_bytes: usize = entries.iter().map(|e| e.len()).sum();
            if fits && dict_bytes < bytes.len().max(1) {
                data.extend_from_slice(&(entries.len() as u16).to_le_bytes());
                let mut end = 0u32;
                data.extend_from_slice(&end.to_le_bytes());
                for e in &entries {
                    end += e.len() as u32;
                    data.extend_from_slice(&end.to_le_bytes());
                }
                for e in &entries {
                    data.extend_from_slice(e);
                }
                data.extend_from_slice(&codes);
                (ENC_DICT, 1)
            } else {
                for o in offsets {
                    data.extend_from_slice(&o.to_le_bytes());
                }
                data.extend_from_slice(bytes);
                (ENC_PLAIN, 4)
            }
        }
    };
    Entry {
        id: c.id,
        encoding,
        width,
        flags,
        data,
        min: 0,
        max: 0,
    }
}

/// Builds packs row by row: push rows in ascending handle order, then
/// [`PackBuilder::finish`] encodes them and starts a new pack.
pub struct PackBuilder {
    handles: Vec<i64>,
    columns: Vec<ColumnBuilder>,
}

impl PackBuilder {
    /// `columns`: (column id, type) of every column of the table.
    pub fn new(columns: &[(i64, DataType)]) -> Result<Self> {
        let mut ids: Vec<i64> = columns.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) || ids.contains(&HANDLE_COLUMN_ID) {
            return Err(invalid_input!(
                "pack columns need distinct ids other than 0"
            ));
        }
        Ok(PackBuilder {
            handles: Vec::with_capacity(PACK_ROWS),
            columns: columns
                .iter()
                .map(|(id, t)| ColumnBuilder::new(*id, t.clone()))
                .collect::<Result<_>>()?,
        })
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    pub fn first_handle(&self) -> Option<i64> {
        self.handles.first().copied()
    }

    pub fn last_handle(&self) -> Option<i64> {
        self.handles.last().copied()
    }

    fn check_handle(&self, handle: i64) -> Result<()> {
        match self.handles.last() {
            Some(last) if *last >= handle => Err(invalid_input!(
                "pack rows must come in ascending handle order ({handle} after {last})"
            )),
            _ => Ok(()),
        }
    }

    /// Appends a row; `row` holds one datum per column, in the order given
    /// to [`PackBuilder::new`].
    pub fn push(&mut self, handle: i64, row: &[Datum]) -> Result<()> {
        self.check_handle(handle)?;
        if row.len() != self.columns.len() {
            return Err(invalid_input!(
                "a pack row has {} values, the table {} columns",
                row.len(),
                self.columns.len()
            ));
        }
        for (c, d) in self.columns.iter_mut().zip(row) {
            c.push(d)?;
        }
        self.handles.push(handle);
        Ok(())
    }

    /// Appends a row given as (column id, datum) pairs in the builder's
    /// column order (what a row encoder takes).
    pub fn push_pairs(&mut self, handle: i64, row: &[(i64, Datum)]) -> Result<()> {
        self.check_handle(handle)?;
        if row.len() != self.columns.len()
            || row
                .iter()
                .zip(&self.columns)
                .any(|((id, _), c)| *id != c.id)
        {
            return Err(invalid_input!(
                "a pack row's columns do not match the table's"
            ));
        }
        for (c, (_, d)) in self.columns.iter_mut().zip(row) {
            c.push(d)?;
        }
        self.handles.push(handle);
        Ok(())
    }

    /// Appends a row given as a row-layout value (a delta row).
    pub fn push_row_value(&mut self, handle: i64, value: &[u8]) -> Result<()> {
        self.check_handle(handle)?;
        let view = RowView::new(value)?;
        for c in &mut self.columns {
            c.push_encoded(view.get(c.id)?)?;
        }
        self.handles.push(handle);
        Ok(())
    }

    /// Appends row `i` of another pack (compaction rewrites packs).
    pub fn push_pack_row(&mut self, pack: &PackView<'_>, i: usize) -> Result<()> {
        let handle = pack.handles()?.get(i);
        self.check_handle(handle)?;
        for c in &mut self.columns {
            let v = pack.column(c.id)?;
            c.push_from_view(&v, i)?;
        }
        self.handles.push(handle);
        Ok(())
    }

    /// Encodes the rows pushed so far as one pack value and clears the
    /// builder. Returns `(first handle, value)`.
    pub fn finish(&mut self) -> Result<(i64, Vec<u8>)> {
        let first = self
            .first_handle()
            .ok_or_else(|| internal!("finishing an empty pack"))?;
        let rows = self.handles.len();
        let all_valid = vec![true; rows];
        let mut entries = vec![encode_ints(HANDLE_COLUMN_ID, &self.handles, &all_valid, 0)];
        entries.extend(self.columns.iter().map(encode_column));
        let data_len: usize = entries.iter().map(|e| e.data.len()).sum();
        let mut out = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN + data_len);
        out.push(VERSION);
        out.extend_from_slice(&(rows as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        let mut offset = HEADER_LEN + entries.len() * ENTRY_LEN;
        for e in &entries {
            out.extend_from_slice(&e.id.to_le_bytes());
            out.extend_from_slice(&[e.encoding, e.width, e.flags, 0]);
            out.extend_from_slice(&(offset as u32).to_le_bytes());
            out.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&e.min.to_le_bytes());
            out.extend_from_slice(&e.max.to_le_bytes());
            offset += e.data.len();
        }
        if offset > u32::MAX as usize {
            return Err(invalid_input!("a pack exceeds 4 GiB"));
        }
        for e in &entries {
            out.extend_from_slice(&e.data);
        }
        self.handles.clear();
        for c in &mut self.columns {
            c.clear();
        }
        Ok((first, out))
    }
}

// ------------------------------------------------------------------ reading

#[inline]
fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn le_i64(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A parsed pack value: the directory is checked once, columns are read in
/// place from the borrowed bytes.
#[derive(Debug, Clone, Copy)]
pub struct PackView<'a> {
    value: &'a [u8],
    rows: usize,
    ncols: usize,
}

/// One column of a pack, as stored.
#[derive(Debug, Clone, Copy)]
pub enum ColumnView<'a> {
    /// Every value is NULL (or the column is not in the pack).
    Null,
    Int(IntView<'a>),
    F64 {
        data: &'a [u8],
        nulls: Option<&'a [u8]>,
    },
    I128 {
        data: &'a [u8],
        nulls: Option<&'a [u8]>,
    },
    Dict(DictView<'a>),
    Plain {
        offsets: &'a [u8],
        bytes: &'a [u8],
        nulls: Option<&'a [u8]>,
    },
}

/// A frame-of-reference integer column.
#[derive(Debug, Clone, Copy)]
pub struct IntView<'a> {
    pub min: i64,
    pub max: i64,
    width: u8,
    data: &'a [u8],
    nulls: Option<&'a [u8]>,
    rows: usize,
}

/// A dictionary-encoded string column.
#[derive(Debug, Clone, Copy)]
pub struct DictView<'a> {
    entries: usize,
    offsets: &'a [u8],
    bytes: &'a [u8],
    pub codes: &'a [u8],
    nulls: Option<&'a [u8]>,
}

impl<'a> PackView<'a> {
    /// Checks the header and directory of a pack value.
    pub fn parse(value: &'a [u8]) -> Result<Self> {
        let corrupt = |why: &str| invalid_input!("corrupt pack ({why})");
        if value.len() < HEADER_LEN {
            return Err(corrupt("truncated header"));
        }
        if value[0] != VERSION {
            return Err(corrupt(&format!("unknown version {}", value[0])));
        }
        let rows = le_u32(value, 1) as usize;
        let ncols = le_u16(value, 5) as usize;
        if ncols == 0 || value.len() < HEADER_LEN + ncols * ENTRY_LEN {
            return Err(corrupt("truncated directory"));
        }
        let view = PackView { value, rows, ncols };
        // Only the directory is checked here; a column is checked when it
        // is read (a scan reads a few of many).
        for i in 0..ncols {
            let e = view.entry(i);
            let (off, len) = (le_u32(e, 12) as usize, le_u32(e, 16) as usize);
            if off.checked_add(len).is_none_or(|end| end > value.len()) {
                return Err(corrupt("column data out of bounds"));
            }
        }
        view.column_at(0)?;
        if le_i64(view.entry(0), 0) != HANDLE_COLUMN_ID {
            return Err(corrupt("no handle column"));
        }
        Ok(view)
    }

    #[inline]
    fn entry(&self, i: usize) -> &'a [u8] {
        let at = HEADER_LEN + i * ENTRY_LEN;
        &self.value[at..at + ENTRY_LEN]
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The handles, ascending.
    pub fn handles(&self) -> Result<IntView<'a>> {
        match self.column_at(0)? {
            ColumnView::Int(v) => Ok(v),
            _ => Err(invalid_input!("corrupt pack (handles are not integers)")),
        }
    }

    pub fn first_handle(&self) -> i64 {
        le_i64(self.entry(0), 24)
    }

    pub fn last_handle(&self) -> i64 {
        le_i64(self.entry(0), 32)
    }

    /// The column with this id; a column the pack does not have reads as
    /// all NULL (it was added after the pack was written).
    pub fn column(&self, id: i64) -> Result<ColumnView<'a>> {
        for i in 1..self.ncols {
            if le_i64(self.entry(i), 0) == id {
                return self.column_at(i);
            }
        }
        Ok(ColumnView::Null)
    }

    /// The row index holding `handle`, if the pack has it.
    pub fn find(&self, handle: i64) -> Result<Option<usize>> {
        if handle < self.first_handle() || handle > self.last_handle() {
            return Ok(None);
        }
        let h = self.handles()?;
        let (mut lo, mut hi) = (0usize, self.rows);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match h.get(mid).cmp(&handle) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(mid)),
            }
        }
        Ok(None)
    }

    /// True if row `i` holds exactly the values of a row-layout `value`
    /// (a retried INSERT of a row that was since moved into this pack).
    pub fn row_equals(&self, i: usize, value: &[u8]) -> Result<bool> {
        let row = RowView::new(value)?;
        let mut seen = 0usize;
        for c in 1..self.ncols {
            let id = le_i64(self.entry(c), 0);
            let stored = self.column_at(c)?.datum(i)?;
            let given = row.get(id)?;
            let same = match (stored, given) {
                (Datum::Null, Lookup::Null | Lookup::Absent) => true,
                (Datum::Null, Lookup::Value(_)) | (_, Lookup::Null | Lookup::Absent) => false,
                (Datum::Int(x), Lookup::Value(b)) => super::row::get_compact(b)? == x as i128,
                (Datum::Decimal(x), Lookup::Value(b)) => super::row::get_compact(b)? == x,
                (Datum::Float(x), Lookup::Value(b)) => b == x.to_le_bytes(),
                (Datum::Bytes(x), Lookup::Value(b)) => x == b,
                (Datum::Date(x), Lookup::Value(b)) => super::row::get_compact(b)? == x as i128,
                (Datum::Bool(_), _) => false,
            };
            if !same {
                return Ok(false);
            }
            if matches!(given, Lookup::Value(_)) {
                seen += 1;
            }
        }
        // The row must not carry columns the pack lacks.
        Ok(seen == row.num_values())
    }

    fn column_at(&self, i: usize) -> Result<ColumnView<'a>> {
        let corrupt = |why: &str| invalid_input!("corrupt pack ({why})");
        let e = self.entry(i);
        let (encoding, width, flags) = (e[8], e[9], e[10]);
        let (off, len) = (le_u32(e, 12) as usize, le_u32(e, 16) as usize);
        let mut data = self
            .value
            .get(off..off + len)
            .ok_or_else(|| corrupt("column data out of bounds"))?;
        let rows = self.rows;
        let nulls = if flags & FLAG_NULLS != 0 {
            let n = rows.div_ceil(8);
            let (bits, rest) = data
                .split_at_checked(n)
                .ok_or_else(|| corrupt("truncated validity"))?;
            data = rest;
            Some(bits)
        } else {
            None
        };
        let need = |n: usize, data: &[u8]| {
            if data.len() < n {
                Err(corrupt("truncated column"))
            } else {
                Ok(())
            }
        };
        Ok(match encoding {
            ENC_NULL => ColumnView::Null,
            ENC_INT_FOR => {
                if ![0, 1, 2, 4, 8].contains(&width) {
                    return Err(corrupt("bad integer width"));
                }
                need(rows * width as usize, data)?;
                ColumnView::Int(IntView {
                    min: le_i64(e, 24),
                    max: le_i64(e, 32),
                    width,
                    data,
                    nulls,
                    rows,
                })
            }
            ENC_F64 => {
                need(rows * 8, data)?;
                ColumnView::F64 { data, nulls }
            }
            ENC_I128 => {
                need(rows * 16, data)?;
                ColumnView::I128 { data, nulls }
            }
            ENC_DICT => {
                need(2, data)?;
                let entries = le_u16(data, 0) as usize;
                let offsets_len = (entries + 1) * 4;
                need(2 + offsets_len, data)?;
                let offsets = &data[2..2 + offsets_len];
                let bytes_len = le_u32(offsets, entries * 4) as usize;
                let bytes_at = 2 + offsets_len;
                need(bytes_at + bytes_len + rows, data)?;
                for k in 0..entries {
                    if le_u32(offsets, k * 4) > le_u32(offsets, k * 4 + 4) {
                        return Err(corrupt("dictionary offsets out of order"));
                    }
                }
                let codes = &data[bytes_at + bytes_len..bytes_at + bytes_len + rows];
                let max = codes.iter().copied().max().unwrap_or(0);
                if entries == 0 || max as usize >= entries {
                    return Err(corrupt("dictionary code out of range"));
                }
                ColumnView::Dict(DictView {
                    entries,
                    offsets,
                    bytes: &data[bytes_at..bytes_at + bytes_len],
                    codes,
                    nulls,
                })
            }
            ENC_PLAIN => {
                let offsets_len = (rows + 1) * 4;
                need(offsets_len, data)?;
                let offsets = &data[..offsets_len];
                let bytes = &data[offsets_len..];
                let mut prev = 0;
                for k in 0..=rows {
                    let o = le_u32(offsets, k * 4);
                    if o < prev || o as usize > bytes.len() {
                        return Err(corrupt("string offsets out of bounds"));
                    }
                    prev = o;
                }
                ColumnView::Plain {
                    offsets,
                    bytes,
                    nulls,
                }
            }
            other => return Err(corrupt(&format!("unknown encoding {other}"))),
        })
    }
}

#[inline]
fn bit(bits: &[u8], i: usize) -> bool {
    bits[i / 8] & (1 << (i % 8)) != 0
}

fn null_buffer(bits: Option<&[u8]>, rows: usize) -> Option<NullBuffer> {
    bits.map(|b| {
        NullBuffer::new(arrow::buffer::BooleanBuffer::new(
            Buffer::from_slice_ref(b),
            0,
            rows,
        ))
    })
}

impl<'a> IntView<'a> {
    /// Bytes per value (0, 1, 2, 4 or 8).
    pub fn width(&self) -> usize {
        self.width as usize
    }

    /// The packed values: `width` little-endian bytes each, value − min.
    pub fn data(&self) -> &'a [u8] {
        &self.data[..self.rows * self.width as usize]
    }

    pub fn has_nulls(&self) -> bool {
        self.nulls.is_some()
    }

    pub fn is_valid(&self, i: usize) -> bool {
        self.nulls.is_none_or(|b| bit(b, i))
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Value `i` (a NULL slot reads as `min`).
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        let d = self.data;
        let off = match self.width {
            0 => 0,
            1 => d[i] as u64,
            2 => u16::from_le_bytes([d[2 * i], d[2 * i + 1]]) as u64,
            4 => u32::from_le_bytes(d[4 * i..4 * i + 4].try_into().expect("4")) as u64,
            _ => u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().expect("8")),
        };
        self.min.wrapping_add(off as i64)
    }

    /// Decodes every value into `out` (cleared first), widening in one
    /// pass the compiler vectorizes.
    pub fn decode_into(&self, out: &mut Vec<i64>) {
        out.clear();
        let (min, d, n) = (self.min, self.data, self.rows);
        match self.width {
            0 => out.resize(n, min),
            1 => out.extend(d[..n].iter().map(|x| min.wrapping_add(*x as i64))),
            2 => out.extend(
                d[..2 * n]
                    .chunks_exact(2)
                    .map(|c| min.wrapping_add(u16::from_le_bytes([c[0], c[1]]) as i64)),
            ),
            4 => out.extend(
                d[..4 * n]
                    .chunks_exact(4)
                    .map(|c| min.wrapping_add(u32::from_le_bytes(c.try_into().expect("4")) as i64)),
            ),
            _ => out.extend(
                d[..8 * n]
                    .chunks_exact(8)
                    .map(|c| min.wrapping_add(u64::from_le_bytes(c.try_into().expect("8")) as i64)),
            ),
        }
    }

    fn nulls(&self) -> Option<NullBuffer> {
        null_buffer(self.nulls, self.rows)
    }
}

impl<'a> DictView<'a> {
    /// Number of dictionary entries.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Dictionary entry `k`.
    pub fn entry(&self, k: usize) -> &'a [u8] {
        let (s, e) = (
            le_u32(self.offsets, k * 4) as usize,
            le_u32(self.offsets, k * 4 + 4) as usize,
        );
        &self.bytes[s..e]
    }

    pub fn has_nulls(&self) -> bool {
        self.nulls.is_some()
    }
}

/// A string offset as Arrow's i32.
fn offset32(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| invalid_input!("corrupt pack (strings past 2 GiB)"))
}

fn utf8(b: &[u8]) -> Result<&str> {
    std::str::from_utf8(b).map_err(|_| invalid_input!("corrupt pack (string is not UTF-8)"))
}

impl<'a> ColumnView<'a> {
    /// True if some value is NULL.
    pub fn has_nulls(&self) -> bool {
        match self {
            ColumnView::Null => true,
            ColumnView::Int(v) => v.nulls.is_some(),
            ColumnView::Dict(v) => v.nulls.is_some(),
            ColumnView::F64 { nulls, .. }
            | ColumnView::I128 { nulls, .. }
            | ColumnView::Plain { nulls, .. } => nulls.is_some(),
        }
    }

    /// Value `i` (integers as [`Datum::Int`], whatever their SQL type).
    pub fn datum(&self, i: usize) -> Result<Datum<'a>> {
        let valid = |n: Option<&[u8]>| n.is_none_or(|b| bit(b, i));
        Ok(match self {
            ColumnView::Null => Datum::Null,
            ColumnView::Int(v) if v.is_valid(i) => Datum::Int(v.get(i)),
            ColumnView::F64 { data, nulls } if valid(*nulls) => Datum::Float(f64::from_le_bytes(
                data[8 * i..8 * i + 8].try_into().expect("8"),
            )),
            ColumnView::I128 { data, nulls } if valid(*nulls) => Datum::Decimal(
                i128::from_le_bytes(data[16 * i..16 * i + 16].try_into().expect("16")),
            ),
            ColumnView::Dict(d) if valid(d.nulls) => Datum::Bytes(d.entry(d.codes[i] as usize)),
            ColumnView::Plain {
                offsets,
                bytes,
                nulls,
            } if valid(*nulls) => {
                let (s, e) = (
                    le_u32(offsets, 4 * i) as usize,
                    le_u32(offsets, 4 * i + 4) as usize,
                );
                Datum::Bytes(&bytes[s..e])
            }
            _ => Datum::Null,
        })
    }

    /// Decodes the rows `sel` (ascending) into an Arrow array of the
    /// column's SQL type: late materialization, after a filter on other
    /// columns picked the rows.
    pub fn to_arrow_at(&self, dt: &DataType, sel: &[u32]) -> Result<ArrayRef> {
        let mismatch = || internal!("pack column does not hold {dt}");
        let n = sel.len();
        let nulls = |bits: Option<&[u8]>| -> Option<NullBuffer> {
            let b = bits?;
            let nb = NullBuffer::from_iter(sel.iter().map(|i| bit(b, *i as usize)));
            (nb.null_count() > 0).then_some(nb)
        };
        Ok(match self {
            ColumnView::Null => arrow::array::new_null_array(dt, n),
            ColumnView::Int(v) => {
                let vals = sel.iter().map(|i| v.get(*i as usize));
                let nb = nulls(v.nulls);
                match dt {
                    DataType::Int64 => Arc::new(Int64Array::new(vals.collect(), nb)),
                    DataType::Date32 => {
                        Arc::new(Date32Array::new(vals.map(|x| x as i32).collect(), nb))
                    }
                    DataType::Decimal128(p, s) => {
                        let vals: Vec<i128> = vals.map(|x| x as i128).collect();
                        if !vals.iter().all(|v| fits_precision(*v, *p)) {
                            return Err(invalid_input!(
                                "corrupt pack (decimal exceeds its precision)"
                            ));
                        }
                        Arc::new(
                            Decimal128Array::new(ScalarBuffer::from(vals), nb)
                                .with_precision_and_scale(*p, *s)?,
                        )
                    }
                    _ => return Err(mismatch()),
                }
            }
            ColumnView::F64 { data, nulls: nbits } => {
                if *dt != DataType::Float64 {
                    return Err(mismatch());
                }
                let vals: Vec<f64> = sel
                    .iter()
                    .map(|i| {
                        let i = *i as usize * 8;
                        f64::from_le_bytes(data[i..i + 8].try_into().expect("8"))
                    })
                    .collect();
                Arc::new(Float64Array::new(ScalarBuffer::from(vals), nulls(*nbits)))
            }
            ColumnView::I128 { data, nulls: nbits } => {
                let DataType::Decimal128(p, s) = dt else {
                    return Err(mismatch());
                };
                let vals: Vec<i128> = sel
                    .iter()
                    .map(|i| {
                        let i = *i as usize * 16;
                        i128::from_le_bytes(data[i..i + 16].try_into().expect("16"))
                    })
                    .collect();
                Arc::new(
                    Decimal128Array::new(ScalarBuffer::from(vals), nulls(*nbits))
                        .with_precision_and_scale(*p, *s)?,
                )
            }
            ColumnView::Dict(_) | ColumnView::Plain { .. } => {
                if *dt != DataType::Utf8 {
                    return Err(mismatch());
                }
                let mut offsets = Vec::with_capacity(n + 1);
                let mut bytes = Vec::new();
                offsets.push(0i32);
                for i in sel {
                    if let Datum::Bytes(b) = self.datum(*i as usize)? {
                        bytes.extend_from_slice(b);
                    }
                    offsets.push(offset32(bytes.len())?);
                }
                utf8(&bytes)?;
                let nbits = match self {
                    ColumnView::Dict(d) => d.nulls,
                    ColumnView::Plain { nulls, .. } => *nulls,
                    _ => None,
                };
                Arc::new(StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from_vec(bytes),
                    nulls(nbits),
                )?)
            }
        })
    }

    /// Decodes the column into an Arrow array of the column's SQL type.
    pub fn to_arrow(&self, dt: &DataType, rows: usize) -> Result<ArrayRef> {
        let mismatch = || internal!("pack column does not hold {dt}");
        Ok(match self {
            ColumnView::Null => arrow::array::new_null_array(dt, rows),
            ColumnView::Int(v) => {
                let mut vals = Vec::with_capacity(rows);
                v.decode_into(&mut vals);
                let nulls = v.nulls();
                match dt {
                    DataType::Int64 => Arc::new(Int64Array::new(ScalarBuffer::from(vals), nulls)),
                    DataType::Date32 => Arc::new(Date32Array::new(
                        vals.into_iter().map(|x| x as i32).collect(),
                        nulls,
                    )),
                    DataType::Decimal128(p, s) => {
                        let vals: Vec<i128> = vals.into_iter().map(|x| x as i128).collect();
                        if !vals.iter().all(|v| fits_precision(*v, *p)) {
                            return Err(invalid_input!(
                                "corrupt pack (decimal exceeds its precision)"
                            ));
                        }
                        Arc::new(
                            Decimal128Array::new(ScalarBuffer::from(vals), nulls)
                                .with_precision_and_scale(*p, *s)?,
                        )
                    }
                    _ => return Err(mismatch()),
                }
            }
            ColumnView::F64 { data, nulls } => {
                if *dt != DataType::Float64 {
                    return Err(mismatch());
                }
                let vals: Vec<f64> = data[..rows * 8]
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8")))
                    .collect();
                Arc::new(Float64Array::new(
                    ScalarBuffer::from(vals),
                    null_buffer(*nulls, rows),
                ))
            }
            ColumnView::I128 { data, nulls } => {
                let DataType::Decimal128(p, s) = dt else {
                    return Err(mismatch());
                };
                let vals: Vec<i128> = data[..rows * 16]
                    .chunks_exact(16)
                    .map(|c| i128::from_le_bytes(c.try_into().expect("16")))
                    .collect();
                if !vals.iter().all(|v| fits_precision(*v, *p)) {
                    return Err(invalid_input!(
                        "corrupt pack (decimal exceeds its precision)"
                    ));
                }
                Arc::new(
                    Decimal128Array::new(ScalarBuffer::from(vals), null_buffer(*nulls, rows))
                        .with_precision_and_scale(*p, *s)?,
                )
            }
            ColumnView::Dict(d) => {
                if *dt != DataType::Utf8 {
                    return Err(mismatch());
                }
                let entries: Vec<&[u8]> = (0..d.entries).map(|k| d.entry(k)).collect();
                for e in &entries {
                    utf8(e)?;
                }
                let mut offsets = Vec::with_capacity(rows + 1);
                let mut bytes = Vec::new();
                offsets.push(0i32);
                for (i, c) in d.codes.iter().enumerate() {
                    if d.nulls.is_none_or(|b| bit(b, i)) {
                        bytes.extend_from_slice(entries[*c as usize]);
                    }
                    offsets.push(offset32(bytes.len())?);
                }
                Arc::new(StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from_vec(bytes),
                    null_buffer(d.nulls, rows),
                )?)
            }
            ColumnView::Plain {
                offsets,
                bytes,
                nulls,
            } => {
                if *dt != DataType::Utf8 {
                    return Err(mismatch());
                }
                utf8(bytes)?;
                let offs: Vec<i32> = offsets
                    .chunks_exact(4)
                    .map(|c| offset32(u32::from_le_bytes(c.try_into().expect("4")) as usize))
                    .collect::<Result<_>>()?;
                // Offsets must fall on character boundaries.
                let text = utf8(bytes)?;
                if offs.iter().any(|o| !text.is_char_boundary(*o as usize)) {
                    return Err(invalid_input!(
                        "corrupt pack (string offsets split a character)"
                    ));
                }
                Arc::new(StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offs)),
                    Buffer::from_slice_ref(bytes),
                    null_buffer(*nulls, rows),
                )?)
            }
        })
    }
}

/// The pack's rows, decoded into the given columns (id, type) as Arrow
/// arrays, in that order.
pub fn decode_columns(pack: &PackView<'_>, columns: &[(i64, DataType)]) -> Result<Vec<ArrayRef>> {
    columns
        .iter()
        .map(|(id, dt)| pack.column(*id)?.to_arrow(dt, pack.rows()))
        .collect()
}

#[cfg(test)]
mod tests;
