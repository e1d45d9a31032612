//! Byte encodings: memcomparable keys ([`key`]), row values ([`row`]) and
//! the column layout's packs ([`pack`]).

pub mod index;
pub mod key;
pub mod mvcc;
pub mod pack;
pub mod row;
