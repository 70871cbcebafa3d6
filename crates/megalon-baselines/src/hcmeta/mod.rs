//! HCMeta, Tigon's way of sharing objects over partly-coherent CXL memory (the MEGALON
//! paper's main baseline), in three variants behind the KV store's [`Scheme`] trait:
//!
//! | name | rows live in | SCR |
//! | --- | --- | --- |
//! | `hcmeta` | LNR, one slot per row of the owner's partition | a budget per host |
//! | `hcmeta-local` | the owner's DRAM; sharing copies a row into an LNR slot | a budget per host |
//! | `hcmeta-unlimited` | LNR | enough to share every row: never unshares |
//!
//! **Partitions.** Keys are spread over the hosts by a hash (the shard map, a pure
//! function every host computes). The owner keeps a local index in DRAM (key to row)
//! and one local latch per row. It reads and writes its unshared rows with no flush at
//! all: nobody else touches them.
//!
//! **Sharing.** A host that needs another host's object looks the key up in the owner's
//! *CXL index* (in SCR, inline keys, written only by the owner; see [`index`]) to find
//! the object's 8-byte *record* (in SCR: lock, clock bit, dirty bit, host bitmap, row
//! offset; see [`record`]). If the key is not there it asks the owner through the
//! owner's RPC ring (the core's [`megalon_core::rpc`]), and the owner *shares* the
//! row: makes its bytes reach memory, sets a record with only its own bit, links the
//! entry into the index. Reads take the record's lock shared, writes exclusive, and
//! follow Tigon's flush rules: a reader whose bit is clear invalidates the row's lines
//! before copying and sets its bit; a writer whose bit is clear invalidates first (a
//! partial write fills lines from the cache), writes back what it wrote and leaves only
//! its own bit set.
//!
//! **The budget.** Each host's share of SCR holds its index and records: per shareable
//! object a bucket word, the record, a link word and the key inline, i.e.
//! [`scr_bytes_per_shared_object`]`(max_key_bytes)` = 24 + the key rounded up to 8 bytes
//! (48 bytes for 24-byte keys, 64 for 40-byte keys). So a budget of `B` bytes per host
//! shares [`shared_objects_for_budget`]`(B, max_key_bytes)` objects at once, and longer
//! keys share fewer (the paper's Figure 9). When sharing one more object would pass the
//! budget, the owner *unshares* one with CLOCK (non-owner accesses set the clock bit;
//! the hand clears set bits and unshares the first object with a clear bit that nobody
//! holds). A later access by another host has to ask again: that is *churn*.
//!
//! **Creates and deletes** of another host's key go to its owner through the ring (as in
//! the paper's section 6.11); a remote create leaves the object shared, as Tigon's
//! remote insert does. Any create shares the new object while the budget has a free
//! entry (without unsharing another for it): so HCMeta-Unlimited shares every object
//! when it is created and never on demand.
//!
//! **Serving.** Every handle polls its host's ring at each operation (two SCR loads) and
//! serves it while it waits for a reply of its own; a background thread per host serves
//! when no worker does (spinning briefly, then sleeping tens of microseconds, a few
//! hundred once idle for a while). Every wait on another host is bounded: an owner that
//! stops serving makes its requesters fail with
//! [`Error::OwnerUnresponsive`](megalon_kv::Error::OwnerUnresponsive).
//!
//! Report counters (summed over threads; each thread counts in a block of its own):
//! `reads`, `writes`, `creates`, `deletes` (operations done), `retries` (a lookup that
//! turned stale), `waits for a lock`, `lines invalidated`, `lines written back`, `SCR
//! atomics` (loads, stores and read-modify-writes of SCR words, ring polls included),
//! `churn` (operations that found their object unshared and had its owner share it),
//! `rpcs` (every request: also creates, deletes, and lookups of keys that do not exist),
//! `requests served`, `shares`, `unshares`, `clock bits cleared`, `rows copied`
//! (HCMeta-Local's copies between DRAM and LNR). Gauges: `shared objects`, `shareable
//! objects`, `objects`. The SCR list covers the application SCR (the pod's own regions,
//! which these schemes do not use, are a page or two more).
//!
//! ```
//! use megalon_baselines::hcmeta::{HcMeta, HcMetaConfig};
//! use megalon_core::MemoryKind;
//! use megalon_kv::Store;
//!
//! // Three hosts, 1,000 keys of up to 24 bytes, 128-byte objects, room to share 16
//! // objects per host, simulated non-coherent memory.
//! let config = HcMetaConfig::new(3, 1_000, 128)
//!     .max_key_bytes(24)
//!     .scr_budget_bytes(Some(16 * megalon_baselines::hcmeta::scr_bytes_per_shared_object(24)));
//! let store = Store::new(HcMeta::new(config, |host| MemoryKind::simulated(host as u64))?);
//! let (mut a, mut b) = (store.handle(0)?, store.handle(1)?);
//! a.put(b"greeting", b"hello")?;
//! assert_eq!(b.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
//! b.put(b"greeting", b"hello again")?;
//! assert_eq!(a.get(b"greeting")?.as_deref(), Some(&b"hello again"[..]));
//! # Ok::<(), megalon_kv::Error>(())
//! ```

mod counters;
mod geometry;
mod handle;
mod hash;
pub mod index;
mod owner;
pub mod record;
mod ring;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use megalon_core::rpc;
use megalon_core::{
    limits::{
        LINE_BYTES, MAX_KEY_BYTES_LIMIT, MAX_SLOT_SIZE_BYTES, MIN_LOG_CAPACITY_ENTRIES, PAGE_BYTES,
    },
    Backing, Memory, MemoryKind, Pod, PodConfig,
};
use megalon_kv::{Limits, Report, Result, Scheme};

use counters::{Counters, NAMES};
use geometry::Sizes;
pub use geometry::{rows_per_host, scr_bytes_per_shared_object, shared_objects_for_budget};
pub use handle::HcMetaHandle;
use hash::KeyHash;
use owner::HostState;

/// Most hosts: the record's bitmap has 16 bits.
pub const MAX_HOSTS: usize = record::BITMAP_HOSTS;
/// Fewest entries of a host's RPC ring.
pub const MIN_RING_ENTRIES: u64 = 4;
/// Requests a handle serves at most when it polls at the start of an operation.
const SERVE_BATCH: usize = 8;
/// Polls the background server makes, yielding between them, before it starts to sleep.
/// (Spinning 32 `pause`s between them, about 60 us after each request it served, it kept
/// a core from the workers where threads outnumber cores; megalon's pump yields too.)
const IDLE_YIELDS: u32 = 64;
/// The background server's sleep between polls once it has yielded (timer slack makes it
/// longer in practice, around 60 us on Linux).
const IDLE_SLEEP: Duration = Duration::from_micros(10);
/// Sleeps after which an idle background server sleeps [`LONG_IDLE_SLEEP`] instead: a
/// host whose workers are busy is served by their polls anyway.
const LONG_IDLE_ROUNDS: u32 = 200;
/// The background server's sleep once it has been idle for a while.
const LONG_IDLE_SLEEP: Duration = Duration::from_micros(200);

/// Where an owner's rows live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In LNR (HCMeta): sharing and unsharing move only metadata.
    Cxl,
    /// In the owner's DRAM (HCMeta-Local): sharing copies the row into LNR, unsharing
    /// copies it back if it was written.
    Local,
}

/// What an HCMeta scheme is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcMetaConfig {
    /// Hosts of the pod (1 to [`MAX_HOSTS`]), all run by this process.
    pub hosts: usize,
    /// Keys the store must hold: each host's partition gets [`rows_per_host`] rows.
    pub keys: u64,
    /// Bytes of an object (a multiple of 64).
    pub object_bytes: usize,
    /// Longest key, in bytes (at most 1024): keys are inline in the CXL index.
    pub max_key_bytes: usize,
    /// SCR each host may spend on its CXL index and records (bytes, per host), or `None`
    /// for enough to share every row (HCMeta-Unlimited). At least
    /// [`scr_bytes_per_shared_object`]; more than the partition needs is capped.
    pub scr_budget_bytes: Option<u64>,
    /// Where rows live.
    pub placement: Placement,
    /// Entries of each host's RPC ring (at least [`MIN_RING_ENTRIES`]).
    pub ring_entries: u64,
    /// How long any wait on another host or thread lasts before it fails.
    pub wait_limit: Duration,
    /// Times an operation starts over (its lookup turned stale) before it fails.
    pub max_retries: u32,
    /// The NUMA node the pod's memory comes from (CXL emulated on a NUMA machine, as the
    /// pods of the schemes it is compared with), or `None`.
    pub numa_node: Option<u32>,
}

impl HcMetaConfig {
    /// `hosts` hosts holding up to `keys` keys of `object_bytes`-byte objects; keys up
    /// to 32 bytes, no SCR limit, rows in LNR, rings of 64 entries, 10 s waits, 10,000
    /// retries.
    pub fn new(hosts: usize, keys: u64, object_bytes: usize) -> Self {
        Self {
            hosts,
            keys,
            object_bytes,
            max_key_bytes: 32,
            scr_budget_bytes: None,
            placement: Placement::Cxl,
            ring_entries: 64,
            wait_limit: Duration::from_secs(10),
            max_retries: 10_000,
            numa_node: None,
        }
    }

    megalon_core::setters! { HcMetaConfig:
        max_key_bytes: usize,
        scr_budget_bytes: Option<u64>,
        placement: Placement,
        ring_entries: u64,
        wait_limit: Duration,
        max_retries: u32,
        numa_node: Option<u32>,
    }

    /// The scheme's name: `hcmeta`, `hcmeta-local` or `hcmeta-unlimited`
    /// (`hcmeta-local-unlimited` for local rows without a budget).
    pub fn name(&self) -> &'static str {
        match (self.placement, self.scr_budget_bytes.is_some()) {
            (Placement::Cxl, true) => "hcmeta",
            (Placement::Cxl, false) => "hcmeta-unlimited",
            (Placement::Local, true) => "hcmeta-local",
            (Placement::Local, false) => "hcmeta-local-unlimited",
        }
    }

    /// Objects each host can have shared at once: what its budget pays for, at most its
    /// partition's rows.
    pub fn shared_objects_per_host(&self) -> u64 {
        let rows = rows_per_host(self.keys, self.hosts.max(1));
        match self.scr_budget_bytes {
            Some(budget) => shared_objects_for_budget(budget, self.max_key_bytes).min(rows),
            None => rows,
        }
    }

    /// Checks every parameter and sizes the regions.
    fn sizes(&self) -> std::result::Result<Sizes, megalon_core::Error> {
        use megalon_core::Error as E;
        for (parameter, value) in [
            ("hosts", self.hosts as u64),
            ("keys", self.keys),
            ("object_bytes", self.object_bytes as u64),
            ("max_key_bytes", self.max_key_bytes as u64),
        ] {
            if value == 0 {
                return Err(E::ZeroSize { parameter });
            }
        }
        if self.hosts > MAX_HOSTS {
            return Err(E::TooManyHosts {
                requested: self.hosts as u32,
                limit: MAX_HOSTS as u32,
            });
        }
        let object_bytes = self.object_bytes as u64;
        if !object_bytes.is_multiple_of(LINE_BYTES) {
            return Err(E::SlotSizeNotLineMultiple {
                slot_size_bytes: object_bytes,
            });
        }
        for (parameter, value, limit) in [
            ("object_bytes", object_bytes, MAX_SLOT_SIZE_BYTES),
            (
                "max_key_bytes",
                self.max_key_bytes as u64,
                u64::from(MAX_KEY_BYTES_LIMIT),
            ),
        ] {
            if value > limit {
                return Err(E::AboveLimit {
                    parameter,
                    value,
                    limit,
                });
            }
        }
        if self.ring_entries < MIN_RING_ENTRIES {
            return Err(E::BelowMinimum {
                parameter: "ring_entries",
                value: self.ring_entries,
                minimum: MIN_RING_ENTRIES,
            });
        }
        let per_object = scr_bytes_per_shared_object(self.max_key_bytes);
        if let Some(budget) = self.scr_budget_bytes {
            if budget < per_object {
                return Err(E::BelowMinimum {
                    parameter: "scr_budget_bytes",
                    value: budget,
                    minimum: per_object,
                });
            }
        }
        let rows_per_host = rows_per_host(self.keys, self.hosts);
        let shared_per_host = self.shared_objects_per_host();
        for (parameter, value) in [
            ("rows per host", rows_per_host),
            ("shared objects per host", shared_per_host),
        ] {
            // Rows and entries are u32 with one value reserved.
            if value >= u64::from(u32::MAX) {
                return Err(E::AboveLimit {
                    parameter,
                    value,
                    limit: u64::from(u32::MAX) - 1,
                });
            }
        }
        let index_bytes = shared_per_host * per_object;
        let share_region_bytes = self
            .scr_budget_bytes
            .unwrap_or(index_bytes)
            .min(rows_per_host * per_object)
            .max(index_bytes)
            .next_multiple_of(LINE_BYTES);
        let sizes = Sizes {
            object_bytes,
            max_key_bytes: self.max_key_bytes,
            rows_per_host,
            shared_per_host,
            share_region_bytes,
            slots_per_host: match self.placement {
                Placement::Cxl => rows_per_host,
                Placement::Local => shared_per_host,
            },
            ring_entries: self.ring_entries,
            ring_entry_bytes: rpc::entry_bytes(self.max_key_bytes, object_bytes),
        };
        let app_lnr_lines = sizes.lnr_per_host() * self.hosts as u64 / LINE_BYTES;
        if app_lnr_lines >= 1 << record::OFFSET_BITS {
            return Err(E::AboveLimit {
                parameter: "LNR lines",
                value: app_lnr_lines,
                limit: (1 << record::OFFSET_BITS) - 1,
            });
        }
        Ok(sizes)
    }
}

/// What every operation needs to know, copied once.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) hosts: usize,
    pub(crate) placement: Placement,
    pub(crate) object_bytes: usize,
    pub(crate) max_key_bytes: usize,
    pub(crate) wait_limit: Duration,
    pub(crate) max_retries: u32,
    /// Records hold row offsets from here.
    pub(crate) app_lnr_offset: u64,
}

/// What the scheme, its handles and its server threads share.
pub(crate) struct Inner {
    pub(crate) pod: Arc<Pod>,
    pub(crate) config: HcMetaConfig,
    sizes: Sizes,
    pub(crate) settings: Settings,
    pub(crate) hosts: Vec<HostState>,
    stop: AtomicBool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcMeta")
            .field("name", &self.config.name())
            .field("config", &self.config)
            .field("shared_objects_per_host", &self.sizes.shared_per_host)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Bytes of a ring entry (a handle's scratch request).
    pub(crate) fn ring_entry_bytes(&self) -> usize {
        self.sizes.ring_entry_bytes as usize
    }

    /// Serves up to `max` requests waiting on host `host`'s ring, if no other thread of
    /// the host is serving and the host has not been stopped; `c` counts what it does.
    /// The look at the ring is not counted here: one that finds nothing reads lines
    /// nothing changed, a hit in the coherent cache, as megalon's look at `ctail` that
    /// finds nothing new is not counted (the CXL model charges what is counted, and must
    /// charge both schemes' polls alike); one that finds a request is counted by the
    /// claim, which loads the same two words again. Returns the requests served.
    pub(crate) fn serve(&self, host: usize, c: &Counters, max: usize) -> usize {
        let state = &self.hosts[host];
        if state.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        #[cfg(test)]
        tests::after_stop_check();
        if !state.geometry.ring.pending(&self.pod) {
            return 0;
        }
        // The owner's SCR accesses are its own under the CXL cost model.
        state.memory.bind_scr();
        let Some(mut buf) = state.serving.try_lock() else {
            return 0;
        };
        // The host may have been stopped since our look at the flag: we may have been
        // preempted right after it, and what we found may be a request sent once
        // stopping returned. Stopping stores the flag and then takes this lock, so under
        // it we see the flag it stored (the lock orders its store before our load), or
        // it waits for us to let go. We look before each claim, not only the first, so
        // that it does not wait out a long run of requests.
        let ring = &state.geometry.ring;
        let mut served = 0;
        while served < max && !state.stopped.load(Ordering::Relaxed) {
            let Some(claimed) = ring.claim(&self.pod, c) else {
                break;
            };
            // A panic while serving still answers the sender (and frees the entry).
            let failed = owner::server_failed();
            ring.serve(
                &self.pod,
                &state.memory,
                claimed,
                &mut buf,
                c,
                failed,
                |request, buf| state.handle(&self.pod, &self.settings, request, buf, c),
            );
            served += 1;
        }
        c.add(counters::Counter::RequestsServed, served as u64);
        served
    }
}

/// Host `host`'s background server: serves its ring when no worker does; yields a
/// little when idle, then sleeps tens of microseconds, then (idle for longer) a few
/// hundred, so that it does not keep a core busy.
fn background(inner: Arc<Inner>, host: usize) {
    let c = inner.hosts[host].counters.register();
    let mut idle = 0u32;
    while !inner.stop.load(Ordering::Relaxed) {
        #[cfg(test)]
        if inner.hosts[host].background_paused.load(Ordering::Relaxed) {
            std::thread::sleep(IDLE_SLEEP);
            continue;
        }
        if inner.serve(host, &c, usize::MAX) > 0 {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle <= IDLE_YIELDS {
            std::thread::yield_now();
        } else if idle <= IDLE_YIELDS + LONG_IDLE_ROUNDS {
            std::thread::sleep(IDLE_SLEEP);
        } else {
            std::thread::sleep(LONG_IDLE_SLEEP);
        }
    }
}

/// An HCMeta scheme: a pod, the hosts this process runs on it, a server thread per host.
/// Dropping it stops the server threads (handles still serve while they work).
pub struct HcMeta {
    inner: Arc<Inner>,
    servers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for HcMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// The pod for `sizes`: the application regions hold everything; the core's own
/// regions are as small as the core allows (a two-entry log, one slot, one line of
/// records).
fn create_pod(config: &HcMetaConfig, sizes: &Sizes) -> Result<Pod> {
    let hosts = config.hosts as u64;
    let app_scr_bytes = hosts * sizes.scr_per_host();
    let app_lnr_bytes = hosts * sizes.lnr_per_host();
    let base = PodConfig::new()
        .slot_size_bytes(LINE_BYTES)
        .max_key_bytes(8)
        .log_capacity_entries(MIN_LOG_CAPACITY_ENTRIES)
        .record_width_bits(8)
        .max_hosts(config.hosts as u32)
        .app_scr_bytes(app_scr_bytes)
        .app_lnr_bytes(app_lnr_bytes)
        // HCMeta's hosts all start together and never join late.
        .join_area_bytes(0);
    let log_bytes = MIN_LOG_CAPACITY_ENTRIES * base.log_entry_bytes();
    let lnr_bytes = (log_bytes + app_lnr_bytes + LINE_BYTES).next_multiple_of(PAGE_BYTES);
    let mut scr_bytes = app_scr_bytes.next_multiple_of(PAGE_BYTES);
    let pod_config = loop {
        let candidate = base.clone().scr_bytes(scr_bytes).lnr_bytes(lnr_bytes);
        match megalon_core::Layout::new(&candidate) {
            Ok(_) => break candidate,
            Err(megalon_core::Error::LayoutDoesNotFit {
                region: megalon_core::Region::Scr,
                needed_bytes,
                ..
            }) => scr_bytes = needed_bytes.max(scr_bytes + PAGE_BYTES),
            Err(other) => return Err(other.into()),
        }
    };
    let backing = match config.numa_node {
        Some(node) => Backing::heap().numa_node(node),
        None => Backing::heap(),
    };
    Ok(Pod::create(&pod_config, backing)?)
}

impl HcMeta {
    /// Creates a pod on the heap for `config` and its hosts, host `h` accessing the
    /// pod's memory as `memory(h)` says, and starts a server thread per host.
    pub fn new(config: HcMetaConfig, memory: impl Fn(usize) -> MemoryKind) -> Result<HcMeta> {
        let sizes = config.sizes()?;
        let pod = Arc::new(create_pod(&config, &sizes)?);
        let settings = Settings {
            hosts: config.hosts,
            placement: config.placement,
            object_bytes: config.object_bytes,
            max_key_bytes: config.max_key_bytes,
            wait_limit: config.wait_limit,
            max_retries: config.max_retries,
            app_lnr_offset: pod.layout().app_lnr_offset,
        };
        let hosts = (0..config.hosts)
            .map(|host| {
                let memory = Memory::new(Arc::clone(&pod), memory(host));
                HostState::new(host, &pod, &sizes, memory)
            })
            .collect();
        let inner = Arc::new(Inner {
            pod,
            config,
            sizes,
            settings,
            hosts,
            stop: AtomicBool::new(false),
        });
        let servers = (0..inner.hosts.len())
            .map(|host| {
                let inner = Arc::clone(&inner);
                std::thread::Builder::new()
                    .name(format!("hcmeta-server-{host}"))
                    .spawn(move || background(inner, host))
                    .expect("spawning a server thread")
            })
            .collect();
        Ok(HcMeta { inner, servers })
    }

    /// The configuration.
    pub fn config(&self) -> &HcMetaConfig {
        &self.inner.config
    }

    /// The pod.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.inner.pod
    }

    /// The host that owns `key`.
    pub fn owner_of(&self, key: &[u8]) -> usize {
        KeyHash::of(key).owner(self.inner.config.hosts)
    }

    /// Objects each host can have shared at once.
    pub fn shared_objects_per_host(&self) -> u64 {
        self.inner.sizes.shared_per_host
    }

    /// Makes host `host` stop (`false`) or resume (`true`) answering requests, as a host
    /// that hangs would: for failure experiments. Its own operations still run. Once
    /// stopping returns, the host claims no request (one sent before included) until it
    /// resumes: stopping waits for a server already at work to answer the request it
    /// claimed.
    pub fn set_serving(&self, host: usize, serving: bool) -> Result<()> {
        let state = self
            .inner
            .hosts
            .get(host)
            .ok_or(megalon_kv::Error::UnknownHost {
                host,
                hosts: self.inner.hosts.len(),
            })?;
        state.stopped.store(!serving, Ordering::Relaxed);
        if !serving {
            // A server that looked at the flag before our store holds the serving lock
            // from before its first claim to after its last, and looks at the flag
            // again under it before each claim: waiting for the lock waits it out. A
            // server that takes the lock after us sees our store (see `Inner::serve`).
            drop(state.serving.lock());
        }
        Ok(())
    }
}

impl Drop for HcMeta {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        for server in self.servers.drain(..) {
            let _ = server.join();
        }
    }
}

impl Scheme for HcMeta {
    type Handle = HcMetaHandle;

    fn home_host(&self, key: &[u8]) -> Option<usize> {
        Some(self.owner_of(key))
    }

    fn name(&self) -> &'static str {
        self.inner.config.name()
    }

    fn limits(&self) -> Limits {
        Limits {
            max_key_bytes: self.inner.config.max_key_bytes,
            object_bytes: self.inner.config.object_bytes,
        }
    }

    fn hosts(&self) -> usize {
        self.inner.hosts.len()
    }

    fn handle(&self, host: usize) -> Result<HcMetaHandle> {
        HcMetaHandle::new(&self.inner, host)
    }

    fn report(&self) -> Report {
        let inner = &self.inner;
        let mut sums = counters::zero_sums();
        for host in &inner.hosts {
            host.counters.sum_into(&mut sums);
        }
        let sizes = &inner.sizes;
        let hosts = inner.hosts.len() as u64;
        let entries = sizes.shared_per_host;
        let records_bytes = hosts * entries * 8;
        let index_bytes = hosts * sizes.index_bytes() - records_bytes;
        let unused_bytes = hosts * (sizes.share_region_bytes - sizes.index_bytes());
        let ring_bytes = hosts * sizes.ring_scr_bytes();
        debug_assert_eq!(
            records_bytes + index_bytes + unused_bytes + ring_bytes,
            inner.pod.config().app_scr_bytes
        );
        Report {
            scheme: self.name(),
            counters: NAMES.iter().copied().zip(sums).collect(),
            gauges: vec![
                (
                    "shared objects",
                    inner.hosts.iter().map(HostState::shared_now).sum(),
                ),
                ("shareable objects", hosts * entries),
                ("objects", inner.hosts.iter().map(HostState::objects).sum()),
            ],
            scr: vec![
                ("CXL index (buckets, links, keys)", index_bytes),
                ("records", records_bytes),
                ("RPC ring words", ring_bytes),
                ("unused budget", unused_bytes),
            ],
        }
    }
}
