//! Join order: inner joins reordered by the rows each step keeps.
//!
//! DataFusion keeps the order in which a query names its tables. Its
//! `eliminate_cross_join` walks the FROM list and joins each table to the
//! tables before it; its physical `JoinSelection` then only picks, join
//! by join, which input builds the hash table. So a query that names a
//! big table early pays for it in every join above: TPC-H Q9 lists
//! `part, supplier, lineitem, partsupp, orders, nation`, and its plan
//! joined part's 10 thousand green parts to lineitem first and built the
//! next two hash tables on the 319 thousand lineitem rows that came out,
//! where joining part to partsupp first keeps 43 thousand (partsupp's
//! region scan is cut by part's keys), and lineitem, cut by those keys,
//! only probes. Q21 names `supplier, lineitem, orders, nation`: nation's
//! single row, which cuts supplier to 400 rows, joined last, so the join
//! with orders built on orders' 729 thousand finished orders.
//!
//! This rule reorders each *join graph*: a tree of inner equi-joins
//! (through the column-pruning projections between them), whose leaves
//! are everything else. It estimates every leaf and joins greedily, the
//! way greedy operator ordering (Fegaras, 1998) does: of all pairs of
//! parts of the graph that share a join key, it joins the pair whose
//! join keeps the fewest rows, and repeats until one part is left. The
//! result may be bushy (Q9 joins nation to supplier apart from the
//! part–partsupp–lineitem chain). The smaller part of each join is its
//! left input, which DataFusion builds on unless its own statistics say
//! otherwise. Every build side's keys then cut the probe side's region
//! scan (`join_keys.rs`), so joining small parts first also reads less.
//!
//! *Estimates.* A leaf that is a table scan (under aliases, plain
//! projections, filters, or the left side of a semi or anti join) is
//! estimated as its region scan estimates itself for DataFusion
//! (`region_scan.rs`, `selectivity.rs`): the table's rows, the share its
//! filters keep, and each column's distinct values. A filter that stays
//! above a scan keeps a fifth of its rows (DataFusion's default). A join
//! of parts A and B keeps |A|·|B| / max(NDV(a), NDV(b)) rows for its most
//! selective key pair `a = b`, a column's NDV in a part being at most the
//! part's rows. Only the most selective pair counts: a key of two
//! columns (Q9's lineitem–partsupp join on part and supplier) would
//! otherwise be taken as far more selective than it is, since the two
//! columns are not independent.
//!
//! A join's other conditions (Q7's `n1.n_name = 'FRANCE' AND n2.n_name =
//! 'GERMANY' OR …`) stay in the graph, conjunct by conjunct, and each
//! goes to the lowest join of the new tree that has every leaf it reads.
//! They do not count in the estimates.
//!
//! *When it leaves a graph alone.* Fewer than three leaves (DataFusion's
//! own build-side choice is all there is to decide); a leaf it cannot
//! estimate (an aggregation, a union, a table without statistics yet, as
//! on a cold start): the plan keeps its order rather than guess; a
//! null-equal key or NOT IN semantics (not a plain inner join), or a
//! join without equal keys, ends the graph there; a graph whose parts
//! could only be joined by a cross product; more than sixteen leaves;
//! leaves whose columns only the projections between the joins kept
//! apart (a derived table's hidden columns named like another leaf's),
//! which then stay where they are while the joins inside are looked at
//! on their own; a volatile key or condition (`random()`), which must
//! not be merged with another or moved. A leaf's own joins are
//! reordered on their own. The new tree ends in a projection to the
//! columns the old one had, in its order, so nothing above changes;
//! DataFusion's projection pruning, which runs after this rule, prunes
//! the new tree's columns again.
//!
//! Keys are classes of equal expressions: `a = b` and `b = c` make `a`
//! and `c` joinable too (Q9's `ps_suppkey = l_suppkey = s_suppkey` joins
//! partsupp to supplier before lineitem is there). Each join takes, per
//! class with members on both sides, just the keys that make them equal.
//! A new order replaces the old only when its estimated cost (the rows
//! its joins keep, summed) is lower, so equal estimates keep the plan as
//! it is in each of the optimizer's passes.
//!
//! Left out: outer joins, which may not move across each other as
//! freely; joins inside subqueries DataFusion did not decorrelate; cost
//! beyond row counts (a wide build side costs more than a narrow one of
//! the same rows); dynamic programming over all orders, which for the
//! eight tables of TPC-H's largest join would still be cheap but would
//! trust the estimates more than they deserve.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef, NullEquality, Result as DfResult};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    Expr, ExprSchemable, Join, JoinConstraint, JoinType, LogicalPlan, Projection,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use super::table::QuarryTable;

/// The share of rows a filter DataFusion keeps above a scan is taken to
/// keep (DataFusion's default selectivity).
const FILTER_SELECTIVITY: f64 = 0.2;

/// The most leaves of a graph this rule orders: each greedy step weighs
/// every pair of parts, so a graph of many more would cost planning
/// time out of proportion (TPC-H's largest has eight).
const MAX_LEAVES: usize = 16;

/// The logical optimizer rule (installed after DataFusion's
/// `push_down_filter`, so that scans carry their filters).
#[derive(Debug, Default)]
pub struct ReorderJoins;

impl OptimizerRule for ReorderJoins {
    fn name(&self) -> &str {
        "quarry_reorder_joins"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        None
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        // A test's switch: the plans the query's own order makes, to
        // time both orders side by side in one cluster.
        if quarry_proto::failpoint::hit("join_order_off").is_some() {
            return Ok(Transformed::no(plan));
        }
        reorder(plan)
    }
}

/// Installs the rule right after `push_down_filter`.
pub fn install(state: &mut datafusion::execution::SessionState) {
    super::add_optimizer_rule_after(state, "push_down_filter", Arc::new(ReorderJoins));
}

/// `plan` with every join graph in it reordered, outermost first; a
/// graph's leaves are reordered on their own.
fn reorder(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    plan.transform_down(|node| match graph_join(&node) {
        Some(_) => reorder_graph(node),
        None => Ok(Transformed::no(node)),
    })
}

/// A join that belongs to a join graph: inner, with equal keys (and
/// perhaps other conditions, which the graph keeps apart).
fn graph_join(plan: &LogicalPlan) -> Option<&Join> {
    match plan {
        LogicalPlan::Join(j)
            if j.join_type == JoinType::Inner
                && !j.on.is_empty()
                && j.null_equality == NullEquality::NullEqualsNothing
                && !j.null_aware
                && j.join_constraint == JoinConstraint::On =>
        {
            Some(j)
        }
        _ => None,
    }
}

/// A graph join, or one under a projection that only picks columns (the
/// pruning DataFusion puts between joins).
fn inner_graph_join(plan: &LogicalPlan) -> Option<&Join> {
    match plan {
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
            graph_join(&p.input)
        }
        _ => graph_join(plan),
    }
}

/// A join tree over a graph's leaves, by their index.
#[derive(Debug, Clone, PartialEq)]
enum Tree {
    Leaf(usize),
    Join(Box<Tree>, Box<Tree>),
}

/// A leaf's estimate: its rows, and each output column's distinct values
/// where known.
#[derive(Debug, Clone)]
struct Estimate {
    rows: f64,
    distinct: Vec<Option<f64>>,
}

/// A join graph taken apart.
#[derive(Default)]
struct Graph {
    leaves: Vec<LogicalPlan>,
    keys: Vec<(Expr, Expr)>,
    /// The joins' other conditions, conjunct by conjunct.
    filters: Vec<Expr>,
}

impl Graph {
    /// Collects `plan`'s leaves and keys; the tree it had.
    fn flatten(&mut self, plan: &LogicalPlan, top: bool) -> Tree {
        let join = match top {
            true => graph_join(plan),
            false => inner_graph_join(plan),
        };
        match join {
            Some(j) => {
                let left = self.flatten(&j.left, false);
                let right = self.flatten(&j.right, false);
                self.keys.extend(j.on.iter().cloned());
                if let Some(f) = &j.filter {
                    self.filters
                        .extend(split_conjunction(f).into_iter().cloned());
                }
                Tree::Join(Box::new(left), Box::new(right))
            }
            None => {
                self.leaves.push(plan.clone());
                Tree::Leaf(self.leaves.len() - 1)
            }
        }
    }

    /// The leaf whose output has every column `e` reads.
    fn leaf_of(&self, e: &Expr) -> Option<usize> {
        let columns = e.column_refs();
        let leaf = self.only_leaf_with(columns.iter().next()?)?;
        let schema = self.leaves[leaf].schema();
        columns.iter().all(|c| schema.has_column(c)).then_some(leaf)
    }

    /// The one leaf whose output has `column`; None if none or several
    /// do.
    fn only_leaf_with(&self, column: &Column) -> Option<usize> {
        let mut with = self
            .leaves
            .iter()
            .enumerate()
            .filter(|(_, l)| l.schema().has_column(column))
            .map(|(i, _)| i);
        let leaf = with.next()?;
        with.next().is_none().then_some(leaf)
    }

    /// The graph's keys as classes of equal expressions; None if the
    /// leaves' columns clash once joined directly, a key or condition
    /// reads no single leaf or is volatile, or a class mixes types.
    fn classes(&self) -> Option<Keys> {
        // The leaves' columns must be told apart without the projections
        // between the joins (a derived table's hidden columns may share
        // names with another leaf's), as the new joins will need.
        let mut all = DFSchema::empty();
        for leaf in &self.leaves {
            all = all.join(leaf.schema()).ok()?;
        }
        let volatile = |e: &Expr| e.is_volatile();
        if self.keys.iter().any(|(l, r)| volatile(l) || volatile(r))
            || self.filters.iter().any(volatile)
        {
            return None;
        }
        let mut members: Vec<Member> = Vec::new();
        let mut parent: Vec<usize> = Vec::new();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        for (l, r) in &self.keys {
            let mut ends = [0; 2];
            for (end, e) in ends.iter_mut().zip([l, r]) {
                *end = match members.iter().position(|m| &m.expr == e) {
                    Some(i) => i,
                    None => {
                        let leaf = self.leaf_of(e)?;
                        let data_type = e.get_type(self.leaves[leaf].schema()).ok()?;
                        members.push(Member {
                            expr: e.clone(),
                            leaf,
                            class: 0,
                            data_type,
                        });
                        parent.push(parent.len());
                        members.len() - 1
                    }
                };
            }
            if members[ends[0]].leaf == members[ends[1]].leaf {
                return None;
            }
            let (a, b) = (root(&mut parent, ends[0]), root(&mut parent, ends[1]));
            parent[a] = b;
        }
        let mut roots: Vec<usize> = Vec::new();
        for (i, member) in members.iter_mut().enumerate() {
            let r = root(&mut parent, i);
            member.class = match roots.iter().position(|&x| x == r) {
                Some(c) => c,
                None => {
                    roots.push(r);
                    roots.len() - 1
                }
            };
        }
        for m in &members {
            let first = members.iter().find(|o| o.class == m.class)?;
            if first.data_type != m.data_type {
                return None;
            }
        }
        let filters = self
            .filters
            .iter()
            .map(|f| {
                let mut leaves = Vec::new();
                for c in f.column_refs() {
                    let leaf = self.only_leaf_with(c)?;
                    if !leaves.contains(&leaf) {
                        leaves.push(leaf);
                    }
                }
                leaves.sort_unstable();
                Some((f.clone(), leaves))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Keys {
            members,
            classes: roots.len(),
            filters,
        })
    }
}

/// One expression of a join key, the leaf it reads, and the class of
/// expressions the graph's keys make equal to it.
struct Member {
    expr: Expr,
    leaf: usize,
    class: usize,
    data_type: arrow::datatypes::DataType,
}

/// The graph's join keys: `a = b` and `b = c` make `a`, `b` and `c` one
/// class, so that the parts holding `a` and `c` can be joined directly
/// (Q9's partsupp and supplier, through lineitem's `l_suppkey`).
struct Keys {
    members: Vec<Member>,
    classes: usize,
    /// The joins' other conditions, with the leaves each reads: each goes
    /// to the lowest join that has all of them.
    filters: Vec<(Expr, Vec<usize>)>,
}

/// `node`, a graph's top join, reordered; its leaves reordered first.
fn reorder_graph(node: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    let mut graph = Graph::default();
    let shape = graph.flatten(&node, true);
    // Leaves whose columns only the projections between the joins kept
    // apart, or keys this rule cannot place: the tree stays, and the
    // traversal goes on into it (its inner joins may be graphs of their
    // own).
    let Some(keys) = graph.classes() else {
        return Ok(Transformed::no(node));
    };
    let mut leaves_changed = false;
    for leaf in graph.leaves.iter_mut() {
        let t = reorder(std::mem::take(leaf))?;
        leaves_changed |= t.transformed;
        *leaf = t.data;
    }
    let order = match graph.leaves.len() {
        3..=MAX_LEAVES => graph
            .leaves
            .iter()
            .map(estimate)
            .collect::<Option<Vec<_>>>()
            .and_then(|estimates| {
                let order = greedy_order(&graph, &keys, &estimates)?;
                // Only a cheaper tree replaces the one there: equal
                // estimates keep the plan as it is, pass after pass.
                let cost = |t: &Tree| tree_cost(t, &graph, &keys, &estimates).0;
                (cost(&order) < cost(&shape) * (1.0 - 1e-9)).then_some(order)
            }),
        _ => None,
    };
    let tree = match order {
        Some(order) => order,
        None if leaves_changed => shape,
        None => return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump)),
    };
    let mut placed = vec![false; keys.filters.len()];
    let (joined, _) = build(&tree, &graph.leaves, &keys, &mut placed)?;
    let plan = restore_columns(joined, node.schema())?;
    Ok(Transformed::new(plan, true, TreeNodeRecursion::Jump))
}

/// The cost of `tree`: the sum of the rows each of its joins keeps
/// (infinite where a join has no key); and `tree` as a part, with its
/// estimated rows.
fn tree_cost(tree: &Tree, graph: &Graph, keys: &Keys, estimates: &[Estimate]) -> (f64, Part) {
    match tree {
        Tree::Leaf(i) => (
            0.0,
            Part {
                tree: tree.clone(),
                leaves: HashSet::from([*i]),
                rows: estimates[*i].rows.max(1.0),
            },
        ),
        Tree::Join(l, r) => {
            let (lc, left) = tree_cost(l, graph, keys, estimates);
            let (rc, right) = tree_cost(r, graph, keys, estimates);
            let rows = joined_rows(graph, keys, estimates, &left, &right);
            let mut leaves = left.leaves;
            leaves.extend(right.leaves);
            let part = Part {
                tree: tree.clone(),
                leaves,
                rows: rows.unwrap_or(left.rows * right.rows),
            };
            (lc + rc + rows.unwrap_or(f64::INFINITY), part)
        }
    }
}

/// A leaf's estimate, when it is a table scan under nodes that keep its
/// columns.
fn estimate(plan: &LogicalPlan) -> Option<Estimate> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let provider = source_as_provider(&scan.source).ok()?;
            let table = provider.downcast_ref::<QuarryTable>()?;
            let stats = table.estimate(scan.projection.as_ref(), &scan.filters, scan.fetch)?;
            let rows = match stats.num_rows {
                Precision::Exact(n) | Precision::Inexact(n) => n as f64,
                Precision::Absent => return None,
            };
            let distinct = stats
                .column_statistics
                .iter()
                .map(|c| match c.distinct_count {
                    Precision::Exact(n) | Precision::Inexact(n) => Some(n as f64),
                    Precision::Absent => None,
                })
                .collect();
            Some(Estimate { rows, distinct })
        }
        LogicalPlan::SubqueryAlias(a) => estimate(&a.input),
        LogicalPlan::Projection(p) => {
            let input = estimate(&p.input)?;
            let distinct = p
                .expr
                .iter()
                .map(|e| {
                    let c = match e {
                        Expr::Alias(a) => a.expr.try_as_col(),
                        e => e.try_as_col(),
                    }?;
                    let i = p.input.schema().index_of_column(c).ok()?;
                    input.distinct.get(i).copied().flatten()
                })
                .collect();
            Some(Estimate {
                rows: input.rows,
                distinct,
            })
        }
        LogicalPlan::Filter(f) => {
            let input = estimate(&f.input)?;
            let rows = (input.rows * FILTER_SELECTIVITY).max(1.0);
            Some(Estimate {
                rows,
                distinct: input
                    .distinct
                    .iter()
                    .map(|d| d.map(|d| d.min(rows)))
                    .collect(),
            })
        }
        // Their output is the left side's columns, some of its rows.
        LogicalPlan::Join(j) if matches!(j.join_type, JoinType::LeftSemi | JoinType::LeftAnti) => {
            estimate(&j.left)
        }
        _ => None,
    }
}

/// A part of the graph while it is being joined.
struct Part {
    tree: Tree,
    leaves: HashSet<usize>,
    rows: f64,
}

/// The distinct values of `member` in a part of `rows` rows.
fn member_distinct(graph: &Graph, estimates: &[Estimate], member: &Member, rows: f64) -> f64 {
    let leaf = member.leaf;
    let own = match &member.expr {
        Expr::Column(c) => graph.leaves[leaf]
            .schema()
            .index_of_column(c)
            .ok()
            .and_then(|i| estimates[leaf].distinct.get(i).copied().flatten()),
        _ => None,
    };
    own.unwrap_or(estimates[leaf].rows).min(rows).max(1.0)
}

/// The rows a join of `a` and `b` keeps, if some key class has members
/// on both sides: |A|·|B| over the largest of the classes' NDVs, a
/// class's NDV in a part being its most selective member's there.
fn joined_rows(
    graph: &Graph,
    keys: &Keys,
    estimates: &[Estimate],
    a: &Part,
    b: &Part,
) -> Option<f64> {
    let mut widest: Option<f64> = None;
    for class in 0..keys.classes {
        let side = |p: &Part| {
            keys.members
                .iter()
                .filter(|m| m.class == class && p.leaves.contains(&m.leaf))
                .map(|m| member_distinct(graph, estimates, m, p.rows))
                .reduce(f64::min)
        };
        if let (Some(da), Some(db)) = (side(a), side(b)) {
            let d = da.max(db);
            widest = Some(widest.map_or(d, |w| w.max(d)));
        }
    }
    widest.map(|d| (a.rows * b.rows / d).max(1.0))
}

/// Greedy operator ordering: joins the pair of parts that keeps the
/// fewest rows until one part is left; None if only a cross product
/// would join what is left.
fn greedy_order(graph: &Graph, keys: &Keys, estimates: &[Estimate]) -> Option<Tree> {
    let mut parts: Vec<Part> = estimates
        .iter()
        .enumerate()
        .map(|(i, e)| Part {
            tree: Tree::Leaf(i),
            leaves: HashSet::from([i]),
            rows: e.rows.max(1.0),
        })
        .collect();
    while parts.len() > 1 {
        let mut best: Option<(usize, usize, f64)> = None;
        for i in 0..parts.len() {
            for j in i + 1..parts.len() {
                let Some(rows) = joined_rows(graph, keys, estimates, &parts[i], &parts[j]) else {
                    continue;
                };
                if best.is_none_or(|(.., r)| rows < r) {
                    best = Some((i, j, rows));
                }
            }
        }
        let (i, j, rows) = best?;
        let b = parts.remove(j);
        let a = parts.remove(i);
        // The smaller part on the left, where DataFusion builds.
        let (left, right) = match b.rows < a.rows {
            true => (b, a),
            false => (a, b),
        };
        let mut leaves = left.leaves;
        leaves.extend(right.leaves);
        parts.insert(
            i,
            Part {
                tree: Tree::Join(Box::new(left.tree), Box::new(right.tree)),
                leaves,
                rows,
            },
        );
    }
    parts.pop().map(|p| p.tree)
}

/// The plan of `tree`: inner joins over `leaves`, and for each key member
/// in it, the group of members already equal to it there (None outside
/// it). Each join takes, per class with members on both sides, the keys
/// that make all of them one group: the first left group's member with
/// each right group's, and the first right group's with each other left
/// group's. Two members of one leaf start apart. Each join also takes
/// the other conditions not `placed` yet whose leaves it has.
fn build(
    tree: &Tree,
    leaves: &[LogicalPlan],
    keys: &Keys,
    placed: &mut [bool],
) -> DfResult<(LogicalPlan, Vec<Option<usize>>)> {
    let (l, r) = match tree {
        Tree::Leaf(i) => {
            let groups = keys
                .members
                .iter()
                .enumerate()
                .map(|(m, member)| (member.leaf == *i).then_some(m))
                .collect();
            return Ok((leaves[*i].clone(), groups));
        }
        Tree::Join(l, r) => (l, r),
    };
    let (left, left_groups) = build(l, leaves, keys, placed)?;
    let (right, right_groups) = build(r, leaves, keys, placed)?;
    let mut on = Vec::new();
    let mut groups: Vec<Option<usize>> = left_groups
        .iter()
        .zip(&right_groups)
        .map(|(a, b)| a.or(*b))
        .collect();
    for class in 0..keys.classes {
        // Each group of the class on a side, by its first member.
        let firsts = |side: &[Option<usize>]| {
            let mut seen: Vec<(usize, usize)> = Vec::new();
            for (m, g) in side.iter().enumerate() {
                if let Some(g) = g {
                    if keys.members[m].class == class && !seen.iter().any(|(sg, _)| sg == g) {
                        seen.push((*g, m));
                    }
                }
            }
            seen
        };
        let (lefts, rights) = (firsts(&left_groups), firsts(&right_groups));
        let (Some(&(left_group, l0)), Some(&(_, r0))) = (lefts.first(), rights.first()) else {
            continue;
        };
        let expr = |m: usize| keys.members[m].expr.clone();
        for &(_, rm) in &rights {
            on.push((expr(l0), expr(rm)));
        }
        for &(_, lm) in lefts.iter().skip(1) {
            on.push((expr(lm), expr(r0)));
        }
        let merged: Vec<usize> = lefts.iter().chain(&rights).map(|(g, _)| *g).collect();
        for g in groups.iter_mut().flatten() {
            if merged.contains(g) {
                *g = left_group;
            }
        }
    }
    let mut conditions = Vec::new();
    for ((f, reads), done) in keys.filters.iter().zip(placed.iter_mut()) {
        if !*done && reads.iter().all(|&leaf| tree_has(tree, leaf)) {
            *done = true;
            conditions.push(f.clone());
        }
    }
    let join = Join::try_new(
        Arc::new(left),
        Arc::new(right),
        on,
        conjunction(conditions),
        JoinType::Inner,
        JoinConstraint::On,
        NullEquality::NullEqualsNothing,
        false,
    )?;
    Ok((LogicalPlan::Join(join), groups))
}

/// Whether `tree` joins `leaf`.
fn tree_has(tree: &Tree, leaf: usize) -> bool {
    match tree {
        Tree::Leaf(i) => *i == leaf,
        Tree::Join(l, r) => tree_has(l, leaf) || tree_has(r, leaf),
    }
}

/// `plan` projected to `schema`'s columns, in its order.
fn restore_columns(plan: LogicalPlan, schema: &DFSchemaRef) -> DfResult<LogicalPlan> {
    let exprs = schema
        .iter()
        .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect();
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(plan),
    )?))
}

#[cfg(test)]
mod tests;
