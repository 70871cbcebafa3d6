//! The record width at run time ([`PodConfig::record_width_switch`]): the width word,
//! the hosts' gates, and the switch.
//!
//! A record word's bits mean different things at each width, and no host can rewrite
//! every word at once, so a switch freezes the record array, lets it drain, and moves
//! every host to the new width at one log position:
//!
//! 1. **Freeze.** The switching host (the drainer) CASes the width word in the SCR from
//!    open at epoch `e` to draining (naming itself).
//! 2. **The gates.** Every change of a record word that takes a record (a write's or a
//!    delete's lock, a deallocation's lock, a claim, the free of a claim whose alloc
//!    lost) is made inside its host's gate: raise the gate word, load the width word,
//!    and go on only if it is open at the epoch of the lookup that named the record;
//!    lower the gate after the change. The drainer, after its CAS, waits until it has
//!    seen every host's gate at zero. Both sides are SeqCst: a changer that raised its
//!    gate before the drainer's load is waited for, one that raised it after sees the
//!    freeze and backs off (the store-then-load handshake recovery's announces use).
//!    Changes by a lock's holder (unlock, the free after its event) need no gate: no
//!    switch goes on while a record is locked.
//! 3. **Drain.** The drainer waits until no record is locked: every lock taken before
//!    the freeze is its holder's to release.
//! 4. **Switch.** It appends `WidthEnd { epoch: e + 1, bits }`: every replica, at that
//!    position, takes every object's record and reads the array at the new width (all
//!    free). Then it stores zero over every record byte (zero is a free record at every
//!    width) and the count of records in use, and reopens the word at `e + 1`. A reader
//!    of the old width that finds a zeroed word retries and applies the event first; an
//!    alloc claimed at `e` and logged after the event loses (it names its epoch).
//!
//! A drainer that cannot finish a step within its wait limit (a gate that stays raised,
//! a record that stays locked, an append refused) reopens the word at `e`: nothing was
//! changed yet. Pods whose record width is fixed (the default) skip the gates.

use super::{Host, Settle, Shared};

use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::host_table;
use crate::ids::HostId;
use crate::limits::MAX_RECORDS;
use crate::mutants::{self, Step};
use crate::record::{RecordShape, Records};
use crate::replica::Outcome;
use crate::sync::{AtomicU64, Ordering};

/// The width word's bit set while a switch drains the records.
const DRAINING: u64 = 1 << 32;
/// Where the draining host's id + 1 sits in the width word.
const DRAINER_SHIFT: u32 = 40;

/// The width word, decoded: the epoch (switches begun and ended), and the host draining
/// the records for the next one, if a switch is under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WidthWord {
    epoch: u32,
    drainer: Option<HostId>,
}

impl WidthWord {
    fn decode(word: u64) -> Self {
        Self {
            epoch: word as u32,
            // (A draining word always names its drainer, + 1.)
            drainer: (word & DRAINING != 0)
                .then(|| (((word >> DRAINER_SHIFT) & 0xffff) as HostId).saturating_sub(1)),
        }
    }

    fn encode(self) -> u64 {
        u64::from(self.epoch)
            | self
                .drainer
                .map_or(0, |host| DRAINING | (u64::from(host) + 1) << DRAINER_SHIFT)
    }

    fn open(epoch: u32) -> Self {
        Self {
            epoch,
            drainer: None,
        }
    }
}

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
    Draining(Option<HostId>),
}

/// A raised gate: lowered when dropped, after the caller's change of a record word.
pub(super) struct Passed<'a> {
    gate: &'a AtomicU64,
}

impl Drop for Passed<'_> {
    fn drop(&mut self) {
        // Release: a drainer that reads the gate lowered reads the change made inside it.
        self.gate.fetch_sub(1, Ordering::Release);
    }
}

impl Shared {
    fn width_word(&self) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().width_offset())
    }

    fn gate_word(&self, host: HostId) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().gate_offset(host))
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
        let gate = self.gate_word(self.id);
        c.add(Counter::ScrAtomics, 3);
        gate.fetch_add(1, Ordering::SeqCst);
        // loom takes SeqCst accesses for AcqRel ones (its README) and finds the
        // store-buffering outcome the C++ model's order of SeqCst accesses excludes (the
        // raise and the drainer's freeze each missed by the other's load); it models a
        // SeqCst fence, which gives that order. Not in other builds (the announce's too).
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        self.chaos.point(Point::GateAfterRaise);
        let word = WidthWord::decode(self.width_word().load(Ordering::SeqCst));
        if word == WidthWord::open(shape.epoch) {
            return Gate::Open(Some(Passed { gate }));
        }
        gate.fetch_sub(1, Ordering::Release);
        if word.epoch > shape.epoch {
            Gate::Behind
        } else {
            Gate::Draining(word.drainer)
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
            Gate::Draining(drainer) => {
                if let Some(drainer) = drainer.filter(|&host| self.drainer_gone(host)) {
                    self.take_over_switch(shape, drainer)?;
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

    /// Ends the switch from `epoch` that `drainer`, gone, left draining: with the records
    /// zeroed and the word open at the next epoch if its `WidthEnd` is in the log, else
    /// open again at `epoch`. One host does it (the CAS that names it the drainer); the
    /// others find the word moved on.
    fn take_over_switch(&self, shape: RecordShape, drainer: HostId) -> Result<()> {
        let epoch = shape.epoch;
        let left = WidthWord {
            epoch,
            drainer: Some(drainer),
        };
        let mine = WidthWord {
            epoch,
            drainer: Some(self.id),
        };
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
        if let Err(error) = self.catch_up() {
            // Left for another try (ours or another host's).
            let _ = self.width_word().compare_exchange(
                mine.encode(),
                left.encode(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            return Err(error);
        }
        if self.replica.shape().epoch > epoch {
            self.finish_switch(shape, epoch + 1);
        } else {
            self.abandon_switch(epoch);
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

    /// Steps 2 and 3 of a switch from `shape`, the width word draining: `Ok(())` once no
    /// gate is raised and no record locked, `Err` (nothing changed) if a step ran out of
    /// wait.
    fn drain(&self, shape: RecordShape, on_pump: bool) -> Result<()> {
        // The freeze's CAS, then the gates' loads: see `enter_gate` for loom's fence.
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
        let mut backoff = Backoff::new(self.options.wait_limit);
        let waited = |backoff: &Backoff| Error::RecordWidthSwitching {
            waited_ms: backoff.waited_ms(),
        };
        for host in 0..self.pod.layout().config.max_hosts {
            // A host whose process is gone changes no record word any more (the gate it
            // left raised, if it died inside it, is its next life's to lower).
            let gate = self.gate_word(host);
            let lowered = || {
                gate.load(Ordering::SeqCst) == 0
                    || host_table::alive(&self.pod, host) == Some(false)
            };
            if !self.drain_until(&mut backoff, on_pump, lowered) {
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
        Ok(())
    }

    /// Step 4's end, once `WidthEnd` beginning `epoch` (from the width `old`) is applied
    /// here: every record and the count in use to zero, then the word open at `epoch`.
    pub(super) fn finish_switch(&self, old: RecordShape, epoch: u32) {
        // Word by word at the old width: the words its last lockers used.
        Records::of(&self.pod, old).zero_all();
        self.records_in_use().store(0, Ordering::Relaxed);
        self.chaos.point(Point::WidthBeforeReopen);
        // SeqCst (a Release at least): a changer that finds the word open at the new
        // epoch finds every record byte zero.
        self.width_word()
            .store(WidthWord::open(epoch).encode(), Ordering::SeqCst);
    }

    /// The width word open again at `epoch`, from a switch of this host's that drained
    /// and changed nothing.
    pub(super) fn abandon_switch(&self, epoch: u32) {
        let draining = WidthWord {
            epoch,
            drainer: Some(self.id),
        };
        let _ = self.width_word().compare_exchange(
            draining.encode(),
            WidthWord::open(epoch).encode(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

impl Shared {
    /// [`Host::switch_record_width`], on the pump's thread if `on_pump` (a drain there
    /// beats the lease).
    pub(super) fn switch_width(&self, bits: u32, on_pump: bool) -> Result<bool> {
        let shared = self;
        if !shared.width_switches() {
            return Err(Error::NotWithWidthSwitch {
                parameter: "a fixed record width (record_width_switch off)",
            });
        }
        if !RecordShape::valid_bits(bits) {
            return Err(Error::UnsupportedRecordWidth { bits });
        }
        let records_bytes = shared.pod.layout().records_bytes();
        let count = records_bytes * 8 / u64::from(bits);
        if count > MAX_RECORDS {
            return Err(Error::AboveLimit {
                parameter: "records at the new width",
                value: count,
                limit: MAX_RECORDS,
            });
        }
        shared.catch_up()?;
        let shape = shared.replica.shape();
        if shape.bits == bits {
            return Ok(false);
        }
        // 1. Freeze, from the epoch this replica is at: a word at another epoch, or
        //    draining, is another switch's.
        let open = WidthWord::open(shape.epoch);
        let draining = WidthWord {
            epoch: shape.epoch,
            drainer: Some(shared.id),
        };
        if shared
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
        // A panic from here to the append (a bug: nothing here panics by design) opens
        // the word again rather than leave every host's writes waiting on it.
        let mut unwinding = AbandonOnUnwind {
            shared,
            epoch: Some(shape.epoch),
        };
        shared.chaos.point(Point::WidthAfterFreeze);
        if let Err(error) = shared.drain(shape, on_pump) {
            shared.abandon_switch(shape.epoch);
            unwinding.epoch = None;
            return Err(error);
        }
        shared.chaos.point(Point::WidthBeforeEvent);
        unwinding.epoch = None;
        let epoch = shape.epoch + 1;
        let event = Event::WidthEnd { epoch, bits };
        // From the append on, the settle decides: the switch ends if the event is applied,
        // the word opens again at `shape`'s epoch if it never reaches the log.
        match shared.submit_settled(&event, Settle::Width { from: shape })? {
            Outcome::WidthSwitched { .. } => {
                shared.finish_switch(shape, epoch);
                Ok(true)
            }
            outcome => unreachable!("only the drainer appends its epoch's switch: {outcome:?}"),
        }
    }
}

/// What the pump's width policy saw at its last look: when, this host's counts of
/// writes, churn and wraps then, and the width's epoch.
#[derive(Debug, Default)]
pub(super) struct Looks {
    at: Option<std::time::Instant>,
    writes: u64,
    churn: u64,
    wraps: u64,
    epoch: u32,
}

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
        let (writes, churn, wraps) = (
            counts.writes - looks.writes,
            counts.churn - looks.churn,
            counts.wraps - looks.wraps,
        );
        let judged = looks.at.is_some() && looks.epoch == shape.epoch;
        if judged && writes < policy.min_writes {
            // Too few writes to tell: keep counting from the same look.
            return Ok(());
        }
        *looks = Looks {
            at: Some(now),
            writes: counts.writes,
            churn: counts.churn,
            wraps: counts.wraps,
            epoch: shape.epoch,
        };
        drop(looks);
        if !judged {
            return Ok(());
        }
        let (churn, wraps) = (churn as f64 / writes as f64, wraps as f64 / writes as f64);
        let wider_holds = || {
            let wider = RecordShape {
                epoch: shape.epoch,
                bits: shape.bits * 2,
            };
            let records = wider.count_in(self.pod.layout().records_bytes());
            self.records_in_use().load(Ordering::Relaxed) * 2 <= records
        };
        let bits = if churn > policy.narrow_above_churn && shape.bits > policy.narrowest_bits {
            shape.bits / 2
        } else if wraps > policy.widen_above_wraps
            && churn < policy.narrow_above_churn / 4.0
            && shape.bits < policy.widest_bits
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

/// Opens the width word again at `epoch` if dropped while it is `Some`: a drainer's
/// thread that unwinds before its append.
struct AbandonOnUnwind<'a> {
    shared: &'a Shared,
    epoch: Option<u32>,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(epoch) = self.epoch {
            self.shared.abandon_switch(epoch);
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
            WidthWord::open(0),
            WidthWord::open(u32::MAX),
            WidthWord {
                epoch: 7,
                drainer: Some(0),
            },
            WidthWord {
                epoch: 3,
                drainer: Some(crate::limits::MAX_HOSTS_LIMIT - 1),
            },
        ] {
            assert_eq!(WidthWord::decode(word.encode()), word);
        }
        assert_eq!(
            WidthWord::decode(0),
            WidthWord::open(0),
            "a new pod is open"
        );
    }
}
