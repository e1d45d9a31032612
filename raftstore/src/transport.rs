//! Sending raft messages to other stores.
//!
//! The store loop hands every outgoing message to a [`Transport`]. In a
//! real process that is [`crate::grpc_transport::GrpcTransport`] (one
//! long-lived tonic stream per destination store); tests use an in-memory
//! transport with filters (`raftstore/tests/cluster.rs`). Raft tolerates
//! lost messages, so a transport may drop what it cannot deliver.

use quarry_proto::raft::RaftMessage;

pub trait Transport: Send + 'static {
    fn send(&mut self, msg: RaftMessage);

    /// Called once per store loop round, after the round's messages.
    fn flush(&mut self) {}
}
