//! The table scan: reads row-layout KVs through the [`Storage`] trait and
//! decodes only the requested columns, straight into Arrow builders.
//!
//! With no columns requested (a `COUNT(*)`), the scan runs key-only and
//! emits column-less batches that carry just a row count: no value is read
//! or decoded.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::codec::row::RowDecoder;
use crate::storage::{KeyRange, Storage};
use crate::Result;

pub struct TableScanExecutor<S: Storage> {
    storage: S,
    schema: SchemaRef,
    decoder: RowDecoder,
    key_only: bool,
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
}

impl<S: Storage> TableScanExecutor<S> {
    /// `columns`: (column id, type) per output column.
    pub fn new(storage: S, columns: &[(i64, DataType)], ranges: Vec<KeyRange>) -> Result<Self> {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(id, t)| Field::new(format!("col_{id}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ));
        Ok(TableScanExecutor {
            storage,
            schema,
            decoder: RowDecoder::new(columns, 1024)?,
            key_only: columns.is_empty(),
            ranges,
            current: 0,
            started: false,
            last_key: Vec::new(),
            has_last_key: false,
            scanned_keys: 0,
            scanned_bytes: 0,
        })
    }
}

impl<S: Storage> BatchExecutor for TableScanExecutor<S> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let mut rows = 0usize;
        while rows < scan_rows && self.current < self.ranges.len() {
            if !self.started {
                self.storage
                    .begin_scan(&self.ranges[self.current], self.key_only)?;
                self.started = true;
                self.has_last_key = false;
            }
            while rows < scan_rows {
                match self.storage.scan_next()? {
                    Some((k, v)) => {
                        if !self.key_only {
                            self.decoder.decode(v)?;
                        }
                        self.scanned_bytes += (k.len() + v.len()) as u64;
                        rows += 1;
                        self.last_key.clear();
                        self.last_key.extend_from_slice(k);
                        self.has_last_key = true;
                    }
                    None => {
                        self.current += 1;
                        self.started = false;
                        break;
                    }
                }
            }
        }
        self.scanned_keys += rows as u64;
        let columns = if self.key_only {
            vec![]
        } else {
            self.decoder.finish()?
        };
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        Ok(BatchResult {
            chunk: Chunk::new(batch),
            is_drained: self.current >= self.ranges.len(),
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        s.scanned_keys += self.scanned_keys;
        s.scanned_bytes += self.scanned_bytes;
    }

    fn remaining_ranges(&self) -> Vec<KeyRange> {
        let mut out = Vec::new();
        if let Some(r) = self.ranges.get(self.current) {
            let start = if self.started && self.has_last_key {
                // Resume just after the last key returned.
                let mut s = self.last_key.clone();
                s.push(0);
                s
            } else {
                r.start.clone()
            };
            out.push(KeyRange::new(start, r.end.clone()));
            out.extend(self.ranges[self.current + 1..].iter().cloned());
        }
        out
    }
}
