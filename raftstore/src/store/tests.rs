//! The store loop on one single-peer region: it stops, without answering,
//! when apply meets an error of this replica alone.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use prost::Message as _;
use quarry_coprocessor::codec::key::{record_key, table_record_range};
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{Peer as PeerMeta, Region, RegionEpoch, RegionStatus};
use quarry_proto::raft::{ApplyState, Conflict, KvWrite, RaftMessage};
use tokio::sync::oneshot;

use super::{drive, RaftStore, RaftStoreConfig, StoreMsg};
use crate::engine::memory::MemEngine;
use crate::engine::{Cf, Engine};
use crate::transport::Transport;
use crate::{keys, Error};

struct NoTransport;

impl Transport for NoTransport {
    fn send(&mut self, _: RaftMessage) {}
}

fn status(tx: &mpsc::Sender<StoreMsg>) -> RegionStatus {
    let (cb, rx) = oneshot::channel();
    tx.send(StoreMsg::Status { cb }).unwrap();
    rx.blocking_recv().unwrap().regions.remove(0)
}

#[test]
fn the_loop_stops_without_answering_when_apply_cannot_read() {
    let engine = Arc::new(MemEngine::new());
    let mut store =
        RaftStore::new(1, engine.clone(), NoTransport, RaftStoreConfig::default()).unwrap();
    let (start_key, end_key) = table_record_range(7);
    let epoch = RegionEpoch {
        conf_ver: 1,
        version: 1,
    };
    store
        .create_peer(Region {
            id: 10,
            start_key,
            end_key,
            epoch: Some(epoch),
            peers: vec![PeerMeta {
                id: 1001,
                store_id: 1,
            }],
        })
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = drive(&mut store, &rx);
        let _ = done_tx.send((result, store));
    });

    // The lone peer elects itself and applies its first entry.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let s = status(&tx);
        if s.is_leader && s.applied_index == s.last_index {
            break s;
        }
        assert!(Instant::now() < deadline, "no leader: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    };

    // An INSERT reads the data while it applies, and the disk fails it.
    engine.fail_reads(Cf::Default, true);
    let (cb, mut answer) = oneshot::channel();
    tx.send(StoreMsg::Write {
        region_id: 10,
        epoch: Some(epoch),
        write: KvWrite {
            puts: vec![KvPair {
                key: record_key(7, 1),
                value: b"v".to_vec(),
            }],
            conflict: Conflict::FailIfExists as i32,
            ..Default::default()
        },
        cb,
    })
    .unwrap();
    let index = ready.last_index + 1;

    let (result, store) = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the store loop went on after a failed read in apply");
    match result {
        Err(Error::Engine(m)) => assert!(m.contains("injected"), "{m}"),
        other => panic!("the loop ended with {other:?}"),
    }
    let peer = store.peer(10).unwrap();
    assert_eq!(peer.last_index(), index, "the write was proposed");
    assert!(
        peer.storage().applied_index() < index,
        "applied index {} moved past the failed entry {index}",
        peer.storage().applied_index()
    );
    assert!(
        matches!(answer.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        "the proposer was answered"
    );
    engine.fail_reads(Cf::Default, false);
    let applied = ApplyState::decode(
        engine
            .get(Cf::Raft, &keys::apply_state_key(10))
            .unwrap()
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert!(applied.applied_index < index, "{applied:?}");
    assert_eq!(engine.get(Cf::Default, &record_key(7, 1)).unwrap(), None);
    // The process would exit now; nobody hears an answer.
    drop(store);
    assert!(matches!(
        answer.try_recv(),
        Err(oneshot::error::TryRecvError::Closed)
    ));
}
