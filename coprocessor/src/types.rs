//! SQL types and their Arrow representation.
//!
//! Quarry's column types map one-to-one onto Arrow types, and executors work
//! on Arrow arrays only:
//!
//! | SQL            | Arrow                 | stored as (row value)           |
//! |----------------|-----------------------|---------------------------------|
//! | BIGINT         | Int64                 | compact little-endian integer   |
//! | DOUBLE         | Float64               | 8 bytes                         |
//! | DECIMAL(p, s)  | Decimal128(p, s)      | compact integer, unscaled       |
//! | DATE           | Date32 (days)         | compact integer                 |
//! | VARCHAR/CHAR   | Utf8                  | the bytes                       |
//! | BOOLEAN        | Boolean               | (expression results only)       |
//!
//! Decimals are exact everywhere: values are unscaled integers, arithmetic is
//! checked, and results are rescaled explicitly. The largest precision is 38
//! (an i128 holds 10^38 − 1).

use arrow::datatypes::DataType;
use quarry_proto::meta::{FieldType, TypeKind};

use crate::{invalid_input, Error, Result};

/// The largest decimal precision (digits) Quarry represents.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// 10^0 ..= 10^38 as i128.
pub const POW10: [i128; 39] = {
    let mut t = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// The Arrow type for a stored or computed SQL type.
pub fn arrow_type(ft: &FieldType) -> Result<DataType> {
    Ok(
        match TypeKind::try_from(ft.kind).unwrap_or(TypeKind::TypeUnspecified) {
            TypeKind::Bigint => DataType::Int64,
            TypeKind::Double => DataType::Float64,
            TypeKind::Decimal => {
                let (p, s) = (ft.precision, ft.scale);
                if p == 0 || p > MAX_DECIMAL_PRECISION as u32 || s > p {
                    return Err(invalid_input!(
                    "invalid DECIMAL({p},{s}): precision must be 1..=38 and scale 0..=precision"
                ));
                }
                DataType::Decimal128(p as u8, s as i8)
            }
            TypeKind::Date => DataType::Date32,
            TypeKind::Varchar => DataType::Utf8,
            TypeKind::Boolean => DataType::Boolean,
            TypeKind::TypeUnspecified => DataType::Null,
        },
    )
}

/// The wire type for an Arrow type (the inverse of [`arrow_type`]).
pub fn field_type(dt: &DataType, nullable: bool) -> Result<FieldType> {
    let (kind, precision, scale) = match dt {
        DataType::Int64 => (TypeKind::Bigint, 0, 0),
        DataType::Float64 => (TypeKind::Double, 0, 0),
        DataType::Decimal128(p, s) if *s >= 0 => (TypeKind::Decimal, *p as u32, *s as u32),
        DataType::Date32 => (TypeKind::Date, 0, 0),
        DataType::Utf8 => (TypeKind::Varchar, 0, 0),
        DataType::Boolean => (TypeKind::Boolean, 0, 0),
        DataType::Null => (TypeKind::TypeUnspecified, 0, 0),
        other => return Err(invalid_input!("unsupported type {other}")),
    };
    Ok(FieldType {
        kind: kind as i32,
        precision,
        scale,
        max_len: 0,
        nullable,
    })
}

/// The SQL spelling of a type, for messages: `DECIMAL(15,2)`, `DATE`, ...
pub fn sql_name(dt: &DataType) -> String {
    match dt {
        DataType::Int64 => "BIGINT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Utf8 => "VARCHAR".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Null => "NULL".into(),
        other => format!("{other}"),
    }
}

/// True for the types arithmetic accepts.
pub fn is_numeric(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int64 | DataType::Float64 | DataType::Decimal128(_, _)
    )
}

/// The scale of a decimal type (0 for integers).
pub fn decimal_scale(dt: &DataType) -> i8 {
    match dt {
        DataType::Decimal128(_, s) => *s,
        _ => 0,
    }
}

/// True if `v` fits in `precision` decimal digits.
#[inline]
pub fn fits_precision(v: i128, precision: u8) -> bool {
    let bound = POW10[precision as usize];
    v > -bound && v < bound
}

/// Divides by 10^k, rounding half away from zero.
#[inline]
pub fn scale_down_round(v: i128, k: u32) -> i128 {
    if k == 0 {
        return v;
    }
    if k as usize >= POW10.len() {
        return 0;
    }
    let d = POW10[k as usize];
    let q = v / d;
    let r = v % d;
    if r.abs() * 2 >= d {
        q + v.signum()
    } else {
        q
    }
}

/// Divides `n` by `d` (non-zero), rounding half away from zero.
#[inline]
pub fn div_round(n: i128, d: i128) -> Option<i128> {
    let q = n.checked_div(d)?;
    let r = n.checked_rem(d)?;
    // |r| * 2 >= |d|, without overflowing: compare |r| with |d| - |r|.
    let (ra, da) = (r.unsigned_abs(), d.unsigned_abs());
    if ra >= da - ra {
        let sign = if (n < 0) != (d < 0) { -1 } else { 1 };
        q.checked_add(sign)
    } else {
        Some(q)
    }
}

/// Formats an unscaled decimal: `format_decimal(12345, 2) == "123.45"`.
pub fn format_decimal(v: i128, scale: i8) -> String {
    if scale <= 0 {
        return v.to_string();
    }
    let s = scale as usize;
    let digits = v.unsigned_abs().to_string();
    let digits = if digits.len() <= s {
        format!("{}{}", "0".repeat(s + 1 - digits.len()), digits)
    } else {
        digits
    };
    let (int, frac) = digits.split_at(digits.len() - s);
    format!("{}{int}.{frac}", if v < 0 { "-" } else { "" })
}

/// Parses a decimal literal such as `-12.340` into (unscaled, precision,
/// scale). Exponents are not accepted here (they make DOUBLE literals).
pub fn parse_decimal(text: &str) -> Result<(i128, u8, i8)> {
    let t = text.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(invalid_input!("invalid decimal literal '{text}'"));
    }
    let int = int.trim_start_matches('0');
    let digits = int.len() + frac.len();
    if digits > MAX_DECIMAL_PRECISION as usize {
        return Err(Error::Overflow(format!(
            "decimal literal '{text}' has more than {MAX_DECIMAL_PRECISION} digits"
        )));
    }
    let mut v: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        v = v * 10 + (b - b'0') as i128;
    }
    let scale = frac.len() as i8;
    let precision = (digits.max(1) as u8).max(scale as u8).max(1);
    Ok((if neg { -v } else { v }, precision, scale))
}

/// The number of decimal digits of |v| (at least 1).
pub fn digits_of(v: i128) -> u8 {
    let a = v.unsigned_abs();
    let mut d = 1u8;
    while d < 39 && a >= POW10[d as usize] as u128 {
        d += 1;
    }
    d
}

/// Days since 1970-01-01 for a civil date (proleptic Gregorian).
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i32 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy as i32;
    era * 146097 + doe - 719468
}

/// The civil date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i32) -> (i32, u32, u32) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// Parses `YYYY-MM-DD` into days since the epoch.
pub fn parse_date(text: &str) -> Result<i32> {
    let bad = || invalid_input!("invalid date '{text}': expected YYYY-MM-DD");
    let mut parts = text.trim().splitn(3, '-');
    let y: i32 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let m: u32 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let d: u32 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) || !(0..=9999).contains(&y) {
        return Err(bad());
    }
    Ok(days_from_civil(y, m, d))
}

/// Formats days since the epoch as `YYYY-MM-DD`.
pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Adds `months` calendar months, clamping the day to the month's end
/// (`1998-01-31 + 1 month = 1998-02-28`), as SQL engines do.
pub fn add_months(days: i32, months: i32) -> Result<i32> {
    let (y, m, d) = civil_from_days(days);
    let total = y as i64 * 12 + (m as i64 - 1) + months as i64;
    let ny = total.div_euclid(12);
    if !(0..=9999).contains(&ny) {
        return Err(Error::Overflow(format!(
            "date {} + {months} months is out of range",
            format_date(days)
        )));
    }
    let nm = (total.rem_euclid(12) + 1) as u32;
    let nd = d.min(days_in_month(ny as i32, nm));
    Ok(days_from_civil(ny as i32, nm, nd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_text_round_trips() {
        assert_eq!(parse_decimal("0.06").unwrap(), (6, 2, 2));
        assert_eq!(parse_decimal("-12.340").unwrap(), (-12340, 5, 3));
        assert_eq!(parse_decimal("24").unwrap(), (24, 2, 0));
        assert_eq!(format_decimal(12345, 2), "123.45");
        assert_eq!(format_decimal(-5, 3), "-0.005");
        assert_eq!(format_decimal(7, 0), "7");
        assert!(parse_decimal("1.2.3").is_err());
        assert!(matches!(
            parse_decimal("123456789012345678901234567890123456789"),
            Err(Error::Overflow(_))
        ));
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(scale_down_round(125, 1), 13);
        assert_eq!(scale_down_round(-125, 1), -13);
        assert_eq!(scale_down_round(124, 1), 12);
        assert_eq!(div_round(10, 4), Some(3));
        assert_eq!(div_round(-10, 4), Some(-3));
        assert_eq!(div_round(10, -3), Some(-3));
        assert_eq!(div_round(1, 0), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-01").unwrap(), 0);
        assert_eq!(
            parse_date("1998-12-01").unwrap() - 90,
            parse_date("1998-09-02").unwrap()
        );
        assert_eq!(format_date(parse_date("1994-01-01").unwrap()), "1994-01-01");
        assert_eq!(
            add_months(parse_date("1994-01-01").unwrap(), 12).unwrap(),
            parse_date("1995-01-01").unwrap()
        );
        assert_eq!(
            format_date(add_months(parse_date("1998-01-31").unwrap(), 1).unwrap()),
            "1998-02-28"
        );
        assert!(parse_date("1998-02-30").is_err());
        assert!(parse_date("yesterday").is_err());
        for d in [-800_000, -1, 0, 1, 10_000, 2_000_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
    }
}
