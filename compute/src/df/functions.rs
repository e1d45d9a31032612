//! SQL functions PostgreSQL has and DataFusion does not, registered in
//! every session: `mod(a, b)`, the function form of `a % b` (same types,
//! same "division by zero" error).
//!
//! Also registered, though no one writes them: the functions Quarry's
//! analyzer rules put into plans, checked arithmetic's `overflow_error`
//! (a constant that overflowed, `checked_arithmetic.rs`), float
//! division's `nonzero_divisor` (`float_division.rs`), a scalar
//! subquery's `one_row` (`decorrelate/`) and a zoned cast's
//! `local_wall_time` (`local_time.rs`). A distributed plan's stages reach
//! their workers by name (`datafusion-proto` looks each function up in
//! the task's session), so every function a plan can hold must be in the
//! session.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    ColumnarValue, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Registers the functions of this module in `state`.
pub fn register(state: &mut SessionState) {
    let _ = state.register_udf(Arc::new(ScalarUDF::new_from_impl(Mod::new())));
    let _ = state.register_udf(Arc::new(ScalarUDF::new_from_impl(
        super::checked_arithmetic::OverflowError::new(),
    )));
    let _ = state.register_udf(Arc::new(ScalarUDF::new_from_impl(
        super::float_division::NonZeroDivisor::new(),
    )));
    let _ = state.register_udf(Arc::new(ScalarUDF::new_from_impl(
        super::decorrelate::OneRow::new(),
    )));
    let _ = state.register_udf(Arc::new(ScalarUDF::new_from_impl(
        super::local_time::LocalWallTime::new(),
    )));
}

/// `mod(a, b)`: `a % b`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Mod {
    signature: Signature,
}

impl Mod {
    pub fn new() -> Self {
        Mod {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl Default for Mod {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Both arguments as `%` takes them.
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let [l, r] = arg_types else {
            return Err(DataFusionError::Plan("mod takes two arguments".into()));
        };
        let (l, r) = BinaryTypeCoercer::new(l, &Operator::Modulo, r).get_input_types()?;
        Ok(vec![l, r])
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        BinaryTypeCoercer::new(&arg_types[0], &Operator::Modulo, &arg_types[1]).get_result_type()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [a, b] = <[ColumnarValue; 2]>::try_from(args.args)
            .map_err(|_| DataFusionError::Plan("mod takes two arguments".into()))?;
        let (a, b) = (a.to_array(args.number_rows)?, b.to_array(args.number_rows)?);
        let out = arrow::compute::kernels::numeric::rem(&a, &b)?;
        match args.return_field.data_type() == out.data_type() {
            true => Ok(ColumnarValue::Array(out)),
            false => Ok(ColumnarValue::Array(arrow::compute::cast(
                &out,
                args.return_field.data_type(),
            )?)),
        }
    }
}
