//! A request's DAG, held once for every region that reads under it.
//!
//! A batch (`service/coprocessor.rs`) names one DAG for all of a store's
//! regions in a query. Handed to each region as a request of its own, the
//! DAG was cloned, encoded to name the read (`same_reads.rs`) and decoded
//! into executors once per region. A join's probe scan carries the build
//! side's keys in its DAG (tens of thousands at SF 1, tens of KB), and in
//! TPC-H Q5 under `mpp = 'force'`, where every task asks every orders and
//! lineitem region, that per-region work was a quarter of a store's
//! samples: building the executors 16% (the zone filter's and the fused
//! executor's sets of the keys, the keys decoded into expressions), and
//! encoding the request to name it 8.6% (`docs/performance.md`).
//!
//! So a batch makes one [`ReadDag`] and its regions share it:
//! - its **name**, the DAG's bytes and their hash, taken once when the
//!   reads may be shared at all (a snapshot named); a region's read is
//!   named by its own few fields (region, epoch, ranges, encoding) beside
//!   it ([`same_reads::ReadKey`](super::same_reads));
//! - its **plan**, compiled at the first read that runs (on the read pool,
//!   so a read answered from another's or from a kept answer compiles
//!   nothing), and cloned into each region's executors, which copies no
//!   key (`quarry_coprocessor::endpoint::Plan`).
//!
//! A single request (compute's retries, tools) makes a `ReadDag` of its
//! own: the same path, with nothing to share.

use std::sync::{Arc, OnceLock};

use prost::Message;
use quarry_coprocessor::endpoint::Plan;
use quarry_proto::coprocessor::DagRequest;

/// The DAG of one request, or of a batch's regions (module docs).
pub(crate) struct ReadDag {
    dag: Option<DagRequest>,
    name: Option<Arc<DagName>>,
    plan: OnceLock<quarry_coprocessor::Result<Plan>>,
}

/// A DAG's encoded bytes and their hash: half of the name of a read under
/// it (`same_reads.rs`).
#[derive(PartialEq, Eq)]
pub(super) struct DagName {
    pub(super) hash: u64,
    pub(super) bytes: Vec<u8>,
}

impl ReadDag {
    /// The DAG a request (or batch) carries; None is refused when a read
    /// compiles it.
    pub(crate) fn new(dag: Option<DagRequest>) -> Arc<ReadDag> {
        let name = dag.as_ref().filter(|d| d.read_ts != 0).map(|d| {
            let bytes = d.encode_to_vec();
            Arc::new(DagName {
                hash: super::same_reads::hash_bytes(0, &bytes),
                bytes,
            })
        });
        Arc::new(ReadDag {
            dag,
            name,
            plan: OnceLock::new(),
        })
    }

    /// The snapshot the reads are at; 0: the latest data.
    pub(super) fn read_ts(&self) -> u64 {
        self.dag.as_ref().map_or(0, |d| d.read_ts)
    }

    /// Whether a read may keep its answer, or take a kept one
    /// (`same_reads.rs`): its snapshot is no transaction's start_ts.
    pub(super) fn repeatable(&self) -> bool {
        self.dag
            .as_ref()
            .is_some_and(|d| d.read_ts != 0 && d.repeatable)
    }

    /// Whether the DAG aggregates (a big region's read may run in parts).
    pub(super) fn aggregates(&self) -> bool {
        self.dag.as_ref().is_some_and(|d| d.aggregation.is_some())
    }

    /// Whether the scans put the blocks they read in the block cache: yes
    /// unless the DAG says it reads them once (a backup).
    pub(super) fn fills_cache(&self) -> bool {
        !self.dag.as_ref().is_some_and(|d| d.not_fill_cache)
    }

    /// The DAG's bytes and hash; None when its reads are never shared (no
    /// snapshot named).
    pub(super) fn name(&self) -> Option<&Arc<DagName>> {
        self.name.as_ref()
    }

    /// The DAG compiled, at the first call (or why it could not be).
    pub(super) fn plan(&self) -> &quarry_coprocessor::Result<Plan> {
        self.plan
            .get_or_init(|| quarry_coprocessor::endpoint::compile(self.dag.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dag_is_named_only_at_a_snapshot_and_compiled_once_when_first_read() {
        let at = |read_ts| {
            ReadDag::new(Some(DagRequest {
                read_ts,
                ..Default::default()
            }))
        };
        assert!(at(0).name().is_none(), "the latest data: never shared");
        let (a, b) = (at(7), at(7));
        assert!(
            a.name().unwrap() == b.name().unwrap(),
            "the same DAG, the same name"
        );
        assert!(a.name().unwrap() != at(8).name().unwrap());
        assert!(a.plan.get().is_none(), "not compiled until a read runs");
        let err = a.plan().as_ref().unwrap_err().to_string();
        assert!(err.contains("without a table scan"), "{err}");
        assert!(std::ptr::eq(a.plan(), a.plan()), "compiled once");
        let none = ReadDag::new(None);
        let err = none.plan().as_ref().unwrap_err().to_string();
        assert!(err.contains("without a DAG"), "{err}");
    }

    #[test]
    fn only_a_dag_that_says_so_leaves_the_cache_alone() {
        let with = |not_fill_cache| {
            ReadDag::new(Some(DagRequest {
                not_fill_cache,
                ..Default::default()
            }))
        };
        assert!(with(false).fills_cache());
        assert!(!with(true).fills_cache());
        assert!(ReadDag::new(None).fills_cache());
    }
}
