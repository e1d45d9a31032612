//! Compute process configuration (TOML with CLI overrides; see
//! `etc/compute.toml` for the commented template).

use serde::Deserialize;

use crate::{Error, Result};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ComputeConfig {
    /// Address to serve Arrow Flight SQL on (`127.0.0.1:0` picks a port).
    pub addr: String,
    /// Address to serve PostgreSQL's wire protocol on (`127.0.0.1:0`
    /// picks a port; empty: none). TLS and logins as for Flight SQL.
    pub pg_addr: String,
    /// HTTP status port: Prometheus `/metrics` and `/health` (empty: none;
    /// port 0 picks a free one). Served by the `quarry` binary.
    pub status_addr: String,
    /// Statements that take at least this long are logged at WARN with
    /// their plan and per-region task statistics (0: none).
    pub slow_query_ms: u64,
    /// Storage processes to reach the cluster through (any store answers
    /// meta questions; they are tried in order).
    pub stores: Vec<String>,
    /// A query fails with a deadline error after this long.
    pub query_timeout_ms: u64,
    /// Regions a query works on at once (and the most a store gets in
    /// one batched call).
    pub max_inflight_regions: usize,
    /// Bound on one region response (the store pages past it).
    pub max_response_bytes: u64,
    /// How region answers travel: `arrow` (column chunks, DECIMAL(p ≤ 18)
    /// as Decimal64), `arrow-decimal128` (column chunks, decimals as
    /// stored: the baseline of narrow decimals) or `rows` (row-encoded, the
    /// baseline of chunks).
    pub encode: String,
    /// Hash joins send the probe side's regions a Bloom filter of their
    /// build keys when there are too many for an IN list (off: only the
    /// keys' bounds go, the baseline kept for comparison).
    pub join_bloom_filters: bool,
    /// The most build keys per join partition that reach the probe side's
    /// regions as an IN list (past it: a Bloom filter, or bounds only).
    pub join_key_list_max: usize,
    /// In a transaction, `SELECT … FOR UPDATE` of rows its primary key
    /// names locks them with one request that returns them (off: find,
    /// lock, read again; the baseline kept for comparison).
    pub lock_returns_rows: bool,
    /// A statement's text may be at most this long (RESOURCE_EXHAUSTED
    /// past it, before it is parsed).
    pub max_statement_bytes: usize,
    /// The largest gRPC message Flight SQL accepts or sends, in MiB
    /// (RESOURCE_EXHAUSTED past it).
    pub max_message_mb: usize,
    /// Each query's memory pool in MiB (0: unbounded): joins, sorts and
    /// aggregations past it spill or fail with RESOURCE_EXHAUSTED.
    pub query_memory_limit_mb: u64,
    /// Statements whose optimized plans are kept for their next run (0:
    /// none; `df/plan_cache.rs`).
    pub plan_cache_entries: usize,
    /// A query's answer up to this many MiB is gathered before it is sent
    /// (a query that fails sends nothing); a larger one streams, its
    /// plan at most a few batches ahead of the client (0: every answer
    /// streams from its first batch; `engine.rs`, `QueryEngine::stream_in`).
    pub stream_results_after_mb: usize,
    /// When a query spreads over every live compute process (MPP,
    /// `mpp/`): `off`, `auto` (scans of tables past a million rows) or
    /// `force`; a session's `SET mpp` overrides it.
    pub mpp: String,
    /// The `host:port` other compute processes reach this one's gRPC port
    /// at, for MPP tasks (empty: the address it listens on, which must
    /// then not be a wildcard such as 0.0.0.0).
    pub advertise_addr: String,
    /// `[security]`: TLS for Flight SQL clients (who then log in with a
    /// password) and mutual TLS to the stores (`quarry_proto::security`).
    pub security: quarry_proto::security::SecurityConfig,
}

/// When a query's plan spreads over compute processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MppMode {
    /// Every query in one process.
    Off,
    /// Large scans over every live compute process, the rest in one.
    Auto,
    /// Every region scan over the live compute processes (a task per
    /// region at most).
    Force,
}

impl MppMode {
    pub fn parse(value: &str) -> Result<MppMode> {
        let v = value.trim().trim_matches('\'').trim();
        match v.to_ascii_lowercase().as_str() {
            "off" | "false" | "0" => Ok(MppMode::Off),
            "auto" | "on" | "default" => Ok(MppMode::Auto),
            "force" => Ok(MppMode::Force),
            _ => Err(crate::plan_err!(
                "invalid mpp '{v}': expected 'off', 'auto' or 'force'"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MppMode::Off => "off",
            MppMode::Auto => "auto",
            MppMode::Force => "force",
        }
    }
}

/// Plans kept by default (`plan-cache-entries`; `df/plan_cache.rs`).
pub const DEFAULT_PLAN_CACHE_ENTRIES: usize = 256;
/// Build-side keys sent as an IN list by default (`join-key-list-max`;
/// `df/join_keys.rs`).
pub const DEFAULT_JOIN_KEY_LIST_MAX: usize = 1 << 14;
/// The longest statement by default (`max-statement-bytes`; `sql/guard.rs`).
pub const DEFAULT_MAX_STATEMENT_BYTES: usize = 4 << 20;

impl Default for ComputeConfig {
    fn default() -> Self {
        ComputeConfig {
            addr: "127.0.0.1:4000".into(),
            pg_addr: String::new(),
            status_addr: "127.0.0.1:10080".into(),
            slow_query_ms: 300,
            stores: vec![],
            query_timeout_ms: 60_000,
            max_inflight_regions: 32,
            max_response_bytes: 8 << 20,
            encode: "arrow".into(),
            join_bloom_filters: true,
            join_key_list_max: DEFAULT_JOIN_KEY_LIST_MAX,
            lock_returns_rows: true,
            max_statement_bytes: DEFAULT_MAX_STATEMENT_BYTES,
            max_message_mb: quarry_proto::MAX_MESSAGE_BYTES >> 20,
            query_memory_limit_mb: 4096,
            plan_cache_entries: DEFAULT_PLAN_CACHE_ENTRIES,
            stream_results_after_mb: 64,
            mpp: "off".into(),
            advertise_addr: String::new(),
            security: Default::default(),
        }
    }
}

impl ComputeConfig {
    pub fn validate(&self) -> Result<()> {
        if self.stores.is_empty() {
            return Err(Error::InvalidInput(
                "compute needs at least one store address (--stores)".into(),
            ));
        }
        if self.query_timeout_ms == 0
            || self.max_inflight_regions == 0
            || self.max_statement_bytes == 0
            || self.max_message_mb == 0
        {
            return Err(Error::InvalidInput(
                "query-timeout-ms, max-inflight-regions, max-statement-bytes and max-message-mb \
                 must be positive"
                    .into(),
            ));
        }
        if self.max_message_mb >= 4096 {
            return Err(Error::InvalidInput(
                "max-message-mb must be below 4096".into(),
            ));
        }
        MppMode::parse(&self.mpp).map_err(|_| {
            Error::InvalidInput(format!(
                "mpp must be 'off', 'auto' or 'force', got '{}'",
                self.mpp
            ))
        })?;
        if !matches!(self.encode.as_str(), "arrow" | "arrow-decimal128" | "rows") {
            return Err(Error::InvalidInput(format!(
                "encode must be 'arrow', 'arrow-decimal128' or 'rows', got '{}'",
                self.encode
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses() {
        let cfg: ComputeConfig = toml::from_str(include_str!("../../etc/compute.toml")).unwrap();
        assert_eq!(cfg.query_timeout_ms, 60_000);
        assert!(toml::from_str::<ComputeConfig>("bogus = 1").is_err());
    }
}
