//! `quarry bench tpch`: time TPC-H queries against a cluster and check the
//! answers against DuckDB's.
//!
//! Without `--addr` it starts an embedded local cluster (real processes,
//! 3 stores) in a temporary directory and loads the data first. Each query
//! runs once to warm up, then `--runs` times; times are wall-clock from the
//! client's call to the last result batch.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_client::Client;

use crate::load::{load_tpch, LoadOptions};
use crate::local::LocalCluster;
use crate::tpch;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub addr: Option<String>,
    pub sf: f64,
    pub queries: Vec<String>,
    pub runs: usize,
    pub stores: usize,
    pub cluster_args: crate::local::ClusterArgs,
    pub progress: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub query: String,
    pub sf: f64,
    pub runs: usize,
    pub min_ms: f64,
    pub median_ms: f64,
    pub rows: usize,
    /// "match", "unknown" (no known answer at this scale) or the mismatch.
    pub answer: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadSummary {
    pub sf: f64,
    pub rows: u64,
    pub seconds: f64,
    pub regions: usize,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times each query on the compute process at `url`.
pub async fn run_queries(url: &str, opts: &BenchOptions) -> Result<Vec<QueryReport>> {
    let mut client = Client::connect(url).await?;
    let mut out = Vec::new();
    for q in &opts.queries {
        let Some(sql) = tpch::query(q) else {
            bail!("unknown query '{q}': known are q1, q6");
        };
        let warm = client.sql(sql).await?;
        let answer = match tpch::expected(q, opts.sf) {
            None => "unknown".to_string(),
            Some(csv) => match tpch::compare(&warm, csv) {
                Ok(()) => "match".into(),
                Err(e) => format!("mismatch: {e}"),
            },
        };
        let mut times = Vec::with_capacity(opts.runs);
        let mut rows = warm.iter().map(|b| b.num_rows()).sum();
        for _ in 0..opts.runs.max(1) {
            let t = Instant::now();
            let batches = client.sql(sql).await?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            rows = batches.iter().map(|b| b.num_rows()).sum();
        }
        out.push(QueryReport {
            query: q.clone(),
            sf: opts.sf,
            runs: times.len(),
            min_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
            median_ms: median(times),
            rows,
            answer,
        });
    }
    Ok(out)
}

/// Runs the bench; returns the load summary (embedded cluster only) and
/// one report per query.
pub async fn bench_tpch(opts: &BenchOptions) -> Result<(Option<LoadSummary>, Vec<QueryReport>)> {
    if let Some(url) = &opts.addr {
        return Ok((None, run_queries(url, opts).await?));
    }
    let dir = tempfile::Builder::new().prefix("quarry-bench-").tempdir()?;
    let mut cluster = LocalCluster::start(dir.path(), opts.stores, &opts.cluster_args).await?;
    let result = async {
        let load = load_tpch(
            &cluster.store_addrs(),
            &LoadOptions {
                sf: opts.sf,
                progress: opts.progress,
                ..Default::default()
            },
        )
        .await?;
        let summary = LoadSummary {
            sf: opts.sf,
            rows: load.rows,
            seconds: load.seconds,
            regions: load.regions,
        };
        let reports = run_queries(&cluster.compute_url(), opts).await?;
        Ok::<_, anyhow::Error>((Some(summary), reports))
    }
    .await;
    cluster.stop().await;
    result
}

/// `quarry bench write`: the cost of replication, and what early apply
/// buys, measured side by side in one run.
#[derive(Debug, Clone)]
pub struct WriteBenchOptions {
    pub stores: usize,
    pub sf: f64,
    /// Sequential single-row INSERTs timed one by one.
    pub inserts: usize,
    /// Concurrent writers for the throughput phase.
    pub writers: usize,
    pub settings: Vec<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct WriteReport {
    pub early_apply: bool,
    pub replicas: usize,
    pub load_rows_per_s: f64,
    pub load_seconds: f64,
    pub insert_p50_ms: f64,
    pub insert_p99_ms: f64,
    pub insert_mean_ms: f64,
    pub concurrent_writes_per_s: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn write_phase(url: &str, opts: &WriteBenchOptions) -> Result<(Vec<f64>, f64)> {
    let mut c = Client::connect(url).await?;
    c.sql("CREATE TABLE w (id BIGINT PRIMARY KEY, v BIGINT)")
        .await?;
    let mut lat = Vec::with_capacity(opts.inserts);
    for i in 0..opts.inserts as i64 {
        let t = Instant::now();
        c.sql(&format!("INSERT INTO w VALUES ({i}, {})", i * 3))
            .await?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // Concurrent writers, each its own connection and key range.
    let per = opts.inserts.max(opts.writers);
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..opts.writers as i64 {
        let url = url.to_string();
        tasks.spawn(async move {
            let mut c = Client::connect(&url).await?;
            for i in 0..per as i64 {
                let id = 1_000_000 * (w + 1) + i;
                let t = Instant::now();
                c.sql(&format!("INSERT INTO w VALUES ({id}, 1)")).await?;
                if t.elapsed() > Duration::from_millis(100) {
                    tracing::warn!(
                        writer = w,
                        insert = i,
                        ms = t.elapsed().as_millis() as u64,
                        "slow concurrent INSERT"
                    );
                }
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let rate = (per * opts.writers) as f64 / t.elapsed().as_secs_f64();
    Ok((lat, rate))
}

pub async fn bench_write(opts: &WriteBenchOptions) -> Result<Vec<WriteReport>> {
    let mut out = Vec::new();
    for &early in &opts.settings {
        let dir = tempfile::Builder::new()
            .prefix("quarry-bench-write-")
            .tempdir()?;
        let args = crate::local::ClusterArgs {
            store: vec!["--early-apply".into(), early.to_string()],
            ..Default::default()
        };
        let mut cluster = LocalCluster::start(dir.path(), opts.stores, &args).await?;
        let result = async {
            let load = load_tpch(
                &cluster.store_addrs(),
                &LoadOptions {
                    sf: opts.sf,
                    progress: false,
                    ..Default::default()
                },
            )
            .await
            .context("loading")?;
            let (mut lat, rate) = write_phase(&cluster.compute_url(), opts)
                .await
                .context("inserting")?;
            lat.sort_by(|a, b| a.total_cmp(b));
            tracing::info!(slowest = ?&lat[lat.len().saturating_sub(5)..], "slowest INSERTs (ms)");
            Ok::<_, anyhow::Error>(WriteReport {
                early_apply: early,
                replicas: opts.stores.min(3),
                load_rows_per_s: load.rows as f64 / load.seconds,
                load_seconds: load.seconds,
                insert_p50_ms: percentile(&lat, 0.5),
                insert_p99_ms: percentile(&lat, 0.99),
                insert_mean_ms: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
                concurrent_writes_per_s: rate,
            })
        }
        .await;
        cluster.stop().await;
        if std::env::var_os("QUARRY_KEEP_BENCH_DIR").is_some() {
            eprintln!("cluster dir kept: {}", dir.keep().display());
            out.push(result?);
            continue;
        }
        match result {
            Ok(r) => out.push(r),
            Err(e) => {
                let kept = dir.keep();
                return Err(e.context(format!("cluster logs kept in {}", kept.display())));
            }
        }
    }
    Ok(out)
}
