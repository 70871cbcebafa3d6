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

use std::collections::HashMap;
use std::sync::Arc;

use super::object::Guard;
use super::{Host, Shared};
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host::HostId;
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::record::{RecordWord, Records};
use crate::replica::Outcome;
use crate::rpc::{Response, RingGeometry, Tally};
use crate::sync::{AtomicU8, Mutex, Ordering, RwLock};

/// The RPC that asks a host to move an object from its DRAM back to CXL.
const OP_MOVE_BACK: u8 = 1;
/// Answers: moved back; not held here (already back, or never was); failed.
const MOVED_BACK: u8 = 1;
const NOT_HERE: u8 = 2;
const FAILED: u8 = 3;

/// An object in this host's partition. `None` once it moved back to CXL: a thread that
/// found it in the map before then looks the key up again.
pub(super) struct LocalObject {
    key: Box<[u8]>,
    bytes: RwLock<Option<Box<[u8]>>>,
}

/// What one host keeps in its DRAM for partitions and copies.
pub(super) struct Local {
    partition_after: u8,
    copy_after: u8,
    /// Objects in this host's partition, by slot.
    partition: RwLock<HashMap<u64, Arc<LocalObject>>>,
    /// Copies of read-shared objects, by slot. Inserted under the index's read lock after
    /// checking the object's stamp; removed by replay, under the index's write lock.
    copies: RwLock<HashMap<u64, Box<[u8]>>>,
    /// Per slot: this host's consecutive accesses (partitions).
    streaks: Box<[AtomicU8]>,
    /// Per slot: this host's reads since the object last changed (copies).
    reads: Box<[AtomicU8]>,
    /// One move (to or from this host) at a time.
    moving: Mutex<()>,
}

fn counts(on: bool, slots: u64) -> Box<[AtomicU8]> {
    let len = if on { slots as usize } else { 0 };
    (0..len).map(|_| AtomicU8::new(0)).collect()
}

impl Local {
    /// The host's local state for a pod with `slots` slots, if either option is on.
    pub(super) fn new(partition_after: u32, copy_after: u32, slots: u64) -> Option<Self> {
        if partition_after == 0 && copy_after == 0 {
            return None;
        }
        // The configuration keeps both at most u8::MAX.
        let byte = |n: u32| u8::try_from(n).expect("validated by the pod's configuration");
        Some(Self {
            partition_after: byte(partition_after),
            copy_after: byte(copy_after),
            partition: RwLock::new(HashMap::new()),
            copies: RwLock::new(HashMap::new()),
            streaks: counts(partition_after > 0, slots),
            reads: counts(copy_after > 0, slots),
            moving: Mutex::new(()),
        })
    }

    /// Objects in this host's partition, and copies it holds, now.
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.partition.read().len(), self.copies.read().len())
    }

    /// Replay applied an event about the object in `slot`: its copy, if any, is no
    /// longer valid. Called under the index's write lock. Returns whether one was dropped.
    pub(super) fn invalidate_copy(&self, slot: u64) -> bool {
        if self.copy_after == 0 {
            return false;
        }
        self.reads[slot as usize].store(0, Ordering::Relaxed);
        self.copies.write().remove(&slot).is_some()
    }
}

/// Where a read copies an object's bytes from.
pub(super) enum Source<'a> {
    /// This host's DRAM: the object in its partition, or a copy.
    Dram(&'a [u8]),
    /// The object's slot in the pod, at this offset, through this host's cache.
    Pod(&'a Memory, u64),
}

impl Source<'_> {
    /// Copies the object's bytes `at..at + buf.len()` into `buf`.
    pub(super) fn copy(&self, at: usize, buf: &mut [u8]) {
        match self {
            Source::Dram(bytes) => buf.copy_from_slice(&bytes[at..at + buf.len()]),
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

/// What a read or write found when it looked the key up.
enum Place {
    /// In this host's partition.
    Mine(Arc<LocalObject>),
    /// In this host's copies: the bytes were copied out already (their length).
    Copied(usize),
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

impl Shared {
    /// Reads object `key` with `copy`, which gets where the bytes are and the object's
    /// length and returns how many bytes it copied: from this host's partition, from a
    /// copy, or from CXL with the read protocol (retried within the bound).
    pub(super) fn read_via(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut dyn FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<(usize, super::Done)> {
        let max_retries = self.options.max_retries;
        for retries in 0..=max_retries {
            let done = super::Done { retries };
            if let Some(local) = &self.local {
                match self.place_for_read(local, key, c, copy)? {
                    Place::Mine(object) => {
                        if let Some(bytes) = object.bytes.read().as_deref() {
                            let copied = copy(&Source::Dram(bytes), bytes.len());
                            c.add(Counter::LocalReads, 1);
                            c.add(Counter::Reads, 1);
                            return Ok((copied, done));
                        }
                        continue; // moved back meanwhile: look again
                    }
                    Place::Copied(copied) => return Ok((copied, done)),
                    Place::Held(owner) => {
                        self.bring_back(owner, key, c)?;
                        continue;
                    }
                    Place::Cxl => {}
                }
            }
            let ticket = self.read_start(key, c)?;
            let copied = copy(&Source::Pod(&self.memory, ticket.offset()), ticket.len());
            if self.read_end(&ticket, c)? {
                if let Some(local) = &self.local {
                    self.after_cxl_access(local, key, ticket.slot(), Some(ticket.guard()), c)?;
                }
                return Ok((copied, done));
            }
        }
        Err(Error::RetriesExhausted {
            retries: max_retries,
        })
    }

    /// Looks `key` up for a read (after the tail check), copying it out if this host
    /// has a copy.
    fn place_for_read(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut dyn FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<Place> {
        self.catch_up()?;
        let index = self.replica.index.read();
        let entry = index.lookup(key).ok_or(Error::UnknownKey)?;
        Ok(match entry.local_owner {
            Some(owner) if owner == self.id => match local.partition.read().get(&entry.slot) {
                Some(object) => Place::Mine(Arc::clone(object)),
                // The move's event is applied but not yet in the map: only between a
                // failed move's event and its cleanup, which holds `moving`.
                None => Place::Cxl,
            },
            Some(owner) => Place::Held(owner),
            None => {
                // Under the index's read lock: replay cannot drop the copy meanwhile.
                if let Some(bytes) = local.copies.read().get(&entry.slot) {
                    let copied = copy(&Source::Dram(bytes), bytes.len());
                    c.add(Counter::CopyReads, 1);
                    c.add(Counter::Reads, 1);
                    Place::Copied(copied)
                } else {
                    Place::Cxl
                }
            }
        })
    }

    /// Looks `key` up for a write (after the tail check).
    fn place_for_write(&self, local: &Local, key: &[u8]) -> Result<Place> {
        self.catch_up()?;
        let index = self.replica.index.read();
        let entry = index.lookup(key).ok_or(Error::UnknownKey)?;
        Ok(match entry.local_owner {
            Some(owner) if owner == self.id => match local.partition.read().get(&entry.slot) {
                Some(object) => Place::Mine(Arc::clone(object)),
                None => Place::Cxl,
            },
            Some(owner) => Place::Held(owner),
            None => Place::Cxl,
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
        let mut retries = 0u32;
        let mut change = Some(change);
        if let Some(local) = &self.local {
            loop {
                match self.place_for_write(local, key)? {
                    Place::Mine(object) => {
                        if let Some(bytes) = object.bytes.write().as_deref_mut() {
                            let change = change.take().expect("called once");
                            let result = change(Target::Dram(bytes));
                            c.add(Counter::LocalWrites, 1);
                            c.add(Counter::Writes, 1);
                            return Ok((result, super::Done { retries }));
                        }
                    }
                    Place::Held(owner) => self.bring_back(owner, key, c)?,
                    Place::Cxl | Place::Copied(_) => break,
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
        let result = change(Target::Pod(&self.memory, state.offset, state.len));
        let slot = state.slot;
        self.write_end(state, c)?;
        if let Some(local) = &self.local {
            self.after_cxl_access(local, key, slot, None, c)?;
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
    /// a copy.
    fn after_cxl_access(
        &self,
        local: &Local,
        key: &[u8],
        slot: u64,
        guard: Option<Guard>,
        c: &ThreadCounters,
    ) -> Result<()> {
        if local.partition_after > 0 && self.note_access(local, slot) >= local.partition_after {
            local.streaks[slot as usize].store(0, Ordering::Relaxed);
            self.move_here(local, key, c)?;
            return Ok(());
        }
        if local.copy_after > 0 && matches!(guard, Some(Guard::Log)) {
            let reads = &local.reads[slot as usize];
            let count = reads.load(Ordering::Relaxed).saturating_add(1);
            reads.store(count, Ordering::Relaxed);
            if count >= local.copy_after {
                self.make_copy(local, key, c)?;
            }
        }
        Ok(())
    }

    /// Notes an access of this host to the object in `slot`: reads the slot's last
    /// accessor from LNR and, if it is another host, writes this host there. Returns this
    /// host's consecutive accesses so far. Sloppy on purpose: two hosts' bytes share a
    /// line, and a write-back can put an older byte back; the count is only a hint.
    fn note_access(&self, local: &Local, slot: u64) -> u8 {
        let offset = self.pod.layout().accessor_offset(slot);
        let me = u8::try_from(self.id + 1).expect("host ids fit a byte");
        let mut last = [0u8];
        self.memory.flush(offset, 1);
        self.memory.fence();
        self.memory.read(offset, &mut last);
        let streak = &local.streaks[slot as usize];
        if last[0] == me {
            let count = streak.load(Ordering::Relaxed).saturating_add(1);
            streak.store(count, Ordering::Relaxed);
            count
        } else {
            self.memory.write(offset, &[me]);
            self.memory.write_back(offset, 1);
            streak.store(1, Ordering::Relaxed);
            1
        }
    }

    /// Moves object `key` from its CXL slot into this host's DRAM, if it is in CXL and
    /// no write is in progress. Returns whether it moved.
    fn move_here(&self, local: &Local, key: &[u8], c: &ThreadCounters) -> Result<bool> {
        let _moving = local.moving.lock();
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
        let moved = self.copy_and_move(local, key, &entry, c);
        if let Some((record, word)) = locked {
            records.store(record, word);
            c.add(Counter::ScrAtomics, 1);
        }
        moved
    }

    /// The body of [`Shared::move_here`], with the record (if any) locked.
    fn copy_and_move(
        &self,
        local: &Local,
        key: &[u8],
        entry: &crate::replica::IndexEntry,
        c: &ThreadCounters,
    ) -> Result<bool> {
        // An event about the object between the lookup and the lock (an alloc, a write's
        // wrap): start from what is current another time.
        if !self.unchanged_since(entry)? {
            return Ok(false);
        }
        let (offset, len) = self.place(entry);
        let mut bytes = vec![0u8; len].into_boxed_slice();
        self.invalidate(offset, len, c);
        self.memory.read(offset, &mut bytes);
        let object = Arc::new(LocalObject {
            key: key.into(),
            bytes: RwLock::new(Some(bytes)),
        });
        // In the map before the event: once a replica says "here", this host's threads
        // find the object.
        local.partition.write().insert(entry.slot, object);
        let outcome = self.submit(&Event::MoveToHost {
            key,
            host: self.id,
            stamp: entry.stamp,
        });
        if !matches!(outcome, Ok(Outcome::Moved)) {
            local.partition.write().remove(&entry.slot);
            c.add(Counter::MovesLost, 1);
            return outcome.map(|_| false);
        }
        c.add(Counter::MovesToHost, 1);
        Ok(true)
    }

    /// Moves object `key` from this host's DRAM back to its CXL slot, if this host holds
    /// it: writes the bytes into the slot and back to memory, then appends `MoveToCxl`.
    /// Returns whether it did.
    pub(super) fn move_back(&self, key: &[u8], c: &ThreadCounters) -> Result<bool> {
        let Some(local) = &self.local else {
            return Ok(false);
        };
        let _moving = local.moving.lock();
        self.catch_up()?;
        let Some(entry) = self.replica.index.read().lookup(key) else {
            return Ok(false);
        };
        if entry.local_owner != Some(self.id) {
            return Ok(false);
        }
        let Some(object) = local.partition.read().get(&entry.slot).cloned() else {
            return Ok(false);
        };
        // Local readers and writers wait until the object is back, then look again.
        let mut bytes = object.bytes.write();
        let Some(data) = bytes.as_deref() else {
            return Ok(false);
        };
        let (offset, len) = self.place(&entry);
        // Lines of the slot cached from before the object left are old: drop them before
        // writing (whole lines are written, but a write into a cached line keeps the rest).
        self.memory.flush(offset, len);
        self.memory.fence();
        self.memory.write(offset, &data[..len]);
        // The bytes reach memory before the event tells anyone to read them there.
        if !mutants::skipped(Step::MoveBackWritesBack) {
            self.memory.write_back(offset, len);
            c.add(Counter::LinesWrittenBack, Self::lines(len));
        }
        self.memory.fence();
        match self.submit(&Event::MoveToCxl { key })? {
            Outcome::Moved => {
                *bytes = None;
                drop(bytes);
                local.partition.write().remove(&entry.slot);
                if local.partition_after > 0 {
                    local.streaks[entry.slot as usize].store(0, Ordering::Relaxed);
                }
                c.add(Counter::MoveBacks, 1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Moves every object in this host's DRAM back to CXL (a host that leaves). Errors
    /// are the first one met; the rest are still tried.
    pub(super) fn move_all_back(&self) -> Result<()> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let keys: Vec<Box<[u8]>> = local
            .partition
            .read()
            .values()
            .map(|object| object.key.clone())
            .collect();
        self.with_counters(|c| {
            let mut first_error = None;
            for key in keys {
                if let Err(error) = self.move_back(&key, c) {
                    first_error.get_or_insert(error);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// Makes a copy of object `key` in this host's DRAM if it is read-shared.
    fn make_copy(&self, local: &Local, key: &[u8], c: &ThreadCounters) -> Result<()> {
        let ticket = self.read_start(key, c)?;
        if !matches!(ticket.guard(), Guard::Log) {
            return Ok(());
        }
        let mut bytes = vec![0u8; ticket.len()].into_boxed_slice();
        self.memory.read(ticket.offset(), &mut bytes);
        // The post-read check of `read_end`, then the insert under the same read lock:
        // replay cannot apply an event about the object in between.
        crate::sync::fence(Ordering::Acquire);
        self.catch_up()?;
        let index = self.replica.index.read();
        let Some(entry) = index.current(ticket.handle(), ticket.stamp()) else {
            return Ok(());
        };
        if entry.record.is_none() && entry.local_owner.is_none() {
            local.copies.write().insert(entry.slot, bytes);
            c.add(Counter::CopiesMade, 1);
        }
        Ok(())
    }

    /// Asks `owner`, which holds object `key` in its DRAM, to move it back to CXL (this
    /// host itself: moves it), and returns once it has answered. The caller then looks
    /// the key up again.
    pub(super) fn bring_back(&self, owner: HostId, key: &[u8], c: &ThreadCounters) -> Result<()> {
        if owner == self.id {
            self.move_back(key, c)?;
            return Ok(());
        }
        let rpc = self
            .rpc
            .as_ref()
            .expect("a pod with local partitions has RPC rings");
        if super::table_state(&self.pod, owner) == super::TableState::Free {
            // Nobody holds that id: the object's bytes left with its last holder.
            return Err(Error::HostUnresponsive {
                host: owner,
                waited_ms: 0,
            });
        }
        let mut buf = vec![0u8; rpc.entry_bytes];
        c.add(Counter::RpcsSent, 1);
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
                let _ = self.serve_rpcs();
            },
        );
        match response {
            Ok(Response { status, .. }) if status == MOVED_BACK || status == NOT_HERE => Ok(()),
            Ok(_) => Err(Error::HostUnresponsive {
                host: owner,
                waited_ms: 0,
            }),
            Err(waited_ms) => Err(Error::HostUnresponsive {
                host: owner,
                waited_ms,
            }),
        }
    }

    /// Serves the requests waiting in this host's ring. Returns how many it served.
    pub(super) fn serve_rpcs(&self) -> Result<u64> {
        let Some(rpc) = &self.rpc else {
            return Ok(0);
        };
        if !self.serving.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(0);
        }
        let ring = &rpc.rings[self.id as usize];
        if !ring.pending(&self.pod, &()) {
            return Ok(0);
        }
        // One server at a time: another thread of this host is at it.
        let Some(_serving) = self.rpc_server.try_lock() else {
            return Ok(0);
        };
        self.with_counters(|c| {
            let mut buf = vec![0u8; rpc.entry_bytes];
            let mut served = 0;
            while let Some(claimed) = ring.claim(&self.pod, c) {
                let request = ring.read(&self.memory, claimed, &mut buf, c);
                let status = match request.op {
                    OP_MOVE_BACK => match self.move_back(&buf[request.key.clone()], c) {
                        Ok(true) => MOVED_BACK,
                        Ok(false) => NOT_HERE,
                        Err(_) => FAILED,
                    },
                    _ => FAILED,
                };
                ring.respond(
                    &self.pod,
                    &self.memory,
                    claimed,
                    &mut buf,
                    Response { status, detail: 0 },
                    c,
                );
                c.add(Counter::RpcsServed, 1);
                served += 1;
            }
            Ok(served)
        })
    }
}
