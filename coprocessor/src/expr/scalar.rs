//! Single values: literals, constant-folding results, and group keys in
//! messages.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Date32Array, Decimal128Array,
    Float64Array, Int64Array, StringArray,
};
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Float64Type, Int64Type};
use quarry_proto::coprocessor::{literal::Value as PValue, Decimal as PDecimal, Literal};

use crate::types::{self, arrow_type, field_type};
use crate::{internal, invalid_input, Result};

#[derive(Debug, Clone, PartialEq)]
pub enum ScalarValue {
    /// A NULL of the given type (`DataType::Null` when untyped).
    Null(DataType),
    Int64(i64),
    Float64(f64),
    /// (unscaled value, precision, scale)
    Decimal(i128, u8, i8),
    /// Days since 1970-01-01.
    Date(i32),
    Utf8(String),
    Boolean(bool),
}

impl ScalarValue {
    pub fn data_type(&self) -> DataType {
        match self {
            ScalarValue::Null(dt) => dt.clone(),
            ScalarValue::Int64(_) => DataType::Int64,
            ScalarValue::Float64(_) => DataType::Float64,
            ScalarValue::Decimal(_, p, s) => DataType::Decimal128(*p, *s),
            ScalarValue::Date(_) => DataType::Date32,
            ScalarValue::Utf8(_) => DataType::Utf8,
            ScalarValue::Boolean(_) => DataType::Boolean,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, ScalarValue::Null(_))
    }

    /// The value of a BIGINT; None for any other type or NULL.
    pub fn as_int64(&self) -> Option<i64> {
        match self {
            ScalarValue::Int64(v) => Some(*v),
            _ => None,
        }
    }

    /// An array repeating this value `len` times.
    pub fn to_array(&self, len: usize) -> Result<ArrayRef> {
        Ok(match self {
            ScalarValue::Null(dt) => new_null_array(dt, len),
            ScalarValue::Int64(v) => Arc::new(Int64Array::from_value(*v, len)),
            ScalarValue::Float64(v) => Arc::new(Float64Array::from_value(*v, len)),
            ScalarValue::Decimal(v, p, s) => Arc::new(
                Decimal128Array::from_value(*v, len)
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| internal!("{e}"))?,
            ),
            ScalarValue::Date(v) => Arc::new(Date32Array::from_value(*v, len)),
            ScalarValue::Utf8(v) => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                v.as_str(),
                len,
            ))),
            ScalarValue::Boolean(v) => Arc::new(BooleanArray::from(vec![*v; len])),
        })
    }

    /// The value at `row` of `array`.
    pub fn from_array(array: &dyn Array, row: usize) -> Result<ScalarValue> {
        if array.is_null(row) {
            return Ok(ScalarValue::Null(array.data_type().clone()));
        }
        Ok(match array.data_type() {
            DataType::Int64 => ScalarValue::Int64(array.as_primitive::<Int64Type>().value(row)),
            DataType::Float64 => {
                ScalarValue::Float64(array.as_primitive::<Float64Type>().value(row))
            }
            DataType::Decimal128(p, s) => {
                ScalarValue::Decimal(array.as_primitive::<Decimal128Type>().value(row), *p, *s)
            }
            DataType::Date32 => ScalarValue::Date(array.as_primitive::<Date32Type>().value(row)),
            DataType::Utf8 => ScalarValue::Utf8(array.as_string::<i32>().value(row).to_string()),
            DataType::Boolean => ScalarValue::Boolean(array.as_boolean().value(row)),
            DataType::Null => ScalarValue::Null(DataType::Null),
            other => return Err(invalid_input!("unsupported value type {other}")),
        })
    }

    pub fn to_proto(&self) -> Result<Literal> {
        let (value, ft) = match self {
            ScalarValue::Null(dt) => (PValue::Null(true), Some(field_type(dt, true)?)),
            ScalarValue::Int64(v) => (PValue::Int64(*v), None),
            ScalarValue::Float64(v) => (PValue::Float64(*v), None),
            ScalarValue::Decimal(v, p, s) => (
                PValue::Decimal(PDecimal {
                    hi: (*v >> 64) as i64,
                    lo: *v as u64,
                    precision: *p as u32,
                    scale: *s as u32,
                }),
                None,
            ),
            ScalarValue::Date(v) => (PValue::Date(*v), None),
            ScalarValue::Utf8(v) => (PValue::Utf8(v.clone()), None),
            ScalarValue::Boolean(v) => (PValue::Boolean(*v), None),
        };
        Ok(Literal {
            value: Some(value),
            field_type: ft,
        })
    }

    pub fn from_proto(l: &Literal) -> Result<ScalarValue> {
        Ok(match l.value.as_ref() {
            None => return Err(invalid_input!("literal without a value")),
            Some(PValue::Null(_)) => ScalarValue::Null(match &l.field_type {
                Some(ft) => arrow_type(ft)?,
                None => DataType::Null,
            }),
            Some(PValue::Int64(v)) => ScalarValue::Int64(*v),
            Some(PValue::Float64(v)) => ScalarValue::Float64(*v),
            Some(PValue::Decimal(d)) => {
                let v = ((d.hi as i128) << 64) | d.lo as i128;
                let (p, s) = (d.precision, d.scale);
                if p == 0 || p > 38 || s > p || !types::fits_precision(v, p as u8) {
                    return Err(invalid_input!(
                        "invalid decimal literal for DECIMAL({p},{s})"
                    ));
                }
                ScalarValue::Decimal(v, p as u8, s as i8)
            }
            Some(PValue::Date(v)) => ScalarValue::Date(*v),
            Some(PValue::Utf8(v)) => ScalarValue::Utf8(v.clone()),
            Some(PValue::Boolean(v)) => ScalarValue::Boolean(*v),
        })
    }
}

impl std::fmt::Display for ScalarValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScalarValue::Null(_) => write!(f, "NULL"),
            ScalarValue::Int64(v) => write!(f, "{v}"),
            ScalarValue::Float64(v) => write!(f, "{v}"),
            ScalarValue::Decimal(v, _, s) => write!(f, "{}", types::format_decimal(*v, *s)),
            ScalarValue::Date(v) => write!(f, "DATE '{}'", types::format_date(*v)),
            ScalarValue::Utf8(v) => write!(f, "'{}'", v.replace('\'', "''")),
            ScalarValue::Boolean(v) => write!(f, "{}", if *v { "TRUE" } else { "FALSE" }),
        }
    }
}
