//! Arrow Flight SQL: how clients talk to compute.
//!
//! * `GetFlightInfo(CommandStatementQuery)` plans the SQL (errors surface
//!   here, with the right gRPC code) and answers with the result schema and
//!   one endpoint whose ticket carries the statement. Statements that are
//!   not queries (CREATE, INSERT, DROP, SHOW, EXPLAIN) run right away and
//!   their small result rides in the ticket.
//! * `DoGet(TicketStatementQuery)` runs the statement and streams Arrow
//!   record batches (schema first, even for zero rows). The plan
//!   GetFlightInfo made waits for it in a small cache (a minute at most,
//!   taken once, checked against the ticket's SQL), so a query is planned
//!   once; a DoGet that reaches another compute process, or comes late,
//!   plans the ticket's SQL again. No answer depends on the cache: compute
//!   stays stateless as far as clients can tell.
//! * `DoPut(CommandStatementUpdate)` runs DDL/DML and answers the row count.
//! * Transactions: `BeginTransaction` opens one (`session.rs`) and answers
//!   its id; statements carrying that `transaction_id` (queries, through
//!   their ticket, and updates) run in it; `EndTransaction` commits or
//!   rolls it back. `GetSqlInfo` says so, which is what ADBC's
//!   `autocommit=False` and JDBC's `setAutoCommit(false)` look for.
//! * The client library's typed requests arrive as SQL, like any client's.
//! * Everything else answers UNIMPLEMENTED, which ADBC's Python driver
//!   expects (it falls back from prepared statements on UNIMPLEMENTED).
//! * The endpoint's location list is empty: "reuse this connection".

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult, ActionEndTransactionRequest,
    Command, CommandGetSqlInfo, CommandStatementQuery, CommandStatementUpdate, EndTransaction,
    ProstMessageExt, SqlInfo, SqlSupportedTransaction, SqlTransactionIsolationLevel,
    TicketStatementQuery,
};
use arrow_flight::{Action, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::{Stream, TryStreamExt};
use prost::Message;
use quarry_proto::compute::{ticket, Ticket as QuarryTicket};
use tonic::{Request, Response, Status};

use crate::df::PlannedQuery;
use crate::engine::{Prepared, QueryEngine, QueryOutput};
use crate::session::{self, OpenTxn};
use crate::Error;

pub struct FlightSqlServer {
    engine: Arc<QueryEngine>,
    plans: PlanCache,
}

impl FlightSqlServer {
    pub fn new(engine: Arc<QueryEngine>) -> Self {
        FlightSqlServer {
            engine,
            plans: PlanCache::default(),
        }
    }
}

/// How long a plan waits for its DoGet.
const PLAN_TTL: Duration = Duration::from_secs(60);
/// At most this many plans wait (clients that only ask for schemas).
const MAX_PLANS: usize = 256;

/// Plans made by GetFlightInfo, waiting for their DoGet.
#[derive(Default)]
struct PlanCache {
    inner: Mutex<PlanCacheInner>,
}

#[derive(Default)]
struct PlanCacheInner {
    next: u64,
    /// handle → (made at, the SQL, the plan)
    plans: HashMap<u64, (Instant, String, Box<PlannedQuery>)>,
}

impl PlanCache {
    /// Keeps `plan` and returns its handle (never 0).
    fn put(&self, sql: &str, plan: Box<PlannedQuery>) -> u64 {
        let mut c = self.inner.lock();
        c.plans.retain(|_, (made, ..)| made.elapsed() < PLAN_TTL);
        if c.plans.len() >= MAX_PLANS {
            let oldest = c
                .plans
                .iter()
                .min_by_key(|(_, (made, ..))| *made)
                .map(|(h, _)| *h);
            if let Some(h) = oldest {
                c.plans.remove(&h);
            }
        }
        c.next += 1;
        let handle = c.next;
        c.plans
            .insert(handle, (Instant::now(), sql.to_string(), plan));
        handle
    }

    /// Takes the plan kept under `handle` for `sql`, if it is still here.
    fn take(&self, handle: u64, sql: &str) -> Option<Box<PlannedQuery>> {
        let mut c = self.inner.lock();
        match c.plans.get(&handle) {
            Some((made, kept, _)) if kept == sql && made.elapsed() < PLAN_TTL => {
                c.plans.remove(&handle).map(|(.., plan)| plan)
            }
            _ => None,
        }
    }
}

fn flight_info(
    schema: &SchemaRef,
    t: QuarryTicket,
    desc: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    let handle = t.encode_to_vec();
    let ticket = TicketStatementQuery {
        statement_handle: handle.into(),
    };
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
    Ok(FlightInfo::new()
        .try_with_schema(schema.as_ref())
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(desc)
        .with_total_records(-1))
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send + 'static>>;

fn stream(schema: SchemaRef, batches: Vec<RecordBatch>) -> DoGetStream {
    let batches = futures::stream::iter(batches.into_iter().map(Ok));
    Box::pin(
        FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(|e| Status::internal(format!("encoding results: {e}"))),
    )
}

fn output_stream(out: QueryOutput) -> DoGetStream {
    stream(out.schema, out.batches)
}

fn bad_ticket(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("malformed ticket: {e}"))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSqlServer {
    type FlightService = FlightSqlServer;

    async fn get_flight_info_statement(
        &self,
        cmd: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let desc = request.into_inner();
        let txn = self.txn(cmd.transaction_id.as_deref())?;
        let (schema, t) = match self.engine.prepare_sql_in(&cmd.query, txn.as_ref()).await? {
            Prepared::Query(q) => {
                let schema = q.schema();
                let plan_handle = self.plans.put(&cmd.query, q);
                (
                    schema,
                    QuarryTicket {
                        kind: Some(ticket::Kind::Sql(cmd.query)),
                        plan_handle,
                        transaction_id: cmd.transaction_id.unwrap_or_default().to_vec(),
                    },
                )
            }
            Prepared::Done(out) => {
                let bytes = quarry_coprocessor::ipc::encode(&out.schema, &out.batches)
                    .map_err(Error::from)?;
                (
                    out.schema,
                    QuarryTicket {
                        kind: Some(ticket::Kind::ResultIpc(bytes)),
                        ..Default::default()
                    },
                )
            }
        };
        Ok(Response::new(flight_info(&schema, t, desc)?))
    }

    async fn get_flight_info_fallback(
        &self,
        cmd: Command,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(format!(
            "command {} is not supported",
            cmd.type_url()
        )))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let t = QuarryTicket::decode(ticket.statement_handle).map_err(bad_ticket)?;
        let txn = match t.transaction_id.as_slice() {
            [] => None,
            id => self.txn(Some(id))?,
        };
        let out = match t.kind.ok_or_else(|| bad_ticket("empty"))? {
            ticket::Kind::Sql(sql) => match self.plans.take(t.plan_handle, &sql) {
                Some(plan) => self.engine.run_in(*plan, txn.as_deref()).await?,
                None => self.engine.sql_in(&sql, txn.as_ref()).await?,
            },
            ticket::Kind::ResultIpc(bytes) => {
                let (schema, batches) =
                    quarry_coprocessor::ipc::decode(&bytes).map_err(bad_ticket)?;
                QueryOutput { schema, batches }
            }
        };
        Ok(Response::new(output_stream(out)))
    }

    async fn do_put_statement_update(
        &self,
        cmd: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let txn = self.txn(cmd.transaction_id.as_deref())?;
        let out = self.engine.sql_in(&cmd.query, txn.as_ref()).await?;
        let count = out.batches.first().and_then(|b| {
            b.column_by_name("count")
                .and_then(|c| c.as_any().downcast_ref::<arrow::array::Int64Array>())
                .map(|a| a.value(0))
        });
        Ok(count.unwrap_or(0))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let desc = request.into_inner();
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        let schema = query.into_builder(sql_info()).schema();
        Ok(Response::new(
            FlightInfo::new()
                .try_with_schema(schema.as_ref())
                .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
                .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
                .with_descriptor(desc)
                .with_total_records(-1),
        ))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(sql_info());
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(format!("building SqlInfo: {e}")))?;
        Ok(Response::new(stream(schema, vec![batch])))
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        let txn = self.engine.sessions().begin().await?;
        Ok(ActionBeginTransactionResult {
            transaction_id: session::id_bytes(txn.start_ts).into(),
        })
    }

    async fn do_action_end_transaction(
        &self,
        query: ActionEndTransactionRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        let sessions = self.engine.sessions();
        let txn = sessions.get(&query.transaction_id)?;
        match EndTransaction::try_from(query.action) {
            Ok(EndTransaction::Commit) => sessions.commit(&txn).await.map(|_| ())?,
            Ok(EndTransaction::Rollback) => sessions.rollback(&txn).await?,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "EndTransaction needs COMMIT or ROLLBACK, not {}",
                    query.action
                )))
            }
        }
        Ok(())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

impl FlightSqlServer {
    /// The open transaction a request names, if it names one.
    fn txn(&self, id: Option<&[u8]>) -> Result<Option<Arc<OpenTxn>>, Status> {
        match id {
            None | Some([]) => Ok(None),
            Some(id) => Ok(Some(self.engine.sessions().get(id)?)),
        }
    }
}

/// What `GetSqlInfo` answers: who the server is, and that it runs
/// transactions (BeginTransaction/EndTransaction) at snapshot isolation,
/// which SQL calls REPEATABLE READ.
fn sql_info() -> &'static SqlInfoData {
    static INFO: std::sync::OnceLock<SqlInfoData> = std::sync::OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "Quarry");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        b.append(SqlInfo::FlightSqlServerReadOnly, false);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(
            SqlInfo::FlightSqlServerTransaction,
            SqlSupportedTransaction::Transaction as i32,
        );
        b.append(SqlInfo::FlightSqlServerCancel, false);
        b.append(SqlInfo::SqlTransactionsSupported, true);
        let repeatable_read = SqlTransactionIsolationLevel::SqlTransactionRepeatableRead as i32;
        b.append(SqlInfo::SqlDefaultTransactionIsolation, repeatable_read);
        b.append(
            SqlInfo::SqlSupportedTransactionsIsolationLevels,
            1i32 << repeatable_read,
        );
        b.build().expect("a fixed, valid SqlInfo table")
    })
}

/// The Flight service (for wiring into a tonic server).
pub fn service(
    engine: Arc<QueryEngine>,
) -> arrow_flight::flight_service_server::FlightServiceServer<FlightSqlServer> {
    arrow_flight::flight_service_server::FlightServiceServer::new(FlightSqlServer::new(engine))
        .max_decoding_message_size(quarry_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(quarry_proto::MAX_MESSAGE_BYTES)
}
