//! TIMESTAMPTZ cast to TIMESTAMP is the wall-clock time in the zone, as
//! in PostgreSQL.
//!
//! A PostgreSQL session in another `TimeZone` than UTC plans TIMESTAMPTZ
//! in that zone (`df/mod.rs`), and Arrow's casts read naive text and
//! naive timestamps in it, and write dates in it. One cast does not:
//! Arrow casts `Timestamp(_, Some(zone))` to `Timestamp(_, None)` by
//! dropping the zone, which leaves the UTC wall clock, where PostgreSQL's
//! `CAST(tz AS TIMESTAMP)` is the wall clock in the session's zone
//! (`2024-01-15 23:30+00` in Asia/Kolkata is `2024-01-16 05:00`).
//!
//! [`LocalTimeCasts`] is an analyzer rule that runs after DataFusion's
//! type coercion: every CAST and TRY_CAST of a timestamp in a zone other
//! than UTC to a timestamp without one goes through [`LocalWallTime`]
//! first (DataFusion's `to_local_time`, named after its argument so that
//! column names stay as they were). In UTC, Quarry's default, nothing
//! changes.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule: zoned-to-naive timestamp casts read the wall clock.
#[derive(Debug, Default)]
pub struct LocalTimeCasts;

impl AnalyzerRule for LocalTimeCasts {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> DfResult<LogicalPlan> {
        let udf = Arc::new(ScalarUDF::new_from_impl(LocalWallTime::new()));
        plan.transform_up_with_subqueries(|node| {
            let schema = merge_schema(&node.inputs());
            let t = node.map_expressions(|e| e.transform_up(|e| local_cast(e, &schema, &udf)))?;
            match t.transformed {
                true => t.map_data(|n| n.recompute_schema()),
                false => Ok(t),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "local_time_casts"
    }
}

/// Whether `zone` (an Arrow time zone) is UTC, where the wall clock is
/// the UTC one.
fn is_utc(zone: &str) -> bool {
    matches!(zone, "+00:00" | "+00" | "UTC" | "Z" | "+0000")
}

/// `CAST(x AS TIMESTAMP)` of a zoned `x` → `CAST(local_wall_time(x) AS
/// TIMESTAMP)`.
fn local_cast(e: Expr, schema: &DFSchema, udf: &Arc<ScalarUDF>) -> DfResult<Transformed<Expr>> {
    let zoned = |x: &Expr| {
        !matches!(x, Expr::ScalarFunction(f) if f.func.name() == LocalWallTime::NAME)
            && matches!(x.get_type(schema), Ok(DataType::Timestamp(_, Some(z))) if !is_utc(&z))
    };
    let wrap = |x: Box<Expr>| {
        Box::new(Expr::ScalarFunction(ScalarFunction::new_udf(
            udf.clone(),
            vec![*x],
        )))
    };
    Ok(match e {
        Expr::Cast(Cast { expr, field })
            if matches!(field.data_type(), DataType::Timestamp(_, None)) && zoned(&expr) =>
        {
            Transformed::yes(Expr::Cast(Cast {
                expr: wrap(expr),
                field,
            }))
        }
        Expr::TryCast(TryCast { expr, field })
            if matches!(field.data_type(), DataType::Timestamp(_, None)) && zoned(&expr) =>
        {
            Transformed::yes(Expr::TryCast(TryCast {
                expr: wrap(expr),
                field,
            }))
        }
        e => Transformed::no(e),
    })
}

/// `local_wall_time(x)`: a zoned timestamp's wall clock in its zone, as a
/// timestamp without one (DataFusion's `to_local_time`), named as `x`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LocalWallTime {
    signature: Signature,
}

impl LocalWallTime {
    pub const NAME: &'static str = "local_wall_time";

    pub fn new() -> Self {
        LocalWallTime {
            signature: Signature::new(TypeSignature::Any(1), Volatility::Immutable),
        }
    }
}

impl Default for LocalWallTime {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for LocalWallTime {
    fn name(&self) -> &str {
        Self::NAME
    }

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
        Ok(match &arg_types[0] {
            DataType::Timestamp(unit, _) => DataType::Timestamp(*unit, None),
            t => t.clone(),
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let arg = &args.arg_fields[0];
        let t = self.return_type(&[arg.data_type().clone()])?;
        Ok(Arc::new(Field::new(self.name(), t, arg.is_nullable())))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        datafusion::functions::datetime::to_local_time().invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// `sql`'s one value as text, in a session in `zone`.
    async fn one(zone: &str, sql: &str) -> String {
        let mut config = SessionConfig::new();
        config.options_mut().execution.time_zone = Some(zone.into());
        let ctx = SessionContext::new_with_config(config);
        ctx.add_analyzer_rule(std::sync::Arc::new(super::LocalTimeCasts));
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let name = batches[0].schema().field(0).name().clone();
        let value = arrow::util::display::array_value_to_string(batches[0].column(0), 0).unwrap();
        format!("{name}={value}")
    }

    #[tokio::test]
    async fn zoned_to_naive_casts_keep_the_zones_wall_clock() {
        let q = "SELECT CAST(CAST('2024-01-15 23:30:00+00' AS TIMESTAMPTZ) AS TIMESTAMP) AS t";
        assert_eq!(one("Asia/Kolkata", q).await, "t=2024-01-16T05:00:00");
        assert_eq!(one("America/New_York", q).await, "t=2024-01-15T18:30:00");
        assert_eq!(one("+00:00", q).await, "t=2024-01-15T23:30:00");
        // Named as before: the cast's argument.
        let unnamed = "SELECT CAST(TIMESTAMPTZ '2024-07-01 12:00:00' AS TIMESTAMP)";
        assert!(one("Europe/Berlin", unnamed)
            .await
            .ends_with("=2024-07-01T12:00:00"));
    }
}
