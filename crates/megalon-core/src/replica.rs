//! The replica: one host's copy of the index, in its own DRAM, changed only by replay.
//!
//! The index maps a key to its object: slot, record (if read-write-shared), stamp (log
//! position of the last event about it) and this host's host counter (the record counter
//! it last read validly, or unknown).
//!
//! Memory matters here: every host holds every object. Entries live in a chunked arena
//! of 64-bit words (three words of fields, then the key, padded to a word), and the hash
//! table holds only a 4-byte handle into the arena. With 24-byte keys an object costs 48
//! arena bytes plus 5 table bytes per bucket; `docs/log.md` has the measurement.
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
//! In a pod with [`Coherence::AllLog`] a record has one more word after the key: the
//! object's replicated lock, its counter (low half) and its holder + 1 (bits 32..40; 0:
//! unlocked), changed only by replaying `Lock` and `Unlock` events. Split pods do not
//! have the word, so their records, lookups and memory per object are unchanged.

use hashbrown::HashTable;
use std::hash::BuildHasher;

use crate::config::Coherence;
use crate::error::{Error, Result};
use crate::event::{Event, LOCK_HELD, NO_RECORD};
use crate::host::HostId;
use crate::slot::{SlotAccounting, SlotPool};
use crate::sync::{AtomicU64, Ordering};

/// The index's hasher: hashbrown's default (seeded per process) in normal builds; a fixed
/// one in loom models, where the number of arena loads per lookup must not change from one
/// run of the model to the next.
#[cfg(not(megalon_loom))]
type IndexHasher = hashbrown::DefaultHashBuilder;
#[cfg(megalon_loom)]
type IndexHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// Host counter value meaning "unknown: my cached lines of this object may be stale".
pub(crate) const UNKNOWN_COUNTER: u32 = u32::MAX;

const FIELD_WORDS: usize = 3;
const STAMP: usize = 0;
const PLACE: usize = 1;
const META: usize = 2;

/// Words per arena chunk. Records never straddle two chunks.
#[cfg(not(megalon_loom))]
const CHUNK_WORDS: usize = 1 << 15;
#[cfg(megalon_loom)]
const CHUNK_WORDS: usize = 1 << 6;
const CHUNK_SHIFT: u32 = CHUNK_WORDS.trailing_zeros();

fn key_words(key_len: usize) -> usize {
    key_len.div_ceil(8)
}

/// The key's `i`-th word as stored: eight bytes, little-endian, zero-padded.
#[inline]
fn key_word(key: &[u8], i: usize) -> u64 {
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

fn meta_word(counter: u32, key_len: usize, owner: Option<HostId>) -> u64 {
    let owner = owner.map_or(0, |host| u64::from(host) + 1);
    u64::from(counter) | (key_len as u64) << 32 | owner << 48
}

fn owner_of(meta: u64) -> Option<HostId> {
    match meta >> 48 {
        0 => None,
        owner => Some(owner as HostId - 1),
    }
}

/// The arena of index records.
#[derive(Default)]
struct Arena {
    chunks: Vec<Box<[AtomicU64]>>,
    /// Next free word in the last chunk.
    used_in_last: usize,
    /// Freed records, by length in words.
    free: Vec<Vec<u32>>,
}

impl Arena {
    /// The words of the record at `handle` (and what follows it in its chunk).
    #[inline]
    fn record(&self, handle: u32) -> &[AtomicU64] {
        let handle = handle as usize;
        &self.chunks[handle >> CHUNK_SHIFT][handle & (CHUNK_WORDS - 1)..]
    }

    // Relaxed, here and below: the arena changes only under the replica's write lock, and
    // readers hold the read lock, which orders them after the writer. The host counter,
    // written under the read lock, is a hint that readers check against the record.
    #[inline]
    fn get(&self, handle: u32, field: usize) -> u64 {
        self.record(handle)[field].load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, handle: u32, field: usize, value: u64) {
        self.record(handle)[field].store(value, Ordering::Relaxed)
    }

    #[inline]
    fn key_len(&self, handle: u32) -> usize {
        (self.get(handle, META) >> 32 & 0xffff) as usize
    }

    #[inline]
    fn key_equals(&self, handle: u32, key: &[u8]) -> bool {
        let record = self.record(handle);
        let meta = record[META].load(Ordering::Relaxed);
        (meta >> 32 & 0xffff) as usize == key.len()
            && (0..key_words(key.len()))
                .all(|i| record[FIELD_WORDS + i].load(Ordering::Relaxed) == key_word(key, i))
    }

    fn key_into<'b>(&self, handle: u32, buf: &'b mut [u8]) -> &'b [u8] {
        let len = self.key_len(handle);
        for (i, chunk) in buf[..len].chunks_mut(8).enumerate() {
            let bytes = self.get(handle, FIELD_WORDS + i).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        &buf[..len]
    }

    fn allocate(&mut self, words: usize) -> u32 {
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

    fn release(&mut self, handle: u32, words: usize) {
        if self.free.len() <= words {
            self.free.resize_with(words + 1, Vec::new);
        }
        self.free[words].push(handle);
    }

    fn heap_bytes(&self) -> u64 {
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
    fn from_word(word: u64) -> Self {
        Self {
            holder: match (word >> 32) & 0xff {
                0 => None,
                holder => Some(holder as HostId - 1),
            },
            counter: word as u32,
        }
    }

    fn word(self) -> u64 {
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

/// What applying an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The appender got slots `first..first + count` (`count` 0: none left unclaimed).
    SlotsClaimed {
        /// First slot.
        first: u64,
        /// How many.
        count: u64,
    },
    /// The object was created.
    Created,
    /// The key existed: the create lost, its slot stays with its owner.
    AlreadyExists,
    /// The object was deleted; its slot went to the deleter.
    Deleted {
        /// Its slot.
        slot: u64,
        /// Its record, which the deleter frees.
        record: Option<u32>,
    },
    /// The key did not exist.
    NotFound,
    /// The delete named another record than the object has now: nothing changed.
    DeleteLost,
    /// The record was attached to the object.
    RecordAllocated,
    /// The object already had a record (another host's alloc came first in the log).
    RecordAllocLost {
        /// The record it has.
        existing: u32,
    },
    /// The record was detached.
    RecordDeallocated,
    /// The object no longer had that record (already detached or replaced).
    RecordDeallocIgnored,
    /// The object's replicated lock is the appender's now.
    Locked,
    /// The object's replicated lock was held already: nothing changed.
    LockLost {
        /// The host that holds it.
        holder: HostId,
    },
    /// The appender's lock is released and the counter moved on.
    Unlocked {
        /// The object's counter now.
        counter: u32,
    },
    /// The appender did not hold the object's lock: nothing changed. (The protocol never
    /// appends such an unlock.)
    NotLocked,
    /// Every host dropped its lines of the object.
    Wrapped,
    /// The object moved between its CXL slot and a host's local DRAM.
    Moved,
    /// The move changed nothing: the object is gone, already where the event would put
    /// it, held by another host, or (to a host) changed since the appender copied it.
    MoveLost,
    /// Slots were asked for; `donor` is the host that will grant them.
    SlotsRequested {
        /// Who grants.
        donor: Option<HostId>,
    },
    /// Slots changed owner.
    SlotsGranted,
}

/// What applying one event asks the replayer to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) outcome: Outcome,
    /// The slot whose cached lines this host must drop (an event from another host about
    /// an object).
    pub(crate) drop_slot: Option<u64>,
    /// The slot of the object the event changed, on every host (the author's too): a
    /// local copy of it is no longer valid.
    pub(crate) touched_slot: Option<u64>,
    /// This host must grant `count` slots to `host`.
    pub(crate) grant: Option<(HostId, u64)>,
}

impl Applied {
    /// The event changed the object in `slot`: every host's copy of it is invalid, and
    /// every host but the author (`mine`) drops its cached lines.
    fn changed(&mut self, slot: u64, mine: bool) {
        self.touched_slot = Some(slot);
        self.drop_slot = (!mine).then_some(slot);
    }
}

/// The index of one host.
pub(crate) struct Index {
    table: HashTable<u32>,
    arena: Arena,
    hasher: IndexHasher,
    objects: u64,
    slot_count: u64,
    record_count: u64,
    max_hosts: u32,
    /// Whether the pod's coherence is [`Coherence::AllLog`]: records carry the replicated
    /// lock word after the key.
    all_log: bool,
    /// Words after the key in every record: 1 (the lock word) with AllLog, else 0.
    lock_words: usize,
    /// Record id to the handle of the object it belongs to: the reclaimer samples records
    /// in the SCR and needs to know whose they are.
    record_owners: hashbrown::HashMap<u32, u32>,
    pub(crate) slots: SlotAccounting,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("objects", &self.objects)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Index {
    pub(crate) fn new(
        slot_count: u64,
        record_count: u64,
        max_hosts: u32,
        coherence: Coherence,
    ) -> Self {
        let all_log = coherence == Coherence::AllLog;
        Self {
            all_log,
            lock_words: usize::from(all_log),
            table: HashTable::new(),
            arena: Arena::default(),
            hasher: IndexHasher::default(),
            objects: 0,
            slot_count,
            record_count,
            max_hosts,
            record_owners: hashbrown::HashMap::new(),
            slots: SlotAccounting::new(slot_count, max_hosts),
        }
    }

    /// The key of the object that owns `record` in this replica.
    pub(crate) fn record_owner_key(&self, record: u32) -> Option<Vec<u8>> {
        let handle = *self.record_owners.get(&record)?;
        Some(self.key_of(handle))
    }

    /// The key of the object behind `handle`.
    pub(crate) fn key_of(&self, handle: u32) -> Vec<u8> {
        let mut buf = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
        self.arena.key_into(handle, &mut buf).to_vec()
    }

    /// Objects in the index.
    pub(crate) fn len(&self) -> u64 {
        self.objects
    }

    #[inline]
    fn entry(&self, handle: u32) -> IndexEntry {
        let record = self.arena.record(handle);
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
    fn find(&self, key: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&handle| self.arena.key_equals(handle, key))
            .copied()
    }

    /// The entry of `key`, if the object exists.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<IndexEntry> {
        self.find(key).map(|handle| self.entry(handle))
    }

    /// The entry of `key` with its replicated lock, in a pod with [`Coherence::AllLog`].
    #[inline]
    pub(crate) fn lookup_locked(&self, key: &[u8]) -> Option<(IndexEntry, ReplicatedLock)> {
        debug_assert!(self.all_log, "only AllLog records have a lock word");
        self.find(key)
            .map(|handle| (self.entry(handle), self.replicated_lock(handle)))
    }

    /// The replicated lock of the object behind `handle` ([`Coherence::AllLog`] only).
    #[inline]
    pub(crate) fn replicated_lock(&self, handle: u32) -> ReplicatedLock {
        debug_assert!(self.all_log, "only AllLog records have a lock word");
        let at = FIELD_WORDS + key_words(self.arena.key_len(handle));
        ReplicatedLock::from_word(self.arena.get(handle, at))
    }

    fn set_replicated_lock(&self, handle: u32, lock: ReplicatedLock) {
        let at = FIELD_WORDS + key_words(self.arena.key_len(handle));
        self.arena.set(handle, at, lock.word());
    }

    /// The entry behind `handle` if it still holds the object stamped `stamp` (no event
    /// about it since): what a read checks at its end.
    pub(crate) fn current(&self, handle: u32, stamp: u64) -> Option<IndexEntry> {
        (self.arena.get(handle, STAMP) == stamp).then(|| self.entry(handle))
    }

    /// Stores this host's host counter for the object behind `handle` (under the read
    /// lock, after checking with [`Index::current`] that it is still the same object).
    pub(crate) fn set_host_counter(&self, handle: u32, counter: Option<u32>) {
        let meta = self.arena.get(handle, META);
        let key_len = (meta >> 32 & 0xffff) as usize;
        let counter = counter.unwrap_or(UNKNOWN_COUNTER);
        self.arena
            .set(handle, META, meta_word(counter, key_len, owner_of(meta)));
    }

    fn set_owner(&self, handle: u32, owner: Option<HostId>) {
        let meta = self.arena.get(handle, META);
        let key_len = (meta >> 32 & 0xffff) as usize;
        self.arena
            .set(handle, META, meta_word(meta as u32, key_len, owner));
    }

    fn set_record(&self, handle: u32, record: u32) {
        let slot = self.arena.get(handle, PLACE) & 0xffff_ffff;
        self.arena
            .set(handle, PLACE, slot | u64::from(record) << 32);
    }

    fn record_of(&self, handle: u32) -> u32 {
        (self.arena.get(handle, PLACE) >> 32) as u32
    }

    fn slot_of(&self, handle: u32) -> u64 {
        self.arena.get(handle, PLACE) & 0xffff_ffff
    }

    fn insert(&mut self, key: &[u8], slot: u64, stamp: u64) {
        let handle = self
            .arena
            .allocate(FIELD_WORDS + key_words(key.len()) + self.lock_words);
        self.arena.set(handle, STAMP, stamp);
        self.arena
            .set(handle, PLACE, slot | u64::from(NO_RECORD) << 32);
        self.arena
            .set(handle, META, meta_word(UNKNOWN_COUNTER, key.len(), None));
        for i in 0..key_words(key.len()) {
            self.arena.set(handle, FIELD_WORDS + i, key_word(key, i));
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
        let hash = self.hasher.hash_one(key);
        let Self {
            table,
            arena,
            hasher,
            ..
        } = self;
        table.insert_unique(hash, handle, |&other| {
            // Rehash: rebuild the key from the arena (growth only, never on lookups).
            let mut bytes = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
            hasher.hash_one(arena.key_into(other, &mut bytes))
        });
        self.objects += 1;
    }

    fn remove(&mut self, key: &[u8]) -> Option<IndexEntry> {
        let hash = self.hasher.hash_one(key);
        let Self { table, arena, .. } = self;
        let (handle, _) = table
            .find_entry(hash, |&handle| arena.key_equals(handle, key))
            .ok()?
            .remove();
        let entry = self.entry(handle);
        // Poison the stamp so a stale handle never matches `current` again.
        self.arena.set(handle, STAMP, u64::MAX);
        self.arena
            .release(handle, FIELD_WORDS + key_words(key.len()) + self.lock_words);
        self.objects -= 1;
        Some(entry)
    }

    /// Marks an event about the object at `handle`: new stamp, host counter unknown.
    fn touch(&self, handle: u32, stamp: u64) {
        self.arena.set(handle, STAMP, stamp);
        self.set_host_counter(handle, None);
    }

    /// Applies the event at log `position`, appended by `author`, on the replica of host
    /// `me`. Every replica applies the same events in the same order and reaches the same
    /// state; what differs per host (its free slots, what it must drop or grant) is
    /// returned or put in `pool`.
    pub(crate) fn apply(
        &mut self,
        position: u64,
        author: HostId,
        event: &Event<'_>,
        me: HostId,
        pool: &mut SlotPool,
    ) -> Result<Applied> {
        let corrupt = |what| Error::CorruptLogEntry { position, what };
        if author >= self.max_hosts {
            return Err(corrupt("host past the pod's maximum"));
        }
        let mine = author == me;
        let mut applied = Applied {
            outcome: Outcome::NotFound,
            drop_slot: None,
            touched_slot: None,
            grant: None,
        };
        match *event {
            Event::ClaimSlots { count } => {
                let (first, count) = self.slots.claim(author as usize, count);
                if mine {
                    pool.add_range(first, count);
                }
                applied.outcome = Outcome::SlotsClaimed { first, count };
            }
            Event::Create { key, slot } => {
                if slot >= self.slot_count {
                    return Err(corrupt("slot past the pod's slots"));
                }
                if self.find(key).is_some() {
                    if mine {
                        pool.push(slot);
                    }
                    applied.outcome = Outcome::AlreadyExists;
                } else {
                    self.insert(key, slot, position);
                    self.slots.free_counts[author as usize] -= 1;
                    applied.outcome = Outcome::Created;
                    applied.changed(slot, mine);
                }
            }
            Event::Delete { key, record } => {
                if self.all_log && record != LOCK_HELD && record != NO_RECORD {
                    return Err(corrupt("delete naming a record in an all-log pod"));
                }
                let lost = self.find(key).is_some_and(|handle| {
                    // An object in a host's DRAM: the bytes in its slot are old. The
                    // deleter brings it back to CXL first, then deletes.
                    if owner_of(self.arena.get(handle, META)).is_some() {
                        return true;
                    }
                    if self.all_log {
                        // AllLog: the deleter holds the object's lock, or no one does.
                        let holder = self.replicated_lock(handle).holder;
                        holder != (record == LOCK_HELD).then_some(author)
                    } else {
                        self.record_of(handle) != record
                    }
                });
                if lost {
                    // The object got (or changed) a record after the deleter looked: the
                    // deleter does not hold that record's lock, so it must not delete.
                    // (AllLog: another host holds its lock, or the deleter no longer does.)
                    applied.outcome = Outcome::DeleteLost;
                } else if let Some(entry) = self.remove(key) {
                    if let Some(record) = entry.record {
                        self.record_owners.remove(&record);
                    }
                    self.slots.free_counts[author as usize] += 1;
                    if mine {
                        pool.push(entry.slot);
                    }
                    applied.outcome = Outcome::Deleted {
                        slot: entry.slot,
                        record: entry.record,
                    };
                    applied.changed(entry.slot, mine);
                }
            }
            Event::RecordAlloc { key, record } => {
                if self.all_log {
                    return Err(corrupt("record alloc in an all-log pod"));
                }
                if u64::from(record) >= self.record_count {
                    return Err(corrupt("record past the pod's records"));
                }
                if let Some(handle) = self.find(key) {
                    let existing = self.record_of(handle);
                    if existing != NO_RECORD {
                        applied.outcome = Outcome::RecordAllocLost { existing };
                    } else {
                        self.set_record(handle, record);
                        self.record_owners.insert(record, handle);
                        self.touch(handle, position);
                        applied.outcome = Outcome::RecordAllocated;
                        applied.changed(self.slot_of(handle), mine);
                    }
                }
            }
            Event::RecordDealloc { key, record } => {
                if let Some(handle) = self.find(key) {
                    if self.record_of(handle) == record {
                        self.set_record(handle, NO_RECORD);
                        self.record_owners.remove(&record);
                        self.touch(handle, position);
                        applied.outcome = Outcome::RecordDeallocated;
                        // On every host, the author too: once read-shared, reads make no
                        // check, and the deallocating host may cache lines of the object
                        // from long before (it need not have read it lately).
                        applied.changed(self.slot_of(handle), mine);
                        applied.drop_slot = applied.touched_slot;
                    } else {
                        applied.outcome = Outcome::RecordDeallocIgnored;
                    }
                }
            }
            Event::Wrap { key } => {
                if let Some(handle) = self.find(key) {
                    self.touch(handle, position);
                    applied.outcome = Outcome::Wrapped;
                    applied.changed(self.slot_of(handle), mine);
                }
            }
            Event::MoveToHost { key, host, stamp } => {
                if host != author {
                    return Err(corrupt("move to a host other than the appender"));
                }
                applied.outcome = Outcome::MoveLost;
                if let Some(handle) = self.find(key) {
                    let meta = self.arena.get(handle, META);
                    if owner_of(meta).is_none() && self.arena.get(handle, STAMP) == stamp {
                        self.set_owner(handle, Some(host));
                        self.touch(handle, position);
                        applied.outcome = Outcome::Moved;
                        applied.changed(self.slot_of(handle), mine);
                    }
                }
            }
            Event::MoveToCxl { key } => {
                applied.outcome = Outcome::MoveLost;
                if let Some(handle) = self.find(key) {
                    if owner_of(self.arena.get(handle, META)) == Some(author) {
                        self.set_owner(handle, None);
                        self.touch(handle, position);
                        applied.outcome = Outcome::Moved;
                        applied.changed(self.slot_of(handle), mine);
                    }
                }
            }
            Event::Lock { key } => {
                if !self.all_log {
                    return Err(corrupt("lock event in a split pod"));
                }
                if let Some(handle) = self.find(key) {
                    let lock = self.replicated_lock(handle);
                    if let Some(holder) = lock.holder {
                        // Another lock came first in the log: every replica says so.
                        applied.outcome = Outcome::LockLost { holder };
                    } else {
                        self.set_replicated_lock(
                            handle,
                            ReplicatedLock {
                                holder: Some(author),
                                counter: lock.counter,
                            },
                        );
                        // A read that overlaps the write sees the stamp change. The
                        // author's host counter stays: its cached lines are no staler for
                        // its own lock. Other hosts drop their lines, as for every event.
                        if mine {
                            self.arena.set(handle, STAMP, position);
                        } else {
                            self.touch(handle, position);
                        }
                        applied.outcome = Outcome::Locked;
                        applied.changed(self.slot_of(handle), mine);
                    }
                }
            }
            Event::Unlock { key } => {
                if !self.all_log {
                    return Err(corrupt("unlock event in a split pod"));
                }
                if let Some(handle) = self.find(key) {
                    let lock = self.replicated_lock(handle);
                    if lock.holder != Some(author) {
                        applied.outcome = Outcome::NotLocked;
                    } else {
                        let counter = lock.counter.wrapping_add(2);
                        self.set_replicated_lock(
                            handle,
                            ReplicatedLock {
                                holder: None,
                                counter,
                            },
                        );
                        // The author wrote the object back before appending this: its
                        // cached lines are this version's. Every other host drops its
                        // lines and forgets what it had.
                        self.arena.set(handle, STAMP, position);
                        self.set_host_counter(handle, mine.then_some(counter));
                        applied.outcome = Outcome::Unlocked { counter };
                        applied.changed(self.slot_of(handle), mine);
                    }
                }
            }
            Event::NeedSlots { count } => {
                let donor = self.slots.donor(author as usize).map(|d| d as HostId);
                if donor == Some(me) {
                    applied.grant = Some((author, count));
                }
                applied.outcome = Outcome::SlotsRequested { donor };
            }
            Event::GrantSlots { to, first, count } => {
                if to >= self.max_hosts
                    || first
                        .checked_add(count)
                        .is_none_or(|end| end > self.slot_count)
                {
                    return Err(corrupt("slot grant outside the pod"));
                }
                self.slots.free_counts[author as usize] -= count as i64;
                self.slots.free_counts[to as usize] += count as i64;
                if to == me {
                    pool.add_range(first, count);
                }
                applied.outcome = Outcome::SlotsGranted;
            }
        }
        // A touched object's own host counter is unknown on the author too: the touch
        // above covers alloc, dealloc and wrap; create starts unknown; delete removes it.
        Ok(applied)
    }

    /// Every object, sorted by key: for tests and inspection.
    pub(crate) fn snapshot(&self) -> Vec<(Vec<u8>, IndexEntry)> {
        let mut buf = [0u8; crate::limits::MAX_KEY_BYTES_LIMIT as usize];
        let mut out: Vec<(Vec<u8>, IndexEntry)> = self
            .table
            .iter()
            .map(|&handle| {
                (
                    self.arena.key_into(handle, &mut buf).to_vec(),
                    self.entry(handle),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Bytes of DRAM the index holds: the table, the arena and the free lists.
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.table.allocation_size() as u64
            + self.arena.heap_bytes()
            + self.record_owners.allocation_size() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> Index {
        Index::new(1000, 100, 4, Coherence::Split)
    }

    #[test]
    fn create_lookup_delete_round_trip_with_every_key_length() {
        let mut index = index();
        let mut pool = SlotPool::default();
        for len in 0..40usize {
            let key: Vec<u8> = (0..len as u8).collect();
            let applied = index
                .apply(
                    len as u64,
                    1,
                    &Event::Create {
                        key: &key,
                        slot: len as u64,
                    },
                    0,
                    &mut pool,
                )
                .unwrap();
            assert_eq!(applied.outcome, Outcome::Created);
            assert_eq!(
                applied.drop_slot,
                Some(len as u64),
                "another host's create drops the slot"
            );
        }
        assert_eq!(index.len(), 40);
        for len in 0..40usize {
            let key: Vec<u8> = (0..len as u8).collect();
            let entry = index.lookup(&key).expect("present");
            assert_eq!(
                (entry.slot, entry.stamp, entry.record, entry.host_counter),
                (len as u64, len as u64, None, None)
            );
            let mut longer = key.clone();
            longer.push(0);
            assert_ne!(
                index.lookup(&longer).map(|e| e.slot),
                Some(len as u64 + 100)
            );
        }
        let applied = index
            .apply(
                100,
                0,
                &Event::Delete {
                    key: &[0, 1, 2],
                    record: NO_RECORD,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(
            applied.outcome,
            Outcome::Deleted {
                slot: 3,
                record: None
            }
        );
        assert_eq!(applied.drop_slot, None, "our own delete drops nothing");
        assert_eq!(pool.pop(), Some(3), "the deleter owns the slot now");
        assert!(index.lookup(&[0, 1, 2]).is_none());
        // The freed arena record is reused by a key of the same length.
        index
            .apply(
                101,
                2,
                &Event::Create {
                    key: b"abc",
                    slot: 500,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(index.lookup(b"abc").map(|e| e.slot), Some(500));
        assert_eq!(index.snapshot().len(), 40);
    }

    #[test]
    fn a_lost_create_keeps_the_slot_with_its_owner() {
        let mut index = index();
        let mut pool = SlotPool::default();
        index
            .apply(0, 1, &Event::Create { key: b"k", slot: 7 }, 0, &mut pool)
            .unwrap();
        let applied = index
            .apply(1, 0, &Event::Create { key: b"k", slot: 8 }, 0, &mut pool)
            .unwrap();
        assert_eq!(applied.outcome, Outcome::AlreadyExists);
        assert_eq!(pool.pop(), Some(8));
        assert_eq!(index.lookup(b"k").map(|e| e.slot), Some(7));
    }

    #[test]
    fn record_events_follow_log_order_and_stamp_the_object() {
        let mut index = index();
        let mut pool = SlotPool::default();
        index
            .apply(0, 1, &Event::Create { key: b"k", slot: 7 }, 0, &mut pool)
            .unwrap();
        let first = index
            .apply(
                5,
                1,
                &Event::RecordAlloc {
                    key: b"k",
                    record: 3,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(first.outcome, Outcome::RecordAllocated);
        let second = index
            .apply(
                6,
                0,
                &Event::RecordAlloc {
                    key: b"k",
                    record: 4,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(second.outcome, Outcome::RecordAllocLost { existing: 3 });
        let entry = index.lookup(b"k").unwrap();
        assert_eq!((entry.record, entry.stamp), (Some(3), 5));
        index.set_host_counter(entry.handle, Some(12));
        assert_eq!(
            index.current(entry.handle, 5).unwrap().host_counter,
            Some(12)
        );
        let wrap = index
            .apply(9, 2, &Event::Wrap { key: b"k" }, 0, &mut pool)
            .unwrap();
        assert_eq!((wrap.outcome, wrap.drop_slot), (Outcome::Wrapped, Some(7)));
        assert!(index.current(entry.handle, 5).is_none(), "the stamp moved");
        assert_eq!(
            index.lookup(b"k").unwrap().host_counter,
            None,
            "an event makes it unknown"
        );
        // A move made from a copy older than the last event loses.
        let late = index
            .apply(
                10,
                3,
                &Event::MoveToHost {
                    key: b"k",
                    host: 3,
                    stamp: 5,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!((late.outcome, late.drop_slot), (Outcome::MoveLost, None));
        let moved = index
            .apply(
                11,
                3,
                &Event::MoveToHost {
                    key: b"k",
                    host: 3,
                    stamp: 9,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(
            (moved.outcome, moved.drop_slot, moved.touched_slot),
            (Outcome::Moved, Some(7), Some(7))
        );
        let entry = index.lookup(b"k").unwrap();
        assert_eq!(
            (entry.local_owner, entry.stamp, entry.record),
            (Some(3), 11, Some(3))
        );
        index.set_host_counter(entry.handle, Some(4));
        assert_eq!(
            index.lookup(b"k").unwrap().local_owner,
            Some(3),
            "readers keep the owner"
        );
        // Only the holder moves it back; a delete of an object in a host's DRAM loses.
        let not_holder = index
            .apply(12, 0, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
            .unwrap();
        assert_eq!(not_holder.outcome, Outcome::MoveLost);
        let delete = Event::Delete {
            key: b"k",
            record: 3,
        };
        assert_eq!(
            index.apply(13, 3, &delete, 0, &mut pool).unwrap().outcome,
            Outcome::DeleteLost
        );
        let back = index
            .apply(14, 3, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
            .unwrap();
        assert_eq!((back.outcome, back.drop_slot), (Outcome::Moved, Some(7)));
        let own = index
            .apply(
                15,
                0,
                &Event::MoveToHost {
                    key: b"k",
                    host: 0,
                    stamp: 14,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(
            (own.outcome, own.drop_slot, own.touched_slot),
            (Outcome::Moved, None, Some(7)),
            "the mover keeps its lines; its copy, if any, goes"
        );
        let own_back = index
            .apply(16, 0, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
            .unwrap();
        assert_eq!(own_back.outcome, Outcome::Moved);
        assert_eq!(index.lookup(b"k").unwrap().local_owner, None);
        let stale = index
            .apply(
                17,
                2,
                &Event::RecordDealloc {
                    key: b"k",
                    record: 4,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(stale.outcome, Outcome::RecordDeallocIgnored);
        let dealloc = index
            .apply(
                18,
                2,
                &Event::RecordDealloc {
                    key: b"k",
                    record: 3,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(dealloc.outcome, Outcome::RecordDeallocated);
        assert_eq!(index.lookup(b"k").unwrap().record, None);
    }

    #[test]
    fn out_of_range_fields_are_a_corrupt_log() {
        let mut index = index();
        let mut pool = SlotPool::default();
        for event in [
            Event::Create {
                key: b"k",
                slot: 1000,
            },
            Event::GrantSlots {
                to: 9,
                first: 0,
                count: 1,
            },
            Event::GrantSlots {
                to: 1,
                first: 999,
                count: 2,
            },
            Event::MoveToHost {
                key: b"k",
                host: 1,
                stamp: 0,
            },
        ] {
            assert!(matches!(
                index.apply(3, 0, &event, 0, &mut pool),
                Err(Error::CorruptLogEntry { position: 3, .. })
            ));
        }
        assert!(index
            .apply(3, 4, &Event::Wrap { key: b"k" }, 0, &mut pool)
            .is_err());
        // Lock events belong to AllLog pods; records to split ones.
        assert!(index
            .apply(3, 0, &Event::Lock { key: b"k" }, 0, &mut pool)
            .is_err());
        let mut all_log = Index::new(1000, 100, 4, Coherence::AllLog);
        assert!(all_log
            .apply(
                3,
                0,
                &Event::RecordAlloc {
                    key: b"k",
                    record: 1
                },
                0,
                &mut pool
            )
            .is_err());
    }

    #[test]
    fn all_log_locks_follow_log_order_and_move_the_stamp_and_counter() {
        let mut index = Index::new(1000, 100, 4, Coherence::AllLog);
        let mut pool = SlotPool::default();
        let me = 0;
        let mut apply = |index: &mut Index, position: u64, author: HostId, event: &Event<'_>| {
            index.apply(position, author, event, me, &mut pool).unwrap()
        };
        // Keys of several lengths: the lock word sits after the key.
        for (i, key) in [&b"k"[..], b"a longer key of 21 b", b""]
            .into_iter()
            .enumerate()
        {
            let base = i as u64 * 100;
            apply(&mut index, base, 1, &Event::Create { key, slot: base });
            let lock = |index: &Index| index.lookup_locked(key).unwrap().1;
            assert_eq!(
                lock(&index),
                ReplicatedLock {
                    holder: None,
                    counter: 0
                }
            );
            // Host 2 locks first; host 0's lock loses and changes nothing.
            let won = apply(&mut index, base + 1, 2, &Event::Lock { key });
            assert_eq!((won.outcome, won.drop_slot), (Outcome::Locked, Some(base)));
            let lost = apply(&mut index, base + 2, 0, &Event::Lock { key });
            assert_eq!(
                (lost.outcome, lost.drop_slot),
                (Outcome::LockLost { holder: 2 }, None)
            );
            let (entry, held) = index.lookup_locked(key).unwrap();
            assert_eq!(
                (held.holder, held.counter, entry.stamp),
                (Some(2), 0, base + 1)
            );
            // Only the holder unlocks; a delete that holds no lock loses.
            let stray = apply(&mut index, base + 3, 1, &Event::Unlock { key });
            assert_eq!(stray.outcome, Outcome::NotLocked);
            let delete = Event::Delete {
                key,
                record: NO_RECORD,
            };
            assert_eq!(
                apply(&mut index, base + 4, 0, &delete).outcome,
                Outcome::DeleteLost
            );
            let unlocked = apply(&mut index, base + 5, 2, &Event::Unlock { key });
            assert_eq!(unlocked.outcome, Outcome::Unlocked { counter: 2 });
            let (entry, lock_now) = index.lookup_locked(key).unwrap();
            assert_eq!(
                (lock_now.holder, entry.stamp, entry.host_counter),
                (None, base + 5, None)
            );
            // Our own lock keeps our host counter, our unlock sets it.
            index.set_host_counter(entry.handle, Some(2));
            apply(&mut index, base + 6, me, &Event::Lock { key });
            assert_eq!(index.lookup_locked(key).unwrap().0.host_counter, Some(2));
            let mine = apply(&mut index, base + 7, me, &Event::Unlock { key });
            assert_eq!(
                (mine.outcome, mine.drop_slot),
                (Outcome::Unlocked { counter: 4 }, None)
            );
            assert_eq!(index.lookup_locked(key).unwrap().0.host_counter, Some(4));
            // A delete by the lock's holder wins.
            apply(&mut index, base + 8, 3, &Event::Lock { key });
            let held_by_3 = Event::Delete {
                key,
                record: LOCK_HELD,
            };
            assert_eq!(
                apply(&mut index, base + 9, 1, &held_by_3).outcome,
                Outcome::DeleteLost
            );
            assert!(matches!(
                apply(&mut index, base + 10, 3, &held_by_3).outcome,
                Outcome::Deleted { record: None, .. }
            ));
            // Created again (a reused arena record): unlocked, counter 0.
            apply(
                &mut index,
                base + 11,
                1,
                &Event::Create {
                    key,
                    slot: base + 1,
                },
            );
            assert_eq!(
                lock(&index),
                ReplicatedLock {
                    holder: None,
                    counter: 0
                }
            );
        }
    }
}

/// One host's replica: the index, how far it has applied the log, and the replayer's
/// state (one replayer at a time).
#[derive(Debug)]
pub(crate) struct Replica {
    pub(crate) index: crate::sync::RwLock<Index>,
    /// Log positions below this are applied (this host's copy of its `ltail`).
    pub(crate) applied: crate::sync::AtomicU64,
    pub(crate) replay: crate::sync::Mutex<ReplayState>,
}

/// What the replayer keeps between rounds.
#[derive(Debug)]
pub(crate) struct ReplayState {
    /// One entry's bytes.
    pub(crate) entry: Vec<u8>,
    /// Outcomes of this host's own entries, by position, until its appender takes them.
    pub(crate) outcomes: std::collections::HashMap<u64, Outcome>,
    /// Slots this host must grant: `(to, count)`.
    pub(crate) grants: Vec<(HostId, u64)>,
}

impl Replica {
    pub(crate) fn new(index: Index, entry_bytes: usize) -> Self {
        Self {
            index: crate::sync::RwLock::new(index),
            applied: crate::sync::AtomicU64::new(0),
            replay: crate::sync::Mutex::new(ReplayState {
                entry: vec![0; entry_bytes],
                outcomes: std::collections::HashMap::new(),
                grants: Vec::new(),
            }),
        }
    }
}
