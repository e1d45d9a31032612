//! Long IN lists of integers (a join's keys) as a set of their members,
//! built once per request's plan, when first asked for (a batch's plan
//! serves all its regions, `endpoint.rs`, so their clones of the
//! expression share one set).
//!
//! ONE SET PER LIST. The scan's zone filter tests the list on packs'
//! stored bytes, the fused executor on its blocks, and row-at-a-time
//! evaluation (`eval.rs`) probes it for the rows those left; all three
//! take the same [`kernels::IntSet`] (a bitmap over the members' span, or
//! the sorted members). They used to build their own: two sorted sets and
//! a hash set per list, which in TPC-H Q5 under `mpp = 'force'` (every
//! task sending every region its list) cost a store a tenth of its
//! samples even when the plan was compiled once per batch
//! (`docs/performance.md`). Compute sends the keys sorted, so building the
//! set is one pass.

use std::sync::{Arc, OnceLock};

use super::ScalarValue;
use crate::executor::kernels;

/// Lists at least this long are probed through a set.
pub(super) const IN_LIST_HASH_AT: usize = 16;

/// The values of a long IN list of integers as a set. A NULL in the list
/// makes misses NULL, which only the item-by-item path gets right, so
/// such a list has no set.
#[derive(Clone)]
pub struct IntSet(Arc<OnceLock<kernels::IntSet>>);

impl IntSet {
    /// A set for `list`, when it is long and all BIGINT; built at the
    /// first [`IntSet::members`].
    pub(super) fn of(list: &[ScalarValue]) -> Option<IntSet> {
        let ints = list.iter().all(|v| v.as_int64().is_some());
        (list.len() >= IN_LIST_HASH_AT && ints).then(|| IntSet(Arc::default()))
    }

    /// The members of `list`, the list this set was made `of`.
    pub fn members(&self, list: &[ScalarValue]) -> &kernels::IntSet {
        self.0.get_or_init(|| {
            let mut values = Vec::with_capacity(list.len());
            values.extend(list.iter().filter_map(ScalarValue::as_int64));
            kernels::IntSet::new(values)
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
