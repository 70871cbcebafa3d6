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

use super::records::ReleaseReason;
use super::ticket::{Guard, Place, ReadState, ReadTicket, Seen, WriteState, WriteTicket};
use super::{Host, Settle, Shared};

use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::{Counter, EventCounts, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::{Event, NO_RECORD};
use crate::memory::cxl::ScrAccess;
use crate::mutants::{self, Step};
use crate::record::{RecordShape, RecordWord, Records};
use crate::replica::{IndexEntry, Outcome, View};
use crate::sync::Ordering;

impl Host {
    /// Starts reading object `key` (steps 1-3 of the read path). Copy the object's bytes
    /// with [`ReadTicket::read`], then call [`Host::read_end`]; trust the copy only if it
    /// says so.
    pub fn read_start(&self, key: &[u8]) -> Result<ReadTicket<'_>> {
        self.shared.check_key(key)?;
        let state = self
            .shared
            .with_counters(|c| self.shared.read_start(key, c))?;
        Ok(ReadTicket { host: self, state })
    }

    /// Ends a read (steps 4-6): `true` if the bytes copied since `read_start` are a valid
    /// version of the object, `false` if the read must start over.
    ///
    /// # Panics
    ///
    /// If `ticket` was started on another host.
    pub fn read_end(&self, ticket: ReadTicket<'_>) -> Result<bool> {
        assert!(
            std::ptr::eq(ticket.host, self),
            "a read ticket ends on the host that started it"
        );
        self.shared
            .with_counters(|c| self.shared.read_end(&ticket.state, c))
    }

    /// Starts writing object `key`: allocates a record if it has none, takes the lock,
    /// and makes the counter odd. Write with [`WriteTicket::write`], then call
    /// [`Host::write_end`].
    pub fn write_start(&self, key: &[u8]) -> Result<WriteTicket<'_>> {
        self.shared.check_key(key)?;
        let state = self
            .shared
            .with_counters(|c| self.shared.write_start(key, c))?;
        Ok(WriteTicket {
            host: self,
            state: Some(state),
            raw: std::cell::Cell::new(false),
            on_its_thread: std::marker::PhantomData,
        })
    }

    /// Ends a write: the object's lines reach memory, the counter is even again (a wrap
    /// event first if it wrapped around), the lock is released.
    ///
    /// # Panics
    ///
    /// If `ticket` was started on another host (its lines are in that host's cache). The
    /// ticket's drop then ends the write on the host that started it.
    pub fn write_end(&self, mut ticket: WriteTicket<'_>) -> Result<()> {
        assert!(
            std::ptr::eq(ticket.host, self),
            "a write ticket ends on the host that started it"
        );
        let mut state = ticket.state.take().expect("live ticket");
        state.raw = ticket.raw.get();
        self.shared
            .with_counters(|c| self.shared.write_end(state, c))
    }

    /// Event counts summed over this host's threads.
    pub fn events(&self) -> EventCounts {
        self.shared.events.total()
    }
}

impl Shared {
    /// Runs `f` with this thread's counters for this host. The CXL cost model charges the
    /// thread's SCR accesses from here on to this host (a thread may work for several
    /// hosts in turn, and its first record access comes before its first call on LNR).
    pub(super) fn with_counters<R>(&self, f: impl FnOnce(&ThreadCounters) -> R) -> R {
        self.memory.bind_scr();
        self.events.with(self.events_id, f)
    }

    /// [`check_key`](Self::check_key) and [`check_len`](Self::check_len) of an access to
    /// the first `len` bytes of object `key`.
    pub(super) fn check_access(&self, key: &[u8], len: usize) -> Result<()> {
        self.check_key(key)?;
        self.check_len(len)
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

    pub(super) fn lines(len: usize) -> u64 {
        len.div_ceil(crate::limits::LINE_BYTES as usize) as u64
    }

    pub(super) fn invalidate(&self, offset: u64, len: usize, c: &ThreadCounters) {
        self.memory.flush(offset, len);
        // The invalidation is done before the loads of the copy that follows.
        if !mutants::skipped(Step::InvalidationFenced) {
            self.memory.fence();
        }
        c.add(Counter::LinesInvalidated, Self::lines(len));
    }

    pub(super) fn place(&self, entry: &IndexEntry) -> Place {
        Place::of(entry, self.pod.layout())
    }

    /// `look` run on the replica's index: without its lock when no replay overlaps it (a
    /// replay bumps the replica's version, which `optimistic` checks), else again under
    /// the read lock. `look` may run twice and sees a torn index on its first run; only a
    /// run the version vouches for is answered.
    #[inline]
    pub(super) fn look<R>(&self, look: impl Fn(&View) -> R) -> R {
        self.look_versioned(look).0
    }

    /// [`Shared::look`], and the version of the index its answer was read at.
    #[inline]
    pub(super) fn look_versioned<R>(&self, look: impl Fn(&View) -> R) -> (R, u64) {
        let fast = self.replica.optimistic(|view| {
            let answer = look(view);
            self.chaos.point(Point::LookBeforeValidation);
            answer
        });
        match fast {
            Some(answered) => answered,
            None => {
                let (index, version) = self.replica.read_versioned();
                (look(index.view()), version)
            }
        }
    }

    /// Stores this host's host counter of the object behind `handle`, if it is still the
    /// one stamped `stamp` (under the read lock: replay rewrites the same word).
    fn note_host_counter(&self, handle: u32, stamp: u64, counter: Option<u32>) {
        let index = self.replica.read();
        if index.current(handle, stamp).is_some() {
            index.set_host_counter(handle, counter);
        }
    }

    // Over 70 lines on purpose: Steps 1-3 of DESIGN section 8 in order, with the race cases
    // beside them.
    pub(super) fn read_start(&self, key: &[u8], c: &ThreadCounters) -> Result<ReadState> {
        self.read_start_within(key, c, &mut None)
    }

    /// [`read_start`](Self::read_start), its wait for a writer going on with `backoff`:
    /// the wait of the call it is part of (a `read_many`'s, whose reads wait one limit in
    /// all), begun by an earlier read of that call maybe.
    pub(super) fn read_start_within(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        backoff: &mut Option<Backoff>,
    ) -> Result<ReadState> {
        if self.all_log {
            return self.read_start_all_log(key, c);
        }
        let mut brought_back = 0;
        // Whether this read looked again at a record found freed or busy once its wait was
        // spent (`wait_or_look_again`).
        let mut looked_again = false;
        loop {
            // 1. Tail check: the replica covers every append that completed before now,
            //    and replay dropped the lines of every object another host's event touched.
            if !mutants::skipped(Step::ReadTailCheck) {
                self.catch_up()?;
            }
            self.chaos.point(Point::ReadAfterTailCheck);
            // 2. Look the key up: without the replica's lock unless a replay overlaps (see
            //    `look`). The record width with it: the entry's record is of it.
            let ((entry, shape), version) =
                self.look_versioned(|view| (view.lookup(key), view.shape()));
            // Not `ok_or` (here and at every lookup of the object paths): it builds the
            // error, and drops it, on the way to every entry.
            let Some(entry) = entry else {
                return Err(Error::UnknownKey);
            };
            let seen = Some(Seen {
                version,
                host_counter: entry.host_counter,
            });
            if let Some(owner) = entry.local_owner {
                // In a host's DRAM (local partitions): back to CXL first.
                self.bring_back_counted(owner, key, &mut brought_back, c)?;
                continue;
            }
            let place = self.place(&entry);
            let (offset, len) = (place.offset, place.len);
            let Some(record) = entry.record else {
                // Read-shared: no record; the log is the only path that can change it.
                return Ok(ReadState {
                    place,
                    stamp: entry.stamp,
                    guard: Guard::Log,
                    seen,
                });
            };
            // The record's word, outside the lookup's check (loaded inside it, a read took
            // 10% longer here): a replay between the two that moves the record to another
            // object, or wraps it, also changes this object's stamp, which step 5 checks.
            // (A width switch too: its zeroed word reads as freed.)
            let records = Records::of(&self.pod, shape);
            let raw = records.load_raw(record);
            let word = records.decode(raw);
            c.add_scr_at(|| records.address(record), ScrAccess::Load);
            self.chaos.point(Point::ReadAfterCounter);
            if word.in_use && !records.writing(word) {
                // Pre-read check: lines cached under another version (or an unknown one)
                // must go, so that the copy comes from memory.
                if !mutants::skipped(Step::PreReadCheck) && entry.host_counter != Some(word.counter)
                {
                    self.invalidate(offset, len, c);
                }
                // 3. Remember the stamp and the counter.
                return Ok(ReadState {
                    place,
                    stamp: entry.stamp,
                    guard: Guard::Record {
                        record,
                        counter: word.counter,
                        raw,
                        shape,
                    },
                    seen,
                });
            }
            // A write is in progress (odd counter, the record locked), or the record was
            // freed by a deallocation whose event this replica has not applied yet: wait,
            // then look again (the next tail check applies the event). A `read_many`'s
            // wait may be spent by an earlier read of the call.
            if !word.in_use {
                c.add(Counter::RetryRecordFreed, 1);
            }
            self.wait_or_look_again(backoff, &mut looked_again, record, word, c)?;
        }
    }

    /// Steps 4-6 of DESIGN section 8: whether the copy made since `read_start` holds.
    ///
    /// A read whose index no replay changed since its lookup, and whose record (if it has
    /// one) holds the very bits `read_start` saw, comes down to the tail check and, for a
    /// read-write-shared object, one load of the record: the unchanged version stands for
    /// the stamp check, and the host counter the lookup knew is the record's. Apart,
    /// short and inlined, mirroring the steps' mutants, because a lone read waits for the
    /// instructions between its copy and the next read's lookup (`docs/object.md`, "A
    /// lone read's window"). Every other read takes the steps in full
    /// ([`read_end_steps`](Self::read_end_steps)), or the verdict after them
    /// ([`read_end_verdict`](Self::read_end_verdict)), out of line.
    #[inline(always)]
    pub(super) fn read_end(&self, ticket: &ReadState, c: &ThreadCounters) -> Result<bool> {
        match (ticket.guard, ticket.seen) {
            (Guard::Log, Some(seen)) => {
                // As in the steps: the copy's loads before the cursors'.
                crate::sync::fence(Ordering::Acquire);
                self.chaos.point(Point::ReadEndBetweenChecks);
                let check_events = !mutants::skipped(Step::PostReadEventCheck);
                if check_events {
                    self.catch_up()?;
                }
                if !check_events || self.replica.unchanged_since(seen.version) {
                    c.add(Counter::Reads, 1);
                    return Ok(true);
                }
                self.read_end_verdict(ticket, None, true, check_events, c)
            }
            (
                Guard::Record {
                    record,
                    counter,
                    raw,
                    shape,
                },
                Some(seen),
            ) if seen.host_counter == Some(counter)
                && !mutants::skipped(Step::ReadEndCounterBeforeLog) =>
            {
                // As in the steps: the copy's loads first, then the record (4), then the
                // cursors (5).
                crate::sync::fence(Ordering::Acquire);
                let records = Records::of(&self.pod, shape);
                c.add_scr_at(|| records.address(record), ScrAccess::Load);
                let now = records.load_raw(record);
                self.chaos.point(Point::ReadEndBetweenChecks);
                let check_events = !mutants::skipped(Step::PostReadEventCheck);
                if check_events {
                    self.catch_up()?;
                }
                // The bits `read_start` saw (in use, unlocked, counter even): the record
                // still holds that version. Other bits may too (a lock that leaves the
                // counter even): the verdict tells.
                if (!check_events || self.replica.unchanged_since(seen.version))
                    && (now == raw || mutants::skipped(Step::PostReadRecordCheck))
                {
                    c.add(Counter::Reads, 1);
                    return Ok(true);
                }
                self.read_end_verdict(ticket, Some(records.decode(now)), true, check_events, c)
            }
            _ => self.read_end_steps(ticket, c),
        }
    }

    /// Steps 4 and 5 of DESIGN section 8 in full, then the verdict.
    #[inline(never)]
    fn read_end_steps(&self, ticket: &ReadState, c: &ThreadCounters) -> Result<bool> {
        // The copy's loads happen before the checks below load the record and the
        // cursors: an Acquire load does not keep earlier loads from moving after it, this
        // fence does (the seqlock reader's fence; on x86 it costs nothing).
        crate::sync::fence(Ordering::Acquire);
        let counter_first = !mutants::skipped(Step::ReadEndCounterBeforeLog);
        // 4. The record's counter first (Acquire), the log second. A writer whose
        //    increment wraps the counter appends its wrap event before the counter can
        //    come back to the value we saw: if the load below sees that value again after
        //    a full cycle, the tail check after it covers the wrap event, and the stamp
        //    check fails. (The other order misses a cycle that fits between the checks.)
        let mut word = None;
        if counter_first {
            word = self.load_guard(ticket.guard, c);
            self.chaos.point(Point::ReadEndBetweenChecks);
        }
        // 5. Tail check again: any event about the object since step 3 changed its stamp.
        let check_events = !mutants::skipped(Step::PostReadEventCheck);
        if check_events {
            self.catch_up()?;
        }
        self.read_end_verdict(ticket, word, counter_first, check_events, c)
    }

    /// The record's word of a read guarded by one, at the width of `read_start`'s lookup:
    /// after a switch the record's bytes hold records of another width (their value means
    /// nothing; the stamp check fails).
    fn load_guard(&self, guard: Guard, c: &ThreadCounters) -> Option<RecordWord> {
        let Guard::Record { record, shape, .. } = guard else {
            return None;
        };
        let records = Records::of(&self.pod, shape);
        c.add_scr_at(|| records.address(record), ScrAccess::Load);
        Some(records.load(record))
    }

    /// The end of a read after its steps 4 and 5: the stamp check, the record's, the note
    /// of this host's lines. `word` is the record's (if the read has one), loaded before
    /// the tail check unless `counter_first` is off (a mutant's order: loaded after it,
    /// here).
    #[inline(never)]
    fn read_end_verdict(
        &self,
        ticket: &ReadState,
        mut word: Option<RecordWord>,
        counter_first: bool,
        check_events: bool,
        c: &ThreadCounters,
    ) -> Result<bool> {
        if !counter_first {
            self.chaos.point(Point::ReadEndBetweenChecks);
        }
        // The stamp check: the object's host counter if its stamp is still the ticket's,
        // `None` if it moved. While the index's version is the lookup's, no replay has
        // changed the index since (one the tail check waited for moved the version before
        // it published its position), so the stamp stands without a second lookup, and
        // the lookup's host counter stands in for the index's: if another read made that
        // unknown since, the note below is skipped and it stays unknown, never wrong.
        let (handle, stamp) = (ticket.place.handle, ticket.stamp);
        let current = match ticket.seen {
            Some(seen) if check_events && self.replica.unchanged_since(seen.version) => {
                Some(seen.host_counter)
            }
            _ => self
                .look(|view| view.current(handle, stamp))
                .map(|entry| entry.host_counter),
        };
        if !counter_first {
            word = self.load_guard(ticket.guard, c);
        }
        if current.is_none() && check_events {
            c.add(Counter::RetryEvent, 1);
            return Ok(false);
        }
        if let (Guard::Record { counter, shape, .. }, Some(word)) = (ticket.guard, word) {
            // The record: same counter, still in use, no write in progress (in a record
            // without a counter, a write that began and ended during the copy appended
            // its wrap event before its first byte, and the tail check above found it).
            if !mutants::skipped(Step::PostReadRecordCheck)
                && !Records::of(&self.pod, shape).still(word, counter)
            {
                if current.is_some() {
                    self.note_host_counter(handle, stamp, None);
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
            if current.is_some_and(|host_counter| host_counter != Some(counter)) {
                self.note_host_counter(handle, stamp, Some(counter));
            }
        } else if let Guard::Replicated { counter } = ticket.guard {
            // AllLog: the unchanged stamp says no Lock was applied since read_start, so
            // no write overlapped the copy, and this host's lines are of version `counter`.
            if current.is_some_and(|host_counter| host_counter != Some(counter)) {
                self.note_host_counter(handle, stamp, Some(counter));
            }
        }
        c.add(Counter::Reads, 1);
        Ok(true)
    }

    pub(super) fn write_start(&self, key: &[u8], c: &ThreadCounters) -> Result<WriteState> {
        self.write_start_counted(key, c).map(|(state, _)| state)
    }

    // Over 70 lines on purpose: Steps 1-4 of DESIGN section 8 in order; holding the lock is
    // `hold_for_write`.
    pub(super) fn write_start_counted(
        &self,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<(WriteState, u32)> {
        if self.all_log {
            return self.write_start_all_log(key, c);
        }
        // Made on the first wait only: an uncontended write never reads the clock.
        let mut backoff: Option<Backoff> = None;
        // Whether this write looked again at a record found freed or busy past its wait.
        let mut looked_again = false;
        let mut retries = 0u32;
        let mut forced_record: Option<u32> = None;
        // The announce word and undo image of this write (pods with undo images), taken
        // at the first lock attempt, freed on every way out but the ticket's.
        let mut held = None;
        loop {
            // 1. Tail check, lookup: without the replica's lock unless a replay overlaps
            //    (see `look`), as a read's. The version the answer was read at lets step
            //    3's stamp check skip a second lookup while no replay has happened since.
            self.catch_up()?;
            let ((entry, shape), version) =
                self.look_versioned(|view| (view.lookup(key), view.shape()));
            let Some(entry) = entry else {
                return Err(Error::UnknownKey);
            };
            if let Some(owner) = entry.local_owner {
                // In a host's DRAM (local partitions): back to CXL first. (No lock is held
                // here; an announce word from an attempt that lost goes back, so that
                // what this needs of its own does not wait on ours.)
                held = None;
                self.bring_back_counted(owner, key, &mut retries, c)?;
                continue;
            }
            // 2. No record: allocate one through the log, then look again. (Its claim
            // needs an announce word: ours, from an attempt that lost, goes back first.)
            let record = match (forced_record.take(), entry.record) {
                (Some(record), _) => record,
                (None, Some(record)) => record,
                (None, None) => {
                    held = None;
                    forced_record = self.allocate_record(key, c)?;
                    continue;
                }
            };
            let records = Records::of(&self.pod, shape);
            let word = records.load(record);
            c.add_scr_at(|| records.address(record), ScrAccess::Load);
            if !word.in_use || word.locked {
                // An announce left by a lock that lost would keep a recoverer of the
                // record waiting on us while we wait on it. And the word itself goes back
                // (withdrawn first: a hold dropped during an unwind is kept if its announce
                // names a held lock, which another's lock of this word would look like): a
                // host has few, and threads waiting for other hosts' locks kept them all,
                // so that a write of a record nobody held waited out its limit for one
                // (`TooManyLocksHeld`, naming locks the host did not hold).
                if let Some(hold) = &held {
                    self.withdraw(hold);
                }
                held = None;
                self.wait_or_look_again(&mut backoff, &mut looked_again, record, word, c)?;
                continue;
            }
            // 3. Lock and make the counter odd, in one CAS.
            let locked = RecordWord {
                in_use: true,
                locked: true,
                counter: word.counter + 1,
            };
            let hold = match held {
                Some(ref hold) => hold,
                None => held.insert(self.take_hold()?),
            };
            // The gate (a pod whose record width may switch): the array still at the
            // lookup's width, and no switch freezing it until the lock is taken.
            let Some(gate) = self.pass_gate(shape, &mut backoff, c)? else {
                continue;
            };
            if self.undo_images() {
                // The announce, and the record under recovery.
                c.add(Counter::ScrAtomics, 2);
            }
            if !self.announce(hold, &records, record, locked)? {
                // A recoverer restores a dead host's lock of the record: wait for it,
                // without our announce word (withdrawn), as for a busy record.
                drop(gate);
                held = None;
                self.wait_for_record(&mut backoff, record, word, c)?;
                continue;
            }
            self.chaos.point(Point::WriteBeforeLock);
            c.add_scr_at(|| records.address(record), ScrAccess::Update);
            let taken = if mutants::skipped(Step::WriteLockByCas) {
                records.store(record, locked);
                true
            } else {
                records.compare_exchange(record, word, locked).is_ok()
            };
            drop(gate);
            if !taken {
                // The announce of a lock not taken goes before the next try, which may
                // wait at its gate for a switch: a switch of a pod with undo images
                // drains only once no announce is left, and would wait on it.
                self.withdraw(hold);
                // A word moved by another lock (a write's, a delete's) is not a start-over:
                // the next look waits for its holder within the wait limit. One moved with
                // an event about the object applied since the lookup (its record taken
                // away, given anew) is, as a back-out after the lock: the next look finds
                // another record or none and allocates, and a write whose record was taken
                // before each lock allocated anew for as long as that went on.
                if self.lock_lost_to_a_change(&entry, Some(version), key, record, shape)? {
                    self.start_over(&mut retries)?;
                }
                continue;
            }
            // Only now is `word` known to be of the lookup's width: a lookup older than a
            // switch loads bytes of the new width before its gate, whose view at the old
            // width may be an unlocked word with an odd counter.
            debug_assert_eq!(
                word.counter % 2,
                0,
                "an unlocked record has an even counter"
            );
            // The seqlock writer's fence: the odd counter is ordered before every data
            // store of this write. Pairs with the reader's Acquire fence in `read_end`: a
            // reader that copied any byte of this write then sees the counter changed. (The
            // CAS's Release orders only what came before it.)
            crate::sync::fence(Ordering::Release);
            let kept = self.hold_for_write(&entry, version, &records, record, word, c);
            if !matches!(kept, Ok(true)) {
                // Unlocked again (an error too restored the record): its announce goes,
                // as for a lock not taken, before the hold drops. Left, a hold dropped
                // while the thread unwinds (a write made from a drop during a panic)
                // could find another lock of the word taken since (from the word we
                // restored, every write's lock is ours again) and take it for one its own
                // call's panic left (`Hold`'s drop).
                if let Some(hold) = &held {
                    self.withdraw(hold);
                }
            }
            if !kept? {
                // Within the host's bound, as a read's start-overs: an object whose events
                // keep landing between the lookup and the lock (another host's writes of a
                // narrow record, each with its wrap event) kept this write starting over
                // for as long as they came. The record is unlocked; the hold goes with
                // `held`.
                self.start_over(&mut retries)?;
                continue;
            }
            let mut state = self.ready_to_write(&entry, record, word.counter, c);
            // Before the ticket lets a byte change: what recovery restores if we die.
            let hold = held.take().expect("taken before the lock");
            // Looked at again after the last pause (the event check's catch-up, then
            // `WriteAfterEventCheck`, and a wrap's append): a writer paused there past its
            // lease was recovered (its lock undone), and the id's next life may hold this
            // announce word and its undo image; writing ours over them would leave the next
            // life's lock unannounced, which its recovery would never settle. The lock and
            // the hold are left to recovery (`end_hold`).
            if !mutants::skipped(Step::WriterChecksBeforeItsImage) && self.left_to_recovery() {
                return Err(Error::HostDeclaredDead {
                    host: self.id,
                    life: self.life,
                });
            }
            let (offset, len) = (state.place.offset, state.place.len);
            self.keep_undo_image(&hold, &records, record, locked, offset, len);
            if self.undo_images() {
                // The image's lines and the announce's "undo ready".
                c.add(Counter::LinesWrittenBack, Self::lines(len));
                c.add(Counter::ScrAtomics, 1);
            }
            state.hold = hold.into_index();
            return Ok((state, retries));
        }
    }

    /// Whether a lock CAS of `record` (the record of `entry`'s object, looked up at the
    /// index's `version` if known, at `shape`) that failed is a start-over: an event about
    /// the object was applied since the lookup, and the record is not simply another's
    /// lock now. (At 2 and 4 bits a write's lock appends the object's wrap event under
    /// the lock: a CAS lost to it found that event applied, and counted a start-over where
    /// one at 8 bits, for the same lock, waited for its holder; with few retries allowed,
    /// a write or a delete that only met a held lock answered `RetriesExhausted`.) The
    /// object still at `record`, its word locked: the next look waits for the holder
    /// within the wait limit, as for any lock.
    fn lock_lost_to_a_change(
        &self,
        entry: &IndexEntry,
        version: Option<u64>,
        key: &[u8],
        record: u32,
        shape: RecordShape,
    ) -> Result<bool> {
        if self.unchanged_since_version(entry, version)? {
            return Ok(false);
        }
        let (now, now_shape) = {
            let index = self.replica.read();
            (index.lookup(key), index.shape())
        };
        let same_record = now_shape == shape
            && now.is_some_and(|now| now.record == Some(record) && now.local_owner.is_none());
        if !same_record {
            return Ok(true);
        }
        let word = Records::of(&self.pod, shape).load(record);
        Ok(!(word.in_use && word.locked))
    }

    /// Counts a start-over of a write or a delete that backed out (an event about its
    /// object was applied between its lookup and its lock, which it let go): past the
    /// host's `max_retries`, [`Error::RetriesExhausted`], as for a read.
    pub(super) fn start_over(&self, count: &mut u32) -> Result<()> {
        *count += 1;
        if *count > self.options.max_retries {
            return Err(Error::RetriesExhausted {
                retries: self.options.max_retries,
            });
        }
        Ok(())
    }

    /// Waits a little for a record that is locked (a write, a dealloc or a delete in
    /// progress) or free (a dealloc whose event this replica has not applied yet, which
    /// the caller's next tail check applies); past the wait limit, [`Error::RecordBusy`].
    pub(super) fn wait_for_record(
        &self,
        backoff: &mut Option<Backoff>,
        record: u32,
        word: RecordWord,
        c: &ThreadCounters,
    ) -> Result<()> {
        if word.locked {
            c.add(Counter::WaitsForWriter, 1);
            // The lock may be this host's own, left pending by an append that failed.
            self.settle_own_work()?;
        }
        Backoff::snooze_or(backoff, self.options.wait_limit, |waited_ms| {
            self.record_busy(record, waited_ms)
        })
    }

    /// [`wait_for_record`](Self::wait_for_record) after a look that found `record`'s
    /// word `word` locked, or freed. Freed: its dealloc or delete is in the log (applied
    /// by its author before the free, so `ctail` covers it), the caller's next tail check
    /// is likely to apply it, and nobody holds the object. Locked, in a pod whose width
    /// may switch: a lookup older than the record array may have read bytes of the new
    /// width at the old, other records that look locked, after a switch took the record
    /// (its `WidthEnd` in the log, `ctail` covering it). So a look earns one more
    /// (`looked_again`: the caller had it) before the wait answers `RecordBusy`, whether
    /// the wait was spent before this look (a `read_many`'s by an earlier read,
    /// `delete_unless_busy`'s from the start) or ran out in its pause. (It answered
    /// `RecordBusy`: a freed record, or records of another width, taken for a locked
    /// one.) A record really locked costs one more tail check and lookup.
    pub(super) fn wait_or_look_again(
        &self,
        backoff: &mut Option<Backoff>,
        looked_again: &mut bool,
        record: u32,
        word: RecordWord,
        c: &ThreadCounters,
    ) -> Result<()> {
        let mut one_more_look = || !std::mem::replace(looked_again, true);
        if backoff.as_ref().is_some_and(Backoff::expired) && one_more_look() {
            return Ok(());
        }
        self.chaos.point(Point::RecordBeforeWait);
        match self.wait_for_record(backoff, record, word, c) {
            Err(_) if one_more_look() => Ok(()),
            waited => waited,
        }
    }

    /// `write_start` holding the lock of `record` (its word was `word`, now `word` with
    /// the lock and an odd counter): checks that no event about the object was applied
    /// since its lookup (`entry`, read at the index's `version`), and appends the wrap
    /// event if this write's increment wraps the counter. `Ok(false)`: an event came
    /// first; the record is restored and the caller starts over. From the lock on, every
    /// way out either returns the ticket or restores the record (DESIGN section 8: a
    /// locked record always ends unlocked).
    fn hold_for_write(
        &self,
        entry: &IndexEntry,
        version: u64,
        records: &Records<'_>,
        record: u32,
        word: RecordWord,
        c: &ThreadCounters,
    ) -> Result<bool> {
        let locked = RecordWord {
            in_use: true,
            locked: true,
            counter: word.counter + 1,
        };
        self.chaos.point(Point::WriteAfterLock);
        // Holding the lock: no event about the object can be appended by anyone who
        // follows the protocol, but one may have been applied between our lookup and the
        // lock. Catch up and check.
        if !mutants::skipped(Step::WriteEventCheckAfterLock)
            && !self.still_current(entry, Some(version), record, locked, word, c)?
        {
            return Ok(false);
        }
        self.chaos.point(Point::WriteAfterEventCheck);
        // Step 6's wrap event, appended now rather than at the end: if this write's
        // increment wraps the counter, every host must drop what it cached under the
        // counter's previous use of the value it comes back to, and learn it before the
        // counter can show that value, that is before our unlock. Appended while nothing
        // is written yet, a failure leaves the object as it was: restore the record and
        // report it. (A wrap event that reaches the log regardless only makes host
        // counters unknown: harmless.)
        let next = word.counter + 2;
        if next > records.counter_mask() && !mutants::skipped(Step::WrapEvent) {
            let key = self.replica.read().key_of(entry.handle);
            if let Err(error) = self.submit(&Event::Wrap { key: &key }) {
                self.restore_on_error(record, locked, word, c);
                return Err(error);
            }
            c.add(Counter::Wraps, 1);
        }
        Ok(true)
    }

    /// Holding `record`'s lock (its word `locked`, `word` before): catches up and says
    /// whether no event about `entry`'s object was applied since it was looked up (at the
    /// index's `version`, if known). If one was, or catching up fails, the record is
    /// restored first (the error is returned).
    fn still_current(
        &self,
        entry: &IndexEntry,
        version: Option<u64>,
        record: u32,
        locked: RecordWord,
        word: RecordWord,
        c: &ThreadCounters,
    ) -> Result<bool> {
        match self.unchanged_since_version(entry, version) {
            Ok(true) => Ok(true),
            Ok(false) => {
                if !self.unlock_record(record, locked, word, c) {
                    // Declared dead: the lock is its recovery's; no starting over.
                    return Err(Error::HostDeclaredDead {
                        host: self.id,
                        life: self.life,
                    });
                }
                Ok(false)
            }
            Err(error) => {
                self.restore_on_error(record, locked, word, c);
                Err(error)
            }
        }
    }

    /// Step 4 of a write holding the object's lock (`record`, or the replicated lock with
    /// [`NO_RECORD`]) at `counter`: what reads the object under the lock (an `update`, a
    /// ticket's `read`, the undo image's copy) must copy this version, so drop the
    /// object's lines unless they are of it. (The write's own bytes go straight to memory
    /// and keep the rest of each line as memory has it.) Returns what the ticket holds.
    pub(super) fn ready_to_write(
        &self,
        entry: &IndexEntry,
        record: u32,
        counter: u32,
        c: &ThreadCounters,
    ) -> WriteState {
        let place = self.place(entry);
        if !mutants::skipped(Step::WriterInvalidatesStaleLines)
            && entry.host_counter != Some(counter)
        {
            self.invalidate(place.offset, place.len, c);
        }
        WriteState {
            place,
            record,
            counter_before: counter,
            hold: None,
            raw: false,
        }
    }

    /// Unlocks `record`, which this thread holds (its word is `locked`), to `unlocked`, by
    /// a CAS from the locked word: only a lock's holder changes a locked record, so the CAS
    /// fails only if this host was declared dead meanwhile (paused past its lease after
    /// its look, and recovered), or the protocol is broken; it then leaves the word as it
    /// found it. `false`: this host was declared dead, and leaves the record to its
    /// recovery ([`Shared::left_to_recovery`]), or its CAS failed.
    pub(super) fn unlock_record(
        &self,
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
        c: &ThreadCounters,
    ) -> bool {
        if self.left_to_recovery() {
            return false;
        }
        self.chaos.point(Point::UnlockAfterCheck);
        let records = self.records();
        c.add_scr_at(|| records.address(record), ScrAccess::Update);
        // The width our lock was taken at: no switch goes on while a record is locked.
        let result = records.compare_exchange(record, locked, unlocked);
        debug_assert!(
            result.is_ok() || self.left_to_recovery(),
            "record {record}: locked as {locked:?}, found {result:?}"
        );
        // Failed: recovery took the record over after the look above. A write reported
        // done here could be undone by it (its undo image put back).
        result.is_ok()
    }

    /// [`Shared::unlock_record`] on a way out by an error (a mutant skips it, to show a
    /// test notices a record left locked).
    pub(super) fn restore_on_error(
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
    pub(super) fn settle_locked(
        &self,
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
        hold: Option<u64>,
    ) -> Settle {
        if mutants::skipped(Step::LockedRecordRestoredOnError) {
            Settle::Nothing
        } else {
            Settle::Locked {
                record,
                locked,
                unlocked,
                hold,
            }
        }
    }

    /// Catches up with the log and says whether no event about `entry`'s object was
    /// applied since it was looked up (its stamp is the same).
    pub(super) fn unchanged_since(&self, entry: &IndexEntry) -> Result<bool> {
        self.unchanged_since_version(entry, None)
    }

    /// [`Shared::unchanged_since`] of an entry looked up at the index's `version`, if
    /// known: while the index is still at it after the catch-up, no replay has changed
    /// the index since the lookup (one the catch-up waited for moved the version before
    /// it published its position), so the stamp stands without a second lookup, as in
    /// `read_end`.
    pub(super) fn unchanged_since_version(
        &self,
        entry: &IndexEntry,
        version: Option<u64>,
    ) -> Result<bool> {
        self.catch_up()?;
        if version.is_some_and(|version| self.replica.unchanged_since(version)) {
            return Ok(true);
        }
        Ok(self
            .replica
            .read()
            .current(entry.handle, entry.stamp)
            .is_some())
    }

    /// Step 5 of a write: the object's lines reach memory before anything says the write
    /// is done. The change stored them non-temporally (`store_object_bytes`); if the
    /// ticket's offset was handed out, lines a raw write through [`crate::Memory`] left in
    /// the cache are written back (16 `clwb`s that find nothing cost a 1 KiB write 12-15%
    /// here, so only then); then the fence.
    pub(super) fn write_back_object(&self, state: &WriteState, c: &ThreadCounters) {
        if !mutants::skipped(Step::WriteBackBeforeUnlock) {
            if state.raw {
                self.memory.write_back(state.place.offset, state.place.len);
            }
            c.add(Counter::LinesWrittenBack, Self::lines(state.place.len));
        }
        if !mutants::skipped(Step::WriteBackFencedBeforeUnlock) {
            self.memory.fence();
        }
    }

    /// Ends a write (steps 5 and 6). Nothing here can fail: the wrap event, the one step
    /// that needs the log, was appended by `write_start`. (AllLog's unlock is an event,
    /// and can.)
    pub(super) fn write_end(&self, state: WriteState, c: &ThreadCounters) -> Result<()> {
        if self.all_log {
            return self.write_end_all_log(state, c);
        }
        let records = self.records();
        // A host declared dead while it wrote (paused past its lease) writes nothing
        // back and lets go of nothing: its recovery put the undo image back, or kept what
        // reached memory, and unlocked; others may have written the object since. Its
        // announce words are its row's, and the id's next life may announce its own image
        // at this hold: clearing that image's bit, it would leave the next life's recovery
        // nothing to put back. (Its lines stay dirty in its cache, which may still write
        // them back when it evicts them: the lease's assumption. Pods with undo images
        // only: without, recovery leaves the record to its holder.)
        if state.hold.is_some() && self.left_to_recovery() {
            c.add(Counter::ScrAtomics, 1);
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        // 5. The object's lines reach memory before the counter says the write is done.
        self.write_back_object(&state, c);
        if let Some(hold) = state.hold {
            // Whole in its new version: what recovery keeps if we die from here.
            self.let_go_of_undo_image(hold);
            c.add(Counter::ScrAtomics, 2);
        }
        self.chaos.point(Point::WriteBeforeUnlock);
        // 6. Counter even again (its wrap event, if it wraps, is in the log already).
        let next = (state.counter_before + 2) & records.counter_mask();
        // Our cached lines are this version's; set the host counter while still holding
        // the lock (after the unlock the handle could be reused by a delete).
        self.replica
            .read()
            .set_host_counter(state.place.handle, Some(next));
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
        if !self.unlock_record(state.record, locked, unlocked, c) {
            // Declared dead while it wrote: its recovery keeps the new bytes or puts the
            // undo image back, and unlocks. Whichever it did, this write is not ours to
            // report done.
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        self.chaos.point(Point::WriteAfterUnlock);
        if let Some(hold) = state.hold {
            self.end_hold(hold);
            c.add(Counter::ScrAtomics, 1);
        }
        c.add(Counter::Writes, 1);
        Ok(())
    }

    /// Takes `record`'s lock (counter unchanged) for a delete of the object `entry` names,
    /// checks that no event about it was applied since the lookup, and asks the release
    /// hook. Returns the record, its word locked, its word before and the lock's announce;
    /// `None`: the record was busy or an event came first (the lock, if taken, is let go),
    /// so start over. `wait`: the delete's wait for the record, and whether it looked
    /// again at a record found freed or busy once its wait was spent.
    fn lock_for_delete(
        &self,
        entry: &IndexEntry,
        key: &[u8],
        record: u32,
        shape: RecordShape,
        wait: &mut DeleteWait,
        c: &ThreadCounters,
    ) -> Result<Option<Held>> {
        let DeleteWait {
            backoff,
            looked_again,
            backed_out,
        } = wait;
        let records = Records::of(&self.pod, shape);
        let word = records.load(record);
        c.add_scr_at(|| records.address(record), ScrAccess::Load);
        if mutants::skipped(Step::LockBeforeDelete) {
            return Ok(Some((record, word, word, None)));
        }
        if !word.in_use || word.locked {
            // `delete_unless_busy`'s wait is spent from the start.
            self.wait_or_look_again(backoff, looked_again, record, word, c)?;
            return Ok(None);
        }
        let locked = RecordWord {
            locked: true,
            ..word
        };
        // Freed on every way out but the returned one, after any unlock.
        let hold = self.take_hold()?;
        // The gate, as a write's (`write_start_counted`).
        let Some(gate) = self.pass_gate(shape, backoff, c)? else {
            return Ok(None);
        };
        if !self.announce(&hold, &records, record, locked)? {
            // A recoverer restores a dead host's lock of the record: wait for it.
            drop(gate);
            self.wait_for_record(backoff, record, word, c)?;
            return Ok(None);
        }
        c.add_scr_at(|| records.address(record), ScrAccess::Update);
        let taken = records.compare_exchange(record, word, locked).is_ok();
        drop(gate);
        if !taken {
            // The announce of a lock not taken goes before the hold drops, as a write's:
            // left, a hold dropped while the thread unwinds (a delete made from a drop
            // during a panic) finds its locked word on the record (the winner's: every
            // delete's lock of the word is one word, every lock at 2 bits) and takes it
            // for a lock its own call's panic left (`Hold`'s drop).
            self.withdraw(&hold);
            // As a write's (`write_start_counted`): a start-over if the object's record
            // changed through the log (taken away, given anew), else the next look waits
            // for the holder.
            if self.lock_lost_to_a_change(entry, None, key, record, shape)? {
                self.start_over(backed_out)?;
            }
            return Ok(None);
        }
        self.chaos.point(Point::ReleaseAfterLock);
        // From here on the record is ours: every way out frees or restores it, and
        // withdraws its announce after the unlock, before the hold drops (another
        // host's lock taken in between shows the same word: see above).
        let current = self.still_current(entry, None, record, locked, word, c);
        if !matches!(current, Ok(true)) {
            self.withdraw(&hold);
        }
        if !current? {
            // Backed out (the record is unlocked): a start-over, within the bound.
            self.start_over(backed_out)?;
            return Ok(None);
        }
        match self.release_allowed(key, record, ReleaseReason::Delete) {
            Ok(true) => Ok(Some((record, locked, word, hold.into_index()))),
            Ok(false) => {
                self.unlock_record(record, locked, word, c);
                self.withdraw(&hold);
                Err(Error::ReleaseRefused { record })
            }
            Err(panic) => {
                self.unlock_record(record, locked, word, c);
                // The lock's announce goes with it (see `deallocate`).
                self.withdraw(&hold);
                drop(hold);
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// Deletes `key`: takes its record's lock if it has one, appends the delete, frees the
    /// record once the event is applied here.
    // Over 70 lines on purpose: A delete's cases in order (absent, in a host's DRAM, read-
    // shared, with a record); taking the lock is `lock_for_delete`.
    /// `backoff`: the wait for a record another thread or host holds locked (`None`: a
    /// whole limit, begun at the first wait).
    pub(super) fn delete(
        &self,
        key: &[u8],
        backoff: Option<Backoff>,
        c: &ThreadCounters,
    ) -> Result<()> {
        if self.all_log {
            return self.delete_all_log(key, backoff, c);
        }
        let mut brought_back = 0;
        let mut wait = DeleteWait {
            backoff,
            looked_again: false,
            backed_out: 0,
        };
        loop {
            self.catch_up()?;
            self.chaos.point(Point::DeleteAfterTailCheck);
            let (entry, shape) = {
                let index = self.replica.read();
                (index.lookup(key), index.shape())
            };
            let Some(entry) = entry else {
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
                    Outcome::DeleteLost => {
                        self.start_over(&mut wait.backed_out)?;
                        continue;
                    }
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
            let held = match entry.record {
                None => None,
                Some(record) => {
                    match self.lock_for_delete(&entry, key, record, shape, &mut wait, c)? {
                        Some(held) => Some(held),
                        None => continue,
                    }
                }
            };
            // The record whose lock we hold (none for a read-shared object): the delete
            // wins in the log only if the object still has exactly that one.
            let expected = entry.record.unwrap_or(NO_RECORD);
            let settle = match held {
                Some((record, locked, word, hold)) if locked.locked => {
                    self.settle_locked(record, locked, word, hold)
                }
                _ => Settle::Nothing,
            };
            let hold = held.and_then(|(_, _, _, hold)| hold);
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
                        let locked = held.map_or_else(
                            || Records::of(&self.pod, shape).load(record),
                            |(_, l, _, _)| l,
                        );
                        self.free_released(record, locked, c);
                    }
                    self.end_hold_of(hold);
                    c.add(Counter::Deletes, 1);
                    return Ok(());
                }
                Outcome::DeleteLost => {
                    if let Some((record, locked, word, _)) = held.filter(|(_, l, _, _)| l.locked) {
                        self.unlock_record(record, locked, word, c);
                    }
                    self.end_hold_of(hold);
                    self.start_over(&mut wait.backed_out)?;
                    continue;
                }
                _ => {
                    if let Some((record, locked, word, _)) = held.filter(|(_, l, _, _)| l.locked) {
                        self.unlock_record(record, locked, word, c);
                    }
                    self.end_hold_of(hold);
                    return Err(Error::UnknownKey);
                }
            }
        }
    }
}

/// A delete's wait for its object's record: the wait itself (`None` until it begins),
/// whether the delete looked again at a record found freed or busy once the wait was spent,
/// and how many times it backed out (an event about the object came first).
struct DeleteWait {
    backoff: Option<Backoff>,
    looked_again: bool,
    backed_out: u32,
}

/// A record whose lock a delete holds: the record, its word locked, its word before, and
/// the lock's announce (pods with undo images).
type Held = (u32, RecordWord, RecordWord, Option<u64>);
