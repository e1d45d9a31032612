//! A block's columns as the fused kernels read them ([`Source`]): a pack's
//! stored integers and dictionary codes, read in place, or a delta block's
//! decoded values; and the filter kernels over them, which test a pack's
//! integers at their stored width (`kernels.rs`).

use arrow::array::StringArray;

use crate::codec::pack::{DictView, IntView};
use crate::executor::kernels::{and_masks, and_packed, and_probed, and_range_packed, probe_word};

thread_local! {
    /// [`Source::gather`]'s buffer for a whole widened column.
    static WIDE: std::cell::RefCell<Vec<i64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One column of a block, as the fused kernels read it.
pub(super) enum Source<'a> {
    /// A pack's frame-of-reference integers.
    Packed(IntView<'a>),
    /// Decoded values with their min and max.
    Values(&'a [i64], i64, i64),
    /// A pack's dictionary-coded strings.
    Dict(DictView<'a>),
    /// Decoded strings.
    Strings(&'a StringArray),
    /// Not read by the plan.
    Unused,
}

impl Source<'_> {
    /// The integer column's min and max.
    pub(super) fn range(&self) -> Option<(i64, i64)> {
        match self {
            Source::Packed(v) => Some((v.min, v.max)),
            Source::Values(_, lo, hi) => Some((*lo, *hi)),
            _ => None,
        }
    }

    /// The values at `sel` (ascending) into `buf`.
    pub(super) fn gather(&self, sel: &[u32], buf: &mut Vec<i64>) {
        buf.clear();
        let (Some(first), Some(last)) = (sel.first(), sel.last()) else {
            return;
        };
        let span = *first as usize..*last as usize + 1;
        match self {
            Source::Values(v, ..) => buf.extend(sel.iter().map(|i| v[*i as usize])),
            // Past about one selected row per cache line of what a pass
            // over the rows `sel` spans reads and writes (the stored bytes
            // and 8 a row into the buffer), one sequential pass (which the
            // prefetcher streams) beats a miss per row.
            Source::Packed(v)
                if sel.len() * 64 >= span.len() * (v.width() + 8) && v.width() > 0 =>
            {
                // The span in a buffer kept per thread: a fresh one (8
                // bytes a row) per pack and column cost malloc's
                // consolidation of freed chunks, 2–3% of a store's Q6
                // samples.
                WIDE.with_borrow_mut(|all| {
                    v.decode_range_into(span.clone(), all);
                    buf.extend(sel.iter().map(|i| all[*i as usize - span.start]));
                })
            }
            Source::Packed(v) => v.gather_into(sel, buf),
            _ => {}
        }
    }

    /// Every value into `buf` (an integer column).
    pub(super) fn decode_into(&self, buf: &mut Vec<i64>) {
        match self {
            Source::Values(v, ..) => self.decode_range_into(0..v.len(), buf),
            Source::Packed(v) => v.decode_into(buf),
            _ => buf.clear(),
        }
    }

    /// The values of rows `rows` into `buf` (an integer column).
    pub(super) fn decode_range_into(&self, rows: std::ops::Range<usize>, buf: &mut Vec<i64>) {
        match self {
            Source::Values(v, ..) => {
                buf.clear();
                buf.extend_from_slice(&v[rows])
            }
            Source::Packed(v) => v.decode_range_into(rows, buf),
            _ => buf.clear(),
        }
    }
}

/// [`and_masks`] for `lo <= value <= hi` (on a pack, in the stored frame:
/// see [`and_range_packed`]).
#[inline(always)]
pub(super) fn and_range(src: &Source<'_>, n: usize, bits: &mut [u64], lo: i64, hi: i64) {
    match src {
        Source::Packed(v) => and_range_packed(v, n, bits, lo, hi),
        _ => {
            let span = hi.wrapping_sub(lo) as u64;
            and_int(src, n, bits, move |x| (x.wrapping_sub(lo) as u64) <= span)
        }
    }
}

/// [`and_int`] for a test that costs more than a compare (a set or Bloom
/// probe): only the rows still selected are tested where few are left
/// ([`and_probed`]).
#[inline(always)]
pub(super) fn and_int_probed(
    src: &Source<'_>,
    n: usize,
    bits: &mut [u64],
    keep: impl Fn(i64) -> bool,
) {
    match src {
        Source::Packed(v) => and_probed(v, n, bits, keep),
        Source::Values(v, ..) => {
            for (w, word) in bits.iter_mut().enumerate() {
                let base = w * 64;
                let vals = &v[base..(base + 64).min(n)];
                probe_word(word, vals.len(), |i| vals[i], &keep);
            }
        }
        _ => bits.fill(0),
    }
}

/// [`and_masks`] over an integer column, `keep` deciding on the value (on
/// a pack, one loop per stored width: see [`and_packed`]).
#[inline(always)]
pub(super) fn and_int(src: &Source<'_>, n: usize, bits: &mut [u64], keep: impl Fn(i64) -> bool) {
    match src {
        Source::Packed(v) => and_packed(v, n, bits, keep),
        Source::Values(v, ..) => and_masks(n, bits, |base, bytes| {
            for (b, x) in bytes.iter_mut().zip(&v[base..]) {
                *b = keep(*x) as u8;
            }
        }),
        _ => bits.fill(0),
    }
}
