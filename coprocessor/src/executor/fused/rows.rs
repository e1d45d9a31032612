//! Rows (a row-layout table's, a column table's delta, a transaction's own
//! writes) decoded for the fused kernels: [`RowBlock`].
//!
//! The kernels read integer columns as i64 with the block's min and max
//! ([`Source::Values`]). Decoding a row's integers into Arrow builders of
//! the SQL type first — DECIMAL as i128 — and then copying each finished
//! array into i64 is two passes, a 16-byte intermediate and an allocation
//! per column and block; here the plan's integer columns go straight from
//! the row's compact bytes into reused `Vec<i64>`s, in the one pass that
//! walks the rows. Every other column (strings, and columns the plan does
//! not read) still goes through [`RowDecoder`]'s Arrow builders.
//!
//! A NULL makes the block ineligible for the fused path (its kernels assume
//! none), as it did before; the block then goes the generic way, for which
//! [`RowBlock::arrays`] builds the Arrow arrays of every column from the
//! same decoded values and NULL positions, so nothing is decoded twice.
//!
//! Values are checked as the builders check them: a BIGINT past i64, a
//! DATE past i32 or a value of an unknown width is a corrupt row, an
//! error. So here is a DECIMAL(p ≤ 18) value past i64, which the builders
//! took as an i128 (no such value passes an INSERT's precision check; the
//! old path would have sent its block the generic way). A row that fails
//! leaves nothing of itself in the block.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;

use super::groups::int_array;
use super::source::Source;
use crate::codec::pack::is_int_type;
use crate::codec::row::{get_compact_i64, Lookup, RowDecoder, RowView};
use crate::{internal, invalid_input, Result};

/// One block of rows being decoded; see the module docs.
pub(super) struct RowBlock {
    /// Per scan column, where its values go.
    place: Vec<Place>,
    ints: Vec<IntColumn>,
    /// The columns not in `ints`, in scan order.
    others: RowDecoder,
    rows: usize,
}

#[derive(Clone, Copy)]
enum Place {
    Int(usize),
    Other(usize),
}

/// A read integer column's values in the block.
struct IntColumn {
    id: i64,
    dt: DataType,
    /// `dt` is DATE (values must fit i32); tested per value, so kept
    /// apart from `dt`.
    date: bool,
    values: Vec<i64>,
    /// Rows that are NULL (their `values` entry is 0).
    nulls: Vec<u32>,
}

/// A finished block: what the kernels or the generic path read.
pub(super) struct Decoded {
    /// The columns not decoded as integers, in scan order among themselves.
    others: Vec<ArrayRef>,
}

impl RowBlock {
    /// `columns`: the scan's (id, type); `used`: which the fused plan reads.
    pub(super) fn new(columns: &[(i64, DataType)], used: &[bool], capacity: usize) -> Result<Self> {
        let mut place = Vec::with_capacity(columns.len());
        let mut ints = Vec::new();
        let mut others = Vec::new();
        for (i, (id, dt)) in columns.iter().enumerate() {
            if used.get(i).copied().unwrap_or(false) && is_int_type(dt) {
                place.push(Place::Int(ints.len()));
                ints.push(IntColumn {
                    id: *id,
                    dt: dt.clone(),
                    date: *dt == DataType::Date32,
                    values: Vec::with_capacity(capacity),
                    nulls: Vec::new(),
                });
            } else {
                place.push(Place::Other(others.len()));
                others.push((*id, dt.clone()));
            }
        }
        Ok(RowBlock {
            place,
            ints,
            others: RowDecoder::new(&others, capacity)?,
            rows: 0,
        })
    }

    /// A block of no columns, allocating nothing (a placeholder while a
    /// block is out of its owner).
    pub(super) fn empty() -> Self {
        RowBlock {
            place: Vec::new(),
            ints: Vec::new(),
            others: RowDecoder::new(&[], 0).expect("no columns"),
            rows: 0,
        }
    }

    /// Rows decoded since the last [`RowBlock::clear`].
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// Appends one row value; on an error, the block is as before it.
    #[inline]
    pub(super) fn decode(&mut self, value: &[u8]) -> Result<()> {
        match self.decode_row(value) {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                let rows = self.rows;
                for c in &mut self.ints {
                    c.values.truncate(rows);
                    c.nulls.retain(|r| (*r as usize) < rows);
                }
                Err(e)
            }
        }
    }

    #[inline]
    fn decode_row(&mut self, value: &[u8]) -> Result<()> {
        let row = RowView::new(value)?;
        let r = self.rows as u32;
        for c in &mut self.ints {
            match row.get(c.id)? {
                Lookup::Value(v) => {
                    let x = match get_compact_i64(v)? {
                        Some(x) if !c.date || i32::try_from(x).is_ok() => x,
                        _ => return Err(c.out_of_range()),
                    };
                    c.values.push(x);
                }
                Lookup::Null | Lookup::Absent => {
                    c.values.push(0);
                    c.nulls.push(r);
                }
            }
        }
        self.others.decode_view(&row)
    }

    /// Ends the block: the other columns' arrays. The integer values stay
    /// until [`RowBlock::clear`].
    pub(super) fn finish(&mut self) -> Result<Decoded> {
        Ok(Decoded {
            others: self.others.finish()?,
        })
    }

    /// Forgets the block's integer values (after [`RowBlock::finish`]).
    pub(super) fn clear(&mut self) {
        for c in &mut self.ints {
            c.values.clear();
            c.nulls.clear();
        }
        self.rows = 0;
    }

    /// The columns as the kernels read them, or None if a column the plan
    /// reads has a NULL (or is neither an integer nor a string column).
    pub(super) fn sources<'a>(&'a self, d: &'a Decoded, used: &[bool]) -> Option<Vec<Source<'a>>> {
        self.place
            .iter()
            .enumerate()
            .map(|(i, p)| match *p {
                Place::Int(k) => {
                    let c = &self.ints[k];
                    if !c.nulls.is_empty() {
                        return None;
                    }
                    let lo = c.values.iter().copied().min().unwrap_or(0);
                    let hi = c.values.iter().copied().max().unwrap_or(0);
                    Some(Source::Values(&c.values, lo, hi))
                }
                Place::Other(_) if !used.get(i).copied().unwrap_or(false) => Some(Source::Unused),
                Place::Other(k) => {
                    let a = &d.others[k];
                    if a.null_count() > 0 || a.data_type() != &DataType::Utf8 {
                        return None;
                    }
                    Some(Source::Strings(a.as_string::<i32>()))
                }
            })
            .collect()
    }

    /// Every column as an Arrow array of its type, in scan order (for the
    /// generic path).
    pub(super) fn arrays(&self, d: Decoded) -> Result<Vec<ArrayRef>> {
        let mut others = d.others.into_iter();
        self.place
            .iter()
            .map(|p| match *p {
                Place::Int(k) => self.ints[k].array(),
                Place::Other(_) => others
                    .next()
                    .ok_or_else(|| internal!("a decoded column is missing")),
            })
            .collect()
    }
}

impl IntColumn {
    /// The error for a value past the column type's range.
    #[cold]
    fn out_of_range(&self) -> crate::Error {
        match &self.dt {
            DataType::Int64 => invalid_input!("corrupt row value: BIGINT out of range"),
            DataType::Date32 => invalid_input!("corrupt row value: DATE out of range"),
            dt => invalid_input!("corrupt row value: {dt} value past 64 bits"),
        }
    }

    /// The column as an Arrow array of its type, NULLs where they were.
    fn array(&self) -> Result<ArrayRef> {
        // `nulls` is ascending: rows are appended in order.
        let mut nulls = self.nulls.iter().peekable();
        int_array(
            &self.dt,
            self.values.iter().enumerate().map(|(r, v)| {
                match nulls.next_if(|n| **n as usize == r) {
                    Some(_) => None,
                    None => Some(*v),
                }
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::{Datum, RowEncoder};

    /// The block's arrays equal what the Arrow builders decode from the
    /// same rows, NULLs included; its sources hold the integers as i64.
    #[test]
    fn decodes_as_the_builders_do() {
        let columns = vec![
            (1, DataType::Int64),
            (2, DataType::Date32),
            (3, DataType::Decimal128(15, 2)),
            (4, DataType::Utf8),
            (5, DataType::Int64),
        ];
        let used = [true, true, true, true, false];
        let rows: Vec<Vec<(i64, Datum)>> = (0..300i64)
            .map(|i| {
                let dec = if i == 5 || i == 7 {
                    Datum::Null
                } else {
                    Datum::Decimal(-(i as i128) * 1_000_001)
                };
                vec![
                    (1, Datum::Int(i * 1_000_000_007)),
                    (2, Datum::Date(9000 + i as i32)),
                    (3, dec),
                    (4, Datum::Bytes(if i % 2 == 0 { b"A" } else { b"NF" })),
                    (5, Datum::Int(-i)),
                ]
            })
            .collect();
        let mut enc = RowEncoder::new();
        let mut block = RowBlock::new(&columns, &used, 16).unwrap();
        let mut expect = RowDecoder::new(&columns, 16).unwrap();
        for (i, r) in rows.iter().enumerate() {
            // Row 5 has column 3 NULL; row 7 leaves it out, which reads
            // as NULL too.
            let r: Vec<_> = r
                .iter()
                .filter(|(id, d)| !(i == 7 && *id == 3 && *d == Datum::Null))
                .cloned()
                .collect();
            let mut v = Vec::new();
            enc.encode(&r, &mut v).unwrap();
            block.decode(&v).unwrap();
            expect.decode(&v).unwrap();
        }
        assert_eq!(block.rows(), 300);
        let d = block.finish().unwrap();
        assert!(
            block.sources(&d, &used).is_none(),
            "a NULL in a read column"
        );
        let got = block.arrays(d).unwrap();
        let want = expect.finish().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.to_data(), w.to_data());
        }
        assert_eq!(got[2].null_count(), 2);

        // Without the NULL, the integers come as i64 with their range.
        block.clear();
        for r in &rows[8..20] {
            let mut v = Vec::new();
            enc.encode(r, &mut v).unwrap();
            block.decode(&v).unwrap();
        }
        let d = block.finish().unwrap();
        let src = block.sources(&d, &used).expect("no NULLs");
        match &src[2] {
            Source::Values(v, lo, hi) => {
                assert_eq!(v.len(), 12);
                assert_eq!((*lo, *hi), (-19 * 1_000_001, -8 * 1_000_001));
            }
            _ => panic!("DECIMAL(15, 2) as i64"),
        }
        assert!(matches!(src[3], Source::Strings(s) if s.value(0) == "A"));
        assert!(matches!(src[4], Source::Unused));
    }

    #[test]
    fn a_date_past_i32_is_a_corrupt_row() {
        let mut block = RowBlock::new(&[(1, DataType::Date32)], &[true], 4).unwrap();
        let mut v = Vec::new();
        RowEncoder::new()
            .encode(&[(1, Datum::Int(1 << 40))], &mut v)
            .unwrap();
        let e = block.decode(&v).unwrap_err().to_string();
        assert!(e.contains("DATE out of range"), "{e}");
    }

    /// A row that fails halfway (its second column) leaves nothing of
    /// itself: the block's arrays still have one entry per counted row.
    #[test]
    fn a_failed_row_leaves_the_block_as_it_was() {
        let columns = [(1, DataType::Int64), (2, DataType::Date32)];
        let mut block = RowBlock::new(&columns, &[true, true], 4).unwrap();
        let mut enc = RowEncoder::new();
        let mut good = Vec::new();
        enc.encode(&[(1, Datum::Null), (2, Datum::Date(7))], &mut good)
            .unwrap();
        let mut bad = Vec::new();
        enc.encode(&[(1, Datum::Null), (2, Datum::Int(1 << 40))], &mut bad)
            .unwrap();
        block.decode(&good).unwrap();
        assert!(block.decode(&bad).is_err());
        block.decode(&good).unwrap();
        let d = block.finish().unwrap();
        let arrays = block.arrays(d).unwrap();
        assert_eq!(block.rows(), 2);
        assert!(arrays.iter().all(|a| a.len() == 2));
        assert_eq!(arrays[0].null_count(), 2);
    }

    #[test]
    fn a_bigint_past_64_bits_is_named_as_one() {
        let mut block = RowBlock::new(&[(1, DataType::Int64)], &[true], 4).unwrap();
        let mut v = Vec::new();
        RowEncoder::new()
            .encode(&[(1, Datum::Decimal(1 << 70))], &mut v)
            .unwrap();
        let e = block.decode(&v).unwrap_err().to_string();
        assert!(e.contains("BIGINT out of range"), "{e}");
    }
}
