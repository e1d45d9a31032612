//! Arrow IPC stream encoding: how column chunks travel between processes.

use std::io::Cursor;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

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
