//! The index's hash table: open addressing with linear probing over atomic buckets, so
//! that a reader may probe it while replay changes it (the replica's seqlock, in
//! `mod.rs`, says afterwards whether what it read holds).
//!
//! A bucket is a control byte and a 4-byte arena handle, in two arrays (as in hashbrown,
//! whose table this one replaces: 5 bytes a bucket, at a load between 7/16 and 7/8). The
//! control byte is empty, a tombstone (a removed entry: probes go on past it), or full
//! with seven bits of the key's hash, so a probe compares a key in the arena only when
//! those match.
//!
//! Only replay changes the table, under the replica's write lock; the methods that change
//! it take `&self` because readers share the structure. Growth builds a new array and
//! publishes it; the old one may still be under a reader's probe, so it is freed only
//! once every reader that may hold it has let go (see `reclaim`).

use crate::sync::{AtomicPtr, AtomicU32, AtomicU8, AtomicUsize, Ordering};

const EMPTY: u8 = 0;
const TOMBSTONE: u8 = 1;
/// A full bucket's control byte: this bit and seven bits of the key's hash.
const FULL: u8 = 0x80;
/// Fewest buckets an array has.
const MIN_BUCKETS: usize = 16;

/// The control byte of an entry whose key hashes to `hash`.
#[inline]
fn control_of(hash: u64) -> u8 {
    FULL | (hash >> 57) as u8
}

/// The home bucket of `hash` in an array of `mask + 1`.
#[inline]
fn home_of(hash: u64, mask: usize) -> usize {
    hash as usize & mask
}

struct Buckets {
    mask: usize,
    control: Box<[AtomicU8]>,
    handles: Box<[AtomicU32]>,
}

impl Buckets {
    fn new(count: usize) -> Box<Self> {
        debug_assert!(count.is_power_of_two());
        Box::new(Self {
            mask: count - 1,
            control: (0..count).map(|_| AtomicU8::new(EMPTY)).collect(),
            handles: (0..count).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Puts `handle` in the first bucket free from `hash`'s home on; whether that bucket
    /// was empty (not a tombstone).
    fn place(&self, hash: u64, handle: u32) -> bool {
        let mut at = home_of(hash, self.mask);
        loop {
            let old = self.control[at].load(Ordering::Relaxed);
            if old & FULL == 0 {
                self.handles[at].store(handle, Ordering::Relaxed);
                // Release: a reader that sees the control byte sees the handle, and the
                // arena record (and chunk) written before it.
                self.control[at].store(control_of(hash), Ordering::Release);
                return old == EMPTY;
            }
            at = (at + 1) & self.mask;
        }
    }

    fn bytes(&self) -> u64 {
        (self.control.len() * 5) as u64
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
            current: AtomicPtr::new(Box::into_raw(Buckets::new(MIN_BUCKETS))),
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

    /// The bucket and handle of the entry with `hash` that `matches`: the probe of
    /// [`find`](Self::find) and [`remove`](Self::remove).
    #[inline]
    fn probe(
        buckets: &Buckets,
        hash: u64,
        mut matches: impl FnMut(u32) -> bool,
    ) -> Option<(usize, u32)> {
        let control = control_of(hash);
        let mut at = home_of(hash, buckets.mask);
        for _ in 0..=buckets.mask {
            // Acquire: pairs with `place`'s Release (the handle and the arena record).
            let seen = buckets.control[at].load(Ordering::Acquire);
            if seen == EMPTY {
                return None;
            }
            if seen == control {
                let handle = buckets.handles[at].load(Ordering::Relaxed);
                if matches(handle) {
                    return Some((at, handle));
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
        if (used + 1) * 8 > (self.buckets(&pin).mask + 1) * 7 {
            self.grow(live + 1, &rehash, &pin);
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
        buckets.control[at].store(TOMBSTONE, Ordering::Release);
        self.live.fetch_sub(1, Ordering::Relaxed);
        Some(handle)
    }

    /// A new array, without tombstones, of the fewest buckets that hold `entries` below
    /// 7/8 load: twice the old one when it filled (its load then about 7/16), the same
    /// or fewer when tombstones filled it.
    fn grow(&self, entries: usize, rehash: &impl Fn(u32) -> u64, pin: &reclaim::Pin) {
        let count = (entries * 8 / 7 + 1).next_power_of_two().max(MIN_BUCKETS);
        let fresh = Buckets::new(count);
        let mut used = 0;
        for handle in self.handles_in(self.buckets(pin)) {
            fresh.place(rehash(handle), handle);
            used += 1;
        }
        self.used.store(used, Ordering::Relaxed);
        // Release: a reader that loads the new array sees its buckets.
        let old = self.current.swap(Box::into_raw(fresh), Ordering::AcqRel);
        self.retire.retire(old);
    }

    fn handles_in<'a>(&self, buckets: &'a Buckets) -> impl Iterator<Item = u32> + 'a {
        buckets
            .control
            .iter()
            .zip(buckets.handles.iter())
            .filter(|(control, _)| control.load(Ordering::Relaxed) & FULL != 0)
            .map(|(_, handle)| handle.load(Ordering::Relaxed))
    }

    /// Every handle in the table (replay, or under the read lock).
    pub(super) fn handles(&self) -> Vec<u32> {
        let pin = reclaim::pin();
        self.handles_in(self.buckets(&pin)).collect()
    }

    /// Entries in the table.
    pub(super) fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes of DRAM the current bucket array holds (a control byte and a handle per
    /// bucket).
    pub(super) fn heap_bytes(&self) -> u64 {
        let pin = reclaim::pin();
        self.buckets(&pin).bytes()
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Hashes with chosen homes: collisions on purpose (the control byte's bits vary).
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
        assert!(table.heap_bytes() >= 2000 * 5, "it grew");
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
            MIN_BUCKETS as u64 * 5,
            "no growth from churn alone"
        );
    }
}
