//! Quarry's coprocessor: the part of a query that runs inside the storage
//! processes, next to the data.
//!
//! A storage process receives a small DAG per region, *TableScan →
//! Selection → Aggregation (partial) | Projection → Limit*, runs it over a
//! snapshot of the region, and answers with Arrow column chunks. This crate
//! is everything about that DAG that does not depend on where the bytes
//! live: it knows nothing of RocksDB or Raft (the storage process adapts its
//! engine to the [`storage::Storage`] trait) and is shared with compute,
//! which builds the DAG and runs the final aggregation with the same code.
//!
//! THE PIECES
//!
//! * [`codec`]: memcomparable keys (`t{table}_r{handle}`), the row-v2
//!   value format, which finds one column by binary search and decodes it
//!   straight into an Arrow builder, and the column layout's packs (32768
//!   rows, each column stored on its own with a zone map).
//! * [`key_range`]: half-open key ranges, the one home of "an empty end
//!   means unbounded".
//! * [`storage`]: the scan trait (`begin_scan` / `scan_next` over borrowed
//!   slices) and an in-memory implementation for tests.
//! * [`expr`]: typed expressions with exact decimal rules, built once and
//!   checked identically on both sides of the wire.
//! * [`aggregate`]: aggregate functions, grouped accumulators and the
//!   [`aggregate::Aggregator`] that runs them in Partial (storage) or Final
//!   (compute) mode.
//! * [`executor`]: the batch executors and their pull contract; one table
//!   scan for both layouts, and the fused aggregation that filters and
//!   aggregates on a pack's stored integers in one pass.
//! * [`endpoint`]: one request in, one response out, errors as data.
//! * [`ipc`]: Arrow IPC stream encoding.
//! * [`simd`]: the hot kernels compiled for the baseline and for AVX2,
//!   picked per CPU at run time.
//!
//! TYPES are Arrow types; see [`types`] for the SQL mapping. Decimals are
//! i128 unscaled values with checked arithmetic: an overflow is an
//! [`Error::Overflow`], never a wrapped or rounded answer.
//!
//! IMPLEMENTATION CAVEATS
//!
//! * The generic executors filter the full batch with a selection bitmap;
//!   expressions that can fail see unselected rows as NULL, and aggregate
//!   arguments are evaluated over the whole batch. The fused executor
//!   (integer shapes only) avoids both; other shapes pay them.
//! * Generic group keys go through arrow's row format and a hash map; the
//!   fixed-array lookup exists only in the fused executor.
//! * Corrupt stored bytes are errors, never panics; detecting corruption
//!   of values that still decode is left to RocksDB's block checksums.

// Library code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod aggregate;
pub mod codec;
pub mod endpoint;
mod error;
pub mod executor;
pub mod expr;
pub mod ipc;
pub mod key_range;
pub mod sieve;
pub mod simd;
pub mod storage;
pub mod types;

pub use error::{Error, Result};
