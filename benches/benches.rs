//! Criterion benchmarks, laid out like raft-rs's: one `main`, suites in
//! `suites/`. Run with `cargo bench --bench benches` (release profile).
//!
//! * `coprocessor`: row decoding, and one region's scan + filter + partial
//!   aggregation for TPC-H Q1 and Q6 over an in-memory region of real
//!   lineitem rows (tpchgen, SF 0.01), row layout.
//! * `column`: the same over packs (SF 0.1): decoding packs, and Q1/Q6
//!   with the fused executor (the best kernels the CPU has; as
//!   `*_fused_avx2`, AVX2 at most, without the AVX-512 kernel; as
//!   `*_fused_baseline_simd`, the baseline ones) and with the generic
//!   executors.
//! * `merge`: compute's part of Q1 (DataFusion's Final aggregation, sort)
//!   over 64 regions' partial states.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;

mod suites;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = suites::coprocessor::bench, suites::merge::bench
}
criterion_main!(benches);
