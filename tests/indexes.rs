//! Secondary indexes against a real playground: the planner's use of an
//! index (EXPLAIN names it, answers stay exact), and an online CREATE
//! INDEX while four clients insert, update and delete, after which the
//! index's stored entries are exactly the table's rows, entry for row.
//! (The SQL surface — UNIQUE, NULLs, DROP INDEX — is
//! `tests/slt/indexes.slt`, answered by PostgreSQL.)

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use quarry_client::Client;
use quarry_coprocessor::codec::index::entry;
use quarry_coprocessor::codec::key::{classify_key, table_data_range, IndexPart, KeyKind};
use quarry_coprocessor::codec::mvcc::WriteKind;
use quarry_coprocessor::codec::row::Datum;
use quarry_proto::kv::kv_client::KvClient;
use quarry_proto::kv::{Context, ScanRequest};
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::{GetRegionsRequest, GetTableRequest, TableDef};

/// The (id, k) rows of `acct`, by a plain scan.
fn rows(pg: &Playground) -> BTreeSet<(i64, i64)> {
    pg.ok("SELECT id, k FROM acct")
        .lines()
        .skip(1)
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// The table's definition and the keys of the entries its index `name`
/// holds at the stores' newest state (a lock left by a writer is waited
/// out: the secondaries of a commit are committed in the background).
fn stored_entries(pg: &Playground, name: &str) -> (TableDef, BTreeSet<Vec<u8>>) {
    runtime().block_on(async {
        let stores = pg.store_addrs();
        let mut meta = MetaClient::connect(format!("http://{}", stores[0]))
            .await
            .unwrap();
        let table = meta
            .get_table(GetTableRequest {
                name: "acct".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .table
            .unwrap();
        let ix = table
            .indexes
            .iter()
            .find(|i| i.name == name)
            .unwrap()
            .clone();
        let (start, end) = table_data_range(table.id);
        let deadline = Instant::now() + Duration::from_secs(30);
        'again: loop {
            assert!(Instant::now() < deadline, "index entries stayed locked");
            let routes = meta
                .get_regions(GetRegionsRequest {
                    start_key: start.clone(),
                    end_key: end.clone(),
                })
                .await
                .unwrap()
                .into_inner()
                .regions;
            let mut pairs = Vec::new();
            for r in routes {
                let region = r.region.unwrap();
                let req = ScanRequest {
                    context: Some(Context {
                        region_id: region.id,
                        region_epoch: region.epoch,
                    }),
                    start_key: region.start_key.clone(),
                    end_key: region.end_key.clone(),
                    limit: 0,
                    key_only: false,
                };
                let mut got = None;
                for s in &stores {
                    let mut c = KvClient::connect(format!("http://{s}")).await.unwrap();
                    let resp = c.scan(req.clone()).await.unwrap().into_inner();
                    if resp.region_error.is_none() && resp.error.is_none() {
                        got = Some(resp.pairs);
                        break;
                    }
                }
                let Some(got) = got else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue 'again;
                };
                pairs.extend(got);
            }
            // Per entry, in key order: its lock, then its versions newest
            // first; the newest data version decides.
            let mut entries = BTreeSet::new();
            let mut decided: Option<Vec<u8>> = None;
            for p in &pairs {
                let KeyKind::Index { base_len, part } = classify_key(&p.key) else {
                    continue;
                };
                let base = p.key[..base_len].to_vec();
                let body = quarry_coprocessor::codec::key::index_key_body(&base).unwrap();
                if quarry_coprocessor::codec::key::decode_i64(&body).unwrap() != ix.id {
                    continue;
                }
                if decided.as_ref() == Some(&base) {
                    continue;
                }
                match part {
                    IndexPart::Lock => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue 'again;
                    }
                    IndexPart::Version { kind, .. } if kind.is_data() => {
                        if kind == WriteKind::Put {
                            entries.insert(base.clone());
                        }
                        decided = Some(base);
                    }
                    IndexPart::Bare => {
                        entries.insert(base.clone());
                        decided = Some(base);
                    }
                    _ => {}
                }
            }
            return (table, entries);
        }
    })
}

/// The stored entries of index `name` are exactly those of `acct`'s rows.
fn assert_index_agrees(pg: &Playground, name: &str) -> usize {
    let rows = rows(pg);
    let (table, stored) = stored_entries(pg, name);
    let ix = table.indexes.iter().find(|i| i.name == name).unwrap();
    let expected: BTreeSet<Vec<u8>> = rows
        .iter()
        .map(|(id, k)| entry(table.id, ix.id, false, &[Datum::Int(*k)], *id).0)
        .collect();
    let missing = expected.difference(&stored).count();
    let extra = stored.difference(&expected).count();
    assert_eq!(
        (missing, extra),
        (0, 0),
        "index {name}: {missing} rows without their entry, {extra} entries without their row \
         ({} rows)",
        rows.len()
    );
    // And through SQL, by the index: every value's rows.
    let ks: BTreeSet<i64> = rows.iter().map(|(_, k)| *k).collect();
    for k in ks.iter().take(12) {
        let sql = format!("SELECT id FROM acct WHERE k = {k} ORDER BY id");
        let want: Vec<String> = rows
            .iter()
            .filter(|(_, x)| x == k)
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(pg.ok(&sql), format!("id\n{}\n", want.join("\n")), "{sql}");
    }
    rows.len()
}

#[test]
fn an_index_answers_equality_in_and_ranges_and_explain_names_it() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE acct (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT)");
    let values: Vec<String> = (0..400)
        .map(|i| format!("({i}, {}, {})", i % 40, i * 3))
        .collect();
    pg.ok(&format!("INSERT INTO acct VALUES {}", values.join(", ")));
    // Statistics know the table (`ANALYZE` is what the planner reads).
    let before = pg.ok("SELECT sum(v) AS s FROM acct WHERE k = 7");
    pg.ok("CREATE INDEX acct_k ON acct (k)");
    let plan = pg.ok("EXPLAIN SELECT sum(v) AS s FROM acct WHERE k = 7");
    assert!(plan.contains("index lookup: acct_k (k = 7)"), "{plan}");
    assert_eq!(pg.ok("SELECT sum(v) AS s FROM acct WHERE k = 7"), before);
    assert_eq!(
        pg.ok("SELECT count(*) AS n, sum(v) AS s FROM acct WHERE k IN (1, 2, 39, 77)"),
        "n,s\n30,17460\n"
    );
    // An UPDATE that moves rows between values, seen by the index.
    pg.ok("UPDATE acct SET k = 1000 WHERE k = 3");
    assert_eq!(
        pg.ok("SELECT count(*) AS n FROM acct WHERE k = 3"),
        "n\n0\n"
    );
    assert_eq!(
        pg.ok("SELECT count(*) AS n FROM acct WHERE k = 1000"),
        "n\n10\n"
    );
    assert_index_agrees(&pg, "acct_k");
    // A column read by an index is not dropped under it.
    let err = pg.fails("ALTER TABLE acct DROP COLUMN k");
    assert!(err.contains("read by index acct_k"), "{err}");
    pg.ok("DROP INDEX acct_k");
    let plan = pg.ok("EXPLAIN SELECT sum(v) AS s FROM acct WHERE k = 7");
    assert!(!plan.contains("index lookup"), "{plan}");
    assert_eq!(pg.ok("SELECT sum(v) AS s FROM acct WHERE k = 7"), before);
}

#[test]
fn create_index_is_online_under_four_writers_and_agrees_with_the_table_entry_for_row() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE acct (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT) WITH (split_handles = '1000000,2000000,3000000')");
    for w in 0..4i64 {
        let values: Vec<String> = (0..500)
            .map(|i| format!("({}, {}, 0)", w * 1_000_000 + i, i % 50))
            .collect();
        pg.ok(&format!("INSERT INTO acct VALUES {}", values.join(", ")));
    }
    const WRITERS: i64 = 4;
    let compute = pg.compute.clone();
    let built = AtomicBool::new(false);
    let (statements, errors): (usize, Vec<String>) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (compute, built) = (compute.clone(), &built);
                s.spawn(move || {
                    runtime().block_on(async {
                        let mut c = Client::connect(&compute).await.unwrap();
                        let (mut done, mut failed) = (0usize, Vec::new());
                        let deadline = Instant::now() + Duration::from_secs(120);
                        // Until the index is built and a little after; each
                        // round inserts a row, moves one between values and
                        // deletes one.
                        let mut after = 0;
                        for i in 0..2000i64 {
                            if built.load(Ordering::Relaxed) {
                                after += 1;
                                if after > 10 {
                                    break;
                                }
                            }
                            if Instant::now() > deadline {
                                break;
                            }
                            let base = w * 1_000_000;
                            for sql in [
                                format!(
                                    "INSERT INTO acct VALUES ({}, {}, 1)",
                                    base + 500 + i,
                                    i % 50
                                ),
                                format!(
                                    "UPDATE acct SET k = k + 7, v = v + 1 WHERE id = {}",
                                    base + (i * 13) % 500
                                ),
                                format!("DELETE FROM acct WHERE id = {}", base + (i * 7 + 3) % 500),
                            ] {
                                match c.sql(&sql).await {
                                    Ok(_) => done += 1,
                                    Err(e) => failed.push(format!("{sql}: {e}")),
                                }
                            }
                        }
                        (done, failed)
                    })
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let out = pg.ok("CREATE INDEX acct_k ON acct (k)");
        built.store(true, Ordering::Relaxed);
        assert!(out.contains("CREATE INDEX"), "{out}");
        let (mut n, mut failed) = (0, Vec::new());
        for w in writers {
            let (d, f) = w.join().unwrap();
            n += d;
            failed.extend(f);
        }
        (n, failed)
    });
    // No writer noticed the build, and the index is the table's.
    assert!(errors.is_empty(), "{errors:?}");
    assert!(statements > 0);
    let rows = assert_index_agrees(&pg, "acct_k");
    assert!(rows > 1000, "{rows}");
}
