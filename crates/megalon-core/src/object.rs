//! The object protocol: `read_start`/`read_end`, `write_start`/`write_end`, and delete with
//! coherence records, exactly as DESIGN section 8 lays them out, plus the safe calls built
//! on them (read into a buffer, write from a slice, closure forms) that retry within a
//! bound and report their retries.
//!
//! Dual-path coherence. While an object's record stays allocated, the record guards it: a
//! reader compares the record's counter with its host counter before the read (and
//! invalidates on a mismatch) and after it (and retries on a change). Whenever the
//! object's allocation state changes (alloc, dealloc, create, delete, counter wrap-around,
//! move), the log event itself tells every host: replay drops the object's cached lines
//! and makes the host counter unknown, and a read that overlapped the event sees the
//! object's stamp change and retries.
//!
//! Race cases, each next to the code that handles it:
//!
//! - A reader's index says "record `r`" but a deallocation already freed `r` (the reader's
//!   replica has not applied the event yet): the record reads free, or in use by another
//!   object with another counter; either way the post-read check fails, and the retry's
//!   tail check applies the event.
//! - A writer looked the object up, then an event about it was applied before it took
//!   the lock (say the record was deallocated and reallocated): after locking it catches
//!   up again, finds the stamp changed, restores the record and starts over.
//! - Two hosts allocate a record for the same object: both claimed a free record, both
//!   append; the second in log order loses, frees its record and uses the winner's.
//!
//! A pod with [`Coherence::AllLog`](crate::Coherence) has no records: its reads, writes
//! and deletes take the path in `all_log.rs`, chosen by one branch at the top of each
//! operation.

use super::local::Target;
use super::{Host, Settle, Shared};
use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::{Counter, EventCounts, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::{Event, NO_RECORD};
use crate::mutants::{self, Step};
use crate::record::{RecordWord, Records};
use crate::replica::{IndexEntry, Outcome};
use crate::sync::{AtomicU64, Ordering};

#[path = "all_log.rs"]
mod all_log;

/// Random probes for a free record before a linear scan.
const FREE_RECORD_PROBES: u32 = 64;
/// Records the reclaimer samples to choose one to deallocate.
const RECLAIM_SAMPLES: u32 = 8;
/// Rounds of sampling a synchronous reclaim tries before giving up.
const RECLAIM_ROUNDS: u32 = 64;
/// Records the background reclaimer frees per pump round at most.
const RECLAIM_BATCH: u32 = 32;

/// A read in progress, from [`Host::read_start`]: where the object's bytes are and what
/// [`Host::read_end`] checks. Copy the bytes with [`ReadTicket::read`]; trust the copy only
/// once `read_end` says so.
#[derive(Clone, Copy, Debug)]
#[must_use = "a read is only valid once read_end says so"]
pub struct ReadTicket<'h> {
    host: &'h Host,
    state: ReadState,
}

/// What a read ticket holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReadState {
    pub(super) handle: u32,
    pub(super) stamp: u64,
    pub(super) slot: u64,
    pub(super) offset: u64,
    pub(super) len: usize,
    /// What `read_end` checks besides the stamp.
    pub(super) guard: Guard,
}

/// What guards a read besides the object's stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    /// A read-shared object: only the log can change it, and the stamp says whether it did.
    Log,
    /// A read-write-shared object: its record and the (even) counter seen at the start.
    Record { record: u32, counter: u32 },
    /// An object in a pod with AllLog coherence: the replicated counter seen at the start
    /// (the stamp guards it; the counter is what this host's lines are once it succeeds).
    Replicated { counter: u32 },
}

/// Checks that `at..at + len` lies within an object of `object_bytes`.
fn within(at: usize, len: usize, object_bytes: usize) -> Result<()> {
    if at.checked_add(len).is_none_or(|end| end > object_bytes) {
        return Err(Error::OutsideObject {
            at,
            len,
            object_bytes,
        });
    }
    Ok(())
}

impl ReadTicket<'_> {
    /// Copies the object's bytes `at..at + buf.len()` into `buf`: the way to read under a
    /// ticket. A range past the object's end is [`Error::OutsideObject`]. The copy may be
    /// torn until [`Host::read_end`] validates it.
    pub fn read(&self, at: usize, buf: &mut [u8]) -> Result<()> {
        within(at, buf.len(), self.state.len)?;
        self.host.memory().read(self.state.offset + at as u64, buf);
        Ok(())
    }

    /// Offset of the object's bytes in the pod, for the raw, unchecked [`crate::Memory`]
    /// layer ([`ReadTicket::read`] is the checked way).
    pub fn offset(&self) -> u64 {
        self.state.offset
    }

    /// Bytes of the object (the slot size).
    pub fn len(&self) -> usize {
        self.state.len
    }

    /// Objects are never empty: always `false`.
    pub fn is_empty(&self) -> bool {
        self.state.len == 0
    }
}

impl ReadState {
    pub(super) fn slot(&self) -> u64 {
        self.slot
    }

    pub(super) fn guard(&self) -> Guard {
        self.guard
    }
}

/// A write in progress: the object's record is locked (counter odd) until
/// [`Host::write_end`]. Change the object with [`WriteTicket::write`]. Dropping the ticket
/// ends the write as `write_end` would.
#[must_use = "the record stays locked until write_end"]
pub struct WriteTicket<'h> {
    host: &'h Host,
    state: Option<WriteState>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct WriteState {
    handle: u32,
    pub(super) slot: u64,
    pub(super) offset: u64,
    pub(super) len: usize,
    record: u32,
    counter_before: u32,
}

impl WriteTicket<'_> {
    fn state(&self) -> &WriteState {
        self.state.as_ref().expect("live ticket")
    }

    /// Writes `bytes` into the object at byte `at`: the way to write under a ticket. A
    /// range past the object's end is [`Error::OutsideObject`] and writes nothing (a write
    /// through the raw [`crate::Memory`] layer would overwrite the next object).
    pub fn write(&self, at: usize, bytes: &[u8]) -> Result<()> {
        let state = self.state();
        within(at, bytes.len(), state.len)?;
        self.host.memory().write(state.offset + at as u64, bytes);
        Ok(())
    }

    /// Copies the object's bytes `at..at + buf.len()` into `buf` (the current version:
    /// no one else writes while the lock is held). A range past the object's end is
    /// [`Error::OutsideObject`].
    pub fn read(&self, at: usize, buf: &mut [u8]) -> Result<()> {
        let state = self.state();
        within(at, buf.len(), state.len)?;
        self.host.memory().read(state.offset + at as u64, buf);
        Ok(())
    }

    /// Offset of the object's bytes in the pod, for the raw, unchecked [`crate::Memory`]
    /// layer ([`WriteTicket::write`] is the checked way).
    pub fn offset(&self) -> u64 {
        self.state().offset
    }

    /// Bytes of the object (the slot size).
    pub fn len(&self) -> usize {
        self.state().len
    }

    /// The object's coherence record, locked by this write; [`NO_RECORD`] in a pod with
    /// [`Coherence::AllLog`](crate::Coherence), where the lock is replicated through the
    /// log instead.
    pub fn record(&self) -> u32 {
        self.state().record
    }

    /// Objects are never empty: always `false`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            // The caller may have written part of the object (or panicked while writing):
            // finish the write so that the bytes reach memory and the record is unlocked.
            // In a split pod this cannot fail; in an AllLog pod a failed unlock append is
            // retried by the pump.
            let shared = &self.host.shared;
            let _ = shared.with_counters(|c| shared.write_end(state, c));
        }
    }
}

/// Why an object is losing its coherence record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// It turns read-shared: reclaimed (background or to make room) or
    /// [`Host::make_read_shared`].
    MakeReadShared,
    /// It is being deleted.
    Delete,
}

/// An object about to lose its coherence record, handed to the host's
/// [`ReleaseHook`](crate::ReleaseHook) with the record locked by the caller: no write can
/// start on it until the hook returns, and the last write's bytes are in memory.
pub struct Releasing<'a> {
    shared: &'a Shared,
    key: &'a [u8],
    record: u32,
    offset: u64,
    len: usize,
    reason: ReleaseReason,
}

impl Releasing<'_> {
    /// The object's key.
    pub fn key(&self) -> &[u8] {
        self.key
    }

    /// The record it is losing (locked now).
    pub fn record(&self) -> u32 {
        self.record
    }

    /// Why.
    pub fn reason(&self) -> ReleaseReason {
        self.reason
    }

    /// Copies the object's first `buf.len()` bytes (at most the slot size) into `buf`,
    /// from memory: this host's cached lines of it are invalidated first.
    pub fn read(&self, buf: &mut [u8]) {
        let len = buf.len().min(self.len);
        self.shared.memory.flush(self.offset, len);
        // The invalidation is done before the loads; the lock's acquire (our CAS) already
        // ordered them after the last writer's release.
        self.shared.memory.fence();
        self.shared.memory.read(self.offset, &mut buf[..len]);
    }
}

/// What a completed read or write cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Times the operation started over (reads: failed `read_end`; writes: backed out).
    pub retries: u32,
}

impl Host {
    /// Starts reading object `key` (steps 1-3 of the read path). Copy the object's bytes
    /// with [`crate::Memory::read`] at [`ReadTicket::offset`], then call
    /// [`Host::read_end`]; trust the copy only if it says so.
    pub fn read_start(&self, key: &[u8]) -> Result<ReadTicket<'_>> {
        self.shared.check_key(key)?;
        let state = self
            .shared
            .with_counters(|c| self.shared.read_start(key, c))?;
        Ok(ReadTicket { host: self, state })
    }

    /// Ends a read (steps 4-6): `true` if the bytes copied since `read_start` are a valid
    /// version of the object, `false` if the read must start over.
    pub fn read_end(&self, ticket: ReadTicket<'_>) -> Result<bool> {
        assert!(
            std::ptr::eq(ticket.host, self),
            "a read ticket ends on the host that started it"
        );
        self.shared
            .with_counters(|c| self.shared.read_end(&ticket.state, c))
    }

    /// Starts writing object `key`: allocates a record if it has none, takes the lock,
    /// and makes the counter odd. Write with [`crate::Memory::write`] at
    /// [`WriteTicket::offset`], then call [`Host::write_end`].
    pub fn write_start(&self, key: &[u8]) -> Result<WriteTicket<'_>> {
        self.shared.check_key(key)?;
        let state = self
            .shared
            .with_counters(|c| self.shared.write_start(key, c))?;
        Ok(WriteTicket {
            host: self,
            state: Some(state),
        })
    }

    /// Ends a write: the object's lines reach memory, the counter is even again (a wrap
    /// event first if it wrapped around), the lock is released.
    pub fn write_end(&self, mut ticket: WriteTicket<'_>) -> Result<()> {
        let state = ticket.state.take().expect("live ticket");
        self.shared
            .with_counters(|c| self.shared.write_end(state, c))
    }

    /// Reads object `key` into `buf` (its first `buf.len()` bytes), retrying within the
    /// host's bound. `buf` may be at most the slot size. With local partitions or copies
    /// on, the bytes may come from this host's DRAM.
    pub fn read(&self, key: &[u8], buf: &mut [u8]) -> Result<Done> {
        self.shared.check_key(key)?;
        self.shared.check_len(buf.len())?;
        self.shared.with_counters(|c| {
            let (_, done) = self.shared.read_via(key, c, &mut |source, _| {
                source.copy(0, buf);
                buf.len()
            })?;
            Ok(done)
        })
    }

    /// Reads the whole object `key` and hands a private, validated copy to `f`.
    pub fn read_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<(R, Done)> {
        let mut buf = vec![0u8; self.shared.pod.config().slot_size_bytes as usize];
        let done = self.read(key, &mut buf)?;
        Ok((f(&buf), done))
    }

    /// Writes `data` at the start of object `key`.
    pub fn write(&self, key: &[u8], data: &[u8]) -> Result<Done> {
        self.write_at(key, 0, data)
    }

    /// Writes `data` at byte `at` of object `key` (the rest of the object is kept).
    pub fn write_at(&self, key: &[u8], at: usize, data: &[u8]) -> Result<Done> {
        self.shared.check_key(key)?;
        self.shared.check_len(at.saturating_add(data.len()))?;
        self.shared.with_counters(|c| {
            let ((), done) = self.shared.write_via(key, c, |target| match target {
                Target::Dram(bytes) => bytes[at..at + data.len()].copy_from_slice(data),
                Target::Pod(memory, offset, _) => memory.write(offset + at as u64, data),
            })?;
            Ok(done)
        })
    }

    /// Read-modify-write of the whole object `key` under its lock: `f` gets the current
    /// bytes and changes them in place. `f` must not call this host's object API: it runs
    /// holding the object (its record, or its local lock in this host's DRAM).
    pub fn update<R>(&self, key: &[u8], f: impl FnOnce(&mut [u8]) -> R) -> Result<(R, Done)> {
        self.shared.check_key(key)?;
        self.shared.with_counters(|c| {
            self.shared.write_via(key, c, |target| match target {
                Target::Dram(bytes) => f(bytes),
                Target::Pod(memory, offset, len) => {
                    // Under the lock the object cannot change, and write_start
                    // invalidated any stale line: this copy is the current version.
                    let mut buf = vec![0u8; len];
                    memory.read(offset, &mut buf);
                    let result = f(&mut buf);
                    memory.write(offset, &buf);
                    result
                }
            })
        })
    }

    /// Makes object `key` read-shared: deallocates its coherence record (through the log)
    /// if it has one and no write is in progress. Returns whether it did. The reclaimer
    /// does this to the least-written objects when records run short.
    pub fn make_read_shared(&self, key: &[u8]) -> Result<bool> {
        self.shared.check_key(key)?;
        self.shared.with_counters(|c| {
            self.shared.catch_up()?;
            let entry = self.shared.replica.index.read().lookup(key);
            match entry.ok_or(Error::UnknownKey)?.record {
                Some(record) => self.shared.deallocate(key, record, c),
                None => Ok(false),
            }
        })
    }

    /// The key of the object that holds `record`, as this host's replica knows it after
    /// catching up with the log; `None` if no object does (free, or claimed by an
    /// allocation whose event is not in the log yet).
    pub fn record_owner(&self, record: u32) -> Result<Option<Vec<u8>>> {
        self.shared.catch_up()?;
        Ok(self.shared.replica.index.read().record_owner_key(record))
    }

    /// Event counts of the calling thread on this host.
    pub fn thread_events(&self) -> EventCounts {
        self.shared.with_counters(|c| c.snapshot())
    }

    /// Event counts of every thread that has worked on this host (its pump included).
    pub fn per_thread_events(&self) -> Vec<EventCounts> {
        self.shared.events.per_thread()
    }

    /// Event counts summed over this host's threads.
    pub fn events(&self) -> EventCounts {
        self.shared.events.total()
    }

    /// Records in use in the pod now, and records in all.
    pub fn records_in_use(&self) -> (u64, u64) {
        let records = Records::new(&self.shared.pod);
        (
            self.shared.records_in_use().load(Ordering::Relaxed),
            records.count(),
        )
    }
}

/// A small xorshift for picking records at random (per thread; quality hardly matters).
fn next_random(state: &mut u64) -> u64 {
    if *state == 0 {
        *state = 0x9e37_79b9_7f4a_7c15;
    }
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

impl Shared {
    pub(super) fn with_counters<R>(&self, f: impl FnOnce(&ThreadCounters) -> R) -> R {
        self.events.with(self.events_id, f)
    }

    pub(super) fn check_len(&self, len: usize) -> Result<()> {
        let slot_size_bytes = self.pod.config().slot_size_bytes;
        if len as u64 > slot_size_bytes {
            return Err(Error::ValueTooLarge {
                value_bytes: len,
                slot_size_bytes,
            });
        }
        Ok(())
    }

    /// The count of records in use, kept in the reclaimer's line of the SCR.
    pub(super) fn records_in_use(&self) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().reclaimer_offset)
    }

    pub(super) fn lines(len: usize) -> u64 {
        len.div_ceil(crate::config::LINE_BYTES as usize) as u64
    }

    /// [`Shared::bring_back`], counting the times in `count`: past the host's retry bound
    /// (the holder keeps moving the object back to its DRAM), [`Error::RetriesExhausted`].
    fn bring_back_counted(
        &self,
        owner: crate::host::HostId,
        key: &[u8],
        count: &mut u32,
        c: &ThreadCounters,
    ) -> Result<()> {
        *count += 1;
        if *count > self.options.max_retries {
            return Err(Error::RetriesExhausted {
                retries: self.options.max_retries,
            });
        }
        self.bring_back(owner, key, c)
    }

    pub(super) fn invalidate(&self, offset: u64, len: usize, c: &ThreadCounters) {
        self.memory.flush(offset, len);
        // The invalidation is done before the loads of the copy that follows.
        self.memory.fence();
        c.add(Counter::LinesInvalidated, Self::lines(len));
    }

    pub(super) fn place(&self, entry: &IndexEntry) -> (u64, usize) {
        let layout = self.pod.layout();
        (
            layout.slot_offset(entry.slot),
            layout.config.slot_size_bytes as usize,
        )
    }

    pub(super) fn read_start(&self, key: &[u8], c: &ThreadCounters) -> Result<ReadState> {
        if self.all_log {
            return self.read_start_all_log(key, c);
        }
        let records = Records::new(&self.pod);
        let mut backoff: Option<Backoff> = None;
        let mut brought_back = 0;
        loop {
            // 1. Tail check: the replica covers every append that completed before now,
            //    and replay dropped the lines of every object another host's event touched.
            if !mutants::skipped(Step::ReadTailCheck) {
                self.catch_up()?;
            }
            self.chaos.point(Point::ReadAfterTailCheck);
            let index = self.replica.index.read();
            // 2. Look the key up.
            let entry = index.lookup(key).ok_or(Error::UnknownKey)?;
            if let Some(owner) = entry.local_owner {
                // In a host's DRAM (local partitions): back to CXL first.
                drop(index);
                self.bring_back_counted(owner, key, &mut brought_back, c)?;
                continue;
            }
            let (offset, len) = self.place(&entry);
            let Some(record) = entry.record else {
                // Read-shared: no record; the log is the only path that can change it.
                return Ok(ReadState {
                    handle: entry.handle,
                    stamp: entry.stamp,
                    slot: entry.slot,
                    offset,
                    len,
                    guard: Guard::Log,
                });
            };
            let word = records.load(record);
            c.add(Counter::ScrAtomics, 1);
            self.chaos.point(Point::ReadAfterCounter);
            if word.in_use && word.counter.is_multiple_of(2) {
                // Pre-read check: lines cached under another version (or an unknown one)
                // must go, so that the copy comes from memory.
                if !mutants::skipped(Step::PreReadCheck) && entry.host_counter != Some(word.counter)
                {
                    self.invalidate(offset, len, c);
                }
                // 3. Remember the stamp and the counter.
                return Ok(ReadState {
                    handle: entry.handle,
                    stamp: entry.stamp,
                    slot: entry.slot,
                    offset,
                    len,
                    guard: Guard::Record {
                        record,
                        counter: word.counter,
                    },
                });
            }
            // A write is in progress (odd counter), or the record was freed by a
            // deallocation whose event this replica has not applied yet: wait, then look
            // again (the next tail check applies the event).
            drop(index);
            c.add(
                if word.in_use {
                    Counter::WaitsForWriter
                } else {
                    Counter::RetryRecordFreed
                },
                1,
            );
            let backoff = backoff.get_or_insert_with(|| Backoff::new(self.options.wait_limit));
            if !backoff.snooze() {
                return Err(Error::RecordBusy {
                    record,
                    waited_ms: backoff.waited().as_millis() as u64,
                });
            }
        }
    }

    pub(super) fn read_end(&self, ticket: &ReadState, c: &ThreadCounters) -> Result<bool> {
        // The copy's loads happen before the checks below load the record and the
        // cursors: an Acquire load does not keep earlier loads from moving after it, this
        // fence does (the seqlock reader's fence; on x86 it costs nothing).
        crate::sync::fence(Ordering::Acquire);
        let records = Records::new(&self.pod);
        let counter_first = !mutants::skipped(Step::ReadEndCounterBeforeLog);
        let load_record = |c: &ThreadCounters| match ticket.guard {
            Guard::Record { record, .. } => {
                c.add(Counter::ScrAtomics, 1);
                Some(records.load(record))
            }
            _ => None,
        };
        // 4. The record's counter first (Acquire), the log second. A writer whose
        //    increment wraps the counter appends its wrap event before the counter can
        //    come back to the value we saw: if the load below sees that value again after
        //    a full cycle, the tail check after it covers the wrap event, and the stamp
        //    check fails. (The other order misses a cycle that fits between the checks.)
        let mut word = None;
        if counter_first {
            word = load_record(c);
            self.chaos.point(Point::ReadEndBetweenChecks);
        }
        // 5. Tail check again: any event about the object since step 3 changed its stamp.
        let check_events = !mutants::skipped(Step::PostReadEventCheck);
        if check_events {
            self.catch_up()?;
        }
        if !counter_first {
            self.chaos.point(Point::ReadEndBetweenChecks);
        }
        let index = self.replica.index.read();
        let current = index.current(ticket.handle, ticket.stamp);
        if !counter_first {
            word = load_record(c);
        }
        if current.is_none() && check_events {
            c.add(Counter::RetryEvent, 1);
            return Ok(false);
        }
        if let (Guard::Record { counter, .. }, Some(word)) = (ticket.guard, word) {
            // The record: same counter, still in use.
            if !mutants::skipped(Step::PostReadRecordCheck)
                && (!word.in_use || word.counter != counter)
            {
                if current.is_some() {
                    index.set_host_counter(ticket.handle, None);
                }
                c.add(
                    if word.in_use {
                        Counter::RetryCounterChanged
                    } else {
                        Counter::RetryRecordFreed
                    },
                    1,
                );
                return Ok(false);
            }
            // 6. Success: this host's lines of the object are those of version `counter`.
            if current.is_some() {
                index.set_host_counter(ticket.handle, Some(counter));
            }
        } else if let Guard::Replicated { counter } = ticket.guard {
            // AllLog: the unchanged stamp says no Lock was applied since read_start, so
            // no write overlapped the copy, and this host's lines are of version `counter`.
            if current.is_some() {
                index.set_host_counter(ticket.handle, Some(counter));
            }
        }
        c.add(Counter::Reads, 1);
        Ok(true)
    }

    fn write_start(&self, key: &[u8], c: &ThreadCounters) -> Result<WriteState> {
        self.write_start_counted(key, c).map(|(state, _)| state)
    }

    pub(super) fn write_start_counted(
        &self,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<(WriteState, u32)> {
        if self.all_log {
            return self.write_start_all_log(key, c);
        }
        let records = Records::new(&self.pod);
        // Made on the first wait only: an uncontended write never reads the clock.
        let mut backoff: Option<Backoff> = None;
        let mut retries = 0u32;
        let mut forced_record: Option<u32> = None;
        loop {
            // 1. Tail check, lookup.
            self.catch_up()?;
            let entry = self
                .replica
                .index
                .read()
                .lookup(key)
                .ok_or(Error::UnknownKey)?;
            if let Some(owner) = entry.local_owner {
                // In a host's DRAM (local partitions): back to CXL first.
                self.bring_back_counted(owner, key, &mut retries, c)?;
                continue;
            }
            let (offset, len) = self.place(&entry);
            // 2. No record: allocate one through the log, then look again.
            let record = match (forced_record.take(), entry.record) {
                (Some(record), _) => record,
                (None, Some(record)) => record,
                (None, None) => {
                    forced_record = self.allocate_record(key, c)?;
                    continue;
                }
            };
            let word = records.load(record);
            c.add(Counter::ScrAtomics, 1);
            if !word.in_use || word.locked {
                if word.locked {
                    c.add(Counter::WaitsForWriter, 1);
                }
                let backoff = backoff.get_or_insert_with(|| Backoff::new(self.options.wait_limit));
                if !backoff.snooze() {
                    return Err(Error::RecordBusy {
                        record,
                        waited_ms: backoff.waited().as_millis() as u64,
                    });
                }
                continue;
            }
            debug_assert_eq!(
                word.counter % 2,
                0,
                "an unlocked record has an even counter"
            );
            // 3. Lock and make the counter odd, in one CAS.
            let locked = RecordWord {
                in_use: true,
                locked: true,
                counter: word.counter + 1,
            };
            self.chaos.point(Point::WriteBeforeLock);
            c.add(Counter::ScrAtomics, 1);
            if records.compare_exchange(record, word, locked).is_err() {
                continue;
            }
            // The seqlock writer's fence: the odd counter is ordered before every data
            // store of this write. Pairs with the reader's Acquire fence in `read_end`: a
            // reader that copied any byte of this write then sees the counter changed. (The
            // CAS's Release orders only what came before it.)
            crate::sync::fence(Ordering::Release);
            self.chaos.point(Point::WriteAfterLock);
            // Holding the lock: no event about the object can be appended by anyone who
            // follows the protocol, but one may have been applied between our lookup and
            // the lock. Catch up and check. From here on, every way out either returns
            // the ticket or restores the record (DESIGN section 8: a locked record always
            // ends unlocked).
            if !mutants::skipped(Step::WriteEventCheckAfterLock) {
                match self.unchanged_since(&entry) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.unlock_record(record, locked, word, c);
                        retries += 1;
                        continue;
                    }
                    Err(error) => {
                        self.restore_on_error(record, locked, word, c);
                        return Err(error);
                    }
                }
            }
            self.chaos.point(Point::WriteAfterEventCheck);
            // Step 6's wrap event, appended now rather than at the end: if this write's
            // increment wraps the counter, every host must drop what it cached under the
            // counter's previous use of the value it comes back to, and learn it before
            // the counter can show that value, that is before our unlock. Appended while
            // nothing is written yet, a failure leaves the object as it was: restore the
            // record and report it. (A wrap event that reaches the log regardless only
            // makes host counters unknown: harmless.)
            let next = word.counter + 2;
            if next > records.counter_mask() && !mutants::skipped(Step::WrapEvent) {
                let key = self.replica.index.read().key_of(entry.handle);
                if let Err(error) = self.submit(&Event::Wrap { key: &key }) {
                    self.restore_on_error(record, locked, word, c);
                    return Err(error);
                }
                c.add(Counter::Wraps, 1);
            }
            // 4. A partial write fills lines from the cache: stale lines would go back to
            //    memory around the new bytes. Drop them unless they are of this version.
            if !mutants::skipped(Step::WriterInvalidatesStaleLines)
                && entry.host_counter != Some(word.counter)
            {
                self.invalidate(offset, len, c);
            }
            return Ok((
                WriteState {
                    handle: entry.handle,
                    slot: entry.slot,
                    offset,
                    len,
                    record,
                    counter_before: word.counter,
                },
                retries,
            ));
        }
    }

    /// Unlocks `record`, which this thread holds (its word is `locked`), to `unlocked`, by
    /// a CAS from the locked word: only a lock's holder changes a locked record, so the CAS
    /// fails only if the protocol is broken (it then leaves the word as it found it).
    pub(super) fn unlock_record(
        &self,
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
        c: &ThreadCounters,
    ) {
        c.add(Counter::ScrAtomics, 1);
        let result = Records::new(&self.pod).compare_exchange(record, locked, unlocked);
        debug_assert!(
            result.is_ok(),
            "record {record}: locked as {locked:?}, found {result:?}"
        );
    }

    /// [`Shared::unlock_record`] on a way out by an error (a mutant skips it, to show a
    /// test notices a record left locked).
    fn restore_on_error(
        &self,
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
        c: &ThreadCounters,
    ) {
        if !mutants::skipped(Step::LockedRecordRestoredOnError) {
            self.unlock_record(record, locked, unlocked, c);
        }
    }

    /// The settle for an event appended holding `record`'s lock (a mutant settles
    /// nothing, leaving it locked).
    fn settle_locked(&self, record: u32, locked: RecordWord, unlocked: RecordWord) -> Settle {
        if mutants::skipped(Step::LockedRecordRestoredOnError) {
            Settle::Nothing
        } else {
            Settle::Locked {
                record,
                locked,
                unlocked,
            }
        }
    }

    /// Catches up with the log and says whether no event about `entry`'s object was
    /// applied since it was looked up (its stamp is the same).
    pub(super) fn unchanged_since(&self, entry: &IndexEntry) -> Result<bool> {
        self.catch_up()?;
        Ok(self
            .replica
            .index
            .read()
            .current(entry.handle, entry.stamp)
            .is_some())
    }

    /// Ends a write (steps 5 and 6). Nothing here can fail: the wrap event, the one step
    /// that needs the log, was appended by `write_start`. (AllLog's unlock is an event,
    /// and can.)
    pub(super) fn write_end(&self, state: WriteState, c: &ThreadCounters) -> Result<()> {
        if self.all_log {
            return self.write_end_all_log(state, c);
        }
        let records = Records::new(&self.pod);
        // 5. The object's lines reach memory before the counter says the write is done.
        if !mutants::skipped(Step::WriteBackBeforeUnlock) {
            self.memory.write_back(state.offset, state.len);
            c.add(Counter::LinesWrittenBack, Self::lines(state.len));
        }
        self.memory.fence();
        self.chaos.point(Point::WriteBeforeUnlock);
        // 6. Counter even again (its wrap event, if it wraps, is in the log already).
        let next = (state.counter_before + 2) & records.counter_mask();
        // Our cached lines are this version's; set the host counter while still holding
        // the lock (after the unlock the handle could be reused by a delete).
        self.replica
            .index
            .read()
            .set_host_counter(state.handle, Some(next));
        let locked = RecordWord {
            in_use: true,
            locked: true,
            counter: state.counter_before + 1,
        };
        let unlocked = RecordWord {
            in_use: true,
            locked: false,
            counter: next,
        };
        self.unlock_record(state.record, locked, unlocked, c);
        c.add(Counter::Writes, 1);
        Ok(())
    }

    /// Allocates a record for `key` through the log. Returns the record to write with
    /// when a mutant skips using the winner's; normally `None`: look the key up again.
    fn allocate_record(&self, key: &[u8], c: &ThreadCounters) -> Result<Option<u32>> {
        let (record, claimed) = self.claim_record(c)?;
        self.chaos.point(Point::AllocAfterClaim);
        // A refused alloc frees the record; one whose outcome we miss keeps it if it won.
        let settle = Settle::Claimed { record, claimed };
        match self.submit_settled(&Event::RecordAlloc { key, record }, settle)? {
            Outcome::RecordAllocated => {
                c.add(Counter::RecordAllocs, 1);
                Ok(None)
            }
            Outcome::RecordAllocLost { .. } => {
                c.add(Counter::RecordAllocsLost, 1);
                if mutants::skipped(Step::AllocLoserUsesWinnersRecord) {
                    return Ok(Some(record));
                }
                c.add(Counter::ScrAtomics, 1);
                self.free_claimed(record, claimed);
                Ok(None)
            }
            _ => {
                c.add(Counter::ScrAtomics, 1);
                self.free_claimed(record, claimed);
                Err(Error::UnknownKey)
            }
        }
    }

    /// Claims a free record (random probes, then a scan from a random start); when none
    /// is free, deallocates another object's record first (churn). Returns the record and
    /// its claimed word.
    fn claim_record(&self, c: &ThreadCounters) -> Result<(u32, RecordWord)> {
        let records = Records::new(&self.pod);
        let count = records.count();
        let mut rng = c.random_seed();
        let mut churned = false;
        for _ in 0..RECLAIM_ROUNDS {
            if self.records_in_use().load(Ordering::Relaxed) < count {
                let start = next_random(&mut rng) % count;
                let probes =
                    (0..u64::from(FREE_RECORD_PROBES)).map(|_| next_random(&mut rng) % count);
                let scan = (0..count).map(|i| (start + i) % count);
                for record in probes.chain(scan) {
                    let record = record as u32;
                    let word = records.load(record);
                    c.add(Counter::ScrAtomics, 1);
                    if word.in_use {
                        continue;
                    }
                    let claimed = RecordWord {
                        in_use: true,
                        ..word
                    };
                    c.add(Counter::ScrAtomics, 1);
                    if records.compare_exchange(record, word, claimed).is_ok() {
                        self.records_in_use().fetch_add(1, Ordering::Relaxed);
                        c.set_random_seed(rng);
                        if churned {
                            c.add(Counter::Churn, 1);
                        }
                        return Ok((record, claimed));
                    }
                }
            }
            // Nothing free: make a record free (it may be claimed by someone else first).
            churned |= self.reclaim_one(&mut rng, c)?;
        }
        c.set_random_seed(rng);
        Err(Error::ScrRecordsExhausted {
            records: count,
            in_use: self.records_in_use().load(Ordering::Relaxed),
        })
    }

    /// Samples a few records and deallocates the least written unlocked one this replica
    /// knows the owner of. Returns whether one was deallocated.
    fn reclaim_one(&self, rng: &mut u64, c: &ThreadCounters) -> Result<bool> {
        let records = Records::new(&self.pod);
        let count = records.count();
        let mut best: Option<(u32, RecordWord)> = None;
        for _ in 0..RECLAIM_SAMPLES {
            let record = (next_random(rng) % count) as u32;
            let word = records.load(record);
            c.add(Counter::ScrAtomics, 1);
            if word.in_use && !word.locked && best.is_none_or(|(_, b)| word.counter < b.counter) {
                best = Some((record, word));
            }
        }
        let Some((record, _)) = best else {
            return Ok(false);
        };
        self.catch_up()?;
        let Some(key) = self.replica.index.read().record_owner_key(record) else {
            // Claimed by an alloc whose event is still on its way: not ours to take.
            return Ok(false);
        };
        self.deallocate(&key, record, c)
    }

    /// Makes `key` read-shared: locks `record`, appends the dealloc event, and frees the
    /// record once the event is applied here. Returns whether it did.
    fn deallocate(&self, key: &[u8], record: u32, c: &ThreadCounters) -> Result<bool> {
        let records = Records::new(&self.pod);
        let word = records.load(record);
        c.add(Counter::ScrAtomics, 1);
        // Lock without changing the counter: no write happens; the event tells readers.
        // A locked record (a write or another deallocation in progress) is left alone.
        let lock = !mutants::skipped(Step::LockBeforeDealloc);
        if !word.in_use || (lock && word.locked) {
            return Ok(false);
        }
        let locked = RecordWord {
            locked: lock,
            ..word
        };
        if lock {
            c.add(Counter::ScrAtomics, 1);
            if records.compare_exchange(record, word, locked).is_err() {
                return Ok(false);
            }
        }
        self.chaos.point(Point::ReleaseAfterLock);
        // From here on the record is ours: every way out frees or restores it.
        match self.release_allowed(key, record, ReleaseReason::MakeReadShared) {
            Ok(true) => {}
            Ok(false) => {
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                return Ok(false);
            }
            Err(panic) => {
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                std::panic::resume_unwind(panic);
            }
        }
        let settle = if lock {
            self.settle_locked(record, locked, word)
        } else {
            Settle::Nothing
        };
        match self.submit_settled(&Event::RecordDealloc { key, record }, settle)? {
            Outcome::RecordDeallocated => {
                self.free_released(record, locked, c);
                c.add(Counter::RecordDeallocs, 1);
                Ok(true)
            }
            _ => {
                // The object lost the record, or is gone, in the meantime: put it back.
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                Ok(false)
            }
        }
    }

    /// Asks the host's release hook, if it has one, whether `key` may lose `record` now
    /// (the caller holds the record's lock, or a mutant skipped it). `Err` carries a panic
    /// of the hook, for the caller to resume once it has restored the record.
    fn release_allowed(
        &self,
        key: &[u8],
        record: u32,
        reason: ReleaseReason,
    ) -> std::thread::Result<bool> {
        let Some(hook) = &self.options.release_hook else {
            return Ok(true);
        };
        let Some(entry) = self.replica.index.read().lookup(key) else {
            // Gone already: the event we are about to append will find nothing.
            return Ok(true);
        };
        let (offset, len) = self.place(&entry);
        let releasing = Releasing {
            shared: self,
            key,
            record,
            offset,
            len,
            reason,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (hook.0)(&releasing)))
    }

    /// Frees `record`, whose dealloc or delete won in the log, by a CAS from `held` (the
    /// word our lock put there): no host can have changed a record we hold locked.
    fn free_released(&self, record: u32, held: RecordWord, c: &ThreadCounters) {
        self.chaos.point(Point::ReleaseBeforeFree);
        let records = Records::new(&self.pod);
        let free = RecordWord {
            in_use: false,
            locked: false,
            counter: held.counter & !1,
        };
        c.add(Counter::ScrAtomics, 1);
        if held.locked {
            self.unlock_record(record, held, free, c);
        } else {
            // A mutant skipped the lock: free whatever the word holds (the defect it shows).
            records.store(record, free);
        }
        self.records_in_use().fetch_sub(1, Ordering::Relaxed);
    }

    /// Deletes `key`: takes its record's lock if it has one, appends the delete, frees the
    /// record once the event is applied here.
    pub(super) fn delete(&self, key: &[u8], c: &ThreadCounters) -> Result<()> {
        if self.all_log {
            return self.delete_all_log(key, c);
        }
        let records = Records::new(&self.pod);
        let mut backoff: Option<Backoff> = None;
        let mut brought_back = 0;
        loop {
            self.catch_up()?;
            let Some(entry) = self.replica.index.read().lookup(key) else {
                // Absent here: the delete still goes through the log (where it finds
                // nothing), so every delete is an event every replica sees in order.
                let event = Event::Delete {
                    key,
                    record: NO_RECORD,
                };
                match self.submit(&event)? {
                    // Created, still read-shared, between our lookup and our event.
                    Outcome::Deleted { .. } => {
                        c.add(Counter::Deletes, 1);
                        return Ok(());
                    }
                    // Created and written (it has a record now): start over with its lock.
                    Outcome::DeleteLost => continue,
                    _ => return Err(Error::UnknownKey),
                }
            };
            if let Some(owner) = entry.local_owner {
                // In a host's DRAM (local partitions): back to CXL first, then delete (a
                // delete of an object in a host's DRAM loses in the log).
                self.bring_back_counted(owner, key, &mut brought_back, c)?;
                continue;
            }
            // The record whose lock we hold: (record, its word locked, its word before).
            let mut held = None;
            if let Some(record) = entry.record {
                let word = records.load(record);
                c.add(Counter::ScrAtomics, 1);
                if mutants::skipped(Step::LockBeforeDelete) {
                    held = Some((record, word, word));
                } else {
                    if !word.in_use || word.locked {
                        let backoff =
                            backoff.get_or_insert_with(|| Backoff::new(self.options.wait_limit));
                        if !backoff.snooze() {
                            return Err(Error::RecordBusy {
                                record,
                                waited_ms: backoff.waited().as_millis() as u64,
                            });
                        }
                        continue;
                    }
                    let locked = RecordWord {
                        locked: true,
                        ..word
                    };
                    c.add(Counter::ScrAtomics, 1);
                    if records.compare_exchange(record, word, locked).is_err() {
                        continue;
                    }
                    self.chaos.point(Point::ReleaseAfterLock);
                    // From here on the record is ours: every way out frees or restores it.
                    match self.unchanged_since(&entry) {
                        Ok(true) => {}
                        Ok(false) => {
                            self.unlock_record(record, locked, word, c);
                            continue;
                        }
                        Err(error) => {
                            self.restore_on_error(record, locked, word, c);
                            return Err(error);
                        }
                    }
                    match self.release_allowed(key, record, ReleaseReason::Delete) {
                        Ok(true) => {}
                        Ok(false) => {
                            self.unlock_record(record, locked, word, c);
                            return Err(Error::ReleaseRefused { record });
                        }
                        Err(panic) => {
                            self.unlock_record(record, locked, word, c);
                            std::panic::resume_unwind(panic);
                        }
                    }
                    held = Some((record, locked, word));
                }
            }
            // The record whose lock we hold (none for a read-shared object): the delete
            // wins in the log only if the object still has exactly that one.
            let expected = entry.record.unwrap_or(NO_RECORD);
            let settle = match held {
                Some((record, locked, word)) if locked.locked => {
                    self.settle_locked(record, locked, word)
                }
                _ => Settle::Nothing,
            };
            let outcome = self.submit_settled(
                &Event::Delete {
                    key,
                    record: expected,
                },
                settle,
            )?;
            match outcome {
                Outcome::Deleted { record, .. } => {
                    if let Some(record) = record {
                        let locked = held.map_or_else(|| records.load(record), |(_, l, _)| l);
                        self.free_released(record, locked, c);
                    }
                    c.add(Counter::Deletes, 1);
                    return Ok(());
                }
                Outcome::DeleteLost => {
                    if let Some((record, locked, word)) = held.filter(|(_, l, _)| l.locked) {
                        self.unlock_record(record, locked, word, c);
                    }
                    continue;
                }
                _ => {
                    if let Some((record, locked, word)) = held.filter(|(_, l, _)| l.locked) {
                        self.unlock_record(record, locked, word, c);
                    }
                    return Err(Error::UnknownKey);
                }
            }
        }
    }

    /// The background reclaimer's round: while more records than the watermark allows are
    /// in use, deallocate some (a bounded batch per round).
    pub(super) fn reclaim_to_watermark(&self) -> Result<()> {
        let count = Records::new(&self.pod).count();
        let limit = (count as f64 * self.options.record_watermark) as u64;
        self.with_counters(|c| {
            let mut rng = c.random_seed();
            for _ in 0..RECLAIM_BATCH {
                if self.records_in_use().load(Ordering::Relaxed) <= limit {
                    break;
                }
                self.reclaim_one(&mut rng, c)?;
            }
            c.set_random_seed(rng);
            Ok(())
        })
    }
}
