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

use super::ticket::{Source, Target};

mod moves;
mod serve;
mod store;

pub(in crate::host) use moves::MovedBack;
pub(in crate::host) use serve::Rpc;
pub(in crate::host) use store::{LocalObject, Moving, UnlockOnDrop};

use super::ticket::Guard;
use super::HostId;
use super::{Host, Shared};
use crate::backoff::Backoff;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::limits::ACCESSOR_BYTES;
use crate::replica::Index;
use crate::sync::{AtomicPtr, AtomicU8, AtomicUsize, Mutex, Ordering};

/// The RPC that asks a host to move an object from its DRAM back to CXL.
pub(in crate::host) const OP_MOVE_BACK: u8 = 1;
/// Answers: moved back; not held here (already back, or never was); failed (a log
/// append); named as held here but missing (an earlier move's append failed); the
/// server's life is over (answered by its recovery, or by a server that found it was
/// declared dead: its recovery hands the object back to CXL, and the id may hold it again
/// in a next life, so the sender looks again); busy (a writer of the holder's has the
/// object: the sender asks again, within its own wait limit, rather than the server
/// waiting with its ring, maybe on its pump).
pub(in crate::host) const MOVED_BACK: u8 = 1;
pub(in crate::host) const NOT_HERE: u8 = 2;
pub(in crate::host) const FAILED: u8 = 3;
pub(in crate::host) const MISSING: u8 = 4;
pub(in crate::host) const SERVER_GONE: u8 = 5;
pub(in crate::host) const BUSY: u8 = 6;
/// A `FAILED` answer's detail: why the move back failed (every other answer's is 0).
pub(in crate::host) const FAILED_OTHER: u64 = 0;
pub(in crate::host) const FAILED_LOG_FULL: u64 = 1;
pub(in crate::host) const FAILED_REPLAY_STALLED: u64 = 2;

/// The detail a `FAILED` answer gives for `error`.
pub(in crate::host) fn failure_detail(error: &crate::Error) -> u64 {
    match error {
        crate::Error::LogFull { .. } => FAILED_LOG_FULL,
        crate::Error::ReplayStalled { .. } => FAILED_REPLAY_STALLED,
        _ => FAILED_OTHER,
    }
}

/// What a `FAILED` answer's `detail` says of its cause.
pub(in crate::host) fn failure_cause(detail: u64) -> &'static str {
    match detail {
        FAILED_LOG_FULL => "the log is full",
        FAILED_REPLAY_STALLED => "a replay stalled on an unpublished entry",
        _ => "another error",
    }
}

/// Times the consecutive accesses a move needs double for an object that other hosts
/// keep asking back, at most: past [`u8::MAX`] accesses (a streak's largest count) the
/// object never moves again.
pub(in crate::host) const MAX_BOUNCE_DOUBLINGS: u8 = 8;

/// A local object's state: this host holds it.
pub(in crate::host) const HELD: u8 = 0;
/// The bytes are in the CXL slot and the move back is on its way to the log: reads may go
/// on, writes wait until the object is in CXL.
pub(in crate::host) const LEAVING: u8 = 1;
/// A move whose log append failed: its entry may be in the log and apply later (the
/// index then names this host), but the record was let go meanwhile, so the bytes may be
/// older than CXL's. Never read nor written here. Once the index names this host, nobody
/// writes the object in CXL any more (every access goes to this host, which answers by
/// moving it back), so the bytes in CXL are its current ones: moving it back appends
/// `MoveToCxl` without writing the stale bytes (as for a leaving object).
pub(in crate::host) const ORPHANED: u8 = 2;
/// Put in the partition before its `MoveToHost` is appended, until the mover knows the
/// append's outcome: once a replica applies the event this host's threads find the
/// object, but if the mover then learns nothing (an error), it orphans the object, whose
/// bytes are never written back to CXL. So reads may go on (the bytes are CXL's: the
/// mover holds the record's lock, and an object without a record is written by nobody
/// before an alloc, which would make the move lose), and writes wait until the mover
/// says `HELD`.
pub(in crate::host) const ARRIVING: u8 = 3;
/// An orphan whose move applied after all (the index named this host) and whose move
/// back has been appended: read and written nowhere, as an orphan; once a `MoveToCxl` of
/// it applied, a leftover that a move here may take out, as a leaving object.
pub(in crate::host) const ORPHAN_LEAVING: u8 = 4;

/// What one host keeps in its DRAM for partitions and copies: per slot, so that the hot
/// path takes no lock of its own and hashes nothing (the index lookup found the slot).
///
/// Both arrays hold owning pointers (null: none). A reference to a copy is taken only
/// under the index's read lock (the `&Index` of [`Local::copy`]), and a copy is freed only
/// under its write lock (replay's `&mut Index`) or with the host. A reference to an object
/// of the partition is taken either under the index's read lock once that index says this
/// host holds the object, or by the thread holding [`Local::moving`] (both by
/// [`Local::object`]); a local writer keeps its reference past the index's read lock
/// while it holds the object's lock and the object is `HELD` (`write_local`). Only the
/// thread holding `moving` frees one, and only once no index lock holder can reach it:
/// after an applied event says the object is not here (its `MoveToCxl`, appended by a
/// move back holding the object's lock after it marked it leaving, or the loss of its
/// `MoveToHost`). An object whose move's append failed is never freed before the host
/// goes (it is orphaned, or leaving).
pub(in crate::host) struct Local {
    pub(in crate::host) partition_after: u8,
    pub(in crate::host) copy_after: u8,
    /// Bytes of every object (the slot size).
    pub(in crate::host) object_bytes: usize,
    pub(in crate::host) partition: Box<[AtomicPtr<LocalObject>]>,
    pub(in crate::host) in_partition: AtomicUsize,
    pub(in crate::host) copies: Box<[AtomicPtr<u8>]>,
    pub(in crate::host) copies_held: AtomicUsize,
    /// Per slot: this host's consecutive accesses (partitions).
    pub(in crate::host) streaks: Box<[AtomicU8]>,
    /// Per slot: how many times other hosts asked this host to move the object back. The
    /// accessor word in LNR counts them for every host, but sloppily (another host's
    /// write-back of the line can put an older count back); this count is exact, and the
    /// policy takes the larger.
    pub(in crate::host) bounces: Box<[AtomicU8]>,
    /// Per slot: this host's reads since the object last changed (copies).
    pub(in crate::host) reads: Box<[AtomicU8]>,
    /// One move (to or from this host) at a time; only its holder frees an object of
    /// the partition.
    pub(in crate::host) moving: Mutex<Moving>,
}

fn per_slot<T>(on: bool, slots: u64, new: impl Fn() -> T) -> Box<[T]> {
    let len = if on { slots as usize } else { 0 };
    (0..len).map(|_| new()).collect()
}

impl Local {
    /// The host's local state for a pod with `slots` slots of `object_bytes`, if either
    /// option is on.
    pub(in crate::host) fn new(
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
    pub(in crate::host) fn sizes(&self) -> (usize, usize) {
        (
            self.in_partition.load(Ordering::Relaxed),
            self.copies_held.load(Ordering::Relaxed),
        )
    }
}

/// Adds one to a per-slot count (only this host's threads write it; a lost count is
/// harmless).
pub(in crate::host) fn bump(count: &AtomicU8) -> u8 {
    let next = count.load(Ordering::Relaxed).saturating_add(1);
    count.store(next, Ordering::Relaxed);
    next
}

impl Host {
    /// Bytes [`Host::read_prefix`] copies before it asks how many it needs.
    pub const FIRST_READ_BYTES: usize = 64;
}

/// Where an object is, as this host's replica says under its read lock.
pub(in crate::host) enum Found<'i> {
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
    pub(in crate::host) fn find<'i>(
        &self,
        local: &'i Local,
        index: &'i Index,
        key: &[u8],
    ) -> Result<Found<'i>> {
        let Some(entry) = index.lookup(key) else {
            return Err(Error::UnknownKey);
        };
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

    /// Waits a little for a local writer (bounded by the wait limit, as a wait for a
    /// writer in CXL is).
    pub(in crate::host) fn wait_for_local_writer(
        &self,
        backoff: &mut Option<Backoff>,
    ) -> Result<()> {
        Backoff::snooze_or(backoff, self.options.wait_limit, |waited_ms| {
            Error::LocalObjectBusy {
                host: self.id,
                waited_ms,
            }
        })
    }

    /// Looks `key` up (after the tail check) and reads it if it is in this host's DRAM:
    /// in its partition, or a copy. Under the index's read lock throughout: no event
    /// about the object is applied meanwhile.
    pub(in crate::host) fn read_local(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut dyn FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<Place<usize>> {
        self.catch_up()?;
        let index = self.replica.read();
        Ok(match self.find(local, &index, key)? {
            Found::Mine(object) => {
                if matches!(
                    object.state.load(Ordering::Acquire),
                    ORPHANED | ORPHAN_LEAVING
                ) {
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
    /// not leaving, changes it there with `change` (taken), holding the object's lock but
    /// not the index: this host's replay (and with it its pump's heartbeat, and every
    /// other thread's tail check) goes on while an `update`'s closure runs.
    pub(in crate::host) fn write_local<R>(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
        change: &mut Option<impl FnOnce(Target<'_>) -> R>,
    ) -> Result<Place<R>> {
        self.catch_up()?;
        let index = self.replica.read();
        let object = match self.find(local, &index, key)? {
            Found::Mine(object) => object,
            Found::Held(owner) => return Ok(Place::Held(owner)),
            Found::Copy(_) | Found::Cxl => return Ok(Place::Cxl),
        };
        // Another writer of this host has it (an `update` may hold it for as long as its
        // closure runs): wait within the wait limit, holding nothing.
        if !object.try_lock() {
            c.add(Counter::WaitsForWriter, 1);
            return Ok(Place::Wait);
        }
        // SAFETY: the index's read lock keeps the object until `index` is dropped below,
        // once the object is known to be HELD; from there its lock, which this thread
        // holds until `_unlock` drops, keeps it. A HELD object leaves the partition only
        // by a move back, which takes its lock first (`move_back`), and its state leaves
        // HELD only under that lock; every other removal takes an object that is
        // arriving, leaving or orphaned.
        let object: &LocalObject = unsafe { &*std::ptr::from_ref(object) };
        // Unlocked on every way out, a panic of `change` included.
        let _unlock = UnlockOnDrop(object);
        match object.state.load(Ordering::Relaxed) {
            HELD => {}
            LEAVING => return Ok(Place::Retry),
            ARRIVING => return Ok(Place::Wait),
            // Orphaned: see `read_local`.
            _ => return Ok(Place::Held(self.id)),
        }
        drop(index);
        let mut bytes = object.bytes(local.object_bytes);
        let change = change.take().expect("called once");
        let result = change(Target::Dram(&mut bytes));
        // This host may have been declared dead meanwhile (a process paused past its
        // lease): its recovery hands the object back to CXL as it was when it moved here,
        // and this write is lost. It is not reported done, nor stored (this host's own
        // reads would see it until its death applies here).
        self.holds_its_row()?;
        object.store(&bytes);
        c.add(Counter::LocalWrites, 1);
        c.add(Counter::Writes, 1);
        Ok(Place::Done(result))
    }

    /// The policies, after an access through CXL: count it towards a move to this host
    /// (partitions) and, for a read of a read-shared object (`guard` is the log), towards
    /// a copy. Best effort: the access is done, and a policy that fails (a full log, a
    /// busy record) only leaves the object where it is.
    pub(in crate::host) fn after_cxl_access(
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
    /// Sloppy on purpose: two hosts may write the word at once, and one's byte wins; the
    /// policy only needs a hint. But one the next host's access sees: its store is fenced
    /// (without, it may still be in flight when the other host looks, which then counts a
    /// streak of its own that never was, and moves the object).
    pub(in crate::host) fn note_access(
        &self,
        local: &Local,
        slot: u64,
        c: &ThreadCounters,
    ) -> (u8, u8) {
        let offset = self.pod.layout().accessor_offset(slot);
        let me = u8::try_from(self.id + 1).expect("host ids fit a byte");
        let [last, bounces] = self.accessor_word(offset, c);
        let streak = &local.streaks[slot as usize];
        if last == me {
            (bump(streak), bounces)
        } else {
            // A byte-masked store straight to memory: the accessor bytes of the other
            // objects in the line stay as their hosts stored them.
            self.memory.write_non_temporal(offset, &[me]);
            self.memory.fence();
            c.add(Counter::LinesWrittenBack, 1);
            streak.store(1, Ordering::Relaxed);
            (1, bounces)
        }
    }

    /// The accessor word at `offset`, read from memory.
    pub(in crate::host) fn accessor_word(
        &self,
        offset: u64,
        c: &ThreadCounters,
    ) -> [u8; ACCESSOR_BYTES as usize] {
        let mut word = [0u8; ACCESSOR_BYTES as usize];
        self.memory.flush(offset, word.len());
        self.memory.fence();
        c.add(Counter::LinesInvalidated, 1);
        self.memory.read(offset, &mut word);
        word
    }

    /// Counts a bounce of the object in `slot` (another host asked it back) in its
    /// accessor word, for every host's policy.
    pub(in crate::host) fn note_bounce(&self, slot: u64, c: &ThreadCounters) {
        let offset = self.pod.layout().accessor_offset(slot);
        let [_, bounces] = self.accessor_word(offset, c);
        self.memory
            .write_non_temporal(offset + 1, &[bounces.saturating_add(1)]);
        self.memory.fence();
        c.add(Counter::LinesWrittenBack, 1);
    }

    /// Starts the accessor word of a new object in `slot` afresh (a creator, before its
    /// create event): no last accessor, no bounces.
    pub(in crate::host) fn clear_accessor(&self, slot: u64) {
        if self.local.as_ref().is_some_and(|l| l.partition_after > 0) {
            let offset = self.pod.layout().accessor_offset(slot);
            self.memory
                .write_non_temporal(offset, &[0; ACCESSOR_BYTES as usize]);
        }
    }
}

/// What a read or write found when it looked the key up, or did.
pub(in crate::host) enum Place<R> {
    /// Done in this host's DRAM (its partition, or a copy): the result.
    Done(R),
    /// In this host's partition, but a write overlapped the read, or the object is on
    /// its way back to CXL (a write): wait a little, try again.
    Retry,
    /// In this host's partition, its move here not settled yet, or another writer of
    /// this host holding it (a write): wait a little, try again.
    Wait,
    /// In another host's DRAM.
    Held(HostId),
    /// In its CXL slot.
    Cxl,
}
