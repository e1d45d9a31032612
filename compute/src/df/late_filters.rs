//! Region-scan filters whose constants come with each run: how one plan
//! of a query's shape (`literal_shape.rs`) serves every value.
//!
//! A shape is planned with placeholders (`l_partkey = $1`). DataFusion
//! offers its filters to the table like any other; the table accepts a
//! filter with placeholders when it would accept it with a constant of
//! the placeholder's type ([`with_defaults`]), and its region scan keeps
//! such a filter as planned ([`LateFilters`]) beside the DAG, whose
//! condition is built from type defaults only to give the plan its
//! structure. A run hands its values in its session config
//! ([`QueryParams`], as the snapshot comes); the scan then translates the
//! kept filters with those values into its DAG's conditions before it
//! reads anything, so the point ranges, the index it takes
//! (`index::access`) and the conditions the regions evaluate are the
//! run's. A scan with late filters that runs without values fails rather
//! than read with the defaults.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr as LExpr;
use quarry_proto::coprocessor::DagRequest;

use super::pushdown::{self, ColumnBinder};
use crate::{Error, Result};

/// A run's values for `$1 … $n`, in its session config.
#[derive(Debug, Clone)]
pub struct QueryParams(pub Arc<Vec<ScalarValue>>);

/// Whether `e` has a placeholder.
pub fn has_placeholders(e: &LExpr) -> bool {
    let mut found = false;
    let _ = e.apply(|x| {
        found = matches!(x, LExpr::Placeholder(_));
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// `e` with each placeholder replaced by `value(its id, its type)`; None
/// if a placeholder has no type or no value.
fn replaced(
    e: &LExpr,
    mut value: impl FnMut(&str, &arrow::datatypes::DataType) -> Option<ScalarValue>,
) -> Option<LExpr> {
    let mut missing = false;
    let out = e
        .clone()
        .transform(|x| match x {
            LExpr::Placeholder(p) => {
                let v = p.field.as_ref().and_then(|f| value(&p.id, f.data_type()));
                match v {
                    Some(v) => Ok(Transformed::yes(LExpr::Literal(v, None))),
                    None => {
                        missing = true;
                        Ok(Transformed::no(LExpr::Placeholder(p)))
                    }
                }
            }
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    (!missing).then_some(out)
}

/// `e` with each placeholder replaced by its type's default value: what
/// a filter with placeholders is translated as when it is planned (the
/// translation depends on the types only). None if a placeholder's type
/// is not known.
pub fn with_defaults(e: &LExpr) -> Option<LExpr> {
    replaced(e, |_, t| ScalarValue::new_default(t).ok())
}

/// A filter as planned: translated as it is, or, with placeholders, with
/// their types' defaults ([`with_defaults`]).
pub fn translate_planned(
    f: &LExpr,
    binder: &mut ColumnBinder,
) -> Option<quarry_coprocessor::expr::Expr> {
    match has_placeholders(f) {
        false => pushdown::logical(f, binder),
        true => with_defaults(f).and_then(|d| pushdown::logical(&d, binder)),
    }
}

/// `e` with `$k` replaced by `values[k - 1]`, which must have the
/// placeholder's type.
fn with_values(e: &LExpr, values: &[ScalarValue]) -> Option<LExpr> {
    replaced(e, |id, t| {
        let k: usize = id.strip_prefix('$')?.parse().ok()?;
        let v = values.get(k.checked_sub(1)?)?;
        (&v.data_type() == t).then(|| v.clone())
    })
}

/// A region scan's filters with placeholders (see the module docs).
#[derive(Debug, Clone)]
pub struct LateFilters {
    /// Each filter as planned, and the position of its condition in the
    /// DAG's selection.
    filters: Vec<(usize, LExpr)>,
    /// The scan's column binder once all its filters were translated: a
    /// filter translated again binds the same columns.
    binder: ColumnBinder,
}

impl LateFilters {
    pub fn new(filters: Vec<(usize, LExpr)>, binder: ColumnBinder) -> Self {
        LateFilters { filters, binder }
    }

    /// The positions of the filters' conditions in the DAG's selection.
    pub fn positions(&self) -> Vec<usize> {
        self.filters.iter().map(|(pos, _)| *pos).collect()
    }

    /// Writes the conditions of the filters with `values` into `dag`.
    pub fn bind(&self, dag: &mut DagRequest, values: &[ScalarValue]) -> Result<()> {
        let mut binder = self.binder.clone();
        let columns = binder.used().len();
        let conditions = &mut dag
            .selection
            .as_mut()
            .ok_or_else(|| Error::Internal("a scan's late filters lost their selection".into()))?
            .conditions;
        for (pos, filter) in &self.filters {
            let condition = with_values(filter, values)
                .and_then(|f| pushdown::logical(&f, &mut binder))
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "filter {filter} cannot be translated with the values {values:?}"
                    ))
                })?;
            let slot = conditions.get_mut(*pos).ok_or_else(|| {
                Error::Internal(format!("a scan's late filter {filter} lost its condition"))
            })?;
            *slot = condition.to_proto()?;
        }
        if binder.used().len() != columns {
            return Err(Error::Internal(
                "a scan's late filters read columns the scan does not".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};
    use datafusion::logical_expr::{col, expr::Placeholder};

    fn placeholder(id: &str, t: Option<DataType>) -> LExpr {
        LExpr::Placeholder(Placeholder::new_with_field(
            id.into(),
            t.map(|t| Arc::new(Field::new("", t, true))),
        ))
    }

    #[test]
    fn placeholders_take_defaults_then_values_of_their_type() {
        let e = col("a").eq(placeholder("$1", Some(DataType::Int64)));
        assert!(has_placeholders(&e));
        assert_eq!(
            with_defaults(&e).unwrap(),
            col("a").eq(LExpr::Literal(ScalarValue::Int64(Some(0)), None))
        );
        let v = [ScalarValue::Int64(Some(7))];
        assert_eq!(
            with_values(&e, &v).unwrap(),
            col("a").eq(LExpr::Literal(v[0].clone(), None))
        );
        // A value of another type, a missing value, an untyped placeholder.
        assert!(with_values(&e, &[ScalarValue::Utf8(Some("7".into()))]).is_none());
        assert!(with_values(&e, &[]).is_none());
        assert!(with_defaults(&col("a").eq(placeholder("$1", None))).is_none());
        assert!(!has_placeholders(&col("a").eq(col("b"))));
    }
}
