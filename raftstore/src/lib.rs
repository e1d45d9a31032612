//! Quarry's storage process: RocksDB, regions, and the services that read
//! and write them.
//!
//! REGIONS
//!
//! The keyspace (see [`keys`]) is cut into regions: key ranges
//! `[start, end)` with an epoch (`version` grows when the range changes,
//! `conf_ver` when the peers change) and a list of peers on stores. A table
//! gets its regions when it is created, pre-split at handles the creator
//! chooses and spread round-robin over the stores. Every request names a
//! region and the epoch it believes in; a store that disagrees answers with
//! a region error: `RegionNotFound`, `EpochNotMatch` (with the current
//! region), `KeyNotInRegion`, `ServerIsBusy`. Region errors are data: the
//! caller refreshes its route and retries, it does not fail.
//!
//! THE META REGION
//!
//! Region 1, keys `[m, n)`, holds the catalog (tables), the region
//! directory and the store list ([`meta`]). The first store of a cluster
//! creates it; others register through `--join` and forward Meta calls to
//! it, so any store answers routing questions.
//!
//! READS AND WRITES
//!
//! * Writes ([`store::Store::batch_put`]) land in one RocksDB write batch per
//!   request, fsynced before the acknowledgement.
//! * Coprocessor requests run on a thread pool sized to the cores, each over
//!   a RocksDB snapshot bounded to its region; see
//!   `quarry_coprocessor::endpoint` for what happens inside.
//!
//! CODE MAP
//!
//! * [`engine`]: the engine trait, RocksDB and in-memory implementations.
//! * [`store`]: regions held by this process, region checks, reads, writes.
//! * [`meta`]: catalog and directory, on the store holding the meta region.
//! * [`service`]: the gRPC services; [`server`]: process start and stop.
//!
//! IMPLEMENTATION CAVEATS
//!
//! * One replica per region: a store that is down makes its regions (and,
//!   for the first store, the meta region) unavailable until it returns.
//!   Raft replication, leader reads and splits are not built yet.
//! * Regions never split or move after CREATE TABLE; size them with the
//!   split handles.
//! * A coprocessor request keeps running after its caller gives up, until
//!   its deadline.

pub mod config;
pub mod engine;
mod error;
pub mod keys;
pub mod meta;
pub mod peers;
pub mod region;
pub mod server;
pub mod service;
pub mod store;

pub use error::{Error, Result};
