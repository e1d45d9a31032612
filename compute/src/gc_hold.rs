//! Holding the GC safe point back for the reads still running here.
//!
//! Stores fold row versions at or below a GC safe point into packs, where
//! they lose their timestamps (`raftstore::compaction`); the safe point is
//! the wall time one `gc-life-time` ago. A query or an open transaction
//! that runs longer than that would lose the versions its snapshot needs.
//! So, as each TiDB server publishes the oldest start_ts it still reads at
//! and PD's GC keeps below it, every compute process registers each
//! snapshot it reads at ([`ReadHolds::hold`]: a query for its run, an open
//! transaction until it ends) and reports the oldest to the meta leader
//! twice a second (`Meta.HoldGc`, with a TTL, so a crashed compute process
//! holds nothing for long). Stores hear the oldest hold of all compute
//! processes in their heartbeat answers and keep their safe point below it
//! (`raftstore::node`, `Node::gc_safe_point`).
//!
//! A read younger than a second is not reported yet; it needs no
//! hold: the safe point is a whole lifetime behind it. Stores refuse a
//! read below their safe point ("snapshot too old") rather than answer it
//! from folded versions, so a hold that arrives too late shows as an
//! error (one gap, a replica just filled by a raft snapshot:
//! `docs/design-notes.md`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::cluster::Cluster;

/// How often the oldest hold is reported.
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// How long a report holds: a few missed reports do not release it.
const HOLD_TTL: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    /// read_ts → how many reads hold it.
    held: BTreeMap<u64, usize>,
    reporting: bool,
}

/// The snapshots this compute process is reading at.
pub struct ReadHolds {
    cluster: Arc<Cluster>,
    holder: String,
    state: Mutex<State>,
}

/// One read's hold; released when dropped.
pub struct ReadHold {
    holds: Arc<ReadHolds>,
    read_ts: u64,
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let mut s = self.holds.state.lock();
        if let Some(n) = s.held.get_mut(&self.read_ts) {
            *n -= 1;
            if *n == 0 {
                s.held.remove(&self.read_ts);
            }
        }
    }
}

impl ReadHolds {
    pub fn new(cluster: Arc<Cluster>) -> Arc<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Arc::new(ReadHolds {
            cluster,
            holder: format!("compute-{}-{nanos:x}", std::process::id()),
            state: Mutex::default(),
        })
    }

    /// Holds the safe point at or below `read_ts` until the hold is
    /// dropped. Call from a tokio runtime: the first hold starts the
    /// reporting task.
    pub fn hold(self: &Arc<Self>, read_ts: u64) -> ReadHold {
        let start = {
            let mut s = self.state.lock();
            *s.held.entry(read_ts).or_default() += 1;
            !std::mem::replace(&mut s.reporting, true)
        };
        if start {
            tokio::spawn(report(Arc::downgrade(self)));
        }
        ReadHold {
            holds: self.clone(),
            read_ts,
        }
    }

    /// The oldest snapshot held (None: none).
    pub fn oldest(&self) -> Option<u64> {
        self.state.lock().held.keys().next().copied()
    }
}

/// Reports the oldest hold twice a second (and its release once) until
/// the holds are dropped.
async fn report(holds: Weak<ReadHolds>) {
    let mut reported = 0u64;
    loop {
        tokio::time::sleep(REPORT_EVERY).await;
        let Some(h) = holds.upgrade() else {
            return;
        };
        let oldest = h.oldest().unwrap_or(0);
        if oldest == 0 && reported == 0 {
            continue;
        }
        let (cluster, holder) = (h.cluster.clone(), h.holder.clone());
        drop(h);
        match cluster
            .hold_gc("holding the GC safe point", &holder, oldest, HOLD_TTL)
            .await
        {
            Ok(_) => reported = oldest,
            Err(e) => tracing::debug!("reporting the oldest read: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_hold_is_the_smallest_read_ts_still_held() {
        let holds = ReadHolds::new(Arc::new(Cluster::new(vec![], Duration::from_secs(1))));
        assert_eq!(holds.oldest(), None);
        let a = holds.hold(30);
        let b = holds.hold(10);
        let c = holds.hold(10);
        assert_eq!(holds.oldest(), Some(10));
        drop(b);
        assert_eq!(holds.oldest(), Some(10), "one read still holds 10");
        drop(c);
        assert_eq!(holds.oldest(), Some(30));
        drop(a);
        assert_eq!(holds.oldest(), None);
    }
}
