//! The rule on plain DataFusion tables: which subtrees share, and that a
//! shared plan answers what the unshared one does.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::SessionContext;

use super::*;

/// A session over `t(k, v)` = (k, 10·k) for k in 1..=20 and `u(k, w)` =
/// (k, k % 3) for the even k, with the rule or without it.
fn session(shared: bool) -> SessionContext {
    // Scalar subqueries as joins, as Quarry's sessions plan them.
    let mut config = datafusion::prelude::SessionConfig::new();
    config
        .options_mut()
        .optimizer
        .enable_physical_uncorrelated_scalar_subquery = false;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .build();
    let state = match shared {
        true => {
            let state = install(state);
            let mut rules = state.physical_optimizers().to_vec();
            rules.push(Arc::new(AssignSharedRuns));
            SessionStateBuilder::new_from_existing(state)
                .with_physical_optimizer_rules(rules)
                .build()
        }
        false => state,
    };
    let ctx = SessionContext::new_with_state(state);
    let column = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as arrow::array::ArrayRef;
    let t = RecordBatch::try_from_iter([
        ("k", column((1..=20).collect())),
        ("v", column((1..=20).map(|k| k * 10).collect())),
    ])
    .unwrap();
    let u = RecordBatch::try_from_iter([
        ("k", column((2..=20).step_by(2).collect())),
        ("w", column((2..=20).step_by(2).map(|k| k % 3).collect())),
    ])
    .unwrap();
    for (name, batch) in [("t", t), ("u", u)] {
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]]).unwrap();
        ctx.register_table(name, Arc::new(table)).unwrap();
    }
    ctx
}

/// TPC-H Q11's shape: a grouped join, and the same join summed in a
/// scalar subquery of its HAVING.
const HAVING_OVER_THE_SAME_JOIN: &str = "
    SELECT t.k, sum(t.v * u.w) AS value
    FROM t, u
    WHERE t.k = u.k AND u.w > 0
    GROUP BY t.k
    HAVING sum(t.v * u.w) > (
        SELECT sum(t.v * u.w) * 0.1 FROM t, u WHERE t.k = u.k AND u.w > 0
    )
    ORDER BY value DESC, t.k";

/// The optimized logical plan, the physical plan and the answer (as
/// `k=value` pairs).
async fn run(ctx: &SessionContext, sql: &str) -> (String, String, Vec<String>) {
    let df = ctx.sql(sql).await.unwrap();
    let logical = df.clone().into_optimized_plan().unwrap();
    let physical = df.create_physical_plan().await.unwrap();
    let shown = displayable(physical.as_ref()).indent(true).to_string();
    let batches = collect(physical, ctx.task_ctx()).await.unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                .collect();
            rows.push(cells.join("="));
        }
    }
    let logical = logical.display_indent().to_string();
    (logical, shown, rows)
}

#[tokio::test]
async fn a_join_repeated_in_a_subquery_runs_once_and_answers_the_same() {
    let (logical, physical, rows) = run(&session(true), HAVING_OVER_THE_SAME_JOIN).await;
    assert_eq!(
        logical.matches("SharedSubplan: id=0").count(),
        2,
        "{logical}"
    );
    // One plan reads both copies' columns: the outer one's `t.k` too.
    assert_eq!(
        logical.matches("TableScan: t projection=[k, v]").count(),
        2,
        "{logical}"
    );
    assert_eq!(
        physical.matches("SharedSubplanExec: id=0, uses=2").count(),
        2,
        "{physical}"
    );
    let (_, plain, expected) = run(&session(false), HAVING_OVER_THE_SAME_JOIN).await;
    assert!(!plain.contains("SharedSubplan"), "{plain}");
    // The joined rows (w > 0) are k = 2, 4, 8, 10, 14, 16, 20, with
    // values 40, 40, 160, 100, 280, 160, 400: 1180 in all, so values
    // above 118 stay.
    assert_eq!(expected, ["20=400", "14=280", "8=160", "16=160"]);
    assert_eq!(rows, expected);
}

#[tokio::test]
async fn an_aggregation_named_twice_runs_once() {
    // Q15's shape: a view read by the query and by its scalar subquery.
    let sql = "
        WITH totals AS (SELECT k % 4 AS g, sum(v) AS total FROM t GROUP BY k % 4)
        SELECT g, total FROM totals
        WHERE total = (SELECT max(total) FROM totals)";
    let (logical, physical, rows) = run(&session(true), sql).await;
    assert_eq!(
        logical.matches("SharedSubplan: id=0").count(),
        2,
        "{logical}"
    );
    assert!(
        physical.contains("SharedSubplanExec: id=0, uses=2"),
        "{physical}"
    );
    // Groups 0..3 of 1..=20: k % 4 = 0 sums 40+80+…+200 = 600, the most.
    assert_eq!(rows, ["0=600"]);
}

#[tokio::test]
async fn joins_with_different_filters_do_not_share() {
    // The subquery's join keeps other rows.
    let sql = "SELECT t.k FROM t, u WHERE t.k = u.k AND u.w > 0
         AND t.v > (SELECT avg(t.v) FROM t, u WHERE t.k = u.k AND u.w > 1)";
    let (logical, _, mut rows) = run(&session(true), sql).await;
    assert!(!logical.contains("SharedSubplan"), "{logical}");
    // avg(v) over w > 1 (k = 2, 8, 14, 20) is 110.
    rows.sort();
    assert_eq!(rows, ["14", "16", "20"]);
}

#[tokio::test]
async fn a_use_that_a_join_above_would_narrow_is_not_shared() {
    // One use of `j` is the probe side of a join with one row, whose key
    // would cut it; the run could not take that key for both uses.
    let sql = "
        WITH j AS (SELECT t.k AS k, t.v AS v FROM t JOIN u ON t.k = u.k)
        SELECT count(*) FROM j JOIN (SELECT 2 AS k) s ON j.k = s.k
        UNION ALL
        SELECT count(*) FROM j";
    let (logical, physical, mut rows) = run(&session(true), sql).await;
    assert_eq!(
        logical.matches("SharedSubplan: id=0").count(),
        2,
        "{logical}"
    );
    assert!(!physical.contains("SharedSubplanExec"), "{physical}");
    rows.sort();
    assert_eq!(rows, ["1", "10"]);
}

#[tokio::test]
async fn table_functions_and_recursive_queries_do_not_share() {
    // Both scans are `generate_series()`: the arguments are in the
    // source, not the name.
    let sql = "SELECT a.s, b.s FROM
        (SELECT sum(value) AS s FROM generate_series(1, 10)) a,
        (SELECT sum(value) AS s FROM generate_series(1, 100)) b";
    let (logical, _, rows) = run(&session(true), sql).await;
    assert!(!logical.contains("SharedSubplan"), "{logical}");
    assert_eq!(rows, ["55=5050"]);
    // The recursive term's join runs once per round, over that round's
    // rows: shared, every round would replay the first.
    let sql = "
        WITH RECURSIVE chain AS (
            SELECT k FROM t WHERE k = 1
            UNION ALL
            SELECT t.k FROM t JOIN chain ON t.k = chain.k + 1 WHERE t.k < 6
        )
        SELECT count(*) FROM chain a JOIN chain b ON a.k = b.k";
    let (logical, _, rows) = run(&session(true), sql).await;
    assert!(!logical.contains("SharedSubplan"), "{logical}");
    assert_eq!(rows, ["5"]);
}

#[tokio::test]
async fn the_rule_shares_once_across_the_optimizers_passes() {
    let ctx = session(true);
    let plan = ctx
        .sql(HAVING_OVER_THE_SAME_JOIN)
        .await
        .unwrap()
        .into_optimized_plan()
        .unwrap();
    // Run again over its own output, it changes nothing.
    let again = share(plan.clone()).unwrap();
    assert!(!again.transformed);
    assert_eq!(again.data, plan);
}

#[tokio::test]
async fn shapes_ignore_the_columns_a_copy_reads() {
    let ctx = session(false);
    let a = shape_of(&ctx, "SELECT t.k, t.v, u.w FROM t JOIN u ON t.k = u.k").await;
    let b = shape_of(&ctx, "SELECT t.v FROM t JOIN u ON t.k = u.k").await;
    assert!(a.is_some());
    assert_eq!(a, b);
    let c = shape_of(&ctx, "SELECT t.v FROM t JOIN u ON t.k = u.w").await;
    assert_ne!(a, c);
    // random() must be drawn for each use.
    let volatile = "SELECT t.v FROM t JOIN u ON t.k = u.k AND random() < t.v";
    assert_eq!(shape_of(&ctx, volatile).await, None);
}

#[tokio::test]
async fn a_scan_filter_of_true_is_no_filter() {
    // A distributed plan's decorrelated subquery leaves `true` on one
    // copy's scan (TPC-H Q11): the copies are still the same work.
    let ctx = session(false);
    let sql = "SELECT t.v FROM t JOIN u ON t.k = u.k";
    let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
    let with_filters = |filters: Vec<Expr>| {
        plan.clone()
            .transform_up(|n| match n {
                LogicalPlan::TableScan(mut scan) if scan.table_name.table() == "t" => {
                    scan.filters = filters.clone();
                    Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                }
                n => Ok(Transformed::no(n)),
            })
            .unwrap()
            .data
    };
    let join_shape = |p: &LogicalPlan| first_join_shape(p).expect("a shape");
    let plain = join_shape(&plan);
    let truth = datafusion::prelude::lit(true);
    assert_eq!(join_shape(&with_filters(vec![truth.clone()])), plain);
    let kept = datafusion::prelude::col("v").gt(datafusion::prelude::lit(0i64));
    assert_ne!(join_shape(&with_filters(vec![kept.clone()])), plain);
    assert_eq!(
        join_shape(&with_filters(vec![kept.clone(), truth])),
        join_shape(&with_filters(vec![kept]))
    );
}

/// The shape of the first join in `sql`'s optimized plan.
async fn shape_of(ctx: &SessionContext, sql: &str) -> Option<Shape> {
    let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
    first_join_shape(&plan)
}

/// The shape of the first join in `plan`.
fn first_join_shape(plan: &LogicalPlan) -> Option<Shape> {
    let mut out = None;
    plan.apply(|n| {
        if matches!(n, LogicalPlan::Join(_)) {
            out = shape(n);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    out
}
