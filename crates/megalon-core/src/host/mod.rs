//! Hosts: everything one host runs: its view of LNR, its replica, its appender (with flat
//! combining) and its background pump. A host is one OS process or a group of threads
//! emulating one; every host has its own [`Memory`] (its own cache, in the simulation)
//! and its own replica of the index. Its row in the host table is `host_table`'s.
//!
//! Joining goes through the log's registration (see [`crate::log`]): a host replays the
//! log from position 0 to build its replica while the log has never recycled an entry;
//! a later join is a late join (a live host streams it a snapshot of its index), or, in
//! a pod without a join area, answers [`Error::LogRecycled`].

use std::sync::Arc;
use std::time::Duration;

use combiner::Combiner;

use crate::chaos::Chaos;
use crate::config::Coherence;
use crate::error::{Error, JoinNotServedCause, Result};
use crate::event::{Event, OwnedEvent};
use crate::host_table;
pub use crate::ids::HostId;
use crate::limits::HOLDS_PER_HOST;
use crate::log::Log;
use crate::memory::Memory;
use crate::pod::Pod;
use crate::record::RecordShape;
use crate::replica::{Index, IndexEntry, Replica};
use crate::slot::{slot_claim_batch, SlotPool};
use crate::sync::{AtomicU64, Mutex};

mod all_log;
mod append;
mod batch;
mod combiner;
mod crash;
mod inspect;
mod join;
mod local;
mod object;
mod options;
mod path;
mod records;
mod settle;
mod ticket;
mod width;

pub use inspect::{
    crash, pretend_row_elsewhere, BackgroundErrors, HostStats, Inspect, LoggedEvent, RecordCensus,
};
pub use options::{HostOptions, Join, ReleaseHook, WidthPolicy};
pub use records::{ReleaseReason, Releasing};
use settle::Deferred;
pub(crate) use settle::Settle;
pub use ticket::{Done, ReadTicket, WriteTicket};

/// Rounds the pump runs without sleeping after it served an RPC.
const PUMP_BUSY_ROUNDS: u32 = 1000;

#[derive(Debug, Default)]
struct Counters {
    entries_appended: AtomicU64,
    batches_appended: AtomicU64,
    entries_replayed: AtomicU64,
    slots_dropped: AtomicU64,
    hosts_recovered: AtomicU64,
    entries_skipped: AtomicU64,
    locks_recovered: AtomicU64,
    joins_served: AtomicU64,
}

/// Everything one host runs, shared by its threads and its pump.
struct Shared {
    pod: Arc<Pod>,
    id: HostId,
    /// Which life of the id this host is (the host table's join count after its claim).
    life: u64,
    /// A `HostDead` naming this host and life was applied: another host declared it dead
    /// (its lease ran out) and recovered what it held. Every operation fails from then on.
    declared_dead: std::sync::atomic::AtomicBool,
    /// A panic left what a call held unsettled: an append panicked (see
    /// `submit_settled`: the threads whose requests it carried never learned their
    /// outcomes), or a thread unwound holding an announced lock (`Hold`'s drop). The host
    /// leaves as a dead one does, for its recovery to settle what it announced.
    left_unsettled: std::sync::atomic::AtomicBool,
    /// The pump panicked outside the reclaimer (a defect of this host's, not the caller's
    /// code): it stopped and left the host to the others as a dead one (`Shared::pump`).
    pump_panicked: std::sync::atomic::AtomicBool,
    /// A test asked the pump to panic at its next round (`Inspect::make_pump_panic`).
    pump_told_to_panic: std::sync::atomic::AtomicBool,
    /// The first log position this life reserved (`u64::MAX` before its first append):
    /// entries of its id below it are an earlier life's, whose outcomes no appender of
    /// this one waits for.
    first_reserved: std::sync::atomic::AtomicU64,
    /// Held from a reservation of log positions until they are published: the host's row
    /// announces one reservation at a time.
    append_lock: Mutex<()>,
    /// Held by the thread filling a dead host's reservation: the pump's recovery and a
    /// stalled replay's (nested under the same recovery word) never fill at once (a
    /// second writer of a position, paused after its look, writes over the next lap).
    filling: Mutex<()>,
    /// Announce words (and undo images) not in use, one bit each.
    free_holds: Mutex<u64>,
    /// What the pump knows of the other hosts' leases.
    watch: Mutex<crash::Watch>,
    /// A join's rescue (`Shared::rescue`) has logged the `HostDead` of the life it took
    /// the row over from.
    rescue_logged: std::sync::atomic::AtomicBool,
    /// The records the log says are free.
    free_records: Mutex<records::FreeRecords>,
    /// This host's threads between their look at the width word and their change of a
    /// record word (`width::Shared::enter_gate`).
    gate: AtomicU64,
    /// The width word as this host last saw it, in its DRAM: the changers' first look
    /// (`width::Shared::enter_gate`).
    width_seen: AtomicU64,
    /// What the pump's width policy saw at its last look (`width::Looks`).
    width_looks: Mutex<width::Looks>,
    memory: Memory,
    log: Log,
    replica: Replica,
    slots: Mutex<SlotPool>,
    combiner: Combiner,
    options: HostOptions,
    /// The pod's coherence is [`Coherence::AllLog`]: the object protocol takes the AllLog
    /// path (one predictable branch at the top of each operation).
    all_log: bool,
    counters: Counters,
    /// Per-thread event counters of the object protocol.
    events: crate::counters::Registry,
    events_id: u64,
    claim_chunk_slots: u64,
    stop: std::sync::atomic::AtomicBool,
    /// Objects in this host's DRAM (local partitions, local copies), if either is on.
    local: Option<local::Local>,
    /// Every host's RPC ring, if the pod has rings.
    rpc: Option<local::Rpc>,
    /// Whether this host serves RPCs ([`Inspect::set_serving`](crate::inspect::Inspect::set_serving)).
    serving: std::sync::atomic::AtomicBool,
    /// Held by the thread serving this host's ring.
    rpc_server: Mutex<()>,
    /// Schedule chaos and injected faults (nothing without the `chaos` feature).
    chaos: Chaos,
    /// Settles of this host's entries whose appenders gave up waiting for them, by log
    /// position. Taken and changed only under the replay lock, so that an entry is either
    /// applied before its settle is registered (the appender finds its outcome) or after
    /// (replay finds the settle).
    settles: Mutex<std::collections::HashMap<u64, (Settle, OwnedEvent)>>,
    /// What settles left for the pump.
    deferred: Mutex<Vec<Deferred>>,
    /// Errors the pump met in its background work: how many, the last one, and by kind.
    /// One lock for the three: a look between a count and its error (three fields
    /// changed one after another) saw a count of 1 and no last error.
    background_errors: Mutex<inspect::BackgroundErrors>,
}

/// A joined host. Share it between the threads that emulate it (`&Host` is enough; it is
/// `Sync`). Leaves the host table, and stops its pump, when dropped.
pub struct Host {
    shared: Arc<Shared>,
    pump: Option<std::thread::JoinHandle<()>>,
}

impl Host {
    /// Joins `pod` as `which`. `options` can be a [`MemoryKind`](crate::MemoryKind) alone.
    pub fn join(pod: &Arc<Pod>, which: Join, options: impl Into<HostOptions>) -> Result<Host> {
        let options: HostOptions = options.into();
        let started = std::time::Instant::now();
        let (shared, life) = loop {
            // For no host yet: the claim's SCR accesses are charged to nobody.
            let claimed = crate::memory::cxl::uncharged(|| claim_id(pod, which));
            let (id, life, late) = match claimed {
                Ok(claimed) => claimed,
                // No row to claim: if no live host is left to recover the dead holders,
                // this join takes one's row over and recovers it itself.
                Err(error @ (Error::HostTableFull { .. } | Error::HostTaken { .. })) => {
                    match rescue(pod, which, &options, started)? {
                        Some(rescued) => break rescued,
                        None => return Err(error),
                    }
                }
                Err(error) => return Err(error),
            };
            let shared = Arc::new(Shared::new(pod, id, life, options.clone()));
            shared.clear_late_announces()?;
            if !late {
                break (shared, life);
            }
            match shared.join_late() {
                Ok(true) => break (shared, life),
                // Its server died mid-stream, or a server declared dead (paused past its
                // lease) wrote into its stream: it joins again as the id's next life, a
                // new session that no late step of that server's (its pin of this life's
                // `ltail`, its mailbox words) can touch.
                Ok(false) => {
                    give_up_row(pod, id, life)?;
                    let waited = started.elapsed();
                    if waited >= options.wait_limit {
                        return Err(Error::JoinNotServed {
                            host: id,
                            waited_ms: waited.as_millis() as u64,
                            cause: JoinNotServedCause::NoServer,
                        });
                    }
                }
                Err(error) => {
                    give_up_row(pod, id, life)?;
                    return Err(error);
                }
            }
        };
        #[cfg_attr(megalon_loom, allow(unused_mut))] // loom starts no pump
        let mut host = Host { shared, pump: None };
        if life > 1 {
            // The id was held before: what replay rebuilds of that holder's free slots is
            // not ours (their `HostJoined` clears it).
            host.shared.submit(&Event::HostJoined { life })?;
            // Applied: the pool replay rebuilt of the id's earlier lives is emptied, and
            // what it gets from here on is this life's.
        }
        host.shared.catch_up()?;
        host.shared.take_over_earlier_lifes_switch()?;
        // A loom model drives replay by hand; its threads are model threads only.
        #[cfg(not(megalon_loom))]
        if let Some(interval) = host.shared.options.pump_interval {
            let shared = Arc::clone(&host.shared);
            let id = shared.id;
            let pump = std::thread::Builder::new()
                .name(format!("megalon-pump-{id}"))
                .spawn(move || shared.pump(interval))
                .map_err(|source| Error::Io {
                    operation: "starting the pump thread of",
                    path: format!("host {id}").into(),
                    source: source.into(),
                })?;
            host.pump = Some(pump);
        }
        Ok(host)
    }

    /// This host's id.
    pub fn id(&self) -> HostId {
        self.shared.id
    }

    /// The pod.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.shared.pod
    }

    /// This host's view of LNR.
    pub fn memory(&self) -> &Memory {
        &self.shared.memory
    }

    /// How this host runs.
    pub fn options(&self) -> &HostOptions {
        &self.shared.options
    }

    /// Leaves the host table, freeing the id for another participant. First it waits (up
    /// to its [`HostOptions::wait_limit`]) for what its failed calls left in the log to
    /// apply (a delete whose outcome it never saw keeps its record locked until then). If
    /// that wait runs out in a pod with undo images, it leaves as a dead host does: the
    /// others recover it once its lease runs out, and settle what it held; its id is
    /// free from then on.
    pub fn leave(self) {
        drop(self)
    }

    /// Looks `key` up, linearizably: the replica first applies every log entry whose
    /// append had completed when the call began.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        self.shared.check_key(key)?;
        self.shared.catch_up()?;
        Ok(self.shared.look(|view| view.lookup(key)))
    }

    /// The pod's objects, linearizably: the replica first applies every log entry whose
    /// append had completed when the call began, then counts its objects.
    pub fn object_count(&self) -> Result<u64> {
        self.shared.catch_up()?;
        Ok(self.shared.replica.read().len())
    }

    /// Creates object `key` holding `value`: writes the bytes into a free slot this host
    /// owns, makes them reach memory, then appends the create event.
    /// [`Error::ObjectExists`] if the key exists (the slot stays with this host).
    pub fn create(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.shared.create(key, value, None)
    }

    /// [`create`](Self::create), and stores the log position just past the create's entry
    /// (never 0) in the application SCR word at pod offset `note_at`, before the entry is
    /// published. The word is the caller's: nothing else writes it. A host that loads the
    /// word, then finds its [`applied_position`](crate::inspect::Inspect::applied_position)
    /// at least what it held, has the create's outcome in its replica, even if this host
    /// died right after the publish: an application that counts its creates in progress
    /// in the SCR can tell which of them its replica counts already. The word is not
    /// stored if the create never reaches the log (an error before its append), nor once
    /// this host was declared dead.
    /// [`Error::OutsideApplicationScr`] if `note_at` is not an 8-aligned word of the
    /// application SCR.
    pub fn create_noting_position(&self, key: &[u8], value: &[u8], note_at: u64) -> Result<()> {
        let layout = self.shared.pod.layout();
        let app_scr = layout.app_scr_offset..layout.app_scr_offset + layout.config.app_scr_bytes;
        if !note_at.is_multiple_of(8) || !app_scr.contains(&note_at) {
            return Err(Error::OutsideApplicationScr { offset: note_at });
        }
        self.shared.create(key, value, Some(note_at))
    }

    /// Deletes object `key` through the log; its slot goes to this host.
    /// [`Error::UnknownKey`] if there is none.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.shared.check_key(key)?;
        self.shared
            .with_counters(|c| self.shared.delete(key, None, c))
    }

    /// [`Host::delete`], except that it does not wait for the object's record when
    /// another thread or host holds it locked (a write in progress, or a writer stopped
    /// holding it): it looks once and answers [`Error::RecordBusy`] (in a pod with
    /// [`Coherence::AllLog`](crate::Coherence), [`Error::ObjectLocked`]), the object left as
    /// it was. What picks one victim among many (a cache's eviction) passes over a busy one
    /// this way, instead of spending a wait limit on each. The log's own waits (a hole,
    /// room for the entry) are as in `delete`.
    pub fn delete_unless_busy(&self, key: &[u8]) -> Result<()> {
        self.shared.check_key(key)?;
        let no_wait = Some(crate::Backoff::new(std::time::Duration::ZERO));
        self.shared
            .with_counters(|c| self.shared.delete(key, no_wait, c))
    }

    /// Applies every published log entry this replica has not applied yet, does the work
    /// settles left for later (a lost claim's record to free, a replicated unlock to
    /// append again), serves slot requests addressed to this host, and acknowledges a
    /// freeze of the record width under way (what the pump does each round, for a host
    /// run without one; the pump also reclaims records). Returns the position applied up
    /// to.
    pub fn replay(&self) -> Result<u64> {
        let position = self.shared.replay(None)?;
        self.shared.run_deferred();
        self.shared.serve_grants()?;
        self.shared.acknowledge_freeze()?;
        Ok(position)
    }

    /// Appends `event` as is (through the combiner, if on) and returns its outcome. For the
    /// crate's own models and tests: the object API appends events with their protocol.
    #[cfg(megalon_loom)]
    pub(crate) fn append_event(
        &self,
        event: &crate::event::Event<'_>,
    ) -> Result<crate::replica::Outcome> {
        self.shared.submit(event)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // A panic while it leaves (a replay that panics after the look at poisoning below,
        // its own or its pump's, then the poisoned replica's answer to every later look)
        // must not leave the drop: during an unwind it would abort the process, and
        // otherwise it would skip the rest, leaving the row held by this live process
        // for good (nobody recovers a row whose process lives here). It leaves as a dead
        // host does, for the others to recover.
        let left = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drop_leaving()));
        if left.is_err() {
            self.stop_pump();
            self.shared.leave_as_dead();
        }
    }
}

impl Host {
    /// What [`Host`]'s drop does: leaves the pod, or leaves as a dead host does.
    fn drop_leaving(&mut self) {
        let pump_panicked = self
            .shared
            .pump_panicked
            .load(std::sync::atomic::Ordering::Acquire);
        if self.shared.replica.is_poisoned() || pump_panicked {
            // A replay panicked half-way, or the pump did: nothing this host knows can be
            // trusted, so it leaves as a dead host does, for the others to recover (its
            // locks, its reservations, its row) once its lease runs out.
            self.stop_pump();
            self.shared.leave_as_dead();
            return;
        }
        // Objects in this host's DRAM go back to CXL: once it leaves, nobody could bring
        // them back. (An error here, a full log, cannot be reported from a drop.)
        let _ = self.shared.move_all_back();
        // Settles waiting for their entries, and deferred work (AllLog's unlocks) are
        // this host's: a last try, within its wait limit.
        let settled = self.shared.settle_before_leaving()
            && !self
                .shared
                .left_unsettled
                .load(std::sync::atomic::Ordering::Acquire);
        // A move back whose append failed, or a move here that applied during the settle:
        // once more. An object the pod still names as held here when the row is freed
        // would be named so for good (only a `HostDead` hands it back).
        let holds_objects = self.shared.holds_objects()
            && (self.shared.move_all_back().is_err() || self.shared.holds_objects());
        self.stop_pump();
        // The pump runs deferred work by taking the whole list, and puts back what it
        // could not finish: a look at the list while it held it found nothing (a losing
        // claim's free, waiting for a lock, then freed by nobody once the row is). With
        // the pump stopped, once more.
        // And a lock no call of this host will end (a write ticket forgotten by its
        // caller) must not outlive the host: with its row freed, nobody would ever
        // settle it (the record stayed locked for good, named as a gone host's whose
        // recovery was due). Left to recovery, which puts its undo image back.
        let settled = settled && self.shared.run_deferred() == 0 && self.shared.every_hold_free();
        let shared = &self.shared;
        if host_table::holder(&shared.pod, shared.id)
            != Some((host_table::this_process(), shared.life))
        {
            // Declared dead and recovered: the row is free, or the id's next life's.
            return;
        }
        if host_table::condemned(&shared.pod, shared.id, shared.life) {
            // Its recovery has begun and is not done (its row is still held): it must
            // find the row as it left it, or nobody settles what it left to recovery.
            shared.leave_as_dead();
            return;
        }
        if holds_objects {
            // Its recovery's `HostDead` hands them back to CXL, as they were when they
            // moved here (what it wrote to them in its DRAM is lost, as a dead host's).
            shared.leave_as_dead();
            return;
        }
        if !settled && shared.undo_images() {
            // A record it holds locked or claimed until an entry of its applies (that
            // entry is behind a hole in the log, say), or that a panic or a forgotten
            // write ticket left: nobody would settle it once the row is free. It leaves
            // as a dead host does; its recovery settles what it announced. (Without undo
            // images recovery leaves records alone: it frees its row, and the record
            // stays locked, as a dead host's would.)
            shared.leave_as_dead();
            return;
        }
        // Its free slots go back to the pod. If its `HostLeft` did not land (a full log),
        // or it was condemned meanwhile (paused past its lease: what it reserved is its
        // recovery's to fill, and a freed row is recovered by nobody), it leaves as a
        // dead host does: its recovery's `HostDead` makes it no donor.
        let left = shared.give_slots_back().is_ok();
        if !left || !shared.row_is_mine() {
            shared.leave_as_dead();
            return;
        }
        // The `HostLeft`'s confirm applied every entry before it, settles included: one
        // of an entry behind a hole the settle above could not pass, filled since, may
        // have left deferred work (an AllLog `Lock` that won owes its `Unlock`). Done
        // while the row is still ours: once it is free, nobody appends it, and the
        // object stays locked by a host that left.
        if !shared.settle_before_leaving() && shared.undo_images() {
            shared.leave_as_dead();
            return;
        }
        host_table::release(&shared.pod, shared.id, shared.life);
    }
}

impl Host {
    /// Stops the pump thread and waits for it.
    fn stop_pump(&mut self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(pump) = self.pump.take() {
            pump.thread().unpark();
            let _ = pump.join();
        }
    }
}

impl Shared {
    /// Whether the replica, caught up, names this host as the holder of an object in its
    /// DRAM (local partitions; a scan of the index). A catch-up that fails: yes (it
    /// cannot tell).
    fn holds_objects(&self) -> bool {
        self.local.is_some() && (self.catch_up().is_err() || self.replica.read().holds_any(self.id))
    }

    /// Leaves the pod as a dead host does (its pump stopped: no heartbeat moves): its row
    /// says it runs on another machine, so that its live process does not keep it alive
    /// and its lease tells the others; they recover it. Only a row still this life's is
    /// changed (one freed and joined again is the next life's).
    fn leave_as_dead(&self) {
        if host_table::holder(&self.pod, self.id) == Some((host_table::this_process(), self.life)) {
            host_table::pretend_elsewhere(&self.pod, self.id);
        }
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("id", &self.shared.id)
            .field("memory", &self.shared.memory.kind_name())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Whether another host declared this one dead (see [`Shared::declared_dead`]).
    fn is_declared_dead(&self) -> bool {
        self.declared_dead
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        let max_key_bytes = self.pod.config().max_key_bytes;
        if key.len() > max_key_bytes as usize {
            return Err(Error::KeyTooLarge {
                key_bytes: key.len(),
                max_key_bytes,
            });
        }
        Ok(())
    }

    /// The pump's thread: replays, serves, beats and watches until the host stops. A
    /// panic in any of it but the reclaimer (whose release hook is the caller's code, and
    /// is caught there) is a defect that may have left what the task held half-done; the
    /// pump stops and the host leaves as a dead one does: its operations answer
    /// `HostDeclaredDead` from then on (a write under way leaves its lock to recovery),
    /// its row says it runs elsewhere and nothing beats any more, so once its lease runs
    /// out the others recover it. Left running without its pump it would serve no RPC,
    /// join or grant, yet live on this machine as long as its process, and the log's head
    /// would wait for its replay for good; left answering, its writes would go on while
    /// the others recovered it.
    fn pump(&self, interval: Duration) {
        // The pump's thread works for this host only: its looks at the log's cursors
        // (the reclaimer's, before any read of an entry) are this host's under the model.
        self.memory.bind_scr();
        let pumped =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.pump_rounds(interval)));
        if let Err(panic) = pumped {
            self.declared_dead
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.pump_panicked
                .store(true, std::sync::atomic::Ordering::Release);
            self.background_error(Error::BackgroundPanicked {
                task: "pump",
                message: panic_message(&*panic),
            });
            self.leave_as_dead();
        }
    }

    fn pump_rounds(&self, interval: Duration) {
        // Rounds left in which the pump only yields between rounds: after it served an
        // RPC, more may follow, and each waits for the pump while it sleeps.
        let mut busy_rounds = 0u32;
        while !self.stop.load(std::sync::atomic::Ordering::Acquire) {
            if self
                .pump_told_to_panic
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                panic!("the pump was told to panic (Inspect::make_pump_panic)");
            }
            // Errors also surface to the host's own operations, which replay too; the
            // pump counts them and keeps the last (`Host::background_errors`). None of
            // them leaves a record locked: every path that holds one settles it.
            match self.replay(None) {
                Ok(_) => {
                    self.run_deferred();
                    if let Err(error) = self.serve_grants() {
                        self.background_error(error);
                    }
                    // A release hook that panics in the reclaimer (the caller's code, on the
                    // pump's thread) must not stop the pump: without it the host would
                    // replay, beat and serve nothing more, yet live (on this machine, nobody
                    // would declare it dead), and the log's head would wait for it.
                    let reclaimed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.reclaim_to_watermark()
                    }));
                    match reclaimed {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => self.background_error(error),
                        Err(panic) => self.background_error(Error::BackgroundPanicked {
                            task: "reclaimer",
                            message: panic_message(&*panic),
                        }),
                    }
                    if let Err(error) = self.acknowledge_freeze() {
                        self.background_error(error);
                    }
                    if let Err(error) = self.adapt_width() {
                        self.background_error(error);
                    }
                }
                Err(error) => self.background_error(error),
            }
            match self.serve_rpcs() {
                Ok(served) if served > 0 => busy_rounds = PUMP_BUSY_ROUNDS,
                Ok(_) => {}
                Err(error) => self.background_error(error),
            }
            self.beat();
            self.watch_hosts();
            if let Err(error) = self.serve_join() {
                self.background_error(error);
            }
            if busy_rounds > 0 {
                busy_rounds -= 1;
                std::thread::yield_now();
            } else {
                self.idle(interval);
            }
        }
    }

    /// The pump's sleep between rounds: `interval`, beating at least every eighth of the
    /// pod's lease meanwhile. The pump's beat is the host's lease: an interval near or past
    /// the lease (an idle host that need not replay often) got a live host judged by its
    /// lease declared dead between two rounds. Ends early when the host stops or its pump
    /// is told to panic.
    fn idle(&self, interval: Duration) {
        let lease = Duration::from_millis(u64::from(self.pod.config().lease_ms));
        let slice = lease / 8;
        // Checked: an interval past what `Instant` holds has no end.
        let until = std::time::Instant::now().checked_add(interval);
        loop {
            let left = until.map_or(Duration::MAX, |until| {
                until.saturating_duration_since(std::time::Instant::now())
            });
            if left.is_zero()
                || self.stop.load(std::sync::atomic::Ordering::Acquire)
                || self
                    .pump_told_to_panic
                    .load(std::sync::atomic::Ordering::Relaxed)
            {
                return;
            }
            std::thread::park_timeout(left.min(slice));
            if left > slice {
                self.beat();
                // A freeze waits for this host's acknowledgement, which its gates, looking
                // at the DRAM copy of the width word, do not give while it is open.
                if let Err(error) = self.acknowledge_freeze() {
                    self.background_error(error);
                }
            }
        }
    }
}

/// What a panic says, if it said a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => (*message).to_owned(),
        (_, Some(message)) => message.clone(),
        _ => "(not a string)".to_owned(),
    }
}

impl Shared {
    /// Everything host `id` runs, freshly made: its memory, an empty replica (replay fills
    /// it), its appender and its counters.
    fn new(pod: &Arc<Pod>, id: HostId, life: u64, options: HostOptions) -> Self {
        let layout = pod.layout();
        let max_hosts = layout.config.max_hosts;
        let log = Log::new(pod);
        let coherence = layout.config.coherence;
        if layout.config.record_width_switch {
            // This life acknowledges no freeze yet (an earlier life's acknowledgement of a
            // freeze still under way is not this life's).
            pod.scr_u64(layout.gate_offset(id))
                .store(0, std::sync::atomic::Ordering::SeqCst);
        }
        let index = Index::new(
            layout.slot_count,
            layout.records_bytes(),
            RecordShape::initial(pod),
            max_hosts,
            layout.config.max_key_bytes,
            coherence,
        );
        let replica = Replica::new(index, log.entry_bytes());
        let claim_chunk_slots = slot_claim_batch(layout.slot_count, max_hosts);
        #[cfg(feature = "chaos")]
        let options_chaos = options.chaos.clone();
        Shared {
            pod: Arc::clone(pod),
            id,
            life,
            declared_dead: std::sync::atomic::AtomicBool::new(false),
            left_unsettled: std::sync::atomic::AtomicBool::new(false),
            pump_panicked: std::sync::atomic::AtomicBool::new(false),
            pump_told_to_panic: std::sync::atomic::AtomicBool::new(false),
            first_reserved: std::sync::atomic::AtomicU64::new(u64::MAX),
            append_lock: Mutex::new(()),
            filling: Mutex::new(()),
            free_holds: Mutex::new(if HOLDS_PER_HOST == 64 {
                u64::MAX
            } else {
                (1 << HOLDS_PER_HOST) - 1
            }),
            watch: Mutex::new(crash::Watch::default()),
            rescue_logged: std::sync::atomic::AtomicBool::new(false),
            free_records: Mutex::new(records::FreeRecords::new(layout.record_count)),
            gate: AtomicU64::new(0),
            width_seen: AtomicU64::new(width::UNSEEN),
            width_looks: Mutex::new(width::Looks::default()),
            memory: Memory::new(Arc::clone(pod), options.memory.clone()),
            log,
            replica,
            slots: Mutex::new(SlotPool::default()),
            combiner: Combiner::default(),
            options,
            all_log: coherence == Coherence::AllLog,
            counters: Counters::default(),
            events: crate::counters::Registry::default(),
            events_id: crate::counters::Registry::new_id(),
            claim_chunk_slots,
            stop: std::sync::atomic::AtomicBool::new(false),
            local: local::Local::new(
                layout.config.partition_after_accesses,
                layout.config.copy_after_reads,
                layout.slot_count,
                layout.config.slot_size_bytes as usize,
            ),
            rpc: local::Rpc::new(layout),
            serving: std::sync::atomic::AtomicBool::new(true),
            rpc_server: Mutex::new(()),
            #[cfg(feature = "chaos")]
            chaos: Chaos::new(options_chaos),
            #[cfg(not(feature = "chaos"))]
            chaos: Chaos,
            settles: Mutex::new(std::collections::HashMap::new()),
            deferred: Mutex::new(Vec::new()),
            background_errors: Mutex::new(inspect::BackgroundErrors::default()),
        }
    }
}

/// Claims a host id for this process as `which` says, and holds the log's head for it
/// (`Log::hold_head`): while the head is at 0, the new host replays from position 0, and
/// its `ltail` keeps the head there until it has replayed. Once the head has left 0 the
/// ring may have recycled entries: a late join (if the pod has a join area), where the
/// new host's `ltail` holds the head where it is until a live host pins it at the position
/// of the snapshot it sends. Returns the id, which life of it this is, and whether the
/// join is late.
fn claim_id(pod: &Pod, which: Join) -> Result<(HostId, u64, bool)> {
    let max_hosts = pod.config().max_hosts;
    if let Join::As(host) = which {
        if host >= max_hosts {
            return Err(Error::HostOutOfRange { host, max_hosts });
        }
    }
    let can_join_late = pod.config().join_area_bytes > 0;
    if Log::head(pod) > 0 && !can_join_late {
        return Err(Log::recycled(pod));
    }
    let (id, life) = claim_row(pod, which, max_hosts)?;
    let from = match Log::new(pod).hold_head(pod, id, life, can_join_late) {
        Ok(from) => from,
        Err(error) => {
            give_up_row(pod, id, life)?;
            return Err(error);
        }
    };
    Ok((id, life, from > 0))
}

/// A held row of the host table as a joiner found it dead: `(id, pid, life, heartbeat,
/// since)`, `since` when its watch began.
pub(super) type DeadRow = (HostId, u32, u64, u64, std::time::Instant);

/// Every held row of the host table, when each holder is dead: gone from this machine, or
/// its row (holder and heartbeat) unchanged for a lease, watched here. `None` if one
/// lives (on this machine, or its heartbeat moved), or the watch would outlast
/// `wait_limit`. Each row as `(id, pid, life, heartbeat, since)`, `since` when the watch
/// began.
#[cfg(not(megalon_loom))]
fn all_dead(pod: &Pod, wait_limit: Duration) -> Option<Vec<DeadRow>> {
    let lease = Duration::from_millis(u64::from(pod.config().lease_ms));
    let since = std::time::Instant::now();
    let rows: Vec<_> = (0..pod.config().max_hosts)
        .filter_map(|host| {
            let (pid, life) = host_table::holder(pod, host)?;
            Some((
                host,
                pid,
                life,
                host_table::heartbeat_count(pod, host),
                since,
            ))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut watched = Vec::new();
    for &(host, pid, life, ..) in &rows {
        match host_table::process_gone(pod, host, pid, life) {
            Some(true) => {}
            Some(false) => return None,
            None => watched.push(host),
        }
    }
    if watched.is_empty() {
        return Some(rows);
    }
    if lease >= wait_limit {
        return None;
    }
    let unchanged = || {
        rows.iter().all(|&(host, pid, life, beat, _)| {
            host_table::holder(pod, host) == Some((pid, life))
                && (!watched.contains(&host) || host_table::heartbeat_count(pod, host) == beat)
        })
    };
    // A live holder beats every eighth of its lease: one that moves ends the watch early.
    while since.elapsed() <= lease {
        if !unchanged() {
            return None;
        }
        std::thread::sleep(lease / 20);
    }
    unchanged().then_some(rows)
}

/// A join that found no row to claim (`which` says which), when no live host is left to
/// recover the dead holders of the rows (every host of the pod died: machines down,
/// processes killed): only a joined host's pump recovers a dead one, so no row would
/// ever be freed. The joiner takes a dead holder's row over (`host_table::take_over`:
/// the dead life condemned, then the row claimed from its word by one CAS, as the id's
/// next life), replays the log from 0, and recovers the dead life as its recoverer
/// would (`Shared::rescue`) before anything of its own: its reservation filled, its
/// `HostDead`, its RPC entries and locks settled. Its pump then recovers the other dead
/// holders, as any live host's. Returns the new host and its life, or `None` (a live
/// holder, or another joiner took the row first: the caller answers as before).
///
/// Only while the log has recycled nothing (its head at 0): past that the index of a pod
/// whose hosts all died is nowhere (a late join streams a live host's), and the answer is
/// `JoinNotServed`. A rescue that cannot finish (its replay or recovery outlasts the wait
/// limit), or whose row is taken over in turn (it paused past its lease), leaves the row
/// as a dead holder's, for the next joiner's rescue: the earlier life's words stay in the
/// row, and are recovered with it.
#[cfg(not(megalon_loom))]
fn rescue(
    pod: &Arc<Pod>,
    which: Join,
    options: &HostOptions,
    started: std::time::Instant,
) -> Result<Option<(Arc<Shared>, u64)>> {
    let Some(dead) = all_dead(pod, options.wait_limit) else {
        return Ok(None);
    };
    let target = match which {
        Join::As(host) => dead.iter().position(|&(id, ..)| id == host),
        Join::AnyFree => Some(0),
    };
    let Some(target) = target else {
        return Ok(None);
    };
    let (id, pid, dead_life, ..) = dead[target];
    if Log::head(pod) > 0 {
        return Err(if pod.config().join_area_bytes > 0 {
            Error::JoinNotServed {
                host: id,
                waited_ms: started.elapsed().as_millis() as u64,
                cause: JoinNotServedCause::NoHolder,
            }
        } else {
            Log::recycled(pod)
        });
    }
    let own_start = host_table::own_start();
    Chaos::none().point(crate::chaos::Point::RescueBeforeTakeOver);
    // Another joiner took it first (or its holder was only paused, and left): the
    // caller answers as before, and a retry finds the row that joiner's, alive.
    let Some(life) = host_table::take_over(pod, id, pid, dead_life) else {
        return Ok(None);
    };
    // From here the row is ours, with the dead life's words in it: any way out but
    // success (an error, a panic) leaves it as a dead holder's (judged by its lease),
    // for the next rescue.
    let leaving = LeaveRowAsDead {
        pod,
        id,
        life,
        armed: true,
    };
    Chaos::none().point(crate::chaos::Point::RescueAfterTakeOver);
    if !host_table::note_holder(pod, id, life, own_start) {
        return Err(Error::HostDeclaredDead { host: id, life });
    }
    // Never late: nothing lives to send a snapshot (a head that moved since the look
    // above had a live host move it, which recovers this row once it is left).
    // A head moved past 0 since the look above (a holder found dead was only paused,
    // and appended a lap): answered as that look would have (a live host recovers the
    // row once it is left, and serves a late join then).
    match Log::new(pod).hold_head(pod, id, life, false) {
        Err(Error::LogRecycled { .. }) if pod.config().join_area_bytes > 0 => {
            // Not `NoHolder`: a host moved the head, so one lived (it holds the index,
            // recovers the row once it is left, and serves a retry).
            return Err(Error::JoinNotServed {
                host: id,
                waited_ms: started.elapsed().as_millis() as u64,
                cause: JoinNotServedCause::NoServer,
            });
        }
        held => {
            held?;
        }
    }
    let shared = Arc::new(Shared::new(pod, id, life, options.clone()));
    let others: Vec<_> = dead
        .iter()
        .filter(|&&(host, ..)| host != id)
        .copied()
        .collect();
    shared.rescue(pid, dead_life, &others)?;
    leaving.disarm();
    Ok(Some((shared, life)))
}

/// Leaves a row taken over by a rescue that did not finish as a dead holder's (when
/// dropped armed): it says its holder runs on another machine, and nothing beats, so a
/// later joiner's rescue takes it over once its lease runs out (on this machine the live
/// process would keep it for good).
#[cfg(not(megalon_loom))]
struct LeaveRowAsDead<'a> {
    pod: &'a Pod,
    id: HostId,
    life: u64,
    armed: bool,
}

#[cfg(not(megalon_loom))]
impl LeaveRowAsDead<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

#[cfg(not(megalon_loom))]
impl Drop for LeaveRowAsDead<'_> {
    fn drop(&mut self) {
        if self.armed
            && host_table::holder(self.pod, self.id)
                == Some((host_table::this_process(), self.life))
        {
            host_table::pretend_elsewhere(self.pod, self.id);
        }
    }
}

#[cfg(megalon_loom)]
fn rescue(
    _pod: &Arc<Pod>,
    _which: Join,
    _options: &HostOptions,
    _started: std::time::Instant,
) -> Result<Option<(Arc<Shared>, u64)>> {
    Ok(None)
}

/// A joiner gives up its row (life `life` of `id`), as `Drop` does: unless its life has
/// been condemned. Then its recovery has begun and must find the row as the joiner left
/// it (a row freed and claimed again meanwhile would be the next life's, and the rest of
/// the recovery, its `HostDead` above all, would act on that life):
/// `Err(HostDeclaredDead)`, and the row is left to the recovery.
pub(crate) fn give_up_row(pod: &Pod, id: HostId, life: u64) -> Result<()> {
    if host_table::condemned(pod, id, life) {
        return Err(Error::HostDeclaredDead { host: id, life });
    }
    host_table::release(pod, id, life);
    Ok(())
}

/// Claims a row as `which` says, counted as the id's next life by the same CAS, and
/// notes who holds it (`host_table::note_holder`). A note that fails (a claimer of an
/// earlier turn of the row, paused past its lease, noted itself in it; or this claimer is
/// that paused one, its row recovered) gives the row up and claims again, a few times.
fn claim_row(pod: &Pod, which: Join, max_hosts: u32) -> Result<(HostId, u64)> {
    const TRIES: u32 = 8;
    let started = host_table::own_start();
    let mut tries = 0;
    loop {
        let (id, life) = match which {
            Join::As(host) => host_table::try_claim(pod, host)
                .map(|life| (host, life))
                .map_err(|holder_pid| Error::HostTaken { host, holder_pid }),
            Join::AnyFree => (0..max_hosts)
                .find_map(|host| {
                    host_table::try_claim(pod, host)
                        .ok()
                        .map(|life| (host, life))
                })
                .ok_or(Error::HostTableFull { max_hosts }),
        }?;
        if host_table::note_holder(pod, id, life, started) {
            return Ok((id, life));
        }
        give_up_row(pod, id, life)?;
        tries += 1;
        if tries == TRIES {
            return Err(Error::HostDeclaredDead { host: id, life });
        }
    }
}
