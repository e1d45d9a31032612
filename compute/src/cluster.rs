//! Compute's connections to the storage cluster: the Meta service (any
//! store answers; we fail over across the configured addresses) and
//! per-store gRPC channels for Coprocessor and Kv calls.
//!
//! [`Routes`], [`CopTransport`] and [`KvTransport`] are the seams the
//! dispatch and retry layers are tested through; [`Cluster`] implements
//! them over tonic.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_proto::coprocessor::coprocessor_client::CoprocessorClient;
use quarry_proto::coprocessor::{BatchCopRequest, BatchCopResponse, CopRequest, CopResponse};
use quarry_proto::kv::kv_client::KvClient;
use quarry_proto::kv::{BatchPutRequest, BatchPutResponse};
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::*;
use quarry_proto::MAX_MESSAGE_BYTES;
use tonic::transport::Channel;

use crate::{Error, Result};

/// How long one try of a DDL call may take, and all its tries together.
const DDL_ATTEMPT: Duration = Duration::from_secs(60);
const DDL_TIMEOUT: Duration = Duration::from_secs(120);

/// An id for one DDL statement, the same on all its tries: this process,
/// the time, and a counter.
fn request_id() -> Vec<u8> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut id = Vec::with_capacity(20);
    id.extend_from_slice(&std::process::id().to_be_bytes());
    id.extend_from_slice(&nanos.to_be_bytes());
    id.extend_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    id
}

/// Where regions are: the meta directory.
pub trait Routes: Send + Sync {
    fn get_regions<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<RegionRoute>>>;
    fn get_stores(&self) -> BoxFuture<'_, Result<Vec<Store>>>;
}

/// A batch's answers, one per task as the store finishes it.
pub type BatchAnswers = BoxStream<'static, std::result::Result<BatchCopResponse, tonic::Status>>;

/// Sends coprocessor requests to a store: one region's, or a batch of
/// several regions' under one DAG.
pub trait CopTransport: Send + Sync {
    fn coprocessor(
        &self,
        addr: &str,
        req: CopRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<CopResponse, tonic::Status>>;

    fn batch_coprocessor(
        &self,
        addr: &str,
        req: BatchCopRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchAnswers, tonic::Status>>;
}

/// Sends one batch of writes to a store.
pub trait KvTransport: Send + Sync {
    fn batch_put(
        &self,
        addr: &str,
        req: BatchPutRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchPutResponse, tonic::Status>>;
}

pub struct Cluster {
    /// Store addresses to reach the Meta service through.
    meta_addrs: Vec<String>,
    /// The one of them that answered last: calls start there, so a store
    /// that is down (or cut off, answering nothing) costs one call its
    /// wait, not every call.
    meta_first: std::sync::atomic::AtomicUsize,
    channels: Mutex<HashMap<String, Channel>>,
    meta_timeout: Duration,
    /// Why the last call to meta that did not answer failed, until one
    /// answers: a caller that stops waiting for a call made on its behalf
    /// (a timestamp) says whether meta is down or only slow.
    meta_failing: Mutex<Option<String>>,
    /// The catalog kept between statements (`catalog_cache.rs`).
    catalogs: crate::catalog_cache::CatalogCache,
}

impl Cluster {
    pub fn new(meta_addrs: Vec<String>, meta_timeout: Duration) -> Self {
        Cluster {
            meta_addrs,
            meta_first: std::sync::atomic::AtomicUsize::new(0),
            channels: Mutex::new(HashMap::new()),
            meta_timeout,
            meta_failing: Mutex::new(None),
            catalogs: Default::default(),
        }
    }

    /// Why meta's last unanswered call failed, while no call since has
    /// been answered (None: meta answers, or has not been asked).
    pub fn meta_failure(&self) -> Option<String> {
        self.meta_failing.lock().clone()
    }

    pub fn channel(&self, addr: &str) -> Result<Channel> {
        if let Some(c) = self.channels.lock().get(addr) {
            return Ok(c.clone());
        }
        let ep = quarry_proto::security::endpoint(addr)
            .map_err(|e| Error::InvalidInput(format!("store: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_adaptive_window(true)
            // A hung store stops answering pings: its calls fail in ~3 s
            // and go to another replica, however long they were allowed.
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true);
        let ch = ep.connect_lazy();
        self.channels.lock().insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    pub fn kv(&self, addr: &str) -> Result<KvClient<Channel>> {
        Ok(KvClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Calls the Meta service, trying each configured store until one
    /// answers. While the meta region has no reachable leader (an election
    /// after its leader died) the rounds repeat with backoff, within
    /// `meta_timeout`, or what is left of the statement's deadline when a
    /// statement makes the call (`statement_deadline.rs`): a statement
    /// whose meta region lost its quorum fails within its timeout as
    /// unavailable, naming the meta service, rather than outliving it. An
    /// error that is the caller's fault returns at once.
    pub async fn meta<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(MetaClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let timeout = match crate::statement_deadline::current_deadline() {
            Some(d) => self
                .meta_timeout
                .min(d.saturating_duration_since(std::time::Instant::now())),
            None => self.meta_timeout,
        };
        self.meta_within(what, timeout, Duration::from_secs(4), call)
            .await
    }

    /// [`Cluster::meta`] for DDL, whose one call may take long (creating
    /// thousands of regions' peers): each try gets up to
    /// [`DDL_ATTEMPT`], all of them [`DDL_TIMEOUT`].
    async fn meta_ddl<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(MetaClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let timeout = self.meta_timeout.max(DDL_TIMEOUT);
        let out = self.meta_within(what, timeout, DDL_ATTEMPT, call).await;
        // Whether it answered or not, a definition may have changed: this
        // process's next statement reads the catalog afresh.
        self.catalogs.forget();
        out
    }

    async fn meta_within<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        max_attempt: Duration,
        call: F,
    ) -> Result<T>
    where
        F: Fn(MetaClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = std::time::Instant::now() + timeout;
        let mut backoff = crate::backoff::Backoff::new(
            Duration::from_millis(10),
            Duration::from_millis(500),
            deadline,
        );
        let mut last = String::new();
        let n = self.meta_addrs.len();
        loop {
            let first = self.meta_first.load(std::sync::atomic::Ordering::Relaxed);
            for i in (0..n).map(|k| (first + k) % n) {
                let addr = &self.meta_addrs[i];
                let client = MetaClient::new(self.channel(addr)?)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES);
                // Each attempt is short, so a hung store costs one attempt.
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let attempt = left.clamp(Duration::from_millis(100), max_attempt);
                match tokio::time::timeout(attempt, call(client)).await {
                    Ok(Ok(r)) => {
                        self.meta_first
                            .store(i, std::sync::atomic::Ordering::Relaxed);
                        *self.meta_failing.lock() = None;
                        return Ok(r.into_inner());
                    }
                    Ok(Err(st)) => match st.code() {
                        tonic::Code::InvalidArgument => {
                            return Err(Error::InvalidInput(st.message().into()))
                        }
                        tonic::Code::Internal => {
                            return Err(Error::Internal(format!("{what}: {}", st.message())))
                        }
                        _ => last = format!("{addr}: {}", crate::status_detail(&st)),
                    },
                    Err(_) => last = format!("{addr}: no answer in time"),
                }
                tracing::debug!("{what}: meta at {addr} failed: {last}");
                *self.meta_failing.lock() = Some(last.clone());
            }
            let msg = || {
                format!(
                    "{what}: the meta service is unavailable (tried {}; last error {last})",
                    self.meta_addrs.join(", ")
                )
            };
            if backoff.sleep(&msg).await.is_err() {
                return Err(Error::Unavailable(msg()));
            }
        }
    }

    /// Holds GC (`min_read_ts` 0: releases) for `holder` at `min_read_ts`
    /// for `ttl`, in the meta leader's memory; `what` names the holder in
    /// errors.
    pub async fn hold_gc(
        &self,
        what: &str,
        holder: &str,
        min_read_ts: u64,
        ttl: Duration,
    ) -> Result<()> {
        let req = HoldGcRequest {
            holder: holder.to_string(),
            min_read_ts,
            ttl_ms: ttl.as_millis() as u64,
        };
        self.meta(what, |mut c| {
            let req = req.clone();
            async move { c.hold_gc(req).await }
        })
        .await?;
        Ok(())
    }

    pub async fn get_table(&self, name: &str) -> Result<Option<TableDef>> {
        let req = GetTableRequest { name: name.into() };
        Ok(self
            .meta("looking up a table", |mut c| {
                let r = req.clone();
                async move { c.get_table(r).await }
            })
            .await?
            .table)
    }

    pub async fn list_tables(&self) -> Result<Vec<TableDef>> {
        Ok(self.catalog().await?.tables)
    }

    /// Every table and view, in one meta call (kept for
    /// [`Cluster::kept_catalog`]).
    pub async fn catalog(&self) -> Result<ListTablesResponse> {
        let generation = self.catalogs.generation();
        let asked = std::time::Instant::now();
        let catalog = self
            .meta("listing tables", |mut c| async move {
                c.list_tables(ListTablesRequest {}).await
            })
            .await?;
        self.catalogs
            .keep(generation, std::sync::Arc::new(catalog.clone()), asked);
        Ok(catalog)
    }

    /// The catalog kept from an earlier call, or a fresh one
    /// (`catalog_cache.rs` says how a caller checks it), and how fresh.
    pub async fn kept_catalog(
        &self,
    ) -> Result<(
        std::sync::Arc<ListTablesResponse>,
        crate::catalog_cache::Freshness,
    )> {
        use crate::catalog_cache::Freshness;
        match self.catalogs.get() {
            Some((kept, true)) => Ok((kept, Freshness::Confirmed)),
            Some((kept, false)) => Ok((kept, Freshness::Unconfirmed)),
            None => Ok((std::sync::Arc::new(self.catalog().await?), Freshness::Read)),
        }
    }

    /// The catalog's version was `version` when a timestamp asked for at
    /// `asked` was taken.
    pub fn confirm_catalog(&self, version: u64, asked: std::time::Instant) {
        self.catalogs.confirm(version, asked);
    }

    /// Drops the kept catalog: a query found it out of date.
    pub fn forget_catalog(&self) {
        self.catalogs.forget();
    }

    /// Replaces the table `name` by `table` if it is still `expected`
    /// (encoded); returns the definition stored.
    pub async fn alter_table(
        &self,
        name: &str,
        table: TableDef,
        expected: Vec<u8>,
    ) -> Result<TableDef> {
        let req = AlterTableRequest {
            name: name.into(),
            table: Some(table),
            expected,
        };
        self.meta_ddl("altering a table", |mut c| {
            let r = req.clone();
            async move { c.alter_table(r).await }
        })
        .await?
        .table
        .ok_or_else(|| Error::Internal("ALTER TABLE answered no table".into()))
    }

    /// Creates (or with `or_replace` replaces) a view; true if one was
    /// replaced.
    pub async fn create_view(&self, view: ViewDef, or_replace: bool) -> Result<bool> {
        let req = CreateViewRequest {
            view: Some(view),
            or_replace,
        };
        Ok(self
            .meta_ddl("creating a view", |mut c| {
                let r = req.clone();
                async move { c.create_view(r).await }
            })
            .await?
            .replaced)
    }

    pub async fn drop_view(&self, name: &str, if_exists: bool) -> Result<bool> {
        let req = DropViewRequest {
            name: name.into(),
            if_exists,
        };
        Ok(self
            .meta_ddl("dropping a view", |mut c| {
                let r = req.clone();
                async move { c.drop_view(r).await }
            })
            .await?
            .dropped)
    }

    /// Creates a table. Every try carries one request id, so a retry
    /// after a try that succeeded too late to answer finds its table
    /// rather than calling the name taken.
    pub async fn create_table(&self, mut req: CreateTableRequest) -> Result<CreateTableResponse> {
        if req.request_id.is_empty() {
            req.request_id = request_id();
        }
        self.meta_ddl("creating a table", |mut c| {
            let r = req.clone();
            async move { c.create_table(r).await }
        })
        .await
    }

    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let req = DropTableRequest {
            name: name.into(),
            if_exists,
        };
        Ok(self
            .meta_ddl("dropping a table", |mut c| {
                let r = req.clone();
                async move { c.drop_table(r).await }
            })
            .await?
            .dropped)
    }

    /// Creates, alters or replaces a user (`mode`), its password already
    /// hashed.
    pub async fn put_user(&self, user: UserDef, mode: PutUserMode) -> Result<()> {
        let req = PutUserRequest {
            user: Some(user),
            mode: mode as i32,
        };
        self.meta("writing a user", |mut c| {
            let r = req.clone();
            async move { c.put_user(r).await }
        })
        .await?;
        Ok(())
    }

    pub async fn drop_user(&self, name: &str, if_exists: bool) -> Result<bool> {
        let req = DropUserRequest {
            name: name.into(),
            if_exists,
        };
        Ok(self
            .meta("dropping a user", |mut c| {
                let r = req.clone();
                async move { c.drop_user(r).await }
            })
            .await?
            .dropped)
    }

    pub async fn get_user(&self, name: &str) -> Result<Option<UserDef>> {
        let req = GetUserRequest { name: name.into() };
        Ok(self
            .meta("looking up a user", |mut c| {
                let r = req.clone();
                async move { c.get_user(r).await }
            })
            .await?
            .user)
    }

    pub async fn list_users(&self) -> Result<Vec<UserDef>> {
        Ok(self
            .meta("listing users", |mut c| async move {
                c.list_users(ListUsersRequest {}).await
            })
            .await?
            .users)
    }

    pub async fn alloc_handles(&self, table_id: i64, count: u64, min_next: i64) -> Result<i64> {
        let req = AllocHandlesRequest {
            table_id,
            count,
            min_next,
        };
        Ok(self
            .meta("allocating row handles", |mut c| async move {
                c.alloc_handles(req).await
            })
            .await?
            .first)
    }
}

impl Routes for Cluster {
    fn get_regions<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> BoxFuture<'a, Result<Vec<RegionRoute>>> {
        Box::pin(async move {
            let req = GetRegionsRequest {
                start_key: start.to_vec(),
                end_key: end.to_vec(),
            };
            Ok(self
                .meta("locating regions", |mut c| {
                    let r = req.clone();
                    async move { c.get_regions(r).await }
                })
                .await?
                .regions)
        })
    }

    fn get_stores(&self) -> BoxFuture<'_, Result<Vec<Store>>> {
        Box::pin(async move {
            Ok(self
                .meta("listing stores", |mut c| async move {
                    c.get_stores(GetStoresRequest {}).await
                })
                .await?
                .stores)
        })
    }
}

impl Cluster {
    /// A coprocessor client for the store at `addr`, with the cluster's
    /// message bound both ways.
    fn cop_client(
        &self,
        addr: &str,
    ) -> std::result::Result<CoprocessorClient<Channel>, tonic::Status> {
        let ch = self
            .channel(addr)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        Ok(CoprocessorClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

/// `req` with a gRPC deadline of `timeout`.
fn with_timeout<T>(req: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(req);
    r.set_timeout(timeout);
    r
}

impl CopTransport for Cluster {
    fn coprocessor(
        &self,
        addr: &str,
        req: CopRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<CopResponse, tonic::Status>> {
        let client = self.cop_client(addr);
        Box::pin(async move {
            let r = client?.coprocessor(with_timeout(req, timeout)).await?;
            Ok(r.into_inner())
        })
    }

    fn batch_coprocessor(
        &self,
        addr: &str,
        req: BatchCopRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchAnswers, tonic::Status>> {
        let client = self.cop_client(addr);
        Box::pin(async move {
            let r = client?
                .batch_coprocessor(with_timeout(req, timeout))
                .await?;
            Ok(r.into_inner().boxed())
        })
    }
}

impl KvTransport for Cluster {
    fn batch_put(
        &self,
        addr: &str,
        req: BatchPutRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<BatchPutResponse, tonic::Status>> {
        let client = self.kv(addr);
        Box::pin(async move {
            let mut c = client.map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
            let r = c.batch_put(with_timeout(req, timeout)).await?;
            Ok(r.into_inner())
        })
    }
}
