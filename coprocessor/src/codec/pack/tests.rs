use super::*;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int64Type};
use proptest::prelude::*;

use crate::codec::key::record_key;
use crate::codec::row::RowEncoder;

fn table() -> Vec<(i64, DataType)> {
    vec![
        (1, DataType::Int64),
        (2, DataType::Decimal128(15, 2)),
        (3, DataType::Date32),
        (4, DataType::Utf8),
        (5, DataType::Float64),
        (6, DataType::Decimal128(30, 3)),
    ]
}

#[derive(Debug, Clone)]
struct Row {
    int: Option<i64>,
    dec: Option<i64>,
    date: Option<i32>,
    text: Option<String>,
    float: Option<f64>,
    wide: Option<i128>,
}

impl Row {
    fn datums(&self) -> Vec<Datum<'_>> {
        vec![
            self.int.map_or(Datum::Null, Datum::Int),
            self.dec.map_or(Datum::Null, |v| Datum::Decimal(v as i128)),
            self.date.map_or(Datum::Null, Datum::Date),
            self.text
                .as_deref()
                .map_or(Datum::Null, |s| Datum::Bytes(s.as_bytes())),
            self.float.map_or(Datum::Null, Datum::Float),
            self.wide.map_or(Datum::Null, Datum::Decimal),
        ]
    }
}

fn row_strategy(few_strings: bool) -> impl Strategy<Value = Row> {
    let text = if few_strings {
        prop_oneof![
            Just("A".to_string()),
            Just("N".to_string()),
            Just("ü".to_string())
        ]
        .boxed()
    } else {
        "[a-zé ]{0,12}".boxed()
    };
    (
        proptest::option::weighted(0.9, any::<i64>()),
        proptest::option::weighted(0.9, -999_999_999_999_999i64..=999_999_999_999_999),
        proptest::option::weighted(0.9, -100_000i32..100_000),
        proptest::option::weighted(0.9, text),
        proptest::option::weighted(0.9, any::<f64>().prop_filter("not NaN", |f| !f.is_nan())),
        proptest::option::weighted(0.9, -(10i128.pow(29))..10i128.pow(29)),
    )
        .prop_map(|(int, dec, date, text, float, wide)| Row {
            int,
            dec,
            date,
            text,
            float,
            wide,
        })
}

fn check_round_trip(rows: &[Row]) {
    let mut b = PackBuilder::new(&table()).unwrap();
    for (h, r) in rows.iter().enumerate() {
        b.push(h as i64 * 3 - 7, &r.datums()).unwrap();
    }
    let (first, value) = b.finish().unwrap();
    assert!(b.is_empty());
    assert_eq!(first, -7);
    let pack = PackView::parse(&value).unwrap();
    assert_eq!(pack.rows(), rows.len());
    assert_eq!(pack.first_handle(), -7);
    assert_eq!(pack.last_handle(), (rows.len() as i64 - 1) * 3 - 7);
    let handles = pack.handles().unwrap();
    for i in 0..rows.len() {
        assert_eq!(handles.get(i), i as i64 * 3 - 7);
    }
    let cols = decode_columns(&pack, &table()).unwrap();
    for (i, r) in rows.iter().enumerate() {
        let c = &cols[0];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_primitive::<Int64Type>().value(i)),
            r.int
        );
        let c = &cols[1];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_primitive::<Decimal128Type>().value(i) as i64),
            r.dec
        );
        let c = &cols[2];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_primitive::<Date32Type>().value(i)),
            r.date
        );
        let c = &cols[3];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_string::<i32>().value(i).to_string()),
            r.text
        );
        let c = &cols[4];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_primitive::<Float64Type>().value(i)),
            r.float
        );
        let c = &cols[5];
        assert_eq!(
            c.is_valid(i)
                .then(|| c.as_primitive::<Decimal128Type>().value(i)),
            r.wide
        );
    }
    // Decoding picked rows equals decoding all and taking them.
    let sel: Vec<u32> = (0..rows.len() as u32).filter(|i| i % 3 != 1).collect();
    let idx = arrow::array::UInt32Array::from(sel.clone());
    for (id, dt) in table() {
        let some = pack.column(id).unwrap().to_arrow_at(&dt, &sel).unwrap();
        let all = pack.column(id).unwrap().to_arrow(&dt, rows.len()).unwrap();
        let want = arrow::compute::take(all.as_ref(), &idx, None).unwrap();
        assert_eq!(some.as_ref(), want.as_ref(), "column {id}");
    }
    // Zone maps hold the non-NULL extremes.
    if let ColumnView::Int(v) = pack.column(3).unwrap() {
        let dates: Vec<i64> = rows
            .iter()
            .filter_map(|r| r.date.map(|d| d as i64))
            .collect();
        assert_eq!(v.min, *dates.iter().min().unwrap());
        assert_eq!(v.max, *dates.iter().max().unwrap());
    } else {
        assert!(rows.iter().all(|r| r.date.is_none()));
    }
}

proptest! {
    #[test]
    fn packs_round_trip(rows in proptest::collection::vec(row_strategy(false), 1..300)) {
        check_round_trip(&rows);
    }

    #[test]
    fn packs_round_trip_with_dictionaries(rows in proptest::collection::vec(row_strategy(true), 1..300)) {
        check_round_trip(&rows);
    }

    #[test]
    fn corrupt_packs_are_errors_not_panics(cut in 0usize..2000, flip in 0usize..2000, byte: u8) {
        let rows: Vec<Row> = (0..50).map(|i| Row {
            int: Some(i), dec: Some(i * 100), date: Some(i as i32), text: Some(format!("t{i}")),
            float: None, wide: Some(i as i128),
        }).collect();
        let mut b = PackBuilder::new(&table()).unwrap();
        for (h, r) in rows.iter().enumerate() {
            b.push(h as i64, &r.datums()).unwrap();
        }
        let (_, mut value) = b.finish().unwrap();
        let at = flip % value.len();
        value[at] = byte;
        value.truncate(cut.min(value.len()));
        if let Ok(p) = PackView::parse(&value) {
            let _ = decode_columns(&p, &table());
        }
    }
}

#[test]
fn dictionary_and_frame_of_reference_keep_tpch_columns_small() {
    let cols = vec![(1, DataType::Decimal128(15, 2)), (2, DataType::Utf8)];
    let mut b = PackBuilder::new(&cols).unwrap();
    for h in 0..PACK_ROWS as i64 {
        let flag = ["A", "N", "R"][(h % 3) as usize];
        b.push(
            h,
            &[
                Datum::Decimal((h % 50 + 1) as i128 * 100),
                Datum::Bytes(flag.as_bytes()),
            ],
        )
        .unwrap();
    }
    let (_, value) = b.finish().unwrap();
    // Quantities 1.00..50.00 fit a 2-byte frame, flags a 1-byte code,
    // handles a 2-byte frame.
    assert!(value.len() < PACK_ROWS * 5 + 200, "{} bytes", value.len());
    let pack = PackView::parse(&value).unwrap();
    assert!(matches!(pack.column(2).unwrap(), ColumnView::Dict(d) if d.entries() == 3));
    let ColumnView::Int(q) = pack.column(1).unwrap() else {
        panic!("not FOR")
    };
    assert_eq!((q.min, q.max), (100, 5000));
    let mut out = Vec::new();
    q.decode_into(&mut out);
    assert_eq!(out[..3], [100, 200, 300]);
    // A column the pack does not have reads as NULL.
    assert!(matches!(pack.column(9).unwrap(), ColumnView::Null));
}

#[test]
fn rows_must_ascend_and_fit_their_types() {
    let cols = vec![(1, DataType::Decimal128(15, 2))];
    let mut b = PackBuilder::new(&cols).unwrap();
    b.push(5, &[Datum::Decimal(1)]).unwrap();
    assert!(b
        .push(5, &[Datum::Decimal(1)])
        .unwrap_err()
        .to_string()
        .contains("ascending"));
    assert!(b.push(6, &[Datum::Bytes(b"x")]).is_err());
    assert!(PackBuilder::new(&[(0, DataType::Int64)]).is_err());
}

#[test]
fn delta_rows_become_pack_rows() {
    let mut enc = RowEncoder::new();
    let mut b = PackBuilder::new(&table()).unwrap();
    for h in 0..3i64 {
        let mut v = Vec::new();
        enc.encode(
            &[
                (1, Datum::Int(h)),
                (2, Datum::Decimal(h as i128 * 5)),
                (4, Datum::Bytes(b"x")),
                (6, Datum::Null),
            ],
            &mut v,
        )
        .unwrap();
        b.push_row_value(h, &v).unwrap();
    }
    let (_, value) = b.finish().unwrap();
    let pack = PackView::parse(&value).unwrap();
    let cols = decode_columns(&pack, &table()).unwrap();
    assert_eq!(cols[1].as_primitive::<Decimal128Type>().value(2), 10);
    assert_eq!(
        cols[2].null_count(),
        3,
        "a column absent from the rows is NULL"
    );
    assert_eq!(cols[5].null_count(), 3);
}

#[test]
fn keys_say_what_they_hold() {
    assert_eq!(classify_key(&record_key(7, 42)), KeyKind::Row(42));
    assert_eq!(classify_key(&pack_key(7, -3)), KeyKind::Pack(-3));
    assert_eq!(classify_key(b"m_meta"), KeyKind::Other);
    // A pack sorts after its first row's key and before the next handle's.
    assert!(record_key(7, 42) < pack_key(7, 42));
    assert!(pack_key(7, 42) < record_key(7, 43));
}

#[test]
fn a_pack_is_full_at_its_rows_or_at_its_bytes_for_wide_rows() {
    // Narrow rows: full at PACK_ROWS, not before.
    let mut b = PackBuilder::new(&[(1, DataType::Int64)]).unwrap();
    for h in 0..PACK_ROWS as i64 {
        assert!(!b.is_full(), "full at {h} rows");
        b.push(h, &[Datum::Int(h)]).unwrap();
    }
    assert!(b.is_full());
    // Rows of 2 KB strings: full near PACK_MAX_BYTES, long before
    // PACK_ROWS, and the finished value stays under the bound.
    let text = "x".repeat(2048);
    let mut b = PackBuilder::new(&[(1, DataType::Int64), (2, DataType::Utf8)]).unwrap();
    let mut h = 0i64;
    while !b.is_full() {
        b.push(h, &[Datum::Int(h), Datum::Bytes(text.as_bytes())])
            .unwrap();
        h += 1;
    }
    let rows = h as usize;
    assert!(rows < PACK_ROWS, "{rows} rows");
    assert!(rows * 2048 >= PACK_MAX_BYTES - 64 * 2100, "{rows} rows");
    let (_, value) = b.finish().unwrap();
    assert!(
        value.len() <= PACK_MAX_BYTES + 4096,
        "{} bytes",
        value.len()
    );
    assert_eq!(PackView::parse(&value).unwrap().rows(), rows);
}

#[test]
fn a_pack_built_from_arrays_equals_one_built_row_by_row() {
    use arrow::array::{
        ArrayRef, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
    };
    use std::sync::Arc;
    let columns = vec![
        (1, DataType::Int64),
        (2, DataType::Decimal128(15, 2)),
        (3, DataType::Decimal128(30, 4)),
        (4, DataType::Float64),
        (5, DataType::Date32),
        (6, DataType::Utf8),
    ];
    let n = 300;
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter(
            (0..n).map(|i| (i % 7 != 3).then_some(i * 3 - 50)),
        )),
        Arc::new(
            Decimal128Array::from_iter((0..n).map(|i| (i % 5 != 1).then_some(i as i128 * 101)))
                .with_precision_and_scale(15, 2)
                .unwrap(),
        ),
        Arc::new(
            Decimal128Array::from_iter_values((0..n).map(|i| i as i128 * 1_000_000_000_000))
                .with_precision_and_scale(30, 4)
                .unwrap(),
        ),
        Arc::new(Float64Array::from_iter(
            (0..n).map(|i| (i % 4 != 0).then_some(i as f64 / 3.0)),
        )),
        Arc::new(Date32Array::from_iter(
            (0..n).map(|i| (i % 9 != 2).then_some(i as i32 + 9000)),
        )),
        Arc::new(StringArray::from_iter(
            (0..n).map(|i| (i % 6 != 5).then(|| format!("s{i}"))),
        )),
    ];
    // Sliced, so the arrays' offsets do not start at 0.
    let arrays: Vec<ArrayRef> = arrays.iter().map(|a| a.slice(10, 280)).collect();
    let handles: Vec<i64> = (0..280).map(|i| i * 2 + 1).collect();
    let mut by_rows = PackBuilder::new(&columns).unwrap();
    for (r, h) in handles.iter().enumerate() {
        let row: Vec<Datum> = columns
            .iter()
            .zip(&arrays)
            .map(|((_, t), a)| crate::codec::row::array_datum(a, t, r).unwrap())
            .collect();
        by_rows.push(*h, &row).unwrap();
    }
    let mut by_arrays = PackBuilder::new(&columns).unwrap();
    // In two calls, as a caller feeding runs of a batch would.
    assert_eq!(
        by_arrays.push_arrays(&handles, &arrays, 0, 100).unwrap(),
        100
    );
    assert_eq!(
        by_arrays.push_arrays(&handles, &arrays, 100, 280).unwrap(),
        280
    );
    assert_eq!(by_arrays.len(), 280);
    assert_eq!(by_rows.finish().unwrap(), by_arrays.finish().unwrap());
    // Handles must still ascend, across calls too.
    let mut b = PackBuilder::new(&columns).unwrap();
    b.push_arrays(&handles, &arrays, 0, 10).unwrap();
    assert!(b.push_arrays(&handles, &arrays, 5, 10).is_err());
    // A full pack stops the append where it filled.
    let one: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(0..40_000))];
    let hs: Vec<i64> = (0..40_000).collect();
    let mut b = PackBuilder::new(&[(1, DataType::Int64)]).unwrap();
    assert_eq!(b.push_arrays(&hs, &one, 0, 40_000).unwrap(), PACK_ROWS);
    assert!(b.is_full());
}
