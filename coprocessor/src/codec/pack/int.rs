//! Frame-of-reference integer columns ([`IntView`]), and the one place
//! that reads their stored widths.
//!
//! An INT_FOR column stores `value − min` in the fewest of 0, 1, 2, 4 or 8
//! little-endian bytes per row. Everything that reads those bytes — one
//! value, every value, the values at selected rows, and the filter kernels
//! of the executors, which test the stored bytes without widening them —
//! goes through [`IntView::visit`]: it matches on the width once and hands a
//! [`WidthVisitor`] the bytes typed as their [`Lane`] (`u8`, `u16`, `u32`
//! or `u64`). A visitor's [`WidthVisitor::lanes`] is generic over the lane
//! type, so each width is compiled into its own tight loop, which the
//! compiler vectorizes at the stored width (32 lanes per 256-bit AVX2
//! instruction for a 1-byte column, where the CPU has AVX2: see
//! [`crate::simd`]); width 0, where every value is `min`
//! and nothing is stored, is [`WidthVisitor::constant`].

use super::view::bit;
use crate::simd::{kernel, prefetch_ahead, prefetch_span};

/// A frame-of-reference integer column.
#[derive(Debug, Clone, Copy)]
pub struct IntView<'a> {
    pub min: i64,
    pub max: i64,
    width: u8,
    data: &'a [u8],
    pub(super) nulls: Option<&'a [u8]>,
    rows: usize,
}

/// The unsigned type a column's `value − min` is stored in, one per width.
pub trait Lane: Copy + Ord + Into<u64> + 'static {
    /// Bytes per value.
    const BYTES: usize;

    /// The value in the first [`Lane::BYTES`] bytes of `b` (little-endian).
    fn read(b: &[u8]) -> Self;

    /// `x` truncated to the lane's width.
    fn truncate(x: u64) -> Self;

    fn wrapping_sub(self, other: Self) -> Self;

    /// The lanes of `data`, one per [`Lane::BYTES`] bytes, in order.
    #[inline(always)]
    fn iter(data: &[u8]) -> impl Iterator<Item = Self> + '_ {
        data.chunks_exact(Self::BYTES).map(Self::read)
    }

    /// Lane `i` of `data`.
    #[inline(always)]
    fn at(data: &[u8], i: usize) -> Self {
        Self::read(&data[i * Self::BYTES..(i + 1) * Self::BYTES])
    }
}

impl Lane for u8 {
    const BYTES: usize = 1;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        b[0]
    }
    #[inline(always)]
    fn truncate(x: u64) -> Self {
        x as u8
    }
    #[inline(always)]
    fn wrapping_sub(self, other: Self) -> Self {
        u8::wrapping_sub(self, other)
    }
    #[inline(always)]
    fn iter(data: &[u8]) -> impl Iterator<Item = Self> + '_ {
        data.iter().copied()
    }
}

/// [`Lane`] for the wider types, read from the bytes listed.
macro_rules! wide_lane {
    ($t:ty, [$($i:literal),+]) => {
        impl Lane for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes([$(b[$i]),+])
            }
            #[inline(always)]
            fn truncate(x: u64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn wrapping_sub(self, other: Self) -> Self {
                <$t>::wrapping_sub(self, other)
            }
        }
    };
}

wide_lane!(u16, [0, 1]);
wide_lane!(u32, [0, 1, 2, 3]);
wide_lane!(u64, [0, 1, 2, 3, 4, 5, 6, 7]);

/// A computation over an [`IntView`]'s stored bytes, compiled once per
/// width (see the module docs); run it with [`IntView::visit`].
pub trait WidthVisitor {
    type Output;

    /// Width 0: nothing is stored, every `value − min` is 0.
    fn constant(self) -> Self::Output;

    /// `data` holds one `value − min` per row, [`Lane::BYTES`] each.
    fn lanes<L: Lane>(self, data: &[u8]) -> Self::Output;
}

impl<'a> IntView<'a> {
    pub(super) fn new(
        min: i64,
        max: i64,
        width: u8,
        data: &'a [u8],
        nulls: Option<&'a [u8]>,
        rows: usize,
    ) -> Self {
        IntView {
            min,
            max,
            width,
            data,
            nulls,
            rows,
        }
    }

    /// Bytes per value (0, 1, 2, 4 or 8).
    pub fn width(&self) -> usize {
        self.width as usize
    }

    /// The packed values: `width` little-endian bytes each, value − min.
    pub fn data(&self) -> &'a [u8] {
        &self.data[..self.rows * self.width as usize]
    }

    pub fn has_nulls(&self) -> bool {
        self.nulls.is_some()
    }

    pub fn is_valid(&self, i: usize) -> bool {
        self.nulls.is_none_or(|b| bit(b, i))
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Runs `v` over the stored bytes at their width: the one match on
    /// the width that every reader of the column goes through.
    #[inline(always)]
    pub fn visit<V: WidthVisitor>(&self, v: V) -> V::Output {
        let d = self.data();
        match self.width {
            0 => v.constant(),
            1 => v.lanes::<u8>(d),
            2 => v.lanes::<u16>(d),
            4 => v.lanes::<u32>(d),
            _ => v.lanes::<u64>(d),
        }
    }

    /// Value `i` (a NULL slot reads as `min`).
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        self.visit(At { min: self.min, i })
    }

    /// Decodes every value into `out` (cleared first), widening in one
    /// pass the compiler vectorizes (for AVX2 where the CPU has it).
    pub fn decode_into(&self, out: &mut Vec<i64>) {
        decode_all(self, self.data, out)
    }

    /// Decodes the values of rows `rows` into `out` (cleared first), as
    /// [`IntView::decode_into`] does every value.
    pub fn decode_range_into(&self, rows: std::ops::Range<usize>, out: &mut Vec<i64>) {
        let w = self.width as usize;
        let part = IntView {
            data: &self.data()[rows.start * w..rows.end * w],
            rows: rows.len(),
            nulls: None,
            ..*self
        };
        // The prefetch reads on past the range, into the rows the caller
        // decodes next.
        decode_all(&part, &self.data()[rows.start * w..], out)
    }

    /// The values at rows `sel` into `out` (cleared first).
    pub fn gather_into(&self, sel: &[u32], out: &mut Vec<i64>) {
        out.clear();
        self.visit(Gather {
            min: self.min,
            sel,
            out,
        })
    }
}

/// `min` + a stored offset, as the value.
#[inline(always)]
fn widen<L: Lane>(min: i64, x: L) -> i64 {
    min.wrapping_add(x.into() as i64)
}

/// [`IntView::get`].
struct At {
    min: i64,
    i: usize,
}

impl WidthVisitor for At {
    type Output = i64;
    #[inline(always)]
    fn constant(self) -> i64 {
        self.min
    }
    #[inline(always)]
    fn lanes<L: Lane>(self, data: &[u8]) -> i64 {
        widen(self.min, L::at(data, self.i))
    }
}

/// [`IntView::decode_into`].
struct DecodeAll<'o, 'd> {
    min: i64,
    rows: usize,
    out: &'o mut Vec<i64>,
    /// The stored bytes from the first row decoded on, to the column's
    /// end: where the loop's prefetch may reach (see
    /// [`crate::simd::prefetch_ahead`]).
    ahead: &'d [u8],
}

kernel! {
    /// [`IntView::decode_into`], for the baseline and for AVX2; `ahead`
    /// as [`DecodeAll::ahead`].
    fn decode_all(v: &IntView<'_>, ahead: &[u8], out: &mut Vec<i64>) {
        out.clear();
        out.reserve(v.rows);
        v.visit(DecodeAll {
            min: v.min,
            rows: v.rows,
            out,
            ahead,
        })
    }
}

impl WidthVisitor for DecodeAll<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn constant(self) {
        self.out.resize(self.rows, self.min)
    }
    #[inline(always)]
    fn lanes<L: Lane>(self, data: &[u8]) {
        let min = self.min;
        let ahead = prefetch_ahead();
        if ahead == 0 {
            self.out.extend(L::iter(data).map(|x| widen(min, x)));
            return;
        }
        // 64 rows at a time, each step asking for the bytes `ahead` on.
        let step = 64 * L::BYTES;
        for (k, part) in data.chunks(step).enumerate() {
            prefetch_span(self.ahead, k * step + ahead, step);
            self.out.extend(L::iter(part).map(|x| widen(min, x)));
        }
    }
}

/// [`IntView::gather_into`].
struct Gather<'s, 'o> {
    min: i64,
    sel: &'s [u32],
    out: &'o mut Vec<i64>,
}

impl WidthVisitor for Gather<'_, '_> {
    type Output = ();
    fn constant(self) {
        self.out.resize(self.sel.len(), self.min)
    }
    fn lanes<L: Lane>(self, data: &[u8]) {
        let min = self.min;
        self.out.extend(
            self.sel
                .iter()
                .map(|i| widen(min, L::at(data, *i as usize))),
        )
    }
}

/// For tests: a pack of one BIGINT column (id 1) holding `vals`.
#[cfg(test)]
pub(crate) fn int_column_pack(vals: &[i64]) -> Vec<u8> {
    use super::PackBuilder;
    use crate::codec::row::Datum;
    use arrow::datatypes::DataType;

    let mut b = PackBuilder::new(&[(1, DataType::Int64)]).expect("one BIGINT column");
    for (h, v) in vals.iter().enumerate() {
        b.push(h as i64, &[Datum::Int(*v)]).expect("a BIGINT");
    }
    b.finish().expect("rows").1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::pack::{ColumnView, PackView};

    /// Counts the rows through a visitor, to see which width it ran at.
    struct Width;
    impl WidthVisitor for Width {
        type Output = usize;
        fn constant(self) -> usize {
            0
        }
        fn lanes<L: Lane>(self, _: &[u8]) -> usize {
            L::BYTES
        }
    }

    #[test]
    fn every_width_decodes_to_the_values_written() {
        // The widths 0, 1, 2, 4 and 8, each with its extremes.
        for (spread, width) in [
            (0i64, 0),
            (255, 1),
            (256, 2),
            (65_535, 2),
            (65_536, 4),
            (u32::MAX as i64, 4),
            (u32::MAX as i64 + 1, 8),
            (i64::MAX, 8),
        ] {
            for base in [i64::MIN, -1_000, 0, i64::MAX - spread] {
                let vals: Vec<i64> = (0..300)
                    .map(|i| base + ((i as i64 * 7919) % (spread.saturating_add(1))))
                    .chain([base, base + spread])
                    .collect();
                let value = int_column_pack(&vals);
                let pack = PackView::parse(&value).unwrap();
                let ColumnView::Int(col) = pack.column(1).unwrap() else {
                    panic!("not an integer column")
                };
                let what = format!("spread {spread} base {base}");
                assert_eq!(col.width(), width, "{what}");
                assert_eq!(col.visit(Width), width, "{what}");
                assert_eq!((col.min, col.max), (base, base + spread), "{what}");

                crate::simd::for_each_level(|level| {
                    let what = format!(
                        "{what} {level:?} prefetch {}",
                        crate::simd::prefetch_ahead()
                    );
                    let mut all = vec![42];
                    col.decode_into(&mut all);
                    assert_eq!(all, vals, "{what}");
                    // Ranges that start and end inside a 64-row step, and
                    // one that ends at the column's end.
                    for rows in [0..0, 0..1, 3..70, 64..128, 100..vals.len()] {
                        let mut some = vec![42];
                        col.decode_range_into(rows.clone(), &mut some);
                        assert_eq!(some, vals[rows.clone()], "{what} rows {rows:?}");
                    }
                });

                let got: Vec<i64> = (0..vals.len()).map(|i| col.get(i)).collect();
                assert_eq!(got, vals, "{what}");

                let sel: Vec<u32> = (0..vals.len() as u32).filter(|i| i % 3 != 1).collect();
                let mut some = vec![42];
                col.gather_into(&sel, &mut some);
                let want: Vec<i64> = sel.iter().map(|i| vals[*i as usize]).collect();
                assert_eq!(some, want, "{what}");

                col.gather_into(&[], &mut some);
                assert!(some.is_empty(), "{what}");
            }
        }
    }

    #[test]
    fn lanes_read_little_endian_and_truncate() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xff];
        assert_eq!(u8::read(&b), 0x01);
        assert_eq!(u16::read(&b), 0x0201);
        assert_eq!(u32::read(&b), 0x0403_0201);
        assert_eq!(u64::read(&b), 0x0807_0605_0403_0201);
        assert_eq!(u16::at(&b, 1), 0x0403);
        assert_eq!(
            u16::iter(&b).collect::<Vec<_>>(),
            [0x0201, 0x0403, 0x0605, 0x0807]
        );
        assert_eq!(u8::truncate(0x1ff), 0xff);
        assert_eq!(u32::truncate(u64::MAX), u32::MAX);
        assert_eq!(Lane::wrapping_sub(1u16, 2), u16::MAX);
    }
}
