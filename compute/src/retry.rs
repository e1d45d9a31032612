//! The one region-retry layer, for reads and writes alike.
//!
//! A request to a region can fail in ways that say nothing about the
//! request itself: the store is unreachable, the peer asked is not the
//! leader, the region split since compute last looked, the store is busy.
//! Reads (coprocessor scans) and writes (batches of key-value pairs) meet
//! exactly the same failures and want exactly the same answers, so the
//! answers live here, once, in the shape of tikv/client-rust's
//! `RetryableMultiRegion`:
//!
//! ```text
//!   work ─▶ locate its span ─▶ split over regions ─▶ one piece per region (bounded fan-out)
//!                                   ▲                      │ per piece, RegionWork::send:
//!                                   │                      ├─ Done: finished
//!                                   │                      ├─ More: next page, same region
//!                                   │                      ├─ Busy / ServerIsBusy / StaleCommand: back off, same region
//!                                   │                      ├─ NotLeader{hint}: retry at the hint at once
//!                                   │                      ├─ NotLeader, no hint: back off, try another peer
//!                                   │                      ├─ Unreachable: back off, try another peer
//!                                   └── re-split this ─────┼─ EpochNotMatch: install the store's regions
//!                                       piece only         │    (from a piece's second one on, back off first)
//!                                                          └─ RegionNotFound / KeyNotInRegion: forget, back off
//! ```
//!
//! The work itself — what a request carries, how its answer is consumed,
//! how it is cut along region boundaries — is the caller's, behind
//! [`RegionWork`]: `dispatch` implements it for a scan's key ranges (pages
//! stream to the query as they arrive), `kv_writer` for a sorted batch of
//! pairs.
//!
//! Backoff starts at `backoff_base` and doubles to `backoff_max`, each delay
//! drawn with equal jitter (between half and all of it) so pieces that failed
//! together do not retry in lockstep; it never sleeps past the deadline. A
//! piece that was re-split keeps its failure counts, so later rounds back
//! off longer. A query gives up early ([`GiveUp`]): a region that stays
//! unreachable (every replica tried, no leader elected) for
//! `unavailable_after` fails it with an error naming the region and store,
//! and so do too many region errors. A write retries until its deadline,
//! so a store restart during a load is waited out. Either way nothing
//! hangs: the deadline bounds every piece.
//!
//! A piece's first attempt may go out with its store's other pieces in one
//! call ([`RegionWork::send_batch`], TiFlash's batch coprocessor: a scan
//! asks each store once, not once per region). The store answers each
//! piece on its own, and from there every piece goes through the loop
//! above by itself: an answer that asks for a retry is retried for that
//! region only (a re-split piece's parts may go out in one call again).
//! A call goes out only when each of its pieces has a place among the
//! `concurrency` in the fan-out, so its answers are read as they arrive
//! and the stores never hold more of a query's work than before.
//!
//! Some failures leave a write's outcome unknown (the store may have applied
//! it before the answer was lost); the layer tells the work so through
//! [`RegionWork::outcome_unknown`] before it retries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::meta::RegionError;
use tokio::sync::Semaphore;

use crate::backoff::Backoff;
use crate::region_cache::{Located, RegionCache};
use crate::{Error, Result};

/// What one attempt at a region came to.
#[derive(Debug)]
pub enum Attempt {
    /// The region did all of the piece's work.
    Done,
    /// The region did part of it and the piece now holds the rest (a page
    /// cut short by the response size bound): send again, same region.
    More,
    /// The region refused; what to do depends on the error.
    Region(Box<RegionError>),
    /// The store cannot do it now (a busy engine): back off, same region.
    /// The outcome is unknown.
    Busy(String),
    /// The store could not be reached or did not answer.
    Unreachable(tonic::Status),
}

/// Work that can be sent to a region and cut along region boundaries.
pub trait RegionWork: Send + Sized + 'static {
    /// The keys the work touches, to locate its regions; `None` when it
    /// touches none (nothing to do).
    fn span(&self) -> Option<KeyRange>;

    /// Cuts the work over `regions` (in key order, covering the span).
    /// What no region holds is the work's to judge: a scan has nothing to
    /// read there, a write fails.
    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>>;

    /// One attempt at `region`, answering within `timeout`. An `Err` is
    /// final (the request itself is wrong, or the work was abandoned).
    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>>;

    /// An attempt may have been applied although it was not answered; the
    /// retry must tolerate finding its own effects.
    fn outcome_unknown(&mut self) {}

    /// Whether the work has a batched form ([`RegionWork::send_batch`]).
    const BATCHES: bool = false;

    /// The first attempts of `pieces` (two or more, all bound for the same
    /// store) in one call, where the work has a batched form, answering
    /// within `timeout`. Each piece comes back as the store answers it,
    /// holding the answer for its next [`RegionWork::send`] to read instead
    /// of asking again. The default has no batched form: the pieces come
    /// back as they went.
    fn send_batch(
        pieces: Vec<(Located, Self)>,
        timeout: Duration,
    ) -> BoxStream<'static, (Located, Self)> {
        let _ = timeout;
        futures::stream::iter(pieces).boxed()
    }
}

#[derive(Debug, Clone)]
pub struct RetryConfig {
    /// Region pieces in flight at once.
    pub concurrency: usize,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Fail fast: how long a region may stay unreachable or leaderless
    /// before the work fails (a single-replica region after 3 failed
    /// attempts), and how many region errors a piece may meet. `None`
    /// retries until the deadline (writes, whose callers wait out a store
    /// restart).
    pub give_up: Option<GiveUp>,
    /// What the deadline bounds, for messages: "query", "write".
    pub what: &'static str,
}

/// When a piece stops retrying before its deadline.
#[derive(Debug, Clone, Copy)]
pub struct GiveUp {
    pub unavailable_after: Duration,
    pub max_region_errors: u32,
}

impl RetryConfig {
    /// True when a region that has had no reachable leader since `since`
    /// has been waited for long enough (never, for work that retries until
    /// its deadline).
    fn waited_long_enough(&self, since: Instant) -> bool {
        self.give_up
            .is_some_and(|g| since.elapsed() > g.unavailable_after)
    }
}

/// Region errors one piece of a query may meet before it gives up.
pub const MAX_REGION_ERRORS: u32 = 32;

/// Requests sent and retries made, over all pieces of one run.
#[derive(Debug, Default)]
pub struct RetryStats {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
}

/// Failures a piece has met so far; carried into its re-split parts.
#[derive(Debug, Clone, Copy, Default)]
struct Failures {
    store: u32,
    region: u32,
    /// EpochNotMatch answers among `region`.
    epoch: u32,
}

/// Runs region work through failures. Borrowed for one run.
pub struct Retry<'a> {
    pub cache: &'a RegionCache,
    pub cfg: &'a RetryConfig,
    pub stats: &'a RetryStats,
}

impl Retry<'_> {
    /// Locates `work`'s regions and runs one piece per region, at most
    /// `concurrency` at once, until all are done or one fails.
    pub async fn run<W: RegionWork>(&self, work: W, deadline: Instant) -> Result<()> {
        // Locating regions asks meta: within the same deadline (the
        // pieces may run in a task no statement scoped).
        let run = self.run_split(work, deadline, Failures::default(), self.cfg.concurrency);
        crate::statement_deadline::with_deadline(deadline, run).await
    }

    fn run_split<W: RegionWork>(
        &self,
        work: W,
        deadline: Instant,
        failures: Failures,
        concurrency: usize,
    ) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(span) = work.span().filter(|s| !s.is_empty()) else {
                return Ok(());
            };
            let regions = self.cache.locate(&span.start, &span.end).await?;
            let pieces = work.split(regions)?;
            if !W::BATCHES {
                return futures::stream::iter(
                    pieces
                        .into_iter()
                        .map(|(region, w)| self.run_piece(region, w, deadline, failures)),
                )
                .buffer_unordered(concurrency.max(1))
                .try_collect::<()>()
                .await;
            }
            // A store's pieces go out together, at most `concurrency` to a
            // call, and a call goes out only once each of its pieces has a
            // place in the fan-out. Its answers are then taken as they come:
            // an answer left unread would hold the connection's HTTP/2
            // window, which every other call to that store shares (the
            // next pages of this very scan among them).
            let places = Semaphore::new(concurrency.clamp(1, Semaphore::MAX_PERMITS));
            let groups = by_store(pieces, concurrency.max(1));
            let groups = groups
                .into_iter()
                .map(|group| self.run_group(group, &places, deadline, failures));
            futures::future::try_join_all(groups).await.map(|_| ())
        })
    }

    /// The pieces of one store: sent in one call once they all have
    /// places, each run to its end as its answer comes, its place given
    /// back then.
    async fn run_group<W: RegionWork>(
        &self,
        group: Vec<(Located, W)>,
        places: &Semaphore,
        deadline: Instant,
        failures: Failures,
    ) -> Result<()> {
        let n = u32::try_from(group.len())
            .map_err(|_| Error::Internal("a store's batch is too large".into()))?;
        let mut held = places
            .acquire_many(n)
            .await
            .map_err(|_| Error::Internal("the region fan-out was closed".into()))?;
        let timeout = deadline.saturating_duration_since(Instant::now());
        let firsts = match group.len() {
            1 => futures::stream::iter(group).boxed(),
            _ => W::send_batch(group, timeout),
        };
        firsts
            .map(|(region, w)| {
                let place = held.split(1);
                async move {
                    let done = self.run_piece(region, w, deadline, failures).await;
                    drop(place);
                    done
                }
            })
            .buffer_unordered(usize::MAX)
            .try_collect::<()>()
            .await
    }

    /// Re-locates a piece and runs its parts (all at once: the piece
    /// already holds its place in the fan-out).
    async fn resplit<W: RegionWork>(
        &self,
        work: W,
        deadline: Instant,
        failures: Failures,
    ) -> Result<()> {
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        self.run_split(work, deadline, failures, usize::MAX).await
    }

    fn run_piece<W: RegionWork>(
        &self,
        mut region: Located,
        mut work: W,
        deadline: Instant,
        mut failures: Failures,
    ) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut backoff = Backoff::new(self.cfg.backoff_base, self.cfg.backoff_max, deadline);
            // Later rounds of the same work back off longer.
            backoff.skip(failures.store + failures.region);
            // Stores this piece could not reach: a NotLeader hint pointing
            // at one of them is stale (the election has not finished).
            let mut failed_stores: Vec<u64> = Vec::new();
            let mut unavailable_since: Option<Instant> = None;
            // What the last try was answered, for the deadline's message.
            let mut last: Option<String> = None;
            loop {
                let now = Instant::now();
                if now >= deadline && unavailable_since.is_some() {
                    // Waiting for a leader that never came: the region is
                    // unavailable, and the deadline is when we stopped.
                    return Err(Error::Unavailable(format!(
                        "region {} has no reachable leader (store {} at {} and its other \
                         replicas tried); the {} deadline ran out waiting for one{}",
                        region.region.id,
                        region.store_id(),
                        region.addr,
                        self.cfg.what,
                        last.map(|l| format!("; the last try was answered: {l}"))
                            .unwrap_or_default()
                    )));
                }
                if now >= deadline {
                    return Err(Error::Deadline(format!(
                        "{} deadline exceeded while waiting for region {} on store {} ({}){}",
                        self.cfg.what,
                        region.region.id,
                        region.store_id(),
                        region.addr,
                        last.map(|l| format!("; the last try was answered: {l}"))
                            .unwrap_or_default()
                    )));
                }
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                let re = match work.send(&region, deadline - now).await? {
                    Attempt::Done => return Ok(()),
                    Attempt::More => continue,
                    Attempt::Busy(msg) => {
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                        work.outcome_unknown();
                        let what = || format!("region {}: {msg}", region.region.id);
                        last = Some(msg.to_string());
                        backoff.sleep(&what).await.map_err(unavailable)?;
                        continue;
                    }
                    Attempt::Unreachable(st) => {
                        failures.store += 1;
                        work.outcome_unknown();
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
                            // Refused: the store is down, which is what
                            // the caller should hear; no answer in time:
                            // the deadline is.
                            if st.code() == tonic::Code::Unavailable {
                                return Err(Error::Unavailable(format!(
                                    "{}; the {} deadline ran out before another replica answered",
                                    what(),
                                    self.cfg.what
                                )));
                            }
                            return Err(Error::Deadline(format!(
                                "{} deadline exceeded: store {} at {} did not answer in time (region {}): {}",
                                self.cfg.what,
                                region.store_id(),
                                region.addr,
                                region.region.id,
                                crate::status_detail(&st)
                            )));
                        }
                        let peers = region.region.peers.len().max(1);
                        failed_stores.push(region.store_id());
                        let since = *unavailable_since.get_or_insert_with(Instant::now);
                        let single_replica_down =
                            self.cfg.give_up.is_some() && peers == 1 && failures.store >= 3;
                        if self.cfg.waited_long_enough(since) || single_replica_down {
                            return Err(Error::Unavailable(what()));
                        }
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                        backoff.sleep(&what).await.map_err(unavailable)?;
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
                                return self.resplit(work, deadline, failures).await;
                            }
                        }
                    }
                    Attempt::Region(re) => *re,
                };
                self.stats.retries.fetch_add(1, Ordering::Relaxed);
                failures.region += 1;
                let what = || format!("region {}: {}", region.region.id, re.message);
                last = Some(re.message.clone());
                if let Some(g) = self.cfg.give_up {
                    if failures.region > g.max_region_errors {
                        return Err(Error::Unavailable(format!(
                            "gave up after {} region errors: {}",
                            g.max_region_errors,
                            what()
                        )));
                    }
                }
                if let Some(nl) = &re.not_leader {
                    // Nothing was proposed: the outcome is known.
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
                    if self.cfg.waited_long_enough(since) {
                        return Err(Error::Unavailable(format!(
                            "region {} has no leader: {}",
                            region.region.id,
                            what()
                        )));
                    }
                    backoff.sleep(&what).await.map_err(unavailable)?;
                    if let Some(l) = self
                        .cache
                        .switch_peer(region.region.id, region.store_id())
                        .await?
                    {
                        region = l;
                        continue;
                    }
                } else if let Some(enm) = &re.epoch_not_match {
                    // Nothing was proposed: the outcome is known.
                    self.cache.invalidate(region.region.id);
                    self.cache
                        .install_regions(enm.current_regions.clone())
                        .await?;
                    // The store names only the region as it is now; the
                    // part of the piece a split moved out of it is looked
                    // up in meta, which learns of the split a moment after
                    // the store applies it and may still route that part
                    // to the old epoch. The first answer re-splits at once
                    // (the usual case: meta knows); a second one means our
                    // picture is still behind, so wait for meta to catch up
                    // rather than spin through the give-up limit.
                    failures.epoch += 1;
                    if failures.epoch > 1 {
                        backoff.sleep(&what).await?;
                    }
                } else if re.server_is_busy.is_some() || re.stale_command.is_some() {
                    work.outcome_unknown();
                    backoff.sleep(&what).await.map_err(unavailable)?;
                    continue;
                } else {
                    work.outcome_unknown();
                    self.cache.invalidate(region.region.id);
                    backoff.sleep(&what).await?;
                }
                // Re-split only this piece over the current regions.
                return self.resplit(work, deadline, failures).await;
            }
        })
    }
}

/// `pieces` grouped by the store they go to, in the order of their first
/// piece, each group in the pieces' order and at most `most` long.
fn by_store<W>(pieces: Vec<(Located, W)>, most: usize) -> Vec<Vec<(Located, W)>> {
    let mut groups: Vec<Vec<(Located, W)>> = Vec::new();
    let mut open: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (region, w) in pieces {
        let at = match open.get(&region.addr) {
            Some(&g) if groups[g].len() < most => g,
            _ => {
                groups.push(Vec::new());
                open.insert(region.addr.clone(), groups.len() - 1);
                groups.len() - 1
            }
        };
        groups[at].push((region, w));
    }
    groups
}

/// A spent backoff budget while a store or leader is missing reads as the
/// store being unavailable, with the deadline's message.
fn unavailable(e: Error) -> Error {
    Error::Unavailable(e.to_string())
}
