//! The Kv service: batched reads and writes against one region, through
//! raft (writes are acknowledged once applied on the leader).

use std::sync::Arc;

use quarry_proto::kv::kv_server::Kv;
use quarry_proto::kv::{
    BatchGetRequest, BatchGetResponse, BatchPutRequest, BatchPutResponse, DeleteRangeRequest,
    DeleteRangeResponse, ScanRequest, ScanResponse,
};
use tonic::{Request, Response, Status};

use super::error_fields;
use crate::engine::Engine;
use crate::node::Node;

pub struct KvService<E: Engine> {
    node: Arc<Node<E>>,
}

impl<E: Engine> KvService<E> {
    pub fn new(node: Arc<Node<E>>) -> Self {
        KvService { node }
    }
}

#[tonic::async_trait]
impl<E: Engine> Kv for KvService<E> {
    async fn batch_put(
        &self,
        req: Request<BatchPutRequest>,
    ) -> Result<Response<BatchPutResponse>, Status> {
        let req = req.into_inner();
        let r = self
            .node
            .batch_put(
                req.context.as_ref(),
                req.pairs,
                req.if_absent,
                req.same_value_ok,
            )
            .await;
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
        Ok(Response::new(
            match self.node.batch_get(req.context.as_ref(), &req.keys).await {
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
            },
        ))
    }

    async fn scan(&self, req: Request<ScanRequest>) -> Result<Response<ScanResponse>, Status> {
        let req = req.into_inner();
        let r = self
            .node
            .scan(
                req.context.as_ref(),
                &req.start_key,
                &req.end_key,
                req.limit as usize,
                req.key_only,
            )
            .await;
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
        let r = self
            .node
            .delete_range(req.context.as_ref(), &req.start_key, &req.end_key)
            .await;
        let (region_error, error) = r.err().map(error_fields).unwrap_or_default();
        Ok(Response::new(DeleteRangeResponse {
            region_error,
            error,
        }))
    }
}
