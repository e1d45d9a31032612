//! End-to-end tests of one request over an in-memory region.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Decimal128Type, Int64Type};
use arrow::util::pretty::pretty_format_batches;
use quarry_proto::coprocessor::{
    self as pb, other_error::Code, AggFunc, AggKind, Aggregation, ColumnInfo, CopRequest,
    DagRequest, EncodeType, Projection, Selection, TableScan,
};

use super::{handle, Stop};
use crate::codec::key::{record_key, table_record_range};
use crate::codec::row::{decode_rows, Datum, RowEncoder};
use crate::expr::{ArithOp, CmpOp, Expr, ScalarValue};
use crate::storage::MemStorage;
use crate::types::{field_type, parse_date};

const TABLE: i64 = 42;
// Columns: 1 flag VARCHAR, 2 qty BIGINT, 3 price DECIMAL(15,2), 4 ship DATE
fn types() -> Vec<DataType> {
    vec![
        DataType::Utf8,
        DataType::Int64,
        DataType::Decimal128(15, 2),
        DataType::Date32,
    ]
}

/// 100 rows: flag cycles A/N/R, qty = h % 50 (NULL every 10th), price =
/// h * 1.25, ship = 1994-01-01 + h days.
fn region() -> MemStorage {
    let base = parse_date("1994-01-01").unwrap();
    let mut enc = RowEncoder::new();
    (0..100i64)
        .map(|h| {
            let flag = ["A", "N", "R"][(h % 3) as usize];
            let qty = if h % 10 == 9 {
                Datum::Null
            } else {
                Datum::Int(h % 50)
            };
            let mut v = Vec::new();
            enc.encode(
                &[
                    (1, Datum::Bytes(flag.as_bytes())),
                    (2, qty),
                    (3, Datum::Decimal(h as i128 * 125)),
                    (4, Datum::Date(base + h as i32)),
                ],
                &mut v,
            )
            .unwrap();
            (record_key(TABLE, h), v)
        })
        .collect()
}

/// Column `i` of a scan over all four columns.
fn col(i: usize) -> Expr {
    at(i, i as i64 + 1)
}

/// Scan output `index`, which is column id `id`.
fn at(index: usize, id: i64) -> Expr {
    Expr::Column {
        index,
        data_type: types()[id as usize - 1].clone(),
    }
}

fn scan(cols: &[i64]) -> TableScan {
    TableScan {
        table_id: TABLE,
        columns: cols
            .iter()
            .map(|&id| ColumnInfo {
                column_id: id,
                field_type: Some(field_type(&types()[id as usize - 1], true).unwrap()),
                ..Default::default()
            })
            .collect(),
        layout: 0,
    }
}

fn request(dag: DagRequest) -> CopRequest {
    let (start, end) = table_record_range(TABLE);
    CopRequest {
        ranges: vec![pb::KeyRange { start, end }],
        dag: Some(dag),
        ..Default::default()
    }
}

fn batches(resp: &pb::CopResponse) -> Vec<RecordBatch> {
    assert!(resp.other_error.is_none(), "{:?}", resp.other_error);
    crate::ipc::decode(&resp.data).unwrap().1
}

fn pretty(resp: &pb::CopResponse) -> String {
    pretty_format_batches(&batches(resp)).unwrap().to_string()
}

/// SELECT flag, COUNT(*), SUM(price), AVG(qty) WHERE ship < 1994-02-20
/// GROUP BY flag
fn aggregation_dag() -> DagRequest {
    let cond = Expr::compare(
        CmpOp::Lt,
        col(3),
        Expr::literal(ScalarValue::Utf8("1994-02-20".into())),
    )
    .unwrap();
    DagRequest {
        scan: Some(scan(&[1, 2, 3, 4])),
        selection: Some(Selection {
            conditions: vec![cond.to_proto().unwrap()],
        }),
        aggregation: Some(Aggregation {
            group_by: vec![col(0).to_proto().unwrap()],
            aggs: vec![
                AggFunc {
                    kind: AggKind::CountStar as i32,
                    arg: None,
                },
                AggFunc {
                    kind: AggKind::Sum as i32,
                    arg: Some(col(2).to_proto().unwrap()),
                },
                AggFunc {
                    kind: AggKind::Avg as i32,
                    arg: Some(col(1).to_proto().unwrap()),
                },
            ],
        }),
        ..Default::default()
    }
}

#[test]
fn partial_aggregation_with_group_by_and_filter() {
    let resp = handle(region(), &request(aggregation_dag()), &Stop::default(), 0);
    // Rows h = 0..=49 pass; A gets h = 0,3,..,48 (17 rows), N 17, R 16.
    assert_eq!(
        pretty(&resp).lines().nth(1).unwrap(),
        "| group_0 | agg_0_state_0 | agg_1_state_0 | agg_2_state_0 | agg_2_state_1 |"
    );
    let b = &batches(&resp)[0];
    let flags: Vec<_> = b
        .column(0)
        .as_string::<i32>()
        .iter()
        .map(|f| f.unwrap())
        .collect();
    let counts = b.column(1).as_primitive::<Int64Type>();
    let sums = b.column(2).as_primitive::<Decimal128Type>();
    // AVG(BIGINT)'s sum travels exact and wide, as SUM's does.
    let avg_sum = b.column(3).as_primitive::<Decimal128Type>();
    let avg_cnt = b.column(4).as_primitive::<Int64Type>();
    let a = flags.iter().position(|f| *f == "A").unwrap();
    assert_eq!(counts.value(a), 17);
    // sum of h*125 for h in 0,3,...,48 = 125 * 3 * (0+..+16) = 51000 -> 510.00
    assert_eq!(sums.value(a), 51000);
    // qty of A rows: h%50 for h = 0,3,..,48 minus h=9,39 (NULL)
    assert_eq!(
        avg_sum.value(a),
        (0..=48).step_by(3).filter(|h| h % 10 != 9).sum::<i128>()
    );
    assert_eq!(avg_cnt.value(a), 15);
    let summary = resp.summary.unwrap();
    assert_eq!(summary.scanned_keys, 100);
    assert_eq!(summary.output_rows, 3);
}

#[test]
fn count_star_reads_keys_only() {
    let dag = DagRequest {
        scan: Some(scan(&[])),
        aggregation: Some(Aggregation {
            group_by: vec![],
            aggs: vec![AggFunc {
                kind: AggKind::CountStar as i32,
                arg: None,
            }],
        }),
        ..Default::default()
    };
    let resp = handle(region(), &request(dag), &Stop::default(), 0);
    let b = &batches(&resp)[0];
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 100);
    // Key-only: 100 keys of 19 bytes and no value bytes.
    assert_eq!(resp.summary.unwrap().scanned_bytes, 100 * 19);
}

fn projection_dag(limit: u64) -> DagRequest {
    DagRequest {
        scan: Some(scan(&[2, 3])),
        projection: Some(Projection {
            exprs: vec![
                at(0, 2).to_proto().unwrap(),
                Expr::arith(ArithOp::Multiply, at(1, 3), at(0, 2))
                    .unwrap()
                    .to_proto()
                    .unwrap(),
            ],
        }),
        limit,
        ..Default::default()
    }
}

#[test]
fn byte_limited_responses_resume_where_they_stopped() {
    let mut req = request(projection_dag(0));
    req.max_response_bytes = 1;
    let mut seen = 0;
    let mut rounds = 0;
    loop {
        let resp = handle(region(), &req, &Stop::default(), 0);
        seen += batches(&resp).iter().map(|b| b.num_rows()).sum::<usize>();
        rounds += 1;
        if resp.remaining.is_empty() {
            break;
        }
        req.ranges = resp.remaining.clone();
        assert!(rounds < 200, "no progress");
    }
    assert_eq!(seen, 100);
    // The first pull asks for 1024 rows, so 100 rows fit in one response.
    assert_eq!(rounds, 1);
}

#[test]
fn limit_stops_the_scan() {
    let resp = handle(region(), &request(projection_dag(7)), &Stop::default(), 0);
    let rows: usize = batches(&resp).iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 7);
    assert!(resp.summary.unwrap().scanned_keys <= 7);
}

#[test]
fn top_n_ships_only_each_regions_first_rows_by_the_keys() {
    // qty DESC NULLS FIRST, then price ASC: the 10 NULL quantities come
    // first (h = 9, 19, …, 99; 49 among them), then qty 48 (h = 48, 98).
    let mut dag = projection_dag(0);
    dag.top_n = Some(pb::TopN {
        keys: vec![
            pb::SortKey {
                expr: Some(at(0, 2).to_proto().unwrap()),
                descending: true,
                nulls_first: true,
            },
            pb::SortKey {
                expr: Some(at(1, 3).to_proto().unwrap()),
                descending: false,
                nulls_first: false,
            },
        ],
        limit: 12,
    });
    let req = request(dag);
    let resp = handle(region(), &req, &Stop::default(), 0);
    let all = batches(&resp);
    let b = arrow::compute::concat_batches(&all[0].schema(), &all).unwrap();
    assert_eq!(b.num_rows(), 12);
    let qty = b.column(0).as_primitive::<Int64Type>();
    assert_eq!(qty.null_count(), 10);
    assert!((0..10).all(|i| qty.is_null(i)));
    assert_eq!((qty.value(10), qty.value(11)), (48, 48));
    // Every row was read, only twelve were sent.
    assert_eq!(resp.summary.unwrap().scanned_keys, 100);
    // A top-N beside an aggregation is refused.
    let mut bad = projection_dag(0);
    bad.projection = None;
    bad.aggregation = Some(Aggregation {
        group_by: vec![],
        aggs: vec![AggFunc {
            kind: AggKind::CountStar as i32,
            arg: None,
        }],
    });
    bad.top_n = Some(pb::TopN {
        keys: vec![],
        limit: 1,
    });
    let resp = handle(region(), &request(bad), &Stop::default(), 0);
    assert!(resp.other_error.is_some());
}

#[test]
fn rows_encoding_carries_the_same_answer_as_arrow() {
    let mut req = request(projection_dag(0));
    let arrow = handle(region(), &req, &Stop::default(), 0);
    req.encode_type = EncodeType::Rows as i32;
    let rows = handle(region(), &req, &Stop::default(), 0);
    let cols = decode_rows(&rows.data, &[DataType::Int64, DataType::Decimal128(30, 2)]).unwrap();
    let b = arrow::compute::concat_batches(&batches(&arrow)[0].schema(), &batches(&arrow)).unwrap();
    assert_eq!(cols[0].as_ref(), b.column(0).as_ref());
    assert_eq!(cols[1].len(), 100);
    assert_eq!(
        cols[1].as_primitive::<Decimal128Type>().values(),
        b.column(1).as_primitive::<Decimal128Type>().values()
    );
}

#[test]
fn errors_come_back_as_data_with_a_category() {
    // A column index past the scan's columns.
    let dag = DagRequest {
        scan: Some(scan(&[2])),
        projection: Some(Projection {
            exprs: vec![pb::Expr {
                kind: Some(pb::expr::Kind::Column(5)),
            }],
        }),
        ..Default::default()
    };
    let resp = handle(region(), &request(dag), &Stop::default(), 0);
    let e = resp.other_error.unwrap();
    assert_eq!(e.code, Code::InvalidInput as i32);
    assert!(e.message.contains("out of range"), "{}", e.message);

    // A deadline already past.
    let past = Instant::now() - Duration::from_secs(1);
    let stop = Stop {
        deadline: Some(past),
        ..Default::default()
    };
    let resp = handle(region(), &request(projection_dag(0)), &stop, 0);
    let e = resp.other_error.unwrap();
    assert_eq!(e.code, Code::DeadlineExceeded as i32);
    assert!(e.message.contains("deadline"), "{}", e.message);

    // A caller gone: the task stops at its next batch, saying why.
    let stop = Stop {
        cancelled: Some(Arc::new(AtomicBool::new(true))),
        ..Default::default()
    };
    let resp = handle(region(), &request(projection_dag(0)), &stop, 0);
    let e = resp.other_error.unwrap();
    assert_eq!(e.code, Code::DeadlineExceeded as i32);
    assert!(
        e.message.contains("cancelled by its caller"),
        "{}",
        e.message
    );
}

#[test]
fn a_region_sum_past_bigint_ships_exact() {
    let mut storage = MemStorage::new();
    let mut enc = RowEncoder::new();
    for h in 0..3 {
        let mut v = Vec::new();
        enc.encode(&[(2, Datum::Int(i64::MAX / 2))], &mut v)
            .unwrap();
        storage.put(record_key(TABLE, h), v);
    }
    let dag = DagRequest {
        scan: Some(scan(&[2])),
        aggregation: Some(Aggregation {
            group_by: vec![],
            aggs: vec![AggFunc {
                kind: AggKind::Sum as i32,
                arg: Some(
                    Expr::Column {
                        index: 0,
                        data_type: DataType::Int64,
                    }
                    .to_proto()
                    .unwrap(),
                ),
            }],
        }),
        ..Default::default()
    };
    // The partial is exact past BIGINT's range (i128 as DECIMAL(38, 0));
    // whether the total fits is the final stage's call.
    let resp = handle(storage, &request(dag), &Stop::default(), 0);
    assert!(resp.other_error.is_none(), "{:?}", resp.other_error);
    let b = &batches(&resp)[0];
    assert_eq!(
        b.column(0).as_primitive::<Decimal128Type>().value(0),
        3 * (i64::MAX / 2) as i128
    );
}

/// The table's range cut before rows 30 and 71: three parts, as
/// `handle_parts` takes them.
fn three_parts() -> Vec<Vec<crate::storage::KeyRange>> {
    use crate::storage::KeyRange;
    let (start, end) = table_record_range(TABLE);
    let cuts = [start, record_key(TABLE, 30), record_key(TABLE, 71), end];
    cuts.windows(2)
        .map(|w| vec![KeyRange::new(w[0].clone(), w[1].clone())])
        .collect()
}

/// `req` answered over `parts` of the storage `make` gives, its DAG
/// compiled once first as a store's batch does: not stopped, not queued.
fn in_parts<S: crate::storage::Storage>(
    make: &(dyn Fn() -> S + Sync),
    parts: Vec<Vec<crate::storage::KeyRange>>,
    req: &CopRequest,
) -> pb::CopResponse {
    super::handle_parts(
        make,
        parts,
        &super::compile(req.dag.as_ref()),
        req,
        &Stop::default(),
        0,
    )
}

#[test]
fn a_region_cut_into_parts_answers_what_the_whole_region_does() {
    // SELECT flag, SUM(price), COUNT(qty) GROUP BY flag, in 3 parts.
    let dag = DagRequest {
        scan: Some(scan(&[1, 2, 3])),
        aggregation: Some(Aggregation {
            group_by: vec![col(0).to_proto().unwrap()],
            aggs: vec![
                AggFunc {
                    kind: AggKind::Sum as i32,
                    arg: Some(col(2).to_proto().unwrap()),
                },
                AggFunc {
                    kind: AggKind::Count as i32,
                    arg: Some(col(1).to_proto().unwrap()),
                },
            ],
        }),
        ..Default::default()
    };
    let parts = three_parts();
    let storage = region();
    let make = || storage.clone();
    // Totals per flag, however the partial rows are spread.
    let totals = |bs: &[RecordBatch]| {
        let mut t = std::collections::BTreeMap::new();
        for b in bs {
            for r in 0..b.num_rows() {
                let e = t
                    .entry(b.column(0).as_string::<i32>().value(r).to_string())
                    .or_insert((0i128, 0i64));
                e.0 += b.column(1).as_primitive::<Decimal128Type>().value(r);
                e.1 += b.column(2).as_primitive::<Int64Type>().value(r);
            }
        }
        t
    };
    let whole = handle(region(), &request(dag.clone()), &Stop::default(), 0);
    let req = request(dag.clone());
    let split = in_parts(&make, parts.clone(), &req);
    assert_eq!(totals(&batches(&split)), totals(&batches(&whole)));
    // One partial row per flag per part.
    assert_eq!(split.summary.as_ref().unwrap().output_rows, 9);
    assert_eq!(split.summary.unwrap().scanned_keys, 100);
    // Rows on the wire too.
    let mut req = request(dag);
    req.encode_type = EncodeType::Rows as i32;
    let rows = in_parts(&make, parts, &req);
    assert!(rows.other_error.is_none(), "{:?}", rows.other_error);
    let cols = decode_rows(
        &rows.data,
        &[DataType::Utf8, DataType::Decimal128(38, 2), DataType::Int64],
    )
    .unwrap();
    let b = RecordBatch::try_from_iter(["f", "s", "c"].into_iter().zip(cols)).unwrap();
    assert_eq!(totals(&[b]), totals(&batches(&whole)));
}

#[test]
fn a_sieve_over_a_region_cut_into_parts_never_judges_one_part_of_a_group() {
    use quarry_proto::coprocessor::GroupSieve;
    // SELECT qty, COUNT(*) GROUP BY qty HAVING COUNT(*) > 1: every qty
    // comes twice (h and h + 50), so every group passes; with the cuts
    // at 30 and 71, qty 21..=28 has one row in the first part and one in
    // the last, inside the response's key range, each counting 1.
    let dag = DagRequest {
        scan: Some(scan(&[2])),
        aggregation: Some(Aggregation {
            group_by: vec![at(0, 2).to_proto().unwrap()],
            aggs: vec![AggFunc {
                kind: AggKind::CountStar as i32,
                arg: None,
            }],
        }),
        ..Default::default()
    };
    let over_one = Expr::compare(
        CmpOp::Gt,
        Expr::Column {
            index: 1,
            data_type: DataType::Int64,
        },
        Expr::literal(ScalarValue::Int64(1)),
    )
    .unwrap();
    let sieved = DagRequest {
        group_sieve: Some(GroupSieve {
            key_column: 0,
            conditions: vec![over_one.to_proto().unwrap()],
        }),
        ..dag.clone()
    };
    let parts = three_parts();
    let storage = region();
    let make = || storage.clone();
    let counts = |bs: &[RecordBatch]| {
        let mut t = std::collections::BTreeMap::new();
        for b in bs {
            let (k, c) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
            );
            for r in 0..b.num_rows() {
                *t.entry(k.is_valid(r).then(|| k.value(r))).or_insert(0) += c.value(r);
            }
        }
        t
    };
    let whole = counts(&batches(&handle(
        region(),
        &request(dag),
        &Stop::default(),
        0,
    )));
    let req = request(sieved);
    let split = in_parts(&make, parts, &req);
    assert_eq!(counts(&batches(&split)), whole);
    assert_eq!(whole.len(), 46, "45 values of qty and NULL");
}

/// Request decoding under fuzzing: valid requests with bytes changed, cut
/// or inserted, and plain garbage, decoded as the gRPC layer would and run
/// over a region. Whatever decodes is answered (rows or an error inside
/// the response), within its deadline, and never panics.
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    /// Cases per property: 3000, or `QUARRY_FUZZ_CASES` for longer runs
    /// (`docs/failure-tests.md`).
    fn cases() -> u32 {
        std::env::var("QUARRY_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000)
    }

    fn seeds() -> Vec<Vec<u8>> {
        let mut top_n = request(projection_dag(3));
        top_n.max_response_bytes = 64;
        [
            request(aggregation_dag()),
            request(projection_dag(0)),
            top_n,
        ]
        .iter()
        .map(|r| r.encode_to_vec())
        .collect()
    }

    fn answer(bytes: &[u8]) {
        if let Ok(req) = CopRequest::decode(bytes) {
            let stop = Stop {
                deadline: Some(Instant::now() + Duration::from_secs(5)),
                cancelled: None,
            };
            let started = Instant::now();
            let resp = handle(region(), &req, &stop, 0);
            assert!(started.elapsed() < Duration::from_secs(10));
            if let Some(e) = resp.other_error {
                assert!(!e.message.is_empty());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn mutated_requests_are_answered_never_a_panic(
            seed in 0usize..3,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut bytes = seeds()[seed].clone();
            for (at, byte, op) in edits {
                if bytes.is_empty() {
                    break;
                }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = byte,
                    1 => bytes[i] ^= 1 << (byte % 8),
                    2 => bytes.insert(i, byte),
                    _ => {
                        bytes.remove(i);
                    }
                }
            }
            if truncate && !bytes.is_empty() {
                bytes.truncate(cut.index(bytes.len()));
            }
            answer(&bytes);
        }

        #[test]
        fn garbage_requests_are_answered_never_a_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
        ) {
            answer(&bytes);
        }
    }
}
