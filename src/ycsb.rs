//! `quarry bench ycsb`: the Yahoo! Cloud Serving Benchmark's core
//! workloads (the MyTopling seed's yardstick) over SQL.
//!
//! A `usertable` of `--records` rows (a BIGINT key and ten 100-byte
//! fields, as YCSB's defaults) over three regions; clients pick keys from
//! YCSB's zipfian distribution (θ = 0.99, hot keys scattered over the key
//! space) and run, by workload:
//!
//! | workload | reads | updates |
//! |---|---|---|
//! | a | 50% | 50% |
//! | b | 95% | 5% |
//! | c | 100% | 0% |
//!
//! A read is `SELECT * FROM usertable WHERE id = k` and must return exactly
//! one row; an update is `UPDATE usertable SET fN = '…' WHERE id = k`, one
//! transaction (a lost write conflict re-runs inside the statement).
//! Every loop is bounded by `--seconds`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_client::Client;

use crate::bank::Rng;
use crate::bench::percentile;
use crate::local::BenchTarget;

const TABLE: &str = "usertable";
const FIELDS: usize = 10;
const FIELD_LEN: usize = 100;

#[derive(Debug, Clone, clap::Args)]
pub struct YcsbOptions {
    /// A running compute process; without it an embedded local cluster is
    /// started.
    #[arg(long)]
    pub addr: Option<String>,
    #[arg(long, default_value_t = 3)]
    pub stores: usize,
    /// a, b or c.
    #[arg(long, default_value_t = 'a')]
    pub workload: char,
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// How long the operations run.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct YcsbReport {
    pub workload: String,
    pub records: u64,
    pub clients: usize,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub reads: u64,
    pub read_p50_ms: f64,
    pub read_p99_ms: f64,
    pub updates: u64,
    pub update_p50_ms: f64,
    pub update_p99_ms: f64,
    /// Operations that failed, and reads that did not return one row.
    pub failed: u64,
    pub errors: Vec<String>,
}

/// YCSB's zipfian generator (Gray et al., "Quickly generating
/// billion-record synthetic databases"), over `0..n`, its ranks scattered
/// by a hash so the hot keys are not neighbours (YCSB's "scrambled").
struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    fn new(n: u64) -> Self {
        let theta = 0.99;
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipfian {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        // FNV-1a of the rank: scrambled over the key space.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in rank.min(self.n - 1).to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h % self.n
    }
}

fn field_value(rng: &mut Rng) -> String {
    (0..FIELD_LEN)
        .map(|_| (b'a' + rng.below(26) as u8) as char)
        .collect()
}

/// Creates and fills `usertable` (dropping an old one).
async fn load(url: &str, records: u64) -> Result<()> {
    let mut c = Client::connect(url).await?;
    c.sql(&format!("DROP TABLE IF EXISTS {TABLE}")).await?;
    let fields: Vec<String> = (0..FIELDS)
        .map(|i| format!("field{i} VARCHAR({FIELD_LEN})"))
        .collect();
    c.sql(&format!(
        "CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY, {}) WITH (split_handles = '{},{}')",
        fields.join(", "),
        records / 3,
        2 * records / 3
    ))
    .await?;
    let mut rng = Rng(0x5eed);
    let ids: Vec<u64> = (0..records).collect();
    for chunk in ids.chunks(200) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|id| {
                let vals: Vec<String> = (0..FIELDS)
                    .map(|_| format!("'{}'", field_value(&mut rng)))
                    .collect();
                format!("({id}, {})", vals.join(", "))
            })
            .collect();
        c.sql(&format!("INSERT INTO {TABLE} VALUES {}", rows.join(", ")))
            .await?;
    }
    Ok(())
}

pub async fn bench_ycsb(opts: &YcsbOptions) -> Result<YcsbReport> {
    let read_share = match opts.workload {
        'a' => 0.5,
        'b' => 0.95,
        'c' => 1.0,
        other => bail!("unknown YCSB workload '{other}': use a, b or c"),
    };
    if opts.records < 3 {
        bail!("--records must be at least 3");
    }
    let mut target =
        BenchTarget::open(opts.addr.as_deref(), opts.stores, "quarry-bench-ycsb-").await?;
    let result = run(&target.url, opts, read_share).await;
    target.close().await;
    result
}

async fn run(url: &str, opts: &YcsbOptions, read_share: f64) -> Result<YcsbReport> {
    load(url, opts.records).await.context("loading usertable")?;
    let zipf = Arc::new(Zipfian::new(opts.records));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..opts.clients {
        let (url, stop, zipf) = (url.to_string(), stop.clone(), zipf.clone());
        tasks.spawn(async move {
            let mut rng = Rng(0xC0FF_EE00 ^ ((w as u64 + 1) * 0x9E37_79B9));
            let mut c = Client::connect(&url).await?;
            let (mut reads, mut updates, mut errors) = (Vec::new(), Vec::new(), Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let k = zipf.next(&mut rng);
                let read = (rng.below(1_000_000) as f64) < read_share * 1e6;
                let t = Instant::now();
                let r = if read {
                    c.sql(&format!("SELECT * FROM {TABLE} WHERE id = {k}"))
                        .await
                        .map(|b| b.iter().map(|b| b.num_rows()).sum::<usize>())
                } else {
                    let f = rng.below(FIELDS as u64);
                    let v = field_value(&mut rng);
                    c.sql(&format!(
                        "UPDATE {TABLE} SET field{f} = '{v}' WHERE id = {k}"
                    ))
                    .await
                    .map(|_| 1)
                };
                let ms = t.elapsed().as_secs_f64() * 1e3;
                match r {
                    Ok(1) if read => reads.push(ms),
                    Ok(_) if !read => updates.push(ms),
                    Ok(n) => errors.push(format!("a read of key {k} returned {n} rows")),
                    Err(e) => errors.push(
                        e.to_string()
                            .split_whitespace()
                            .take(6)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                }
            }
            Ok::<_, anyhow::Error>((reads, updates, errors))
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(opts.seconds)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut reads, mut updates, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(r) = tasks.join_next().await {
        let (r, u, e) = r??;
        reads.extend(r);
        updates.extend(u);
        errors.extend(e);
    }
    let seconds = start.elapsed().as_secs_f64();
    for v in [&mut reads, &mut updates] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let failed = errors.len() as u64;
    errors.sort();
    errors.dedup();
    let ops = (reads.len() + updates.len()) as u64;
    Ok(YcsbReport {
        workload: opts.workload.to_string(),
        records: opts.records,
        clients: opts.clients,
        seconds,
        ops,
        ops_per_s: ops as f64 / seconds,
        reads: reads.len() as u64,
        read_p50_ms: percentile(&reads, 0.5),
        read_p99_ms: percentile(&reads, 0.99),
        updates: updates.len() as u64,
        update_p50_ms: percentile(&updates, 0.5),
        update_p99_ms: percentile(&updates, 0.99),
        failed,
        errors,
    })
}

impl std::fmt::Display for YcsbReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ycsb-{}: {} records, {} clients, {:.1} s: {:.0} ops/s; {} reads p50 {:.2} ms p99 {:.2} ms; {} updates p50 {:.2} ms p99 {:.2} ms; {} failed {:?}",
            self.workload,
            self.records,
            self.clients,
            self.seconds,
            self.ops_per_s,
            self.reads,
            self.read_p50_ms,
            self.read_p99_ms,
            self.updates,
            self.update_p50_ms,
            self.update_p99_ms,
            self.failed,
            self.errors
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_keys_stay_in_range_and_favour_a_few() {
        let z = Zipfian::new(1000);
        let mut rng = Rng(42);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        // θ = 0.99 over 1000 keys: the ten hottest take about 40%.
        assert!((25_000..55_000).contains(&top10), "{top10}");
        assert!(counts.iter().filter(|c| **c > 0).count() > 500);
    }
}
