//! The Kv service: batched reads and writes against one region, through
//! raft (writes are acknowledged once applied on the leader).

use std::sync::Arc;

use quarry_proto::kv::kv_server::Kv;
use quarry_proto::kv::{
    BatchGetRequest, BatchGetResponse, BatchPutRequest, BatchPutResponse, CheckTxnStatusRequest,
    CheckTxnStatusResponse, CommitRequest, Context, DeleteRangeRequest, DeleteRangeResponse,
    KvPair, PrewriteRequest, ResolveLockRequest, RollbackRequest, ScanRequest, ScanResponse,
    TxnHeartBeatRequest, TxnResponse,
};
use quarry_proto::kv::{IngestRequest, IngestResponse, UploadSstRequest, UploadSstResponse};
use quarry_proto::raft::{txn_write::Step, TxnWrite};
use tonic::Streaming;
use tonic::{Request, Response, Status};

use super::error_fields;
use crate::engine::Engine;
use crate::node::{Node, TxnStatus};
use crate::peer::propose::TxnDone;

pub struct KvService<E: Engine> {
    node: Arc<Node<E>>,
}

impl<E: Engine> KvService<E> {
    pub fn new(node: Arc<Node<E>>) -> Self {
        KvService { node }
    }

    /// Proposes one transaction step; the context travels apart from the
    /// replicated command.
    async fn step(&self, context: Option<Context>, step: Step) -> TxnResponse {
        let r = self
            .node
            .txn(context.as_ref(), TxnWrite { step: Some(step) })
            .await;
        txn_response(r.map(|done| (done, vec![])))
    }
}

/// A transaction step's answer: how it went (and the rows a lock
/// returned), or its error as region error or key error.
fn txn_response(r: crate::Result<(TxnDone, Vec<KvPair>)>) -> TxnResponse {
    match r {
        Ok((done, values)) => TxnResponse {
            one_pc_commit_ts: done.one_pc_commit_ts,
            values,
            ..Default::default()
        },
        Err(e) => {
            let (region_error, error) = error_fields(e);
            TxnResponse {
                region_error,
                error,
                ..Default::default()
            }
        }
    }
}

#[tonic::async_trait]
impl<E: Engine> Kv for KvService<E> {
    async fn upload_sst(
        &self,
        req: Request<Streaming<UploadSstRequest>>,
    ) -> Result<Response<UploadSstResponse>, Status> {
        use futures::StreamExt;
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("an SST upload with no messages"))??;
        let meta = first
            .meta
            .ok_or_else(|| Status::invalid_argument("an SST upload must begin with its meta"))?;
        let head = futures::stream::iter((!first.data.is_empty()).then_some(Ok(first.data)));
        let rest = stream.map(|m| match m {
            Ok(m) if m.meta.is_some() => Err(crate::Error::InvalidInput(
                "an SST upload carries its meta once, first".into(),
            )),
            Ok(m) => Ok(m.data),
            Err(st) => Err(crate::Error::Unavailable(format!(
                "the SST upload broke off: {}",
                st.message()
            ))),
        });
        self.node.upload_sst(&meta, head.chain(rest)).await?;
        Ok(Response::new(UploadSstResponse {}))
    }

    async fn ingest(
        &self,
        req: Request<IngestRequest>,
    ) -> Result<Response<IngestResponse>, Status> {
        let req = req.into_inner();
        let Some(sst) = req.sst else {
            return Err(Status::invalid_argument("an ingest names its SST"));
        };
        let r = self.node.ingest(req.context.as_ref(), sst).await;
        let (region_error, error) = r.err().map(error_fields).unwrap_or_default();
        Ok(Response::new(IngestResponse {
            region_error,
            error,
        }))
    }

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

    async fn prewrite(
        &self,
        req: Request<PrewriteRequest>,
    ) -> Result<Response<TxnResponse>, Status> {
        let mut req = req.into_inner();
        let ctx = req.context.take();
        Ok(Response::new(txn_response(
            self.node.prewrite(ctx.as_ref(), req).await,
        )))
    }

    async fn commit(&self, req: Request<CommitRequest>) -> Result<Response<TxnResponse>, Status> {
        let mut req = req.into_inner();
        let ctx = req.context.take();
        Ok(Response::new(self.step(ctx, Step::Commit(req)).await))
    }

    async fn rollback(
        &self,
        req: Request<RollbackRequest>,
    ) -> Result<Response<TxnResponse>, Status> {
        let mut req = req.into_inner();
        let ctx = req.context.take();
        Ok(Response::new(self.step(ctx, Step::Rollback(req)).await))
    }

    async fn txn_heart_beat(
        &self,
        req: Request<TxnHeartBeatRequest>,
    ) -> Result<Response<TxnResponse>, Status> {
        let mut req = req.into_inner();
        let ctx = req.context.take();
        Ok(Response::new(self.step(ctx, Step::HeartBeat(req)).await))
    }

    async fn resolve_lock(
        &self,
        req: Request<ResolveLockRequest>,
    ) -> Result<Response<TxnResponse>, Status> {
        let mut req = req.into_inner();
        let ctx = req.context.take();
        Ok(Response::new(self.step(ctx, Step::Resolve(req)).await))
    }

    async fn check_txn_status(
        &self,
        req: Request<CheckTxnStatusRequest>,
    ) -> Result<Response<CheckTxnStatusResponse>, Status> {
        let req = req.into_inner();
        let r = self
            .node
            .check_txn_status(
                req.context.as_ref(),
                &req.primary,
                req.start_ts,
                req.current_ts,
                req.rollback_if_not_exist,
            )
            .await;
        Ok(Response::new(match r {
            Ok(TxnStatus::Locked { ttl_ms }) => CheckTxnStatusResponse {
                lock_ttl_ms: ttl_ms,
                ..Default::default()
            },
            Ok(TxnStatus::Committed { commit_ts }) => CheckTxnStatusResponse {
                commit_ts,
                ..Default::default()
            },
            Ok(TxnStatus::RolledBack) => CheckTxnStatusResponse::default(),
            Err(e) => {
                let (region_error, error) = error_fields(e);
                CheckTxnStatusResponse {
                    region_error,
                    error,
                    ..Default::default()
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
