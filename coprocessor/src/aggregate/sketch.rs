//! APPROX_DISTINCT: a HyperLogLog sketch per group, so that a count of
//! distinct values merges across regions like any other partial state.
//!
//! An exact COUNT(DISTINCT) has to ship every distinct value to compute; a
//! HyperLogLog (Flajolet et al., 2007) ships a fixed-size sketch instead:
//! 2^[`PRECISION`] one-byte registers, each holding the longest run of
//! leading zeros seen among the hashes that land in it. Two sketches merge
//! by taking each register's maximum, so a region's sketch is its partial
//! state (one BINARY value per group) and compute's final stage merges
//! them and estimates. With 4,096 registers the standard error is about
//! 1.6%; small counts use linear counting (the share of empty registers),
//! which is nearly exact.
//!
//! Quarry uses it for planner statistics (`quarry-compute`'s `df/stats.rs`
//! estimates each key column's distinct values, as TiDB's ANALYZE does
//! with its FM sketches), where an estimate is all that is needed. NULLs
//! are not counted. Values hash by their bits (integers, dates, decimals)
//! or bytes (strings); the hash is the 64-bit finalizer of MurmurHash3,
//! applied after a byte-wise FNV-1a for strings.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, Int64Array};
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Int32Type, Int64Type};

use super::accumulator::GroupsAccumulator;
use crate::expr::mix64;
use crate::{internal, Result};

/// log2 of the number of registers.
pub const PRECISION: u32 = 12;
const REGISTERS: usize = 1 << PRECISION;

/// The argument types APPROX_DISTINCT accepts.
pub fn accepts(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int64
            | DataType::Int32
            | DataType::Date32
            | DataType::Decimal128(..)
            | DataType::Utf8
    )
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// One group's registers.
#[derive(Clone)]
struct Sketch(Box<[u8; REGISTERS]>);

impl Sketch {
    fn new() -> Self {
        Sketch(Box::new([0; REGISTERS]))
    }

    #[inline]
    fn add(&mut self, h: u64) {
        let index = (h >> (64 - PRECISION)) as usize;
        let rest = h << PRECISION;
        // Leading zeros of the remaining 52 bits, plus one.
        let rank = (rest.leading_zeros().min(64 - PRECISION) + 1) as u8;
        if self.0[index] < rank {
            self.0[index] = rank;
        }
    }

    fn merge(&mut self, other: &[u8]) -> Result<()> {
        if other.len() != REGISTERS {
            return Err(internal!(
                "distinct sketch of {} bytes, expected {REGISTERS}",
                other.len()
            ));
        }
        for (r, o) in self.0.iter_mut().zip(other) {
            *r = (*r).max(*o);
        }
        Ok(())
    }

    fn estimate(&self) -> i64 {
        let m = REGISTERS as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let (mut sum, mut zeros) = (0.0f64, 0usize);
        for &r in self.0.iter() {
            sum += 2f64.powi(-(r as i32));
            zeros += (r == 0) as usize;
        }
        let raw = alpha * m * m / sum;
        let estimate = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        estimate.round() as i64
    }
}

/// APPROX_DISTINCT(x): a sketch per group; state BINARY, result BIGINT.
#[derive(Default)]
pub struct ApproxDistinctAccumulator {
    sketches: Vec<Sketch>,
}

impl ApproxDistinctAccumulator {
    fn grow(&mut self, n: usize) {
        if self.sketches.len() < n {
            self.sketches.resize(n, Sketch::new());
        }
    }

    fn take(&mut self, n: usize) -> Vec<Sketch> {
        self.grow(n);
        std::mem::take(&mut self.sketches)
    }
}

/// The hash of each value of `values` at `rows` (None for NULL).
fn for_each_hash(values: &ArrayRef, rows: &[u32], mut f: impl FnMut(usize, u64)) -> Result<()> {
    let nulls = values.logical_nulls();
    let valid = |r: usize| nulls.as_ref().is_none_or(|n| n.is_valid(r));
    macro_rules! each {
        ($array:expr, $hash:expr) => {{
            let a = $array;
            for (i, &r) in rows.iter().enumerate() {
                let r = r as usize;
                if valid(r) {
                    f(i, $hash(a.value(r)));
                }
            }
        }};
    }
    match values.data_type() {
        DataType::Int64 => each!(values.as_primitive::<Int64Type>(), |v: i64| mix64(v as u64)),
        DataType::Int32 => each!(values.as_primitive::<Int32Type>(), |v: i32| mix64(v as u64)),
        DataType::Date32 => each!(values.as_primitive::<Date32Type>(), |v: i32| mix64(
            v as u64
        )),
        DataType::Decimal128(..) => {
            each!(values.as_primitive::<Decimal128Type>(), |v: i128| mix64(
                (v as u64) ^ mix64((v >> 64) as u64)
            ))
        }
        DataType::Utf8 => each!(values.as_string::<i32>(), |v: &str| hash_bytes(
            v.as_bytes()
        )),
        t => return Err(internal!("APPROX_DISTINCT over {t}")),
    }
    Ok(())
}

impl GroupsAccumulator for ApproxDistinctAccumulator {
    fn update_batch(
        &mut self,
        values: Option<&ArrayRef>,
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.grow(num_groups);
        let values = values.ok_or_else(|| internal!("APPROX_DISTINCT without argument"))?;
        let sketches = &mut self.sketches;
        for_each_hash(values, rows, |i, h| sketches[groups[i] as usize].add(h))
    }

    fn merge_batch(
        &mut self,
        states: &[ArrayRef],
        rows: &[u32],
        groups: &[u32],
        num_groups: usize,
    ) -> Result<()> {
        self.grow(num_groups);
        let states: &BinaryArray = states[0]
            .as_binary_opt()
            .ok_or_else(|| internal!("APPROX_DISTINCT state is not BINARY"))?;
        for (&r, &g) in rows.iter().zip(groups) {
            if states.is_valid(r as usize) {
                self.sketches[g as usize].merge(states.value(r as usize))?;
            }
        }
        Ok(())
    }

    fn state(&mut self, num_groups: usize) -> Result<Vec<ArrayRef>> {
        let sketches = self.take(num_groups);
        let mut b = BinaryBuilder::with_capacity(sketches.len(), sketches.len() * REGISTERS);
        for s in &sketches {
            b.append_value(&s.0[..]);
        }
        Ok(vec![Arc::new(b.finish())])
    }

    fn evaluate(&mut self, num_groups: usize) -> Result<ArrayRef> {
        let sketches = self.take(num_groups);
        Ok(Arc::new(Int64Array::from_iter_values(
            sketches.iter().map(Sketch::estimate),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    fn estimate_of(partials: Vec<ArrayRef>) -> i64 {
        let mut fin = ApproxDistinctAccumulator::default();
        for p in partials {
            let mut acc = ApproxDistinctAccumulator::default();
            let rows: Vec<u32> = (0..p.len() as u32).collect();
            acc.update_batch(Some(&p), &rows, &vec![0; rows.len()], 1)
                .unwrap();
            let state = acc.state(1).unwrap();
            fin.merge_batch(&state, &[0], &[0], 1).unwrap();
        }
        fin.evaluate(1)
            .unwrap()
            .as_primitive::<Int64Type>()
            .value(0)
    }

    #[test]
    fn small_counts_are_nearly_exact_and_nulls_do_not_count() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(2), Some(1)]));
        assert_eq!(estimate_of(vec![a]), 2);
        let s: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "a", "b"]));
        assert_eq!(estimate_of(vec![s]), 3);
    }

    #[test]
    fn regions_merge_to_the_count_of_their_union() {
        // Three "regions" of a million keys each, overlapping by half.
        let region = |from: i64| -> ArrayRef {
            Arc::new(Int64Array::from_iter_values(from..from + 1_000_000))
        };
        let n = estimate_of(vec![region(0), region(500_000), region(1_000_000)]);
        let truth = 2_000_000f64;
        assert!(
            (n as f64 - truth).abs() / truth < 0.05,
            "estimate {n} for {truth}"
        );
    }

    #[test]
    fn a_state_of_the_wrong_size_is_an_error() {
        let mut acc = ApproxDistinctAccumulator::default();
        let bad: ArrayRef = Arc::new(BinaryArray::from(vec![&b"xy"[..]]));
        let err = acc.merge_batch(&[bad], &[0], &[0], 1).unwrap_err();
        assert!(
            err.to_string().contains("distinct sketch of 2 bytes"),
            "{err}"
        );
    }
}
