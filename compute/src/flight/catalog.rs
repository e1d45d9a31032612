//! Flight SQL's catalog commands: what drivers and BI tools ask before
//! they run anything (JDBC's `DatabaseMetaData`, ADBC's `get_objects` and
//! `get_table_schema`, DBeaver's navigator).
//!
//! Quarry has one catalog, `quarry`, with one schema, `public`: the names
//! DataFusion plans queries under (`df/mod.rs`), so a table a client finds
//! here can be named as `quarry.public.t`, `public.t` or `t`. Tables are
//! the meta region's list at the moment of the call (one meta call), of
//! type `TABLE` (views `VIEW`); a table's primary key is its handle column, if it has
//! one. The answers are built with arrow-flight's builders, which also
//! apply the commands' filters (`%` and `_` patterns, table types) and
//! sort the rows as the protocol asks.
//!
//! Foreign keys (imported, exported, cross reference) do not exist in
//! Quarry; those commands answer UNIMPLEMENTED, as any command not here.

use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::sql::metadata::{
    GetCatalogsBuilder, GetDbSchemasBuilder, GetTablesBuilder, XdbcTypeInfo, XdbcTypeInfoData,
    XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, Nullable, Searchable, XdbcDataType,
};
use tonic::Status;

use crate::df::table::table_schema;
use crate::engine::QueryEngine;
use crate::Error;

/// The one catalog.
pub const CATALOG: &str = "quarry";
/// Its one schema.
pub const SCHEMA: &str = "public";
/// The one table type.
pub const TABLE_TYPE: &str = "TABLE";
/// The table type of a view.
pub const VIEW_TYPE: &str = "VIEW";

fn built<E: std::fmt::Display>(r: Result<RecordBatch, E>) -> Result<RecordBatch, Status> {
    r.map_err(|e| Status::internal(format!("building a catalog answer: {e}")))
}

pub fn catalogs_schema(cmd: &CommandGetCatalogs) -> SchemaRef {
    (*cmd).into_builder().schema()
}

pub fn catalogs(cmd: CommandGetCatalogs) -> Result<RecordBatch, Status> {
    let mut b: GetCatalogsBuilder = cmd.into_builder();
    b.append(CATALOG);
    built(b.build())
}

pub fn schemas_schema(cmd: &CommandGetDbSchemas) -> SchemaRef {
    cmd.clone().into_builder().schema()
}

pub fn schemas(cmd: CommandGetDbSchemas) -> Result<RecordBatch, Status> {
    let mut b: GetDbSchemasBuilder = cmd.into_builder();
    b.append(CATALOG, SCHEMA);
    built(b.build())
}

pub fn tables_schema(cmd: &CommandGetTables) -> SchemaRef {
    cmd.clone().into_builder().schema()
}

pub async fn tables(engine: &QueryEngine, cmd: CommandGetTables) -> Result<RecordBatch, Status> {
    let mut b: GetTablesBuilder = cmd.into_builder();
    let mut defs = engine.cluster.list_tables().await?;
    defs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows: Vec<(String, &str, SchemaRef)> = Vec::new();
    for def in &defs {
        rows.push((def.name.clone(), TABLE_TYPE, table_schema(def)?));
    }
    // A view whose query no longer plans (a table it reads was dropped)
    // is listed without columns.
    for (view, schema) in engine.sql_session().view_schemas().await? {
        let schema = schema.unwrap_or_else(|_| Arc::new(Schema::empty()));
        rows.push((view.name, VIEW_TYPE, schema));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind, schema) in &rows {
        b.append(CATALOG, SCHEMA, name, kind, schema)
            .map_err(|e| Status::internal(format!("encoding {name}'s schema: {e}")))?;
    }
    built(b.build())
}

pub fn table_types_schema(cmd: &CommandGetTableTypes) -> SchemaRef {
    (*cmd).into_builder().schema()
}

pub fn table_types(cmd: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut b = cmd.into_builder();
    b.append(TABLE_TYPE);
    b.append(VIEW_TYPE);
    built(b.build())
}

/// The columns of GetPrimaryKeys's answer, as the protocol defines them
/// (arrow-flight has no builder for it).
pub fn primary_keys_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                Field::new("catalog_name", DataType::Utf8, true),
                Field::new("db_schema_name", DataType::Utf8, true),
                Field::new("table_name", DataType::Utf8, false),
                Field::new("column_name", DataType::Utf8, false),
                Field::new("key_name", DataType::Utf8, true),
                Field::new("key_sequence", DataType::Int32, false),
            ]))
        })
        .clone()
}

/// The table's primary key column, if the table exists in our catalog and
/// schema and has one (none for a catalog or schema that is not ours).
pub async fn primary_keys(
    engine: &QueryEngine,
    cmd: CommandGetPrimaryKeys,
) -> Result<RecordBatch, Status> {
    let ours = cmd.catalog.as_deref().is_none_or(|c| c == CATALOG)
        && cmd.db_schema.as_deref().is_none_or(|s| s == SCHEMA);
    let def = match ours {
        true => engine.cluster.get_table(&cmd.table).await?,
        false => None,
    };
    let key = def.as_ref().and_then(|d| {
        d.columns
            .iter()
            .find(|c| c.id == d.handle_column_id && d.handle_column_id != 0)
            .map(|c| (d.name.clone(), c.name.clone()))
    });
    let (tables, columns): (Vec<String>, Vec<String>) = key.into_iter().unzip();
    let n = tables.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![CATALOG; n])),
        Arc::new(StringArray::from(vec![SCHEMA; n])),
        Arc::new(StringArray::from(tables)),
        Arc::new(StringArray::from(columns)),
        Arc::new(StringArray::from(vec![None::<&str>; n])),
        Arc::new(Int32Array::from(vec![1; n])),
    ];
    RecordBatch::try_new(primary_keys_schema(), columns).map_err(|e| Status::from(Error::from(e)))
}

/// The SQL types Quarry stores, for GetXdbcTypeInfo.
fn type_info() -> &'static XdbcTypeInfoData {
    static INFO: OnceLock<XdbcTypeInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = XdbcTypeInfoDataBuilder::new();
        let plain = |name: &str, data_type: XdbcDataType| XdbcTypeInfo {
            type_name: name.into(),
            data_type,
            sql_data_type: data_type,
            nullable: Nullable::NullabilityNullable,
            searchable: Searchable::Full,
            local_type_name: Some(name.into()),
            ..Default::default()
        };
        let numeric = |name: &str, data_type: XdbcDataType, size: i32| XdbcTypeInfo {
            column_size: Some(size),
            unsigned_attribute: Some(false),
            num_prec_radix: Some(10),
            ..plain(name, data_type)
        };
        b.append(numeric("BIGINT", XdbcDataType::XdbcBigint, 19));
        b.append(XdbcTypeInfo {
            create_params: Some(vec!["precision".into(), "scale".into()]),
            minimum_scale: Some(0),
            maximum_scale: Some(38),
            ..numeric("DECIMAL", XdbcDataType::XdbcDecimal, 38)
        });
        b.append(numeric("DOUBLE", XdbcDataType::XdbcDouble, 15));
        b.append(XdbcTypeInfo {
            literal_prefix: Some("'".into()),
            literal_suffix: Some("'".into()),
            create_params: Some(vec!["length".into()]),
            case_sensitive: true,
            ..plain("VARCHAR", XdbcDataType::XdbcVarchar)
        });
        b.append(XdbcTypeInfo {
            column_size: Some(10),
            literal_prefix: Some("DATE '".into()),
            literal_suffix: Some("'".into()),
            ..plain("DATE", XdbcDataType::XdbcDate)
        });
        b.append(plain("BOOLEAN", XdbcDataType::XdbcBit));
        b.build().expect("a fixed, valid type table")
    })
}

pub fn xdbc_type_info_schema(cmd: &CommandGetXdbcTypeInfo) -> SchemaRef {
    (*cmd).into_builder(type_info()).schema()
}

pub fn xdbc_type_info(cmd: CommandGetXdbcTypeInfo) -> Result<RecordBatch, Status> {
    built(cmd.into_builder(type_info()).build())
}
