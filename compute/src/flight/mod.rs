//! Arrow Flight SQL: how clients talk to compute.
//!
//! * `GetFlightInfo(CommandStatementQuery)` plans the SQL (errors surface
//!   here, with the right gRPC code) and answers with the result schema and
//!   one endpoint whose ticket carries the statement. Statements that are
//!   not queries (CREATE, INSERT, DROP, SHOW, EXPLAIN) run right away and
//!   their small result rides in the ticket.
//! * `DoGet(TicketStatementQuery)` runs the statement and streams Arrow
//!   record batches (schema first, even for zero rows). An autocommit
//!   query was started by its GetFlightInfo, and its DoGet takes it
//!   running (`early.rs`). Otherwise the plan
//!   GetFlightInfo made waits for it in a small cache (a minute at most,
//!   taken once, checked against the ticket's SQL), so a query is planned
//!   once; a DoGet that reaches another compute process, or comes late,
//!   plans the ticket's SQL again. No answer depends on the cache: compute
//!   stays stateless as far as clients can tell.
//! * `DoPut(CommandStatementUpdate)` runs DDL/DML and answers the row count.
//! * Prepared statements (`prepared.rs`): create, bind parameters through
//!   `DoPut`, execute as a query or an update, close. Their handles carry
//!   the statement and its bound values, like tickets.
//! * Catalog commands (`catalog.rs`): `GetCatalogs`, `GetDbSchemas`,
//!   `GetTables` (with schemas when asked), `GetTableTypes`,
//!   `GetPrimaryKeys`, `GetXdbcTypeInfo`, and `GetSqlInfo` (here).
//! * Transactions: `BeginTransaction` opens one (`session.rs`) and answers
//!   its id; statements carrying that `transaction_id` (queries, through
//!   their ticket, updates, prepared statements through their handle) run
//!   in it; `EndTransaction` commits or rolls it back. `GetSqlInfo` says
//!   so, which is what ADBC's `autocommit=False` looks for. Clients that
//!   send no ids (the JDBC driver) run `BEGIN` … `COMMIT` as SQL instead:
//!   the transaction rides in a cookie (`cookie.rs`).
//! * The client library's typed requests arrive as SQL, like any client's.
//! * `Handshake` logs in (`auth.rs`): Basic credentials for a bearer
//!   token, which every other call then carries when compute has TLS.
//! * `CancelFlightInfo` (and Flight SQL's older `CancelQuery` action)
//!   cancels the query of a FlightInfo this process made: before its
//!   DoGet, or while it streams (`cancel.rs`).
//! * Everything else answers UNIMPLEMENTED (foreign keys, Substrait,
//!   savepoints, bulk ingest). ADBC's Python driver falls
//!   back on UNIMPLEMENTED where it has a fallback.
//! * The endpoint's location list is empty: "reuse this connection".
//! * Results travel in FlightData messages of at most about 2 MiB
//!   (arrow-flight's encoder splits larger batches), under the 4 MiB that
//!   gRPC clients accept by default.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult, ActionCancelQueryRequest,
    ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    ActionEndTransactionRequest, Command, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, EndTransaction,
    ProstMessageExt, SqlInfo, SqlSupportedTransaction, SqlTransactionIsolationLevel,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightData,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use quarry_proto::compute::{ticket, Ticket as QuarryTicket};
use tonic::{Request, Response, Status};

use crate::df::PlannedQuery;
use crate::engine::{Prepared, QueryEngine, QueryOutput, QueryStream};
use crate::session::{self, OpenTxn};
use crate::sql::Statement;
use crate::Error;
use kept::KeptForSql;

mod cancel;
mod catalog;
mod cookie;
mod early;
mod kept;
mod prepared;

pub use cookie::CookieLayer;

pub struct FlightSqlServer {
    engine: Arc<QueryEngine>,
    plans: PendingPlans,
    cancels: cancel::Cancels,
    started: early::StartedQueries,
}

impl FlightSqlServer {
    pub fn new(engine: Arc<QueryEngine>) -> Self {
        FlightSqlServer {
            engine,
            plans: PendingPlans::default(),
            cancels: cancel::Cancels::default(),
            started: early::StartedQueries::default(),
        }
    }
}

/// How long a plan waits for its DoGet.
const PLAN_TTL: Duration = Duration::from_secs(60);
/// At most this many plans wait (clients that only ask for schemas).
const MAX_PLANS: usize = 256;

/// Plans made by GetFlightInfo, waiting for their DoGet, by plan handle
/// (`kept.rs`: only a ticket of the same SQL takes one, once).
struct PendingPlans {
    next: AtomicU64,
    kept: KeptForSql<Box<PlannedQuery>>,
}

impl Default for PendingPlans {
    fn default() -> Self {
        PendingPlans {
            next: AtomicU64::new(0),
            kept: KeptForSql::new(PLAN_TTL, MAX_PLANS),
        }
    }
}

impl PendingPlans {
    /// Keeps `plan` and returns its handle (never 0).
    fn put(&self, sql: &str, plan: Box<PlannedQuery>) -> u64 {
        let handle = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.kept.put(handle, sql, plan);
        handle
    }

    /// Takes the plan kept under `handle` for `sql`, if it is still here.
    fn take(&self, handle: u64, sql: &str) -> Option<Box<PlannedQuery>> {
        self.kept.take(handle, sql, PLAN_TTL)
    }

    /// [`Self::take`] a plan made less than `age` ago (an older one is
    /// dropped).
    fn take_younger(&self, handle: u64, sql: &str, age: Duration) -> Option<Box<PlannedQuery>> {
        self.kept.take(handle, sql, age)
    }
}

/// A FlightInfo of `schema` with one endpoint (no locations: reuse this
/// connection) holding `ticket`.
fn info_with_ticket(
    schema: &SchemaRef,
    ticket: Ticket,
    desc: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema.as_ref())
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(desc)
        .with_total_records(-1))
}

/// The FlightInfo of a statement: its ticket is Quarry's, inside a
/// `TicketStatementQuery`.
fn flight_info(
    schema: &SchemaRef,
    t: QuarryTicket,
    desc: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    let ticket = TicketStatementQuery {
        statement_handle: t.encode_to_vec().into(),
    };
    info_with_ticket(schema, Ticket::new(ticket.as_any().encode_to_vec()), desc)
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send + 'static>>;

fn stream(schema: SchemaRef, batches: Vec<RecordBatch>) -> DoGetStream {
    query_stream(QueryStream {
        schema,
        batches: futures::stream::iter(batches.into_iter().map(Ok)).boxed(),
    })
}

/// An answer as Flight data (schema first). An error partway through a
/// streamed answer ends it with the error's own status (its code and
/// message, as if it had failed before answering).
fn query_stream(out: QueryStream) -> DoGetStream {
    let batches = out
        .batches
        .map_err(|e| FlightError::Tonic(Box::new(Status::from(e))));
    Box::pin(
        FlightDataEncoderBuilder::new()
            .with_schema(out.schema)
            .build(batches)
            .map_err(|e| match e {
                FlightError::Tonic(status) => *status,
                e => Status::internal(format!("encoding results: {e}")),
            }),
    )
}

/// The action type of Flight's cancel.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// `out` ending with the client's cancel as soon as `running`'s signal is
/// set, whatever its plan waits on; the plan (and its region tasks) is
/// dropped with it. The key is finished when the stream ends or is
/// dropped.
fn cancellable(out: QueryStream, running: cancel::Running) -> QueryStream {
    let signal = running.signal();
    let batches = futures::stream::unfold(Some((out.batches, signal, running)), |state| async {
        let (mut batches, signal, running) = state?;
        tokio::select! {
            biased;
            _ = signal.wait() => Some((Err(cancel::cancelled_error()), None)),
            next = batches.next() => next.map(|b| (b, Some((batches, signal, running)))),
        }
    });
    QueryStream {
        schema: out.schema,
        batches: batches.boxed(),
    }
}

fn one_batch(batch: RecordBatch) -> DoGetStream {
    stream(batch.schema(), vec![batch])
}

/// GetFlightInfo of a catalog command: `schema`, and one endpoint whose
/// ticket is the command itself (DoGet answers it).
fn command_info(
    cmd: &impl ProstMessageExt,
    schema: &SchemaRef,
    desc: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(cmd.as_any().encode_to_vec());
    Ok(Response::new(info_with_ticket(schema, ticket, desc)?))
}

fn bad_ticket(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("malformed ticket: {e}"))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSqlServer {
    type FlightService = FlightSqlServer;

    /// The login (`auth.rs`): Basic credentials in, a bearer token out,
    /// in the `authorization` response header and as the one message's
    /// payload. Without logins (no TLS) every handshake succeeds and no
    /// token is needed.
    async fn do_handshake(
        &self,
        request: Request<tonic::Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let auth = self.engine.auth();
        let mut payload = Vec::new();
        let mut header = None;
        if auth.required() {
            let given = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            let (token, caller) = auth.login(given).await?;
            tracing::info!(user = caller.user, "logged in");
            header = Some(
                format!("Bearer {token}")
                    .parse::<tonic::metadata::MetadataValue<_>>()
                    .map_err(|e| Status::internal(format!("a token header: {e}")))?,
            );
            payload = token.into_bytes();
        }
        let message = HandshakeResponse {
            protocol_version: 0,
            payload: payload.into(),
        };
        let stream: Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>> =
            Box::pin(futures::stream::iter([Ok(message)]));
        let mut response = Response::new(stream);
        if let Some(h) = header {
            response.metadata_mut().insert("authorization", h);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        cmd: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let txn_id = cmd.transaction_id.unwrap_or_default().to_vec();
        let info = self
            .statement_info(cmd.query, &txn_id, 0, request.into_inner())
            .await?;
        Ok(Response::new(info))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let (sql, txn_id, plan_handle) = prepared::query_text(&cmd.prepared_statement_handle)?;
        let info = self
            .statement_info(sql, &txn_id, plan_handle, request.into_inner())
            .await?;
        Ok(Response::new(info))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        prepared::create(self, query).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        prepared::bind_query(&cmd.prepared_statement_handle, request.into_inner()).await
    }

    async fn do_put_prepared_statement_update(
        &self,
        cmd: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        prepared::update(self, &cmd.prepared_statement_handle, request.into_inner()).await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // Nothing is kept for a handle; a malformed one is still an error.
        prepared::decode_handle(&query.prepared_statement_handle).map(|_| ())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = catalog::catalogs_schema(&query);
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(one_batch(catalog::catalogs(query)?)))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = catalog::schemas_schema(&query);
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(one_batch(catalog::schemas(query)?)))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = catalog::tables_schema(&query);
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let batch = catalog::tables(&self.engine, query).await?;
        Ok(Response::new(one_batch(batch)))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = catalog::table_types_schema(&query);
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(one_batch(catalog::table_types(query)?)))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            &query,
            &catalog::primary_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let batch = catalog::primary_keys(&self.engine, query).await?;
        Ok(Response::new(one_batch(batch)))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = catalog::xdbc_type_info_schema(&query);
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(one_batch(catalog::xdbc_type_info(query)?)))
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
        // A started query is an autocommit one: a ticket naming a
        // transaction runs in it, as before.
        if let (Some(ticket::Kind::Sql(sql)), true) = (&t.kind, t.transaction_id.is_empty()) {
            let owner = crate::caller::caller().map(|c| c.user);
            if let Some(started) = self.started.take(t.cancel_key, owner.as_deref(), sql) {
                return self.redeem(started).await;
            }
        }
        // A CancelFlightInfo of this ticket's FlightInfo reaches the query
        // through `running` (`cancel.rs`), while it is planned and gathered
        // here and while it streams.
        let running = self.cancels.start(t.cancel_key)?;
        let signal = running.signal();
        let answer = async {
            let txn = match t.transaction_id.as_slice() {
                [] => None,
                id => self.txn(Some(id))?,
            };
            let prepared = match t.kind.ok_or_else(|| bad_ticket("empty"))? {
                ticket::Kind::Sql(sql) => match self.plans.take(t.plan_handle, &sql) {
                    Some(plan) => Prepared::Query(plan),
                    None => {
                        let again = self.engine.prepare_sql_in(&sql, txn.as_ref()).await?;
                        self.check_announced(t.cancel_key, &sql, &again)?;
                        again
                    }
                },
                ticket::Kind::ResultIpc(bytes) => {
                    let (schema, batches) =
                        quarry_coprocessor::ipc::decode(&bytes).map_err(bad_ticket)?;
                    Prepared::Done(QueryOutput { schema, batches })
                }
            };
            Ok::<_, Status>(match prepared {
                // A query's answer: gathered, or past
                // stream-results-after-mb streamed (QueryEngine::stream_in).
                Prepared::Query(q) => self.engine.stream_in(*q, txn).await?,
                Prepared::Done(out) => QueryStream {
                    schema: out.schema,
                    batches: futures::stream::iter(out.batches.into_iter().map(Ok)).boxed(),
                },
            })
        };
        let out = tokio::select! {
            biased;
            _ = signal.wait() => return Err(cancel::cancelled_error().into()),
            out = answer => out?,
        };
        Ok(Response::new(query_stream(cancellable(out, running))))
    }

    /// `CancelFlightInfo`, a core Flight action: Flight SQL's trait routes
    /// it here.
    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::unimplemented(format!(
                "action {:?} is not supported",
                action.r#type
            )));
        }
        let req = CancelFlightInfoRequest::decode(action.body)
            .map_err(|e| Status::invalid_argument(format!("malformed CancelFlightInfo: {e}")))?;
        let info = req
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo without a FlightInfo"))?;
        let status = self.cancel_info(&info)?;
        let body = CancelFlightInfoResult::new(status).encode_to_vec();
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.into(),
            description: "Cancel the query of a FlightInfo: before its DoGet or while it streams"
                .into(),
        })])
    }

    /// Flight SQL's `CancelQuery` action (deprecated for CancelFlightInfo).
    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        _request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let info = FlightInfo::decode(query.info)
            .map_err(|e| Status::invalid_argument(format!("malformed FlightInfo: {e}")))?;
        // CancelResult (not exported by arrow-flight) numbers its values
        // as CancelStatus does.
        Ok(ActionCancelQueryResult {
            result: self.cancel_info(&info)? as i32,
        })
    }

    async fn do_put_statement_update(
        &self,
        cmd: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let out = match self
            .resolve(&cmd.query, cmd.transaction_id.as_deref())
            .await?
        {
            Resolved::Run(txn) => self.engine.sql_in(&cmd.query, txn.as_ref()).await?,
            Resolved::Done(out) => out,
        };
        Ok(out.row_count())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(sql_info()).schema();
        command_info(&query, &schema, request.into_inner())
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
    /// GetFlightInfo of a statement's text, run in the transaction
    /// `txn_id` names (else the cookie's, else none; [`Self::resolve`]): a
    /// query is planned and waits for its DoGet; any other statement runs
    /// now and its result rides in the ticket. An autocommit query runs
    /// the plan kept under `plan_handle` (0: none) if this process still
    /// holds it for `sql` (a prepared statement's, `prepared::create`).
    async fn statement_info(
        &self,
        sql: String,
        txn_id: &[u8],
        plan_handle: u64,
        desc: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        // The DoGet of a query runs in the transaction it was planned in.
        let (prepared, txn_id) = match self.resolve(&sql, Some(txn_id)).await? {
            Resolved::Run(None) if plan_handle != 0 => {
                // Younger than one schema lease, so no more than one index
                // step behind (`crate::index`); else planned again.
                let kept = self
                    .plans
                    .take_younger(plan_handle, &sql, crate::index::SCHEMA_LEASE);
                let prepared = match kept {
                    Some(plan) => Prepared::Query(plan),
                    None => self.engine.prepare_sql_in(&sql, None).await?,
                };
                (prepared, Vec::new())
            }
            Resolved::Run(txn) => (
                self.engine.prepare_sql_in(&sql, txn.as_ref()).await?,
                txn.map(|t| session::id_bytes(t.start_ts))
                    .unwrap_or_default(),
            ),
            Resolved::Done(out) => (Prepared::Done(out), Vec::new()),
        };
        let (schema, t) = match prepared {
            Prepared::Query(q) => {
                let schema = q.schema();
                let cancel_key = self.cancels.issue();
                // An autocommit query starts now (`early.rs`); its DoGet
                // takes it, and a DoGet that finds none plans it again.
                let plan_handle = match txn_id.is_empty() {
                    true => match self.start_early(q, cancel_key, &sql) {
                        Ok(()) => 0,
                        Err(q) => self.plans.put(&sql, q),
                    },
                    false => self.plans.put(&sql, q),
                };
                (
                    schema,
                    QuarryTicket {
                        kind: Some(ticket::Kind::Sql(sql)),
                        plan_handle,
                        transaction_id: txn_id,
                        cancel_key,
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
        flight_info(&schema, t, desc)
    }

    /// Starts the autocommit query `q` of the FlightInfo whose cancel key
    /// is `key`, for its DoGet to take (`early.rs`); gives `q` back when
    /// it does not start (too many wait, or the failpoint
    /// `flight_early_start_off`).
    fn start_early(
        &self,
        q: Box<PlannedQuery>,
        key: u64,
        sql: &str,
    ) -> Result<(), Box<PlannedQuery>> {
        if quarry_proto::failpoint::fires("flight_early_start_off") || !self.started.has_room() {
            return Err(q);
        }
        let schema = q.schema();
        let Ok(running) = self.cancels.start(key) else {
            return Err(q);
        };
        let signal = running.signal();
        let engine = self.engine.clone();
        let run = async move {
            tokio::select! {
                biased;
                _ = signal.wait() => Err(cancel::cancelled_error()),
                out = engine.stream_in(*q, None) => out,
            }
        };
        let task = tokio::spawn(crate::caller::within(crate::caller::current(), run));
        let owner = crate::caller::caller().map(|c| c.user);
        self.started
            .put(key, early::Started::new(owner, sql, running, task), schema);
        Ok(())
    }

    /// A query planned again by a DoGet too late to take the query its
    /// GetFlightInfo started must answer with the columns that FlightInfo
    /// announced (`early.rs`), as a kept plan checked at its snapshot does.
    fn check_announced(&self, key: u64, sql: &str, again: &Prepared) -> Result<(), Status> {
        let (Prepared::Query(q), Some(announced)) = (again, self.started.announced(key, sql))
        else {
            return Ok(());
        };
        if q.schema() == announced {
            return Ok(());
        }
        Err(Error::Conflict(
            "the definition of a table or view this query reads changed after its GetFlightInfo \
             (DDL): nothing was read; run it again"
                .into(),
        )
        .into())
    }

    /// A DoGet's answer from the query its GetFlightInfo started.
    async fn redeem(
        &self,
        started: early::Started,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let early::Started { running, task, .. } = started;
        let signal = running.signal();
        let out = tokio::select! {
            biased;
            _ = signal.wait() => return Err(cancel::cancelled_error().into()),
            out = task => out
                .map_err(|e| Status::internal(format!("a query's task ended: {e}")))??,
        };
        Ok(Response::new(query_stream(cancellable(out, running))))
    }

    /// Cancels the query of `info`'s statement ticket (`cancel.rs`): a
    /// ticket that carries its answer, or a catalog command's, has nothing
    /// left to cancel.
    fn cancel_info(&self, info: &FlightInfo) -> Result<CancelStatus, Status> {
        let ticket = info
            .endpoint
            .iter()
            .find_map(|e| e.ticket.as_ref())
            .ok_or_else(|| Status::invalid_argument("the FlightInfo has no ticket"))?;
        let any = arrow_flight::sql::Any::decode(ticket.ticket.clone()).map_err(bad_ticket)?;
        let Ok(Some(statement)) = any.unpack::<TicketStatementQuery>() else {
            return Ok(CancelStatus::NotCancellable);
        };
        let t = QuarryTicket::decode(statement.statement_handle).map_err(bad_ticket)?;
        match t.cancel_key {
            0 => Ok(CancelStatus::NotCancellable),
            key => self.cancels.cancel(key),
        }
    }

    /// The open transaction a request names, if it names one.
    fn txn(&self, id: Option<&[u8]>) -> Result<Option<Arc<OpenTxn>>, Status> {
        match id {
            None | Some([]) => Ok(None),
            Some(id) => Ok(Some(self.engine.sessions().get(id)?)),
        }
    }

    /// Where the statement `sql` runs: in the transaction its request
    /// names by id (`explicit`), else in the one its connection's cookie
    /// names (`cookie.rs`), else on its own. Without an id, the cookie
    /// session answers transaction control itself:
    ///
    /// * `BEGIN` opens a transaction and sets the cookie, for a client
    ///   that keeps cookies (one without a jar gets the engine's error, as
    ///   it always did: it would lose the transaction); with one already
    ///   open the engine refuses it ("already open");
    /// * `COMMIT` and `ROLLBACK` end the cookie's transaction, as
    ///   `EndTransaction` does (so `ROLLBACK` ends one a failed statement
    ///   aborted), and expire the cookie;
    /// * a cookie whose transaction is gone (ended, idle too long, begun
    ///   on another compute process): `BEGIN` replaces it, `ROLLBACK`
    ///   clears it, `COMMIT` clears it and fails, and anything else fails
    ///   naming the transaction: a statement sent in a transaction never
    ///   runs on its own.
    async fn resolve(&self, sql: &str, explicit: Option<&[u8]>) -> Result<Resolved, Status> {
        if let Some(txn) = self.txn(explicit)? {
            return Ok(Resolved::Run(Some(txn)));
        }
        let sessions = self.engine.sessions();
        let control = transaction_control(sql);
        let Some(id) = cookie::txn_id() else {
            return match control {
                Some(Statement::Begin) if cookie::has_jar() => self.begin_with_cookie().await,
                // BEGIN without a cookie jar, COMMIT and ROLLBACK: the
                // engine says why there is nothing to do.
                _ => Ok(Resolved::Run(None)),
            };
        };
        let word = match (control, sessions.get(&id)) {
            (Some(Statement::Commit), Ok(txn)) => {
                cookie::set_txn(None);
                sessions.commit(&txn).await?;
                "COMMIT"
            }
            (Some(Statement::Rollback), Ok(txn)) => {
                cookie::set_txn(None);
                sessions.rollback(&txn).await?;
                "ROLLBACK"
            }
            (_, Ok(txn)) => return Ok(Resolved::Run(Some(txn))),
            (Some(Statement::Begin), Err(_)) => return self.begin_with_cookie().await,
            (Some(Statement::Rollback), Err(_)) => {
                cookie::set_txn(None);
                "ROLLBACK"
            }
            (Some(_), Err(e)) => {
                cookie::set_txn(None);
                return Err(Error::InvalidInput(format!(
                    "COMMIT: {e}; this COMMIT committed nothing"
                ))
                .into());
            }
            (None, Err(e)) => {
                return Err(Error::InvalidInput(format!(
                    "{e}; this connection's statements run in that transaction until it \
                     sends ROLLBACK (or BEGIN)"
                ))
                .into())
            }
        };
        Ok(Resolved::Done(QueryOutput::word(word)?))
    }

    /// Opens a transaction for the cookie session.
    async fn begin_with_cookie(&self) -> Result<Resolved, Status> {
        let txn = self.engine.sessions().begin().await?;
        cookie::set_txn(Some(&session::id_bytes(txn.start_ts)));
        Ok(Resolved::Done(QueryOutput::word("BEGIN")?))
    }
}

/// Where a statement runs ([`FlightSqlServer::resolve`]).
enum Resolved {
    /// Run by the engine, in this transaction or on its own.
    Run(Option<Arc<OpenTxn>>),
    /// Transaction control the cookie session answered.
    Done(QueryOutput),
}

/// `BEGIN`, `COMMIT` or `ROLLBACK` (None for any other statement; only
/// statements whose first word, after comments, is one of theirs are
/// parsed).
fn transaction_control(sql: &str) -> Option<Statement> {
    const WORDS: [&str; 6] = ["begin", "start", "commit", "rollback", "end", "abort"];
    let head = crate::sql::skip_comments(sql)
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?;
    if !WORDS.iter().any(|w| head.eq_ignore_ascii_case(w)) {
        return None;
    }
    match crate::sql::parse(sql) {
        Ok(s @ (Statement::Begin | Statement::Commit | Statement::Rollback)) => Some(s),
        _ => None,
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
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, true);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlAllTablesAreSelectable, true);
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
    max_message_bytes: usize,
) -> arrow_flight::flight_service_server::FlightServiceServer<FlightSqlServer> {
    arrow_flight::flight_service_server::FlightServiceServer::new(FlightSqlServer::new(engine))
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_control_is_found_past_comments_and_in_any_case() {
        let is = |sql: &str, want: &str| {
            let got = transaction_control(sql).map(|s| match s {
                Statement::Begin => "BEGIN",
                Statement::Commit => "COMMIT",
                Statement::Rollback => "ROLLBACK",
                _ => "other",
            });
            assert_eq!(got, (!want.is_empty()).then_some(want), "{sql}");
        };
        is("begin", "BEGIN");
        is("  START TRANSACTION;", "BEGIN");
        is("/* done */ COMMIT", "COMMIT");
        is("-- undo it\n  Rollback", "ROLLBACK");
        is("SELECT 1", "");
        is("-- COMMIT\nSELECT 1", "");
        is("/* COMMIT", "");
        is("begin_date", "");
    }
}
