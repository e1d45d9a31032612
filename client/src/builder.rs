//! The typed request builder: expressions by column name, compiled to the
//! `quarry.compute.Query` message that compute plans exactly like SQL.

use std::ops::{Add, Div, Mul, Neg, Sub};

use quarry_proto::compute::{
    logical_expr::Kind, AggregateCall, Between, Binary, InList, IsNull, Like, LogicalExpr,
    OrderByItem, Query, SelectItem,
};
use quarry_proto::coprocessor::{literal::Value, AggKind, Decimal, FuncKind, Literal};

/// An expression by column name.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr(LogicalExpr);

fn ex(kind: Kind) -> Expr {
    Expr(LogicalExpr { kind: Some(kind) })
}

fn literal(v: Value) -> Expr {
    ex(Kind::Literal(Literal {
        value: Some(v),
        field_type: None,
    }))
}

/// A column of the request's table.
pub fn col(name: &str) -> Expr {
    ex(Kind::Column(name.to_string()))
}

/// An integer literal.
pub fn lit(v: i64) -> Expr {
    literal(Value::Int64(v))
}

/// An exact decimal literal, e.g. `lit_decimal("0.06")`. Panics on text
/// that is not a decimal number (a programming error, like a bad regex).
pub fn lit_decimal(text: &str) -> Expr {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let neg = int.starts_with('-');
    let digits: String = int
        .trim_start_matches('-')
        .chars()
        .chain(frac.chars())
        .collect();
    let v: i128 = digits
        .parse::<i128>()
        .unwrap_or_else(|_| panic!("not a decimal literal: {text}"));
    let v = if neg { -v } else { v };
    let precision = digits.trim_start_matches('0').len().max(frac.len()).max(1) as u32;
    literal(Value::Decimal(Decimal {
        hi: (v >> 64) as i64,
        lo: v as u64,
        precision,
        scale: frac.len() as u32,
    }))
}

/// A date literal `YYYY-MM-DD` (compute checks it).
pub fn lit_date(text: &str) -> Expr {
    Expr(LogicalExpr {
        kind: Some(Kind::Cast(Box::new(quarry_proto::compute::Cast {
            expr: Some(Box::new(literal(Value::Utf8(text.to_string())).0)),
            to: Some(quarry_proto::meta::FieldType {
                kind: quarry_proto::meta::TypeKind::Date as i32,
                nullable: true,
                ..Default::default()
            }),
        }))),
    })
}

impl From<i64> for Expr {
    fn from(v: i64) -> Self {
        lit(v)
    }
}

impl From<&str> for Expr {
    fn from(v: &str) -> Self {
        literal(Value::Utf8(v.to_string()))
    }
}

fn binary(op: FuncKind, l: Expr, r: Expr) -> Expr {
    ex(Kind::Binary(Box::new(Binary {
        op: op as i32,
        left: Some(Box::new(l.0)),
        right: Some(Box::new(r.0)),
    })))
}

impl Expr {
    pub fn eq(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Eq, self, o.into())
    }
    pub fn ne(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Ne, self, o.into())
    }
    pub fn lt(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Lt, self, o.into())
    }
    pub fn le(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Le, self, o.into())
    }
    pub fn gt(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Gt, self, o.into())
    }
    pub fn ge(self, o: impl Into<Expr>) -> Expr {
        binary(FuncKind::Ge, self, o.into())
    }
    pub fn and(self, o: Expr) -> Expr {
        binary(FuncKind::And, self, o)
    }
    pub fn or(self, o: Expr) -> Expr {
        binary(FuncKind::Or, self, o)
    }
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Expr {
        ex(Kind::Not(Box::new(self.0)))
    }
    pub fn between(self, low: impl Into<Expr>, high: impl Into<Expr>) -> Expr {
        ex(Kind::Between(Box::new(Between {
            expr: Some(Box::new(self.0)),
            low: Some(Box::new(low.into().0)),
            high: Some(Box::new(high.into().0)),
            negated: false,
        })))
    }
    pub fn in_list(self, list: impl IntoIterator<Item = Expr>) -> Expr {
        ex(Kind::InList(Box::new(InList {
            expr: Some(Box::new(self.0)),
            list: list.into_iter().map(|e| e.0).collect(),
            negated: false,
        })))
    }
    pub fn like(self, pattern: &str) -> Expr {
        ex(Kind::Like(Box::new(Like {
            expr: Some(Box::new(self.0)),
            pattern: pattern.to_string(),
            negated: false,
        })))
    }
    pub fn is_null(self) -> Expr {
        ex(Kind::IsNull(Box::new(IsNull {
            expr: Some(Box::new(self.0)),
            negated: false,
        })))
    }
    pub fn is_not_null(self) -> Expr {
        ex(Kind::IsNull(Box::new(IsNull {
            expr: Some(Box::new(self.0)),
            negated: true,
        })))
    }
}

macro_rules! arith {
    ($tr:ident, $m:ident, $op:expr) => {
        impl<T: Into<Expr>> $tr<T> for Expr {
            type Output = Expr;
            fn $m(self, o: T) -> Expr {
                binary($op, self, o.into())
            }
        }
    };
}
arith!(Add, add, FuncKind::Plus);
arith!(Sub, sub, FuncKind::Minus);
arith!(Mul, mul, FuncKind::Multiply);
arith!(Div, div, FuncKind::Divide);

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        ex(Kind::Negate(Box::new(self.0)))
    }
}

fn agg(kind: AggKind, arg: Option<Expr>) -> Expr {
    ex(Kind::Aggregate(Box::new(AggregateCall {
        kind: kind as i32,
        arg: arg.map(|a| Box::new(a.0)),
    })))
}

pub fn sum(e: Expr) -> Expr {
    agg(AggKind::Sum, Some(e))
}
pub fn avg(e: Expr) -> Expr {
    agg(AggKind::Avg, Some(e))
}
pub fn min(e: Expr) -> Expr {
    agg(AggKind::Min, Some(e))
}
pub fn max(e: Expr) -> Expr {
    agg(AggKind::Max, Some(e))
}
pub fn count(e: Expr) -> Expr {
    agg(AggKind::Count, Some(e))
}
pub fn count_star() -> Expr {
    agg(AggKind::CountStar, None)
}

/// A single-table request: filters, grouping, aggregates, order, limit.
/// Group keys come first in the output, then the aggregates, in the order
/// they were added.
#[derive(Debug, Clone, Default)]
pub struct Request {
    table: String,
    filters: Vec<LogicalExpr>,
    group_by: Vec<(LogicalExpr, String)>,
    aggregates: Vec<(LogicalExpr, String)>,
    having: Option<LogicalExpr>,
    order_by: Vec<OrderByItem>,
    limit: Option<u64>,
}

impl Request {
    pub fn table(name: &str) -> Request {
        Request {
            table: name.to_string(),
            ..Default::default()
        }
    }

    /// Adds a filter; filters are ANDed.
    pub fn filter(mut self, e: Expr) -> Request {
        self.filters.push(e.0);
        self
    }

    /// Groups by a column (output under the column's name).
    pub fn group_by(mut self, column: &str) -> Request {
        self.group_by.push((col(column).0, column.to_string()));
        self
    }

    /// Adds an aggregate output named `alias`.
    pub fn aggregate(mut self, e: Expr, alias: &str) -> Request {
        self.aggregates.push((e.0, alias.to_string()));
        self
    }

    pub fn having(mut self, e: Expr) -> Request {
        self.having = Some(e.0);
        self
    }

    /// Orders by an output (group key or aggregate alias) or expression.
    pub fn order_by(mut self, e: Expr, descending: bool) -> Request {
        self.order_by.push(OrderByItem {
            expr: Some(e.0),
            descending,
            nulls_first: None,
        });
        self
    }

    pub fn limit(mut self, n: u64) -> Request {
        self.limit = Some(n);
        self
    }

    pub fn to_proto(&self) -> Query {
        let select = self
            .group_by
            .iter()
            .chain(&self.aggregates)
            .map(|(e, alias)| SelectItem {
                expr: Some(e.clone()),
                alias: alias.clone(),
                wildcard: false,
            })
            .collect();
        Query {
            table: self.table.clone(),
            select,
            filters: self.filters.clone(),
            group_by: self.group_by.iter().map(|(e, _)| e.clone()).collect(),
            having: self.having.clone(),
            order_by: self.order_by.clone(),
            limit: self.limit,
            offset: 0,
            distinct: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_same_query_message_as_its_fields_say() {
        let r = Request::table("lineitem")
            .filter(col("l_quantity").lt(24))
            .group_by("l_returnflag")
            .aggregate(
                sum(col("l_extendedprice") * (lit(1) - col("l_discount"))),
                "disc",
            )
            .aggregate(count_star(), "n")
            .order_by(col("disc"), true)
            .limit(3);
        let q = r.to_proto();
        assert_eq!(q.table, "lineitem");
        let aliases: Vec<&str> = q.select.iter().map(|s| s.alias.as_str()).collect();
        assert_eq!(aliases, vec!["l_returnflag", "disc", "n"]);
        assert_eq!(q.group_by.len(), 1);
        assert_eq!(q.limit, Some(3));
        assert!(q.order_by[0].descending);
        match lit_decimal("-0.06").0.kind {
            Some(Kind::Literal(Literal {
                value: Some(Value::Decimal(d)),
                ..
            })) => assert_eq!((d.lo as i64, d.precision, d.scale), (-6, 2, 2)),
            other => panic!("{other:?}"),
        }
    }
}
