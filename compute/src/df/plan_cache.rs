//! Optimized logical plans kept per statement ([`PlanCache`]), so a query
//! that comes again skips DataFusion's SQL binding and its logical
//! optimizer; and, for plans without unions, window functions,
//! subqueries or DataFusion's dynamic filters, the physical plan too.
//!
//! WHY
//!
//! A small query's compute time is mostly planning: profiled on TPC-H Q6
//! (`docs/performance.md`), SQL → logical plan was 9% of compute's
//! samples and the logical optimizer 12%, all of it before the first
//! region request goes out, so on the query's critical path. Dashboards,
//! the bench and ORMs send the same text again and again; TiDB keeps a
//! (non-prepared) plan cache for the same reason.
//!
//! WHAT IS KEPT, AND WHEN IT MAY BE USED
//!
//! The key is the statement as DataFusion's parser prints it back (so
//! spacing and case of keywords do not matter; bound parameters are in
//! the text). An entry holds the plan as bound (its schema answers
//! GetFlightInfo and the parameter types) and as optimized, and what it
//! was planned against ([`Catalog`]): the definition of each table the
//! plan reads, from the table list the statement was planned over (read
//! or kept: `catalog_cache.rs`), and the identity of that table's
//! statistics. An entry is used only when each of those tables is
//! byte-for-byte the same now: a DROP and CREATE of one of them under the
//! same name, a new column or new statistics (which steer join order)
//! plan again; a change to another table does not. (A table created since
//! under a name the statement uses cannot change what it reads: its names
//! all resolved when it was bound.)
//!
//! A statement is kept the second time it is planned, not the first, so
//! statements that never come again (literals spliced into the text) do
//! not push out the ones that do.
//!
//! PHYSICAL PLANS
//!
//! After the logical plans were kept, physical planning (DataFusion's
//! initial plan and its physical optimizer rules) was the largest part of
//! compute's Q6 profile, again before the first region request, and
//! about a fifth of Q11's. An entry also keeps the physical plan, as made
//! and before any run, when every operator in it can be run again
//! ([`reusable`]): a hit runs a fresh copy (`fresh_run.rs`: new operators
//! with new metrics and run state, sharing their expressions; a hash
//! join's build keys, and the runs that identical scans or a shared
//! subplan share, made anew and linked as in the kept plan; and an
//! aggregation's dynamic filter, which Quarry turns off: see
//! [`reusable`]). Nothing per query is inside it: a region scan reads its
//! snapshot and deadline from the running query's session config when it
//! executes, and the per-query memory pool is the task context's.
//! `quarry_compute_physical_plans_reused_total` counts the runs from a
//! kept physical plan. The failpoint `kept_join_plans_off` (a switch for
//! timing, not a fault) plans a kept plan with joins physically again at
//! each run, as before `fresh_run.rs`.
//!
//! Only operators whose copy is complete may be in such a plan (the
//! lists in [`reusable`]): aggregations, projections, filters, sorts and
//! top-k sorts, limits, repartitions, coalescing, empty and one-row
//! sources, hash, nested-loop and cross joins and Quarry's operators
//! around them. A plan whose region scans hold one of DataFusion's
//! dynamic filters is planned per run (its optimizer makes those links,
//! and a copy would run without them), as are unions, window functions
//! and subqueries run by an operator. A query shape's plan
//! (`literal_shape.rs`) is kept only without joins: its join order would
//! have been chosen without its values.
//!
//! What is never kept ([`cacheable`]): EXPLAIN; a plan reading anything
//! but Quarry's tables (`information_schema`, rows a lock returned); a
//! plan with a placeholder; a plan calling a function that is not
//! immutable — `now()`, `current_date` and `random()` are folded into
//! constants by the optimizer, so their plans hold the moment they were
//! made; and a statement longer than [`MAX_KEY_BYTES`]. The reads of
//! UPDATE and DELETE (`plan_with_rowid`) are not offered to the cache.
//!
//! The table sources inside a kept plan are the `QuarryTable`s of the
//! context it was made in. They hold nothing per query (the snapshot and
//! deadline come from the running query's session config when its scans
//! execute), and the catalog check makes them equal to the ones a new
//! context would have made.
//!
//! SPREAD QUERIES
//!
//! A statement spread over several compute processes (`mpp = 'force'`,
//! or `auto` where it spreads) reuses a kept optimized plan too: its SQL
//! binding, logical optimizer and the session state with a catalog that
//! a plan from scratch builds are skipped. Its physical plan before it
//! is cut into stages (DataFusion's physical planning and rules, under
//! the distributed state's rules) is kept as a one-process plan is, where
//! [`reusable`], and each run cuts a fresh copy into stages anew
//! (`preplanned.rs`): the distributed plan itself is not kept, its
//! stages, task counts and workers being the live membership's of the
//! moment. Its entries are kept under their own key ([`key`]), apart
//! from one process's: the distributed planner turns off DataFusion's
//! physical uncorrelated scalar subqueries, so its logical optimizer
//! rewrites those (TPC-H Q11, Q15, Q22) as left joins where one process
//! leaves them to Quarry's decorrelation, and its physical rules
//! broadcast joins one process would partition. The failpoint
//! `spread_plans_kept_off` (a switch for timing) plans spread statements
//! from scratch, as before they used the cache, and
//! `spread_physical_kept_off` plans their kept optimized plans physically
//! at each run, as before `preplanned.rs`.
//!
//! A full cache drops its least recently used entry.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;

use super::dynamic_filters::{dynamic_ids, dynamic_parts};
use super::fresh_run;
use super::join_keys::{BuildKeys, BuildKeysExec};
use super::region_scan::RegionScanExec;
use super::table::QuarryTable;

/// Statements longer than this are not kept (their keys and plans, long
/// IN lists as a rule, would crowd out the short ones that repeat).
pub const MAX_KEY_BYTES: usize = 8 << 10;

/// The cache key of `sql`: the statement itself for one process's plans,
/// marked for a spread one's (see the module docs, "Spread queries").
pub fn key(sql: &str, spread: bool) -> std::borrow::Cow<'_, str> {
    match spread {
        false => std::borrow::Cow::Borrowed(sql),
        true => std::borrow::Cow::Owned(format!("{sql}\n-- spread over compute processes")),
    }
}

/// The entries kept by default (`plan-cache-entries`).
pub const DEFAULT_ENTRIES: usize = crate::config::DEFAULT_PLAN_CACHE_ENTRIES;

/// The tables of a statement's moment, as the cache compares them: per
/// table name, its definition (encoded) and the identity of its
/// statistics (the address of the shared statistics, which a kept plan's
/// table holds alive, so the address is not reused while the entry
/// lives).
#[derive(Debug, Clone, Default)]
pub struct Catalog(HashMap<String, TableState>);

/// One table as the cache compares it (see [`Catalog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TableState {
    def: Vec<u8>,
    stats: Option<usize>,
}

impl Catalog {
    /// Adds one table: its definition and its statistics' identity.
    pub fn add(&mut self, def: &quarry_proto::meta::TableDef, stats: Option<usize>) {
        use prost::Message;
        let state = TableState {
            def: def.encode_to_vec(),
            stats,
        };
        self.0.insert(def.name.clone(), state);
    }

    /// The part of the catalog `plan` reads: its tables' names and states
    /// (None if it reads a table the catalog does not have).
    fn of(&self, plan: &LogicalPlan) -> Option<Vec<(String, TableState)>> {
        let mut names = HashSet::new();
        let _ = plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                names.insert(scan.table_name.table().to_string());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        names
            .into_iter()
            .map(|n| Some((n.clone(), self.0.get(&n)?.clone())))
            .collect()
    }

    /// Whether each of `tables` is here, the same.
    fn has(&self, tables: &[(String, TableState)]) -> bool {
        tables.iter().all(|(n, t)| self.0.get(n) == Some(t))
    }
}

/// A kept statement's plans.
#[derive(Clone)]
pub struct Plans {
    /// As bound, before optimizing (the statement's schema and parameter
    /// types).
    pub logical: LogicalPlan,
    /// As DataFusion's analyzer and optimizer left it.
    pub optimized: LogicalPlan,
    /// Its physical plan, never run, when a fresh copy of it can run
    /// ([`reusable`], `fresh_run.rs`); else None, and each run plans it.
    pub physical: Option<Arc<dyn ExecutionPlan>>,
    /// A query shape's (`literal_shape.rs`): the types of `$1 … $n`, which
    /// a run's values must have. (A shape kept without a physical plan
    /// is one planned with its literals instead.)
    pub param_types: Vec<DataType>,
}

struct Entry {
    /// The tables the plan reads, as they were.
    tables: Vec<(String, TableState)>,
    plans: Arc<Plans>,
    /// The cache's clock at the last use.
    used: u64,
}

/// See the module docs.
pub struct PlanCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    clock: u64,
    entries: HashMap<String, Entry>,
    /// Hashes of statements planned once and not kept yet (cleared when
    /// it reaches four times the capacity).
    seen_once: HashSet<u64>,
    hasher: RandomState,
}

/// What a statement's lookup found (`quarry_compute_plan_cache_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Its plans were kept: planned from them.
    Hit,
    /// Not kept (or not against these tables): planned now, and offered
    /// to the cache once optimized.
    Miss,
    /// Planned now, and not for the cache ([`cacheable`], or longer than
    /// [`MAX_KEY_BYTES`]).
    Uncacheable,
}

impl Lookup {
    pub fn label(self) -> &'static str {
        match self {
            Lookup::Hit => "hit",
            Lookup::Miss => "miss",
            Lookup::Uncacheable => "uncacheable",
        }
    }
}

impl PlanCache {
    /// A cache of at most `capacity` statements (0: none kept).
    pub fn new(capacity: usize) -> Self {
        PlanCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether statements are kept at all (`plan-cache-entries` > 0).
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Whether `sql` is short enough to be kept.
    pub fn fits(&self, sql: &str) -> bool {
        self.enabled() && sql.len() <= MAX_KEY_BYTES
    }

    /// The plans kept for `sql` if the tables they read are the same in
    /// `catalog`.
    pub fn get(&self, sql: &str, catalog: &Catalog) -> Option<Arc<Plans>> {
        if !self.fits(sql) {
            return None;
        }
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let entry = inner.entries.get_mut(sql)?;
        if !catalog.has(&entry.tables) {
            return None;
        }
        entry.used = now;
        Some(entry.plans.clone())
    }

    /// Offers `plans` for `sql`, made against `catalog`: kept from its
    /// second offer on (replacing what was kept for it; dropping the
    /// least recently used entry when full). True if kept.
    pub fn put(&self, sql: &str, catalog: &Catalog, plans: Plans) -> bool {
        if !self.fits(sql) {
            return false;
        }
        let Some(tables) = catalog.of(&plans.logical) else {
            return false;
        };
        let mut inner = self.inner.lock();
        let hash = inner.hasher.hash_one(sql);
        if !inner.entries.contains_key(sql) && inner.seen_once.insert(hash) {
            if inner.seen_once.len() > 4 * self.capacity {
                inner.seen_once.clear();
            }
            return false;
        }
        inner.seen_once.remove(&hash);
        inner.clock += 1;
        let used = inner.clock;
        if inner.entries.len() >= self.capacity && !inner.entries.contains_key(sql) {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.entries.remove(&k);
            }
        }
        inner.entries.insert(
            sql.to_string(),
            Entry {
                tables,
                plans: Arc::new(plans),
                used,
            },
        );
        true
    }

    /// Statements kept now.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a physical plan can be kept and run again as a
/// [`fresh_run`](super::fresh_run::fresh_run) copy: only operators whose
/// reset gives a fresh one (metrics, run state), and joins and shared
/// runs whose links the copy makes again — DataFusion's join filters
/// held only by the hash join that makes them and by region scans and
/// filters, and each one of those made by a join of the plan; no other
/// stage's build keys, no subqueries run by an operator, and every build
/// key a scan waits for made by a join of the plan. Whatever else the
/// plan holds, the next run plans it again.
///
/// (An operator holding any other DataFusion dynamic filter is refused:
/// a copy would share it with the kept plan. Quarry turns the top-k and
/// aggregate ones off, `SqlSession::new`.)
pub fn reusable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    reusable_with(plan, true)
}

/// [`reusable`], and without joins or shared runs: a query shape's plan
/// (`literal_shape.rs`), whose estimates were made without its values,
/// which a join order would depend on.
pub fn reusable_without_joins(plan: &Arc<dyn ExecutionPlan>) -> bool {
    reusable_with(plan, false)
}

/// Whether the `kept_join_plans_off` failpoint sends `kept`, a physical
/// plan with joins or shared runs, to be planned again (the rule before
/// `fresh_run.rs`, to time both side by side).
pub fn kept_joins_off(kept: &Arc<dyn ExecutionPlan>) -> bool {
    quarry_proto::failpoint::fires("kept_join_plans_off") && !reusable_without_joins(kept)
}

fn reusable_with(plan: &Arc<dyn ExecutionPlan>, joins: bool) -> bool {
    const RESETTABLE: &[&str] = &[
        "AggregateExec",
        "ProjectionExec",
        "FilterExec",
        "CoalescePartitionsExec",
        "CoalesceBatchesExec",
        "SortExec",
        "SortExec(TopK)",
        "SortPreservingMergeExec",
        "GlobalLimitExec",
        "LocalLimitExec",
        "RepartitionExec",
        "LocalRepartitionExec",
        "CooperativeExec",
        "EmptyExec",
        "PlaceholderRowExec",
    ];
    // Reset, or linked again by `fresh_run`.
    const LINKED: &[&str] = &[
        "HashJoinExec",
        "NestedLoopJoinExec",
        "CrossJoinExec",
        "StartEarlyExec",
        "SharedSubplanExec",
    ];
    let address = |k: &Arc<BuildKeys>| Arc::as_ptr(k) as usize;
    let (mut made, mut awaited) = (HashSet::new(), HashSet::new());
    // DataFusion's join filters, by expression id: those the joins make
    // and those the scans wait for.
    let (mut produced, mut consumed) = (HashSet::new(), HashSet::new());
    let mut ok = true;
    let _ = plan.apply(|node| {
        ok = if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
            awaited.extend(scan.build_keys().map(address));
            consumed.extend(scan.dynamic_filter_ids());
            let linked = scan.build_keys().next().is_some() || scan.shared_run().is_some();
            !scan.has_unlinkable_run_state() && (joins || !linked)
        } else if let Some(tap) = node.downcast_ref::<BuildKeysExec>() {
            made.insert(address(tap.sink()));
            joins
        } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
            consumed.extend(dynamic_ids(filter.predicate()));
            true
        } else {
            let join = node.downcast_ref::<HashJoinExec>();
            produced.extend(join.and_then(fresh_run::produced_id));
            (RESETTABLE.contains(&node.name()) || (joins && LINKED.contains(&node.name())))
                && !holds_dynamic_filter_of_another(node)
        };
        Ok(match ok {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    ok && awaited.is_subset(&made) && consumed.is_subset(&produced)
}

/// Whether `node`'s expressions hold a DataFusion dynamic filter that
/// another operator makes (a join's): `fresh_run` links such filters again
/// only in region scans and filters. Its own (a hash join's, linked again
/// by `fresh_run`; a top-k sort's, made anew by its reset) are not.
fn holds_dynamic_filter_of_another(node: &Arc<dyn ExecutionPlan>) -> bool {
    let own: HashSet<u64> = (node.dynamic_expressions_produced().iter())
        .filter_map(|e| e.expression_id())
        .collect();
    let mut found = false;
    let _ = node.apply_expressions(&mut |e| {
        found = dynamic_parts(e)
            .iter()
            .any(|d| d.expression_id().is_none_or(|id| !own.contains(&id)));
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// Whether a statement's bound plan may be kept (see the module docs).
pub fn cacheable(plan: &LogicalPlan) -> bool {
    kept_with(plan, false)
}

/// Whether a query shape's bound plan may be kept: as [`cacheable`], but
/// with the placeholders the shape put in (`literal_shape.rs`).
pub fn shape_cacheable(plan: &LogicalPlan) -> bool {
    kept_with(plan, true)
}

fn kept_with(plan: &LogicalPlan, placeholders: bool) -> bool {
    // (The walk starts at the root: an EXPLAIN there is refused below.)
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let ours = source_as_provider(&scan.source)
                .is_ok_and(|p| p.downcast_ref::<QuarryTable>().is_some());
            if !ours {
                ok = false;
            }
        }
        if matches!(
            node,
            LogicalPlan::Explain(_)
                | LogicalPlan::Analyze(_)
                | LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Extension(_)
        ) {
            ok = false;
        }
        if ok {
            let _ = node.apply_expressions(|e| {
                e.apply(|e| {
                    let fixed = match e {
                        Expr::Placeholder(_) => placeholders,
                        Expr::ScalarFunction(f) => {
                            f.func.signature().volatility == Volatility::Immutable
                        }
                        _ => true,
                    };
                    if !fixed {
                        ok = false;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            });
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::{provider_as_source, MemTable};
    use datafusion::logical_expr::LogicalPlanBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use quarry_proto::meta::TableDef;

    use super::*;

    /// Plans that scan `table`.
    fn reading(table: &str) -> Plans {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let mem = MemTable::try_new(schema, vec![vec![]]).unwrap();
        let plan = LogicalPlanBuilder::scan(table, provider_as_source(Arc::new(mem)), None)
            .unwrap()
            .build()
            .unwrap();
        Plans {
            logical: plan.clone(),
            optimized: plan,
            physical: None,
            param_types: Vec::new(),
        }
    }

    /// A catalog of (name, table id, statistics identity).
    fn catalog(tables: &[(&str, i64, Option<usize>)]) -> Catalog {
        let mut c = Catalog::default();
        for (name, id, stats) in tables {
            let def = TableDef {
                id: *id,
                name: name.to_string(),
                ..Default::default()
            };
            c.add(&def, *stats);
        }
        c
    }

    /// Offers `plans` twice (a statement is kept from its second offer).
    fn keep(cache: &PlanCache, sql: &str, c: &Catalog, plans: impl Fn() -> Plans) {
        assert!(!cache.put(sql, c, plans()), "kept at its first offer");
        assert!(cache.put(sql, c, plans()), "not kept at its second offer");
    }

    #[test]
    fn an_entry_is_used_only_while_the_tables_it_reads_are_the_same() {
        let cache = PlanCache::new(4);
        let now = catalog(&[("t", 7, Some(1)), ("u", 8, None)]);
        keep(&cache, "select a from t", &now, || reading("t"));
        assert!(cache.get("select a from t", &now).is_some());
        assert!(cache.get("select a from u", &now).is_none());
        // Another table changed: still used.
        let other = catalog(&[("t", 7, Some(1)), ("u", 9, Some(3))]);
        assert!(cache.get("select a from t", &other).is_some());
        // The table dropped and created again, new statistics, or gone:
        // planned again.
        for then in [
            catalog(&[("t", 10, Some(1)), ("u", 8, None)]),
            catalog(&[("t", 7, Some(2)), ("u", 8, None)]),
            catalog(&[("t", 7, None), ("u", 8, None)]),
            catalog(&[("u", 8, None)]),
        ] {
            assert!(cache.get("select a from t", &then).is_none(), "{then:?}");
        }
        // A plan over a table the catalog lacks is not kept.
        assert!(!cache.put("select a from v", &now, reading("v")));
        assert!(!cache.put("select a from v", &now, reading("v")));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_drops_the_least_recently_used_and_zero_keeps_nothing() {
        let cache = PlanCache::new(2);
        let c = catalog(&[("t", 7, None)]);
        keep(&cache, "a", &c, || reading("t"));
        keep(&cache, "b", &c, || reading("t"));
        assert!(cache.get("a", &c).is_some());
        keep(&cache, "c", &c, || reading("t"));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a", &c).is_some(), "used last, kept");
        assert!(cache.get("b", &c).is_none(), "least recently used, dropped");
        assert!(cache.get("c", &c).is_some());
        // A kept statement planned again replaces its entry at once.
        assert!(cache.put("c", &c, reading("t")));

        let long = "x".repeat(MAX_KEY_BYTES + 1);
        assert!(!cache.fits(&long));
        assert!(!cache.put(&long, &c, reading("t")));
        assert!(!cache.put(&long, &c, reading("t")));
        assert!(cache.get(&long, &c).is_none(), "too long to keep");

        let none = PlanCache::new(0);
        assert!(!none.enabled());
        assert!(!none.put("a", &c, reading("t")));
        assert!(!none.put("a", &c, reading("t")));
        assert!(none.get("a", &c).is_none());
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn plans_that_hold_their_moment_or_read_other_tables_are_not_kept() {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let plan = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.state().create_logical_plan(sql).await.unwrap() }
        };
        assert!(cacheable(&plan("SELECT 1 + 2, abs(-3)").await));
        assert!(cacheable(&plan("SELECT 1 WHERE 2 IN (SELECT 2)").await));
        for sql in [
            "SELECT now()",
            "SELECT current_date",
            "SELECT random()",
            "SELECT 1 WHERE 2 IN (SELECT CAST(now() AS BIGINT))",
            "SELECT $1",
            "EXPLAIN SELECT 1",
            "SELECT table_name FROM information_schema.tables",
        ] {
            assert!(!cacheable(&plan(sql).await), "{sql} was cacheable");
        }
    }
}
