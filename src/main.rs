//! `quarry`: one binary for every role.
//!
//! * `quarry storage`: a storage process (RocksDB, regions, coprocessor).
//! * `quarry compute`: a compute process (SQL, planning, Arrow Flight SQL).
//! * `quarry playground`: a local cluster of both, in one command.
//! * `quarry load tpch`: bulk-load the TPC-H tables (all eight, or some).
//! * `quarry load parquet|csv`: load files into a new or existing table.
//! * `quarry sql`: run one statement and print the result.
//! * `quarry bench tpch`: time TPC-H queries (Q1/Q6, any of the 22, or
//!   all) and check the answers against DuckDB's.

// Library and binary code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use quarry::load::{load_tpch, LoadOptions, LoadReport, WritePath};
use quarry::load_file::{load_files, FileFormat, LoadFileOptions};
use quarry::output::{self, Format};
use quarry::tpch::Table;

mod allocator;
mod backup_cmd;
mod bench_cmd;
mod playground_cmd;
mod server_cmd;
use bench_cmd::BenchWhat;
use playground_cmd::PlaygroundArgs;
use server_cmd::{ComputeArgs, StorageArgs};

#[derive(Parser)]
#[command(
    name = "quarry",
    version,
    about = "Quarry: a distributed analytical store"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a storage process.
    Storage(StorageArgs),
    /// Run a compute process (Arrow Flight SQL).
    Compute(ComputeArgs),
    /// Start a local cluster (storage processes + one compute) and keep it
    /// running until SIGINT/SIGTERM.
    Playground(PlaygroundArgs),
    /// Bulk-load data.
    Load {
        #[command(subcommand)]
        what: LoadWhat,
    },
    /// Back up tables at one snapshot into a directory: Parquet files and
    /// a manifest (as the SQL statement BACKUP does).
    Backup(backup_cmd::BackupArgs),
    /// Restore tables from a backup into a running cluster (as the SQL
    /// statement RESTORE does).
    Restore(backup_cmd::RestoreArgs),
    /// Run one SQL statement against a compute process.
    Sql(SqlArgs),
    /// Show each store's regions: role, term, raft indexes.
    Status {
        /// Store addresses, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        store: Vec<String>,
        #[command(flatten)]
        tls: ClusterTlsArgs,
    },
    /// Manage users through the stores' meta service (to create the first
    /// user of a secure cluster; later, CREATE USER in SQL does it).
    User {
        #[command(subcommand)]
        what: UserWhat,
    },
    /// Run sqllogictest files (SQLite's format) against a compute
    /// process and print each file's pass rate and failures.
    Slt(SltArgs),
    /// Run a workload under faults and check its history with Porcupine
    /// (Jepsen's method): registers, list appends or pessimistic locks;
    /// kill, pause, partition, clock skew, leader transfers and splits.
    Chaos(quarry::chaos::ChaosOptions),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
}

#[derive(Subcommand)]
enum UserWhat {
    /// Create a user, or replace one that exists (its password, and its
    /// superuser flag as given here); the password comes from
    /// QUARRY_PASSWORD or a prompt.
    Add {
        name: String,
        /// Stores of the cluster, comma-separated (any one answers).
        #[arg(long, value_delimiter = ',', required = true)]
        store: Vec<String>,
        /// The user may manage users (CREATE/ALTER/DROP USER).
        #[arg(long)]
        superuser: bool,
        #[command(flatten)]
        tls: ClusterTlsArgs,
    },
}

/// A cluster certificate for commands that call stores directly (their
/// mutual TLS requires one).
#[derive(Args)]
struct ClusterTlsArgs {
    /// The cluster's CA certificate (PEM).
    #[arg(long, env = "QUARRY_CA")]
    ca: Option<String>,
    /// A certificate the cluster's CA signed (PEM).
    #[arg(long, env = "QUARRY_CERT")]
    cert: Option<String>,
    /// Its private key (PEM).
    #[arg(long, env = "QUARRY_KEY")]
    key: Option<String>,
}

impl ClusterTlsArgs {
    /// Makes this process's calls to stores use these certificates.
    fn install(&self) -> Result<()> {
        quarry::secure::install_cluster_tls(&quarry_proto::security::SecurityConfig {
            ca_path: self.ca.clone().unwrap_or_default(),
            cert_path: self.cert.clone().unwrap_or_default(),
            key_path: self.key.clone().unwrap_or_default(),
            ..Default::default()
        })
    }
}

#[derive(Subcommand)]
enum LoadWhat {
    /// TPC-H tables, generated with the tpchgen crate.
    Tpch {
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Stores of the cluster, comma-separated (any one answers).
        #[arg(long, value_delimiter = ',', required = true)]
        store: Vec<String>,
        /// Tables to load, comma-separated, in this order (default: all
        /// eight: region, nation, supplier, customer, part, partsupp,
        /// orders, lineitem).
        #[arg(long, value_delimiter = ',')]
        tables: Vec<Table>,
        /// Regions to pre-split lineitem and orders into (default: one per
        /// ~48 MiB, at least four per store given). The other tables are
        /// sized by their bytes (one region per ~48 MiB).
        #[arg(long, default_value_t = 0)]
        regions: usize,
        #[arg(long)]
        threads: Option<usize>,
        /// Drop the tables first if they exist.
        #[arg(long)]
        replace: bool,
        /// Storage layout: column (packs of 32768 rows) or row.
        #[arg(long, value_enum, default_value_t = LayoutArg::Column)]
        layout: LayoutArg,
        /// sst: build SST files that every replica ingests; raft: write
        /// batches through the raft log; auto: sst for tables of 32 MB or
        /// more.
        #[arg(long, value_enum, default_value_t = WritePath::Auto)]
        write_path: WritePath,
        #[command(flatten)]
        tls: ClusterTlsArgs,
    },
    /// Parquet files into a table: a new one (columns and types from the
    /// first file) or an existing one (columns matched by name).
    Parquet(LoadFileArgs),
    /// CSV files into a table: a new one (types inferred from the first
    /// 1000 rows) or an existing one (parsed as its columns' types).
    Csv {
        #[command(flatten)]
        args: LoadFileArgs,
        /// The field delimiter.
        #[arg(long, default_value_t = ',')]
        delimiter: char,
        /// The files have no header line: columns are column_1, column_2 ...
        #[arg(long)]
        no_header: bool,
    },
}

#[derive(clap::Args)]
struct LoadFileArgs {
    /// Stores of the cluster, comma-separated (any one answers).
    #[arg(long, value_delimiter = ',', required = true)]
    store: Vec<String>,
    /// The table to load into (created if it does not exist).
    #[arg(long)]
    table: String,
    /// Rows per batch read (and per transaction into an existing table).
    #[arg(long, default_value_t = 8192)]
    batch_rows: usize,
    /// Storage layout of a table the load creates.
    #[arg(long, value_enum, default_value_t = LayoutArg::Column)]
    layout: LayoutArg,
    /// How a table the load creates is written: sst (SST files every
    /// replica ingests), raft (batches through the raft log), auto (sst
    /// from 32 MB of files).
    #[arg(long, value_enum, default_value_t = WritePath::Auto)]
    write_path: WritePath,
    /// No progress bar or progress lines.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    tls: ClusterTlsArgs,
    /// The files, all with the same columns.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

impl LoadFileArgs {
    fn options(self, format: FileFormat) -> LoadFileOptions {
        LoadFileOptions {
            format,
            table: self.table,
            files: self.files,
            layout: self.layout.layout(),
            batch_rows: self.batch_rows,
            progress: !self.quiet,
            write_path: self.write_path,
            ..Default::default()
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LayoutArg {
    Column,
    Row,
}

impl LayoutArg {
    fn layout(self) -> quarry_proto::meta::Layout {
        match self {
            LayoutArg::Column => quarry_proto::meta::Layout::Column,
            LayoutArg::Row => quarry_proto::meta::Layout::Row,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LayoutArg::Column => "column",
            LayoutArg::Row => "row",
        }
    }
}

#[derive(Args)]
struct SqlArgs {
    /// Compute address, e.g. http://127.0.0.1:4000 (https:// with TLS).
    #[arg(long)]
    addr: String,
    /// The CA certificate (PEM) that signed compute's, for https.
    #[arg(long, env = "QUARRY_CA")]
    ca: Option<PathBuf>,
    /// Log in as this user; the password comes from QUARRY_PASSWORD or a
    /// prompt.
    #[arg(long, env = "QUARRY_USER")]
    user: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// One statement, or several separated by `;`, run in order on one
    /// session (so `BEGIN; ...; COMMIT` is one transaction). Without it,
    /// an interactive shell (`\?` for its commands).
    sql: Option<String>,
}

#[derive(Args)]
struct SltArgs {
    /// Compute address, e.g. http://127.0.0.1:4000. Every file starts by
    /// dropping all tables: point it at a scratch cluster.
    #[arg(long)]
    addr: String,
    /// The most seconds one statement may take; past it the file stops.
    #[arg(long, default_value_t = 60)]
    timeout_secs: u64,
    /// Answers of more values than this compare as an MD5 hash, until a
    /// file's `hash-threshold` record says otherwise (SQLite's runner's
    /// default, which its corpus assumes; 0: never).
    #[arg(long, default_value_t = 8)]
    hash_threshold: usize,
    /// How many failures to print per file.
    #[arg(long, default_value_t = 5)]
    show: usize,
    /// The .slt / .test files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    allocator::log_tuning();
}

/// The tables given, or all eight when none are.
fn tables_or_all(tables: &[Table]) -> Vec<Table> {
    if tables.is_empty() {
        Table::ALL.to_vec()
    } else {
        tables.to_vec()
    }
}

/// "region,nation,...".
fn table_list(tables: &[Table]) -> String {
    let names: Vec<&str> = tables.iter().map(|t| t.name()).collect();
    names.join(",")
}

/// One line per table, then the totals.
fn load_summary(r: &LoadReport) -> String {
    let mut s = String::new();
    for t in &r.tables {
        s += &format!(
            "  {:<8} {:>10} rows ({:.1} MB) into {} regions in {:.1} s by {}\n",
            t.table.name(),
            t.rows,
            t.bytes as f64 / 1e6,
            t.regions,
            t.seconds,
            WritePath::name(t.sst)
        );
    }
    s += &format!(
        "loaded {} rows ({:.0} MB) into {} regions in {:.1} s: {:.0} rows/s\n",
        r.rows,
        r.bytes as f64 / 1e6,
        r.regions,
        r.seconds,
        r.rows as f64 / r.seconds
    );
    s
}

async fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Storage(a) => {
            init_logging("info");
            server_cmd::storage(a).await
        }
        Cmd::Compute(a) => {
            init_logging("info");
            server_cmd::compute(a).await
        }
        Cmd::Playground(a) => {
            init_logging("warn");
            playground_cmd::run(a).await
        }
        Cmd::Load {
            what:
                LoadWhat::Tpch {
                    sf,
                    store,
                    tables,
                    regions,
                    threads,
                    replace,
                    layout,
                    write_path,
                    tls,
                },
        } => {
            init_logging("warn");
            tls.install()?;
            let mut opts = LoadOptions {
                sf,
                tables: tables_or_all(&tables),
                regions,
                replace,
                layout: layout.layout(),
                write_path,
                ..Default::default()
            };
            if let Some(t) = threads {
                opts.threads = t;
            }
            let r = load_tpch(&store, &opts).await?;
            print!("{}", load_summary(&r));
            Ok(())
        }
        Cmd::Backup(args) => backup_cmd::backup(args).await,
        Cmd::Restore(args) => backup_cmd::restore(args).await,
        Cmd::Load {
            what: LoadWhat::Parquet(args),
        } => {
            init_logging("warn");
            args.tls.install()?;
            let store = args.store.clone();
            let r = load_files(&store, &args.options(FileFormat::Parquet)).await?;
            print!("{}", r.summary());
            Ok(())
        }
        Cmd::Load {
            what:
                LoadWhat::Csv {
                    args,
                    delimiter,
                    no_header,
                },
        } => {
            init_logging("warn");
            args.tls.install()?;
            if !delimiter.is_ascii() {
                return Err(anyhow!(
                    "--delimiter must be one ASCII character, not '{delimiter}'"
                ));
            }
            let store = args.store.clone();
            let opts = LoadFileOptions {
                delimiter: delimiter as u8,
                header: !no_header,
                ..args.options(FileFormat::Csv)
            };
            let r = load_files(&store, &opts).await?;
            print!("{}", r.summary());
            Ok(())
        }
        Cmd::Status { store, tls } => {
            init_logging("warn");
            tls.install()?;
            let computes = match quarry::status::compute_status(&store).await {
                Ok(text) => text,
                Err(e) => format!("compute processes: unknown ({e:#})\n"),
            };
            for addr in store.iter().map(Some).chain([None]) {
                let text = match addr {
                    Some(addr) => match quarry::status::store_status(addr).await {
                        Ok(text) => text,
                        Err(e) => format!("store at {addr}: unreachable: {e:#}\n"),
                    },
                    None => computes.clone(),
                };
                // `quarry status | head` ends quietly, as a filter does.
                use std::io::Write;
                match std::io::stdout().write_all(text.as_bytes()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                    r => r?,
                }
            }
            Ok(())
        }
        Cmd::User {
            what:
                UserWhat::Add {
                    name,
                    store,
                    superuser,
                    tls,
                },
        } => {
            init_logging("warn");
            tls.install()?;
            let password = quarry::secure::password_for(&name)?;
            quarry::secure::put_user(
                &store,
                &name,
                &password,
                superuser,
                quarry_proto::meta::PutUserMode::Upsert,
            )
            .await?;
            println!("user {name} added");
            Ok(())
        }
        Cmd::Sql(a) => {
            init_logging("warn");
            let mut opts = quarry_client::ConnectOptions::default();
            if let Some(ca) = &a.ca {
                opts.ca_pem = Some(
                    std::fs::read(ca).with_context(|| format!("reading --ca {}", ca.display()))?,
                );
            }
            if let Some(user) = &a.user {
                opts.password = Some(quarry::secure::password_for(user)?);
                opts.user = Some(user.clone());
            }
            let mut client = quarry_client::Client::connect_with(&a.addr, &opts).await?;
            let Some(sql) = &a.sql else {
                return quarry::shell::run(&mut client, a.format).await;
            };
            let statements = quarry::script::statements(sql);
            if statements.is_empty() {
                anyhow::bail!("no SQL statement given");
            }
            // In order, on one session, so BEGIN ... COMMIT is one
            // transaction; the first error stops the script and rolls back
            // a transaction it left open.
            for (i, stmt) in statements.iter().enumerate() {
                if i > 0 && a.format == Format::Table {
                    writeln!(std::io::stdout().lock())?;
                }
                if let Err(e) = run_printed(&mut client, stmt, a.format).await {
                    if client.in_transaction() {
                        let _ = client.rollback().await;
                    }
                    return Err(e);
                }
            }
            if client.in_transaction() {
                client.rollback().await?;
                anyhow::bail!(
                    "the script left a transaction open: it was rolled back (end it with COMMIT)"
                );
            }
            Ok(())
        }
        Cmd::Bench { what } => bench_cmd::run(what).await,
        Cmd::Chaos(opts) => {
            init_logging("warn");
            let r = quarry::chaos::run(&opts).await?;
            if opts.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", quarry::chaos::format(&r));
            }
            if !r.passed {
                anyhow::bail!("the chaos run failed its checks (history in {})", r.out);
            }
            Ok(())
        }
        Cmd::Slt(a) => {
            init_logging("warn");
            run_slt(a).await
        }
    }
}

/// `quarry slt`: each file's records, then the pass rate of them all.
async fn run_slt(a: SltArgs) -> Result<()> {
    let options = quarry::slt::RunOptions {
        timeout: Duration::from_secs(a.timeout_secs),
        hash_threshold: a.hash_threshold,
    };
    let (mut run, mut passed) = (0usize, 0usize);
    for path in &a.files {
        let r = quarry::slt::run_file(&a.addr, path, options).await;
        run += r.run;
        passed += r.passed();
        println!(
            "{}: {}/{} passed in {:.1}s{}",
            path.display(),
            r.passed(),
            r.run,
            r.elapsed.as_secs_f64(),
            r.fatal
                .as_ref()
                .map_or(String::new(), |f| format!(" (stopped: {f})"))
        );
        for f in r.failures.iter().take(a.show) {
            println!("  {}", f.replace('\n', "\n    "));
        }
    }
    let rate = if run == 0 {
        0.0
    } else {
        100.0 * passed as f64 / run as f64
    };
    println!("total: {passed}/{run} records passed ({rate:.2}%)");
    Ok(())
}

/// Runs one statement of `quarry sql` and prints its answer. CSV and JSON
/// lines print each batch as it arrives, so an export need not fit in
/// memory (a failure partway prints the rows before it, then the error),
/// and a SET or RESET prints nothing; a table aligns its columns over the
/// whole answer.
async fn run_printed(
    client: &mut quarry_client::Client,
    stmt: &str,
    format: Format,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let word = stmt.split_whitespace().next().unwrap_or_default();
    if format != Format::Table && ["set", "reset"].contains(&word.to_ascii_lowercase().as_str()) {
        // CSV and JSON hold only answers (an export's rows), not "SET".
        client.sql(stmt).await?;
        return Ok(());
    }
    if format == Format::Table {
        let batches = client.sql(stmt).await?;
        return Ok(output::print(
            &mut std::io::stdout().lock(),
            &batches,
            format,
        )?);
    }
    let mut batches = client.sql_stream(stmt).await?;
    let mut first = true;
    while let Some(b) = batches.next().await {
        output::print_batch(&mut std::io::stdout().lock(), &b?, format, first)?;
        first = false;
    }
    Ok(())
}

fn main() {
    allocator::tune();
    let cli = Cli::parse();
    // Failpoints named in the environment are on from the start, in every
    // command (a build without the feature has none to switch).
    if quarry_proto::failpoint::ENABLED {
        if let Err(e) = quarry_proto::failpoint::configure_from_env() {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
    // Room for recursion over expressions as deep as a statement may nest
    // (`quarry_compute::sql::MAX_EXPR_DEPTH`): evaluating and dropping
    // them recurses without growing the stack as DataFusion's planner does.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 << 20)
        // A big query's freed memory goes back to the kernel in the idle
        // moments after it (`allocator.rs`, "RELEASE AFTER A BIG QUERY").
        .on_thread_park(|| {
            allocator::release_if_asked();
        })
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = rt.block_on(run(cli));
    // Work still running (a blocking call that will not end) must not keep
    // a stopped process alive.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
