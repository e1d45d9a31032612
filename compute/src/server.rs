//! Starting and stopping a compute process: bind, serve Flight SQL (and
//! PostgreSQL's protocol, with `pg-addr`) until `shutdown`, then drain. With `[security]`, Flight SQL is served over
//! TLS, every call but the handshake needs a login (`auth.rs`) or, for
//! MPP worker calls, the cluster's certificate, and the stores and other
//! compute processes are called with this process's certificate.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::config::ComputeConfig;
use crate::engine::QueryEngine;
use crate::{flight, Error, Result};

pub async fn run(
    cfg: ComputeConfig,
    ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    use futures::FutureExt;
    let shutdown = shutdown.shared();
    let tls = cfg.security.load().map_err(Error::InvalidInput)?;
    if let Some(tls) = &tls {
        quarry_proto::security::install_client(tls.client());
    }
    cfg.validate()?;
    let listener = TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| Error::InvalidInput(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    // Every compute process also runs other processes' MPP tasks, on
    // this one port (`mpp/`).
    let advertised = match cfg.advertise_addr.as_str() {
        "" if local.ip().is_unspecified() => {
            tracing::warn!(
                "listening on {local}: MPP is off in this process (set advertise-addr to the \
                 address other compute processes reach it at)"
            );
            None
        }
        "" => Some(local.to_string()),
        addr => Some(addr.to_string()),
    };
    let engine = Arc::new(QueryEngine::serving(&cfg, advertised.as_deref())?);
    let worker = engine
        .sql_session()
        .worker()
        .map(|w| w.into_worker_server());
    quarry_proto::security::check_bind(local, tls.is_some(), cfg.security.insecure)
        .map_err(Error::InvalidInput)?;
    // PostgreSQL clients, on their own port when asked for.
    let mut pg_local = None;
    if !cfg.pg_addr.is_empty() {
        let pg_tls = match &tls {
            Some(_) => Some(crate::pg::PgTls::load(
                &cfg.security.cert_path,
                &cfg.security.key_path,
            )?),
            None => None,
        };
        let pg_listener = TcpListener::bind(&cfg.pg_addr).await.map_err(|e| {
            Error::InvalidInput(format!("cannot listen on {} (pg-addr): {e}", cfg.pg_addr))
        })?;
        let bound = pg_listener
            .local_addr()
            .map_err(|e| Error::Internal(e.to_string()))?;
        quarry_proto::security::check_bind(bound, tls.is_some(), cfg.security.insecure)
            .map_err(|e| Error::InvalidInput(format!("pg-addr: {e}")))?;
        pg_local = Some(bound);
        let engine = engine.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::pg::serve(pg_listener, engine, pg_tls, stop).await {
                tracing::error!("postgres listener: {e}");
            }
        });
    }
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        // Clients prove who they are with a password; other compute
        // processes' MPP calls with the cluster's certificate, which the
        // port asks for without requiring it (`auth.rs`).
        builder = builder
            .tls_config(tls.server_optional_client_cert())
            .map_err(|e| Error::InvalidInput(format!("[security]: {e}")))?;
    }
    let serving = tokio::spawn(
        builder
            .layer(quarry_proto::status::layer::<tonic::body::Body>())
            .layer(engine.auth().layer())
            .layer(flight::CookieLayer)
            .add_service(flight::service(engine, cfg.max_message_mb << 20))
            .add_optional_service(worker)
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            ),
    );
    ready(local, pg_local);
    serving
        .await
        .map_err(|e| Error::Internal(format!("server task: {e}")))?
        .map_err(|e| Error::Internal(format!("gRPC server: {e}")))?;
    Ok(())
}
