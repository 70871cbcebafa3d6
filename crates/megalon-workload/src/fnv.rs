//! FNV-1a 64: the hash of a [`Value`](crate::Value)'s checksum and of YCSB's key
//! scrambling ([`fnvhash64`](crate::fnvhash64)).
//!
//! From the offset basis `0xcbf29ce484222325`, for each byte: `hash ^= byte; hash *=
//! 0x100000001b3` (wrapping). It is not cryptographic.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        // From the FNV reference test suite (isthe.com/chongo/tech/comp/fnv).
        let vectors: [(&[u8], u64); 3] = [
            (b"", 0xcbf2_9ce4_8422_2325),
            (b"a", 0xaf63_dc4c_8601_ec8c),
            (b"foobar", 0x8594_4171_f739_67e8),
        ];
        for (bytes, hash) in vectors {
            assert_eq!(fnv1a64(bytes), hash, "{bytes:?}");
        }
    }
}
