//! `quarry backup` and `quarry restore`: BACKUP and RESTORE from a shell,
//! with an engine of their own (`quarry::backup` does the work).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use quarry_compute::config::ComputeConfig;

use crate::{init_logging, ClusterTlsArgs};

#[derive(Args)]
pub struct BackupArgs {
    /// Stores of the cluster, comma-separated (any one answers).
    #[arg(long, value_delimiter = ',', required = true)]
    store: Vec<String>,
    /// Tables to back up, comma-separated (default: every table).
    #[arg(long, value_delimiter = ',')]
    tables: Vec<String>,
    #[command(flatten)]
    tls: ClusterTlsArgs,
    /// The directory to write (made if missing; it must hold no backup).
    dir: PathBuf,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// Stores of the cluster, comma-separated (any one answers).
    #[arg(long, value_delimiter = ',', required = true)]
    store: Vec<String>,
    /// Tables to restore, comma-separated (default: every table in the
    /// backup).
    #[arg(long, value_delimiter = ',')]
    tables: Vec<String>,
    /// Drop a table of the same name first (else one is an error).
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    tls: ClusterTlsArgs,
    /// The backup's directory.
    dir: PathBuf,
}

/// An engine of its own for `quarry backup` and `quarry restore`.
fn engine_for(store: &[String]) -> Result<quarry_compute::engine::QueryEngine> {
    Ok(quarry_compute::engine::QueryEngine::new(&ComputeConfig {
        stores: store.to_vec(),
        // Whole-table reads: not slow queries to report.
        slow_query_ms: 0,
        ..Default::default()
    })?
    .without_analysis())
}

/// What `quarry backup` and `quarry restore` print.
fn backup_summary(
    word: &str,
    done: &[quarry::backup::TableDone],
    read_ts: u64,
    secs: f64,
) -> String {
    let mut out = String::new();
    for d in done {
        out.push_str(&format!(
            "{word} {}: {} rows, {} files, {} bytes\n",
            d.table, d.rows, d.files, d.bytes
        ));
    }
    let rows: u64 = done.iter().map(|d| d.rows).sum();
    out.push_str(&format!(
        "{word} {} tables, {rows} rows at read_ts {read_ts} in {secs:.1} s ({:.0} rows/s)\n",
        done.len(),
        rows as f64 / secs.max(1e-9)
    ));
    out
}

pub async fn backup(args: BackupArgs) -> Result<()> {
    init_logging("warn");
    args.tls.install()?;
    let engine = engine_for(&args.store)?;
    let dir = std::path::absolute(&args.dir)?;
    let opts = quarry::backup::BackupOptions {
        location: dir.display().to_string(),
        tables: args.tables,
    };
    let started = std::time::Instant::now();
    let (done, m) = quarry::backup::backup(&engine, &opts).await?;
    let secs = started.elapsed().as_secs_f64();
    print!("{}", backup_summary("backed up", &done, m.read_ts, secs));
    Ok(())
}

pub async fn restore(args: RestoreArgs) -> Result<()> {
    init_logging("warn");
    args.tls.install()?;
    let engine = engine_for(&args.store)?;
    let dir = std::path::absolute(&args.dir)?;
    let opts = quarry::backup::RestoreOptions {
        location: dir.display().to_string(),
        tables: args.tables,
        replace: args.replace,
    };
    let started = std::time::Instant::now();
    let (done, m) = quarry::backup::restore(&engine, &opts).await?;
    let secs = started.elapsed().as_secs_f64();
    print!("{}", backup_summary("restored", &done, m.read_ts, secs));
    Ok(())
}
