//! A pack column into an Arrow array of its SQL type: every row
//! ([`ColumnView::to_arrow`], what a scan without a filter on the pack
//! needs) or the rows a filter picked ([`ColumnView::to_arrow_at`], late
//! materialization). Both are one dispatch on the stored encoding and the
//! SQL type, so both make the same checks: the encoding must hold the type,
//! a decimal must fit its precision, and strings must be UTF-8 (corrupt
//! bytes are errors, never panics or wrong values).

use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::DataType;

use super::view::{bit, null_buffer};
use super::{ColumnView, PackView};
use crate::codec::row::Datum;
use crate::types::fits_precision;
use crate::{internal, invalid_input, Result};

/// Which rows of a column to decode.
#[derive(Debug, Clone, Copy)]
enum Rows<'s> {
    /// Rows `0..n`.
    All(usize),
    /// These rows, ascending.
    At(&'s [u32]),
}

impl Rows<'_> {
    fn len(self) -> usize {
        match self {
            Rows::All(n) => n,
            Rows::At(sel) => sel.len(),
        }
    }

    /// The rows' validity, from a column's bitmap (None: no NULL).
    fn nulls(self, bits: Option<&[u8]>) -> Option<NullBuffer> {
        match self {
            Rows::All(n) => null_buffer(bits, n),
            Rows::At(sel) => {
                let b = bits?;
                let nb = NullBuffer::from_iter(sel.iter().map(|i| bit(b, *i as usize)));
                (nb.null_count() > 0).then_some(nb)
            }
        }
    }

    /// The rows' values of a column of `W`-byte values, each read by `f`.
    fn fixed<T, const W: usize>(self, data: &[u8], f: impl Fn([u8; W]) -> T) -> Vec<T> {
        let read = |b: &[u8]| f(std::array::from_fn(|k| b[k]));
        match self {
            Rows::All(n) => data[..n * W].chunks_exact(W).map(read).collect(),
            Rows::At(sel) => sel
                .iter()
                .map(|i| read(&data[*i as usize * W..(*i as usize + 1) * W]))
                .collect(),
        }
    }
}

/// A string offset as Arrow's i32.
fn offset32(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| invalid_input!("corrupt pack (strings past 2 GiB)"))
}

fn utf8(b: &[u8]) -> Result<&str> {
    std::str::from_utf8(b).map_err(|_| invalid_input!("corrupt pack (string is not UTF-8)"))
}

/// A DECIMAL(p, s) array of stored unscaled values, which must fit `p`.
fn decimal_array(vals: Vec<i128>, nulls: Option<NullBuffer>, p: u8, s: i8) -> Result<ArrayRef> {
    if !vals.iter().all(|v| fits_precision(*v, p)) {
        return Err(invalid_input!(
            "corrupt pack (decimal exceeds its precision)"
        ));
    }
    Ok(Arc::new(
        Decimal128Array::new(ScalarBuffer::from(vals), nulls).with_precision_and_scale(p, s)?,
    ))
}

impl ColumnView<'_> {
    /// Decodes the column into an Arrow array of the column's SQL type.
    pub fn to_arrow(&self, dt: &DataType, rows: usize) -> Result<ArrayRef> {
        self.decode(dt, Rows::All(rows))
    }

    /// Decodes the rows `sel` (ascending) into an Arrow array of the
    /// column's SQL type: late materialization, after a filter on other
    /// columns picked the rows.
    pub fn to_arrow_at(&self, dt: &DataType, sel: &[u32]) -> Result<ArrayRef> {
        self.decode(dt, Rows::At(sel))
    }

    /// The one dispatch on encoding and type behind both.
    fn decode(&self, dt: &DataType, rows: Rows<'_>) -> Result<ArrayRef> {
        let mismatch = || internal!("pack column does not hold {dt}");
        Ok(match self {
            ColumnView::Null => new_null_array(dt, rows.len()),
            ColumnView::Int(v) => {
                let mut vals = Vec::with_capacity(rows.len());
                match rows {
                    Rows::All(_) => v.decode_into(&mut vals),
                    Rows::At(sel) => v.gather_into(sel, &mut vals),
                }
                let nulls = rows.nulls(v.nulls);
                match dt {
                    DataType::Int64 => Arc::new(Int64Array::new(ScalarBuffer::from(vals), nulls)),
                    DataType::Date32 => Arc::new(Date32Array::new(
                        vals.into_iter().map(|x| x as i32).collect(),
                        nulls,
                    )),
                    DataType::Decimal128(p, s) => {
                        decimal_array(vals.into_iter().map(|x| x as i128).collect(), nulls, *p, *s)?
                    }
                    _ => return Err(mismatch()),
                }
            }
            ColumnView::F64 { data, nulls } => {
                if *dt != DataType::Float64 {
                    return Err(mismatch());
                }
                Arc::new(Float64Array::new(
                    ScalarBuffer::from(rows.fixed(data, f64::from_le_bytes)),
                    rows.nulls(*nulls),
                ))
            }
            ColumnView::I128 { data, nulls } => {
                let DataType::Decimal128(p, s) = dt else {
                    return Err(mismatch());
                };
                decimal_array(
                    rows.fixed(data, i128::from_le_bytes),
                    rows.nulls(*nulls),
                    *p,
                    *s,
                )?
            }
            ColumnView::Dict(_) | ColumnView::Plain { .. } => {
                if *dt != DataType::Utf8 {
                    return Err(mismatch());
                }
                match rows {
                    Rows::All(n) => self.strings(n)?,
                    Rows::At(sel) => self.strings_at(sel)?,
                }
            }
        })
    }

    /// Every row of a string column.
    fn strings(&self, rows: usize) -> Result<ArrayRef> {
        Ok(match self {
            ColumnView::Dict(d) => {
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
                let offs: Vec<i32> = offsets
                    .chunks_exact(4)
                    .map(|c| offset32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize))
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
            _ => return Err(internal!("not a string column")),
        })
    }

    /// The rows `sel` of a string column.
    fn strings_at(&self, sel: &[u32]) -> Result<ArrayRef> {
        let mut offsets = Vec::with_capacity(sel.len() + 1);
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
        Ok(Arc::new(StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(bytes),
            Rows::At(sel).nulls(nbits),
        )?))
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
