//! `quarry status`: what a store says about its regions.

use std::time::Duration;

use anyhow::{Context, Result};
use quarry_coprocessor::codec::key::hex;
use quarry_proto::meta::admin_client::AdminClient;
use quarry_proto::meta::{RegionStatus, StatusRequest, StatusResponse};

/// A channel to the store at `addr`, with `quarry status`'s timeouts.
async fn connect(addr: &str) -> Result<tonic::transport::Channel> {
    quarry_proto::security::endpoint(addr)
        .map_err(anyhow::Error::msg)?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// The status of the store at `addr`.
pub async fn fetch(addr: &str) -> Result<StatusResponse> {
    let ch = connect(addr).await?;
    Ok(AdminClient::new(ch)
        .status(StatusRequest {})
        .await?
        .into_inner())
}

/// Whether some replica has applied less than its region's leader, over
/// the statuses of a cluster's stores. A region whose leader is not among
/// them counts as caught up.
pub fn followers_behind(all: &[StatusResponse]) -> bool {
    let id = |r: &RegionStatus| r.region.as_ref().map_or(0, |g| g.id);
    let leader_applied: std::collections::HashMap<u64, u64> = all
        .iter()
        .flat_map(|s| &s.regions)
        .filter(|r| r.is_leader)
        .map(|r| (id(r), r.applied_index))
        .collect();
    all.iter().flat_map(|s| &s.regions).any(|r| {
        leader_applied
            .get(&id(r))
            .is_some_and(|&l| r.applied_index < l)
    })
}

fn short(key: &[u8]) -> String {
    let h = hex(key);
    if h.len() > 16 {
        format!("{}…", &h[..16])
    } else if h.is_empty() {
        "-".into()
    } else {
        h
    }
}

/// A timestamp (physical ms << 18 | logical) as UTC time of day.
fn ts_time(ts: u64) -> String {
    let ms = ts >> 18;
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        ms % 1000
    )
}

pub fn format(addr: &str, s: &StatusResponse) -> String {
    let mut out = format!(
        "store {} at {addr}: {} regions{}\n",
        s.store_id,
        s.regions.len(),
        if s.background_work {
            ", RocksDB flushing or compacting"
        } else {
            ""
        }
    );
    out.push_str(&format!(
        "  GC safe point {} ({}; versions at or below it are folded), reads from {} ({}), GC life time {} s\n",
        s.gc_safe_point,
        ts_time(s.gc_safe_point),
        s.oldest_readable_ts,
        ts_time(s.oldest_readable_ts),
        s.gc_life_time_secs
    ));
    if s.gc_hold != 0 {
        out.push_str(&format!(
            "  GC held at {} ({}) by the oldest running query or transaction\n",
            s.gc_hold,
            ts_time(s.gc_hold)
        ));
    }
    for r in &s.regions {
        let RegionStatus {
            region,
            peer_id,
            is_leader,
            leader_peer_id,
            term,
            applied_index,
            commit_index,
            last_index,
            truncated_index,
            approximate_bytes,
        } = r;
        let region = region.clone().unwrap_or_default();
        let epoch = region.epoch.unwrap_or_default();
        out.push_str(&format!(
            "  region {:>4} [{}, {}) v{} c{} peer {} {} (leader peer {}) term {} log {}..{} commit {} applied {} peers {} data ~{} KB\n",
            region.id,
            short(&region.start_key),
            short(&region.end_key),
            epoch.version,
            epoch.conf_ver,
            peer_id,
            if *is_leader { "LEADER  " } else { "follower" },
            leader_peer_id,
            term,
            truncated_index,
            last_index,
            commit_index,
            applied_index,
            region
                .peers
                .iter()
                .map(|p| format!("{}@{}", p.id, p.store_id))
                .collect::<Vec<_>>()
                .join(","),
            approximate_bytes / 1024
        ));
    }
    out
}

pub async fn store_status(addr: &str) -> Result<String> {
    Ok(format(addr, &fetch(addr).await?))
}

/// The compute processes serving MPP tasks, as the meta leader lists them
/// (asked through the first of `stores` that answers).
pub async fn compute_status(stores: &[String]) -> Result<String> {
    use quarry_proto::meta::meta_client::MetaClient;
    use quarry_proto::meta::GetComputesRequest;
    let mut last = anyhow::anyhow!("no store address given");
    for addr in stores {
        let listed = async {
            let ch = connect(addr).await?;
            anyhow::Ok(
                MetaClient::new(ch)
                    .get_computes(GetComputesRequest {})
                    .await?
                    .into_inner(),
            )
        }
        .await;
        match listed {
            Ok(list) => return Ok(format_computes(&list.computes)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `quarry status`'s lines about compute processes.
pub fn format_computes(computes: &[quarry_proto::meta::ComputeInfo]) -> String {
    let mut out = format!("compute processes (MPP workers): {}\n", computes.len());
    for c in computes {
        out.push_str(&format!(
            "  compute {} up, last heartbeat {} ms ago\n",
            c.addr, c.last_seen_ms
        ));
    }
    out
}
