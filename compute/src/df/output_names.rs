//! Duplicate output names: `SELECT 38 AS col2, -col0 AS col2` answers two
//! columns named `col2`, as PostgreSQL and DuckDB do.
//!
//! DataFusion requires the expressions of a projection to have unique
//! names (they are how later operators find them), and refuses a query
//! whose SELECT list repeats one. Arrow schemas, and Flight SQL's
//! clients, have no such rule. So a query refused for that reason is
//! planned again with its SELECT lists made unique: in the outermost one
//! each repeated item gets a private alias and keeps its name in the
//! answer's schema ([`dedupe`] returns the names to restore; the announced
//! schema carries them, and every batch is relabelled to it,
//! `super::conform`); in inner SELECT lists (derived tables, CTEs, the
//! later branches of a UNION) a repeat becomes `name_2`, `name_3`, … , as
//! no name outside can tell the repeats apart anyway.
//!
//! An unaliased item is named as DataFusion names a column reference
//! (its last identifier) or, for any other expression, by its SQL text;
//! a `*` in a SELECT list is not looked into.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Ident, Query, SelectItem, SetExpr, Statement as SqlStatement, VisitMut,
    VisitorMut,
};

use crate::Error;

/// True if `e` is DataFusion refusing repeated names in a projection.
pub fn is_duplicate_name_error(e: &Error) -> bool {
    e.to_string().contains("require unique expression names")
}

/// The name an item of a SELECT list gives its column, where it can be
/// told from the text.
fn item_name(item: &SelectItem) -> Option<String> {
    let norm = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    match item {
        SelectItem::ExprWithAlias { alias, .. } => Some(norm(alias)),
        SelectItem::UnnamedExpr(SqlExpr::Identifier(i)) => Some(norm(i)),
        SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(parts)) => parts.last().map(norm),
        SelectItem::UnnamedExpr(e) => Some(e.to_string()),
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
    let names: Vec<Option<String>> = items.iter().map(item_name).collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for n in names.iter().flatten() {
        *counts.entry(n.as_str()).or_default() += 1;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut changed = vec![None; items.len()];
    for (i, (item, name)) in items.iter_mut().zip(&names).enumerate() {
        let Some(name) = name else { continue };
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
        changed[i] = Some(name.clone());
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

/// Makes every SELECT list of `stmt` free of repeated names. Returns the
/// names of the outermost list's columns to restore in the answer (None
/// where a column keeps the name it is planned with), or None if nothing
/// changed there.
pub fn dedupe(stmt: &mut DfStatement) -> Option<Vec<Option<String>>> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let SqlStatement::Query(q) = s.as_mut() else {
        return None;
    };
    // The outermost list first, with private aliases.
    let top = leftmost_items(&mut q.body)
        .map(|items| make_unique(items, |_, _, i| format!("__qcol{i}")))
        .unwrap_or_default();
    // Then every other list (the outermost one is unique by now).
    let _ = q.visit(&mut InnerLists);
    top.iter().any(Option::is_some).then_some(top)
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
        let mut s = parse("SELECT 38 AS col2, -col0 AS col2, a FROM t");
        let names = dedupe(&mut s).unwrap();
        assert_eq!(names, vec![Some("col2".into()), Some("col2".into()), None]);
        assert_eq!(
            s.to_string(),
            "SELECT 38 AS \"__qcol0\", -col0 AS \"__qcol1\", a FROM t"
        );
    }

    #[test]
    fn inner_lists_number_their_repeats_and_unique_lists_are_left_alone() {
        let mut s = parse("SELECT * FROM (SELECT a, a FROM t) AS d");
        assert_eq!(dedupe(&mut s), None);
        assert_eq!(
            s.to_string(),
            "SELECT * FROM (SELECT a AS \"a\", a AS \"a_2\" FROM t) AS d"
        );
        let mut s = parse("SELECT a, b FROM t");
        assert_eq!(dedupe(&mut s), None);
        assert_eq!(s.to_string(), "SELECT a, b FROM t");
    }
}
