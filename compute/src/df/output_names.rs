//! Duplicate output names: `SELECT 38 AS col2, -col0 AS col2` answers two
//! columns named `col2`, as PostgreSQL and DuckDB do.
//!
//! DataFusion requires the expressions of a projection to have unique
//! names (they are how later operators find them), and refuses a query
//! whose SELECT list repeats one. Arrow schemas, and Flight SQL's
//! clients, have no such rule. So a query refused for that reason is
//! planned again with its SELECT lists made unique. In the outermost one
//! every item without an alias of its own, and every item whose alias
//! another repeats, gets a private alias, and the answer's schema gives
//! it back the name it had: its alias, or the name DataFusion gives its
//! expression, read from the plan ([`dedupe`] says which; the announced
//! schema carries the names, and every batch is relabelled to it,
//! `super::conform`). Which unaliased items DataFusion names alike cannot
//! be told from the text (`+ col1`, `(col1)` and `CAST(col1 AS INTEGER)`
//! are all `col1`), hence all of them. In inner SELECT lists (derived
//! tables, CTEs, the later branches of a UNION) a repeat, as told from the
//! text (a bare subquery is `(<subquery>)`, as DataFusion names it),
//! becomes `name_2`, `name_3`, …, as no name outside can tell the repeats
//! apart anyway; so does one in an outermost list with a `*`.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Ident, Query, SelectItem, SetExpr, Statement as SqlStatement, VisitMut,
    VisitorMut,
};

use crate::Error;

/// True if `e` is DataFusion refusing repeated names in a projection
/// (`SELECT 1 AS a, 2 AS a`, or `SELECT t.a, 1 AS a`, which it calls
/// ambiguous).
pub fn is_duplicate_name_error(e: &Error) -> bool {
    let m = e.to_string();
    m.contains("require unique expression names")
        || (m.contains("Schema contains qualified field name") && m.contains("would be ambiguous"))
}

/// The name DataFusion gives an item's column, where it can be told from
/// the text (every bare subquery is `(<subquery>)`), and the name the
/// answer shows for it.
fn item_name(item: &SelectItem) -> Option<(String, String)> {
    let norm = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    let same = |n: String| Some((n.clone(), n));
    match item {
        SelectItem::ExprWithAlias { alias, .. } => same(norm(alias)),
        SelectItem::UnnamedExpr(SqlExpr::Identifier(i)) => same(norm(i)),
        SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(parts)) => {
            parts.last().map(norm).and_then(same)
        }
        SelectItem::UnnamedExpr(e @ SqlExpr::Subquery(_)) => {
            Some(("(<subquery>)".to_string(), e.to_string()))
        }
        SelectItem::UnnamedExpr(e) => same(e.to_string()),
        _ => None,
    }
}

/// Makes the names of `items` unique; `rename(name, k, i)` names the
/// `k`th repeat (from 2) of `name`, the `i`th item. Returns, per item, the
/// name it had if it was changed.
fn make_unique(
    items: &mut [SelectItem],
    rename: impl Fn(&str, usize, usize) -> String,
) -> Vec<Option<String>> {
    let names: Vec<Option<(String, String)>> = items.iter().map(item_name).collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (n, _) in names.iter().flatten() {
        *counts.entry(n.as_str()).or_default() += 1;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut changed = vec![None; items.len()];
    for (i, (item, name)) in items.iter_mut().zip(&names).enumerate() {
        let Some((name, shown)) = name else { continue };
        if counts.get(name.as_str()).copied().unwrap_or(0) < 2 {
            continue;
        }
        let k = seen.entry(name.clone()).or_default();
        *k += 1;
        let alias = Ident::with_quote('"', rename(name, *k, i));
        let expr = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => expr,
            other => {
                *item = other;
                continue;
            }
        };
        *item = SelectItem::ExprWithAlias { expr, alias };
        changed[i] = Some(shown.clone());
    }
    changed
}

/// The leftmost SELECT's list of a query body (whose names a set
/// operation's answer takes).
fn leftmost_items(body: &mut SetExpr) -> Option<&mut Vec<SelectItem>> {
    match body {
        SetExpr::Select(s) => Some(&mut s.projection),
        SetExpr::SetOperation { left, .. } => leftmost_items(left),
        SetExpr::Query(q) => leftmost_items(&mut q.body),
        _ => None,
    }
}

struct InnerLists;

impl VisitorMut for InnerLists {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        dedupe_body(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn dedupe_body(body: &mut SetExpr) {
    match body {
        SetExpr::Select(s) => {
            make_unique(&mut s.projection, |name, k, _| match k {
                1 => name.to_string(),
                k => format!("{name}_{k}"),
            });
        }
        SetExpr::SetOperation { left, right, .. } => {
            dedupe_body(left);
            dedupe_body(right);
        }
        _ => {}
    }
}

/// What the answer calls a column of the outermost SELECT list.
#[derive(Debug, Clone, PartialEq)]
pub enum Restore {
    /// The name it is planned with.
    Keep,
    /// This name (the item's own alias).
    Name(String),
    /// The name DataFusion gives the item's expression, read from the plan
    /// (under its private alias `__qcol{i}`, [`private_alias`]).
    FromPlan,
}

/// The private alias of the outermost list's `i`th item.
pub fn private_alias(i: usize) -> String {
    format!("__qcol{i}")
}

/// The outermost list made unique: each item without an alias of its own
/// that no other item repeats gets a private alias. (Which unaliased items
/// DataFusion names alike cannot be told from the text: `+ col1`,
/// `(col1)` and `CAST(col1 AS INTEGER)` are all `col1`.)
fn alias_outermost(items: &mut [SelectItem]) -> Vec<Restore> {
    let norm = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    let mut aliases: HashMap<String, usize> = HashMap::new();
    for item in items.iter() {
        if let SelectItem::ExprWithAlias { alias, .. } = item {
            *aliases.entry(norm(alias)).or_default() += 1;
        }
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter_mut().enumerate() {
        let (expr, restore) =
            match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
                SelectItem::ExprWithAlias { expr, alias } if aliases[&norm(&alias)] > 1 => {
                    (expr, Restore::Name(norm(&alias)))
                }
                SelectItem::UnnamedExpr(expr) => (expr, Restore::FromPlan),
                other => {
                    *item = other;
                    out.push(Restore::Keep);
                    continue;
                }
            };
        *item = SelectItem::ExprWithAlias {
            expr,
            alias: Ident::with_quote('"', private_alias(i)),
        };
        out.push(restore);
    }
    out
}

/// Makes every SELECT list of `stmt` free of repeated names. Returns what
/// to call the outermost list's columns in the answer, or None if that
/// list was left as it was.
pub fn dedupe(stmt: &mut DfStatement) -> Option<Vec<Restore>> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let SqlStatement::Query(q) = s.as_mut() else {
        return None;
    };
    // The outermost list first, with private aliases; a `*` in it makes
    // the positions of its items unknown: its repeats are numbered.
    let top = leftmost_items(&mut q.body).map(|items| {
        let wildcard = items.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
        match wildcard {
            true => {
                make_unique(items, |name, k, _| match k {
                    1 => name.to_string(),
                    k => format!("{name}_{k}"),
                });
                None
            }
            false => Some(alias_outermost(items)),
        }
    });
    // Then every other list (the outermost one is unique by now).
    let _ = q.visit(&mut InnerLists);
    top.flatten()
        .filter(|t| t.iter().any(|r| *r != Restore::Keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> DfStatement {
        crate::sql::parse_df(sql, 1 << 20)
            .unwrap()
            .pop_front()
            .unwrap()
    }

    #[test]
    fn repeated_names_get_private_aliases_and_are_restored() {
        let mut s = parse("SELECT 38 AS col2, -col0 AS col2, a, b AS c FROM t");
        let names = dedupe(&mut s).unwrap();
        assert_eq!(
            names,
            vec![
                Restore::Name("col2".into()),
                Restore::Name("col2".into()),
                Restore::FromPlan,
                Restore::Keep
            ]
        );
        assert_eq!(
            s.to_string(),
            "SELECT 38 AS \"__qcol0\", -col0 AS \"__qcol1\", a AS \"__qcol2\", b AS c FROM t"
        );
    }

    #[test]
    fn bare_subqueries_in_inner_lists_are_told_apart() {
        let mut s = parse("SELECT * FROM (SELECT (SELECT 1), (SELECT 2)) AS d");
        assert_eq!(dedupe(&mut s), None);
        assert!(s.to_string().contains("AS \"(<subquery>)_2\""), "{s}");
    }

    #[test]
    fn inner_lists_number_their_repeats() {
        let mut s = parse("SELECT * FROM (SELECT a, a FROM t) AS d");
        assert_eq!(dedupe(&mut s), None);
        assert_eq!(
            s.to_string(),
            "SELECT * FROM (SELECT a AS \"a\", a AS \"a_2\" FROM t) AS d"
        );
    }
}
