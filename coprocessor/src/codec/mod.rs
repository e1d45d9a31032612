//! Byte encodings: memcomparable keys ([`key`]) and row values ([`row`]).

pub mod key;
pub mod row;
