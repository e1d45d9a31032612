//! Compute's part of Q1: DataFusion's Final aggregation (Quarry's
//! accumulators for SUM and AVG), projection and sort over 64 regions'
//! partial states, exactly as the region scans would deliver them.

use std::sync::Arc;

use criterion::Criterion;
use quarry_compute::datafusion::common::tree_node::{Transformed, TreeNode};
use quarry_compute::datafusion::datasource::memory::MemorySourceConfig;
use quarry_compute::datafusion::execution::TaskContext;
use quarry_compute::datafusion::physical_plan::{collect, ExecutionPlan};
use quarry_compute::df::region_dags;
use quarry_compute::df::region_scan::{conform, RegionScanExec};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::endpoint::handle;
use quarry_proto::coprocessor::{CopRequest, KeyRange};

use super::{physical_plan, region, TABLE_ID};

pub fn bench(c: &mut Criterion) {
    let (storage, _) = region(0.01);
    let plan = physical_plan(quarry::tpch::Q1);
    // One region's partials, as the region scan hands them to DataFusion.
    let (start, end) = table_record_range(TABLE_ID);
    let req = CopRequest {
        ranges: vec![KeyRange { start, end }],
        dag: Some(region_dags(&plan)[0].clone()),
        ..Default::default()
    };
    let resp = handle(storage, &req, &Default::default(), 0);
    let (_, batches) = quarry_coprocessor::ipc::decode(&resp.data).expect("decode");
    let plan = plan
        .transform_up(|node| {
            if node.downcast_ref::<RegionScanExec>().is_none() {
                return Ok(Transformed::no(node));
            }
            let schema = node.schema();
            let mut many = Vec::new();
            for _ in 0..64 {
                for b in &batches {
                    many.push(conform(b.clone(), &schema)?);
                }
            }
            let exec = MemorySourceConfig::try_new_exec(&[many], schema, None)?;
            Ok(Transformed::yes(exec as Arc<dyn ExecutionPlan>))
        })
        .expect("replace the region scan")
        .data;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let task = Arc::new(TaskContext::default());
    c.bench_function("merge/q1_partials_from_64_regions", |b| {
        b.iter(|| {
            let out = rt
                .block_on(collect(plan.clone(), task.clone()))
                .expect("final stage");
            std::hint::black_box(out)
        })
    });
}
