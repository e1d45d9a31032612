//! Partial aggregation: drains its child, then emits one batch of group keys
//! and accumulator states.

use arrow::datatypes::SchemaRef;
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::aggregate::Aggregator;
use crate::storage::KeyRange;
use crate::Result;

pub struct AggregationExecutor<'a> {
    child: Box<dyn BatchExecutor + 'a>,
    aggregator: Aggregator,
    schema: SchemaRef,
}

impl<'a> AggregationExecutor<'a> {
    pub fn new(child: Box<dyn BatchExecutor + 'a>, aggregator: Aggregator) -> Self {
        let schema = aggregator.output_schema();
        AggregationExecutor {
            child,
            aggregator,
            schema,
        }
    }
}

impl BatchExecutor for AggregationExecutor<'_> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let r = self.child.next_batch(scan_rows)?;
        self.aggregator
            .update(&r.chunk.batch, r.chunk.selection.as_ref())?;
        if !r.is_drained {
            let empty = arrow::array::RecordBatch::new_empty(self.schema.clone());
            return Ok(BatchResult {
                chunk: Chunk::new(empty),
                is_drained: false,
            });
        }
        Ok(BatchResult {
            chunk: Chunk::new(self.aggregator.finish()?),
            is_drained: true,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.child.collect_summary(s)
    }

    /// An aggregation answers for its whole input at once: never resumed.
    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        Ok(vec![])
    }
}
