//! Destroying the peers of dropped tables' regions, after the drop.
//!
//! DROP TABLE is one meta write (`Meta::drop_table`): the table leaves the
//! catalog and its regions the directory, and each region is queued under
//! `keys::DROPPED_REGION`. The meta leader's worker then destroys the
//! queued regions' peers a batch per round ([`Meta::collect_dropped`]),
//! and a region leaves the queue once every peer of it is gone. So a
//! table of thousands of regions drops as fast as one of a single region,
//! its name is free at once, and a crash or a leader change mid-way
//! loses nothing: the queue is in the replicated meta region, and
//! destroying a peer that is already gone is a no-op. This is TiDB's
//! delete-range GC in spirit: the statement records what to remove, a
//! background job removes it.
//!
//! A peer on a store that is down stays queued until the store is back; a
//! store no longer in the cluster has nothing to destroy.

use futures::StreamExt;
use quarry_proto::meta::Region;

use super::Meta;
use crate::engine::Engine;
use crate::keys;
use crate::Result;

/// Queued regions whose peers one round destroys.
const COLLECT_PER_ROUND: usize = 1024;

/// Regions whose peers are destroyed at once.
const COLLECT_CONCURRENCY: usize = 16;

impl<E: Engine> Meta<E> {
    /// On the meta leader: destroys the peers of up to
    /// `COLLECT_PER_ROUND` queued regions and takes the ones done off
    /// the queue. Returns how many left it.
    pub async fn collect_dropped(&self) -> Result<usize> {
        let queued: Vec<Region> = self.scan_all(keys::DROPPED_REGION)?;
        if queued.is_empty() {
            return Ok(0);
        }
        let all = self.stores().await?;
        let live = self.live_stores(&all);
        // Regions with a peer on a down store wait for it, without
        // holding up the rest of the queue.
        let ready = queued.into_iter().filter(|r| {
            r.peers.iter().all(|p| {
                live.iter().any(|l| l.id == p.store_id) || !all.iter().any(|s| s.id == p.store_id)
            })
        });
        let done: Vec<u64> = futures::stream::iter(ready.take(COLLECT_PER_ROUND))
            .map(|r| {
                let all = &all;
                async move {
                    let mut gone = true;
                    for p in &r.peers {
                        let Some(s) = all.iter().find(|s| s.id == p.store_id) else {
                            continue;
                        };
                        if let Err(e) = self.destroy_on_store(r.id, s).await {
                            tracing::debug!("dropped region {}: {e}", r.id);
                            gone = false;
                        }
                    }
                    gone.then_some(r.id)
                }
            })
            .buffer_unordered(COLLECT_CONCURRENCY)
            .filter_map(std::future::ready)
            .collect()
            .await;
        if done.is_empty() {
            return Ok(0);
        }
        let meta_region = self.leader().await?;
        let deletes = done
            .iter()
            .map(|id| keys::dropped_region_key(*id))
            .collect();
        self.propose(&meta_region, vec![], deletes).await?;
        tracing::info!(
            regions = done.len(),
            "destroyed the peers of dropped regions"
        );
        Ok(done.len())
    }
}
