//! Hosts: the host table in SCR, and everything one host runs: its view of LNR, its
//! replica, its appender (with flat combining) and its background pump.
//!
//! A host table entry is one line: `holder` (0 when free, else the holder's process id,
//! set by the one CAS that claims the id, so a reader never sees a claimed entry without
//! its pid), a heartbeat the holder bumps, and how many times the id has been joined. A host is one
//! OS process or a group of threads emulating one; every host has its own [`Memory`] (its
//! own cache, in the simulation) and its own replica of the index.
//!
//! Joining goes through the log's registration (see [`crate::log`]): a host replays the
//! log from position 0 to build its replica, so hosts must join before the log first
//! recycles an entry; later joins answer [`Error::LogRecycled`].

use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::chaos::{Chaos, Fault, Point};
use crate::combiner::Combiner;
use crate::config::Coherence;
use crate::error::{Error, Result};
use crate::event::{Event, OwnedEvent};
use crate::log::Log;
use crate::memory::{Memory, MemoryKind};
use crate::mutants::{self, Step};
use crate::pod::Pod;
use crate::record::{RecordWord, Records};
use crate::replica::{Index, IndexEntry, Outcome, Replica, ReplicatedLock};
use crate::slot::{slot_claim_batch, SlotPool};
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering};

#[path = "local.rs"]
mod local;
#[path = "object.rs"]
mod object;
pub use object::{Done, ReadTicket, ReleaseReason, Releasing, WriteTicket};

/// Identifier of a host: its index in the host table, below the pod's `max_hosts`.
pub type HostId = u32;

/// Rounds the pump runs without sleeping after it served an RPC.
const PUMP_BUSY_ROUNDS: u32 = 1000;

/// `holder` of a free entry. Process id 0 is the kernel's, never a user process's.
const FREE: u32 = 0;
const HOLDER_OFFSET: u64 = 0;
const HEARTBEAT_OFFSET: u64 = 8;
const JOINS_OFFSET: u64 = 16;

/// One row of the host table, as read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The host's id.
    pub host: HostId,
    /// Process id of the holder.
    pub pid: u32,
    /// The holder's heartbeat count (it carries over from the id's previous holders).
    pub heartbeat: u64,
    /// How many times this id has been joined since the pod was created (counted just
    /// after the claim, so a reader racing a join may see the previous count).
    pub joins: u64,
}

struct HostEntry<'a> {
    holder: &'a AtomicU32,
    heartbeat: &'a AtomicU64,
    joins: &'a AtomicU64,
}

fn entry(pod: &Pod, host: HostId) -> HostEntry<'_> {
    let base = pod.layout().host_entry_offset(host);
    HostEntry {
        holder: pod.scr_u32(base + HOLDER_OFFSET),
        heartbeat: pod.scr_u64(base + HEARTBEAT_OFFSET),
        joins: pod.scr_u64(base + JOINS_OFFSET),
    }
}

/// Whether a host-table entry is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableState {
    Free,
    Joined,
}

pub(crate) fn table_state(pod: &Pod, host: HostId) -> TableState {
    // SeqCst: `Log::advance_head` orders this load with the log's registration word.
    match entry(pod, host).holder.load(Ordering::SeqCst) {
        FREE => TableState::Free,
        _ => TableState::Joined,
    }
}

/// Which host id to join as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Exactly this id; an error if it is taken or past the maximum.
    As(HostId),
    /// The lowest free id; an error if the table is full.
    AnyFree,
}

/// How a host runs.
#[derive(Clone, Debug, PartialEq)]
pub struct HostOptions {
    /// How it touches LNR.
    pub memory: MemoryKind,
    /// How often its background pump replays the log (and serves slot requests), so an
    /// idle host never holds the log's head back. `None`: no pump (tests that drive
    /// replay by hand).
    pub pump_interval: Option<Duration>,
    /// How long any wait on another host may last before it answers an error naming
    /// whom it waited for.
    pub wait_limit: Duration,
    /// Whether threads hand log appends to one combiner (one batch per round).
    pub flat_combining: bool,
    /// How many times the safe calls (`read`, `write`, ...) start over before answering
    /// [`Error::RetriesExhausted`].
    pub max_retries: u32,
    /// The background reclaimer keeps the records in use at or below this fraction of
    /// the pod's records (1.0: reclaim only when allocation finds none free).
    pub record_watermark: f64,
    /// Called before an object loses its coherence record on this host (see
    /// [`ReleaseHook`]).
    pub release_hook: Option<ReleaseHook>,
    /// Schedule chaos and injected faults for this host's threads (see
    /// [`crate::chaos`]); only in builds with the `chaos` feature.
    #[cfg(feature = "chaos")]
    pub chaos: Option<crate::chaos::ChaosConfig>,
}

/// Called with the record locked before an object loses its coherence record: before a
/// deallocation (reclaim, [`Host::make_read_shared`]) appends its event, and before a
/// delete of an object that has a record does. Returning `false` refuses: the record is
/// unlocked and kept; a deallocation reports that it did not happen, a delete answers
/// [`Error::ReleaseRefused`](crate::Error::ReleaseRefused).
///
/// The page cache writes a dirty page back to disk here, so that a read-shared page is
/// always clean and an evicted page is never lost. The hook runs on whichever thread
/// releases the record (the background reclaimer, a writer that needs a record, a
/// deleter); it must not call back into this host's object API for the same object.
#[derive(Clone)]
pub struct ReleaseHook(pub Arc<dyn Fn(&Releasing<'_>) -> bool + Send + Sync>);

impl ReleaseHook {
    /// Wraps `hook`.
    pub fn new(hook: impl Fn(&Releasing<'_>) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook))
    }
}

impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook(..)")
    }
}

impl PartialEq for ReleaseHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            memory: MemoryKind::Hardware,
            pump_interval: Some(Duration::from_millis(1)),
            wait_limit: Duration::from_secs(10),
            flat_combining: true,
            max_retries: 10_000,
            record_watermark: 0.9,
            release_hook: None,
            #[cfg(feature = "chaos")]
            chaos: None,
        }
    }
}

impl From<MemoryKind> for HostOptions {
    fn from(memory: MemoryKind) -> Self {
        Self {
            memory,
            ..Self::default()
        }
    }
}

impl HostOptions {
    /// The defaults: hardware memory, a pump every millisecond, 10 s waits, combining.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`HostOptions::memory`].
    #[must_use]
    pub fn memory(mut self, memory: MemoryKind) -> Self {
        self.memory = memory;
        self
    }

    /// Sets [`HostOptions::pump_interval`].
    #[must_use]
    pub fn pump_interval(mut self, interval: Option<Duration>) -> Self {
        self.pump_interval = interval;
        self
    }

    /// Sets [`HostOptions::wait_limit`].
    #[must_use]
    pub fn wait_limit(mut self, limit: Duration) -> Self {
        self.wait_limit = limit;
        self
    }

    /// Sets [`HostOptions::max_retries`].
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Sets [`HostOptions::record_watermark`] (clamped to 0..=1).
    #[must_use]
    pub fn record_watermark(mut self, fraction: f64) -> Self {
        self.record_watermark = fraction.clamp(0.0, 1.0);
        self
    }

    /// Sets [`HostOptions::release_hook`].
    #[must_use]
    pub fn release_hook(mut self, hook: ReleaseHook) -> Self {
        self.release_hook = Some(hook);
        self
    }

    /// Sets [`HostOptions::flat_combining`].
    #[must_use]
    pub fn flat_combining(mut self, on: bool) -> Self {
        self.flat_combining = on;
        self
    }

    /// Sets [`HostOptions::chaos`].
    #[cfg(feature = "chaos")]
    #[must_use]
    pub fn chaos(mut self, chaos: crate::chaos::ChaosConfig) -> Self {
        self.chaos = Some(chaos);
        self
    }
}

/// What a host's log machinery has done.
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
}

#[derive(Debug, Default)]
struct Counters {
    entries_appended: AtomicU64,
    batches_appended: AtomicU64,
    entries_replayed: AtomicU64,
    slots_dropped: AtomicU64,
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

/// What this host must do with what an appender holds if its event's outcome never
/// reaches it: the append was refused (nothing reached the log: the settle runs at once,
/// with no outcome), or its entry is in the log but the wait for its outcome failed (the
/// settle runs when replay applies the entry, with its outcome, after `ctail` covers it).
/// The locked-record rule of DESIGN section 8 rests on this: an error never leaves a
/// record locked, and a record whose dealloc or delete may still apply stays locked until
/// that is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// The appender holds nothing, or restores what it holds itself (a wrap event: safe
    /// whether it applies or not).
    Nothing,
    /// `record` was claimed (its word is `claimed`) for an alloc event: if the alloc wins it
    /// is the object's record; otherwise it goes back to free.
    Claimed { record: u32, claimed: RecordWord },
    /// `record` is locked (its word is `locked`) for a dealloc or a delete: if the event
    /// wins the record is freed, otherwise restored to `unlocked`. Until then it stays
    /// locked: a write must not start on an object that may turn read-shared or go away.
    Locked {
        record: u32,
        locked: RecordWord,
        unlocked: RecordWord,
    },
    /// A create into `slot`: if the create never reaches the log, the slot goes back to
    /// this host's pool (a create that loses in the log gives it back on replay).
    Create { slot: u64 },
    /// Slots `first..first + count`, taken from this host's pool for a grant: back to the
    /// pool if the grant never reaches the log.
    Grant { first: u64, count: u64 },
    /// A move of the object in `slot` to this host's DRAM: if it does not win (or never
    /// reaches the log), its orphan is dropped (deferred to the pump); if it wins late,
    /// the orphan stays until the object is moved back.
    MoveToHost { slot: u64 },
    /// AllLog: a `Lock` (a write's or a delete's): if it wins, this host holds the object's
    /// replicated lock and must append an `Unlock` (deferred to the pump).
    ReplicatedLock,
    /// AllLog: an `Unlock`, or a `Delete` made holding the lock: if it never reaches the
    /// log, the lock is still this host's, and an `Unlock` is appended later (deferred).
    ReplicatedUnlock,
}

/// Work left for the pump: what a settle could not finish at once.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Deferred {
    /// Free `record`, claimed for an alloc that did not win (its word is `claimed`). A host
    /// acting on a stale index entry may hold it locked for a moment.
    FreeClaimed { record: u32, claimed: RecordWord },
    /// AllLog: append an `Unlock` of `key`, whose replicated lock this host holds.
    Unlock { key: Box<[u8]> },
    /// Drop the orphan in `slot` of this host's partition, whose move did not win.
    DropOrphan { slot: u64 },
}

/// Everything one host runs, shared by its threads and its pump.
struct Shared {
    pod: Arc<Pod>,
    id: HostId,
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
    /// Whether this host serves RPCs ([`Host::set_serving`]).
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
    /// Errors the pump met in its background work, and the last one.
    background_errors: AtomicU64,
    last_background_error: Mutex<Option<Error>>,
}

/// A joined host. Share it between the threads that emulate it (`&Host` is enough; it is
/// `Sync`). Leaves the host table, and stops its pump, when dropped.
pub struct Host {
    shared: Arc<Shared>,
    pump: Option<std::thread::JoinHandle<()>>,
}

impl Host {
    /// Joins `pod` as `which`. `options` can be a [`MemoryKind`] alone.
    pub fn join(pod: &Arc<Pod>, which: Join, options: impl Into<HostOptions>) -> Result<Host> {
        let options = options.into();
        let max_hosts = pod.config().max_hosts;
        if let Join::As(host) = which {
            if host >= max_hosts {
                return Err(Error::HostOutOfRange { host, max_hosts });
            }
        }
        Log::begin_join(pod)?;
        let claimed = match which {
            Join::As(host) => try_claim(pod, host)
                .map(|()| host)
                .map_err(|holder_pid| Error::HostTaken { host, holder_pid }),
            Join::AnyFree => (0..max_hosts)
                .find(|host| try_claim(pod, *host).is_ok())
                .ok_or(Error::HostTableFull { max_hosts }),
        };
        let id = match claimed {
            Ok(id) => id,
            Err(error) => {
                Log::end_join(pod);
                return Err(error);
            }
        };
        // The new host replays from position 0: registration keeps head at 0 until
        // `end_join`, and this store happens before it.
        Log::ltail(pod, id).store(0, Ordering::SeqCst);
        entry(pod, id).joins.fetch_add(1, Ordering::Relaxed);
        Log::end_join(pod);

        let layout = pod.layout();
        let log = Log::new(pod);
        let coherence = layout.config.coherence;
        let index = Index::new(layout.slot_count, layout.record_count, max_hosts, coherence);
        let replica = Replica::new(index, log.entry_bytes());
        let claim_chunk_slots = slot_claim_batch(layout.slot_count, max_hosts);
        #[cfg(feature = "chaos")]
        let options_chaos = options.chaos.clone();
        let shared = Arc::new(Shared {
            pod: Arc::clone(pod),
            id,
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
            background_errors: AtomicU64::new(0),
            last_background_error: Mutex::new(None),
        });
        let mut host = Host { shared, pump: None };
        host.shared.catch_up()?;
        // A loom model drives replay by hand; its threads are model threads only.
        #[cfg(not(megalon_loom))]
        if let Some(interval) = host.shared.options.pump_interval {
            let shared = Arc::clone(&host.shared);
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

    /// Bumps this host's heartbeat word; returns the new count.
    pub fn heartbeat(&self) -> u64 {
        self.shared.heartbeat()
    }

    /// Leaves the host table, freeing the id for another participant.
    pub fn leave(self) {
        drop(self)
    }

    /// Looks `key` up, linearizably: the replica first applies every log entry whose
    /// append had completed when the call began.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        self.shared.check_key(key)?;
        self.shared.catch_up()?;
        Ok(self.shared.replica.index.read().lookup(key))
    }

    /// The replicated lock and counter of object `key`, linearizably (as
    /// [`Host::lookup`]), in a pod with [`Coherence::AllLog`]; `None` if there is no such
    /// object or the pod's coherence is split (its objects' locks are records in the SCR).
    pub fn replicated_lock(&self, key: &[u8]) -> Result<Option<ReplicatedLock>> {
        self.shared.check_key(key)?;
        if !self.shared.all_log {
            return Ok(None);
        }
        self.shared.catch_up()?;
        let index = self.shared.replica.index.read();
        Ok(index.lookup_locked(key).map(|(_, lock)| lock))
    }

    /// Creates object `key` holding `value`: writes the bytes into a free slot this host
    /// owns, makes them reach memory, then appends the create event.
    /// [`Error::ObjectExists`] if the key exists (the slot stays with this host).
    pub fn create(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.shared.create(key, value)
    }

    /// Deletes object `key` through the log; its slot goes to this host.
    /// [`Error::UnknownKey`] if there is none.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.shared.check_key(key)?;
        self.shared.with_counters(|c| self.shared.delete(key, c))
    }

    /// Applies every published log entry this replica has not applied yet, and serves
    /// slot requests addressed to this host. Returns the position applied up to.
    pub fn replay(&self) -> Result<u64> {
        let position = self.shared.replay(None)?;
        self.shared.serve_grants()?;
        Ok(position)
    }

    /// Log positions below this are applied on this host's replica.
    pub fn applied_position(&self) -> u64 {
        self.shared.replica.applied.load(Ordering::Acquire)
    }

    /// Every object in this host's replica, sorted by key.
    pub fn replica_snapshot(&self) -> Vec<(Vec<u8>, IndexEntry)> {
        self.shared.replica.index.read().snapshot()
    }

    /// Objects in this host's replica.
    pub fn replica_len(&self) -> u64 {
        self.shared.replica.index.read().len()
    }

    /// Bytes of DRAM this host's index holds.
    pub fn replica_heap_bytes(&self) -> u64 {
        self.shared.replica.index.read().heap_bytes()
    }

    /// Free slots this host owns.
    pub fn free_slots(&self) -> u64 {
        self.shared.slots.lock().len()
    }

    /// The published entries at positions `from..to` (stopping at the first unpublished
    /// one). Positions below the log's head may have been recycled: asking for them is an
    /// error.
    pub fn read_log(&self, from: u64, to: u64) -> Result<Vec<LoggedEvent>> {
        let head = Log::head(&self.shared.pod).load(Ordering::Acquire);
        if from < head {
            return Err(Error::LogRecycled { head });
        }
        let mut entry = vec![0u8; self.shared.log.entry_bytes()];
        let mut events = Vec::new();
        for position in from..to {
            if !self
                .shared
                .log
                .read(&self.shared.memory, position, &mut entry)
            {
                break;
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
        let pod = &self.shared.pod;
        (
            Log::head(pod).load(Ordering::Acquire),
            Log::ctail(pod).load(Ordering::Acquire),
            Log::tail(pod).load(Ordering::Acquire),
        )
    }

    /// Appends `event` as is (through the combiner, if on) and returns its outcome. For the
    /// crate's own models and tests: the object API appends events with their protocol.
    #[cfg(megalon_loom)]
    pub(crate) fn append_event(&self, event: &Event<'_>) -> Result<Outcome> {
        self.shared.submit(event)
    }

    /// What this host's log machinery has done.
    pub fn stats(&self) -> HostStats {
        let c = &self.shared.counters;
        HostStats {
            entries_appended: c.entries_appended.load(Ordering::Relaxed),
            batches_appended: c.batches_appended.load(Ordering::Relaxed),
            entries_replayed: c.entries_replayed.load(Ordering::Relaxed),
            slots_dropped: c.slots_dropped.load(Ordering::Relaxed),
        }
    }
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
}

impl Host {
    /// A view into this host's state for tests, benches and figures.
    pub fn inspect(&self) -> Inspect<'_> {
        Inspect { host: self }
    }
}

impl Inspect<'_> {
    /// Every record's word, read now.
    pub fn record_census(&self) -> RecordCensus {
        let records = Records::new(&self.host.shared.pod);
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

    /// Errors the pump met in the background.
    pub fn background_errors(&self) -> BackgroundErrors {
        let shared = &self.host.shared;
        BackgroundErrors {
            count: shared.background_errors.load(Ordering::Relaxed),
            last: shared.last_background_error.lock().clone(),
        }
    }

    /// What schedule chaos did on this host.
    #[cfg(feature = "chaos")]
    pub fn chaos_counts(&self) -> crate::chaos::ChaosCounts {
        self.host.shared.chaos.counts()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Objects in this host's DRAM go back to CXL: once it leaves, nobody could bring
        // them back. (An error here, a full log, cannot be reported from a drop.)
        let _ = self.shared.move_all_back();
        // Deferred unlocks (AllLog) are this host's to append: a last try.
        let _ = self.shared.replay(None);
        self.shared.run_deferred();
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(pump) = self.pump.take() {
            pump.thread().unpark();
            let _ = pump.join();
        }
        // SeqCst (Release would do for the next holder, whose claiming CAS pairs with it):
        // `Log::advance_head` orders its loads of holders with the log's registration.
        entry(&self.shared.pod, self.shared.id)
            .holder
            .store(FREE, Ordering::SeqCst);
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

/// Claims `host` for this process, or returns the pid of its holder.
fn try_claim(pod: &Pod, host: HostId) -> Result<(), u32> {
    // SeqCst: Acquire pairs with the store in `Host::drop` of the previous holder, and
    // `Log::advance_head` orders its loads of holders with this.
    entry(pod, host)
        .holder
        .compare_exchange(FREE, std::process::id(), Ordering::SeqCst, Ordering::SeqCst)
        .map(drop)
}

impl Pod {
    /// The joined hosts, as the host table shows them now.
    pub fn hosts(&self) -> Vec<HostInfo> {
        (0..self.config().max_hosts)
            .filter_map(|host| {
                let row = entry(self, host);
                // Acquire: pairs with the claiming CAS.
                let pid = row.holder.load(Ordering::Acquire);
                (pid != FREE).then(|| HostInfo {
                    host,
                    pid,
                    heartbeat: row.heartbeat.load(Ordering::Relaxed),
                    joins: row.joins.load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

impl Shared {
    fn heartbeat(&self) -> u64 {
        // Relaxed: the heartbeat only says "alive"; nothing is published with it.
        entry(&self.pod, self.id)
            .heartbeat
            .fetch_add(1, Ordering::Relaxed)
            + 1
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

    /// The tail check: makes the replica cover `ctail`.
    fn catch_up(&self) -> Result<()> {
        // Acquire: pairs with the AcqRel `fetch_max` in `append_batch`; entries below
        // ctail are published and their lines reached memory before it moved.
        let target = Log::ctail(&self.pod).load(Ordering::Acquire);
        if self.replica.applied.load(Ordering::Acquire) < target {
            self.replay(Some(target))?;
        }
        Ok(())
    }

    /// Applies published entries from this replica's position on. With a `target`, waits
    /// (bounded, without holding the index) for entries below it that are reserved but not
    /// yet published. Returns the position applied up to.
    fn replay(&self, target: Option<u64>) -> Result<u64> {
        let mut state = self.replica.replay.lock();
        let state = &mut *state;
        let start = self.replica.applied.load(Ordering::Acquire);
        let mut position = start;
        let mut backoff: Option<Backoff> = None;
        let mut failure = None;
        let layout = self.pod.layout();
        let slot_bytes = layout.config.slot_size_bytes as usize;
        let mut dropped = 0u64;
        let mut copies_dropped = 0u64;
        let mut settled = Vec::new();
        // Slots this replay gives this host (its deletes, its lost creates, claims and
        // grants). They join the pool only once `ctail` covers the events: a deleted
        // object's slot may be read by another host's reader until then, and that
        // reader's tail check must find the delete before anyone writes the slot again.
        let mut gained = SlotPool::default();
        'rounds: loop {
            let mut index = None;
            loop {
                if !self.log.read(&self.memory, position, &mut state.entry) {
                    break;
                }
                let decoded = Event::decode(position, &state.entry);
                let (author, event) = match decoded {
                    Ok(decoded) => decoded,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                };
                let index = index.get_or_insert_with(|| self.replica.index.write());
                let pool = if mutants::skipped(Step::SlotsReusedAfterCtail) {
                    index.apply(position, author, &event, self.id, &mut self.slots.lock())
                } else {
                    index.apply(position, author, &event, self.id, &mut gained)
                };
                let applied = match pool {
                    Ok(applied) => applied,
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                };
                if author == self.id {
                    match self.settles.lock().remove(&position) {
                        // Its appender gave up waiting: settle for it once `ctail` covers
                        // the entry (below).
                        Some((settle, event)) => settled.push((settle, applied.outcome, event)),
                        None => {
                            state.outcomes.insert(position, applied.outcome);
                        }
                    }
                }
                if let Some(grant) = applied.grant {
                    state.grants.push(grant);
                }
                if let Some(slot) = applied.drop_slot {
                    let is_move =
                        matches!(event, Event::MoveToHost { .. } | Event::MoveToCxl { .. });
                    let own_dealloc =
                        author == self.id && matches!(event, Event::RecordDealloc { .. });
                    let skipped = mutants::skipped(Step::ReplayDropsLines)
                        || is_move && mutants::skipped(Step::MoveDropsLines)
                        || own_dealloc && mutants::skipped(Step::DeallocDropsAuthorsLines);
                    if !skipped {
                        self.memory.flush(layout.slot_offset(slot), slot_bytes);
                    }
                    dropped += 1;
                }
                if let (Some(slot), Some(local)) = (applied.touched_slot, &self.local) {
                    let kept = matches!(event, Event::RecordAlloc { .. })
                        && mutants::skipped(Step::WriteInvalidatesCopies);
                    if !kept && local.invalidate_copy(index, slot) {
                        copies_dropped += 1;
                    }
                    if matches!(event, Event::Create { .. }) {
                        // A new object in the slot: the old one's counts are not its.
                        local.forget(slot);
                    }
                }
                position += 1;
                self.chaos.point(Point::ReplayBetweenEntries);
            }
            if index.is_some() {
                self.chaos.point(Point::ReplayBeforeCtail);
                // Before anyone can read what was just applied (they take the read lock
                // once we let go), `ctail` covers it: a read on another host that starts
                // after a read here ended then replays it too. Every entry below
                // `position` is published (we just read them). AcqRel: Release pairs with
                // the Acquire in every host's `catch_up`.
                Log::ctail(&self.pod).fetch_max(position, Ordering::AcqRel);
            }
            drop(index);
            if !gained.is_empty() {
                self.slots.lock().append(std::mem::take(&mut gained));
            }
            for (settle, outcome, event) in settled.drain(..) {
                self.settle(settle, Some(outcome), &event);
            }
            if failure.is_some() {
                // What was applied before the failure is covered by `ctail` (above).
                break 'rounds;
            }
            match target {
                Some(target) if position < target => {
                    let backoff =
                        backoff.get_or_insert_with(|| Backoff::new(self.options.wait_limit));
                    if !backoff.snooze() {
                        failure = Some(Error::ReplayStalled {
                            position,
                            waited_ms: backoff.waited().as_millis() as u64,
                        });
                        break 'rounds;
                    }
                }
                _ => break 'rounds,
            }
        }
        if dropped > 0 {
            // The dropped lines are gone before anyone looks the new index up.
            self.memory.fence();
            self.counters
                .slots_dropped
                .fetch_add(dropped, Ordering::Relaxed);
        }
        if copies_dropped > 0 {
            self.with_counters(|c| {
                c.add(crate::counters::Counter::CopiesInvalidated, copies_dropped)
            });
        }
        if position > start {
            // Release: pairs with the Acquire in `catch_up` (this host's readers) and the
            // SeqCst loads in `Log::advance_head` (appenders on every host).
            self.replica.applied.store(position, Ordering::Release);
            Log::ltail(&self.pod, self.id).store(position, Ordering::SeqCst);
            self.counters
                .entries_replayed
                .fetch_add(position - start, Ordering::Relaxed);
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(position),
        }
    }

    /// Appends `event` (through the combiner, if on) and returns its outcome. For events
    /// whose appender holds nothing another host waits on: an error means the event may or
    /// may not take effect later.
    fn submit(&self, event: &Event<'_>) -> Result<Outcome> {
        self.submit_settled(event, Settle::Nothing)
    }

    /// Appends `event`, whose appender holds what `settle` says. On success the caller
    /// goes on with the outcome; on an error this host settles what the caller held (at
    /// once, or when replay applies the entry), and the caller must not touch it.
    fn submit_settled(&self, event: &Event<'_>, settle: Settle) -> Result<Outcome> {
        let owned = OwnedEvent::new(event);
        if self.options.flat_combining {
            let result =
                self.combiner
                    .submit(owned.clone(), settle, self.options.wait_limit, |requests| {
                        self.append_batch(requests)
                    });
            if let Err(Error::CombinerStalled { .. }) = result {
                // Withdrawn from the queue unserved: nothing reached the log.
                self.settle(settle, None, &owned);
            }
            result
        } else {
            self.append_batch(&[(owned, settle)])
                .pop()
                .expect("one result per event")
        }
    }

    /// Appends `requests` in as few batches as the ring allows, applies them on this
    /// replica, advances `ctail`, and returns their outcomes in order. A request that
    /// fails is settled here: at once if it never reached the log, else when replay
    /// applies it.
    fn append_batch(&self, requests: &[(OwnedEvent, Settle)]) -> Vec<Result<Outcome>> {
        let mut results = Vec::with_capacity(requests.len());
        let mut refused: Option<Error> = None;
        for batch in requests.chunks(self.log.capacity() as usize) {
            if let Some(error) = &refused {
                // An earlier batch failed: these are not appended either.
                for (event, settle) in batch {
                    self.settle(*settle, None, event);
                    results.push(Err(error.clone()));
                }
                continue;
            }
            match self.append_chunk(batch) {
                Ok(outcomes) => results.extend(outcomes),
                Err(error) => {
                    for (event, settle) in batch {
                        self.settle(*settle, None, event);
                        results.push(Err(error.clone()));
                    }
                    refused = Some(error);
                }
            }
        }
        results
    }

    /// Appends one batch (at most the ring's capacity). `Err`: nothing of it reached the
    /// log. `Ok`: a result per event; an event whose outcome could not be confirmed is an
    /// `Err` whose settle replay runs when it applies the entry.
    fn append_chunk(&self, batch: &[(OwnedEvent, Settle)]) -> Result<Vec<Result<Outcome>>> {
        let entry_bytes = self.log.entry_bytes();
        let count = batch.len() as u64;
        let mut entries = vec![0u8; entry_bytes * batch.len()];
        for ((event, _), entry) in batch.iter().zip(entries.chunks_exact_mut(entry_bytes)) {
            event.event().encode(self.id, entry);
        }
        if self.chaos.fail(Fault::Refuse) {
            return Err(Error::InjectedFault {
                fault: Fault::Refuse.name(),
            });
        }
        let start = self.log.reserve(
            &self.pod,
            count,
            self.options.wait_limit,
            &self.chaos,
            || self.replay(None).map(drop),
        )?;
        self.chaos.point(Point::AppendAfterReserve);
        for (i, entry) in entries.chunks_exact(entry_bytes).enumerate() {
            self.log.write(&self.memory, start + i as u64, entry);
        }
        self.counters
            .entries_appended
            .fetch_add(count, Ordering::Relaxed);
        self.counters
            .batches_appended
            .fetch_add(1, Ordering::Relaxed);
        self.chaos.point(Point::AppendAfterPublish);
        // Replay applies our entries (and all before them) and advances `ctail` over them
        // before it releases the index.
        let confirmed = if self.chaos.fail(Fault::Unconfirmed) {
            Err(Error::InjectedFault {
                fault: Fault::Unconfirmed.name(),
            })
        } else {
            self.replay(Some(start + count)).map(drop)
        };
        let mut state = self.replica.replay.lock();
        let results = batch
            .iter()
            .enumerate()
            .map(|(i, (event, settle))| {
                let position = start + i as u64;
                match (state.outcomes.remove(&position), &confirmed) {
                    (Some(outcome), _) => Ok(outcome),
                    (None, Ok(())) => unreachable!("replay applied every entry up to ours"),
                    (None, Err(error)) => {
                        // In the log, not applied yet: its settle runs when it is.
                        self.settles
                            .lock()
                            .insert(position, (*settle, event.clone()));
                        Err(error.clone())
                    }
                }
            })
            .collect();
        Ok(results)
    }

    /// Settles what an appender held (see [`Settle`]): `outcome` is its event's, or `None`
    /// if the event never reached the log. Runs on the failing appender's thread, or in
    /// replay (holding the replay lock, after `ctail` covers the entry): it touches only
    /// record words, this host's slot pool and its deferred work.
    fn settle(&self, settle: Settle, outcome: Option<Outcome>, event: &OwnedEvent) {
        let records = Records::new(&self.pod);
        match settle {
            Settle::Nothing => {}
            Settle::Claimed { record, claimed } => {
                if outcome != Some(Outcome::RecordAllocated) {
                    self.free_claimed(record, claimed);
                }
            }
            Settle::Locked {
                record,
                locked,
                unlocked,
            } => {
                let won = match outcome {
                    Some(Outcome::RecordDeallocated) => true,
                    Some(Outcome::Deleted { record: freed, .. }) => freed == Some(record),
                    _ => false,
                };
                let to = if won {
                    RecordWord {
                        in_use: false,
                        locked: false,
                        counter: locked.counter & !1,
                    }
                } else {
                    unlocked
                };
                // Only the lock's holder changes a locked record.
                let changed = records.compare_exchange(record, locked, to);
                debug_assert!(changed.is_ok(), "record {record} changed under our lock");
                if won && changed.is_ok() {
                    self.records_in_use().fetch_sub(1, Ordering::Relaxed);
                }
            }
            Settle::Create { slot } => {
                if outcome.is_none() {
                    self.slots.lock().push(slot);
                }
            }
            Settle::Grant { first, count } => {
                if outcome.is_none() {
                    self.slots.lock().add_range(first, count);
                }
            }
            Settle::MoveToHost { slot } => {
                if outcome != Some(Outcome::Moved) {
                    self.deferred.lock().push(Deferred::DropOrphan { slot });
                }
            }
            Settle::ReplicatedLock => {
                if outcome == Some(Outcome::Locked) {
                    self.defer_unlock(event);
                }
            }
            Settle::ReplicatedUnlock => {
                if outcome.is_none() {
                    self.defer_unlock(event);
                }
            }
        }
    }

    fn defer_unlock(&self, event: &OwnedEvent) {
        let key = match event.event() {
            Event::Lock { key } | Event::Unlock { key } | Event::Delete { key, .. } => key,
            other => unreachable!("a replicated lock's settle on {other:?}"),
        };
        self.deferred
            .lock()
            .push(Deferred::Unlock { key: key.into() });
    }

    /// Frees `record`, claimed (word `claimed`) for an alloc that did not win, by a CAS
    /// from that word. A host acting on a stale index entry may hold it locked for a
    /// moment (it then catches up, sees the record's old object changed, and restores the
    /// word): then the pump tries again.
    fn free_claimed(&self, record: u32, claimed: RecordWord) {
        let records = Records::new(&self.pod);
        let free = RecordWord {
            in_use: false,
            locked: false,
            counter: claimed.counter,
        };
        if mutants::skipped(Step::RecordFreeByCas) {
            // The defect this step fixed: a blind store over whatever the word holds now.
            records.store(record, free);
            self.records_in_use().fetch_sub(1, Ordering::Relaxed);
            return;
        }
        self.chaos.point(Point::AllocLostBeforeFree);
        match records.compare_exchange(record, claimed, free) {
            Ok(()) => {
                self.records_in_use().fetch_sub(1, Ordering::Relaxed);
            }
            Err(now) => {
                debug_assert!(
                    now.in_use && now.locked,
                    "record {record}: claimed {claimed:?}, now {now:?}"
                );
                self.deferred
                    .lock()
                    .push(Deferred::FreeClaimed { record, claimed });
            }
        }
    }

    /// Does the work settles left for the pump. Returns how many items are still waiting.
    fn run_deferred(&self) -> usize {
        let work = std::mem::take(&mut *self.deferred.lock());
        for item in work {
            match item {
                Deferred::FreeClaimed { record, claimed } => self.free_claimed(record, claimed),
                Deferred::DropOrphan { slot } => {
                    if self.drop_orphan(slot).is_err() {
                        self.deferred.lock().push(Deferred::DropOrphan { slot });
                    }
                }
                Deferred::Unlock { key } => {
                    let event = Event::Unlock { key: &key };
                    if let Ok(outcome) = self.submit_settled(&event, Settle::ReplicatedUnlock) {
                        debug_assert!(
                            matches!(outcome, Outcome::Unlocked { .. } | Outcome::NotFound),
                            "a deferred unlock of a lock we hold: {outcome:?}"
                        );
                        self.with_counters(|c| c.add(crate::counters::Counter::UnlockEvents, 1));
                    }
                }
            }
        }
        self.pending_work()
    }

    /// Settles waiting for their entries, and deferred work.
    fn pending_work(&self) -> usize {
        let _replay = self.replica.replay.lock();
        self.settles.lock().len() + self.deferred.lock().len()
    }

    /// Notes an error of the pump's background work.
    fn background_error(&self, error: Error) {
        self.background_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_background_error.lock() = Some(error);
    }

    /// Gives slots to the hosts whose requests named this host as donor.
    fn serve_grants(&self) -> Result<()> {
        let grants = std::mem::take(&mut self.replica.replay.lock().grants);
        for (to, count) in grants {
            let ranges = self.slots.lock().take_for_grant(count);
            for (first, count) in ranges {
                self.submit_settled(
                    &Event::GrantSlots { to, first, count },
                    Settle::Grant { first, count },
                )?;
            }
        }
        Ok(())
    }

    /// A free slot this host owns: from its pool, else claimed from the unclaimed range,
    /// else asked of the host with the most (bounded wait).
    fn take_slot(&self) -> Result<u64> {
        let mut backoff = Backoff::new(self.options.wait_limit);
        let mut asked = false;
        loop {
            if let Some(slot) = self.slots.lock().pop() {
                return Ok(slot);
            }
            let unclaimed_left = {
                let index = self.replica.index.read();
                index.slots.unclaimed.end - index.slots.unclaimed.start
            };
            if unclaimed_left > 0 {
                self.submit(&Event::ClaimSlots {
                    count: self.claim_chunk_slots,
                })?;
                continue;
            }
            if !asked {
                self.submit(&Event::NeedSlots {
                    count: self.claim_chunk_slots,
                })?;
                asked = true;
            }
            self.replay(None)?;
            if !backoff.snooze() {
                return Err(Error::SlotsExhausted {
                    host: self.id,
                    slot_count: self.pod.layout().slot_count,
                });
            }
        }
    }

    fn create(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_key(key)?;
        let slot_size_bytes = self.pod.config().slot_size_bytes;
        if value.len() as u64 > slot_size_bytes {
            return Err(Error::ValueTooLarge {
                value_bytes: value.len(),
                slot_size_bytes,
            });
        }
        let slot = self.take_slot()?;
        let offset = self.pod.layout().slot_offset(slot);
        // The slot may have held another object whose lines this host still caches: drop
        // them before a write that may fill part of a line from the cache.
        self.memory.flush(offset, slot_size_bytes as usize);
        self.memory.fence();
        self.memory.write(offset, value);
        if !mutants::skipped(Step::CreateWritesBack) {
            self.memory.write_back(offset, value.len());
        }
        self.clear_accessor(slot);
        // The bytes are in memory before the create event is.
        self.memory.fence();
        self.chaos.point(Point::CreateBeforeEvent);
        match self.submit_settled(&Event::Create { key, slot }, Settle::Create { slot })? {
            Outcome::Created => {
                self.with_counters(|c| c.add(crate::counters::Counter::Creates, 1));
                Ok(())
            }
            _ => Err(Error::ObjectExists),
        }
    }

    fn pump(&self, interval: Duration) {
        // Rounds left in which the pump only yields between rounds: after it served an
        // RPC, more may follow, and each waits for the pump while it sleeps.
        let mut busy_rounds = 0u32;
        while !self.stop.load(std::sync::atomic::Ordering::Acquire) {
            // Errors also surface to the host's own operations, which replay too; the
            // pump counts them and keeps the last (`Host::background_errors`). None of
            // them leaves a record locked: every path that holds one settles it.
            match self.replay(None) {
                Ok(_) => {
                    self.run_deferred();
                    if let Err(error) = self.serve_grants() {
                        self.background_error(error);
                    }
                    if let Err(error) = self.reclaim_to_watermark() {
                        self.background_error(error);
                    }
                }
                Err(error) => self.background_error(error),
            }
            match self.serve_rpcs(&()) {
                Ok(served) if served > 0 => busy_rounds = PUMP_BUSY_ROUNDS,
                Ok(_) => {}
                Err(error) => self.background_error(error),
            }
            self.heartbeat();
            if busy_rounds > 0 {
                busy_rounds -= 1;
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(interval);
            }
        }
    }
}
