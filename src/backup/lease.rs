//! A running restore's sign of life: a GC hold per table it restores,
//! `restore:<name>` (`quarry_raftstore::meta::restores`), renewed every
//! second with a TTL of five. While the hold lasts, the meta leader leaves
//! the restore's `__restore_<name>` and `__replaced_<name>` tables alone;
//! once it lapses (the restore's process died) it drops or renames them
//! back. Each renewal holds at a fresh timestamp, so GC is kept back by
//! about a second, however long the restore.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quarry_compute::cluster::Cluster;
use quarry_compute::engine::QueryEngine;
use quarry_compute::txn::Txns;
use quarry_raftstore::meta::restores::restore_holder;
use quarry_raftstore::meta::MAX_GC_HOLD_TTL;

/// How often the holds are renewed (their TTL is [`MAX_GC_HOLD_TTL`]).
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// The holds of one restore; released when dropped.
pub struct RestoreLease {
    cluster: Arc<Cluster>,
    holders: Vec<String>,
    renewing: tokio::task::JoinHandle<()>,
}

impl RestoreLease {
    /// Takes the holds for `tables` (the meta leader has them when this
    /// returns) and starts renewing them.
    pub async fn take(engine: &QueryEngine, tables: &[&str]) -> Result<RestoreLease> {
        let txns = engine.txns().clone();
        let cluster = engine.cluster().clone();
        let holders: Vec<String> = tables.iter().map(|t| restore_holder(t)).collect();
        renew(&txns, &cluster, &holders)
            .await
            .context("registering the restore with the meta service")?;
        let renewing = tokio::spawn({
            let (cluster, holders) = (cluster.clone(), holders.clone());
            async move {
                loop {
                    tokio::time::sleep(RENEW_EVERY).await;
                    if let Err(e) = renew(&txns, &cluster, &holders).await {
                        tracing::warn!("renewing the restore's hold: {e}");
                    }
                }
            }
        });
        Ok(RestoreLease {
            cluster,
            holders,
            renewing,
        })
    }
}

impl Drop for RestoreLease {
    fn drop(&mut self) {
        self.renewing.abort();
        let (cluster, holders) = (self.cluster.clone(), std::mem::take(&mut self.holders));
        // Released at once rather than after the TTL; a release that is
        // lost lapses by itself.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = hold(&cluster, &holders, 0).await;
            });
        }
    }
}

/// Holds each of `holders` at a fresh timestamp.
async fn renew(txns: &Txns, cluster: &Cluster, holders: &[String]) -> Result<()> {
    let ts = txns.timestamp().await?;
    hold(cluster, holders, ts).await
}

/// Holds (`ts` 0: releases) each of `holders` at `ts`, all at once.
async fn hold(cluster: &Cluster, holders: &[String], ts: u64) -> Result<()> {
    let calls = holders
        .iter()
        .map(|holder| cluster.hold_gc("holding a restore's tables", holder, ts, MAX_GC_HOLD_TTL));
    for r in futures::future::join_all(calls).await {
        r?;
    }
    Ok(())
}
