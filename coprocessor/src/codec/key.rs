//! Memcomparable key encoding.
//!
//! Every data key compares, as raw bytes, in the same order as the values it
//! encodes, so a key range is a value range and RocksDB's ordered iteration
//! is a table scan in handle order.
//!
//! ```text
//! row key:      t{table_id: i64}_r{handle: i64}        19 bytes
//! pack key:     t{table_id: i64}_r{first_handle: i64}P 20 bytes (column layout)
//! lock, version: the row key + a suffix (see `mvcc.rs`)
//! table range:  [t{table_id}_r, t{table_id}_s)
//! index entry:  t{table_id}_i{bytes(index_id: i64, values…[, handle])}
//! ```
//!
//! An index entry's key (TiDB's `t{t}_i{index}{values}`) sits in the
//! table's key space just before its rows, so the table's first region
//! holds its indexes until a split moves them out, and `DROP TABLE`
//! removes them with the rows. Everything after `_i` is one group-encoded
//! byte string (below): it is self-delimiting, so an entry's lock and
//! versions are the same suffixes as a row's (`mvcc.rs`) and
//! [`classify_key`] finds where the entry's own key ends. Inside it come
//! the index id and the indexed values, each a flag byte (NULL sorts
//! first) and its memcomparable bytes, then for a non-unique index (or a
//! unique one over a NULL) the row's handle; a unique entry's value is
//! the handle.
//!
//! A pack key is the row key of the pack's smallest handle plus a marker
//! byte, so packs sort among the row keys of their table (just after the
//! row key of their first handle) and every key-range operation moves them
//! like rows; [`classify_key`] tells the two apart by length and marker.
//!
//! Integers are big-endian with the sign bit flipped, so negative values
//! sort before positive ones. Byte strings use the group encoding of TiKV's
//! `codec::bytes`: 8-byte groups, each followed by a marker byte
//! `0xFF - padding`, which keeps prefixes in order and makes the encoding
//! self-delimiting. The meta keyspace (catalog, region directory) uses it for
//! names; see `raftstore/src/keys.rs` for the whole keyspace.

use crate::{invalid_input, Result};

/// First byte of every table data key.
pub const TABLE_PREFIX: u8 = b't';
/// Separates the table id from the handle in a row key.
pub const RECORD_SEP: &[u8; 2] = b"_r";
/// Length of a row key.
pub const RECORD_KEY_LEN: usize = 1 + 8 + 2 + 8;
/// The marker byte after a pack's row key.
pub const PACK_MARKER: u8 = b'P';
/// The marker byte of a pack's *mark* (`t{t}_r{first}M`): the pack may
/// have rows that newer versions replace. It sorts after the lock of the
/// pack's first handle and just before the pack's key.
pub const PACK_MARK_MARKER: u8 = b'M';
/// Length of a pack key.
pub const PACK_KEY_LEN: usize = RECORD_KEY_LEN + 1;
/// Separates the table id from an index entry's encoded body.
pub const INDEX_SEP: &[u8; 2] = b"_i";
/// The bytes before an index entry's encoded body: `t{table}_i`.
pub const INDEX_PREFIX_LEN: usize = 1 + 8 + 2;

const SIGN_MASK: u64 = 0x8000_0000_0000_0000;

/// Encodes an i64 so that byte order is numeric order.
#[inline]
pub fn encode_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ SIGN_MASK).to_be_bytes()
}

/// The inverse of [`encode_i64`].
#[inline]
pub fn decode_i64(b: &[u8]) -> Result<i64> {
    let arr: [u8; 8] = b
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| invalid_input!("truncated integer key ({} bytes)", b.len()))?;
    Ok((u64::from_be_bytes(arr) ^ SIGN_MASK) as i64)
}

/// The column id that reads a row's handle (the integer in its key): how
/// UPDATE and DELETE find the rows of a table without a primary key, as
/// TiDB's `_tidb_rowid`. Compute names it `_rowid` in those statements
/// only.
pub const ROWID_COLUMN_ID: i64 = -1;

/// `t{table_id}_r{handle}`.
pub fn record_key(table_id: i64, handle: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(RECORD_KEY_LEN);
    append_record_key(&mut k, table_id, handle);
    k
}

/// Appends `t{table_id}_r{handle}` to `buf` (the loader reuses buffers).
#[inline]
pub fn append_record_key(buf: &mut Vec<u8>, table_id: i64, handle: i64) {
    buf.push(TABLE_PREFIX);
    buf.extend_from_slice(&encode_i64(table_id));
    buf.extend_from_slice(RECORD_SEP);
    buf.extend_from_slice(&encode_i64(handle));
}

/// `t{table_id}_r`: every row key of the table starts with it.
pub fn record_prefix(table_id: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(11);
    k.push(TABLE_PREFIX);
    k.extend_from_slice(&encode_i64(table_id));
    k.extend_from_slice(RECORD_SEP);
    k
}

/// The key range holding all of a table's rows: `[t{id}_r, t{id}_s)`.
pub fn table_record_range(table_id: i64) -> (Vec<u8>, Vec<u8>) {
    let start = record_prefix(table_id);
    let mut end = start.clone();
    *end.last_mut().expect("non-empty prefix") += 1;
    (start, end)
}

/// Splits a row key into (table id, handle).
pub fn decode_record_key(key: &[u8]) -> Result<(i64, i64)> {
    if key.len() != RECORD_KEY_LEN || key[0] != TABLE_PREFIX || &key[9..11] != RECORD_SEP {
        return Err(invalid_input!("not a row key: {}", hex(key)));
    }
    Ok((decode_i64(&key[1..9])?, decode_i64(&key[11..19])?))
}

const GROUP: usize = 8;
const MARKER: u8 = 0xFF;
const PAD: u8 = 0;

/// Memcomparable group encoding of a byte string.
pub fn encode_bytes(buf: &mut Vec<u8>, data: &[u8]) {
    for chunk in data.chunks(GROUP).chain(
        // An exact multiple of 8 (including empty) ends with an all-pad group.
        data.len().is_multiple_of(GROUP).then_some(&[][..]),
    ) {
        buf.extend_from_slice(chunk);
        let pad = GROUP - chunk.len();
        buf.extend(std::iter::repeat_n(PAD, pad));
        buf.push(MARKER - pad as u8);
    }
}

/// The length of the group-encoded byte string at the front of `input`
/// (its groups up to the one with a pad), or None if it is cut short.
pub fn encoded_bytes_len(input: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let marker = *input.get(pos + GROUP)?;
        pos += GROUP + 1;
        if marker != MARKER {
            return Some(pos);
        }
    }
}

/// Decodes one group-encoded byte string from the front of `input`; returns
/// it and the number of input bytes consumed.
pub fn decode_bytes(input: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let group = input
            .get(pos..pos + GROUP + 1)
            .ok_or_else(|| invalid_input!("truncated memcomparable bytes"))?;
        let marker = group[GROUP];
        let pad = (MARKER - marker) as usize;
        if pad > GROUP {
            return Err(invalid_input!("bad memcomparable marker {marker:#x}"));
        }
        let real = GROUP - pad;
        if group[real..GROUP].iter().any(|&b| b != PAD) {
            return Err(invalid_input!("bad memcomparable padding"));
        }
        out.extend_from_slice(&group[..real]);
        pos += GROUP + 1;
        if pad != 0 {
            return Ok((out, pos));
        }
    }
}

/// What a data key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A row-layout KV older than every snapshot (a bulk-loaded row).
    Row(i64),
    /// A pack starting at this handle.
    Pack(i64),
    /// The mark of the pack starting at this handle: some of its rows may
    /// be replaced or deleted by versions (written by a transaction's
    /// prewrite, kept by compaction while versions over the pack remain).
    PackMark(i64),
    /// A running transaction's lock on this handle's row (`mvcc`).
    Lock(i64),
    /// A committed version of this handle's row (`mvcc`): a row table's
    /// row, or a column table's delta row.
    Version {
        handle: i64,
        commit_ts: u64,
        kind: super::mvcc::WriteKind,
    },
    /// A key of an index entry (`t{t}_i…`): which part of the entry's
    /// MVCC record it is; the entry's own key is the first `base_len`
    /// bytes.
    Index { base_len: usize, part: IndexPart },
    /// Anything else (not table data).
    Other,
}

/// What an index entry's key holds, as [`KeyKind::Index`] tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexPart {
    /// The entry with no versions (never written so today; kept readable).
    Bare,
    /// A running transaction's lock on the entry.
    Lock,
    /// A committed version of the entry.
    Version {
        commit_ts: u64,
        kind: super::mvcc::WriteKind,
    },
}

/// Whether `key` is an index entry's key or one of its MVCC records.
#[inline]
pub fn is_index_key(key: &[u8]) -> bool {
    key.len() > INDEX_PREFIX_LEN && key[0] == TABLE_PREFIX && &key[9..11] == INDEX_SEP
}

fn classify_index_key(key: &[u8]) -> KeyKind {
    let Some(body) = encoded_bytes_len(&key[INDEX_PREFIX_LEN..]) else {
        return KeyKind::Other;
    };
    let base_len = INDEX_PREFIX_LEN + body;
    let part = match &key[base_len..] {
        [] => IndexPart::Bare,
        [m] if *m == super::mvcc::LOCK_MARKER => IndexPart::Lock,
        [ts @ .., k] if ts.len() == 8 => match super::mvcc::WriteKind::from_byte(*k) {
            Some(kind) => IndexPart::Version {
                commit_ts: !u64::from_be_bytes(ts.try_into().expect("8 bytes")),
                kind,
            },
            None => return KeyKind::Other,
        },
        _ => return KeyKind::Other,
    };
    KeyKind::Index { base_len, part }
}

/// The key a lock or version key belongs to: a row's key, or an index
/// entry's; `key` itself when it is neither.
pub fn base_key_of(key: &[u8]) -> &[u8] {
    match classify_key(key) {
        KeyKind::Index { base_len, .. } => &key[..base_len],
        KeyKind::Row(_) | KeyKind::Lock(_) | KeyKind::Version { .. } => &key[..RECORD_KEY_LEN],
        _ => key,
    }
}

/// `t{table_id}_i` + the group encoding of `body` (the index id, the
/// values, the handle: `codec::index::entry`).
pub fn index_key(table_id: i64, body: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(INDEX_PREFIX_LEN + body.len() / 8 * 9 + 9);
    k.push(TABLE_PREFIX);
    k.extend_from_slice(&encode_i64(table_id));
    k.extend_from_slice(INDEX_SEP);
    encode_bytes(&mut k, body);
    k
}

/// The unencoded body of an index entry's own key (inverse of
/// [`index_key`]).
pub fn index_key_body(key: &[u8]) -> Result<Vec<u8>> {
    if !is_index_key(key) {
        return Err(invalid_input!("not an index key: {}", hex(key)));
    }
    Ok(decode_bytes(&key[INDEX_PREFIX_LEN..])?.0)
}

/// `t{table_id}_i`: where a table's key range starts (its index entries,
/// then its rows at `t{table_id}_r`).
pub fn index_space_start(table_id: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(INDEX_PREFIX_LEN);
    k.push(TABLE_PREFIX);
    k.extend_from_slice(&encode_i64(table_id));
    k.extend_from_slice(INDEX_SEP);
    k
}

/// The key range of a table's regions: its index entries and its rows,
/// `[t{id}_i, t{id}_s)`.
pub fn table_data_range(table_id: i64) -> (Vec<u8>, Vec<u8>) {
    (index_space_start(table_id), table_record_range(table_id).1)
}

/// Tells rows, packs, locks and versions apart without looking at values.
#[inline]
pub fn classify_key(key: &[u8]) -> KeyKind {
    if is_index_key(key) {
        return classify_index_key(key);
    }
    match key.len() {
        RECORD_KEY_LEN => match decode_i64(&key[11..19]) {
            Ok(h) => KeyKind::Row(h),
            Err(_) => KeyKind::Other,
        },
        PACK_KEY_LEN if key[RECORD_KEY_LEN] == PACK_MARKER => match decode_i64(&key[11..19]) {
            Ok(h) => KeyKind::Pack(h),
            Err(_) => KeyKind::Other,
        },
        PACK_KEY_LEN if key[RECORD_KEY_LEN] == PACK_MARK_MARKER => match decode_i64(&key[11..19]) {
            Ok(h) => KeyKind::PackMark(h),
            Err(_) => KeyKind::Other,
        },
        PACK_KEY_LEN if key[RECORD_KEY_LEN] == super::mvcc::LOCK_MARKER => {
            match decode_i64(&key[11..19]) {
                Ok(h) => KeyKind::Lock(h),
                Err(_) => KeyKind::Other,
            }
        }
        super::mvcc::VERSION_KEY_LEN => match super::mvcc::parse_version_key(key) {
            Some((handle, commit_ts, kind)) => KeyKind::Version {
                handle,
                commit_ts,
                kind,
            },
            None => KeyKind::Other,
        },
        _ => KeyKind::Other,
    }
}

/// The first key past every key of `row_key`'s row (its lock, a pack mark
/// or pack starting at it, its versions): the next handle's row key.
pub fn row_keys_end(row_key: &[u8]) -> Vec<u8> {
    let mut k = row_key.to_vec();
    while let Some(last) = k.pop() {
        if last < 0xFF {
            k.push(last + 1);
            break;
        }
    }
    k
}

/// Whether `[start, end)` holds one row's keys only (`start` a row key,
/// `end` its [`row_keys_end`]): what a point read by handle asks for.
pub fn is_row_point(start: &[u8], end: &[u8]) -> bool {
    matches!(classify_key(start), KeyKind::Row(_)) && end == row_keys_end(start).as_slice()
}

/// `t{table_id}_r{first_handle}M`: the mark of that pack.
pub fn pack_mark_key(table_id: i64, first_handle: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(PACK_KEY_LEN);
    append_record_key(&mut k, table_id, first_handle);
    k.push(PACK_MARK_MARKER);
    k
}

/// `t{table_id}_r{first_handle}P`.
pub fn pack_key(table_id: i64, first_handle: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(PACK_KEY_LEN);
    append_record_key(&mut k, table_id, first_handle);
    k.push(PACK_MARKER);
    k
}

/// Lower-case hex of bytes (keys in messages, file names, cookies).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn i64_order_is_byte_order(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), encode_i64(a).cmp(&encode_i64(b)));
            prop_assert_eq!(decode_i64(&encode_i64(a)).unwrap(), a);
        }

        #[test]
        fn record_keys_round_trip_and_sort(t: i64, h1: i64, h2: i64) {
            let (k1, k2) = (record_key(t, h1), record_key(t, h2));
            prop_assert_eq!(decode_record_key(&k1).unwrap(), (t, h1));
            prop_assert_eq!(h1.cmp(&h2), k1.cmp(&k2));
            let (start, end) = table_record_range(t);
            prop_assert!(start <= k1 && k1 < end);
        }

        /// Garbage keys are errors, never panics.
        #[test]
        fn garbage_keys_are_errors_not_panics(bytes: Vec<u8>) {
            let _ = decode_record_key(&bytes);
            let _ = decode_i64(&bytes);
            if let Ok((_, used)) = decode_bytes(&bytes) {
                prop_assert!(used <= bytes.len());
            }
        }

        #[test]
        fn bytes_round_trip_and_sort(a: Vec<u8>, b: Vec<u8>) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            encode_bytes(&mut ea, &a);
            encode_bytes(&mut eb, &b);
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            let (da, used) = decode_bytes(&ea).unwrap();
            prop_assert_eq!(da, a);
            prop_assert_eq!(used, ea.len());
        }
    }

    #[test]
    fn a_point_range_is_one_rows_keys_and_nothing_wider() {
        let k = record_key(7, 42);
        assert!(is_row_point(&k, &row_keys_end(&k)));
        // Two rows, a table's whole range, a pack key: not points.
        assert!(!is_row_point(&k, &record_key(7, 44)));
        let (start, end) = table_record_range(7);
        assert!(!is_row_point(&start, &end));
        let p = pack_key(7, 42);
        assert!(!is_row_point(&p, &row_keys_end(&p)));
    }

    #[test]
    fn table_ranges_do_not_overlap() {
        let (_, end1) = table_record_range(1);
        let (start2, _) = table_record_range(2);
        assert!(end1 <= start2);
        assert!(decode_record_key(b"short").is_err());
    }
}
