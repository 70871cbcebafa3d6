//! The AllLog variant of the object protocol: megalon without the split (DESIGN section
//! 10, the paper's section 6.10), for pods created with
//! [`Coherence::AllLog`](crate::Coherence).
//!
//! No coherence record is ever allocated. Each replica's index entry carries the object's
//! lock holder and counter ([`ReplicatedLock`](crate::inspect::ReplicatedLock)), and they change
//! only through the log: every lock is a `Lock` event and every unlock an `Unlock` event
//! that every host appends, replays and (for other hosts' events) drops the object's
//! lines for. That is the whole difference from megalon, and what the comparison
//! measures: a write costs two log entries, each replayed by every host, where megalon
//! pays one CAS and one store on a record in the SCR.
//!
//! The steps, next to megalon's (`object.rs`), with the same mutant switches where the
//! step is the same:
//!
//! - `read_start`: tail check; look up; if a host holds the lock, wait (bounded) and look
//!   again; invalidate the object's lines unless this host's host counter is the
//!   replicated counter (pre-read check); remember the stamp and the counter.
//! - `read_end`: tail check; retry if the stamp changed (post-read event check), exactly
//!   as a read-shared object in megalon: every `Lock` and `Unlock` moves the stamp. On
//!   success the host counter becomes the counter.
//! - `write_start`: tail check; look up; if locked, wait and look again; else append a
//!   `Lock`. Replay decides, the same way on every replica: the first `Lock` on an
//!   unlocked object wins, a later one loses and changes nothing; the appender learns
//!   which from its own entry's outcome. Holding the lock, look up again (the object may
//!   be a new one under the same key, in another slot) and invalidate its lines unless
//!   the host counter is the counter (a partial write fills lines from the cache).
//! - `write_end`: write the lines back and fence, then append an `Unlock` (replay:
//!   counter + 2, unlocked; on the appender the host counter becomes the new counter,
//!   elsewhere unknown).
//! - `delete`: take the lock through a `Lock` first, then append the delete naming it
//!   ([`LOCK_HELD`]): a delete never frees a slot under another host's write. A delete
//!   that found no object appends [`NO_RECORD`], which wins only if no host holds the
//!   lock of an object created in between.
//!
//! Race cases, each next to the code that handles it:
//!
//! - Two hosts (or two threads of one host) see the object unlocked and both append a
//!   `Lock`: the second in log order loses; its appender waits for the winner's `Unlock`.
//! - A reader copies while a writer on another host writes: the writer's `Lock` was below
//!   `ctail` before its first store, so the reader's `read_end` replays it and retries.
//! - The object is deleted and created again between a writer's lookup and its `Lock`:
//!   the `Lock` takes the new object's lock; the lookup after it finds the new slot.

use super::ticket::{Guard, ReadState, Seen, WriteState};
use super::{HostId, Settle, Shared};

use crate::backoff::Backoff;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::{Event, LOCK_HELD, NO_RECORD};
use crate::mutants::{self, Step};
use crate::replica::Outcome;
use crate::sync::Ordering;

impl Shared {
    /// Waits a little for `holder` to release a lock; past the host's wait limit, the
    /// error names it.
    pub(super) fn wait_for_lock(
        &self,
        backoff: &mut Option<Backoff>,
        holder: HostId,
    ) -> Result<()> {
        if holder == self.id {
            // Maybe left pending by an `Unlock` that failed.
            self.settle_own_work()?;
        }
        Backoff::snooze_or(backoff, self.options.wait_limit, |waited_ms| {
            Error::ObjectLocked { holder, waited_ms }
        })
    }

    pub(super) fn read_start_all_log(&self, key: &[u8], c: &ThreadCounters) -> Result<ReadState> {
        // Made on the first wait only: an uncontended read never reads the clock.
        let mut backoff: Option<Backoff> = None;
        loop {
            // 1. Tail check: the replica covers every append that completed before now,
            //    and replay dropped the lines of every object another host's event touched.
            if !mutants::skipped(Step::ReadTailCheck) {
                self.catch_up()?;
            }
            // 2. Look the key up: without the replica's lock unless a replay overlaps, as
            //    a split pod's read does (`look_versioned`), so that the two differ only in
            //    where the lock and the counter live.
            let (found, version) = self.look_versioned(|view| view.lookup_locked(key));
            let Some((entry, lock)) = found else {
                return Err(Error::UnknownKey);
            };
            if let Some(holder) = lock.holder {
                // A write (or delete) in progress: wait for its event, then look again.
                c.add(Counter::WaitsForWriter, 1);
                self.wait_for_lock(&mut backoff, holder)?;
                continue;
            }
            let place = self.place(&entry);
            let (offset, len) = (place.offset, place.len);
            // Pre-read check: lines cached under another version (or an unknown one)
            // must go, so that the copy comes from memory.
            if !mutants::skipped(Step::PreReadCheck) && entry.host_counter != Some(lock.counter) {
                self.invalidate(offset, len, c);
            }
            // 3. Remember the stamp and the counter.
            return Ok(ReadState {
                place,
                stamp: entry.stamp,
                seen: Some(Seen {
                    version,
                    host_counter: entry.host_counter,
                }),
                guard: Guard::Replicated {
                    counter: lock.counter,
                },
            });
        }
    }

    // Over 70 lines on purpose: The steps of the AllLog write in order, each with its race
    // case beside it.
    pub(super) fn write_start_all_log(
        &self,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<(WriteState, u32)> {
        let mut backoff: Option<Backoff> = None;
        let mut retries = 0u32;
        loop {
            // 1. Tail check, lookup.
            self.catch_up()?;
            let found = self.replica.read().lookup_locked(key);
            let Some((_, lock)) = found else {
                return Err(Error::UnknownKey);
            };
            if let Some(holder) = lock.holder {
                // Appending a Lock now would only lose: wait for the holder's Unlock.
                c.add(Counter::WaitsForWriter, 1);
                self.wait_for_lock(&mut backoff, holder)?;
                continue;
            }
            // 2. Lock through the log. Every replica applies the same entries in the same
            //    order, so they all agree who won; our own replay tells us.
            // A Lock whose outcome we miss is settled by this host: if it won, the pump
            // appends the Unlock.
            match self.submit_settled(&Event::Lock { key }, Settle::ReplicatedLock)? {
                Outcome::Locked => c.add(Counter::LockEvents, 1),
                Outcome::LockLost { holder } => {
                    // Another Lock came first in the log between our lookup and ours.
                    c.add(Counter::LockEventsLost, 1);
                    c.add(Counter::WaitsForWriter, 1);
                    retries += 1;
                    self.wait_for_lock(&mut backoff, holder)?;
                    continue;
                }
                // Deleted between our lookup and our Lock.
                _ => return Err(Error::UnknownKey),
            }
            // The seqlock writer's fence: `ctail` covers our Lock (our replay, or the
            // combiner's whose answer we acquired, moved it before `submit` returned),
            // and this fence orders that before every data store of the write. Pairs
            // with the reader's Acquire fence in `read_end`: a reader that copied any
            // byte of this write then loads a `ctail` that covers the Lock, replays it and
            // sees the stamp change.
            crate::sync::fence(Ordering::Release);
            // 3. Holding the lock, nothing about the object changes until our Unlock: no
            //    one else's Lock or delete can win. Look again: the object we locked may
            //    be a new one under the same key, in another slot.
            let (entry, lock) = self
                .replica
                .read()
                .lookup_locked(key)
                .expect("only the lock's holder can delete a locked object");
            debug_assert_eq!(lock.holder, Some(self.id), "our Lock won");
            return Ok((
                self.ready_to_write(&entry, NO_RECORD, lock.counter, c),
                retries,
            ));
        }
    }

    pub(super) fn write_end_all_log(&self, state: WriteState, c: &ThreadCounters) -> Result<()> {
        // 5. The object's lines reach memory before the Unlock says the write is done.
        self.write_back_object(&state, c);
        // 6. Unlock through the log: counter + 2 on every replica, and on ours the host
        //    counter becomes the new counter (our cached lines are this version's). The
        //    handle is still the object's: no one else can delete it while we hold it.
        let key = self.replica.read().key_of(state.place.handle);
        // A refused Unlock leaves the lock ours: the pump appends it again (settled); an
        // unconfirmed one applies when replay gets there. Either way the write is done:
        // its bytes are in memory and every reader waits for the Unlock, then reads them.
        // Answering the append's error (`LogFull`) would tell the caller that nothing
        // changed, and a caller that retried (an increment) would apply it twice. Only a
        // host declared dead, whose lock nobody unlocks, answers its error.
        let outcome =
            match self.submit_settled(&Event::Unlock { key: &key }, Settle::ReplicatedUnlock) {
                Ok(outcome) => outcome,
                Err(error) => {
                    self.holds_its_row().map_err(|_| error)?;
                    c.add(Counter::Writes, 1);
                    return Ok(());
                }
            };
        debug_assert_eq!(
            outcome,
            Outcome::Unlocked {
                counter: state.counter_before.wrapping_add(2)
            },
            "the holder's unlock applies"
        );
        c.add(Counter::UnlockEvents, 1);
        c.add(Counter::Writes, 1);
        Ok(())
    }

    /// `backoff`: the wait for a lock another host holds, as in `delete`.
    pub(super) fn delete_all_log(
        &self,
        key: &[u8],
        mut backoff: Option<Backoff>,
        c: &ThreadCounters,
    ) -> Result<()> {
        loop {
            self.catch_up()?;
            let found = self.replica.read().lookup_locked(key);
            // The delete names the lock it holds, or that it holds none.
            let expected = match found {
                // Absent here: the delete still goes through the log, so every delete is
                // an event every replica sees in order. It wins only if the object was
                // created in between and no host holds its lock.
                None => NO_RECORD,
                Some((_, lock)) => {
                    if let Some(holder) = lock.holder {
                        c.add(Counter::WaitsForWriter, 1);
                        self.wait_for_lock(&mut backoff, holder)?;
                        continue;
                    }
                    if mutants::skipped(Step::LockBeforeDelete) {
                        NO_RECORD
                    } else {
                        // Take the lock first, so that no write is in progress when the
                        // slot goes to us.
                        match self.submit_settled(&Event::Lock { key }, Settle::ReplicatedLock)? {
                            Outcome::Locked => {
                                c.add(Counter::LockEvents, 1);
                                LOCK_HELD
                            }
                            Outcome::LockLost { holder } => {
                                c.add(Counter::LockEventsLost, 1);
                                c.add(Counter::WaitsForWriter, 1);
                                self.wait_for_lock(&mut backoff, holder)?;
                                continue;
                            }
                            // Deleted by someone else before our Lock: absent now.
                            _ => return Err(Error::UnknownKey),
                        }
                    }
                }
            };
            // Holding the lock, a refused delete leaves it ours: the pump unlocks it.
            let settle = if expected == LOCK_HELD {
                Settle::ReplicatedUnlock
            } else {
                Settle::Nothing
            };
            match self.submit_settled(
                &Event::Delete {
                    key,
                    record: expected,
                },
                settle,
            )? {
                Outcome::Deleted { record, .. } => {
                    debug_assert_eq!(record, None, "AllLog objects have no record");
                    c.add(Counter::Deletes, 1);
                    return Ok(());
                }
                // Created since our lookup and locked by a writer now: start over.
                Outcome::DeleteLost => {
                    debug_assert_ne!(expected, LOCK_HELD, "a held lock cannot be lost");
                    continue;
                }
                _ => return Err(Error::UnknownKey),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{Backing, Coherence, Host, HostOptions, Join, Pod, PodConfig};

    /// Whether a read of an object nobody writes, on a pod of `coherence`, ends while a
    /// replay waits for the replica's write lock behind another reader (the lock lets no
    /// new reader in while a writer waits).
    fn read_passes_a_waiting_replay(coherence: Coherence) -> bool {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(16 << 20)
            .slot_size_bytes(256)
            .max_hosts(2)
            .coherence(coherence);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let options = HostOptions::new().pump_interval(None);
        let host = Host::join(&pod, Join::AnyFree, options).unwrap();
        host.create(b"key", b"value").unwrap();
        // Read once: a read that learns the object's version notes it under the read lock
        // (either kind of pod), which the reads below, of a version known, do not.
        let mut buf = [0u8; 5];
        host.read(b"key", &mut buf).unwrap();
        let host = &host;
        std::thread::scope(|s| {
            let replica = &host.shared.replica;
            let reading = replica.read();
            let replay = s.spawn(move || drop(replica.write()));
            // Long enough for the replay to wait for the lock, on any machine; a replay
            // not yet waiting lets the read pass whatever it takes.
            std::thread::sleep(Duration::from_millis(100));
            let (done, read) = std::sync::mpsc::channel();
            let reader = s.spawn(move || {
                let mut buf = [0u8; 5];
                host.read(b"key", &mut buf).unwrap();
                done.send(buf).unwrap();
            });
            let passed = read.recv_timeout(Duration::from_secs(10));
            drop(reading);
            replay.join().unwrap();
            reader.join().unwrap();
            passed.is_ok_and(|buf| &buf == b"value")
        })
    }

    /// An AllLog read looks its key up without the replica's lock, as a split pod's read
    /// does, so that Figure 13 compares where the lock and counter live and nothing else.
    /// (Under the read lock, it waited for the replay.)
    #[test]
    fn a_read_passes_a_replay_waiting_for_the_replicas_lock_as_a_split_pods_does() {
        assert!(read_passes_a_waiting_replay(Coherence::Split), "split");
        assert!(read_passes_a_waiting_replay(Coherence::AllLog), "AllLog");
    }
}
