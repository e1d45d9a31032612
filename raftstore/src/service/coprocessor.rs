//! The Coprocessor service: one region's DAG, answered with Arrow chunks,
//! or several regions' under one DAG (a batch), each answered on its own.
//! Neither call fails for region or execution errors; those ride in each
//! region's response.
//!
//! A batch is compute's first attempt at a query's regions on this store
//! (TiFlash's batch coprocessor): one call, one DAG to decode and ship,
//! instead of one per region. Its tasks run through the same
//! [`Node::coprocessor`] as single requests, at most [`batch_parallel`] at
//! a time (of the node's read pool), and each answer is streamed as soon
//! as it is ready, so a slow region does not hold the others' answers back
//! and at most that many finished pages wait for the stream to take them.
//! The batch's deadline is fixed when it arrives: a task that starts late
//! gets what is left of it, not a fresh one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use quarry_proto::coprocessor::coprocessor_server::Coprocessor;
use quarry_proto::coprocessor::{BatchCopRequest, BatchCopResponse, CopRequest, CopResponse};
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::node::Node;

/// A batch's tasks running at once on a read pool of `threads`: at least
/// the pool's threads and 8, enough to keep the pool busy, few enough to
/// bound the pages waiting to be sent.
pub fn batch_parallel(threads: usize) -> usize {
    threads.max(8)
}

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
        let parallel = batch_parallel(node.read_pool_threads());
        let until = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
        let answers = futures::stream::iter(tasks.into_iter().enumerate())
            .map(move |(i, task)| {
                let node = node.clone();
                // What is left of the batch's deadline (0: none).
                let timeout_ms = until.map_or(0, |u| {
                    (u.saturating_duration_since(Instant::now()).as_millis() as u64).max(1)
                });
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
            .buffer_unordered(parallel);
        Ok(Response::new(answers.boxed()))
    }
}
