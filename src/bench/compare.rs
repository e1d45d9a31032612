//! `bench tpch --compare`: every setting side by side in one run, DuckDB
//! over the same rows, the same queries through Python ADBC (`adbc.rs`),
//! and issues 15's and 47's targets as measured (the module docs of
//! `bench` say what each setting is).

use std::io::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use quarry_proto::meta::Layout;

use super::adbc::{adbc_and_duckdb_python, adbc_python, adbc_times, THROUGH_ADBC};
use super::{
    bench_tpch, check_same_answers, finish_peaks, load, load_peaks, python_json, python_with,
    queries_json, reset_peak_rss, run_interleaved, run_queries, warn_if_busy, BenchOptions,
    LoadSummary, PeakRss, QueryReport, Reference,
};
use crate::local::LocalCluster;
use crate::tpch;
use crate::tpch::Table;

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
    /// Why the queries were not timed through ADBC, if they were not.
    pub adbc_skipped: Option<String>,
    /// Whether DuckDB's `duckdb` times were taken beside the ADBC client's,
    /// query by query (`adbc.rs`); its first run's are then `duckdb, alone`.
    pub duckdb_beside_adbc: bool,
    /// Why they were not, where DuckDB and the ADBC client were both timed.
    pub duckdb_beside_skipped: Option<String>,
    /// Q1 and Q6 at a larger scale factor (`--scale-to`), if asked for.
    pub scaled: Option<ScaledRun>,
    /// Each process's peak resident memory: DuckDB's, then the cluster's
    /// and the bench's own during the column layout's load and queries.
    pub peak_rss: Vec<PeakRss>,
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

    /// The reports of the TPC-H queries (`q1`…`q22`) timed under setting
    /// `s`.
    pub fn tpch<'a, 'b>(
        &'a self,
        s: &'b str,
    ) -> impl Iterator<Item = &'a QueryReport> + use<'a, 'b> {
        self.queries
            .iter()
            .filter(move |q| q.setting == s && q.query.starts_with('q'))
    }

    /// The scale factor the settings were compared at.
    fn sf(&self) -> f64 {
        self.loads.first().map_or(0.0, |l| l.sf)
    }
}

/// DuckDB's first run, before the cluster starts, where its `duckdb` times
/// come from its second run beside the ADBC client.
const DUCKDB_ALONE: &str = "duckdb, alone";

/// Up to this scale factor DuckDB in memory fits beside the cluster (at SF
/// 1: about 1.5 GB beside the stores' 3 GB), and is timed a second time
/// beside the ADBC client; at SF 10 the two (14 GB and 15 GB) would not fit
/// in this machine's 24 GB, and DuckDB's times are its first run's.
const BESIDE_UP_TO_SF: f64 = 1.0;

/// The setting whose compute asks for decimals as stored (Decimal128), the
/// baseline of narrow decimals on the wire.
const DECIMAL128_WIRE: &str = "column, Decimal128 on wire";

/// A setting `--compare` can leave out (`--skip`): at SF 10 the row
/// layout's second load and rows on the wire cost more time than the run
/// has, and say nothing the SF 1 run does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Skippable {
    /// The row layout (a second load of every table).
    Row,
    /// Rows instead of Arrow chunks on the wire (and the `scan`/`topn`
    /// queries that measure it).
    RowsOnWire,
    /// Decimals as stored (Decimal128) on the wire.
    Decimal128,
    /// The queries through Python ADBC.
    Adbc,
    /// DuckDB over the same rows.
    Duckdb,
}

/// `bench tpch --compare`: every setting side by side in one run, but
/// those in `skip`.
///
/// DuckDB runs first, alone on the machine (no cluster yet: at SF 10 the
/// two would not fit in memory together); where no answer is committed at
/// this scale, its answers become what Quarry's are checked against.
/// Then the cluster is started and loaded, and each setting is timed; up to
/// `BESIDE_UP_TO_SF` DuckDB is timed again, query by query with the ADBC client
/// (`adbc.rs`), and those are the times the ratios use. The
/// peak resident memory of every process is recorded for the column
/// layout's load and, separately, for its timed queries.
pub async fn bench_compare(opts: &BenchOptions, skip: &[Skippable]) -> Result<CompareReport> {
    if opts.addr.is_some() {
        bail!("--compare starts its own cluster; leave out --addr");
    }
    let dir = tempfile::Builder::new()
        .prefix("quarry-compare-")
        .tempdir()?;
    let mut opts = opts.clone();
    let mut queries = Vec::new();
    let mut peaks = Vec::new();
    // DuckDB's files are kept for its second run beside the ADBC client
    // where that run can happen; why not, where it cannot. (The Python that
    // has both is found once: each probe starts an interpreter.)
    let both_python = adbc_and_duckdb_python();
    let mut beside_skipped = if opts.sf > BESIDE_UP_TO_SF {
        Some(format!(
            "above SF {BESIDE_UP_TO_SF} DuckDB and the cluster do not fit in memory together"
        ))
    } else if both_python.is_none() {
        Some("no Python imports both duckdb and adbc_driver_flightsql".to_string())
    } else {
        None
    };
    let keep_for_adbc = beside_skipped.is_none() && !skip.contains(&Skippable::Adbc);
    let mut beside = None;
    let duckdb_skipped = if skip.contains(&Skippable::Duckdb) {
        Some("left out (--skip duckdb)".to_string())
    } else {
        match duckdb_run(dir.path(), &opts, both_python.as_deref(), keep_for_adbc).await {
            Ok(run) => {
                queries.extend(run.reports);
                peaks.push(run.peak);
                opts.reference = std::sync::Arc::new(run.answers);
                beside = run.beside;
                None
            }
            Err(e) => Some(format!("{e:#}")),
        }
    };
    let opts = &opts;
    let mut cluster = LocalCluster::start(dir.path(), opts.stores, &opts.cluster_args).await?;
    let result = async {
        let mut settings = vec![("column", cluster.compute_url())];
        for (s, name, setting, encode) in [
            (
                Skippable::RowsOnWire,
                "compute-rows",
                "column, rows on the wire",
                "rows",
            ),
            (
                Skippable::Decimal128,
                "compute-decimal128",
                DECIMAL128_WIRE,
                "arrow-decimal128",
            ),
        ] {
            if !skip.contains(&s) {
                let url = cluster
                    .start_extra_compute(name, &["--encode".into(), encode.into()])
                    .await?;
                settings.push((setting, url));
            }
        }
        // The bench's own peak so far is DuckDB's text files.
        reset_peak_rss(std::process::id());
        let mut loads = vec![load(&cluster, opts, Layout::Column).await?];
        let mut procs = cluster.processes();
        procs.push(("bench (loader and client)".into(), std::process::id()));
        let mut cluster_peaks = load_peaks(&procs);
        let arrow_url = cluster.compute_url();
        let settings: Vec<(&str, &str)> = settings.iter().map(|(s, u)| (*s, u.as_str())).collect();
        queries.extend(run_interleaved(&settings, opts).await?);
        // Through a real client, while the column layout is loaded.
        let rows: std::collections::HashMap<String, usize> = queries
            .iter()
            .filter(|r| r.setting == "column")
            .map(|r| (r.query.clone(), r.rows))
            .collect();
        // (Skipped only without the driver: a failure fails the bench.)
        let rows_of = |q: &str| rows.get(q).copied();
        let mut duckdb_beside_adbc = false;
        let adbc_skipped = match adbc_python() {
            _ if skip.contains(&Skippable::Adbc) => Some("left out (--skip adbc)".to_string()),
            Ok(python) => {
                let both = both_python.as_deref().zip(beside.as_ref());
                // DuckDB failing beside the client (its memory beside the
                // cluster's) costs its second times, not the run.
                let paired = match both {
                    Some((python, beside)) => {
                        match adbc_times(python, &arrow_url, opts, Some(beside), rows_of).await {
                            Ok(timed) => Some(timed),
                            Err(e) => {
                                beside_skipped = Some(format!("{e:#}"));
                                None
                            }
                        }
                    }
                    None => None,
                };
                match paired {
                    Some(timed) => {
                        for r in queries.iter_mut().filter(|r| r.setting == "duckdb") {
                            r.setting = DUCKDB_ALONE.into();
                        }
                        queries.extend(timed);
                        duckdb_beside_adbc = true;
                    }
                    None => {
                        queries.extend(adbc_times(&python, &arrow_url, opts, None, rows_of).await?)
                    }
                }
                None
            }
            Err(why) => Some(why),
        };
        // DuckDB's text files (a gigabyte at SF 1) are not needed further.
        if beside.is_some() {
            remove_tbl_files(dir.path(), opts);
        }
        finish_peaks(&mut cluster_peaks, &procs);
        peaks.extend(cluster_peaks);
        warn_if_busy(&cluster, "the column layout's").await;
        if !skip.contains(&Skippable::Row) {
            loads.push(load(&cluster, opts, Layout::Row).await?);
            queries.extend(run_queries(&cluster.compute_url(), "row", opts).await?);
            warn_if_busy(&cluster, "the row layout's").await;
        }
        // (Only said where both were timed: otherwise the report says why
        // one was not.)
        let duckdb_beside_skipped = beside_skipped
            .filter(|_| !duckdb_beside_adbc && adbc_skipped.is_none() && duckdb_skipped.is_none());
        Ok::<_, anyhow::Error>(CompareReport {
            loads,
            queries,
            duckdb_skipped,
            adbc_skipped,
            duckdb_beside_adbc,
            duckdb_beside_skipped,
            scaled: None,
            peak_rss: peaks,
        })
    }
    .await;
    cluster.stop().await;
    let report = result?;
    // Every Quarry setting must give the same answer.
    // (ADBC's answers were checked by their row counts as they came.)
    check_same_answers(&opts.queries, &report.queries, |r| {
        !r.setting.starts_with("duckdb") && r.setting != THROUGH_ADBC
    })?;
    Ok(report)
}

/// A Python that has DuckDB ([`python_with`]), where none that also has
/// the ADBC driver was found ([`duckdb_run`] prefers that one).
fn duckdb_python() -> Result<String> {
    python_with("import duckdb").ok_or_else(|| {
        anyhow!(
            "no Python with the duckdb package (set QUARRY_PYTHON, pip install duckdb into \
             $QUARRY_VENV, or run ../shared/bench/anchors/run.sh once)"
        )
    })
}

/// DuckDB in memory, as both scripts that time it start it: `threads`
/// threads, and `tables` (`{name: {ddl, path}}`, the text files
/// [`duckdb_run`] writes) created and copied in; and how a query's answer
/// is fetched (into Arrow, as ADBC's is). A Python prelude: it imports
/// DuckDB only when called.
pub(super) const DUCKDB_PRELUDE: &str = r#"
def duckdb_loaded(threads, tables):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads={threads}")
    con.execute("SET enable_progress_bar=false")
    for name, t in tables.items():
        con.execute(t["ddl"])
        con.execute(f"COPY {name} FROM '{t['path']}' (DELIMITER '|', HEADER false)")
    return con
def duckdb_arrow(con, sql):
    # A relation's own Arrow export: through a DB-API cursor (`execute`)
    # DuckDB 2 copies the rows once more and warns that it does.
    r = con.sql(sql)
    return r.to_arrow_table() if hasattr(r, "to_arrow_table") else r.arrow()
"#;

/// DuckDB's own run ([`duckdb_run`]): its answers, its times alone, its
/// peak memory. Follows [`DUCKDB_PRELUDE`].
const DUCKDB_SCRIPT: &str = r#"
import csv, decimal, io, json, sys, time
threads, runs, tables, queries, answer_for = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), set(json.loads(sys.argv[5]))
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
def cell(v):
    # As scripts/duckdb_answer.py writes the committed answers.
    if v is None:
        return ""
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    return str(v)
con = duckdb_loaded(threads, tables)
load_peak = peak()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
out, answers = {}, {}
for name, sql in queries.items():
    if name in answer_for:
        cur = con.execute(sql)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([d[0] for d in cur.description])
        for row in cur.fetchall():
            w.writerow([cell(v) for v in row])
        types = ",".join(str(d[1]) for d in cur.description)
        answers[name] = {"csv": buf.getvalue(), "types": types}
    duckdb_arrow(con, sql)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        duckdb_arrow(con, sql)
        times.append((time.perf_counter() - t) * 1e3)
    out[name] = times
print(json.dumps({"times": out, "answers": answers, "load_peak": load_peak, "queries_peak": peak() if reset else None}))
"#;

/// What DuckDB gave in a `--compare` run.
struct DuckdbRun {
    reports: Vec<QueryReport>,
    /// Its answers to the TPC-H queries with no answer committed at this
    /// scale factor.
    answers: std::collections::HashMap<String, Reference>,
    peak: PeakRss,
    /// What DuckDB's second run, beside the ADBC client, loads
    /// (`{threads, tables}`), where the tables' files were kept for it.
    beside: Option<serde_json::Value>,
}

/// How many threads DuckDB runs with: as many as this machine has cores.
fn duckdb_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// DuckDB in memory over the same rows (every table the bench loads,
/// written as `|`-separated text and created with Quarry's DDL), with
/// [`duckdb_threads`]: its times, its peak memory, and its answers where
/// none are committed at this scale. It runs in `both_python` (the Python
/// that also has the ADBC driver, so that DuckDB's run alone and its run
/// beside the client are the same DuckDB) if there is one, else in
/// [`duckdb_python`]. With `keep`, the text files stay in
/// `dir` for DuckDB's second run beside the ADBC client, and the run says
/// how to load them ([`DuckdbRun::beside`]).
async fn duckdb_run(
    dir: &Path,
    opts: &BenchOptions,
    both_python: Option<&str>,
    keep: bool,
) -> Result<DuckdbRun> {
    let python = match both_python {
        Some(p) => p.to_string(),
        None => duckdb_python()?,
    };
    let sf = opts.sf;
    let mut tables = serde_json::Map::new();
    let mut writers = Vec::new();
    for &t in &opts.tables {
        let path = tbl_path(dir, t);
        let p = path.clone();
        // One table per thread: at SF 10 the text takes minutes to write.
        writers.push(tokio::task::spawn_blocking(move || write_tbl(t, &p, sf)));
        tables.insert(
            t.name().into(),
            serde_json::json!({ "ddl": t.ddl(), "path": path.to_string_lossy() }),
        );
    }
    let written = futures::future::try_join_all(writers).await;
    let answer_for: Vec<&String> = opts
        .queries
        .iter()
        .filter(|q| q.starts_with('q') && tpch::expected(q, sf).is_none())
        .collect();
    let tables = serde_json::Value::Object(tables);
    let args = [
        duckdb_threads().to_string(),
        opts.runs.max(1).to_string(),
        tables.to_string(),
        queries_json(opts).to_string(),
        serde_json::to_string(&answer_for)?,
    ];
    #[derive(serde::Deserialize)]
    struct Out {
        times: std::collections::HashMap<String, Vec<f64>>,
        answers: std::collections::HashMap<String, Reference>,
        load_peak: Option<u64>,
        queries_peak: Option<u64>,
    }
    let script = format!("{DUCKDB_PRELUDE}{DUCKDB_SCRIPT}");
    let out = match written {
        Ok(w) => match w.into_iter().collect::<Result<Vec<()>>>() {
            Ok(_) => python_json::<Out>(&python, &script, &args, "DuckDB").await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e.into()),
    };
    if !keep || out.is_err() {
        remove_tbl_files(dir, opts);
    }
    let out = out?;
    let reports = opts
        .queries
        .iter()
        .filter_map(|q| {
            let t = out.times.get(q)?.clone();
            Some(QueryReport::timed(q, "duckdb", sf, t, 0, "reference"))
        })
        .collect();
    Ok(DuckdbRun {
        reports,
        answers: out.answers,
        peak: PeakRss {
            process: "duckdb (Python, in memory)".into(),
            load_bytes: out.load_peak,
            queries_bytes: out.queries_peak,
            reset: out.queries_peak.is_some(),
        },
        beside: keep.then(|| serde_json::json!({ "threads": duckdb_threads(), "tables": tables })),
    })
}

/// Where [`duckdb_run`] writes `table`'s text in `dir`.
fn tbl_path(dir: &Path, table: Table) -> std::path::PathBuf {
    dir.join(format!("{}.tbl", table.name()))
}

/// Removes the text files [`duckdb_run`] wrote for `opts`' tables.
fn remove_tbl_files(dir: &Path, opts: &BenchOptions) {
    for &t in &opts.tables {
        let _ = std::fs::remove_file(tbl_path(dir, t));
    }
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
        if let Some(a) = med(q, THROUGH_ADBC) {
            if let Some(d) = med(q, "duckdb") {
                parts.push(format!("adbc/duckdb {:.2}", a / d));
            }
            if let Some(c) = col {
                parts.push(format!("adbc/in-process {:.2}", a / c));
            }
        }
        println!("{q}: {}", parts.join(", "));
    }
    for (setting, label) in [("column", "column"), (THROUGH_ADBC, "adbc")] {
        if let Some(g) = tpch_geomean(r, setting) {
            println!(
                "{label}/duckdb over {} TPC-H queries: geometric mean {:.2}, worst {} {:.2}",
                g.queries, g.mean, g.worst.0, g.worst.1
            );
        }
    }
    if r.duckdb_beside_adbc {
        println!(
            "duckdb: timed beside the ADBC client, query by query in one Python process \
             (the ratios use these); `{DUCKDB_ALONE}` is its first run, before the cluster started"
        );
    }
    if let Some(why) = &r.duckdb_beside_skipped {
        println!("duckdb: timed alone only, not beside the ADBC client: {why}");
    }
    if let Some(why) = &r.duckdb_skipped {
        println!("duckdb: not measured: {why}");
    }
    if let Some(why) = &r.adbc_skipped {
        println!("through ADBC: not measured: {why}");
    }
    print_peaks(&r.peak_rss);
    print_targets(r);
}

/// Each process's peak resident memory, in MiB, in the load and in the
/// timed queries.
fn print_peaks(peaks: &[PeakRss]) {
    if peaks.is_empty() {
        return;
    }
    let mib =
        |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.0}", b as f64 / 1048576.0));
    println!(
        "{:<28} {:>14} {:>17}",
        "peak RSS (MiB)", "during load", "during queries"
    );
    for p in peaks {
        println!(
            "{:<28} {:>14} {:>17}",
            p.process,
            mib(p.load_bytes),
            mib(p.queries_bytes)
        );
    }
}

/// The performance targets (issue 15) and where this run stands on each:
/// one line per target, its measured ratio and whether it is met.
fn print_targets(r: &CompareReport) {
    let med = |q: &str, s: &str| r.median_ms(q, s);
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    println!("targets:");
    for (q, limit) in [("q1", 0.25), ("q6", 0.5)] {
        print_duckdb_ratio_target(r, q, "column", "column", limit);
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
    match tpch_geomean(r, "column").filter(|g| g.queries == crate::answers::QUERIES.len()) {
        Some(g) => println!(
            "  {} TPC-H queries' column/duckdb geometric mean <= {TPCH22_BEFORE_ISSUE_15} \
             (before issue 15, another sitting): {:.2} ({})",
            g.queries,
            g.mean,
            verdict(g.mean <= TPCH22_BEFORE_ISSUE_15)
        ),
        None => println!("  the 22 TPC-H queries' geometric mean: not in this run (--queries all)"),
    }
    print_client_targets(r);
}

/// Issue 47's targets, through ADBC against DuckDB from the same Python.
fn print_client_targets(r: &CompareReport) {
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    for (q, limit) in [("q1", 0.2), ("q6", 0.5)] {
        print_duckdb_ratio_target(r, q, THROUGH_ADBC, "adbc", limit);
    }
    match tpch_geomean(r, THROUGH_ADBC).filter(|g| g.queries == crate::answers::QUERIES.len()) {
        Some(g) => {
            println!(
                "  {} TPC-H queries' adbc/duckdb geometric mean <= 1.0: {:.2} ({})",
                g.queries,
                g.mean,
                verdict(g.mean <= 1.0)
            );
            println!(
                "  no query's adbc/duckdb above 2: worst {} {:.2} ({})",
                g.worst.0,
                g.worst.1,
                verdict(g.worst.1 <= 2.0)
            );
        }
        None => println!(
            "  the 22 TPC-H queries through ADBC: not in this run (--queries all, and a Python \
             with adbc_driver_flightsql)"
        ),
    }
}

/// The target `q`'s `setting` ÷ DuckDB ≤ `limit` (`label` names the
/// setting), when both were timed.
fn print_duckdb_ratio_target(r: &CompareReport, q: &str, setting: &str, label: &str, limit: f64) {
    if let (Some(s), Some(d)) = (r.median_ms(q, setting), r.median_ms(q, "duckdb")) {
        let x = s / d;
        let verdict = if x <= limit { "met" } else { "not met" };
        println!("  {q} {label}/duckdb <= {limit}: {x:.2} ({verdict})");
    }
}

/// A setting ÷ DuckDB over the TPC-H queries a run timed on both.
struct Geomean<'a> {
    queries: usize,
    mean: f64,
    worst: (&'a str, f64),
}

/// The geometric mean of `setting` ÷ DuckDB over the TPC-H queries `r`
/// timed on both, and the worst ratio; none for fewer than two queries.
fn tpch_geomean<'a>(r: &'a CompareReport, setting: &str) -> Option<Geomean<'a>> {
    let ratios: Vec<(&str, f64)> = r
        .tpch(setting)
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
