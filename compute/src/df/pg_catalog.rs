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
use arrow::datatypes::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemoryCatalogProvider, SchemaProvider};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
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
/// with the constraint tables typed as PostgreSQL types them.
///
/// The crate keeps `pg_constraint.conkey` and `pg_index.indkey` (arrays of
/// column numbers) as text, so `attnum = ANY(conkey)` (Metabase's
/// foreign-key query, DBeaver's constraint list) fails to plan. Quarry
/// does not describe its primary keys and indexes to tools yet, so these
/// tables are served empty, with those columns as `int2[]`. So are
/// `table_constraints` and `key_column_usage`, which `information_schema`
/// (DataFusion's) lacks; and `columns` is served as PostgreSQL's
/// `information_schema.columns` (type names, `udt_name`, …): the
/// PostgreSQL front end reads `information_schema.table_constraints`,
/// `key_column_usage` and `columns` here (`pg/statement.rs`).
pub struct PgCatalogSchema {
    inner: CratePgCatalog,
    cluster: Arc<Cluster>,
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

/// Tables this module serves empty, with their column types.
const EMPTY_TABLES: [&str; 4] = [
    "pg_constraint",
    "pg_index",
    "table_constraints",
    "key_column_usage",
];

/// The type PostgreSQL gives a column of the crate's constraint tables
/// that it keeps as text: arrays of column numbers (`int2[]`,
/// `int2vector`) or of OIDs (`oid[]`, `oidvector`).
fn array_column_type(name: &str) -> Option<DataType> {
    let item = match name {
        "conkey" | "confkey" | "confdelsetcols" | "indkey" | "indoption" => DataType::Int16,
        "conpfeqop" | "conppeqop" | "conffeqop" | "conexclop" | "indcollation" | "indclass" => {
            DataType::Int32
        }
        _ => return None,
    };
    Some(DataType::List(Arc::new(Field::new_list_field(item, true))))
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

    /// The schema of empty table `name` (None: not one of them).
    async fn empty_table_schema(&self, name: &str) -> DfResult<Option<SchemaRef>> {
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
                    .map(|f| match array_column_type(f.name()) {
                        Some(t) => Field::new(f.name(), t, true),
                        None => f.as_ref().clone(),
                    })
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
        if EMPTY_TABLES.contains(&lower.as_str()) {
            if let Some(schema) = self.empty_table_schema(&lower).await? {
                let table = datafusion::datasource::MemTable::try_new(schema, vec![vec![]])?;
                return Ok(Some(Arc::new(table)));
            }
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        lower == "columns" || EMPTY_TABLES.contains(&lower.as_str()) || self.inner.table_exist(name)
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
    ctx.register_udf(version_udf());
    ctx.register_udf(current_setting_udf());
    ctx.register_udf(to_regtype_udf());
    for name in ["session_user", "current_user"] {
        ctx.register_udf(user_udf(name));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(Format::default()));
    for name in [
        "pg_get_serial_sequence",
        "col_description",
        "obj_description",
    ] {
        ctx.register_udf(NullText::udf(name));
    }
    for name in ["pg_collation_is_visible", "pg_type_is_visible"] {
        ctx.register_udf(visible_udf(name));
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
    Ok((ctx.state(), Arc::new(PgCatalogSchema { inner, cluster })))
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

/// Functions that answer NULL whatever they are given, for what Quarry
/// does not keep: `pg_get_serial_sequence(table, column)` (no
/// sequences; SQLAlchemy's `get_columns` asks), `col_description(oid,
/// n)` and `obj_description(oid[, catalog])` (no comments; Metabase and
/// DBeaver ask).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NullText {
    name: &'static str,
    signature: Signature,
}

impl NullText {
    fn udf(name: &'static str) -> ScalarUDF {
        ScalarUDF::new_from_impl(NullText {
            name,
            signature: Signature::variadic_any(Volatility::Stable),
        })
    }
}

impl ScalarUDFImpl for NullText {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Ok(ColumnarValue::Scalar(
            datafusion::common::ScalarValue::Utf8(None),
        ))
    }
}

/// `pg_collation_is_visible(oid)`, `pg_type_is_visible(oid)`: every
/// collation and type pg_catalog lists is in pg_catalog or `public`, both
/// on every search path (NULL for NULL).
fn visible_udf(name: &str) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let visible: arrow::array::BooleanArray = (0..arrays[0].len())
                .map(|i| (!arrays[0].is_null(i)).then_some(true))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(visible)))
        }),
    )
}

/// A variadic function's arguments as arrays of its rows.
fn arrays_of(args: &ScalarFunctionArgs) -> DfResult<Vec<ArrayRef>> {
    args.args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect()
}

/// Arguments read as text, as `format` and `json_build_object` read them.
struct TextArgs<'a> {
    formatters: Vec<arrow::util::display::ArrayFormatter<'a>>,
    /// (Logical: a NULL literal's array says no value is null.)
    nulls: Vec<Option<arrow::buffer::NullBuffer>>,
}

impl<'a> TextArgs<'a> {
    fn new(arrays: &'a [ArrayRef]) -> DfResult<Self> {
        let options = arrow::util::display::FormatOptions::default();
        Ok(TextArgs {
            formatters: arrays
                .iter()
                .map(|a| arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &options))
                .collect::<Result<_, _>>()?,
            nulls: arrays.iter().map(|a| a.logical_nulls()).collect(),
        })
    }

    fn is_null(&self, arg: usize, row: usize) -> bool {
        self.nulls[arg].as_ref().is_some_and(|n| n.is_null(row))
    }

    /// Argument `arg` of `row` as text (as Arrow displays it).
    fn text(&self, arg: usize, row: usize) -> String {
        self.formatters[arg].value(row).to_string()
    }
}

/// `json_build_object(key, value, …)`: a JSON object as PostgreSQL's
/// text (`{"a" : 1, "b" : "x"}`), keys and values in pairs; strings
/// quoted and escaped, numbers and booleans bare, NULL as `null`, other
/// values as their text quoted. (Clients' catalog queries build small
/// objects with it: SQLAlchemy's identity and collation columns.)
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl Default for JsonBuildObject {
    fn default() -> Self {
        JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return Err(DataFusionError::Execution(
                "json_build_object: argument list must have an even number of elements".into(),
            ));
        }
        let rows = args.number_rows;
        let arrays = arrays_of(&args)?;
        let args = TextArgs::new(&arrays)?;
        let mut out = arrow::array::StringBuilder::new();
        for row in 0..rows {
            let mut text = String::from("{");
            for (i, pair) in arrays.chunks(2).enumerate() {
                if args.is_null(2 * i, row) {
                    return Err(DataFusionError::Execution(
                        "json_build_object: null value not allowed for object key".into(),
                    ));
                }
                if i > 0 {
                    text.push_str(", ");
                }
                json_string(&mut text, &args.text(2 * i, row));
                text.push_str(" : ");
                let value = &pair[1];
                let shown = args.text(2 * i + 1, row);
                match value.data_type() {
                    _ if args.is_null(2 * i + 1, row) => text.push_str("null"),
                    DataType::Boolean => text.push_str(&shown),
                    t if t.is_numeric() => text.push_str(&shown),
                    _ => json_string(&mut text, &shown),
                }
            }
            text.push('}');
            out.append_value(text);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `format(template, args…)`: PostgreSQL's, for `%s` (the value's text,
/// NULL as nothing), `%I` (quoted as an identifier where it must be),
/// `%L` (quoted as a literal, NULL as `NULL`) and `%%` (Metabase builds
/// type and table names with it). Positions (`%1$s`) and widths are
/// refused.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = arrays_of(&args)?;
        if arrays.is_empty() {
            return Err(DataFusionError::Plan(
                "format needs a template string".into(),
            ));
        }
        let values = arrays.len() - 1;
        let args = TextArgs::new(&arrays)?;
        let mut out = arrow::array::StringBuilder::new();
        for row in 0..rows {
            if args.is_null(0, row) {
                out.append_null();
                continue;
            }
            let text = args.text(0, row);
            let mut result = String::new();
            let mut next = 0;
            let mut chars = text.chars();
            while let Some(c) = chars.next() {
                if c != '%' {
                    result.push(c);
                    continue;
                }
                let spec = chars.next();
                if spec == Some('%') {
                    result.push('%');
                    continue;
                }
                if next >= values {
                    return Err(DataFusionError::Execution(
                        "format: too few arguments".into(),
                    ));
                }
                let i = next + 1;
                next += 1;
                let value = args.text(i, row);
                match spec {
                    Some('s') if args.is_null(i, row) => {}
                    Some('s') => result.push_str(&value),
                    Some('I') if args.is_null(i, row) => {
                        return Err(DataFusionError::Execution(
                            "format: null values cannot be formatted as an SQL identifier".into(),
                        ))
                    }
                    Some('I') => result.push_str(&quote_identifier(&value)),
                    Some('L') if args.is_null(i, row) => result.push_str("NULL"),
                    Some('L') => {
                        result.push('\'');
                        result.push_str(&value.replace('\'', "''"));
                        result.push('\'');
                    }
                    other => {
                        return Err(DataFusionError::Plan(format!(
                        "unsupported: format specifier %{} (Quarry's format takes %s, %I, %L, %%)",
                        other.map(String::from).unwrap_or_default()
                    )))
                    }
                }
            }
            out.append_value(result);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `name` as PostgreSQL's `quote_ident` writes it: bare when it is a
/// lower-case identifier, else double-quoted.
fn quote_identifier(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match bare {
        true => name.to_string(),
        false => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

/// Appends `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql`'s one value as text, planned with this module's functions.
    async fn one(sql: &str) -> String {
        let ctx = SessionContext::new();
        ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::default()));
        ctx.register_udf(ScalarUDF::new_from_impl(Format::default()));
        ctx.register_udf(NullText::udf("col_description"));
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let column = batches[0].column(0);
        match column.is_null(0) {
            true => "NULL".into(),
            false => column.as_string::<i32>().value(0).to_string(),
        }
    }

    #[tokio::test]
    async fn functions_answer_as_postgresql_does() {
        assert_eq!(
            one("SELECT json_build_object('a', 1, 'b', 'x\"y', 'c', NULL, 'd', true)").await,
            r#"{"a" : 1, "b" : "x\"y", "c" : null, "d" : true}"#
        );
        assert_eq!(
            one("SELECT format('%s|%I|%I|%L|%L|%%', 'a', 'lineitem', 'Mixed Case', 'it''s', NULL)")
                .await,
            r#"a|lineitem|"Mixed Case"|'it''s'|NULL|%"#
        );
        assert_eq!(one("SELECT col_description(1, 2)").await, "NULL");
        let ctx = SessionContext::new();
        ctx.register_udf(ScalarUDF::new_from_impl(Format::default()));
        let bad = ctx
            .sql("SELECT format('%1$s', 'a')")
            .await
            .unwrap()
            .collect()
            .await;
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("unsupported: format specifier %1"));
    }
}
