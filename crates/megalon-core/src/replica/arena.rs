//! The arena of index records: 64-bit words, a record per object (see the replica's
//! module docs for the words), and the hasher of the index.

use crate::ids::HostId;
use crate::sync::{AtomicU64, Ordering};

/// The index's hasher: hashbrown's default (seeded per process) in normal builds; a fixed
/// one in loom models, where the number of arena loads per lookup must not change from one
/// run of the model to the next.
#[cfg(not(megalon_loom))]
pub(super) type IndexHasher = hashbrown::DefaultHashBuilder;
#[cfg(megalon_loom)]
pub(super) type IndexHasher =
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// Host counter value meaning "unknown: my cached lines of this object may be stale".
pub(crate) const UNKNOWN_COUNTER: u32 = u32::MAX;

pub(super) const FIELD_WORDS: usize = 3;
pub(super) const STAMP: usize = 0;
pub(super) const PLACE: usize = 1;
pub(super) const META: usize = 2;

/// Words per arena chunk. Records never straddle two chunks.
#[cfg(not(megalon_loom))]
pub(super) const CHUNK_WORDS: usize = 1 << 15;
#[cfg(megalon_loom)]
pub(super) const CHUNK_WORDS: usize = 1 << 6;
pub(super) const CHUNK_SHIFT: u32 = CHUNK_WORDS.trailing_zeros();

pub(super) fn key_words(key_len: usize) -> usize {
    key_len.div_ceil(8)
}

/// The key's `i`-th word as stored: eight bytes, little-endian, zero-padded.
#[inline]
pub(super) fn key_word(key: &[u8], i: usize) -> u64 {
    let start = i * 8;
    match key.get(start..start + 8) {
        Some(full) => u64::from_le_bytes(full.try_into().expect("8")),
        None => {
            let mut bytes = [0u8; 8];
            let rest = &key[start..];
            bytes[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(bytes)
        }
    }
}

pub(super) fn meta_word(counter: u32, key_len: usize, owner: Option<HostId>) -> u64 {
    let owner = owner.map_or(0, |host| u64::from(host) + 1);
    u64::from(counter) | (key_len as u64) << 32 | owner << 48
}

pub(super) fn owner_of(meta: u64) -> Option<HostId> {
    match meta >> 48 {
        0 => None,
        owner => Some(owner as HostId - 1),
    }
}

/// The arena of index records.
#[derive(Default)]
pub(super) struct Arena {
    chunks: Vec<Box<[AtomicU64]>>,
    /// Next free word in the last chunk.
    used_in_last: usize,
    /// Freed records, by length in words.
    free: Vec<Vec<u32>>,
}

impl Arena {
    /// The words of the record at `handle` (and what follows it in its chunk).
    #[inline]
    pub(super) fn record(&self, handle: u32) -> &[AtomicU64] {
        let handle = handle as usize;
        &self.chunks[handle >> CHUNK_SHIFT][handle & (CHUNK_WORDS - 1)..]
    }

    // Relaxed, here and below: the arena changes only under the replica's write lock, and
    // readers hold the read lock, which orders them after the writer. The host counter,
    // written under the read lock, is a hint that readers check against the record.
    #[inline]
    pub(super) fn get(&self, handle: u32, field: usize) -> u64 {
        self.record(handle)[field].load(Ordering::Relaxed)
    }

    #[inline]
    pub(super) fn set(&self, handle: u32, field: usize, value: u64) {
        self.record(handle)[field].store(value, Ordering::Relaxed)
    }

    #[inline]
    pub(super) fn key_len(&self, handle: u32) -> usize {
        (self.get(handle, META) >> 32 & 0xffff) as usize
    }

    #[inline]
    pub(super) fn key_equals(&self, handle: u32, key: &[u8]) -> bool {
        let record = self.record(handle);
        let meta = record[META].load(Ordering::Relaxed);
        (meta >> 32 & 0xffff) as usize == key.len()
            && (0..key_words(key.len()))
                .all(|i| record[FIELD_WORDS + i].load(Ordering::Relaxed) == key_word(key, i))
    }

    pub(super) fn key_into<'b>(&self, handle: u32, buf: &'b mut [u8]) -> &'b [u8] {
        let len = self.key_len(handle);
        for (i, chunk) in buf[..len].chunks_mut(8).enumerate() {
            let bytes = self.get(handle, FIELD_WORDS + i).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        &buf[..len]
    }

    pub(super) fn allocate(&mut self, words: usize) -> u32 {
        if let Some(handle) = self.free.get_mut(words).and_then(Vec::pop) {
            return handle;
        }
        if self.chunks.is_empty() || self.used_in_last + words > CHUNK_WORDS {
            let chunk: Box<[AtomicU64]> = (0..CHUNK_WORDS).map(|_| AtomicU64::new(0)).collect();
            self.chunks.push(chunk);
            self.used_in_last = 0;
        }
        let handle = ((self.chunks.len() - 1) * CHUNK_WORDS + self.used_in_last) as u32;
        self.used_in_last += words;
        handle
    }

    pub(super) fn release(&mut self, handle: u32, words: usize) {
        if self.free.len() <= words {
            self.free.resize_with(words + 1, Vec::new);
        }
        self.free[words].push(handle);
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        let chunks = self.chunks.len() * CHUNK_WORDS * std::mem::size_of::<AtomicU64>()
            + self.chunks.capacity() * std::mem::size_of::<Box<[AtomicU64]>>();
        let free = self
            .free
            .iter()
            .map(|list| list.capacity() * 4)
            .sum::<usize>()
            + self.free.capacity() * std::mem::size_of::<Vec<u32>>();
        (chunks + free) as u64
    }
}
