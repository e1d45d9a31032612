//! Reading a pack in place: [`PackView::parse`] checks the header and the
//! directory once, [`PackView::column`] checks and returns one column as
//! stored ([`ColumnView`]), borrowing the value's bytes.

use arrow::buffer::{Buffer, NullBuffer};

use super::{
    IntView, ENC_DICT, ENC_F64, ENC_I128, ENC_INT_FOR, ENC_NULL, ENC_PLAIN, ENTRY_LEN, FLAG_NULLS,
    HANDLE_COLUMN_ID, HEADER_LEN, VERSION,
};
use crate::codec::row::{get_compact, Datum, Lookup, RowView};
use crate::{invalid_input, Result};

#[inline]
fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
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

/// A dictionary-encoded string column.
#[derive(Debug, Clone, Copy)]
pub struct DictView<'a> {
    pub(super) entries: usize,
    offsets: &'a [u8],
    bytes: &'a [u8],
    pub codes: &'a [u8],
    pub(super) nulls: Option<&'a [u8]>,
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
    /// all NULL (it was added after the pack was written). The row handles
    /// read as the column `ROWID_COLUMN_ID`.
    pub fn column(&self, id: i64) -> Result<ColumnView<'a>> {
        if id == crate::codec::key::ROWID_COLUMN_ID {
            return self.column_at(0);
        }
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
                (Datum::Int(x), Lookup::Value(b)) => get_compact(b)? == x as i128,
                (Datum::Decimal(x), Lookup::Value(b)) => get_compact(b)? == x,
                (Datum::Float(x), Lookup::Value(b)) => b == x.to_le_bytes(),
                (Datum::Bytes(x), Lookup::Value(b)) => x == b,
                (Datum::Date(x), Lookup::Value(b)) => get_compact(b)? == x as i128,
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
                ColumnView::Int(IntView::new(
                    le_i64(e, 24),
                    le_i64(e, 32),
                    width,
                    data,
                    nulls,
                    rows,
                ))
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
pub(super) fn bit(bits: &[u8], i: usize) -> bool {
    bits[i / 8] & (1 << (i % 8)) != 0
}

pub(super) fn null_buffer(bits: Option<&[u8]>, rows: usize) -> Option<NullBuffer> {
    bits.map(|b| {
        NullBuffer::new(arrow::buffer::BooleanBuffer::new(
            Buffer::from_slice_ref(b),
            0,
            rows,
        ))
    })
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

impl<'a> ColumnView<'a> {
    /// True if some value is NULL.
    pub fn has_nulls(&self) -> bool {
        match self {
            ColumnView::Null => true,
            ColumnView::Int(v) => v.has_nulls(),
            ColumnView::Dict(v) => v.has_nulls(),
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
}
