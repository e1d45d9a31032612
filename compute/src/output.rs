//! What a statement answers: a small result whole ([`QueryOutput`]), or
//! a query's batches as they are made ([`QueryStream`]). Every layer that
//! runs statements hands these up (the planner's queries, DML, DDL,
//! BACKUP) and the front ends turn them into their protocol's messages.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::Result;

/// A statement's result.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl QueryOutput {
    /// The one-word answer of a statement that returns no rows (`BEGIN`).
    pub fn word(word: &str) -> Result<QueryOutput> {
        text_output("result", vec![word.into()])
    }

    pub(crate) fn single(schema: SchemaRef, batch: RecordBatch) -> Self {
        QueryOutput {
            schema,
            batches: vec![batch],
        }
    }

    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// The row count a write answered (its `count` column; 0 for DDL).
    pub fn row_count(&self) -> i64 {
        self.batches
            .first()
            .and_then(|b| {
                b.column_by_name("count")
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                    .map(|a| a.value(0))
            })
            .unwrap_or(0)
    }

    /// A small answer of text columns `names`, `columns[i]` the values of
    /// the `i`th.
    pub fn text_columns(names: &[&str], columns: Vec<Vec<String>>) -> Result<QueryOutput> {
        let schema: SchemaRef = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Utf8, false))
                .collect::<Vec<_>>(),
        ));
        let arrays: Vec<ArrayRef> = columns
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), arrays)?;
        Ok(QueryOutput::single(schema, batch))
    }
}

/// A query's answer as it is made (`QueryEngine::stream_in`): its
/// schema, and its batches; an error ends them.
pub struct QueryStream {
    pub schema: SchemaRef,
    pub batches: futures::stream::BoxStream<'static, Result<RecordBatch>>,
}

/// A one-column text answer.
pub(crate) fn text_output(column: &str, values: Vec<String>) -> Result<QueryOutput> {
    QueryOutput::text_columns(&[column], vec![values])
}
