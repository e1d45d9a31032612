//! What the last analysis of a table found (`ANALYZE`, or the planner's
//! own sampling in `df/stats.rs`, which gathers and caches these): the
//! numbers the planner's estimates and the index access choice
//! (`index/access.rs`) read. A leaf, so that the index access paths below
//! the planner need not import it.

use std::collections::HashMap;

use datafusion::common::ScalarValue;

/// What the last analysis of a table found.
#[derive(Debug, Clone, PartialEq)]
pub struct TableStatistics {
    pub rows: u64,
    /// By column id; integer, date and string columns only.
    pub columns: HashMap<i64, ColumnStatistics>,
    /// The shares of rows filter conditions the column statistics cannot
    /// estimate were measured to keep, on a sample, by the measurement's
    /// key (`df/measured_share.rs`).
    pub measured: HashMap<Vec<u8>, f64>,
}

/// One column's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStatistics {
    /// NULL when the table has no non-NULL value, and for strings.
    pub min: ScalarValue,
    pub max: ScalarValue,
    pub nulls: u64,
    /// Estimated (HyperLogLog, about 1.6% error).
    pub distinct: u64,
    /// Whether the regions' ranges of this (integer or date) column
    /// overlapped at most at their ends: the column rises with the row
    /// handle, as an order key does in a table loaded in order. Groups by
    /// such a column each live in one region (`df/group_sieve.rs`).
    pub clustered: bool,
}
