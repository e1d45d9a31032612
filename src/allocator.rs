//! The process's memory allocator, and the two things Quarry changes about
//! how it gets memory from the kernel.
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
//! hands back. Ten seconds is jemalloc's `dirty_decay_ms` default, the
//! figure TiKV and most servers on jemalloc run with: a burst's memory is
//! reused by the next one, and an idle process still gives it back within
//! seconds. An operator's own `MIMALLOC_PURGE_DELAY` in the environment
//! wins.
//!
//! NO TRANSPARENT HUGE PAGES. mimalloc asks for transparent huge pages
//! (`MADV_HUGEPAGE`) on its arenas, so each first touch of a 2 MiB
//! stretch faults in a whole huge page. On the VMs Quarry is measured on
//! that is slow (touching 1 GiB of fresh memory: 2.1–2.6 s of kernel time
//! with huge pages, 0.34 s with 4 KiB ones; not compaction, most likely
//! the balloon handing free 2 MiB blocks back to the host), and every
//! process that grows into new memory paid it: a backup's compute spent
//! 3.0 s in the kernel against 0.7–1.0 s without, and backups took a
//! third less time without (`docs/performance.md`, "Backups without
//! transparent huge pages"; TiDB asks for THP off on TiKV's hosts, and
//! MariaDB turns it off in its server). So [`tune`] turns THP off for
//! the process (`PR_SET_THP_DISABLE`, which the kernel checks at every
//! fault, so it also covers the arena mimalloc reserved before `main`,
//! and which child processes inherit). An operator's `MIMALLOC_ALLOW_THP`
//! in the environment wins: where it allows them, [`tune`] clears a
//! switch inherited from a parent `quarry` process; where it does not,
//! mimalloc turns them off itself.
//!
//! RELEASE AFTER A BIG QUERY. The purge delay keeps a finished query's
//! memory with the process, and mimalloc hands it back only when the
//! thread that owns it next allocates. A compute process asks for it back
//! when a query that reserved 64 MiB or more ends
//! (`quarry_compute::df::memory_release`); each runtime worker thread,
//! as it parks, calls [`release_if_asked`], which has mimalloc collect
//! that thread's free pages and purge them at once (`mi_collect`, forced),
//! once per ask. Storage processes never ask.
//!
//! The purge delay is set through mimalloc's C API, the binary's one use
//! of `unsafe` (the workspace denies it elsewhere): a store into
//! mimalloc's option table, made before the runtime starts any thread, as
//! mimalloc asks ("not thread safe"), and the collection above. THP goes
//! off through `prctl`, a safe call in `nix`.

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
pub struct Tuning {
    pub purge_delay: Tuned,
    pub huge_pages: HugePages,
}

/// What [`tune`] did with the purge delay.
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

/// What [`tune`] did with transparent huge pages.
#[derive(Debug, PartialEq, Eq)]
pub enum HugePages {
    /// Off for this process and the processes it starts.
    Off,
    /// `MIMALLOC_ALLOW_THP` is in the environment: mimalloc reads it (and
    /// where it allows them, a switch inherited from a parent is cleared).
    Environment,
    /// The kernel refused the switch: left as they are (why, for the log).
    Refused(String),
}

static TUNED: OnceLock<Tuning> = OnceLock::new();

/// Sets the purge delay and turns transparent huge pages off, each
/// unless the environment says otherwise. Call first in `main`, before
/// any thread starts.
pub fn tune() -> &'static Tuning {
    TUNED.get_or_init(|| Tuning {
        purge_delay: set_purge_delay(),
        huge_pages: huge_pages_off(),
    })
}

/// Collects this thread's free memory and purges it, if a release was
/// asked since the thread last did (see the module docs). The runtime
/// calls it as a worker thread parks: one relaxed load and a thread-local
/// read when nothing was asked. Returns whether it collected.
pub fn release_if_asked() -> bool {
    thread_local! {
        static SEEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let asked = quarry_compute::df::memory_release::asked();
    if SEEN.with(|seen| seen.replace(asked)) == asked {
        return false;
    }
    // SAFETY: `mi_collect` works on the calling thread's own heap and the
    // arenas' free ranges, under mimalloc's own locks; no pointer crosses
    // the boundary.
    #[allow(unsafe_code)]
    unsafe {
        ffi::mi_collect(true)
    };
    true
}

/// Logs what [`tune`] did when it is not what was meant (once logging is
/// set up).
pub fn log_tuning() {
    let Some(tuning) = TUNED.get() else {
        return;
    };
    if let Tuned::Unknown(found) = tuning.purge_delay {
        tracing::warn!(
            "mimalloc's option {PURGE_DELAY} holds {found}, not the purge delay's default \
             {MIMALLOC_DEFAULT_PURGE_DELAY_MS}: another mimalloc version? Its purge delay is \
             left as it is (set MIMALLOC_PURGE_DELAY={PURGE_DELAY_MS} in the environment)"
        );
    }
    if let HugePages::Refused(why) = &tuning.huge_pages {
        tracing::warn!("{why}");
    }
}

/// Where mimalloc reads its options: `MIMALLOC_` and the option's name.
const ENV_PREFIX: &str = "MIMALLOC_";

/// Whether the environment variable `key` sets one of `options` (an
/// option's names), in any case, as mimalloc reads them.
fn names_option(key: &str, options: &[&str]) -> bool {
    key.get(..ENV_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
        && options
            .iter()
            .any(|o| key[ENV_PREFIX.len()..].eq_ignore_ascii_case(o))
}

/// The value the environment gives one of `options` for mimalloc to
/// read, if it names one.
fn environment_value(options: &[&str]) -> Option<std::ffi::OsString> {
    std::env::vars_os().find_map(|(k, v)| {
        k.to_str()
            .is_some_and(|k| names_option(k, options))
            .then_some(v)
    })
}

/// Turns transparent huge pages off for the process, unless the
/// environment sets mimalloc's `allow_thp`. When it allows them, a switch
/// inherited from a parent `quarry` process is cleared, so the variable
/// wins either way; when it does not, mimalloc turns them off itself.
fn huge_pages_off() -> HugePages {
    let allowed = environment_value(&["ALLOW_THP"]).map(|v| allows(v.to_str().unwrap_or("")));
    let (off, answer) = match allowed {
        Some(false) => return HugePages::Environment,
        Some(true) => (false, HugePages::Environment),
        None => (true, HugePages::Off),
    };
    match nix::sys::prctl::set_thp_disable(off) {
        Ok(()) => answer,
        Err(e) if off => HugePages::Refused(format!(
            "transparent huge pages could not be turned off for this process ({e}); \
             set MIMALLOC_ALLOW_THP=0 in the environment"
        )),
        Err(e) => HugePages::Refused(format!(
            "MIMALLOC_ALLOW_THP allows transparent huge pages, but the switch this process \
             inherited could not be cleared ({e}): they stay off"
        )),
    }
}

/// Whether a boolean option's value enables it, as mimalloc reads one:
/// empty, `1`, `TRUE`, `YES` or `ON` (any case) enable it; `0`, `FALSE`,
/// `NO` or `OFF` do not; another number enables it unless it is 0; what
/// mimalloc cannot read leaves the default, which for `allow_thp` is on.
fn allows(value: &str) -> bool {
    let v = value.trim().to_ascii_uppercase();
    match v.as_str() {
        "" | "1" | "TRUE" | "YES" | "ON" => true,
        "0" | "FALSE" | "NO" | "OFF" => false,
        n => n.parse::<i64>() != Ok(0),
    }
}

/// Whether the environment sets the purge delay for mimalloc to read
/// (under the option's old name too).
fn purge_delay_in_environment() -> bool {
    environment_value(&["PURGE_DELAY", "RESET_DELAY"]).is_some()
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
            assert_eq!(tune().purge_delay, Tuned::Environment);
            return;
        }
        assert_eq!(tune().purge_delay, Tuned::Set);
        // SAFETY: as in `tune`; reading one integer option.
        let now: i64 = unsafe { ffi::mi_option_get(PURGE_DELAY) };
        assert_eq!(now, PURGE_DELAY_MS);
    }

    /// The process's anonymous resident memory, in bytes.
    fn rss_anon() -> u64 {
        quarry::bench::status_bytes(std::process::id(), "RssAnon").unwrap()
    }

    #[test]
    fn a_thread_hands_its_freed_memory_back_once_for_each_release_asked() {
        tune();
        std::thread::spawn(|| {
            // A thread new to the asks may collect once, then not again.
            release_if_asked();
            assert!(!release_if_asked());
            // 256 MiB touched and freed stay with the process (the purge
            // delay) until a release is asked and the thread collects.
            let blocks: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; 1 << 20]).collect();
            assert_eq!(blocks.iter().map(|b| b[4096] as usize).sum::<usize>(), 256);
            drop(blocks);
            let kept = rss_anon();
            quarry_compute::df::memory_release::ask();
            assert!(release_if_asked());
            assert!(!release_if_asked(), "once per ask");
            let after = rss_anon();
            if !purge_delay_in_environment() {
                assert!(
                    kept.saturating_sub(after) >= 128 << 20,
                    "RssAnon {kept} before the release, {after} after"
                );
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn transparent_huge_pages_are_off_unless_the_environment_says() {
        if environment_value(&["ALLOW_THP"]).is_some() {
            assert_eq!(tune().huge_pages, HugePages::Environment);
            return;
        }
        assert_eq!(tune().huge_pages, HugePages::Off);
        // The kernel's own flag, as every later fault will read it (a
        // test runner that had it set already would pass this too; the
        // answer above is what `tune` did).
        assert!(nix::sys::prctl::get_thp_disable().unwrap());
    }

    #[test]
    fn allow_thp_values_read_as_mimalloc_reads_them() {
        for on in ["", "1", "true", "Yes", "ON", "2", " 1 ", "what"] {
            assert!(allows(on), "{on:?}");
        }
        for off in ["0", "false", "No", "off", " 0"] {
            assert!(!allows(off), "{off:?}");
        }
    }

    #[test]
    fn options_are_found_in_the_environment_as_mimalloc_reads_them() {
        let delay = ["PURGE_DELAY", "RESET_DELAY"];
        assert!(names_option("MIMALLOC_PURGE_DELAY", &delay));
        assert!(names_option("mimalloc_reset_delay", &delay));
        assert!(names_option("MIMALLOC_ALLOW_THP", &["ALLOW_THP"]));
        assert!(!names_option("MIMALLOC_ALLOW_THP", &delay));
        assert!(!names_option("MIMALLOC_", &delay));
        assert!(!names_option("PURGE_DELAY", &delay));
        assert!(!names_option("MIMALLOC_PURGE_DELAY_MS", &delay));
        // A name shorter than the prefix, or not cut on a character.
        assert!(!names_option("MIMALL", &delay));
        assert!(!names_option("MIMALLOCé_PURGE_DELAY", &delay));
    }
}
