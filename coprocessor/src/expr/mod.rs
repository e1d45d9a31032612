//! Typed scalar expressions.
//!
//! An [`Expr`] is built through constructors ([`Expr::arith`],
//! [`Expr::compare`], ...) that check types and insert the implicit casts, so
//! a built expression is always well-typed. Compute builds expressions while
//! planning SQL, ships them as protobuf, and the storage process rebuilds
//! them with [`Expr::from_proto`] through the very same constructors: both
//! sides agree on every type and every cast.
//!
//! TYPE RULES (exact decimals, after SQL and MySQL/TiDB)
//!
//! * Any DOUBLE operand makes the operation DOUBLE.
//! * BIGINT ± * BIGINT is BIGINT, checked; BIGINT / BIGINT is decimal.
//! * An integer next to a decimal acts as DECIMAL(19,0) (a literal as
//!   DECIMAL(digits,0)). For DECIMAL(p1,s1) op DECIMAL(p2,s2):
//!   `+ -`: scale max(s1,s2), precision max(p1−s1, p2−s2) + scale + 1;
//!   `*`: scale s1+s2, precision p1+p2; `/`: scale s1+4, rounded half away
//!   from zero. Precision is capped at 38; a value past it is an overflow
//!   error, never a wrap.
//! * Comparisons bring both sides to one type (decimals to a common scale);
//!   a string literal compared with a DATE is parsed as a date.
//! * Division by zero is an error.
//! * `%` takes BIGINT or DOUBLE operands (a decimal remainder is left to
//!   compute); the result's sign is the dividend's; `% 0` is an error.
//! * CASE values and COALESCE arguments must already share one type (the
//!   planner casts them); conditions are BOOLEAN, and only TRUE takes a
//!   branch. EXTRACT of a DATE is BIGINT; SUBSTRING counts characters from
//!   1, with constant positions.
//!
//! Expressions whose children are all literals are folded while building,
//! so `0.06 - 0.01` reaches storage as the literal `0.05`.
//!
//! EVALUATION works on whole Arrow arrays (see `eval.rs`). Expressions that
//! can fail (arithmetic, casts) see rows outside the current selection as
//! NULL, so a row a filter rejected can never raise an overflow or a
//! division by zero. CASE narrows that further: a condition sees only the
//! rows no earlier branch took, a value only the rows its branch took, so
//! `CASE WHEN b <> 0 THEN a / b END` cannot divide by zero either.

mod bloom;
pub use bloom::mix64;
mod eval;
mod int_set;
mod like;
pub mod scalar;
mod wire;

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema};

pub use bloom::Bloom;
pub use eval::ColumnarValue;
pub use int_set::IntSet;
use int_set::IN_LIST_HASH_AT;
pub use scalar::ScalarValue;

use crate::types::{self, digits_of, sql_name, MAX_DECIMAL_PRECISION};
use crate::{internal, invalid_input, Error, Result};

/// How many levels an expression may nest in a coprocessor request.
/// prost refuses any message nested more than 100 levels (its decoder's
/// fixed limit); an expression level costs two (`Expr`, `ScalarFunc`) and
/// a request wraps its expressions in at most five more, so 40 keeps
/// every request decodable. Compute leaves deeper expressions in
/// DataFusion rather than push them down; a store refuses them by name.
/// Chains of AND or OR are one level (`Expr::Logic` is n-ary).
pub const MAX_WIRE_DEPTH: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Plus,
    Minus,
    Multiply,
    Divide,
    /// `%`: BIGINT or DOUBLE operands only; the sign follows the dividend.
    Modulo,
}

/// A field of a DATE (`EXTRACT(field FROM d)`, `date_part('field', d)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatePart {
    Year,
    Quarter,
    Month,
    /// ISO 8601 week of the year.
    Week,
    Day,
    /// Day of the year, 1 to 366.
    DayOfYear,
    /// Day of the week, Sunday = 0.
    DayOfWeek,
}

impl DatePart {
    /// The part a SQL name stands for (case-insensitive).
    pub fn parse(name: &str) -> Option<DatePart> {
        Some(match name.to_ascii_lowercase().as_str() {
            "year" => DatePart::Year,
            "quarter" | "qtr" => DatePart::Quarter,
            "month" => DatePart::Month,
            "week" => DatePart::Week,
            "day" => DatePart::Day,
            "doy" => DatePart::DayOfYear,
            "dow" => DatePart::DayOfWeek,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DatePart::Year => "year",
            DatePart::Quarter => "quarter",
            DatePart::Month => "month",
            DatePart::Week => "week",
            DatePart::Day => "day",
            DatePart::DayOfYear => "doy",
            DatePart::DayOfWeek => "dow",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogicOp {
    And,
    Or,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Column `index` of the input batch.
    Column {
        index: usize,
        data_type: DataType,
    },
    Literal(ScalarValue),
    Arith {
        op: ArithOp,
        left: Box<Expr>,
        right: Box<Expr>,
        data_type: DataType,
    },
    Negate(Box<Expr>),
    /// Both sides have the same type.
    Compare {
        op: CmpOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    /// Two or more BOOLEAN arguments. A chain of one operator is one
    /// node, flattened as it is built ([`Expr::logic`]), so a long OR is
    /// one level deep here and on the wire.
    Logic {
        op: LogicOp,
        args: Vec<Expr>,
    },
    Not(Box<Expr>),
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    /// The list has the expression's type. A long list of integers (a
    /// join's keys) also has a set of its members (`int_set.rs`), built
    /// when first asked for. The
    /// list is shared: a request's plan is compiled once and cloned into
    /// each of its regions' executors (`endpoint.rs`).
    InList {
        expr: Box<Expr>,
        list: Arc<[ScalarValue]>,
        negated: bool,
        set: Option<IntSet>,
    },
    /// TRUE when a BIGINT may be one of a join's build keys, FALSE when
    /// it certainly is not, NULL for NULL (see `bloom.rs`).
    InBloom {
        expr: Box<Expr>,
        filter: Bloom,
    },
    Like {
        expr: Box<Expr>,
        pattern: String,
        negated: bool,
    },
    Cast {
        expr: Box<Expr>,
        to: DataType,
    },
    /// `CASE WHEN c THEN v … [ELSE e] END`: the first branch whose
    /// condition is TRUE gives the value; none gives `otherwise` (NULL
    /// without one). Every value has `data_type`.
    Case {
        branches: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
        data_type: DataType,
    },
    /// The first non-NULL argument; all have one type.
    Coalesce(Vec<Expr>),
    /// A field of a DATE, as BIGINT.
    DatePart {
        part: DatePart,
        expr: Box<Expr>,
    },
    /// The characters of a string from the 1-based `start`, `len` of them
    /// (to the end without one), under SQL's rules: positions before the
    /// first character count against `len`.
    Substring {
        expr: Box<Expr>,
        start: i64,
        len: Option<i64>,
    },
    /// A string's length in bytes, as BIGINT (`octet_length`).
    OctetLength(Box<Expr>),
}

impl ArithOp {
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Plus => "+",
            ArithOp::Minus => "-",
            ArithOp::Multiply => "*",
            ArithOp::Divide => "/",
            ArithOp::Modulo => "%",
        }
    }
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The operator with its operands swapped: `a < b` is `b > a`.
    pub fn flip(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Eq,
            CmpOp::Ne => CmpOp::Ne,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
        }
    }
}

/// The decimal type an integer or decimal expression acts as next to a
/// decimal.
fn as_decimal(e: &Expr) -> Option<(u8, i8)> {
    match (e, e.data_type()) {
        (_, DataType::Decimal128(p, s)) => Some((p, s)),
        (Expr::Literal(ScalarValue::Int64(v)), _) => Some((digits_of(*v as i128), 0)),
        (_, DataType::Int64) => Some((19, 0)),
        _ => None,
    }
}

fn cap(p: u32) -> u8 {
    p.min(MAX_DECIMAL_PRECISION as u32) as u8
}

impl Expr {
    // ------------------------------------------------------------ constructors

    pub fn column(index: usize, schema: &Schema) -> Result<Expr> {
        let field = schema
            .fields()
            .get(index)
            .ok_or_else(|| invalid_input!("column index {index} out of range"))?;
        Ok(Expr::Column {
            index,
            data_type: field.data_type().clone(),
        })
    }

    pub fn literal(v: ScalarValue) -> Expr {
        Expr::Literal(v)
    }

    /// `expr` converted to `to`; a no-op when it already has that type.
    pub fn cast(expr: Expr, to: DataType) -> Result<Expr> {
        let from = expr.data_type();
        if from == to {
            return Ok(expr);
        }
        let ok = from == DataType::Null
            || match (&from, &to) {
                (a, b) if types::is_numeric(a) && types::is_numeric(b) => true,
                (DataType::Utf8, _) | (_, DataType::Utf8) => to != DataType::Boolean,
                (DataType::Date32, DataType::Date32) => true,
                // Days since 1970-01-01, as Arrow (and DataFusion) cast it.
                (DataType::Date32, DataType::Int64) => true,
                (DataType::Boolean, DataType::Boolean) => true,
                _ => false,
            };
        if !ok {
            return Err(invalid_input!(
                "cannot cast {} to {}",
                sql_name(&from),
                sql_name(&to)
            ));
        }
        fold(Expr::Cast {
            expr: Box::new(expr),
            to,
        })
    }

    pub fn arith(op: ArithOp, left: Expr, right: Expr) -> Result<Expr> {
        let (lt, rt) = (left.data_type(), right.data_type());
        let bad = || {
            invalid_input!(
                "cannot apply {} to {} and {}",
                op.symbol(),
                sql_name(&lt),
                sql_name(&rt)
            )
        };
        if lt == DataType::Null || rt == DataType::Null {
            // NULL op x is NULL of x's type (BIGINT if both are untyped).
            let other = if lt == DataType::Null { &rt } else { &lt };
            if *other != DataType::Null && !types::is_numeric(other) {
                return Err(bad());
            }
            let t = if *other == DataType::Null {
                DataType::Int64
            } else {
                other.clone()
            };
            return Ok(Expr::Literal(ScalarValue::Null(t)));
        }
        if !types::is_numeric(&lt) || !types::is_numeric(&rt) {
            return Err(bad());
        }
        if op == ArithOp::Modulo
            && !matches!(
                (&lt, &rt),
                (DataType::Int64, DataType::Int64)
                    | (DataType::Float64, DataType::Float64 | DataType::Int64)
                    | (DataType::Int64, DataType::Float64)
            )
        {
            // A decimal remainder's type differs between engines; it is
            // left to compute.
            return Err(bad());
        }
        if lt == DataType::Float64 || rt == DataType::Float64 {
            let left = Expr::cast(left, DataType::Float64)?;
            let right = Expr::cast(right, DataType::Float64)?;
            return fold(Expr::Arith {
                op,
                left: Box::new(left),
                right: Box::new(right),
                data_type: DataType::Float64,
            });
        }
        if lt == DataType::Int64 && rt == DataType::Int64 && op != ArithOp::Divide {
            return fold(Expr::Arith {
                op,
                left: Box::new(left),
                right: Box::new(right),
                data_type: DataType::Int64,
            });
        }
        let (p1, s1) = as_decimal(&left).ok_or_else(bad)?;
        let (p2, s2) = as_decimal(&right).ok_or_else(bad)?;
        let (p1, s1, p2, s2) = (p1 as u32, s1 as u32, p2 as u32, s2 as u32);
        let (p, s) = match op {
            ArithOp::Plus | ArithOp::Minus => {
                let s = s1.max(s2);
                ((p1 - s1).max(p2 - s2) + s + 1, s)
            }
            ArithOp::Multiply => (p1 + p2, s1 + s2),
            ArithOp::Modulo => return Err(bad()),
            ArithOp::Divide => {
                let s = (s1 + 4).max(s2).min(MAX_DECIMAL_PRECISION as u32);
                (p1 - s1 + s2 + s, s)
            }
        };
        if s > MAX_DECIMAL_PRECISION as u32 {
            return Err(Error::Overflow(format!(
                "result scale {s} of {} {} {} exceeds {MAX_DECIMAL_PRECISION}",
                sql_name(&lt),
                op.symbol(),
                sql_name(&rt)
            )));
        }
        let left = Expr::cast(left, DataType::Decimal128(cap(p1), s1 as i8))?;
        let right = Expr::cast(right, DataType::Decimal128(cap(p2), s2 as i8))?;
        fold(Expr::Arith {
            op,
            left: Box::new(left),
            right: Box::new(right),
            data_type: DataType::Decimal128(cap(p.max(s).max(1)), s as i8),
        })
    }

    pub fn negate(expr: Expr) -> Result<Expr> {
        let t = expr.data_type();
        if !types::is_numeric(&t) && t != DataType::Null {
            return Err(invalid_input!("cannot negate {}", sql_name(&t)));
        }
        fold(Expr::Negate(Box::new(expr)))
    }

    /// The type both sides of a comparison are brought to.
    fn comparison_type(left: &Expr, right: &Expr) -> Result<DataType> {
        let (lt, rt) = (left.data_type(), right.data_type());
        let bad = || invalid_input!("cannot compare {} with {}", sql_name(&lt), sql_name(&rt));
        Ok(match (&lt, &rt) {
            (a, b) if a == b => lt.clone(),
            (DataType::Null, other) | (other, DataType::Null) => other.clone(),
            (DataType::Float64, b) if types::is_numeric(b) => DataType::Float64,
            (a, DataType::Float64) if types::is_numeric(a) => DataType::Float64,
            (a, b) if types::is_numeric(a) && types::is_numeric(b) => {
                let (p1, s1) = as_decimal(left).ok_or_else(bad)?;
                let (p2, s2) = as_decimal(right).ok_or_else(bad)?;
                let s = s1.max(s2);
                let int = (p1 as i32 - s1 as i32).max(p2 as i32 - s2 as i32);
                DataType::Decimal128(cap((int + s as i32).max(1) as u32), s)
            }
            (DataType::Date32, DataType::Utf8) if matches!(right, Expr::Literal(_)) => {
                DataType::Date32
            }
            (DataType::Utf8, DataType::Date32) if matches!(left, Expr::Literal(_)) => {
                DataType::Date32
            }
            _ => return Err(bad()),
        })
    }

    pub fn compare(op: CmpOp, left: Expr, right: Expr) -> Result<Expr> {
        let t = Expr::comparison_type(&left, &right)?;
        let left = Expr::cast(left, t.clone())?;
        let right = Expr::cast(right, t)?;
        fold(Expr::Compare {
            op,
            left: Box::new(left),
            right: Box::new(right),
        })
    }

    /// Checks that `e` has type `want` (or is an untyped NULL).
    fn expect_type(e: &Expr, want: &DataType, what: &str) -> Result<()> {
        match e.data_type() {
            DataType::Null => Ok(()),
            t if t == *want => Ok(()),
            other => Err(invalid_input!(
                "{what} needs a {} operand, got {}",
                sql_name(want),
                sql_name(&other)
            )),
        }
    }

    fn expect_boolean(e: &Expr, what: &str) -> Result<()> {
        Expr::expect_type(e, &DataType::Boolean, what)
    }

    pub fn logic(op: LogicOp, left: Expr, right: Expr) -> Result<Expr> {
        let name = if op == LogicOp::And { "AND" } else { "OR" };
        Expr::expect_boolean(&left, name)?;
        Expr::expect_boolean(&right, name)?;
        let left = Expr::cast(left, DataType::Boolean)?;
        let right = Expr::cast(right, DataType::Boolean)?;
        // A left-deep chain (how SQL's `a OR b OR c` parses) appends to
        // the node already built, in amortized constant time.
        let mut args = match left {
            Expr::Logic { op: o, args } if o == op => args,
            other => vec![other],
        };
        match right {
            Expr::Logic { op: o, args: more } if o == op => args.extend(more),
            other => args.push(other),
        }
        fold(Expr::Logic { op, args })
    }

    /// `args[0] op args[1] op …`: two or more.
    pub fn logic_n(op: LogicOp, args: Vec<Expr>) -> Result<Expr> {
        if args.len() < 2 {
            return Err(invalid_input!("{op:?} takes two or more arguments"));
        }
        let mut args = args.into_iter();
        let first = args.next().expect("two or more");
        args.try_fold(first, |acc, e| Expr::logic(op, acc, e))
    }

    /// How many levels deep the expression nests (a column or literal
    /// is one).
    pub fn depth(&self) -> usize {
        let mut below = 0;
        self.visit_children(&mut |c| below = below.max(c.depth()));
        1 + below
    }

    pub fn and(left: Expr, right: Expr) -> Result<Expr> {
        Expr::logic(LogicOp::And, left, right)
    }

    pub fn logical_not(expr: Expr) -> Result<Expr> {
        Expr::expect_boolean(&expr, "NOT")?;
        fold(Expr::Not(Box::new(Expr::cast(expr, DataType::Boolean)?)))
    }

    pub fn is_null(expr: Expr, negated: bool) -> Result<Expr> {
        fold(Expr::IsNull {
            expr: Box::new(expr),
            negated,
        })
    }

    /// `expr [NOT] BETWEEN low AND high`, as `low <= expr AND expr <= high`.
    pub fn between(expr: Expr, low: Expr, high: Expr, negated: bool) -> Result<Expr> {
        if negated {
            let lt = Expr::compare(CmpOp::Lt, expr.clone(), low)?;
            let gt = Expr::compare(CmpOp::Gt, expr, high)?;
            Expr::logic(LogicOp::Or, lt, gt)
        } else {
            let ge = Expr::compare(CmpOp::Ge, expr.clone(), low)?;
            let le = Expr::compare(CmpOp::Le, expr, high)?;
            Expr::and(ge, le)
        }
    }

    /// `expr [NOT] IN (list)`; the list must fold to constants.
    pub fn in_list(expr: Expr, list: Vec<Expr>, negated: bool) -> Result<Expr> {
        if list.is_empty() {
            return Err(invalid_input!("IN needs at least one value"));
        }
        // One type for the expression and every element.
        let mut t = expr.data_type();
        for e in &list {
            t = Expr::comparison_type(&Expr::Literal(ScalarValue::Null(t.clone())), e)
                .or_else(|_| Expr::comparison_type(&expr, e))?;
        }
        let expr = Expr::cast(expr, t.clone())?;
        let list = list
            .into_iter()
            .map(|e| match Expr::cast(e, t.clone())? {
                Expr::Literal(v) => Ok(v),
                _ => Err(invalid_input!("IN list values must be constants")),
            })
            .collect::<Result<Vec<_>>>()?;
        let set = IntSet::of(&list);
        fold(Expr::InList {
            expr: Box::new(expr),
            list: list.into(),
            negated,
            set,
        })
    }

    /// `expr [NOT] IN (list)` of BIGINT values (a join's keys).
    pub fn in_int_list(expr: Expr, list: &[i64], negated: bool) -> Result<Expr> {
        if list.is_empty() {
            return Err(invalid_input!("IN needs at least one value"));
        }
        if expr.data_type() != DataType::Int64 {
            let list = list
                .iter()
                .map(|v| Expr::Literal(ScalarValue::Int64(*v)))
                .collect();
            return Expr::in_list(expr, list, negated);
        }
        let list: Arc<[ScalarValue]> = list.iter().copied().map(ScalarValue::Int64).collect();
        let set = IntSet::of(&list);
        fold(Expr::InList {
            expr: Box::new(expr),
            list,
            negated,
            set,
        })
    }

    /// `expr` tested against a Bloom filter of join keys: BIGINT only.
    pub fn in_bloom(expr: Expr, filter: Bloom) -> Result<Expr> {
        if expr.data_type() != DataType::Int64 {
            return Err(invalid_input!(
                "a Bloom filter tests BIGINT keys, not {}",
                sql_name(&expr.data_type())
            ));
        }
        fold(Expr::InBloom {
            expr: Box::new(expr),
            filter,
        })
    }

    pub fn like(expr: Expr, pattern: String, negated: bool) -> Result<Expr> {
        Expr::expect_type(&expr, &DataType::Utf8, "LIKE")?;
        fold(Expr::Like {
            expr: Box::new(Expr::cast(expr, DataType::Utf8)?),
            pattern,
            negated,
        })
    }

    /// `CASE WHEN … THEN … [ELSE …] END`. Conditions must be BOOLEAN;
    /// values must have one type (untyped NULLs take it).
    pub fn case(branches: Vec<(Expr, Expr)>, otherwise: Option<Expr>) -> Result<Expr> {
        if branches.is_empty() {
            return Err(invalid_input!("CASE needs at least one WHEN"));
        }
        let mut values: Vec<Expr> = branches.iter().map(|(_, v)| v.clone()).collect();
        values.extend(otherwise.clone());
        let data_type = common_type(&values, "CASE")?;
        let mut built = Vec::with_capacity(branches.len());
        for (when, then) in branches {
            Expr::expect_boolean(&when, "CASE WHEN")?;
            built.push((
                Expr::cast(when, DataType::Boolean)?,
                Expr::cast(then, data_type.clone())?,
            ));
        }
        let otherwise = match otherwise {
            Some(e) => Some(Box::new(Expr::cast(e, data_type.clone())?)),
            None => None,
        };
        fold(Expr::Case {
            branches: built,
            otherwise,
            data_type,
        })
    }

    /// `COALESCE(a, b, …)`: arguments of one type (untyped NULLs take it).
    pub fn coalesce(args: Vec<Expr>) -> Result<Expr> {
        if args.is_empty() {
            return Err(invalid_input!("COALESCE needs at least one argument"));
        }
        let t = common_type(&args, "COALESCE")?;
        let args = args
            .into_iter()
            .map(|a| Expr::cast(a, t.clone()))
            .collect::<Result<Vec<_>>>()?;
        fold(Expr::Coalesce(args))
    }

    /// `EXTRACT(part FROM expr)` of a DATE, as BIGINT.
    pub fn date_part(part: DatePart, expr: Expr) -> Result<Expr> {
        Expr::expect_type(
            &expr,
            &DataType::Date32,
            &format!("EXTRACT({})", part.name()),
        )?;
        fold(Expr::DatePart {
            part,
            expr: Box::new(Expr::cast(expr, DataType::Date32)?),
        })
    }

    /// `SUBSTRING(expr FROM start [FOR len])`.
    pub fn substring(expr: Expr, start: i64, len: Option<i64>) -> Result<Expr> {
        Expr::expect_type(&expr, &DataType::Utf8, "SUBSTRING")?;
        if let Some(n) = len.filter(|n| *n < 0) {
            return Err(invalid_input!("negative SUBSTRING length {n}"));
        }
        fold(Expr::Substring {
            expr: Box::new(Expr::cast(expr, DataType::Utf8)?),
            start,
            len,
        })
    }

    /// `OCTET_LENGTH(expr)`: bytes, not characters.
    pub fn octet_length(expr: Expr) -> Result<Expr> {
        Expr::expect_type(&expr, &DataType::Utf8, "OCTET_LENGTH")?;
        fold(Expr::OctetLength(Box::new(Expr::cast(
            expr,
            DataType::Utf8,
        )?)))
    }

    // ------------------------------------------------------------ queries

    pub fn data_type(&self) -> DataType {
        match self {
            Expr::Column { data_type, .. } => data_type.clone(),
            Expr::Literal(v) => v.data_type(),
            Expr::Arith { data_type, .. } => data_type.clone(),
            Expr::Negate(e) => e.data_type(),
            Expr::Compare { .. }
            | Expr::Logic { .. }
            | Expr::Not(_)
            | Expr::IsNull { .. }
            | Expr::InList { .. }
            | Expr::InBloom { .. }
            | Expr::Like { .. } => DataType::Boolean,
            Expr::Cast { to, .. } => to.clone(),
            Expr::Case { data_type, .. } => data_type.clone(),
            Expr::Coalesce(args) => args[0].data_type(),
            Expr::DatePart { .. } | Expr::OctetLength(_) => DataType::Int64,
            Expr::Substring { .. } => DataType::Utf8,
        }
    }

    /// True if evaluating can raise an error (overflow, division by zero, a
    /// failed cast); such expressions are evaluated with the selection
    /// applied.
    pub fn is_fallible(&self) -> bool {
        match self {
            Expr::Column { .. } | Expr::Literal(_) => false,
            Expr::Arith { .. } | Expr::Negate(_) | Expr::Cast { .. } => true,
            Expr::Compare { left, right, .. } => left.is_fallible() || right.is_fallible(),
            Expr::Not(e) | Expr::OctetLength(e) => e.is_fallible(),
            Expr::IsNull { expr, .. }
            | Expr::InList { expr, .. }
            | Expr::InBloom { expr, .. }
            | Expr::Like { expr, .. }
            | Expr::DatePart { expr, .. }
            | Expr::Substring { expr, .. } => expr.is_fallible(),
            Expr::Case { .. } | Expr::Coalesce(_) | Expr::Logic { .. } => {
                self.children().iter().any(|c| c.is_fallible())
            }
        }
    }

    /// The input columns this expression reads, ascending, deduplicated.
    pub fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.visit_columns(&mut |i| out.push(i));
        out.sort_unstable();
        out.dedup();
        out
    }

    fn visit_columns(&self, f: &mut impl FnMut(usize)) {
        match self {
            Expr::Column { index, .. } => f(*index),
            Expr::Literal(_) => {}
            other => other.visit_children(&mut |c| c.visit_columns(f)),
        }
    }

    /// Calls `f` with each direct sub-expression.
    fn visit_children(&self, f: &mut impl FnMut(&Expr)) {
        match self {
            Expr::Column { .. } | Expr::Literal(_) => {}
            Expr::Arith { left, right, .. } | Expr::Compare { left, right, .. } => {
                f(left);
                f(right);
            }
            Expr::Negate(e) | Expr::Not(e) | Expr::OctetLength(e) => f(e),
            Expr::IsNull { expr, .. }
            | Expr::InList { expr, .. }
            | Expr::InBloom { expr, .. }
            | Expr::Like { expr, .. }
            | Expr::Cast { expr, .. }
            | Expr::DatePart { expr, .. }
            | Expr::Substring { expr, .. } => f(expr),
            Expr::Case { .. } | Expr::Coalesce(_) | Expr::Logic { .. } => {
                for c in self.children() {
                    f(c);
                }
            }
        }
    }

    /// The sub-expressions of a CASE, COALESCE, AND or OR, in evaluation
    /// order (empty for the other kinds).
    fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Logic { args, .. } => args.iter().collect(),
            Expr::Case {
                branches,
                otherwise,
                ..
            } => branches
                .iter()
                .flat_map(|(w, t)| [w, t])
                .chain(otherwise.as_deref())
                .collect(),
            Expr::Coalesce(args) => args.iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The value of a constant expression (a literal after folding).
    pub fn as_literal(&self) -> Option<&ScalarValue> {
        match self {
            Expr::Literal(v) => Some(v),
            _ => None,
        }
    }

    /// A rough per-row cost, to evaluate cheap conjuncts first.
    pub fn cost(&self) -> u32 {
        match self {
            Expr::Column { .. } | Expr::Literal(_) => 0,
            Expr::Compare { left, right, .. } => {
                let string = matches!(left.data_type(), DataType::Utf8);
                1 + left.cost() + right.cost() + if string { 4 } else { 0 }
            }
            Expr::Arith { left, right, .. } => 2 + left.cost() + right.cost(),
            Expr::Logic { args, .. } => {
                args.len() as u32 - 1 + args.iter().map(|a| a.cost()).sum::<u32>()
            }
            Expr::Negate(e) | Expr::Not(e) => 1 + e.cost(),
            Expr::IsNull { expr, .. } => 1 + expr.cost(),
            Expr::InList {
                expr, set: Some(_), ..
            } => 4 + expr.cost(),
            Expr::InList { expr, list, .. } => list.len() as u32 + expr.cost(),
            Expr::InBloom { expr, .. } => 5 + expr.cost(),
            Expr::Like { expr, .. } => 8 + expr.cost(),
            Expr::Cast { expr, .. } => 3 + expr.cost(),
            Expr::Case { .. } | Expr::Coalesce(_) => {
                2 + self.children().iter().map(|c| c.cost()).sum::<u32>()
            }
            Expr::DatePart { expr, .. } => 3 + expr.cost(),
            Expr::Substring { expr, .. } => 8 + expr.cost(),
            Expr::OctetLength(e) => 1 + e.cost(),
        }
    }
}

/// The one type of CASE values or COALESCE arguments: they must agree,
/// save untyped NULLs.
fn common_type(values: &[Expr], what: &str) -> Result<DataType> {
    let mut t = DataType::Null;
    for v in values {
        let vt = v.data_type();
        if vt == DataType::Null || vt == t {
            continue;
        }
        if t != DataType::Null {
            return Err(invalid_input!(
                "{what} mixes {} and {}",
                sql_name(&t),
                sql_name(&vt)
            ));
        }
        t = vt;
    }
    Ok(t)
}

/// Evaluates an expression whose inputs are all constants, once, while
/// building. Errors (overflow, division by zero) surface at planning.
fn fold(e: Expr) -> Result<Expr> {
    let constant = match &e {
        Expr::Column { .. } | Expr::Literal(_) => false,
        Expr::Arith { left, right, .. } | Expr::Compare { left, right, .. } => {
            left.as_literal().is_some() && right.as_literal().is_some()
        }
        Expr::Negate(x) | Expr::Not(x) | Expr::OctetLength(x) => x.as_literal().is_some(),
        Expr::IsNull { expr, .. }
        | Expr::InList { expr, .. }
        | Expr::InBloom { expr, .. }
        | Expr::Like { expr, .. }
        | Expr::Cast { expr, .. }
        | Expr::DatePart { expr, .. }
        | Expr::Substring { expr, .. } => expr.as_literal().is_some(),
        // (No allocation: a long chain is folded at every link.)
        Expr::Logic { args, .. } => args.iter().all(|a| a.as_literal().is_some()),
        Expr::Case { .. } | Expr::Coalesce(_) => {
            e.children().iter().all(|c| c.as_literal().is_some())
        }
    };
    if !constant {
        return Ok(e);
    }
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .map_err(|e| internal!("{e}"))?;
    let arr = e.evaluate(&one_row, None)?.into_array(1)?;
    Ok(Expr::Literal(ScalarValue::from_array(arr.as_ref(), 0)?))
}

#[cfg(test)]
mod tests;
