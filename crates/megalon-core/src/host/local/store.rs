//! Objects in this host's DRAM: a seqlock per object in per-slot arrays of pointers
//! (partitions), and read-only copies (copies). The unsafe part of local objects: who may
//! free what, and when.

use super::{Local, HELD};

use crate::host::ticket::Source;
use crate::replica::Index;
use crate::sync::{AtomicU64, AtomicU8, Ordering};

/// An object in this host's partition, behind a seqlock: readers write nothing shared
/// (hot objects are read by all of the host's threads), one writer at a time.
pub(in crate::host) struct LocalObject {
    pub(in crate::host) key: Box<[u8]>,
    /// Even: no write in progress; odd: the writer holds the object.
    pub(in crate::host) version: AtomicU64,
    /// [`HELD`], [`LEAVING`](super::LEAVING), [`ORPHANED`](super::ORPHANED),
    /// [`ARRIVING`](super::ARRIVING) or [`ORPHAN_LEAVING`](super::ORPHAN_LEAVING).
    pub(in crate::host) state: AtomicU8,
    /// The bytes, eight to a word (loaded and stored relaxed: a read that overlaps a
    /// write sees the version change and starts over).
    pub(in crate::host) words: Box<[AtomicU64]>,
}

impl LocalObject {
    pub(in crate::host) fn new(key: &[u8], bytes: &[u8]) -> Self {
        let object = Self {
            key: key.into(),
            version: AtomicU64::new(0),
            state: AtomicU8::new(HELD),
            words: (0..bytes.len().div_ceil(8))
                .map(|_| AtomicU64::new(0))
                .collect(),
        };
        object.store(bytes);
        object
    }

    /// Runs `copy` on the object's bytes; `None` if a write overlapped it (try again).
    pub(in crate::host) fn read<R>(
        &self,
        len: usize,
        copy: impl FnOnce(&Source<'_>, usize) -> R,
    ) -> Option<R> {
        // Acquire: pairs with the writer's Release in `unlock`.
        let before = self.version.load(Ordering::Acquire);
        if before % 2 == 1 {
            return None;
        }
        let result = copy(&Source::Words(&self.words), len);
        // The copy's loads happen before the second look at the version.
        crate::sync::fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == before).then_some(result)
    }

    /// Takes the object for writing (spins while another writer has it): for the mover,
    /// which waits only for this host's own writes.
    pub(in crate::host) fn lock(&self) {
        while !self.try_lock() {
            std::thread::yield_now();
        }
    }

    /// Takes the object for writing if no other writer has it. A writer that finds it
    /// taken lets go of the index and waits a bounded while ([`Place::Wait`]), as for a
    /// writer in CXL: an `update` may hold it for as long as its closure runs.
    ///
    /// [`Place::Wait`]: crate::host::path::Place::Wait
    pub(in crate::host) fn try_lock(&self) -> bool {
        let version = self.version.load(Ordering::Relaxed);
        if version.is_multiple_of(2)
            && self
                .version
                .compare_exchange(version, version + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // The odd version is ordered before every store of the write (pairs with the
            // reader's Acquire fence).
            crate::sync::fence(Ordering::Release);
            return true;
        }
        false
    }

    /// Lets the object go after a write: the version is even again (Release: the
    /// write's stores come first).
    pub(in crate::host) fn unlock(&self) {
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The bytes, `len` of them (the caller holds the object).
    pub(in crate::host) fn bytes(&self, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        Source::Words(&self.words).copy(0, &mut bytes);
        bytes
    }

    /// Stores `bytes` (the caller holds the object).
    pub(in crate::host) fn store(&self, bytes: &[u8]) {
        for (word, chunk) in self.words.iter().zip(bytes.chunks(8)) {
            let mut value = [0u8; 8];
            value[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(value), Ordering::Relaxed);
        }
    }
}

/// Lets a local object go when dropped (its writer's every way out).
pub(in crate::host) struct UnlockOnDrop<'a>(pub(in crate::host) &'a LocalObject);

impl Drop for UnlockOnDrop<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

/// Held by the thread that moves an object to or from this host (behind
/// [`Local::moving`]): proof, for [`Local::object`], that no one else frees objects.
pub(in crate::host) struct Moving;

/// A borrow under which no object of the partition is freed: the index's read lock,
/// once that index says this host holds the object (an object is freed only once no
/// holder of the lock can reach it), or [`Moving`] (only its holder frees objects),
/// whatever the index says. Implemented by those two only.
pub(in crate::host) trait KeepsObjects {}

impl KeepsObjects for Index {}
impl KeepsObjects for Moving {}

impl Local {
    /// The object of the partition in `slot`, if any, for as long as `_keeps` is
    /// borrowed.
    pub(in crate::host) fn object<'k>(
        &'k self,
        _keeps: &'k impl KeepsObjects,
        slot: u64,
    ) -> Option<&'k LocalObject> {
        let object = self.partition[slot as usize].load(Ordering::Acquire);
        // SAFETY: non-null pointers come from `Box::into_raw` in `insert_object`; an
        // object is freed only by the holder of `Moving`, once no holder of the index's
        // read lock can reach it (see [`Local`]), and the borrow of `_keeps` keeps the
        // caller's lock held, or its `Moving`, while the reference lives.
        unsafe { object.as_ref() }
    }

    /// Puts `object` in the partition at `slot` (empty). The caller holds `moving`, and
    /// no index says this host holds the object yet.
    pub(in crate::host) fn insert_object(&self, slot: u64, object: Box<LocalObject>) {
        let old = self.partition[slot as usize].swap(Box::into_raw(object), Ordering::AcqRel);
        if old.is_null() {
            self.in_partition.fetch_add(1, Ordering::Relaxed);
        }
        // Else a leftover of a move whose append failed (orphaned, or leaving for good):
        // a thread may still hold it, so it is leaked, not freed.
    }

    /// Takes the object out of the partition at `slot` and frees it.
    ///
    /// # Safety
    ///
    /// The caller holds `moving`, and no thread holding the index's read lock can reach
    /// the object: no applied event says this host holds it (the move lost, or its
    /// `MoveToCxl` was applied).
    pub(in crate::host) unsafe fn remove_object(&self, slot: u64) {
        let object = self.partition[slot as usize].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !object.is_null() {
            // SAFETY: from `Box::into_raw`, and no other thread can reach it (the caller's
            // contract); the swap took the array's ownership.
            drop(unsafe { Box::from_raw(object) });
            self.in_partition.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The copy of the object in `slot`, if any. The caller holds the index's read lock.
    pub(in crate::host) fn copy<'i>(&'i self, _index: &'i Index, slot: u64) -> Option<&'i [u8]> {
        let copy = self.copies.get(slot as usize)?.load(Ordering::Acquire);
        if copy.is_null() {
            return None;
        }
        // SAFETY: non-null pointers come from `Box::into_raw` of `object_bytes` bytes in
        // `insert_copy`, and are freed only under the index's write lock, which the
        // borrow of `_index` (a read lock's) excludes while the slice lives.
        Some(unsafe { std::slice::from_raw_parts(copy, self.object_bytes) })
    }

    /// Keeps `bytes` as the copy of the object in `slot`, unless one is there already.
    /// The caller holds the index's read lock and has checked the object's stamp under
    /// it.
    pub(in crate::host) fn insert_copy(&self, _index: &Index, slot: u64, bytes: Box<[u8]>) -> bool {
        // `copy` and `copy_box` rebuild the slice with this length.
        assert_eq!(bytes.len(), self.object_bytes);
        let copy = Box::into_raw(bytes).cast::<u8>();
        let inserted = self.copies[slot as usize]
            .compare_exchange(
                std::ptr::null_mut(),
                copy,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if inserted {
            self.copies_held.fetch_add(1, Ordering::Relaxed);
        } else {
            // SAFETY: ours, never shared.
            drop(unsafe { self.copy_box(copy) });
        }
        inserted
    }

    /// Rebuilds the box of a copy.
    ///
    /// # Safety
    ///
    /// `copy` came from `Box::into_raw` in `insert_copy`, and no one else can reach it.
    pub(in crate::host) unsafe fn copy_box(&self, copy: *mut u8) -> Box<[u8]> {
        let slice = std::ptr::slice_from_raw_parts_mut(copy, self.object_bytes);
        // SAFETY: the caller's contract; the length is the one the box had.
        unsafe { Box::from_raw(slice) }
    }

    /// Forgets the policies' counts of the slot `slot` (a new object in it).
    pub(in crate::host) fn forget(&self, slot: u64) {
        for counts in [&self.streaks, &self.bounces, &self.reads] {
            if let Some(count) = counts.get(slot as usize) {
                count.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Replay applied an event about the object in `slot`: its copy, if any, is no
    /// longer valid. Returns whether one was dropped. The write lock (`&mut Index`)
    /// keeps every reader of copies out.
    pub(in crate::host) fn invalidate_copy(&self, _index: &mut Index, slot: u64) -> bool {
        if self.copy_after == 0 {
            return false;
        }
        self.reads[slot as usize].store(0, Ordering::Relaxed);
        // The write lock (`_index`) keeps every reader of copies out.
        self.take_copy(slot).is_some()
    }

    /// Takes the copy of the object in `slot` out of the array. The caller makes sure no
    /// one reads it: it holds the index's write lock, or `&mut self`.
    pub(in crate::host) fn take_copy(&self, slot: u64) -> Option<Box<[u8]>> {
        let copy = self.copies[slot as usize].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if copy.is_null() {
            return None;
        }
        self.copies_held.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the swap took the array's ownership, and no reader holds the copy (the
        // caller's word).
        Some(unsafe { self.copy_box(copy) })
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // `&mut self`: no other thread can reach anything.
        for slot in 0..self.partition.len() as u64 {
            // SAFETY: as above.
            unsafe { self.remove_object(slot) };
        }
        for slot in 0..self.copies.len() as u64 {
            self.take_copy(slot);
        }
    }
}
