//! `COPY t [(columns)] FROM STDIN`: rows a client streams, in PostgreSQL's
//! text format or CSV, written as INSERTs of up to [`BATCH_ROWS`] rows.
//!
//! Each batch is one INSERT through the engine (`QueryEngine::sql_in`),
//! so it is one transaction on its own (or part of the session's open
//! one), with the INSERT's checks: types, NOT NULL, duplicate keys. A
//! batch that fails ends the COPY with its error naming the line; the
//! batches before it stay written, as `quarry load`'s do (inside
//! `BEGIN` … `COMMIT` nothing is written unless all of it is). Values
//! become literals of their column's type (`DATE '…'`, a checked number,
//! a quoted string), so a value means what the same literal typed into an
//! INSERT would. `COPY … TO STDOUT` is not served yet.

use crate::{plan_err, Error, Result};
use quarry_proto::meta::{TableDef, TypeKind};

/// Rows per INSERT.
pub const BATCH_ROWS: usize = 2_000;

/// A parsed `COPY … FROM STDIN`.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyFrom {
    pub table: String,
    pub columns: Vec<String>,
    pub csv: bool,
    pub header: bool,
    pub delimiter: u8,
    pub null: String,
}

/// The COPY statement `sql` is, if it is one.
pub fn parse(sql: &str) -> Option<Result<CopyFrom>> {
    let text = crate::sql::skip_comments(sql).trim().trim_end_matches(';');
    let lower = text.to_ascii_lowercase();
    let rest = lower.strip_prefix("copy")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    Some(parse_copy(&text[4..], rest))
}

fn parse_copy(text: &str, lower: &str) -> Result<CopyFrom> {
    let Some(from) = lower.find(" from ") else {
        return Err(Error::InvalidInput(
            "unsupported: COPY … TO; only COPY table FROM STDIN is served".into(),
        ));
    };
    let target = text[..from].trim();
    let (table, columns) = match target.split_once('(') {
        Some((t, cols)) => (
            t.trim(),
            cols.trim_end_matches(')')
                .split(',')
                .map(|c| c.trim().trim_matches('"').to_string())
                .filter(|c| !c.is_empty())
                .collect(),
        ),
        None => (target, vec![]),
    };
    if table.is_empty() || table.contains(char::is_whitespace) {
        return Err(plan_err!("syntax error: COPY needs a table name"));
    }
    let after = lower[from + 6..].trim_start();
    let Some(options) = after.strip_prefix("stdin") else {
        return Err(Error::InvalidInput(
            "unsupported: COPY FROM a file or program; send the rows with FROM STDIN (psql: \\copy)"
                .into(),
        ));
    };
    let original = &text[text.len() - options.len()..];
    let mut copy = CopyFrom {
        table: table.trim_matches('"').to_string(),
        columns,
        csv: false,
        header: false,
        delimiter: b'\t',
        null: "\\N".into(),
    };
    // WITH (FORMAT csv, HEADER, DELIMITER ',', NULL '') or the old
    // CSV HEADER DELIMITER ',' form.
    let mut opts = original.trim();
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
                Some("csv") => copy.csv = true,
                Some("text") => copy.csv = false,
                other => {
                    return Err(plan_err!(
                        "unsupported: COPY FORMAT {}",
                        other.unwrap_or("")
                    ))
                }
            },
            "csv" => copy.csv = true,
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
fn text_fields(line: &str, copy: &CopyFrom) -> Vec<Option<String>> {
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
pub fn rows(data: &str, copy: &CopyFrom, first: bool) -> Result<Vec<Vec<Option<String>>>> {
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

/// An INSERT of `rows` into `table` (`copy`'s columns), values as
/// literals of their columns' types.
pub fn insert_sql(
    table: &TableDef,
    copy: &CopyFrom,
    rows: &[Vec<Option<String>>],
    line: usize,
) -> Result<String> {
    let columns: Vec<&quarry_proto::meta::ColumnDef> = match copy.columns.is_empty() {
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
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_statements_and_their_options_parse() {
        let c = parse("COPY t FROM STDIN").unwrap().unwrap();
        assert_eq!(
            (c.table.as_str(), c.csv, c.delimiter, c.null.as_str()),
            ("t", false, b'\t', "\\N")
        );
        let c = parse("copy t (a, b) from stdin with (format csv, header true, null 'NA')")
            .unwrap()
            .unwrap();
        assert_eq!(c.columns, ["a", "b"]);
        assert!(c.csv && c.header);
        assert_eq!((c.delimiter, c.null.as_str()), (b',', "NA"));
        let c = parse("COPY t FROM STDIN CSV HEADER DELIMITER '|'")
            .unwrap()
            .unwrap();
        assert!(c.csv && c.header && c.delimiter == b'|');
        assert!(parse("COPY t TO STDOUT").unwrap().is_err());
        assert!(parse("COPY t FROM '/etc/passwd'").unwrap().is_err());
        assert!(parse("SELECT 1").is_none());
    }

    #[test]
    fn text_and_csv_rows() {
        let text = parse("COPY t FROM STDIN").unwrap().unwrap();
        let r = rows("1\ta\\tb\n2\t\\N\n\\.\n", &text, true).unwrap();
        assert_eq!(
            r,
            vec![
                vec![Some("1".into()), Some("a\tb".into())],
                vec![Some("2".into()), None]
            ]
        );
        let csv = parse("COPY t FROM STDIN (FORMAT csv, HEADER)")
            .unwrap()
            .unwrap();
        let r = rows("id,name\n1,\"x, y\"\n2,\n", &csv, true).unwrap();
        assert_eq!(
            r,
            vec![
                vec![Some("1".into()), Some("x, y".into())],
                vec![Some("2".into()), None]
            ]
        );
    }
}
