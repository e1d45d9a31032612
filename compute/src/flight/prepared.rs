//! Prepared statements whose handle is the statement.
//!
//! JDBC prepares every statement it runs, plain ones too; ADBC prepares
//! those with parameters. The lifecycle is:
//!
//! 1. `CreatePreparedStatement` numbers the statement's placeholders
//!    (`params.rs`), works out what it will answer and take
//!    ([`QueryEngine::shape`](crate::engine::QueryEngine::shape): the
//!    result schema, empty for statements that answer a count, which is
//!    how JDBC tells an update from a query; one typed field per
//!    parameter) and answers a handle.
//! 2. A query's parameters arrive by `DoPut(CommandPreparedStatementQuery)`;
//!    the answer is a new handle that also carries them
//!    (`DoPutPreparedStatementResult`, which the Java, Go/ADBC and C++
//!    clients use from then on).
//! 3. `GetFlightInfo(CommandPreparedStatementQuery)` binds the values into
//!    the statement and goes on exactly as a plain statement does (same
//!    planning, ticket and DoGet); `DoPut(CommandPreparedStatementUpdate)`
//!    carries its parameter rows in the same stream and runs the statement
//!    once per row, all rows in one transaction (the client's, or one of
//!    its own), and answers the summed count. Without a transaction id,
//!    the connection's cookie transaction applies (`cookie.rs`); that is
//!    how JDBC's `BEGIN` … `COMMIT` statements work.
//! 4. `ClosePreparedStatement` has nothing to free.
//!
//! The handle ([`PreparedHandle`]: the numbered statement, its open
//! transaction, the bound rows) carries all the state, as tickets do, so
//! compute stays stateless between calls: any compute process can run
//! any handle, a client that never closes leaks nothing, and a restart
//! loses nothing. The price is a handle as large as its bound values,
//! which clients send back once.

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::Schema;
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    DoPutPreparedStatementResult,
};
use arrow_flight::{IpcMessage, SchemaAsIpc};
use bytes::Bytes;
use futures::TryStreamExt;
use prost::Message;
use quarry_proto::compute::PreparedHandle;
use tonic::Status;

use super::{FlightSqlServer, Resolved};
use crate::params::{self, Numbered};
use crate::Error;

/// The IPC form of `schema` that prepared statements answer; no bytes for
/// no fields.
fn schema_bytes(schema: &Schema) -> Result<Bytes, Status> {
    if schema.fields().is_empty() {
        return Ok(Bytes::new());
    }
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(bytes)
}

pub(super) fn decode_handle(bytes: &[u8]) -> Result<PreparedHandle, Status> {
    PreparedHandle::decode(bytes)
        .map_err(|e| Status::invalid_argument(format!("malformed prepared statement handle: {e}")))
}

fn numbered(h: &PreparedHandle) -> Numbered {
    Numbered {
        sql: h.sql.clone(),
        count: h.parameter_count as usize,
    }
}

/// CreatePreparedStatement.
pub(super) async fn create(
    server: &FlightSqlServer,
    req: ActionCreatePreparedStatementRequest,
) -> Result<ActionCreatePreparedStatementResult, Status> {
    // An unknown transaction fails here, not at the first execution.
    server.txn(req.transaction_id.as_deref())?;
    let stmt = params::number(&req.query, server.engine.max_statement_bytes())?;
    let shape = server.engine.shape(&stmt).await?;
    let transaction_id = req.transaction_id.unwrap_or_default().to_vec();
    // Kept for the first execution of an autocommit query (the one ADBC
    // runs right after preparing it), which then skips planning.
    let plan_handle = match shape.plan {
        Some(plan) if transaction_id.is_empty() => server.plans.put(&stmt.sql, plan),
        _ => 0,
    };
    let handle = PreparedHandle {
        sql: stmt.sql,
        parameter_count: stmt.count as u32,
        transaction_id,
        parameters_ipc: Vec::new(),
        plan_handle,
    };
    Ok(ActionCreatePreparedStatementResult {
        prepared_statement_handle: handle.encode_to_vec().into(),
        dataset_schema: schema_bytes(&shape.dataset)?,
        parameter_schema: schema_bytes(&shape.parameters)?,
    })
}

/// The parameter rows a DoPut stream carries after its command (None when
/// it carries no rows).
async fn read_rows(stream: PeekableFlightDataStream) -> Result<Option<RecordBatch>, Status> {
    let batches: Vec<RecordBatch> =
        FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
            .try_collect()
            .await
            .map_err(|e| Status::invalid_argument(format!("reading bound parameters: {e}")))?;
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let rows = concat_batches(&first.schema(), &batches).map_err(Error::from)?;
    Ok((rows.num_rows() > 0).then_some(rows))
}

/// The rows bound into a handle (None if none were).
fn bound_rows(h: &PreparedHandle) -> Result<Option<RecordBatch>, Status> {
    if h.parameters_ipc.is_empty() {
        return Ok(None);
    }
    let (schema, batches) = quarry_coprocessor::ipc::decode(&h.parameters_ipc)
        .map_err(|e| Status::invalid_argument(format!("malformed bound parameters: {e}")))?;
    Ok(Some(
        concat_batches(&schema, &batches).map_err(Error::from)?,
    ))
}

fn unbound(stmt: &Numbered) -> Status {
    Status::invalid_argument(format!(
        "the statement takes {} parameter(s) and none were bound",
        stmt.count
    ))
}

/// DoPut(CommandPreparedStatementQuery): a handle that also carries the
/// values bound.
pub(super) async fn bind_query(
    handle: &[u8],
    stream: PeekableFlightDataStream,
) -> Result<DoPutPreparedStatementResult, Status> {
    let mut h = decode_handle(handle)?;
    let stmt = numbered(&h);
    h.parameters_ipc = match read_rows(stream).await? {
        Some(rows) => {
            // Checked now, so a wrong binding fails at the bind.
            params::bind(&stmt, &rows, 0)?;
            quarry_coprocessor::ipc::encode(&rows.schema(), &[rows]).map_err(Error::from)?
        }
        None => Vec::new(),
    };
    Ok(DoPutPreparedStatementResult {
        prepared_statement_handle: Some(h.encode_to_vec().into()),
    })
}

/// The text a prepared query runs: its statement with the one row of
/// values bound to it, its transaction's id and the handle of the plan
/// made when it was prepared (which a bound text never matches).
pub(super) fn query_text(handle: &[u8]) -> Result<(String, Vec<u8>, u64), Status> {
    let h = decode_handle(handle)?;
    let stmt = numbered(&h);
    let sql = match (stmt.count, bound_rows(&h)?) {
        (0, None) => stmt.sql,
        (_, None) => return Err(unbound(&stmt)),
        (_, Some(rows)) if rows.num_rows() == 1 => params::bind(&stmt, &rows, 0)?,
        (_, Some(rows)) => {
            return Err(Status::invalid_argument(format!(
                "a query takes one row of parameters, not {}; run it once per row",
                rows.num_rows()
            )))
        }
    };
    Ok((sql, h.transaction_id, h.plan_handle))
}

/// DoPut(CommandPreparedStatementUpdate): runs the statement once per
/// parameter row (the stream's, else the handle's), in the handle's
/// transaction or, for several rows, in one of its own; the rows written.
pub(super) async fn update(
    server: &FlightSqlServer,
    handle: &[u8],
    stream: PeekableFlightDataStream,
) -> Result<i64, Status> {
    let h = decode_handle(handle)?;
    let stmt = numbered(&h);
    let rows = match read_rows(stream).await? {
        Some(rows) => Some(rows),
        None => bound_rows(&h)?,
    };
    let txn = match server.resolve(&stmt.sql, Some(&h.transaction_id)).await? {
        Resolved::Run(txn) => txn,
        Resolved::Done(_) => return Ok(0),
    };
    let engine = &server.engine;
    let Some(rows) = rows else {
        if stmt.count > 0 {
            return Err(unbound(&stmt));
        }
        return Ok(engine.sql_in(&stmt.sql, txn.as_ref()).await?.row_count());
    };
    let texts = (0..rows.num_rows())
        .map(|r| params::bind(&stmt, &rows, r))
        .collect::<Result<Vec<_>, _>>()?;
    let own = match (&txn, texts.len()) {
        (None, n) if n > 1 => Some(engine.sessions().begin().await?),
        _ => None,
    };
    let run_in = txn.as_ref().or(own.as_ref());
    let mut total = 0;
    for text in &texts {
        // A failed statement aborts the transaction it ran in.
        total += engine.sql_in(text, run_in).await?.row_count();
    }
    if let Some(own) = &own {
        engine.sessions().commit(own).await?;
    }
    Ok(total)
}
