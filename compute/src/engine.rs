//! The query engine: statements in, Arrow record batches out.
//!
//! One [`QueryEngine`] per compute process, shared by every client
//! connection. It holds no table state an answer depends on: writes look
//! their table up in the meta region per statement, queries plan over a
//! kept catalog that their snapshot checks (`catalog_cache.rs`), and region
//! routes are cached and corrected by region errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::parser::Statement as DfStatement;
use futures::StreamExt;
use quarry_proto::coprocessor::EncodeType;
use quarry_proto::meta::TableDef;

use self::insert::insert;
use crate::auth::Auth;
use crate::cluster::Cluster;
use crate::config::ComputeConfig;
use crate::df::region_scan::ScanContext;
use crate::df::{self, PlannedQuery, SqlSession};
use crate::dispatch::{DispatchConfig, Dispatcher};
use crate::kv_writer::KvWriter;
use crate::output::text_output;
use crate::params;
use crate::region_cache::RegionCache;
use crate::session::{OpenTxn, Sessions};
use crate::session_settings::SessionSettings;
use crate::sql::settings::SettingStatement;
use crate::sql::users::UserStatement;
use crate::sql::{self, Statement};
use crate::txn::Txns;
use crate::{plan_err, Error, Result};

pub use crate::output::{QueryOutput, QueryStream};

/// A statement ready to run: queries are planned (so their schema is known)
/// but not run; everything else has already run.
pub enum Prepared {
    /// A query, planned by DataFusion.
    Query(Box<PlannedQuery>),
    Done(QueryOutput),
}

pub struct QueryEngine {
    pub(crate) cluster: Arc<Cluster>,
    sql: SqlSession,
    writer: KvWriter,
    txns: Arc<Txns>,
    sessions: Arc<Sessions>,
    /// Statement timeouts: a session's (SET statement_timeout) or
    /// compute.query-timeout-ms.
    settings: Arc<SessionSettings>,
    /// compute.lock-returns-rows (`dml::lock_points`).
    lock_returns_rows: bool,
    /// compute.max-statement-bytes (`sql::parse_df`).
    max_statement_bytes: usize,
    /// compute.stream-results-after-mb, in bytes ([`QueryEngine::stream_in`]).
    stream_after_bytes: usize,
    /// Logins and user statements.
    auth: Arc<Auth>,
    /// The region scans of every query (BACKUP reads through it too).
    dispatcher: Arc<Dispatcher>,
}

/// A statement, parsed once: a query for DataFusion, or one Quarry runs.
enum Parsed {
    Query(df::ParsedQuery),
    Statement(Statement),
}

/// The one statement of `text`, within `max_bytes` and the nesting limit
/// (`sql::parse_df`).
fn parse_one(text: &str, max_bytes: usize) -> Result<DfStatement> {
    let mut stmts = sql::parse_df(text, max_bytes)?;
    match stmts.len() {
        0 => Err(plan_err!("empty statement")),
        1 => Ok(stmts.pop_front().expect("one")),
        n => Err(plan_err!("expected one statement, got {n}")),
    }
}

/// Parses one statement within `max_bytes` and the nesting limit
/// (`sql::parse_df`).
fn parse(text: &str, max_bytes: usize) -> Result<Parsed> {
    sql::check_size(text, max_bytes)?;
    if let Some(user) = sql::users::parse(text) {
        return Ok(Parsed::Statement(Statement::User(user?)));
    }
    if let Some(setting) = sql::settings::parse(text) {
        return Ok(Parsed::Statement(Statement::Setting(setting?)));
    }
    if let Some(backup) = sql::backup::parse(text) {
        return Ok(Parsed::Statement(Statement::Backup(backup?)));
    }
    let stmt = parse_one(text, max_bytes)?;
    if df::is_query(&stmt) {
        return Ok(Parsed::Query(stmt.into()));
    }
    match stmt {
        DfStatement::Statement(s) => Ok(Parsed::Statement(sql::convert_statement(*s)?)),
        other => Err(plan_err!("unsupported statement: {other}")),
    }
}

/// A write's answer: the rows it wrote, in one `count` column.
fn count_output(n: usize) -> Result<QueryOutput> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::Int64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![n as i64])) as ArrayRef],
    )?;
    Ok(QueryOutput::single(schema, batch))
}

/// The schema of a one-column text answer (SHOW TABLES, DDL's result).
fn text_schema(column: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]))
}

/// The schema of SHOW USERS's answer.
fn users_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, false),
        Field::new("superuser", DataType::Boolean, false),
    ]))
}

/// The schema of DESCRIBE's answer.
fn describe_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("column", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("null", DataType::Utf8, false),
        Field::new("key", DataType::Utf8, false),
    ]))
}

/// What a prepared statement answers and takes ([`QueryEngine::shape`]).
pub struct StatementShape {
    /// The result's schema; empty for a statement that answers a row
    /// count or a word (what JDBC runs as an update).
    pub dataset: SchemaRef,
    /// One field per parameter, `$1` …, typed as DataFusion infers it from
    /// the statement (VARCHAR where it cannot tell; any value binds).
    pub parameters: SchemaRef,
    /// The plan of a query without placeholders (or `FOR UPDATE`), which
    /// its first execution may run instead of planning it again.
    pub plan: Option<Box<PlannedQuery>>,
}

impl QueryEngine {
    pub fn new(cfg: &ComputeConfig) -> Result<Self> {
        Self::serving(cfg, None)
    }

    /// The engine of a compute process whose gRPC server is at
    /// `worker_addr` (`host:port`): it also serves MPP tasks, heartbeats
    /// its address to meta and plans queries over every live compute
    /// process as `mpp` says (`mpp/`); with `[security]` its worker calls
    /// go over mutual TLS (`mpp/channels.rs`).
    pub fn serving(cfg: &ComputeConfig, worker_addr: Option<&str>) -> Result<Self> {
        cfg.validate()?;
        crate::metrics::set_slow_query_threshold(cfg.slow_query_ms);
        let cluster = Arc::new(Cluster::new(cfg.stores.clone(), Duration::from_secs(10)));
        let cache = Arc::new(RegionCache::new(cluster.clone()));
        let txns = Arc::new(Txns::new(cluster.clone(), cache.clone()));
        let dispatcher = Arc::new(
            Dispatcher::new(
                cache.clone(),
                cluster.clone(),
                DispatchConfig {
                    concurrency: cfg.max_inflight_regions,
                    max_response_bytes: cfg.max_response_bytes,
                    encode: match cfg.encode.as_str() {
                        "rows" => EncodeType::Rows,
                        "arrow-decimal128" => EncodeType::Arrow,
                        _ => EncodeType::ArrowDecimal64,
                    },
                    ..Default::default()
                },
            )
            .with_txns(txns.clone()),
        );
        let timeout = Duration::from_millis(cfg.query_timeout_ms);
        let sql = SqlSession::new(
            ScanContext {
                dispatcher: dispatcher.clone(),
                timeout,
                join_bloom_filters: cfg.join_bloom_filters,
                join_key_list_max: cfg.join_key_list_max,
            },
            cluster.clone(),
            txns.clone(),
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )?
        .with_memory_limit(cfg.query_memory_limit_mb as usize * (1 << 20))
        .with_plan_cache(cfg.plan_cache_entries);
        let settings = Arc::new(SessionSettings::new(timeout));
        let sql = match worker_addr {
            Some(addr) => {
                let workers = crate::df::mpp::workers::Workers::new(addr)
                    .map_err(|e| Error::InvalidInput(format!("worker address {addr}: {e}")))?;
                workers.spawn_heartbeat(cluster.clone());
                let mode = crate::config::MppMode::parse(&cfg.mpp)?;
                let session = settings.clone();
                sql.with_mpp(workers, mode, Arc::new(move || session.mpp()))
            }
            None => sql,
        };
        let auth = Arc::new(Auth::new(
            cluster.clone(),
            cfg.security.enabled(),
            cfg.security.cert_allowed_cn.clone(),
        ));
        Ok(QueryEngine {
            auth,
            sql,
            writer: KvWriter::new(cluster.clone(), cache),
            sessions: Sessions::new(txns.clone()),
            txns,
            cluster,
            settings,
            lock_returns_rows: cfg.lock_returns_rows,
            max_statement_bytes: cfg.max_statement_bytes,
            stream_after_bytes: cfg.stream_results_after_mb.saturating_mul(1 << 20),
            dispatcher,
        })
    }

    /// An engine that never analyzes tables (`SqlSession::without_analysis`):
    /// for one load, backup or restore.
    pub fn without_analysis(mut self) -> Self {
        self.sql = self.sql.without_analysis();
        self
    }

    /// Logins: who may use this process (`auth.rs`).
    pub fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    /// Forgets the settings of the session `key` (a PostgreSQL
    /// connection that ended or ran DISCARD ALL).
    pub fn forget_session(&self, key: &str) {
        self.settings.forget(key);
    }

    /// The longest statement text accepted (compute.max-statement-bytes).
    pub fn max_statement_bytes(&self) -> usize {
        self.max_statement_bytes
    }

    /// Transactions: timestamps, two-phase commit, lock resolution.
    pub fn txns(&self) -> &Arc<Txns> {
        &self.txns
    }

    /// Open transactions (BEGIN ... COMMIT).
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Plans and runs queries (DataFusion over the regions).
    pub fn sql_session(&self) -> &SqlSession {
        &self.sql
    }

    /// The cluster this engine reads and writes.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    pub fn writer(&self) -> &KvWriter {
        &self.writer
    }

    /// The table `name`, or an error naming the tables that exist.
    pub async fn table(&self, name: &str) -> Result<TableDef> {
        if let Some(t) = self.cluster.get_table(name).await? {
            return Ok(t);
        }
        let catalog = self.cluster.catalog().await?;
        if catalog.views.iter().any(|v| v.name == name) {
            return Err(plan_err!(
                "{name} is a view: INSERT, UPDATE, DELETE and DESCRIBE take tables"
            ));
        }
        let mut names: Vec<String> = catalog.tables.into_iter().map(|t| t.name).collect();
        names.sort();
        Err(if names.is_empty() {
            plan_err!("unknown table '{name}': there are no tables yet")
        } else {
            plan_err!("unknown table '{name}'; tables are: {}", names.join(", "))
        })
    }

    /// Runs a query DataFusion planned, within the statement timeout.
    pub async fn run(&self, q: PlannedQuery) -> Result<QueryOutput> {
        self.within_deadline(self.sql.run(q)).await
    }

    /// Runs a query (SELECT) of UPDATE or DELETE over the snapshot at
    /// `read_ts`, within the query deadline; `table` also shows its rows'
    /// handles as the column `_rowid` ([`df::ROWID`]).
    pub async fn query_at(
        &self,
        text: &str,
        read_ts: u64,
        table: &TableDef,
    ) -> Result<QueryOutput> {
        let Parsed::Query(query) = parse(text, usize::MAX)? else {
            return Err(Error::Internal(format!("not a query: {text}")));
        };
        let planned = self.sql.plan_with_rowid(query, table).await?;
        self.within_deadline(self.sql.run_at(planned, read_ts))
            .await
    }

    /// Streams every row of `table` over the snapshot at `read_ts` in
    /// handle order (BACKUP's read, `handle_order.rs`): every column in the
    /// table's order, after the rows' handles when the table has no
    /// primary key (else the key is the handle). Region by region, a few at
    /// once, so compute holds a few regions' rows, never the table. No
    /// statement deadline: it reads a whole table. `table` is the
    /// definition as of `read_ts`; a table that differs now (dropped and
    /// made again, renamed, a column changed) is refused rather than read,
    /// and the caller checks it again with [`QueryEngine::unchanged_since`]
    /// once the rows are read.
    pub async fn scan_in_handle_order(
        &self,
        table: &TableDef,
        read_ts: u64,
    ) -> Result<QueryStream> {
        self.unchanged_since(table).await?;
        let deadline = Instant::now() + Duration::from_secs(24 * 3600);
        crate::handle_order::scan_in_handle_order(self.dispatcher.clone(), table, read_ts, deadline)
            .await
    }

    /// Fails with a conflict when `table` (a snapshot's definition) is
    /// not the table of that name now: ids are never reused, so an equal
    /// definition is the same table, unaltered.
    pub async fn unchanged_since(&self, table: &TableDef) -> Result<()> {
        let same = |t: &TableDef| {
            t.id == table.id
                && t.handle_column_id == table.handle_column_id
                && t.columns.len() == table.columns.len()
                && t.columns
                    .iter()
                    .zip(&table.columns)
                    .all(|(a, b)| a.id == b.id && a.name == b.name && a.field_type == b.field_type)
        };
        if !self
            .cluster
            .get_table(&table.name)
            .await?
            .is_some_and(|t| same(&t))
        {
            return Err(Error::Conflict(format!(
                "table {} changed (DROP, RENAME or ALTER) after the backup's snapshot; \
                 run the backup again",
                table.name
            )));
        }
        Ok(())
    }

    /// Runs a planned query in `txn` (at its snapshot, seeing its own
    /// writes), or at a fresh snapshot; an error in a transaction aborts
    /// it.
    pub async fn run_in(&self, q: PlannedQuery, txn: Option<&OpenTxn>) -> Result<QueryOutput> {
        let started = Instant::now();
        let r = self.run_counted(q, txn).await;
        crate::metrics::observe("query", started.elapsed(), &r);
        r
    }

    /// [`QueryEngine::run_in`], its answer streamed when it is large. The
    /// answer up to `stream-results-after-mb` is gathered first, within
    /// the statement's deadline, so a query that fails before then (most
    /// failures: planning, stores down, an aggregation's, and any query
    /// with a smaller answer) fails here, as it would in `run_in`, having
    /// sent nothing. A larger answer then streams (`Streaming::run`),
    /// so compute does not hold it whole: a failure after that ends the
    /// stream with the error, and the client has part of the answer and
    /// then the error, never a shorter answer that looks whole. The
    /// deadline bounds the whole stream, the client's reading included,
    /// and an error aborts the transaction, as in `run_in`. (Streaming
    /// from the first batch measured no faster or slower on SF 1's
    /// `scan`; gathering keeps the simpler failure for the common answer.)
    /// A streamed query's time in the metrics runs to its last batch
    /// handed to the read-ahead buffer.
    /// Starts `q` (in `txn`, or at a fresh snapshot) and gathers its
    /// first batches, up to `gather` bytes: (the rest of the stream, the
    /// batches, whether it ended).
    async fn start_gathering(
        &self,
        q: PlannedQuery,
        txn: Option<&Arc<OpenTxn>>,
        gather: usize,
    ) -> Result<(QueryStream, Vec<arrow::array::RecordBatch>, bool)> {
        let mut out = match txn {
            Some(txn) => self.sql.stream_at(q, txn.start_ts).await?,
            // One snapshot for the whole query, taken as it starts.
            None => self.sql.stream_fresh(q).await?,
        };
        // At least the first batch, and up to the limit.
        let (mut gathered, mut bytes) = (Vec::new(), 0);
        while let Some(batch) = out.batches.next().await.transpose()? {
            bytes += batch.get_array_memory_size();
            gathered.push(batch);
            if bytes >= gather {
                return Ok((out, gathered, false));
            }
        }
        Ok((out, gathered, true))
    }

    pub async fn stream_in(
        &self,
        q: PlannedQuery,
        txn: Option<Arc<OpenTxn>>,
    ) -> Result<QueryStream> {
        let started = Instant::now();
        let (deadline, guard, nested) = self.deadline_now();
        let gather = self.stream_after_bytes;
        // A query over several compute processes that fails before the
        // client has anything runs once more, without the workers found
        // unreachable (TiFlash's rule; `mpp/`).
        let retry = match &txn {
            Some(_) => None,
            None => q.mpp_retry(),
        };
        let start = async {
            let first = self.start_gathering(q, txn.as_ref(), gather).await;
            let (Err(e), Some(query), Some(workers)) = (&first, retry, self.sql.workers()) else {
                return first;
            };
            let dead = workers.unreachable().await;
            if dead.is_empty() {
                return first;
            }
            let dead: Vec<String> = dead.iter().map(|u| u.authority().to_string()).collect();
            let dead = dead.join(", ");
            tracing::warn!("MPP query failed with worker(s) {dead} unreachable; running it again without them: {e}");
            crate::metrics::mpp_retry();
            let again = async {
                let q = self.sql.plan_kept(query).await?;
                self.start_gathering(q, None, gather).await
            };
            again.await.map_err(|e| {
                e.with_context(&format!(
                    "compute process(es) {dead} serving this query's tasks became unreachable, \
                     and its one retry on the others failed"
                ))
            })
        };
        let (out, gathered, ended) = match self.within(deadline, guard, nested, start).await {
            Ok(started) => started,
            Err(e) => {
                let e = match &txn {
                    Some(txn) => self.sessions.fail(txn, e).await,
                    None => e,
                };
                crate::metrics::observe("query", started.elapsed(), &Err::<(), _>(e.clone()));
                return Err(e);
            }
        };
        let schema = gathered.first().map_or(out.schema, |b| b.schema());
        let gathered = futures::stream::iter(gathered.into_iter().map(Ok));
        if ended {
            // (A stream that has ended is not polled again.)
            crate::metrics::observe("query", started.elapsed(), &Ok::<(), Error>(()));
            return Ok(QueryStream {
                schema,
                batches: gathered.boxed(),
            });
        }
        let batches = out.batches;
        let streaming = Streaming {
            batches,
            guard,
            deadline_error: self.deadline_error(),
            txn,
            sessions: self.sessions.clone(),
            started,
            counted: false,
        };
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
        let failed = Arc::new(std::sync::OnceLock::new());
        let task = tokio::spawn(streaming.run(tx, failed.clone()));
        // The batches sent, then the error that ended them, if one did
        // (the task's, or its panic: never a clean end it did not reach).
        let rest =
            futures::stream::unfold((rx, Some((failed, task))), |(mut rx, ended)| async move {
                if let Some(batch) = rx.recv().await {
                    return Some((Ok(batch), (rx, ended)));
                }
                let (failed, task) = ended?;
                let error = match (failed.get(), task.await) {
                    (Some(e), _) => e.clone(),
                    (None, Ok(())) => return None,
                    (None, Err(e)) => Error::Internal(format!("a query's task ended: {e}")),
                };
                Some((Err(error), (rx, None)))
            });
        Ok(QueryStream {
            schema,
            batches: gathered.chain(rest).boxed(),
        })
    }

    async fn run_counted(&self, q: PlannedQuery, txn: Option<&OpenTxn>) -> Result<QueryOutput> {
        let Some(txn) = txn else {
            return self.run(q).await;
        };
        let r = self.within_deadline(self.sql.run_at(q, txn.start_ts)).await;
        match r {
            Ok(out) => Ok(out),
            Err(e) => Err(self.sessions.fail(txn, e).await),
        }
    }

    /// Parses and runs one SQL statement.
    pub async fn sql(&self, text: &str) -> Result<QueryOutput> {
        self.sql_in(text, None).await
    }

    /// Parses and runs one SQL statement in `txn` (or on its own).
    pub async fn sql_in(&self, text: &str, txn: Option<&Arc<OpenTxn>>) -> Result<QueryOutput> {
        match self.prepare_sql_in(text, txn).await? {
            Prepared::Query(q) => self.run_in(*q, txn.map(|t| t.as_ref())).await,
            Prepared::Done(out) => Ok(out),
        }
    }

    /// Plans a query (SELECT, WITH, EXPLAIN) with DataFusion; runs any
    /// other statement (DDL, INSERT, SHOW TABLES, DESCRIBE) on Quarry's own
    /// path.
    pub async fn prepare_sql(&self, text: &str) -> Result<Prepared> {
        self.prepare_sql_in(text, None).await
    }

    /// [`QueryEngine::prepare_sql`] in the open transaction `txn`: a write
    /// locks its rows in it (`session.rs`), COMMIT and ROLLBACK end it, and
    /// a statement that fails aborts it.
    pub async fn prepare_sql_in(&self, text: &str, txn: Option<&Arc<OpenTxn>>) -> Result<Prepared> {
        let started = Instant::now();
        let r = self.prepare_counted(text, txn).await;
        // A query is counted when it runs (run_in); what ran here is
        // every other statement, or a query that failed to plan.
        if !matches!(r, Ok(Prepared::Query(_))) {
            let elapsed = started.elapsed();
            crate::metrics::observe("statement", elapsed, &r);
            if crate::metrics::is_slow(elapsed) {
                // A user statement's text holds a password.
                let logged = match sql::users::parse(text) {
                    Some(_) => "(a user statement; its text holds a password)",
                    None => text,
                };
                crate::metrics::log_slow(logged, elapsed, "");
            }
        }
        r
    }

    async fn prepare_counted(&self, text: &str, txn: Option<&Arc<OpenTxn>>) -> Result<Prepared> {
        let Some(txn) = txn else {
            return self
                .prepare(parse(text, self.max_statement_bytes)?, None)
                .await;
        };
        self.sessions.check(txn).await?;
        let parsed = match parse(text, self.max_statement_bytes) {
            Ok(p) => p,
            Err(e) => return Err(self.sessions.fail(txn, e).await),
        };
        // Refused without harm to the transaction.
        match &parsed {
            Parsed::Statement(Statement::Begin) => {
                return Err(plan_err!(
                    "a transaction is already open; COMMIT or ROLLBACK it first"
                ))
            }
            Parsed::Statement(
                Statement::CreateTable(_)
                | Statement::DropTable { .. }
                | Statement::AlterTable { .. }
                | Statement::CreateView(_)
                | Statement::DropView { .. }
                | Statement::CreateIndex(_)
                | Statement::DropIndex { .. },
            ) => {
                return Err(plan_err!(
                    "CREATE, ALTER and DROP TABLE, VIEW and INDEX do not run inside a \
                     transaction; COMMIT or ROLLBACK it first"
                ))
            }
            Parsed::Statement(Statement::User(_)) => {
                return Err(plan_err!(
                    "user statements do not run inside a transaction; COMMIT or ROLLBACK it first"
                ))
            }
            Parsed::Statement(Statement::Backup(b)) => {
                return Err(plan_err!(
                    "{} does not run inside a transaction (it reads at a snapshot of its own); \
                     COMMIT or ROLLBACK it first",
                    b.word()
                ))
            }
            _ => {}
        }
        match self.prepare(parsed, Some(txn)).await {
            Err(e) => Err(self.sessions.fail(txn, e).await),
            ok => ok,
        }
    }

    /// The shape of a statement about to be prepared, without running it:
    /// a query is planned (its result schema and parameter types come from
    /// the plan); other statements answer SHOW TABLES's or DESCRIBE's
    /// columns, or nothing, with their parameters typed from the columns
    /// they write or compare with.
    pub async fn shape(&self, stmt: &params::Numbered) -> Result<StatementShape> {
        sql::check_size(&stmt.sql, self.max_statement_bytes)?;
        if let Some(setting) = sql::settings::parse(&stmt.sql) {
            let dataset = match setting? {
                SettingStatement::ShowStatementTimeout => text_schema("statement_timeout"),
                SettingStatement::ShowMpp => text_schema("mpp"),
                SettingStatement::SetStatementTimeout(_) | SettingStatement::SetMpp(_) => {
                    text_schema("result")
                }
            };
            return Ok(StatementShape {
                dataset,
                parameters: Arc::new(Schema::empty()),
                plan: None,
            });
        }
        if let Some(backup) = sql::backup::parse(&stmt.sql) {
            backup?;
            return Ok(StatementShape {
                dataset: self::backup::result_schema(),
                parameters: Arc::new(Schema::empty()),
                plan: None,
            });
        }
        if let Some(user) = sql::users::parse(&stmt.sql) {
            let dataset = match user? {
                UserStatement::Show => users_schema(),
                _ => Arc::new(Schema::empty()),
            };
            return Ok(StatementShape {
                dataset,
                parameters: Arc::new(Schema::empty()),
                plan: None,
            });
        }
        let parsed = parse_one(&stmt.sql, self.max_statement_bytes)?;
        let mut plan = None;
        let (dataset, types) = match df::is_query(&parsed) {
            true => {
                let mut query = df::ParsedQuery::from(parsed);
                let locks = query.take_for_update()?.is_some();
                // Kept for an autocommit first execution only
                // (`FlightSqlServer::statement_info`), which checks it.
                let planned = self.sql.plan_kept(query).await?;
                let shape = (planned.schema(), planned.parameter_types(stmt.count));
                // What `prepare` would plan for its first execution.
                if stmt.count == 0 && !locks {
                    plan = Some(Box::new(planned));
                }
                shape
            }
            false => {
                // Placeholders are not values Quarry's own statements
                // take yet (they are bound before it runs): what they
                // answer is all that matters here.
                let converted = match parsed {
                    DfStatement::Statement(s) => sql::convert_statement(*s).ok(),
                    _ => None,
                };
                let dataset = match converted {
                    Some(Statement::ShowTables) => text_schema("name"),
                    Some(Statement::Describe(_)) => describe_schema(),
                    _ => Arc::new(Schema::empty()),
                };
                let types = match stmt.count {
                    0 => vec![],
                    n => self.sql.parameter_types(&stmt.sql, n).await,
                };
                (dataset, types)
            }
        };
        let fields: Vec<Field> = types
            .into_iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("${}", i + 1), t.unwrap_or(DataType::Utf8), true))
            .collect();
        Ok(StatementShape {
            dataset,
            parameters: Arc::new(Schema::new(fields)),
            plan,
        })
    }

    /// Plans a query, or runs a statement, in `txn` or on its own.
    async fn prepare(&self, parsed: Parsed, txn: Option<&Arc<OpenTxn>>) -> Result<Prepared> {
        let stmt = match parsed {
            Parsed::Query(mut query) => {
                // Outside a transaction there is nothing to hold a lock
                // for (as TiDB's autocommit FOR UPDATE).
                if let (Some(rows), Some(txn)) = (query.take_for_update()?, txn) {
                    let table = self.table(&rows.table).await?;
                    let points = match self.lock_returns_rows {
                        true => {
                            self.write_within_deadline(dml::lock_points(self, &table, &rows, txn))
                                .await?
                        }
                        false => None,
                    };
                    match points {
                        Some(locked) => {
                            // One request locked and read the rows.
                            if let Some(out) =
                                self.sql.run_over_rows(&query, &table, locked).await?
                            {
                                return Ok(Prepared::Done(out));
                            }
                        }
                        None => {
                            self.write_within_deadline(dml::lock(self, &table, &rows, txn))
                                .await?;
                        }
                    }
                }
                // Planning reads the catalog and statistics from meta:
                // within the statement's timeout too.
                let planned = match txn {
                    // Checked against its snapshot's catalog as it runs.
                    None => self.within_deadline(self.sql.plan_kept(query)).await?,
                    Some(_) => self.within_deadline(self.sql.plan(query)).await?,
                };
                return Ok(Prepared::Query(Box::new(planned)));
            }
            Parsed::Statement(stmt) => stmt,
        };
        let in_txn = txn.map(|t| t.as_ref());
        Ok(match stmt {
            Statement::CreateTable(ct) => Prepared::Done(self.create_table(ct).await?),
            Statement::DropTable { name, if_exists } => {
                let dropped = self.cluster.drop_table(&name, if_exists).await?;
                if dropped {
                    // A CREATE of the name comes after other compute
                    // processes' confirmations of it lapse
                    // (`catalog_cache.rs`).
                    tokio::time::sleep(crate::catalog_cache::DDL_SETTLE).await;
                }
                Prepared::Done(text_output(
                    "result",
                    vec![if dropped {
                        "DROP TABLE"
                    } else {
                        "DROP TABLE (did not exist)"
                    }
                    .into()],
                )?)
            }
            Statement::AlterTable { name, ops } => {
                Prepared::Done(self::alter::alter_table(self, &name, &ops).await?)
            }
            Statement::CreateView(v) => Prepared::Done(self.create_view(v).await?),
            Statement::DropView { name, if_exists } => {
                let dropped = self.cluster.drop_view(&name, if_exists).await?;
                if dropped {
                    // (As DROP TABLE.)
                    tokio::time::sleep(crate::catalog_cache::DDL_SETTLE).await;
                }
                Prepared::Done(text_output(
                    "result",
                    vec![if dropped {
                        "DROP VIEW"
                    } else {
                        "DROP VIEW (did not exist)"
                    }
                    .into()],
                )?)
            }
            Statement::CreateIndex(ci) => {
                let made = self::index_ddl::create_index(self, &ci).await?;
                Prepared::Done(text_output(
                    "result",
                    vec![if made {
                        "CREATE INDEX"
                    } else {
                        "CREATE INDEX (existed)"
                    }
                    .into()],
                )?)
            }
            Statement::DropIndex { name, if_exists } => {
                let dropped = self::index_ddl::drop_index(self, &name, if_exists).await?;
                Prepared::Done(text_output(
                    "result",
                    vec![if dropped {
                        "DROP INDEX"
                    } else {
                        "DROP INDEX (did not exist)"
                    }
                    .into()],
                )?)
            }
            Statement::Insert(ins) => {
                let table = self.table(&ins.table).await?;
                let n = self
                    .write_within_deadline(insert(self, &table, &ins, in_txn))
                    .await?;
                Prepared::Done(count_output(n)?)
            }
            Statement::Update(upd) => {
                let table = self.table(&upd.table).await?;
                let n = self
                    .write_within_deadline(dml::update(self, &table, &upd, in_txn))
                    .await?;
                Prepared::Done(count_output(n)?)
            }
            Statement::Delete(del) => {
                let table = self.table(&del.table).await?;
                let n = self
                    .write_within_deadline(dml::delete(self, &table, &del, in_txn))
                    .await?;
                Prepared::Done(count_output(n)?)
            }
            Statement::ShowTables => {
                let catalog = self.cluster.catalog().await?;
                let mut names: Vec<String> = catalog
                    .tables
                    .into_iter()
                    .map(|t| t.name)
                    .chain(catalog.views.into_iter().map(|v| v.name))
                    .collect();
                names.sort();
                Prepared::Done(text_output("name", names)?)
            }
            Statement::Describe(name) => Prepared::Done(self.describe(&name).await?),
            Statement::User(stmt) => Prepared::Done(self.user_statement(stmt).await?),
            Statement::Backup(stmt) => Prepared::Done(self::backup::run(self, stmt).await?),
            Statement::Setting(SettingStatement::ShowStatementTimeout) => {
                let t = sql::settings::show(self.settings.statement_timeout());
                Prepared::Done(text_output("statement_timeout", vec![t])?)
            }
            Statement::Setting(SettingStatement::SetStatementTimeout(t)) => {
                self.settings.set_statement_timeout(t)?;
                Prepared::Done(text_output("result", vec!["SET".into()])?)
            }
            Statement::Setting(SettingStatement::ShowMpp) => {
                let mode = self.sql.mpp_mode().as_str().to_string();
                Prepared::Done(text_output("mpp", vec![mode])?)
            }
            Statement::Setting(SettingStatement::SetMpp(mode)) => {
                self.settings.set_mpp(mode)?;
                Prepared::Done(text_output("result", vec!["SET".into()])?)
            }
            Statement::Begin => {
                return Err(plan_err!(
                    "BEGIN opens a transaction for a session, and this request has none: \
                     over Flight SQL, call BeginTransaction (ADBC: autocommit=False) and send \
                     its transaction id, or send BEGIN as a statement from a client that keeps \
                     cookies (the JDBC driver does); the quarry client and `quarry sql` run \
                     BEGIN themselves"
                ))
            }
            Statement::Commit | Statement::Rollback => {
                let word = match (txn, matches!(stmt, Statement::Commit)) {
                    (None, _) => "no transaction is open: every statement commits on its own",
                    (Some(t), true) => self.sessions.commit(t).await.map(|_| "COMMIT")?,
                    (Some(t), false) => self.sessions.rollback(t).await.map(|_| "ROLLBACK")?,
                };
                Prepared::Done(text_output("result", vec![word.into()])?)
            }
        })
    }
}

pub mod alter;
pub mod backup;
mod deadline;
pub mod dml;
pub mod index_ddl;
pub mod insert;
mod statements;
mod streaming;
pub mod values;

use streaming::{Streaming, READ_AHEAD};

#[cfg(test)]
mod parse_fuzz;
