//! DataFusion's join filters on a region scan: a hash join's dynamic
//! filter, offered to the scan after optimization, waited for when the
//! scan first runs, and translated into what storage can evaluate of it
//! (bounds, key lists; a partitioned join's CASE as its branches' hull,
//! `partition_hull.rs`), with key lists that let nearly every key through
//! dropped. Quarry's own key filters (`join_keys.rs`) ask here whether
//! DataFusion's list already holds their keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_expr::expressions::{CaseExpr, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use quarry_coprocessor::expr::{Expr, LogicOp};
use quarry_proto::coprocessor::DagRequest;

use super::partition_hull;
use super::pushdown;

/// The dynamic filters (a join's, filled in at run time) inside `e`.
pub(super) fn dynamic_parts(e: &Arc<dyn PhysicalExpr>) -> Vec<Arc<dyn PhysicalExpr>> {
    let mut found = Vec::new();
    let _ = e.apply(|x| {
        if x.as_ref()
            .downcast_ref::<DynamicFilterPhysicalExpr>()
            .is_some()
        {
            found.push(x.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The expression ids of the dynamic filters inside `e` (each its
/// producer's: a hash join's).
pub(super) fn dynamic_ids(e: &Arc<dyn PhysicalExpr>) -> impl Iterator<Item = u64> {
    dynamic_parts(e)
        .into_iter()
        .filter_map(|d| d.expression_id())
}

/// How long a scan waits for a join's build side to finish its filter.
pub(super) const MAX_FILTER_WAIT: Duration = Duration::from_secs(5);

/// A hash join's dynamic filters on this scan's output, and that output
/// as expressions over the scan's columns (so a filter still translates
/// after a rule has changed what the node outputs).
#[derive(Debug)]
pub(super) struct DynamicFilters {
    pub(super) filters: Vec<Arc<dyn PhysicalExpr>>,
    pub(super) columns: Vec<Expr>,
}

impl DynamicFilters {
    /// These filters without those made by the producers (hash joins)
    /// of expression ids `ids`; None when none are left.
    pub(super) fn without(&self, ids: &[u64]) -> Option<Arc<DynamicFilters>> {
        let filters: Vec<_> = self
            .filters
            .iter()
            .filter(|f| !made_by(f, ids))
            .cloned()
            .collect();
        (!filters.is_empty()).then(|| {
            Arc::new(DynamicFilters {
                filters,
                columns: self.columns.clone(),
            })
        })
    }

    /// Whether a filter here was made by a producer in `ids`.
    pub(super) fn holds_any(&self, ids: &[u64]) -> bool {
        self.filters.iter().any(|f| made_by(f, ids))
    }

    /// `dag` with every translatable conjunct of the filters added to its
    /// selection, once each filter's producer has finished (the join's
    /// build side) or the deadline has passed. Returns the conjuncts added,
    /// and their text.
    pub(super) async fn narrow(
        &self,
        dag: &mut DagRequest,
        deadline: Instant,
    ) -> Vec<(Expr, String)> {
        let mut shown = Vec::new();
        for f in &self.filters {
            for d in &dynamic_parts(f) {
                if let Some(d) = d.as_ref().downcast_ref::<DynamicFilterPhysicalExpr>() {
                    // Scanning without the filter is only slower, never
                    // wrong: past the bound, go on with what it says now.
                    let bound = deadline.min(Instant::now() + MAX_FILTER_WAIT);
                    let until = tokio::time::Instant::from_std(bound);
                    let _ = tokio::time::timeout_at(until, d.wait_complete()).await;
                }
            }
            let Ok(current) = snapshot_physical_expr(f.clone()) else {
                continue;
            };
            for conjunct in split_conjunction(&current) {
                let (widened, dropped) = match self.widen(conjunct) {
                    Some(e) => without_dense_key_lists(e),
                    None => continue,
                };
                if let Ok(c) = widened.to_proto() {
                    let added = widened.clone();
                    dag.selection
                        .get_or_insert_with(Default::default)
                        .conditions
                        .push(c);
                    let mut text = conjunct.to_string();
                    if dropped {
                        text = format!("(key list dropped: dense) {text}");
                    }
                    shown.push((
                        added,
                        if text.len() > 120 {
                            format!("{}…", text.chars().take(120).collect::<String>())
                        } else {
                            text
                        },
                    ));
                }
            }
        }
        shown
    }

    /// A condition storage can evaluate that every row passing `e` passes
    /// (None: none found). A partitioned join's filter is a CASE over the
    /// probe row's hash partition, each branch that partition's build keys;
    /// the OR of the branches keeps every row any partition can match,
    /// sent as the plain bounds and key list it amounts to
    /// (`partition_hull.rs`).
    /// Conjuncts storage cannot evaluate are dropped, which only widens.
    fn widen(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
        if let Some(case) = e.as_ref().downcast_ref::<CaseExpr>() {
            let branches = case
                .when_then_expr()
                .iter()
                .map(|(_, then)| self.widen_all(then))
                .collect::<Option<Vec<Expr>>>()?;
            return partition_hull::hull(branches);
        }
        pushdown::physical(e, &mut |i| self.columns.get(i).cloned())
            .filter(|x| x.data_type() == DataType::Boolean)
    }

    /// The AND of what storage can evaluate of `e`'s conjuncts.
    fn widen_all(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
        partition_hull::joined(
            LogicOp::And,
            split_conjunction(e)
                .into_iter()
                .filter_map(|c| self.widen(c)),
        )
    }
}

/// True when `e` keeps only rows whose `probe` is in an IN list (as
/// DataFusion's join filter does while the build keys are few).
pub(super) fn lists_keys_of(e: &Expr, probe: &Expr) -> bool {
    match e {
        Expr::InList {
            expr,
            negated: false,
            ..
        } => expr.as_ref() == probe,
        Expr::Logic {
            op: LogicOp::And,
            args,
        } => args.iter().any(|a| lists_keys_of(a, probe)),
        Expr::Logic {
            op: LogicOp::Or,
            args,
        } => args.iter().all(|a| lists_keys_of(a, probe)),
        _ => false,
    }
}

/// A key list is dropped when its keys fill at least this share of the
/// range between the smallest and the largest (the bounds stay).
const DENSE_KEYS: f64 = 0.9;

/// `e` without its IN lists of keys when, together, they let nearly every
/// key in their range through (a join with all of `part` on its build
/// side): such a list would cost every region a quarter million probes
/// and two megabytes of request to keep almost nothing back. Returns
/// whether lists were dropped.
fn without_dense_key_lists(e: Expr) -> (Expr, bool) {
    fn keys(e: &Expr, out: &mut std::collections::HashSet<i64>) {
        match e {
            Expr::InList {
                list, set: Some(_), ..
            } => out.extend(
                list.iter()
                    .filter_map(quarry_coprocessor::expr::ScalarValue::as_int64),
            ),
            Expr::Logic { args, .. } => {
                for a in args {
                    keys(a, out);
                }
            }
            _ => {}
        }
    }
    fn drop_lists(e: Expr) -> Expr {
        match e {
            Expr::InList { set: Some(_), .. } => {
                Expr::literal(quarry_coprocessor::expr::ScalarValue::Boolean(true))
            }
            Expr::Logic { op, args } => {
                let args: Vec<Expr> = args.into_iter().map(drop_lists).collect();
                Expr::logic_n(op, args.clone()).unwrap_or(Expr::Logic { op, args })
            }
            other => other,
        }
    }
    let mut all = std::collections::HashSet::new();
    keys(&e, &mut all);
    let (Some(lo), Some(hi)) = (all.iter().min(), all.iter().max()) else {
        return (e, false);
    };
    let span = (*hi as i128 - *lo as i128 + 1) as f64;
    if (all.len() as f64) < DENSE_KEYS * span {
        return (e, false);
    }
    (drop_lists(e), true)
}

/// Whether `f` holds a dynamic filter whose producer's expression id is
/// in `ids`.
fn made_by(f: &Arc<dyn PhysicalExpr>, ids: &[u64]) -> bool {
    dynamic_parts(f)
        .iter()
        .any(|p| p.expression_id().is_some_and(|id| ids.contains(&id)))
}
