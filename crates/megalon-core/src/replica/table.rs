//! The index's hash table: open addressing with linear probing over atomic buckets, so
//! that a reader may probe it while replay changes it (the replica's seqlock, in
//! `mod.rs`, says afterwards whether what it read holds).
//!
//! A bucket is one 64-bit word. Its low half is empty, a tombstone (a removed entry:
//! probes go on past it), or full: a tag of the key's hash in its high bits and the
//! arena handle (+ 2, so that no full bucket reads as empty or tombstone) in the rest.
//! Its high half is the object's slot. One load says whether the bucket may hold the
//! key, where its arena record is and where the object is: a read's copy waits on one
//! load (the bucket) and may start while the key comparison and the entry's fields,
//! one load further (the record), are still on their way. With the slot only in the
//! record, the copy waited on both (issue 16: a read-write-shared read 1.9x-2.0x its
//! ceiling, then 1.6x-1.7x). A probe compares a key in the arena only when the tag matches.
//!
//! The tag has as many bits as the handles leave: 8 while the arena's handles fit in 24
//! bits (128 MiB of records), one fewer for every doubling past that, down to none at the
//! arena's 32-bit limit. A handle that needs more bits than the current array leaves
//! rebuilds the array with a shorter tag, as growth does (each array keeps its own split,
//! so a reader decodes a bucket by the array it loaded it from). A shorter tag costs only
//! more key comparisons on collisions.
//!
//! Arrays come in sizes of 2^k and 1.5 x 2^k, and a home is the hash scaled to the size
//! (a multiply): growth from 7/8 full adds a third or a half, not a doubling, so at 8
//! bytes a bucket and a load between 0.58 and 7/8 the table costs 9.1 to 13.8 bytes an
//! object (doubling: 9.1 to 18.3, past the replica's budget of 64 bytes an object).
//!
//! Only replay changes the table, under the replica's write lock; the methods that change
//! it take `&self` because readers share the structure. Growth builds a new array and
//! publishes it; the old one may still be under a reader's probe, so it stays mapped
//! until the table drops, its pages given back to the system (see `BucketWords`).

use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const EMPTY: u32 = 0;
const TOMBSTONE: u32 = 1;
/// What a full bucket adds to its handle, so that it is neither [`EMPTY`] nor
/// [`TOMBSTONE`].
const HANDLE_BIAS: u32 = 2;
/// Most bits of tag a bucket has.
const MAX_TAG_BITS: u32 = 8;
/// Fewest buckets an array has.
const MIN_BUCKETS: usize = 16;
/// Smallest replaced array whose pages growth gives back: below it, the system call and
/// the page faults of the array's reuse cost more than its pages (a pod that creates and
/// deletes a few objects rebuilds a small table every few operations).
#[cfg(not(megalon_loom))]
const RELEASED_BYTES: usize = 64 << 10;

/// The low half of a bucket word: empty, tombstone, or tag and handle.
#[inline]
fn low(word: u64) -> u32 {
    word as u32
}

/// The slot in a full bucket word (its high half).
#[inline]
fn slot_in(word: u64) -> u32 {
    (word >> 32) as u32
}

/// The home bucket of `hash` in an array of `len`: the low half of the hash scaled to
/// the array (a multiply, not a mask: arrays come in sizes of 2^k and 1.5 x 2^k). The
/// tag comes from the top of the high half.
#[inline]
fn home_of(hash: u64, len: usize) -> usize {
    (((hash & 0xffff_ffff) * len as u64) >> 32) as usize
}

/// The bucket after `at` in an array of `len`.
#[inline]
fn next(at: usize, len: usize) -> usize {
    if at + 1 == len {
        0
    } else {
        at + 1
    }
}

/// The fewest buckets of an array that holds `entries` below 7/8 load:
/// a size of 2^k or 1.5 x 2^k, from [`MIN_BUCKETS`] up. Two sizes per doubling keep the
/// buckets a growth leaves empty (and so the bytes an object) lower than doubling does,
/// and the sizes few, so that the arrays growth keeps stay bounded.
fn size_for(entries: usize) -> usize {
    let needed = entries * 8 / 7 + 1;
    let power = needed.next_power_of_two().max(MIN_BUCKETS);
    let between = power / 4 * 3;
    if between >= needed && between >= MIN_BUCKETS {
        between
    } else {
        power
    }
}

/// Bits of tag left beside `handle` (its bucket holds `handle + HANDLE_BIAS`).
fn tag_bits_for(handle: u32) -> u32 {
    let needed = u64::BITS - (u64::from(handle) + u64::from(HANDLE_BIAS)).leading_zeros();
    (u32::BITS - needed.min(u32::BITS)).min(MAX_TAG_BITS)
}

struct Buckets {
    len: usize,
    /// Bits of the bucket word below the tag (32 when there is no tag). An atomic: an
    /// array replaced by growth may be used again, with another split, while a late
    /// reader still probes it (see [`Table::reuse`]).
    handle_bits: AtomicU32,
    words: BucketWords,
}

impl Buckets {
    fn new(count: usize, tag_bits: u32) -> Box<Self> {
        Box::new(Self {
            len: count,
            handle_bits: AtomicU32::new(u32::BITS - tag_bits),
            words: BucketWords::new(count),
        })
    }

    #[inline]
    fn handle_bits(&self) -> u32 {
        self.handle_bits.load(Ordering::Relaxed)
    }

    /// Bits of tag this array's buckets carry.
    fn tag_bits(&self) -> u32 {
        u32::BITS - self.handle_bits()
    }

    /// The tag of `hash` in this array, in place in the bucket word (its high bits).
    #[inline]
    fn tag_of(&self, hash: u64) -> u64 {
        // The hash's top bits: the home takes its low ones. In u64, so that no tag (a
        // shift by 64) is a tag of 0.
        let handle_bits = self.handle_bits();
        (hash >> handle_bits >> 32) << handle_bits
    }

    /// Whether this array can hold `handle` beside its tag.
    fn fits(&self, handle: u32) -> bool {
        u64::from(handle) + u64::from(HANDLE_BIAS) <= self.handle_mask()
    }

    /// The bits of a bucket word below its tag.
    #[inline]
    fn handle_mask(&self) -> u64 {
        (1u64 << self.handle_bits()) - 1
    }

    /// The handle in a full bucket word.
    #[inline]
    fn handle_of(&self, full: u32) -> u32 {
        // Wrapping: a late reader of a reused array may decode a word by another split;
        // the handle it gets is checked (`Words::try_record`) and the answer thrown away.
        ((u64::from(full) & self.handle_mask()) as u32).wrapping_sub(HANDLE_BIAS)
    }

    /// The handle in a full bucket word `seen`, if its tag is `tag`.
    #[inline]
    fn handle_if(&self, seen: u32, tag: u64) -> Option<u32> {
        (u64::from(seen) & !self.handle_mask() == tag).then(|| self.handle_of(seen))
    }

    /// Puts `handle` and its object's `slot` in the first bucket free from `hash`'s home
    /// on; whether that bucket was empty (not a tombstone).
    fn place(&self, hash: u64, handle: u32, slot: u32) -> bool {
        debug_assert!(self.fits(handle));
        let word = (self.tag_of(hash) | u64::from(handle + HANDLE_BIAS)) & 0xffff_ffff
            | u64::from(slot) << 32;
        let mut at = home_of(hash, self.len);
        loop {
            let old = low(self.words[at].load(Ordering::Relaxed));
            if old == EMPTY || old == TOMBSTONE {
                // Release: a reader that sees the bucket sees the arena record (and
                // chunk) written before it.
                self.words[at].store(word, Ordering::Release);
                return old == EMPTY;
            }
            at = next(at, self.len);
        }
    }

    /// The handles and slots of this array's full buckets.
    fn handles(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.words
            .iter()
            .map(|word| word.load(Ordering::Relaxed))
            .filter(|&word| low(word) != EMPTY && low(word) != TOMBSTONE)
            .map(|word| (self.handle_of(low(word)), slot_in(word)))
    }

    fn bytes(&self) -> u64 {
        (self.words.len() * std::mem::size_of::<AtomicU64>()) as u64
    }

    /// Bytes of DRAM this array holds once replaced: its pages went back to the system
    /// from [`RELEASED_BYTES`] up.
    fn kept_bytes(&self) -> u64 {
        let bytes = self.bytes();
        #[cfg(all(not(megalon_loom), not(miri)))]
        if bytes >= RELEASED_BYTES as u64 {
            return 0;
        }
        bytes
    }
}

/// The words of one bucket array, all empty at first. Outside loom, an anonymous mapping
/// of their own: when growth replaces the array, [`release`](Self::release) gives its
/// pages back to the system (from [`RELEASED_BYTES`] up) and leaves its addresses
/// mapped, where they read as zeros (empty buckets) on Linux. A reader still probing a
/// replaced array then reads old buckets, empty ones or, once a later growth used the
/// array again, new ones: a view like any other torn one, which the replica's version
/// (moved by the growth) makes the reader throw away. No reader has to announce itself
/// (an epoch pin: a store and a fence per probe); a replaced array keeps its address
/// space and page tables, not its pages.
#[cfg(not(megalon_loom))]
struct BucketWords {
    /// Raw, not `MmapMut`: the words are reached through a pointer with write access,
    /// never through a `&[u8]` of the mapping (which would only grant reads).
    map: memmap2::MmapRaw,
    len: usize,
}

#[cfg(not(megalon_loom))]
impl BucketWords {
    fn new(len: usize) -> Self {
        let bytes = len * std::mem::size_of::<AtomicU64>();
        let map = memmap2::MmapOptions::new()
            .len(bytes)
            .map_anon()
            .map(memmap2::MmapRaw::from)
            .unwrap_or_else(|error| panic!("no memory for {len} index buckets: {error}"));
        Self { map, len }
    }

    /// Gives the pages back (on Linux the words then read as zeros; elsewhere they may
    /// keep their values). Only for an array replaced by growth, already in the table's
    /// list of replaced arrays (so nothing frees it however this ends).
    fn release(&self) {
        // SAFETY: no writer stores to a replaced array, and readers reach its words only
        // as atomics (`UnsafeCell`s: a shared reference to them does not promise that
        // they stay put), so the kernel replacing the pages with zero-filled ones changes
        // nothing a reader relies on. What readers may see then is outside Rust's memory
        // model (no store made the zeros); what makes it harmless is that the growth made
        // the replica's version odd before it got here (program order, and the kernel's
        // TLB shootdown orders the change after it), so every reader that sees a zero
        // throws its answer away. A refusal (locked pages, say) leaves the pages: the
        // array costs its memory until the table drops, nothing else changes. (Miri does
        // not model `madvise`.)
        #[cfg(not(miri))]
        if self.len * std::mem::size_of::<AtomicU64>() >= RELEASED_BYTES {
            let _ = unsafe {
                self.map
                    .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
            };
        }
    }
}

#[cfg(not(megalon_loom))]
impl std::ops::Deref for BucketWords {
    type Target = [AtomicU64];

    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, `len` words long, zero-filled when made (a
        // zero word is a valid `AtomicU64`), lives as long as `self`, and every access to
        // it goes through this slice of atomics, made from the mapping's pointer (which
        // allows writes), not from a borrow of its bytes.
        unsafe { std::slice::from_raw_parts(self.map.as_mut_ptr().cast::<AtomicU64>(), self.len) }
    }
}

/// loom models keep their arrays on the heap (a release gives nothing back). One model
/// grows a table twice to the same size, the second growth reusing the array the first
/// kept, under a reader without the lock; the table's tests and the stress cover larger
/// arrays, released pages and tags that shrink.
#[cfg(megalon_loom)]
struct BucketWords(Box<[AtomicU64]>);

#[cfg(megalon_loom)]
impl BucketWords {
    fn new(len: usize) -> Self {
        Self((0..len).map(|_| AtomicU64::new(u64::from(EMPTY))).collect())
    }

    fn release(&self) {}
}

#[cfg(megalon_loom)]
impl std::ops::Deref for BucketWords {
    type Target = [AtomicU64];

    fn deref(&self) -> &[AtomicU64] {
        &self.0
    }
}

/// The table: key hash to arena handle.
pub(super) struct Table {
    current: AtomicPtr<Buckets>,
    /// Entries in the current array (writer's count).
    live: AtomicUsize,
    /// Buckets that are not empty (entries and tombstones; writer's count).
    used: AtomicUsize,
    /// Arrays replaced by growth, their pages given back, kept until the table drops or
    /// growth reuses them (a reader may still hold one): at most two of each size, since
    /// growth makes an array of a size only when none is kept.
    replaced: crate::sync::Mutex<Vec<Kept>>,
}

/// A bucket array replaced by growth, held by its address: a late reader may hold a
/// shared reference to it, which a `Box` (a claim to be the only reference) would
/// contradict. Freed by the table's drop, or made current again by a growth.
struct Kept(std::ptr::NonNull<Buckets>);

// SAFETY: a `Buckets` is atomics and a mapping, shared between threads as the current
// array already is; the list only moves the address.
unsafe impl Send for Kept {}

impl Kept {
    fn new(buckets: Box<Buckets>) -> Self {
        Self(std::ptr::NonNull::from(Box::leak(buckets)))
    }

    fn buckets(&self) -> &Buckets {
        // SAFETY: the array lives until the table drops (see `Kept`); only shared
        // references to it are made.
        unsafe { self.0.as_ref() }
    }

    /// Frees the array.
    ///
    /// # Safety
    /// No reference to it is left: the table is dropping.
    unsafe fn free(self) {
        // SAFETY: the address came from `Box::leak` (`new`), and nothing refers to the
        // array any more (the caller's promise).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl Default for Table {
    fn default() -> Self {
        Self {
            current: AtomicPtr::new(
                Kept::new(Buckets::new(MIN_BUCKETS, MAX_TAG_BITS))
                    .0
                    .as_ptr(),
            ),
            live: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            replaced: crate::sync::Mutex::new(Vec::new()),
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let current =
            Kept(std::ptr::NonNull::new(self.current.load(Ordering::Acquire)).expect("an array"));
        // SAFETY: the current array and every kept one are owned by the table alone, and
        // no reader is left (dropping needs the table exclusively).
        for kept in std::iter::once(current).chain(self.replaced.lock().drain(..)) {
            unsafe { kept.free() };
        }
    }
}

impl Table {
    /// The current array, or one that growth replaced since this load (see
    /// [`BucketWords`]): probes read either safely, and only a probe the replica's
    /// version vouches for, or one under the replica's lock, is answered.
    #[inline]
    fn buckets(&self) -> &Buckets {
        // SAFETY: the pointer is always a live array: the current one, or a replaced one,
        // which the table keeps until it drops. Acquire: the array's buckets as they were
        // built.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The handle of the entry with `hash` for which `matches` says yes. Safe to call
    /// while replay changes the table: the answer is then only as good as the caller's
    /// validation (the bound on probes keeps even a torn view finite).
    #[inline]
    pub(super) fn find(&self, hash: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        Self::probe(self.buckets(), hash, matches).map(|(_, handle, _)| handle)
    }

    /// [`find`](Self::find), with the slot the entry's bucket holds.
    #[inline]
    pub(super) fn find_placed(
        &self,
        hash: u64,
        matches: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u32)> {
        Self::probe(self.buckets(), hash, matches).map(|(_, handle, slot)| (handle, slot))
    }

    /// Starts loading the home bucket of each of `hashes`, without waiting for it: a
    /// hint for a lookup to come, which changes nothing and reads no bucket.
    pub(super) fn prefetch_homes(&self, hashes: &[u64]) {
        let buckets = self.buckets();
        for &hash in hashes {
            let bucket = &buckets.words[home_of(hash, buckets.len)];
            crate::arch::prefetch(
                std::ptr::from_ref(bucket).cast(),
                std::mem::size_of::<AtomicU64>(),
            );
        }
    }

    /// Calls `each(i, handle)` for each of `hashes` whose home bucket is full with a
    /// matching tag (the entry a lookup most likely finds): a guess read without checks,
    /// for prefetching only.
    pub(super) fn home_handles(&self, hashes: &[u64], mut each: impl FnMut(usize, u32)) {
        let buckets = self.buckets();
        for (i, &hash) in hashes.iter().enumerate() {
            let seen = low(buckets.words[home_of(hash, buckets.len)].load(Ordering::Relaxed));
            if seen != EMPTY && seen != TOMBSTONE {
                if let Some(handle) = buckets.handle_if(seen, buckets.tag_of(hash)) {
                    each(i, handle);
                }
            }
        }
    }

    /// The bucket and handle of the entry with `hash` that `matches`: the probe of
    /// [`find`](Self::find) and [`remove`](Self::remove).
    #[inline]
    fn probe(
        buckets: &Buckets,
        hash: u64,
        mut matches: impl FnMut(u32) -> bool,
    ) -> Option<(usize, u32, u32)> {
        let tag = buckets.tag_of(hash);
        let mut at = home_of(hash, buckets.len);
        for _ in 0..buckets.len {
            // Acquire: pairs with `place`'s Release (the arena record).
            let word = buckets.words[at].load(Ordering::Acquire);
            let seen = low(word);
            if seen == EMPTY {
                return None;
            }
            if seen != TOMBSTONE {
                if let Some(handle) = buckets.handle_if(seen, tag) {
                    if matches(handle) {
                        return Some((at, handle, slot_in(word)));
                    }
                }
            }
            at = next(at, buckets.len);
        }
        None
    }

    /// Adds an entry for a key that has none; `rehash` gives the hash of the key behind
    /// a handle (growth places entries anew). Replay only (the replica's write lock).
    pub(super) fn insert(&self, hash: u64, handle: u32, slot: u32, rehash: impl Fn(u32) -> u64) {
        let used = self.used.load(Ordering::Relaxed);
        let live = self.live.load(Ordering::Relaxed);
        let buckets = self.buckets();
        if (used + 1) * 8 > buckets.len * 7 || !buckets.fits(handle) {
            let tag_bits = buckets.tag_bits().min(tag_bits_for(handle));
            self.grow(live + 1, tag_bits, &rehash);
        }
        if self.buckets().place(hash, handle, slot) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the entry with `hash` that `matches`; its handle. Replay only.
    pub(super) fn remove(&self, hash: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        let buckets = self.buckets();
        let (at, handle, _) = Self::probe(buckets, hash, matches)?;
        buckets.words[at].store(u64::from(TOMBSTONE), Ordering::Release);
        self.live.fetch_sub(1, Ordering::Relaxed);
        Some(handle)
    }

    /// A new array, without tombstones, of the fewest buckets that hold `entries` below
    /// 7/8 load ([`size_for`]: 4/3 or 3/2 of the old one when it filled, its load then
    /// between 0.58 and 0.69; the same or fewer when tombstones filled it), with
    /// `tag_bits` of tag.
    fn grow(&self, entries: usize, tag_bits: u32, rehash: &impl Fn(u32) -> u64) {
        let count = size_for(entries);
        let fresh = self
            .reuse(count, tag_bits)
            .unwrap_or_else(|| Kept::new(Buckets::new(count, tag_bits)));
        let mut used = 0;
        for (handle, slot) in self.buckets().handles() {
            fresh.buckets().place(rehash(handle), handle, slot);
            used += 1;
        }
        self.used.store(used, Ordering::Relaxed);
        // Release: a reader that loads the new array sees its buckets.
        let old = self.current.swap(fresh.0.as_ptr(), Ordering::AcqRel);
        // `old` is no longer the current array; from here the list keeps it (before its
        // pages go: nothing frees it on the way).
        let mut replaced = self.replaced.lock();
        replaced.push(Kept(std::ptr::NonNull::new(old).expect("an array")));
        replaced
            .last()
            .expect("just pushed")
            .buckets()
            .words
            .release();
    }

    /// A replaced array of `count` buckets, emptied and set to `tag_bits`, if the table
    /// keeps one: growth that rebuilds an array of the same size (tombstones filled it)
    /// takes the one it replaced last time, so no size is made anew while one is kept. A
    /// late reader may still probe it; what it reads is atomic and checked (see
    /// [`BucketWords`]).
    fn reuse(&self, count: usize, tag_bits: u32) -> Option<Kept> {
        let mut replaced = self.replaced.lock();
        let at = replaced
            .iter()
            .position(|kept| kept.buckets().len == count)?;
        let reused = replaced.swap_remove(at);
        drop(replaced);
        let buckets = reused.buckets();
        for word in buckets.words.iter() {
            word.store(u64::from(EMPTY), Ordering::Relaxed);
        }
        buckets
            .handle_bits
            .store(u32::BITS - tag_bits, Ordering::Relaxed);
        Some(reused)
    }

    /// Every handle in the table (replay, or under the read lock).
    pub(super) fn handles(&self) -> Vec<u32> {
        self.buckets().handles().map(|(handle, _)| handle).collect()
    }

    /// Entries in the table.
    pub(super) fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes of DRAM the bucket arrays hold: the current one (a word per bucket) and
    /// the replaced ones kept whose pages did not go back.
    pub(super) fn heap_bytes(&self) -> u64 {
        let replaced = self.replaced.lock();
        let kept: u64 = replaced
            .iter()
            .map(|kept| kept.buckets().kept_bytes())
            .sum();
        self.buckets().bytes() + kept
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Hashes with chosen homes: collisions on purpose (the tag's bits vary). The low
    /// half spread, as the home scales it to the array.
    fn hash(home: u32) -> u64 {
        u64::from(home.wrapping_mul(0x2545_f491)) | u64::from(home.wrapping_mul(0x9e37_79b9)) << 32
    }

    /// The slot a test's entry holds: anything but its handle, so that a mix-up shows.
    fn slot_of(handle: u32) -> u32 {
        handle ^ 0x5a5a_5a5a
    }

    /// The rehash of a test's table: handles are keys, homes groups of eight.
    fn rehash(handle: u32) -> u64 {
        hash(handle / 8)
    }

    #[test]
    fn finds_what_it_holds_through_collisions_removals_and_growth() {
        let table = Table::default();
        let mut model: HashMap<u32, u32> = HashMap::new();
        // Handles are keys here; tags collide in groups of eight (same home bucket).
        for handle in 0..2000u32 {
            table.insert(hash(handle / 8), handle, slot_of(handle), rehash);
            model.insert(handle, handle / 8);
            if handle % 3 == 0 {
                let gone = handle / 2;
                if let Some(tag) = model.remove(&gone) {
                    assert_eq!(table.remove(hash(tag), |h| h == gone), Some(gone));
                }
            }
        }
        assert_eq!(table.len(), model.len());
        for (&handle, &tag) in &model {
            assert_eq!(
                table.find_placed(hash(tag), |h| h == handle),
                Some((handle, slot_of(handle))),
                "the slot moved with its entry through growth"
            );
        }
        for handle in 2000..2100u32 {
            assert_eq!(table.find(hash(handle / 8), |h| h == handle), None);
        }
        let mut all: Vec<u32> = table.handles();
        all.sort_unstable();
        let mut expected: Vec<u32> = model.keys().copied().collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
        assert!(table.heap_bytes() >= 2000 * 8, "it grew");
    }

    #[test]
    fn arrays_grow_by_a_half_or_a_third_and_fill_to_seven_eighths() {
        // Sizes are 2^k or 1.5 x 2^k; a growth from a full array leaves it between 0.58
        // and 0.69 full, never the 7/16 of doubling (the bytes an object at its worst).
        assert_eq!(size_for(0), MIN_BUCKETS);
        let mut len = MIN_BUCKETS;
        while len < 1 << 24 {
            let full = len * 7 / 8;
            let grown = size_for(full + 1);
            let power = grown.next_power_of_two();
            assert!(grown == power || grown == power / 4 * 3, "{grown}");
            assert!(
                grown > len && (full + 1) * 8 <= grown * 7,
                "{len} -> {grown}"
            );
            let load = (full + 1) as f64 / grown as f64;
            assert!((0.58..0.70).contains(&load), "{len} -> {grown}: {load}");
            len = grown;
        }
    }

    #[test]
    fn tombstones_do_not_fill_the_table() {
        // Insert and remove forever at a small size: growth (or a rebuild at the same
        // size) clears tombstones, so lookups of absent keys still end.
        let table = Table::default();
        for handle in 0..10_000u32 {
            table.insert(hash(handle), handle, slot_of(handle), hash);
            assert_eq!(table.remove(hash(handle), |h| h == handle), Some(handle));
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.find(hash(7), |_| true), None);
        assert_eq!(
            table.buckets().bytes(),
            MIN_BUCKETS as u64 * 8,
            "no growth from churn alone"
        );
        assert_eq!(
            table.replaced.lock().len(),
            1,
            "each rebuild at one size takes the array the last one replaced"
        );
    }

    /// The sizes of the arrays the table keeps, sorted.
    fn kept_sizes(table: &Table) -> Vec<usize> {
        let mut sizes: Vec<usize> = table
            .replaced
            .lock()
            .iter()
            .map(|kept| kept.buckets().len)
            .collect();
        sizes.sort_unstable();
        sizes
    }

    #[test]
    fn growth_and_shrinking_keep_at_most_two_arrays_of_a_size() {
        // Rounds that grow the table and rounds that empty it (a rebuild then shrinks it):
        // the kept arrays stay bounded, never three of one size.
        let table = Table::default();
        let mut next = 0u32;
        for round in 0..40 {
            let live: Vec<u32> = (0..if round % 2 == 0 { 5000 } else { 40 })
                .map(|_| {
                    next += 1;
                    table.insert(hash(next), next, slot_of(next), hash);
                    next
                })
                .collect();
            for handle in live {
                assert_eq!(table.remove(hash(handle), |h| h == handle), Some(handle));
            }
            let sizes = kept_sizes(&table);
            assert!(
                sizes.windows(3).all(|w| !(w[0] == w[1] && w[1] == w[2])),
                "round {round}: {sizes:?}"
            );
        }
    }

    #[test]
    fn heap_bytes_count_the_kept_arrays_whose_pages_stay() {
        let bytes = |sizes: Vec<usize>| sizes.iter().map(|&n| n as u64 * 8).sum::<u64>();
        let table = Table::default();
        for handle in 0..1000 {
            table.insert(hash(handle), handle, slot_of(handle), hash);
        }
        let kept = bytes(kept_sizes(&table));
        assert!(kept > 0, "it grew");
        assert_eq!(table.heap_bytes(), table.buckets().bytes() + kept);
        // Replaced at a size whose pages go back: not counted.
        let (table, count) = table_at_released_size();
        let small = bytes(kept_sizes(&table));
        grow_once(&table, count);
        assert!(bytes(kept_sizes(&table)) > small, "the large array is kept");
        assert_eq!(table.heap_bytes(), table.buckets().bytes() + small);
    }

    /// A table grown to an array whose pages a replacement gives back; the handles it
    /// holds are `0..` the returned count.
    fn table_at_released_size() -> (Table, u32) {
        let table = Table::default();
        let mut count = 0u32;
        while table.buckets().bytes() < RELEASED_BYTES as u64 {
            table.insert(hash(count), count, slot_of(count), hash);
            count += 1;
        }
        (table, count)
    }

    /// Inserts after `count` until the table replaces its current array.
    fn grow_once(table: &Table, count: u32) -> u32 {
        let before = std::ptr::from_ref(table.buckets());
        let mut next = count;
        while std::ptr::eq(before, table.buckets()) {
            table.insert(hash(next), next, slot_of(next), hash);
            next += 1;
        }
        next
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_replaced_array_whose_pages_cannot_go_stays_readable() {
        // Locked pages (as `mlockall(MCL_FUTURE)` locks every new mapping) refuse
        // MADV_DONTNEED: growth goes on, the array stays kept and readable.
        let (table, held) = table_at_released_size();
        let late = table.buckets();
        let page = late.words.as_ptr().cast::<libc::c_void>();
        // SAFETY: the array's first page is mapped (it lives until the table drops);
        // locking it changes no byte.
        assert_eq!(unsafe { libc::mlock(page, 4096) }, 0, "mlock of one page");
        let all = grow_once(&table, held);
        assert!(
            (0..held).all(|handle| Table::probe(late, hash(handle), |h| h == handle).is_some()),
            "the kept array still holds what it held"
        );
        for handle in 0..all {
            assert_eq!(table.find(hash(handle), |h| h == handle), Some(handle));
        }
    }

    #[test]
    fn a_late_reader_of_a_replaced_array_reads_it_safely() {
        // A reader that loaded the array before growth replaced it probes it afterwards:
        // every probe ends, with an answer its caller's check would throw away, never a
        // fault. The release gave the pages back: the array reads as empty. A small
        // array, kept with its pages, still holds what it held.
        let small = Table::default();
        for handle in 0..12u32 {
            small.insert(hash(handle), handle, slot_of(handle), hash);
        }
        let late_small = small.buckets();
        let all_small = grow_once(&small, 12);
        assert!((0..12u32)
            .all(|handle| Table::probe(late_small, hash(handle), |h| h == handle).is_some()));

        let (table, held) = table_at_released_size();
        let late = table.buckets();
        assert!((0..held).all(|handle| Table::probe(late, hash(handle), |h| h == handle).is_some()));
        let all = grow_once(&table, held);
        for handle in 0..all {
            let _ = Table::probe(late, hash(handle), |h| h == handle);
        }
        #[cfg(all(target_os = "linux", not(miri)))]
        assert!(
            (0..held).all(|handle| Table::probe(late, hash(handle), |_| true).is_none()),
            "a released array reads as empty buckets"
        );
        for (table, all) in [(&small, all_small), (&table, all)] {
            for handle in 0..all {
                assert_eq!(table.find(hash(handle), |h| h == handle), Some(handle));
            }
        }
    }

    #[test]
    fn a_late_reader_of_an_array_that_growth_took_back_reads_the_new_buckets() {
        // One object stays while others come and go: tombstones make growth rebuild the
        // array at its size, taking the kept one back. A reader that loaded the array
        // before two rebuilds probes it after the second took it back, emptied and
        // refilled: it reads the new buckets (the staying object still found, a removed
        // one gone), never a fault.
        let table = Table::default();
        table.insert(hash(1000), 1000, slot_of(1000), hash);
        let mut next = 0u32;
        let mut churn = |table: &Table| {
            table.insert(hash(next), next, slot_of(next), hash);
            assert_eq!(table.remove(hash(next), |h| h == next), Some(next));
            next += 1;
        };
        while table.replaced.lock().is_empty() {
            churn(&table);
        }
        let late = table.buckets();
        let mut rebuilds = 0;
        while rebuilds < 2 {
            let before = std::ptr::from_ref(table.buckets());
            churn(&table);
            if !std::ptr::eq(before, table.buckets()) {
                rebuilds += 1;
            }
        }
        assert!(
            std::ptr::eq(late, table.buckets()),
            "the second rebuild took it back"
        );
        assert_eq!(
            Table::probe(late, hash(1000), |h| h == 1000).map(|(_, handle, _)| handle),
            Some(1000)
        );
        assert!((0..next).all(|handle| Table::probe(late, hash(handle), |h| h == handle).is_none()));
        assert_eq!(kept_sizes(&table), [MIN_BUCKETS]);
    }

    #[test]
    fn handles_past_24_bits_shorten_the_tag_and_stay_found() {
        // Handles that leave 8, 7, 4 and no bits of tag: each rebuilds the array with a
        // shorter tag, and every entry (old and new) is still found, also among
        // colliding hashes (homes in groups of eight).
        let handles = [
            5,
            (1 << 24) - 3,
            1 << 24,
            (1 << 27) + 9,
            u32::MAX - 2 - (1 << 15),
            u32::MAX - 2,
        ];
        let expected_tag_bits = [8, 8, 7, 4, 0, 0];
        let table = Table::default();
        for (i, (&handle, &tag_bits)) in handles.iter().zip(&expected_tag_bits).enumerate() {
            let rehash = |h: u32| hash(handles.iter().position(|&x| x == h).unwrap() as u32 / 8);
            table.insert(hash(i as u32 / 8), handle, slot_of(handle), rehash);
            assert_eq!(table.buckets().tag_bits(), tag_bits, "after {handle}");
            for (j, &earlier) in handles[..=i].iter().enumerate() {
                assert_eq!(
                    table.find_placed(hash(j as u32 / 8), |h| h == earlier),
                    Some((earlier, slot_of(earlier)))
                );
            }
        }
        let mut all = table.handles();
        all.sort_unstable();
        assert_eq!(all, handles);
        assert_eq!(
            table.remove(hash(0), |h| h == u32::MAX - 2),
            Some(u32::MAX - 2)
        );
        assert_eq!(table.find(hash(0), |h| h == u32::MAX - 2), None);
        assert_eq!(table.find(hash(0), |h| h == 5), Some(5));
    }
}
