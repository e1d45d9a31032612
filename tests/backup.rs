//! BACKUP and RESTORE between real clusters: TPC-H at SF 0.01 backed up
//! while four clients write, restored into a fresh cluster that then
//! answers the 22 queries exactly as DuckDB does and holds exactly the
//! writes the snapshot saw; and the refusals a user meets (a table that
//! exists, a corrupt or missing file, no manifest, a checksum that does
//! not match), each leaving no table behind, through SQL and through
//! `quarry backup` / `quarry restore`; and a backup through compute
//! processes whose stores answer in each page encoding (rows, wide and
//! narrow decimals), restored exactly; and a restore killed half-way,
//! whose tables the meta leader puts right.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// Every `.parquet` file under `dir`, sorted.
fn parquet_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).unwrap() {
        let d = d.unwrap().path();
        if d.is_dir() {
            for f in std::fs::read_dir(&d).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|e| e == "parquet") {
                    out.push(f);
                }
            }
        }
    }
    out.sort();
    out
}

fn tables(pg: &Playground) -> String {
    pg.ok("SHOW TABLES")
}

/// `quarry COMMAND --store … ARGS DIR` against `pg`'s stores, as an
/// operator runs it: it must succeed; returns what it printed.
fn quarry_cli(pg: &Playground, command: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(QUARRY)
        .args([command, "--store", &pg.store_addrs().join(",")])
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_backup_under_writes_restores_exactly_into_a_fresh_cluster() {
    let src = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    src.ok("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)");
    let values: Vec<String> = (0..10).map(|i| format!("({i}, 100)")).collect();
    src.ok(&format!(
        "INSERT INTO accounts VALUES {}",
        values.join(", ")
    ));
    src.ok("CREATE TABLE events (id BIGINT PRIMARY KEY, client BIGINT, note VARCHAR) WITH (layout = 'row')");
    src.ok("CREATE INDEX events_client ON events (client)");
    // A table without a primary key: its handles travel as _rowid.
    src.ok("CREATE TABLE notes (n BIGINT, t VARCHAR)");
    src.ok("INSERT INTO notes VALUES (1, 'one'), (2, NULL), (NULL, 'three')");
    src.ok("DELETE FROM notes WHERE n = 1");
    // Another, with a column named as the handles travel: they take a
    // name of their own in the files.
    src.ok("CREATE TABLE odd (_rowid VARCHAR, v BIGINT)");
    src.ok("INSERT INTO odd VALUES ('x', 1), (NULL, 2)");
    // Rows of a packed table rewritten as they were: their new versions
    // are delta rows among the packs, which a region's scan returns after
    // the pack holding their handles (out of handle order), and the
    // answers stay DuckDB's.
    src.ok("UPDATE orders SET o_comment = o_comment WHERE o_orderkey % 50 = 3");

    // Four clients: each inserts events with ids of its own and moves one
    // unit between two accounts (the total stays 1000), recording when
    // each insert was called and when it was acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let writers: Vec<_> = (0..4i64)
        .map(|c| {
            let stop = stop.clone();
            let compute = src.compute.clone();
            std::thread::spawn(move || {
                let mut log = Vec::new();
                let mut seq = 0i64;
                let limit = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < limit && seq < 500 {
                    seq += 1;
                    let id = c * 1_000_000 + seq;
                    let sql = format!("INSERT INTO events VALUES ({id}, {c}, 'n{seq}')");
                    let called = started.elapsed();
                    let out = Command::new(QUARRY)
                        .args(["sql", "--addr", &compute, &sql])
                        .output()
                        .unwrap();
                    log.push((id, called, started.elapsed(), out.status.success()));
                    let (a, b) = (seq % 10, (seq * 3 + c) % 10);
                    if a != b {
                        let sql = format!(
                            "UPDATE accounts SET balance = balance + CASE WHEN id = {a} THEN 1 ELSE -1 END WHERE id IN ({a}, {b})"
                        );
                        let _ = Command::new(QUARRY)
                            .args(["sql", "--addr", &compute, &sql])
                            .output();
                    }
                }
                log
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("b1");
    let backup_called = started.elapsed();
    let out = src.ok(&format!("BACKUP TO '{}'", location.display()));
    let backup_returned = started.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let log: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(out.contains("lineitem,60175,"), "{out}");
    assert!(out.contains("notes,2,"), "{out}");
    assert!(out.contains("odd,2,"), "{out}");
    let before: Vec<_> = log.iter().filter(|l| l.3 && l.2 < backup_called).collect();
    let after: Vec<_> = log.iter().filter(|l| l.1 > backup_returned).collect();
    assert!(
        !before.is_empty() && !after.is_empty(),
        "writes before ({}) and after ({}) the backup",
        before.len(),
        after.len()
    );
    assert!(location.join("backup.json").exists());

    let dst = Playground::start(&["--stores", "3"]);
    let restored = dst.ok(&format!("RESTORE FROM '{}'", location.display()));
    assert!(restored.contains("lineitem,60175,"), "{restored}");

    // The TPC-H tables answer the 22 queries exactly as DuckDB.
    let cases = tpch_cases(0.01);
    let failures = mismatches(&dst.compute, &cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The written tables as the snapshot saw them: every event
    // acknowledged before the backup began, none called after it ended,
    // and the accounts' total whole.
    let ids: BTreeSet<i64> = dst
        .ok("SELECT id FROM events")
        .lines()
        .skip(1)
        .map(|l| l.parse().unwrap())
        .collect();
    for (id, ..) in &before {
        assert!(
            ids.contains(id),
            "event {id} acknowledged before the backup is missing"
        );
    }
    for (id, ..) in &after {
        assert!(
            !ids.contains(id),
            "event {id} written after the backup is there"
        );
    }
    assert_eq!(
        dst.ok("SELECT count(*) AS n, sum(balance) AS total FROM accounts"),
        "n,total\n10,1000\n"
    );
    assert_eq!(
        dst.ok("SELECT n, t FROM notes ORDER BY n NULLS FIRST"),
        "n,t\n,three\n2,\n"
    );
    assert_eq!(
        dst.ok("SELECT _rowid, v FROM odd ORDER BY v"),
        "_rowid,v\nx,1\n,2\n"
    );
    // Its index came back (built online after the rows), and new rows get
    // handles past the restored ones.
    let err = dst.fails("CREATE INDEX events_client ON events (client)");
    assert!(err.contains("index events_client already exists"), "{err}");
    dst.ok("INSERT INTO notes VALUES (4, 'four')");
    assert_eq!(dst.ok("SELECT count(*) FROM notes"), "count(*)\n3\n");
}

#[test]
fn bad_backups_are_refused_by_name_and_leave_no_table() {
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v DECIMAL(12,2), d DATE, s VARCHAR)");
    for chunk in 0..3 {
        let rows: Vec<String> = (chunk * 1000 + 1..=chunk * 1000 + 1000)
            .map(|i| {
                format!(
                    "({i}, {i}.{:02}, DATE '2020-{:02}-{:02}', 's{i}')",
                    i % 100,
                    1 + i % 12,
                    1 + i % 28
                )
            })
            .collect();
        pg.ok(&format!("INSERT INTO t VALUES {}", rows.join(", ")));
    }
    // A key that is not the first column, with a dropped column before
    // it: the column ids are 2 and 3, and a restored table's are 1 and 2.
    pg.ok("CREATE TABLE k (junk BIGINT, id BIGINT PRIMARY KEY, v VARCHAR)");
    pg.ok("INSERT INTO k VALUES (0, 30, 'c'), (0, -5, 'a'), (0, 12, NULL)");
    pg.ok("ALTER TABLE k DROP COLUMN junk");
    // What a restore's checksum asks of the cluster runs in the stores,
    // exactly: strings' lengths in bytes and DATEs as days.
    let plan = pg.ok(
        "EXPLAIN SELECT sum(CAST(octet_length(s) AS DECIMAL(38,0))), \
         sum(CAST(CAST(d AS BIGINT) AS DECIMAL(38,0))) FROM t",
    );
    assert!(plan.contains("partial aggregate"), "{plan}");
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
    let (mut bytes, mut days) = (0i64, 0i64);
    for i in 1..=3000i64 {
        bytes += format!("s{i}").len() as i64;
        let d = chrono::NaiveDate::from_ymd_opt(2020, 1 + (i % 12) as u32, 1 + (i % 28) as u32);
        days += (d.unwrap() - epoch).num_days();
    }
    assert_eq!(
        pg.ok("SELECT sum(CAST(octet_length(s) AS DECIMAL(38,0))) AS b, \
             sum(CAST(CAST(d AS BIGINT) AS DECIMAL(38,0))) AS d FROM t"),
        format!("b,d\n{bytes},{days}\n")
    );
    let sums = "SELECT count(*), sum(v), max(d), sum(length(s)) FROM t";
    let want = pg.ok(sums);
    // A backup of every table keeps the views too.
    pg.ok("CREATE VIEW big (id, amount) AS SELECT id, v FROM t WHERE v > 2900");
    let view = "SELECT count(*) AS n, min(id) AS lo FROM big";
    assert_eq!(pg.ok(view), "n,lo\n100,2901\n");
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    // Through the command line, as an operator would.
    let said = quarry_cli(&pg, "backup", &[], &good);
    assert!(said.contains("backed up t: 3000 rows, 1 files"), "{said}");

    // A table of the same name is not overwritten unless asked.
    let err = pg.fails(&format!("RESTORE TABLE t FROM '{}'", good.display()));
    assert!(
        err.contains("table t exists; drop it first, or RESTORE … WITH REPLACE"),
        "{err}"
    );
    let err = pg.fails(&format!("RESTORE TABLE u FROM '{}'", good.display()));
    assert!(err.contains("has no table u; it has "), "{err}");
    pg.ok("DROP TABLE t");
    pg.ok("DROP TABLE k");
    pg.ok("DROP VIEW big");

    let copy = |name: &str| {
        let to = dir.path().join(name);
        let out = Command::new("cp")
            .arg("-r")
            .arg(&good)
            .arg(&to)
            .output()
            .unwrap();
        assert!(out.status.success());
        let file = parquet_files(&to).pop().unwrap();
        (to, file)
    };
    // A flipped byte.
    let (bad, file) = copy("corrupt");
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&file, bytes).unwrap();
    let err = pg.fails(&format!("RESTORE FROM '{}'", bad.display()));
    let name = file.strip_prefix(dir.path()).unwrap().display().to_string();
    assert!(
        err.contains(&format!("{name} is corrupt: its CRC-32 is")),
        "{err}"
    );
    // A missing file.
    let (gone, file) = copy("missing");
    std::fs::remove_file(&file).unwrap();
    let err = pg.fails(&format!("RESTORE FROM '{}'", gone.display()));
    let name = file.strip_prefix(dir.path()).unwrap().display().to_string();
    assert!(
        err.contains(&format!("backup file {}", gone.display()))
            && err.contains(&name)
            && err.contains("is missing"),
        "{err}"
    );
    // No manifest: a backup that did not finish.
    let (unfinished, _) = copy("unfinished");
    std::fs::remove_file(unfinished.join("backup.json")).unwrap();
    let err = pg.fails(&format!("RESTORE FROM '{}'", unfinished.display()));
    assert!(
        err.contains("holds no backup: backup.json is missing"),
        "{err}"
    );
    // Files that read well but hold other values than the manifest says:
    // found by the checksum after the table is built, and the half-made
    // table is dropped.
    let (lying, _) = copy("lying");
    let manifest = std::fs::read_to_string(lying.join("backup.json")).unwrap();
    let count = "\"count\": \"3000\",\n            \"sum\": \"";
    let at = manifest.find(count).expect("the first column's sums") + count.len();
    let end = at + manifest[at..].find('"').unwrap();
    let forged = format!("{}{}{}", &manifest[..at], 1, &manifest[end..]);
    std::fs::write(lying.join("backup.json"), forged).unwrap();
    let err = pg.fails(&format!("RESTORE TABLE t FROM '{}'", lying.display()));
    assert!(
        err.contains("do not match the manifest's checksum: column id"),
        "{err}"
    );
    assert!(
        err.contains("restoring table t failed; nothing of it was kept"),
        "{err}"
    );
    let left = tables(&pg);
    assert!(
        !left.contains("\nt\n") && !left.contains("__restore_"),
        "{left}"
    );

    // The good one, through the command line, then again in place.
    assert!(quarry_cli(&pg, "restore", &[], &good).contains("restored t: 3000 rows"));
    assert_eq!(pg.ok(sums), want);
    assert_eq!(pg.ok(view), "n,lo\n100,2901\n");
    assert_eq!(
        pg.ok("SELECT id, v FROM k ORDER BY id"),
        "id,v\n-5,a\n12,\n30,c\n"
    );
    let err = pg.fails("INSERT INTO k VALUES (12, 'again')");
    assert!(err.contains("duplicate"), "the key is still id: {err}");
    pg.ok("UPDATE t SET v = 0");
    pg.ok(&format!(
        "RESTORE TABLE t FROM '{}' WITH REPLACE",
        good.display()
    ));
    assert_eq!(pg.ok(sums), want);
    // A view of the backup's name is not overwritten unless asked either.
    pg.ok("DROP TABLE t");
    pg.ok("DROP TABLE k");
    let err = pg.fails(&format!("RESTORE FROM '{}'", good.display()));
    assert!(
        err.contains("view big exists; drop it first, or RESTORE … WITH REPLACE"),
        "{err}"
    );
    pg.ok(&format!("RESTORE FROM '{}' WITH REPLACE", good.display()));
    assert_eq!(pg.ok(sums), want);
    assert_eq!(pg.ok(view), "n,lo\n100,2901\n");
    // A backup never overwrites one.
    let err = pg.fails(&format!("BACKUP TO '{}'", good.display()));
    assert!(err.contains("already holds a backup"), "{err}");
}

/// A restore WITH REPLACE killed at its worst moment (the old table
/// renamed aside, the new one built but not yet named: the
/// `restore_before_name` failpoint holds it there) leaves no half table:
/// once the restore's hold lapses, the meta leader gives the old table its
/// name back and drops the new one; while the restore lives, its renewed
/// hold keeps them. No statement may give a table a restore's name.
#[cfg(feature = "failpoints")]
#[test]
fn a_restore_killed_half_way_leaves_the_table_as_it_was() {
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)");
    let rows: Vec<String> = (1..=2000).map(|i| format!("({i}, 'v{i}')")).collect();
    pg.ok(&format!("INSERT INTO t VALUES {}", rows.join(", ")));
    for sql in [
        "CREATE TABLE __restore_mine (id BIGINT PRIMARY KEY)",
        "ALTER TABLE t RENAME TO __replaced_mine",
    ] {
        let err = pg.fails(sql);
        assert!(
            err.contains("are kept for RESTORE's tables"),
            "{sql}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("b");
    let stores = pg.store_addrs().join(",");
    quarry_cli(&pg, "backup", &["--tables", "t"], &backup);
    // The table as it is now differs from the backup.
    pg.ok("UPDATE t SET v = 'changed' WHERE id <= 10");
    let sums = "SELECT count(*) AS n, min(v) AS lo, max(v) AS hi FROM t";
    let before = pg.ok(sums);
    assert!(before.contains("changed"), "{before}");

    let mut restore = Command::new(QUARRY)
        .args(["restore", "--store", &stores, "--replace"])
        .arg(&backup)
        .env("FAILPOINTS", "restore_before_name=sleep(300000)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = tables(&pg);
        if now.contains("__replaced_t") && now.contains("__restore_t") {
            assert!(!now.contains("\nt\n"), "{now}");
            break;
        }
        assert!(
            restore.try_wait().unwrap().is_none(),
            "the restore ended before its failpoint: {now}"
        );
        assert!(
            Instant::now() < deadline,
            "the restore never got half-way: {now}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Alive, the restore keeps its tables past its hold's TTL (5 s) and
    // a few rounds of the meta leader's duties.
    std::thread::sleep(Duration::from_secs(12));
    let now = tables(&pg);
    assert!(
        now.contains("__replaced_t") && now.contains("__restore_t"),
        "a live restore's tables were put right: {now}"
    );
    assert!(restore.try_wait().unwrap().is_none());
    restore.kill().unwrap();
    restore.wait().unwrap();
    let killed = Instant::now();

    let deadline = killed + Duration::from_secs(30);
    let now = loop {
        let now = tables(&pg);
        if !now.contains("__replaced_t") && !now.contains("__restore_t") {
            break now;
        }
        assert!(Instant::now() < deadline, "still half-restored: {now}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("put right {:.1?} after the kill", killed.elapsed());
    assert!(now.contains("\nt\n"), "{now}");
    assert_eq!(pg.ok(sums), before);
    // And a restore that is let finish replaces it.
    quarry_cli(&pg, "restore", &["--replace"], &backup);
    assert_eq!(pg.ok(sums), "n,lo,hi\n2000,v1,v999\n");
}

/// BACKUP reads DECIMAL(p ≤ 18) columns as the Decimal64 narrow pages
/// carry; a compute process whose stores answer in rows (`--encode rows`)
/// or in wide decimals (`--encode arrow-decimal128`) backs up the same
/// values, and each backup restores them exactly (wide decimals, small
/// ones that Parquet keeps in 32 bits, NULLs, the edges of DECIMAL(15,2)).
#[test]
fn a_backup_reads_every_page_encoding() {
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok(
        "CREATE TABLE d (id BIGINT PRIMARY KEY, price DECIMAL(15,2), small DECIMAL(5,1), \
         wide DECIMAL(30,4), name VARCHAR, n BIGINT, day DATE)",
    );
    // BIGINT's ends side by side: the integer columns' delta encoding
    // takes a delta that overflows 64 bits.
    pg.ok(
        "INSERT INTO d VALUES \
         (1, 12.34, 1234.5, 123456789012345678901.2345, 'a', -9223372036854775808, DATE '1000-01-01'), \
         (2, -9999999999999.99, NULL, NULL, NULL, 9223372036854775807, DATE '9999-12-31'), \
         (3, NULL, -0.1, 1.0001, 'c', NULL, NULL), \
         (4, 9999999999999.99, 0.0, -0.0001, '', 0, DATE '1992-01-02')",
    );
    let want = pg.ok("SELECT * FROM d ORDER BY id");
    assert!(want.contains("-9999999999999.99"), "{want}");
    assert!(want.contains("9223372036854775807,9999-12-31"), "{want}");
    for encode in ["rows", "arrow-decimal128", "arrow"] {
        let compute = pg.extra_compute(&["--encode", encode]);
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("b");
        runtime().block_on(async {
            let mut c = quarry_client::Client::connect(&compute.url).await.unwrap();
            c.sql(&format!("BACKUP TABLE d TO '{}'", location.display()))
                .await
                .unwrap_or_else(|e| panic!("BACKUP with --encode {encode}: {e}"));
        });
        pg.ok(&format!(
            "RESTORE TABLE d FROM '{}' WITH REPLACE",
            location.display()
        ));
        assert_eq!(
            pg.ok("SELECT * FROM d ORDER BY id"),
            want,
            "restored from a backup made with --encode {encode}"
        );
    }
}
