//! PostgreSQL's wire protocol: the second front end over the engine.
//!
//! Most tools people already have speak PostgreSQL's protocol (psql,
//! psycopg, asyncpg, SQLAlchemy, pgjdbc and the BI tools on it). Each
//! compute process can listen for them (`--pg-addr`, `compute.pg-addr`)
//! beside Flight SQL. The protocol itself is the `pgwire` crate's
//! (message framing, SSL negotiation, SCRAM, the extended protocol's
//! statement and portal store, cancel keys); Quarry supplies:
//!
//! * `startup.rs`: the database name, trust or TLS + SCRAM-SHA-256
//!   against Quarry's users, and a session per connection;
//! * `session.rs`: the connection's session, transaction control and
//!   settings, and running one statement through the engine — the calls
//!   Flight SQL makes, so plans, deadlines, metrics and the slow log are
//!   the same;
//! * `handler.rs`: simple and extended query, ReadyForQuery's state,
//!   cancel;
//! * `batch.rs`: an extended-protocol batch as one implicit transaction,
//!   a lone write still an autocommit one;
//! * `statement.rs`: splitting, the session's statements, PostgreSQL
//!   syntax rewritten for DataFusion, command tags;
//! * `copy.rs`: `COPY … FROM STDIN` (text, CSV and binary) as batches of
//!   INSERTs;
//!   `session/copy_io.rs`: a session's COPY under way;
//! * `encode.rs` / `decode.rs`: Arrow values as PostgreSQL text and
//!   binary, and bound parameters back;
//! * `sqlstate.rs`: Quarry's error categories as SQLSTATE codes.
//!
//! Catalog queries (`pg_catalog`, `information_schema`, `version()`,
//! `current_setting`) are the engine's, for every front end
//! (`df/pg_catalog.rs`). What differs from PostgreSQL is written in
//! `docs/postgres.md`.

mod batch;
mod copy;
mod decode;
mod encode;
mod handler;
mod session;
mod sqlstate;
mod startup;
mod statement;

use std::net::SocketAddr;
use std::sync::Arc;

use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::{ConnectionManager, PgWireServerHandlers};
use tokio::net::TcpListener;

use crate::engine::QueryEngine;
use crate::{Error, Result};

pub use session::{SERVER_VERSION, SERVER_VERSION_NUM};

/// Everything a connection is served with.
struct Handlers {
    handler: Arc<handler::Handler>,
    extended: Arc<batch::Batched>,
    startup: Arc<startup::Startup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.extended.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }

    fn error_handler(&self) -> Arc<impl pgwire::api::ErrorHandler> {
        Arc::new(startup::LoginErrors)
    }
}

/// TLS for PostgreSQL clients: the compute process's certificate and key
/// (the PEM files of `[security]`).
pub struct PgTls {
    acceptor: pgwire::tokio::TlsAcceptor,
    cert_pem: Vec<u8>,
}

impl PgTls {
    /// Loads `cert_path` and `key_path`; an unreadable or invalid file is
    /// an error naming it (the process refuses to start).
    pub fn load(cert_path: &str, key_path: &str) -> Result<Self> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |what: &str, path: &str, e: &dyn std::fmt::Display| {
            Error::InvalidInput(format!("[security] {what} {path}: {e}"))
        };
        let cert_pem = std::fs::read(cert_path).map_err(|e| bad("cert-path", cert_path, &e))?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad("cert-path", cert_path, &e))?;
        if certs.is_empty() {
            return Err(bad("cert-path", cert_path, &"no certificate in it"));
        }
        let key =
            PrivateKeyDer::from_pem_file(key_path).map_err(|e| bad("key-path", key_path, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidInput(format!("[security]: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| Error::InvalidInput(format!("[security] certificate and key: {e}")))?;
        // Direct TLS (sslnegotiation=direct) names PostgreSQL's protocol.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(PgTls {
            acceptor: pgwire::tokio::TlsAcceptor::from(Arc::new(config)),
            cert_pem,
        })
    }
}

/// Serves PostgreSQL clients on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<QueryEngine>,
    tls: Option<PgTls>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let manager = Arc::new(ConnectionManager::new());
    let startup = startup::Startup::new(
        engine,
        manager.clone(),
        tls.as_ref().map(|t| t.cert_pem.as_slice()),
    )
    .map_err(|e| Error::InvalidInput(format!("[security] for PostgreSQL clients: {e}")))?;
    let handlers = Arc::new(Handlers {
        handler: Arc::new(handler::Handler),
        extended: Arc::new(batch::Batched(handler::Handler)),
        startup: Arc::new(startup),
        cancel: Arc::new(DefaultCancelHandler::new(manager)),
    });
    let acceptor = tls.map(|t| t.acceptor);
    tokio::pin!(shutdown);
    loop {
        let (socket, peer): (_, SocketAddr) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("postgres accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let handlers = handlers.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            // The connection's session ends with it (`PgSession`'s drop).
            if let Err(e) = pgwire::tokio::process_socket(socket, acceptor, handlers).await {
                tracing::debug!(%peer, "postgres connection: {e}");
            }
        });
    }
}
