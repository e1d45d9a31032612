//! The query protocols: simple Query and extended Parse/Bind/Describe/
//! Execute/Sync, over [`PgSession::run`].
//!
//! pgwire drives the messages; this module decides what each statement
//! is and answers it. Parse works out what a statement takes and answers
//! (`QueryEngine::shape`: the query planned, its result columns and the
//! parameter types DataFusion infers, each given the client's OID where
//! it gave one, or the type the statement casts it to), so Describe of a
//! statement or a portal needs no second look. Where a declared type
//! would change the result's types (`a * $1`, `$1` NUMERIC), the
//! statement is planned with `CAST($n AS type)` around those parameters,
//! so that what Describe says and what Execute sends agree; Execute binds the parameters as literals (`decode.rs`,
//! `crate::params`) and runs the statement as a simple Query would.
//!
//! Transaction state is the session's: after each Query and Execute the
//! connection's status is set from it, so ReadyForQuery says idle, in a
//! transaction, or failed, whatever pgwire inferred. A cancel request
//! (pgwire's `ConnectionManager`) drops the running statement's future,
//! which stops its region scans (`engine/streaming.rs`), and the client
//! gets 57014; in a transaction the transaction fails.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use futures::future::{select, Either};
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_execution_response, send_query_response, send_ready_for_query, ExtendedQueryHandler,
    SimpleQueryHandler,
};
use pgwire::api::results::{CopyResponse, FieldFormat, FieldInfo, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionHandle, PgWireConnectionState, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;

use super::session::PgSession;
use super::sqlstate::{pg_error, to_pg};
use super::{decode, encode, statement};
use crate::params::{self, Numbered};

/// A parsed statement of the extended protocol.
#[derive(Clone, Debug)]
pub struct PgStatement {
    /// The text as the client sent it.
    sql: String,
    /// Rewritten for DataFusion (`statement::rewrite`), placeholders
    /// numbered.
    numbered: Numbered,
    /// Each parameter's type: the client's, or the inferred one.
    params: Vec<Type>,
    /// The result's columns (None: no rows, a command tag).
    result: Option<SchemaRef>,
    /// Parameters (from 0) cast to `DECIMAL(38, 10)` by their declared
    /// NUMERIC type: a bound value must fit its scale.
    numeric_casts: Vec<usize>,
}

impl PgStatement {
    /// The text as the client sent it.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Whether it answers rows (a query, or a write with RETURNING).
    pub fn returns_rows(&self) -> bool {
        self.result.is_some()
    }
}

/// The session a connection's startup made.
pub fn session_of(client: &impl ClientInfo) -> PgWireResult<Arc<PgSession>> {
    client
        .session_extensions()
        .get::<Arc<PgSession>>()
        .map(|s| (*s).clone())
        .ok_or_else(|| pg_error("08P01", "the connection has no session: log in first"))
}

/// Waits for the statement `f` or a cancel request, whichever is first.
pub(super) async fn cancellable<F, T>(client: &impl ClientInfo, f: F) -> PgWireResult<T>
where
    F: std::future::Future<Output = PgWireResult<T>>,
{
    let handle = client.session_extensions().get::<Arc<ConnectionHandle>>();
    let Some(handle) = handle else {
        return f.await;
    };
    let cancel = handle.start_query().await;
    futures::pin_mut!(f);
    match select(f, cancel).await {
        Either::Left((r, _)) => r,
        // A cancel request fired (a replaced sender only errs).
        Either::Right((Ok(()), _)) => Err(PgWireError::QueryCanceled),
        Either::Right((Err(_), f)) => f.await,
    }
}

/// The format of result column `i` under `format` (text past the codes
/// given).
pub(super) fn format_of(format: &Format, i: usize) -> FieldFormat {
    match format {
        Format::Individual(codes) if i >= codes.len() => FieldFormat::Text,
        f => f.format_for(i),
    }
}

/// A portal's statement with its bound parameters written in as literals.
pub(super) fn bound_sql(portal: &Portal<PgStatement>) -> PgWireResult<String> {
    let stmt = &portal.statement.statement;
    Ok(match stmt.numbered.count {
        0 if portal.parameters.is_empty() => stmt.sql.clone(),
        _ => {
            let format = &portal.parameter_format;
            if let Format::Individual(codes) = format {
                if codes.len() != portal.parameters.len() {
                    return Err(pg_error(
                        "08P01",
                        format!(
                            "bind message has {} parameter formats but {} parameters",
                            codes.len(),
                            portal.parameters.len()
                        ),
                    ));
                }
            }
            let row = decode::row(&portal.parameters, &stmt.params, |i| {
                format_of(format, i) == FieldFormat::Binary
            })
            .map_err(to_pg)?;
            for &i in &stmt.numeric_casts {
                decode::check_declared_numeric(&row, i).map_err(to_pg)?;
            }
            params::bind(&stmt.numbered, &row, 0).map_err(to_pg)?
        }
    })
}

pub struct Handler;

#[async_trait]
impl SimpleQueryHandler for Handler {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let session = session_of(client)?;
        if session.take_deferred().is_some() {
            return Err(pg_error(
                "08P01",
                "protocol violation: a simple Query arrived inside an extended-protocol batch \
                 (before its Sync); the batch's write did not run",
            ));
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let statements = statement::split(&query.query);
        // Several statements are one batch: one implicit transaction
        // (`session.rs`).
        if statements.len() > 1 {
            session.begin_batch();
        }
        if statements.is_empty() {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        for sql in statements {
            let text = |_| FieldFormat::Text;
            let r = cancellable(client, session.run(sql, &text)).await;
            let sent = match r {
                Ok(Response::CopyIn(copy)) => {
                    // The rows come next (`CopyHandler`); pgwire sends
                    // ReadyForQuery after CopyDone. (COPY committed the
                    // batch's writes before it; nothing is left open.)
                    session.end_batch().await?;
                    pgwire::api::copy::send_copy_in_response(client, copy).await?;
                    client.set_state(PgWireConnectionState::CopyInProgress(false));
                    return Ok(());
                }
                Ok(Response::CopyOut(copy)) => send_copy_out(client, copy, &session).await,
                Ok(Response::Query(results)) => send_query_response(client, results, true).await,
                Ok(
                    Response::Execution(tag)
                    | Response::TransactionStart(tag)
                    | Response::TransactionEnd(tag),
                ) => match send_changed_parameters(client, &session).await {
                    Ok(()) => send_execution_response(client, tag).await,
                    Err(e) => Err(e),
                },
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                let e = failed(client, &session, e).await;
                // The batch's implicit transaction rolls back.
                let _ = session.end_batch().await;
                client.set_transaction_status(session.status());
                return Err(e);
            }
        }
        if let Err(e) = session.end_batch().await {
            return Err(failed(client, &session, e).await);
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        let status = session.status();
        client.set_transaction_status(status);
        send_ready_for_query(client, status).await
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // on_query answers every Query itself.
        Err(pg_error("XX000", "internal error: do_query is not used"))
    }
}

/// Streams a `COPY … TO STDOUT`'s rows: CopyOutResponse, CopyData per
/// message, CopyDone and `COPY n`. (pgwire's own sender answers an error
/// half-way with CopyFail, which only a client may send; here the error
/// goes back as the ErrorResponse PostgreSQL sends, ending the COPY.)
async fn send_copy_out<C>(
    client: &mut C,
    mut copy: CopyResponse,
    session: &PgSession,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    use pgwire::messages::copy::{CopyDone, CopyOutResponse};
    let formats = copy.column_formats();
    client
        .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            copy.format,
            copy.columns as i16,
            formats,
        )))
        .await?;
    while let Some(data) = copy.data_stream().next().await {
        client.feed(PgWireBackendMessage::CopyData(data?)).await?;
    }
    client
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    let tag = Tag::new("COPY").with_rows(session.copied_rows() as usize);
    client
        .send(PgWireBackendMessage::CommandComplete(tag.into()))
        .await?;
    Ok(())
}

/// Sends the reported parameters that a statement changed (SET
/// TimeZone, …) as ParameterStatus messages, as PostgreSQL does.
pub(super) async fn send_changed_parameters<C>(
    client: &mut C,
    session: &PgSession,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for (name, value) in session.reported_changes() {
        let status = pgwire::messages::startup::ParameterStatus::new(name, value);
        client
            .feed(PgWireBackendMessage::ParameterStatus(status))
            .await?;
    }
    Ok(())
}

/// A statement failed with `e`: the session notes it (a transaction
/// fails), and the connection's status is set so that pgwire's error
/// path (ErrorResponse, then ReadyForQuery) reports it: idle outside a
/// transaction (a failed COMMIT ended it), failed inside one.
pub(super) async fn failed<C: ClientInfo>(
    client: &mut C,
    session: &PgSession,
    e: PgWireError,
) -> PgWireError {
    if matches!(e, PgWireError::QueryCanceled) {
        session
            .statement_failed("canceling statement due to user request")
            .await;
    } else if session.txn().is_some() {
        session.statement_failed(&e.to_string()).await;
    }
    use pgwire::messages::response::TransactionStatus;
    client.set_transaction_status(match session.in_block() {
        true => TransactionStatus::Transaction,
        false => TransactionStatus::Idle,
    });
    client.set_state(PgWireConnectionState::ReadyForQuery);
    e
}

#[async_trait]
impl pgwire::api::copy::CopyHandler for Handler {
    async fn on_copy_data<C>(
        &self,
        client: &mut C,
        copy_data: pgwire::messages::copy::CopyData,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        session_of(client)?.copy_data(&copy_data.data).await;
        Ok(())
    }

    async fn on_copy_done<C>(
        &self,
        client: &mut C,
        _done: pgwire::messages::copy::CopyDone,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        match session.copy_done().await {
            Ok(tag) => {
                client.set_transaction_status(session.status());
                client
                    .send(PgWireBackendMessage::CommandComplete(tag.into()))
                    .await?;
                Ok(())
            }
            Err(e) => Err(failed(client, &session, e).await),
        }
    }

    async fn on_copy_fail<C>(
        &self,
        client: &mut C,
        fail: pgwire::messages::copy::CopyFail,
    ) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let e = pg_error("57014", format!("COPY from stdin failed: {}", fail.message));
        match session_of(client) {
            Ok(session) => {
                session.copy_failed().await;
                failed(client, &session, e).await
            }
            Err(e) => e,
        }
    }
}

#[async_trait]
impl QueryParser for Handler {
    type Statement = PgStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<PgStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let session = session_of(client)?;
        let sql = sql.trim().trim_end_matches(';').to_string();
        if let Some(stmt) = statement::session_statement(&sql) {
            let stmt = match stmt {
                Ok(stmt) => stmt,
                Err(e) => {
                    session.statement_failed(&e.to_string()).await;
                    return Err(to_pg(e));
                }
            };
            let result = match stmt {
                statement::SessionStatement::Show(name) => {
                    Some(Arc::new(Schema::new(vec![arrow::datatypes::Field::new(
                        name,
                        arrow::datatypes::DataType::Utf8,
                        false,
                    )])))
                }
                statement::SessionStatement::ShowAll => Some(Arc::new(Schema::new(vec![
                    arrow::datatypes::Field::new("name", arrow::datatypes::DataType::Utf8, false),
                    arrow::datatypes::Field::new(
                        "setting",
                        arrow::datatypes::DataType::Utf8,
                        false,
                    ),
                ]))),
                _ => None,
            };
            return Ok(Some(PgStatement {
                numbered: Numbered {
                    sql: sql.clone(),
                    count: 0,
                },
                sql,
                params: vec![],
                result,
                numeric_casts: vec![],
            }));
        }
        if super::copy::parse(&sql).is_some() {
            return Err(pg_error(
                "0A000",
                "unsupported: COPY over the extended query protocol; send it as a simple query",
            ));
        }
        let engine = session.engine().clone();
        let text = statement::rewrite(&sql);
        let shaped = session
            .scoped(async {
                let numbered = params::number(&text, engine.max_statement_bytes())?;
                let shape = engine.shape(&numbered).await?;
                Ok::<_, crate::Error>((numbered, shape))
            })
            .await;
        let (mut numbered, mut shape) = match shaped {
            Ok(s) => s,
            Err(e) => {
                // As in PostgreSQL, an error at Parse fails the transaction.
                session.statement_failed(&e.to_string()).await;
                return Err(to_pg(e));
            }
        };
        let inferred = |shape: &crate::engine::StatementShape, i: usize| {
            shape
                .parameters
                .fields()
                .get(i)
                .map(|f| encode::pg_type(f.data_type()).0)
        };
        // A parameter in a SELECT list that the client declared as another
        // type than the one inferred: where that changes the result's
        // types, the statement is typed by the declarations, so that what
        // Describe says and what Execute sends agree (a NUMERIC bound to
        // `a * $1` makes a NUMERIC column, not the BIGINT `a` suggests).
        // One in a WHERE clause cannot type a result column: it is
        // compared as bound.
        let mut casts: Vec<(usize, &str)> = (0..numbered.count)
            .filter_map(|i| {
                let declared = types.get(i).cloned().flatten()?;
                let name = decode::declared_sql_type(&declared)?;
                (inferred(&shape, i) != Some(declared)).then_some((i + 1, name))
            })
            .collect();
        if !casts.is_empty() && !shape.dataset.fields().is_empty() {
            let in_lists = params::in_select_lists(&numbered);
            casts.retain(|(n, _)| in_lists.contains(n));
        }
        let mut numeric_casts = vec![];
        if !casts.is_empty() && !shape.dataset.fields().is_empty() {
            let cast = params::cast_placeholders(&numbered, &casts).map_err(to_pg)?;
            let cast_shape = session.scoped(engine.shape(&cast)).await;
            let result_types = |s: &crate::engine::StatementShape| {
                s.dataset
                    .fields()
                    .iter()
                    .map(|f| encode::pg_type(f.data_type()).0)
                    .collect::<Vec<_>>()
            };
            if let Ok(cast_shape) = cast_shape {
                if result_types(&cast_shape) != result_types(&shape) {
                    numeric_casts = casts
                        .iter()
                        .filter(|(_, name)| name.starts_with("DECIMAL"))
                        .map(|(n, _)| n - 1)
                        .collect();
                    (numbered, shape) = (cast, cast_shape);
                }
            }
        }
        // Undeclared: the type the statement casts it to, as PostgreSQL
        // infers it, else the planner's.
        let cast_in_statement = params::cast_types(&numbered);
        let params = (0..numbered.count)
            .map(|i| match types.get(i).cloned().flatten() {
                Some(t) if t != Type::UNKNOWN => t,
                _ => cast_in_statement
                    .iter()
                    .find(|(n, _)| *n == i + 1)
                    .and_then(|(_, t)| decode::pg_type_of_sql(t))
                    .or_else(|| inferred(&shape, i))
                    .unwrap_or(Type::TEXT),
            })
            .collect();
        let result = match shape.dataset.fields().is_empty() {
            true => None,
            false => Some(shape.dataset),
        };
        Ok(Some(PgStatement {
            sql,
            numbered,
            params,
            result,
            numeric_casts,
        }))
    }

    fn get_parameter_types(&self, stmt: &PgStatement) -> PgWireResult<Vec<Type>> {
        Ok(stmt.params.clone())
    }

    fn get_result_schema(
        &self,
        stmt: &PgStatement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(match &stmt.result {
            None => vec![],
            Some(schema) => encode::fields(schema, |i| {
                column_format.map_or(FieldFormat::Text, |f| format_of(f, i))
            }),
        })
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handler {
    type Statement = PgStatement;
    type QueryParser = Handler;

    fn query_parser(&self) -> Arc<Handler> {
        Arc::new(Handler)
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        match self._on_execute(client, message).await {
            Ok(()) => {
                client.set_transaction_status(session.status());
                Ok(())
            }
            Err(e) => Err(failed(client, &session, e).await),
        }
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<PgStatement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let sql = bound_sql(portal)?;
        let format = portal.result_column_format.clone();
        let format = move |i: usize| format_of(&format, i);
        // (Cancellation: pgwire's _on_execute waits on it around this.)
        let response = session.run(&sql, &format).await?;
        if matches!(
            response,
            Response::Execution(_) | Response::TransactionStart(_) | Response::TransactionEnd(_)
        ) {
            send_changed_parameters(client, &session).await?;
        }
        Ok(response)
    }
}
