//! PostgreSQL's catalog for the tools that read it: `pg_catalog`, the
//! functions clients call as they connect, and `version()`.
//!
//! psql's `\dt` and `\d t`, DBeaver's and Metabase's metadata queries and
//! SQLAlchemy's `inspect()` read `pg_catalog.pg_class`, `pg_attribute`,
//! `pg_namespace`, `pg_type`, … and call `pg_table_is_visible`,
//! `format_type`, `pg_get_userbyid`, `current_schema()`. The
//! `datafusion-pg-catalog` crate emulates them over a DataFusion
//! catalog; this module plugs Quarry's in:
//!
//! * one `pg_catalog` schema provider per process, whose tables are read
//!   from meta's catalog when a statement scans them ([`QuarryCatalog`]),
//!   so a table keeps its OID for the life of the process (psql finds a
//!   table's OID with one query and reads its columns by that OID with
//!   the next). Each statement's context gets it beside `public`
//!   (`df/mod.rs`).
//! * the crate's functions, registered in the base session state once.
//! * Quarry's own functions (`pg_functions.rs`): `version()` in the form clients parse
//!   (`PostgreSQL 16.6 (Quarry …)`: SQLAlchemy reads the version from it),
//!   and `current_setting(name)`: a PostgreSQL session's own settings
//!   (`pg/session.rs` hands them down with each statement), the defaults
//!   a session starts with elsewhere.
//! * primary keys and indexes in `pg_class`, `pg_index`, `pg_constraint`
//!   and `information_schema`, and `pg_get_indexdef`/`pg_get_constraintdef`
//!   (`pg_keys.rs`).
//!
//! These are the engine's, so Flight SQL clients see them too.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemoryCatalogProvider, SchemaProvider};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::SessionState;
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

use super::pg_keys::{KeyDefinition, KeyOids, KeysTable, KeysTableKind};
use crate::cluster::Cluster;

/// The one database, as `current_database()` names it.
pub const DATABASE: &str = "quarry";

/// Quarry's catalog as the pg_catalog tables read it: the one database,
/// its `public` schema, the tables and views meta lists.
#[derive(Clone)]
pub struct QuarryCatalog {
    cluster: Arc<Cluster>,
}

impl std::fmt::Debug for QuarryCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuarryCatalog")
    }
}

fn df_err(e: crate::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl CatalogInfo for QuarryCatalog {
    async fn catalog_names(&self) -> DfResult<Vec<String>> {
        Ok(vec![DATABASE.to_string()])
    }

    async fn schema_names(&self, catalog: &str) -> DfResult<Option<Vec<String>>> {
        // pg_catalog is listed (as OID 11, the crate's fixed one) so that
        // pg_type's and pg_proc's rows join to their namespace, as pgjdbc's
        // getTypeInfo and DBeaver's type look-ups join them; its tables
        // and information_schema's are the engine's, not meta's.
        Ok((catalog == DATABASE).then(|| {
            ["information_schema", "pg_catalog", "public"]
                .map(String::from)
                .to_vec()
        }))
    }

    async fn table_names(&self, catalog: &str, schema: &str) -> DfResult<Option<Vec<String>>> {
        if catalog != DATABASE || schema != "public" {
            return Ok(None);
        }
        let c = self.cluster.catalog().await.map_err(df_err)?;
        let mut names: Vec<String> = c
            .tables
            .into_iter()
            .map(|t| t.name)
            .chain(c.views.into_iter().map(|v| v.name))
            .collect();
        names.sort();
        Ok(Some(names))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> DfResult<Option<SchemaRef>> {
        if catalog != DATABASE || schema != "public" {
            return Ok(None);
        }
        let c = self.cluster.catalog().await.map_err(df_err)?;
        if let Some(def) = c.tables.iter().find(|t| t.name == table) {
            return super::table::table_schema(def).map(Some).map_err(df_err);
        }
        // A view's columns are known once it is planned; listed without.
        Ok(c.views
            .iter()
            .any(|v| v.name == table)
            .then(|| Arc::new(arrow::datatypes::Schema::empty())))
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> DfResult<Option<TableType>> {
        if catalog != DATABASE || schema != "public" {
            return Ok(None);
        }
        let c = self.cluster.catalog().await.map_err(df_err)?;
        if c.tables.iter().any(|t| t.name == table) {
            return Ok(Some(TableType::Base));
        }
        Ok(c.views
            .iter()
            .any(|v| v.name == table)
            .then_some(TableType::View))
    }
}

/// The crate's `pg_catalog` over Quarry's catalog.
type CratePgCatalog = PgCatalogSchemaProvider<QuarryCatalog, EmptyContextProvider>;

/// The `pg_catalog` schema every statement's context gets: the crate's,
/// with Quarry's primary keys and indexes in it.
///
/// `pg_class` gains a row per index, and `pg_index`, `pg_constraint`,
/// `table_constraints` and `key_column_usage` (the last two lacking from
/// DataFusion's `information_schema`) list the keys and indexes
/// (`pg_keys.rs`). The crate keeps `pg_constraint.conkey` and
/// `pg_index.indkey` (arrays of column numbers) as text, so `attnum =
/// ANY(conkey)` (Metabase's foreign-key query, DBeaver's constraint
/// list) would fail to plan: here they are `int2[]`, as PostgreSQL types
/// them. `columns` is served as PostgreSQL's `information_schema.columns`
/// (type names, `udt_name`, …). The PostgreSQL front end reads
/// `information_schema.table_constraints`, `key_column_usage` and
/// `columns` here (`pg/statement.rs`).
pub struct PgCatalogSchema {
    inner: CratePgCatalog,
    cluster: Arc<Cluster>,
    /// The keys' OIDs (`pg_keys.rs`), shared with `pg_get_indexdef`.
    key_oids: Arc<KeyOids>,
}

/// PostgreSQL's `information_schema.columns` columns, in its order; those
/// that are numbers are `true`.
const COLUMNS_VIEW: [(&str, bool); 24] = [
    ("table_catalog", false),
    ("table_schema", false),
    ("table_name", false),
    ("column_name", false),
    ("ordinal_position", true),
    ("column_default", false),
    ("is_nullable", false),
    ("data_type", false),
    ("character_maximum_length", true),
    ("character_octet_length", true),
    ("numeric_precision", true),
    ("numeric_precision_radix", true),
    ("numeric_scale", true),
    ("datetime_precision", true),
    ("interval_type", false),
    ("udt_catalog", false),
    ("udt_schema", false),
    ("udt_name", false),
    ("dtd_identifier", false),
    ("is_self_referencing", false),
    ("is_identity", false),
    ("identity_generation", false),
    ("is_generated", false),
    ("is_updatable", false),
];

/// One row of `information_schema.columns` for column `c` (the
/// `ordinal`th) of `table`, by [`COLUMNS_VIEW`]'s names.
fn column_row(
    table: &str,
    c: &quarry_proto::meta::ColumnDef,
    ordinal: usize,
) -> Vec<Option<String>> {
    use quarry_proto::meta::TypeKind;
    let ft = c.field_type.unwrap_or_default();
    let (data_type, udt) = match ft.kind() {
        TypeKind::Bigint => ("bigint", "int8"),
        TypeKind::Double => ("double precision", "float8"),
        TypeKind::Decimal => ("numeric", "numeric"),
        TypeKind::Date => ("date", "date"),
        TypeKind::Boolean => ("boolean", "bool"),
        TypeKind::Varchar if ft.max_len > 0 => ("character varying", "varchar"),
        TypeKind::Varchar | TypeKind::TypeUnspecified => ("text", "text"),
    };
    let number = |v: u32| Some(v.to_string());
    COLUMNS_VIEW
        .iter()
        .map(|(name, _)| match *name {
            "table_catalog" | "udt_catalog" => Some(DATABASE.to_string()),
            "table_schema" => Some("public".into()),
            "table_name" => Some(table.to_string()),
            "column_name" => Some(c.name.clone()),
            "ordinal_position" | "dtd_identifier" => Some(ordinal.to_string()),
            "is_nullable" => Some(if ft.nullable { "YES" } else { "NO" }.into()),
            "data_type" => Some(data_type.into()),
            "character_maximum_length" if ft.max_len > 0 => number(ft.max_len),
            // (Four bytes a character at most, capped as PostgreSQL's
            // 1 GB field limit.)
            "character_octet_length" if ft.max_len > 0 => {
                number(ft.max_len.saturating_mul(4).min(1_073_741_824))
            }
            "character_octet_length" if udt == "text" => number(1_073_741_824),
            "numeric_precision" => match ft.kind() {
                TypeKind::Bigint => number(64),
                TypeKind::Double => number(53),
                TypeKind::Decimal => number(ft.precision),
                _ => None,
            },
            "numeric_precision_radix" => match ft.kind() {
                TypeKind::Bigint | TypeKind::Double => number(2),
                TypeKind::Decimal => number(10),
                _ => None,
            },
            "numeric_scale" => match ft.kind() {
                TypeKind::Bigint => number(0),
                TypeKind::Decimal => number(ft.scale),
                _ => None,
            },
            "datetime_precision" if ft.kind() == TypeKind::Date => number(0),
            "udt_schema" => Some("pg_catalog".into()),
            "udt_name" => Some(udt.into()),
            "is_self_referencing" | "is_identity" => Some("NO".into()),
            "is_generated" => Some("NEVER".into()),
            "is_updatable" => Some("YES".into()),
            _ => None,
        })
        .collect()
}

impl std::fmt::Debug for PgCatalogSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgCatalogSchema")
    }
}

/// Field metadata naming the PostgreSQL type of a column where its Arrow
/// type alone would say another: `int2vector` and `oidvector`
/// (`pg_index.indkey`, `indclass`, …) are lists in Arrow, so that
/// `unnest` and `= ANY` read them, and go to clients as PostgreSQL sends
/// them (`pg/encode.rs`): their own OIDs, and as text their items
/// separated by spaces (`1 2`), which drivers split (SQLAlchemy's index
/// reflection).
pub const PG_TYPE_KEY: &str = "quarry.pg_type";

/// The column PostgreSQL has where the crate's constraint tables keep
/// text: arrays of column numbers (`int2[]`, `int2vector`) or of OIDs
/// (`oid[]`, `oidvector`), the vectors marked as such for the wire
/// (`pg/encode.rs`).
fn array_column(name: &str) -> Option<Field> {
    let (item, vector) = match name {
        "conkey" | "confkey" | "confdelsetcols" => (DataType::Int16, None),
        "indkey" | "indoption" => (DataType::Int16, Some("int2vector")),
        "conpfeqop" | "conppeqop" | "conffeqop" | "conexclop" => (DataType::Int32, None),
        "indcollation" | "indclass" => (DataType::Int32, Some("oidvector")),
        _ => return None,
    };
    let t = DataType::List(Arc::new(Field::new_list_field(item, true)));
    let field = Field::new(name, t, true);
    Some(match vector {
        Some(v) => field.with_metadata([(PG_TYPE_KEY.to_string(), v.to_string())].into()),
        None => field,
    })
}

impl PgCatalogSchema {
    /// `information_schema.columns` as PostgreSQL's: its types' SQL and
    /// `pg_type` names (`bigint`/`int8`, `numeric`, `character varying`),
    /// `udt_*`, `is_identity`, … (DataFusion's has Arrow's type names and
    /// lacks those; Metabase and Grafana read them). Tables only: a view's
    /// columns are known once it is planned.
    async fn columns_view(&self) -> DfResult<datafusion::datasource::MemTable> {
        use arrow::datatypes::Schema;
        let catalog = self.cluster.catalog().await.map_err(df_err)?;
        let mut tables: Vec<_> = catalog.tables.iter().collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        let rows: Vec<Vec<Option<String>>> = tables
            .iter()
            .flat_map(|t| {
                t.columns
                    .iter()
                    .filter(|c| c.id != quarry_coprocessor::codec::key::ROWID_COLUMN_ID)
                    .enumerate()
                    .map(|(i, c)| column_row(&t.name, c, i + 1))
            })
            .collect();
        let fields: Vec<Field> = COLUMNS_VIEW
            .iter()
            .map(|(n, number)| {
                let t = if *number {
                    DataType::Int32
                } else {
                    DataType::Utf8
                };
                Field::new(*n, t, true)
            })
            .collect();
        let arrays: Vec<ArrayRef> = COLUMNS_VIEW
            .iter()
            .enumerate()
            .map(|(i, (_, number))| -> ArrayRef {
                let values = rows.iter().map(|r| r[i].as_deref());
                match number {
                    true => Arc::new(
                        values
                            .map(|v| v.and_then(|v| v.parse::<i32>().ok()))
                            .collect::<arrow::array::Int32Array>(),
                    ),
                    false => Arc::new(values.collect::<StringArray>()),
                }
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let batch = arrow::array::RecordBatch::try_new(schema.clone(), arrays)?;
        datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]])
    }

    /// The schema of key table `name` (`pg_keys.rs`; None: not one of
    /// them, or pg_class, which is the crate's).
    async fn keys_table_schema(&self, name: &str) -> DfResult<Option<SchemaRef>> {
        use arrow::datatypes::Schema;
        let text = |n: &str| Field::new(n, DataType::Utf8, true);
        let int = |n: &str| Field::new(n, DataType::Int32, true);
        let fields: Vec<Field> = match name {
            "pg_constraint" | "pg_index" => {
                let Some(t) = self.inner.table(name).await? else {
                    return Ok(None);
                };
                t.schema()
                    .fields()
                    .iter()
                    .map(|f| array_column(f.name()).unwrap_or_else(|| f.as_ref().clone()))
                    .collect()
            }
            "table_constraints" => [
                "constraint_catalog",
                "constraint_schema",
                "constraint_name",
                "table_catalog",
                "table_schema",
                "table_name",
                "constraint_type",
                "is_deferrable",
                "initially_deferred",
                "enforced",
                "nulls_distinct",
            ]
            .map(text)
            .to_vec(),
            "key_column_usage" => {
                let mut f: Vec<Field> = [
                    "constraint_catalog",
                    "constraint_schema",
                    "constraint_name",
                    "table_catalog",
                    "table_schema",
                    "table_name",
                    "column_name",
                ]
                .map(text)
                .to_vec();
                f.push(int("ordinal_position"));
                f.push(int("position_in_unique_constraint"));
                f
            }
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(Schema::new(fields))))
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(["columns", "table_constraints", "key_column_usage"].map(String::from));
        names
    }

    async fn table(
        &self,
        name: &str,
    ) -> DfResult<Option<Arc<dyn datafusion::catalog::TableProvider>>> {
        let lower = name.to_ascii_lowercase();
        if lower == "columns" {
            return Ok(Some(Arc::new(self.columns_view().await?)));
        }
        if let Some(kind) = KeysTableKind::of(&lower) {
            let pg_class = self.inner.table("pg_class").await?;
            let schema = match kind {
                KeysTableKind::PgClass => pg_class
                    .as_ref()
                    .map(|t| super::pg_keys::pg_class_schema(&t.schema())),
                _ => self.keys_table_schema(&lower).await?,
            };
            if let (Some(pg_class), Some(schema)) = (pg_class, schema) {
                let table = KeysTable::new(
                    kind,
                    schema,
                    self.cluster.clone(),
                    pg_class,
                    self.key_oids.clone(),
                );
                return Ok(Some(Arc::new(table)));
            }
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        lower == "columns" || KeysTableKind::of(&lower).is_some() || self.inner.table_exist(name)
    }
}

/// Registers the crate's functions (and Quarry's `version()` and
/// `current_setting()`) in `state`; returns the state and the process's
/// `pg_catalog` schema.
pub fn install(
    state: SessionState,
    cluster: Arc<Cluster>,
) -> crate::Result<(SessionState, Arc<PgCatalogSchema>)> {
    let internal = |e: Box<DataFusionError>| crate::Error::Internal(format!("pg_catalog: {e}"));
    // setup_pg_catalog registers into a context's catalog named DATABASE;
    // the functions and the type planner stay in its state.
    let ctx = SessionContext::new_with_state(state);
    ctx.register_catalog(DATABASE, Arc::new(MemoryCatalogProvider::new()));
    datafusion_pg_catalog::setup_pg_catalog(&ctx, DATABASE, EmptyContextProvider)
        .map_err(internal)?;
    super::pg_functions::register(&ctx);
    let key_oids = Arc::new(KeyOids::default());
    for f in KeyDefinition::udfs(&key_oids) {
        ctx.register_udf(f);
    }
    let tables = Arc::new(PgCatalogStaticTables::try_new().map_err(|e| internal(Box::new(e)))?);
    let inner = PgCatalogSchemaProvider::try_new(
        QuarryCatalog {
            cluster: cluster.clone(),
        },
        tables,
        EmptyContextProvider,
    )
    .map_err(|e| internal(Box::new(e)))?;
    Ok((
        ctx.state(),
        Arc::new(PgCatalogSchema {
            inner,
            cluster,
            key_oids,
        }),
    ))
}

/// Whether a schema provider is the pg_catalog one (for views: a
/// statement over pg_catalog sees every view, as one over
/// information_schema does).
pub fn is_catalog_schema(name: Option<&str>) -> bool {
    matches!(name, Some("pg_catalog") | Some("information_schema"))
}
