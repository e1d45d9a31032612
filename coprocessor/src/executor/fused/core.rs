//! The fused executor's work on blocks ([`Core`]): a pack or a batch of
//! delta rows becomes a block of [`Source`]s, which goes through the fused
//! steps ([`Core::block`]) or, when they cannot take it, the generic
//! executors' filter and partial aggregation ([`Core::generic`]).
//!
//! The fused steps are, in order: the filters (the zone map decides which
//! conjuncts run, they narrow a selection bitmap), the argument programs'
//! bounds, the rows' group slots, the programs over the rows and their
//! sums per slot (2048 rows at a time: `block.rs`), and those totals
//! folded into the groups. Every step that can send a block the
//! generic way comes before the first change to the groups, so a block is
//! counted by exactly one path.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, SchemaRef};
use quarry_proto::coprocessor::ExecSummary;

use super::block::{BlockTotals, CHUNK_ROWS};
use super::groups::Groups;
use super::keys::{KeyLayout, Slots};
use super::node::{Ranges, Val};
use super::plan::{col_ranges, FusedPlan};
use super::pred::{live, Pred};
use super::rows::RowBlock;
use super::source::Source;
use crate::aggregate::Aggregator;
use crate::codec::pack::{decode_columns, is_int_type, ColumnView, PackView};
use crate::executor::kernels::{all_rows_into, indices};
use crate::executor::selection::{filter_chunk, order_conditions};
use crate::executor::Chunk;
use crate::expr::Expr;
use crate::{Error, Result};

/// Delta rows decoded per block.
const ROW_BLOCK: usize = 4096;

/// Why a block left the fused steps before the end.
pub(super) enum Early {
    /// The zone map showed that no row can pass.
    Skipped,
    /// The filters left no row.
    Emptied,
    /// The fused steps cannot take the block: the generic path will.
    Fallback,
    /// Corrupt data, or an overflow.
    Failed(Error),
}

impl From<Error> for Early {
    fn from(e: Error) -> Self {
        Early::Failed(e)
    }
}

/// The rows of a block the filters left, as the later steps read them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Selected {
    /// Rows in the block.
    pub(super) n: usize,
    /// Every row is read, in place; else the rows in `sel`.
    pub(super) dense: bool,
    /// Dense, but filtered: the rows the filters dropped go to a discard
    /// slot (cheaper than a gather once at least half the rows pass).
    pub(super) masked: bool,
    /// Rows read: `n` when dense, else the length of `sel`.
    pub(super) m: usize,
}

/// Scratch buffers reused across blocks.
#[derive(Default)]
pub(super) struct Scratch {
    /// The selected rows, when fewer than half.
    sel: Vec<u32>,
    /// The selection bitmap.
    bits: Vec<u64>,
    /// Per column: its values over the rows read, when a program reads it.
    decoded: Vec<Vec<i64>>,
    /// The programs' vectors of earlier blocks, for the next block's
    /// (a block's fresh vectors, 8 bytes a row, cost malloc's bins and page
    /// faults).
    values: Vec<Vec<i64>>,
    slots: Slots,
}

impl Scratch {
    /// Narrows the block's `n` rows by the `live` conjuncts (a bitmap, 64
    /// rows at a time, each filter skipping words already empty).
    fn select(&mut self, live: &[&Pred], src: &[Source<'_>], n: usize) -> Result<Selected, Early> {
        all_rows_into(&mut self.bits, n);
        for p in live {
            p.narrow(src, n, &mut self.bits)?;
            if self.bits.iter().all(|w| *w == 0) {
                return Err(Early::Emptied);
            }
        }
        let all = live.is_empty();
        let selected: usize = self.bits.iter().map(|w| w.count_ones() as usize).sum();
        self.sel.clear();
        if !all && selected * 2 < n {
            indices(&self.bits, &mut self.sel);
        }
        let masked = !all && selected * 2 >= n;
        let dense = all || masked;
        Ok(Selected {
            n,
            dense,
            masked,
            m: if dense { n } else { self.sel.len() },
        })
    }
}

/// The columns the programs read, over `chunk`, a range of the rows read
/// (`rows`, and `sel` when not dense): a block's decoded values borrowed,
/// a pack's decoded into `bufs`; the others empty.
fn program_inputs<'b>(
    need: &[bool],
    src: &'b [Source<'_>],
    rows: Selected,
    sel: &[u32],
    chunk: Range<usize>,
    bufs: &'b mut Vec<Vec<i64>>,
) -> Vec<&'b [i64]> {
    if bufs.len() < src.len() {
        bufs.resize_with(src.len(), Vec::new);
    }
    for (c, buf) in bufs.iter_mut().enumerate() {
        match (&src[c], rows.dense) {
            _ if !need[c] => {}
            (Source::Values(..), true) => {}
            (s, true) => s.decode_range_into(chunk.clone(), buf),
            (s, false) => s.gather(&sel[chunk.clone()], buf),
        }
    }
    let bufs: &'b Vec<Vec<i64>> = bufs;
    bufs.iter()
        .zip(need)
        .zip(src)
        .map(|((buf, need), s)| match (s, need) {
            (_, false) => &[][..],
            (Source::Values(v, ..), true) if rows.dense => &v[chunk.clone()],
            _ => buf.as_slice(),
        })
        .collect()
}

/// The fused executor's state apart from the scan (so a pack borrowed from
/// the scan can be processed while it is borrowed).
pub(super) struct Core {
    plan: FusedPlan,
    columns: Vec<(i64, DataType)>,
    groups: Groups,
    scratch: Scratch,
    /// The generic path for blocks the fused one cannot take.
    conditions: Vec<Expr>,
    fallback: Aggregator,
    fallback_used: bool,
    /// The rows waiting to be run as a block.
    rows: RowBlock,
    schema: SchemaRef,
    blocks_scanned: u64,
    blocks_skipped: u64,
    blocks_fallback: u64,
}

impl Core {
    /// See [`super::FusedAggExecutor::new`].
    pub(super) fn new(
        columns: &[(i64, DataType)],
        conditions: Vec<Expr>,
        plan: FusedPlan,
        fallback: Aggregator,
    ) -> Result<Self> {
        let rows = RowBlock::new(columns, &plan.used, ROW_BLOCK)?;
        Ok(Core {
            groups: Groups::new(plan.progs.len()),
            plan,
            columns: columns.to_vec(),
            scratch: Scratch::default(),
            conditions: order_conditions(conditions)?,
            schema: fallback.output_schema(),
            fallback,
            fallback_used: false,
            rows,
            blocks_scanned: 0,
            blocks_skipped: 0,
            blocks_fallback: 0,
        })
    }

    pub(super) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub(super) fn collect_summary(&self, s: &mut ExecSummary) {
        s.blocks_skipped += self.blocks_skipped;
        s.blocks_scanned += self.blocks_scanned;
        s.blocks_fallback += self.blocks_fallback;
    }

    /// A delta row: decoded, and run as a block once there are enough.
    pub(super) fn row(&mut self, value: &[u8]) -> Result<()> {
        self.rows.decode(value)?;
        if self.rows.rows() >= ROW_BLOCK {
            self.rows()?;
        }
        Ok(())
    }

    /// After the last block: the partial states of the fused groups, then
    /// of the generic path's.
    pub(super) fn finish(&mut self) -> Result<RecordBatch> {
        self.rows()?;
        let groups = std::mem::replace(&mut self.groups, Groups::new(self.plan.progs.len()));
        let fused = groups.finish(&self.plan, self.schema.clone())?;
        Ok(if self.fallback_used {
            let generic = self.fallback.finish()?;
            concat_batches(&self.schema, &[fused, generic])?
        } else {
            fused
        })
    }

    /// A pack through the fused path, or the generic one; a pack with
    /// rows the snapshot does not see (`live`, see `TableData::Pack`) takes
    /// the generic path over the rows it sees.
    pub(super) fn pack(&mut self, pack: &PackView<'_>, live: Option<&[u64]>) -> Result<()> {
        if let Some(live) = live {
            self.blocks_fallback += 1;
            let mut sel = Vec::new();
            indices(live, &mut sel);
            let cols = self
                .columns
                .iter()
                .map(|(id, dt)| pack.column(*id)?.to_arrow_at(dt, &sel))
                .collect::<Result<Vec<_>>>()?;
            return self.generic(cols, sel.len());
        }
        let n = pack.rows();
        let mut sources = Vec::with_capacity(self.columns.len());
        let mut fusable = true;
        for (i, (id, dt)) in self.columns.iter().enumerate() {
            if !self.plan.used[i] {
                sources.push(Source::Unused);
                continue;
            }
            match pack.column(*id)? {
                ColumnView::Int(v) if !v.has_nulls() && is_int_type(dt) => {
                    sources.push(Source::Packed(v))
                }
                ColumnView::Dict(d) if !d.has_nulls() && *dt == DataType::Utf8 => {
                    sources.push(Source::Dict(d))
                }
                _ => {
                    fusable = false;
                    break;
                }
            }
        }
        if fusable && self.block(&sources, n)? {
            return Ok(());
        }
        self.blocks_fallback += 1;
        let cols = decode_columns(pack, &self.columns)?;
        self.generic(cols, n)
    }

    /// The delta rows decoded so far, through the fused path or the
    /// generic one.
    fn rows(&mut self) -> Result<()> {
        let n = self.rows.rows();
        if n == 0 {
            return Ok(());
        }
        // Out of `self` while the block's sources borrow it.
        let mut block = std::mem::replace(&mut self.rows, RowBlock::empty());
        let result = self.run_rows(&mut block, n);
        block.clear();
        self.rows = block;
        result
    }

    fn run_rows(&mut self, block: &mut RowBlock, n: usize) -> Result<()> {
        let decoded = block.finish()?;
        if let Some(sources) = block.sources(&decoded, &self.plan.used) {
            if self.block(&sources, n)? {
                return Ok(());
            }
        }
        self.blocks_fallback += 1;
        let cols = block.arrays(decoded)?;
        self.generic(cols, n)
    }

    /// The generic path over one block's logical columns.
    fn generic(&mut self, cols: Vec<ArrayRef>, n: usize) -> Result<()> {
        let schema = Arc::new(arrow::datatypes::Schema::new(
            self.columns
                .iter()
                .map(|(id, t)| arrow::datatypes::Field::new(format!("col_{id}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new_with_options(
            schema,
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let mut chunk = Chunk::new(batch);
        filter_chunk(&self.conditions, &mut chunk)?;
        self.fallback
            .update(&chunk.batch, chunk.selection.as_ref())?;
        self.fallback_used = true;
        Ok(())
    }

    /// One block of `n` rows through the fused steps; false if the generic
    /// path must take it instead (the groups are unchanged then).
    fn block(&mut self, src: &[Source<'_>], n: usize) -> Result<bool> {
        match self.fused_steps(src, n) {
            Ok(()) | Err(Early::Emptied) => self.blocks_scanned += 1,
            Err(Early::Skipped) => self.blocks_skipped += 1,
            Err(Early::Fallback) => return Ok(false),
            Err(Early::Failed(e)) => return Err(e),
        }
        Ok(true)
    }

    /// The fused steps over one block (see the module docs).
    fn fused_steps(&mut self, src: &[Source<'_>], n: usize) -> Result<(), Early> {
        let Core {
            plan,
            groups,
            scratch: sc,
            ..
        } = self;
        // 1. Filters: decided per block from the zone map, then selecting.
        let live = live(&plan.preds, src)?;
        let rows = sc.select(&live, src, n)?;
        // 2. The argument programs' bounds (no state changes before).
        let cols = col_ranges(src);
        let bounds = plan.prog_bounds(&cols).ok_or(Early::Fallback)?;
        // 3. Group slots of the rows: a lookup table over the keys' codes.
        let layout = KeyLayout::new(&plan.keys, src, rows, &sc.sel)?;
        let locals = sc
            .slots
            .assign(&layout, &plan.keys, src, rows, &sc.bits, &sc.sel)?;
        // 4. The programs over the rows, a chunk at a time, into the
        // block's totals per slot (see `block.rs`).
        let mut need = vec![false; src.len()];
        for p in &plan.progs {
            p.visit_columns(&mut |c| need[c] = true);
        }
        let slots = &sc.slots;
        let mut totals = BlockTotals::new(plan, locals, &bounds, &slots.counts);
        let ranges = Ranges {
            cols: &cols,
            progs: &bounds,
        };
        for lo in (0..rows.m).step_by(CHUNK_ROWS) {
            let chunk = lo..(lo + CHUNK_ROWS).min(rows.m);
            let inputs = program_inputs(&need, src, rows, &sc.sel, chunk.clone(), &mut sc.decoded);
            let mut values: Vec<Val> = Vec::with_capacity(plan.progs.len());
            for p in &plan.progs {
                let v = p.eval(&inputs, &values, &mut sc.values, ranges);
                values.push(v);
            }
            let local = if locals.single {
                &[][..]
            } else {
                &slots.local[chunk.clone()]
            };
            totals.add(&values, local, chunk.len());
            sc.values.extend(values.into_iter().filter_map(|v| match v {
                Val::Owned(v) => Some(v),
                _ => None,
            }));
        }
        // 5. The block's totals into the groups.
        let of_keys = groups.slots_for(&plan.keys, &layout, src, &slots.local_keys)?;
        let group_of = slots.group_per_slot(of_keys, locals);
        totals.fold(groups, &group_of, &slots.counts)?;
        Ok(())
    }
}
