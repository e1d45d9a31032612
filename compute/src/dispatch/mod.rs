//! Dispatch: one coprocessor request per region, many in flight, each with
//! its own retries; pages handed to the query as they arrive.
//!
//! ```text
//!   ranges ─▶ ScanWork ─▶ retry::Retry (locate, split per region, bounded fan-out,
//!                         region errors, backoff) ─▶ per region: CopRequest
//!                                                      │ page ─▶ channel ─▶ decode ─▶ on_batch
//!                                                      └ cut short: next page from `remaining`
//! ```
//!
//! Everything about failures — unreachable stores, NotLeader hints, busy
//! stores, splits — is the [`retry`] layer's, shared with the writer
//! (`kv_writer.rs`). This module only says what a scan request carries and
//! what happens to its answer: each page goes through a bounded channel to
//! the query as soon as it arrives, so an `on_batch` that is satisfied (a
//! LIMIT) stops the query while later pages of the same region are still
//! unread, and a slow consumer holds the regions back instead of piling up
//! their pages.

pub mod backoff;
pub mod retry;

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use futures::future::BoxFuture;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::coprocessor::{CopRequest, DagRequest, EncodeType, ExecSummary};
use tokio::sync::mpsc;

use self::retry::{Attempt, GiveUp, RegionWork, Retry, RetryConfig, RetryStats, MAX_REGION_ERRORS};
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

impl DispatchConfig {
    /// The retry layer's share of the settings.
    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig {
            concurrency: self.concurrency,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            give_up: Some(GiveUp {
                unavailable_after: self.unavailable_after,
                max_region_errors: MAX_REGION_ERRORS,
            }),
            what: "query",
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
    retry: RetryConfig,
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
            retry: cfg.retry_config(),
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
        let retry_stats = RetryStats::default();
        let retry = Retry {
            cache: &self.cache,
            cfg: &self.retry,
            stats: &retry_stats,
        };
        let (pages, mut arrived) = mpsc::channel(PAGES_BUFFERED);
        let work = ScanWork {
            ranges,
            dag: Arc::new(dag.clone()),
            transport: self.transport.clone(),
            encode: self.cfg.encode,
            max_response_bytes: self.cfg.max_response_bytes,
            pages,
        };
        let mut scans = std::pin::pin!(retry.run(work, deadline));
        let mut scans_done = false;
        let mut stats = DispatchStats::default();
        let stopped = loop {
            tokio::select! {
                done = &mut scans, if !scans_done => {
                    done?;
                    // Every sender is gone with the work: the channel
                    // drains and closes.
                    scans_done = true;
                }
                page = arrived.recv() => {
                    let Some(page) = page else { break false };
                    stats.response_bytes += page.data.len() as u64;
                    add_summary(&mut stats.summary, &page.summary);
                    if self.hand_over(page.data, row_types, on_batch)?.is_break() {
                        break true;
                    }
                }
            }
        };
        if !stopped && !scans_done {
            scans.await?;
        }
        stats.requests = retry_stats.requests.load(Ordering::Relaxed);
        stats.retries = retry_stats.retries.load(Ordering::Relaxed);
        Ok(stats)
    }

    /// Decodes one page and hands its batches over, until one says stop.
    fn hand_over(
        &self,
        data: bytes::Bytes,
        row_types: &[DataType],
        on_batch: &mut (dyn FnMut(RecordBatch) -> Result<ControlFlow<()>> + Send),
    ) -> Result<ControlFlow<()>> {
        for batch in self.decode(data, row_types)? {
            if on_batch(batch)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
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
}

/// Pages that may wait for the query at once (each up to
/// `max_response_bytes`); a region with more to send waits its turn.
const PAGES_BUFFERED: usize = 8;

/// One page of a region's answer.
struct Page {
    data: bytes::Bytes,
    summary: ExecSummary,
}

/// A scan's share of work for the retry layer: key ranges, cut along
/// region boundaries; each answer's pages go to the query's channel.
struct ScanWork {
    ranges: Vec<KeyRange>,
    dag: Arc<DagRequest>,
    transport: Arc<dyn CopTransport>,
    encode: EncodeType,
    max_response_bytes: u64,
    pages: mpsc::Sender<Page>,
}

impl RegionWork for ScanWork {
    fn span(&self) -> Option<KeyRange> {
        let touched: Vec<KeyRange> = self
            .ranges
            .iter()
            .filter(|r| !r.is_empty())
            .cloned()
            .collect();
        KeyRange::span(&touched)
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        Ok(regions
            .into_iter()
            .filter_map(|region| {
                let bounds = KeyRangeRef::of_region(&region.region);
                let ranges: Vec<KeyRange> = self
                    .ranges
                    .iter()
                    .filter_map(|r| r.as_ref().intersect(bounds))
                    .collect();
                (!ranges.is_empty()).then(|| {
                    let work = ScanWork {
                        ranges,
                        dag: self.dag.clone(),
                        transport: self.transport.clone(),
                        encode: self.encode,
                        max_response_bytes: self.max_response_bytes,
                        pages: self.pages.clone(),
                    };
                    (region, work)
                })
            })
            .collect())
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let req = CopRequest {
                context: Some(region.context()),
                ranges: self.ranges.iter().map(KeyRange::to_proto).collect(),
                dag: Some((*self.dag).clone()),
                encode_type: self.encode as i32,
                max_response_bytes: self.max_response_bytes,
                timeout_ms: timeout.as_millis().max(1) as u64,
            };
            let resp = match self
                .transport
                .coprocessor(&region.addr, req, timeout + Duration::from_millis(200))
                .await
            {
                Ok(r) => r,
                Err(st) => return Ok(Attempt::Unreachable(st)),
            };
            if let Some(re) = resp.region_error {
                return Ok(Attempt::Region(Box::new(re)));
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
            let page = Page {
                data: resp.data,
                summary: resp.summary.unwrap_or_default(),
            };
            if self.pages.send(page).await.is_err() {
                // The query stopped reading (a satisfied LIMIT).
                return Ok(Attempt::Done);
            }
            if resp.remaining.is_empty() {
                return Ok(Attempt::Done);
            }
            self.ranges = resp.remaining.iter().map(KeyRange::from_proto).collect();
            Ok(Attempt::More)
        })
    }
}

#[cfg(test)]
mod tests;
