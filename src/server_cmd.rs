//! `quarry storage` and `quarry compute`: the two server roles, their
//! command-line flags (which override the TOML config file), the status
//! port each serves, and how they stop (SIGTERM, SIGINT, or the parent's
//! exit when a playground started them).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use quarry_compute::config::ComputeConfig;
use quarry_raftstore::config::StorageConfig;
use tokio::signal::unix::{signal, SignalKind};

/// `[security]` from the command line (they override the config file).
#[derive(Args)]
struct SecurityArgs {
    /// [security] ca-path: the cluster's CA certificate (PEM).
    #[arg(long)]
    ca_path: Option<String>,
    /// [security] cert-path: this process's certificate (PEM).
    #[arg(long)]
    cert_path: Option<String>,
    /// [security] key-path: its private key (PEM).
    #[arg(long)]
    key_path: Option<String>,
    /// [security] cert-allowed-cn: common names callers' certificates
    /// must carry, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cert_allowed_cn: Option<Vec<String>>,
    /// Serve plaintext on an address that is not loopback.
    #[arg(long)]
    insecure: bool,
}

impl SecurityArgs {
    fn apply(self, s: &mut quarry_proto::security::SecurityConfig) {
        if let Some(v) = self.ca_path {
            s.ca_path = v;
        }
        if let Some(v) = self.cert_path {
            s.cert_path = v;
        }
        if let Some(v) = self.key_path {
            s.key_path = v;
        }
        if let Some(v) = self.cert_allowed_cn {
            s.cert_allowed_cn = v;
        }
        s.insecure |= self.insecure;
    }
}

#[derive(Args)]
pub(crate) struct StorageArgs {
    /// TOML config file (see etc/storage.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    store_id: Option<u64>,
    /// Listen address; port 0 picks a free one.
    #[arg(long)]
    addr: Option<String>,
    #[arg(long)]
    advertise_addr: Option<String>,
    /// HTTP status address (/metrics, /health); port 0 picks a free one.
    #[arg(long)]
    status_addr: Option<String>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Stores to join, comma-separated (none: bootstrap a new cluster).
    #[arg(long, value_delimiter = ',')]
    join: Option<Vec<String>>,
    #[arg(long)]
    block_cache_mb: Option<usize>,
    #[arg(long)]
    read_pool_threads: Option<usize>,
    /// Replicas per region.
    #[arg(long)]
    replicas: Option<usize>,
    /// raftstore.early-apply: apply before persisting the commit index.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    early_apply: Option<bool>,
    /// raftstore.region-split-size-mb.
    #[arg(long)]
    region_split_size_mb: Option<u64>,
    /// raftstore.compact-delta-rows: fold a column table's row delta into
    /// packs after this many rows.
    #[arg(long)]
    compact_delta_rows: Option<u64>,
    /// raftstore.gc-life-time-secs: keep MVCC versions this long.
    #[arg(long)]
    gc_life_time_secs: Option<u64>,
    /// raftstore.pipelined-pessimistic-lock: answer a FOR UPDATE lock
    /// before raft replicates it.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    pipelined_pessimistic_lock: Option<bool>,
    /// Re-create a down store's replicas elsewhere after this long.
    #[arg(long)]
    max_store_down_secs: Option<u64>,
    #[command(flatten)]
    security: SecurityArgs,
    /// Print the default configuration as TOML and exit.
    #[arg(long)]
    print_default_config: bool,
    /// Stop when the parent process goes away (used by playground).
    #[arg(long, hide = true)]
    exit_with_parent: bool,
}

#[derive(Args)]
pub(crate) struct ComputeArgs {
    /// TOML config file (see etc/compute.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    addr: Option<String>,
    /// Address to serve PostgreSQL's wire protocol on (port 0 picks one).
    #[arg(long)]
    pg_addr: Option<String>,
    /// HTTP status address (/metrics, /health); port 0 picks a free one.
    #[arg(long)]
    status_addr: Option<String>,
    /// Log statements slower than this (ms) at WARN with their plan and
    /// region statistics; 0 turns the slow-query log off.
    #[arg(long)]
    slow_query_ms: Option<u64>,
    /// Store addresses, comma-separated.
    #[arg(long, value_delimiter = ',')]
    stores: Option<Vec<String>>,
    #[arg(long)]
    query_timeout_ms: Option<u64>,
    /// Each query's memory pool in MiB (0: unbounded).
    #[arg(long)]
    query_memory_limit_mb: Option<u64>,
    /// Statements whose optimized plans are kept (0: none).
    #[arg(long)]
    plan_cache_entries: Option<usize>,
    /// Answers larger than this many MiB stream to the client; smaller
    /// ones are gathered first (0: all stream).
    #[arg(long)]
    stream_results_after_mb: Option<usize>,
    #[arg(long)]
    max_inflight_regions: Option<usize>,
    /// How regions answer: arrow (column chunks, narrow decimals),
    /// arrow-decimal128 or rows (the baselines).
    #[arg(long)]
    encode: Option<String>,
    /// Bloom filters of hash joins' build keys to the probe side's regions.
    #[arg(long)]
    join_bloom_filters: Option<bool>,
    /// The most build keys per join partition sent to regions as a list.
    #[arg(long)]
    join_key_list_max: Option<usize>,
    /// When a query spreads over every live compute process: off, auto
    /// or force (a session's SET mpp overrides it).
    #[arg(long)]
    mpp: Option<String>,
    /// The host:port other compute processes reach this one at for MPP
    /// tasks (default: --addr).
    #[arg(long)]
    advertise_addr: Option<String>,
    /// In a transaction, FOR UPDATE of rows named by key locks them with
    /// one request that returns them.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    lock_returns_rows: Option<bool>,
    #[command(flatten)]
    security: SecurityArgs,
    #[arg(long)]
    print_default_config: bool,
    #[arg(long, hide = true)]
    exit_with_parent: bool,
}

/// Resolves on SIGTERM, SIGINT, or (optionally) when the parent dies.
pub(crate) async fn shutdown_signal(exit_with_parent: bool) {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    let parent = async {
        if !exit_with_parent {
            return std::future::pending().await;
        }
        let ppid = nix::unistd::getppid();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if nix::unistd::getppid() != ppid {
                break;
            }
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = parent => {}
    }
}

fn read_config<T: serde::de::DeserializeOwned + Default>(path: &Option<PathBuf>) -> Result<T> {
    match path {
        None => Ok(T::default()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))
        }
    }
}

pub(crate) async fn storage(a: StorageArgs) -> Result<()> {
    if a.print_default_config {
        print!("{}", include_str!("../etc/storage.toml"));
        return Ok(());
    }
    let mut cfg: StorageConfig = read_config(&a.config)?;
    if let Some(v) = a.store_id {
        cfg.store_id = v;
    }
    if let Some(v) = a.addr {
        cfg.addr = v;
    }
    if a.advertise_addr.is_some() {
        cfg.advertise_addr = a.advertise_addr;
    }
    if let Some(v) = a.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = a.join {
        cfg.join = v.into_iter().filter(|s| !s.is_empty()).collect();
    }
    if let Some(v) = a.block_cache_mb {
        cfg.block_cache_mb = v;
    }
    if let Some(v) = a.read_pool_threads {
        cfg.read_pool_threads = v;
    }
    if let Some(v) = a.replicas {
        cfg.replicas = v;
    }
    if let Some(v) = a.early_apply {
        cfg.raftstore.early_apply = v;
    }
    if let Some(v) = a.region_split_size_mb {
        cfg.raftstore.region_split_size_mb = v;
    }
    if let Some(v) = a.compact_delta_rows {
        cfg.raftstore.compact_delta_rows = v;
    }
    if let Some(v) = a.gc_life_time_secs {
        cfg.raftstore.gc_life_time_secs = v;
    }
    if let Some(v) = a.pipelined_pessimistic_lock {
        cfg.raftstore.pipelined_pessimistic_lock = v;
    }
    if let Some(v) = a.max_store_down_secs {
        cfg.max_store_down_secs = v;
    }
    if let Some(v) = a.status_addr {
        cfg.status_addr = v;
    }
    a.security.apply(&mut cfg.security);
    let id = cfg.store_id;
    let status = status_suffix(&cfg.status_addr, None).await?;
    quarry_raftstore::server::run(
        cfg,
        |addr| {
            println!("storage {id} listening on {addr}{status}");
            let _ = std::io::stdout().flush();
        },
        shutdown_signal(a.exit_with_parent),
    )
    .await?;
    Ok(())
}

pub(crate) async fn compute(a: ComputeArgs) -> Result<()> {
    if a.print_default_config {
        print!("{}", include_str!("../etc/compute.toml"));
        return Ok(());
    }
    let mut cfg: ComputeConfig = read_config(&a.config)?;
    if let Some(v) = a.addr {
        cfg.addr = v;
    }
    if let Some(v) = a.stores {
        cfg.stores = v.into_iter().filter(|s| !s.is_empty()).collect();
    }
    if let Some(v) = a.query_timeout_ms {
        cfg.query_timeout_ms = v;
    }
    if let Some(v) = a.query_memory_limit_mb {
        cfg.query_memory_limit_mb = v;
    }
    if let Some(v) = a.plan_cache_entries {
        cfg.plan_cache_entries = v;
    }
    if let Some(v) = a.stream_results_after_mb {
        cfg.stream_results_after_mb = v;
    }
    if let Some(v) = a.max_inflight_regions {
        cfg.max_inflight_regions = v;
    }
    if let Some(v) = a.encode {
        cfg.encode = v;
    }
    if let Some(v) = a.join_bloom_filters {
        cfg.join_bloom_filters = v;
    }
    if let Some(v) = a.lock_returns_rows {
        cfg.lock_returns_rows = v;
    }
    if let Some(v) = a.join_key_list_max {
        cfg.join_key_list_max = v;
    }
    if let Some(v) = a.mpp {
        cfg.mpp = v;
    }
    if let Some(v) = a.advertise_addr {
        cfg.advertise_addr = v;
    }
    if let Some(v) = a.status_addr {
        cfg.status_addr = v;
    }
    if let Some(v) = a.slow_query_ms {
        cfg.slow_query_ms = v;
    }
    if let Some(v) = a.pg_addr {
        cfg.pg_addr = v;
    }
    a.security.apply(&mut cfg.security);
    quarry_compute::engine::backup::install(std::sync::Arc::new(quarry::backup::Hook::new(
        cfg.clone(),
    )));
    let console = quarry::console::Console::new(cfg.stores.clone());
    let status = status_suffix(&cfg.status_addr, Some(console.clone())).await?;
    // The address it registers under as an MPP worker (`server::run`).
    let advertised = cfg.advertise_addr.clone();
    quarry_compute::server::run(
        cfg,
        move |addr, pg| {
            console.set_compute_addr(match advertised.as_str() {
                "" => addr.to_string(),
                a => a.to_string(),
            });
            let pg = pg.map(|a| format!(" postgres {a}")).unwrap_or_default();
            println!("compute listening on {addr}{status}{pg}");
            let _ = std::io::stdout().flush();
        },
        shutdown_signal(a.exit_with_parent),
    )
    .await?;
    Ok(())
}

/// Starts the status server on `addr` (none if empty); returns what the
/// "listening on" line ends with: " status http://HOST:PORT".
async fn status_suffix(
    addr: &str,
    console: Option<std::sync::Arc<quarry::console::Console>>,
) -> Result<String> {
    if addr.is_empty() {
        return Ok(String::new());
    }
    let bound = quarry::status_server::serve(addr, console).await?;
    Ok(format!(" status {}", quarry::status_server::url(bound)))
}
