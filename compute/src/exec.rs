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
            let schema = schema_of(&types);
            // ORDER BY with LIMIT keeps only the best OFFSET + LIMIT rows
            // as batches arrive, so compute holds a few batches of rows,
            // not the whole result.
            let mut top = match (plan.order_by.is_empty(), plan.limit) {
                (false, Some(l)) => Some(TopK::new(l.saturating_add(plan.offset) as usize)),
                _ => None,
            };
            let mut batches = Vec::new();
            let mut rows = 0usize;
            let stats = dispatcher
                .run(&plan.dag, ranges, &types, deadline, &mut |b| {
                    let b = RecordBatch::try_new(schema.clone(), b.columns().to_vec())?;
                    if let Some(top) = &mut top {
                        top.push(plan, b)?;
                        return Ok(ControlFlow::Continue(()));
                    }
                    rows += b.num_rows();
                    batches.push(b);
                    Ok(match want {
                        Some(w) if rows >= w => ControlFlow::Break(()),
                        _ => ControlFlow::Continue(()),
                    })
                })
                .await?;
            if let Some(top) = top {
                batches = top.kept;
            }
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

/// Kept rows past which [`TopK`] merges them (or four times `k`, if more).
const TOPK_MERGE_ROWS: usize = 1024;

/// The best `k` rows seen so far under the plan's ORDER BY (DataFusion's
/// TopK, simply): each arriving batch is cut to its own best `k` rows, and
/// once the kept rows pass a few times `k` they are merged and cut to `k`
/// again. Memory stays within max(4k, 1024) + k rows however many rows
/// the regions send; the final ORDER BY then sorts only those.
struct TopK {
    k: usize,
    kept: Vec<RecordBatch>,
    kept_rows: usize,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            kept: Vec::new(),
            kept_rows: 0,
        }
    }

    fn push(&mut self, plan: &QueryPlan, batch: RecordBatch) -> Result<()> {
        let batch = if batch.num_rows() > self.k {
            take_rows(&batch, &sort_indices(plan, &batch, Some(self.k))?)?
        } else {
            batch
        };
        self.kept_rows += batch.num_rows();
        self.kept.push(batch);
        if self.kept_rows > (4 * self.k).max(TOPK_MERGE_ROWS) {
            let all = concat_batches(&self.kept[0].schema(), &self.kept)?;
            let best = take_rows(&all, &sort_indices(plan, &all, Some(self.k))?)?;
            self.kept_rows = best.num_rows();
            self.kept = vec![best];
        }
        Ok(())
    }
}

/// The row order the plan's ORDER BY gives `input`: the first `limit`
/// positions only, when given.
fn sort_indices(
    plan: &QueryPlan,
    input: &RecordBatch,
    limit: Option<usize>,
) -> Result<UInt32Array> {
    let keys = plan
        .order_by
        .iter()
        .map(|k| {
            Ok(SortColumn {
                values: k.expr.evaluate_to_array(input, None)?,
                options: Some(SortOptions {
                    descending: k.descending,
                    nulls_first: k.nulls_first,
                }),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(lexsort_to_indices(&keys, limit)?)
}

/// The rows of `input` at `idx`, in that order.
fn take_rows(input: &RecordBatch, idx: &UInt32Array) -> Result<RecordBatch> {
    let cols = input
        .columns()
        .iter()
        .map(|c| Ok(take(c.as_ref(), idx, None)?))
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new_with_options(
        input.schema(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(idx.len())),
    )?)
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
        let idx = sort_indices(plan, &input, Some(offset + limit))?;
        take_rows(&input, &idx.slice(offset, limit))?
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

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;
    use crate::plan::plan_query;
    use crate::sql::{parse, Statement};

    fn plan(ddl: &str, sql: &str) -> QueryPlan {
        let Statement::CreateTable(ct) = parse(ddl).unwrap() else {
            panic!("not a CREATE TABLE")
        };
        let Statement::Query(q) = parse(sql).unwrap() else {
            panic!("not a query")
        };
        plan_query(&q, &ct.table_def()).unwrap()
    }

    /// Top-k over batches as they arrive picks the same rows, in the same
    /// order, as sorting everything: across many merges, with ties on the
    /// first key broken by the second, and with an OFFSET.
    #[test]
    fn top_k_as_batches_arrive_equals_a_full_sort() {
        let plan = plan(
            "CREATE TABLE t (a BIGINT, b BIGINT)",
            "SELECT a, b FROM t ORDER BY b DESC, a LIMIT 7 OFFSET 3",
        );
        let types = dag_output_types(&plan).unwrap();
        let schema = schema_of(&types);
        let mut top = TopK::new(10);
        let mut all = Vec::new();
        assert_eq!(types.len(), 2, "the scan returns a and b");
        for batch in 0..400i64 {
            // a unique, b with few distinct values: many ties on b, which
            // a breaks.
            let a: Vec<i64> = (0..64).map(|i| batch * 64 + i).collect();
            let b: Vec<i64> = a.iter().map(|a| (a * 7919) % 7).collect();
            let cols: Vec<ArrayRef> =
                vec![Arc::new(Int64Array::from(a)), Arc::new(Int64Array::from(b))];
            let b = RecordBatch::try_new(schema.clone(), cols).unwrap();
            all.push(b.clone());
            top.push(&plan, b).unwrap();
            assert!(top.kept_rows <= 4 * TOPK_MERGE_ROWS, "{}", top.kept_rows);
        }
        let want = finish(&plan, concat_batches(&schema, &all).unwrap()).unwrap();
        let got = finish(&plan, concat_batches(&schema, &top.kept).unwrap()).unwrap();
        assert_eq!(want.num_rows(), 7);
        assert_eq!(got, want);
    }
}
