//! Runtime-dispatched SIMD: the hot kernels compiled twice, once for the
//! baseline x86-64 the binary targets (SSE2) and once for AVX2, and the
//! AVX2 copy taken when the CPU has it; the few-group sums and counts
//! written out with intrinsics, for AVX2 and for AVX-512.
//!
//! WHY AT RUN TIME. The release binary targets plain x86-64 so that it runs
//! on any x86-64 machine; built that way, the compiler vectorizes the
//! kernels with 16-byte SSE2 vectors only. Building with
//! `-C target-cpu=native` would give 32-byte AVX2 vectors but a binary that
//! faults on an older CPU. Like DuckDB and Velox, we keep one binary and
//! pick per CPU: `kernel!` wraps a function so that its body, with
//! everything it inlines, is compiled a second time under
//! `#[target_feature(enable = "avx2,…")]`, and a call takes that copy when
//! [`avx2`] says so. The bodies are plain Rust loops written for the
//! vectorizer (their one intrinsic is SSE2's, in [`bitmask64`], the same
//! instruction in both copies), so both copies compute the same answer by
//! construction, and the tests run both.
//!
//! WHAT IS WRAPPED. A dispatch costs a relaxed atomic load and a branch, so
//! only functions that run over a whole block (a pack's rows) are wrapped: the
//! fused executor's filters ([`crate::executor::kernels`] through
//! `Pred::narrow`), a pack column's widening to i64, the arithmetic of
//! aggregate arguments and the group slots' dictionary-code and
//! dropped-row loops. The accumulation's scatter into group slots is not
//! wrapped: it does not vectorize (with few slots it is replaced: below).
//! What they call must be `#[inline(always)]` (or a
//! generic the compiler inlines) to share the AVX2 copy: a call to an
//! ordinary function runs its baseline code.
//!
//! FEW GROUPS, WRITTEN OUT. One loop the vectorizer cannot widen is the
//! scatter of each row's values into its group's sums. Where a block has
//! few groups, [`FewSlots`] keeps each group's sums in vector registers
//! instead and adds the rows that are the group's under a mask, written
//! with intrinsics: on AVX-512 (F and VL) with mask registers, 8 rows at a
//! time; on AVX2 with an AND before each add, 4 rows at a time, and with
//! the work cut to what few slots need (the largest slot as the total less
//! the others, rare slots moved row by row: see the type).
//! [`counts_in_slots`] counts a block's rows per slot the same way (the
//! compares' bits or lanes). Both say `None` elsewhere and the caller
//! keeps its scalar loop. Levels: baseline < AVX2 < AVX-512 ([`Level`]).
//!
//! PREFETCH. A fused filter over a pack's column runs at memory speed,
//! not at the speed of its compares: on the SF 1 cluster the 2-byte
//! date's loads were half of a store's Q6 samples, the column read from
//! the block cache in DRAM, while the same kernel over data in the caches
//! (the `speed_probe` test) is about four times faster a row. The
//! hardware's prefetcher alone left those loads stalled (a pack's column
//! is a run of 32–64 KiB, each filter one pass over its own). So the
//! loops that read a packed column in order (the filters'
//! [`crate::executor::kernels::and_range_packed`] and `and_packed`, and
//! the widening decode behind the programs' inputs and the generic path's
//! Arrow arrays) ask, every 64 rows, for the bytes [`prefetch_ahead`]
//! further on ([`prefetch_span`]). A gather of selected rows does not:
//! prefetching the row 16 selections ahead changed nothing measurable.
//! `QUARRY_PREFETCH=off` in a process's environment (or bytes, for
//! another distance) and [`set_prefetch_ahead`] are there to compare.
//!
//! `QUARRY_SIMD=baseline` (or `off`) in a process's environment turns the
//! AVX2 copies and the AVX-512 kernels off, `QUARRY_SIMD=avx2` the AVX-512
//! kernels only (to compare, as the criterion benches do with
//! [`set_level`]).
//!
//! The crate's only `unsafe` is here. In the macro: calling a
//! `#[target_feature]` function is unsafe because running AVX2 instructions
//! on a CPU without them is undefined; [`avx2`] is true only after
//! `is_x86_feature_detected!` confirmed every feature enabled ([`avx512`]
//! likewise for the AVX-512 kernels, whose unaligned loads are unsafe too:
//! their bounds are asserted before the loop). And in [`bitmask64`] and
//! [`prefetch`] (below).
//!
//! BYTES TO BITS. One instruction the vectorizer never emits from a plain
//! loop is SSE2's byte movemask (`pmovmskb`: the top bit of each of 16
//! bytes into an integer), which is what turns a filter's 0/1 bytes into
//! its 64-row selection word ([`bitmask64`]). Written portably (a 64-bit
//! multiply per 8 bytes) the AVX2 copy came out as emulated vector
//! multiplies: 0.20 ns per row against 0.02–0.03 with the movemask. SSE2 is
//! part of every x86-64 CPU, so this call needs no detection; the `unsafe`
//! around it is only Rust's rule for `#[target_feature]` intrinsics.

mod few;

pub use few::{
    counts_in_slots, FewSlots, AVX2_COUNT_SLOTS_MAX, AVX2_MASKED_MAX, AVX2_RARE_MAX,
    MASKED_COUNT_SLOTS_MAX, MASKED_SLOTS_MAX,
};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// Which copies of the kernels run, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// SSE2, every x86-64 CPU's.
    Baseline,
    /// The AVX2 copies of `kernel!` functions.
    Avx2,
    /// The AVX2 copies and the AVX-512 kernels ([`FewSlots`]).
    Avx512,
}

/// Not decided yet; else a [`Level`] as `1 + level`.
const UNKNOWN: u8 = 0;

static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

fn encode(level: Level) -> u8 {
    1 + level as u8
}

/// The kernels in use: the best this CPU has, unless `QUARRY_SIMD`
/// (`baseline`/`off`, or `avx2` to leave AVX-512 out) or [`set_level`]
/// capped it.
#[inline]
pub fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        1 => Level::Baseline,
        2 => Level::Avx2,
        3 => Level::Avx512,
        _ => detect(),
    }
}

/// Whether the AVX2 copies run: the CPU has AVX2 (and the features that
/// come with it on every AVX2 CPU: FMA, BMI1/2, LZCNT, POPCNT) and
/// neither `QUARRY_SIMD=baseline` nor [`set_level`] turned them off.
#[inline]
pub fn avx2() -> bool {
    level() >= Level::Avx2
}

/// Whether the AVX-512 kernels run (AVX-512 F and VL, on top of
/// [`avx2`]'s features).
#[inline]
pub fn avx512() -> bool {
    level() == Level::Avx512
}

#[cold]
fn detect() -> Level {
    let cap = match std::env::var("QUARRY_SIMD").as_deref() {
        Ok("baseline" | "off") => Level::Baseline,
        Ok("avx2") => Level::Avx2,
        _ => Level::Avx512,
    };
    let level = cap.min(cpu_level());
    // A `set_level` that ran meanwhile wins.
    match LEVEL.compare_exchange(UNKNOWN, encode(level), Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => level,
        Err(_) => self::level(),
    }
}

/// Runs the kernels at `wanted` (or the best below it this CPU has), for
/// this process, whatever `QUARRY_SIMD` says, and says the level before.
/// Every level computes the same answers; benches use it to time one
/// against another.
pub fn set_level(wanted: Level) -> Level {
    let was = level();
    LEVEL.store(encode(wanted.min(cpu_level())), Ordering::Relaxed);
    was
}

/// The kernels in use, for logs and bench reports.
pub fn level_name() -> &'static str {
    match level() {
        Level::Avx512 => "avx512",
        Level::Avx2 => "avx2",
        Level::Baseline => "baseline (sse2)",
    }
}

/// The best level this CPU runs.
pub fn cpu_level() -> Level {
    if !cpu_has_avx2() {
        Level::Baseline
    } else if cpu_has_avx512() {
        Level::Avx512
    } else {
        Level::Avx2
    }
}

/// Whether this CPU runs the AVX2 copies' instructions.
pub fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("lzcnt")
            && std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the AVX-512 kernels' instructions (F and VL, and
/// F16C, which enabling AVX-512 F implies to the compiler).
fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines a function whose body is compiled twice, for the baseline and
/// for AVX2, and dispatched on [`avx2`] at each call (see the module
/// docs). Takes a free function with plain `name: Type` arguments
/// (`impl Trait` ones too) and lifetime parameters, no type parameters.
macro_rules! kernel {
    (
        $(#[$attr:meta])*
        $vis:vis fn $name:ident $(<$($lt:lifetime),+>)? ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$attr])*
        $vis fn $name $(<$($lt),+>)? ( $($arg : $ty),* ) $(-> $ret)? {
            #[inline(always)]
            fn body $(<$($lt),+>)? ( $($arg : $ty),* ) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
                fn avx2 $(<$($lt),+>)? ( $($arg : $ty),* ) $(-> $ret)? {
                    body($($arg),*)
                }
                if $crate::simd::avx2() {
                    // SAFETY: `simd::avx2` is true only on a CPU that has
                    // every feature `avx2` is compiled with.
                    #[allow(unsafe_code)]
                    let out = unsafe { avx2($($arg),*) };
                    return out;
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use kernel;

/// The low bit of each of the 64 bytes (each 0 or 1) as a 64-bit word,
/// byte `i` to bit `i`: four SSE2 byte movemasks on x86-64 (see the module
/// docs), a multiply per 8 bytes elsewhere. (The movemask reads each
/// byte's low bit whatever the byte; the multiply needs 0 or 1.)
#[inline(always)]
pub fn bitmask64(bytes: &[u8; 64]) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::{_mm_movemask_epi8, _mm_set_epi64x, _mm_slli_epi16};
        let mut mask = 0u64;
        for (k, sixteen) in bytes.chunks_exact(16).enumerate() {
            let lo = i64::from_le_bytes(sixteen[..8].try_into().expect("8 bytes"));
            let hi = i64::from_le_bytes(sixteen[8..].try_into().expect("8 bytes"));
            // SAFETY: SSE2 is in every x86-64 CPU (the baseline the binary
            // targets); the intrinsics take values, no pointers. The shift
            // moves each byte's low bit to its top bit, which the movemask
            // reads.
            #[allow(unsafe_code)]
            let bits = unsafe { _mm_movemask_epi8(_mm_slli_epi16::<7>(_mm_set_epi64x(hi, lo))) };
            mask |= u64::from(bits as u16) << (16 * k);
        }
        mask
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        let mut mask = 0u64;
        for (c, chunk) in bytes.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            mask |= (x.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * c);
        }
        mask
    }
}

/// What [`prefetch_ahead`] answers before `QUARRY_PREFETCH` is read.
const AHEAD_UNKNOWN: usize = usize::MAX;

/// The farthest [`prefetch_ahead`] reaches (a larger setting is cut to
/// it): further than any pack column, and far from overflowing an offset.
pub const PREFETCH_AHEAD_MAX: usize = 1 << 20;

static AHEAD: AtomicUsize = AtomicUsize::new(AHEAD_UNKNOWN);

/// How far ahead of the row it is at, in bytes of a column, a sequential
/// kernel asks for the column's bytes (0: it does not; see "PREFETCH" in
/// the module docs). [`PREFETCH_AHEAD`] unless `QUARRY_PREFETCH` (bytes,
/// or `off`) or [`set_prefetch_ahead`] said otherwise, at most
/// [`PREFETCH_AHEAD_MAX`].
#[inline]
pub fn prefetch_ahead() -> usize {
    match AHEAD.load(Ordering::Relaxed) {
        AHEAD_UNKNOWN => {
            let ahead = match std::env::var("QUARRY_PREFETCH").as_deref() {
                Ok("off") => 0,
                Ok(v) => v.parse().unwrap_or(PREFETCH_AHEAD),
                Err(_) => PREFETCH_AHEAD,
            }
            .min(PREFETCH_AHEAD_MAX);
            // A `set_prefetch_ahead` that ran meanwhile wins.
            match AHEAD.compare_exchange(AHEAD_UNKNOWN, ahead, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => ahead,
                Err(set) => set,
            }
        }
        ahead => ahead,
    }
}

/// Sets [`prefetch_ahead`] for this process (0 turns prefetching off),
/// whatever `QUARRY_PREFETCH` says, and says what it was. Answers are the
/// same either way; the kernel tests use it to run both.
pub fn set_prefetch_ahead(bytes: usize) -> usize {
    let was = prefetch_ahead();
    AHEAD.store(bytes.min(PREFETCH_AHEAD_MAX), Ordering::Relaxed);
    was
}

/// The default of [`prefetch_ahead`]: 4 KiB, two thousand rows of a
/// 2-byte column (measured against 1, 2, 8 and 16 KiB: "Prefetching the
/// packed columns" in `docs/performance.md`).
pub const PREFETCH_AHEAD: usize = 4096;

/// Asks the core to bring the cache line holding `data[at]` into its
/// first-level cache, if `at` is in bounds. A hint: it never faults and
/// changes no result.
#[inline(always)]
pub fn prefetch(data: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = data.get(at) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults, and the pointer
        // is in bounds anyway; SSE (which has the instruction) is part of
        // every x86-64 CPU.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>((b as *const u8).cast::<i8>())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, at);
}

/// [`prefetch`] of the `len` bytes from `data[at]`, a cache line at a
/// time (the part in bounds).
#[inline(always)]
pub fn prefetch_span(data: &[u8], at: usize, len: usize) {
    let mut k = 0;
    while k < len {
        prefetch(data, at + k);
        k += 64;
    }
}

/// Runs `f` at each level this CPU has (baseline, AVX2, AVX-512), each
/// with prefetching off, 64 bytes ahead (so that a short column's loop
/// reaches past its end) and at the default distance, one test at a time:
/// for tests that check every copy. ([`prefetch_ahead`] says which.)
#[cfg(test)]
pub(crate) fn for_each_level(mut f: impl FnMut(Level)) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    /// Puts the level and the distance back, also when a test's check
    /// panics.
    struct Restore(Level, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_level(self.0);
            set_prefetch_ahead(self.1);
        }
    }
    let _restore = Restore(level(), prefetch_ahead());
    for l in [Level::Baseline, Level::Avx2, Level::Avx512] {
        if l <= cpu_level() {
            set_level(l);
            for ahead in [0, 64, PREFETCH_AHEAD] {
                set_prefetch_ahead(ahead);
                f(l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    kernel! {
        /// A loop the vectorizer widens: the same sums either way.
        fn sum_of_products(a: &[i64], b: &[i64]) -> i64 {
            a.iter().zip(b).map(|(x, y)| x.wrapping_mul(*y)).fold(0, i64::wrapping_add)
        }
    }

    kernel! {
        fn bitmask_in_a_kernel(bytes: &[u8; 64]) -> u64 {
            bitmask64(bytes)
        }
    }

    #[test]
    fn a_prefetch_distance_past_the_bound_is_cut_to_it() {
        // Inside `for_each_level`, which holds the setting for this test
        // and puts it back.
        for_each_level(|_| {
            set_prefetch_ahead(usize::MAX);
            assert_eq!(prefetch_ahead(), PREFETCH_AHEAD_MAX);
            set_prefetch_ahead(PREFETCH_AHEAD_MAX + 1);
            assert_eq!(prefetch_ahead(), PREFETCH_AHEAD_MAX);
            // Out of bounds, a prefetch is no access at all.
            prefetch_span(&[1u8; 10], PREFETCH_AHEAD_MAX, 4096);
            set_prefetch_ahead(0);
            assert_eq!(prefetch_ahead(), 0);
        });
    }

    #[test]
    fn bitmask_puts_byte_i_at_bit_i_in_both_copies() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..200 {
            let mut bytes = [0u8; 64];
            for b in bytes.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = match round {
                    0 => 0,
                    1 => 1,
                    _ => (state & 1) as u8,
                };
            }
            let want = (0..64).fold(0u64, |m, i| m | (u64::from(bytes[i]) << i));
            for_each_level(|_| assert_eq!(bitmask_in_a_kernel(&bytes), want));
        }
    }

    #[test]
    fn both_copies_compute_the_same_answer() {
        let a: Vec<i64> = (0..1000).map(|i| i * 7 - 300).collect();
        let b: Vec<i64> = (0..1000).map(|i| 1000 - i * 3).collect();
        let want: i64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        for_each_level(|l| {
            assert_eq!(avx2(), l >= Level::Avx2);
            assert_eq!(avx512(), l == Level::Avx512);
            assert_eq!(level(), l);
            assert_eq!(sum_of_products(&a, &b), want);
        });
    }
}
