//! Starting and stopping a storage process.
//!
//! 1. Open RocksDB; check the data dir belongs to this store id.
//! 2. Load every peer and start the store loop thread.
//! 3. Bind the listener (port 0 picks one) and serve Raft, Kv,
//!    Coprocessor, Meta and Admin.
//! 4. A store with no regions and no `--join` bootstraps a new cluster
//!    (creates the meta region). Every store then registers its address
//!    through the meta region (its own, or a `--join` store's), retrying in
//!    the background while the meta region elects a leader: a whole
//!    cluster restarting needs its stores up before any of them can
//!    register.
//! 5. On `shutdown`, stop serving, stop the store loop, close RocksDB.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use quarry_proto::coprocessor::coprocessor_server::CoprocessorServer;
use quarry_proto::kv::kv_server::KvServer;
use quarry_proto::meta::admin_server::AdminServer;
use quarry_proto::meta::meta_server::{Meta as MetaRpc, MetaServer};
use quarry_proto::meta::{GetTimestampsRequest, PutStoreRequest, Store as StoreInfo};
use quarry_proto::raft::raft_server::RaftServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::config::StorageConfig;
use crate::engine::rocks::{RocksConfig, RocksEngine};
use crate::engine::{Cf, Engine, WriteBatch};
use crate::grpc_transport::{GrpcTransport, StoreResolver};
use crate::import::SstImporter;
use crate::keys;
use crate::meta::Meta;
use crate::node::Node;
use crate::peers::PeerClients;
use crate::service::{
    admin::AdminService, coprocessor::CoprocessorService, kv::KvService, meta::MetaService,
    raft::RaftService,
};
use crate::store::{run_loop, RaftStore, RaftStoreConfig};
use crate::worker::Worker;
use crate::{Error, Result};

/// Which store a data dir belongs to (guards against mixing them up).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreIdent {
    #[prost(uint64, tag = "1")]
    pub store_id: u64,
}

/// Claims `engine` for `store_id`, or refuses a data dir of another store.
pub fn check_ident(engine: &impl Engine, store_id: u64, dir: &std::path::Path) -> Result<()> {
    match engine.get(Cf::Raft, keys::STORE_IDENT_KEY)? {
        Some(b) => {
            let ident = StoreIdent::decode(b.as_slice())?;
            if ident.store_id != store_id {
                return Err(Error::InvalidInput(format!(
                    "data dir {} belongs to store {}, not store {store_id}",
                    dir.display(),
                    ident.store_id
                )));
            }
            Ok(())
        }
        None => {
            let mut wb = WriteBatch::new();
            wb.put(
                Cf::Raft,
                keys::STORE_IDENT_KEY.to_vec(),
                StoreIdent { store_id }.encode_to_vec(),
            );
            engine.write(&wb, true)
        }
    }
}

/// Store addresses this store's meta replica (if any) remembers.
fn load_addresses(engine: &impl Engine, resolver: &StoreResolver) -> Result<()> {
    engine.scan(
        Cf::Default,
        keys::STORE,
        &keys::prefix_end(keys::STORE),
        &mut |_, v| {
            if let Ok(s) = StoreInfo::decode(v) {
                resolver.set(s.id, s.addr);
            }
            true
        },
    )
}

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
        block_cache_bytes: cfg.block_cache_bytes(),
        ..Default::default()
    };
    let engine = Arc::new(RocksEngine::open(&cfg.data_dir, &rocks)?);
    check_ident(engine.as_ref(), cfg.store_id, &cfg.data_dir)?;

    let tls = cfg.security.load().map_err(Error::InvalidInput)?;
    if let Some(tls) = &tls {
        quarry_proto::security::install_client(tls.client());
    }
    let listener = TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| Error::InvalidInput(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    quarry_proto::security::check_bind(local, tls.is_some(), cfg.security.insecure)
        .map_err(Error::InvalidInput)?;
    let me = StoreInfo {
        id: cfg.store_id,
        addr: cfg
            .advertise_addr
            .clone()
            .unwrap_or_else(|| local.to_string()),
    };

    let resolver = Arc::new(StoreResolver::default());
    load_addresses(engine.as_ref(), &resolver)?;
    resolver.set(me.id, me.addr.clone());
    let peers = Arc::new(PeerClients::new(Duration::from_millis(cfg.peer_timeout_ms)));
    let transport = GrpcTransport::new(
        tokio::runtime::Handle::current(),
        resolver.clone(),
        peers.clone(),
    );
    let raft_cfg = RaftStoreConfig {
        early_apply: cfg.raftstore.early_apply,
        balance_leaders: cfg.raftstore.balance_leaders,
        ..Default::default()
    };
    let mut raftstore = RaftStore::new(cfg.store_id, engine.clone(), transport, raft_cfg)?;
    let importer = Arc::new(SstImporter::open(&cfg.data_dir.join("import"))?);
    raftstore.set_importer(importer.clone());
    let fresh = raftstore.peers().next().is_none();
    let delta = raftstore.delta_stats();
    let local_reader = raftstore.local_reader();
    let concurrency = raftstore.concurrency();
    let (router, rx) = std::sync::mpsc::channel();
    let loop_thread = std::thread::Builder::new()
        .name("raftstore".into())
        .spawn(move || run_loop(raftstore, rx))
        .map_err(|e| Error::Internal(format!("starting the store loop: {e}")))?;

    let node = Arc::new(Node::new(
        cfg.store_id,
        engine.clone(),
        router.clone(),
        cfg.read_pool_size(),
        cfg.max_pending_reads,
        resolver.clone(),
        crate::node::Shared {
            local: local_reader,
            concurrency,
        },
    )?);
    node.set_gc_life(Duration::from_secs(cfg.raftstore.gc_life_time_secs));
    node.set_importer(importer);
    node.set_pipelined_locks(cfg.raftstore.pipelined_pessimistic_lock);
    let meta = Arc::new(Meta::new(
        node.clone(),
        peers.clone(),
        cfg.replicas,
        Duration::from_secs(cfg.max_store_down_secs),
    ));
    let meta_svc = Arc::new(MetaService::new(
        meta.clone(),
        peers.clone(),
        cfg.join.clone(),
    ));
    {
        let meta_svc = meta_svc.clone();
        node.set_timestamps(Arc::new(move || {
            let meta_svc = meta_svc.clone();
            Box::pin(async move {
                let req = tonic::Request::new(GetTimestampsRequest { count: 1 });
                MetaRpc::get_timestamps(meta_svc.as_ref(), req)
                    .await
                    .map(|r| r.into_inner().first)
                    .map_err(|st| Error::Unavailable(st.message().to_string()))
            })
        }));
    }
    let worker = Arc::new(Worker::new(
        node.clone(),
        meta_svc.clone(),
        me.clone(),
        cfg.raftstore.region_split_size_mb << 20,
        delta,
        cfg.raftstore.compact_delta_rows,
    ));

    let (down_tx, down_rx) = tokio::sync::watch::channel(false);
    let stop = {
        let mut rx = down_rx.clone();
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = down_tx.send(true);
    });
    // (`Server::tcp_nodelay` does not apply to `serve_with_incoming`: the
    // incoming stream sets it, or every reply waits on Nagle's algorithm.)
    let mut builder = tonic::transport::Server::builder();
    let mut allowed_cn = vec![];
    if let Some(tls) = &tls {
        // Mutual TLS: only holders of a certificate from the cluster's CA
        // reach any service here (raft, KV, coprocessor, meta, admin).
        builder = builder
            .tls_config(tls.server(true))
            .map_err(|e| Error::InvalidInput(format!("[security]: {e}")))?;
        allowed_cn = tls.allowed_cn();
    }
    let max_message = cfg.max_message_mb << 20;
    let router_svc = builder
        .layer(quarry_proto::status::layer::<tonic::body::Body>())
        .layer(quarry_proto::security::cn_check_layer::<tonic::body::Body>(
            allowed_cn,
        ))
        .add_service(
            RaftServer::new(RaftService::new(router.clone(), down_rx.clone()))
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
        .add_service(
            KvServer::new(KvService::new(node.clone()))
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
        .add_service(
            CoprocessorServer::new(CoprocessorService::new(node.clone()))
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
        .add_service(
            MetaServer::from_arc(meta_svc.clone())
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
        .add_service(AdminServer::new(AdminService::new(
            node.clone(),
            worker.clone(),
        )));
    let serving =
        tokio::spawn(router_svc.serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            stop,
        ));

    tracing::info!(
        store = cfg.store_id,
        kernels = quarry_coprocessor::simd::level_name(),
        "coprocessor kernels chosen for this CPU"
    );
    if fresh && cfg.join.is_empty() {
        tracing::info!(store = cfg.store_id, "bootstrapping a new cluster");
        meta.bootstrap(me.clone()).await?;
    } else if cfg.join.is_empty() && !node_holds_meta(&node).await {
        tracing::warn!(
            store = cfg.store_id,
            "this store holds no meta replica and has no --join: it cannot register"
        );
    }
    let registering = {
        let (meta_svc, me) = (meta_svc.clone(), me.clone());
        tokio::spawn(async move { register(&meta_svc, &me).await })
    };
    ready(local);
    let background = tokio::spawn(worker.run());

    // Once shutdown starts, in-flight calls get a few seconds to finish.
    let mut serving = serving;
    let mut down = down_rx.clone();
    let served = tokio::select! {
        r = &mut serving => r,
        _ = down.wait_for(|d| *d) => match tokio::time::timeout(Duration::from_secs(5), &mut serving).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!("calls still running 5 s after shutdown began; stopping anyway");
                serving.abort();
                Ok(Ok(()))
            }
        },
    };
    registering.abort();
    background.abort();
    drop(node);
    drop(meta);
    drop(meta_svc);
    drop(router);
    // The store loop ends once every router is gone. A task still holding
    // one must not keep the process alive: past the bound it exits anyway
    // (every acknowledged write is in RocksDB's WAL already).
    // (A plain thread waits for it: a blocking task would hold up the
    // runtime's own shutdown.)
    let (joined_tx, joined) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = joined_tx.send(loop_thread.join());
    });
    if tokio::time::timeout(Duration::from_secs(5), joined)
        .await
        .is_err()
    {
        tracing::warn!("the store loop did not stop within 5 s; exiting without it");
    }
    served
        .map_err(|e| Error::Internal(format!("server task: {e}")))?
        .map_err(|e| Error::Internal(format!("gRPC server: {e}")))?;
    tracing::info!(store = cfg.store_id, "stopped");
    Ok(())
}

async fn node_holds_meta(node: &Node<RocksEngine>) -> bool {
    node.status()
        .await
        .map(|s| {
            s.regions.iter().any(|r| {
                r.region
                    .as_ref()
                    .is_some_and(|r| r.id == keys::META_REGION_ID)
            })
        })
        .unwrap_or(false)
}

/// Registers this store's address with the meta region, retrying until it
/// has a leader.
async fn register(meta: &MetaService<RocksEngine>, me: &StoreInfo) {
    let mut delay = Duration::from_millis(50);
    loop {
        match meta
            .put_store(tonic::Request::new(PutStoreRequest {
                store: Some(me.clone()),
            }))
            .await
        {
            Ok(_) => {
                tracing::info!(store = me.id, addr = me.addr, "registered");
                return;
            }
            Err(st) => {
                tracing::debug!(store = me.id, "registering: {}", st.message());
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}
