//! Moving objects between CXL and this host's DRAM through the log: a move here after
//! enough accesses, a move back when asked (by RPC) or before an operation that needs the
//! object in CXL, copies of read-shared objects, and orphans of moves whose append failed.

use std::ops::ControlFlow;

use super::{
    bump, Local, LocalObject, Moving, ARRIVING, BUSY, HELD, LEAVING, MISSING, MOVED_BACK, NOT_HERE,
    OP_MOVE_BACK, ORPHANED, ORPHAN_LEAVING, SERVER_GONE,
};

use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host::crash::Hold;
use crate::host::{Settle, Shared};
use crate::ids::HostId;
use crate::mutants::{self, Step};
use crate::record::{RecordWord, Records};
use crate::replica::Outcome;
use crate::rpc::Response;
use crate::sync::Ordering;

/// Rounds of a sender's wait for a move back between two looks at whether the replica
/// still names the holder (each look catches up with the log).
const HOLDER_LOOK_ROUNDS: u32 = 16;

/// What a move back found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::host) enum MovedBack {
    /// It moved the object back to CXL.
    Moved,
    /// The object is not in this host's DRAM (already back, or never was).
    NotHere,
    /// The index says this host holds the object, and it does not (a move whose append
    /// failed).
    Missing,
}

impl Shared {
    /// Moves object `key` from its CXL slot into this host's DRAM, if it is in CXL and
    /// no write is in progress. Returns whether it moved.
    pub(in crate::host) fn move_here(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<bool> {
        // Another move (to or from this host) is under way: not now.
        let Some(moving) = local.moving.try_lock() else {
            return Ok(false);
        };
        self.catch_up()?;
        let Some(entry) = self.replica.read().lookup(key) else {
            return Ok(false);
        };
        if entry.local_owner.is_some() {
            return Ok(false);
        }
        // Hold the record's lock (counter unchanged: nothing is written) so that no write
        // is in progress while we copy; a busy record means the object is busy: not now.
        let records = Records::fixed(&self.pod);
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
            // Announced as every lock is (pods with undo images): a recoverer must not
            // take it for a dead host's lock of the same word. No announce word free, or
            // the record under recovery: not now.
            let Some(hold) = self.try_take_hold() else {
                return Ok(false);
            };
            if !mutants::skipped(Step::MoveAnnouncesItsLock)
                && !self.announce(&hold, &records, record, held)?
            {
                return Ok(false);
            }
            if records.compare_exchange(record, word, held).is_err() {
                // Its announce goes before the hold drops, as a delete's
                // (`lock_for_delete`): the winner's lock may be the very word.
                self.withdraw(&hold);
                return Ok(false);
            }
            locked = Some((record, word, hold));
        }
        let moved = self.copy_and_move(local, &moving, key, &entry, c);
        if let Some((record, word, hold)) = locked {
            let held = RecordWord {
                locked: true,
                ..word
            };
            self.unlock_record(record, held, word, c);
            // The announce goes after the unlock (withdrawn first: see above).
            self.withdraw(&hold);
            drop(hold);
        }
        moved
    }

    /// The body of [`Shared::move_here`], holding `moving` and the record (if any).
    pub(in crate::host) fn copy_and_move(
        &self,
        local: &Local,
        moving: &Moving,
        key: &[u8],
        entry: &crate::replica::IndexEntry,
        c: &ThreadCounters,
    ) -> Result<bool> {
        // An event about the object between the lookup and the lock (an alloc, a write's
        // wrap): start from what is current another time.
        if !self.unchanged_since(entry)? {
            return Ok(false);
        }
        if let Some(leftover) = local.object(moving, entry.slot) {
            // A move back whose append failed leaves its object leaving; once a
            // `MoveToCxl` of it applied (this replica, caught up, names no holder), no
            // reader reaches it: out of the way. (Else it stayed for good, and the slot
            // never moved here again.)
            let left = matches!(
                leftover.state.load(Ordering::Acquire),
                LEAVING | ORPHAN_LEAVING
            ) && self
                .replica
                .read()
                .lookup(&leftover.key)
                .is_none_or(|named| named.slot != entry.slot || named.local_owner != Some(self.id));
            if !left {
                // An orphan of an earlier move whose outcome is not settled yet holds the
                // place: not now (that move may still win, and its orphan is what
                // readers will find).
                return Ok(false);
            }
            // SAFETY: we hold `moving`, and the caught-up replica does not say this host
            // holds the object: no holder of the index's lock reaches it.
            unsafe { local.remove_object(entry.slot) };
        }
        let place = self.place(entry);
        let (offset, len) = (place.offset, place.len);
        let mut bytes = vec![0u8; len].into_boxed_slice();
        self.invalidate(offset, len, c);
        self.memory.read(offset, &mut bytes);
        // In the partition before the event: once a replica says "here", this host's
        // threads find the object. Arriving: they may read it, and write it only once we
        // know that our move won (see `ARRIVING`).
        let arriving = LocalObject::new(key, &bytes);
        if !mutants::skipped(Step::MovedObjectArrivesBeforeHeld) {
            arriving.state.store(ARRIVING, Ordering::Relaxed);
        }
        local.insert_object(entry.slot, Box::new(arriving));
        let outcome = self.submit_settled(
            &Event::MoveToHost {
                key,
                host: self.id,
                stamp: entry.stamp,
            },
            Settle::MoveToHost { slot: entry.slot },
        );
        self.chaos.point(Point::MoveHereAfterAppend);
        match outcome {
            Ok(Outcome::Moved) => {
                if let Some(object) = local.object(moving, entry.slot) {
                    object.lock();
                    object.state.store(HELD, Ordering::Relaxed);
                    object.unlock();
                }
            }
            Ok(_) => {
                // SAFETY: we hold `moving`, and no applied event says this host holds the
                // object: our move lost.
                unsafe { local.remove_object(entry.slot) };
                c.add(Counter::MovesLost, 1);
                return Ok(false);
            }
            Err(error) => {
                // The entry may be in the log and take effect later, when a reader may
                // find the object: keep it, orphaned (the record's lock goes back, so CXL
                // may get newer bytes).
                if let Some(object) = local.object(moving, entry.slot) {
                    object.state.store(ORPHANED, Ordering::Release);
                }
                // Counted by the settle, as won or lost, once the outcome is known.
                return Err(error);
            }
        }
        c.add(Counter::MovesToHost, 1);
        Ok(true)
    }

    /// Moves object `key` from this host's DRAM back to its CXL slot, if this host holds
    /// it: writes the bytes into the slot and back to memory, then appends `MoveToCxl`.
    /// `asked`: another host asked for it (the object bounced).
    pub(in crate::host) fn move_back(
        &self,
        key: &[u8],
        asked: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        self.move_back_waiting(key, asked, !asked, c)
    }

    /// [`Shared::move_back`]; `wait`: for a writer of this host that has the object (else
    /// [`Error::LocalObjectBusy`] at once).
    fn move_back_waiting(
        &self,
        key: &[u8],
        asked: bool,
        wait: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        let Some(local) = &self.local else {
            return Ok(MovedBack::NotHere);
        };
        let mut writer_wait: Option<Backoff> = None;
        loop {
            let moving = local.moving.lock();
            self.catch_up()?;
            let Some(entry) = self.replica.read().lookup(key) else {
                return Ok(MovedBack::NotHere);
            };
            if entry.local_owner != Some(self.id) {
                return Ok(MovedBack::NotHere);
            }
            let slot = entry.slot;
            let Some(object) = local.object(&*moving, slot) else {
                return Ok(MovedBack::Missing);
            };
            // An announce word and undo image for the slot's bytes (pods with undo
            // images), taken before the object's lock: waiting for one must not hold it.
            let hold = self.take_hold()?;
            if object.try_lock() {
                return self.move_back_locked(
                    (local, &moving),
                    object,
                    hold,
                    (key, slot),
                    asked,
                    c,
                );
            }
            // A writer of this host holds the object (an `update`'s closure as long as it
            // runs). Asked by another host: say so at once (`BUSY`: it asks again, within
            // its own wait limit), so that no server, the pump maybe, waits on a user's
            // closure. This host's own: wait within the wait limit, beating (the host is
            // alive), and without `moving`, which the pump takes to serve other hosts'
            // asks for other objects: held through this wait, it kept the pump from
            // serving and replaying until the closure returned.
            if !wait {
                return Err(Error::LocalObjectBusy {
                    host: self.id,
                    waited_ms: 0,
                });
            }
            drop(hold);
            drop(moving);
            self.beat();
            self.wait_for_local_writer(&mut writer_wait)?;
        }
    }

    /// [`Shared::move_back_waiting`] holding `moving`, `hold` and the lock of `object`,
    /// the object of `key` in `slot` of this host's partition.
    fn move_back_locked(
        &self,
        (local, moving): (&Local, &Moving),
        object: &LocalObject,
        hold: Hold<'_>,
        (key, slot): (&[u8], u64),
        asked: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        let layout = self.pod.layout();
        let (offset, len) = (layout.slot_offset(slot), local.object_bytes);
        // This host may have been declared dead meanwhile (a process paused past its
        // lease), and its recovery has handed the object back to CXL as it was when it
        // moved (others may have written it since). Write nothing into the slot then.
        if let Err(error) = self.holds_its_row() {
            object.unlock();
            return Err(error);
        }
        let state = object.state.load(Ordering::Relaxed);
        // Arriving only while its mover holds `moving`, as we do now.
        debug_assert_ne!(state, ARRIVING, "an object arriving with `moving` free");
        match state {
            HELD => {}
            _ => {
                if state == ORPHANED {
                    // Its move applied (the index names this host): once this move back
                    // applies too, it is a leftover a move here may take out.
                    object.state.store(ORPHAN_LEAVING, Ordering::Release);
                }
                // Leaving since an earlier move back whose append failed (its event may
                // yet apply), or orphaned by a move here whose append failed and whose
                // event applied after all: either way the bytes in CXL are current, so
                // append a move back without writing any.
                object.unlock();
                return self.append_move_back(local, moving, key, slot, asked, c);
            }
        }
        // Lines of the slot cached from before the object left are old: drop them before
        // writing (a write into a cached line keeps the rest of it).
        self.memory.flush(offset, len);
        self.memory.fence();
        c.add(Counter::LinesInvalidated, Self::lines(len));
        // The slot's bytes are the object as it moved here: kept, in case we die in the
        // middle of the copy (our death hands the object back to CXL as it was then).
        self.keep_slot_image(&hold, slot);
        self.chaos.point(Point::MoveBackBeforeCopy);
        // Again after the last pause, right before the copy: a host paused past its lease
        // since the look above was recovered (its slot image put back, the object handed
        // back to CXL and maybe written by live hosts since). Its hold is left to that
        // recovery (`end_hold`).
        if !mutants::skipped(Step::MoverChecksAfterItsPause) {
            if let Err(error) = self.holds_its_row() {
                object.unlock();
                return Err(error);
            }
        }
        // The bytes reach memory before the event tells anyone to read them there, and
        // never stay in this host's cache (where they could land after its recovery put
        // the slot image back).
        mutants::store(
            &self.memory,
            Step::MoveBackWritesBack,
            offset,
            &object.bytes(len),
        );
        c.add(Counter::LinesWrittenBack, Self::lines(len));
        self.memory.fence();
        // Whole in the slot: nothing to put back any more.
        drop(hold);
        // Writes wait from now on; reads go on (the bytes are those in CXL). The object is
        // let go before the event: replay takes the index's write lock, and a writer
        // holding the index's read lock may be waiting for the object. If the append
        // fails, the object stays leaving: its event may be in the log and apply later.
        object.state.store(LEAVING, Ordering::Relaxed);
        object.unlock();
        self.append_move_back(local, moving, key, slot, asked, c)
    }

    /// Appends `MoveToCxl` for the object in `slot`, whose bytes are in CXL, and takes it
    /// out of the partition once the event is applied.
    pub(in crate::host) fn append_move_back(
        &self,
        local: &Local,
        _moving: &Moving,
        key: &[u8],
        slot: u64,
        asked: bool,
        c: &ThreadCounters,
    ) -> Result<MovedBack> {
        let moved = self.submit(&Event::MoveToCxl { key })? == Outcome::Moved;
        // SAFETY: we hold `moving`, and an applied event says the object is in CXL (ours;
        // or, if ours lost, an earlier MoveToCxl whose append had failed): no holder of
        // the index's lock reaches it any more.
        unsafe { local.remove_object(slot) };
        if !moved {
            return Ok(MovedBack::NotHere);
        }
        local.streaks[slot as usize].store(0, Ordering::Relaxed);
        if asked {
            bump(&local.bounces[slot as usize]);
            self.note_bounce(slot, c);
        }
        c.add(Counter::MoveBacks, 1);
        Ok(MovedBack::Moved)
    }

    /// Drops the orphan in `slot` (see [`ORPHANED`]) if its move lost or never reached
    /// the log: no replica names this host as its holder, so no reader reaches it.
    pub(in crate::host) fn drop_orphan(&self, slot: u64) -> Result<()> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let moving = local.moving.lock();
        let Some(object) = local.object(&*moving, slot) else {
            return Ok(());
        };
        if object.state.load(Ordering::Acquire) != ORPHANED {
            return Ok(());
        }
        self.catch_up()?;
        let holder = self
            .replica
            .read()
            .lookup(&object.key)
            .and_then(|entry| (entry.slot == slot).then_some(entry.local_owner))
            .flatten();
        if holder != Some(self.id) {
            // SAFETY: we hold `moving`, and the caught-up replica does not say this host
            // holds the object (its move lost or was refused, as the settle that deferred
            // this said): no holder of the index's lock reaches it.
            unsafe { local.remove_object(slot) };
        }
        Ok(())
    }

    /// Moves every object in this host's DRAM back to CXL (a host that leaves). Errors
    /// are the first one met; the rest are still tried.
    pub(in crate::host) fn move_all_back(&self) -> Result<()> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let keys: Vec<Box<[u8]>> = {
            let moving = local.moving.lock();
            (0..local.partition.len() as u64)
                .filter_map(|slot| local.object(&*moving, slot).map(|o| o.key.clone()))
                .collect()
        };
        self.with_counters(|c| {
            let mut first_error = None;
            for key in keys {
                if let Err(error) = self.move_back(&key, false, c) {
                    first_error.get_or_insert(error);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// Makes a copy of object `key` in this host's DRAM if it is read-shared.
    pub(in crate::host) fn make_copy(
        &self,
        local: &Local,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<()> {
        // The read protocol's steps for a read-shared object, without what `read_start`
        // would do for others (a best-effort policy brings nothing back, sends no RPC).
        self.catch_up()?;
        let Some(entry) = self.replica.read().lookup(key) else {
            return Ok(());
        };
        if entry.record.is_some() || entry.local_owner.is_some() {
            return Ok(());
        }
        let place = self.place(&entry);
        let (offset, len) = (place.offset, place.len);
        let mut bytes = vec![0u8; len].into_boxed_slice();
        self.memory.read(offset, &mut bytes);
        // The post-read check of `read_end`, then the insert under the same read lock:
        // replay cannot apply an event about the object in between.
        crate::sync::fence(Ordering::Acquire);
        self.catch_up()?;
        let index = self.replica.read();
        if let Some(entry) = index.current(entry.handle, entry.stamp) {
            if entry.record.is_none()
                && entry.local_owner.is_none()
                && local.insert_copy(&index, entry.slot, bytes)
            {
                c.add(Counter::CopiesMade, 1);
            }
        }
        Ok(())
    }

    /// Asks `owner`, which holds object `key` in its DRAM, to move it back to CXL (this
    /// host itself: moves it), and returns once it has answered. The caller then looks
    /// the key up again.
    pub(in crate::host) fn bring_back(
        &self,
        owner: HostId,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<()> {
        self.bring_back_patient(owner, key, true, c)
    }

    /// [`Shared::bring_back`], but [`Error::LocalObjectBusy`] at once if a writer of the
    /// holder's has the object (a claim's: another object may do as well).
    pub(in crate::host) fn bring_back_unless_busy(
        &self,
        owner: HostId,
        key: &[u8],
        c: &ThreadCounters,
    ) -> Result<()> {
        self.bring_back_patient(owner, key, false, c)
    }

    fn bring_back_patient(
        &self,
        owner: HostId,
        key: &[u8],
        patient: bool,
        c: &ThreadCounters,
    ) -> Result<()> {
        if owner == self.id {
            return match self.move_back_waiting(key, false, patient, c)? {
                MovedBack::Missing => Err(Error::LocalObjectMissing { host: self.id }),
                MovedBack::Moved | MovedBack::NotHere => Ok(()),
            };
        }
        let rpc = self
            .rpc
            .as_ref()
            .expect("a pod with local partitions has RPC rings");
        let unless_moved = |error| self.unless_moved(owner, key, error);
        if crate::host_table::holder(&self.pod, owner).is_none() {
            // Nobody holds that id: the object's bytes left with its last holder.
            return unless_moved(Error::HostUnresponsive {
                host: owner,
                waited_ms: 0,
            });
        }
        let mut buf = vec![0u8; rpc.entry_bytes];
        // Asked again while the holder answers `BUSY`, the whole within the wait limit.
        let mut busy = Backoff::new(self.options.wait_limit);
        loop {
            let left = self.options.wait_limit.saturating_sub(busy.waited());
            match self.ask_back(rpc, owner, key, &mut buf, left, c) {
                Ok(Response { status: BUSY, .. }) => {
                    if !patient || !busy.snooze() {
                        return unless_moved(Error::LocalObjectBusy {
                            host: owner,
                            waited_ms: busy.waited_ms(),
                        });
                    }
                }
                answer => return self.answered(answer, owner, key),
            }
        }
    }

    /// One request to `owner` to move `key` back, waiting at most `wait_limit` for the
    /// answer. `Err(None)`: given up because the object left the holder meanwhile;
    /// `Err(Some(ms))`: no answer after `ms`.
    fn ask_back(
        &self,
        rpc: &super::Rpc,
        owner: HostId,
        key: &[u8],
        buf: &mut [u8],
        wait_limit: std::time::Duration,
        c: &ThreadCounters,
    ) -> std::result::Result<Response, Option<u64>> {
        c.add(Counter::RpcsSent, 1);
        // While it waits, the thread serves its own host's ring (two hosts asking each
        // other do not wait on each other: each serves the other's request while its own
        // waits; a host without a pump serves only then, so a request to it sent after
        // its call ended waits for its next). It holds nothing a move back here would wait for: no
        // operation calls this holding `moving`, the index, or a local object. Now and
        // then it also looks whether the replica, caught up, still names the holder: once
        // it does not (the holder moved the object back, or died and its recovery put the
        // object back in CXL), the request need not wait any more: a dead holder's ring
        // is served by nobody until its id joins again.
        let mut rounds = 0u32;
        let mut moved_meanwhile = false;
        // No request of our ring is begun past our own limit: by then our request is
        // withdrawn at the next look, or claimed (its answer needs no serving of ours).
        // Checked: a wait limit of `Duration::MAX` ("no limit") has no deadline (the sum
        // overflowed `Instant` and panicked in the call).
        let serve_until = std::time::Instant::now().checked_add(wait_limit);
        let response = rpc.rings[owner as usize].call_while(
            &self.pod,
            &self.memory,
            (crate::host_table::session(self.id, self.life), &|| {
                self.row_is_mine()
            }),
            buf,
            (OP_MOVE_BACK, key, &[]),
            wait_limit,
            c,
            &mut || {
                self.chaos.point(Point::RpcAwaitingResponse);
                let _ = self.serve_rpcs_until(serve_until);
                rounds = rounds.wrapping_add(1);
                // A catch-up that fails: wait on (the wait limit bounds it).
                moved_meanwhile = rounds.is_multiple_of(HOLDER_LOOK_ROUNDS)
                    && self
                        .holder_of(key)
                        .is_ok_and(|holder| holder != Some(owner));
                if moved_meanwhile {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
        response.map_err(|waited_ms| (!moved_meanwhile).then_some(waited_ms))
    }

    /// What [`Shared::bring_back`] says of `owner`'s answer (or silence) about `key`.
    fn answered(
        &self,
        answer: std::result::Result<Response, Option<u64>>,
        owner: HostId,
        key: &[u8],
    ) -> Result<()> {
        let unless_moved = |error| self.unless_moved(owner, key, error);
        match answer {
            Ok(Response { status, detail }) => match status {
                // Not there when the holder looked (it may have moved it back to its DRAM
                // since), or the holder's life is over (its recovery hands the object
                // back to CXL; the id's next life may hold it again by the time we look,
                // and is the one to ask): the caller looks again, within its bound.
                MOVED_BACK | NOT_HERE | SERVER_GONE => Ok(()),
                MISSING => unless_moved(Error::LocalObjectMissing { host: owner }),
                _ => unless_moved(Error::MoveBackFailed {
                    host: owner,
                    cause: super::failure_cause(detail),
                }),
            },
            // Given up because the object left the holder: as if it had answered
            // `NOT_HERE` (it may be back in the holder's DRAM since: the caller looks
            // again).
            Err(None) => Ok(()),
            Err(Some(waited_ms)) => unless_moved(Error::HostUnresponsive {
                host: owner,
                waited_ms,
            }),
        }
    }

    /// `error` about asking `owner` for `key`, unless the replica, caught up, no longer
    /// names `owner` as its holder (it moved the object back meanwhile: leaving, say):
    /// then `Ok`, and the caller looks again.
    fn unless_moved(&self, owner: HostId, key: &[u8], error: Error) -> Result<()> {
        match self.holder_of(key)? {
            Some(holder) if holder == owner => Err(error),
            _ => Ok(()),
        }
    }

    /// The host whose DRAM holds object `key`, as the replica says after catching up.
    pub(in crate::host) fn holder_of(&self, key: &[u8]) -> Result<Option<HostId>> {
        self.catch_up()?;
        let index = self.replica.read();
        Ok(index.lookup(key).and_then(|entry| entry.local_owner))
    }
}
