//! Plans for the MPP rules' unit tests: one-column sources with exact
//! row counts, and hash joins over their first columns.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, NullEquality};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::ExecutionPlan;

/// A source of one BIGINT column `name` holding 0 … `rows` - 1 (its
/// statistics say exactly that many rows).
pub fn source(name: &str, rows: usize) -> Arc<dyn ExecutionPlan> {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, false)]));
    let keys = Int64Array::from_iter_values(0..rows as i64);
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
    MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
}

/// A hash join of `left` (the build side) and `right` on their first
/// columns.
pub fn hash_join(
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    join_type: JoinType,
    mode: PartitionMode,
) -> HashJoinExec {
    let on = vec![(
        Arc::new(Column::new(left.schema().field(0).name(), 0)) as _,
        Arc::new(Column::new(right.schema().field(0).name(), 0)) as _,
    )];
    HashJoinExec::try_new(
        left,
        right,
        on,
        None,
        &join_type,
        None,
        mode,
        NullEquality::NullEqualsNothing,
        false,
    )
    .unwrap()
}
