//! Protocol mutants: a test-only switch per protocol step.
//!
//! Each step of the log and object protocols that exists for correctness is guarded by
//! `if !mutants::skipped(Step::X) { ... }`. In normal builds `skipped` is a `const fn`
//! returning `false`, so the guard compiles to nothing. With the `mutants` feature, the
//! step named by the environment variable `MEGALON_MUTANT` is skipped: `cargo xtask
//! mutants` runs the tests once per step and checks that some test fails each time.
//! A step that no test notices is a step without a test.

/// A protocol step that can be switched off in mutant builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// The log writer stores every line of an entry straight to memory (non-temporally,
    /// and fences) before it publishes the entry. Skipped, it stores them into its cache.
    LogWriteBackBeforePublish,
    /// The log reader invalidates every line of an entry before reading it.
    LogInvalidateBeforeRead,
    /// Replay drops the cached lines of every object an event from another host touches.
    ReplayDropsLines,
    /// `read_start` first makes the replica cover `ctail` (the tail check).
    ReadTailCheck,
    /// `read_start` invalidates the object's lines when the host counter is unknown or differs
    /// from the record's counter (the pre-read check).
    PreReadCheck,
    /// `read_end` retries when the record's counter changed or the record was freed.
    PostReadRecordCheck,
    /// `read_end` catches up with the log and retries when an event about the object was
    /// applied during the read.
    PostReadEventCheck,
    /// `write_start`, holding the lock, catches up and backs out if an event about the object
    /// was applied since its lookup.
    WriteEventCheckAfterLock,
    /// `write_start` invalidates the object's lines when the host counter is unknown or
    /// differs from the record's counter, so that a read under the lock (`update`, a
    /// ticket's `read`, the undo image's copy) copies the current version. Skipped, an
    /// `update` on a host caching an old version writes that version back, changed.
    WriterInvalidatesStaleLines,
    /// A write's bytes reach memory before it releases the record: stored non-temporally
    /// (never left in the writer's cache), and what a raw write left there written back
    /// by `write_end`. Skipped, they stay in the writer's cache.
    WriteBackBeforeUnlock,
    /// `write_end` appends a wrap event when the counter wraps around.
    WrapEvent,
    /// Deallocation takes the record's lock before appending the dealloc event.
    LockBeforeDealloc,
    /// Delete takes the record's lock (if the object has one) before appending the delete.
    LockBeforeDelete,
    /// A host whose alloc lost the race in the log frees its record and uses the winner's.
    AllocLoserUsesWinnersRecord,
    /// Replay of a write's `RecordAlloc` drops every host's local copy of the object
    /// (local copies).
    WriteInvalidatesCopies,
    /// A host moving an object back from its DRAM stores the bytes straight to memory
    /// (non-temporally) before it appends `MoveToCxl` (local partitions). Skipped, it
    /// stores them into its cache.
    MoveBackWritesBack,
    /// Replay of a move to or from a host's DRAM drops other hosts' cached lines of the
    /// slot (local partitions).
    MoveDropsLines,
    /// `read_end` reloads the record's counter before its tail check (step 4 before step
    /// 5). Skipped, the checks run in the old order, log first: a full counter cycle of a
    /// narrow record between the two checks goes unseen.
    ReadEndCounterBeforeLog,
    /// Every way out of a path that holds a record's lock (an error from the log, a tail
    /// check that fails, a refusing hook) restores the record or settles it. Skipped, the
    /// error returns with the record still locked.
    LockedRecordRestoredOnError,
    /// Freeing a record claimed for an alloc that lost is a CAS from the claimed word.
    /// Skipped, it is a plain store, which can unlock or free a record that a host acting
    /// on a stale index entry locked meanwhile.
    RecordFreeByCas,
    /// In a pod whose record width may switch, a change of a record word that takes a
    /// record passes its host's gate (raised, then the width word looked at). Skipped, it
    /// changes the word whatever the width word says, and a switch drains past it.
    WidthGate,
    /// A host acknowledging a freeze stores the draining word into its DRAM copy of the
    /// width word before it looks at its gate. Skipped, the copy stays open, and a changer
    /// that raises the gate after the acknowledgement passes it on the copy alone.
    WidthCopyAtAck,
    /// A host's DRAM copy of the width word only moves forward: a word put into it
    /// replaces only an earlier one. Skipped, every acknowledgement and look stores what
    /// it loaded, and a late acknowledgement of a freeze given up, then a look from before
    /// the next freeze, open the copy under that next freeze once it is acknowledged.
    WidthCopyForward,
    /// In a pod with undo images whose record width may switch, a switch's drain waits
    /// until no announce is left (a dead host's too, until its recovery settles it), and
    /// the free of a claim whose alloc lost, pinned by its announce, passes no gate.
    /// Skipped, a switch drains past a dead host's announced lock, and its recovery reads
    /// the announce at the new width.
    WidthDrainWaitsForAnnounces,
    /// A host that takes over a switch whose drainer is gone names itself the drainer at
    /// the freeze's next serial. Skipped, the serial stays, and a new life of the
    /// drainer's id takes the switch over (at its join) with the word it found: a host
    /// that found the row free before that join takes it over too, and ends it a second
    /// time over records locked at the new width.
    WidthTakeoverSerial,
    /// Replay of a `RecordAlloc` claimed before a width switch that came first in the log
    /// loses. Skipped, the object gets a record id of the old width in the new array.
    StaleAllocLoses,
    /// A create stores the object's bytes straight to memory (non-temporally) before it
    /// appends its event. Skipped, it stores them into its cache.
    CreateWritesBack,
    /// Replay of a dealloc drops the object's cached lines on the host that logged it too
    /// (once read-shared, reads make no check, and that host may cache old lines).
    DeallocDropsAuthorsLines,
    /// Slots that replay gives this host (a deleted object's, above all) join its pool
    /// only once `ctail` covers their events: until then another host's reader of the
    /// deleted object may be copying the slot, and its tail check must find the delete
    /// before the slot is written again.
    SlotsReusedAfterCtail,
    /// Replay makes the replica's version odd while it changes the index, and even again
    /// after, so that a reader without the lock learns that its lookup overlapped it.
    /// Skipped, the version never moves and such a reader trusts a lookup made while the
    /// index changed (a stale or torn entry).
    ReplicaVersionKept,
    /// A record narrower than a byte (2 or 4 bits) changes by a CAS of its byte from the
    /// byte last seen, which keeps the other records' bits as they are. Skipped, a load
    /// and a plain store of the byte: a change another host made to a neighbour between
    /// the two is lost (a lock undone, a claim freed).
    RecordByteCasKeepsNeighbours,
    /// A host about to lock a record, having announced it, defers to a recoverer that
    /// is about to restore a dead host's lock of the record. Skipped, it locks anyway,
    /// and the recoverer, which cannot tell one lock word from another, may take that
    /// live lock for the dead host's.
    LockerDefersToRecovery,
    /// A move to a host's DRAM announces the record lock it takes, as every other lock
    /// does (pods with undo images). Skipped, a recoverer that finds a dead host's stale
    /// announce of the same word takes the move's lock for the dead host's.
    MoveAnnouncesItsLock,
    /// A writer lets go of its undo image (clears "undo ready" in its announce) before it
    /// unlocks. Skipped, an announce left by a writer that dies between its unlock and
    /// clearing the announce still says "undo ready", and a recoverer that finds the
    /// record locked again (by a dead host, with the same word) puts that old image back
    /// over writes made since.
    WriteEndLetsGoOfTheImage,
    /// A recoverer that finds a dead host's announce of a locked record without an undo
    /// image looks for another announce of the same word with one (the holder, in the
    /// middle of a write): the dead host's own other announces, then the other dead
    /// hosts'. Skipped, it settles the lock as a write that changed nothing, and the
    /// holder's half-written bytes stay.
    RecoveryFindsTheWriterAmongTheDead,
    /// A move back keeps the slot's bytes in an undo image, announced, before it writes
    /// the object into the slot in place (pods with undo images). Skipped, a host that
    /// dies in the middle of that copy leaves the object torn when its death hands it
    /// back to CXL.
    MoveBackKeepsTheSlotImage,
    /// Recovery appends its `Recovered` event before it unlocks the record with the
    /// counter moved on by 2. Skipped (the event after the unlock), a host that last read
    /// the object at the counter the move comes back to (a wrap) reads its cached lines
    /// of the old version as valid until the event lands, and for good if the append
    /// fails.
    RecoveryLogsBeforeUnlock,
    /// A recoverer condemns the dead host's life (in its host-table row) before it fills
    /// the host's reservation or settles its locks. Skipped, the row says nothing until it
    /// is freed at the end: a host only paused past its lease that resumes during its
    /// recovery writes its entry over the `Skip` that filled its reservation.
    RecoveryCondemnsFirst,
    /// A host that knows it was declared dead (pods with undo images) changes no record
    /// word and no announce: recovery settles what it held. Skipped, its settles and
    /// restores take by CAS a live host's lock of the same word (every lock of a 2-bit
    /// record), and a read accepts that host's half-written value.
    DeadHostLeavesRecordsToRecovery,
    /// Replay of a `HostDead` drops every host's cached lines of the objects it hands back
    /// to CXL from the dead host's DRAM (local partitions). Skipped, a host that cached a
    /// line of such a read-shared object while it was away reads that old line beside
    /// the bytes the dead host's cut-short move back wrote: a torn read.
    HostDeadDropsLines,
    /// A host moving the log's head does so only if the claims word is what it was
    /// before its look at the rows, and by a CAS from the `head` word it loaded before
    /// the look, so that a claim counted since (a host that joined, perhaps in a row the
    /// look passed as free) makes it look again. Skipped, it moves the head from a word
    /// loaded after the look, as a `fetch_max` of what it found would, and does not look
    /// at the claims word: past the joiner.
    HeadMovesFromTheWordBeforeTheLook,
    /// A host's replay moves its `ltail` on by a CAS from the word its life stored last.
    /// Skipped, a plain store: a host declared dead (paused past its lease) whose pump
    /// replays on moves the `ltail` its recoverer released, or its id's next life's, and
    /// the head passes that life.
    OwnLtailMovedByCas,
    /// An object moved to a host's DRAM arrives as *arriving* (reads only) until its
    /// mover knows whether the move won (local partitions). Skipped, it arrives held: a
    /// write of another thread lands in it once a replay applies the move, and is lost
    /// when the mover, told nothing of its append, orphans the object.
    MovedObjectArrivesBeforeHeld,
    /// A deallocation, holding the record's lock, checks that the object still has the
    /// record before the release hook hears of it. Skipped, a deallocation acting on a
    /// stale lookup tells the hook that the object loses another object's record.
    DeallocChecksItsRecordAfterLock,
    /// `write_end` fences its write-back of the object's lines before it unlocks the
    /// record. Skipped, the write-back may still be in flight when the unlock publishes
    /// the new counter, and a reader on another host copies the old bytes as the new
    /// version.
    WriteBackFencedBeforeUnlock,
    /// An invalidation of an object's lines (a reader's pre-read check, a writer's before
    /// a partial write) is fenced before the loads and stores that follow. Skipped, the
    /// flush may not have completed when the copy reads the lines, and a stale line is
    /// served under the new counter.
    InvalidationFenced,
    /// A reservation fill runs only while its host holds the recovery word, and the word
    /// is let go only once no thread of the host fills. Skipped, a nested fill (another
    /// thread's, under the outer recovery's word) paused past the outer recovery writes
    /// its `Skip` beside the word's next holder, over the next lap's entry.
    FillOnlyUnderTheRecoveryWord,
    /// A live claim under a dead host's lock, its claimed word put back, stays the dead
    /// host's to settle (its announce rewritten to the claim) until no live host
    /// announces the record. Skipped, a claimer paused before its CAS from free fails it
    /// and lets go, and the record stays in use with no object for good.
    RestoredClaimSettledLater,
    /// A recoverer checks that it still recovers (not declared dead, the word and the
    /// record under recovery its own) before every store to a dead host's announce: the
    /// clear of one whose lock was never taken or was released, the rewrite to a claim,
    /// the clear of a restored writer's. Skipped, one paused past its lease and taken
    /// over clears the announce of the dead id's next life, whose lock a later recovery
    /// then takes for a dead host's.
    RecovererChecksBeforeItClears,
    /// A recoverer checks that it still recovers right before each CAS that settles a
    /// dead host's lock or claim (`restore_write`, `settle_lock`), after the append of its
    /// `Recovered` event and the catch-up before it. Skipped, one paused past its lease in
    /// that append's replay and taken over unlocks, when it resumes, a live host's lock
    /// of the record taken since (at 2 bits every lock of a record is one word): a read
    /// accepts the live writer's half-written value.
    RecovererChecksBeforeItSettles,
    /// A recoverer checks that it still recovers a dead host after its look at each
    /// announce of a move back, before it puts the slot image back and clears the
    /// announce (`restore_slot_images`). Skipped, one paused past its lease there and
    /// taken over writes the old image over the object its successor handed back to CXL
    /// and live hosts wrote since: an acknowledged write lost, a stale value read.
    RecovererChecksBeforeItPutsBackASlot,
    /// A filler of a dead host's reservation checks, after its last pause and before it
    /// writes a `Skip`, that it still recovers the dead host and that the position is
    /// not published or recycled. Skipped, one paused past its lease and taken over
    /// writes its `Skip` over the next lap's entry at that slot of the ring: hosts that
    /// had not applied it stall there for good.
    FillerChecksAfterItsPause,
    /// A move back looks at its host's row again right before its copy into the slot,
    /// after its slot image is kept. Skipped, a host paused past its lease there and
    /// recovered (the image put back, the object handed back to CXL and written since)
    /// writes its DRAM bytes over the live hosts' acknowledged write.
    MoverChecksAfterItsPause,
    /// A writer looks again that it was not declared dead right before it keeps its undo
    /// image and announces it ready, after the event check's catch-up and the pause at
    /// `WriteAfterEventCheck`. Skipped, one paused there past its lease, recovered, and
    /// resumed once its id joined again writes its image and announce over the next
    /// life's: that life's lock is announced no more, and its recovery leaves it locked.
    WriterChecksBeforeItsImage,
    /// A recoverer of a dead host's RPC entries looks again that it still recovers it
    /// after settling its entries as a sender in every ring, before it answers the
    /// requests the dead server claimed in its own ring (`recover_rpcs`). Skipped, one
    /// paused there past its lease, taken over, and resumed once the id joined again
    /// answers the next life's live claim "gone": its sender asks again while the live
    /// server serves it.
    RecovererChecksBeforeTheServersRing,
    /// The log writer fences its entry's lines before it stores the entry's alive word.
    /// Skipped, the alive word may reach memory before a later line of the entry (stores
    /// to two lines are ordered by nothing else), and a reader that finds the entry
    /// published copies that line's old bytes.
    LogEntryFencedBeforeAlive,
    /// A claim of a free record for an allocation is a CAS from the free word it loaded.
    /// Skipped, it is a plain store: another host's claim of the same record since the
    /// load is overwritten, and two objects get one record.
    ClaimByCas,
    /// `write_start` locks the record by a CAS from the unlocked word it loaded. Skipped,
    /// it is a plain store: a writer that locked the record since the load is overwritten,
    /// and two writers hold one object.
    WriteLockByCas,
    /// A ring sender, holding an entry's sender word, looks that it was not taken for dead
    /// before it reserves the entry, and again after (the step skips both looks: either
    /// alone finds such a sender dead). Skipped, one paused past its lease before it took
    /// the word (its recovery found nothing of it in the ring) reserves and publishes under
    /// its dead life, and if it then stops for good nobody settles the entry: a lap later
    /// the ring is full for every sender.
    RingSenderChecksItLives,
    /// A ring sender looks that it was not taken for dead once more after its tail CAS
    /// (the word it holds names its life, not its thread). Skipped, one recovered between
    /// its first look and its reservation takes a sibling thread's momentary hold of the
    /// word for its own, publishes under its dead life with the entry named by nobody once
    /// the sibling lets go, and if it then stops for good the ring is full a lap later.
    RingSenderLooksAgainOnceReserved,
    /// A recoverer checks that it still recovers before it clears the record under
    /// recovery (a dead recoverer's, by CAS from the value it looked at) and before each
    /// store of its intent, which it makes by CAS from 0 (the word as it left it).
    /// Skipped, both are plain stores after no check: one paused past its lease and taken
    /// over clears its successor's intent, a live writer locks the record, the paused one
    /// sets the same intent again, and the successor settles the live lock as the dead
    /// host's (a read accepts the writer's half-written value).
    RecovererChecksBeforeItSetsTheIntent,
    /// In a record without a counter (2 bits), a read takes a locked word for a write in
    /// progress (`Records::writing`): `read_start` waits, `read_end` retries. Skipped, it
    /// takes the word for a version, as a wider record's even counter: a read that began
    /// after the writer's lock (and after its wrap event, already in the log its tail
    /// check covered) copies a half-written object and accepts it.
    CounterlessLockIsAWrite,
    /// A creator looks at its row (not declared dead) after it took a slot from its pool,
    /// before it writes the object's bytes into it. Skipped, a creator paused past its
    /// lease there, whose free slots its `HostDead` gave back to the pod, writes over an
    /// object another host created in the slot since.
    CreatorChecksBeforeItWritesTheSlot,
}

// Without the feature the steps are only the names of the guards in the code.
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
impl Step {
    /// Every step, in the order `cargo xtask mutants` runs them.
    pub const ALL: &'static [Step] = &[
        Step::LogWriteBackBeforePublish,
        Step::LogInvalidateBeforeRead,
        Step::ReplayDropsLines,
        Step::ReadTailCheck,
        Step::PreReadCheck,
        Step::PostReadRecordCheck,
        Step::PostReadEventCheck,
        Step::WriteEventCheckAfterLock,
        Step::WriterInvalidatesStaleLines,
        Step::WriteBackBeforeUnlock,
        Step::WrapEvent,
        Step::LockBeforeDealloc,
        Step::LockBeforeDelete,
        Step::AllocLoserUsesWinnersRecord,
        Step::WriteInvalidatesCopies,
        Step::MoveBackWritesBack,
        Step::MoveDropsLines,
        Step::ReadEndCounterBeforeLog,
        Step::LockedRecordRestoredOnError,
        Step::RecordFreeByCas,
        Step::WidthGate,
        Step::WidthCopyAtAck,
        Step::WidthCopyForward,
        Step::WidthDrainWaitsForAnnounces,
        Step::WidthTakeoverSerial,
        Step::StaleAllocLoses,
        Step::CreateWritesBack,
        Step::DeallocDropsAuthorsLines,
        Step::SlotsReusedAfterCtail,
        Step::ReplicaVersionKept,
        Step::RecordByteCasKeepsNeighbours,
        Step::LockerDefersToRecovery,
        Step::MoveAnnouncesItsLock,
        Step::WriteEndLetsGoOfTheImage,
        Step::RecoveryFindsTheWriterAmongTheDead,
        Step::MoveBackKeepsTheSlotImage,
        Step::RecoveryLogsBeforeUnlock,
        Step::RecoveryCondemnsFirst,
        Step::DeadHostLeavesRecordsToRecovery,
        Step::HostDeadDropsLines,
        Step::HeadMovesFromTheWordBeforeTheLook,
        Step::OwnLtailMovedByCas,
        Step::MovedObjectArrivesBeforeHeld,
        Step::DeallocChecksItsRecordAfterLock,
        Step::WriteBackFencedBeforeUnlock,
        Step::InvalidationFenced,
        Step::FillOnlyUnderTheRecoveryWord,
        Step::RestoredClaimSettledLater,
        Step::RecovererChecksBeforeItClears,
        Step::RecovererChecksBeforeItSettles,
        Step::RecovererChecksBeforeItPutsBackASlot,
        Step::FillerChecksAfterItsPause,
        Step::MoverChecksAfterItsPause,
        Step::RecovererChecksBeforeItSetsTheIntent,
        Step::WriterChecksBeforeItsImage,
        Step::RecovererChecksBeforeTheServersRing,
        Step::RingSenderChecksItLives,
        Step::RingSenderLooksAgainOnceReserved,
        Step::ClaimByCas,
        Step::WriteLockByCas,
        Step::LogEntryFencedBeforeAlive,
        Step::CounterlessLockIsAWrite,
        Step::CreatorChecksBeforeItWritesTheSlot,
    ];

    /// The name `MEGALON_MUTANT` takes.
    pub fn name(self) -> &'static str {
        match self {
            Step::LogWriteBackBeforePublish => "log-write-back-before-publish",
            Step::LogInvalidateBeforeRead => "log-invalidate-before-read",
            Step::ReplayDropsLines => "replay-drops-lines",
            Step::ReadTailCheck => "read-tail-check",
            Step::PreReadCheck => "pre-read-check",
            Step::PostReadRecordCheck => "post-read-record-check",
            Step::PostReadEventCheck => "post-read-event-check",
            Step::WriteEventCheckAfterLock => "write-event-check-after-lock",
            Step::WriterInvalidatesStaleLines => "writer-invalidates-stale-lines",
            Step::WriteBackBeforeUnlock => "write-back-before-unlock",
            Step::WrapEvent => "wrap-event",
            Step::LockBeforeDealloc => "lock-before-dealloc",
            Step::LockBeforeDelete => "lock-before-delete",
            Step::AllocLoserUsesWinnersRecord => "alloc-loser-uses-winners-record",
            Step::WriteInvalidatesCopies => "write-invalidates-copies",
            Step::MoveBackWritesBack => "move-back-writes-back",
            Step::MoveDropsLines => "move-drops-lines",
            Step::ReadEndCounterBeforeLog => "read-end-counter-before-log",
            Step::LockedRecordRestoredOnError => "locked-record-restored-on-error",
            Step::RecordFreeByCas => "record-free-by-cas",
            Step::WidthGate => "width-gate",
            Step::WidthCopyAtAck => "width-copy-at-ack",
            Step::WidthCopyForward => "width-copy-forward",
            Step::WidthDrainWaitsForAnnounces => "width-drain-waits-for-announces",
            Step::WidthTakeoverSerial => "width-takeover-serial",
            Step::StaleAllocLoses => "stale-alloc-loses",
            Step::CreateWritesBack => "create-writes-back",
            Step::DeallocDropsAuthorsLines => "dealloc-drops-authors-lines",
            Step::SlotsReusedAfterCtail => "slots-reused-after-ctail",
            Step::ReplicaVersionKept => "replica-version-kept",
            Step::RecordByteCasKeepsNeighbours => "record-byte-cas-keeps-neighbours",
            Step::LockerDefersToRecovery => "locker-defers-to-recovery",
            Step::MoveAnnouncesItsLock => "move-announces-its-lock",
            Step::WriteEndLetsGoOfTheImage => "write-end-lets-go-of-the-image",
            Step::RecoveryFindsTheWriterAmongTheDead => "recovery-finds-the-writer-among-the-dead",
            Step::MoveBackKeepsTheSlotImage => "move-back-keeps-the-slot-image",
            Step::RecoveryLogsBeforeUnlock => "recovery-logs-before-unlock",
            Step::RecoveryCondemnsFirst => "recovery-condemns-first",
            Step::DeadHostLeavesRecordsToRecovery => "dead-host-leaves-records-to-recovery",
            Step::HostDeadDropsLines => "host-dead-drops-lines",
            Step::HeadMovesFromTheWordBeforeTheLook => "head-moves-from-the-word-before-the-look",
            Step::OwnLtailMovedByCas => "own-ltail-moved-by-cas",
            Step::MovedObjectArrivesBeforeHeld => "moved-object-arrives-before-held",
            Step::DeallocChecksItsRecordAfterLock => "dealloc-checks-its-record-after-lock",
            Step::WriteBackFencedBeforeUnlock => "write-back-fenced-before-unlock",
            Step::InvalidationFenced => "invalidation-fenced",
            Step::FillOnlyUnderTheRecoveryWord => "fill-only-under-the-recovery-word",
            Step::RestoredClaimSettledLater => "restored-claim-settled-later",
            Step::RecovererChecksBeforeItClears => "recoverer-checks-before-it-clears",
            Step::RecovererChecksBeforeItSettles => "recoverer-checks-before-it-settles",
            Step::RecovererChecksBeforeItPutsBackASlot => {
                "recoverer-checks-before-it-puts-back-a-slot"
            }
            Step::FillerChecksAfterItsPause => "filler-checks-after-its-pause",
            Step::MoverChecksAfterItsPause => "mover-checks-after-its-pause",
            Step::WriterChecksBeforeItsImage => "writer-checks-before-its-image",
            Step::RecovererChecksBeforeTheServersRing => "recoverer-checks-before-the-servers-ring",
            Step::RingSenderChecksItLives => "ring-sender-checks-it-lives",
            Step::RingSenderLooksAgainOnceReserved => "ring-sender-looks-again-once-reserved",
            Step::ClaimByCas => "claim-by-cas",
            Step::WriteLockByCas => "write-lock-by-cas",
            Step::LogEntryFencedBeforeAlive => "log-entry-fenced-before-alive",
            Step::RecovererChecksBeforeItSetsTheIntent => {
                "recoverer-checks-before-it-sets-the-intent"
            }
            Step::CounterlessLockIsAWrite => "counterless-lock-is-a-write",
            Step::CreatorChecksBeforeItWritesTheSlot => "creator-checks-before-it-writes-the-slot",
        }
    }

    /// The step named `name`, if any.
    pub fn from_name(name: &str) -> Option<Step> {
        Self::ALL.iter().copied().find(|step| step.name() == name)
    }
}

/// Whether `step` is switched off in this run. Always `false` without the `mutants`
/// feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn skipped(_step: Step) -> bool {
    false
}

/// Stores `data` at `offset` straight to memory (non-temporally), as every write of the
/// protocol to LNR does; with `step` switched off, into this host's cache instead, never
/// written back: the one mutant of every such store.
#[inline]
pub(crate) fn store(memory: &crate::memory::Memory, step: Step, offset: u64, data: &[u8]) {
    if skipped(step) {
        memory.write(offset, data);
    } else {
        memory.write_non_temporal(offset, data);
    }
}

/// Whether `step` is switched off in this run: it is named by `MEGALON_MUTANT`.
#[cfg(feature = "mutants")]
pub fn skipped(step: Step) -> bool {
    use std::sync::OnceLock;
    static ACTIVE: OnceLock<Option<Step>> = OnceLock::new();
    *ACTIVE.get_or_init(|| {
        let name = std::env::var("MEGALON_MUTANT")
            .ok()
            .filter(|n| !n.is_empty())?;
        let step = Step::from_name(&name);
        assert!(
            step.is_some(),
            "MEGALON_MUTANT={name} names no protocol step"
        );
        step
    }) == Some(step)
}

#[cfg(all(test, feature = "mutants"))]
mod tests {
    use super::Step;

    /// `cargo xtask mutants` switches off the steps it names (with the tests that catch
    /// each) and passes their names here in its run with no step off: they must be
    /// exactly the core's steps, in order.
    #[test]
    fn xtask_names_every_step() {
        if let Ok(names) = std::env::var("MEGALON_MUTANT_STEPS") {
            let named: Vec<&str> = names.split(',').collect();
            let ours: Vec<&str> = Step::ALL.iter().map(|step| step.name()).collect();
            assert_eq!(named, ours, "xtask's CATCHERS and the core's steps differ");
        }
    }
}
