//! SQL queries through Apache DataFusion, with the commutative part pushed
//! into the regions.
//!
//! ```text
//!  SQL ─▶ DataFusion: parse, bind, optimize (joins, subqueries, pruning)
//!           │ logical plan; each Quarry table is a QuarryTable (table.rs):
//!           │ filters it can evaluate pushed Exact, projection, limit
//!           ▼
//!        physical plan ─▶ Quarry's rules (rules.rs): Partial aggregation
//!           │              above a region scan moves into the scan
//!           ▼
//!        RegionScanExec (region_scan.rs): one DAG, every region, via the
//!        dispatcher ──▶ storage: scan → selection → partial agg / projection
//!           │
//!           ▼ Arrow batches (partial states or rows)
//!        DataFusion above the scans: Final aggregation, joins, sorts, …
//! ```
//!
//! This is GreptimeDB's split and TiDB's: the planner is a whole optimizer
//! (DataFusion's), and a rule hands storage what it can run near the data,
//! whose partial aggregation states DataFusion's Final stage merges.
//!
//! Compute keeps nothing an answer depends on: each statement gets a
//! [`SessionContext`] whose catalog is the meta region's table list (read
//! for the statement, or kept and checked against the query's snapshot:
//! `catalog_cache.rs`), built from a base
//! [`SessionState`](datafusion::execution::SessionState) made once per
//! process. A statement seen before against the same catalog takes its
//! optimized logical plan from the plan cache (`plan_cache.rs`) and goes
//! straight to physical planning, or, where a copy can run it, runs a
//! fresh copy of its kept physical plan (`fresh_run.rs`). A query whose
//! WHERE constants are all that differ from one seen before shares its
//! shape's plan (`literal_shape.rs`): its values reach the region scans
//! as they start (`late_filters.rs`).
//!
//! Decimal literals stay decimals (`0.06 - 0.01` is DECIMAL, DataFusion's
//! `parse_float_as_decimal`), and Quarry's own aggregate functions
//! (`aggregates.rs`) replace DataFusion's where their result types or
//! overflow rules differ.

pub mod aggregates;
pub mod checked_arithmetic;
pub mod decorrelate;
mod dynamic_filters;
mod filter_before_semi_join;
pub mod float_division;
pub mod fresh_run;
pub mod functions;
pub mod group_sieve;
pub mod join_keys;
pub mod join_order;
pub mod late_filters;
pub mod literal_shape;
pub mod local_time;
pub mod measured_share;
pub mod memory_release;
pub mod mpp;
pub mod output_names;
pub mod partition_hull;
pub mod pg_catalog;
pub mod pg_functions;
pub mod pg_keys;
pub mod plan_cache;
pub mod point_get;
pub mod preplanned;
pub mod pushdown;
pub mod region_scan;
pub mod rules;
pub mod selectivity;
pub mod shared_scan;
pub mod shared_subplan;
pub mod start_early;
pub mod stats;
pub mod table;
pub mod views;

pub(crate) mod errors;
mod planning;
mod running;

pub use errors::from_df;
pub use running::{conform, region_dags};
use running::{plain_types, with_moment};

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    MemorySchemaProvider, SchemaProvider,
};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use quarry_coprocessor::codec::key::ROWID_COLUMN_ID;
use quarry_proto::meta::TableDef;

use self::plan_cache::{Catalog, PlanCache, Plans};
use self::region_scan::ScanContext;
use self::table::QuarryTable;
use crate::cluster::Cluster;
use crate::output::QueryOutput;
use crate::Result;

/// A statement DataFusion plans (a query, or EXPLAIN of one), parsed once.
#[derive(Clone)]
pub struct ParsedQuery(DfStatement);

/// True if the statement reads (a query, or EXPLAIN of one): those go to
/// DataFusion ([`ParsedQuery`]). DDL, INSERT, SHOW and DESCRIBE keep
/// Quarry's own path.
pub fn is_query(stmt: &DfStatement) -> bool {
    match stmt {
        DfStatement::Statement(s) => matches!(
            s.as_ref(),
            SqlStatement::Query(_) | SqlStatement::Explain { .. }
        ),
        DfStatement::Explain(_) => true,
        _ => false,
    }
}

impl From<DfStatement> for ParsedQuery {
    /// (For a statement [`is_query`] accepts.)
    fn from(stmt: DfStatement) -> Self {
        ParsedQuery(stmt)
    }
}

impl ParsedQuery {
    /// Takes a `FOR UPDATE` clause off the query (DataFusion plans the
    /// rest as it would without it) and returns the rows it locks.
    pub fn take_for_update(&mut self) -> Result<Option<crate::sql::Delete>> {
        use datafusion::sql::sqlparser::ast::LockType;
        let DfStatement::Statement(s) = &mut self.0 else {
            return Ok(None);
        };
        let SqlStatement::Query(q) = s.as_mut() else {
            return Ok(None);
        };
        if q.locks.is_empty() {
            return Ok(None);
        }
        let locks = std::mem::take(&mut q.locks);
        if locks
            .iter()
            .any(|l| l.lock_type != LockType::Update || l.nonblock.is_some() || l.of.is_some())
        {
            return Err(crate::plan_err!(
                "unsupported: only a plain FOR UPDATE locks rows (not FOR SHARE, OF, NOWAIT \
                 or SKIP LOCKED)"
            ));
        }
        crate::sql::for_update_target(q).map(Some)
    }
}

/// Stops a spawned request (a timestamp's) when what waits for it is
/// dropped first.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A query planned by DataFusion, ready to run.
pub struct PlannedQuery {
    plan: LogicalPlan,
    /// The statement as planned (for the slow-query log, and the plan
    /// cache's key).
    sql: String,
    /// How the plan cache took part (`plan_cache.rs`), and the context
    /// the rest of the planning runs in.
    cached: Cached,
    /// The answer's schema where it is not the plan's: repeated output
    /// names, restored (`output_names.rs`).
    renamed: Option<arrow::datatypes::SchemaRef>,
    /// Planned over a kept catalog: what to check it by when the query's
    /// timestamp comes, and to plan again from (`catalog_cache.rs`).
    check: Option<CatalogCheck>,
    /// The values of a query shape's placeholders (`literal_shape.rs`),
    /// which its region scans read when they start.
    params: Option<Arc<Vec<datafusion::common::ScalarValue>>>,
}

/// How a query planned over a kept catalog is checked.
struct CatalogCheck {
    /// The version of the catalog it was planned over.
    version: u64,
    /// The query, to plan again over a fresh catalog.
    query: ParsedQuery,
}

/// A planned query and the plan cache.
enum Cached {
    /// Its physical plan came from the cache: a copy runs, with no
    /// catalog or context ([`SqlSession::task_over`]).
    Physical(Arc<dyn ExecutionPlan>),
    /// Its physical plan was made now, and never ran (a query shape's
    /// first, `literal_shape.rs`): it runs as it is, like a kept one,
    /// without a context.
    Planned(Arc<dyn ExecutionPlan>),
    /// Its optimized plan came from the cache; physical planning runs in
    /// the context.
    Optimized(SessionContext, Arc<Plans>),
    /// Its optimized plan came from the cache, and it runs over several
    /// compute processes: physical planning runs in `mode`'s distributed
    /// state, without a catalog (`plan_cache.rs`, "Spread queries").
    Spread(Arc<Mpp>, crate::config::MppMode, Arc<Plans>),
    /// Planned now, against this catalog: its optimized plan is offered
    /// to the cache.
    Keep(SessionContext, Catalog),
    /// Not for the cache (`plan_cache::cacheable`).
    No(SessionContext),
}

impl PlannedQuery {
    /// The statement to plan again when this query runs over several
    /// compute processes (None: it runs in this one).
    pub fn mpp_retry(&self) -> Option<ParsedQuery> {
        let distributed = match &self.cached {
            Cached::No(ctx) | Cached::Keep(ctx, _) => {
                crate::df::mpp::is_distributed(ctx.state_ref().read().config().options())
            }
            Cached::Spread(..) => true,
            _ => return None,
        };
        distributed
            .then(|| self.check.as_ref().map(|c| c.query.clone()))
            .flatten()
    }

    /// The answer's schema, as announced to the client before the query
    /// runs; every batch is relabelled to it ([`conform`]).
    pub fn schema(&self) -> arrow::datatypes::SchemaRef {
        plain_types(match &self.renamed {
            Some(s) => s.clone(),
            None => Arc::new(self.plan.schema().as_arrow().clone()),
        })
    }

    /// Gives the answer's columns the names `names` says
    /// (`output_names.rs`).
    fn rename(&mut self, names: &[output_names::Restore]) {
        use output_names::Restore;
        let schema = self.plan.schema().as_arrow().clone();
        let fields: Vec<arrow::datatypes::FieldRef> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = match names.get(i) {
                    Some(Restore::Name(n)) => n.clone(),
                    Some(Restore::FromPlan) => {
                        named_in_plan(&self.plan, i).unwrap_or_else(|| f.name().clone())
                    }
                    _ => return f.clone(),
                };
                Arc::new(f.as_ref().clone().with_name(name))
            })
            .collect();
        self.renamed = Some(Arc::new(arrow::datatypes::Schema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        )));
    }

    /// The types DataFusion inferred for the placeholders `$1` …
    /// `$count` (None where the query does not tell).
    pub fn parameter_types(&self, count: usize) -> Vec<Option<DataType>> {
        parameter_types(&self.plan, count)
    }
}

fn parameter_types(plan: &LogicalPlan, count: usize) -> Vec<Option<DataType>> {
    let types = plan.get_parameter_types().unwrap_or_default();
    (1..=count)
        .map(|n| types.get(&format!("${n}")).cloned().flatten())
        .collect()
}

/// The name DataFusion gives the expression under the private alias of
/// the outermost SELECT list's `i`th item: a column's own name, or the
/// expression's.
fn named_in_plan(plan: &LogicalPlan, i: usize) -> Option<String> {
    let private = output_names::private_alias(i);
    let mut found = None;
    let _ = plan.apply(|node| {
        if let LogicalPlan::Projection(p) = node {
            for e in &p.expr {
                if let datafusion::logical_expr::Expr::Alias(a) = e {
                    if a.name == private {
                        found = Some(match a.expr.as_ref() {
                            datafusion::logical_expr::Expr::Column(c) => c.name.clone(),
                            other => other.schema_name().to_string(),
                        });
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Plans and runs SQL queries over the cluster's tables.
pub struct SqlSession {
    base: datafusion::execution::SessionState,
    scan: ScanContext,
    cluster: Arc<Cluster>,
    /// Each query's snapshot timestamp.
    txns: Arc<crate::txn::Txns>,
    /// Table and column statistics for join planning (`stats.rs`).
    stats: Arc<stats::TableStats>,
    /// Whether statements start analyses of the tables they read (off in
    /// the short-lived engines of loads, backups and restores).
    analyze: bool,
    /// Optimized plans of statements seen before (`plan_cache.rs`).
    plans: PlanCache,
    /// Each query's memory pool, in bytes (0: unbounded): hash tables,
    /// sorts and aggregation state past it spill where they can and fail
    /// with RESOURCE_EXHAUSTED where they cannot, instead of the process
    /// growing until the kernel kills it.
    memory_limit: usize,
    /// PostgreSQL's catalog, beside `public` in every context
    /// (`pg_catalog.rs`).
    pg_catalog: Arc<pg_catalog::PgCatalogSchema>,
    /// Distributed plans over every compute process, when this process
    /// serves MPP tasks (`mpp/`).
    mpp: Option<Arc<Mpp>>,
}

/// The MPP mode the session being served SET, if any.
pub type SessionMode = Arc<dyn Fn() -> Option<crate::config::MppMode> + Send + Sync>;

/// What planning a distributed query needs (`mpp/`).
pub struct Mpp {
    /// This process's worker service (tasks routed here run in process).
    worker: datafusion_distributed::Worker,
    /// The runtimes (memory pools) of distributed queries here: a
    /// coordinated query's own is its local tasks' too.
    runtimes: Arc<crate::df::mpp::runtimes::QueryRuntimes>,
    /// The live compute processes.
    pub workers: Arc<crate::df::mpp::workers::Workers>,
    /// `compute.mpp`: the mode of a session that did not SET one.
    pub default_mode: crate::config::MppMode,
    /// The mode a Flight SQL session SET, if any (the session layer's).
    pub session_mode: SessionMode,
    /// The base state with the distributed planner, per mode.
    auto: datafusion::execution::SessionState,
    force: datafusion::execution::SessionState,
}

impl Mpp {
    /// The base state that plans `mode`'s distributed queries (None for
    /// `off`).
    pub(crate) fn state(
        &self,
        mode: crate::config::MppMode,
    ) -> Option<&datafusion::execution::SessionState> {
        match mode {
            crate::config::MppMode::Auto => Some(&self.auto),
            crate::config::MppMode::Force => Some(&self.force),
            crate::config::MppMode::Off => None,
        }
    }
}

/// The name UPDATE and DELETE give a row's handle in a table without a
/// primary key ([`SqlSession::plan_with_rowid`]).
pub const ROWID: &str = "_rowid";

/// The column a scan reads a row's handle as, named `name`: BIGINT NOT
/// NULL, from the row keys and the packs' handles (`ROWID_COLUMN_ID`).
pub fn rowid_column(name: &str) -> quarry_proto::meta::ColumnDef {
    use quarry_proto::meta::{ColumnDef, FieldType, TypeKind};
    ColumnDef {
        id: ROWID_COLUMN_ID,
        name: name.into(),
        field_type: Some(FieldType {
            kind: TypeKind::Bigint as i32,
            nullable: false,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A query's snapshot, in its session config: every region scan of the
/// query reads at `read_ts` (`region_scan.rs`), so a join or a subquery
/// sees the same data in every table and region.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub read_ts: u64,
    /// `read_ts` is no transaction's start_ts (an autocommit query's own
    /// timestamp), so its reads meet no lock as their own rows and the
    /// same read gives the same answer whenever it runs: a store may keep
    /// it for the same request again (`DagRequest.repeatable`). False for
    /// a transaction's statements, which read their own locks.
    pub repeatable: bool,
}

/// When the query must be done: its statement's deadline
/// (`session_settings.rs`), set in the query's session config like
/// [`Snapshot`]; its region requests carry what is left of it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub std::time::Instant);

/// The most build-side keys of a hash join (per join partition) that reach
/// the probe side's regions as an IN list, by default (`join-key-list-max`);
/// past it they go as a Bloom filter (`join_keys.rs`).
pub const MAX_JOIN_KEYS_PUSHED: usize = crate::config::DEFAULT_JOIN_KEY_LIST_MAX;

/// How hash joins hand their build keys to region scans (see
/// [`SqlSession::new`]): IN lists up to `list_max` keys, no top-k or
/// aggregation filters.
pub fn join_filter_options(opts: &mut datafusion::config::ConfigOptions, list_max: usize) {
    opts.optimizer.enable_join_dynamic_filter_pushdown = true;
    opts.optimizer.hash_join_inlist_pushdown_max_distinct_values = list_max;
    opts.optimizer.hash_join_inlist_pushdown_max_size = list_max * 16;
    opts.optimizer.enable_topk_dynamic_filter_pushdown = false;
    opts.optimizer.enable_aggregate_dynamic_filter_pushdown = false;
}

impl SqlSession {
    pub fn new(
        scan: ScanContext,
        cluster: Arc<Cluster>,
        txns: Arc<crate::txn::Txns>,
        target_partitions: usize,
    ) -> Result<Self> {
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_target_partitions(target_partitions.max(1))
            .with_default_catalog_and_schema("quarry", "public");
        let opts = config.options_mut();
        opts.sql_parser.parse_float_as_decimal = true;
        // TIMESTAMPTZ (and now()) carry a zone, UTC, as PostgreSQL's do;
        // without one DataFusion reads TIMESTAMPTZ as a plain TIMESTAMP.
        opts.execution.time_zone = Some("+00:00".into());
        // Hash joins hand their build side's keys to the probe side's
        // region scans (region_scan.rs), as an IN list up to this many
        // distinct keys (storage probes long lists through a hash set),
        // else as bounds. Sixteen thousand keys (Q9's green parts) cost
        // each region about 100 kB of request and a hash set; far longer
        // lists (all of `part`, 145 k order keys) cost the build side,
        // the requests and the regions more than the rows they keep from
        // travelling at SF 1 (measured: docs/performance.md). Top-k and aggregation filters stay off: they are
        // complete only once the scan under them has finished, and a
        // region scan waits for its filters before it starts.
        join_filter_options(opts, scan.join_key_list_max);
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        aggregates::register(&mut state);
        functions::register(&mut state);
        state.add_analyzer_rule(Arc::new(float_division::FloatDivisionByZero));
        state.add_analyzer_rule(Arc::new(local_time::LocalTimeCasts));
        state.add_analyzer_rule(Arc::new(checked_arithmetic::CheckedConstants));
        decorrelate::install(&mut state);
        join_order::install(&mut state);
        filter_before_semi_join::install(&mut state);
        let state = rules::install(state);
        let state = shared_subplan::install(state);
        let (state, pg_catalog) = pg_catalog::install(state, cluster.clone())?;
        Ok(SqlSession {
            base: state,
            scan,
            cluster,
            txns,
            stats: Arc::default(),
            analyze: true,
            plans: PlanCache::new(plan_cache::DEFAULT_ENTRIES),
            memory_limit: 0,
            pg_catalog,
            mpp: None,
        })
    }

    /// Plans autocommit queries over every compute process in `workers`
    /// when the session's `mpp` setting (else `default_mode`) says so.
    pub fn with_mpp(
        mut self,
        workers: Arc<crate::df::mpp::workers::Workers>,
        default_mode: crate::config::MppMode,
        session_mode: SessionMode,
    ) -> Self {
        use crate::df::mpp::{distributed_state, MppMode};
        let channels = crate::df::mpp::Channels::default();
        let runtimes = crate::df::mpp::runtimes::QueryRuntimes::new(self.memory_limit);
        let worker = crate::df::mpp::worker(&self.base, &self.scan, &channels, runtimes.clone());
        let state = |mode| {
            distributed_state(
                &self.base,
                &self.scan,
                workers.clone(),
                &worker,
                &channels,
                mode,
            )
        };
        let (auto, force) = (state(MppMode::Auto), state(MppMode::Force));
        self.mpp = Some(Arc::new(Mpp {
            worker,
            runtimes,
            workers,
            default_mode,
            session_mode,
            auto,
            force,
        }));
        self
    }

    /// The worker service of this process: it runs other compute
    /// processes' stages with this session's functions and codec.
    pub fn worker(&self) -> Option<datafusion_distributed::Worker> {
        self.mpp.as_ref().map(|m| m.worker.clone())
    }

    /// The MPP mode of the statement being served: its session's `SET
    /// mpp` (a PostgreSQL connection's or a Flight SQL session's), else
    /// `compute.mpp`; `off` where this process serves no MPP.
    pub fn mpp_mode(&self) -> crate::config::MppMode {
        use crate::config::MppMode;
        let Some(mpp) = &self.mpp else {
            return MppMode::Off;
        };
        if let Some(settings) = crate::caller::session_settings() {
            if let Some(m) = settings.get("mpp").and_then(|v| MppMode::parse(v).ok()) {
                return m;
            }
        }
        (mpp.session_mode)().unwrap_or(mpp.default_mode)
    }

    /// The live compute processes, as this process last heard (None:
    /// it serves no MPP).
    pub fn workers(&self) -> Option<&Arc<crate::df::mpp::workers::Workers>> {
        self.mpp.as_ref().map(|m| &m.workers)
    }

    /// Keeps the optimized plans of up to `entries` statements (0: none).
    pub fn with_plan_cache(mut self, entries: usize) -> Self {
        self.plans = PlanCache::new(entries);
        self
    }

    /// Plans without table statistics and never starts an analysis: for
    /// an engine that lives for one load, backup or restore, whose
    /// statements are scans and aggregates with no join to order, and
    /// whose analyses would read every column again only to be dropped
    /// with it.
    pub fn without_analysis(mut self) -> Self {
        self.analyze = false;
        self
    }

    /// Gives each query a memory pool of `bytes` (0: unbounded).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// A context whose catalog is `tables`.
    fn context_over(&self, tables: Vec<TableDef>) -> Result<SessionContext> {
        let tables = self.with_stats(tables);
        self.context_of(tables)
    }

    /// Each of `tables` with its last statistics, if any.
    fn with_stats(
        &self,
        tables: Vec<TableDef>,
    ) -> Vec<(TableDef, Option<Arc<stats::TableStatistics>>)> {
        tables
            .into_iter()
            .map(|def| {
                // (Statistics describe the table's own columns.)
                let with_rowid = def.columns.iter().any(|c| c.id == ROWID_COLUMN_ID);
                let stats = match with_rowid || !self.analyze {
                    false => self.stats.get(&def, &self.scan),
                    true => None,
                };
                (def, stats)
            })
            .collect()
    }

    /// What the plan cache checks its entries against: the tables and
    /// the identity of their statistics.
    fn catalog_of(tables: &[(TableDef, Option<Arc<stats::TableStatistics>>)]) -> Catalog {
        let mut catalog = Catalog::default();
        for (def, stats) in tables {
            catalog.add(def, stats.as_ref().map(|s| Arc::as_ptr(s) as usize));
        }
        catalog
    }

    /// A context whose catalog is `tables`, with their statistics.
    fn context_of(
        &self,
        tables: Vec<(TableDef, Option<Arc<stats::TableStatistics>>)>,
    ) -> Result<SessionContext> {
        self.context_in_mode(tables, crate::config::MppMode::Off)
    }

    /// [`Self::context_of`], planning distributed queries under `mode`.
    fn context_in_mode(
        &self,
        tables: Vec<(TableDef, Option<Arc<stats::TableStatistics>>)>,
        mode: crate::config::MppMode,
    ) -> Result<SessionContext> {
        let schema = Arc::new(MemorySchemaProvider::new());
        for (def, stats) in tables {
            let name = def.name.clone();
            let table =
                QuarryTable::new(def, self.scan.clone(), stats)?.with_measurer(self.stats.clone());
            schema
                .register_table(name, Arc::new(table))
                .map_err(from_df)?;
        }
        let base = match &self.mpp {
            Some(m) => m.state(mode).unwrap_or(&self.base),
            None => &self.base,
        };
        self.context_in(schema, base)
    }

    /// `query` answered from `rows`, rows of `table` already in hand (a
    /// FOR UPDATE's lock returned them), without reading the regions; None
    /// if the query reads anything else.
    pub async fn run_over_rows(
        &self,
        query: &ParsedQuery,
        table: &TableDef,
        rows: RecordBatch,
    ) -> Result<Option<QueryOutput>> {
        let schema = Arc::new(MemorySchemaProvider::new());
        let mem = MemTable::try_new(rows.schema(), vec![vec![rows]]).map_err(from_df)?;
        schema
            .register_table(table.name.clone(), Arc::new(mem))
            .map_err(from_df)?;
        let ctx = self.context_with(schema)?;
        let Ok(plan) = ctx.state().statement_to_plan(query.0.clone()).await else {
            return Ok(None);
        };
        // The table read once: a subquery or CTE over it wants all of it.
        let mut scans = 0;
        let _ = plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(_) = node {
                scans += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if scans != 1 {
            return Ok(None);
        }
        let out_schema = Arc::new(plan.schema().as_arrow().clone());
        let df = ctx.execute_logical_plan(plan).await.map_err(from_df)?;
        let batches = df.collect().await.map_err(from_df)?;
        let schema = batches.first().map_or(out_schema, |b| b.schema());
        Ok(Some(QueryOutput { schema, batches }))
    }

    /// A context whose one schema, `quarry.public`, is `schema`.
    fn context_with(&self, schema: Arc<MemorySchemaProvider>) -> Result<SessionContext> {
        self.context_in(schema, &self.base)
    }

    /// [`Self::context_with`], from the session state `base`.
    fn context_in(
        &self,
        schema: Arc<MemorySchemaProvider>,
        base: &datafusion::execution::SessionState,
    ) -> Result<SessionContext> {
        let catalog = Arc::new(MemoryCatalogProvider::new());
        catalog.register_schema("public", schema).map_err(from_df)?;
        catalog
            .register_schema("pg_catalog", self.pg_catalog.clone())
            .map_err(from_df)?;
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        catalogs.register_catalog("quarry".into(), catalog);
        let mut state =
            SessionStateBuilder::new_from_existing(base.clone()).with_catalog_list(catalogs);
        if let Some(runtime) = self.query_runtime()? {
            state = state.with_runtime_env(runtime);
        }
        // TIMESTAMPTZ is in the session's TimeZone (a PostgreSQL
        // connection's), UTC elsewhere.
        if let Some(zone) = session_time_zone() {
            state
                .config()
                .get_or_insert_with(Default::default)
                .options_mut()
                .execution
                .time_zone = Some(zone);
        }
        let ctx = SessionContext::new_with_state(state.build());
        // current_setting() answers the session's own settings, where its
        // front end keeps them (a PostgreSQL connection's SETs).
        if let Some(settings) = crate::caller::session_settings() {
            ctx.register_udf(pg_functions::current_setting_in(settings));
        }
        Ok(ctx)
    }

    /// A query's own runtime ([`runtime_with_limit`]).
    fn query_runtime(&self) -> Result<Option<Arc<datafusion::execution::runtime_env::RuntimeEnv>>> {
        runtime_with_limit(self.memory_limit).map_err(from_df)
    }

    /// `task` with the query's snapshot (and deadline) in its config,
    /// where its region scans read them as they start, and for a
    /// distributed `plan` what its tasks need besides.
    fn at_snapshot(
        &self,
        task: Arc<datafusion::execution::TaskContext>,
        snapshot: Snapshot,
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<datafusion::execution::TaskContext>> {
        let mut config = task.session_config().clone();
        with_moment(&mut config, snapshot);
        let deadline = config.get_extension::<Deadline>().map(|d| d.0);
        let config_zone = config.options().execution.time_zone.clone();
        let mut query_id = None;
        if let Some(o) = config
            .options_mut()
            .extensions
            .get_mut::<crate::df::mpp::MppOptions>()
        {
            o.read_ts = snapshot.read_ts;
            o.repeatable = snapshot.repeatable;
            if let Some(zone) = &config_zone {
                o.time_zone = zone.clone();
            }
            let at = deadline.unwrap_or_else(|| std::time::Instant::now() + self.scan.timeout);
            o.deadline_unix_ms = crate::df::mpp::MppOptions::deadline_of(at);
            if let Some(mpp) = &self.mpp {
                o.query_id = crate::df::mpp::runtimes::new_query_id(mpp.workers.own_url().as_str());
                query_id = Some(o.query_id.clone());
            }
            // The functions its tasks' sessions need (`mpp/functions.rs`).
            let called = crate::df::mpp::functions::called(plan);
            crate::df::mpp::functions::Called::set(called.as_ref(), o);
            // Where its tasks run, for EXPLAIN ANALYZE (`mpp/routes.rs`).
            config.set_extension(Arc::new(crate::df::mpp::routes::TaskRoutes::default()));
        }
        let task = match Arc::try_unwrap(task) {
            Ok(task) => Arc::new(task.with_session_config(config)),
            Err(_) => self.task_over(config)?,
        };
        // A distributed query's tasks in this process share its memory
        // pool (`mpp/runtimes.rs`).
        if let (Some(id), Some(mpp)) = (query_id, &self.mpp) {
            mpp.runtimes.register(&id, &task.runtime_env());
        }
        Ok(task)
    }

    /// The task context a copy of a kept physical plan runs in: the base
    /// session's functions and options with `extensions` (the query's
    /// snapshot and deadline), and the query's runtime. No catalog: the
    /// plan's scans already hold their tables. (Building a catalog and a
    /// session state for each statement was about a seventh of compute's
    /// CPU for Q6: docs/performance.md.)
    fn task_over(&self, config: SessionConfig) -> Result<Arc<datafusion::execution::TaskContext>> {
        let base = &self.base;
        let runtime = match self.query_runtime()? {
            Some(runtime) => runtime,
            None => base.runtime_env().clone(),
        };
        Ok(Arc::new(datafusion::execution::TaskContext::new(
            None,
            base.session_id().to_string(),
            config,
            base.scalar_functions().clone(),
            base.higher_order_functions().clone(),
            base.aggregate_functions().clone(),
            base.window_functions().clone(),
            runtime,
        )))
    }
}

/// The request's session's time zone where it is not UTC (a PostgreSQL
/// connection that SET TimeZone; `pg_functions::session_zone`): its
/// statements plan TIMESTAMPTZ in it, and are not offered to the plan
/// cache, whose plans are UTC's.
pub(crate) fn session_time_zone() -> Option<String> {
    let settings = crate::caller::session_settings()?;
    pg_functions::session_zone(settings.get("timezone")?)
        .ok()
        .flatten()
}

/// A runtime with a memory pool of its own, of `memory_limit` bytes (None
/// where queries have no limit, 0): one query's (`SqlSession`), shared on
/// each process with the query's MPP tasks there (`mpp/runtimes.rs`). One
/// past its limit fails alone. A big query's end hands its memory back to
/// the kernel (`memory_release.rs`).
pub(crate) fn runtime_with_limit(
    memory_limit: usize,
) -> datafusion::common::Result<Option<Arc<datafusion::execution::runtime_env::RuntimeEnv>>> {
    if memory_limit == 0 {
        return Ok(None);
    }
    // The pool DataFusion's `with_memory_limit` makes, inside one that
    // releases the query's memory when it ends (`memory_release.rs`).
    let mut builder = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(memory_limit, 1.0);
    if let Some(pool) = builder.memory_pool.take() {
        builder = builder.with_memory_pool(Arc::new(memory_release::ReleasingPool::new(pool)));
    }
    builder.build_arc().map(Some)
}

/// Puts `rule` among `state`'s logical optimizer rules right after the
/// one named `after` (last if there is none by that name).
pub(crate) fn add_optimizer_rule_after(
    state: &mut datafusion::execution::SessionState,
    after: &str,
    rule: Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>,
) {
    let mut rules = state.optimizers().to_vec();
    let at = rules
        .iter()
        .position(|r| r.name() == after)
        .map_or(rules.len(), |i| i + 1);
    rules.insert(at, rule);
    let _ = std::mem::replace(
        state,
        SessionStateBuilder::new_from_existing(state.clone())
            .with_optimizer_rules(rules)
            .build(),
    );
}
