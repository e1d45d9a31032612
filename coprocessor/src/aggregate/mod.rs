//! Aggregation: the functions, their accumulators, and the [`Aggregator`]
//! that runs them per group.
//!
//! An aggregation runs in two stages (DataFusion's `AggregateMode`):
//!
//! ```text
//!  region 1: Partial ─┐
//!  region 2: Partial ─┼─ state columns ─▶ compute: Final ─▶ results
//!  region 3: Partial ─┘
//! ```
//!
//! A partial emits, per group, the key columns and each function's state
//! columns (COUNT: count; SUM/MIN/MAX: value; AVG: sum and count;
//! APPROX_DISTINCT: a HyperLogLog sketch, `sketch.rs`). The final
//! stage merges states with the same accumulators and evaluates them. Both
//! stages live in this crate so they cannot disagree.

pub mod accumulator;
pub mod group_values;
pub mod sketch;

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use quarry_proto::coprocessor::AggKind;

use self::accumulator::{
    min_max, AvgAccumulator, CountAccumulator, DecimalSum, FloatSum, GroupsAccumulator, IntSum,
    SumAccumulator,
};
use self::group_values::GroupValues;
use crate::expr::Expr;
use crate::types::{sql_name, MAX_DECIMAL_PRECISION};
use crate::{internal, invalid_input, Result};

/// One aggregate function applied to an argument of a known type.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateFunction {
    pub kind: AggKind,
    /// None for COUNT(*).
    pub arg_type: Option<DataType>,
}

impl AggregateFunction {
    /// Checks that `kind` accepts `arg_type`.
    pub fn new(kind: AggKind, arg_type: Option<DataType>) -> Result<Self> {
        let f = AggregateFunction { kind, arg_type };
        match (kind, &f.arg_type) {
            (AggKind::CountStar, None) => {}
            (AggKind::CountStar, Some(_)) => {
                return Err(invalid_input!("COUNT(*) takes no argument"))
            }
            (AggKind::AggUnspecified, _) => return Err(invalid_input!("unspecified aggregate")),
            (_, None) => return Err(invalid_input!("{} needs an argument", f.name())),
            (AggKind::Count, Some(_)) => {}
            (AggKind::Sum | AggKind::Avg, Some(t)) => {
                if !matches!(
                    t,
                    DataType::Int64 | DataType::Float64 | DataType::Decimal128(..)
                ) {
                    return Err(invalid_input!(
                        "{} needs a numeric argument, got {}",
                        f.name(),
                        sql_name(t)
                    ));
                }
            }
            (AggKind::Min | AggKind::Max, Some(t)) => {
                min_max(true, t)?;
            }
            (AggKind::ApproxDistinct, Some(t)) => {
                if !sketch::accepts(t) {
                    return Err(invalid_input!(
                        "APPROX_DISTINCT does not take {}",
                        sql_name(t)
                    ));
                }
            }
        }
        Ok(f)
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            AggKind::CountStar | AggKind::Count => "COUNT",
            AggKind::Sum => "SUM",
            AggKind::Min => "MIN",
            AggKind::Max => "MAX",
            AggKind::Avg => "AVG",
            AggKind::ApproxDistinct => "APPROX_DISTINCT",
            AggKind::AggUnspecified => "?",
        }
    }

    /// SUM's result type: BIGINT, DOUBLE, or DECIMAL(38, s).
    fn sum_type(&self) -> DataType {
        match &self.arg_type {
            Some(DataType::Decimal128(_, s)) => DataType::Decimal128(MAX_DECIMAL_PRECISION, *s),
            Some(DataType::Float64) => DataType::Float64,
            _ => DataType::Int64,
        }
    }

    /// SUM's partial (state) type: an exact sum travels as DECIMAL(38, s),
    /// i128 on the wire, whatever its result type, so that only the final
    /// value must fit the result.
    fn sum_state_type(&self) -> DataType {
        match self.sum_type() {
            DataType::Int64 => DataType::Decimal128(MAX_DECIMAL_PRECISION, 0),
            other => other,
        }
    }

    /// The columns a partial ships for this function.
    pub fn state_types(&self) -> Vec<DataType> {
        match self.kind {
            AggKind::CountStar | AggKind::Count => vec![DataType::Int64],
            AggKind::Sum => vec![self.sum_state_type()],
            AggKind::Avg => vec![self.sum_state_type(), DataType::Int64],
            AggKind::ApproxDistinct => vec![DataType::Binary],
            _ => vec![self.arg_type.clone().unwrap_or(DataType::Null)],
        }
    }

    pub fn result_type(&self) -> DataType {
        match self.kind {
            AggKind::CountStar | AggKind::Count | AggKind::ApproxDistinct => DataType::Int64,
            AggKind::Sum => self.sum_type(),
            AggKind::Avg => DataType::Float64,
            _ => self.arg_type.clone().unwrap_or(DataType::Null),
        }
    }

    pub fn accumulator(&self) -> Result<Box<dyn GroupsAccumulator>> {
        let sum = |t: DataType| -> Box<dyn GroupsAccumulator> {
            let state = self.sum_state_type();
            match t {
                DataType::Decimal128(..) => Box::new(SumAccumulator::<DecimalSum>::new(state, t)),
                DataType::Float64 => Box::new(SumAccumulator::<FloatSum>::new(state, t)),
                _ => Box::new(SumAccumulator::<IntSum>::new(state, t)),
            }
        };
        Ok(match self.kind {
            AggKind::CountStar => Box::new(CountAccumulator::new(true)),
            AggKind::Count => Box::new(CountAccumulator::new(false)),
            AggKind::Sum => sum(self.sum_type()),
            AggKind::Avg => {
                let scale = crate::types::decimal_scale(&self.sum_type());
                Box::new(AvgAccumulator::new(sum(self.sum_type()), scale))
            }
            AggKind::Min | AggKind::Max => min_max(
                self.kind == AggKind::Min,
                self.arg_type
                    .as_ref()
                    .ok_or_else(|| internal!("MIN/MAX without type"))?,
            )?,
            AggKind::ApproxDistinct => Box::<sketch::ApproxDistinctAccumulator>::default(),
            AggKind::AggUnspecified => return Err(invalid_input!("unspecified aggregate")),
        })
    }
}

/// Which stage an [`Aggregator`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateMode {
    /// Raw rows in, key + state columns out (storage).
    Partial,
    /// Key + state columns in, key + result columns out (compute).
    Final,
}

/// Groups rows and feeds each group's accumulators.
pub struct Aggregator {
    mode: AggregateMode,
    /// Partial: key expressions over the input. Final: unused (the keys are
    /// the first columns of each state batch).
    group_exprs: Vec<Expr>,
    /// Partial: argument expressions over the input (None for COUNT(*)).
    args: Vec<Option<Expr>>,
    funcs: Vec<AggregateFunction>,
    groups: GroupValues,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    key_types: Vec<DataType>,
    scratch_rows: Vec<u32>,
    scratch_groups: Vec<u32>,
}

impl Aggregator {
    /// The storage-side stage: `aggs` pairs each function with its argument.
    pub fn partial(
        group_exprs: Vec<Expr>,
        aggs: Vec<(AggregateFunction, Option<Expr>)>,
    ) -> Result<Self> {
        let key_types: Vec<DataType> = group_exprs.iter().map(Expr::data_type).collect();
        let (funcs, args): (Vec<_>, Vec<_>) = aggs.into_iter().unzip();
        Aggregator::new(AggregateMode::Partial, key_types, group_exprs, args, funcs)
    }

    /// The compute-side stage over partials with `key_types` key columns.
    pub fn final_stage(key_types: Vec<DataType>, funcs: Vec<AggregateFunction>) -> Result<Self> {
        let args = vec![None; funcs.len()];
        Aggregator::new(AggregateMode::Final, key_types, vec![], args, funcs)
    }

    fn new(
        mode: AggregateMode,
        key_types: Vec<DataType>,
        group_exprs: Vec<Expr>,
        args: Vec<Option<Expr>>,
        funcs: Vec<AggregateFunction>,
    ) -> Result<Self> {
        Ok(Aggregator {
            mode,
            groups: GroupValues::new(&key_types)?,
            accumulators: funcs
                .iter()
                .map(AggregateFunction::accumulator)
                .collect::<Result<_>>()?,
            group_exprs,
            args,
            funcs,
            key_types,
            scratch_rows: Vec::new(),
            scratch_groups: Vec::new(),
        })
    }

    /// Partial stage: folds the selected rows of `batch`.
    pub fn update(&mut self, batch: &RecordBatch, selection: Option<&BooleanBuffer>) -> Result<()> {
        debug_assert_eq!(self.mode, AggregateMode::Partial);
        self.scratch_rows.clear();
        match selection {
            Some(s) => self.scratch_rows.extend(s.set_indices().map(|i| i as u32)),
            None => self.scratch_rows.extend(0..batch.num_rows() as u32),
        }
        if self.scratch_rows.is_empty() {
            return Ok(());
        }
        let keys = self
            .group_exprs
            .iter()
            .map(|e| e.evaluate_to_array(batch, selection))
            .collect::<Result<Vec<_>>>()?;
        self.groups
            .intern(&keys, &self.scratch_rows, &mut self.scratch_groups)?;
        let n = self.groups.num_groups();
        for (acc, arg) in self.accumulators.iter_mut().zip(&self.args) {
            let values = arg
                .as_ref()
                .map(|e| e.evaluate_to_array(batch, selection))
                .transpose()?;
            acc.update_batch(values.as_ref(), &self.scratch_rows, &self.scratch_groups, n)?;
        }
        Ok(())
    }

    /// Final stage: merges one partial batch (keys, then states).
    pub fn merge(&mut self, batch: &RecordBatch) -> Result<()> {
        debug_assert_eq!(self.mode, AggregateMode::Final);
        let nk = self.key_types.len();
        let want = nk
            + self
                .funcs
                .iter()
                .map(|f| f.state_types().len())
                .sum::<usize>();
        if batch.num_columns() != want {
            return Err(internal!(
                "partial aggregate has {} columns, expected {want}",
                batch.num_columns()
            ));
        }
        self.scratch_rows.clear();
        self.scratch_rows.extend(0..batch.num_rows() as u32);
        self.groups.intern(
            &batch.columns()[..nk],
            &self.scratch_rows,
            &mut self.scratch_groups,
        )?;
        let n = self.groups.num_groups();
        let mut col = nk;
        for (acc, f) in self.accumulators.iter_mut().zip(&self.funcs) {
            let k = f.state_types().len();
            acc.merge_batch(
                &batch.columns()[col..col + k],
                &self.scratch_rows,
                &self.scratch_groups,
                n,
            )?;
            col += k;
        }
        Ok(())
    }

    /// The schema of [`Aggregator::finish`]'s output.
    pub fn output_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .key_types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("group_{i}"), t.clone(), true))
            .collect();
        for (i, f) in self.funcs.iter().enumerate() {
            match self.mode {
                AggregateMode::Partial => {
                    for (j, t) in f.state_types().into_iter().enumerate() {
                        fields.push(Field::new(format!("agg_{i}_state_{j}"), t, true));
                    }
                }
                AggregateMode::Final => {
                    fields.push(Field::new(format!("agg_{i}"), f.result_type(), true))
                }
            }
        }
        Arc::new(Schema::new(fields))
    }

    /// Emits one row per group (partial: states; final: results) and resets.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let schema = self.output_schema();
        let n = self.groups.num_groups();
        let mut cols: Vec<ArrayRef> = self.groups.emit()?;
        for acc in &mut self.accumulators {
            // Without GROUP BY the one group exists even if no row came.
            match self.mode {
                AggregateMode::Partial => cols.extend(acc.state(n)?),
                AggregateMode::Final => cols.push(acc.evaluate(n)?),
            }
        }
        for (c, f) in cols.iter_mut().zip(schema.fields()) {
            if c.data_type() != f.data_type() {
                return Err(internal!(
                    "aggregate column {} is {}, expected {}",
                    f.name(),
                    c.data_type(),
                    f.data_type()
                ));
            }
        }
        Ok(RecordBatch::try_new_with_options(
            schema,
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }

    pub fn functions(&self) -> &[AggregateFunction] {
        &self.funcs
    }
}

#[cfg(test)]
mod tests;
