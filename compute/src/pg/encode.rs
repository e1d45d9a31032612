//! Arrow columns as PostgreSQL values: each Arrow type's PostgreSQL type
//! (the OID, length and modifier a RowDescription carries) and its text
//! and binary forms, written into DataRow messages.
//!
//! | Arrow | PostgreSQL | text | binary |
//! |---|---|---|---|
//! | Boolean | bool (16) | `t` / `f` | 1 byte |
//! | Int8, Int16, UInt8 | int2 (21) | decimal | big-endian |
//! | Int32, UInt16 | int4 (23) | decimal | big-endian |
//! | Int64, UInt32 | int8 (20) | decimal | big-endian |
//! | UInt64 | numeric (1700) | decimal | numeric |
//! | Float16, Float32 | float4 (700) | shortest exact, `1e+20` style | IEEE |
//! | Float64 | float8 (701) | shortest exact | IEEE |
//! | Decimal(p, s) | numeric(p, s) (1700, typmod) | `123.45` | base-10000 digits |
//! | Utf8, LargeUtf8, Utf8View | text (25) | as is | UTF-8 |
//! | Binary, LargeBinary, BinaryView | bytea (17) | `\x…` hex | as is |
//! | Date32, Date64 | date (1082) | `YYYY-MM-DD` | days since 2000-01-01 |
//! | Timestamp(_, None) | timestamp (1114) | `YYYY-MM-DD HH:MM:SS[.ffffff]` | µs since 2000-01-01 |
//! | Timestamp(_, Some(tz)) | timestamptz (1184) | the time in `tz` (the session's TimeZone), `+01` | µs since 2000-01-01 UTC |
//! | Time32, Time64 | time (1083) | `HH:MM:SS[.ffffff]` | µs since midnight |
//! | Interval | interval (1186) | `1 year 2 mons 3 days 04:05:06` | µs, days, months |
//! | List of the above | its array type | `{a,b,NULL}` | one-dimensional array |
//! | Null | text (25) | NULL | NULL |
//!
//! A dictionary column is encoded as its values. Anything else (structs,
//! maps) goes as text, Arrow's display of it. A timestamp with a time
//! zone is written as text in the zone its type carries, which is the
//! session's `TimeZone` (the engine plans TIMESTAMPTZ in it), with that
//! zone's offset at that instant; in binary it is UTC, as PostgreSQL
//! sends it.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, IntervalUnit, SchemaRef, Time32MillisecondType, Time32SecondType,
    Time64MicrosecondType, Time64NanosecondType, TimeUnit, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use arrow::util::display::array_value_to_string;
use bytes::{BufMut, BytesMut};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::messages::data::DataRow;

use crate::df::pg_catalog::PG_TYPE_KEY;
use crate::{Error, Result};

/// Microseconds from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
pub(super) const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days from 1970-01-01 to 2000-01-01.
pub(super) const PG_EPOCH_DAYS: i32 = 10_957;

/// The PostgreSQL type of an Arrow type, with the `typmod` a column of it
/// reports (-1: none).
pub fn pg_type(dt: &DataType) -> (Type, i32) {
    let t = match dt {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            // numeric(p, s): ((p << 16) | s) + VARHDRSZ.
            let typmod = match *s >= 0 {
                true => ((i32::from(*p) << 16) | i32::from(*s as u8)) + 4,
                false => -1,
            };
            return (Type::NUMERIC, typmod);
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::TEXT,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Type::BYTEA,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        DataType::Interval(_) | DataType::Duration(_) => Type::INTERVAL,
        DataType::Dictionary(_, v) => return pg_type(v),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            match array_type(&pg_type(f.data_type()).0) {
                Some(t) => t,
                None => Type::TEXT,
            }
        }
        _ => Type::TEXT,
    };
    (t, -1)
}

/// The array type whose elements are `t`.
fn array_type(t: &Type) -> Option<Type> {
    Some(match *t {
        Type::BOOL => Type::BOOL_ARRAY,
        Type::INT2 => Type::INT2_ARRAY,
        Type::INT4 => Type::INT4_ARRAY,
        Type::INT8 => Type::INT8_ARRAY,
        Type::FLOAT4 => Type::FLOAT4_ARRAY,
        Type::FLOAT8 => Type::FLOAT8_ARRAY,
        Type::NUMERIC => Type::NUMERIC_ARRAY,
        Type::TEXT => Type::TEXT_ARRAY,
        Type::BYTEA => Type::BYTEA_ARRAY,
        Type::DATE => Type::DATE_ARRAY,
        Type::TIMESTAMP => Type::TIMESTAMP_ARRAY,
        Type::TIMESTAMPTZ => Type::TIMESTAMPTZ_ARRAY,
        Type::TIME => Type::TIME_ARRAY,
        Type::INTERVAL => Type::INTERVAL_ARRAY,
        _ => return None,
    })
}

/// `pg_type.typlen` of `t` (-1: variable).
fn type_size(t: &Type) -> i16 {
    match *t {
        Type::BOOL => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIMESTAMP | Type::TIMESTAMPTZ | Type::TIME => 8,
        Type::INTERVAL => 16,
        _ => -1,
    }
}

/// The RowDescription of `schema`, each column in `format(i)`.
pub fn fields(schema: &SchemaRef, format: impl Fn(usize) -> FieldFormat) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            // (Lists in Arrow that PostgreSQL sends as vectors:
            // `df/pg_catalog.rs`.)
            let (t, typmod) = match f.metadata().get(PG_TYPE_KEY).map(String::as_str) {
                Some("int2vector") => (Type::INT2_VECTOR, -1),
                Some("oidvector") => (Type::OID_VECTOR, -1),
                _ => pg_type(f.data_type()),
            };
            let size = type_size(&t);
            FieldInfo::new(f.name().clone(), None, None, t, format(i))
                .with_type_size(size)
                .with_type_modifier(typmod)
        })
        .collect()
}

/// `batch`'s columns with dictionaries decoded, and each one's nulls
/// (logical: a Null column's values are all null, though `is_null` says
/// not).
#[allow(clippy::type_complexity)]
pub fn plain_columns(
    batch: &RecordBatch,
) -> Result<(Vec<ArrayRef>, Vec<Option<arrow::buffer::NullBuffer>>)> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Dictionary(_, v) => arrow::compute::cast(c, v).map_err(Error::from),
            _ => Ok(c.clone()),
        })
        .collect::<Result<_>>()?;
    let nulls = columns.iter().map(|c| c.logical_nulls()).collect();
    Ok((columns, nulls))
}

/// The DataRows of `batch`, its columns in the formats of `fields`.
pub fn rows(batch: &RecordBatch, fields: &[FieldInfo]) -> Result<Vec<DataRow>> {
    let (columns, nulls) = plain_columns(batch)?;
    let binary: Vec<bool> = (0..columns.len())
        .map(|i| {
            fields
                .get(i)
                .is_some_and(|f| f.format() == FieldFormat::Binary)
        })
        .collect();
    // The element type of columns sent as vectors.
    let vector: Vec<Option<Type>> = (0..columns.len())
        .map(|i| match fields.get(i).map(|f| f.datatype().clone()) {
            Some(Type::INT2_VECTOR) => Some(Type::INT2),
            Some(Type::OID_VECTOR) => Some(Type::OID),
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut buf = BytesMut::new();
    let mut cell = Vec::new();
    for row in 0..batch.num_rows() {
        for (c, col) in columns.iter().enumerate() {
            if nulls[c].as_ref().is_some_and(|n| n.is_null(row)) {
                buf.put_i32(-1);
                continue;
            }
            cell.clear();
            match (binary[c], &vector[c]) {
                (true, Some(item)) => vector_binary(col.as_ref(), row, item, &mut cell)?,
                (true, None) => binary_value(col.as_ref(), row, &mut cell)?,
                (false, Some(_)) => vector_text(col.as_ref(), row, &mut cell)?,
                (false, None) => text_value(col.as_ref(), row, &mut cell)?,
            }
            buf.put_i32(cell.len() as i32);
            buf.put_slice(&cell);
        }
        out.push(DataRow::new(buf.split(), columns.len() as i16));
    }
    Ok(out)
}

/// Writes row `row` (not null) of list `a` as an `int2vector` or
/// `oidvector`'s text: its items separated by spaces.
fn vector_text(a: &dyn Array, row: usize, out: &mut Vec<u8>) -> Result<()> {
    let values = list_values(a, row);
    for i in 0..values.len() {
        if i > 0 {
            out.push(b' ');
        }
        text_value(values.as_ref(), i, out)?;
    }
    Ok(())
}

/// Writes row `row` (not null) of list `a` as an `int2vector` or
/// `oidvector` in binary: an array of `item`s (no NULLs) whose subscripts
/// start at 0, as PostgreSQL's vectors do.
fn vector_binary(a: &dyn Array, row: usize, item: &Type, out: &mut Vec<u8>) -> Result<()> {
    let values = list_values(a, row);
    let n = values.len();
    out.put_i32(1);
    out.put_i32(0);
    out.put_u32(item.oid());
    out.put_i32(n as i32);
    out.put_i32(0);
    let values = arrow::compute::cast(&values, &DataType::Int32)?;
    for v in values.as_primitive::<Int32Type>().iter() {
        let v = v.unwrap_or_default();
        match *item == Type::INT2 {
            true => {
                out.put_i32(2);
                out.put_i16(v as i16);
            }
            false => {
                out.put_i32(4);
                out.put_i32(v);
            }
        }
    }
    Ok(())
}

/// Writes row `row` (not null) of `a` in PostgreSQL's text form.
pub fn text_value(a: &dyn Array, row: usize, out: &mut Vec<u8>) -> Result<()> {
    use std::io::Write;
    let w = |out: &mut Vec<u8>, s: std::fmt::Arguments| {
        out.write_fmt(s)
            .map_err(|e| Error::Internal(format!("writing a value: {e}")))
    };
    match a.data_type() {
        DataType::Boolean => out.push(if a.as_boolean().value(row) {
            b't'
        } else {
            b'f'
        }),
        DataType::Int8 => w(
            out,
            format_args!("{}", a.as_primitive::<Int8Type>().value(row)),
        )?,
        DataType::Int16 => w(
            out,
            format_args!("{}", a.as_primitive::<Int16Type>().value(row)),
        )?,
        DataType::Int32 => w(
            out,
            format_args!("{}", a.as_primitive::<Int32Type>().value(row)),
        )?,
        DataType::Int64 => w(
            out,
            format_args!("{}", a.as_primitive::<Int64Type>().value(row)),
        )?,
        DataType::UInt8 => w(
            out,
            format_args!("{}", a.as_primitive::<UInt8Type>().value(row)),
        )?,
        DataType::UInt16 => w(
            out,
            format_args!("{}", a.as_primitive::<UInt16Type>().value(row)),
        )?,
        DataType::UInt32 => w(
            out,
            format_args!("{}", a.as_primitive::<UInt32Type>().value(row)),
        )?,
        DataType::UInt64 => w(
            out,
            format_args!("{}", a.as_primitive::<UInt64Type>().value(row)),
        )?,
        DataType::Float16 => {
            let v = a.as_primitive::<Float16Type>().value(row).to_f32();
            out.extend_from_slice(float_text(f64::from(v), true).as_bytes())
        }
        DataType::Float32 => {
            let v = a.as_primitive::<Float32Type>().value(row);
            out.extend_from_slice(float_text(f64::from(v), true).as_bytes())
        }
        DataType::Float64 => {
            let v = a.as_primitive::<Float64Type>().value(row);
            out.extend_from_slice(float_text(v, false).as_bytes())
        }
        DataType::Utf8 => out.extend_from_slice(a.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => out.extend_from_slice(a.as_string::<i64>().value(row).as_bytes()),
        DataType::Utf8View => out.extend_from_slice(a.as_string_view().value(row).as_bytes()),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            out.extend_from_slice(b"\\x");
            let bytes = binary_bytes(a, row);
            out.extend_from_slice(quarry_coprocessor::codec::key::hex(bytes).as_bytes());
        }
        DataType::Date32 | DataType::Date64 => {
            let days = date_days(a, row);
            w(out, format_args!("{}", date_text(days)))?
        }
        DataType::Timestamp(unit, None) => {
            let micros = timestamp_micros(a, row, unit);
            out.extend_from_slice(timestamp_text(micros, "").as_bytes());
        }
        DataType::Timestamp(unit, Some(tz)) => {
            let micros = timestamp_micros(a, row, unit);
            let offset = zone_offset(tz, micros)?;
            let local = micros + i64::from(offset) * 1_000_000;
            out.extend_from_slice(timestamp_text(local, &offset_text(offset)).as_bytes());
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let micros = time_micros(a, row);
            out.extend_from_slice(time_text(micros).as_bytes())
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            let (months, days, micros) = interval(a, row)?;
            out.extend_from_slice(interval_text(months, days, micros).as_bytes())
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let values = list_values(a, row);
            out.push(b'{');
            let nulls = values.logical_nulls();
            for i in 0..values.len() {
                if i > 0 {
                    out.push(b',');
                }
                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                    out.extend_from_slice(b"NULL");
                    continue;
                }
                let mut item = Vec::new();
                text_value(values.as_ref(), i, &mut item)?;
                array_item(&item, out);
            }
            out.push(b'}');
        }
        DataType::Null => {}
        _ => out.extend_from_slice(array_value_to_string(a, row)?.as_bytes()),
    }
    Ok(())
}

/// An array element in text, quoted where PostgreSQL quotes it.
fn array_item(item: &[u8], out: &mut Vec<u8>) {
    let plain = !item.is_empty()
        && !item.eq_ignore_ascii_case(b"null")
        && !item
            .iter()
            .any(|b| matches!(b, b'{' | b'}' | b',' | b'"' | b'\\') || b.is_ascii_whitespace());
    if plain {
        out.extend_from_slice(item);
        return;
    }
    out.push(b'"');
    for &b in item {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// Writes row `row` (not null) of `a` in PostgreSQL's binary form.
pub fn binary_value(a: &dyn Array, row: usize, out: &mut Vec<u8>) -> Result<()> {
    match a.data_type() {
        DataType::Boolean => out.push(u8::from(a.as_boolean().value(row))),
        DataType::Int8 => out.put_i16(i16::from(a.as_primitive::<Int8Type>().value(row))),
        DataType::UInt8 => out.put_i16(i16::from(a.as_primitive::<UInt8Type>().value(row))),
        DataType::Int16 => out.put_i16(a.as_primitive::<Int16Type>().value(row)),
        DataType::UInt16 => out.put_i32(i32::from(a.as_primitive::<UInt16Type>().value(row))),
        DataType::Int32 => out.put_i32(a.as_primitive::<Int32Type>().value(row)),
        DataType::UInt32 => out.put_i64(i64::from(a.as_primitive::<UInt32Type>().value(row))),
        DataType::Int64 => out.put_i64(a.as_primitive::<Int64Type>().value(row)),
        DataType::Float16 => out.put_f32(a.as_primitive::<Float16Type>().value(row).to_f32()),
        DataType::Float32 => out.put_f32(a.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => out.put_f64(a.as_primitive::<Float64Type>().value(row)),
        DataType::UInt64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => {
            numeric_binary(&array_value_to_string(a, row)?, out)?;
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
            text_value(a, row, out)?
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            out.extend_from_slice(binary_bytes(a, row))
        }
        DataType::Date32 | DataType::Date64 => out.put_i32(date_days(a, row) - PG_EPOCH_DAYS),
        DataType::Timestamp(unit, _) => {
            out.put_i64(timestamp_micros(a, row, unit) - PG_EPOCH_MICROS)
        }
        DataType::Time32(_) | DataType::Time64(_) => out.put_i64(time_micros(a, row)),
        DataType::Interval(_) | DataType::Duration(_) => {
            let (months, days, micros) = interval(a, row)?;
            out.put_i64(micros);
            out.put_i32(days);
            out.put_i32(months);
        }
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            let values = list_values(a, row);
            let elem = pg_type(f.data_type()).0;
            let n = values.len();
            out.put_i32(i32::from(n > 0));
            let nulls = values.logical_nulls();
            out.put_i32(i32::from(
                nulls.as_ref().is_some_and(|n| n.null_count() > 0),
            ));
            out.put_u32(elem.oid());
            if n > 0 {
                out.put_i32(n as i32);
                out.put_i32(1);
            }
            for i in 0..n {
                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                    out.put_i32(-1);
                    continue;
                }
                let mut item = Vec::new();
                binary_value(values.as_ref(), i, &mut item)?;
                out.put_i32(item.len() as i32);
                out.extend_from_slice(&item);
            }
        }
        // Sent as text, described as text.
        _ => text_value(a, row, out)?,
    }
    Ok(())
}

fn binary_bytes(a: &dyn Array, row: usize) -> &[u8] {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().value(row),
        DataType::LargeBinary => a.as_binary::<i64>().value(row),
        DataType::BinaryView => a.as_binary_view().value(row),
        _ => &[],
    }
}

fn list_values(a: &dyn Array, row: usize) -> ArrayRef {
    match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(row),
        DataType::LargeList(_) => a.as_list::<i64>().value(row),
        DataType::FixedSizeList(..) => a.as_fixed_size_list().value(row),
        _ => Arc::new(arrow::array::NullArray::new(0)),
    }
}

fn date_days(a: &dyn Array, row: usize) -> i32 {
    match a.data_type() {
        DataType::Date64 => (a.as_primitive::<Date64Type>().value(row) / 86_400_000) as i32,
        _ => a.as_primitive::<Date32Type>().value(row),
    }
}

fn timestamp_micros(a: &dyn Array, row: usize, unit: &TimeUnit) -> i64 {
    use arrow::datatypes::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    match unit {
        TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
        TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(row) * 1_000,
        TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(row),
        TimeUnit::Nanosecond => a
            .as_primitive::<TimestampNanosecondType>()
            .value(row)
            .div_euclid(1_000),
    }
}

fn time_micros(a: &dyn Array, row: usize) -> i64 {
    match a.data_type() {
        DataType::Time32(TimeUnit::Second) => {
            i64::from(a.as_primitive::<Time32SecondType>().value(row)) * 1_000_000
        }
        DataType::Time32(_) => {
            i64::from(a.as_primitive::<Time32MillisecondType>().value(row)) * 1_000
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            a.as_primitive::<Time64MicrosecondType>().value(row)
        }
        _ => a.as_primitive::<Time64NanosecondType>().value(row) / 1_000,
    }
}

/// (months, days, microseconds) of an interval or duration.
fn interval(a: &dyn Array, row: usize) -> Result<(i32, i32, i64)> {
    use arrow::datatypes::{
        DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType,
        DurationSecondType, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalYearMonthType,
    };
    Ok(match a.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) => {
            (a.as_primitive::<IntervalYearMonthType>().value(row), 0, 0)
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = a.as_primitive::<IntervalDayTimeType>().value(row);
            (0, v.days, i64::from(v.milliseconds) * 1_000)
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = a.as_primitive::<IntervalMonthDayNanoType>().value(row);
            (v.months, v.days, v.nanoseconds / 1_000)
        }
        DataType::Duration(TimeUnit::Second) => (
            0,
            0,
            a.as_primitive::<DurationSecondType>().value(row) * 1_000_000,
        ),
        DataType::Duration(TimeUnit::Millisecond) => (
            0,
            0,
            a.as_primitive::<DurationMillisecondType>().value(row) * 1_000,
        ),
        DataType::Duration(TimeUnit::Microsecond) => {
            (0, 0, a.as_primitive::<DurationMicrosecondType>().value(row))
        }
        DataType::Duration(TimeUnit::Nanosecond) => (
            0,
            0,
            a.as_primitive::<DurationNanosecondType>().value(row) / 1_000,
        ),
        other => return Err(Error::Internal(format!("not an interval: {other}"))),
    })
}

/// `YYYY-MM-DD` of days since 1970-01-01.
pub fn date_text(days: i32) -> String {
    match chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|d| d.checked_add_signed(chrono::Duration::days(i64::from(days))))
    {
        Some(d) => {
            let (mut s, bc) = ymd(d);
            if bc {
                s.push_str(" BC");
            }
            s
        }
        None => days.to_string(),
    }
}

/// `YYYY-MM-DD` as PostgreSQL writes a date: at least four digits of
/// year, no sign (years past 9999 are just longer), and whether it is BC
/// (year 0 is 1 BC), for the caller to add " BC" at the end.
fn ymd(d: chrono::NaiveDate) -> (String, bool) {
    use chrono::Datelike;
    let (year, bc) = match d.year() {
        y if y <= 0 => (1 - y, true),
        y => (y, false),
    };
    (format!("{year:04}-{:02}-{:02}", d.month(), d.day()), bc)
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]` of microseconds since 1970-01-01, then
/// `zone` (`+00` for a TIMESTAMPTZ), then ` BC` where it is.
pub fn timestamp_text(micros: i64, zone: &str) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let Some(t) = chrono::DateTime::from_timestamp(secs, 0) else {
        return micros.to_string();
    };
    let t = t.naive_utc();
    let (mut s, bc) = ymd(t.date());
    s.push_str(&t.format(" %H:%M:%S").to_string());
    push_fraction(&mut s, frac);
    s.push_str(zone);
    if bc {
        s.push_str(" BC");
    }
    s
}

/// The offset from UTC, in seconds, of zone `tz` (an Arrow time zone: a
/// name or `+HH:MM`) at the instant `micros` after 1970-01-01 UTC.
fn zone_offset(tz: &str, micros: i64) -> Result<i32> {
    use chrono::{Offset, TimeZone};
    if matches!(tz, "+00:00" | "UTC" | "+00") {
        return Ok(0);
    }
    let zone: arrow::array::timezone::Tz = tz
        .parse()
        .map_err(|e| Error::Internal(format!("time zone {tz}: {e}")))?;
    let secs = micros.div_euclid(1_000_000);
    Ok(match zone.timestamp_opt(secs, 0) {
        chrono::LocalResult::Single(t) => t.offset().fix().local_minus_utc(),
        _ => 0,
    })
}

/// A UTC offset as PostgreSQL writes it after a TIMESTAMPTZ: `+00`,
/// `+05:30`, `-03`, `+00:53:28`.
fn offset_text(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let s = seconds.unsigned_abs();
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    match (m, sec) {
        (0, 0) => format!("{sign}{h:02}"),
        (m, 0) => format!("{sign}{h:02}:{m:02}"),
        (m, sec) => format!("{sign}{h:02}:{m:02}:{sec:02}"),
    }
}

/// `HH:MM:SS[.ffffff]` of microseconds since midnight.
fn time_text(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let mut s = format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    );
    push_fraction(&mut s, micros.rem_euclid(1_000_000));
    s
}

/// `.ffffff` without trailing zeros (nothing for none).
fn push_fraction(s: &mut String, micros: i64) {
    if micros != 0 {
        let f = format!(".{micros:06}");
        s.push_str(f.trim_end_matches('0'));
    }
}

/// PostgreSQL's `postgres` interval style: `1 year 2 mons 3 days 04:05:06`.
pub fn interval_text(months: i32, days: i32, micros: i64) -> String {
    let mut parts = Vec::new();
    let (years, mons) = (months / 12, months % 12);
    let unit = |n: i64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    if years != 0 {
        parts.push(unit(i64::from(years), "year", "years"));
    }
    if mons != 0 {
        parts.push(unit(i64::from(mons), "mon", "mons"));
    }
    if days != 0 {
        parts.push(unit(i64::from(days), "day", "days"));
    }
    if micros != 0 || parts.is_empty() {
        let sign = if micros < 0 { "-" } else { "" };
        let m = micros.unsigned_abs();
        let secs = m / 1_000_000;
        let mut t = format!(
            "{sign}{:02}:{:02}:{:02}",
            secs / 3600,
            (secs / 60) % 60,
            secs % 60
        );
        push_fraction(&mut t, (m % 1_000_000) as i64);
        parts.push(t);
    }
    parts.join(" ")
}

/// A float as PostgreSQL 12+ writes it (`extra_float_digits` 1): the
/// shortest text that reads back exactly, in `%g` style (an exponent
/// below 1e-4 and from 1e15 for float8, 1e6 for float4), `NaN`,
/// `Infinity`, `-Infinity`.
pub fn float_text(v: f64, single: bool) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest digits and exponent, from Rust's exact shortest formatting.
    let sci = match single {
        true => format!("{:e}", v as f32),
        false => format!("{v:e}"),
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let max_exp = if single { 6 } else { 15 };
    if exp < -4 || exp >= max_exp {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    match single {
        true => format!("{}", v as f32),
        false => format!("{v}"),
    }
}

/// A decimal's text (`-123.4500`) as PostgreSQL's binary numeric: digit
/// count, weight, sign, display scale, then base-10000 digits.
pub fn numeric_binary(text: &str, out: &mut Vec<u8>) -> Result<()> {
    let bad = || Error::Internal(format!("not a decimal: {text}"));
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let dscale = frac_part.len() as i16;
    // Pad the integer part on the left and the fraction on the right to
    // whole groups of four.
    let int_pad = (4 - int_part.len() % 4) % 4;
    let frac_pad = (4 - frac_part.len() % 4) % 4;
    let all: String = "0".repeat(int_pad) + int_part + frac_part + &"0".repeat(frac_pad);
    let int_groups = (int_part.len() + int_pad) / 4;
    let mut groups: Vec<i16> = all
        .as_bytes()
        .chunks(4)
        .map(|c| c.iter().fold(0i16, |n, d| n * 10 + i16::from(d - b'0')))
        .collect();
    let mut weight = int_groups as i16 - 1;
    // Leading zero groups lower the weight; trailing ones are implied.
    let lead = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..lead);
    weight -= lead as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(groups.len() as i16);
    out.put_i16(weight);
    out.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_i16(dscale);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

/// The text of a binary numeric (the inverse of [`numeric_binary`]).
pub fn numeric_from_binary(b: &[u8]) -> Result<String> {
    let bad = || Error::InvalidInput("malformed binary NUMERIC parameter".into());
    let word = |i: usize| -> Result<i16> {
        b.get(i * 2..i * 2 + 2)
            .map(|s| i16::from_be_bytes([s[0], s[1]]))
            .ok_or_else(bad)
    };
    let (ndigits, weight, sign, dscale) = (word(0)?, word(1)?, word(2)? as u16, word(3)?);
    if sign == 0xC000 {
        return Err(Error::InvalidInput(
            "NaN is not a value Quarry's DECIMAL holds".into(),
        ));
    }
    // PostgreSQL's own bounds (NUMERIC_MAX_DISPLAY_SCALE is 1000).
    if !(0..=1000).contains(&dscale) || ndigits < 0 || b.len() != 8 + 2 * ndigits as usize {
        return Err(bad());
    }
    let digits: Vec<i16> = (0..ndigits as usize)
        .map(|i| word(4 + i))
        .collect::<Result<_>>()?;
    if digits.iter().any(|d| !(0..10_000).contains(d)) || weight.unsigned_abs() > 1000 {
        return Err(bad());
    }
    let dscale = dscale as usize;
    // Integer part: groups 0..=weight.
    let mut int = String::new();
    for i in 0..=i32::from(weight).max(-1) {
        let g = digits.get(i as usize).copied().unwrap_or(0);
        if int.is_empty() {
            if g != 0 {
                int = g.to_string();
            }
        } else {
            int.push_str(&format!("{g:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let first_frac = i32::from(weight) + 1;
    let mut i = first_frac;
    while frac.len() < dscale {
        let g = match i {
            i if i < 0 => 0,
            i => digits.get(i as usize).copied().unwrap_or(0),
        };
        frac.push_str(&format!("{g:04}"));
        i += 1;
    }
    frac.truncate(dscale);
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    s.push_str(&int);
    if !frac.is_empty() {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_postgresql_writes_them() {
        assert_eq!(float_text(0.1, false), "0.1");
        assert_eq!(float_text(1e20, false), "1e+20");
        assert_eq!(float_text(123456789012345.0, false), "123456789012345");
        assert_eq!(
            float_text(1234567890123456.0, false),
            "1.234567890123456e+15"
        );
        assert_eq!(float_text(0.0001, false), "0.0001");
        assert_eq!(float_text(0.00001, false), "1e-05");
        assert_eq!(float_text(-2.5, false), "-2.5");
        assert_eq!(float_text(f64::NAN, false), "NaN");
        assert_eq!(float_text(f64::NEG_INFINITY, false), "-Infinity");
        assert_eq!(float_text(f64::from(0.1f32), true), "0.1");
        assert_eq!(float_text(1234567.0, true), "1.234567e+06");
    }

    fn numeric_round_trip(text: &str) -> (Vec<u8>, String) {
        let mut b = Vec::new();
        numeric_binary(text, &mut b).unwrap();
        let back = numeric_from_binary(&b).unwrap();
        (b, back)
    }

    #[test]
    fn decimals_go_to_binary_numeric_and_back() {
        // 12345.6789: digits [1, 2345, 6789], weight 1, dscale 4.
        let (b, back) = numeric_round_trip("12345.6789");
        assert_eq!(b, [0, 3, 0, 1, 0, 0, 0, 4, 0, 1, 0x09, 0x29, 0x1a, 0x85]);
        assert_eq!(back, "12345.6789");
        for t in [
            "0",
            "0.00",
            "-1.5",
            "10000",
            "0.0001",
            "-0.012300",
            "123456789012345678.99",
        ] {
            assert_eq!(numeric_round_trip(t).1, t, "{t}");
        }
        // 10000: one digit group [1] of weight 1; zeros are implied.
        let (b, _) = numeric_round_trip("10000");
        assert_eq!(b, [0, 1, 0, 1, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn dates_times_and_intervals_in_postgresql_text() {
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(date_text(10_957), "2000-01-01");
        assert_eq!(timestamp_text(1_500_000, ""), "1970-01-01 00:00:01.5");
        assert_eq!(timestamp_text(-1, "+00"), "1969-12-31 23:59:59.999999+00");
        // Past 9999 without a sign; before year 1 as BC.
        let days = |y, m, d| {
            let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
            (chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap() - epoch).num_days() as i32
        };
        assert_eq!(date_text(days(10_000, 1, 30)), "10000-01-30");
        assert_eq!(date_text(days(1, 1, 1)), "0001-01-01");
        assert_eq!(date_text(days(0, 12, 31)), "0001-12-31 BC");
        assert_eq!(
            timestamp_text(i64::from(days(-43, 3, 15)) * 86_400_000_000 + 1, "+00"),
            "0044-03-15 00:00:00.000001+00 BC"
        );
        assert_eq!(
            interval_text(14, 3, 14_706_000_000),
            "1 year 2 mons 3 days 04:05:06"
        );
        assert_eq!(interval_text(0, 1, 0), "1 day");
        assert_eq!(interval_text(0, 0, -1_500_000), "-00:00:01.5");
        assert_eq!(interval_text(0, 0, 0), "00:00:00");
    }

    #[test]
    fn timestamptz_text_is_in_its_zone_with_that_instants_offset() {
        use arrow::array::TimestampMicrosecondArray;
        let text = |tz: &str, micros: i64| {
            let a = TimestampMicrosecondArray::from(vec![micros]).with_timezone(tz);
            let mut out = Vec::new();
            text_value(&a, 0, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        // 2024-01-15 12:00 UTC and 2024-07-15 12:00 UTC.
        let (winter, summer) = (1_705_320_000_000_000, 1_721_044_800_000_000);
        assert_eq!(text("+00:00", winter), "2024-01-15 12:00:00+00");
        assert_eq!(text("Europe/Berlin", winter), "2024-01-15 13:00:00+01");
        assert_eq!(text("Europe/Berlin", summer), "2024-07-15 14:00:00+02");
        assert_eq!(text("Asia/Kolkata", winter), "2024-01-15 17:30:00+05:30");
        assert_eq!(
            text("America/St_Johns", summer),
            "2024-07-15 09:30:00-02:30"
        );
        // Local mean time before zones: seconds in the offset.
        assert_eq!(offset_text(3208), "+00:53:28");
        assert_eq!(offset_text(-3 * 3600), "-03");
    }

    #[test]
    fn array_items_are_quoted_where_postgresql_quotes_them() {
        let q = |s: &str| {
            let mut out = Vec::new();
            array_item(s.as_bytes(), &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(q("public"), "public");
        assert_eq!(q("a b"), "\"a b\"");
        assert_eq!(q(""), "\"\"");
        assert_eq!(q("NULL"), "\"NULL\"");
        assert_eq!(q("x\"y"), "\"x\\\"y\"");
    }
}
