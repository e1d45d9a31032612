//! One memory pool per distributed query per compute process.
//!
//! A query in one process runs in a runtime of its own whose memory pool
//! holds it to `query-memory-limit-mb` (`df::runtime_with_limit`). A
//! distributed query runs as tasks, and several of them can land on one
//! process: a stage's task for each of several stages, and on the
//! coordinator the query's own head stage beside its tasks. With a pool
//! per task, a query could use its limit several times over in one
//! process. So every task of one query in a process, and on the
//! coordinator the query itself, share one runtime: the first to arrive
//! makes it, the others find it here by the query's id (`MppOptions::
//! query_id`, made by the coordinator), and it goes when the last of them
//! drops it (the map holds weak references, swept as new queries come).
//! A query past the limit fails with the limit named, as in one process.
//!
//! The limit is per process, not per query across the cluster: a query
//! over three processes may use three times the limit in all, each
//! process at most once.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use datafusion::execution::runtime_env::RuntimeEnv;
use parking_lot::Mutex;

/// The runtimes of the distributed queries running in this process.
pub struct QueryRuntimes {
    /// `query-memory-limit-mb` in bytes; 0: no limit, no runtimes.
    limit: usize,
    open: Mutex<HashMap<String, Weak<RuntimeEnv>>>,
}

impl QueryRuntimes {
    pub fn new(limit: usize) -> Arc<QueryRuntimes> {
        Arc::new(QueryRuntimes {
            limit,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The runtime of query `id` in this process: the one its other tasks
    /// (or the query itself, on its coordinator) hold, else a new one with
    /// the limit. None without a limit (the caller's default runtime).
    pub fn of(&self, id: &str) -> datafusion::common::Result<Option<Arc<RuntimeEnv>>> {
        if self.limit == 0 || id.is_empty() {
            return crate::df::runtime_with_limit(self.limit);
        }
        let mut open = self.open.lock();
        if let Some(runtime) = open.get(id).and_then(Weak::upgrade) {
            return Ok(Some(runtime));
        }
        open.retain(|_, r| r.strong_count() > 0);
        let runtime = crate::df::runtime_with_limit(self.limit)?;
        if let Some(r) = &runtime {
            open.insert(id.to_string(), Arc::downgrade(r));
        }
        Ok(runtime)
    }

    /// Makes `runtime` (a coordinator's query's own) the one of query `id`
    /// for the tasks of it that run in this process.
    pub fn register(&self, id: &str, runtime: &Arc<RuntimeEnv>) {
        if self.limit == 0 || id.is_empty() {
            return;
        }
        let mut open = self.open.lock();
        open.retain(|_, r| r.strong_count() > 0);
        open.insert(id.to_string(), Arc::downgrade(runtime));
    }

    /// Queries with a runtime here now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open
            .lock()
            .values()
            .filter(|r| r.strong_count() > 0)
            .count()
    }
}

/// A new id for a distributed query coordinated by the process at
/// `coordinator`: unique among its queries (a counter that starts at the
/// process's start time, so a restarted process does not reuse one).
pub fn new_query_id(coordinator: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        AtomicU64::new(start)
    });
    format!("{coordinator}#{}", next.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::MemoryConsumer;

    #[test]
    fn the_tasks_of_one_query_share_a_pool_until_the_last_ends() {
        let runtimes = QueryRuntimes::new(1 << 20);
        let a1 = runtimes.of("c#1").unwrap().unwrap();
        let a2 = runtimes.of("c#1").unwrap().unwrap();
        let b = runtimes.of("c#2").unwrap().unwrap();
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(!Arc::ptr_eq(&a1, &b));
        assert_eq!(runtimes.len(), 2);
        // What one task reserves, the other's pool counts: together they
        // cannot pass the limit that each alone stays under.
        let r1 = MemoryConsumer::new("task 1").register(&a1.memory_pool);
        r1.try_grow(700 << 10).unwrap();
        let r2 = MemoryConsumer::new("task 2").register(&a2.memory_pool);
        let e = r2.try_grow(700 << 10).unwrap_err().to_string();
        assert!(e.contains("Resources exhausted"), "{e}");
        // Another query's pool is its own.
        let r3 = MemoryConsumer::new("other query").register(&b.memory_pool);
        r3.try_grow(700 << 10).unwrap();
        drop((r1, r2, r3));
        // When the last holder drops it, the next task of that id gets a
        // new runtime, and the entry of the ended query is swept.
        drop((a1, a2));
        let again = runtimes.of("c#1").unwrap().unwrap();
        assert_eq!(again.memory_pool.reserved(), 0);
        drop(b);
        let _c = runtimes.of("c#3").unwrap().unwrap();
        assert_eq!(runtimes.len(), 2);
        assert_eq!(runtimes.open.lock().len(), 2, "c#2's entry swept");
    }

    #[test]
    fn a_coordinators_own_runtime_is_its_local_tasks() {
        let runtimes = QueryRuntimes::new(1 << 20);
        let own = crate::df::runtime_with_limit(1 << 20).unwrap().unwrap();
        runtimes.register("c#9", &own);
        assert!(Arc::ptr_eq(&runtimes.of("c#9").unwrap().unwrap(), &own));
        // Without a limit there is nothing to share.
        let unlimited = QueryRuntimes::new(0);
        assert!(unlimited.of("c#9").unwrap().is_none());
        unlimited.register("c#9", &own);
        assert_eq!(unlimited.len(), 0);
    }

    #[test]
    fn query_ids_differ() {
        let (a, b) = (new_query_id("h:1"), new_query_id("h:1"));
        assert_ne!(a, b);
        assert!(a.starts_with("h:1#"), "{a}");
    }
}
