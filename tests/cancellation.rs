//! How long a statement may run and how it is stopped, on real processes
//! whose scans a failpoint slows (`coprocessor_slow_batch`, every batch of
//! every coprocessor task sleeps): a session's statement timeout ends its
//! query, its streamed answer and its writes, and the scans on the stores;
//! a client that stops reading, drops its query or its stream, or sends
//! Flight's CancelFlightInfo stops the stores' scans within a second; a
//! distributed query whose worker is killed while it runs answers
//! exactly, run again without it.
//! The other injected faults are in `tests/failpoints.rs`.

#![cfg(feature = "failpoints")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use quarry_client::Client;

/// The gauge `name` on the status port at `url` (0 when absent).
fn gauge(url: &str, name: &str) -> i64 {
    sample(&http(url, "GET", "/metrics", "").1, name) as i64
}

/// `quarry_coprocessor_running` summed over the stores' status `urls`.
fn running_tasks(urls: &[String]) -> i64 {
    urls.iter()
        .map(|url| gauge(url, "quarry_coprocessor_running"))
        .sum()
}

/// How long until no coprocessor task runs on any store (at most 10 s).
fn until_no_task_runs(pg: &Playground) -> Duration {
    let t0 = Instant::now();
    let urls = &pg.status_urls[..pg.stores.len()];
    while running_tasks(urls) > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// [`running_tasks`] of `pg`'s stores, from async code.
async fn running_now(pg: &Playground) -> i64 {
    let urls = pg.status_urls[..pg.stores.len()].to_vec();
    tokio::task::spawn_blocking(move || running_tasks(&urls))
        .await
        .unwrap()
}

/// Waits until some store runs a coprocessor task (at most 10 s), failing
/// if `finished` says the query ended first.
async fn until_scanning(pg: &Playground, finished: impl Fn() -> bool) {
    let t0 = Instant::now();
    loop {
        if running_now(pg).await > 0 {
            return;
        }
        assert!(!finished(), "finished before it was cancelled");
        assert!(t0.elapsed() < Duration::from_secs(10), "no scan started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long after `since` the stores ran their last coprocessor task
/// (polled every 20 ms, for at most 10 s).
async fn until_stopped(pg: &Playground, since: Instant) -> Duration {
    loop {
        if running_now(pg).await == 0 || since.elapsed() > Duration::from_secs(10) {
            return since.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The batches of a Flight SQL `ticket`, read to the end.
async fn fetch_ticket(
    sql: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    ticket: arrow_flight::Ticket,
) -> Vec<arrow::array::RecordBatch> {
    use futures::TryStreamExt;
    sql.do_get(ticket)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// Slow scans: every batch of every coprocessor task sleeps 100 ms, so a
/// scan of lineitem at SF 0.01 takes seconds.
fn slow_scans(pg: &Playground) {
    on_every_store(pg, "coprocessor_slow_batch", Some("sleep(100)"));
}

/// Batches as CSV with a header.
fn csv(batches: &[arrow::array::RecordBatch]) -> String {
    let mut buf = Vec::new();
    {
        let mut w = arrow::csv::WriterBuilder::new()
            .with_header(true)
            .build(&mut buf);
        for b in batches {
            w.write(b).unwrap();
        }
    }
    String::from_utf8(buf).unwrap()
}

async fn show_timeout(c: &mut Client) -> String {
    csv(&c.sql("SHOW statement_timeout").await.unwrap())
}

const SLOW_QUERY: &str =
    "SELECT l_returnflag, count(*), sum(l_quantity) FROM lineitem GROUP BY l_returnflag ORDER BY l_returnflag";

#[test]
fn a_sessions_statement_timeout_ends_its_query_and_the_scans_on_the_stores() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    runtime().block_on(async {
        let mut a = Client::connect(&pg.compute).await.unwrap();
        let mut b = Client::connect(&pg.compute).await.unwrap();
        let want = csv(&b.sql(SLOW_QUERY).await.unwrap());
        slow_scans(&pg);
        assert_eq!(show_timeout(&mut a).await, "statement_timeout\n1min\n");
        a.sql("SET statement_timeout = '300ms'").await.unwrap();
        assert_eq!(show_timeout(&mut a).await, "statement_timeout\n300ms\n");
        // The other connection keeps the default.
        assert_eq!(show_timeout(&mut b).await, "statement_timeout\n1min\n");

        let t0 = Instant::now();
        let e = a.sql(SLOW_QUERY).await.unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("deadline"), "{e}");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
        // The stores stopped scanning for it too.
        let stopped = until_no_task_runs(&pg);
        assert!(
            stopped < Duration::from_secs(1),
            "stores scanned on for {stopped:?}"
        );

        // The other session's query runs to the end; back to the default,
        // so does this one's.
        assert_eq!(csv(&b.sql(SLOW_QUERY).await.unwrap()), want);
        a.sql("RESET statement_timeout").await.unwrap();
        assert_eq!(show_timeout(&mut a).await, "statement_timeout\n1min\n");
        let e = a.sql("SET statement_timeout = 'soon'").await.unwrap_err();
        assert!(matches!(e, quarry_client::Error::InvalidInput(_)), "{e:?}");
    });
}

/// Lineitem at SF 0.01, every answer streamed (none gathered first).
fn streaming_playground() -> Playground {
    Playground::start_lineitem(&["--stream-results-after-mb", "0"])
}

/// Reads `stream` to its error: the rows before it, and the error; panics
/// if it ends without one.
async fn rows_until_error(
    stream: &mut futures::stream::BoxStream<
        'static,
        quarry_client::Result<arrow::array::RecordBatch>,
    >,
) -> (usize, quarry_client::Error) {
    use futures::StreamExt;
    let mut rows = 0;
    loop {
        match stream.next().await {
            Some(Ok(b)) => rows += b.num_rows(),
            Some(Err(e)) => return (rows, e),
            None => panic!("the answer ended without an error after {rows} rows"),
        }
    }
}

/// A streamed answer (a scan's rows go to the client as the regions
/// answer, compute holds none of them whole; here every answer streams,
/// as one past `stream-results-after-mb` does) cut off partway by its
/// deadline ends with the deadline's error after the rows already sent:
/// the client never takes a shorter answer for the whole one, and the
/// stores stop scanning.
#[test]
fn a_streamed_answer_cut_off_partway_ends_with_its_deadline_error() {
    let _serial = SERIAL.lock();
    let pg = streaming_playground();
    runtime().block_on(async {
        use futures::StreamExt;
        let scan = "SELECT l_orderkey, l_linenumber FROM lineitem";
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let all: usize = c
            .sql(scan)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(all, 60175);
        slow_scans(&pg);
        c.sql("SET statement_timeout = '400ms'").await.unwrap();
        let t0 = Instant::now();
        let mut stream = c.sql_stream(scan).await.unwrap();
        let (rows, e) = rows_until_error(&mut stream).await;
        let took = t0.elapsed();
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("deadline"), "{e}");
        assert!(rows > 0 && rows < all, "{rows} rows before the error");
        assert!(stream.next().await.is_none(), "nothing after the error");
        assert!(took < Duration::from_millis(2000), "took {took:?}");
        let stopped = until_no_task_runs(&pg);
        assert!(
            stopped < Duration::from_secs(1),
            "stores scanned on for {stopped:?}"
        );
        // The connection goes on: the whole answer, once the scans are
        // quick again.
        on_every_store(&pg, "coprocessor_slow_batch", None);
        c.sql("RESET statement_timeout").await.unwrap();
        let mut stream = c.sql_stream(scan).await.unwrap();
        let mut rows = 0;
        while let Some(b) = stream.next().await {
            rows += b.unwrap().num_rows();
        }
        assert_eq!(rows, all);
    });
}

/// The sum of compute's metrics whose printed name (with its labels)
/// starts with `name`: one value, or a family's over its labels; 0 when
/// absent.
fn compute_metric(pg: &Playground, name: &str) -> f64 {
    let url = &pg.status_urls[pg.stores.len()];
    http(url, "GET", "/metrics", "")
        .1
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            l.strip_prefix(name)?
                .rsplit_once(' ')?
                .1
                .parse::<f64>()
                .ok()
        })
        .sum()
}

const DEADLINE_ERRORS: &str = r#"quarry_compute_statement_errors_total{kind="deadline"}"#;

/// A client that stops reading a streamed answer does not hold its query
/// past the deadline: when it reads again it gets what was buffered (at
/// most the read-ahead and the transport's buffers, far from the whole
/// answer), then the deadline's error.
#[test]
fn a_client_that_stops_reading_gets_the_deadline_error_when_it_reads_again() {
    let _serial = SERIAL.lock();
    let pg = streaming_playground();
    // 40 copies of lineitem's 60,175 rows, about 100 MB on the wire, far
    // more than compute's read-ahead and HTTP/2's and the sockets' buffers.
    let copies = 40;
    let one = "SELECT l_orderkey, l_linenumber, l_comment FROM lineitem";
    let union = vec![one; copies].join(" UNION ALL ");
    let all = 60175 * copies;
    runtime().block_on(async {
        use futures::StreamExt;
        let mut c = Client::connect(&pg.compute).await.unwrap();
        c.sql("SET statement_timeout = '1s'").await.unwrap();
        let deadlines = compute_metric(&pg, DEADLINE_ERRORS);
        let mut stream = c.sql_stream(&union).await.unwrap();
        let mut rows = stream.next().await.unwrap().unwrap().num_rows();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // By now compute has given the query up.
        assert_eq!(compute_metric(&pg, DEADLINE_ERRORS), deadlines + 1.0);
        let (more, e) = rows_until_error(&mut stream).await;
        rows += more;
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("deadline"), "{e}");
        assert!(rows < all / 2, "{rows} of {all} rows before the error");
        assert!(stream.next().await.is_none(), "nothing after the error");
        c.sql("RESET statement_timeout").await.unwrap();
        let n = c.sql("SELECT count(*) FROM lineitem").await.unwrap();
        assert_eq!(csv(&n), "count(*)\n60175\n");
    });
}

/// A streamed answer that fails partway inside a transaction rolls the
/// transaction back, as any failed statement in it does: COMMIT then says
/// so and commits nothing.
#[test]
fn a_streamed_error_in_a_transaction_rolls_it_back() {
    let _serial = SERIAL.lock();
    let pg = streaming_playground();
    pg.ok("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)");
    runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        c.sql("SET statement_timeout = '400ms'").await.unwrap();
        c.begin().await.unwrap();
        c.sql("INSERT INTO t VALUES (1, 1)").await.unwrap();
        // Each region's three batches take 600 ms, however many run at
        // once: the scan outlasts the 400 ms.
        on_every_store(&pg, "coprocessor_slow_batch", Some("sleep(200)"));
        // The error ends the stream, or comes instead of it when it is due
        // before the first batch (a busy machine).
        let e = match c
            .sql_stream("SELECT l_orderkey, l_linenumber FROM lineitem")
            .await
        {
            Ok(mut stream) => rows_until_error(&mut stream).await.1,
            Err(e) => e,
        };
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("rolled back"), "{e}");
        on_every_store(&pg, "coprocessor_slow_batch", None);
        let e = c.sql("SELECT count(*) FROM t").await.unwrap_err();
        assert!(e.to_string().contains("rolled back after an error"), "{e}");
        let e = c.commit().await.unwrap_err();
        assert!(e.to_string().contains("nothing was committed"), "{e}");
        assert!(e.to_string().contains("deadline"), "{e}");
        let n = c.sql("SELECT count(*) FROM t").await.unwrap();
        assert_eq!(csv(&n), "count(*)\n0\n");
    });
}

#[test]
fn a_sessions_statement_timeout_bounds_its_writes_too() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[]);
    pg.ok("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)");
    // Its region has a leader compute knows before anything is slowed.
    pg.ok("INSERT INTO t VALUES (0, 0)");
    pg.ok("CREATE TABLE wide (k BIGINT PRIMARY KEY, v BIGINT) WITH (split_handles = '10')");
    runtime().block_on(async {
        let mut a = Client::connect(&pg.compute).await.unwrap();
        let mut b = Client::connect(&pg.compute).await.unwrap();
        a.sql("SET statement_timeout = '300ms'").await.unwrap();
        // Every store applies committed entries half a second late.
        on_every_store(&pg, "apply_before", Some("sleep(500)"));

        // One region: a one-phase write, whose prewrite is its commit. If
        // it was sent before the time ran out it may still apply, and the
        // error must say so (checked below against what became of it).
        let t0 = Instant::now();
        let e = a.sql("INSERT INTO t VALUES (1, 1)").await.unwrap_err();
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("300ms"), "{e}");
        let hedged = e.to_string().contains("may or may not have committed");
        // 300 ms, and the rollback's try, at most a few applies.
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "took {:?}",
            t0.elapsed()
        );

        // Two regions, two phases: the prewrite ran out of time and was
        // rolled back, so nothing of it commits.
        let e = a
            .sql("INSERT INTO wide VALUES (1, 1), (20, 2)")
            .await
            .unwrap_err();
        assert!(matches!(e, quarry_client::Error::Deadline(_)), "{e:?}");
        assert!(e.to_string().contains("300ms"), "{e}");
        assert!(!e.to_string().contains("may or may not"), "{e}");

        // A session with the default timeout writes through the slow
        // applies; UPDATE and DELETE are bounded the same way (both over
        // the two regions: two phases, so a refused one commits nothing).
        b.sql("INSERT INTO wide VALUES (2, 2), (30, 3)")
            .await
            .unwrap();
        for sql in [
            "UPDATE wide SET v = v + 1",
            "DELETE FROM wide WHERE k IN (2, 30)",
        ] {
            let e = a.sql(sql).await.unwrap_err();
            assert!(
                matches!(e, quarry_client::Error::Deadline(_)),
                "{sql}: {e:?}"
            );
            assert!(e.to_string().contains("300ms"), "{sql}: {e}");
            assert!(!e.to_string().contains("may or may not"), "{sql}: {e}");
        }

        on_every_store(&pg, "apply_before", None);
        // The two-phase writes left nothing (their locks, if any, are read
        // past or rolled back after their TTL).
        assert_eq!(
            csv(&b.sql("SELECT k, v FROM wide ORDER BY k").await.unwrap()),
            "k,v\n2,2\n30,3\n"
        );
        // The one-phase write either committed or did not, whole; an error
        // that did not hedge was a write that did not commit.
        let t = csv(&b
            .sql("SELECT count(*) AS n, sum(v) AS s FROM t")
            .await
            .unwrap());
        assert!(t == "n,s\n1,0\n" || t == "n,s\n2,1\n", "{t}");
        assert!(
            hedged || t == "n,s\n1,0\n",
            "committed, but the error said nothing: {t}"
        );
        eprintln!("the one-phase INSERT that ran out of time: hedged {hedged}, rows {t:?}");
        // Within its time, a write under the short timeout succeeds.
        a.sql("INSERT INTO t VALUES (2, 2)").await.unwrap();
        a.sql("UPDATE wide SET v = v + 1 WHERE k = 30")
            .await
            .unwrap();
        assert_eq!(
            csv(&b.sql("SELECT k, v FROM wide ORDER BY k").await.unwrap()),
            "k,v\n2,2\n30,4\n"
        );
    });
}

#[test]
fn a_cancelled_query_stops_its_scans_on_the_stores_within_a_second() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    slow_scans(&pg);
    let cancelled = runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        // Run it until the stores are scanning for it, then drop it (and
        // its client): the client goes away as a cancelled statement or a
        // killed client does.
        let query = tokio::spawn(async move { c.sql(SLOW_QUERY).await.map(|_| ()) });
        until_scanning(&pg, || query.is_finished()).await;
        query.abort();
        assert!(query.await.is_err_and(|e| e.is_cancelled()));
        Instant::now()
    });
    let stopped = until_no_task_runs(&pg);
    assert!(
        stopped < Duration::from_secs(1),
        "stores scanned on for {stopped:?} after the cancel at {cancelled:?}"
    );
    on_every_store(&pg, "coprocessor_slow_batch", None);
    assert!(pg
        .ok("SELECT count(*) FROM lineitem")
        .starts_with("count(*)\n"));
}

/// An autocommit query starts at its GetFlightInfo
/// (`compute/src/flight/early.rs`): the stores scan for it before any
/// DoGet, its DoGet answers it exactly, a second DoGet of the ticket runs
/// it again, and a query whose DoGet never comes leaves the stores within
/// a second after the half second it waits. With the failpoint
/// `flight_early_start_off`, nothing runs before the DoGet.
#[test]
fn a_query_starts_at_its_get_flight_info_and_its_do_get_takes_it() {
    use arrow_flight::sql::client::FlightSqlServiceClient;

    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    let compute_status = pg.status_urls[pg.stores.len()].clone();
    runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let want = csv(&c.sql(SLOW_QUERY).await.unwrap());
        let channel = tonic::transport::Endpoint::from_shared(pg.compute.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut sql = FlightSqlServiceClient::new(channel);

        // Scans run before the DoGet; the DoGet takes the query.
        slow_scans(&pg);
        let info = sql.execute(SLOW_QUERY.into(), None).await.unwrap();
        until_scanning(&pg, || false).await;
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        assert_eq!(csv(&fetch_ticket(&mut sql, ticket.clone()).await), want);
        // The ticket again: the query runs again.
        on_every_store(&pg, "coprocessor_slow_batch", None);
        assert_eq!(csv(&fetch_ticket(&mut sql, ticket).await), want);

        // No DoGet: the started query is dropped, and its scans stop.
        slow_scans(&pg);
        sql.execute(SLOW_QUERY.into(), None).await.unwrap();
        until_scanning(&pg, || false).await;
        let stopped = until_stopped(&pg, Instant::now()).await;
        // Half a second for its DoGet (`early::EARLY_TTL`), then within a
        // second as any dropped query.
        assert!(
            stopped < Duration::from_millis(1500),
            "a query with no DoGet scanned on for {stopped:?}"
        );

        // Switched off: GetFlightInfo only plans.
        failpoint(&compute_status, "flight_early_start_off", Some("return"));
        let info = sql.execute(SLOW_QUERY.into(), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            running_now(&pg).await,
            0,
            "a scan ran before the DoGet with the early start off"
        );
        on_every_store(&pg, "coprocessor_slow_batch", None);
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        assert_eq!(csv(&fetch_ticket(&mut sql, ticket).await), want);
        failpoint(&compute_status, "flight_early_start_off", None);
    });
}

/// Flight's CancelFlightInfo, as a Flight SQL client sends it: a query
/// cancelled while it runs fails with CANCELLED and its scans on the
/// stores stop within a second; one cancelled before its DoGet fails;
/// one that finished is NOT_CANCELLABLE; an unknown one NOT_FOUND.
#[test]
fn cancel_flight_info_stops_a_running_query_and_its_scans_within_a_second() {
    use arrow_flight::sql::client::FlightSqlServiceClient;
    use arrow_flight::{CancelFlightInfoRequest, CancelStatus, FlightClient};
    use futures::TryStreamExt;

    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    runtime().block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(pg.compute.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut sql = FlightSqlServiceClient::new(channel.clone());
        let mut flight = FlightClient::new(channel);
        let cancel = |info: arrow_flight::FlightInfo| CancelFlightInfoRequest::new(info);

        // Finished: too late to cancel.
        let info = sql.execute("SELECT 1 AS one".into(), None).await.unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let batches = fetch_ticket(&mut sql, ticket).await;
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        let r = flight.cancel_flight_info(cancel(info)).await.unwrap();
        assert_eq!(r.status(), CancelStatus::NotCancellable);

        // Cancelled before its DoGet: the query its GetFlightInfo started
        // stops, and the DoGet fails.
        slow_scans(&pg);
        let info = sql.execute(SLOW_QUERY.into(), None).await.unwrap();
        let cancelled = Instant::now();
        let r = flight
            .cancel_flight_info(cancel(info.clone()))
            .await
            .unwrap();
        assert_eq!(r.status(), CancelStatus::Cancelled);
        let stopped = until_stopped(&pg, cancelled).await;
        assert!(
            stopped < Duration::from_secs(1),
            "stores scanned on for {stopped:?} after the cancel before the DoGet"
        );
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let e = match sql.do_get(ticket).await {
            Ok(s) => s
                .try_collect::<Vec<_>>()
                .await
                .map(|_| ())
                .unwrap_err()
                .to_string(),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("cancelled by its client"), "{e}");

        // Cancelled while it runs: it fails at once, the scans stop.
        let info = sql.execute(SLOW_QUERY.into(), None).await.unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let mut running = sql.clone();
        let query = tokio::spawn(async move {
            let t = running.do_get(ticket).await.map_err(|e| e.to_string())?;
            t.try_collect::<Vec<_>>().await.map_err(|e| e.to_string())
        });
        until_scanning(&pg, || query.is_finished()).await;
        let cancelled = Instant::now();
        let r = flight
            .cancel_flight_info(cancel(info.clone()))
            .await
            .unwrap();
        assert_eq!(r.status(), CancelStatus::Cancelled);
        let e = tokio::time::timeout(Duration::from_secs(5), query)
            .await
            .expect("the cancelled query still runs")
            .unwrap()
            .expect_err("a cancelled query answered");
        let failed_after = cancelled.elapsed();
        assert!(e.contains("cancelled by its client"), "{e}");
        assert!(
            failed_after < Duration::from_secs(1),
            "the query failed {failed_after:?} after its cancel"
        );
        let stopped = until_stopped(&pg, cancelled).await;
        assert!(
            stopped < Duration::from_secs(1),
            "stores scanned on for {stopped:?} after the cancel"
        );
        // Cancelling again says so again.
        let r = flight.cancel_flight_info(cancel(info)).await.unwrap();
        assert_eq!(r.status(), CancelStatus::Cancelled);

        // A FlightInfo this process never made.
        let mut made_up = sql.execute("SELECT 2 AS two".into(), None).await.unwrap();
        let mut t = made_up.endpoint[0].ticket.clone().unwrap();
        t.ticket = flip_cancel_key(&t.ticket);
        made_up.endpoint[0].ticket = Some(t);
        let e = flight
            .cancel_flight_info(cancel(made_up))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("no query with this FlightInfo"),
            "{e}"
        );
    });
    on_every_store(&pg, "coprocessor_slow_batch", None);
    assert!(pg
        .ok("SELECT count(*) FROM lineitem")
        .starts_with("count(*)\n"));
}

/// A statement ticket with another cancel key than the one compute drew.
fn flip_cancel_key(ticket: &prost::bytes::Bytes) -> prost::bytes::Bytes {
    use arrow_flight::sql::{Any, ProstMessageExt, TicketStatementQuery};
    use prost::Message;
    let any = Any::decode(ticket.clone()).unwrap();
    let statement: TicketStatementQuery = any.unpack().unwrap().unwrap();
    let mut t = quarry_proto::compute::Ticket::decode(statement.statement_handle).unwrap();
    t.cancel_key ^= 0x5555;
    let statement = TicketStatementQuery {
        statement_handle: t.encode_to_vec().into(),
    };
    statement.as_any().encode_to_vec().into()
}

/// A streamed answer (compute sends the regions' rows as they come) that
/// the client drops after its first batch: the stores stop scanning for
/// it within a second (issue 45: cancels must reach the stores, not wait
/// for the statement's deadline).
#[test]
fn a_streamed_answer_dropped_by_its_client_stops_the_scans_within_a_second() {
    let _serial = SERIAL.lock();
    let pg = streaming_playground();
    slow_scans(&pg);
    let dropped = runtime().block_on(async {
        use futures::StreamExt;
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut stream = c
            .sql_stream("SELECT l_orderkey, l_linenumber FROM lineitem")
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("no batch within 30 s");
        assert!(matches!(first, Some(Ok(_))), "{first:?}");
        assert!(
            running_now(&pg).await > 0,
            "the stores were not scanning any more"
        );
        drop(stream);
        drop(c);
        Instant::now()
    });
    let stopped = until_no_task_runs(&pg);
    assert!(
        stopped < Duration::from_secs(1),
        "stores scanned on for {stopped:?} after the drop at {dropped:?}"
    );
    on_every_store(&pg, "coprocessor_slow_batch", None);
}

/// `quarry_compute_mpp_task_streams_running` of each compute process's
/// status URL: the partitions of distributed queries' stage tasks each
/// one is streaming.
fn mpp_tasks(urls: &[String]) -> Vec<i64> {
    urls.iter()
        .map(|url| gauge(url, "quarry_compute_mpp_task_streams_running"))
        .collect()
}

/// A query spread over three compute processes (MPP, issue 43) that its
/// client drops while every process runs a task of it: every task on
/// every compute process and every scan on the stores stops within a
/// second (`datafusion-distributed` ends the tasks when their coordinator
/// drops its side of them; each task's region scans stop with it).
#[test]
fn a_cancelled_distributed_query_stops_every_task_and_scan_within_a_second() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    let a = pg.extra_compute(&["--mpp", "force"]);
    let b = pg.extra_compute(&["--mpp", "force"]);
    let computes = vec![
        pg.status_urls[pg.stores.len()].clone(),
        a.status_url.clone(),
        b.status_url.clone(),
    ];
    runtime().block_on(async {
        let mut c = Client::connect(&a.url).await.unwrap();
        until_spread_over_three(&mut c).await;
        slow_scans(&pg);
        let query = tokio::spawn(async move { c.sql(SLOW_QUERY).await.map(|_| ()) });
        until_scanning(&pg, || query.is_finished()).await;
        // Every compute process runs one of its scan's three tasks.
        until_every_process_runs_a_task(&computes, || query.is_finished()).await;
        query.abort();
        assert!(query.await.is_err_and(|e| e.is_cancelled()));
    });
    let cancelled = Instant::now();
    let stores = &pg.status_urls[..pg.stores.len()];
    loop {
        let (scans, tasks) = (running_tasks(stores), mpp_tasks(&computes));
        if scans == 0 && tasks.iter().all(|n| *n == 0) {
            break;
        }
        assert!(
            cancelled.elapsed() < Duration::from_secs(1),
            "a second after the cancel: {scans} scans on the stores, tasks per compute process {tasks:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The processes go on: the query answers in full once scans are quick.
    on_every_store(&pg, "coprocessor_slow_batch", None);
    let (ok, out) = {
        let o = std::process::Command::new(QUARRY)
            .args(["sql", "--addr", &a.url, "--format", "csv", SLOW_QUERY])
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert!(ok, "{out}");
    assert_eq!(out, pg.ok(SLOW_QUERY));
}

/// Waits until `c`'s compute process plans [`SLOW_QUERY`] in three
/// tasks (at most 30 s): the membership list takes a heartbeat or two to
/// hold all three compute processes.
async fn until_spread_over_three(c: &mut Client) {
    let t0 = Instant::now();
    loop {
        let plan = csv(&c.sql(&format!("EXPLAIN {SLOW_QUERY}")).await.unwrap());
        if plan.contains("tasks=3") {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{plan}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until every compute process at `urls` streams a task of a
/// distributed query (at most 10 s), failing if `finished` says the query
/// ended first.
async fn until_every_process_runs_a_task(urls: &[String], finished: impl Fn() -> bool) {
    let t0 = Instant::now();
    loop {
        let u = urls.to_vec();
        let tasks = tokio::task::spawn_blocking(move || mpp_tasks(&u))
            .await
            .unwrap();
        if tasks.iter().all(|n| *n > 0) {
            return;
        }
        assert!(!finished(), "finished before every process ran a task");
        assert!(t0.elapsed() < Duration::from_secs(10), "tasks: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A worker killed while every compute process runs a task of a
/// distributed query (MPP, issue 43): the coordinator's streams from it
/// break before anything has reached the client, so the coordinator finds
/// it unreachable, leaves it out, and runs the query once more on the
/// other two (TiFlash's rule, `compute/src/engine.rs`). The client gets
/// the exact answer, and `quarry_compute_mpp_retries_total` counts the
/// second run.
#[test]
fn a_worker_killed_mid_query_is_left_out_and_the_query_answers_exactly() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    let a = pg.extra_compute(&["--mpp", "force"]);
    let mut b = pg.extra_compute(&["--mpp", "force"]);
    let computes = vec![
        pg.status_urls[pg.stores.len()].clone(),
        a.status_url.clone(),
        b.status_url.clone(),
    ];
    let retries = || gauge(&a.status_url, "quarry_compute_mpp_retries_total");
    let before = retries();
    let (want, got) = runtime().block_on(async {
        let mut c = Client::connect(&a.url).await.unwrap();
        until_spread_over_three(&mut c).await;
        let want = csv(&c.sql(SLOW_QUERY).await.unwrap());
        slow_scans(&pg);
        let query = tokio::spawn(async move { c.sql(SLOW_QUERY).await.map(|b| csv(&b)) });
        until_scanning(&pg, || query.is_finished()).await;
        until_every_process_runs_a_task(&computes, || query.is_finished()).await;
        b.kill();
        // Quick scans again, for the second run.
        on_every_store(&pg, "coprocessor_slow_batch", None);
        let got = tokio::time::timeout(Duration::from_secs(60), query)
            .await
            .expect("no answer within 60 s of the kill")
            .unwrap();
        (want, got)
    });
    let got = got.unwrap_or_else(|e| {
        panic!("the query failed instead of running again without the killed worker: {e}")
    });
    assert_eq!(got, want);
    assert_eq!(
        retries(),
        before + 1,
        "one run again, without the killed worker"
    );
}
