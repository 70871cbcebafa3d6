//! The arena of index records: 64-bit words, a record per object (see the replica's
//! module docs for the words), and the hasher of the index.

use crate::ids::HostId;
use crate::sync::{AtomicPtr, AtomicU64, Ordering};

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

/// Words per arena chunk (32 KiB). Records never straddle two chunks. Small, so that
/// the last chunk's unused words cost little an object (256 KiB chunks cost up to 2 bytes
/// an object at 115,000 objects: room the table's 8-byte buckets need).
#[cfg(not(megalon_loom))]
pub(super) const CHUNK_WORDS: usize = 1 << 12;
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

/// Chunks the arena can have: handles are 32-bit word indexes (one chunk short of the
/// whole range, so that a handle + 1 fits in 32 bits too).
#[cfg(not(megalon_loom))]
const DIRECTORY: usize = (1 << (32 - CHUNK_SHIFT)) - 1;
#[cfg(megalon_loom)]
const DIRECTORY: usize = 16;

/// The arena's words: a fixed directory of chunks, so that a reader without the lock
/// never sees the directory move (chunks are added, never freed or moved, until the
/// arena drops).
pub(super) struct Words {
    chunks: Box<[AtomicPtr<AtomicU64>]>,
}

impl Default for Words {
    fn default() -> Self {
        #[cfg(not(megalon_loom))]
        let chunks = {
            let layout = std::alloc::Layout::array::<AtomicPtr<AtomicU64>>(DIRECTORY)
                .expect("the directory's size fits");
            // SAFETY: the layout is not empty. An `AtomicPtr` has the layout of a pointer,
            // and all zeroes is the null pointer, so the zeroed memory is `DIRECTORY` valid
            // values; the box frees it with the same layout (that of the slice). Zeroed
            // memory is mapped lazily: an arena touches only the directory's pages that
            // point at its chunks (8 MiB of address space, 4 KiB of it up to 512 chunks,
            // 16 MiB of records).
            unsafe {
                let first = std::alloc::alloc_zeroed(layout) as *mut AtomicPtr<AtomicU64>;
                if first.is_null() {
                    std::alloc::handle_alloc_error(layout);
                }
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(first, DIRECTORY))
            }
        };
        #[cfg(megalon_loom)]
        let chunks = (0..DIRECTORY)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        Self { chunks }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // Chunks are made in order: the first null ends them (and the directory's pages
        // past it are never touched).
        for chunk in self.chunks.iter() {
            let chunk = chunk.load(Ordering::Acquire);
            if chunk.is_null() {
                break;
            }
            let words = std::ptr::slice_from_raw_parts_mut(chunk, CHUNK_WORDS);
            // SAFETY: made by `Box::into_raw` of a `CHUNK_WORDS` slice in `add_chunk`, freed
            // once; nobody reads the arena while it drops.
            drop(unsafe { Box::from_raw(words) });
        }
    }
}

impl Words {
    /// The words of the record at `handle` (and what follows it in its chunk), or `None`
    /// if its chunk is not (yet, for a reader racing replay) there.
    #[inline]
    pub(super) fn try_record(&self, handle: u32) -> Option<&[AtomicU64]> {
        let handle = handle as usize;
        // Acquire: pairs with `add_chunk`'s Release (the chunk's words as made).
        let chunk = self
            .chunks
            .get(handle >> CHUNK_SHIFT)?
            .load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        let at = handle & (CHUNK_WORDS - 1);
        // SAFETY: `chunk` points at `CHUNK_WORDS` words that live until the arena drops
        // (the borrow of `self` outlives the slice); `at < CHUNK_WORDS`.
        Some(unsafe { std::slice::from_raw_parts(chunk.add(at), CHUNK_WORDS - at) })
    }

    /// Starts loading the record at `handle` (its fields and a key of `key_len` bytes),
    /// without waiting for it: a hint, which changes nothing. A handle whose chunk is not
    /// there (a stale guess) is left alone.
    pub(super) fn prefetch(&self, handle: u32, key_len: usize) {
        if let Some(record) = self.try_record(handle) {
            let words = (FIELD_WORDS + key_words(key_len)).min(record.len());
            crate::arch::prefetch(record.as_ptr().cast(), words * 8);
        }
    }

    /// The words of the record at `handle`, which the caller knows is allocated.
    #[inline]
    pub(super) fn record(&self, handle: u32) -> &[AtomicU64] {
        self.try_record(handle)
            .expect("a handle of an allocated record")
    }

    fn add_chunk(&self, index: usize) {
        let chunk: Box<[AtomicU64]> = (0..CHUNK_WORDS).map(|_| AtomicU64::new(0)).collect();
        let chunk = Box::into_raw(chunk) as *mut AtomicU64;
        let slot = self
            .chunks
            .get(index)
            .expect("the arena has room for its records");
        slot.store(chunk, Ordering::Release);
    }

    // Relaxed, here and below: the arena changes only under the replica's write lock.
    // Readers either hold the read lock, which orders them after the writer, or read
    // without it and let the replica's seqlock say whether what they read holds. The
    // host counter, written under the read lock, is a hint that readers check against
    // the record.
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

    /// Whether the record at `handle` holds `key`; `false` if the record is not there or
    /// is cut short by its chunk's end (only a reader racing replay sees either).
    #[inline]
    pub(super) fn key_equals(&self, handle: u32, key: &[u8]) -> bool {
        let Some(record) = self.try_record(handle) else {
            return false;
        };
        let words = key_words(key.len());
        if record.len() < FIELD_WORDS + words {
            return false;
        }
        let meta = record[META].load(Ordering::Relaxed);
        (meta >> 32 & 0xffff) as usize == key.len()
            && (0..words)
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
}

/// Where the next record goes: the writer's side of the arena (replay only).
#[derive(Default)]
pub(super) struct Arena {
    /// Chunks made so far.
    chunks: usize,
    /// Next free word in the last chunk.
    used_in_last: usize,
    /// Freed records, by length in words.
    free: Vec<Vec<u32>>,
}

impl Arena {
    pub(super) fn allocate(&mut self, words: &Words, len: usize) -> u32 {
        if let Some(handle) = self.free.get_mut(len).and_then(Vec::pop) {
            return handle;
        }
        if self.chunks == 0 || self.used_in_last + len > CHUNK_WORDS {
            words.add_chunk(self.chunks);
            self.chunks += 1;
            self.used_in_last = 0;
        }
        let handle = ((self.chunks - 1) * CHUNK_WORDS + self.used_in_last) as u32;
        self.used_in_last += len;
        handle
    }

    pub(super) fn release(&mut self, handle: u32, len: usize) {
        if self.free.len() <= len {
            self.free.resize_with(len + 1, Vec::new);
        }
        self.free[len].push(handle);
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        let chunks = self.chunks * CHUNK_WORDS * std::mem::size_of::<AtomicU64>();
        // The directory's pages in use: a pointer per chunk.
        let directory = self.chunks.div_ceil(512) * 4096;
        let free = self
            .free
            .iter()
            .map(|list| list.capacity() * 4)
            .sum::<usize>()
            + self.free.capacity() * std::mem::size_of::<Vec<u32>>();
        (chunks + directory + free) as u64
    }
}
