pub mod coprocessor;
pub mod merge;

use quarry_compute::plan::{plan_query, QueryPlan};
use quarry_compute::sql::{parse, Statement};
use quarry_coprocessor::storage::MemStorage;
use quarry_proto::meta::TableDef;

pub const TABLE_ID: i64 = 100;

/// lineitem as Quarry defines it, with a fixed table id.
pub fn lineitem() -> TableDef {
    let Statement::CreateTable(ct) = parse(quarry::tpch::LINEITEM_DDL).expect("ddl") else {
        panic!("not a CREATE TABLE")
    };
    let mut t = ct.table_def();
    t.id = TABLE_ID;
    t
}

/// One in-memory region holding all of lineitem at `sf`.
pub fn region(sf: f64) -> (MemStorage, usize) {
    let mut s = MemStorage::new();
    quarry::tpch::encode_part(sf, 1, 1, TABLE_ID, |_, k, v| s.put(k.to_vec(), v.to_vec()))
        .expect("encode");
    let n = s.len();
    (s, n)
}

pub fn plan(sql: &str) -> QueryPlan {
    let Statement::Query(q) = parse(sql).expect("sql") else {
        panic!("not a query")
    };
    plan_query(&q, &lineitem()).expect("plan")
}
