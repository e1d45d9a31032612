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
//!   integers with the checked kernels, and unary minus of an integer as a
//!   checked `0 - x`, in the nodes that evaluate expressions in compute:
//!   projections, filters, sorts' keys, aggregations' group keys and
//!   arguments, and joins' keys and conditions (hash and nested-loop). Checked kernels differ from the wrapping
//!   ones only where a value overflows; floats and decimals are left as
//!   DataFusion plans them (DECIMAL results are bounded by their precision
//!   elsewhere, `df/aggregates.rs`).
//! * **Constants.** DataFusion folds constant subexpressions while it
//!   optimizes the logical plan, by evaluating them with the same
//!   wrapping kernels, so the overflow is gone before any physical rule
//!   sees it. [`CheckedConstants`], an analyzer rule (after type
//!   coercion, before the optimizer), evaluates each constant arithmetic
//!   subexpression once with checked kernels, and one that overflows
//!   becomes [`OverflowError`], a volatile call that fails where a row
//!   reaches it: `SELECT 9223372036854775807 + 1` fails, `CASE WHEN false
//!   THEN 9223372036854775807 + 1 ELSE 0 END` answers 0, as in PostgreSQL.
//!
//! Not covered yet: window arguments and ordered
//! aggregates' arguments computed in compute (DataFusion evaluates those
//! inside their own operators, and its window expressions without a
//! frame cannot be rebuilt with new arguments; an ordered aggregate may
//! have been reversed by DataFusion's ordering rules, which rebuilding it
//! would undo). `docs/postgres.md` lists them.

use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal, NegativeExpr};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{
    HashJoinExec, NestedLoopJoinExec, NestedLoopJoinExecBuilder,
};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
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
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
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
        // (Keeping whatever metadata the planner gave the schema.)
        let new =
            ProjectionExec::try_new_with_schema_metadata(exprs, p.input().clone(), &p.schema())?;
        return Ok(Transformed::yes(Arc::new(new)));
    }
    if let Some(f) = node.downcast_ref::<FilterExec>() {
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
    if let Some(sort) = node.downcast_ref::<SortExec>() {
        // Sort keys computed in compute (ORDER BY a * b): a wrapped key
        // would sort the rows silently wrong.
        let schema = sort.input().schema();
        let mut changed = false;
        let keys = sort
            .expr()
            .iter()
            .map(|k| {
                Ok(PhysicalSortExpr {
                    expr: checked(&k.expr, &schema, &mut changed)?,
                    options: k.options,
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        let Some(ordering) = LexOrdering::new(keys).filter(|_| changed) else {
            return Ok(Transformed::no(node));
        };
        let new = SortExec::new(ordering, sort.input().clone())
            .with_preserve_partitioning(sort.preserve_partitioning())
            .with_fetch(sort.fetch());
        return Ok(Transformed::yes(Arc::new(new)));
    }
    if let Some(h) = node.downcast_ref::<HashJoinExec>() {
        // Join keys computed in the join (`ON a.x + 1 = b.y`), each on its
        // side's rows, and the join's other conditions on the joined
        // columns: a wrapped value would match the wrong rows.
        let (left, right) = (h.left().schema(), h.right().schema());
        let mut changed = false;
        let on = h
            .on()
            .iter()
            .map(|(l, r)| {
                Ok((
                    checked(l, &left, &mut changed)?,
                    checked(r, &right, &mut changed)?,
                ))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let filter = checked_join_filter(h.filter(), &mut changed)?;
        if !changed {
            return Ok(Transformed::no(node));
        }
        let new = h.builder().with_on(on).with_filter(filter).build_exec()?;
        return Ok(Transformed::yes(new));
    }
    if let Some(j) = node.downcast_ref::<NestedLoopJoinExec>() {
        let mut changed = false;
        let filter = checked_join_filter(j.filter(), &mut changed)?;
        if !changed {
            return Ok(Transformed::no(node));
        }
        let new = NestedLoopJoinExecBuilder::from(j)
            .with_filter(filter)
            .build()?;
        return Ok(Transformed::yes(Arc::new(new)));
    }
    if let Some(a) = node.downcast_ref::<AggregateExec>() {
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
    // An ordered aggregate (array_agg(x ORDER BY y), first_value) may have
    // been reversed or renamed by DataFusion's ordering rules, which
    // rebuilding it would undo: such a stage is left as planned.
    if a.aggr_expr()
        .iter()
        .any(|f| !f.order_bys().is_empty() || f.is_reversed())
    {
        return Ok(None);
    }
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
        match f.with_new_expressions(args, vec![]) {
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

/// A join's filter with its integer arithmetic checked (over the filter's
/// own schema, the joined columns it reads).
fn checked_join_filter(
    filter: Option<&JoinFilter>,
    changed: &mut bool,
) -> DfResult<Option<JoinFilter>> {
    let Some(f) = filter else { return Ok(None) };
    let expression = checked(f.expression(), f.schema(), changed)?;
    Ok(Some(JoinFilter::new(
        expression,
        f.column_indices().to_vec(),
        f.schema().clone(),
    )))
}

/// `expr` with its integer `+ - *` checked; `changed` set if any was not.
fn checked(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    changed: &mut bool,
) -> DfResult<Arc<dyn PhysicalExpr>> {
    let t = expr.clone().transform_up(|e| {
        let integer = |e: &Arc<dyn PhysicalExpr>| e.data_type(schema).is_ok_and(|t| t.is_integer());
        if let Some(n) = e.downcast_ref::<NegativeExpr>() {
            // Unary minus wraps too (-(-2^63) is -2^63): as `0 - x`, checked.
            if !integer(n.arg()) {
                return Ok(Transformed::no(e));
            }
            let zero = ScalarValue::new_zero(&n.arg().data_type(schema)?)?;
            let checked = BinaryExpr::new(
                Arc::new(Literal::new(zero)),
                Operator::Minus,
                n.arg().clone(),
            )
            .with_fail_on_overflow(true);
            return Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>));
        }
        let Some(b) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        if !matches!(
            b.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        ) || !integer(b.left())
            || !integer(b.right())
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

/// The analyzer rule: a constant arithmetic expression that overflows
/// becomes [`OverflowError`], which fails the statement where it is
/// evaluated, instead of being folded into a wrapped value.
#[derive(Debug, Default)]
pub struct CheckedConstants;

impl AnalyzerRule for CheckedConstants {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        let props = ExecutionProps::new();
        let udf = Arc::new(ScalarUDF::new_from_impl(OverflowError::new()));
        plan.transform_up_with_subqueries(|node| {
            let t =
                node.map_expressions(|e| e.transform_down(|sub| overflowing(sub, &props, &udf)))?;
            // (As DataFusion's type coercion does after rewriting.)
            match t.transformed {
                true => t.map_data(|n| n.recompute_schema()),
                false => Ok(t),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "checked_integer_constants"
    }
}

/// `e` as an [`OverflowError`] call when it is constant arithmetic that
/// overflows with checked kernels; anything else as it is (whatever else
/// evaluating it could say, planning says again later). Called top down:
/// a constant tree is evaluated once, at its root (checked evaluation of
/// the root evaluates every operation under it), and not entered.
fn overflowing(
    e: Expr,
    props: &ExecutionProps,
    udf: &Arc<ScalarUDF>,
) -> DfResult<Transformed<Expr>> {
    let Expr::BinaryExpr(b) = &e else {
        return Ok(Transformed::no(e));
    };
    if !matches!(b.op, Operator::Plus | Operator::Minus | Operator::Multiply) || !is_constant(&e) {
        return Ok(Transformed::no(e));
    }
    let done = |e| Ok(Transformed::new(e, false, TreeNodeRecursion::Jump));
    let Some(message) = overflow_of(&e, props)? else {
        return done(e);
    };
    let Ok(t) = e.get_type(&DFSchema::empty()) else {
        return done(e);
    };
    let args = vec![
        lit(e.schema_name().to_string()),
        lit(message),
        lit(ScalarValue::try_from(&t)?),
    ];
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(udf.clone(), args));
    Ok(Transformed::new(call, true, TreeNodeRecursion::Jump))
}

/// What overflows in constant `e`, evaluated once with checked kernels.
fn overflow_of(e: &Expr, props: &ExecutionProps) -> DfResult<Option<String>> {
    let empty = DFSchema::empty();
    let Ok(physical) = create_physical_expr(e, &empty, props, &PhysicalPlanningContext::default())
    else {
        return Ok(None);
    };
    let schema: SchemaRef = Arc::new(Schema::empty());
    let physical = checked(&physical, &schema, &mut false)?;
    let one_row = RecordBatch::try_new_with_options(
        schema,
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    Ok(physical
        .evaluate(&one_row)
        .err()
        .and_then(|err| overflow_message(&err).map(str::to_string)))
}

/// Arrow's words when `e` is an arithmetic overflow.
fn overflow_message(e: &DataFusionError) -> Option<&str> {
    match e.find_root() {
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::ArithmeticOverflow(m) => Some(m),
            _ => None,
        },
        _ => None,
    }
}

/// `overflow_error(name, message, typed NULL)`: the constant `name` that
/// overflowed, failing with `message` where it is evaluated. Volatile, so
/// DataFusion does not fold it: a CASE branch no row takes, a COALESCE
/// argument after a non-NULL constant, the right side of `false AND` are
/// simplified away or never evaluated, as PostgreSQL's constant folding
/// drops them, and one that is reached fails. Named as the expression it
/// replaces, so column names do not change.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OverflowError {
    signature: Signature,
}

impl OverflowError {
    pub const NAME: &'static str = "overflow_error";

    pub fn new() -> Self {
        OverflowError {
            signature: Signature::any(3, Volatility::Volatile),
        }
    }
}

impl Default for OverflowError {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for OverflowError {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(match args.first() {
            Some(Expr::Literal(ScalarValue::Utf8(Some(name)), _)) => name.clone(),
            _ => Self::NAME.to_string(),
        })
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        self.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.get(2).cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let message = match args.args.get(1) {
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(m)))) => m.clone(),
            _ => "Overflow happened".to_string(),
        };
        Err(DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::ArithmeticOverflow(message)),
            None,
        ))
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
            assert!(overflow_message(&err).is_some(), "{err}");
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
        use datafusion::logical_expr::{cast, col};
        let props = ExecutionProps::new();
        let udf = Arc::new(ScalarUDF::new_from_impl(OverflowError::new()));
        let over = lit(i64::MAX) + lit(1i64);
        let name = over.schema_name().to_string();
        let t = overflowing(over, &props, &udf).unwrap();
        assert!(t.transformed);
        assert_eq!(t.data.schema_name().to_string(), name, "named as before");
        let message = overflow_of(&(lit(i64::MAX) + lit(1i64)), &props).unwrap();
        assert_eq!(
            message.as_deref(),
            Some("Overflow happened on: 9223372036854775807 + 1")
        );
        let nested = (lit(i64::MAX) - lit(1i64)) * cast(lit(2i32), DataType::Int64);
        assert!(overflowing(nested, &props, &udf).unwrap().transformed);
        let fits = lit(i64::MAX - 1) + lit(1i64);
        assert!(!overflowing(fits, &props, &udf).unwrap().transformed);
        let column = col("x") + lit(i64::MAX);
        assert!(
            !overflowing(column, &props, &udf).unwrap().transformed,
            "not a constant"
        );
    }
}
