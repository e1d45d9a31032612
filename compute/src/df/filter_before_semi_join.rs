//! A filter against a scalar subquery's answer applied before the semi or
//! anti join beneath it, so that the join's build side, and the keys it
//! sends the other side's region scans, are only the rows that filter
//! keeps.
//!
//! WHY
//!
//! TPC-H Q22 counts the customers of seven countries whose balance is
//! above those countries' average (a scalar subquery) and who have no
//! orders (`NOT EXISTS`). DataFusion unnests the two subqueries into
//!
//! ```text
//!   Inner Join, Filter: c_acctbal > __qs            (one row on the right)
//!     Projection: c_phone, c_acctbal
//!       LeftAnti Join: c_custkey = o_custkey
//!         customer (seven countries)                the build side
//!         orders                                    the probe side
//!     Projection: avg(c_acctbal) AS __qs
//! ```
//!
//! so the anti join builds on every customer of the seven countries
//! (42,015 at SF 1) and only then drops the 55% whose balance is not
//! above the average. Its build keys would keep 42% of orders' distinct
//! customer keys, past what a Bloom filter pays for
//! (`join_keys::BLOOM_MAX_SHARE`): all 1.5 million orders (15 million at
//! SF 10) travel to compute to be probed. With the balance filter first,
//! the build side is the 19 thousand customers above the average, their
//! keys a fifth of orders' and a Bloom filter leaves most orders in the
//! regions.
//!
//! WHAT
//!
//! ```text
//!   Inner Join, Filter: f                    Projection: (the same columns)
//!     [Projection: plain columns]              Left{Semi,Anti} Join: on, g
//!       Left{Semi,Anti} Join: on, g     ==>      Inner Join, Filter: f
//!         C                                        C
//!         O                                        S
//!     S (one row)                                O
//! ```
//!
//! A left semi or anti join keeps or drops each row of its left side by
//! that row and the right side alone (a null-aware anti join too: a NULL
//! on its right drops every row), so dropping rows of C by `f` before
//! the join or after it leaves the same rows, and S's columns ride
//! along unchanged. The rule asks that `f` name only C's and S's
//! columns, that the projection between (if any) pass plain columns,
//! and that S answer at most one row (an aggregate without GROUP BY,
//! under projections and aliases): with more rows the rewrite would
//! still be right, but would make the semi join's build side larger,
//! not smaller.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result as DfResult};
use datafusion::logical_expr::{Expr, Join, LogicalPlan, Projection};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use super::decorrelate::exactly_one_row;

/// The logical optimizer rule (see the module docs), installed after
/// DataFusion's `push_down_filter`.
#[derive(Debug, Default)]
pub struct FilterBeforeSemiJoin;

impl OptimizerRule for FilterBeforeSemiJoin {
    fn name(&self) -> &str {
        "quarry_filter_before_semi_join"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        None
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        // A switch to time both plans side by side in one cluster.
        if quarry_proto::failpoint::hit("filter_before_semi_join_off").is_some() {
            return Ok(Transformed::no(plan));
        }
        plan.transform_down(|node| match rewritten(&node)? {
            Some(new) => Ok(Transformed::yes(new)),
            None => Ok(Transformed::no(node)),
        })
    }
}

/// Installs the rule right after `push_down_filter`.
pub fn install(state: &mut datafusion::execution::SessionState) {
    super::add_optimizer_rule_after(state, "push_down_filter", Arc::new(FilterBeforeSemiJoin));
}

/// `node` with its filter moved below the semi join, when it has the
/// module docs' shape.
fn rewritten(node: &LogicalPlan) -> DfResult<Option<LogicalPlan>> {
    let LogicalPlan::Join(join) = node else {
        return Ok(None);
    };
    let Some(filter) = &join.filter else {
        return Ok(None);
    };
    if join.join_type != JoinType::Inner || !join.on.is_empty() || !exactly_one_row(&join.right) {
        return Ok(None);
    }
    let under = match join.left.as_ref() {
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
            p.input.as_ref()
        }
        other => other,
    };
    let LogicalPlan::Join(semi) = under else {
        return Ok(None);
    };
    if !matches!(semi.join_type, JoinType::LeftSemi | JoinType::LeftAnti) {
        return Ok(None);
    }
    let (kept, scalar) = (semi.left.schema(), join.right.schema());
    if !(filter.column_refs().iter()).all(|c| kept.has_column(c) || scalar.has_column(c)) {
        return Ok(None);
    }
    let filtered = Join::try_new(
        semi.left.clone(),
        join.right.clone(),
        vec![],
        Some(filter.clone()),
        JoinType::Inner,
        join.join_constraint,
        join.null_equality,
        false,
    )?;
    let semi = Join::try_new(
        Arc::new(LogicalPlan::Join(filtered)),
        semi.right.clone(),
        semi.on.clone(),
        semi.filter.clone(),
        semi.join_type,
        semi.join_constraint,
        semi.null_equality,
        semi.null_aware,
    )?;
    let columns = join
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let projection = Projection::try_new(columns, Arc::new(LogicalPlan::Join(semi)))?;
    Ok(Some(LogicalPlan::Projection(projection)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// A session with the rule, or without it, over three small tables,
    /// with Quarry's decorrelation (DataFusion alone leaves a scalar
    /// subquery without correlation in its filter, run apart).
    async fn session(rule: bool) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features().build();
        super::super::decorrelate::install(&mut state);
        if rule {
            super::install(&mut state);
        }
        let ctx = SessionContext::new_with_state(state);
        for sql in [
            "CREATE TABLE c (k BIGINT, v BIGINT, n VARCHAR) AS VALUES \
             (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c'), (4, 40, 'd'), (5, NULL, 'e'), (NULL, 60, 'f')",
            "CREATE TABLE o (k BIGINT) AS VALUES (1), (3), (3), (5)",
            "CREATE TABLE o_null (k BIGINT) AS VALUES (1), (NULL)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        text.lines().map(str::to_string).collect()
    }

    async fn plan(ctx: &SessionContext, sql: &str) -> String {
        let df = ctx.sql(sql).await.unwrap();
        df.into_optimized_plan()
            .unwrap()
            .display_indent()
            .to_string()
    }

    /// The same answers with the rule as without it, for semi, anti and
    /// NOT IN joins under a filter against a scalar subquery; and the
    /// filter below the join where the rule applies.
    #[tokio::test]
    async fn a_filter_on_a_scalar_moves_below_the_semi_join_and_answers_the_same() {
        let (with, without) = (session(true).await, session(false).await);
        let queries = HashMap::from([
            (
                "anti",
                "SELECT n, v FROM c WHERE v > (SELECT avg(v) FROM c) \
                 AND NOT EXISTS (SELECT 1 FROM o WHERE o.k = c.k) ORDER BY n",
            ),
            (
                "semi",
                "SELECT n FROM c WHERE v >= (SELECT min(v) + 10 FROM c) \
                 AND EXISTS (SELECT 1 FROM o WHERE o.k = c.k) ORDER BY n",
            ),
            (
                "not in",
                "SELECT n FROM c WHERE v > (SELECT avg(v) FROM c) \
                 AND k NOT IN (SELECT k FROM o) ORDER BY n",
            ),
            (
                "not in, a NULL",
                "SELECT n FROM c WHERE v > (SELECT avg(v) FROM c) \
                 AND k NOT IN (SELECT k FROM o_null) ORDER BY n",
            ),
            (
                "empty scalar side",
                "SELECT n FROM c WHERE v > (SELECT max(v) FROM c WHERE k > 100) \
                 AND NOT EXISTS (SELECT 1 FROM o WHERE o.k = c.k) ORDER BY n",
            ),
        ]);
        for (name, sql) in &queries {
            assert_eq!(rows(&with, sql).await, rows(&without, sql).await, "{name}");
        }
        assert_eq!(
            rows(&with, queries["anti"]).await[3..5],
            ["| d | 40 |".to_string(), "| f | 60 |".to_string()]
        );
        // The anti join now builds on the filtered rows.
        let shown = plan(&with, queries["anti"]).await;
        let anti = shown.find("LeftAnti Join").expect(&shown);
        let filter = shown.find("Inner Join:  Filter").expect(&shown);
        assert!(
            anti < filter,
            "the filter is still above the anti join:\n{shown}"
        );
        let shown = plan(&without, queries["anti"]).await;
        let anti = shown.find("LeftAnti Join").expect(&shown);
        let filter = shown.find("Inner Join:  Filter").expect(&shown);
        assert!(
            filter < anti,
            "the filter was below the anti join without the rule:\n{shown}"
        );
    }
}
