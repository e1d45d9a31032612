//! Starting and stopping a compute process: bind, serve Flight SQL until
//! `shutdown`, then drain.

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
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let engine = Arc::new(QueryEngine::new(&cfg)?);
    let listener = TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| Error::InvalidInput(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(quarry_proto::status::layer::<tonic::body::Body>())
            .add_service(flight::service(engine))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            ),
    );
    ready(local);
    serving
        .await
        .map_err(|e| Error::Internal(format!("server task: {e}")))?
        .map_err(|e| Error::Internal(format!("gRPC server: {e}")))?;
    Ok(())
}
