//! Dispatch against a mock cluster: region errors, leader changes, splits,
//! paging and dead stores, without a single process.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use futures::future::BoxFuture;
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::coprocessor::{
    other_error, BatchCopRequest, BatchCopResponse, CopRequest, CopResponse, DagRequest,
    KeyRange as PbRange, OtherError,
};
use quarry_proto::kv::{key_error, BatchPutRequest, BatchPutResponse, KeyError, KvPair};
use quarry_proto::meta::{
    EpochNotMatch, NotLeader, Peer, Region, RegionEpoch, RegionError, RegionRoute, ServerIsBusy,
    Store,
};

use super::{DispatchConfig, Dispatcher};
use crate::cluster::{BatchAnswers, CopTransport, KvTransport, Routes};
use crate::kv_writer::KvWriter;
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
            .filter(|r| KeyRangeRef::of_region(r).overlaps(KeyRangeRef::new(start, end)))
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
    /// Batched calls made, and single-region ones.
    batches: Mutex<usize>,
    singles: Mutex<usize>,
    /// Answer batched calls `Unimplemented`, as a store that predates them.
    no_batches: Mutex<bool>,
}

impl MockTransport {
    /// One region's request through the handler, counted and logged.
    fn answer(
        &self,
        addr: &str,
        req: CopRequest,
    ) -> std::result::Result<CopResponse, tonic::Status> {
        let id = req.context.as_ref().unwrap().region_id;
        let n = count(&self.asked, id);
        self.log.lock().push((addr.to_string(), id));
        (self.handler)(addr, &req, n)
    }
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
        *self.singles.lock() += 1;
        let r = self.answer(addr, req);
        Box::pin(async move { r })
    }

    /// Each task through the handler, as `coprocessor` would; a store the
    /// handler cannot reach fails the whole call.
    fn batch_coprocessor(
        &self,
        addr: &str,
        req: BatchCopRequest,
        _timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchAnswers, tonic::Status>> {
        if *self.no_batches.lock() {
            return Box::pin(async { Err(tonic::Status::unimplemented("BatchCoprocessor")) });
        }
        *self.batches.lock() += 1;
        let mut answers = Vec::new();
        for (i, task) in req.tasks.into_iter().enumerate() {
            let one = CopRequest {
                context: task.context,
                ranges: task.ranges,
                dag: req.dag.clone(),
                encode_type: req.encode_type,
                max_response_bytes: req.max_response_bytes,
                timeout_ms: req.timeout_ms,
            };
            answers.push(self.answer(addr, one).map(|r| BatchCopResponse {
                task: i as u32,
                response: Some(r),
            }));
        }
        Box::pin(async move {
            let answers = answers
                .into_iter()
                .collect::<std::result::Result<Vec<_>, _>>()?;
            // Answered out of order, as a store may.
            Ok(futures::stream::iter(answers.into_iter().rev().map(Ok)).boxed())
        })
    }
}

struct Harness {
    dispatcher: Dispatcher,
    transport: Arc<MockTransport>,
    routes: Arc<MockRoutes>,
}

fn harness(regions: Vec<Region>, handler: Box<Handler>) -> Harness {
    harness_limited(regions, handler, DispatchConfig::default().concurrency)
}

/// [`harness`], with at most `concurrency` regions worked on at once.
fn harness_limited(regions: Vec<Region>, handler: Box<Handler>, concurrency: usize) -> Harness {
    let routes = Arc::new(MockRoutes {
        regions: Mutex::new(regions),
        lookups: Mutex::new(0),
    });
    let transport = Arc::new(MockTransport {
        handler,
        asked: Mutex::new(HashMap::new()),
        log: Mutex::new(vec![]),
        batches: Mutex::new(0),
        singles: Mutex::new(0),
        no_batches: Mutex::new(false),
    });
    let cache = Arc::new(RegionCache::new(routes.clone()));
    let dispatcher = Dispatcher::new(
        cache,
        transport.clone(),
        DispatchConfig {
            concurrency,
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

/// Region 1's leader moved to store 3 (the answer store 1 gives).
fn region_1_led_by_store_3() -> RegionError {
    RegionError {
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
    }
}

/// A store's EpochNotMatch naming `current` as the regions now.
fn epoch_changed(current: Vec<Region>) -> RegionError {
    RegionError {
        message: "split".into(),
        epoch_not_match: Some(EpochNotMatch {
            current_regions: current,
        }),
        ..Default::default()
    }
}

/// Region 2 split into 20 [h, l) and 4 [l, p).
fn region_2_split() -> RegionError {
    epoch_changed(vec![region(20, "h", "l", 2, 2), region(4, "l", "p", 1, 2)])
}

/// Counts one more request for `region_id`; returns how many so far.
fn count(asked: &Mutex<HashMap<u64, usize>>, region_id: u64) -> usize {
    let mut asked = asked.lock();
    let n = asked.entry(region_id).or_insert(0);
    *n += 1;
    *n
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
                return Ok(CopResponse {
                    region_error: Some(region_2_split()),
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

/// A store names only the region as it is after a split; meta learns of
/// the split a moment later and until then routes the moved part to the
/// old epoch. The retry layer must wait for meta, not spin through the
/// give-up limit (it did: "gave up after 32 region errors").
#[tokio::test]
async fn a_split_meta_has_not_heard_of_yet_is_waited_out() {
    let h = harness(
        three_regions(),
        Box::new(|_, req, _| {
            let ctx = req.context.as_ref().unwrap();
            let version = ctx.region_epoch.as_ref().map_or(0, |e| e.version);
            if ctx.region_id == 2 && version == 1 {
                return Ok(CopResponse {
                    region_error: Some(epoch_changed(vec![region(2, "h", "l", 2, 2)])),
                    ..Default::default()
                });
            }
            Ok(ok(ctx.region_id))
        }),
    );
    let routes = h.routes.clone();
    let meta_catches_up = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        *routes.regions.lock() = vec![
            region(1, "a", "h", 1, 1),
            region(2, "h", "l", 2, 2),
            region(4, "l", "p", 1, 2),
            region(3, "p", "z", 3, 1),
        ];
    });
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 4]);
    meta_catches_up.await.unwrap();
    let stale_asks = h
        .transport
        .log
        .lock()
        .iter()
        .filter(|(_, id)| *id == 2)
        .count();
    assert!(stale_asks < 32, "region 2 asked {stale_asks} times");
}

#[tokio::test]
async fn not_leader_with_a_hint_retries_there_at_once() {
    let h = harness(
        three_regions(),
        Box::new(|addr, req, _| {
            let id = req.context.as_ref().unwrap().region_id;
            if id == 1 && addr == "store1:1" {
                return Ok(CopResponse {
                    region_error: Some(region_1_led_by_store_3()),
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

/// Region `busy` answers "server is busy" the first time; region `paged`
/// answers a first page that leaves [`rest_from`, z) to scan, whose
/// second page holds `paged` × 11; every other answer is the region's id.
fn busy_then_paged(busy: u64, paged: u64, rest_from: &'static str) -> Box<Handler> {
    Box::new(move |_, req, n| {
        let id = req.context.as_ref().unwrap().region_id;
        match (id, n) {
            (i, 1) if i == busy => Ok(CopResponse {
                region_error: Some(RegionError {
                    message: "busy".into(),
                    server_is_busy: Some(ServerIsBusy::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            (i, 1) if i == paged => Ok(CopResponse {
                remaining: vec![PbRange {
                    start: rest_from.into(),
                    end: b"z".to_vec(),
                }],
                ..ok(paged)
            }),
            (i, 2) if i == paged => {
                assert_eq!(req.ranges[0].start, rest_from.as_bytes());
                Ok(ok(paged * 11))
            }
            _ => Ok(ok(id)),
        }
    })
}

#[tokio::test]
async fn busy_servers_are_retried_and_pages_are_followed() {
    let h = harness(three_regions(), busy_then_paged(2, 3, "s"));
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 33]);
}

/// Regions 1, 2 and 4 on store 1, region 3 on store 2.
fn two_stores() -> Vec<Region> {
    vec![
        region(1, "a", "e", 1, 1),
        region(2, "e", "h", 1, 1),
        region(3, "h", "p", 2, 1),
        region(4, "p", "z", 1, 1),
    ]
}

#[tokio::test]
async fn a_stores_regions_go_in_one_call_and_are_retried_one_by_one() {
    let h = harness(two_stores(), busy_then_paged(2, 4, "t"));
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 4, 44]);
    // Store 1's three regions in one call; region 3 alone on store 2, the
    // busy region's retry and the second page one by one.
    assert_eq!(*h.transport.batches.lock(), 1);
    assert_eq!(*h.transport.singles.lock(), 3);
    let asked = h.transport.asked.lock().clone();
    assert_eq!((asked[&1], asked[&2], asked[&3], asked[&4]), (1, 2, 1, 2));
}

#[tokio::test]
async fn a_store_without_the_batched_call_is_asked_region_by_region() {
    let h = harness(two_stores(), answers_ids());
    *h.transport.no_batches.lock() = true;
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(*h.transport.singles.lock(), 4);
    assert!(h.transport.asked.lock().values().all(|n| *n == 1));
    // Not taken for an unreachable store: no backoff, no new lookup.
    assert_eq!(*h.routes.lookups.lock(), 1);
}

#[tokio::test]
async fn a_store_gets_at_most_the_fan_out_in_one_call() {
    let regions = ["a", "c", "e", "g", "i", "k", "z"]
        .windows(2)
        .enumerate()
        .map(|(i, w)| region(i as u64 + 1, w[0], w[1], 1, 1))
        .collect();
    let h = harness_limited(regions, answers_ids(), 2);
    assert_eq!(run(&h).await.unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(*h.transport.batches.lock(), 3);
    assert_eq!(*h.transport.singles.lock(), 0);
}

/// Every region answers its id.
fn answers_ids() -> Box<Handler> {
    Box::new(|_, req, _| Ok(ok(req.context.as_ref().unwrap().region_id)))
}

/// Every region answers its id, except those on the store at `dead`,
/// which cannot be reached.
fn store_down(dead: &'static str) -> Box<Handler> {
    Box::new(move |addr, req, _| {
        if addr == dead {
            return Err(tonic::Status::unavailable("connection refused"));
        }
        Ok(ok(req.context.as_ref().unwrap().region_id))
    })
}

/// Runs `h`'s query, which must fail within two seconds as unavailable,
/// naming `store` (e.g. "store 2 at store2:1") and the transport's words.
async fn fails_fast_naming(h: &Harness, store: &str) {
    let started = Instant::now();
    let err = run(h).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    match err {
        Error::Unavailable(m) => {
            assert!(m.contains(&format!("{store} is unavailable")), "{m}");
            assert!(m.contains("connection refused"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_dead_store_fails_its_batch_and_the_query_by_name() {
    let h = harness(two_stores(), store_down("store1:1"));
    fails_fast_naming(&h, "store 1 at store1:1").await;
    assert_eq!(*h.transport.batches.lock(), 1);
}

#[tokio::test]
async fn a_dead_store_fails_the_query_quickly_and_by_name() {
    let h = harness(three_regions(), store_down("store2:1"));
    fails_fast_naming(&h, "store 2 at store2:1").await;
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

#[tokio::test]
async fn a_satisfied_consumer_stops_a_paging_region() {
    // Region 1 would page forever; the query wants one batch.
    let h = harness(
        vec![region(1, "a", "z", 1, 1)],
        Box::new(|_, _, n| {
            Ok(CopResponse {
                remaining: vec![PbRange {
                    start: format!("b{n:05}").into_bytes(),
                    end: b"z".to_vec(),
                }],
                ..ok(n as u64)
            })
        }),
    );
    let mut seen = 0;
    h.dispatcher
        .run(
            &DagRequest::default(),
            vec![KeyRange::new(b"a".to_vec(), b"z".to_vec())],
            &[],
            Instant::now() + Duration::from_secs(5),
            &mut |_| {
                seen += 1;
                Ok(ControlFlow::Break(()))
            },
        )
        .await
        .unwrap();
    assert_eq!(seen, 1);
    let asked = h.transport.asked.lock()[&1];
    assert!(asked <= 2 + super::PAGES_BUFFERED, "asked {asked} pages");
}

type PutHandler = dyn Fn(&str, &BatchPutRequest, usize) -> std::result::Result<BatchPutResponse, tonic::Status>
    + Send
    + Sync;

/// Records every BatchPut (address, region, keys, same_value_ok) and
/// answers through `handler` (given how many times the region was asked).
struct MockKv {
    handler: Box<PutHandler>,
    asked: Mutex<HashMap<u64, usize>>,
    log: Mutex<Vec<PutLogEntry>>,
}

/// Address, region, keys, and whether it was a retry of an unknown outcome.
type PutLogEntry = (String, u64, Vec<Vec<u8>>, bool);

impl KvTransport for MockKv {
    fn batch_put(
        &self,
        addr: &str,
        req: BatchPutRequest,
        _timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchPutResponse, tonic::Status>> {
        let id = req.context.as_ref().unwrap().region_id;
        let n = count(&self.asked, id);
        let keys = req.pairs.iter().map(|p| p.key.clone()).collect();
        self.log
            .lock()
            .push((addr.to_string(), id, keys, req.same_value_ok));
        let r = (self.handler)(addr, &req, n);
        Box::pin(async move { r })
    }
}

fn writer(regions: Vec<Region>, handler: Box<PutHandler>) -> (KvWriter, Arc<MockKv>) {
    let routes = Arc::new(MockRoutes {
        regions: Mutex::new(regions),
        lookups: Mutex::new(0),
    });
    let kv = Arc::new(MockKv {
        handler,
        asked: Mutex::new(HashMap::new()),
        log: Mutex::new(vec![]),
    });
    let cache = Arc::new(RegionCache::new(routes));
    (KvWriter::new(kv.clone(), cache), kv)
}

fn pairs(keys: &[&str]) -> Vec<KvPair> {
    keys.iter()
        .map(|k| KvPair {
            key: k.as_bytes().to_vec(),
            value: b"v".to_vec(),
        })
        .collect()
}

fn region_error(re: RegionError) -> BatchPutResponse {
    BatchPutResponse {
        region_error: Some(re),
        ..Default::default()
    }
}

#[tokio::test]
async fn writes_go_through_the_same_retry_layer_as_reads() {
    // Region 1 moved its leader to store 3; region 2 split at "l"; store 3's
    // first answer for region 3 is lost.
    let (w, kv) = writer(
        three_regions(),
        Box::new(|addr, req, n| {
            let id = req.context.as_ref().unwrap().region_id;
            match (id, addr, n) {
                (1, "store1:1", _) => Ok(region_error(region_1_led_by_store_3())),
                (2, _, _) => Ok(region_error(region_2_split())),
                (3, _, 1) => Err(tonic::Status::unavailable("connection reset")),
                _ => Ok(BatchPutResponse::default()),
            }
        }),
    );
    w.put(pairs(&["q", "b", "i", "m"]), true, Duration::from_secs(5))
        .await
        .unwrap();
    let log = kv.log.lock().clone();
    let landed = |addr: &str, id: u64| {
        log.iter()
            .filter(|(a, r, _, _)| a == addr && *r == id)
            .map(|(_, _, k, same)| (k.clone(), *same))
            .collect::<Vec<_>>()
    };
    // The hint was followed, and nothing was proposed: not a retry.
    assert_eq!(landed("store3:1", 1), vec![(vec![b"b".to_vec()], false)]);
    // The split re-cut region 2's keys only.
    assert_eq!(landed("store2:1", 20), vec![(vec![b"i".to_vec()], false)]);
    assert_eq!(landed("store1:1", 4), vec![(vec![b"m".to_vec()], false)]);
    // Region 3 has one peer: the lost answer is retried on the same store,
    // marked as a retry whose earlier outcome is unknown.
    assert_eq!(
        landed("store3:1", 3),
        vec![(vec![b"q".to_vec()], false), (vec![b"q".to_vec()], true)]
    );
}

#[tokio::test]
async fn a_write_refused_as_invalid_fails_at_once_with_the_stores_words() {
    let (w, kv) = writer(
        three_regions(),
        Box::new(|_, _, _| {
            Ok(BatchPutResponse {
                error: Some(KeyError {
                    code: key_error::Code::InvalidInput as i32,
                    message: "duplicate key: handle 7".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }),
    );
    let err = w
        .put(pairs(&["b"]), true, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err, Error::InvalidInput("duplicate key: handle 7".into()));
    assert_eq!(kv.log.lock().len(), 1);
}

#[tokio::test]
async fn a_write_waits_out_a_restarting_store_where_a_query_gives_up() {
    // Region 3's only replica refuses connections for its first 5 calls.
    let (w, kv) = writer(
        three_regions(),
        Box::new(|_, req, n| {
            let id = req.context.as_ref().unwrap().region_id;
            if id == 3 && n <= 5 {
                return Err(tonic::Status::unavailable("connection refused"));
            }
            Ok(BatchPutResponse::default())
        }),
    );
    w.put(pairs(&["q"]), true, Duration::from_secs(5))
        .await
        .unwrap();
    let tries: Vec<bool> = kv.log.lock().iter().map(|e| e.3).collect();
    assert_eq!(tries, vec![false, true, true, true, true, true]);

    // A query over the same region fails fast instead.
    let h = harness(
        three_regions(),
        Box::new(|_, req, n| {
            let id = req.context.as_ref().unwrap().region_id;
            if id == 3 && n <= 5 {
                return Err(tonic::Status::unavailable("connection refused"));
            }
            Ok(ok(id))
        }),
    );
    assert!(matches!(run(&h).await, Err(Error::Unavailable(_))));
}
