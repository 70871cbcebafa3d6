//! The record width at run time ([`PodConfig::record_width_switch`]): the width word,
//! the hosts' gates, and the switch.
//!
//! A record word's bits mean different things at each width, and no host can rewrite
//! every word at once, so a switch freezes the record array, lets it drain, and moves
//! every host to the new width at one log position:
//!
//! 1. **Freeze.** The switching host (the drainer) CASes the width word in the SCR from
//!    open at epoch `e` to draining (naming itself and the freeze's serial).
//! 2. **The gates.** Every change of a record word that takes a record (a write's or a
//!    delete's lock, a deallocation's lock, a claim, the free of a claim whose alloc
//!    lost) is made inside its host's gate, a counter in the host's DRAM: raise the gate,
//!    look at the width word, and go on only if it is open at the epoch of the lookup
//!    that named the record; lower the gate after the change. The look is at the host's
//!    copy of the word in its DRAM first, and at the word in the SCR only when the copy
//!    is not open at that epoch (the look then puts what it loaded into the copy). Each
//!    host acknowledges a freeze (its pump each round and as it beats between rounds,
//!    [`Host::replay`] by hand, or a thread whose gate met it): it puts the draining
//!    word into its copy, then looks at its gate, and if no thread is inside (and the
//!    copy is not open at the freeze's epoch), stores the word into its acknowledgement
//!    word in the SCR. The drainer waits for every live host's acknowledgement. Both
//!    sides are SeqCst: a changer that raised its gate before the acknowledger's look
//!    at it is waited for, one that raised it after finds the freeze in the copy and
//!    backs off (the store-then-load handshake recovery's announces use). The copy only
//!    moves forward (a word replaces only an earlier one, as in the SCR): a late
//!    acknowledgement of a freeze given up, or a look that loaded the word before the
//!    freeze, never puts an earlier word over an acknowledged freeze. A copy still open
//!    at a freeze is a host that has not acknowledged it, whose gates the drainer waits
//!    for. A host without a pump looks at the word in the SCR at every gate: nothing
//!    else of it acknowledges a freeze but its replays by hand. Changes by a lock's
//!    holder (unlock, the free after its event) need no gate: no switch goes on while a
//!    record is locked. So a pod that may switch pays no SCR access for the gates of
//!    its hosts with a pump while no switch goes on.
//! 3. **Drain.** The drainer waits until no record is locked: every lock taken before
//!    the freeze is its holder's to release.
//! 4. **Switch.** It appends `WidthEnd { epoch: e + 1, bits }`: every replica, at that
//!    position, takes every object's record and reads the array at the new width (all
//!    free). Then it stores zero over every record byte (zero is a free record at every
//!    width) and the count of records in use, and reopens the word at `e + 1`. A reader
//!    of the old width that finds a zeroed word retries and applies the event first; an
//!    alloc claimed at `e` and logged after the event loses (it names its epoch).
//!
//! A drainer that cannot finish a step within its wait limit (a host that does not
//! acknowledge the freeze, a record that stays locked, an append refused) reopens the
//! word at `e`: nothing was changed yet. Pods whose record width is fixed (the default) skip the gates.

use super::{Host, Settle, Shared};

use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host_table;
use crate::ids::HostId;
use crate::limits::HOLDS_PER_HOST;
use crate::mutants::{self, Step};
use crate::record::{RecordShape, Records};
use crate::replica::Outcome;
use crate::sync::{AtomicU64, Ordering};

/// The width word's bit set while a switch drains the records.
const DRAINING: u64 = 1 << 32;
/// Where the draining host's id + 1 sits in the width word (8 bits).
const DRAINER_SHIFT: u32 = 40;
/// Where the freeze's serial sits in the width word (16 bits).
const SERIAL_SHIFT: u32 = 48;

/// The width word, decoded: the epoch (switches begun and ended), the host draining the
/// records for the next one if a switch is under way, and the serial of the last freeze
/// (so that an acknowledgement names one freeze, not an earlier one at the same epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WidthWord {
    epoch: u32,
    drainer: Option<HostId>,
    serial: u16,
}

impl WidthWord {
    fn decode(word: u64) -> Self {
        Self {
            epoch: word as u32,
            // (A draining word always names its drainer, + 1.)
            drainer: (word & DRAINING != 0)
                .then(|| (((word >> DRAINER_SHIFT) & 0xff) as HostId).saturating_sub(1)),
            serial: (word >> SERIAL_SHIFT) as u16,
        }
    }

    fn encode(self) -> u64 {
        u64::from(self.epoch)
            | u64::from(self.serial) << SERIAL_SHIFT
            | self
                .drainer
                .map_or(0, |host| DRAINING | (u64::from(host) + 1) << DRAINER_SHIFT)
    }

    /// Open at `epoch`, after the freeze `serial`.
    fn open(epoch: u32, serial: u16) -> Self {
        Self {
            epoch,
            drainer: None,
            serial,
        }
    }

    /// Open at `epoch`, whatever the serial.
    fn is_open_at(self, epoch: u32) -> bool {
        self.drainer.is_none() && self.epoch == epoch
    }

    /// Whether the width word went from `earlier` to this (in the SCR, where the word
    /// only moves forward): a later epoch, a later freeze or
    /// takeover at the same one (its serial compared across a wrap), or the same freeze
    /// ended. Two takeovers of one freeze (both at its next serial) are neither after the
    /// other.
    fn after(self, earlier: Self) -> bool {
        if self.epoch != earlier.epoch {
            return self.epoch > earlier.epoch;
        }
        match self.serial.wrapping_sub(earlier.serial) as i16 {
            0 => self.drainer.is_none() && earlier.drainer.is_some(),
            ahead => ahead > 0,
        }
    }
}

/// A host's copy of the width word before its first look at the word: open at no epoch.
pub(super) const UNSEEN: u64 = u64::MAX;

/// A freeze under way: the width word as a gate found it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Freeze(WidthWord);

/// What a look at the gate found.
pub(super) enum Gate<'a> {
    /// The record array is at the caller's width and open: change the record word, then
    /// drop this (it lowers the gate; `None` in a pod whose width is fixed).
    Open(Option<Passed<'a>>),
    /// The width moved past the caller's: its record id is of an array that is gone.
    /// Catch up and look the object up again.
    Behind,
    /// A switch is draining the records (this host's, the drainer): wait, then look
    /// again.
    Draining(Freeze),
}

/// A raised gate: lowered when dropped, after the caller's change of a record word.
pub(super) struct Passed<'a> {
    gate: &'a crate::sync::AtomicU64,
    /// In loom's models: the host, whose acknowledgement is checked at the lowering.
    #[cfg(megalon_loom)]
    shared: &'a Shared,
}

impl Drop for Passed<'_> {
    fn drop(&mut self) {
        // In loom's models: no freeze under way was acknowledged by this host while this
        // thread was inside its gate (the acknowledger waits for the gate).
        #[cfg(megalon_loom)]
        if !std::thread::panicking() {
            let word = self.shared.width_word().load(Ordering::SeqCst);
            let acknowledged = self.shared.ack_word(self.shared.id).load(Ordering::SeqCst);
            assert!(
                WidthWord::decode(word).drainer.is_none() || acknowledged != word,
                "a freeze acknowledged while a changer was inside the gate"
            );
        }
        // Release: an acknowledgement that reads the gate lowered comes after the change
        // made inside it (the drainer reads the acknowledgement with Acquire).
        self.gate.fetch_sub(1, Ordering::Release);
    }
}

impl Shared {
    fn width_word(&self) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().width_offset())
    }

    /// Host `host`'s acknowledgement of a freeze: the width word it saw draining, once no
    /// thread of it was inside its gate.
    fn ack_word(&self, host: HostId) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().gate_offset(host))
    }

    /// Acknowledges the freeze `word` (a width word seen draining, SeqCst) if no thread of
    /// this host is inside its gate now: the freeze goes into this host's copy of the
    /// word first, and every thread that raises the gate after this load of it looks at
    /// the copy after this store, and sees the freeze.
    fn acknowledge(&self, word: WidthWord) {
        if word.drainer.is_none() {
            return;
        }
        self.chaos.point(Point::AckBeforeCopy);
        let copy = if mutants::skipped(Step::WidthCopyAtAck) {
            word.encode()
        } else {
            self.copy_width_word(word.encode())
        };
        self.chaos.point(Point::AckAfterCopy);
        // The copy's store, then the gate's load: see `enter_gate` for loom's fence.
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        // A copy found open at the freeze's epoch is past it (the freeze was given up):
        // nothing to acknowledge.
        // Only while this host's row is its own: a life paused past its lease, declared
        // dead and recovered, must not acknowledge a freeze for the id's next life, whose
        // gates it does not see.
        if self.gate.load(Ordering::SeqCst) == 0
            && !WidthWord::decode(copy).is_open_at(word.epoch)
            && self.row_is_mine()
        {
            self.ack_word(self.id)
                .store(word.encode(), Ordering::Release);
        }
    }

    /// Puts the width word `word` (loaded from the SCR) into this host's copy of it,
    /// unless the copy holds a later word already (a look or an acknowledgement that
    /// loaded the SCR after this caller did, and stored first): the copy only moves
    /// forward, so an acknowledged freeze stays in it until a later word replaces it.
    /// Returns the copy as it is then. (A store, or a CAS from what the caller saw, let an
    /// acknowledgement of a freeze given up, late, put it back over the next freeze, and a
    /// changer's look from before that next freeze then refresh it to open, just before
    /// the next acknowledgement read the gate lowered.)
    fn copy_width_word(&self, word: u64) -> u64 {
        if mutants::skipped(Step::WidthCopyForward) {
            self.width_seen.store(word, Ordering::SeqCst);
            return word;
        }
        let mut copy = self.width_seen.load(Ordering::SeqCst);
        while copy == UNSEEN || WidthWord::decode(word).after(WidthWord::decode(copy)) {
            match self.width_seen.compare_exchange_weak(
                copy,
                word,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return word,
                Err(now) => copy = now,
            }
        }
        copy
    }

    /// The pump's part of a switch: acknowledges a freeze under way, for a host whose
    /// threads pass no gate or pass it on the copy; and takes over a switch whose drainer
    /// is gone, as a gate that meets it does (the gates of a host whose copy is open pass
    /// on it without meeting the switch, and a pod only read has none).
    pub(super) fn acknowledge_freeze(&self) -> Result<()> {
        if !self.width_switches() {
            return Ok(());
        }
        let word = WidthWord::decode(self.width_word().load(Ordering::SeqCst));
        if word.drainer.is_some_and(|host| self.drainer_gone(host)) {
            return self.take_over_switch(self.replica.shape(), word);
        }
        self.acknowledge(word);
        Ok(())
    }

    /// The drainer the width word names, if a switch is under way.
    pub(super) fn width_drainer(&self) -> Option<HostId> {
        WidthWord::decode(self.width_word().load(Ordering::SeqCst)).drainer
    }

    /// Whether this pod's record width may change (its changers pass the gate).
    pub(super) fn width_switches(&self) -> bool {
        self.pod.layout().config.record_width_switch
    }

    /// Raises this host's gate for a change of a record word named by a lookup at
    /// `shape`, if the array is open at it (see the module's docs).
    pub(super) fn enter_gate(&self, shape: RecordShape, c: &ThreadCounters) -> Gate<'_> {
        if !self.width_switches() || mutants::skipped(Step::WidthGate) {
            return Gate::Open(None);
        }
        // The gate is in this host's DRAM, and so is the copy of the width word it looks
        // at first: no SCR access while the copy is open at the lookup's epoch.
        let gate = &self.gate;
        gate.fetch_add(1, Ordering::SeqCst);
        // loom takes SeqCst accesses for AcqRel ones (its README) and finds the
        // store-buffering outcome the C++ model's order of SeqCst accesses excludes (the
        // raise and the acknowledger's store of the freeze each missed by the other's
        // load); it models a SeqCst fence, which gives that order. Not in other builds
        // (the announce's too).
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        self.chaos.point(Point::GateAfterRaise);
        // A host without a pump has nothing but its gates (and its replays by hand) to
        // acknowledge a freeze: its gates look at the word itself. (A copy open since
        // their first look let its writes on, and its freezes unacknowledged, for good.)
        // loom's hosts have none; its models replay by hand in the pump's place.
        if (self.options.pump_interval.is_some() || cfg!(megalon_loom))
            && WidthWord::decode(self.width_seen.load(Ordering::SeqCst)).is_open_at(shape.epoch)
        {
            return Gate::Open(Some(Passed {
                gate,
                #[cfg(megalon_loom)]
                shared: self,
            }));
        }
        // The word itself, copied for the next changers (unless the copy moved past it
        // since: an acknowledger's freeze is never overwritten by an older look).
        c.add(Counter::ScrAtomics, 1);
        let loaded = self.width_word().load(Ordering::SeqCst);
        self.chaos.point(Point::GateAfterWordLoad);
        self.copy_width_word(loaded);
        let word = WidthWord::decode(loaded);
        if word.is_open_at(shape.epoch) {
            return Gate::Open(Some(Passed {
                gate,
                #[cfg(megalon_loom)]
                shared: self,
            }));
        }
        gate.fetch_sub(1, Ordering::SeqCst);
        self.acknowledge(word);
        if word.epoch > shape.epoch {
            Gate::Behind
        } else {
            Gate::Draining(Freeze(word))
        }
    }

    /// [`Shared::enter_gate`] for a caller that may wait: `Ok(None)` when it must look
    /// the object up again (after catching up, or after a wait for a switch under way,
    /// within the call's wait); past the wait limit, [`Error::RecordWidthSwitching`].
    pub(super) fn pass_gate(
        &self,
        shape: RecordShape,
        backoff: &mut Option<Backoff>,
        c: &ThreadCounters,
    ) -> Result<Option<Option<Passed<'_>>>> {
        match self.enter_gate(shape, c) {
            Gate::Open(passed) => Ok(Some(passed)),
            Gate::Behind => self.catch_up().map(|()| None),
            Gate::Draining(Freeze(word)) => {
                if word.drainer.is_some_and(|host| self.drainer_gone(host)) {
                    self.take_over_switch(shape, word)?;
                    return Ok(None);
                }
                Backoff::snooze_or(backoff, self.options.wait_limit, |waited_ms| {
                    Error::RecordWidthSwitching { waited_ms }
                })?;
                Ok(None)
            }
        }
    }

    /// Whether a switch's drainer is gone: its row free (it left, or died and was
    /// recovered: whatever it reserved in the log is published or filled by then).
    fn drainer_gone(&self, drainer: HostId) -> bool {
        drainer != self.id && host_table::holder(&self.pod, drainer).is_none()
    }

    /// Ends the switch from `shape` whose drainer, gone, left the word `left` (draining):
    /// with the records zeroed and the word open at the next epoch if its `WidthEnd` is in
    /// the log (it drained them before it appended), else open again at `shape`'s epoch.
    /// One host does it (the CAS that names it the drainer, at the next serial); the
    /// others find the word moved on.
    fn take_over_switch(&self, shape: RecordShape, left: WidthWord) -> Result<()> {
        // The switch is from the word's epoch: the caller's lookup may be past its
        // `WidthEnd` already (at the new width, whose zeroing covers the same bytes).
        let epoch = left.epoch;
        let shape = RecordShape { epoch, ..shape };
        // Caught up before the CAS, which nothing then undoes: the drainer's row was seen
        // free, so what it appended is below `ctail` (published or filled before its row
        // was freed), and its `WidthEnd` is applied here if it is in the log. (Caught up
        // after it, a taker that found itself declared dead put `left` back, naming the
        // drainer's id: a new life of that id, joined meanwhile, had found the switch
        // another host's, and nobody took it over again,
        // `a_taker_declared_dead_leaves_the_switch_to_a_host_that_finds_it_gone`.)
        self.catch_up()?;
        // At the next serial: a new life of the drainer's id (at its join) names the same
        // drainer, and a word equal to `left` would leave `left` for the CAS of a host that
        // found the row free before that join, a second taker zeroing the records after
        // the first reopened them (`a_new_life_of_the_drainer_and_a_gate_do_not_both_take_
        // a_switch_over`). No drainer waits for acknowledgements of a takeover's word.
        let mine = WidthWord {
            drainer: Some(self.id),
            serial: if mutants::skipped(Step::WidthTakeoverSerial) {
                left.serial
            } else {
                left.serial.wrapping_add(1)
            },
            epoch,
        };
        self.chaos.point(Point::WidthBeforeTakeover);
        if self
            .width_word()
            .compare_exchange(
                left.encode(),
                mine.encode(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            return Ok(());
        }
        self.chaos.point(Point::WidthAfterTakeover);
        // Declared dead since: the word, naming this host, is for a host that finds its
        // row free (its recovery frees it), as a drainer's is.
        self.still_alive()?;
        if self.replica.shape().epoch > epoch {
            self.finish_switch(shape, mine);
        } else {
            self.abandon_switch(mine);
        }
        Ok(())
    }

    /// At a join: a switch whose width word names this id as its drainer is an earlier
    /// life's, gone (its row was free for this life to take). The other hosts find the
    /// id's row held and wait on it: this life takes the switch over.
    pub(super) fn take_over_earlier_lifes_switch(&self) -> Result<()> {
        if !self.width_switches() {
            return Ok(());
        }
        let word = WidthWord::decode(self.width_word().load(Ordering::SeqCst));
        if word.drainer == Some(self.id) {
            self.take_over_switch(self.replica.shape(), word)?;
        }
        Ok(())
    }

    /// The drainer's wait for `done`, within `backoff`: `false` past its limit. On the
    /// pump's thread (`on_pump`) it beats the host's lease meanwhile.
    fn drain_until(
        &self,
        backoff: &mut Backoff,
        on_pump: bool,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        while !done() {
            if on_pump {
                self.beat();
            }
            if !backoff.snooze() {
                return false;
            }
        }
        true
    }

    /// Steps 2 and 3 of a switch from `shape`, the width word `draining`: `Ok(())` once
    /// every live host acknowledged the freeze and no record is locked, `Err` (nothing
    /// changed) if a step ran out of wait.
    fn drain(&self, shape: RecordShape, draining: WidthWord, on_pump: bool) -> Result<()> {
        // On the pump (the policy's switch, a choice) a quarter lease at most: the pump
        // only beats meanwhile, and other hosts may wait on its replay or its RPCs. Its
        // next look tries again.
        let lease = std::time::Duration::from_millis(u64::from(self.pod.config().lease_ms));
        let limit = if on_pump {
            self.options.wait_limit.min(lease / 4)
        } else {
            self.options.wait_limit
        };
        let mut backoff = Backoff::new(limit);
        let waited = |backoff: &Backoff| Error::RecordWidthSwitching {
            waited_ms: backoff.waited_ms(),
        };
        for host in 0..self.pod.layout().config.max_hosts {
            // A host acknowledges from its pump or its threads' gates; this one, here. A
            // host whose process is gone (or whose row is free) changes no record word any
            // more.
            let acknowledged = || {
                if host == self.id {
                    self.acknowledge(draining);
                }
                self.ack_word(host).load(Ordering::Acquire) == draining.encode()
                    || host_table::alive(&self.pod, host) == Some(false)
            };
            if !self.drain_until(&mut backoff, on_pump, acknowledged) {
                return Err(waited(&backoff));
            }
        }
        self.chaos.point(Point::WidthAfterGates);
        let records = Records::of(&self.pod, shape);
        for record in 0..records.count() as u32 {
            if !self.drain_until(&mut backoff, on_pump, || !records.load(record).locked) {
                return Err(waited(&backoff));
            }
        }
        if self.undo_images() && !mutants::skipped(Step::WidthDrainWaitsForAnnounces) {
            // Every announce gone, a dead host's too (its recovery settles it, at this
            // width, and clears it): no announce outlives its width, so a recoverer reads
            // every announce at the width the word is open at. A claim's announce holds
            // the switch off until its alloc settles or its record is freed. No new one
            // comes now: every announce is made inside a gate. A free row holds none that
            // counts: its last life left (its holds ended) or was recovered (every
            // announce settled and cleared) before the row was freed; one stored since is
            // a late store of a life paused past its lease, which takes no lock (the
            // lease's window), and would hold every switch off until the id's next life
            // clears it (`Shared::clear_late_announces`).
            for host in 0..self.pod.layout().config.max_hosts {
                for index in 0..HOLDS_PER_HOST {
                    let announce = self.announce_word(host, index);
                    if !self.drain_until(&mut backoff, on_pump, || {
                        announce.load(Ordering::SeqCst) == 0
                            || host_table::holder(&self.pod, host).is_none()
                    }) {
                        return Err(waited(&backoff));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the width word is still at `records`' epoch (open or draining): always in
    /// a pod whose width is fixed.
    pub(in crate::host) fn width_still_at(&self, records: &Records<'_>) -> bool {
        !self.width_switches()
            || WidthWord::decode(self.width_word().load(Ordering::SeqCst)).epoch
                == records.shape().epoch
    }

    /// The record array at the width a dead host's announces are of, for its recovery:
    /// the fixed one, or (a pod whose width may switch) this replica's once it is at the
    /// width word's epoch (no announce outlives its width: the drain waits for none to
    /// be left). `None` while a switch has applied its `WidthEnd` here and not yet
    /// opened the word at the new epoch: no announce is left then (a recovery that finds
    /// none has nothing to restore; it does not wait for the word, which a dead
    /// drainer's takeover opens only once its recovery is done).
    pub(in crate::host) fn records_of_the_announces(&self) -> Result<Option<Records<'_>>> {
        if !self.width_switches() {
            return Ok(Some(Records::fixed(&self.pod)));
        }
        let word = WidthWord::decode(self.width_word().load(Ordering::SeqCst));
        if self.replica.shape().epoch < word.epoch {
            self.catch_up()?;
        }
        let shape = self.replica.shape();
        Ok((shape.epoch == word.epoch).then(|| Records::of(&self.pod, shape)))
    }

    /// Step 4's end, once the `WidthEnd` from the width `old` is applied here, the word
    /// `draining`: every record and the count in use to zero, then the word open at the
    /// next epoch. Only while the word is still `draining` and this host's row its own:
    /// a drainer paused past its lease, declared dead, may find its switch taken over
    /// and ended, and another begun, and must change neither the records (locks of the
    /// new width may be held) nor the word (another switch's freeze). Returns whether it
    /// opened the word.
    fn finish_switch(&self, old: RecordShape, draining: WidthWord) -> bool {
        if !self.row_is_mine() {
            return false;
        }
        self.chaos.point(Point::WidthBeforeZeroing);
        // Word by word at the old width: the words its last lockers used. A host that
        // takes the switch over moves the word off the freeze before it zeroes anything,
        // so the look before each line (and before the count) finds it moved.
        let frozen = || self.width_word().load(Ordering::SeqCst) == draining.encode();
        if !Records::of(&self.pod, old).zero_all_while(frozen) || !frozen() {
            return false;
        }
        self.records_in_use().store(0, Ordering::Relaxed);
        self.chaos.point(Point::WidthBeforeReopen);
        // A CAS from the freeze (a pause past the lease after the check above: the word
        // may be another switch's now). SeqCst (a Release at least): a changer that finds
        // the word open at the new epoch finds every record byte zero.
        let open = WidthWord::open(old.epoch + 1, draining.serial);
        self.width_word()
            .compare_exchange(
                draining.encode(),
                open.encode(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    /// The width word open again at its epoch, from a switch of this host's (the word
    /// `draining`) that changed nothing.
    fn abandon_switch(&self, draining: WidthWord) {
        let _ = self.width_word().compare_exchange(
            draining.encode(),
            WidthWord::open(draining.epoch, draining.serial).encode(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// The settle of a `WidthEnd` from `from` appended with the word draining at
    /// `serial` (this host the drainer): `applied`, the switch ends; else the word opens
    /// again at `from`'s epoch.
    pub(super) fn settle_switch(&self, from: RecordShape, serial: u16, applied: bool) {
        let draining = WidthWord {
            epoch: from.epoch,
            drainer: Some(self.id),
            serial,
        };
        if applied {
            self.finish_switch(from, draining);
        } else {
            self.abandon_switch(draining);
        }
    }
}

impl Shared {
    /// [`Host::switch_record_width`], on the pump's thread if `on_pump` (a drain there
    /// beats the lease).
    pub(super) fn switch_width(&self, bits: u32, on_pump: bool) -> Result<bool> {
        if !self.width_switches() {
            return Err(Error::NotWithWidthSwitch {
                parameter: "a fixed record width (record_width_switch off)",
            });
        }
        if !RecordShape::valid_bits(bits) {
            return Err(Error::UnsupportedRecordWidth { bits });
        }
        let records_bytes = self.pod.layout().records_bytes();
        let count = records_bytes * 8 / u64::from(bits);
        let limit = self.pod.layout().max_records();
        if count > limit {
            return Err(Error::AboveLimit {
                parameter: "records at the new width",
                value: count,
                limit,
            });
        }
        self.catch_up()?;
        let shape = self.replica.shape();
        if shape.bits == bits {
            return Ok(false);
        }
        // 1. Freeze, from the epoch this replica is at: a word at another epoch, or
        //    draining, is another switch's. The freeze's serial is the word's next.
        let open = WidthWord::decode(self.width_word().load(Ordering::SeqCst));
        if !open.is_open_at(shape.epoch) {
            // A switch whose drainer is gone: ended or given up first, as a gate would
            // (else only a write would, and a pod that is only read never switched again).
            if open.drainer.is_some_and(|host| self.drainer_gone(host)) {
                self.take_over_switch(shape, open)?;
                return self.switch_width(bits, on_pump);
            }
            return Err(Error::RecordWidthSwitching { waited_ms: 0 });
        }
        let draining = WidthWord {
            epoch: shape.epoch,
            drainer: Some(self.id),
            serial: open.serial.wrapping_add(1),
        };
        if self
            .width_word()
            .compare_exchange(
                open.encode(),
                draining.encode(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            return Err(Error::RecordWidthSwitching { waited_ms: 0 });
        }
        // The freeze's CAS, then the loads of the gates (this host's own, in `drain`): see
        // `enter_gate` for loom's fence.
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        // A panic from here to the append (a bug: nothing here panics by design) opens
        // the word again rather than leave every host's writes waiting on it.
        let mut unwinding = AbandonOnUnwind {
            shared: self,
            draining: Some(draining),
        };
        self.chaos.point(Point::WidthAfterFreeze);
        if let Err(error) = self.drain(shape, draining, on_pump) {
            self.abandon_switch(draining);
            unwinding.draining = None;
            return Err(error);
        }
        self.chaos.point(Point::WidthBeforeEvent);
        unwinding.draining = None;
        let epoch = shape.epoch + 1;
        let event = Event::WidthEnd { epoch, bits };
        // From the append on, the settle decides: the switch ends if the event is applied,
        // the word opens again at `shape`'s epoch if it never reaches the log.
        let settle = Settle::Width {
            from: shape,
            serial: draining.serial,
        };
        match self.submit_settled(&event, settle)? {
            Outcome::WidthSwitched { .. } => {
                if !self.finish_switch(shape, draining) {
                    // Declared dead since the append: the switch is the taker's to end.
                    return Err(Error::HostDeclaredDead {
                        host: self.id,
                        life: self.life,
                    });
                }
                Ok(true)
            }
            outcome => unreachable!("only the drainer appends its epoch's switch: {outcome:?}"),
        }
    }
}

/// What the pump's width policy saw at its last look: when, this host's counts of
/// writes, record allocations and wraps then, the width's epoch, and how many more looks
/// only count (after a switch: every object's first write at the new width allocates
/// its record, which says nothing of the width).
#[derive(Debug, Default)]
pub(super) struct Looks {
    at: Option<std::time::Instant>,
    writes: u64,
    allocs: u64,
    wraps: u64,
    epoch: u32,
    settling: u32,
}

/// Looks after a switch (or the first) that only count.
const SETTLING_LOOKS: u32 = 2;

impl Shared {
    /// The pump's look at the record width ([`HostOptions::width_policy`]): switches it if
    /// this host's writes since the last look say so (see [`WidthPolicy`]). Another
    /// host's switch under way or begun first is not an error: the next look sees it.
    ///
    /// [`HostOptions::width_policy`]: crate::HostOptions::width_policy
    /// [`WidthPolicy`]: crate::WidthPolicy
    pub(super) fn adapt_width(&self) -> Result<()> {
        let Some(policy) = self.options.width_policy else {
            return Ok(());
        };
        if !self.width_switches() {
            return Ok(());
        }
        let now = std::time::Instant::now();
        let mut looks = self.width_looks.lock();
        if looks
            .at
            .is_some_and(|at| now.duration_since(at) < policy.interval)
        {
            return Ok(());
        }
        let counts = self.events.total();
        let shape = self.replica.shape();
        let (writes, allocs, wraps) = (
            counts.writes - looks.writes,
            counts.record_allocs - looks.allocs,
            counts.wraps - looks.wraps,
        );
        let settled = looks.at.is_some() && looks.epoch == shape.epoch && looks.settling == 0;
        if settled && writes < policy.min_writes {
            // Too few writes to tell: keep counting from the same look.
            return Ok(());
        }
        let settling = if looks.at.is_none() || looks.epoch != shape.epoch {
            SETTLING_LOOKS
        } else {
            looks.settling.saturating_sub(1)
        };
        *looks = Looks {
            at: Some(now),
            writes: counts.writes,
            allocs: counts.record_allocs,
            wraps: counts.wraps,
            epoch: shape.epoch,
            settling,
        };
        drop(looks);
        if !settled {
            return Ok(());
        }
        // Churn in the paper's sense: writes that found their object read-shared and
        // allocated it a record (at a steady state, because a record of it was taken for
        // another object).
        let (churn, wraps) = (allocs as f64 / writes as f64, wraps as f64 / writes as f64);
        let in_use = self.records_in_use().load(Ordering::Relaxed);
        let records_at = |bits: u32| {
            RecordShape {
                epoch: shape.epoch,
                bits,
            }
            .count_in(self.pod.layout().records_bytes())
        };
        // Narrower only while allocations meet an array nearly full (a width that holds
        // every object written fills it no further, whatever its first writes allocate
        // after a switch); wider only if half the wider array holds what is in use.
        let full = in_use * 4 >= records_at(shape.bits) * 3;
        let wider_holds = || in_use * 2 <= records_at(shape.bits * 2);
        let bits = if churn > policy.narrow_above_churn
            && full
            && shape.bits > policy.narrowest_bits.max(2)
            && records_at(shape.bits / 2) <= self.pod.layout().max_records()
        {
            shape.bits / 2
        } else if wraps > policy.widen_above_wraps
            && churn < policy.narrow_above_churn / 4.0
            && shape.bits < policy.widest_bits.min(32)
            && wider_holds()
        {
            shape.bits * 2
        } else {
            return Ok(());
        };
        match self.switch_width(bits, true) {
            Ok(_) | Err(Error::RecordWidthSwitching { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// Opens the width word again if dropped while it holds the freeze: a drainer's thread
/// that unwinds before its append.
struct AbandonOnUnwind<'a> {
    shared: &'a Shared,
    draining: Option<WidthWord>,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(draining) = self.draining {
            self.shared.abandon_switch(draining);
        }
    }
}

impl Host {
    /// The record width this host's replica is at after catching up with the log: the
    /// pod's width at creation, then each switch's
    /// ([`Host::switch_record_width`]), one epoch on each.
    pub fn record_width(&self) -> Result<RecordShape> {
        self.shared.catch_up()?;
        Ok(self.shared.replica.shape())
    }

    /// Switches the pod's records to `bits` (2, 4, 8, 16 or 32) on every host, at one log
    /// position, in a pod created with [`PodConfig::record_width_switch`]: every object
    /// loses its record (it is read-shared until its next write allocates one at the new
    /// width). Writes, deletes and record allocations on every host wait while the
    /// switch drains the records (the module's docs say how); reads do not.
    ///
    /// `Ok(false)`: the pod is at `bits` already. [`Error::RecordWidthSwitching`]:
    /// another switch is under way, or a host kept a record locked (or its gate raised)
    /// past the wait limit; nothing changed. [`Error::NotWithWidthSwitch`]: the pod's
    /// width is fixed. An error of the append (a full log, say) leaves the switch to this
    /// host's replay: if the event reaches the log it ends there, else the word opens
    /// again at the old width.
    ///
    /// [`PodConfig::record_width_switch`]: crate::PodConfig::record_width_switch
    pub fn switch_record_width(&self, bits: u32) -> Result<bool> {
        self.shared.switch_width(bits, false)
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_width_word_reads_back_what_was_stored() {
        for word in [
            WidthWord::open(0, 0),
            WidthWord::open(u32::MAX, u16::MAX),
            WidthWord {
                epoch: 7,
                drainer: Some(0),
                serial: 1,
            },
            WidthWord {
                epoch: 3,
                drainer: Some(crate::limits::MAX_HOSTS_LIMIT - 1),
                serial: u16::MAX,
            },
        ] {
            assert_eq!(WidthWord::decode(word.encode()), word);
        }
        assert_eq!(
            WidthWord::decode(0),
            WidthWord::open(0, 0),
            "a new pod is open"
        );
        assert!(WidthWord::open(4, 9).is_open_at(4));
        let draining = WidthWord {
            epoch: 4,
            drainer: Some(1),
            serial: 9,
        };
        assert!(!draining.is_open_at(4));
    }

    /// The word's history, in order: open, a freeze, the freeze given up, the next freeze,
    /// the next epoch; two takeovers of one freeze (other drainers, its next serial) are
    /// neither after the other, and serials compare across their wrap.
    #[test]
    fn a_word_is_after_the_words_before_it() {
        let freeze = |epoch, drainer, serial| WidthWord {
            epoch,
            drainer: Some(drainer),
            serial,
        };
        let history = [
            WidthWord::open(4, 8),
            freeze(4, 1, 9),
            WidthWord::open(4, 9),
            freeze(4, 0, 10),
            WidthWord::open(5, 10),
            freeze(5, 2, 11),
        ];
        for (i, earlier) in history.iter().enumerate() {
            assert!(!earlier.after(*earlier));
            for later in &history[i + 1..] {
                assert!(later.after(*earlier), "{later:?} after {earlier:?}");
                assert!(!earlier.after(*later), "{earlier:?} not after {later:?}");
            }
        }
        assert!(!freeze(4, 2, 9).after(freeze(4, 1, 9)));
        assert!(!freeze(4, 1, 9).after(freeze(4, 2, 9)));
        assert!(freeze(4, 1, 0).after(WidthWord::open(4, u16::MAX)));
        assert!(!WidthWord::open(4, u16::MAX).after(freeze(4, 1, 0)));
    }

    /// The policy's switch on the pump gives a held record a quarter lease, not the wait
    /// limit: the pump only beats while it drains.
    #[test]
    fn a_switch_on_the_pump_gives_up_within_a_quarter_lease() {
        use crate::{Backing, HostOptions, Join, Pod, PodConfig};
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(256)
            .lease_ms(400)
            .record_width_switch(true);
        let pod = std::sync::Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let options = HostOptions::new().wait_limit(std::time::Duration::from_secs(10));
        let host = Host::join(&pod, Join::AnyFree, options).unwrap();
        host.create(b"k", &[1; 256]).unwrap();
        host.write(b"k", &[2; 256]).unwrap();
        let ticket = host.write_start(b"k").unwrap();
        let started = std::time::Instant::now();
        let switched = host.shared.switch_width(8, true);
        let took = started.elapsed();
        assert!(
            matches!(switched, Err(Error::RecordWidthSwitching { .. })),
            "{switched:?}"
        );
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
        host.write_end(ticket).unwrap();
        assert!(host.switch_record_width(8).unwrap());
    }
}
