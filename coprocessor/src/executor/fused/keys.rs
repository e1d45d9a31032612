//! A block's group keys as one small array index, and the rows' group
//! slots through it — no hashing per row.
//!
//! Each key gets a code per row: a dictionary code, the index of a decoded
//! string among the block's distinct ones, or value − min for an integer
//! key of a narrow range. The codes combine, key by key times a stride,
//! into one index into a lookup table of the block's combinations ([`KeyLayout`]);
//! Q1's two flags make at most 3 × 2 slots. For a table of up to
//! `DIRECT_SLOTS` (256) combinations, that index *is* the row's local slot
//! (no per-row lookup: the index loops and the mask of dropped rows
//! vectorize); a larger table hands out local slots in order of first
//! appearance ([`Slots::assign`]), so the accumulation's arrays stay as
//! small as the block's distinct combinations. Either way the rows per
//! slot are counted once, slots without rows are no group, and the
//! accumulation sums per local slot and folds each into its group once per
//! block.
//!
//! An integer key whose values spread wider than [`MAX_INT_KEY_SPAN`] in a
//! block (a part or supplier key: TPC-H Q15, Q17, Q20) is coded like a
//! decoded string: each row read gets the index of its value among the
//! block's distinct ones, through a hash table over the rows the filters
//! left. Only when the keys' combinations exceed the lookup table does the
//! block go the generic way.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::core::{Early, Selected};
use super::groups::KeyValue;
use super::plan::KeyCol;
use super::source::Source;
use crate::simd::kernel;
use crate::{internal, invalid_input, Result};

/// Most slots a block's group lookup table may have.
const MAX_LUT: usize = 1 << 16;
/// Most values an integer group key may span in one block.
const MAX_INT_KEY_SPAN: i64 = 1 << 12;

/// A decoded string key's per-row codes and the strings they stand for.
type StrCodes<'a> = (Vec<u32>, Vec<&'a [u8]>);

/// A wide integer key's code for each row read, and the values they
/// stand for.
type IntCodes = (Vec<u32>, Vec<i64>);

/// Hashes group keys: a 64-bit finalizer per eight bytes, no per-map
/// seed (the keys come from the table, not from a client that could pick
/// colliding ones to order).
#[derive(Default)]
pub(super) struct KeyHasher(u64);

/// A hash map keyed by group keys.
pub(super) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = crate::expr::mix64(self.0.rotate_left(23) ^ v);
    }
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }
}

/// One key's part of the lookup-table index: `code × stride`.
struct KeyCodes<'a> {
    stride: usize,
    /// Codes the key can have in this block.
    card: usize,
    /// An integer key's block minimum (its code is value − min).
    min: i64,
    /// A decoded string key's codes (a dictionary's are stored).
    strings: Option<StrCodes<'a>>,
    /// A wide integer key's codes, per row read (not per block row).
    ints: Option<IntCodes>,
}

/// How a block's keys combine into one lookup-table index.
pub(super) struct KeyLayout<'a> {
    keys: Vec<KeyCodes<'a>>,
    /// Slots of the lookup table.
    total: usize,
}

impl<'a> KeyLayout<'a> {
    /// The layout of `keys` over a block of `n` rows of which `rows` are
    /// read (`sel` when not dense); the block goes the generic way when the
    /// keys have too many combinations or a key's column cannot be read
    /// here.
    pub(super) fn new(
        keys: &[KeyCol],
        src: &[Source<'a>],
        rows: Selected,
        sel: &[u32],
    ) -> Result<Self, Early> {
        let n = rows.n;
        let mut layout = KeyLayout {
            keys: Vec::with_capacity(keys.len()),
            total: 1,
        };
        for k in keys {
            let mut ints = None;
            let (card, min, strings) = match k {
                KeyCol::Int { col, .. } => {
                    let (lo, hi) = src[*col].range().ok_or(Early::Fallback)?;
                    let span = hi as i128 - lo as i128;
                    if span < 0 {
                        return Err(Early::Fallback);
                    }
                    if span < MAX_INT_KEY_SPAN as i128 {
                        ((span + 1) as usize, lo, None)
                    } else {
                        let codes = int_codes(&src[*col], rows, sel);
                        let card = codes.1.len();
                        ints = Some(codes);
                        (card, 0, None)
                    }
                }
                KeyCol::Str { col } => match &src[*col] {
                    Source::Dict(d) => (d.entries(), 0, None),
                    Source::Strings(a) => {
                        let mut index: HashMap<&[u8], u32> = HashMap::new();
                        let mut names: Vec<&[u8]> = Vec::new();
                        let codes: Vec<u32> = (0..n)
                            .map(|i| {
                                let s = a.value(i).as_bytes();
                                *index.entry(s).or_insert_with(|| {
                                    names.push(s);
                                    names.len() as u32 - 1
                                })
                            })
                            .collect();
                        (names.len(), 0, Some((codes, names)))
                    }
                    _ => return Err(Early::Fallback),
                },
            };
            layout.keys.push(KeyCodes {
                stride: layout.total,
                card,
                min,
                strings,
                ints,
            });
            layout.total = layout.total.saturating_mul(card.max(1));
        }
        if layout.total > MAX_LUT {
            return Err(Early::Fallback);
        }
        Ok(layout)
    }

    /// Adds each read row's `code × stride` of every key into `idx`.
    fn index_rows(
        &self,
        keys: &[KeyCol],
        src: &[Source<'_>],
        rows: Selected,
        sel: &[u32],
        idx: &mut Vec<u32>,
        tmp: &mut Vec<i64>,
    ) -> Result<(), Early> {
        idx.clear();
        idx.resize(rows.m, 0);
        for (k, codes) in keys.iter().zip(&self.keys) {
            let stride = codes.stride as u32;
            match k {
                KeyCol::Int { .. } if codes.ints.is_some() => {
                    let (row_codes, _) = codes.ints.as_ref().ok_or(Early::Fallback)?;
                    for (x, c) in idx.iter_mut().zip(row_codes) {
                        *x += *c * stride;
                    }
                }
                KeyCol::Int { col, .. } => {
                    let (lo, hi) = src[*col].range().ok_or(Early::Fallback)?;
                    if rows.dense {
                        let all_rows: Vec<u32> = (0..rows.n as u32).collect();
                        src[*col].gather(&all_rows, tmp);
                    } else {
                        src[*col].gather(sel, tmp);
                    }
                    if tmp.iter().any(|v| *v < lo || *v > hi) {
                        return Err(
                            invalid_input!("corrupt pack (a value outside its min/max)").into()
                        );
                    }
                    for (x, v) in idx.iter_mut().zip(tmp.iter()) {
                        *x += (v - lo) as u32 * stride;
                    }
                }
                KeyCol::Str { col } => match (&src[*col], &codes.strings) {
                    (Source::Dict(d), _) => {
                        let codes = d.codes;
                        if rows.dense {
                            add_codes(idx, codes, stride);
                        } else {
                            for (x, i) in idx.iter_mut().zip(sel) {
                                *x += codes[*i as usize] as u32 * stride;
                            }
                        }
                    }
                    (_, Some((codes, _))) => {
                        if rows.dense {
                            for (x, c) in idx.iter_mut().zip(codes) {
                                *x += *c * stride;
                            }
                        } else {
                            for (x, i) in idx.iter_mut().zip(sel) {
                                *x += codes[*i as usize] * stride;
                            }
                        }
                    }
                    _ => return Err(Early::Fallback),
                },
            }
        }
        Ok(())
    }

    /// The value of the one key, an integer, behind lookup-table index
    /// `idx` (see [`KeyLayout::key_of`]).
    pub(super) fn int_key_of(&self, idx: u32) -> Option<i64> {
        let [codes] = &self.keys[..] else {
            return None;
        };
        let code = (idx as usize / codes.stride) % codes.card.max(1);
        Some(match &codes.ints {
            Some((_, values)) => values[code],
            None => codes.min + code as i64,
        })
    }

    /// The key values behind lookup-table index `idx`.
    pub(super) fn key_of(
        &self,
        keys: &[KeyCol],
        src: &[Source<'_>],
        idx: u32,
    ) -> Result<Vec<KeyValue>> {
        keys.iter()
            .zip(&self.keys)
            .map(|(k, codes)| {
                let code = (idx as usize / codes.stride) % codes.card.max(1);
                Ok(match k {
                    KeyCol::Int { .. } => match &codes.ints {
                        Some((_, values)) => KeyValue::Int(values[code]),
                        None => KeyValue::Int(codes.min + code as i64),
                    },
                    KeyCol::Str { col } => match (&src[*col], &codes.strings) {
                        (Source::Dict(d), _) => KeyValue::Bytes(d.entry(code).to_vec()),
                        (_, Some((_, names))) => KeyValue::Bytes(names[code].to_vec()),
                        _ => return Err(internal!("string key without codes")),
                    },
                })
            })
            .collect()
    }
}

/// Codes for a wide integer key over the rows read: each value's index
/// among the distinct values, in order of first appearance.
fn int_codes(src: &Source<'_>, rows: Selected, sel: &[u32]) -> IntCodes {
    let mut values = Vec::new();
    if rows.dense {
        src.decode_into(&mut values);
    } else {
        src.gather(sel, &mut values);
    }
    // Rows stored in key order (lineitem by order key, partsupp by part
    // key) hold each value in one run: its code is the run's number, no
    // hashing (TPC-H Q18 groups 6 M lineitem rows by order this way).
    if values.windows(2).all(|w| w[0] <= w[1]) {
        let mut distinct: Vec<i64> = Vec::new();
        let codes = values
            .iter()
            .map(|v| {
                if distinct.last() != Some(v) {
                    distinct.push(*v);
                }
                distinct.len() as u32 - 1
            })
            .collect();
        return (codes, distinct);
    }
    // Sized as if every row held a distinct key: grown from empty, the
    // map was rehashed several times per block (TPC-H Q15's supplier keys: 8% of
    // the stores' time in `reserve_rehash`).
    let mut index: KeyMap<i64, u32> =
        KeyMap::with_capacity_and_hasher(values.len(), Default::default());
    let mut distinct = Vec::with_capacity(values.len());
    let codes = values
        .iter()
        .map(|v| {
            *index.entry(*v).or_insert_with(|| {
                distinct.push(*v);
                distinct.len() as u32 - 1
            })
        })
        .collect();
    (codes, distinct)
}

/// A block's rows by group: what the accumulation reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Locals {
    /// Local slots that may be groups: 0..real (a slot with no rows in
    /// [`Slots::counts`] is none).
    pub(super) real: usize,
    /// Slots the accumulation loops index: the groups and, with a mask,
    /// one more for the rows it dropped.
    pub(super) total: usize,
    /// One group and no mask: plain reductions, no slots.
    pub(super) single: bool,
    /// Rows read.
    pub(super) rows: usize,
}

/// Lookup tables up to this many slots number a block's local slots by
/// the lookup-table index itself: no table, no per-row lookup, and a
/// slot-per-combination count array that stays in L1. Larger tables hand
/// out slots in order of first appearance, so the accumulation's arrays
/// are as small as the block's distinct combinations.
const DIRECT_SLOTS: usize = 256;

/// Scratch buffers for the rows' slots, reused across blocks.
#[derive(Default)]
pub(super) struct Slots {
    /// Each read row's lookup-table index.
    idx: Vec<u32>,
    /// Lookup table: index → local slot (`u32::MAX`: not seen yet).
    lut: Vec<u32>,
    /// Each read row's local slot.
    pub(super) local: Vec<u32>,
    /// The lookup-table index of each local slot with rows, in order of
    /// slot.
    pub(super) local_keys: Vec<u32>,
    /// Rows per local slot (the discard slot included).
    pub(super) counts: Vec<i64>,
    /// Local slots are lookup-table indexes ([`DIRECT_SLOTS`]): slots
    /// without rows are not in `local_keys`.
    direct: bool,
    /// An integer key's values.
    tmp: Vec<i64>,
}

impl Slots {
    /// Gives each row read (`rows`; `bits` and `sel` from the filters) a
    /// local slot in `local`, with its rows counted in `counts`, and lists
    /// the slots that have rows in `local_keys`.
    pub(super) fn assign(
        &mut self,
        layout: &KeyLayout<'_>,
        keys: &[KeyCol],
        src: &[Source<'_>],
        rows: Selected,
        bits: &[u64],
        sel: &[u32],
    ) -> Result<Locals, Early> {
        self.local.clear();
        self.local_keys.clear();
        self.direct = false;
        let masked = rows.masked as usize;
        if keys.is_empty() {
            // One group; with a mask, slot 1 discards.
            if rows.masked {
                self.local.resize(rows.n, 0);
                discard_dropped(&mut self.local, bits, 1);
            }
            self.counts = if rows.masked {
                count_by_slot(&self.local, 2)
            } else {
                vec![rows.m as i64]
            };
            return Ok(Locals {
                real: 1,
                total: 1 + masked,
                single: !rows.masked,
                rows: rows.m,
            });
        }
        layout.index_rows(keys, src, rows, sel, &mut self.idx, &mut self.tmp)?;
        let real = if layout.total <= DIRECT_SLOTS {
            // Each row's slot is its lookup-table index; the rows the
            // filters dropped go to the slot after the table's.
            std::mem::swap(&mut self.local, &mut self.idx);
            if rows.masked {
                discard_dropped(&mut self.local, bits, layout.total as u32);
            }
            self.direct = true;
            layout.total
        } else {
            self.lut.clear();
            self.lut.resize(layout.total, u32::MAX);
            self.local.reserve(rows.m);
            let mut next = 0u32;
            for (j, x) in self.idx.iter().enumerate() {
                if rows.masked && (bits[j / 64] >> (j % 64)) & 1 == 0 {
                    self.local.push(u32::MAX);
                    continue;
                }
                let slot = &mut self.lut[*x as usize];
                if *slot == u32::MAX {
                    *slot = next;
                    self.local_keys.push(*x);
                    next += 1;
                }
                self.local.push(*slot);
            }
            if rows.masked {
                for l in &mut self.local {
                    if *l == u32::MAX {
                        *l = next;
                    }
                }
            }
            next as usize
        };
        self.counts = count_by_slot(&self.local, real + masked);
        if self.direct {
            self.local_keys
                .extend((0..real as u32).filter(|k| self.counts[*k as usize] > 0));
        }
        Ok(Locals {
            real,
            total: real + masked,
            single: false,
            rows: rows.m,
        })
    }

    /// The group of each local slot (`u32::MAX` for a slot without rows),
    /// from the group of each slot in `local_keys`.
    pub(super) fn group_per_slot(&self, of_keys: Vec<u32>, locals: Locals) -> Vec<u32> {
        if !self.direct {
            return of_keys;
        }
        let mut of_slot = vec![u32::MAX; locals.real];
        for (k, g) in self.local_keys.iter().zip(of_keys) {
            of_slot[*k as usize] = g;
        }
        of_slot
    }
}

kernel! {
    /// Sends each row the filters dropped (a clear bit in `bits`) to slot
    /// `discard`. Per 64 rows: none dropped, nothing; a few (up to 8; Q1's
    /// date filter drops one row in 70), each dropped row's bit visited;
    /// more, a select over the 64, not a branch, so the loop vectorizes.
    fn discard_dropped(local: &mut [u32], bits: &[u64], discard: u32) {
        for (chunk, w) in local.chunks_mut(64).zip(bits) {
            if *w == u64::MAX {
                continue;
            }
            let mut dropped = !*w;
            if dropped.count_ones() <= 8 {
                while dropped != 0 {
                    if let Some(l) = chunk.get_mut(dropped.trailing_zeros() as usize) {
                        *l = discard;
                    }
                    dropped &= dropped - 1;
                }
                continue;
            }
            for (i, l) in chunk.iter_mut().enumerate() {
                let keep = (w >> i) & 1 != 0;
                *l = if keep { *l } else { discard };
            }
        }
    }
}

kernel! {
    /// Adds each row's dictionary code × `stride` to its lookup-table index.
    fn add_codes(idx: &mut [u32], codes: &[u8], stride: u32) {
        for (x, c) in idx.iter_mut().zip(codes) {
            *x += *c as u32 * stride;
        }
    }
}

/// Rows per slot: with few slots (Q1's six and a discard slot), the
/// AVX2 or AVX-512 kernel where it runs ([`crate::simd::counts_in_slots`]);
/// else four interleaved counters (see `sum_by_slot` in `block.rs`).
pub(super) fn count_by_slot(slots: &[u32], nslots: usize) -> Vec<i64> {
    if let Some(counts) = crate::simd::counts_in_slots(slots, nslots) {
        return counts;
    }
    let mut acc = vec![0i64; 4 * nslots];
    let (a, rest) = acc.split_at_mut(nslots);
    let (b, rest) = rest.split_at_mut(nslots);
    let (c, d) = rest.split_at_mut(nslots);
    let mut sc = slots.chunks_exact(4);
    for s in &mut sc {
        a[s[0] as usize] += 1;
        b[s[1] as usize] += 1;
        c[s[2] as usize] += 1;
        d[s[3] as usize] += 1;
    }
    for s in sc.remainder() {
        a[*s as usize] += 1;
    }
    (0..nslots).map(|i| a[i] + b[i] + c[i] + d[i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_per_slot_are_counted_alike_for_few_slots_and_many() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for nslots in 1..=(crate::simd::MASKED_COUNT_SLOTS_MAX + 4) {
            for rows in [0, 1, 63, 4096, 4097] {
                let slots: Vec<u32> = (0..rows)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Slot 0 left empty where there are others.
                        match (x % nslots as u64) as u32 {
                            0 if nslots > 1 => 1,
                            s => s,
                        }
                    })
                    .collect();
                let mut want = vec![0i64; nslots];
                for s in &slots {
                    want[*s as usize] += 1;
                }
                crate::simd::for_each_level(|level| {
                    assert_eq!(
                        count_by_slot(&slots, nslots),
                        want,
                        "{nslots} slots, {rows} rows, {level:?}"
                    )
                });
            }
        }
    }

    #[test]
    fn dropped_rows_go_to_the_discard_slot_however_few_or_many() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        // Words with no row dropped, one, eight, nine (the sparse loop's
        // bound and one past it) and many; 200 rows, so the last word
        // covers 8 rows and its high bits (clear: "dropped") fall past the
        // end.
        for dropped_per_word in [0u32, 1, 8, 9, 40, 64] {
            let bits: Vec<u64> = (0..4)
                .map(|_| {
                    let mut w = u64::MAX;
                    while (!w).count_ones() < dropped_per_word {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        w &= !(1 << (x % 64));
                    }
                    w
                })
                .collect();
            let rows = 200;
            let want: Vec<u32> = (0..rows)
                .map(|i| match (bits[i / 64] >> (i % 64)) & 1 {
                    1 => (i % 5) as u32,
                    _ => 9,
                })
                .collect();
            crate::simd::for_each_level(|level| {
                let mut local: Vec<u32> = (0..rows).map(|i| (i % 5) as u32).collect();
                discard_dropped(&mut local, &bits, 9);
                assert_eq!(local, want, "{dropped_per_word} a word, {level:?}");
            });
        }
    }
}
