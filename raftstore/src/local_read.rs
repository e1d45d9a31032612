//! Lease reads without the store loop (TiKV's `LocalReader`).
//!
//! A coprocessor request first asks whether it may read the region here.
//! Going through the store loop for that costs a channel hop each way and,
//! on a busy machine, however long the loop thread waits for a core — half
//! a millisecond and more per region, while the answer under a valid lease
//! is just "yes, here is the region". So the store loop *publishes* each
//! leader's lease (its region and the instant the lease ends) into this
//! shared table at the end of every round, and a read checks the table on
//! its own thread first; only when the lease is unknown, expired or the
//! epoch differs does it ask the loop (which then runs ReadIndex).
//!
//! Why this is safe: a published lease ends before any other peer can be
//! elected (the lease is shorter than the election timeout and counted
//! from before the quorum round that granted it), so serving local state
//! until then is exactly what the loop itself would do. Two things could
//! make a lease lie, and both revoke it at once: a leadership transfer
//! (the target may be elected right away, inside the lease: the loop
//! revokes before sending it the go-ahead, and the peer stops counting its
//! lease while a transfer is pending), and losing leadership or changing
//! region (the next publish drops or replaces the entry; the epoch a
//! request carries must also match the published region exactly).
//!
//! CAVEAT: like every lease read, this trusts clocks not to drift by more
//! than the lease's margin over the 800 ms lease.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::RwLock;
use quarry_proto::meta::{Region, RegionEpoch};

use crate::region;

#[derive(Default)]
pub struct LocalReader {
    leases: RwLock<HashMap<u64, (Region, Instant)>>,
}

impl LocalReader {
    /// The region, if this store's leader of it holds a lease at `now`
    /// and `epoch` (when given) is the region's current one.
    pub fn read(
        &self,
        region_id: u64,
        epoch: Option<&RegionEpoch>,
        now: Instant,
    ) -> Option<Region> {
        let leases = self.leases.read();
        let (r, until) = leases.get(&region_id)?;
        if now >= *until {
            return None;
        }
        if let Some(e) = epoch {
            let cur = region::epoch(r);
            if e.version != cur.version || e.conf_ver != cur.conf_ver {
                return None;
            }
        }
        Some(r.clone())
    }

    /// Records that the leader of `region` may serve reads until `until`.
    pub fn publish(&self, region: &Region, until: Instant) {
        let mut leases = self.leases.write();
        match leases.get_mut(&region.id) {
            Some((r, u)) if r == region => *u = until,
            _ => {
                leases.insert(region.id, (region.clone(), until));
            }
        }
    }

    /// Forgets a region's lease (no longer leader, transferring, gone).
    pub fn revoke(&self, region_id: u64) {
        self.leases.write().remove(&region_id);
    }

    /// The regions with a published lease and its end (for the store loop
    /// to compare against).
    pub fn published(&self, region_id: u64) -> Option<(Region, Instant)> {
        self.leases.read().get(&region_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_proto::meta::RegionEpoch;
    use std::time::Duration;

    #[test]
    fn a_lease_serves_until_it_ends_and_only_for_its_epoch() {
        let lr = LocalReader::default();
        let region = Region {
            id: 7,
            epoch: Some(RegionEpoch {
                conf_ver: 2,
                version: 3,
            }),
            ..Default::default()
        };
        let now = Instant::now();
        assert!(lr.read(7, None, now).is_none());
        lr.publish(&region, now + Duration::from_millis(800));
        assert_eq!(lr.read(7, region.epoch.as_ref(), now), Some(region.clone()));
        let old = RegionEpoch {
            conf_ver: 2,
            version: 2,
        };
        assert!(
            lr.read(7, Some(&old), now).is_none(),
            "a stale epoch asks the loop"
        );
        assert!(lr.read(7, None, now + Duration::from_millis(800)).is_none());
        lr.revoke(7);
        assert!(lr.read(7, None, now).is_none());
    }
}
