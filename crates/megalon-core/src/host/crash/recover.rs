//! The recovery a live host runs for a dead one, in the order of the module's doc: the
//! dead host's reservation filled, its `HostDead`, every lock it announced settled, its
//! row freed.

use super::{decode_announce, encode_announce, Dead, Step, MOVE_BACK, UNDO_READY};
use crate::chaos::Point;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host::Shared;
use crate::host_table;
use crate::ids::HostId;
use crate::limits::HOLDS_PER_HOST;
use crate::log::Log;
use crate::mutants::{self, Step as MutantStep};
use crate::record::{RecordWord, Records};
use crate::sync::{AtomicU64, Ordering};

/// The record under recovery, set for as long as this lives (see `restore_holds`), and
/// its value.
struct Intent<'a>(&'a AtomicU64, u64);

impl<'a> Intent<'a> {
    /// Stores `record` as the record under recovery, from 0: the word as this recoverer
    /// left it (it clears it from its own value after each record). `None`: the word holds
    /// another recoverer's intent (this one was paused past its lease and taken over), and
    /// is left alone: stored over, a locker would lock that recoverer's record beside it,
    /// and a later store of ours could bring its value back for its check after its look
    /// at the word (it settled the live lock as the dead host's).
    fn set(word: &'a AtomicU64, record: u32) -> Option<Self> {
        let value = u64::from(record) + 1;
        // SeqCst: before the recoverer reads the announces (see `Shared::announce`).
        if mutants::skipped(MutantStep::RecovererChecksBeforeItSetsTheIntent) {
            word.store(value, Ordering::SeqCst);
        } else if word
            .compare_exchange(0, value, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        // For loom only, as after the locker's announce (`Shared::announce`).
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        Some(Self(word, value))
    }

    /// Whether the word still holds our value (no recoverer took over from us).
    fn held(&self) -> bool {
        self.0.load(Ordering::SeqCst) == self.1
    }
}

impl Drop for Intent<'_> {
    fn drop(&mut self) {
        // From our own value only: a recoverer that took over (we were paused past our
        // lease) has its own there.
        let _ = self
            .0
            .compare_exchange(self.1, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

impl Shared {
    /// Puts back the slot image of every move back `dead` announced (it died in the
    /// middle of its copy): before its `HostDead`, while every replica still has the
    /// object in `dead`'s DRAM, so no host reads the slot yet.
    /// `Ok(false)`: this host does not recover `dead` any more (it was paused past its
    /// lease and taken over): it wrote nothing.
    fn restore_slot_images(&self, dead: &Dead) -> Result<bool> {
        let layout = self.pod.layout();
        let len = layout.config.slot_size_bytes as usize;
        for index in 0..HOLDS_PER_HOST {
            let announce = self.announce_word(dead.host, index).load(Ordering::SeqCst);
            let Some((MOVE_BACK, slot, true)) = decode_announce(announce) else {
                continue;
            };
            self.chaos.point(Point::RecoveryBeforeSlotImage);
            // After the look at the announce, before the slot's bytes and the announce
            // change: a recoverer paused past its lease since its last check and taken
            // over may find `dead` recovered, the object handed back to CXL by its
            // `HostDead` and written by live hosts since (the old image would land over
            // an acknowledged write, under a counter that tells no reader), and the
            // announce the id's next life's.
            if !mutants::skipped(MutantStep::RecovererChecksBeforeItPutsBackASlot)
                && !self.still_recovering(dead)?
            {
                return Ok(false);
            }
            let (image, offset) = (
                layout.undo_image_offset(dead.host, index),
                layout.slot_offset(u64::from(slot)),
            );
            let mut bytes = vec![0u8; len];
            // Our cache may hold lines of the image from before.
            self.memory.flush(image, len);
            self.memory.fence();
            self.memory.read(image, &mut bytes);
            self.memory.write_non_temporal(offset, &bytes);
            self.memory.fence();
            self.announce_word(dead.host, index)
                .store(0, Ordering::SeqCst);
        }
        Ok(true)
    }

    /// Recovers `dead` (up to `step`) if no other live host is recovering one now.
    /// `Ok(true)`: done.
    pub(super) fn recover(&self, dead: Dead, step: Step) -> Result<bool> {
        // A host declared dead itself (paused past its lease) recovers nobody: it knows
        // from its condemnation, before its death is in the log.
        self.holds_its_row()?;
        let word = self.pod.scr_u64(self.pod.layout().recovery_offset());
        // The word names the recoverer's life, not only its id: a recoverer that died and
        // came back under its id is not recovering any more.
        let me = host_table::session(self.id, self.life);
        let current = word.load(Ordering::SeqCst);
        if current == me {
            // This host recovers already: its recovery's replay stalled on a dead host's
            // hole (`unblock_log`), or another of its threads asks. Only fill holes: the
            // word, the record under recovery and the restores stay the first's.
            if step == Step::Whole {
                return Ok(false);
            }
            return self.recover_holding(&dead, Step::Reservation);
        }
        if current != 0 {
            // Another host recovers: take over only if it is gone, or is the one we
            // recover (it holds the word it would need to be recovered).
            let (recoverer, life) = host_table::session_of(current);
            let recovering_it = recoverer == dead.host && life == dead.joins;
            // A rescue: the word's holder was found dead with the rest of the pod (by its
            // lease, so `session_gone` cannot tell), and no live host is left to recover
            // it and let the word go. `recover_holding` condemns it first, as it does the
            // dead host taken over with its word.
            let found_dead_with_it = dead.rescue
                && dead.others_dead.iter().any(|&(host, pid, joins)| {
                    (host, joins) == (recoverer, life)
                        && host_table::holder(&self.pod, host) == Some((pid, joins))
                });
            if !recovering_it
                && !found_dead_with_it
                && !host_table::session_gone(&self.pod, current)
            {
                return Ok(false);
            }
        }
        if word
            .compare_exchange(current, me, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(false);
        }
        // Let go of on every way out, a panic included: a word left naming a live host
        // would stop every recovery in the pod (the others wait for its holder, and the
        // holder's next round takes it for one of its own under way).
        let _release = ReleaseOnDrop {
            word,
            me,
            filling: &self.filling,
        };
        self.recover_holding(&dead, step)
    }

    fn recover_holding(&self, dead: &Dead, step: Step) -> Result<bool> {
        if dead.rescue {
            // Its row is ours: lost (taken over in turn), we are the dead one now.
            self.holds_its_row()?;
        } else if host_table::holder(&self.pod, dead.host) != Some((dead.pid, dead.joins)) {
            return Ok(true);
        }
        // Before anything of its changes: a host only paused past its lease that checks
        // from here on knows it is dead, and changes nothing more (`holds_its_row`,
        // `left_to_recovery`).
        if !mutants::skipped(MutantStep::RecoveryCondemnsFirst) {
            host_table::condemn(&self.pod, dead.host, dead.joins);
            // And every other host found dead in the same round and still dead: this
            // recovery takes their announces for the dead's too (their locks are not
            // waited for, their undo images are put back), so one only paused past its
            // lease must know it is dead before any of its locks is settled here, not
            // only once its own recovery begins (it unlocked, by CAS, a word a live host
            // had locked since, and reported a write done that was undone).
            for &(host, pid, joins) in &dead.others_dead {
                if host != dead.host && host_table::holder(&self.pod, host) == Some((pid, joins)) {
                    host_table::condemn(&self.pod, host, joins);
                }
            }
        }
        if !self.fill_reservation(dead)? {
            return Ok(false);
        }
        // Its `ltail` no longer holds the head back: the log may recycle what it had not
        // applied (so the `HostDead` below finds room even if the dead host filled it).
        // Only its life's: a recoverer paused here past the id's next join leaves the
        // next life's alone.
        Log::release_ltail(&self.pod, dead.host, dead.joins);
        if step == Step::Reservation {
            return Ok(false);
        }
        // The announces and the row are the dead life's only while this host still
        // recovers it: one paused since its look at the row may have been taken over, the
        // id recovered and joined again (the lease's window remains: a pause after this
        // look; the next life's replicas ignore a `HostDead` of this one).
        if !self.still_recovering(dead)? {
            return Ok(false);
        }
        if self.undo_images() && !self.restore_slot_images(dead)? {
            return Ok(false);
        }
        // A rescue logs it once: its rounds come one after another within the join (a
        // `HostDead` per round would fill a log whose head no live host moves, and past
        // its first lap nobody could rescue the pod again).
        let logged = dead.rescue
            && self
                .rescue_logged
                .load(std::sync::atomic::Ordering::Relaxed);
        if !logged {
            self.submit(&Event::HostDead {
                host: dead.host,
                joins: dead.joins,
            })?;
            if dead.rescue {
                self.rescue_logged
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // What it held in the RPC rings, or a ring would stay full (or its server stopped)
        // for good: as a sender, its entries settled as if it had given up; as a server,
        // requests it claimed answered "gone" (the senders look again, and find its
        // objects back in CXL since its `HostDead`, or in the id's next life's DRAM), and
        // those their senders gave up on freed. Before its locks: a round that must wait
        // for a live host's announce of the same lock word ends there, and the senders
        // need not wait for it. (Each step is by CAS from the state it finds: a later
        // round's second pass changes nothing.) Not for a recoverer paused past its lease
        // in its append and taken over: the dead host may have been recovered and its id
        // joined again since, and the rings and the row would be the next life's.
        if !self.still_recovering(dead)? {
            return Ok(false);
        }
        if !self.recover_rpcs(dead.host, dead.joins, || self.still_recovering(dead))? {
            return Ok(false);
        }
        if self.undo_images() && !self.restore_holds(dead)? {
            return Ok(false);
        }
        if !self.still_recovering(dead)? {
            return Ok(false);
        }
        host_table::clear_reservation(&self.pod, dead.host, dead.joins);
        // Release, the count of hosts recovered: a look at the stats that sees it (Acquire)
        // sees what this recovery counted before it (its locks, its skipped entries).
        if dead.rescue {
            // The row stays ours: the id's next life, whose join goes on from here.
            self.counters
                .hosts_recovered
                .fetch_add(1, Ordering::Release);
            return Ok(true);
        }
        if host_table::release_dead(&self.pod, dead.host, dead.pid, dead.joins) {
            self.counters
                .hosts_recovered
                .fetch_add(1, Ordering::Release);
        }
        Ok(true)
    }

    /// Fills the positions `dead` announced it reserves and never published with `Skip`
    /// entries. `Ok(false)`: a live host announces one of them too (it is that host's, or
    /// will be published): try again later.
    fn fill_reservation(&self, dead: &Dead) -> Result<bool> {
        let reserved = if dead.rescue {
            // Whichever earlier life of our id stored them (a rescuer that died before it
            // filled all of the life it rescued leaves that life's words), as read before
            // our own first announce.
            dead.reserved.clone()
        } else {
            // Its life's, or an earlier one's left by a take-over whose rescue its
            // rescuer did not finish (that rescuer may be the dead one).
            host_table::reservation_up_to(&self.pod, dead.host, dead.joins)
        };
        if reserved.is_empty() {
            return Ok(true);
        }
        // Another thread of this host fills now: it finishes, and this one looks again
        // later (both writing a position, the second paused after its look, would write
        // over the next lap's entry once the first's `Skip` was applied everywhere).
        let Some(_filling) = self.filling.try_lock() else {
            return Ok(false);
        };
        // Only while this host holds the recovery word, checked holding `filling` (the
        // word is let go only by a thread that holds it, `ReleaseOnDrop`): a nested fill
        // whose outer recovery let go of the word before this thread took `filling` would
        // fill beside the word's next holder, and a pause after its look would write over
        // the next lap's entry once the other's `Skip` was applied everywhere.
        let word = self.pod.scr_u64(self.pod.layout().recovery_offset());
        if !mutants::skipped(MutantStep::FillOnlyUnderTheRecoveryWord)
            && word.load(Ordering::SeqCst) != host_table::session(self.id, self.life)
        {
            return Ok(false);
        }
        let tail = Log::tail(&self.pod).load(Ordering::SeqCst);
        let entry = self.skip_entry(dead.host);
        for position in reserved.start..reserved.end.min(tail) {
            if self.published_or_recycled(position) {
                continue;
            }
            let live_claim = (0..self.pod.config().max_hosts).any(|host| {
                dead.live(&self.pod, host)
                    && host_table::holders_reservation(&self.pod, host).contains(&position)
            }) || (dead.rescue
                // In a rescue, positions the dead life announced may be ours: its CAS
                // failed, and one of our appends reserved them.
                && host_table::reservation(&self.pod, self.id, self.life).contains(&position));
            if live_claim {
                return Ok(false);
            }
            // Its announcer published it after we looked: nothing to fill.
            if self.published_or_recycled(position) {
                continue;
            }
            self.chaos.point(Point::RecoveryBeforeFill);
            // After the last pause, before the write: a filler paused past its lease and
            // taken over may find the position filled by its successor and recycled, its
            // slot in the ring a later lap's entry (a `Skip` over it would hide that
            // entry from every host that had not applied it: their replays stall on it
            // for good).
            if !mutants::skipped(MutantStep::FillerChecksAfterItsPause) {
                if !self.still_recovering(dead)? {
                    return Ok(false);
                }
                if self.published_or_recycled(position) {
                    continue;
                }
            }
            // Between the check and the write the word stays this host's: it is let go
            // only by a thread holding `filling`, which this one holds.
            self.chaos.point(Point::RecoveryBeforeFillWrite);
            self.log.write(&self.memory, position, &entry);
            self.counters
                .entries_skipped
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// A `Skip` entry in place of positions `author` reserved and never published. It
    /// names the host that reserved them (no appender of that id waits for its outcome).
    pub(in crate::host) fn skip_entry(&self, author: HostId) -> Vec<u8> {
        let mut entry = vec![0u8; self.log.entry_bytes()];
        Event::Skip.encode(author, &mut entry);
        entry
    }

    /// Whether the entry at `position` is published, or was and has been recycled (head
    /// is past it: every live host applied it).
    fn published_or_recycled(&self, position: u64) -> bool {
        // Head read after the alive word: an entry of a later lap is only there once
        // head passed `position`, and head never goes back.
        self.log.is_published(&self.memory, position) || Log::head(&self.pod) > position
    }

    /// Restores every record lock `dead` announced and still holds. `Ok(false)`: a live
    /// host announces the same lock (it may hold it): try again later.
    ///
    /// A locked word does not name its holder (every lock of a 2-bit record is the same
    /// word, and counters come back), so the dead host's announce of it is not enough:
    /// the record must have no live announce while nobody can lock it anew. The
    /// recoverer first stores its intent (the record under recovery), then looks at every
    /// live host's announces, then at the word; a host about to lock stores its announce,
    /// then looks at the intent (`announce`). One of the two sees the other: either the
    /// locker defers, or the recoverer waits for it. Only the holder of the recovery word
    /// sets the intent, so one found set here is a dead recoverer's, and goes.
    fn restore_holds(&self, dead: &Dead) -> Result<bool> {
        let intent = self.recovery_intent();
        let left = intent.load(Ordering::SeqCst);
        self.chaos.point(Point::RecoveryBeforeIntentCleared);
        if mutants::skipped(MutantStep::RecovererChecksBeforeItSetsTheIntent) {
            intent.store(0, Ordering::SeqCst);
        } else {
            // After the last pause (the dead host's RPC rings since the last look): a
            // recoverer paused past its lease and taken over would clear its successor's
            // intent, and a locker would lock the record the successor is about to
            // settle. By CAS from the value looked at: one stored since is a live
            // recoverer's.
            if !self.still_recovering(dead)? {
                return Ok(false);
            }
            if left != 0
                && intent
                    .compare_exchange(left, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
            {
                return Ok(false);
            }
        }
        // After the intent's clear (a dead recoverer's intent goes whatever the width).
        // The array at the width every announce of the dead host's is of. None while a
        // switch has applied its `WidthEnd` here and the word is not open at the new
        // epoch yet: no announce is left then (the drain waited for that, and every gate
        // meets the switch until the word opens), so nothing is left to restore unless
        // an announce is there after all (a late one of a host paused past its lease):
        // later. Waiting in every case left a drainer that died between its append and
        // the word's reopening unrecovered for good: its row held, nobody found it gone
        // and took the switch over, and every write waited on the switch.
        let Some(records) = self.records_of_the_announces()? else {
            let announced = (0..HOLDS_PER_HOST).any(|index| {
                let announce = self.announce_word(dead.host, index).load(Ordering::SeqCst);
                decode_announce(announce).is_some_and(|(record, ..)| record != MOVE_BACK)
            });
            return Ok(!announced);
        };
        let mut all_done = true;
        for index in 0..HOLDS_PER_HOST {
            let announce = self.announce_word(dead.host, index).load(Ordering::SeqCst);
            let Some((record, raw, undo_ready)) = decode_announce(announce) else {
                continue;
            };
            if record == MOVE_BACK {
                // Put back before the `HostDead` (`restore_slot_images`).
                continue;
            }
            // Looked at after the announce: an announce that is there now was made at the
            // word's epoch then (made inside a gate, and a switch drains only once no
            // announce is left), so at `records`' width if the word is still at its
            // epoch. Else a switch ended since this round's look: the drainer found every
            // host that had not acknowledged its freeze with its row free, so this
            // announce is a late store of a host paused past its lease (the lease's
            // window; such a host never withdraws it, knowing it is dead): the next round
            // looks again, at the new width, and may never settle it.
            if !self.width_still_at(&records) {
                return Ok(false);
            }
            if u64::from(record) >= records.count() {
                debug_assert!(false, "an announce of record {record}, past the array");
                all_done = false;
                continue;
            }
            self.chaos.point(Point::RecoveryBeforeIntent);
            // After the last pause (the previous record's wait, the sleep of
            // `lasting_live_claim`, a settle that found itself taken over), before the
            // store: as before the clear above.
            if !mutants::skipped(MutantStep::RecovererChecksBeforeItSetsTheIntent)
                && !self.still_recovering(dead)?
            {
                return Ok(false);
            }
            let Some(held) = Intent::set(intent, record) else {
                return Ok(false);
            };
            let locked = records.decode(raw);
            // A live host's announce of the record: its lock may be the one the word
            // holds, so wait, unless the dead host's is a lock and the live one a claim
            // that stays (see `lasting_live_claim`).
            let live = self.live_announces_of(dead, record);
            let live_claim = match live.as_slice() {
                [] => None,
                _ if !locked.locked || undo_ready => {
                    self.chaos.point(Point::RecoveryFoundLiveAnnounce);
                    all_done = false;
                    continue;
                }
                _ => match self.lasting_live_claim(&records, dead, record, &live) {
                    Some(claim) => Some(claim),
                    None => {
                        self.chaos.point(Point::RecoveryFoundLiveAnnounce);
                        all_done = false;
                        continue;
                    }
                },
            };
            self.chaos.point(Point::RecoveryAfterScan);
            let now = records.load(record);
            if now != locked {
                // Checked before either store to the dead host's announce below: a
                // recoverer paused past its lease and taken over may find the dead host
                // recovered and its id joined again, and this word the next life's
                // announce of a lock it holds (cleared, a later recovery takes that lock
                // for a dead host's). After the load of the word, as the check below: a
                // locker that found the record under recovery cleared (by a recoverer
                // taken over) locks only after it, and the check finds the intent gone.
                if !mutants::skipped(MutantStep::RecovererChecksBeforeItClears)
                    && !self.still_the_recoverer(&held)?
                {
                    return Ok(false);
                }
                // A lock taken over a claim and settled back to the claimed word by a
                // recoverer that stopped before it rewrote this announce to the claim
                // (below): the record, without an object, is still the dead host's to
                // settle as a claim, as that recoverer would have left it. Cleared, the
                // record would stay in use with no object and no claimer for good.
                if locked.locked
                    && now.in_use
                    && !now.locked
                    && over_claim(&records, locked, now)
                    && !mutants::skipped(MutantStep::RestoredClaimSettledLater)
                {
                    self.catch_up()?;
                    self.chaos.point(Point::RecoveryBeforeAnnounceCleared);
                    // Looked at again after the catch-up (a pause: a replay, maybe behind
                    // another thread's), before either store below: the check above came
                    // before it, and a recoverer paused in it and taken over may find the
                    // id joined again and this word the next life's announce.
                    if !mutants::skipped(MutantStep::RecovererChecksBeforeItClears)
                        && !self.still_the_recoverer(&held)?
                    {
                        return Ok(false);
                    }
                    if self.replica.read().record_owner_key(record).is_none() {
                        self.announce_word(dead.host, index).store(
                            encode_announce(record, records.encode(now)),
                            Ordering::SeqCst,
                        );
                        all_done = false;
                        continue;
                    }
                }
                // Never taken, or released: nothing of the dead host's.
                self.announce_word(dead.host, index)
                    .store(0, Ordering::SeqCst);
                continue;
            }
            // A recoverer paused past its lease is taken over, and must not act: it
            // learns it here (its own death in the log, the word or the record under
            // recovery another's), not after (the lease's rule for every host).
            if !self.still_the_recoverer(&held)? {
                return Ok(false);
            }
            // Locked as announced, by a dead host: no live host announces the record, and
            // none can lock it now. Which one: the one whose undo image is ready, if any.
            // Only a lock's holder has one (a writer clears it before its unlock), so it
            // is a write in the middle, and its image the object's last complete value.
            // Any other announce of the same word (another dead host's, or another of
            // this one's) is of a lock never taken.
            let image = if undo_ready {
                Some((dead.host, index))
            } else {
                self.undo_image_among_the_dead(dead, record, raw)
            };
            if live_claim.is_some() && image.is_some() {
                // Another dead host's write of the word is under way (its image ready):
                // the lock is that write's, not one taken over the claim. Wait for the
                // claimer to let its claim go, as for any live announce.
                all_done = false;
                continue;
            }
            let restored = match image {
                Some((writer, at)) => {
                    let restored =
                        self.restore_write(&records, &held, (writer, at), record, locked)?;
                    self.chaos.point(Point::RecoveryAfterRestore);
                    // Not once taken over (paused past our lease since the check above,
                    // in the restore's append, say): the writer may have been recovered
                    // and its id joined again, and the word be the next life's announce.
                    // (Left, it says no "undo ready" any more: the next recoverer clears
                    // it.)
                    if !mutants::skipped(MutantStep::RecovererChecksBeforeItClears)
                        && !self.still_the_recoverer(&held)?
                    {
                        return Ok(false);
                    }
                    // Its announce goes at once: an undo-ready announce names a holder.
                    self.announce_word(writer, at).store(0, Ordering::SeqCst);
                    restored
                }
                None => {
                    let restored = self.settle_lock(&records, &held, record, locked, live_claim)?;
                    if restored && live_claim.is_some() {
                        self.chaos.point(Point::RecoveryAfterClaimSettled);
                    }
                    // As above, before the stores to the dead host's announce below.
                    if restored
                        && !mutants::skipped(MutantStep::RecovererChecksBeforeItClears)
                        && !self.still_the_recoverer(&held)?
                    {
                        return Ok(false);
                    }
                    restored
                }
            };
            let live_claim =
                live_claim.filter(|_| !mutants::skipped(MutantStep::RestoredClaimSettledLater));
            match (restored, live_claim) {
                (true, Some(claim)) => {
                    // The claimed word is back, for a claimer whose CAS won (it frees the
                    // record by a CAS from that word) or for one paused between its
                    // announce and its CAS from free (which fails now: the record would
                    // stay in use with no object and no claimer, for good). Settled as
                    // the dead host's claim from here: once no live host announces the
                    // record, a record still claimed and without an object is freed.
                    self.announce_word(dead.host, index).store(
                        encode_announce(record, records.encode(claim)),
                        Ordering::SeqCst,
                    );
                    all_done = false;
                }
                (true, None) => self
                    .announce_word(dead.host, index)
                    .store(0, Ordering::SeqCst),
                (false, _) => all_done = false,
            }
        }
        Ok(all_done)
    }

    /// The words live hosts announce for `record` (their locks, or their claims).
    fn live_announces_of(&self, dead: &Dead, record: u32) -> Vec<u32> {
        (0..self.pod.config().max_hosts)
            .filter(|&host| dead.live(&self.pod, host))
            .flat_map(|host| {
                (0..HOLDS_PER_HOST).filter_map(move |i| {
                    let theirs = self.announce_word(host, i).load(Ordering::SeqCst);
                    decode_announce(theirs)
                        .filter(|&(r, ..)| r == record)
                        .map(|(_, raw, _)| raw)
                })
            })
            .collect()
    }

    /// `live`, the words live hosts announce for `record`, when they are one claim (an
    /// unlocked word) that is still announced a moment later: a claim that won its CAS,
    /// whose allocation lost or is still on its way, and whose claimer cannot free it
    /// while the dead host holds its lock (a host acting on a stale index entry locked
    /// the claimed word, and died before its check let go). Its claimer keeps its
    /// announce until it frees the record, and the dead host's recovery waited for that:
    /// neither ever happened. A claim that lost its CAS is let go at once; one in that
    /// moment is not taken for a lasting one.
    fn lasting_live_claim(
        &self,
        records: &Records<'_>,
        dead: &Dead,
        record: u32,
        live: &[u32],
    ) -> Option<RecordWord> {
        let claim = records.decode(*live.first()?);
        if claim.locked || live.iter().any(|&raw| raw != live[0]) {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        (self.live_announces_of(dead, record) == live).then_some(claim)
    }

    /// Whether this host still recovers `dead`: it is alive, holds the recovery word, and
    /// the dead life still holds its row (nobody finished its recovery meanwhile).
    fn still_recovering(&self, dead: &Dead) -> Result<bool> {
        self.holds_its_row()?;
        let word = self.pod.scr_u64(self.pod.layout().recovery_offset());
        let me = host_table::session(self.id, self.life);
        let dead_holds_it = if dead.rescue {
            // `holds_its_row` above: the row is ours, holding what the dead life left.
            true
        } else {
            host_table::holder(&self.pod, dead.host) == Some((dead.pid, dead.joins))
        };
        Ok(word.load(Ordering::SeqCst) == me && dead_holds_it)
    }

    /// [`Shared::still_the_recoverer`], before a CAS that settles a dead host's lock or
    /// claim (unless the mutant skips it).
    fn still_recovers_before_it_settles(&self, intent: &Intent<'_>) -> Result<bool> {
        if mutants::skipped(MutantStep::RecovererChecksBeforeItSettles) {
            return Ok(true);
        }
        self.still_the_recoverer(intent)
    }

    /// Whether this host still recovers with `intent` set: it has not been declared dead
    /// (`Err`: condemned, or its death applied), holds the recovery word in its life, and
    /// the record under recovery is still its own.
    fn still_the_recoverer(&self, intent: &Intent<'_>) -> Result<bool> {
        self.holds_its_row()?;
        self.catch_up()?;
        let word = self.pod.scr_u64(self.pod.layout().recovery_offset());
        let me = host_table::session(self.id, self.life);
        Ok(word.load(Ordering::SeqCst) == me && intent.held())
    }

    /// A dead host's announce of `record` locked as `raw` whose undo image is ready: among
    /// `dead`'s other announces (another of its threads loaded the word unlocked before
    /// the write's lock, and announced the same word in a lower announce before its CAS,
    /// which would have failed), then the other dead hosts'. The host and the announce's
    /// index.
    fn undo_image_among_the_dead(
        &self,
        dead: &Dead,
        record: u32,
        raw: u32,
    ) -> Option<(HostId, u64)> {
        if mutants::skipped(MutantStep::RecoveryFindsTheWriterAmongTheDead) {
            return None;
        }
        let mut dead_hosts = std::iter::once(dead.host).chain(dead.still_dead_others(&self.pod));
        dead_hosts.find_map(|host| {
            (0..HOLDS_PER_HOST).find_map(|i| {
                let theirs = self.announce_word(host, i).load(Ordering::SeqCst);
                decode_announce(theirs)
                    .is_some_and(|announced| announced == (record, raw, true))
                    .then_some((host, i))
            })
        })
    }

    /// Settles `record`, which a dead host holds as `held` with no undo image ready: the
    /// lock of a write that changed no byte yet or had finished (its bytes written back,
    /// its image let go), of a delete, a deallocation or a move, or (in use, unlocked) an
    /// allocation's claim. Every replica has applied the dead host's events (they all
    /// come before its `HostDead`), so whether the record still has an object says what
    /// to do: a record without one is freed, its counter moved on by 2; a locked one with
    /// one is unlocked with its counter moved on by 2 and a `Recovered` event (a write
    /// that had finished made a new version, and every host drops its lines of the
    /// object: right whichever lock it was); a claimed one with one is the object's.
    /// `Ok(false)`: the word changed under a claim (a host acting on a stale index entry
    /// locks it for a moment): try again later.
    ///
    /// `live_claim`: a live host's lasting claim of the record (`lasting_live_claim`),
    /// under the dead host's lock. A record without an object then goes back to the
    /// claimed word, not to free: the claimer frees it by a CAS from that word once it
    /// learns its allocation lost (or keeps it, if it won), and a record freed here could
    /// be claimed again, with the same word, by a host whose claim that CAS would free.
    fn settle_lock(
        &self,
        records: &Records<'_>,
        intent: &Intent<'_>,
        record: u32,
        held: RecordWord,
        live_claim: Option<RecordWord>,
    ) -> Result<bool> {
        // A live host whose claim of the record won had appended its alloc before it
        // withdrew its announce (which `restore_holds` found gone): the log has it.
        self.catch_up()?;
        let key = self.replica.read().record_owner_key(record);
        let settled = held.counter & !1;
        let to = match (held.locked, &key, live_claim) {
            (false, Some(_), _) => return Ok(true),
            // The record has an object: the claim's allocation won, and the lock may be a
            // write's of that object. Wait for the claimer to let its claim go.
            (true, Some(_), Some(_)) => return Ok(false),
            (true, None, Some(claim)) => {
                // The dead host's lock was taken over the claimed word (by a write, one
                // more on the counter; by a release, none): undo just that. Any other
                // word is not this case: wait.
                if !over_claim(records, held, claim) {
                    return Ok(false);
                }
                claim
            }
            // Freed with its counter moved on: the dead host, paused past its lease,
            // may wake and free its claim by a CAS from the claimed word, which a live
            // host's claim of the record freed here would otherwise be again (a 2-bit
            // record has no counter to move: `left_to_recovery`'s window).
            (_, None, _) => RecordWord {
                in_use: false,
                locked: false,
                counter: (settled + 2) & records.counter_mask(),
            },
            (true, Some(_), _) => RecordWord {
                in_use: true,
                locked: false,
                counter: (settled + 2) & records.counter_mask(),
            },
        };
        let logged_first = !mutants::skipped(MutantStep::RecoveryLogsBeforeUnlock);
        if let (true, Some(key)) = (held.locked && logged_first, &key) {
            self.log_recovered(key, record)?;
        }
        // Right before the CAS, after the last pause (the catch-up above, the append's
        // confirming replay): a recoverer paused past its lease and taken over may find
        // the lock settled by the next recoverer and the record locked again, by a live
        // host, as the very word it CASes from (every lock of a 2-bit record is one word;
        // a claim of a free record, too).
        if !self.still_recovers_before_it_settles(intent)? {
            return Ok(false);
        }
        match records.compare_exchange(record, held, to) {
            Ok(()) => {
                if !to.in_use {
                    self.records_in_use().fetch_sub(1, Ordering::Relaxed);
                } else if let (false, Some(key)) = (logged_first, &key) {
                    self.log_recovered(key, record)?;
                }
                self.counters
                    .locks_recovered
                    .fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            // Only a lock's holder changes a locked word, and the holder is dead.
            Err(_) if held.locked => Err(Error::RecordChangedUnderRecovery { record }),
            Err(_) => Ok(false),
        }
    }

    /// Restores `record`, locked by the dead writer `dead` as `locked` with its undo
    /// image (announce `index`) complete: the object gets the image back, the counter
    /// moves on by 2 (a reader that copied torn bytes fails `read_end`), and every host
    /// drops its lines of it. A record without an object is settled as a lock.
    fn restore_write(
        &self,
        records: &Records<'_>,
        held: &Intent<'_>,
        (dead, index): (HostId, u64),
        record: u32,
        locked: RecordWord,
    ) -> Result<bool> {
        // One read of the index for both: the record's object, then its entry.
        let (key, entry) = {
            let index = self.replica.read();
            let key = index.record_owner_key(record);
            let entry = key.as_ref().and_then(|key| index.lookup(key));
            (key, entry)
        };
        let (Some(key), Some(entry)) = (key, entry) else {
            return self.settle_lock(records, held, record, locked, None);
        };
        let place = self.place(&entry);
        let image = self.pod.layout().undo_image_offset(dead, index);
        let mut bytes = vec![0u8; place.len];
        // Our cache may hold lines of the image and of the object from before.
        self.memory.flush(image, place.len);
        self.memory.flush(place.offset, place.len);
        self.memory.fence();
        self.memory.read(image, &mut bytes);
        // Never left in this host's cache, as a writer's bytes are (a recoverer that
        // stops here leaves nothing to land after its own recovery).
        self.memory.write_non_temporal(place.offset, &bytes);
        // The restored bytes are in memory before the record says unlocked.
        self.memory.fence();
        // The image is let go before the unlock, as a writer lets go of its own: the
        // object is whole, so a recoverer that takes over from here settles the lock
        // without it, and an announce left behind by a recoverer that dies after the
        // unlock is never taken for a later holder's (at 2 bits that lock's word is the
        // same, and a dead later writer's announce says "undo ready" too).
        let announce = self.announce_word(dead, index);
        announce.store(
            announce.load(Ordering::SeqCst) & !UNDO_READY,
            Ordering::SeqCst,
        );
        let before = locked.counter.wrapping_sub(1) & records.counter_mask();
        let unlocked = RecordWord {
            in_use: true,
            locked: false,
            counter: (before + 2) & records.counter_mask(),
        };
        let logged_first = !mutants::skipped(MutantStep::RecoveryLogsBeforeUnlock);
        if logged_first {
            self.log_recovered(&key, record)?;
        }
        // As in `settle_lock`: after the append's last pause, before the CAS.
        if !self.still_recovers_before_it_settles(held)? {
            return Ok(false);
        }
        if records.compare_exchange(record, locked, unlocked).is_err() {
            // Only a lock's holder changes a locked word, and the holder is dead.
            return Err(Error::RecordChangedUnderRecovery { record });
        }
        if !logged_first {
            self.log_recovered(&key, record)?;
        }
        self.counters
            .locks_recovered
            .fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Appends `Recovered` for `key`'s `record`, which this recoverer is about to unlock
    /// with its counter moved on by 2. Before the unlock, as a writer's wrap event: the
    /// move may bring the counter back to a value a host last read the object at (a
    /// 2-bit counter after one write, an 8-bit one after 32), and that host must not
    /// take its lines of the old version for the new one. A reader that loads the
    /// unlocked word has this event below the log's tail, so its check finds the stamp
    /// moved. If the append fails, the record stays locked and announced, and the next
    /// round of recovery (this host's or another's) appends it again: a second
    /// `Recovered` only drops the object's lines once more.
    fn log_recovered(&self, key: &[u8], record: u32) -> Result<()> {
        self.submit(&Event::Recovered { key, record }).map(drop)
    }
}

/// Whether a lock `held` may have been taken over the claimed word `claim` (by a write,
/// one more on the counter; by a release, none).
fn over_claim(records: &Records<'_>, held: RecordWord, claim: RecordWord) -> bool {
    held.counter == claim.counter || held.counter == (claim.counter + 1) & records.counter_mask()
}

/// Lets go of the recovery word `word` if it still names `me` (this recoverer's life),
/// when dropped: once no other thread of this host fills a dead host's reservation
/// under it (`filling`).
struct ReleaseOnDrop<'a> {
    word: &'a AtomicU64,
    me: u64,
    filling: &'a crate::sync::Mutex<()>,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        // A nested fill (another thread's, under this word) finishes first: the word's
        // next holder must be the only filler.
        let _filling = (!mutants::skipped(MutantStep::FillOnlyUnderTheRecoveryWord))
            .then(|| self.filling.lock());
        let _ = self
            .word
            .compare_exchange(self.me, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Entry points for the loom model of a recovery racing a live locker
/// (`loom_models::a_recovery_racing_a_live_write`).
#[cfg(all(test, megalon_loom))]
impl crate::Host {
    /// This host announces a write lock of `key`'s record as `write_start` does before
    /// its CAS, and goes no further: it dies there (the announce stays, the record is
    /// not locked).
    pub(crate) fn loom_dies_announcing_a_write_of(&self, key: &[u8]) {
        let shared = &self.shared;
        let record = self.lookup(key).expect("lookup").expect("exists").record;
        let record = record.expect("a record");
        let word = Records::fixed(&shared.pod).load(record);
        let locked = RecordWord {
            in_use: true,
            locked: true,
            counter: word.counter + 1,
        };
        let hold = shared.take_hold().expect("an announce word");
        let records = Records::fixed(&shared.pod);
        assert!(shared
            .announce(&hold, &records, record, locked)
            .expect("announce"));
        let _ = hold.into_index();
    }

    /// Settles the record locks `dead` announced (`restore_holds`), as `recover` does:
    /// holding the pod's recovery word, `dead`'s life condemned first. `Ok(true)`: all
    /// settled; `Ok(false)`: try again (a live host announces one of them).
    pub(crate) fn loom_restore_holds_of(&self, dead: HostId) -> Result<bool> {
        let shared = &self.shared;
        let (pid, joins) = host_table::holder(&shared.pod, dead).expect("dead holds its row");
        let word = shared.pod.scr_u64(shared.pod.layout().recovery_offset());
        let me = host_table::session(shared.id, shared.life);
        word.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
            .expect("no other recoverer");
        let _release = ReleaseOnDrop {
            word,
            me,
            filling: &shared.filling,
        };
        host_table::condemn(&shared.pod, dead, joins);
        let dead = Dead {
            host: dead,
            pid,
            joins,
            others_dead: vec![(dead, pid, joins)],
            rescue: false,
            reserved: 0..0,
        };
        shared.restore_holds(&dead)
    }
}
