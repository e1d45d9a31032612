//! Which compute processes serve MPP tasks: every compute process
//! heartbeats its address to the meta leader and reads the live list back.
//!
//! The list is soft state, kept in the meta leader's memory as PD keeps
//! store heartbeats: a process not heard from for [`HEARTBEAT_TTL`] drops
//! out, and a new meta leader knows every live process after one TTL. The
//! distributed planner asks [`Resolver`] synchronously (its
//! `WorkerResolver` is not async), so the list is refreshed in the
//! background, once every [`HEARTBEAT_EVERY`], and read from memory.
//! Until the first answer, and whenever meta cannot be reached, the list
//! is this process alone: a query then plans as in one process.

use std::sync::{Arc, Weak};
use std::time::Duration;

use datafusion::common::DataFusionError;
use datafusion_distributed::WorkerResolver;
use parking_lot::RwLock;
use quarry_proto::meta::{ComputeHeartbeatRequest, ComputeInfo, GetComputesRequest};
use url::Url;

use crate::cluster::Cluster;

/// How often a compute process says it is alive and reads the list.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long after its last heartbeat a compute process is dropped.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(3);

/// The live compute processes, as last read from meta.
pub struct Workers {
    /// This process's id (its address: unique among live processes).
    id: String,
    own: Url,
    live: RwLock<Vec<ComputeInfo>>,
    /// Workers a query found unreachable, left out until the instant
    /// (meta lists a dead process until its heartbeat's TTL runs out).
    suspects: RwLock<Vec<(Url, std::time::Instant)>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Workers({})", self.own)
    }
}

/// How long a worker found unreachable is left out of new plans.
pub const SUSPECT_FOR: Duration = Duration::from_secs(6);
/// How long a probe of a worker's port waits.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

impl Workers {
    /// The list of a process serving at `addr` (`host:port`), until meta
    /// answers: this process alone.
    pub fn new(addr: &str) -> Result<Arc<Workers>, url::ParseError> {
        let own = Url::parse(&format!("http://{addr}"))?;
        Ok(Arc::new(Workers {
            id: addr.to_string(),
            own,
            live: RwLock::new(Vec::new()),
            suspects: RwLock::new(Vec::new()),
        }))
    }

    /// This process's worker URL.
    pub fn own_url(&self) -> url::Url {
        self.own.clone()
    }

    /// The live compute processes' worker URLs, this one included, in a
    /// stable order.
    pub fn urls(&self) -> Vec<Url> {
        let now = std::time::Instant::now();
        let suspects = self.suspects.read();
        let live = self.live.read();
        let mut urls: Vec<Url> = live
            .iter()
            .filter_map(|c| Url::parse(&format!("http://{}", c.addr)).ok())
            .filter(|u| !suspects.iter().any(|(s, until)| s == u && *until > now))
            .collect();
        if !urls.contains(&self.own) {
            urls.push(self.own.clone());
        }
        urls.sort();
        urls
    }

    /// Whether a live compute process runs on another host than this one:
    /// only then can spreading a query add cores. A compute process
    /// already runs a query on all of its host's cores (its
    /// `target_partitions`), so processes sharing a host share those
    /// cores, and a query spread over them only pays for the exchanges.
    /// (Hosts are compared by the advertised addresses' host part; every
    /// loopback address is this host.)
    pub fn adds_cores(&self) -> bool {
        let own = host_of(&self.own);
        self.urls().iter().any(|u| host_of(u) != own)
    }

    /// The workers of the current list whose port does not answer: each
    /// is left out of new plans for [`SUSPECT_FOR`]. (After a distributed
    /// query failed: a worker that died or was cut off.)
    pub async fn unreachable(&self) -> Vec<Url> {
        let urls: Vec<Url> = self.urls().into_iter().filter(|u| *u != self.own).collect();
        let probes = urls.iter().map(|u| async move {
            let addr = format!(
                "{}:{}",
                u.host_str().unwrap_or_default(),
                u.port().unwrap_or_default()
            );
            let connect = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                Ok(Ok(_)) => None,
                _ => Some(u.clone()),
            }
        });
        let dead: Vec<Url> = futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect();
        if !dead.is_empty() {
            let until = std::time::Instant::now() + SUSPECT_FOR;
            let mut suspects = self.suspects.write();
            suspects.retain(|(_, t)| *t > std::time::Instant::now());
            suspects.extend(dead.iter().map(|u| (u.clone(), until)));
        }
        dead
    }

    /// Heartbeats and refreshes the list until the workers are dropped.
    pub fn spawn_heartbeat(self: &Arc<Self>, cluster: Arc<Cluster>) {
        tokio::spawn(heartbeat(Arc::downgrade(self), cluster));
    }
}

async fn heartbeat(workers: Weak<Workers>, cluster: Arc<Cluster>) {
    // At a fixed rate, not a pause after each round: a round that took
    // long (a new meta leader waits before it lists, `Meta::computes`) is
    // followed by the next at once, inside the TTL.
    let mut every = tokio::time::interval(HEARTBEAT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(w) = workers.upgrade() else {
            return;
        };
        let req = ComputeHeartbeatRequest {
            id: w.id.clone(),
            addr: w.id.clone(),
            ttl_ms: HEARTBEAT_TTL.as_millis() as u64,
        };
        drop(w);
        let beat = cluster
            .meta("announcing this compute process", |mut c| {
                let req = req.clone();
                async move { c.compute_heartbeat(req).await }
            })
            .await;
        let listed = match beat {
            Ok(_) => {
                cluster
                    .meta("listing compute processes", |mut c| async move {
                        c.get_computes(GetComputesRequest {}).await
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        let Some(w) = workers.upgrade() else {
            return;
        };
        match listed {
            Ok(list) => *w.live.write() = list.computes,
            Err(e) => {
                tracing::debug!("compute membership: {e}");
                w.live.write().clear();
            }
        }
        drop(w);
    }
}

/// The distributed planner's view of [`Workers`].
pub struct Resolver(pub Arc<Workers>);

impl WorkerResolver for Resolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.urls())
    }
}

/// The host part of a worker URL, every loopback address as one.
fn host_of(url: &Url) -> String {
    match url.host() {
        Some(url::Host::Ipv4(ip)) if ip.is_loopback() => "loopback".into(),
        Some(url::Host::Ipv6(ip)) if ip.is_loopback() => "loopback".into(),
        Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => "loopback".into(),
        Some(h) => h.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(own: &str, others: &[&str]) -> Arc<Workers> {
        let w = Workers::new(own).unwrap();
        *w.live.write() = others
            .iter()
            .map(|a| ComputeInfo {
                id: a.to_string(),
                addr: a.to_string(),
                last_seen_ms: 0,
            })
            .collect();
        w
    }

    #[test]
    fn only_processes_on_other_hosts_add_cores() {
        assert!(!workers("127.0.0.1:1", &[]).adds_cores());
        assert!(!workers("127.0.0.1:1", &["127.0.0.1:2", "localhost:3", "[::1]:4"]).adds_cores());
        assert!(!workers("10.0.0.5:1", &["10.0.0.5:2"]).adds_cores());
        assert!(workers("10.0.0.5:1", &["10.0.0.5:2", "10.0.0.6:1"]).adds_cores());
    }
}
