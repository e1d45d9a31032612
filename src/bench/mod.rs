//! `quarry bench tpch`: time TPC-H queries against a cluster and check the
//! answers against DuckDB's.
//!
//! Without `--addr` it starts an embedded local cluster (real processes,
//! 3 stores) in a temporary directory and loads the data first. Each query
//! runs once to warm up, then `--runs` times; times are wall-clock from the
//! client's call to the last result batch.
//!
//! `--compare` measures, in one run on one machine: the column layout, the
//! row layout, rows instead of Arrow chunks on the wire (a second compute
//! process started with `--encode rows`), decimals as stored instead of
//! narrowed on the wire (a third, `--encode arrow-decimal128`), and DuckDB
//! in memory over the same generated rows when its Python package can be
//! imported, and the column layout's queries once more through Python
//! ADBC, a real Flight SQL client (`adbc.rs`); then prints the ratios and
//! a `targets:` block, issues 15's and 47's targets as measured. `--scale-to SF` then loads lineitem at that scale
//! into a fresh cluster and times Q1 and Q6 there, for the scaling target;
//! `--queries all` gives the 22 queries' geometric mean against DuckDB.
//! Every setting's answers are checked against each other (an
//! order-independent digest of the result) and against DuckDB's: the
//! committed answers where the scale has them, else the ones DuckDB gave
//! at the start of the same run (it runs first, alone on the machine, so
//! that at SF 10 the two engines never hold their data at once). `--skip`
//! leaves settings out; every process's peak resident memory (VmHWM) is
//! reported for the load and, reset in between, for the timed queries.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::RecordBatch;
use quarry_client::Client;
use quarry_proto::meta::Layout;

use crate::load::{load_tpch, LoadOptions};
use crate::local::LocalCluster;
use crate::tpch::{self, Table};

mod adbc;
mod compare;
mod mpp;

pub use compare::{
    bench_compare, bench_scaled, print_compare, CompareReport, ScaledRun, Skippable,
};
pub use mpp::{bench_mpp, print_mpp, MppReport};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub addr: Option<String>,
    pub sf: f64,
    /// The tables an embedded cluster loads.
    pub tables: Vec<Table>,
    pub queries: Vec<String>,
    pub runs: usize,
    pub stores: usize,
    pub cluster_args: crate::local::ClusterArgs,
    pub progress: bool,
    pub layout: Layout,
    /// Answers DuckDB gave earlier in this run (`--compare`), by query:
    /// what a result is checked against where no answer is committed at
    /// this scale ([`expected_answer`]).
    pub reference: std::sync::Arc<std::collections::HashMap<String, Reference>>,
}

/// DuckDB's answer to one query, as `scripts/duckdb_answer.py` writes
/// them: CSV with a header, and its column types on one line.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Reference {
    pub csv: String,
    pub types: String,
}

/// What query `q`'s result is checked against, and the word its report
/// says when they agree: DuckDB's committed answer at this scale factor
/// (`match`), else the one DuckDB gave earlier in this run (`match
/// DuckDB`; `--compare` at a scale with no committed answers), else
/// nothing.
pub fn expected_answer<'a>(
    opts: &'a BenchOptions,
    q: &str,
) -> Option<(&'a str, &'a str, &'static str)> {
    match tpch::expected(q, opts.sf) {
        Some(csv) => Some((csv, tpch::expected_types(q), "match")),
        None => {
            let r = opts.reference.get(q)?;
            Some((&r.csv, &r.types, "match DuckDB"))
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub query: String,
    /// What was measured (`column`, `row`, `column, rows on the wire`,
    /// `duckdb`, `duckdb, alone`).
    pub setting: String,
    pub sf: f64,
    pub runs: usize,
    pub min_ms: f64,
    pub median_ms: f64,
    pub rows: usize,
    /// "match" (DuckDB's committed answer), "match DuckDB" (the answer
    /// DuckDB gave in this run), "unknown" (no known answer at this scale)
    /// or the mismatch.
    pub answer: String,
    /// Order-independent digest of the answer (settings must agree).
    #[serde(skip)]
    pub digest: u64,
}

impl QueryReport {
    /// A query timed `times` (ms each) under `setting` at `sf`, outside the
    /// bench's own client (DuckDB, the ADBC driver): no digest.
    pub fn timed(
        q: &str,
        setting: &str,
        sf: f64,
        times: Vec<f64>,
        rows: usize,
        answer: &str,
    ) -> Self {
        QueryReport {
            query: q.into(),
            setting: setting.into(),
            sf,
            runs: times.len(),
            min_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
            median_ms: median(times),
            rows,
            answer: answer.into(),
            digest: 0,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadSummary {
    pub sf: f64,
    pub layout: String,
    pub rows: u64,
    pub seconds: f64,
    pub regions: usize,
}

/// The first Python that runs `import` (a statement): `$QUARRY_PYTHON`,
/// `$QUARRY_VENV` (default `~/.cache/quarry-venv`, where
/// `scripts/setup.sh` puts ADBC's driver), the anchors' venv
/// (`~/.cache/quarry-anchors/venv`, DuckDB's), then `python3`.
pub fn python_with(import: &str) -> Option<String> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let venv = std::env::var_os("QUARRY_VENV")
        .map(std::path::PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".cache/quarry-venv")));
    let mut candidates: Vec<String> = std::env::var("QUARRY_PYTHON").into_iter().collect();
    for v in venv
        .into_iter()
        .chain(home.map(|h| h.join(".cache/quarry-anchors/venv")))
    {
        candidates.push(v.join("bin/python").to_string_lossy().into_owned());
    }
    candidates.push("python3".into());
    candidates.into_iter().find(|c| {
        std::process::Command::new(c)
            .args(["-c", import])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The TPC-H texts of `opts.queries` (those that have one), by name, as
/// a JSON object for a Python script.
pub fn queries_json(opts: &BenchOptions) -> serde_json::Value {
    serde_json::Value::Object(
        opts.queries
            .iter()
            .filter_map(|q| tpch::query(q).map(|sql| (q.clone(), sql.into())))
            .collect(),
    )
}

/// Runs a Python `script` with `args` (at most 30 minutes; killed if the
/// bench stops first) and reads the JSON object on the last line that
/// starts one; `who` names it in errors.
pub async fn python_json<T: serde::de::DeserializeOwned>(
    python: &str,
    script: &str,
    args: &[String],
    who: &str,
) -> Result<T> {
    let out = tokio::time::timeout(
        Duration::from_secs(1800),
        tokio::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("{who} did not finish within 30 minutes"))??;
    if !out.status.success() {
        bail!("{who} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(last).with_context(|| format!("reading {who}'s times"))
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

/// An order-independent digest of a result: the sum of its rows' hashes.
pub fn digest(batches: &[RecordBatch]) -> u64 {
    let mut sum = 0u64;
    for b in batches {
        for r in 0..b.num_rows() {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for c in b.columns() {
                tpch::format_value(c.as_ref(), r).hash(&mut h);
            }
            sum = sum.wrapping_add(h.finish());
        }
    }
    sum
}

/// One process's peak resident memory (Linux's VmHWM) in two phases of
/// a run: the load, and the timed queries after it (the peak is reset in
/// between, [`reset_peak_rss`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeakRss {
    pub process: String,
    pub load_bytes: Option<u64>,
    pub queries_bytes: Option<u64>,
    /// Whether the peak was reset after the load (a refused reset would
    /// leave the load's peak in the queries'; none is reported then).
    #[serde(skip)]
    pub reset: bool,
}

/// Process `pid`'s peak resident memory so far (`VmHWM` in
/// `/proc/PID/status`), if it can be read.
pub fn peak_rss(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM")
}

/// The memory figure `field` (`VmHWM`, `RssAnon`, … in kB) of
/// `/proc/PID/status`, in bytes, if it can be read.
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Starts process `pid`'s peak resident memory again from its current
/// size (`5` into `/proc/PID/clear_refs`); false if the kernel refused.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// The peaks of `procs` (name, pid) during a load, then resets them so
/// that [`finish_peaks`] reads the queries' alone.
fn load_peaks(procs: &[(String, u32)]) -> Vec<PeakRss> {
    procs
        .iter()
        .map(|(name, pid)| PeakRss {
            process: name.clone(),
            load_bytes: peak_rss(*pid),
            queries_bytes: None,
            reset: reset_peak_rss(*pid),
        })
        .collect()
}

/// Fills in the peaks since [`load_peaks`].
fn finish_peaks(peaks: &mut [PeakRss], procs: &[(String, u32)]) {
    for (p, (_, pid)) in peaks.iter_mut().zip(procs) {
        p.queries_bytes = peak_rss(*pid).filter(|_| p.reset);
    }
}

fn layout_name(l: Layout) -> &'static str {
    match l {
        Layout::Column => "column",
        Layout::Row => "row",
    }
}

/// Times each query on the compute process at `url`.
pub async fn run_queries(
    url: &str,
    setting: &str,
    opts: &BenchOptions,
) -> Result<Vec<QueryReport>> {
    run_interleaved(&[(setting, url)], opts).await
}

/// Times each query on several compute processes (settings), one run of
/// each in turn, so that every setting sees the same machine (a shared
/// 2-core box drifts). Each query first runs once per setting to warm up
/// and to check its answer.
pub async fn run_interleaved(
    settings: &[(&str, &str)],
    opts: &BenchOptions,
) -> Result<Vec<QueryReport>> {
    let with: Vec<(&str, &str, Option<&str>)> =
        settings.iter().map(|(s, url)| (*s, *url, None)).collect();
    run_interleaved_with(&with, opts).await
}

/// [`run_interleaved`], each setting's connection first running its
/// statement (a `SET` for the connection's session), if any.
pub async fn run_interleaved_with(
    settings: &[(&str, &str, Option<&str>)],
    opts: &BenchOptions,
) -> Result<Vec<QueryReport>> {
    let mut clients = Vec::with_capacity(settings.len());
    for (_, url, first) in settings {
        let mut client = Client::connect(url).await?;
        if let Some(sql) = first {
            client.sql(sql).await?;
        }
        clients.push(client);
    }
    let mut out = Vec::new();
    for q in &opts.queries {
        let Some(sql) = tpch::query(q) else {
            bail!("unknown query '{q}': known are q1 … q22 (or all), scan, topn");
        };
        let mut reports = Vec::with_capacity(settings.len());
        for ((setting, _, _), client) in settings.iter().zip(clients.iter_mut()) {
            let warm = client.sql(sql).await?;
            let answer = match expected_answer(opts, q) {
                None => "unknown".to_string(),
                Some((csv, types, agreed)) => match crate::answers::check(&warm, csv, types) {
                    Ok(()) => agreed.into(),
                    Err(e) => format!("mismatch: {e}"),
                },
            };
            reports.push((
                QueryReport {
                    query: q.clone(),
                    setting: setting.to_string(),
                    sf: opts.sf,
                    runs: 0,
                    min_ms: 0.0,
                    median_ms: 0.0,
                    rows: warm.iter().map(|b| b.num_rows()).sum(),
                    answer,
                    digest: digest(&warm),
                },
                Vec::with_capacity(opts.runs),
            ));
        }
        for _ in 0..opts.runs.max(1) {
            for (client, (report, times)) in clients.iter_mut().zip(reports.iter_mut()) {
                let t = Instant::now();
                let batches = client.sql(sql).await?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                report.rows = batches.iter().map(|b| b.num_rows()).sum();
            }
        }
        for (mut report, times) in reports {
            report.runs = times.len();
            report.min_ms = times.iter().copied().fold(f64::INFINITY, f64::min);
            report.median_ms = median(times);
            out.push(report);
        }
    }
    Ok(out)
}

/// Fails if two of `reports` for one of `queries` (those `compared`
/// keeps) answered differently: the same rows and digest, or an error
/// naming both settings.
pub fn check_same_answers(
    queries: &[String],
    reports: &[QueryReport],
    compared: impl Fn(&QueryReport) -> bool,
) -> Result<()> {
    for q in queries {
        let mut ds = reports.iter().filter(|r| &r.query == q && compared(r));
        if let Some(first) = ds.next() {
            if let Some(other) = ds.find(|r| r.digest != first.digest || r.rows != first.rows) {
                bail!(
                    "{q}: setting '{}' answered differently from '{}'",
                    other.setting,
                    first.setting
                );
            }
        }
    }
    Ok(())
}

/// CPU seconds the processes have used so far (Linux /proc).
fn cpu_seconds(pids: &[u32]) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|s| {
            // Fields after the ")" that ends the command name.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let user: f64 = f.get(11)?.parse().ok()?;
            let sys: f64 = f.get(12)?.parse().ok()?;
            Some((user + sys) / tick)
        })
        .sum()
}

/// Waits until the stores are done with the work a load leaves behind:
/// every follower has applied what its leader has, no store reports
/// RocksDB flushes or compactions running or pending (Admin `Status`), and
/// each store uses under a tenth of a core (on average) for a second; or
/// `SETTLE_MAX` at most. Timing queries before that measures the
/// aftermath of the load, not the queries: after an SF 10 load one store
/// compacts for 20-30 s on this 2-core machine, and Q1 meanwhile takes
/// 1.2-1.7 s instead of 0.6-0.8 s.
///
/// The CPU bound is per store: an idle store still ticks its regions'
/// raft groups and answers heartbeats, 1-4% of a core on this machine
/// (3.2% on 2026-12-06, where three idle stores together never went under
/// the 5% of one core that this once asked of them all, and every bench
/// waited out `SETTLE_MAX`), while a compaction takes a whole core.
pub async fn settle(cluster: &LocalCluster) {
    let pids: Vec<u32> = cluster.stores.iter().map(|p| p.pid).collect();
    let addrs = cluster.store_addrs();
    let started = Instant::now();
    let mut quiet = 0;
    while quiet < 2 {
        if started.elapsed() > SETTLE_MAX {
            tracing::warn!(
                "the stores were still busy {SETTLE_MAX:?} after the load; \
                 timings include their background work"
            );
            return;
        }
        let before = cpu_seconds(&pids);
        tokio::time::sleep(SETTLE_WINDOW).await;
        let used = cpu_seconds(&pids) - before;
        quiet = if cpu_quiet(used, SETTLE_WINDOW, pids.len()) && !stores_busy(&addrs).await {
            quiet + 1
        } else {
            0
        };
    }
    let mut leaders = Vec::new();
    for a in &addrs {
        if let Ok(s) = crate::status::fetch(a).await {
            leaders.push(s.regions.iter().filter(|r| r.is_leader).count().to_string());
        }
    }
    eprintln!(
        "the stores went quiet {:.0} s after the load (leaders per store: {})",
        started.elapsed().as_secs_f64(),
        leaders.join("/")
    );
}

/// Whether any store is still applying its leader's entries or has RocksDB
/// work running or pending. A store that does not answer counts as busy.
async fn stores_busy(addrs: &[String]) -> bool {
    let mut all = Vec::new();
    for a in addrs {
        match crate::status::fetch(a).await {
            Ok(s) if !s.background_work => all.push(s),
            _ => return true,
        }
    }
    crate::status::followers_behind(&all)
}

/// Says so when a store is busy right after the timed queries (RocksDB
/// work running or pending, or a follower behind): [`settle`] waited for a
/// quiet cluster before them, but work that started during them would be
/// in the timings.
async fn warn_if_busy(cluster: &LocalCluster, whose: &str) {
    if stores_busy(&cluster.store_addrs()).await {
        eprintln!(
            "warning: a store was busy (RocksDB flushes or compactions, or a \
             follower catching up) at the end of {whose} timed queries: the \
             timings may include that work"
        );
    }
}

/// The longest [`settle`] waits.
const SETTLE_MAX: Duration = Duration::from_secs(5 * 60);

/// The share of a core under which a store counts as quiet ([`settle`]).
const QUIET_CORE_SHARE: f64 = 0.1;

/// How long [`settle`] watches the stores' CPU at a time.
const SETTLE_WINDOW: Duration = Duration::from_millis(500);

/// Whether `stores` that used `used` seconds of CPU together over
/// `window` were quiet: under [`QUIET_CORE_SHARE`] of a core each, on
/// average.
fn cpu_quiet(used: f64, window: Duration, stores: usize) -> bool {
    used < QUIET_CORE_SHARE * window.as_secs_f64() * stores as f64
}

async fn load(cluster: &LocalCluster, opts: &BenchOptions, layout: Layout) -> Result<LoadSummary> {
    let load = load_tpch(
        &cluster.store_addrs(),
        &LoadOptions {
            sf: opts.sf,
            tables: opts.tables.clone(),
            progress: opts.progress,
            layout,
            replace: true,
            ..Default::default()
        },
    )
    .await?;
    settle(cluster).await;
    Ok(LoadSummary {
        sf: opts.sf,
        layout: layout_name(layout).into(),
        rows: load.rows,
        seconds: load.seconds,
        regions: load.regions,
    })
}

/// Runs the bench; returns the load summary (embedded cluster only) and
/// one report per query.
pub async fn bench_tpch(opts: &BenchOptions) -> Result<(Option<LoadSummary>, Vec<QueryReport>)> {
    let setting = layout_name(opts.layout);
    if let Some(url) = &opts.addr {
        return Ok((None, run_queries(url, setting, opts).await?));
    }
    let dir = tempfile::Builder::new().prefix("quarry-bench-").tempdir()?;
    let mut cluster = LocalCluster::start(dir.path(), opts.stores, &opts.cluster_args).await?;
    let result = async {
        let summary = load(&cluster, opts, opts.layout).await?;
        let reports = run_queries(&cluster.compute_url(), setting, opts).await?;
        warn_if_busy(&cluster, "these").await;
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
    /// A 100-row INSERT into one region, median.
    pub batch_one_region_p50_ms: f64,
    /// A 100-row INSERT spread over three regions (one transaction,
    /// prewrite and commit in every region), median.
    pub batch_three_regions_p50_ms: f64,
    /// `UPDATE w SET v = v + 1 WHERE id = k`, median.
    pub update_p50_ms: f64,
}

/// The medians of the multi-row phases of [`write_phase`].
struct BatchLatency {
    one_region_p50_ms: f64,
    three_regions_p50_ms: f64,
    update_p50_ms: f64,
}

/// Statements run per multi-row phase.
const BATCH_STATEMENTS: i64 = 40;

/// 100-row INSERTs into one region and over three, alternating, then
/// single-row UPDATEs; the medians.
async fn batch_phase(c: &mut Client, opts: &WriteBenchOptions) -> Result<BatchLatency> {
    c.sql("CREATE TABLE wb (id BIGINT PRIMARY KEY, v BIGINT) WITH (split_handles = '1000000,2000000')")
        .await?;
    let (mut one, mut three) = (Vec::new(), Vec::new());
    for b in 0..BATCH_STATEMENTS {
        for spread in [false, true] {
            let rows: Vec<String> = (0..100i64)
                .map(|i| {
                    let id = if spread {
                        (i % 3) * 1_000_000 + 500_000 + b * 100 + i
                    } else {
                        b * 100 + i
                    };
                    format!("({id}, {i})")
                })
                .collect();
            let t = Instant::now();
            c.sql(&format!("INSERT INTO wb VALUES {}", rows.join(", ")))
                .await?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if spread { &mut three } else { &mut one }.push(ms);
        }
    }
    let mut upd = Vec::new();
    for i in 0..BATCH_STATEMENTS.min(opts.inserts as i64) {
        let t = Instant::now();
        c.sql(&format!("UPDATE w SET v = v + 1 WHERE id = {i}"))
            .await?;
        upd.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for v in [&mut one, &mut three, &mut upd] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    Ok(BatchLatency {
        one_region_p50_ms: percentile(&one, 0.5),
        three_regions_p50_ms: percentile(&three, 0.5),
        update_p50_ms: percentile(&upd, 0.5),
    })
}

/// The `p` quantile (0..=1) of `sorted`, nearest rank; 0 when empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn write_phase(url: &str, opts: &WriteBenchOptions) -> Result<(Vec<f64>, f64, BatchLatency)> {
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
    let batches = batch_phase(&mut c, opts).await?;
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
    Ok((lat, rate, batches))
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
                    // Load throughput as before: lineitem alone.
                    tables: vec![Table::Lineitem],
                    progress: false,
                    ..Default::default()
                },
            )
            .await
            .context("loading")?;
            let (mut lat, rate, batches) = write_phase(&cluster.compute_url(), opts)
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
                batch_one_region_p50_ms: batches.one_region_p50_ms,
                batch_three_regions_p50_ms: batches.three_regions_p50_ms,
                update_p50_ms: batches.update_p50_ms,
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

/// What `quarry bench tso` measures.
pub struct TsoBenchOptions {
    pub stores: usize,
    /// Concurrent clients, each its own connection to a store (round
    /// robin), asking one after another.
    pub clients: usize,
    pub requests: usize,
    /// Timestamps per request.
    pub batch: u32,
}

#[derive(Debug, serde::Serialize)]
pub struct TsoReport {
    pub clients: usize,
    pub batch: u32,
    pub requests_per_s: f64,
    pub timestamps_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The timestamp oracle on an embedded cluster: request latency and
/// throughput; every client's timestamps are checked to increase.
pub async fn bench_tso(opts: &TsoBenchOptions) -> Result<TsoReport> {
    use quarry_proto::meta::meta_client::MetaClient;
    use quarry_proto::meta::GetTimestampsRequest;
    let dir = tempfile::Builder::new()
        .prefix("quarry-bench-tso-")
        .tempdir()?;
    let mut cluster = LocalCluster::start(
        dir.path(),
        opts.stores,
        &crate::local::ClusterArgs::default(),
    )
    .await?;
    let addrs = cluster.store_addrs();
    let result = async {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..opts.clients.max(1) {
            let addr = format!("http://{}", addrs[c % addrs.len()]);
            let (requests, batch) = (opts.requests, opts.batch);
            tasks.spawn(async move {
                let mut client = MetaClient::connect(addr).await?;
                let mut lat = Vec::with_capacity(requests);
                let mut last = 0u64;
                for _ in 0..requests {
                    let t = Instant::now();
                    let first = client
                        .get_timestamps(GetTimestampsRequest { count: batch })
                        .await?
                        .into_inner()
                        .first;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    if first <= last {
                        return Err(anyhow!("timestamp {first} after {last}"));
                    }
                    last = first + batch as u64 - 1;
                }
                Ok::<_, anyhow::Error>(lat)
            });
        }
        let mut lat = Vec::new();
        while let Some(r) = tasks.join_next().await {
            lat.extend(r??);
        }
        let seconds = started.elapsed().as_secs_f64();
        lat.sort_by(|a, b| a.total_cmp(b));
        Ok::<_, anyhow::Error>(TsoReport {
            clients: opts.clients,
            batch: opts.batch,
            requests_per_s: lat.len() as f64 / seconds,
            timestamps_per_s: lat.len() as f64 * opts.batch as f64 / seconds,
            p50_ms: percentile(&lat, 0.5),
            p99_ms: percentile(&lat, 0.99),
        })
    }
    .await;
    cluster.stop().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_stores_are_quiet_and_a_compacting_one_is_not() {
        let window = Duration::from_millis(500);
        // Three idle stores at 3.2% of a core each (2026-12-06).
        assert!(cpu_quiet(3.0 * 0.032 * 0.5, window, 3));
        // One store compacting on a whole core, the others idle.
        assert!(!cpu_quiet(0.5 + 2.0 * 0.032 * 0.5, window, 3));
        // One store at a fifth of a core.
        assert!(!cpu_quiet(0.2 * 0.5, window, 1));
    }
}
