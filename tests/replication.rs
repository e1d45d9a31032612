//! Replication against real processes: 3 storage processes each holding a
//! replica of every region, killed and restarted under load and queries.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use quarry::tpch;
use quarry_client::Client;
use quarry_proto::meta::admin_client::AdminClient;
use quarry_proto::meta::SplitRegionRequest;

/// (store index, number of regions it leads), most leaders first.
fn leaders(pg: &Playground) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = statuses(&pg.store_addrs())
        .iter()
        .map(|s| {
            let n = s.regions.iter().filter(|r| r.is_leader).count();
            (s.store_id as usize - 1, n)
        })
        .collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v
}

fn q1_q6_match(pg: &Playground) {
    assert_csv_matches(&pg.ok(tpch::Q1), tpch::expected("q1", 0.01).unwrap());
    assert_csv_matches(&pg.ok(tpch::Q6), tpch::expected("q6", 0.01).unwrap());
}

#[test]
fn killing_a_store_during_a_load_loses_no_acknowledged_row() {
    let _serial = SERIAL.lock();
    let mut pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--restart-delay-ms",
        "600000",
    ]);
    pg.ok("CREATE TABLE acked (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (split_handles = '2000,4000,6000')");

    // A bounded load: 80 INSERTs of 100 rows, at most 90 s; each batch is
    // either acknowledged or reported failed.
    let acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let started = Arc::new(AtomicBool::new(false));
    let compute = pg.compute.clone();
    let loader = {
        let (acked, started) = (acked.clone(), started.clone());
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                let t0 = Instant::now();
                for batch in 0..80i64 {
                    if t0.elapsed() > Duration::from_secs(90) {
                        break;
                    }
                    let ids: Vec<i64> = (0..100).map(|i| batch * 100 + i).collect();
                    let values: Vec<String> = ids
                        .iter()
                        .map(|id| format!("({id}, {})", id * 7 + 3))
                        .collect();
                    let sql = format!("INSERT INTO acked VALUES {}", values.join(", "));
                    if c.sql(&sql).await.is_ok() {
                        acked.lock().unwrap().extend(ids);
                    }
                    started.store(true, Ordering::SeqCst);
                }
            })
        })
    };
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (victim, _) = pg.stores[1].clone();
    signal(victim, "KILL");
    // While it is down, answers stay right.
    q1_q6_match(&pg);
    loader.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 4000,
        "most batches should succeed, got {} rows",
        acked.len()
    );

    let check = |pg: &Playground| {
        let rows = acked_rows(pg);
        for id in &acked {
            assert_eq!(rows.get(id), Some(&(id * 7 + 3)), "acknowledged row {id}");
        }
        let n = acked.len() as i64;
        let sum: i64 = acked.iter().map(|id| id * 7 + 3).sum();
        let got_sum: i64 = acked.iter().map(|id| rows[id]).sum();
        assert_eq!(
            (
                acked.iter().filter(|id| rows.contains_key(id)).count() as i64,
                got_sum
            ),
            (n, sum)
        );
        rows
    };
    let before = check(&pg);

    // Restart it: it catches up, and every answer is the same.
    pg.restart_children();
    pg.wait_line("storage 2:", Duration::from_secs(60));
    wait_caught_up(&pg, Duration::from_secs(60));
    assert_eq!(check(&pg), before);
    q1_q6_match(&pg);
}

#[test]
fn a_killed_leader_is_replaced_within_ten_seconds() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--restart-delay-ms",
        "600000",
    ]);
    let (busiest, n) = leaders(&pg)[0];
    assert!(n > 0);
    let (pid, _) = pg.stores[busiest].clone();
    let want = tpch::expected("q6", 0.01).unwrap();
    signal(pid, "KILL");
    let killed = Instant::now();
    let recovered = loop {
        let out = pg.sql("csv", tpch::Q6);
        if out.status.success() {
            assert_csv_matches(&String::from_utf8(out.stdout).unwrap(), want);
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no answer 30 s after the kill"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "answers resumed {recovered:?} after killing store {}",
        busiest + 1
    );
    assert!(recovered < Duration::from_secs(10), "took {recovered:?}");
    // And keep coming, correct.
    for _ in 0..3 {
        q1_q6_match(&pg);
    }
}

#[test]
fn two_of_three_down_fail_with_unavailable_within_the_deadline() {
    let _serial = SERIAL.lock();
    let mut pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--restart-delay-ms",
        "600000",
        "--query-timeout-ms",
        "4000",
    ]);
    signal(pg.stores[0].0, "KILL");
    signal(pg.stores[2].0, "KILL");
    let started = Instant::now();
    let err = pg.fails(tpch::Q6);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(err.contains("unavailable"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Bring them back: answers return.
    pg.restart_children();
    pg.wait_line("storage", Duration::from_secs(60));
    pg.wait_line("storage", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pg.sql("csv", tpch::Q6).status.success() {
        assert!(Instant::now() < deadline, "no answer after the restart");
        std::thread::sleep(Duration::from_millis(200));
    }
    q1_q6_match(&pg);
}

#[test]
fn a_hung_store_is_failed_over() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--query-timeout-ms",
        "20000",
    ]);
    let (busiest, _) = leaders(&pg)[0];
    let (pid, _) = pg.stores[busiest].clone();
    signal(pid, "STOP");
    let started = Instant::now();
    let out = pg.sql("csv", tpch::Q6);
    let took = started.elapsed();
    signal(pid, "CONT");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_csv_matches(
        &String::from_utf8(out.stdout).unwrap(),
        tpch::expected("q6", 0.01).unwrap(),
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn splits_during_a_query_loop_change_no_answer() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let addrs = pg.store_addrs();
    let regions_before: usize = statuses(&addrs)
        .iter()
        .map(|s| s.regions.iter().filter(|r| r.is_leader).count())
        .sum();
    // The splitter tries once on every leader region but the first; the
    // query loop keeps going until the splitter is done (at least 25
    // queries, at most two minutes), so every split lands mid-loop however
    // fast the queries are.
    let splitter = {
        let addrs = addrs.clone();
        std::thread::spawn(move || {
            let (mut splits, mut refused) = (0, Vec::new());
            for s in statuses(&addrs) {
                for r in s.regions.iter().filter(|r| r.is_leader) {
                    let region = r.region.clone().unwrap();
                    if region.id == 1 {
                        continue;
                    }
                    let addr = addrs[s.store_id as usize - 1].clone();
                    let result = runtime().block_on(async move {
                        let mut c = AdminClient::connect(format!("http://{addr}"))
                            .await
                            .unwrap();
                        c.split_region(SplitRegionRequest {
                            region_id: region.id,
                            epoch: region.epoch,
                            split_key: vec![],
                        })
                        .await
                    });
                    match result {
                        Ok(_) => splits += 1,
                        Err(e) => refused.push(format!("region {}: {}", region.id, e.message())),
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            (splits, refused)
        })
    };
    let q1 = tpch::expected("q1", 0.01).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let queries = runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut n = 0;
        while n < 25 || (!splitter.is_finished() && Instant::now() < deadline) {
            tpch::compare(&c.sql(tpch::Q1).await.unwrap(), q1).unwrap();
            n += 1;
        }
        n
    });
    let (splits, refused) = splitter.join().unwrap();
    eprintln!("{splits} splits during {queries} queries; refused: {refused:?}");
    assert!(
        splits >= 3,
        "only {splits} splits happened during {queries} queries; refused: {refused:?}"
    );
    // Every region has a leader again once the last split's new region
    // has elected one (it may still be electing when the splitter ends).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let regions_after: usize = statuses(&addrs)
            .iter()
            .map(|s| s.regions.iter().filter(|r| r.is_leader).count())
            .sum();
        if regions_after == regions_before + splits || Instant::now() > deadline {
            assert_eq!(regions_after, regions_before + splits);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    q1_q6_match(&pg);
}

#[test]
fn a_store_down_past_the_timeout_has_its_replicas_recreated() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "4",
        "--replicas",
        "3",
        "--sf",
        "0.01",
        "--restart-delay-ms",
        "600000",
        "--max-store-down-secs",
        "3",
    ]);
    let addrs = pg.store_addrs();
    // Kill a store that holds replicas (every store does, with 4 stores and
    // 3 replicas over 9 regions), but not store 1 (the join address).
    let victim = 2u64;
    signal(pg.stores[victim as usize - 1].0, "KILL");
    let live: Vec<String> = addrs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 + 1 != victim)
        .map(|(_, a)| a.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let all = statuses(&live);
        // Region id → the stores of its peers, as its leader sees them.
        let regions: BTreeMap<u64, Vec<u64>> = all
            .iter()
            .flat_map(|s| s.regions.iter().filter(|r| r.is_leader))
            .map(|r| {
                let region = r.region.as_ref().unwrap();
                assert!(
                    region.peers.len() <= 4,
                    "region {} has {} peers",
                    region.id,
                    region.peers.len()
                );
                let stores = region.peers.iter().map(|p| p.store_id).collect();
                (region.id, stores)
            })
            .collect();
        // The meta region and the TPC-H tables' regions (the loader makes
        // lineitem at least 4 per store), each with 3 replicas off the
        // victim.
        if regions.len() > 16
            && regions
                .values()
                .all(|stores| stores.len() == 3 && !stores.contains(&victim))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas were not moved off store {victim} (region → stores of its peers): {regions:?}\nstderr:\n{}\nlogs:\n{}",
            pg.stderr(),
            pg.log_lines("replica")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    q1_q6_match(&pg);
}

/// `count` timestamps from the oracle through `store` (any store forwards
/// to the meta leader): the first, or the error's text.
fn timestamps(store: &str, count: u32) -> Result<u64, String> {
    use quarry_proto::meta::meta_client::MetaClient;
    use quarry_proto::meta::GetTimestampsRequest;
    runtime().block_on(async {
        let mut c = MetaClient::connect(format!("http://{store}"))
            .await
            .map_err(|e| e.to_string())?;
        c.get_timestamps(GetTimestampsRequest { count })
            .await
            .map(|r| r.into_inner().first)
            .map_err(|e| e.to_string())
    })
}

/// The store index leading the meta region (region 1).
fn meta_leader(pg: &Playground) -> Option<usize> {
    statuses(&pg.store_addrs()).iter().find_map(|s| {
        s.regions
            .iter()
            .any(|r| r.is_leader && r.region.as_ref().is_some_and(|g| g.id == 1))
            .then(|| s.store_id as usize - 1)
    })
}

#[test]
fn timestamps_keep_increasing_across_a_killed_meta_leader_and_a_restart() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--restart-delay-ms", "600000"]);
    // Strictly increasing, batch after batch, from every store.
    let mut last = 0u64;
    for i in 0..60 {
        let store = &pg.stores[i % 3].1;
        let first = timestamps(store, 1 + i as u32 * 7).unwrap();
        assert!(first > last, "{first} after {last}");
        last = first + i as u64 * 7;
    }
    let bad = timestamps(&pg.stores[0].1, 0).unwrap_err();
    assert!(bad.contains("1 to 65536 timestamps, not 0"), "{bad}");
    // The meta leader dies: a new one starts above its high-water mark.
    let leader = meta_leader(&pg).expect("a meta leader");
    signal(pg.stores[leader].0, "KILL");
    let other = &pg.stores[(leader + 1) % 3].1;
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match timestamps(other, 1) {
            Ok(t) => break t,
            Err(e) => assert!(Instant::now() < deadline, "no timestamp 30 s on: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(first > last, "{first} after {last} (new meta leader)");
    last = first;
    // The whole cluster restarts on its data: still above.
    let pg = pg.restart(&["--stores", "3"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match timestamps(&pg.stores[0].1, 1) {
            Ok(t) => break t,
            Err(e) => assert!(Instant::now() < deadline, "no timestamp 30 s on: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(first > last, "{first} after {last} (restart)");
}
