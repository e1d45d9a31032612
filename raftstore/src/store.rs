//! The store: one storage process's regions over one engine.
//!
//! A store owns the engine, the set of regions it holds (each persisted as
//! a local state in the `raft` column family), and the coprocessor read
//! pool. Every region-addressed entry point first checks the region and its
//! epoch and answers with a region error (data, not a failure) when the
//! caller's picture is stale.
//!
//! Writes are applied to the engine in one write batch per request and
//! fsynced before they are acknowledged (`sync-writes`). There is one replica
//! per region here; replication is future work (see the crate docs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use prost::Message;
use quarry_coprocessor::codec::key::{decode_record_key, hex};
use quarry_coprocessor::endpoint;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{CopRequest, CopResponse, OtherError};
use quarry_proto::kv::{Context, KvPair};
use quarry_proto::meta::{Region, RegionError};

use crate::config::StorageConfig;
use crate::engine::{Cf, Engine, WriteBatch};
use crate::keys;
use crate::region;
use crate::{Error, Result};

/// A region this store holds.
pub struct RegionPeer {
    region: RwLock<Region>,
    /// Serializes check-then-write (INSERT's duplicate check).
    write_lock: Mutex<()>,
}

impl RegionPeer {
    pub fn region(&self) -> Region {
        self.region.read().clone()
    }
}

/// Which store a data dir belongs to (guards against mixing them up).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreIdent {
    #[prost(uint64, tag = "1")]
    pub store_id: u64,
}

pub struct Store<E: Engine> {
    pub id: u64,
    engine: Arc<E>,
    regions: RwLock<HashMap<u64, Arc<RegionPeer>>>,
    read_pool: rayon::ThreadPool,
    pending_reads: Arc<AtomicUsize>,
    max_pending_reads: usize,
    sync_writes: bool,
}

impl<E: Engine> Store<E> {
    /// Opens the store over `engine`: checks the data dir belongs to this
    /// store id (claiming it if new) and loads the regions it holds.
    pub fn open(engine: Arc<E>, cfg: &StorageConfig) -> Result<Self> {
        match engine.get(Cf::Raft, keys::STORE_IDENT_KEY)? {
            Some(b) => {
                let ident = StoreIdent::decode(b.as_slice())?;
                if ident.store_id != cfg.store_id {
                    return Err(Error::InvalidInput(format!(
                        "data dir {} belongs to store {}, not store {}",
                        cfg.data_dir.display(),
                        ident.store_id,
                        cfg.store_id
                    )));
                }
            }
            None => {
                let mut wb = WriteBatch::new();
                let ident = StoreIdent {
                    store_id: cfg.store_id,
                };
                wb.put(
                    Cf::Raft,
                    keys::STORE_IDENT_KEY.to_vec(),
                    ident.encode_to_vec(),
                );
                engine.write(&wb, true)?;
            }
        }
        let mut regions = HashMap::new();
        let mut err = None;
        engine.scan(
            Cf::Raft,
            keys::REGION_STATE_PREFIX,
            &keys::prefix_end(keys::REGION_STATE_PREFIX),
            &mut |_, v| match Region::decode(v) {
                Ok(r) => {
                    regions.insert(r.id, Arc::new(RegionPeer::new(r)));
                    true
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            },
        )?;
        if let Some(e) = err {
            return Err(e.into());
        }
        let read_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.read_pool_size())
            .thread_name(|i| format!("cop-{i}"))
            .build()
            .map_err(|e| Error::Internal(format!("read pool: {e}")))?;
        Ok(Store {
            id: cfg.store_id,
            engine,
            regions: RwLock::new(regions),
            read_pool,
            pending_reads: Arc::new(AtomicUsize::new(0)),
            max_pending_reads: cfg.max_pending_reads,
            sync_writes: cfg.sync_writes,
        })
    }

    pub fn engine(&self) -> &Arc<E> {
        &self.engine
    }

    pub fn has_region(&self, id: u64) -> bool {
        self.regions.read().contains_key(&id)
    }

    pub fn region_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.regions.read().keys().copied().collect();
        v.sort_unstable();
        v
    }

    // ------------------------------------------------------------ regions

    /// Starts holding `r` (idempotent for the same region).
    pub fn create_region(&self, r: Region) -> Result<()> {
        if let Some(existing) = self.regions.read().get(&r.id) {
            let cur = existing.region();
            if cur.start_key == r.start_key && cur.end_key == r.end_key {
                return Ok(());
            }
            return Err(Error::InvalidInput(format!(
                "region {} already exists with another range",
                r.id
            )));
        }
        let mut wb = WriteBatch::new();
        wb.put(Cf::Raft, keys::region_state_key(r.id), r.encode_to_vec());
        self.engine.write(&wb, true)?;
        self.regions
            .write()
            .insert(r.id, Arc::new(RegionPeer::new(r)));
        Ok(())
    }

    /// Stops holding region `id` and deletes its data (idempotent).
    pub fn destroy_region(&self, id: u64) -> Result<()> {
        let Some(peer) = self.regions.write().remove(&id) else {
            return Ok(());
        };
        let r = peer.region();
        let mut wb = WriteBatch::new();
        let end = if r.end_key.is_empty() {
            vec![0xFF; 32]
        } else {
            r.end_key.clone()
        };
        wb.delete_range(Cf::Default, r.start_key.clone(), end);
        wb.delete(Cf::Raft, keys::region_state_key(id));
        self.engine.write(&wb, true)
    }

    /// The region a request addresses, if this store holds it at the
    /// caller's epoch.
    pub fn check_context(&self, ctx: Option<&Context>) -> Result<Arc<RegionPeer>> {
        let ctx =
            ctx.ok_or_else(|| Error::InvalidInput("request without a region context".into()))?;
        let peer = self
            .regions
            .read()
            .get(&ctx.region_id)
            .cloned()
            .ok_or_else(|| Error::region(region::not_found(ctx.region_id)))?;
        let r = peer.region();
        let cur = region::epoch(&r);
        match &ctx.region_epoch {
            Some(e) if e.version == cur.version && e.conf_ver == cur.conf_ver => Ok(peer),
            asked => Err(Error::region(region::epoch_not_match(asked.as_ref(), &r))),
        }
    }

    // ------------------------------------------------------------ writes

    /// Writes `pairs` into the region atomically. With `if_absent`, refuses
    /// the whole batch when any key exists (INSERT's duplicate key check).
    pub fn batch_put(
        &self,
        ctx: Option<&Context>,
        pairs: Vec<KvPair>,
        if_absent: bool,
    ) -> Result<()> {
        let peer = self.check_context(ctx)?;
        let r = peer.region();
        if let Some(p) = pairs.iter().find(|p| !region::contains(&r, &p.key)) {
            return Err(Error::region(region::key_not_in_region(&p.key, &r)));
        }
        let _guard = if_absent.then(|| peer.write_lock.lock());
        if if_absent {
            for p in &pairs {
                if self.engine.get(Cf::Default, &p.key)?.is_some() {
                    let what = match decode_record_key(&p.key) {
                        Ok((_, h)) => format!("handle {h}"),
                        Err(_) => format!("key {}", hex(&p.key)),
                    };
                    return Err(Error::InvalidInput(format!(
                        "duplicate key: a row with {what} already exists"
                    )));
                }
            }
        }
        let mut wb = WriteBatch::new();
        for p in pairs {
            wb.put(Cf::Default, p.key, p.value);
        }
        self.engine.write(&wb, self.sync_writes)
    }

    /// Deletes `[start, end)` (clamped to the region).
    pub fn delete_range(&self, ctx: Option<&Context>, start: &[u8], end: &[u8]) -> Result<()> {
        let peer = self.check_context(ctx)?;
        let r = peer.region();
        let (s, e) = crate::engine::clamp(
            &KeyRange::new(start.to_vec(), end.to_vec()),
            &KeyRange::new(r.start_key.clone(), r.end_key.clone()),
        );
        let mut wb = WriteBatch::new();
        wb.delete_range(
            Cf::Default,
            s,
            if e.is_empty() { vec![0xFF; 32] } else { e },
        );
        self.engine.write(&wb, self.sync_writes)
    }

    // ------------------------------------------------------------ reads

    pub fn batch_get(&self, ctx: Option<&Context>, keys: &[Vec<u8>]) -> Result<Vec<KvPair>> {
        let peer = self.check_context(ctx)?;
        let r = peer.region();
        let mut out = Vec::new();
        for k in keys {
            if !region::contains(&r, k) {
                return Err(Error::region(region::key_not_in_region(k, &r)));
            }
            if let Some(v) = self.engine.get(Cf::Default, k)? {
                out.push(KvPair {
                    key: k.clone(),
                    value: v,
                });
            }
        }
        Ok(out)
    }

    pub fn scan(
        &self,
        ctx: Option<&Context>,
        start: &[u8],
        end: &[u8],
        limit: usize,
        key_only: bool,
    ) -> Result<Vec<KvPair>> {
        let peer = self.check_context(ctx)?;
        let r = peer.region();
        let (s, e) = crate::engine::clamp(
            &KeyRange::new(start.to_vec(), end.to_vec()),
            &KeyRange::new(r.start_key.clone(), r.end_key.clone()),
        );
        let mut out = Vec::new();
        self.engine.scan(Cf::Default, &s, &e, &mut |k, v| {
            out.push(KvPair {
                key: k.to_vec(),
                value: if key_only { vec![] } else { v.to_vec() },
            });
            limit == 0 || out.len() < limit
        })?;
        Ok(out)
    }

    /// Runs a coprocessor request on the read pool. Never fails: region
    /// errors and other errors come back inside the response.
    pub async fn coprocessor(&self, req: CopRequest) -> CopResponse {
        let received = Instant::now();
        let region_error = |e: RegionError| CopResponse {
            region_error: Some(e),
            ..Default::default()
        };
        let peer = match self.check_context(req.context.as_ref()) {
            Ok(p) => p,
            Err(Error::Region(e)) => return region_error(*e),
            Err(e) => {
                return CopResponse {
                    other_error: Some(OtherError {
                        code: quarry_proto::coprocessor::other_error::Code::InvalidInput as i32,
                        message: e.to_string(),
                    }),
                    ..Default::default()
                }
            }
        };
        let r = peer.region();
        for kr in &req.ranges {
            if !region::contains_range(&r, &kr.start, &kr.end) {
                return region_error(region::key_not_in_region(&kr.start, &r));
            }
        }
        let pending = self.pending_reads.fetch_add(1, Ordering::SeqCst);
        let _release = PendingGuard(self.pending_reads.clone());
        if pending >= self.max_pending_reads {
            return region_error(region::server_is_busy(format!(
                "{pending} coprocessor requests pending on store {}",
                self.id
            )));
        }
        let deadline =
            (req.timeout_ms > 0).then(|| received + Duration::from_millis(req.timeout_ms));
        let engine = self.engine.clone();
        let bounds = KeyRange::new(r.start_key, r.end_key);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.read_pool.spawn(move || {
            let wait_ns = received.elapsed().as_nanos() as u64;
            let resp =
                engine.with_snapshot(&bounds, |s| endpoint::handle(s, &req, deadline, wait_ns));
            let _ = tx.send(resp);
        });
        rx.await.unwrap_or_else(|_| CopResponse {
            other_error: Some(OtherError {
                code: quarry_proto::coprocessor::other_error::Code::Internal as i32,
                message: "coprocessor worker stopped without an answer".into(),
            }),
            ..Default::default()
        })
    }
}

impl RegionPeer {
    fn new(r: Region) -> Self {
        RegionPeer {
            region: RwLock::new(r),
            write_lock: Mutex::new(()),
        }
    }
}

struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;
