//! Vectorized evaluation of [`Expr`] over Arrow record batches.
//!
//! Comparisons, boolean logic, LIKE and casts use arrow's kernels. Arithmetic
//! is our own over `try_binary`/`try_unary` because exact decimal semantics
//! (rescaling, precision caps, rounding) and overflow errors with useful
//! messages are Quarry's, not arrow's.

use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, AsArray, BooleanArray, Datum, PrimitiveArray, RecordBatch, Scalar,
};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::kernels::cmp;
use arrow::compute::{
    and_kleene, cast_with_options, is_not_null, is_null, not, or_kleene, try_binary, try_unary,
    CastOptions,
};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Decimal128Type, Float64Type, Int64Type};
use arrow::error::ArrowError;

use arrow::array::{new_null_array, Int64Array, StringArray};
use arrow::compute::kernels::temporal::{date_part, DatePart as ArrowDatePart};
use arrow::compute::kernels::zip::zip;

use super::like::LikeMatcher;
use super::{ArithOp, CmpOp, DatePart, Expr, LogicOp, ScalarValue};
use crate::types::{self, fits_precision, sql_name, POW10};
use crate::{internal, Result};

/// An evaluation result: a whole column, or one value standing for every row.
#[derive(Debug, Clone)]
pub enum ColumnarValue {
    Array(ArrayRef),
    Scalar(ScalarValue),
}

impl ColumnarValue {
    pub fn into_array(self, len: usize) -> Result<ArrayRef> {
        match self {
            ColumnarValue::Array(a) => Ok(a),
            ColumnarValue::Scalar(s) => s.to_array(len),
        }
    }

    fn datum(&self) -> Result<Box<dyn Datum>> {
        Ok(match self {
            ColumnarValue::Array(a) => Box::new(a.clone()),
            ColumnarValue::Scalar(s) => Box::new(Scalar::new(s.to_array(1)?)),
        })
    }

    fn is_scalar(&self) -> bool {
        matches!(self, ColumnarValue::Scalar(_))
    }
}

/// Wraps a kernel result: a 1-row result of two scalars is a scalar again.
fn wrap(arr: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    if scalar {
        Ok(ColumnarValue::Scalar(ScalarValue::from_array(
            arr.as_ref(),
            0,
        )?))
    } else {
        Ok(ColumnarValue::Array(arr))
    }
}

/// `a` with every row outside `mask` turned NULL (shares the value buffers).
fn with_mask(a: &ArrayRef, mask: &NullBuffer) -> Result<ArrayRef> {
    let nulls = NullBuffer::union(a.nulls(), Some(mask));
    let data = a
        .to_data()
        .into_builder()
        .nulls(nulls)
        .build()
        .map_err(|e| internal!("masking a column: {e}"))?;
    Ok(make_array(data))
}

fn overflow(what: String) -> ArrowError {
    ArrowError::ArithmeticOverflow(what)
}

/// Applies `f` element-wise over two values of primitive type `T`.
fn apply<T, O>(
    l: &ColumnarValue,
    r: &ColumnarValue,
    out_type: &DataType,
    f: impl Fn(T::Native, T::Native) -> Result<O::Native, ArrowError>,
) -> Result<ColumnarValue>
where
    T: ArrowPrimitiveType,
    O: ArrowPrimitiveType,
{
    let scalar = l.is_scalar() && r.is_scalar();
    let as_arr = |v: &ColumnarValue| -> Result<ArrayRef> {
        match v {
            ColumnarValue::Array(a) => Ok(a.clone()),
            ColumnarValue::Scalar(s) => s.to_array(1),
        }
    };
    let (la, ra) = (as_arr(l)?, as_arr(r)?);
    let out: PrimitiveArray<O> = match (l, r) {
        (ColumnarValue::Array(_), ColumnarValue::Scalar(s)) => {
            if s.is_null() {
                return Ok(ColumnarValue::Array(arrow::array::new_null_array(
                    out_type,
                    la.len(),
                )));
            }
            let c = ra.as_primitive::<T>().value(0);
            try_unary(la.as_primitive::<T>(), |x| f(x, c))?
        }
        (ColumnarValue::Scalar(s), ColumnarValue::Array(_)) => {
            if s.is_null() {
                return Ok(ColumnarValue::Array(arrow::array::new_null_array(
                    out_type,
                    ra.len(),
                )));
            }
            let c = la.as_primitive::<T>().value(0);
            try_unary(ra.as_primitive::<T>(), |x| f(c, x))?
        }
        _ => try_binary(la.as_primitive::<T>(), ra.as_primitive::<T>(), f)?,
    };
    let out: ArrayRef = match out_type {
        DataType::Decimal128(p, s) => Arc::new(
            out.as_any()
                .downcast_ref::<PrimitiveArray<Decimal128Type>>()
                .ok_or_else(|| internal!("decimal kernel produced {}", out.data_type()))?
                .clone()
                .with_precision_and_scale(*p, *s)?,
        ),
        _ => Arc::new(out),
    };
    wrap(out, scalar)
}

fn eval_arith(
    op: ArithOp,
    l: &ColumnarValue,
    r: &ColumnarValue,
    lt: &DataType,
    rt: &DataType,
    out: &DataType,
) -> Result<ColumnarValue> {
    let sym = op.symbol();
    match out {
        DataType::Int64 => apply::<Int64Type, Int64Type>(l, r, out, |a, b| {
            match op {
                ArithOp::Plus => a.checked_add(b),
                ArithOp::Minus => a.checked_sub(b),
                ArithOp::Multiply => a.checked_mul(b),
                ArithOp::Divide => a.checked_div(b),
                ArithOp::Modulo if b == 0 => return Err(ArrowError::DivideByZero),
                // i64::MIN % -1 is 0, which checked_rem would call overflow.
                ArithOp::Modulo => Some(a.wrapping_rem(b)),
            }
            .ok_or_else(|| overflow(format!("BIGINT overflow in {a} {sym} {b}")))
        }),
        DataType::Float64 => apply::<Float64Type, Float64Type>(l, r, out, |a, b| {
            let v = match op {
                ArithOp::Plus => a + b,
                ArithOp::Minus => a - b,
                ArithOp::Multiply => a * b,
                ArithOp::Divide | ArithOp::Modulo if b == 0.0 => {
                    return Err(ArrowError::DivideByZero)
                }
                ArithOp::Divide => a / b,
                ArithOp::Modulo => a % b,
            };
            if v.is_finite() || !a.is_finite() || !b.is_finite() {
                Ok(v)
            } else {
                Err(overflow(format!("DOUBLE overflow in {a} {sym} {b}")))
            }
        }),
        DataType::Decimal128(p, s) => {
            let (p, s) = (*p, *s as u32);
            let s1 = types::decimal_scale(lt) as u32;
            let s2 = types::decimal_scale(rt) as u32;
            let name = sql_name(out);
            let fail = move || overflow(format!("decimal overflow: {sym} does not fit {name}"));
            match op {
                ArithOp::Plus | ArithOp::Minus => {
                    let (f1, f2) = (POW10[(s - s1) as usize], POW10[(s - s2) as usize]);
                    apply::<Decimal128Type, Decimal128Type>(l, r, out, move |a, b| {
                        let a = a.checked_mul(f1).ok_or_else(fail.clone())?;
                        let b = b.checked_mul(f2).ok_or_else(fail.clone())?;
                        let v = if op == ArithOp::Plus {
                            a.checked_add(b)
                        } else {
                            a.checked_sub(b)
                        }
                        .ok_or_else(fail.clone())?;
                        if fits_precision(v, p) {
                            Ok(v)
                        } else {
                            Err(fail())
                        }
                    })
                }
                ArithOp::Multiply => {
                    apply::<Decimal128Type, Decimal128Type>(l, r, out, move |a, b| {
                        match a.checked_mul(b) {
                            Some(v) if fits_precision(v, p) => Ok(v),
                            _ => Err(fail()),
                        }
                    })
                }
                ArithOp::Modulo => Err(internal!("decimal % reached evaluation")),
                ArithOp::Divide => {
                    // a / b at scale s = round(a * 10^(s - s1 + s2) / b).
                    let k = (s + s2)
                        .checked_sub(s1)
                        .ok_or_else(|| internal!("decimal division scale {s} < {s1} - {s2}"))?;
                    let f = *POW10
                        .get(k as usize)
                        .ok_or_else(|| crate::overflow!("decimal division needs scale 10^{k}"))?;
                    apply::<Decimal128Type, Decimal128Type>(l, r, out, move |a, b| {
                        if b == 0 {
                            return Err(ArrowError::DivideByZero);
                        }
                        let n = a.checked_mul(f).ok_or_else(fail.clone())?;
                        match types::div_round(n, b) {
                            Some(v) if fits_precision(v, p) => Ok(v),
                            _ => Err(fail()),
                        }
                    })
                }
            }
        }
        other => Err(internal!("arithmetic producing {other}")),
    }
}

fn as_bool(v: ColumnarValue, len: usize) -> Result<BooleanArray> {
    let arr = v.into_array(len)?;
    match arr.data_type() {
        DataType::Boolean => Ok(arr.as_boolean().clone()),
        DataType::Null => Ok(BooleanArray::new_null(arr.len())),
        other => Err(internal!("expected BOOLEAN, got {other}")),
    }
}

impl Expr {
    /// Evaluates over `batch`. With a `selection`, rows outside it may come
    /// back with any value (fallible expressions see them as NULL, so they
    /// cannot fail there).
    pub fn evaluate(
        &self,
        batch: &RecordBatch,
        selection: Option<&BooleanBuffer>,
    ) -> Result<ColumnarValue> {
        let mask = match selection {
            Some(s) if self.is_fallible() && s.count_set_bits() < s.len() => {
                Some(NullBuffer::new(s.clone()))
            }
            _ => None,
        };
        self.eval(batch, mask.as_ref())
    }

    /// [`Expr::evaluate`], broadcasting a constant to a full column.
    pub fn evaluate_to_array(
        &self,
        batch: &RecordBatch,
        selection: Option<&BooleanBuffer>,
    ) -> Result<ArrayRef> {
        self.evaluate(batch, selection)?
            .into_array(batch.num_rows())
    }

    fn eval(&self, batch: &RecordBatch, mask: Option<&NullBuffer>) -> Result<ColumnarValue> {
        let len = batch.num_rows();
        Ok(match self {
            Expr::Column { index, .. } => {
                let col = batch
                    .columns()
                    .get(*index)
                    .ok_or_else(|| internal!("column {index} missing from batch"))?;
                ColumnarValue::Array(match mask {
                    Some(m) => with_mask(col, m)?,
                    None => col.clone(),
                })
            }
            Expr::Literal(v) => ColumnarValue::Scalar(v.clone()),
            Expr::Arith {
                op,
                left,
                right,
                data_type,
            } => {
                let l = left.eval(batch, mask)?;
                let r = right.eval(batch, mask)?;
                eval_arith(
                    *op,
                    &l,
                    &r,
                    &left.data_type(),
                    &right.data_type(),
                    data_type,
                )?
            }
            Expr::Negate(e) => {
                let v = e.eval(batch, mask)?;
                let zero = match e.data_type() {
                    DataType::Decimal128(p, s) => ScalarValue::Decimal(0, p, s),
                    DataType::Float64 => ScalarValue::Float64(0.0),
                    _ => ScalarValue::Int64(0),
                };
                let t = e.data_type();
                eval_arith(ArithOp::Minus, &ColumnarValue::Scalar(zero), &v, &t, &t, &t)?
            }
            Expr::Compare { op, left, right } => {
                let l = left.eval(batch, mask)?;
                let r = right.eval(batch, mask)?;
                let scalar = l.is_scalar() && r.is_scalar();
                let (ld, rd) = (l.datum()?, r.datum()?);
                let (ld, rd) = (ld.as_ref(), rd.as_ref());
                let out = match op {
                    CmpOp::Eq => cmp::eq(ld, rd),
                    CmpOp::Ne => cmp::neq(ld, rd),
                    CmpOp::Lt => cmp::lt(ld, rd),
                    CmpOp::Le => cmp::lt_eq(ld, rd),
                    CmpOp::Gt => cmp::gt(ld, rd),
                    CmpOp::Ge => cmp::gt_eq(ld, rd),
                }?;
                wrap(Arc::new(out), scalar)?
            }
            Expr::Logic { op, args } => {
                let values = args
                    .iter()
                    .map(|a| a.eval(batch, mask))
                    .collect::<Result<Vec<_>>>()?;
                let scalar = values.iter().all(|v| v.is_scalar());
                let n = if scalar { 1 } else { len };
                let mut out: Option<BooleanArray> = None;
                for v in values {
                    let v = as_bool(v, n)?;
                    out = Some(match (out, op) {
                        (None, _) => v,
                        (Some(acc), LogicOp::And) => and_kleene(&acc, &v)?,
                        (Some(acc), LogicOp::Or) => or_kleene(&acc, &v)?,
                    });
                }
                let out = out.ok_or_else(|| internal!("{op:?} without arguments"))?;
                wrap(Arc::new(out), scalar)?
            }
            Expr::Not(e) => {
                let v = e.eval(batch, mask)?;
                let scalar = v.is_scalar();
                let b = as_bool(v, if scalar { 1 } else { len })?;
                wrap(Arc::new(not(&b)?), scalar)?
            }
            Expr::IsNull { expr, negated } => match expr.eval(batch, mask)? {
                ColumnarValue::Scalar(s) => {
                    ColumnarValue::Scalar(ScalarValue::Boolean(s.is_null() != *negated))
                }
                ColumnarValue::Array(a) => ColumnarValue::Array(Arc::new(if *negated {
                    is_not_null(a.as_ref())?
                } else {
                    is_null(a.as_ref())?
                })),
            },
            Expr::InList {
                expr,
                list,
                negated,
                set,
            } => {
                let v = expr.eval(batch, mask)?;
                let scalar = v.is_scalar();
                if let (ColumnarValue::Array(a), Some(set)) = (&v, set) {
                    // A long list of integers (a join's keys, pushed down
                    // as a dynamic filter): one probe of its set per row.
                    let set = set.members(list);
                    let a = a.as_primitive::<Int64Type>();
                    let hits: BooleanArray = a
                        .iter()
                        .map(|x| x.map(|x| set.contains(x) != *negated))
                        .collect();
                    return Ok(ColumnarValue::Array(Arc::new(hits)));
                }
                let vd = v.datum()?;
                let mut acc: Option<BooleanArray> = None;
                for item in list.iter() {
                    let lit = Scalar::new(item.to_array(1)?);
                    let eq = cmp::eq(vd.as_ref(), &lit)?;
                    acc = Some(match acc {
                        None => eq,
                        Some(a) => or_kleene(&a, &eq)?,
                    });
                }
                let acc = acc.ok_or_else(|| internal!("empty IN list"))?;
                let out = if *negated { not(&acc)? } else { acc };
                wrap(Arc::new(out), scalar)?
            }
            Expr::InBloom { expr, filter } => match expr.eval(batch, mask)? {
                ColumnarValue::Scalar(s) => ColumnarValue::Scalar(match s {
                    ScalarValue::Int64(x) => ScalarValue::Boolean(filter.may_contain(x)),
                    _ => ScalarValue::Null(DataType::Boolean),
                }),
                ColumnarValue::Array(a) => {
                    let a = a.as_primitive::<Int64Type>();
                    let hits: BooleanArray =
                        a.iter().map(|x| x.map(|x| filter.may_contain(x))).collect();
                    ColumnarValue::Array(Arc::new(hits))
                }
            },
            Expr::Like {
                expr,
                pattern,
                negated,
            } => {
                let v = expr.eval(batch, mask)?;
                if let ColumnarValue::Array(a) = &v {
                    if let (Some(values), Some(m)) =
                        (a.as_string_opt::<i32>(), LikeMatcher::new(pattern))
                    {
                        return Ok(ColumnarValue::Array(Arc::new(m.evaluate(values, *negated))));
                    }
                }
                let scalar = v.is_scalar();
                let vd = v.datum()?;
                let pat = Scalar::new(arrow::array::StringArray::from(vec![pattern.as_str()]));
                let out = if *negated {
                    arrow::compute::kernels::comparison::nlike(vd.as_ref(), &pat)?
                } else {
                    arrow::compute::kernels::comparison::like(vd.as_ref(), &pat)?
                };
                wrap(Arc::new(out), scalar)?
            }
            Expr::Cast { expr, to } => {
                let v = expr.eval(batch, mask)?;
                let scalar = v.is_scalar();
                let arr = v.into_array(if scalar { 1 } else { len })?;
                let opts = CastOptions {
                    safe: false,
                    ..Default::default()
                };
                let out = cast_with_options(&arr, to, &opts).map_err(|e| {
                    let what = format!(
                        "cannot cast {} to {}",
                        sql_name(&expr.data_type()),
                        sql_name(to)
                    );
                    let m = match e {
                        ArrowError::CastError(m)
                        | ArrowError::ComputeError(m)
                        | ArrowError::InvalidArgumentError(m)
                        | ArrowError::ParseError(m) => m,
                        other => other.to_string(),
                    };
                    if m.contains("verflow")
                        || m.contains("too large")
                        || m.contains("out of range")
                    {
                        crate::Error::Overflow(format!("{what}: {m}"))
                    } else {
                        crate::Error::InvalidInput(format!("{what}: {m}"))
                    }
                })?;
                wrap(out, scalar)?
            }
            Expr::Case {
                branches,
                otherwise,
                data_type,
            } => eval_case(batch, mask, branches, otherwise.as_deref(), data_type)?,
            Expr::Coalesce(args) => {
                let values = args
                    .iter()
                    .map(|a| a.eval(batch, mask))
                    .collect::<Result<Vec<_>>>()?;
                let scalar = values.iter().all(ColumnarValue::is_scalar);
                let n = if scalar { 1 } else { len };
                let mut acc: Option<ArrayRef> = None;
                for v in values {
                    let v = v.into_array(n)?;
                    acc = Some(match acc {
                        None => v,
                        Some(a) if a.null_count() == 0 => a,
                        Some(a) => zip(&is_not_null(a.as_ref())?, &a, &v)?,
                    });
                }
                wrap(
                    acc.ok_or_else(|| internal!("COALESCE without arguments"))?,
                    scalar,
                )?
            }
            Expr::DatePart { part, expr } => {
                let v = expr.eval(batch, mask)?;
                let scalar = v.is_scalar();
                let arr = v.into_array(if scalar { 1 } else { len })?;
                let fields = date_part(arr.as_ref(), arrow_date_part(*part))?;
                wrap(
                    cast_with_options(&fields, &DataType::Int64, &CastOptions::default())?,
                    scalar,
                )?
            }
            Expr::Substring {
                expr,
                start,
                len: count,
            } => {
                let v = expr.eval(batch, mask)?;
                let scalar = v.is_scalar();
                let arr = v.into_array(if scalar { 1 } else { len })?;
                let out: StringArray = arr
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.map(|s| substring(s, *start, *count)))
                    .collect();
                wrap(Arc::new(out), scalar)?
            }
            Expr::OctetLength(expr) => {
                let v = expr.eval(batch, mask)?;
                let scalar = v.is_scalar();
                let arr = v.into_array(if scalar { 1 } else { len })?;
                let bytes: Int64Array = arr
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.map(|s| s.len() as i64))
                    .collect();
                wrap(Arc::new(bytes), scalar)?
            }
        })
    }
}

fn arrow_date_part(part: DatePart) -> ArrowDatePart {
    match part {
        DatePart::Year => ArrowDatePart::Year,
        DatePart::Quarter => ArrowDatePart::Quarter,
        DatePart::Month => ArrowDatePart::Month,
        DatePart::Week => ArrowDatePart::Week,
        DatePart::Day => ArrowDatePart::Day,
        DatePart::DayOfYear => ArrowDatePart::DayOfYear,
        DatePart::DayOfWeek => ArrowDatePart::DayOfWeekSunday0,
    }
}

/// SQL's SUBSTRING over characters: positions `start ..< start + count`
/// (1-based), clipped to the string.
fn substring(s: &str, start: i64, count: Option<i64>) -> &str {
    let from = start.saturating_sub(1);
    let to = count.map_or(i64::MAX, |n| from.saturating_add(n));
    let (from, to) = (from.max(0) as usize, to.max(0) as usize);
    if to <= from {
        return "";
    }
    let byte = |char_pos: usize| s.char_indices().nth(char_pos).map_or(s.len(), |(b, _)| b);
    if s.is_ascii() {
        return &s[from.min(s.len())..to.min(s.len())];
    }
    &s[byte(from)..byte(to)]
}

/// `mask` (rows that matter; None: all) narrowed to the set bits of `rows`.
fn narrow(mask: Option<&NullBuffer>, rows: &BooleanBuffer) -> NullBuffer {
    match mask {
        Some(m) => NullBuffer::new(m.inner() & rows),
        None => NullBuffer::new(rows.clone()),
    }
}

/// CASE, branch by branch: each condition is evaluated on the rows no
/// earlier branch took, and each value only on the rows its branch took,
/// so `CASE WHEN b <> 0 THEN a / b END` never divides by zero.
fn eval_case(
    batch: &RecordBatch,
    mask: Option<&NullBuffer>,
    branches: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    data_type: &DataType,
) -> Result<ColumnarValue> {
    let len = batch.num_rows();
    // A fallible part sees only the rows it decides; the others need no
    // mask (rows outside the selection may hold anything).
    let mask_for = |e: &Expr, rows: &BooleanBuffer| -> Option<NullBuffer> {
        if e.is_fallible() {
            Some(narrow(mask, rows))
        } else {
            mask.cloned()
        }
    };
    // Rows no branch has taken yet.
    let mut open = BooleanBuffer::new_set(len);
    let mut taken = Vec::with_capacity(branches.len());
    for (when, _) in branches {
        let w = as_bool(when.eval(batch, mask_for(when, &open).as_ref())?, len)?;
        // TRUE only: a NULL condition does not take the row.
        let hit = match w.nulls() {
            Some(n) => w.values() & n.inner(),
            None => w.values().clone(),
        };
        let hit = &hit & &open;
        open = &open & &!&hit;
        taken.push(hit);
    }
    let mut out = match otherwise {
        Some(e) => e
            .eval(batch, mask_for(e, &open).as_ref())?
            .into_array(len)?,
        None => new_null_array(data_type, len),
    };
    for ((_, then), hit) in branches.iter().zip(taken).rev() {
        if hit.count_set_bits() == 0 {
            continue;
        }
        let v = then
            .eval(batch, mask_for(then, &hit).as_ref())?
            .into_array(len)?;
        out = zip(&BooleanArray::new(hit, None), &v, &out)?;
    }
    Ok(ColumnarValue::Array(out))
}
