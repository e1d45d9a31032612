//! Replicas on the meta leader's watch: re-creating the replicas of a
//! store that has been down for `max-store-down-secs` on live stores
//! ([`Meta::repair_replicas`]), giving regions made before enough stores
//! joined their missing peers, and growing the meta region's own replica
//! set as stores join ([`Meta::ensure_meta_replicas`]). The worker calls
//! both on the meta leader every round (`worker.rs`).

use futures::StreamExt;
use quarry_proto::meta::{Peer, Region, Store as StoreInfo};

use super::{Meta, STORE_DOWN_AFTER};
use crate::engine::Engine;
use crate::keys;
use crate::peers::unreachable;
use crate::{Error, Result};

/// How many regions the meta leader repairs at once after a store died.
pub const REPAIR_CONCURRENCY: usize = 8;

impl<E: Engine> Meta<E> {
    /// On the meta leader: moves replicas off stores that have been down
    /// longer than `max-store-down-secs`, onto live stores without one:
    /// remove the dead peer, then add a new one. Regions are repaired
    /// [`REPAIR_CONCURRENCY`] at a time.
    ///
    /// Removing first is what TiKV's PD gets from adding a learner: the
    /// conf change that adds the replacement commits among the live peers
    /// alone. Adding first would make a four-peer group whose quorum (3)
    /// needs the new, empty peer, so removing the dead one would wait for
    /// the new peer's snapshot. Both orders survive the same failures
    /// during the repair (one more lost store blocks the region either
    /// way).
    pub async fn repair_replicas(&self) -> Result<()> {
        tracing::trace!(leading_for = ?self.leading_for(), "checking for replicas on down stores");
        if self.leading_for() < self.max_store_down.max(STORE_DOWN_AFTER) {
            // Liveness here is too young to call any store dead.
            return Ok(());
        }
        let all = self.stores().await?;
        let dead: Vec<u64> = {
            let live = self.live.lock();
            all.iter()
                .filter(|s| {
                    live.get(&s.id)
                        .is_none_or(|l| l.last_seen.elapsed() > self.max_store_down)
                })
                .map(|s| s.id)
                .collect()
        };
        let live = self.live_stores(&all);
        let regions = self.regions_in(b"", b"").await?;
        // Adding the meta region's replicas is ensure_meta_replicas' job.
        let want = self.replicas.min(all.len());
        let needs_repair = |r: &Region| {
            (r.id != keys::META_REGION_ID && r.peers.len() < want)
                || r.peers.iter().any(|p| dead.contains(&p.store_id))
        };
        if !regions.iter().any(needs_repair) {
            return Ok(());
        }
        tracing::debug!(?dead, "repairing regions with replicas on down stores");
        futures::stream::iter(regions.iter().filter(|r| needs_repair(r)))
            .for_each_concurrent(REPAIR_CONCURRENCY, |region| async {
                // One region's failure (its leader moving, a slow
                // snapshot) must not stop the others: it is retried next
                // round.
                if let Err(e) = self.repair_region(region, &dead, &live, &all).await {
                    tracing::warn!(region = region.id, "re-creating a replica: {e}");
                }
            })
            .await;
        Ok(())
    }

    /// Moves one replica of `region` off a dead store: removes the dead
    /// peer, then adds one on a live store without one. A region with
    /// fewer than `replicas` peers (a repair cut short between its two
    /// steps, or one made while fewer stores had joined) only gets the new
    /// peer. A dead peer stays while no live store could take its place.
    async fn repair_region(
        &self,
        region: &Region,
        dead: &[u64],
        live: &[StoreInfo],
        all: &[StoreInfo],
    ) -> Result<()> {
        let target = live
            .iter()
            .find(|s| !region.peers.iter().any(|p| p.store_id == s.id));
        let gone = region
            .peers
            .iter()
            .find(|p| dead.contains(&p.store_id))
            .copied();
        // A dead store's last heartbeat still lists the regions it led
        // then: asking it would fail every round, and the region's new
        // leader, on a live store, would never be asked.
        let leader_store = {
            let live = self.live.lock();
            region
                .peers
                .iter()
                .find(|p| {
                    !dead.contains(&p.store_id)
                        && live
                            .get(&p.store_id)
                            .is_some_and(|l| l.leaders.contains(&region.id))
                })
                .map(|p| p.store_id)
        };
        let Some(leader_store) = leader_store.and_then(|id| all.iter().find(|s| s.id == id)) else {
            tracing::debug!(
                region = region.id,
                "no leader known yet for a region to repair"
            );
            return Ok(());
        };
        let mut peers = region.peers.len();
        if let Some(gone) = gone {
            if target.is_none() && peers <= self.replicas {
                return Ok(());
            }
            tracing::info!(
                region = region.id,
                store = gone.store_id,
                "removing the replica of a store that is down"
            );
            let removed = self
                .change_peer_at(leader_store, region.id, gone, true)
                .await?;
            peers = removed.peers.len();
            self.report_regions(vec![removed]).await?;
        }
        if peers < self.replicas.min(all.len()) {
            let Some(target) = target else {
                return Ok(());
            };
            let id = self.alloc_ids(1).await?;
            let new_peer = Peer {
                id,
                store_id: target.id,
            };
            tracing::info!(
                region = region.id,
                to = target.id,
                "re-creating a replica on a live store"
            );
            let added = self
                .change_peer_at(leader_store, region.id, new_peer, false)
                .await?;
            self.report_regions(vec![added]).await?;
        }
        Ok(())
    }

    async fn change_peer_at(
        &self,
        leader: &StoreInfo,
        region_id: u64,
        peer: Peer,
        remove: bool,
    ) -> Result<Region> {
        if leader.id == self.node.store_id {
            return self.node.change_peer(region_id, peer, remove).await;
        }
        let mut c = self.peers.admin(&leader.addr)?;
        c.change_peer(quarry_proto::meta::ChangePeerRequest {
            region_id,
            peer: Some(peer),
            remove,
        })
        .await
        .map_err(|st| {
            unreachable(
                &format!("changing the peers of region {region_id}"),
                &leader.addr,
                &st,
            )
        })?
        .into_inner()
        .region
        .ok_or_else(|| Error::Internal("ChangePeer answered without a region".into()))
    }

    /// On the meta leader: gives the meta region `replicas` replicas on
    /// live stores, one membership change after another.
    pub async fn ensure_meta_replicas(&self) -> Result<()> {
        loop {
            let region = self.leader().await?;
            let all = self.stores().await?;
            let live = self.live_stores(&all);
            let want = self.replicas.min(all.len());
            if region.peers.len() >= want {
                return Ok(());
            }
            let Some(target) = live
                .iter()
                .find(|s| !region.peers.iter().any(|p| p.store_id == s.id))
            else {
                return Ok(());
            };
            let id = self.alloc_ids(1).await?;
            let peer = Peer {
                id,
                store_id: target.id,
            };
            tracing::info!(store = target.id, peer = id, "adding a meta region replica");
            let region = self
                .node
                .change_peer(keys::META_REGION_ID, peer, false)
                .await?;
            self.report_regions(vec![region]).await?;
        }
    }
}
