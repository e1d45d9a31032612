//! Dispatch: a scan's regions asked store by store, each region with its
//! own retries; pages handed to the query as they arrive.
//!
//! ```text
//!   ranges ─▶ ScanWork ─▶ retry::Retry (locate, split per region, bounded fan-out,
//!                         region errors, backoff)
//!                           │ first attempt: one BatchCopRequest per store, its
//!                           │   regions answered one by one as they finish
//!                           │ later attempts: one CopRequest per region (or a
//!                           │   batch again, for a re-split piece's parts)
//!                           ▼
//!                         per region: page ─▶ channel ─▶ decode ─▶ on_batch
//!                                     └ cut short: next page from `remaining`
//! ```
//!
//! The batch is TiFlash's batch coprocessor in its simplest form: the DAG
//! is encoded, sent and decoded once per store instead of once per region,
//! and a store answers over one stream. Nothing else changes: each
//! region's answer still carries its own region error, lock or remaining
//! ranges, and what follows it (a retry, a lock resolved, the next page) is
//! that region's alone. A store that does not know the batched call (an
//! older binary during an upgrade) answers `Unimplemented`, and its
//! regions are asked one by one.
//!
//! Everything about failures — unreachable stores, NotLeader hints, busy
//! stores, splits — is the [`crate::retry`] layer's, shared with the writer
//! (`kv_writer.rs`). This module only says what a scan request carries and
//! what happens to its answer: each page goes through a bounded channel to
//! the query as soon as it arrives, so an `on_batch` that is satisfied (a
//! LIMIT) stops the query while later pages of the same region are still
//! unread, and a slow consumer holds the regions back instead of piling up
//! their pages.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::coprocessor::{
    BatchCopRequest, BatchCopResponse, CopRequest, CopResponse, DagRequest, EncodeType,
    ExecSummary, RegionTask,
};
use tokio::sync::mpsc;

use crate::cluster::{BatchAnswers, CopTransport};
use crate::region_cache::{Located, RegionCache};
use crate::retry::{
    Attempt, GiveUp, RegionWork, Retry, RetryConfig, RetryStats, MAX_REGION_ERRORS,
};
use crate::txn::Txns;
use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Regions worked on at once (and the most a store gets in one
    /// batched call).
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
            encode: EncodeType::ArrowDecimal64,
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
    /// With a group sieve: each response's smallest and largest key
    /// (checked by the planner's `df/group_sieve.rs`).
    pub key_ranges: Vec<(i64, i64)>,
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
    /// Timestamps for scans that name no snapshot, and the resolution of
    /// locks scans meet (None in tests without a cluster: a lock fails
    /// the scan).
    txns: Option<Arc<Txns>>,
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
            txns: None,
            retry: cfg.retry_config(),
            cfg,
        }
    }

    /// Resolves the locks scans meet through `txns`, and reads at a fresh
    /// timestamp from it when a DAG names none.
    pub fn with_txns(mut self, txns: Arc<Txns>) -> Self {
        self.txns = Some(txns);
        self
    }

    /// The transactions scans resolve locks with (None in tests).
    pub fn txns(&self) -> Option<&Arc<Txns>> {
        self.txns.as_ref()
    }

    /// The regions covering `[start, end)`, in key order, as the cache
    /// knows them (a scan of each then follows any split or move).
    pub async fn regions(&self, start: &[u8], end: &[u8]) -> Result<Vec<Located>> {
        self.cache.locate(start, end).await
    }

    /// The regions covering `[start, end)` as the cache holds them now,
    /// without asking meta (None: not all cached).
    pub fn cached_regions(&self, start: &[u8], end: &[u8]) -> Option<Vec<Located>> {
        self.cache.cached(start, end)
    }

    pub fn config(&self) -> &DispatchConfig {
        &self.cfg
    }

    /// Runs `dag` over every region overlapping `ranges`: the decoded
    /// batches, as responses arrive (in no fixed order). The regions are
    /// scanned by a task of their own; dropping the stream stops it and
    /// drops the requests in flight. `row_types` are the DAG's output types,
    /// needed to decode the ROWS encoding.
    pub fn stream(
        &self,
        dag: &DagRequest,
        ranges: Vec<KeyRange>,
        row_types: Vec<DataType>,
        deadline: Instant,
    ) -> ScanStream {
        let (pages, arrived) = mpsc::channel(PAGES_BUFFERED);
        let mut work = ScanWork {
            ranges,
            dag: Arc::new(dag.clone()),
            transport: self.transport.clone(),
            encode: self.cfg.encode,
            max_response_bytes: self.cfg.max_response_bytes,
            pages,
            txns: self.txns.clone(),
            deadline,
            answered: None,
        };
        let retry_stats = Arc::new(RetryStats::default());
        let (cache, cfg, counters) = (self.cache.clone(), self.retry.clone(), retry_stats.clone());
        // The task runs under the scan's deadline: the timestamp and region
        // look-ups it asks meta for end there too.
        let task = tokio::spawn(crate::statement_deadline::with_deadline(
            deadline,
            async move {
                if let (0, Some(txns)) = (work.dag.read_ts, &work.txns) {
                    // No snapshot named (statistics, tools): the newest.
                    let mut dag = (*work.dag).clone();
                    dag.read_ts = txns.timestamp().await?;
                    work.dag = Arc::new(dag);
                }
                let retry = Retry {
                    cache: &cache,
                    cfg: &cfg,
                    stats: &counters,
                };
                retry.run(work, deadline).await
            },
        ));
        ScanStream {
            state: Some(StreamState {
                arrived,
                task: AbortOnDrop(Some(task)),
                ready: VecDeque::new(),
                encode: self.cfg.encode,
                widen: true,
                row_types,
                sieve_key: dag.group_sieve.as_ref().map(|s| s.key_column as usize),
                stats: Arc::new(Mutex::new(DispatchStats::default())),
                retry_stats,
            }),
            stats: None,
            next: None,
        }
    }

    /// Runs `dag` over every region overlapping `ranges`, handing each
    /// decoded batch to `on_batch` as responses arrive (in no fixed order).
    /// `on_batch` may stop the query early with `Break`; requests still in
    /// flight are then dropped.
    pub async fn run(
        &self,
        dag: &DagRequest,
        ranges: Vec<KeyRange>,
        row_types: &[DataType],
        deadline: Instant,
        on_batch: &mut (dyn FnMut(RecordBatch) -> Result<ControlFlow<()>> + Send),
    ) -> Result<DispatchStats> {
        let mut batches = self.stream(dag, ranges, row_types.to_vec(), deadline);
        let stats = batches.stats();
        while let Some(batch) = batches.next().await {
            if on_batch(batch?)?.is_break() {
                break;
            }
        }
        drop(batches);
        let stats = stats.lock().clone();
        Ok(stats)
    }
}

/// Aborts the scan task when the stream is dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<Result<()>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.abort();
        }
    }
}

struct StreamState {
    arrived: mpsc::Receiver<Page>,
    task: AbortOnDrop,
    /// Decoded batches of the last page not yet handed out.
    ready: VecDeque<RecordBatch>,
    encode: EncodeType,
    /// Whether Decimal64 columns of narrow pages go back to Decimal128
    /// (what plans expect); see [`ScanStream::keeping_decimal64`].
    widen: bool,
    row_types: Vec<DataType>,
    /// The group sieve's key column, whose range each response notes.
    sieve_key: Option<usize>,
    stats: Arc<Mutex<DispatchStats>>,
    retry_stats: Arc<RetryStats>,
}

impl StreamState {
    fn count(&self) {
        let mut st = self.stats.lock();
        st.requests = self.retry_stats.requests.load(Ordering::Relaxed);
        st.retries = self.retry_stats.retries.load(Ordering::Relaxed);
    }

    /// The next batch, or None once every region has answered.
    async fn next(mut self) -> Option<(Result<RecordBatch>, StreamState)> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some((Ok(b), self));
            }
            match self.arrived.recv().await {
                Some(page) => {
                    {
                        let mut st = self.stats.lock();
                        st.response_bytes += page.data.len() as u64;
                        add_summary(&mut st.summary, &page.summary);
                    }
                    self.count();
                    match decode(self.encode, self.widen, page.data, &self.row_types) {
                        Ok(batches) => {
                            if let Some(key) = self.sieve_key {
                                match quarry_coprocessor::sieve::key_range(&batches, key) {
                                    Ok(Some(r)) => self.stats.lock().key_ranges.push(r),
                                    Ok(None) => {}
                                    Err(e) => return Some((Err(e.into()), self)),
                                }
                            }
                            self.ready.extend(batches)
                        }
                        Err(e) => return Some((Err(e), self)),
                    }
                }
                None => {
                    // Every sender is gone with the work: the scan ended.
                    let task = self.task.0.take()?;
                    let done = match task.await {
                        Ok(r) => r,
                        Err(e) => Err(Error::Internal(format!("region scan task failed: {e}"))),
                    };
                    self.count();
                    return match done {
                        Ok(()) => None,
                        Err(e) => Some((Err(e), self)),
                    };
                }
            }
        }
    }
}

/// The next batch of a scan, and the scan to go on with.
type NextBatch = BoxFuture<'static, Option<(Result<RecordBatch>, StreamState)>>;

/// The batches of a running region scan; see [`Dispatcher::stream`].
pub struct ScanStream {
    state: Option<StreamState>,
    stats: Option<Arc<Mutex<DispatchStats>>>,
    next: Option<NextBatch>,
}

impl ScanStream {
    /// Hands DECIMAL(p ≤ 18) columns out as the Decimal64 narrow pages
    /// carry them instead of widening them to Decimal128 (pages sent
    /// without narrowing still come as Decimal128). For a reader that
    /// stores values rather than computing on them (BACKUP's Parquet
    /// writer keeps such decimals as 32- or 64-bit integers anyway): the
    /// widening and the writer's narrowing again were two copies of every
    /// decimal.
    pub fn keeping_decimal64(mut self) -> Self {
        if let Some(st) = self.state.as_mut() {
            st.widen = false;
        }
        self
    }

    /// The scan's statistics so far (complete once the stream has ended).
    pub fn stats(&self) -> Arc<Mutex<DispatchStats>> {
        if let Some(s) = &self.stats {
            return s.clone();
        }
        match &self.state {
            Some(st) => st.stats.clone(),
            None => Arc::new(Mutex::new(DispatchStats::default())),
        }
    }
}

impl Stream for ScanStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.next.is_none() {
            let Some(state) = self.state.take() else {
                return Poll::Ready(None);
            };
            self.stats = Some(state.stats.clone());
            self.next = Some(Box::pin(state.next()));
        }
        let Some(fut) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.next = None;
                Poll::Ready(r.map(|(item, state)| {
                    self.state = Some(state);
                    item
                }))
            }
        }
    }
}

/// Decodes one page into batches.
fn decode(
    encode: EncodeType,
    widen: bool,
    page: bytes::Bytes,
    row_types: &[DataType],
) -> Result<Vec<RecordBatch>> {
    match encode {
        // Zero-copy: the batches point into the response's bytes.
        EncodeType::Arrow => Ok(quarry_coprocessor::ipc::decode_shared(page)?),
        EncodeType::ArrowDecimal64 if !widen => Ok(quarry_coprocessor::ipc::decode_shared(page)?),
        // Decimal64 columns back to the Decimal128 the plan expects.
        EncodeType::ArrowDecimal64 => Ok(quarry_coprocessor::ipc::decode_shared(page)?
            .into_iter()
            .map(quarry_coprocessor::ipc::widen)
            .collect::<quarry_coprocessor::Result<Vec<_>>>()?),
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
    txns: Option<Arc<Txns>>,
    deadline: Instant,
    /// The answer of a batched first attempt, for the next `send` to read.
    answered: Option<std::result::Result<CopResponse, tonic::Status>>,
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
                        txns: self.txns.clone(),
                        deadline: self.deadline,
                        answered: None,
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
            let answer = match self.answered.take() {
                Some(answer) => answer,
                None => {
                    let req = CopRequest {
                        context: Some(region.context()),
                        ranges: self.ranges.iter().map(KeyRange::to_proto).collect(),
                        dag: Some((*self.dag).clone()),
                        encode_type: self.encode as i32,
                        max_response_bytes: self.max_response_bytes,
                        timeout_ms: timeout.as_millis().max(1) as u64,
                    };
                    self.transport
                        .coprocessor(&region.addr, req, timeout + CALL_GRACE)
                        .await
                }
            };
            let resp = match answer {
                Ok(r) => r,
                Err(st) => return Ok(Attempt::Unreachable(st)),
            };
            if let Some(re) = resp.region_error {
                return Ok(Attempt::Region(Box::new(re)));
            }
            if let Some(lock) = resp.locked {
                // A transaction that may commit below the snapshot: learn
                // its fate, settle the lock, and read the region again.
                let Some(txns) = &self.txns else {
                    return Err(Error::Unavailable(format!(
                        "region {} holds a lock of the transaction that started at {}",
                        region.region.id, lock.start_ts
                    )));
                };
                txns.resolve(&lock, self.deadline).await?;
                return Ok(Attempt::More);
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

    const BATCHES: bool = true;

    fn send_batch(
        pieces: Vec<(Located, Self)>,
        timeout: Duration,
    ) -> BoxStream<'static, (Located, Self)> {
        let Some((to, first)) = pieces.first() else {
            return futures::stream::empty().boxed();
        };
        let req = BatchCopRequest {
            tasks: pieces
                .iter()
                .map(|(region, w)| RegionTask {
                    context: Some(region.context()),
                    ranges: w.ranges.iter().map(KeyRange::to_proto).collect(),
                })
                .collect(),
            dag: Some((*first.dag).clone()),
            encode_type: first.encode as i32,
            max_response_bytes: first.max_response_bytes,
            timeout_ms: timeout.as_millis().max(1) as u64,
        };
        let call = first
            .transport
            .batch_coprocessor(&to.addr, req, timeout + CALL_GRACE);
        let waiting = pieces.into_iter().map(Some).collect();
        // tonic's deadline covers the call's headers, not its stream.
        let until = tokio::time::Instant::from_std(Instant::now() + timeout + CALL_GRACE);
        futures::stream::unfold(Batch::Calling(call, waiting, until), Batch::next).boxed()
    }
}

/// How much longer than the store's own deadline a call may take: the
/// store stops a region at its deadline and answers, which takes a moment
/// to come (a batch's stream is cut off at the same bound).
const CALL_GRACE: Duration = Duration::from_millis(200);

/// A piece of a batch not answered yet (taken when its answer comes).
type Waiting = Vec<Option<(Located, ScanWork)>>;

/// A batched first attempt, handing its pieces back as their answers
/// arrive (see [`ScanWork::send_batch`]).
enum Batch {
    Calling(
        BoxFuture<'static, std::result::Result<BatchAnswers, tonic::Status>>,
        Waiting,
        tokio::time::Instant,
    ),
    /// Answers come until the instant; past it, the pieces left are
    /// answered "deadline exceeded".
    Reading(BatchAnswers, Waiting, tokio::time::Instant),
    /// The call failed, or ended before answering every piece: the pieces
    /// left take the failure as their answer (an unreachable store), or
    /// none (a store without the batched call: they ask one by one).
    Failed(
        tonic::Status,
        std::vec::IntoIter<Option<(Located, ScanWork)>>,
    ),
}

/// What the pieces of a batch that answered none of them in time are told.
fn late() -> tonic::Status {
    tonic::Status::deadline_exceeded(
        "the store did not answer the region within the query's deadline",
    )
}

/// The piece `a` answers, taken from `waiting` and holding its answer;
/// an error when the store answered a task it had answered or was never
/// asked (the batch is broken: the pieces left fail with it).
fn take(
    waiting: &mut Waiting,
    a: BatchCopResponse,
) -> std::result::Result<(Located, ScanWork), tonic::Status> {
    let task = a.task;
    let (region, mut work) = waiting
        .get_mut(task as usize)
        .and_then(Option::take)
        .ok_or_else(|| {
            tonic::Status::internal(format!(
                "the store answered task {task} of a batch, which it had answered or was never asked"
            ))
        })?;
    work.answered = Some(a.response.ok_or_else(|| {
        tonic::Status::internal(format!(
            "the store's answer to task {task} of a batch holds no response"
        ))
    }));
    Ok((region, work))
}

impl Batch {
    fn failed(st: tonic::Status, waiting: Waiting) -> Batch {
        Batch::Failed(st, waiting.into_iter())
    }

    /// The next piece answered, and the batch to go on with.
    async fn next(self) -> Option<((Located, ScanWork), Batch)> {
        let mut state = self;
        loop {
            state = match state {
                Batch::Calling(call, waiting, until) => {
                    match tokio::time::timeout_at(until, call).await {
                        Ok(Ok(answers)) => Batch::Reading(answers, waiting, until),
                        Ok(Err(st)) => Batch::failed(st, waiting),
                        Err(_) => Batch::failed(late(), waiting),
                    }
                }
                Batch::Reading(mut answers, mut waiting, until) => {
                    let next = tokio::time::timeout_at(until, answers.next())
                        .await
                        .unwrap_or_else(|_| Some(Err(late())));
                    match next {
                        Some(Ok(a)) => match take(&mut waiting, a) {
                            Ok(piece) => {
                                return Some((piece, Batch::Reading(answers, waiting, until)))
                            }
                            Err(st) => Batch::failed(st, waiting),
                        },
                        Some(Err(st)) => Batch::failed(st, waiting),
                        None => Batch::failed(
                            tonic::Status::unavailable(
                                "the store ended a batch before answering every region",
                            ),
                            waiting,
                        ),
                    }
                }
                Batch::Failed(st, mut rest) => {
                    let (region, mut work) = rest.find_map(|p| p)?;
                    if st.code() != tonic::Code::Unimplemented {
                        work.answered = Some(Err(st.clone()));
                    }
                    return Some(((region, work), Batch::Failed(st, rest)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
