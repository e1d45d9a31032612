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
//! With `--txn` an update is what an application does in a pessimistic
//! transaction (TiDB's TPC-C shape): `BEGIN`, `SELECT * … WHERE id = k
//! FOR UPDATE`, the UPDATE, `COMMIT`, the whole of it retried on a write
//! conflict (counted). `--pessimistic-optimizations on|off|both|each`
//! starts the embedded cluster with the pessimistic-lock optimizations
//! (`raftstore/src/pessimistic.rs`: locks that return their rows,
//! pipelined locks) on, off, on then off, or all four combinations in
//! turn, to compare.
//! Every loop is bounded by `--seconds`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_client::Client;

use crate::bank::Rng;
use crate::bench::percentile;
use crate::local::{BenchTarget, ClusterArgs};

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
    /// Updates as pessimistic transactions: BEGIN, SELECT … FOR UPDATE,
    /// UPDATE, COMMIT.
    #[arg(long)]
    pub txn: bool,
    /// The embedded cluster's pessimistic-lock optimizations: on, off,
    /// both (on, then off) or each (also one at a time); one cluster per
    /// setting, in turn.
    #[arg(long, default_value = "on")]
    pub pessimistic_optimizations: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct YcsbReport {
    pub workload: String,
    /// Updates ran as pessimistic transactions (`--txn`).
    pub txn: bool,
    /// The pessimistic-lock optimizations, (locks return their rows,
    /// pipelined locks) (None: a running cluster's own).
    pub pessimistic_optimizations: Option<(bool, bool)>,
    /// Transactions run again after a write conflict.
    pub retries: u64,
    /// With `txn`: the `SELECT … FOR UPDATE` statements' latency.
    pub lock_p50_ms: f64,
    pub lock_p99_ms: f64,
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

/// Runs the workload once per setting of the pessimistic-lock
/// optimizations asked for (each on a fresh embedded cluster).
pub async fn bench_ycsb(opts: &YcsbOptions) -> Result<Vec<YcsbReport>> {
    let read_share = match opts.workload {
        'a' => 0.5,
        'b' => 0.95,
        'c' => 1.0,
        other => bail!("unknown YCSB workload '{other}': use a, b or c"),
    };
    if opts.records < 3 {
        bail!("--records must be at least 3");
    }
    let (on, off) = (Some((true, true)), Some((false, false)));
    let settings = match (opts.pessimistic_optimizations.as_str(), &opts.addr) {
        ("on", Some(_)) => vec![None],
        (_, Some(_)) => bail!(
            "--pessimistic-optimizations applies to the embedded cluster; a running one \
             has its own (quarry playground --pessimistic-optimizations)"
        ),
        ("on", None) => vec![on],
        ("off", None) => vec![off],
        ("both", None) => vec![on, off],
        ("each", None) => vec![on, Some((true, false)), Some((false, true)), off],
        (other, None) => {
            bail!("--pessimistic-optimizations must be on, off, both or each, not {other}")
        }
    };
    let mut reports = Vec::new();
    for setting in settings {
        let mut args = ClusterArgs::default();
        if let Some((rows, pipelined)) = setting {
            args.store
                .extend(["--pipelined-pessimistic-lock".into(), pipelined.to_string()]);
            args.compute
                .extend(["--lock-returns-rows".into(), rows.to_string()]);
        }
        let mut target = BenchTarget::open_with(
            opts.addr.as_deref(),
            opts.stores,
            "quarry-bench-ycsb-",
            &args,
        )
        .await?;
        let result = run(&target.url, opts, read_share).await;
        target.close().await;
        let mut report = result?;
        report.pessimistic_optimizations = setting;
        reports.push(report);
    }
    Ok(reports)
}

/// One YCSB update: a single UPDATE statement, or with `txn` a
/// pessimistic transaction around it, retried on a write conflict; notes
/// each FOR UPDATE's time in `locks` (ms) and returns the retries.
async fn update(
    c: &mut Client,
    txn: bool,
    (k, f, v): (u64, u64, &str),
    locks: &mut Vec<f64>,
) -> std::result::Result<u64, quarry_client::Error> {
    let update = format!("UPDATE {TABLE} SET field{f} = '{v}' WHERE id = {k}");
    if !txn {
        c.sql(&update).await?;
        return Ok(0);
    }
    let mut retries = 0;
    loop {
        let r = async {
            c.sql("BEGIN").await?;
            let t = Instant::now();
            let read = c
                .sql(&format!("SELECT * FROM {TABLE} WHERE id = {k} FOR UPDATE"))
                .await?;
            locks.push(t.elapsed().as_secs_f64() * 1e3);
            let rows: usize = read.iter().map(|b| b.num_rows()).sum();
            if rows != 1 {
                return Err(quarry_client::Error::InvalidInput(format!(
                    "SELECT … FOR UPDATE of key {k} returned {rows} rows"
                )));
            }
            c.sql(&update).await?;
            c.sql("COMMIT").await
        }
        .await;
        match r {
            Ok(_) => return Ok(retries),
            Err(quarry_client::Error::Conflict(_)) if retries < 100 => {
                let _ = c.sql("ROLLBACK").await;
                retries += 1;
            }
            Err(e) => {
                let _ = c.sql("ROLLBACK").await;
                return Err(e);
            }
        }
    }
}

async fn run(url: &str, opts: &YcsbOptions, read_share: f64) -> Result<YcsbReport> {
    load(url, opts.records).await.context("loading usertable")?;
    let zipf = Arc::new(Zipfian::new(opts.records));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..opts.clients {
        let (url, stop, zipf) = (url.to_string(), stop.clone(), zipf.clone());
        let opts_txn = opts.txn;
        tasks.spawn(async move {
            let mut rng = Rng(0xC0FF_EE00 ^ ((w as u64 + 1) * 0x9E37_79B9));
            let mut c = Client::connect(&url).await?;
            let (mut reads, mut updates, mut errors) = (Vec::new(), Vec::new(), Vec::new());
            let mut retries = 0u64;
            let mut locks = Vec::new();
            let txn = opts_txn;
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
                    update(&mut c, txn, (k, f, &v), &mut locks).await.map(|r| {
                        retries += r;
                        1
                    })
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
            Ok::<_, anyhow::Error>((reads, updates, errors, retries, locks))
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(opts.seconds)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut reads, mut updates, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    let (mut retries, mut locks) = (0, Vec::new());
    while let Some(r) = tasks.join_next().await {
        let (r, u, e, n, l) = r??;
        locks.extend(l);
        reads.extend(r);
        updates.extend(u);
        errors.extend(e);
        retries += n;
    }
    let seconds = start.elapsed().as_secs_f64();
    for v in [&mut reads, &mut updates, &mut locks] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let failed = errors.len() as u64;
    errors.sort();
    errors.dedup();
    let ops = (reads.len() + updates.len()) as u64;
    Ok(YcsbReport {
        workload: opts.workload.to_string(),
        txn: opts.txn,
        pessimistic_optimizations: None,
        retries,
        lock_p50_ms: percentile(&locks, 0.5),
        lock_p99_ms: percentile(&locks, 0.99),
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
            "ycsb-{}{}{}: {} records, {} clients, {:.1} s: {:.0} ops/s; {} reads p50 {:.2} ms p99 {:.2} ms; {} updates p50 {:.2} ms p99 {:.2} ms",
            self.workload,
            if self.txn { " (updates in pessimistic transactions)" } else { "" },
            match self.pessimistic_optimizations {
                Some((true, true)) => ", pessimistic-lock optimizations on",
                Some((true, false)) => ", locks return rows (not pipelined)",
                Some((false, true)) => ", pipelined locks (rows read apart)",
                Some((false, false)) => ", pessimistic-lock optimizations off",
                None => "",
            },
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
        )?;
        if self.txn {
            write!(
                f,
                " ({} retried; FOR UPDATE p50 {:.2} ms p99 {:.2} ms)",
                self.retries, self.lock_p50_ms, self.lock_p99_ms
            )?;
        }
        write!(f, "; {} failed {:?}", self.failed, self.errors)
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
