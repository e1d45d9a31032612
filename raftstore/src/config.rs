//! Storage process configuration: defaults in code, a TOML file, CLI
//! overrides (applied by the binary), then [`StorageConfig::validate`].
//! `etc/storage.toml` in the repository is the commented template.

use std::path::PathBuf;

use serde::Deserialize;

use crate::{Error, Result};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct StorageConfig {
    /// This store's id, unique in the cluster and fixed for its data dir.
    pub store_id: u64,
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub addr: String,
    /// Address other processes reach this store at (default: the bound one).
    pub advertise_addr: Option<String>,
    /// HTTP status port: Prometheus `/metrics` and `/health` (empty: none;
    /// port 0 picks a free one). Served by the `quarry` binary.
    pub status_addr: String,
    pub data_dir: PathBuf,
    /// Stores of the cluster to join; empty on the store that bootstraps.
    pub join: Vec<String>,
    /// Coprocessor worker threads (0 = one per core).
    pub read_pool_threads: usize,
    /// Coprocessor requests queued or running past which new ones get
    /// ServerIsBusy.
    pub max_pending_reads: usize,
    /// The largest gRPC message the raft, KV, coprocessor and meta
    /// services accept or send, in MiB (RESOURCE_EXHAUSTED past it).
    pub max_message_mb: usize,
    /// RocksDB's block cache (uncompressed blocks; the working set of
    /// scans). 0: 40% of the machine's memory, as TiKV sizes it for one
    /// store per machine; run several stores on one machine with an
    /// explicit share each.
    pub block_cache_mb: usize,
    /// fsync every write batch before acknowledging it.
    pub sync_writes: bool,
    /// How long a forwarded meta call or a store-to-store call may take.
    pub peer_timeout_ms: u64,
    /// Replicas per region (fewer while the cluster has fewer stores).
    pub replicas: usize,
    /// A store not heard from for this long has its replicas re-created on
    /// other stores (when there are stores without one).
    pub max_store_down_secs: u64,
    pub raftstore: RaftstoreSection,
    /// `[security]`: TLS with mutual authentication (see
    /// `quarry_proto::security`).
    pub security: quarry_proto::security::SecurityConfig,
}

/// `[raftstore]`: replication settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RaftstoreSection {
    /// Apply committed entries before persisting the raft HardState (the
    /// TiDB 4.0 optimization); off persists first.
    pub early_apply: bool,
    /// A region past this size is split in two.
    pub region_split_size_mb: u64,
    /// Move each region's leadership to its preferred peer, so leaders
    /// spread evenly over stores.
    pub balance_leaders: bool,
    /// A column table's region whose row delta (fresh INSERTs) grew by this
    /// many rows has it folded into packs.
    pub compact_delta_rows: u64,
    /// MVCC versions are kept this long: the GC safe point is now minus
    /// this (held back by running reads), and a read of an older snapshot
    /// is refused.
    pub gc_life_time_secs: u64,
    /// Answer an open transaction's row lock (FOR UPDATE) once the leader
    /// found no conflict, before raft replicates it (TiKV's pipelined
    /// pessimistic lock; `raftstore/src/pessimistic.rs`).
    pub pipelined_pessimistic_lock: bool,
}

impl Default for RaftstoreSection {
    fn default() -> Self {
        RaftstoreSection {
            early_apply: true,
            region_split_size_mb: 64,
            balance_leaders: true,
            compact_delta_rows: 1024,
            gc_life_time_secs: 600,
            pipelined_pessimistic_lock: true,
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            store_id: 1,
            addr: "127.0.0.1:20160".into(),
            advertise_addr: None,
            status_addr: "127.0.0.1:20180".into(),
            data_dir: PathBuf::from("quarry-data/store-1"),
            join: vec![],
            read_pool_threads: 0,
            max_pending_reads: 4096,
            max_message_mb: quarry_proto::MAX_MESSAGE_BYTES >> 20,
            block_cache_mb: 0,
            sync_writes: true,
            peer_timeout_ms: 10_000,
            replicas: 3,
            max_store_down_secs: 60,
            raftstore: RaftstoreSection::default(),
            security: Default::default(),
        }
    }
}

impl StorageConfig {
    pub fn validate(&self) -> Result<()> {
        if self.store_id == 0 {
            return Err(Error::InvalidInput("store-id must be at least 1".into()));
        }
        if self.replicas == 0 {
            return Err(Error::InvalidInput("replicas must be at least 1".into()));
        }
        if self.raftstore.region_split_size_mb == 0 {
            return Err(Error::InvalidInput(
                "raftstore.region-split-size-mb must be positive".into(),
            ));
        }
        if self.raftstore.compact_delta_rows == 0 {
            return Err(Error::InvalidInput(
                "raftstore.compact-delta-rows must be positive".into(),
            ));
        }
        if self.raftstore.gc_life_time_secs == 0 {
            return Err(Error::InvalidInput(
                "raftstore.gc-life-time-secs must be positive".into(),
            ));
        }
        if !(1..4096).contains(&self.max_message_mb) {
            return Err(Error::InvalidInput(
                "max-message-mb must be between 1 and 4095".into(),
            ));
        }
        if self.max_pending_reads == 0 {
            return Err(Error::InvalidInput(
                "max-pending-reads must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The block cache size in bytes (resolving 0 = 40% of memory).
    pub fn block_cache_bytes(&self) -> usize {
        if self.block_cache_mb > 0 {
            return self.block_cache_mb << 20;
        }
        (total_memory_bytes().unwrap_or(4 << 30) as f64 * 0.4) as usize
    }

    pub fn read_pool_size(&self) -> usize {
        if self.read_pool_threads > 0 {
            self.read_pool_threads
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        }
    }
}

/// The machine's memory (Linux `/proc/meminfo`).
pub fn total_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses_and_unknown_keys_are_rejected() {
        let template = include_str!("../../etc/storage.toml");
        let cfg: StorageConfig = toml::from_str(template).unwrap();
        cfg.validate().unwrap();
        let err = toml::from_str::<StorageConfig>("no-such-key = 1").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
