//! Index entries: what a secondary index stores for a row, and how a
//! value range becomes a key range.
//!
//! An entry's key is `t{table}_i` + the group encoding of its *body*
//! (`key.rs`): the index id, then each indexed value as a flag byte and
//! its memcomparable bytes, then the row's handle. Byte order of bodies
//! is the order of `(index, values…, handle)`, so the entries of one
//! index with a leading value in `[a, b]` are one key range, and equal
//! values keep their rows in handle order.
//!
//! A UNIQUE index's entry leaves the handle out of the key and stores it
//! as the value, so two rows with the same values write the same key and
//! the second one's INSERT mutation finds the first (`ALREADY_EXISTS`):
//! the check is the storage's, inside the writing transaction, as TiDB
//! does it. A value tuple with a NULL in it is never a duplicate (SQL's
//! rule, PostgreSQL's and TiDB's): such an entry keeps the handle in its
//! key like a non-unique one.
//!
//! Value encodings (flag `0x00` NULL, sorting first; `0x01` then):
//! integers and dates as [`encode_i64`], decimals as the unscaled i128
//! big-endian with the sign bit flipped (one column has one scale),
//! doubles by their IEEE bits made to sort (negatives inverted, the sign
//! bit of positives set), strings group-encoded (self-delimiting), and
//! booleans as one byte.

use super::key::{encode_bytes, encode_i64, index_key, index_key_body};
use super::row::Datum;
use crate::{invalid_input, Result};

const NULL_FLAG: u8 = 0x00;
const VALUE_FLAG: u8 = 0x01;

/// An inclusive lower bound below every non-NULL value and above every
/// NULL: a range predicate's open low end (`col < 5` is not NULL).
pub const NON_NULL: &[u8] = &[VALUE_FLAG];

/// Appends one indexed value.
pub fn encode_value(buf: &mut Vec<u8>, d: &Datum) {
    match d {
        Datum::Null => {
            buf.push(NULL_FLAG);
            return;
        }
        _ => buf.push(VALUE_FLAG),
    }
    match d {
        Datum::Null => {}
        Datum::Int(v) => buf.extend_from_slice(&encode_i64(*v)),
        Datum::Date(v) => buf.extend_from_slice(&encode_i64(*v as i64)),
        Datum::Decimal(v) => buf.extend_from_slice(&((*v as u128) ^ (1u128 << 127)).to_be_bytes()),
        Datum::Float(f) => {
            let bits = f.to_bits();
            let sortable = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            buf.extend_from_slice(&sortable.to_be_bytes())
        }
        Datum::Bytes(b) => encode_bytes(buf, b),
        Datum::Bool(b) => buf.push(*b as u8),
    }
}

/// The body prefix every entry of index `index_id` starts with.
pub fn index_prefix(index_id: i64) -> Vec<u8> {
    encode_i64(index_id).to_vec()
}

/// The key of the entry of the row `handle` with `values` in index
/// `index_id` of `table_id`, and its value (the handle for a unique
/// entry, empty otherwise).
pub fn entry(
    table_id: i64,
    index_id: i64,
    unique: bool,
    values: &[Datum],
    handle: i64,
) -> (Vec<u8>, Vec<u8>) {
    let mut body = index_prefix(index_id);
    for v in values {
        encode_value(&mut body, v);
    }
    let distinct = unique && !values.iter().any(|v| matches!(v, Datum::Null));
    if distinct {
        (index_key(table_id, &body), handle.to_be_bytes().to_vec())
    } else {
        body.extend_from_slice(&encode_i64(handle));
        (index_key(table_id, &body), Vec::new())
    }
}

/// The handle an entry names: the last 8 bytes of its body, or its
/// value for a unique entry (a value of 8 bytes).
pub fn entry_handle(base_key: &[u8], value: &[u8]) -> Result<i64> {
    if value.len() == 8 {
        return Ok(i64::from_be_bytes(value.try_into().expect("8 bytes")));
    }
    let body = index_key_body(base_key)?;
    let tail = body
        .len()
        .checked_sub(8)
        .ok_or_else(|| invalid_input!("an index entry too short to name a row"))?;
    super::key::decode_i64(&body[tail..])
}

/// The key range of the entries of index `index_id` whose leading
/// values lie between `low` and `high` (each encoded by
/// [`encode_value`], inclusive or not; None: unbounded on that side).
pub fn entry_range(
    table_id: i64,
    index_id: i64,
    low: Option<(&[u8], bool)>,
    high: Option<(&[u8], bool)>,
) -> (Vec<u8>, Vec<u8>) {
    let prefix = index_prefix(index_id);
    let with = |v: &[u8]| {
        let mut b = prefix.clone();
        b.extend_from_slice(v);
        b
    };
    // Every body that starts with `b`'s bytes sorts at or after `b` and
    // before `b` with its last byte raised; the encoded *key* of a body
    // is not a prefix-preserving map, so bounds are taken on keys of
    // bodies: `start` = key(b) for an inclusive bound (every extension of
    // b encodes at or after it), and past every extension for an
    // exclusive one.
    let start = match low {
        None => index_key(table_id, &prefix),
        Some((v, true)) => index_key(table_id, &with(v)),
        Some((v, false)) => past_extensions(table_id, &with(v)),
    };
    let end = match high {
        None => past_extensions(table_id, &prefix),
        Some((v, true)) => past_extensions(table_id, &with(v)),
        Some((v, false)) => index_key(table_id, &with(v)),
    };
    (start, end)
}

/// A key after the keys of every body that extends `body`, and before
/// every other body greater than it: the key of `body`'s successor among
/// byte strings of its length (its last non-0xFF byte raised).
fn past_extensions(table_id: i64, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    while let Some(last) = b.pop() {
        if last < 0xFF {
            b.push(last + 1);
            return index_key(table_id, &b);
        }
    }
    // All 0xFF (no index id is): past the whole index space.
    super::key::record_prefix(table_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::key::{classify_key, KeyKind};
    use proptest::prelude::*;

    fn key_of(values: &[Datum], h: i64) -> Vec<u8> {
        entry(5, 2, false, values, h).0
    }

    proptest! {
        #[test]
        fn entries_sort_by_value_then_handle(a: i64, b: i64, ha: i64, hb: i64) {
            let (ka, kb) = (key_of(&[Datum::Int(a)], ha), key_of(&[Datum::Int(b)], hb));
            prop_assert_eq!((a, ha).cmp(&(b, hb)), ka.cmp(&kb));
            prop_assert_eq!(entry_handle(&ka, &[]).unwrap(), ha);
        }

        #[test]
        fn strings_and_doubles_sort_too(a: String, b: String, x: f64, y: f64) {
            let (ka, kb) = (key_of(&[Datum::Bytes(a.as_bytes())], 1), key_of(&[Datum::Bytes(b.as_bytes())], 1));
            prop_assert_eq!(a.as_bytes().cmp(b.as_bytes()), ka.cmp(&kb));
            if !x.is_nan() && !y.is_nan() && x != y {
                let (kx, ky) = (key_of(&[Datum::Float(x)], 1), key_of(&[Datum::Float(y)], 1));
                prop_assert_eq!(x < y, kx < ky);
            }
        }

        #[test]
        fn a_range_holds_exactly_the_values_in_it(v: i64, lo: i64, hi: i64, h: i64, inc_lo: bool, inc_hi: bool) {
            let enc = |x: i64| { let mut b = Vec::new(); encode_value(&mut b, &Datum::Int(x)); b };
            let (elo, ehi) = (enc(lo), enc(hi));
            let (s, e) = entry_range(5, 2, Some((&elo, inc_lo)), Some((&ehi, inc_hi)));
            let k = key_of(&[Datum::Int(v), Datum::Bytes(b"tail")], h);
            let inside = (if inc_lo { v >= lo } else { v > lo }) && (if inc_hi { v <= hi } else { v < hi });
            prop_assert_eq!(inside, s <= k && k < e);
        }
    }

    #[test]
    fn unique_entries_keep_the_handle_in_the_value_unless_null() {
        let (k1, v1) = entry(5, 2, true, &[Datum::Int(7)], 10);
        let (k2, _) = entry(5, 2, true, &[Datum::Int(7)], 11);
        assert_eq!(k1, k2);
        assert_eq!(entry_handle(&k1, &v1).unwrap(), 10);
        let (n1, nv) = entry(5, 2, true, &[Datum::Null], 10);
        let (n2, _) = entry(5, 2, true, &[Datum::Null], 11);
        assert_ne!(n1, n2);
        assert_eq!(entry_handle(&n1, &nv).unwrap(), 10);
        // Locks and versions of an entry are told apart from it.
        let lock = crate::codec::mvcc::lock_key(&k1);
        assert!(
            matches!(classify_key(&lock), KeyKind::Index { base_len, .. } if base_len == k1.len())
        );
        let ver = crate::codec::mvcc::version_key(&k1, 9 << 18, crate::codec::mvcc::WriteKind::Put);
        assert!(matches!(
            classify_key(&ver),
            KeyKind::Index { part: crate::codec::key::IndexPart::Version { commit_ts, .. }, .. } if commit_ts == 9 << 18
        ));
        // Every MVCC record of an entry sorts before the next entry.
        let (next, _) = entry(5, 2, true, &[Datum::Int(8)], 0);
        assert!(ver < next && lock < next);
    }
}
