//! Planning a query: over the kept or a fresh catalog, as a shape with
//! placeholders, for views, and the physical plans of the planned.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use quarry_proto::meta::{TableDef, ViewDef};

use super::errors::unknown_table;
use super::fresh_run::fresh_run;
use super::plan_cache::{Catalog, Plans};
use super::running::physical_of;
use crate::{Error, Result};

use super::*;

impl SqlSession {
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
                let stamp = tokio::spawn(crate::statement_deadline::carried(async move {
                    txns.stamp().await
                }));
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

    /// Plans `query` over `tables` and `views`, distributed over every
    /// compute process as the session's `mpp` setting says (`mpp/`). A
    /// query in a transaction may be too: its tasks read at the
    /// transaction's start_ts, at which the stores answer with its own
    /// uncommitted writes (its locks) as every process reads them.
    pub(super) async fn plan_in(
        &self,
        query: ParsedQuery,
        tables: Vec<TableDef>,
        views: &[ViewDef],
    ) -> Result<PlannedQuery> {
        let mode = self.mpp_mode();
        match self
            .plan_over(query.clone(), tables.clone(), views, true, mode)
            .await
        {
            // Repeated output names: planned with unique ones, answered
            // with the repeats (`output_names.rs`).
            Err(e) if output_names::is_duplicate_name_error(&e) => {
                let mut query = query;
                let Some(names) = output_names::dedupe(&mut query.0) else {
                    return self.plan_over(query, tables, views, true, mode).await;
                };
                let mut planned = self.plan_over(query, tables, views, true, mode).await?;
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
                t.columns.push(rowid_column(ROWID));
            }
        }
        // (Not offered to the plan cache: these reads carry the literals of
        // their UPDATE or DELETE, and rarely come again.)
        self.plan_over(query, tables, &views, false, crate::config::MppMode::Off)
            .await
    }

    /// Plans `query` over `tables`, from the plan cache's plans when it has
    /// them and `cache` allows; distributed under `mode` (a spread query
    /// reuses a kept optimized plan and is planned physically anew:
    /// `plan_cache.rs`, "Spread queries").
    async fn plan_over(
        &self,
        query: ParsedQuery,
        tables: Vec<TableDef>,
        views: &[ViewDef],
        cache: bool,
        mode: crate::config::MppMode,
    ) -> Result<PlannedQuery> {
        // `auto` plans as one process unless the statement reads a large
        // table and a compute process on another host can add cores.
        let mode = match mode {
            crate::config::MppMode::Auto if !self.auto_spreads(&query, &tables) => {
                crate::config::MppMode::Off
            }
            m => m,
        };
        let spread = mode != crate::config::MppMode::Off;
        // (The failpoint `spread_plans_kept_off`, a switch for timing,
        // plans a spread statement from scratch at each run, as before
        // spread queries used the cache.)
        let cache = cache && !(spread && quarry_proto::failpoint::fires("spread_plans_kept_off"));
        let mut names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
        names.sort();
        let tables = self.with_stats(tables);
        let catalog = Self::catalog_of(&tables);
        let sql = query.0.to_string();
        // (A session in another time zone than UTC plans TIMESTAMPTZ in
        // it: its plans are not the cache's.)
        let cache = cache && self.plans.enabled() && super::session_time_zone().is_none();
        // Its shape's plan, if one serves (`literal_shape.rs`; shapes are
        // one process's plans).
        let shapes = cache && !spread;
        if let Some(shape) = shapes.then(|| literal_shape::shape_of(&query.0)).flatten() {
            if let Some(planned) = self.plan_shape(shape, &tables, &catalog, views, &sql).await {
                return Ok(planned);
            }
        }
        let key = plan_cache::key(&sql, spread);
        if let Some(kept) = cache.then(|| self.plans.get(&key, &catalog)).flatten() {
            crate::metrics::plan_cache(plan_cache::Lookup::Hit.label());
            // A kept physical plan runs without a catalog.
            let spreading = self.mpp.clone().filter(|_| spread);
            let cached = match (&kept.physical, spreading) {
                // Planned physically by the mode's distributed planner,
                // without a catalog either.
                (_, Some(mpp)) => Cached::Spread(mpp, mode, kept.clone()),
                (Some(physical), None) if !plan_cache::kept_joins_off(physical) => {
                    Cached::Physical(physical.clone())
                }
                _ => Cached::Optimized(self.context_of(tables)?, kept.clone()),
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
        let ctx = self.context_in_mode(tables, mode)?;
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
            true if self.plans.fits(&key) && plan_cache::cacheable(&plan) => {
                crate::metrics::plan_cache(plan_cache::Lookup::Miss.label());
                Cached::Keep(ctx, catalog)
            }
            true => {
                crate::metrics::plan_cache(plan_cache::Lookup::Uncacheable.label());
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

    /// Whether `mpp = 'auto'` spreads `query`: it names a table of at
    /// least [`AUTO_MIN_ROWS`](crate::df::mpp::AUTO_MIN_ROWS) rows (by its
    /// statistics) and a compute process on another host is live
    /// ([`Workers::adds_cores`](crate::df::mpp::workers::Workers::adds_cores)).
    fn auto_spreads(&self, query: &ParsedQuery, tables: &[TableDef]) -> bool {
        let Some(workers) = self.workers() else {
            return false;
        };
        if !workers.adds_cores() {
            return false;
        }
        let Ok(refs) = self.base.resolve_table_references(&query.0) else {
            return false;
        };
        refs.iter().any(|r| {
            tables.iter().filter(|t| t.name == r.table()).any(|t| {
                self.stats
                    .get(t, &self.scan)
                    .is_some_and(|s| s.rows >= crate::df::mpp::AUTO_MIN_ROWS)
            })
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
                crate::metrics::plan_cache(plan_cache::Lookup::Hit.label());
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
                    .filter(plan_cache::reusable_without_joins);
                optimized = o;
            }
        }
        let kept = match &physical {
            Some(p) => Some(fresh_run(p.clone()).ok()?),
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
        crate::metrics::plan_cache(plan_cache::Lookup::Miss.label());
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
}
