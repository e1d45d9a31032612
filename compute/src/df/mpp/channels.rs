//! The gRPC channels to other compute processes' workers: one per worker,
//! kept for the whole process and shared by every query and task in it,
//! and made the way every other connection inside the cluster is made
//! (`quarry_proto::security::endpoint`): plain HTTP/2 in a plaintext
//! cluster, mutual TLS with this process's certificate in a secure one.
//!
//! `datafusion-distributed`'s own resolver (`DefaultChannelResolver`)
//! does neither. It keeps its channels per `RuntimeEnv`, and every Quarry
//! query has a runtime of its own (its memory pool), so each query would
//! connect to every worker anew and leave the connections idle for
//! minutes (`plan_send_latency` in EXPLAIN ANALYZE). And it dials the
//! worker URL as given, which cannot carry a client certificate: a
//! secure cluster's workers refuse calls without one (`auth.rs`).
//!
//! Worker URLs stay `http://host:port` whatever the mode (they name a
//! process in plans, EXPLAIN ANALYZE and the suspects list); the scheme
//! is this module's choice, not the URL's.
//!
//! A channel that failed to connect is not kept: the next call dials
//! again. One that connected stays; tonic reconnects it when its worker
//! comes back at the same address. Entries are bounded by the distinct
//! worker addresses this process has called, which a restart of a
//! worker at a new port (`127.0.0.1:0`) grows by one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::DataFusionError;
use datafusion_distributed::grpc::{create_worker_client, BoxCloneSyncChannel};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use parking_lot::Mutex;
use tonic::transport::Channel;
use url::Url;

/// How long dialling a worker may take before its call fails (a worker
/// cut off drops packets rather than refusing them).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The process's channels to workers; a clone shares them.
#[derive(Clone, Default)]
pub struct Channels {
    open: Arc<Mutex<HashMap<Url, Channel>>>,
}

impl Channels {
    /// The channel to the worker at `url`, connected on first use.
    async fn channel(&self, url: &Url) -> Result<Channel, DataFusionError> {
        if let Some(ch) = self.open.lock().get(url) {
            return Ok(ch.clone());
        }
        let addr = match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            _ => {
                return Err(DataFusionError::Configuration(format!(
                    "worker URL '{url}' has no host and port"
                )))
            }
        };
        let endpoint = quarry_proto::security::endpoint(&addr)
            .map_err(|e| DataFusionError::Configuration(format!("worker {url}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT);
        // Two first calls at once may both dial; the later one's channel
        // is kept, and both work.
        // UNAVAILABLE, not the user's fault: a worker that is down, cut
        // off, or whose certificate this process does not accept.
        let ch = endpoint.connect().await.map_err(|e| {
            DataFusionError::External(Box::new(crate::Error::Unavailable(format!(
                "cannot connect to the compute process at {addr} (MPP worker): {e}{}",
                source_of(&e)
            ))))
        })?;
        self.open.lock().insert(url.clone(), ch.clone());
        Ok(ch)
    }
}

/// The innermost cause of a transport error (tonic's own text is only
/// "transport error"; the cause names a refused connection or a TLS
/// failure).
fn source_of(e: &tonic::transport::Error) -> String {
    let mut innermost = None;
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        innermost = Some(c);
        cause = c.source();
    }
    innermost.map_or(String::new(), |c| format!(": {c}"))
}

#[async_trait::async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        let ch = self.channel(url).await?;
        Ok(create_worker_client(BoxCloneSyncChannel::new(ch)))
    }
}
