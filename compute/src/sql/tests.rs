use quarry_proto::compute::logical_expr::Kind;
use quarry_proto::coprocessor::literal::Value;
use quarry_proto::meta::TypeKind;

use super::*;
use crate::Error;

fn err(sql: &str) -> String {
    match parse(sql) {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected an error for {sql}, got {other:?}"),
    }
}

#[test]
fn queries_are_not_parsed_here_and_bad_statements_get_a_clear_error() {
    // SELECT belongs to DataFusion; reaching this parser is a routing bug.
    assert!(err("SELECT a FROM t").contains("unsupported: statement SELECT"));
    assert!(err("SELEC a FROM t").contains("SQL syntax error"));
    assert!(err("CREATE TABLE a (x BIGINT); DROP TABLE a").contains("one statement"));
    assert!(err("INSERT INTO t VALUES (date '1998-02-30')").contains("invalid date"));
    // Values Quarry does not fold are a query's, for DataFusion.
    let Statement::Insert(ins) = parse("INSERT INTO t VALUES (upper('a'), 1)").unwrap() else {
        panic!()
    };
    assert_eq!(ins.query.as_deref(), Some("SELECT upper('a'), 1"));
}

#[test]
fn insert_values_fold_date_arithmetic() {
    let Statement::Insert(ins) =
        parse("INSERT INTO t VALUES (date '1998-12-01' - interval '90' day)").unwrap()
    else {
        panic!()
    };
    let Some(Kind::Literal(l)) = ins.rows[0][0].kind.as_ref() else {
        panic!("{:?}", ins.rows[0][0])
    };
    let want = quarry_coprocessor::types::parse_date("1998-09-02").unwrap();
    assert_eq!(l.value, Some(Value::Date(want)));
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
    let Statement::Insert(ins) = parse("INSERT INTO t (a) SELECT x FROM u WHERE x > 1").unwrap()
    else {
        panic!()
    };
    assert_eq!(ins.columns, vec!["a"]);
    assert_eq!(ins.query.as_deref(), Some("SELECT x FROM u WHERE x > 1"));
}
