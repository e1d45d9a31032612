//! A store's coprocessor reads: checks, then the DAG on the read pool.
//!
//! A read is checked on the gRPC thread (the region's leadership under
//! its lease, the ranges inside the region, the snapshot not too old, no
//! one-phase commit below it still applying, the pool not full) and then
//! run on the read pool over a RocksDB snapshot. A request never fails:
//! region and execution errors ride in its response.
//!
//! POINT GROUPS. An index lookup asks each store for a few rows in many
//! regions (30 rows of a part key at SF 1 sit in about 14 regions). Run as
//! one pool job per region, such a batch costs more in hand-offs than in
//! reading: every region is a trip to a pool thread and back, a wake-up
//! of the gRPC task and a frame of its own, and the regions' jobs queue
//! behind one another on the pool's few threads. So the batch service
//! ([`crate::service::coprocessor`]) gathers the tasks that read only
//! single rows into groups of at most [`POINTS_PER_JOB`] rows, and a group
//! is checked task by task and then read in ONE pool job, its answers
//! handed back together (TiKV's batch point get, which reads a batch of
//! keys in one task instead of one per key). Each task keeps its own
//! checks and its own answer, so a moved region fails only its own task.
//! Scans and aggregations over key ranges stay one job per region, cut
//! into parts for several threads when the region is big.
//!
//! PARTS ONLY FOR IDLE THREADS. A big aggregation's parts run on the
//! pool's rayon threads, whose idle workers spin (yielding the CPU in a
//! loop) before they sleep. When a batch of regions arrives, the pool's
//! read threads already have a region each, so cutting each region into
//! parts adds no thread that was idle: it only hands the work to the
//! rayon threads and wakes them, and after every part they spin. TPC-H
//! Q6 at SF 1 asks each store for four regions at once; cut as before, a
//! tenth of each store's CPU was `sched_yield`, taken from the other
//! stores and the compute process on the same cores. So a read is cut,
//! when it starts, into no more parts than the threads the store's other
//! pending reads leave it (`fit_parts`): the regions of a batch run
//! whole side by side, and a read that starts alone still uses every
//! thread. The count is of admitted reads, queued ones included (they
//! will take the threads), and every task of a point group counts though
//! the group runs as one job; it is a hint for speed only, since any cut
//! reads the same rows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use quarry_coprocessor::codec::key::{classify_key, decode_i64, hex, record_key, KeyKind};
use quarry_coprocessor::endpoint;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{other_error, CopRequest, CopResponse, OtherError};
use quarry_proto::failpoint::fires_on;
use quarry_proto::meta::{Region, RegionError};
use tokio::sync::oneshot;

use super::read_dag::ReadDag;
use super::{same_reads, CancelOnDrop, Node, PendingGuard, READ_CHECK_TIMEOUT, SUBRANGE_BYTES};
use crate::engine::{Cf, Engine};
use crate::{region, Error};

/// The most single-row ranges one pool job reads for a point group.
pub const POINTS_PER_JOB: usize = 64;

/// A check's verdict: on, or the request's answer already (boxed: an
/// answer is large).
type Verdict<T> = std::result::Result<T, Box<CopResponse>>;

/// A request that passed its checks: what its pool job needs.
struct Checked {
    /// Without its DAG, which `dag` holds (shared with a batch's other
    /// regions).
    req: CopRequest,
    dag: Arc<ReadDag>,
    region: Region,
    read_ts: u64,
}

fn other(code: other_error::Code, message: String) -> CopResponse {
    CopResponse {
        other_error: Some(OtherError {
            code: code as i32,
            message,
        }),
        ..Default::default()
    }
}

fn region_error(e: RegionError) -> Box<CopResponse> {
    Box::new(CopResponse {
        region_error: Some(e),
        ..Default::default()
    })
}

impl<E: Engine> Node<E> {
    /// Cuts an aggregation over a big region into parts of about
    /// [`SUBRANGE_BYTES`] (at most one per read thread), at evenly spaced
    /// handles between the region's first and last keys, so that the
    /// region is scanned on several threads. One part (no cut) otherwise.
    fn split_parts(
        &self,
        bounds: &KeyRange,
        req: &CopRequest,
        aggregating: bool,
    ) -> Vec<Vec<KeyRange>> {
        let ranges: Vec<KeyRange> = req.ranges.iter().map(KeyRange::from_proto).collect();
        if self.read_pool.threads() < 2 || ranges.len() != 1 || !aggregating {
            return vec![ranges];
        }
        let Some(KeyRange { start, end }) = ranges[0].intersect(bounds) else {
            return vec![ranges];
        };
        if end.is_empty() {
            return vec![ranges];
        }
        let size = self.engine.approximate_size(&start, &end);
        let k = (size / SUBRANGE_BYTES).min(self.read_pool.threads() as u64) as i64;
        if k < 2 {
            return vec![ranges];
        }
        let handle_of = |key: &[u8]| match classify_key(key) {
            KeyKind::Row(h)
            | KeyKind::Pack(h)
            | KeyKind::PackMark(h)
            | KeyKind::Lock(h)
            | KeyKind::Version { handle: h, .. } => decode_i64(&key[1..9]).ok().map(|t| (t, h)),
            KeyKind::Other | KeyKind::Index { .. } => None,
        };
        let mut first = None;
        let _ = self.engine.scan(Cf::Default, &start, &end, &mut |k, _| {
            first = handle_of(k);
            false
        });
        // The last key below `end`: `end` itself may exist (another region).
        let last = match handle_of(&end) {
            Some((t, h)) => Some((t, h)),
            None => self
                .engine
                .seek_prev(Cf::Default, &end, &start)
                .ok()
                .flatten()
                .and_then(|(k, _)| handle_of(&k))
                .map(|(t, h)| (t, h.saturating_add(1))),
        };
        let (Some((table, lo)), Some((t2, hi))) = (first, last) else {
            return vec![ranges];
        };
        if table != t2 || (hi as i128 - lo as i128) < 2 * k as i128 {
            return vec![ranges];
        }
        let mut cuts = vec![start];
        for i in 1..k {
            let h = (lo as i128 + (hi as i128 - lo as i128) * i as i128 / k as i128) as i64;
            cuts.push(record_key(table, h));
        }
        cuts.push(end);
        cuts.windows(2)
            .filter(|w| w[0] < w[1])
            .map(|w| vec![KeyRange::new(w[0].clone(), w[1].clone())])
            .collect()
    }

    /// Runs a coprocessor request: leadership confirmed through the store
    /// loop, then the DAG on the read pool over a RocksDB snapshot. Never
    /// fails: errors come back inside the response. Counted in
    /// [`crate::metrics`].
    pub async fn coprocessor(&self, mut req: CopRequest) -> CopResponse {
        let dag = ReadDag::new(req.dag.take());
        self.coprocessor_under(req, dag).await
    }

    /// [`Node::coprocessor`] for a request whose DAG `dag` holds (a batch's
    /// region: the batch's one DAG, `read_dag.rs`); `req.dag` is not read.
    pub(crate) async fn coprocessor_under(
        &self,
        req: CopRequest,
        dag: Arc<ReadDag>,
    ) -> CopResponse {
        let received = Instant::now();
        let mut checked = match self.check_read(req, dag, received).await {
            Ok(c) => c,
            Err(resp) => return observed(*resp),
        };
        let _pending = match self.admit() {
            Ok(g) => g,
            Err(resp) => return observed(*resp),
        };
        let key = same_reads::key(&mut checked.req, &checked.dag);
        let may_keep = checked.dag.repeatable();
        // Dropped with the read when compute drops the call (its query
        // failed, was cancelled or timed out): the task stops at its next
        // batch instead of scanning on for no one.
        let cancel = CancelOnDrop::default();
        let job = self.read_job(checked, true, received, &cancel);
        let Some(key) = key else {
            let resp = self.on_read_pool(move || vec![job()]).await.pop();
            return observed(resp.unwrap_or_else(no_answer));
        };
        // The same read at the same snapshot, already in flight or kept
        // since it ended, is joined (`same_reads.rs`); the cancel flag then
        // goes with the last caller. (The job is made outside the lock; a
        // caller that joins drops it unstarted.)
        let (read, leading) = self.same_reads.join_or_start(key, may_keep, move || {
            let answer = self.spawn_read(job);
            async move {
                let _cancel = cancel;
                Arc::new(answer.await.unwrap_or_else(|_| no_answer()))
            }
            .boxed()
            .shared()
        });
        let resp = read.await;
        let led = leading.is_some();
        if let Some(leading) = leading {
            leading.keep(&resp, may_keep);
        }
        let resp = Arc::try_unwrap(resp).unwrap_or_else(|shared| (*shared).clone());
        match led {
            true => observed(resp),
            false => {
                crate::metrics::observe_shared_coprocessor(&resp);
                resp
            }
        }
    }

    /// Runs requests that each read a few single rows (a point group, see
    /// the module docs), all under `dag`: each checked as
    /// [`Node::coprocessor`] checks, then all read one after another in
    /// one pool job. The answers are in the requests' order.
    pub(crate) async fn coprocessor_points(
        &self,
        reqs: Vec<CopRequest>,
        dag: Arc<ReadDag>,
    ) -> Vec<CopResponse> {
        let received = Instant::now();
        let checks = futures::future::join_all(
            reqs.into_iter()
                .map(|r| self.check_read(r, dag.clone(), received)),
        )
        .await;
        let mut answers: Vec<Option<CopResponse>> = Vec::with_capacity(checks.len());
        let mut jobs = Vec::new();
        let mut guards = Vec::new();
        let cancel = CancelOnDrop::default();
        for (i, c) in checks.into_iter().enumerate() {
            let admitted = c.and_then(|c| self.admit().map(|g| (c, g)));
            match admitted {
                Ok((c, guard)) => {
                    guards.push(guard);
                    jobs.push((i, self.read_job(c, false, received, &cancel)));
                    answers.push(None);
                }
                Err(resp) => answers.push(Some(*resp)),
            }
        }
        if !jobs.is_empty() {
            let read = self
                .on_read_pool(move || jobs.into_iter().map(|(i, job)| (i, job())).collect())
                .await;
            for (i, resp) in read {
                answers[i] = Some(resp);
            }
        }
        drop(guards);
        answers
            .into_iter()
            .map(|a| observed(a.unwrap_or_else(no_answer)))
            .collect()
    }

    /// The checks before a read, on the caller's thread: the region's
    /// leadership, the ranges inside it, the snapshot still readable and
    /// no one-phase commit below it still applying.
    async fn check_read(
        &self,
        req: CopRequest,
        dag: Arc<ReadDag>,
        received: Instant,
    ) -> Verdict<Checked> {
        let ctx = match Self::context(req.context.as_ref()) {
            Ok(c) => *c,
            Err(e) => {
                return Err(Box::new(other(
                    other_error::Code::InvalidInput,
                    e.to_string(),
                )))
            }
        };
        let r = match self.read_check(ctx.region_id, ctx.region_epoch).await {
            Ok(r) => r,
            Err(Error::Region(e)) => return Err(region_error(*e)),
            Err(e) => return Err(Box::new(other(other_error::Code::Internal, e.to_string()))),
        };
        for kr in &req.ranges {
            if !region::contains_range(&r, &kr.start, &kr.end) {
                tracing::debug!(
                    region = r.id,
                    start = hex(&kr.start),
                    "range outside the region"
                );
                return Err(region_error(region::epoch_not_match(
                    ctx.region_epoch.as_ref(),
                    &r,
                )));
            }
        }
        let read_ts = dag.read_ts();
        if read_ts != 0 && read_ts < self.oldest_readable_ts() {
            return Err(Box::new(self.too_old(read_ts)));
        }
        if read_ts != 0 {
            // Before the snapshot: a one-phase commit picks its timestamp
            // above this read, or this read waits for it to apply.
            let ranges: Vec<KeyRange> = req.ranges.iter().map(KeyRange::from_proto).collect();
            let until = received + READ_CHECK_TIMEOUT;
            if !self.concurrency.read_at(read_ts, &ranges, until).await {
                return Err(region_error(region::server_is_busy(format!(
                    "a one-phase commit on region {} has not applied within {:?}",
                    r.id, READ_CHECK_TIMEOUT
                ))));
            }
        }
        Ok(Checked {
            req,
            dag,
            region: r,
            read_ts,
        })
    }

    /// A place among the pending reads, or "server is busy" when the pool
    /// has as many as it takes.
    fn admit(&self) -> Verdict<PendingGuard> {
        let pending = self.pending_reads.fetch_add(1, Ordering::SeqCst);
        let guard = PendingGuard(self.pending_reads.clone());
        if pending >= self.max_pending_reads || fires_on("read_pool_full", self.store_id) {
            return Err(region_error(region::server_is_busy(format!(
                "{pending} coprocessor requests pending on store {}",
                self.store_id
            ))));
        }
        Ok(guard)
    }

    /// The read of a checked request, to run on the read pool: its DAG
    /// over a snapshot of its region, cut into parts when `may_split` and
    /// the region is big ([`Node::split_parts`]), stopped at its deadline
    /// or when `cancel` is dropped.
    fn read_job(
        &self,
        c: Checked,
        may_split: bool,
        received: Instant,
        cancel: &CancelOnDrop,
    ) -> impl FnOnce() -> CopResponse + Send + 'static {
        let stop = endpoint::Stop {
            deadline: (c.req.timeout_ms > 0)
                .then(|| received + Duration::from_millis(c.req.timeout_ms)),
            cancelled: Some(cancel.0.clone()),
        };
        let engine = self.engine.clone();
        let concurrency = self.concurrency.clone();
        let too_old = self.too_old(c.read_ts);
        let bounds = KeyRange::new(c.region.start_key, c.region.end_key);
        let parts = match may_split {
            true => self.split_parts(&bounds, &c.req, c.dag.aggregates()),
            false => vec![c.req.ranges.iter().map(KeyRange::from_proto).collect()],
        };
        let (req, dag, read_ts) = (c.req, c.dag, c.read_ts);
        let fill_cache = dag.fills_cache();
        // Parts of one read run on the pool's rayon threads.
        let parts_pool = self.read_pool.parts().clone();
        let (pending, threads) = (self.pending_reads.clone(), self.read_pool.threads());
        let store_id = self.store_id;
        move || {
            let _running = crate::metrics::CopRunning::start();
            let wait_ns = received.elapsed().as_nanos() as u64;
            let parts = match fires_on("cop_parts_always", store_id) {
                true => parts,
                false => fit_parts(parts, threads, pending.load(Ordering::Relaxed)),
            };
            engine.with_snapshot_source(&bounds, fill_cache, |make| {
                // A compaction that applied between the check and this
                // snapshot may have folded what the read needs.
                if read_ts != 0 && read_ts <= concurrency.folded() {
                    return too_old;
                }
                let split = parts.len() > 1;
                // Compiled by the first of the DAG's reads to get here.
                let plan = dag.plan();
                let read = || endpoint::handle_parts(make, parts, plan, &req, &stop, wait_ns);
                match split {
                    true => parts_pool.install(read),
                    false => read(),
                }
            })
        }
    }

    /// Runs `job` on the read pool and waits for what it returns.
    async fn on_read_pool<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> Vec<T> + Send + 'static,
    ) -> Vec<T> {
        self.spawn_read(job).await.unwrap_or_default()
    }

    /// Starts `job` on the read pool: what it returns comes on the
    /// receiver (an error if the job ended without returning).
    fn spawn_read<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        self.read_pool.spawn(move || {
            let _ = tx.send(job());
        });
        rx
    }
}

/// `parts` (a read cut for every read thread, in key order) regrouped
/// into no more parts than the `threads` that the store's other reads
/// leave idle: `pending` reads are admitted, this one among them (module
/// docs). Adjacent parts join, so each part still reads one stretch of
/// keys.
fn fit_parts(parts: Vec<Vec<KeyRange>>, threads: usize, pending: usize) -> Vec<Vec<KeyRange>> {
    let idle = threads.saturating_sub(pending.saturating_sub(1)).max(1);
    if parts.len() <= idle {
        return parts;
    }
    let per = parts.len().div_ceil(idle);
    let mut fitted: Vec<Vec<KeyRange>> = Vec::with_capacity(idle);
    for (i, part) in parts.into_iter().enumerate() {
        match fitted.last_mut() {
            Some(last) if i % per != 0 => last.extend(part),
            _ => fitted.push(part),
        }
    }
    fitted
}

/// A request's answer, counted in [`crate::metrics`].
fn observed(resp: CopResponse) -> CopResponse {
    crate::metrics::observe_coprocessor(&resp);
    resp
}

/// The answer of a read whose pool job ended without one.
fn no_answer() -> CopResponse {
    other(
        other_error::Code::Internal,
        "coprocessor worker stopped without an answer".into(),
    )
}

#[cfg(test)]
mod fit_parts_tests {
    use super::*;

    fn parts(n: u8) -> Vec<Vec<KeyRange>> {
        (0..n)
            .map(|i| vec![KeyRange::new(vec![i], vec![i + 1])])
            .collect()
    }

    #[test]
    fn a_read_alone_keeps_every_part() {
        assert_eq!(fit_parts(parts(2), 2, 1), parts(2));
        assert_eq!(fit_parts(parts(4), 8, 1), parts(4));
        // No pending count at all (a read the counter missed) changes nothing.
        assert_eq!(fit_parts(parts(2), 2, 0), parts(2));
    }

    #[test]
    fn reads_beside_it_join_its_parts_in_key_order() {
        // Two threads, another read running: one part, all of the keys.
        let one = fit_parts(parts(2), 2, 2);
        assert_eq!(one, vec![parts(2).concat()]);
        // Eight threads, four other reads: four parts of two stretches.
        let four = fit_parts(parts(8), 8, 5);
        let all = parts(8);
        assert_eq!(four, all.chunks(2).map(|c| c.concat()).collect::<Vec<_>>());
        // Three parts for two idle threads: the first two join.
        let two = fit_parts(parts(3), 4, 3);
        assert_eq!(two, vec![parts(3)[..2].concat(), parts(3)[2].clone()]);
        // More reads than threads: one part.
        assert_eq!(fit_parts(parts(4), 4, 9).len(), 1);
    }
}
