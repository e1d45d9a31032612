//! One script, run against both engines.

use quarry_coprocessor::storage::KeyRange;

use super::memory::MemEngine;
use super::rocks::{RocksConfig, RocksEngine};
use super::{Cf, Engine, WriteBatch};

fn collect(e: &impl Engine, cf: Cf, start: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    e.scan(cf, start, end, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    out
}

fn script(e: &impl Engine) {
    let mut wb = WriteBatch::new();
    for i in 0u8..10 {
        wb.put(Cf::Default, vec![b'k', i], vec![i; 3]);
    }
    wb.put(Cf::Raft, b"local".to_vec(), b"x".to_vec());
    e.write(&wb, true).unwrap();

    assert_eq!(e.get(Cf::Default, &[b'k', 3]).unwrap(), Some(vec![3; 3]));
    assert_eq!(
        e.get(Cf::Default, b"local").unwrap(),
        None,
        "column families are apart"
    );
    assert_eq!(e.get(Cf::Raft, b"local").unwrap(), Some(b"x".to_vec()));

    let got = collect(e, Cf::Default, &[b'k', 2], &[b'k', 5]);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].0, vec![b'k', 2]);
    assert_eq!(collect(e, Cf::Default, b"", b"").len(), 10);

    // Snapshot scans stay inside their bounds and see a fixed point in time.
    let bounds = KeyRange::new(vec![b'k', 4], vec![b'k', 8]);
    let seen = e.with_snapshot(&bounds, |s| {
        let mut wb = WriteBatch::new();
        wb.put(Cf::Default, vec![b'k', 5, 0], b"late".to_vec());
        e.write(&wb, false).unwrap();
        s.begin_scan(&KeyRange::new(vec![], vec![]), false).unwrap();
        let mut keys = Vec::new();
        while let Some((k, v)) = s.scan_next().unwrap() {
            assert_eq!(v.len(), 3);
            keys.push(k.to_vec());
        }
        s.begin_scan(&KeyRange::new(vec![b'k', 6], vec![]), true)
            .unwrap();
        let mut n = 0;
        while s.scan_next().unwrap().is_some() {
            n += 1;
        }
        // A range wholly outside the bounds scans nothing.
        s.begin_scan(&KeyRange::new(vec![b'k', 8], vec![b'k', 9]), false)
            .unwrap();
        let outside = s.scan_next().unwrap().map(|(k, _)| k.to_vec());
        (keys, n, outside)
    });
    assert_eq!(
        seen.0,
        vec![vec![b'k', 4], vec![b'k', 5], vec![b'k', 6], vec![b'k', 7]]
    );
    assert_eq!(seen.1, 2);
    assert_eq!(seen.2, None);

    let mut wb = WriteBatch::new();
    wb.delete_range(Cf::Default, vec![b'k', 0], vec![b'k', 5]);
    wb.delete(Cf::Default, vec![b'k', 9]);
    e.write(&wb, true).unwrap();
    let left: Vec<Vec<u8>> = collect(e, Cf::Default, b"", b"")
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(
        left,
        vec![
            vec![b'k', 5],
            vec![b'k', 5, 0],
            vec![b'k', 6],
            vec![b'k', 7],
            vec![b'k', 8]
        ]
    );
}

#[test]
fn memory_engine() {
    script(&MemEngine::new());
}

#[test]
fn rocks_engine() {
    let dir = tempfile::tempdir().unwrap();
    script(&RocksEngine::open(dir.path(), &RocksConfig::default()).unwrap());
    // Data survives a reopen.
    let e = RocksEngine::open(dir.path(), &RocksConfig::default()).unwrap();
    assert_eq!(e.get(Cf::Raft, b"local").unwrap(), Some(b"x".to_vec()));
}

#[test]
fn memory_engine_reads_fail_on_demand() {
    let e = MemEngine::new();
    let mut wb = WriteBatch::new();
    wb.put(Cf::Default, b"k".to_vec(), b"v".to_vec());
    wb.put(Cf::Raft, b"r".to_vec(), b"x".to_vec());
    e.write(&wb, true).unwrap();
    e.fail_reads(Cf::Default, true);
    assert!(e.get(Cf::Default, b"k").is_err());
    assert!(e.scan(Cf::Default, b"", b"", &mut |_, _| true).is_err());
    assert!(e.seek_prev(Cf::Default, b"z", b"").is_err());
    assert_eq!(
        e.get(Cf::Raft, b"r").unwrap(),
        Some(b"x".to_vec()),
        "other column families still read"
    );
    e.fail_reads(Cf::Default, false);
    assert_eq!(e.get(Cf::Default, b"k").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn rocks_ingests_an_sst_atomically_and_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = RocksEngine::open(&dir.path().join("db"), &RocksConfig::default()).unwrap();
    let mut wb = WriteBatch::new();
    wb.put(Cf::Default, b"a".to_vec(), b"old".to_vec());
    e.write(&wb, false).unwrap();

    let sst = dir.path().join("x.sst");
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0u8..100).map(|i| (vec![b'b', i], vec![i; 8])).collect();
    let len = super::rocks::write_sst(&sst, pairs.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
    assert!(len > 0);
    // A snapshot taken before sees none of it; one after sees all of it.
    let before = e.with_snapshot(&KeyRange::new(vec![], vec![]), |s| {
        e.ingest(Cf::Default, &sst).unwrap();
        s.begin_scan(&KeyRange::new(b"b".to_vec(), b"c".to_vec()), false)
            .unwrap();
        let mut n = 0;
        while s.scan_next().unwrap().is_some() {
            n += 1;
        }
        n
    });
    assert_eq!(before, 0);
    assert_eq!(collect(&e, Cf::Default, b"b", b"c"), pairs);
    assert_eq!(e.get(Cf::Default, b"a").unwrap(), Some(b"old".to_vec()));
    assert!(sst.exists(), "the caller's file stays until it deletes it");
    // Ingesting the same file again changes nothing.
    e.ingest(Cf::Default, &sst).unwrap();
    assert_eq!(collect(&e, Cf::Default, b"b", b"c"), pairs);

    // A range delete hides the pairs at once; reclaiming the range frees
    // the files (no compaction would pick bottom-level ingested files).
    assert!(e.approximate_size(b"b", b"c") > 0);
    // An empty end is the end of the key space (the last region's range).
    assert!(e.approximate_size(b"b", b"") >= e.approximate_size(b"b", b"c"));
    let mut wb = WriteBatch::new();
    wb.delete_range(Cf::Default, b"b".to_vec(), b"c".to_vec());
    e.write(&wb, false).unwrap();
    assert_eq!(collect(&e, Cf::Default, b"b", b"c"), vec![]);
    e.reclaim_range(b"b", b"c");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while e.approximate_size(b"b", b"c") > 0 {
        assert!(std::time::Instant::now() < deadline, "the files stayed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(e.get(Cf::Default, b"a").unwrap(), Some(b"old".to_vec()));
    // The in-memory engine refuses.
    let err = MemEngine::new().ingest(Cf::Default, &sst).unwrap_err();
    assert!(err.to_string().contains("cannot ingest"), "{err}");
}

#[test]
fn a_scan_that_does_not_fill_the_cache_leaves_the_block_cache_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let e = RocksEngine::open(&dir.path().join("db"), &RocksConfig::default()).unwrap();
    // Ingested, so every read goes through the file's data blocks (32 KiB
    // each: about 30 of them).
    let sst = dir.path().join("x.sst");
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0u32..4000)
        .map(|i| {
            let k = format!("k{i:08}").into_bytes();
            let v = (0..200).map(|j| (i as u8).wrapping_mul(31) ^ j).collect();
            (k, v)
        })
        .collect();
    super::rocks::write_sst(&sst, pairs.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
    e.ingest(Cf::Default, &sst).unwrap();
    let scan_all = |fill_cache: bool| {
        e.with_snapshot_source(&KeyRange::new(vec![], vec![]), fill_cache, |make| {
            let mut s = make();
            s.begin_scan(&KeyRange::new(vec![], vec![]), false).unwrap();
            let mut n = 0;
            while s.scan_next().unwrap().is_some() {
                n += 1;
            }
            n
        })
    };
    let before = e.block_cache_usage();
    assert_eq!(scan_all(false), pairs.len());
    assert_eq!(
        e.block_cache_usage(),
        before,
        "a one-pass scan left its blocks out of the cache"
    );
    assert_eq!(scan_all(true), pairs.len());
    assert!(
        e.block_cache_usage() >= before + 400_000,
        "a query's scan caches the blocks it read: {} bytes, from {before}",
        e.block_cache_usage()
    );
}
