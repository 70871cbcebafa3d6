//! The replica: one host's copy of the index, in its own DRAM, changed only by replay.
//!
//! The index maps a key to its object: slot, record (if read-write-shared), stamp (log
//! position of the last event about it) and this host's host counter (the record counter
//! it last read validly, or unknown).
//!
//! Memory matters here: every host holds every object. Entries live in a chunked arena
//! of 64-bit words (three words of fields, then the key, padded to a word), and the hash
//! table (`table.rs`) holds an 8-byte word per bucket: a tag of the key's hash, a handle
//! into the arena and the object's slot (so that a read's copy need not wait for the
//! arena record). With 24-byte keys an object costs 48 arena bytes plus 8 table bytes per
//! bucket; `docs/log.md` has the measurement.
//!
//! Arena record (64-bit words, little-endian packing of the key):
//!
//! | word | field |
//! | --- | --- |
//! | 0 | stamp |
//! | 1 | slot (low half), record id or `NO_RECORD` (high half) |
//! | 2 | host counter (low half; `UNKNOWN_COUNTER` or a counter), key length (bits 32..48), local owner + 1 (48..64; 0: in its CXL slot) |
//! | 3.. | key bytes, eight per word, zero-padded |
//!
//! Only the host counter is written under the read lock (by readers, after checking the
//! stamp); they rewrite word 2 whole, with the key length and owner they read from it,
//! which only the write lock changes.
//!
//! Readers need no lock in the common case. The table and the arena are atomic words
//! that never move while the replica lives ([`View`]), and replay, which changes them
//! under the write lock, makes the replica's `version` odd while it does (a seqlock).
//! A reader reads the version, looks up, and reads the version again: if it was even and
//! did not change, no replay overlapped the lookup, and what it read is what it would
//! have read under the read lock. Otherwise it does it again under the read lock.
//! Writing the host counter still takes the read lock (a reader must not rewrite word 2
//! while replay changes it); a read whose counter is already known writes nothing.
//! A replay that panics half-way leaves the version odd: readers without the lock never
//! trust the index again, and the locked paths panic rather than answer from it (the
//! replica is poisoned; the host must be dropped and join again).
//!
//! In a pod with [`Coherence::AllLog`](crate::Coherence::AllLog) a record has one more word after the key: the
//! object's replicated lock, its counter (low half) and its holder + 1 (bits 32..40; 0:
//! unlocked), changed only by replaying `Lock` and `Unlock` events. Split pods do not
//! have the word, so their records, lookups and memory per object are unchanged.

use std::sync::Arc;

use crate::ids::HostId;
use crate::sync::{fence, AtomicU64, Ordering, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod apply;
mod arena;
mod index;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

pub use apply::Outcome;
pub(crate) use index::{Index, View};
pub use index::{IndexEntry, ReplicatedLock};

/// One host's replica: the index, how far it has applied the log, and the replayer's
/// state (one replayer at a time).
pub(crate) struct Replica {
    /// Taken for writing only through [`Replica::write`], which keeps `version`.
    index: RwLock<Index>,
    /// The index's lock-free side.
    view: Arc<View>,
    /// Odd while replay changes the index (see the module's docs).
    version: AtomicU64,
    /// Log positions below this are applied (this host's copy of its `ltail`).
    pub(crate) applied: crate::sync::AtomicU64,
    pub(crate) replay: crate::sync::Mutex<ReplayState>,
    /// Outcomes of this host's own entries, by position, until its appender takes them:
    /// each is here before `applied` passes its position, so an appender that sees it
    /// passed takes its outcome without the replay lock (which a sibling may hold up to
    /// the wait limit, its replay waiting on a hole past it). Taken after the replay
    /// lock when both are.
    pub(crate) outcomes: crate::sync::Mutex<std::collections::HashMap<u64, Outcome>>,
}

/// What the replayer keeps between rounds.
#[derive(Debug)]
pub(crate) struct ReplayState {
    /// One entry's bytes.
    pub(crate) entry: Vec<u8>,
    /// Slots this host must grant: `(to, count)`.
    pub(crate) grants: Vec<(HostId, u64)>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

/// The index, locked for replay: the replica's version is odd until it drops.
pub(crate) struct IndexWrite<'a> {
    guard: RwLockWriteGuard<'a, Index>,
    version: &'a AtomicU64,
    odd: u64,
    /// Whether the thread was already unwinding when the guard was taken (a ticket's
    /// drop during a panic may replay): only a panic under the guard poisons.
    unwinding: bool,
    /// Ended by [`IndexWrite::finish`], its taker's way out.
    finished: bool,
}

impl IndexWrite<'_> {
    /// The way out of a guard taken by [`Replica::write_to_finish`]: the index is whole.
    pub(crate) fn finish(mut self) {
        self.finished = true;
    }
}

impl std::ops::Deref for IndexWrite<'_> {
    type Target = Index;
    fn deref(&self) -> &Index {
        &self.guard
    }
}

impl std::ops::DerefMut for IndexWrite<'_> {
    fn deref_mut(&mut self) -> &mut Index {
        &mut self.guard
    }
}

impl Drop for IndexWrite<'_> {
    fn drop(&mut self) {
        // A panic under the guard (a bug, or no memory for a table that grows) may have
        // left the index half-changed: the version stays odd, so that no reader trusts
        // it again (see `Replica::poisoned`).
        if std::thread::panicking() && !self.unwinding && !self.finished {
            return;
        }
        // Release: a reader that reads this even version reads every change made under
        // the guard. (The guard's own unlock follows.)
        if !crate::mutants::skipped(crate::mutants::Step::ReplicaVersionKept) {
            self.version.store(self.odd + 1, Ordering::Release);
        }
    }
}

impl Replica {
    pub(crate) fn new(index: Index, entry_bytes: usize) -> Self {
        Self {
            view: Arc::clone(index.view()),
            version: AtomicU64::new(0),
            index: RwLock::new(index),
            applied: crate::sync::AtomicU64::new(0),
            replay: crate::sync::Mutex::new(ReplayState {
                entry: vec![0; entry_bytes],
                grants: Vec::new(),
            }),
            outcomes: crate::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The index for replay (or anything that changes it): readers without the lock
    /// learn of it from the version.
    pub(crate) fn write(&self) -> IndexWrite<'_> {
        self.write_unwinding(std::thread::panicking())
    }

    /// [`Replica::write`] for a taker whose one way out is [`IndexWrite::finish`] (a
    /// replay): dropped without it while the thread panics, the guard poisons even if
    /// it was taken while the thread already unwound (a call made from a drop during a
    /// panic): that drop is a panic under the guard. (Spared, a replay cut short between
    /// two entries that way left the index even, its position not moved past what it
    /// had applied: the next replay applied those entries again, and a create of this
    /// host's own, applied twice, lost the second time and gave its slot back, which
    /// the host's next create took: two objects in one slot on every host.)
    pub(crate) fn write_to_finish(&self) -> IndexWrite<'_> {
        self.write_unwinding(false)
    }

    /// [`Replica::write`], `unwinding` saying whether a drop while the thread panics is
    /// not a panic under the guard.
    fn write_unwinding(&self, unwinding: bool) -> IndexWrite<'_> {
        let guard = self.index.write();
        // Writers are serialized by the lock: a load and a store make the version odd.
        let even = self.version.load(Ordering::Relaxed);
        Self::poisoned(even);
        let odd = even + 1;
        if !crate::mutants::skipped(crate::mutants::Step::ReplicaVersionKept) {
            self.version.store(odd, Ordering::Relaxed);
        }
        // The odd version is ordered before every change under the guard: a reader that
        // sees one of them sees (after its own Acquire fence) a version that moved.
        fence(Ordering::Release);
        IndexWrite {
            guard,
            version: &self.version,
            odd,
            unwinding,
            finished: false,
        }
    }

    /// The record width the index is at now.
    pub(crate) fn shape(&self) -> crate::record::RecordShape {
        self.view.shape()
    }

    /// The index for reading, under the read lock.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Index> {
        let index = self.index.read();
        Self::poisoned(self.version.load(Ordering::Acquire));
        index
    }

    /// Whether a replay panicked half-way (see [`Replica::poisoned`]).
    pub(crate) fn is_poisoned(&self) -> bool {
        let _index = self.index.read();
        self.version.load(Ordering::Acquire) & 1 == 1
    }

    /// Panics if `version`, loaded under the index's lock, is odd: no replay holds the
    /// write lock, so the last one panicked half-way and left the index as it was then.
    /// No answer from it can be trusted, and the host cannot go on (as with a poisoned
    /// `std::sync::Mutex`): drop it and join again (a dead host's locks are recovered).
    #[track_caller]
    fn poisoned(version: u64) {
        assert!(
            version & 1 == 0,
            "this host's replica was left half-changed by a panic during its replay; \
             drop the host and join again"
        );
    }

    /// `hint` run on the index without the lock and without the version: for work whose
    /// outcome no answer depends on (asking the cache for lines a lookup will load).
    /// `hint` may see a torn index and must only read.
    #[inline]
    pub(crate) fn hint(&self, hint: impl FnOnce(&View)) {
        hint(&self.view)
    }

    /// `look` run on the index without the lock: `Some` of its answer if no replay
    /// overlapped it, `None` if one did (the caller then asks under the read lock).
    /// `look` may see a torn index and must only read: no answer it gives is used unless
    /// the version says the index did not change.
    #[inline]
    pub(crate) fn optimistic<R>(&self, look: impl FnOnce(&View) -> R) -> Option<(R, u64)> {
        // Acquire: pairs with `IndexWrite::drop`'s Release (the changes of the replay
        // that made this version).
        let before = self.version.load(Ordering::Acquire);
        if before & 1 == 1 {
            return None;
        }
        let answer = look(&self.view);
        // The lookup's loads happen before the version's second load.
        fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == before).then_some((answer, before))
    }

    /// The index under the read lock, and its version: even, and the index's while the
    /// lock is held (a replay changes both under the write lock).
    pub(crate) fn read_versioned(&self) -> (RwLockReadGuard<'_, Index>, u64) {
        let index = self.index.read();
        let version = self.version.load(Ordering::Acquire);
        Self::poisoned(version);
        (index, version)
    }

    /// Whether the index is still at `version` (an even one an answer was read at): no
    /// replay has changed it, or begun to, since. Acquire: a caller that saw a replay's
    /// effect elsewhere (its `applied` position, say) sees the version that replay moved.
    #[inline]
    pub(crate) fn unchanged_since(&self, version: u64) -> bool {
        self.version.load(Ordering::Acquire) == version
    }
}
