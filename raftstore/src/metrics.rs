//! The storage process's Prometheus metrics, registered in the default
//! registry that the status port (`quarry storage --status-addr`) serves at
//! `/metrics`.
//!
//! Counters and histograms are updated where the work happens: the
//! coprocessor in [`crate::node::Node::coprocessor`], Raft proposals and
//! apply in the store loop (`store.rs`, `peer/propose.rs`). Region and
//! leader counts and RocksDB's background work are gauges refreshed when
//! the metrics are read ([`refresh`]), from the same status the `Status`
//! RPC answers, so a scrape costs one store-loop round trip.
//!
//! Names follow Prometheus' conventions (`_total` counters, `_seconds`
//! histograms) with the prefix `quarry_`, as TiKV uses `tikv_`.

use std::sync::LazyLock;

use prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge, register_int_gauge_vec, Histogram, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec,
};

/// Latency buckets from 0.1 ms to ~13 s.
fn buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0001, 2.0, 18).unwrap_or_default()
}

macro_rules! metric {
    ($name:ident: $ty:ty = $reg:ident!($($arg:tt)*)) => {
        pub static $name: LazyLock<$ty> =
            LazyLock::new(|| $reg!($($arg)*).expect("a metric registers once"));
    };
}

metric!(COP_REQUESTS: IntCounterVec = register_int_counter_vec!(
    "quarry_coprocessor_requests_total",
    "Coprocessor requests (one per region task), by outcome: ok, region_error, error",
    &["outcome"]
));
metric!(COP_DURATION: HistogramVec = register_histogram_vec!(
    "quarry_coprocessor_duration_seconds",
    "Coprocessor task time: wait (queued for a read thread) and process (executing)",
    &["phase"],
    buckets()
));
metric!(COP_SCANNED_KEYS: IntCounter = register_int_counter!(
    "quarry_coprocessor_scanned_keys_total",
    "Keys (rows of the row layout, delta rows) the coprocessor read"
));
metric!(COP_PACKS: IntCounterVec = register_int_counter_vec!(
    "quarry_coprocessor_packs_total",
    "Column-layout packs: scanned, skipped by their zone maps, fallback (handed from the fused kernels to the generic path)",
    &["what"]
));
metric!(COP_SENT_BYTES: IntCounter = register_int_counter!(
    "quarry_coprocessor_sent_bytes_total",
    "Bytes of coprocessor response data (Arrow chunks or rows) sent to compute"
));
metric!(COP_SHARED: IntCounter = register_int_counter!(
    "quarry_coprocessor_reads_shared_total",
    "Coprocessor requests answered by joining the same read in flight at the same snapshot, or by its answer kept since (node/same_reads.rs)"
));
metric!(RAFT_PROPOSALS: IntCounter = register_int_counter!(
    "quarry_raft_proposals_total",
    "Commands proposed to Raft by this store's leaders"
));
metric!(RAFT_COMMIT: Histogram = register_histogram!(
    "quarry_raft_commit_duration_seconds",
    "From proposing a command to applying its committed entry on the leader",
    buckets()
));
metric!(RAFT_PROPOSE: Histogram = register_histogram!(
    "quarry_raft_propose_duration_seconds",
    "From proposing a command to answering it (applied, and persisted unless early apply)",
    buckets()
));
metric!(RAFT_APPLY: Histogram = register_histogram!(
    "quarry_raft_apply_duration_seconds",
    "Applying one Ready's committed entries, all regions together",
    buckets()
));
metric!(SST_UPLOADS: IntCounterVec = register_int_counter_vec!(
    "quarry_sst_uploads_total",
    "SST files uploaded to this store by bulk loaders, by outcome: ok, error",
    &["outcome"]
));
metric!(SST_UPLOAD_BYTES: IntCounter = register_int_counter!(
    "quarry_sst_upload_bytes_total",
    "Bytes of SST files uploaded to this store"
));
metric!(REGIONS: IntGauge = register_int_gauge!(
    "quarry_regions",
    "Regions with a replica on this store"
));
metric!(LEADERS: IntGauge = register_int_gauge!(
    "quarry_region_leaders",
    "Regions whose leader is this store's replica"
));
metric!(ROCKSDB: IntGaugeVec = register_int_gauge_vec!(
    "quarry_rocksdb_background",
    "RocksDB background work, summed over column families: running compactions and flushes, pending ones, pending compaction bytes",
    &["property"]
));

/// Sets the gauges from a store status and the engine's properties.
pub fn refresh(status: &quarry_proto::meta::StatusResponse, background: &[(&'static str, u64)]) {
    REGIONS.set(status.regions.len() as i64);
    LEADERS.set(status.regions.iter().filter(|r| r.is_leader).count() as i64);
    for (property, value) in background {
        ROCKSDB
            .with_label_values(&[*property])
            .set(i64::try_from(*value).unwrap_or(i64::MAX));
    }
}

metric!(COP_RUNNING: IntGauge = register_int_gauge!(
    "quarry_coprocessor_running",
    "Coprocessor tasks running on the read pool now"
));

/// One coprocessor task running on the read pool, counted in
/// `quarry_coprocessor_running` until dropped.
pub struct CopRunning(());

impl CopRunning {
    pub fn start() -> Self {
        COP_RUNNING.inc();
        CopRunning(())
    }
}

impl Drop for CopRunning {
    fn drop(&mut self) {
        COP_RUNNING.dec();
    }
}

/// Counts one coprocessor answer.
pub fn observe_coprocessor(resp: &quarry_proto::coprocessor::CopResponse) {
    count_answer(resp);
    if let Some(s) = &resp.summary {
        COP_DURATION
            .with_label_values(&["wait"])
            .observe(s.wait_ns as f64 / 1e9);
        COP_DURATION
            .with_label_values(&["process"])
            .observe(s.process_ns as f64 / 1e9);
        COP_SCANNED_KEYS.inc_by(s.scanned_keys);
        COP_PACKS
            .with_label_values(&["scanned"])
            .inc_by(s.blocks_scanned);
        COP_PACKS
            .with_label_values(&["skipped"])
            .inc_by(s.blocks_skipped);
        COP_PACKS
            .with_label_values(&["fallback"])
            .inc_by(s.blocks_fallback);
    }
}

/// Counts one coprocessor answer that joined a read in flight: an answer
/// sent, no work of its own (the read counted its work once).
pub fn observe_shared_coprocessor(resp: &quarry_proto::coprocessor::CopResponse) {
    COP_SHARED.inc();
    count_answer(resp);
}

/// A coprocessor answer by its outcome, and its bytes.
fn count_answer(resp: &quarry_proto::coprocessor::CopResponse) {
    let outcome = if resp.region_error.is_some() {
        "region_error"
    } else if resp.other_error.is_some() {
        "error"
    } else {
        "ok"
    };
    COP_REQUESTS.with_label_values(&[outcome]).inc();
    COP_SENT_BYTES.inc_by(resp.data.len() as u64);
}
