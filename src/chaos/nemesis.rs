//! The nemesis: faults applied to a local cluster on a seeded schedule,
//! in rounds, every fault of a round healed before the next round and
//! before the run's quiet tail.
//!
//! | name | fault | healed by |
//! |---|---|---|
//! | `kill` | kill -9 of a storage process, of the store leading the meta region (the oracle), or of the compute process, chosen at random | a restart at the same address after 2–5 s |
//! | `pause` | SIGSTOP of a store for 5–15 s: it holds its connections and answers nothing | SIGCONT |
//! | `partition` | without `--netns`: a store drops every raft message it sends or receives (the `raft_isolate` failpoint), a minority cut off from the other stores. With `--netns`, one of: that failpoint; a store's link down (no packet to or from it, compute's included); a minority of stores cut from the majority by routes (one store of three, one or two of five; compute still reaches all); compute's route to one store blackholed; one store's packets to another dropped (one way; TCP between the two fails both ways). The store is the meta leader half the time | the failpoint off, links up, routes removed |
//! | `skew` | the clock of the store leading the meta region jumps 5–60 s ahead or behind (the `clock_skew` failpoint; the oracle must stay monotonic) | the offset removed |
//! | `transfer` | a random region's leadership moves to a follower | (instant) |
//! | `split` | a random table region splits at its middle | (instant) |
//!
//! Failpoints are switched through the stores' status ports, so
//! `partition` and `skew` need a build with the `failpoints` feature (the
//! README's build has it); a build without it says so. Network faults
//! need the stores in network namespaces (`quarry chaos --netns`, root).
//!
//! The schedule is rounds: a pause of 1–3 s, then one fault, or with
//! `--faults-at-once N` up to N faults of different kinds started 0–2 s
//! apart (a store killed while another is cut off, say: for a while no
//! majority), each healed at its own time; the next round starts once all
//! are healed. The first such round has all N, so every run overlaps
//! faults at least once. A pause or a failpoint is not aimed at a store
//! that a fault of its round paused or killed (it could not answer, and a
//! request it read after SIGCONT would switch a fault on that nothing
//! heals); a heal that no longer applies is skipped: a failpoint or a
//! pause on a store that was killed and restarted in the meantime is gone
//! with the old process. With `--netns`, partitions take the five kinds
//! in turn (link down, minority, compute cut off, one way, the
//! failpoint), starting at the seed's place in that order (seed mod 5),
//! so a run with five partitions has had each and short runs over
//! consecutive seeds cover them all.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
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
/// port at `url` (`http://HOST:PORT`), in network namespace `namespace`
/// if the process runs in one.
pub async fn failpoint(
    url: &str,
    namespace: Option<&str>,
    name: &str,
    actions: Option<&str>,
) -> Result<()> {
    let host = url.trim_start_matches("http://");
    let (method, body) = match actions {
        Some(a) => ("PUT", a),
        None => ("DELETE", ""),
    };
    let request = format!(
        "{method} /fail/{name} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let limit = Duration::from_secs(5);
    let text = match namespace {
        Some(ns) => crate::netns::http(ns, host, request, limit)
            .await
            .with_context(|| format!("switching failpoint {name} at {url}"))?,
        None => {
            let talk = async {
                let mut s = tokio::net::TcpStream::connect(host).await?;
                s.write_all(&request).await?;
                let mut text = String::new();
                s.read_to_string(&mut text).await?;
                Ok::<_, std::io::Error>(text)
            };
            tokio::time::timeout(limit, talk)
                .await
                .map_err(|_| anyhow!("{url} did not answer within 5 s"))?
                .with_context(|| format!("switching failpoint {name} at {url}"))?
        }
    };
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

/// (store index, region) of every region leader the stores report, asked
/// all at once (a paused store answers no one within its 5 s).
async fn leaders(cluster: &LocalCluster) -> Vec<(usize, quarry_proto::meta::RegionStatus)> {
    let addrs = cluster.store_addrs();
    let all = futures::future::join_all(addrs.iter().map(|a| crate::status::fetch(a))).await;
    let mut out = Vec::new();
    for (i, s) in all.into_iter().enumerate() {
        if let Ok(s) = s {
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

/// How a fault that is on is undone.
enum Heal {
    /// Nothing to undo (a leader transfer, a split).
    Nothing,
    RestartStore(usize),
    RestartCompute,
    /// SIGCONT to store `store`, if it is still process `pid`.
    Continue {
        store: usize,
        pid: u32,
    },
    /// The failpoint off on store `store`, if it is still process `pid`.
    Failpoint {
        store: usize,
        pid: u32,
        url: String,
        namespace: Option<String>,
        name: &'static str,
    },
    /// Links up and routes removed.
    Network,
}

/// A fault that is on: its entry in the history, when and how it heals.
struct Active {
    fault: usize,
    heal_at: Instant,
    heal: Heal,
}

/// Applies faults from `kinds` until `until` (the start of the quiet
/// tail), up to `at_once` at a time; `stale_reads_ms` is switched on again
/// in a compute process that was restarted.
pub async fn run(
    cluster: &mut LocalCluster,
    kinds: &[Nemesis],
    at_once: usize,
    seed: u64,
    history: &History,
    until: Instant,
    stale_reads_ms: Option<u64>,
) -> Result<()> {
    if kinds.is_empty() {
        return Ok(());
    }
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // Where the partitions' turn starts: by seed, so that short runs
    // between them see every kind.
    let mut partitions = seed % 5;
    let mut first_round = true;
    loop {
        tokio::time::sleep(between(&mut rng, 1.0, 3.0)).await;
        if until.saturating_duration_since(Instant::now()) < Duration::from_secs(3) {
            return Ok(());
        }
        let count = match at_once.min(kinds.len()) {
            0 | 1 => 1,
            n if first_round => n,
            n => 1 + rng.below(n as u64) as usize,
        };
        first_round = false;
        let mut left: Vec<Nemesis> = kinds.to_vec();
        let mut active = Vec::new();
        for j in 0..count {
            if j > 0 {
                tokio::time::sleep(between(&mut rng, 0.0, 2.0)).await;
            }
            let left_s = until.saturating_duration_since(Instant::now());
            if left_s < Duration::from_secs(2) {
                break;
            }
            let kind = left.remove(rng.below(left.len() as u64) as usize);
            let cap = |d: Duration| d.min(left_s.saturating_sub(Duration::from_secs(1)));
            // Stores this round has paused or killed.
            let busy: Vec<usize> = active
                .iter()
                .filter_map(|a: &Active| match a.heal {
                    Heal::Continue { store, .. } | Heal::RestartStore(store) => Some(store),
                    _ => None,
                })
                .collect();
            let ctx = Draw {
                rng: &mut rng,
                history,
                busy: &busy,
                partitions: &mut partitions,
            };
            match start(cluster, kind, ctx, cap).await {
                Ok(Some(a)) if matches!(a.heal, Heal::Nothing) => history.healed(a.fault),
                Ok(Some(a)) => active.push(a),
                Ok(None) => {}
                // A store that another fault of this round paused or cut
                // off cannot be asked for a failpoint: this one is skipped.
                Err(e) if !active.is_empty() && !e.to_string().contains("failpoints feature") => {
                    tracing::info!("{kind:?} not applied while another fault is on: {e:#}");
                }
                Err(e) => {
                    heal_all(cluster, active, history, stale_reads_ms).await?;
                    return Err(e);
                }
            }
        }
        heal_all(cluster, active, history, stale_reads_ms).await?;
    }
}

/// Heals `active`, each at its time. A heal that fails while others are
/// pending (a failpoint switched off on a store that another fault still
/// pauses or cuts off) is tried again after them, and a last one up to
/// three times a second apart.
async fn heal_all(
    cluster: &mut LocalCluster,
    mut active: Vec<Active>,
    history: &History,
    stale_reads_ms: Option<u64>,
) -> Result<()> {
    active.sort_by_key(|a| a.heal_at);
    let mut pending: std::collections::VecDeque<(Active, u32)> =
        active.into_iter().map(|a| (a, 0)).collect();
    while let Some((a, tries)) = pending.pop_front() {
        tokio::time::sleep_until(a.heal_at.into()).await;
        match heal(cluster, &a, history, stale_reads_ms).await {
            Ok(()) => {}
            Err(e) if tries < 3 => {
                tracing::info!("heal failed, will try again: {e:#}");
                let again = Instant::now() + Duration::from_secs(1);
                let heal_at = match pending.back() {
                    Some((last, _)) => last.heal_at.max(again),
                    None => again,
                };
                pending.push_back((Active { heal_at, ..a }, tries + 1));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Undoes a fault and marks it healed in the history.
async fn heal(
    cluster: &mut LocalCluster,
    a: &Active,
    history: &History,
    stale_reads_ms: Option<u64>,
) -> Result<()> {
    let still = |cluster: &LocalCluster, store: usize, pid: u32| {
        cluster.stores.get(store).is_some_and(|p| p.pid == pid)
    };
    match &a.heal {
        Heal::Nothing => {}
        &Heal::RestartStore(i) => {
            cluster
                .restart(Some(i))
                .await
                .with_context(|| format!("restarting store {}", i + 1))?;
        }
        Heal::RestartCompute => {
            cluster.restart(None).await.context("restarting compute")?;
            if let (Some(ms), Some(url)) = (
                stale_reads_ms,
                cluster.compute.as_ref().and_then(|c| c.status.clone()),
            ) {
                failpoint(&url, None, "stale_read", Some(&format!("return({ms})"))).await?;
            }
        }
        &Heal::Continue { store, pid } => {
            if still(cluster, store, pid) {
                signal(pid, Signal::SIGCONT);
            }
        }
        Heal::Failpoint {
            store,
            pid,
            url,
            namespace,
            name,
        } => {
            if still(cluster, *store, *pid) {
                failpoint(url, namespace.as_deref(), name, None).await?;
            }
        }
        Heal::Network => {
            if let Some(net) = cluster.netns.as_mut() {
                net.heal_all().context("healing the network")?;
            }
        }
    }
    history.healed(a.fault);
    Ok(())
}

/// One admin call to the store at `addr`, within 5 s (a store another
/// fault cut off would otherwise hold it for TCP's retries).
async fn admin<F, T>(
    addr: &str,
    call: impl FnOnce(AdminClient<tonic::transport::Channel>) -> F,
) -> Result<()>
where
    F: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let work = async {
        let c = AdminClient::connect(format!("http://{addr}")).await?;
        call(c).await?;
        Ok::<_, anyhow::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .map_err(|_| anyhow!("{addr} did not answer within 5 s"))?
}

/// Switches failpoint `name` on store `i` with `actions`: how to switch
/// it off.
async fn failpoint_on(
    cluster: &LocalCluster,
    i: usize,
    name: &'static str,
    actions: &str,
) -> Result<Heal> {
    let store = &cluster.stores[i];
    let url = store
        .status
        .clone()
        .ok_or_else(|| anyhow!("store {} has no status port", i + 1))?;
    failpoint(&url, store.namespace.as_deref(), name, Some(actions)).await?;
    Ok(Heal::Failpoint {
        store: i,
        pid: store.pid,
        url,
        namespace: store.namespace.clone(),
        name,
    })
}

/// What [`start`] draws from and records in.
struct Draw<'a> {
    rng: &'a mut Rng,
    history: &'a History,
    /// Stores another fault of the round paused or killed.
    busy: &'a [usize],
    /// Partitions made so far (their kinds go in turn).
    partitions: &'a mut u64,
}

/// Starts one fault of `kind`, to last `cap(its drawn length)`; None when
/// there was nothing to do (no leader to move, the store it drew busy).
async fn start(
    cluster: &mut LocalCluster,
    kind: Nemesis,
    ctx: Draw<'_>,
    cap: impl Fn(Duration) -> Duration,
) -> Result<Option<Active>> {
    let Draw {
        rng,
        history,
        busy,
        partitions,
    } = ctx;
    let stores = cluster.stores.len();
    // Lasts `d` from now, when it has been applied (asking a paused store
    // for the leaders may have taken seconds).
    let active = |fault, d: Duration, heal| {
        Some(Active {
            fault,
            heal_at: Instant::now() + d,
            heal,
        })
    };
    Ok(match kind {
        Nemesis::Kill => {
            let down = cap(between(rng, 2.0, 5.0));
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
                    active(f, down, Heal::RestartCompute)
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
                    active(f, down, Heal::RestartStore(i))
                }
            }
        }
        Nemesis::Pause => {
            let i = rng.below(stores as u64) as usize;
            let d = cap(between(rng, 5.0, 15.0));
            if busy.contains(&i) {
                return Ok(None);
            }
            let pid = cluster.stores[i].pid;
            let f = history.fault(format!("pause store {} ({:.1} s)", i + 1, d.as_secs_f64()));
            signal(pid, Signal::SIGSTOP);
            active(f, d, Heal::Continue { store: i, pid })
        }
        Nemesis::Partition => {
            let d = cap(between(rng, 4.0, 10.0));
            // The meta leader (the oracle) half the time.
            let i = match (rng.below(2), meta_leader(cluster).await) {
                (0, Some(i)) => i,
                _ => rng.below(stores as u64) as usize,
            };
            let mode = match cluster.netns.is_some() && stores >= 2 {
                true => [1, 2, 3, 4, 0][(*partitions % 5) as usize],
                false => 0,
            };
            *partitions += 1;
            if mode == 0 && busy.contains(&i) {
                return Ok(None);
            }
            let secs = d.as_secs_f64();
            let (name, heal) = match (mode, cluster.netns.as_mut()) {
                (1, Some(net)) => {
                    net.cut(i + 1)?;
                    let name = format!(
                        "partition: store {}'s link down, no packet to or from it ({secs:.1} s)",
                        i + 1
                    );
                    (name, Heal::Network)
                }
                (2, Some(net)) => {
                    let size = match stores >= 5 {
                        true => 1 + rng.below(2) as usize,
                        false => 1,
                    };
                    let mut minority = vec![i];
                    while minority.len() < size {
                        let j = rng.below(stores as u64) as usize;
                        if !minority.contains(&j) {
                            minority.push(j);
                        }
                    }
                    let cut = |net: &mut crate::netns::Net| {
                        for &a in &minority {
                            for b in (0..stores).filter(|b| !minority.contains(b)) {
                                net.split_pair(a + 1, b + 1)?;
                            }
                        }
                        Ok::<_, anyhow::Error>(())
                    };
                    if let Err(e) = cut(net) {
                        // No half-made partition outlives its error.
                        let _ = net.heal_all();
                        return Err(e);
                    }
                    let names: Vec<String> = minority.iter().map(|a| (a + 1).to_string()).collect();
                    let name = format!(
                        "partition: store{} {} cut from the other stores by the network, \
                         compute reaches all ({secs:.1} s)",
                        if names.len() > 1 { "s" } else { "" },
                        names.join(" and ")
                    );
                    (name, Heal::Network)
                }
                (3, Some(net)) => {
                    net.drop_packets(None, i + 1)?;
                    let name = format!(
                        "partition: compute cannot reach store {}, the stores reach each \
                         other ({secs:.1} s)",
                        i + 1
                    );
                    (name, Heal::Network)
                }
                (4, Some(net)) => {
                    let j = (i + 1 + rng.below(stores as u64 - 1) as usize) % stores;
                    net.drop_packets(Some(i + 1), j + 1)?;
                    let name = format!(
                        "partition: one way, store {}'s packets to store {} dropped ({secs:.1} s)",
                        i + 1,
                        j + 1
                    );
                    (name, Heal::Network)
                }
                _ => {
                    let heal = failpoint_on(cluster, i, "raft_isolate", "return").await?;
                    let name = format!(
                        "partition: store {} drops its raft messages, cut off from the other \
                         stores ({secs:.1} s)",
                        i + 1
                    );
                    (name, heal)
                }
            };
            active(history.fault(name), d, heal)
        }
        Nemesis::Skew => {
            let i = meta_leader(cluster)
                .await
                .unwrap_or_else(|| rng.below(stores as u64) as usize);
            if busy.contains(&i) {
                return Ok(None);
            }
            let d = cap(between(rng, 4.0, 8.0));
            let skew_s = 5 + rng.below(56) as i64;
            let skew_ms = if rng.below(2) == 0 {
                skew_s * 1000
            } else {
                -skew_s * 1000
            };
            let skew = format!("return({skew_ms})");
            let heal = failpoint_on(cluster, i, "clock_skew", &skew).await?;
            let f = history.fault(format!(
                "skew: store {}'s clock {:+} s ({:.1} s)",
                i + 1,
                skew_ms / 1000,
                d.as_secs_f64()
            ));
            active(f, d, heal)
        }
        Nemesis::Transfer => {
            let all = leaders(cluster).await;
            if all.is_empty() {
                return Ok(None);
            }
            let (i, r) = all[rng.below(all.len() as u64) as usize].clone();
            let region = r.region.clone().unwrap_or_default();
            let followers: Vec<_> = region.peers.iter().filter(|p| p.id != r.peer_id).collect();
            if followers.is_empty() {
                return Ok(None);
            }
            let to = *followers[rng.below(followers.len() as u64) as usize];
            let f = history.fault(format!(
                "transfer the leader of region {} from store {} to store {}",
                region.id,
                i + 1,
                to.store_id
            ));
            let addr = cluster.store_addrs()[i].clone();
            let r = admin(&addr, |mut c| async move {
                c.transfer_leader(TransferLeaderRequest {
                    region_id: region.id,
                    to_peer_id: to.id,
                })
                .await
            })
            .await;
            if let Err(e) = r {
                tracing::info!("leader transfer refused: {e}");
            }
            active(f, Duration::ZERO, Heal::Nothing)
        }
        Nemesis::Split => {
            let all: Vec<_> = leaders(cluster)
                .await
                .into_iter()
                .filter(|(_, r)| r.region.as_ref().is_some_and(|g| g.id != 1))
                .collect();
            if all.is_empty() {
                return Ok(None);
            }
            let (i, r) = all[rng.below(all.len() as u64) as usize].clone();
            let region = r.region.clone().unwrap_or_default();
            let f = history.fault(format!(
                "split region {} (led by store {})",
                region.id,
                i + 1
            ));
            let addr = cluster.store_addrs()[i].clone();
            let r = admin(&addr, |mut c| async move {
                c.split_region(SplitRegionRequest {
                    region_id: region.id,
                    epoch: region.epoch,
                    split_key: vec![],
                })
                .await
            })
            .await;
            if let Err(e) = r {
                tracing::info!("split refused: {e}");
            }
            active(f, Duration::ZERO, Heal::Nothing)
        }
    })
}
