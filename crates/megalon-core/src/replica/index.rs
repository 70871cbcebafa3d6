//! The index of one host: key to object, over the arena, with the lookups readers make
//! and the changes replay makes.

use std::hash::BuildHasher;

use std::sync::Arc;

use super::arena::{
    key_word, key_words, meta_word, owner_of, Arena, IndexHasher, Words, FIELD_WORDS, META, PLACE,
    STAMP, UNKNOWN_COUNTER,
};
use super::table::Table;
use crate::slot::SlotAccounting;

use crate::config::Coherence;
use crate::event::NO_RECORD;
use crate::ids::HostId;
use crate::record::RecordShape;
use crate::sync::Ordering;
/// An object's lock and counter as the log replicates them, in a pod with
/// [`Coherence::AllLog`]: what a coherence record holds in a split pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicatedLock {
    /// The host that holds the lock (a write or a delete in progress), if one does.
    pub holder: Option<HostId>,
    /// The object's counter: 0 when created, 2 more after every write. It wraps around
    /// harmlessly: every other host's `Lock` and `Unlock` makes a host's host counter
    /// unknown, so an old value never passes for a current one.
    pub counter: u32,
}

impl ReplicatedLock {
    pub(super) fn from_word(word: u64) -> Self {
        Self {
            holder: match (word >> 32) & 0xff {
                0 => None,
                holder => Some(holder as HostId - 1),
            },
            counter: word as u32,
        }
    }

    pub(super) fn word(self) -> u64 {
        let holder = self.holder.map_or(0, |host| u64::from(host) + 1);
        u64::from(self.counter) | holder << 32
    }
}

/// One object as this host's replica knows it, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// Where its bytes are.
    pub slot: u64,
    /// Its coherence record, if it is read-write-shared.
    pub record: Option<u32>,
    /// Log position of the last event about it.
    pub stamp: u64,
    /// The record counter this host last read validly, or `None` (unknown).
    pub host_counter: Option<u32>,
    /// The host whose local DRAM holds the object, or `None` if it is in its CXL slot.
    pub local_owner: Option<HostId>,
    /// Where the entry lives in the arena (valid until the next replay).
    pub(crate) handle: u32,
}

/// The part of the index a reader may read without the replica's lock: the table and
/// the arena's words, all atomics (see the replica's seqlock in `mod.rs`).
#[derive(Default)]
pub(crate) struct View {
    pub(super) table: Table,
    pub(super) words: Words,
    pub(super) hasher: IndexHasher,
    /// The record width the index is at ([`RecordShape::word`]): the record ids its
    /// entries name are of it. Changed by replay with the entries, under the seqlock.
    pub(super) shape: crate::sync::AtomicU64,
}

impl View {
    /// The record width the index is at: read within the same look as an entry, the
    /// width of the record the entry names.
    #[inline]
    pub(crate) fn shape(&self) -> RecordShape {
        RecordShape::from_word(self.shape.load(Ordering::Relaxed))
    }

    #[inline]
    pub(super) fn entry(&self, handle: u32) -> IndexEntry {
        let record = self.words.record(handle);
        let place = record[PLACE].load(Ordering::Relaxed);
        let meta = record[META].load(Ordering::Relaxed);
        let counter = meta as u32;
        let record_id = (place >> 32) as u32;
        IndexEntry {
            slot: place & 0xffff_ffff,
            record: (record_id != NO_RECORD).then_some(record_id),
            stamp: record[STAMP].load(Ordering::Relaxed),
            host_counter: (counter != UNKNOWN_COUNTER).then_some(counter),
            local_owner: owner_of(meta),
            handle,
        }
    }

    #[inline]
    pub(super) fn find(&self, key: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |handle| self.words.key_equals(handle, key))
    }

    /// The hash the index files `key` under.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Starts loading, without waiting, the home buckets of the keys hashed `hashes`:
    /// what their lookups wait on first. A hint; no answer depends on it.
    pub(crate) fn prefetch_buckets(&self, hashes: &[u64]) {
        self.table.prefetch_homes(hashes);
    }

    /// Starts loading, without waiting, the index records the home buckets of `hashes`
    /// point at (with keys of `key_lens`): what the lookups wait on next, once the
    /// buckets are in. A hint read without checks; no answer depends on it.
    pub(crate) fn prefetch_records(&self, hashes: &[u64], key_lens: &[usize]) {
        self.table
            .home_handles(hashes, |i, handle| self.words.prefetch(handle, key_lens[i]));
    }

    /// The entry of `key`, if the object exists.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<IndexEntry> {
        let (handle, slot) = self.find_placed(key)?;
        Some(self.entry_at(handle, slot))
    }

    /// The handle of `key`'s entry and the slot its bucket holds.
    #[inline]
    fn find_placed(&self, key: &[u8]) -> Option<(u32, u32)> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find_placed(hash, |handle| self.words.key_equals(handle, key))
    }

    /// The entry behind `handle`, its slot `slot` as its bucket holds it: a copy of the
    /// object may start once the bucket is in, before the record is.
    #[inline]
    fn entry_at(&self, handle: u32, slot: u32) -> IndexEntry {
        IndexEntry {
            slot: u64::from(slot),
            ..self.entry(handle)
        }
    }

    /// The entry of `key` with its replicated lock, in a pod with [`Coherence::AllLog`].
    /// Safe without the replica's lock, as [`lookup`](Self::lookup) is: the lock word is
    /// found after the key `find` matched (not by a key length read again), and a word
    /// past the record's chunk, which only a look racing replay meets, reads as 0; the
    /// caller's version check throws such an answer away.
    #[inline]
    pub(crate) fn lookup_locked(&self, key: &[u8]) -> Option<(IndexEntry, ReplicatedLock)> {
        let (handle, slot) = self.find_placed(key)?;
        let at = FIELD_WORDS + key_words(key.len());
        let lock = self
            .words
            .try_record(handle)
            .and_then(|record| record.get(at))
            .map_or(0, |word| word.load(Ordering::Relaxed));
        Some((self.entry_at(handle, slot), ReplicatedLock::from_word(lock)))
    }

    /// The entry behind `handle` if it still holds the object stamped `stamp` (no event
    /// about it since): what a read checks at its end.
    #[inline]
    pub(crate) fn current(&self, handle: u32, stamp: u64) -> Option<IndexEntry> {
        (self.words.get(handle, STAMP) == stamp).then(|| self.entry(handle))
    }
}

/// The index of one host: the view readers share (its lookups are the index's, through
/// `Deref`), and what only replay needs.
pub(crate) struct Index {
    pub(super) view: Arc<View>,
    pub(super) arena: Arena,
    pub(super) slot_count: u64,
    /// Bytes of the pod's record array: what a width switch divides anew. (The current
    /// width is the view's, [`View::shape`].)
    pub(super) records_bytes: u64,
    pub(super) max_hosts: u32,
    /// The longest key the pod takes: a snapshot's key past it is damage.
    pub(super) max_key_bytes: u32,
    /// Whether the pod's coherence is [`Coherence::AllLog`]: records carry the replicated
    /// lock word after the key.
    pub(super) all_log: bool,
    /// Words after the key in every record: 1 (the lock word) with AllLog, else 0.
    pub(super) lock_words: usize,
    /// Record id to the handle of the object it belongs to: the reclaimer samples records
    /// in the SCR and needs to know whose they are.
    pub(super) record_owners: hashbrown::HashMap<u32, u32>,
    pub(crate) slots: SlotAccounting,
    /// The slots of the objects the last `HostDead` (or `HostJoined`, `HostLeft`) applied handed back
    /// to CXL from the gone host's DRAM: the replayer drops every host's cached lines of
    /// them.
    pub(crate) handed_back: Vec<u64>,
}

impl std::ops::Deref for Index {
    type Target = View;
    fn deref(&self) -> &View {
        &self.view
    }
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("objects", &self.len())
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Index {
    /// An empty index of a pod of `slot_count` slots and a record array of
    /// `records_bytes` at `shape`.
    pub(crate) fn new(
        slot_count: u64,
        records_bytes: u64,
        shape: RecordShape,
        max_hosts: u32,
        max_key_bytes: u32,
        coherence: Coherence,
    ) -> Self {
        let all_log = coherence == Coherence::AllLog;
        let view = View::default();
        view.shape.store(shape.word(), Ordering::Relaxed);
        Self {
            all_log,
            lock_words: usize::from(all_log),
            view: Arc::new(view),
            arena: Arena::default(),
            slot_count,
            records_bytes,
            max_hosts,
            max_key_bytes,
            record_owners: hashbrown::HashMap::new(),
            slots: SlotAccounting::new(slot_count, max_hosts),
            handed_back: Vec::new(),
        }
    }

    /// An empty index with `record_count` records of 32 bits, of a pod that takes keys
    /// as long as any (tests).
    #[cfg(test)]
    pub(crate) fn with_records(
        slot_count: u64,
        record_count: u64,
        max_hosts: u32,
        coherence: Coherence,
    ) -> Self {
        let shape = RecordShape { epoch: 0, bits: 32 };
        let max_key_bytes = crate::limits::MAX_KEY_BYTES_LIMIT;
        Self::new(
            slot_count,
            record_count * 4,
            shape,
            max_hosts,
            max_key_bytes,
            coherence,
        )
    }

    /// Records at the current width.
    pub(crate) fn record_count(&self) -> u64 {
        self.shape().count_in(self.records_bytes)
    }

    /// Moves the index to the record width `shape` (replay, or a snapshot's decode): the
    /// view's, which readers read under the seqlock with the entries.
    pub(super) fn set_shape(&mut self, shape: RecordShape) {
        self.view.shape.store(shape.word(), Ordering::Relaxed);
    }

    /// The key of the object that owns `record` in this replica.
    pub(crate) fn record_owner_key(&self, record: u32) -> Option<Vec<u8>> {
        let handle = *self.record_owners.get(&record)?;
        Some(self.key_of(handle))
    }

    /// Whether any object is named as held in `host`'s DRAM (a scan of the index).
    pub(crate) fn holds_any(&self, host: HostId) -> bool {
        (self.view.table.handles().into_iter())
            .any(|handle| owner_of(self.words.get(handle, META)) == Some(host))
    }

    /// Every record an object has.
    pub(crate) fn records_owned(&self) -> impl Iterator<Item = u32> + '_ {
        self.record_owners.keys().copied()
    }

    /// The slot of every object.
    pub(crate) fn slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.view
            .table
            .handles()
            .into_iter()
            .map(|handle| self.slot_of(handle))
    }

    /// The key of the object behind `handle`.
    pub(crate) fn key_of(&self, handle: u32) -> Vec<u8> {
        let mut buf = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
        self.words.key_into(handle, &mut buf).to_vec()
    }

    /// Objects in the index.
    pub(crate) fn len(&self) -> u64 {
        self.view.table.len() as u64
    }

    /// The view readers share with this index.
    pub(crate) fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// The replicated lock of the object behind `handle` ([`Coherence::AllLog`] only).
    #[inline]
    pub(crate) fn replicated_lock(&self, handle: u32) -> ReplicatedLock {
        debug_assert!(self.all_log, "only AllLog records have a lock word");
        let at = FIELD_WORDS + key_words(self.words.key_len(handle));
        ReplicatedLock::from_word(self.words.get(handle, at))
    }

    pub(super) fn set_replicated_lock(&self, handle: u32, lock: ReplicatedLock) {
        let at = FIELD_WORDS + key_words(self.words.key_len(handle));
        self.words.set(handle, at, lock.word());
    }

    /// Stores this host's host counter for the object behind `handle` (under the read
    /// lock, after checking with [`View::current`] that it is still the same object).
    pub(crate) fn set_host_counter(&self, handle: u32, counter: Option<u32>) {
        let meta = self.words.get(handle, META);
        let key_len = (meta >> 32 & 0xffff) as usize;
        let counter = counter.unwrap_or(UNKNOWN_COUNTER);
        self.words
            .set(handle, META, meta_word(counter, key_len, owner_of(meta)));
    }

    pub(super) fn set_owner(&self, handle: u32, owner: Option<HostId>) {
        let meta = self.words.get(handle, META);
        let key_len = (meta >> 32 & 0xffff) as usize;
        self.words
            .set(handle, META, meta_word(meta as u32, key_len, owner));
    }

    pub(super) fn set_record(&self, handle: u32, record: u32) {
        let slot = self.words.get(handle, PLACE) & 0xffff_ffff;
        self.words
            .set(handle, PLACE, slot | u64::from(record) << 32);
    }

    pub(super) fn record_of(&self, handle: u32) -> u32 {
        (self.words.get(handle, PLACE) >> 32) as u32
    }

    pub(super) fn slot_of(&self, handle: u32) -> u64 {
        self.words.get(handle, PLACE) & 0xffff_ffff
    }

    pub(super) fn insert(&mut self, key: &[u8], slot: u64, stamp: u64) {
        let len = FIELD_WORDS + key_words(key.len()) + self.lock_words;
        let handle = self.arena.allocate(&self.view.words, len);
        self.words.set(handle, STAMP, stamp);
        self.words
            .set(handle, PLACE, slot | u64::from(NO_RECORD) << 32);
        self.words
            .set(handle, META, meta_word(UNKNOWN_COUNTER, key.len(), None));
        for i in 0..key_words(key.len()) {
            self.words.set(handle, FIELD_WORDS + i, key_word(key, i));
        }
        if self.all_log {
            // Unlocked, counter 0 (the arena record may be a reused one).
            self.set_replicated_lock(
                handle,
                ReplicatedLock {
                    holder: None,
                    counter: 0,
                },
            );
        }
        let view = &*self.view;
        let hash = view.hasher.hash_one(key);
        // Slots are 32-bit: the layout refuses more than `MAX_SLOTS`.
        let slot = u32::try_from(slot).expect("a 32-bit slot");
        view.table.insert(hash, handle, slot, |other| {
            // Growth places every entry anew, from its key in the arena.
            let mut bytes = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
            view.hasher.hash_one(view.words.key_into(other, &mut bytes))
        });
    }

    pub(super) fn remove(&mut self, key: &[u8]) -> Option<IndexEntry> {
        let view = &*self.view;
        let hash = view.hasher.hash_one(key);
        let handle = view
            .table
            .remove(hash, |handle| view.words.key_equals(handle, key))?;
        let entry = self.entry(handle);
        // Poison the stamp so a stale handle never matches `current` again.
        self.words.set(handle, STAMP, u64::MAX);
        self.arena
            .release(handle, FIELD_WORDS + key_words(key.len()) + self.lock_words);
        Some(entry)
    }

    /// Marks an event about the object at `handle`: new stamp, host counter unknown.
    pub(super) fn touch(&self, handle: u32, stamp: u64) {
        self.words.set(handle, STAMP, stamp);
        self.set_host_counter(handle, None);
    }

    /// Every object, sorted by key: for tests and inspection.
    pub(crate) fn snapshot(&self) -> Vec<(Vec<u8>, IndexEntry)> {
        let mut buf = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
        let mut out: Vec<(Vec<u8>, IndexEntry)> = self
            .view
            .table
            .handles()
            .into_iter()
            .map(|handle| {
                (
                    self.words.key_into(handle, &mut buf).to_vec(),
                    self.entry(handle),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Bytes of DRAM the index holds: the table, the arena and the free lists.
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.view.table.heap_bytes()
            + self.arena.heap_bytes()
            + self.record_owners.allocation_size() as u64
    }
}
