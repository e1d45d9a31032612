//! Quarry's storage process: RocksDB, raft-replicated regions, and the
//! services that read and write them.
//!
//! REGIONS
//!
//! The keyspace (see [`keys`]) is cut into regions: key ranges
//! `[start, end)` with an epoch (`version` grows when the range changes,
//! `conf_ver` when the peers change) and peers on distinct stores, three by
//! default. A table gets its regions when it is created, pre-split at
//! handles the creator chooses; regions later split in two when they grow
//! past `region-split-size-mb`. Every request names a region and the epoch it
//! believes in; a store that disagrees answers with a region error:
//! `NotLeader` (with the leader it knows), `EpochNotMatch` (with the current
//! region), `RegionNotFound`, `KeyNotInRegion`, `ServerIsBusy`,
//! `StaleCommand`. Region errors are data: the caller refreshes its route
//! and retries, it does not fail.
//!
//! REPLICATION
//!
//! Each region is a raft group ([raft-rs](https://docs.rs/raft)); each store
//! runs one loop thread that drives all of its peers ([`store`]): it steps
//! incoming messages, ticks, and runs the Ready procedure in order, with one
//! fsync for the raft log writes of every peer in a round, before any
//! message that depends on them leaves. Writes are proposed by the leader
//! ([`peer::propose`]) and acknowledged once applied; apply writes the data
//! and the apply state in one write batch ([`apply`]). A command refused
//! for a reason every replica shares (a stale epoch, a duplicate key) is
//! answered and passed over; an apply error of this replica alone (a failed
//! disk read) stops the store instead of skipping the entry.
//!
//! APPLY BEFORE PERSISTING THE COMMIT INDEX (TiDB 4.0, `early-apply`):
//! committed entries already in the local log are applied before the
//! HardState carrying the new commit index is written. The apply state
//! records the commit index and term it applied under; on restart the commit
//! index is moved forward from it after checking the log holds that entry,
//! or the store refuses to start ("may lose data"). See [`peer_storage`].
//!
//! READS
//!
//! Only a region's leader serves reads. Under its lease (renewed by quorum
//! rounds, shorter than the election timeout) it reads local state at once
//! — checked on the request's own thread against the leases the store loop
//! publishes ([`local_read`]); otherwise it confirms leadership with
//! ReadIndex and waits until it has applied up to the read index
//! ([`peer::read`]).
//! Coprocessor requests then run on a thread pool over a RocksDB snapshot
//! bounded to the region, a big region's aggregation cut into parts
//! scanned in parallel ([`node`]).
//!
//! THE META REGION
//!
//! Region 1, keys `[m, n)`, holds the catalog, the region directory, the
//! stores and the id allocators ([`meta`]). The first store of a cluster
//! creates it; its leader adds replicas as stores join. Every store answers
//! Meta calls, forwarding to the meta leader, so compute keeps no state.
//!
//! CODE MAP
//!
//! * [`engine`]: the engine trait, RocksDB and in-memory implementations.
//! * State: [`peer_storage`] (one replica's durable raft state, and the
//!   only writer of its keys), [`peer`] (the replica: raft node, waiting
//!   proposals and reads, lease), [`apply`] (executing committed entries).
//! * Behaviours of a peer, each in its own module: [`peer::propose`]
//!   (proposals and their answers), [`peer::read`] (lease and ReadIndex
//!   reads), [`peer::compact_log`] (raft log truncation),
//!   [`peer::balance`] (leadership transfers, the preferred leader).
//! * [`store`]: the driver, the store loop: message routing, ticks, the
//!   Ready procedure, and peers' creation and destruction; [`transport`]
//!   and [`grpc_transport`]: raft messages between stores.
//! * [`node`]: what services call; [`local_read`]: lease reads without the
//!   store loop; [`meta`]: the catalog; [`worker`]: heartbeats, meta
//!   replicas, splits, and [`compaction`] of column tables' row delta.
//! * [`import`]: SST files uploaded by bulk loaders, which an `IngestSst`
//!   command has every replica ingest whole.
//! * [`service`]: the gRPC services; [`server`]: process start and stop.
//!
//! MEMBERSHIP
//!
//! Leaders move to each region's preferred peer (`peers[id % n]`) when it
//! is caught up, which spreads leaders evenly over stores
//! ([`peer::balance`]). A store not heard
//! from for `max-store-down-secs` has its replicas re-created on stores
//! without one (remove the dead peer, then add the new one, eight regions
//! at a time; `meta.rs` says why in that order), when such stores exist.
//!
//! IMPLEMENTATION CAVEATS
//!
//! * Apply runs on the store loop thread; a large write delays other
//!   regions' rounds on the same store.
//! * Snapshots are built and sent whole (one message holding the region's
//!   data); regions are kept small enough by splitting.
//! * The lease assumes clocks drift little within its 800 ms.
//! * A coprocessor request keeps running after its caller gives up, until
//!   its deadline.

// Library code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod apply;
pub mod compaction;
pub mod concurrency;
pub mod config;
pub mod engine;
mod error;
pub mod grpc_transport;
pub mod import;
pub mod keys;
pub mod local_read;
pub mod meta;
pub mod metrics;
pub mod node;
pub mod peer;
pub mod peer_storage;
pub mod peers;
pub mod pessimistic;
pub mod read_pool;
pub mod region;
pub mod server;
pub mod service;
pub mod store;
pub mod transport;
pub mod txn;
pub mod worker;

pub use error::{Error, Result};
