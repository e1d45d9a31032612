//! One region's work: decoding rows and packs, and the pushed-down DAG of
//! Q1 and Q6 on both layouts, fused and generic.

use criterion::{BenchmarkId, Criterion, Throughput};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::codec::pack::{decode_columns, PackView};
use quarry_coprocessor::codec::row::RowDecoder;
use quarry_coprocessor::endpoint::{build_executors_with, handle};
use quarry_coprocessor::simd;
use quarry_coprocessor::storage::{MemStorage, Storage};
use quarry_proto::coprocessor::{CopRequest, KeyRange};
use quarry_proto::meta::Layout;

use super::{column_region, dag, region, TABLE_ID};

/// Every value of the table in `storage`, in key order.
fn table_values(storage: &MemStorage) -> Vec<Vec<u8>> {
    let mut s = storage.clone();
    let (start, end) = table_record_range(TABLE_ID);
    s.begin_scan(
        &quarry_coprocessor::storage::KeyRange::new(start, end),
        false,
    )
    .unwrap();
    let mut v = Vec::new();
    while let Some((_, val)) = s.scan_next().unwrap() {
        v.push(val.to_vec());
    }
    v
}

/// Runs a DAG over a whole region to the end; returns output rows.
fn run_dag(
    storage: &mut MemStorage,
    dag: &quarry_proto::coprocessor::DagRequest,
    fused: bool,
) -> usize {
    let (start, end) = table_record_range(TABLE_ID);
    let range = vec![quarry_coprocessor::storage::KeyRange::new(start, end)];
    let mut exec = build_executors_with(storage, dag, range, fused).expect("build");
    let mut rows = 0;
    loop {
        let r = exec.next_batch(8192).expect("batch");
        rows += r.chunk.num_selected();
        if r.is_drained {
            return rows;
        }
    }
}

pub fn bench(c: &mut Criterion) {
    eprintln!("coprocessor kernels: {}", simd::level_name());
    let (mut storage, rows) = region(0.01);
    let mut g = c.benchmark_group("coprocessor");
    g.throughput(Throughput::Elements(rows as u64));

    // Decode the 4 columns Q6 reads from every row value.
    let values = table_values(&storage);
    let q6_cols = [
        (11, arrow::datatypes::DataType::Date32),
        (7, arrow::datatypes::DataType::Decimal128(15, 2)),
        (5, arrow::datatypes::DataType::Decimal128(15, 2)),
        (6, arrow::datatypes::DataType::Decimal128(15, 2)),
    ];
    g.bench_function("decode_q6_columns", |b| {
        let mut dec = RowDecoder::new(&q6_cols, 8192).unwrap();
        b.iter(|| {
            for chunk in values.chunks(8192) {
                for v in chunk {
                    dec.decode(v).unwrap();
                }
                std::hint::black_box(dec.finish().unwrap());
            }
        })
    });

    for (name, sql) in [("q1", quarry::tpch::Q1), ("q6", quarry::tpch::Q6)] {
        let (start, end) = table_record_range(TABLE_ID);
        let req = CopRequest {
            ranges: vec![KeyRange { start, end }],
            dag: Some(dag(sql)),
            ..Default::default()
        };
        g.bench_with_input(
            BenchmarkId::new("region_scan_partial_agg", name),
            &req,
            |b, req| {
                b.iter(|| {
                    let resp = handle(&mut storage, req, &Default::default(), 0);
                    assert!(resp.other_error.is_none());
                    std::hint::black_box(resp)
                })
            },
        );
    }
    g.finish();

    // The column layout at SF 0.1 (19 packs of `PACK_ROWS`), fused and generic.
    let (mut packs, rows) = column_region(0.1);
    let mut g = c.benchmark_group("column");
    g.throughput(Throughput::Elements(rows as u64));
    let pack_values = table_values(&packs);
    g.bench_function("decode_q6_columns_from_packs", |b| {
        b.iter(|| {
            for v in &pack_values {
                let p = PackView::parse(v).unwrap();
                std::hint::black_box(decode_columns(&p, &q6_cols).unwrap());
            }
        })
    });
    for (name, sql) in [("q1", quarry::tpch::Q1), ("q6", quarry::tpch::Q6)] {
        let mut dag = dag(sql);
        if let Some(s) = dag.scan.as_mut() {
            s.layout = Layout::Column as i32;
        }
        // The fused executor with the best kernels the CPU has, with AVX2
        // at most (no AVX-512 kernel) and with the baseline ones, side by
        // side.
        for (variant, fused, level) in [
            ("fused", true, simd::Level::Avx512),
            ("fused_avx2", true, simd::Level::Avx2),
            ("fused_baseline_simd", true, simd::Level::Baseline),
            ("generic", false, simd::Level::Avx512),
        ] {
            let id = format!("{name}_{variant}");
            g.bench_function(BenchmarkId::new("region_scan_partial_agg", id), |b| {
                let was = simd::set_level(level);
                b.iter(|| std::hint::black_box(run_dag(&mut packs, &dag, fused)));
                simd::set_level(was);
            });
        }
    }
    g.finish();
}
