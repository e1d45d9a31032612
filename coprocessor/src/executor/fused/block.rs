//! What one block's rows add to the groups ([`BlockTotals`]): counts,
//! sums, minimums and maximums per local slot, gathered a chunk of rows at
//! a time ([`CHUNK_ROWS`]) and folded into the groups once per block.
//!
//! WHY CHUNKS. A pack holds up to 32 Ki rows, so over a whole pack every
//! program input and every arithmetic node's result is a vector of
//! 256 KiB. TPC-H Q1 has eight of them (four columns, four nodes): 2 MiB,
//! past a core's 512 KiB of L2 here, so each kernel wrote its vector out
//! to L3 and the next kernel read it back, and half of the summing loop's
//! samples sat on those loads. The core now runs the programs over
//! [`CHUNK_ROWS`] rows at a time (DuckDB's vectors are 2048 rows), so a
//! chunk's vectors stay in L1 and L2 from the kernel that writes them to
//! the loop that adds them up. What needs the whole block stays per block:
//! the filters' selection, the rows' slots and the programs' bounds, which
//! decide for the whole block whether a program's sums fit i64. The
//! per-slot totals here live for the block too, so the chunks add into
//! them and the groups see each slot once per block, as before.
//!
//! The summing loops: programs whose sums fit i64 go two to eight at a
//! time through one pass ([`sums_n`]: each row's slot read once, its
//! values added to that slot's sums, even and odd rows into two sets so
//! that consecutive rows of one group do not wait on each other's store);
//! on AVX2 and AVX-512, blocks with few slots take the masked kernels of
//! [`FewSlots`] instead. A program alone takes [`sum_by_slot`] (four sets), and sums
//! that may leave i64 add up in i128.

use std::borrow::Cow;

use super::groups::Groups;
use super::keys::Locals;
use super::node::{Val, I64_LIMIT};
use super::plan::{AggState, FusedPlan};
use crate::simd::FewSlots;
use crate::Result;

/// Rows the programs run over at a time.
pub(super) const CHUNK_ROWS: usize = 2048;

/// A block's totals per local slot (see the module docs).
pub(super) struct BlockTotals {
    locals: Locals,
    /// The programs summed in one pass: two or more whose sums over the
    /// block fit i64.
    together: Vec<usize>,
    /// Their sums per slot, side by side (`slot × together.len() + k` for
    /// program `together[k]`), over the even rows and the odd rows.
    even: Vec<i64>,
    odd: Vec<i64>,
    /// How the SIMD kernels sum `together` over the block's few slots,
    /// where they run and take it (see [`FewSlots`]).
    few: Option<FewSlots>,
    /// The other summed programs, with their sums.
    each: Vec<(usize, Sums)>,
    /// The programs whose minimum or maximum is kept: per slot.
    extremes: Vec<(usize, Vec<i64>, Vec<i64>)>,
}

/// One program's sums over a block.
enum Sums {
    /// They fit i64 over the block: one sum when the block is `single`,
    /// else four interleaved sets of a sum per slot (`set × total + slot`).
    Narrow(Vec<i64>),
    /// They may leave i64: one per slot (one when `single`).
    Wide(Vec<i128>),
}

impl BlockTotals {
    /// Empty totals for a block of `locals`, the programs' `bounds` over
    /// it and `counts`, its rows per local slot.
    pub(super) fn new(
        plan: &FusedPlan,
        locals: Locals,
        bounds: &[(i128, i128)],
        counts: &[i64],
    ) -> Self {
        let n = plan.progs.len();
        let (mut need_sum, mut need_min, mut need_max) =
            (vec![false; n], vec![false; n], vec![false; n]);
        for (_, st) in &plan.aggs {
            match st {
                AggState::Sum { prog } | AggState::Avg { prog } => need_sum[*prog] = true,
                AggState::Min { prog } => need_min[*prog] = true,
                AggState::Max { prog } => need_max[*prog] = true,
                AggState::Count => {}
            }
        }
        let fits = |p: usize| fits_i64(bounds[p], locals.rows);
        let mut together: Vec<usize> = (0..n)
            .filter(|p| need_sum[*p] && !locals.single && fits(*p))
            .collect();
        if together.len() < 2 {
            together.clear();
        }
        let width = together.len();
        let few = match together.is_empty() {
            true => None,
            false => FewSlots::plan(counts),
        };
        let slots = if locals.single { 1 } else { locals.total };
        let each = (0..n)
            .filter(|p| need_sum[*p] && !together.contains(p))
            .map(|p| match fits(p) {
                true if locals.single => (p, Sums::Narrow(vec![0; 1])),
                true => (p, Sums::Narrow(vec![0; 4 * slots])),
                false => (p, Sums::Wide(vec![0; slots])),
            })
            .collect();
        let extremes = (0..n)
            .filter(|p| need_min[*p] || need_max[*p])
            .map(|p| (p, vec![i64::MAX; slots], vec![i64::MIN; slots]))
            .collect();
        BlockTotals {
            locals,
            even: vec![0; width * locals.total],
            odd: vec![0; width * locals.total],
            together,
            few,
            each,
            extremes,
        }
    }

    /// Adds a chunk of `rows` rows: `values`, each program's values over
    /// them, and `local`, their local slots (empty when `single`).
    pub(super) fn add(&mut self, values: &[Val<'_>], local: &[u32], rows: usize) {
        let vals: Vec<Cow<'_, [i64]>> = values.iter().map(|v| v.values(rows)).collect();
        let total = self.locals.total;
        if !self.together.is_empty() {
            let cols: Vec<&[i64]> = self.together.iter().map(|p| &vals[*p][..]).collect();
            match &self.few {
                Some(few) => {
                    let sums = few.sums(&cols, local, total);
                    self.even.iter_mut().zip(sums).for_each(|(a, b)| {
                        *a = a.wrapping_add(b);
                    })
                }
                None => sums_by_slot_together(&cols, local, &mut self.even, &mut self.odd),
            }
        }
        for (p, sums) in &mut self.each {
            let v = &vals[*p][..];
            match (sums, self.locals.single) {
                (Sums::Narrow(s), true) => s[0] = v.iter().fold(s[0], |a, x| a.wrapping_add(*x)),
                (Sums::Wide(s), true) => s[0] += v.iter().map(|x| *x as i128).sum::<i128>(),
                (Sums::Narrow(s), false) => sum_by_slot(v, local, s),
                (Sums::Wide(s), false) => {
                    for (x, l) in v.iter().zip(local) {
                        s[*l as usize] += *x as i128;
                    }
                }
            }
        }
        for (p, mins, maxs) in &mut self.extremes {
            let v = &vals[*p][..];
            if self.locals.single {
                mins[0] = v.iter().copied().fold(mins[0], i64::min);
                maxs[0] = v.iter().copied().fold(maxs[0], i64::max);
            } else {
                for (x, l) in v.iter().zip(local) {
                    let l = *l as usize;
                    mins[l] = mins[l].min(*x);
                    maxs[l] = maxs[l].max(*x);
                }
            }
        }
    }

    /// Folds the block's totals into `groups`: `group_of` is each local
    /// slot's group, `counts` its rows.
    pub(super) fn fold(self, groups: &mut Groups, group_of: &[u32], counts: &[i64]) -> Result<()> {
        let BlockTotals {
            locals,
            together,
            even,
            odd,
            each,
            extremes,
            ..
        } = self;
        let real = locals.real;
        groups.add_counts(group_of, &counts[..real]);
        let width = together.len();
        for (k, p) in together.iter().enumerate() {
            let per_slot = (0..real).map(|s| {
                let i = s * width + k;
                even[i].wrapping_add(odd[i]) as i128
            });
            groups.add_sums(*p, per_slot, group_of, &counts[..real])?;
        }
        let t = locals.total;
        for (p, sums) in each {
            match sums {
                Sums::Narrow(s) if locals.single => {
                    groups.add_sums(p, std::iter::once(s[0] as i128), group_of, counts)?
                }
                Sums::Narrow(s) => {
                    let per_slot = (0..real).map(|i| {
                        s[i].wrapping_add(s[t + i])
                            .wrapping_add(s[2 * t + i])
                            .wrapping_add(s[3 * t + i]) as i128
                    });
                    groups.add_sums(p, per_slot, group_of, &counts[..real])?
                }
                Sums::Wide(s) => {
                    groups.add_sums(p, s.into_iter().take(real), group_of, &counts[..real])?
                }
            }
        }
        for (p, mins, maxs) in extremes {
            groups.add_extremes(p, &mins, &maxs, group_of, &counts[..real]);
        }
        Ok(())
    }
}

/// Whether `rows` values within `(lo, hi)` sum inside i64.
fn fits_i64((lo, hi): (i128, i128), rows: usize) -> bool {
    lo.abs().max(hi.abs()).saturating_mul(rows as i128) <= I64_LIMIT
}

/// Adds each row's values of `cols` to its slot's sums (`slots[i]` below
/// the slots `even` and `odd` hold, `cols.len()` sums each, side by side:
/// `slot × cols.len() + k` for column `k`), even rows into `even` and odd
/// rows into `odd`; wrapping. Two to eight columns in one pass
/// ([`sums_n`]), more one at a time.
fn sums_by_slot_together(cols: &[&[i64]], slots: &[u32], even: &mut [i64], odd: &mut [i64]) {
    match cols.len() {
        0 => {}
        1 => sums_n::<1>(cols, slots, even, odd),
        2 => sums_n::<2>(cols, slots, even, odd),
        3 => sums_n::<3>(cols, slots, even, odd),
        4 => sums_n::<4>(cols, slots, even, odd),
        5 => sums_n::<5>(cols, slots, even, odd),
        6 => sums_n::<6>(cols, slots, even, odd),
        7 => sums_n::<7>(cols, slots, even, odd),
        8 => sums_n::<8>(cols, slots, even, odd),
        n => {
            for (k, c) in cols.iter().enumerate() {
                for (i, (x, s)) in c.iter().zip(slots).enumerate() {
                    let sums = if i % 2 == 0 { &mut *even } else { &mut *odd };
                    let a = &mut sums[*s as usize * n + k];
                    *a = a.wrapping_add(*x);
                }
            }
        }
    }
}

/// [`sums_by_slot_together`] for `N` columns.
fn sums_n<const N: usize>(cols: &[&[i64]], slots: &[u32], even: &mut [i64], odd: &mut [i64]) {
    // The rows every input has (they all have one per row read), as a zip
    // of them would take.
    let rows = cols.iter().fold(slots.len(), |n, c| n.min(c.len()));
    let slots = &slots[..rows];
    let v: [&[i64]; N] = std::array::from_fn(|k| &cols[k][..rows]);
    for (j, pair) in slots.chunks_exact(2).enumerate() {
        let i = 2 * j;
        let (s, t) = (pair[0] as usize * N, pair[1] as usize * N);
        let a = &mut even[s..s + N];
        for k in 0..N {
            a[k] = a[k].wrapping_add(v[k][i]);
        }
        let b = &mut odd[t..t + N];
        for k in 0..N {
            b[k] = b[k].wrapping_add(v[k][i + 1]);
        }
    }
    if rows % 2 == 1 {
        let s = slots[rows - 1] as usize * N;
        let a = &mut even[s..s + N];
        for k in 0..N {
            a[k] = a[k].wrapping_add(v[k][rows - 1]);
        }
    }
}

/// Adds `vals` to their slots' sums in `acc`: four interleaved sets
/// (`set × slots + slot`, `acc` four times the slots), so consecutive rows
/// of the same group do not wait on each other's store (eight sets were
/// tried: slower on Q1, their offsets spilled to the stack). Wrapping; the
/// caller has bounded the sums to i64.
fn sum_by_slot(vals: &[i64], slots: &[u32], acc: &mut [i64]) {
    let nslots = acc.len() / 4;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each slot's sums out of [`sum_by_slot`]'s four sets.
    fn one_at_a_time(vals: &[i64], slots: &[u32], nslots: usize) -> Vec<i64> {
        let mut acc = vec![0; 4 * nslots];
        sum_by_slot(vals, slots, &mut acc);
        (0..nslots)
            .map(|s| (0..4).fold(0i64, |x, set| x.wrapping_add(acc[set * nslots + s])))
            .collect()
    }

    #[test]
    fn sums_in_one_pass_and_in_chunks_match_one_column_at_a_time() {
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
                // some without rows.
                let nslots = 1 + (next() % 12) as usize;
                let empty = (next() % nslots as u64) as u32;
                // Half the time as skewed as Q1's: one slot with about
                // half the rows, the next few with a quarter, an eighth…,
                // the last ones rare (the AVX2 kernel's three kinds).
                let skewed = next() % 2 == 0;
                let slots: Vec<u32> = (0..rows)
                    .map(|_| {
                        let s = match skewed {
                            true => (next() | (1 << (nslots - 1))).trailing_zeros(),
                            false => (next() % nslots as u64) as u32,
                        };
                        match s {
                            s if s == empty && nslots > 1 => (s + 1) % nslots as u32,
                            s => s,
                        }
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
                // Whole, and in chunks of 1000 rows (odd lengths included).
                for chunk in [rows.max(1), 1000, 7] {
                    let (mut even, mut odd) = (vec![0; nslots * ncols], vec![0; nslots * ncols]);
                    for lo in (0..rows).step_by(chunk) {
                        let hi = (lo + chunk).min(rows);
                        let refs: Vec<&[i64]> = cols.iter().map(|c| &c[lo..hi]).collect();
                        sums_by_slot_together(&refs, &slots[lo..hi], &mut even, &mut odd);
                    }
                    for (k, c) in cols.iter().enumerate() {
                        let one = one_at_a_time(c, &slots, nslots);
                        for (s, want) in one.iter().enumerate() {
                            let i = s * ncols + k;
                            assert_eq!(
                                even[i].wrapping_add(odd[i]),
                                *want,
                                "{ncols} columns, {rows} rows, chunks of {chunk}, {nslots} slots"
                            );
                        }
                    }
                }
                // The SIMD kernels where they run and take the block: the
                // same sums, for every slot.
                let refs: Vec<&[i64]> = cols.iter().map(|c| c.as_slice()).collect();
                let mut counts = vec![0i64; nslots];
                slots.iter().for_each(|s| counts[*s as usize] += 1);
                crate::simd::for_each_level(|level| {
                    if let Some(few) = FewSlots::plan(&counts) {
                        let sums = few.sums(&refs, &slots, nslots);
                        for (k, c) in cols.iter().enumerate() {
                            let one = one_at_a_time(c, &slots, nslots);
                            for s in 0..nslots {
                                assert_eq!(sums[s * ncols + k], one[s], "{level:?} slot {s}");
                            }
                        }
                    }
                });
            }
        }
    }
}
