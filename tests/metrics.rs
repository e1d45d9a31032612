//! The status ports: every process line of `quarry playground` ends with
//! ` status http://HOST:PORT`, each serves Prometheus `/metrics` whose
//! counters move with the work (coprocessor requests, Raft proposals,
//! statements and their errors), `/health`, and 404 elsewhere; compute's
//! slow-query log shows a slow query's SQL and its per-region statistics;
//! a big query's end hands compute's free memory back, and counts it.

mod common;

use std::time::Duration;

use common::{http, sample, Playground, SERIAL};

/// GET `path` from `url` (`http://HOST:PORT`): (status code, body).
fn get(url: &str, path: &str) -> (u16, String) {
    http(url, "GET", path, "")
}

#[test]
fn every_process_serves_metrics_that_follow_the_work_and_slow_queries_are_logged() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01", "--slow-query-ms", "1"]);
    assert_eq!(
        pg.status_urls.len(),
        4,
        "three stores and compute print a status URL"
    );
    let compute_url = pg.status_urls[3].clone();
    let stores: Vec<String> = pg.status_urls[..3].to_vec();

    let q6 = quarry::answers::query("q6").unwrap();
    pg.ok(q6);
    pg.fails("SELECT no_such_column FROM lineitem");

    // Compute: one query at least, one invalid-input error.
    let (code, page) = get(&compute_url, "/metrics");
    assert_eq!(code, 200, "{page}");
    assert!(
        sample(&page, "quarry_compute_statements_total{kind=\"query\"}") >= 1.0,
        "{page}"
    );
    assert!(
        sample(
            &page,
            "quarry_compute_statement_errors_total{kind=\"invalid_input\"}"
        ) >= 1.0,
        "{page}"
    );
    assert!(page.contains("quarry_compute_statement_duration_seconds_bucket"));

    // Stores: coprocessor requests answered, packs scanned, bytes sent,
    // proposals (the load), regions and leaders, RocksDB gauges.
    let pages: Vec<String> = stores
        .iter()
        .map(|u| {
            let (code, page) = get(u, "/metrics");
            assert_eq!(code, 200, "{page}");
            page
        })
        .collect();
    let total = |name: &str| pages.iter().map(|p| sample(p, name)).sum::<f64>();
    assert!(
        total("quarry_coprocessor_requests_total{outcome=\"ok\"}") >= 1.0,
        "{}",
        pages[0]
    );
    assert!(total("quarry_coprocessor_packs_total{what=\"scanned\"}") >= 1.0);
    assert!(total("quarry_coprocessor_sent_bytes_total") > 0.0);
    assert!(total("quarry_raft_proposals_total") >= 1.0);
    assert!(pages[0].contains("quarry_raft_commit_duration_seconds_bucket"));
    assert!(pages[0].contains("quarry_raft_apply_duration_seconds_bucket"));
    // Gauges refresh every couple of seconds: wait for the first.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leaders: f64 = stores
            .iter()
            .map(|u| sample(&get(u, "/metrics").1, "quarry_region_leaders"))
            .sum();
        let regions = sample(&get(&stores[0], "/metrics").1, "quarry_regions");
        if leaders >= 1.0 && regions >= 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no region or leader gauge"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(get(&stores[0], "/metrics")
        .1
        .contains("quarry_rocksdb_background{property=\"num-running-compactions\"}"));

    // Health and unknown paths.
    assert_eq!(get(&stores[1], "/health"), (200, "ok\n".to_string()));
    assert_eq!(get(&compute_url, "/nothing").0, 404);

    // The slow-query log (threshold 1 ms here): Q6's SQL and its region
    // scan's statistics as EXPLAIN ANALYZE shows them.
    let log = std::fs::read_to_string(pg.dir.path().join("data/compute.log")).unwrap();
    let slow = log
        .split("slow statement: ")
        .skip(1)
        .find(|s| s.contains("l_discount"))
        .unwrap_or_else(|| panic!("no slow-query entry for Q6 in:\n{log}"));
    assert!(slow.contains("RegionScanExec"), "{slow}");
    assert!(slow.contains("region requests"), "{slow}");
    assert!(slow.contains("keys scanned"), "{slow}");
}

/// The plan cache (`compute/src/df/plan_cache.rs`): a statement that
/// comes again (even spelled with other spacing and case) is planned from
/// its kept plans and still reads the rows written since; an aggregation
/// runs a fresh copy of its kept physical plan, at its own snapshot (a
/// transaction's too), a join's with build keys of its own; a change to
/// another table leaves it kept; its table dropped and created again
/// under the same name, with another type, is planned again; `now()` is
/// never kept.
#[test]
fn a_repeated_query_reuses_its_plan_until_its_table_changes() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "1", "--sf", "0.01", "--tables", "nation"]);
    let compute_url = pg.status_urls.last().unwrap().clone();
    let count = |result: &str| {
        let (_, page) = get(&compute_url, "/metrics");
        sample(
            &page,
            &format!("quarry_compute_plan_cache_total{{result=\"{result}\"}}"),
        )
    };
    let value = |sql: &str| pg.ok(sql).lines().nth(1).unwrap_or_default().to_string();

    pg.ok("CREATE TABLE t (a BIGINT PRIMARY KEY, b BIGINT)");
    pg.ok("INSERT INTO t VALUES (1, 10), (2, 20)");
    let q = "SELECT sum(b) AS s FROM t WHERE a > 0";
    let misses = count("miss");
    assert_eq!(value(q), "30");
    assert_eq!(count("miss"), misses + 1.0);
    // The table's statistics are part of what a plan was made against, and
    // its first statement starts their analysis; a statement is kept the
    // second time it is planned. Once the statistics are in, the kept plan
    // is the one made with them: hits from then on.
    let warm = |want: &str| {
        let mut streak = 0;
        for _ in 0..100 {
            let hits = count("hit");
            assert_eq!(value(q), want);
            streak = if count("hit") > hits { streak + 1 } else { 0 };
            if streak == 3 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{q} was never planned from the cache three times in a row");
    };
    warm("30");
    // An aggregation over one table: its physical plan is kept too, and a
    // hit runs a fresh copy of it.
    let reused = || {
        let (_, page) = get(&compute_url, "/metrics");
        sample(&page, "quarry_compute_physical_plans_reused_total")
    };
    let physical = reused();
    let (hits, misses) = (count("hit"), count("miss"));
    assert_eq!(value("select   sum(b) as s from t\n where a > 0"), "30");
    assert_eq!((count("hit"), count("miss")), (hits + 1.0, misses));

    assert_eq!(reused(), physical + 1.0);
    // A kept plan reads the snapshot of its own run.
    pg.ok("INSERT INTO t VALUES (3, 30)");
    assert_eq!(value(q), "60");
    assert_eq!((count("hit"), count("miss")), (hits + 2.0, misses));
    assert_eq!(reused(), physical + 2.0);
    // In a transaction too: a row another session commits meanwhile is
    // not seen by a run from the kept physical plan (with no snapshot of
    // its own, a scan would read the newest).
    common::runtime().block_on(async {
        use arrow::array::AsArray;
        let sum = |b: Vec<arrow::array::RecordBatch>| {
            b[0].column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(0)
        };
        let mut c = quarry_client::Client::connect(&pg.compute).await.unwrap();
        c.begin().await.unwrap();
        assert_eq!(sum(c.sql(q).await.unwrap()), 60);
        pg.ok("INSERT INTO t VALUES (4, 40)");
        assert_eq!(sum(c.sql(q).await.unwrap()), 60, "saw a later commit");
        c.commit().await.unwrap();
        assert_eq!(sum(c.sql(q).await.unwrap()), 100);
    });
    assert_eq!(reused(), physical + 5.0);
    // A top-k (ORDER BY … LIMIT) too, with its answer each time.
    let top = "SELECT a, b FROM t ORDER BY b DESC LIMIT 2";
    let rows = |sql: &str| pg.ok(sql).lines().skip(1).collect::<Vec<_>>().join(";");
    for _ in 0..3 {
        assert_eq!(rows(top), "4,40;3,30");
    }
    let physical = reused();
    assert_eq!(rows(top), "4,40;3,30");
    assert_eq!(reused(), physical + 1.0, "the top-k was planned again");

    // A join's physical plan is kept too, and each run's copy has build
    // keys of its own: t's keys narrow nation's scan, and a run whose
    // scan waited on an earlier run's keys (1 to 4) would miss the row
    // added since.
    let join = "SELECT count(*) AS n FROM t JOIN nation ON t.a = nation.n_nationkey";
    let physical = reused();
    for _ in 0..4 {
        assert_eq!(value(join), "4");
    }
    assert!(
        reused() >= physical + 2.0,
        "the join was not run from its kept physical plan"
    );
    pg.ok("INSERT INTO t VALUES (5, 50)");
    let physical = reused();
    for _ in 0..3 {
        assert_eq!(value(join), "5", "a run used an earlier run's build keys");
    }
    assert!(reused() >= physical + 2.0);
    // ... and they narrow nation's scan (5 rows from t and 5 from
    // nation, not 25): a copy's scan is linked to its copy's join.
    let region_rows = || {
        let (_, page) = get(&compute_url, "/metrics");
        sample(&page, "quarry_compute_region_rows_total")
    };
    let (rows, physical) = (region_rows(), reused());
    assert_eq!(value(join), "5");
    assert_eq!(reused(), physical + 1.0);
    assert!(
        region_rows() - rows < 30.0,
        "nation's scan was not narrowed by t's keys: {} rows",
        region_rows() - rows
    );
    // Two identical aggregating scans share one run, and each run's copy
    // has its own: a kept run would replay the answer of the first.
    let top = "WITH r AS (SELECT a, sum(b) AS s FROM t GROUP BY a) \
               SELECT a FROM r WHERE s = (SELECT max(s) FROM r)";
    for _ in 0..3 {
        assert_eq!(value(top), "5");
    }
    pg.ok("INSERT INTO t VALUES (6, 60)");
    let physical = reused();
    for _ in 0..3 {
        assert_eq!(value(top), "6", "a run replayed an earlier run's scan");
    }
    assert!(
        reused() >= physical + 2.0,
        "the shared scans' plan was not kept"
    );
    // DataFusion's own join filters, where Quarry's build keys do not
    // reach (a shared subplan builds both joins, as in TPC-H Q15): one in
    // nation's scan, one in a filter above it. Each run's copy makes them
    // anew, so its scan is narrowed by its own run's keys: with the kept
    // plan's filter, which no join fills in, it would wait, then read all
    // 25 nations.
    let best = "WITH r AS (SELECT a, sum(b) AS s FROM t WHERE b > 0 GROUP BY a) \
                SELECT n_nationkey, n_name, s FROM nation, r \
                WHERE n_nationkey = r.a AND s = (SELECT max(s) FROM r) ORDER BY n_nationkey";
    let shown = pg.ok(&format!("EXPLAIN {best}"));
    assert!(
        shown.contains("join filters: 1") && shown.contains("FilterExec: DynamicFilter"),
        "{shown}"
    );
    for _ in 0..3 {
        assert_eq!(value(best), "6,FRANCE,60");
    }
    pg.ok("INSERT INTO t VALUES (7, 70)");
    let physical = reused();
    for _ in 0..3 {
        assert_eq!(value(best), "7,GERMANY,70");
    }
    assert!(
        reused() >= physical + 2.0,
        "Q15's shape was planned per run"
    );
    let (rows, physical) = (region_rows(), reused());
    assert_eq!(value(best), "7,GERMANY,70");
    assert_eq!(reused(), physical + 1.0);
    assert!(
        region_rows() - rows < 20.0,
        "nation's scan was not narrowed by its run's join filter: {} rows",
        region_rows() - rows
    );
    pg.ok("DELETE FROM t WHERE a >= 5");
    let (hits, misses) = (count("hit"), count("miss"));

    // Another table created: the kept plan does not read it.
    pg.ok("CREATE TABLE other (x BIGINT PRIMARY KEY)");
    assert_eq!(value(q), "100");
    assert_eq!((count("hit"), count("miss")), (hits + 1.0, misses));

    // The same name, another table: planned again, with the new type.
    pg.ok("DROP TABLE t");
    pg.ok("CREATE TABLE t (a BIGINT PRIMARY KEY, b DECIMAL(10, 2))");
    pg.ok("INSERT INTO t VALUES (1, 1.50), (2, 2.25)");
    assert_eq!(value(q), "3.75");
    assert_eq!((count("hit"), count("miss")), (hits + 1.0, misses + 1.0));
    warm("3.75");

    // now() is folded into a constant when optimized: never kept.
    let uncacheable = count("uncacheable");
    let first = value("SELECT CAST(now() AS VARCHAR) AS n");
    std::thread::sleep(Duration::from_millis(5));
    let second = value("SELECT CAST(now() AS VARCHAR) AS n");
    assert_ne!(first, second, "now() gave the same moment twice");
    assert_eq!(count("uncacheable"), uncacheable + 2.0);
}

/// Query shapes (`compute/src/df/literal_shape.rs`): statements that
/// differ only in the constants their WHERE clause compares columns with
/// share one kept plan, and each answers for its own values, through an
/// index, a primary key, an IN list or a string; a constant whose type is
/// not its column's (a string against a DATE) is planned with its literal
/// and answers as before.
#[test]
fn queries_differing_only_in_their_constants_share_one_plan_and_answer_for_their_own() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "1", "--sf", "0.01", "--tables", "nation"]);
    let compute_url = pg.status_urls.last().unwrap().clone();
    let reused = || {
        let (_, page) = get(&compute_url, "/metrics");
        sample(&page, "quarry_compute_physical_plans_reused_total")
    };
    let value = |sql: &str| pg.ok(sql).lines().skip(1).collect::<Vec<_>>().join(";");

    pg.ok("CREATE TABLE s (id BIGINT PRIMARY KEY, k BIGINT, name VARCHAR, d DATE)");
    let rows: Vec<String> = (1..=200)
        .map(|i| {
            format!(
                "({i}, {}, 'n{}', DATE '2020-01-0{}')",
                i % 10,
                i % 7,
                1 + i % 5
            )
        })
        .collect();
    pg.ok(&format!("INSERT INTO s VALUES {}", rows.join(", ")));
    pg.ok("CREATE INDEX s_k ON s (k)");

    // Through the index: each k's own rows, from one plan after the first
    // two (a shape is kept the second time it is planned).
    let before = reused();
    for k in 0..10i64 {
        let ids: Vec<i64> = (1..=200).filter(|i| i % 10 == k).collect();
        let want = format!("{},{}", ids.len(), ids.iter().sum::<i64>());
        let q = format!("SELECT count(*) AS n, sum(id) AS s FROM s WHERE k = {k}");
        assert_eq!(value(&q), want, "{q}");
    }
    assert!(
        reused() >= before + 7.0,
        "lookups by k were not run from one kept plan: {} reuses",
        reused() - before
    );
    // The primary key, a range, an IN list and a string, each twice over
    // with other values.
    for round in 0..3i64 {
        let id = 17 + round * 50;
        assert_eq!(
            value(&format!("SELECT id, k FROM s WHERE id = {id}")),
            format!("{id},{}", id % 10)
        );
        let (lo, hi) = (round * 60, round * 60 + 9);
        assert_eq!(
            value(&format!(
                "SELECT count(*) AS n FROM s WHERE id BETWEEN {lo} AND {hi}"
            )),
            format!("{}", (lo.max(1)..=hi).count())
        );
        let (a, b) = (round, round + 3);
        let n = (1..=200).filter(|i| i % 10 == a || i % 10 == b).count();
        assert_eq!(
            value(&format!(
                "SELECT count(*) AS n FROM s WHERE k IN ({a}, {b}) AND id > 0"
            )),
            n.to_string()
        );
        let name = format!("n{}", round + 2);
        let n = (1..=200).filter(|i| i % 7 == round + 2).count();
        assert_eq!(
            value(&format!(
                "SELECT count(*) AS n FROM s WHERE name = '{name}'"
            )),
            n.to_string()
        );
        // A string compared with a DATE: not the placeholder's type, so
        // planned with the literal (cast to a date), as before.
        let day = format!("2020-01-0{}", round + 2);
        let n = (1..=200).filter(|i| i % 5 == round + 1).count();
        assert_eq!(
            value(&format!("SELECT count(*) AS n FROM s WHERE d = '{day}'")),
            n.to_string()
        );
    }
    assert_eq!(value("SELECT count(*) AS n FROM s WHERE name = 'n3'"), "29");
}

/// A query whose memory pool held 64 MiB or more hands the process's free
/// memory back as it ends (`compute/src/df/memory_release.rs`): compute's
/// anonymous memory falls back within moments instead of staying for the
/// allocator's purge delay (10 s), and
/// `quarry_compute_memory_releases_total` counts it. A small query does
/// not ask, and with the failpoint `memory_release_off` the memory stays.
#[test]
fn a_big_query_hands_its_memory_back_to_the_kernel_when_it_ends() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "1", "--sf", "0.01", "--tables", "nation"]);
    let url = pg.status_urls[1].clone();
    let releases = || {
        sample(
            &get(&url, "/metrics").1,
            "quarry_compute_memory_releases_total",
        )
    };
    let anon_mb = || quarry::bench::status_bytes(pg.compute_pid, "RssAnon").unwrap() >> 20;
    // Three million groups: the aggregation's pool holds well over 64 MiB.
    let big = "SELECT count(*) FROM (SELECT x % 3000000 AS k, count(*) \
               FROM generate_series(1, 6000000) AS t(x) GROUP BY 1)";

    assert!(pg.ok("SELECT count(*) FROM nation").contains("25"));
    assert_eq!(releases(), 0.0, "a small query asks for no release");

    assert_eq!(
        http(&url, "PUT", "/fail/memory_release_off", "return").0,
        200
    );
    assert!(pg.ok(big).contains("3000000"));
    std::thread::sleep(Duration::from_millis(500));
    let kept = anon_mb();
    assert_eq!(releases(), 0.0, "the failpoint stops the ask");
    assert!(
        kept >= 96,
        "{kept} MB of anonymous memory after the big query without a release"
    );

    assert_eq!(http(&url, "DELETE", "/fail/memory_release_off", "").0, 200);
    assert!(pg.ok(big).contains("3000000"));
    assert_eq!(releases(), 1.0);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = anon_mb();
        if now * 2 < kept {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "compute still holds {now} MB of anonymous memory 5 s after a big query \
             (it held {kept} MB without the release)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
