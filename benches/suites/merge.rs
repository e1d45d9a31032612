//! Compute's final stage: merging 64 regions' Q1 partials column-wise.

use criterion::Criterion;
use quarry_coprocessor::aggregate::Aggregator;
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::endpoint::handle;
use quarry_proto::coprocessor::{CopRequest, KeyRange};

use super::{plan, region, TABLE_ID};

pub fn bench(c: &mut Criterion) {
    let (storage, _) = region(0.01);
    let p = plan(quarry::tpch::Q1);
    let (start, end) = table_record_range(TABLE_ID);
    let req = CopRequest {
        ranges: vec![KeyRange { start, end }],
        dag: Some(p.dag.clone()),
        ..Default::default()
    };
    let resp = handle(storage, &req, None, 0);
    let (_, partials) = quarry_coprocessor::ipc::decode(&resp.data).unwrap();
    let agg = p.aggregate.clone().unwrap();
    c.bench_function("merge/q1_partials_from_64_regions", |b| {
        b.iter(|| {
            let mut fin =
                Aggregator::final_stage(agg.key_types.clone(), agg.funcs.clone()).unwrap();
            for _ in 0..64 {
                for batch in &partials {
                    fin.merge(batch).unwrap();
                }
            }
            std::hint::black_box(fin.finish().unwrap())
        })
    });
}
