//! Vectorized filter kernels over a pack's stored columns, shared by the
//! table scan (late materialization) and the fused aggregation, and the
//! rule that turns a comparison with a constant into the range they test
//! ([`compare_range`]).
//!
//! A selection is a bitmap of 64-row words. A filter narrows it one word at
//! a time: a loop without bounds checks writes one 0/1 byte per row (the
//! compiler turns it into vector compares), the bytes are packed into a
//! word by SSE2's byte movemask on x86-64 ([`crate::simd::bitmask64`]), and the word
//! is ANDed in. Words already empty are skipped.

use std::sync::Arc;

use crate::codec::pack::{IntView, Lane, WidthVisitor};
use crate::expr::{Bloom, CmpOp};
use crate::simd::{bitmask64, kernel, prefetch_ahead, prefetch_span};

/// A bitmap selecting rows `0..n`.
pub fn all_rows(n: usize) -> Vec<u64> {
    let mut bits = Vec::new();
    all_rows_into(&mut bits, n);
    bits
}

/// [`all_rows`] into `bits`, reusing its allocation.
pub fn all_rows_into(bits: &mut Vec<u64>, n: usize) {
    let words = n.div_ceil(64);
    bits.clear();
    bits.resize(words, !0u64);
    if !n.is_multiple_of(64) {
        bits[words - 1] = (1u64 << (n % 64)) - 1;
    }
}

/// The selected row indices of a bitmap.
///
/// Each word writes its first eight indices unconditionally and moves on by
/// its count (simdjson's `flatten_bits`), so a sparse bitmap — Q6 keeps
/// about one row in fifty — costs no mispredicted branch per word; a word
/// with more than eight rows finishes in a loop. The slots written past a
/// word's count are overwritten by the next word or cut off at the end.
pub fn indices(bits: &[u64], out: &mut Vec<u32>) {
    let total: usize = bits.iter().map(|w| w.count_ones() as usize).sum();
    out.clear();
    out.resize(total + 8, 0);
    let mut at = 0;
    for (w, &word) in bits.iter().enumerate() {
        let base = (w * 64) as u32;
        let count = word.count_ones() as usize;
        let mut rest = word;
        for slot in &mut out[at..at + 8] {
            *slot = base + rest.trailing_zeros();
            rest &= rest.wrapping_sub(1);
        }
        let mut next = at + 8;
        while rest != 0 {
            out[next] = base + rest.trailing_zeros();
            rest &= rest - 1;
            next += 1;
        }
        at += count;
    }
    out.truncate(total);
}

/// Narrows the selection bitmap `bits` (rows `0..n`) by a filter, 64 rows
/// at a time: `fill(base, bytes)` writes one 0/1 byte per row of the step
/// (a loop the compiler vectorizes), the bytes are packed into a word and
/// ANDed in. Words already empty are skipped. `fill` must write every byte
/// of its slice: the buffer is reused, and only the last, partial word's
/// is cleared first.
#[inline(always)]
pub fn and_masks(n: usize, bits: &mut [u64], fill: impl Fn(usize, &mut [u8])) {
    let mut bytes = [0u8; 64];
    for (w, word) in bits.iter_mut().enumerate() {
        if *word == 0 {
            continue;
        }
        let base = w * 64;
        let len = (n - base).min(64);
        if len < 64 {
            bytes.fill(0);
        }
        fill(base, &mut bytes[..len]);
        *word &= bitmask64(&bytes);
    }
}

/// [`and_masks`] over a packed column's lanes `d` (`L::BYTES` a row):
/// `fill(lanes, bytes)` gets the lanes from the step's first row on, and
/// each step asks for the bytes [`prefetch_ahead`] further on (see
/// "PREFETCH" in [`crate::simd`]).
#[inline(always)]
fn and_lanes<L: Lane>(n: usize, bits: &mut [u64], d: &[u8], fill: impl Fn(&[u8], &mut [u8])) {
    let ahead = prefetch_ahead();
    and_masks(n, bits, |base, bytes| {
        if ahead > 0 {
            prefetch_span(d, L::BYTES * base + ahead, 64 * L::BYTES);
        }
        fill(&d[L::BYTES * base..], bytes)
    })
}

/// [`and_masks`] for `lo <= value <= hi` over a frame-of-reference column:
/// the bounds move into the stored frame (value − min) and the test runs
/// on the stored width — 16 or 32 lanes per vector instruction for 2- and
/// 1-byte columns.
#[inline(always)]
pub fn and_range_packed(v: &IntView<'_>, n: usize, bits: &mut [u64], lo: i64, hi: i64) {
    let top = v.max as i128 - v.min as i128;
    let a = (lo as i128 - v.min as i128).max(0);
    let b = (hi as i128 - v.min as i128).min(top);
    if a > b {
        bits.fill(0);
        return;
    }
    if a == 0 && b == top {
        return;
    }
    v.visit(InStoredRange {
        n,
        bits,
        a: a as u64,
        span: (b - a) as u64,
    })
}

kernel! {
    /// [`and_range_packed`] for the baseline and for AVX2 (see
    /// [`crate::simd`]), for callers outside a kernel of their own.
    pub fn narrow_range(v: &IntView<'_>, n: usize, bits: &mut [u64], lo: i64, hi: i64) {
        and_range_packed(v, n, bits, lo, hi)
    }
}

kernel! {
    /// [`and_probed`] by a Bloom filter of join keys, for the baseline and
    /// for AVX2 (see [`crate::simd`]: the eight words of a probe are one
    /// vector AND there).
    pub fn narrow_bloom(v: &IntView<'_>, n: usize, bits: &mut [u64], bloom: &Bloom) {
        // Inlined by force: left to itself the compiler called the probe
        // as a function of its own, built without AVX2 (a third of the
        // stores' samples in TPC-H Q21, the probe 3× slower).
        and_probed(v, n, bits, #[inline(always)] |x| bloom.may_contain(x))
    }
}

kernel! {
    /// [`and_probed`] by a set of keys, for the baseline and for AVX2.
    pub fn narrow_set(v: &IntView<'_>, n: usize, bits: &mut [u64], set: &IntSet) {
        and_probed(v, n, bits, #[inline(always)] |x| set.contains(x))
    }
}

/// [`and_range_packed`] in the stored frame: `a <= value − min <= a + span`.
struct InStoredRange<'b> {
    n: usize,
    bits: &'b mut [u64],
    a: u64,
    span: u64,
}

impl WidthVisitor for InStoredRange<'_> {
    type Output = ();

    fn constant(self) {
        if self.a != 0 {
            self.bits.fill(0)
        }
    }

    #[inline(always)]
    fn lanes<L: Lane>(self, d: &[u8]) {
        let (a, span) = (L::truncate(self.a), L::truncate(self.span));
        and_lanes::<L>(self.n, self.bits, d, |lanes, bytes| {
            for (m, x) in bytes.iter_mut().zip(L::iter(lanes)) {
                *m = (x.wrapping_sub(a) <= span) as u8;
            }
        })
    }
}

/// [`and_masks`] over a frame-of-reference column, `keep` deciding on each
/// value: one loop per stored width, reading the packed bytes in place.
#[inline(always)]
pub fn and_packed(v: &IntView<'_>, n: usize, bits: &mut [u64], keep: impl Fn(i64) -> bool) {
    v.visit(Keep {
        n,
        bits,
        min: v.min,
        keep,
        sparse: false,
    })
}

/// [`and_packed`], and with `sparse` [`and_probed`].
struct Keep<'b, F> {
    n: usize,
    bits: &'b mut [u64],
    min: i64,
    keep: F,
    sparse: bool,
}

impl<F: Fn(i64) -> bool> WidthVisitor for Keep<'_, F> {
    type Output = ();

    fn constant(self) {
        let k = (self.keep)(self.min) as u8;
        and_masks(self.n, self.bits, |_, bytes| bytes.fill(k))
    }

    #[inline(always)]
    fn lanes<L: Lane>(self, d: &[u8]) {
        let (min, keep, n) = (self.min, self.keep, self.n);
        if self.sparse {
            for (w, word) in self.bits.iter_mut().enumerate() {
                let base = w * 64;
                let len = (n - base).min(64);
                let lanes = &d[L::BYTES * base..L::BYTES * (base + len)];
                probe_word(
                    word,
                    len,
                    |i| min.wrapping_add(L::at(lanes, i).into() as i64),
                    &keep,
                );
            }
            return;
        }
        and_lanes::<L>(n, self.bits, d, |lanes, bytes| {
            for (b, x) in bytes.iter_mut().zip(L::iter(lanes)) {
                *b = keep(min.wrapping_add(x.into() as i64)) as u8;
            }
        })
    }
}

/// A word with at most this many rows still selected has only those rows
/// tested by [`and_probed`]; a fuller one tests all 64 in one loop.
const SPARSE_PROBE_ROWS: u32 = 40;

/// The selection word `word` (rows `base..base + len`) narrowed by `keep`
/// of each row's value (`value(i)` for row `base + i`): only the rows still
/// selected are tested when they are few, every row otherwise.
#[inline(always)]
pub fn probe_word<K: Fn(i64) -> bool>(
    word: &mut u64,
    len: usize,
    value: impl Fn(usize) -> i64,
    // By reference, called as itself: an `impl Fn` given `&keep` calls it
    // through `<&F as Fn>::call`, which the compiler left out of line
    // (and so without AVX2) in the Bloom kernel.
    keep: &K,
) {
    if *word == 0 {
        return;
    }
    if word.count_ones() <= SPARSE_PROBE_ROWS {
        let mut rest = *word;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if !keep(value(i)) {
                *word &= !(1u64 << i);
            }
        }
    } else {
        let mut m = 0u64;
        for i in 0..len {
            m |= (keep(value(i)) as u64) << i;
        }
        *word &= m;
    }
}

/// [`and_packed`] for a test that costs more than a compare (a hash-set
/// or Bloom probe, a cache miss each): in a word whose rows earlier
/// filters mostly dropped, only the rows left are probed. TPC-H Q7's
/// lineitem scan keeps 8% of rows by its supplier keys before its Bloom
/// filter of order keys runs, which then probes those 8%, not every row.
#[inline(always)]
pub fn and_probed(v: &IntView<'_>, n: usize, bits: &mut [u64], keep: impl Fn(i64) -> bool) {
    v.visit(Keep {
        n,
        bits,
        min: v.min,
        keep,
        sparse: true,
    })
}

/// The stored integers `x` for which `x × factor  op  c` holds, as one
/// inclusive range `(lo, hi)`, or None when no i64 does: the rule both the
/// zone-map filter ([`super::ZoneFilter`]) and the fused aggregation's
/// predicates turn "column op constant" into a range check with.
///
/// `c` is the constant's stored value at the comparison's type (days for a
/// DATE, the unscaled value for a DECIMAL); `factor` (≥ 1) is the 10^k of an
/// upscaling cast around the column (a DECIMAL(15,2) column compared at
/// scale 4 has factor 100, and `x × 100 < 12345` keeps `x <= 123`). The
/// arithmetic is exact in i128 and only the result is clamped to i64, so a
/// constant beyond every stored value gives an empty or a full range, never
/// a wrapped one. `<>` excludes at most one value: its range is every value.
pub fn compare_range(op: CmpOp, c: i128, factor: i128) -> Option<(i64, i64)> {
    let factor = factor.max(1);
    let floor = c.div_euclid(factor);
    let ceil = floor + (c.rem_euclid(factor) != 0) as i128;
    let (lo, hi) = match op {
        CmpOp::Eq => (ceil, floor),
        CmpOp::Lt => (i128::MIN, ceil.saturating_sub(1)),
        CmpOp::Le => (i128::MIN, floor),
        CmpOp::Gt => (floor.saturating_add(1), i128::MAX),
        CmpOp::Ge => (ceil, i128::MAX),
        CmpOp::Ne => (i128::MIN, i128::MAX),
    };
    let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    // Past i64 on either side, no stored value is in the range.
    (lo <= hi && lo <= i64::MAX as i128 && hi >= i64::MIN as i128).then(|| (clamp(lo), clamp(hi)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::pack::int_column_pack;
    use crate::codec::pack::{ColumnView, PackBuilder, PackView};
    use crate::codec::row::Datum;
    use arrow::datatypes::DataType;

    #[test]
    fn indices_list_every_set_bit_in_order_at_every_density() {
        let words = [
            0u64,
            1,
            1 << 63,
            0xff,
            0x1ff,
            !0,
            0x8000_0000_0000_0001,
            0xaaaa_aaaa_aaaa_aaaa,
            0x0100_0000_0000_0000,
        ];
        // Every word alone, then every pair in both orders (a dense word
        // after a sparse one and the other way round), then all of them.
        let mut bitmaps: Vec<Vec<u64>> = vec![vec![], words.to_vec()];
        for a in words {
            bitmaps.push(vec![a]);
            for b in words {
                bitmaps.push(vec![a, b, 0, a]);
            }
        }
        let mut got = vec![7, 7, 7];
        for bits in bitmaps {
            let want: Vec<u32> = (0..bits.len() as u32 * 64)
                .filter(|i| bits[*i as usize / 64] >> (i % 64) & 1 == 1)
                .collect();
            indices(&bits, &mut got);
            assert_eq!(got, want, "{bits:x?}");
        }
    }

    #[test]
    fn range_filters_agree_with_a_plain_loop_at_every_width() {
        for spread in [0i64, 200, 60_000, 4_000_000_000, i64::MAX / 2] {
            let vals: Vec<i64> = (0..1000).map(|i| -7 + (i * 7919) % (spread + 1)).collect();
            let mut b = PackBuilder::new(&[(1, DataType::Int64)]).unwrap();
            for (h, v) in vals.iter().enumerate() {
                b.push(h as i64, &[Datum::Int(*v)]).unwrap();
            }
            let (_, value) = b.finish().unwrap();
            let pack = PackView::parse(&value).unwrap();
            let ColumnView::Int(col) = pack.column(1).unwrap() else {
                panic!("not an integer column")
            };
            for (lo, hi) in [
                (i64::MIN, i64::MAX),
                (0, 100),
                (-7, -7),
                (50, 40),
                (1000, i64::MAX),
            ] {
                let want: Vec<u32> = (0..vals.len() as u32)
                    .filter(|i| (lo..=hi).contains(&vals[*i as usize]))
                    .collect();
                crate::simd::for_each_level(|level| {
                    let mut bits = all_rows(vals.len());
                    narrow_range(&col, vals.len(), &mut bits, lo, hi);
                    let mut got = Vec::new();
                    indices(&bits, &mut got);
                    let ahead = crate::simd::prefetch_ahead();
                    assert_eq!(
                        got, want,
                        "spread {spread} range [{lo}, {hi}] {level:?} prefetch {ahead}"
                    );
                });
            }
        }
    }

    #[test]
    fn value_filters_agree_with_a_plain_loop_at_every_width() {
        let keeps: [&dyn Fn(i64) -> bool; 3] =
            [&|v| v.rem_euclid(3) == 0, &|v| v == -7, &|v| v != -7];
        for spread in [0i64, 200, 60_000, 4_000_000_000, i64::MAX / 2] {
            let vals: Vec<i64> = (0..1000).map(|i| -7 + (i * 7919) % (spread + 1)).collect();
            let value = int_column_pack(&vals);
            let pack = PackView::parse(&value).unwrap();
            let ColumnView::Int(col) = pack.column(1).unwrap() else {
                panic!("not an integer column")
            };
            for (k, keep) in keeps.iter().enumerate() {
                crate::simd::for_each_level(|level| {
                    let what = format!(
                        "spread {spread} filter {k} {level:?} prefetch {}",
                        crate::simd::prefetch_ahead()
                    );
                    // Start from a selection with holes: emptied words
                    // stay empty.
                    let mut bits = all_rows(vals.len());
                    bits[1] = 0;
                    // A sparse word (rows 128..192 keep every third row)
                    // is probed row by row by `and_probed`.
                    bits[2] = 0x9249_2492_4924_9249;
                    let mut probed = bits.clone();
                    and_packed(&col, vals.len(), &mut bits, keep);
                    and_probed(&col, vals.len(), &mut probed, keep);
                    assert_eq!(bits, probed, "{what}");
                    for (i, v) in vals.iter().enumerate() {
                        let kept = (bits[i / 64] >> (i % 64)) & 1 == 1;
                        let sparse = (128..192).contains(&i) && (i - 128) % 3 != 0;
                        let want = !(64..128).contains(&i) && !sparse && keep(*v);
                        assert_eq!(kept, want, "{what} row {i}");
                    }
                });
            }
        }
    }

    #[test]
    fn bloom_and_set_kernels_keep_their_members_at_every_level() {
        let vals: Vec<i64> = (0..1000).map(|i| (i * 7919) % 5000).collect();
        let value = int_column_pack(&vals);
        let pack = PackView::parse(&value).unwrap();
        let ColumnView::Int(col) = pack.column(1).unwrap() else {
            panic!("not an integer column")
        };
        let members: Vec<i64> = (0..5000).step_by(7).collect();
        let bloom = Bloom::build(&members, 12);
        let set = IntSet::new(members.clone());
        crate::simd::for_each_level(|level| {
            let mut by_bloom = all_rows(vals.len());
            // A sparse word: only every fifth row of 64..128 is left.
            by_bloom[1] = 0x0842_1084_2108_4210;
            let mut by_set = by_bloom.clone();
            narrow_bloom(&col, vals.len(), &mut by_bloom, &bloom);
            narrow_set(&col, vals.len(), &mut by_set, &set);
            let mut false_hits = 0;
            for (i, v) in vals.iter().enumerate() {
                let selected = !(64..128).contains(&i) || (i - 64) % 5 == 4;
                let bloom_kept = (by_bloom[i / 64] >> (i % 64)) & 1 == 1;
                let set_kept = (by_set[i / 64] >> (i % 64)) & 1 == 1;
                let member = v % 7 == 0;
                assert_eq!(set_kept, selected && member, "{level:?} row {i}");
                // A Bloom filter keeps every member, and a few others.
                assert!(bloom_kept || !(selected && member), "{level:?} row {i}");
                assert!(selected || !bloom_kept, "{level:?} row {i}");
                false_hits += (bloom_kept && !member) as usize;
            }
            assert!(false_hits < 50, "{level:?}: {false_hits} false hits");
        });
    }

    const MIN: i64 = i64::MIN;
    const MAX: i64 = i64::MAX;

    #[test]
    fn a_comparison_becomes_the_range_of_values_that_pass() {
        use CmpOp::*;
        for (op, want) in [
            (Eq, Some((10, 10))),
            (Lt, Some((MIN, 9))),
            (Le, Some((MIN, 10))),
            (Gt, Some((11, MAX))),
            (Ge, Some((10, MAX))),
            (Ne, Some((MIN, MAX))),
        ] {
            assert_eq!(compare_range(op, 10, 1), want, "{op:?} 10");
        }
        // Negative constants round the same way as positive ones.
        for (op, want) in [
            (Eq, Some((-10, -10))),
            (Lt, Some((MIN, -11))),
            (Le, Some((MIN, -10))),
            (Gt, Some((-9, MAX))),
            (Ge, Some((-10, MAX))),
        ] {
            assert_eq!(compare_range(op, -10, 1), want, "{op:?} -10");
        }
    }

    #[test]
    fn a_constant_at_or_beyond_the_ends_of_bigint_never_wraps() {
        use CmpOp::*;
        let above = MAX as i128 + 1;
        let below = MIN as i128 - 1;
        for (op, c, want) in [
            // At the ends: < MIN and > MAX hold for no value.
            (Lt, MIN as i128, None),
            (Le, MIN as i128, Some((MIN, MIN))),
            (Gt, MAX as i128, None),
            (Ge, MAX as i128, Some((MAX, MAX))),
            (Lt, MAX as i128, Some((MIN, MAX - 1))),
            (Gt, MIN as i128, Some((MIN + 1, MAX))),
            // Beyond: every value or none, not a clamped bound.
            (Eq, above, None),
            (Lt, above, Some((MIN, MAX))),
            (Le, above, Some((MIN, MAX))),
            (Gt, above, None),
            (Ge, above, None),
            (Eq, below, None),
            (Lt, below, None),
            (Le, below, None),
            (Gt, below, Some((MIN, MAX))),
            (Ge, below, Some((MIN, MAX))),
            // The widest constants a DECIMAL(38) can hold, and past them.
            (Lt, i128::MAX, Some((MIN, MAX))),
            (Gt, i128::MAX, None),
            (Lt, i128::MIN, None),
            (Ge, i128::MIN, Some((MIN, MAX))),
            (Eq, i128::MIN, None),
        ] {
            assert_eq!(compare_range(op, c, 1), want, "{op:?} {c}");
        }
        // The same with the widest upscaling cast (10^18).
        let f = 10i128.pow(18);
        assert_eq!(compare_range(Lt, i128::MAX, f), Some((MIN, MAX)));
        assert_eq!(compare_range(Gt, i128::MAX, f), None);
        assert_eq!(compare_range(Le, 10i128.pow(37), f), Some((MIN, MAX)));
        assert_eq!(compare_range(Ge, -(10i128.pow(37)), f), Some((MIN, MAX)));
        assert_eq!(compare_range(Lt, i128::MIN, f), None);
    }

    #[test]
    fn an_upscaled_column_rounds_the_constant_inward() {
        use CmpOp::*;
        // A DECIMAL(15,2) column x compared at scale 4: x × 100 op c.
        for (op, c, want) in [
            (Lt, 12_345, Some((MIN, 123))),
            (Le, 12_345, Some((MIN, 123))),
            (Gt, 12_345, Some((124, MAX))),
            (Ge, 12_345, Some((124, MAX))),
            (Eq, 12_345, None),
            (Lt, 12_300, Some((MIN, 122))),
            (Le, 12_300, Some((MIN, 123))),
            (Gt, 12_300, Some((124, MAX))),
            (Ge, 12_300, Some((123, MAX))),
            (Eq, 12_300, Some((123, 123))),
            (Lt, -12_345, Some((MIN, -124))),
            (Le, -12_345, Some((MIN, -124))),
            (Gt, -12_345, Some((-123, MAX))),
            (Ge, -12_345, Some((-123, MAX))),
            (Eq, -12_300, Some((-123, -123))),
        ] {
            assert_eq!(compare_range(op, c, 100), want, "x × 100 {op:?} {c}");
        }
    }

    #[test]
    fn a_range_holds_exactly_the_values_that_pass() {
        use CmpOp::*;
        for f in [1i128, 3, 10, 100] {
            for c in -60i128..=60 {
                for op in [Eq, Lt, Le, Gt, Ge, Ne] {
                    let r = compare_range(op, c, f);
                    for x in -40i64..=40 {
                        let v = x as i128 * f;
                        let passes = match op {
                            Eq => v == c,
                            Lt => v < c,
                            Le => v <= c,
                            Gt => v > c,
                            Ge => v >= c,
                            Ne => true, // the range of `<>` is every value
                        };
                        let inside = r.is_some_and(|(lo, hi)| (lo..=hi).contains(&x));
                        assert_eq!(inside, passes, "x = {x}: x × {f} {op:?} {c} -> {r:?}");
                    }
                }
            }
        }
    }
}

/// Membership in a set of stored integers (an IN list, a join's build
/// keys): a bitmap over the set's span when that is at most
/// [`IntSet::MAX_BITMAP_SPAN`] values, a binary search otherwise.
///
/// A long IN list of integers has one, built once per request's plan and
/// shared by the zone filter, the fused executor and row-at-a-time
/// evaluation (`expr::IntSet`); the members sit behind `Arc`s, so the
/// clones in each region's executors copy no key.
#[derive(Debug, Clone, PartialEq)]
pub struct IntSet {
    lo: i64,
    hi: i64,
    /// Bit `v - lo` for each member `v`; empty when the span is too wide.
    bits: Arc<Vec<u64>>,
    /// The members, sorted, when there is no bitmap.
    sorted: Arc<Vec<i64>>,
}

impl IntSet {
    /// The widest span kept as a bitmap: 4 M values, 512 KB.
    pub const MAX_BITMAP_SPAN: i128 = 1 << 22;

    /// The set of `values` (sorted or not; sorted ones, as compute sends
    /// a join's keys, cost one pass).
    pub fn new(mut values: Vec<i64>) -> Self {
        values.sort_unstable();
        values.dedup();
        let (lo, hi) = match (values.first(), values.last()) {
            (Some(lo), Some(hi)) => (*lo, *hi),
            _ => {
                return IntSet {
                    lo: 1,
                    hi: 0,
                    bits: Arc::default(),
                    sorted: Arc::new(values),
                }
            }
        };
        let span = hi as i128 - lo as i128 + 1;
        if span > Self::MAX_BITMAP_SPAN {
            return IntSet {
                lo,
                hi,
                bits: Arc::default(),
                sorted: Arc::new(values),
            };
        }
        let mut bits = vec![0u64; (span as usize).div_ceil(64)];
        for v in &values {
            let i = (*v as i128 - lo as i128) as usize;
            bits[i / 64] |= 1 << (i % 64);
        }
        IntSet {
            lo,
            hi,
            bits: Arc::new(bits),
            sorted: Arc::default(),
        }
    }

    /// The smallest and largest members; None when empty.
    pub fn bounds(&self) -> Option<(i64, i64)> {
        (self.lo <= self.hi).then_some((self.lo, self.hi))
    }

    /// How many members it has.
    pub fn len(&self) -> usize {
        match self.bits.is_empty() {
            true => self.sorted.len(),
            false => self.bits.iter().map(|w| w.count_ones() as usize).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bounds().is_none()
    }

    #[inline]
    pub fn contains(&self, v: i64) -> bool {
        if self.bits.is_empty() {
            return self.sorted.binary_search(&v).is_ok();
        }
        // Below `lo` wraps past the bitmap.
        let i = v.wrapping_sub(self.lo) as u64;
        i < self.bits.len() as u64 * 64 && (self.bits[(i / 64) as usize] >> (i % 64)) & 1 != 0
    }

    /// True if some member lies in `lo..=hi`: a block whose zone map holds
    /// none of a join's build keys is skipped whole, not probed row by row
    /// (lineitem's packs each span a few thousand order keys; Q18's 57
    /// keys touch a handful of the 195).
    pub fn any_in(&self, lo: i64, hi: i64) -> bool {
        if lo > hi {
            return false;
        }
        if self.bits.is_empty() {
            let at = self.sorted.partition_point(|v| *v < lo);
            return self.sorted.get(at).is_some_and(|v| *v <= hi);
        }
        let last = self.bits.len() as i128 * 64 - 1;
        let from = (lo as i128 - self.lo as i128).max(0);
        let to = (hi as i128 - self.lo as i128).min(last);
        if from > to {
            return false;
        }
        let (from, to) = (from as usize, to as usize);
        let (first, end) = (from / 64, to / 64);
        (first..=end).any(|w| {
            let mut word = self.bits[w];
            if w == first {
                word &= u64::MAX << (from % 64);
            }
            if w == end {
                word &= u64::MAX >> (63 - to % 64);
            }
            word != 0
        })
    }
}

#[cfg(test)]
mod int_set_tests {
    use super::IntSet;

    #[test]
    fn bitmap_and_sorted_sets_agree_on_members_and_neighbours() {
        let narrow = vec![5, -3, 64, 63, 5, 1000];
        let wide = vec![i64::MIN, -3, 5, 1 << 40, i64::MAX];
        for values in [narrow, wide, vec![], vec![i64::MAX]] {
            let set = IntSet::new(values.clone());
            for v in &values {
                for probe in [v.saturating_sub(1), *v, v.saturating_add(1)] {
                    assert_eq!(set.contains(probe), values.contains(&probe), "{probe}");
                }
            }
            assert_eq!(set.contains(i64::MIN + 1), values.contains(&(i64::MIN + 1)));
            assert_eq!(set.contains(0), values.contains(&0));
        }
    }

    #[test]
    fn any_in_is_true_exactly_when_a_member_lies_in_the_range() {
        let narrow = vec![5, -3, 64, 63, 127, 128, 1000];
        let wide = vec![i64::MIN, -3, 5, 1 << 40, i64::MAX];
        for values in [narrow, wide, vec![], vec![0]] {
            let set = IntSet::new(values.clone());
            let edges: Vec<i64> = values
                .iter()
                .flat_map(|v| [v.saturating_sub(1), *v, v.saturating_add(1)])
                .chain([i64::MIN, -70, 0, 62, 65, 129, 2000, i64::MAX])
                .collect();
            for &lo in &edges {
                for &hi in &edges {
                    let want = values.iter().any(|v| lo <= *v && *v <= hi);
                    assert_eq!(set.any_in(lo, hi), want, "{values:?} in {lo}..={hi}");
                }
            }
        }
    }
}
