//! The whole keyspace of a storage process, in one place.
//!
//! ```text
//! CF "default" (data, replicated, split into regions)
//!   t{table_id:i64}_r{handle:i64}   a row (coprocessor/src/codec/key.rs)
//!   t{table_id:i64}_r{first:i64}P   a pack of the column layout: up to 32768
//!                                   rows from handle `first` on
//!                                   (coprocessor/src/codec/pack/)
//!   m...                            the meta region: catalog and directory
//!     mt{name:bytes}                  TableDef of a table, by name
//!     mr{region_id:u64}               Region of the directory
//!     ms{store_id:u64}                Store (id, address)
//!     mi                              the id allocator's next id
//!     mh{table_id:i64}                a table's next implicit handle
//!     mo                              the timestamp oracle's persisted
//!                                     high-water mark (TSO_LIMIT)
//!     mv{name:bytes}                  ViewDef of a view, by name
//!     mc                              the catalog version: a token every
//!                                     write to an mt or mv key replaces
//!
//! CF "raft" (local to this store, never replicated)
//!   \x01s                           StoreIdent: which store this data dir is
//!   \x01r{region_id:u64}            RegionLocalState: a region this store holds
//!   \x01h{region_id:u64}            RaftLocalState: hard state, last index
//!   \x01a{region_id:u64}            ApplyState: applied/commit/truncated index
//!   \x01l{region_id:u64}{index:u64} a raft log entry (eraftpb::Entry)
//! ```
//!
//! Local keys live in their own column family, apart from data keys, so a
//! scan over data can never see them and a region's data range is exactly
//! its key range (TiKV keeps them apart with a `z` prefix instead).
//! Integers are memcomparable (big-endian, sign-flipped for i64) so the
//! directory and catalog iterate in id order; names use the memcomparable
//! byte-group encoding.

use quarry_coprocessor::codec::key::{encode_bytes, encode_i64};

/// A key past every data key (they start with `t` or `m`). RocksDB's
/// `delete_range` needs a concrete end where a range's end is unbounded.
pub const DATA_END: &[u8] = &[0xFF; 32];

/// `end` as a concrete key: [`DATA_END`] where it is empty (unbounded).
pub fn concrete_end(end: &[u8]) -> Vec<u8> {
    if end.is_empty() {
        DATA_END.to_vec()
    } else {
        end.to_vec()
    }
}

/// The meta region's key range: `[m, n)`.
pub const META_START: &[u8] = b"m";
pub const META_END: &[u8] = b"n";
/// The meta region's id, fixed at bootstrap.
pub const META_REGION_ID: u64 = 1;

pub const TABLE_BY_NAME: &[u8] = b"mt";
pub const REGION: &[u8] = b"mr";
pub const STORE: &[u8] = b"ms";
pub const NEXT_ID: &[u8] = b"mi";
pub const NEXT_HANDLE: &[u8] = b"mh";
/// The timestamp oracle's high-water mark: no timestamp at or above this
/// physical time (ms) has been handed out.
pub const TSO_LIMIT: &[u8] = b"mo";
/// Regions of dropped tables whose peers are still to be destroyed
/// (`meta/dropped.rs`), by region id: the region as it was.
pub const DROPPED_REGION: &[u8] = b"mg";
/// Regions of a CREATE TABLE whose peers may exist but whose commit has
/// not happened (`meta/pending.rs`), by region id: the region as planned.
pub const PENDING_REGION: &[u8] = b"mp";
/// Users who may log in to compute, by name (`UserDef`).
pub const USER: &[u8] = b"mu";
/// Views, by name (`ViewDef`; `meta/views.rs`).
pub const VIEW: &[u8] = b"mv";
/// The catalog's version: a token (u64, big-endian) that every write to a
/// table's or view's definition replaces, in the same write
/// (`Meta::propose`). Compute processes keep the catalog and check it
/// against this (`compute/src/catalog_cache.rs`).
pub const CATALOG_VERSION: &[u8] = b"mc";

pub fn table_key(name: &str) -> Vec<u8> {
    let mut k = TABLE_BY_NAME.to_vec();
    encode_bytes(&mut k, name.as_bytes());
    k
}

pub fn view_key(name: &str) -> Vec<u8> {
    let mut k = VIEW.to_vec();
    encode_bytes(&mut k, name.as_bytes());
    k
}

/// `prefix` then `id` big-endian, so a prefix's keys sort by id.
fn id_key(prefix: &[u8], id: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

pub fn region_key(region_id: u64) -> Vec<u8> {
    id_key(REGION, region_id)
}

pub fn user_key(name: &str) -> Vec<u8> {
    let mut k = USER.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn dropped_region_key(region_id: u64) -> Vec<u8> {
    id_key(DROPPED_REGION, region_id)
}

pub fn pending_region_key(region_id: u64) -> Vec<u8> {
    id_key(PENDING_REGION, region_id)
}

pub fn store_key(store_id: u64) -> Vec<u8> {
    id_key(STORE, store_id)
}

pub fn next_handle_key(table_id: i64) -> Vec<u8> {
    let mut k = NEXT_HANDLE.to_vec();
    k.extend_from_slice(&encode_i64(table_id));
    k
}

/// The end of a prefix's range: the prefix with its last byte incremented.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut e = prefix.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xFF {
            e.push(last + 1);
            return e;
        }
    }
    Vec::new()
}

pub const LOCAL_PREFIX: u8 = 0x01;
pub const STORE_IDENT_KEY: &[u8] = b"\x01s";
pub const REGION_STATE_PREFIX: &[u8] = b"\x01r";

pub fn region_state_key(region_id: u64) -> Vec<u8> {
    let mut k = REGION_STATE_PREFIX.to_vec();
    k.extend_from_slice(&region_id.to_be_bytes());
    k
}

pub const RAFT_STATE_PREFIX: &[u8] = b"\x01h";
pub const APPLY_STATE_PREFIX: &[u8] = b"\x01a";
pub const RAFT_LOG_PREFIX: &[u8] = b"\x01l";

pub fn raft_state_key(region_id: u64) -> Vec<u8> {
    let mut k = RAFT_STATE_PREFIX.to_vec();
    k.extend_from_slice(&region_id.to_be_bytes());
    k
}

pub fn apply_state_key(region_id: u64) -> Vec<u8> {
    let mut k = APPLY_STATE_PREFIX.to_vec();
    k.extend_from_slice(&region_id.to_be_bytes());
    k
}

pub fn raft_log_key(region_id: u64, index: u64) -> Vec<u8> {
    let mut k = RAFT_LOG_PREFIX.to_vec();
    k.extend_from_slice(&region_id.to_be_bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Records that this store ingested the SST file named `uuid` into region
/// `region_id` (`import.rs`): a repeated ingest of it does nothing.
pub const INGESTED_PREFIX: &[u8] = b"\x01i";

pub fn ingested_key(region_id: u64, uuid: &[u8]) -> Vec<u8> {
    let mut k = INGESTED_PREFIX.to_vec();
    k.extend_from_slice(&region_id.to_be_bytes());
    k.extend_from_slice(uuid);
    k
}

/// All log keys of a region: `[raft_log_key(id, 0), raft_log_key(id + 1, 0))`.
pub fn raft_log_range(region_id: u64) -> (Vec<u8>, Vec<u8>) {
    (raft_log_key(region_id, 0), raft_log_key(region_id + 1, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_keys_stay_inside_the_meta_range_and_apart_from_rows() {
        for k in [
            table_key("lineitem"),
            region_key(u64::MAX),
            store_key(1),
            NEXT_ID.to_vec(),
            next_handle_key(-5),
        ] {
            assert!(k.as_slice() >= META_START && k.as_slice() < META_END);
        }
        let row = quarry_coprocessor::codec::key::record_key(1, 1);
        assert!(row.as_slice() >= META_END);
        assert!(region_key(1) < region_key(2));
        assert!(region_key(255) < region_key(256));
        assert_eq!(prefix_end(b"mr"), b"ms".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    }
}
