//! What a writer keeps so that recovery can restore what it was writing: the announce
//! of every record lock it takes, its undo images, and the checks that tell it its locks
//! are its recovery's now (the module's own doc says how recovery reads them).

use super::{decode_announce, encode_announce, MOVE_BACK, UNDO_READY};
use crate::chaos::Point;
use crate::error::{Error, Result};
use crate::host::Shared;
use crate::host_table;
use crate::ids::HostId;
use crate::limits::HOLDS_PER_HOST;
use crate::mutants::{self, Step as MutantStep};
use crate::record::{RecordWord, Records};
use crate::sync::{AtomicU64, Ordering};

/// A record lock this host announces: its announce word and undo image, freed on drop
/// unless handed on.
pub(in crate::host) struct Hold<'a> {
    shared: &'a Shared,
    index: Option<u64>,
    /// The thread was unwinding already when the hold was taken (a call made from a drop
    /// during an unwind: a guard of the caller's, a host dropped by a panic): a drop of it
    /// then is that call's own way out, not the panic's.
    unwinding: bool,
}

impl Hold<'_> {
    /// The announce word's index, for the write ticket to carry.
    pub(in crate::host) fn into_index(mut self) -> Option<u64> {
        self.index.take()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            // Unwinding, maybe holding the announced lock (a write's wrap event whose
            // append panicked): the announce stays for recovery, and the host leaves as a
            // dead one does, so that recovery happens. A hold taken while the thread
            // already unwound (a call made from a drop during a panic) ends as its call
            // would have (a move back's slot image kept for recovery, with the move done,
            // put the object's old bytes back over its writes a lease later; and each
            // such hold kept one of the host's few announce words for good), unless its
            // lock is still held (the record's word is the one announced): then a panic
            // of the call's own cut it short, and the lock, its announce gone, would
            // outlive the host.
            if std::thread::panicking()
                && (!self.unwinding || self.shared.announced_lock_held(index))
            {
                self.shared
                    .left_unsettled
                    .store(true, std::sync::atomic::Ordering::Release);
                return;
            }
            self.shared.end_hold(index);
        }
    }
}

impl Shared {
    pub(in crate::host) fn announce_word(&self, host: HostId, index: u64) -> &AtomicU64 {
        self.pod
            .scr_u64(self.pod.layout().announce_offset(host, index))
    }

    /// At a join, once this life holds its row (a free one: not a rescue's): clears the
    /// row's announce words. Its last life's were all settled and cleared before the row
    /// was freed, so any left is a late store of a life paused past its lease (the
    /// lease's window), which names no lock; left, it would hold every width switch off,
    /// and this life's recovery could take it for its own. A joiner paused past its lease
    /// before the clear (declared dead, its row freed, and the id's next life announcing
    /// its locks there) clears nothing: it finds the row not its own.
    pub(in crate::host) fn clear_late_announces(&self) -> Result<()> {
        if !self.undo_images() {
            return Ok(());
        }
        self.chaos.point(Point::JoinBeforeClearAnnounces);
        if !self.row_is_mine() {
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        for index in 0..HOLDS_PER_HOST {
            self.announce_word(self.id, index)
                .store(0, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Whether this host's writes keep undo images and announce their locks.
    pub(in crate::host) fn undo_images(&self) -> bool {
        self.pod.config().undo_images() && !self.all_log
    }

    /// Whether what this host holds in the record array is its recovery's now: the pod
    /// keeps undo images (recovery settles every lock and claim a dead host announced) and
    /// this host knows it was declared dead (a recoverer condemned its life, or its
    /// replica applied its death). From then on it changes no record word and no announce
    /// of its own: recovery may have settled them already, and a live host may hold the
    /// record again with the very word this host would CAS from (every lock of a 2-bit
    /// record is one word). Without undo images recovery leaves records alone, and a
    /// record this host holds locked is still its own to unlock.
    pub(in crate::host) fn left_to_recovery(&self) -> bool {
        // The condemnation alone (one SCR load, on every write's unlock): a row is freed
        // only after it, or by its holder leaving.
        self.undo_images()
            && !mutants::skipped(MutantStep::DeadHostLeavesRecordsToRecovery)
            && (self.still_alive().is_err() || host_table::condemned(&self.pod, self.id, self.life))
    }

    /// `Err(HostDeclaredDead)` if [`Shared::left_to_recovery`].
    pub(in crate::host) fn not_left_to_recovery(&self) -> Result<()> {
        if self.left_to_recovery() {
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        Ok(())
    }

    /// An announce word and undo image for a write about to lock a record, or an empty
    /// hold in a pod without undo images. Waits (bounded) while every one is in use.
    pub(in crate::host) fn take_hold(&self) -> Result<Hold<'_>> {
        // A host declared dead takes no lock any more.
        self.not_left_to_recovery()?;
        let mut backoff: Option<crate::backoff::Backoff> = None;
        loop {
            if let Some(hold) = self.try_take_hold() {
                return Ok(hold);
            }
            // A wait of up to the wait limit, maybe on the pump's thread (a move back it
            // serves): the host is alive, and beats, or it is declared dead alive once
            // the wait outlasts the lease. One that learns it is dead meanwhile (its
            // pump panicked, or it was condemned) stops waiting.
            self.not_left_to_recovery()?;
            self.beat();
            crate::backoff::Backoff::snooze_or(
                &mut backoff,
                self.options.wait_limit,
                |waited_ms| Error::TooManyLocksHeld {
                    host: self.id,
                    limit: HOLDS_PER_HOST,
                    waited_ms,
                },
            )?;
        }
    }

    /// Announces that this host is about to lock `record` of `records` as `locked`
    /// (before the CAS), for a write, a delete, a deallocation, a move to this host or an
    /// allocation's claim. In a pod whose record width may switch, the caller is inside
    /// its gate, passed at `records`' epoch: every announce is of the width the word
    /// is open at, and a switch's drain waits until none is left. `Ok(false)`: a recoverer is about to restore a dead host's lock of
    /// the record; the announce is withdrawn and the caller must not take the lock now
    /// (it waits, or gives up, as for a busy record). `Err(HostDeclaredDead)`: this host
    /// was declared dead, and takes no lock any more (its recoverer, which condemned it
    /// before it looked at its announces, may not see this one).
    pub(in crate::host) fn announce(
        &self,
        hold: &Hold<'_>,
        records: &Records<'_>,
        record: u32,
        locked: RecordWord,
    ) -> Result<bool> {
        let Some(index) = hold.index else {
            return Ok(true);
        };
        // Its announce words are its row's, which the id's next holder may hold.
        self.not_left_to_recovery()?;
        let raw = records.encode(locked);
        let announce = self.announce_word(self.id, index);
        // SeqCst: ordered before the locking CAS, so a recoverer that sees the word
        // locked and no announce of it knows the lock is not this host's.
        announce.store(encode_announce(record, raw), Ordering::SeqCst);
        // loom takes SeqCst loads and stores for AcqRel ones (its README), so it finds
        // the store-buffering outcome this and the recoverer's order exclude (both
        // loads miss the other's store); it models a SeqCst fence, which gives it the
        // order SeqCst accesses have in the C++ model. Not in other builds.
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        // And before this load (a recoverer condemns, then reads the announces): either
        // it sees our announce, or we see that we are dead.
        if let Err(dead) = self.not_left_to_recovery() {
            self.withdraw(hold);
            return Err(dead);
        }
        // And before this load (the recoverer stores its intent, then reads the
        // announces: one of the two sees the other). A lock word tells nothing of its
        // holder (at 2 bits every lock of a record is one word), so without this a
        // recoverer could take a lock set after it looked at the announces for the dead
        // host's.
        if mutants::skipped(MutantStep::LockerDefersToRecovery)
            || self.recovery_intent().load(Ordering::SeqCst) != u64::from(record) + 1
        {
            return Ok(true);
        }
        self.withdraw(hold);
        Ok(false)
    }

    /// Clears `hold`'s announce while its lock is not taken (the hold stays this host's).
    /// A host declared dead leaves it: it may hold the lock after all (its unlock was
    /// left to recovery), and recovery settles only what is announced.
    pub(in crate::host) fn withdraw(&self, hold: &Hold<'_>) {
        if self.left_to_recovery() {
            return;
        }
        if let Some(index) = hold.index {
            self.announce_word(self.id, index)
                .store(0, Ordering::SeqCst);
        }
    }

    /// The record under recovery: 0, or 1 + the record a recoverer is about to restore.
    pub(super) fn recovery_intent(&self) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().recovery_intent_offset())
    }

    /// An announce word and undo image for a move to this host, if one is free now (a
    /// move is a choice: it does not wait), or an empty hold in a pod without them.
    pub(in crate::host) fn try_take_hold(&self) -> Option<Hold<'_>> {
        if self.left_to_recovery() {
            return None;
        }
        let unwinding = std::thread::panicking();
        if !self.undo_images() {
            return Some(Hold {
                shared: self,
                index: None,
                unwinding,
            });
        }
        let mut free = self.free_holds.lock();
        (*free != 0).then(|| {
            let index = u64::from(free.trailing_zeros());
            *free &= !(1 << index);
            Hold {
                shared: self,
                index: Some(index),
                unwinding,
            }
        })
    }

    /// Holding `record`'s lock as `locked`, before any byte of the object at `offset`
    /// (`len` bytes) changes: copies it into the undo image, makes that reach memory, and
    /// marks the announce ready.
    pub(in crate::host) fn keep_undo_image(
        &self,
        hold: &Hold<'_>,
        records: &Records<'_>,
        record: u32,
        locked: RecordWord,
        offset: u64,
        len: usize,
    ) {
        let Some(index) = hold.index else {
            return;
        };
        self.copy_to_undo_image(index, offset, len);
        let raw = records.encode(locked);
        self.announce_word(self.id, index)
            .store(encode_announce(record, raw) | UNDO_READY, Ordering::SeqCst);
    }

    /// Before a move back writes its object into slot `slot` in place: keeps the slot's
    /// bytes (the object as it was when it moved to this host) in `hold`'s undo image
    /// and announces them, so that if this host dies in the middle of the copy, its
    /// recovery puts them back before its `HostDead` hands the object back to CXL.
    pub(in crate::host) fn keep_slot_image(&self, hold: &Hold<'_>, slot: u64) {
        let Some(index) = hold.index else {
            return;
        };
        if mutants::skipped(MutantStep::MoveBackKeepsTheSlotImage) {
            return;
        }
        let layout = self.pod.layout();
        let (offset, len) = (
            layout.slot_offset(slot),
            layout.config.slot_size_bytes as usize,
        );
        // From memory: lines of the slot cached from before the object left are old.
        self.memory.flush(offset, len);
        self.memory.fence();
        self.copy_to_undo_image(index, offset, len);
        self.announce_word(self.id, index).store(
            encode_announce(MOVE_BACK, slot as u32) | UNDO_READY,
            Ordering::SeqCst,
        );
    }

    /// Copies `len` bytes at `offset` into undo image `index` of this host and makes them
    /// reach memory before the announce that says the image is complete.
    fn copy_to_undo_image(&self, index: u64, offset: u64, len: usize) {
        let image = self.pod.layout().undo_image_offset(self.id, index);
        UNDO_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            buffer.resize(len, 0);
            self.memory.read(offset, &mut buffer);
            // Never left in this host's cache: a line of an image this host stopped in
            // the middle of could land over its id's next life's image.
            self.memory.write_non_temporal(image, &buffer);
        });
        self.memory.fence();
    }

    /// The host that announced a lock of `record` now, if any (pods with undo images):
    /// what a wait that gave up names. Every holder announces its lock, but an announce
    /// may also be of a lock not held: one whose CAS lost (a host declared dead keeps it
    /// for its recovery, which waits for the live lock), or one let go and not withdrawn
    /// yet. Its word is the holder's at every width when the CAS lost to it, and at 2
    /// bits (4 bits, once the counter comes back) for any later lock. So the holder is
    /// the host whose announce of the word has its undo image ready (only a holder's
    /// has), else the one host announcing the word; with two, it is not known (the
    /// first found named a host declared dead, or one that had let go, for a live
    /// writer's lock).
    pub(in crate::host) fn lock_holder(&self, record: u32) -> Option<HostId> {
        if !self.undo_images() {
            return None;
        }
        // At the width this replica is at (a word of an id past its array names nobody).
        let records = Records::of(&self.pod, self.replica.shape());
        if u64::from(record) >= records.count() {
            return None;
        }
        let word = records.load(record);
        // Per host announcing the word: whether one of its announces of it is ready.
        let announcers: Vec<(HostId, bool)> = (0..self.pod.config().max_hosts)
            .filter_map(|host| {
                (0..HOLDS_PER_HOST)
                    .filter_map(|i| {
                        let announce = self.announce_word(host, i).load(Ordering::SeqCst);
                        decode_announce(announce)
                            .filter(|&(r, raw, _)| r == record && records.decode(raw) == word)
                            .map(|(.., ready)| ready)
                    })
                    .reduce(|a, b| a || b)
                    .map(|ready| (host, ready))
            })
            .collect();
        match announcers.as_slice() {
            [(host, _)] => Some(*host),
            _ => announcers
                .iter()
                .find(|&&(_, ready)| ready)
                .map(|&(host, _)| host),
        }
    }

    /// [`Error::RecordBusy`] for `record`, naming the host that holds it if known.
    pub(in crate::host) fn record_busy(&self, record: u32, waited_ms: u64) -> Error {
        let holder = self.lock_holder(record);
        Error::RecordBusy {
            record,
            waited_ms,
            holder,
            holder_alive: holder.and_then(|host| host_table::alive(&self.pod, host)),
        }
    }

    /// Whether every announce word of this host is free: none taken by a lock or claim
    /// it has not ended. Once its pump has stopped and its settles are done, one still
    /// taken is a lock nobody of this host will end: a write ticket its caller forgot
    /// (`mem::forget`, safe Rust), whose record stays locked.
    pub(in crate::host) fn every_hold_free(&self) -> bool {
        let all = if HOLDS_PER_HOST == 64 {
            u64::MAX
        } else {
            (1 << HOLDS_PER_HOST) - 1
        };
        *self.free_holds.lock() == all
    }

    /// Whether this host's announce `index` names a lock that its record's word still
    /// shows: a lock taken and not let go. A word tells nothing of its holder (a CAS that
    /// lost did so to the very word at 2 bits, and to another delete's, deallocation's or
    /// move's lock of the same word at any width; a lock let go is taken again from the
    /// word it was let go to): so every caller withdraws the announce of a lock it did
    /// not take, or let go, before its hold drops. (Left, the healthy host kept the
    /// announce for good, every width switch of the pod waiting on it, and left as a
    /// dead host.)
    fn announced_lock_held(&self, index: u64) -> bool {
        let announce = self.announce_word(self.id, index).load(Ordering::SeqCst);
        decode_announce(announce).is_some_and(|(record, raw, _)| {
            let records = Records::of(&self.pod, self.replica.shape());
            let word = records.decode(raw);
            u64::from(record) < records.count() && word.locked && records.load(record) == word
        })
    }

    /// [`Shared::end_hold`] of a hold handed on as its index, if any.
    pub(in crate::host) fn end_hold_of(&self, hold: Option<u64>) {
        if let Some(index) = hold {
            self.end_hold(index);
        }
    }

    /// Clears announce `index` (its lock is released, or was never taken) and frees it.
    /// A host declared dead leaves it, and does not use the word again: the announce is
    /// its recovery's (`left_to_recovery`).
    pub(in crate::host) fn end_hold(&self, index: u64) {
        if self.left_to_recovery() {
            return;
        }
        self.announce_word(self.id, index)
            .store(0, Ordering::SeqCst);
        *self.free_holds.lock() |= 1 << index;
    }

    /// Holding its record's lock, its bytes written back, before the unlock: the write's
    /// undo image is let go (the object is whole in its new version). From here a
    /// recoverer completes the write instead of undoing it, and an announce left behind
    /// by a writer that dies after its unlock is never taken for a holder's.
    pub(in crate::host) fn let_go_of_undo_image(&self, hold: u64) {
        if mutants::skipped(MutantStep::WriteEndLetsGoOfTheImage) {
            return;
        }
        let announce = self.announce_word(self.id, hold);
        announce.store(
            announce.load(Ordering::Relaxed) & !UNDO_READY,
            Ordering::SeqCst,
        );
    }
}

thread_local! {
    /// A writer's buffer for its undo image (one copy per write, no allocation).
    static UNDO_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
