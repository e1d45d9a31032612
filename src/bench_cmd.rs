//! `quarry bench …`: the benchmark subcommands and how their reports are
//! printed (the benches themselves live in the library: `bench`, `bank`,
//! `ycsb`).

use anyhow::{anyhow, Result};
use clap::Subcommand;
use quarry::bench::{
    bench_compare, bench_scaled, bench_tpch, bench_tso, bench_write, print_compare, BenchOptions,
    TsoBenchOptions, WriteBenchOptions,
};
use quarry::local::ClusterArgs;
use quarry::tpch::Table;

use crate::{init_logging, tables_or_all, LayoutArg};

#[derive(Subcommand)]
pub enum BenchWhat {
    /// Write cost of replication: load throughput, INSERT latency and
    /// concurrent INSERT throughput, with early apply on and off in one run.
    Write {
        #[arg(long, default_value_t = 3)]
        stores: usize,
        /// TPC-H scale factor loaded to time the bulk path.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Sequential single-row INSERTs (each timed).
        #[arg(long, default_value_t = 300)]
        inserts: usize,
        /// Concurrent writers for the throughput phase.
        #[arg(long, default_value_t = 8)]
        writers: usize,
        /// on, off or both.
        #[arg(long, default_value = "both")]
        early_apply: String,
        #[arg(long)]
        json: bool,
    },
    /// Bank transfers between accounts over three regions from concurrent
    /// clients, each one UPDATE transaction, while a checker verifies
    /// that every snapshot holds the opening total.
    Bank {
        #[command(flatten)]
        opts: quarry::bank::BankOptions,
        #[arg(long)]
        json: bool,
    },
    /// YCSB's core workloads over SQL: point reads and single-row UPDATE
    /// transactions on zipfian keys (a: 50/50, b: 95/5, c: reads only).
    Ycsb {
        #[command(flatten)]
        opts: quarry::ycsb::YcsbOptions,
        #[arg(long)]
        json: bool,
    },
    /// The timestamp oracle on an embedded cluster: latency and
    /// throughput of `Meta.GetTimestamps` from concurrent clients.
    Tso {
        #[arg(long, default_value_t = 3)]
        stores: usize,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Requests per client.
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        /// Timestamps per request.
        #[arg(long, default_value_t = 1)]
        batch: u32,
        #[arg(long)]
        json: bool,
    },
    /// TPC-H Q1 and Q6.
    Tpch {
        /// A running compute process; without it an embedded local cluster
        /// is started and loaded.
        #[arg(long)]
        addr: Option<String>,
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Tables the embedded cluster loads, comma-separated (default: all
        /// eight).
        #[arg(long, value_delimiter = ',')]
        tables: Vec<Table>,
        /// Queries to time, comma-separated: q1 … q22, `all` (the 22),
        /// `scan`, `topn`.
        #[arg(long, value_delimiter = ',', default_value = "q1,q6")]
        queries: Vec<String>,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 3)]
        stores: usize,
        /// Storage layout of the loaded tables: column or row.
        #[arg(long, value_enum, default_value_t = LayoutArg::Column)]
        layout: LayoutArg,
        /// Measure in one run: column layout, row layout, rows instead of
        /// Arrow chunks on the wire, and DuckDB (when importable) over the
        /// same data; print the ratios. Adds the many-rows queries `scan` (all
        /// rows to the client) and `topn` (the same rows' top ten by price,
        /// which each region picks before sending).
        #[arg(long)]
        compare: bool,
        /// With --compare: afterwards load lineitem at this scale factor
        /// into a fresh embedded cluster, time Q1 and Q6 there, and print
        /// their SF ratio against this run's (issue 15's linear-scaling
        /// target; 10 is the one it names).
        #[arg(long, requires = "compare")]
        scale_to: Option<f64>,
        /// With --compare: settings to leave out, comma-separated: row,
        /// rows-on-wire, decimal128, adbc, duckdb (at SF 10, `--skip
        /// row,rows-on-wire,decimal128` keeps the run to the in-process,
        /// ADBC and DuckDB tables).
        #[arg(long, value_delimiter = ',', value_enum, requires = "compare")]
        skip: Vec<quarry::bench::Skippable>,
        /// Instead of the settings above: start this many compute
        /// processes (each an MPP worker) and time each query through one
        /// of them with `SET mpp` off, force and auto; print the ratios
        /// and issue 43's overhead targets.
        #[arg(long, conflicts_with = "compare")]
        computes: Option<usize>,
    },
}

pub async fn run(what: BenchWhat) -> Result<()> {
    match what {
        BenchWhat::Write {
            stores,
            sf,
            inserts,
            writers,
            early_apply,
            json,
        } => {
            init_logging("warn");
            let settings = match early_apply.as_str() {
                "on" => vec![true],
                "off" => vec![false],
                "both" => vec![true, false],
                other => {
                    return Err(anyhow!(
                        "--early-apply must be on, off or both, not {other}"
                    ))
                }
            };
            let reports = bench_write(&WriteBenchOptions {
                stores,
                sf,
                inserts,
                writers,
                settings,
            })
            .await?;
            for r in &reports {
                if json {
                    println!("{}", serde_json::to_string(r)?);
                } else {
                    println!(
                        "early-apply {:>3}: load {:.0} rows/s ({:.1} s, {} replicas); INSERT p50 {:.2} ms p99 {:.2} ms mean {:.2} ms; {} writers {:.0} INSERTs/s; 100-row INSERT p50 {:.2} ms in one region, {:.2} ms over three ({:.2}×); UPDATE of one row p50 {:.2} ms",
                        if r.early_apply { "on" } else { "off" },
                        r.load_rows_per_s,
                        r.load_seconds,
                        r.replicas,
                        r.insert_p50_ms,
                        r.insert_p99_ms,
                        r.insert_mean_ms,
                        writers,
                        r.concurrent_writes_per_s,
                        r.batch_one_region_p50_ms,
                        r.batch_three_regions_p50_ms,
                        r.batch_three_regions_p50_ms / r.batch_one_region_p50_ms,
                        r.update_p50_ms
                    );
                }
            }
            if let [on, off] = reports.as_slice() {
                if !json {
                    println!(
                        "off/on: INSERT p50 {:.2}×, mean {:.2}×, concurrent throughput {:.2}×, load throughput {:.2}×",
                        off.insert_p50_ms / on.insert_p50_ms,
                        off.insert_mean_ms / on.insert_mean_ms,
                        off.concurrent_writes_per_s / on.concurrent_writes_per_s,
                        off.load_rows_per_s / on.load_rows_per_s
                    );
                }
            }
            Ok(())
        }
        BenchWhat::Bank { opts, json } => {
            init_logging("warn");
            let r = quarry::bank::bench_bank(&opts).await?;
            print_report(&r, json)?;
            if r.violations > 0 {
                anyhow::bail!("the bank invariant was violated {} times", r.violations);
            }
            Ok(())
        }
        BenchWhat::Ycsb { opts, json } => {
            init_logging("warn");
            let reports = quarry::ycsb::bench_ycsb(&opts).await?;
            for r in &reports {
                print_report(r, json)?;
            }
            if let (Some(on), Some(off), true, false) =
                (reports.first(), reports.last(), reports.len() > 1, json)
            {
                print!(
                    "optimizations off/on: throughput {:.2}×, update p50 {:.2}×, update p99 {:.2}×",
                    off.ops_per_s / on.ops_per_s,
                    off.update_p50_ms / on.update_p50_ms,
                    off.update_p99_ms / on.update_p99_ms
                );
                if opts.txn {
                    print!(", FOR UPDATE p50 {:.2}×", off.lock_p50_ms / on.lock_p50_ms);
                }
                println!();
            }
            Ok(())
        }
        BenchWhat::Tso {
            stores,
            clients,
            requests,
            batch,
            json,
        } => {
            init_logging("warn");
            let r = bench_tso(&TsoBenchOptions {
                stores,
                clients,
                requests,
                batch,
            })
            .await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "timestamp oracle, {} clients, {} per request: {:.0} requests/s, {:.0} timestamps/s, p50 {:.3} ms, p99 {:.3} ms",
                    r.clients, r.batch, r.requests_per_s, r.timestamps_per_s, r.p50_ms, r.p99_ms
                );
            }
            Ok(())
        }
        BenchWhat::Tpch {
            addr,
            sf,
            tables,
            queries,
            runs,
            json,
            stores,
            layout,
            compare,
            scale_to,
            skip,
            computes,
        } => {
            init_logging("warn");
            let mut opts = BenchOptions {
                addr,
                sf,
                tables: tables_or_all(&tables),
                queries: quarry::tpch::expand_queries(&queries),
                runs,
                stores,
                cluster_args: ClusterArgs::default(),
                progress: !json,
                layout: layout.layout(),
                reference: Default::default(),
            };
            if let Some(n) = computes {
                let r = quarry::bench::bench_mpp(&opts, n).await?;
                if json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    quarry::bench::print_mpp(&r);
                }
                if r.queries.iter().any(|q| q.answer.starts_with("mismatch")) {
                    return Err(anyhow!("an answer did not match the expected one"));
                }
                return Ok(());
            }
            if compare {
                if let Some(big) = scale_to {
                    // Checked before the compare run, which takes minutes.
                    if big.is_nan() || big <= sf {
                        return Err(anyhow!("--scale-to {big} must be larger than --sf {sf}"));
                    }
                    if !opts.queries.iter().any(|q| q == "q1" || q == "q6") {
                        return Err(anyhow!(
                            "--scale-to times Q1 and Q6: include q1 or q6 in --queries"
                        ));
                    }
                }
                // The many-rows queries measure the wire.
                let wire = !skip.contains(&quarry::bench::Skippable::RowsOnWire);
                for extra in ["scan", "topn"].into_iter().filter(|_| wire) {
                    if !opts.queries.iter().any(|q| q == extra) {
                        opts.queries.push(extra.into());
                    }
                }
                let mut r = bench_compare(&opts, &skip).await?;
                // A failed scaled run is reported with the compare run's
                // numbers, not instead of them.
                let mut scaled_failed = None;
                if let Some(sf) = scale_to {
                    match bench_scaled(&opts, sf).await {
                        Ok(s) => r.scaled = Some(s),
                        Err(e) => scaled_failed = Some(format!("the run at SF {sf} failed: {e:#}")),
                    }
                }
                if json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    print_compare(&r);
                }
                // DuckDB was asked for and failed: the answers it was to
                // check are unchecked, which must not pass quietly.
                if let Some(why) = &r.duckdb_skipped {
                    let unchecked = r.tpch("column").filter(|q| q.answer == "unknown").count();
                    if unchecked > 0 && !skip.contains(&quarry::bench::Skippable::Duckdb) {
                        return Err(anyhow!(
                            "{unchecked} answers are unchecked: DuckDB, which gives them at this \
                             scale, was not measured ({why}); --skip duckdb to time without it"
                        ));
                    }
                }
                let scaled = r.scaled.iter().flat_map(|s| &s.queries);
                if r.queries
                    .iter()
                    .chain(scaled)
                    .any(|q| q.answer.starts_with("mismatch"))
                {
                    return Err(anyhow!("an answer did not match the expected one"));
                }
                return match scaled_failed {
                    Some(why) => Err(anyhow!(why)),
                    None => Ok(()),
                };
            }
            let (load, reports) = bench_tpch(&opts).await?;
            if json {
                if let Some(l) = &load {
                    println!("{}", serde_json::json!({ "load": l }));
                }
                for r in &reports {
                    println!("{}", serde_json::to_string(r)?);
                }
            } else {
                if let Some(l) = &load {
                    println!(
                        "load: {} rows at SF {} ({} layout) into {} regions in {:.1} s ({:.0} rows/s)",
                        l.rows,
                        l.sf,
                        l.layout,
                        l.regions,
                        l.seconds,
                        l.rows as f64 / l.seconds
                    );
                }
                for r in &reports {
                    println!(
                        "{}: min {:.1} ms, median {:.1} ms over {} runs, {} rows, answer {}",
                        r.query, r.min_ms, r.median_ms, r.runs, r.rows, r.answer
                    );
                }
            }
            if reports.iter().any(|r| r.answer.starts_with("mismatch")) {
                return Err(anyhow!("an answer did not match the expected one"));
            }
            Ok(())
        }
    }
}

/// A bench's report: one JSON object, or its line of text.
fn print_report<R: serde::Serialize + std::fmt::Display>(r: &R, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!("{r}");
    }
    Ok(())
}
