//! Background duties of a storage process, every couple of seconds:
//!
//! * heartbeat to the meta leader (liveness, address, regions it leads)
//!   and refresh the store address book raft messages are routed with;
//! * on the meta leader: give the meta region its replicas on joining
//!   stores, and move replicas off stores down past `max-store-down-secs`;
//! * split regions this store leads once they pass `region-split-size`
//!   (new ids come from meta, the split goes through raft, and meta learns
//!   the new regions afterwards; until then requests with the old epoch get
//!   EpochNotMatch carrying the new regions).

use std::sync::Arc;
use std::time::Duration;

use quarry_proto::meta::meta_server::Meta as MetaRpc;
use quarry_proto::meta::{
    AllocIdsRequest, GetStoresRequest, Region, RegionEpoch, ReportRegionsRequest,
    Store as StoreInfo, StoreHeartbeatRequest,
};
use quarry_proto::raft::SplitRequest;
use tonic::Request;

use crate::engine::{Cf, Engine};
use crate::keys::META_REGION_ID;
use crate::node::Node;
use crate::service::meta::MetaService;
use crate::{Error, Result};

pub struct Worker<E: Engine> {
    node: Arc<Node<E>>,
    meta: Arc<MetaService<E>>,
    me: StoreInfo,
    split_size: u64,
}

fn status_err(s: tonic::Status) -> Error {
    match s.code() {
        tonic::Code::InvalidArgument => Error::InvalidInput(s.message().into()),
        _ => Error::Unavailable(s.message().into()),
    }
}

impl<E: Engine> Worker<E> {
    pub fn new(
        node: Arc<Node<E>>,
        meta: Arc<MetaService<E>>,
        me: StoreInfo,
        split_size: u64,
    ) -> Self {
        Worker {
            node,
            meta,
            me,
            split_size,
        }
    }

    pub async fn run(self: Arc<Self>) {
        let mut round = 0u64;
        loop {
            // Quickly at first, while the cluster forms; then every 2 s.
            let pause = if round < 20 { 500 } else { 2000 };
            if let Err(e) = self.heartbeat().await {
                tracing::debug!("heartbeat: {e}");
            }
            let leading = self.node.read_check(META_REGION_ID, None).await.is_ok();
            self.meta.meta().note_leadership(leading);
            if leading {
                if let Err(e) = self.meta.meta().ensure_meta_replicas().await {
                    tracing::debug!("meta replicas: {e}");
                }
                if let Err(e) = self.meta.meta().repair_replicas().await {
                    tracing::warn!("re-creating replicas: {e}");
                }
            }
            if round % 5 == 4 && round >= 20 {
                if let Err(e) = self.split_check().await {
                    tracing::debug!("split check: {e}");
                }
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    async fn heartbeat(&self) -> Result<()> {
        let status = self.node.status().await?;
        let leaders = status
            .regions
            .iter()
            .filter(|r| r.is_leader)
            .filter_map(|r| r.region.as_ref().map(|r| r.id))
            .collect();
        self.meta
            .store_heartbeat(Request::new(StoreHeartbeatRequest {
                store: Some(self.me.clone()),
                leader_region_ids: leaders,
                region_count: status.regions.len() as u64,
            }))
            .await
            .map_err(status_err)?;
        let stores = self
            .meta
            .get_stores(Request::new(GetStoresRequest {}))
            .await
            .map_err(status_err)?
            .into_inner()
            .stores;
        for s in stores {
            self.node.resolver.set(s.id, s.addr);
        }
        Ok(())
    }

    async fn split_check(&self) -> Result<()> {
        let status = self.node.status().await?;
        for r in status.regions.into_iter().filter(|r| r.is_leader) {
            let Some(region) = r.region else { continue };
            if region.id == META_REGION_ID {
                continue;
            }
            let size = self
                .node
                .engine()
                .approximate_size(&region.start_key, &region.end_key);
            if size > self.split_size {
                tracing::info!(region = region.id, size, "region is past the split size");
                if let Err(e) = self.split(region.id, region.epoch, None).await {
                    tracing::warn!(region = region.id, "split failed: {e}");
                }
            }
        }
        Ok(())
    }

    /// The key in the middle of a region's data (by bytes).
    fn middle_key(&self, region: &Region) -> Result<Vec<u8>> {
        let mut samples: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut total = 0u64;
        let mut n = 0u64;
        self.node.engine().scan(
            Cf::Default,
            &region.start_key,
            &region.end_key,
            &mut |k, v| {
                total += (k.len() + v.len()) as u64;
                if n.is_multiple_of(64) {
                    samples.push((total, k.to_vec()));
                }
                n += 1;
                true
            },
        )?;
        let half = total / 2;
        samples
            .into_iter()
            .find(|(at, k)| *at >= half && k.as_slice() > region.start_key.as_slice())
            .map(|(_, k)| k)
            .ok_or_else(|| {
                Error::InvalidInput(format!("region {} is too small to split", region.id))
            })
    }

    /// Splits a region this store leads, at `key` or at its middle.
    pub async fn split(
        &self,
        region_id: u64,
        epoch: Option<RegionEpoch>,
        key: Option<Vec<u8>>,
    ) -> Result<(Region, Region)> {
        let region = self.node.read_check(region_id, epoch).await?;
        let key = match key {
            Some(k) => k,
            None => self.middle_key(&region)?,
        };
        let n = region.peers.len() as u64;
        let first = self
            .meta
            .alloc_ids(Request::new(AllocIdsRequest { count: 1 + n }))
            .await
            .map_err(status_err)?
            .into_inner()
            .first;
        let split = SplitRequest {
            split_key: key,
            new_region_id: first,
            new_peer_ids: (1..=n).map(|i| first + i).collect(),
        };
        let (left, right) = self.node.split(region_id, region.epoch, split).await?;
        if let Err(e) = self
            .meta
            .report_regions(Request::new(ReportRegionsRequest {
                regions: vec![left.clone(), right.clone()],
            }))
            .await
        {
            // Compute learns the new regions from EpochNotMatch meanwhile.
            tracing::warn!(
                region = region_id,
                "reporting a split to meta: {}",
                e.message()
            );
        }
        Ok((left, right))
    }
}
