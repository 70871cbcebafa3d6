//! A view into one host's state for tests, benches and figures: what a user of the
//! object API never needs, and what a checker needs to say that nothing was left behind.

use super::local::Local;
use super::Host;

use crate::counters::EventCounts;
use crate::error::{Error, Result};
use crate::event::{Event, OwnedEvent};
use crate::host_table;
use crate::ids::HostId;
use crate::log::Log;
use crate::replica::{IndexEntry, ReplicatedLock};
use crate::sync::Ordering;

/// What a host's log machinery has done. Each count is read on its own, not all at one
/// instant: while the host works one may be ahead of another (`entries_appended` of
/// `batches_appended` by a batch, say); on a quiet host they agree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Log entries this host appended.
    pub entries_appended: u64,
    /// Batches (one `tail` CAS each) this host appended.
    pub batches_appended: u64,
    /// Log entries this host's replica applied (its own and others').
    pub entries_replayed: u64,
    /// Slots whose cached lines replay dropped (events from other hosts).
    pub slots_dropped: u64,
    /// Dead hosts this host recovered (their rows freed).
    pub hosts_recovered: u64,
    /// Log positions of dead hosts this host filled with `Skip` entries.
    pub entries_skipped: u64,
    /// Record locks of dead hosts this host restored.
    pub locks_recovered: u64,
    /// Late joiners this host sent its index.
    pub joins_served: u64,
}

/// An event read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedEvent {
    /// Its log position.
    pub position: u64,
    /// The host that appended it.
    pub host: HostId,
    /// What it says.
    pub event: OwnedEvent,
}

/// A view into one host's state for tests, benches and figures: what a user of the
/// object API never needs, and what a checker needs to say that nothing was left behind.
pub struct Inspect<'h> {
    host: &'h Host,
}

/// The record array's words, read one by one (not a snapshot: words may change while it
/// is read; on a quiet pod it is exact).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordCensus {
    /// Records whose word says in use.
    pub in_use: Vec<u32>,
    /// Records whose word says locked.
    pub locked: Vec<u32>,
}

/// Errors the host's pump met in its background work (replay, grants, the reclaimer,
/// RPCs). None of them leaves a record locked; they are counted so that none goes unseen.
#[derive(Clone, Debug, Default)]
pub struct BackgroundErrors {
    /// How many.
    pub count: u64,
    /// The last one.
    pub last: Option<Error>,
    /// By kind (the variant's name, as [`Error::kind_name`] gives it): how many, and the
    /// first of that kind. A harness that expects some kinds (an injected fault the pump
    /// met) can tell them from the ones that must never happen (a corrupt log entry).
    pub by_kind: std::collections::BTreeMap<String, (u64, Error)>,
}

impl Host {
    /// A view into this host's state for tests, benches and figures.
    pub fn inspect(&self) -> Inspect<'_> {
        Inspect { host: self }
    }
}

impl Inspect<'_> {
    /// Bumps this host's heartbeat word as its pump does each round (not once a
    /// recoverer has condemned it); returns the count.
    pub fn heartbeat(&self) -> u64 {
        let shared = &self.host.shared;
        shared.beat();
        host_table::heartbeat_count(&shared.pod, shared.id)
    }

    /// The replicated lock and counter of object `key`, linearizably (as
    /// [`Host::lookup`]), in a pod with [`Coherence::AllLog`](crate::Coherence::AllLog); `None` if there is no such
    /// object or the pod's coherence is split (its objects' locks are records in the SCR).
    pub fn replicated_lock(&self, key: &[u8]) -> Result<Option<ReplicatedLock>> {
        self.host.shared.check_key(key)?;
        if !self.host.shared.all_log {
            return Ok(None);
        }
        self.host.shared.catch_up()?;
        let index = self.host.shared.replica.read();
        Ok(index.lookup_locked(key).map(|(_, lock)| lock))
    }

    /// Log positions below this are applied on this host's replica.
    pub fn applied_position(&self) -> u64 {
        self.host.shared.replica.applied.load(Ordering::Acquire)
    }

    /// Every object in this host's replica, sorted by key.
    pub fn replica_snapshot(&self) -> Vec<(Vec<u8>, IndexEntry)> {
        self.host.shared.replica.read().snapshot()
    }

    /// Outcomes of this host's own entries that replay applied and no appender has taken
    /// yet (each append takes its own once its replay is done).
    pub fn outcomes_held(&self) -> usize {
        self.host.shared.replica.outcomes.lock().len()
    }

    /// Objects in this host's replica.
    pub fn replica_len(&self) -> u64 {
        self.host.shared.replica.read().len()
    }

    /// Bytes of DRAM this host's index holds.
    pub fn replica_heap_bytes(&self) -> u64 {
        self.host.shared.replica.read().heap_bytes()
    }

    /// Free slots this host owns.
    pub fn free_slots(&self) -> u64 {
        self.host.shared.slots.lock().len()
    }

    /// The published entries at positions `from..to` (stopping at the first unpublished
    /// one). Positions below the log's head may have been recycled: asking for them is an
    /// error, and so is an entry the head passed while it was copied (the ring may have
    /// written a later lap over it meanwhile).
    pub fn read_log(&self, from: u64, to: u64) -> Result<Vec<LoggedEvent>> {
        let shared = &self.host.shared;
        let below_head = |position: u64| {
            let head = crate::memory::cxl::uncharged(|| Log::head(&shared.pod));
            (position < head).then_some(Error::LogRecycled { head })
        };
        if let Some(recycled) = below_head(from) {
            return Err(recycled);
        }
        let mut entry = vec![0u8; shared.log.entry_bytes()];
        let mut events = Vec::new();
        for position in from..to {
            if !shared.log.read(&shared.memory, position, &mut entry) {
                break;
            }
            // A seqlock's read side, as a replay's look at its `ltail` after a copy: the
            // copy is whole only if the head has not passed the entry since (pairs with
            // the Release fence in `Log::write`).
            crate::sync::fence(Ordering::Acquire);
            if let Some(recycled) = below_head(position) {
                return Err(recycled);
            }
            let (host, event) = Event::decode(position, &entry)?;
            events.push(LoggedEvent {
                position,
                host,
                event: OwnedEvent::new(&event),
            });
        }
        Ok(events)
    }

    /// The log's cursors now: `(head, ctail, tail)`.
    pub fn log_cursors(&self) -> (u64, u64, u64) {
        let pod = &self.host.shared.pod;
        (
            crate::memory::cxl::uncharged(|| Log::head(pod)),
            Log::ctail(pod).load(Ordering::Acquire),
            Log::tail(pod).load(Ordering::Acquire),
        )
    }

    /// What this host's log machinery has done.
    pub fn stats(&self) -> HostStats {
        let c = &self.host.shared.counters;
        HostStats {
            entries_appended: c.entries_appended.load(Ordering::Relaxed),
            batches_appended: c.batches_appended.load(Ordering::Relaxed),
            entries_replayed: c.entries_replayed.load(Ordering::Relaxed),
            slots_dropped: c.slots_dropped.load(Ordering::Relaxed),
            // Acquire, and before the counts after it: pairs with the Release of the
            // recovery that counted it, so a caller that waits for a recovery sees its
            // locks and skipped entries counted.
            hosts_recovered: c.hosts_recovered.load(Ordering::Acquire),
            entries_skipped: c.entries_skipped.load(Ordering::Relaxed),
            locks_recovered: c.locks_recovered.load(Ordering::Relaxed),
            joins_served: c.joins_served.load(Ordering::Relaxed),
        }
    }

    /// Records in use in the pod now, and records in all.
    pub fn records_in_use(&self) -> (u64, u64) {
        let records = self.host.shared.records();
        (
            self.host.shared.records_in_use().load(Ordering::Relaxed),
            records.count(),
        )
    }

    /// Event counts of the calling thread on this host.
    pub fn thread_events(&self) -> EventCounts {
        self.host.shared.with_counters(|c| c.snapshot())
    }

    /// Event counts of every thread that has worked on this host (its pump included).
    pub fn per_thread_events(&self) -> Vec<EventCounts> {
        self.host.shared.events.per_thread()
    }

    /// Objects in this host's DRAM partition, and copies of read-shared objects it
    /// holds, now.
    pub fn local_objects(&self) -> (usize, usize) {
        self.host.shared.local.as_ref().map_or((0, 0), Local::sizes)
    }

    /// Every record's word, read now.
    pub fn record_census(&self) -> RecordCensus {
        let records = self.host.shared.records();
        let mut census = RecordCensus::default();
        for record in 0..records.count() as u32 {
            let word = records.load(record);
            if word.in_use {
                census.in_use.push(record);
            }
            if word.locked {
                census.locked.push(record);
            }
        }
        census
    }

    /// Replays, does the work settles left for the pump, and returns how much is still
    /// waiting (settles of entries not applied yet, deferred work): 0 on a quiet host.
    pub fn settle_pending(&self) -> Result<usize> {
        let shared = &self.host.shared;
        shared.replay(None)?;
        shared.run_deferred();
        Ok(shared.pending_work())
    }

    /// Reserves `count` log positions the way an append does (announced in this host's
    /// row) and publishes nothing: with [`crash`], how a test leaves positions that a dead
    /// host reserved. Returns the first.
    pub fn reserve_unpublished(&self, count: u64) -> Result<u64> {
        let shared = &self.host.shared;
        let pod = &shared.pod;
        let (id, life) = (shared.id, shared.life);
        let (first, _) = shared.log.reserve(
            pod,
            count..=count,
            shared.options.wait_limit,
            &shared.chaos,
            |from, end| {
                if host_table::announce_reservation(pod, id, life, from, end) {
                    Ok(())
                } else {
                    Err(Error::HostDeclaredDead { host: id, life })
                }
            },
            || Ok(()),
        )?;
        Ok(first)
    }

    /// Makes this host die where it stands, without giving it up: [`crash`] for a host
    /// some thread still uses (one stopped inside a call, say). Its pump stops and its
    /// row says it runs on another machine; its threads must do nothing more (a host that
    /// went on after the others declared it dead is what the lease rules out). What it
    /// had stored non-temporally or flushed and not yet fenced reaches memory now, as
    /// the CPU completes them when it stops a process (`docs/memory.md`, "What a stopped
    /// process leaves"); what it left dirty in its cache stays there.
    pub fn freeze(&self) {
        let shared = &self.host.shared;
        shared
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(pump) = &self.host.pump {
            pump.thread().unpark();
        }
        host_table::pretend_elsewhere(&shared.pod, shared.id);
        shared.memory.fence();
    }

    /// Runs this host's watch for dead hosts now, on the calling thread, as its pump does
    /// every quarter lease (at most that often): finds hosts whose lease ran out or whose
    /// process is gone and recovers them. For tests that drive recovery by hand.
    pub fn watch_hosts(&self) {
        self.host.shared.watch_hosts();
    }

    /// Poisons this host's replica as a replay that panicked half-way would: every later
    /// call on the host panics, and dropping it leaves it for the others to recover.
    /// For tests of what follows such a panic.
    pub fn poison_replica(&self) {
        let replica = &self.host.shared.replica;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _replay = replica.write();
            panic!("a replay panicked half-way (Inspect::poison_replica)");
        }));
    }

    /// Makes this host's pump panic at its next round, as a defect in it would: the host
    /// answers `HostDeclaredDead` from then on and leaves as a dead one, for the others to
    /// recover once its lease runs out. For tests of what follows.
    pub fn make_pump_panic(&self) {
        let shared = &self.host.shared;
        shared
            .pump_told_to_panic
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(pump) = &self.host.pump {
            pump.thread().unpark();
        }
    }

    /// The host draining the records for a switch of the record width under way, if one
    /// is (the pod's width word, read now).
    pub fn width_drainer(&self) -> Option<HostId> {
        self.host.shared.width_drainer()
    }

    /// Which life of its id this host is (the host table's join count when it joined):
    /// the `life` its [`Error::HostDeclaredDead`] names. A restart as the same id joins
    /// as a later life.
    pub fn life(&self) -> u64 {
        self.host.shared.life
    }

    /// Whether this host was declared dead: a recoverer condemned its life (its lease
    /// ran out while it was paused, or its row said it ran elsewhere and its heartbeat
    /// stood still), its replica applied its death, or its pump panicked. Once true it
    /// stays true, and every operation answers [`Error::HostDeclaredDead`]; what is left
    /// to do is to drop the host and join again as a new life. Cheap (a flag and two SCR
    /// loads): a server can ask it periodically, to stop without waiting for a client's
    /// operation to fail.
    pub fn declared_dead(&self) -> bool {
        let shared = &self.host.shared;
        shared.is_declared_dead() || !shared.row_is_mine()
    }

    /// Makes this host's row say that it runs on another machine: the other hosts can then
    /// tell whether it lives only by its lease (its pump's heartbeats), as across
    /// machines. For tests of the lease.
    pub fn pretend_elsewhere(&self) {
        host_table::pretend_elsewhere(&self.host.shared.pod, self.host.shared.id);
    }

    /// Stops or resumes serving RPCs from other hosts (on by default). A host that does not
    /// serve keeps the objects in its DRAM: other hosts that need one get
    /// [`Error::HostUnresponsive`] after their wait limit. Once stopping returns, the host
    /// claims no request (one sent before included) until it resumes: stopping waits for
    /// a server already at work to answer what it claimed.
    /// For testing what a stopped host looks like to the others.
    pub fn set_serving(&self, on: bool) {
        let shared = &self.host.shared;
        shared
            .serving
            .store(on, std::sync::atomic::Ordering::Relaxed);
        if !on {
            // A server that looked at the flag before the store holds this lock from
            // before its first claim to after its last, and looks at the flag again under
            // it before each claim: waiting for the lock waits it out.
            drop(shared.rpc_server.lock());
        }
    }

    /// Errors the pump met in the background.
    pub fn background_errors(&self) -> BackgroundErrors {
        self.host.shared.background_errors.lock().clone()
    }

    /// What schedule chaos did on this host.
    #[cfg(feature = "chaos")]
    pub fn chaos_counts(&self) -> crate::chaos::ChaosCounts {
        self.host.shared.chaos.counts()
    }
}

/// Makes row `host`'s note say that its holder runs on another machine (as
/// [`Inspect::pretend_elsewhere`] does for a host at hand), if the note is this machine's
/// note of the holder's current life: for a holder still inside its join, which writes
/// its note after it takes the row. Whether it changed the note. For tests of the lease.
pub fn pretend_row_elsewhere(pod: &crate::Pod, host: HostId) -> bool {
    crate::host_table::pretend_elsewhere_if_here(pod, host)
}

/// Makes `host` die where it stands, as a host on another machine would: its pump stops
/// (no more heartbeats), and everything it holds (its row in the host table, its log
/// reservation, its record locks, its undo images) stays as it is. Its row is made to say
/// that it runs on another machine, so that the other hosts can tell its death only by
/// its lease, as they would across machines (this process still runs). Its memory is
/// leaked. For tests of recovery.
pub fn crash(host: Host) {
    let mut host = std::mem::ManuallyDrop::new(host);
    host.inspect().freeze();
    if let Some(pump) = host.pump.take() {
        let _ = pump.join();
    }
}
