//! A Bloom filter of BIGINT keys: how a hash join's build side, too many
//! keys for an IN list, still narrows the probe side's regions.
//!
//! The layout is Parquet's split-block Bloom filter (SBBF): an array of
//! 256-bit blocks, each eight 32-bit words. A key's 64-bit hash picks one
//! block with its high half and, with its low half times eight fixed odd
//! salts, one bit in each of the block's words. A probe reads one cache
//! line. Compute builds the filter from the build side's keys, and storage
//! tests each probe row against it: a miss means the row cannot join and
//! stays in the region; a hit may be false (about 1% at the twelve bits per
//! key compute uses), and the join itself drops those rows.
//!
//! Parquet hashes the value with xxHash64; ours is MurmurHash3's 64-bit
//! finalizer on the key, which is enough for integer keys and needs no
//! crate. The wire form is the words, little-endian (`ScalarFunc.bloom`);
//! both sides must agree on the hash, so the hash is part of the format.

use std::sync::Arc;

use crate::{invalid_input, Result};

/// Parquet's SBBF salts: one odd multiplier per word of a block.
const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// Bytes in one block.
pub const BLOCK_BYTES: usize = 32;

/// The largest filter a request may carry (64 MiB: 44 million keys at
/// twelve bits each).
pub const MAX_BLOOM_BYTES: usize = 64 << 20;

type Block = [u32; 8];

/// A split-block Bloom filter of BIGINT keys.
#[derive(Clone)]
pub struct Bloom(Arc<[Block]>);

#[inline(always)]
fn hash(key: i64) -> u64 {
    mix64(key as u64)
}

/// MurmurHash3's 64-bit finalizer: every input bit moves every output
/// bit. The Bloom filter and `aggregate::sketch` hash with it, and
/// compute's estimate of a join's distinct build keys.
#[inline(always)]
pub fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The bit each word of a block tests for `h`.
#[inline(always)]
fn mask(h: u64) -> Block {
    let x = h as u32;
    let mut m = [0u32; 8];
    for (w, salt) in m.iter_mut().zip(SALT) {
        *w = 1 << (x.wrapping_mul(salt) >> 27);
    }
    m
}

impl Bloom {
    /// A filter holding `keys`, `bits_per_key` bits for each (at least one
    /// block).
    pub fn build(keys: &[i64], bits_per_key: usize) -> Bloom {
        let bits = keys.len().saturating_mul(bits_per_key.max(1));
        let n = bits.div_ceil(BLOCK_BYTES * 8).max(1);
        let mut blocks = vec![[0u32; 8]; n];
        for &k in keys {
            let h = hash(k);
            let b = &mut blocks[block_index(h, n)];
            for (w, m) in b.iter_mut().zip(mask(h)) {
                *w |= m;
            }
        }
        Bloom(blocks.into())
    }

    /// False when `key` was certainly not added; true when it may have
    /// been.
    ///
    /// Every word is tested, without an early exit: a key that was not
    /// added finds its first missing bit at a random word, a branch
    /// mispredicted about half the time, while the eight tests together
    /// are one vector AND (two under SSE2). On 6 million probes of a
    /// 150-thousand-key filter that took 130 ms with the early exit, 60 ms
    /// without, and 20 ms in an AVX2 kernel (`executor::kernels`).
    #[inline(always)]
    pub fn may_contain(&self, key: i64) -> bool {
        let h = hash(key);
        let b = &self.0[block_index(h, self.0.len())];
        let m = mask(h);
        let mut missing = 0u32;
        for i in 0..8 {
            missing |= !b[i] & m[i];
        }
        missing == 0
    }

    pub fn size_bytes(&self) -> usize {
        self.0.len() * BLOCK_BYTES
    }

    /// The wire form: every word, little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0
            .iter()
            .flat_map(|b| b.iter().flat_map(|w| w.to_le_bytes()))
            .collect()
    }

    /// A filter from its wire form: whole blocks, at least one, at most
    /// 64 MiB.
    pub fn from_bytes(bytes: &[u8]) -> Result<Bloom> {
        if bytes.is_empty()
            || !bytes.len().is_multiple_of(BLOCK_BYTES)
            || bytes.len() > MAX_BLOOM_BYTES
        {
            return Err(invalid_input!(
                "a Bloom filter is 1 to {} blocks of {BLOCK_BYTES} bytes, not {} bytes",
                MAX_BLOOM_BYTES / BLOCK_BYTES,
                bytes.len()
            ));
        }
        let blocks: Vec<Block> = bytes
            .chunks_exact(BLOCK_BYTES)
            .map(|c| {
                let mut b = [0u32; 8];
                for (w, four) in b.iter_mut().zip(c.chunks_exact(4)) {
                    *w = u32::from_le_bytes([four[0], four[1], four[2], four[3]]);
                }
                b
            })
            .collect();
        Ok(Bloom(blocks.into()))
    }
}

/// The block `h` falls in, of `n`: the high half scaled to `0..n`.
#[inline(always)]
fn block_index(h: u64, n: usize) -> usize {
    (((h >> 32) * n as u64) >> 32) as usize
}

impl std::fmt::Debug for Bloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bloom({} bytes)", self.size_bytes())
    }
}

/// Equal when the bits are.
impl PartialEq for Bloom {
    fn eq(&self, other: &Bloom) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_added_key_is_found_and_few_others_are() {
        let keys: Vec<i64> = (0..100_000).map(|i| i * 7 + 3).collect();
        let bloom = Bloom::build(&keys, 12);
        assert!(keys.iter().all(|k| bloom.may_contain(*k)));
        let others = (0..100_000i64).map(|i| i * 7 + 4);
        let false_hits = others.filter(|k| bloom.may_contain(*k)).count();
        // About 0.5% at twelve bits per key; far below 2% unless broken.
        assert!(false_hits < 2_000, "{false_hits} false hits in 100000");
        assert!(
            false_hits > 0,
            "a 12-bit filter with no false hit is suspect"
        );
    }

    #[test]
    fn the_wire_form_round_trips_and_bad_sizes_are_refused() {
        let keys = [i64::MIN, -1, 0, 1, i64::MAX];
        let bloom = Bloom::build(&keys, 12);
        let back = Bloom::from_bytes(&bloom.to_bytes()).unwrap();
        assert_eq!(back, bloom);
        assert!(keys.iter().all(|k| back.may_contain(*k)));
        for bad in [0, 31, 33] {
            let err = Bloom::from_bytes(&vec![0; bad]).unwrap_err().to_string();
            assert!(err.contains("Bloom filter"), "{err}");
        }
    }

    #[test]
    fn an_empty_filter_holds_nothing() {
        let bloom = Bloom::build(&[], 12);
        assert_eq!(bloom.size_bytes(), BLOCK_BYTES);
        assert!(!(0..1000).any(|k| bloom.may_contain(k)));
    }

    /// The hash and the salts are part of the wire format: a filter built
    /// by one version must read the same in another.
    #[test]
    fn the_format_is_pinned() {
        let bloom = Bloom::build(&[42], 8);
        let words: Vec<u32> = bloom.0[0].to_vec();
        assert_eq!(bloom.0.len(), 1);
        assert_eq!(words.iter().map(|w| w.count_ones()).sum::<u32>(), 8);
        assert_eq!(hash(42), 0x8108_7960_8e42_59cc, "{:#x}", hash(42));
    }
}
