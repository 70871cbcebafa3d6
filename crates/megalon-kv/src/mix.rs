//! A YCSB-like mix of gets and puts over a [`Store`], shared by the examples and the
//! benchmarks: load the keys, run workers until told to stop, and sum up what they did.
//!
//! Keys are `user` and a 12-digit index; the index is drawn from YCSB's scrambled
//! Zipfian generator (or uniformly), values are stamped so that each put writes new bytes.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megalon_core::{PodConfig, LINE_BYTES, PAGE_BYTES};
use megalon_workload::generator::{
    RandomSource, ScrambledZipfianGenerator, SplitMix64, UniformGenerator,
};
use megalon_workload::LatencyHistogram;

use crate::error::Result;
use crate::scheme::{Report, Scheme};
use crate::store::{Store, LENGTH_PREFIX_BYTES};

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
        let slots = self.keys + self.keys / 4 + 1024;
        config.lnr_bytes((log_bytes + slots * slot_size_bytes).next_multiple_of(PAGE_BYTES))
    }
}

/// The key of index `index`.
pub fn key(index: u64) -> Vec<u8> {
    format!("user{index:012}").into_bytes()
}

/// Draws key indexes for one worker.
enum Chooser {
    Zipfian(ScrambledZipfianGenerator),
    Uniform(UniformGenerator),
}

impl Chooser {
    fn new(mix: &Mix) -> Self {
        let last = mix.keys.max(1) - 1;
        if mix.skew > 0.0 {
            Chooser::Zipfian(
                ScrambledZipfianGenerator::with_theta(0, last, mix.skew).expect("a valid skew"),
            )
        } else {
            Chooser::Uniform(UniformGenerator::new(0, last).expect("a valid range"))
        }
    }

    fn next(&self, rng: &mut SplitMix64) -> u64 {
        match self {
            Chooser::Zipfian(g) => g.next(rng),
            Chooser::Uniform(g) => g.next(rng),
        }
    }
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
    write_ratio: f64,
    worker: u64,
    puts_drawn: u64,
}

impl Draws {
    /// The draws of worker `worker` (its number is mixed into the mix's seed).
    pub fn new(mix: &Mix, worker: u64) -> Self {
        Draws {
            chooser: Chooser::new(mix),
            rng: SplitMix64::new(mix.seed ^ worker.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            write_ratio: mix.write_ratio,
            worker,
            puts_drawn: 0,
        }
    }

    /// The next operation. For a put, stamps the first 8 bytes of `value` (fewer if it is
    /// shorter) with the puts drawn before it and the worker's number, so that each put
    /// writes new bytes; a get leaves `value` alone.
    pub fn next(&mut self, value: &mut [u8]) -> Draw {
        let index = self.chooser.next(&mut self.rng);
        if self.rng.next_f64() < self.write_ratio {
            let stamp = (self.puts_drawn << 16 | self.worker & 0xffff).to_le_bytes();
            let n = stamp.len().min(value.len());
            value[..n].copy_from_slice(&stamp[..n]);
            self.puts_drawn += 1;
            Draw::Put { index }
        } else {
            Draw::Get { index }
        }
    }
}

/// Inserts keys `first..keys` stepping by `step` (a worker's share when `step` workers
/// share the load) through host `host`; adds each insert to `loaded`.
pub fn load<S: Scheme>(
    store: &Store<S>,
    host: usize,
    mix: &Mix,
    first: u64,
    step: u64,
    loaded: &AtomicU64,
) -> Result<()> {
    let mut kv = store.handle(host)?;
    let value = vec![0x5a; mix.value_bytes];
    let mut index = first;
    while index < mix.keys {
        kv.insert(&key(index), &value)?;
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
    /// Gets that found no key (none, once every key is loaded and nothing deletes).
    pub gets_absent: u64,
    /// Puts done.
    pub puts: u64,
    /// Latency of each get.
    pub get_latency: LatencyHistogram,
    /// Latency of each put.
    pub put_latency: LatencyHistogram,
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
    let mut kv = store.handle(host)?;
    let mut draws = Draws::new(mix, worker);
    let mut value = vec![0u8; mix.value_bytes];
    let mut out = Vec::with_capacity(mix.value_bytes);
    let mut run = WorkerRun {
        host,
        gets: 0,
        gets_absent: 0,
        puts: 0,
        get_latency: LatencyHistogram::new(),
        put_latency: LatencyHistogram::new(),
    };
    let mut unreported = 0;
    while !stop.load(Ordering::Relaxed) {
        let draw = draws.next(&mut value);
        let key = key(draw.index());
        let began = Instant::now();
        match draw {
            Draw::Put { .. } => {
                kv.put(&key, &value)?;
                run.put_latency.record(began.elapsed());
                run.puts += 1;
            }
            Draw::Get { .. } => {
                let found = kv.get_into(&key, &mut out)?;
                run.get_latency.record(began.elapsed());
                run.gets += 1;
                run.gets_absent += u64::from(!found);
            }
        }
        unreported += 1;
        if unreported == PROGRESS_BATCH {
            done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
    }
    done.fetch_add(unreported, Ordering::Relaxed);
    Ok(run)
}

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

    /// Gets and puts per second.
    pub fn ops_per_second(&self) -> f64 {
        (self.gets() + self.puts()) as f64 / self.seconds
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
                    .map(|w| w.gets + w.puts)
                    .sum();
                (host, ops as f64 / self.seconds)
            })
            .collect()
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
        let (gets, puts) = (self.gets(), self.puts());
        writeln!(
            f,
            "run: {} operations in {:.2} s: {} ({} gets, {} puts)",
            gets + puts,
            self.seconds,
            rate(self.ops_per_second()),
            rate(gets as f64 / self.seconds),
            rate(puts as f64 / self.seconds)
        )?;
        let hosts: Vec<String> = self
            .per_host_ops_per_second()
            .into_iter()
            .map(|(host, ops)| format!("host {host}: {}", rate(ops)))
            .collect();
        writeln!(f, "     {}", hosts.join(", "))?;
        let absent: u64 = self.workers.iter().map(|w| w.gets_absent).sum();
        if absent > 0 {
            writeln!(f, "     {absent} gets found no key")?;
        }
        writeln!(
            f,
            "latency (us)      p50      p90      p99    p99.9      max"
        )?;
        for (name, h) in [("get", self.get_latency()), ("put", self.put_latency())] {
            if h.samples() == 0 {
                continue;
            }
            writeln!(
                f,
                "  {name:<10} {:>8} {:>8} {:>8} {:>8} {:>8}",
                micros(h.quantile(0.5)),
                micros(h.quantile(0.9)),
                micros(h.quantile(0.99)),
                micros(h.quantile(0.999)),
                micros(h.max())
            )?;
        }
        let ops = (gets + puts).max(1) as f64;
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
