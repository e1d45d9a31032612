//! `quarry playground`: a local cluster in one command (`quarry::local`),
//! optionally secure (`quarry::secure`), kept running and restarted child
//! by child until SIGINT/SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use quarry::load::{existing_tables, load_tpch, LoadOptions};
use quarry::local::{ClusterArgs, LocalCluster, Proc};
use quarry::tpch::Table;
use tokio::signal::unix::{signal, SignalKind};

use crate::server_cmd::shutdown_signal;
use crate::{load_summary, table_list, tables_or_all, LayoutArg};

#[derive(Args)]
pub struct PlaygroundArgs {
    /// Where the cluster keeps its data (reused on the next start).
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value_t = 3)]
    stores: usize,
    /// Load TPC-H at this scale factor (skipped if DIR has it).
    #[arg(long)]
    sf: Option<f64>,
    /// The TPC-H tables to load with --sf, comma-separated (default: all
    /// eight).
    #[arg(long, value_delimiter = ',')]
    tables: Vec<Table>,
    /// Replicas per region.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// raftstore.early-apply for every store (on/off).
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    early_apply: Option<bool>,
    /// raftstore.region-split-size-mb for every store.
    #[arg(long)]
    region_split_size_mb: Option<u64>,
    /// raftstore.compact-delta-rows for every store.
    #[arg(long)]
    compact_delta_rows: Option<u64>,
    /// raftstore.gc-life-time-secs for every store.
    #[arg(long)]
    gc_life_time_secs: Option<u64>,
    /// The pessimistic-lock optimizations: pipelined locks in every store
    /// and locks that return their rows in compute (false: neither).
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    pessimistic_optimizations: Option<bool>,
    /// Storage layout of the loaded tables: column or row.
    #[arg(long, value_enum, default_value_t = LayoutArg::Column)]
    layout: LayoutArg,
    /// max-store-down-secs for every store.
    #[arg(long)]
    max_store_down_secs: Option<u64>,
    /// Query timeout for the compute process.
    #[arg(long)]
    query_timeout_ms: Option<u64>,
    /// Each query's memory pool in MiB in the compute process (0:
    /// unbounded).
    #[arg(long)]
    query_memory_limit_mb: Option<u64>,
    /// Statements whose optimized plans the compute process keeps (0:
    /// none).
    #[arg(long)]
    plan_cache_entries: Option<usize>,
    /// Answers larger than this many MiB stream from the compute process
    /// (0: all stream).
    #[arg(long)]
    stream_results_after_mb: Option<usize>,
    /// The compute process's slow-query threshold (default 300 ms).
    #[arg(long)]
    slow_query_ms: Option<u64>,
    /// Compute processes to start (each also an MPP worker; the first is
    /// the one printed as `compute:`, the others as `compute N:`).
    #[arg(long, default_value_t = 1)]
    computes: usize,
    /// When a query spreads over every compute process: off, auto or
    /// force (compute.mpp for every compute process).
    #[arg(long)]
    mpp: Option<String>,
    /// TLS everywhere and logins: certificates made under DIR/certs, the
    /// user root with --password; the compute URL is https.
    #[arg(long, requires = "password")]
    secure: bool,
    /// root's password with --secure.
    #[arg(long, env = "QUARRY_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Restart a child that exited after this long (SIGHUP restarts at once).
    #[arg(long, default_value_t = 3000)]
    restart_delay_ms: u64,
    /// Stop when the parent process goes away (used by tests).
    #[arg(long, hide = true)]
    exit_with_parent: bool,
}

/// " status URL" when the process serves a status port.
fn status_of(p: &Proc) -> String {
    p.status
        .as_ref()
        .map(|s| format!(" status {s}"))
        .unwrap_or_default()
}

/// "compute: pid P addr URL[ status URL]", the line tests and scripts
/// read the compute address from.
fn print_compute(out: &mut impl Write, p: &Proc, url: &str) -> std::io::Result<()> {
    print_compute_line(out, p.pid, url, &status_of(p))
}

fn print_compute_line(
    out: &mut impl Write,
    pid: u32,
    url: &str,
    status: &str,
) -> std::io::Result<()> {
    writeln!(out, "compute: pid {pid} addr {url}{status}")?;
    out.flush()
}

fn print_store(out: &mut impl Write, n: usize, p: &Proc) -> std::io::Result<()> {
    writeln!(
        out,
        "storage {n}: pid {} addr {}{}",
        p.pid,
        p.addr,
        status_of(p)
    )?;
    out.flush()
}

/// `quarry playground`: starts the cluster, loads TPC-H if asked, prints
/// the process lines and `ready`, then supervises until a signal.
pub async fn run(a: PlaygroundArgs) -> Result<()> {
    let mut args = ClusterArgs {
        replicas: a.replicas,
        secure: a.secure,
        ..Default::default()
    };
    let certs = match a.secure {
        true => Some(secure_children(&a.dir, &mut args)?),
        false => None,
    };
    if let Some(v) = a.early_apply {
        args.store
            .extend(["--early-apply".to_string(), v.to_string()]);
    }
    if let Some(v) = a.region_split_size_mb {
        args.store
            .extend(["--region-split-size-mb".to_string(), v.to_string()]);
    }
    if let Some(v) = a.compact_delta_rows {
        args.store
            .extend(["--compact-delta-rows".to_string(), v.to_string()]);
    }
    if let Some(v) = a.gc_life_time_secs {
        args.store
            .extend(["--gc-life-time-secs".to_string(), v.to_string()]);
    }
    if let Some(v) = a.max_store_down_secs {
        args.store
            .extend(["--max-store-down-secs".to_string(), v.to_string()]);
    }
    if let Some(v) = a.pessimistic_optimizations {
        args.store
            .extend(["--pipelined-pessimistic-lock".to_string(), v.to_string()]);
        args.compute
            .extend(["--lock-returns-rows".to_string(), v.to_string()]);
    }
    if let Some(t) = a.query_timeout_ms {
        args.compute
            .extend(["--query-timeout-ms".to_string(), t.to_string()]);
    }
    if let Some(t) = a.slow_query_ms {
        args.compute
            .extend(["--slow-query-ms".to_string(), t.to_string()]);
    }
    if let Some(m) = a.query_memory_limit_mb {
        args.compute
            .extend(["--query-memory-limit-mb".to_string(), m.to_string()]);
    }
    if let Some(n) = a.plan_cache_entries {
        args.compute
            .extend(["--plan-cache-entries".to_string(), n.to_string()]);
    }
    if let Some(n) = a.stream_results_after_mb {
        args.compute
            .extend(["--stream-results-after-mb".to_string(), n.to_string()]);
    }
    if let Some(m) = &a.mpp {
        args.compute.extend(["--mpp".to_string(), m.clone()]);
    }
    if a.computes == 0 {
        anyhow::bail!("--computes must be at least 1");
    }
    let mut cluster = LocalCluster::start(&a.dir, a.stores, &args).await?;
    let mut more_computes = Vec::new();
    for i in 2..=a.computes {
        let name = format!("compute-{i}");
        more_computes.push(cluster.start_extra_compute(&name, &[]).await?);
    }
    let result = async {
        let mut out = std::io::stdout();
        for (i, s) in cluster.stores.iter().enumerate() {
            print_store(&mut out, i + 1, s)?;
        }
        let c = cluster
            .compute
            .as_ref()
            .ok_or_else(|| anyhow!("no compute process"))?;
        print_compute(&mut out, c, &cluster.compute_url())?;
        for (i, url) in more_computes.iter().enumerate() {
            writeln!(out, "compute {}: addr {url}", i + 2)?;
        }
        if let Some(pg) = &c.postgres {
            let ssl = if a.secure { "?sslmode=require" } else { "" };
            writeln!(
                out,
                "postgres: addr {pg} (psql \"postgresql://root@{pg}/quarry{ssl}\")"
            )?;
        }
        if let Some(certs) = &certs {
            let password = a.password.as_deref().unwrap_or_default();
            quarry::secure::put_user(
                &cluster.store_addrs(),
                "root",
                password,
                true,
                quarry_proto::meta::PutUserMode::Upsert,
            )
            .await
            .context("creating the user root")?;
            writeln!(out, "ca {}", certs.ca.display())?;
        }
        out.flush()?;
        if let Some(sf) = a.sf {
            // The marker says what was loaded: "<sf> <layout> <tables>".
            let marker = a.dir.join("tpch.loaded");
            let have = std::fs::read_to_string(&marker).ok();
            let stores = cluster.store_addrs();
            let tables = tables_or_all(&a.tables);
            let list = table_list(&tables);
            let want = format!("{sf} {} {list}", a.layout.name());
            if have.as_deref() == Some(want.as_str())
                && existing_tables(&stores, &tables).await?.len() == tables.len()
            {
                eprintln!(
                    "TPC-H {list} at SF {sf} is already loaded in {}",
                    a.dir.display()
                );
            } else {
                let _ = std::fs::remove_file(&marker);
                eprintln!("loading TPC-H {list} at SF {sf} ...");
                let r = load_tpch(
                    &stores,
                    &LoadOptions {
                        sf,
                        tables,
                        replace: true,
                        progress: false,
                        layout: a.layout.layout(),
                        ..Default::default()
                    },
                )
                .await?;
                std::fs::write(&marker, want)?;
                eprint!("{}", load_summary(&r));
            }
        }
        writeln!(out, "ready")?;
        out.flush()?;
        supervise(&mut cluster, &a).await
    }
    .await;
    cluster.stop().await;
    result
}

/// A secure playground's certificates (made under DIR/certs once), in
/// every child's flags and in this process's own calls to the stores.
fn secure_children(
    dir: &std::path::Path,
    args: &mut ClusterArgs,
) -> Result<quarry::secure::CertPaths> {
    let certs = quarry::secure::generate_certs(&dir.join("certs"))?;
    let paths = [
        "--ca-path".to_string(),
        certs.ca.display().to_string(),
        "--cert-path".into(),
        certs.cert.display().to_string(),
        "--key-path".into(),
        certs.key.display().to_string(),
    ];
    // Stores, and compute processes' MPP worker service, admit only the
    // cluster's own certificate.
    let allowed = [
        "--cert-allowed-cn".to_string(),
        quarry::secure::NODE_CN.to_string(),
    ];
    args.store.extend(paths.iter().cloned());
    args.store.extend(allowed.iter().cloned());
    args.compute.extend(paths);
    args.compute.extend(allowed);
    quarry::secure::install_cluster_tls(&certs.config())?;
    Ok(certs)
}

/// Keeps the cluster running until SIGINT/SIGTERM: a child that exits is
/// started again (same data dir, same address) after the restart delay,
/// or at once on SIGHUP, and its line is printed again.
async fn supervise(cluster: &mut LocalCluster, a: &PlaygroundArgs) -> Result<()> {
    let shutdown = shutdown_signal(a.exit_with_parent);
    tokio::pin!(shutdown);
    let mut hup = signal(SignalKind::hangup())?;
    let mut down: std::collections::HashMap<Option<usize>, std::time::Instant> = Default::default();
    let mut out = std::io::stdout();
    loop {
        let now_hup = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = hup.recv() => true,
            _ = tokio::time::sleep(Duration::from_millis(200)) => false,
        };
        for (which, status) in cluster.exited() {
            if let std::collections::hash_map::Entry::Vacant(e) = down.entry(which) {
                let name = which.map_or("compute".to_string(), |i| format!("storage {}", i + 1));
                eprintln!(
                    "{name} exited ({status}); restarting it in {} ms",
                    a.restart_delay_ms
                );
                e.insert(std::time::Instant::now());
            }
        }
        let due: Vec<Option<usize>> = down
            .iter()
            .filter(|(_, at)| now_hup || at.elapsed() >= Duration::from_millis(a.restart_delay_ms))
            .map(|(w, _)| *w)
            .collect();
        for which in due {
            match cluster.restart(which).await {
                Ok(p) => {
                    down.remove(&which);
                    match which {
                        Some(i) => print_store(&mut out, i + 1, p)?,
                        None => {
                            let (pid, status) = (p.pid, status_of(p));
                            let url = cluster.compute_url();
                            print_compute_line(&mut out, pid, &url, &status)?;
                        }
                    }
                }
                Err(e) => eprintln!("restart failed: {e:#}"),
            }
        }
    }
}
