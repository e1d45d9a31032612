//! The region cache: which region holds a key, and which store to ask.
//!
//! Filled from the meta directory on a miss, corrected by region errors:
//! `EpochNotMatch` installs the regions the store returned, `NotLeader`
//! moves the leader, anything else drops the entry so the next lookup asks
//! meta again. Entries are keyed by start key; a lookup checks that the
//! cached regions cover the whole range without gaps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use quarry_coprocessor::codec::key::hex;
use quarry_coprocessor::storage::KeyRangeRef;
use quarry_proto::meta::{Peer, Region, RegionRoute, Store};

use crate::cluster::Routes;
use crate::{Error, Result};

/// A region and where to send requests for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub region: Region,
    pub leader: Peer,
    pub addr: String,
}

impl Located {
    pub fn store_id(&self) -> u64 {
        self.leader.store_id
    }

    /// What a request to this region says it is for.
    pub fn context(&self) -> quarry_proto::kv::Context {
        quarry_proto::kv::Context {
            region_id: self.region.id,
            region_epoch: self.region.epoch,
        }
    }
}

pub struct RegionCache {
    routes: Arc<dyn Routes>,
    by_start: RwLock<BTreeMap<Vec<u8>, Located>>,
    stores: RwLock<HashMap<u64, String>>,
}

/// The range from `first` through `last` (its end just past `last`).
pub fn span_of(first: &[u8], last: &[u8]) -> quarry_coprocessor::storage::KeyRange {
    let mut end = last.to_vec();
    end.push(0);
    quarry_coprocessor::storage::KeyRange::new(first.to_vec(), end)
}

/// Cuts `items`, sorted by `key`, over `regions` (in key order, located
/// for the items' span): each region with its share, regions without one
/// left out. An item no region holds is an internal error.
pub fn cut_sorted<T>(
    items: Vec<T>,
    regions: Vec<Located>,
    key: impl Fn(&T) -> &[u8],
) -> Result<Vec<(Located, Vec<T>)>> {
    let mut pieces = Vec::new();
    let mut items = items.into_iter().peekable();
    for region in regions {
        let bounds = KeyRangeRef::of_region(&region.region);
        let mut mine = Vec::new();
        while let Some(i) = items.next_if(|i| bounds.contains(key(i))) {
            mine.push(i);
        }
        if !mine.is_empty() {
            pieces.push((region, mine));
        }
    }
    match items.next() {
        None => Ok(pieces),
        Some(i) => Err(Error::Internal(format!(
            "no region holds key {}",
            hex(key(&i))
        ))),
    }
}

fn overlaps(r: &Region, start: &[u8], end: &[u8]) -> bool {
    KeyRangeRef::of_region(r).overlaps(KeyRangeRef::new(start, end))
}

impl RegionCache {
    pub fn new(routes: Arc<dyn Routes>) -> Self {
        RegionCache {
            routes,
            by_start: RwLock::new(BTreeMap::new()),
            stores: RwLock::new(HashMap::new()),
        }
    }

    /// The cached regions covering `[start, end)`, if there are no gaps.
    pub fn cached(&self, start: &[u8], end: &[u8]) -> Option<Vec<Located>> {
        let map = self.by_start.read();
        let first = map.range(..=start.to_vec()).next_back()?;
        let mut out = vec![first.1.clone()];
        let mut cursor = first.1.region.end_key.clone();
        if !KeyRangeRef::of_region(&first.1.region).contains(start) {
            return None;
        }
        let wanted = KeyRangeRef::new(start, end);
        while !cursor.is_empty() && wanted.before_end(&cursor) {
            let next = map.get(&cursor)?;
            cursor = next.region.end_key.clone();
            out.push(next.clone());
        }
        Some(out)
    }

    fn insert(&self, l: Located) {
        let mut map = self.by_start.write();
        let (s, e) = (l.region.start_key.clone(), l.region.end_key.clone());
        let stale: Vec<Vec<u8>> = map
            .iter()
            .filter(|(_, v)| overlaps(&v.region, &s, &e))
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            map.remove(&k);
        }
        map.insert(s, l);
    }

    fn install_route(&self, r: RegionRoute) -> Result<Located> {
        let region = r
            .region
            .ok_or_else(|| Error::Internal("meta returned a route without a region".into()))?;
        let leader = r
            .leader
            .or_else(|| region.peers.first().cloned())
            .ok_or_else(|| Error::Unavailable(format!("region {} has no peers", region.id)))?;
        let addr = match r.leader_store {
            Some(s) => {
                self.stores.write().insert(s.id, s.addr.clone());
                s.addr
            }
            None => self
                .stores
                .read()
                .get(&leader.store_id)
                .cloned()
                .unwrap_or_default(),
        };
        let l = Located {
            region,
            leader,
            addr,
        };
        self.insert(l.clone());
        Ok(l)
    }

    /// The regions covering `[start, end)`, in key order.
    pub async fn locate(&self, start: &[u8], end: &[u8]) -> Result<Vec<Located>> {
        if let Some(hit) = self.cached(start, end) {
            return Ok(hit);
        }
        let routes = self.routes.get_regions(start, end).await?;
        for r in routes {
            self.install_route(r)?;
        }
        self.cached(start, end).ok_or_else(|| {
            Error::Unavailable(format!(
                "no region covers the range [{}, {}): the table may have been dropped",
                hex(start),
                hex(end)
            ))
        })
    }

    /// Forgets a region (after an error that says our picture is wrong).
    pub fn invalidate(&self, region_id: u64) {
        self.by_start
            .write()
            .retain(|_, v| v.region.id != region_id);
    }

    /// Installs regions a store reported as current (EpochNotMatch).
    pub async fn install_regions(&self, regions: Vec<Region>) -> Result<()> {
        for region in regions {
            let leader =
                region.peers.first().cloned().ok_or_else(|| {
                    Error::Unavailable(format!("region {} has no peers", region.id))
                })?;
            let addr = self.store_addr(leader.store_id).await?;
            self.insert(Located {
                region,
                leader,
                addr,
            });
        }
        Ok(())
    }

    /// Points a region at a new leader (NotLeader with a hint).
    pub async fn set_leader(
        &self,
        region_id: u64,
        leader: Peer,
        store: Option<Store>,
    ) -> Result<Option<Located>> {
        let addr = match store {
            Some(s) => {
                self.stores.write().insert(s.id, s.addr.clone());
                s.addr
            }
            None => self.store_addr(leader.store_id).await?,
        };
        let mut map = self.by_start.write();
        let entry = map.values_mut().find(|v| v.region.id == region_id);
        Ok(entry.map(|e| {
            e.leader = leader;
            e.addr = addr;
            e.clone()
        }))
    }

    /// Points a region at another of its peers than the one on `bad_store`
    /// (which could not be reached, or did not know the leader).
    pub async fn switch_peer(&self, region_id: u64, bad_store: u64) -> Result<Option<Located>> {
        let current = {
            let map = self.by_start.read();
            map.values().find(|v| v.region.id == region_id).cloned()
        };
        let Some(cur) = current else { return Ok(None) };
        let peers = &cur.region.peers;
        if peers.len() < 2 {
            return Ok(Some(cur));
        }
        let at = peers
            .iter()
            .position(|p| p.store_id == bad_store)
            .unwrap_or(0);
        let next = peers[(at + 1) % peers.len()];
        let addr = self.store_addr(next.store_id).await?;
        let mut map = self.by_start.write();
        let entry = map.values_mut().find(|v| v.region.id == region_id);
        Ok(entry.map(|e| {
            e.leader = next;
            e.addr = addr;
            e.clone()
        }))
    }

    async fn store_addr(&self, store_id: u64) -> Result<String> {
        if let Some(a) = self.stores.read().get(&store_id) {
            return Ok(a.clone());
        }
        for s in self.routes.get_stores().await? {
            self.stores.write().insert(s.id, s.addr);
        }
        self.stores
            .read()
            .get(&store_id)
            .cloned()
            .ok_or_else(|| Error::Unavailable(format!("store {store_id} is not registered")))
    }
}
