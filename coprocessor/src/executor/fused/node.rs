//! The arithmetic of aggregate arguments: [`Node`], an integer expression
//! over scan columns with the decimal rescaling of `expr/` compiled into
//! multiplications by powers of ten. Each node carries the bound its value
//! must stay under (10^precision for a DECIMAL); [`Node::bounds`] derives a
//! block's value range from its columns' min/max (interval arithmetic), and
//! only when every node provably stays within i64 and its precision does
//! [`Node::eval`] run the block, in plain wrapping i64 arithmetic that then
//! cannot wrap.

use arrow::datatypes::DataType;

use crate::codec::pack::is_int_type;
use crate::expr::{ArithOp, Expr, ScalarValue};
use crate::simd::kernel;
use crate::types::POW10;

/// |value| must stay below this to be an i64 (and leave room to negate).
pub(super) const I64_LIMIT: i128 = i64::MAX as i128;

/// An integer expression over scan columns: the unscaled value of a DECIMAL
/// or BIGINT expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
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
    /// The value of an earlier program of the plan: a subtree two
    /// programs share ([`Node::share`]), computed once per block.
    Prog(usize),
}

fn decimal_limit(p: u8) -> i128 {
    if p as usize >= POW10.len() {
        i128::MAX
    } else {
        POW10[p as usize].min(I64_LIMIT + 1)
    }
}

pub(super) fn scale_of(dt: &DataType) -> Option<i8> {
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
                ArithOp::Divide | ArithOp::Modulo => return None,
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
            ArithOp::Divide | ArithOp::Modulo => return None,
        };
        Some(Node { op, limit })
    }

    /// The fused form of an integer-valued expression, if it has one.
    pub(super) fn compile(e: &Expr) -> Option<Node> {
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
                            ArithOp::Divide | ArithOp::Modulo => None,
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

    /// Replaces each subtree (below the root) equal to one of `earlier`,
    /// the plan's programs before this one, by a reference to it: Q1's
    /// `price × (1 − discount) × (1 + tax)` then multiplies the already
    /// computed `price × (1 − discount)` of the program before it.
    pub(super) fn share(&mut self, earlier: &[Node]) {
        match &mut self.op {
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => {
                a.share_subtree(earlier);
                b.share_subtree(earlier);
            }
            Op::Neg(a) => a.share_subtree(earlier),
            Op::Col(_) | Op::Const(_) | Op::Prog(_) => {}
        }
    }

    fn share_subtree(&mut self, earlier: &[Node]) {
        if matches!(self.op, Op::Col(_) | Op::Const(_) | Op::Prog(_)) {
            return;
        }
        match earlier.iter().position(|e| e == self) {
            Some(j) => self.op = Op::Prog(j),
            None => self.share(earlier),
        }
    }

    /// The columns the node reads (not through an earlier program's value).
    pub(super) fn visit_columns(&self, f: &mut impl FnMut(usize)) {
        match &self.op {
            Op::Col(c) => f(*c),
            Op::Const(_) | Op::Prog(_) => {}
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => {
                a.visit_columns(f);
                b.visit_columns(f);
            }
            Op::Neg(a) => a.visit_columns(f),
        }
    }

    /// The node's value range given each column's range and the earlier
    /// programs' (`progs`); None if some node may leave i64 or its
    /// precision.
    pub(super) fn bounds(
        &self,
        cols: &[(i64, i64)],
        progs: &[(i128, i128)],
    ) -> Option<(i128, i128)> {
        let (lo, hi) = match &self.op {
            Op::Prog(j) => *progs.get(*j)?,
            Op::Col(c) => {
                let (lo, hi) = cols[*c];
                (lo as i128, hi as i128)
            }
            Op::Const(v) => (*v as i128, *v as i128),
            Op::Add(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols, progs)?, b.bounds(cols, progs)?);
                (al + bl, ah + bh)
            }
            Op::Sub(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols, progs)?, b.bounds(cols, progs)?);
                (al - bh, ah - bl)
            }
            Op::Mul(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(cols, progs)?, b.bounds(cols, progs)?);
                let p = [al * bl, al * bh, ah * bl, ah * bh];
                (*p.iter().min()?, *p.iter().max()?)
            }
            Op::Neg(a) => {
                let (l, h) = a.bounds(cols, progs)?;
                (-h, -l)
            }
        };
        let limit = self.limit.min(I64_LIMIT + 1);
        (lo.abs() < limit && hi.abs() < limit).then_some((lo, hi))
    }

    /// Evaluates over `cols` (each column's values, all the same length
    /// `n`), `done` holding the earlier programs' values; a new vector is
    /// taken from `pool` (the vectors of earlier blocks, handed back by
    /// the caller). Bounds were checked, so wrapping arithmetic never
    /// wraps. `ranges` are the block's: a product of two factors that fit
    /// i32 there is one 32 × 32 → 64-bit multiply per value (AVX2 has one
    /// for 4 lanes, `vpmuldq`, and none for 64 × 64 bits: the compiler
    /// builds that from three 32-bit ones and shifts).
    pub(super) fn eval<'a>(
        &self,
        cols: &[&'a [i64]],
        done: &[Val<'a>],
        pool: &mut Vec<Vec<i64>>,
        ranges: Ranges<'_>,
    ) -> Val<'a> {
        match &self.op {
            Op::Col(c) => Val::Slice(cols[*c]),
            Op::Const(v) => Val::Const(*v),
            // `share` leaves no reference at a root; a copy if one were.
            Op::Prog(j) => match &done[*j] {
                Val::Slice(s) => Val::Slice(s),
                Val::Owned(v) => Val::Owned(v.clone()),
                Val::Const(c) => Val::Const(*c),
            },
            Op::Add(a, b) => binary(
                a.operand(cols, done, pool, ranges),
                b.operand(cols, done, pool, ranges),
                i64::wrapping_add,
                pool,
            ),
            Op::Sub(a, b) => binary(
                a.operand(cols, done, pool, ranges),
                b.operand(cols, done, pool, ranges),
                i64::wrapping_sub,
                pool,
            ),
            Op::Mul(a, b) => {
                let narrow = a.fits_i32(ranges) && b.fits_i32(ranges);
                let (x, y) = (
                    a.operand(cols, done, pool, ranges),
                    b.operand(cols, done, pool, ranges),
                );
                match narrow {
                    true => binary(x, y, mul_i32, pool),
                    false => binary(x, y, i64::wrapping_mul, pool),
                }
            }
            Op::Neg(a) => {
                let a = a.operand(cols, done, pool, ranges);
                binary(Val::Const(0), a, i64::wrapping_sub, pool)
            }
        }
    }

    /// The node's value as an operand: an earlier program's borrowed, not
    /// copied.
    fn operand<'s>(
        &self,
        cols: &[&'s [i64]],
        done: &'s [Val<'_>],
        pool: &mut Vec<Vec<i64>>,
        ranges: Ranges<'_>,
    ) -> Val<'s> {
        match &self.op {
            Op::Prog(j) => match &done[*j] {
                Val::Slice(s) => Val::Slice(s),
                Val::Owned(v) => Val::Slice(v),
                Val::Const(c) => Val::Const(*c),
            },
            _ => self.eval(cols, done, pool, ranges),
        }
    }
}

impl Node {
    /// Whether the node's values over the block (`ranges`) fit i32.
    fn fits_i32(&self, ranges: Ranges<'_>) -> bool {
        self.bounds(ranges.cols, ranges.progs)
            .is_some_and(|(lo, hi)| lo >= i32::MIN as i128 && hi <= i32::MAX as i128)
    }
}

/// A block's value ranges: each column's min and max, and each program's
/// bounds ([`Node::bounds`]).
#[derive(Clone, Copy)]
pub(super) struct Ranges<'r> {
    pub(super) cols: &'r [(i64, i64)],
    pub(super) progs: &'r [(i128, i128)],
}

/// `x × y` for factors that fit i32 (the caller knows they do): the
/// product of their low 32 bits, sign-extended, which cannot overflow.
#[inline(always)]
fn mul_i32(x: i64, y: i64) -> i64 {
    (x as i32 as i64) * (y as i32 as i64)
}

/// A node's value over a block's rows.
pub(super) enum Val<'a> {
    Slice(&'a [i64]),
    Owned(Vec<i64>),
    Const(i64),
}

impl Val<'_> {
    pub(super) fn values(&self, n: usize) -> std::borrow::Cow<'_, [i64]> {
        match self {
            Val::Slice(s) => std::borrow::Cow::Borrowed(s),
            Val::Owned(v) => std::borrow::Cow::Borrowed(v),
            Val::Const(c) => std::borrow::Cow::Owned(vec![*c; n]),
        }
    }
}

kernel! {
    /// One arithmetic node over whole vectors; generic over `f` so each
    /// operator gets its own (vectorized) loops, for the baseline and for
    /// AVX2 (see [`crate::simd`]).
    fn binary<'a, 'b>(
        a: Val<'a>,
        b: Val<'b>,
        f: impl Fn(i64, i64) -> i64 + Copy,
        pool: &mut Vec<Vec<i64>>,
    ) -> Val<'static> {
        match (a, b) {
            (Val::Const(x), Val::Const(y)) => Val::Const(f(x, y)),
            (Val::Owned(mut v), Val::Const(y)) => {
                v.iter_mut().for_each(|x| *x = f(*x, y));
                Val::Owned(v)
            }
            (Val::Slice(s), Val::Const(y)) => Val::Owned(filled(pool, s.iter().map(|x| f(*x, y)))),
            (Val::Const(x), Val::Owned(mut v)) => {
                v.iter_mut().for_each(|y| *y = f(x, *y));
                Val::Owned(v)
            }
            (Val::Const(x), Val::Slice(s)) => Val::Owned(filled(pool, s.iter().map(|y| f(x, *y)))),
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
                Val::Owned(filled(pool, a.iter().zip(b).map(|(x, y)| f(*x, *y))))
            }
        }
    }
}

/// A vector from `pool` (or a new one) holding `values`.
#[inline(always)]
fn filled(pool: &mut Vec<Vec<i64>>, values: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut v = pool.pop().unwrap_or_default();
    v.clear();
    v.extend(values);
    v
}
