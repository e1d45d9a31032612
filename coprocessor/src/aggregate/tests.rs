use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Int64Array, RecordBatch, StringArray,
};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Decimal128Type, Field, Float64Type, Int64Type, Schema};
use quarry_proto::coprocessor::AggKind;

use super::*;
use crate::expr::Expr;

fn input(flags: &[&str], prices: &[i128], qty: &[Option<i64>]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("flag", DataType::Utf8, true),
        Field::new("price", DataType::Decimal128(15, 2), true),
        Field::new("qty", DataType::Int64, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from(flags.to_vec())),
            Arc::new(
                Decimal128Array::from(prices.to_vec())
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(Int64Array::from(qty.to_vec())),
        ],
    )
    .unwrap()
}

fn col(b: &RecordBatch, i: usize) -> Expr {
    Expr::column(i, b.schema().as_ref()).unwrap()
}

/// flag, COUNT(*), SUM(price), AVG(qty), MIN(qty), MAX(flag), COUNT(qty)
fn partial_for(b: &RecordBatch) -> Aggregator {
    let f = |k, t: Option<DataType>| AggregateFunction::new(k, t).unwrap();
    Aggregator::partial(
        vec![col(b, 0)],
        vec![
            (f(AggKind::CountStar, None), None),
            (
                f(AggKind::Sum, Some(DataType::Decimal128(15, 2))),
                Some(col(b, 1)),
            ),
            (f(AggKind::Avg, Some(DataType::Int64)), Some(col(b, 2))),
            (f(AggKind::Min, Some(DataType::Int64)), Some(col(b, 2))),
            (f(AggKind::Max, Some(DataType::Utf8)), Some(col(b, 0))),
            (f(AggKind::Count, Some(DataType::Int64)), Some(col(b, 2))),
        ],
    )
    .unwrap()
}

fn final_for(p: &Aggregator) -> Aggregator {
    Aggregator::final_stage(vec![DataType::Utf8], p.functions().to_vec()).unwrap()
}

#[test]
fn partials_from_two_regions_merge_to_the_single_pass_answer() {
    let r1 = input(&["A", "N", "A"], &[100, 250, 50], &[Some(1), Some(2), None]);
    let r2 = input(&["N", "R"], &[1000, 5], &[Some(4), Some(7)]);
    let mut finals = None;
    for sel in [None, Some(BooleanBuffer::from(vec![true, true, true]))] {
        let mut p1 = partial_for(&r1);
        p1.update(&r1, sel.as_ref()).unwrap();
        let mut p2 = partial_for(&r2);
        p2.update(&r2, None).unwrap();
        let mut fin = final_for(&p1);
        fin.merge(&p1.finish().unwrap()).unwrap();
        fin.merge(&p2.finish().unwrap()).unwrap();
        finals = Some(fin.finish().unwrap());
    }
    let out = finals.unwrap();
    let flags: Vec<_> = out
        .column(0)
        .as_string::<i32>()
        .iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(flags, vec!["A", "N", "R"]);
    let counts: Vec<i64> = out.column(1).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(counts, vec![2, 2, 1]);
    assert_eq!(out.column(2).data_type(), &DataType::Decimal128(38, 2));
    let sums: Vec<i128> = out
        .column(2)
        .as_primitive::<Decimal128Type>()
        .values()
        .to_vec();
    assert_eq!(sums, vec![150, 1250, 5]);
    let avg = out.column(3).as_primitive::<Float64Type>();
    assert_eq!((avg.value(0), avg.value(1), avg.value(2)), (1.0, 3.0, 7.0));
    let min = out.column(4).as_primitive::<Int64Type>();
    assert_eq!((min.value(0), min.value(1), min.value(2)), (1, 2, 7));
    assert_eq!(out.column(5).as_string::<i32>().value(2), "R");
    let cnt: Vec<i64> = out.column(6).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(cnt, vec![1, 2, 1], "COUNT(qty) skips the NULL");
}

#[test]
fn rows_outside_the_selection_are_not_aggregated_and_make_no_groups() {
    let b = input(&["A", "N", "R"], &[1, 2, 3], &[Some(1), Some(2), Some(3)]);
    let mut p = partial_for(&b);
    p.update(&b, Some(&BooleanBuffer::from(vec![false, true, false])))
        .unwrap();
    let out = p.finish().unwrap();
    assert_eq!(out.num_rows(), 1);
    assert_eq!(out.column(0).as_string::<i32>().value(0), "N");
}

#[test]
fn no_group_by_over_no_rows_gives_one_row_of_zero_and_null() {
    let f = AggregateFunction::new(AggKind::Sum, Some(DataType::Int64)).unwrap();
    let c = AggregateFunction::new(AggKind::CountStar, None).unwrap();
    let b = input(&[], &[], &[]);
    let mut p = Aggregator::partial(
        vec![],
        vec![(f.clone(), Some(col(&b, 2))), (c.clone(), None)],
    )
    .unwrap();
    p.update(&b, None).unwrap();
    let partial = p.finish().unwrap();
    assert_eq!(partial.num_rows(), 1);
    let mut fin = Aggregator::final_stage(vec![], vec![f, c]).unwrap();
    fin.merge(&partial).unwrap();
    let out = fin.finish().unwrap();
    assert_eq!(out.num_rows(), 1);
    assert!(out.column(0).is_null(0), "SUM of nothing is NULL");
    assert_eq!(out.column(1).as_primitive::<Int64Type>().value(0), 0);
}

#[test]
fn sum_overflow_is_reported_only_when_the_final_value_does_not_fit() {
    let f = AggregateFunction::new(AggKind::Sum, Some(DataType::Int64)).unwrap();
    let region = |v: &[Option<i64>]| {
        let b = input(&vec!["A"; v.len()], &vec![0; v.len()], v);
        let mut p = Aggregator::partial(vec![], vec![(f.clone(), Some(col(&b, 2)))]).unwrap();
        p.update(&b, None).unwrap();
        p.finish().unwrap()
    };
    let total = |partials: &[RecordBatch]| {
        let mut fin = Aggregator::final_stage(vec![], vec![f.clone()]).unwrap();
        for p in partials {
            fin.merge(p).unwrap();
        }
        fin.finish()
    };
    // No region overflows; the total does.
    let err = total(&[region(&[Some(i64::MAX - 10)]), region(&[Some(100)])]).unwrap_err();
    assert!(matches!(err, crate::Error::Overflow(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "SUM overflowed BIGINT: the exact result does not fit"
    );
    // One region's partial leaves BIGINT's range, and the total comes back
    // into it: exact, no error.
    let past = region(&[Some(i64::MAX), Some(1)]);
    let out = total(&[past, region(&[Some(-5)])]).unwrap();
    assert_eq!(
        out.column(0).as_primitive::<Int64Type>().value(0),
        i64::MAX - 4
    );
}

#[test]
fn argument_types_are_checked() {
    let err = AggregateFunction::new(AggKind::Sum, Some(DataType::Utf8)).unwrap_err();
    assert_eq!(err.to_string(), "SUM needs a numeric argument, got VARCHAR");
    let err = AggregateFunction::new(AggKind::Min, Some(DataType::Boolean)).unwrap_err();
    assert_eq!(err.to_string(), "MIN does not support BOOLEAN");
    let _: ArrayRef = Arc::new(Int64Array::from(vec![1]));
}
