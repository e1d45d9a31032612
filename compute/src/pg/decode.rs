//! Bound parameters, as PostgreSQL clients send them, as Arrow values.
//!
//! A Bind message carries each parameter as bytes, in text or binary
//! format, typed by the OID the client gave at Parse or, where it gave
//! none, by the type the statement's Describe answered (what DataFusion
//! inferred). Each becomes a one-row Arrow column of the matching type,
//! and the row goes through [`crate::params::bind`], the path Flight SQL's
//! bound parameters take: each value is written into the statement as a
//! literal of its type, so it means what the same literal typed in would.
//!
//! Text values of numeric, boolean, date and timestamp types are parsed
//! here (a malformed one is the client's error, 22P02, naming the
//! parameter); text of any other type, and of an unspecified one, stays a
//! string, which the statement coerces where it is compared or stored.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array,
    RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use pgwire::api::Type;

use super::encode::{numeric_from_binary, PG_EPOCH_DAYS, PG_EPOCH_MICROS};
use crate::{plan_err, Error, Result};

/// The zone of a TIMESTAMPTZ parameter (an instant).
const UTC: &str = "+00:00";

/// The parameters of a Bind as one row, a column per parameter.
pub fn row(
    values: &[Option<Bytes>],
    types: &[Type],
    binary: impl Fn(usize) -> bool,
) -> Result<RecordBatch> {
    let mut fields = Vec::with_capacity(values.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let t = types.get(i).cloned().unwrap_or(Type::UNKNOWN);
        let column = value(v.as_deref(), &t, binary(i)).map_err(|e| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("parameter ${}: {m}", i + 1)),
            e => e,
        })?;
        fields.push(Field::new(
            format!("${}", i + 1),
            column.data_type().clone(),
            true,
        ));
        columns.push(column);
    }
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(1));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(Error::from)
}

/// The most digits after the point a NUMERIC parameter keeps where the
/// statement is typed by its declaration ([`declared_sql_type`]).
pub const DECLARED_NUMERIC_SCALE: i8 = 10;

/// The SQL type a parameter declared as `t` is cast to where the
/// statement would otherwise type it otherwise (`handler.rs`); None for a
/// type Quarry does not cast to, which keeps the inferred type.
pub fn declared_sql_type(t: &Type) -> Option<&'static str> {
    Some(match *t {
        Type::INT2 => "SMALLINT",
        Type::INT4 => "INT",
        Type::INT8 => "BIGINT",
        Type::FLOAT4 => "REAL",
        Type::FLOAT8 => "DOUBLE PRECISION",
        // PostgreSQL's NUMERIC has no fixed scale; DataFusion's DECIMAL
        // has one. A value with more digits after the point is refused
        // at Bind ([`check_declared_numeric`]), never rounded.
        Type::NUMERIC => "DECIMAL(38, 10)",
        Type::BOOL => "BOOLEAN",
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => "VARCHAR",
        Type::DATE => "DATE",
        Type::TIMESTAMP => "TIMESTAMP",
        Type::TIMESTAMPTZ => "TIMESTAMP WITH TIME ZONE",
        Type::BYTEA => "BYTEA",
        _ => return None,
    })
}

/// The PostgreSQL type of SQL type `t`, for the types a parameter is
/// commonly cast to in a statement (`$1::numeric`); None for others.
pub fn pg_type_of_sql(t: &sqlparser::ast::DataType) -> Option<Type> {
    use sqlparser::ast::{DataType as D, TimezoneInfo};
    Some(match t {
        D::Numeric(_) | D::Decimal(_) | D::Dec(_) => Type::NUMERIC,
        D::SmallInt(_) | D::Int2(_) => Type::INT2,
        D::Int(_) | D::Integer(_) | D::Int4(_) => Type::INT4,
        D::BigInt(_) | D::Int8(_) => Type::INT8,
        D::Real | D::Float4 => Type::FLOAT4,
        D::Double(_) | D::DoublePrecision | D::Float8 => Type::FLOAT8,
        D::Boolean | D::Bool => Type::BOOL,
        D::Text | D::Varchar(_) | D::CharacterVarying(_) | D::String(_) => Type::TEXT,
        D::Date => Type::DATE,
        D::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => Type::TIMESTAMPTZ,
        D::Timestamp(_, _) => Type::TIMESTAMP,
        D::Bytea => Type::BYTEA,
        _ => return None,
    })
}

/// Refuses a NUMERIC parameter with more digits after the point than
/// the `DECIMAL(38, 10)` its declaration cast it to keeps.
pub fn check_declared_numeric(row: &RecordBatch, i: usize) -> Result<()> {
    let column = row.column(i);
    match column.data_type() {
        // Digits past the tenth that are all zeros lose nothing.
        DataType::Decimal128(_, s)
            if *s > DECLARED_NUMERIC_SCALE
                && column
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .filter(|a| !a.is_null(0))
                    .is_some_and(|a| {
                        a.value(0) % 10i128.pow((*s - DECLARED_NUMERIC_SCALE) as u32) != 0
                    }) =>
        {
            Err(Error::Overflow(format!(
                "parameter ${}: a NUMERIC with {s} digits after the point, where the statement \
             needs its type and keeps {DECLARED_NUMERIC_SCALE}; cast it in the statement \
             (CAST(${} AS DECIMAL(38, {s})))",
                i + 1,
                i + 1
            )))
        }
        _ => Ok(()),
    }
}

fn utf8(b: &[u8]) -> Result<&str> {
    std::str::from_utf8(b).map_err(|_| plan_err!("the value is not UTF-8"))
}

/// One parameter as a one-row column.
fn value(v: Option<&[u8]>, t: &Type, binary: bool) -> Result<ArrayRef> {
    let Some(b) = v else {
        return Ok(Arc::new(StringArray::from(vec![None::<&str>])));
    };
    if binary {
        return binary_value(b, t);
    }
    let text = utf8(b)?;
    let bad = |what: &str| plan_err!("invalid input syntax for type {what}: \"{text}\"");
    Ok(match *t {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            let n: i64 = text.trim().parse().map_err(|_| bad(t.name()))?;
            Arc::new(Int64Array::from(vec![n]))
        }
        Type::FLOAT4 | Type::FLOAT8 => {
            let f: f64 = text.trim().parse().map_err(|_| bad(t.name()))?;
            Arc::new(Float64Array::from(vec![f]))
        }
        Type::NUMERIC => decimal(text.trim()).ok_or_else(|| bad("numeric"))?,
        Type::BOOL => {
            let v = match text.trim().to_ascii_lowercase().as_str() {
                "t" | "true" | "y" | "yes" | "on" | "1" => true,
                "f" | "false" | "n" | "no" | "off" | "0" => false,
                _ => return Err(bad("boolean")),
            };
            Arc::new(BooleanArray::from(vec![v]))
        }
        // pgjdbc writes dates and timestamps with a zone (`1994-01-01
        // +00`); a date or a timestamp without a zone ignores it, as
        // PostgreSQL's input does.
        Type::DATE => {
            let day = text.split_whitespace().next().unwrap_or_default();
            cast_text(day, &DataType::Date32).map_err(|_| bad("date"))?
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let (local, offset) = split_zone(text.trim());
            let ts = cast_text(local, &DataType::Timestamp(TimeUnit::Microsecond, None))
                .map_err(|_| bad(t.name()))?;
            match (*t == Type::TIMESTAMPTZ, offset) {
                // An instant: UTC, marked as such (a value without an
                // offset is read in the session's zone, as a literal is).
                (true, Some(Some(secs))) => {
                    let micros = ts
                        .as_any()
                        .downcast_ref::<TimestampMicrosecondArray>()
                        .map(|a| a.value(0))
                        .unwrap_or_default();
                    Arc::new(
                        TimestampMicrosecondArray::from(vec![micros - secs * 1_000_000])
                            .with_timezone(UTC),
                    )
                }
                (_, Some(None)) => return Err(bad(t.name())),
                _ => ts,
            }
        }
        _ => Arc::new(StringArray::from(vec![text])),
    })
}

/// A timestamp's text and its zone, if it ends with one (` +00`,
/// `+05:30`, `-0800`): the zone's offset in seconds (None inside when
/// it is malformed).
fn split_zone(text: &str) -> (&str, Option<Option<i64>>) {
    // ISO 8601's `Z` is UTC.
    if let Some(local) = text.strip_suffix(['Z', 'z']) {
        return (local.trim_end(), Some(Some(0)));
    }
    // The zone starts at the last + or - after the time's colons.
    let Some(time_at) = text.find(':') else {
        return (text, None);
    };
    let Some(at) = text[time_at..].rfind(['+', '-']).map(|i| time_at + i) else {
        return (text, None);
    };
    let zone = text[at + 1..].trim().replace(':', "");
    if !zone.bytes().all(|b| b.is_ascii_digit()) {
        return (text, Some(None));
    }
    let sign = if text.as_bytes()[at] == b'-' { -1 } else { 1 };
    let offset = match zone.len() {
        2 => zone.parse::<i64>().ok().map(|h| h * 3600),
        4 => match (zone[..2].parse::<i64>(), zone[2..].parse::<i64>()) {
            (Ok(h), Ok(m)) => Some(h * 3600 + m * 60),
            _ => None,
        },
        _ => None,
    };
    (text[..at].trim_end(), Some(offset.map(|o| sign * o)))
}

/// `text` as a column of `to` (Arrow's parsing of dates and timestamps).
fn cast_text(text: &str, to: &DataType) -> Result<ArrayRef> {
    let s: ArrayRef = Arc::new(StringArray::from(vec![text.trim()]));
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    Ok(arrow::compute::cast_with_options(&s, to, &options)?)
}

/// A decimal's text as a DECIMAL(38, its own scale) column.
fn decimal(text: &str) -> Option<ArrayRef> {
    // An exponent (`1.5e3`, `25E-2`, as PostgreSQL's numeric input takes)
    // moves the point: written out plainly first.
    if let Some(at) = text.find(['e', 'E']) {
        let exponent: i32 = text[at + 1..].parse().ok()?;
        let mantissa = &text[..at];
        let (sign, unsigned) = match mantissa.strip_prefix('-') {
            Some(m) => ("-", m),
            None => ("", mantissa.strip_prefix('+').unwrap_or(mantissa)),
        };
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        if exponent.unsigned_abs() > 76 || frac.contains(['+', '-']) {
            return None;
        }
        let digits = format!("{int}{frac}");
        let point = int.len() as i32 + exponent;
        let plain = match point {
            p if p <= 0 => format!("0.{}{digits}", "0".repeat(p.unsigned_abs() as usize)),
            p if p as usize >= digits.len() => {
                format!("{digits}{}", "0".repeat(p as usize - digits.len()))
            }
            p => format!("{}.{}", &digits[..p as usize], &digits[p as usize..]),
        };
        return decimal(&format!("{sign}{plain}"));
    }
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = int.trim_start_matches(['-', '+']);
    if digits.is_empty() && frac.is_empty()
        || !digits
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let scale = frac.len();
    if digits.len() + scale > 38 {
        return None;
    }
    let unscaled: i128 = format!("{int}{frac}").parse().ok()?;
    Decimal128Array::from(vec![unscaled])
        .with_precision_and_scale(38, scale as i8)
        .ok()
        .map(|a| Arc::new(a) as ArrayRef)
}

/// A date or timestamp past what Quarry holds (`infinity`).
fn out_of_range() -> Error {
    Error::Overflow("date or timestamp out of range (infinity is not a value Quarry holds)".into())
}

/// One parameter in binary format, by its type.
pub(super) fn binary_value(b: &[u8], t: &Type) -> Result<ArrayRef> {
    let n = |len: usize| -> Result<&[u8]> {
        match b.len() == len {
            true => Ok(b),
            false => Err(plan_err!(
                "a binary {} takes {len} bytes, got {}",
                t.name(),
                b.len()
            )),
        }
    };
    Ok(match *t {
        Type::INT2 => Arc::new(Int64Array::from(vec![i64::from(i16::from_be_bytes(
            n(2)?.try_into().expect("2"),
        ))])),
        Type::INT4 => Arc::new(Int64Array::from(vec![i64::from(i32::from_be_bytes(
            n(4)?.try_into().expect("4"),
        ))])),
        Type::OID => Arc::new(Int64Array::from(vec![i64::from(u32::from_be_bytes(
            n(4)?.try_into().expect("4"),
        ))])),
        Type::INT8 => Arc::new(Int64Array::from(vec![i64::from_be_bytes(
            n(8)?.try_into().expect("8"),
        )])),
        Type::FLOAT4 => Arc::new(Float64Array::from(vec![f64::from(f32::from_be_bytes(
            n(4)?.try_into().expect("4"),
        ))])),
        Type::FLOAT8 => Arc::new(Float64Array::from(vec![f64::from_be_bytes(
            n(8)?.try_into().expect("8"),
        )])),
        Type::BOOL => Arc::new(BooleanArray::from(vec![n(1)?[0] != 0])),
        Type::NUMERIC => {
            let text = numeric_from_binary(b)?;
            decimal(&text).ok_or_else(|| plan_err!("numeric {text} has more than 38 digits"))?
        }
        Type::DATE => Arc::new(Date32Array::from(vec![i32::from_be_bytes(
            n(4)?.try_into().expect("4"),
        )
        .checked_add(PG_EPOCH_DAYS)
        .ok_or_else(out_of_range)?])),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(n(8)?.try_into().expect("8"))
                .checked_add(PG_EPOCH_MICROS)
                .ok_or_else(out_of_range)?;
            let a = TimestampMicrosecondArray::from(vec![micros]);
            // A binary TIMESTAMPTZ is an instant, in UTC.
            Arc::new(match *t == Type::TIMESTAMPTZ {
                true => a.with_timezone(UTC),
                false => a,
            })
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            Arc::new(StringArray::from(vec![utf8(b)?]))
        }
        _ => {
            return Err(plan_err!(
                "binary parameters of type {} are not supported: send it as text, or bind a \
                 number, string, boolean, numeric, date or timestamp",
                t.name()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{bind, Numbered};

    fn bound(sql: &str, values: &[Option<&[u8]>], types: &[Type], binary: bool) -> String {
        let values: Vec<Option<Bytes>> = values
            .iter()
            .map(|v| v.map(Bytes::copy_from_slice))
            .collect();
        let row = row(&values, types, |_| binary).unwrap();
        let stmt = Numbered {
            sql: sql.into(),
            count: values.len(),
        };
        bind(&stmt, &row, 0).unwrap()
    }

    #[test]
    fn text_parameters_become_literals_of_their_type() {
        let sql = "SELECT $1, $2, $3, $4, $5, $6, $7";
        let got = bound(
            sql,
            &[
                Some(b"42"),
                Some(b"-1.50"),
                Some(b"t"),
                Some(b"1998-12-01"),
                Some(b"it's"),
                None,
                Some(b"2.5"),
            ],
            &[
                Type::INT4,
                Type::NUMERIC,
                Type::BOOL,
                Type::DATE,
                Type::UNKNOWN,
                Type::TEXT,
                Type::FLOAT8,
            ],
            false,
        );
        assert_eq!(
            got,
            "SELECT 42, -1.50, true, DATE '1998-12-01', 'it''s', NULL, 2.5"
        );
    }

    #[test]
    fn dates_and_timestamps_with_zones_as_pgjdbc_writes_them() {
        let sql = "SELECT $1, $2, $3";
        let got = bound(
            sql,
            &[
                Some(b"1994-01-01 +00"),
                Some(b"2020-01-02 03:04:05.6 +00"),
                Some(b"2020-01-02 03:04:05+05:30"),
            ],
            &[Type::DATE, Type::TIMESTAMP, Type::TIMESTAMPTZ],
            false,
        );
        assert_eq!(
            got,
            "SELECT DATE '1994-01-01', TIMESTAMP '2020-01-02T03:04:05.600', \
             TIMESTAMP WITH TIME ZONE '2020-01-01T21:34:05Z'"
        );
    }

    #[test]
    fn numerics_with_exponents_and_utc_as_z_are_read_as_postgresql_reads_them() {
        let got = bound(
            "SELECT $1, $2, $3, $4, $5",
            &[
                Some(b"1.5e3"),
                Some(b"25E-2"),
                Some(b"-1.25e1"),
                Some(b"7e0"),
                Some(b"2020-01-02 03:04:05Z"),
            ],
            &[
                Type::NUMERIC,
                Type::NUMERIC,
                Type::NUMERIC,
                Type::NUMERIC,
                Type::TIMESTAMPTZ,
            ],
            false,
        );
        assert_eq!(
            got,
            "SELECT 1500, 0.25, -12.5, 7, TIMESTAMP WITH TIME ZONE '2020-01-02T03:04:05Z'"
        );
    }

    #[test]
    fn a_declared_numeric_finer_than_its_cast_is_refused_unless_the_rest_is_zeros() {
        let one = |text: &[u8]| {
            let values = [Some(Bytes::copy_from_slice(text))];
            row(&values, &[Type::NUMERIC], |_| false).unwrap()
        };
        assert!(check_declared_numeric(&one(b"2.5"), 0).is_ok());
        assert!(check_declared_numeric(&one(b"2.500000000000"), 0).is_ok());
        let e = check_declared_numeric(&one(b"1.000000000001"), 0).unwrap_err();
        assert!(e.to_string().contains("12 digits after the point"), "{e}");
    }

    #[test]
    fn binary_parameters_are_decoded_by_their_type() {
        let mut numeric = Vec::new();
        super::super::encode::numeric_binary("12345.6789", &mut numeric).unwrap();
        // 10,000 days after 2000-01-01.
        let days = 10_000i32.to_be_bytes();
        let got = bound(
            "SELECT $1, $2, $3, $4",
            &[
                Some(&7i64.to_be_bytes()),
                Some(&numeric),
                Some(&days),
                Some(b"x"),
            ],
            &[Type::INT8, Type::NUMERIC, Type::DATE, Type::TEXT],
            true,
        );
        assert_eq!(got, "SELECT 7, 12345.6789, DATE '2027-05-19', 'x'");
    }

    #[test]
    fn malformed_parameters_name_themselves_and_their_type() {
        let values = vec![Some(Bytes::from_static(b"12x"))];
        let e = row(&values, &[Type::INT8], |_| false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "parameter $1: invalid input syntax for type int8: \"12x\""
        );
        let e = row(&values, &[Type::INT8], |_| true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a binary int8 takes 8 bytes, got 3"), "{e}");
    }
}
