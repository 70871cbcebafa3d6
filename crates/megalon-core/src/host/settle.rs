//! Settles: what this host does with what an appender held (a claimed or locked record,
//! a slot, a replicated lock, a move's orphan) when the append's outcome never reached
//! it, and the work settles leave for the pump.

use super::width::Gate;
use super::Shared;

use crate::chaos::Point;
use crate::counters::Counter;
use crate::error::{Error, Result};
use crate::event::{Event, OwnedEvent};
use crate::mutants::{self, Step};
use crate::record::{RecordShape, RecordWord, Records};
use crate::replica::Outcome;
use crate::sync::Ordering;

/// What this host must do with what an appender holds if its event's outcome never
/// reaches it: the append was refused (nothing reached the log: the settle runs at once,
/// with no outcome), or its entry is in the log but the wait for its outcome failed (the
/// settle runs when replay applies the entry, with its outcome, after `ctail` covers it).
/// The locked-record rule of DESIGN section 8 rests on this: an error never leaves a
/// record locked, and a record whose dealloc or delete may still apply stays locked until
/// that is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// The appender holds nothing, or restores what it holds itself (a wrap event: safe
    /// whether it applies or not).
    Nothing,
    /// `record` was claimed (its word is `claimed`) for an alloc event: if the alloc wins it
    /// is the object's record; otherwise it goes back to free. `hold` is the claim's
    /// announce word (pods with undo images), ended once that is decided.
    Claimed {
        record: u32,
        claimed: RecordWord,
        hold: Option<u64>,
        /// The width the record is of.
        shape: RecordShape,
    },
    /// `record` is locked (its word is `locked`) for a dealloc or a delete: if the event
    /// wins the record is freed, otherwise restored to `unlocked`. Until then it stays
    /// locked: a write must not start on an object that may turn read-shared or go away.
    Locked {
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
        hold: Option<u64>,
    },
    /// A create into `slot`: if the create never reaches the log, the slot goes back to
    /// this host's pool (a create that loses in the log gives it back on replay). `note`:
    /// the application SCR word its position is stored in before it is published.
    Create { slot: u64, note: Option<u64> },
    /// Slots `first..first + count`, taken from this host's pool for a grant: back to the
    /// pool if the grant never reaches the log.
    Grant { first: u64, count: u64 },
    /// A move of the object in `slot` to this host's DRAM: if it does not win (or never
    /// reaches the log), its orphan is dropped (deferred to the pump); if it wins late,
    /// the orphan stays until the object is moved back.
    MoveToHost { slot: u64 },
    /// AllLog: a `Lock` (a write's or a delete's): if it wins, this host holds the object's
    /// replicated lock and must append an `Unlock` (deferred to the pump).
    ReplicatedLock,
    /// AllLog: an `Unlock`, or a `Delete` made holding the lock: if it never reaches the
    /// log, the lock is still this host's, and an `Unlock` is appended later (deferred).
    ReplicatedUnlock,
    /// A `WidthEnd` from the width `from`, appended with the width word draining: if it
    /// is applied, the switch ends (records zeroed, the word open at the next epoch); if
    /// it never reaches the log, the word opens again at `from`'s epoch.
    Width { from: RecordShape, serial: u16 },
}

/// Work left for the pump: what a settle could not finish at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Deferred {
    /// Free `record`, claimed for an alloc that did not win (its word is `claimed`). A host
    /// acting on a stale index entry may hold it locked for a moment.
    FreeClaimed {
        record: u32,
        claimed: RecordWord,
        hold: Option<u64>,
        shape: RecordShape,
    },
    /// AllLog: append an `Unlock` of `key`, whose replicated lock this host holds.
    Unlock { key: Box<[u8]> },
    /// Drop the orphan in `slot` of this host's partition, whose move did not win.
    DropOrphan { slot: u64 },
}

impl Shared {
    /// Settles what an appender held (see [`Settle`]): `outcome` is its event's, or `None`
    /// if the event never reached the log. Runs on the failing appender's thread, or in
    /// replay (holding the replay lock, after `ctail` covers the entry): it touches only
    /// record words, this host's slot pool and its deferred work.
    pub(super) fn settle(&self, settle: Settle, outcome: Option<Outcome>, event: &OwnedEvent) {
        match settle {
            Settle::Nothing => {}
            // A host declared dead (an append it learned it from is the usual way here)
            // leaves its claims and locks to recovery, announced as they are.
            Settle::Claimed { hold, .. } | Settle::Locked { hold, .. }
                if self.left_to_recovery() =>
            {
                self.end_hold_of(hold);
            }
            Settle::Claimed {
                record,
                claimed,
                hold,
                shape,
            } => {
                // Won, or freed by a width switch that came first (its word is zero).
                if matches!(
                    outcome,
                    Some(Outcome::RecordAllocated | Outcome::RecordAllocStale)
                ) {
                    self.end_hold_of(hold);
                } else {
                    self.free_claimed(record, claimed, hold, shape);
                }
            }
            Settle::Locked {
                record,
                locked,
                unlocked,
                hold,
            } => {
                let won = match outcome {
                    Some(Outcome::RecordDeallocated) => true,
                    Some(Outcome::Deleted { record: freed, .. }) => freed == Some(record),
                    _ => false,
                };
                let to = if won {
                    RecordWord {
                        in_use: false,
                        locked: false,
                        counter: locked.counter & !1,
                    }
                } else {
                    unlocked
                };
                // Only the lock's holder changes a locked record (or its recovery, if this
                // host was declared dead after its look above: paused past its lease). At
                // the width the lock was taken at: no switch goes on while it is held.
                let cas = || self.records().compare_exchange(record, locked, to).is_ok();
                // A free is counted off as `free_released` counts it.
                let changed = if won { self.counted_off(cas) } else { cas() };
                debug_assert!(
                    changed || self.left_to_recovery(),
                    "record {record} changed under our lock"
                );
                self.end_hold_of(hold);
            }
            Settle::Create { slot, .. } => {
                if outcome.is_none() {
                    self.slots.lock().push(slot);
                }
            }
            Settle::Grant { first, count } => {
                if outcome.is_none() {
                    self.slots.lock().add_range(first, count);
                }
            }
            Settle::MoveToHost { slot } => {
                // Counted here, once its outcome is known: a move whose entry won after
                // its append reported an error did move the object here (and its move
                // back is counted).
                let won = outcome == Some(Outcome::Moved);
                self.with_counters(|c| {
                    c.add(
                        if won {
                            Counter::MovesToHost
                        } else {
                            Counter::MovesLost
                        },
                        1,
                    );
                });
                if !won {
                    self.deferred.lock().push(Deferred::DropOrphan { slot });
                }
            }
            Settle::ReplicatedLock => {
                if outcome == Some(Outcome::Locked) {
                    self.defer_unlock(event);
                }
            }
            Settle::ReplicatedUnlock => {
                if outcome.is_none() {
                    self.defer_unlock(event);
                }
            }
            Settle::Width { from, serial } => match outcome {
                Some(Outcome::WidthSwitched { .. }) => self.settle_switch(from, serial, true),
                Some(_) => {}
                None => self.settle_switch(from, serial, false),
            },
        }
    }

    pub(super) fn defer_unlock(&self, event: &OwnedEvent) {
        let key = match event.event() {
            Event::Lock { key } | Event::Unlock { key } | Event::Delete { key, .. } => key,
            other => unreachable!("a replicated lock's settle on {other:?}"),
        };
        self.deferred
            .lock()
            .push(Deferred::Unlock { key: key.into() });
    }

    /// Frees `record`, claimed (word `claimed`) for an alloc that did not win, by a CAS
    /// from that word. A host acting on a stale index entry may hold it locked for a
    /// moment (it then catches up, sees the record's old object changed, and restores the
    /// word): then the pump tries again.
    pub(super) fn free_claimed(
        &self,
        record: u32,
        claimed: RecordWord,
        hold: Option<u64>,
        shape: RecordShape,
    ) {
        if self.left_to_recovery() {
            // Recovery frees it (or finds it the object's, if the alloc won).
            self.end_hold_of(hold);
            return;
        }
        // The gate (a pod whose width may switch), as for the claim. Not with an announce
        // of the claim (pods with undo images): it holds every switch off (a drain waits
        // until no announce is left), so the array stays at `shape`, as for a lock's
        // holder, and a switch never waits on a free that waits on it.
        let pinned = hold.is_some() && !mutants::skipped(Step::WidthDrainWaitsForAnnounces);
        let entered = (!pinned).then(|| self.with_counters(|c| self.enter_gate(shape, c)));
        let gate = match entered {
            None => None,
            Some(Gate::Open(gate)) => gate,
            // A switch since the claim zeroed the record and the count.
            Some(Gate::Behind) => {
                self.end_hold_of(hold);
                return;
            }
            // A switch under way: later, when it ended or was given up.
            Some(Gate::Draining(_)) => {
                self.deferred.lock().push(Deferred::FreeClaimed {
                    record,
                    claimed,
                    hold,
                    shape,
                });
                return;
            }
        };
        let records = Records::of(&self.pod, shape);
        let free = RecordWord {
            in_use: false,
            locked: false,
            counter: claimed.counter,
        };
        if mutants::skipped(Step::RecordFreeByCas) {
            // The defect this step fixed: a blind store over whatever the word holds now.
            records.store(record, free);
            self.records_in_use().fetch_sub(1, Ordering::Relaxed);
            self.end_hold_of(hold);
            return;
        }
        self.chaos.point(Point::AllocLostBeforeFree);
        match records.compare_exchange(record, claimed, free) {
            Ok(()) => {
                self.records_in_use().fetch_sub(1, Ordering::Relaxed);
                self.end_hold_of(hold);
            }
            // Declared dead after the look above (paused past its lease): its recovery
            // freed the claim, at a counter moved on, and a live host may have claimed
            // the record since. Not this host's to free any more.
            Err(_) if self.left_to_recovery() => self.end_hold_of(hold),
            Err(now) => {
                debug_assert!(
                    now.in_use && now.locked,
                    "record {record}: claimed {claimed:?}, now {now:?}"
                );
                self.deferred.lock().push(Deferred::FreeClaimed {
                    record,
                    claimed,
                    hold,
                    shape,
                });
            }
        }
        drop(gate);
    }

    /// Does the work settles left for the pump. Returns how many items are still waiting.
    pub(super) fn run_deferred(&self) -> usize {
        let work = std::mem::take(&mut *self.deferred.lock());
        for item in work {
            match item {
                Deferred::FreeClaimed {
                    record,
                    claimed,
                    hold,
                    shape,
                } => self.free_claimed(record, claimed, hold, shape),
                Deferred::DropOrphan { slot } => {
                    if self.drop_orphan(slot).is_err() {
                        self.deferred.lock().push(Deferred::DropOrphan { slot });
                    }
                }
                Deferred::Unlock { key } => {
                    let event = Event::Unlock { key: &key };
                    if let Ok(outcome) = self.submit_settled(&event, Settle::ReplicatedUnlock) {
                        debug_assert!(
                            matches!(outcome, Outcome::Unlocked { .. } | Outcome::NotFound),
                            "a deferred unlock of a lock we hold: {outcome:?}"
                        );
                        self.with_counters(|c| c.add(crate::counters::Counter::UnlockEvents, 1));
                    }
                }
            }
        }
        self.pending_work()
    }

    /// Before this host leaves: replays and runs its deferred work until nothing is left,
    /// for at most its wait limit (a hole in the log may hold an entry of its back; a
    /// dead host's is filled by the recovery `unblock_log` starts). Returns whether
    /// nothing is left.
    pub(super) fn settle_before_leaving(&self) -> bool {
        // Checked: a wait limit of `Duration::MAX` ("no limit") has no deadline (the sum
        // overflowed `Instant` and panicked in the host's drop).
        let deadline = std::time::Instant::now().checked_add(self.options.wait_limit);
        loop {
            let _ = self.replay(None);
            if self.run_deferred() == 0 {
                return true;
            }
            if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                return false;
            }
            self.unblock_log();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Settles waiting for their entries, and deferred work.
    pub(super) fn pending_work(&self) -> usize {
        let _replay = self.replica.replay.lock();
        self.settles.lock().len() + self.deferred.lock().len()
    }

    /// For a thread that waits on a lock this host may hold itself: runs what this host
    /// left pending. An append whose confirm failed (a deallocation, a delete, an AllLog
    /// `Unlock`) holds its lock until a replay of this host applies its entry and settles
    /// it, and the tail check replays only what `ctail` covers, which with no pump and
    /// no other append nothing raises over the entry: replay what is published. A
    /// refused AllLog `Unlock`, or a lost claim's record, waits in the deferred work the
    /// pump does: do it.
    pub(super) fn settle_own_work(&self) -> Result<()> {
        if !self.settles.lock().is_empty() {
            self.replay(None)?;
        }
        if !self.deferred.lock().is_empty() {
            self.run_deferred();
        }
        Ok(())
    }

    /// Notes an error of the pump's background work.
    pub(super) fn background_error(&self, error: Error) {
        let mut errors = self.background_errors.lock();
        errors.count += 1;
        errors
            .by_kind
            .entry(error.kind_name())
            .or_insert_with(|| (0, error.clone()))
            .0 += 1;
        errors.last = Some(error);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Backing, Error, Host, HostOptions, Join, Pod, PodConfig};

    /// A look at the background errors while the pump notes one sees the count, the last
    /// error and the kinds of one moment: never a count without its error. (Three fields
    /// changed one after another, a look in between saw a count of 1 and no last error,
    /// and a crash test that waited for the count failed its check of the error.)
    #[test]
    fn a_look_at_the_background_errors_sees_each_with_its_count() {
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).unwrap());
        let host = Host::join(&pod, Join::AnyFree, HostOptions::new().pump_interval(None)).unwrap();
        let noted = 20_000;
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                for _ in 0..noted {
                    host.shared.background_error(Error::BackgroundPanicked {
                        task: "pump",
                        message: String::new(),
                    });
                }
            });
            loop {
                // Before the look: a writer that ended has noted all it will.
                let ended = writer.is_finished();
                let errors = host.inspect().background_errors();
                let by_kind: u64 = errors.by_kind.values().map(|(n, _)| n).sum();
                assert_eq!(
                    (errors.last.is_some(), by_kind),
                    (errors.count > 0, errors.count),
                    "{errors:?}"
                );
                if errors.count == noted {
                    break;
                }
                assert!(!ended, "the writer stopped at {}", errors.count);
            }
        });
    }
}
