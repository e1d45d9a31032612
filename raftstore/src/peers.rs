//! gRPC clients to other stores, one lazily connected channel per address.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use quarry_proto::meta::admin_client::AdminClient;
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::MAX_MESSAGE_BYTES;
use tonic::transport::Channel;

use crate::{Error, Result};

pub struct PeerClients {
    channels: Mutex<HashMap<String, Channel>>,
    streams: Mutex<HashMap<String, Channel>>,
    timeout: Duration,
}

impl PeerClients {
    pub fn new(timeout: Duration) -> Self {
        PeerClients {
            channels: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            timeout,
        }
    }

    pub fn channel(&self, addr: &str) -> Result<Channel> {
        if let Some(c) = self.channels.lock().get(addr) {
            return Ok(c.clone());
        }
        let ep = quarry_proto::security::endpoint(addr)
            .map_err(|e| Error::InvalidInput(format!("store: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(self.timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true);
        let ch = ep.connect_lazy();
        self.channels.lock().insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    /// A channel for long-lived streams (raft messages): no per-call
    /// timeout, only keepalive to notice a dead peer.
    pub fn stream_channel(&self, addr: &str) -> Result<Channel> {
        if let Some(c) = self.streams.lock().get(addr) {
            return Ok(c.clone());
        }
        let ep = quarry_proto::security::endpoint(addr)
            .map_err(|e| Error::InvalidInput(format!("store: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true);
        let ch = ep.connect_lazy();
        self.streams.lock().insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    pub fn admin(&self, addr: &str) -> Result<AdminClient<Channel>> {
        Ok(AdminClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    pub fn meta(&self, addr: &str) -> Result<MetaClient<Channel>> {
        Ok(MetaClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

/// Describes a failed call to another store, naming it.
pub fn unreachable(what: &str, store: &str, status: &tonic::Status) -> Error {
    match status.code() {
        tonic::Code::InvalidArgument => Error::InvalidInput(status.message().to_string()),
        _ => {
            let mut msg = status.message().to_string();
            let mut src = std::error::Error::source(status);
            while let Some(e) = src {
                msg = format!("{msg}: {e}");
                src = e.source();
            }
            Error::Unavailable(format!("{what}: store at {store} is unavailable: {msg}"))
        }
    }
}
