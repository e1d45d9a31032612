//! Snapshot reads and statement transactions against real processes:
//! what a query sees while multi-region INSERTs commit, what becomes of
//! the locks a client leaves behind when it dies mid-commit, UPDATE and
//! DELETE (of tables with and without a primary key), lost updates, the
//! bank and YCSB workloads, point reads, one-phase commits, and ALTER
//! TABLE while writers and readers go on. Open transactions (BEGIN …
//! COMMIT) are in `open_transactions.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quarry_client::Client;
use quarry_coprocessor::codec::key::record_key;
use quarry_proto::kv::kv_client::KvClient;
use quarry_proto::kv::{CommitRequest, Context, Mutation, Op, PrewriteRequest, TxnResponse};
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::{GetRegionsRequest, GetTableRequest, GetTimestampsRequest};

/// The ids of INSERT batch `b`: 100 rows over three regions (split at
/// 1000 and 2000), 34 + 34 + 32.
fn batch_ids(b: i64) -> Vec<i64> {
    (0..3)
        .flat_map(|r| {
            let n = if r == 2 { 32 } else { 34 };
            (0..n).map(move |j| r * 1000 + b * 34 + j)
        })
        .collect()
}

#[test]
fn a_snapshot_sees_all_or_nothing_of_each_concurrent_multi_region_insert() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '1000,2000')");
    const BATCHES: i64 = 25;
    // (count, sum) after each batch: batches commit in order, so a
    // snapshot holds exactly the first k of them.
    let mut after = vec![(0i64, 0i64)];
    for b in 0..BATCHES {
        let (n, s) = *after.last().unwrap();
        let ids = batch_ids(b);
        after.push((
            n + ids.len() as i64,
            s + ids.iter().map(|i| i * 3).sum::<i64>(),
        ));
    }
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let compute = pg.compute.clone();
    let writer = {
        let (done, reads) = (done.clone(), reads.clone());
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                let t0 = Instant::now();
                for b in 0..BATCHES {
                    assert!(t0.elapsed() < Duration::from_secs(90), "writer too slow");
                    // The reader keeps up: batch b starts once b reads
                    // have answered (or after 5 s), so the reads span the
                    // inserts however fast the inserts are, and each
                    // batch can still commit while a read is in flight.
                    let paced = Instant::now();
                    while reads.load(Ordering::SeqCst) < b as usize
                        && paced.elapsed() < Duration::from_secs(5)
                    {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    let values: Vec<String> = batch_ids(b)
                        .iter()
                        .map(|id| format!("({id}, {})", id * 3))
                        .collect();
                    c.sql(&format!("INSERT INTO t VALUES {}", values.join(", ")))
                        .await
                        .unwrap();
                }
            });
            done.store(true, Ordering::SeqCst);
        })
    };
    let partial = runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut partial = Vec::new();
        let t0 = Instant::now();
        while !done.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(120) {
            let batches = c
                .sql("SELECT count(*) AS n, coalesce(sum(v), 0) AS s FROM t")
                .await
                .unwrap();
            let b = &batches[0];
            let col = |i: usize| {
                b.column(i)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .map(|a| a.value(0))
                    .unwrap_or_else(|| panic!("column {i} is {:?}", b.column(i).data_type()))
            };
            let (n, s) = (col(0), col(1));
            reads.fetch_add(1, Ordering::SeqCst);
            if !after.contains(&(n, s)) {
                partial.push((n, s));
            }
        }
        partial
    });
    writer.join().unwrap();
    let reads = reads.load(Ordering::SeqCst);
    assert!(reads >= 5, "only {reads} reads ran during the inserts");
    assert!(
        partial.is_empty(),
        "{} of {reads} reads saw part of an INSERT: {partial:?}",
        partial.len()
    );
    assert_eq!(
        pg.ok("SELECT count(*) AS n, sum(v) AS s FROM t"),
        format!(
            "n,s\n{},{}\n",
            after.last().unwrap().0,
            after.last().unwrap().1
        )
    );
}

/// Sends `call` to every store until one answers without a region error
/// (the region's leader).
async fn to_leader<F, Fut>(stores: &[String], call: F) -> TxnResponse
where
    F: Fn(KvClient<tonic::transport::Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<TxnResponse>, tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for s in stores {
            let Ok(c) = KvClient::connect(format!("http://{s}")).await else {
                continue;
            };
            if let Ok(r) = call(c).await {
                let r = r.into_inner();
                if r.region_error.is_none() {
                    return r;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The store's meta service, for raw transaction steps.
struct Raw {
    meta: MetaClient<tonic::transport::Channel>,
    stores: Vec<String>,
}

impl Raw {
    async fn connect(pg: &Playground) -> Raw {
        let stores = pg.store_addrs();
        let meta = MetaClient::connect(format!("http://{}", stores[0]))
            .await
            .unwrap();
        Raw { meta, stores }
    }

    async fn table_id(&mut self, name: &str) -> i64 {
        let req = GetTableRequest { name: name.into() };
        self.meta
            .get_table(req)
            .await
            .unwrap()
            .into_inner()
            .table
            .unwrap()
            .id
    }

    async fn ts(&mut self) -> u64 {
        let req = GetTimestampsRequest { count: 1 };
        self.meta
            .get_timestamps(req)
            .await
            .unwrap()
            .into_inner()
            .first
    }

    /// The region context of the region holding `key`.
    async fn context(&mut self, key: &[u8]) -> Context {
        let mut end = key.to_vec();
        end.push(0);
        let req = GetRegionsRequest {
            start_key: key.to_vec(),
            end_key: end,
        };
        let mut regions = self
            .meta
            .get_regions(req)
            .await
            .unwrap()
            .into_inner()
            .regions;
        let region = regions.remove(0).region.unwrap();
        Context {
            region_id: region.id,
            region_epoch: region.epoch,
        }
    }

    async fn prewrite(&self, req: PrewriteRequest) -> TxnResponse {
        to_leader(&self.stores, |mut c| {
            let req = req.clone();
            async move { c.prewrite(req).await }
        })
        .await
    }

    async fn commit(&self, req: CommitRequest) -> TxnResponse {
        to_leader(&self.stores, |mut c| {
            let req = req.clone();
            async move { c.commit(req).await }
        })
        .await
    }
}

/// Row `(h, v)` of a table `(id BIGINT PRIMARY KEY, v BIGINT)`, encoded.
fn row(h: i64, v: i64) -> Vec<u8> {
    use quarry_coprocessor::codec::row::{Datum, RowEncoder};
    let mut out = Vec::new();
    RowEncoder::new()
        .encode(&[(1, Datum::Int(h)), (2, Datum::Int(v))], &mut out)
        .unwrap();
    out
}

/// A client that prewrites rows 5 and 1500 of `t` (two regions) and then
/// dies: after committing only the primary (`commit_primary`), or before
/// committing anything. Its lock TTL is `ttl_ms`.
fn die_mid_commit(pg: &Playground, commit_primary: bool, ttl_ms: u64) {
    runtime().block_on(async {
        let mut raw = Raw::connect(pg).await;
        let table = raw.table_id("t").await;
        let start_ts = raw.ts().await;
        let keys: Vec<Vec<u8>> = [5i64, 1500].iter().map(|h| record_key(table, *h)).collect();
        let mut contexts = Vec::new();
        for k in &keys {
            contexts.push(raw.context(k).await);
        }
        for (i, (k, ctx)) in keys.iter().zip(&contexts).enumerate() {
            let h = [5, 1500][i];
            let req = PrewriteRequest {
                context: Some(*ctx),
                mutations: vec![Mutation {
                    op: Op::Insert as i32,
                    key: k.clone(),
                    value: row(h, h * 3),
                }],
                primary: keys[0].clone(),
                start_ts,
                ttl_ms,
                ..Default::default()
            };
            let r = raw.prewrite(req).await;
            assert!(r.error.is_none(), "{:?}", r.error);
        }
        if commit_primary {
            let commit_ts = raw.ts().await;
            let req = CommitRequest {
                context: Some(contexts[0]),
                keys: vec![keys[0].clone()],
                start_ts,
                commit_ts,
            };
            let r = raw.commit(req).await;
            assert!(r.error.is_none(), "{:?}", r.error);
        }
    });
}

#[test]
fn readers_finish_the_commit_of_a_client_that_died_after_its_primary() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '1000,2000')");
    // A long TTL: the reader must not wait for it, the primary is committed.
    die_mid_commit(&pg, true, 600_000);
    let t0 = Instant::now();
    assert_eq!(
        pg.ok("SELECT id, v FROM t ORDER BY id"),
        "id,v\n5,15\n1500,4500\n"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    // The secondary's lock is gone: a new INSERT of it is a duplicate.
    let err = pg.fails("INSERT INTO t VALUES (1500, 0)");
    assert!(
        err.contains("duplicate key") && err.contains("handle 1500"),
        "{err}"
    );
}

#[test]
fn readers_roll_back_a_dead_clients_locks_once_their_ttl_has_passed() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '1000,2000')");
    die_mid_commit(&pg, false, 1_000);
    // The reader waits out the TTL, then rolls the transaction back.
    assert_eq!(pg.ok("SELECT count(*) AS n FROM t"), "n\n0\n");
    // The rows are free again.
    pg.ok("INSERT INTO t VALUES (5, 1), (1500, 2)");
    assert_eq!(
        pg.ok("SELECT id, v FROM t ORDER BY id"),
        "id,v\n5,1\n1500,2\n"
    );
}

#[test]
fn concurrent_inserts_of_one_key_commit_once() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '1000,2000')");
    let compute = pg.compute.clone();
    let outcomes: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let compute = compute.clone();
                s.spawn(move || {
                    runtime().block_on(async {
                        let mut c = Client::connect(&compute).await.unwrap();
                        c.sql(&format!(
                            "INSERT INTO t VALUES (7, {i}), ({}, {i})",
                            1000 + i
                        ))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(won, 1, "{outcomes:?}");
    for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert!(
            e.contains("duplicate key") || e.contains("write conflict"),
            "{e}"
        );
    }
    // Only the winner's second row is there: the losers wrote nothing.
    assert_eq!(pg.ok("SELECT count(*) AS n FROM t"), "n\n2\n");
}

/// What `SELECT count(*) AS n, sum(v) AS s FROM u` answers over `rows`
/// (id → v in cents).
fn count_and_sum(rows: &std::collections::BTreeMap<i64, i64>) -> String {
    let cents: i64 = rows.values().sum();
    format!("n,s\n{},{}.{:02}\n", rows.len(), cents / 100, cents % 100)
}

#[test]
fn update_and_delete_change_rows_in_packs_and_in_the_delta_at_one_snapshot() {
    let _serial = SERIAL.lock();
    // Compaction folds the rows into packs quickly, so the statements
    // meet rows in packs (hidden by newer versions) as well as in the
    // delta.
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--compact-delta-rows",
        "10",
        "--gc-life-time-secs",
        "2",
    ]);
    pg.ok(
        "CREATE TABLE u (id BIGINT PRIMARY KEY, v DECIMAL(12,2) NOT NULL, s VARCHAR(4)) \
         WITH (layout = 'column', split_handles = '50')",
    );
    // v in cents, the model the answers are checked against.
    let mut model: std::collections::BTreeMap<i64, i64> = (1..=100).map(|i| (i, i * 101)).collect();
    let values: Vec<String> = model
        .iter()
        .map(|(i, v)| format!("({i}, {}.{:02}, 's{}')", v / 100, v % 100, i % 3))
        .collect();
    pg.ok(&format!("INSERT INTO u VALUES {}", values.join(", ")));
    wait_for_keys_and_packs(&pg, "u", |keys, packs| packs >= 2 && keys == packs);
    let summary = "SELECT count(*) AS n, sum(v) AS s FROM u";
    assert_eq!(pg.ok(summary), count_and_sum(&model));
    // `quarry status` shows the GC safe point: the life time behind now.
    let text = status_text(&pg);
    assert!(
        text.contains("GC safe point") && text.contains("GC life time 2 s"),
        "{text}"
    );
    let s = runtime()
        .block_on(quarry::status::fetch(&pg.store_addrs()[0]))
        .unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let lag_ms = now_ms - (s.gc_safe_point >> 18);
    assert!(
        (1500..10_000).contains(&lag_ms),
        "safe point {lag_ms} ms behind"
    );
    assert!(s.oldest_readable_ts > s.gc_safe_point);

    // UPDATE over packed rows: an expression of the old value.
    assert_eq!(
        pg.ok("UPDATE u SET v = v * 2 + 0.01 WHERE id % 3 = 0"),
        "count\n33\n"
    );
    for (i, v) in model.iter_mut() {
        if i % 3 == 0 {
            *v = *v * 2 + 1;
        }
    }
    assert_eq!(pg.ok(summary), count_and_sum(&model));
    // DELETE over packed and updated rows.
    assert_eq!(
        pg.ok("DELETE FROM u WHERE id % 5 = 0 OR s = 's1' AND id > 90"),
        "count\n23\n"
    );
    model.retain(|i, _| !(i % 5 == 0 || (i % 3 == 1 && *i > 90)));
    assert_eq!(pg.ok(summary), count_and_sum(&model));
    assert_eq!(pg.ok("SELECT count(*) AS n FROM u WHERE id = 10"), "n\n0\n");
    assert_eq!(pg.ok("SELECT v FROM u WHERE id = 9"), "v\n18.19\n");
    // A deleted key can be inserted again; an updated one is still taken.
    pg.ok("INSERT INTO u VALUES (10, 1.00, 'x')");
    model.insert(10, 100);
    let err = pg.fails("INSERT INTO u VALUES (9, 1.00, 'x')");
    assert!(err.contains("duplicate key"), "{err}");
    // Nothing matched: nothing written.
    assert_eq!(pg.ok("UPDATE u SET v = 0 WHERE id > 1000"), "count\n0\n");
    // Once compaction folds the versions back into packs, the same rows.
    wait_for_keys_and_packs(&pg, "u", |keys, packs| packs >= 2 && keys == packs);
    assert_eq!(pg.ok(summary), count_and_sum(&model));
    assert_eq!(pg.ok("SELECT v, s FROM u WHERE id = 9"), "v,s\n18.19,s0\n");

    // What users get wrong gets an error naming it, and changes nothing.
    let err = pg.fails("UPDATE u SET id = 5 WHERE id = 9");
    assert!(err.contains("primary key column id"), "{err}");
    let err = pg.fails("UPDATE u SET w = 1");
    assert!(
        err.contains("unknown column 'w'") && err.contains("valid columns are: id, v, s"),
        "{err}"
    );
    let err = pg.fails("UPDATE u SET v = NULL WHERE id = 9");
    assert!(err.contains("column v is NOT NULL"), "{err}");
    let err = pg.fails("UPDATE u SET s = 'toolong' WHERE id = 9");
    assert!(err.contains("too long for VARCHAR(4)"), "{err}");
    let err = pg.fails("UPDATE u SET v = v * 1000000000000 WHERE id = 9");
    assert!(
        err.contains("out of range") || err.contains("overflow"),
        "{err}"
    );
    assert_eq!(pg.ok(summary), count_and_sum(&model));
}

#[test]
fn update_and_delete_find_the_rows_of_tables_without_a_primary_key_by_handle() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--compact-delta-rows",
        "4",
        "--gc-life-time-secs",
        "6",
    ]);
    // Equal rows too: only the handle tells them apart.
    let rows =
        "(1, 1.50), (2, 2.50), (3, 3.50), (2, 2.50), (5, 5.50), (6, 6.50), (7, 7.50), (8, 8.50)";
    for layout in ["row", "column"] {
        pg.ok(&format!(
            "CREATE TABLE np_{layout} (a BIGINT, b DECIMAL(10,2)) WITH (layout = '{layout}')"
        ));
        pg.ok(&format!("INSERT INTO np_{layout} VALUES {rows}"));
    }
    // The column table's rows in packs (the handles come from the packs).
    wait_for_keys_and_packs(&pg, "np_column", |keys, packs| packs >= 1 && keys == packs);
    for t in ["np_row", "np_column"] {
        // The handle can be aggregated (a regions' partial aggregate):
        // the usual way to drop duplicate rows.
        assert_eq!(
            pg.ok(&format!(
                "DELETE FROM {t} WHERE _rowid NOT IN (SELECT min(_rowid) FROM {t} GROUP BY a, b)"
            )),
            "count\n1\n",
            "{t}"
        );
        assert_eq!(
            pg.ok(&format!("UPDATE {t} SET b = b * 10 WHERE a = 2")),
            "count\n1\n"
        );
        assert_eq!(pg.ok(&format!("DELETE FROM {t} WHERE a > 5")), "count\n3\n");
        assert_eq!(
            pg.ok(&format!("SELECT a, b FROM {t} ORDER BY a, b")),
            "a,b\n1,1.50\n2,25.00\n3,3.50\n5,5.50\n",
            "{t}"
        );
        // Inside a transaction too, where the scan meets its own locks.
        let script = format!(
            "BEGIN; UPDATE {t} SET b = 0 WHERE a = 1; DELETE FROM {t} WHERE b = 0; \
             SELECT count(*) AS n FROM {t}; COMMIT"
        );
        let out = pg.ok(&script);
        assert!(out.contains("n\n3\n"), "{out}");
        assert_eq!(
            pg.ok(&format!("SELECT count(*) AS n, sum(b) AS s FROM {t}")),
            "n,s\n3,34.00\n"
        );
        // The handle is UPDATE's and DELETE's, not a column of the table.
        let err = pg.fails(&format!("SELECT _rowid FROM {t}"));
        assert!(err.contains("_rowid"), "{err}");
        let err = pg.fails(&format!("UPDATE {t} SET _rowid = 1"));
        assert!(err.contains("unknown column '_rowid'"), "{err}");
        assert_eq!(pg.ok(&format!("DELETE FROM {t}")), "count\n3\n");
        assert_eq!(pg.ok(&format!("SELECT count(*) AS n FROM {t}")), "n\n0\n");
    }
}

#[test]
fn concurrent_increments_never_lose_an_update() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE counter (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '1000')");
    pg.ok("INSERT INTO counter VALUES (1, 0), (2000, 0)");
    const CLIENTS: usize = 4;
    const EACH: usize = 10;
    let compute = pg.compute.clone();
    // Each increment reads v and writes v + 1 at its snapshot: without
    // write-conflict detection, concurrent ones would overwrite each other.
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let compute = compute.clone();
                s.spawn(move || {
                    runtime().block_on(async {
                        let mut c = Client::connect(&compute).await.unwrap();
                        let mut failed = Vec::new();
                        for _ in 0..EACH {
                            if let Err(e) = c
                                .sql("UPDATE counter SET v = v + 1 WHERE id = 1 OR id = 2000")
                                .await
                            {
                                failed.push(e.to_string());
                            }
                        }
                        failed
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Conflicts are retried inside the statement; one that still lost
    // says so, and then it changed nothing.
    for e in &failures {
        assert!(e.contains("write conflict"), "{e}");
    }
    let done = (CLIENTS * EACH - failures.len()) as i64;
    assert!(done > 0, "{failures:?}");
    assert_eq!(
        pg.ok("SELECT id, v FROM counter ORDER BY id"),
        format!("id,v\n1,{done}\n2000,{done}\n")
    );
}

/// Runs `quarry ARGS --json` to success and parses its report.
fn quarry_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(QUARRY)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn the_bank_total_holds_under_concurrent_transfers_with_a_store_killed_and_restarted() {
    let _serial = SERIAL.lock();
    // `quarry bench bank` on its own embedded cluster: 4 clients move
    // money between 60 accounts over three regions while a checker reads
    // the total; a store is killed -9 at 3 s and restarted at 6 s.
    let r = quarry_json(&[
        "bench",
        "bank",
        "--accounts",
        "60",
        "--clients",
        "4",
        "--seconds",
        "9",
        "--kill-store",
    ]);
    assert_eq!(r["violations"], 0, "{r}");
    assert_eq!(r["killed_store"], true, "{r}");
    assert!(r["transfers"].as_u64().unwrap() >= 20, "{r}");
    assert!(r["checks"].as_u64().unwrap() >= 10, "{r}");
}

#[test]
fn coalesced_timestamps_are_distinct_increasing_and_fresh() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cluster = Arc::new(quarry_compute::cluster::Cluster::new(
            pg.store_addrs(),
            Duration::from_secs(10),
        ));
        let tso = quarry_compute::tso::Tso::new(cluster);
        let before = tso.get().await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let tso = tso.clone();
            tasks.spawn(async move {
                let mut got = Vec::new();
                for _ in 0..50 {
                    got.push(tso.get().await.unwrap());
                }
                got
            });
        }
        let mut all = Vec::new();
        while let Some(got) = tasks.join_next().await {
            let got = got.unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
            all.extend(got);
        }
        let after = tso.get().await.unwrap();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a timestamp was handed out twice");
        assert!(all[0] > before && *all.last().unwrap() < after);
    });
}

#[test]
fn ycsb_a_reads_one_row_per_key_while_updates_commit() {
    let _serial = SERIAL.lock();
    let r = quarry_json(&[
        "bench",
        "ycsb",
        "--workload",
        "a",
        "--records",
        "300",
        "--clients",
        "4",
        "--seconds",
        "3",
    ]);
    // Every read found exactly its one row, every update committed.
    assert_eq!(r["failed"], 0, "{r}");
    assert!(r["reads"].as_u64().unwrap() >= 10, "{r}");
    assert!(r["updates"].as_u64().unwrap() >= 10, "{r}");
}

#[test]
fn a_pinned_primary_key_reads_only_its_rows_and_their_versions() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE p (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '500')");
    let rows: Vec<String> = (0..1000).map(|i| format!("({i}, {})", i * 2)).collect();
    pg.ok(&format!("INSERT INTO p VALUES {}", rows.join(", ")));
    pg.ok("UPDATE p SET v = v + 1 WHERE id = 700");
    pg.ok("DELETE FROM p WHERE id = 701");
    assert_eq!(pg.ok("SELECT v FROM p WHERE id = 700"), "v\n1401\n");
    assert_eq!(
        pg.ok("SELECT count(*) AS n FROM p WHERE id = 701"),
        "n\n0\n"
    );
    assert_eq!(
        pg.ok("SELECT id, v FROM p WHERE id IN (3, 700, 701, 5000, NULL) ORDER BY id"),
        "id,v\n3,6\n700,1401\n"
    );
    // The point read touches its own keys (the row, its versions), not
    // the table's 1000 rows.
    let (text, keys) = analyzed(&pg, "SELECT v FROM p WHERE id = 700", "storage: ");
    assert!(keys <= 4, "{text}");
    let (text, keys) = analyzed(&pg, "SELECT v FROM p WHERE v = 1401", "storage: ");
    assert!(keys >= 1000, "{text}");
}

#[test]
fn a_single_region_write_commits_in_one_phase_above_every_read() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE o (id BIGINT PRIMARY KEY, v BIGINT)");
    pg.ok("CREATE TABLE c (id BIGINT PRIMARY KEY, v BIGINT) WITH (layout = 'column')");
    pg.ok("INSERT INTO c VALUES (1, 10)");
    runtime().block_on(async {
        let mut raw = Raw::connect(&pg).await;
        let (o, c) = (raw.table_id("o").await, raw.table_id("c").await);
        let ctx = raw.context(&record_key(o, 0)).await;
        let write = |table: i64, op: Op, h: i64, start_ts: u64| PrewriteRequest {
            context: Some(ctx),
            mutations: vec![Mutation {
                op: op as i32,
                key: record_key(table, h),
                value: row(h, h),
            }],
            primary: record_key(table, h),
            start_ts,
            ttl_ms: 3000,
            try_one_pc: true,
            ..Default::default()
        };
        let commit = |table: i64, h: i64, start_ts: u64, commit_ts: u64| CommitRequest {
            context: Some(ctx),
            keys: vec![record_key(table, h)],
            start_ts,
            commit_ts,
        };
        // A leader syncs max_ts with the oracle (in the background) before
        // its first one-phase commit; until then a prewrite locks as usual.
        let mut h = 0;
        let one_pc_at = loop {
            let start_ts = raw.ts().await;
            let r = raw.prewrite(write(o, Op::Insert, h, start_ts)).await;
            assert!(r.error.is_none(), "{:?}", r.error);
            if r.one_pc_commit_ts != 0 {
                assert!(r.one_pc_commit_ts > start_ts);
                break r.one_pc_commit_ts;
            }
            let commit_ts = raw.ts().await;
            let r = raw.commit(commit(o, h, start_ts, commit_ts)).await;
            assert!(r.error.is_none(), "{:?}", r.error);
            h += 1;
            assert!(h < 50, "no write committed in one phase");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Committed, nothing left to commit: the next read sees it.
        let n = h + 1;
        assert_eq!(pg.ok("SELECT count(*) AS n FROM o"), format!("n\n{n}\n"));
        // Its commit_ts was the store's pick, one above a timestamp the
        // oracle handed out: the oracle's next one may equal it, and a
        // transaction starting there sees the row (commit_ts <= read_ts),
        // so writing it is no conflict (issue 45: it was refused as one).
        let later = raw.ts().await;
        assert!(
            later >= one_pc_at,
            "the oracle handed out {later} after a commit at {one_pc_at}"
        );
        let mut over = write(o, Op::Put, h, one_pc_at);
        over.try_one_pc = false;
        let r = raw.prewrite(over).await;
        assert!(
            r.error.is_none(),
            "a write starting at the commit_ts was refused: {:?}",
            r.error
        );
        let commit_ts = raw.ts().await;
        let r = raw.commit(commit(o, h, one_pc_at, commit_ts)).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        // One newer than the start still is.
        let mut stale = write(o, Op::Put, h, commit_ts - 1);
        stale.try_one_pc = false;
        let r = raw.prewrite(stale).await;
        let err = r.error.expect("a write older than the row's commit passed");
        assert!(err.message.contains("write conflict"), "{err:?}");

        // A read raises the store's max_ts: a one-phase commit that started
        // before the read commits above it, so the read's snapshot, which
        // did not see it, stays true.
        let start_ts = raw.ts().await;
        let before_read = raw.ts().await;
        assert_eq!(pg.ok("SELECT count(*) AS n FROM o"), format!("n\n{n}\n"));
        let r = raw.prewrite(write(o, Op::Insert, 1000, start_ts)).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert!(
            r.one_pc_commit_ts > before_read,
            "committed at {} although a read after {before_read} did not see it",
            r.one_pc_commit_ts
        );
        assert_eq!(
            pg.ok("SELECT count(*) AS n, max(v) AS v FROM o"),
            format!("n,v\n{},1000\n", n + 1)
        );

        // A column table's update takes two phases (its lock guards the
        // compaction of the pack row it hides).
        let ctx_c = raw.context(&record_key(c, 1)).await;
        let start_ts = raw.ts().await;
        let mut req = write(c, Op::Put, 1, start_ts);
        req.context = Some(ctx_c);
        req.packed = true;
        let r = raw.prewrite(req).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(
            r.one_pc_commit_ts, 0,
            "a column table's update took one phase"
        );
        let commit_ts = raw.ts().await;
        let mut req = commit(c, 1, start_ts, commit_ts);
        req.context = Some(ctx_c);
        assert!(raw.commit(req).await.error.is_none());
        assert_eq!(pg.ok("SELECT id, v FROM c"), "id,v\n1,1\n");
    });
}

#[test]
fn alter_table_is_online_for_concurrent_writers_and_readers() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE acct (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '50000,100000,150000')");
    const WRITERS: i64 = 2;
    // Writers go on until the last ALTER is done (and at least this many
    // rows each; at most 500).
    const AT_LEAST: i64 = 20;
    let compute = pg.compute.clone();
    let (stop, altered) = (AtomicBool::new(false), AtomicBool::new(false));
    let reads = AtomicUsize::new(0);
    let (written, errors): (Vec<i64>, Vec<String>) = std::thread::scope(|s| {
        // Writers insert one row a statement, over both regions, naming
        // only the columns they know of; a reader counts all along.
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (compute, altered) = (compute.clone(), &altered);
                s.spawn(move || {
                    runtime().block_on(async {
                        let mut c = Client::connect(&compute).await.unwrap();
                        let (mut ok, mut failed) = (Vec::new(), Vec::new());
                        for i in 0..500 {
                            if i >= AT_LEAST && altered.load(Ordering::Relaxed) {
                                break;
                            }
                            let id = w * 100_000 + i;
                            let sql = format!("INSERT INTO acct (id, v) VALUES ({id}, {i})");
                            match c.sql(&sql).await {
                                Ok(_) => ok.push(id),
                                Err(e) => failed.push(format!("{sql}: {e}")),
                            }
                            // UPDATEs rewrite whole rows: one that raced an
                            // ALTER is refused rather than writing by a
                            // stale definition.
                            let sql =
                                format!("UPDATE acct SET v = v + 1 WHERE id = {}", w * 100_000);
                            if let Err(e) = c.sql(&sql).await {
                                if !e.to_string().contains("altered while this statement ran") {
                                    failed.push(format!("{sql}: {e}"));
                                }
                            }
                        }
                        (ok, failed)
                    })
                })
            })
            .collect();
        let reader = s.spawn(|| {
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                let (mut last, mut failed) = (0i64, Vec::new());
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    match c.sql("SELECT count(*) AS n, sum(v) AS s FROM acct").await {
                        Ok(b) => {
                            let n = b[0]
                                .column(0)
                                .as_any()
                                .downcast_ref::<arrow::array::Int64Array>()
                                .unwrap()
                                .value(0);
                            if n < last {
                                failed.push(format!("count went back from {last} to {n}"));
                            }
                            last = n;
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failed.push(format!("count: {e}")),
                    }
                }
                failed
            })
        });
        // Meanwhile the table changes shape four times.
        let mut ddl = Vec::new();
        for sql in [
            "ALTER TABLE acct ADD COLUMN tag VARCHAR(8) DEFAULT 'old'",
            "ALTER TABLE acct ADD COLUMN note VARCHAR(8)",
            "ALTER TABLE acct RENAME COLUMN note TO memo",
            "ALTER TABLE acct DROP COLUMN memo",
        ] {
            std::thread::sleep(Duration::from_millis(150));
            ddl.push(pg.ok(sql));
        }
        altered.store(true, Ordering::Relaxed);
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        for w in writers {
            let (o, f) = w.join().unwrap();
            ok.extend(o);
            failed.extend(f);
        }
        stop.store(true, Ordering::Relaxed);
        failed.extend(reader.join().unwrap());
        assert!(ddl.iter().all(|o| o.contains("ALTER TABLE")), "{ddl:?}");
        (ok, failed)
    });
    // Nobody noticed: every write and read succeeded, every row is there,
    // and every row, written before or after ADD COLUMN, reads its default.
    assert!(errors.is_empty(), "{errors:?}");
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(written.len() as i64 >= WRITERS * AT_LEAST);
    let n = written.len();
    assert_eq!(
        pg.ok(
            "SELECT count(*) AS n, count(tag) AS tagged, min(tag) AS t FROM acct WHERE tag = 'old'"
        ),
        format!("n,tagged,t\n{n},{n},old\n")
    );
    assert_eq!(
        pg.ok("SELECT column_name FROM information_schema.columns WHERE table_name = 'acct' ORDER BY ordinal_position"),
        "column_name\nid\nv\ntag\n"
    );
    let ids: Vec<String> = written.iter().map(|i| i.to_string()).collect();
    assert_eq!(
        pg.ok(&format!(
            "SELECT count(*) AS n FROM acct WHERE id IN ({})",
            ids.join(", ")
        )),
        format!("n\n{n}\n")
    );
}
