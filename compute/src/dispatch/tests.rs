//! Dispatch against a mock cluster: region errors, leader changes, splits,
//! paging and dead stores, without a single process.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{
    other_error, CopRequest, CopResponse, DagRequest, KeyRange as PbRange, OtherError,
};
use quarry_proto::meta::{
    EpochNotMatch, NotLeader, Peer, Region, RegionEpoch, RegionError, RegionRoute, ServerIsBusy,
    Store,
};

use super::{DispatchConfig, Dispatcher};
use crate::cluster::{CopTransport, Routes};
use crate::region_cache::RegionCache;
use crate::{Error, Result};

fn region(id: u64, start: &str, end: &str, store: u64, version: u64) -> Region {
    Region {
        id,
        start_key: start.as_bytes().to_vec(),
        end_key: end.as_bytes().to_vec(),
        epoch: Some(RegionEpoch {
            conf_ver: 1,
            version,
        }),
        peers: vec![Peer {
            id: id * 10,
            store_id: store,
        }],
    }
}

fn store(id: u64) -> Store {
    Store {
        id,
        addr: format!("store{id}:1"),
    }
}

struct MockRoutes {
    regions: Mutex<Vec<Region>>,
    lookups: Mutex<usize>,
}

impl Routes for MockRoutes {
    fn get_regions<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<RegionRoute>>> {
        *self.lookups.lock() += 1;
        let out = self
            .regions
            .lock()
            .iter()
            .filter(|r| {
                (end.is_empty() || r.start_key.as_slice() < end)
                    && (r.end_key.is_empty() || r.end_key.as_slice() > start)
            })
            .map(|r| RegionRoute {
                region: Some(r.clone()),
                leader: r.peers.first().cloned(),
                leader_store: Some(store(r.peers[0].store_id)),
            })
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn get_stores(&self) -> BoxFuture<'_, Result<Vec<Store>>> {
        Box::pin(async { Ok((1..=3).map(store).collect()) })
    }
}

type Handler = dyn Fn(&str, &CopRequest, usize) -> std::result::Result<CopResponse, tonic::Status>
    + Send
    + Sync;

/// Answers with one Int64 row holding the region id, unless `handler`
/// (given the store address, the request and how many times this region was
/// asked) says otherwise.
struct MockTransport {
    handler: Box<Handler>,
    asked: Mutex<HashMap<u64, usize>>,
    log: Mutex<Vec<(String, u64)>>,
}

fn ok(region_id: u64) -> CopResponse {
    let schema = Arc::new(Schema::new(vec![Field::new("r", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![region_id as i64]))],
    )
    .unwrap();
    CopResponse {
        data: quarry_coprocessor::ipc::encode(&schema, &[batch])
            .unwrap()
            .into(),
        ..Default::default()
    }
}

impl CopTransport for MockTransport {
    fn coprocessor(
        &self,
        addr: &str,
        req: CopRequest,
        _timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<CopResponse, tonic::Status>> {
        let id = req.context.as_ref().unwrap().region_id;
        let n = {
            let mut asked = self.asked.lock();
            let n = asked.entry(id).or_insert(0);
            *n += 1;
            *n
        };
        self.log.lock().push((addr.to_string(), id));
        let r = (self.handler)(addr, &req, n);
        Box::pin(async move { r })
    }
}

struct Harness {
    dispatcher: Dispatcher,
    transport: Arc<MockTransport>,
    routes: Arc<MockRoutes>,
}

fn harness(regions: Vec<Region>, handler: Box<Handler>) -> Harness {
    let routes = Arc::new(MockRoutes {
        regions: Mutex::new(regions),
        lookups: Mutex::new(0),
    });
    let transport = Arc::new(MockTransport {
        handler,
        asked: Mutex::new(HashMap::new()),
        log: Mutex::new(vec![]),
    });
    let cache = Arc::new(RegionCache::new(routes.clone()));
    let dispatcher = Dispatcher::new(
        cache,
        transport.clone(),
        DispatchConfig {
            backoff_base: Duration::from_millis(1),
            backoff_max: Duration::from_millis(4),
            ..Default::default()
        },
    );
    Harness {
        dispatcher,
        transport,
        routes,
    }
}

fn three_regions() -> Vec<Region> {
    vec![
        region(1, "a", "h", 1, 1),
        region(2, "h", "p", 2, 1),
        region(3, "p", "z", 3, 1),
    ]
}

/// Runs over [a, z) and returns the region ids that answered, sorted.
async fn run(h: &Harness) -> Result<Vec<i64>> {
    let mut seen = Vec::new();
    h.dispatcher
        .run(
            &DagRequest::default(),
            vec![KeyRange::new(b"a".to_vec(), b"z".to_vec())],
            &[],
            Instant::now() + Duration::from_secs(5),
            &mut |b| {
                seen.extend(
                    b.column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .copied(),
                );
                Ok(ControlFlow::Continue(()))
            },
        )
        .await?;
    seen.sort_unstable();
    Ok(seen)
}

#[tokio::test]
async fn one_request_per_region_with_the_range_clipped_to_it() {
    let h = harness(
        three_regions(),
        Box::new(|_, req, _| {
            let id = req.context.as_ref().unwrap().region_id;
            let want = match id {
                1 => ("a", "h"),
                2 => ("h", "p"),
                _ => ("p", "z"),
            };
            assert_eq!(
                req.ranges,
                vec![PbRange {
                    start: want.0.into(),
                    end: want.1.into()
                }]
            );
            Ok(ok(id))
        }),
    );
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3]);
    // The second run is served from the region cache.
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3]);
    assert_eq!(*h.routes.lookups.lock(), 1);
}

#[tokio::test]
async fn epoch_not_match_re_splits_only_the_failed_task() {
    let h = harness(
        three_regions(),
        Box::new(|_, req, _| {
            let ctx = req.context.as_ref().unwrap();
            if ctx.region_id == 2 {
                // Region 2 split into 2 [h, l) and 4 [l, p).
                return Ok(CopResponse {
                    region_error: Some(RegionError {
                        message: "split".into(),
                        epoch_not_match: Some(EpochNotMatch {
                            current_regions: vec![
                                region(20, "h", "l", 2, 2),
                                region(4, "l", "p", 1, 2),
                            ],
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            Ok(ok(ctx.region_id))
        }),
    );
    assert_eq!(run(&h).await.unwrap(), vec![1, 3, 4, 20]);
    let asked = h.transport.asked.lock().clone();
    assert_eq!(asked[&1], 1, "untouched tasks are not re-sent");
    assert_eq!(asked[&3], 1);
    assert!(h.transport.log.lock().contains(&("store1:1".into(), 4)));
}

#[tokio::test]
async fn not_leader_with_a_hint_retries_there_at_once() {
    let h = harness(
        three_regions(),
        Box::new(|addr, req, _| {
            let id = req.context.as_ref().unwrap().region_id;
            if id == 1 && addr == "store1:1" {
                return Ok(CopResponse {
                    region_error: Some(RegionError {
                        message: "not leader".into(),
                        not_leader: Some(NotLeader {
                            region_id: 1,
                            leader: Some(Peer {
                                id: 11,
                                store_id: 3,
                            }),
                            leader_store: Some(store(3)),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            Ok(ok(id))
        }),
    );
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3]);
    let log = h.transport.log.lock().clone();
    assert!(log.contains(&("store3:1".into(), 1)), "{log:?}");
    // The cache now points region 1 at store 3.
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3]);
    assert_eq!(h.transport.asked.lock()[&1], 3);
}

#[tokio::test]
async fn busy_servers_are_retried_and_pages_are_followed() {
    let h = harness(
        three_regions(),
        Box::new(|_, req, n| {
            let id = req.context.as_ref().unwrap().region_id;
            match (id, n) {
                (2, 1) => Ok(CopResponse {
                    region_error: Some(RegionError {
                        message: "busy".into(),
                        server_is_busy: Some(ServerIsBusy::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                (3, 1) => Ok(CopResponse {
                    remaining: vec![PbRange {
                        start: b"s".to_vec(),
                        end: b"z".to_vec(),
                    }],
                    ..ok(3)
                }),
                (3, 2) => {
                    assert_eq!(req.ranges[0].start, b"s".to_vec());
                    Ok(ok(33))
                }
                _ => Ok(ok(id)),
            }
        }),
    );
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 33]);
}

#[tokio::test]
async fn a_dead_store_fails_the_query_quickly_and_by_name() {
    let h = harness(
        three_regions(),
        Box::new(|addr, req, _| {
            if addr == "store2:1" {
                return Err(tonic::Status::unavailable("connection refused"));
            }
            Ok(ok(req.context.as_ref().unwrap().region_id))
        }),
    );
    let started = Instant::now();
    let err = run(&h).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    match err {
        Error::Unavailable(m) => {
            assert!(m.contains("store 2 at store2:1 is unavailable"), "{m}");
            assert!(m.contains("connection refused"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn execution_errors_fail_the_query_with_their_category() {
    let h = harness(
        three_regions(),
        Box::new(|_, req, _| {
            if req.context.as_ref().unwrap().region_id == 3 {
                return Ok(CopResponse {
                    other_error: Some(OtherError {
                        code: other_error::Code::Overflow as i32,
                        message: "SUM overflowed BIGINT".into(),
                    }),
                    ..Default::default()
                });
            }
            Ok(ok(1))
        }),
    );
    assert_eq!(
        run(&h).await.unwrap_err(),
        Error::Overflow("SUM overflowed BIGINT".into())
    );
}
