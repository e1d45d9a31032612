//! The backup's manifest, `backup.json`: what a restore needs to check
//! and rebuild every table, in JSON a person can read.
//!
//! Exact integers wider than JSON's doubles (the checksum's sums, the
//! snapshot's timestamp) are written as strings.

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use prost::Message;
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::meta::{TableDef, ViewDef};
use serde::{Deserialize, Serialize};

use crate::load_file::{Checksum, ColumnSum};

/// The manifest's name in a backup's directory.
pub const MANIFEST: &str = "backup.json";

/// The format this Quarry writes; a restore refuses one it does not read.
const FORMAT: u32 = 2;

/// The oldest format this Quarry restores. Format 2 keeps DECIMAL(p ≤ 18)
/// columns as Decimal64 in the files' Arrow schema (format 1: Decimal128;
/// the Parquet columns are the same), which a release that reads only
/// format 1 would refuse column by column: the format tells it first.
const OLDEST_FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The Quarry version that wrote it.
    pub quarry: String,
    /// The snapshot every table was read at.
    #[serde(with = "as_string")]
    pub read_ts: u64,
    /// When the backup started, in seconds since the Unix epoch.
    pub started_unix_s: u64,
    pub tables: Vec<TableEntry>,
    /// The views as of the snapshot, in a backup of every table (one of
    /// named tables keeps none). Absent in backups from before views were
    /// kept, which restore as having none.
    #[serde(default)]
    pub views: Vec<ViewEntry>,
}

impl From<ViewDef> for ViewEntry {
    fn from(v: ViewDef) -> Self {
        ViewEntry {
            name: v.name,
            sql: v.sql,
            columns: v.columns,
        }
    }
}

impl From<&ViewEntry> for ViewDef {
    fn from(v: &ViewEntry) -> Self {
        ViewDef {
            name: v.name.clone(),
            sql: v.sql.clone(),
            columns: v.columns.clone(),
        }
    }
}

/// A view's definition, as CREATE VIEW stored it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ViewEntry {
    pub name: String,
    /// The defining query, as written after AS.
    pub sql: String,
    /// The names given in CREATE VIEW name (a, b, ...); empty: the query's.
    #[serde(default)]
    pub columns: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableEntry {
    pub name: String,
    /// The table's definition (`quarry_proto::meta::TableDef`, protobuf in
    /// base64): columns with their ids and types, the primary key, the
    /// layout, the indexes.
    pub table_def: String,
    /// The columns in words, for people (`l_orderkey BIGINT NOT NULL`).
    pub columns: Vec<String>,
    /// Whether the files carry the rows' handles as their first column
    /// (a table without a primary key; named `_rowid`, with more
    /// underscores when a column has that name).
    pub rowid: bool,
    pub rows: u64,
    pub checksum: ChecksumEntry,
    /// In handle order: each file's handles are above the previous one's.
    pub files: Vec<FileEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the backup's directory.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub crc32: u32,
    /// The first and last handle in the file (0, 0 when it is empty).
    pub min_handle: i64,
    pub max_handle: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChecksumEntry {
    #[serde(with = "as_string")]
    pub rows: i128,
    pub columns: Vec<ColumnEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ColumnEntry {
    #[serde(with = "as_string")]
    pub count: i128,
    #[serde(with = "as_string")]
    pub sum: i128,
    /// DOUBLE columns' sum (else 0).
    pub float: f64,
}

impl From<&Checksum> for ChecksumEntry {
    fn from(c: &Checksum) -> Self {
        ChecksumEntry {
            rows: c.rows,
            columns: c
                .columns
                .iter()
                .map(|s| ColumnEntry {
                    count: s.count,
                    sum: s.sum,
                    float: s.float,
                })
                .collect(),
        }
    }
}

impl From<&ChecksumEntry> for Checksum {
    fn from(c: &ChecksumEntry) -> Self {
        Checksum {
            rows: c.rows,
            columns: c
                .columns
                .iter()
                .map(|s| ColumnSum {
                    count: s.count,
                    sum: s.sum,
                    float: s.float,
                })
                .collect(),
        }
    }
}

impl Manifest {
    pub fn new(read_ts: u64, started_unix_s: u64) -> Manifest {
        Manifest {
            format: FORMAT,
            quarry: env!("CARGO_PKG_VERSION").to_string(),
            read_ts,
            started_unix_s,
            tables: vec![],
            views: vec![],
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec_pretty(self)?)
    }

    /// Reads a manifest, refusing another format's.
    pub fn from_json(bytes: &[u8], shown: &str) -> Result<Manifest> {
        let m: Manifest = serde_json::from_slice(bytes)
            .with_context(|| format!("{shown}/{MANIFEST} is not a backup manifest"))?;
        if !(OLDEST_FORMAT..=FORMAT).contains(&m.format) {
            bail!(
                "{shown}/{MANIFEST} has format {}; this Quarry reads formats \
                 {OLDEST_FORMAT} to {FORMAT}",
                m.format
            );
        }
        Ok(m)
    }

    /// The entries of `names` (all of them when empty), or an error naming
    /// the tables the backup has.
    pub fn chosen(&self, names: &[String], shown: &str) -> Result<Vec<&TableEntry>> {
        if names.is_empty() {
            return Ok(self.tables.iter().collect());
        }
        names
            .iter()
            .map(|n| {
                self.tables.iter().find(|t| &t.name == n).ok_or_else(|| {
                    let have: Vec<&str> = self.tables.iter().map(|t| t.name.as_str()).collect();
                    anyhow!(
                        "the backup in {shown} has no table {n}; it has {}",
                        have.join(", ")
                    )
                })
            })
            .collect()
    }
}

impl TableEntry {
    pub fn new(table: &TableDef) -> Result<TableEntry> {
        let columns = table
            .columns
            .iter()
            .map(|c| {
                let ft = c.field_type.unwrap_or_default();
                let t = sql_name(&arrow_type(&ft)?);
                let key = if c.id == table.handle_column_id {
                    " PRIMARY KEY"
                } else if !ft.nullable {
                    " NOT NULL"
                } else {
                    ""
                };
                Ok(format!("{} {t}{key}", c.name))
            })
            .collect::<Result<_>>()?;
        Ok(TableEntry {
            name: table.name.clone(),
            table_def: base64::engine::general_purpose::STANDARD.encode(table.encode_to_vec()),
            columns,
            rowid: table.handle_column_id == 0,
            rows: 0,
            checksum: ChecksumEntry::from(&Checksum::new(table.columns.len())),
            files: vec![],
        })
    }

    pub fn table_def(&self) -> Result<TableDef> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.table_def)
            .with_context(|| format!("table {}'s definition in the manifest", self.name))?;
        TableDef::decode(&bytes[..])
            .with_context(|| format!("table {}'s definition in the manifest", self.name))
    }
}

/// Integers as JSON strings (JSON numbers are doubles to most readers).
mod as_string {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<T: ToString, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_proto::meta::{ColumnDef, FieldType, TypeKind};

    #[test]
    fn a_manifest_reads_back_as_written_with_exact_sums() {
        let table = TableDef {
            id: 7,
            name: "t".into(),
            columns: vec![ColumnDef {
                id: 1,
                name: "id".into(),
                field_type: Some(FieldType {
                    kind: TypeKind::Bigint as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            handle_column_id: 1,
            ..Default::default()
        };
        let mut m = Manifest::new(u64::MAX - 1, 1);
        let mut e = TableEntry::new(&table).unwrap();
        e.checksum.columns[0].sum = i128::MAX - 3;
        m.tables.push(e);
        let back = Manifest::from_json(&m.to_json().unwrap(), "/b").unwrap();
        assert_eq!(back.read_ts, u64::MAX - 1);
        assert_eq!(back.tables[0].checksum.columns[0].sum, i128::MAX - 3);
        assert_eq!(back.tables[0].table_def().unwrap(), table);
        assert_eq!(back.tables[0].columns, vec!["id BIGINT PRIMARY KEY"]);
        let err = back.chosen(&["u".into()], "/b").unwrap_err().to_string();
        assert_eq!(err, "the backup in /b has no table u; it has t");
        let mut other = m.clone();
        other.format = 9;
        let err = Manifest::from_json(&other.to_json().unwrap(), "/b")
            .unwrap_err()
            .to_string();
        assert!(err.contains("has format 9"), "{err}");
        // Backups of format 1 (decimals as Decimal128) still restore.
        other.format = 1;
        assert!(Manifest::from_json(&other.to_json().unwrap(), "/b").is_ok());
    }
}
