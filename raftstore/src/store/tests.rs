//! The store loop on single-peer regions: it stops, without answering,
//! when apply meets an error of this replica alone; it writes the peers
//! one drain of messages creates in one synced write; a destroyed peer
//! leaves nothing, and no range tombstone when it was small.

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

/// Store 1 with one peer (1001) of region 10, table 7's rows; and the
/// region's epoch.
fn one_region_store<E: Engine>(engine: Arc<E>) -> (RaftStore<E, NoTransport>, RegionEpoch) {
    let mut store = RaftStore::new(1, engine, NoTransport, RaftStoreConfig::default()).unwrap();
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
    (store, epoch)
}

#[test]
fn the_loop_stops_without_answering_when_apply_cannot_read() {
    let engine = Arc::new(MemEngine::new());
    let (mut store, epoch) = one_region_store(engine.clone());
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

/// Runs `store`'s loop on a thread of its own until its first region's
/// peer leads; the loop's sender.
fn drive_until_leader<E: Engine>(mut store: RaftStore<E, NoTransport>) -> mpsc::Sender<StoreMsg>
where
    RaftStore<E, NoTransport>: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || drop(drive(&mut store, &rx)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !status(&tx).is_leader {
        assert!(Instant::now() < deadline, "no leader");
        std::thread::sleep(Duration::from_millis(20));
    }
    tx
}

/// Sends `make(cb)` and waits for its answer.
fn ask<T>(
    tx: &mpsc::Sender<StoreMsg>,
    make: impl FnOnce(oneshot::Sender<crate::Result<T>>) -> StoreMsg,
) -> oneshot::Receiver<crate::Result<T>> {
    let (cb, rx) = oneshot::channel();
    tx.send(make(cb)).unwrap();
    rx
}

#[test]
fn an_ingest_lands_between_the_writes_the_log_puts_around_it_and_repeats_as_a_no_op() {
    use crate::engine::rocks::{write_sst, RocksConfig, RocksEngine};
    use crate::import::SstImporter;
    use quarry_proto::kv::SstMeta;
    use quarry_proto::raft::IngestSst;

    let dir = tempfile::tempdir().unwrap();
    let engine =
        Arc::new(RocksEngine::open(&dir.path().join("db"), &RocksConfig::default()).unwrap());
    let importer = Arc::new(SstImporter::open(&dir.path().join("import")).unwrap());
    let (mut store, epoch) = one_region_store(engine.clone());
    store.set_importer(importer.clone());
    let tx = drive_until_leader(store);

    // An uploaded file of handles 100..110.
    let uuid = vec![3u8; crate::import::UUID_BYTES];
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (100..110)
        .map(|h| (record_key(7, h), b"sst".to_vec()))
        .collect();
    let path = importer.path(&uuid).unwrap();
    let length = write_sst(&path, pairs.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
    let sst = SstMeta {
        uuid: uuid.clone(),
        region_id: 10,
        region_epoch: Some(epoch),
        first_key: record_key(7, 100),
        last_key: record_key(7, 109),
        length,
        crc32: 0,
    };
    let write = |puts: Vec<(i64, &str)>, delete_all: bool| {
        let (s, e) = table_record_range(7);
        KvWrite {
            puts: puts
                .into_iter()
                .map(|(h, v)| KvPair {
                    key: record_key(7, h),
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
            delete_ranges: if delete_all {
                vec![KvPair { key: s, value: e }]
            } else {
                vec![]
            },
            ..Default::default()
        }
    };
    let ingest = |sst: &SstMeta| {
        let sst = sst.clone();
        move |cb| StoreMsg::Ingest {
            region_id: 10,
            epoch: Some(epoch),
            ingest: IngestSst { sst: Some(sst) },
            cb,
        }
    };
    // Before the ingest in the log: a write the ingest must not be hidden
    // by (a range delete of the whole table) and one it overwrites; after
    // it, one that overwrites it. Sent at once, they likely share a round.
    let cleared = ask(&tx, |cb| StoreMsg::Write {
        region_id: 10,
        epoch: Some(epoch),
        write: write(vec![], true),
        cb,
    });
    let before = ask(&tx, |cb| StoreMsg::Write {
        region_id: 10,
        epoch: Some(epoch),
        write: write(vec![(5, "old"), (101, "before")], false),
        cb,
    });
    let ingested = ask(&tx, ingest(&sst));
    let after = ask(&tx, |cb| StoreMsg::Write {
        region_id: 10,
        epoch: Some(epoch),
        write: write(vec![(105, "after")], false),
        cb,
    });
    // A repeat of the ingest after the overwrite (a retry), likely in the
    // same round: it must not ingest again over the overwrite.
    let repeated = ask(&tx, ingest(&sst));
    for rx in [cleared, before, ingested, after, repeated] {
        rx.blocking_recv().unwrap().unwrap();
    }
    let get = |h| engine.get(Cf::Default, &record_key(7, h)).unwrap();
    assert_eq!(get(5).as_deref(), Some(&b"old"[..]));
    assert_eq!(get(100).as_deref(), Some(&b"sst"[..]));
    assert_eq!(
        get(101).as_deref(),
        Some(&b"sst"[..]),
        "the ingest came after"
    );
    assert_eq!(
        get(105).as_deref(),
        Some(&b"after"[..]),
        "the write came after"
    );
    assert_eq!(get(109).as_deref(), Some(&b"sst"[..]));
    assert!(!path.exists(), "the file is deleted once ingested");
    assert!(engine
        .get(Cf::Raft, &keys::ingested_key(10, &uuid))
        .unwrap()
        .is_some());

    // The same ingest again (a retry) changes nothing.
    ask(&tx, ingest(&sst)).blocking_recv().unwrap().unwrap();
    assert_eq!(get(105).as_deref(), Some(&b"after"[..]));

    // An ingest uploaded for another epoch is refused.
    let mut stale = sst.clone();
    stale.uuid = vec![4u8; crate::import::UUID_BYTES];
    stale.region_epoch = Some(RegionEpoch {
        conf_ver: 1,
        version: 0,
    });
    let err = ask(&tx, ingest(&stale))
        .blocking_recv()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Region(r) if r.epoch_not_match.is_some()),
        "{err}"
    );
}

/// Region `id` of `table`'s handles `[lo, hi)`, its one peer on store 1.
fn region_of(table: i64, id: u64, lo: i64, hi: i64) -> Region {
    Region {
        id,
        start_key: record_key(table, lo),
        end_key: record_key(table, hi),
        epoch: Some(RegionEpoch {
            conf_ver: 1,
            version: 1,
        }),
        peers: vec![PeerMeta {
            id: id + 1000,
            store_id: 1,
        }],
    }
}

#[test]
fn the_peers_one_drain_creates_are_one_synced_write_answered_after_it() {
    let engine = Arc::new(MemEngine::new());
    let mut store =
        RaftStore::new(1, engine.clone(), NoTransport, RaftStoreConfig::default()).unwrap();
    let before = engine.counts();
    let mut answers: Vec<_> = (0..50)
        .map(|i| {
            let (cb, rx) = oneshot::channel();
            let region = region_of(7, 100 + i as u64, i * 10, i * 10 + 10);
            store.handle_msg(StoreMsg::CreatePeer { region, cb });
            rx
        })
        .collect();
    // Staged: in memory, not yet on disk, nobody answered.
    assert!(store.peer(149).is_some());
    assert_eq!(engine.counts(), before);
    assert!(engine
        .get(Cf::Raft, &keys::raft_state_key(149))
        .unwrap()
        .is_none());
    assert!(answers
        .iter_mut()
        .all(|rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))));

    store.write_life().unwrap();
    assert_eq!(engine.counts().synced_writes, before.synced_writes + 1);
    for (i, mut rx) in answers.into_iter().enumerate() {
        assert!(matches!(rx.try_recv(), Ok(Ok(()))), "peer {i} not answered");
        assert!(engine
            .get(Cf::Raft, &keys::raft_state_key(100 + i as u64))
            .unwrap()
            .is_some());
    }
    // A later drain with nothing staged writes nothing.
    store.write_life().unwrap();
    assert_eq!(engine.counts().synced_writes, before.synced_writes + 1);
}

#[test]
fn a_destroyed_peer_leaves_no_key_and_a_small_one_no_range_tombstone() {
    let engine = Arc::new(MemEngine::new());
    let (mut store, epoch) = one_region_store(engine.clone());
    // Region 11, table 8's, with data past the point-delete bound.
    store.create_peer(region_of(8, 11, 0, 1 << 20)).unwrap();
    let mut wb = crate::engine::WriteBatch::new();
    for h in 0..=crate::peer_storage::POINT_DELETES as i64 {
        wb.put(Cf::Default, record_key(8, h), b"v".to_vec());
    }
    engine.write(&wb, false).unwrap();

    let tx = drive_until_leader(store);
    // Region 10 gets rows, and its log entries.
    for h in 1..4 {
        let put = KvWrite {
            puts: vec![KvPair {
                key: record_key(7, h),
                value: b"row".to_vec(),
            }],
            ..Default::default()
        };
        let answer = ask(&tx, |cb| StoreMsg::Write {
            region_id: 10,
            epoch: Some(epoch),
            write: put,
            cb,
        });
        answer.blocking_recv().unwrap().unwrap();
    }
    let count = |cf: Cf, (start, end): (Vec<u8>, Vec<u8>)| {
        let mut n = 0;
        engine
            .scan(cf, &start, &end, &mut |_, _| {
                n += 1;
                true
            })
            .unwrap();
        n
    };
    assert!(count(Cf::Raft, keys::raft_log_range(10)) >= 3);
    assert_eq!(count(Cf::Default, table_record_range(7)), 3);

    let before = engine.counts();
    let destroy = |region_id| {
        ask(&tx, |cb| StoreMsg::DestroyPeer { region_id, cb })
            .blocking_recv()
            .unwrap()
            .unwrap()
    };
    destroy(10);
    assert_eq!(count(Cf::Raft, keys::raft_log_range(10)), 0);
    assert_eq!(count(Cf::Default, table_record_range(7)), 0);
    assert!(engine
        .get(Cf::Raft, &keys::raft_state_key(10))
        .unwrap()
        .is_none());
    assert_eq!(engine.counts().range_deletes, before.range_deletes);

    destroy(11);
    assert_eq!(count(Cf::Default, table_record_range(8)), 0);
    assert_eq!(engine.counts().range_deletes, before.range_deletes + 1);
}
