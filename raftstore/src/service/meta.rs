//! The Meta service on every store. The store holding the meta region's
//! leader answers; any other store forwards once: to the leader its replica
//! names, or to its `--join` stores when it holds no replica.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::meta_server::Meta as MetaRpc;
use quarry_proto::meta::*;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::meta::Meta;
use crate::peers::PeerClients;
use crate::Error;

/// How many times a meta request was forwarded already.
const FORWARDED: &str = "quarry-forwarded";
/// A store without a meta replica forwards to its join address, which
/// forwards to the meta leader it knows of: two hops reach the leader,
/// and no request circles for longer.
const MAX_HOPS: u32 = 2;

/// How long a forwarded call may take: a hung meta leader is replaced
/// within seconds, so do not wait on it.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a forwarded CREATE or DROP TABLE may take: creating the peers
/// of thousands of regions takes seconds.
const DDL_FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a DDL statement to its end on its own task, so a caller that
/// gives up (a timeout, a dropped connection) cannot stop it half-way:
/// CREATE TABLE then either commits or destroys the peers it made, rather
/// than leaving them orphaned when its future is dropped.
async fn finish_even_if_dropped<R: Send + 'static>(
    ddl: impl Future<Output = crate::Result<R>> + Send + 'static,
) -> crate::Result<R> {
    tokio::spawn(ddl)
        .await
        .map_err(|e| Error::Internal(format!("DDL task: {e}")))?
}

pub struct MetaService<E: Engine> {
    meta: Arc<Meta<E>>,
    peers: Arc<PeerClients>,
    join: Vec<String>,
}

fn retriable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::DeadlineExceeded
    )
}

impl<E: Engine> MetaService<E> {
    pub fn new(meta: Arc<Meta<E>>, peers: Arc<PeerClients>, join: Vec<String>) -> Self {
        MetaService { meta, peers, join }
    }

    pub fn meta(&self) -> &Arc<Meta<E>> {
        &self.meta
    }

    /// Answers locally, or forwards to where the meta leader is, waiting
    /// up to `forward_timeout` for the answer.
    async fn route<T, R, L, LF, F, Fut>(
        &self,
        req: Request<T>,
        forward_timeout: Duration,
        local: L,
        remote: F,
    ) -> Result<Response<R>, Status>
    where
        T: Clone,
        L: FnOnce(Arc<Meta<E>>, T) -> LF,
        LF: Future<Output = crate::Result<R>>,
        F: Fn(MetaClient<Channel>, Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        let hops: u32 = req
            .metadata()
            .get(FORWARDED)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let msg = req.into_inner();
        let re = match local(self.meta.clone(), msg.clone()).await {
            Ok(r) => return Ok(Response::new(r)),
            Err(Error::Region(re)) => re,
            Err(e) => return Err(e.into()),
        };
        let targets: Vec<String> = match (&re.not_leader, &re.region_not_found) {
            (Some(nl), _) => nl.leader_store.iter().map(|s| s.addr.clone()).collect(),
            (None, Some(_)) => self.join.clone(),
            _ => vec![],
        };
        if hops >= MAX_HOPS || targets.is_empty() {
            return Err(Status::unavailable(format!(
                "meta region unavailable: {}",
                re.message
            )));
        }
        let mut last = re.message.clone();
        for addr in targets {
            let client = self.peers.meta(&addr).map_err(Status::from)?;
            let mut r = Request::new(msg.clone());
            r.metadata_mut()
                .insert(FORWARDED, tonic::metadata::MetadataValue::from(hops + 1));
            r.set_timeout(forward_timeout);
            match remote(client, r).await {
                Ok(resp) => return Ok(resp),
                Err(st) if retriable(st.code()) => last = format!("{addr}: {}", st.message()),
                Err(st) => return Err(st),
            }
        }
        Err(Status::unavailable(format!(
            "meta region unavailable: {last}"
        )))
    }
}

#[tonic::async_trait]
impl<E: Engine> MetaRpc for MetaService<E> {
    async fn create_table(
        &self,
        req: Request<CreateTableRequest>,
    ) -> Result<Response<CreateTableResponse>, Status> {
        self.route(
            req,
            DDL_FORWARD_TIMEOUT,
            |m, r| finish_even_if_dropped(async move { m.create_table(r).await }),
            |mut c, r| async move { c.create_table(r).await },
        )
        .await
    }

    async fn drop_table(
        &self,
        req: Request<DropTableRequest>,
    ) -> Result<Response<DropTableResponse>, Status> {
        self.route(
            req,
            DDL_FORWARD_TIMEOUT,
            |m, r| {
                finish_even_if_dropped(async move {
                    Ok(DropTableResponse {
                        dropped: m.drop_table(&r.name, r.if_exists).await?,
                    })
                })
            },
            |mut c, r| async move { c.drop_table(r).await },
        )
        .await
    }

    async fn get_table(
        &self,
        req: Request<GetTableRequest>,
    ) -> Result<Response<GetTableResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(GetTableResponse {
                    table: m.get_table(&r.name).await?,
                })
            },
            |mut c, r| async move { c.get_table(r).await },
        )
        .await
    }

    async fn list_tables(
        &self,
        req: Request<ListTablesRequest>,
    ) -> Result<Response<ListTablesResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, _| async move {
                m.leader().await?;
                let catalog_version = m.catalog_version()?;
                Ok(ListTablesResponse {
                    tables: m.tables().await?,
                    views: m.views().await?,
                    catalog_version,
                })
            },
            |mut c, r| async move { c.list_tables(r).await },
        )
        .await
    }

    async fn alter_table(
        &self,
        req: Request<AlterTableRequest>,
    ) -> Result<Response<AlterTableResponse>, Status> {
        self.route(
            req,
            DDL_FORWARD_TIMEOUT,
            |m, r| {
                finish_even_if_dropped(async move {
                    let table = r
                        .table
                        .ok_or_else(|| Error::InvalidInput("ALTER TABLE without a table".into()))?;
                    Ok(AlterTableResponse {
                        table: Some(m.alter_table(&r.name, table, &r.expected).await?),
                    })
                })
            },
            |mut c, r| async move { c.alter_table(r).await },
        )
        .await
    }

    async fn create_view(
        &self,
        req: Request<CreateViewRequest>,
    ) -> Result<Response<CreateViewResponse>, Status> {
        self.route(
            req,
            DDL_FORWARD_TIMEOUT,
            |m, r| {
                finish_even_if_dropped(async move {
                    let view = r
                        .view
                        .ok_or_else(|| Error::InvalidInput("CREATE VIEW without a view".into()))?;
                    Ok(CreateViewResponse {
                        replaced: m.create_view(view, r.or_replace).await?,
                    })
                })
            },
            |mut c, r| async move { c.create_view(r).await },
        )
        .await
    }

    async fn drop_view(
        &self,
        req: Request<DropViewRequest>,
    ) -> Result<Response<DropViewResponse>, Status> {
        self.route(
            req,
            DDL_FORWARD_TIMEOUT,
            |m, r| {
                finish_even_if_dropped(async move {
                    Ok(DropViewResponse {
                        dropped: m.drop_view(&r.name, r.if_exists).await?,
                    })
                })
            },
            |mut c, r| async move { c.drop_view(r).await },
        )
        .await
    }

    async fn get_regions(
        &self,
        req: Request<GetRegionsRequest>,
    ) -> Result<Response<GetRegionsResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(GetRegionsResponse {
                    regions: m.routes(&r.start_key, &r.end_key).await?,
                })
            },
            |mut c, r| async move { c.get_regions(r).await },
        )
        .await
    }

    async fn put_store(
        &self,
        req: Request<PutStoreRequest>,
    ) -> Result<Response<PutStoreResponse>, Status> {
        // Whoever hears from a store learns its address, meta leader or not.
        if let Some(s) = &req.get_ref().store {
            self.meta.learn_address(s);
        }
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                let s = r
                    .store
                    .ok_or_else(|| Error::InvalidInput("PutStore without a store".into()))?;
                m.put_store(s).await?;
                Ok(PutStoreResponse {})
            },
            |mut c, r| async move { c.put_store(r).await },
        )
        .await
    }

    async fn get_stores(
        &self,
        req: Request<GetStoresRequest>,
    ) -> Result<Response<GetStoresResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, _| async move {
                Ok(GetStoresResponse {
                    stores: m.stores().await?,
                })
            },
            |mut c, r| async move { c.get_stores(r).await },
        )
        .await
    }

    async fn alloc_handles(
        &self,
        req: Request<AllocHandlesRequest>,
    ) -> Result<Response<AllocHandlesResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(AllocHandlesResponse {
                    first: m.alloc_handles(r.table_id, r.count, r.min_next).await?,
                })
            },
            |mut c, r| async move { c.alloc_handles(r).await },
        )
        .await
    }

    async fn store_heartbeat(
        &self,
        req: Request<StoreHeartbeatRequest>,
    ) -> Result<Response<StoreHeartbeatResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                let s = r
                    .store
                    .ok_or_else(|| Error::InvalidInput("heartbeat without a store".into()))?;
                m.store_heartbeat(s, r.leader_region_ids).await?;
                let hold = m.gc_hold();
                Ok(StoreHeartbeatResponse {
                    gc_hold: hold.unwrap_or(0),
                    gc_hold_known: hold.is_some(),
                })
            },
            |mut c, r| async move { c.store_heartbeat(r).await },
        )
        .await
    }

    async fn report_regions(
        &self,
        req: Request<ReportRegionsRequest>,
    ) -> Result<Response<ReportRegionsResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                m.report_regions(r.regions).await?;
                Ok(ReportRegionsResponse {})
            },
            |mut c, r| async move { c.report_regions(r).await },
        )
        .await
    }

    async fn alloc_ids(
        &self,
        req: Request<AllocIdsRequest>,
    ) -> Result<Response<AllocIdsResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(AllocIdsResponse {
                    first: m.alloc_ids(r.count).await?,
                })
            },
            |mut c, r| async move { c.alloc_ids(r).await },
        )
        .await
    }

    async fn get_timestamps(
        &self,
        req: Request<GetTimestampsRequest>,
    ) -> Result<Response<GetTimestampsResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                let first = m.get_timestamps(r.count).await?;
                Ok(GetTimestampsResponse {
                    first,
                    catalog_version: m.catalog_version()?,
                })
            },
            |mut c, r| async move { c.get_timestamps(r).await },
        )
        .await
    }

    async fn hold_gc(
        &self,
        req: Request<HoldGcRequest>,
    ) -> Result<Response<HoldGcResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                m.hold_gc(r.holder, r.min_read_ts, Duration::from_millis(r.ttl_ms))
                    .await?;
                Ok(HoldGcResponse {})
            },
            |mut c, r| async move { c.hold_gc(r).await },
        )
        .await
    }

    async fn compute_heartbeat(
        &self,
        req: Request<ComputeHeartbeatRequest>,
    ) -> Result<Response<ComputeHeartbeatResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                m.compute_heartbeat(r.id, r.addr, Duration::from_millis(r.ttl_ms))
                    .await?;
                Ok(ComputeHeartbeatResponse {})
            },
            |mut c, r| async move { c.compute_heartbeat(r).await },
        )
        .await
    }

    async fn get_computes(
        &self,
        req: Request<GetComputesRequest>,
    ) -> Result<Response<GetComputesResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, _| async move {
                let computes = m
                    .computes()
                    .await?
                    .into_iter()
                    .map(|(id, addr, seen)| ComputeInfo {
                        id,
                        addr,
                        last_seen_ms: seen.as_millis() as u64,
                    })
                    .collect();
                Ok(GetComputesResponse { computes })
            },
            |mut c, r| async move { c.get_computes(r).await },
        )
        .await
    }

    async fn put_user(
        &self,
        req: Request<PutUserRequest>,
    ) -> Result<Response<PutUserResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                let mode = r.mode();
                let user = r
                    .user
                    .ok_or_else(|| Error::InvalidInput("PutUser without a user".into()))?;
                m.put_user(user, mode).await?;
                Ok(PutUserResponse {})
            },
            |mut c, r| async move { c.put_user(r).await },
        )
        .await
    }

    async fn drop_user(
        &self,
        req: Request<DropUserRequest>,
    ) -> Result<Response<DropUserResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(DropUserResponse {
                    dropped: m.drop_user(&r.name, r.if_exists).await?,
                })
            },
            |mut c, r| async move { c.drop_user(r).await },
        )
        .await
    }

    async fn get_user(
        &self,
        req: Request<GetUserRequest>,
    ) -> Result<Response<GetUserResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, r| async move {
                Ok(GetUserResponse {
                    user: m.get_user(&r.name).await?,
                })
            },
            |mut c, r| async move { c.get_user(r).await },
        )
        .await
    }

    async fn list_users(
        &self,
        req: Request<ListUsersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        self.route(
            req,
            FORWARD_TIMEOUT,
            |m, _| async move {
                Ok(ListUsersResponse {
                    users: m.users().await?,
                })
            },
            |mut c, r| async move { c.list_users(r).await },
        )
        .await
    }
}
