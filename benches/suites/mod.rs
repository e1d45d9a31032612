pub mod coprocessor;
pub mod merge;

use std::sync::Arc;
use std::time::Duration;

use quarry_compute::cluster::Cluster;
use quarry_compute::datafusion::physical_plan::ExecutionPlan;
use quarry_compute::df::region_scan::ScanContext;
use quarry_compute::df::{region_dags, SqlSession};
use quarry_compute::dispatch::{DispatchConfig, Dispatcher};
use quarry_compute::region_cache::RegionCache;
use quarry_compute::sql::{parse, Statement};
use quarry_coprocessor::storage::MemStorage;
use quarry_proto::coprocessor::DagRequest;
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

/// One in-memory region holding all of lineitem at `sf`, row layout.
pub fn region(sf: f64) -> (MemStorage, usize) {
    let mut s = MemStorage::new();
    quarry::tpch::Table::Lineitem
        .encode_part(sf, 1, 1, TABLE_ID, |_, k, v| s.put(k.to_vec(), v.to_vec()))
        .expect("encode");
    let n = s.len();
    (s, n)
}

/// The same rows in the column layout: packs of `PACK_ROWS` rows, as the loader
/// writes them. Returns the storage and the row count.
pub fn column_region(sf: f64) -> (MemStorage, usize) {
    use quarry_coprocessor::codec::key::pack_key;
    use quarry_coprocessor::codec::pack::PackBuilder;
    let mut s = MemStorage::new();
    let mut b = PackBuilder::new(&quarry::tpch::Table::Lineitem.columns()).expect("builder");
    let mut n = 0;
    quarry::tpch::Table::Lineitem
        .generate_part(sf, 1, 1, |h, cols| {
            b.push_pairs(h, cols)?;
            n += 1;
            if b.is_full() {
                let (first, v) = b.finish()?;
                s.put(pack_key(TABLE_ID, first), v);
            }
            Ok(())
        })
        .expect("generate");
    if !b.is_empty() {
        let (first, v) = b.finish().expect("pack");
        s.put(pack_key(TABLE_ID, first), v);
    }
    (s, n)
}

/// `sql`'s physical plan over [`lineitem`], as compute plans it (no
/// cluster: nothing connects until a plan runs).
pub fn physical_plan(sql: &str) -> Arc<dyn ExecutionPlan> {
    let cluster = Arc::new(Cluster::new(vec![], Duration::from_secs(1)));
    let cache = Arc::new(RegionCache::new(cluster.clone()));
    let txns = Arc::new(quarry_compute::txn::Txns::new(
        cluster.clone(),
        cache.clone(),
    ));
    let dispatcher = Arc::new(Dispatcher::new(
        cache,
        cluster.clone(),
        DispatchConfig::default(),
    ));
    let scan = ScanContext {
        dispatcher,
        timeout: Duration::from_secs(10),
        join_bloom_filters: true,
        join_key_list_max: quarry_compute::df::MAX_JOIN_KEYS_PUSHED,
    };
    let session = SqlSession::new(scan, cluster, txns, 2).expect("a session");
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(session.physical_plan_over(sql, vec![lineitem()]))
        .expect("plan")
}

/// The DAG every region runs for a single-table `sql`.
pub fn dag(sql: &str) -> DagRequest {
    let dags = region_dags(&physical_plan(sql));
    assert_eq!(dags.len(), 1, "{sql} scans one table");
    dags[0].clone()
}
