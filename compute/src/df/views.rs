//! Views: a stored query planned where a statement names it.
//!
//! A view is a name and the SQL of its query, kept in the meta region
//! (`raftstore/src/meta/views.rs`) and listed with the tables in the
//! catalog a statement plans over (read from meta, or kept and checked:
//! `catalog_cache.rs`). The views a statement
//! reads ([`register_used`]: its table references, found by DataFusion's
//! resolver) are planned into its context as DataFusion `ViewTable`s,
//! views they read first, so the statement's plan holds the views' plans
//! inlined: filters and projections reach the region scans below them as
//! for any query. A statement over `information_schema` gets every view,
//! so `information_schema.tables` lists them with type `VIEW`.
//!
//! CAVEATS
//!
//! * A statement over a view is planned each time: DataFusion inlines a
//!   view's plan as it binds the statement, so the plan cache could not
//!   tell it was replaced, and such plans are not offered to it.
//! * A view is not tied to the tables it reads: dropping one leaves the
//!   view in place, failing where it is used with the missing table's
//!   name; a view that reads itself, directly or through others, fails
//!   the same way.

use std::sync::Arc;

use datafusion::catalog::view::ViewTable;
use datafusion::catalog::SchemaProvider;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use futures::future::BoxFuture;
use quarry_proto::meta::ViewDef;

use super::from_df;
use crate::{plan_err, Error, Result};

/// How deep views may read views.
const MAX_DEPTH: usize = 32;

/// The schema `quarry.public` of `ctx`, where tables and views are.
fn public(ctx: &SessionContext) -> Result<Arc<dyn SchemaProvider>> {
    ctx.catalog("quarry")
        .and_then(|c| c.schema("public"))
        .ok_or_else(|| Error::Internal("a context without quarry.public".into()))
}

/// The names `stmt` reads, and whether it reads `information_schema`
/// or `pg_catalog`.
fn references(ctx: &SessionContext, stmt: &DfStatement) -> Result<(Vec<String>, bool)> {
    let refs = ctx
        .state()
        .resolve_table_references(stmt)
        .map_err(from_df)?;
    let info = refs
        .iter()
        .any(|r| super::pg_catalog::is_catalog_schema(r.schema()));
    Ok((refs.iter().map(|r| r.table().to_string()).collect(), info))
}

/// Plans into `ctx` the views of `views` that `stmt` reads (all of them
/// for a statement over `information_schema`); true if there were any.
pub async fn register_used(
    ctx: &SessionContext,
    stmt: &DfStatement,
    views: &[ViewDef],
) -> Result<bool> {
    if views.is_empty() {
        return Ok(false);
    }
    let (names, info) = references(ctx, stmt)?;
    let mut used = false;
    for v in views {
        if names.contains(&v.name) {
            register(ctx, v, views, Vec::new()).await?;
            used = true;
        } else if info {
            // A view an ALTER or DROP of its tables broke fails where it
            // is read, not every look at the catalog.
            match register(ctx, v, views, Vec::new()).await {
                Ok(()) => used = true,
                Err(e) => tracing::warn!(view = v.name, "view no longer plans: {e}"),
            }
        }
    }
    Ok(used)
}

/// The schema of the view `name` of `views`, planned into `ctx`.
pub async fn schema_of(
    ctx: &SessionContext,
    name: &str,
    views: &[ViewDef],
) -> Result<arrow::datatypes::SchemaRef> {
    let view = views
        .iter()
        .find(|v| v.name == name)
        .ok_or_else(|| plan_err!("view {name} does not exist"))?;
    register(ctx, view, views, Vec::new()).await?;
    let table = public(ctx)?
        .table(name)
        .await
        .map_err(from_df)?
        .ok_or_else(|| Error::Internal(format!("view {name} was not registered")))?;
    Ok(table.schema())
}

/// Plans `view` (after the views it reads) and registers it in `ctx`;
/// `path` holds the views being planned that read it.
fn register<'a>(
    ctx: &'a SessionContext,
    view: &'a ViewDef,
    views: &'a [ViewDef],
    mut path: Vec<String>,
) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        let schema = public(ctx)?;
        if schema.table_exist(&view.name) {
            return Ok(());
        }
        if path.contains(&view.name) || path.len() >= MAX_DEPTH {
            path.push(view.name.clone());
            return Err(plan_err!(
                "view {} reads itself: {}",
                view.name,
                path.join(" -> ")
            ));
        }
        let stmt = crate::sql::parse_df(&view.sql, usize::MAX)?
            .pop_front()
            .ok_or_else(|| Error::Internal(format!("view {} has no query", view.name)))?;
        let (names, _) = references(ctx, &stmt)?;
        path.push(view.name.clone());
        for v in views {
            if names.contains(&v.name) {
                register(ctx, v, views, path.clone()).await?;
            }
        }
        let plan = ctx
            .state()
            .statement_to_plan(stmt)
            .await
            .map_err(|e| plan_err!("view {}: {}", view.name, from_df(e)))?;
        let plan = match view.columns.is_empty() {
            true => plan,
            false => {
                let fields = plan.schema().columns();
                if fields.len() != view.columns.len() {
                    return Err(plan_err!(
                        "view {} names {} columns but its query has {}",
                        view.name,
                        view.columns.len(),
                        fields.len()
                    ));
                }
                LogicalPlanBuilder::from(plan)
                    .project(
                        fields
                            .into_iter()
                            .zip(&view.columns)
                            .map(|(c, n)| Expr::Column(c).alias(n)),
                    )
                    .map_err(from_df)?
                    .build()
                    .map_err(from_df)?
            }
        };
        let table = ViewTable::new(plan, Some(view.sql.clone()));
        schema
            .register_table(view.name.clone(), Arc::new(table))
            .map_err(from_df)?;
        Ok(())
    })
}
