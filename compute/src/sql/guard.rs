//! The limits every statement's text passes before anything plans it: its
//! size, and how deeply its expressions nest.
//!
//! Parsing, planning, optimizing, evaluating and even dropping an
//! expression tree all recurse over it, so a statement nested deeply
//! enough (`SELECT 1+1+…+1` with a few thousand terms is only a few
//! kilobytes) would overflow a thread's stack and abort the whole process.
//! The parser itself is safe: sqlparser (with DataFusion's
//! `recursive_protection`) grows its stack on the heap as it recurses, and
//! counts its own recursion against a limit. But a chain of infix
//! operators (`a + b + c …`, `x::int::int …`) is built by a loop, not by
//! recursion, so it escapes that count and can come out arbitrarily deep.
//!
//! Hence three rules, in order:
//! 1. A statement longer than `compute.max-statement-bytes` (4 MiB by
//!    default) is refused before it is parsed (RESOURCE_EXHAUSTED).
//! 2. Parsing counts recursion up to [`MAX_EXPR_DEPTH`], so that many
//!    nested parentheses or subqueries are fine and deeper is refused.
//! 3. Every expression of the parsed statement is measured with
//!    sqlparser's visitor, which stops at the first one nested deeper than
//!    [`MAX_EXPR_DEPTH`] (INVALID_ARGUMENT, naming the limit); so is every
//!    query's shape, since a chain of UNIONs and a long FROM list are
//!    flat in the parser but as deep as they are long in DataFusion's
//!    plan ([`query_depth`]).
//!
//! What passes is at most [`MAX_EXPR_DEPTH`] deep, which every later stage
//! handles: DataFusion's recursion grows its stack like the parser's, and
//! the process's threads have room for the rest (`quarry`'s runtime). What
//! is refused may be far deeper (a 4 MiB statement can chain two million
//! terms), so a long statement is parsed, measured and, if refused,
//! dropped on a stack sized for its length ([`STACK_BYTES_PER_BYTE`]);
//! short ones, which cannot nest deeply enough to matter, stay on the
//! caller's stack. A chain of AND or OR counts every link: DataFusion's
//! expressions are binary, so a 60,000-term OR would be 60,000 deep in
//! every stage after this one. Storage gets such chains flattened
//! (`Expr::Logic` is n-ary on the wire), and pushdown keeps what it sends
//! within the protobuf decoder's nesting limit
//! (`quarry_coprocessor::expr::MAX_WIRE_DEPTH`).

use std::collections::VecDeque;
use std::ops::ControlFlow;

use datafusion::common::DataFusionError;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use sqlparser::ast::{Expr, Query, SetExpr, Statement, Visit, Visitor};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};

use crate::{plan_err, Error, Result};

/// How deeply a statement's expressions (and its parenthesized or
/// subquery nesting) may go.
pub const MAX_EXPR_DEPTH: usize = 1000;

/// The default for `compute.max-statement-bytes`.
pub const DEFAULT_MAX_STATEMENT_BYTES: usize = crate::config::DEFAULT_MAX_STATEMENT_BYTES;

/// Text at most this long is parsed on the caller's stack: a chain of
/// 8,000 operators, the most it can hold, needs well under a megabyte to
/// parse and drop.
const SHORT_STATEMENT_BYTES: usize = 16 << 10;

/// Stack for a long statement, per byte of its text. Dropping a parsed
/// infix chain takes about 80 bytes of stack per link, and a link takes
/// at least two bytes of text (`+1`); 64 leaves room for the parser's
/// frames beside it.
const STACK_BYTES_PER_BYTE: usize = 64;

/// The statements of `text` as DataFusion's parser reads them (queries,
/// EXPLAIN, and sqlparser's statements), within the limits above.
pub fn parse_df(text: &str, max_bytes: usize) -> Result<VecDeque<DfStatement>> {
    guarded(text, max_bytes, || {
        let mut parser = DFParserBuilder::new(text)
            .with_recursion_limit(MAX_EXPR_DEPTH)
            .build()
            .map_err(df_parse_error)?;
        let stmts = parser.parse_statements().map_err(df_parse_error)?;
        for s in &stmts {
            check_df(s)?;
        }
        Ok(stmts)
    })
}

/// The statements of `text` as sqlparser's generic dialect reads them,
/// within the limits above.
pub fn parse_plain(text: &str, max_bytes: usize) -> Result<Vec<Statement>> {
    guarded(text, max_bytes, || {
        let stmts = Parser::new(&GenericDialect {})
            .with_recursion_limit(MAX_EXPR_DEPTH)
            .try_with_sql(text)
            .and_then(|mut p| p.parse_statements())
            .map_err(parse_error)?;
        for s in &stmts {
            check_depth(s)?;
        }
        Ok(stmts)
    })
}

/// Runs `parse` after the size check, on a stack sized for `text` when it
/// is long. Whatever `parse` refuses is dropped on that stack too.
/// Refuses text longer than `max_bytes` (compute.max-statement-bytes).
pub fn check_size(text: &str, max_bytes: usize) -> Result<()> {
    if text.len() > max_bytes {
        return Err(Error::ResourceExhausted(format!(
            "the statement is {} bytes; the limit is {max_bytes} \
             (compute.max-statement-bytes)",
            text.len()
        )));
    }
    Ok(())
}

fn guarded<T>(text: &str, max_bytes: usize, parse: impl FnOnce() -> Result<T>) -> Result<T> {
    check_size(text, max_bytes)?;
    if text.len() <= SHORT_STATEMENT_BYTES {
        return parse();
    }
    stacker::grow(text.len() * STACK_BYTES_PER_BYTE + (1 << 20), parse)
}

fn too_deep() -> Error {
    plan_err!(
        "the statement nests expressions, parentheses or subqueries more than \
         {MAX_EXPR_DEPTH} levels deep (the limit); split it or use IN (…) for long lists"
    )
}

fn parse_error(e: ParserError) -> Error {
    match e {
        ParserError::RecursionLimitExceeded => too_deep(),
        e => plan_err!("SQL syntax error: {e}"),
    }
}

fn df_parse_error(e: DataFusionError) -> Error {
    match e {
        DataFusionError::SQL(e, _) => parse_error(*e),
        e => plan_err!("SQL syntax error: {e}"),
    }
}

fn check_df(s: &DfStatement) -> Result<()> {
    match s {
        DfStatement::Statement(s) => check_depth(s),
        DfStatement::Explain(e) => check_df(&e.statement),
        // COPY, CREATE EXTERNAL TABLE, RESET: refused here, while a deep
        // one can still be dropped safely.
        _ => Err(plan_err!(
            "unsupported statement: {}",
            s.to_string().chars().take(40).collect::<String>()
        )),
    }
}

/// Refuses a statement with an expression nested deeper than
/// [`MAX_EXPR_DEPTH`].
pub fn check_depth(s: &Statement) -> Result<()> {
    let mut depth = Depth::default();
    match s.visit(&mut depth) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(too_deep()),
    }
}

/// Counts expression nesting as sqlparser's visitor walks a statement,
/// and stops it one level past the limit, so the walk itself stays
/// shallow.
#[derive(Default)]
struct Depth {
    now: usize,
}

/// How deep a query's plan gets from its shape alone: a chain of set
/// operations (`SELECT … UNION ALL SELECT … …`, built by a loop in the
/// parser) nests one level per link, and each table joined or listed in a
/// FROM one more. Measured with an explicit stack, not by recursion.
fn query_depth(q: &Query) -> usize {
    let mut deepest = 0;
    let mut todo: Vec<(&SetExpr, usize)> = vec![(&q.body, 1)];
    while let Some((body, depth)) = todo.pop() {
        match body {
            SetExpr::SetOperation { left, right, .. } => {
                todo.push((left, depth + 1));
                todo.push((right, depth + 1));
            }
            SetExpr::Select(s) => {
                let tables: usize = s.from.iter().map(|t| 1 + t.joins.len()).sum();
                deepest = deepest.max(depth + tables);
            }
            _ => deepest = deepest.max(depth),
        }
    }
    deepest
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if query_depth(q) > MAX_EXPR_DEPTH {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.now += 1;
        if self.now > MAX_EXPR_DEPTH {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.now -= 1;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(op: &str, n: usize) -> String {
        format!("SELECT {}", vec!["1"; n].join(op))
    }

    #[test]
    fn nesting_up_to_the_limit_parses_and_deeper_is_refused_by_name() {
        let parens = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse_df(&parens(200), DEFAULT_MAX_STATEMENT_BYTES).is_ok());
        let union = vec!["SELECT 1"; 500].join(" UNION ALL ");
        assert!(parse_df(&union, DEFAULT_MAX_STATEMENT_BYTES).is_ok());
        assert!(parse_df(&chain("+", 900), DEFAULT_MAX_STATEMENT_BYTES).is_ok());
        let union = format!(
            "{} UNION ALL SELECT 1",
            vec!["SELECT 1"; 50_000].join(" UNION ALL ")
        );
        let tables = format!("SELECT 1 FROM {}", vec!["t"; 2000].join(", "));
        let joins = format!("SELECT 1 FROM t{}", " JOIN t ON true".repeat(2000));
        for text in [
            parens(5000),
            chain("+", 2000),
            chain(" OR ", 60_000),
            union,
            tables,
            joins,
        ] {
            for err in [
                parse_df(&text, DEFAULT_MAX_STATEMENT_BYTES).unwrap_err(),
                parse_plain(&text, DEFAULT_MAX_STATEMENT_BYTES).unwrap_err(),
            ] {
                assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
                assert!(err.to_string().contains("1000 levels deep"), "{err}");
            }
        }
    }

    #[test]
    fn a_statement_past_the_size_limit_is_refused_before_parsing() {
        // A million links (2 MiB): refused by size under a 1 MiB limit,
        // and by depth (parsed and dropped on a grown stack) under the
        // default one.
        let text = chain("+", 1_000_000);
        let err = parse_df(&text, 1 << 20).unwrap_err();
        assert!(matches!(err, Error::ResourceExhausted(_)), "{err:?}");
        assert!(
            err.to_string().contains("compute.max-statement-bytes"),
            "{err}"
        );
        let err = parse_plain(&text, DEFAULT_MAX_STATEMENT_BYTES).unwrap_err();
        assert!(err.to_string().contains("levels deep"), "{err}");
    }
}
