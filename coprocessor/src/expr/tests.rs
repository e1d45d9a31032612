use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BooleanArray, Date32Array, Decimal128Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Decimal128Type, Field, Int64Type, Schema};

use super::*;
use crate::types::parse_date;

fn dec(values: &[i128], p: u8, s: i8) -> ArrayRef {
    Arc::new(
        Decimal128Array::from(values.to_vec())
            .with_precision_and_scale(p, s)
            .unwrap(),
    )
}

/// price DECIMAL(15,2), discount DECIMAL(15,2), qty BIGINT, ship DATE, flag VARCHAR
fn batch() -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("price", DataType::Decimal128(15, 2), true),
        Field::new("discount", DataType::Decimal128(15, 2), true),
        Field::new("qty", DataType::Int64, true),
        Field::new("ship", DataType::Date32, true),
        Field::new("flag", DataType::Utf8, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            // 100.00, 250.50, 1.00
            dec(&[10000, 25050, 100], 15, 2),
            // 0.06, 0.10, 0.00
            dec(&[6, 10, 0], 15, 2),
            Arc::new(Int64Array::from(vec![Some(10), None, Some(i64::MAX)])),
            Arc::new(Date32Array::from(vec![
                parse_date("1994-01-01").unwrap(),
                parse_date("1995-06-30").unwrap(),
                parse_date("1998-12-01").unwrap(),
            ])),
            Arc::new(StringArray::from(vec![Some("A"), Some("N"), None])),
        ],
    )
    .unwrap()
}

fn col(i: usize) -> Expr {
    Expr::column(i, batch().schema().as_ref()).unwrap()
}

fn int(v: i64) -> Expr {
    Expr::literal(ScalarValue::Int64(v))
}

fn decimal_lit(text: &str) -> Expr {
    let (v, p, s) = crate::types::parse_decimal(text).unwrap();
    Expr::literal(ScalarValue::Decimal(v, p, s))
}

fn eval(e: &Expr) -> ArrayRef {
    e.evaluate_to_array(&batch(), None).unwrap()
}

fn bools(a: &ArrayRef) -> Vec<Option<bool>> {
    a.as_boolean().iter().collect()
}

#[test]
fn tpch_q1_charge_has_scale_6_and_is_exact() {
    // price * (1 - discount) * (1 + 0.05)
    let one_minus = Expr::arith(ArithOp::Minus, int(1), col(1)).unwrap();
    assert_eq!(one_minus.data_type(), DataType::Decimal128(16, 2));
    let disc_price = Expr::arith(ArithOp::Multiply, col(0), one_minus).unwrap();
    assert_eq!(disc_price.data_type(), DataType::Decimal128(31, 4));
    let charge = Expr::arith(
        ArithOp::Multiply,
        disc_price,
        Expr::arith(ArithOp::Plus, int(1), decimal_lit("0.05")).unwrap(),
    )
    .unwrap();
    assert_eq!(charge.data_type(), DataType::Decimal128(35, 6));
    let out = eval(&charge);
    let v: Vec<i128> = out.as_primitive::<Decimal128Type>().values().to_vec();
    // 100.00 * 0.94 * 1.05 = 98.700000; 250.50 * 0.90 * 1.05 = 236.722500
    assert_eq!(v, vec![98_700_000, 236_722_500, 1_050_000]);
}

#[test]
fn constants_fold_while_building() {
    let e = Expr::arith(ArithOp::Minus, decimal_lit("0.06"), decimal_lit("0.01")).unwrap();
    assert_eq!(e, Expr::Literal(ScalarValue::Decimal(5, 3, 2)));
    let e = Expr::compare(CmpOp::Lt, int(1), int(2)).unwrap();
    assert_eq!(e, Expr::Literal(ScalarValue::Boolean(true)));
}

#[test]
fn comparisons_align_decimal_scales_without_casting_the_column() {
    // discount BETWEEN 0.05 AND 0.07: the column keeps its type.
    let e = Expr::between(col(1), decimal_lit("0.05"), decimal_lit("0.07"), false).unwrap();
    assert!(!e.is_fallible(), "{e:?}");
    assert_eq!(bools(&eval(&e)), vec![Some(true), Some(false), Some(false)]);
    // price < 24 compares 100.00 with 24.00.
    let e = Expr::compare(CmpOp::Lt, col(0), int(24)).unwrap();
    assert!(!e.is_fallible());
    assert_eq!(bools(&eval(&e)), vec![Some(false), Some(false), Some(true)]);
}

#[test]
fn dates_compare_with_date_strings() {
    let e = Expr::compare(
        CmpOp::Ge,
        col(3),
        Expr::literal(ScalarValue::Utf8("1995-01-01".into())),
    )
    .unwrap();
    assert_eq!(bools(&eval(&e)), vec![Some(false), Some(true), Some(true)]);
    let err = Expr::compare(CmpOp::Eq, col(3), col(2)).unwrap_err();
    assert_eq!(err.to_string(), "cannot compare DATE with BIGINT");
}

#[test]
fn integer_overflow_is_an_error_not_a_wrap() {
    let e = Expr::arith(ArithOp::Plus, col(2), int(1)).unwrap();
    let err = e.evaluate(&batch(), None).unwrap_err();
    assert!(matches!(err, crate::Error::Overflow(_)), "{err:?}");
    assert!(err.to_string().contains("BIGINT overflow"), "{err}");
}

#[test]
fn rows_outside_the_selection_cannot_fail() {
    let e = Expr::arith(ArithOp::Plus, col(2), int(1)).unwrap();
    let sel = BooleanBuffer::from(vec![true, true, false]);
    let out = e.evaluate_to_array(&batch(), Some(&sel)).unwrap();
    assert_eq!(out.as_primitive::<Int64Type>().value(0), 11);
}

#[test]
fn decimal_overflow_past_38_digits_is_an_error() {
    let big = decimal_lit("99999999999999999999999999999999999999");
    let e = Expr::arith(ArithOp::Multiply, big.clone(), col(0));
    let err = e.and_then(|e| e.evaluate(&batch(), None)).unwrap_err();
    assert!(matches!(err, crate::Error::Overflow(_)), "{err:?}");
    // Folding constants surfaces the overflow at build time.
    let err = Expr::arith(ArithOp::Plus, big.clone(), big).unwrap_err();
    assert!(matches!(err, crate::Error::Overflow(_)), "{err:?}");
}

#[test]
fn division_is_decimal_rounded_and_checks_zero() {
    let e = Expr::arith(ArithOp::Divide, int(2), int(3)).unwrap();
    assert_eq!(e, Expr::Literal(ScalarValue::Decimal(6667, 5, 4)));
    let e = Expr::arith(ArithOp::Divide, col(0), col(1)).unwrap();
    let err = e.evaluate(&batch(), None).unwrap_err();
    assert_eq!(err.to_string(), "division by zero");
}

#[test]
fn three_valued_logic_in_like_and_is_null() {
    let like = Expr::like(col(4), "A%".into(), false).unwrap();
    assert_eq!(bools(&eval(&like)), vec![Some(true), Some(false), None]);
    let in_list = Expr::in_list(
        col(4),
        vec![
            Expr::literal(ScalarValue::Utf8("N".into())),
            Expr::literal(ScalarValue::Utf8("R".into())),
        ],
        false,
    )
    .unwrap();
    assert_eq!(bools(&eval(&in_list)), vec![Some(false), Some(true), None]);
    let or = Expr::logic(LogicOp::Or, in_list, Expr::is_null(col(4), false).unwrap()).unwrap();
    assert_eq!(bools(&eval(&or)), vec![Some(false), Some(true), Some(true)]);
    let err = Expr::like(col(2), "1%".into(), false).unwrap_err();
    assert!(err.to_string().contains("LIKE needs a VARCHAR"), "{err}");
    let not = Expr::logical_not(Expr::is_null(col(2), true).unwrap()).unwrap();
    assert_eq!(
        bools(&eval(&not)),
        vec![Some(false), Some(true), Some(false)]
    );
    let _ = BooleanArray::from(vec![true]);
}

#[test]
fn a_long_integer_in_list_gives_what_the_short_one_gives() {
    // qty: 10, NULL, i64::MAX. Long lists are probed through a hash set.
    let long: Vec<Expr> = (0..40).map(|i| int(i * 5)).collect();
    for negated in [false, true] {
        let e = Expr::in_list(col(2), long.clone(), negated).unwrap();
        let want = if negated { Some(false) } else { Some(true) };
        assert_eq!(bools(&eval(&e)), vec![want, None, want.map(|b| !b)]);
        let short = Expr::in_list(col(2), vec![int(10), int(5)], negated).unwrap();
        assert_eq!(bools(&eval(&short)), bools(&eval(&e)));
    }
}

#[test]
fn type_errors_name_the_types() {
    let err = Expr::arith(ArithOp::Plus, col(3), int(1)).unwrap_err();
    assert_eq!(err.to_string(), "cannot apply + to DATE and BIGINT");
    let err = Expr::and(col(0), col(1)).unwrap_err();
    assert!(
        err.to_string().contains("AND needs a BOOLEAN operand"),
        "{err}"
    );
}

#[test]
fn proto_round_trip_rebuilds_the_same_expression() {
    let types: Vec<DataType> = batch()
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let exprs = vec![
        Expr::arith(
            ArithOp::Multiply,
            col(0),
            Expr::arith(ArithOp::Minus, int(1), col(1)).unwrap(),
        )
        .unwrap(),
        Expr::between(col(1), decimal_lit("0.05"), decimal_lit("0.07"), true).unwrap(),
        Expr::in_list(col(2), vec![int(1), int(2)], true).unwrap(),
        Expr::like(col(4), "x_%".into(), true).unwrap(),
        Expr::cast(col(2), DataType::Float64).unwrap(),
        Expr::negate(col(0)).unwrap(),
        Expr::is_null(col(3), true).unwrap(),
        Expr::arith(ArithOp::Modulo, col(2), int(7)).unwrap(),
        Expr::case(
            vec![(Expr::compare(CmpOp::Eq, col(4), utf8("A")).unwrap(), col(0))],
            Some(col(1)),
        )
        .unwrap(),
        Expr::case(vec![(Expr::is_null(col(2), false).unwrap(), int(1))], None).unwrap(),
        Expr::coalesce(vec![col(4), utf8("none")]).unwrap(),
        Expr::date_part(DatePart::Quarter, col(3)).unwrap(),
        Expr::substring(col(4), 2, Some(3)).unwrap(),
        Expr::substring(col(4), -1, None).unwrap(),
        Expr::octet_length(col(4)).unwrap(),
        Expr::in_bloom(col(2), super::Bloom::build(&[1, 5, 9], 12)).unwrap(),
    ];
    for e in exprs {
        let back = Expr::from_proto(&e.to_proto().unwrap(), &types).unwrap();
        assert_eq!(back, e);
    }
}

#[test]
fn hostile_protos_are_rejected() {
    use quarry_proto::coprocessor as pb;
    let mut e = pb::Expr {
        kind: Some(pb::expr::Kind::Column(0)),
    };
    for _ in 0..1000 {
        e = pb::Expr {
            kind: Some(pb::expr::Kind::Func(pb::ScalarFunc {
                kind: pb::FuncKind::Negate as i32,
                args: vec![e],
                cast_to: None,
                ..Default::default()
            })),
        };
    }
    let err = Expr::from_proto(&e, &[DataType::Int64]).unwrap_err();
    assert!(err.to_string().contains("nested deeper"), "{err}");
    let e = pb::Expr {
        kind: Some(pb::expr::Kind::Column(9)),
    };
    assert!(Expr::from_proto(&e, &[DataType::Int64]).is_err());
    // A packed list belongs to IN only, and tests one value.
    let packed = |kind: pb::FuncKind, args: usize| pb::Expr {
        kind: Some(pb::expr::Kind::Func(pb::ScalarFunc {
            kind: kind as i32,
            args: vec![
                pb::Expr {
                    kind: Some(pb::expr::Kind::Column(0)),
                };
                args
            ],
            cast_to: None,
            int_list: vec![1, 2, 3],
            ..Default::default()
        })),
    };
    assert!(Expr::from_proto(&packed(pb::FuncKind::InList, 1), &[DataType::Int64]).is_ok());
    for bad in [packed(pb::FuncKind::Eq, 1), packed(pb::FuncKind::InList, 2)] {
        assert!(Expr::from_proto(&bad, &[DataType::Int64]).is_err());
    }
    // A Bloom filter needs whole blocks and a BIGINT to test.
    let bloom = |bytes: usize, column: u32| pb::Expr {
        kind: Some(pb::expr::Kind::Func(pb::ScalarFunc {
            kind: pb::FuncKind::BloomFilter as i32,
            args: vec![pb::Expr {
                kind: Some(pb::expr::Kind::Column(column)),
            }],
            bloom: vec![0; bytes],
            ..Default::default()
        })),
    };
    let types = [DataType::Int64, DataType::Utf8];
    assert!(Expr::from_proto(&bloom(64, 0), &types).is_ok());
    for (bad, why) in [
        (bloom(0, 0), "Bloom filter is 1 to"),
        (bloom(40, 0), "not 40 bytes"),
        (bloom(32, 1), "BIGINT keys, not VARCHAR"),
    ] {
        let err = Expr::from_proto(&bad, &types).unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
    }
}

#[test]
fn a_long_integer_list_travels_packed_and_comes_back_equal() {
    let types = [DataType::Int64, DataType::Decimal128(18, 0)];
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Decimal128(18, 0), true),
    ]);
    let list: Vec<Expr> = (0..100).map(|v| int(v * 3)).collect();
    for column in 0..2 {
        let c = Expr::column(column, &schema).unwrap();
        let e = Expr::in_list(c, list.clone(), column == 1).unwrap();
        let p = e.to_proto().unwrap();
        let Some(pb_kind) = &p.kind else { panic!() };
        if column == 0 {
            // BIGINT values: packed, one argument.
            match pb_kind {
                quarry_proto::coprocessor::expr::Kind::Func(f) => {
                    assert_eq!(f.int_list.len(), 100);
                    assert_eq!(f.args.len(), 1);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(Expr::from_proto(&p, &types).unwrap(), e);
    }
}

#[test]
fn a_long_integer_list_is_probed_through_its_set_built_at_the_first_probe() {
    // qty is 10, NULL, i64::MAX; the list 0, 5, 10, ..., 95.
    let keys: Vec<i64> = (0..20).map(|v| v * 5).collect();
    for negated in [false, true] {
        let e = Expr::in_int_list(col(2), &keys, negated).unwrap();
        let Expr::InList { set: Some(set), .. } = &e else {
            panic!("a list of {} BIGINT values has a set: {e:?}", keys.len())
        };
        assert_eq!(format!("{set:?}"), "IntSet(not built)");
        let got: Vec<Option<bool>> = eval(&e).as_boolean().iter().collect();
        let hit = Some(!negated);
        assert_eq!(got, vec![hit, None, hit.map(|h| !h)], "negated: {negated}");
        assert_eq!(format!("{set:?}"), "IntSet(20 values)");
    }
    // A short list goes item by item.
    let short = Expr::in_int_list(col(2), &[10, 11], false).unwrap();
    assert!(matches!(short, Expr::InList { set: None, .. }));
}

#[test]
fn a_lists_set_is_built_once_for_every_clone_of_the_expression() {
    let keys: Vec<i64> = (0..20).map(|v| v * 5).collect();
    let e = Expr::in_int_list(col(2), &keys, false).unwrap();
    let copy = e.clone();
    let (
        Expr::InList {
            set: Some(a), list, ..
        },
        Expr::InList { set: Some(b), .. },
    ) = (&e, &copy)
    else {
        panic!("{e:?}")
    };
    assert!(std::ptr::eq(a.members(list), b.members(list)));
    assert_eq!(
        format!("{b:?}"),
        "IntSet(20 values)",
        "built through the other clone"
    );
    assert_eq!(a.members(list).bounds(), Some((0, 95)));
}

fn utf8(v: &str) -> Expr {
    Expr::literal(ScalarValue::Utf8(v.into()))
}

fn ints(a: &ArrayRef) -> Vec<Option<i64>> {
    a.as_primitive::<Int64Type>().iter().collect()
}

fn strings(a: &ArrayRef) -> Vec<Option<String>> {
    a.as_string::<i32>()
        .iter()
        .map(|s| s.map(String::from))
        .collect()
}

#[test]
fn modulo_follows_the_dividend_and_checks_zero() {
    // qty is 10, NULL, i64::MAX.
    let e = Expr::arith(ArithOp::Modulo, col(2), int(-3)).unwrap();
    assert_eq!(ints(&eval(&e)), vec![Some(1), None, Some(1)]);
    let e = Expr::arith(ArithOp::Modulo, Expr::negate(col(2)).unwrap(), int(3)).unwrap();
    assert_eq!(ints(&eval(&e)), vec![Some(-1), None, Some(-1)]);
    let min = Expr::arith(ArithOp::Modulo, int(i64::MIN), int(-1)).unwrap();
    assert_eq!(min, int(0));
    let err = Expr::arith(ArithOp::Modulo, col(2), int(0))
        .unwrap()
        .evaluate(&batch(), None)
        .unwrap_err();
    assert!(err.to_string().contains("division by zero"), "{err}");
    // A decimal remainder stays in compute.
    let err = Expr::arith(ArithOp::Modulo, col(0), int(3)).unwrap_err();
    assert!(err.to_string().contains("cannot apply %"), "{err}");
}

#[test]
fn case_takes_the_first_true_branch_and_evaluates_values_only_where_taken() {
    // flag is 'A', 'N', NULL; qty is 10, NULL, i64::MAX.
    let e = Expr::case(
        vec![
            (Expr::compare(CmpOp::Eq, col(4), utf8("A")).unwrap(), int(1)),
            (Expr::is_null(col(2), false).unwrap(), int(2)),
            (Expr::compare(CmpOp::Gt, col(2), int(0)).unwrap(), int(3)),
        ],
        Some(int(4)),
    )
    .unwrap();
    assert_eq!(ints(&eval(&e)), vec![Some(1), Some(2), Some(3)]);
    // No ELSE: NULL; a NULL condition does not take the row.
    let e = Expr::case(
        vec![(Expr::compare(CmpOp::Eq, col(4), utf8("N")).unwrap(), col(0))],
        None,
    )
    .unwrap();
    assert_eq!(e.data_type(), DataType::Decimal128(15, 2));
    let out = eval(&e);
    let out: Vec<Option<i128>> = out.as_primitive::<Decimal128Type>().iter().collect();
    assert_eq!(out, vec![None, Some(25050), None]);
    // qty + 1 overflows on row 3, which the first branch takes: no error.
    let e = Expr::case(
        vec![(Expr::compare(CmpOp::Gt, col(2), int(1000)).unwrap(), int(0))],
        Some(Expr::arith(ArithOp::Plus, col(2), int(1)).unwrap()),
    )
    .unwrap();
    assert_eq!(ints(&eval(&e)), vec![Some(11), None, Some(0)]);
    // Values of two types are refused.
    let err = Expr::case(vec![(col(4).clone(), int(1))], None).unwrap_err();
    assert!(err.to_string().contains("BOOLEAN"), "{err}");
    let when = Expr::is_null(col(2), false).unwrap();
    let err = Expr::case(vec![(when, int(1))], Some(utf8("x"))).unwrap_err();
    assert!(err.to_string().contains("CASE mixes"), "{err}");
}

#[test]
fn coalesce_date_part_and_substring() {
    let e = Expr::coalesce(vec![col(4), utf8("none")]).unwrap();
    assert_eq!(
        strings(&eval(&e)),
        vec![Some("A".into()), Some("N".into()), Some("none".into())]
    );
    // ship is 1994-01-01 (a Saturday), 1995-06-30 (a Friday), 1998-12-01.
    let part = |p| ints(&eval(&Expr::date_part(p, col(3)).unwrap()));
    assert_eq!(
        part(DatePart::Year),
        vec![Some(1994), Some(1995), Some(1998)]
    );
    assert_eq!(part(DatePart::Quarter), vec![Some(1), Some(2), Some(4)]);
    assert_eq!(part(DatePart::Month), vec![Some(1), Some(6), Some(12)]);
    assert_eq!(part(DatePart::Day), vec![Some(1), Some(30), Some(1)]);
    assert_eq!(
        part(DatePart::DayOfYear),
        vec![Some(1), Some(181), Some(335)]
    );
    assert_eq!(part(DatePart::DayOfWeek), vec![Some(6), Some(5), Some(2)]);
    assert_eq!(part(DatePart::Week), vec![Some(52), Some(26), Some(49)]);
    assert!(Expr::date_part(DatePart::Year, col(4)).is_err());
    // SQL's positions: 1-based, characters, a start before 1 eats length.
    let sub = |s: &str, start, len| match Expr::substring(utf8(s), start, len).unwrap() {
        Expr::Literal(ScalarValue::Utf8(v)) => v,
        other => panic!("not folded: {other:?}"),
    };
    assert_eq!(sub("alphabet", 3, Some(2)), "ph");
    assert_eq!(sub("alphabet", 0, Some(3)), "al");
    assert_eq!(sub("alphabet", -5, Some(3)), "");
    assert_eq!(sub("alphabet", 6, None), "bet");
    assert_eq!(sub("alphabet", 20, Some(2)), "");
    assert_eq!(sub("Hi🌏x", 3, Some(2)), "🌏x");
    assert_eq!(sub("Hi🌏x", 2, Some(1)), "i");
    assert!(Expr::substring(utf8("a"), 1, Some(-1)).is_err());
    let e = Expr::substring(col(4), 1, Some(5)).unwrap();
    assert_eq!(
        strings(&eval(&e)),
        vec![Some("A".into()), Some("N".into()), None]
    );
    // Bytes, not characters; NULL stays NULL; constants fold.
    let e = Expr::octet_length(col(4)).unwrap();
    assert_eq!(e.data_type(), DataType::Int64);
    assert_eq!(ints(&eval(&e)), vec![Some(1), Some(1), None]);
    match Expr::octet_length(utf8("Hi🌏")).unwrap() {
        Expr::Literal(ScalarValue::Int64(n)) => assert_eq!(n, 6),
        other => panic!("not folded: {other:?}"),
    }
    assert!(Expr::octet_length(col(2)).is_err());
    // A DATE as BIGINT: days since 1970-01-01 (what a load's checksum
    // sums); the other way stays refused.
    let days = Expr::cast(col(3), DataType::Int64).unwrap();
    assert_eq!(
        ints(&eval(&days)),
        vec![Some(8766), Some(9311), Some(10561)]
    );
    assert!(Expr::cast(col(2), DataType::Date32).is_err());
}
