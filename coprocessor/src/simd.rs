//! Runtime-dispatched SIMD: the hot kernels compiled twice, once for the
//! baseline x86-64 the binary targets (SSE2) and once for AVX2, and the
//! AVX2 copy taken when the CPU has it.
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
//! only functions that run over a whole block (4096 rows) are wrapped: the
//! fused executor's filters ([`crate::executor::kernels`] through
//! `Pred::narrow`), a pack column's widening to i64, the arithmetic of
//! aggregate arguments and the group slots' dictionary-code and
//! dropped-row loops. The accumulation's scatter into group slots is not
//! wrapped: it does not vectorize. What they call must be
//! `#[inline(always)]` (or a generic the compiler inlines) to share the
//! AVX2 copy: a call to an ordinary function runs its baseline code.
//!
//! `QUARRY_SIMD=baseline` (or `off`) in a process's environment turns the
//! AVX2 copies off (to compare, as the criterion benches do with
//! [`set_enabled`]).
//!
//! The crate's only `unsafe` is here. In the macro: calling a
//! `#[target_feature]` function is unsafe because running AVX2 instructions
//! on a CPU without them is undefined; [`avx2`] is true only after
//! `is_x86_feature_detected!` confirmed every feature enabled. And in
//! [`bitmask64`] (below).
//!
//! BYTES TO BITS. One instruction the vectorizer never emits from a plain
//! loop is SSE2's byte movemask (`pmovmskb`: the top bit of each of 16
//! bytes into an integer), which is what turns a filter's 0/1 bytes into
//! its 64-row selection word ([`bitmask64`]). Written portably (a 64-bit
//! multiply per 8 bytes) the AVX2 copy came out as emulated vector
//! multiplies: 0.20 ns per row against 0.02–0.03 with the movemask. SSE2 is
//! part of every x86-64 CPU, so this call needs no detection; the `unsafe`
//! around it is only Rust's rule for `#[target_feature]` intrinsics.

use std::sync::atomic::{AtomicU8, Ordering};

/// Not decided yet / baseline / AVX2.
const UNKNOWN: u8 = 0;
const BASELINE: u8 = 1;
const AVX2: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether the AVX2 copies run: the CPU has AVX2 (and the features that
/// come with it on every AVX2 CPU: FMA, BMI1/2, LZCNT, POPCNT) and
/// neither `QUARRY_SIMD=baseline` nor [`set_enabled`] turned them off.
#[inline]
pub fn avx2() -> bool {
    match LEVEL.load(Ordering::Relaxed) {
        AVX2 => true,
        BASELINE => false,
        _ => detect(),
    }
}

#[cold]
fn detect() -> bool {
    let wanted = std::env::var("QUARRY_SIMD").map_or(true, |v| v != "baseline" && v != "off");
    let level = if wanted && cpu_has_avx2() {
        AVX2
    } else {
        BASELINE
    };
    // A `set_enabled` that ran meanwhile wins.
    match LEVEL.compare_exchange(UNKNOWN, level, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => level == AVX2,
        Err(set) => set == AVX2,
    }
}

/// Turns the AVX2 copies on (where the CPU has AVX2) or off, for this
/// process, and says whether they were on. Both compute the same answers;
/// benches use it to time one against the other.
pub fn set_enabled(on: bool) -> bool {
    let was = avx2();
    let level = if on && cpu_has_avx2() { AVX2 } else { BASELINE };
    LEVEL.store(level, Ordering::Relaxed);
    was
}

/// The kernels in use, for logs and bench reports.
pub fn level_name() -> &'static str {
    if avx2() {
        "avx2"
    } else {
        "baseline (sse2)"
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

/// Runs `f` once with the AVX2 copies off and once with them on (where the
/// CPU has AVX2), one test at a time: for tests that check both copies.
#[cfg(test)]
pub(crate) fn for_each_level(mut f: impl FnMut(bool)) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let was = avx2();
    for on in [false, true] {
        set_enabled(on);
        f(on && cpu_has_avx2());
    }
    set_enabled(was);
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
        for_each_level(|on| {
            assert_eq!(avx2(), on);
            assert_eq!(level_name() == "avx2", on);
            assert_eq!(sum_of_products(&a, &b), want);
        });
    }
}
