//! Session settings: `SET`, `RESET` and `SHOW` of `statement_timeout`.
//!
//! ```sql
//! SET [SESSION] statement_timeout {= | TO} {ms | 'N[ms|s|min|h]' | DEFAULT}
//! RESET statement_timeout
//! SHOW statement_timeout
//! ```
//!
//! As in PostgreSQL a bare number is milliseconds, a quoted value may
//! carry a unit, and 0 or DEFAULT means the server's default (compute's
//! `query-timeout-ms`; Quarry always bounds a statement). Other settings
//! are left to the other parsers, which refuse them.

use std::time::Duration;

use crate::{plan_err, Result};

/// The longest statement timeout a session may ask for.
pub const MAX_STATEMENT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingStatement {
    /// `None`: back to the server's default.
    SetStatementTimeout(Option<Duration>),
    ShowStatementTimeout,
    /// `SET mpp = 'off' | 'auto' | 'force'` (`None`: compute's default).
    SetMpp(Option<crate::config::MppMode>),
    ShowMpp,
}

/// The setting statement `text` is, if it names `statement_timeout` (an
/// error when its value is not one); None for any other statement.
pub fn parse(text: &str) -> Option<Result<SettingStatement>> {
    let text = text.trim().trim_end_matches(';').trim();
    if let Some(mpp) = parse_mpp(text) {
        return Some(mpp);
    }
    let mut words = text.split_whitespace();
    let first = words.next()?.to_ascii_lowercase();
    let rest: Vec<&str> = words.collect();
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    match first.as_str() {
        "show" if rest.len() == 1 && is(rest[0], "statement_timeout") => {
            Some(Ok(SettingStatement::ShowStatementTimeout))
        }
        "reset" if rest.len() == 1 && is(rest[0], "statement_timeout") => {
            Some(Ok(SettingStatement::SetStatementTimeout(None)))
        }
        "set" => {
            // SET [SESSION] statement_timeout = v | SET statement_timeout TO v
            let joined = rest.join(" ");
            let body = match rest.first() {
                Some(w) if is(w, "session") => joined[w.len()..].trim_start(),
                _ => joined.as_str(),
            };
            let name_len = "statement_timeout".len();
            if !body
                .get(..name_len)
                .is_some_and(|n| is(n, "statement_timeout"))
            {
                return None;
            }
            let after = &body[name_len..];
            if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                return None;
            }
            let after = after.trim_start();
            let value = if let Some(v) = after.strip_prefix('=') {
                v
            } else if after.get(..2).is_some_and(|w| is(w, "to"))
                && after[2..].starts_with(|c: char| c.is_whitespace() || c == '\'')
            {
                &after[2..]
            } else {
                return Some(Err(plan_err!(
                    "SET statement_timeout: expected = or TO after the name"
                )));
            };
            Some(timeout_value(value.trim()).map(SettingStatement::SetStatementTimeout))
        }
        _ => None,
    }
}

/// `SET [SESSION] mpp {= | TO} v`, `RESET mpp`, `SHOW mpp`; None for
/// any other statement.
fn parse_mpp(text: &str) -> Option<Result<SettingStatement>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    match words.as_slice() {
        [show, name] if is(show, "show") && is(name, "mpp") => Some(Ok(SettingStatement::ShowMpp)),
        [reset, name] if is(reset, "reset") && is(name, "mpp") => {
            Some(Ok(SettingStatement::SetMpp(None)))
        }
        [set, rest @ ..] if is(set, "set") => {
            let rest = match rest.first() {
                Some(w) if is(w, "session") => &rest[1..],
                _ => rest,
            };
            let body = rest.join(" ");
            let lower = body.to_ascii_lowercase();
            let after = lower.strip_prefix("mpp")?;
            if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                return None;
            }
            let after = after.trim_start();
            let value = match (after.strip_prefix('='), after.strip_prefix("to")) {
                (Some(v), _) => v,
                (None, Some(v)) if v.starts_with(|c: char| c.is_whitespace() || c == '\'') => v,
                _ => return Some(Err(plan_err!("SET mpp: expected = or TO after the name"))),
            };
            let value = value.trim();
            if value.eq_ignore_ascii_case("default") {
                return Some(Ok(SettingStatement::SetMpp(None)));
            }
            Some(crate::config::MppMode::parse(value).map(|m| SettingStatement::SetMpp(Some(m))))
        }
        _ => None,
    }
}

/// A statement timeout as written: `5000`, `'5s'`, `'500ms'`, `'2min'`,
/// `'1h'`, `DEFAULT`; `None` for the default (0 too).
fn timeout_value(v: &str) -> Result<Option<Duration>> {
    if v.eq_ignore_ascii_case("default") {
        return Ok(None);
    }
    let unquoted = v
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or(v)
        .trim();
    let digits = unquoted
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unquoted.len());
    let (number, unit) = unquoted.split_at(digits);
    let bad = || {
        plan_err!(
            "invalid statement_timeout {v}: expected milliseconds or a number with ms, s, min or h (e.g. '5s'), or DEFAULT"
        )
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "min" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(bad()),
    };
    let d = Duration::from_millis(ms.ok_or_else(bad)?);
    if d.is_zero() {
        return Ok(None);
    }
    if d > MAX_STATEMENT_TIMEOUT {
        return Err(plan_err!(
            "statement_timeout {v} is longer than the most allowed, {}h",
            MAX_STATEMENT_TIMEOUT.as_secs() / 3600
        ));
    }
    Ok(Some(d))
}

/// How SHOW statement_timeout prints `d` (PostgreSQL's style).
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod mpp_tests {
    use super::*;
    use crate::config::MppMode;

    #[test]
    fn mpp_is_set_shown_and_reset() {
        for (text, want) in [
            (
                "SET mpp = 'force'",
                SettingStatement::SetMpp(Some(MppMode::Force)),
            ),
            (
                "set session MPP to off;",
                SettingStatement::SetMpp(Some(MppMode::Off)),
            ),
            (
                "SET mpp TO 'auto'",
                SettingStatement::SetMpp(Some(MppMode::Auto)),
            ),
            ("SET mpp = DEFAULT", SettingStatement::SetMpp(None)),
            ("RESET mpp", SettingStatement::SetMpp(None)),
            ("show mpp", SettingStatement::ShowMpp),
        ] {
            assert_eq!(parse(text).unwrap().unwrap(), want, "{text}");
        }
        let e = parse("SET mpp = 'everywhere'")
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 'off', 'auto' or 'force'"), "{e}");
        assert!(parse("SET mpp_threshold = 3").is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SettingStatement::*;

    #[test]
    fn the_forms_users_type_parse() {
        let ms = |n| Some(Ok(SetStatementTimeout(Some(Duration::from_millis(n)))));
        assert_eq!(parse("SET statement_timeout = 5000"), ms(5000));
        assert_eq!(parse("set STATEMENT_TIMEOUT to '5s';"), ms(5000));
        assert_eq!(parse("SET SESSION statement_timeout='250ms'"), ms(250));
        assert_eq!(parse("SET statement_timeout = '2min'"), ms(120_000));
        assert_eq!(
            parse("SET statement_timeout = DEFAULT"),
            Some(Ok(SetStatementTimeout(None)))
        );
        assert_eq!(
            parse("SET statement_timeout = 0"),
            Some(Ok(SetStatementTimeout(None)))
        );
        assert_eq!(
            parse("RESET statement_timeout"),
            Some(Ok(SetStatementTimeout(None)))
        );
        assert_eq!(
            parse("show statement_timeout;"),
            Some(Ok(ShowStatementTimeout))
        );
        assert_eq!(show(Duration::from_millis(5000)), "5s");
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_secs(120)), "2min");
    }

    #[test]
    fn bad_values_are_refused_and_other_statements_left_alone() {
        for bad in [
            "SET statement_timeout = 'soon'",
            "SET statement_timeout = -5",
            "SET statement_timeout = '5 days'",
            "SET statement_timeout = 99999999999999999999",
            "SET statement_timeout = '25h'",
            "SET statement_timeout 5",
            "SET statement_timeout 日",
            "SET statement_timeout TO5s",
        ] {
            let e = parse(bad).unwrap().unwrap_err().to_string();
            assert!(e.contains("statement_timeout"), "{bad}: {e}");
        }
        assert_eq!(parse("SET search_path = x"), None);
        assert_eq!(parse("SELECT 1"), None);
        assert_eq!(parse("SHOW TABLES"), None);
    }
}
