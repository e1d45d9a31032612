//! Long IN lists of integers (a join's keys) as a hash set, built once
//! per request.

use std::collections::HashSet;
use std::sync::Arc;

use super::ScalarValue;

/// Lists at least this long are probed through a hash set.
pub(super) const IN_LIST_HASH_AT: usize = 16;

/// The values of a long IN list of integers as a hash set. A NULL in the
/// list makes misses NULL, which only the item-by-item path gets right,
/// so such a list has no set.
#[derive(Clone)]
pub struct IntSet(pub Arc<HashSet<i64, IntHash>>);

impl IntSet {
    pub(super) fn of(list: &[ScalarValue]) -> Option<IntSet> {
        if list.len() < IN_LIST_HASH_AT {
            return None;
        }
        let set = list
            .iter()
            .map(|v| match v {
                ScalarValue::Int64(x) => Some(*x),
                _ => None,
            })
            .collect::<Option<HashSet<i64, IntHash>>>()?;
        Some(IntSet(Arc::new(set)))
    }
}

impl std::fmt::Debug for IntSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IntSet({} values)", self.0.len())
    }
}

/// Built from the same list, so equal when the lists are.
impl PartialEq for IntSet {
    fn eq(&self, _: &IntSet) -> bool {
        true
    }
}

/// A multiplicative hash for integer keys (SipHash costs several times as
/// much per probe, and join keys are not chosen by an attacker who could
/// only slow their own query).
#[derive(Clone, Default)]
pub struct IntHash;

impl std::hash::BuildHasher for IntHash {
    type Hasher = IntHasher;
    fn build_hasher(&self) -> IntHasher {
        IntHasher(0)
    }
}

pub struct IntHasher(u64);

impl std::hash::Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_i64(&mut self, v: i64) {
        // Fibonacci hashing; the high bits, which hashbrown uses for its
        // tags, mix in the low ones.
        let h = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}
