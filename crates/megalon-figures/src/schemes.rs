//! The schemes a figure compares, built over the same sizes, behind one object-safe
//! interface so that a figure is a loop over schemes and points.

use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Backing, HostOptions, Pod, PodConfig, LINE_BYTES, PAGE_BYTES};
use megalon_kv::mix::{self, MixRun, Plan};
use megalon_kv::{Megalon, Scheme, Store, LENGTH_PREFIX_BYTES};

/// Which scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Megalon,
    HcMeta,
    HcMetaLocal,
    HcMetaUnlimited,
    AllLog,
}

impl Kind {
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
    /// Keys loaded, and room for this many more (workload D inserts).
    pub keys: u64,
    pub extra_keys: u64,
    pub key_bytes: usize,
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

/// A loaded store of one scheme.
pub trait Bench: Send + Sync {
    fn name(&self) -> &'static str;
    fn load(
        &self,
        plan: &Plan,
        workers: usize,
        on_start: &(dyn Fn(usize) + Sync),
    ) -> Result<(), String>;
    fn run(
        &self,
        plan: &Plan,
        workers: usize,
        duration: Duration,
        on_start: &(dyn Fn(usize) + Sync),
        tick: &mut dyn FnMut(u64, Duration),
    ) -> Result<MixRun, String>;
    /// The cost of one churn: `count` fresh keys (created through every host in turn),
    /// each written twice from host 0; the first write churns where the scheme churns
    /// (megalon allocates a record; HCMeta shares an object another host owns).
    fn churn_cost(&self, plan: &Plan, count: u64) -> Result<ChurnCost, String>;
}

/// What [`Bench::churn_cost`] measured.
#[derive(Clone, Copy, Debug)]
pub struct ChurnCost {
    pub first_write_us: f64,
    pub second_write_us: f64,
    pub churns: u64,
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
            .map(|i| mix::key_of_len(plan.keys + plan.keys + i, plan.key_bytes))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            let mut kv = self.store.handle(i % hosts).map_err(|e| e.to_string())?;
            kv.insert(key, &value).map_err(|e| e.to_string())?;
        }
        let mut kv = self.store.handle(0).map_err(|e| e.to_string())?;
        let before = self.store.report();
        let mut first = Duration::ZERO;
        for key in &keys {
            let began = Instant::now();
            kv.put(key, &value).map_err(|e| e.to_string())?;
            first += began.elapsed();
        }
        let churns = self
            .store
            .report()
            .since(&before)
            .counter("churn")
            .unwrap_or(0);
        let mut second = Duration::ZERO;
        for key in &keys {
            let began = Instant::now();
            kv.put(key, &value).map_err(|e| e.to_string())?;
            second += began.elapsed();
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / count as f64;
        Ok(ChurnCost {
            first_write_us: per(first),
            second_write_us: per(second),
            churns,
            writes: count,
        })
    }
}

/// Builds `kind` over `setup`, empty.
pub fn build(kind: Kind, setup: &Setup) -> Result<Box<dyn Bench>, String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", kind.name());
    match kind {
        Kind::Megalon => {
            let pod = Arc::new(
                Pod::create(&setup.megalon_config(), setup.backing()).map_err(|e| err(&e))?,
            );
            let scheme =
                Megalon::join(pod, setup.hosts, &HostOptions::new()).map_err(|e| err(&e))?;
            Ok(Box::new(Loaded {
                store: Store::new(scheme),
            }))
        }
        other => Err(format!("{} is not built yet", other.name())),
    }
}
