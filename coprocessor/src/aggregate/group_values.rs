//! Interning group keys into dense group indexes.
//!
//! Keys of any column types are encoded with arrow's row format
//! (`arrow::row`), whose bytes compare like the values, and looked up in a
//! hash map from key bytes to group index. With no GROUP BY there is exactly
//! one group. Memory grows with the number of groups, never with rows.

use std::collections::HashMap;

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};

use crate::{internal, Result};

pub struct GroupValues {
    /// None: no GROUP BY, a single group.
    keyed: Option<Keyed>,
}

struct Keyed {
    converter: RowConverter,
    map: HashMap<Box<[u8]>, u32>,
    keys: Rows,
}

impl GroupValues {
    pub fn new(types: &[DataType]) -> Result<Self> {
        if types.is_empty() {
            return Ok(GroupValues { keyed: None });
        }
        let converter =
            RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())
                .map_err(|e| internal!("group key encoder: {e}"))?;
        let keys = converter.empty_rows(0, 0);
        Ok(GroupValues {
            keyed: Some(Keyed {
                converter,
                map: HashMap::new(),
                keys,
            }),
        })
    }

    pub fn num_groups(&self) -> usize {
        match &self.keyed {
            None => 1,
            Some(k) => k.map.len(),
        }
    }

    /// Appends to `groups` the group index of each row in `rows`, creating
    /// groups for keys not seen before.
    pub fn intern(&mut self, cols: &[ArrayRef], rows: &[u32], groups: &mut Vec<u32>) -> Result<()> {
        groups.clear();
        let Some(k) = &mut self.keyed else {
            groups.resize(rows.len(), 0);
            return Ok(());
        };
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
        Ok(())
    }

    /// The key columns, one row per group in group-index order; resets.
    pub fn emit(&mut self) -> Result<Vec<ArrayRef>> {
        let Some(k) = &mut self.keyed else {
            return Ok(vec![]);
        };
        let cols = k.converter.convert_rows(k.keys.iter())?;
        k.map.clear();
        k.keys = k.converter.empty_rows(0, 0);
        Ok(cols)
    }
}
