//! Handing a finished big query's memory back to the kernel.
//!
//! THE PROBLEM. The allocator (mimalloc, `src/allocator.rs`) keeps memory
//! a query freed for its purge delay, ten seconds, so that the next burst
//! of allocations reuses it instead of faulting in pages the kernel must
//! zero. And it hands it back only when the thread that owns it allocates
//! or frees again after the delay. Between big queries that is a lot of
//! memory: after TPC-H Q9 at SF 10 an idle compute process sat at 450 MB
//! a minute later, and a compute process that ran Q9, Q18 and Q21 over and
//! over peaked 35–90 MB higher on each of its first passes, because the
//! next query's large allocations (hash tables, a join's build copied into
//! one batch) did not all fit in the pages kept for it
//! (`docs/performance.md`, "The memory spread after repeated queries").
//! A process that spreads its queries over others (MPP) holds a third of
//! each, so what it keeps between queries weighs three times as much in
//! its peak.
//!
//! THE RULE. Each query's memory pool (its runtime's, `runtime_with_limit`;
//! on an MPP worker, shared by the query's tasks there) is wrapped in a
//! [`ReleasingPool`] that remembers the most the query ever reserved. When
//! the pool goes — the query ended in this process, all its tasks with it
//! — and that peak reached [`RELEASE_AFTER_BYTES`], it asks the process to
//! release its free memory: [`asked`] moves on. Each runtime worker thread
//! checks that number as it parks (tokio's `on_thread_park`, installed by
//! the binary, which owns the allocator) and, once per ask, has mimalloc
//! collect the thread's free pages and purge them at once (`mi_collect`,
//! forced: freed pages and the arena's pending purges go back now, not
//! after the delay). A thread parks when it has no task to run, so this
//! happens in the idle moments after the query, not on its path.
//!
//! WHY A THRESHOLD. A small query (TPC-H Q6 reserves well under a MiB)
//! frees little, and handing it back would make the next one fault its
//! pages in again, the cost the purge delay is there to avoid. A query
//! that reserved 64 MiB or more took hundreds of milliseconds at least;
//! a few milliseconds of `madvise` after it are noise.
//!
//! CAVEATS. The pool sees what operators reserve (hash tables, builds,
//! sorts, buffered batches), not every allocation; a query that allocates
//! much without reserving does not ask. Queries without a memory limit
//! (`query-memory-limit-mb = 0`) share the default pool and never ask.
//! Another query running when the threads collect loses nothing but the
//! free pages it might have reused. The failpoint `memory_release_off`
//! turns the asks off, to time and measure both side by side.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// The peak reservation from which a query's end asks for a release.
pub const RELEASE_AFTER_BYTES: usize = 64 << 20;

/// Releases asked since the process started.
static ASKED: AtomicU64 = AtomicU64::new(0);

/// How many releases have been asked so far: a worker thread that last
/// saw a smaller number collects its free memory (see the module docs).
pub fn asked() -> u64 {
    ASKED.load(Ordering::Relaxed)
}

/// Asks every runtime worker thread to hand its free memory back as it
/// next parks: what a big query's end does.
pub fn ask() {
    ASKED.fetch_add(1, Ordering::Relaxed);
    crate::metrics::MEMORY_RELEASES.inc();
}

/// A query's memory pool that asks for a release when it goes, if the
/// query reserved [`RELEASE_AFTER_BYTES`] or more at some point.
#[derive(Debug)]
pub struct ReleasingPool {
    inner: Arc<dyn MemoryPool>,
    peak: AtomicUsize,
}

impl ReleasingPool {
    pub fn new(inner: Arc<dyn MemoryPool>) -> ReleasingPool {
        ReleasingPool {
            inner,
            peak: AtomicUsize::new(0),
        }
    }

    /// The most the pool has held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Whether dropping the pool now would ask for a release.
    pub fn releases(&self) -> bool {
        self.peak() >= RELEASE_AFTER_BYTES && !quarry_proto::failpoint::fires("memory_release_off")
    }

    fn note(&self) {
        self.peak
            .fetch_max(self.inner.reserved(), Ordering::Relaxed);
    }
}

impl fmt::Display for ReleasingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl MemoryPool for ReleasingPool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.note();
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        self.inner.try_grow(reservation, additional)?;
        self.note();
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

impl Drop for ReleasingPool {
    fn drop(&mut self) {
        if self.releases() {
            ask();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};

    use super::*;

    fn pool(limit: usize) -> Arc<ReleasingPool> {
        Arc::new(ReleasingPool::new(Arc::new(TrackConsumersPool::new(
            GreedyMemoryPool::new(limit),
            NonZeroUsize::new(5).unwrap(),
        ))))
    }

    #[test]
    fn reservations_pass_through_and_the_peak_is_kept() {
        let p = pool(256 << 20);
        let as_dyn: Arc<dyn MemoryPool> = p.clone();
        let a = MemoryConsumer::new("build").register(&as_dyn);
        let b = MemoryConsumer::new("sort").register(&as_dyn);
        a.try_grow(40 << 20).unwrap();
        b.grow(30 << 20);
        assert_eq!(p.reserved(), 70 << 20);
        a.shrink(40 << 20);
        b.try_grow(10 << 20).unwrap();
        assert_eq!(p.reserved(), 40 << 20);
        assert_eq!(p.peak(), 70 << 20);
        assert!(p.releases());
        assert!(matches!(p.memory_limit(), MemoryLimit::Finite(n) if n == 256 << 20));
    }

    #[test]
    fn past_its_limit_a_reservation_fails_as_the_inner_pool_says() {
        let p = pool(10 << 20);
        let as_dyn: Arc<dyn MemoryPool> = p.clone();
        let a = MemoryConsumer::new("HashJoinInput").register(&as_dyn);
        a.try_grow(8 << 20).unwrap();
        let err = a.try_grow(8 << 20).unwrap_err().to_string();
        assert!(err.contains("Resources exhausted"), "{err}");
        assert!(err.contains("HashJoinInput"), "{err}");
        assert_eq!(p.reserved(), 8 << 20);
        assert_eq!(p.peak(), 8 << 20);
    }

    #[test]
    fn only_a_pool_that_held_the_threshold_asks_for_a_release_when_it_goes() {
        let small = pool(1 << 30);
        {
            let as_dyn: Arc<dyn MemoryPool> = small.clone();
            let r = MemoryConsumer::new("agg").register(&as_dyn);
            r.grow(RELEASE_AFTER_BYTES - 1);
        }
        assert!(!small.releases());

        let big = pool(1 << 30);
        {
            let as_dyn: Arc<dyn MemoryPool> = big.clone();
            let r = MemoryConsumer::new("join").register(&as_dyn);
            r.try_grow(RELEASE_AFTER_BYTES).unwrap();
        }
        assert!(big.releases());
        let before = asked();
        let released = releases_counted();
        drop(big);
        // Other tests may ask too: at least this one did.
        assert!(asked() > before);
        assert!(releases_counted() > released);
    }

    fn releases_counted() -> u64 {
        crate::metrics::MEMORY_RELEASES.get()
    }
}
