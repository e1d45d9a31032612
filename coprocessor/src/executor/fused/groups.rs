//! The groups: per-group totals across blocks ([`Groups`]), what a block
//! adds to them ([`Groups::add`]: counts, sums, minimums and maximums per
//! local slot, folded into the groups once per block), and the partial
//! states they end as ([`Groups::finish`]).

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Int64Array, RecordBatch, RecordBatchOptions,
    StringArray,
};
use arrow::datatypes::{DataType, SchemaRef};

use super::keys::{KeyLayout, KeyMap, Locals};
use super::node::{Val, I64_LIMIT};
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

    /// Adds a block's rows to the groups: `local` holds each row's local
    /// slot, `counts` each slot's rows, `group_of` each local group slot's
    /// group (a slot without rows has none), `values` each program's
    /// values over the rows and `bounds` their range.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add(
        &mut self,
        plan: &FusedPlan,
        group_of: &[u32],
        local: &[u32],
        counts: &[i64],
        locals: Locals,
        values: &[Val<'_>],
        bounds: &[(i128, i128)],
    ) -> Result<()> {
        let Locals { real, rows, .. } = locals;
        // Counts.
        for (l, c) in counts.iter().take(real).enumerate() {
            if *c > 0 {
                self.counts[group_of[l] as usize] += c;
            }
        }
        // Sums, minimums, maximums: which programs need which.
        let (mut need_sum, mut need_min, mut need_max) = (
            vec![false; plan.progs.len()],
            vec![false; plan.progs.len()],
            vec![false; plan.progs.len()],
        );
        for (_, st) in &plan.aggs {
            match st {
                AggState::Sum { prog } | AggState::Avg { prog } => need_sum[*prog] = true,
                AggState::Min { prog } => need_min[*prog] = true,
                AggState::Max { prog } => need_max[*prog] = true,
                AggState::Count => {}
            }
        }
        let vals: Vec<_> = values.iter().map(|v| v.values(rows)).collect();
        // The sums that fit i64 over the block, all together when there
        // are slots (see `sums_by_slot_together`); the others one program
        // at a time.
        let mut together: Vec<usize> = (0..vals.len())
            .filter(|p| need_sum[*p] && !locals.single && fits_i64(bounds[*p], rows))
            .collect();
        if together.len() < 2 {
            together.clear();
        } else {
            let cols: Vec<&[i64]> = together.iter().map(|p| &vals[*p][..]).collect();
            let sums = sums_by_slot_together(&cols, local, locals.total, &counts[..real]);
            for (k, p) in together.iter().enumerate() {
                let per_slot = sums.iter().skip(k).step_by(together.len());
                self.fold_sums(*p, per_slot.map(|s| *s as i128), group_of, counts, locals)?;
            }
        }
        for (p, vals) in vals.iter().enumerate() {
            if need_sum[p] && !together.contains(&p) {
                self.add_sums(p, vals, bounds[p], group_of, local, counts, locals)?;
            }
            if need_min[p] || need_max[p] {
                self.add_extremes(p, vals, group_of, local, counts, locals);
            }
        }
        Ok(())
    }

    /// Adds each local slot's sum (`sums`, slot by slot) to its group's.
    fn fold_sums(
        &mut self,
        p: usize,
        sums: impl Iterator<Item = i128>,
        group_of: &[u32],
        counts: &[i64],
        locals: Locals,
    ) -> Result<()> {
        for (l, s) in sums.take(locals.real).enumerate() {
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

    /// Program `p`'s sums, in i64 per block when `max |value| × rows` fits.
    #[allow(clippy::too_many_arguments)]
    fn add_sums(
        &mut self,
        p: usize,
        vals: &[i64],
        (lo, hi): (i128, i128),
        group_of: &[u32],
        local: &[u32],
        counts: &[i64],
        locals: Locals,
    ) -> Result<()> {
        let fits_i64 = fits_i64((lo, hi), locals.rows);
        if locals.single {
            let s: i128 = if fits_i64 {
                vals.iter().copied().fold(0i64, i64::wrapping_add) as i128
            } else {
                vals.iter().map(|v| *v as i128).sum()
            };
            let g = &mut self.sums[p][0];
            *g = g
                .checked_add(s)
                .ok_or_else(|| overflow!("SUM overflowed"))?;
            return Ok(());
        }
        let mut sums = vec![0i128; locals.total];
        if fits_i64 {
            for (a, b) in sums.iter_mut().zip(sum_by_slot(vals, local, locals.total)) {
                *a = b as i128;
            }
        } else {
            for (v, l) in vals.iter().zip(local) {
                sums[*l as usize] += *v as i128;
            }
        }
        self.fold_sums(p, sums.into_iter(), group_of, counts, locals)
    }

    /// Program `p`'s minimums and maximums.
    fn add_extremes(
        &mut self,
        p: usize,
        vals: &[i64],
        group_of: &[u32],
        local: &[u32],
        counts: &[i64],
        locals: Locals,
    ) {
        let mut mins = vec![i64::MAX; locals.total];
        let mut maxs = vec![i64::MIN; locals.total];
        if locals.single {
            mins[0] = vals.iter().copied().min().unwrap_or(i64::MAX);
            maxs[0] = vals.iter().copied().max().unwrap_or(i64::MIN);
        } else {
            for (v, l) in vals.iter().zip(local) {
                let l = *l as usize;
                mins[l] = mins[l].min(*v);
                maxs[l] = maxs[l].max(*v);
            }
        }
        for l in (0..locals.real).filter(|l| counts[*l] > 0) {
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

/// Whether `rows` values within `(lo, hi)` sum inside i64.
fn fits_i64((lo, hi): (i128, i128), rows: usize) -> bool {
    lo.abs().max(hi.abs()).saturating_mul(rows as i128) <= I64_LIMIT
}

/// [`sum_by_slot`] for several columns in one pass, the sums side by side
/// (`out[slot × cols.len() + k]` for column `k`), for the slots with rows
/// in `counts` (the others' sums, and those of slots past `counts`, such as
/// the filters' discard slot, may be left 0).
///
/// A block with few such slots takes the AVX-512 kernel where it runs
/// ([`crate::simd::sums_in_slots`]: each slot's sums in registers, masked
/// adds). Otherwise each row's slot is read once and its values added to
/// that slot's sums; two interleaved sets, even and odd rows; up to eight
/// columns, else one at a time.
fn sums_by_slot_together(
    cols: &[&[i64]],
    slots: &[u32],
    nslots: usize,
    counts: &[i64],
) -> Vec<i64> {
    let with_rows = counts.iter().filter(|c| **c > 0).count();
    if with_rows == 0 {
        return vec![0; nslots * cols.len()];
    }
    if with_rows <= crate::simd::MASKED_SLOTS_MAX {
        let ids: Vec<u32> = (0..counts.len() as u32)
            .filter(|s| counts[*s as usize] > 0)
            .collect();
        if let Some(sums) = crate::simd::sums_in_slots(cols, slots, &ids, nslots) {
            return sums;
        }
    }
    match cols.len() {
        2 => sums_n::<2>(cols, slots, nslots),
        3 => sums_n::<3>(cols, slots, nslots),
        4 => sums_n::<4>(cols, slots, nslots),
        5 => sums_n::<5>(cols, slots, nslots),
        6 => sums_n::<6>(cols, slots, nslots),
        7 => sums_n::<7>(cols, slots, nslots),
        8 => sums_n::<8>(cols, slots, nslots),
        n => {
            let each: Vec<Vec<i64>> = cols.iter().map(|c| sum_by_slot(c, slots, nslots)).collect();
            (0..nslots * n).map(|i| each[i % n][i / n]).collect()
        }
    }
}

fn sums_n<const N: usize>(cols: &[&[i64]], slots: &[u32], nslots: usize) -> Vec<i64> {
    // The rows every input has (they all have one per row read), as a zip
    // of them would take.
    let rows = cols.iter().fold(slots.len(), |n, c| n.min(c.len()));
    let slots = &slots[..rows];
    let v: [&[i64]; N] = std::array::from_fn(|k| &cols[k][..rows]);
    let mut even = vec![[0i64; N]; nslots];
    let mut odd = vec![[0i64; N]; nslots];
    for (j, pair) in slots.chunks_exact(2).enumerate() {
        let i = 2 * j;
        let a = &mut even[pair[0] as usize];
        for k in 0..N {
            a[k] = a[k].wrapping_add(v[k][i]);
        }
        let b = &mut odd[pair[1] as usize];
        for k in 0..N {
            b[k] = b[k].wrapping_add(v[k][i + 1]);
        }
    }
    if rows % 2 == 1 {
        let a = &mut even[slots[rows - 1] as usize];
        for k in 0..N {
            a[k] = a[k].wrapping_add(v[k][rows - 1]);
        }
    }
    even.iter()
        .zip(&odd)
        .flat_map(|(a, b)| (0..N).map(move |k| a[k].wrapping_add(b[k])))
        .collect()
}

/// Sums `vals` per slot (`slots[i]` < `nslots`). Four interleaved sets of
/// sums, so consecutive rows of the same group do not wait on each other's
/// store (eight sets were tried: slower on Q1, their offsets spilled to
/// the stack). The caller has bounded the sums to i64.
fn sum_by_slot(vals: &[i64], slots: &[u32], nslots: usize) -> Vec<i64> {
    let mut acc = vec![0i64; 4 * nslots];
    let (a, rest) = acc.split_at_mut(nslots);
    let (b, rest) = rest.split_at_mut(nslots);
    let (c, d) = rest.split_at_mut(nslots);
    let mut vc = vals.chunks_exact(4);
    let mut sc = slots.chunks_exact(4);
    for (v, s) in (&mut vc).zip(&mut sc) {
        a[s[0] as usize] = a[s[0] as usize].wrapping_add(v[0]);
        b[s[1] as usize] = b[s[1] as usize].wrapping_add(v[1]);
        c[s[2] as usize] = c[s[2] as usize].wrapping_add(v[2]);
        d[s[3] as usize] = d[s[3] as usize].wrapping_add(v[3]);
    }
    for (v, s) in vc.remainder().iter().zip(sc.remainder()) {
        a[*s as usize] = a[*s as usize].wrapping_add(*v);
    }
    (0..nslots)
        .map(|i| {
            a[i].wrapping_add(b[i])
                .wrapping_add(c[i])
                .wrapping_add(d[i])
        })
        .collect()
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

    #[test]
    fn sums_in_one_pass_match_one_column_at_a_time() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for ncols in 1..=10 {
            for rows in [0, 1, 2, 7, 8, 9, 4096, 4097, 4103] {
                // Up to twelve slots (past the AVX-512 kernel's eight),
                // some without rows, and the last one, as the filters'
                // discard slot, left out of `counts`.
                let nslots = 1 + (next() % 12) as usize;
                let empty = (next() % nslots as u64) as u32;
                let slots: Vec<u32> = (0..rows)
                    .map(|_| match (next() % nslots as u64) as u32 {
                        s if s == empty && nslots > 1 => (s + 1) % nslots as u32,
                        s => s,
                    })
                    .collect();
                let big = next() % 3 == 0;
                let cols: Vec<Vec<i64>> = (0..ncols)
                    .map(|_| {
                        (0..rows)
                            .map(|_| match big {
                                // Sums that wrap: every copy must wrap alike.
                                true => next() as i64,
                                false => (next() % 2_000_001) as i64 - 1_000_000,
                            })
                            .collect()
                    })
                    .collect();
                let refs: Vec<&[i64]> = cols.iter().map(|c| c.as_slice()).collect();
                let counts = crate::executor::fused::keys::count_by_slot(&slots, nslots);
                let real = nslots - usize::from(nslots > 1);
                crate::simd::for_each_level(|level| {
                    let together = sums_by_slot_together(&refs, &slots, nslots, &counts[..real]);
                    assert_eq!(together.len(), nslots * ncols);
                    for (k, c) in cols.iter().enumerate() {
                        let one = sum_by_slot(c, &slots, nslots);
                        for (s, want) in one.iter().enumerate().take(real) {
                            if counts[s] > 0 {
                                assert_eq!(
                                    together[s * ncols + k],
                                    *want,
                                    "{ncols} columns, {rows} rows, {nslots} slots, {level:?}"
                                );
                            }
                        }
                    }
                });
            }
        }
    }
}
