//! A host: its view of the pod's memory, its partition (the owner's local index and
//! rows, in DRAM), its share of the SCR (CXL index and records) and its RPC ring, and
//! what it does as an owner: read and write its own rows, create and delete them, share
//! them on request and unshare them with CLOCK when its budget is full.
//!
//! Locks, always taken in this order (a later one is never waited for while holding an
//! earlier one of the list below it, so there is no cycle):
//!
//! 1. a local index shard (`RwLock`): lookups read it; creates and deletes write it;
//! 2. a row's local latch (`RwLock`, Tigon's local-latch): reads of the row take it
//!    shared, writes, shares, unshares and deletes exclusive; it keeps the row's
//!    shortcut to its record stable;
//! 3. the record's lock in SCR (see [`super::record`]);
//! 4. the share state (`Mutex`): free entries and the CLOCK hand. The CLOCK hand only
//!    *tries* the latches and record locks of its victims, never waits for them
//!    holding it: when every victim is held it lets the share state go before it waits
//!    (a delete holds a victim's latch and record lock while it waits for the share
//!    state).
//!
//! No thread serves the ring while it holds any of these.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::HashTable;
use megalon_core::rpc::{Request, Response};
use megalon_core::{limits::LINE_BYTES, Memory, Pod};
use megalon_kv::scheme::Extent;
use megalon_kv::{Error, Result};
use parking_lot::{Mutex, MutexGuard, RwLock};

use megalon_core::memory::cxl::ScrAccess;

use super::counters::{Counter, Counters, Registry};
use super::geometry::{HostGeometry, Sizes};
use super::hash::KeyHash;
use super::record::{self, host_bit, NotLocked, DIRTY, WRITER};
use super::ring::Op;
use super::{Placement, Settings};
use megalon_core::Backoff;

/// Shards of a local index (a power of two).
const SHARDS: usize = 64;
/// A row with no record (unshared).
pub(crate) const NO_ENTRY: u32 = u32::MAX;
/// An entry with no row (free).
const NO_ROW: u32 = u32::MAX;

/// Response statuses.
pub(crate) const STATUS_DONE: u8 = 1;
pub(crate) const STATUS_NOT_FOUND: u8 = 2;
pub(crate) const STATUS_EXISTS: u8 = 3;
pub(crate) const STATUS_NO_ROW: u8 = 4;
pub(crate) const STATUS_NO_ENTRY: u8 = 5;
pub(crate) const STATUS_BUSY: u8 = 6;
pub(crate) const STATUS_RETRIES: u8 = 7;
pub(crate) const STATUS_BAD_REQUEST: u8 = 8;
/// The owner panicked while serving the request (its effect is unknown).
pub(crate) const STATUS_SERVER_FAILED: u8 = 9;

/// What a server answers for a request it panicked on.
pub(crate) fn server_failed() -> Response {
    Response {
        status: STATUS_SERVER_FAILED,
        detail: 0,
    }
}

/// Zeros, for the unused end of a created object.
static ZEROS: [u8; 4096] = [0; 4096];

/// Whether sharing may unshare another object to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evict {
    Yes,
    No,
}

/// One row of a partition (Tigon's local row, less the tuple in HCMeta, where it is in
/// LNR).
pub(crate) struct Row {
    live: bool,
    /// HCMeta: the owner's cache may hold lines of the row not yet written back.
    dirty: bool,
    /// Counts the creates that used this row: a lookup's row is still its key's when the
    /// generations agree.
    generation: u32,
    /// The shortcut: the row's index entry (and record) while shared, or [`NO_ENTRY`].
    entry: u32,
    /// The key's hash (for unlinking the entry when unsharing).
    hash: u64,
    /// HCMeta-Local: the row's bytes.
    local: Box<[u8]>,
}

struct ShareState {
    free_entries: Vec<u32>,
    /// The CLOCK hand: the next entry it looks at.
    hand: u64,
    /// Each entry's row, or [`NO_ROW`].
    entry_row: Box<[u32]>,
}

/// A shard of the local index: key to (row, generation).
type Shard = RwLock<HashTable<(Box<[u8]>, u32, u32)>>;

/// One host.
pub(crate) struct HostState {
    pub(crate) id: usize,
    pub(crate) memory: Memory,
    pub(crate) geometry: HostGeometry,
    /// The local index: key to (row, generation).
    shards: Box<[Shard]>,
    rows: Box<[RwLock<Row>]>,
    free_rows: Mutex<Vec<u32>>,
    share: Mutex<ShareState>,
    shared_now: AtomicU64,
    /// How many times the CLOCK hand found every entry held and waited: for tests that
    /// park a thread in that wait (the share state is held only between its waits).
    #[cfg(test)]
    hand_waits: AtomicU64,
    /// Set by a test that serves the ring itself: the background server leaves it alone.
    #[cfg(test)]
    pub(crate) background_paused: AtomicBool,
    /// The serving lock, with the server's scratch entry.
    pub(crate) serving: Mutex<Vec<u8>>,
    /// Set to make the host stop answering requests (failure experiments).
    pub(crate) stopped: AtomicBool,
    pub(crate) counters: Registry,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("id", &self.id)
            .field("rows", &self.rows.len())
            .field("shared_now", &self.shared_now())
            .finish_non_exhaustive()
    }
}

fn lines(bytes: u64) -> u64 {
    bytes.div_ceil(LINE_BYTES)
}

/// Copies an object out of `read` (`read(offset, buf)`): the first line, then as much
/// as `extent` says, at most `buf.len()` or `len` bytes.
fn copy_out(
    len: usize,
    buf: &mut [u8],
    extent: Extent<'_>,
    mut read: impl FnMut(usize, &mut [u8]),
) -> usize {
    let len = buf.len().min(len);
    let first = len.min(megalon_kv::scheme::FIRST_READ_BYTES);
    read(0, &mut buf[..first]);
    let total = extent(&buf[..first]).clamp(first, len);
    if total > first {
        read(first, &mut buf[first..total]);
    }
    total
}

/// Maps a record lock that was not taken to the store's error.
pub(crate) fn busy(entry: u32, not_locked: NotLocked) -> Error {
    match not_locked {
        NotLocked::Busy { waited_ms } => Error::Core(megalon_core::Error::RecordBusy {
            record: entry,
            waited_ms,
            holder: None,
            holder_alive: None,
        }),
        NotLocked::Stale => unreachable!("callers handle a stale record"),
    }
}

impl HostState {
    pub(crate) fn new(id: usize, pod: &Pod, sizes: &Sizes, memory: Memory) -> Self {
        let geometry = sizes.host(pod.layout(), id);
        geometry.ring.initialize(pod);
        let rows = (0..sizes.rows_per_host)
            .map(|_| {
                RwLock::new(Row {
                    live: false,
                    dirty: false,
                    generation: 0,
                    entry: NO_ENTRY,
                    hash: 0,
                    local: Box::default(),
                })
            })
            .collect();
        let entries = sizes.shared_per_host as u32;
        Self {
            id,
            memory,
            geometry,
            shards: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            rows,
            free_rows: Mutex::new((0..sizes.rows_per_host as u32).rev().collect()),
            share: Mutex::new(ShareState {
                free_entries: (0..entries).rev().collect(),
                hand: 0,
                entry_row: vec![NO_ROW; entries as usize].into(),
            }),
            shared_now: AtomicU64::new(0),
            #[cfg(test)]
            hand_waits: AtomicU64::new(0),
            #[cfg(test)]
            background_paused: AtomicBool::new(false),
            serving: Mutex::new(vec![0; sizes.ring_entry_bytes as usize]),
            stopped: AtomicBool::new(false),
            counters: Registry::default(),
        }
    }

    /// Objects shared now.
    pub(crate) fn shared_now(&self) -> u64 {
        self.shared_now.load(Ordering::Relaxed)
    }

    /// How many times the CLOCK hand found every entry held and waited.
    #[cfg(test)]
    pub(crate) fn hand_waits(&self) -> u64 {
        self.hand_waits.load(Ordering::Relaxed)
    }

    /// Objects in the partition now.
    pub(crate) fn objects(&self) -> u64 {
        self.rows.len() as u64 - self.free_rows.lock().len() as u64
    }

    /// Absolute offset of LNR slot `slot` of this host.
    fn slot_offset(&self, s: &Settings, slot: u32) -> u64 {
        self.geometry.slots_offset + u64::from(slot) * s.object_bytes as u64
    }

    fn lookup(&self, hash: KeyHash, key: &[u8]) -> Option<(usize, u32)> {
        let shard = self.shards[hash.shard(SHARDS)].read();
        shard
            .find(hash.table(), |(k, _, _)| **k == *key)
            .map(|(_, row, generation)| (*row as usize, *generation))
    }

    /// Finds `key`'s live row and latches it with `latch` (read or write), looking it
    /// up again when the row was deleted (and maybe reused) since the lookup.
    fn latch_row<'r, G: Deref<Target = Row>>(
        &'r self,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        c: &Counters,
        latch: impl Fn(&'r RwLock<Row>) -> G,
    ) -> Result<(usize, G)> {
        for _ in 0..=s.max_retries {
            let (row_id, generation) = self.lookup(hash, key).ok_or(Error::UnknownKey)?;
            let row = latch(&self.rows[row_id]);
            if row.live && row.generation == generation {
                return Ok((row_id, row));
            }
            c.add(Counter::Retries, 1);
        }
        Err(retries_exhausted(s))
    }

    // ---- the owner's own operations ----

    /// Reads this host's object `key` (this host owns it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        buf: &mut [u8],
        extent: Extent<'_>,
        c: &Counters,
    ) -> Result<usize> {
        let (row_id, row) = self.latch_row(s, hash, key, c, RwLock::read)?;
        c.add(Counter::Reads, 1);
        if row.entry == NO_ENTRY {
            // Unshared: only this host touches the row, and its cache is current.
            return Ok(match s.placement {
                Placement::Cxl => {
                    let at = self.slot_offset(s, row_id as u32);
                    copy_out(s.object_bytes, buf, extent, |from, out| {
                        self.memory.read(at + from as u64, out)
                    })
                }
                Placement::Local => copy_out(s.object_bytes, buf, extent, |from, out| {
                    out.copy_from_slice(&row.local[from..from + out.len()])
                }),
            });
        }
        let record = self.geometry.index.record(pod, row.entry);
        if s.placement == Placement::Local {
            // Tigon's is-dirty: a shared row nobody wrote equals the DRAM copy, which
            // does not change while shared. The read takes effect at this load.
            let word = record.load(Ordering::Acquire);
            c.add_scr(record, ScrAccess::Load);
            if word & (DIRTY | WRITER) == 0 {
                return Ok(copy_out(s.object_bytes, buf, extent, |from, out| {
                    out.copy_from_slice(&row.local[from..from + out.len()])
                }));
            }
        }
        // Our latch keeps the row shared: the record cannot be stale.
        let word = record::read_lock(record, 0, s.wait_limit, c).map_err(|e| busy(row.entry, e))?;
        Ok(shared_read(
            record,
            &self.memory,
            s,
            self.id,
            word,
            buf,
            extent,
            c,
        ))
    }

    /// Writes this host's object `key`.
    pub(crate) fn write(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        object: &[u8],
        c: &Counters,
    ) -> Result<()> {
        let (row_id, mut row) = self.latch_row(s, hash, key, c, RwLock::write)?;
        c.add(Counter::Writes, 1);
        if row.entry == NO_ENTRY {
            match s.placement {
                Placement::Cxl => {
                    self.memory
                        .write(self.slot_offset(s, row_id as u32), object);
                    row.dirty = true;
                }
                Placement::Local => row.local[..object.len()].copy_from_slice(object),
            }
            return Ok(());
        }
        let record = self.geometry.index.record(pod, row.entry);
        let word =
            record::write_lock(record, 0, s.wait_limit, c).map_err(|e| busy(row.entry, e))?;
        shared_write(&self.memory, s, self.id, word, object, c);
        record::write_unlock(record, word, self.id, c);
        Ok(())
    }

    /// Read-modify-write of this host's object `key`: under the row's latch (and, when
    /// the row is shared, its record's write lock), `change` gets the whole object.
    /// `scratch` (one object's bytes) holds a copy when the row lives in CXL.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        change: &mut dyn FnMut(&mut [u8]),
        scratch: &mut [u8],
        c: &Counters,
    ) -> Result<()> {
        debug_assert_eq!(scratch.len(), s.object_bytes);
        let (row_id, mut row) = self.latch_row(s, hash, key, c, RwLock::write)?;
        c.add(Counter::Writes, 1);
        if row.entry == NO_ENTRY {
            // Unshared: only this host touches the row, and its cache is current.
            match s.placement {
                Placement::Cxl => {
                    let at = self.slot_offset(s, row_id as u32);
                    self.memory.read(at, scratch);
                    change(scratch);
                    self.memory.write(at, scratch);
                    row.dirty = true;
                }
                Placement::Local => change(&mut row.local[..s.object_bytes]),
            }
            return Ok(());
        }
        let record = self.geometry.index.record(pod, row.entry);
        let word =
            record::write_lock(record, 0, s.wait_limit, c).map_err(|e| busy(row.entry, e))?;
        shared_update(record, &self.memory, s, self.id, word, scratch, change, c);
        record::write_unlock(record, word, self.id, c);
        Ok(())
    }

    /// Creates object `key` in this host's partition, and shares it if the budget has
    /// a free entry (SCR nobody uses helps nobody: with no budget, no object is ever
    /// shared on demand), without unsharing another.
    pub(crate) fn create(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        object: &[u8],
        c: &Counters,
    ) -> Result<()> {
        let mut shard = self.shards[hash.shard(SHARDS)].write();
        if shard.find(hash.table(), |(k, _, _)| **k == *key).is_some() {
            return Err(Error::KeyExists);
        }
        let row_id = self.free_rows.lock().pop().ok_or(Error::Core(
            megalon_core::Error::SlotsExhausted {
                host: self.id as u32,
                slot_count: self.rows.len() as u64,
            },
        ))?;
        let generation = {
            let mut row = self.rows[row_id as usize].write();
            debug_assert!(!row.live && row.entry == NO_ENTRY);
            row.live = true;
            row.generation = row.generation.wrapping_add(1);
            row.hash = hash.value();
            match s.placement {
                Placement::Cxl => {
                    // Every line of the slot is overwritten: whatever this host cached of
                    // the slot before does not matter.
                    let at = self.slot_offset(s, row_id);
                    self.memory.write(at, object);
                    let mut done = object.len();
                    while done < s.object_bytes {
                        let n = (s.object_bytes - done).min(ZEROS.len());
                        self.memory.write(at + done as u64, &ZEROS[..n]);
                        done += n;
                    }
                    row.dirty = true;
                }
                Placement::Local => {
                    if row.local.is_empty() {
                        row.local = vec![0; s.object_bytes].into();
                    }
                    row.local[..object.len()].copy_from_slice(object);
                    row.local[object.len()..].fill(0);
                }
            }
            self.share_row(pod, s, row_id, &mut row, key, Evict::No, c)?;
            row.generation
        };
        shard.insert_unique(
            hash.table(),
            (key.into(), row_id, generation),
            |(k, _, _)| KeyHash::of(k).table(),
        );
        Ok(())
    }

    /// Deletes object `key` from this host's partition (unsharing it first).
    pub(crate) fn delete(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        c: &Counters,
    ) -> Result<()> {
        let mut shard = self.shards[hash.shard(SHARDS)].write();
        let Ok(found) = shard.find_entry(hash.table(), |(k, _, _)| **k == *key) else {
            return Err(Error::UnknownKey);
        };
        let row_id = found.get().1;
        let mut row = self.rows[row_id as usize].write();
        debug_assert!(row.live && row.generation == found.get().2);
        if row.entry != NO_ENTRY {
            let entry = row.entry;
            let record = self.geometry.index.record(pod, entry);
            // Wait for the readers and writer inside to leave; new ones wait for us and
            // then find the record free.
            let locked =
                record::write_lock(record, 0, s.wait_limit, c).map_err(|e| busy(entry, e))?;
            debug_assert!(locked & WRITER != 0);
            let mut share = self.share.lock();
            self.geometry.index.remove(pod, hash, entry, c);
            c.add_scr(record, ScrAccess::Update);
            // Release: the entry is unlinked before the record reads free.
            record.store(0, Ordering::Release);
            share.entry_row[entry as usize] = NO_ROW;
            share.free_entries.push(entry);
            self.shared_now.fetch_sub(1, Ordering::Relaxed);
            row.entry = NO_ENTRY;
        }
        row.live = false;
        row.dirty = false;
        drop(row);
        found.remove();
        self.free_rows.lock().push(row_id);
        Ok(())
    }

    // ---- sharing and unsharing ----

    /// Shares object `key` if it exists and is not shared (the server, for a request).
    /// Returns whether this call shared it (`false`: it was shared already).
    fn share_key(
        &self,
        pod: &Pod,
        s: &Settings,
        hash: KeyHash,
        key: &[u8],
        c: &Counters,
    ) -> Result<bool> {
        let (row_id, mut row) = self.latch_row(s, hash, key, c, RwLock::write)?;
        if row.entry != NO_ENTRY {
            return Ok(false); // shared by an earlier request
        }
        self.share_row(pod, s, row_id as u32, &mut row, key, Evict::Yes, c)
    }

    /// Shares row `row_id` (latched by the caller): takes a free entry, or (if `evict`
    /// says so) unshares another object with CLOCK to free one; makes the row's bytes
    /// reach memory; sets the record (only this host's bit) and links the entry into
    /// the index. Without a free entry and without evicting, leaves the row unshared.
    /// Returns whether it shared the row.
    #[allow(clippy::too_many_arguments)]
    fn share_row(
        &self,
        pod: &Pod,
        s: &Settings,
        row_id: u32,
        row: &mut Row,
        key: &[u8],
        evict: Evict,
        c: &Counters,
    ) -> Result<bool> {
        debug_assert_eq!(row.entry, NO_ENTRY);
        let mut share = self.share.lock();
        let entry = match (share.free_entries.pop(), evict) {
            (Some(entry), _) => entry,
            (None, Evict::Yes) => self.evict(pod, s, &mut share, c)?,
            (None, Evict::No) => return Ok(false),
        };
        let object_lines = lines(s.object_bytes as u64);
        let at = match s.placement {
            Placement::Cxl => {
                let at = self.slot_offset(s, row_id);
                if row.dirty {
                    self.memory.write_back(at, s.object_bytes);
                    self.memory.fence();
                    c.add(Counter::LinesWrittenBack, object_lines);
                    row.dirty = false;
                }
                at
            }
            Placement::Local => {
                // Every line of the slot is overwritten: what this host cached of it
                // for an earlier object does not matter.
                let at = self.slot_offset(s, entry);
                self.memory.write(at, &row.local);
                self.memory.write_back(at, s.object_bytes);
                self.memory.fence();
                c.add(Counter::LinesWrittenBack, object_lines);
                c.add(Counter::RowsCopied, 1);
                at
            }
        };
        let record = self.geometry.index.record(pod, entry);
        c.add_scr(record, ScrAccess::Update);
        // Release: the row's bytes reached memory (written back, fenced) before anyone
        // can lock the record; pairs with the Acquire of `read_lock`/`write_lock`.
        record.store(
            record::new_record(at - self.geometry.app_lnr_offset, self.id),
            Ordering::Release,
        );
        self.geometry
            .index
            .insert(pod, KeyHash::from_value(row.hash), key, entry, c);
        share.entry_row[entry as usize] = row_id;
        row.entry = entry;
        self.shared_now.fetch_add(1, Ordering::Relaxed);
        c.add(Counter::Shares, 1);
        Ok(true)
    }

    /// CLOCK: moves the hand over the entries, clearing set clock bits, and unshares the
    /// first object whose bit is clear and that nobody holds (its latch and its record's
    /// lock both free). Returns the entry it freed, or one freed by someone else while it
    /// waited. Gives up past the wait limit.
    ///
    /// It waits with the share state let go: a delete holds its object's row latch and
    /// record lock while it waits for the share state to free the entry, so a hand that
    /// held the share state while it waited for that entry to come free would wait out
    /// the limit, and the delete with it (and every access to the object behind it).
    fn evict(
        &self,
        pod: &Pod,
        s: &Settings,
        share: &mut MutexGuard<'_, ShareState>,
        c: &Counters,
    ) -> Result<u32> {
        let entries = share.entry_row.len() as u64;
        let mut backoff = Backoff::new(s.wait_limit);
        loop {
            if let Some(entry) = share.free_entries.pop() {
                return Ok(entry);
            }
            // Two turns: the first may only clear clock bits.
            for _ in 0..2 * entries + 1 {
                let entry = share.hand as u32;
                share.hand = (share.hand + 1) % entries;
                let row_id = share.entry_row[entry as usize];
                if row_id == NO_ROW {
                    continue;
                }
                let record = self.geometry.index.record(pod, entry);
                let word = record.load(Ordering::Relaxed);
                c.add_scr(record, ScrAccess::Load);
                if record::latched(word) {
                    continue;
                }
                if word & record::CLOCK != 0 {
                    if record::clear_clock(record, word, c) {
                        c.add(Counter::ClockBitsCleared, 1);
                    }
                    continue;
                }
                let Some(mut victim) = self.rows[row_id as usize].try_write() else {
                    continue;
                };
                debug_assert_eq!(victim.entry, entry);
                let Some(locked) = record::try_write_lock_unreferenced(record, c) else {
                    continue;
                };
                self.unshare(pod, s, share, row_id, &mut victim, entry, locked, c);
                return Ok(entry);
            }
            #[cfg(test)]
            self.hand_waits.fetch_add(1, Ordering::Relaxed);
            if !MutexGuard::unlocked(share, || backoff.snooze()) {
                return Err(Error::Core(megalon_core::Error::ScrRecordsExhausted {
                    records: entries,
                    in_use: entries,
                }));
            }
        }
    }

    /// Unshares `row` (latched) from `entry` (record locked as `locked`): unlinks the
    /// entry, brings the row back (HCMeta: invalidate this host's lines if another host
    /// wrote it; Local: copy it back to DRAM if it was written), frees the record. The
    /// entry is left for the caller.
    #[allow(clippy::too_many_arguments)]
    fn unshare(
        &self,
        pod: &Pod,
        s: &Settings,
        share: &mut ShareState,
        row_id: u32,
        row: &mut Row,
        entry: u32,
        locked: u64,
        c: &Counters,
    ) {
        self.geometry
            .index
            .remove(pod, KeyHash::from_value(row.hash), entry, c);
        let mine = locked & host_bit(self.id) != 0;
        let object_lines = lines(s.object_bytes as u64);
        match s.placement {
            Placement::Cxl => {
                if !mine {
                    // Another host wrote the row last: our lines are stale, and from now
                    // on we read the row without checking.
                    self.memory
                        .flush(self.slot_offset(s, row_id), s.object_bytes);
                    self.memory.fence();
                    c.add(Counter::LinesInvalidated, object_lines);
                }
            }
            Placement::Local => {
                if locked & DIRTY != 0 {
                    let at = self.slot_offset(s, entry);
                    if !mine {
                        self.memory.flush(at, s.object_bytes);
                        self.memory.fence();
                        c.add(Counter::LinesInvalidated, object_lines);
                    }
                    self.memory.read(at, &mut row.local);
                    c.add(Counter::RowsCopied, 1);
                }
            }
        }
        let record = self.geometry.index.record(pod, entry);
        c.add_scr(record, ScrAccess::Update);
        // Release: the entry is unlinked before the record reads free: a reader that
        // locked the record before and checks its bucket after sees the change.
        record.store(0, Ordering::Release);
        share.entry_row[entry as usize] = NO_ROW;
        row.entry = NO_ENTRY;
        self.shared_now.fetch_sub(1, Ordering::Relaxed);
        c.add(Counter::Unshares, 1);
    }

    // ---- serving requests ----

    /// Does what a request asks and says how it went.
    pub(crate) fn handle(
        &self,
        pod: &Pod,
        s: &Settings,
        request: &Request,
        buf: &[u8],
        c: &Counters,
    ) -> Response {
        let key = &buf[request.key.clone()];
        let hash = KeyHash::of(key);
        let op = Op::from_byte(request.op);
        if op.is_none()
            || key.len() > s.max_key_bytes
            || hash.owner(s.hosts) != self.id
            || request.payload.len() > s.object_bytes
        {
            return Response {
                status: STATUS_BAD_REQUEST,
                detail: 0,
            };
        }
        let result = match op.expect("checked") {
            Op::Share => self.share_key(pod, s, hash, key, c).map(u64::from),
            Op::Create => self
                .create(pod, s, hash, key, &buf[request.payload.clone()], c)
                .map(|()| {
                    // As Tigon does for a remote insert: the new object is shared for
                    // the host that made it (unsharing another if need be). If that
                    // fails, the create still stands.
                    let _ = self.share_key(pod, s, hash, key, c);
                    0
                }),
            Op::Delete => self.delete(pod, s, hash, key, c).map(|()| 0),
        };
        encode(result)
    }
}

fn retries_exhausted(s: &Settings) -> Error {
    Error::Core(megalon_core::Error::RetriesExhausted {
        retries: s.max_retries,
    })
}

/// A result (and its detail: for a share, whether it shared) as a response.
fn encode(result: Result<u64>) -> Response {
    let (status, detail) = match result {
        Ok(detail) => (STATUS_DONE, detail),
        Err(Error::UnknownKey) => (STATUS_NOT_FOUND, 0),
        Err(Error::KeyExists) => (STATUS_EXISTS, 0),
        Err(Error::Core(megalon_core::Error::SlotsExhausted { slot_count, .. })) => {
            (STATUS_NO_ROW, slot_count)
        }
        Err(Error::Core(megalon_core::Error::ScrRecordsExhausted { records, .. })) => {
            (STATUS_NO_ENTRY, records)
        }
        Err(Error::Core(megalon_core::Error::RecordBusy {
            record, waited_ms, ..
        })) => (
            STATUS_BUSY,
            u64::from(record) << 32 | waited_ms.min(u32::MAX.into()),
        ),
        Err(_) => (STATUS_RETRIES, 0),
    };
    Response { status, detail }
}

/// A response as a result (its detail), for the sender (`owner` answered it).
pub(crate) fn decode(response: Response, owner: usize, s: &Settings) -> Result<u64> {
    let detail = response.detail;
    Err(match response.status {
        STATUS_DONE => return Ok(detail),
        STATUS_NOT_FOUND => Error::UnknownKey,
        STATUS_EXISTS => Error::KeyExists,
        STATUS_NO_ROW => Error::Core(megalon_core::Error::SlotsExhausted {
            host: owner as u32,
            slot_count: detail,
        }),
        STATUS_NO_ENTRY => Error::Core(megalon_core::Error::ScrRecordsExhausted {
            records: detail,
            in_use: detail,
        }),
        STATUS_BUSY => Error::Core(megalon_core::Error::RecordBusy {
            record: (detail >> 32) as u32,
            waited_ms: detail & 0xffff_ffff,
            holder: None,
            holder_alive: None,
        }),
        STATUS_RETRIES => retries_exhausted(s),
        STATUS_SERVER_FAILED => Error::Core(megalon_core::Error::HostUnresponsive {
            host: owner as u32,
            waited_ms: 0,
        }),
        _ => panic!(
            "host {owner} refused a request as malformed (status {})",
            response.status
        ),
    })
}

/// Copies a shared row out under `record`'s read lock, taken as `word`, by host `host`,
/// and lets the lock go: if the host's bit is clear, its lines of the row are invalidated
/// first, and the bit is set on unlocking. Returns the bytes copied. The lock is let go on
/// every way out, a panic of the caller's `extent` included (without setting the bit).
#[allow(clippy::too_many_arguments)]
pub(crate) fn shared_read(
    record: &AtomicU64,
    memory: &Memory,
    s: &Settings,
    host: usize,
    word: u64,
    buf: &mut [u8],
    extent: Extent<'_>,
    c: &Counters,
) -> usize {
    struct UnlockOnUnwind<'a> {
        record: &'a AtomicU64,
        word: u64,
        c: &'a Counters,
        armed: bool,
    }
    impl Drop for UnlockOnUnwind<'_> {
        fn drop(&mut self) {
            if self.armed {
                record::read_unlock(self.record, self.word, 0, self.c);
            }
        }
    }
    let mut guard = UnlockOnUnwind {
        record,
        word,
        c,
        armed: true,
    };
    let at = s.app_lnr_offset + record::row_offset(word);
    let mine = host_bit(host);
    let fresh = word & mine == 0;
    if fresh {
        memory.flush(at, s.object_bytes);
        // The invalidation is done before the loads of the copy.
        memory.fence();
        c.add(Counter::LinesInvalidated, lines(s.object_bytes as u64));
    }
    let read = copy_out(s.object_bytes, buf, extent, |from, out| {
        memory.read(at + from as u64, out)
    });
    guard.armed = false;
    record::read_unlock(record, word, if fresh { mine } else { 0 }, c);
    read
}

/// Writes `object` at the start of a shared row under a write lock taken as `word`, by
/// host `host`: if the host's bit is clear, the lines the write does not fully cover are
/// invalidated first (a partial line is filled from the cache, and a stale fill would go
/// back to memory around the new bytes; the rest must not be trusted once the bit is
/// set); then the written lines are written back and fenced.
pub(crate) fn shared_write(
    memory: &Memory,
    s: &Settings,
    host: usize,
    word: u64,
    object: &[u8],
    c: &Counters,
) {
    let at = s.app_lnr_offset + record::row_offset(word);
    if word & host_bit(host) == 0 {
        let covered = object.len() / LINE_BYTES as usize * LINE_BYTES as usize;
        if covered < s.object_bytes {
            memory.flush(at + covered as u64, s.object_bytes - covered);
            memory.fence();
            c.add(
                Counter::LinesInvalidated,
                lines((s.object_bytes - covered) as u64),
            );
        }
    }
    memory.write(at, object);
    memory.write_back(at, object.len());
    memory.fence();
    c.add(Counter::LinesWrittenBack, lines(object.len() as u64));
}

/// Read-modify-write of a shared row under `record`'s write lock, taken as `word`, by
/// host `host`: the row is copied into `scratch` (its lines invalidated first if the
/// host's bit is clear: they may be stale), `change` changes the copy, and the copy is
/// written as [`shared_write`] writes. The lock stays held for the caller to release;
/// a panic of `change` abandons it (nothing was written yet).
#[allow(clippy::too_many_arguments)]
pub(crate) fn shared_update(
    record: &AtomicU64,
    memory: &Memory,
    s: &Settings,
    host: usize,
    word: u64,
    scratch: &mut [u8],
    change: &mut dyn FnMut(&mut [u8]),
    c: &Counters,
) {
    struct AbandonOnUnwind<'a> {
        record: &'a AtomicU64,
        word: u64,
        c: &'a Counters,
        armed: bool,
    }
    impl Drop for AbandonOnUnwind<'_> {
        fn drop(&mut self) {
            if self.armed {
                record::write_abandon(self.record, self.word, self.c);
            }
        }
    }
    let at = s.app_lnr_offset + record::row_offset(word);
    if word & host_bit(host) == 0 {
        memory.flush(at, s.object_bytes);
        // The invalidation is done before the loads of the copy.
        memory.fence();
        c.add(Counter::LinesInvalidated, lines(s.object_bytes as u64));
    }
    memory.read(at, scratch);
    let mut guard = AbandonOnUnwind {
        record,
        word,
        c,
        armed: true,
    };
    change(scratch);
    guard.armed = false;
    shared_write(memory, s, host, word, scratch, c);
}
