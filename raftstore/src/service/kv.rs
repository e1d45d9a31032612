//! The Kv service: batched reads and writes against one region.

use std::sync::Arc;

use quarry_proto::kv::kv_server::Kv;
use quarry_proto::kv::{
    BatchGetRequest, BatchGetResponse, BatchPutRequest, BatchPutResponse, DeleteRangeRequest,
    DeleteRangeResponse, ScanRequest, ScanResponse,
};
use tonic::{Request, Response, Status};

use super::error_fields;
use crate::engine::Engine;
use crate::store::Store;

pub struct KvService<E: Engine> {
    store: Arc<Store<E>>,
}

impl<E: Engine> KvService<E> {
    pub fn new(store: Arc<Store<E>>) -> Self {
        KvService { store }
    }
}

/// Runs blocking engine work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("storage task failed: {e}")))
}

#[tonic::async_trait]
impl<E: Engine> Kv for KvService<E> {
    async fn batch_put(
        &self,
        req: Request<BatchPutRequest>,
    ) -> Result<Response<BatchPutResponse>, Status> {
        let req = req.into_inner();
        let store = self.store.clone();
        let r = blocking(move || store.batch_put(req.context.as_ref(), req.pairs, req.if_absent))
            .await?;
        let (region_error, error) = r.err().map(error_fields).unwrap_or_default();
        Ok(Response::new(BatchPutResponse {
            region_error,
            error,
        }))
    }

    async fn batch_get(
        &self,
        req: Request<BatchGetRequest>,
    ) -> Result<Response<BatchGetResponse>, Status> {
        let req = req.into_inner();
        let store = self.store.clone();
        let r = blocking(move || store.batch_get(req.context.as_ref(), &req.keys)).await?;
        Ok(Response::new(match r {
            Ok(pairs) => BatchGetResponse {
                pairs,
                ..Default::default()
            },
            Err(e) => {
                let (region_error, error) = error_fields(e);
                BatchGetResponse {
                    region_error,
                    error,
                    pairs: vec![],
                }
            }
        }))
    }

    async fn scan(&self, req: Request<ScanRequest>) -> Result<Response<ScanResponse>, Status> {
        let req = req.into_inner();
        let store = self.store.clone();
        let r = blocking(move || {
            store.scan(
                req.context.as_ref(),
                &req.start_key,
                &req.end_key,
                req.limit as usize,
                req.key_only,
            )
        })
        .await?;
        Ok(Response::new(match r {
            Ok(pairs) => ScanResponse {
                pairs,
                ..Default::default()
            },
            Err(e) => {
                let (region_error, error) = error_fields(e);
                ScanResponse {
                    region_error,
                    error,
                    pairs: vec![],
                }
            }
        }))
    }

    async fn delete_range(
        &self,
        req: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let req = req.into_inner();
        let store = self.store.clone();
        let r = blocking(move || {
            store.delete_range(req.context.as_ref(), &req.start_key, &req.end_key)
        })
        .await?;
        let (region_error, error) = r.err().map(error_fields).unwrap_or_default();
        Ok(Response::new(DeleteRangeResponse {
            region_error,
            error,
        }))
    }
}
