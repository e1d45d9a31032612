//! The fused aggregation must answer exactly what the generic executors
//! answer, over packs and delta rows, with and without NULLs, and fail
//! the same way on overflow.

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use proptest::prelude::*;
use quarry_proto::coprocessor::AggKind;

use super::*;
use crate::aggregate::{AggregateFunction, Aggregator};
use crate::codec::key::pack_key;
use crate::codec::key::record_key;
use crate::codec::pack::PackBuilder;
use crate::codec::row::{Datum, RowEncoder};
use crate::executor::scan::ZoneFilter;
use crate::executor::{AggregationExecutor, BatchExecutor, SelectionExecutor, TableScanExecutor};
use crate::expr::{ArithOp, Bloom, CmpOp, Expr, ScalarValue};
use crate::storage::{KeyRange, MemStorage};

const TABLE: i64 = 9;

fn columns() -> Vec<(i64, DataType)> {
    vec![
        (1, DataType::Int64),
        (2, DataType::Decimal128(15, 2)),
        (3, DataType::Decimal128(15, 2)),
        (4, DataType::Date32),
        (5, DataType::Utf8),
        (6, DataType::Utf8),
    ]
}

#[derive(Debug, Clone)]
struct Row {
    qty: Option<i64>,
    price: Option<i64>,
    disc: Option<i64>,
    date: Option<i32>,
    flag: Option<&'static str>,
    status: &'static str,
}

impl Row {
    /// The row as a row-layout value.
    fn encode(&self, enc: &mut RowEncoder) -> Vec<u8> {
        let ids: Vec<(i64, Datum)> = columns()
            .iter()
            .map(|(id, _)| *id)
            .zip(self.datums())
            .collect();
        let mut v = Vec::new();
        enc.encode(&ids, &mut v).unwrap();
        v
    }

    fn datums(&self) -> Vec<Datum<'static>> {
        vec![
            self.qty.map_or(Datum::Null, Datum::Int),
            self.price
                .map_or(Datum::Null, |v| Datum::Decimal(v as i128)),
            self.disc.map_or(Datum::Null, |v| Datum::Decimal(v as i128)),
            self.date.map_or(Datum::Null, Datum::Date),
            self.flag
                .map_or(Datum::Null, |s| Datum::Bytes(s.as_bytes())),
            Datum::Bytes(self.status.as_bytes()),
        ]
    }
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
    nulls: bool,
) -> BoxedStrategy<Option<T>> {
    if nulls {
        proptest::option::weighted(0.95, s).boxed()
    } else {
        s.prop_map(Some).boxed()
    }
}

fn row_strategy(nulls: bool) -> impl Strategy<Value = Row> {
    (
        opt(1i64..=50, nulls),
        opt(100i64..=10_000_000, nulls),
        opt(0i64..=10, nulls),
        opt(8000i32..=10_600, nulls),
        opt(prop_oneof![Just("A"), Just("N"), Just("R")], nulls),
        prop_oneof![Just("F"), Just("O")],
    )
        .prop_map(|(qty, price, disc, date, flag, status)| Row {
            qty,
            price,
            disc,
            date,
            flag,
            status,
        })
}

/// Rows into storage: runs of packs (of `pack_rows`) and delta rows.
fn store(rows: &[Row], pack_rows: usize, delta_every: usize) -> MemStorage {
    let mut s = MemStorage::new();
    let mut b = PackBuilder::new(&columns()).unwrap();
    let mut enc = RowEncoder::new();
    let flush = |b: &mut PackBuilder, s: &mut MemStorage| {
        if !b.is_empty() {
            let (first, v) = b.finish().unwrap();
            s.put(pack_key(TABLE, first), v);
        }
    };
    for (h, r) in rows.iter().enumerate() {
        let h = h as i64 * 2;
        if delta_every > 0 && h as usize % delta_every == 1 % delta_every.max(1) {
            flush(&mut b, &mut s);
            s.put(record_key(TABLE, h), r.encode(&mut enc));
            continue;
        }
        b.push(h, &r.datums()).unwrap();
        if b.len() >= pack_rows {
            flush(&mut b, &mut s);
        }
    }
    flush(&mut b, &mut s);
    s
}

fn col(i: usize) -> Expr {
    Expr::Column {
        index: i,
        data_type: columns()[i].1.clone(),
    }
}

fn dec(v: i128, s: i8) -> Expr {
    Expr::Literal(ScalarValue::Decimal(
        v,
        crate::types::digits_of(v).max(s as u8).max(1),
        s,
    ))
}

type Aggs = Vec<(AggregateFunction, Option<Expr>)>;

/// Q1's and Q6's shapes over the test table, plus MIN/MAX/COUNT(x):
/// (conditions, group keys, aggregates).
fn query(q6: bool) -> (Vec<Expr>, Vec<Expr>, Aggs) {
    let date_le =
        Expr::compare(CmpOp::Le, col(3), Expr::Literal(ScalarValue::Date(10_400))).unwrap();
    let disc_price = Expr::arith(
        ArithOp::Multiply,
        col(1),
        Expr::arith(ArithOp::Minus, Expr::Literal(ScalarValue::Int64(1)), col(2)).unwrap(),
    )
    .unwrap();
    // Q1's sum_charge: disc_price × (1 + x), sharing disc_price.
    let charge = Expr::arith(
        ArithOp::Multiply,
        disc_price.clone(),
        Expr::arith(ArithOp::Plus, Expr::Literal(ScalarValue::Int64(1)), col(2)).unwrap(),
    )
    .unwrap();
    let agg = |k: AggKind, e: Option<Expr>| {
        (
            AggregateFunction::new(k, e.as_ref().map(Expr::data_type)).unwrap(),
            e,
        )
    };
    if q6 {
        let conds = vec![
            Expr::compare(CmpOp::Ge, col(3), Expr::Literal(ScalarValue::Date(9000))).unwrap(),
            Expr::compare(CmpOp::Lt, col(3), Expr::Literal(ScalarValue::Date(9365))).unwrap(),
            Expr::between(col(2), dec(5, 2), dec(7, 2), false).unwrap(),
            Expr::compare(CmpOp::Lt, col(0), Expr::Literal(ScalarValue::Int64(24))).unwrap(),
        ];
        let rev = Expr::arith(ArithOp::Multiply, col(1), col(2)).unwrap();
        (conds, vec![], vec![agg(AggKind::Sum, Some(rev))])
    } else {
        (
            vec![date_le],
            vec![col(4), col(5)],
            vec![
                agg(AggKind::Sum, Some(col(0))),
                agg(AggKind::Sum, Some(disc_price.clone())),
                agg(AggKind::Avg, Some(col(1))),
                agg(AggKind::Min, Some(col(3))),
                agg(AggKind::Max, Some(disc_price)),
                agg(AggKind::Count, Some(col(2))),
                agg(AggKind::CountStar, None),
                agg(AggKind::Sum, Some(charge)),
            ],
        )
    }
}

/// Q1's charge program multiplies the disc_price program's values
/// instead of computing them again.
#[test]
fn a_subtree_equal_to_an_earlier_program_is_computed_once() {
    let (conds, keys, aggs) = query(false);
    let plan = FusedPlan::compile(&columns(), &conds, &keys, &aggs).unwrap();
    let progs: Vec<String> = plan.progs.iter().map(|p| format!("{p:?}")).collect();
    let disc_price = progs.iter().position(|p| p.contains("Sub(")).unwrap();
    let charge = progs.iter().position(|p| p.contains("Add(")).unwrap();
    assert!(disc_price < charge, "{progs:#?}");
    assert!(
        progs[charge].contains(&format!("Prog({disc_price})")) && !progs[charge].contains("Sub("),
        "{progs:#?}"
    );
}

fn try_drain(exec: &mut dyn BatchExecutor) -> crate::Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    loop {
        let r = exec.next_batch(1000)?;
        out.push(r.chunk.materialize()?);
        if r.is_drained {
            return Ok(out);
        }
    }
}

/// Final-merges partials and prints the result rows sorted.
fn final_rows(
    partials: &[RecordBatch],
    keys: &[Expr],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> Vec<String> {
    let mut f = Aggregator::final_stage(
        keys.iter().map(Expr::data_type).collect(),
        aggs.iter().map(|(f, _)| f.clone()).collect(),
    )
    .unwrap();
    for b in partials {
        f.merge(b).unwrap();
    }
    let out = f.finish().unwrap();
    let mut rows: Vec<String> = (0..out.num_rows())
        .map(|r| {
            out.columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}

fn generic(
    s: impl crate::storage::Storage,
    conds: &[Expr],
    keys: &[Expr],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> crate::Result<Vec<RecordBatch>> {
    generic_at(s, u64::MAX, conds, keys, aggs)
}

fn generic_at(
    s: impl crate::storage::Storage,
    read_ts: u64,
    conds: &[Expr],
    keys: &[Expr],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> crate::Result<Vec<RecordBatch>> {
    let range = vec![KeyRange::new(vec![], vec![])];
    // As production builds it: the scan decodes only the rows the filter's
    // constant bounds keep (late materialization).
    let zone = ZoneFilter::from_conditions(conds, &columns());
    let scan = TableScanExecutor::new(s, &columns(), range, read_ts, false, zone)?;
    let sel = SelectionExecutor::new(Box::new(scan), conds.to_vec())?;
    let mut agg = AggregationExecutor::new(
        Box::new(sel),
        Aggregator::partial(keys.to_vec(), aggs.to_vec())?,
    );
    try_drain(&mut agg)
}

fn fused(
    s: impl crate::storage::Storage,
    conds: &[Expr],
    keys: &[Expr],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> crate::Result<(Vec<RecordBatch>, ExecSummary)> {
    fused_at(s, u64::MAX, conds, keys, aggs)
}

fn fused_at(
    s: impl crate::storage::Storage,
    read_ts: u64,
    conds: &[Expr],
    keys: &[Expr],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> crate::Result<(Vec<RecordBatch>, ExecSummary)> {
    let plan = FusedPlan::compile(&columns(), conds, keys, aggs).expect("fusable");
    let range = vec![KeyRange::new(vec![], vec![])];
    let mut exec = FusedAggExecutor::new(
        s,
        range,
        read_ts,
        &columns(),
        conds.to_vec(),
        plan,
        Aggregator::partial(keys.to_vec(), aggs.to_vec())?,
    )?;
    let out = try_drain(&mut exec)?;
    let mut summary = ExecSummary::default();
    exec.collect_summary(&mut summary);
    Ok((out, summary))
}

fn same_answer(rows: &[Row], pack_rows: usize, delta_every: usize, q6: bool) {
    let (conds, keys, aggs) = query(q6);
    let g = generic(store(rows, pack_rows, delta_every), &conds, &keys, &aggs).unwrap();
    let want = final_rows(&g, &keys, &aggs);
    // The fused kernels at every SIMD level (see `crate::simd`).
    crate::simd::for_each_level(|level| {
        let (f, _) = fused(store(rows, pack_rows, delta_every), &conds, &keys, &aggs).unwrap();
        assert_eq!(final_rows(&f, &keys, &aggs), want, "{level:?}");
    });
}

/// Rows all in packs, then versions committed at `COMMITTED` over some of
/// them: `changes` maps a row's index to its new row (None: deleted).
fn store_with_versions(
    rows: &[Row],
    pack_rows: usize,
    changes: &[(usize, Option<Row>)],
) -> MemStorage {
    use crate::codec::key::{classify_key, pack_mark_key, KeyKind};
    use crate::codec::mvcc::{version_key, version_value, WriteKind};
    use crate::storage::Storage;
    let mut s = store(rows, pack_rows, 0);
    let mut enc = RowEncoder::new();
    for (i, new) in changes {
        let row_key = record_key(TABLE, *i as i64 * 2);
        // As a prewrite does: mark the pack holding the row.
        let mut first = None;
        let upto = KeyRange::new(
            record_key(TABLE, i64::MIN),
            pack_key(TABLE, *i as i64 * 2 + 1),
        );
        s.peek(&upto, &mut |k, _| {
            if let KeyKind::Pack(f) = classify_key(k) {
                first = Some(f);
            }
            true
        })
        .unwrap();
        if let Some(f) = first {
            s.put(pack_mark_key(TABLE, f), vec![]);
        }
        match new {
            Some(r) => s.put(
                version_key(&row_key, COMMITTED, WriteKind::Put),
                version_value(COMMITTED - 1, &r.encode(&mut enc)),
            ),
            None => s.put(
                version_key(&row_key, COMMITTED, WriteKind::Delete),
                version_value(COMMITTED - 1, &[]),
            ),
        }
    }
    s
}

const COMMITTED: u64 = 100 << 18;

/// `COUNT(*)` through the scan (pack headers, no decoding) at `read_ts`.
fn count_star(s: MemStorage, read_ts: u64) -> usize {
    let range = vec![KeyRange::new(vec![], vec![])];
    let mut scan =
        TableScanExecutor::new(s, &[], range, read_ts, false, ZoneFilter::default()).unwrap();
    try_drain(&mut scan)
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn versions_over_packed_rows_hide_them_from_later_snapshots_only(
        rows in proptest::collection::vec(row_strategy(false), 1..400),
        pack_rows in 1usize..150,
        picks in proptest::collection::vec((any::<proptest::sample::Index>(), proptest::option::of(row_strategy(false))), 0..40),
        q6: bool,
    ) {
        let mut changes: Vec<(usize, Option<Row>)> = Vec::new();
        for (ix, new) in picks {
            let i = ix.index(rows.len());
            if !changes.iter().any(|(j, _)| *j == i) {
                changes.push((i, new));
            }
        }
        let after: Vec<Row> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match changes.iter().find(|(j, _)| *j == i) {
                Some((_, new)) => new.clone(),
                None => Some(r.clone()),
            })
            .collect();
        let (conds, keys, aggs) = query(q6);
        let versioned = || store_with_versions(&rows, pack_rows, &changes);
        for (read_ts, expect) in [(COMMITTED - 1, &rows), (COMMITTED, &after)] {
            let want = final_rows(
                &generic(store(expect, pack_rows, 0), &conds, &keys, &aggs).unwrap(),
                &keys,
                &aggs,
            );
            let g = generic_at(versioned(), read_ts, &conds, &keys, &aggs).unwrap();
            let (f, _) = fused_at(versioned(), read_ts, &conds, &keys, &aggs).unwrap();
            prop_assert_eq!(&final_rows(&g, &keys, &aggs), &want);
            prop_assert_eq!(&final_rows(&f, &keys, &aggs), &want);
            prop_assert_eq!(count_star(versioned(), read_ts), expect.len());
        }
    }

    #[test]
    fn fused_q1_matches_the_generic_executors(
        rows in proptest::collection::vec(row_strategy(false), 0..600),
        pack_rows in 1usize..300,
        delta_every in 0usize..7,
    ) {
        same_answer(&rows, pack_rows, delta_every, false);
    }

    #[test]
    fn fused_q6_matches_the_generic_executors(
        rows in proptest::collection::vec(row_strategy(false), 0..600),
        pack_rows in 1usize..300,
        delta_every in 0usize..7,
    ) {
        same_answer(&rows, pack_rows, delta_every, true);
    }

    #[test]
    fn blocks_with_nulls_take_the_generic_path_and_agree(
        rows in proptest::collection::vec(row_strategy(true), 0..400),
        pack_rows in 1usize..200,
        delta_every in 0usize..5,
        q6: bool,
    ) {
        same_answer(&rows, pack_rows, delta_every, q6);
    }
}

fn tpch_like(n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            qty: Some((i % 50 + 1) as i64),
            price: Some(100_000 + (i as i64 * 7919) % 9_000_000),
            disc: Some((i % 11) as i64),
            date: Some(8000 + (i as i32 * 37) % 2500),
            flag: Some(["A", "N", "R"][i % 3]),
            status: ["F", "O"][i % 2],
        })
        .collect()
}

#[test]
fn packs_outside_the_filter_are_skipped_by_their_zone_maps() {
    // Dates ascend with the handle, so packs cover disjoint date ranges.
    let rows: Vec<Row> = tpch_like(4096)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.date = Some(8000 + i as i32);
            r
        })
        .collect();
    let (conds, keys, aggs) = query(true);
    let (out, summary) = fused(store(&rows, 256, 0), &conds, &keys, &aggs).unwrap();
    // Dates 9000..9365 live in 2-3 of the 16 packs.
    assert!(summary.blocks_skipped >= 13, "{summary:?}");
    assert_eq!(summary.blocks_fallback, 0);
    let g = generic(store(&rows, 256, 0), &conds, &keys, &aggs).unwrap();
    assert_eq!(final_rows(&out, &keys, &aggs), final_rows(&g, &keys, &aggs));
}

#[test]
fn whole_packs_use_the_fused_kernels() {
    let (conds, keys, aggs) = query(false);
    let (_, summary) = fused(store(&tpch_like(5000), 1000, 0), &conds, &keys, &aggs).unwrap();
    assert_eq!(summary.blocks_fallback, 0, "{summary:?}");
    assert_eq!(summary.blocks_scanned, 5);
}

/// Blocks longer than the chunks the programs run over
/// (`block::CHUNK_ROWS`): packs and delta blocks of several chunks, their
/// rows read in place (Q1: nearly every row passes), gathered one by one
/// (Q6: few pass) and through a decoded span (Q6 where nearly half pass).
#[test]
fn blocks_of_several_chunks_match_the_generic_executors() {
    let half_pass_q6: Vec<Row> = tpch_like(12_000)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.date = Some(9000 + (i % 365) as i32);
            r.disc = Some(5 + (i % 3) as i64);
            r
        })
        .collect();
    for rows in [tpch_like(12_000), half_pass_q6] {
        for (pack_rows, delta_every) in [(12_000, 0), (5000, 0), (12_000, 1)] {
            same_answer(&rows, pack_rows, delta_every, false);
            same_answer(&rows, pack_rows, delta_every, true);
        }
    }
}

/// The final stage over `partials`, or its error.
fn try_final(
    partials: &[RecordBatch],
    aggs: &[(AggregateFunction, Option<Expr>)],
) -> crate::Result<RecordBatch> {
    let mut f = Aggregator::final_stage(vec![], aggs.iter().map(|(f, _)| f.clone()).collect())?;
    for b in partials {
        f.merge(b)?;
    }
    f.finish()
}

#[test]
fn a_sum_past_bigint_is_exact_in_the_partial_and_an_error_only_in_the_final_value() {
    let row = |q| Row {
        qty: Some(q),
        price: Some(1),
        disc: Some(1),
        date: Some(9000),
        flag: Some("A"),
        status: "F",
    };
    let big = vec![row(i64::MAX / 2), row(i64::MAX / 2), row(i64::MAX / 2)];
    let back = vec![row(-(i64::MAX / 2)), row(-(i64::MAX / 2)), row(7)];
    let aggs = vec![(
        AggregateFunction::new(AggKind::Sum, Some(DataType::Int64)).unwrap(),
        Some(col(0)),
    )];
    for delta in [0, 1] {
        let g = generic(store(&big, 2, delta), &[], &[], &aggs).unwrap();
        let (f, _) = fused(store(&big, 2, delta), &[], &[], &aggs).unwrap();
        // Both paths ship the exact partial, past BIGINT's range.
        for partial in [&g, &f] {
            let v = arrow::util::display::array_value_to_string(partial[0].column(0), 0).unwrap();
            assert_eq!(v, (3 * (i64::MAX / 2) as i128).to_string());
        }
        // Alone it overflows the result; with a region that brings it
        // back into range it is exact.
        let err = try_final(&f, &aggs).unwrap_err();
        assert!(matches!(err, crate::Error::Overflow(_)), "{err:?}");
        assert!(err.to_string().contains("BIGINT"), "{err}");
        let (f2, _) = fused(store(&back, 2, delta), &[], &[], &aggs).unwrap();
        let g2 = generic(store(&back, 2, delta), &[], &[], &aggs).unwrap();
        for (a, b) in [(&f, &f2), (&g, &g2)] {
            let both: Vec<RecordBatch> = a.iter().chain(b.iter()).cloned().collect();
            let out = try_final(&both, &aggs).unwrap();
            let v = arrow::util::display::array_value_to_string(out.column(0), 0).unwrap();
            assert_eq!(v, (i64::MAX / 2 + 7).to_string());
        }
    }
}

#[test]
fn shapes_without_a_fused_form_are_refused_at_compile_time() {
    let aggs = vec![(
        AggregateFunction::new(AggKind::Sum, Some(DataType::Decimal128(38, 6))).unwrap(),
        Some(Expr::arith(ArithOp::Divide, col(1), col(2)).unwrap()),
    )];
    assert!(FusedPlan::compile(&columns(), &[], &[], &aggs).is_none());
    let like = Expr::like(col(4), "A%".into(), false).unwrap();
    let (_, keys, aggs) = query(false);
    assert!(FusedPlan::compile(&columns(), &[like], &keys, &aggs).is_none());
}

#[test]
fn an_empty_region_answers_one_row_without_group_by() {
    let (conds, keys, aggs) = query(true);
    let (out, _) = fused(MemStorage::new(), &conds, &keys, &aggs).unwrap();
    let rows: usize = out.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 1);
    assert_eq!(out.last().unwrap().column(0).null_count(), 1);
}

/// Not a test: prints the best of many runs of the Q1 and Q6 shapes over
/// 600k generated rows, fused and generic, for quick A/B checks on a noisy
/// machine (`cargo test --release -p quarry-coprocessor speed_probe --
/// --ignored --nocapture`). The criterion benches are the reference.
#[test]
#[ignore]
fn speed_probe() {
    let rows = tpch_like(600_000);
    for q6 in [true, false] {
        let (conds, keys, aggs) = query(q6);
        let s = std::cell::RefCell::new(store(&rows, crate::codec::pack::PACK_ROWS, 0));
        let best = |f: &dyn Fn()| {
            (0..100)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .fold(f64::INFINITY, f64::min)
        };
        let fused_ms = best(&|| {
            fused(&mut *s.borrow_mut(), &conds, &keys, &aggs).unwrap();
        });
        // QUARRY_PROBE=fused skips the generic path (for profiling).
        let generic_ms = if std::env::var("QUARRY_PROBE").as_deref() == Ok("fused") {
            f64::NAN
        } else {
            best(&|| {
                generic(&mut *s.borrow_mut(), &conds, &keys, &aggs).unwrap();
            })
        };
        println!(
            "{}: fused {fused_ms:.2} ms, generic {generic_ms:.2} ms (best of 100, 600k rows)",
            if q6 { "q6" } else { "q1" }
        );
    }
}

#[test]
fn a_never_equal_ne_still_drops_null_rows() {
    // price <> 0.055 compares at scale 3; no DECIMAL(15,2) equals it, but
    // NULL <> x is NULL, and the row is filtered out.
    let rows: Vec<Row> = (0..300)
        .map(|i| Row {
            price: (i % 4 != 0).then_some(1000 + i),
            ..tpch_like(1)[0].clone()
        })
        .collect();
    let conds = vec![Expr::compare(CmpOp::Ne, col(1), dec(55, 3)).unwrap()];
    let aggs = vec![(
        AggregateFunction::new(AggKind::CountStar, None).unwrap(),
        None,
    )];
    let (f, _) = fused(store(&rows, 64, 0), &conds, &[], &aggs).unwrap();
    let g = generic(store(&rows, 64, 0), &conds, &[], &aggs).unwrap();
    assert_eq!(final_rows(&f, &[], &aggs), final_rows(&g, &[], &aggs));
    assert_eq!(final_rows(&f, &[], &aggs), vec!["225".to_string()]);
}

#[test]
fn a_bound_past_bigint_selects_nothing() {
    let cond = Expr::compare(
        CmpOp::Gt,
        col(0),
        Expr::Literal(ScalarValue::Int64(i64::MAX)),
    )
    .unwrap();
    let aggs = vec![(
        AggregateFunction::new(AggKind::CountStar, None).unwrap(),
        None,
    )];
    let plan = FusedPlan::compile(&columns(), std::slice::from_ref(&cond), &[], &aggs).unwrap();
    assert_eq!(plan.preds, vec![Pred::Const(false)]);
}

#[test]
fn a_cast_to_a_narrower_precision_overflows_on_both_paths() {
    // SUM(CAST(price AS DECIMAL(5,2))): prices reach 100000.00.
    let arg = Expr::cast(col(1), DataType::Decimal128(5, 2)).unwrap();
    let aggs = vec![(
        AggregateFunction::new(AggKind::Sum, Some(arg.data_type())).unwrap(),
        Some(arg),
    )];
    let rows = tpch_like(500);
    let g = generic(store(&rows, 100, 0), &[], &[], &aggs);
    assert!(
        matches!(
            g,
            Err(crate::Error::Overflow(_)) | Err(crate::Error::InvalidInput(_))
        ),
        "{g:?}"
    );
    let f = fused(store(&rows, 100, 0), &[], &[], &aggs);
    assert_eq!(
        std::mem::discriminant(&f.map(|_| ()).unwrap_err()),
        std::mem::discriminant(&g.unwrap_err())
    );
}

#[test]
fn a_join_keys_bloom_filter_keeps_the_same_rows_on_both_paths() {
    // Keys 0..6000 (some NULL), a Bloom filter of the multiples of 7.
    let rows: Vec<Row> = tpch_like(6000)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.qty = (i % 13 != 5).then_some(i as i64);
            r
        })
        .collect();
    let keys: Vec<i64> = (0..6000).filter(|k| k % 7 == 0).collect();
    let bloom = Bloom::build(&keys, 12);
    let cond = Expr::in_bloom(col(0), bloom.clone()).unwrap();
    let aggs = vec![(
        AggregateFunction::new(AggKind::CountStar, None).unwrap(),
        None,
    )];
    let conds = std::slice::from_ref(&cond);
    let plan = FusedPlan::compile(&columns(), conds, &[], &aggs).unwrap();
    assert!(matches!(plan.preds[..], [Pred::Bloom { col: 0, .. }]));
    // Every key kept, NULLs dropped, a few false hits let through.
    let want = rows
        .iter()
        .filter(|r| r.qty.is_some_and(|q| bloom.may_contain(q)))
        .count();
    let exact = rows
        .iter()
        .filter(|r| r.qty.is_some_and(|q| q % 7 == 0))
        .count();
    assert!(
        want >= exact && want < exact + exact / 20,
        "{want} vs {exact}"
    );
    for (pack_rows, delta_every) in [(256, 0), (100, 3), (6000, 0)] {
        let (f, _) = fused(store(&rows, pack_rows, delta_every), conds, &[], &aggs).unwrap();
        let g = generic(store(&rows, pack_rows, delta_every), conds, &[], &aggs).unwrap();
        assert_eq!(final_rows(&f, &[], &aggs), vec![want.to_string()]);
        assert_eq!(final_rows(&g, &[], &aggs), vec![want.to_string()]);
    }
    // Only BIGINT keys: a DATE column is refused.
    let err = Expr::in_bloom(col(3), bloom).unwrap_err().to_string();
    assert!(err.contains("BIGINT"), "{err}");
}

/// Rows whose BIGINT key spreads over a wide range (a part key), a few
/// values repeating, so that groups span packs.
fn wide_keys(n: usize) -> Vec<Row> {
    tpch_like(n)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.qty = Some(((i as i64 * 7919) % 200_000) / 3 * 3);
            r
        })
        .collect()
}

#[test]
fn wide_integer_group_keys_stay_on_the_fused_path() {
    let rows = wide_keys(6000);
    let agg = |k: AggKind, e: Option<Expr>| {
        (
            AggregateFunction::new(k, e.as_ref().map(Expr::data_type)).unwrap(),
            e,
        )
    };
    let aggs = vec![
        agg(AggKind::Avg, Some(col(1))),
        agg(AggKind::Sum, Some(col(2))),
        agg(AggKind::CountStar, None),
    ];
    let listed: Vec<Expr> = rows
        .iter()
        .step_by(97)
        .map(|r| Expr::Literal(ScalarValue::Int64(r.qty.unwrap())))
        .collect();
    let few = Expr::in_list(col(0), listed, false).unwrap();
    let most = Expr::compare(CmpOp::Ge, col(3), Expr::Literal(ScalarValue::Date(8100))).unwrap();
    // The key alone and with a dictionary string; all rows, a few (TPC-H
    // Q17's part keys) and most (a mask).
    for keys in [vec![col(0)], vec![col(0), col(4)]] {
        for conds in [vec![], vec![few.clone()], vec![most.clone()]] {
            let g = generic(store(&rows, 1000, 0), &conds, &keys, &aggs).unwrap();
            let g = final_rows(&g, &keys, &aggs);
            assert!(g.len() > 50, "{}", g.len());
            crate::simd::for_each_level(|level| {
                let (f, summary) = fused(store(&rows, 1000, 0), &conds, &keys, &aggs).unwrap();
                assert_eq!(summary.blocks_fallback, 0, "{conds:?} {summary:?}");
                assert_eq!(final_rows(&f, &keys, &aggs), g, "{conds:?} {level:?}");
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn wide_integer_keys_match_the_generic_executors(
        rows in proptest::collection::vec(row_strategy(false), 0..600),
        spread in 1i64..1_000_000,
        pack_rows in 1usize..300,
        delta_every in 0usize..7,
        q6: bool,
    ) {
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|mut r| {
                r.qty = r.qty.map(|q| q * spread);
                r
            })
            .collect();
        let (conds, _, aggs) = query(q6);
        let keys = vec![col(0), col(5)];
        let g = generic(store(&rows, pack_rows, delta_every), &conds, &keys, &aggs).unwrap();
        let (f, _) = fused(store(&rows, pack_rows, delta_every), &conds, &keys, &aggs).unwrap();
        prop_assert_eq!(final_rows(&f, &keys, &aggs), final_rows(&g, &keys, &aggs));
    }
}
