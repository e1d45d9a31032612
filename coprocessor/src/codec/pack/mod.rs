//! The column layout's unit of storage: a *pack*.
//!
//! A column-layout table keeps its rows in packs of up to [`PACK_ROWS`]
//! rows, one key-value pair per pack (TiFlash calls this a pack, Parquet a
//! row group). Inside the value every column is stored on its own, so a
//! scan reads the few bytes of the columns it needs and never touches the
//! others, and each column carries its min/max (a zone map) so a filter can
//! skip a whole pack without decoding it.
//!
//! KEYS. A pack sits at `t{table}_r{first_handle}P` (`codec/key.rs`, with
//! every other data key): the row key of its smallest handle plus one
//! marker byte. Packs therefore live inside the
//! table's key range, between the row keys, and everything that works on
//! key ranges — regions, splits, raft snapshots, `DROP TABLE` — moves packs
//! without knowing what they are. Fresh writes still arrive as row-layout
//! KVs (the *row delta*, see `raftstore`'s compaction), and a scan reads
//! packs and delta rows side by side: the key alone says which is which
//! ([`classify_key`](super::key::classify_key)). A pack's handles are sorted and packs never overlap:
//! the rows of a pack with handles `[first, last]` belong to the region that
//! holds the key `t{table}_r{first}`, so a region is only ever split at the
//! row key of a pack's first handle.
//!
//! VALUE (all integers little-endian):
//!
//! ```text
//! u8   version (1)
//! u32  rows
//! u16  columns (the handle column, id 0, is always the first)
//! columns × 40-byte directory entries:
//!      i64 column id · u8 encoding · u8 width · u8 flags · u8 pad
//!      u32 offset of the data (from the start of the value) · u32 length
//!      u32 pad · i64 min · i64 max  (integer encodings: the zone map)
//! column data, back to back:
//!      [validity bitmap, ceil(rows/8) bytes, Arrow's bit order] if FLAG_NULLS
//!      INT_FOR  rows × width bytes: value − min (frame of reference), width
//!               the fewest of 0/1/2/4/8 bytes that hold max − min
//!      F64      rows × 8 bytes
//!      I128     rows × 16 bytes (decimals wider than 18 digits)
//!      DICT     u16 entries · (entries+1) × u32 offsets · bytes · rows × u8 codes
//!      PLAIN    (rows+1) × u32 offsets · bytes
//!      NULL     nothing: every value is NULL
//! ```
//!
//! BIGINT, DATE and DECIMAL(p ≤ 18) are frame-of-reference integers (a
//! lineitem price takes 4 bytes, a quantity or a discount 1); strings with at
//! most 255 distinct values in the pack are dictionary codes (a CHAR(1) flag
//! takes 1 byte); other strings are stored plain. NULL slots of an integer
//! column hold `min`, so they never widen it.
//!
//! THE FILES. `builder.rs` takes rows ([`PackBuilder`]) and `encode.rs`
//! turns them into the value above; `view.rs` parses a value in place
//! ([`PackView`], [`ColumnView`]); `int.rs` reads the frame-of-reference
//! integers ([`IntView`]) and is the one place that knows the stored
//! widths; `decode.rs` turns a column, or some of its rows, into an Arrow
//! array of its SQL type.

mod builder;
mod decode;
mod encode;
mod int;
mod view;

use arrow::datatypes::DataType;

// The tests build rows of datums and pack keys through `use super::*`.
#[cfg(test)]
use super::key::{classify_key, pack_key, KeyKind};
#[cfg(test)]
use super::row::Datum;

pub use builder::PackBuilder;
pub use decode::decode_columns;
#[cfg(test)]
pub(crate) use int::int_column_pack;
pub use int::{IntView, Lane, WidthVisitor};
pub use view::{ColumnView, DictView, PackView};

/// Rows per pack (the loader's and the compaction's target).
///
/// Every pack a scan meets costs a few microseconds whatever its size: a
/// RocksDB iterator step onto its own data block (a block-cache lookup, a
/// block iterator), the directory parsed, the zone maps decided, the
/// fused steps' per-block set-up, and a fresh run of each read column for
/// the hardware prefetcher. At 4096 rows those fixed costs were about a
/// third of a store's CPU on TPC-H Q6; at 32768 there are an eighth as
/// many of them, and the stores' CPU per Q6 fell by about 40%
/// (docs/performance.md, "Issue 15: packs of 32768 rows"). Larger packs
/// make zone maps coarser (a narrow key range reads up to a pack's rows),
/// a compaction that folds one changed row rewrites more bytes, and the
/// fused steps' per-block bounds (group slots, dictionary entries) cover
/// more rows; TiFlash and ClickHouse use 8192-row units, DuckDB
/// 122880-row row groups. Readers take packs of any size, so data written
/// with another value reads as it is.
pub const PACK_ROWS: usize = 32768;
/// Most bytes a pack's rows may take in a [`PackBuilder`] before it is
/// finished with fewer than [`PACK_ROWS`] rows ([`PackBuilder::is_full`]):
/// a row of more than 512 bytes makes smaller packs. A lineitem row takes
/// about 180.
pub const PACK_MAX_BYTES: usize = 16 << 20;
/// The column id of the handles inside a pack.
pub const HANDLE_COLUMN_ID: i64 = 0;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 4 + 2;
const ENTRY_LEN: usize = 40;

const ENC_NULL: u8 = 0;
const ENC_INT_FOR: u8 = 1;
const ENC_F64: u8 = 2;
const ENC_I128: u8 = 3;
const ENC_DICT: u8 = 4;
const ENC_PLAIN: u8 = 5;

const FLAG_NULLS: u8 = 1;

/// Most distinct values a string column may have in a pack to be
/// dictionary-encoded.
const MAX_DICT: usize = 255;

/// True if a column of this type is stored as a frame-of-reference integer.
pub fn is_int_type(dt: &DataType) -> bool {
    matches!(dt, DataType::Int64 | DataType::Date32)
        || matches!(dt, DataType::Decimal128(p, _) if *p <= 18)
}

#[cfg(test)]
mod tests;
