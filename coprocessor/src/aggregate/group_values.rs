//! Interning group keys into dense group indexes.
//!
//! One BIGINT key (an order, customer or part key: the keys too many or
//! too spread out for the fused executor's lookup tables,
//! `executor/fused/keys.rs`) is looked up as the integer itself. Keys of
//! any other types, or several, are encoded with arrow's row format
//! (`arrow::row`), whose bytes compare like the values, and looked up by
//! those bytes. With no GROUP BY there is exactly one group. Memory grows
//! with the number of groups, never with rows.
//!
//! Both maps hash with foldhash, not the standard library's SipHash: a
//! region's key set is the table's, not a client's pick, and SipHash over
//! row-format bytes was a fifth of a store's CPU in a GROUP BY of orders'
//! 100 thousand customer keys (`docs/performance.md`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, Rows, SortField};
use foldhash::fast::RandomState;

use crate::{internal, Result};

pub struct GroupValues {
    keyed: Keyed,
}

enum Keyed {
    /// No GROUP BY: a single group.
    One,
    /// One BIGINT key.
    Int(IntKeys),
    /// Any other keys, as row-format bytes.
    Rows(RowKeys),
}

#[derive(Default)]
struct IntKeys {
    map: HashMap<i64, u32, RandomState>,
    /// Each group's key by group index (the NULL group's slot holds 0).
    keys: Vec<i64>,
    /// The group of the NULL key, once it has rows.
    null: Option<u32>,
}

struct RowKeys {
    converter: RowConverter,
    map: HashMap<Box<[u8]>, u32, RandomState>,
    keys: Rows,
}

impl GroupValues {
    pub fn new(types: &[DataType]) -> Result<Self> {
        let keyed = match types {
            [] => Keyed::One,
            [DataType::Int64] => Keyed::Int(IntKeys::default()),
            _ => {
                let converter =
                    RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())
                        .map_err(|e| internal!("group key encoder: {e}"))?;
                let keys = converter.empty_rows(0, 0);
                Keyed::Rows(RowKeys {
                    converter,
                    map: HashMap::default(),
                    keys,
                })
            }
        };
        Ok(GroupValues { keyed })
    }

    pub fn num_groups(&self) -> usize {
        match &self.keyed {
            Keyed::One => 1,
            Keyed::Int(k) => k.keys.len(),
            Keyed::Rows(k) => k.map.len(),
        }
    }

    /// Appends to `groups` the group index of each row in `rows`, creating
    /// groups for keys not seen before.
    pub fn intern(&mut self, cols: &[ArrayRef], rows: &[u32], groups: &mut Vec<u32>) -> Result<()> {
        groups.clear();
        match &mut self.keyed {
            Keyed::One => groups.resize(rows.len(), 0),
            Keyed::Int(k) => {
                let [col] = cols else {
                    return Err(internal!("one group key expected, got {}", cols.len()));
                };
                let values = col.as_primitive_opt::<Int64Type>().ok_or_else(|| {
                    internal!("a BIGINT group key arrived as {}", col.data_type())
                })?;
                groups.reserve(rows.len());
                for &r in rows {
                    let g = match values.is_valid(r as usize) {
                        true => k.group_of(values.value(r as usize)),
                        false => k.null_group(),
                    };
                    groups.push(g);
                }
            }
            Keyed::Rows(k) => {
                let encoded = k.converter.convert_columns(cols)?;
                for &r in rows {
                    let row = encoded.row(r as usize);
                    let key: &[u8] = row.as_ref();
                    let g = match k.map.get(key) {
                        Some(g) => *g,
                        None => {
                            let g = k.map.len() as u32;
                            k.map.insert(key.into(), g);
                            k.keys.push(row);
                            g
                        }
                    };
                    groups.push(g);
                }
            }
        }
        Ok(())
    }

    /// The key columns, one row per group in group-index order; resets.
    pub fn emit(&mut self) -> Result<Vec<ArrayRef>> {
        match &mut self.keyed {
            Keyed::One => Ok(vec![]),
            Keyed::Int(k) => {
                let k = std::mem::take(k);
                let keys: Int64Array = match k.null {
                    None => Int64Array::from(k.keys),
                    Some(n) => (k.keys.iter().enumerate())
                        .map(|(g, v)| (g as u32 != n).then_some(*v))
                        .collect(),
                };
                Ok(vec![Arc::new(keys)])
            }
            Keyed::Rows(k) => {
                let cols = k.converter.convert_rows(k.keys.iter())?;
                k.map.clear();
                k.keys = k.converter.empty_rows(0, 0);
                Ok(cols)
            }
        }
    }
}

impl IntKeys {
    fn group_of(&mut self, key: i64) -> u32 {
        let next = self.keys.len() as u32;
        let g = *self.map.entry(key).or_insert(next);
        if g == next {
            self.keys.push(key);
        }
        g
    }

    fn null_group(&mut self) -> u32 {
        *self.null.get_or_insert_with(|| {
            self.keys.push(0);
            self.keys.len() as u32 - 1
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::StringArray;

    use super::*;

    fn interned(values: &mut GroupValues, cols: &[ArrayRef], rows: &[u32]) -> Vec<u32> {
        let mut groups = Vec::new();
        values.intern(cols, rows, &mut groups).unwrap();
        groups
    }

    #[test]
    fn bigint_keys_get_groups_in_order_of_first_appearance_nulls_one_group() {
        let mut values = GroupValues::new(&[DataType::Int64]).unwrap();
        let a: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(7),
            None,
            Some(-3),
            Some(7),
            None,
            Some(0),
        ]));
        // Rows 1 and 4 (NULL) and row 2 are left out of the first call.
        assert_eq!(
            interned(&mut values, std::slice::from_ref(&a), &[0, 3, 5]),
            [0, 0, 1]
        );
        assert_eq!(interned(&mut values, &[a], &[1, 2, 4, 5]), [2, 3, 2, 1]);
        assert_eq!(values.num_groups(), 4);
        let keys = values.emit().unwrap();
        let keys = keys[0].as_primitive::<Int64Type>();
        assert_eq!(
            keys.iter().collect::<Vec<_>>(),
            [Some(7), Some(0), None, Some(-3)]
        );
        // Emitting resets.
        assert_eq!(values.num_groups(), 0);
        let b: ArrayRef = Arc::new(Int64Array::from(vec![5, 5]));
        assert_eq!(interned(&mut values, &[b], &[0, 1]), [0, 0]);
        let keys = values.emit().unwrap();
        assert_eq!(keys[0].null_count(), 0);
        assert_eq!(keys[0].len(), 1);
    }

    #[test]
    fn many_bigint_keys_map_back_to_themselves() {
        let mut values = GroupValues::new(&[DataType::Int64]).unwrap();
        let n = 100_000i64;
        // Each key twice, out of order.
        let keys: Vec<i64> = (0..2 * n).map(|i| (i * 7_919) % n * 1_000_003).collect();
        let col: ArrayRef = Arc::new(Int64Array::from(keys.clone()));
        let rows: Vec<u32> = (0..keys.len() as u32).collect();
        let groups = interned(&mut values, &[col], &rows);
        assert_eq!(values.num_groups(), n as usize);
        let emitted = values.emit().unwrap();
        let emitted = emitted[0].as_primitive::<Int64Type>();
        for (row, g) in groups.iter().enumerate() {
            assert_eq!(emitted.value(*g as usize), keys[row]);
        }
    }

    #[test]
    fn other_keys_go_by_their_row_format_bytes() {
        let mut values = GroupValues::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        let s: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            Some("a"),
            None,
        ]));
        let i: ArrayRef = Arc::new(Int64Array::from(vec![1, 1, 1, 1]));
        assert_eq!(interned(&mut values, &[s, i], &[0, 1, 2, 3]), [0, 1, 0, 2]);
        let cols = values.emit().unwrap();
        assert_eq!(cols[0].as_string::<i32>().value(1), "b");
        assert!(cols[0].is_null(2));
        assert_eq!(values.num_groups(), 0);
    }
}
