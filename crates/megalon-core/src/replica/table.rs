//! The index's hash table: open addressing with linear probing over atomic buckets, so
//! that a reader may probe it while replay changes it (the replica's seqlock, in
//! `mod.rs`, says afterwards whether what it read holds).
//!
//! A bucket is one 32-bit word: empty, a tombstone (a removed entry: probes go on past
//! it), or full: a tag of the key's hash in its high bits and the arena handle (+ 2,
//! so that no full bucket reads as empty or tombstone) in the rest. One load says both
//! whether the bucket may hold the key and where its arena record is, so a lookup waits
//! on two dependent loads before the object (the bucket, the record) where a control
//! byte and a handle in two arrays made it three. A probe compares a key in the arena
//! only when the tag matches.
//!
//! The tag has as many bits as the handles leave: 8 while the arena's handles fit in 24
//! bits (128 MiB of records), one fewer for every doubling past that, down to none at the
//! arena's 32-bit limit. A handle that needs more bits than the current array leaves
//! rebuilds the array with a shorter tag, as growth does (each array keeps its own split,
//! so a reader decodes a bucket by the array it loaded it from). A shorter tag costs only
//! more key comparisons on collisions; at 4 bytes a bucket and a load between 7/16 and
//! 7/8 the table costs 4.6 to 9.1 bytes an object.
//!
//! Only replay changes the table, under the replica's write lock; the methods that change
//! it take `&self` because readers share the structure. Growth builds a new array and
//! publishes it; the old one may still be under a reader's probe, so it is freed only
//! once every reader that may hold it has let go (see `reclaim`).

use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

const EMPTY: u32 = 0;
const TOMBSTONE: u32 = 1;
/// What a full bucket adds to its handle, so that it is neither [`EMPTY`] nor
/// [`TOMBSTONE`].
const HANDLE_BIAS: u32 = 2;
/// Most bits of tag a bucket has.
const MAX_TAG_BITS: u32 = 8;
/// Fewest buckets an array has.
const MIN_BUCKETS: usize = 16;

/// The home bucket of `hash` in an array of `mask + 1`.
#[inline]
fn home_of(hash: u64, mask: usize) -> usize {
    hash as usize & mask
}

/// Bits of tag left beside `handle` (its bucket holds `handle + HANDLE_BIAS`).
fn tag_bits_for(handle: u32) -> u32 {
    let needed = u64::BITS - (u64::from(handle) + u64::from(HANDLE_BIAS)).leading_zeros();
    (u32::BITS - needed.min(u32::BITS)).min(MAX_TAG_BITS)
}

struct Buckets {
    mask: usize,
    /// Bits of the bucket word below the tag (32 when there is no tag).
    handle_bits: u32,
    words: Box<[AtomicU32]>,
}

impl Buckets {
    fn new(count: usize, tag_bits: u32) -> Box<Self> {
        debug_assert!(count.is_power_of_two());
        Box::new(Self {
            mask: count - 1,
            handle_bits: u32::BITS - tag_bits,
            words: (0..count).map(|_| AtomicU32::new(EMPTY)).collect(),
        })
    }

    /// Bits of tag this array's buckets carry.
    fn tag_bits(&self) -> u32 {
        u32::BITS - self.handle_bits
    }

    /// The tag of `hash` in this array, in place in the bucket word (its high bits).
    #[inline]
    fn tag_of(&self, hash: u64) -> u64 {
        // The hash's top bits: the home takes its low ones. In u64, so that no tag (a
        // shift by 64) is a tag of 0.
        (hash >> self.handle_bits >> 32) << self.handle_bits
    }

    /// Whether this array can hold `handle` beside its tag.
    fn fits(&self, handle: u32) -> bool {
        u64::from(handle) + u64::from(HANDLE_BIAS) <= self.handle_mask()
    }

    /// The bits of a bucket word below its tag.
    #[inline]
    fn handle_mask(&self) -> u64 {
        (1u64 << self.handle_bits) - 1
    }

    /// The handle in a full bucket word.
    #[inline]
    fn handle_of(&self, full: u32) -> u32 {
        (u64::from(full) & self.handle_mask()) as u32 - HANDLE_BIAS
    }

    /// The handle in a full bucket word `seen`, if its tag is `tag`.
    #[inline]
    fn handle_if(&self, seen: u32, tag: u64) -> Option<u32> {
        (u64::from(seen) & !self.handle_mask() == tag).then(|| self.handle_of(seen))
    }

    /// Puts `handle` in the first bucket free from `hash`'s home on; whether that bucket
    /// was empty (not a tombstone).
    fn place(&self, hash: u64, handle: u32) -> bool {
        debug_assert!(self.fits(handle));
        let word = (self.tag_of(hash) | u64::from(handle + HANDLE_BIAS)) as u32;
        let mut at = home_of(hash, self.mask);
        loop {
            let old = self.words[at].load(Ordering::Relaxed);
            if old == EMPTY || old == TOMBSTONE {
                // Release: a reader that sees the bucket sees the arena record (and
                // chunk) written before it.
                self.words[at].store(word, Ordering::Release);
                return old == EMPTY;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// The handles of this array's full buckets.
    fn handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.words
            .iter()
            .map(|word| word.load(Ordering::Relaxed))
            .filter(|&word| word != EMPTY && word != TOMBSTONE)
            .map(|word| self.handle_of(word))
    }

    fn bytes(&self) -> u64 {
        (self.words.len() * std::mem::size_of::<AtomicU32>()) as u64
    }
}

/// How an array replaced by growth is freed: once no reader can still be probing it.
/// Readers pin an epoch (crossbeam's) for each probe, and growth defers the free past
/// every epoch pinned then. loom models keep the arrays until the table drops instead
/// (loom does not model crossbeam's epochs; the models grow a table once or twice).
#[cfg(not(megalon_loom))]
mod reclaim {
    pub(super) type Pin = crossbeam::epoch::Guard;

    pub(super) fn pin() -> Pin {
        crossbeam::epoch::pin()
    }

    /// An array's pointer, sent to whichever thread runs the deferred free.
    struct Retired(*mut super::Buckets);
    // SAFETY: the array is made of atomics, and once retired only the deferred free
    // touches the pointer.
    unsafe impl Send for Retired {}

    pub(super) struct Retire;

    impl Retire {
        pub(super) fn new() -> Self {
            Retire
        }

        /// Frees `old` once every reader pinned now has let go.
        pub(super) fn retire(&self, old: *mut super::Buckets) {
            let old = Retired(old);
            let pin = pin();
            // SAFETY: `old` came from `Box::into_raw`, is no longer the current array (new
            // readers cannot load it), and is freed once, after every reader that may have
            // loaded it unpins.
            unsafe {
                pin.defer_unchecked(move || {
                    let old = old;
                    drop(Box::from_raw(old.0));
                });
            }
            pin.flush();
        }
    }
}

#[cfg(megalon_loom)]
mod reclaim {
    pub(super) struct Pin;

    pub(super) fn pin() -> Pin {
        Pin
    }

    /// Arrays replaced by growth, kept until the table drops. Boxed: a reader holds the
    /// address of the array's header, which must not move.
    #[allow(clippy::vec_box)]
    pub(super) struct Retire(crate::sync::Mutex<Vec<Box<super::Buckets>>>);

    impl Retire {
        pub(super) fn new() -> Self {
            Self(crate::sync::Mutex::new(Vec::new()))
        }

        pub(super) fn retire(&self, old: *mut super::Buckets) {
            // SAFETY: `old` came from `Box::into_raw`; from here the list owns it.
            self.0.lock().push(unsafe { Box::from_raw(old) });
        }
    }
}

/// The table: key hash to arena handle.
pub(super) struct Table {
    current: AtomicPtr<Buckets>,
    /// Entries in the current array (writer's count).
    live: AtomicUsize,
    /// Buckets that are not empty (entries and tombstones; writer's count).
    used: AtomicUsize,
    retire: reclaim::Retire,
}

impl Default for Table {
    fn default() -> Self {
        Self {
            current: AtomicPtr::new(Box::into_raw(Buckets::new(MIN_BUCKETS, MAX_TAG_BITS))),
            live: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            retire: reclaim::Retire::new(),
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let current = self.current.load(Ordering::Acquire);
        // SAFETY: `current` came from `Box::into_raw` and is owned by the table alone;
        // no reader is left (dropping needs the table exclusively).
        drop(unsafe { Box::from_raw(current) });
    }
}

impl Table {
    /// The current array, for a reader that holds `_pin` (which keeps a replaced array
    /// alive until it lets go), or for replay and readers under the replica's lock (no
    /// growth can replace the array meanwhile).
    #[inline]
    fn buckets<'a>(&'a self, _pin: &'a reclaim::Pin) -> &'a Buckets {
        // SAFETY: the pointer is always a live array: the current one, or one that
        // growth replaced after this load, which is freed only once the pin lets go.
        // Acquire: the array's buckets as they were built.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The handle of the entry with `hash` for which `matches` says yes. Safe to call
    /// while replay changes the table: the answer is then only as good as the caller's
    /// validation (the bound on probes keeps even a torn view finite).
    #[inline]
    pub(super) fn find(&self, hash: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        let pin = reclaim::pin();
        Self::probe(self.buckets(&pin), hash, matches).map(|(_, handle)| handle)
    }

    /// Starts loading the home bucket of each of `hashes`, without waiting for it: a
    /// hint for a lookup to come, which changes nothing and reads no bucket.
    pub(super) fn prefetch_homes(&self, hashes: &[u64]) {
        let pin = reclaim::pin();
        let buckets = self.buckets(&pin);
        for &hash in hashes {
            let bucket = &buckets.words[home_of(hash, buckets.mask)];
            crate::arch::prefetch(std::ptr::from_ref(bucket).cast(), 4);
        }
    }

    /// Calls `each(i, handle)` for each of `hashes` whose home bucket is full with a
    /// matching tag (the entry a lookup most likely finds): a guess read without checks,
    /// for prefetching only.
    pub(super) fn home_handles(&self, hashes: &[u64], mut each: impl FnMut(usize, u32)) {
        let pin = reclaim::pin();
        let buckets = self.buckets(&pin);
        for (i, &hash) in hashes.iter().enumerate() {
            let seen = buckets.words[home_of(hash, buckets.mask)].load(Ordering::Relaxed);
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
    ) -> Option<(usize, u32)> {
        let tag = buckets.tag_of(hash);
        let mut at = home_of(hash, buckets.mask);
        for _ in 0..=buckets.mask {
            // Acquire: pairs with `place`'s Release (the arena record).
            let seen = buckets.words[at].load(Ordering::Acquire);
            if seen == EMPTY {
                return None;
            }
            if seen != TOMBSTONE {
                if let Some(handle) = buckets.handle_if(seen, tag) {
                    if matches(handle) {
                        return Some((at, handle));
                    }
                }
            }
            at = (at + 1) & buckets.mask;
        }
        None
    }

    /// Adds an entry for a key that has none; `rehash` gives the hash of the key behind
    /// a handle (growth places entries anew). Replay only (the replica's write lock).
    pub(super) fn insert(&self, hash: u64, handle: u32, rehash: impl Fn(u32) -> u64) {
        let pin = reclaim::pin();
        let used = self.used.load(Ordering::Relaxed);
        let live = self.live.load(Ordering::Relaxed);
        let buckets = self.buckets(&pin);
        if (used + 1) * 8 > (buckets.mask + 1) * 7 || !buckets.fits(handle) {
            let tag_bits = buckets.tag_bits().min(tag_bits_for(handle));
            self.grow(live + 1, tag_bits, &rehash, &pin);
        }
        if self.buckets(&pin).place(hash, handle) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the entry with `hash` that `matches`; its handle. Replay only.
    pub(super) fn remove(&self, hash: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        let pin = reclaim::pin();
        let buckets = self.buckets(&pin);
        let (at, handle) = Self::probe(buckets, hash, matches)?;
        buckets.words[at].store(TOMBSTONE, Ordering::Release);
        self.live.fetch_sub(1, Ordering::Relaxed);
        Some(handle)
    }

    /// A new array, without tombstones, of the fewest buckets that hold `entries` below
    /// 7/8 load (twice the old one when it filled, its load then about 7/16; the same or
    /// fewer when tombstones filled it), with `tag_bits` of tag.
    fn grow(
        &self,
        entries: usize,
        tag_bits: u32,
        rehash: &impl Fn(u32) -> u64,
        pin: &reclaim::Pin,
    ) {
        let count = (entries * 8 / 7 + 1).next_power_of_two().max(MIN_BUCKETS);
        let fresh = Buckets::new(count, tag_bits);
        let mut used = 0;
        for handle in self.buckets(pin).handles() {
            fresh.place(rehash(handle), handle);
            used += 1;
        }
        self.used.store(used, Ordering::Relaxed);
        // Release: a reader that loads the new array sees its buckets.
        let old = self.current.swap(Box::into_raw(fresh), Ordering::AcqRel);
        self.retire.retire(old);
    }

    /// Every handle in the table (replay, or under the read lock).
    pub(super) fn handles(&self) -> Vec<u32> {
        let pin = reclaim::pin();
        self.buckets(&pin).handles().collect()
    }

    /// Entries in the table.
    pub(super) fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes of DRAM the current bucket array holds (a word per bucket).
    pub(super) fn heap_bytes(&self) -> u64 {
        let pin = reclaim::pin();
        self.buckets(&pin).bytes()
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Hashes with chosen homes: collisions on purpose (the tag's bits vary).
    fn hash(home: u32) -> u64 {
        u64::from(home) | u64::from(home.wrapping_mul(0x9e37_79b9)) << 32
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
            table.insert(hash(handle / 8), handle, rehash);
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
            assert_eq!(table.find(hash(tag), |h| h == handle), Some(handle));
        }
        for handle in 2000..2100u32 {
            assert_eq!(table.find(hash(handle / 8), |h| h == handle), None);
        }
        let mut all: Vec<u32> = table.handles();
        all.sort_unstable();
        let mut expected: Vec<u32> = model.keys().copied().collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
        assert!(table.heap_bytes() >= 2000 * 4, "it grew");
    }

    #[test]
    fn tombstones_do_not_fill_the_table() {
        // Insert and remove forever at a small size: growth (or a rebuild at the same
        // size) clears tombstones, so lookups of absent keys still end.
        let table = Table::default();
        for handle in 0..10_000u32 {
            table.insert(hash(handle), handle, hash);
            assert_eq!(table.remove(hash(handle), |h| h == handle), Some(handle));
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.find(hash(7), |_| true), None);
        assert_eq!(
            table.heap_bytes(),
            MIN_BUCKETS as u64 * 4,
            "no growth from churn alone"
        );
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
            table.insert(hash(i as u32 / 8), handle, rehash);
            let pin = reclaim::pin();
            assert_eq!(table.buckets(&pin).tag_bits(), tag_bits, "after {handle}");
            for (j, &earlier) in handles[..=i].iter().enumerate() {
                assert_eq!(
                    table.find(hash(j as u32 / 8), |h| h == earlier),
                    Some(earlier)
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
