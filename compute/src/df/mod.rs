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
//! straight to physical planning, or, for a plan without joins, runs a
//! fresh copy of its kept physical plan. A query whose WHERE constants
//! are all that differ from one seen before shares its shape's plan
//! (`literal_shape.rs`): its values reach the region scans as they start
//! (`late_filters.rs`).
//!
//! Decimal literals stay decimals (`0.06 - 0.01` is DECIMAL, DataFusion's
//! `parse_float_as_decimal`), and Quarry's own aggregate functions
//! (`aggregates.rs`) replace DataFusion's where their result types or
//! overflow rules differ.

pub mod aggregates;
pub mod decorrelate;
pub mod float_division;
pub mod functions;
pub mod join_keys;
pub mod late_filters;
pub mod literal_shape;
pub mod output_names;
pub mod plan_cache;
pub mod point_get;
pub mod pushdown;
pub mod region_scan;
pub mod rules;
pub mod selectivity;
pub mod shared_scan;
pub mod stats;
pub mod table;
pub mod views;

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    MemorySchemaProvider, SchemaProvider,
};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DataFusionError;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use futures::{StreamExt, TryStreamExt};
use quarry_coprocessor::codec::key::ROWID_COLUMN_ID;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::{ColumnDef, FieldType, TableDef, TypeKind, ViewDef};

use self::plan_cache::{Catalog, PlanCache, Plans};
use self::region_scan::{RegionScanExec, ScanContext};
use self::table::QuarryTable;
use crate::cluster::Cluster;
use crate::engine::{QueryOutput, QueryStream};
use crate::{Error, Result};

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
    /// Planned now, against this catalog: its optimized plan is offered
    /// to the cache.
    Keep(SessionContext, Catalog),
    /// Not for the cache (`plan_cache::cacheable`).
    No(SessionContext),
}

impl PlannedQuery {
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
    /// Optimized plans of statements seen before (`plan_cache.rs`).
    plans: PlanCache,
    /// Each query's memory pool, in bytes (0: unbounded): hash tables,
    /// sorts and aggregation state past it spill where they can and fail
    /// with RESOURCE_EXHAUSTED where they cannot, instead of the process
    /// growing until the kernel kills it.
    memory_limit: usize,
}

/// The name UPDATE and DELETE give a row's handle in a table without a
/// primary key ([`SqlSession::plan_with_rowid`]).
pub const ROWID: &str = "_rowid";

/// A query's snapshot, in its session config: every region scan of the
/// query reads at `read_ts` (`region_scan.rs`), so a join or a subquery
/// sees the same data in every table and region.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub read_ts: u64,
}

/// When the query must be done: its statement's deadline
/// (`session_settings.rs`), set in the query's session config like
/// [`Snapshot`]; its region requests carry what is left of it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub std::time::Instant);

/// The most build-side keys of a hash join (per join partition) that reach
/// the probe side's regions as an IN list, by default (`join-key-list-max`);
/// past it they go as a Bloom filter (`join_keys.rs`).
pub const MAX_JOIN_KEYS_PUSHED: usize = 1 << 14;

impl SqlSession {
    pub fn new(
        scan: ScanContext,
        cluster: Arc<Cluster>,
        txns: Arc<crate::txn::Txns>,
        target_partitions: usize,
    ) -> Self {
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_target_partitions(target_partitions.max(1))
            .with_default_catalog_and_schema("quarry", "public");
        let opts = config.options_mut();
        opts.sql_parser.parse_float_as_decimal = true;
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
        let list_max = scan.join_key_list_max;
        opts.optimizer.hash_join_inlist_pushdown_max_distinct_values = list_max;
        opts.optimizer.hash_join_inlist_pushdown_max_size = list_max * 16;
        opts.optimizer.enable_topk_dynamic_filter_pushdown = false;
        opts.optimizer.enable_aggregate_dynamic_filter_pushdown = false;
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        aggregates::register(&mut state);
        functions::register(&mut state);
        state.add_analyzer_rule(Arc::new(float_division::FloatDivisionByZero));
        decorrelate::install(&mut state);
        let state = rules::install(state);
        SqlSession {
            base: state,
            scan,
            cluster,
            txns,
            stats: Arc::default(),
            plans: PlanCache::new(plan_cache::DEFAULT_ENTRIES),
            memory_limit: 0,
        }
    }

    /// Keeps the optimized plans of up to `entries` statements (0: none).
    pub fn with_plan_cache(mut self, entries: usize) -> Self {
        self.plans = PlanCache::new(entries);
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
                let stats = match with_rowid {
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
        let schema = Arc::new(MemorySchemaProvider::new());
        for (def, stats) in tables {
            let name = def.name.clone();
            let table = QuarryTable::new(def, self.scan.clone(), stats)?;
            schema
                .register_table(name, Arc::new(table))
                .map_err(from_df)?;
        }
        self.context_with(schema)
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
        let catalog = Arc::new(MemoryCatalogProvider::new());
        catalog.register_schema("public", schema).map_err(from_df)?;
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        catalogs.register_catalog("quarry".into(), catalog);
        let mut state =
            SessionStateBuilder::new_from_existing(self.base.clone()).with_catalog_list(catalogs);
        if let Some(runtime) = self.query_runtime()? {
            state = state.with_runtime_env(runtime);
        }
        Ok(SessionContext::new_with_state(state.build()))
    }

    /// A query's own runtime, with a memory pool of its own, when queries
    /// have a memory limit: one query past its limit fails alone.
    fn query_runtime(&self) -> Result<Option<Arc<datafusion::execution::runtime_env::RuntimeEnv>>> {
        if self.memory_limit == 0 {
            return Ok(None);
        }
        datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(self.memory_limit, 1.0)
            .build_arc()
            .map(Some)
            .map_err(from_df)
    }

    /// `task` with the query's snapshot (and deadline) in its config,
    /// where its region scans read them as they start.
    fn at_snapshot(
        &self,
        task: Arc<datafusion::execution::TaskContext>,
        read_ts: u64,
    ) -> Result<Arc<datafusion::execution::TaskContext>> {
        let mut config = task.session_config().clone();
        with_moment(&mut config, read_ts);
        match Arc::try_unwrap(task) {
            Ok(task) => Ok(Arc::new(task.with_session_config(config))),
            Err(_) => self.task_over(config),
        }
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

    /// Plans `query` against the cluster's tables now (one meta call).
    pub async fn plan(&self, query: ParsedQuery) -> Result<PlannedQuery> {
        let catalog = self.cluster.catalog().await?;
        self.plan_in(query, catalog.tables, &catalog.views).await
    }

    /// Plans an autocommit query over the catalog this process keeps,
    /// without a meta call; [`SqlSession::stream_fresh`] checks it
    /// against the catalog of the query's snapshot (`catalog_cache.rs`).
    /// A query that fails to plan over a kept catalog is planned again
    /// over a fresh one before the error is believed.
    ///
    /// A kept catalog not confirmed within `CONFIRMED_FOR` is checked
    /// while the query is planned, by the catalog version of a timestamp
    /// asked for as planning starts: a query sent after a DDL on another
    /// compute process returned announces the columns of the new
    /// definitions, not of the kept ones.
    pub async fn plan_kept(&self, query: ParsedQuery) -> Result<PlannedQuery> {
        use crate::catalog_cache::Freshness;
        let (catalog, freshness) = self.cluster.kept_catalog().await?;
        let check = |mut planned: PlannedQuery, version: u64| {
            planned.check = Some(CatalogCheck {
                version,
                query: query.clone(),
            });
            planned
        };
        let plan_kept = || self.plan_in(query.clone(), catalog.tables.clone(), &catalog.views);
        let kept = match freshness {
            // Just read: its errors are the query's.
            Freshness::Read => return Ok(check(plan_kept().await?, catalog.catalog_version)),
            Freshness::Confirmed => plan_kept().await.ok(),
            Freshness::Unconfirmed => {
                let txns = self.txns.clone();
                let asked = std::time::Instant::now();
                let stamp = tokio::spawn(async move { txns.stamp().await });
                let _abort = AbortOnDrop(stamp.abort_handle());
                tokio::task::yield_now().await; // (see `stream_fresh`)
                let planned = plan_kept().await;
                let now = stamp
                    .await
                    .map_err(|e| Error::Internal(format!("taking a timestamp: {e}")))??
                    .catalog_version;
                match planned {
                    Ok(planned) if now == catalog.catalog_version => {
                        self.cluster.confirm_catalog(now, asked);
                        Some(planned)
                    }
                    _ => None,
                }
            }
        };
        if let Some(planned) = kept {
            return Ok(check(planned, catalog.catalog_version));
        }
        // Out of date, or an error that may be the kept catalog's.
        let catalog = self.cluster.catalog().await?;
        let planned = self
            .plan_in(query.clone(), catalog.tables, &catalog.views)
            .await?;
        Ok(check(planned, catalog.catalog_version))
    }

    /// Plans `query` over `tables` and `views`.
    async fn plan_in(
        &self,
        query: ParsedQuery,
        tables: Vec<TableDef>,
        views: &[ViewDef],
    ) -> Result<PlannedQuery> {
        match self
            .plan_over(query.clone(), tables.clone(), views, true)
            .await
        {
            // Repeated output names: planned with unique ones, answered
            // with the repeats (`output_names.rs`).
            Err(e) if output_names::is_duplicate_name_error(&e) => {
                let mut query = query;
                let Some(names) = output_names::dedupe(&mut query.0) else {
                    return self.plan_over(query, tables, views, true).await;
                };
                let mut planned = self.plan_over(query, tables, views, true).await?;
                planned.rename(&names);
                Ok(planned)
            }
            other => other,
        }
    }

    /// [`SqlSession::plan`], with `table` also showing each row's handle
    /// as the BIGINT column [`ROWID`]: what UPDATE and DELETE find the rows
    /// of a table without a primary key by (the scan reads it from the
    /// row keys and the packs' handles, `ROWID_COLUMN_ID`).
    pub async fn plan_with_rowid(
        &self,
        query: ParsedQuery,
        table: &TableDef,
    ) -> Result<PlannedQuery> {
        let catalog = self.cluster.catalog().await?;
        let (mut tables, views) = (catalog.tables, catalog.views);
        let no_key = table.handle_column_id == 0;
        for t in tables.iter_mut().filter(|t| t.id == table.id && no_key) {
            if !t.columns.iter().any(|c| c.name == ROWID) {
                t.columns.push(ColumnDef {
                    id: ROWID_COLUMN_ID,
                    name: ROWID.into(),
                    field_type: Some(FieldType {
                        kind: TypeKind::Bigint as i32,
                        nullable: false,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
        }
        // (Not offered to the plan cache: these reads carry the literals of
        // their UPDATE or DELETE, and rarely come again.)
        self.plan_over(query, tables, &views, false).await
    }

    /// Plans `query` over `tables`, from the plan cache's plans when it has
    /// them and `cache` allows.
    async fn plan_over(
        &self,
        query: ParsedQuery,
        tables: Vec<TableDef>,
        views: &[ViewDef],
        cache: bool,
    ) -> Result<PlannedQuery> {
        let mut names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
        names.sort();
        let tables = self.with_stats(tables);
        let catalog = Self::catalog_of(&tables);
        let sql = query.0.to_string();
        let cache = cache && self.plans.enabled();
        // Its shape's plan, if one serves (`literal_shape.rs`).
        if let Some(shape) = cache.then(|| literal_shape::shape_of(&query.0)).flatten() {
            if let Some(planned) = self.plan_shape(shape, &tables, &catalog, views, &sql).await {
                return Ok(planned);
            }
        }
        if let Some(kept) = cache.then(|| self.plans.get(&sql, &catalog)).flatten() {
            crate::metrics::plan_cache(plan_cache::Lookup::Hit);
            // A kept physical plan runs without a catalog.
            let cached = match &kept.physical {
                Some(physical) => Cached::Physical(physical.clone()),
                None => Cached::Optimized(self.context_of(tables)?, kept.clone()),
            };
            return Ok(PlannedQuery {
                plan: kept.logical.clone(),
                sql,
                cached,
                renamed: None,
                check: None,
                params: None,
            });
        }
        let ctx = self.context_of(tables)?;
        // A plan over a view holds the view's plan inlined, which the
        // cache cannot check: it is not kept.
        let over_views = views::register_used(&ctx, &query.0, views).await?;
        let cache = cache && !over_views;
        let plan = ctx
            .state()
            .statement_to_plan(query.0)
            .await
            .map_err(|e| unknown_table(e, &names, views))?;
        let cached = match cache {
            false => Cached::No(ctx),
            true if self.plans.fits(&sql) && plan_cache::cacheable(&plan) => {
                crate::metrics::plan_cache(plan_cache::Lookup::Miss);
                Cached::Keep(ctx, catalog)
            }
            true => {
                crate::metrics::plan_cache(plan_cache::Lookup::Uncacheable);
                Cached::No(ctx)
            }
        };
        Ok(PlannedQuery {
            plan,
            sql,
            cached,
            renamed: None,
            check: None,
            params: None,
        })
    }

    /// A query shape's plan (`literal_shape.rs`): the kept one, or planned
    /// now and offered to the cache. None when a shape's plan cannot serve
    /// the statement (a value's type is not its placeholder's, or a
    /// placeholder would be outside a region scan, or the plan is not one
    /// to run again): the statement is then planned with its literals, and
    /// a failed shape is remembered so that it is tried once.
    async fn plan_shape(
        &self,
        shape: literal_shape::Shape,
        tables: &[(TableDef, Option<Arc<stats::TableStatistics>>)],
        catalog: &Catalog,
        views: &[ViewDef],
        sql: &str,
    ) -> Option<PlannedQuery> {
        let types: Vec<DataType> = shape.values.iter().map(|v| v.data_type()).collect();
        let serve = |logical: LogicalPlan, cached: Cached| PlannedQuery {
            plan: logical,
            sql: sql.to_string(),
            cached,
            renamed: None,
            check: None,
            params: Some(Arc::new(shape.values.clone())),
        };
        // (A view's plan is inlined where it is read: such a shape is not
        // kept, as such a statement is not.)
        let lower = sql.to_lowercase();
        if !self.plans.fits(&shape.key)
            || views.iter().any(|v| lower.contains(&v.name.to_lowercase()))
        {
            return None;
        }
        match self.plans.get(&shape.key, catalog) {
            // Kept for values of these types: its plan, or, if it failed
            // its checks, none (planned with the literals).
            Some(kept) if kept.param_types == types => {
                let physical = kept.physical.clone()?;
                crate::metrics::plan_cache(plan_cache::Lookup::Hit);
                return Some(serve(kept.logical.clone(), Cached::Physical(physical)));
            }
            // Values of other types (`s = 5` came first, `s = 'x'` now):
            // planned for these.
            _ => {}
        }
        let state = self.context_of(tables.to_vec()).ok()?.state();
        let logical = state
            .statement_to_plan(shape.statement.clone())
            .await
            .ok()?;
        let inferred = parameter_types(&logical, types.len());
        let typed = inferred
            .iter()
            .zip(&types)
            .all(|(i, t)| i.as_ref() == Some(t));
        let mut optimized = logical.clone();
        let mut physical = None;
        if typed && plan_cache::shape_cacheable(&logical) {
            if let Ok(o) = state.optimize(&logical) {
                // DataFusion's physical planner refuses a placeholder
                // anywhere but in a region scan's filters.
                physical = physical_of(state, &o)
                    .await
                    .ok()
                    .map(|(_, p)| p)
                    .filter(plan_cache::reusable);
                optimized = o;
            }
        }
        let kept = match &physical {
            Some(p) => Some(reset_plan_states(p.clone()).ok()?),
            None => None,
        };
        let plans = Plans {
            logical: logical.clone(),
            optimized,
            physical: kept,
            param_types: types,
        };
        self.plans.put(&shape.key, catalog, plans);
        let physical = physical?;
        crate::metrics::plan_cache(plan_cache::Lookup::Miss);
        Some(serve(logical, Cached::Planned(physical)))
    }

    /// The answer's schema of `view` among the cluster's `tables` and
    /// other `views` (it replaces one of its name): the check CREATE VIEW
    /// makes before the view is stored.
    pub async fn view_schema(
        &self,
        view: &ViewDef,
        tables: Vec<TableDef>,
        views: &[ViewDef],
    ) -> Result<arrow::datatypes::SchemaRef> {
        let ctx = self.context_over(tables)?;
        let mut others: Vec<ViewDef> = views
            .iter()
            .filter(|v| v.name != view.name)
            .cloned()
            .collect();
        others.push(view.clone());
        views::schema_of(&ctx, &view.name, &others).await
    }

    /// Each view's schema, or why it cannot be planned now (a table it
    /// reads was dropped): the Flight SQL catalog lists them.
    pub async fn view_schemas(
        &self,
    ) -> Result<Vec<(ViewDef, Result<arrow::datatypes::SchemaRef>)>> {
        let catalog = self.cluster.catalog().await?;
        let ctx = self.context_over(catalog.tables)?;
        let mut out = Vec::new();
        for v in &catalog.views {
            out.push((
                v.clone(),
                views::schema_of(&ctx, &v.name, &catalog.views).await,
            ));
        }
        Ok(out)
    }

    /// The types DataFusion infers for the placeholders `$1` … `$count`
    /// of any statement it can plan (queries, and INSERT, UPDATE and
    /// DELETE from the target columns); None where it cannot tell.
    pub async fn parameter_types(&self, sql: &str, count: usize) -> Vec<Option<DataType>> {
        let plan = async {
            let ctx = self.context_over(self.cluster.list_tables().await?)?;
            ctx.state().create_logical_plan(sql).await.map_err(from_df)
        };
        match plan.await {
            Ok(plan) => parameter_types(&plan, count),
            Err(_) => vec![None; count],
        }
    }

    /// The physical plan of `sql` over `tables`, without asking meta: what
    /// the regions would run ([`region_dags`]) and what compute would.
    pub async fn physical_plan_over(
        &self,
        sql: &str,
        tables: Vec<TableDef>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let ctx = self.context_over(tables)?;
        let df = ctx.sql(sql).await.map_err(from_df)?;
        df.create_physical_plan().await.map_err(from_df)
    }

    pub async fn run(&self, q: PlannedQuery) -> Result<QueryOutput> {
        let out = self.stream_fresh(q).await?;
        Self::gather(out).await
    }

    /// Runs `q` over the snapshot at `read_ts` (a transaction's start_ts),
    /// all of its answer gathered.
    pub async fn run_at(&self, q: PlannedQuery, read_ts: u64) -> Result<QueryOutput> {
        let out = self.stream_at(q, read_ts).await?;
        Self::gather(out).await
    }

    async fn gather(out: QueryStream) -> Result<QueryOutput> {
        let batches: Vec<RecordBatch> = out.batches.try_collect().await?;
        let schema = batches.first().map_or(out.schema, |b| b.schema());
        Ok(QueryOutput { schema, batches })
    }

    /// Starts `q` over the snapshot at `read_ts`: its batches come as the
    /// plan makes them (an aggregation's at its end, a scan's as the
    /// regions answer), so compute holds no more of a large answer than
    /// its operators do. The snapshot stays held for GC (`gc_hold.rs`)
    /// until the stream ends or is dropped; a query whose run is slow is
    /// logged, with its measured plan, at its end.
    pub async fn stream_at(&self, q: PlannedQuery, read_ts: u64) -> Result<QueryStream> {
        self.stream_when(q, futures::future::ready(Ok(read_ts)))
            .await
    }

    /// [`Self::stream_at`] a snapshot taken now: one for the whole query,
    /// taken as it starts to run. The timestamp's round trip to the
    /// oracle overlaps the query's physical planning, which does not need
    /// it (only the scans read it, as they start).
    ///
    /// A query planned over a kept catalog ([`SqlSession::plan_kept`])
    /// runs only if the timestamp's catalog version is the one it was
    /// planned at; else it is planned again over a fresh catalog and runs
    /// at a fresh timestamp, provided its answer's columns stay those
    /// announced (`catalog_cache.rs`).
    pub async fn stream_fresh(&self, mut q: PlannedQuery) -> Result<QueryStream> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let check = q.check.take();
        let planned_at = check.as_ref().map(|c| c.version);
        let announced = q.schema();
        let txns = self.txns.clone();
        let asked = std::time::Instant::now();
        let stamp = tokio::spawn(async move { txns.stamp().await });
        let _abort = AbortOnDrop(stamp.abort_handle());
        // Let the request go out before physical planning holds this
        // thread: a task spawned here waits in this worker's next-task
        // slot, which no other worker takes, until this one yields.
        tokio::task::yield_now().await;
        let stale = AtomicBool::new(false);
        let out = self
            .stream_when(q, async {
                let stamp = stamp
                    .await
                    .map_err(|e| Error::Internal(format!("taking a timestamp: {e}")))??;
                match planned_at {
                    Some(v) if v != stamp.catalog_version => {
                        stale.store(true, Ordering::Relaxed);
                        return Err(Error::Conflict("the catalog changed".into()));
                    }
                    Some(v) => self.cluster.confirm_catalog(v, asked),
                    None => {}
                }
                Ok(stamp.ts)
            })
            .await;
        let Some(check) = check.filter(|_| stale.load(Ordering::Relaxed)) else {
            return out;
        };
        drop(out);
        self.cluster.forget_catalog();
        // Planned again over a fresh catalog, and checked the same way:
        // its snapshot's version must be the one of the catalog it was
        // planned over (a DDL landing between the two fails the query
        // rather than run a plan older than its snapshot).
        let catalog = self.cluster.catalog().await?;
        let again = self
            .plan_in(check.query, catalog.tables, &catalog.views)
            .await?;
        let changed = || {
            Error::Conflict(
                "the definition of a table or view this query reads changed while it was \
                 being planned (DDL on another compute process): nothing was read; run it again"
                    .into(),
            )
        };
        if again.schema() != announced {
            return Err(changed());
        }
        let txns = self.txns.clone();
        let version = catalog.catalog_version;
        self.stream_when(again, async move {
            let stamp = txns.stamp().await?;
            match stamp.catalog_version == version {
                true => Ok(stamp.ts),
                false => Err(changed()),
            }
        })
        .await
    }

    async fn stream_when(
        &self,
        q: PlannedQuery,
        read_ts: impl std::future::Future<Output = Result<u64>>,
    ) -> Result<QueryStream> {
        let schema = q.schema();
        let PlannedQuery {
            plan,
            sql,
            cached,
            params,
            ..
        } = q;
        let started = std::time::Instant::now();
        let reused = matches!(cached, Cached::Physical(_));
        let (task, physical) = match cached {
            // A fresh copy of the kept physical plan: no physical
            // planning, which was most of a short query's planning.
            Cached::Physical(physical) | Cached::Planned(physical) => {
                let mut config = self.base.config().clone();
                if let Some(values) = params {
                    config.set_extension(Arc::new(late_filters::QueryParams(values)));
                }
                let physical = match reused {
                    true => {
                        crate::metrics::physical_plan_reused();
                        reset_plan_states(physical).map_err(from_df)?
                    }
                    false => physical,
                };
                (self.task_over(config)?, physical)
            }
            Cached::No(ctx) => {
                let df = ctx.execute_logical_plan(plan).await.map_err(from_df)?;
                let task = Arc::new(df.task_ctx());
                (task, df.create_physical_plan().await.map_err(from_df)?)
            }
            Cached::Optimized(ctx, kept) => physical_of(ctx.state(), &kept.optimized).await?,
            Cached::Keep(ctx, catalog) => {
                let state = ctx.state();
                let optimized = state.optimize(&plan).map_err(from_df)?;
                let planned = physical_of(state, &optimized).await?;
                // Kept as it is before this run touches it.
                let physical = match plan_cache::reusable(&planned.1) {
                    true => Some(reset_plan_states(planned.1.clone()).map_err(from_df)?),
                    false => None,
                };
                let plans = Plans {
                    logical: plan,
                    optimized,
                    physical,
                    param_types: Vec::new(),
                };
                self.plans.put(&sql, &catalog, plans);
                planned
            }
        };
        let read_ts = read_ts.await?;
        let hold = self.txns.hold_read(read_ts);
        let task = self.at_snapshot(task, read_ts)?;
        let stream =
            datafusion::physical_plan::execute_stream(physical.clone(), task).map_err(from_df)?;
        let running = Running {
            stream,
            _hold: hold,
            physical,
            sql,
            started,
        };
        let announced = schema.clone();
        let batches = futures::stream::unfold(Some(running), move |running| {
            let announced = announced.clone();
            async move {
                let mut running = running?;
                match running.stream.next().await {
                    Some(Ok(batch)) => Some((conform(batch, &announced), Some(running))),
                    Some(Err(e)) => Some((Err(from_df(e)), None)),
                    None => {
                        running.finish();
                        None
                    }
                }
            }
        });
        Ok(QueryStream {
            schema,
            batches: batches.boxed(),
        })
    }
}

/// `schema` with its view types as the plain ones (Utf8View as Utf8,
/// BinaryView as Binary). DataFusion plans `CAST(x AS VARCHAR)` and some
/// string functions as views, which the Flight SQL JDBC driver cannot
/// read ("Unsupported ArrowType Utf8View"); clients get plain strings,
/// as they do from a table's columns ([`conform`] casts).
fn plain_types(schema: arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::DataType;
    let plain = |dt: &DataType| match dt {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    };
    if !schema
        .fields()
        .iter()
        .any(|f| plain(f.data_type()).is_some())
    {
        return schema;
    }
    let fields: Vec<arrow::datatypes::FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match plain(f.data_type()) {
            Some(dt) => Arc::new(f.as_ref().clone().with_data_type(dt)),
            None => f.clone(),
        })
        .collect();
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `batch` with the schema announced for its query ([`PlannedQuery::schema`],
/// the logical plan's, which GetFlightInfo sends before the plan runs).
/// The physical plan may know more than the logical one did: a folded
/// constant (`SELECT 36 + 25 * NULLIF(20, 9)`) is never NULL, and ADBC and
/// JDBC refuse a stream whose schema differs from the announced one in
/// anything, nullability included. So every batch is relabelled with the
/// announced schema (a type that differs is cast); a NULL in a column
/// announced NOT NULL is an internal error rather than a silent mismatch.
pub fn conform(batch: RecordBatch, announced: &arrow::datatypes::SchemaRef) -> Result<RecordBatch> {
    if Arc::ptr_eq(&batch.schema(), announced) || batch.schema().as_ref() == announced.as_ref() {
        return Ok(batch);
    }
    if batch.num_columns() != announced.fields().len() {
        return Err(Error::Internal(format!(
            "a query announced {} columns and made {}",
            announced.fields().len(),
            batch.num_columns()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(announced.fields())
        .map(|(c, f)| match c.data_type() == f.data_type() {
            true => Ok(c.clone()),
            false => arrow::compute::cast(c, f.data_type()),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        announced.clone(),
        columns,
        &options,
    )?)
}

/// A query as it runs ([`SqlSession::stream_at`]).
struct Running {
    stream: datafusion::execution::SendableRecordBatchStream,
    /// Its snapshot, held until it ends.
    _hold: crate::gc_hold::ReadHold,
    physical: Arc<dyn ExecutionPlan>,
    sql: String,
    started: std::time::Instant,
}

impl Running {
    /// At its end: the slow-query log, with the plan and what each
    /// operator measured (EXPLAIN ANALYZE's).
    fn finish(&self) {
        let elapsed = self.started.elapsed();
        if crate::metrics::is_slow(elapsed) {
            let detail =
                datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(
                    self.physical.as_ref(),
                )
                .indent(true)
                .to_string();
            crate::metrics::log_slow(&self.sql, elapsed, &detail);
        }
    }
}

/// Sets a query's moment in its session config: the snapshot every
/// region scan reads at, and the statement's deadline, if any.
fn with_moment(config: &mut SessionConfig, read_ts: u64) {
    config.set_extension(Arc::new(Snapshot { read_ts }));
    if let Some(at) = crate::session_settings::current_deadline() {
        config.set_extension(Arc::new(Deadline(at)));
    }
}

/// What `SessionState::create_physical_plan` does after optimizing: the
/// physical plan of an optimized `plan`, and the task context to run it
/// in.
async fn physical_of(
    state: datafusion::execution::SessionState,
    plan: &LogicalPlan,
) -> Result<(
    Arc<datafusion::execution::TaskContext>,
    Arc<dyn ExecutionPlan>,
)> {
    let physical = state
        .query_planner()
        .create_physical_plan(plan, &state)
        .await
        .map_err(from_df)?;
    Ok((
        Arc::new(datafusion::execution::TaskContext::from(&state)),
        physical,
    ))
}

/// The coprocessor DAGs of the region scans in `plan`, in plan order.
pub fn region_dags(plan: &Arc<dyn ExecutionPlan>) -> Vec<DagRequest> {
    let mut out = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
            out.push(scan.dag().clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// DataFusion's "table 'quarry.public.x' not found", in Quarry's words:
/// the unknown name and the tables there are.
fn unknown_table(e: DataFusionError, tables: &[String], views: &[ViewDef]) -> Error {
    if let DataFusionError::Plan(m) = e.find_root() {
        if let Some(name) = m
            .strip_prefix("table '")
            .and_then(|r| r.strip_suffix("' not found"))
        {
            let name = name.rsplit('.').next().unwrap_or(name);
            let mut names: Vec<&str> = tables.iter().map(String::as_str).collect();
            names.extend(views.iter().map(|v| v.name.as_str()));
            names.sort();
            return Error::InvalidInput(if names.is_empty() {
                format!("unknown table '{name}': there are no tables yet")
            } else {
                format!("unknown table '{name}'; tables are: {}", names.join(", "))
            });
        }
    }
    from_df(e)
}

/// A DataFusion error as Quarry's, by what the caller does next: Quarry's
/// own errors (from the regions) come back as they were; planning errors
/// are the user's to fix.
pub fn from_df(e: DataFusionError) -> Error {
    if let Some(q) = quarry_error(&e) {
        return q;
    }
    let root = e.find_root();
    if let Some(q) = quarry_error(root) {
        return q;
    }
    let msg = e.strip_backtrace();
    match root {
        DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::SQL(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::Configuration(_) => Error::InvalidInput(msg),
        DataFusionError::ResourcesExhausted(_) => Error::ResourceExhausted(format!(
            "{msg} (past the query's memory limit, compute.query-memory-limit-mb)"
        )),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::ArithmeticOverflow(_) => Error::Overflow(msg),
            // Kernels such as abs() report overflow this way.
            arrow::error::ArrowError::ComputeError(m) if m.contains("overflow") => {
                Error::Overflow(msg)
            }
            // PostgreSQL's words, whichever kernel found it.
            arrow::error::ArrowError::DivideByZero => {
                Error::InvalidInput("division by zero".into())
            }
            arrow::error::ArrowError::CastError(_)
            | arrow::error::ArrowError::InvalidArgumentError(_)
            | arrow::error::ArrowError::ParseError(_) => Error::InvalidInput(msg),
            _ => Error::Internal(msg),
        },
        DataFusionError::Execution(m) if m.contains("overflow") => Error::Overflow(msg),
        DataFusionError::Execution(_) => Error::InvalidInput(msg),
        _ => Error::Internal(msg),
    }
}

fn quarry_error(e: &DataFusionError) -> Option<Error> {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<Error>().cloned(),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::ExternalError(b) => b.downcast_ref::<Error>().cloned(),
            _ => None,
        },
        DataFusionError::Shared(s) => quarry_error(s),
        DataFusionError::Context(_, inner) => quarry_error(inner),
        _ => None,
    }
}
