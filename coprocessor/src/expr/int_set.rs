//! Long IN lists of integers (a join's keys) as a hash set, built once
//! per request, at its first probe.
//!
//! Most requests never probe it: a scan's zone filter and the fused
//! executor take the list as a sorted set of their own
//! (`executor::kernels::IntSet`), and only the row-at-a-time evaluation
//! (`eval.rs`) hashes. Built when the request was decoded, growing by
//! doubling, the sets of the probe scans' key lists cost a store over a
//! tenth of its samples in Q5 under `mpp = 'force'`, where every task
//! sends every region its list (`docs/performance.md`).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use super::ScalarValue;

/// Lists at least this long are probed through a hash set.
pub(super) const IN_LIST_HASH_AT: usize = 16;

/// The values of a long IN list of integers as a hash set. A NULL in the
/// list makes misses NULL, which only the item-by-item path gets right,
/// so such a list has no set.
#[derive(Clone)]
pub struct IntSet(Arc<OnceLock<HashSet<i64, IntHash>>>);

impl IntSet {
    /// A set for `list`, when it is long and all BIGINT; built at the
    /// first [`IntSet::probe_set`].
    pub(super) fn of(list: &[ScalarValue]) -> Option<IntSet> {
        let ints = list.iter().all(|v| v.as_int64().is_some());
        (list.len() >= IN_LIST_HASH_AT && ints).then(|| IntSet(Arc::default()))
    }

    /// The hash set of `list`, the list this set was made [`IntSet::of`].
    pub(super) fn probe_set(&self, list: &[ScalarValue]) -> &HashSet<i64, IntHash> {
        self.0.get_or_init(|| {
            let mut set = HashSet::with_capacity_and_hasher(list.len(), IntHash);
            set.extend(list.iter().filter_map(ScalarValue::as_int64));
            set
        })
    }
}

impl std::fmt::Debug for IntSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.get() {
            Some(set) => write!(f, "IntSet({} values)", set.len()),
            None => write!(f, "IntSet(not built)"),
        }
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
