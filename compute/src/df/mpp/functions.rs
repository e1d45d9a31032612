//! The functions a task's session registers: only those its query's
//! plan calls.
//!
//! A worker builds a session state for every task it runs (`mpp::worker`),
//! and `datafusion-proto` decodes the stage's plan against it, looking up
//! each scalar and aggregate function by name. A session with all of
//! DataFusion's and Quarry's functions registers several hundred names
//! (each function under each of its aliases), and the library copies
//! those maps again into the task's context: profiled over a loop of
//! TPC-H Q6 under `mpp = 'force'`, building those sessions was an eighth
//! of the three compute processes' CPU, more than the query's own
//! aggregation (`docs/performance.md`).
//!
//! So the coordinator lists the functions its distributed plan calls
//! ([`called`]: every expression of every node, through the expression
//! trees, and every aggregation's functions) and sends the list with the
//! query's options ([`super::MppOptions`]); a task's session registers
//! just those ([`Functions::listed`]). The list is the whole query's, not
//! one stage's, so a function that a stage's exchange carries in its
//! partitioning (decoded with the stage) is in it too, from the node
//! below the exchange that computes it.
//!
//! Where the list could miss a function, there is none and the task
//! registers every function, as before: a plan with a window function
//! (window nodes hold their functions outside `apply_expressions`), a name
//! that would not travel as a header value, or a name this process does
//! not know. Higher-order functions are always registered (there are few).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, WindowUDF};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::ExecutionPlan;

use super::MppOptions;

/// The scalar and aggregate functions a plan calls, by the names its
/// encoding looks them up by.
#[derive(Debug, Default, PartialEq)]
pub struct Called {
    pub scalar: BTreeSet<String>,
    pub aggregate: BTreeSet<String>,
}

/// The functions `plan` calls, or None where a list could miss one
/// (module docs).
pub fn called(plan: &Arc<dyn ExecutionPlan>) -> Option<Called> {
    let mut out = Called::default();
    let mut complete = true;
    let _ = plan.apply(|node| {
        if node.name().contains("Window") {
            complete = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        if let Some(agg) = node.downcast_ref::<AggregateExec>() {
            for f in agg.aggr_expr() {
                out.aggregate.insert(f.fun().name().to_string());
            }
        }
        node.apply_expressions(&mut |expr| {
            expr.apply(|e| {
                if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
                    out.scalar.insert(f.name().to_string());
                    out.scalar.insert(f.fun().name().to_string());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    });
    let travels = |name: &String| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let travels = out.scalar.iter().all(travels) && out.aggregate.iter().all(travels);
    (complete && travels).then_some(out)
}

impl Called {
    /// Into `options`, for the tasks; None clears the list there.
    pub fn set(called: Option<&Called>, options: &mut MppOptions) {
        options.functions_listed = called.is_some();
        let join = |names: &BTreeSet<String>| names.iter().cloned().collect::<Vec<_>>().join(",");
        options.scalar_functions = called.map(|c| join(&c.scalar)).unwrap_or_default();
        options.aggregate_functions = called.map(|c| join(&c.aggregate)).unwrap_or_default();
    }
}

/// The scalar and aggregate functions a task registers.
pub type Listed = (Vec<Arc<ScalarUDF>>, Vec<Arc<AggregateUDF>>);

/// This process's functions (its base session's), each once, and by
/// every name it answers to.
pub struct Functions {
    pub scalar: Vec<Arc<ScalarUDF>>,
    pub aggregate: Vec<Arc<AggregateUDF>>,
    pub window: Vec<Arc<WindowUDF>>,
    pub higher_order: Vec<Arc<HigherOrderUDF>>,
    scalar_by_name: HashMap<String, Arc<ScalarUDF>>,
    aggregate_by_name: HashMap<String, Arc<AggregateUDF>>,
}

impl Functions {
    pub fn of(base: &SessionState) -> Functions {
        // A session state lists a function under each of its aliases
        // too, and a builder registers every alias again.
        fn once<T>(all: impl Iterator<Item = Arc<T>>) -> Vec<Arc<T>> {
            let mut seen = HashSet::new();
            all.filter(|f| seen.insert(Arc::as_ptr(f) as *const () as usize))
                .collect()
        }
        Functions {
            scalar: once(base.scalar_functions().values().cloned()),
            aggregate: once(base.aggregate_functions().values().cloned()),
            window: once(base.window_functions().values().cloned()),
            higher_order: once(base.higher_order_functions().values().cloned()),
            scalar_by_name: base.scalar_functions().clone(),
            aggregate_by_name: base.aggregate_functions().clone(),
        }
    }

    /// The scalar and aggregate functions `options` lists, or None where
    /// it lists none or one this process does not know (then a task
    /// registers them all).
    pub fn listed(&self, options: &MppOptions) -> Option<Listed> {
        if !options.functions_listed {
            return None;
        }
        fn pick<T>(names: &str, known: &HashMap<String, Arc<T>>) -> Option<Vec<Arc<T>>> {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for name in names.split(',').filter(|n| !n.is_empty()) {
                let f = known.get(name)?;
                if seen.insert(Arc::as_ptr(f) as *const () as usize) {
                    out.push(f.clone());
                }
            }
            Some(out)
        }
        Some((
            pick(&options.scalar_functions, &self.scalar_by_name)?,
            pick(&options.aggregate_functions, &self.aggregate_by_name)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn physical(sql: &str) -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, b VARCHAR) AS VALUES (1, 'x'), (2, 'y')")
            .await
            .unwrap();
        ctx.sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[tokio::test]
    async fn a_plan_lists_the_functions_it_calls_inside_other_expressions_too() {
        let plan = physical(
            "SELECT CASE WHEN length(b) > 0 THEN lower(b) ELSE upper(b) END AS k, \
             sum(abs(a)), count(*) FROM t GROUP BY k",
        )
        .await;
        let called = called(&plan).expect("a list");
        // (`length` is `character_length`'s alias; either name may be the
        // one the plan's expression carries.)
        let mut scalar = called.scalar.clone();
        scalar.remove("length");
        assert_eq!(
            names(&scalar),
            ["abs", "character_length", "lower", "upper"]
        );
        assert_eq!(names(&called.aggregate), ["count", "sum"]);
    }

    #[tokio::test]
    async fn a_window_function_lists_nothing() {
        let plan = physical("SELECT a, row_number() OVER (ORDER BY a) FROM t").await;
        assert_eq!(called(&plan), None);
    }

    #[tokio::test]
    async fn the_list_travels_and_picks_each_function_once() {
        let plan = physical("SELECT upper(b), sum(a) FROM t GROUP BY upper(b)").await;
        let called = called(&plan).expect("a list");
        let mut options = MppOptions::default();
        Called::set(Some(&called), &mut options);
        assert!(options.functions_listed);
        assert_eq!(options.scalar_functions, "upper");
        assert_eq!(options.aggregate_functions, "sum");

        let functions = Functions::of(&SessionContext::new().state());
        let (scalar, aggregate) = functions.listed(&options).expect("known functions");
        assert_eq!(scalar.len(), 1);
        assert_eq!(scalar[0].name(), "upper");
        assert_eq!(aggregate[0].name(), "sum");

        // A name this process does not know: every function, not a
        // session that cannot decode the plan.
        options.scalar_functions = "upper,no_such_function".into();
        assert!(functions.listed(&options).is_none());
        Called::set(None, &mut options);
        assert!(!options.functions_listed);
        assert!(functions.listed(&options).is_none());
    }
}
