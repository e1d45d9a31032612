//! The wire form of an [`Expr`]: protobuf out ([`Expr::to_proto`]) and
//! back in through the same checked constructors ([`Expr::from_proto`]),
//! so storage re-derives every type and cast compute derived.

use arrow::datatypes::DataType;
use quarry_proto::coprocessor::{self as pb, expr::Kind, FuncKind};

use super::{
    ArithOp, Bloom, CmpOp, DatePart, Expr, LogicOp, ScalarValue, IN_LIST_HASH_AT, MAX_WIRE_DEPTH,
};
use crate::types;
use crate::{invalid_input, Result};

impl Expr {
    pub fn to_proto(&self) -> Result<pb::Expr> {
        let func = |kind: FuncKind, args: Vec<pb::Expr>| pb::Expr {
            kind: Some(Kind::Func(pb::ScalarFunc {
                kind: kind as i32,
                args,
                cast_to: None,
                ..Default::default()
            })),
        };
        let lit = |v: &ScalarValue| -> Result<pb::Expr> {
            Ok(pb::Expr {
                kind: Some(Kind::Literal(v.to_proto()?)),
            })
        };
        Ok(match self {
            Expr::Column { index, .. } => pb::Expr {
                kind: Some(Kind::Column(*index as u32)),
            },
            Expr::Literal(v) => lit(v)?,
            Expr::Arith {
                op, left, right, ..
            } => {
                let kind = match op {
                    ArithOp::Plus => FuncKind::Plus,
                    ArithOp::Minus => FuncKind::Minus,
                    ArithOp::Multiply => FuncKind::Multiply,
                    ArithOp::Divide => FuncKind::Divide,
                    ArithOp::Modulo => FuncKind::Modulo,
                };
                func(kind, vec![left.to_proto()?, right.to_proto()?])
            }
            Expr::Negate(e) => func(FuncKind::Negate, vec![e.to_proto()?]),
            Expr::Compare { op, left, right } => {
                let kind = match op {
                    CmpOp::Eq => FuncKind::Eq,
                    CmpOp::Ne => FuncKind::Ne,
                    CmpOp::Lt => FuncKind::Lt,
                    CmpOp::Le => FuncKind::Le,
                    CmpOp::Gt => FuncKind::Gt,
                    CmpOp::Ge => FuncKind::Ge,
                };
                func(kind, vec![left.to_proto()?, right.to_proto()?])
            }
            Expr::Logic { op, args } => {
                let kind = match op {
                    LogicOp::And => FuncKind::And,
                    LogicOp::Or => FuncKind::Or,
                };
                let args = args.iter().map(Expr::to_proto).collect::<Result<_>>()?;
                func(kind, args)
            }
            Expr::Not(e) => func(FuncKind::Not, vec![e.to_proto()?]),
            Expr::IsNull { expr, negated } => {
                let kind = if *negated {
                    FuncKind::IsNotNull
                } else {
                    FuncKind::IsNull
                };
                func(kind, vec![expr.to_proto()?])
            }
            Expr::InBloom { expr, filter } => pb::Expr {
                kind: Some(Kind::Func(pb::ScalarFunc {
                    kind: FuncKind::BloomFilter as i32,
                    args: vec![expr.to_proto()?],
                    bloom: filter.to_bytes(),
                    ..Default::default()
                })),
            },
            Expr::InList {
                expr,
                list,
                negated,
                ..
            } => {
                let kind = if *negated {
                    FuncKind::NotInList
                } else {
                    FuncKind::InList
                };
                let ints: Option<Vec<i64>> = list.iter().map(ScalarValue::as_int64).collect();
                if let Some(int_list) = ints.filter(|l| l.len() >= IN_LIST_HASH_AT) {
                    return Ok(pb::Expr {
                        kind: Some(Kind::Func(pb::ScalarFunc {
                            kind: kind as i32,
                            args: vec![expr.to_proto()?],
                            cast_to: None,
                            int_list,
                            ..Default::default()
                        })),
                    });
                }
                let mut args = vec![expr.to_proto()?];
                for v in list.iter() {
                    args.push(lit(v)?);
                }
                func(kind, args)
            }
            Expr::Like {
                expr,
                pattern,
                negated,
            } => {
                let kind = if *negated {
                    FuncKind::NotLike
                } else {
                    FuncKind::Like
                };
                func(
                    kind,
                    vec![expr.to_proto()?, lit(&ScalarValue::Utf8(pattern.clone()))?],
                )
            }
            Expr::Cast { expr, to } => pb::Expr {
                kind: Some(Kind::Func(pb::ScalarFunc {
                    kind: FuncKind::Cast as i32,
                    args: vec![expr.to_proto()?],
                    cast_to: Some(types::field_type(to, true)?),
                    ..Default::default()
                })),
            },
            Expr::Case { .. } => func(
                FuncKind::Case,
                self.children()
                    .into_iter()
                    .map(Expr::to_proto)
                    .collect::<Result<_>>()?,
            ),
            Expr::Coalesce(args) => func(
                FuncKind::Coalesce,
                args.iter().map(Expr::to_proto).collect::<Result<_>>()?,
            ),
            Expr::DatePart { part, expr } => func(
                FuncKind::DatePart,
                vec![
                    lit(&ScalarValue::Utf8(part.name().into()))?,
                    expr.to_proto()?,
                ],
            ),
            Expr::Substring { expr, start, len } => {
                let mut args = vec![expr.to_proto()?, lit(&ScalarValue::Int64(*start))?];
                if let Some(n) = len {
                    args.push(lit(&ScalarValue::Int64(*n))?);
                }
                func(FuncKind::Substring, args)
            }
            Expr::OctetLength(e) => func(FuncKind::OctetLength, vec![e.to_proto()?]),
        })
    }

    /// Rebuilds (and re-checks) an expression over input columns of `input`
    /// types, at most [`MAX_WIRE_DEPTH`] levels deep.
    pub fn from_proto(e: &pb::Expr, input: &[DataType]) -> Result<Expr> {
        Expr::from_proto_depth(e, input, 0)
    }

    fn from_proto_depth(e: &pb::Expr, input: &[DataType], depth: usize) -> Result<Expr> {
        if depth >= MAX_WIRE_DEPTH {
            return Err(invalid_input!(
                "expression nested deeper than {MAX_WIRE_DEPTH} levels (the limit on the wire)"
            ));
        }
        match e.kind.as_ref() {
            None => Err(invalid_input!("empty expression")),
            Some(Kind::Column(i)) => {
                let i = *i as usize;
                let data_type = input
                    .get(i)
                    .ok_or_else(|| {
                        invalid_input!("column index {i} out of range ({} columns)", input.len())
                    })?
                    .clone();
                Ok(Expr::Column {
                    index: i,
                    data_type,
                })
            }
            Some(Kind::Literal(l)) => Ok(Expr::Literal(ScalarValue::from_proto(l)?)),
            Some(Kind::Func(f)) => {
                let kind = FuncKind::try_from(f.kind)
                    .map_err(|_| invalid_input!("unknown function kind {}", f.kind))?;
                if kind == FuncKind::BloomFilter {
                    let [value] = f.args.as_slice() else {
                        return Err(invalid_input!("a Bloom filter tests one value"));
                    };
                    let value = Expr::from_proto_depth(value, input, depth + 1)?;
                    return Expr::in_bloom(value, Bloom::from_bytes(&f.bloom)?);
                }
                if !f.int_list.is_empty() {
                    let negated = match kind {
                        FuncKind::InList => false,
                        FuncKind::NotInList => true,
                        other => return Err(invalid_input!("{other:?} takes no packed list")),
                    };
                    let [value] = f.args.as_slice() else {
                        return Err(invalid_input!("a packed IN list tests one value"));
                    };
                    let value = Expr::from_proto_depth(value, input, depth + 1)?;
                    return Expr::in_int_list(value, &f.int_list, negated);
                }
                let args = f
                    .args
                    .iter()
                    .map(|a| Expr::from_proto_depth(a, input, depth + 1))
                    .collect::<Result<Vec<_>>>()?;
                build_func(kind, args, f.cast_to.as_ref())
            }
        }
    }
}

/// Applies a function kind to built arguments (the proto path's dispatch).
fn build_func(
    kind: FuncKind,
    mut args: Vec<Expr>,
    cast_to: Option<&quarry_proto::meta::FieldType>,
) -> Result<Expr> {
    let n = args.len();
    let arity = |want: usize| -> Result<()> {
        if n == want {
            Ok(())
        } else {
            Err(invalid_input!("{kind:?} takes {want} argument(s), got {n}"))
        }
    };
    let two = |args: &mut Vec<Expr>| -> (Expr, Expr) {
        let r = args.pop().expect("arity checked");
        let l = args.pop().expect("arity checked");
        (l, r)
    };
    match kind {
        FuncKind::Plus
        | FuncKind::Minus
        | FuncKind::Multiply
        | FuncKind::Divide
        | FuncKind::Modulo => {
            arity(2)?;
            let op = match kind {
                FuncKind::Plus => ArithOp::Plus,
                FuncKind::Minus => ArithOp::Minus,
                FuncKind::Multiply => ArithOp::Multiply,
                FuncKind::Modulo => ArithOp::Modulo,
                _ => ArithOp::Divide,
            };
            let (l, r) = two(&mut args);
            Expr::arith(op, l, r)
        }
        FuncKind::Negate => {
            arity(1)?;
            Expr::negate(args.pop().expect("arity"))
        }
        FuncKind::Eq | FuncKind::Ne | FuncKind::Lt | FuncKind::Le | FuncKind::Gt | FuncKind::Ge => {
            arity(2)?;
            let op = match kind {
                FuncKind::Eq => CmpOp::Eq,
                FuncKind::Ne => CmpOp::Ne,
                FuncKind::Lt => CmpOp::Lt,
                FuncKind::Le => CmpOp::Le,
                FuncKind::Gt => CmpOp::Gt,
                _ => CmpOp::Ge,
            };
            let (l, r) = two(&mut args);
            Expr::compare(op, l, r)
        }
        FuncKind::And | FuncKind::Or => {
            let op = if kind == FuncKind::And {
                LogicOp::And
            } else {
                LogicOp::Or
            };
            Expr::logic_n(op, args)
        }
        FuncKind::Not => {
            arity(1)?;
            Expr::logical_not(args.pop().expect("arity"))
        }
        FuncKind::IsNull | FuncKind::IsNotNull => {
            arity(1)?;
            Expr::is_null(args.pop().expect("arity"), kind == FuncKind::IsNotNull)
        }
        FuncKind::InList | FuncKind::NotInList => {
            if n < 2 {
                return Err(invalid_input!("IN needs a value and a list"));
            }
            let list = args.split_off(1);
            Expr::in_list(
                args.pop().expect("n >= 2"),
                list,
                kind == FuncKind::NotInList,
            )
        }
        FuncKind::Between | FuncKind::NotBetween => {
            arity(3)?;
            let high = args.pop().expect("arity");
            let low = args.pop().expect("arity");
            Expr::between(
                args.pop().expect("arity"),
                low,
                high,
                kind == FuncKind::NotBetween,
            )
        }
        FuncKind::Like | FuncKind::NotLike => {
            arity(2)?;
            let (e, p) = two(&mut args);
            match p {
                Expr::Literal(ScalarValue::Utf8(pattern)) => {
                    Expr::like(e, pattern, kind == FuncKind::NotLike)
                }
                _ => Err(invalid_input!("LIKE needs a constant string pattern")),
            }
        }
        FuncKind::Cast => {
            arity(1)?;
            let to = cast_to.ok_or_else(|| invalid_input!("CAST without a target type"))?;
            Expr::cast(args.pop().expect("arity"), types::arrow_type(to)?)
        }
        FuncKind::Case => {
            if n < 2 {
                return Err(invalid_input!("CASE needs a condition and a value"));
            }
            let otherwise = if n % 2 == 1 { args.pop() } else { None };
            let mut branches = Vec::with_capacity(n / 2);
            let mut it = args.into_iter();
            while let (Some(w), Some(t)) = (it.next(), it.next()) {
                branches.push((w, t));
            }
            Expr::case(branches, otherwise)
        }
        FuncKind::Coalesce => Expr::coalesce(args),
        FuncKind::DatePart => {
            arity(2)?;
            let (p, e) = two(&mut args);
            match p {
                Expr::Literal(ScalarValue::Utf8(name)) => {
                    let part = DatePart::parse(&name)
                        .ok_or_else(|| invalid_input!("unknown date part '{name}'"))?;
                    Expr::date_part(part, e)
                }
                _ => Err(invalid_input!("DATE_PART needs a constant part name")),
            }
        }
        FuncKind::Substring => {
            if !(2..=3).contains(&n) {
                return Err(invalid_input!("SUBSTRING takes 2 or 3 arguments, got {n}"));
            }
            let int = |e: Option<Expr>| match e {
                Some(Expr::Literal(ScalarValue::Int64(v))) => Ok(v),
                _ => Err(invalid_input!("SUBSTRING needs constant BIGINT positions")),
            };
            let len = if n == 3 { Some(int(args.pop())?) } else { None };
            let start = int(args.pop())?;
            Expr::substring(args.pop().expect("n >= 2"), start, len)
        }
        FuncKind::OctetLength => {
            arity(1)?;
            Expr::octet_length(args.pop().expect("one argument"))
        }
        FuncKind::BloomFilter => Err(invalid_input!("a Bloom filter needs its bits")),
        FuncKind::FuncUnspecified => Err(invalid_input!("unspecified function")),
    }
}
