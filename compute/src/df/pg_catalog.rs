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
//! * Quarry's own: `version()` in the form clients parse
//!   (`PostgreSQL 16.6 (Quarry …)`: SQLAlchemy reads the version from it),
//!   and `current_setting(name)` with the defaults a session starts with
//!   (`pg/session.rs`; what one session SET is not seen here).
//!
//! These are the engine's, so Flight SQL clients see them too.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::MemoryCatalogProvider;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

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
        Ok((catalog == DATABASE).then(|| vec!["public".to_string()]))
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

/// The `pg_catalog` schema every statement's context gets.
pub type PgCatalogSchema = PgCatalogSchemaProvider<QuarryCatalog, EmptyContextProvider>;

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
    ctx.register_udf(version_udf());
    ctx.register_udf(current_setting_udf());
    ctx.register_udf(to_regtype_udf());
    for name in ["session_user", "current_user"] {
        ctx.register_udf(user_udf(name));
    }
    let tables = Arc::new(PgCatalogStaticTables::try_new().map_err(|e| internal(Box::new(e)))?);
    let schema =
        PgCatalogSchemaProvider::try_new(QuarryCatalog { cluster }, tables, EmptyContextProvider)
            .map_err(|e| internal(Box::new(e)))?;
    Ok((ctx.state(), Arc::new(schema)))
}

/// `version()`: PostgreSQL's form, naming Quarry.
fn version_udf() -> ScalarUDF {
    let text = format!(
        "PostgreSQL {} (Quarry {}) on {}-linux, compiled by rustc",
        crate::pg::SERVER_VERSION,
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(Some(text.clone())),
            ))
        }),
    )
}

/// `session_user` / `current_user`: the logged-in caller of the statement
/// (`auth::caller`; evaluated as the statement is planned, in its
/// request's scope); `root`, the superuser, where nobody logs in.
fn user_udf(name: &str) -> ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_args: &[ColumnarValue]| {
            let user = crate::auth::caller().map_or_else(|| "root".to_string(), |c| c.user);
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(Some(user)),
            ))
        }),
    )
}

/// The OID of a built-in type by any of its names (None: not one).
pub fn type_oid(name: &str) -> Option<i32> {
    let name = name
        .trim()
        .trim_start_matches("pg_catalog.")
        .to_ascii_lowercase();
    Some(match name.as_str() {
        "bool" | "boolean" => 16,
        "bytea" => 17,
        "char" | "\"char\"" => 18,
        "name" => 19,
        "int8" | "bigint" => 20,
        "int2" | "smallint" => 21,
        "int4" | "integer" | "int" => 23,
        "text" => 25,
        "oid" => 26,
        "json" => 114,
        "float4" | "real" => 700,
        "float8" | "double precision" => 701,
        "varchar" | "character varying" => 1043,
        "bpchar" | "character" => 1042,
        "date" => 1082,
        "time" | "time without time zone" => 1083,
        "timestamp" | "timestamp without time zone" => 1114,
        "timestamptz" | "timestamp with time zone" => 1184,
        "interval" => 1186,
        "numeric" | "decimal" => 1700,
        "uuid" => 2950,
        "jsonb" => 3802,
        _ => return None,
    })
}

/// `to_regtype(name)`: the type's OID, NULL for a name that is none
/// (psycopg and SQLAlchemy look types up with it as they connect).
fn to_regtype_udf() -> ScalarUDF {
    create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrays[0].as_string::<i32>();
            let oids: arrow::array::Int32Array = (0..names.len())
                .map(|i| match names.is_null(i) {
                    true => None,
                    false => type_oid(names.value(i)),
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(oids)))
        }),
    )
}

/// Every setting a session starts with, by name (lower case, sorted):
/// what `SHOW` answers before a `SET` (`pg/session.rs`, which refuses
/// other names) and what `current_setting()` answers. (`is_superuser` is
/// the caller's in a session.)
pub const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("block_size", "8192"),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "repeatable read"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "on"),
    ("jit", "off"),
    ("lc_collate", "C"),
    ("lc_ctype", "C"),
    ("lock_timeout", "0"),
    ("max_identifier_length", "63"),
    ("max_index_keys", "32"),
    ("row_security", "on"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", crate::pg::SERVER_VERSION),
    ("server_version_num", crate::pg::SERVER_VERSION_NUM),
    ("standard_conforming_strings", "on"),
    ("synchronous_commit", "on"),
    ("timezone", "UTC"),
    ("transaction_isolation", "repeatable read"),
    ("transaction_read_only", "off"),
];

/// A setting's value as a new session has it (None: unknown).
pub fn default_setting(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    DEFAULT_SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
}

/// `current_setting(name [, missing_ok])`.
fn current_setting_udf() -> ScalarUDF {
    let f = |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args[..1])?;
        let names = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let missing_ok = matches!(
            args.get(1),
            Some(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Boolean(Some(true))
            ))
        );
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            match default_setting(names.value(i)) {
                Some(v) => out.push(Some(v)),
                None if missing_ok => out.push(None),
                None => {
                    return Err(DataFusionError::Execution(format!(
                        "unrecognized configuration parameter \"{}\"",
                        names.value(i)
                    )))
                }
            }
        }
        let array: ArrayRef = Arc::new(StringArray::from(out));
        Ok(
            match args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
                true => ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(
                    &array, 0,
                )?),
                false => ColumnarValue::Array(array),
            },
        )
    };
    ScalarUDF::from(
        datafusion::logical_expr::SimpleScalarUDF::new_with_signature(
            "current_setting",
            datafusion::logical_expr::Signature::one_of(
                vec![
                    datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8]),
                    datafusion::logical_expr::TypeSignature::Exact(vec![
                        DataType::Utf8,
                        DataType::Boolean,
                    ]),
                ],
                Volatility::Stable,
            ),
            DataType::Utf8,
            Arc::new(f),
        ),
    )
}

/// Whether a schema provider is the pg_catalog one (for views: a
/// statement over pg_catalog sees every view, as one over
/// information_schema does).
pub fn is_catalog_schema(name: Option<&str>) -> bool {
    matches!(name, Some("pg_catalog") | Some("information_schema"))
}
