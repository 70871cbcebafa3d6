//! This host's side of the log: the tail check, replay into its replica, appends (through
//! the combiner, in batches, each request with its settle), and the log events of slots
//! and creates.

use std::time::Duration;

use super::records::FreeRecords;
use super::{Settle, Shared};

use crate::backoff::Backoff;
use crate::chaos::{Fault, Point};
use crate::counters::Counter;
use crate::error::{Error, Result};
use crate::event::{Event, OwnedEvent};
use crate::host_table;
use crate::ids::HostId;
use crate::limits::LINE_BYTES;
use crate::log::Log;
#[cfg(not(megalon_loom))]
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::replica::{Index, Outcome};
use crate::slot::SlotPool;
use crate::sync::Ordering;

/// How long a create that asked for slots waits for them before it asks again (doubling
/// each time, up to [`REASK_MOST`]; see `take_slot`).
const REASK_FIRST: std::time::Duration = std::time::Duration::from_millis(2);
const REASK_MOST: std::time::Duration = std::time::Duration::from_millis(100);

/// Entries a replay applies between two beats of its host's heartbeat.
const REPLAY_ENTRIES_PER_BEAT: u64 = 256;

/// What one replay collects while it applies entries, to act on once `ctail` covers them.
#[derive(Default)]
struct Replayed {
    /// Slots whose cached lines were dropped.
    dropped: u64,
    /// Local copies dropped.
    copies_dropped: u64,
    /// Settles of this host's entries whose appenders gave up waiting.
    settled: Vec<(Settle, Outcome, OwnedEvent)>,
    /// Slots this replay gives this host (its deletes, its lost creates, claims and
    /// grants). They join the pool only once `ctail` covers the events: a deleted
    /// object's slot may be read by another host's reader until then, and that reader's
    /// tail check must find the delete before anyone writes the slot again.
    gained: SlotPool,
}

/// The CXL model's charge of a tail check's look at `ctail` (see `Shared::catch_up`).
#[cfg(not(megalon_loom))]
#[cold]
#[inline(never)]
fn charge_tail_check(
    memory: &crate::memory::cxl::CxlMemory,
    ctail: &crate::sync::AtomicU64,
    moved: bool,
) {
    memory.bind();
    crate::memory::cxl::charge_tail_check(ctail, moved);
}

impl Shared {
    /// The tail check: makes the replica cover `ctail`.
    #[inline]
    pub(super) fn catch_up(&self) -> Result<()> {
        self.still_alive()?;
        // Acquire: pairs with the AcqRel `fetch_max` in `replay_locked` (only a replay
        // moves `ctail`); entries below ctail are published and their lines reached memory
        // before it moved.
        let ctail = Log::ctail(&self.pod);
        let target = ctail.load(Ordering::Acquire);
        let moved = self.replica.applied.load(Ordering::Acquire) < target;
        // Under the CXL model, by its line: a miss once another host's replay raised it
        // (which takes the line whether or not it moves the position), also when this
        // replica covers the position already. This host's, whichever thread checks.
        // Only there: on other memories nothing is charged, and a read checks the tail
        // twice (no thread-local look on its way).
        #[cfg(not(megalon_loom))]
        if let Memory::Cxl(memory) = &self.memory {
            charge_tail_check(memory, ctail, moved);
        }
        if moved {
            return self.catch_up_to(target);
        }
        Ok(())
    }

    /// [`catch_up`](Self::catch_up) once the tail check found `ctail` at `target`, past
    /// what this replica covers. Out of line, as the model's charge is
    /// (`charge_tail_check`): a read checks the tail twice, and the instructions of its
    /// path from one copy to the next lookup are what a lone read waits for
    /// (`docs/object.md`, "A lone read's window").
    #[inline(never)]
    fn catch_up_to(&self, target: u64) -> Result<()> {
        // Counted in the protocol's SCR atomics only when it finds something new (its
        // line changed: a miss in the coherent cache), as before; charged in `catch_up`.
        self.with_counters(|c| c.count_uncharged(Counter::ScrAtomics, 1));
        // As an appender's confirm: a sibling's replay may hold the lock through a wait
        // for a hole past `target`, after its round covered `target`.
        self.confirm(target)?;
        // The replay may have applied this host's own death (a lease that ran out while
        // it was paused): nothing it was about to do may go on.
        self.still_alive()
    }

    /// `Err(HostDeclaredDead)` once a recoverer has condemned this host's life (it was
    /// declared dead: its recovery has begun, or is done and its row is freed), or its
    /// replica has applied its death.
    pub(super) fn holds_its_row(&self) -> Result<()> {
        if !self.row_is_mine() {
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        self.still_alive()
    }

    /// Whether this host's row is its life's, and its recovery has not begun.
    pub(super) fn row_is_mine(&self) -> bool {
        host_table::holder(&self.pod, self.id) == Some((host_table::this_process(), self.life))
            && !host_table::condemned(&self.pod, self.id, self.life)
    }

    /// `Err(HostDeclaredDead)` once this host's replica has applied its death.
    #[inline]
    pub(super) fn still_alive(&self) -> Result<()> {
        if self.is_declared_dead() {
            return Err(self.declared_dead());
        }
        Ok(())
    }

    fn declared_dead(&self) -> Error {
        Error::HostDeclaredDead {
            host: self.id,
            life: self.life,
        }
    }

    /// Whether this life's `ltail` still holds the log's head, checked after a copy of an
    /// entry from it on: while it holds, no entry from it on is written over (the head
    /// waits for it), so the copy is whole. A recoverer releases it before the head may
    /// pass it; a host paused past its lease finds it released when it wakes, and its
    /// replay, a lap behind perhaps, stops there.
    fn ltail_holds_head(&self) -> bool {
        // The copy's loads are done before the `ltail`'s (a seqlock's read side; the
        // recoverer's release of the word comes before any write over the entry).
        crate::sync::fence(Ordering::Acquire);
        Log::ltail_of(&self.pod, self.id, self.life).is_some()
    }

    /// Applies published entries from this replica's position on. With a `target`, waits
    /// (bounded, without holding the index) for entries below it that are reserved but not
    /// yet published. Returns the position applied up to.
    // Over 70 lines on purpose: One replay's round in order (apply, advance `ctail`, reuse
    // slots and settle, wait); each part's work is a function of its own.
    pub(super) fn replay(&self, target: Option<u64>) -> Result<u64> {
        self.replay_locked(self.replica.replay.lock(), target, None)
    }

    /// [`replay`](Self::replay), the replay lock taken. Its wait for a hole goes on with
    /// `backoff`, the caller's wait if it began one (its limit counts from the call).
    fn replay_locked(
        &self,
        mut state: crate::sync::MutexGuard<'_, crate::replica::ReplayState>,
        target: Option<u64>,
        mut backoff: Option<Backoff>,
    ) -> Result<u64> {
        let state = &mut *state;
        let start = self.replica.applied.load(Ordering::Acquire);
        let mut position = start;
        let mut failure = None;
        let mut done = Replayed::default();
        let mut fenced = 0;
        // What this replay last raised this life's `ltail` to.
        let mut raised = start;
        // Whether the wait for a hole, past its limit, has had its one more look.
        let mut looked_again = false;
        'rounds: loop {
            let mut index = None;
            loop {
                let published = self.log.read(&self.memory, position, &mut state.entry);
                if !self.ltail_holds_head() {
                    // Recovered while paused: the ring may have written over what was just
                    // read (or over the entry not published yet), and nothing more of the
                    // log is this life's to apply.
                    failure = Some(self.declared_dead());
                    break;
                }
                if !published {
                    break;
                }
                let (author, event) = match Event::decode(position, &state.entry) {
                    Ok(decoded) => decoded,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                };
                // Ended by `finish` below: a panic under it poisons the replica, even in a
                // call made from a drop during an unwind.
                let index = index.get_or_insert_with(|| self.replica.write_to_finish());
                let applied = self.apply_entry(
                    index,
                    &mut state.grants,
                    position,
                    author,
                    &event,
                    &mut done,
                );
                if let Err(error) = applied {
                    failure = Some(error);
                    break;
                }
                position += 1;
                // A long replay (a joiner's from position 0, a rescuer's above all: no
                // pump runs yet) beats as it goes: on another machine its lease would run
                // out while it works, and a watcher would declare it dead, or another
                // joiner take its row over, alive.
                if (position - start).is_multiple_of(REPLAY_ENTRIES_PER_BEAT) {
                    self.beat();
                }
                self.chaos.point(Point::ReplayBetweenEntries);
            }
            if index.is_some() {
                if done.dropped > fenced {
                    // The lines this round dropped are gone before anyone can look the new
                    // index up: a lookup without the lock sees it once the guard goes.
                    self.memory.fence();
                    fenced = done.dropped;
                }
                self.chaos.point(Point::ReplayBeforeCtail);
                // Before anyone can read what was just applied (they take the read lock
                // once we let go), `ctail` covers it: a read on another host that starts
                // after a read here ended then replays it too. Every entry below
                // `position` is published (we just read them). AcqRel: Release pairs with
                // the Acquire in every host's `catch_up`.
                Log::raise_ctail(&self.pod, position);
            }
            let applied_round = index.is_some();
            if let Some(index) = index {
                index.finish();
            }
            // `ctail` covers this round: its freed slots may be reused, its settles run.
            if !done.gained.is_empty() {
                self.slots.lock().append(std::mem::take(&mut done.gained));
            }
            for (settle, outcome, event) in done.settled.drain(..) {
                self.settle(settle, Some(outcome), &event);
            }
            if applied_round {
                // The replica covers this round now: a tail check of this host whose
                // target it reaches need not wait on the replay lock for the rest of this
                // replay (a wait for a hole, up to the wait limit). Release: pairs with
                // the Acquire in `catch_up` (this host's readers) and the SeqCst loads in
                // `Log::advance_head` (appenders on every host).
                self.replica.applied.store(position, Ordering::Release);
                // And the log need not keep what it applied: nothing reads those entries
                // again (this round's settles are done). Raised at the end of the replay
                // only, the `ltail` held the head through a wait for a hole, and the log
                // full for every host until the wait gave up.
                //
                // A CAS from what this life stored last: a host declared dead (paused past
                // its lease) whose pump replays on must not move the `ltail` its recoverer
                // released, nor the id's next life's (the head would pass that life's
                // position). A check of the row before a store left a pause in between.
                Log::raise_own_ltail(&self.pod, self.id, self.life, raised, position);
                raised = position;
            }
            if failure.is_some() {
                // What was applied before the failure is covered by `ctail` (above).
                break 'rounds;
            }
            match target {
                Some(target) if position < target => {
                    // A host waiting beats: a joiner's pump does not run yet (its
                    // `HostJoined` may wait here), and one on another machine would be
                    // declared dead while it waits.
                    self.beat();
                    // The position may be a dead host's, which only a recovery fills.
                    self.unblock_log();
                    self.chaos.point(Point::ReplayBeforeWait);
                    let waited =
                        Backoff::snooze_or(&mut backoff, self.options.wait_limit, |waited_ms| {
                            Error::ReplayStalled {
                                position,
                                waited_ms,
                            }
                        });
                    if let Err(stalled) = waited {
                        // The limit passed, maybe while this thread was stopped after its
                        // look at the log: one more round looks again before the wait
                        // gives up (an entry published meanwhile is applied, not answered
                        // `ReplayStalled`).
                        if !std::mem::replace(&mut looked_again, true) {
                            continue 'rounds;
                        }
                        failure = Some(stalled);
                        break 'rounds;
                    }
                }
                _ => break 'rounds,
            }
        }
        self.finish_replay(start, position, &done);
        match failure {
            Some(error) => Err(error),
            None => Ok(position),
        }
    }

    /// Applies the entry at `position` to `index` and does this host's part of it: its
    /// own entry's outcome (or settle), a grant it must make, the lines it must drop, the
    /// local copy that is no longer valid.
    fn apply_entry(
        &self,
        index: &mut Index,
        grants: &mut Vec<(HostId, u64)>,
        position: u64,
        author: HostId,
        event: &Event<'_>,
        done: &mut Replayed,
    ) -> Result<()> {
        let applied = if mutants::skipped(Step::SlotsReusedAfterCtail) {
            index.apply(position, author, event, self.id, &mut self.slots.lock())?
        } else {
            index.apply(position, author, event, self.id, &mut done.gained)?
        };
        match *event {
            // Replay rebuilt the free slots of this id's earlier holder up to here, and
            // the requests for slots it was asked: the pod got its free slots back (a
            // rejoin that replays the log from its start served them all again, from this
            // life's slots, to hosts that asked long before it joined).
            Event::HostJoined { .. } if author == self.id => {
                *self.slots.lock() = SlotPool::default();
                done.gained = SlotPool::default();
                grants.clear();
            }
            Event::HostDead { host, joins } if host == self.id && joins == self.life => {
                self.declared_dead
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {}
        }
        // A `Skip` names the host that reserved its position (filled by it or by its
        // recoverer): no appender of this host waits for its outcome; nor for an entry of
        // an earlier life of its id (a rejoin replays them: kept, their outcomes would
        // pile up for as long as it lives).
        let own = author == self.id && position >= self.first_reserved.load(Ordering::SeqCst);
        if own && !matches!(event, Event::Skip) {
            // The settles lock is held from the look for a settle to the outcome's insert:
            // an appender whose confirm failed decides under it too
            // (`decide_unconfirmed`), so each entry either finds its settle here or leaves
            // its outcome for the appender.
            let mut settles = self.settles.lock();
            match settles.remove(&position) {
                // Its appender gave up waiting: settle for it once `ctail` covers the
                // entry (at the end of the round).
                Some((settle, event)) => done.settled.push((settle, applied.outcome, event)),
                None => {
                    self.replica
                        .outcomes
                        .lock()
                        .insert(position, applied.outcome);
                }
            }
            drop(settles);
        }
        if let Some(grant) = applied.grant {
            grants.push(grant);
        }
        // What the log says about which records are free (see `FreeRecords`).
        match (applied.outcome, event) {
            (Outcome::RecordAllocated, Event::RecordAlloc { record, .. }) => {
                self.free_records.lock().remove(*record)
            }
            (Outcome::RecordDeallocated, &Event::RecordDealloc { record, .. })
            | (
                Outcome::Deleted {
                    record: Some(record),
                    ..
                },
                _,
            ) => self.free_records.lock().insert(record),
            _ => {}
        }
        if let Some(slot) = applied.drop_slot {
            let is_move = matches!(event, Event::MoveToHost { .. } | Event::MoveToCxl { .. });
            let own_dealloc = author == self.id && matches!(event, Event::RecordDealloc { .. });
            let skipped = mutants::skipped(Step::ReplayDropsLines)
                || is_move && mutants::skipped(Step::MoveDropsLines)
                || own_dealloc && mutants::skipped(Step::DeallocDropsAuthorsLines);
            if !skipped {
                let layout = self.pod.layout();
                let slot_bytes = layout.config.slot_size_bytes as usize;
                self.memory.flush(layout.slot_offset(slot), slot_bytes);
            }
            done.dropped += 1;
        }
        if matches!(
            event,
            Event::HostDead { .. } | Event::HostJoined { .. } | Event::HostLeft
        ) {
            self.drop_handed_back(index, done);
        }
        if let Outcome::WidthSwitched { .. } = applied.outcome {
            // Every record is free, at the new width; every object that had one is
            // read-shared now.
            *self.free_records.lock() = FreeRecords::new(index.record_count());
            self.drop_handed_back(index, done);
        }
        if let (Some(slot), Some(local)) = (applied.touched_slot, &self.local) {
            let kept = matches!(event, Event::RecordAlloc { .. })
                && mutants::skipped(Step::WriteInvalidatesCopies);
            if !kept && local.invalidate_copy(index, slot) {
                done.copies_dropped += 1;
            }
            if matches!(event, Event::Create { .. }) {
                // A new object in the slot: the old one's counts are not its.
                local.forget(slot);
            }
        }
        Ok(())
    }

    /// After a `HostDead` (or a `HostJoined`, see `apply_host_joined`): every host (the
    /// event's author too) drops its cached lines of the objects it handed back to CXL
    /// from the gone host's DRAM, and any copy of them. A
    /// line cached while the object was away holds its bytes as they were when it moved
    /// there, and the dead host may have written the slot since (a move back cut short
    /// after its copy, before its `MoveToCxl`): a read-shared object has no counter to
    /// tell a reader so.
    fn drop_handed_back(&self, index: &mut Index, done: &mut Replayed) {
        let layout = self.pod.layout();
        let slot_bytes = layout.config.slot_size_bytes as usize;
        for slot in std::mem::take(&mut index.handed_back) {
            if !mutants::skipped(Step::HostDeadDropsLines) {
                self.memory.flush(layout.slot_offset(slot), slot_bytes);
            }
            done.dropped += 1;
            if let Some(local) = &self.local {
                if local.invalidate_copy(index, slot) {
                    done.copies_dropped += 1;
                }
            }
        }
    }

    /// After a replay applied `start..position`: its counts (each of its rounds published
    /// what it applied).
    fn finish_replay(&self, start: u64, position: u64, done: &Replayed) {
        if done.dropped > 0 {
            self.counters
                .slots_dropped
                .fetch_add(done.dropped, Ordering::Relaxed);
        }
        // The lines this replay invalidated: each entry it applied (read after its lines
        // were dropped; a look at an entry not yet published, one line, is not counted,
        // as a poll that finds nothing is not) and each slot whose lines it dropped.
        let lines = (position - start) * (self.log.entry_bytes() as u64).div_ceil(LINE_BYTES)
            + done.dropped * self.pod.config().slot_size_bytes.div_ceil(LINE_BYTES);
        if lines > 0 || done.copies_dropped > 0 {
            self.with_counters(|c| {
                c.add(Counter::LinesInvalidated, lines);
                c.add(Counter::CopiesInvalidated, done.copies_dropped);
            });
        }
        if position > start {
            // `applied` and the `ltail` cover `position`: each round that applied raised
            // them.
            self.counters
                .entries_replayed
                .fetch_add(position - start, Ordering::Relaxed);
        }
    }

    /// Appends `event` (through the combiner, if on) and returns its outcome. For events
    /// whose appender holds nothing another host waits on: an error means the event may or
    /// may not take effect later.
    pub(super) fn submit(&self, event: &Event<'_>) -> Result<Outcome> {
        self.submit_settled(event, Settle::Nothing)
    }

    /// Appends `event`, whose appender holds what `settle` says. On success the caller
    /// goes on with the outcome; on an error this host settles what the caller held (at
    /// once, or when replay applies the entry), and the caller must not touch it.
    pub(super) fn submit_settled(&self, event: &Event<'_>, settle: Settle) -> Result<Outcome> {
        let called = std::time::Instant::now();
        let mut result = self.append_settled(event, settle);
        // A refusal for room says how long its caller waited, from its call: the wait for
        // room of the batch that refused it (behind a combiner's batch, or another
        // thread's append lock) was only the end of it.
        if let Err(Error::LogFull { waited_ms, .. }) = &mut result {
            *waited_ms = (*waited_ms).max(called.elapsed().as_millis() as u64);
        }
        result
    }

    /// What [`submit_settled`](Self::submit_settled) does, through the combiner or alone;
    /// its `LogFull` names the wait of the batch that refused it.
    fn append_settled(&self, event: &Event<'_>, settle: Settle) -> Result<Outcome> {
        let owned = OwnedEvent::new(event);
        // A panic in the append (this thread's, or the combiner's that held our request)
        // leaves our settle undone, and whether the entry reached the log unknown.
        let _panics = AppendPanicGuard::new(self);
        if self.options.flat_combining {
            let result = self.combiner.submit(
                owned.clone(),
                settle,
                self.options.wait_limit,
                |requests, limits, answer| self.append_batch(requests, limits, answer, true),
            );
            match result {
                Err(Error::CombinerStalled { waited_ms }) => {
                    // Withdrawn from the queue unserved: nothing reached the log.
                    self.settle(settle, None, &owned);
                    // What held the combiner past our limit was, with the log full now,
                    // its wait for room: the caller hears why, as an append of its own
                    // would have said.
                    let waited = Duration::from_millis(waited_ms);
                    self.memory.bind_scr();
                    if let Some(full) = self.log.full_now(&self.pod, &self.chaos, waited) {
                        return Err(full);
                    }
                }
                Err(Error::CombinerPanicked) if settle != Settle::Nothing => {
                    self.left_unsettled
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                _ => {}
            }
            result
        } else {
            let mut result = None;
            self.append_batch(
                &[(owned, settle)],
                &[self.options.wait_limit],
                &mut |_, answer| result = Some(answer),
                false,
            );
            result.expect("one result per event")
        }
    }

    /// Appends `requests` in as few batches as the ring allows, applies them on this
    /// replica, advances `ctail`, and gives each its outcome through `answer` (with its
    /// index) as soon as it is known. A request that fails is settled here: at once if it
    /// never reached the log, else when replay applies it. Each request waits for room in
    /// the log at most its own `limits[i]` from now (what is left of its wait limit: see
    /// `append_within`); a later wait for an outcome is the wait limit.
    ///
    /// With `hand_off` (a combiner's batch), once some of its requests are answered and
    /// the others must wait on for room, those others are left unanswered, untouched, for
    /// the combiner to queue again: the combiner's thread, whose own request may be one of
    /// those answered, does not serve the rest's waits (it answered its caller only once
    /// they were over: a create appended at 1 s of its 1 s limit after 1.5 s).
    pub(super) fn append_batch(
        &self,
        requests: &[(OwnedEvent, Settle)],
        limits: &[Duration],
        answer: &mut dyn FnMut(usize, Result<Outcome>),
        hand_off: bool,
    ) {
        debug_assert_eq!(requests.len(), limits.len());
        let now = std::time::Instant::now();
        // Checked: a wait limit of `Duration::MAX` has no deadline.
        let deadlines: Vec<Option<std::time::Instant>> =
            limits.iter().map(|&limit| now.checked_add(limit)).collect();
        let left = |i: usize| {
            deadlines[i].map_or(limits[i], |d| {
                d.saturating_duration_since(std::time::Instant::now())
            })
        };
        let mut refused: Option<Error> = None;
        // Some of an earlier part were left for a later batch: so are these. Also when an
        // earlier part was refused for room (every request of it out of time at once):
        // these have later deadlines, and wait on for room within them, queued again.
        let mut left_some = false;
        // The earliest deadlines first (the queue's order, mostly): a batch the log has
        // room for only part of appends those.
        let mut indices: Vec<usize> = (0..requests.len()).collect();
        indices.sort_by_key(|&i| (deadlines[i].is_none(), deadlines[i]));
        for chunk in indices.chunks(self.log.capacity() as usize) {
            match &refused {
                // An earlier batch failed: these are not appended either.
                Some(error) => {
                    for &i in chunk {
                        let (event, settle) = &requests[i];
                        self.settle(*settle, None, event);
                        answer(i, Err(error.clone()));
                    }
                }
                None if left_some => {}
                None => match self.append_within(requests, chunk, &left, answer, hand_off) {
                    Within::Done => {}
                    Within::Refused(Error::LogFull { .. }) if hand_off => left_some = true,
                    Within::Refused(error) => refused = Some(error),
                    Within::Left => left_some = true,
                },
            }
        }
    }

    /// Appends the requests `chunk` names (at most the ring's capacity, the earliest
    /// deadline first), each waiting for room in the log at most what `left` says is left
    /// of its limit, and answers each through `answer` once it is decided (not once the
    /// others are). A batch waits the least of them: when the log has no room for the
    /// whole batch that long, the requests it has room for are appended (from the first),
    /// and the others wait on in a batch of their own; when it has room for none, the
    /// request whose limit ran out is refused (and any other whose limit is over), and the
    /// others wait on (nothing of a refused batch reached the log); any other error
    /// refuses them all. With `hand_off`, the others are left unanswered instead of waiting
    /// on here (see `append_batch`).
    fn append_within(
        &self,
        requests: &[(OwnedEvent, Settle)],
        chunk: &[usize],
        left: &dyn Fn(usize) -> Duration,
        answer: &mut dyn FnMut(usize, Result<Outcome>),
        hand_off: bool,
    ) -> Within {
        let mut pending = chunk.to_vec();
        while !pending.is_empty() {
            let limit = pending.iter().map(|&i| left(i)).min().unwrap_or_default();
            // Requests in their queue's order (the usual case) are a slice of them.
            let appended = if pending.windows(2).all(|pair| pair[1] == pair[0] + 1) {
                self.append_chunk(&requests[pending[0]..pending[0] + pending.len()], limit)
            } else {
                let batch: Vec<(OwnedEvent, Settle)> =
                    pending.iter().map(|&i| requests[i].clone()).collect();
                self.append_chunk(&batch, limit)
            };
            let error = match appended {
                Ok(outcomes) => {
                    // The first of them, or all.
                    let appended = outcomes.len();
                    for (&i, outcome) in pending.iter().zip(outcomes) {
                        answer(i, outcome);
                    }
                    pending.drain(..appended);
                    if hand_off && !pending.is_empty() {
                        return Within::Left;
                    }
                    continue;
                }
                Err(error) => error,
            };
            let full = matches!(error, Error::LogFull { .. });
            let earliest = pending
                .iter()
                .copied()
                .min_by_key(|&i| left(i))
                .expect("pending");
            let mut kept = Vec::with_capacity(pending.len());
            for &i in &pending {
                if full && i != earliest && !left(i).is_zero() {
                    kept.push(i);
                } else {
                    let (event, settle) = &requests[i];
                    self.settle(*settle, None, event);
                    answer(i, Err(error.clone()));
                }
            }
            if kept.is_empty() {
                return Within::Refused(error);
            }
            if hand_off {
                return Within::Left;
            }
            pending = kept;
        }
        Within::Done
    }

    /// Appends one batch (at most the ring's capacity), waiting for room in the log for
    /// all of it at most `limit`, then for as many as fit. `Err`: nothing of it reached
    /// the log. `Ok`: a result for each of its first events (at least one; all of them
    /// unless the log had room for fewer when the wait ran out, the others untouched, not
    /// settled); an event whose outcome could not be confirmed is an `Err` whose settle
    /// replay runs when it applies the entry.
    pub(super) fn append_chunk(
        &self,
        batch: &[(OwnedEvent, Settle)],
        limit: Duration,
    ) -> Result<Vec<Result<Outcome>>> {
        let entry_bytes = self.log.entry_bytes();
        let mut entries = vec![0u8; entry_bytes * batch.len()];
        for ((event, _), entry) in batch.iter().zip(entries.chunks_exact_mut(entry_bytes)) {
            event.event().encode(self.id, entry);
        }
        if self.chaos.fail(Fault::Refuse) {
            return Err(Error::InjectedFault {
                fault: Fault::Refuse.name(),
            });
        }
        // The wait for the append lock counts: another thread of this host (without flat
        // combining) may hold it while it waits for room, up to its own limit.
        let called = std::time::Instant::now();
        // One reservation at a time per host: its row holds one announced range.
        let appending = self.append_lock.lock();
        let limit = limit.saturating_sub(called.elapsed());
        // Its reservation is announced in its row: a host declared dead must not write
        // into a row its id's next holder may hold.
        self.holds_its_row()?;
        let announced = std::cell::Cell::new(0);
        let began = std::time::Instant::now();
        // The reservation's looks at the log's cursors come before any line of the entry:
        // this host's under the model (an append of a slot claim, say, from a thread that
        // had not called on its memory yet), nobody's on other memories.
        self.memory.bind_scr();
        let reserved = self.log.reserve(
            &self.pod,
            1..=batch.len() as u64,
            limit,
            &self.chaos,
            |from, end| {
                if !host_table::announce_reservation(&self.pod, self.id, self.life, from, end) {
                    return Err(Error::HostDeclaredDead {
                        host: self.id,
                        life: self.life,
                    });
                }
                announced.set(end);
                Ok(())
            },
            || {
                // No room: the range it announced last lost its `tail` CAS to another
                // host, which may die before it publishes. Announced still, the range
                // would keep that host's recovery (this host's own, in `unblock_log`
                // below) from filling it, and the ring from making room, until this wait
                // gave up.
                host_table::withdraw_reservation(
                    &self.pod,
                    self.id,
                    self.life,
                    announced.replace(0),
                );
                // A host waiting for room beats: a joiner's pump does not run yet, and one
                // on another machine would be declared dead while it waits for its
                // `HostJoined`'s room.
                self.beat();
                // The host holding the head back may be dead.
                self.unblock_log();
                // Or a late joiner waiting to be served: its `ltail` holds the head where
                // it claimed its row until a server pins it, and this host's pump, the
                // only server maybe, may be waiting for this append's lock (a recovery's
                // `HostDead`, a grant). Within what is left of this append's wait: it
                // holds the append lock, which the host's other appends wait for.
                if let Err(error) = self.serve_join_by(began.checked_add(limit)) {
                    self.background_error(error);
                }
                // This host's own `ltail` may hold the head: replay. Unless another thread
                // of this host replays (it holds the lock, maybe waiting for a hole up to
                // its limit): its rounds raise the `ltail`, and a wait for its lock kept
                // this append from seeing room another host made meanwhile.
                match self.replica.replay.try_lock() {
                    Some(state) => self.replay_locked(state, None, None).map(drop),
                    None => Ok(()),
                }
            },
        );
        let (start, count) = match reserved {
            Ok(reserved) => reserved,
            Err(error) => {
                host_table::withdraw_reservation(&self.pod, self.id, self.life, announced.get());
                return Err(error);
            }
        };
        // A panic from here to the publish (a bug) fills what it left of the range: left,
        // the hole stalled every replica for as long as this host lived, and the row's
        // announce of it went with this host's next reservation, so that no recovery
        // filled it after either.
        let unpublished = FillOnUnwind {
            shared: self,
            range: start..start + count,
        };
        // What the log had room for: the rest is the caller's to append.
        let batch = &batch[..count as usize];
        let entries = &entries[..entry_bytes * batch.len()];
        // Before the entries are written, so before any replay applies them.
        self.first_reserved.fetch_min(start, Ordering::SeqCst);
        self.chaos.point(Point::AppendAfterReserve);
        // A host paused past its lease since its reservation was declared dead, and its
        // positions filled with `Skip` entries that every host may have applied: writing
        // ours over them would make the replicas differ. It learns it here, from its row
        // (freed once it was recovered), right before it writes (the lease's rule: a
        // pause between this check and the writes is what it cannot rule out).
        //
        // Its positions are its recovery's to fill: the announce above was made while
        // its row was its own and not condemned (checked before every word), so the
        // recovery that condemned it reads it; and a `tail` CAS that succeeds after that
        // recovery read the tail leaves positions below the recovery's own `HostDead`,
        // whose replay waits for them and fills them first (the row is still held
        // then). Filling them here as well would be a second writer of a position,
        // which a pause could make write over the next lap's entry.
        self.holds_its_row()?;
        // Positions noted before they are published (`Host::create_noting_position`): an
        // entry applied is one whose note was there to load. After the row check: a host
        // declared dead must not store into a word the id's next life may use.
        for (i, (_, settle)) in batch.iter().enumerate() {
            if let Settle::Create { note: Some(at), .. } = settle {
                self.pod
                    .scr_u64(*at)
                    .store(start + i as u64 + 1, Ordering::SeqCst);
            }
        }
        self.chaos.point(Point::AppendBeforeWrite);
        for (i, entry) in entries.chunks_exact(entry_bytes).enumerate() {
            self.log.write(&self.memory, start + i as u64, entry);
        }
        unpublished.let_go();
        // Published: nothing of ours for a recoverer to fill.
        host_table::withdraw_reservation(&self.pod, self.id, self.life, start + count);
        drop(appending);
        self.counters
            .entries_appended
            .fetch_add(count, Ordering::Relaxed);
        self.counters
            .batches_appended
            .fetch_add(1, Ordering::Relaxed);
        self.chaos.point(Point::AppendAfterPublish);
        // Replay applies our entries (and all before them) and advances `ctail` over them
        // before it releases the index.
        let confirmed = if self.chaos.fail(Fault::Unconfirmed) {
            Err(Error::InjectedFault {
                fault: Fault::Unconfirmed.name(),
            })
        } else {
            self.confirm(start + count)
        };
        // Applied: every outcome is there, and no replay looks for a settle of these
        // entries. Not applied (all of them, maybe): which are, and the settle of each
        // that is not left to the replay that applies it (`decide_unconfirmed`).
        let found: Vec<Option<Outcome>> = if confirmed.is_ok() {
            let mut outcomes = self.replica.outcomes.lock();
            (start..start + count)
                .map(|position| outcomes.remove(&position))
                .collect()
        } else {
            self.decide_unconfirmed(batch, start)
        };
        let results = batch
            .iter()
            .zip(found)
            .map(|((event, settle), found)| {
                match (found, &confirmed) {
                    (Some(outcome), _) => Ok(outcome),
                    // Applied, and not ours: a recoverer filled our position with `Skip`
                    // (we were declared dead after our row check, paused past our lease
                    // before our write). Our event never took effect.
                    (None, Ok(())) => {
                        self.settle(*settle, None, event);
                        Err(Error::HostDeclaredDead {
                            host: self.id,
                            life: self.life,
                        })
                    }
                    // In the log, not applied yet: its settle, queued, runs when it is.
                    (None, Err(error)) => Err(error.clone()),
                }
            })
            .collect();
        Ok(results)
    }

    /// For an append whose confirm failed: the outcomes of its entries (from `start` on)
    /// already applied, and each other entry's settle queued for the replay that applies
    /// it. Decided under the settles lock, which `apply_entry` holds from its look for an
    /// entry's settle to its insert of the outcome: each entry's outcome is found here,
    /// or its settle is found there, never both nor neither. (It took the replay lock,
    /// which a sibling may hold through its wait for a hole, up to a limit begun after
    /// this append's: close to two limits in all.) An outcome inserted by a round still
    /// under way is answered once that round's end stores `applied` past it (after
    /// `ctail` covers it and the index is released): the round waits on no other host.
    fn decide_unconfirmed(
        &self,
        batch: &[(OwnedEvent, Settle)],
        start: u64,
    ) -> Vec<Option<Outcome>> {
        let found: Vec<Option<Outcome>> = {
            let mut settles = self.settles.lock();
            let mut outcomes = self.replica.outcomes.lock();
            batch
                .iter()
                .enumerate()
                .map(|(i, (event, settle))| {
                    let position = start + i as u64;
                    let outcome = outcomes.remove(&position);
                    if outcome.is_none() {
                        settles.insert(position, (*settle, event.clone()));
                    }
                    outcome
                })
                .collect()
        };
        if let Some(last) = found.iter().rposition(Option::is_some) {
            let last = start + last as u64;
            let mut backoff = Backoff::new(Duration::MAX);
            // Acquire: pairs with the round's Release store of `applied`. A round that
            // panicked lets the lock go without that store (its index is poisoned: the
            // next replay panics).
            while self.replica.applied.load(Ordering::Acquire) <= last
                && self.replica.replay.try_lock().is_none()
            {
                backoff.snooze();
            }
        }
        found
    }

    /// Waits until this replica has applied every position below `target`: replays, or,
    /// while another thread of this host replays (it holds the replay lock, maybe waiting
    /// for a hole past `target`), watches `applied`, which each of its rounds moves. (It
    /// waited on the lock, up to the other's wait limit, for entries already applied.) One
    /// wait limit in all: a replay of its own, once the other's ends, waits what is left.
    /// (It began a limit of its own there: close to two in all.) What the tail check
    /// (`catch_up`) waits with too.
    fn confirm(&self, target: u64) -> Result<()> {
        let mut backoff = None;
        let mut looked_again = false;
        loop {
            // Acquire: pairs with the Release stores of `applied` at the end of each
            // round, after its outcomes are in `outcomes`.
            if self.replica.applied.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if let Some(state) = self.replica.replay.try_lock() {
                return self.replay_locked(state, Some(target), backoff).map(drop);
            }
            self.chaos.point(Point::ReplayBeforeWait);
            let waited = Backoff::snooze_or(&mut backoff, self.options.wait_limit, |waited_ms| {
                Error::ReplayStalled {
                    position: self.replica.applied.load(Ordering::Acquire),
                    waited_ms,
                }
            });
            // Past the limit, one more look first (as the replay's wait for a hole).
            if waited.is_err() && !std::mem::replace(&mut looked_again, true) {
                continue;
            }
            waited?;
        }
    }

    /// Gives slots to the hosts whose requests named this host as donor.
    pub(super) fn serve_grants(&self) -> Result<()> {
        let grants = std::mem::take(&mut self.replica.replay.lock().grants);
        for (served, &(to, count)) in grants.iter().enumerate() {
            let ranges = self.slots.lock().take_for_grant(count);
            for (granted, &(first, count)) in ranges.iter().enumerate() {
                let appended = self.submit_settled(
                    &Event::GrantSlots { to, first, count },
                    Settle::Grant { first, count },
                );
                if let Err(error) = appended {
                    // This range's settle gave it back if its event never reached the
                    // log. The ranges after it were taken from the pool for this grant
                    // and appended nowhere: back to the pool. And the requests not served
                    // yet are served by a later round (the replicated counts still name
                    // this host as their donor).
                    let mut slots = self.slots.lock();
                    for &(first, count) in &ranges[granted + 1..] {
                        slots.add_range(first, count);
                    }
                    drop(slots);
                    self.replica
                        .replay
                        .lock()
                        .grants
                        .extend_from_slice(&grants[served + 1..]);
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// A host that leaves appends `HostLeft`: once it applied, every replica gives the
    /// free slots it counts as this host's back to the pod (its pool, and the slots of
    /// creates that never reached the log), no `NeedSlots` names this host (a host that
    /// is gone grants nothing), and a grant on its way to it goes to the pod. Its own
    /// pool is then no one's. (It returned its pool a range at a time after `HostLeft`,
    /// and what it could not return within its wait limit was lost, as a dead host's
    /// slots were, until the replicas knew which slots each host holds: log format 7.)
    pub(super) fn give_slots_back(&self) -> Result<()> {
        self.submit(&Event::HostLeft)?;
        *self.slots.lock() = SlotPool::default();
        Ok(())
    }

    /// A free slot this host owns: from its pool, else claimed from the unclaimed range,
    /// else asked of the host with the most (bounded wait).
    pub(super) fn take_slot(&self) -> Result<u64> {
        let mut backoff = Backoff::new(self.options.wait_limit);
        // When this call last asked, and how long it waits for that ask's slots before it
        // asks again: the slots granted to this host go to its pool, where another of its
        // threads may take them first, and a donor whose pool was empty by the time it
        // served (its own creates in flight) grants nothing. Asked once only, the call
        // waited out its limit (`SlotsExhausted`) while other hosts held free slots.
        let mut asked: Option<(std::time::Instant, std::time::Duration)> = None;
        loop {
            if let Some(slot) = self.slots.lock().pop() {
                return Ok(slot);
            }
            if self.replica.read().slots.claimable() {
                self.submit(&Event::ClaimSlots {
                    count: self.claim_chunk_slots,
                })?;
                // The claim's slots went to this host's pool, where another of its threads
                // may take them first, claim after claim: past its limit the call answers
                // (what it claimed stays in the pool). It claimed on until the unclaimed
                // range was used up, many limits later.
                if !backoff.expired() {
                    continue;
                }
                if let Some(slot) = self.slots.lock().pop() {
                    return Ok(slot);
                }
                // The pod is full only if the log says no slot is left anywhere (as
                // below). Otherwise its slots went to this host's other creates: busy,
                // not full. (It answered `SlotsExhausted` with most of the pod's slots
                // unclaimed, and a server answered that as a full store.)
                if self.no_slot_anywhere() {
                    return Err(Error::SlotsExhausted {
                        host: self.id,
                        slot_count: self.pod.layout().slot_count,
                    });
                }
                return Err(Error::SlotsContended {
                    host: self.id,
                    waited_ms: backoff.waited_ms(),
                });
            }
            let ask_again = match asked {
                None => Some(REASK_FIRST),
                Some((at, wait)) if at.elapsed() >= wait => Some((wait * 2).min(REASK_MOST)),
                Some(_) => None,
            };
            if let Some(next_wait) = ask_again {
                self.submit(&Event::NeedSlots {
                    count: self.claim_chunk_slots,
                })?;
                asked = Some((std::time::Instant::now(), next_wait));
            }
            self.replay(None)?;
            // No slot anywhere, as the log says: none unclaimed or given back, no other
            // host with a free one, and none of ours on its way back from a create of
            // another of our threads. A wait would only wait for a delete: the pod is
            // full now, and the caller hears so at once (a full store answered each
            // create after the whole wait limit).
            if self.no_slot_anywhere() || !backoff.snooze() {
                return Err(Error::SlotsExhausted {
                    host: self.id,
                    slot_count: self.pod.layout().slot_count,
                });
            }
        }
    }

    /// Whether the replica says no slot is left anywhere: none unclaimed or given back,
    /// no other host with a free one, and none of this host's on its way back from a
    /// create of another of its threads.
    fn no_slot_anywhere(&self) -> bool {
        let replica = self.replica.read();
        let slots = &replica.slots;
        !slots.claimable()
            && slots.donor(self.id as usize).is_none()
            && slots.pools[self.id as usize].len() == 0
    }

    pub(super) fn create(&self, key: &[u8], value: &[u8], note: Option<u64>) -> Result<()> {
        self.check_key(key)?;
        let slot_size_bytes = self.pod.config().slot_size_bytes;
        if value.len() as u64 > slot_size_bytes {
            return Err(Error::ValueTooLarge {
                value_bytes: value.len(),
                slot_size_bytes,
            });
        }
        let slot = self.take_slot()?;
        self.chaos.point(Point::CreateBeforeWrite);
        // A host declared dead (paused past its lease, in `take_slot`'s replay say) had its
        // free slots given back to the pod by its `HostDead`, this one among them: another
        // host may have created an object in it since. It looks at its row right before it
        // writes (the lease's rule, as before a log write).
        if !mutants::skipped(Step::CreatorChecksBeforeItWritesTheSlot) {
            self.holds_its_row()?;
        }
        let offset = self.pod.layout().slot_offset(slot);
        // The slot came back to the pool once `ctail` covered the event that freed it (a
        // delete, a lost create): this fence orders that before every byte stored below.
        // Pairs with the reader's Acquire fence in `read_end` (and `make_copy`'s): a
        // reader of the slot's old object that copied any byte of this one then loads a
        // `ctail` that covers the delete, and retries. (The pool's lock orders only what
        // its holders do: without this, a reader could copy these bytes and load an
        // older `ctail`, and validate them as the deleted object's. x86 kept the order.)
        crate::sync::fence(Ordering::Release);
        // Straight to memory, never left in this host's cache.
        mutants::store(&self.memory, Step::CreateWritesBack, offset, value);
        // The store drops this host's copies of the lines it covers only. The slot's lines
        // past the value may hold an earlier object's bytes, which this host's reads of the
        // new object (read-shared: they make no check) would be served; other hosts drop
        // them when they apply the create. The fence below completes the flush.
        let covered = value.len().next_multiple_of(LINE_BYTES as usize);
        let slot_bytes = slot_size_bytes as usize;
        if covered < slot_bytes {
            self.memory
                .flush(offset + covered as u64, slot_bytes - covered);
        }
        self.clear_accessor(slot);
        // The bytes are in memory before the create event is.
        self.memory.fence();
        self.chaos.point(Point::CreateBeforeEvent);
        match self.submit_settled(&Event::Create { key, slot }, Settle::Create { slot, note })? {
            Outcome::Created => {
                self.with_counters(|c| c.add(crate::counters::Counter::Creates, 1));
                Ok(())
            }
            _ => Err(Error::ObjectExists),
        }
    }
}

/// How [`Shared::append_within`] ended.
enum Within {
    /// Every request answered, the last of them appended.
    Done,
    /// Every request answered, the last of them refused with this error.
    Refused(Error),
    /// Some answered, the others left unanswered for a later batch (`hand_off`).
    Left,
}

/// An append's reserved range, from its reservation to its publish: if dropped before
/// its call let it go (a panic in between, a bug), its positions not published yet get a
/// `Skip` of this host's and the reservation is withdrawn, as its recoverer would (a host
/// declared dead leaves them to that recovery, as any of its reservations). The
/// events are lost: whoever waits for them hears `CombinerPanicked` or unwinds, and the
/// host is marked as one whose append panicked (`AppendPanicGuard`).
struct FillOnUnwind<'a> {
    shared: &'a Shared,
    range: std::ops::Range<u64>,
}

impl FillOnUnwind<'_> {
    /// The append's way out (published, or `Err` with its reservation left as it was).
    fn let_go(self) {
        std::mem::forget(self);
    }
}

impl Drop for FillOnUnwind<'_> {
    fn drop(&mut self) {
        let shared = self.shared;
        // Still this life's row, not condemned (the append's own check before it writes):
        // no recovery of it has read the reservation, and only this host writes these
        // positions (it holds the append lock).
        if shared.holds_its_row().is_err() {
            return;
        }
        let entry = shared.skip_entry(shared.id);
        for position in self.range.clone() {
            if !shared.log.is_published(&shared.memory, position) {
                shared.log.write(&shared.memory, position, &entry);
            }
        }
        host_table::withdraw_reservation(&shared.pod, shared.id, shared.life, self.range.end);
    }
}

/// Marks its host as one whose append panicked (`Shared::left_unsettled`) if dropped by a
/// panic that began after it was made (a call made from a drop during an unwind is not
/// one).
struct AppendPanicGuard<'a> {
    shared: &'a Shared,
    already_panicking: bool,
}

impl<'a> AppendPanicGuard<'a> {
    fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            already_panicking: std::thread::panicking(),
        }
    }
}

impl Drop for AppendPanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.already_panicking {
            self.shared
                .left_unsettled
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Settle;
    use crate::event::{Event, OwnedEvent};
    use crate::{Backing, Error, Host, HostOptions, Join, Pod, PodConfig};

    /// A combined batch larger than the log's ring goes a ring's worth at a time; when the
    /// log has no room and every request of the first part is out of time, that part is
    /// refused, and the parts after it, whose requests have time left, are left for their
    /// own threads to combine again within it (they were refused with it, `LogFull` long
    /// before their limits).
    #[test]
    fn a_part_refused_for_room_leaves_the_later_parts_to_their_own_limits() {
        const CAPACITY: u64 = 8;
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(256)
            .max_key_bytes(48)
            .log_capacity_entries(CAPACITY)
            .max_hosts(4);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let quiet = || HostOptions::new().pump_interval(None);
        let busy = Host::join(&pod, Join::As(0), quiet()).unwrap();
        // Host 1 holds the head where it is; host 0 fills the log.
        let idle = Host::join(&pod, Join::As(1), quiet()).unwrap();
        busy.create(b"warm", b"v").unwrap();
        idle.replay().unwrap();
        let start = idle.inspect().applied_position();
        for i in 0.. {
            if busy.inspect().log_cursors().2 == start + CAPACITY {
                break;
            }
            busy.create(format!("k{i}").as_bytes(), b"v").unwrap();
        }
        let parts = CAPACITY as usize + 2;
        let requests: Vec<(OwnedEvent, Settle)> = (0..parts)
            .map(|i| {
                let key = format!("w{i}");
                let event = OwnedEvent::new(&Event::Wrap {
                    key: key.as_bytes(),
                });
                (event, Settle::Nothing)
            })
            .collect();
        // The first ring's worth out of time, the rest with a second each.
        let limits: Vec<Duration> = (0..parts)
            .map(|i| {
                if i < CAPACITY as usize {
                    Duration::ZERO
                } else {
                    Duration::from_secs(1)
                }
            })
            .collect();
        let mut answers: Vec<Option<crate::Result<crate::replica::Outcome>>> =
            (0..parts).map(|_| None).collect();
        busy.shared.append_batch(
            &requests,
            &limits,
            &mut |i, answer| answers[i] = Some(answer),
            true,
        );
        for (i, answer) in answers.iter().enumerate() {
            if i < CAPACITY as usize {
                assert!(
                    matches!(answer, Some(Err(Error::LogFull { .. }))),
                    "request {i}, out of time: {answer:?}"
                );
            } else {
                assert!(answer.is_none(), "request {i}, a second left: {answer:?}");
            }
        }
        drop(idle);
    }
}
