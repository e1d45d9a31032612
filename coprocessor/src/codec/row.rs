//! The row value codec (row-v2 style, after TiDB's "row format v2").
//!
//! One row is one value. Column ids are kept sorted next to an array of end
//! offsets, so finding one column is a binary search over a few bytes and
//! never touches the other columns' values:
//!
//! ```text
//! byte 0      version (0x80)
//! byte 1      flags: bit 0 = BIG (ids are u32 and offsets u32, else u8/u16)
//! bytes 2..4  n_not_null: u16 LE
//! bytes 4..6  n_null: u16 LE
//! ids         not-null column ids ascending, then null column ids ascending
//! offsets     n_not_null end offsets into the values area
//! values      the not-null values back to back
//! ```
//!
//! Values: integers, dates and decimals (unscaled) are stored in the fewest
//! of 1, 2, 4, 8 (or 16 for wide decimals) little-endian bytes that hold
//! them, so the width is the value's length; doubles are 8 bytes; strings are
//! their bytes. A column missing from both id lists reads as NULL (it was
//! added after the row was written).
//!
//! [`RowDecoder`] decodes straight from borrowed slices into Arrow builders:
//! no intermediate row struct, no copy of values that are not asked for.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int64Builder,
    StringBuilder,
};
use arrow::datatypes::DataType;

use crate::{internal, invalid_input, Result};

const VERSION: u8 = 0x80;
const FLAG_BIG: u8 = 1;
const HEADER_LEN: usize = 6;

/// One value to encode. Borrowed, so encoding allocates nothing per row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Datum<'a> {
    Null,
    Int(i64),
    Float(f64),
    /// Unscaled; the column's type gives the scale.
    Decimal(i128),
    /// Days since 1970-01-01.
    Date(i32),
    Bytes(&'a [u8]),
    Bool(bool),
}

/// Row `r` of `col` (an array of the column's own type `dt`) as a datum:
/// how Arrow data (an UPDATE's new values, a loaded file) is encoded.
pub fn array_datum<'a>(col: &'a ArrayRef, dt: &DataType, r: usize) -> Result<Datum<'a>> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int64Type};
    if col.is_null(r) {
        return Ok(Datum::Null);
    }
    Ok(match dt {
        DataType::Int64 => Datum::Int(col.as_primitive::<Int64Type>().value(r)),
        DataType::Float64 => Datum::Float(col.as_primitive::<Float64Type>().value(r)),
        DataType::Decimal128(..) => Datum::Decimal(col.as_primitive::<Decimal128Type>().value(r)),
        DataType::Date32 => Datum::Date(col.as_primitive::<Date32Type>().value(r)),
        DataType::Utf8 => Datum::Bytes(col.as_string::<i32>().value(r).as_bytes()),
        DataType::Boolean => Datum::Bool(col.as_boolean().value(r)),
        other => return Err(internal!("a column of type {other} cannot be stored")),
    })
}

/// Encodes rows, reusing its scratch buffers between calls.
#[derive(Default)]
pub struct RowEncoder {
    values: Vec<u8>,
    not_null: Vec<(i64, usize)>, // (id, end offset)
    nulls: Vec<i64>,
    order: Vec<usize>,
}

fn put_compact(buf: &mut Vec<u8>, v: i128) {
    if let Ok(x) = i8::try_from(v) {
        buf.push(x as u8)
    } else if let Ok(x) = i16::try_from(v) {
        buf.extend_from_slice(&x.to_le_bytes())
    } else if let Ok(x) = i32::try_from(v) {
        buf.extend_from_slice(&x.to_le_bytes())
    } else if let Ok(x) = i64::try_from(v) {
        buf.extend_from_slice(&x.to_le_bytes())
    } else {
        buf.extend_from_slice(&v.to_le_bytes())
    }
}

#[inline]
pub(crate) fn get_compact(b: &[u8]) -> Result<i128> {
    Ok(match b.len() {
        1 => b[0] as i8 as i128,
        2 => i16::from_le_bytes([b[0], b[1]]) as i128,
        4 => i32::from_le_bytes(b.try_into().expect("len 4")) as i128,
        8 => i64::from_le_bytes(b.try_into().expect("len 8")) as i128,
        16 => i128::from_le_bytes(b.try_into().expect("len 16")),
        n => return Err(invalid_input!("corrupt row value: integer of {n} bytes")),
    })
}

/// An integer value's bytes (see [`get_compact`]) as i64; None for a
/// 16-byte value past i64 (the caller names the column's type in its
/// error).
#[inline]
pub(crate) fn get_compact_i64(b: &[u8]) -> Result<Option<i64>> {
    Ok(Some(match b.len() {
        1 => b[0] as i8 as i64,
        2 => i16::from_le_bytes([b[0], b[1]]) as i64,
        4 => i32::from_le_bytes(b.try_into().expect("len 4")) as i64,
        8 => i64::from_le_bytes(b.try_into().expect("len 8")),
        _ => return Ok(i64::try_from(get_compact(b)?).ok()),
    }))
}

impl RowEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes `(column id, value)` pairs (any order) as one row value,
    /// appended to `out`.
    pub fn encode(&mut self, cols: &[(i64, Datum<'_>)], out: &mut Vec<u8>) -> Result<()> {
        self.values.clear();
        self.not_null.clear();
        self.nulls.clear();
        self.order.clear();
        self.order.extend(0..cols.len());
        self.order.sort_unstable_by_key(|&i| cols[i].0);
        let mut max_id = 0i64;
        for w in self.order.windows(2) {
            if cols[w[0]].0 == cols[w[1]].0 {
                return Err(invalid_input!("column id {} given twice", cols[w[0]].0));
            }
        }
        for &i in &self.order {
            let (id, d) = cols[i];
            if !(0..=u32::MAX as i64).contains(&id) {
                return Err(invalid_input!("column id {id} out of range"));
            }
            max_id = max_id.max(id);
            match d {
                Datum::Null => {
                    self.nulls.push(id);
                    continue;
                }
                Datum::Int(v) => put_compact(&mut self.values, v as i128),
                Datum::Date(v) => put_compact(&mut self.values, v as i128),
                Datum::Decimal(v) => put_compact(&mut self.values, v),
                Datum::Float(v) => self.values.extend_from_slice(&v.to_le_bytes()),
                Datum::Bytes(b) => self.values.extend_from_slice(b),
                Datum::Bool(b) => self.values.push(b as u8),
            }
            self.not_null.push((id, self.values.len()));
        }
        if self.not_null.len() > u16::MAX as usize || self.nulls.len() > u16::MAX as usize {
            return Err(invalid_input!("too many columns in one row"));
        }
        let big = max_id > u8::MAX as i64 || self.values.len() > u16::MAX as usize;
        out.push(VERSION);
        out.push(if big { FLAG_BIG } else { 0 });
        out.extend_from_slice(&(self.not_null.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.nulls.len() as u16).to_le_bytes());
        let ids = self
            .not_null
            .iter()
            .map(|(id, _)| *id)
            .chain(self.nulls.iter().copied());
        if big {
            ids.for_each(|id| out.extend_from_slice(&(id as u32).to_le_bytes()));
            for (_, end) in &self.not_null {
                out.extend_from_slice(&(*end as u32).to_le_bytes());
            }
        } else {
            ids.for_each(|id| out.push(id as u8));
            for (_, end) in &self.not_null {
                out.extend_from_slice(&(*end as u16).to_le_bytes());
            }
        }
        out.extend_from_slice(&self.values);
        Ok(())
    }
}

/// One value's bytes as a row holds them (a column default's encoding,
/// `ColumnDef.default_value`); None for NULL.
pub fn encode_value(d: &Datum<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match *d {
        Datum::Null => return None,
        Datum::Int(v) => put_compact(&mut out, v as i128),
        Datum::Date(v) => put_compact(&mut out, v as i128),
        Datum::Decimal(v) => put_compact(&mut out, v),
        Datum::Float(v) => out.extend_from_slice(&v.to_le_bytes()),
        Datum::Bytes(b) => out.extend_from_slice(b),
        Datum::Bool(b) => out.push(b as u8),
    }
    Some(out)
}

/// A value encoded by [`encode_value`] as a one-row array of type `dt`.
pub fn decode_value(bytes: &[u8], dt: &DataType) -> Result<ArrayRef> {
    let mut b = Builder::new(dt, 1)?;
    b.append_bytes(bytes)?;
    b.finish()
}

/// Where a column is in a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lookup<'a> {
    Value(&'a [u8]),
    Null,
    /// Neither stored nor recorded as NULL (added after the row was written).
    Absent,
}

/// A parsed row header over a borrowed value.
pub struct RowView<'a> {
    big: bool,
    not_null: usize,
    nulls: usize,
    ids: &'a [u8],
    offsets: &'a [u8],
    values: &'a [u8],
}

impl<'a> RowView<'a> {
    pub fn new(v: &'a [u8]) -> Result<Self> {
        if v.len() < HEADER_LEN || v[0] != VERSION {
            return Err(invalid_input!("corrupt row value: bad header"));
        }
        let big = v[1] & FLAG_BIG != 0;
        let not_null = u16::from_le_bytes([v[2], v[3]]) as usize;
        let nulls = u16::from_le_bytes([v[4], v[5]]) as usize;
        let (id_w, off_w) = if big { (4, 4) } else { (1, 2) };
        let ids_end = HEADER_LEN + (not_null + nulls) * id_w;
        let offs_end = ids_end + not_null * off_w;
        if v.len() < offs_end {
            return Err(invalid_input!("corrupt row value: truncated header"));
        }
        let view = RowView {
            big,
            not_null,
            nulls,
            ids: &v[HEADER_LEN..ids_end],
            offsets: &v[ids_end..offs_end],
            values: &v[offs_end..],
        };
        if not_null > 0 && view.end(not_null - 1) > view.values.len() {
            return Err(invalid_input!("corrupt row value: offsets past the end"));
        }
        Ok(view)
    }

    #[inline]
    fn id(&self, i: usize) -> i64 {
        if self.big {
            u32::from_le_bytes(self.ids[i * 4..i * 4 + 4].try_into().expect("4")) as i64
        } else {
            self.ids[i] as i64
        }
    }

    #[inline]
    fn end(&self, i: usize) -> usize {
        if self.big {
            u32::from_le_bytes(self.offsets[i * 4..i * 4 + 4].try_into().expect("4")) as usize
        } else {
            u16::from_le_bytes([self.offsets[i * 2], self.offsets[i * 2 + 1]]) as usize
        }
    }

    fn search(&self, lo: usize, hi: usize, id: i64) -> Option<usize> {
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.id(mid).cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Number of non-NULL values the row stores.
    pub fn num_values(&self) -> usize {
        self.not_null
    }

    /// Finds column `id` by binary search over the sorted id lists.
    #[inline]
    pub fn get(&self, id: i64) -> Result<Lookup<'a>> {
        if let Some(i) = self.search(0, self.not_null, id) {
            let start = if i == 0 { 0 } else { self.end(i - 1) };
            let end = self.end(i);
            if start > end {
                return Err(invalid_input!("corrupt row value: offsets out of order"));
            }
            return Ok(Lookup::Value(&self.values[start..end]));
        }
        if self
            .search(self.not_null, self.not_null + self.nulls, id)
            .is_some()
        {
            return Ok(Lookup::Null);
        }
        Ok(Lookup::Absent)
    }
}

/// An Arrow builder for one output column.
enum Builder {
    Int64(Int64Builder),
    Float64(Float64Builder),
    Decimal(Decimal128Builder, u8, i8),
    Date32(Date32Builder),
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
}

impl Builder {
    fn new(dt: &DataType, cap: usize) -> Result<Self> {
        Ok(match dt {
            DataType::Int64 => Builder::Int64(Int64Builder::with_capacity(cap)),
            DataType::Float64 => Builder::Float64(Float64Builder::with_capacity(cap)),
            DataType::Decimal128(p, s) => {
                Builder::Decimal(Decimal128Builder::with_capacity(cap), *p, *s)
            }
            DataType::Date32 => Builder::Date32(Date32Builder::with_capacity(cap)),
            DataType::Utf8 => Builder::Utf8(StringBuilder::with_capacity(cap, cap * 16)),
            DataType::Boolean => Builder::Boolean(BooleanBuilder::with_capacity(cap)),
            other => return Err(invalid_input!("cannot decode a column of type {other}")),
        })
    }

    #[inline]
    fn append_null(&mut self) {
        match self {
            Builder::Int64(b) => b.append_null(),
            Builder::Float64(b) => b.append_null(),
            Builder::Decimal(b, ..) => b.append_null(),
            Builder::Date32(b) => b.append_null(),
            Builder::Utf8(b) => b.append_null(),
            Builder::Boolean(b) => b.append_null(),
        }
    }

    #[inline]
    fn append_bytes(&mut self, v: &[u8]) -> Result<()> {
        match self {
            Builder::Int64(b) => b.append_value(
                i64::try_from(get_compact(v)?)
                    .map_err(|_| invalid_input!("corrupt row value: BIGINT out of range"))?,
            ),
            Builder::Date32(b) => b.append_value(
                i32::try_from(get_compact(v)?)
                    .map_err(|_| invalid_input!("corrupt row value: DATE out of range"))?,
            ),
            Builder::Decimal(b, ..) => b.append_value(get_compact(v)?),
            Builder::Float64(b) => {
                let arr: [u8; 8] = v.try_into().map_err(|_| {
                    invalid_input!("corrupt row value: DOUBLE of {} bytes", v.len())
                })?;
                b.append_value(f64::from_le_bytes(arr))
            }
            Builder::Utf8(b) => b.append_value(
                std::str::from_utf8(v)
                    .map_err(|_| invalid_input!("corrupt row value: string is not UTF-8"))?,
            ),
            Builder::Boolean(b) => b.append_value(v.first().copied().unwrap_or(0) != 0),
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        Ok(match self {
            Builder::Int64(b) => Arc::new(b.finish()),
            Builder::Float64(b) => Arc::new(b.finish()),
            Builder::Decimal(b, p, s) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| internal!("decimal type: {e}"))?,
            ),
            Builder::Date32(b) => Arc::new(b.finish()),
            Builder::Utf8(b) => Arc::new(b.finish()),
            Builder::Boolean(b) => Arc::new(b.finish()),
        })
    }
}

/// Decodes chosen columns of many rows into Arrow arrays.
pub struct RowDecoder {
    ids: Vec<i64>,
    builders: Vec<Builder>,
    types: Vec<DataType>,
    /// Per column, what a row without it reads as ([`encode_value`]'s
    /// bytes; None: NULL).
    defaults: Vec<Option<Vec<u8>>>,
    rows: usize,
}

impl RowDecoder {
    /// `columns`: (column id, type) of each output column, in output order.
    pub fn new(columns: &[(i64, DataType)], capacity: usize) -> Result<Self> {
        Ok(RowDecoder {
            ids: columns.iter().map(|(id, _)| *id).collect(),
            builders: columns
                .iter()
                .map(|(_, dt)| Builder::new(dt, capacity))
                .collect::<Result<_>>()?,
            types: columns.iter().map(|(_, dt)| dt.clone()).collect(),
            defaults: vec![None; columns.len()],
            rows: 0,
        })
    }

    /// What a row without each column reads as (a column added with a
    /// DEFAULT after the row was written), in output order.
    pub fn with_defaults(mut self, defaults: Vec<Option<Vec<u8>>>) -> Result<Self> {
        if defaults.len() != self.ids.len() {
            return Err(internal!(
                "{} defaults for {} columns",
                defaults.len(),
                self.ids.len()
            ));
        }
        self.defaults = defaults;
        Ok(self)
    }

    /// Rows decoded since the last [`RowDecoder::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends one row's requested columns to the builders.
    #[inline]
    pub fn decode(&mut self, value: &[u8]) -> Result<()> {
        self.decode_view(&RowView::new(value)?)
    }

    /// [`RowDecoder::decode`] of a row whose header is already parsed.
    #[inline]
    pub fn decode_view(&mut self, row: &RowView<'_>) -> Result<()> {
        for ((id, builder), default) in self
            .ids
            .iter()
            .zip(self.builders.iter_mut())
            .zip(&self.defaults)
        {
            match (row.get(*id)?, default.as_deref()) {
                (Lookup::Value(v), _) | (Lookup::Absent, Some(v)) => builder.append_bytes(v)?,
                (Lookup::Null | Lookup::Absent, _) => builder.append_null(),
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// The decoded columns; the decoder is empty again afterwards.
    pub fn finish(&mut self) -> Result<Vec<ArrayRef>> {
        self.rows = 0;
        self.builders.iter_mut().map(Builder::finish).collect()
    }

    pub fn types(&self) -> &[DataType] {
        &self.types
    }
}

/// Encodes rows `0..len` of `columns` as row values, column `i` under id
/// `i`, each prefixed with its u32 LE length: the coprocessor's `ROWS`
/// response encoding, kept as the pre-chunk baseline.
pub fn encode_rows(columns: &[ArrayRef], out: &mut Vec<u8>) -> Result<()> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int64Type};
    let len = columns.first().map(|c| c.len()).unwrap_or(0);
    let mut enc = RowEncoder::new();
    let mut datums: Vec<(i64, Datum)> = Vec::with_capacity(columns.len());
    let mut row = Vec::new();
    for r in 0..len {
        datums.clear();
        for (i, c) in columns.iter().enumerate() {
            let d = if c.is_null(r) {
                Datum::Null
            } else {
                match c.data_type() {
                    DataType::Int64 => Datum::Int(c.as_primitive::<Int64Type>().value(r)),
                    DataType::Float64 => Datum::Float(c.as_primitive::<Float64Type>().value(r)),
                    DataType::Decimal128(..) => {
                        Datum::Decimal(c.as_primitive::<Decimal128Type>().value(r))
                    }
                    DataType::Date32 => Datum::Date(c.as_primitive::<Date32Type>().value(r)),
                    DataType::Utf8 => Datum::Bytes(c.as_string::<i32>().value(r).as_bytes()),
                    DataType::Boolean => Datum::Bool(c.as_boolean().value(r)),
                    other => return Err(invalid_input!("cannot row-encode {other}")),
                }
            };
            datums.push((i as i64, d));
        }
        row.clear();
        enc.encode(&datums, &mut row)?;
        out.extend_from_slice(&(row.len() as u32).to_le_bytes());
        out.extend_from_slice(&row);
    }
    Ok(())
}

/// Decodes a `ROWS` response body (see [`encode_rows`]) into columns of
/// `types`.
pub fn decode_rows(mut data: &[u8], types: &[DataType]) -> Result<Vec<ArrayRef>> {
    let cols: Vec<(i64, DataType)> = types
        .iter()
        .enumerate()
        .map(|(i, t)| (i as i64, t.clone()))
        .collect();
    let mut dec = RowDecoder::new(&cols, 1024)?;
    while !data.is_empty() {
        let len = data
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
            .ok_or_else(|| invalid_input!("truncated ROWS response"))?;
        let row = data
            .get(4..4 + len)
            .ok_or_else(|| invalid_input!("truncated ROWS response"))?;
        dec.decode(row)?;
        data = &data[4 + len..];
    }
    dec.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int64Type};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Val {
        Null,
        Int(i64),
        Float(f64),
        Dec(i128),
        Date(i32),
        Str(String),
    }

    fn val_strategy() -> impl Strategy<Value = Val> {
        prop_oneof![
            Just(Val::Null),
            any::<i64>().prop_map(Val::Int),
            any::<f64>()
                .prop_filter("no NaN", |f| !f.is_nan())
                .prop_map(Val::Float),
            (-(10i128.pow(38)) + 1..10i128.pow(38)).prop_map(Val::Dec),
            any::<i32>().prop_map(Val::Date),
            ".{0,40}".prop_map(Val::Str),
        ]
    }

    fn type_of(v: &Val) -> DataType {
        match v {
            Val::Null | Val::Int(_) => DataType::Int64,
            Val::Float(_) => DataType::Float64,
            Val::Dec(_) => DataType::Decimal128(38, 4),
            Val::Date(_) => DataType::Date32,
            Val::Str(_) => DataType::Utf8,
        }
    }

    fn datum(v: &Val) -> Datum<'_> {
        match v {
            Val::Null => Datum::Null,
            Val::Int(x) => Datum::Int(*x),
            Val::Float(x) => Datum::Float(*x),
            Val::Dec(x) => Datum::Decimal(*x),
            Val::Date(x) => Datum::Date(*x),
            Val::Str(s) => Datum::Bytes(s.as_bytes()),
        }
    }

    fn check(arr: &ArrayRef, v: &Val) {
        match v {
            Val::Null => assert!(arr.is_null(0)),
            Val::Int(x) => assert_eq!(arr.as_primitive::<Int64Type>().value(0), *x),
            Val::Float(x) => assert_eq!(arr.as_primitive::<Float64Type>().value(0), *x),
            Val::Dec(x) => assert_eq!(arr.as_primitive::<Decimal128Type>().value(0), *x),
            Val::Date(x) => assert_eq!(arr.as_primitive::<Date32Type>().value(0), *x),
            Val::Str(s) => assert_eq!(arr.as_string::<i32>().value(0), s),
        }
    }

    proptest! {
        /// Any row, with column ids small or large, decodes back exactly,
        /// and asking for a subset (in any order) returns just that subset.
        #[test]
        fn rows_round_trip(
            vals in prop::collection::vec(val_strategy(), 0..20),
            big_ids in any::<bool>(),
            pick in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let id = |i: usize| if big_ids { 1000 + 7 * i as i64 } else { 1 + 3 * i as i64 };
            let cols: Vec<(i64, Datum)> =
                vals.iter().enumerate().map(|(i, v)| (id(i), datum(v))).collect();
            let mut buf = Vec::new();
            RowEncoder::new().encode(&cols, &mut buf).unwrap();

            let all: Vec<(i64, DataType)> =
                vals.iter().enumerate().map(|(i, v)| (id(i), type_of(v))).collect();
            let mut dec = RowDecoder::new(&all, 1).unwrap();
            dec.decode(&buf).unwrap();
            let arrays = dec.finish().unwrap();
            for (arr, v) in arrays.iter().zip(&vals) {
                check(arr, v);
            }
            if !vals.is_empty() {
                let subset: Vec<usize> = pick.iter().map(|p| p.index(vals.len())).collect();
                let want: Vec<(i64, DataType)> =
                    subset.iter().map(|&i| (id(i), type_of(&vals[i]))).collect();
                let mut dec = RowDecoder::new(&want, 1).unwrap();
                dec.decode(&buf).unwrap();
                for (arr, &i) in dec.finish().unwrap().iter().zip(&subset) {
                    check(arr, &vals[i]);
                }
            }
        }

        /// Garbage never panics the decoder.
        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let cols = [(1, DataType::Int64), (2, DataType::Utf8), (300, DataType::Float64)];
            let mut dec = RowDecoder::new(&cols, 1).unwrap();
            let _ = dec.decode(&bytes);
        }
    }

    #[test]
    fn absent_columns_read_as_null() {
        let mut buf = Vec::new();
        RowEncoder::new()
            .encode(&[(1, Datum::Int(5)), (3, Datum::Null)], &mut buf)
            .unwrap();
        let view = RowView::new(&buf).unwrap();
        assert_eq!(view.get(1).unwrap(), Lookup::Value(&[5]));
        assert_eq!(view.get(3).unwrap(), Lookup::Null);
        assert_eq!(view.get(2).unwrap(), Lookup::Absent);
    }

    #[test]
    fn absent_columns_read_as_their_default_and_nulls_stay_null() {
        let mut enc = RowEncoder::new();
        let (mut old, mut new) = (Vec::new(), Vec::new());
        enc.encode(&[(1, Datum::Int(7))], &mut old).unwrap();
        enc.encode(&[(1, Datum::Int(8)), (2, Datum::Null)], &mut new)
            .unwrap();
        let default = encode_value(&Datum::Decimal(1250)).unwrap();
        let dt = DataType::Decimal128(10, 2);
        let mut dec = RowDecoder::new(&[(1, DataType::Int64), (2, dt.clone())], 2)
            .unwrap()
            .with_defaults(vec![None, Some(default.clone())])
            .unwrap();
        dec.decode(&old).unwrap();
        dec.decode(&new).unwrap();
        let cols = dec.finish().unwrap();
        let v = cols[1].as_primitive::<arrow::datatypes::Decimal128Type>();
        assert_eq!((v.value(0), v.is_null(1)), (1250, true));
        let one = decode_value(&default, &dt).unwrap();
        assert_eq!(
            one.as_primitive::<arrow::datatypes::Decimal128Type>()
                .value(0),
            1250
        );
    }

    #[test]
    fn duplicate_ids_are_rejected() {
        let mut buf = Vec::new();
        let err = RowEncoder::new()
            .encode(&[(1, Datum::Int(5)), (1, Datum::Int(6))], &mut buf)
            .unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
    }

    #[test]
    fn rows_encoding_round_trips_batches() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(arrow::array::Int64Array::from(vec![
                Some(1),
                None,
                Some(-3),
            ])),
            Arc::new(arrow::array::StringArray::from(vec!["a", "bc", ""])),
        ];
        let mut buf = Vec::new();
        encode_rows(&cols, &mut buf).unwrap();
        let back = decode_rows(&buf, &[DataType::Int64, DataType::Utf8]).unwrap();
        assert_eq!(back[0].as_ref(), cols[0].as_ref());
        assert_eq!(back[1].as_ref(), cols[1].as_ref());
    }
}
