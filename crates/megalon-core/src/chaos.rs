//! Schedule chaos and injected faults: a way to stretch every window between two protocol
//! steps, and to make the log refuse appends, so that error paths and rare interleavings
//! run as often as the common ones.
//!
//! The protocol calls `Chaos::point` at each of its [`Point`]s (between the numbered
//! steps of DESIGN section 8, around the log's reserve, publication and replay, around
//! every record CAS) and asks `Chaos::fail` before each log append. Without the `chaos`
//! feature both are empty inline functions on a zero-sized type: normal builds compile
//! them to nothing.
//!
//! With the feature, two things can act at a point:
//!
//! - **Random preemption**, for a host joined with `HostOptions::chaos` set: at a seeded
//!   rate the thread yields, or sleeps a random short time, and log appends fail at a
//!   seeded rate, before anything is reserved ([`Fault::Refuse`], as a full log would) or
//!   after the entries are published but before the appender learns their outcome
//!   ([`Fault::Unconfirmed`], as a stalled replay would). `cargo xtask stress --chaos`
//!   runs the stress this way.
//! - **A test's hook**, on the calling thread only (`with_hook`): the test runs code
//!   (another host's operations, say) at exactly that point, and can make the next
//!   appends of its thread fail (`fail_next_appends`). Deterministic tests of a window
//!   use this.
//!

/// A place in the protocol where chaos may preempt the thread or a test's hook may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Point {
    /// `read_start`, after the tail check, before the lookup.
    ReadAfterTailCheck,
    /// A lookup without the replica's lock (`read_start`'s, `read_end`'s), before the
    /// replica's version says whether a replay overlapped it.
    LookBeforeValidation,
    /// `read_start`, after loading the record's counter, before handing out the ticket.
    ReadAfterCounter,
    /// Between the caller's copy and `read_end` (the safe read calls).
    ReadBeforeEnd,
    /// A read, write or delete whose look found the object's record locked, or freed
    /// ahead of its event here, before the wait's pause (once past the check whether the
    /// wait was already spent).
    RecordBeforeWait,
    /// `read_end`, between its two checks (the record's counter, then the log).
    ReadEndBetweenChecks,
    /// A delete, after its tail check, before its lookup.
    DeleteAfterTailCheck,
    /// `write_start`, between the lookup and the CAS that locks the record.
    WriteBeforeLock,
    /// `write_start`, holding the lock, before the event check.
    WriteAfterLock,
    /// `write_start`, holding the lock, after the event check (before a wrap event).
    WriteAfterEventCheck,
    /// `write_end`, after the write-back, before the unlock.
    WriteBeforeUnlock,
    /// A holder of a record lock about to unlock it, having looked that it was not
    /// declared dead, before its CAS.
    UnlockAfterCheck,
    /// `write_end`, after the unlock, before the lock's announce is cleared.
    WriteAfterUnlock,
    /// An allocation, its free record's word loaded and its claim announced, before the
    /// CAS that claims it.
    ClaimBeforeCas,
    /// An allocation, right after its CAS that claims a free record.
    ClaimAfterCas,
    /// An allocation, after claiming a free record, before appending its event.
    AllocAfterClaim,
    /// An allocation that lost in the log, before it frees its record.
    AllocLostBeforeFree,
    /// A change of a record word in a pod whose width may switch: the host's gate raised,
    /// before the width word is looked at.
    GateAfterRaise,
    /// A gate whose host's copy of the width word was not open at the lookup's epoch:
    /// after the load of the word in the SCR, before the copy is refreshed from it.
    GateAfterWordLoad,
    /// An acknowledgement of a freeze, before the freeze is put into the host's copy of
    /// the width word.
    AckBeforeCopy,
    /// An acknowledgement of a freeze, the freeze put into the host's copy of the width
    /// word, before the gate is looked at.
    AckAfterCopy,
    /// A switch of the record width: the width word draining, before the gates are read.
    WidthAfterFreeze,
    /// A switch: every gate seen lowered, before the records are looked at for locks.
    WidthAfterGates,
    /// A switch: no record locked, before its `WidthEnd` is appended.
    WidthBeforeEvent,
    /// A join (a pod with undo images), its row claimed, before it clears the row's
    /// announce words.
    JoinBeforeClearAnnounces,
    /// A switch: `WidthEnd` applied, the drainer's row looked at, before the records are
    /// zeroed.
    WidthBeforeZeroing,
    /// A switch: `WidthEnd` applied and the records zeroed, before the width word opens.
    WidthBeforeReopen,
    /// A host that found a switch's drainer gone, caught up, before its CAS that takes
    /// the switch over.
    WidthBeforeTakeover,
    /// A host that took over a switch whose drainer is gone, before it ends it.
    WidthAfterTakeover,
    /// A deallocation or delete, holding the record's lock, before its event.
    ReleaseAfterLock,
    /// A deallocation or delete whose event won, before it frees the record.
    ReleaseBeforeFree,
    /// A create, its slot taken from this host's pool, before it looks at its row and
    /// writes its bytes into the slot.
    CreateBeforeWrite,
    /// A create, after its bytes reached memory, before its event.
    CreateBeforeEvent,
    /// The log, before the CAS that reserves entries.
    ReserveBeforeCas,
    /// A server of a late join, past its looks at the mailbox (a request no one
    /// serves), before it takes the mailbox.
    ServeBeforeTake,
    /// A server of a late join, its snapshot encoded (holding its replay lock), before
    /// it pins the joiner's `ltail`.
    ServeBeforePin,
    /// A server of a late join, the joiner's `ltail` pinned and the head moved past the
    /// joiner's claim, before it stores the stream's `total` and `ready`.
    ServeAfterPin,
    /// A server of a late join, a chunk of its snapshot written and counted in `chunk`,
    /// before it waits for the joiner to take it.
    ServeAfterChunk,
    /// A late joiner that has received its whole snapshot and checked its pin, before it
    /// decodes the snapshot.
    JoinBeforeDecode,
    /// A late joiner between two chunks of its snapshot, the first acknowledged.
    JoinBetweenChunks,
    /// A host moving the log's head (a full ring), between its looks at two host-table
    /// rows.
    HeadLookBetweenRows,
    /// An append, after its entries are reserved, before they are written.
    AppendAfterReserve,
    /// An append, its row checked after the reservation and its creates' positions noted
    /// (`Host::create_noting_position`), before it writes its entries (which publishes
    /// them).
    AppendBeforeWrite,
    /// A log write (`Log::write`), its entry's alive word stored, before the fence that
    /// completes that store (another host may find the entry published meanwhile).
    LogAfterAlive,
    /// An append, after its entries are published, before the replay that confirms them.
    AppendAfterPublish,
    /// Replay, between two entries (holding the index's write lock).
    ReplayBetweenEntries,
    /// Replay, after applying a round of entries, before it advances `ctail`.
    ReplayBeforeCtail,
    /// A wait for entries not yet applied (a replay's for an entry not yet published, a
    /// `confirm`'s for a sibling's replay), having looked, before its pause.
    ReplayBeforeWait,
    /// A move back, its slot image kept, before it writes the object into the slot.
    MoveBackBeforeCopy,
    /// A move to this host's DRAM, its `MoveToHost` appended (or its append failed),
    /// before the object's state says whether the move won.
    MoveHereAfterAppend,
    /// A host asking another to move an object back, its request published in the owner's
    /// ring, while it waits for the answer (each time it serves its own ring).
    RpcAwaitingResponse,
    /// A server of this host's ring, the serving flag found on, before it looks at the
    /// ring.
    ServeAfterServingCheck,
    /// Recovery of a dead host's lock, with its intent stored and no live announce of
    /// the record found, before it looks at the record's word.
    RecoveryAfterScan,
    /// Recovery of a dead host's lock, the record restored and unlocked, before the
    /// dead host's announce of it is cleared.
    RecoveryAfterRestore,
    /// Recovery of a dead host's lock taken over a live claim, the record settled back to
    /// the claimed word, before the dead host's announce is rewritten to the claim.
    RecoveryAfterClaimSettled,
    /// Recovery of a dead host's lock, the record's word found other than announced
    /// (never taken, released, or a lock taken over a claim settled back to it) and the
    /// log caught up to see whether the record has an object, before the dead host's
    /// announce is cleared or rewritten to the claim.
    RecoveryBeforeAnnounceCleared,
    /// Recovery putting back a dead host's slot image (a move back it died in), the
    /// announce read, before it writes the image into the slot.
    RecoveryBeforeSlotImage,
    /// Recovery filling a dead host's reservation, a position found
    /// unpublished and claimed by no live host, before it writes the `Skip`.
    RecoveryBeforeFill,
    /// Recovery filling a dead host's reservation, after its check (once past
    /// `RecoveryBeforeFill`) that it still recovers, before it writes the `Skip`.
    RecoveryBeforeFillWrite,
    /// Recovery of a dead host's locks, after its last look that it still recovers
    /// (before the dead host's RPC rings), before it clears the record under recovery
    /// that a dead recoverer may have left.
    RecoveryBeforeIntentCleared,
    /// Recovery of a dead host's RPC entries (`recover_rpcs`), its entries as a sender
    /// settled in every host's ring, before its own ring's claimed requests are answered
    /// and abandoned ones freed (`RingGeometry::recover_server`).
    RecoveryInRpcs,
    /// Recovery of a dead host's locks, before it stores its intent (the record under
    /// recovery) for the next announce it looks at.
    RecoveryBeforeIntent,
    /// Recovery of a dead host's lock, its intent stored and a live host's announce of
    /// the record found (it waits for it), before it moves on to the next announce.
    RecoveryFoundLiveAnnounce,
    /// A join that found every host of the pod dead, before it takes the dead holder's
    /// row over (`Host::join`'s rescue).
    RescueBeforeTakeOver,
    /// A join that found every host of the pod dead, the dead holder's row taken over
    /// (its life condemned, the row claimed as the id's next life), before it holds the
    /// log's head and recovers that life (`Host::join`'s rescue).
    RescueAfterTakeOver,
    /// A holder's look that it still holds its record's lock (`still_held` of a write
    /// ticket or of an object being released), after it answered yes: what the caller
    /// does next on the lock's behalf outside the object (a page's `pwrite`, say) runs in
    /// the window this stretches.
    HeldAfterLook,
    /// [`Pod::create`] of a file backing, once the new pod file took its path (any
    /// process can open it from here), before the creator has it back.
    ///
    /// [`Pod::create`]: crate::Pod::create
    PodPublished,
    /// A beat of a host's heartbeat, its look that it was not condemned nor declared
    /// dead done, before it bumps the heartbeat word.
    BeatAfterCheck,
}

/// A failure chaos can inject into a log append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Refused before anything is reserved: nothing reaches the log (as [`LogFull`] or a
    /// reserve that timed out).
    ///
    /// [`LogFull`]: crate::Error::LogFull
    Refuse,
    /// The entries are published, but the appender's wait for their outcome fails (as
    /// [`ReplayStalled`] would): they take effect later, when replay reaches them.
    ///
    /// [`ReplayStalled`]: crate::Error::ReplayStalled
    Unconfirmed,
}

impl Fault {
    /// How the fault is named in errors.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Refuse => "append refused",
            Fault::Unconfirmed => "append unconfirmed",
        }
    }
}

#[cfg(not(feature = "chaos"))]
pub(crate) use imp::*;
#[cfg(feature = "chaos")]
pub use imp::*;

#[cfg(not(feature = "chaos"))]
mod imp {
    use super::{Fault, Point};

    /// A host's chaos: nothing, in a build without the `chaos` feature.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub(crate) struct Chaos;

    impl Chaos {
        /// No chaos (a caller that has no host's options).
        pub(crate) const fn none() -> Self {
            Chaos
        }

        #[inline(always)]
        pub(crate) fn point(&self, _point: Point) {}

        #[inline(always)]
        pub(crate) fn fail(&self, _fault: Fault) -> bool {
            false
        }
    }
}

#[cfg(feature = "chaos")]
mod imp {
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Fault, Point};

    /// Random chaos for a host: how often each thread is preempted at a point, for how
    /// long at most, and how often its log appends fail. Every rate is "one in N" (0:
    /// never).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ChaosConfig {
        /// Seeds every thread's generator (with the thread's own number).
        pub seed: u64,
        /// A point preempts the thread once in this many times.
        pub preempt_one_in: u32,
        /// A preemption sleeps up to this long (half of them only yield).
        pub max_pause_micros: u32,
        /// An append is refused before reserving once in this many times.
        pub refuse_append_one_in: u32,
        /// An append's confirmation fails once in this many times.
        pub unconfirm_append_one_in: u32,
    }

    impl ChaosConfig {
        /// Preemptions at one point in `preempt_one_in`, pauses up to 50 µs, and no faults.
        pub fn preemptions(seed: u64, preempt_one_in: u32) -> Self {
            Self {
                seed,
                preempt_one_in,
                max_pause_micros: 50,
                refuse_append_one_in: 0,
                unconfirm_append_one_in: 0,
            }
        }

        /// Adds faults: appends refused once in `refuse_one_in`, unconfirmed once in
        /// `unconfirm_one_in`.
        #[must_use]
        pub fn faults(mut self, refuse_one_in: u32, unconfirm_one_in: u32) -> Self {
            self.refuse_append_one_in = refuse_one_in;
            self.unconfirm_append_one_in = unconfirm_one_in;
            self
        }
    }

    /// What chaos did, summed over the hosts that share one [`ChaosConfig`]'s counts.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ChaosCounts {
        /// Points that preempted their thread.
        pub preemptions: u64,
        /// Appends refused.
        pub refused: u64,
        /// Appends left unconfirmed.
        pub unconfirmed: u64,
    }

    /// A host's chaos (a clone of its options' config plus shared counts).
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Chaos {
        config: Option<ChaosConfig>,
        counts: Arc<Counts>,
    }

    #[derive(Debug, Default)]
    struct Counts {
        preemptions: AtomicU64,
        refused: AtomicU64,
        unconfirmed: AtomicU64,
    }

    /// Numbers threads for their generators' seeds.
    static THREADS: AtomicU64 = AtomicU64::new(1);

    type Hook = Box<dyn FnMut(Point)>;
    type ProcessHook = Arc<dyn Fn(Point) + Send + Sync>;

    /// Whether a process hook is set (looked at first: the lock is taken only then).
    static PROCESS_HOOK_SET: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    static PROCESS_HOOK: std::sync::Mutex<Option<ProcessHook>> = std::sync::Mutex::new(None);

    thread_local! {
        static RANDOM: Cell<u64> = const { Cell::new(0) };
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
        static FORCED: RefCell<Vec<Fault>> = const { RefCell::new(Vec::new()) };
        static IN_PROCESS_HOOK: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs the process hook, if one is set (not again from inside it on this thread).
    fn run_process_hook(point: Point) {
        if !PROCESS_HOOK_SET.load(Ordering::Acquire) || IN_PROCESS_HOOK.with(Cell::get) {
            return;
        }
        let hook = PROCESS_HOOK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            IN_PROCESS_HOOK.with(|inside| inside.set(true));
            hook(point);
            IN_PROCESS_HOOK.with(|inside| inside.set(false));
        }
    }

    fn next_random(seed: u64) -> u64 {
        RANDOM.with(|state| {
            let mut x = state.get();
            if x == 0 {
                let thread = THREADS.fetch_add(1, Ordering::Relaxed);
                x = (seed ^ thread.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            state.set(x);
            x
        })
    }

    fn one_in(seed: u64, n: u32) -> bool {
        n > 0 && next_random(seed).is_multiple_of(u64::from(n))
    }

    impl Chaos {
        /// No random chaos (a caller that has no host's options); a test's hook still
        /// runs at its points.
        pub(crate) fn none() -> Self {
            Self::new(None)
        }

        pub(crate) fn new(config: Option<ChaosConfig>) -> Self {
            Self {
                config,
                counts: Arc::default(),
            }
        }

        /// Runs the calling thread's hook, if it has one (not again from inside it), then,
        /// if this host has chaos, preempts the thread at its rate.
        pub(crate) fn point(&self, point: Point) {
            run_process_hook(point);
            let hook = HOOK.with(|hook| hook.borrow_mut().take());
            if let Some(mut hook) = hook {
                hook(point);
                HOOK.with(|slot| {
                    let mut slot = slot.borrow_mut();
                    if slot.is_none() {
                        *slot = Some(hook);
                    }
                });
            }
            let Some(config) = &self.config else {
                return;
            };
            if !one_in(config.seed, config.preempt_one_in) {
                return;
            }
            self.counts.preemptions.fetch_add(1, Ordering::Relaxed);
            let draw = next_random(config.seed);
            if draw & 1 == 0 || config.max_pause_micros == 0 {
                std::thread::yield_now();
            } else {
                let micros = (draw >> 1) % u64::from(config.max_pause_micros) + 1;
                std::thread::sleep(Duration::from_micros(micros));
            }
        }

        /// Whether this append fails with `fault`: forced by the calling thread's test, or
        /// drawn at this host's rate.
        pub(crate) fn fail(&self, fault: Fault) -> bool {
            let forced = FORCED.with(|forced| {
                let mut forced = forced.borrow_mut();
                match forced.first() {
                    Some(&first) if first == fault => {
                        forced.remove(0);
                        true
                    }
                    _ => false,
                }
            });
            let drawn = !forced
                && self.config.as_ref().is_some_and(|config| {
                    let rate = match fault {
                        Fault::Refuse => config.refuse_append_one_in,
                        Fault::Unconfirmed => config.unconfirm_append_one_in,
                    };
                    one_in(config.seed, rate)
                });
            if forced || drawn {
                let count = match fault {
                    Fault::Refuse => &self.counts.refused,
                    Fault::Unconfirmed => &self.counts.unconfirmed,
                };
                count.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            false
        }

        /// What this host's chaos did.
        pub(crate) fn counts(&self) -> ChaosCounts {
            ChaosCounts {
                preemptions: self.counts.preemptions.load(Ordering::Relaxed),
                refused: self.counts.refused.load(Ordering::Relaxed),
                unconfirmed: self.counts.unconfirmed.load(Ordering::Relaxed),
            }
        }
    }

    /// Runs `body` with `hook` called at every [`Point`] the calling thread reaches (not
    /// from inside the hook itself, so the hook may call any host's API). Other threads
    /// are not affected.
    pub fn with_hook<R>(hook: impl FnMut(Point) + 'static, body: impl FnOnce() -> R) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                HOOK.with(|hook| *hook.borrow_mut() = None);
            }
        }
        HOOK.with(|slot| *slot.borrow_mut() = Some(Box::new(hook)));
        let _reset = Reset;
        body()
    }

    /// Runs `body` with `hook` called at every [`Point`] any thread of this process
    /// reaches (a host's pump included; not from inside the hook itself on the same
    /// thread), before that thread's own hook. One process hook at a time: for a test
    /// process that runs hosts whose background threads must stop at a point (a child
    /// process killing itself there, say).
    pub fn with_process_hook<R>(
        hook: impl Fn(Point) + Send + Sync + 'static,
        body: impl FnOnce() -> R,
    ) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                PROCESS_HOOK_SET.store(false, Ordering::Release);
                *PROCESS_HOOK
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            }
        }
        *PROCESS_HOOK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(hook));
        PROCESS_HOOK_SET.store(true, Ordering::Release);
        let _reset = Reset;
        body()
    }

    /// Makes the calling thread's next log appends fail, one `fault` each, in order.
    pub fn fail_next_appends(faults: &[Fault]) {
        FORCED.with(|forced| forced.borrow_mut().extend_from_slice(faults));
    }

    /// Forgets the calling thread's forced faults that did not happen yet.
    pub fn clear_forced_faults() {
        FORCED.with(|forced| forced.borrow_mut().clear());
    }
}
