//! Selection: narrows a chunk's selection by ANDed conditions.
//!
//! Conditions run cheapest first (by [`Expr::cost`]), and each one only
//! needs to decide the rows still selected: a row a cheaper condition already
//! rejected costs later conditions nothing but a bit test. NULL counts as
//! false.

use arrow::array::{Array, AsArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use super::{BatchExecutor, BatchResult, Chunk};
use crate::expr::{ColumnarValue, Expr, ScalarValue};
use crate::storage::KeyRange;
use crate::{invalid_input, Result};

pub struct SelectionExecutor<'a> {
    child: Box<dyn BatchExecutor + 'a>,
    conditions: Vec<Expr>,
}

impl<'a> SelectionExecutor<'a> {
    pub fn new(child: Box<dyn BatchExecutor + 'a>, conditions: Vec<Expr>) -> Result<Self> {
        Ok(SelectionExecutor {
            child,
            conditions: order_conditions(conditions)?,
        })
    }
}

/// Checks that every condition is BOOLEAN and orders them cheapest first
/// (infallible before fallible).
pub fn order_conditions(mut conditions: Vec<Expr>) -> Result<Vec<Expr>> {
    for c in &conditions {
        if !matches!(c.data_type(), DataType::Boolean | DataType::Null) {
            return Err(invalid_input!(
                "a filter condition must be BOOLEAN, got {}",
                crate::types::sql_name(&c.data_type())
            ));
        }
    }
    conditions.sort_by_key(|c| (c.is_fallible(), c.cost()));
    Ok(conditions)
}

/// Narrows `chunk`'s selection by `conditions` (ANDed, in the order of
/// [`order_conditions`]).
pub fn filter_chunk(conditions: &[Expr], chunk: &mut Chunk) -> Result<()> {
    let n = chunk.batch.num_rows();
    for cond in conditions {
        if chunk
            .selection
            .as_ref()
            .is_some_and(|s| s.count_set_bits() == 0)
        {
            break;
        }
        let keep: BooleanBuffer = match cond.evaluate(&chunk.batch, chunk.selection.as_ref())? {
            ColumnarValue::Scalar(ScalarValue::Boolean(true)) => continue,
            ColumnarValue::Scalar(_) => BooleanBuffer::new_unset(n),
            ColumnarValue::Array(a) => {
                let b = a.as_boolean();
                match b.nulls() {
                    Some(nulls) => b.values() & nulls.inner(),
                    None => b.values().clone(),
                }
            }
        };
        chunk.selection = Some(match &chunk.selection {
            Some(s) => s & &keep,
            None => keep,
        });
    }
    Ok(())
}

impl BatchExecutor for SelectionExecutor<'_> {
    fn schema(&self) -> SchemaRef {
        self.child.schema()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let mut r = self.child.next_batch(scan_rows)?;
        filter_chunk(&self.conditions, &mut r.chunk)?;
        Ok(r)
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.child.collect_summary(s)
    }

    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        self.child.remaining_ranges()
    }
}
