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
//!   overflow, and sums are accumulated in i64 per block (when
//!   `max |value| × rows` fits) and folded into i128 per group.
//!
//! Anything else — a NULL in the block, a range that might overflow, a key
//! with too many combinations, a plain-encoded string — sends that block
//! through the generic path (Arrow decode, [`filter_chunk`], the partial
//! [`Aggregator`]), which computes it exactly or raises the exact error.
//! Both paths emit partial states of the same schema; the response carries
//! both and the compute side merges them like any other partials.
//!
//! The executor is chosen at build time only if every condition, key and
//! argument has a fused form ([`FusedPlan::compile`]); the per-block
//! fallback keeps that choice safe.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Decimal128Array, Int64Array, RecordBatch,
    RecordBatchOptions, StringArray,
};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Int64Type, SchemaRef};
use quarry_proto::coprocessor::{AggKind, ExecSummary};

use super::kernels::{all_rows, and_masks, and_packed, and_range_packed, compare_range, indices};
use super::scan::{KvScanner, TableData};
use super::selection::filter_chunk;
use super::{BatchExecutor, BatchResult, Chunk};
use crate::aggregate::{AggregateFunction, Aggregator};
use crate::codec::pack::{decode_columns, is_int_type, ColumnView, DictView, IntView, PackView};
use crate::codec::row::RowDecoder;
use crate::expr::{ArithOp, CmpOp, Expr, LogicOp, ScalarValue};
use crate::storage::{KeyRange, Storage};
use crate::types::{fits_precision, MAX_DECIMAL_PRECISION, POW10};
use crate::{internal, invalid_input, overflow, Result};

/// |value| must stay below this to be an i64 (and leave room to negate).
const I64_LIMIT: i128 = i64::MAX as i128;
/// Most slots a block's group lookup table may have.
const MAX_LUT: usize = 1 << 16;
/// Most values an integer group key may span in one block.
const MAX_INT_KEY_SPAN: i64 = 1 << 12;
/// Delta rows decoded per block.
const ROW_BLOCK: usize = 4096;

// ------------------------------------------------------------------ programs

/// An integer expression over scan columns: the unscaled value of a DECIMAL
/// or BIGINT expression.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    op: Op,
    /// |value| must be below this (10^precision for a DECIMAL node).
    limit: i128,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Col(usize),
    Const(i64),
    Add(Box<Node>, Box<Node>),
    Sub(Box<Node>, Box<Node>),
    Mul(Box<Node>, Box<Node>),
    Neg(Box<Node>),
}

fn decimal_limit(p: u8) -> i128 {
    if p as usize >= POW10.len() {
        i128::MAX
    } else {
        POW10[p as usize].min(I64_LIMIT + 1)
    }
}

fn scale_of(dt: &DataType) -> Option<i8> {
    match dt {
        DataType::Int64 => Some(0),
        DataType::Decimal128(_, s) => Some(*s),
        _ => None,
    }
}

impl Node {
    fn constant(v: i128) -> Option<Node> {
        let v = i64::try_from(v).ok()?;
        Some(Node {
            op: Op::Const(v),
            limit: I64_LIMIT + 1,
        })
    }

    /// Multiplies by 10^k (a rescale), folding constants.
    fn rescale(self, k: i32, limit: i128) -> Option<Node> {
        if k == 0 {
            return Some(self);
        }
        if !(0..=18).contains(&k) {
            return None;
        }
        Node::binary(
            ArithOp::Multiply,
            self,
            Node::constant(POW10[k as usize])?,
            limit,
        )
    }

    fn binary(op: ArithOp, a: Node, b: Node, limit: i128) -> Option<Node> {
        if let (Op::Const(x), Op::Const(y)) = (&a.op, &b.op) {
            let (x, y) = (*x as i128, *y as i128);
            let v = match op {
                ArithOp::Plus => x + y,
                ArithOp::Minus => x - y,
                ArithOp::Multiply => x * y,
                ArithOp::Divide => return None,
            };
            if v.abs() < limit {
                return Node::constant(v);
            }
            return None;
        }
        let (a, b) = (Box::new(a), Box::new(b));
        let op = match op {
            ArithOp::Plus => Op::Add(a, b),
            ArithOp::Minus => Op::Sub(a, b),
            ArithOp::Multiply => Op::Mul(a, b),
            ArithOp::Divide => return None,
        };
        Some(Node { op, limit })
    }

    /// The fused form of an integer-valued expression, if it has one.
    fn compile(e: &Expr) -> Option<Node> {
        match e {
            Expr::Column { index, data_type } if is_int_type(data_type) => Some(Node {
                op: Op::Col(*index),
                limit: I64_LIMIT + 1,
            }),
            Expr::Literal(ScalarValue::Int64(v)) => Node::constant(*v as i128),
            Expr::Literal(ScalarValue::Decimal(v, ..)) => Node::constant(*v),
            Expr::Literal(ScalarValue::Date(v)) => Node::constant(*v as i128),
            Expr::Cast { expr, to } => {
                let from = expr.data_type();
                match (&from, to) {
                    (a, b) if a == b => Node::compile(expr),
                    (DataType::Date32, DataType::Date32) => Node::compile(expr),
                    (_, DataType::Decimal128(p, s)) => {
                        let s1 = scale_of(&from)?;
                        let limit = decimal_limit(*p);
                        let mut n = Node::compile(expr)?;
                        if *s as i32 == s1 as i32 {
                            // Same scale: the value must still fit the
                            // (possibly narrower) precision.
                            n.limit = n.limit.min(limit);
                            Some(n)
                        } else {
                            n.rescale(*s as i32 - s1 as i32, limit)
                        }
                    }
                    _ => None,
                }
            }
            Expr::Arith {
                op,
                left,
                right,
                data_type,
            } => {
                let (l, r) = (Node::compile(left)?, Node::compile(right)?);
                match data_type {
                    DataType::Int64 => Node::binary(*op, l, r, I64_LIMIT + 1),
                    DataType::Decimal128(p, s) => {
                        let limit = decimal_limit(*p);
                        let (s1, s2) =
                            (scale_of(&left.data_type())?, scale_of(&right.data_type())?);
                        match op {
                            ArithOp::Plus | ArithOp::Minus => {
                                let l = l.rescale(*s as i32 - s1 as i32, limit)?;
                                let r = r.rescale(*s as i32 - s2 as i32, limit)?;
                                Node::binary(*op, l, r, limit)
                            }
                            ArithOp::Multiply => Node::binary(*op, l, r, limit),
                            ArithOp::Divide => None,
                        }
                    }
                    _ => None,
                }
            }
            Expr::Negate(inner) => {
                let n = Node::compile(inner)?;
                let limit = n.limit;
                Some(Node {
                    op: Op::Neg(Box::new(n)),
                    limit,
                })
            }
            _ => None,
        }
    }

    fn visit_columns(&self, f: &mut impl FnMut(usize)) {
        match &self.op {
            Op::Col(c) => f(*c),
            Op::Const(_) => {}
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => {
                a.visit_columns(f);
                b.visit_columns(f);
            }
            Op::Neg(a) => a.visit_columns(f),
        }
    }

    /// The node's value range given each column's range; None if some node
    /// may leave i64 or its precision.
    fn bounds(&self, cols: &[(i64, i64)]) -> Option<(i128, i128)> {
        let (lo, hi) = match &self.op {
            Op::Col(c) => {
                let (lo, hi) = cols[*c];
                (lo as i128, hi as i128)
            }
            Op::Const(v) => (*v as i128, *v as i128),
            Op::Add(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols)?, b.bounds(cols)?);
                (al + bl, ah + bh)
            }
            Op::Sub(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols)?, b.bounds(cols)?);
                (al - bh, ah - bl)
            }
            Op::Mul(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols)?, b.bounds(cols)?);
                let p = [al * bl, al * bh, ah * bl, ah * bh];
                (*p.iter().min()?, *p.iter().max()?)
            }
            Op::Neg(a) => {
                let (l, h) = a.bounds(cols)?;
                (-h, -l)
            }
        };
        let limit = self.limit.min(I64_LIMIT + 1);
        (lo.abs() < limit && hi.abs() < limit).then_some((lo, hi))
    }

    /// Evaluates over `cols` (each column's values, all the same length
    /// `n`). Bounds were checked, so wrapping arithmetic never wraps.
    fn eval<'a>(&self, cols: &[&'a [i64]]) -> Val<'a> {
        match &self.op {
            Op::Col(c) => Val::Slice(cols[*c]),
            Op::Const(v) => Val::Const(*v),
            Op::Add(a, b) => binary(a.eval(cols), b.eval(cols), i64::wrapping_add),
            Op::Sub(a, b) => binary(a.eval(cols), b.eval(cols), i64::wrapping_sub),
            Op::Mul(a, b) => binary(a.eval(cols), b.eval(cols), i64::wrapping_mul),
            Op::Neg(a) => binary(Val::Const(0), a.eval(cols), i64::wrapping_sub),
        }
    }
}

enum Val<'a> {
    Slice(&'a [i64]),
    Owned(Vec<i64>),
    Const(i64),
}

impl Val<'_> {
    fn values(&self, n: usize) -> std::borrow::Cow<'_, [i64]> {
        match self {
            Val::Slice(s) => std::borrow::Cow::Borrowed(s),
            Val::Owned(v) => std::borrow::Cow::Borrowed(v),
            Val::Const(c) => std::borrow::Cow::Owned(vec![*c; n]),
        }
    }
}

/// One arithmetic node over whole vectors; generic over `f` so each
/// operator gets its own (vectorized) loops.
#[inline]
fn binary<'a>(a: Val<'a>, b: Val<'a>, f: impl Fn(i64, i64) -> i64 + Copy) -> Val<'a> {
    match (a, b) {
        (Val::Const(x), Val::Const(y)) => Val::Const(f(x, y)),
        (Val::Owned(mut v), Val::Const(y)) => {
            v.iter_mut().for_each(|x| *x = f(*x, y));
            Val::Owned(v)
        }
        (Val::Slice(s), Val::Const(y)) => Val::Owned(s.iter().map(|x| f(*x, y)).collect()),
        (Val::Const(x), Val::Owned(mut v)) => {
            v.iter_mut().for_each(|y| *y = f(x, *y));
            Val::Owned(v)
        }
        (Val::Const(x), Val::Slice(s)) => Val::Owned(s.iter().map(|y| f(x, *y)).collect()),
        (Val::Owned(mut v), b) => {
            let b = b.values(v.len());
            v.iter_mut().zip(b.iter()).for_each(|(x, y)| *x = f(*x, *y));
            Val::Owned(v)
        }
        (a, Val::Owned(mut v)) => {
            let a = a.values(v.len());
            v.iter_mut().zip(a.iter()).for_each(|(y, x)| *y = f(*x, *y));
            Val::Owned(v)
        }
        (Val::Slice(a), Val::Slice(b)) => {
            Val::Owned(a.iter().zip(b).map(|(x, y)| f(*x, *y)).collect())
        }
    }
}

// ------------------------------------------------------------------ filters

#[derive(Debug, Clone, PartialEq)]
enum Pred {
    /// lo <= col <= hi
    Range {
        col: usize,
        lo: i64,
        hi: i64,
    },
    NotEq {
        col: usize,
        v: i64,
    },
    IntIn {
        col: usize,
        set: Vec<i64>,
        negated: bool,
    },
    StrIn {
        col: usize,
        set: Vec<Vec<u8>>,
        negated: bool,
    },
    Const(bool),
    /// `col IS [NOT] NULL`: a constant in fused blocks, which hold no NULL
    /// (but the column is read, so a block with NULLs goes the generic way).
    NullCheck {
        col: usize,
        negated: bool,
    },
}

/// A column reference on one side of a comparison: the column, times
/// 10^k when an upscaling cast wraps it.
fn column_ref(e: &Expr) -> Option<(usize, i128, DataType)> {
    match e {
        Expr::Column { index, data_type } => Some((*index, 1, data_type.clone())),
        Expr::Cast { expr, to } => {
            let (c, f, dt) = column_ref(expr)?;
            let from = expr.data_type();
            match (&from, to) {
                (a, b) if a == b => Some((c, f, dt)),
                (_, DataType::Decimal128(p, s)) => {
                    let k = *s as i32 - scale_of(&from)? as i32;
                    if !(0..=18).contains(&k) {
                        return None;
                    }
                    // A cast that could overflow its precision raises an
                    // error on the generic path: leave those to it.
                    let int_digits = match &from {
                        DataType::Decimal128(p1, s1) => *p1 as i32 - *s1 as i32,
                        _ => 19,
                    };
                    if (*p as i32 - *s as i32) < int_digits {
                        return None;
                    }
                    Some((c, f * POW10[k as usize], dt))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn literal_int(v: &ScalarValue) -> Option<i128> {
    match v {
        ScalarValue::Int64(x) => Some(*x as i128),
        ScalarValue::Decimal(x, ..) => Some(*x),
        ScalarValue::Date(x) => Some(*x as i128),
        _ => None,
    }
}

impl Pred {
    /// Adds the fused form of `e` (ANDed) to `out`; false if it has none.
    fn compile(e: &Expr, out: &mut Vec<Pred>) -> bool {
        match e {
            Expr::Logic {
                op: LogicOp::And,
                left,
                right,
            } => Pred::compile(left, out) && Pred::compile(right, out),
            Expr::Literal(ScalarValue::Boolean(b)) => {
                out.push(Pred::Const(*b));
                true
            }
            Expr::Literal(ScalarValue::Null(_)) => {
                out.push(Pred::Const(false));
                true
            }
            Expr::Compare { op, left, right } => {
                let (op, colside, lit) = match (left.as_ref(), right.as_ref()) {
                    (c, Expr::Literal(v)) => (*op, c, v),
                    (Expr::Literal(v), c) => (op.flip(), c, v),
                    _ => return false,
                };
                if lit.is_null() {
                    out.push(Pred::Const(false));
                    return true;
                }
                if let (Expr::Column { index, data_type }, ScalarValue::Utf8(s)) = (colside, lit) {
                    if *data_type != DataType::Utf8 || !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                        return false;
                    }
                    out.push(Pred::StrIn {
                        col: *index,
                        set: vec![s.as_bytes().to_vec()],
                        negated: op == CmpOp::Ne,
                    });
                    return true;
                }
                let Some((col, f, dt)) = column_ref(colside) else {
                    return false;
                };
                let Some(l) = literal_int(lit) else {
                    return false;
                };
                if !is_int_type(&dt) {
                    return false;
                }
                if op == CmpOp::Ne {
                    // A value that cannot be equal still rejects NULL.
                    out.push(match compare_range(CmpOp::Eq, l, f) {
                        Some((v, _)) => Pred::NotEq { col, v },
                        None => Pred::NullCheck { col, negated: true },
                    });
                    return true;
                }
                out.push(match compare_range(op, l, f) {
                    Some((lo, hi)) => Pred::Range { col, lo, hi },
                    None => Pred::Const(false),
                });
                true
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let has_null = list.iter().any(|v| v.is_null());
                if *negated && has_null {
                    // x NOT IN (.., NULL) is never true.
                    out.push(Pred::Const(false));
                    return true;
                }
                let values = list.iter().filter(|v| !v.is_null());
                if let Expr::Column {
                    index,
                    data_type: DataType::Utf8,
                } = expr.as_ref()
                {
                    let set: Option<Vec<Vec<u8>>> = values
                        .map(|v| match v {
                            ScalarValue::Utf8(s) => Some(s.as_bytes().to_vec()),
                            _ => None,
                        })
                        .collect();
                    let Some(set) = set else { return false };
                    out.push(Pred::StrIn {
                        col: *index,
                        set,
                        negated: *negated,
                    });
                    return true;
                }
                let Some((col, f, dt)) = column_ref(expr) else {
                    return false;
                };
                if !is_int_type(&dt) {
                    return false;
                }
                let mut set = Vec::new();
                for v in values {
                    let Some(l) = literal_int(v) else {
                        return false;
                    };
                    // col × f = l has a solution only if f divides l.
                    if let Some((x, _)) = compare_range(CmpOp::Eq, l, f) {
                        set.push(x);
                    }
                }
                set.sort_unstable();
                set.dedup();
                out.push(Pred::IntIn {
                    col,
                    set,
                    negated: *negated,
                });
                true
            }
            Expr::IsNull { expr, negated } => {
                // Fused blocks have no NULLs (a block with any goes the
                // generic way), so this is a constant there.
                let Expr::Column { index, .. } = expr.as_ref() else {
                    return false;
                };
                out.push(Pred::NullCheck {
                    col: *index,
                    negated: *negated,
                });
                true
            }
            _ => false,
        }
    }
}

// ------------------------------------------------------------------ the plan

#[derive(Debug, Clone, PartialEq)]
enum KeyCol {
    Int { col: usize, data_type: DataType },
    Str { col: usize },
}

/// What one aggregate reads from the per-group states.
#[derive(Debug, Clone, PartialEq)]
enum AggState {
    Count,
    Sum { prog: usize },
    Avg { prog: usize },
    Min { prog: usize },
    Max { prog: usize },
}

/// A DAG's aggregation in fused form.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedPlan {
    preds: Vec<Pred>,
    keys: Vec<KeyCol>,
    /// Distinct argument programs.
    progs: Vec<Node>,
    aggs: Vec<(AggregateFunction, AggState)>,
    /// Scan columns any part reads.
    used: Vec<bool>,
}

impl FusedPlan {
    /// The fused form of `conditions` + `group_by` + `aggs` over scan
    /// `columns`, or None when some part has none.
    pub fn compile(
        columns: &[(i64, DataType)],
        conditions: &[Expr],
        group_by: &[Expr],
        aggs: &[(AggregateFunction, Option<Expr>)],
    ) -> Option<FusedPlan> {
        let mut preds = Vec::new();
        for c in conditions {
            if !Pred::compile(c, &mut preds) {
                return None;
            }
        }
        let keys = group_by
            .iter()
            .map(|k| match k {
                Expr::Column { index, data_type } if is_int_type(data_type) => Some(KeyCol::Int {
                    col: *index,
                    data_type: data_type.clone(),
                }),
                Expr::Column {
                    index,
                    data_type: DataType::Utf8,
                } => Some(KeyCol::Str { col: *index }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let mut progs: Vec<Node> = Vec::new();
        let mut states = Vec::new();
        // Columns read only to be sure they hold no NULL (COUNT(x)).
        let mut checked: Vec<usize> = Vec::new();
        for (f, arg) in aggs {
            let mut prog = || -> Option<usize> {
                let node = Node::compile(arg.as_ref()?)?;
                Some(match progs.iter().position(|p| *p == node) {
                    Some(i) => i,
                    None => {
                        progs.push(node);
                        progs.len() - 1
                    }
                })
            };
            let state = match f.kind {
                AggKind::CountStar => AggState::Count,
                // No NULLs in fused blocks: COUNT(x) counts rows.
                AggKind::Count => match arg {
                    Some(Expr::Column { index, .. }) => {
                        checked.push(*index);
                        AggState::Count
                    }
                    _ => return None,
                },
                AggKind::Sum => AggState::Sum { prog: prog()? },
                AggKind::Avg => AggState::Avg { prog: prog()? },
                AggKind::Min => AggState::Min { prog: prog()? },
                AggKind::Max => AggState::Max { prog: prog()? },
                AggKind::AggUnspecified => return None,
            };
            if matches!(f.arg_type, Some(DataType::Float64)) {
                return None;
            }
            states.push((f.clone(), state));
        }
        let mut used = vec![false; columns.len()];
        for p in &preds {
            match p {
                Pred::Range { col, .. }
                | Pred::NotEq { col, .. }
                | Pred::IntIn { col, .. }
                | Pred::StrIn { col, .. }
                | Pred::NullCheck { col, .. } => *used.get_mut(*col)? = true,
                Pred::Const(_) => {}
            }
        }
        for c in checked {
            *used.get_mut(c)? = true;
        }
        for k in &keys {
            match k {
                KeyCol::Int { col, .. } | KeyCol::Str { col } => *used.get_mut(*col)? = true,
            }
        }
        let mut ok = true;
        for p in &progs {
            p.visit_columns(&mut |c| match used.get_mut(c) {
                Some(u) => *u = true,
                None => ok = false,
            });
        }
        if !ok {
            return None;
        }
        // Every read column must be an integer or a string.
        for (i, (_, dt)) in columns.iter().enumerate() {
            if used[i] && !is_int_type(dt) && *dt != DataType::Utf8 {
                return None;
            }
        }
        Some(FusedPlan {
            preds,
            keys,
            progs,
            aggs: states,
            used,
        })
    }
}

// ------------------------------------------------------------------ blocks

/// One column of a block, as the fused kernels read it.
enum Source<'a> {
    /// A pack's frame-of-reference integers.
    Packed(IntView<'a>),
    /// Decoded values with their min and max.
    Values(&'a [i64], i64, i64),
    /// A pack's dictionary-coded strings.
    Dict(DictView<'a>),
    /// Decoded strings.
    Strings(&'a StringArray),
    /// Not read by the plan.
    Unused,
}

impl Source<'_> {
    fn range(&self) -> Option<(i64, i64)> {
        match self {
            Source::Packed(v) => Some((v.min, v.max)),
            Source::Values(_, lo, hi) => Some((*lo, *hi)),
            _ => None,
        }
    }

    /// The values at `sel` into `buf`.
    fn gather(&self, sel: &[u32], buf: &mut Vec<i64>) {
        buf.clear();
        match self {
            Source::Values(v, ..) => buf.extend(sel.iter().map(|i| v[*i as usize])),
            // Past about one selected row per cache line, one sequential
            // pass (which the prefetcher streams) beats a miss per row.
            Source::Packed(v) if sel.len() * 64 >= v.len() * v.width() && v.width() > 0 => {
                let mut all = Vec::with_capacity(v.len());
                v.decode_into(&mut all);
                buf.extend(sel.iter().map(|i| all[*i as usize]));
            }
            Source::Packed(v) => v.gather_into(sel, buf),
            _ => {}
        }
    }
}

/// [`and_masks`] for `lo <= value <= hi` (on a pack, in the stored frame:
/// see [`and_range_packed`]).
#[inline(always)]
fn and_range(src: &Source<'_>, n: usize, bits: &mut [u64], lo: i64, hi: i64) {
    match src {
        Source::Packed(v) => and_range_packed(v, n, bits, lo, hi),
        _ => {
            let span = hi.wrapping_sub(lo) as u64;
            and_int(src, n, bits, move |x| (x.wrapping_sub(lo) as u64) <= span)
        }
    }
}

/// [`and_masks`] over an integer column, `keep` deciding on the value (on
/// a pack, one loop per stored width: see [`and_packed`]).
#[inline(always)]
fn and_int(src: &Source<'_>, n: usize, bits: &mut [u64], keep: impl Fn(i64) -> bool) {
    match src {
        Source::Packed(v) => and_packed(v, n, bits, keep),
        Source::Values(v, ..) => and_masks(n, bits, |base, bytes| {
            for (b, x) in bytes.iter_mut().zip(&v[base..]) {
                *b = keep(*x) as u8;
            }
        }),
        _ => bits.fill(0),
    }
}

/// A decoded string key's per-row codes and the strings they stand for.
type StrCodes<'a> = (Vec<u32>, Vec<&'a [u8]>);

/// Per-group totals across blocks.
#[derive(Default)]
struct Groups {
    keys: Vec<Vec<KeyValue>>,
    index: HashMap<Vec<KeyValue>, u32>,
    counts: Vec<i64>,
    /// Per program: per group.
    sums: Vec<Vec<i128>>,
    mins: Vec<Vec<i64>>,
    maxs: Vec<Vec<i64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum KeyValue {
    Int(i64),
    Bytes(Vec<u8>),
}

impl Groups {
    fn new(progs: usize) -> Self {
        Groups {
            sums: vec![Vec::new(); progs],
            mins: vec![Vec::new(); progs],
            maxs: vec![Vec::new(); progs],
            ..Default::default()
        }
    }

    fn slot(&mut self, key: Vec<KeyValue>) -> u32 {
        if let Some(s) = self.index.get(&key) {
            return *s;
        }
        let s = self.keys.len() as u32;
        self.keys.push(key.clone());
        self.index.insert(key, s);
        self.counts.push(0);
        for v in &mut self.sums {
            v.push(0);
        }
        for v in &mut self.mins {
            v.push(i64::MAX);
        }
        for v in &mut self.maxs {
            v.push(i64::MIN);
        }
        s
    }
}

/// Scratch buffers reused across blocks.
#[derive(Default)]
struct Scratch {
    sel: Vec<u32>,
    bits: Vec<u64>,
    decoded: Vec<Vec<i64>>,
    tmp: Vec<i64>,
    idx: Vec<u32>,
    keep: Vec<bool>,
    lut: Vec<u32>,
    local: Vec<u32>,
    local_keys: Vec<u32>,
}

/// The fused executor's state apart from the scan (so a pack borrowed from
/// the scan can be processed while it is borrowed).
struct Core {
    plan: FusedPlan,
    columns: Vec<(i64, DataType)>,
    groups: Groups,
    scratch: Scratch,
    /// The generic path for blocks the fused one cannot take.
    conditions: Vec<Expr>,
    fallback: Aggregator,
    fallback_used: bool,
    decoder: RowDecoder,
    schema: SchemaRef,
    blocks_scanned: u64,
    blocks_skipped: u64,
    blocks_fallback: u64,
}

enum Outcome {
    Done,
    Fallback,
}

impl Core {
    /// A pack through the fused path, or the generic one.
    fn pack(&mut self, pack: &PackView<'_>) -> Result<()> {
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
        if fusable {
            match self.block(&sources, n)? {
                Outcome::Done => return Ok(()),
                Outcome::Fallback => {}
            }
        }
        self.blocks_fallback += 1;
        let cols = decode_columns(pack, &self.columns)?;
        self.generic(cols, n)
    }

    /// The delta rows decoded so far, through the fused path or the
    /// generic one.
    fn rows(&mut self) -> Result<()> {
        let n = self.decoder.rows();
        if n == 0 {
            return Ok(());
        }
        let cols = self.decoder.finish()?;
        // Integer columns as i64, checking for NULLs.
        let mut ints: Vec<Option<(Vec<i64>, i64, i64)>> = Vec::with_capacity(cols.len());
        let mut fusable = true;
        for (i, c) in cols.iter().enumerate() {
            if !self.plan.used[i] {
                ints.push(None);
                continue;
            }
            if c.null_count() > 0 {
                fusable = false;
                break;
            }
            if c.data_type() == &DataType::Utf8 {
                ints.push(None);
                continue;
            }
            let v: Option<Vec<i64>> = match c.data_type() {
                DataType::Int64 => Some(c.as_primitive::<Int64Type>().values().to_vec()),
                DataType::Date32 => Some(
                    c.as_primitive::<Date32Type>()
                        .values()
                        .iter()
                        .map(|x| *x as i64)
                        .collect(),
                ),
                DataType::Decimal128(..) => c
                    .as_primitive::<Decimal128Type>()
                    .values()
                    .iter()
                    .map(|x| i64::try_from(*x).ok())
                    .collect(),
                _ => None,
            };
            match v {
                Some(v) => {
                    let lo = v.iter().copied().min().unwrap_or(0);
                    let hi = v.iter().copied().max().unwrap_or(0);
                    ints.push(Some((v, lo, hi)));
                }
                None => {
                    fusable = false;
                    break;
                }
            }
        }
        if fusable {
            let sources: Vec<Source> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| match ints.get(i) {
                    Some(Some((v, lo, hi))) => Source::Values(v, *lo, *hi),
                    _ if self.plan.used[i] => Source::Strings(c.as_string::<i32>()),
                    _ => Source::Unused,
                })
                .collect();
            if let Outcome::Done = self.block(&sources, n)? {
                return Ok(());
            }
        }
        self.blocks_fallback += 1;
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

    /// The fused kernels over one block of `n` rows.
    fn block(&mut self, src: &[Source<'_>], n: usize) -> Result<Outcome> {
        let plan = &self.plan;
        let sc = &mut self.scratch;
        // 1. Filters: decide per block from the zone map, then select.
        let mut live: Vec<(u64, &Pred)> = Vec::new();
        for p in &plan.preds {
            let (col, lo, hi) = match p {
                Pred::Const(true) | Pred::NullCheck { negated: true, .. } => continue,
                Pred::Const(false) | Pred::NullCheck { negated: false, .. } => {
                    self.blocks_skipped += 1;
                    return Ok(Outcome::Done);
                }
                Pred::Range { col, lo, hi } => (*col, *lo, *hi),
                Pred::NotEq { .. } | Pred::IntIn { .. } | Pred::StrIn { .. } => {
                    live.push((u64::MAX, p));
                    continue;
                }
            };
            let Some((min, max)) = src[col].range() else {
                return Ok(Outcome::Fallback);
            };
            if max < lo || min > hi {
                self.blocks_skipped += 1;
                return Ok(Outcome::Done);
            }
            if lo <= min && max <= hi {
                continue;
            }
            // Estimated share of rows kept, out of 2^20, assuming an even
            // spread over [min, max].
            let span = (max as i128 - min as i128 + 1) as f64;
            let kept = (hi.min(max) as i128 - lo.max(min) as i128 + 1) as f64;
            live.push((((kept / span) * (1 << 20) as f64) as u64, p));
        }
        live.sort_by_key(|(est, _)| *est);
        // The rows still selected, as a bitmap: each filter narrows it 64
        // rows at a time in a vectorized pass, skipping words already empty.
        sc.bits = all_rows(n);
        let all = live.is_empty();
        for (_, p) in &live {
            let bits = &mut sc.bits;
            match p {
                Pred::StrIn { col, set, negated } => match &src[*col] {
                    Source::Dict(d) => {
                        let accept: Vec<u8> = (0..d.entries())
                            .map(|k| (set.iter().any(|s| s == d.entry(k)) != *negated) as u8)
                            .collect();
                        let codes = d.codes;
                        and_masks(n, bits, |base, bytes| {
                            for (b, c) in bytes.iter_mut().zip(&codes[base..]) {
                                *b = accept[*c as usize];
                            }
                        });
                    }
                    Source::Strings(a) => and_masks(n, bits, |base, bytes| {
                        for (j, b) in bytes.iter_mut().enumerate() {
                            let v = a.value(base + j).as_bytes();
                            *b = (set.iter().any(|s| s.as_slice() == v) != *negated) as u8;
                        }
                    }),
                    _ => return Ok(Outcome::Fallback),
                },
                Pred::Range { col, lo, hi } => and_range(&src[*col], n, bits, *lo, *hi),
                Pred::NotEq { col, v: x } => {
                    let x = *x;
                    and_int(&src[*col], n, bits, move |v| v != x);
                }
                Pred::IntIn { col, set, negated } => {
                    let neg = *negated;
                    and_int(&src[*col], n, bits, |v| {
                        set.binary_search(&v).is_ok() != neg
                    });
                }
                Pred::Const(_) | Pred::NullCheck { .. } => {
                    return Err(internal!("a constant filter reached the kernels"))
                }
            }
            if sc.bits.iter().all(|w| *w == 0) {
                self.blocks_scanned += 1;
                return Ok(Outcome::Done);
            }
        }
        let selected: usize = sc.bits.iter().map(|w| w.count_ones() as usize).sum();
        sc.sel.clear();
        if !all && selected * 2 < n {
            indices(&sc.bits, &mut sc.sel);
        }
        let masked = !all && selected * 2 >= n;
        let dense = all || masked;
        let m = if dense { n } else { sc.sel.len() };

        // 2. Argument programs: bounds first (no state changes before).
        let ranges: Vec<(i64, i64)> = src.iter().map(|s| s.range().unwrap_or((0, 0))).collect();
        let mut prog_bounds = Vec::with_capacity(plan.progs.len());
        for p in &plan.progs {
            match p.bounds(&ranges) {
                Some(b) => prog_bounds.push(b),
                None => return Ok(Outcome::Fallback),
            }
        }

        // 3. Group slots of the rows: a lookup table over the keys' codes.
        let nkeys = plan.keys.len();
        let mut strides = Vec::with_capacity(nkeys);
        let mut cards = Vec::with_capacity(nkeys);
        // Per key: the strings behind a Strings source's codes.
        let mut str_codes: Vec<Option<StrCodes>> = Vec::with_capacity(nkeys);
        let mut total = 1usize;
        for k in &plan.keys {
            let (card, sc_codes) = match k {
                KeyCol::Int { col, .. } => {
                    let Some((lo, hi)) = src[*col].range() else {
                        return Ok(Outcome::Fallback);
                    };
                    let span = hi as i128 - lo as i128;
                    if !(0..MAX_INT_KEY_SPAN as i128).contains(&span) {
                        return Ok(Outcome::Fallback);
                    }
                    ((span + 1) as usize, None)
                }
                KeyCol::Str { col } => match &src[*col] {
                    Source::Dict(d) => (d.entries(), None),
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
                        (names.len(), Some((codes, names)))
                    }
                    _ => return Ok(Outcome::Fallback),
                },
            };
            strides.push(total);
            total = total.saturating_mul(card.max(1));
            cards.push(card);
            str_codes.push(sc_codes);
        }
        if total > MAX_LUT {
            return Ok(Outcome::Fallback);
        }
        if masked {
            sc.keep.clear();
            sc.keep
                .extend((0..n).map(|j| (sc.bits[j / 64] >> (j % 64)) & 1 != 0));
        }
        sc.local.clear();
        sc.local_keys.clear();
        // Local slots 0..nreal are groups; with a mask, slot nreal discards.
        let nreal;
        if nkeys > 0 {
            // Each key's code for the rows, added column by column into one
            // lookup-table index.
            sc.idx.clear();
            sc.idx.resize(m, 0);
            for (q, k) in plan.keys.iter().enumerate() {
                let stride = strides[q] as u32;
                let idx = &mut sc.idx;
                match k {
                    KeyCol::Int { col, .. } => {
                        let (lo, hi) = src[*col].range().expect("checked");
                        let mut vals = std::mem::take(&mut sc.tmp);
                        if dense {
                            let all_rows: Vec<u32> = (0..n as u32).collect();
                            src[*col].gather(&all_rows, &mut vals);
                        } else {
                            src[*col].gather(&sc.sel, &mut vals);
                        }
                        if vals.iter().any(|v| *v < lo || *v > hi) {
                            return Err(invalid_input!(
                                "corrupt pack (a value outside its min/max)"
                            ));
                        }
                        for (x, v) in idx.iter_mut().zip(&vals) {
                            *x += (v - lo) as u32 * stride;
                        }
                        sc.tmp = vals;
                    }
                    KeyCol::Str { col } => match (&src[*col], &str_codes[q]) {
                        (Source::Dict(d), _) => {
                            let codes = d.codes;
                            if dense {
                                for (x, c) in idx.iter_mut().zip(codes) {
                                    *x += *c as u32 * stride;
                                }
                            } else {
                                for (x, i) in idx.iter_mut().zip(&sc.sel) {
                                    *x += codes[*i as usize] as u32 * stride;
                                }
                            }
                        }
                        (_, Some((codes, _))) => {
                            if dense {
                                for (x, c) in idx.iter_mut().zip(codes) {
                                    *x += *c * stride;
                                }
                            } else {
                                for (x, i) in idx.iter_mut().zip(&sc.sel) {
                                    *x += codes[*i as usize] * stride;
                                }
                            }
                        }
                        _ => return Ok(Outcome::Fallback),
                    },
                }
            }
            sc.lut.clear();
            sc.lut.resize(total, u32::MAX);
            sc.local.reserve(m);
            for (j, x) in sc.idx.iter().enumerate() {
                if masked && !sc.keep[j] {
                    sc.local.push(u32::MAX);
                    continue;
                }
                let slot = &mut sc.lut[*x as usize];
                if *slot == u32::MAX {
                    *slot = sc.local_keys.len() as u32;
                    sc.local_keys.push(*x);
                }
                sc.local.push(*slot);
            }
            nreal = sc.local_keys.len();
            if masked {
                let discard = nreal as u32;
                for l in &mut sc.local {
                    if *l == u32::MAX {
                        *l = discard;
                    }
                }
            }
        } else {
            nreal = 1;
            if masked {
                sc.local.extend(sc.keep.iter().map(|k| (!k) as u32));
            }
        }
        // Slots the accumulation loops index: the groups and the discard.
        let nlocal = nreal + masked as usize;
        // No keys and no mask: one group, plain reductions.
        let single = nkeys == 0 && !masked;

        // 4. Evaluate the programs over the rows.
        if sc.decoded.len() < src.len() {
            sc.decoded.resize_with(src.len(), Vec::new);
        }
        let mut inputs: Vec<&[i64]> = vec![&[]; src.len()];
        {
            let mut need = vec![false; src.len()];
            for p in &plan.progs {
                p.visit_columns(&mut |c| need[c] = true);
            }
            for (c, buf) in sc.decoded.iter_mut().enumerate() {
                if !need[c] {
                    continue;
                }
                if dense {
                    match &src[c] {
                        Source::Values(v, ..) => {
                            buf.clear();
                            buf.extend_from_slice(v)
                        }
                        Source::Packed(v) => v.decode_into(buf),
                        _ => buf.clear(),
                    }
                } else {
                    src[c].gather(&sc.sel, buf);
                }
            }
            for (c, buf) in sc.decoded.iter().enumerate() {
                if need[c] {
                    inputs[c] = buf.as_slice();
                }
            }
        }
        let values: Vec<Val> = plan.progs.iter().map(|p| p.eval(&inputs)).collect();

        // 5. Accumulate per local slot, then fold into the groups.
        let groups = &mut self.groups;
        let mut slot_of_local = Vec::with_capacity(nreal);
        if nkeys == 0 {
            if groups.keys.is_empty() {
                groups.slot(vec![]);
            }
            slot_of_local.push(0u32);
        } else {
            for idx in &sc.local_keys {
                let mut key = Vec::with_capacity(nkeys);
                for (q, k) in plan.keys.iter().enumerate() {
                    let code = (*idx as usize / strides[q]) % cards[q].max(1);
                    key.push(match k {
                        KeyCol::Int { col, .. } => {
                            KeyValue::Int(src[*col].range().expect("checked").0 + code as i64)
                        }
                        KeyCol::Str { col } => match (&src[*col], &str_codes[q]) {
                            (Source::Dict(d), _) => KeyValue::Bytes(d.entry(code).to_vec()),
                            (_, Some((_, names))) => KeyValue::Bytes(names[code].to_vec()),
                            _ => return Err(internal!("string key without codes")),
                        },
                    });
                }
                slot_of_local.push(groups.slot(key));
            }
        }
        // Counts.
        if single {
            groups.counts[0] += m as i64;
        } else {
            let counts = count_by_slot(&sc.local, nlocal);
            for (l, c) in counts.iter().take(nreal).enumerate() {
                groups.counts[slot_of_local[l] as usize] += c;
            }
        }
        // Sums, minimums, maximums: which programs need which.
        let (mut need_sum, mut need_min, mut need_max) = (
            vec![false; plan.progs.len()],
            vec![false; plan.progs.len()],
            vec![false; plan.progs.len()],
        );
        for (_, st) in &plan.aggs {
            match st {
                AggState::Sum { prog } | AggState::Avg { prog } => need_sum[*prog] = true,
                AggState::Min { prog } => need_min[*prog] = true,
                AggState::Max { prog } => need_max[*prog] = true,
                AggState::Count => {}
            }
        }
        for (p, val) in values.iter().enumerate() {
            let vals = val.values(m);
            let (lo, hi) = prog_bounds[p];
            if need_sum[p] {
                let bound = lo.abs().max(hi.abs());
                let fits_i64 = bound.saturating_mul(m as i128) <= I64_LIMIT;
                if single {
                    let s: i128 = if fits_i64 {
                        vals.iter().copied().fold(0i64, i64::wrapping_add) as i128
                    } else {
                        vals.iter().map(|v| *v as i128).sum()
                    };
                    let g = &mut groups.sums[p][0];
                    *g = g
                        .checked_add(s)
                        .ok_or_else(|| overflow!("SUM overflowed"))?;
                } else {
                    let mut local = vec![0i128; nlocal];
                    if fits_i64 {
                        for (a, b) in local.iter_mut().zip(sum_by_slot(&vals, &sc.local, nlocal)) {
                            *a = b as i128;
                        }
                    } else {
                        for (v, l) in vals.iter().zip(&sc.local) {
                            local[*l as usize] += *v as i128;
                        }
                    }
                    for (l, s) in local.iter().take(nreal).enumerate() {
                        let g = &mut groups.sums[p][slot_of_local[l] as usize];
                        *g = g
                            .checked_add(*s)
                            .ok_or_else(|| overflow!("SUM overflowed"))?;
                    }
                }
            }
            if need_min[p] || need_max[p] {
                let mut mins = vec![i64::MAX; nlocal];
                let mut maxs = vec![i64::MIN; nlocal];
                if single {
                    mins[0] = vals.iter().copied().min().unwrap_or(i64::MAX);
                    maxs[0] = vals.iter().copied().max().unwrap_or(i64::MIN);
                } else {
                    for (v, l) in vals.iter().zip(&sc.local) {
                        let l = *l as usize;
                        mins[l] = mins[l].min(*v);
                        maxs[l] = maxs[l].max(*v);
                    }
                }
                for l in 0..nreal {
                    let g = slot_of_local[l] as usize;
                    groups.mins[p][g] = groups.mins[p][g].min(mins[l]);
                    groups.maxs[p][g] = groups.maxs[p][g].max(maxs[l]);
                }
            }
        }
        self.blocks_scanned += 1;
        Ok(Outcome::Done)
    }

    /// The fused groups' partial states, in the partial aggregator's schema.
    fn finish_fused(&mut self) -> Result<RecordBatch> {
        let mut g = std::mem::replace(&mut self.groups, Groups::new(self.plan.progs.len()));
        // Without GROUP BY the one group exists even if no row came.
        if self.plan.keys.is_empty() && g.keys.is_empty() {
            g.slot(vec![]);
        }
        let n = g.keys.len();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (q, k) in self.plan.keys.iter().enumerate() {
            let ints = || {
                g.keys.iter().map(|key| match &key[q] {
                    KeyValue::Int(v) => *v,
                    KeyValue::Bytes(_) => 0,
                })
            };
            cols.push(match k {
                KeyCol::Int { data_type, .. } => int_array(data_type, ints().map(Some))?,
                KeyCol::Str { .. } => {
                    let strs: Vec<String> = g
                        .keys
                        .iter()
                        .map(|key| match &key[q] {
                            KeyValue::Bytes(b) => String::from_utf8(b.clone())
                                .map_err(|_| invalid_input!("a string key is not UTF-8")),
                            KeyValue::Int(_) => Err(internal!("integer in a string key")),
                        })
                        .collect::<Result<_>>()?;
                    Arc::new(StringArray::from(strs))
                }
            });
        }
        let seen = |s: usize| g.counts[s] > 0;
        for (f, st) in &self.plan.aggs {
            match st {
                AggState::Count => cols.push(Arc::new(Int64Array::from(g.counts.clone()))),
                AggState::Sum { prog } | AggState::Avg { prog } => {
                    let sum_type = f
                        .state_types()
                        .into_iter()
                        .next()
                        .ok_or_else(|| internal!("SUM without a state"))?;
                    let sums = &g.sums[*prog];
                    cols.push(match &sum_type {
                        DataType::Int64 => {
                            let vals = (0..n)
                                .map(|s| {
                                    if !seen(s) {
                                        return Ok(None);
                                    }
                                    i64::try_from(sums[s]).map(Some).map_err(|_| {
                                        overflow!("SUM overflowed BIGINT: the exact result does not fit")
                                    })
                                })
                                .collect::<Result<Vec<_>>>()?;
                            Arc::new(Int64Array::from(vals)) as ArrayRef
                        }
                        DataType::Decimal128(p, s) => {
                            let vals = (0..n)
                                .map(|i| {
                                    if !seen(i) {
                                        return Ok(None);
                                    }
                                    if fits_precision(sums[i], MAX_DECIMAL_PRECISION) {
                                        Ok(Some(sums[i]))
                                    } else {
                                        Err(overflow!(
                                            "SUM overflowed DECIMAL(38,{s}): the exact result does not fit"
                                        ))
                                    }
                                })
                                .collect::<Result<Vec<_>>>()?;
                            Arc::new(Decimal128Array::from(vals).with_precision_and_scale(*p, *s)?)
                        }
                        other => return Err(internal!("fused SUM into {other}")),
                    });
                    if matches!(st, AggState::Avg { .. }) {
                        cols.push(Arc::new(Int64Array::from(g.counts.clone())));
                    }
                }
                AggState::Min { prog } | AggState::Max { prog } => {
                    let v = if matches!(st, AggState::Min { .. }) {
                        &g.mins[*prog]
                    } else {
                        &g.maxs[*prog]
                    };
                    let t = f.state_types().into_iter().next().unwrap_or(DataType::Null);
                    cols.push(int_array(&t, (0..n).map(|s| seen(s).then(|| v[s])))?);
                }
            }
        }
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// Sums `vals` per slot (`slots[i]` < `nslots`). Four interleaved sets of
/// sums, so consecutive rows of the same group do not wait on each other's
/// store. The caller has bounded the sums to i64.
fn sum_by_slot(vals: &[i64], slots: &[u32], nslots: usize) -> Vec<i64> {
    let mut acc = vec![0i64; 4 * nslots];
    let (a, rest) = acc.split_at_mut(nslots);
    let (b, rest) = rest.split_at_mut(nslots);
    let (c, d) = rest.split_at_mut(nslots);
    let mut vc = vals.chunks_exact(4);
    let mut sc = slots.chunks_exact(4);
    for (v, s) in (&mut vc).zip(&mut sc) {
        a[s[0] as usize] = a[s[0] as usize].wrapping_add(v[0]);
        b[s[1] as usize] = b[s[1] as usize].wrapping_add(v[1]);
        c[s[2] as usize] = c[s[2] as usize].wrapping_add(v[2]);
        d[s[3] as usize] = d[s[3] as usize].wrapping_add(v[3]);
    }
    for (v, s) in vc.remainder().iter().zip(sc.remainder()) {
        a[*s as usize] = a[*s as usize].wrapping_add(*v);
    }
    (0..nslots)
        .map(|i| {
            a[i].wrapping_add(b[i])
                .wrapping_add(c[i])
                .wrapping_add(d[i])
        })
        .collect()
}

/// Rows per slot, four interleaved counters (see [`sum_by_slot`]).
fn count_by_slot(slots: &[u32], nslots: usize) -> Vec<i64> {
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

/// An integer-stored column of SQL type `t` from i64 values.
fn int_array(t: &DataType, vals: impl Iterator<Item = Option<i64>>) -> Result<ArrayRef> {
    Ok(match t {
        DataType::Int64 => Arc::new(vals.collect::<Int64Array>()),
        DataType::Date32 => Arc::new(vals.map(|v| v.map(|x| x as i32)).collect::<Date32Array>()),
        DataType::Decimal128(p, s) => Arc::new(
            vals.map(|v| v.map(|x| x as i128))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(*p, *s)?,
        ),
        other => return Err(internal!("fused integer column of type {other}")),
    })
}

/// Scan + filter + partial aggregation in one executor; see the module
/// docs.
pub struct FusedAggExecutor<S: Storage> {
    scanner: KvScanner<S>,
    core: Core,
}

impl<S: Storage> FusedAggExecutor<S> {
    /// `columns`: the scan's (column id, type); `conditions`: the filter
    /// (ANDed); `keys` and `aggs`: the partial aggregation; `plan`: their
    /// fused form from [`FusedPlan::compile`].
    pub fn new(
        storage: S,
        ranges: Vec<KeyRange>,
        columns: &[(i64, DataType)],
        conditions: Vec<Expr>,
        plan: FusedPlan,
        fallback: Aggregator,
    ) -> Result<Self> {
        let schema = fallback.output_schema();
        Ok(FusedAggExecutor {
            scanner: KvScanner::new(storage, ranges, false),
            core: Core {
                groups: Groups::new(plan.progs.len()),
                plan,
                columns: columns.to_vec(),
                scratch: Scratch::default(),
                conditions: super::selection::order_conditions(conditions)?,
                fallback,
                fallback_used: false,
                decoder: RowDecoder::new(columns, ROW_BLOCK)?,
                schema,
                blocks_scanned: 0,
                blocks_skipped: 0,
                blocks_fallback: 0,
            },
        })
    }
}

impl<S: Storage> BatchExecutor for FusedAggExecutor<S> {
    fn schema(&self) -> SchemaRef {
        self.core.schema.clone()
    }

    fn next_batch(&mut self, scan_rows: usize) -> Result<BatchResult> {
        let mut rows = 0usize;
        while rows < scan_rows {
            let Some(data) = self.scanner.next_data()? else {
                break;
            };
            match data {
                TableData::Row(v) => {
                    self.core.decoder.decode(v)?;
                    rows += 1;
                    if self.core.decoder.rows() >= ROW_BLOCK {
                        self.core.rows()?;
                    }
                }
                TableData::Pack(pack) => {
                    rows += pack.rows();
                    self.core.pack(&pack)?;
                }
            }
        }
        if !self.scanner.is_drained() {
            return Ok(BatchResult {
                chunk: Chunk::new(RecordBatch::new_empty(self.core.schema.clone())),
                is_drained: false,
            });
        }
        self.core.rows()?;
        let fused = self.core.finish_fused()?;
        let batch = if self.core.fallback_used {
            let generic = self.core.fallback.finish()?;
            concat_batches(&self.core.schema, &[fused, generic])?
        } else {
            fused
        };
        Ok(BatchResult {
            chunk: Chunk::new(batch),
            is_drained: true,
        })
    }

    fn collect_summary(&self, s: &mut ExecSummary) {
        self.scanner.collect_summary(s);
        s.blocks_skipped += self.core.blocks_skipped;
        s.blocks_scanned += self.core.blocks_scanned;
        s.blocks_fallback += self.core.blocks_fallback;
    }

    /// An aggregation answers for its whole input at once: never resumed.
    fn remaining_ranges(&self) -> Vec<KeyRange> {
        vec![]
    }
}

#[cfg(test)]
mod tests;
