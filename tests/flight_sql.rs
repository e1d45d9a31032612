//! The Flight SQL contract, RPC by RPC, against a real compute process:
//! each call gets the one gRPC status it must (OK for what Quarry serves,
//! UNIMPLEMENTED for what it does not, INVALID_ARGUMENT for bad input),
//! and the OK ones answer what a driver expects of them.

mod common;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{
    ActionBeginSavepointRequest, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys,
    CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementSubstraitPlan, CommandStatementUpdate, DoPutPreparedStatementResult,
    DoPutUpdateResult, ProstMessageExt,
};
use arrow_flight::{
    Action, Criteria, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, Ticket,
};
use common::*;
use futures::TryStreamExt;
use prost::bytes::Bytes;
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Status};

type Client = FlightServiceClient<Channel>;

fn cmd(c: &impl ProstMessageExt) -> FlightDescriptor {
    FlightDescriptor::new_cmd(c.as_any().encode_to_vec())
}

async fn info(c: &mut Client, command: &impl ProstMessageExt) -> Result<FlightInfo, Status> {
    Ok(c.get_flight_info(cmd(command)).await?.into_inner())
}

/// Every batch of the info's one endpoint.
async fn fetch(c: &mut Client, info: &FlightInfo) -> Result<Vec<RecordBatch>, Status> {
    assert_eq!(info.endpoint.len(), 1);
    assert!(
        info.endpoint[0].location.is_empty(),
        "reuse this connection"
    );
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let stream = c.do_get(ticket).await?.into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(Status::from)
}

async fn get(c: &mut Client, command: &impl ProstMessageExt) -> Result<Vec<RecordBatch>, Status> {
    let i = info(c, command).await?;
    fetch(c, &i).await
}

/// A Flight SQL action's one result, unpacked from its `Any`.
async fn action<R: ProstMessageExt + Default>(
    c: &mut Client,
    name: &str,
    body: &impl ProstMessageExt,
) -> Result<Option<R>, Status> {
    let a = Action::new(name, body.as_any().encode_to_vec());
    let results: Vec<arrow_flight::Result> =
        c.do_action(a).await?.into_inner().try_collect().await?;
    Ok(match results.first() {
        Some(r) => Any::decode(r.body.clone()).unwrap().unpack::<R>().unwrap(),
        None => None,
    })
}

/// DoPut of `command` with `rows` (if any) after it; the one PutResult's
/// app metadata.
async fn put(
    c: &mut Client,
    command: &impl ProstMessageExt,
    rows: Option<RecordBatch>,
) -> Result<Bytes, Status> {
    let data: Vec<FlightData> = match rows {
        Some(rows) => FlightDataEncoderBuilder::new()
            .with_flight_descriptor(Some(cmd(command)))
            .with_schema(rows.schema())
            .build(futures::stream::iter([Ok(rows)]))
            .try_collect()
            .await
            .unwrap(),
        None => vec![FlightData {
            flight_descriptor: Some(cmd(command)),
            ..Default::default()
        }],
    };
    let mut results = c.do_put(futures::stream::iter(data)).await?.into_inner();
    let r = results.message().await?.expect("a PutResult");
    Ok(r.app_metadata)
}

fn strings(b: &RecordBatch, column: &str) -> Vec<String> {
    let a = arrow::compute::cast(b.column_by_name(column).unwrap(), &DataType::Utf8).unwrap();
    let a = a.as_string::<i32>();
    (0..a.len()).map(|i| a.value(i).to_string()).collect()
}

fn ints(id: Vec<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(id))]).unwrap()
}

fn code<T: std::fmt::Debug>(r: Result<T, Status>) -> Code {
    match r {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    }
}

#[test]
fn every_flight_sql_rpc_answers_its_one_status() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR, d DECIMAL(10,2))");
    pg.ok("CREATE TABLE empty_one (x BIGINT)");
    runtime().block_on(async {
        let channel = pg.compute_channel().await;
        let mut c = FlightServiceClient::new(channel);

        // Statements: an update answers its count; a query its rows, and a
        // query of no rows still its schema.
        let insert = CommandStatementUpdate {
            query: "INSERT INTO t VALUES (1, 'one', 1.00), (2, 'two', 2.50)".into(),
            transaction_id: None,
        };
        let meta = put(&mut c, &insert, None).await.unwrap();
        assert_eq!(DoPutUpdateResult::decode(meta).unwrap().record_count, 2);
        let q = CommandStatementQuery {
            query: "SELECT x FROM empty_one".into(),
            transaction_id: None,
        };
        let i = info(&mut c, &q).await.unwrap();
        let schema = Schema::try_from(i.clone()).unwrap();
        assert_eq!(schema.field(0).name(), "x");
        let rows: usize = fetch(&mut c, &i)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 0);
        let bad = CommandStatementQuery {
            query: "SELECT nope FROM t".into(),
            transaction_id: None,
        };
        let e = info(&mut c, &bad).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(e.message().contains("nope"), "{e}");

        // Catalog commands.
        let b = get(&mut c, &CommandGetCatalogs {}).await.unwrap();
        assert_eq!(strings(&b[0], "catalog_name"), ["quarry"]);
        let b = get(&mut c, &CommandGetDbSchemas::default()).await.unwrap();
        assert_eq!(strings(&b[0], "db_schema_name"), ["public"]);
        let tables = CommandGetTables {
            table_name_filter_pattern: Some("t%".into()),
            include_schema: true,
            ..Default::default()
        };
        let b = get(&mut c, &tables).await.unwrap();
        assert_eq!(strings(&b[0], "table_name"), ["t"]);
        assert_eq!(strings(&b[0], "table_type"), ["TABLE"]);
        let ipc = b[0]
            .column_by_name("table_schema")
            .unwrap()
            .as_binary::<i32>()
            .value(0)
            .to_vec();
        let t_schema = arrow::ipc::convert::try_schema_from_ipc_buffer(&ipc).unwrap();
        let names: Vec<_> = t_schema.fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["id", "v", "d"]);
        assert_eq!(t_schema.field(2).data_type(), &DataType::Decimal128(10, 2));
        let all = get(&mut c, &CommandGetTables::default()).await.unwrap();
        assert_eq!(strings(&all[0], "table_name"), ["empty_one", "t"]);
        let b = get(&mut c, &CommandGetTableTypes {}).await.unwrap();
        assert_eq!(strings(&b[0], "table_type"), ["TABLE", "VIEW"]);
        let pk = CommandGetPrimaryKeys {
            table: "t".into(),
            ..Default::default()
        };
        let b = get(&mut c, &pk).await.unwrap();
        assert_eq!(strings(&b[0], "column_name"), ["id"]);
        let no_pk = CommandGetPrimaryKeys {
            table: "empty_one".into(),
            ..Default::default()
        };
        let rows: usize = get(&mut c, &no_pk)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 0);
        let b = get(&mut c, &CommandGetXdbcTypeInfo { data_type: None })
            .await
            .unwrap();
        let mut types = strings(&b[0], "type_name");
        types.sort();
        assert_eq!(
            types,
            ["BIGINT", "BOOLEAN", "DATE", "DECIMAL", "DOUBLE", "VARCHAR"]
        );
        let b = get(&mut c, &CommandGetSqlInfo { info: vec![] })
            .await
            .unwrap();
        assert!(b[0].num_rows() >= 10);

        // Prepared statements: create, bind, execute, close.
        let create = ActionCreatePreparedStatementRequest {
            query: "SELECT v FROM t WHERE id = ?".into(),
            transaction_id: None,
        };
        let p: ActionCreatePreparedStatementResult =
            action(&mut c, "CreatePreparedStatement", &create)
                .await
                .unwrap()
                .unwrap();
        let params = arrow::ipc::convert::try_schema_from_ipc_buffer(&p.parameter_schema).unwrap();
        assert_eq!(params.field(0).data_type(), &DataType::Int64);
        let data = arrow::ipc::convert::try_schema_from_ipc_buffer(&p.dataset_schema).unwrap();
        assert_eq!(data.field(0).name(), "v");
        let unbound = CommandPreparedStatementQuery {
            prepared_statement_handle: p.prepared_statement_handle.clone(),
        };
        let e = info(&mut c, &unbound).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(e.message().contains("none were bound"), "{e}");
        let meta = put(&mut c, &unbound, Some(ints(vec![2]))).await.unwrap();
        let bound = DoPutPreparedStatementResult::decode(meta)
            .unwrap()
            .prepared_statement_handle
            .expect("a handle carrying the values");
        let query = CommandPreparedStatementQuery {
            prepared_statement_handle: bound,
        };
        let b = get(&mut c, &query).await.unwrap();
        assert_eq!(strings(&b[0], "v"), ["two"]);
        let close = ActionClosePreparedStatementRequest {
            prepared_statement_handle: p.prepared_statement_handle,
        };
        let closed =
            action::<ActionClosePreparedStatementRequest>(&mut c, "ClosePreparedStatement", &close)
                .await;
        assert_eq!(code(closed), Code::Ok);

        // A prepared update runs once per parameter row.
        let create = ActionCreatePreparedStatementRequest {
            query: "DELETE FROM t WHERE id = $1".into(),
            transaction_id: None,
        };
        let p: ActionCreatePreparedStatementResult =
            action(&mut c, "CreatePreparedStatement", &create)
                .await
                .unwrap()
                .unwrap();
        assert!(p.dataset_schema.is_empty(), "an update answers no rows");
        let update = CommandPreparedStatementUpdate {
            prepared_statement_handle: p.prepared_statement_handle,
        };
        let meta = put(&mut c, &update, Some(ints(vec![1, 2, 3])))
            .await
            .unwrap();
        assert_eq!(DoPutUpdateResult::decode(meta).unwrap().record_count, 2);
        assert_eq!(pg.ok("SELECT count(*) AS n FROM t"), "n\n0\n");
        let garbage = CommandPreparedStatementQuery {
            prepared_statement_handle: Bytes::from_static(b"\xff\xff"),
        };
        assert_eq!(code(info(&mut c, &garbage).await), Code::InvalidArgument);

        // What Quarry does not serve.
        let unimplemented = [
            (
                "GetExportedKeys",
                code(info(&mut c, &CommandGetExportedKeys::default()).await),
            ),
            (
                "GetImportedKeys",
                code(info(&mut c, &CommandGetImportedKeys::default()).await),
            ),
            (
                "GetCrossReference",
                code(info(&mut c, &CommandGetCrossReference::default()).await),
            ),
            (
                "StatementSubstraitPlan",
                code(info(&mut c, &CommandStatementSubstraitPlan::default()).await),
            ),
            (
                "StatementIngest",
                code(put(&mut c, &CommandStatementIngest::default(), None).await),
            ),
            (
                "BeginSavepoint",
                code(
                    action::<ActionBeginSavepointRequest>(
                        &mut c,
                        "BeginSavepoint",
                        &ActionBeginSavepointRequest::default(),
                    )
                    .await,
                ),
            ),
            (
                "ListFlights",
                code(c.list_flights(Criteria::default()).await),
            ),
            (
                "GetSchema",
                code(c.get_schema(cmd(&CommandGetCatalogs {})).await),
            ),
            (
                "PollFlightInfo",
                code(c.poll_flight_info(cmd(&CommandGetCatalogs {})).await),
            ),
        ];
        for (rpc, got) in unimplemented {
            assert_eq!(got, Code::Unimplemented, "{rpc}");
        }
        // Without [security] there are no logins: a handshake succeeds and
        // hands out no token (tests/security.rs logs in for real).
        let shake = c
            .handshake(futures::stream::iter([HandshakeRequest::default()]))
            .await
            .unwrap();
        assert!(shake.metadata().get("authorization").is_none());
        let garbage_ticket = c.do_get(Ticket::new(b"\x01\x02".to_vec())).await;
        assert_ne!(code(garbage_ticket), Code::Ok);

        // Cancels: ListActions names Flight's; Flight SQL's older
        // CancelQuery answers for a query that finished NOT_CANCELLABLE (3)
        // and for one that has not run yet CANCELLED (1), after which its
        // DoGet fails (tests/failpoints.rs cancels running queries).
        let actions: Vec<_> = c
            .list_actions(arrow_flight::Empty {})
            .await
            .unwrap()
            .into_inner()
            .try_collect()
            .await
            .unwrap();
        assert!(
            actions.iter().any(|a| a.r#type == "CancelFlightInfo"),
            "{actions:?}"
        );
        let query = CommandStatementQuery {
            query: "SELECT 7 AS seven".into(),
            transaction_id: None,
        };
        let done = info(&mut c, &query).await.unwrap();
        fetch(&mut c, &done).await.unwrap();
        let pending = info(&mut c, &query).await.unwrap();
        for (flight_info, want) in [(&done, 3), (&pending, 1)] {
            let request = arrow_flight::sql::ActionCancelQueryRequest {
                info: flight_info.encode_to_vec().into(),
            };
            let r = action::<arrow_flight::sql::ActionCancelQueryResult>(
                &mut c,
                "CancelQuery",
                &request,
            )
            .await
            .unwrap()
            .expect("a result");
            assert_eq!(r.result, want);
        }
        let e = fetch(&mut c, &pending).await.unwrap_err();
        assert_eq!(e.code(), Code::Cancelled, "{e}");
        assert!(e.message().contains("cancelled by its client"), "{e}");
    });
}

/// DoPut of the statement update `sql`, sending `cookie` as the `cookie`
/// header: its count and the answer's `set-cookie` header.
async fn put_sql(
    c: &mut Client,
    sql: &str,
    cookie: Option<&str>,
) -> Result<(i64, Option<String>), Status> {
    let command = CommandStatementUpdate {
        query: sql.into(),
        transaction_id: None,
    };
    let data = vec![FlightData {
        flight_descriptor: Some(cmd(&command)),
        ..Default::default()
    }];
    let mut req = tonic::Request::new(futures::stream::iter(data));
    if let Some(v) = cookie {
        req.metadata_mut().insert("cookie", v.parse().unwrap());
    }
    let answer = c.do_put(req).await?;
    let set = answer
        .metadata()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string());
    let r = answer.into_inner().message().await?.expect("a PutResult");
    let count = DoPutUpdateResult::decode(r.app_metadata)
        .unwrap()
        .record_count;
    Ok((count, set))
}

/// The rows of `tc`, as a query sending `cookie` counts them.
async fn count_tc(c: &mut Client, cookie: Option<&str>) -> i64 {
    let q = CommandStatementQuery {
        query: "SELECT count(*) AS n FROM tc".into(),
        transaction_id: None,
    };
    let mut req = tonic::Request::new(cmd(&q));
    if let Some(v) = cookie {
        req.metadata_mut().insert("cookie", v.parse().unwrap());
    }
    let info = c.get_flight_info(req).await.unwrap().into_inner();
    let batches = fetch(c, &info).await.unwrap();
    strings(&batches[0], "n")[0].parse().unwrap()
}

/// The `name=value` of a `set-cookie` header that sets a transaction.
fn txn_cookie(set: Option<String>) -> String {
    let set = set.expect("a set-cookie header");
    let pair = set.split(';').next().unwrap().to_string();
    assert!(
        pair.starts_with("quarry_txn=") && pair.len() == "quarry_txn=".len() + 16,
        "{set}"
    );
    pair
}

/// Clients that send no transaction ids but keep cookies (the JDBC driver)
/// run BEGIN, COMMIT and ROLLBACK as statements: the transaction rides in
/// a cookie; a client without a cookie jar cannot begin one it would lose,
/// and a cookie whose transaction is gone never lets a statement run
/// outside it.
#[test]
fn statements_without_transaction_ids_run_in_the_cookies_transaction() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE tc (id BIGINT PRIMARY KEY, v BIGINT)");
    runtime().block_on(async {
        let mut c = FlightServiceClient::new(pg.compute_channel().await);
        // No cookie jar: BEGIN is refused as before, and the answer offers
        // the probe cookie.
        let e = put_sql(&mut c, "BEGIN", None).await.unwrap_err();
        assert!(e.message().contains("this request has none"), "{e}");
        let (n, set) = put_sql(&mut c, "COMMIT", None).await.unwrap();
        assert_eq!(n, 0);
        assert!(set.unwrap().starts_with("quarry_jar=1"));

        let jar = "quarry_jar=1";
        let (_, set) = put_sql(&mut c, "BEGIN", Some(jar)).await.unwrap();
        let first = format!("{jar}; {}", txn_cookie(set));
        let cookie = Some(first.as_str());
        let (n, set) = put_sql(&mut c, "INSERT INTO tc VALUES (1, 10), (2, 20)", cookie)
            .await
            .unwrap();
        assert_eq!((n, set), (2, None));
        assert_eq!(count_tc(&mut c, cookie).await, 2, "reads its own writes");
        assert_eq!(count_tc(&mut c, None).await, 0, "others do not see them");
        let e = put_sql(&mut c, "BEGIN", cookie).await.unwrap_err();
        assert!(e.message().contains("already open"), "{e}");
        let (_, set) = put_sql(&mut c, "/* done */ COMMIT", cookie).await.unwrap();
        assert!(set.unwrap().contains("Max-Age=0"), "COMMIT expires it");
        assert_eq!(count_tc(&mut c, None).await, 2);

        // The cookie's transaction has ended: statements fail rather than
        // commit on their own; COMMIT says it committed nothing; ROLLBACK
        // clears the cookie.
        let e = put_sql(&mut c, "INSERT INTO tc VALUES (3, 30)", cookie)
            .await
            .unwrap_err();
        assert!(e.message().contains("no open transaction"), "{e}");
        let e = put_sql(&mut c, "COMMIT", cookie).await.unwrap_err();
        assert!(e.message().contains("committed nothing"), "{e}");
        let (_, set) = put_sql(&mut c, "ROLLBACK", cookie).await.unwrap();
        assert!(set.unwrap().contains("Max-Age=0"));
        assert_eq!(count_tc(&mut c, None).await, 2);

        // BEGIN over a stale cookie opens a new transaction; a failed
        // statement aborts it, and ROLLBACK still ends it and undoes its
        // writes.
        let (_, set) = put_sql(&mut c, "BEGIN", cookie).await.unwrap();
        let second = format!("{jar}; {}", txn_cookie(set));
        assert_ne!(second, first);
        let cookie = Some(second.as_str());
        put_sql(&mut c, "DELETE FROM tc WHERE id = 1", cookie)
            .await
            .unwrap();
        assert_eq!(count_tc(&mut c, cookie).await, 1);
        assert_eq!(count_tc(&mut c, None).await, 2);
        let e = put_sql(&mut c, "INSERT INTO tc VALUES (2, 99)", cookie)
            .await
            .unwrap_err();
        assert!(e.message().contains("duplicate"), "{e}");
        let e = put_sql(&mut c, "INSERT INTO tc VALUES (5, 50)", cookie)
            .await
            .unwrap_err();
        assert!(e.message().contains("rolled back"), "{e}");
        let (_, set) = put_sql(&mut c, "ROLLBACK", cookie).await.unwrap();
        assert!(set.unwrap().contains("Max-Age=0"));
        assert_eq!(count_tc(&mut c, None).await, 2);
    });
}

/// Compute processes keep the catalog between statements
/// (`compute/src/catalog_cache.rs`). A DDL made through one is seen by
/// the next statement sent to another, and a query planned over a kept
/// catalog that a DDL elsewhere changed before its snapshot never reads
/// with the old definitions: it is planned again, or, when its announced
/// columns changed, fails with a conflict to run it again.
/// Longer than a query started by its GetFlightInfo waits for its DoGet
/// (half a second, `compute/src/flight/early.rs`).
const EARLY_TTL_PASSED: Duration = Duration::from_millis(700);

#[test]
fn a_compute_process_sees_ddl_made_through_another_and_checks_plans_at_their_snapshot() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "1"]);
    let other = pg.extra_compute(&[]);
    let sql_at = |addr: &str, sql: &str| {
        let out = std::process::Command::new(QUARRY)
            .args(["sql", "--addr", addr, "--format", "csv", sql])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    pg.ok("CREATE TABLE kc (a BIGINT PRIMARY KEY, b BIGINT)");
    pg.ok("INSERT INTO kc VALUES (1, 10), (2, 20)");
    let (ok, out, err) = sql_at(&other.url, "SELECT * FROM kc ORDER BY a");
    assert!(ok, "{err}");
    assert_eq!(out, "a,b\n1,10\n2,20\n");

    // The other process kept the catalog; each DDL here shows there at
    // once: a new column, a new table, a dropped one, a replaced view.
    pg.ok("ALTER TABLE kc ADD COLUMN c BIGINT DEFAULT 7");
    let (ok, out, err) = sql_at(&other.url, "SELECT * FROM kc ORDER BY a");
    assert!(ok, "{err}");
    assert_eq!(out, "a,b,c\n1,10,7\n2,20,7\n");
    pg.ok("CREATE TABLE kc2 (x BIGINT)");
    let (ok, out, err) = sql_at(&other.url, "SELECT count(*) AS n FROM kc2");
    assert!(ok, "{err}");
    assert_eq!(out, "n\n0\n");
    pg.ok("DROP TABLE kc2");
    let (ok, _, err) = sql_at(&other.url, "SELECT count(*) AS n FROM kc2");
    assert!(!ok && err.contains("kc2"), "{err}");
    pg.ok("CREATE VIEW kv AS SELECT a FROM kc");
    let (ok, out, err) = sql_at(&other.url, "SELECT * FROM kv ORDER BY a");
    assert!(ok, "{err}");
    assert_eq!(out, "a\n1\n2\n");
    pg.ok("CREATE OR REPLACE VIEW kv AS SELECT a, b FROM kc");
    let (ok, out, err) = sql_at(&other.url, "SELECT * FROM kv ORDER BY a");
    assert!(ok, "{err}");
    assert_eq!(out, "a,b\n1,10\n2,20\n");

    runtime().block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(other.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = FlightServiceClient::new(channel);
        let query = |q: &str| CommandStatementQuery {
            query: q.into(),
            transaction_id: None,
        };
        // Planned there (GetFlightInfo), then a DDL here, then run there
        // (DoGet). Its columns did not change: planned again, it reads
        // the row written after the DDL. (The query its GetFlightInfo
        // started waits half a second for its DoGet: a DoGet later than
        // that runs the ticket afresh, as one at another process does;
        // `compute/src/flight/early.rs`.)
        let narrow = info(&mut c, &query("SELECT a, b FROM kc ORDER BY a"))
            .await
            .unwrap();
        tokio::time::sleep(EARLY_TTL_PASSED).await;
        pg.ok("ALTER TABLE kc ADD COLUMN d BIGINT");
        pg.ok("INSERT INTO kc (a, b) VALUES (3, 30)");
        let batches = fetch(&mut c, &narrow).await.unwrap();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 3);
        // Its columns changed (SELECT * over a dropped column): it must
        // not answer with the columns it announced, nor with others.
        let wide = info(&mut c, &query("SELECT * FROM kc ORDER BY a"))
            .await
            .unwrap();
        tokio::time::sleep(EARLY_TTL_PASSED).await;
        pg.ok("ALTER TABLE kc DROP COLUMN d");
        let e = fetch(&mut c, &wide).await.unwrap_err();
        assert_eq!(e.code(), Code::Aborted, "{e}");
        assert!(e.message().contains("run it again"), "{e}");
        // And run again, it answers with the new columns.
        let again = get(&mut c, &query("SELECT * FROM kc ORDER BY a"))
            .await
            .unwrap();
        assert_eq!(again[0].num_columns(), 3);
    });
}
