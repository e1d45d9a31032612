//! Timestamps from the oracle, concurrent requests coalesced into one RPC
//! (what PD's client does).
//!
//! Every query takes a `read_ts` and every transaction a `start_ts` and a
//! `commit_ts`: with many clients, one `Meta.GetTimestamps` per timestamp
//! would make the meta leader's RPC rate the limit. Here callers queue;
//! one task at a time takes everything queued, asks for that many
//! timestamps in one request, and hands them out in order, then takes
//! whatever queued meanwhile.
//!
//! Freshness is kept: a caller's timestamp comes from a request sent after
//! the caller asked, so it is above every timestamp handed out (and every
//! commit made) before the caller asked — a read at it sees them all.
//!
//! Each answer also carries the catalog's version as of its timestamps
//! ([`Stamp`]): a query planned over a kept catalog checks it there, at
//! no extra round trip (`catalog_cache.rs`).

use std::sync::Arc;

use parking_lot::Mutex;
use quarry_proto::meta::GetTimestampsRequest;
use tokio::sync::oneshot;

use crate::cluster::Cluster;
use crate::{Error, Result};

/// A timestamp and the catalog's version read after it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub ts: u64,
    pub catalog_version: u64,
}

/// Callers waiting for a timestamp, and whether a task is serving them.
#[derive(Default)]
struct Queue {
    waiting: Vec<oneshot::Sender<Result<Stamp>>>,
    serving: bool,
}

/// The timestamp client of a compute process.
pub struct Tso {
    cluster: Arc<Cluster>,
    queue: Mutex<Queue>,
}

impl Tso {
    pub fn new(cluster: Arc<Cluster>) -> Arc<Self> {
        Arc::new(Tso {
            cluster,
            queue: Mutex::default(),
        })
    }

    /// A fresh timestamp: above every timestamp handed out before this
    /// call.
    pub async fn get(self: &Arc<Self>) -> Result<u64> {
        Ok(self.stamp().await?.ts)
    }

    /// [`Tso::get`] with the catalog's version as of the timestamp.
    pub async fn stamp(self: &Arc<Self>) -> Result<Stamp> {
        let (tx, rx) = oneshot::channel();
        let start_serving = {
            let mut q = self.queue.lock();
            q.waiting.push(tx);
            !std::mem::replace(&mut q.serving, true)
        };
        if start_serving {
            let me = self.clone();
            tokio::spawn(async move { me.serve().await });
        }
        // The request is served by a task of its own, which no statement's
        // deadline bounds: a statement waits for it until its deadline, and
        // then says whether meta is down or only slow.
        let answer = match crate::statement_deadline::current_deadline() {
            Some(at) => match tokio::time::timeout_at(at.into(), rx).await {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(match self.cluster.meta_failure() {
                        Some(why) => Error::Unavailable(format!(
                            "getting a timestamp: the meta service is unavailable ({why})"
                        )),
                        None => Error::Deadline(
                            "getting a timestamp: the meta service did not answer before the \
                             statement's deadline"
                                .into(),
                        ),
                    })
                }
            },
            None => rx.await,
        };
        answer.map_err(|_| Error::Internal("the timestamp task stopped".into()))?
    }

    /// Serves the queue, one batch per request, until it is empty.
    async fn serve(&self) {
        // Should this task panic, the queue must not stay marked as served:
        // the next caller starts a new task instead of waiting forever.
        struct Unmark<'a>(&'a Mutex<Queue>);
        impl Drop for Unmark<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.lock().serving = false;
                }
            }
        }
        let _unmark = Unmark(&self.queue);
        loop {
            let batch = {
                let mut q = self.queue.lock();
                if q.waiting.is_empty() {
                    q.serving = false;
                    return;
                }
                std::mem::take(&mut q.waiting)
            };
            let count = batch.len() as u32;
            let got = self
                .cluster
                .meta("getting a timestamp", |mut c| async move {
                    c.get_timestamps(GetTimestampsRequest { count }).await
                })
                .await;
            match got {
                Ok(r) => {
                    for (i, tx) in batch.into_iter().enumerate() {
                        let _ = tx.send(Ok(Stamp {
                            ts: r.first + i as u64,
                            catalog_version: r.catalog_version,
                        }));
                    }
                }
                Err(e) => {
                    for tx in batch {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}
