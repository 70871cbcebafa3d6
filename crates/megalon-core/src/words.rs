//! Little-endian words in byte buffers: how log entries and the pod header are read.

/// The little-endian `u64` at `buf[at..at + 8]`.
pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian `u32` at `buf[at..at + 4]`.
pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}
