//! ALTER TABLE: ADD COLUMN, DROP COLUMN, RENAME COLUMN and RENAME TO,
//! online, without rewriting a row.
//!
//! The statement works out the table's new definition from the one it
//! read, and meta stores it only if that is still the table's definition
//! (`raftstore/src/meta/alter.rs` also checks what may change): a
//! concurrent ALTER makes this one fail and ask to be run again rather
//! than lose either change. Every statement reads the catalog once, so it
//! sees one definition, before or after.
//!
//! * **ADD COLUMN** takes a fresh column id. Rows written before it have
//!   no value for it and read as its DEFAULT (NULL without one): the scan
//!   fills it in (`ColumnInfo.default_value`), and an INSERT that does not
//!   name it writes the DEFAULT. `NOT NULL` needs a DEFAULT.
//! * **DROP COLUMN** removes the column from the definition; its values
//!   stay in old rows, unread (its id is never used again). The primary
//!   key and the last column cannot be dropped.
//! * **RENAME COLUMN** and **RENAME TO** change names only.
//!
//! Each ALTER returns a quarter of a second after its write: how long
//! other compute processes may still plan over the definition it replaced
//! before they check it (`catalog_cache.rs`).
//!
//! CAVEATS: a DEFAULT other than NULL on a column-layout table is refused
//! (its packs would need the default filled in by the pack readers and by
//! compaction; add the column without one). A DEFAULT is a constant, not
//! an expression evaluated per row (no `now()`). Several operations in
//! one ALTER apply in order, as one change.

use prost::Message;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::meta::{ColumnDef, Layout, TableDef};

use crate::engine::QueryEngine;
use crate::output::QueryOutput;
use crate::sql::AlterOp;
use crate::{plan_err, Result};

/// Runs `ALTER TABLE name ops`.
pub async fn alter_table(engine: &QueryEngine, name: &str, ops: &[AlterOp]) -> Result<QueryOutput> {
    let old = engine.table(name).await?;
    let new = altered(&old, ops)?;
    engine
        .cluster
        .alter_table(name, new, old.encode_to_vec())
        .await?;
    // Other compute processes' kept catalogs lapse before it returns, so a
    // query sent after it announces the new columns (`catalog_cache.rs`).
    tokio::time::sleep(crate::catalog_cache::DDL_SETTLE).await;
    QueryOutput::word("ALTER TABLE")
}

/// `old` changed by `ops`, in order.
pub fn altered(old: &TableDef, ops: &[AlterOp]) -> Result<TableDef> {
    let mut t = old.clone();
    let mut next = old
        .next_column_id
        .max(old.columns.iter().map(|c| c.id).max().unwrap_or(0) + 1);
    let position = |t: &TableDef, name: &str| t.columns.iter().position(|c| c.name == name);
    for op in ops {
        match op {
            AlterOp::AddColumn {
                column,
                default,
                if_not_exists,
            } => {
                if position(&t, &column.name).is_some() {
                    if *if_not_exists {
                        continue;
                    }
                    return Err(plan_err!(
                        "column {} already exists in table {}",
                        column.name,
                        t.name
                    ));
                }
                let ft = column.field_type;
                let dt = arrow_type(&ft)?;
                let value = match default {
                    Some((e, _)) => {
                        crate::engine::values::encoded_constant(e, &dt, ft.max_len, &column.name)?
                    }
                    None => None,
                };
                if value.is_some() && t.layout == Layout::Column as i32 {
                    return Err(plan_err!(
                        "ADD COLUMN {} ... DEFAULT: a column-layout table takes new columns \
                         without a DEFAULT (NULL) for now",
                        column.name
                    ));
                }
                if !ft.nullable && value.is_none() {
                    return Err(plan_err!(
                        "ADD COLUMN {} NOT NULL needs a DEFAULT: the rows there are have no \
                         value for it",
                        column.name
                    ));
                }
                t.columns.push(ColumnDef {
                    id: next,
                    name: column.name.clone(),
                    field_type: Some(ft),
                    has_default: value.is_some(),
                    default_value: value.unwrap_or_default(),
                    default_sql: default.as_ref().map(|(_, s)| s.clone()).unwrap_or_default(),
                });
                next += 1;
            }
            AlterOp::DropColumn { name, if_exists } => {
                let Some(i) = position(&t, name) else {
                    if *if_exists {
                        continue;
                    }
                    return Err(unknown_column(&t, name));
                };
                if t.columns[i].id == t.handle_column_id {
                    return Err(plan_err!(
                        "column {name} is table {}'s primary key: it cannot be dropped",
                        t.name
                    ));
                }
                if t.columns.len() == 1 {
                    return Err(plan_err!(
                        "column {name} is table {}'s last column: drop the table instead",
                        t.name
                    ));
                }
                let id = t.columns[i].id;
                if let Some(ix) = t.indexes.iter().find(|x| x.column_ids.contains(&id)) {
                    return Err(plan_err!(
                        "column {name} is read by index {}: DROP INDEX {} first",
                        ix.name,
                        ix.name
                    ));
                }
                t.columns.remove(i);
            }
            AlterOp::RenameColumn { old: from, new: to } => {
                let Some(i) = position(&t, from) else {
                    return Err(unknown_column(&t, from));
                };
                if position(&t, to).is_some() {
                    return Err(plan_err!("column {to} already exists in table {}", t.name));
                }
                t.columns[i].name = to.clone();
            }
            AlterOp::RenameTable { new } => t.name = new.clone(),
        }
    }
    t.next_column_id = next;
    Ok(t)
}

fn unknown_column(t: &TableDef, name: &str) -> crate::Error {
    let valid: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    plan_err!(
        "unknown column '{name}' in table {}; valid columns are: {}",
        t.name,
        valid.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{parse, Statement};

    fn table() -> TableDef {
        let Statement::CreateTable(ct) =
            parse("CREATE TABLE t (id BIGINT PRIMARY KEY, a INTEGER, b VARCHAR(5))").unwrap()
        else {
            panic!()
        };
        ct.table_def()
    }

    fn alter(t: &TableDef, sql: &str) -> Result<TableDef> {
        let Statement::AlterTable { ops, .. } = parse(sql).unwrap() else {
            panic!("{sql}")
        };
        altered(t, &ops)
    }

    #[test]
    fn columns_are_added_with_fresh_ids_dropped_and_renamed() {
        let t = table();
        let t = alter(&t, "ALTER TABLE t ADD COLUMN c DECIMAL(10,2) DEFAULT 1.5").unwrap();
        let c = t.columns.last().unwrap();
        assert_eq!((c.id, c.name.as_str(), c.has_default), (4, "c", true));
        assert_eq!(c.default_sql, "1.5");
        let t = alter(&t, "ALTER TABLE t DROP COLUMN c").unwrap();
        let t = alter(&t, "ALTER TABLE t ADD d INTEGER").unwrap();
        // Id 4 was c's: d takes 5.
        assert_eq!(t.columns.last().unwrap().id, 5);
        let t = alter(&t, "ALTER TABLE t RENAME COLUMN a TO aa").unwrap();
        assert_eq!(t.columns[1].name, "aa");
        let t = alter(&t, "ALTER TABLE t RENAME TO u").unwrap();
        assert_eq!(t.name, "u");
    }

    #[test]
    fn changes_that_cannot_be_are_refused_by_name() {
        let t = table();
        let e = |sql: &str| alter(&t, sql).unwrap_err().to_string();
        assert!(e("ALTER TABLE t DROP COLUMN id").contains("primary key"));
        assert!(e("ALTER TABLE t DROP COLUMN zz").contains("unknown column 'zz'"));
        assert!(e("ALTER TABLE t ADD COLUMN a INTEGER").contains("already exists"));
        assert!(e("ALTER TABLE t ADD COLUMN n INTEGER NOT NULL").contains("needs a DEFAULT"));
        assert!(e("ALTER TABLE t ADD COLUMN s VARCHAR(2) DEFAULT 'long'").contains("too long"));
        assert!(e("ALTER TABLE t RENAME COLUMN a TO b").contains("already exists"));
        assert!(alter(&t, "ALTER TABLE t ADD COLUMN IF NOT EXISTS a INTEGER").is_ok());
        assert!(alter(&t, "ALTER TABLE t DROP COLUMN IF EXISTS zz").is_ok());
    }
}
