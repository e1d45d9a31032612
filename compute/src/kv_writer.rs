//! Writing key-value pairs to whatever regions hold them, through region
//! errors and store failures: used by INSERT and by the bulk loader.
//!
//! Pairs are grouped by region and sent as one `BatchPut` per region.
//! NotLeader with a hint and EpochNotMatch are followed at once; an
//! unreachable store sends the batch to another replica; busy stores,
//! elections and overtaken proposals are retried with backoff until the
//! deadline.
//!
//! A write whose outcome is unknown (the store went away, the proposal was
//! overtaken, no answer in time) may have been applied. INSERT retries it
//! with `same_value_ok`: keys already holding exactly the values being
//! written count as written, so a retry of a write that did land is not
//! reported as a duplicate key, while a different existing row still is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_proto::kv::{key_error, BatchPutRequest, Context, KvPair};

use crate::cluster::Cluster;
use crate::dispatch::backoff::Backoff;
use crate::region_cache::RegionCache;
use crate::{Error, Result};

pub struct KvWriter {
    cluster: Arc<Cluster>,
    cache: Arc<RegionCache>,
}

/// Pairs for one region, and whether an earlier attempt's outcome is unknown.
struct Batch {
    pairs: Vec<KvPair>,
    retry: bool,
}

impl KvWriter {
    pub fn new(cluster: Arc<Cluster>, cache: Arc<RegionCache>) -> Self {
        KvWriter { cluster, cache }
    }

    /// Writes `pairs`. With `if_absent` the write is an INSERT: a key that
    /// already holds another value fails it with a duplicate key error.
    pub async fn put(
        &self,
        mut pairs: Vec<KvPair>,
        if_absent: bool,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new(
            Duration::from_millis(2),
            Duration::from_millis(500),
            deadline,
        );
        pairs.sort_by(|a, b| a.key.cmp(&b.key));
        let mut todo = vec![Batch {
            pairs,
            retry: false,
        }];
        // Stores we could not reach: NotLeader hints at them are stale.
        let mut failed_stores: Vec<u64> = Vec::new();
        while let Some(batch) = todo.pop() {
            if batch.pairs.is_empty() {
                continue;
            }
            let start = batch
                .pairs
                .first()
                .map(|p| p.key.clone())
                .unwrap_or_default();
            let mut end = batch
                .pairs
                .last()
                .map(|p| p.key.clone())
                .unwrap_or_default();
            end.push(0);
            let regions = self.cache.locate(&start, &end).await?;
            let mut by_region: BTreeMap<usize, Vec<KvPair>> = BTreeMap::new();
            for p in batch.pairs {
                let i = regions
                    .iter()
                    .position(|r| {
                        p.key >= r.region.start_key
                            && (r.region.end_key.is_empty() || p.key < r.region.end_key)
                    })
                    .ok_or_else(|| Error::Internal("no region for a key".into()))?;
                by_region.entry(i).or_default().push(p);
            }
            for (i, group) in by_region {
                let r = &regions[i];
                let req = BatchPutRequest {
                    context: Some(Context {
                        region_id: r.region.id,
                        region_epoch: r.region.epoch,
                    }),
                    pairs: group.clone(),
                    if_absent,
                    same_value_ok: batch.retry,
                };
                let mut client = self.cluster.kv(&r.addr)?;
                let mut call = tonic::Request::new(req);
                call.set_timeout(
                    deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(100),
                );
                let resp = match client.batch_put(call).await {
                    Ok(resp) => resp.into_inner(),
                    Err(st) => {
                        let what = || {
                            format!(
                                "writing to region {}: store {} at {} is unavailable: {}",
                                r.region.id,
                                r.store_id(),
                                r.addr,
                                crate::status_detail(&st)
                            )
                        };
                        failed_stores.push(r.store_id());
                        backoff
                            .sleep(&what)
                            .await
                            .map_err(|e| Error::Unavailable(e.to_string()))?;
                        if self
                            .cache
                            .switch_peer(r.region.id, r.store_id())
                            .await?
                            .is_none()
                        {
                            self.cache.invalidate(r.region.id);
                        }
                        todo.push(Batch {
                            pairs: group,
                            retry: true,
                        });
                        continue;
                    }
                };
                if let Some(e) = resp.error {
                    match key_error::Code::try_from(e.code) {
                        Ok(key_error::Code::InvalidInput) => {
                            return Err(Error::InvalidInput(e.message))
                        }
                        Ok(key_error::Code::Unavailable) => {
                            let what =
                                || format!("writing to region {}: {}", r.region.id, e.message);
                            backoff
                                .sleep(&what)
                                .await
                                .map_err(|e| Error::Unavailable(e.to_string()))?;
                            todo.push(Batch {
                                pairs: group,
                                retry: true,
                            });
                            continue;
                        }
                        _ => return Err(Error::Internal(e.message)),
                    }
                }
                let Some(re) = resp.region_error else {
                    continue;
                };
                let what = || format!("writing to region {}: {}", r.region.id, re.message);
                // NotLeader and epoch errors mean nothing was proposed; the
                // others leave the outcome unknown.
                let mut retry = batch.retry;
                if let Some(nl) = &re.not_leader {
                    match nl.leader.filter(|l| !failed_stores.contains(&l.store_id)) {
                        Some(leader) => {
                            self.cache
                                .set_leader(r.region.id, leader, nl.leader_store.clone())
                                .await?;
                        }
                        None => {
                            backoff
                                .sleep(&what)
                                .await
                                .map_err(|e| Error::Unavailable(e.to_string()))?;
                            self.cache.switch_peer(r.region.id, r.store_id()).await?;
                        }
                    }
                } else if let Some(enm) = re.epoch_not_match {
                    self.cache.invalidate(r.region.id);
                    self.cache.install_regions(enm.current_regions).await?;
                } else {
                    retry = true;
                    if re.region_not_found.is_some() || re.key_not_in_region.is_some() {
                        self.cache.invalidate(r.region.id);
                    }
                    backoff
                        .sleep(&what)
                        .await
                        .map_err(|e| Error::Unavailable(e.to_string()))?;
                }
                todo.push(Batch {
                    pairs: group,
                    retry,
                });
            }
        }
        Ok(())
    }
}
