//! The catalog and the region directory: the meta region's contents and
//! the operations on them.
//!
//! The meta region (id 1, keys `[m, n)`) is created by the store that
//! bootstraps the cluster. The store holding it runs [`Meta`]: table
//! definitions, the directory of regions (id → range, epoch, peers), the
//! stores and their addresses, and the id allocators, all persisted as keys
//! of the meta region (see `keys.rs`) and cached in memory. Every other
//! store forwards Meta calls here (`service/meta.rs`), so any store answers
//! routing questions and compute keeps no state.
//!
//! CREATE TABLE allocates ids, cuts the table's key range at the requested
//! split handles, places the regions round-robin over the registered
//! stores, asks each store to create its region (Admin service), and only
//! then commits the table and the directory entries in one write batch. A
//! failure on the way destroys the regions already created and names the
//! store that failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use prost::Message;
use quarry_coprocessor::codec::key::{record_key, table_record_range};
use quarry_coprocessor::types::arrow_type;
use quarry_proto::meta::{
    CreateRegionRequest, CreateTableRequest, CreateTableResponse, DestroyRegionRequest, Peer,
    Region, RegionEpoch, RegionRoute, Store as StoreInfo, TableDef, TypeKind,
};

use crate::engine::{Cf, Engine, WriteBatch};
use crate::keys;
use crate::peers::{unreachable, PeerClients};
use crate::store::Store;
use crate::{Error, Result};

/// The first id handed out by the allocator (smaller ones are reserved).
const FIRST_ID: u64 = 16;

#[derive(Default)]
struct State {
    tables: BTreeMap<String, TableDef>,
    regions: BTreeMap<u64, Region>,
    stores: BTreeMap<u64, StoreInfo>,
    next_id: u64,
}

pub struct Meta<E: Engine> {
    store: Arc<Store<E>>,
    peers: Arc<PeerClients>,
    state: RwLock<State>,
    /// Serializes catalog changes (held across calls to other stores).
    ddl: tokio::sync::Mutex<()>,
}

fn decode_all<M: Message + Default>(e: &impl Engine, prefix: &[u8]) -> Result<Vec<M>> {
    let mut out = Vec::new();
    let mut err = None;
    e.scan(
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

impl<E: Engine> Meta<E> {
    /// Creates the meta region on `store` and records `self_store` in it:
    /// the first start of a new cluster.
    pub fn bootstrap(store: &Store<E>, self_store: StoreInfo) -> Result<()> {
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
                store_id: store.id,
            }],
        };
        store.create_region(meta_region.clone())?;
        let mut wb = WriteBatch::new();
        wb.put(
            Cf::Default,
            keys::region_key(meta_region.id),
            meta_region.encode_to_vec(),
        );
        wb.put(
            Cf::Default,
            keys::store_key(self_store.id),
            self_store.encode_to_vec(),
        );
        wb.put(
            Cf::Default,
            keys::NEXT_ID.to_vec(),
            FIRST_ID.to_be_bytes().to_vec(),
        );
        store.engine().write(&wb, true)
    }

    /// Loads the catalog from the meta region held by `store`.
    pub fn load(store: Arc<Store<E>>, peers: Arc<PeerClients>) -> Result<Self> {
        let e = store.engine().as_ref();
        let mut st = State {
            next_id: FIRST_ID,
            ..Default::default()
        };
        for t in decode_all::<TableDef>(e, keys::TABLE_BY_NAME)? {
            st.tables.insert(t.name.clone(), t);
        }
        for r in decode_all::<Region>(e, keys::REGION)? {
            st.regions.insert(r.id, r);
        }
        for s in decode_all::<StoreInfo>(e, keys::STORE)? {
            st.stores.insert(s.id, s);
        }
        if let Some(v) = e.get(Cf::Default, keys::NEXT_ID)? {
            let arr: [u8; 8] = v
                .as_slice()
                .try_into()
                .map_err(|_| Error::Internal("corrupt id allocator".into()))?;
            st.next_id = u64::from_be_bytes(arr);
        }
        Ok(Meta {
            store,
            peers,
            state: RwLock::new(st),
            ddl: tokio::sync::Mutex::new(()),
        })
    }

    fn write(&self, wb: &WriteBatch) -> Result<()> {
        self.store.engine().write(wb, true)
    }

    // ------------------------------------------------------------ stores

    pub fn put_store(&self, s: StoreInfo) -> Result<()> {
        if s.id == 0 || s.addr.is_empty() {
            return Err(Error::InvalidInput(
                "a store needs an id and an address".into(),
            ));
        }
        let mut wb = WriteBatch::new();
        wb.put(Cf::Default, keys::store_key(s.id), s.encode_to_vec());
        self.write(&wb)?;
        self.state.write().stores.insert(s.id, s);
        Ok(())
    }

    pub fn stores(&self) -> Vec<StoreInfo> {
        self.state.read().stores.values().cloned().collect()
    }

    // ------------------------------------------------------------ tables

    pub fn get_table(&self, name: &str) -> Option<TableDef> {
        self.state.read().tables.get(name).cloned()
    }

    pub fn tables(&self) -> Vec<TableDef> {
        self.state.read().tables.values().cloned().collect()
    }

    fn validate(t: &TableDef) -> Result<()> {
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
            let kind = c.field_type.as_ref().map(|f| f.kind);
            if kind != Some(TypeKind::Bigint as i32) {
                return bad(format!(
                    "primary key {} must be BIGINT (Quarry keys rows by one integer)",
                    c.name
                ));
            }
        }
        Ok(())
    }

    fn alloc_ids(st: &mut State, n: u64, wb: &mut WriteBatch) -> u64 {
        let first = st.next_id;
        st.next_id += n;
        wb.put(
            Cf::Default,
            keys::NEXT_ID.to_vec(),
            st.next_id.to_be_bytes().to_vec(),
        );
        first
    }

    pub async fn create_table(&self, req: CreateTableRequest) -> Result<CreateTableResponse> {
        let _ddl = self.ddl.lock().await;
        let mut table = req
            .table
            .ok_or_else(|| Error::InvalidInput("CREATE TABLE without a table".into()))?;
        if let Some(existing) = self.get_table(&table.name) {
            if req.if_not_exists {
                let routes = self.routes_for_table(existing.id)?;
                return Ok(CreateTableResponse {
                    table: Some(existing),
                    regions: routes,
                    already_existed: true,
                });
            }
            return Err(Error::InvalidInput(format!(
                "table {} already exists",
                table.name
            )));
        }
        // Column ids are positions + 1; the handle column id refers to them.
        for (i, c) in table.columns.iter_mut().enumerate() {
            c.id = i as i64 + 1;
        }
        Self::validate(&table)?;
        let mut splits = req.split_handles.clone();
        splits.sort_unstable();
        splits.dedup();

        let mut wb = WriteBatch::new();
        let (stores, table_id, first_region_id) = {
            let mut st = self.state.write();
            let stores: Vec<StoreInfo> = st.stores.values().cloned().collect();
            if stores.is_empty() {
                return Err(Error::Unavailable("no stores are registered".into()));
            }
            let table_id = Self::alloc_ids(&mut st, 1, &mut wb) as i64;
            let first = Self::alloc_ids(&mut st, 2 * (splits.len() as u64 + 1), &mut wb);
            (stores, table_id, first)
        };
        table.id = table_id;

        let (start, end) = table_record_range(table_id);
        let mut bounds = vec![start];
        bounds.extend(splits.iter().map(|h| record_key(table_id, *h)));
        bounds.push(end);
        let regions: Vec<Region> = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let id = first_region_id + 2 * i as u64;
                let store = &stores[(table_id as usize + i) % stores.len()];
                Region {
                    id,
                    start_key: w[0].clone(),
                    end_key: w[1].clone(),
                    epoch: Some(RegionEpoch {
                        conf_ver: 1,
                        version: 1,
                    }),
                    peers: vec![Peer {
                        id: id + 1,
                        store_id: store.id,
                    }],
                }
            })
            .collect();

        // Create every region on its store, in parallel; undo on failure.
        let created =
            futures::future::join_all(regions.iter().map(|r| self.create_on_store(r, &stores)))
                .await;
        if let Some(Err(e)) = created.iter().find(|r| r.is_err()) {
            let e = e.clone();
            let done: Vec<&Region> = regions
                .iter()
                .zip(&created)
                .filter(|(_, c)| c.is_ok())
                .map(|(r, _)| r)
                .collect();
            for r in done {
                let _ = self.destroy_on_store(r, &stores).await;
            }
            return Err(e);
        }

        wb.put(
            Cf::Default,
            keys::table_key(&table.name),
            table.encode_to_vec(),
        );
        for r in &regions {
            wb.put(Cf::Default, keys::region_key(r.id), r.encode_to_vec());
        }
        self.write(&wb)?;
        {
            let mut st = self.state.write();
            st.tables.insert(table.name.clone(), table.clone());
            for r in &regions {
                st.regions.insert(r.id, r.clone());
            }
        }
        Ok(CreateTableResponse {
            table: Some(table),
            regions: self.routes_for_table(table_id)?,
            already_existed: false,
        })
    }

    fn store_of<'a>(r: &Region, stores: &'a [StoreInfo]) -> Result<&'a StoreInfo> {
        let sid = r.peers.first().map(|p| p.store_id).unwrap_or(0);
        stores
            .iter()
            .find(|s| s.id == sid)
            .ok_or_else(|| Error::Internal(format!("region {} on unknown store {sid}", r.id)))
    }

    async fn create_on_store(&self, r: &Region, stores: &[StoreInfo]) -> Result<()> {
        let s = Self::store_of(r, stores)?;
        if s.id == self.store.id {
            return self.store.create_region(r.clone());
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

    async fn destroy_on_store(&self, r: &Region, stores: &[StoreInfo]) -> Result<()> {
        let s = Self::store_of(r, stores)?;
        if s.id == self.store.id {
            return self.store.destroy_region(r.id);
        }
        let mut c = self.peers.admin(&s.addr)?;
        c.destroy_region(DestroyRegionRequest { region_id: r.id })
            .await
            .map(|_| ())
            .map_err(|st| {
                unreachable(
                    &format!("destroying region {} on store {}", r.id, s.id),
                    &s.addr,
                    &st,
                )
            })
    }

    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        let Some(table) = self.get_table(name) else {
            if if_exists {
                return Ok(false);
            }
            return Err(Error::InvalidInput(format!("table {name} does not exist")));
        };
        let (start, end) = table_record_range(table.id);
        let regions = self.regions_in(&start, &end);
        let stores = self.stores();
        for r in &regions {
            // A store that is down keeps an orphan region; the table is
            // gone from the catalog either way.
            if let Err(e) = self.destroy_on_store(r, &stores).await {
                tracing::warn!("drop table {name}: {e}");
            }
        }
        let mut wb = WriteBatch::new();
        wb.delete(Cf::Default, keys::table_key(name));
        wb.delete(Cf::Default, keys::next_handle_key(table.id));
        for r in &regions {
            wb.delete(Cf::Default, keys::region_key(r.id));
        }
        self.write(&wb)?;
        let mut st = self.state.write();
        st.tables.remove(name);
        for r in &regions {
            st.regions.remove(&r.id);
        }
        Ok(true)
    }

    // ------------------------------------------------------------ routing

    /// Regions overlapping `[start, end)` in key order.
    pub fn regions_in(&self, start: &[u8], end: &[u8]) -> Vec<Region> {
        let st = self.state.read();
        let mut out: Vec<Region> = st
            .regions
            .values()
            .filter(|r| {
                (end.is_empty() || r.start_key.as_slice() < end)
                    && (r.end_key.is_empty() || r.end_key.as_slice() > start)
            })
            .cloned()
            .collect();
        out.sort_by(|a, b| a.start_key.cmp(&b.start_key));
        out
    }

    /// Routes (region, leader, leader's store) for `[start, end)`.
    pub fn routes(&self, start: &[u8], end: &[u8]) -> Vec<RegionRoute> {
        let stores = self.state.read().stores.clone();
        self.regions_in(start, end)
            .into_iter()
            .map(|r| {
                let leader = r.peers.first().cloned();
                let leader_store = leader
                    .as_ref()
                    .and_then(|p| stores.get(&p.store_id).cloned());
                RegionRoute {
                    region: Some(r),
                    leader,
                    leader_store,
                }
            })
            .collect()
    }

    fn routes_for_table(&self, table_id: i64) -> Result<Vec<RegionRoute>> {
        let (s, e) = table_record_range(table_id);
        Ok(self.routes(&s, &e))
    }

    /// Reserves `count` handles above every handle handed out before and
    /// at least `min_next`.
    pub async fn alloc_handles(&self, table_id: i64, count: u64, min_next: i64) -> Result<i64> {
        let _ddl = self.ddl.lock().await;
        if !self.state.read().tables.values().any(|t| t.id == table_id) {
            return Err(Error::InvalidInput(format!("no table with id {table_id}")));
        }
        let key = keys::next_handle_key(table_id);
        let stored = match self.store.engine().get(Cf::Default, &key)? {
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
        let mut wb = WriteBatch::new();
        wb.put(Cf::Default, key, next.to_be_bytes().to_vec());
        self.write(&wb)?;
        Ok(first)
    }
}
