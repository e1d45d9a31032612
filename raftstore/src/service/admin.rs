//! The Admin service: store-to-store region lifecycle calls from the meta
//! store.

use std::sync::Arc;

use quarry_proto::meta::admin_server::Admin;
use quarry_proto::meta::{
    CreateRegionRequest, CreateRegionResponse, DestroyRegionRequest, DestroyRegionResponse,
};
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::store::Store;
use crate::Error;

pub struct AdminService<E: Engine> {
    store: Arc<Store<E>>,
}

impl<E: Engine> AdminService<E> {
    pub fn new(store: Arc<Store<E>>) -> Self {
        AdminService { store }
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
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.create_region(region))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(CreateRegionResponse {}))
    }

    async fn destroy_region(
        &self,
        req: Request<DestroyRegionRequest>,
    ) -> Result<Response<DestroyRegionResponse>, Status> {
        let id = req.into_inner().region_id;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.destroy_region(id))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(DestroyRegionResponse {}))
    }
}
