//! Dispatch: one coprocessor request per region, many in flight, each with
//! its own retries; results handed over as they arrive.
//!
//! ```text
//!   locate regions ─▶ split ranges per region ─▶ bounded fan-out (buffer_unordered)
//!        ▲                                             │ per task:
//!        │                                             ├─ ok: decode chunks, next page if cut short
//!        └──── re-split this task only ◀───────────────┼─ EpochNotMatch: install regions
//!                                                      ├─ NotLeader{hint}: retry at once there
//!                                                      ├─ ServerIsBusy / store unreachable: back off
//!                                                      └─ other error: fail the query
//! ```
//!
//! Backoff starts at 2 ms and doubles to 500 ms, bounded by the query
//! deadline. A store that cannot be reached is retried a few times (its
//! regions may have moved), then the query fails with an error naming the
//! store: it never hangs.

pub mod backoff;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use futures::future::BoxFuture;
use futures::StreamExt;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{
    CopRequest, DagRequest, EncodeType, ExecSummary, KeyRange as PbRange,
};
use quarry_proto::kv::Context;

use self::backoff::Backoff;
use crate::cluster::CopTransport;
use crate::region_cache::{Located, RegionCache};
use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Region requests in flight at once.
    pub concurrency: usize,
    /// Bound on one response's bytes (the store pages past it).
    pub max_response_bytes: u64,
    pub encode: EncodeType,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long a region may stay unreachable (every replica tried, no
    /// leader elected) before the query fails with an unavailable error.
    /// Longer than an election; a hung store is detected by the channel's
    /// HTTP/2 keepalive (`cluster.rs`) and fails over like a dead one.
    pub unavailable_after: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            concurrency: 32,
            max_response_bytes: 8 << 20,
            encode: EncodeType::Arrow,
            backoff_base: Duration::from_millis(2),
            backoff_max: Duration::from_millis(500),
            unavailable_after: Duration::from_secs(10),
        }
    }
}

/// Totals over every region request of a query.
#[derive(Debug, Clone, Default)]
pub struct DispatchStats {
    pub requests: u64,
    pub retries: u64,
    pub response_bytes: u64,
    pub summary: ExecSummary,
}

/// One region's share of the work.
#[derive(Debug, Clone)]
struct Task {
    region: Located,
    ranges: Vec<KeyRange>,
    /// Failed attempts so far at reaching a store for these ranges, and
    /// region errors so far; both survive re-splits so retries stay bounded.
    store_failures: u32,
    region_errors: u32,
}

/// Region errors one piece of work may meet before the query gives up.
const MAX_REGION_ERRORS: u32 = 32;

/// What one task brought back.
#[derive(Default)]
struct TaskOutput {
    pages: Vec<bytes::Bytes>,
    stats: DispatchStats,
}

fn clamp_to(ranges: &[KeyRange], r: &quarry_proto::meta::Region) -> Vec<KeyRange> {
    let bounds = KeyRange::new(r.start_key.clone(), r.end_key.clone());
    ranges
        .iter()
        .filter_map(|k| {
            let start = k.start.clone().max(bounds.start.clone());
            let end = match (k.end.is_empty(), bounds.end.is_empty()) {
                (true, _) => bounds.end.clone(),
                (false, true) => k.end.clone(),
                (false, false) => k.end.clone().min(bounds.end.clone()),
            };
            (end.is_empty() || start < end).then(|| KeyRange::new(start, end))
        })
        .collect()
}

fn split_tasks(
    ranges: &[KeyRange],
    regions: Vec<Located>,
    store_failures: u32,
    region_errors: u32,
) -> Vec<Task> {
    regions
        .into_iter()
        .filter_map(|region| {
            let rs = clamp_to(ranges, &region.region);
            (!rs.is_empty()).then_some(Task {
                region,
                ranges: rs,
                store_failures,
                region_errors,
            })
        })
        .collect()
}

fn span(ranges: &[KeyRange]) -> (Vec<u8>, Vec<u8>) {
    let start = ranges
        .iter()
        .map(|r| r.start.clone())
        .min()
        .unwrap_or_default();
    let end = if ranges.iter().any(|r| r.end.is_empty()) {
        vec![]
    } else {
        ranges
            .iter()
            .map(|r| r.end.clone())
            .max()
            .unwrap_or_default()
    };
    (start, end)
}

fn add_summary(into: &mut ExecSummary, s: &ExecSummary) {
    into.scanned_keys += s.scanned_keys;
    into.scanned_bytes += s.scanned_bytes;
    into.output_rows += s.output_rows;
    into.num_batches += s.num_batches;
    into.wait_ns += s.wait_ns;
    into.process_ns += s.process_ns;
    into.blocks_skipped += s.blocks_skipped;
    into.blocks_scanned += s.blocks_scanned;
    into.blocks_fallback += s.blocks_fallback;
}

pub struct Dispatcher {
    cache: Arc<RegionCache>,
    transport: Arc<dyn CopTransport>,
    cfg: DispatchConfig,
}

impl Dispatcher {
    pub fn new(
        cache: Arc<RegionCache>,
        transport: Arc<dyn CopTransport>,
        cfg: DispatchConfig,
    ) -> Self {
        Dispatcher {
            cache,
            transport,
            cfg,
        }
    }

    pub fn config(&self) -> &DispatchConfig {
        &self.cfg
    }

    /// Runs `dag` over every region overlapping `ranges`, handing each
    /// decoded batch to `on_batch` as responses arrive (in no fixed order).
    /// `on_batch` may stop the query early with `Break`; requests still in
    /// flight are then dropped. `row_types` are the DAG's output types, needed
    /// to decode the ROWS encoding.
    pub async fn run(
        &self,
        dag: &DagRequest,
        ranges: Vec<KeyRange>,
        row_types: &[DataType],
        deadline: Instant,
        on_batch: &mut (dyn FnMut(RecordBatch) -> Result<ControlFlow<()>> + Send),
    ) -> Result<DispatchStats> {
        let (start, end) = span(&ranges);
        let regions = self.cache.locate(&start, &end).await?;
        let tasks = split_tasks(&ranges, regions, 0, 0);
        let dag = Arc::new(dag.clone());
        let mut stats = DispatchStats::default();
        let mut results = futures::stream::iter(
            tasks
                .into_iter()
                .map(|t| self.run_task(t, dag.clone(), deadline)),
        )
        .buffer_unordered(self.cfg.concurrency.max(1));
        while let Some(out) = results.next().await {
            let out = out?;
            stats.requests += out.stats.requests;
            stats.retries += out.stats.retries;
            stats.response_bytes += out.stats.response_bytes;
            add_summary(&mut stats.summary, &out.stats.summary);
            for page in out.pages {
                for batch in self.decode(page, row_types)? {
                    if on_batch(batch)?.is_break() {
                        return Ok(stats);
                    }
                }
            }
        }
        Ok(stats)
    }

    fn decode(&self, page: bytes::Bytes, row_types: &[DataType]) -> Result<Vec<RecordBatch>> {
        match self.cfg.encode {
            // Zero-copy: the batches point into the response's bytes.
            EncodeType::Arrow => Ok(quarry_coprocessor::ipc::decode_shared(page)?),
            EncodeType::Rows => {
                let cols = quarry_coprocessor::codec::row::decode_rows(&page, row_types)?;
                let schema = Arc::new(Schema::new(
                    row_types
                        .iter()
                        .enumerate()
                        .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
                        .collect::<Vec<_>>(),
                ));
                let rows = cols.first().map_or(0, |c| c.len());
                if rows == 0 {
                    return Ok(vec![]);
                }
                Ok(vec![RecordBatch::try_new(schema, cols)?])
            }
        }
    }

    /// Locates `ranges` afresh and runs one task per region, concurrently.
    fn resplit(
        &self,
        ranges: Vec<KeyRange>,
        dag: Arc<DagRequest>,
        deadline: Instant,
        store_failures: u32,
        region_errors: u32,
    ) -> BoxFuture<'_, Result<TaskOutput>> {
        Box::pin(async move {
            let (start, end) = span(&ranges);
            let regions = self.cache.locate(&start, &end).await?;
            let subtasks = split_tasks(&ranges, regions, store_failures, region_errors);
            let outs = futures::future::try_join_all(
                subtasks
                    .into_iter()
                    .map(|t| self.run_task(t, dag.clone(), deadline)),
            )
            .await?;
            let mut all = TaskOutput::default();
            for o in outs {
                all.pages.extend(o.pages);
                all.stats.requests += o.stats.requests;
                all.stats.retries += o.stats.retries + 1;
                all.stats.response_bytes += o.stats.response_bytes;
                add_summary(&mut all.stats.summary, &o.stats.summary);
            }
            Ok(all)
        })
    }

    fn run_task(
        &self,
        task: Task,
        dag: Arc<DagRequest>,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<TaskOutput>> {
        Box::pin(async move {
            let Task {
                mut region,
                mut ranges,
                mut store_failures,
                mut region_errors,
            } = task;
            let mut out = TaskOutput::default();
            let mut backoff = Backoff::new(self.cfg.backoff_base, self.cfg.backoff_max, deadline);
            // Stores this task could not reach: a NotLeader hint pointing at
            // one of them is stale (the election has not finished).
            let mut failed_stores: Vec<u64> = Vec::new();
            let mut unavailable_since: Option<Instant> = None;
            // Later rounds of the same work back off longer.
            for _ in 0..store_failures + region_errors {
                let _ = backoff.next_delay(&String::new);
            }
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::Deadline(format!(
                        "query deadline exceeded while waiting for region {} on store {} ({})",
                        region.region.id,
                        region.store_id(),
                        region.addr
                    )));
                }
                let remaining = deadline - now;
                let req = CopRequest {
                    context: Some(Context {
                        region_id: region.region.id,
                        region_epoch: region.region.epoch,
                    }),
                    ranges: ranges
                        .iter()
                        .map(|r| PbRange {
                            start: r.start.clone(),
                            end: r.end.clone(),
                        })
                        .collect(),
                    dag: Some((*dag).clone()),
                    encode_type: self.cfg.encode as i32,
                    max_response_bytes: self.cfg.max_response_bytes,
                    timeout_ms: remaining.as_millis().max(1) as u64,
                };
                out.stats.requests += 1;
                let sent = self
                    .transport
                    .coprocessor(&region.addr, req, remaining + Duration::from_millis(200))
                    .await;
                let resp = match sent {
                    Ok(r) => r,
                    Err(st) => {
                        store_failures += 1;
                        let what = || {
                            format!(
                                "region {}: store {} at {} is unavailable: {}",
                                region.region.id,
                                region.store_id(),
                                region.addr,
                                crate::status_detail(&st)
                            )
                        };
                        if Instant::now() + self.cfg.backoff_base >= deadline {
                            return Err(Error::Deadline(format!(
                                "query deadline exceeded: store {} at {} did not answer in time (region {}): {}",
                                region.store_id(),
                                region.addr,
                                region.region.id,
                                crate::status_detail(&st)
                            )));
                        }
                        let peers = region.region.peers.len().max(1) as u32;
                        failed_stores.push(region.store_id());
                        let since = *unavailable_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > self.cfg.unavailable_after
                            || (peers == 1 && store_failures >= 3)
                        {
                            return Err(Error::Unavailable(what()));
                        }
                        out.stats.retries += 1;
                        backoff
                            .sleep(&what)
                            .await
                            .map_err(|e| Error::Unavailable(e.to_string()))?;
                        // Another replica may lead now, or know who does.
                        match self
                            .cache
                            .switch_peer(region.region.id, region.store_id())
                            .await?
                        {
                            Some(l) if peers > 1 => {
                                region = l;
                                continue;
                            }
                            _ => {
                                self.cache.invalidate(region.region.id);
                                let mut more = self
                                    .resplit(
                                        ranges,
                                        dag.clone(),
                                        deadline,
                                        store_failures,
                                        region_errors,
                                    )
                                    .await?;
                                more.pages.splice(0..0, out.pages);
                                more.stats.requests += out.stats.requests;
                                more.stats.retries += out.stats.retries;
                                return Ok(more);
                            }
                        }
                    }
                };
                if let Some(re) = resp.region_error {
                    out.stats.retries += 1;
                    region_errors += 1;
                    let what = || format!("region {}: {}", region.region.id, re.message);
                    if region_errors > MAX_REGION_ERRORS {
                        return Err(Error::Unavailable(format!(
                            "gave up after {MAX_REGION_ERRORS} region errors: {}",
                            what()
                        )));
                    }
                    if let Some(nl) = &re.not_leader {
                        let hint = nl.leader.filter(|l| !failed_stores.contains(&l.store_id));
                        if let Some(leader) = hint {
                            if let Some(l) = self
                                .cache
                                .set_leader(region.region.id, leader, nl.leader_store.clone())
                                .await?
                            {
                                region = l;
                                continue;
                            }
                        }
                        // No leader known there (or only one we could not
                        // reach): an election is running, or this replica is
                        // cut off. Try another.
                        let since = *unavailable_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > self.cfg.unavailable_after {
                            return Err(Error::Unavailable(format!(
                                "region {} has no leader: {}",
                                region.region.id,
                                what()
                            )));
                        }
                        backoff
                            .sleep(&what)
                            .await
                            .map_err(|e| Error::Unavailable(e.to_string()))?;
                        if let Some(l) = self
                            .cache
                            .switch_peer(region.region.id, region.store_id())
                            .await?
                        {
                            region = l;
                            continue;
                        }
                    } else if re.server_is_busy.is_some() || re.stale_command.is_some() {
                        backoff
                            .sleep(&what)
                            .await
                            .map_err(|e| Error::Unavailable(e.to_string()))?;
                        continue;
                    } else if let Some(enm) = re.epoch_not_match.clone() {
                        self.cache.invalidate(region.region.id);
                        self.cache.install_regions(enm.current_regions).await?;
                    } else {
                        self.cache.invalidate(region.region.id);
                        backoff.sleep(&what).await?;
                    }
                    // Re-split only this task's ranges over current regions.
                    let mut more = self
                        .resplit(ranges, dag.clone(), deadline, store_failures, region_errors)
                        .await?;
                    more.pages.splice(0..0, out.pages);
                    more.stats.requests += out.stats.requests;
                    more.stats.retries += out.stats.retries;
                    return Ok(more);
                }
                if let Some(e) = resp.other_error {
                    let e: Error = quarry_coprocessor::Error::from_proto(&e).into();
                    return Err(match e {
                        Error::Internal(m) => Error::Internal(format!(
                            "region {} on store {}: {m}",
                            region.region.id,
                            region.store_id()
                        )),
                        other => other,
                    });
                }
                if let Some(s) = &resp.summary {
                    add_summary(&mut out.stats.summary, s);
                }
                out.stats.response_bytes += resp.data.len() as u64;
                out.pages.push(resp.data);
                if resp.remaining.is_empty() {
                    return Ok(out);
                }
                ranges = resp
                    .remaining
                    .iter()
                    .map(|r| KeyRange::new(r.start.clone(), r.end.clone()))
                    .collect();
            }
        })
    }
}

#[cfg(test)]
mod tests;
