//! A script of SQL statements separated by `;`, as `quarry sql` takes it
//! (`quarry sql --addr URL "BEGIN; UPDATE ...; COMMIT"`): cut at the
//! semicolons that end statements, not those inside quoted strings,
//! quoted identifiers or comments.

/// The statements of `text`, trimmed, without their `;`; empty ones
/// (`;;`, a trailing `;`, only a comment) are dropped. A last statement
/// without its `;` counts.
pub fn statements(text: &str) -> Vec<String> {
    let scan = scan(text);
    let mut out = scan.done;
    let tail = scan.tail.trim();
    if !tail.is_empty() {
        out.push(tail.to_string());
    }
    out
}

/// What the shell runs as lines arrive: the statements `text` completes
/// (each ended by its `;`), and the raw text after the last `;`, which
/// waits for more lines (None when only blanks and comments are left).
pub fn split(text: &str) -> (Vec<String>, Option<&str>) {
    let scan = scan(text);
    let rest = (!scan.tail.trim().is_empty()).then(|| &text[scan.tail_start..]);
    (scan.done, rest)
}

struct Scan {
    /// Statements ended by `;`, trimmed, empty ones dropped.
    done: Vec<String>,
    /// The text after the last `;`, comments removed.
    tail: String,
    /// Where that text starts in the input.
    tail_start: usize,
}

fn scan(text: &str) -> Scan {
    let mut done = Vec::new();
    let mut cur = String::new();
    let mut tail_start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' | '"' => {
                // Up to the matching quote; a doubled quote is part of it.
                cur.push(c);
                while let Some((_, d)) = chars.next() {
                    cur.push(d);
                    if d == c {
                        if chars.peek().map(|p| p.1) == Some(c) {
                            chars.next();
                            cur.push(c);
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek().map(|p| p.1) == Some('-') => {
                for (_, d) in chars.by_ref() {
                    if d == '\n' {
                        cur.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek().map(|p| p.1) == Some('*') => {
                chars.next();
                let mut prev = ' ';
                for (_, d) in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                cur.push(' ');
            }
            ';' => {
                let stmt = std::mem::take(&mut cur);
                if !stmt.trim().is_empty() {
                    done.push(stmt.trim().to_string());
                }
                tail_start = i + 1;
            }
            _ => cur.push(c),
        }
    }
    Scan {
        done,
        tail: cur,
        tail_start,
    }
}

#[cfg(test)]
mod tests {
    use super::{split, statements};

    #[test]
    fn semicolons_end_statements_except_inside_quotes_and_comments() {
        assert_eq!(
            statements("BEGIN; UPDATE t SET s = 'a;b' WHERE id = 1;COMMIT;"),
            vec!["BEGIN", "UPDATE t SET s = 'a;b' WHERE id = 1", "COMMIT"]
        );
        assert_eq!(
            statements("SELECT 'it''s;' AS \"a;b\" -- not; here\n; /* nor; here */ SELECT 2"),
            vec!["SELECT 'it''s;' AS \"a;b\"", "SELECT 2"]
        );
        assert_eq!(statements("SELECT 1"), vec!["SELECT 1"]);
        assert!(statements(" ; ;-- only a comment").is_empty());
    }

    #[test]
    fn split_keeps_the_unfinished_statement_raw_for_the_next_line() {
        assert_eq!(split("SELECT 1;"), (vec!["SELECT 1".to_string()], None));
        assert_eq!(
            split("SELECT 1; SELECT 'a;\nb"),
            (vec!["SELECT 1".to_string()], Some(" SELECT 'a;\nb"))
        );
        // An open quote or block comment waits for its end.
        assert_eq!(split("SELECT 'it''s").1, Some("SELECT 'it''s"));
        assert_eq!(split("SELECT 1 /* a;").1, Some("SELECT 1 /* a;"));
        assert_eq!(split("SELECT 1 /* a; */;").0, vec!["SELECT 1".to_string()]);
        assert_eq!(split("  -- just a comment").1, None);
        assert_eq!(split("").1, None);
    }
}
