//! Projection: evaluates output expressions over the selected rows.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{Field, Schema, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::expr::Expr;
use crate::storage::KeyRange;
use crate::Result;

pub struct ProjectionExecutor<'a> {
    child: Box<dyn BatchExecutor + 'a>,
    exprs: Vec<Expr>,
    schema: SchemaRef,
}

impl<'a> ProjectionExecutor<'a> {
    pub fn new(child: Box<dyn BatchExecutor + 'a>, exprs: Vec<Expr>) -> Self {
        let schema = Arc::new(Schema::new(
            exprs
                .iter()
                .enumerate()
                .map(|(i, e)| Field::new(format!("expr_{i}"), e.data_type(), true))
                .collect::<Vec<_>>(),
        ));
        ProjectionExecutor {
            child,
            exprs,
            schema,
        }
    }
}

impl BatchExecutor for ProjectionExecutor<'_> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let r = self.child.next_batch(scan_rows)?;
        let n = r.chunk.batch.num_rows();
        let cols = self
            .exprs
            .iter()
            .map(|e| e.evaluate_to_array(&r.chunk.batch, r.chunk.selection.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        Ok(BatchResult {
            chunk: Chunk {
                batch,
                selection: r.chunk.selection,
            },
            is_drained: r.is_drained,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.child.collect_summary(s)
    }

    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        self.child.remaining_ranges()
    }
}
