//! The raft transport between processes: one long-lived client stream per
//! destination store, fed one batch per store loop round.
//!
//! Addresses come from a [`StoreResolver`] that the node keeps current
//! from the meta region. While a store is unreachable its messages are
//! dropped (raft retries on its own) and the stream is re-opened after a
//! short pause.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use quarry_proto::raft::raft_client::RaftClient;
use quarry_proto::raft::{RaftMessage, RaftMessageBatch};
use quarry_proto::MAX_MESSAGE_BYTES;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::peers::PeerClients;
use crate::transport::Transport;

/// Store id → address, as far as this store knows.
#[derive(Default)]
pub struct StoreResolver {
    addrs: RwLock<HashMap<u64, String>>,
}

impl StoreResolver {
    pub fn get(&self, store_id: u64) -> Option<String> {
        self.addrs.read().get(&store_id).cloned()
    }

    pub fn set(&self, store_id: u64, addr: String) {
        self.addrs.write().insert(store_id, addr);
    }

    pub fn all(&self) -> HashMap<u64, String> {
        self.addrs.read().clone()
    }
}

pub struct GrpcTransport {
    rt: tokio::runtime::Handle,
    resolver: Arc<StoreResolver>,
    peers: Arc<PeerClients>,
    senders: HashMap<u64, mpsc::Sender<RaftMessageBatch>>,
    pending: HashMap<u64, Vec<RaftMessage>>,
}

impl GrpcTransport {
    pub fn new(
        rt: tokio::runtime::Handle,
        resolver: Arc<StoreResolver>,
        peers: Arc<PeerClients>,
    ) -> Self {
        GrpcTransport {
            rt,
            resolver,
            peers,
            senders: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    fn sender(&mut self, store_id: u64) -> &mpsc::Sender<RaftMessageBatch> {
        let (rt, resolver, peers) = (self.rt.clone(), self.resolver.clone(), self.peers.clone());
        self.senders.entry(store_id).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(256);
            rt.spawn(stream_to_store(store_id, resolver, peers, rx));
            tx
        })
    }
}

impl Transport for GrpcTransport {
    fn send(&mut self, msg: RaftMessage) {
        let store = msg.to_peer.map_or(0, |p| p.store_id);
        self.pending.entry(store).or_default().push(msg);
    }

    fn flush(&mut self) {
        for (store, msgs) in std::mem::take(&mut self.pending) {
            if msgs.is_empty() {
                continue;
            }
            // A full queue means the store is not keeping up or is gone:
            // drop, raft will resend.
            let _ = self.sender(store).try_send(RaftMessageBatch { msgs });
        }
    }
}

async fn stream_to_store(
    store_id: u64,
    resolver: Arc<StoreResolver>,
    peers: Arc<PeerClients>,
    mut rx: mpsc::Receiver<RaftMessageBatch>,
) {
    loop {
        let Some(addr) = resolver.get(store_id) else {
            // Unknown address: drop what is queued, look again shortly.
            while rx.try_recv().is_ok() {}
            tokio::time::sleep(Duration::from_millis(200)).await;
            if rx.is_closed() {
                return;
            }
            continue;
        };
        let channel = match peers.stream_channel(&addr) {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut client = RaftClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, stream_rx) = mpsc::channel(64);
        let call = tokio::spawn(async move { client.raft(ReceiverStream::new(stream_rx)).await });
        loop {
            match rx.recv().await {
                None => return,
                Some(batch) => {
                    if tx.send(batch).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = call.await;
        tracing::debug!(store = store_id, addr, "raft stream ended; reconnecting");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
