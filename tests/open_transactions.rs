//! Open transactions against real processes: BEGIN … COMMIT / ROLLBACK
//! in SQL and over Flight SQL, read-your-writes over rows and packs,
//! snapshot isolation's write skew and lost updates, repeatable reads
//! while one-phase INSERTs commit, heartbeats past the lock TTL, SELECT …
//! FOR UPDATE (with the pessimistic-lock optimizations on and off), and
//! GC held by a running transaction.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quarry_client::Client;

#[test]
fn a_transaction_reads_its_own_writes_and_commits_or_rolls_back_as_one() {
    let _serial = SERIAL.lock();
    // Versions fold into packs once below the GC safe point, 4 s behind.
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--compact-delta-rows",
        "10",
        "--gc-life-time-secs",
        "4",
    ]);
    // A row table, and a column table whose rows are in packs: a
    // transaction's own writes must hide both.
    pg.ok("CREATE TABLE r (id BIGINT PRIMARY KEY, name VARCHAR(10))");
    pg.ok("INSERT INTO r VALUES (0, 'ALGERIA'), (1, 'ARGENTINA'), (2, 'BRAZIL'), (3, 'CANADA')");
    pg.ok("CREATE TABLE u (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         WITH (layout = 'column', split_handles = '50')");
    let values: Vec<String> = (1..=100).map(|i| format!("({i}, {i})")).collect();
    pg.ok(&format!("INSERT INTO u VALUES {}", values.join(", ")));
    wait_for_keys_and_packs(&pg, "u", |keys, packs| packs >= 2 && keys == packs);

    let names = "SELECT count(*) AS n, min(name) AS first FROM r";
    assert_eq!(pg.ok(names), "n,first\n4,ALGERIA\n");
    // Rolled back: each statement saw the ones before it, nothing stays.
    let out = pg.ok("BEGIN; \
         UPDATE r SET name = 'AAA' WHERE id = 3; \
         DELETE FROM r WHERE id IN (0, 1); \
         INSERT INTO r VALUES (25, 'ATLANTIS'); \
         SELECT count(*) AS n, min(name) AS first FROM r; \
         UPDATE r SET name = 'AAB' WHERE id = 25; \
         SELECT name FROM r WHERE id IN (3, 25) ORDER BY name; \
         ROLLBACK");
    assert_eq!(
        out,
        "result\nBEGIN\ncount\n1\ncount\n2\ncount\n1\nn,first\n3,AAA\ncount\n1\n\
         name\nAAA\nAAB\nresult\nROLLBACK\n"
    );
    assert_eq!(pg.ok(names), "n,first\n4,ALGERIA\n");

    // Committed over packed rows: all of it, at once.
    let summary = "SELECT count(*) AS n, sum(v) AS s FROM u";
    assert_eq!(pg.ok(summary), "n,s\n100,5050\n");
    let out = pg.ok("BEGIN; \
         UPDATE u SET v = v + 1000 WHERE id <= 20 OR id > 80; \
         DELETE FROM u WHERE id = 50; \
         SELECT count(*) AS n, sum(v) AS s FROM u; \
         INSERT INTO u VALUES (50, 7); \
         UPDATE u SET v = v * 2 WHERE id IN (1, 50); \
         SELECT count(*) AS n, sum(v) AS s FROM u; \
         COMMIT");
    // 5050 + 40 × 1000 = 45050; − 50 = 45000; + 7 = 45007; + 1001 + 7.
    // (20 versions per region: both regions compact afterwards.)
    assert_eq!(
        out,
        "result\nBEGIN\ncount\n40\ncount\n1\nn,s\n99,45000\ncount\n1\ncount\n2\n\
         n,s\n100,46015\nresult\nCOMMIT\n"
    );
    assert_eq!(pg.ok(summary), "n,s\n100,46015\n");
    assert_eq!(
        pg.ok("SELECT v FROM u WHERE id IN (1, 50) ORDER BY id"),
        "v\n2002\n14\n"
    );
    // Once compaction folds it all into packs: the same.
    wait_for_keys_and_packs(&pg, "u", |keys, packs| packs >= 2 && keys == packs);
    assert_eq!(pg.ok(summary), "n,s\n100,46015\n");

    // A failed statement aborts the transaction, and says so; the script
    // stops there, and nothing of it stays.
    let err =
        pg.fails("BEGIN; UPDATE u SET v = 0 WHERE id = 2; INSERT INTO u VALUES (3, 3); COMMIT");
    assert!(
        err.contains("duplicate key") && err.contains("transaction is rolled back"),
        "{err}"
    );
    assert_eq!(pg.ok(summary), "n,s\n100,46015\n");
    let err =
        pg.fails("BEGIN; INSERT INTO r VALUES (9, 'x'); INSERT INTO r VALUES (9, 'x'); COMMIT");
    assert!(err.contains("duplicate key"), "{err}");
    assert_eq!(pg.ok("SELECT count(*) AS n FROM r WHERE id = 9"), "n\n0\n");
    let err = pg.fails("BEGIN; UPDATE u SET v = 0 WHERE id = 2");
    assert!(err.contains("left a transaction open"), "{err}");
    let err = pg.fails("BEGIN; CREATE TABLE z (id BIGINT)");
    assert!(err.contains("do not run inside a transaction"), "{err}");
    assert_eq!(pg.ok(summary), "n,s\n100,46015\n");
}

/// One runtime for the sessions of a test (a client's connection lives
/// in the runtime that made it).
fn shared_runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A client with its own session.
fn client(pg: &Playground) -> Client {
    shared_runtime()
        .block_on(Client::connect(&pg.compute))
        .unwrap()
}

fn run(c: &mut Client, sql: &str) -> Result<String, quarry_client::Error> {
    let batches = shared_runtime().block_on(c.sql(sql))?;
    let mut out = Vec::new();
    quarry::output::print(&mut out, &batches, quarry::output::Format::Csv).unwrap();
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn write_skew_is_allowed_but_a_lost_update_is_not() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE d (id BIGINT PRIMARY KEY, on_call BIGINT NOT NULL)");
    pg.ok("INSERT INTO d VALUES (1, 1), (2, 1)");
    let (mut a, mut b) = (client(&pg), client(&pg));
    // Write skew: each sees two on call and takes one off, a different
    // row each. Snapshot isolation lets both commit.
    for c in [&mut a, &mut b] {
        run(c, "BEGIN").unwrap();
        assert_eq!(run(c, "SELECT sum(on_call) AS n FROM d").unwrap(), "n\n2\n");
    }
    run(&mut a, "UPDATE d SET on_call = 0 WHERE id = 1").unwrap();
    run(&mut b, "UPDATE d SET on_call = 0 WHERE id = 2").unwrap();
    // Each still sees its own snapshot and its own write only.
    assert_eq!(
        run(&mut a, "SELECT sum(on_call) AS n FROM d").unwrap(),
        "n\n1\n"
    );
    run(&mut a, "COMMIT").unwrap();
    assert_eq!(
        run(&mut b, "SELECT sum(on_call) AS n FROM d").unwrap(),
        "n\n1\n"
    );
    run(&mut b, "COMMIT").unwrap();
    assert_eq!(pg.ok("SELECT sum(on_call) AS n FROM d"), "n\n0\n");

    // Lost update: both read 0 and add 10; the second writer, whose
    // snapshot predates the first's commit, is refused and rolled back.
    for c in [&mut a, &mut b] {
        run(c, "BEGIN").unwrap();
        assert_eq!(
            run(c, "SELECT on_call FROM d WHERE id = 1").unwrap(),
            "on_call\n0\n"
        );
    }
    run(&mut a, "UPDATE d SET on_call = on_call + 10 WHERE id = 1").unwrap();
    run(&mut a, "COMMIT").unwrap();
    let err = run(&mut b, "UPDATE d SET on_call = on_call + 10 WHERE id = 1").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("write conflict on handle 1") && text.contains("rolled back"),
        "{text}"
    );
    let err = run(&mut b, "SELECT 1").unwrap_err().to_string();
    assert!(err.contains("end it with ROLLBACK"), "{err}");
    let err = run(&mut b, "COMMIT").unwrap_err().to_string();
    assert!(err.contains("nothing was committed"), "{err}");
    assert_eq!(pg.ok("SELECT on_call FROM d WHERE id = 1"), "on_call\n10\n");
}

/// Issue 45's report, as a new user met it: a transaction that begins
/// right after another connection's autocommit write (a one-phase commit,
/// whose commit_ts the store picks: the oracle may hand the same timestamp
/// out next) must see that write and may update the row without a
/// conflict. Before the fix, about one step in two failed with "write
/// conflict on handle 1: another transaction committed it at T after this
/// one started at T", the same T on both sides.
#[test]
fn a_transaction_begun_right_after_a_one_phase_commit_sees_it_and_may_overwrite_it() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE s (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)");
    pg.ok("INSERT INTO s VALUES (1, 0)");
    let (mut a, mut b) = (client(&pg), client(&pg));
    for step in 1..=40i64 {
        run(&mut b, "DELETE FROM s WHERE id = 1").unwrap();
        run(&mut b, &format!("INSERT INTO s VALUES (1, {})", step * 10)).unwrap();
        run(&mut a, "BEGIN").unwrap();
        let updated = run(&mut a, "UPDATE s SET v = v + 1 WHERE id = 1");
        let updated = updated.unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(updated, "count\n1\n", "step {step}");
        assert_eq!(
            run(&mut a, "SELECT v FROM s WHERE id = 1").unwrap(),
            format!("v\n{}\n", step * 10 + 1),
            "step {step}: the transaction did not see the insert before it"
        );
        run(&mut a, "COMMIT").unwrap();
    }
    assert_eq!(pg.ok("SELECT v FROM s"), "v\n401\n");
}

#[test]
fn a_transaction_reads_one_snapshot_while_one_phase_inserts_commit() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE o (id BIGINT PRIMARY KEY, v BIGINT)");
    pg.ok("INSERT INTO o VALUES (0, 0)");
    let mut reader = client(&pg);
    run(&mut reader, "BEGIN").unwrap();
    let count = "SELECT count(*) AS n FROM o";
    assert_eq!(run(&mut reader, count).unwrap(), "n\n1\n");
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, inserted, compute) = (stop.clone(), inserted.clone(), pg.compute.clone());
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                let mut n = 0;
                while n < 200 && !stop.load(Ordering::SeqCst) {
                    n += 1;
                    c.sql(&format!("INSERT INTO o VALUES ({n}, {n})"))
                        .await
                        .unwrap();
                    inserted.store(n, Ordering::SeqCst);
                }
                n
            })
        })
    };
    // Every read of the transaction sees its snapshot: one row. At least
    // 20 reads, and on until 5 inserts have committed among them (the
    // reads alone may outrun the writer), for at most 2000 reads or 60 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut reads = 0;
    while reads < 20
        || (inserted.load(Ordering::SeqCst) < 5 && reads < 2000 && Instant::now() < deadline)
    {
        assert_eq!(run(&mut reader, count).unwrap(), "n\n1\n");
        reads += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let n = writer.join().unwrap();
    assert_eq!(run(&mut reader, count).unwrap(), "n\n1\n");
    run(&mut reader, "COMMIT").unwrap();
    assert!(n >= 5, "only {n} inserts ran during the reads");
    assert_eq!(run(&mut reader, count).unwrap(), format!("n\n{}\n", n + 1));
}

#[test]
fn an_open_transaction_keeps_its_locks_past_their_ttl() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE k (id BIGINT PRIMARY KEY, v BIGINT)");
    pg.ok("INSERT INTO k VALUES (1, 1)");
    let mut a = client(&pg);
    run(&mut a, "BEGIN").unwrap();
    run(&mut a, "UPDATE k SET v = 2 WHERE id = 1").unwrap();
    // A reader passes over the open transaction's lock: the old value.
    assert_eq!(pg.ok("SELECT v FROM k"), "v\n1\n");
    // A writer meets the lock and waits for the transaction, which its
    // heartbeats keep alive past the 3 s TTL: it is not rolled back.
    let writer = {
        let compute = pg.compute.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3500));
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                c.sql("UPDATE k SET v = v + 10 WHERE id = 1").await
            })
        })
    };
    std::thread::sleep(Duration::from_millis(4500));
    run(&mut a, "COMMIT").unwrap();
    // The writer's first snapshot predates the commit: it lost the
    // conflict, ran again on the committed row.
    writer.join().unwrap().unwrap();
    assert_eq!(pg.ok("SELECT v FROM k"), "v\n12\n");
}

#[test]
fn flight_sql_transactions_begin_run_statements_and_end() {
    use arrow_flight::sql::client::FlightSqlServiceClient;
    use arrow_flight::sql::{EndTransaction, SqlInfo};
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE f (id BIGINT PRIMARY KEY, v BIGINT)");
    runtime().block_on(async {
        let channel = pg.compute_channel().await;
        let mut c = FlightSqlServiceClient::new(channel);
        // GetSqlInfo says transactions are supported.
        let info = c
            .get_sql_info(vec![SqlInfo::FlightSqlServerTransaction])
            .await
            .unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let batches: Vec<arrow::array::RecordBatch> =
            futures::TryStreamExt::try_collect(c.do_get(ticket).await.unwrap())
                .await
                .unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| 8         | {int32_bitmask=1} |"), "{text}");

        for (how, want) in [(EndTransaction::Rollback, 0), (EndTransaction::Commit, 2)] {
            let id = c.begin_transaction().await.unwrap();
            let n = c
                .execute_update(
                    "INSERT INTO f VALUES (1, 1), (2, 2)".into(),
                    Some(id.clone()),
                )
                .await
                .unwrap();
            assert_eq!(n, 2);
            let info = c
                .execute("SELECT count(*) AS n FROM f".into(), Some(id.clone()))
                .await
                .unwrap();
            let ticket = info.endpoint[0].ticket.clone().unwrap();
            let batches: Vec<arrow::array::RecordBatch> =
                futures::TryStreamExt::try_collect(c.do_get(ticket).await.unwrap())
                    .await
                    .unwrap();
            let n = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap()
                .value(0);
            assert_eq!(n, 2, "the transaction sees its own rows");
            // Outside it: nothing yet.
            assert_eq!(pg.ok("SELECT count(*) AS n FROM f"), "n\n0\n");
            c.end_transaction(id.clone(), how).await.unwrap();
            assert_eq!(pg.ok("SELECT count(*) AS n FROM f"), format!("n\n{want}\n"));
            // The id is gone.
            let err = c
                .execute_update("INSERT INTO f VALUES (9, 9)".into(), Some(id))
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("no open transaction"), "{err}");
        }
    });
}

#[test]
fn select_for_update_makes_other_writers_wait_for_the_transaction() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE q (id BIGINT PRIMARY KEY, v BIGINT)");
    pg.ok("INSERT INTO q VALUES (1, 1), (2, 2), (3, 3)");
    let mut a = client(&pg);
    run(&mut a, "BEGIN").unwrap();
    // The rows it reads are locked, and it reads them as a SELECT would.
    assert_eq!(
        run(
            &mut a,
            "SELECT id, v FROM q WHERE id <= 2 ORDER BY id FOR UPDATE"
        )
        .unwrap(),
        "id,v\n1,1\n2,2\n"
    );
    // Readers pass over the locks; a writer of a locked row waits for the
    // transaction, then sees its commit.
    assert_eq!(pg.ok("SELECT sum(v) AS s FROM q"), "s\n6\n");
    let writer = {
        let compute = pg.compute.clone();
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut c = Client::connect(&compute).await.unwrap();
                let t = Instant::now();
                c.sql("UPDATE q SET v = v * 10 WHERE id = 2").await.unwrap();
                t.elapsed()
            })
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    run(&mut a, "UPDATE q SET v = v + 1 WHERE id = 2").unwrap();
    run(&mut a, "COMMIT").unwrap();
    let waited = writer.join().unwrap();
    assert!(
        waited >= Duration::from_millis(1000),
        "the writer waited only {waited:?}"
    );
    // 2 + 1 = 3 by the transaction, then × 10 by the writer.
    assert_eq!(
        pg.ok("SELECT id, v FROM q ORDER BY id"),
        "id,v\n1,1\n2,30\n3,3\n"
    );
    // Shapes it cannot lock say so (and abort the transaction).
    run(&mut a, "BEGIN").unwrap();
    let err = run(&mut a, "SELECT count(*) FROM q GROUP BY v FOR UPDATE").unwrap_err();
    assert!(
        err.to_string().contains("FOR UPDATE with GROUP BY"),
        "{err}"
    );
    run(&mut a, "ROLLBACK").unwrap();
    // Outside a transaction it is a plain SELECT.
    assert_eq!(pg.ok("SELECT v FROM q WHERE id = 3 FOR UPDATE"), "v\n3\n");
}

#[test]
fn for_update_of_keys_returns_the_rows_it_locked_with_the_optimizations_on_and_off() {
    let _serial = SERIAL.lock();
    for on in ["true", "false"] {
        let pg = Playground::start(&["--stores", "3", "--pessimistic-optimizations", on]);
        pg.ok("CREATE TABLE k (id BIGINT PRIMARY KEY, v BIGINT, s VARCHAR(8))");
        pg.ok("INSERT INTO k VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, NULL)");
        let mut a = client(&pg);
        run(&mut a, "BEGIN").unwrap();
        // Keys the primary key names: the rows as a SELECT reads them,
        // filtered and ordered by the rest of the query; a missing key
        // is no row.
        assert_eq!(
            run(&mut a, "SELECT * FROM k WHERE id = 2 FOR UPDATE").unwrap(),
            "id,v,s\n2,20,b\n",
            "optimizations {on}"
        );
        assert_eq!(
            run(
                &mut a,
                "SELECT id, s FROM k WHERE id IN (3, 1, 9) ORDER BY id DESC FOR UPDATE"
            )
            .unwrap(),
            "id,s\n3,\n1,a\n"
        );
        assert_eq!(
            run(
                &mut a,
                "SELECT id FROM k WHERE id IN (1, 2) AND v > 15 FOR UPDATE"
            )
            .unwrap(),
            "id\n2\n"
        );
        // A subquery over the table reads all of it, not the rows locked.
        assert_eq!(
            run(
                &mut a,
                "SELECT id, (SELECT count(*) FROM k) AS n FROM k WHERE id = 2 FOR UPDATE"
            )
            .unwrap(),
            "id,n\n2,3\n"
        );
        // Its own write, through the lock it holds.
        run(&mut a, "UPDATE k SET v = 21 WHERE id = 2").unwrap();
        assert_eq!(
            run(&mut a, "SELECT v * 2 AS w FROM k WHERE id = 2 FOR UPDATE").unwrap(),
            "w\n42\n"
        );
        // Another transaction's FOR UPDATE of a locked key waits for this
        // one; once it committed, the other's snapshot is stale: a write
        // conflict (no lost update).
        let other = {
            let compute = pg.compute.clone();
            std::thread::spawn(move || {
                runtime().block_on(async {
                    let mut c = Client::connect(&compute).await.unwrap();
                    c.sql("BEGIN").await.unwrap();
                    let t = Instant::now();
                    let r = c.sql("SELECT v FROM k WHERE id = 1 FOR UPDATE").await;
                    let _ = c.sql("ROLLBACK").await;
                    (t.elapsed(), r.map(|_| ()).map_err(|e| e.to_string()))
                })
            })
        };
        std::thread::sleep(Duration::from_millis(1500));
        run(&mut a, "UPDATE k SET v = 11 WHERE id = 1").unwrap();
        run(&mut a, "COMMIT").unwrap();
        let (waited, r) = other.join().unwrap();
        assert!(
            waited >= Duration::from_millis(1000),
            "the other transaction waited only {waited:?}"
        );
        let err = r.unwrap_err();
        assert!(err.contains("write conflict"), "{err}");
        assert_eq!(
            pg.ok("SELECT id, v FROM k ORDER BY id"),
            "id,v\n1,11\n2,21\n3,30\n"
        );
    }
}

#[test]
fn an_open_transaction_holds_gc_until_it_ends() {
    let _serial = SERIAL.lock();
    // Versions fold into packs 6 s after they commit, unless a running
    // read holds them.
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--compact-delta-rows",
        "1",
        "--gc-life-time-secs",
        "6",
    ]);
    pg.ok("CREATE TABLE g (id BIGINT PRIMARY KEY, v BIGINT) WITH (layout = 'column')");
    pg.ok("INSERT INTO g VALUES (1, 1), (2, 2)");
    wait_for_keys_and_packs(&pg, "g", |keys, packs| packs >= 1 && keys == packs);
    let mut a = client(&pg);
    run(&mut a, "BEGIN").unwrap();
    let read = "SELECT v FROM g WHERE id = 1";
    assert_eq!(run(&mut a, read).unwrap(), "v\n1\n");
    pg.ok("UPDATE g SET v = 10 WHERE id = 1");
    // Two lifetimes on, the transaction still reads its snapshot: the
    // new version was not folded into the pack.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        assert_eq!(run(&mut a, read).unwrap(), "v\n1\n");
        std::thread::sleep(Duration::from_millis(500));
    }
    let text = status_text(&pg);
    assert!(
        text.contains("GC held at") && text.contains("by the oldest running query or transaction"),
        "{text}"
    );
    let s = runtime()
        .block_on(quarry::status::fetch(&pg.store_addrs()[0]))
        .unwrap();
    assert!(s.gc_hold != 0 && s.gc_safe_point < s.gc_hold, "{s:?}");
    assert_eq!(pg.ok(read), "v\n10\n");
    run(&mut a, "ROLLBACK").unwrap();
    // Released: the version folds, and the hold goes.
    wait_for_keys_and_packs(&pg, "g", |keys, packs| packs >= 1 && keys == packs);
    assert_eq!(pg.ok(read), "v\n10\n");
    let start = Instant::now();
    loop {
        let s = runtime()
            .block_on(quarry::status::fetch(&pg.store_addrs()[0]))
            .unwrap();
        if s.gc_hold == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "still held: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A transaction aborted by a failed statement reads nothing more: it
    // holds nothing either, though its client has not ended it yet.
    run(&mut a, "BEGIN").unwrap();
    assert_eq!(run(&mut a, read).unwrap(), "v\n10\n");
    let wait_for_hold = |held: bool| {
        let start = Instant::now();
        loop {
            let s = runtime()
                .block_on(quarry::status::fetch(&pg.store_addrs()[0]))
                .unwrap();
            if (s.gc_hold != 0) == held {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{s:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for_hold(true);
    assert!(run(&mut a, "SELECT * FROM no_such_table").is_err());
    wait_for_hold(false);
    run(&mut a, "ROLLBACK").unwrap();
}
