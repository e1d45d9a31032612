//! The extended protocol's batches as implicit transactions.
//!
//! PostgreSQL runs everything a client sends up to Sync as one implicit
//! transaction when no `BEGIN` is open: pgjdbc's `executeBatch`,
//! asyncpg's `executemany` and psycopg's pipelines send many
//! Bind/Execute pairs and one Sync, and a row that fails takes the rows
//! before it back with it. Most extended-protocol traffic is the other
//! case, though: one statement and its Sync (every autocommit statement
//! of psycopg, asyncpg and pgjdbc). A Quarry transaction costs that
//! single write a pessimistic lock, a second prewrite and two timestamps
//! more than an autocommit write (2.2 times the time, measured in
//! `docs/performance.md`), and when its Execute arrives nothing says
//! whether another follows.
//!
//! So the decision waits for the next message. An Execute of a write
//! (INSERT, UPDATE, DELETE; not a RETURNING one read with a row limit)
//! with no transaction open is held back
//! ([`PgSession::defer`]), and nothing is sent for it yet: PostgreSQL's
//! protocol lets a server keep its output until Sync or Flush, and a
//! client that waits for an answer sends one of them.
//!
//! * **Sync** next: the batch was that one write. It runs as an
//!   autocommit write, exactly as before, and ReadyForQuery follows.
//! * **Anything else** next (Parse, Bind, Describe, Execute, Close,
//!   Flush): the batch has more in it. The held write runs first, in an
//!   implicit transaction it opens (`session.rs`), and so does every
//!   statement after it until Sync, which commits it, or rolls it back if
//!   any statement of the batch failed, after which the client's messages
//!   up to Sync were skipped, as PostgreSQL skips them.
//!
//! The answers keep their order: the held write's CommandComplete goes
//! out before the next message's. A connection that closes before Sync
//! never runs the held write; the client was never told it ran, and
//! PostgreSQL would have rolled the batch back. An error that pgwire
//! itself raises after the batch's first write (a Bind of a statement
//! that does not exist) fails the batch at the Sync that follows, which
//! rolls it back, as PostgreSQL does. A simple
//! Query in the middle of an extended batch (no client does this) is
//! refused with 08P01 and the held write dropped.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::portal::Portal;
use pgwire::api::query::{send_execution_response, send_query_response, ExtendedQueryHandler};
use pgwire::api::results::Response;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::extendedquery::{
    Bind, Close, Describe, Execute, Flush, Parse, Sync as PgSync,
};
use pgwire::messages::PgWireBackendMessage;

use super::handler::{
    bound_sql, cancellable, failed, format_of, send_changed_parameters, session_of, Handler,
    PgStatement,
};
use super::session::PgSession;
use super::sqlstate::pg_error;
use super::statement::{self, Outcome};

/// The extended-protocol handler: [`Handler`]'s answers, each message
/// first running a write held back for it.
pub struct Batched(pub Handler);

impl Batched {
    /// Runs the write held back, if any: a message other than Sync came
    /// after it, so the batch has more than one statement, and the write
    /// opens its implicit transaction.
    async fn release<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        if let Some(held) = session.take_deferred() {
            session.begin_batch();
            run_held(client, &session, &held).await?;
        }
        Ok(())
    }

    /// The portal `message` executes, if it is a write that may wait for
    /// the next message: no transaction (a block or a batch's) is open
    /// and the portal's statement is an INSERT, UPDATE or DELETE.
    fn may_hold<C>(
        client: &mut C,
        session: &PgSession,
        message: &Execute,
    ) -> Option<Arc<Portal<PgStatement>>>
    where
        C: ClientInfo + ClientPortalStore,
        C::PortalStore: PortalStore<Statement = PgStatement>,
    {
        if session.txn().is_some() || session.in_batch() {
            return None;
        }
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p)) => p,
            _ => return None,
        };
        let stmt = &portal.statement.statement;
        // (A RETURNING write read in pieces, an Execute with a row limit,
        // runs as it comes: pgwire's portal keeps its place. pgjdbc sends
        // a limit of 1 with every write; without RETURNING it is no limit.)
        let write = matches!(statement::outcome(stmt.sql()), Outcome::Count(_))
            && (message.max_rows == 0 || !stmt.returns_rows());
        write.then_some(portal)
    }
}

/// Runs a held write's portal and sends its answer, as pgwire's Execute
/// would: its rows (a RETURNING clause; described already) or its
/// CommandComplete.
async fn run_held<C>(
    client: &mut C,
    session: &PgSession,
    portal: &Portal<PgStatement>,
) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let ran = async {
        let sql = bound_sql(portal)?;
        let format = portal.result_column_format.clone();
        let format = move |i: usize| format_of(&format, i);
        cancellable(client, session.run(&sql, &format)).await
    }
    .await;
    let sent = match ran {
        Ok(Response::Execution(tag)) => match send_changed_parameters(client, session).await {
            Ok(()) => send_execution_response(client, tag).await,
            Err(e) => Err(e),
        },
        Ok(Response::Query(rows)) => send_query_response(client, rows, false).await,
        Ok(_) => Err(pg_error(
            "XX000",
            "internal error: a held write answered neither rows nor a command tag",
        )),
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        return Err(failed(client, session, e).await);
    }
    client.set_transaction_status(session.status());
    Ok(())
}

/// Sends `e` as an ErrorResponse (on Sync, where pgwire's own error path
/// would not send ReadyForQuery after it).
async fn send_error<C>(client: &mut C, e: PgWireError) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let info: ErrorInfo = e.into();
    client
        .feed(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    Ok(())
}

#[async_trait]
impl ExtendedQueryHandler for Batched {
    type Statement = PgStatement;
    type QueryParser = Handler;

    fn query_parser(&self) -> Arc<Handler> {
        self.0.query_parser()
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        self.0.on_parse(client, message).await
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        self.0.on_bind(client, message).await
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        let session = session_of(client)?;
        if let Some(portal) = Self::may_hold(client, &session, &message) {
            session.defer(portal);
            return Ok(());
        }
        self.0.on_execute(client, message).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        self.0.on_describe(client, message).await
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        self.0.on_close(client, message).await
    }

    async fn on_flush<C>(&self, client: &mut C, message: Flush) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.release(client).await?;
        self.0.on_flush(client, message).await
    }

    async fn on_sync<C>(&self, client: &mut C, message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let held = session.take_deferred();
        // After an error (AwaitingSync) the batch is over: a write held
        // before it is dropped, and its implicit transaction, if one
        // opened, rolls back, whichever message failed (pgwire's own
        // Bind and Describe errors do not pass through the session), as
        // PostgreSQL rolls the batch back.
        if matches!(client.state(), PgWireConnectionState::AwaitingSync) {
            session
                .statement_failed("an earlier message of the batch failed")
                .await;
        }
        if let (Some(held), PgWireConnectionState::ReadyForQuery) = (held, client.state()) {
            // The batch was this one write: an autocommit write.
            if let Err(e) = run_held(client, &session, &held).await {
                send_error(client, e).await?;
            }
        }
        // The batch ends: its implicit transaction commits, or rolls back
        // if a statement in it failed.
        if let Err(e) = session.end_batch().await {
            let e = failed(client, &session, e).await;
            send_error(client, e).await?;
        }
        client.set_transaction_status(session.status());
        self.0.on_sync(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<PgStatement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.0.do_query(client, portal, max_rows).await
    }
}
