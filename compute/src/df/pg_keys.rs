//! Primary keys and indexes as PostgreSQL's catalog describes them, for
//! the tools that read them: the rows of `pg_class` (relkind `i`),
//! `pg_index`, `pg_constraint`, `information_schema.table_constraints`
//! and `key_column_usage`, and the functions `pg_get_indexdef` and
//! `pg_get_constraintdef`.
//!
//! SQLAlchemy's `get_pk_constraint()` and `get_indexes()`, psql's `\d t`
//! (its "Indexes:" part), DBeaver's key and index tabs and Metabase's
//! primary-key sync read these; with them empty, a tool shows every
//! table without a key and without indexes. (pgjdbc's `getPrimaryKeys`
//! and `getIndexInfo` also need `information_schema._pg_expandarray`,
//! which is not here.)
//!
//! WHAT IS DESCRIBED
//!
//! * A table's primary key (one BIGINT column: the row's handle) is the
//!   constraint `{table}_pkey` (contype `p`) and its unique index of the
//!   same name, as PostgreSQL names them.
//! * Each secondary index that is complete and read by queries (state
//!   PUBLIC) is an index, unique or not, its columns in order. An index
//!   still being built is not listed. `CREATE UNIQUE INDEX` makes no
//!   constraint in PostgreSQL, and none here.
//! * Every index is a `btree` (Quarry's are ordered key ranges) with each
//!   column's default operator class, ascending, nulls last.
//!
//! OIDS
//!
//! Tables get their OIDs from `datafusion-pg-catalog` (a counter from
//! 16384, kept per process while a table exists), so the rows here read
//! them from the crate's own `pg_class` in the same scan: `indrelid` and
//! `conrelid` join with `pg_class.oid` and `pg_attribute.attrelid`, and
//! a key's column numbers are `pg_attribute.attnum` (the column's place
//! in the table, from 1). Indexes and constraints get theirs from a
//! counter of this module's ([`KeyOids`]), from 2³⁰ up, far from the
//! crate's: an OID is given the first time a key is listed and keeps its
//! meaning for the life of the process. `pg_get_indexdef(oid)` and
//! `pg_get_constraintdef(oid)` answer what the catalog tables last
//! listed under it; an OID nothing listed is NULL, as an unknown one is
//! in PostgreSQL.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    new_empty_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions,
};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::physical_plan::ExecutionPlan;
use quarry_proto::meta::{ColumnDef, IndexState, TableDef, TypeKind};

use super::pg_functions::quote_identifier;
use crate::cluster::Cluster;

/// The first OID given to an index or a constraint (see the module's
/// doc): far above the crate's counter for tables, which starts at 16384.
const FIRST_OID: i32 = 1 << 30;
/// The slot of a table's primary key constraint among its key OIDs (its
/// index is slot 0, its secondary indexes their ids).
const CONSTRAINT_SLOT: i64 = -1;
/// `pg_am`'s btree.
const BTREE: i32 = 403;
/// PostgreSQL's default collation, which text columns of an index carry.
const DEFAULT_COLLATION: i32 = 100;

/// One index as PostgreSQL's catalog shows it.
struct KeyIndex<'a> {
    table: &'a TableDef,
    slot: i64,
    name: String,
    /// Each column's number (from 1, the column's place in the table).
    columns: Vec<(i16, &'a ColumnDef)>,
    unique: bool,
    primary: bool,
}

impl KeyIndex<'_> {
    /// `CREATE [UNIQUE] INDEX name ON public.t USING btree (a, b)`, as
    /// `pg_get_indexdef` writes it.
    /// (`columns`: its columns' names, quoted.)
    fn definition(&self, columns: &[String]) -> String {
        format!(
            "CREATE {}INDEX {} ON public.{} USING btree ({})",
            if self.unique { "UNIQUE " } else { "" },
            quote_identifier(&self.name),
            quote_identifier(&self.table.name),
            columns.join(", ")
        )
    }
}

/// `table`'s primary key index and its complete secondary indexes.
fn indexes_of(table: &TableDef) -> Vec<KeyIndex<'_>> {
    let column = |id: i64| {
        table
            .columns
            .iter()
            .position(|c| c.id == id)
            .map(|i| ((i + 1) as i16, &table.columns[i]))
    };
    let mut out = Vec::new();
    if table.handle_column_id != 0 {
        if let Some(c) = column(table.handle_column_id) {
            out.push(KeyIndex {
                table,
                slot: 0,
                name: format!("{}_pkey", table.name),
                columns: vec![c],
                unique: true,
                primary: true,
            });
        }
    }
    for ix in &table.indexes {
        if ix.state() != IndexState::Public {
            continue;
        }
        let columns: Option<Vec<_>> = ix.column_ids.iter().map(|&id| column(id)).collect();
        if let Some(columns) = columns {
            out.push(KeyIndex {
                table,
                slot: ix.id,
                name: ix.name.clone(),
                columns,
                unique: ix.unique,
                primary: false,
            });
        }
    }
    out
}

/// What an index or constraint OID stands for, as the catalog tables
/// last listed it.
#[derive(Debug, Clone, PartialEq)]
enum Described {
    /// An index: its `CREATE INDEX` and its columns' names.
    Index {
        definition: String,
        columns: Vec<String>,
    },
    /// A primary key: `PRIMARY KEY (id)`.
    Constraint(String),
}

/// A key as listed: the index, its OID, and its primary key
/// constraint's OID (0: not a primary key).
type Listed<'a> = (KeyIndex<'a>, i32, i32);

/// The OIDs of indexes and primary key constraints, and what each stands
/// for.
///
/// An OID is given the first time a key is listed, from a counter per
/// process (as the crate gives tables theirs), and kept for the life of
/// the process under (table id, slot): ids are never reused, so an OID
/// never changes meaning. What each OID stands for is replaced each time
/// a catalog table lists the keys, and `pg_get_indexdef` and
/// `pg_get_constraintdef` answer from it: a statement that asks for one
/// found the OID in a catalog table it read.
#[derive(Default)]
pub struct KeyOids {
    inner: parking_lot::Mutex<KeyOidsInner>,
}

#[derive(Default)]
struct KeyOidsInner {
    next: i32,
    by_key: HashMap<(i64, i64), i32>,
    described: HashMap<i32, Described>,
}

impl KeyOids {
    /// The OID of slot `slot` of table `table_id`.
    fn oid(inner: &mut KeyOidsInner, table_id: i64, slot: i64) -> i32 {
        let next = &mut inner.next;
        *inner.by_key.entry((table_id, slot)).or_insert_with(|| {
            let oid = FIRST_OID.saturating_add(*next);
            *next = next.saturating_add(1);
            oid
        })
    }

    /// Each table's keys with their OIDs (an index's, and a primary
    /// key's constraint's), what they stand for recorded.
    fn assign<'a>(&self, tables: &[&'a TableDef]) -> Vec<Vec<Listed<'a>>> {
        let mut inner = self.inner.lock();
        let mut described = HashMap::new();
        let out = tables
            .iter()
            .map(|t| {
                indexes_of(t)
                    .into_iter()
                    .map(|ix| {
                        let oid = Self::oid(&mut inner, t.id, ix.slot);
                        let columns: Vec<String> = ix
                            .columns
                            .iter()
                            .map(|(_, c)| quote_identifier(&c.name))
                            .collect();
                        let constraint = match ix.primary {
                            true => {
                                let c = Self::oid(&mut inner, t.id, CONSTRAINT_SLOT);
                                let def = format!("PRIMARY KEY ({})", columns.join(", "));
                                described.insert(c, Described::Constraint(def));
                                c
                            }
                            false => 0,
                        };
                        let definition = ix.definition(&columns);
                        described.insert(
                            oid,
                            Described::Index {
                                definition,
                                columns,
                            },
                        );
                        (ix, oid, constraint)
                    })
                    .collect()
            })
            .collect();
        inner.described = described;
        out
    }

    /// What `oid` stands for (None: nothing listed has it).
    fn described(&self, oid: i64) -> Option<Described> {
        let oid = i32::try_from(oid).ok()?;
        self.inner.lock().described.get(&oid).cloned()
    }
}

/// The default btree operator class of a column's type (`pg_opclass`).
fn opclass(c: &ColumnDef) -> i32 {
    match c.field_type.unwrap_or_default().kind() {
        TypeKind::Bigint => 3124,                              // int8_ops
        TypeKind::Double => 3123,                              // float8_ops
        TypeKind::Decimal => 3125,                             // numeric_ops
        TypeKind::Date => 3122,                                // date_ops
        TypeKind::Boolean => 10003,                            // bool_ops
        TypeKind::Varchar | TypeKind::TypeUnspecified => 3126, // text_ops
    }
}

fn collation(c: &ColumnDef) -> i32 {
    match c.field_type.unwrap_or_default().kind() {
        TypeKind::Varchar | TypeKind::TypeUnspecified => DEFAULT_COLLATION,
        _ => 0,
    }
}

/// Which table a [`KeysTable`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysTableKind {
    /// The crate's `pg_class`, with a row per index and `relhasindex`.
    PgClass,
    PgIndex,
    PgConstraint,
    TableConstraints,
    KeyColumnUsage,
}

impl KeysTableKind {
    /// The kind serving table `name` of `pg_catalog` (lower case).
    pub fn of(name: &str) -> Option<Self> {
        Some(match name {
            "pg_class" => Self::PgClass,
            "pg_index" => Self::PgIndex,
            "pg_constraint" => Self::PgConstraint,
            "table_constraints" => Self::TableConstraints,
            "key_column_usage" => Self::KeyColumnUsage,
            _ => return None,
        })
    }

    /// Whether its rows carry the tables' OIDs (read from the crate's
    /// `pg_class`).
    fn needs_oids(self) -> bool {
        !matches!(self, Self::TableConstraints | Self::KeyColumnUsage)
    }
}

/// A catalog table whose rows are made from meta's catalog when a
/// statement scans it.
pub struct KeysTable {
    kind: KeysTableKind,
    schema: SchemaRef,
    cluster: Arc<Cluster>,
    /// The crate's `pg_class`, whose rows give the tables' OIDs.
    pg_class: Arc<dyn TableProvider>,
    oids: Arc<KeyOids>,
}

impl std::fmt::Debug for KeysTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeysTable({:?})", self.kind)
    }
}

impl KeysTable {
    pub fn new(
        kind: KeysTableKind,
        schema: SchemaRef,
        cluster: Arc<Cluster>,
        pg_class: Arc<dyn TableProvider>,
        oids: Arc<KeyOids>,
    ) -> Self {
        KeysTable {
            kind,
            schema,
            cluster,
            pg_class,
            oids,
        }
    }

    /// The crate's `pg_class` rows, and each public table's OID and
    /// namespace OID by name.
    async fn relations(
        &self,
        state: &dyn Session,
    ) -> DfResult<(Vec<RecordBatch>, HashMap<String, (i32, i32)>)> {
        let plan = self.pg_class.scan(state, None, &[], None).await?;
        let batches = datafusion::physical_plan::collect(plan, state.task_ctx()).await?;
        let mut oids = HashMap::new();
        for b in &batches {
            let oid = int32_column(b, "oid")?;
            let namespace = int32_column(b, "relnamespace")?;
            let kind = b
                .column_by_name("relkind")
                .map(|c| arrow::compute::cast(c, &DataType::Utf8))
                .transpose()?
                .ok_or_else(|| internal("pg_class has no relkind"))?;
            let name = arrow::compute::cast(
                b.column_by_name("relname")
                    .ok_or_else(|| internal("pg_class has no relname"))?,
                &DataType::Utf8,
            )?;
            let (kind, name) = (kind.as_string::<i32>(), name.as_string::<i32>());
            for i in 0..b.num_rows() {
                if kind.value(i) == "r" {
                    oids.insert(name.value(i).to_string(), (oid[i], namespace[i]));
                }
            }
        }
        Ok((batches, oids))
    }

    /// The table's rows, as of now.
    async fn rows(&self, state: &dyn Session) -> DfResult<Vec<RecordBatch>> {
        let catalog = self
            .cluster
            .catalog()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let (relations, oids) = match self.kind.needs_oids() {
            true => self.relations(state).await?,
            false => Default::default(),
        };
        let mut tables: Vec<&TableDef> = catalog.tables.iter().collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        let keys = self.oids.assign(&tables);
        // Each table with a key or an index: its OID and its namespace's
        // (zero where this table does not show them), and its keys.
        let indexed: Vec<((i32, i32), Vec<Listed>)> = tables
            .iter()
            .zip(keys)
            .filter_map(|(t, keys)| {
                let oids = match self.kind.needs_oids() {
                    true => *oids.get(&t.name)?,
                    false => (0, 0),
                };
                (!keys.is_empty()).then_some((oids, keys))
            })
            .collect();
        let mut rows: Vec<Row> = Vec::new();
        for ((table_oid, namespace), keys) in &indexed {
            for (ix, oid, constraint) in keys {
                match self.kind {
                    KeysTableKind::PgClass => rows.push(class_row(ix, *oid, *namespace)),
                    KeysTableKind::PgIndex => rows.push(index_row(ix, *oid, *table_oid)),
                    KeysTableKind::PgConstraint if ix.primary => rows.push(constraint_row(
                        ix,
                        *constraint,
                        *oid,
                        *table_oid,
                        *namespace,
                    )),
                    KeysTableKind::TableConstraints if ix.primary => {
                        rows.push(table_constraint_row(ix))
                    }
                    KeysTableKind::KeyColumnUsage if ix.primary => {
                        for (i, (_, c)) in ix.columns.iter().enumerate() {
                            rows.push(key_column_row(ix, c, i + 1))
                        }
                    }
                    _ => {}
                }
            }
        }
        let added = batch(&self.schema, &rows)?;
        if self.kind != KeysTableKind::PgClass {
            return Ok(vec![added]);
        }
        // The tables with an index have relhasindex (psql's \d shows
        // the "Indexes:" part only then).
        let with_index: std::collections::HashSet<i32> =
            indexed.iter().map(|((oid, _), _)| *oid).collect();
        let mut out = Vec::with_capacity(relations.len() + 1);
        for b in relations {
            out.push(conformed(
                &with_relhasindex(&b, &with_index)?,
                &self.schema,
            )?);
        }
        out.push(added);
        Ok(out)
    }
}

fn internal(what: &str) -> DataFusionError {
    DataFusionError::Internal(format!("pg_catalog: {what}"))
}

/// Column `name` of `b` as 32-bit integers (the crate's OID columns).
fn int32_column(b: &RecordBatch, name: &str) -> DfResult<Vec<i32>> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| internal(&format!("pg_class has no {name}")))?;
    let c = arrow::compute::cast(c, &DataType::Int32)?;
    Ok(c.as_primitive::<arrow::datatypes::Int32Type>()
        .iter()
        .map(|v| v.unwrap_or(0))
        .collect())
}

/// `b` (rows of the crate's `pg_class`) with `relhasindex` true for the
/// tables in `with_index`.
fn with_relhasindex(
    b: &RecordBatch,
    with_index: &std::collections::HashSet<i32>,
) -> DfResult<RecordBatch> {
    let Ok(at) = b.schema().index_of("relhasindex") else {
        return Ok(b.clone());
    };
    let oids = int32_column(b, "oid")?;
    let old = b.column(at).as_boolean();
    let new: BooleanArray = (0..b.num_rows())
        .map(|i| Some(with_index.contains(&oids[i]) || (old.is_valid(i) && old.value(i))))
        .collect();
    let mut columns = b.columns().to_vec();
    columns[at] = Arc::new(new);
    Ok(RecordBatch::try_new(b.schema(), columns)?)
}

/// The columns PostgreSQL's `pg_class` has that the crate's lacks (all
/// NULL here), which SQLAlchemy's index query reads.
pub fn pg_class_schema(crate_schema: &SchemaRef) -> SchemaRef {
    use arrow::datatypes::{Field, Schema};
    let mut fields: Vec<Field> = crate_schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for (name, t) in [
        (
            "reloptions",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        ),
        (
            "relacl",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        ),
    ] {
        if crate_schema.index_of(name).is_err() {
            fields.push(Field::new(name, t, true));
        }
    }
    Arc::new(Schema::new(fields))
}

/// `b` with the columns of `schema`: its own where it has them, NULLs
/// where not.
fn conformed(b: &RecordBatch, schema: &SchemaRef) -> DfResult<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| match b.column_by_name(f.name()) {
            Some(c) => c.clone(),
            None => arrow::array::new_null_array(f.data_type(), b.num_rows()),
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// One row, by column name; columns it leaves out are NULL, or zero
/// (false, empty text) where the column is not nullable.
type Row = HashMap<&'static str, ScalarValue>;

fn text(v: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(v.to_string()))
}

fn int(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}

fn flag(v: bool) -> ScalarValue {
    ScalarValue::Boolean(Some(v))
}

fn list(values: Vec<ScalarValue>, item: &DataType) -> ScalarValue {
    ScalarValue::List(ScalarValue::new_list_nullable(&values, item))
}

fn class_row(ix: &KeyIndex, oid: i32, namespace: i32) -> Row {
    HashMap::from([
        ("oid", int(oid as i64)),
        ("relname", text(&ix.name)),
        ("relnamespace", int(namespace as i64)),
        ("relam", int(BTREE as i64)),
        ("relfilenode", int(oid as i64)),
        ("relpages", int(1)),
        ("relpersistence", text("p")),
        ("relkind", text("i")),
        ("relnatts", int(ix.columns.len() as i64)),
        ("relispopulated", flag(true)),
        ("relreplident", text("n")),
    ])
}

fn index_row(ix: &KeyIndex, oid: i32, table_oid: i32) -> Row {
    let each = |f: &dyn Fn(&ColumnDef) -> i64, t: &DataType| {
        let values = ix
            .columns
            .iter()
            .map(|(_, c)| ScalarValue::Int64(Some(f(c))).cast_to(t))
            .collect::<DfResult<Vec<_>>>()
            .expect("small integers cast");
        list(values, t)
    };
    let attnums = ix
        .columns
        .iter()
        .map(|(n, _)| ScalarValue::Int16(Some(*n)))
        .collect();
    let n = ix.columns.len() as i64;
    HashMap::from([
        ("indexrelid", int(oid as i64)),
        ("indrelid", int(table_oid as i64)),
        ("indnatts", int(n)),
        ("indnkeyatts", int(n)),
        ("indisunique", flag(ix.unique)),
        ("indnullsnotdistinct", flag(false)),
        ("indisprimary", flag(ix.primary)),
        ("indisexclusion", flag(false)),
        ("indimmediate", flag(true)),
        ("indisclustered", flag(false)),
        ("indisvalid", flag(true)),
        ("indcheckxmin", flag(false)),
        ("indisready", flag(true)),
        ("indislive", flag(true)),
        ("indisreplident", flag(false)),
        ("indkey", list(attnums, &DataType::Int16)),
        (
            "indcollation",
            each(&|c| collation(c) as i64, &DataType::Int32),
        ),
        ("indclass", each(&|c| opclass(c) as i64, &DataType::Int32)),
        ("indoption", each(&|_| 0, &DataType::Int16)),
    ])
}

fn constraint_row(ix: &KeyIndex, oid: i32, index_oid: i32, table_oid: i32, namespace: i32) -> Row {
    let attnums = ix
        .columns
        .iter()
        .map(|(n, _)| ScalarValue::Int16(Some(*n)))
        .collect();
    HashMap::from([
        ("oid", int(oid as i64)),
        ("conname", text(&ix.name)),
        ("connamespace", int(namespace as i64)),
        ("contype", text("p")),
        ("condeferrable", flag(false)),
        ("condeferred", flag(false)),
        ("convalidated", flag(true)),
        ("conrelid", int(table_oid as i64)),
        ("contypid", int(0)),
        ("conindid", int(index_oid as i64)),
        ("conparentid", int(0)),
        ("confrelid", int(0)),
        ("confupdtype", text(" ")),
        ("confdeltype", text(" ")),
        ("confmatchtype", text(" ")),
        ("conislocal", flag(true)),
        ("coninhcount", int(0)),
        ("connoinherit", flag(true)),
        ("conkey", list(attnums, &DataType::Int16)),
    ])
}

fn table_constraint_row(ix: &KeyIndex) -> Row {
    HashMap::from([
        ("constraint_catalog", text(super::pg_catalog::DATABASE)),
        ("constraint_schema", text("public")),
        ("constraint_name", text(&ix.name)),
        ("table_catalog", text(super::pg_catalog::DATABASE)),
        ("table_schema", text("public")),
        ("table_name", text(&ix.table.name)),
        ("constraint_type", text("PRIMARY KEY")),
        ("is_deferrable", text("NO")),
        ("initially_deferred", text("NO")),
        ("enforced", text("YES")),
    ])
}

fn key_column_row(ix: &KeyIndex, c: &ColumnDef, ordinal: usize) -> Row {
    HashMap::from([
        ("constraint_catalog", text(super::pg_catalog::DATABASE)),
        ("constraint_schema", text("public")),
        ("constraint_name", text(&ix.name)),
        ("table_catalog", text(super::pg_catalog::DATABASE)),
        ("table_schema", text("public")),
        ("table_name", text(&ix.table.name)),
        ("column_name", text(&c.name)),
        ("ordinal_position", int(ordinal as i64)),
    ])
}

/// `rows` as one batch of `schema`.
fn batch(schema: &SchemaRef, rows: &[Row]) -> DfResult<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> DfResult<ArrayRef> {
            if rows.is_empty() {
                return Ok(new_empty_array(f.data_type()));
            }
            let values = rows
                .iter()
                .map(|r| match r.get(f.name().as_str()) {
                    Some(v) => v.cast_to(f.data_type()),
                    None if f.is_nullable() => ScalarValue::try_from(f.data_type()),
                    None => zero(f.data_type()),
                })
                .collect::<DfResult<Vec<_>>>()?;
            ScalarValue::iter_to_array(values)
        })
        .collect::<DfResult<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

/// The value a non-nullable column gets where a row says nothing.
fn zero(t: &DataType) -> DfResult<ScalarValue> {
    match t {
        DataType::Boolean => Ok(flag(false)),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => text("").cast_to(t),
        t => ScalarValue::new_zero(t),
    }
}

#[async_trait]
impl TableProvider for KeysTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let rows = self.rows(state).await?;
        MemTable::try_new(self.schema.clone(), vec![rows])?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// `pg_get_indexdef(index_oid [, column, pretty])` and
/// `pg_get_constraintdef(constraint_oid [, pretty])`, answered from what
/// the catalog tables last listed ([`KeyOids`]): NULL for an OID that is
/// not a key's.
pub struct KeyDefinition {
    name: &'static str,
    signature: Signature,
    oids: Arc<KeyOids>,
}

impl std::fmt::Debug for KeyDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for KeyDefinition {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for KeyDefinition {}

impl std::hash::Hash for KeyDefinition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl KeyDefinition {
    /// Both functions, over the OIDs `oids` gives.
    pub fn udfs(oids: &Arc<KeyOids>) -> [ScalarUDF; 2] {
        ["pg_get_indexdef", "pg_get_constraintdef"].map(|name| {
            ScalarUDF::new_from_impl(KeyDefinition {
                name,
                signature: Signature::one_of(
                    vec![
                        TypeSignature::Any(1),
                        TypeSignature::Any(2),
                        TypeSignature::Any(3),
                    ],
                    Volatility::Stable,
                ),
                oids: oids.clone(),
            })
        })
    }

    /// The definition of the object `oid`; `column` (from 1) names one
    /// column of an index instead (past its last, empty, as PostgreSQL
    /// answers).
    fn definition(&self, oid: i64, column: i64) -> Option<String> {
        match (self.name, self.oids.described(oid)?) {
            (
                "pg_get_indexdef",
                Described::Index {
                    definition,
                    columns,
                },
            ) => match column {
                0 => Some(definition),
                n => Some(
                    usize::try_from(n - 1)
                        .ok()
                        .and_then(|i| columns.get(i).cloned())
                        .unwrap_or_default(),
                ),
            },
            ("pg_get_constraintdef", Described::Constraint(def)) => Some(def),
            _ => None,
        }
    }
}

impl ScalarUDFImpl for KeyDefinition {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let oids = args.args[0].to_array(rows)?;
        let oids = arrow::compute::cast(&oids, &DataType::Int64)?;
        let oids = oids.as_primitive::<arrow::datatypes::Int64Type>();
        // pg_get_indexdef's second argument is a column number; the
        // constraint's is `pretty`.
        let columns = match (self.name, args.args.get(1)) {
            ("pg_get_indexdef", Some(c)) => {
                let c = arrow::compute::cast(&c.to_array(rows)?, &DataType::Int64)?;
                Some(c.as_primitive::<arrow::datatypes::Int64Type>().clone())
            }
            _ => None,
        };
        let out: arrow::array::StringArray = (0..oids.len())
            .map(|i| {
                if oids.is_null(i) || columns.as_ref().is_some_and(|c| c.is_null(i)) {
                    return None;
                }
                let column = columns.as_ref().map_or(0, |c| c.value(i));
                self.definition(oids.value(i), column)
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(out),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_proto::meta::{FieldType, IndexDef};

    fn column(id: i64, name: &str, kind: TypeKind) -> ColumnDef {
        ColumnDef {
            id,
            name: name.into(),
            field_type: Some(FieldType {
                kind: kind as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn table() -> TableDef {
        TableDef {
            id: 7,
            name: "Orders".into(),
            columns: vec![
                column(1, "id", TypeKind::Bigint),
                column(2, "a", TypeKind::Bigint),
                column(3, "b", TypeKind::Varchar),
            ],
            handle_column_id: 1,
            indexes: vec![
                IndexDef {
                    id: 1,
                    name: "o_ab".into(),
                    column_ids: vec![2, 3],
                    unique: false,
                    state: IndexState::Public as i32,
                    public_ts: 1,
                },
                IndexDef {
                    id: 2,
                    name: "o_b".into(),
                    column_ids: vec![3],
                    unique: true,
                    state: IndexState::Public as i32,
                    public_ts: 1,
                },
                IndexDef {
                    id: 3,
                    name: "o_building".into(),
                    column_ids: vec![3],
                    unique: false,
                    state: IndexState::WriteOnly as i32,
                    public_ts: 0,
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn keys_and_complete_indexes_with_definitions_by_oid() {
        let t = table();
        let ix = indexes_of(&t);
        let names: Vec<&str> = ix.iter().map(|i| i.name.as_str()).collect();
        // The index being built is not listed.
        assert_eq!(names, ["Orders_pkey", "o_ab", "o_b"]);
        assert_eq!(
            ix[1].columns.iter().map(|c| c.0).collect::<Vec<_>>(),
            [2, 3]
        );

        let oids = Arc::new(KeyOids::default());
        let keys = oids.assign(&[&t]);
        let (pk_index, pk) = (keys[0][0].1, keys[0][0].2);
        let ab = keys[0][1].1;
        let [indexdef, constraintdef] = KeyDefinition::udfs(&oids);
        let def = |f: &ScalarUDF, oid: i32, column: i64| {
            f.inner()
                .as_ref()
                .downcast_ref::<KeyDefinition>()
                .unwrap()
                .definition(oid as i64, column)
        };
        assert_eq!(
            def(&indexdef, pk_index, 0).unwrap(),
            "CREATE UNIQUE INDEX \"Orders_pkey\" ON public.\"Orders\" USING btree (id)"
        );
        assert_eq!(
            def(&indexdef, ab, 0).unwrap(),
            "CREATE INDEX o_ab ON public.\"Orders\" USING btree (a, b)"
        );
        assert_eq!(def(&indexdef, ab, 2).unwrap(), "b");
        assert_eq!(def(&indexdef, ab, 3).unwrap(), "");
        assert_eq!(def(&constraintdef, pk, 0).unwrap(), "PRIMARY KEY (id)");
        // Each function knows only its kind; other OIDs are NULL.
        assert_eq!(def(&constraintdef, ab, 0), None);
        assert_eq!(def(&indexdef, pk, 0), None);
        assert_eq!(def(&indexdef, 16385, 0), None);
        assert_eq!(def(&indexdef, -1, 0), None);

        // An OID keeps its meaning: listed again, the same OIDs; a new
        // table's keys get new ones.
        let again = oids.assign(&[&t]);
        assert_eq!((again[0][1].1, again[0][0].2), (ab, pk));
        let other = TableDef {
            id: 8,
            name: "other".into(),
            indexes: vec![],
            ..t.clone()
        };
        let both = oids.assign(&[&t, &other]);
        let all: std::collections::HashSet<i32> = both
            .iter()
            .flatten()
            .flat_map(|(_, oid, c)| [*oid, *c])
            .filter(|o| *o != 0)
            .collect();
        assert_eq!(all.len(), 6, "{all:?}");
        assert!(all.iter().all(|o| *o >= FIRST_OID));

        // A table without a primary key or indexes has no keys.
        let heap = TableDef {
            handle_column_id: 0,
            indexes: vec![],
            ..t
        };
        assert!(indexes_of(&heap).is_empty());
    }

    #[test]
    fn rows_fill_every_column_of_their_schema() {
        use arrow::datatypes::{Field, Schema};
        let t = table();
        let ix = indexes_of(&t);
        let schema = Arc::new(Schema::new(vec![
            Field::new("indexrelid", DataType::Int32, false),
            Field::new("indisprimary", DataType::Boolean, false),
            Field::new(
                "indkey",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int16, true))),
                true,
            ),
            Field::new("indpred", DataType::Utf8, true),
            Field::new("indnotmine", DataType::Int16, false),
        ]));
        let rows: Vec<Row> = ix
            .iter()
            .enumerate()
            .map(|(n, i)| index_row(i, FIRST_OID + n as i32, 16385))
            .collect();
        let b = batch(&schema, &rows).unwrap();
        assert_eq!(b.num_rows(), 3);
        let text = arrow::util::pretty::pretty_format_batches(&[b])
            .unwrap()
            .to_string();
        assert!(text.contains("| true         | [1]"), "{text}");
        assert!(text.contains("| false        | [2, 3]"), "{text}");
        assert_eq!(batch(&schema, &[]).unwrap().num_rows(), 0);
    }
}
