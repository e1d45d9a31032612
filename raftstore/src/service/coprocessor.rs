//! The Coprocessor service: one region's DAG, answered with Arrow chunks,
//! or several regions' under one DAG (a batch), each answered on its own.
//! Neither call fails for region or execution errors; those ride in each
//! region's response.
//!
//! A batch is compute's first attempt at a query's regions on this store
//! (TiFlash's batch coprocessor): one call, one DAG to decode and ship,
//! instead of one per region. Its tasks run through the same
//! [`Node::coprocessor`] as single requests, at most [`BATCH_PARALLEL`] at
//! a time, and each answer is streamed as soon as it is ready, so a slow
//! region does not hold the others' answers back and at most that many
//! finished pages wait for the stream to take them.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use quarry_proto::coprocessor::coprocessor_server::Coprocessor;
use quarry_proto::coprocessor::{BatchCopRequest, BatchCopResponse, CopRequest, CopResponse};
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::node::Node;

/// A batch's tasks running at once: enough to keep the read pool's
/// threads busy, few enough to bound the pages waiting to be sent.
pub const BATCH_PARALLEL: usize = 8;

pub struct CoprocessorService<E: Engine> {
    node: Arc<Node<E>>,
}

impl<E: Engine> CoprocessorService<E> {
    pub fn new(node: Arc<Node<E>>) -> Self {
        CoprocessorService { node }
    }
}

#[tonic::async_trait]
impl<E: Engine> Coprocessor for CoprocessorService<E> {
    async fn coprocessor(&self, req: Request<CopRequest>) -> Result<Response<CopResponse>, Status> {
        Ok(Response::new(self.node.coprocessor(req.into_inner()).await))
    }

    type BatchCoprocessorStream = BoxStream<'static, Result<BatchCopResponse, Status>>;

    async fn batch_coprocessor(
        &self,
        req: Request<BatchCopRequest>,
    ) -> Result<Response<Self::BatchCoprocessorStream>, Status> {
        let BatchCopRequest {
            tasks,
            dag,
            encode_type,
            max_response_bytes,
            timeout_ms,
        } = req.into_inner();
        let node = self.node.clone();
        let answers = futures::stream::iter(tasks.into_iter().enumerate())
            .map(move |(i, task)| {
                let node = node.clone();
                let req = CopRequest {
                    context: task.context,
                    ranges: task.ranges,
                    dag: dag.clone(),
                    encode_type,
                    max_response_bytes,
                    timeout_ms,
                };
                async move {
                    Ok(BatchCopResponse {
                        task: i as u32,
                        response: Some(node.coprocessor(req).await),
                    })
                }
            })
            .buffer_unordered(BATCH_PARALLEL);
        Ok(Response::new(answers.boxed()))
    }
}
