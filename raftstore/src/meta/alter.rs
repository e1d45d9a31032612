//! ALTER TABLE: a table's definition replaced by a newer one.
//!
//! Compute works out the new definition (columns added, dropped or
//! renamed, the table renamed) from the one it read and sends both; meta
//! writes the new one only if the stored definition is still the one the
//! change was made from, so two concurrent ALTERs cannot lose each other's
//! change (the second is told to start again). What a definition may
//! become is checked here, whatever compute sent: the table keeps its id,
//! layout and primary key; a column keeps its id and type for as long as
//! it exists; a new column takes an id never used in the table
//! (`next_column_id`), so the values a dropped column left in old rows are
//! never read as another column's. Nothing is rewritten: rows written
//! before a column was added read it as its default (the scan fills it
//! in), and a dropped column's values stay in old rows, unread.
//!
//! Compute reads the catalog once per statement, so every statement sees
//! one definition, and one written after the change, the new one: a
//! statement planned just before still writes rows the new definition
//! reads correctly (a missing column is its default; an extra one is
//! ignored).

use prost::Message;
use quarry_proto::meta::TableDef;

use super::Meta;
use crate::engine::Engine;
use crate::{keys, Error, Result};

/// The id the next added column of `t` takes.
pub fn next_column_id(t: &TableDef) -> i64 {
    let past = t.columns.iter().map(|c| c.id).max().unwrap_or(0) + 1;
    t.next_column_id.max(past)
}

/// The id the next index of `t` takes.
fn next_index_id(t: &TableDef) -> i64 {
    let past = t.indexes.iter().map(|i| i.id).max().unwrap_or(0) + 1;
    t.next_index_id.max(past)
}

/// Why `new` may not replace `old`, if it may not.
fn check_change(old: &TableDef, new: &TableDef) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidInput(m));
    if new.id != old.id || new.layout != old.layout || new.created_by != old.created_by {
        return bad(format!(
            "ALTER TABLE {}: the table's id and layout stay",
            old.name
        ));
    }
    if new.handle_column_id != old.handle_column_id {
        return bad(format!("ALTER TABLE {}: the primary key stays", old.name));
    }
    let next = next_column_id(old);
    for c in &new.columns {
        match old.columns.iter().find(|o| o.id == c.id) {
            Some(o) if o.field_type != c.field_type => {
                return bad(format!(
                    "ALTER TABLE {}: column {} keeps its type",
                    old.name, o.name
                ))
            }
            Some(o) if o.has_default != c.has_default || o.default_value != c.default_value => {
                return bad(format!(
                    "ALTER TABLE {}: column {} keeps its default",
                    old.name, o.name
                ))
            }
            Some(_) => {}
            None if c.id < next => {
                return bad(format!(
                    "ALTER TABLE {}: column id {} was used before",
                    old.name, c.id
                ))
            }
            None => {}
        }
    }
    if new.index_space != old.index_space {
        return bad(format!("ALTER TABLE {}: the key layout stays", old.name));
    }
    let next = next_index_id(old);
    for ix in &new.indexes {
        let known = old.indexes.iter().find(|o| o.id == ix.id);
        match known {
            Some(o) if o.column_ids != ix.column_ids || o.unique != ix.unique => {
                return bad(format!(
                    "ALTER TABLE {}: index {} keeps its columns",
                    old.name, o.name
                ))
            }
            None if ix.id < next => {
                return bad(format!(
                    "ALTER TABLE {}: index id {} was used before",
                    old.name, ix.id
                ))
            }
            _ => {}
        }
        if let Some(c) = ix
            .column_ids
            .iter()
            .find(|c| !new.columns.iter().any(|x| x.id == **c))
        {
            return bad(format!(
                "ALTER TABLE {}: index {} reads column id {c}, which the table no longer has",
                old.name, ix.name
            ));
        }
    }
    Ok(())
}

impl<E: Engine> Meta<E> {
    /// Replaces the table `name` by `new`, if it is still `expected`
    /// (encoded); returns the definition stored.
    pub async fn alter_table(
        &self,
        name: &str,
        new: TableDef,
        expected: &[u8],
    ) -> Result<TableDef> {
        let _ddl = self.ddl.lock().await;
        let region = self.leader().await?;
        // The same change sent again (a retry after a timeout whose first
        // try was applied) is done, not a conflict.
        let done = |stored: &TableDef| {
            let mut again = new.clone();
            again.next_column_id = stored.next_column_id;
            again.next_index_id = stored.next_index_id;
            again == *stored
        };
        let Some(old) = self.get_table(name).await? else {
            if let Some(renamed) = self.get_table(&new.name).await? {
                if done(&renamed) {
                    return Ok(renamed);
                }
            }
            return Err(Error::InvalidInput(format!("table {name} does not exist")));
        };
        if done(&old) {
            return Ok(old);
        }
        if old.encode_to_vec() != expected {
            return Err(Error::InvalidInput(format!(
                "table {name} was changed by another statement meanwhile; run the ALTER again"
            )));
        }
        Self::validate(&new)?;
        check_change(&old, &new)?;
        let mut new = new;
        new.next_column_id = next_column_id(&old).max(next_column_id(&new));
        new.next_index_id = next_index_id(&old).max(next_index_id(&new));
        let mut deletes = vec![];
        if new.name != old.name {
            if self.get_table(&new.name).await?.is_some() || self.view_here(&new.name)?.is_some() {
                return Err(Error::InvalidInput(format!(
                    "ALTER TABLE {name} RENAME TO {}: that name is taken",
                    new.name
                )));
            }
            deletes.push(keys::table_key(&old.name));
        }
        self.propose(
            &region,
            vec![(keys::table_key(&new.name), new.encode_to_vec())],
            deletes,
        )
        .await?;
        tracing::info!(
            table = name,
            new_name = new.name,
            columns = new.columns.len(),
            "table altered"
        );
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_proto::meta::{ColumnDef, FieldType, TypeKind};

    fn col(id: i64, name: &str, kind: TypeKind) -> ColumnDef {
        ColumnDef {
            id,
            name: name.into(),
            field_type: Some(FieldType {
                kind: kind as i32,
                nullable: true,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_change_keeps_ids_types_and_never_reuses_a_column_id() {
        let old = TableDef {
            id: 20,
            name: "t".into(),
            columns: vec![col(1, "a", TypeKind::Bigint), col(2, "b", TypeKind::Bigint)],
            next_column_id: 4,
            ..Default::default()
        };
        assert_eq!(next_column_id(&old), 4);
        // Drop b, rename a, add c with a fresh id: fine.
        let mut new = old.clone();
        new.columns = vec![
            col(1, "x", TypeKind::Bigint),
            col(4, "c", TypeKind::Varchar),
        ];
        assert!(check_change(&old, &new).is_ok());
        // Reusing id 3 (dropped before) or changing a type is refused.
        new.columns = vec![
            col(1, "a", TypeKind::Bigint),
            col(3, "c", TypeKind::Varchar),
        ];
        assert!(check_change(&old, &new)
            .unwrap_err()
            .to_string()
            .contains("used before"));
        new.columns = vec![col(1, "a", TypeKind::Double)];
        assert!(check_change(&old, &new)
            .unwrap_err()
            .to_string()
            .contains("keeps its type"));
        new = old.clone();
        new.layout = 1;
        assert!(check_change(&old, &new).is_err());
    }
}
