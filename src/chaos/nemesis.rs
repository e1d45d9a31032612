//! The nemesis: faults applied to a local cluster on a seeded schedule,
//! each healed before the next and before the run's quiet tail.
//!
//! | name | fault | healed by |
//! |---|---|---|
//! | `kill` | kill -9 of a storage process, of the store leading the meta region (the oracle), or of the compute process, chosen at random | a restart at the same address after 2–5 s |
//! | `pause` | SIGSTOP of a store for 5–15 s: it holds its connections and answers nothing | SIGCONT |
//! | `partition` | a store drops every raft message it sends or receives (the `raft_isolate` failpoint): one store against two, a minority partition between stores | the failpoint off |
//! | `skew` | the clock of the store leading the meta region jumps 5–60 s ahead or behind (the `clock_skew` failpoint; the oracle must stay monotonic) | the offset removed |
//! | `transfer` | a random region's leadership moves to a follower | (instant) |
//! | `split` | a random table region splits at its middle | (instant) |
//!
//! Failpoints are switched through the stores' status ports, so
//! `partition` and `skew` need a build with the `failpoints` feature (the
//! README's build has it); a build without it says so. Partitions through
//! network namespaces (compute cut from stores, one-way cuts) are in
//! `tests/netns_partition.rs`, which needs root; they are not yet among
//! these faults.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quarry_proto::meta::admin_client::AdminClient;
use quarry_proto::meta::{SplitRegionRequest, TransferLeaderRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::history::History;
use crate::bank::Rng;
use crate::local::LocalCluster;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Nemesis {
    Kill,
    Pause,
    Partition,
    Skew,
    Transfer,
    Split,
}

impl Nemesis {
    pub const ALL: [Nemesis; 6] = [
        Nemesis::Kill,
        Nemesis::Pause,
        Nemesis::Partition,
        Nemesis::Skew,
        Nemesis::Transfer,
        Nemesis::Split,
    ];
}

/// `PUT` (actions given) or `DELETE` of failpoint `name` on the status
/// port at `url` (`http://HOST:PORT`).
pub async fn failpoint(url: &str, name: &str, actions: Option<&str>) -> Result<()> {
    let host = url.trim_start_matches("http://");
    let (method, body) = match actions {
        Some(a) => ("PUT", a),
        None => ("DELETE", ""),
    };
    let talk = async {
        let mut s = tokio::net::TcpStream::connect(host).await?;
        s.write_all(
            format!(
                "{method} /fail/{name} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
        let mut text = String::new();
        s.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let text = tokio::time::timeout(Duration::from_secs(5), talk)
        .await
        .map_err(|_| anyhow!("{url} did not answer within 5 s"))?
        .with_context(|| format!("switching failpoint {name} at {url}"))?;
    if text.split_whitespace().nth(1) != Some("200") {
        bail!(
            "failpoint {name} at {url}: {} (is the binary built with the failpoints feature?)",
            text.split("\r\n\r\n").nth(1).unwrap_or(&text).trim()
        );
    }
    Ok(())
}

fn signal(pid: u32, sig: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), sig);
}

/// (store index, region) of every region leader the stores report.
async fn leaders(cluster: &LocalCluster) -> Vec<(usize, quarry_proto::meta::RegionStatus)> {
    let mut out = Vec::new();
    for (i, addr) in cluster.store_addrs().iter().enumerate() {
        if let Ok(s) = crate::status::fetch(addr).await {
            out.extend(
                s.regions
                    .into_iter()
                    .filter(|r| r.is_leader)
                    .map(|r| (i, r)),
            );
        }
    }
    out
}

/// The index of the store leading the meta region, if one says so.
async fn meta_leader(cluster: &LocalCluster) -> Option<usize> {
    leaders(cluster)
        .await
        .into_iter()
        .find(|(_, r)| r.region.as_ref().is_some_and(|g| g.id == 1))
        .map(|(i, _)| i)
}

fn between(rng: &mut Rng, lo: f64, hi: f64) -> Duration {
    Duration::from_secs_f64(lo + (hi - lo) * (rng.below(1000) as f64 / 1000.0))
}

/// Applies faults from `kinds` until `until` (the start of the quiet
/// tail), one at a time; `after_compute_restart` runs when a compute
/// process was started again (to switch a test's failpoint on again).
pub async fn run(
    cluster: &mut LocalCluster,
    kinds: &[Nemesis],
    seed: u64,
    history: &History,
    until: Instant,
    stale_reads_ms: Option<u64>,
) -> Result<()> {
    if kinds.is_empty() {
        return Ok(());
    }
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    loop {
        tokio::time::sleep(between(&mut rng, 1.0, 3.0)).await;
        let left = until.saturating_duration_since(Instant::now());
        if left < Duration::from_secs(3) {
            return Ok(());
        }
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let stores = cluster.stores.len();
        let cap = |d: Duration| d.min(left.saturating_sub(Duration::from_secs(1)));
        match kind {
            Nemesis::Kill => {
                let down = cap(between(&mut rng, 2.0, 5.0));
                match rng.below(3) {
                    2 => {
                        let pid = cluster.compute.as_ref().map(|c| c.pid).unwrap_or(0);
                        let f = history.fault(format!(
                            "kill -9 compute ({:.1} s down)",
                            down.as_secs_f64()
                        ));
                        signal(pid, Signal::SIGKILL);
                        if let Some(c) = cluster.compute.as_mut() {
                            let _ = c.child.wait().await;
                        }
                        tokio::time::sleep(down).await;
                        cluster.restart(None).await.context("restarting compute")?;
                        if let (Some(ms), Some(url)) = (
                            stale_reads_ms,
                            cluster.compute.as_ref().and_then(|c| c.status.clone()),
                        ) {
                            failpoint(&url, "stale_read", Some(&format!("return({ms})"))).await?;
                        }
                        history.healed(f);
                    }
                    which => {
                        let (i, what) = match (which, meta_leader(cluster).await) {
                            (1, Some(i)) => (i, "the meta leader, "),
                            _ => (rng.below(stores as u64) as usize, ""),
                        };
                        let f = history.fault(format!(
                            "kill -9 {what}store {} ({:.1} s down)",
                            i + 1,
                            down.as_secs_f64()
                        ));
                        signal(cluster.stores[i].pid, Signal::SIGKILL);
                        let _ = cluster.stores[i].child.wait().await;
                        tokio::time::sleep(down).await;
                        cluster
                            .restart(Some(i))
                            .await
                            .with_context(|| format!("restarting store {}", i + 1))?;
                        history.healed(f);
                    }
                }
            }
            Nemesis::Pause => {
                let i = rng.below(stores as u64) as usize;
                let d = cap(between(&mut rng, 5.0, 15.0));
                let f = history.fault(format!("pause store {} ({:.1} s)", i + 1, d.as_secs_f64()));
                signal(cluster.stores[i].pid, Signal::SIGSTOP);
                tokio::time::sleep(d).await;
                signal(cluster.stores[i].pid, Signal::SIGCONT);
                history.healed(f);
            }
            Nemesis::Partition => {
                let i = rng.below(stores as u64) as usize;
                let d = cap(between(&mut rng, 4.0, 10.0));
                let url = cluster.stores[i]
                    .status
                    .clone()
                    .ok_or_else(|| anyhow!("store {} has no status port", i + 1))?;
                failpoint(&url, "raft_isolate", Some("return")).await?;
                let f = history.fault(format!(
                    "partition: store {} cut off from the other stores ({:.1} s)",
                    i + 1,
                    d.as_secs_f64()
                ));
                tokio::time::sleep(d).await;
                failpoint(&url, "raft_isolate", None).await?;
                history.healed(f);
            }
            Nemesis::Skew => {
                let i = meta_leader(cluster)
                    .await
                    .unwrap_or_else(|| rng.below(stores as u64) as usize);
                let d = cap(between(&mut rng, 4.0, 8.0));
                let skew_s = 5 + rng.below(56) as i64;
                let skew_ms = if rng.below(2) == 0 {
                    skew_s * 1000
                } else {
                    -skew_s * 1000
                };
                let url = cluster.stores[i]
                    .status
                    .clone()
                    .ok_or_else(|| anyhow!("store {} has no status port", i + 1))?;
                failpoint(&url, "clock_skew", Some(&format!("return({skew_ms})"))).await?;
                let f = history.fault(format!(
                    "skew: store {}'s clock {:+} s ({:.1} s)",
                    i + 1,
                    skew_ms / 1000,
                    d.as_secs_f64()
                ));
                tokio::time::sleep(d).await;
                failpoint(&url, "clock_skew", None).await?;
                history.healed(f);
            }
            Nemesis::Transfer => {
                let all = leaders(cluster).await;
                if all.is_empty() {
                    continue;
                }
                let (i, r) = all[rng.below(all.len() as u64) as usize].clone();
                let region = r.region.clone().unwrap_or_default();
                let followers: Vec<_> = region.peers.iter().filter(|p| p.id != r.peer_id).collect();
                if followers.is_empty() {
                    continue;
                }
                let to = *followers[rng.below(followers.len() as u64) as usize];
                let f = history.fault(format!(
                    "transfer the leader of region {} from store {} to store {}",
                    region.id,
                    i + 1,
                    to.store_id
                ));
                let addr = cluster.store_addrs()[i].clone();
                let r = async {
                    let mut c = AdminClient::connect(format!("http://{addr}")).await?;
                    c.transfer_leader(TransferLeaderRequest {
                        region_id: region.id,
                        to_peer_id: to.id,
                    })
                    .await?;
                    Ok::<_, anyhow::Error>(())
                }
                .await;
                if let Err(e) = r {
                    tracing::info!("leader transfer refused: {e}");
                }
                history.healed(f);
            }
            Nemesis::Split => {
                let all: Vec<_> = leaders(cluster)
                    .await
                    .into_iter()
                    .filter(|(_, r)| r.region.as_ref().is_some_and(|g| g.id != 1))
                    .collect();
                if all.is_empty() {
                    continue;
                }
                let (i, r) = all[rng.below(all.len() as u64) as usize].clone();
                let region = r.region.clone().unwrap_or_default();
                let f = history.fault(format!(
                    "split region {} (led by store {})",
                    region.id,
                    i + 1
                ));
                let addr = cluster.store_addrs()[i].clone();
                let r = async {
                    let mut c = AdminClient::connect(format!("http://{addr}")).await?;
                    c.split_region(SplitRegionRequest {
                        region_id: region.id,
                        epoch: region.epoch,
                        split_key: vec![],
                    })
                    .await?;
                    Ok::<_, anyhow::Error>(())
                }
                .await;
                if let Err(e) = r {
                    tracing::info!("split refused: {e}");
                }
                history.healed(f);
            }
        }
    }
}
