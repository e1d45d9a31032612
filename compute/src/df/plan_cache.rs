//! Optimized logical plans kept per statement ([`PlanCache`]), so a query
//! that comes again skips DataFusion's SQL binding and its logical
//! optimizer.
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
//! GetFlightInfo and the parameter types) and as optimized, and the
//! catalog it was planned against ([`Catalog`]): every table definition
//! of the statement's moment (one meta call per statement, as before) and
//! the identity of each table's statistics. An entry is used only when
//! the catalog now is byte-for-byte the same: a DROP and CREATE of a table
//! under the same name, a new column or new statistics (which steer join
//! order) plan again. Physical planning still runs per query: it is where
//! the region scans' DAGs, their snapshot and deadline, and the hash
//! joins' dynamic filters are made, and an executed physical plan keeps
//! state that must not be shared.
//!
//! What is never kept ([`cacheable`]): EXPLAIN; a plan reading anything
//! but Quarry's tables (`information_schema`, rows a lock returned); a
//! plan with a placeholder; a plan calling a function that is not
//! immutable — `now()`, `current_date` and `random()` are folded into
//! constants by the optimizer, so their plans hold the moment they were
//! made; and a statement longer than [`MAX_KEY_BYTES`].
//!
//! The table sources inside a kept plan are the `QuarryTable`s of the
//! context it was made in. They hold nothing per query (the snapshot and
//! deadline come from the running query's session config when its scans
//! execute), and the catalog check makes them equal to the ones a new
//! context would have made.
//!
//! A full cache drops its least recently used entry.

use std::collections::HashMap;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use parking_lot::Mutex;

use super::table::QuarryTable;

/// Statements longer than this are not kept (their keys and plans would
/// crowd out the short ones that repeat).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// The entries kept by default (`plan-cache-entries`).
pub const DEFAULT_ENTRIES: usize = 256;

/// What a plan was made against: the table definitions, encoded, and the
/// identity of each table's statistics (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Catalog(Vec<u8>);

impl Catalog {
    /// Adds one table: its definition and its statistics' identity (the
    /// address of the shared statistics, which a kept plan's table holds
    /// alive, so the address is not reused while the entry lives).
    pub fn add(&mut self, def: &quarry_proto::meta::TableDef, stats: Option<usize>) {
        use prost::Message;
        let bytes = def.encode_to_vec();
        self.0
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.0.extend_from_slice(&bytes);
        self.0
            .extend_from_slice(&(stats.map_or(0, |p| p as u64)).to_le_bytes());
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
}

struct Entry {
    catalog: Catalog,
    plans: Plans,
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
}

/// What a statement's lookup found (`quarry_compute_plan_cache_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Its plans were kept: planned from them.
    Hit,
    /// Planned now, and kept.
    Miss,
    /// Planned now, and not for the cache ([`cacheable`]).
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

    /// The plans kept for `sql` if they were made against `catalog`.
    pub fn get(&self, sql: &str, catalog: &Catalog) -> Option<Plans> {
        if self.capacity == 0 {
            return None;
        }
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let entry = inner.entries.get_mut(sql)?;
        if entry.catalog != *catalog {
            return None;
        }
        entry.used = now;
        Some(entry.plans.clone())
    }

    /// Keeps `plans` for `sql`, made against `catalog` (replacing what was
    /// kept for it; dropping the least recently used entry when full).
    pub fn put(&self, sql: &str, catalog: Catalog, plans: Plans) {
        if self.capacity == 0 || sql.len() > MAX_KEY_BYTES {
            return;
        }
        let mut inner = self.inner.lock();
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
                catalog,
                plans,
                used,
            },
        );
    }

    /// Statements kept now.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a statement's bound plan may be kept (see the module docs).
pub fn cacheable(plan: &LogicalPlan) -> bool {
    if matches!(plan, LogicalPlan::Explain(_) | LogicalPlan::Analyze(_)) {
        return false;
    }
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
                        Expr::Placeholder(_) => false,
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

    use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
    use datafusion::prelude::{SessionConfig, SessionContext};
    use quarry_proto::meta::TableDef;

    use super::*;

    fn empty() -> Plans {
        let plan = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(datafusion::common::DFSchema::empty()),
        });
        Plans {
            logical: plan.clone(),
            optimized: plan,
        }
    }

    fn catalog(name: &str, stats: Option<usize>) -> Catalog {
        let mut c = Catalog::default();
        let def = TableDef {
            id: 7,
            name: name.into(),
            ..Default::default()
        };
        c.add(&def, stats);
        c
    }

    #[test]
    fn an_entry_is_used_only_against_the_catalog_it_was_planned_against() {
        let cache = PlanCache::new(4);
        cache.put("select 1", catalog("t", Some(1)), empty());
        assert!(cache.get("select 1", &catalog("t", Some(1))).is_some());
        assert!(cache.get("select 2", &catalog("t", Some(1))).is_none());
        // Another table definition, or new statistics: plan again.
        assert!(cache.get("select 1", &catalog("u", Some(1))).is_none());
        assert!(cache.get("select 1", &catalog("t", Some(2))).is_none());
        assert!(cache.get("select 1", &catalog("t", None)).is_none());
        // The replanned statement replaces its entry.
        cache.put("select 1", catalog("t", Some(2)), empty());
        assert_eq!(cache.len(), 1);
        assert!(cache.get("select 1", &catalog("t", Some(2))).is_some());
    }

    #[test]
    fn a_full_cache_drops_the_least_recently_used_and_zero_keeps_nothing() {
        let cache = PlanCache::new(2);
        let c = catalog("t", None);
        cache.put("a", c.clone(), empty());
        cache.put("b", c.clone(), empty());
        assert!(cache.get("a", &c).is_some());
        cache.put("c", c.clone(), empty());
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a", &c).is_some(), "used last, kept");
        assert!(cache.get("b", &c).is_none(), "least recently used, dropped");
        assert!(cache.get("c", &c).is_some());

        let long = "x".repeat(MAX_KEY_BYTES + 1);
        cache.put(&long, c.clone(), empty());
        assert!(cache.get(&long, &c).is_none(), "too long to keep");

        let none = PlanCache::new(0);
        none.put("a", c.clone(), empty());
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
