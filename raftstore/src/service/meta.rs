//! The Meta service on every store: answered locally by the store holding
//! the meta region, forwarded there (one hop, over the `--join` addresses)
//! by every other store.

use std::future::Future;
use std::sync::Arc;

use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::meta_server::Meta as MetaRpc;
use quarry_proto::meta::*;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::meta::Meta;
use crate::peers::PeerClients;

const FORWARDED: &str = "quarry-forwarded";

pub struct MetaService<E: Engine> {
    store_id: u64,
    meta: Option<Arc<Meta<E>>>,
    peers: Arc<PeerClients>,
    join: Vec<String>,
}

impl<E: Engine> MetaService<E> {
    pub fn new(
        store_id: u64,
        meta: Option<Arc<Meta<E>>>,
        peers: Arc<PeerClients>,
        join: Vec<String>,
    ) -> Self {
        MetaService {
            store_id,
            meta,
            peers,
            join,
        }
    }

    async fn forward<T, R, F, Fut>(&self, req: Request<T>, call: F) -> Result<Response<R>, Status>
    where
        T: Clone,
        F: Fn(MetaClient<Channel>, Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        if req.metadata().contains_key(FORWARDED) || self.join.is_empty() {
            return Err(Status::unavailable(format!(
                "meta region unavailable: store {} does not hold it",
                self.store_id
            )));
        }
        let msg = req.into_inner();
        let mut last = String::new();
        for addr in &self.join {
            let client = self.peers.meta(addr).map_err(Status::from)?;
            let mut r = Request::new(msg.clone());
            r.metadata_mut()
                .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
            match call(client, r).await {
                Ok(resp) => return Ok(resp),
                Err(st)
                    if matches!(
                        st.code(),
                        tonic::Code::Unavailable
                            | tonic::Code::Unknown
                            | tonic::Code::Cancelled
                            | tonic::Code::DeadlineExceeded
                    ) =>
                {
                    last = format!("{addr}: {}", st.message());
                }
                Err(st) => return Err(st),
            }
        }
        Err(Status::unavailable(format!(
            "meta region unavailable: no store holding it answered (last: {last})"
        )))
    }
}

#[tonic::async_trait]
impl<E: Engine> MetaRpc for MetaService<E> {
    async fn create_table(
        &self,
        req: Request<CreateTableRequest>,
    ) -> Result<Response<CreateTableResponse>, Status> {
        match &self.meta {
            Some(m) => Ok(Response::new(m.create_table(req.into_inner()).await?)),
            None => {
                self.forward(req, |mut c, r| async move { c.create_table(r).await })
                    .await
            }
        }
    }

    async fn drop_table(
        &self,
        req: Request<DropTableRequest>,
    ) -> Result<Response<DropTableResponse>, Status> {
        match &self.meta {
            Some(m) => {
                let r = req.into_inner();
                let dropped = m.drop_table(&r.name, r.if_exists).await?;
                Ok(Response::new(DropTableResponse { dropped }))
            }
            None => {
                self.forward(req, |mut c, r| async move { c.drop_table(r).await })
                    .await
            }
        }
    }

    async fn get_table(
        &self,
        req: Request<GetTableRequest>,
    ) -> Result<Response<GetTableResponse>, Status> {
        match &self.meta {
            Some(m) => Ok(Response::new(GetTableResponse {
                table: m.get_table(&req.into_inner().name),
            })),
            None => {
                self.forward(req, |mut c, r| async move { c.get_table(r).await })
                    .await
            }
        }
    }

    async fn list_tables(
        &self,
        req: Request<ListTablesRequest>,
    ) -> Result<Response<ListTablesResponse>, Status> {
        match &self.meta {
            Some(m) => Ok(Response::new(ListTablesResponse { tables: m.tables() })),
            None => {
                self.forward(req, |mut c, r| async move { c.list_tables(r).await })
                    .await
            }
        }
    }

    async fn get_regions(
        &self,
        req: Request<GetRegionsRequest>,
    ) -> Result<Response<GetRegionsResponse>, Status> {
        match &self.meta {
            Some(m) => {
                let r = req.into_inner();
                Ok(Response::new(GetRegionsResponse {
                    regions: m.routes(&r.start_key, &r.end_key),
                }))
            }
            None => {
                self.forward(req, |mut c, r| async move { c.get_regions(r).await })
                    .await
            }
        }
    }

    async fn put_store(
        &self,
        req: Request<PutStoreRequest>,
    ) -> Result<Response<PutStoreResponse>, Status> {
        match &self.meta {
            Some(m) => {
                let s = req
                    .into_inner()
                    .store
                    .ok_or_else(|| Status::invalid_argument("PutStore without a store"))?;
                m.put_store(s)?;
                Ok(Response::new(PutStoreResponse {}))
            }
            None => {
                self.forward(req, |mut c, r| async move { c.put_store(r).await })
                    .await
            }
        }
    }

    async fn get_stores(
        &self,
        req: Request<GetStoresRequest>,
    ) -> Result<Response<GetStoresResponse>, Status> {
        match &self.meta {
            Some(m) => Ok(Response::new(GetStoresResponse { stores: m.stores() })),
            None => {
                self.forward(req, |mut c, r| async move { c.get_stores(r).await })
                    .await
            }
        }
    }

    async fn alloc_handles(
        &self,
        req: Request<AllocHandlesRequest>,
    ) -> Result<Response<AllocHandlesResponse>, Status> {
        match &self.meta {
            Some(m) => {
                let r = req.into_inner();
                let first = m.alloc_handles(r.table_id, r.count, r.min_next).await?;
                Ok(Response::new(AllocHandlesResponse { first }))
            }
            None => {
                self.forward(req, |mut c, r| async move { c.alloc_handles(r).await })
                    .await
            }
        }
    }
}
