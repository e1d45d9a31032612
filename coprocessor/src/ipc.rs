//! Arrow IPC stream encoding: how column chunks travel between processes.
//!
//! NARROW DECIMALS. Quarry computes on Decimal128 (exact, wide enough for
//! any sum), but a column declared DECIMAL(p ≤ 18) holds values below
//! 10^18, which fit an i64. On the wire from a store to compute such a
//! column may travel as Decimal64 ([`narrow`], `EncodeType::ArrowDecimal64`):
//! half the bytes to encode, send, receive and copy for TPC-H's prices,
//! quantities, discounts and taxes. Compute widens it back on arrival
//! ([`widen`]), so nothing above the wire sees the difference. Partial
//! aggregates (DECIMAL(38, s) states) and p > 18 columns travel as they
//! are.

use std::io::Cursor;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Decimal128Type, Decimal64Type, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use quarry_proto::coprocessor::EncodeType;

use crate::{invalid_input, Result};

/// Encodes `batches` as one IPC stream (schema, batches, end marker).
pub fn encode(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut w = StreamWriter::try_new(Vec::new(), schema)?;
    for b in batches {
        w.write(b)?;
    }
    w.finish()?;
    Ok(w.into_inner()?)
}

/// Decodes one IPC stream held in shared bytes without copying: the
/// batches' buffers point into `bytes` (arrow realigns a buffer only if
/// it is not aligned).
pub fn decode_shared(bytes: bytes::Bytes) -> Result<Vec<RecordBatch>> {
    let mut decoder = arrow::ipc::reader::StreamDecoder::new();
    let mut buf = arrow::buffer::Buffer::from(bytes);
    let mut out = Vec::new();
    let bad = |e: arrow::error::ArrowError| invalid_input!("malformed Arrow IPC stream: {e}");
    while !buf.is_empty() {
        match decoder.decode(&mut buf).map_err(bad)? {
            Some(b) => out.push(b),
            None if buf.is_empty() => break,
            None => {}
        }
    }
    decoder.finish().map_err(bad)?;
    Ok(out)
}

/// Decodes one IPC stream into its schema and batches.
pub fn decode(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)
        .map_err(|e| invalid_input!("malformed Arrow IPC stream: {e}"))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid_input!("malformed Arrow IPC stream: {e}"))?;
    Ok((schema, batches))
}

/// The widest precision a Decimal64 holds exactly.
const DECIMAL64_MAX_PRECISION: u8 = 18;

fn narrowed(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Decimal128(p, s) if *p <= DECIMAL64_MAX_PRECISION => {
            Some(DataType::Decimal64(*p, *s))
        }
        _ => None,
    }
}

/// `schema` as [`narrow`] sends it: DECIMAL(p ≤ 18) columns as Decimal64.
pub fn narrow_schema(schema: &SchemaRef) -> SchemaRef {
    if !schema
        .fields()
        .iter()
        .any(|f| narrowed(f.data_type()).is_some())
    {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match narrowed(f.data_type()) {
            Some(t) => f.as_ref().clone().with_data_type(t),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The schema a response of `encode` travels under: `schema`, or with
/// narrow decimals its [`narrow_schema`] (the same `Arc` when nothing
/// narrows, so callers can tell with `Arc::ptr_eq`).
pub fn wire_schema(encode: EncodeType, schema: SchemaRef) -> SchemaRef {
    match encode {
        EncodeType::ArrowDecimal64 => narrow_schema(&schema),
        _ => schema,
    }
}

/// `batch` with its DECIMAL(p ≤ 18) columns as Decimal64, under `wire`
/// (its [`narrow_schema`]). Exact: such values are below 10^18.
pub fn narrow(batch: &RecordBatch, wire: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(wire.fields())
        .map(|(c, f)| -> Result<ArrayRef> {
            match (c.data_type(), f.data_type()) {
                (DataType::Decimal128(..), DataType::Decimal64(p, s)) => Ok(Arc::new(
                    c.as_primitive::<Decimal128Type>()
                        .unary::<_, Decimal64Type>(|v| v as i64)
                        .with_precision_and_scale(*p, *s)?,
                )),
                _ => Ok(c.clone()),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(wire.clone(), columns)?)
}

/// `batch` with every Decimal64 column back as the Decimal128 of the same
/// precision and scale (what [`narrow`] sent); other batches unchanged.
pub fn widen(batch: RecordBatch) -> Result<RecordBatch> {
    let narrow = |t: &DataType| matches!(t, DataType::Decimal64(..));
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| narrow(f.data_type()))
    {
        return Ok(batch);
    }
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Decimal64(p, s) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Decimal128(*p, *s)),
            _ => f.as_ref().clone(),
        })
        .collect();
    let columns = batch
        .columns()
        .iter()
        .map(|c| -> Result<ArrayRef> {
            match c.data_type() {
                DataType::Decimal64(p, s) => Ok(Arc::new(
                    c.as_primitive::<Decimal64Type>()
                        .unary::<_, Decimal128Type>(|v| v as i128)
                        .with_precision_and_scale(*p, *s)?,
                )),
                _ => Ok(c.clone()),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = Schema::new_with_metadata(fields, batch.schema().metadata().clone());
    Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array};

    #[test]
    fn narrow_decimals_travel_as_decimal64_and_come_back_exact() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("price", DataType::Decimal128(15, 2), true),
            Field::new("sum", DataType::Decimal128(38, 2), true),
            Field::new("edge", DataType::Decimal128(18, 0), true),
        ]));
        let max18 = 999_999_999_999_999_999i128;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(
                    Decimal128Array::from(vec![Some(-12345), None, Some(99_999_999_999_999)])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
                Arc::new(
                    Decimal128Array::from(vec![Some(i128::MAX / 7), Some(1), None])
                        .with_precision_and_scale(38, 2)
                        .unwrap(),
                ),
                Arc::new(
                    Decimal128Array::from(vec![Some(max18), Some(-max18), Some(0)])
                        .with_precision_and_scale(18, 0)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let wire = narrow_schema(&schema);
        assert_eq!(wire.field(1).data_type(), &DataType::Decimal64(15, 2));
        assert_eq!(wire.field(2).data_type(), &DataType::Decimal128(38, 2));
        assert_eq!(wire.field(3).data_type(), &DataType::Decimal64(18, 0));
        let sent = narrow(&batch, &wire).unwrap();
        let bytes = encode(&wire, &[sent]).unwrap();
        let got = decode_shared(bytes::Bytes::from(bytes)).unwrap();
        let back = widen(got.into_iter().next().unwrap()).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn a_narrow_decimal_column_takes_about_half_the_bytes() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "price",
            DataType::Decimal128(15, 2),
            false,
        )]));
        let values = Decimal128Array::from_iter_values((0..10_000).map(|i| i * 101))
            .with_precision_and_scale(15, 2)
            .unwrap();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
        let wide = encode(&schema, std::slice::from_ref(&batch)).unwrap().len();
        let wire = narrow_schema(&schema);
        let narrow = encode(&wire, &[narrow(&batch, &wire).unwrap()])
            .unwrap()
            .len();
        assert!(narrow * 100 < wide * 55, "{narrow} bytes vs {wide}");
    }
}
