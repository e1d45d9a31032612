//! Batch executors: a pull pipeline over Arrow record batches.
//!
//! ```text
//!   TableScan ─▶ Selection ─▶ Aggregation (partial)
//!                          └▶ [TopN] ─▶ Projection ─▶ Limit
//!   FusedAggregation (scan + filter + partial aggregation in one pass)
//! ```
//!
//! The table scan reads both storage layouts (`scan.rs`); an aggregation
//! whose every part has a fused form runs as one executor over the stored
//! integers instead (`fused/`), falling back to the generic executors
//! block by block. The filter kernels both run on a pack's stored bytes,
//! and the rule that turns a comparison into the range they test, are in
//! `kernels.rs`.
//!
//! THE CONTRACT (after TiKV's `BatchExecutor`): `next_batch(scan_rows)` asks
//! for at most about `scan_rows` rows' worth of work and returns a
//! [`Chunk`] plus `is_drained`. A chunk may be empty without the executor
//! being drained; only `is_drained` ends the pull. After `is_drained` the
//! executor must not be called again.
//!
//! A chunk carries its rows' physical columns and an optional *selection*:
//! a bitmap of the rows still alive. Selection sets bits; it never copies
//! columns. Executors that need compact columns (the final encode, LIMIT)
//! call [`Chunk::materialize`].

mod aggregation;
pub mod fused;
pub mod kernels;
mod limit;
mod projection;
mod scan;
mod selection;
mod top_n;

pub use aggregation::AggregationExecutor;
pub use fused::{FusedAggExecutor, FusedPlan};
pub use limit::LimitExecutor;
pub use projection::ProjectionExecutor;
pub use scan::{KvScanner, TableScanExecutor, ZoneFilter};
pub use selection::{filter_chunk, order_conditions, SelectionExecutor};
pub use top_n::{SortKey, TopNExecutor};

use arrow::array::{BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use quarry_proto::coprocessor::ExecSummary;

use crate::storage::KeyRange;
use crate::Result;

/// Rows flowing between executors.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub batch: RecordBatch,
    /// Rows still selected; None = all.
    pub selection: Option<BooleanBuffer>,
}

impl Chunk {
    pub fn new(batch: RecordBatch) -> Self {
        Chunk {
            batch,
            selection: None,
        }
    }

    pub fn num_selected(&self) -> usize {
        match &self.selection {
            Some(s) => s.count_set_bits(),
            None => self.batch.num_rows(),
        }
    }

    /// The selected rows as a compact batch.
    pub fn materialize(self) -> Result<RecordBatch> {
        match self.selection {
            None => Ok(self.batch),
            Some(s) if s.count_set_bits() == s.len() => Ok(self.batch),
            Some(s) => Ok(filter_record_batch(
                &self.batch,
                &BooleanArray::new(s, None),
            )?),
        }
    }
}

pub struct BatchResult {
    pub chunk: Chunk,
    pub is_drained: bool,
}

pub trait BatchExecutor {
    fn schema(&self) -> SchemaRef;

    /// The next chunk; see the module docs for the contract.
    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult>;

    /// Adds this executor's (and its children's) counters to `summary`.
    fn collect_summary(&self, summary: &mut ExecSummary);

    /// The key ranges not scanned yet, for resuming a response that was cut
    /// short by its byte limit.
    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>>;
}

impl BatchExecutor for Box<dyn BatchExecutor + '_> {
    fn schema(&self) -> SchemaRef {
        (**self).schema()
    }
    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        (**self).next_batch(scan_rows)
    }
    fn collect_summary(&self, summary: &mut ExecSummary) {
        (**self).collect_summary(summary)
    }
    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        (**self).remaining_ranges()
    }
}
