//! Values that catch torn reads.
//!
//! A [`Value`] names one write: the writer that made it and that writer's sequence number.
//! A test stores its encoding, a byte string of any length from [`MIN_ENCODED_LEN_BYTES`]
//! up, and decodes what it reads back. Every byte of the encoding depends on the pair, so
//! a read that mixes bytes of two writes (a torn read), a stale line in the middle of an
//! object, zeroes from a slot that was never written, or a short read fails to decode.
//!
//! Layout, all integers little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | `0..4` | writer (`u32`) |
//! | `4..8` | total encoded length in bytes (`u32`) |
//! | `8..16` | sequence (`u64`) |
//! | `16..len-8` | payload: a pattern derived from (writer, sequence), see [`Value::encode_into`] |
//! | `len-8..len` | checksum: FNV-1a 64 over bytes `0..len-8` |
//!
//! The checksum ([`crate::fnv`]) is not cryptographic; it only has to make an accidental mix
//! of two encodings fail, and the payload pattern is checked as well.

use std::fmt;

use crate::fnv::fnv1a64;

/// The shortest encoding: the 16-byte header and the 8-byte checksum, no payload.
pub const MIN_ENCODED_LEN_BYTES: usize = 24;

/// The longest encoding: its length must fit the header's `u32` length field.
pub const MAX_ENCODED_LEN_BYTES: usize = u32::MAX as usize;

const HEADER_LEN_BYTES: usize = 16;
const CHECKSUM_LEN_BYTES: usize = 8;

/// One write's identity: who wrote it and that writer's sequence number.
///
/// Tests give every writer its own id and bump the sequence at every write, so every
/// value written in a run is distinct and a read names exactly the write it saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// The writer: a thread, a host, whatever the test numbers.
    pub writer: u32,
    /// The writer's sequence number of this write.
    pub sequence: u64,
}

/// Why bytes that were read are not the encoding of any [`Value`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TornReason {
    /// Shorter than [`MIN_ENCODED_LEN_BYTES`].
    TooShort,
    /// The length field disagrees with the number of bytes read.
    LengthMismatch {
        /// What the length field says.
        encoded_len_bytes: u32,
    },
    /// The checksum does not match the other bytes.
    Checksum,
    /// The checksum matches but the payload is not the pattern of (writer, sequence).
    Pattern {
        /// Offset of the first wrong byte.
        offset_bytes: usize,
    },
}

/// Bytes that do not decode: a torn (or otherwise corrupt) read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("torn read of {len_bytes} bytes: {reason}")]
pub struct Torn {
    /// How many bytes were read.
    pub len_bytes: usize,
    /// What is wrong with them.
    pub reason: TornReason,
}

impl fmt::Display for TornReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TornReason::TooShort => {
                write!(f, "shorter than the {MIN_ENCODED_LEN_BYTES}-byte minimum")
            }
            TornReason::LengthMismatch { encoded_len_bytes } => {
                write!(f, "the length field says {encoded_len_bytes} bytes")
            }
            TornReason::Checksum => write!(f, "checksum mismatch"),
            TornReason::Pattern { offset_bytes } => {
                write!(f, "payload differs from the pattern at byte {offset_bytes}")
            }
        }
    }
}

impl fmt::Display for Value {
    /// `writer:sequence`, the form the history text format uses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.writer, self.sequence)
    }
}

impl Value {
    /// The value `sequence` of `writer`.
    pub const fn new(writer: u32, sequence: u64) -> Self {
        Value { writer, sequence }
    }

    /// The encoding of this value, `len_bytes` long.
    pub fn encode(self, len_bytes: usize) -> Result<Vec<u8>, crate::Error> {
        check_len(len_bytes)?;
        let mut bytes = vec![0; len_bytes];
        self.encode_into(&mut bytes)?;
        Ok(bytes)
    }

    /// Writes the encoding of this value into all of `buf`, without allocating.
    ///
    /// The payload is the little-endian bytes of `splitmix64(seed + i * GOLDEN)` for the
    /// `i`-th 8-byte block (the last block cut short), where `seed` mixes writer and
    /// sequence; see the module docs for the rest of the layout.
    pub fn encode_into(self, buf: &mut [u8]) -> Result<(), crate::Error> {
        check_len(buf.len())?;
        let len_bytes = buf.len();
        buf[0..4].copy_from_slice(&self.writer.to_le_bytes());
        buf[4..8].copy_from_slice(&(len_bytes as u32).to_le_bytes());
        buf[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        let payload_end = len_bytes - CHECKSUM_LEN_BYTES;
        let seed = self.pattern_seed();
        for (block, chunk) in buf[HEADER_LEN_BYTES..payload_end].chunks_mut(8).enumerate() {
            let word = pattern_word(seed, block).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let checksum = fnv1a64(&buf[..payload_end]);
        buf[payload_end..].copy_from_slice(&checksum.to_le_bytes());
        Ok(())
    }

    /// The value whose encoding `bytes` is, or why `bytes` is no encoding (a torn read).
    pub fn decode(bytes: &[u8]) -> Result<Value, Torn> {
        let torn = |reason| Torn {
            len_bytes: bytes.len(),
            reason,
        };
        if bytes.len() < MIN_ENCODED_LEN_BYTES {
            return Err(torn(TornReason::TooShort));
        }
        let encoded_len_bytes = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if encoded_len_bytes as usize != bytes.len() {
            return Err(torn(TornReason::LengthMismatch { encoded_len_bytes }));
        }
        let payload_end = bytes.len() - CHECKSUM_LEN_BYTES;
        let checksum = u64::from_le_bytes(bytes[payload_end..].try_into().expect("8 bytes"));
        if checksum != fnv1a64(&bytes[..payload_end]) {
            return Err(torn(TornReason::Checksum));
        }
        let value = Value {
            writer: u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")),
            sequence: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        };
        let seed = value.pattern_seed();
        for (block, chunk) in bytes[HEADER_LEN_BYTES..payload_end].chunks(8).enumerate() {
            let word = pattern_word(seed, block).to_le_bytes();
            if let Some(wrong) = chunk.iter().zip(word).position(|(&got, want)| got != want) {
                return Err(torn(TornReason::Pattern {
                    offset_bytes: HEADER_LEN_BYTES + block * 8 + wrong,
                }));
            }
        }
        Ok(value)
    }

    fn pattern_seed(self) -> u64 {
        splitmix64((u64::from(self.writer) << 32) ^ self.sequence.rotate_left(17))
    }
}

fn check_len(len_bytes: usize) -> Result<(), crate::Error> {
    if (MIN_ENCODED_LEN_BYTES..=MAX_ENCODED_LEN_BYTES).contains(&len_bytes) {
        Ok(())
    } else {
        Err(crate::Error::ValueLength {
            len_bytes,
            min_bytes: MIN_ENCODED_LEN_BYTES,
            max_bytes: MAX_ENCODED_LEN_BYTES,
        })
    }
}

fn pattern_word(seed: u64, block: usize) -> u64 {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    splitmix64(seed.wrapping_add((block as u64).wrapping_mul(GOLDEN)))
}

/// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_every_length_around_the_block_size() {
        for len in MIN_ENCODED_LEN_BYTES..MIN_ENCODED_LEN_BYTES + 40 {
            let value = Value::new(7, 1_000_000_007);
            let bytes = value.encode(len).unwrap();
            assert_eq!(bytes.len(), len);
            assert_eq!(Value::decode(&bytes), Ok(value), "length {len}");
        }
    }

    #[test]
    fn encode_into_matches_encode() {
        let value = Value::new(3, 9);
        let mut buf = [0u8; 100];
        value.encode_into(&mut buf).unwrap();
        assert_eq!(buf.to_vec(), value.encode(100).unwrap());
    }

    #[test]
    fn rejects_lengths_outside_the_limits() {
        for len in [0, 1, MIN_ENCODED_LEN_BYTES - 1] {
            assert!(matches!(
                Value::new(1, 1).encode(len),
                Err(crate::Error::ValueLength { len_bytes, .. }) if len_bytes == len
            ));
            let mut buf = vec![0; len];
            assert!(Value::new(1, 1).encode_into(&mut buf).is_err());
        }
    }

    #[test]
    fn short_reads_and_zeroes_are_torn() {
        let bytes = Value::new(1, 2).encode(64).unwrap();
        assert_eq!(
            Value::decode(&bytes[..20]).unwrap_err().reason,
            TornReason::TooShort
        );
        assert!(matches!(
            Value::decode(&bytes[..63]).unwrap_err().reason,
            TornReason::LengthMismatch {
                encoded_len_bytes: 64
            }
        ));
        assert!(Value::decode(&[0u8; 64]).is_err());
    }

    #[test]
    fn a_mix_of_two_writes_is_torn_at_every_split_point() {
        let old = Value::new(1, 5).encode(80).unwrap();
        let new = Value::new(2, 6).encode(80).unwrap();
        for split in 1..80 {
            let mut mixed = new[..split].to_vec();
            mixed.extend_from_slice(&old[split..]);
            assert!(
                Value::decode(&mixed).is_err(),
                "new then old, split {split}"
            );
            let mut mixed = old[..split].to_vec();
            mixed.extend_from_slice(&new[split..]);
            assert!(
                Value::decode(&mixed).is_err(),
                "old then new, split {split}"
            );
        }
    }

    #[test]
    fn every_single_bit_flip_is_torn() {
        let bytes = Value::new(9, 99).encode(48).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(Value::decode(&flipped).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_payload_that_matches_a_forged_checksum_is_still_torn() {
        let mut bytes = Value::new(4, 4).encode(40).unwrap();
        bytes[20] ^= 0xff;
        let payload_end = bytes.len() - CHECKSUM_LEN_BYTES;
        let forged = fnv1a64(&bytes[..payload_end]).to_le_bytes();
        bytes[payload_end..].copy_from_slice(&forged);
        assert_eq!(
            Value::decode(&bytes).unwrap_err().reason,
            TornReason::Pattern { offset_bytes: 20 }
        );
    }

    #[test]
    fn different_values_have_different_payloads() {
        let values = [(1, 2), (2, 1), (1, 3), (0, 0), (0, 1), (1, 0)];
        for (i, &(w1, s1)) in values.iter().enumerate() {
            for &(w2, s2) in &values[i + 1..] {
                let a = Value::new(w1, s1).encode(64).unwrap();
                let b = Value::new(w2, s2).encode(64).unwrap();
                assert_ne!(a[16..56], b[16..56], "{w1}:{s1} and {w2}:{s2}");
            }
        }
    }
}
