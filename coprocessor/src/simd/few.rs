//! The kernels for blocks with few groups, written with intrinsics for
//! AVX2 and AVX-512: [`FewSlots`] (each group's sums in vector registers,
//! the rows added under masks) and [`counts_in_slots`] (rows per group).
//! See "FEW GROUPS, WRITTEN OUT" in the parent module's docs, and
//! [`FewSlots`] for how the AVX2 kernel cuts its work.

use super::{avx2, avx512, level, Level};

/// Most slots the AVX-512 kernel of [`FewSlots`] takes: its per-slot sums
/// live in vector registers, one set per slot.
pub const MASKED_SLOTS_MAX: usize = 8;

/// Most slots the AVX2 kernel of [`FewSlots`] sums under masks, besides
/// the one it sums as the total less the others.
pub const AVX2_MASKED_MAX: usize = 4;

/// Most rare slots the AVX2 kernel of [`FewSlots`] moves row by row (each
/// below 32).
pub const AVX2_RARE_MAX: usize = 8;

/// How a block with few groups sums its rows' values per slot, written
/// with intrinsics; decided once per block from its rows per slot
/// ([`FewSlots::plan`]), then run over each chunk of its rows
/// ([`FewSlots::sums`]).
///
/// WHY. A scatter of each row's values into its slot's sums costs a load,
/// an add and a store per value, and rows of the same group wait on each
/// other's store; with TPC-H Q1's four groups that was a quarter of a
/// store's samples. With few slots the sums can stay in vector registers
/// instead, a set per slot, and each row's value be added to its slot's
/// set under a mask (the rows whose slot it is):
///
/// - AVX-512 (F and VL), up to [`MASKED_SLOTS_MAX`] slots: a compare of 8
///   rows' slots with each slot gives a mask register, and one masked add
///   per column adds the rows that are the slot's.
/// - AVX2, which has no mask registers: the compare gives a vector of
///   all-ones lanes, and an AND before the add keeps the slot's rows. That
///   costs two instructions per slot and column for 4 rows, so the kernel
///   does as little of it as it can. The slot with the most rows is not
///   masked at all: every row goes into a column's total, and that slot's
///   sum is the total less the other slots'. Slots with a sixteenth of the
///   block's rows or more (up to [`AVX2_MASKED_MAX`]) are masked. The rest
///   are rare (Q1's `N-F` group, the rows the filters dropped): their rows
///   fall into the total like the big slot's, and a second pass finds
///   them (a compare per rare slot for 8 rows, a branch when one is there)
///   and moves each from the big slot's sum to its own. Q1's blocks come
///   out as two masked slots and two or three rare ones; in the criterion
///   bench's kernel alone that is half the time of the scalar scatter.
///
/// Elsewhere (no AVX2, more slots, or rare rows past an eighth of the
/// block) there is no plan and the caller keeps its scalar loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FewSlots {
    /// Every slot with rows in the block, the one with most rows first.
    ids: Vec<u32>,
    /// The kernel that runs.
    kernel: FewKernel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FewKernel {
    /// Every slot in `ids` under a mask register.
    Avx512,
    /// `ids[1..=masked]` under masks, `ids[0]` the total less the others,
    /// the rest moved row by row.
    Avx2 { masked: usize },
}

impl FewSlots {
    /// The plan for a block whose rows per slot are `counts` (slot `s` has
    /// `counts[s]`), or `None` when neither kernel runs or takes it (see
    /// the type's docs).
    pub fn plan(counts: &[i64]) -> Option<FewSlots> {
        let mut ids: Vec<u32> = (0..counts.len() as u32)
            .filter(|s| counts[*s as usize] > 0)
            .collect();
        if ids.is_empty() || !avx2() {
            return None;
        }
        if avx512() {
            return (ids.len() <= MASKED_SLOTS_MAX).then_some(FewSlots {
                ids,
                kernel: FewKernel::Avx512,
            });
        }
        // Most rows first; ties in slot order, so a plan is the same for
        // the same counts.
        ids.sort_by_key(|s| std::cmp::Reverse(counts[*s as usize]));
        let rows: i64 = counts.iter().filter(|c| **c > 0).sum();
        let masked = ids[1..]
            .iter()
            .take(AVX2_MASKED_MAX)
            .take_while(|s| counts[**s as usize] * 16 >= rows)
            .count();
        let rare = &ids[1 + masked..];
        let rare_rows: i64 = rare.iter().map(|s| counts[*s as usize]).sum();
        if rare.len() > AVX2_RARE_MAX || rare_rows * 8 > rows || rare.iter().any(|s| *s >= 32) {
            return None;
        }
        Some(FewSlots {
            ids,
            kernel: FewKernel::Avx2 { masked },
        })
    }

    /// Per slot, per column, the wrapping sum of the column's values over
    /// the rows whose `slots` entry is that slot: `out[slot × cols.len() +
    /// k]` for column `k` (0 for a slot without rows). Every row's slot
    /// must be one with rows in the block the plan was made for (a chunk
    /// of its rows), and below `nslots`; rows past the shortest input are
    /// not read.
    pub fn sums(&self, cols: &[&[i64]], slots: &[u32], nslots: usize) -> Vec<i64> {
        let rows = cols.iter().fold(slots.len(), |n, c| n.min(c.len()));
        let slots = &slots[..rows];
        let cols: Vec<&[i64]> = cols.iter().map(|c| &c[..rows]).collect();
        assert!(self.ids.iter().all(|s| (*s as usize) < nslots));
        debug_assert!(slots.iter().all(|s| self.ids.contains(s)));
        let width = cols.len();
        let mut out = vec![0i64; nslots * width];
        #[cfg(target_arch = "x86_64")]
        match self.kernel {
            FewKernel::Avx512 => masked_sums_avx512(&self.ids, &cols, slots, &mut out),
            FewKernel::Avx2 { masked } => {
                masked_sums_avx2(&self.ids[..=masked], &cols, slots, &mut out);
                let rare = &self.ids[1 + masked..];
                if !rare.is_empty() {
                    // SAFETY: a plan with this kernel is made only where
                    // `avx2` is true, on a CPU with every feature
                    // `move_rare_rows` is compiled with.
                    #[allow(unsafe_code)]
                    unsafe {
                        masked::move_rare_rows(rare, self.ids[0], &cols, slots, &mut out)
                    };
                }
            }
        }
        out
    }
}

/// Calls `$module::$kernel::<$slots, C>` with `$args` for a pass of
/// `$chunk.len()` columns, `C` from 1 to 4: the two kernels' passes pick
/// their instantiation alike.
#[cfg(target_arch = "x86_64")]
macro_rules! with_columns {
    ($module:ident :: $kernel:ident, $slots:literal, $chunk:expr, $($arg:expr),*) => {
        match $chunk.len() {
            1 => $module::$kernel::<$slots, 1>($($arg),*),
            2 => $module::$kernel::<$slots, 2>($($arg),*),
            3 => $module::$kernel::<$slots, 3>($($arg),*),
            _ => $module::$kernel::<$slots, 4>($($arg),*),
        }
    };
}

/// The AVX-512 kernel of [`FewSlots`]: every slot of `ids` under masks.
#[cfg(target_arch = "x86_64")]
fn masked_sums_avx512(ids: &[u32], cols: &[&[i64]], slots: &[u32], out: &mut [i64]) {
    let width = cols.len();
    // Columns per pass: as many as keep a sum per slot and column, the
    // columns' 8 rows and the slots' ids in the 32 vector registers.
    let per_pass = if ids.len() <= 4 { 4 } else { 2 };
    for (pass, chunk) in cols.chunks(per_pass).enumerate() {
        let first = pass * per_pass;
        macro_rules! columns {
            ($s:literal) => {
                with_columns!(
                    masked::sums,
                    $s,
                    chunk,
                    ids,
                    chunk,
                    slots,
                    out,
                    width,
                    first
                )
            };
        }
        // SAFETY: a plan with this kernel is made only where `avx512` is
        // true, on a CPU with every feature `masked::sums` is compiled
        // with.
        #[allow(unsafe_code)]
        unsafe {
            match ids.len() {
                1 => columns!(1),
                2 => columns!(2),
                3 => columns!(3),
                4 => columns!(4),
                5 => columns!(5),
                6 => columns!(6),
                7 => columns!(7),
                _ => columns!(8),
            }
        }
    }
}

/// The AVX2 kernel of [`FewSlots`]: `ids[1..]` under masks, `ids[0]` the
/// total less theirs (with the rows of every other slot in it).
#[cfg(target_arch = "x86_64")]
fn masked_sums_avx2(ids: &[u32], cols: &[&[i64]], slots: &[u32], out: &mut [i64]) {
    let width = cols.len();
    // Columns per pass: a total and a sum per masked slot for each, the
    // masks, the rows' slots and a column's 4 rows in the 16 registers.
    let per_pass = match ids.len() - 1 {
        0 | 1 => 4,
        2 => 3,
        _ => 2,
    };
    for (pass, chunk) in cols.chunks(per_pass).enumerate() {
        let first = pass * per_pass;
        macro_rules! columns {
            ($m:literal) => {
                with_columns!(
                    masked::sums_avx2,
                    $m,
                    chunk,
                    ids,
                    chunk,
                    slots,
                    out,
                    width,
                    first
                )
            };
        }
        // SAFETY: a plan with this kernel is made only where `avx2` is
        // true, on a CPU with every feature `masked::sums_avx2` is
        // compiled with.
        #[allow(unsafe_code)]
        unsafe {
            match ids.len() - 1 {
                0 => columns!(0),
                1 => columns!(1),
                2 => columns!(2),
                3 => columns!(3),
                _ => columns!(4),
            }
        }
    }
}

/// Most slots [`counts_in_slots`] takes on AVX-512 (a pass over the rows
/// per slot).
pub const MASKED_COUNT_SLOTS_MAX: usize = 16;

/// Most slots [`counts_in_slots`] takes on AVX2 (a register of counters
/// per slot).
pub const AVX2_COUNT_SLOTS_MAX: usize = 8;

/// The rows of each slot `0..nslots` in `slots` (every entry below
/// `nslots`); `None` unless the AVX2 kernels run and `nslots` is 1 to
/// [`AVX2_COUNT_SLOTS_MAX`] or the AVX-512 ones and it is 1 to
/// [`MASKED_COUNT_SLOTS_MAX`].
///
/// On AVX-512, per slot, 16 rows' slots are compared with it at a time and
/// the mask's bits counted: in criterion's Q1 (seven slots) about 0.16 ns
/// a row, where the scatter of a count per row cost about 0.28 ns. On
/// AVX2, in one pass, 8 rows' slots are compared with every slot and each
/// compare's all-ones lanes subtracted from that slot's 8 counters, which
/// stay in registers (where the scatter stores a count that the group's
/// next row loads).
pub fn counts_in_slots(slots: &[u32], nslots: usize) -> Option<Vec<i64>> {
    #[cfg(target_arch = "x86_64")]
    {
        let most = match level() {
            Level::Avx512 => MASKED_COUNT_SLOTS_MAX,
            Level::Avx2 => AVX2_COUNT_SLOTS_MAX,
            Level::Baseline => 0,
        };
        if nslots == 0 || nslots > most {
            return None;
        }
        debug_assert!(slots.iter().all(|s| (*s as usize) < nslots));
        let mut out = vec![0i64; nslots];
        if avx512() {
            // SAFETY: `avx512` is true only on a CPU that has every
            // feature `masked::counts` is compiled with.
            #[allow(unsafe_code)]
            unsafe {
                masked::counts(slots, &mut out)
            };
            return Some(out);
        }
        // SAFETY: `avx2` is true (the level is AVX2), on a CPU that has
        // every feature `masked::counts_avx2` is compiled with.
        #[allow(unsafe_code)]
        unsafe {
            match nslots {
                1 => masked::counts_avx2::<1>(slots, &mut out),
                2 => masked::counts_avx2::<2>(slots, &mut out),
                3 => masked::counts_avx2::<3>(slots, &mut out),
                4 => masked::counts_avx2::<4>(slots, &mut out),
                5 => masked::counts_avx2::<5>(slots, &mut out),
                6 => masked::counts_avx2::<6>(slots, &mut out),
                7 => masked::counts_avx2::<7>(slots, &mut out),
                _ => masked::counts_avx2::<8>(slots, &mut out),
            }
        };
        Some(out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (slots, nslots);
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod masked {
    use std::arch::x86_64::{
        __m128i, __m256i, __m512i, _mm256_add_epi64, _mm256_and_si256, _mm256_castsi256_ps,
        _mm256_cmpeq_epi32, _mm256_cmpeq_epi64, _mm256_cmpeq_epu32_mask, _mm256_cvtepu32_epi64,
        _mm256_loadu_si256, _mm256_movemask_ps, _mm256_set1_epi32, _mm256_set1_epi64x,
        _mm256_setzero_si256, _mm256_sllv_epi32, _mm256_storeu_si256, _mm256_sub_epi32,
        _mm512_cmpeq_epu32_mask, _mm512_loadu_si512, _mm512_mask_add_epi64,
        _mm512_reduce_add_epi64, _mm512_set1_epi32, _mm512_setzero_si512, _mm_loadu_si128,
    };

    /// The wrapping sum of a vector's four lanes.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    fn lanes_sum(v: __m256i) -> i64 {
        let mut lanes = [0i64; 4];
        // SAFETY: `lanes` is 32 bytes; an unaligned store.
        #[allow(unsafe_code)]
        unsafe {
            _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), v)
        };
        lanes.iter().fold(0, |a, x| a.wrapping_add(*x))
    }

    /// [`super::masked_sums_avx2`] for `M` masked slots (`ids[1..=M]`;
    /// `ids[0]` gets the total less theirs) and `C` columns (`cols`, whose
    /// sums go to `out[slot × width + first + k]`, added); every column at
    /// least as long as `slots`.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    pub(super) fn sums_avx2<const M: usize, const C: usize>(
        ids: &[u32],
        cols: &[&[i64]],
        slots: &[u32],
        out: &mut [i64],
        width: usize,
        first: usize,
    ) {
        assert!(ids.len() == M + 1 && cols.len() == C);
        assert!(cols.iter().all(|c| c.len() >= slots.len()));
        let n = slots.len();
        let id: [__m256i; M] = std::array::from_fn(|s| _mm256_set1_epi64x(ids[s + 1] as i64));
        let mut total = [_mm256_setzero_si256(); C];
        let mut acc = [[_mm256_setzero_si256(); C]; M];
        let mut i = 0;
        while i + 4 <= n {
            // SAFETY: rows i..i + 4 are inside `slots` (16 bytes) and,
            // asserted above, inside every column (32 bytes); unaligned
            // loads.
            #[allow(unsafe_code)]
            let row_slots = _mm256_cvtepu32_epi64(unsafe {
                _mm_loadu_si128(slots.as_ptr().add(i).cast::<__m128i>())
            });
            let mine: [__m256i; M] = std::array::from_fn(|s| _mm256_cmpeq_epi64(row_slots, id[s]));
            for c in 0..C {
                // SAFETY: as above.
                #[allow(unsafe_code)]
                let v = unsafe { _mm256_loadu_si256(cols[c].as_ptr().add(i).cast::<__m256i>()) };
                total[c] = _mm256_add_epi64(total[c], v);
                for s in 0..M {
                    acc[s][c] = _mm256_add_epi64(acc[s][c], _mm256_and_si256(v, mine[s]));
                }
            }
            i += 4;
        }
        for c in 0..C {
            let mut rest = lanes_sum(total[c]);
            for s in 0..M {
                let mut sum = lanes_sum(acc[s][c]);
                for j in i..n {
                    if slots[j] == ids[s + 1] {
                        sum = sum.wrapping_add(cols[c][j]);
                    }
                }
                let at = ids[s + 1] as usize * width + first + c;
                out[at] = out[at].wrapping_add(sum);
                rest = rest.wrapping_sub(sum);
            }
            rest = cols[c][i..n].iter().fold(rest, |a, x| a.wrapping_add(*x));
            let at = ids[0] as usize * width + first + c;
            out[at] = out[at].wrapping_add(rest);
        }
    }

    /// [`super::counts_in_slots`] on AVX2 for `N` slots: `out[s]` is the
    /// rows of slot `s` (every entry of `slots` below `N`).
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    pub(super) fn counts_avx2<const N: usize>(slots: &[u32], out: &mut [i64]) {
        assert!(out.len() == N);
        let id: [__m256i; N] = std::array::from_fn(|s| _mm256_set1_epi32(s as i32));
        // A lane counts at most one row in 8: a u32 holds any section's.
        for section in slots.chunks(u32::MAX as usize) {
            let mut lanes = [_mm256_setzero_si256(); N];
            let n = section.len();
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: rows i..i + 8 are inside `section`; an
                // unaligned load.
                #[allow(unsafe_code)]
                let row_slots =
                    unsafe { _mm256_loadu_si256(section.as_ptr().add(i).cast::<__m256i>()) };
                for s in 0..N {
                    lanes[s] = _mm256_sub_epi32(lanes[s], _mm256_cmpeq_epi32(row_slots, id[s]));
                }
                i += 8;
            }
            for s in 0..N {
                let mut l = [0u32; 8];
                // SAFETY: `l` is 32 bytes; an unaligned store.
                #[allow(unsafe_code)]
                unsafe {
                    _mm256_storeu_si256(l.as_mut_ptr().cast::<__m256i>(), lanes[s])
                };
                out[s] += l.iter().map(|x| i64::from(*x)).sum::<i64>();
            }
            for s in &section[i..] {
                out[*s as usize] += 1;
            }
        }
    }

    /// Moves each row whose slot is in `rare` from slot `from`'s sums (in
    /// `out`, `slot × cols.len() + k`) to its own: its values subtracted
    /// from one, added to the other.
    ///
    /// First the rare rows are listed, 64 rows at a time: for 8 rows at a
    /// time, a variable shift of a word with a bit set per rare slot (they
    /// are below 32) by each row's slot brings the row's bit to its lane's
    /// top, a movemask gathers the 8 top bits, and the 64 rows' bits,
    /// gathered in a word, are the rows to list. (A branch on "any rare row
    /// in these 8" mispredicted on Q1's one row in 50; a list stored at an
    /// offset that each 8 rows' count moved on made every load wait for
    /// that store; a compare per rare slot cost more than the shift.) Then
    /// [`move_listed`] moves them, a few columns at a time.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    pub(super) fn move_rare_rows(
        rare: &[u32],
        from: u32,
        cols: &[&[i64]],
        slots: &[u32],
        out: &mut [i64],
    ) {
        assert!(rare.iter().all(|s| *s < 32));
        let is_rare = rare.iter().fold(0u32, |m, s| m | (1 << s));
        let (bits, top) = (_mm256_set1_epi32(is_rare as i32), _mm256_set1_epi32(31));
        let n = slots.len();
        // Room for a rare row in 16 without growing (Q1's are one in 50).
        let mut listed: Vec<u32> = Vec::with_capacity(n / 16 + 64);
        let mut i = 0;
        while i + 64 <= n {
            let mut word = 0u64;
            for eighth in 0..8 {
                // SAFETY: rows i..i + 64 are inside `slots`; an unaligned
                // load.
                #[allow(unsafe_code)]
                let row_slots = unsafe {
                    _mm256_loadu_si256(slots.as_ptr().add(i + 8 * eighth).cast::<__m256i>())
                };
                // Slot s's bit shifted left by 31 − s: to the top. A slot
                // past 31 shifts by a "negative" count, a huge one: 0.
                let row_bits = _mm256_sllv_epi32(bits, _mm256_sub_epi32(top, row_slots));
                let eight = _mm256_movemask_ps(_mm256_castsi256_ps(row_bits)) as u8;
                word |= u64::from(eight) << (8 * eighth);
            }
            while word != 0 {
                listed.push((i + word.trailing_zeros() as usize) as u32);
                word &= word - 1;
            }
            i += 64;
        }
        listed.extend(
            (i..n)
                .filter(|r| rare.contains(&slots[*r]))
                .map(|r| r as u32),
        );
        let width = cols.len();
        for (pass, chunk) in cols.chunks(4).enumerate() {
            let at = Columns {
                width,
                first: 4 * pass,
            };
            match chunk.len() {
                1 => move_listed::<1>(rare, from, chunk, &listed, slots, out, at),
                2 => move_listed::<2>(rare, from, chunk, &listed, slots, out, at),
                3 => move_listed::<3>(rare, from, chunk, &listed, slots, out, at),
                _ => move_listed::<4>(rare, from, chunk, &listed, slots, out, at),
            }
        }
    }

    /// Where a pass's columns' sums go in `out`: `slot × width + first + k`
    /// for its column `k`.
    #[derive(Clone, Copy)]
    pub(super) struct Columns {
        width: usize,
        first: usize,
    }

    /// [`move_rare_rows`] of the `listed` rows for `C` columns: the sums
    /// stay in registers, not in `out`, where every rare row would add to
    /// the slot sums the row before it had just stored (Q1's rare rows all
    /// leave the same slot, and most go to one other). The listed rows'
    /// total leaves `from`; each rare slot but the last takes its own rows
    /// (a compare turned into a mask, an AND before each add) and the last
    /// takes the total less theirs.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    fn move_listed<const C: usize>(
        rare: &[u32],
        from: u32,
        cols: &[&[i64]],
        listed: &[u32],
        slots: &[u32],
        out: &mut [i64],
        at: Columns,
    ) {
        let Some((last, others)) = rare.split_last() else {
            return;
        };
        let cols: [&[i64]; C] = std::array::from_fn(|k| cols[k]);
        let mut total = [0i64; C];
        for r in listed {
            for k in 0..C {
                total[k] = total[k].wrapping_add(cols[k][*r as usize]);
            }
        }
        let mut rest = total;
        for slot in others {
            let mut sum = [0i64; C];
            for r in listed {
                let mine = -i64::from(slots[*r as usize] == *slot);
                for k in 0..C {
                    sum[k] = sum[k].wrapping_add(cols[k][*r as usize] & mine);
                }
            }
            let to = *slot as usize * at.width + at.first;
            for k in 0..C {
                out[to + k] = out[to + k].wrapping_add(sum[k]);
                rest[k] = rest[k].wrapping_sub(sum[k]);
            }
        }
        let (to, from) = (
            *last as usize * at.width + at.first,
            from as usize * at.width + at.first,
        );
        for k in 0..C {
            out[to + k] = out[to + k].wrapping_add(rest[k]);
            out[from + k] = out[from + k].wrapping_sub(total[k]);
        }
    }

    /// [`super::counts_in_slots`]: `out[s]` is the rows of slot `s`.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,avx512f,avx512vl")]
    pub(super) fn counts(slots: &[u32], out: &mut [i64]) {
        let n = slots.len();
        for (s, count) in out.iter_mut().enumerate() {
            let id = _mm512_set1_epi32(s as i32);
            let mut c = 0u64;
            let mut i = 0;
            while i + 16 <= n {
                // SAFETY: rows i..i + 16 are inside `slots`; an unaligned
                // load.
                #[allow(unsafe_code)]
                let row_slots =
                    unsafe { _mm512_loadu_si512(slots.as_ptr().add(i).cast::<__m512i>()) };
                c += u64::from(_mm512_cmpeq_epu32_mask(row_slots, id).count_ones());
                i += 16;
            }
            c += slots[i..].iter().filter(|x| **x == s as u32).count() as u64;
            *count = c as i64;
        }
    }

    /// [`super::masked_sums_avx512`] for `S` slots (`ids`) and `C` columns
    /// (`cols`, whose sums go to `out[slot × width + first + k]`); every
    /// column at least as long as `slots`.
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,avx512f,avx512vl")]
    pub(super) fn sums<const S: usize, const C: usize>(
        ids: &[u32],
        cols: &[&[i64]],
        slots: &[u32],
        out: &mut [i64],
        width: usize,
        first: usize,
    ) {
        assert!(ids.len() == S && cols.len() == C);
        assert!(cols.iter().all(|c| c.len() >= slots.len()));
        let n = slots.len();
        let mut id = [_mm256_set1_epi32(0); S];
        for s in 0..S {
            id[s] = _mm256_set1_epi32(ids[s] as i32);
        }
        let mut acc: [[__m512i; C]; S] = [[_mm512_setzero_si512(); C]; S];
        let mut x: [__m512i; C] = [_mm512_setzero_si512(); C];
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: rows i..i + 8 are inside `slots` and, asserted
            // above, inside every column; the loads are unaligned ones.
            #[allow(unsafe_code)]
            let row_slots = unsafe { _mm256_loadu_si256(slots.as_ptr().add(i).cast::<__m256i>()) };
            for c in 0..C {
                // SAFETY: as above.
                #[allow(unsafe_code)]
                let v = unsafe { _mm512_loadu_si512(cols[c].as_ptr().add(i).cast::<__m512i>()) };
                x[c] = v;
            }
            for s in 0..S {
                let mine = _mm256_cmpeq_epu32_mask(row_slots, id[s]);
                for c in 0..C {
                    acc[s][c] = _mm512_mask_add_epi64(acc[s][c], mine, acc[s][c], x[c]);
                }
            }
            i += 8;
        }
        for s in 0..S {
            let at = ids[s] as usize * width + first;
            for c in 0..C {
                let mut sum = _mm512_reduce_add_epi64(acc[s][c]);
                for j in i..n {
                    if slots[j] == ids[s] {
                        sum = sum.wrapping_add(cols[c][j]);
                    }
                }
                out[at + c] = sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::for_each_level;
    use super::*;

    #[test]
    fn few_slot_sums_match_each_slot_and_plans_refuse_what_they_cannot_take() {
        // Ten slots, Q1's shape: slot 2 with half the rows, 5 a quarter, 0
        // most of an eighth, 7 and 1 rare, the rest none. 223 rows, so the
        // last rows (a rare one among them) are in both loops' tails.
        let rows = 223;
        let slots: Vec<u32> = (0..rows)
            .map(|i| match (i + 1) % 32 {
                0..=15 => 2,
                16..=23 => 5,
                24..=29 => 0,
                30 => 7,
                _ => 1,
            })
            .collect();
        assert_eq!((slots[rows - 2], slots[rows - 1]), (7, 1));
        let mut counts = vec![0i64; 10];
        slots.iter().for_each(|s| counts[*s as usize] += 1);
        let cols: Vec<Vec<i64>> = (0..5)
            .map(|k| {
                (0..rows)
                    .map(|i| (i as i64 + 1) * (k + 1) * 1000 - 77_000)
                    .collect()
            })
            .collect();
        let refs: Vec<&[i64]> = cols.iter().map(|c| c.as_slice()).collect();
        let want = |slot: u32, k: usize| -> i64 {
            (0..rows)
                .filter(|i| slots[*i] == slot)
                .map(|i| cols[k][i])
                .sum()
        };
        for_each_level(|l| {
            let Some(plan) = FewSlots::plan(&counts) else {
                assert_eq!(l, Level::Baseline);
                return;
            };
            let kernel = match l {
                Level::Avx2 => FewKernel::Avx2 { masked: 2 },
                _ => FewKernel::Avx512,
            };
            assert_eq!(plan.kernel, kernel);
            // Every slot's sums; a slot without rows, 0. Run over the
            // rows whole and in two chunks (as the executor's chunks).
            for cut in [rows, 101] {
                let mut got = plan.sums(&refs, &slots[..cut], 10);
                if cut < rows {
                    let tail: Vec<&[i64]> = refs.iter().map(|c| &c[cut..]).collect();
                    let more = plan.sums(&tail, &slots[cut..], 10);
                    got.iter_mut().zip(more).for_each(|(a, b)| *a += b);
                }
                for slot in 0..10u32 {
                    for k in 0..5 {
                        assert_eq!(
                            got[slot as usize * 5 + k],
                            want(slot, k),
                            "{l:?} slot {slot} column {k}"
                        );
                    }
                }
            }
            // No rows: no plan at any level.
            assert_eq!(FewSlots::plan(&[0, 0]), None);
            match l {
                Level::Avx2 => {
                    // Rare rows past an eighth of the block, or more rare
                    // slots than it moves: the scalar loop's.
                    assert_eq!(FewSlots::plan(&[100, 5, 5, 5, 5, 5, 5]), None);
                    let mut many = vec![1000];
                    many.extend([1; AVX2_RARE_MAX + 1]);
                    assert_eq!(FewSlots::plan(&many), None);
                    many.pop();
                    assert!(FewSlots::plan(&many).is_some());
                    // A rare slot past 31 (the shift's bit word): neither.
                    let mut far = vec![0; 41];
                    (far[0], far[40]) = (1000, 1);
                    assert_eq!(FewSlots::plan(&far), None);
                    far[31] = 1;
                    far[40] = 0;
                    assert!(FewSlots::plan(&far).is_some());
                }
                _ => assert_eq!(FewSlots::plan(&[1; MASKED_SLOTS_MAX + 1]), None),
            }
            // Counts: every slot below `nslots`, up to the most each
            // kernel takes (eight on AVX2: the rows' ten slots folded into
            // eight).
            let eight: Vec<u32> = slots.iter().map(|s| s % 8).collect();
            let mut want8 = vec![0i64; 8];
            eight.iter().for_each(|s| want8[*s as usize] += 1);
            let (most, got) = match l {
                Level::Avx512 => (MASKED_COUNT_SLOTS_MAX, counts_in_slots(&slots, 10)),
                _ => (AVX2_COUNT_SLOTS_MAX, counts_in_slots(&eight, 8)),
            };
            let want = if l == Level::Avx512 { &counts } else { &want8 };
            assert_eq!(got.as_ref(), Some(want), "{l:?}");
            assert_eq!(counts_in_slots(&slots, most + 1), None);
            assert_eq!(counts_in_slots(&slots, 0), None);
        });
    }
}
