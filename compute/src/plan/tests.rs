use quarry_proto::meta::TableDef;

use super::*;
use crate::sql::{parse, Statement};
use crate::Error;

fn lineitem() -> TableDef {
    let Statement::CreateTable(ct) =
        parse(include_str!("../../../tests/tpch/ddl/lineitem.sql")).unwrap()
    else {
        panic!()
    };
    let mut t = ct.table_def();
    t.id = 100;
    t
}

fn plan(sql: &str) -> Result<QueryPlan> {
    let Statement::Query(q) = parse(sql)? else {
        panic!("not a query: {sql}")
    };
    plan_query(&q, &lineitem())
}

fn plan_err(sql: &str) -> String {
    match plan(sql) {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected an error for {sql}, got {other:?}"),
    }
}

/// Compares EXPLAIN output with `tests/tpch/plans/<name>.plan`;
/// `QUARRY_REGENERATE=1` rewrites the file instead.
fn golden(name: &str, sql: &str) {
    let got = plan(sql).unwrap().explain().join("\n") + "\n";
    let path = format!(
        "{}/../tests/tpch/plans/{name}.plan",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var("QUARRY_REGENERATE").is_ok() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run with QUARRY_REGENERATE=1 to create it)"));
    assert_eq!(got, want, "plan of {name} changed; regenerate if intended");
}

#[test]
fn tpch_q1_plan() {
    golden("q1", include_str!("../../../tests/tpch/queries/q1.sql"));
    let p = plan(include_str!("../../../tests/tpch/queries/q1.sql")).unwrap();
    let names: Vec<&str> = p
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "l_returnflag",
            "l_linestatus",
            "sum_qty",
            "sum_base_price",
            "sum_disc_price",
            "sum_charge",
            "avg_qty",
            "avg_price",
            "avg_disc",
            "count_order"
        ]
    );
    let types: Vec<String> = p
        .schema
        .fields()
        .iter()
        .map(|f| f.data_type().to_string())
        .collect();
    assert_eq!(types[2], "Decimal128(38, 2)");
    assert_eq!(types[4], "Decimal128(38, 4)");
    assert_eq!(types[5], "Decimal128(38, 6)");
    assert_eq!(types[6], "Float64");
    assert_eq!(types[9], "Int64");
    // Each distinct aggregate is computed once (AVG ships sum and count).
    assert_eq!(p.aggregate.as_ref().unwrap().funcs.len(), 8);
}

#[test]
fn tpch_q6_plan() {
    golden("q6", include_str!("../../../tests/tpch/queries/q6.sql"));
}

#[test]
fn count_star_scans_keys_only() {
    let p = plan("SELECT count(*) FROM lineitem").unwrap();
    assert!(p.dag.scan.as_ref().unwrap().columns.is_empty());
}

#[test]
fn scans_push_projection_and_limit_but_not_a_sorted_limit() {
    let p = plan(
        "SELECT l_orderkey, l_quantity * 2 AS q FROM lineitem WHERE l_tax > 0 LIMIT 5 OFFSET 2",
    )
    .unwrap();
    assert_eq!(p.dag.limit, 7);
    assert_eq!(p.dag.projection.as_ref().unwrap().exprs.len(), 2);
    let p = plan("SELECT l_orderkey FROM lineitem ORDER BY l_quantity DESC, 1 LIMIT 5").unwrap();
    assert_eq!(p.dag.limit, 0);
    assert_eq!(
        p.dag.projection.as_ref().unwrap().exprs.len(),
        2,
        "sort key shipped too"
    );
    assert!(p.order_by[0].descending && p.order_by[0].nulls_first);
}

#[test]
fn order_by_may_name_outputs_aggregates_or_group_keys() {
    let p = plan(
        "SELECT l_returnflag AS f, sum(l_quantity) AS s FROM lineitem GROUP BY 1 \
         HAVING count(*) > 1 ORDER BY s DESC, max(l_tax), f",
    )
    .unwrap();
    assert_eq!(p.order_by.len(), 3);
    // sum, count(*), max: three aggregates, none twice.
    assert_eq!(p.aggregate.as_ref().unwrap().funcs.len(), 3);
}

#[test]
fn planning_errors_name_the_problem() {
    assert_eq!(
        plan_err("SELECT l_nope FROM lineitem"),
        "unknown column 'l_nope' in table lineitem; valid columns are: l_orderkey, l_partkey, \
         l_suppkey, l_linenumber, l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, \
         l_linestatus, l_shipdate, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, l_comment"
    );
    assert_eq!(
        plan_err("SELECT l_tax, sum(l_quantity) FROM lineitem GROUP BY l_returnflag"),
        "column l_tax must appear in the GROUP BY clause or be used in an aggregate function"
    );
    assert!(
        plan_err("SELECT 1 FROM lineitem WHERE sum(l_tax) > 1").contains("not allowed in WHERE")
    );
    assert!(plan_err("SELECT sum(l_comment) FROM lineitem")
        .contains("SUM needs a numeric argument, got VARCHAR"));
    assert!(plan_err("SELECT l_shipdate + 1 FROM lineitem")
        .contains("cannot apply + to DATE and BIGINT"));
    assert!(plan_err("SELECT 1 FROM lineitem WHERE l_shipdate = 5")
        .contains("cannot compare DATE with BIGINT"));
    assert!(plan_err("SELECT 1 FROM lineitem WHERE l_tax").contains("WHERE needs a BOOLEAN"));
    assert!(plan_err("SELECT sum(max(l_tax)) FROM lineitem").contains("cannot be nested"));
    assert!(plan_err("SELECT l_tax FROM lineitem ORDER BY 3").contains("position 3"));
    assert!(plan_err("SELECT o.x FROM lineitem").contains("unknown table 'o'"));
}

#[test]
fn qualified_names_and_distinct() {
    let p = plan("SELECT DISTINCT lineitem.l_returnflag FROM lineitem").unwrap();
    assert_eq!(p.aggregate.as_ref().unwrap().key_types.len(), 1);
    assert!(p.aggregate.as_ref().unwrap().funcs.is_empty());
}
