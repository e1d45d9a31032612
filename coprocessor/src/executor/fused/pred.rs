//! The filter's conjuncts in fused form ([`Pred`]): a column against
//! constants, as a range, a set or a constant, on the stored integers.
//! [`Pred::compile`] recognizes them (a column, possibly under an
//! upscaling cast, against a literal; the range comes from
//! [`compare_range`], the rule the zone-map filter uses too). Per block,
//! [`live`] checks each against the zone map — a block no row of which can
//! pass is skipped whole, a conjunct every row passes is dropped — and
//! orders the rest most selective first; [`Pred::narrow`] runs one over the
//! rows still selected.

use arrow::datatypes::DataType;

use super::core::Early;
use super::node::scale_of;
use super::source::{and_int, and_int_probed, and_range, Source};
use crate::codec::pack::is_int_type;
use crate::executor::kernels::{and_masks, compare_range, IntSet};
use crate::expr::{Bloom, CmpOp, Expr, LogicOp, ScalarValue};
use crate::internal;
use crate::simd::kernel;
use crate::types::POW10;

/// One conjunct of a block filter, on the stored integers (or a string
/// column's values).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Pred {
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
        set: IntSet,
        negated: bool,
    },
    StrIn {
        col: usize,
        set: Vec<Vec<u8>>,
        negated: bool,
    },
    /// A BIGINT column's value may be one of a join's build keys.
    Bloom {
        col: usize,
        filter: Bloom,
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
    pub(super) fn compile(e: &Expr, out: &mut Vec<Pred>) -> bool {
        match e {
            Expr::Logic {
                op: LogicOp::And,
                args,
            } => args.iter().all(|a| Pred::compile(a, out)),
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
                set: list_set,
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
                // A join's keys on a BIGINT column: the list's own set,
                // shared with the rest of the plan (`expr::IntSet`).
                if let (Some(list_set), 1, DataType::Int64) = (list_set, f, &dt) {
                    out.push(Pred::IntIn {
                        col,
                        set: list_set.members(list).clone(),
                        negated: *negated,
                    });
                    return true;
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
                out.push(Pred::IntIn {
                    col,
                    set: IntSet::new(set),
                    negated: *negated,
                });
                true
            }
            Expr::InBloom { expr, filter } => {
                let Some((col, 1, DataType::Int64)) = column_ref(expr) else {
                    return false;
                };
                out.push(Pred::Bloom {
                    col,
                    filter: filter.clone(),
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

/// The conjuncts of `preds` a block's rows must be run through, most
/// selective first, after its zone map decided the others: a block no row
/// of which can pass is [`Early::Skipped`], one whose filtered column has no
/// range goes the generic way.
pub(super) fn live<'p>(preds: &'p [Pred], src: &[Source<'_>]) -> Result<Vec<&'p Pred>, Early> {
    let mut live: Vec<(u64, &Pred)> = Vec::new();
    for p in preds {
        let (col, lo, hi) = match p {
            Pred::Const(true) | Pred::NullCheck { negated: true, .. } => continue,
            Pred::Const(false) | Pred::NullCheck { negated: false, .. } => {
                return Err(Early::Skipped)
            }
            Pred::Range { col, lo, hi } => (*col, *lo, *hi),
            Pred::IntIn {
                col,
                set,
                negated: false,
            } => {
                if let Some((min, max)) = src[*col].range() {
                    if !set.any_in(min, max) {
                        return Err(Early::Skipped);
                    }
                }
                live.push((u64::MAX, p));
                continue;
            }
            Pred::NotEq { .. } | Pred::IntIn { .. } | Pred::StrIn { .. } | Pred::Bloom { .. } => {
                live.push((u64::MAX, p));
                continue;
            }
        };
        let (min, max) = src[col].range().ok_or(Early::Fallback)?;
        if max < lo || min > hi {
            return Err(Early::Skipped);
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
    Ok(live.into_iter().map(|(_, p)| p).collect())
}

impl Pred {
    /// Narrows the selection `bits` (rows `0..n` of the block) to the rows
    /// that pass, 64 at a time, skipping words already empty.
    pub(super) fn narrow(
        &self,
        src: &[Source<'_>],
        n: usize,
        bits: &mut [u64],
    ) -> Result<(), Early> {
        narrow(self, src, n, bits)
    }
}

kernel! {
    /// [`Pred::narrow`], with the filter loops it inlines, for the
    /// baseline and for AVX2 (see [`crate::simd`]).
    fn narrow(pred: &Pred, src: &[Source<'_>], n: usize, bits: &mut [u64]) -> Result<(), Early> {
        match pred {
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
                _ => return Err(Early::Fallback),
            },
            Pred::Range { col, lo, hi } => and_range(&src[*col], n, bits, *lo, *hi),
            Pred::NotEq { col, v: x } => {
                let x = *x;
                and_int(&src[*col], n, bits, move |v| v != x);
            }
            Pred::IntIn { col, set, negated } => {
                let neg = *negated;
                and_int_probed(&src[*col], n, bits, #[inline(always)]
                    |v| set.contains(v) != neg);
            }
            Pred::Bloom { col, filter } => {
                and_int_probed(&src[*col], n, bits, #[inline(always)]
                    |v| filter.may_contain(v));
            }
            Pred::Const(_) | Pred::NullCheck { .. } => {
                return Err(internal!("a constant filter reached the kernels").into())
            }
        }
        Ok(())
    }
}
