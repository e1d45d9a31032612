//! The groups: per-group totals across blocks ([`Groups`]), a block's
//! per-slot totals folded into them ([`Groups::add_counts`],
//! [`Groups::add_sums`], [`Groups::add_extremes`]; the block's totals
//! themselves are `block.rs`'s), and the partial states they end as
//! ([`Groups::finish`]).

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Int64Array, RecordBatch, RecordBatchOptions,
    StringArray,
};
use arrow::datatypes::{DataType, SchemaRef};

use super::keys::{KeyLayout, KeyMap};
use super::plan::{AggState, FusedPlan, KeyCol};
use super::source::Source;
use crate::{internal, invalid_input, overflow, Result};

/// Per-group totals across blocks.
///
/// A GROUP BY of one integer column (an order, part or supplier key: TPC-H
/// Q18's 1.5 million orders) keeps its keys as plain integers; others as
/// a row of [`KeyValue`]s. Integer keys that arrive in ascending order
/// (rows stored in key order) are only appended: `int_index` stays empty
/// and a repeated key is found by binary search, until a key arrives out
/// of order and the index is built.
#[derive(Default)]
pub(super) struct Groups {
    keys: Vec<Vec<KeyValue>>,
    index: KeyMap<Vec<KeyValue>, u32>,
    /// The key of each group, by slot.
    int_keys: Vec<i64>,
    int_index: KeyMap<i64, u32>,
    /// A key has come out of order: `int_index` holds every group.
    int_unordered: bool,
    counts: Vec<i64>,
    /// Per program: per group.
    sums: Vec<Vec<i128>>,
    mins: Vec<Vec<i64>>,
    maxs: Vec<Vec<i64>>,
}

/// One key of a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum KeyValue {
    Int(i64),
    Bytes(Vec<u8>),
}

impl Groups {
    pub(super) fn new(progs: usize) -> Self {
        Groups {
            sums: vec![Vec::new(); progs],
            mins: vec![Vec::new(); progs],
            maxs: vec![Vec::new(); progs],
            ..Default::default()
        }
    }

    fn slot(&mut self, key: Vec<KeyValue>) -> u32 {
        if let Some(s) = self.index.get(&key) {
            return *s;
        }
        let s = self.new_group();
        self.keys.push(key.clone());
        self.index.insert(key, s);
        s
    }

    fn int_slot(&mut self, key: i64) -> u32 {
        if !self.int_unordered {
            match self.int_keys.last() {
                Some(last) if key == *last => return self.int_keys.len() as u32 - 1,
                Some(last) if key < *last => match self.int_keys.binary_search(&key) {
                    Ok(s) => return s as u32,
                    Err(_) => {
                        self.int_unordered = true;
                        self.int_index = (0..).zip(&self.int_keys).map(|(s, k)| (*k, s)).collect();
                    }
                },
                _ => {
                    self.int_keys.push(key);
                    return self.new_group();
                }
            }
        }
        if let Some(s) = self.int_index.get(&key) {
            return *s;
        }
        let s = self.new_group();
        self.int_keys.push(key);
        self.int_index.insert(key, s);
        s
    }

    /// A new group's totals, empty: its slot.
    fn new_group(&mut self) -> u32 {
        let s = self.counts.len() as u32;
        self.counts.push(0);
        for v in &mut self.sums {
            v.push(0);
        }
        for v in &mut self.mins {
            v.push(i64::MAX);
        }
        for v in &mut self.maxs {
            v.push(i64::MIN);
        }
        s
    }

    /// The group of each of a block's local group slots (`local_keys`:
    /// their lookup-table indexes), adding the groups not seen before.
    pub(super) fn slots_for(
        &mut self,
        keys: &[KeyCol],
        layout: &KeyLayout<'_>,
        src: &[Source<'_>],
        local_keys: &[u32],
    ) -> Result<Vec<u32>> {
        if keys.is_empty() {
            if self.keys.is_empty() {
                self.slot(vec![]);
            }
            return Ok(vec![0]);
        }
        if let [KeyCol::Int { .. }] = keys {
            return local_keys
                .iter()
                .map(|idx| {
                    let key = layout
                        .int_key_of(*idx)
                        .ok_or_else(|| internal!("one integer key without its codes"))?;
                    Ok(self.int_slot(key))
                })
                .collect();
        }
        local_keys
            .iter()
            .map(|idx| Ok(self.slot(layout.key_of(keys, src, *idx)?)))
            .collect()
    }

    /// Adds a block's rows per local slot (`counts`, its real slots) to
    /// the groups: `group_of` is each local slot's group (a slot without
    /// rows has none).
    pub(super) fn add_counts(&mut self, group_of: &[u32], counts: &[i64]) {
        for (l, c) in counts.iter().enumerate() {
            if *c > 0 {
                self.counts[group_of[l] as usize] += c;
            }
        }
    }

    /// Adds program `p`'s sum per local slot (`sums`, slot by slot) to its
    /// group's; slots without rows in `counts` are passed over.
    pub(super) fn add_sums(
        &mut self,
        p: usize,
        sums: impl Iterator<Item = i128>,
        group_of: &[u32],
        counts: &[i64],
    ) -> Result<()> {
        for (l, s) in sums.take(counts.len()).enumerate() {
            if counts[l] == 0 {
                continue;
            }
            let g = &mut self.sums[p][group_of[l] as usize];
            *g = g
                .checked_add(s)
                .ok_or_else(|| overflow!("SUM overflowed"))?;
        }
        Ok(())
    }

    /// Program `p`'s minimum and maximum per local slot into its group's.
    pub(super) fn add_extremes(
        &mut self,
        p: usize,
        mins: &[i64],
        maxs: &[i64],
        group_of: &[u32],
        counts: &[i64],
    ) {
        for l in (0..counts.len()).filter(|l| counts[*l] > 0) {
            let g = group_of[l] as usize;
            self.mins[p][g] = self.mins[p][g].min(mins[l]);
            self.maxs[p][g] = self.maxs[p][g].max(maxs[l]);
        }
    }

    /// The groups' partial states, in the partial aggregator's `schema`.
    pub(super) fn finish(self, plan: &FusedPlan, schema: SchemaRef) -> Result<RecordBatch> {
        let mut g = self;
        // Without GROUP BY the one group exists even if no row came.
        if plan.keys.is_empty() && g.keys.is_empty() {
            g.slot(vec![]);
        }
        let n = g.counts.len();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (q, k) in plan.keys.iter().enumerate() {
            let ints = || {
                g.keys.iter().map(|key| match &key[q] {
                    KeyValue::Int(v) => *v,
                    KeyValue::Bytes(_) => 0,
                })
            };
            cols.push(match k {
                KeyCol::Int { data_type, .. } if plan.keys.len() == 1 => {
                    int_array(data_type, g.int_keys.iter().map(|v| Some(*v)))?
                }
                KeyCol::Int { data_type, .. } => int_array(data_type, ints().map(Some))?,
                KeyCol::Str { .. } => {
                    let strs: Vec<String> = g
                        .keys
                        .iter()
                        .map(|key| match &key[q] {
                            KeyValue::Bytes(b) => String::from_utf8(b.clone())
                                .map_err(|_| invalid_input!("a string key is not UTF-8")),
                            KeyValue::Int(_) => Err(internal!("integer in a string key")),
                        })
                        .collect::<Result<_>>()?;
                    Arc::new(StringArray::from(strs))
                }
            });
        }
        let seen = |s: usize| g.counts[s] > 0;
        for (f, st) in &plan.aggs {
            match st {
                AggState::Count => cols.push(Arc::new(Int64Array::from(g.counts.clone()))),
                AggState::Sum { prog } | AggState::Avg { prog } => {
                    let sum_type = f
                        .state_types()
                        .into_iter()
                        .next()
                        .ok_or_else(|| internal!("SUM without a state"))?;
                    let sums = &g.sums[*prog];
                    // The partial is exact and wide (i128 as DECIMAL(38, s)):
                    // whether it fits the result is the final stage's call.
                    cols.push(match &sum_type {
                        DataType::Decimal128(p, s) => {
                            let vals = (0..n).map(|i| seen(i).then(|| sums[i]));
                            Arc::new(
                                Decimal128Array::from_iter(vals)
                                    .with_precision_and_scale(*p, *s)?,
                            ) as ArrayRef
                        }
                        other => return Err(internal!("fused SUM into {other}")),
                    });
                    if matches!(st, AggState::Avg { .. }) {
                        cols.push(Arc::new(Int64Array::from(g.counts.clone())));
                    }
                }
                AggState::Min { prog } | AggState::Max { prog } => {
                    let v = if matches!(st, AggState::Min { .. }) {
                        &g.mins[*prog]
                    } else {
                        &g.maxs[*prog]
                    };
                    let t = f.state_types().into_iter().next().unwrap_or(DataType::Null);
                    cols.push(int_array(&t, (0..n).map(|s| seen(s).then(|| v[s])))?);
                }
            }
        }
        Ok(RecordBatch::try_new_with_options(
            schema,
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// An integer-stored column of SQL type `t` from i64 values.
pub(super) fn int_array(t: &DataType, vals: impl Iterator<Item = Option<i64>>) -> Result<ArrayRef> {
    Ok(match t {
        DataType::Int64 => Arc::new(vals.collect::<Int64Array>()),
        DataType::Date32 => Arc::new(vals.map(|v| v.map(|x| x as i32)).collect::<Date32Array>()),
        DataType::Decimal128(p, s) => Arc::new(
            vals.map(|v| v.map(|x| x as i128))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(*p, *s)?,
        ),
        other => return Err(internal!("fused integer column of type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_in_order_then_out_of_order_keep_one_slot_per_key() {
        let mut g = Groups::new(0);
        let keys = [1, 1, 2, 5, 5, 9, 2, 5, 3, 1, 9, 3, 10, -4, -4];
        let slots: Vec<u32> = keys.iter().map(|k| g.int_slot(*k)).collect();
        for (i, a) in keys.iter().enumerate() {
            assert_eq!(g.int_keys[slots[i] as usize], *a, "slot of {a}");
            for (j, b) in keys.iter().enumerate() {
                assert_eq!(slots[i] == slots[j], a == b, "{a} and {b}");
            }
        }
        assert_eq!(g.counts.len(), 7);
        assert!(g.int_unordered);
    }

    #[test]
    fn integer_keys_in_order_need_no_index() {
        let mut g = Groups::new(0);
        for k in [3, 3, 4, 8, 8, 8, 20, 4, 3] {
            g.int_slot(k);
        }
        assert_eq!(g.int_keys, vec![3, 4, 8, 20]);
        assert!(g.int_index.is_empty() && !g.int_unordered);
    }
}
