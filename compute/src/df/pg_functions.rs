//! The PostgreSQL functions clients call as they connect and browse,
//! beyond `datafusion-pg-catalog`'s: `version()` in the form clients
//! parse (`PostgreSQL 16.6 (Quarry …)`: SQLAlchemy reads the version from
//! it), `current_setting(name)` (a PostgreSQL session's own settings,
//! the defaults a session starts with elsewhere),
//! `to_regtype`, `current_user`/`session_user`, `format`,
//! `json_build_object`, the `*_is_visible` checks, and functions that
//! answer NULL for what Quarry does not keep (sequences, comments).
//! Registered in every context (`pg_catalog::install`), so Flight SQL
//! clients have them too.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// Registers this module's functions in `ctx`.
pub fn register(ctx: &SessionContext) {
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
}

/// The PostgreSQL version Quarry speaks as (`version()`, `server_version`
/// here and in the wire protocol's startup): clients (SQLAlchemy, JDBC,
/// Grafana) read it to choose their dialect's features.
pub const SERVER_VERSION: &str = "16.6";
pub const SERVER_VERSION_NUM: &str = "160006";

/// `version()`: PostgreSQL's form, naming Quarry.
fn version_udf() -> ScalarUDF {
    let text = format!(
        "PostgreSQL {} (Quarry {}) on {}-linux, compiled by rustc",
        SERVER_VERSION,
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
/// (`caller::caller`; evaluated as the statement is planned, in its
/// request's scope); `root`, the superuser, where nobody logs in.
fn user_udf(name: &str) -> ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_args: &[ColumnarValue]| {
            let user = crate::caller::caller().map_or_else(|| "root".to_string(), |c| c.user);
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
pub(super) fn quote_identifier(name: &str) -> String {
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
    // Quarry's: when a query spreads over every compute process (`mpp/`);
    // unset, compute's `mpp` decides (SHOW mpp answers that).
    ("mpp", "off"),
    ("row_security", "on"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", SERVER_VERSION),
    ("server_version_num", SERVER_VERSION_NUM),
    ("standard_conforming_strings", "on"),
    ("synchronous_commit", "on"),
    ("timezone", "UTC"),
    ("transaction_isolation", "repeatable read"),
    ("transaction_read_only", "off"),
];

/// The zone a session's `TimeZone` names, for DataFusion's
/// `execution.time_zone` (TIMESTAMPTZ literals and casts, `now()`, the
/// text of TIMESTAMPTZ results): None for UTC, which the engine's
/// default already is; an error for a name no zone database knows, and
/// for a numeric offset, which PostgreSQL reads with POSIX's sign (`+5`
/// is five hours *west*) where Arrow reads ISO's: a zone name
/// (`Etc/GMT-5`, `Asia/Kolkata`) says it without doubt.
pub fn session_zone(value: &str) -> Result<Option<String>, String> {
    let v = value.trim();
    const UTC: [&str; 14] = [
        "utc",
        "etc/utc",
        "gmt",
        "etc/gmt",
        "uct",
        "etc/uct",
        "universal",
        "etc/universal",
        "zulu",
        "etc/zulu",
        "gmt0",
        "etc/gmt0",
        "greenwich",
        "etc/greenwich",
    ];
    if UTC.contains(&v.to_ascii_lowercase().as_str()) || v.eq_ignore_ascii_case("z") {
        return Ok(None);
    }
    if v.starts_with(['+', '-']) || v.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(
            "numeric offsets are not taken: name the zone, as 'Etc/GMT-5' or \
                    'Asia/Kolkata'"
                .into(),
        );
    }
    v.parse::<arrow::array::timezone::Tz>()
        .map(|_| Some(v.to_string()))
        .map_err(|_| "no time zone has that name".into())
}

/// A setting's value as a new session has it (None: unknown).
pub fn default_setting(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    DEFAULT_SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
}

/// `current_setting(name [, missing_ok])` of a session whose settings
/// are `settings` (by lower-case name; a name it lacks has its default).
/// A statement's context gets the one of its session where the front end
/// keeps settings (`df/mod.rs`), the defaults' otherwise.
pub fn current_setting_in(settings: Arc<std::collections::BTreeMap<String, String>>) -> ScalarUDF {
    current_setting_over(move |name| {
        let name = name.to_ascii_lowercase();
        settings
            .get(&name)
            .cloned()
            .or_else(|| default_setting(&name).map(String::from))
    })
}

/// `current_setting()` with the defaults a session starts with.
fn current_setting_udf() -> ScalarUDF {
    current_setting_over(|name| default_setting(name).map(String::from))
}

/// `current_setting(name [, missing_ok])` answered by `lookup`.
fn current_setting_over(
    lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
) -> ScalarUDF {
    let f = move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
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
            match lookup(names.value(i)) {
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
