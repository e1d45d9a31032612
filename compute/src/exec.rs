//! Running a [`QueryPlan`]: fan out to the regions, merge what comes back
//! column-wise, and finish (HAVING, outputs, ORDER BY, OFFSET/LIMIT).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{new_empty_array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::kernels::sort::{lexsort_to_indices, SortColumn, SortOptions};
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Schema};
use quarry_coprocessor::aggregate::Aggregator;
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;

use crate::dispatch::{DispatchStats, Dispatcher};
use crate::plan::QueryPlan;
use crate::{Error, Result};

/// The DAG's output column types (what each region returns).
fn dag_output_types(plan: &QueryPlan) -> Result<Vec<DataType>> {
    if let Some(agg) = &plan.aggregate {
        let mut t = agg.key_types.clone();
        for f in &agg.funcs {
            t.extend(f.state_types());
        }
        return Ok(t);
    }
    let scan_types: Vec<DataType> = plan
        .dag
        .scan
        .as_ref()
        .map(|s| {
            s.columns
                .iter()
                .map(|c| {
                    c.field_type
                        .as_ref()
                        .ok_or_else(|| Error::Internal("scan column without type".into()))
                        .and_then(|f| Ok(arrow_type(f)?))
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    match &plan.dag.projection {
        Some(p) => p
            .exprs
            .iter()
            .map(|e| Ok(Expr::from_proto(e, &scan_types)?.data_type()))
            .collect(),
        None => Ok(scan_types),
    }
}

fn schema_of(types: &[DataType]) -> Arc<Schema> {
    Arc::new(Schema::new(
        types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

/// Runs `plan`; returns the result batches and the dispatch statistics.
pub async fn run_plan(
    plan: &QueryPlan,
    dispatcher: &Dispatcher,
    deadline: Instant,
) -> Result<(Vec<RecordBatch>, DispatchStats)> {
    let (start, end) = table_record_range(plan.table.id);
    let ranges = vec![KeyRange::new(start, end)];
    let types = dag_output_types(plan)?;
    match &plan.aggregate {
        Some(agg) => {
            let mut fin = Aggregator::final_stage(agg.key_types.clone(), agg.funcs.clone())?;
            let stats = dispatcher
                .run(&plan.dag, ranges, &types, deadline, &mut |b| {
                    fin.merge(&b)?;
                    Ok(ControlFlow::Continue(()))
                })
                .await?;
            let mut post = fin.finish()?;
            if let Some(h) = &agg.having {
                let keep = h.evaluate_to_array(&post, None)?;
                let keep = keep
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
                    .unwrap_or_else(|| BooleanArray::new_null(post.num_rows()));
                post = filter_record_batch(&post, &keep)?;
            }
            Ok((vec![finish(plan, post)?], stats))
        }
        None => {
            // Without ORDER BY, stop pulling once OFFSET + LIMIT rows are in.
            let want = match (plan.order_by.is_empty(), plan.limit) {
                (true, Some(l)) => Some(l.saturating_add(plan.offset) as usize),
                _ => None,
            };
            let mut batches = Vec::new();
            let mut rows = 0usize;
            let stats = dispatcher
                .run(&plan.dag, ranges, &types, deadline, &mut |b| {
                    rows += b.num_rows();
                    batches.push(b);
                    Ok(match want {
                        Some(w) if rows >= w => ControlFlow::Break(()),
                        _ => ControlFlow::Continue(()),
                    })
                })
                .await?;
            let schema = schema_of(&types);
            let batches: Vec<RecordBatch> = batches
                .into_iter()
                .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                .collect::<std::result::Result<_, _>>()?;
            if plan.order_by.is_empty() {
                // No sort: OFFSET/LIMIT and the outputs batch by batch, with
                // no copy of the whole result.
                let mut skip = plan.offset as usize;
                let mut left = plan.limit.map_or(usize::MAX, |l| l as usize);
                let mut out = Vec::with_capacity(batches.len());
                for b in batches {
                    if left == 0 {
                        break;
                    }
                    let n = b.num_rows();
                    let from = skip.min(n);
                    skip -= from;
                    let take = (n - from).min(left);
                    left -= take;
                    if take > 0 {
                        out.push(outputs(plan, b.slice(from, take))?);
                    }
                }
                if out.is_empty() {
                    out.push(outputs(plan, RecordBatch::new_empty(schema))?);
                }
                return Ok((out, stats));
            }
            let input = concat_batches(&schema, &batches)?;
            Ok((vec![finish(plan, input)?], stats))
        }
    }
}

/// ORDER BY, OFFSET/LIMIT and the output expressions over `input`.
pub fn finish(plan: &QueryPlan, input: RecordBatch) -> Result<RecordBatch> {
    let n = input.num_rows();
    let offset = (plan.offset as usize).min(n);
    let limit = plan
        .limit
        .map_or(n - offset, |l| (l as usize).min(n - offset));
    let input = if plan.order_by.is_empty() {
        input.slice(offset, limit)
    } else {
        let keys = plan
            .order_by
            .iter()
            .map(|k| {
                Ok(SortColumn {
                    values: k.expr.evaluate_to_array(&input, None)?,
                    options: Some(SortOptions {
                        descending: k.descending,
                        nulls_first: k.nulls_first,
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let idx = lexsort_to_indices(&keys, Some(offset + limit))?;
        let idx: UInt32Array = idx.slice(offset, limit);
        let cols = input
            .columns()
            .iter()
            .map(|c| Ok(take(c.as_ref(), &idx, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        RecordBatch::try_new_with_options(
            input.schema(),
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(limit)),
        )?
    };
    outputs(plan, input)
}

/// The output expressions over `input`.
fn outputs(plan: &QueryPlan, input: RecordBatch) -> Result<RecordBatch> {
    let cols = plan
        .outputs
        .iter()
        .zip(plan.schema.fields())
        .map(|(e, f)| {
            if input.num_rows() == 0 {
                return Ok(new_empty_array(f.data_type()));
            }
            e.evaluate_to_array(&input, None).map_err(Error::from)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        plan.schema.clone(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(input.num_rows())),
    )?)
}
