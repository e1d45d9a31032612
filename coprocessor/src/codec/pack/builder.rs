//! Building a pack row by row: [`PackBuilder`] collects each column's
//! values (from datums, row-layout values or another pack's rows) until
//! [`PackBuilder::finish`] hands them to `encode.rs`.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;

use super::encode::pack_value;
use super::{is_int_type, ColumnView, PackView, HANDLE_COLUMN_ID, PACK_MAX_BYTES, PACK_ROWS};
use crate::codec::row::{get_compact, Datum, Lookup, RowView};
use crate::{internal, invalid_input, Result};

/// One column's values so far, in the form its encoding starts from.
pub(super) enum ColumnBuffer {
    Int(Vec<i64>),
    F64(Vec<f64>),
    I128(Vec<i128>),
    Bytes { offsets: Vec<u32>, data: Vec<u8> },
}

/// One column of a pack being built.
pub(super) struct ColumnBuilder {
    pub(super) id: i64,
    data_type: DataType,
    pub(super) values: ColumnBuffer,
    /// One per row; false = NULL.
    pub(super) valid: Vec<bool>,
    pub(super) nulls: usize,
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
                    i64::try_from(get_compact(bytes)?)
                        .map_err(|_| invalid_input!("corrupt row value: BIGINT out of range"))?,
                ),
                DataType::Date32 => Datum::Date(
                    i32::try_from(get_compact(bytes)?)
                        .map_err(|_| invalid_input!("corrupt row value: DATE out of range"))?,
                ),
                _ => Datum::Decimal(get_compact(bytes)?),
            },
            ColumnBuffer::I128(_) => Datum::Decimal(get_compact(bytes)?),
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

    /// Appends rows `range` of `a`, an array of this column's Arrow type,
    /// column-wise (a NULL's slot holds 0 or nothing, as [`Self::push`]
    /// leaves it). Another type goes value by value through a datum.
    fn push_array(&mut self, a: &ArrayRef, range: std::ops::Range<usize>) -> Result<()> {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int64Type};
        let n = range.len();
        let start = match &self.values {
            ColumnBuffer::Int(v) => v.len(),
            ColumnBuffer::F64(v) => v.len(),
            ColumnBuffer::I128(v) => v.len(),
            ColumnBuffer::Bytes { offsets, .. } => offsets.len() - 1,
        };
        let done = match (&mut self.values, a.data_type()) {
            (ColumnBuffer::Int(v), DataType::Int64) if a.data_type() == &self.data_type => {
                v.extend_from_slice(&a.as_primitive::<Int64Type>().values()[range.clone()]);
                true
            }
            (ColumnBuffer::Int(v), DataType::Date32) if a.data_type() == &self.data_type => {
                let src = &a.as_primitive::<Date32Type>().values()[range.clone()];
                v.extend(src.iter().map(|d| *d as i64));
                true
            }
            (ColumnBuffer::F64(v), DataType::Float64) => {
                v.extend_from_slice(&a.as_primitive::<Float64Type>().values()[range.clone()]);
                true
            }
            (ColumnBuffer::I128(v), DataType::Decimal128(..))
                if a.data_type() == &self.data_type =>
            {
                v.extend_from_slice(&a.as_primitive::<Decimal128Type>().values()[range.clone()]);
                true
            }
            (ColumnBuffer::Int(v), DataType::Decimal128(..))
                if a.data_type() == &self.data_type =>
            {
                // A decimal of precision 18 or less fits in an i64.
                let src = &a.as_primitive::<Decimal128Type>().values()[range.clone()];
                v.reserve(n);
                for x in src {
                    v.push(i64::try_from(*x).map_err(|_| {
                        invalid_input!("column {} cannot hold a decimal this wide", self.id)
                    })?);
                }
                true
            }
            (ColumnBuffer::Bytes { offsets, data }, DataType::Utf8) => {
                let s = a.as_string::<i32>();
                let lo = s.value_offsets()[range.start] as usize;
                let hi = s.value_offsets()[range.end] as usize;
                let base = data.len() as i64 - lo as i64;
                data.extend_from_slice(&s.value_data()[lo..hi]);
                if data.len() > u32::MAX as usize {
                    return Err(invalid_input!("a pack's strings exceed 4 GiB"));
                }
                offsets.extend(
                    s.value_offsets()[range.start + 1..=range.end]
                        .iter()
                        .map(|o| (*o as i64 + base) as u32),
                );
                true
            }
            _ => false,
        };
        if !done {
            for r in range {
                self.push(&crate::codec::row::array_datum(a, &self.data_type, r)?)?;
            }
            return Ok(());
        }
        match a.nulls().filter(|nulls| nulls.null_count() > 0) {
            None => self.valid.extend(std::iter::repeat_n(true, n)),
            Some(nulls) => {
                for (i, r) in range.enumerate() {
                    let valid = nulls.is_valid(r);
                    self.valid.push(valid);
                    if !valid {
                        self.nulls += 1;
                        // The slot holds what push leaves for a NULL.
                        match &mut self.values {
                            ColumnBuffer::Int(v) => v[start + i] = 0,
                            ColumnBuffer::F64(v) => v[start + i] = 0.0,
                            ColumnBuffer::I128(v) => v[start + i] = 0,
                            ColumnBuffer::Bytes { .. } => {}
                        }
                    }
                }
            }
        }
        Ok(())
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

    /// Whether the pack should be finished now: it holds [`PACK_ROWS`]
    /// rows, or its rows take [`PACK_MAX_BYTES`] in the builder (checked
    /// every 64 rows), so wide rows make packs of fewer rows rather than
    /// values past the limits a pack must stay under (a region's split
    /// size, a response page, a gRPC message). Encoding only shrinks what
    /// the builder holds, so the value is smaller still.
    pub fn is_full(&self) -> bool {
        let rows = self.handles.len();
        rows >= PACK_ROWS
            || (rows.is_multiple_of(64) && rows > 0 && self.buffered_bytes() >= PACK_MAX_BYTES)
    }

    /// Bytes the rows pushed so far take in the builder: per row a handle,
    /// and per column its value (a string's offset and bytes) and validity.
    fn buffered_bytes(&self) -> usize {
        let rows = self.handles.len();
        let columns: usize = self
            .columns
            .iter()
            .map(|c| match &c.values {
                ColumnBuffer::Int(_) | ColumnBuffer::F64(_) => 9 * rows,
                ColumnBuffer::I128(_) => 17 * rows,
                ColumnBuffer::Bytes { data, .. } => 5 * rows + data.len(),
            })
            .sum();
        8 * rows + columns
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

    /// Appends rows of `arrays` (one per column, in the builder's order
    /// and of the columns' Arrow types) column by column, with their
    /// `handles` (one per row of the arrays, ascending), starting at row
    /// `from`, until the pack is full ([`PACK_ROWS`] rows or
    /// [`PACK_MAX_BYTES`], checked every 64 rows) or `to` is reached.
    /// Returns the row it stopped before: `to`, or where the pack filled
    /// (finish it and call again from there).
    pub fn push_arrays(
        &mut self,
        handles: &[i64],
        arrays: &[ArrayRef],
        from: usize,
        to: usize,
    ) -> Result<usize> {
        if arrays.len() != self.columns.len() {
            return Err(invalid_input!(
                "a batch has {} columns, the table {}",
                arrays.len(),
                self.columns.len()
            ));
        }
        let mut at = from;
        while at < to {
            let room = PACK_ROWS - self.handles.len();
            let n = (to - at).min(64).min(room);
            if n == 0 {
                break;
            }
            if let Some(h) = handles.get(at) {
                self.check_handle(*h)?;
            }
            if handles[at..at + n].windows(2).any(|w| w[0] >= w[1]) {
                return Err(invalid_input!(
                    "pack rows must come in ascending handle order"
                ));
            }
            for (c, a) in self.columns.iter_mut().zip(arrays) {
                c.push_array(a, at..at + n)?;
            }
            self.handles.extend_from_slice(&handles[at..at + n]);
            at += n;
            if self.handles.len() >= PACK_ROWS || self.buffered_bytes() >= PACK_MAX_BYTES {
                break;
            }
        }
        Ok(at)
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
        let value = pack_value(&self.handles, &self.columns)?;
        self.handles.clear();
        for c in &mut self.columns {
            c.clear();
        }
        Ok((first, value))
    }
}
