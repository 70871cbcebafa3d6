//! Objects in hosts' local DRAM: local partitions (the paper's section 3.5.2) and local
//! data copies (section 3.5.3), both options of the pod ([`crate::PodConfig`]).
//!
//! **Partitions.** The replica's entry of an object can name a host whose DRAM holds it
//! (`local_owner`). After [`PodConfig::partition_after_accesses`] consecutive accesses
//! from one host (the last accessor is a byte per slot in LNR, written sloppily: the
//! policy need not be exact; the count is this host's, in its DRAM), the host copies the
//! object into its DRAM and appends `MoveToHost` with the object's stamp, holding the
//! object's record lock if it has one, so no write is in progress. From then on only it
//! touches the object, under a local lock and without a flush. A host that needs the
//! object asks the holder by RPC to move it back; the holder writes the bytes into the
//! slot, writes them back to memory, and appends `MoveToCxl`. Replay of either move drops
//! every other host's cached lines of the slot: lines cached before the object left are
//! stale once it returns.
//!
//! **Copies.** After [`PodConfig::copy_after_reads`] reads of a read-shared object (no
//! record) from one host, the host keeps a copy in its DRAM and reads it there. The copy
//! is kept only while nothing happens to the object: replay of any event about it (a
//! write's `RecordAlloc` that makes it read-write-shared first of all, a move, a delete)
//! drops it, on the host that appended the event too. A writer waits for no one: it
//! appends its alloc as always, and every other host's next read catches up with the log
//! before it looks for a copy.
//!
//! Only the safe calls ([`Host::read`], [`Host::read_prefix`], [`Host::write`],
//! [`Host::update`], ...) use DRAM. The ticket calls ([`Host::read_start`],
//! [`Host::write_start`]) are the CXL path: they bring an object in a host's DRAM back to
//! CXL first, and neither use nor make copies.
//!
//! [`PodConfig::partition_after_accesses`]: crate::PodConfig::partition_after_accesses
//! [`PodConfig::copy_after_reads`]: crate::PodConfig::copy_after_reads

use super::object::Guard;
use super::{Host, Settle, Shared};
use crate::backoff::Backoff;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host::HostId;
use crate::layout::ACCESSOR_BYTES;
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::record::{RecordWord, Records};
use crate::replica::{Index, Outcome};
use crate::rpc::{Response, RingGeometry, Tally};
use crate::sync::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering};

/// The RPC that asks a host to move an object from its DRAM back to CXL.
const OP_MOVE_BACK: u8 = 1;
/// Answers: moved back; not held here (already back, or never was); failed (a log
/// append); named as held here but missing (an earlier move's append failed).
const MOVED_BACK: u8 = 1;
const NOT_HERE: u8 = 2;
const FAILED: u8 = 3;
const MISSING: u8 = 4;
/// Times the consecutive accesses a move needs double for an object that other hosts
/// keep asking back, at most: past [`u8::MAX`] accesses (a streak's largest count) the
/// object never moves again.
const MAX_BOUNCE_DOUBLINGS: u8 = 8;

/// A local object's state: this host holds it.
const HELD: u8 = 0;
/// The bytes are in the CXL slot and the move back is on its way to the log: reads may go
/// on, writes wait until the object is in CXL.
const LEAVING: u8 = 1;
/// A move whose log append failed: its entry may be in the log and apply later (the
/// index then names this host), but the record was let go meanwhile, so the bytes may be
/// older than CXL's. Never read nor written here. Once the index names this host, nobody
/// writes the object in CXL any more (every access goes to this host, which answers by
/// moving it back), so the bytes in CXL are its current ones: moving it back appends
/// `MoveToCxl` without writing the stale bytes (as for a leaving object).
const ORPHANED: u8 = 2;

/// An object in this host's partition, behind a seqlock: readers write nothing shared
/// (hot objects are read by all of the host's threads), one writer at a time.
pub(super) struct LocalObject {
    key: Box<[u8]>,
    /// Even: no write in progress; odd: the writer holds the object.
    version: AtomicU64,
    /// [`HELD`], [`LEAVING`] or [`ORPHANED`].
    state: AtomicU8,
    /// The bytes, eight to a word (loaded and stored relaxed: a read that overlaps a
    /// write sees the version change and starts over).
    words: Box<[AtomicU64]>,
}

impl LocalObject {
    fn new(key: &[u8], bytes: &[u8]) -> Self {
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
    fn read<R>(&self, len: usize, copy: impl FnOnce(&Source<'_>, usize) -> R) -> Option<R> {
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

    /// Takes the object for writing (spins while another writer has it).
    fn lock(&self) {
        loop {
            let version = self.version.load(Ordering::Relaxed);
            if version.is_multiple_of(2)
                && self
                    .version
                    .compare_exchange_weak(
                        version,
                        version + 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                // The odd version is ordered before every store of the write (pairs with
                // the reader's Acquire fence).
                crate::sync::fence(Ordering::Release);
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Lets the object go after a write: the version is even again (Release: the
    /// write's stores come first).
    fn unlock(&self) {
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The bytes, `len` of them (the caller holds the object).
    fn bytes(&self, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        Source::Words(&self.words).copy(0, &mut bytes);
        bytes
    }

    /// Stores `bytes` (the caller holds the object).
    fn store(&self, bytes: &[u8]) {
        for (word, chunk) in self.words.iter().zip(bytes.chunks(8)) {
            let mut value = [0u8; 8];
            value[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(value), Ordering::Relaxed);
        }
    }
}

/// Lets a local object go when dropped (its writer's every way out).
struct UnlockOnDrop<'a>(&'a LocalObject);

impl Drop for UnlockOnDrop<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

/// Ends a write in CXL if dropped while it still holds it (a panic of the caller's change).
struct EndOnUnwind<'a> {
    shared: &'a Shared,
    state: Option<super::object::WriteState>,
    c: &'a ThreadCounters,
}

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            if !crate::mutants::skipped(crate::mutants::Step::LockedRecordRestoredOnError) {
                let _ = self.shared.write_end(state, self.c);
            }
        }
    }
}

/// Held by the thread that moves an object to or from this host (behind
/// [`Local::moving`]): proof, for [`Local::object_held`], that no one else frees objects.
pub(super) struct Moving;

/// What a move back found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MovedBack {
    /// It moved the object back to CXL.
    Moved,
    /// The object is not in this host's DRAM (already back, or never was).
    NotHere,
    /// The index says this host holds the object, and it does not (a move whose append
    /// failed).
    Missing,
}

/// What one host keeps in its DRAM for partitions and copies: per slot, so that the hot
/// path takes no lock of its own and hashes nothing (the index lookup found the slot).
///
/// Both arrays hold owning pointers (null: none). A reference to a copy is taken only
/// under the index's read lock (the `&Index` of [`Local::copy`]), and a copy is freed only
/// under its write lock (replay's `&mut Index`) or with the host. A reference to an object
/// of the partition is taken either under the index's read lock once that index says this
/// host holds the object ([`Local::object`]), or by the thread holding [`Local::moving`]
/// ([`Local::object_held`]). Only that thread frees one, and only once no index lock
/// holder can reach it: after an applied event says the object is not here (its
/// `MoveToCxl`, or the loss of its `MoveToHost`). An object whose move's append failed is
/// never freed before the host goes (it is orphaned, or leaving).
pub(super) struct Local {
    partition_after: u8,
    copy_after: u8,
    /// Bytes of every object (the slot size).
    object_bytes: usize,
    partition: Box<[AtomicPtr<LocalObject>]>,
    in_partition: AtomicUsize,
    copies: Box<[AtomicPtr<u8>]>,
    copies_held: AtomicUsize,
    /// Per slot: this host's consecutive accesses (partitions).
    streaks: Box<[AtomicU8]>,
    /// Per slot: how many times other hosts asked this host to move the object back. The
    /// accessor word in LNR counts them for every host, but sloppily (another host's
    /// write-back of the line can put an older count back); this count is exact, and the
    /// policy takes the larger.
    bounces: Box<[AtomicU8]>,
    /// Per slot: this host's reads since the object last changed (copies).
    reads: Box<[AtomicU8]>,
    /// One move (to or from this host) at a time; only its holder frees an object of
    /// the partition.
    moving: Mutex<Moving>,
}

fn per_slot<T>(on: bool, slots: u64, new: impl Fn() -> T) -> Box<[T]> {
    let len = if on { slots as usize } else { 0 };
    (0..len).map(|_| new()).collect()
}

impl Local {
    /// The host's local state for a pod with `slots` slots of `object_bytes`, if either
    /// option is on.
    pub(super) fn new(
        partition_after: u32,
        copy_after: u32,
        slots: u64,
        object_bytes: usize,
    ) -> Option<Self> {
        if partition_after == 0 && copy_after == 0 {
            return None;
        }
        // The configuration keeps both at most u8::MAX.
        let byte = |n: u32| u8::try_from(n).expect("validated by the pod's configuration");
        let (partitions, copies) = (partition_after > 0, copy_after > 0);
        Some(Self {
            partition_after: byte(partition_after),
            copy_after: byte(copy_after),
            object_bytes,
            partition: per_slot(partitions, slots, || AtomicPtr::new(std::ptr::null_mut())),
            in_partition: AtomicUsize::new(0),
            copies: per_slot(copies, slots, || AtomicPtr::new(std::ptr::null_mut())),
            copies_held: AtomicUsize::new(0),
            streaks: per_slot(partitions, slots, || AtomicU8::new(0)),
            bounces: per_slot(partitions, slots, || AtomicU8::new(0)),
            reads: per_slot(copies, slots, || AtomicU8::new(0)),
            moving: Mutex::new(Moving),
        })
    }

    /// Objects in this host's partition, and copies it holds, now.
    pub(super) fn sizes(&self) -> (usize, usize) {
        (
            self.in_partition.load(Ordering::Relaxed),
            self.copies_held.load(Ordering::Relaxed),
        )
    }

    /// The object of the partition in `slot`, if any. The caller holds the index's read
    /// lock, and that index says this host holds the object.
    fn object<'i>(&'i self, _index: &'i Index, slot: u64) -> Option<&'i LocalObject> {
        let object = self.partition[slot as usize].load(Ordering::Acquire);
        // SAFETY: non-null pointers come from `Box::into_raw` in `insert_object`; the
        // object is freed only once no holder of the index's read lock can reach it (see
        // the type's comment), and the borrow of `_index` keeps the caller's lock held
        // while the reference lives.
        unsafe { object.as_ref() }
    }

    /// The object of the partition in `slot`, if any, for the thread holding `moving`
    /// (whatever the index says: no one else frees it).
    fn object_held<'m>(&'m self, _moving: &'m Moving, slot: u64) -> Option<&'m LocalObject> {
        let object = self.partition[slot as usize].load(Ordering::Acquire);
        // SAFETY: from `Box::into_raw` in `insert_object`; only the holder of `moving`
        // (the caller, for as long as `_moving` is borrowed) frees it.
        unsafe { object.as_ref() }
    }

    /// Puts `object` in the partition at `slot` (empty). The caller holds `moving`, and
    /// no index says this host holds the object yet.
    fn insert_object(&self, slot: u64, object: Box<LocalObject>) {
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
    unsafe fn remove_object(&self, slot: u64) {
        let object = self.partition[slot as usize].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !object.is_null() {
            // SAFETY: from `Box::into_raw`, and no other thread can reach it (the caller's
            // contract); the swap took the array's ownership.
            drop(unsafe { Box::from_raw(object) });
            self.in_partition.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The copy of the object in `slot`, if any. The caller holds the index's read lock.
    fn copy<'i>(&'i self, _index: &'i Index, slot: u64) -> Option<&'i [u8]> {
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
    fn insert_copy(&self, _index: &Index, slot: u64, bytes: Box<[u8]>) -> bool {
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
    unsafe fn copy_box(&self, copy: *mut u8) -> Box<[u8]> {
        let slice = std::ptr::slice_from_raw_parts_mut(copy, self.object_bytes);
        // SAFETY: the caller's contract; the length is the one the box had.
        unsafe { Box::from_raw(slice) }
    }

    /// Forgets the policies' counts of the slot `slot` (a new object in it).
    pub(super) fn forget(&self, slot: u64) {
        for counts in [&self.streaks, &self.bounces, &self.reads] {
            if let Some(count) = counts.get(slot as usize) {
                count.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Replay applied an event about the object in `slot`: its copy, if any, is no
    /// longer valid. Returns whether one was dropped. The write lock (`&mut Index`)
    /// keeps every reader of copies out.
    pub(super) fn invalidate_copy(&self, _index: &mut Index, slot: u64) -> bool {
        if self.copy_after == 0 {
            return false;
        }
        self.reads[slot as usize].store(0, Ordering::Relaxed);
        // The write lock (`_index`) keeps every reader of copies out.
        self.take_copy(slot).is_some()
    }

    /// Takes the copy of the object in `slot` out of the array. The caller makes sure no
    /// one reads it: it holds the index's write lock, or `&mut self`.
    fn take_copy(&self, slot: u64) -> Option<Box<[u8]>> {
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

/// Adds one to a per-slot count (only this host's threads write it; a lost count is
/// harmless).
fn bump(count: &AtomicU8) -> u8 {
    let next = count.load(Ordering::Relaxed).saturating_add(1);
    count.store(next, Ordering::Relaxed);
    next
}

/// Where a read copies an object's bytes from.
pub(super) enum Source<'a> {
    /// This host's DRAM: a copy.
    Dram(&'a [u8]),
    /// This host's DRAM: an object in its partition, eight bytes to a word.
    Words(&'a [AtomicU64]),
    /// The object's slot in the pod, at this offset, through this host's cache.
    Pod(&'a Memory, u64),
}

impl Source<'_> {
    /// Copies the object's bytes `at..at + buf.len()` into `buf`.
    pub(super) fn copy(&self, at: usize, buf: &mut [u8]) {
        match self {
            Source::Dram(bytes) => buf.copy_from_slice(&bytes[at..at + buf.len()]),
            Source::Words(words) => {
                // A partial first word, whole words, a partial last word.
                let head = ((8 - at % 8) % 8).min(buf.len());
                let (first, rest) = buf.split_at_mut(head);
                if head > 0 {
                    let word = words[at / 8].load(Ordering::Relaxed).to_le_bytes();
                    first.copy_from_slice(&word[at % 8..at % 8 + head]);
                }
                let whole = &words[(at + head) / 8..];
                let rest_whole = rest.len() / 8;
                let mut chunks = rest.chunks_exact_mut(8);
                for (chunk, word) in (&mut chunks).zip(whole) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                }
                let tail = chunks.into_remainder();
                if !tail.is_empty() {
                    let word = whole[rest_whole].load(Ordering::Relaxed).to_le_bytes();
                    tail.copy_from_slice(&word[..tail.len()]);
                }
            }
            Source::Pod(memory, offset) => memory.read(offset + at as u64, buf),
        }
    }
}

/// Where a write changes an object's bytes.
pub(super) enum Target<'a> {
    /// The object in this host's partition, all of it, under its local lock.
    Dram(&'a mut [u8]),
    /// The object's slot in the pod (offset, length), through this host's cache, with
    /// the record locked.
    Pod(&'a Memory, u64, usize),
}

/// The RPC rings of a pod: one per host.
pub(super) struct Rpc {
    rings: Vec<RingGeometry>,
    entry_bytes: usize,
}

impl Rpc {
    pub(super) fn new(layout: &crate::Layout) -> Option<Self> {
        let entries = u64::from(layout.config.rpc_ring_entries);
        if entries == 0 {
            return None;
        }
        let rings = (0..layout.config.max_hosts)
            .map(|host| layout.rpc_ring(host))
            .collect();
        Some(Self {
            rings,
            entry_bytes: layout.rpc_entry_bytes as usize,
        })
    }
}

impl Tally for ThreadCounters {
    fn scr_atomics(&self, n: u64) {
        self.add(Counter::ScrAtomics, n);
    }

    fn lines_written_back(&self, n: u64) {
        self.add(Counter::LinesWrittenBack, n);
    }

    fn lines_invalidated(&self, n: u64) {
        self.add(Counter::LinesInvalidated, n);
    }
}

/// What a read or write found when it looked the key up, or did.
enum Place<R> {
    /// Done in this host's DRAM (its partition, or a copy): the result.
    Done(R),
    /// In this host's partition, but a write overlapped the read, or the object is on
    /// its way back to CXL (a write): wait a little, try again.
    Retry,
    /// In another host's DRAM.
    Held(HostId),
    /// In its CXL slot.
    Cxl,
}

impl Host {
    /// Reads the first bytes of object `key` into `buf`: `extent` gets the first
    /// [`FIRST_READ_BYTES`](Self::FIRST_READ_BYTES) (or fewer) bytes copied and says how
    /// many bytes the read needs in all; the rest are copied only if it needs them. For
    /// objects whose length is in their first bytes (the KV store's values). Returns how
    /// many bytes were copied. `extent` may see bytes of a write in progress: it only
    /// decides how much to copy; a copy that overlapped a write is thrown away and the
    /// read starts over.
    pub fn read_prefix(
        &self,
        key: &[u8],
        buf: &mut [u8],
        extent: &dyn Fn(&[u8]) -> usize,
    ) -> Result<(usize, super::Done)> {
        self.shared.check_key(key)?;
        self.shared.check_len(buf.len())?;
        self.shared.with_counters(|c| {
            self.shared.read_via(key, c, &mut |source, len| {
                let len = buf.len().min(len);
                let first = len.min(Self::FIRST_READ_BYTES);
                source.copy(0, &mut buf[..first]);
                let total = extent(&buf[..first]).clamp(first, len);
                if total > first {
                    source.copy(first, &mut buf[first..total]);
                }
                total
            })
        })
    }

    /// Bytes [`Host::read_prefix`] copies before it asks how many it needs.
    pub const FIRST_READ_BYTES: usize = 64;

    /// Stops or resumes serving RPCs from other hosts (on by default). A host that does not
    /// serve keeps the objects in its DRAM: other hosts that need one get
    /// [`Error::HostUnresponsive`] after their wait limit. For testing what a stopped
    /// host looks like to the others.
    pub fn set_serving(&self, on: bool) {
        self.shared
            .serving
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Objects in this host's DRAM partition, and copies of read-shared objects it
    /// holds, now.
    pub fn local_objects(&self) -> (usize, usize) {
        self.shared.local.as_ref().map_or((0, 0), Local::sizes)
    }
}

/// Where an object is, as this host's replica says under its read lock.
enum Found<'i> {
    /// In this host's partition.
    Mine(&'i LocalObject),
    /// In CXL, with a copy in this host's DRAM.
    Copy(&'i [u8]),
    /// In another host's DRAM.
    Held(HostId),
    /// In CXL.
    Cxl,
}

impl Shared {
    /// Where object `key` is, by `index` (read-locked, caught up).
    fn find<'i>(&self, local: &'i Local, index: &'i Index, key: &[u8]) -> Result<Found<'i>> {
        let entry = index.lookup(key).ok_or(Error::UnknownKey)?;
        Ok(match entry.local_owner {
            Some(owner) if owner == self.id => match local.object(index, entry.slot) {
                Some(object) => Found::Mine(object),
                None => Found::Cxl, // a move's append failed: the CXL path says so
            },
            Some(owner) => Found::Held(owner),
            None => local
                .copy(index, entry.slot)
                .map_or(Found::Cxl, Found::Copy),
        })
    }

    /// Reads object `key` with `copy`, which gets where the bytes are and the object's
    /// length and returns how many bytes it copied: from this host's partition, from a
    /// copy, or from CXL with the read protocol (retried within the bound).
    pub(super) fn read_via(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut dyn FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<(usize, super::Done)> {
        self.poll_rpcs(c);
        let max_retries = self.options.max_retries;
        let mut retries = 0;
        let mut writer_wait: Option<Backoff> = None;
        loop {
            let done = super::Done { retries };
            let in_cxl = match &self.local {
                None => true,
                Some(local) => match self.read_local(local, key, c, copy)? {
                    Place::Done(copied) => return Ok((copied, done)),
                    // A local write in progress: wait for it as for a writer in CXL.
                    Place::Retry => {
                        c.add(Counter::WaitsForWriter, 1);
                        self.wait_for_local_writer(&mut writer_wait)?;
                        continue;
                    }
                    Place::Held(owner) => {
                        self.bring_back(owner, key, c)?;
                        false
                    }
                    Place::Cxl => true,
                },
            };
            if in_cxl {
                let ticket = self.read_start(key, c)?;
                let copied = copy(&Source::Pod(&self.memory, ticket.offset), ticket.len);
                self.chaos.point(crate::chaos::Point::ReadBeforeEnd);
                if self.read_end(&ticket, c)? {
                    if let Some(local) = &self.local {
                        self.after_cxl_access(local, key, ticket.slot(), Some(ticket.guard()), c);
                    }
                    return Ok((copied, done));
                }
            }
            retries += 1;
            if retries > max_retries {
                return Err(Error::RetriesExhausted {
                    retries: max_retries,
                });
            }
        }
    }

    /// Waits a little for a local writer (bounded by the wait limit, as a wait for a
    /// writer in CXL is).
    fn wait_for_local_writer(&self, backoff: &mut Option<Backoff>) -> Result<()> {
        let backoff = backoff.get_or_insert_with(|| Backoff::new(self.options.wait_limit));
        if backoff.snooze() {
            Ok(())
        } else {
            Err(Error::LocalObjectBusy {
                host: self.id,
                waited_ms: backoff.waited().as_millis() as u64,
            })
        }
    }

    /// Looks `key` up (after the tail check) and reads it if it is in this host's DRAM:
    /// in its partition, or a copy. Under the index's read lock throughout: no event
    /// about the object is applied meanwhile.
    fn read_local(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut dyn FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<Place<usize>> {
        self.catch_up()?;
        let index = self.replica.index.read();
        Ok(match self.find(local, &index, key)? {
            Found::Mine(object) => {
                if object.state.load(Ordering::Acquire) == ORPHANED {
                    // Its move applied after all: back to CXL, where its bytes are.
                    return Ok(Place::Held(self.id));
                }
                // A leaving object's bytes are the ones in CXL: reading them is fine.
                match object.read(local.object_bytes, copy) {
                    Some(copied) => {
                        c.add(Counter::LocalReads, 1);
                        c.add(Counter::Reads, 1);
                        Place::Done(copied)
                    }
                    None => Place::Retry,
                }
            }
            Found::Copy(bytes) => {
                let copied = copy(&Source::Dram(bytes), bytes.len());
                c.add(Counter::CopyReads, 1);
                c.add(Counter::Reads, 1);
                Place::Done(copied)
            }
            Found::Held(owner) => Place::Held(owner),
            Found::Cxl => Place::Cxl,
        })
    }

    /// Looks `key` up (after the tail check) and, if it is in this host's partition and
    /// not leaving, changes it there with `change` (taken).
    fn write_local<R>(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
        change: &mut Option<impl FnOnce(Target<'_>) -> R>,
    ) -> Result<Place<R>> {
        self.catch_up()?;
        let index = self.replica.index.read();
        Ok(match self.find(local, &index, key)? {
            Found::Mine(object) => {
                object.lock();
                // Unlocked on every way out, a panic of `change` included.
                let _unlock = UnlockOnDrop(object);
                let place = match object.state.load(Ordering::Relaxed) {
                    HELD => {
                        let mut bytes = object.bytes(local.object_bytes);
                        let change = change.take().expect("called once");
                        let result = change(Target::Dram(&mut bytes));
                        object.store(&bytes);
                        c.add(Counter::LocalWrites, 1);
                        c.add(Counter::Writes, 1);
                        Ok(Place::Done(result))
                    }
                    LEAVING => Ok(Place::Retry),
                    // Orphaned: see `read_local`.
                    _ => Ok(Place::Held(self.id)),
                };
                place?
            }
            Found::Held(owner) => Place::Held(owner),
            Found::Copy(_) | Found::Cxl => Place::Cxl,
        })
    }

    /// Changes object `key` with `change`: in this host's partition under the local lock
    /// ([`Target::Dram`], the whole object), or in CXL between `write_start` and
    /// `write_end` ([`Target::Pod`]). Returns `change`'s result.
    pub(super) fn write_via<R>(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        change: impl FnOnce(Target<'_>) -> R,
    ) -> Result<(R, super::Done)> {
        self.poll_rpcs(c);
        let mut retries = 0u32;
        let mut change = Some(change);
        if let Some(local) = &self.local {
            let mut leaving_wait: Option<Backoff> = None;
            loop {
                match self.write_local(local, key, c, &mut change)? {
                    Place::Done(result) => return Ok((result, super::Done { retries })),
                    // On its way back to CXL: wait until it is there.
                    Place::Retry => {
                        self.wait_for_local_writer(&mut leaving_wait)?;
                        continue;
                    }
                    Place::Held(owner) => self.bring_back(owner, key, c)?,
                    Place::Cxl => break,
                }
                retries += 1;
                if retries > self.options.max_retries {
                    return Err(Error::RetriesExhausted {
                        retries: self.options.max_retries,
                    });
                }
            }
        }
        let (state, more) = self.write_start_counted(key, c)?;
        let change = change.take().expect("called once");
        // A panic in `change` must not leave the record locked: the write ends on unwind
        // as a dropped ticket's does (its bytes reach memory, the record is unlocked).
        let mut guard = EndOnUnwind {
            shared: self,
            state: Some(state),
            c,
        };
        let result = change(Target::Pod(&self.memory, state.offset, state.len));
        let state = guard.state.take().expect("ended once");
        let slot = state.slot;
        self.write_end(state, c)?;
        if let Some(local) = &self.local {
            self.after_cxl_access(local, key, slot, None, c);
        }
        Ok((
            result,
            super::Done {
                retries: retries + more,
            },
        ))
    }

    /// The policies, after an access through CXL: count it towards a move to this host
    /// (partitions) and, for a read of a read-shared object (`guard` is the log), towards
    /// a copy. Best effort: the access is done, and a policy that fails (a full log, a
    /// busy record) only leaves the object where it is.
    fn after_cxl_access(
        &self,
        local: &Local,
        key: &[u8],
        slot: u64,
        guard: Option<Guard>,
        c: &ThreadCounters,
    ) {
        if local.partition_after > 0 {
            let (streak, shared_bounces) = self.note_access(local, slot, c);
            let bounces = shared_bounces.max(local.bounces[slot as usize].load(Ordering::Relaxed));
            // Each time another host asked the object back, a move needs twice the
            // accesses: an object that keeps bouncing is shared, and stays in CXL (for
            // good, once it needs more than a streak can count).
            let needed = u32::from(local.partition_after) << bounces.min(MAX_BOUNCE_DOUBLINGS);
            if needed <= u32::from(u8::MAX) && u32::from(streak) >= needed {
                local.streaks[slot as usize].store(0, Ordering::Relaxed);
                let _ = self.move_here(local, key, c);
                return;
            }
        }
        if local.copy_after > 0
            && matches!(guard, Some(Guard::Log))
            && bump(&local.reads[slot as usize]) >= local.copy_after
        {
            let _ = self.make_copy(local, key, c);
        }
    }

    /// Notes an access of this host to the object in `slot`: reads the slot's accessor
    /// word from LNR and, if another host accessed the object last, writes this host
    /// there. Returns this host's consecutive accesses so far and the object's bounces.
    /// Sloppy on purpose: many slots' words share a line, and a write-back can put older
    /// bytes back; the policy only needs a hint.
    fn note_access(&self, local: &Local, slot: u64, c: &ThreadCounters) -> (u8, u8) {
        let offset = self.pod.layout().accessor_offset(slot);
        let me = u8::try_from(self.id + 1).expect("host ids fit a byte");
        let [last, bounces] = self.accessor_word(offset, c);
        let streak = &local.streaks[slot as usize];
        if last == me {
            (bump(streak), bounces)
        } else {
            self.memory.write(offset, &[me]);
            self.memory.write_back(offset, 1);
            c.add(Counter::LinesWrittenBack, 1);
            streak.store(1, Ordering::Relaxed);
            (1, bounces)
        }
    }

    /// The accessor word at `offset`, read from memory.
    fn accessor_word(&self, offset: u64, c: &ThreadCounters) -> [u8; ACCESSOR_BYTES as usize] {
        let mut word = [0u8; ACCESSOR_BYTES as usize];
        self.memory.flush(offset, word.len());
        self.memory.fence();
        c.add(Counter::LinesInvalidated, 1);
        self.memory.read(offset, &mut word);
        word
    }

    /// Counts a bounce of the object in `slot` (another host asked it back) in its
    /// accessor word, for every host's policy.
    fn note_bounce(&self, slot: u64, c: &ThreadCounters) {
        let offset = self.pod.layout().accessor_offset(slot);
        let [_, bounces] = self.accessor_word(offset, c);
        self.memory.write(offset + 1, &[bounces.saturating_add(1)]);
        self.memory.write_back(offset + 1, 1);
        c.add(Counter::LinesWrittenBack, 1);
    }

    /// Starts the accessor word of a new object in `slot` afresh (a creator, before its
    /// create event): no last accessor, no bounces.
    pub(super) fn clear_accessor(&self, slot: u64) {
        if self.local.as_ref().is_some_and(|l| l.partition_after > 0) {
            let offset = self.pod.layout().accessor_offset(slot);
            self.memory.write(offset, &[0; ACCESSOR_BYTES as usize]);
            self.memory.write_back(offset, ACCESSOR_BYTES as usize);
        }
    }

    /// Moves object `key` from its CXL slot into this host's DRAM, if it is in CXL and
    /// no write is in progress. Returns whether it moved.
    fn move_here(&self, local: &Local, key: &[u8], c: &ThreadCounters) -> Result<bool> {
        // Another move (to or from this host) is under way: not now.
        let Some(moving) = local.moving.try_lock() else {
            return Ok(false);
        };
        self.catch_up()?;
        let Some(entry) = self.replica.index.read().lookup(key) else {
            return Ok(false);
        };
        if entry.local_owner.is_some() {
            return Ok(false);
        }
        // Hold the record's lock (counter unchanged: nothing is written) so that no write
        // is in progress while we copy; a busy record means the object is busy: not now.
        let records = Records::new(&self.pod);
        let mut locked = None;
        if let Some(record) = entry.record {
            let word = records.load(record);
            c.add(Counter::ScrAtomics, 2);
            if !word.in_use || word.locked {
                return Ok(false);
            }
            let held = RecordWord {
                locked: true,
                ..word
            };
            if records.compare_exchange(record, word, held).is_err() {
                return Ok(false);
            }
            locked = Some((record, word));
        }
        let moved = self.copy_and_move(local, &moving, key, &entry, c);
        if let Some((record, word)) = locked {
            let held = RecordWord {
                locked: true,
                ..word
            };
            self.unlock_record(record, held, word, c);
        }
        moved
    }

    /// The body of [`Shared::move_here`], holding `moving` and the record (if any).
    fn copy_and_move(
        &self,
        local: &Local,
        moving: &Moving,
        key: &[u8],
        entry: &crate::replica::IndexEntry,
        c: &ThreadCounters,
    ) -> Result<bool> {
        // An event about the object between the lookup and the lock (an alloc, a write's
        // wrap): start from what is current another time.
        if !self.unchanged_since(entry)? {
            return Ok(false);
        }
        // An orphan of an earlier move whose outcome is not settled yet holds the place:
        // not now (that move may still win, and its orphan is what readers will find).
        if local.object_held(moving, entry.slot).is_some() {
            return Ok(false);
        }
        let (offset, len) = self.place(entry);
        let mut bytes = vec![0u8; len].into_boxed_slice();
        self.invalidate(offset, len, c);
        self.memory.read(offset, &mut bytes);
        // In the partition before the event: once a replica says "here", this host's
        // threads find the object.
        local.insert_object(entry.slot, Box::new(LocalObject::new(key, &bytes)));
        let outcome = self.submit_settled(
            &Event::MoveToHost {
                key,
                host: self.id,
                stamp: entry.stamp,
            },
            Settle::MoveToHost { slot: entry.slot },
        );
        match outcome {
            Ok(Outcome::Moved) => {}
            Ok(_) => {
                // SAFETY: we hold `moving`, and no applied event says this host holds the
                // object: our move lost.
                unsafe { local.remove_object(entry.slot) };
                c.add(Counter::MovesLost, 1);
                return Ok(false);
            }
            Err(error) => {
                // The entry may be in the log and take effect later, when a reader may
                // find the object: keep it, orphaned (the record's lock goes back, so CXL
                // may get newer bytes).
                if let Some(object) = local.object_held(moving, entry.slot) {
                    object.state.store(ORPHANED, Ordering::Release);
                }
                c.add(Counter::MovesLost, 1);
                return Err(error);
            }
        }
        c.add(Counter::MovesToHost, 1);
        Ok(true)
    }

    /// Moves object `key` from this host's DRAM back to its CXL slot, if this host holds
    /// it: writes the bytes into the slot and back to memory, then appends `MoveToCxl`.
    /// `asked`: another host asked for it (the object bounced).
    pub(super) fn move_back(
        &self,
        key: &[u8],
        asked: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        let Some(local) = &self.local else {
            return Ok(MovedBack::NotHere);
        };
        let moving = local.moving.lock();
        self.catch_up()?;
        let Some(entry) = self.replica.index.read().lookup(key) else {
            return Ok(MovedBack::NotHere);
        };
        if entry.local_owner != Some(self.id) {
            return Ok(MovedBack::NotHere);
        }
        let slot = entry.slot;
        let Some(object) = local.object_held(&moving, slot) else {
            return Ok(MovedBack::Missing);
        };
        let layout = self.pod.layout();
        let (offset, len) = (layout.slot_offset(slot), local.object_bytes);
        object.lock();
        match object.state.load(Ordering::Relaxed) {
            HELD => {}
            _ => {
                // Leaving since an earlier move back whose append failed (its event may
                // yet apply), or orphaned by a move here whose append failed and whose
                // event applied after all: either way the bytes in CXL are current, so
                // append a move back without writing any.
                object.unlock();
                return self.append_move_back(local, &moving, key, slot, asked, c);
            }
        }
        // Lines of the slot cached from before the object left are old: drop them before
        // writing (a write into a cached line keeps the rest of it).
        self.memory.flush(offset, len);
        self.memory.fence();
        c.add(Counter::LinesInvalidated, Self::lines(len));
        self.memory.write(offset, &object.bytes(len));
        // The bytes reach memory before the event tells anyone to read them there.
        if !mutants::skipped(Step::MoveBackWritesBack) {
            self.memory.write_back(offset, len);
            c.add(Counter::LinesWrittenBack, Self::lines(len));
        }
        self.memory.fence();
        // Writes wait from now on; reads go on (the bytes are those in CXL). The object is
        // let go before the event: replay takes the index's write lock, and a writer
        // holding the index's read lock may be waiting for the object. If the append
        // fails, the object stays leaving: its event may be in the log and apply later.
        object.state.store(LEAVING, Ordering::Relaxed);
        object.unlock();
        self.append_move_back(local, &moving, key, slot, asked, c)
    }

    /// Appends `MoveToCxl` for the object in `slot`, whose bytes are in CXL, and takes it
    /// out of the partition once the event is applied.
    fn append_move_back(
        &self,
        local: &Local,
        _moving: &Moving,
        key: &[u8],
        slot: u64,
        asked: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        let moved = self.submit(&Event::MoveToCxl { key })? == Outcome::Moved;
        // SAFETY: we hold `moving`, and an applied event says the object is in CXL (ours;
        // or, if ours lost, an earlier MoveToCxl whose append had failed): no holder of
        // the index's lock reaches it any more.
        unsafe { local.remove_object(slot) };
        if !moved {
            return Ok(MovedBack::NotHere);
        }
        local.streaks[slot as usize].store(0, Ordering::Relaxed);
        if asked {
            bump(&local.bounces[slot as usize]);
            self.note_bounce(slot, c);
        }
        c.add(Counter::MoveBacks, 1);
        Ok(MovedBack::Moved)
    }

    /// Drops the orphan in `slot` (see [`ORPHANED`]) if its move lost or never reached
    /// the log: no replica names this host as its holder, so no reader reaches it.
    pub(super) fn drop_orphan(&self, slot: u64) -> Result<()> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let moving = local.moving.lock();
        let Some(object) = local.object_held(&moving, slot) else {
            return Ok(());
        };
        if object.state.load(Ordering::Acquire) != ORPHANED {
            return Ok(());
        }
        self.catch_up()?;
        let holder = self
            .replica
            .index
            .read()
            .lookup(&object.key)
            .and_then(|entry| (entry.slot == slot).then_some(entry.local_owner))
            .flatten();
        if holder != Some(self.id) {
            // SAFETY: we hold `moving`, and the caught-up replica does not say this host
            // holds the object (its move lost or was refused, as the settle that deferred
            // this said): no holder of the index's lock reaches it.
            unsafe { local.remove_object(slot) };
        }
        Ok(())
    }

    /// Moves every object in this host's DRAM back to CXL (a host that leaves). Errors
    /// are the first one met; the rest are still tried.
    pub(super) fn move_all_back(&self) -> Result<()> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let keys: Vec<Box<[u8]>> = {
            let moving = local.moving.lock();
            (0..local.partition.len() as u64)
                .filter_map(|slot| local.object_held(&moving, slot).map(|o| o.key.clone()))
                .collect()
        };
        self.with_counters(|c| {
            let mut first_error = None;
            for key in keys {
                if let Err(error) = self.move_back(&key, false, c) {
                    first_error.get_or_insert(error);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// Makes a copy of object `key` in this host's DRAM if it is read-shared.
    fn make_copy(&self, local: &Local, key: &[u8], c: &ThreadCounters) -> Result<()> {
        // The read protocol's steps for a read-shared object, without what `read_start`
        // would do for others (a best-effort policy brings nothing back, sends no RPC).
        self.catch_up()?;
        let Some(entry) = self.replica.index.read().lookup(key) else {
            return Ok(());
        };
        if entry.record.is_some() || entry.local_owner.is_some() {
            return Ok(());
        }
        let (offset, len) = self.place(&entry);
        let mut bytes = vec![0u8; len].into_boxed_slice();
        self.memory.read(offset, &mut bytes);
        // The post-read check of `read_end`, then the insert under the same read lock:
        // replay cannot apply an event about the object in between.
        crate::sync::fence(Ordering::Acquire);
        self.catch_up()?;
        let index = self.replica.index.read();
        if let Some(entry) = index.current(entry.handle, entry.stamp) {
            if entry.record.is_none()
                && entry.local_owner.is_none()
                && local.insert_copy(&index, entry.slot, bytes)
            {
                c.add(Counter::CopiesMade, 1);
            }
        }
        Ok(())
    }

    /// Asks `owner`, which holds object `key` in its DRAM, to move it back to CXL (this
    /// host itself: moves it), and returns once it has answered. The caller then looks
    /// the key up again.
    pub(super) fn bring_back(&self, owner: HostId, key: &[u8], c: &ThreadCounters) -> Result<()> {
        if owner == self.id {
            return match self.move_back(key, false, c)? {
                MovedBack::Missing => Err(Error::LocalObjectMissing { host: self.id }),
                MovedBack::Moved | MovedBack::NotHere => Ok(()),
            };
        }
        let rpc = self
            .rpc
            .as_ref()
            .expect("a pod with local partitions has RPC rings");
        // Unless the replica, caught up, no longer names the same holder (it moved the
        // object back meanwhile: leaving, say), the answer stands.
        let unless_moved = |error: Error| match self.holder_of(key)? {
            Some(holder) if holder == owner => Err(error),
            _ => Ok(()),
        };
        if super::table_state(&self.pod, owner) == super::TableState::Free {
            // Nobody holds that id: the object's bytes left with its last holder.
            return unless_moved(Error::HostUnresponsive {
                host: owner,
                waited_ms: 0,
            });
        }
        let mut buf = vec![0u8; rpc.entry_bytes];
        c.add(Counter::RpcsSent, 1);
        // While it waits, the thread serves its own host's ring (two hosts asking each
        // other both progress). It holds nothing a move back here would wait for: no
        // operation calls this holding `moving`, the index, or a local object.
        let response = rpc.rings[owner as usize].call(
            &self.pod,
            &self.memory,
            &mut buf,
            OP_MOVE_BACK,
            key,
            &[],
            self.options.wait_limit,
            c,
            &mut || {
                let _ = self.serve_rpcs(c);
            },
        );
        match response {
            Ok(Response { status, .. }) => match status {
                // Not there when the holder looked (it may have moved it back to its DRAM
                // since): the caller looks again, within its bound.
                MOVED_BACK | NOT_HERE => Ok(()),
                MISSING => unless_moved(Error::LocalObjectMissing { host: owner }),
                _ => unless_moved(Error::MoveBackFailed { host: owner }),
            },
            Err(waited_ms) => unless_moved(Error::HostUnresponsive {
                host: owner,
                waited_ms,
            }),
        }
    }

    /// The host whose DRAM holds object `key`, as the replica says after catching up.
    fn holder_of(&self, key: &[u8]) -> Result<Option<HostId>> {
        self.catch_up()?;
        let index = self.replica.index.read();
        Ok(index.lookup(key).and_then(|entry| entry.local_owner))
    }

    /// Serves this host's ring if a request waits (two SCR loads when none does): every
    /// read and write of a pod with rings polls, so that a host that needs an object in
    /// this host's DRAM waits for one of its operations, not for its pump's next round.
    #[inline]
    fn poll_rpcs(&self, c: &ThreadCounters) {
        if self.rpc.is_some() {
            let _ = self.serve_rpcs(c);
        }
    }

    /// Serves the requests waiting in this host's ring. Returns how many it served. The
    /// look at the ring (two SCR loads when nothing waits) is counted in `tally`.
    pub(super) fn serve_rpcs(&self, tally: &dyn Tally) -> Result<u64> {
        let Some(rpc) = &self.rpc else {
            return Ok(0);
        };
        if !self.serving.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(0);
        }
        let ring = &rpc.rings[self.id as usize];
        if !ring.pending(&self.pod, tally) {
            return Ok(0);
        }
        // One server at a time: another thread of this host is at it.
        let Some(_serving) = self.rpc_server.try_lock() else {
            return Ok(0);
        };
        self.with_counters(|c| {
            let mut buf = vec![0u8; rpc.entry_bytes];
            let mut served = 0;
            let failed = Response {
                status: FAILED,
                detail: 0,
            };
            while let Some(claimed) = ring.claim(&self.pod, c) {
                ring.serve(
                    &self.pod,
                    &self.memory,
                    claimed,
                    &mut buf,
                    c,
                    failed,
                    |request, buf| {
                        let status = match request.op {
                            OP_MOVE_BACK => {
                                match self.move_back(&buf[request.key.clone()], true, c) {
                                    Ok(MovedBack::Moved) => MOVED_BACK,
                                    Ok(MovedBack::NotHere) => NOT_HERE,
                                    Ok(MovedBack::Missing) => MISSING,
                                    Err(_) => FAILED,
                                }
                            }
                            _ => FAILED,
                        };
                        Response { status, detail: 0 }
                    },
                );
                c.add(Counter::RpcsServed, 1);
                served += 1;
            }
            Ok(served)
        })
    }
}
