//! The web console every compute process serves on its status port
//! (TiDB Dashboard's and CockroachDB's DB Console's first page, kept
//! small): `GET /` is one static page, built into the binary
//! (`index.html`: HTML, CSS and plain JavaScript, no build step and no
//! Node toolchain: the page is a few hundred lines that a bundler would
//! not shorten), which polls four JSON endpoints every two seconds while
//! it is open:
//!
//! * `GET /api/cluster`: the stores from the meta region, each asked for
//!   its status (up or down, its regions and leaders, the data each
//!   region holds by RocksDB's estimate, raft's applied index), the
//!   compute processes the meta leader lists (MPP's membership: each
//!   heartbeats every second and drops out when it stops), and the
//!   regions by table for the key-range heat map;
//! * `GET /api/queries`: the queries running in this process with their
//!   plans and live operator metrics (`quarry_compute::activity`);
//!   `POST /api/queries/ID/cancel` cancels one;
//! * `GET /api/slow`: the latest slow statements with their EXPLAIN
//!   ANALYZE (`quarry_compute::metrics::slow_statements`);
//! * `GET /metrics`, which the page turns into charts (statements per
//!   second, latency percentiles, rows the regions sent per second, raft
//!   entries applied per second, data held).
//!
//! Nothing runs when no one watches: no sampler, no history kept; the
//! charts are what the open page sampled. Cancelling is refused when the
//! status port listens on anything but loopback (as the failpoint
//! endpoints are): the port has no login, so off the machine it is read-
//! only; and a cancel must carry the `x-quarry-console` header, which a
//! page from another site cannot send without a CORS preflight this port
//! never grants. The SQL text, users and plans it shows are readable by
//! anyone who reaches the port (`docs/security.md`). A compute process
//! that does not serve MPP tasks (no address other processes can
//! reach) does not register, so only the page's own
//! process shows it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Result;
use hyper::{Method, StatusCode};
use quarry_compute::cluster::{Cluster, Routes};
use quarry_coprocessor::codec::key::{hex, table_data_range};
use quarry_proto::meta::{GetComputesRequest, StatusResponse};
use serde::Serialize;

/// The page, built into the binary.
const PAGE: &str = include_str!("index.html");

/// The header the page sends with a cancel.
pub const CANCEL_HEADER: &str = "x-quarry-console";

/// How long the page waits for a store's status.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the console reads: the cluster's meta service, and this process.
pub struct Console {
    cluster: Arc<Cluster>,
    /// This compute process's Flight SQL address, once it listens.
    compute_addr: OnceLock<String>,
}

/// An answer: status, content type, body.
pub type Reply = (StatusCode, &'static str, Vec<u8>);

#[derive(Serialize)]
struct StoreView {
    id: u64,
    addr: String,
    up: bool,
    /// Why it did not answer (empty when up).
    error: String,
    regions: usize,
    leaders: usize,
    bytes: u64,
    /// Raft's applied index summed over the regions it leads (the page's
    /// entries-applied-per-second chart is its rate).
    applied: u64,
}

#[derive(Serialize)]
struct RegionView {
    id: u64,
    /// The table whose keys it holds ("meta" for the meta region).
    table: String,
    start: String,
    /// Its leader's estimate of its data.
    bytes: u64,
    leader_store: u64,
    stores: Vec<u64>,
}

#[derive(Serialize)]
struct ComputeView {
    addr: String,
    up: bool,
    this: bool,
    /// When the meta leader last heard from it (None: the page's own
    /// process, not registered).
    heartbeat_ms_ago: Option<u64>,
}

#[derive(Serialize)]
struct ClusterView {
    stores: Vec<StoreView>,
    regions: Vec<RegionView>,
    computes: Vec<ComputeView>,
    /// Why the meta service could not be read (empty when it was).
    error: String,
}

impl Console {
    /// A console over the cluster whose stores are `stores`.
    pub fn new(stores: Vec<String>) -> Arc<Console> {
        Arc::new(Console {
            cluster: Arc::new(Cluster::new(stores, STORE_TIMEOUT)),
            compute_addr: OnceLock::new(),
        })
    }

    /// Records this process's address (the one it registers under when
    /// it serves MPP tasks; it binds after the status port).
    pub fn set_compute_addr(&self, addr: String) {
        let _ = self.compute_addr.set(addr);
    }

    /// The console's answer to `method path`, or None for a path that
    /// is not the console's.
    /// `from_page`: the request carried [`CANCEL_HEADER`].
    pub async fn respond(
        &self,
        method: &Method,
        path: &str,
        loopback: bool,
        from_page: bool,
    ) -> Option<Reply> {
        let json = |v: Result<Vec<u8>>| match v {
            Ok(body) => (StatusCode::OK, "application/json", body),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("{e:#}\n").into_bytes(),
            ),
        };
        Some(match (method, path) {
            (&Method::GET, "/" | "/console") => (
                StatusCode::OK,
                "text/html; charset=utf-8",
                PAGE.as_bytes().to_vec(),
            ),
            (&Method::GET, "/api/cluster") => json(to_json(&self.cluster_view().await)),
            (&Method::GET, "/api/queries") => json(to_json(&quarry_compute::activity::running())),
            (&Method::GET, "/api/slow") => {
                json(to_json(&quarry_compute::metrics::slow_statements()))
            }
            (&Method::POST, p) if p.starts_with("/api/queries/") => {
                let id = p
                    .strip_prefix("/api/queries/")
                    .and_then(|rest| rest.strip_suffix("/cancel"))?;
                let Ok(id) = id.parse::<u64>() else {
                    return Some((
                        StatusCode::BAD_REQUEST,
                        "text/plain",
                        format!("{id} is not a query id\n").into_bytes(),
                    ));
                };
                if !loopback {
                    return Some((
                        StatusCode::FORBIDDEN,
                        "text/plain",
                        b"cancelling is only served on a loopback status address\n".to_vec(),
                    ));
                }
                // A header a cross-site form cannot send (a script must
                // pass CORS's preflight, which this port never grants).
                if !from_page {
                    return Some((
                        StatusCode::FORBIDDEN,
                        "text/plain",
                        format!("a cancel must carry the header {CANCEL_HEADER}: 1\n").into_bytes(),
                    ));
                }
                let cancelled = quarry_compute::activity::cancel(id);
                json(to_json(&serde_json::json!({ "cancelled": cancelled })))
            }
            _ => return None,
        })
    }

    /// The stores, their regions and this process, as the page draws them.
    async fn cluster_view(&self) -> ClusterView {
        let mut view = ClusterView {
            stores: vec![],
            regions: vec![],
            computes: vec![ComputeView {
                addr: self.compute_addr.get().cloned().unwrap_or_default(),
                up: true,
                this: true,
                heartbeat_ms_ago: None,
            }],
            error: String::new(),
        };
        let stores = match self.cluster.get_stores().await {
            Ok(s) => s,
            Err(e) => {
                view.error = format!("the meta service did not answer: {e}");
                return view;
            }
        };
        self.add_computes(&mut view.computes).await;
        let tables = self.cluster.list_tables().await.unwrap_or_default();
        let asked = stores.iter().map(|s| async move {
            match tokio::time::timeout(STORE_TIMEOUT, crate::status::fetch(&s.addr)).await {
                Ok(Ok(st)) => Ok(st),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(_) => Err(format!("no answer in {} s", STORE_TIMEOUT.as_secs())),
            }
        });
        let answers = futures::future::join_all(asked).await;
        let mut statuses: Vec<StatusResponse> = Vec::new();
        for (s, answer) in stores.iter().zip(answers) {
            let mut v = StoreView {
                id: s.id,
                addr: s.addr.clone(),
                up: false,
                error: String::new(),
                regions: 0,
                leaders: 0,
                bytes: 0,
                applied: 0,
            };
            match answer {
                Ok(st) => {
                    v.up = true;
                    v.regions = st.regions.len();
                    v.leaders = st.regions.iter().filter(|r| r.is_leader).count();
                    v.bytes = st.regions.iter().map(|r| r.approximate_bytes).sum();
                    v.applied = st
                        .regions
                        .iter()
                        .filter(|r| r.is_leader)
                        .map(|r| r.applied_index)
                        .sum();
                    statuses.push(st);
                }
                Err(e) => v.error = e,
            }
            view.stores.push(v);
        }
        let table_of = |start: &[u8], id: u64| -> String {
            if id == quarry_raftstore::keys::META_REGION_ID {
                return "meta".into();
            }
            tables
                .iter()
                .find(|t| {
                    let (lo, hi) = table_data_range(t.id);
                    start >= lo.as_slice() && start < hi.as_slice()
                })
                .map_or_else(|| "(no table)".into(), |t| t.name.clone())
        };
        for st in &statuses {
            for r in st.regions.iter().filter(|r| r.is_leader) {
                let Some(region) = &r.region else { continue };
                view.regions.push(RegionView {
                    id: region.id,
                    table: table_of(&region.start_key, region.id),
                    start: hex(&region.start_key),
                    bytes: r.approximate_bytes,
                    leader_store: st.store_id,
                    stores: region.peers.iter().map(|p| p.store_id).collect(),
                });
            }
        }
        view.regions
            .sort_by(|a, b| (&a.table, &a.start).cmp(&(&b.table, &b.start)));
        view
    }

    /// The compute processes registered with the meta leader, after the
    /// page's own: the one with this process's address is this one (its
    /// entry gains the heartbeat), the rest are listed up, as the leader
    /// lists only those heard from within their TTL.
    async fn add_computes(&self, computes: &mut Vec<ComputeView>) {
        let listed = self
            .cluster
            .meta("listing compute processes", |mut c| async move {
                c.get_computes(GetComputesRequest {}).await
            })
            .await;
        let Ok(mut listed) = listed else { return };
        listed.computes.sort_by(|a, b| a.addr.cmp(&b.addr));
        for c in listed.computes {
            match computes.iter_mut().find(|v| v.this && v.addr == c.addr) {
                Some(this) => this.heartbeat_ms_ago = Some(c.last_seen_ms),
                None => computes.push(ComputeView {
                    addr: c.addr,
                    up: true,
                    this: false,
                    heartbeat_ms_ago: Some(c.last_seen_ms),
                }),
            }
        }
    }
}

/// An endpoint's answer as JSON.
fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(v)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_page_and_its_refusals() {
        let console = Console::new(vec![]);
        let (code, kind, body) = console
            .respond(&Method::GET, "/", true, false)
            .await
            .unwrap();
        assert_eq!((code, kind), (StatusCode::OK, "text/html; charset=utf-8"));
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("<title>Quarry</title>"));
        let (code, _, _) = console
            .respond(&Method::POST, "/api/queries/7/cancel", false, true)
            .await
            .unwrap();
        assert_eq!(code, StatusCode::FORBIDDEN);
        let (code, _, body) = console
            .respond(&Method::POST, "/api/queries/x/cancel", true, true)
            .await
            .unwrap();
        assert_eq!(
            code,
            StatusCode::BAD_REQUEST,
            "{:?}",
            String::from_utf8(body)
        );
        let (code, _, body) = console
            .respond(&Method::POST, "/api/queries/123456789/cancel", true, true)
            .await
            .unwrap();
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body, br#"{"cancelled":false}"#);
        assert!(console
            .respond(&Method::GET, "/nope", true, false)
            .await
            .is_none());
        // Once a panic: the prefix and the suffix overlap.
        assert!(console
            .respond(&Method::POST, "/api/queries/cancel", true, true)
            .await
            .is_none());
        // A cross-site form cannot send the header.
        let (code, _, _) = console
            .respond(&Method::POST, "/api/queries/7/cancel", true, false)
            .await
            .unwrap();
        assert_eq!(code, StatusCode::FORBIDDEN);
    }
}
