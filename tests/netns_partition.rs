//! Partitions of real processes by the network itself: each storage
//! process runs in its own network namespace, joined to the others and to
//! compute (in the test's namespace) by a bridge, as three machines on one
//! switch would be. Cutting a store's link drops every packet to and from
//! it without a word (no reset, no refused connection), which is what a
//! pulled cable or a dead switch port does; the raft-level failpoint
//! (`tests/failpoints.rs`) cannot do that to compute's connections.
//!
//! The network is `quarry::netns::Net`, which `quarry chaos --netns`
//! partitions with too. The test needs root (or CAP_NET_ADMIN) and `ip`
//! from iproute2. Where the machine does not allow network namespaces it
//! says so and passes; `QUARRY_REQUIRE_NETNS=1` makes that a failure
//! instead.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quarry::netns::Net;
use quarry_client::Client;

/// A child process, killed on drop.
struct Proc {
    child: Child,
    addr: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program args`, its log in `log`; waits for "listening on ADDR".
fn start(program: &str, args: &[String], log: &std::path::Path) -> Proc {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Killed on drop from here on, if it fails to start too.
    let mut proc = Proc {
        child,
        addr: String::new(),
    };
    let mut lines = BufReader::new(proc.child.stdout.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("listening on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    proc.addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            panic!(
                "{args:?} did not start: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    proc
}

/// Per-region leaders, as the reachable stores report them: store id →
/// how many regions it leads.
fn leaders(addrs: &[String]) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for s in statuses(addrs) {
        let led = s.regions.iter().filter(|r| r.is_leader).count();
        out.insert(s.store_id, led);
    }
    out
}

/// What one INSERT of the writer got.
struct Outcome {
    batch: i64,
    started: Instant,
    took: Duration,
    error: Option<String>,
}

/// The table's rows: three regions, each batch one row in each.
const SPLIT: i64 = 1_000_000;

fn batch_sql(b: i64) -> String {
    let rows: Vec<String> = (0..3)
        .map(|r| format!("({}, {})", r * SPLIT + b, b * 7 + 3))
        .collect();
    format!("INSERT INTO acked VALUES {}", rows.join(", "))
}

/// Inserts batches through compute until `stop` (at most 5,000 batches or
/// three minutes).
fn writer(url: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Outcome>> {
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut c = Client::connect(&url).await.unwrap();
            let t0 = Instant::now();
            let mut out = Vec::new();
            for b in 0..5_000 {
                if stop.load(Ordering::SeqCst) || t0.elapsed() > Duration::from_secs(180) {
                    break;
                }
                let started = Instant::now();
                let r = c.sql(&batch_sql(b)).await;
                out.push(Outcome {
                    batch: b,
                    started,
                    took: started.elapsed(),
                    error: r.err().map(|e| e.to_string()),
                });
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            out
        })
    })
}

#[test]
fn stores_cut_off_by_the_network_lose_no_acknowledged_write() {
    let _serial = SERIAL.lock();
    let mut net = match Net::new(3) {
        Ok(n) => n,
        Err(e) if std::env::var_os("QUARRY_REQUIRE_NETNS").is_none() => {
            eprintln!("skipped: this machine does not allow network namespaces ({e:#})");
            return;
        }
        Err(e) => panic!("QUARRY_REQUIRE_NETNS is set and {e:#}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut stores: Vec<Proc> = Vec::new();
    for n in 1..=3 {
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            net.namespace(n),
            QUARRY.into(),
            "storage".into(),
            "--store-id".into(),
            n.to_string(),
            "--addr".into(),
            format!("{}:0", net.addr(n)),
            "--data-dir".into(),
            dir.path().join(format!("store-{n}")).display().to_string(),
            "--replicas".into(),
            "3".into(),
            "--block-cache-mb".into(),
            "64".into(),
            // Not loopback: plaintext must be asked for.
            "--insecure".into(),
        ];
        if let Some(first) = stores.first() {
            args.extend(["--join".to_string(), first.addr.clone()]);
        }
        let log = dir.path().join(format!("store-{n}.log"));
        stores.push(start("ip", &args, &log));
    }
    let addrs: Vec<String> = stores.iter().map(|s| s.addr.clone()).collect();
    let compute = start(
        QUARRY,
        &[
            "compute".into(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--stores".into(),
            addrs.join(","),
        ],
        &dir.path().join("compute.log"),
    );
    let url = format!("http://{}", compute.addr);
    let sql = |text: &str| -> Result<String, String> {
        let out = Command::new(QUARRY)
            .args(["sql", "--addr", &url, "--format", "csv", text])
            .output()
            .unwrap();
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    };
    // The meta region has its three replicas before anything is cut.
    let t0 = Instant::now();
    let meta_replicated = |all: Vec<quarry_proto::meta::StatusResponse>| {
        all.len() == 3
            && all.iter().all(|s| {
                s.regions.iter().any(|r| {
                    r.region
                        .as_ref()
                        .is_some_and(|g| g.id == 1 && g.peers.len() == 3)
                })
            })
    };
    while !meta_replicated(statuses(&addrs)) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "meta not replicated"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    sql(&format!(
        "CREATE TABLE acked (id BIGINT PRIMARY KEY, v BIGINT) WITH (split_handles = '{},{}')",
        SPLIT,
        2 * SPLIT
    ))
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(url.clone(), stop.clone());
    std::thread::sleep(Duration::from_secs(3));

    // 1. The store leading the most regions loses its link for 10 s.
    let led = leaders(&addrs);
    let (&victim, &count) = led.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(count > 0, "no store leads anything: {led:?}");
    let cut_at = Instant::now();
    net.cut(victim as usize).unwrap();
    std::thread::sleep(Duration::from_secs(10));
    // The others lead every region now (the cut store cannot be asked).
    let others: Vec<String> = (1..=3)
        .filter(|&n| n != victim as usize)
        .map(|n| addrs[n - 1].clone())
        .collect();
    let led_by_others: usize = leaders(&others).values().sum();
    let regions: std::collections::HashSet<u64> = statuses(&others)
        .iter()
        .flat_map(|s| &s.regions)
        .filter_map(|r| r.region.as_ref().map(|g| g.id))
        .collect();
    net.heal(victim as usize).unwrap();
    let healed_at = Instant::now();
    std::thread::sleep(Duration::from_secs(4));

    // 2. Compute loses its route to the store leading the most regions
    // now; the stores still reach it.
    let led = leaders(&addrs);
    let (&far, _) = led.iter().max_by_key(|(_, n)| **n).unwrap();
    let far_at = Instant::now();
    net.drop_packets(None, far as usize).unwrap();
    std::thread::sleep(Duration::from_secs(6));
    net.heal_routes().unwrap();
    let far_healed_at = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::SeqCst);
    let outcomes = writing.join().unwrap();

    // What the writer saw.
    let acked_within = |from: Instant, to: Instant| {
        outcomes
            .iter()
            .filter(|o| o.error.is_none() && o.started >= from && o.started < to)
            .count()
    };
    let acked: Vec<i64> = outcomes
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.batch)
        .collect();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_some()).collect();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    eprintln!(
        "batches: {} sent, {} acknowledged ({} while store {victim} was cut off, {} while \
         compute could not reach store {far}), {} failed, slowest {slowest:?}; \
         {led_by_others} regions led by the other two during the cut",
        outcomes.len(),
        acked.len(),
        acked_within(cut_at, healed_at),
        acked_within(far_at, far_healed_at),
        failed.len(),
    );
    for o in outcomes
        .iter()
        .filter(|o| o.took > Duration::from_millis(500))
    {
        eprintln!(
            "batch {} started {:?} after the cut took {:?}",
            o.batch,
            o.started.saturating_duration_since(cut_at),
            o.took
        );
    }
    for o in &failed {
        eprintln!(
            "batch {} failed after {:?}: {}",
            o.batch,
            o.took,
            o.error.as_ref().unwrap()
        );
        // A failure names what happened to it; nothing is internal.
        let e = o.error.as_ref().unwrap();
        assert!(!e.contains("internal"), "{e}");
    }
    assert!(
        acked_within(cut_at + Duration::from_secs(3), healed_at) > 0,
        "nothing was acknowledged while store {victim} was cut off"
    );
    assert_eq!(
        led_by_others,
        regions.len(),
        "regions left leaderless by the cut"
    );
    assert!(
        acked_within(far_healed_at, Instant::now()) > 0,
        "writes did not resume"
    );
    // No statement hung: the longest a write may take is its timeout (60 s
    // by default), its primary commit's grace (5 s) and a rollback (5 s).
    assert!(
        slowest < Duration::from_secs(75),
        "a statement took {slowest:?}"
    );

    // Every acknowledged batch is there, whole; a failed one is there
    // whole or not at all (its outcome may have been unknown).
    let rows = sql("SELECT id, v FROM acked ORDER BY id").unwrap();
    let mut present: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for line in rows.lines().skip(1) {
        let (id, v) = line.split_once(',').unwrap();
        let (id, v): (i64, i64) = (id.parse().unwrap(), v.parse().unwrap());
        present.entry(id % SPLIT).or_default().push((id, v));
    }
    for b in &acked {
        assert_eq!(
            present.get(b).map(Vec::len),
            Some(3),
            "acknowledged batch {b} is not all there"
        );
    }
    let sent: std::collections::HashSet<i64> = outcomes.iter().map(|o| o.batch).collect();
    for (b, rows) in &present {
        assert!(sent.contains(b), "batch {b} was never sent");
        assert_eq!(rows.len(), 3, "batch {b} is there in part: {rows:?}");
        assert!(rows.iter().all(|&(_, v)| v == b * 7 + 3), "{rows:?}");
    }

    // The cut-off store catches up once it is back.
    let t0 = Instant::now();
    loop {
        let all = statuses(&addrs);
        if all.len() == 3 && !quarry::status::followers_behind(&all) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "replicas did not catch up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(compute);
    drop(stores);
}
