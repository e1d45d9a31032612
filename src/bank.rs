//! `quarry bench bank`: the classic check of snapshot isolation and atomic
//! multi-region writes, as Jepsen's bank test and TiDB's `bank` workload.
//!
//! Accounts over three regions, each starting with [`OPENING_BALANCE`].
//! Clients move random amounts between random pairs of accounts, each
//! transfer one statement and so one transaction:
//!
//! ```sql
//! UPDATE bank_accounts
//!    SET balance = CASE WHEN id = a THEN balance - x ELSE balance + x END
//!  WHERE id IN (a, b)
//! ```
//!
//! while a checker reads `sum(balance)` and `count(*)` in a loop: at any
//! snapshot they must be exactly the opening total, whatever the transfers
//! in flight, whatever their regions, and across a store killed and
//! restarted mid-run (`--kill-store`, embedded cluster only). A transfer
//! that fails (a conflict that outlived its retries, a store down) must
//! change nothing; one whose outcome the client never learned must be all
//! or nothing too. The report counts every violation; a correct cluster
//! has none.
//!
//! Every loop is bounded by `--seconds`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use quarry_client::Client;

use crate::local::{BenchTarget, LocalCluster};

/// Each account's balance before the first transfer.
pub const OPENING_BALANCE: i64 = 1000;

const TABLE: &str = "bank_accounts";

#[derive(Debug, Clone, clap::Args)]
pub struct BankOptions {
    /// A running compute process; without it an embedded local cluster is
    /// started.
    #[arg(long)]
    pub addr: Option<String>,
    #[arg(long, default_value_t = 3)]
    pub stores: usize,
    #[arg(long, default_value_t = 1000)]
    pub accounts: i64,
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// How long the transfers run.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Kill -9 a store a third of the way in and restart it at two thirds
    /// (embedded cluster only).
    #[arg(long)]
    pub kill_store: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BankReport {
    pub clients: usize,
    pub accounts: i64,
    pub seconds: f64,
    /// Transfers that reported success.
    pub transfers: u64,
    pub transfers_per_s: f64,
    /// Transfers that failed (the error kinds in `errors`).
    pub failed: u64,
    pub errors: Vec<String>,
    pub transfer_p50_ms: f64,
    pub transfer_p99_ms: f64,
    /// Snapshot reads of the total, and how many saw a wrong one.
    pub checks: u64,
    pub violations: u64,
    pub first_violation: Option<String>,
    pub killed_store: bool,
}

/// A small deterministic generator (xorshift64*): each client its own.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn int(batches: &[arrow::array::RecordBatch], col: usize) -> Result<i64> {
    let b = batches.first().context("no rows")?;
    let a = b
        .column(col)
        .as_primitive_opt::<Int64Type>()
        .context("not a BIGINT")?;
    if a.is_empty() || a.is_null(0) {
        bail!("NULL");
    }
    Ok(a.value(0))
}

/// Creates the accounts (dropping an old table of that name).
async fn open_accounts(url: &str, accounts: i64) -> Result<()> {
    let mut c = Client::connect(url).await?;
    c.sql(&format!("DROP TABLE IF EXISTS {TABLE}")).await?;
    c.sql(&format!(
        "CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) \
         WITH (split_handles = '{},{}')",
        accounts / 3,
        2 * accounts / 3
    ))
    .await?;
    let ids: Vec<i64> = (0..accounts).collect();
    for chunk in ids.chunks(500) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|i| format!("({i}, {OPENING_BALANCE})"))
            .collect();
        c.sql(&format!("INSERT INTO {TABLE} VALUES {}", rows.join(", ")))
            .await?;
    }
    Ok(())
}

/// The error's kind, for the report: its first words.
fn kind_of(e: &str) -> String {
    e.split_whitespace().take(6).collect::<Vec<_>>().join(" ")
}

pub async fn bench_bank(opts: &BankOptions) -> Result<BankReport> {
    if opts.accounts < 2 {
        bail!("--accounts must be at least 2");
    }
    if opts.kill_store && opts.addr.is_some() {
        bail!("--kill-store needs the embedded cluster (no --addr)");
    }
    let mut target =
        BenchTarget::open(opts.addr.as_deref(), opts.stores, "quarry-bench-bank-").await?;
    let result = run(&target.url.clone(), opts, target.cluster.as_mut()).await;
    target.close().await;
    result
}

async fn run(
    url: &str,
    opts: &BankOptions,
    cluster: Option<&mut LocalCluster>,
) -> Result<BankReport> {
    open_accounts(url, opts.accounts)
        .await
        .context("opening the accounts")?;
    let total = opts.accounts * OPENING_BALANCE;
    let run_for = Duration::from_secs_f64(opts.seconds);
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));

    // The checker: every snapshot holds the opening total.
    let checks = Arc::new(AtomicU64::new(0));
    let checker = {
        let (url, stop, checks) = (url.to_string(), stop.clone(), checks.clone());
        let accounts = opts.accounts;
        tokio::spawn(async move {
            let mut violations = 0u64;
            let mut first = None;
            let mut c = Client::connect(&url).await?;
            while !stop.load(Ordering::SeqCst) {
                let q = format!("SELECT sum(balance) AS s, count(*) AS n FROM {TABLE}");
                match c.sql(&q).await {
                    Ok(b) => {
                        checks.fetch_add(1, Ordering::SeqCst);
                        let (s, n) = (int(&b, 0)?, int(&b, 1)?);
                        if s != total || n != accounts {
                            violations += 1;
                            first.get_or_insert(format!(
                                "a snapshot held {n} accounts with {s} in all; \
                                 expected {accounts} with {total}"
                            ));
                        }
                    }
                    // A read may fail while a store is down; it must not
                    // be wrong.
                    Err(e) => tracing::debug!("check failed: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<_, anyhow::Error>((violations, first))
        })
    };

    // The transfers.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..opts.clients {
        let (url, stop) = (url.to_string(), stop.clone());
        let accounts = opts.accounts as u64;
        tasks.spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((w as u64 + 1) * 0x1234_5678_9abc));
            let mut c = Client::connect(&url).await?;
            let (mut ok, mut lat, mut errors) = (0u64, Vec::new(), Vec::new());
            let mut bad = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let a = rng.below(accounts) as i64;
                let b = ((a as u64 + 1 + rng.below(accounts - 1)) % accounts) as i64;
                let x = 1 + rng.below(50) as i64;
                let t = Instant::now();
                let r = c
                    .sql(&format!(
                        "UPDATE {TABLE} SET balance = CASE WHEN id = {a} THEN balance - {x} \
                         ELSE balance + {x} END WHERE id IN ({a}, {b})"
                    ))
                    .await;
                match r {
                    Ok(batches) => {
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        ok += 1;
                        if int(&batches, 0).ok() != Some(2) {
                            bad.push(format!(
                                "a transfer between {a} and {b} updated {batches:?}"
                            ));
                        }
                    }
                    Err(e) => {
                        errors.push(kind_of(&e.to_string()));
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>((ok, lat, errors, bad))
        });
    }

    // The fault, if asked: one store down for the middle third.
    if let Some(cluster) = cluster {
        if opts.kill_store {
            tokio::time::sleep(run_for / 3).await;
            let victim = 1.min(cluster.stores.len() - 1);
            let pid = cluster.stores[victim].pid;
            tracing::warn!(store = victim + 1, pid, "killing a store (SIGKILL)");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )?;
            let _ = cluster.stores[victim].child.wait().await;
            tokio::time::sleep(run_for / 3).await;
            cluster
                .restart(Some(victim))
                .await
                .context("restarting the killed store")?;
        }
    }
    let left = run_for.saturating_sub(start.elapsed());
    tokio::time::sleep(left).await;
    stop.store(true, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();

    let (mut transfers, mut lat, mut errors, mut bad) = (0, Vec::new(), Vec::new(), Vec::new());
    while let Some(r) = tasks.join_next().await {
        let (ok, l, e, b) = r??;
        transfers += ok;
        lat.extend(l);
        errors.extend(e);
        bad.extend(b);
    }
    let (mut violations, mut first) = checker.await??;
    violations += bad.len() as u64;
    if first.is_none() {
        first = bad.into_iter().next();
    }
    // The last word: once everything settled, the total is still whole.
    let mut c = Client::connect(url).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = loop {
        match c
            .sql(&format!(
                "SELECT sum(balance) AS s, count(*) AS n FROM {TABLE}"
            ))
            .await
        {
            Ok(b) => break (int(&b, 0)?, int(&b, 1)?),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("final check: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    checks.fetch_add(1, Ordering::SeqCst);
    if last != (total, opts.accounts) {
        violations += 1;
        first.get_or_insert(format!(
            "after the run: {} accounts with {} in all; expected {} with {total}",
            last.1, last.0, opts.accounts
        ));
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let failed = errors.len() as u64;
    errors.sort();
    errors.dedup();
    Ok(BankReport {
        clients: opts.clients,
        accounts: opts.accounts,
        seconds: elapsed,
        transfers,
        transfers_per_s: transfers as f64 / elapsed,
        failed,
        errors,
        transfer_p50_ms: crate::bench::percentile(&lat, 0.5),
        transfer_p99_ms: crate::bench::percentile(&lat, 0.99),
        checks: checks.load(Ordering::SeqCst),
        violations,
        first_violation: first,
        killed_store: opts.kill_store,
    })
}

impl std::fmt::Display for BankReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bank: {} clients, {} accounts, {:.1} s{}: {} transfers ({:.0}/s, p50 {:.2} ms, p99 {:.2} ms), {} failed {:?}; {} snapshot checks, {} violations",
            self.clients,
            self.accounts,
            self.seconds,
            if self.killed_store { ", a store killed and restarted" } else { "" },
            self.transfers,
            self.transfers_per_s,
            self.transfer_p50_ms,
            self.transfer_p99_ms,
            self.failed,
            self.errors,
            self.checks,
            self.violations,
        )?;
        if let Some(v) = &self.first_violation {
            write!(f, " (first: {v})")?;
        }
        Ok(())
    }
}
