//! Bulk load by SST ingest against a playground: `quarry load tpch
//! --write-path sst` gives TPC-H Q1 and Q6 exactly as DuckDB answers them,
//! while a concurrent reader sees only whole files; every store took
//! uploads and deleted them once ingested; the data survives a store's
//! kill -9; rows change afterwards as any rows do; and a load whose files
//! one replica's store cannot keep falls back to raft writes and loses
//! nothing.

mod common;

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_csv_matches, http, sample, signal, Playground, QUARRY, SERIAL};

/// Lineitem's rows at SF 0.01.
const LINEITEM_ROWS: u64 = 60175;

fn load_tpch(pg: &Playground, tables: &str, extra: &[&str]) -> Output {
    Command::new(QUARRY)
        .args([
            "load", "tpch", "--sf", "0.01", "--tables", tables, "--store",
        ])
        .arg(pg.store_addrs().join(","))
        .args(extra)
        .output()
        .expect("run quarry load")
}

fn metrics(url: &str) -> String {
    http(url, "GET", "/metrics", "").1
}

fn count(pg: &Playground, table: &str) -> u64 {
    let out = pg.ok(&format!("SELECT count(*) AS n FROM {table}"));
    out.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Files left in each store's import directory.
fn import_files(pg: &Playground) -> Vec<String> {
    let mut left = Vec::new();
    for i in 1..=pg.stores.len() {
        let dir = pg.dir.path().join(format!("data/store-{i}/import"));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            left.extend(entries.map(|e| e.unwrap().path().display().to_string()));
        }
    }
    left
}

fn q(name: &str) -> (&'static str, &'static str) {
    (
        quarry::answers::query(name).unwrap(),
        quarry::answers::answer(name, 0.01).unwrap().0,
    )
}

#[test]
fn an_sst_load_answers_exactly_with_readers_and_survives_a_store_crash() {
    let _serial = SERIAL.lock();
    let mut pg = Playground::start(&["--stores", "3"]);

    // A reader counts lineitem while it loads: every count it gets is of
    // whole ingested files, never more than the table will hold, and
    // never less than it saw before.
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (done, addr) = (done.clone(), pg.compute.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let started = Instant::now();
            while !done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let out = Command::new(QUARRY)
                    .args(["sql", "--addr", &addr, "--format", "csv"])
                    .arg("SELECT count(*) AS n FROM lineitem")
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                if out.status.success() {
                    seen.push(text.lines().nth(1).unwrap().trim().parse::<u64>().unwrap());
                } else {
                    // Before the loader creates the table.
                    assert!(err.contains("lineitem"), "a read failed: {err}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        })
    };
    let out = load_tpch(&pg, "orders,lineitem", &["--write-path", "sst"]);
    done.store(true, Ordering::Relaxed);
    let seen = reader.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for table in ["orders", "lineitem"] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(table))
            .unwrap_or_else(|| panic!("no line for {table} in {stdout}"));
        assert!(line.ends_with("by SST ingest"), "{line}");
    }
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "counts went back: {seen:?}"
    );
    assert!(seen.iter().all(|&n| n <= LINEITEM_ROWS), "{seen:?}");

    for name in ["q1", "q6"] {
        let (sql, want) = q(name);
        assert_csv_matches(&pg.ok(sql), want);
    }
    assert_eq!(count(&pg, "orders"), 15000);

    // Every replica's store took files, and deletes each once ingested.
    for url in &pg.status_urls[..3] {
        let page = metrics(url);
        assert!(
            sample(&page, "quarry_sst_uploads_total{outcome=\"ok\"}") >= 1.0,
            "no uploads at {url}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !import_files(&pg).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(import_files(&pg), Vec::<String>::new());

    // Ingested rows change like any others.
    pg.ok("DELETE FROM orders WHERE o_orderkey = 1");
    pg.ok("UPDATE lineitem SET l_comment = 'changed' WHERE l_orderkey = 3 AND l_linenumber = 2");
    assert_eq!(count(&pg, "orders"), 14999);
    assert_eq!(
        pg.ok("SELECT l_comment FROM lineitem WHERE l_orderkey = 3 AND l_linenumber = 2"),
        "l_comment\nchanged\n"
    );

    // A store killed and restarted still holds what it ingested.
    signal(pg.stores[1].0, "KILL");
    pg.wait_line("storage 2:", Duration::from_secs(60));
    let (sql, want) = q("q6");
    assert_csv_matches(&pg.ok(sql), want);
    assert_eq!(count(&pg, "lineitem"), LINEITEM_ROWS);
}

#[test]
fn an_sst_load_that_a_replica_cannot_take_falls_back_to_raft_writes() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    // Store 3 cannot keep uploads: a file stands where its import
    // directory was. It serves everything else.
    let import = pg.dir.path().join("data/store-3/import");
    std::fs::remove_dir(&import).unwrap();
    std::fs::write(&import, b"not a directory").unwrap();
    let out = load_tpch(&pg, "orders", &["--write-path", "sst"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "load failed: {stderr}");
    assert!(
        stderr.contains("writing through raft") && stderr.contains("store 3"),
        "{stderr}"
    );
    assert!(stdout.contains("by raft writes"), "{stdout}");
    assert_eq!(count(&pg, "orders"), 15000);
    // dbgen's sparse order keys: the k-th is (k >> 3) << 5 | (k & 7).
    let keys: i64 = (1..=15000i64).map(|k| (k >> 3) << 5 | (k & 7)).sum();
    assert_eq!(
        pg.ok("SELECT sum(o_orderkey) AS s FROM orders"),
        format!("s\n{keys}\n")
    );
}
