//! Faults injected into real processes through their failpoints
//! (`quarry_proto::failpoint`, switched on over each process's status port
//! with `PUT /fail/NAME`), and what a user sees of each:
//! * a store whose raft persist or apply fails stops (the cluster goes on,
//!   every acknowledged row stays), and restarted it catches up;
//! * a store cut off from its peers' raft messages loses its leaderships,
//!   the others go on, and after the heal nothing acknowledged is missing;
//! * coprocessor faults (a full read pool, a passed deadline, a failed
//!   seek) are retried or answered with an error that names them, for
//!   scans and for an index lookup's single-row reads alike;
//! * a failed meta write fails its DDL cleanly and takes no name; a
//!   refused split leaves the region whole and every answer unchanged; a
//!   split whose report to meta fails is reported again; a CREATE TABLE
//!   whose commit is lost after its peers were made is retried, and the
//!   lost try's peers are destroyed.
//!
//! The snapshot points are tested in the in-process cluster
//! (`raftstore/tests/cluster/failpoints.rs`).

#![cfg(feature = "failpoints")]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use quarry_client::Client;
use quarry_proto::meta::admin_client::AdminClient;
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::{GetRegionsRequest, SplitRegionRequest, StatusResponse};

/// The error `q` fails with while failpoint `name` fires on every store.
fn error_while(pg: &Playground, name: &str, q: &str) -> String {
    on_every_store(pg, name, Some("return"));
    let e = pg.fails(q);
    on_every_store(pg, name, None);
    e
}

fn wait_dead(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Acknowledged and failed INSERT batches of table `acked`.
#[derive(Default)]
struct Writes {
    acked: BTreeSet<i64>,
    failed: BTreeSet<i64>,
    /// When each batch was acknowledged.
    acked_at: Vec<Instant>,
    /// Each batch's start, time taken and error, for failure messages.
    log: Vec<(Instant, Duration, Option<String>)>,
}

/// Inserts batches of 20 rows (id, id * 7 + 3) from `first_batch` on,
/// each batch over all three regions of `acked` (one transaction), one
/// every 20 ms or so, until `stop` is set, `max` batches or 90 s.
fn writer(
    compute: String,
    first_batch: i64,
    max: i64,
    writes: Arc<Mutex<Writes>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        runtime().block_on(async {
            let mut c = Client::connect(&compute).await.unwrap();
            let t0 = Instant::now();
            for batch in first_batch..first_batch + max {
                if stop.load(Ordering::SeqCst) || t0.elapsed() > Duration::from_secs(90) {
                    break;
                }
                let ids: Vec<i64> = (0..20)
                    .map(|i| (i % 3) * 100_000 + batch * 20 + i)
                    .collect();
                let values: Vec<String> = ids
                    .iter()
                    .map(|id| format!("({id}, {})", id * 7 + 3))
                    .collect();
                let sql = format!("INSERT INTO acked VALUES {}", values.join(", "));
                let started = Instant::now();
                let r = c.sql(&sql).await;
                let ok = r.is_ok();
                {
                    let mut w = writes.lock().unwrap();
                    w.log
                        .push((started, started.elapsed(), r.err().map(|e| e.to_string())));
                    if ok {
                        w.acked.extend(ids);
                        w.acked_at.push(Instant::now());
                    } else {
                        w.failed.extend(ids);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    })
}

/// Every acknowledged row is present with its value, and nothing is
/// present that no INSERT wrote.
fn check_rows(pg: &Playground, w: &Writes) {
    let rows = acked_rows(pg);
    for id in &w.acked {
        assert_eq!(rows.get(id), Some(&(id * 7 + 3)), "acknowledged row {id}");
    }
    for (id, v) in &rows {
        assert!(
            w.acked.contains(id) || w.failed.contains(id),
            "row {id} was never written"
        );
        assert_eq!(*v, id * 7 + 3, "row {id}");
    }
}

fn acked_table(pg: &Playground) {
    pg.ok("CREATE TABLE acked (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '100000,200000')");
}

#[test]
fn a_store_whose_persist_or_apply_fails_stops_and_catches_up_after_a_restart() {
    let _serial = SERIAL.lock();
    let mut pg = Playground::start(&[
        "--stores",
        "3",
        "--tables",
        "region",
        "--restart-delay-ms",
        "600000",
    ]);
    acked_table(&pg);
    let writes: Arc<Mutex<Writes>> = Arc::default();
    let points = [
        "raft_before_persist",
        "raft_after_persist",
        "apply_before",
        "apply_read_error",
    ];
    for (i, point) in points.iter().enumerate() {
        let victim = i % 3;
        let (pid, _) = pg.stores[victim];
        failpoint(&pg.status_urls[victim], point, Some("return"));
        // Writes go on while the store stops: they need two of three.
        let stop = Arc::new(AtomicBool::new(false));
        let w = writer(
            pg.compute.clone(),
            i as i64 * 1000,
            40,
            writes.clone(),
            stop.clone(),
        );
        let died = wait_dead(pid, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::SeqCst);
        w.join().unwrap();
        assert!(died, "{point}: store {} did not stop", victim + 1);
        // Its log says why it stopped.
        let n = victim + 1;
        let log = pg.log_lines(&format!("injected fault at failpoint {point}"));
        assert!(
            log.contains(&format!("store-{n}: fatal: store {n} stopped")),
            "{point}: the store's log names the fault:\n{log}"
        );
        // What was acknowledged is there while the store is down, and
        // after it restarted and caught up.
        check_rows(&pg, &writes.lock().unwrap());
        pg.restart_children();
        pg.wait_line(&format!("storage {}:", victim + 1), Duration::from_secs(60));
        wait_caught_up(&pg, Duration::from_secs(60));
        check_rows(&pg, &writes.lock().unwrap());
    }
    let w = writes.lock().unwrap();
    assert!(
        w.acked.len() >= w.failed.len(),
        "most batches succeed while one store fails: {} acked, {} failed",
        w.acked.len(),
        w.failed.len()
    );
}

#[test]
fn a_leader_cut_off_from_its_peers_is_replaced_and_loses_nothing_after_the_heal() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--tables", "region"]);
    acked_table(&pg);
    let writes: Arc<Mutex<Writes>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(pg.compute.clone(), 0, 2000, writes.clone(), stop.clone());
    while writes.lock().unwrap().acked_at.len() < 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The store leading the most regions (the meta region among them,
    // perhaps) loses every raft message in and out for 8 s.
    let all = statuses(&pg.store_addrs());
    let victim = all
        .iter()
        .max_by_key(|s| s.regions.iter().filter(|r| r.is_leader).count())
        .unwrap()
        .store_id as usize
        - 1;
    failpoint(&pg.status_urls[victim], "raft_isolate", Some("return"));
    let cut = Instant::now();
    std::thread::sleep(Duration::from_secs(6));
    // Check-quorum: cut off, it stepped down everywhere.
    let leads = |s: &StatusResponse| s.regions.iter().filter(|r| r.is_leader).count();
    let led_while_cut = statuses(&[pg.store_addrs()[victim].clone()])
        .first()
        .map(leads);
    std::thread::sleep(Duration::from_secs(2));
    failpoint(&pg.status_urls[victim], "raft_isolate", None);
    let healed = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    w.join().unwrap();
    let w = writes.lock().unwrap();
    // The majority went on while the leader was cut off.
    let during = w
        .acked_at
        .iter()
        .filter(|t| **t > cut + Duration::from_secs(4) && **t < healed)
        .count();
    let log: Vec<String> = w
        .log
        .iter()
        .map(|(t, took, e)| {
            let at = t.saturating_duration_since(cut).as_secs_f64()
                - cut.saturating_duration_since(*t).as_secs_f64();
            format!("{at:+.2}s took {took:.2?}: {e:?}")
        })
        .collect();
    assert!(
        during > 0,
        "no write was acknowledged while the leader was cut off (healed at +{:.1}s):\n{}",
        healed.duration_since(cut).as_secs_f64(),
        log.join("\n")
    );
    let longest = w
        .log
        .iter()
        .map(|(_, took, _)| *took)
        .max()
        .unwrap_or_default();
    eprintln!(
        "cut off for {:.1}s: {during} batches acknowledged from 4 s after the cut to the heal, \
         {} in all, {} failed; the longest took {longest:.2?}",
        healed.duration_since(cut).as_secs_f64(),
        w.acked_at.len(),
        w.log.iter().filter(|(_, _, e)| e.is_some()).count()
    );
    assert_eq!(led_while_cut, Some(0), "the cut-off store still leads");
    // The cut-off store catches up, and every acknowledged row is there.
    wait_caught_up(&pg, Duration::from_secs(60));
    check_rows(&pg, &w);
}

#[test]
fn coprocessor_faults_are_retried_or_answered_with_an_error_naming_them() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--tables",
        "nation",
        "--query-timeout-ms",
        "4000",
    ]);
    let q = "SELECT count(*), sum(n_nationkey) FROM nation";
    let want = "count(*),sum(nation.n_nationkey)\n25,300\n";
    assert_eq!(pg.ok(q), want);

    // A store busy twice: compute backs off and retries.
    on_every_store(&pg, "read_pool_full", Some("2*return"));
    assert_eq!(pg.ok(q), want);
    // Busy for good: the query ends within its deadline, saying why.
    on_every_store(&pg, "read_pool_full", Some("return"));
    let t0 = Instant::now();
    let e = pg.fails(q);
    assert!(
        e.contains("deadline exceeded") && e.contains("coprocessor requests pending"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    on_every_store(&pg, "read_pool_full", None);

    // A task past its deadline.
    let e = error_while(&pg, "coprocessor_deadline", q);
    assert!(e.contains("deadline"), "{e}");

    // A disk error under a scan.
    let e = error_while(&pg, "region_seek_error", q);
    assert!(
        e.contains("injected fault at failpoint region_seek_error"),
        "{e}"
    );

    assert_eq!(pg.ok(q), want);
}

/// An index lookup reads single rows in many regions, which each store
/// reads as one group (`raftstore/src/node/coprocessor.rs`): a store that
/// refuses some of a group's rows fails only those, which compute asks for
/// again, and the answer stays exact.
#[test]
fn an_index_lookup_whose_rows_a_store_refuses_in_part_is_retried_and_stays_exact() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--query-timeout-ms", "4000"]);
    pg.ok(
        "CREATE TABLE acct (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT) \
         WITH (split_handles = '100,200,300,400,500,600,700,800,900')",
    );
    let values: Vec<String> = (0..1000)
        .map(|i| format!("({i}, {}, {})", i % 50, i * 3))
        .collect();
    pg.ok(&format!("INSERT INTO acct VALUES {}", values.join(", ")));
    let q = "SELECT count(*) AS n, sum(v) AS s FROM acct WHERE k = 7";
    // Rows 7, 57, …, 957: two in each of the ten regions.
    let want = "n,s\n20,28920\n";
    assert_eq!(pg.ok(q), want);
    pg.ok("CREATE INDEX acct_k ON acct (k)");
    let plan = pg.ok(&format!("EXPLAIN ANALYZE {q}"));
    assert!(plan.contains("index lookup: acct_k (k = 7)"), "{plan}");
    assert!(
        plan.contains("ran: 10 region requests, 0 retries"),
        "{plan}"
    );
    assert_eq!(pg.ok(q), want);

    // Each store refuses its first two rows' regions: those are asked for
    // again, the others' answers kept.
    on_every_store(&pg, "read_pool_full", Some("2*return"));
    let plan = pg.ok(&format!("EXPLAIN ANALYZE {q}"));
    assert!(plan.contains("index lookup: acct_k"), "{plan}");
    assert!(!plan.contains(" 0 retries"), "{plan}");
    on_every_store(&pg, "read_pool_full", Some("2*return"));
    assert_eq!(pg.ok(q), want);
    on_every_store(&pg, "read_pool_full", None);

    // A failed read under the lookup is the query's error.
    let e = error_while(&pg, "region_seek_error", q);
    assert!(
        e.contains("injected fault at failpoint region_seek_error"),
        "{e}"
    );
    assert_eq!(pg.ok(q), want);
}

/// Every region peer on every store (leaders and followers); every store
/// must answer.
fn peers(pg: &Playground) -> usize {
    let all = statuses(&pg.store_addrs());
    assert_eq!(all.len(), pg.stores.len(), "a store did not answer");
    all.iter().map(|s| s.regions.len()).sum()
}

#[test]
fn a_create_table_whose_commit_is_lost_leaves_no_peers_behind() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01", "--tables", "nation"]);
    let before = peers(&pg);
    let create = |name: &str| {
        format!("CREATE TABLE {name} (id BIGINT PRIMARY KEY, v BIGINT) WITH (split_handles = '10,20,30')")
    };
    // The meta leader makes the 4 regions' 12 peers, then its commit is
    // overtaken by a leader change and lost (StaleCommand): compute
    // retries with the same request id and the second try makes 12 more.
    on_every_store(&pg, "meta_create_lost", Some("1*return"));
    assert_eq!(pg.ok(&create("t")), "result\nCREATE TABLE (4 regions)\n");
    on_every_store(&pg, "meta_create_lost", None);
    // Here the commit applies and its answer is lost: the retry finds its
    // own table, and makes no peers.
    on_every_store(&pg, "meta_create_unanswered", Some("1*return"));
    assert_eq!(pg.ok(&create("u")), "result\nCREATE TABLE (4 regions)\n");
    on_every_store(&pg, "meta_create_unanswered", None);
    for t in ["t", "u"] {
        pg.ok(&format!("INSERT INTO {t} VALUES (5, 1), (25, 2), (35, 4)"));
    }
    let sums = "SELECT (SELECT sum(v) FROM t) AS t, (SELECT sum(v) FROM u) AS u";
    assert_eq!(pg.ok(sums), "t,u\n7,7\n");
    // The lost try's regions stay pending for 30 s, then their peers go;
    // the two tables' 24 stay.
    let t0 = Instant::now();
    while peers(&pg) != before + 24 && t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(peers(&pg), before + 24, "the lost try's peers stayed");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(peers(&pg), before + 24);
    assert_eq!(pg.ok(sums), "t,u\n7,7\n");
    pg.ok("DROP TABLE t");
    pg.ok("DROP TABLE u");
    let t0 = Instant::now();
    while peers(&pg) != before && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(peers(&pg), before);
}

#[test]
fn a_failed_meta_write_takes_no_name_and_a_refused_split_changes_no_answer() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01", "--tables", "nation"]);
    on_every_store(&pg, "meta_write", Some("return"));
    let e = pg.fails("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)");
    assert!(e.contains("injected fault at failpoint meta_write"), "{e}");
    on_every_store(&pg, "meta_write", None);
    assert!(!pg.ok("SHOW TABLES").contains("\nt\n"));
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)");
    pg.ok("INSERT INTO t VALUES (1, 10), (2, 20)");
    assert_eq!(pg.ok("SELECT sum(v) FROM t"), "sum(t.v)\n30\n");

    // Splitting nation's region: refused while split_propose is on, done
    // after; the answer is the same throughout.
    let q = "SELECT n_regionkey, count(*) FROM nation GROUP BY n_regionkey ORDER BY n_regionkey";
    let want = pg.ok(q);
    assert_eq!(want, "n_regionkey,count(*)\n0,5\n1,5\n2,5\n3,5\n4,5\n");
    // Splits the first region (not meta's) with rows enough to split.
    let split = |pg: &Playground| -> Result<(), String> {
        let addrs = pg.store_addrs();
        let mut last = Err("no region to split".to_string());
        for s in statuses(&addrs) {
            for r in s.regions.iter().filter(|r| r.is_leader) {
                let region = r.region.clone().unwrap();
                if region.id == 1 {
                    continue;
                }
                let addr = addrs[s.store_id as usize - 1].clone();
                last = runtime().block_on(async move {
                    let mut c = AdminClient::connect(format!("http://{addr}"))
                        .await
                        .unwrap();
                    c.split_region(SplitRegionRequest {
                        region_id: region.id,
                        epoch: region.epoch,
                        split_key: vec![],
                    })
                    .await
                    .map(|_| ())
                    .map_err(|e| e.message().to_string())
                });
                match &last {
                    Err(e) if e.contains("too small to split") => {}
                    _ => return last,
                }
            }
        }
        last
    };
    let regions = |pg: &Playground| -> usize {
        statuses(&pg.store_addrs())
            .iter()
            .map(|s| s.regions.iter().filter(|r| r.is_leader).count())
            .sum()
    };
    let before = regions(&pg);
    on_every_store(&pg, "split_propose", Some("return"));
    let e = split(&pg).unwrap_err();
    assert!(
        e.contains("injected fault at failpoint split_propose"),
        "{e}"
    );
    assert_eq!(regions(&pg), before);
    assert_eq!(pg.ok(q), want);
    on_every_store(&pg, "split_propose", None);
    split(&pg).unwrap();
    // The new half elects its leader within moments.
    let t0 = Instant::now();
    while regions(&pg) < before + 1 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(regions(&pg), before + 1);
    assert_eq!(pg.ok(q), want);

    // A split whose report to meta fails once (issue 45: it was never
    // retried, and meta routed the part that moved out to the old region
    // for good): the store retries it, and meta's directory gets the new
    // region within moments.
    let in_meta = |pg: &Playground| -> usize {
        let addr = pg.store_addrs()[0].clone();
        runtime().block_on(async move {
            let mut m = MetaClient::connect(format!("http://{addr}")).await.unwrap();
            m.get_regions(GetRegionsRequest {
                start_key: vec![],
                end_key: vec![0xff; 16],
            })
            .await
            .unwrap()
            .into_inner()
            .regions
            .len()
        })
    };
    let listed = in_meta(&pg);
    on_every_store(&pg, "split_report", Some("1*return"));
    split(&pg).unwrap();
    let t0 = Instant::now();
    while in_meta(&pg) < listed + 1 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(in_meta(&pg), listed + 1, "the split never reached meta");
    on_every_store(&pg, "split_report", None);
    assert_eq!(pg.ok(q), want);
}
