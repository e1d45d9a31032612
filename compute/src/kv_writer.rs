//! Writing key-value pairs to whatever regions hold them, through region
//! errors and store failures: the bulk loaders' `BatchPut`s (INSERT
//! goes through transactions, `txn.rs`).
//!
//! Pairs are grouped by region and sent as one `BatchPut` per region, a
//! few regions at once. Region errors, unreachable stores, busy stores,
//! elections and overtaken proposals are the shared retry layer's
//! (`retry.rs`), the same that serves reads.
//!
//! A write whose outcome is unknown (the store went away, the proposal was
//! overtaken, no answer in time) may have been applied. INSERT retries it
//! with `same_value_ok`: keys already holding exactly the values being
//! written count as written, so a retry of a write that did land is not
//! reported as a duplicate key, while a different existing row still is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::kv::{key_error, BatchPutRequest, KvPair};

use crate::cluster::KvTransport;
use crate::region_cache::{cut_sorted, span_of, Located, RegionCache};
use crate::retry::{Attempt, RegionWork, Retry, RetryConfig, RetryStats};
use crate::{Error, Result};

/// Region batches written at once by one `put`.
const WRITE_CONCURRENCY: usize = 8;

pub struct KvWriter {
    transport: Arc<dyn KvTransport>,
    cache: Arc<RegionCache>,
    retry: RetryConfig,
}

/// Sorted pairs on their way to the regions that hold them.
struct PutWork {
    pairs: Vec<KvPair>,
    if_absent: bool,
    /// An earlier attempt's outcome is unknown: keys already holding
    /// exactly these values count as written.
    same_value_ok: bool,
    transport: Arc<dyn KvTransport>,
}

impl RegionWork for PutWork {
    fn span(&self) -> Option<KeyRange> {
        Some(span_of(&self.pairs.first()?.key, &self.pairs.last()?.key))
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        let pieces = cut_sorted(self.pairs, regions, |p| &p.key)?;
        Ok(pieces
            .into_iter()
            .map(|(region, pairs)| {
                let work = PutWork {
                    pairs,
                    if_absent: self.if_absent,
                    same_value_ok: self.same_value_ok,
                    transport: self.transport.clone(),
                };
                (region, work)
            })
            .collect())
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let req = BatchPutRequest {
                context: Some(region.context()),
                pairs: self.pairs.clone(),
                if_absent: self.if_absent,
                same_value_ok: self.same_value_ok,
            };
            let resp = match self
                .transport
                .batch_put(&region.addr, req, timeout + Duration::from_millis(100))
                .await
            {
                Ok(r) => r,
                Err(st) => return Ok(Attempt::Unreachable(st)),
            };
            if let Some(e) = resp.error {
                return match key_error::Code::try_from(e.code) {
                    Ok(key_error::Code::InvalidInput) => Err(Error::InvalidInput(e.message)),
                    Ok(key_error::Code::Unavailable) => {
                        Ok(Attempt::Busy(format!("writing: {}", e.message)))
                    }
                    _ => Err(Error::Internal(e.message)),
                };
            }
            Ok(match resp.region_error {
                Some(re) => Attempt::Region(Box::new(re)),
                None => Attempt::Done,
            })
        })
    }

    fn outcome_unknown(&mut self) {
        self.same_value_ok = true;
    }
}

impl KvWriter {
    pub fn new(transport: Arc<dyn KvTransport>, cache: Arc<RegionCache>) -> Self {
        KvWriter {
            transport,
            cache,
            retry: RetryConfig {
                concurrency: WRITE_CONCURRENCY,
                backoff_base: Duration::from_millis(2),
                backoff_max: Duration::from_millis(500),
                // Until the deadline: a load waits out a store's restart.
                give_up: None,
                what: "write",
            },
        }
    }

    /// Writes `pairs`. With `if_absent` the write is an INSERT: a key that
    /// already holds another value fails it with a duplicate key error.
    pub async fn put(
        &self,
        mut pairs: Vec<KvPair>,
        if_absent: bool,
        timeout: Duration,
    ) -> Result<()> {
        pairs.sort_by(|a, b| a.key.cmp(&b.key));
        let stats = RetryStats::default();
        let retry = Retry {
            cache: &self.cache,
            cfg: &self.retry,
            stats: &stats,
        };
        let work = PutWork {
            pairs,
            if_absent,
            same_value_ok: false,
            transport: self.transport.clone(),
        };
        // A write that ran out of time could not reach a store that
        // would take it: unavailable, as the writer has always said.
        retry
            .run(work, Instant::now() + timeout)
            .await
            .map_err(|e| match e {
                Error::Deadline(m) => Error::Unavailable(m),
                other => other,
            })
    }
}
