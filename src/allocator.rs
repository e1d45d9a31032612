//! The process's memory allocator, and the one option Quarry changes.
//!
//! mimalloc rather than glibc's malloc: the coprocessor builds and drops
//! executors, batches and IPC buffers per region read on many threads,
//! where glibc's allocator spent a tenth of a read thread's time
//! (`docs/performance.md`, "Allocator").
//!
//! PURGE DELAY. mimalloc hands memory that has been free for
//! `purge_delay` milliseconds back to the kernel (v3's default: 1 s).
//! Quarry's bulk paths free and allocate tens of megabytes a second in
//! bursts: a region's Arrow pages arrive, are decoded, encoded into a
//! backup's Parquet or a query's hash table, and dropped; the next burst
//! comes a second or two later, and the kernel must zero every page it
//! hands back (2 MB at a time, as mimalloc asks for transparent huge
//! pages). A backup of TPC-H SF 1 spent a fifth of its samples in the
//! kernel's `clear_page_erms`. Ten seconds is jemalloc's
//! `dirty_decay_ms` default, the figure TiKV and most servers on jemalloc
//! run with: a burst's memory is reused by the next one, and an idle
//! process still gives it back within seconds. An operator's own
//! `MIMALLOC_PURGE_DELAY` in the environment wins.
//!
//! The option is set through mimalloc's C API, the binary's one use of
//! `unsafe` (the workspace denies it elsewhere): a store into mimalloc's
//! option table, made before the runtime starts any thread, as mimalloc
//! asks ("not thread safe").

use std::sync::OnceLock;

use libmimalloc_sys as ffi;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's index of `mi_option_purge_delay` (the same in v2 and v3;
/// libmimalloc-sys does not name it).
const PURGE_DELAY: ffi::mi_option_t = 15;

/// v3's default for it, read back first to check the index still means
/// the purge delay in the mimalloc that is linked.
const MIMALLOC_DEFAULT_PURGE_DELAY_MS: i64 = 1_000;

/// How long freed memory stays with the process before mimalloc returns
/// it to the kernel.
pub const PURGE_DELAY_MS: i64 = 10_000;

/// What [`tune`] did, for the start-up log.
#[derive(Debug, PartialEq, Eq)]
pub enum Tuned {
    /// The purge delay is now [`PURGE_DELAY_MS`].
    Set,
    /// `MIMALLOC_PURGE_DELAY` is in the environment: mimalloc reads it.
    Environment,
    /// The option at [`PURGE_DELAY`] did not hold the default this module
    /// expects (another mimalloc version): left alone.
    Unknown(i64),
}

static TUNED: OnceLock<Tuned> = OnceLock::new();

/// Sets the purge delay, unless the environment does. Call first in
/// `main`, before any thread starts.
pub fn tune() -> &'static Tuned {
    TUNED.get_or_init(set_purge_delay)
}

/// Logs what [`tune`] did when it is not what was meant (once logging is
/// set up).
pub fn log_tuning() {
    if let Some(Tuned::Unknown(found)) = TUNED.get() {
        tracing::warn!(
            "mimalloc's option {PURGE_DELAY} holds {found}, not the purge delay's default \
             {MIMALLOC_DEFAULT_PURGE_DELAY_MS}: another mimalloc version? Its purge delay is \
             left as it is (set MIMALLOC_PURGE_DELAY={PURGE_DELAY_MS} in the environment)"
        );
    }
}

/// Whether the environment sets the purge delay for mimalloc to read
/// (under the option's old name too, and in any case, as mimalloc reads
/// it).
fn purge_delay_in_environment() -> bool {
    let named = |v: &str| {
        v.eq_ignore_ascii_case("MIMALLOC_PURGE_DELAY")
            || v.eq_ignore_ascii_case("MIMALLOC_RESET_DELAY")
    };
    std::env::vars_os().any(|(k, _)| k.to_str().is_some_and(named))
}

#[allow(unsafe_code)]
fn set_purge_delay() -> Tuned {
    if purge_delay_in_environment() {
        return Tuned::Environment;
    }
    // SAFETY: `mi_option_get` and `mi_option_set` read and write one
    // integer slot of mimalloc's static option table, bounds-checked by
    // mimalloc; no pointer crosses the boundary. They are not thread safe,
    // and no other thread exists yet.
    let now: i64 = unsafe { ffi::mi_option_get(PURGE_DELAY) };
    if now != MIMALLOC_DEFAULT_PURGE_DELAY_MS {
        return Tuned::Unknown(now);
    }
    unsafe { ffi::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
    Tuned::Set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn the_purge_delay_is_the_option_that_is_set() {
        // The test binary links the same mimalloc: the index must name an
        // option whose default is v3's purge delay, and setting it must
        // read back.
        if purge_delay_in_environment() {
            assert_eq!(tune(), &Tuned::Environment);
            return;
        }
        assert_eq!(tune(), &Tuned::Set);
        // SAFETY: as in `tune`; reading one integer option.
        let now: i64 = unsafe { ffi::mi_option_get(PURGE_DELAY) };
        assert_eq!(now, PURGE_DELAY_MS);
    }
}
