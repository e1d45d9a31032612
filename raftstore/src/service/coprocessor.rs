//! The Coprocessor service: one region's DAG, answered with Arrow chunks.
//! The unary call never fails for region or execution errors; those ride in
//! the response.

use std::sync::Arc;

use quarry_proto::coprocessor::coprocessor_server::Coprocessor;
use quarry_proto::coprocessor::{CopRequest, CopResponse};
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::node::Node;

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
}
