use quarry_proto::compute::logical_expr::Kind;
use quarry_proto::coprocessor::literal::Value;
use quarry_proto::meta::TypeKind;

use super::*;
use crate::Error;

fn query(sql: &str) -> Query {
    match parse(sql).unwrap() {
        Statement::Query(q) => q,
        other => panic!("{other:?}"),
    }
}

fn err(sql: &str) -> String {
    match parse(sql) {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected an error for {sql}, got {other:?}"),
    }
}

#[test]
fn tpch_q1_folds_its_date_arithmetic() {
    let q = query(include_str!("../../../tests/tpch/queries/q1.sql"));
    assert_eq!(q.table, "lineitem");
    assert_eq!(q.select.len(), 10);
    assert_eq!(q.select[2].alias, "sum_qty");
    assert_eq!(q.group_by.len(), 2);
    assert_eq!(q.order_by.len(), 2);
    // l_shipdate <= date '1998-12-01' - interval '90' day  ->  <= 1998-09-02
    let Some(Kind::Binary(b)) = q.filters[0].kind.as_ref() else {
        panic!("{:?}", q.filters[0])
    };
    let Some(Kind::Literal(l)) = b.right.as_ref().unwrap().kind.as_ref() else {
        panic!("{b:?}")
    };
    let want = quarry_coprocessor::types::parse_date("1998-09-02").unwrap();
    assert_eq!(l.value, Some(Value::Date(want)));
}

#[test]
fn tpch_q6_adds_a_year_and_keeps_decimal_literals() {
    let q = query(include_str!("../../../tests/tpch/queries/q6.sql"));
    let text = display::logical(&q.filters[0]);
    assert!(text.contains("DATE '1995-01-01'"), "{text}");
    assert!(
        text.contains("BETWEEN (0.06 - 0.01) AND (0.06 + 0.01)"),
        "{text}"
    );
    assert_eq!(q.select[0].alias, "revenue");
}

#[test]
fn default_names_are_the_expression_as_written() {
    let q = query("SELECT SUM(a), count(*), b FROM T");
    let names: Vec<&str> = q.select.iter().map(|s| s.alias.as_str()).collect();
    assert_eq!(names, vec!["sum(a)", "count(*)", "b"]);
    assert_eq!(q.table, "t");
}

#[test]
fn unsupported_sql_gets_a_clear_error() {
    assert!(err("SELECT a FROM t JOIN u ON t.a = u.a").contains("JOIN"));
    assert!(err("SELECT count(DISTINCT a) FROM t").contains("DISTINCT"));
    assert!(err("SELECT a FROM t WHERE a IN (SELECT b FROM u)").contains("unsupported"));
    assert!(err("SELECT upper(a) FROM t").contains("unknown function upper()"));
    assert!(err("SELEC a FROM t").contains("SQL syntax error"));
    assert!(err("SELECT a FROM t; SELECT b FROM t").contains("one statement"));
    assert!(err("SELECT a + interval '1' day FROM t").contains("INTERVAL"));
    assert!(err("SELECT a FROM t WHERE d = date '1998-02-30'").contains("invalid date"));
}

#[test]
fn create_table_and_insert() {
    let Statement::CreateTable(ct) = parse(
        "CREATE TABLE IF NOT EXISTS t (id BIGINT PRIMARY KEY, price DECIMAL(15,2) NOT NULL, \
         name VARCHAR(10), d DATE) WITH (split_handles = '100,200')",
    )
    .unwrap() else {
        panic!()
    };
    assert!(ct.if_not_exists);
    assert_eq!(ct.primary_key, Some(0));
    assert_eq!(ct.split_handles, vec![100, 200]);
    assert_eq!(ct.columns[1].field_type.kind, TypeKind::Decimal as i32);
    assert_eq!(
        (
            ct.columns[1].field_type.precision,
            ct.columns[1].field_type.scale
        ),
        (15, 2)
    );
    assert!(!ct.columns[1].field_type.nullable);
    assert_eq!(ct.columns[2].field_type.max_len, 10);
    let def = ct.table_def();
    assert_eq!(def.handle_column_id, 1);

    let Statement::Insert(ins) =
        parse("INSERT INTO t (id, name) VALUES (1, 'a'), (-2, NULL)").unwrap()
    else {
        panic!()
    };
    assert_eq!(ins.columns, vec!["id", "name"]);
    assert_eq!(ins.rows.len(), 2);

    assert!(err("CREATE TABLE t (a BIGINT, b BIGINT, PRIMARY KEY (a, b))").contains("composite"));
    assert!(err("CREATE TABLE t (a DECIMAL(40,2))").contains("precision must be 1..=38"));
    assert!(err("CREATE TABLE t (a BIGINT) WITH (colour = 'red')").contains("unknown table option"));
    assert!(err("INSERT INTO t SELECT * FROM u").contains("only VALUES"));
}
