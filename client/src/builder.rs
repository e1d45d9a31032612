//! The typed request builder: expressions by column name, rendered as SQL.
//!
//! A [`Request`] is a single-table query built in code instead of written
//! as text. It compiles to one SQL statement ([`Request::to_sql`]) that the
//! server plans like any other, so the typed builder and SQL share the one
//! planner (DataFusion's, with Quarry's pushdown) and give the same answers.
//! Identifiers are always quoted and string literals escaped, so a column
//! or value can never change the statement's shape.

use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// An expression by column name, as SQL text. Every compound expression is
/// parenthesised, so operator precedence is the builder's, not the
/// parser's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr(String);

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `name` as a quoted SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `s` as a SQL string literal.
fn string(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A column of the request's table.
pub fn col(name: &str) -> Expr {
    Expr(ident(name))
}

/// An integer literal.
pub fn lit(v: i64) -> Expr {
    // A negative literal is parenthesised so that `x - -1` stays valid.
    Expr(if v < 0 {
        format!("({v})")
    } else {
        v.to_string()
    })
}

/// An exact decimal literal, e.g. `lit_decimal("0.06")`. Panics on text
/// that is not a decimal number (a programming error, like a bad regex).
pub fn lit_decimal(text: &str) -> Expr {
    let body = text.strip_prefix('-').unwrap_or(text);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits_only = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    assert!(
        !(int.is_empty() && frac.is_empty()) && digits_only(int) && digits_only(frac),
        "not a decimal literal: {text}"
    );
    Expr(if text.starts_with('-') {
        format!("({text})")
    } else {
        text.to_string()
    })
}

/// A date literal `YYYY-MM-DD` (the server checks it).
pub fn lit_date(text: &str) -> Expr {
    Expr(format!("DATE {}", string(text)))
}

impl From<i64> for Expr {
    fn from(v: i64) -> Self {
        lit(v)
    }
}

impl From<&str> for Expr {
    fn from(v: &str) -> Self {
        Expr(string(v))
    }
}

fn binary(op: &str, l: Expr, r: Expr) -> Expr {
    Expr(format!("({l} {op} {r})"))
}

impl Expr {
    pub fn eq(self, o: impl Into<Expr>) -> Expr {
        binary("=", self, o.into())
    }
    pub fn ne(self, o: impl Into<Expr>) -> Expr {
        binary("<>", self, o.into())
    }
    pub fn lt(self, o: impl Into<Expr>) -> Expr {
        binary("<", self, o.into())
    }
    pub fn le(self, o: impl Into<Expr>) -> Expr {
        binary("<=", self, o.into())
    }
    pub fn gt(self, o: impl Into<Expr>) -> Expr {
        binary(">", self, o.into())
    }
    pub fn ge(self, o: impl Into<Expr>) -> Expr {
        binary(">=", self, o.into())
    }
    pub fn and(self, o: Expr) -> Expr {
        binary("AND", self, o)
    }
    pub fn or(self, o: Expr) -> Expr {
        binary("OR", self, o)
    }
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Expr {
        Expr(format!("(NOT {self})"))
    }
    pub fn between(self, low: impl Into<Expr>, high: impl Into<Expr>) -> Expr {
        Expr(format!(
            "({self} BETWEEN {} AND {})",
            low.into(),
            high.into()
        ))
    }
    pub fn in_list(self, list: impl IntoIterator<Item = Expr>) -> Expr {
        let items: Vec<String> = list.into_iter().map(|e| e.0).collect();
        Expr(format!("({self} IN ({}))", items.join(", ")))
    }
    pub fn like(self, pattern: &str) -> Expr {
        Expr(format!("({self} LIKE {})", string(pattern)))
    }
    pub fn is_null(self) -> Expr {
        Expr(format!("({self} IS NULL)"))
    }
    pub fn is_not_null(self) -> Expr {
        Expr(format!("({self} IS NOT NULL)"))
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
arith!(Add, add, "+");
arith!(Sub, sub, "-");
arith!(Mul, mul, "*");
arith!(Div, div, "/");

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr(format!("(- {self})"))
    }
}

fn call(name: &str, arg: Expr) -> Expr {
    Expr(format!("{name}({arg})"))
}

pub fn sum(e: Expr) -> Expr {
    call("sum", e)
}
pub fn avg(e: Expr) -> Expr {
    call("avg", e)
}
pub fn min(e: Expr) -> Expr {
    call("min", e)
}
pub fn max(e: Expr) -> Expr {
    call("max", e)
}
pub fn count(e: Expr) -> Expr {
    call("count", e)
}
pub fn count_star() -> Expr {
    Expr("count(*)".into())
}

/// A single-table request: filters, grouping, aggregates, order, limit.
/// Group keys come first in the output, then the aggregates, in the order
/// they were added.
#[derive(Debug, Clone, Default)]
pub struct Request {
    table: String,
    filters: Vec<Expr>,
    group_by: Vec<String>,
    aggregates: Vec<(Expr, String)>,
    having: Option<Expr>,
    order_by: Vec<(Expr, bool)>,
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
        self.filters.push(e);
        self
    }

    /// Groups by a column (output under the column's name).
    pub fn group_by(mut self, column: &str) -> Request {
        self.group_by.push(column.to_string());
        self
    }

    /// Adds an aggregate output named `alias`.
    pub fn aggregate(mut self, e: Expr, alias: &str) -> Request {
        self.aggregates.push((e, alias.to_string()));
        self
    }

    pub fn having(mut self, e: Expr) -> Request {
        self.having = Some(e);
        self
    }

    /// Orders by an output (group key or aggregate alias, via [`col`]) or
    /// an expression.
    pub fn order_by(mut self, e: Expr, descending: bool) -> Request {
        self.order_by.push((e, descending));
        self
    }

    pub fn limit(mut self, n: u64) -> Request {
        self.limit = Some(n);
        self
    }

    /// The request as one SQL statement.
    pub fn to_sql(&self) -> String {
        let mut select: Vec<String> = self.group_by.iter().map(|c| ident(c)).collect();
        select.extend(
            self.aggregates
                .iter()
                .map(|(e, alias)| format!("{e} AS {}", ident(alias))),
        );
        if select.is_empty() {
            select.push("*".into());
        }
        let mut sql = format!("SELECT {} FROM {}", select.join(", "), ident(&self.table));
        if !self.filters.is_empty() {
            let f: Vec<&str> = self.filters.iter().map(|e| e.0.as_str()).collect();
            sql += &format!(" WHERE {}", f.join(" AND "));
        }
        if !self.group_by.is_empty() {
            let g: Vec<String> = self.group_by.iter().map(|c| ident(c)).collect();
            sql += &format!(" GROUP BY {}", g.join(", "));
        }
        if let Some(h) = &self.having {
            sql += &format!(" HAVING {h}");
        }
        if !self.order_by.is_empty() {
            let o: Vec<String> = self
                .order_by
                .iter()
                .map(|(e, desc)| format!("{e} {}", if *desc { "DESC" } else { "ASC" }))
                .collect();
            sql += &format!(" ORDER BY {}", o.join(", "));
        }
        if let Some(l) = self.limit {
            sql += &format!(" LIMIT {l}");
        }
        sql
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_sql_statement_with_quoted_names_and_escaped_strings() {
        let r = Request::table("lineitem")
            .filter(col("l_quantity").lt(24))
            .filter(col("l_shipmode").in_list(["MAIL".into(), "it's".into()]))
            .group_by("l_returnflag")
            .aggregate(
                sum(col("l_extendedprice") * (lit(1) - col("l_discount"))),
                "disc",
            )
            .aggregate(count_star(), "n")
            .having(count_star().gt(lit(-1)))
            .order_by(col("disc"), true)
            .limit(3);
        assert_eq!(
            r.to_sql(),
            "SELECT \"l_returnflag\", sum((\"l_extendedprice\" * (1 - \"l_discount\"))) AS \"disc\", \
             count(*) AS \"n\" FROM \"lineitem\" WHERE (\"l_quantity\" < 24) AND \
             (\"l_shipmode\" IN ('MAIL', 'it''s')) GROUP BY \"l_returnflag\" \
             HAVING (count(*) > (-1)) ORDER BY \"disc\" DESC LIMIT 3"
        );
        assert_eq!(col("a\"b").to_string(), "\"a\"\"b\"");
        assert_eq!(lit_decimal("-0.06").to_string(), "(-0.06)");
        assert_eq!(lit_date("1994-01-01").to_string(), "DATE '1994-01-01'");
    }

    #[test]
    #[should_panic(expected = "not a decimal literal")]
    fn a_malformed_decimal_literal_is_a_programming_error() {
        lit_decimal("1.2.3");
    }
}
