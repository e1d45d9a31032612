//! Top-N: keeps the first `limit` rows by the sort keys, ships only those.
//!
//! `ORDER BY … LIMIT k` over a table needs only each region's own top k:
//! the rows a region does not send could not be in the answer. So a region
//! keeps a buffer of at most k candidate rows (the scan's columns, after
//! the selection), folds each new batch into it with Arrow's partial sort
//! (`lexsort_to_indices` with a limit), and emits the buffer once its input
//! is drained. Compute sorts the regions' candidates again and cuts to k;
//! among rows that tie on every key any k are a correct answer, so regions
//! may break ties differently.
//!
//! The buffer is compacted when it holds more than `max(2k, 4096)` rows, so
//! memory stays O(k + batch) and each row is sorted O(1) times on average.

use arrow::array::RecordBatch;
use arrow::compute::{
    concat_batches, lexsort_to_indices, take_record_batch, SortColumn, SortOptions,
};
use arrow::datatypes::SchemaRef;
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::expr::Expr;
use crate::storage::KeyRange;
use crate::Result;

/// One sort key: an expression over the executor's input, and its order.
#[derive(Debug, Clone)]
pub struct SortKey {
    pub expr: Expr,
    pub descending: bool,
    pub nulls_first: bool,
}

pub struct TopNExecutor<'a> {
    child: Box<dyn BatchExecutor + 'a>,
    keys: Vec<SortKey>,
    limit: usize,
    /// Candidate rows (compact), at most `compact_at` of them.
    buffer: Vec<RecordBatch>,
    buffered: usize,
    compact_at: usize,
    drained: bool,
}

impl<'a> TopNExecutor<'a> {
    pub fn new(child: Box<dyn BatchExecutor + 'a>, keys: Vec<SortKey>, limit: usize) -> Self {
        TopNExecutor {
            child,
            keys,
            limit,
            buffer: Vec::new(),
            buffered: 0,
            compact_at: (2 * limit).max(4096),
            drained: false,
        }
    }

    /// The first `limit` rows of the buffer, in key order.
    fn top(&mut self) -> Result<RecordBatch> {
        let schema = self.child.schema();
        let all = concat_batches(&schema, &self.buffer)?;
        let columns = self
            .keys
            .iter()
            .map(|k| {
                Ok(SortColumn {
                    values: k.expr.evaluate_to_array(&all, None)?,
                    options: Some(SortOptions {
                        descending: k.descending,
                        nulls_first: k.nulls_first,
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let indices = lexsort_to_indices(&columns, Some(self.limit.min(all.num_rows())))?;
        Ok(take_record_batch(&all, &indices)?)
    }

    fn compact(&mut self) -> Result<()> {
        let top = self.top()?;
        self.buffered = top.num_rows();
        self.buffer = vec![top];
        Ok(())
    }
}

impl BatchExecutor for TopNExecutor<'_> {
    fn schema(&self) -> SchemaRef {
        self.child.schema()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        if self.limit == 0 {
            return Ok(BatchResult {
                chunk: Chunk::new(RecordBatch::new_empty(self.schema())),
                is_drained: true,
            });
        }
        let r = self.child.next_batch(scan_rows)?;
        let batch = r.chunk.materialize()?;
        if batch.num_rows() > 0 {
            self.buffered += batch.num_rows();
            self.buffer.push(batch);
            if self.buffered > self.compact_at {
                self.compact()?;
            }
        }
        if !r.is_drained {
            return Ok(BatchResult {
                chunk: Chunk::new(RecordBatch::new_empty(self.schema())),
                is_drained: false,
            });
        }
        self.drained = true;
        let top = if self.buffer.is_empty() {
            RecordBatch::new_empty(self.schema())
        } else {
            self.top()?
        };
        self.buffer.clear();
        Ok(BatchResult {
            chunk: Chunk::new(top),
            is_drained: true,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.child.collect_summary(s)
    }

    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        if self.drained {
            Ok(vec![])
        } else {
            self.child.remaining_ranges()
        }
    }
}
