//! Grouped accumulators: one state per group, updated a batch at a time.
//!
//! The same accumulator serves both stages of an aggregation (DataFusion's
//! `GroupsAccumulator` vocabulary):
//!
//! ```text
//!   storage (Partial)                      compute (Final)
//!   update_batch(values) ─▶ state() ══wire══▶ merge_batch(states) ─▶ evaluate()
//! ```
//!
//! `rows[i]` of the input goes to group `groups[i]`; rows outside the
//! selection never appear in `rows`. Sums accumulate wider than their
//! result (i128), so an overflow is reported only when the final value
//! does not fit its type: never because one region's partial left the
//! result's range while the total came back into it.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBufferBuilder, Float64Array, Int64Array, PrimitiveArray,
    StringArray,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Float64Type, Int64Type,
};

use crate::types::{fits_precision, sql_name, MAX_DECIMAL_PRECISION, POW10};
use crate::{internal, Error, Result};

pub trait GroupsAccumulator: Send {
    /// Partial stage: folds argument `values` (None for COUNT(*)) at `rows`
    /// into `groups`; `num_groups` is the total number of groups so far.
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()>;

    /// Final stage: merges partial state columns at `rows` into `groups`.
    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()>;

    /// The partial state, one row for each of `num_groups` groups (what
    /// storage ships); resets the accumulator.
    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>>;

    /// The final value, one row for each of `num_groups` groups; resets.
    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef>;
}

fn nulls_from(seen: &mut BooleanBufferBuilder) -> Option<NullBuffer> {
    let n = NullBuffer::new(seen.finish());
    (n.null_count() > 0).then_some(n)
}

fn grow_seen(seen: &mut BooleanBufferBuilder, n: usize) {
    if seen.len() < n {
        seen.append_n(n - seen.len(), false);
    }
}

// ------------------------------------------------------------------ COUNT

/// COUNT(*) (`star`) or COUNT(x).
pub struct CountAccumulator {
    counts: Vec<i64>,
    star: bool,
}

impl CountAccumulator {
    pub fn new(star: bool) -> Self {
        CountAccumulator {
            counts: Vec::new(),
            star,
        }
    }
}

impl GroupsAccumulator for CountAccumulator {
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.counts.resize(num_groups, 0);
        match (self.star, values.and_then(|v| v.logical_nulls())) {
            (false, Some(nulls)) => {
                for (&r, &g) in rows.iter().zip(groups) {
                    self.counts[g as usize] += nulls.is_valid(r as usize) as i64;
                }
            }
            _ => {
                for &g in groups {
                    self.counts[g as usize] += 1;
                }
            }
        }
        Ok(())
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.counts.resize(num_groups, 0);
        let c = states[0].as_primitive::<Int64Type>();
        for (&r, &g) in rows.iter().zip(groups) {
            self.counts[g as usize] += c.value(r as usize);
        }
        Ok(())
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(num_groups)?])
    }

    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        self.counts.resize(num_groups, 0);
        Ok(Arc::new(Int64Array::from(std::mem::take(&mut self.counts))))
    }
}

// ------------------------------------------------------------------ SUM

/// How a SUM adds: argument values of type `In` widen into a partial of
/// type `T`, and the final value is checked against the result type.
///
/// Partials are wider than results (i128 for BIGINT, all of i128 for
/// DECIMAL(38, s)), so a region's partial never overflows where the total
/// would not: only the final value must fit (`finish`).
pub trait SumOps: Send + 'static {
    type In: ArrowPrimitiveType;
    type T: ArrowPrimitiveType;
    fn widen(
        v: <Self::In as ArrowPrimitiveType>::Native,
    ) -> <Self::T as ArrowPrimitiveType>::Native;
    fn add(
        a: <Self::T as ArrowPrimitiveType>::Native,
        b: <Self::T as ArrowPrimitiveType>::Native,
    ) -> Option<<Self::T as ArrowPrimitiveType>::Native>;
    /// The final sums as the result type; an error names the type a sum
    /// does not fit.
    fn finish(sums: PrimitiveArray<Self::T>, result: &DataType) -> Result<ArrayRef>;
}

fn sum_overflow(result: &DataType) -> Error {
    Error::Overflow(format!(
        "SUM overflowed {}: the exact result does not fit",
        sql_name(result)
    ))
}

/// SUM of BIGINT: partials in i128, the result a BIGINT.
pub struct IntSum;
impl SumOps for IntSum {
    type In = Int64Type;
    type T = Decimal128Type;
    #[inline]
    fn widen(v: i64) -> i128 {
        v as i128
    }
    #[inline]
    fn add(a: i128, b: i128) -> Option<i128> {
        a.checked_add(b)
    }
    fn finish(sums: PrimitiveArray<Decimal128Type>, result: &DataType) -> Result<ArrayRef> {
        let out: PrimitiveArray<Int64Type> =
            sums.try_unary(|v| i64::try_from(v).map_err(|_| sum_overflow(result)))?;
        Ok(Arc::new(out))
    }
}

/// SUM of DECIMAL: partials in all of i128, the result DECIMAL(38, s).
pub struct DecimalSum;
impl SumOps for DecimalSum {
    type In = Decimal128Type;
    type T = Decimal128Type;
    #[inline]
    fn widen(v: i128) -> i128 {
        v
    }
    #[inline]
    fn add(a: i128, b: i128) -> Option<i128> {
        a.checked_add(b)
    }
    fn finish(sums: PrimitiveArray<Decimal128Type>, result: &DataType) -> Result<ArrayRef> {
        if sums
            .iter()
            .flatten()
            .any(|v| !fits_precision(v, MAX_DECIMAL_PRECISION))
        {
            return Err(sum_overflow(result));
        }
        Ok(Arc::new(sums.with_data_type(result.clone())))
    }
}

pub struct FloatSum;
impl SumOps for FloatSum {
    type In = Float64Type;
    type T = Float64Type;
    #[inline]
    fn widen(v: f64) -> f64 {
        v
    }
    #[inline]
    fn add(a: f64, b: f64) -> Option<f64> {
        let v = a + b;
        (v.is_finite() || !a.is_finite() || !b.is_finite()).then_some(v)
    }
    fn finish(sums: PrimitiveArray<Float64Type>, _: &DataType) -> Result<ArrayRef> {
        Ok(Arc::new(sums))
    }
}

/// SUM over a primitive type; NULL for a group that saw no non-NULL value.
pub struct SumAccumulator<O: SumOps> {
    sums: Vec<<O::T as ArrowPrimitiveType>::Native>,
    seen: BooleanBufferBuilder,
    /// The partial's type (carries a decimal's precision and scale).
    state_type: DataType,
    /// The final value's type.
    result_type: DataType,
}

impl<O: SumOps> SumAccumulator<O> {
    pub fn new(state_type: DataType, result_type: DataType) -> Self {
        SumAccumulator {
            sums: Vec::new(),
            seen: BooleanBufferBuilder::new(0),
            state_type,
            result_type,
        }
    }

    fn fold<I: ArrowPrimitiveType>(
        &mut self,
        values: &PrimitiveArray<I>,
        widen: impl Fn(I::Native) -> <O::T as ArrowPrimitiveType>::Native,
        rows: &[u32],
        groups: &[u32],
        n: usize,
    ) -> Result<()> {
        let (sums, seen) = (&mut self.sums, &mut self.seen);
        sums.resize(n, Default::default());
        grow_seen(seen, n);
        let state_type = &self.state_type;
        let overflow = || {
            Error::Overflow(format!(
                "SUM overflowed its partial ({}) on the way to its result",
                sql_name(state_type)
            ))
        };
        let vals = values.values();
        let nulls = values.nulls();
        for (&r, &g) in rows.iter().zip(groups) {
            if nulls.is_some_and(|n| n.is_null(r as usize)) {
                continue;
            }
            let g = g as usize;
            sums[g] = O::add(sums[g], widen(vals[r as usize])).ok_or_else(overflow)?;
            seen.set_bit(g, true);
        }
        Ok(())
    }

    /// The sums so far as the partial's type; resets.
    fn take(&mut self, n: usize) -> PrimitiveArray<O::T> {
        self.sums.resize(n, Default::default());
        grow_seen(&mut self.seen, n);
        let nulls = nulls_from(&mut self.seen);
        PrimitiveArray::<O::T>::new(std::mem::take(&mut self.sums).into(), nulls)
            .with_data_type(self.state_type.clone())
    }
}

impl<O: SumOps> GroupsAccumulator for SumAccumulator<O> {
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        let values = values.ok_or_else(|| internal!("SUM without an argument"))?;
        let values = values
            .as_primitive_opt::<O::In>()
            .ok_or_else(|| internal!("SUM into {} fed {}", self.result_type, values.data_type()))?;
        self.fold(values, O::widen, rows, groups, num_groups)
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        let values = states[0]
            .as_primitive_opt::<O::T>()
            .ok_or_else(|| internal!("SUM state is {}", states[0].data_type()))?;
        self.fold(values, |v| v, rows, groups, num_groups)
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(self.take(num_groups))])
    }

    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        let sums = self.take(num_groups);
        O::finish(sums, &self.result_type)
    }
}

// ------------------------------------------------------------------ AVG

/// AVG as (sum, count); the result is a DOUBLE, like DuckDB's, computed as
/// `sum / (count * 10^scale)` from the exact sum.
pub struct AvgAccumulator {
    sum: Box<dyn GroupsAccumulator>,
    count: CountAccumulator,
    scale: i8,
}

impl AvgAccumulator {
    pub fn new(sum: Box<dyn GroupsAccumulator>, scale: i8) -> Self {
        AvgAccumulator {
            sum,
            count: CountAccumulator::new(false),
            scale,
        }
    }
}

impl GroupsAccumulator for AvgAccumulator {
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.sum.update_batch(values, rows, groups, num_groups)?;
        self.count.update_batch(values, rows, groups, num_groups)
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.sum
            .merge_batch(&states[..1], rows, groups, num_groups)?;
        self.count
            .merge_batch(&states[1..2], rows, groups, num_groups)
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        let mut state = self.sum.state(num_groups)?;
        state.push(self.count.evaluate(num_groups)?);
        Ok(state)
    }

    /// The average from the exact, wide sum: an average is never out of
    /// range where the sum of its values would be.
    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        let sums = self.sum.state(num_groups)?.remove(0);
        let counts = self.count.evaluate(num_groups)?;
        let counts = counts.as_primitive::<Int64Type>();
        let divisor = POW10[self.scale.max(0) as usize] as f64;
        let out: Float64Array = (0..counts.len())
            .map(|g| {
                let c = counts.value(g);
                if c == 0 || sums.is_null(g) {
                    return None;
                }
                let s = match sums.data_type() {
                    DataType::Decimal128(..) => {
                        sums.as_primitive::<Decimal128Type>().value(g) as f64
                    }
                    DataType::Int64 => sums.as_primitive::<Int64Type>().value(g) as f64,
                    _ => sums.as_primitive::<Float64Type>().value(g),
                };
                Some(s / (c as f64 * divisor))
            })
            .collect();
        Ok(Arc::new(out))
    }
}

// ------------------------------------------------------------------ MIN / MAX

/// MIN or MAX over a primitive type.
pub struct MinMaxAccumulator<T: ArrowPrimitiveType> {
    best: Vec<T::Native>,
    seen: BooleanBufferBuilder,
    is_min: bool,
    data_type: DataType,
}

/// A total order for MIN/MAX (floats via `total_cmp`).
pub trait TotalOrd: Copy {
    fn better(self, other: Self, is_min: bool) -> bool;
}
macro_rules! total_ord_int {
    ($($t:ty),*) => {$(
        impl TotalOrd for $t {
            #[inline]
            fn better(self, other: Self, is_min: bool) -> bool {
                if is_min { self < other } else { self > other }
            }
        }
    )*};
}
total_ord_int!(i32, i64, i128);
impl TotalOrd for f64 {
    #[inline]
    fn better(self, other: Self, is_min: bool) -> bool {
        let o = self.total_cmp(&other);
        if is_min {
            o.is_lt()
        } else {
            o.is_gt()
        }
    }
}

impl<T: ArrowPrimitiveType> MinMaxAccumulator<T>
where
    T::Native: TotalOrd,
{
    pub fn new(is_min: bool, data_type: DataType) -> Self {
        MinMaxAccumulator {
            best: Vec::new(),
            seen: BooleanBufferBuilder::new(0),
            is_min,
            data_type,
        }
    }

    fn fold(&mut self, values: &ArrayRef, rows: &[u32], groups: &[u32], n: usize) -> Result<()> {
        let values = values.as_primitive_opt::<T>().ok_or_else(|| {
            internal!("MIN/MAX over {} fed {}", self.data_type, values.data_type())
        })?;
        self.best.resize(n, T::Native::default());
        grow_seen(&mut self.seen, n);
        let nulls = values.nulls();
        for (&r, &g) in rows.iter().zip(groups) {
            let (r, g) = (r as usize, g as usize);
            if nulls.is_some_and(|n| n.is_null(r)) {
                continue;
            }
            let v = values.value(r);
            if !self.seen.get_bit(g) || v.better(self.best[g], self.is_min) {
                self.best[g] = v;
                self.seen.set_bit(g, true);
            }
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<ArrayRef> {
        self.best.resize(n, T::Native::default());
        grow_seen(&mut self.seen, n);
        let nulls = nulls_from(&mut self.seen);
        Ok(Arc::new(
            PrimitiveArray::<T>::new(std::mem::take(&mut self.best).into(), nulls)
                .with_data_type(self.data_type.clone()),
        ))
    }
}

impl<T: ArrowPrimitiveType> GroupsAccumulator for MinMaxAccumulator<T>
where
    T::Native: TotalOrd,
{
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        let values = values.ok_or_else(|| internal!("MIN/MAX without an argument"))?;
        self.fold(values, rows, groups, num_groups)
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.fold(&states[0], rows, groups, num_groups)
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.take(num_groups)?])
    }

    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        self.take(num_groups)
    }
}

/// MIN or MAX over strings.
pub struct MinMaxStringAccumulator {
    best: Vec<Option<String>>,
    is_min: bool,
}

impl MinMaxStringAccumulator {
    pub fn new(is_min: bool) -> Self {
        MinMaxStringAccumulator {
            best: Vec::new(),
            is_min,
        }
    }

    fn fold(&mut self, values: &ArrayRef, rows: &[u32], groups: &[u32], n: usize) -> Result<()> {
        let values = values
            .as_string_opt::<i32>()
            .ok_or_else(|| internal!("string MIN/MAX fed {}", values.data_type()))?;
        self.best.resize(n, None);
        for (&r, &g) in rows.iter().zip(groups) {
            if values.is_null(r as usize) {
                continue;
            }
            let v = values.value(r as usize);
            let slot = &mut self.best[g as usize];
            let better = match slot {
                None => true,
                Some(b) => {
                    if self.is_min {
                        v < b.as_str()
                    } else {
                        v > b.as_str()
                    }
                }
            };
            if better {
                *slot = Some(v.to_string());
            }
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> ArrayRef {
        self.best.resize(n, None);
        Arc::new(StringArray::from(std::mem::take(&mut self.best)))
    }
}

impl GroupsAccumulator for MinMaxStringAccumulator {
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        let values = values.ok_or_else(|| internal!("MIN/MAX without an argument"))?;
        self.fold(values, rows, groups, num_groups)
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.fold(&states[0], rows, groups, num_groups)
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.take(num_groups)])
    }

    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        Ok(self.take(num_groups))
    }
}

/// MIN/MAX accumulator for a type.
pub fn min_max(is_min: bool, dt: &DataType) -> Result<Box<dyn GroupsAccumulator>> {
    Ok(match dt {
        DataType::Int64 => Box::new(MinMaxAccumulator::<Int64Type>::new(is_min, dt.clone())),
        DataType::Float64 => Box::new(MinMaxAccumulator::<Float64Type>::new(is_min, dt.clone())),
        DataType::Decimal128(..) => {
            Box::new(MinMaxAccumulator::<Decimal128Type>::new(is_min, dt.clone()))
        }
        DataType::Date32 => Box::new(MinMaxAccumulator::<Date32Type>::new(is_min, dt.clone())),
        DataType::Utf8 => Box::new(MinMaxStringAccumulator::new(is_min)),
        other => {
            return Err(crate::invalid_input!(
                "{} does not support {}",
                if is_min { "MIN" } else { "MAX" },
                sql_name(other)
            ))
        }
    })
}
