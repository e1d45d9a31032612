//! Running one coprocessor request: the coprocessor's entry point.
//!
//! LIFE OF A REQUEST (the storage side of compute's step 5)
//!
//! 1. The store validates the region and epoch, takes a snapshot bounded to
//!    the region, and calls [`handle`] with it (`raftstore/src/service`).
//! 2. [`Plan::compile`] decodes the DAG, re-checking every type (once
//!    for all the regions of a batch), and [`Plan::executors`] turns it
//!    into each region's pipeline: scan → selection → partial aggregation
//!    | [top-N →] projection → limit.
//! 3. [`handle`] pulls batches, starting at [`INITIAL_BATCH_ROWS`] and
//!    doubling up to [`MAX_BATCH_ROWS`], checking between batches whether
//!    it must [`Stop`] (its deadline passed, or its caller went away), and
//!    encodes the output as an Arrow IPC stream (or as rows,
//!    the pre-chunk baseline).
//! 4. Past `max_response_bytes` it stops and names the ranges left, so the
//!    caller resumes with another request.
//! 5. The response never fails: errors become `other_error`, and an
//!    execution summary (keys and bytes scanned, time) rides along.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::ipc::writer::StreamWriter;
use quarry_proto::coprocessor::{CopRequest, CopResponse, DagRequest, EncodeType, ExecSummary};
use quarry_proto::meta::Layout;

use crate::aggregate::{AggregateFunction, Aggregator};
use crate::codec::key::ROWID_COLUMN_ID;
use crate::codec::row::encode_rows;
use crate::executor::{
    order_conditions, AggregationExecutor, BatchExecutor, FusedAggExecutor, FusedPlan,
    LimitExecutor, ProjectionExecutor, SelectionExecutor, SortKey, TableScanExecutor, TopNExecutor,
    ZoneFilter,
};
use crate::expr::Expr;
use crate::sieve::GroupSieve;
use crate::storage::{KeyRange, Storage};
use crate::types::arrow_type;
use crate::{invalid_input, Error, Result};

/// When a request must stop before it is done: its deadline passed, or
/// the caller is gone (compute dropped the call: its query failed, was
/// cancelled, or timed out), so no one would read the answer.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    pub deadline: Option<Instant>,
    /// Set by the store when the call is dropped.
    pub cancelled: Option<Arc<AtomicBool>>,
}

impl Stop {
    /// An error if the request must stop; `scanned` keys so far.
    fn check(&self, scanned: u64) -> Result<()> {
        // Tests slow every batch down (`sleep(ms)`) to catch a task mid-scan.
        let _ = quarry_proto::failpoint::hit("coprocessor_slow_batch");
        if self
            .cancelled
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(Error::Deadline(format!(
                "coprocessor task cancelled by its caller after scanning {scanned} keys"
            )));
        }
        if self.deadline.is_some_and(|d| Instant::now() > d)
            || quarry_proto::failpoint::fires("coprocessor_deadline")
        {
            return Err(Error::Deadline(format!(
                "coprocessor task exceeded its deadline after scanning {scanned} keys"
            )));
        }
        Ok(())
    }
}

/// Rows asked of the pipeline by the first pull.
pub const INITIAL_BATCH_ROWS: usize = 1024;
/// The most rows asked by one pull.
pub const MAX_BATCH_ROWS: usize = 8192;

/// Builds the executor pipeline for `dag` over `ranges` of `storage`.
///
/// An aggregation whose filter, keys and arguments all have a fused form
/// runs as one [`FusedAggExecutor`]; everything else as the generic chain.
pub fn build_executors<'a, S: Storage + 'a>(
    storage: S,
    dag: &DagRequest,
    ranges: Vec<KeyRange>,
) -> Result<Box<dyn BatchExecutor + 'a>> {
    build_executors_with(storage, dag, ranges, true)
}

/// [`build_executors`], with the fused aggregation allowed or not (the
/// benchmarks compare the two).
pub fn build_executors_with<'a, S: Storage + 'a>(
    storage: S,
    dag: &DagRequest,
    ranges: Vec<KeyRange>,
    allow_fused: bool,
) -> Result<Box<dyn BatchExecutor + 'a>> {
    Plan::compile_with(dag, allow_fused)?.executors(storage, ranges)
}

/// A DAG decoded and checked once: what each read under it builds its
/// executors from ([`Plan::executors`]).
///
/// ONE PLAN, MANY REGIONS. A batch (`raftstore/src/service`) names one DAG
/// for all of a store's regions, and a big region's aggregation runs in
/// parts; each region and part needs executors of its own (they hold its
/// scan's cursor and state), but not a DAG of its own. A join's probe scan
/// carries its build side's keys, tens of thousands at SF 1, and decoding
/// them into expressions, with the zone filter's and the fused
/// executor's sorted sets of them, was 16% of a store's samples in TPC-H
/// Q5 under `mpp = 'force'`, paid once per region. Compiled once, those
/// parts are cloned into each region's executors: the lists and sets sit
/// behind `Arc`s (`Expr::InList`, `kernels::IntSet`, `Bloom`), so a clone
/// copies no key, and a key list's set (`expr::IntSet`) is built at most
/// once for the whole batch.
#[derive(Debug)]
pub struct Plan {
    columns: Vec<(i64, DataType)>,
    /// Per scan column, the default its rows written before it read as.
    defaults: Vec<Option<Vec<u8>>>,
    /// The selection's conditions, cheapest first.
    conditions: Vec<Expr>,
    read_ts: u64,
    /// Scan keys alone (a row table with no column to read).
    key_only: bool,
    aggregation: Option<Aggregation>,
    /// The aggregation's fused form, when every part of it has one.
    fused: Option<FusedPlan>,
    /// The packs the conditions rule out (the generic chain's scan).
    zone: ZoneFilter,
    top_n: Option<(Vec<SortKey>, usize)>,
    projection: Option<Vec<Expr>>,
    limit: usize,
    group_sieve: Option<quarry_proto::coprocessor::GroupSieve>,
}

/// An aggregation's group keys and (function, argument) pairs.
type Aggregation = (Vec<Expr>, Vec<(AggregateFunction, Option<Expr>)>);

impl Plan {
    /// Decodes and checks `dag`, with the fused aggregation allowed.
    pub fn compile(dag: &DagRequest) -> Result<Plan> {
        Plan::compile_with(dag, true)
    }

    /// [`Plan::compile`], with the fused aggregation allowed or not.
    pub fn compile_with(dag: &DagRequest, allow_fused: bool) -> Result<Plan> {
        let scan = dag
            .scan
            .as_ref()
            .ok_or_else(|| invalid_input!("coprocessor request without a table scan"))?;
        let layout = Layout::try_from(scan.layout)
            .map_err(|_| invalid_input!("table {} has an unknown layout", scan.table_id))?;
        let columns = scan
            .columns
            .iter()
            .map(|c| {
                let ft = c
                    .field_type
                    .as_ref()
                    .ok_or_else(|| invalid_input!("column {} has no type", c.column_id))?;
                Ok((c.column_id, arrow_type(ft)?))
            })
            .collect::<Result<Vec<_>>>()?;
        // Columns added with a DEFAULT after some rows were written: those
        // rows read as the default (the row decoder fills it in). Packs never
        // hold such a column (compute refuses the DEFAULT on a column table).
        let defaults: Vec<Option<Vec<u8>>> = scan
            .columns
            .iter()
            .map(|c| c.has_default.then(|| c.default_value.clone()))
            .collect();
        let has_defaults = defaults.iter().any(Option::is_some);
        if has_defaults && layout != Layout::Row {
            return Err(invalid_input!(
                "table {}: a column DEFAULT filled in at read needs the row layout",
                scan.table_id
            ));
        }
        let allow_fused = allow_fused && !has_defaults;
        let input: Vec<DataType> = columns.iter().map(|(_, t)| t.clone()).collect();
        let conditions = match &dag.selection {
            Some(sel) => sel
                .conditions
                .iter()
                .map(|c| Expr::from_proto(c, &input))
                .collect::<Result<Vec<_>>>()?,
            None => vec![],
        };
        let conditions = order_conditions(conditions)?;
        // 0: no snapshot named, the newest committed data (tools and tests).
        let read_ts = match dag.read_ts {
            0 => u64::MAX,
            ts => ts,
        };
        // Only a row table may be scanned by keys alone (packs carry their row
        // count in their value).
        let key_only = layout == Layout::Row;

        let aggregation = match &dag.aggregation {
            Some(agg) => {
                let keys = agg
                    .group_by
                    .iter()
                    .map(|e| Expr::from_proto(e, &input))
                    .collect::<Result<Vec<_>>>()?;
                let aggs = agg
                    .aggs
                    .iter()
                    .map(|a| {
                        let kind = quarry_proto::coprocessor::AggKind::try_from(a.kind)
                            .map_err(|_| invalid_input!("unknown aggregate kind {}", a.kind))?;
                        let arg = a
                            .arg
                            .as_ref()
                            .map(|e| Expr::from_proto(e, &input))
                            .transpose()?;
                        let f = AggregateFunction::new(kind, arg.as_ref().map(Expr::data_type))?;
                        Ok((f, arg))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some((keys, aggs))
            }
            None => None,
        };
        if dag.limit > 0 && aggregation.is_some() {
            return Err(invalid_input!(
                "LIMIT cannot be pushed below an aggregation"
            ));
        }
        if dag.top_n.is_some() && (aggregation.is_some() || dag.limit > 0) {
            return Err(invalid_input!(
                "a top-N request has neither an aggregation nor a plain limit"
            ));
        }
        if aggregation.is_some() && dag.projection.is_some() {
            return Err(invalid_input!(
                "a request has either an aggregation or a projection, not both"
            ));
        }

        // With no column to read (COUNT(*)), the plain scan counts keys
        // or pack headers and decodes nothing: nothing to fuse. The row
        // handle (`ROWID_COLUMN_ID`) comes from keys, which only the plain
        // scan reads.
        let reads_handle = columns.iter().any(|(id, _)| *id == ROWID_COLUMN_ID);
        let fused = match &aggregation {
            Some((keys, aggs)) if allow_fused && !columns.is_empty() && !reads_handle => {
                FusedPlan::compile(&columns, &conditions, keys, aggs)
            }
            _ => None,
        };
        let zone = match fused {
            Some(_) => ZoneFilter::default(),
            None => ZoneFilter::from_conditions(&conditions, &columns),
        };
        let top_n = match &dag.top_n {
            Some(top) => {
                let keys = top
                    .keys
                    .iter()
                    .map(|k| {
                        let e = k.expr.as_ref().ok_or_else(|| {
                            invalid_input!("top-N sort key without an expression")
                        })?;
                        Ok(SortKey {
                            expr: Expr::from_proto(e, &input)?,
                            descending: k.descending,
                            nulls_first: k.nulls_first,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some((keys, top.limit as usize))
            }
            None => None,
        };
        let projection = match (&aggregation, &dag.projection) {
            (None, Some(proj)) => Some(
                proj.exprs
                    .iter()
                    .map(|e| Expr::from_proto(e, &input))
                    .collect::<Result<Vec<_>>>()?,
            ),
            _ => None,
        };
        if dag.group_sieve.is_some() && aggregation.is_none() {
            return Err(invalid_input!("a group sieve needs an aggregation"));
        }
        Ok(Plan {
            columns,
            defaults,
            conditions,
            read_ts,
            key_only,
            aggregation,
            fused,
            zone,
            top_n,
            projection,
            limit: dag.limit as usize,
            group_sieve: dag.group_sieve.clone(),
        })
    }

    /// Whether the plan aggregates (its parts' answers merge as partials).
    pub fn aggregates(&self) -> bool {
        self.aggregation.is_some()
    }

    /// The executor pipeline of this plan over `ranges` of `storage`.
    ///
    /// An aggregation whose filter, keys and arguments all have a fused
    /// form runs as one [`FusedAggExecutor`]; everything else as the
    /// generic chain: scan → selection → partial aggregation | [top-N →]
    /// projection → limit.
    pub fn executors<'a, S: Storage + 'a>(
        &self,
        storage: S,
        ranges: Vec<KeyRange>,
    ) -> Result<Box<dyn BatchExecutor + 'a>> {
        if let (Some(plan), Some((keys, aggs))) = (&self.fused, &self.aggregation) {
            let fallback = Aggregator::partial(keys.clone(), aggs.clone())?;
            return Ok(Box::new(FusedAggExecutor::new(
                storage,
                ranges,
                self.read_ts,
                &self.columns,
                self.conditions.clone(),
                plan.clone(),
                fallback,
            )?));
        }
        let mut exec: Box<dyn BatchExecutor + 'a> = Box::new(
            TableScanExecutor::new(
                storage,
                &self.columns,
                ranges,
                self.read_ts,
                self.key_only,
                self.zone.clone(),
            )?
            .with_defaults(self.defaults.clone())?,
        );
        if !self.conditions.is_empty() {
            exec = Box::new(SelectionExecutor::new(exec, self.conditions.clone())?);
        }
        if let Some((keys, limit)) = &self.top_n {
            exec = Box::new(TopNExecutor::new(exec, keys.clone(), *limit));
        }
        match (&self.aggregation, &self.projection) {
            (Some((keys, aggs)), _) => {
                exec = Box::new(AggregationExecutor::new(
                    exec,
                    Aggregator::partial(keys.clone(), aggs.clone())?,
                ));
            }
            (None, Some(exprs)) => {
                exec = Box::new(ProjectionExecutor::new(exec, exprs.clone()));
            }
            (None, None) => {}
        }
        if self.limit > 0 {
            exec = Box::new(LimitExecutor::new(exec, self.limit));
        }
        Ok(exec)
    }

    /// The group sieve the DAG asks for over an aggregation whose output
    /// is `schema` (`sieve.rs`).
    fn group_sieve(&self, schema: &SchemaRef) -> Result<Option<GroupSieve>> {
        let (Some(proto), Some((keys, _))) = (&self.group_sieve, &self.aggregation) else {
            return Ok(None);
        };
        GroupSieve::from_proto(proto, keys.len(), schema).map(Some)
    }
}

/// What running a request produced.
struct Output {
    data: Vec<u8>,
    remaining: Vec<KeyRange>,
}

fn run(
    exec: &mut dyn BatchExecutor,
    sieve: Option<&GroupSieve>,
    encode: EncodeType,
    max_bytes: u64,
    stop: &Stop,
    summary: &mut ExecSummary,
) -> Result<Output> {
    let schema = exec.schema();
    // A sieve judges the response's groups together: they wait here.
    let mut held = Vec::new();
    let wire = crate::ipc::wire_schema(encode, schema.clone());
    let narrowing = !Arc::ptr_eq(&wire, &schema);
    let mut ipc = match encode {
        EncodeType::Arrow | EncodeType::ArrowDecimal64 => {
            Some(StreamWriter::try_new(Vec::new(), &wire)?)
        }
        EncodeType::Rows => None,
    };
    let mut rows_out: Vec<u8> = Vec::new();
    let mut batch_rows = INITIAL_BATCH_ROWS;
    let mut remaining = Vec::new();
    loop {
        if stop.check(0).is_err() {
            // Both reasons to stop last, so this fails too, now with the
            // keys scanned.
            let mut s = ExecSummary::default();
            exec.collect_summary(&mut s);
            stop.check(s.scanned_keys)?;
        }
        let r = exec.next_batch(batch_rows)?;
        let batch = r.chunk.materialize()?;
        summary.num_batches += 1;
        if batch.num_rows() > 0 && sieve.is_some() {
            held.push(batch);
        } else if batch.num_rows() > 0 {
            summary.output_rows += batch.num_rows() as u64;
            match &mut ipc {
                Some(w) if narrowing => w.write(&crate::ipc::narrow(&batch, &wire)?)?,
                Some(w) => w.write(&batch)?,
                None => encode_rows(batch.columns(), &mut rows_out)?,
            }
        }
        batch_rows = (batch_rows * 2).min(MAX_BATCH_ROWS);
        if r.is_drained {
            break;
        }
        let written = match &ipc {
            Some(w) => w.get_ref().len(),
            None => rows_out.len(),
        } as u64;
        if max_bytes > 0 && written >= max_bytes {
            remaining = exec.remaining_ranges()?;
            break;
        }
    }
    if let Some(sieve) = sieve {
        for batch in sieve.apply(&schema, held)? {
            summary.output_rows += batch.num_rows() as u64;
            match &mut ipc {
                Some(w) if narrowing => w.write(&crate::ipc::narrow(&batch, &wire)?)?,
                Some(w) => w.write(&batch)?,
                None => encode_rows(batch.columns(), &mut rows_out)?,
            }
        }
    }
    let data = match ipc {
        Some(mut w) => {
            w.finish()?;
            w.into_inner()?
        }
        None => rows_out,
    };
    Ok(Output { data, remaining })
}

/// Runs an aggregation request over several parts of a region side by
/// side (on the current rayon pool), each part scanned by its own storage
/// from `make` (the same snapshot), and answers with every part's partial
/// states in one stream — compute merges them like any partials. Requests
/// that are not aggregations, or a single part, run as [`handle_with`].
/// `plan` is the request's DAG compiled ([`compile`]; a batch compiles its
/// one DAG for all its regions), or why it could not be.
///
/// This is how a big region uses more than one core (TXRocks cuts ranges
/// the same way); the caller picks the parts.
pub fn handle_parts<S: Storage>(
    make: &(dyn Fn() -> S + Sync),
    parts: Vec<Vec<KeyRange>>,
    plan: &Result<Plan>,
    req: &CopRequest,
    stop: &Stop,
    wait_ns: u64,
) -> CopResponse {
    use rayon::prelude::*;
    let plan = match plan {
        Ok(p) if parts.len() > 1 && p.aggregates() => p,
        _ => return handle_with(make(), plan, req, stop, wait_ns),
    };
    let started = Instant::now();
    let results: Vec<
        Result<(
            Vec<arrow::array::RecordBatch>,
            arrow::datatypes::SchemaRef,
            ExecSummary,
        )>,
    > = parts
        .into_par_iter()
        .map(|ranges| {
            let mut exec = plan.executors(make(), ranges)?;
            let mut batches = Vec::new();
            loop {
                stop.check(0)?;
                let r = exec.next_batch(MAX_BATCH_ROWS)?;
                let b = r.chunk.materialize()?;
                if b.num_rows() > 0 {
                    batches.push(b);
                }
                if r.is_drained {
                    break;
                }
            }
            let mut s = ExecSummary::default();
            exec.collect_summary(&mut s);
            Ok((batches, exec.schema(), s))
        })
        .collect();
    let mut summary = ExecSummary {
        wait_ns,
        ..Default::default()
    };
    let encoded = (|| -> Result<Vec<u8>> {
        let mut all = Vec::new();
        let mut schema = None;
        for r in results {
            let (batches, sch, s) = r?;
            summary.scanned_keys += s.scanned_keys;
            summary.scanned_bytes += s.scanned_bytes;
            summary.blocks_skipped += s.blocks_skipped;
            summary.blocks_scanned += s.blocks_scanned;
            summary.blocks_fallback += s.blocks_fallback;
            schema.get_or_insert(sch);
            all.extend(batches);
        }
        let schema = schema.ok_or_else(|| crate::internal!("no part answered"))?;
        // The parts answer as one response: the sieve judges them together.
        if let Some(sieve) = plan.group_sieve(&schema)? {
            all = sieve.apply(&schema, all)?;
        }
        let encode = EncodeType::try_from(req.encode_type)
            .map_err(|_| invalid_input!("unknown encode type {}", req.encode_type))?;
        for b in &all {
            summary.output_rows += b.num_rows() as u64;
            summary.num_batches += 1;
        }
        match encode {
            EncodeType::Arrow | EncodeType::ArrowDecimal64 => {
                let wire = crate::ipc::wire_schema(encode, schema.clone());
                let narrowing = !Arc::ptr_eq(&wire, &schema);
                let mut w = StreamWriter::try_new(Vec::new(), &wire)?;
                for b in &all {
                    match narrowing {
                        true => w.write(&crate::ipc::narrow(b, &wire)?)?,
                        false => w.write(b)?,
                    }
                }
                w.finish()?;
                Ok(w.into_inner()?)
            }
            EncodeType::Rows => {
                let mut out = Vec::new();
                for b in &all {
                    encode_rows(b.columns(), &mut out)?;
                }
                Ok(out)
            }
        }
    })();
    summary.process_ns = started.elapsed().as_nanos() as u64;
    match encoded {
        Ok(data) => CopResponse {
            data: data.into(),
            region_error: None,
            other_error: None,
            summary: Some(summary),
            remaining: vec![],
            locked: None,
        },
        Err(e) => error_response(e, summary),
    }
}

/// The answer to a request that failed: a lock met goes back as
/// `locked`, anything else as `other_error`.
fn error_response(e: Error, summary: ExecSummary) -> CopResponse {
    match e {
        Error::Locked(lock) => CopResponse {
            locked: Some(*lock),
            summary: Some(summary),
            ..Default::default()
        },
        e => CopResponse {
            other_error: Some(e.to_proto()),
            summary: Some(summary),
            ..Default::default()
        },
    }
}

/// A request's DAG compiled ([`Plan::compile`]); a request without one
/// is refused.
pub fn compile(dag: Option<&DagRequest>) -> Result<Plan> {
    let dag = dag.ok_or_else(|| invalid_input!("coprocessor request without a DAG"))?;
    Plan::compile(dag)
}

/// Runs `req` over `storage`. Never fails: errors are in `other_error`.
/// `wait_ns` is how long the request queued before this call.
pub fn handle<S: Storage>(storage: S, req: &CopRequest, stop: &Stop, wait_ns: u64) -> CopResponse {
    handle_with(storage, &compile(req.dag.as_ref()), req, stop, wait_ns)
}

/// [`handle`] under `plan`, the request's DAG already compiled (or why it
/// could not be); `req.dag` is not read again.
pub fn handle_with<S: Storage>(
    storage: S,
    plan: &Result<Plan>,
    req: &CopRequest,
    stop: &Stop,
    wait_ns: u64,
) -> CopResponse {
    let started = Instant::now();
    let mut summary = ExecSummary {
        wait_ns,
        ..Default::default()
    };
    let result = (|| -> Result<Output> {
        let plan = plan.as_ref().map_err(Clone::clone)?;
        let ranges = req.ranges.iter().map(KeyRange::from_proto).collect();
        let mut exec = plan.executors(storage, ranges)?;
        let sieve = plan.group_sieve(&exec.schema())?;
        let encode = EncodeType::try_from(req.encode_type)
            .map_err(|_| invalid_input!("unknown encode type {}", req.encode_type))?;
        let out = run(
            exec.as_mut(),
            sieve.as_ref(),
            encode,
            req.max_response_bytes,
            stop,
            &mut summary,
        );
        exec.collect_summary(&mut summary);
        out
    })();
    summary.process_ns = started.elapsed().as_nanos() as u64;
    match result {
        Ok(out) => CopResponse {
            data: out.data.into(),
            region_error: None,
            other_error: None,
            summary: Some(summary),
            remaining: out.remaining.iter().map(KeyRange::to_proto).collect(),
            locked: None,
        },
        Err(e) => error_response(e, summary),
    }
}

#[cfg(test)]
mod tests;
