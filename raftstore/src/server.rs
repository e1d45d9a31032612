//! Starting and stopping a storage process.
//!
//! 1. Open RocksDB and the store (checking the data dir's store id).
//! 2. Bind the listener (port 0 picks one) and learn the advertised address.
//! 3. Meta: a store that holds the meta region loads it; a store with no
//!    regions and no `--join` bootstraps a new cluster; any other store
//!    registers itself (id, address) through a `--join` store, retrying
//!    while that store starts.
//! 4. Serve Kv, Coprocessor, Meta and Admin until `shutdown` resolves, then
//!    drain in-flight calls and close RocksDB.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_proto::coprocessor::coprocessor_server::CoprocessorServer;
use quarry_proto::kv::kv_server::KvServer;
use quarry_proto::meta::admin_server::AdminServer;
use quarry_proto::meta::meta_server::MetaServer;
use quarry_proto::meta::{PutStoreRequest, Store as StoreInfo};
use quarry_proto::MAX_MESSAGE_BYTES;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::config::StorageConfig;
use crate::engine::rocks::{RocksConfig, RocksEngine};
use crate::keys::META_REGION_ID;
use crate::meta::Meta;
use crate::peers::PeerClients;
use crate::service::{
    admin::AdminService, coprocessor::CoprocessorService, kv::KvService, meta::MetaService,
};
use crate::store::Store;
use crate::{Error, Result};

/// How long a joining store keeps trying to register.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a storage process until `shutdown`; `ready` is called with the
/// bound address once the server accepts connections.
pub async fn run(
    cfg: StorageConfig,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    cfg.validate()?;
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        Error::InvalidInput(format!("cannot create {}: {e}", cfg.data_dir.display()))
    })?;
    let rocks = RocksConfig {
        block_cache_bytes: cfg.block_cache_mb << 20,
        ..Default::default()
    };
    let engine = Arc::new(RocksEngine::open(&cfg.data_dir, &rocks)?);
    let store = Arc::new(Store::open(engine, &cfg)?);

    let listener = TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| Error::InvalidInput(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    let advertise = cfg
        .advertise_addr
        .clone()
        .unwrap_or_else(|| local.to_string());
    let me = StoreInfo {
        id: cfg.store_id,
        addr: advertise,
    };
    let peers = Arc::new(PeerClients::new(Duration::from_millis(cfg.peer_timeout_ms)));

    let meta = if store.has_region(META_REGION_ID) {
        let m = Meta::load(store.clone(), peers.clone())?;
        m.put_store(me.clone())?;
        Some(Arc::new(m))
    } else if cfg.join.is_empty() {
        if !store.region_ids().is_empty() {
            return Err(Error::InvalidInput(format!(
                "store {} holds regions but not the meta region: start it with --join",
                cfg.store_id
            )));
        }
        tracing::info!(store = cfg.store_id, "bootstrapping a new cluster");
        Meta::bootstrap(&store, me.clone())?;
        Some(Arc::new(Meta::load(store.clone(), peers.clone())?))
    } else {
        register(&peers, &cfg.join, &me).await?;
        None
    };

    let meta_svc = MetaService::new(cfg.store_id, meta, peers, cfg.join.clone());
    let router = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(
            KvServer::new(KvService::new(store.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            CoprocessorServer::new(CoprocessorService::new(store.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            MetaServer::new(meta_svc)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(AdminServer::new(AdminService::new(store.clone())));
    let serving = tokio::spawn(
        router.serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown),
    );
    ready(local);
    serving
        .await
        .map_err(|e| Error::Internal(format!("server task: {e}")))?
        .map_err(|e| Error::Internal(format!("gRPC server: {e}")))?;
    tracing::info!(store = cfg.store_id, "stopped");
    Ok(())
}

/// Registers `me` through any `--join` store, retrying for a while.
async fn register(peers: &PeerClients, join: &[String], me: &StoreInfo) -> Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        for addr in join {
            let mut c = peers.meta(addr)?;
            match c
                .put_store(PutStoreRequest {
                    store: Some(me.clone()),
                })
                .await
            {
                Ok(_) => return Ok(()),
                Err(st) => last = format!("{addr}: {}", st.message()),
            }
        }
        if started.elapsed() > JOIN_TIMEOUT {
            return Err(Error::Unavailable(format!(
                "store {} cannot register with any --join store within {:?} (last: {last})",
                me.id, JOIN_TIMEOUT
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
