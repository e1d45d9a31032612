//! Quarry's SUM and AVG as DataFusion aggregate functions.
//!
//! DataFusion's own differ from Quarry's where it matters to a user: its SUM
//! of DECIMAL(p, s) is DECIMAL(p + 10, s) and wraps on overflow, its SUM of
//! BIGINT wraps, and its AVG of a DECIMAL is a DECIMAL. Quarry's SUM is
//! DECIMAL(38, s) (BIGINT, DOUBLE) and overflow is an error; AVG is a
//! DOUBLE (as in DuckDB). Registered under the same names, these replace
//! DataFusion's.
//!
//! They are thin adapters: the accumulators are the coprocessor's
//! ([`AggregateFunction::accumulator`]), the same code every region runs
//! for its partial aggregation, so the partial states a region ships and
//! the states DataFusion's Final stage merges are one definition, and the
//! partial-aggregation rule (`rules.rs`) can hand a Partial stage to the
//! regions unchanged.

use std::fmt::Debug;
use std::sync::Arc;

use parking_lot::Mutex;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{not_impl_err, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF,
    Signature, Volatility,
};
use quarry_coprocessor::aggregate::accumulator::GroupsAccumulator as CopAccumulator;
use quarry_coprocessor::aggregate::AggregateFunction;
use quarry_proto::coprocessor::AggKind;

use crate::Error;

fn cop(e: quarry_coprocessor::Error) -> DataFusionError {
    DataFusionError::External(Box::new(Error::from(e)))
}

/// SUM or AVG, Quarry's way.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct QuarryAggregate {
    kind: AggKind,
    signature: Signature,
    aliases: Vec<String>,
}

impl QuarryAggregate {
    pub fn new(kind: AggKind) -> Self {
        QuarryAggregate {
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
            aliases: match kind {
                AggKind::Avg => vec!["mean".to_string()],
                _ => vec![],
            },
        }
    }

    fn function(&self, arg: &DataType) -> DfResult<AggregateFunction> {
        AggregateFunction::new(self.kind, Some(arg.clone())).map_err(cop)
    }

    /// The coprocessor's function this one is, over `arg`.
    pub fn kind(&self) -> AggKind {
        self.kind
    }
}

/// Registers Quarry's SUM and AVG in place of DataFusion's.
pub fn register(state: &mut SessionState) {
    for kind in [AggKind::Sum, AggKind::Avg] {
        // Replacing by name: the old function is returned and dropped.
        let _ = state.register_udaf(Arc::new(AggregateUDF::new_from_impl(QuarryAggregate::new(
            kind,
        ))));
    }
}

impl AggregateUDFImpl for QuarryAggregate {
    fn name(&self) -> &str {
        match self.kind {
            AggKind::Avg => "avg",
            _ => "sum",
        }
    }

    /// DataFusion's AVG is also `mean`. Ours must take that name too:
    /// a session rebuilt from an existing one registers every function
    /// again under all its names, in no set order, so a DataFusion AVG left
    /// under `mean` could win `avg` back.
    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let [t] = arg_types else {
            return not_impl_err!("{} takes one argument", self.name());
        };
        let t = match t {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32 => DataType::Int64,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
            DataType::Decimal128(..) | DataType::Null => t.clone(),
            DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => DataType::Decimal128(*p, *s),
            other => {
                return Err(DataFusionError::Plan(format!(
                    "{} needs a numeric argument, got {other}",
                    self.name().to_uppercase()
                )))
            }
        };
        Ok(vec![if t == DataType::Null {
            DataType::Int64
        } else {
            t
        }])
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        let [t] = arg_types else {
            return not_impl_err!("{} takes one argument", self.name());
        };
        Ok(self.function(t)?.result_type())
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let f = self.function(args.expr_fields[0].data_type())?;
        if args.is_distinct {
            return Ok(Box::new(Distinct {
                function: f,
                data_type: args.expr_fields[0].data_type().clone(),
                values: Default::default(),
            }));
        }
        Ok(Box::new(SingleGroup(Groups::new(f)?)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        if args.is_distinct {
            let item = Field::new_list_field(args.input_fields[0].data_type().clone(), true);
            return Ok(vec![Arc::new(Field::new(
                format!("{}[distinct]", args.name),
                DataType::List(Arc::new(item)),
                true,
            ))]);
        }
        let f = self.function(args.input_fields[0].data_type())?;
        let names: &[&str] = match self.kind {
            AggKind::Avg => &["sum", "count"],
            _ => &["sum"],
        };
        Ok(f.state_types()
            .into_iter()
            .zip(names)
            .map(|(t, n)| Arc::new(Field::new(format!("{}[{n}]", args.name), t, true)))
            .collect())
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        let f = self.function(args.expr_fields[0].data_type())?;
        Ok(Box::new(Groups::new(f)?))
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        AggregateOrderSensitivity::Insensitive
    }
}

/// SUM or AVG of DISTINCT values beside other aggregates (alone, DataFusion
/// turns it into a GROUP BY): the distinct values are kept, shipped
/// between stages as a list, and summed by the coprocessor's accumulator
/// at the end, so the result type and overflow rules are the plain
/// aggregate's.
#[derive(Debug)]
struct Distinct {
    function: AggregateFunction,
    data_type: DataType,
    values: std::collections::HashSet<ScalarValue>,
}

impl Distinct {
    fn add(&mut self, values: &ArrayRef) -> DfResult<()> {
        for i in 0..values.len() {
            if values.is_valid(i) {
                self.values.insert(ScalarValue::try_from_array(values, i)?);
            }
        }
        Ok(())
    }

    fn values(&self) -> DfResult<ArrayRef> {
        match self.values.is_empty() {
            true => Ok(arrow::array::new_empty_array(&self.data_type)),
            false => ScalarValue::iter_to_array(self.values.iter().cloned()),
        }
    }
}

impl Accumulator for Distinct {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        values.first().map_or(Ok(()), |v| self.add(v))
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let mut acc = SingleGroup(Groups::new(self.function.clone())?);
        acc.update_batch(&[self.values()?])?;
        acc.evaluate()
    }

    fn size(&self) -> usize {
        64 + self.values.iter().map(|v| v.size()).sum::<usize>()
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self.values.iter().cloned().collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &self.data_type,
        ))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let Some(lists) = states.first() else {
            return Ok(());
        };
        let lists = lists.as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.add(&lists.value(i))?;
            }
        }
        Ok(())
    }
}

/// The coprocessor's accumulator behind DataFusion's grouped interface.
struct Groups {
    function: AggregateFunction,
    /// Behind a lock only because DataFusion's `Accumulator` must be
    /// `Sync`; every use has `&mut self` and takes it without locking.
    acc: Mutex<Box<dyn CopAccumulator>>,
    /// Groups seen so far.
    groups: usize,
}

impl Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Quarry {}", self.function.name())
    }
}

/// Row positions and their groups, skipping rows the filter drops.
fn selected(group_indices: &[usize], filter: Option<&BooleanArray>) -> (Vec<u32>, Vec<u32>) {
    let mut rows = Vec::with_capacity(group_indices.len());
    let mut groups = Vec::with_capacity(group_indices.len());
    for (i, &g) in group_indices.iter().enumerate() {
        if filter.is_none_or(|f| f.is_valid(i) && f.value(i)) {
            rows.push(i as u32);
            groups.push(g as u32);
        }
    }
    (rows, groups)
}

impl Groups {
    fn new(function: AggregateFunction) -> DfResult<Self> {
        Ok(Groups {
            acc: Mutex::new(function.accumulator().map_err(cop)?),
            function,
            groups: 0,
        })
    }

    /// Takes the state of every group, leaving the accumulator empty.
    fn take_state(&mut self) -> DfResult<Vec<ArrayRef>> {
        let n = self.groups;
        self.groups = 0;
        self.acc.get_mut().state(n).map_err(cop)
    }

    /// Merges `states` rows `from..` back as groups `0..`.
    fn put_back(&mut self, states: &[ArrayRef], from: usize) -> DfResult<()> {
        let len = states.first().map_or(0, |s| s.len());
        if from >= len {
            return Ok(());
        }
        let rest: Vec<ArrayRef> = states.iter().map(|s| s.slice(from, len - from)).collect();
        let rows: Vec<u32> = (0..(len - from) as u32).collect();
        self.groups = len - from;
        self.acc
            .get_mut()
            .merge_batch(&rest, &rows, &rows, self.groups)
            .map_err(cop)
    }

    /// The state of the first `n` groups (all for `EmitTo::All`); the rest
    /// stay, renumbered from 0.
    fn emit_state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let states = self.take_state()?;
        match emit_to {
            EmitTo::All => Ok(states),
            EmitTo::First(n) => {
                self.put_back(&states, n)?;
                Ok(states.iter().map(|s| s.slice(0, n.min(s.len()))).collect())
            }
        }
    }
}

impl GroupsAccumulator for Groups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        let (rows, groups) = selected(group_indices, opt_filter);
        self.groups = self.groups.max(total_num_groups);
        self.acc
            .get_mut()
            .update_batch(values.first(), &rows, &groups, self.groups)
            .map_err(cop)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let states = self.emit_state(emit_to)?;
        let n = states.first().map_or(0, |s| s.len());
        let mut fin = self.function.accumulator().map_err(cop)?;
        let rows: Vec<u32> = (0..n as u32).collect();
        fin.merge_batch(&states, &rows, &rows, n).map_err(cop)?;
        fin.evaluate(n).map_err(cop)
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        self.emit_state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        let (rows, groups) = selected(group_indices, None);
        self.groups = self.groups.max(total_num_groups);
        self.acc
            .get_mut()
            .merge_batch(values, &rows, &groups, self.groups)
            .map_err(cop)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let n = values.first().map_or(0, |v| v.len());
        let identity: Vec<usize> = (0..n).collect();
        let (rows, groups) = selected(&identity, opt_filter);
        let mut acc = self.function.accumulator().map_err(cop)?;
        acc.update_batch(values.first(), &rows, &groups, n)
            .map_err(cop)?;
        acc.state(n).map_err(cop)
    }

    fn size(&self) -> usize {
        // The coprocessor's accumulators hold a few words per group.
        self.groups * 32
    }
}

/// One group: an aggregation without GROUP BY.
#[derive(Debug)]
struct SingleGroup(Groups);

impl SingleGroup {
    /// The state, leaving the accumulator as it was.
    fn peek(&mut self) -> DfResult<Vec<ArrayRef>> {
        self.0.groups = 1;
        let states = self.0.take_state()?;
        self.0.put_back(&states, 0)?;
        Ok(states)
    }
}

impl Accumulator for SingleGroup {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let n = values.first().map_or(0, |v| v.len());
        self.0.update_batch(values, &vec![0; n], None, 1)
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let states = self.peek()?;
        let mut fin = self.0.function.accumulator().map_err(cop)?;
        fin.merge_batch(&states, &[0], &[0], 1).map_err(cop)?;
        let v = fin.evaluate(1).map_err(cop)?;
        ScalarValue::try_from_array(&v, 0)
    }

    fn size(&self) -> usize {
        64
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        self.peek()?
            .iter()
            .map(|s| ScalarValue::try_from_array(s, 0))
            .collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let n = states.first().map_or(0, |s| s.len());
        self.0.merge_batch(states, &vec![0; n], 1)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::execution::SessionStateBuilder;

    use super::*;

    #[test]
    fn quarry_sum_and_avg_survive_session_rebuilds() {
        let mut state = SessionStateBuilder::new().with_default_features().build();
        register(&mut state);
        // Each statement's session is rebuilt from the base one; the
        // rebuild re-registers functions in hash order, so try many.
        for _ in 0..50 {
            state = SessionStateBuilder::new_from_existing(state).build();
            for name in ["sum", "avg", "mean"] {
                let f = &state.aggregate_functions()[name];
                assert!(
                    f.inner().downcast_ref::<QuarryAggregate>().is_some(),
                    "{name} is DataFusion's"
                );
            }
        }
    }
}
