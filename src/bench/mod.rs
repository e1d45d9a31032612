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
//! imported; then prints the ratios and a `targets:` block, issue 15's
//! targets as measured. `--scale-to SF` then loads lineitem at that scale
//! into a fresh cluster and times Q1 and Q6 there, for the scaling target;
//! `--queries all` gives the 22 queries' geometric mean against DuckDB.
//! Every setting's answers are checked against each other (an
//! order-independent digest of the result) and, where known, DuckDB's.

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::RecordBatch;
use quarry_client::Client;
use quarry_proto::meta::Layout;

use crate::load::{load_tpch, LoadOptions};
use crate::local::LocalCluster;
use crate::tpch::{self, Table};

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
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub query: String,
    /// What was measured (`column`, `row`, `column, rows on the wire`,
    /// `duckdb`).
    pub setting: String,
    pub sf: f64,
    pub runs: usize,
    pub min_ms: f64,
    pub median_ms: f64,
    pub rows: usize,
    /// "match", "unknown" (no known answer at this scale) or the mismatch.
    pub answer: String,
    /// Order-independent digest of the answer (settings must agree).
    #[serde(skip)]
    pub digest: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadSummary {
    pub sf: f64,
    pub layout: String,
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
    let mut clients = Vec::with_capacity(settings.len());
    for (_, url) in settings {
        clients.push(Client::connect(url).await?);
    }
    let mut out = Vec::new();
    for q in &opts.queries {
        let Some(sql) = tpch::query(q) else {
            bail!("unknown query '{q}': known are q1 … q22 (or all), scan, topn");
        };
        let mut reports = Vec::with_capacity(settings.len());
        for ((setting, _), client) in settings.iter().zip(clients.iter_mut()) {
            let warm = client.sql(sql).await?;
            let answer = match tpch::expected(q, opts.sf) {
                None => "unknown".to_string(),
                Some(csv) => match crate::answers::check(&warm, csv, tpch::expected_types(q)) {
                    Ok(()) => "match".into(),
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
/// the stores use under 5% of a core for a second; or `SETTLE_MAX` at
/// most. Timing queries before that measures the aftermath of the load,
/// not the queries: after an SF 10 load one store compacts for 20-30 s on
/// this 2-core machine, and Q1 meanwhile takes 1.2-1.7 s instead of
/// 0.6-0.8 s.
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
        tokio::time::sleep(Duration::from_millis(500)).await;
        let used = cpu_seconds(&pids) - before;
        quiet = if used < 0.025 && !stores_busy(&addrs).await {
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
const SETTLE_MAX: Duration = Duration::from_secs(15 * 60);

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

/// `--compare --scale-to SF`: Q1 and Q6 (those of `base`'s queries) on a
/// fresh embedded cluster holding lineitem at `sf`, column layout, with
/// `base`'s runs. Its own cluster, loaded and settled like any embedded
/// bench, so the ratio against the compare run's times is the one-sitting
/// scaling the target names. (The compare run times its settings in turn
/// on three compute processes, this one on one.)
pub async fn bench_scaled(base: &BenchOptions, sf: f64) -> Result<ScaledRun> {
    let queries: Vec<String> = ["q1", "q6"]
        .into_iter()
        .filter(|q| base.queries.iter().any(|b| b == q))
        .map(String::from)
        .collect();
    if queries.is_empty() {
        bail!("--scale-to times Q1 and Q6: include q1 or q6 in --queries");
    }
    let opts = BenchOptions {
        addr: None,
        sf,
        tables: vec![Table::Lineitem],
        queries,
        layout: Layout::Column,
        ..base.clone()
    };
    let (load, queries) = bench_tpch(&opts).await?;
    Ok(ScaledRun {
        load: load.ok_or_else(|| anyhow!("the scaled run loaded nothing"))?,
        queries,
    })
}

/// What `--compare` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CompareReport {
    pub loads: Vec<LoadSummary>,
    pub queries: Vec<QueryReport>,
    /// Why DuckDB was not measured, if it was not.
    pub duckdb_skipped: Option<String>,
    /// Q1 and Q6 at a larger scale factor (`--scale-to`), if asked for.
    pub scaled: Option<ScaledRun>,
}

/// Q1 and Q6 timed on a fresh embedded cluster at a larger scale factor,
/// after a `--compare` run: the linear-scaling target's other half.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaledRun {
    pub load: LoadSummary,
    pub queries: Vec<QueryReport>,
}

/// The geometric mean of column ÷ DuckDB over the 22 TPC-H queries at SF 1
/// before issue 15 (issue 10's final table, 2026-11-24, in
/// `docs/performance.md`): the 22 queries must do no worse.
const TPCH22_BEFORE_ISSUE_15: f64 = 1.59;

impl CompareReport {
    /// The median time of query `q` under setting `s`, if it was timed.
    fn median_ms(&self, q: &str, s: &str) -> Option<f64> {
        self.queries
            .iter()
            .find(|x| x.query == q && x.setting == s)
            .map(|x| x.median_ms)
    }

    /// The scale factor the settings were compared at.
    fn sf(&self) -> f64 {
        self.loads.first().map_or(0.0, |l| l.sf)
    }
}

/// The setting whose compute asks for decimals as stored (Decimal128), the
/// baseline of narrow decimals on the wire.
const DECIMAL128_WIRE: &str = "column, Decimal128 on wire";

/// `bench tpch --compare`: every setting side by side in one run.
pub async fn bench_compare(opts: &BenchOptions) -> Result<CompareReport> {
    if opts.addr.is_some() {
        bail!("--compare starts its own cluster; leave out --addr");
    }
    let dir = tempfile::Builder::new()
        .prefix("quarry-compare-")
        .tempdir()?;
    let mut cluster = LocalCluster::start(dir.path(), opts.stores, &opts.cluster_args).await?;
    let result = async {
        let rows_url = cluster
            .start_extra_compute("compute-rows", &["--encode".into(), "rows".into()])
            .await?;
        let wide_url = cluster
            .start_extra_compute(
                "compute-decimal128",
                &["--encode".into(), "arrow-decimal128".into()],
            )
            .await?;
        let mut loads = Vec::new();
        let mut queries = Vec::new();
        loads.push(load(&cluster, opts, Layout::Column).await?);
        let arrow_url = cluster.compute_url();
        queries.extend(
            run_interleaved(
                &[
                    ("column", arrow_url.as_str()),
                    ("column, rows on the wire", rows_url.as_str()),
                    (DECIMAL128_WIRE, wide_url.as_str()),
                ],
                opts,
            )
            .await?,
        );
        warn_if_busy(&cluster, "the column layout's").await;
        loads.push(load(&cluster, opts, Layout::Row).await?);
        queries.extend(run_queries(&cluster.compute_url(), "row", opts).await?);
        warn_if_busy(&cluster, "the row layout's").await;
        let duckdb = duckdb_times(dir.path(), opts).await;
        let duckdb_skipped = match duckdb {
            Ok(d) => {
                queries.extend(d);
                None
            }
            Err(e) => Some(format!("{e:#}")),
        };
        Ok::<_, anyhow::Error>(CompareReport {
            loads,
            queries,
            duckdb_skipped,
            scaled: None,
        })
    }
    .await;
    cluster.stop().await;
    let report = result?;
    // Every Quarry setting must give the same answer.
    for q in &opts.queries {
        let mut ds = report
            .queries
            .iter()
            .filter(|r| &r.query == q && r.setting != "duckdb");
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
    Ok(report)
}

/// The Python that has DuckDB: $QUARRY_PYTHON, the anchors' venv, or
/// python3.
fn duckdb_python() -> Result<String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("QUARRY_PYTHON") {
        candidates.push(p);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let venv = Path::new(&home).join(".cache/quarry-anchors/venv/bin/python");
        candidates.push(venv.to_string_lossy().into_owned());
    }
    candidates.push("python3".into());
    for c in candidates {
        let ok = std::process::Command::new(&c)
            .args(["-c", "import duckdb"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(c);
        }
    }
    Err(anyhow!(
        "no Python with the duckdb package (set QUARRY_PYTHON, or run ../shared/bench/anchors/run.sh once)"
    ))
}

const DUCKDB_SCRIPT: &str = r#"
import json, sys, time, duckdb
threads, runs, tables, queries = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
con = duckdb.connect()
con.execute(f"SET threads={threads}")
con.execute("SET enable_progress_bar=false")
for name, t in tables.items():
    con.execute(t["ddl"])
    con.execute(f"COPY {name} FROM '{t['path']}' (DELIMITER '|', HEADER false)")
def fetch(r):
    return r.to_arrow_table() if hasattr(r, "to_arrow_table") else r.arrow()
out = {}
for name, sql in queries.items():
    fetch(con.execute(sql))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fetch(con.execute(sql))
        times.append((time.perf_counter() - t) * 1e3)
    out[name] = times
print(json.dumps(out))
"#;

/// DuckDB in memory over the same rows (every table the bench loaded,
/// written as `|`-separated text and created with Quarry's DDL), with as
/// many threads as this machine has cores.
async fn duckdb_times(dir: &Path, opts: &BenchOptions) -> Result<Vec<QueryReport>> {
    let python = duckdb_python()?;
    let sf = opts.sf;
    let mut tables = serde_json::Map::new();
    let mut paths = Vec::new();
    for &t in &opts.tables {
        let path = dir.join(format!("{}.tbl", t.name()));
        let p = path.clone();
        tokio::task::spawn_blocking(move || write_tbl(t, &p, sf)).await??;
        tables.insert(
            t.name().into(),
            serde_json::json!({ "ddl": t.ddl(), "path": path.to_string_lossy() }),
        );
        paths.push(path);
    }
    let queries: serde_json::Map<String, serde_json::Value> = opts
        .queries
        .iter()
        .filter_map(|q| tpch::query(q).map(|sql| (q.clone(), sql.into())))
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let out = tokio::time::timeout(
        Duration::from_secs(1800),
        tokio::process::Command::new(&python)
            .args([
                "-c",
                DUCKDB_SCRIPT,
                &threads.to_string(),
                &opts.runs.max(1).to_string(),
                &serde_json::Value::Object(tables).to_string(),
                &serde_json::Value::Object(queries).to_string(),
            ])
            .output(),
    )
    .await
    .map_err(|_| anyhow!("DuckDB did not finish within 30 minutes"))??;
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
    if !out.status.success() {
        bail!("DuckDB failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let times: std::collections::HashMap<String, Vec<f64>> =
        serde_json::from_str(last).context("reading DuckDB's times")?;
    Ok(opts
        .queries
        .iter()
        .filter_map(|q| {
            let t = times.get(q)?.clone();
            Some(QueryReport {
                query: q.clone(),
                setting: "duckdb".into(),
                sf,
                runs: t.len(),
                min_ms: t.iter().copied().fold(f64::INFINITY, f64::min),
                median_ms: median(t),
                rows: 0,
                answer: "reference".into(),
                digest: 0,
            })
        })
        .collect())
}

/// Writes `table` at `sf` as dbgen's `|`-separated text.
fn write_tbl(table: Table, path: &Path, sf: f64) -> Result<()> {
    use quarry_coprocessor::codec::row::Datum;
    use quarry_coprocessor::types::{format_date, format_decimal};
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let mut line = String::with_capacity(256);
    let mut err = None;
    table.generate_part(sf, 1, 1, |_, cols| {
        line.clear();
        for (i, (_, d)) in cols.iter().enumerate() {
            if i > 0 {
                line.push('|');
            }
            match d {
                Datum::Int(v) => line.push_str(&v.to_string()),
                Datum::Decimal(v) => line.push_str(&format_decimal(*v, 2)),
                Datum::Date(v) => line.push_str(&format_date(*v)),
                Datum::Bytes(b) => line.push_str(&String::from_utf8_lossy(b)),
                _ => {}
            }
        }
        line.push('\n');
        if let Err(e) = w.write_all(line.as_bytes()) {
            err.get_or_insert(e);
        }
        Ok(())
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    w.flush()?;
    Ok(())
}

/// The `--compare` table: one line per query and setting, then ratios.
pub fn print_compare(r: &CompareReport) {
    for l in r.loads.iter().chain(r.scaled.iter().map(|s| &s.load)) {
        println!(
            "load {:>6}: {} rows at SF {} into {} regions in {:.1} s ({:.0} rows/s)",
            l.layout,
            l.rows,
            l.sf,
            l.regions,
            l.seconds,
            l.rows as f64 / l.seconds
        );
    }
    println!(
        "{:<6} {:<28} {:>10} {:>12} {:>9}  answer",
        "query", "setting", "min ms", "median ms", "rows"
    );
    let scaled = r.scaled.iter().flat_map(|s| &s.queries);
    for q in r.queries.iter().chain(scaled) {
        // The scaled run's rows say their scale factor.
        let setting = if q.sf == r.sf() {
            q.setting.clone()
        } else {
            format!("{} at SF {}", q.setting, q.sf)
        };
        println!(
            "{:<6} {:<28} {:>10.1} {:>12.1} {:>9}  {}",
            q.query, setting, q.min_ms, q.median_ms, q.rows, q.answer
        );
    }
    let med = |q: &str, s: &str| r.median_ms(q, s);
    let mut names: Vec<&str> = Vec::new();
    for q in &r.queries {
        if !names.contains(&q.query.as_str()) {
            names.push(&q.query);
        }
    }
    for q in names {
        let col = med(q, "column");
        let mut parts = Vec::new();
        if let (Some(c), Some(d)) = (col, med(q, "duckdb")) {
            parts.push(format!("column/duckdb {:.2}", c / d));
        }
        if let (Some(c), Some(rw)) = (col, med(q, "row")) {
            parts.push(format!("row/column {:.2}", rw / c));
        }
        if let (Some(c), Some(w)) = (col, med(q, "column, rows on the wire")) {
            parts.push(format!("rows-on-wire/arrow {:.2}", w / c));
        }
        if let (Some(c), Some(w)) = (col, med(q, DECIMAL128_WIRE)) {
            parts.push(format!("decimal128-on-wire/decimal64 {:.2}", w / c));
        }
        println!("{q}: {}", parts.join(", "));
    }
    if let Some(g) = tpch_geomean(r) {
        println!(
            "column/duckdb over {} TPC-H queries: geometric mean {:.2}, worst {} {:.2}",
            g.queries, g.mean, g.worst.0, g.worst.1
        );
    }
    if let Some(why) = &r.duckdb_skipped {
        println!("duckdb: not measured: {why}");
    }
    print_targets(r);
}

/// The performance targets (issue 15) and where this run stands on each:
/// one line per target, its measured ratio and whether it is met.
fn print_targets(r: &CompareReport) {
    let med = |q: &str, s: &str| r.median_ms(q, s);
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    println!("targets:");
    for (q, limit) in [("q1", 0.25), ("q6", 0.5)] {
        if let (Some(c), Some(d)) = (med(q, "column"), med(q, "duckdb")) {
            let x = c / d;
            println!(
                "  {q} column/duckdb <= {limit}: {x:.2} ({})",
                verdict(x <= limit)
            );
        }
    }
    for q in ["scan", "topn"] {
        if let (Some(c), Some(w)) = (med(q, "column"), med(q, "column, rows on the wire")) {
            let x = w / c;
            // Top-k runs in the regions: each sends its own ten rows.
            let note = if q == "topn" {
                "; it no longer measures the wire: each region sends its top ten"
            } else {
                ""
            };
            println!(
                "  {q} rows-on-wire/arrow >= 3: {x:.2} ({}{note})",
                verdict(x >= 3.0)
            );
        }
    }
    if let (Some(ms), Some(q)) = (med("q6", "row"), r.queries.iter().find(|x| x.query == "q6")) {
        // Q6 scans every lineitem row; the cluster shares this machine's
        // cores with everything else in the run.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let rows = Table::Lineitem.approx_rows(q.sf) as f64;
        let per_core = rows / (ms / 1000.0) / cores;
        println!(
            "  row layout q6 >= 4 M rows/s per core: {:.2} M ({} cores; {})",
            per_core / 1e6,
            cores,
            verdict(per_core >= 4e6)
        );
    }
    let base = r.sf();
    match &r.scaled {
        Some(scaled) => {
            // Linear scaling with a tenth to spare: 11× for SF 10 ÷ SF 1.
            let limit = 1.1 * scaled.load.sf / base;
            for q in ["q1", "q6"] {
                let big = scaled.queries.iter().find(|x| x.query == q);
                if let (Some(small), Some(big)) = (med(q, "column"), big) {
                    let x = big.median_ms / small;
                    println!(
                        "  {q} SF {} / SF {base} <= {limit:.1}: {x:.1} ({})",
                        scaled.load.sf,
                        verdict(x <= limit)
                    );
                }
            }
        }
        None => println!("  SF 10 / SF 1 <= 11: not in this run (--scale-to 10)"),
    }
    match tpch_geomean(r).filter(|g| g.queries == crate::answers::QUERIES.len()) {
        Some(g) => println!(
            "  {} TPC-H queries' column/duckdb geometric mean <= {TPCH22_BEFORE_ISSUE_15} \
             (before issue 15, another sitting): {:.2} ({})",
            g.queries,
            g.mean,
            verdict(g.mean <= TPCH22_BEFORE_ISSUE_15)
        ),
        None => println!("  the 22 TPC-H queries' geometric mean: not in this run (--queries all)"),
    }
}

/// Column ÷ DuckDB over the TPC-H queries a run timed on both.
struct Geomean<'a> {
    queries: usize,
    mean: f64,
    worst: (&'a str, f64),
}

/// The geometric mean of column ÷ DuckDB over the TPC-H queries `r` timed
/// on both, and the worst ratio; none for fewer than two queries.
fn tpch_geomean(r: &CompareReport) -> Option<Geomean<'_>> {
    let ratios: Vec<(&str, f64)> = r
        .queries
        .iter()
        .filter(|q| q.setting == "column" && q.query.starts_with('q'))
        .filter_map(|q| {
            Some((
                q.query.as_str(),
                q.median_ms / r.median_ms(&q.query, "duckdb")?,
            ))
        })
        .collect();
    if ratios.len() < 2 {
        return None;
    }
    let mean = (ratios.iter().map(|(_, x)| x.ln()).sum::<f64>() / ratios.len() as f64).exp();
    let worst = ratios
        .iter()
        .copied()
        .fold(("", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    Some(Geomean {
        queries: ratios.len(),
        mean,
        worst,
    })
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
