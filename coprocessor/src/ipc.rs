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
