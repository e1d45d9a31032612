//! DOUBLE division by zero is an error, as in PostgreSQL.
//!
//! Arrow's float kernels follow IEEE 754: `1.0 / 0.0` is `inf`, `0.0 / 0.0`
//! is `NaN`, and DataFusion passes them on. PostgreSQL (and Quarry's own
//! coprocessor, `quarry_coprocessor::expr::eval`) raise "division by zero"
//! instead, for `/` and `%` alike, so that an average over an empty bucket
//! or a ratio against a missing denominator fails loudly rather than
//! flowing into a report as `inf`. Integers and decimals already fail in
//! DataFusion's kernels; floats need this rule.
//!
//! [`FloatDivisionByZero`] is an analyzer rule that runs after DataFusion's
//! type coercion: every `a / b` and `a % b` whose divisor is a float
//! becomes `a / nonzero_divisor(b)`, where [`NonZeroDivisor`] passes `b`
//! through unchanged unless a non-null value of it is zero. Because it
//! runs in the analyzer, every query shape sees it (projections, filters,
//! join conditions, aggregate arguments, subqueries), and because the
//! function is named after nothing in the output (its schema name is its
//! argument's), column names stay `x / y`.
//!
//! Caveats: a divisor that is a non-zero constant is simplified away, so
//! `x / 2.0` costs nothing; a guarded division (`CASE WHEN y <> 0 THEN x / y
//! END`) never sees the zero, since DataFusion evaluates a branch only on
//! the rows it takes. An AND is not such a guard in compute: DataFusion
//! evaluates both of its sides over a batch (unless the left is false
//! everywhere in it), so `y <> 0 AND x / y > 1` may fail there, as it
//! already could for BIGINT and DECIMAL; in a region scan's filter the
//! coprocessor evaluates a conjunct only on the rows the earlier ones kept.
//! Write the guard as a CASE. `-0.0` is zero; a NaN divisor is not (the
//! quotient is NaN, as in PostgreSQL).

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float32Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::Error;

/// The analyzer rule: float divisors go through [`NonZeroDivisor`].
#[derive(Debug, Default)]
pub struct FloatDivisionByZero;

impl AnalyzerRule for FloatDivisionByZero {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        let udf = Arc::new(ScalarUDF::new_from_impl(NonZeroDivisor::new()));
        plan.transform_up_with_subqueries(|node| {
            let schema = merge_schema(&node.inputs());
            let t =
                node.map_expressions(|e| e.transform_up(|e| guard_divisor(e, &schema, &udf)))?;
            // (As DataFusion's type coercion does after rewriting.)
            match t.transformed {
                true => t.map_data(|n| n.recompute_schema()),
                false => Ok(t),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "float_division_by_zero"
    }
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

/// `a / b` or `a % b` with a float `b` → `a / nonzero_divisor(b)`.
fn guard_divisor(e: Expr, schema: &DFSchema, udf: &Arc<ScalarUDF>) -> DfResult<Transformed<Expr>> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: op @ (Operator::Divide | Operator::Modulo),
            right,
        }) if needs_guard(&right, schema) => {
            let right = Box::new(Expr::ScalarFunction(ScalarFunction::new_udf(
                udf.clone(),
                vec![*right],
            )));
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                left,
                op,
                right,
            })))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// A float divisor not yet guarded (its type is asked only of divisors).
fn needs_guard(divisor: &Expr, schema: &DFSchema) -> bool {
    let guarded =
        matches!(divisor, Expr::ScalarFunction(f) if f.func.name() == NonZeroDivisor::NAME);
    !guarded && matches!(divisor.get_type(schema), Ok(t) if is_float(&t))
}

/// `nonzero_divisor(b)`: `b`, or the error "division by zero" when a
/// non-null value of `b` is zero.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NonZeroDivisor {
    signature: Signature,
}

impl NonZeroDivisor {
    pub const NAME: &'static str = "nonzero_divisor";

    pub fn new() -> Self {
        NonZeroDivisor {
            signature: Signature::uniform(
                1,
                vec![DataType::Float32, DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

impl Default for NonZeroDivisor {
    fn default() -> Self {
        Self::new()
    }
}

fn division_by_zero() -> DataFusionError {
    DataFusionError::External(Box::new(Error::InvalidInput("division by zero".into())))
}

fn scalar_is_zero(v: &ScalarValue) -> bool {
    match v {
        ScalarValue::Float32(Some(x)) => *x == 0.0,
        ScalarValue::Float64(Some(x)) => *x == 0.0,
        _ => false,
    }
}

impl ScalarUDFImpl for NonZeroDivisor {
    fn name(&self) -> &str {
        Self::NAME
    }

    /// Named as its argument, so `x / y` keeps its column name.
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(args[0].schema_name().to_string())
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(args[0].schema_name().to_string())
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }

    /// Its argument's type and nullability.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let arg = &args.arg_fields[0];
        Ok(Arc::new(Field::new(
            self.name(),
            arg.data_type().clone(),
            arg.is_nullable(),
        )))
    }

    /// NULL in, NULL out: `a / b > 0` still rejects a row whose `b` is NULL
    /// (outer joins become inner ones as before).
    fn is_strict(&self) -> bool {
        true
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [value] = <[ColumnarValue; 1]>::try_from(args.args)
            .map_err(|_| DataFusionError::Internal("nonzero_divisor takes one argument".into()))?;
        let zero = match &value {
            ColumnarValue::Scalar(s) => scalar_is_zero(s),
            ColumnarValue::Array(a) => match a.data_type() {
                DataType::Float64 => a
                    .as_primitive::<Float64Type>()
                    .iter()
                    .any(|v| v == Some(0.0)),
                DataType::Float32 => a
                    .as_primitive::<Float32Type>()
                    .iter()
                    .any(|v| v == Some(0.0)),
                _ => false,
            },
        };
        if zero {
            return Err(division_by_zero());
        }
        Ok(value)
    }

    /// A non-zero constant divisor needs no check.
    fn simplify(&self, args: Vec<Expr>, _: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        match args.as_slice() {
            [Expr::Literal(v, _)] if !v.is_null() && !scalar_is_zero(v) => Ok(
                ExprSimplifyResult::Simplified(args.into_iter().next().expect("one")),
            ),
            _ => Ok(ExprSimplifyResult::Original(args)),
        }
    }
}
