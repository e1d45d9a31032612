//! The statements Quarry runs itself, parsed with `sqlparser`: DDL (tables
//! and views), INSERT,
//! UPDATE, DELETE, SHOW TABLES and DESCRIBE. Queries (SELECT, WITH, EXPLAIN) are planned by
//! DataFusion instead (`df/`).
//!
//! Constant date arithmetic in an INSERT value (`date '1998-12-01' -
//! interval '90' day`) is folded here, while converting, into a date
//! literal.

pub mod backup;
mod convert;
mod guard;
pub mod settings;
pub mod users;

use quarry_proto::compute::LogicalExpr;
use quarry_proto::meta::{FieldType, Layout};

pub(crate) use convert::for_update_target;
pub use convert::{convert_statement, parse, RESTORE_PREFIXES};
pub use guard::{check_size, parse_df, parse_plain, DEFAULT_MAX_STATEMENT_BYTES, MAX_EXPR_DEPTH};

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    CreateTable(CreateTable),
    DropTable {
        name: String,
        if_exists: bool,
    },
    /// `ALTER TABLE name op, ...`, the operations in order.
    AlterTable {
        name: String,
        ops: Vec<AlterOp>,
    },
    CreateView(CreateView),
    DropView {
        name: String,
        if_exists: bool,
    },
    /// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] name ON table (columns)`.
    CreateIndex(CreateIndex),
    /// `DROP INDEX [IF EXISTS] name`.
    DropIndex {
        name: String,
        if_exists: bool,
    },
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    ShowTables,
    Describe(String),
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
    /// `CREATE USER`, `ALTER USER`, `DROP USER`, `SHOW USERS`.
    User(users::UserStatement),
    /// `SET`, `RESET` and `SHOW` of `statement_timeout`.
    Setting(settings::SettingStatement),
    /// `BACKUP … TO` and `RESTORE … FROM`.
    Backup(backup::BackupStatement),
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateIndex {
    pub name: String,
    pub table: String,
    pub columns: Vec<String>,
    pub unique: bool,
    pub if_not_exists: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    pub name: String,
    pub field_type: FieldType,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    pub name: String,
    pub columns: Vec<ColumnSpec>,
    /// Index into `columns` of the single BIGINT primary key, if any.
    pub primary_key: Option<usize>,
    pub if_not_exists: bool,
    pub layout: Layout,
    pub split_handles: Vec<i64>,
    /// `UNIQUE` columns and constraints: each a list of indexes into
    /// `columns`, made a UNIQUE index with the table.
    pub unique: Vec<Vec<usize>>,
}

impl CreateTable {
    /// The table definition to ask meta for (ids are assigned by meta;
    /// column ids are positions + 1).
    pub fn table_def(&self) -> quarry_proto::meta::TableDef {
        quarry_proto::meta::TableDef {
            id: 0,
            name: self.name.clone(),
            columns: self
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| quarry_proto::meta::ColumnDef {
                    id: i as i64 + 1,
                    name: c.name.clone(),
                    field_type: Some(c.field_type),
                    ..Default::default()
                })
                .collect(),
            handle_column_id: self.primary_key.map_or(0, |i| i as i64 + 1),
            layout: self.layout as i32,
            // Made with the table, so complete from the start (no row
            // predates them): PUBLIC, at every snapshot.
            indexes: self
                .unique
                .iter()
                .enumerate()
                .map(|(i, cols)| {
                    let names: Vec<&str> = cols
                        .iter()
                        .map(|c| self.columns[*c].name.as_str())
                        .collect();
                    quarry_proto::meta::IndexDef {
                        id: i as i64 + 1,
                        // PostgreSQL's name for it.
                        name: format!("{}_{}_key", self.name, names.join("_")),
                        column_ids: cols.iter().map(|c| *c as i64 + 1).collect(),
                        unique: true,
                        state: quarry_proto::meta::IndexState::Public as i32,
                        public_ts: 0,
                    }
                })
                .collect(),
            next_index_id: self.unique.len() as i64 + 1,
            ..Default::default()
        }
    }
}

/// One change of an ALTER TABLE.
#[derive(Debug, Clone, PartialEq)]
pub enum AlterOp {
    /// `ADD [COLUMN] [IF NOT EXISTS] name type [NULL | NOT NULL] [DEFAULT e]`.
    AddColumn {
        column: ColumnSpec,
        /// The DEFAULT: a constant expression, and its text.
        default: Option<(LogicalExpr, String)>,
        if_not_exists: bool,
    },
    /// `DROP [COLUMN] [IF EXISTS] name`.
    DropColumn { name: String, if_exists: bool },
    /// `RENAME [COLUMN] old TO new`.
    RenameColumn { old: String, new: String },
    /// `RENAME TO new`.
    RenameTable { new: String },
}

/// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] name [(columns)] AS query`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateView {
    pub name: String,
    /// Names for the query's columns (empty: the query's own).
    pub columns: Vec<String>,
    /// The query, as SQL text.
    pub query: String,
    pub or_replace: bool,
    pub if_not_exists: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Insert {
    pub table: String,
    /// Target columns in order; empty = all, in table order.
    pub columns: Vec<String>,
    /// Constant rows (`VALUES` of constants), or none when `query` gives
    /// the rows.
    pub rows: Vec<Vec<LogicalExpr>>,
    /// `INSERT ... SELECT` (or `VALUES` of expressions that are not
    /// constants): the query whose rows are inserted, as SQL text,
    /// planned by DataFusion (`crate::engine::dml::insert_select`).
    pub query: Option<String>,
}

/// `UPDATE table SET col = expr, ... [WHERE cond]`. The expressions stay
/// SQL text: DataFusion evaluates them over the rows the condition picks
/// (`crate::engine::dml`).
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub table: String,
    /// The table as written after UPDATE, with any alias (`lineitem AS l`).
    pub relation: String,
    /// (column, expression) in the order written.
    pub assignments: Vec<(String, String)>,
    pub selection: Option<String>,
}

/// `DELETE FROM table [WHERE cond]`; also the rows a `SELECT … FOR
/// UPDATE` locks.
#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    pub table: String,
    /// The table as written after FROM, with any alias.
    pub relation: String,
    pub selection: Option<String>,
}

#[cfg(test)]
mod tests;

/// `sql` after its leading whitespace and comments (`-- …` to the end of
/// the line, `/* … */`): where a statement's first word is (the front
/// ends look at it before parsing).
pub fn skip_comments(mut sql: &str) -> &str {
    loop {
        sql = sql.trim_start();
        if let Some(rest) = sql.strip_prefix("--") {
            sql = rest.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(rest) = sql.strip_prefix("/*") {
            sql = rest.split_once("*/").map_or("", |(_, after)| after);
        } else {
            return sql;
        }
    }
}
