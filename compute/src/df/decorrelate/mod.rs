//! Any correlated subquery, unnested: a domain join pushed down until the
//! correlation disappears (Neumann & Kemper, "Unnesting Arbitrary
//! Queries"; Spark's domain joins).
//!
//! DataFusion decorrelates the common shapes itself: `IN` and `EXISTS` in
//! a WHERE clause become semi and anti joins, and a scalar subquery whose
//! correlated predicates are equalities becomes a left join on them. Its
//! analyzer refuses a correlated scalar subquery that is not an
//! aggregate, and what its rules cannot unnest (a non-equality
//! correlation under an aggregate, `EXISTS` in a SELECT list, a
//! correlation below a join) reaches the physical planner as
//! "Physical plan does not support logical expression ScalarSubquery".
//! This module unnests those, by one mechanism:
//!
//! ```text
//!   node(… (subquery S over outer columns c) …)        S has the outer
//!     └─ input                                          columns c in it
//! becomes
//!   node(… __qsN …)
//!     └─ input LEFT JOIN S' ON input.c ≡ S'.d           (≡: NULLs match)
//!   where S' = S evaluated for every d in D = DISTINCT input.c:
//!         D is pushed down through S's operators (a Filter keeps its
//!         predicate with d for c, a Projection and an Aggregate carry d
//!         along, an Aggregate groups by it, a LIMIT becomes a
//!         row_number() per d, a join takes D on the side that needs it)
//!         until the subtree below no longer mentions c, where D is
//!         cross-joined in.
//! ```
//!
//! * **Scalar aggregates keep their one row per d.** An aggregate without
//!   GROUP BY answers one row even over no rows (`count(*)` is 0), so
//!   there D is left-joined to the per-d aggregate and a missing d gets
//!   the empty aggregate's value (0 for `count`, NULL for the others).
//! * **A scalar subquery answers at most one row.** Unless S is known to
//!   (an aggregate, `LIMIT 1`), its rows per d are counted and
//!   [`OneRow`] fails the query when a d has more than one, as PostgreSQL
//!   does ("more than one row returned by a subquery used as an
//!   expression").
//! * **EXISTS, IN, ANY and ALL become scalar subqueries.** `EXISTS (S)` is
//!   `(SELECT count(*) FROM S) > 0`; `x IN (S)` is true if a row equals x,
//!   else NULL if a comparison with a row is NULL (x or the row is NULL),
//!   else false — SQL's three-valued IN (DataFusion turns ANY and ALL into
//!   such EXISTS first).
//!
//! Two entry points share the mechanism: an analyzer rule
//! ([`DecorrelateRefused`]) takes the subqueries DataFusion's checks would
//! refuse before they refuse them, and those whose shape its rules do not
//! unnest or unnest wrongly (a reference to a query two levels out is
//! lost; a correlation below a GROUP BY is pulled above it), and an
//! optimizer rule
//! ([`DecorrelateLeftovers`]), placed right after DataFusion's own
//! decorrelation rules, takes whatever those left. The subqueries
//! DataFusion unnests keep its plans (TPC-H's among them), and the joins
//! this module makes go through the rest of the optimizer like any
//! other: filters reach the region scans below them.
//!
//! CAVEATS
//!
//! * D is the outer input's distinct correlated values, so that input is
//!   planned twice (DuckDB shares it through a "delim join"): its region
//!   scans run twice (Quarry's shared-scan rule runs the domain's
//!   aggregating scans once). A WHERE clause's conjuncts without
//!   subqueries filter first, so D holds only the values of rows that
//!   pass them, and those filters reach D's region scans.
//! * A correlation that survives to a join of both sides joins them on
//!   `d IS NOT DISTINCT FROM d'` as well, a nested-loop join unless the
//!   join has equality keys of its own.
//! * A subquery in a CASE branch is evaluated for every row, not only
//!   where the branch is taken: a scalar subquery with several rows fails
//!   the query even where PostgreSQL would not have looked.
//! * Subqueries in a join condition, in DISTINCT ON, or below UNNEST and
//!   recursive CTEs are not unnested ("not implemented").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::ExprSchema;
use datafusion::common::{
    not_impl_err, Column, DataFusionError, NullEquality, Result as DfResult, ScalarValue,
};
use datafusion::functions_aggregate::expr_fn::{count, first_value};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::{Exists, InSubquery, ScalarFunction, WindowFunction};
use datafusion::logical_expr::logical_plan::check_subquery_expr;
use datafusion::logical_expr::{
    and, lit, Aggregate, BinaryExpr, Case, ColumnarValue, Distinct, Expr, ExprFunctionExt,
    ExprSchemable, Filter, JoinType, Limit, LogicalPlan, LogicalPlanBuilder, Operator, Projection,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, SortExpr, Subquery,
    SubqueryAlias, Union, Volatility, Window,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{AnalyzerRule, OptimizerConfig, OptimizerRule};

use crate::Error;

mod push;
use push::push;

/// Names of the columns this module adds (`__qs7`, `__qd12`, …), unique
/// in the process so that unnesting the same plan twice never collides.
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

fn fresh(prefix: &str) -> String {
    format!("__q{prefix}{}", NEXT_NAME.fetch_add(1, Ordering::Relaxed))
}

fn column(name: &str) -> Expr {
    Expr::Column(Column::new_unqualified(name))
}

/// The analyzer rule: unnests the subqueries DataFusion's plan checks
/// (`check_subquery_expr`) would refuse, such as a correlated scalar
/// subquery that is not an aggregate, and those its rules would get
/// wrong or not unnest (`datafusion_unnests`).
#[derive(Debug, Default)]
pub struct DecorrelateRefused;

impl AnalyzerRule for DecorrelateRefused {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        unnest(plan, Which::Refused).data()
    }

    fn name(&self) -> &str {
        "quarry_decorrelate_refused"
    }
}

/// The optimizer rule: unnests every subquery DataFusion's own
/// decorrelation rules left in the plan.
#[derive(Debug, Default)]
pub struct DecorrelateLeftovers;

impl OptimizerRule for DecorrelateLeftovers {
    fn name(&self) -> &str {
        "quarry_decorrelate_leftovers"
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
        unnest(plan, Which::All)
    }
}

/// Installs both rules: the analyzer rule last among the analyzer's
/// (after type coercion), the optimizer rule right after DataFusion's
/// `scalar_subquery_to_join`.
pub fn install(state: &mut datafusion::execution::SessionState) {
    state.add_analyzer_rule(Arc::new(DecorrelateRefused));
    super::add_optimizer_rule_after(
        state,
        "scalar_subquery_to_join",
        Arc::new(DecorrelateLeftovers),
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Which {
    /// Only subqueries DataFusion would refuse or not unnest.
    Refused,
    /// Every subquery left.
    All,
}

fn is_subquery(e: &Expr) -> bool {
    matches!(
        e,
        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
    )
}

/// Every node of `plan`, inner subqueries first, with its subqueries
/// unnested.
fn unnest(plan: LogicalPlan, which: Which) -> DfResult<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|node| unnest_node(node, which))
}

/// True if `node` has a subquery expression that `which` takes.
fn wanted(node: &LogicalPlan, which: Which) -> bool {
    let mut found = false;
    let _ = node.apply_expressions(|e| {
        e.apply(|e| {
            let take = match which {
                _ if !is_subquery(e) => false,
                Which::All => true,
                Which::Refused => !datafusion_unnests(node, e),
            };
            found |= take;
            Ok(match take {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })
    });
    found
}

/// True if DataFusion's own rules unnest the subquery `e` of `node`
/// correctly, so it is left to them (their plans for these shapes are
/// better than a domain join: TPC-H's subqueries are all of them):
///
/// * it passes DataFusion's plan checks;
/// * every outer column it mentions directly is `node`'s input's (a
///   reference to a query further out is lost by DataFusion's rules);
/// * a scalar subquery is an aggregate without GROUP BY over filters,
///   projections and inner joins, whose correlated conditions are
///   equalities (`inner = outer`);
/// * an EXISTS or IN is in a WHERE clause, over filters, projections and
///   inner joins, correlated by any conditions.
fn datafusion_unnests(node: &LogicalPlan, e: &Expr) -> bool {
    let (s, scalar) = match e {
        Expr::ScalarSubquery(s) => (s, true),
        Expr::Exists(Exists { subquery, .. }) | Expr::InSubquery(InSubquery { subquery, .. }) => {
            (subquery, false)
        }
        _ => return true,
    };
    if check_subquery_expr(node, &s.subquery, e).is_err() {
        return false;
    }
    let schema = merge_inputs(node);
    let mut in_scope = true;
    let _ = s.subquery.apply(|n| {
        n.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::OuterReferenceColumn(_, c) = e {
                    in_scope &= schema.iter().any(|s| s.has_column(c));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    if !in_scope {
        return false;
    }
    match scalar {
        true => match below_renames_without_outer(&s.subquery) {
            Some(LogicalPlan::Aggregate(a)) => {
                a.group_expr.is_empty()
                    && !mentions_outer_directly(&LogicalPlan::Aggregate(a.clone()))
                    && correlated_only_by(&a.input, true)
            }
            _ => false,
        },
        false => matches!(node, LogicalPlan::Filter(_)) && correlated_only_by(&s.subquery, false),
    }
}

/// The input schemas of `node` (what its expressions read).
fn merge_inputs(node: &LogicalPlan) -> Vec<datafusion::common::DFSchemaRef> {
    node.inputs().iter().map(|i| i.schema().clone()).collect()
}

/// True if one of `node`'s own expressions (not its subqueries') reads an
/// outer column.
fn mentions_outer_directly(node: &LogicalPlan) -> bool {
    node.expressions().iter().any(|e| {
        e.exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(..))))
            .unwrap_or(false)
    })
}

/// `plan` below projections and aliases that read no outer column.
fn below_renames_without_outer(plan: &LogicalPlan) -> Option<&LogicalPlan> {
    match plan {
        LogicalPlan::Projection(p) if !mentions_outer_directly(plan) => {
            below_renames_without_outer(&p.input)
        }
        LogicalPlan::SubqueryAlias(a) => below_renames_without_outer(&a.input),
        LogicalPlan::Projection(_) => None,
        other => Some(other),
    }
}

/// True if outer columns appear in `plan` only in filters reached through
/// filters, projections, aliases and inner joins, and (with `equalities`)
/// only as `inner = outer` conjuncts.
fn correlated_only_by(plan: &LogicalPlan, equalities: bool) -> bool {
    let mut ok = true;
    let _ = plan.apply(|n| {
        let allowed = match n {
            LogicalPlan::Filter(f) => {
                !equalities
                    || datafusion::logical_expr::utils::split_conjunction(&f.predicate)
                        .into_iter()
                        .all(|c| !c.contains_outer() || is_outer_equality(c))
            }
            _ => !mentions_outer_directly(n),
        };
        let below_ok = matches!(
            n,
            LogicalPlan::Filter(_)
                | LogicalPlan::Projection(_)
                | LogicalPlan::SubqueryAlias(_)
                | LogicalPlan::TableScan(_)
                | LogicalPlan::EmptyRelation(_)
                | LogicalPlan::Values(_)
        ) || matches!(n, LogicalPlan::Join(j) if j.join_type == JoinType::Inner);
        // A node other than those hides the correlation below it from
        // DataFusion's pull-up (an aggregate, an outer join, a limit).
        let hides = !below_ok && contains_outer_below(n);
        if !allowed || hides {
            ok = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    ok
}

fn contains_outer_below(n: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = n.apply(|m| {
        found |= mentions_outer_directly(m);
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// `inner = outer` (either way round), where one side reads only outer
/// columns and the other none.
fn is_outer_equality(e: &Expr) -> bool {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            let (l, r) = (left.contains_outer(), right.contains_outer());
            l != r
        }
        _ => false,
    }
}

fn unnest_node(node: LogicalPlan, which: Which) -> DfResult<Transformed<LogicalPlan>> {
    if !wanted(&node, which) {
        return Ok(Transformed::no(node));
    }
    if let Some(split) = plain_conjuncts_first(&node)? {
        return unnest_node(split, which);
    }
    match &node {
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Aggregate(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Window(_) => {}
        // Left for DataFusion, which says what it does not support.
        _ => return Ok(Transformed::no(node)),
    }
    let [input] = node.inputs()[..] else {
        return Ok(Transformed::no(node));
    };
    let mut input = input.clone();
    let schema = node.schema().clone();
    let mut exprs = Vec::new();
    for (i, e) in node.expressions().into_iter().enumerate() {
        let new = e.clone().transform_up(|e| {
            if !is_subquery(&e) {
                return Ok(Transformed::no(e));
            }
            let (joined, value) = replace(input.clone(), e)?;
            input = joined;
            Ok(Transformed::yes(value))
        })?;
        exprs.push(match new.transformed {
            // Keep the output name (Projection, Aggregate and Window
            // expressions name their columns).
            true => keep_name(&node, &schema, i, &e, new.data)?,
            false => new.data,
        });
    }
    let rebuilt = node.with_new_exprs(exprs, vec![input])?;
    let rebuilt = match rebuilt {
        // Filter, Sort and Window pass their input's columns through: the
        // joined ones are dropped again.
        LogicalPlan::Filter(_) | LogicalPlan::Sort(_) | LogicalPlan::Window(_) => {
            LogicalPlanBuilder::from(rebuilt)
                .project(schema.columns().into_iter().map(Expr::Column))?
                .build()?
        }
        other => other,
    };
    Ok(Transformed::yes(rebuilt))
}

/// A filter whose predicate ANDs conjuncts with subqueries and without,
/// as the ones without filtering first (None if it is not one): the
/// domain of the subqueries' correlated values is then taken from the
/// rows that pass them (TPC-H-like `o_orderdate` ranges keep their
/// pushdown into the domain's region scan) rather than from every row.
fn plain_conjuncts_first(node: &LogicalPlan) -> DfResult<Option<LogicalPlan>> {
    let LogicalPlan::Filter(f) = node else {
        return Ok(None);
    };
    let has_subquery = |e: &Expr| e.exists(|e| Ok(is_subquery(e)));
    let (mut plain, mut rest) = (Vec::new(), Vec::new());
    for c in datafusion::logical_expr::utils::split_conjunction(&f.predicate) {
        match has_subquery(c)? {
            true => rest.push(c.clone()),
            false => plain.push(c.clone()),
        }
    }
    let (Some(plain), Some(rest)) = (
        datafusion::logical_expr::utils::conjunction(plain),
        datafusion::logical_expr::utils::conjunction(rest),
    ) else {
        return Ok(None);
    };
    let below = LogicalPlan::Filter(Filter::try_new(plain, f.input.clone())?);
    Ok(Some(LogicalPlan::Filter(Filter::try_new(
        rest,
        Arc::new(below),
    )?)))
}

/// `new` named as the `i`th expression of `node` was, where that name is
/// an output column's.
fn keep_name(
    node: &LogicalPlan,
    schema: &datafusion::common::DFSchemaRef,
    i: usize,
    old: &Expr,
    new: Expr,
) -> DfResult<Expr> {
    match node {
        LogicalPlan::Projection(_) => {
            let (q, f) = schema.qualified_field(i);
            Ok(new.alias_qualified(q.cloned(), f.name()))
        }
        LogicalPlan::Aggregate(_) | LogicalPlan::Window(_) => {
            let (q, name) = old.qualified_name();
            Ok(new.alias_qualified(q, name))
        }
        _ => Ok(new),
    }
}

/// Replaces one subquery expression over `input`: the input joined with
/// what the expression needs, and the expression that reads it.
fn replace(input: LogicalPlan, e: Expr) -> DfResult<(LogicalPlan, Expr)> {
    match e {
        Expr::ScalarSubquery(s) => join_scalar(input, &s.subquery),
        Expr::Exists(Exists { subquery, negated }) => {
            let (input, n) = join_count(input, subquery.subquery.as_ref().clone())?;
            let op = match negated {
                false => Operator::Gt,
                true => Operator::Eq,
            };
            Ok((input, binary(n, op, lit(0i64))))
        }
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) => {
            let (input, value) = join_in(input, *expr, &subquery)?;
            Ok((
                input,
                match negated {
                    false => value,
                    true => Expr::Not(Box::new(value)),
                },
            ))
        }
        other => Ok((input, other)),
    }
}

fn binary(l: Expr, op: Operator, r: Expr) -> Expr {
    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r)))
}

/// `x IN (S)` as two counts: rows equal to x, and rows whose comparison
/// with x is NULL.
fn join_in(input: LogicalPlan, x: Expr, s: &Subquery) -> DfResult<(LogicalPlan, Expr)> {
    let plan = s.subquery.as_ref();
    let right = Expr::Column(Column::from(plan.schema().qualified_field(0)));
    let outer_schema = input.schema().clone();
    let x_type = x.get_type(&outer_schema)?;
    let right_type = right.get_type(plan.schema())?;
    let left = to_outer(x, &outer_schema)?;
    let (left, right) = match x_type == right_type {
        true => (left, right),
        false => {
            let common = datafusion::logical_expr::type_coercion::binary::comparison_coercion(
                &x_type,
                &right_type,
            )
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "IN cannot compare {x_type} with the subquery's {right_type}"
                ))
            })?;
            (
                left.cast_to(&common, &outer_schema)?,
                right.cast_to(&common, plan.schema())?,
            )
        }
    };
    let cmp = binary(left, Operator::Eq, right);
    let matching = LogicalPlanBuilder::from(plan.clone())
        .filter(Expr::IsTrue(Box::new(cmp.clone())))?
        .build()?;
    let unknown = LogicalPlanBuilder::from(plan.clone())
        .filter(Expr::IsNull(Box::new(cmp)))?
        .build()?;
    let (input, matches) = join_count(input, matching)?;
    let (input, unknowns) = join_count(input, unknown)?;
    let value = Expr::Case(Case::new(
        None,
        vec![
            (
                Box::new(binary(matches, Operator::Gt, lit(0i64))),
                Box::new(lit(true)),
            ),
            (
                Box::new(binary(unknowns, Operator::Gt, lit(0i64))),
                Box::new(lit(ScalarValue::Boolean(None))),
            ),
        ],
        Some(Box::new(lit(false))),
    ));
    Ok((input, value))
}

/// `expr`'s columns, which are `schema`'s, as outer references (for use
/// inside a subquery over that schema).
fn to_outer(expr: Expr, schema: &datafusion::common::DFSchema) -> DfResult<Expr> {
    expr.transform_up(|e| match e {
        Expr::Column(c) => {
            let field = schema.field_from_column(&c)?;
            Ok(Transformed::yes(Expr::OuterReferenceColumn(
                Arc::clone(field),
                c,
            )))
        }
        e => Ok(Transformed::no(e)),
    })
    .data()
}

/// `input` joined with the number of rows of `plan` (for each of
/// input's rows), and the expression that reads that count.
fn join_count(input: LogicalPlan, plan: LogicalPlan) -> DfResult<(LogicalPlan, Expr)> {
    let counted = LogicalPlanBuilder::from(plan)
        .aggregate(Vec::<Expr>::new(), vec![count(lit(1i64))])?
        .build()?;
    join_scalar(input, &counted)
}

/// The correlated columns of a subquery: outer references to `input`'s
/// columns (references to queries further out stay references).
struct Domain {
    input: LogicalPlan,
    cols: Vec<Column>,
}

impl Domain {
    fn of(input: &LogicalPlan, plan: &LogicalPlan) -> Domain {
        let mut cols: Vec<Column> = Vec::new();
        let _ = plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Expr::OuterReferenceColumn(_, c) = e {
                        if input.schema().has_column(c) && !cols.contains(c) {
                            cols.push(c.clone());
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        });
        Domain {
            input: input.clone(),
            cols,
        }
    }

    fn fresh_names(&self) -> Vec<String> {
        self.cols.iter().map(|_| fresh("d")).collect()
    }

    /// DISTINCT of the correlated columns, named `names`.
    fn plan(&self, names: &[String]) -> DfResult<LogicalPlan> {
        LogicalPlanBuilder::from(self.input.clone())
            .project(
                self.cols
                    .iter()
                    .zip(names)
                    .map(|(c, n)| Expr::Column(c.clone()).alias(n)),
            )?
            .distinct()?
            .build()
    }

    /// True if `plan` mentions a correlated column.
    fn in_plan(&self, plan: &LogicalPlan) -> bool {
        let mut found = false;
        let _ = plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                found |= self.in_expr(e);
                Ok(TreeNodeRecursion::Continue)
            })?;
            Ok(match found {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        });
        found
    }

    fn in_expr(&self, e: &Expr) -> bool {
        e.exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(_, c) if self.cols.contains(c))))
            .unwrap_or(false)
    }

    /// `e` with each correlated column read from the domain's column of
    /// `names`.
    fn bind(&self, e: Expr, names: &[String]) -> DfResult<Expr> {
        e.transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, c) if self.cols.contains(&c) => {
                let i = self.cols.iter().position(|x| *x == c).expect("listed");
                Ok(Transformed::yes(column(&names[i])))
            }
            e => Ok(Transformed::no(e)),
        })
        .data()
    }

    /// `e` bound, keeping the name it had (`schema`'s `i`th column).
    fn bind_named(
        &self,
        e: Expr,
        names: &[String],
        schema: &datafusion::common::DFSchema,
        i: usize,
    ) -> DfResult<Expr> {
        if !self.in_expr(&e) {
            return Ok(e);
        }
        let bound = self.bind(e, names)?;
        let (q, f) = schema.qualified_field(i);
        Ok(bound.alias_qualified(q.cloned(), f.name()))
    }

    fn columns(names: &[String]) -> Vec<Expr> {
        names.iter().map(|n| column(n)).collect()
    }
}

/// `input` left-joined with the value of the one-column `plan` for each
/// of its rows, and the expression that reads it.
fn join_scalar(input: LogicalPlan, plan: &LogicalPlan) -> DfResult<(LogicalPlan, Expr)> {
    let name = fresh("s");
    let dom = Domain::of(&input, plan);
    let names = dom.fresh_names();
    let pushed = match dom.cols.is_empty() {
        true => plan.clone(),
        false => push(plan, &dom, &names)?,
    };
    let value = Expr::Column(Column::from(pushed.schema().qualified_field(names.len())));
    let keys = Domain::columns(&names);
    let one =
        match at_most_one_row(plan) && !dom.cols.is_empty() || exactly_one_row(plan) {
            true => LogicalPlanBuilder::from(pushed)
                .project(keys.iter().cloned().chain([value.alias(&name)]))?
                .build()?,
            false => {
                let (n, v) = (fresh("n"), fresh("v"));
                let udf = Arc::new(ScalarUDF::new_from_impl(OneRow::new()));
                LogicalPlanBuilder::from(pushed)
                    .aggregate(
                        keys.clone(),
                        vec![
                            count(lit(1i64)).alias(&n),
                            first_value(value, vec![]).alias(&v),
                        ],
                    )?
                    .project(
                        keys.iter().cloned().chain([Expr::ScalarFunction(
                            ScalarFunction::new_udf(udf, vec![column(&n), column(&v)]),
                        )
                        .alias(&name)]),
                    )?
                    .build()?
            }
        };
    let joined = match dom.cols.is_empty() {
        // One row (the aggregate above, or the scalar aggregate): a
        // cross join keeps every input row.
        true => LogicalPlanBuilder::from(input).cross_join(one)?.build()?,
        false => {
            let left: Vec<Column> = dom.cols.clone();
            let right: Vec<Column> = names.iter().map(Column::new_unqualified).collect();
            LogicalPlanBuilder::from(input)
                .join_detailed(
                    one,
                    JoinType::Left,
                    (left, right),
                    None,
                    NullEquality::NullEqualsNull,
                )?
                .build()?
        }
    };
    Ok((joined, column(&name)))
}

/// Strips the nodes that keep the number of rows.
fn below_renames(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::Projection(p) => below_renames(&p.input),
        LogicalPlan::SubqueryAlias(a) => below_renames(&a.input),
        other => other,
    }
}

/// An aggregate without GROUP BY (under projections and aliases): one
/// row, even over none.
pub(super) fn exactly_one_row(plan: &LogicalPlan) -> bool {
    matches!(below_renames(plan), LogicalPlan::Aggregate(a) if a.group_expr.is_empty())
}

/// At most one row (for each value of the correlated columns).
fn at_most_one_row(plan: &LogicalPlan) -> bool {
    match below_renames(plan) {
        LogicalPlan::Aggregate(a) => a.group_expr.is_empty(),
        LogicalPlan::Filter(f) => at_most_one_row(&f.input),
        LogicalPlan::Sort(s) => s.fetch.is_some_and(|n| n <= 1) || at_most_one_row(&s.input),
        LogicalPlan::Limit(l) => {
            matches!(l.get_fetch_type(), Ok(datafusion::logical_expr::logical_plan::FetchType::Literal(Some(n))) if n <= 1)
                || at_most_one_row(&l.input)
        }
        other => other.max_rows().is_some_and(|n| n <= 1),
    }
}

/// `one_row(n, v)`: `v`, or the error PostgreSQL gives a scalar subquery
/// that answers more than one row when `n` (its row count) is over 1.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OneRow {
    signature: Signature,
}

impl OneRow {
    pub const NAME: &'static str = "one_row";

    pub fn new() -> Self {
        OneRow {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl Default for OneRow {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for OneRow {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[1].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new(
            self.name(),
            args.arg_fields[1].data_type().clone(),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [n, value] = <[ColumnarValue; 2]>::try_from(args.args)
            .map_err(|_| DataFusionError::Internal("one_row takes two arguments".into()))?;
        let several = match &n {
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => *n > 1,
            ColumnarValue::Scalar(_) => false,
            ColumnarValue::Array(a) => match a.data_type() {
                DataType::Int64 => {
                    let a = a.as_primitive::<Int64Type>();
                    (0..a.len()).any(|i| a.is_valid(i) && a.value(i) > 1)
                }
                _ => false,
            },
        };
        if several {
            return Err(DataFusionError::External(Box::new(Error::InvalidInput(
                "more than one row returned by a subquery used as an expression".into(),
            ))));
        }
        Ok(value)
    }
}
