//! Rendering logical and bound expressions as SQL-like text, for default
//! column names and EXPLAIN.

use quarry_coprocessor::expr::{ArithOp, CmpOp, Expr, LogicOp, ScalarValue};
use quarry_coprocessor::types::sql_name;
use quarry_proto::compute::{logical_expr::Kind, LogicalExpr};
use quarry_proto::coprocessor::{AggKind, FuncKind};

fn func_symbol(op: i32) -> &'static str {
    match FuncKind::try_from(op).unwrap_or(FuncKind::FuncUnspecified) {
        FuncKind::Plus => "+",
        FuncKind::Minus => "-",
        FuncKind::Multiply => "*",
        FuncKind::Divide => "/",
        FuncKind::Eq => "=",
        FuncKind::Ne => "<>",
        FuncKind::Lt => "<",
        FuncKind::Le => "<=",
        FuncKind::Gt => ">",
        FuncKind::Ge => ">=",
        FuncKind::And => "AND",
        FuncKind::Or => "OR",
        _ => "?",
    }
}

pub fn agg_name(kind: i32) -> &'static str {
    match AggKind::try_from(kind).unwrap_or(AggKind::AggUnspecified) {
        AggKind::CountStar | AggKind::Count => "count",
        AggKind::Sum => "sum",
        AggKind::Avg => "avg",
        AggKind::Min => "min",
        AggKind::Max => "max",
        AggKind::AggUnspecified => "?",
    }
}

/// `sum(l_extendedprice * (1 - l_discount))`, as a user would write it.
pub fn logical(e: &LogicalExpr) -> String {
    let sub = |x: &Option<Box<LogicalExpr>>| x.as_deref().map(logical).unwrap_or_default();
    match e.kind.as_ref() {
        None => String::new(),
        Some(Kind::Column(c)) => c.clone(),
        Some(Kind::Literal(l)) => ScalarValue::from_proto(l)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| "?".into()),
        Some(Kind::Binary(b)) => {
            format!("({} {} {})", sub(&b.left), func_symbol(b.op), sub(&b.right))
        }
        Some(Kind::Not(x)) => format!("NOT {}", logical(x)),
        Some(Kind::Negate(x)) => format!("-{}", logical(x)),
        Some(Kind::IsNull(x)) => format!(
            "{} IS {}NULL",
            sub(&x.expr),
            if x.negated { "NOT " } else { "" }
        ),
        Some(Kind::Between(x)) => format!(
            "{} {}BETWEEN {} AND {}",
            sub(&x.expr),
            if x.negated { "NOT " } else { "" },
            sub(&x.low),
            sub(&x.high)
        ),
        Some(Kind::InList(x)) => format!(
            "{} {}IN ({})",
            sub(&x.expr),
            if x.negated { "NOT " } else { "" },
            x.list.iter().map(logical).collect::<Vec<_>>().join(", ")
        ),
        Some(Kind::Like(x)) => format!(
            "{} {}LIKE '{}'",
            sub(&x.expr),
            if x.negated { "NOT " } else { "" },
            x.pattern
        ),
        Some(Kind::Aggregate(a)) => match &a.arg {
            None => "count(*)".into(),
            Some(arg) => format!("{}({})", agg_name(a.kind), strip_parens(&logical(arg))),
        },
        Some(Kind::Cast(c)) => format!(
            "CAST({} AS {})",
            sub(&c.expr),
            c.to.as_ref()
                .and_then(|t| quarry_coprocessor::types::arrow_type(t).ok())
                .map(|t| sql_name(&t))
                .unwrap_or_default()
        ),
    }
}

fn strip_parens(s: &str) -> &str {
    if s.starts_with('(') && s.ends_with(')') {
        &s[1..s.len() - 1]
    } else {
        s
    }
}

/// A bound expression with column names, for EXPLAIN.
pub fn bound(e: &Expr, names: &[String]) -> String {
    let b = |x: &Expr| bound(x, names);
    match e {
        Expr::Column { index, .. } => names
            .get(*index)
            .cloned()
            .unwrap_or_else(|| format!("#{index}")),
        Expr::Literal(v) => v.to_string(),
        Expr::Arith {
            op, left, right, ..
        } => format!("({} {} {})", b(left), ArithOp::symbol(*op), b(right)),
        Expr::Negate(x) => format!("-{}", b(x)),
        Expr::Compare { op, left, right } => {
            format!("{} {} {}", b(left), CmpOp::symbol(*op), b(right))
        }
        Expr::Logic { op, left, right } => format!(
            "({} {} {})",
            b(left),
            if *op == LogicOp::And { "AND" } else { "OR" },
            b(right)
        ),
        Expr::Not(x) => format!("NOT {}", b(x)),
        Expr::IsNull { expr, negated } => {
            format!("{} IS {}NULL", b(expr), if *negated { "NOT " } else { "" })
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => format!(
            "{} {}IN ({})",
            b(expr),
            if *negated { "NOT " } else { "" },
            list.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Expr::Like {
            expr,
            pattern,
            negated,
        } => format!(
            "{} {}LIKE '{pattern}'",
            b(expr),
            if *negated { "NOT " } else { "" }
        ),
        Expr::Cast { expr, to } => format!("CAST({} AS {})", b(expr), sql_name(to)),
    }
}
