//! Integer arithmetic that overflows is an error, as in PostgreSQL and
//! DuckDB, not a wrapped value.
//!
//! DataFusion's `BinaryExpr` adds, subtracts and multiplies with Arrow's
//! wrapping kernels unless it is built `with_fail_on_overflow(true)`, and
//! its planner never builds it so (apache/datafusion#3520, #17539): `SELECT
//! 9223372036854775807 + 1` answered -9223372036854775808, a silent wrong
//! answer, where the same expression pushed into a region scan fails
//! (the coprocessor's arithmetic is checked, `quarry_coprocessor::expr`).
//! Two places make them agree:
//!
//! * **Planned expressions.** [`CheckedArithmetic`], a physical optimizer
//!   rule that runs last, rebuilds every `+`, `-` and `*` whose operands are
//!   integers with the checked kernels, in the nodes that evaluate
//!   expressions in compute: projections, filters, and aggregations'
//!   group keys and arguments. Checked kernels differ from the wrapping
//!   ones only where a value overflows; floats and decimals are left as
//!   DataFusion plans them (DECIMAL results are bounded by their precision
//!   elsewhere, `df/aggregates.rs`).
//! * **Constants.** DataFusion folds constant subexpressions while it
//!   optimizes the logical plan, by evaluating them with the same
//!   wrapping kernels, so the overflow is gone before any physical rule
//!   sees it. [`CheckedConstants`], an analyzer rule (after type
//!   coercion, before the optimizer), evaluates each constant arithmetic
//!   subexpression once with checked kernels and fails the statement if
//!   it overflows — at planning, as PostgreSQL does when it folds
//!   constants (even in a CASE branch no row would take).
//!
//! Not covered yet: sort keys, join conditions and window arguments
//! computed in compute (DataFusion evaluates those inside their own
//! operators), and unary minus of the smallest BIGINT (`NegativeExpr`
//! wraps too). `docs/postgres.md` lists them.

use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;

/// The physical rule: integer `+ - *` in compute's operators are checked.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl PhysicalOptimizerRule for CheckedArithmetic {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(checked_node).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "checked_integer_arithmetic"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with its expressions checked, if it is a kind that evaluates
/// them and any changed.
fn checked_node(node: Arc<dyn ExecutionPlan>) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
    let any = &node;
    if let Some(p) = any.downcast_ref::<ProjectionExec>() {
        let schema = p.input().schema();
        let mut changed = false;
        let exprs = p
            .expr()
            .iter()
            .map(|pe| {
                Ok(ProjectionExpr {
                    expr: checked(&pe.expr, &schema, &mut changed)?,
                    alias: pe.alias.clone(),
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        if !changed {
            return Ok(Transformed::no(node));
        }
        let new = ProjectionExec::try_new(exprs, p.input().clone())?;
        return Ok(Transformed::yes(Arc::new(new)));
    }
    if let Some(f) = any.downcast_ref::<FilterExec>() {
        let mut changed = false;
        let predicate = checked(f.predicate(), &f.input().schema(), &mut changed)?;
        if !changed {
            return Ok(Transformed::no(node));
        }
        let new = FilterExecBuilder::from(f)
            .with_predicate(predicate)
            .build()?;
        return Ok(Transformed::yes(Arc::new(new)));
    }
    if let Some(a) = any.downcast_ref::<AggregateExec>() {
        // A Final stage merges states; only the stages that read rows
        // evaluate keys and arguments.
        if matches!(
            a.mode(),
            AggregateMode::Final | AggregateMode::FinalPartitioned
        ) {
            return Ok(Transformed::no(node));
        }
        return checked_aggregate(a).map(|n| match n {
            Some(n) => Transformed::yes(n),
            None => Transformed::no(node),
        });
    }
    Ok(Transformed::no(node))
}

fn checked_aggregate(a: &AggregateExec) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let schema = a.input_schema();
    let mut changed = false;
    let group = a.group_expr();
    let keys = |exprs: &[(Arc<dyn PhysicalExpr>, String)], changed: &mut bool| {
        exprs
            .iter()
            .map(|(e, name)| Ok((checked(e, &schema, changed)?, name.clone())))
            .collect::<DfResult<Vec<_>>>()
    };
    let group_by = PhysicalGroupBy::new(
        keys(group.expr(), &mut changed)?,
        keys(group.null_expr(), &mut changed)?,
        group.groups().to_vec(),
        group.has_grouping_set(),
    );
    let mut aggregates = Vec::with_capacity(a.aggr_expr().len());
    for f in a.aggr_expr() {
        let mut mine = false;
        let args = f
            .expressions()
            .iter()
            .map(|e| checked(e, &schema, &mut mine))
            .collect::<DfResult<Vec<_>>>()?;
        if !mine {
            aggregates.push(f.clone());
            continue;
        }
        let order_by = f.order_bys().iter().map(|s| s.expr.clone()).collect();
        match f.with_new_expressions(args, order_by) {
            Some(new) => {
                changed = true;
                aggregates.push(Arc::new(new));
            }
            None => aggregates.push(f.clone()),
        }
    }
    let filters = a
        .filter_expr()
        .iter()
        .map(|f| {
            f.as_ref()
                .map(|e| checked(e, &schema, &mut changed))
                .transpose()
        })
        .collect::<DfResult<Vec<_>>>()?;
    if !changed {
        return Ok(None);
    }
    let new = AggregateExec::try_new(
        *a.mode(),
        group_by,
        aggregates,
        filters,
        a.input().clone(),
        schema,
    )?
    .with_limit_options(a.limit_options());
    Ok(Some(Arc::new(new)))
}

/// `expr` with its integer `+ - *` checked; `changed` set if any was not.
fn checked(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    changed: &mut bool,
) -> DfResult<Arc<dyn PhysicalExpr>> {
    let t = expr.clone().transform_up(|e| {
        let Some(b) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        if !matches!(
            b.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        ) || !is_integer(&b.left().data_type(schema)?)
            || !is_integer(&b.right().data_type(schema)?)
        {
            return Ok(Transformed::no(e));
        }
        // (BinaryExpr does not say whether it is checked; rebuilding one
        // that is changes nothing.)
        let checked = BinaryExpr::new(b.left().clone(), *b.op(), b.right().clone())
            .with_fail_on_overflow(true);
        Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>))
    })?;
    *changed |= t.transformed;
    Ok(t.data)
}

fn is_integer(t: &DataType) -> bool {
    t.is_integer()
}

/// The analyzer rule: a constant integer expression that overflows fails
/// the statement instead of being folded into a wrapped value.
#[derive(Debug, Default)]
pub struct CheckedConstants;

impl AnalyzerRule for CheckedConstants {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        let props = ExecutionProps::new();
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|sub| check_constant(sub, &props))?;
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "checked_integer_constants"
    }
}

/// Evaluates `e` with checked arithmetic when it is constant arithmetic;
/// an overflow is the statement's error. Anything else evaluation could
/// say is left to the usual planning, which will say it again.
fn check_constant(e: &Expr, props: &ExecutionProps) -> DfResult<TreeNodeRecursion> {
    let Expr::BinaryExpr(b) = e else {
        return Ok(TreeNodeRecursion::Continue);
    };
    if !matches!(b.op, Operator::Plus | Operator::Minus | Operator::Multiply) || !is_constant(e) {
        return Ok(TreeNodeRecursion::Continue);
    }
    let empty = DFSchema::empty();
    let Ok(physical) = create_physical_expr(e, &empty, props, &PhysicalPlanningContext::default())
    else {
        return Ok(TreeNodeRecursion::Continue);
    };
    let schema: SchemaRef = Arc::new(Schema::empty());
    let physical = checked(&physical, &schema, &mut false)?;
    let one_row = RecordBatch::try_new_with_options(
        schema,
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    match physical.evaluate(&one_row) {
        Err(err) if is_overflow(&err) => Err(err),
        // Evaluated: its parts need no second look.
        _ => Ok(TreeNodeRecursion::Jump),
    }
}

/// Literals combined by arithmetic, casts and signs only.
fn is_constant(e: &Expr) -> bool {
    let mut constant = true;
    let _ = e.apply(|sub| {
        constant &= matches!(
            sub,
            Expr::Literal(..)
                | Expr::BinaryExpr(_)
                | Expr::Cast(_)
                | Expr::TryCast(_)
                | Expr::Negative(_)
                | Expr::Alias(_)
        );
        Ok(match constant {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    constant
}

fn is_overflow(e: &DataFusionError) -> bool {
    matches!(
        e.find_root(),
        DataFusionError::ArrowError(err, _)
            if matches!(err.as_ref(), arrow::error::ArrowError::ArithmeticOverflow(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int32Array, Int64Array};
    use arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::col;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int32, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![i64::MAX, 1])),
            Arc::new(Int32Array::from(vec![i32::MAX, 1])),
        ];
        RecordBatch::try_new(schema, columns).unwrap()
    }

    #[test]
    fn integer_arithmetic_is_rebuilt_checked_and_then_overflow_is_an_error() {
        let batch = batch();
        let schema = batch.schema();
        for (name, op) in [
            ("a", Operator::Plus),
            ("b", Operator::Plus),
            ("a", Operator::Multiply),
        ] {
            let c = col(name, &schema).unwrap();
            let wrapping: Arc<dyn PhysicalExpr> =
                Arc::new(BinaryExpr::new(c.clone(), op, c.clone()));
            assert!(
                wrapping.evaluate(&batch).is_ok(),
                "DataFusion wraps {name} {op}"
            );
            let mut changed = false;
            let e = checked(&wrapping, &schema, &mut changed).unwrap();
            assert!(changed);
            let err = e.evaluate(&batch).unwrap_err();
            assert!(is_overflow(&err), "{err}");
            // Values that fit answer as before.
            let fits = batch.slice(1, 1);
            assert_eq!(
                e.evaluate(&fits).unwrap().into_array(1).unwrap().as_ref(),
                wrapping
                    .evaluate(&fits)
                    .unwrap()
                    .into_array(1)
                    .unwrap()
                    .as_ref()
            );
        }
        // Comparisons are not arithmetic.
        let a = col("a", &schema).unwrap();
        let cmp: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(a.clone(), Operator::Lt, a));
        let mut changed = false;
        checked(&cmp, &schema, &mut changed).unwrap();
        assert!(!changed);
    }

    #[test]
    fn a_constant_that_overflows_is_found_and_one_that_fits_is_not() {
        use datafusion::logical_expr::{cast, lit};
        let props = ExecutionProps::new();
        let over = lit(i64::MAX) + lit(1i64);
        assert!(check_constant(&over, &props).is_err());
        let nested = (lit(i64::MAX) - lit(1i64)) * cast(lit(2i32), DataType::Int64);
        assert!(check_constant(&nested, &props).is_err());
        let fits = lit(i64::MAX - 1) + lit(1i64);
        assert!(check_constant(&fits, &props).is_ok());
        let column = datafusion::logical_expr::col("x") + lit(i64::MAX);
        assert!(check_constant(&column, &props).is_ok(), "not a constant");
    }
}
