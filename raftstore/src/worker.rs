//! Background duties of a storage process, every couple of seconds:
//!
//! * heartbeat to the meta leader (liveness, address, regions it leads)
//!   and refresh the store address book raft messages are routed with —
//!   in a loop of its own, so that slow duties below never delay it;
//! * on the meta leader: give the meta region its replicas on joining
//!   stores, move replicas off stores down past `max-store-down-secs`,
//!   destroy dropped tables' regions, and put right the tables of
//!   restores that stopped half-way ([`crate::meta::restores`]);
//! * split regions this store leads once they pass `region-split-size-mb`
//!   (new ids come from meta, the split goes through raft, and meta learns
//!   the new regions afterwards; until then requests with the old epoch get
//!   EpochNotMatch carrying the region as it is now, and compute backs off
//!   until meta routes the part that moved out). A column table's region is
//!   split only where no pack straddles the split;
//! * fold the row delta of column-table regions it leads into packs once
//!   it passes `compact-delta-rows` (see [`crate::compaction`]).

use std::sync::Arc;
use std::time::Duration;

use quarry_proto::meta::meta_server::Meta as MetaRpc;
use quarry_proto::meta::{
    AllocIdsRequest, GetStoresRequest, Layout, ListTablesRequest, Region, RegionEpoch,
    ReportRegionsRequest, Store as StoreInfo, StoreHeartbeatRequest,
};
use quarry_proto::raft::SplitRequest;
use tonic::Request;

use crate::compaction::{plan_compaction, split_point, DeltaStats};
use crate::engine::{Cf, Engine};
use crate::keys::META_REGION_ID;
use crate::node::Node;
use crate::service::meta::MetaService;
use crate::{Error, Result};

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub struct Worker<E: Engine> {
    node: Arc<Node<E>>,
    meta: Arc<MetaService<E>>,
    me: StoreInfo,
    split_size: u64,
    delta: Arc<DeltaStats>,
    compact_delta_rows: u64,
}

/// How long a store keeps retrying the report of a split it made.
const SPLIT_REPORT_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// Tells meta a split's two regions (the `split_report` failpoint fails it).
async fn report_split<E: Engine>(
    meta: &MetaService<E>,
    store_id: u64,
    regions: Vec<Region>,
) -> Result<()> {
    if quarry_proto::failpoint::fires_on("split_report", store_id) {
        return Err(Error::Unavailable(quarry_proto::failpoint::injected(
            "split_report",
        )));
    }
    meta.report_regions(Request::new(ReportRegionsRequest { regions }))
        .await
        .map(|_| ())
        .map_err(status_err)
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
        delta: Arc<DeltaStats>,
        compact_delta_rows: u64,
    ) -> Self {
        Worker {
            node,
            meta,
            me,
            split_size,
            delta,
            compact_delta_rows,
        }
    }

    /// Runs the duties as two loops: the heartbeat alone, so that a long
    /// compaction, split or replica repair never makes this store look
    /// down to the meta leader (with a short `max-store-down-secs` that
    /// would move replicas off a live store), and everything else.
    pub async fn run(self: Arc<Self>) {
        // Aborting `run` (at shutdown) drops the guard, which aborts the
        // heartbeat task: nothing keeps holding the node.
        let beat = AbortOnDrop(tokio::spawn(self.clone().heartbeat_loop()));
        self.duties_loop().await;
        drop(beat);
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        let mut round = 0u64;
        loop {
            if let Err(e) = self.heartbeat().await {
                tracing::debug!("heartbeat: {e}");
            }
            round += 1;
            tokio::time::sleep(Self::beat_pause(round)).await;
        }
    }

    /// Quickly at first, while the cluster forms; then every 2 s.
    fn pause(round: u64) -> Duration {
        Duration::from_millis(if round < 20 { 500 } else { 2000 })
    }

    /// Heartbeats: every second once the cluster formed (GC holds reach
    /// the store in the answers, `Node::gc_safe_point`).
    fn beat_pause(round: u64) -> Duration {
        Duration::from_millis(if round < 20 { 500 } else { 1000 })
    }

    async fn duties_loop(&self) {
        let mut round = 0u64;
        loop {
            let leading = self.node.read_check(META_REGION_ID, None).await.is_ok();
            self.meta.meta().note_leadership(leading);
            if leading {
                if let Err(e) = self.meta.meta().ensure_meta_replicas().await {
                    tracing::debug!("meta replicas: {e}");
                }
                if let Err(e) = self.meta.meta().repair_replicas().await {
                    tracing::warn!("re-creating replicas: {e}");
                }
                if let Err(e) = self.meta.meta().reclaim_abandoned_creates().await {
                    tracing::warn!("regions of creates that never committed: {e}");
                }
                if let Err(e) = self.meta.meta().collect_dropped().await {
                    tracing::warn!("destroying dropped regions: {e}");
                }
                if round.is_multiple_of(4) {
                    if let Err(e) = self.meta.meta().reap_restores().await {
                        tracing::warn!("tables of interrupted restores: {e}");
                    }
                }
            }
            // Keeps the region, leader and RocksDB gauges (metrics.rs) fresh.
            if let Err(e) = self.node.status().await {
                tracing::debug!("status for the metrics: {e}");
            }
            if let Err(e) = self.compact_check().await {
                tracing::debug!("compaction: {e}");
            }
            if round % 5 == 4 && round >= 20 {
                if let Err(e) = self.split_check().await {
                    tracing::debug!("split check: {e}");
                }
            }
            round += 1;
            tokio::time::sleep(Self::pause(round)).await;
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
        let beat = self
            .meta
            .store_heartbeat(Request::new(StoreHeartbeatRequest {
                store: Some(self.me.clone()),
                leader_region_ids: leaders,
                region_count: status.regions.len() as u64,
            }))
            .await
            .map_err(status_err)?
            .into_inner();
        if beat.gc_hold_known {
            self.node.set_gc_hold(beat.gc_hold);
        }
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

    /// Folds the delta of column-table regions this store leads into
    /// packs, for regions that took at least `compact-delta-rows` row
    /// writes since they were last looked at.
    async fn compact_check(&self) -> Result<()> {
        let ready = self.delta.take_ready(self.compact_delta_rows);
        if ready.is_empty() {
            return Ok(());
        }
        let tables = self
            .meta
            .list_tables(Request::new(ListTablesRequest {}))
            .await
            .map_err(status_err)?
            .into_inner()
            .tables;
        for region_id in ready {
            let Ok(region) = self.node.read_check(region_id, None).await else {
                continue; // not the leader (any more): its leader compacts
            };
            let table_id = (region.start_key.first() == Some(&b't'))
                .then(|| {
                    quarry_coprocessor::codec::key::decode_i64(region.start_key.get(1..)?).ok()
                })
                .flatten();
            let Some(table) = tables
                .iter()
                .find(|t| Some(t.id) == table_id && t.layout == Layout::Column as i32)
                .cloned()
            else {
                continue;
            };
            let engine = self.node.engine().clone();
            let r = region.clone();
            let safe_point = self.node.gc_safe_point();
            let (planned, pinned) = tokio::task::spawn_blocking(move || {
                plan_compaction(engine.as_ref(), &r, &table, safe_point)
            })
            .await
            .map_err(|e| Error::Internal(format!("compaction task: {e}")))??;
            if pinned > 0 {
                // Versions above the safe point fold in a later round.
                self.delta.restore(region.id, self.compact_delta_rows);
            }
            let Some((write, summary)) = planned else {
                continue;
            };
            match self.node.write(region.id, region.epoch, write).await {
                Ok(()) => tracing::info!(
                    region = region.id,
                    delta_rows = summary.delta_rows,
                    packs_replaced = summary.packs_replaced,
                    packs_written = summary.packs_written,
                    "compacted the row delta into packs"
                ),
                Err(e) => {
                    tracing::debug!(region = region.id, "compaction not applied: {e}");
                    self.delta.restore(region.id, self.compact_delta_rows);
                }
            }
        }
        Ok(())
    }

    /// The key in the middle of a region's data (by bytes), where no
    /// column-layout pack straddles the split.
    fn middle_key(&self, region: &Region) -> Result<Vec<u8>> {
        let mut samples: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut total = 0u64;
        let mut n = 0u64;
        let mut last_pack: Option<(i64, i64)> = None;
        self.node.engine().scan(
            Cf::Default,
            &region.start_key,
            &region.end_key,
            &mut |k, v| {
                total += (k.len() + v.len()) as u64;
                let is_pack = matches!(
                    quarry_coprocessor::codec::key::classify_key(k),
                    quarry_coprocessor::codec::key::KeyKind::Pack(_)
                );
                if is_pack || n.is_multiple_of(64) {
                    if let Some(at) = split_point(k, last_pack) {
                        samples.push((total, at));
                    }
                }
                if is_pack {
                    if let Ok(p) = quarry_coprocessor::codec::pack::PackView::parse(v) {
                        last_pack = Some((p.first_handle(), p.last_handle()));
                    }
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
        let regions = vec![left.clone(), right.clone()];
        if let Err(e) = report_split(&self.meta, self.me.id, regions.clone()).await {
            // Compute learns the region's new range from EpochNotMatch,
            // but meta routes the part that moved out to the old epoch
            // until the regions are reported: retried in the background
            // (meta keeps the newer epoch, so a late report is harmless).
            tracing::warn!(
                region = region_id,
                "reporting a split to meta: {e}; retrying in the background"
            );
            let (meta, store) = (self.meta.clone(), self.me.id);
            tokio::spawn(async move {
                let t0 = std::time::Instant::now();
                let mut wait = std::time::Duration::from_millis(200);
                loop {
                    tokio::time::sleep(wait).await;
                    match report_split(&meta, store, regions.clone()).await {
                        Ok(()) => {
                            tracing::info!(region = region_id, "split reported to meta");
                            return;
                        }
                        Err(e) if t0.elapsed() > SPLIT_REPORT_RETRY_FOR => {
                            tracing::error!(
                                region = region_id,
                                "gave up reporting a split to meta: {e}"
                            );
                            return;
                        }
                        Err(_) => wait = (wait * 2).min(std::time::Duration::from_secs(5)),
                    }
                }
            });
        }
        Ok((left, right))
    }
}
