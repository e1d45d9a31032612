//! One region's work: decoding rows, and the pushed-down DAG of Q1 and Q6.

use criterion::{BenchmarkId, Criterion, Throughput};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::codec::row::RowDecoder;
use quarry_coprocessor::endpoint::handle;
use quarry_coprocessor::storage::Storage;
use quarry_proto::coprocessor::{CopRequest, KeyRange};

use super::{plan, region, TABLE_ID};

pub fn bench(c: &mut Criterion) {
    let (mut storage, rows) = region(0.01);
    let mut g = c.benchmark_group("coprocessor");
    g.throughput(Throughput::Elements(rows as u64));

    // Decode the 4 columns Q6 reads from every row value.
    let values: Vec<Vec<u8>> = {
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
    };
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
        let p = plan(sql);
        let (start, end) = table_record_range(TABLE_ID);
        let req = CopRequest {
            ranges: vec![KeyRange { start, end }],
            dag: Some(p.dag.clone()),
            ..Default::default()
        };
        g.bench_with_input(
            BenchmarkId::new("region_scan_partial_agg", name),
            &req,
            |b, req| {
                b.iter(|| {
                    let resp = handle(&mut storage, req, None, 0);
                    assert!(resp.other_error.is_none());
                    std::hint::black_box(resp)
                })
            },
        );
    }
    g.finish();
}
