//! `LIKE` by substring search, without regular expressions.
//!
//! Arrow's `like` kernel handles `abc`, `abc%`, `%abc` and `%abc%` with
//! plain comparisons and a substring finder, but any other pattern — TPC-H
//! Q13's `%special%requests%`, Q16's `%Customer%Complaints%` — becomes a
//! regular expression, compiled again for every batch and run on every
//! row (a third of a microsecond per `o_comment`, most of Q13's scan).
//!
//! A pattern whose only wildcard is `%` needs no regular expression: it is
//! a prefix, a suffix, and between them segments that must appear in
//! order. The leftmost match of each segment, searched from the end of the
//! previous one, is the best any match can do (a later start only leaves
//! less room for the rest), so one forward pass with a prebuilt finder per
//! segment decides each row. Bytes are compared, not characters: the
//! segments are whole UTF-8 sequences, so a match in valid UTF-8 starts
//! and ends on character boundaries, and `%` matches any run of them.
//!
//! Patterns with `_` (one character, which bytes cannot count) or `\`
//! (escapes) return `None`, and the caller keeps Arrow's kernel.

use arrow::array::{Array, BooleanArray, StringArray};
use arrow::buffer::BooleanBuffer;
use memchr::memmem::Finder;

/// A `%`-only LIKE pattern taken apart.
pub(crate) struct LikeMatcher<'p> {
    prefix: &'p [u8],
    /// The segments between the first and the last `%`, non-empty.
    middle: Vec<Finder<'p>>,
    suffix: &'p [u8],
    /// No `%` at all: the pattern is the whole value.
    exact: bool,
}

impl<'p> LikeMatcher<'p> {
    /// `None` when `pattern` has `_` or `\`.
    pub(crate) fn new(pattern: &'p str) -> Option<Self> {
        if pattern.contains(['_', '\\']) {
            return None;
        }
        let parts: Vec<&str> = pattern.split('%').collect();
        let (&first, rest) = parts.split_first()?;
        let Some((&last, between)) = rest.split_last() else {
            return Some(LikeMatcher {
                prefix: first.as_bytes(),
                middle: Vec::new(),
                suffix: b"",
                exact: true,
            });
        };
        Some(LikeMatcher {
            prefix: first.as_bytes(),
            middle: between
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| Finder::new(s.as_bytes()))
                .collect(),
            suffix: last.as_bytes(),
            exact: false,
        })
    }

    /// True if `value` matches the pattern.
    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        if self.exact {
            return value == self.prefix;
        }
        if value.len() < self.prefix.len() + self.suffix.len()
            || !value.starts_with(self.prefix)
            || !value.ends_with(self.suffix)
        {
            return false;
        }
        let mut rest = &value[self.prefix.len()..value.len() - self.suffix.len()];
        for f in &self.middle {
            match f.find(rest) {
                Some(at) => rest = &rest[at + f.needle().len()..],
                None => return false,
            }
        }
        true
    }

    /// `[NOT] LIKE` over every row of `values`; NULL stays NULL.
    pub(crate) fn evaluate(&self, values: &StringArray, negated: bool) -> BooleanArray {
        let offsets = values.value_offsets();
        let bytes = values.value_data();
        let bits = BooleanBuffer::collect_bool(values.len(), |i| {
            let v = &bytes[offsets[i] as usize..offsets[i + 1] as usize];
            self.matches(v) != negated
        });
        BooleanArray::new(bits, values.nulls().cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Scalar;
    use arrow::compute::kernels::comparison::{like, nlike};

    /// Arrow's kernel is the oracle: every pattern and value pair must
    /// agree, both ways.
    fn agrees_with_arrow(patterns: &[&str], values: &[Option<&str>]) {
        let array = StringArray::from(values.to_vec());
        for p in patterns {
            let m = LikeMatcher::new(p).expect("a %-only pattern");
            let pat = Scalar::new(StringArray::from(vec![*p]));
            assert_eq!(
                m.evaluate(&array, false),
                like(&array, &pat).unwrap(),
                "LIKE {p:?}"
            );
            assert_eq!(
                m.evaluate(&array, true),
                nlike(&array, &pat).unwrap(),
                "NOT LIKE {p:?}"
            );
        }
    }

    #[test]
    fn percent_patterns_agree_with_arrow() {
        agrees_with_arrow(
            &[
                "%special%requests%",
                "special%requests",
                "%requests%special%",
                "abc",
                "",
                "%",
                "%%",
                "a%",
                "%a",
                "%a%a%",
                "ab%ba",
                "%é%ü",
                "%%ab%%",
            ],
            &[
                Some("the special pending requests sleep"),
                Some("requests special"),
                Some("special requests"),
                Some("specialrequests"),
                Some("special"),
                Some(""),
                Some("a"),
                Some("aa"),
                Some("aba"),
                Some("abba"),
                Some("aba ba"),
                Some("abc"),
                Some("xéyü"),
                None,
            ],
        );
    }

    #[test]
    fn a_suffix_cannot_reuse_the_prefix_bytes() {
        let m = LikeMatcher::new("ab%ba").unwrap();
        assert!(!m.matches(b"aba"));
        assert!(m.matches(b"abba"));
        let m = LikeMatcher::new("a%b%c").unwrap();
        assert!(!m.matches(b"ac"));
        assert!(m.matches(b"abc"));
        assert!(!m.matches(b"acb"));
    }

    #[test]
    fn underscores_and_escapes_are_left_to_arrow() {
        assert!(LikeMatcher::new("a_c").is_none());
        assert!(LikeMatcher::new("100\\%").is_none());
    }
}
