//! The read pool: the threads that run a store's coprocessor reads.
//!
//! A read is checked on a gRPC thread and then handed here, so RocksDB
//! seeks and the DAG's work never hold up the gRPC runtime (TiKV's unified
//! read pool has the same job). The pool is a queue and a fixed set of
//! threads that sleep on a condition variable when the queue is empty.
//!
//! WHY NOT RAYON'S POOL. It used to be one: rayon's idle workers spin,
//! yielding the CPU in a loop, for a while before they sleep, so that the
//! next job of a parallel loop starts without a wake-up. A store answering
//! short reads (an index lookup's rows, a point get) goes idle after every
//! one, and its threads spun after every one: in a loop of indexed lookups
//! on a 2-core machine, `sched_yield` was a fifth of a store's CPU,
//! taken from the other stores and the compute process on the same cores.
//! Rayon is still the right tool for what it was built for, one big job
//! cut into parts: an aggregation over a big region runs its parts on
//! [`ReadPool::parts`], a rayon pool of the same size, from the read
//! thread that took it (which waits, asleep, for them).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::{Error, Result};

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

pub struct ReadPool {
    shared: Arc<Shared>,
    threads: usize,
    parts: Arc<rayon::ThreadPool>,
}

impl ReadPool {
    /// `threads` read threads named `{name}-{i}`, and as many rayon
    /// threads for the parts of big reads, named `{name}-part-{i}`.
    pub fn new(threads: usize, name: &str) -> Result<Self> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared::default());
        for i in 0..threads {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || work(&shared))
                .map_err(|e| Error::Internal(format!("read pool: {e}")))?;
        }
        let part_name = name.to_string();
        let parts = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("{part_name}-part-{i}"))
            .build()
            .map_err(|e| Error::Internal(format!("read pool parts: {e}")))?;
        Ok(ReadPool {
            shared,
            threads,
            parts: Arc::new(parts),
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job` on a read thread, after the jobs queued before it.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let mut q = self.shared.queue.lock();
        q.jobs.push_back(Box::new(job));
        drop(q);
        self.shared.ready.notify_one();
    }

    /// The rayon pool for the parts of one read (see the module docs).
    pub fn parts(&self) -> &Arc<rayon::ThreadPool> {
        &self.parts
    }
}

impl Drop for ReadPool {
    /// The threads finish the jobs queued and stop.
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

/// A read thread: takes jobs until the pool is dropped and its queue is
/// empty. A job that panics is reported and the thread goes on (its
/// caller gets no answer and says so).
fn work(shared: &Shared) {
    loop {
        let job = {
            let mut q = shared.queue.lock();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    break job;
                }
                if q.closed {
                    return;
                }
                shared.ready.wait(&mut q);
            }
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a read on the read pool panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn jobs_run_on_named_threads_and_a_panicking_job_does_not_stop_its_thread() {
        // One thread: the job after the panicking one runs on the same.
        let pool = ReadPool::new(1, "test-read").expect("pool");
        let (tx, rx) = mpsc::channel();
        pool.spawn(|| panic!("a bad read"));
        for i in 0..20 {
            let tx = tx.clone();
            pool.spawn(move || {
                let name = std::thread::current().name().map(str::to_string);
                let _ = tx.send((i, name));
            });
        }
        let mut got: Vec<(i32, Option<String>)> = (0..20)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("answer"))
            .collect();
        got.sort();
        assert_eq!(
            got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..20).collect::<Vec<_>>()
        );
        assert!(got
            .iter()
            .all(|(_, n)| n.as_deref().is_some_and(|n| n.starts_with("test-read-"))));
        let part = pool
            .parts()
            .install(|| std::thread::current().name().map(str::to_string));
        assert_eq!(
            part.as_deref().map(|n| n.starts_with("test-read-part-")),
            Some(true)
        );
    }
}
