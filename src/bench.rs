//! `quarry bench tpch`: time TPC-H queries against a cluster and check the
//! answers against DuckDB's.
//!
//! Without `--addr` it starts an embedded local cluster (real processes,
//! 3 stores) in a temporary directory and loads the data first. Each query
//! runs once to warm up, then `--runs` times; times are wall-clock from the
//! client's call to the last result batch.

use std::time::Instant;

use anyhow::{bail, Result};
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
