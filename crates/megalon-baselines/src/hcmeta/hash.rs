//! The hash of a key, and what it decides: the owner host (the shard map, replicated as a
//! pure function), the CXL index bucket, the local index shard and the local table's
//! probe. Every host computes the same hash for the same key, in every process.

/// A key's 64-bit hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash(u64);

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// `hash * n / 2^64`: a value in `0..n` from the hash's high bits, without a division.
fn reduce(hash: u64, n: u64) -> u64 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u64
}

impl KeyHash {
    /// The hash of `key`: eight bytes at a time, then the finalizer.
    pub(crate) fn of(key: &[u8]) -> Self {
        let mut h = (key.len() as u64).wrapping_mul(MULTIPLIER) ^ 0x243f_6a88_85a3_08d3;
        let mut chunks = key.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            h = (h ^ word).wrapping_mul(MULTIPLIER).rotate_left(29);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            h = (h ^ u64::from_le_bytes(last))
                .wrapping_mul(MULTIPLIER)
                .rotate_left(29);
        }
        KeyHash(mix(h))
    }

    /// The host that owns the key, among `hosts` (the high bits).
    pub(crate) fn owner(self, hosts: usize) -> usize {
        reduce(self.0, hosts as u64) as usize
    }

    /// The key's bucket among an owner's `buckets` (bits independent of the owner's).
    pub(crate) fn bucket(self, buckets: u64) -> u64 {
        reduce(self.0.rotate_left(24), buckets)
    }

    /// The key's shard of the owner's local index, among `shards` (a power of two).
    pub(crate) fn shard(self, shards: usize) -> usize {
        debug_assert!(shards.is_power_of_two());
        (self.0 as usize) & (shards - 1)
    }

    /// The hash the local index's table probes with: remixed, because every key of one
    /// owner shares the high bits that chose the owner.
    pub(crate) fn table(self) -> u64 {
        mix(self.0 ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The raw value.
    pub(crate) fn value(self) -> u64 {
        self.0
    }

    /// Rebuilds a hash from [`KeyHash::value`].
    pub(crate) fn from_value(value: u64) -> Self {
        KeyHash(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_spread_evenly() {
        let hosts = 3;
        let mut counts = [0u64; 3];
        for i in 0..30_000 {
            counts[KeyHash::of(format!("user{i:012}").as_bytes()).owner(hosts)] += 1;
        }
        for count in counts {
            assert!((9_500..10_500).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn the_hash_depends_on_every_byte_and_the_length() {
        let a = KeyHash::of(b"key-0001");
        assert_ne!(a, KeyHash::of(b"key-0002"));
        assert_ne!(KeyHash::of(b"k"), KeyHash::of(b"k\0"));
        assert_eq!(a, KeyHash::of(b"key-0001"));
    }
}
