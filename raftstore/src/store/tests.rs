use std::sync::Arc;
use std::time::Duration;

use quarry_coprocessor::codec::key::{record_key, table_record_range};
use quarry_coprocessor::codec::row::{Datum, RowEncoder};
use quarry_proto::coprocessor as pb;
use quarry_proto::kv::{Context, KvPair};
use quarry_proto::meta::{
    ColumnDef, CreateTableRequest, FieldType, Region, RegionEpoch, Store as StoreInfo, TableDef,
    TypeKind,
};

use super::Store;
use crate::config::StorageConfig;
use crate::engine::memory::MemEngine;
use crate::meta::Meta;
use crate::peers::PeerClients;
use crate::Error;

fn store() -> Store<MemEngine> {
    Store::open(Arc::new(MemEngine::new()), &StorageConfig::default()).unwrap()
}

fn region(id: u64, table: i64) -> Region {
    let (s, e) = table_record_range(table);
    Region {
        id,
        start_key: s,
        end_key: e,
        epoch: Some(RegionEpoch {
            conf_ver: 1,
            version: 3,
        }),
        peers: vec![],
    }
}

fn ctx(id: u64, version: u64) -> Context {
    Context {
        region_id: id,
        region_epoch: Some(RegionEpoch {
            conf_ver: 1,
            version,
        }),
    }
}

fn row(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    RowEncoder::new()
        .encode(&[(1, Datum::Int(v))], &mut out)
        .unwrap();
    out
}

#[test]
fn stale_or_unknown_regions_get_region_errors() {
    let s = store();
    s.create_region(region(7, 1)).unwrap();
    let put = |c: Context, key| s.batch_put(Some(&c), vec![KvPair { key, value: row(1) }], false);
    match put(ctx(8, 3), record_key(1, 1)) {
        Err(Error::Region(e)) => assert!(e.region_not_found.is_some()),
        other => panic!("{other:?}"),
    }
    match put(ctx(7, 2), record_key(1, 1)) {
        Err(Error::Region(e)) => {
            let current = &e.epoch_not_match.as_ref().unwrap().current_regions;
            assert_eq!(current[0].epoch.unwrap().version, 3);
        }
        other => panic!("{other:?}"),
    }
    match put(ctx(7, 3), record_key(2, 1)) {
        Err(Error::Region(e)) => assert!(e.key_not_in_region.is_some()),
        other => panic!("{other:?}"),
    }
    put(ctx(7, 3), record_key(1, 1)).unwrap();
}

#[test]
fn insert_refuses_duplicate_keys_without_writing_anything() {
    let s = store();
    s.create_region(region(7, 1)).unwrap();
    let pairs = |hs: &[i64]| {
        hs.iter()
            .map(|h| KvPair {
                key: record_key(1, *h),
                value: row(*h),
            })
            .collect::<Vec<_>>()
    };
    s.batch_put(Some(&ctx(7, 3)), pairs(&[1, 2]), true).unwrap();
    let err = s
        .batch_put(Some(&ctx(7, 3)), pairs(&[3, 2]), true)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "duplicate key: a row with handle 2 already exists"
    );
    let keys = s.scan(Some(&ctx(7, 3)), b"", b"", 0, true).unwrap();
    assert_eq!(keys.len(), 2, "the batch with a duplicate wrote nothing");
}

#[test]
fn regions_survive_a_restart_and_destroy_removes_data() {
    let engine = Arc::new(MemEngine::new());
    let s = Store::open(engine.clone(), &StorageConfig::default()).unwrap();
    s.create_region(region(7, 1)).unwrap();
    s.batch_put(
        Some(&ctx(7, 3)),
        vec![KvPair {
            key: record_key(1, 5),
            value: row(5),
        }],
        false,
    )
    .unwrap();
    drop(s);
    let s = Store::open(engine.clone(), &StorageConfig::default()).unwrap();
    assert_eq!(s.region_ids(), vec![7]);
    s.destroy_region(7).unwrap();
    let s = Store::open(engine.clone(), &StorageConfig::default()).unwrap();
    assert!(s.region_ids().is_empty());
    let other = StorageConfig {
        store_id: 2,
        ..Default::default()
    };
    let err = Store::open(engine, &other).err().unwrap();
    assert!(
        err.to_string().contains("belongs to store 1, not store 2"),
        "{err}"
    );
}

#[tokio::test]
async fn coprocessor_requests_are_checked_then_run_on_the_pool() {
    let s = store();
    s.create_region(region(7, 1)).unwrap();
    let pairs = (0..10)
        .map(|h| KvPair {
            key: record_key(1, h),
            value: row(h),
        })
        .collect();
    s.batch_put(Some(&ctx(7, 3)), pairs, false).unwrap();
    let (start, end) = table_record_range(1);
    let dag = pb::DagRequest {
        scan: Some(pb::TableScan {
            table_id: 1,
            columns: vec![],
            layout: 0,
        }),
        aggregation: Some(pb::Aggregation {
            group_by: vec![],
            aggs: vec![pb::AggFunc {
                kind: pb::AggKind::CountStar as i32,
                arg: None,
            }],
        }),
        ..Default::default()
    };
    let mut req = pb::CopRequest {
        context: Some(ctx(7, 3)),
        ranges: vec![pb::KeyRange {
            start: start.clone(),
            end: end.clone(),
        }],
        dag: Some(dag),
        ..Default::default()
    };
    let resp = s.coprocessor(req.clone()).await;
    assert!(resp.region_error.is_none() && resp.other_error.is_none());
    let (_, batches) = quarry_coprocessor::ipc::decode(&resp.data).unwrap();
    use arrow::array::AsArray;
    assert_eq!(
        batches[0]
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(0),
        10
    );
    // A range reaching past the region is refused as data.
    req.ranges[0].end = table_record_range(2).1;
    let resp = s.coprocessor(req.clone()).await;
    assert!(resp.region_error.unwrap().key_not_in_region.is_some());
    req.ranges[0].end = end;
    req.context = Some(ctx(7, 1));
    assert!(s
        .coprocessor(req)
        .await
        .region_error
        .unwrap()
        .epoch_not_match
        .is_some());
}

fn column(name: &str, kind: TypeKind) -> ColumnDef {
    ColumnDef {
        id: 0,
        name: name.into(),
        field_type: Some(FieldType {
            kind: kind as i32,
            nullable: true,
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn meta_creates_tables_with_presplit_regions_and_routes_them() {
    let s = Arc::new(store());
    Meta::bootstrap(
        &s,
        StoreInfo {
            id: 1,
            addr: "here:1".into(),
        },
    )
    .unwrap();
    let peers = Arc::new(PeerClients::new(Duration::from_secs(1)));
    let meta = Meta::load(s.clone(), peers.clone()).unwrap();
    let table = TableDef {
        name: "t".into(),
        columns: vec![
            column("a", TypeKind::Bigint),
            column("b", TypeKind::Varchar),
        ],
        handle_column_id: 1,
        ..Default::default()
    };
    let resp = meta
        .create_table(CreateTableRequest {
            table: Some(table.clone()),
            split_handles: vec![100, 50, 100],
            if_not_exists: false,
        })
        .await
        .unwrap();
    let t = resp.table.unwrap();
    assert_eq!(
        resp.regions.len(),
        3,
        "two distinct split points make three regions"
    );
    assert_eq!(t.columns[1].id, 2);
    let (start, end) = table_record_range(t.id);
    let routes = meta.routes(&start, &end);
    assert_eq!(routes.len(), 3);
    assert_eq!(routes[0].region.as_ref().unwrap().start_key, start);
    assert_eq!(
        routes[1].region.as_ref().unwrap().start_key,
        record_key(t.id, 50)
    );
    assert_eq!(routes[2].leader_store.as_ref().unwrap().addr, "here:1");
    assert_eq!(s.region_ids().len(), 4, "meta region plus three");

    let err = meta
        .create_table(CreateTableRequest {
            table: Some(table.clone()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "table t already exists");

    // Handles are allocated above the rebase point and never twice.
    let a = meta.alloc_handles(t.id, 10, 1000).await.unwrap();
    let b = meta.alloc_handles(t.id, 10, 0).await.unwrap();
    assert_eq!((a, b), (1000, 1010));

    // The catalog survives a reload.
    let meta = Meta::load(s.clone(), peers).unwrap();
    assert_eq!(meta.get_table("t").unwrap().id, t.id);
    assert!(meta.drop_table("t", false).await.unwrap());
    assert!(meta.get_table("t").is_none());
    assert_eq!(s.region_ids(), vec![1]);
    assert!(!meta.drop_table("t", true).await.unwrap());

    let bad = TableDef {
        name: "u".into(),
        columns: vec![column("a", TypeKind::Varchar)],
        handle_column_id: 1,
        ..Default::default()
    };
    let err = meta
        .create_table(CreateTableRequest {
            table: Some(bad),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must be BIGINT"), "{err}");
}
