//! The Admin service: region lifecycle calls from the meta leader, and
//! operator calls (status, leader transfer, split).

use std::sync::Arc;

use quarry_proto::meta::admin_server::Admin;
use quarry_proto::meta::*;
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::node::Node;
use crate::worker::Worker;
use crate::Error;

pub struct AdminService<E: Engine> {
    node: Arc<Node<E>>,
    worker: Arc<Worker<E>>,
}

impl<E: Engine> AdminService<E> {
    pub fn new(node: Arc<Node<E>>, worker: Arc<Worker<E>>) -> Self {
        AdminService { node, worker }
    }
}

#[tonic::async_trait]
impl<E: Engine> Admin for AdminService<E> {
    async fn create_region(
        &self,
        req: Request<CreateRegionRequest>,
    ) -> Result<Response<CreateRegionResponse>, Status> {
        let region = req
            .into_inner()
            .region
            .ok_or_else(|| Error::InvalidInput("CreateRegion without a region".into()))?;
        self.node.create_region(region).await?;
        Ok(Response::new(CreateRegionResponse {}))
    }

    async fn destroy_region(
        &self,
        req: Request<DestroyRegionRequest>,
    ) -> Result<Response<DestroyRegionResponse>, Status> {
        self.node.destroy_region(req.into_inner().region_id).await?;
        Ok(Response::new(DestroyRegionResponse {}))
    }

    async fn status(
        &self,
        _req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let mut status = self.node.status().await?;
        // Sizes only for this answer (the console and `quarry status`):
        // the store's own status calls need none.
        for r in &mut status.regions {
            if let Some(region) = &r.region {
                r.approximate_bytes = self
                    .node
                    .engine()
                    .approximate_size(&region.start_key, &region.end_key);
            }
        }
        Ok(Response::new(status))
    }

    async fn transfer_leader(
        &self,
        req: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        let r = req.into_inner();
        self.node.transfer_leader(r.region_id, r.to_peer_id);
        Ok(Response::new(TransferLeaderResponse {}))
    }

    async fn change_peer(
        &self,
        req: Request<ChangePeerRequest>,
    ) -> Result<Response<ChangePeerResponse>, Status> {
        let r = req.into_inner();
        let peer = r
            .peer
            .ok_or_else(|| Error::InvalidInput("ChangePeer without a peer".into()))?;
        let region = self.node.change_peer(r.region_id, peer, r.remove).await?;
        Ok(Response::new(ChangePeerResponse {
            region: Some(region),
        }))
    }

    async fn split_region(
        &self,
        req: Request<SplitRegionRequest>,
    ) -> Result<Response<SplitRegionResponse>, Status> {
        let r = req.into_inner();
        let key = (!r.split_key.is_empty()).then_some(r.split_key);
        let (left, right) = self.worker.split(r.region_id, r.epoch, key).await?;
        Ok(Response::new(SplitRegionResponse {
            left: Some(left),
            right: Some(right),
        }))
    }
}
