//! Fused aggregation: scan, filter, arithmetic and partial aggregation in
//! one pass over each block, on the stored integers.
//!
//! The generic pipeline (`TableScan → Selection → Aggregation`) decodes
//! every requested column into Arrow arrays of the SQL type (DECIMAL as
//! i128), runs each filter and each arithmetic node as a separate kernel
//! over the whole batch, and groups rows through a hash table. That is
//! several passes and 16-byte values for what TPC-H Q1 and Q6 — filters on
//! a date and a few decimals, sums of small decimal products, two CHAR(1)
//! group keys — can do in one. This executor takes those common shapes:
//!
//! * **inputs** are BIGINT, DATE and DECIMAL(p ≤ 18) columns as i64 (the
//!   unscaled value), read straight from a pack's frame-of-reference bytes
//!   or from decoded delta rows, and strings as dictionary codes;
//! * **filters** are conjuncts of a column against constants (`<`, `<=`,
//!   `BETWEEN`, `=`, `<>`, `IN`, `IS [NOT] NULL`, string equality/IN). Each
//!   is checked first against the block's min/max: a block no row of which
//!   can pass is skipped whole, a conjunct every row passes is dropped.
//!   The rest run most selective first (estimated from the zone map) and
//!   produce a selection vector; later conjuncts only look at the rows still
//!   selected, reading single values from the packed bytes;
//! * **group keys** (columns) become a small array index: each key's
//!   dictionary code (or value − min for a narrow integer range), combined
//!   into one index into a lookup table of the block's groups — Q1's two
//!   flags make at most 3 × 2 slots, no hashing per row;
//! * **aggregate arguments** are `+ − ×` over columns and constants with
//!   the decimal rescaling of `expr/` done as integer multiplications. Every
//!   node's range is derived from the block's min/max (interval
//!   arithmetic); when it fits i64 and the node's DECIMAL precision, the
//!   block is computed with plain i64 arithmetic that provably cannot
//!   overflow (a product whose factors fit i32 as one 32 × 32 → 64-bit
//!   multiply), and sums are accumulated in i64 per block (when
//!   `max |value| × rows` fits) and folded into i128 per group.
//!
//! Anything else — a NULL in the block, a range that might overflow, a key
//! with too many combinations, a plain-encoded string — sends that block
//! through the generic path (Arrow decode, [`filter_chunk`](super::filter_chunk), the partial
//! [`Aggregator`]), which computes it exactly or raises the exact error.
//! Both paths emit partial states of the same schema; the response carries
//! both and the compute side merges them like any other partials.
//!
//! The executor is chosen at build time only if every condition, key and
//! argument has a fused form ([`FusedPlan::compile`]); the per-block
//! fallback keeps that choice safe.
//!
//! THE FILES, in the order a block meets them:
//!
//! * `plan.rs`: [`FusedPlan`], the DAG's parts in fused form;
//! * `pred.rs`: the filter's conjuncts as ranges and sets on the stored
//!   integers, their zone-map verdict per block and their kernels;
//! * `node.rs`: the arithmetic of aggregate arguments, its interval bounds
//!   and its vectorized evaluation;
//! * `rows.rs`: rows (row layout, delta, own writes) decoded into the
//!   integers the kernels read;
//! * `source.rs`: a block's columns as the kernels read them, packed or
//!   decoded (the width-specialized loops themselves are in `kernels.rs`
//!   and `codec/pack/int.rs`);
//! * `keys.rs`: the group keys' lookup table and the rows' local slots;
//! * `block.rs`: what a block adds to the groups, per local slot, summed
//!   a chunk of 2048 rows at a time so that the programs' vectors stay in
//!   the core's caches;
//! * `groups.rs`: the per-group totals, the blocks' totals folded into
//!   them, and the partial states they end as;
//! * `core.rs`: a block through those steps, or the generic path;
//! * this file: the executor, which feeds the core the scan's rows and
//!   packs.

mod block;
mod core;
mod groups;
mod keys;
mod node;
mod plan;
mod pred;
mod rows;
mod source;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use self::core::Core;
use super::scan::{KvScanner, TableData};
use super::{BatchExecutor, BatchResult, Chunk};
use crate::aggregate::Aggregator;
use crate::expr::Expr;
use crate::storage::{KeyRange, Storage};
use crate::Result;

pub use plan::FusedPlan;
#[cfg(test)]
use pred::Pred;

/// Scan + filter + partial aggregation in one executor; see the module
/// docs.
pub struct FusedAggExecutor<S: Storage> {
    scanner: KvScanner<S>,
    core: Core,
    /// What a call answers before the last (built once: its empty
    /// arrays cost an allocation per column).
    empty: RecordBatch,
}

impl<S: Storage> FusedAggExecutor<S> {
    /// `columns`: the scan's (column id, type); `conditions`: the filter
    /// (ANDed); `plan`: its fused form, with the partial aggregation's, from
    /// [`FusedPlan::compile`]; `fallback`: that partial aggregation, for the
    /// blocks the fused path cannot take.
    pub fn new(
        storage: S,
        ranges: Vec<KeyRange>,
        read_ts: u64,
        columns: &[(i64, DataType)],
        conditions: Vec<Expr>,
        plan: FusedPlan,
        fallback: Aggregator,
    ) -> Result<Self> {
        let core = Core::new(columns, conditions, plan, fallback)?;
        Ok(FusedAggExecutor {
            scanner: KvScanner::new(storage, ranges, read_ts, false),
            empty: RecordBatch::new_empty(core.schema()),
            core,
        })
    }
}

impl<S: Storage> BatchExecutor for FusedAggExecutor<S> {
    fn schema(&self) -> SchemaRef {
        self.core.schema()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let mut rows = 0usize;
        while rows < scan_rows {
            let Some(data) = self.scanner.next_data()? else {
                break;
            };
            match data {
                TableData::Row(v) => {
                    self.core.row(v)?;
                    rows += 1;
                }
                TableData::Pack(pack, live) => {
                    rows += pack.rows();
                    self.core.pack(&pack, live)?;
                }
            }
        }
        if !self.scanner.is_drained() {
            return Ok(BatchResult {
                chunk: Chunk::new(self.empty.clone()),
                is_drained: false,
            });
        }
        Ok(BatchResult {
            chunk: Chunk::new(self.core.finish()?),
            is_drained: true,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.scanner.collect_summary(s);
        self.core.collect_summary(s);
    }

    /// An aggregation answers for its whole input at once: never resumed.
    fn remaining_ranges(&self) -> crate::Result<Vec<KeyRange>> {
        Ok(vec![])
    }
}

#[cfg(test)]
mod tests;
