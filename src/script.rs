//! A script of SQL statements separated by `;`, as `quarry sql` takes it
//! (`quarry sql --addr URL "BEGIN; UPDATE ...; COMMIT"`): cut at the
//! semicolons that end statements, not those inside quoted strings,
//! quoted identifiers or comments.

/// The statements of `text`, trimmed, without their `;`; empty ones
/// (`;;`, a trailing `;`, only a comment) are dropped.
pub fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // Up to the matching quote; a doubled quote is part of it.
                cur.push(c);
                while let Some(d) = chars.next() {
                    cur.push(d);
                    if d == c {
                        if chars.peek() == Some(&c) {
                            cur.push(chars.next().unwrap_or(c));
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        cur.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                cur.push(' ');
            }
            ';' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::statements;

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
}
