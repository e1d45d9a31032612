//! The catalog and the region directory: the meta region's contents and
//! the operations on them.
//!
//! The meta region (id 1, keys `[m, n)`) is a raft region like any other.
//! The store that bootstraps the cluster creates it with one replica; the
//! meta leader adds replicas on joining stores until it has `replicas` of
//! them. Its contents (see `keys.rs`): table definitions, the directory of
//! regions, the stores and their addresses, the id allocators.
//!
//! Every store has a [`Meta`], but only the one holding the meta region's
//! leader serves: reads go to its engine after the usual leadership check
//! (lease or ReadIndex), changes are proposed to the meta region and answered
//! once applied. Other stores forward (`service/meta.rs`). Store liveness
//! and who leads which region come from heartbeats and live in the leader's
//! memory only; a new meta leader relearns them within seconds.
//!
//! The timestamp oracle ([`Meta::get_timestamps`]) is PD's: a timestamp is
//! physical milliseconds << [`TSO_LOGICAL_BITS`] | a logical counter,
//! handed out by the meta leader from memory, strictly increasing. Before
//! it hands out a physical time at or past its high-water mark it
//! persists a new mark [`TSO_WINDOW_MS`] ahead through the meta region, so
//! a new leader (or the same store after a restart) starts at the
//! persisted mark, above everything handed out before. A leader whose own
//! mark is no longer the persisted one (another leader served meanwhile)
//! starts over from the persisted mark too.
//!
//! CREATE TABLE allocates ids, cuts the table's key range at the requested
//! split handles, places each region's replicas on distinct stores
//! (rotating, so leaders spread), asks every store to create its peer, and
//! only then commits the table and the directory entries. A failure on the
//! way destroys the peers already created and names the store that failed.
//! The regions are written as pending before any peer exists and stop
//! being pending in the commit, so peers of a create that stopped without
//! knowing whether it committed are found and destroyed too
//! (`meta/pending.rs`).
//!
//! A retried CREATE TABLE (its first try answered too late) carries the
//! first try's `request_id`, which the table keeps, so it finds its own
//! table and succeeds rather than calling the name taken.
//!
//! DROP TABLE is one meta write however many regions the table has; the
//! regions' peers are destroyed afterwards by the meta leader's worker
//! (`meta/dropped.rs`).
//!
//! Re-creating the replicas of dead stores, and the meta region's own
//! replicas, is `meta/repair.rs`; what heartbeats tell the leader (live
//! stores, GC holds, compute processes) is `meta/heartbeats.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use parking_lot::Mutex;
use prost::Message;
use quarry_coprocessor::codec::key::{record_key, table_data_range};
use quarry_coprocessor::storage::KeyRangeRef;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{
    CreateRegionRequest, CreateTableRequest, CreateTableResponse, DestroyRegionRequest, Peer,
    Region, RegionEpoch, RegionRoute, Store as StoreInfo, TableDef, TypeKind,
};
use quarry_proto::raft::KvWrite;

use crate::engine::{Cf, Engine};
use crate::keys;
use crate::node::Node;
use crate::peers::{unreachable, PeerClients};
use crate::{Error, Result};

use heartbeats::Liveness;
pub use heartbeats::{COMPUTE_LIST_SETTLE, MAX_GC_HOLD_TTL, STORE_DOWN_AFTER};

mod alter;
mod dropped;
mod heartbeats;
mod pending;
mod repair;
pub mod restores;
mod users;
mod views;
pub use alter::next_column_id;
pub use repair::REPAIR_CONCURRENCY;

/// The first id handed out by the allocator (smaller ones are reserved).
const FIRST_ID: u64 = 16;

/// How many peers CREATE TABLE creates at once (a table pre-split into
/// thousands of regions must not open tens of thousands of calls).
const DDL_CONCURRENCY: usize = 64;

/// A create checks that this store still leads the meta region once per
/// this many peers it makes.
const LEADER_CHECK_EVERY: usize = 4 * DDL_CONCURRENCY;

/// Bits of a timestamp below its physical milliseconds.
pub const TSO_LOGICAL_BITS: u32 = 18;
/// How far ahead of the physical time it hands out the oracle persists
/// its high-water mark (one meta write per window while busy).
pub const TSO_WINDOW_MS: u64 = 3000;
/// The most timestamps one request may take.
pub const MAX_TIMESTAMPS_PER_CALL: u32 = 1 << 16;

/// The oracle's position on this leader.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TsoState {
    /// The next timestamp's physical and logical parts.
    physical: u64,
    logical: u64,
    /// The high-water mark this leader persisted last.
    limit_ms: u64,
}

/// The first of `count` timestamps after `state` at wall time `now_ms`,
/// the state after them, and the mark to persist before they may be
/// handed out (when the physical time reaches the current one).
/// `persisted` is the mark stored in the meta region.
fn next_timestamps(
    state: Option<TsoState>,
    persisted: u64,
    now_ms: u64,
    count: u64,
) -> (u64, TsoState, Option<u64>) {
    let (mut physical, mut logical, limit) = match state {
        Some(s) if s.limit_ms == persisted && now_ms > s.physical => (now_ms, 0, persisted),
        Some(s) if s.limit_ms == persisted => (s.physical, s.logical, persisted),
        // Not this leader's window (none yet, or another leader moved the
        // mark): everything handed out so far is below the persisted mark.
        _ => (now_ms.max(persisted), 0, persisted),
    };
    if logical + count > 1 << TSO_LOGICAL_BITS {
        physical += 1;
        logical = 0;
    }
    let first = physical << TSO_LOGICAL_BITS | logical;
    logical += count;
    let persist = (physical >= limit).then_some(physical + TSO_WINDOW_MS);
    let next = TsoState {
        physical,
        logical,
        limit_ms: persist.unwrap_or(limit),
    };
    (first, next, persist)
}
pub struct Meta<E: Engine> {
    node: Arc<Node<E>>,
    peers: Arc<PeerClients>,
    replicas: usize,
    max_store_down: Duration,
    ddl: tokio::sync::Mutex<()>,
    ids: tokio::sync::Mutex<()>,
    tso: tokio::sync::Mutex<Option<TsoState>>,
    live: Mutex<HashMap<u64, Liveness>>,
    /// Since when this store has led the meta region (heartbeats only come
    /// to the leader, so liveness is only known after a while of leading).
    leading_since: Mutex<Option<Instant>>,
    /// Compute processes' oldest running reads: holder → (read_ts, until).
    gc_holds: Mutex<HashMap<String, (u64, Instant)>>,
    /// Compute processes that serve MPP tasks: id → (address, last heard,
    /// until).
    computes: Mutex<HashMap<String, (String, Instant, Instant)>>,
    /// Pending regions of creates (`meta/pending.rs`): id → when this
    /// leader first saw them pending.
    pending_seen: Mutex<HashMap<u64, Instant>>,
}

impl<E: Engine> Meta<E> {
    pub fn new(
        node: Arc<Node<E>>,
        peers: Arc<PeerClients>,
        replicas: usize,
        max_store_down: Duration,
    ) -> Self {
        Meta {
            node,
            peers,
            replicas: replicas.max(1),
            max_store_down,
            ddl: tokio::sync::Mutex::new(()),
            tso: tokio::sync::Mutex::new(None),
            ids: tokio::sync::Mutex::new(()),
            live: Mutex::new(HashMap::new()),
            leading_since: Mutex::new(None),
            gc_holds: Mutex::new(HashMap::new()),
            computes: Mutex::new(HashMap::new()),
            pending_seen: Mutex::new(HashMap::new()),
        }
    }

    /// Creates the meta region with this store's peer as its only replica
    /// and writes the cluster's first state: the first start of a cluster.
    pub async fn bootstrap(&self, me: StoreInfo) -> Result<()> {
        let meta_region = Region {
            id: keys::META_REGION_ID,
            start_key: keys::META_START.to_vec(),
            end_key: keys::META_END.to_vec(),
            epoch: Some(RegionEpoch {
                conf_ver: 1,
                version: 1,
            }),
            peers: vec![Peer {
                id: keys::META_REGION_ID + 1,
                store_id: me.id,
            }],
        };
        self.node.create_region(meta_region.clone()).await?;
        let region = self.wait_leader(Duration::from_secs(10)).await?;
        self.propose(
            &region,
            vec![
                (
                    keys::region_key(meta_region.id),
                    meta_region.encode_to_vec(),
                ),
                (keys::store_key(me.id), me.encode_to_vec()),
                (keys::NEXT_ID.to_vec(), FIRST_ID.to_be_bytes().to_vec()),
            ],
            vec![],
        )
        .await
    }

    async fn wait_leader(&self, within: Duration) -> Result<Region> {
        let until = Instant::now() + within;
        loop {
            match self.leader().await {
                Ok(r) => return Ok(r),
                Err(e) if Instant::now() > until => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The meta region, if this store leads it (else a region error whose
    /// NotLeader hint says where to go).
    pub async fn leader(&self) -> Result<Region> {
        self.node.read_check(keys::META_REGION_ID, None).await
    }

    fn get<M: Message + Default>(&self, key: &[u8]) -> Result<Option<M>> {
        match self.node.engine().get(Cf::Default, key)? {
            Some(b) => Ok(Some(M::decode(b.as_slice())?)),
            None => Ok(None),
        }
    }

    fn scan_all<M: Message + Default>(&self, prefix: &[u8]) -> Result<Vec<M>> {
        let mut out = Vec::new();
        let mut err = None;
        self.node.engine().scan(
            Cf::Default,
            prefix,
            &keys::prefix_end(prefix),
            &mut |_, v| {
                match M::decode(v) {
                    Ok(m) => out.push(m),
                    Err(e) => err = Some(e),
                }
                err.is_none()
            },
        )?;
        match err {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    async fn propose(
        &self,
        region: &Region,
        puts: Vec<(Vec<u8>, Vec<u8>)>,
        deletes: Vec<Vec<u8>>,
    ) -> Result<()> {
        self.propose_if(region, puts, deletes, vec![]).await
    }

    /// [`Meta::propose`], applied only if every key of `must_exist` is
    /// there when it applies (else refused whole, `InvalidInput`).
    async fn propose_if(
        &self,
        region: &Region,
        puts: Vec<(Vec<u8>, Vec<u8>)>,
        deletes: Vec<Vec<u8>>,
        must_exist: Vec<Vec<u8>>,
    ) -> Result<()> {
        if quarry_proto::failpoint::fires_on("meta_write", self.node.store_id) {
            return Err(Error::Unavailable(quarry_proto::failpoint::injected(
                "meta_write",
            )));
        }
        let mut puts = puts;
        let defines = |k: &[u8]| k.starts_with(keys::TABLE_BY_NAME) || k.starts_with(keys::VIEW);
        if puts.iter().any(|(k, _)| defines(k)) || deletes.iter().any(|k| defines(k)) {
            // A new token, not a count: writes that do not hold the DDL
            // lock need no read-modify-write to change it.
            let token = fastrand::u64(1..);
            puts.push((keys::CATALOG_VERSION.to_vec(), token.to_be_bytes().to_vec()));
        }
        self.node
            .write(
                region.id,
                region.epoch,
                KvWrite {
                    puts: puts
                        .into_iter()
                        .map(|(key, value)| KvPair { key, value })
                        .collect(),
                    deletes,
                    must_exist,
                    ..Default::default()
                },
            )
            .await
    }

    /// Reserves `n` fresh ids.
    pub async fn alloc_ids(&self, n: u64) -> Result<u64> {
        let _ids = self.ids.lock().await;
        let region = self.leader().await?;
        let next = match self.node.engine().get(Cf::Default, keys::NEXT_ID)? {
            Some(v) => u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| Error::Internal("corrupt id allocator".into()))?,
            ),
            None => FIRST_ID,
        };
        self.propose(
            &region,
            vec![(keys::NEXT_ID.to_vec(), (next + n).to_be_bytes().to_vec())],
            vec![],
        )
        .await?;
        Ok(next)
    }

    /// `count` strictly increasing timestamps, above every one handed out
    /// before by any meta leader: the first (see the module docs).
    pub async fn get_timestamps(&self, count: u32) -> Result<u64> {
        if count == 0 || count > MAX_TIMESTAMPS_PER_CALL {
            return Err(Error::InvalidInput(format!(
                "a timestamp request takes 1 to {MAX_TIMESTAMPS_PER_CALL} timestamps, not {count}"
            )));
        }
        let mut tso = self.tso.lock().await;
        let region = self.leader().await?;
        let persisted = match self.node.engine().get(Cf::Default, keys::TSO_LIMIT)? {
            Some(v) => u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| Error::Internal("corrupt timestamp oracle mark".into()))?,
            ),
            None => 0,
        };
        // The wall clock (skewed by the `clock_skew` failpoint in tests:
        // `next_timestamps` keeps the oracle monotonic through any jump).
        let now_ms = quarry_proto::failpoint::wall_clock_ms();
        let (first, next, persist) = next_timestamps(*tso, persisted, now_ms, count as u64);
        if let Some(mark) = persist {
            self.propose(
                &region,
                vec![(keys::TSO_LIMIT.to_vec(), mark.to_be_bytes().to_vec())],
                vec![],
            )
            .await?;
        }
        *tso = Some(next);
        Ok(first)
    }

    // ------------------------------------------------------------ stores

    pub async fn put_store(&self, s: StoreInfo) -> Result<()> {
        if s.id == 0 || s.addr.is_empty() {
            return Err(Error::InvalidInput(
                "a store needs an id and an address".into(),
            ));
        }
        let region = self.leader().await?;
        if self.get::<StoreInfo>(&keys::store_key(s.id))?.as_ref() != Some(&s) {
            self.propose(
                &region,
                vec![(keys::store_key(s.id), s.encode_to_vec())],
                vec![],
            )
            .await?;
        }
        self.node.resolver.set(s.id, s.addr.clone());
        self.heartbeat(s, vec![]);
        Ok(())
    }

    pub async fn stores(&self) -> Result<Vec<StoreInfo>> {
        self.leader().await?;
        self.scan_all(keys::STORE)
    }

    /// Remembers a store's address for raft messages, even before the meta
    /// region can record it (a cluster restarting needs this to elect).
    pub fn learn_address(&self, s: &StoreInfo) {
        if s.id != 0 && !s.addr.is_empty() {
            self.node.resolver.set(s.id, s.addr.clone());
        }
    }

    // ------------------------------------------------------------ tables

    pub async fn get_table(&self, name: &str) -> Result<Option<TableDef>> {
        self.leader().await?;
        self.get(&keys::table_key(name))
    }

    pub async fn tables(&self) -> Result<Vec<TableDef>> {
        self.leader().await?;
        self.scan_all(keys::TABLE_BY_NAME)
    }

    /// The catalog's version ([`keys::CATALOG_VERSION`]; 0 before any
    /// table or view was defined). Read before the definitions it
    /// versions, so a version never claims a newer catalog than the one
    /// read with it.
    pub fn catalog_version(&self) -> Result<u64> {
        match self.node.engine().get(Cf::Default, keys::CATALOG_VERSION)? {
            Some(v) => {
                Ok(u64::from_be_bytes(v.as_slice().try_into().map_err(
                    |_| Error::Internal("corrupt catalog version".into()),
                )?))
            }
            None => Ok(0),
        }
    }

    pub(crate) fn validate(t: &TableDef) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidInput(m));
        if t.name.is_empty() {
            return bad("a table needs a name".into());
        }
        if t.columns.is_empty() {
            return bad(format!("table {} needs at least one column", t.name));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &t.columns {
            if !seen.insert(c.name.to_lowercase()) {
                return bad(format!(
                    "column {} appears twice in table {}",
                    c.name, t.name
                ));
            }
            let ft = c
                .field_type
                .as_ref()
                .ok_or_else(|| Error::InvalidInput(format!("column {} has no type", c.name)))?;
            if ft.kind == TypeKind::Boolean as i32 {
                return bad(format!(
                    "column {}: BOOLEAN columns are not supported",
                    c.name
                ));
            }
            arrow_type(ft).map_err(|e| Error::InvalidInput(format!("column {}: {e}", c.name)))?;
        }
        if t.handle_column_id != 0 {
            let Some(c) = t.columns.iter().find(|c| c.id == t.handle_column_id) else {
                return bad(format!(
                    "primary key column {} does not exist",
                    t.handle_column_id
                ));
            };
            if c.field_type.as_ref().map(|f| f.kind) != Some(TypeKind::Bigint as i32) {
                return bad(format!(
                    "primary key {} must be BIGINT (Quarry keys rows by one integer)",
                    c.name
                ));
            }
        }
        Ok(())
    }

    pub async fn create_table(&self, req: CreateTableRequest) -> Result<CreateTableResponse> {
        let _ddl = self.ddl.lock().await;
        let mut table = req
            .table
            .ok_or_else(|| Error::InvalidInput("CREATE TABLE without a table".into()))?;
        if self.view_here(&table.name)?.is_some() {
            return Err(Error::InvalidInput(format!(
                "a view named {} exists; a table cannot take its name",
                table.name
            )));
        }
        if let Some(existing) = self.get_table(&table.name).await? {
            return self
                .found(&req.request_id, req.if_not_exists, existing)
                .await;
        }
        for (i, c) in table.columns.iter_mut().enumerate() {
            c.id = i as i64 + 1;
        }
        table.created_by = req.request_id.clone();
        Self::validate(&table)?;
        let mut splits = req.split_handles.clone();
        splits.sort_unstable();
        splits.dedup();

        let all = self.stores().await?;
        let mut stores = self.live_stores(&all);
        stores.sort_by_key(|s| s.id);
        if stores.is_empty() {
            return Err(Error::Unavailable("no stores are up".into()));
        }
        let replicas = self.replicas.min(stores.len());
        let n = splits.len() as u64 + 1;
        let first = self.alloc_ids(1 + n * (1 + replicas as u64)).await?;
        let table_id = first as i64;
        table.id = table_id;

        // From `t{id}_i`: the first region holds the index entries too.
        let (start, end) = table_data_range(table_id);
        table.index_space = true;
        let mut bounds = vec![start];
        bounds.extend(splits.iter().map(|h| record_key(table_id, *h)));
        bounds.push(end);
        let mut next = first + 1;
        let regions: Vec<Region> = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let id = next;
                next += 1;
                let peers = (0..replicas)
                    .map(|k| {
                        let p = Peer {
                            id: next,
                            store_id: stores[(table_id as usize + i + k) % stores.len()].id,
                        };
                        next += 1;
                        p
                    })
                    .collect();
                Region {
                    id,
                    start_key: w[0].clone(),
                    end_key: w[1].clone(),
                    epoch: Some(RegionEpoch {
                        conf_ver: 1,
                        version: 1,
                    }),
                    peers,
                }
            })
            .collect();

        // Pending before any peer exists, so that peers this create leaves
        // behind, however it ends, are found (`meta/pending.rs`).
        let meta_region = self.leader().await?;
        self.propose(&meta_region, Self::pending_puts(&regions), vec![])
            .await?;
        // That write has applied here, and so has every entry before it: a
        // try of this statement whose commit applied late is seen now,
        // where the look-up above (a lease read) may have missed it.
        if let Some(existing) = self.get_table(&table.name).await? {
            // No peer was made: a failed move only leaves entries the
            // reclaim queues later, and the answer stands.
            if let Err(e) = self.abandon_pending(&regions).await {
                tracing::warn!("an unneeded CREATE TABLE's regions stay pending: {e}");
            }
            return self
                .found(&req.request_id, req.if_not_exists, existing)
                .await;
        }

        // Create every peer on its store, in parallel; undo on failure.
        let jobs: Vec<(Region, StoreInfo)> = regions
            .iter()
            .flat_map(|r| {
                r.peers.iter().filter_map(|p| {
                    stores
                        .iter()
                        .find(|s| s.id == p.store_id)
                        .map(|s| (r.clone(), s.clone()))
                })
            })
            .collect();
        // A store that stops leading the meta region stops making peers
        // within a few batches: the next leader may reclaim this create's
        // regions and destroy them, and a peer made after that would be
        // nobody's.
        let deposed: Mutex<Option<Error>> = Mutex::new(None);
        let deposed = &deposed;
        let created: Vec<Result<()>> = futures::stream::iter(jobs.clone().into_iter().enumerate())
            .map(|(i, (r, s))| async move {
                if i % LEADER_CHECK_EVERY == LEADER_CHECK_EVERY - 1 {
                    if let Err(e) = self.leader().await {
                        *deposed.lock() = Some(e);
                    }
                }
                if let Some(e) = deposed.lock().clone() {
                    return Err(e);
                }
                self.create_on_store(&r, &s).await
            })
            .buffered(DDL_CONCURRENCY)
            .collect()
            .await;
        let undo = |made: Vec<(Region, StoreInfo)>| async move {
            futures::stream::iter(made)
                .map(|(r, s)| async move {
                    let _ = self.destroy_on_store(r.id, &s).await;
                })
                .buffer_unordered(DDL_CONCURRENCY)
                .collect::<Vec<()>>()
                .await
        };
        // Undoes a create that did not commit: its peers go now, and again
        // from the dropped queue until every one is gone (or, where this
        // store no longer leads, once the next leader reclaims them).
        let planned = &regions;
        let give_up = move |made: Vec<(Region, StoreInfo)>, e: Error| async move {
            undo(made).await;
            if let Err(q) = self.abandon_pending(planned).await {
                tracing::warn!(
                    "a failed CREATE TABLE's regions stay pending until a meta leader reclaims them: {q}"
                );
            }
            Err(e)
        };
        if let Some(Err(e)) = created.iter().find(|r| r.is_err()) {
            let e = e.clone();
            let made = jobs
                .iter()
                .zip(&created)
                .filter(|(_, c)| c.is_ok())
                .map(|(j, _)| j.clone())
                .collect();
            return give_up(made, e).await;
        }

        // The commit: the table and its regions, and the regions no longer
        // pending. It applies only if they all still are: a leader that
        // reclaimed them (this store lost the leadership for long enough,
        // and won it back) took them first, and then nothing commits.
        let mut puts = vec![(keys::table_key(&table.name), table.encode_to_vec())];
        for r in &regions {
            puts.push((keys::region_key(r.id), r.encode_to_vec()));
        }
        let pending = Self::pending_deletes(&regions);
        let committed = if quarry_proto::failpoint::fires_on("meta_create_lost", self.node.store_id)
        {
            // As if a leader change overtook the commit and lost it.
            Err(crate::peer::propose::stale_command(keys::META_REGION_ID))
        } else {
            match self.leader().await {
                Ok(meta_region) => {
                    self.propose_if(&meta_region, puts, pending.clone(), pending)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        let committed = committed.and_then(|()| {
            if quarry_proto::failpoint::fires_on("meta_create_unanswered", self.node.store_id) {
                // As if the commit applied and its answer was lost.
                Err(crate::peer::propose::stale_command(keys::META_REGION_ID))
            } else {
                Ok(())
            }
        });
        match committed {
            Ok(()) => {}
            // Refused before it was proposed (this store no longer leads
            // the meta region): nothing can commit it, so the peers go.
            Err(e) if matches!(&e, Error::Region(re) if re.not_leader.is_some()) => {
                return give_up(jobs, e).await;
            }
            // Refused at apply: the regions had been reclaimed.
            Err(Error::InvalidInput(m)) => {
                let e = Error::Unavailable(format!(
                    "creating table {}: a new meta leader reclaimed its regions before it committed ({m}); try again",
                    table.name
                ));
                return give_up(jobs, e).await;
            }
            // Proposed, outcome unknown: it may still commit, and the peers
            // must stay; if it did not, its regions stay pending and are
            // reclaimed.
            Err(e) => return Err(e),
        }
        Ok(CreateTableResponse {
            table: Some(table),
            regions: self.routes_for_table(table_id).await?,
            already_existed: false,
        })
    }

    /// The answer to a CREATE TABLE whose name `existing` has: the table,
    /// if this statement made it (a retry) or it says IF NOT EXISTS, else
    /// "already exists".
    async fn found(
        &self,
        request_id: &[u8],
        if_not_exists: bool,
        existing: TableDef,
    ) -> Result<CreateTableResponse> {
        let ours = !request_id.is_empty() && existing.created_by == request_id;
        if !(if_not_exists || ours) {
            return Err(Error::InvalidInput(format!(
                "table {} already exists",
                existing.name
            )));
        }
        let routes = self.routes_for_table(existing.id).await?;
        Ok(CreateTableResponse {
            table: Some(existing),
            regions: routes,
            already_existed: !ours,
        })
    }

    async fn create_on_store(&self, r: &Region, s: &StoreInfo) -> Result<()> {
        if s.id == self.node.store_id {
            return self.node.create_region(r.clone()).await;
        }
        let mut c = self.peers.admin(&s.addr)?;
        c.create_region(CreateRegionRequest {
            region: Some(r.clone()),
        })
        .await
        .map(|_| ())
        .map_err(|st| {
            unreachable(
                &format!("creating region {} on store {}", r.id, s.id),
                &s.addr,
                &st,
            )
        })
    }

    async fn destroy_on_store(&self, region_id: u64, s: &StoreInfo) -> Result<()> {
        if s.id == self.node.store_id {
            return self.node.destroy_region(region_id).await;
        }
        let mut c = self.peers.admin(&s.addr)?;
        c.destroy_region(DestroyRegionRequest { region_id })
            .await
            .map(|_| ())
            .map_err(|st| {
                unreachable(
                    &format!("destroying region {region_id} on store {}", s.id),
                    &s.addr,
                    &st,
                )
            })
    }

    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        let Some(table) = self.get_table(name).await? else {
            if self.view_here(name)?.is_some() {
                return Err(Error::InvalidInput(format!(
                    "{name} is a view, not a table: use DROP VIEW"
                )));
            }
            if if_exists {
                return Ok(false);
            }
            return Err(Error::InvalidInput(format!("table {name} does not exist")));
        };
        let (start, end) = table_data_range(table.id);
        let regions = self.regions_in(&start, &end).await?;
        // One meta write, however many regions: the table and its regions
        // leave the catalog and the directory, and each region is queued
        // for its peers to be destroyed (`dropped.rs`). The name is free
        // the moment this returns; the space follows.
        let meta_region = self.leader().await?;
        let mut deletes = vec![keys::table_key(name), keys::next_handle_key(table.id)];
        deletes.extend(regions.iter().map(|r| keys::region_key(r.id)));
        let queued = regions
            .iter()
            .map(|r| (keys::dropped_region_key(r.id), r.encode_to_vec()))
            .collect();
        self.propose(&meta_region, queued, deletes).await?;
        tracing::info!(table = name, regions = regions.len(), "dropped table");
        Ok(true)
    }

    // ------------------------------------------------------------ routing

    /// Directory regions overlapping `[start, end)` in key order.
    pub async fn regions_in(&self, start: &[u8], end: &[u8]) -> Result<Vec<Region>> {
        self.leader().await?;
        let mut out: Vec<Region> = self
            .scan_all::<Region>(keys::REGION)?
            .into_iter()
            .filter(|r| KeyRangeRef::of_region(r).overlaps(KeyRangeRef::new(start, end)))
            .collect();
        out.sort_by(|a, b| a.start_key.cmp(&b.start_key));
        Ok(out)
    }

    /// Routes for `[start, end)`: each region with the leader heartbeats
    /// reported (or its preferred peer) and that peer's store.
    pub async fn routes(&self, start: &[u8], end: &[u8]) -> Result<Vec<RegionRoute>> {
        let regions = self.regions_in(start, end).await?;
        let stores: BTreeMap<u64, StoreInfo> = self
            .scan_all::<StoreInfo>(keys::STORE)?
            .into_iter()
            .map(|s| (s.id, s))
            .collect();
        let live = self.live.lock();
        Ok(regions
            .into_iter()
            .map(|r| {
                let reported = r.peers.iter().find(|p| {
                    live.get(&p.store_id).is_some_and(|l| {
                        l.last_seen.elapsed() < STORE_DOWN_AFTER && l.leaders.contains(&r.id)
                    })
                });
                let leader = reported
                    .or_else(|| r.peers.get(r.id as usize % r.peers.len().max(1)))
                    .copied();
                let leader_store = leader.and_then(|p| stores.get(&p.store_id).cloned());
                RegionRoute {
                    region: Some(r),
                    leader,
                    leader_store,
                }
            })
            .collect())
    }

    async fn routes_for_table(&self, table_id: i64) -> Result<Vec<RegionRoute>> {
        let (s, e) = table_data_range(table_id);
        self.routes(&s, &e).await
    }

    /// Records regions whose range or peers changed, keeping newer epochs.
    pub async fn report_regions(&self, regions: Vec<Region>) -> Result<()> {
        let meta_region = self.leader().await?;
        let dropped: Vec<Region> = self.scan_all(keys::DROPPED_REGION)?;
        let mut puts = Vec::new();
        for r in regions {
            // A dropped table's peer reporting before it is destroyed;
            // or a region split off one (its range lies in a dropped
            // region's): queued with them, never back in the directory.
            if dropped.iter().any(|d| d.id == r.id) {
                continue;
            }
            let inside_dropped = dropped
                .iter()
                .any(|d| KeyRangeRef::of_region(d).overlaps(KeyRangeRef::of_region(&r)));
            if inside_dropped {
                puts.push((keys::dropped_region_key(r.id), r.encode_to_vec()));
                continue;
            }
            let newer = match self.get::<Region>(&keys::region_key(r.id))? {
                None => true,
                Some(old) => {
                    let (a, b) = (old.epoch.unwrap_or_default(), r.epoch.unwrap_or_default());
                    (b.version, b.conf_ver) > (a.version, a.conf_ver)
                }
            };
            if newer {
                puts.push((keys::region_key(r.id), r.encode_to_vec()));
            }
        }
        if !puts.is_empty() {
            self.propose(&meta_region, puts, vec![]).await?;
        }
        Ok(())
    }

    /// Reserves `count` handles above every handle handed out before and
    /// at least `min_next`.
    pub async fn alloc_handles(&self, table_id: i64, count: u64, min_next: i64) -> Result<i64> {
        let _ddl = self.ddl.lock().await;
        if !self.tables().await?.iter().any(|t| t.id == table_id) {
            return Err(Error::InvalidInput(format!("no table with id {table_id}")));
        }
        let region = self.leader().await?;
        let key = keys::next_handle_key(table_id);
        let stored = match self.node.engine().get(Cf::Default, &key)? {
            Some(v) => i64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| Error::Internal("corrupt handle allocator".into()))?,
            ),
            None => 1,
        };
        let first = stored.max(min_next);
        let next = first
            .checked_add(count as i64)
            .ok_or_else(|| Error::InvalidInput("handle space exhausted".into()))?;
        self.propose(&region, vec![(key, next.to_be_bytes().to_vec())], vec![])
            .await?;
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: u32 = TSO_LOGICAL_BITS;

    #[test]
    fn the_oracle_persists_its_mark_before_handing_out_past_it() {
        // A first leader: starts at the wall clock, persists a window.
        let (first, s, persist) = next_timestamps(None, 0, 1000, 1);
        assert_eq!((first, persist), (1000 << L, Some(1000 + TSO_WINDOW_MS)));
        // Same millisecond, inside the window: the logical part moves on.
        let (second, s, persist) = next_timestamps(Some(s), s.limit_ms, 1000, 5);
        assert_eq!((second, persist), ((1000 << L) + 1, None));
        // The clock goes back: never below what was handed out.
        let (third, s, _) = next_timestamps(Some(s), s.limit_ms, 10, 1);
        assert_eq!(third, (1000 << L) + 6);
        // Past the window: a new mark first.
        let (_, s, persist) = next_timestamps(Some(s), s.limit_ms, 4000, 1);
        assert_eq!((persist, s.limit_ms), (Some(7000), 7000));
        // A logical part that would overflow moves to the next millisecond.
        let full = TsoState {
            physical: 5000,
            logical: (1 << L) - 2,
            limit_ms: 7000,
        };
        let (first, _, _) = next_timestamps(Some(full), 7000, 5000, 3);
        assert_eq!(first, 5001 << L);
    }

    #[test]
    fn a_new_or_returning_leader_starts_above_the_persisted_mark() {
        // After a restart, with the wall clock behind the mark.
        let (first, _, persist) = next_timestamps(None, 9000, 2000, 1);
        assert_eq!((first, persist), (9000 << L, Some(9000 + TSO_WINDOW_MS)));
        // A leader that led before, while another leader moved the mark.
        let stale = TsoState {
            physical: 3000,
            logical: 7,
            limit_ms: 6000,
        };
        let (first, s, _) = next_timestamps(Some(stale), 12_000, 4000, 1);
        assert_eq!(first, 12_000 << L);
        assert_eq!(s.limit_ms, 12_000 + TSO_WINDOW_MS);
    }

    #[test]
    fn timestamps_only_increase_through_clock_jumps_and_leader_changes() {
        // Two leaders taking turns over one persisted mark, clocks that
        // jump both ways: every timestamp handed out is above the last.
        let mut persisted = 0u64;
        let mut leaders = [None, None];
        let mut last = 0u64;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..20_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let who = ((seed >> 7) % 2) as usize;
            let now = 1_000_000 + i + (seed >> 20) % 5000 - 2500;
            let count = 1 + (seed >> 40) % 3000;
            let (first, next, persist) = next_timestamps(leaders[who], persisted, now, count);
            if let Some(mark) = persist {
                persisted = mark;
            }
            // Everything handed out stays below the persisted mark.
            assert!(next.physical < persisted, "{next:?} vs {persisted}");
            assert!(first > last || last == 0, "{first} after {last}");
            last = first + count - 1;
            leaders[who] = Some(next);
        }
    }
}
