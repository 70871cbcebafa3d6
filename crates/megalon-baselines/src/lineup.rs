//! Every scheme built over the same sizes, behind one object-safe interface: what the
//! figures harness (`cargo xtask figures`) and the YCSB benchmarks loop over. Each is
//! sized from one [`Setup`]: the same keys, objects, hosts, and the same SCR, which each
//! scheme spends as it does (megalon: records; HCMeta: per-owner indexes, records and
//! RPC rings).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use megalon_core::{
    Backing, Coherence, HostOptions, MemoryKind, Pod, PodConfig, LINE_BYTES, PAGE_BYTES,
};
use megalon_kv::mix::{self, Choice, Inserts, MixRun, Plan};
use megalon_kv::{Megalon, Scheme, Store, LENGTH_PREFIX_BYTES};

use crate::all_log::AllLog;
use crate::hcmeta::{HcMeta, HcMetaConfig, Placement};

/// Which scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// megalon's object protocol ([`megalon_kv::Megalon`]).
    Megalon,
    /// Tigon's HCMeta with the SCR budget ([`HcMeta`]).
    HcMeta,
    /// HCMeta with each owner's partition in its local DRAM.
    HcMetaLocal,
    /// HCMeta without a budget.
    HcMetaUnlimited,
    /// megalon with lock and counter through the log ([`crate::AllLog`]).
    AllLog,
}

impl Kind {
    /// Every scheme.
    pub const ALL: [Kind; 5] = [
        Kind::Megalon,
        Kind::HcMeta,
        Kind::HcMetaLocal,
        Kind::HcMetaUnlimited,
        Kind::AllLog,
    ];

    /// The scheme's counter of churns in the paper's sense (section 6.2): megalon
    /// churns when it turns a read-shared object read-write-shared (a record
    /// allocation; the core's own "churn" counts only allocations that had to free
    /// another record first); HCMeta churns when it shares an unshared object on demand.
    pub fn churn_counter(self) -> &'static str {
        match self {
            Kind::Megalon | Kind::AllLog => "record allocs",
            Kind::HcMeta | Kind::HcMetaLocal | Kind::HcMetaUnlimited => "churn",
        }
    }

    /// The kind whose [`name`](Self::name) is `name`.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Its name in reports (the scheme's own [`Scheme::name`]).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Megalon => "megalon",
            Kind::HcMeta => "hcmeta",
            Kind::HcMetaLocal => "hcmeta-local",
            Kind::HcMetaUnlimited => "hcmeta-unlimited",
            Kind::AllLog => "all-log",
        }
    }
}

/// The sizes every scheme of a point is built with.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Hosts of the pod.
    pub hosts: usize,
    /// Keys loaded.
    pub keys: u64,
    /// Room for this many more (workload D inserts).
    pub extra_keys: u64,
    /// Bytes of every key (the longest a scheme must take).
    pub key_bytes: usize,
    /// Bytes of every value (objects add the store's 4-byte length).
    pub value_bytes: usize,
    /// The SCR all of a scheme's coherent metadata must fit in.
    pub scr_bytes: u64,
    /// megalon's record width.
    pub record_bits: u32,
    /// Bind the pod's memory to this NUMA node.
    pub numa_node: Option<u32>,
}

impl Setup {
    fn object_bytes(&self) -> u64 {
        ((LENGTH_PREFIX_BYTES + self.value_bytes) as u64).next_multiple_of(LINE_BYTES)
    }

    fn backing(&self) -> Backing {
        match self.numa_node {
            Some(node) => Backing::heap().numa_node(node),
            None => Backing::heap(),
        }
    }

    /// HCMeta's configuration: the same SCR, split between the hosts; each host's ring
    /// words come out of its share, the rest is its budget for shared objects.
    fn hcmeta_config(&self, kind: Kind) -> HcMetaConfig {
        let config = HcMetaConfig::new(
            self.hosts,
            self.keys + self.extra_keys,
            self.object_bytes() as usize,
        )
        .max_key_bytes(self.key_bytes);
        let ring_scr = 2 * LINE_BYTES + (config.ring_entries * 8).next_multiple_of(LINE_BYTES);
        let budget = (self.scr_bytes / self.hosts as u64).saturating_sub(ring_scr);
        match kind {
            Kind::HcMetaUnlimited => config.scr_budget_bytes(None),
            Kind::HcMetaLocal => config
                .scr_budget_bytes(Some(budget))
                .placement(Placement::Local),
            _ => config.scr_budget_bytes(Some(budget)),
        }
    }

    /// megalon's pod: the SCR given, 1 KiB-ish slots for every key and the inserts.
    fn megalon_config(&self) -> PodConfig {
        const LOG_ENTRIES: u64 = 1 << 16;
        let slot = self.object_bytes();
        let config = PodConfig::new()
            .slot_size_bytes(slot)
            .max_key_bytes(self.key_bytes.max(16) as u32)
            .log_capacity_entries(LOG_ENTRIES)
            .max_hosts(self.hosts as u32)
            .scr_bytes(self.scr_bytes)
            .record_width_bits(self.record_bits);
        let slots = self.keys + self.extra_keys + self.keys / 8 + 4096;
        let log_bytes = LOG_ENTRIES * config.log_entry_bytes();
        config.lnr_bytes((log_bytes + slots * slot).next_multiple_of(PAGE_BYTES))
    }
}

/// A store of one scheme.
pub trait Bench: Send + Sync {
    /// The scheme's name.
    fn name(&self) -> &'static str;
    /// Loads `plan`'s keys with `workers` threads, each first calling `on_start` with
    /// its host ([`mix::load_all_on`]).
    fn load(
        &self,
        plan: &Plan,
        workers: usize,
        on_start: &(dyn Fn(usize) + Sync),
    ) -> Result<(), String>;
    /// Runs `plan` with `workers` threads for `duration` ([`mix::run_plan_on`]).
    fn run(
        &self,
        plan: &Plan,
        workers: usize,
        duration: Duration,
        on_start: &(dyn Fn(usize) + Sync),
        tick: &mut dyn FnMut(u64, Duration),
    ) -> Result<MixRun, String>;
    /// The cost of one churn: `count` fresh keys after the plan's (the setup needs room
    /// for them in `extra_keys`), created through every host in turn, each written twice
    /// from host 0 while the other hosts run a read-only worker each; the first write
    /// churns where the scheme churns (megalon allocates a record; HCMeta shares an
    /// object another host owns).
    fn churn_cost(&self, plan: &Plan, count: u64) -> Result<ChurnCost, String>;
}

/// What [`Bench::churn_cost`] measured.
#[derive(Clone, Copy, Debug)]
pub struct ChurnCost {
    /// Mean microseconds of a first write.
    pub first_write_us: f64,
    /// Mean microseconds of a second write.
    pub second_write_us: f64,
    /// Churns the first writes made.
    pub churns: u64,
    /// Writes of each round.
    pub writes: u64,
}

impl ChurnCost {
    /// Microseconds one churn adds: the first writes' extra time over the churns.
    pub fn per_churn_us(&self) -> f64 {
        if self.churns == 0 {
            return 0.0;
        }
        (self.first_write_us - self.second_write_us) * self.writes as f64 / self.churns as f64
    }
}

struct Loaded<S: Scheme> {
    store: Store<S>,
}

impl<S: Scheme + 'static> Bench for Loaded<S> {
    fn name(&self) -> &'static str {
        self.store.scheme().name()
    }

    fn load(
        &self,
        plan: &Plan,
        workers: usize,
        on_start: &(dyn Fn(usize) + Sync),
    ) -> Result<(), String> {
        mix::load_all_on(&self.store, plan, workers, on_start, |_| {}).map_err(|e| e.to_string())
    }

    fn run(
        &self,
        plan: &Plan,
        workers: usize,
        duration: Duration,
        on_start: &(dyn Fn(usize) + Sync),
        tick: &mut dyn FnMut(u64, Duration),
    ) -> Result<MixRun, String> {
        mix::run_plan_on(&self.store, plan, workers, duration, on_start, tick)
            .map_err(|e| e.to_string())
    }

    fn churn_cost(&self, plan: &Plan, count: u64) -> Result<ChurnCost, String> {
        let hosts = self.store.scheme().hosts();
        let value = vec![0x77; plan.value_bytes];
        let keys: Vec<Vec<u8>> = (0..count)
            .map(|i| mix::key_of_len(plan.keys + i, plan.key_bytes))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            let mut kv = self.store.handle(i % hosts).map_err(|e| e.to_string())?;
            kv.insert(key, &value).map_err(|e| e.to_string())?;
        }
        // The other hosts are busy meanwhile, one read-only worker each, as in a run:
        // their workers are what serves HCMeta's requests.
        let busy = Plan {
            choice: Choice::Mix {
                write_ratio: 0.0,
                skew: 0.99,
            },
            ..*plan
        };
        let inserts = Inserts::new(&busy);
        let (stop, done) = (AtomicBool::new(false), AtomicU64::new(0));
        let measured = thread::scope(|scope| {
            let background: Vec<_> = (1..hosts)
                .map(|host| {
                    let (busy, inserts, stop, done) = (&busy, &inserts, &stop, &done);
                    scope.spawn(move || {
                        mix::run_plan_worker(
                            &self.store,
                            host,
                            host as u64,
                            busy,
                            inserts,
                            stop,
                            done,
                        )
                    })
                })
                .collect();
            let measured = self.time_writes(&keys, &value);
            stop.store(true, Ordering::Relaxed);
            for worker in background {
                worker
                    .join()
                    .expect("background worker panicked")
                    .map_err(|e| e.to_string())?;
            }
            measured
        })?;
        let (first, second, churns) = measured;
        let per = |d: Duration| d.as_secs_f64() * 1e6 / count as f64;
        Ok(ChurnCost {
            first_write_us: per(first),
            second_write_us: per(second),
            churns,
            writes: count,
        })
    }
}

impl<S: Scheme + 'static> Loaded<S> {
    /// Writes each of `keys` twice from host 0 (all first writes, then all second
    /// writes): the time of each round, and the churns of the first.
    fn time_writes(
        &self,
        keys: &[Vec<u8>],
        value: &[u8],
    ) -> Result<(Duration, Duration, u64), String> {
        let mut kv = self.store.handle(0).map_err(|e| e.to_string())?;
        let before = self.store.report();
        let mut first = Duration::ZERO;
        for key in keys {
            let began = Instant::now();
            kv.put(key, value).map_err(|e| e.to_string())?;
            first += began.elapsed();
        }
        let counter = Kind::named(self.name()).map_or("churn", Kind::churn_counter);
        let churns = self
            .store
            .report()
            .since(&before)
            .counter(counter)
            .unwrap_or(0);
        let mut second = Duration::ZERO;
        for key in keys {
            let began = Instant::now();
            kv.put(key, value).map_err(|e| e.to_string())?;
            second += began.elapsed();
        }
        Ok((first, second, churns))
    }
}

/// Builds `kind` over `setup`, empty.
pub fn build(kind: Kind, setup: &Setup) -> Result<Box<dyn Bench>, String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", kind.name());
    match kind {
        Kind::Megalon => {
            let pod = Pod::create(&setup.megalon_config(), setup.backing()).map_err(|e| err(&e))?;
            let scheme = Megalon::join(Arc::new(pod), setup.hosts, &HostOptions::new())
                .map_err(|e| err(&e))?;
            Ok(Box::new(Loaded {
                store: Store::new(scheme),
            }))
        }
        Kind::HcMeta | Kind::HcMetaLocal | Kind::HcMetaUnlimited => {
            let scheme = HcMeta::new(setup.hcmeta_config(kind), |_| MemoryKind::Hardware)
                .map_err(|e| err(&e))?;
            Ok(Box::new(Loaded {
                store: Store::new(scheme),
            }))
        }
        Kind::AllLog => {
            let config = setup.megalon_config().coherence(Coherence::AllLog);
            let pod = Pod::create(&config, setup.backing()).map_err(|e| err(&e))?;
            let scheme = AllLog::join(Arc::new(pod), setup.hosts, &HostOptions::new())
                .map_err(|e| err(&e))?;
            Ok(Box::new(Loaded {
                store: Store::new(scheme),
            }))
        }
    }
}
