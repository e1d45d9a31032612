//! Half-open key ranges: the one definition of "an empty end means
//! unbounded".
//!
//! Every range in Quarry — a region's `[start_key, end_key)`, a scan's
//! bounds, a page's remaining keys — follows the same rule: the start is
//! inclusive, the end exclusive, and an *empty* end stands for "past every
//! key". An empty start is simply the smallest key. That rule used to be
//! written out wherever a range was compared; now it lives here, once, in
//! [`KeyRangeRef`] (borrowed bounds, for callers holding a region's keys)
//! and its owned twin [`KeyRange`], which delegates to it.
//!
//! ```text
//!   contains:   start <= key && (end empty || key < end)
//!   overlaps:   each range starts before the other ends
//!   intersect:  the later start, the earlier end (empty = unbounded),
//!               None when nothing is left
//! ```

use std::cmp::Ordering;

/// Borrowed bounds of a half-open key range `[start, end)`; an empty `end`
/// means unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRangeRef<'a> {
    pub start: &'a [u8],
    pub end: &'a [u8],
}

/// A half-open key range `[start, end)`; an empty `end` means unbounded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

/// Compares two range ends, where empty means "past every key".
fn cmp_end(a: &[u8], b: &[u8]) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.cmp(b),
    }
}

impl<'a> KeyRangeRef<'a> {
    pub fn new(start: &'a [u8], end: &'a [u8]) -> Self {
        KeyRangeRef { start, end }
    }

    /// The range of a region.
    pub fn of_region(r: &'a quarry_proto::meta::Region) -> Self {
        KeyRangeRef::new(&r.start_key, &r.end_key)
    }

    /// True if the end is unbounded.
    pub fn is_unbounded(&self) -> bool {
        self.end.is_empty()
    }

    /// True if `key` is at or after the start and before the end.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start && self.before_end(key)
    }

    /// True if `key` is before the end (whatever the start).
    pub fn before_end(&self, key: &[u8]) -> bool {
        self.end.is_empty() || key < self.end
    }

    /// True if no key is in the range.
    pub fn is_empty(&self) -> bool {
        !self.before_end(self.start)
    }

    /// True if the two ranges share at least one key.
    pub fn overlaps(&self, other: KeyRangeRef<'_>) -> bool {
        !self.common(other).is_empty()
    }

    /// The later start and the earlier end (possibly an empty range).
    fn common<'b>(&'b self, other: KeyRangeRef<'b>) -> KeyRangeRef<'b> {
        let end = match cmp_end(self.end, other.end) {
            Ordering::Greater => other.end,
            _ => self.end,
        };
        KeyRangeRef::new(self.start.max(other.start), end)
    }

    /// True if every key of `inner` is in this range.
    pub fn covers(&self, inner: KeyRangeRef<'_>) -> bool {
        inner.start >= self.start && cmp_end(inner.end, self.end) != Ordering::Greater
    }

    /// The keys in both ranges, or `None` if there are none.
    pub fn intersect(&self, other: KeyRangeRef<'_>) -> Option<KeyRange> {
        let r = self.common(other);
        (!r.is_empty()).then(|| r.to_owned())
    }

    pub fn to_owned(&self) -> KeyRange {
        KeyRange::new(self.start, self.end)
    }
}

impl KeyRange {
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: end.into(),
        }
    }

    /// Every key.
    pub fn all() -> Self {
        KeyRange::default()
    }

    /// The range of a region.
    pub fn of_region(r: &quarry_proto::meta::Region) -> Self {
        KeyRangeRef::of_region(r).to_owned()
    }

    pub fn as_ref(&self) -> KeyRangeRef<'_> {
        KeyRangeRef::new(&self.start, &self.end)
    }

    pub fn is_unbounded(&self) -> bool {
        self.as_ref().is_unbounded()
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.as_ref().contains(key)
    }

    pub fn is_empty(&self) -> bool {
        self.as_ref().is_empty()
    }

    pub fn overlaps(&self, other: &KeyRange) -> bool {
        self.as_ref().overlaps(other.as_ref())
    }

    pub fn covers(&self, inner: &KeyRange) -> bool {
        self.as_ref().covers(inner.as_ref())
    }

    pub fn intersect(&self, other: &KeyRange) -> Option<KeyRange> {
        self.as_ref().intersect(other.as_ref())
    }

    /// The smallest range covering all of `ranges` (`None` if there are
    /// none).
    pub fn span(ranges: &[KeyRange]) -> Option<KeyRange> {
        let start = ranges.iter().map(|r| r.start.as_slice()).min()?;
        let end = ranges
            .iter()
            .map(|r| r.end.as_slice())
            .max_by(|a, b| cmp_end(a, b))?;
        Some(KeyRange::new(start, end))
    }

    pub fn from_proto(r: &quarry_proto::coprocessor::KeyRange) -> Self {
        KeyRange::new(r.start.clone(), r.end.clone())
    }

    pub fn to_proto(&self) -> quarry_proto::coprocessor::KeyRange {
        quarry_proto::coprocessor::KeyRange {
            start: self.start.clone(),
            end: self.end.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str, e: &str) -> KeyRange {
        KeyRange::new(s.as_bytes(), e.as_bytes())
    }

    #[test]
    fn an_empty_end_is_unbounded_and_an_empty_start_is_the_smallest_key() {
        assert!(r("", "").contains(b""));
        assert!(r("", "").contains(b"\xff\xff\xff"));
        assert!(r("b", "").contains(b"zzz"));
        assert!(!r("b", "").contains(b"a"));
        assert!(r("b", "d").contains(b"b"));
        assert!(!r("b", "d").contains(b"d"));
        assert!(r("b", "b").is_empty());
        assert!(r("c", "b").is_empty());
        assert!(!r("b", "").is_empty());
    }

    #[test]
    fn intersection_takes_the_later_start_and_the_earlier_end() {
        assert_eq!(r("a", "m").intersect(&r("f", "")), Some(r("f", "m")));
        assert_eq!(r("a", "").intersect(&r("f", "")), Some(r("f", "")));
        assert_eq!(r("", "").intersect(&r("b", "c")), Some(r("b", "c")));
        assert_eq!(r("a", "c").intersect(&r("c", "")), None);
        assert_eq!(r("a", "c").intersect(&r("d", "e")), None);
    }

    #[test]
    fn ranges_overlap_when_they_share_a_key() {
        assert!(r("a", "c").overlaps(&r("b", "")));
        assert!(r("b", "").overlaps(&r("a", "c")));
        assert!(r("", "").overlaps(&r("x", "y")));
        assert!(!r("a", "c").overlaps(&r("c", "d")));
        assert!(!r("c", "d").overlaps(&r("a", "c")));
        assert!(!r("a", "z").overlaps(&r("m", "m")));
        // Agrees with intersect on a grid of bounds.
        let keys = ["", "a", "b", "c"];
        for s1 in keys {
            for e1 in keys {
                for s2 in keys {
                    for e2 in keys {
                        let (x, y) = (r(s1, e1), r(s2, e2));
                        assert_eq!(x.overlaps(&y), x.intersect(&y).is_some(), "{x:?} {y:?}");
                        assert_eq!(x.overlaps(&y), y.overlaps(&x), "{x:?} {y:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn covers_and_span_treat_an_empty_end_as_the_largest() {
        assert!(r("a", "").covers(&r("b", "")));
        assert!(r("a", "").covers(&r("b", "c")));
        assert!(!r("a", "z").covers(&r("b", "")));
        assert!(!r("b", "z").covers(&r("a", "c")));
        assert_eq!(
            KeyRange::span(&[r("c", "d"), r("a", "b")]),
            Some(r("a", "d"))
        );
        assert_eq!(KeyRange::span(&[r("c", ""), r("a", "b")]), Some(r("a", "")));
        assert_eq!(KeyRange::span(&[]), None);
    }
}
