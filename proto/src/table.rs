//! What a table definition says about its rows' handles.

use crate::meta::TableDef;

impl TableDef {
    /// Position in `columns` of the primary key, the column whose value is
    /// each row's handle; None for a table without one (its rows are
    /// numbered by `_rowid` handles of their own).
    pub fn key_position(&self) -> Option<usize> {
        if self.handle_column_id == 0 {
            return None;
        }
        self.columns
            .iter()
            .position(|c| c.id == self.handle_column_id)
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::{ColumnDef, TableDef};

    #[test]
    fn the_key_is_found_by_id_not_by_place() {
        let col = |id| ColumnDef {
            id,
            ..Default::default()
        };
        let mut t = TableDef {
            columns: vec![col(2), col(5)],
            handle_column_id: 5,
            ..Default::default()
        };
        assert_eq!(t.key_position(), Some(1));
        t.handle_column_id = 0;
        assert_eq!(t.key_position(), None);
        t.handle_column_id = 9;
        assert_eq!(t.key_position(), None);
    }
}
