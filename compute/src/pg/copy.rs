//! `COPY t [(columns)] FROM STDIN`: rows a client streams, in PostgreSQL's
//! text format, CSV or binary format, written as INSERTs of up to
//! [`BATCH_ROWS`] rows. Binary values are read by their column's kind
//! ([`binary_rows`]) into the text the other formats give, and from there
//! take the same path.
//!
//! Each batch is one INSERT through the engine (`QueryEngine::sql_in`),
//! so it is one transaction on its own (or part of the session's open
//! one), with the INSERT's checks: types, NOT NULL, duplicate keys. A
//! batch that fails ends the COPY with its error naming the line; the
//! batches before it stay written, as `quarry load`'s do (inside
//! `BEGIN` … `COMMIT` nothing is written unless all of it is). Values
//! become literals of their column's type (`DATE '…'`, a checked number,
//! a quoted string), so a value means what the same literal typed into an
//! INSERT would.
//!
//! `COPY t [(columns)] TO STDOUT` and `COPY (query) TO STDOUT`: the
//! query's rows streamed as they come from the engine, one CopyData per
//! row, in text, CSV or binary format. Values are written as the
//! protocol's text or binary encodings write them (`encode.rs`), so a
//! COPY's value and a SELECT's are the same bytes; text format escapes
//! backslashes, the delimiter and control characters, CSV quotes a field
//! that holds the delimiter, a quote, a line break, or the NULL string.

use arrow::array::RecordBatch;

use super::encode;
use crate::{plan_err, Error, Result};
use quarry_proto::meta::{TableDef, TypeKind};

/// Rows per INSERT.
pub const BATCH_ROWS: usize = 2_000;

/// A parsed COPY statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Copy {
    From(CopyFrom),
    To(CopyTo),
}

/// How a COPY's rows are written.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOptions {
    pub csv: bool,
    pub binary: bool,
    pub header: bool,
    pub delimiter: u8,
    pub null: String,
}

/// A parsed `COPY … FROM STDIN`.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyFrom {
    pub table: String,
    pub columns: Vec<String>,
    pub options: CopyOptions,
}

/// A parsed `COPY … TO STDOUT`: the query whose rows it sends.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyTo {
    pub query: String,
    pub options: CopyOptions,
}

/// The COPY statement `sql` is, if it is one.
pub fn parse(sql: &str) -> Option<Result<Copy>> {
    let text = crate::sql::skip_comments(sql).trim().trim_end_matches(';');
    let rest = text.get(..4)?;
    if !rest.eq_ignore_ascii_case("copy") || !text[4..].starts_with(char::is_whitespace) {
        return None;
    }
    Some(parse_copy(text[4..].trim_start()))
}

/// The length of the parenthesised text `s` starts with, quotes skipped.
fn parenthesised(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The word `s` starts with, and the rest.
fn next_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

fn parse_copy(text: &str) -> Result<Copy> {
    // The source: (query), or a table and its columns (also as typed, for
    // the query COPY TO runs, where the engine's name rules apply).
    let (query, table, columns, raw, rest) = if text.starts_with('(') {
        let n = parenthesised(text)
            .ok_or_else(|| plan_err!("syntax error: COPY's query has no closing parenthesis"))?;
        let query = text[1..n - 1].trim().to_string();
        check_query(&query)?;
        (Some(query), String::new(), vec![], None, &text[n..])
    } else {
        let (table, mut rest) = next_word(text);
        let mut columns = vec![];
        let mut list = None;
        if rest.trim_start().starts_with('(') {
            let r = rest.trim_start();
            let n = parenthesised(r).ok_or_else(|| {
                plan_err!("syntax error: COPY's column list has no closing parenthesis")
            })?;
            list = Some(r[1..n - 1].trim().to_string());
            columns = r[1..n - 1]
                .split(',')
                .map(|c| c.trim().trim_matches('"').to_string())
                .filter(|c| !c.is_empty())
                .collect();
            rest = &r[n..];
        }
        if table.is_empty() {
            return Err(plan_err!("syntax error: COPY needs a table name"));
        }
        let raw = Some((table.to_string(), list));
        (
            None,
            table.trim_matches('"').to_string(),
            columns,
            raw,
            rest,
        )
    };
    let (direction, rest) = next_word(rest);
    let (end, options) = next_word(rest);
    let options = parse_options(options)?;
    match direction.to_ascii_lowercase().as_str() {
        "from" if query.is_some() => Err(plan_err!("syntax error: COPY (query) can only go TO STDOUT")),
        "from" if end.eq_ignore_ascii_case("stdin") => {
            Ok(Copy::From(CopyFrom { table, columns, options }))
        }
        "from" => Err(Error::InvalidInput(
            "unsupported: COPY FROM a file or program; send the rows with FROM STDIN (psql: \\copy)"
                .into(),
        )),
        "to" if end.eq_ignore_ascii_case("stdout") => {
            let query = match (query, raw) {
                (Some(query), _) => query,
                (None, Some((table, list))) => {
                    let list = list.filter(|l| !l.is_empty());
                    format!("SELECT {} FROM {table}", list.as_deref().unwrap_or("*"))
                }
                (None, None) => unreachable!("a COPY reads a query or a table"),
            };
            // (A column list is pasted as typed: still only a query.)
            check_query(&query)?;
            Ok(Copy::To(CopyTo { query, options }))
        }
        "to" => Err(Error::InvalidInput(
            "unsupported: COPY TO a file or program; receive the rows with TO STDOUT (psql: \\copy)"
                .into(),
        )),
        _ => Err(plan_err!("syntax error: COPY needs FROM STDIN or TO STDOUT")),
    }
}

/// Refuses a `COPY (statement) TO STDOUT` whose statement is not a query
/// before anything runs it (the engine runs a write as it prepares it).
fn check_query(text: &str) -> Result<()> {
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| plan_err!("syntax error in COPY's query: {e}"))?;
    match statements.as_slice() {
        [Statement::Query(_)] => Ok(()),
        _ => Err(Error::InvalidInput(
            "COPY (…) TO STDOUT takes one query (SELECT, VALUES, WITH …), not another statement"
                .into(),
        )),
    }
}

/// WITH (FORMAT csv, HEADER, DELIMITER ',', NULL '') or the old
/// CSV HEADER DELIMITER ',' form.
fn parse_options(text: &str) -> Result<CopyOptions> {
    let mut copy = CopyOptions {
        csv: false,
        binary: false,
        header: false,
        delimiter: b'\t',
        null: "\\N".into(),
    };
    let mut opts = text.trim();
    if opts.len() >= 4 && opts[..4].eq_ignore_ascii_case("with") {
        opts = opts[4..].trim_start();
    }
    let opts = opts.trim_start_matches('(').trim_end_matches(')');
    let mut words = tokens(opts).into_iter().peekable();
    let mut delimiter_set = false;
    let mut null_set = false;
    while let Some(w) = words.next() {
        match w.to_ascii_lowercase().as_str() {
            "format" => match words.next().map(|v| v.to_ascii_lowercase()).as_deref() {
                Some("csv") => (copy.csv, copy.binary) = (true, false),
                Some("text") => (copy.csv, copy.binary) = (false, false),
                Some("binary") => (copy.csv, copy.binary) = (false, true),
                other => {
                    return Err(plan_err!(
                        "unsupported: COPY FORMAT {}",
                        other.unwrap_or("")
                    ))
                }
            },
            "csv" => copy.csv = true,
            "binary" => copy.binary = true,
            "header" => {
                copy.header = !matches!(
                    words.peek().map(|v| v.to_ascii_lowercase()).as_deref(),
                    Some("false" | "off" | "0")
                );
                if matches!(
                    words.peek().map(|v| v.to_ascii_lowercase()).as_deref(),
                    Some("true" | "false" | "on" | "off" | "1" | "0")
                ) {
                    words.next();
                }
            }
            "delimiter" => {
                let d = words.next().unwrap_or_default();
                if d.len() != 1 {
                    return Err(plan_err!(
                        "COPY delimiter must be a single one-byte character"
                    ));
                }
                copy.delimiter = d.as_bytes()[0];
                delimiter_set = true;
            }
            "null" => {
                copy.null = words.next().unwrap_or_default();
                null_set = true;
            }
            "," => {}
            other => return Err(plan_err!("unsupported: COPY option {other}")),
        }
    }
    let unsafe_delimiter = match copy.csv {
        true => matches!(copy.delimiter, b'"' | b'\n' | b'\r'),
        false => {
            copy.delimiter == b'\\'
                || copy.delimiter == b'.'
                || copy.delimiter.is_ascii_lowercase()
                || copy.delimiter.is_ascii_digit()
                || matches!(copy.delimiter, b'\n' | b'\r')
        }
    };
    if delimiter_set && unsafe_delimiter {
        return Err(plan_err!(
            "COPY delimiter {:?} cannot be used: it would be read as part of a value",
            copy.delimiter as char
        ));
    }
    if copy.binary && (copy.header || delimiter_set || null_set) {
        return Err(plan_err!(
            "COPY in binary format takes no HEADER, DELIMITER or NULL"
        ));
    }
    if copy.csv {
        if !delimiter_set {
            copy.delimiter = b',';
        }
        if !null_set {
            copy.null = String::new();
        }
    }
    Ok(copy)
}

/// Option words, quoted values unquoted, commas apart.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == ',' {
            chars.next();
            continue;
        }
        if c == '\'' {
            chars.next();
            let mut v = String::new();
            while let Some(c) = chars.next() {
                if c == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                        v.push('\'');
                        continue;
                    }
                    break;
                }
                v.push(c);
            }
            // E'\t' style escapes are not read; a tab must be typed.
            out.push(v);
            continue;
        }
        let mut v = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == ',' {
                break;
            }
            v.push(c);
            chars.next();
        }
        out.push(v);
    }
    out
}

/// The fields of one line of PostgreSQL's text format (None: NULL).
fn text_fields(line: &str, copy: &CopyOptions) -> Vec<Option<String>> {
    line.split(copy.delimiter as char)
        .map(|raw| {
            if raw == copy.null {
                return None;
            }
            let mut out = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('t') => out.push('\t'),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('b') => out.push('\u{8}'),
                    Some('f') => out.push('\u{c}'),
                    Some('v') => out.push('\u{b}'),
                    Some(other) => out.push(other),
                    None => {}
                }
            }
            Some(out)
        })
        .collect()
}

/// Rows of `data` (whole lines), parsed as `copy` says.
pub fn rows(data: &str, copy: &CopyOptions, first: bool) -> Result<Vec<Vec<Option<String>>>> {
    if copy.csv {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .delimiter(copy.delimiter)
            .flexible(true)
            .from_reader(data.as_bytes());
        let mut out = Vec::new();
        for (i, record) in reader.records().enumerate() {
            let record = record.map_err(|e| plan_err!("COPY CSV: {e}"))?;
            if first && i == 0 && copy.header {
                continue;
            }
            // An unquoted field equal to the NULL string is NULL; csv
            // drops the quotes, so an empty quoted field counts too.
            out.push(
                record
                    .iter()
                    .map(|f| (f != copy.null).then(|| f.to_string()))
                    .collect(),
            );
        }
        return Ok(out);
    }
    Ok(data
        .lines()
        .enumerate()
        .filter(|(i, l)| !(first && *i == 0 && copy.header) && *l != "\\.")
        .map(|(_, l)| text_fields(l.trim_end_matches('\r'), copy))
        .collect())
}

/// The columns a COPY into `table` fills, in the order its rows give
/// them.
pub fn columns<'a>(
    table: &'a TableDef,
    copy: &CopyFrom,
) -> Result<Vec<&'a quarry_proto::meta::ColumnDef>> {
    Ok(match copy.columns.is_empty() {
        true => table
            .columns
            .iter()
            .filter(|c| c.id != quarry_coprocessor::codec::key::ROWID_COLUMN_ID)
            .collect(),
        false => copy
            .columns
            .iter()
            .map(|n| {
                table
                    .columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(n))
                    .ok_or_else(|| {
                        plan_err!(
                            "COPY: column \"{n}\" of table {} does not exist",
                            table.name
                        )
                    })
            })
            .collect::<Result<_>>()?,
    })
}

/// A binary COPY's header and trailer, as far as they have come.
#[derive(Debug, Default)]
pub struct BinaryState {
    /// The header has been read.
    header: bool,
    /// The trailer (a field count of -1) has been read.
    pub ended: bool,
}

/// The whole tuples at the front of `data`, a binary COPY's stream
/// (PostgreSQL's format: a header, then per row a 16-bit field count and
/// per field a 32-bit length, -1 for NULL, and the value's binary
/// encoding; a count of -1 ends it), each value as the text
/// [`insert_sql`] takes for its column's kind, and how many bytes they
/// took. A tuple cut off at the end of `data` is left for the next call.
/// Integers come as int8, int4 or int2 and floats as float8 or float4
/// (Quarry stores every width as one), DECIMAL as numeric, DATE as date,
/// VARCHAR as text.
pub fn binary_rows(
    data: &[u8],
    kinds: &[TypeKind],
    state: &mut BinaryState,
    line: usize,
) -> Result<(Vec<Vec<Option<String>>>, usize)> {
    let bad = |what: String| Error::InvalidInput(format!("COPY binary data: {what}"));
    let mut at = 0usize;
    if !state.header {
        let fixed = BINARY_SIGNATURE.len();
        if data.len() < fixed {
            return Ok((vec![], 0));
        }
        if data[..11] != BINARY_SIGNATURE[..11] {
            return Err(bad(
                "the signature PGCOPY\\n\\377\\r\\n\\0 is missing".into()
            ));
        }
        let flags = u32::from_be_bytes(data[11..15].try_into().expect("4"));
        if flags & 0x0001_0000 != 0 {
            return Err(bad("rows with OIDs are not supported".into()));
        }
        let extension = u32::from_be_bytes(data[15..19].try_into().expect("4")) as usize;
        if data.len() < fixed + extension {
            return Ok((vec![], 0));
        }
        at = fixed + extension;
        state.header = true;
    }
    let mut rows = vec![];
    while !state.ended {
        let start = at;
        let Some(count) = data.get(at..at + 2) else {
            break;
        };
        let count = i16::from_be_bytes(count.try_into().expect("2"));
        at += 2;
        if count == -1 {
            state.ended = true;
            break;
        }
        if count as usize != kinds.len() {
            return Err(bad(format!(
                "row {} has {count} fields for {} columns",
                line + rows.len(),
                kinds.len()
            )));
        }
        let mut row = Vec::with_capacity(kinds.len());
        let mut whole = true;
        for kind in kinds {
            let Some(len) = data.get(at..at + 4) else {
                whole = false;
                break;
            };
            let len = i32::from_be_bytes(len.try_into().expect("4"));
            at += 4;
            if len == -1 {
                row.push(None);
                continue;
            }
            let Some(value) = usize::try_from(len).ok().and_then(|l| data.get(at..at + l)) else {
                if len < 0 {
                    return Err(bad(format!("a field length of {len}")));
                }
                whole = false;
                break;
            };
            at += value.len();
            let text = binary_field(value, *kind)
                .map_err(|e| bad(format!("row {}: {e}", line + rows.len())))?;
            row.push(Some(text));
        }
        if !whole {
            at = start;
            break;
        }
        rows.push(row);
    }
    Ok((rows, at))
}

/// One binary field of a column of `kind`, as text.
fn binary_field(value: &[u8], kind: TypeKind) -> Result<String> {
    use pgwire::api::Type;
    let t = match (kind, value.len()) {
        (TypeKind::Bigint, 2) => Type::INT2,
        (TypeKind::Bigint, 4) => Type::INT4,
        (TypeKind::Bigint, _) => Type::INT8,
        (TypeKind::Double, 4) => Type::FLOAT4,
        (TypeKind::Double, _) => Type::FLOAT8,
        (TypeKind::Decimal, _) => Type::NUMERIC,
        (TypeKind::Date, _) => Type::DATE,
        _ => {
            return std::str::from_utf8(value)
                .map(str::to_string)
                .map_err(|_| plan_err!("a text value that is not UTF-8"))
        }
    };
    let array = super::decode::binary_value(value, &t)?;
    Ok(arrow::util::display::array_value_to_string(&array, 0)?)
}

/// An INSERT of `rows` into `table` (`copy`'s columns), values as
/// literals of their columns' types.
pub fn insert_sql(
    table: &TableDef,
    copy: &CopyFrom,
    rows: &[Vec<Option<String>>],
    line: usize,
) -> Result<String> {
    let columns = columns(table, copy)?;
    let names: Vec<String> = columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
    let mut sql = format!(
        "INSERT INTO \"{}\" ({}) VALUES ",
        table.name,
        names.join(", ")
    );
    for (r, row) in rows.iter().enumerate() {
        if row.len() != columns.len() {
            return Err(Error::InvalidInput(format!(
                "COPY line {}: {} values for {} columns",
                line + r,
                row.len(),
                columns.len()
            )));
        }
        if r > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for (i, (v, c)) in row.iter().zip(&columns).enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let Some(v) = v else {
                sql.push_str("NULL");
                continue;
            };
            let kind = c
                .field_type
                .as_ref()
                .map(|t| t.kind())
                .unwrap_or(TypeKind::Varchar);
            let bad = || {
                Error::InvalidInput(format!(
                    "COPY line {}, column {}: invalid input syntax for {:?}: \"{v}\"",
                    line + r,
                    c.name,
                    kind
                ))
            };
            match kind {
                TypeKind::Bigint | TypeKind::Double | TypeKind::Decimal => {
                    let t = v.trim();
                    let ok = !t.is_empty()
                        && t.bytes()
                            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
                        && t.parse::<f64>().is_ok_and(f64::is_finite);
                    if !ok {
                        return Err(bad());
                    }
                    sql.push_str(t);
                }
                TypeKind::Date => {
                    sql.push_str(&format!("DATE '{}'", v.trim().replace('\'', "''")));
                }
                _ => sql.push_str(&format!("'{}'", v.replace('\'', "''"))),
            }
        }
        sql.push(')');
    }
    Ok(sql)
}

/// The bytes a binary COPY starts with: signature, flags, extension length.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// What a COPY TO sends before its rows: the binary signature, or CSV's
/// (or text's) header line of column names.
pub fn out_prologue(names: &[&str], copy: &CopyOptions) -> Option<Vec<u8>> {
    if copy.binary {
        return Some(BINARY_SIGNATURE.to_vec());
    }
    if !copy.header {
        return None;
    }
    let mut line = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            line.push(copy.delimiter);
        }
        push_field(&mut line, name.as_bytes(), copy);
    }
    line.push(b'\n');
    Some(line)
}

/// What a COPY TO sends after its rows: binary's end marker.
pub fn out_epilogue(copy: &CopyOptions) -> Option<Vec<u8>> {
    copy.binary.then(|| (-1i16).to_be_bytes().to_vec())
}

/// The rows of `batch` as COPY TO sends them, one message each.
pub fn out_rows(batch: &RecordBatch, copy: &CopyOptions) -> Result<Vec<Vec<u8>>> {
    let (columns, nulls) = encode::plain_columns(batch)?;
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut cell = Vec::new();
    for row in 0..batch.num_rows() {
        let mut line = Vec::new();
        if copy.binary {
            line.extend_from_slice(&(columns.len() as i16).to_be_bytes());
        }
        for (c, col) in columns.iter().enumerate() {
            let null = nulls[c].as_ref().is_some_and(|n| n.is_null(row));
            if copy.binary {
                if null {
                    line.extend_from_slice(&(-1i32).to_be_bytes());
                    continue;
                }
                cell.clear();
                encode::binary_value(col.as_ref(), row, &mut cell)?;
                line.extend_from_slice(&(cell.len() as i32).to_be_bytes());
                line.extend_from_slice(&cell);
                continue;
            }
            if c > 0 {
                line.push(copy.delimiter);
            }
            if null {
                line.extend_from_slice(copy.null.as_bytes());
                continue;
            }
            cell.clear();
            encode::text_value(col.as_ref(), row, &mut cell)?;
            push_field(&mut line, &cell, copy);
        }
        if !copy.binary {
            line.push(b'\n');
        }
        out.push(line);
    }
    Ok(out)
}

/// Appends one non-NULL text value: escaped (text format) or quoted
/// where it must be (CSV), as PostgreSQL's COPY writes it.
fn push_field(line: &mut Vec<u8>, value: &[u8], copy: &CopyOptions) {
    if copy.csv {
        let quote = value == copy.null.as_bytes()
            || value == b"\\."
            || value
                .iter()
                .any(|b| matches!(b, b'"' | b'\n' | b'\r') || *b == copy.delimiter);
        if !quote {
            line.extend_from_slice(value);
            return;
        }
        line.push(b'"');
        for b in value {
            if *b == b'"' {
                line.push(b'"');
            }
            line.push(*b);
        }
        line.push(b'"');
        return;
    }
    for &b in value {
        match b {
            b'\\' => line.extend_from_slice(b"\\\\"),
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            b'\t' => line.extend_from_slice(b"\\t"),
            0x08 => line.extend_from_slice(b"\\b"),
            0x0c => line.extend_from_slice(b"\\f"),
            0x0b => line.extend_from_slice(b"\\v"),
            b if b == copy.delimiter => line.extend_from_slice(&[b'\\', b]),
            b => line.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::ArrayRef;
    use std::sync::Arc;

    fn from(sql: &str) -> CopyFrom {
        match parse(sql).unwrap().unwrap() {
            Copy::From(c) => c,
            other => panic!("not a COPY FROM: {other:?}"),
        }
    }

    fn to(sql: &str) -> CopyTo {
        match parse(sql).unwrap().unwrap() {
            Copy::To(c) => c,
            other => panic!("not a COPY TO: {other:?}"),
        }
    }

    #[test]
    fn copy_statements_and_their_options_parse() {
        let c = from("COPY t FROM STDIN");
        assert_eq!(
            (
                c.table.as_str(),
                c.options.csv,
                c.options.delimiter,
                c.options.null.as_str()
            ),
            ("t", false, b'\t', "\\N")
        );
        let c = from("copy t (a, b) from stdin with (format csv, header true, null 'NA')");
        assert_eq!(c.columns, ["a", "b"]);
        assert!(c.options.csv && c.options.header);
        assert_eq!((c.options.delimiter, c.options.null.as_str()), (b',', "NA"));
        let c = from("COPY t FROM STDIN CSV HEADER DELIMITER '|'");
        assert!(c.options.csv && c.options.header && c.options.delimiter == b'|');
        assert!(parse("COPY t FROM '/etc/passwd'").unwrap().is_err());
        assert!(parse("COPY t TO '/tmp/x'").unwrap().is_err());
        assert!(from("COPY t FROM STDIN (FORMAT binary)").options.binary);
        assert!(parse("COPY (SELECT 1) FROM STDIN").unwrap().is_err());
        assert!(parse("COPY (SELECT 1 TO STDOUT").unwrap().is_err());
        assert!(parse("SELECT 1").is_none());
        assert!(parse("copyright").is_none());

        assert_eq!(to("COPY Orders TO STDOUT").query, "SELECT * FROM Orders");
        let c = to("copy public.t(A, \"b c\") to stdout with (format csv, header)");
        assert_eq!(c.query, "SELECT A, \"b c\" FROM public.t");
        assert!(c.options.csv && c.options.header);
        let c = to("COPY (SELECT a FROM t WHERE b = ')' AND f(x)) TO STDOUT (FORMAT binary);");
        assert_eq!(c.query, "SELECT a FROM t WHERE b = ')' AND f(x)");
        assert!(c.options.binary);
        assert!(parse("COPY t TO STDOUT (FORMAT binary, HEADER)")
            .unwrap()
            .is_err());
        // Only queries: a write inside COPY's parentheses never runs.
        let e = parse("COPY (DELETE FROM t) TO STDOUT")
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("takes one query"), "{e}");
        assert!(
            parse("COPY (WITH x AS (SELECT 1) SELECT * FROM x) TO STDOUT")
                .unwrap()
                .is_ok()
        );
        // A delimiter that would read as part of a value is refused.
        assert!(parse("COPY t FROM STDIN (DELIMITER 'N')").unwrap().is_ok());
        assert!(parse("COPY t FROM STDIN (DELIMITER 'n')").unwrap().is_err());
        assert!(parse("COPY t FROM STDIN (FORMAT csv, DELIMITER '\"')")
            .unwrap()
            .is_err());
    }

    #[test]
    fn text_and_csv_rows() {
        let text = from("COPY t FROM STDIN").options;
        let r = rows("1\ta\\tb\n2\t\\N\n\\.\n", &text, true).unwrap();
        assert_eq!(
            r,
            vec![
                vec![Some("1".into()), Some("a\tb".into())],
                vec![Some("2".into()), None]
            ]
        );
        let csv = from("COPY t FROM STDIN (FORMAT csv, HEADER)").options;
        let r = rows("id,name\n1,\"x, y\"\n2,\n", &csv, true).unwrap();
        assert_eq!(
            r,
            vec![
                vec![Some("1".into()), Some("x, y".into())],
                vec![Some("2".into()), None]
            ]
        );
    }

    fn batch() -> RecordBatch {
        use arrow::array::{Int64Array, StringArray};
        RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from(vec![
                    Some("a\tb\\c"),
                    Some(""),
                    Some("say \"hi\", ok\n"),
                ])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn rows_go_out_as_postgresql_writes_them() {
        let lines = |options: &CopyOptions| -> Vec<String> {
            out_rows(&batch(), options)
                .unwrap()
                .into_iter()
                .map(|l| String::from_utf8(l).unwrap())
                .collect()
        };
        let text = to("COPY t TO STDOUT").options;
        assert_eq!(
            lines(&text),
            ["1\ta\\tb\\\\c\n", "\\N\t\n", "3\tsay \"hi\", ok\\n\n"]
        );
        assert_eq!(out_prologue(&["id", "name"], &text), None);

        let csv = to("COPY t TO STDOUT (FORMAT csv, HEADER)").options;
        assert_eq!(
            lines(&csv),
            ["1,a\tb\\c\n", ",\"\"\n", "3,\"say \"\"hi\"\", ok\n\"\n"]
        );
        assert_eq!(out_prologue(&["id", "name"], &csv).unwrap(), b"id,name\n");

        let binary = to("COPY t TO STDOUT (FORMAT binary)").options;
        let rows = out_rows(&batch(), &binary).unwrap();
        assert_eq!(
            rows[1],
            [&[0, 2][..], &[0xff; 4], &[0, 0, 0, 0]].concat(),
            "two fields: NULL, then an empty string"
        );
        assert_eq!(&rows[0][..6], &[0, 2, 0, 0, 0, 8]);
        assert_eq!(out_prologue(&[], &binary).unwrap().len(), 19);
        assert_eq!(out_epilogue(&binary).unwrap(), [0xff, 0xff]);
    }

    #[test]
    fn binary_rows_are_read_whole_tuples_at_a_time() {
        // One row (BIGINT as int4, DOUBLE as float8, DECIMAL 12.50 as
        // numeric, DATE 2000-01-02, VARCHAR), one of NULLs, the trailer.
        let mut data = BINARY_SIGNATURE.to_vec();
        let field = |d: &mut Vec<u8>, v: &[u8]| {
            d.extend((v.len() as i32).to_be_bytes());
            d.extend(v);
        };
        data.extend(5i16.to_be_bytes());
        field(&mut data, &7i32.to_be_bytes());
        field(&mut data, &1.5f64.to_be_bytes());
        // numeric: ndigits 2, weight 0, sign +, dscale 2; digits 12, 5000.
        let numeric: Vec<u8> = [2i16, 0, 0, 2, 12, 5000]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        field(&mut data, &numeric);
        field(&mut data, &1i32.to_be_bytes());
        field(&mut data, "o'k".as_bytes());
        data.extend(5i16.to_be_bytes());
        for _ in 0..5 {
            data.extend((-1i32).to_be_bytes());
        }
        data.extend((-1i16).to_be_bytes());
        let kinds = [
            TypeKind::Bigint,
            TypeKind::Double,
            TypeKind::Decimal,
            TypeKind::Date,
            TypeKind::Varchar,
        ];
        let s = |v: &str| Some(v.to_string());
        let want = vec![
            vec![s("7"), s("1.5"), s("12.50"), s("2000-01-02"), s("o'k")],
            vec![None; 5],
        ];
        // Fed in pieces: a cut tuple waits for the rest.
        let mut state = BinaryState::default();
        let (rows, used) = binary_rows(&data[..40], &kinds, &mut state, 1).unwrap();
        assert_eq!((rows.len(), used), (0, 19));
        let (rows, used2) = binary_rows(&data[used..], &kinds, &mut state, 1).unwrap();
        assert_eq!(rows, want);
        assert_eq!(used + used2, data.len());
        assert!(state.ended);
        // A row with another field count, and a bad signature, are refused.
        let mut short = BINARY_SIGNATURE.to_vec();
        short.extend(2i16.to_be_bytes());
        let e = binary_rows(&short, &kinds, &mut BinaryState::default(), 1).unwrap_err();
        assert!(
            e.to_string().contains("row 1 has 2 fields for 5 columns"),
            "{e}"
        );
        let e = binary_rows(
            b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0",
            &kinds,
            &mut BinaryState::default(),
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("signature"), "{e}");
    }
}
