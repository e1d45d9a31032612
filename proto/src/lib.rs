//! Quarry's wire contract: the `.proto` files in `proto/` and the tonic/prost
//! code generated from them.
//!
//! * [`meta`]: stores, regions, epochs, tables, region errors; the `Meta`
//!   service (catalog and region directory) and the store-to-store `Admin`
//!   service.
//! * [`kv`]: batched reads and writes addressed to one region.
//! * [`coprocessor`]: the pushed-down DAG (scan, selection, partial
//!   aggregation, projection, limit) and its Arrow-chunk response.
//! * [`compute`]: what clients send compute inside Arrow Flight (structured
//!   queries) and what compute's tickets carry.
//! * [`raft`]: raft messages between stores, the commands raft entries
//!   carry, and each store's local raft and apply state.
//!
//! Nothing here has behaviour but the rules every server and client
//! applies to the bytes it is sent ([`status`]: a request that does not
//! decode is INVALID_ARGUMENT; [`security`]: TLS, mutual TLS inside the
//! cluster, plaintext only on loopback); the crate names the bytes on the
//! wire and how they travel.

#![allow(clippy::all)]

pub mod failpoint;
pub mod security;
pub mod status;
mod table;

pub mod meta {
    tonic::include_proto!("quarry.meta");
}

pub mod kv {
    tonic::include_proto!("quarry.kv");
}

pub mod coprocessor {
    tonic::include_proto!("quarry.coprocessor");
}

pub mod compute {
    tonic::include_proto!("quarry.compute");
}

pub mod raft {
    tonic::include_proto!("quarry.raft");
}

/// The largest gRPC message any Quarry service accepts or sends (loader
/// batches and paged coprocessor responses stay well below it).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
