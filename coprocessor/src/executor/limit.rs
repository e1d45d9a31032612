//! Limit: stops the pull after `limit` selected rows.

use arrow::datatypes::SchemaRef;
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::storage::KeyRange;
use crate::Result;

pub struct LimitExecutor<'a> {
    child: Box<dyn BatchExecutor + 'a>,
    remaining: usize,
}

impl<'a> LimitExecutor<'a> {
    pub fn new(child: Box<dyn BatchExecutor + 'a>, limit: usize) -> Self {
        LimitExecutor {
            child,
            remaining: limit,
        }
    }
}

impl BatchExecutor for LimitExecutor<'_> {
    fn schema(&self) -> SchemaRef {
        self.child.schema()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let r = self
            .child
            .next_batch(scan_rows.min(self.remaining.max(1)))?;
        let mut batch = r.chunk.materialize()?;
        if batch.num_rows() >= self.remaining {
            batch = batch.slice(0, self.remaining);
            self.remaining = 0;
        } else {
            self.remaining -= batch.num_rows();
        }
        Ok(BatchResult {
            chunk: Chunk::new(batch),
            is_drained: r.is_drained || self.remaining == 0,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.child.collect_summary(s)
    }

    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        if self.remaining == 0 {
            Ok(vec![])
        } else {
            self.child.remaining_ranges()
        }
    }
}
