//! The Raft service: message batches from other stores into the store loop.

use std::sync::mpsc::Sender;

use parking_lot::Mutex;
use quarry_proto::raft::raft_server::Raft;
use quarry_proto::raft::{RaftDone, RaftMessageBatch};
use tonic::{Request, Response, Status, Streaming};

use crate::store::StoreMsg;

pub struct RaftService {
    router: Mutex<Sender<StoreMsg>>,
    /// Becomes true when the process shuts down: streams from other stores
    /// never end on their own, so they must be cut for shutdown to finish.
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl RaftService {
    pub fn new(router: Sender<StoreMsg>, shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        RaftService {
            router: Mutex::new(router),
            shutdown,
        }
    }
}

#[tonic::async_trait]
impl Raft for RaftService {
    async fn raft(
        &self,
        req: Request<Streaming<RaftMessageBatch>>,
    ) -> Result<Response<RaftDone>, Status> {
        let mut stream = req.into_inner();
        let router = self.router.lock().clone();
        let mut shutdown = self.shutdown.clone();
        loop {
            let batch = tokio::select! {
                b = stream.message() => b?,
                _ = shutdown.wait_for(|down| *down) => None,
            };
            let Some(batch) = batch else { break };
            for m in batch.msgs {
                if router.send(StoreMsg::Raft(Box::new(m))).is_err() {
                    return Err(Status::unavailable("the store is shutting down"));
                }
            }
        }
        Ok(Response::new(RaftDone {}))
    }
}
