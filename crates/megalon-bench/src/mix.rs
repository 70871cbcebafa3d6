//! A YCSB-like mix of gets and puts over a [`Store`], shared by the examples and the
//! benchmarks: load the keys, run workers until told to stop, and sum up what they did.
//!
//! Keys are `user` and a 12-digit index; the index is drawn from YCSB's scrambled
//! Zipfian generator (at a skew other than 0.99, a Zipfian over the keys with its ranks
//! scattered by a permutation: `ScrambledZipfianGenerator::with_theta`) or uniformly;
//! values are stamped so that each put writes new bytes.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use megalon_core::{
    limits::{LINE_BYTES, PAGE_BYTES},
    memory::cxl::CxlCharges,
    PodConfig,
};
use megalon_kv::{KvHandle, Report, Result, Scheme, Store, LENGTH_PREFIX_BYTES};
use megalon_workload::generator::{
    KeyChooser, Operation, RandomSource, ScrambledZipfianGenerator, SplitMix64, UniformGenerator,
    Workload,
};
use megalon_workload::LatencyHistogram;

/// Operations a worker adds to the shared progress count at a time.
const PROGRESS_BATCH: u64 = 256;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    /// Keys `0..keys`, all loaded before the run.
    pub keys: u64,
    /// Bytes of every value.
    pub value_bytes: usize,
    /// Fraction of operations that are puts; the rest are gets.
    pub write_ratio: f64,
    /// Zipfian constant of the key choice (YCSB's scrambled Zipfian); 0: uniform.
    pub skew: f64,
    /// Seed of every worker's draws (each worker mixes in its number).
    pub seed: u64,
}

/// Log entries of [`Mix::pod_config`]'s pods.
const MIX_LOG_CAPACITY_ENTRIES: u64 = 16_384;

impl Mix {
    /// A pod for this mix shared by `max_hosts` hosts: slots that hold a value and its
    /// length prefix, one per key and a quarter more, a log of 16,384 entries, keys up
    /// to 32 bytes, whole pages. The SCR is the defaults' (set `scr_bytes`,
    /// `record_width_bits` and the like on the result: they do not change the LNR).
    pub fn pod_config(&self, max_hosts: u32) -> PodConfig {
        let slot_size_bytes =
            ((LENGTH_PREFIX_BYTES + self.value_bytes) as u64).next_multiple_of(LINE_BYTES);
        let config = PodConfig::new()
            .slot_size_bytes(slot_size_bytes)
            .max_key_bytes(32)
            .log_capacity_entries(MIX_LOG_CAPACITY_ENTRIES)
            .max_hosts(max_hosts);
        let log_bytes = MIX_LOG_CAPACITY_ENTRIES * config.log_entry_bytes();
        // Saturating: a mix of more keys than memory holds gets a pod the create refuses
        // (its LNR too large), not one that wrapped round to a small size.
        let slots = self.keys.saturating_add(self.keys / 4).saturating_add(1024);
        let lnr_bytes = slots
            .saturating_mul(slot_size_bytes)
            .saturating_add(log_bytes)
            .min(u64::MAX - PAGE_BYTES);
        config.lnr_bytes(lnr_bytes.next_multiple_of(PAGE_BYTES))
    }
}

/// Bytes of [`key`]'s keys: `user` and 12 digits.
pub const KEY_BYTES: usize = 16;

/// The key of index `index`.
pub fn key(index: u64) -> Vec<u8> {
    format!("user{index:012}").into_bytes()
}

/// The key of index `index`, `key_bytes` long (at least [`KEY_BYTES`]): `user` and the
/// index zero-padded to fill it.
pub fn key_of_len(index: u64, key_bytes: usize) -> Vec<u8> {
    let mut key = Vec::new();
    write_key(index, key_bytes, &mut key);
    key
}

/// [`key_of_len`] into `key` (cleared first): what a worker does before each operation,
/// without allocating or formatting, so the runner costs little beside the store.
pub fn write_key(index: u64, key_bytes: usize, key: &mut Vec<u8>) {
    let len = key_bytes.max(KEY_BYTES);
    key.clear();
    key.extend_from_slice(b"user");
    key.resize(len, b'0');
    let mut rest = index;
    for byte in key[4..].iter_mut().rev() {
        if rest == 0 {
            break;
        }
        *byte = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

/// What the workers do, operation by operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Choice {
    /// Gets and puts of loaded keys: `write_ratio` of them puts; keys by YCSB's scrambled
    /// Zipfian of constant `skew` (0: uniform).
    Mix {
        /// Fraction of operations that are puts.
        write_ratio: f64,
        /// Zipfian constant; 0: uniform.
        skew: f64,
    },
    /// One of YCSB's core workloads: its operations (read, update, insert,
    /// read-modify-write) and its key distribution, as YCSB draws them.
    Ycsb(Workload),
    /// Read-only gets over partitioned data (the paper's Figure 11): keys
    /// `0..keys * shared_ratio` are shared; the rest are split into one exclusive
    /// partition per host, by the scheme's home host ([`Scheme::home_host`]) if it names
    /// one, else by index modulo the hosts. A get goes to a shared key with probability
    /// `shared_ratio`, else to one of its host's own keys; Zipfian of constant `skew`
    /// within either set (0: uniform).
    Partitioned {
        /// Fraction of the keys that are shared, and of the gets that go to them.
        shared_ratio: f64,
        /// Zipfian constant; 0: uniform.
        skew: f64,
    },
}

/// A run's workload in full: [`Mix`] generalised to any key length and to YCSB's core
/// workloads. The benchmark harness runs these; a [`Mix`] converts into one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Keys `0..keys` are loaded before the run (workload D inserts more).
    pub keys: u64,
    /// Bytes of every key ([`key_of_len`]).
    pub key_bytes: usize,
    /// Bytes of every value.
    pub value_bytes: usize,
    /// The operations.
    pub choice: Choice,
    /// Seed of every worker's draws (each worker mixes in its number).
    pub seed: u64,
}

impl From<&Mix> for Plan {
    fn from(mix: &Mix) -> Plan {
        Plan {
            keys: mix.keys,
            key_bytes: KEY_BYTES,
            value_bytes: mix.value_bytes,
            choice: Choice::Mix {
                write_ratio: mix.write_ratio,
                skew: mix.skew,
            },
            seed: mix.seed,
        }
    }
}

impl Plan {
    /// Whether a run of the plan inserts keys (YCSB D): each run inserts the same new
    /// keys, from `keys` on, so a second run on one store finds the first one's there.
    pub fn inserts(&self) -> bool {
        matches!(self.choice, Choice::Ycsb(workload) if workload.proportions().insert > 0.0)
    }

    /// The plan's name in reports: `"5% puts, zipf 0.99"`, `"YCSB A"`.
    pub fn describe(&self) -> String {
        match self.choice {
            Choice::Mix { write_ratio, skew } if skew > 0.0 => {
                format!("{}% puts, zipf {skew}", write_ratio * 100.0)
            }
            Choice::Mix { write_ratio, .. } => format!("{}% puts, uniform", write_ratio * 100.0),
            Choice::Ycsb(workload) => format!("YCSB {}", workload.name()),
            Choice::Partitioned { shared_ratio, skew } => {
                format!("{}% shared, zipf {skew}, read-only", shared_ratio * 100.0)
            }
        }
    }

    /// Keys `0..shared_keys()` are shared in a [`Choice::Partitioned`] run (all of them
    /// in any other).
    pub fn shared_keys(&self) -> u64 {
        match self.choice {
            Choice::Partitioned { shared_ratio, .. } => {
                ((self.keys as f64 * shared_ratio.clamp(0.0, 1.0)).round() as u64).min(self.keys)
            }
            _ => self.keys,
        }
    }

    fn key(&self, index: u64) -> Vec<u8> {
        key_of_len(index, self.key_bytes)
    }

    fn write_key(&self, index: u64, key: &mut Vec<u8>) {
        write_key(index, self.key_bytes, key);
    }
}

/// Keys inserted during a run (workload D), shared by its workers: new keys are numbered
/// from the plan's `keys` on. A key is drawn for a read only once it and every key before
/// it were inserted (YCSB's acknowledged counter): inserts on several workers finish out
/// of order, and a count of those finished would let "latest" draw a key still being
/// inserted, a get that finds nothing.
#[derive(Debug)]
pub struct Inserts {
    next: AtomicU64,
    /// Every key below it is inserted.
    done: AtomicU64,
    /// Keys inserted past `done` (one before them still being inserted).
    finished: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

impl Inserts {
    /// No inserts yet after `plan`'s load.
    pub fn new(plan: &Plan) -> Self {
        Self {
            next: AtomicU64::new(plan.keys),
            done: AtomicU64::new(plan.keys),
            finished: Default::default(),
        }
    }

    /// The key of the next insert.
    fn begin(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Notes that the insert of key `index` finished.
    fn finish(&self, index: u64) {
        let mut finished = self.finished.lock().expect("never poisoned");
        finished.insert(index);
        let mut done = self.done.load(Ordering::Relaxed);
        while finished.remove(&done) {
            done += 1;
        }
        // Release: a worker that draws a key below `done` finds it inserted.
        self.done.store(done, Ordering::Release);
    }

    /// The keys that exist: every one below it.
    fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }
}

/// Draws one worker's operations and keys.
enum Chooser {
    Mix {
        write_ratio: f64,
        keys: MixKeys,
    },
    Ycsb {
        workload: Workload,
        keys: KeyChooser,
    },
    Partitioned {
        shared_ratio: f64,
        /// Over `0..shared`, if any key is shared.
        shared: Option<MixKeys>,
        /// The host's own keys, and a draw over their positions, if it has any.
        own: Vec<u64>,
        own_keys: Option<MixKeys>,
    },
}

enum MixKeys {
    Zipfian(ScrambledZipfianGenerator),
    Uniform(UniformGenerator),
}

/// One operation as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get(u64),
    Put(u64),
    Insert,
    ReadModifyWrite(u64),
}

impl MixKeys {
    /// Draws over `0..count` (at least one).
    fn over(count: u64, skew: f64) -> Self {
        let last = count.max(1) - 1;
        if skew > 0.0 {
            MixKeys::Zipfian(
                ScrambledZipfianGenerator::with_theta(0, last, skew).expect("a valid skew"),
            )
        } else {
            MixKeys::Uniform(UniformGenerator::new(0, last).expect("a valid range"))
        }
    }

    fn next(&mut self, rng: &mut SplitMix64) -> u64 {
        match self {
            MixKeys::Zipfian(g) => g.next(rng),
            MixKeys::Uniform(g) => g.next(rng),
        }
    }
}

impl Chooser {
    /// The chooser of a worker on `host` of `hosts`; `home` names a key's home host,
    /// if the scheme has one (only [`Choice::Partitioned`] asks).
    fn for_host(
        plan: &Plan,
        host: usize,
        hosts: usize,
        home: &dyn Fn(&[u8]) -> Option<usize>,
    ) -> Self {
        let Choice::Partitioned { shared_ratio, skew } = plan.choice else {
            return Self::new(plan);
        };
        let shared = plan.shared_keys();
        let mut key = Vec::new();
        let own: Vec<u64> = (shared..plan.keys)
            .filter(|&index| {
                plan.write_key(index, &mut key);
                home(&key).unwrap_or(index as usize % hosts.max(1)) == host
            })
            .collect();
        Chooser::Partitioned {
            shared_ratio,
            shared: (shared > 0).then(|| MixKeys::over(shared, skew)),
            own_keys: (!own.is_empty()).then(|| MixKeys::over(own.len() as u64, skew)),
            own,
        }
    }

    fn new(plan: &Plan) -> Self {
        match plan.choice {
            Choice::Mix { write_ratio, skew } => Chooser::Mix {
                write_ratio,
                keys: MixKeys::over(plan.keys, skew),
            },
            Choice::Partitioned { .. } => Self::for_host(plan, 0, 1, &|_| None),
            Choice::Ycsb(workload) => Chooser::Ycsb {
                workload,
                keys: KeyChooser::new(workload.key_distribution(), plan.keys.max(1))
                    .expect("a valid key distribution"),
            },
        }
    }

    fn next(&mut self, rng: &mut SplitMix64, inserts: &Inserts) -> Op {
        match self {
            Chooser::Partitioned {
                shared_ratio,
                shared,
                own,
                own_keys,
            } => {
                let to_shared = rng.next_f64() < *shared_ratio;
                match (to_shared, shared, own_keys) {
                    (true, Some(shared), _) | (false, Some(shared), None) => {
                        Op::Get(shared.next(rng))
                    }
                    (_, _, Some(own_keys)) => Op::Get(own[own_keys.next(rng) as usize]),
                    (_, None, None) => Op::Get(0),
                }
            }
            Chooser::Mix { write_ratio, keys } => {
                let index = keys.next(rng);
                if rng.next_f64() < *write_ratio {
                    Op::Put(index)
                } else {
                    Op::Get(index)
                }
            }
            Chooser::Ycsb { workload, keys } => {
                let operation = workload.next_operation(rng);
                if operation == Operation::Insert {
                    return Op::Insert;
                }
                keys.advance_to(inserts.done());
                let index = keys.next(rng);
                match operation {
                    Operation::Update => Op::Put(index),
                    Operation::ReadModifyWrite => Op::ReadModifyWrite(index),
                    _ => Op::Get(index),
                }
            }
        }
    }
}

/// Stamps the first 8 bytes of `value` (fewer if it is shorter) with `puts` (the puts
/// before this one) and the worker's number, so that each put writes new bytes.
fn stamp(value: &mut [u8], puts: u64, worker: u64) {
    let stamp = (puts << 16 | worker & 0xffff).to_le_bytes();
    let n = stamp.len().min(value.len());
    value[..n].copy_from_slice(&stamp[..n]);
}

/// One operation of the mix: a get or a put of the key of index `index` ([`key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draw {
    /// Read the key.
    Get {
        /// The key's index.
        index: u64,
    },
    /// Write the key (the value was stamped by [`Draws::next`]).
    Put {
        /// The key's index.
        index: u64,
    },
}

impl Draw {
    /// The key's index.
    pub fn index(self) -> u64 {
        match self {
            Draw::Get { index } | Draw::Put { index } => index,
        }
    }
}

/// One worker's operations: which key each one touches, get or put, and the bytes a put
/// writes. [`run_worker`] draws from it, and so can anything measured beside the store
/// (another key-value store), so that the same mix, seed and worker number give the same
/// sequence of operations everywhere.
pub struct Draws {
    chooser: Chooser,
    rng: SplitMix64,
    inserts: Inserts,
    worker: u64,
    puts_drawn: u64,
}

impl Draws {
    /// The draws of worker `worker` (its number is mixed into the mix's seed): the same
    /// keys, in the same order, as [`run_worker`]'s.
    pub fn new(mix: &Mix, worker: u64) -> Self {
        let plan = Plan::from(mix);
        Draws {
            chooser: Chooser::new(&plan),
            rng: SplitMix64::new(plan.seed ^ worker.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            inserts: Inserts::new(&plan),
            worker,
            puts_drawn: 0,
        }
    }

    /// The next operation. For a put, stamps the first 8 bytes of `value` (fewer if it is
    /// shorter) with the puts drawn before it and the worker's number, so that each put
    /// writes new bytes; a get leaves `value` alone.
    pub fn next(&mut self, value: &mut [u8]) -> Draw {
        match self.chooser.next(&mut self.rng, &self.inserts) {
            Op::Put(index) => {
                stamp(value, self.puts_drawn, self.worker);
                self.puts_drawn += 1;
                Draw::Put { index }
            }
            Op::Get(index) => Draw::Get { index },
            other => unreachable!("a mix draws gets and puts only, not {other:?}"),
        }
    }
}

/// Inserts keys `first..keys` stepping by `step` (a worker's share when `step` workers
/// share the load) through host `host` (or the key's home host, if the scheme names one:
/// [`Scheme::home_host`]); adds each insert to `loaded`.
pub fn load<S: Scheme>(
    store: &Store<S>,
    host: usize,
    mix: &Mix,
    first: u64,
    step: u64,
    loaded: &AtomicU64,
) -> Result<()> {
    load_plan(store, host, &Plan::from(mix), first, step, loaded)
}

/// [`load`] for a [`Plan`].
pub fn load_plan<S: Scheme>(
    store: &Store<S>,
    host: usize,
    plan: &Plan,
    first: u64,
    step: u64,
    loaded: &AtomicU64,
) -> Result<()> {
    // One handle per host: a key goes through its home host if the scheme has one.
    let hosts = store.scheme().hosts();
    let mut handles: Vec<Option<KvHandle<S::Handle>>> = (0..hosts).map(|_| None).collect();
    let value = vec![0x5a; plan.value_bytes];
    let mut index = first;
    while index < plan.keys {
        let key = plan.key(index);
        let through = store.scheme().home_host(&key).unwrap_or(host);
        let kv = match &mut handles[through] {
            Some(kv) => kv,
            slot => slot.insert(store.handle(through)?),
        };
        kv.insert(&key, &value)?;
        loaded.fetch_add(1, Ordering::Relaxed);
        index += step.max(1);
    }
    Ok(())
}

/// What one worker did.
#[derive(Clone, Debug)]
pub struct WorkerRun {
    /// The host it ran on.
    pub host: usize,
    /// Gets done.
    pub gets: u64,
    /// Gets that found no key (none, once every key is loaded and nothing deletes; with
    /// YCSB D, a key another worker is still inserting).
    pub gets_absent: u64,
    /// Puts done (inserts and the writes of read-modify-writes included).
    pub puts: u64,
    /// Operations done: a read-modify-write is one operation of a get and a put.
    pub operations: u64,
    /// Latency of each get.
    pub get_latency: LatencyHistogram,
    /// Latency of each put.
    pub put_latency: LatencyHistogram,
}

impl WorkerRun {
    /// Nothing done yet on host `host`.
    pub fn new(host: usize) -> Self {
        WorkerRun {
            host,
            gets: 0,
            gets_absent: 0,
            puts: 0,
            operations: 0,
            get_latency: LatencyHistogram::new(),
            put_latency: LatencyHistogram::new(),
        }
    }
}

/// Runs the mix as worker `worker` on host `host` until `stop` is set, adding its
/// operations to `done` now and then (for progress).
pub fn run_worker<S: Scheme>(
    store: &Store<S>,
    host: usize,
    worker: u64,
    mix: &Mix,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<WorkerRun> {
    let plan = Plan::from(mix);
    run_plan_worker(store, host, worker, &plan, &Inserts::new(&plan), stop, done)
}

/// [`run_worker`] for a [`Plan`]; `inserts` is shared by the run's workers.
pub fn run_plan_worker<S: Scheme>(
    store: &Store<S>,
    host: usize,
    worker: u64,
    plan: &Plan,
    inserts: &Inserts,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<WorkerRun> {
    run_plan_worker_from(store, host, worker, plan, inserts, stop, done, None)
}

/// The start of a run's workers: each counts itself ready once it has built what it
/// draws with, and waits for `go`, set when the run's clock starts.
#[derive(Default)]
struct Start {
    ready: AtomicUsize,
    go: AtomicBool,
}

impl Start {
    fn ready_and_wait(&self) {
        self.ready.fetch_add(1, Ordering::Release);
        while !self.go.load(Ordering::Acquire) {
            thread::park();
        }
    }
}

/// [`run_plan_worker`], its first operation after `start` says go (if given).
#[allow(clippy::too_many_arguments)]
fn run_plan_worker_from<S: Scheme>(
    store: &Store<S>,
    host: usize,
    worker: u64,
    plan: &Plan,
    inserts: &Inserts,
    stop: &AtomicBool,
    done: &AtomicU64,
    start: Option<&Start>,
) -> Result<WorkerRun> {
    let kv = store.handle(host);
    let scheme = store.scheme();
    let mut chooser = Chooser::for_host(plan, host, scheme.hosts(), &|key| scheme.home_host(key));
    if let Some(start) = start {
        start.ready_and_wait();
    }
    let mut kv = kv?;
    let mut rng = SplitMix64::new(plan.seed ^ worker.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut value = vec![0u8; plan.value_bytes];
    let mut out = Vec::with_capacity(plan.value_bytes);
    let mut key = Vec::with_capacity(plan.key_bytes.max(KEY_BYTES));
    let mut run = WorkerRun::new(host);
    let mut unreported = 0;
    while !stop.load(Ordering::Relaxed) {
        let op = chooser.next(&mut rng, inserts);
        let began = Instant::now();
        // Each put writes new bytes: the put count and the worker, at the front.
        stamp(&mut value, run.puts, worker);
        match op {
            Op::Get(index) => {
                plan.write_key(index, &mut key);
                let found = kv.get_into(&key, &mut out)?;
                run.get_latency.record(began.elapsed());
                run.gets += 1;
                run.gets_absent += u64::from(!found);
            }
            Op::Put(index) => {
                plan.write_key(index, &mut key);
                kv.put(&key, &value)?;
                run.put_latency.record(began.elapsed());
                run.puts += 1;
            }
            Op::Insert => {
                let index = inserts.begin();
                plan.write_key(index, &mut key);
                kv.insert(&key, &value)?;
                inserts.finish(index);
                run.put_latency.record(began.elapsed());
                run.puts += 1;
            }
            Op::ReadModifyWrite(index) => {
                plan.write_key(index, &mut key);
                let found = kv.get_into(&key, &mut out)?;
                run.gets += 1;
                run.gets_absent += u64::from(!found);
                kv.put(&key, &value)?;
                run.puts += 1;
                run.put_latency.record(began.elapsed());
            }
        }
        run.operations += 1;
        unreported += 1;
        if unreported == PROGRESS_BATCH {
            done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
    }
    done.fetch_add(unreported, Ordering::Relaxed);
    Ok(run)
}

/// Loads `plan`'s keys with `workers` threads (worker `w` on host `w % hosts`), calling
/// `tick` with the keys loaded so far about every 50 ms.
pub fn load_all<S: Scheme>(
    store: &Store<S>,
    plan: &Plan,
    workers: usize,
    tick: impl FnMut(u64),
) -> Result<()> {
    load_all_on(store, plan, workers, &|_| {}, tick)
}

/// [`load_all`], each thread first calling `on_start` with its host (to pin it to the
/// host's CPUs, say).
pub fn load_all_on<S: Scheme>(
    store: &Store<S>,
    plan: &Plan,
    workers: usize,
    on_start: &(dyn Fn(usize) + Sync),
    mut tick: impl FnMut(u64),
) -> Result<()> {
    let hosts = store.scheme().hosts();
    let loaded = AtomicU64::new(0);
    thread::scope(|scope| {
        let loaders: Vec<_> = (0..workers)
            .map(|worker| {
                let loaded = &loaded;
                scope.spawn(move || {
                    on_start(worker % hosts);
                    load_plan(
                        store,
                        worker % hosts,
                        plan,
                        worker as u64,
                        workers as u64,
                        loaded,
                    )
                })
            })
            .collect();
        while loaders.iter().any(|l| !l.is_finished()) {
            tick(loaded.load(Ordering::Relaxed));
            thread::sleep(Duration::from_millis(50));
        }
        loaders
            .into_iter()
            .try_for_each(|l| l.join().expect("loader panicked"))
    })
}

/// Runs `plan` on `store` with `workers` threads (worker `w` on host `w % hosts`) for
/// `duration`, calling `tick` with the operations done so far and the time elapsed about
/// every 100 ms. The report is the scheme's counters over the run.
pub fn run_plan<S: Scheme>(
    store: &Store<S>,
    plan: &Plan,
    workers: usize,
    duration: Duration,
    tick: impl FnMut(u64, Duration),
) -> Result<MixRun> {
    run_plan_on(store, plan, workers, duration, &|_| {}, tick)
}

/// [`run_plan`], each thread first calling `on_start` with its host (to pin it to the
/// host's CPUs, say).
pub fn run_plan_on<S: Scheme>(
    store: &Store<S>,
    plan: &Plan,
    workers: usize,
    duration: Duration,
    on_start: &(dyn Fn(usize) + Sync),
    mut tick: impl FnMut(u64, Duration),
) -> Result<MixRun> {
    let hosts = store.scheme().hosts();
    let before = store.report();
    let inserts = Inserts::new(plan);
    let (done, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let start = Start::default();
    let (runs, charged, seconds) = thread::scope(|scope| {
        let runners: Vec<_> = (0..workers)
            .map(|worker| {
                let (inserts, done, stop, start) = (&inserts, &done, &stop, &start);
                scope.spawn(move || {
                    on_start(worker % hosts);
                    let charged = CxlCharges::this_thread();
                    let run = run_plan_worker_from(
                        store,
                        worker % hosts,
                        worker as u64,
                        plan,
                        inserts,
                        stop,
                        done,
                        Some(start),
                    );
                    (run, CxlCharges::this_thread() - charged)
                })
            })
            .collect();
        // The clock starts when every worker is ready to draw (or one has ended: failed
        // before it was), not before their setup (a partitioned plan's list of a host's
        // keys, a zipfian's zeta: milliseconds each at the figures' sizes).
        while start.ready.load(Ordering::Acquire) < workers
            && runners.iter().all(|r| !r.is_finished())
        {
            thread::sleep(Duration::from_millis(1));
        }
        let began = Instant::now();
        start.go.store(true, Ordering::Release);
        for runner in &runners {
            runner.thread().unpark();
        }
        while began.elapsed() < duration && runners.iter().all(|r| !r.is_finished()) {
            thread::sleep(Duration::from_millis(100).min(duration.saturating_sub(began.elapsed())));
            tick(done.load(Ordering::Relaxed), began.elapsed());
        }
        stop.store(true, Ordering::Relaxed);
        let (runs, charged): (Vec<_>, Vec<_>) = runners
            .into_iter()
            .map(|r| r.join().expect("worker panicked"))
            .unzip();
        let runs: Result<Vec<_>> = runs.into_iter().collect();
        (runs, charged, began.elapsed().as_secs_f64())
    });
    let mut report = store.report().since(&before);
    // What the CXL cost model charged the workers (nothing unless the hosts run under it;
    // HCMeta's serving threads are not workers and are not counted here).
    let charged = charged
        .into_iter()
        .fold(CxlCharges::default(), |a, b| a + b);
    if charged.charged_ns > 0 {
        report.counters.extend([
            (CXL_NS_CHARGED, charged.charged_ns),
            (CXL_LINES_MISSED, charged.lines_missed),
            (CXL_LINES_WRITTEN_BACK, charged.lines_written_back),
            (CXL_SCR_ACCESSES, charged.scr_accesses),
            (CXL_SCR_HITS, charged.scr_hits),
            (CXL_CURSOR_ACCESSES, charged.cursor_accesses),
            (CXL_CURSOR_HITS, charged.cursor_hits),
        ]);
    }
    Ok(MixRun {
        workers: runs?,
        seconds,
        report,
    })
}

/// The counter of a run's report (added by [`run_plan_on`] when the hosts run under the
/// CXL cost model): nanoseconds of spin the model charged the workers.
pub const CXL_NS_CHARGED: &str = "CXL ns charged";
/// LNR lines the model counted missing on the workers.
pub const CXL_LINES_MISSED: &str = "CXL lines missed";
/// LNR lines the model counted written back by the workers.
pub const CXL_LINES_WRITTEN_BACK: &str = "CXL lines written back";
/// SCR accesses the model charged the workers: those that missed its SCR lines.
pub const CXL_SCR_ACCESSES: &str = "CXL SCR accesses";
/// SCR accesses the model found in the workers' hosts' caches, and did not charge.
pub const CXL_SCR_HITS: &str = "CXL SCR hits";
/// Accesses to the log's cursors in SCR that the model charged the workers (it counts
/// them apart: the protocol's SCR counts leave them out).
pub const CXL_CURSOR_ACCESSES: &str = "CXL cursor accesses";
/// Accesses to the log's cursors that the model found in the workers' hosts' caches.
pub const CXL_CURSOR_HITS: &str = "CXL cursor hits";

/// Every worker's run, over `seconds`, with what the scheme counted meanwhile.
#[derive(Clone, Debug)]
pub struct MixRun {
    /// The workers.
    pub workers: Vec<WorkerRun>,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// The scheme's counters over the run (and its SCR use at the end).
    pub report: Report,
}

impl MixRun {
    /// Gets done.
    pub fn gets(&self) -> u64 {
        self.workers.iter().map(|w| w.gets).sum()
    }

    /// Puts done.
    pub fn puts(&self) -> u64 {
        self.workers.iter().map(|w| w.puts).sum()
    }

    /// Operations done (a read-modify-write counts once).
    pub fn operations(&self) -> u64 {
        self.workers.iter().map(|w| w.operations).sum()
    }

    /// Operations per second.
    pub fn ops_per_second(&self) -> f64 {
        self.operations() as f64 / self.seconds
    }

    /// Latencies of every worker's gets, merged.
    pub fn get_latency(&self) -> LatencyHistogram {
        merged(self.workers.iter().map(|w| &w.get_latency))
    }

    /// Latencies of every worker's puts, merged.
    pub fn put_latency(&self) -> LatencyHistogram {
        merged(self.workers.iter().map(|w| &w.put_latency))
    }

    /// Operations per second of each host, in host order.
    pub fn per_host_ops_per_second(&self) -> Vec<(usize, f64)> {
        let mut hosts: Vec<usize> = self.workers.iter().map(|w| w.host).collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts
            .into_iter()
            .map(|host| {
                let ops: u64 = self
                    .workers
                    .iter()
                    .filter(|w| w.host == host)
                    .map(|w| w.operations)
                    .sum();
                (host, ops as f64 / self.seconds)
            })
            .collect()
    }

    /// Writes the run's operations per second (in all, of gets and of puts, of each
    /// host) and the latency percentiles of gets and of puts: the first part of its
    /// summary ([`Display`](fmt::Display)).
    pub fn write_throughput(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let (gets, puts) = (self.gets(), self.puts());
        writeln!(
            out,
            "run: {} operations in {:.2} s: {} ({} gets, {} puts)",
            self.operations(),
            self.seconds,
            rate(self.ops_per_second()),
            rate(gets as f64 / self.seconds),
            rate(puts as f64 / self.seconds)
        )?;
        let hosts: Vec<String> = self
            .per_host_ops_per_second()
            .into_iter()
            .map(|(host, ops)| format!("host {host} {}", rate(ops)))
            .collect();
        writeln!(out, "     by host: {}", hosts.join(", "))?;
        let absent: u64 = self.workers.iter().map(|w| w.gets_absent).sum();
        if absent > 0 {
            writeln!(out, "     {absent} gets found no key")?;
        }
        writeln!(
            out,
            "latency (us)      p50      p90      p99    p99.9      max"
        )?;
        for (name, h) in [("get", self.get_latency()), ("put", self.put_latency())] {
            if h.samples() == 0 {
                continue;
            }
            writeln!(
                out,
                "  {name:<10} {:>8} {:>8} {:>8} {:>8} {:>8}",
                micros(h.quantile(0.5)),
                micros(h.quantile(0.9)),
                micros(h.quantile(0.99)),
                micros(h.quantile(0.999)),
                micros(h.max())
            )?;
        }
        Ok(())
    }
}

fn merged<'a>(histograms: impl Iterator<Item = &'a LatencyHistogram>) -> LatencyHistogram {
    let mut all = LatencyHistogram::new();
    for h in histograms {
        all.merge(h);
    }
    all
}

/// `count / seconds` as a short rate.
pub fn rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else {
        format!("{:.1} k/s", per_second / 1e3)
    }
}

fn micros(d: Duration) -> String {
    format!("{:.2}", d.as_nanos() as f64 / 1000.0)
}

/// A person-readable summary: throughput, per host, latency percentiles, every counter
/// (and its count per operation), SCR use.
impl fmt::Display for MixRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_throughput(f)?;
        let ops = self.operations().max(1) as f64;
        writeln!(
            f,
            "{} counters over the run (per operation):",
            self.report.scheme
        )?;
        for (name, value) in &self.report.counters {
            writeln!(f, "  {name:<24} {value:>12}  ({:.4})", *value as f64 / ops)?;
        }
        for (name, value) in &self.report.gauges {
            writeln!(f, "  {name:<24} {value:>12}  (now)")?;
        }
        let total: u64 = self.report.scr.iter().map(|(_, b)| b).sum();
        writeln!(f, "SCR: {total} bytes")?;
        for (name, bytes) in &self.report.scr {
            writeln!(
                f,
                "  {name:<24} {bytes:>12} B  {:>5.1}%",
                *bytes as f64 * 100.0 / total.max(1) as f64
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of YCSB's core workloads D alone inserts; no mix does.
    #[test]
    fn only_ycsb_d_inserts() {
        let plan = |choice| Plan {
            keys: 100,
            key_bytes: KEY_BYTES,
            value_bytes: 64,
            choice,
            seed: 1,
        };
        let inserting: Vec<&str> = Workload::CORE
            .iter()
            .filter(|workload| plan(Choice::Ycsb(**workload)).inserts())
            .map(|workload| workload.name())
            .collect();
        assert_eq!(inserting, ["D"]);
        let mix = Choice::Mix {
            write_ratio: 1.0,
            skew: 0.0,
        };
        assert!(!plan(mix).inserts());
    }

    /// A mix of more keys than any memory holds gets a pod its create refuses by name
    /// (its LNR wrapped round to a small one, whose hosts ran out of slots).
    #[test]
    fn a_mix_too_large_for_any_pod_is_refused_by_the_create() {
        let mix = Mix {
            keys: u64::MAX,
            value_bytes: 1024,
            write_ratio: 0.05,
            skew: 0.99,
            seed: 1,
        };
        let config = mix.pod_config(2);
        assert!(config.lnr_bytes > 1 << 60, "{}", config.lnr_bytes);
        let created = megalon_core::Pod::create(&config, megalon_core::Backing::heap());
        assert!(created.is_err(), "a pod of {} LNR bytes", config.lnr_bytes);
    }

    /// Inserts that finish out of order make a key readable only once every key before
    /// it is in: the second of two inserts in flight, finished first, is not drawn until
    /// the first finishes too.
    #[test]
    fn a_key_is_drawn_only_once_every_key_before_it_is_inserted() {
        let inserts = Inserts::new(&partitioned(0.0));
        let (first, second) = (inserts.begin(), inserts.begin());
        assert_eq!((first, second), (1000, 1001));
        inserts.finish(second);
        assert_eq!(inserts.done(), 1000, "key 1000 is still being inserted");
        inserts.finish(first);
        assert_eq!(inserts.done(), 1002);
        let third = inserts.begin();
        inserts.finish(third);
        assert_eq!(inserts.done(), 1003);
    }

    fn partitioned(shared_ratio: f64) -> Plan {
        Plan {
            keys: 1000,
            key_bytes: KEY_BYTES,
            value_bytes: 8,
            choice: Choice::Partitioned {
                shared_ratio,
                skew: 0.99,
            },
            seed: 7,
        }
    }

    fn draws(chooser: &mut Chooser, n: usize) -> Vec<u64> {
        let mut rng = SplitMix64::new(3);
        let inserts = Inserts::new(&partitioned(0.0));
        (0..n)
            .map(|_| match chooser.next(&mut rng, &inserts) {
                Op::Get(index) => index,
                other => panic!("read-only, drew {other:?}"),
            })
            .collect()
    }

    /// A run's clock starts once every worker is ready to draw: what a worker does
    /// before its first operation (its host's `on_start`, its key chooser: a partitioned
    /// plan's list of its host's keys, a zipfian's zeta over the keys) is not in the run's
    /// seconds. The clock started before the workers were spawned, so a run shorter than
    /// their setup did no operation at all, and every run's rate was divided by the setup
    /// too. A setup of `SETUP` (a sleep in `on_start`, never shorter) stands for theirs:
    /// the run's seconds hold it in full if the clock counts it, and only a stall of most
    /// of it otherwise. (It asserted an operation in a run of 20 ms, which workers held off
    /// the cores for that long after the start made none.)
    #[test]
    fn the_clock_starts_when_the_workers_are_ready() {
        const SETUP: Duration = Duration::from_secs(2);
        let mix = Mix {
            keys: 64,
            value_bytes: 8,
            write_ratio: 0.0,
            skew: 0.0,
            seed: 5,
        };
        let pod = megalon_core::Pod::create(&mix.pod_config(2), megalon_core::Backing::heap());
        let options = megalon_core::HostOptions::new();
        let scheme = megalon_kv::Megalon::join(std::sync::Arc::new(pod.unwrap()), 2, &options);
        let store = Store::new(scheme.unwrap());
        let plan = Plan {
            keys: 64,
            key_bytes: KEY_BYTES,
            value_bytes: 8,
            choice: Choice::Partitioned {
                shared_ratio: 0.0,
                skew: 0.0,
            },
            seed: 5,
        };
        let duration = Duration::from_millis(20);
        let setup = |_| thread::sleep(SETUP);
        let run = run_plan_on(&store, &plan, 2, duration, &setup, |_, _| {}).unwrap();
        assert!(
            run.seconds < SETUP.as_secs_f64(),
            "a run of {:.3} s counted its workers' setup of {SETUP:?}",
            run.seconds
        );
        assert!(run.seconds >= duration.as_secs_f64(), "{} s", run.seconds);
    }

    #[test]
    fn keys_written_into_a_buffer_are_the_formatted_keys() {
        let mut buffer = b"left over from a longer key".to_vec();
        for index in [0, 7, 42, 999_999, 123_456_789_012] {
            write_key(index, KEY_BYTES, &mut buffer);
            assert_eq!(buffer, key(index), "key {index}");
            assert_eq!(key_of_len(index, KEY_BYTES), key(index));
        }
        write_key(42, 24, &mut buffer);
        assert_eq!(buffer, b"user00000000000000000042");
    }

    #[test]
    fn partitioned_gets_go_to_shared_keys_at_the_ratio_else_to_the_hosts_own() {
        let plan = partitioned(0.2);
        assert_eq!(plan.shared_keys(), 200);
        let mut chooser = Chooser::for_host(&plan, 1, 3, &|_| None);
        let drawn = draws(&mut chooser, 20_000);
        let shared = drawn.iter().filter(|&&i| i < 200).count();
        assert!((3_600..4_400).contains(&shared), "{shared} of 20000 shared");
        assert!(
            drawn.iter().all(|&i| i < 200 || i % 3 == 1),
            "host 1's own keys"
        );
        // A scheme's home host decides the partitions when it names one.
        let home = |key: &[u8]| Some(usize::from(key[key.len() - 1] % 2));
        let mut chooser = Chooser::for_host(&plan, 0, 2, &home);
        let mut key = Vec::new();
        for index in draws(&mut chooser, 2_000).into_iter().filter(|&i| i >= 200) {
            plan.write_key(index, &mut key);
            assert_eq!(home(&key), Some(0));
        }
        // Nothing shared, all shared.
        let none = draws(
            &mut Chooser::for_host(&partitioned(0.0), 2, 3, &|_| None),
            1000,
        );
        assert!(none.iter().all(|&i| i % 3 == 2));
        let all = draws(
            &mut Chooser::for_host(&partitioned(1.0), 2, 3, &|_| None),
            1000,
        );
        assert!(all.iter().all(|&i| i < 1000));
    }
}
