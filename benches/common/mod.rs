//! What the benchmarks share: their 24-byte keys in a seeded order, a heap pod sized for
//! a number of slots (with or without undo images), the memory their hosts use and the
//! NUMA node their pods are bound to (from the environment), and whether the paired runs
//! (each comparison measured a second time, its two sides in alternating blocks) run.
//!
//! Two environment variables choose how the benchmarks run:
//!
//! - `MEGALON_BENCH_MEMORY`: `hardware` (unset: the default), `cxl` (every host under
//!   the CXL cost model, `docs/memory.md`) or `cxl:name=value,...` (the model with some
//!   parameters set), e.g. `MEGALON_BENCH_MEMORY=cxl cargo bench --bench object`.
//! - `MEGALON_BENCH_NUMA_NODE`: bind every pod's memory to this NUMA node (unset: not
//!   bound), as `cargo xtask figures --numa` binds its pods.
//!
//! Every benchmark that uses it includes this module with `mod common;` and uses part of
//! it, so each build of it leaves some items unused.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use megalon::core::limits::{HOLDS_PER_HOST, PAGE_BYTES};
use megalon::core::{Backing, CxlModel, MemoryKind, Pod, PodConfig};
use megalon_workload::{RandomSource, SplitMix64};

/// Key length of every benchmark (the paper's KV workloads use 24-byte keys).
pub const KEY_BYTES: usize = 24;
/// Longest key the pods accept: 32 keeps a log entry to one line (32 header + 32 key).
pub const MAX_KEY_BYTES: u32 = 32;

pub type Key = [u8; KEY_BYTES];

/// `prefix` followed by `n` in 20 decimal digits: 24 bytes, distinct for distinct `n`.
pub fn key(prefix: &[u8; 4], n: u64) -> Key {
    let mut key = [0u8; KEY_BYTES];
    key[..4].copy_from_slice(prefix);
    key[4..].copy_from_slice(format!("{n:020}").as_bytes());
    key
}

/// Puts `keys` in a random order fixed by `seed` (a Fisher-Yates shuffle drawing from
/// [`SplitMix64`]), so that every run visits them in the same order. Stored flat, the
/// list is walked sequentially and only the objects themselves are touched at random.
pub fn shuffle(keys: &mut [Key], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..keys.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
}

/// A heap pod of `slots` slots of `slot_size_bytes` each, after a ring of `log_entries`
/// log entries, for keys of up to [`MAX_KEY_BYTES`] and `max_hosts` hosts.
pub fn heap_pod(slot_size_bytes: u64, slots: u64, log_entries: u64, max_hosts: u32) -> Arc<Pod> {
    heap_pod_of(
        PodConfig::new()
            .slot_size_bytes(slot_size_bytes)
            .max_key_bytes(MAX_KEY_BYTES)
            .log_capacity_entries(log_entries)
            .max_hosts(max_hosts),
        slots,
    )
}

/// A heap pod of `config` (its slot size, log ring, hosts, SCR, crash safety, regions)
/// whose LNR holds the log, the undo images if `config` asks for them, the join area, the
/// application's region and `slots` slots.
pub fn heap_pod_of(config: PodConfig, slots: u64) -> Arc<Pod> {
    let undo_bytes = if config.undo_images() {
        u64::from(config.max_hosts) * HOLDS_PER_HOST * config.slot_size_bytes
    } else {
        0
    };
    let lnr_bytes = (config.log_capacity_entries * config.log_entry_bytes()
        + undo_bytes
        + config.join_area_bytes
        + config.app_lnr_bytes
        + slots * config.slot_size_bytes)
        .div_ceil(PAGE_BYTES)
        * PAGE_BYTES;
    Arc::new(Pod::create(&config.lnr_bytes(lnr_bytes), backing()).expect("the pod"))
}

/// The environment variable naming the memory the benchmarks' hosts use.
pub const MEMORY_VAR: &str = "MEGALON_BENCH_MEMORY";
/// The environment variable naming the NUMA node the benchmarks' pods are bound to.
pub const NUMA_NODE_VAR: &str = "MEGALON_BENCH_NUMA_NODE";

/// The memory every host of the benchmarks uses: [`MEMORY_VAR`], or hardware. Says on
/// stderr what it chose, once per process. Panics on a value it cannot read (a bench run
/// on the wrong memory would be worse than none).
pub fn memory() -> MemoryKind {
    static CHOSEN: std::sync::OnceLock<MemoryKind> = std::sync::OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let kind = match std::env::var(MEMORY_VAR) {
                Ok(name) => name
                    .parse::<MemoryKind>()
                    .unwrap_or_else(|e| panic!("{MEMORY_VAR}={name}: {e}")),
                Err(_) => MemoryKind::Hardware,
            };
            eprintln!("benches: {kind:?} memory ({MEMORY_VAR})");
            kind
        })
        .clone()
}

/// The CXL cost model the hosts run under, if [`memory`] is one.
pub fn cxl() -> Option<CxlModel> {
    match memory() {
        MemoryKind::Cxl(model) => Some(model),
        _ => None,
    }
}

/// The NUMA node of [`NUMA_NODE_VAR`], if set. Panics on a value that is not a node
/// number.
pub fn numa_node() -> Option<u32> {
    let node = std::env::var(NUMA_NODE_VAR).ok()?;
    Some(
        node.parse()
            .unwrap_or_else(|_| panic!("{NUMA_NODE_VAR}={node}: not a node number")),
    )
}

/// A heap backing, bound to [`numa_node`] if one is set.
pub fn backing() -> Backing {
    match numa_node() {
        Some(node) => Backing::heap().numa_node(node),
        None => Backing::heap(),
    }
}

/// Whether the paired runs run: `cargo bench` passes `--bench`; `cargo test --benches`
/// does not, and then criterion runs each benchmark once as a test and the paired runs
/// are skipped.
pub fn paired_runs() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The core of a paired run: `rounds` rounds, each timing one block of `subject` and one
/// of `baseline` back to back, which goes first alternating from round to round. On a
/// shared, noisy machine the load drifts between two separate runs; within a round it
/// hardly does, so the per-round ratio is the figure to quote. Each side is called with
/// the block's number (`2 * round` for the first of a round, `2 * round + 1` for the
/// second), so that the two can work on different data. Returns each round's times,
/// `(subject, baseline)`.
pub fn alternate(
    rounds: usize,
    mut subject: impl FnMut(usize) -> Duration,
    mut baseline: impl FnMut(usize) -> Duration,
) -> Vec<(Duration, Duration)> {
    (0..rounds)
        .map(|round| {
            let (first, second) = (2 * round, 2 * round + 1);
            if round % 2 == 0 {
                let subject_time = subject(first);
                (subject_time, baseline(second))
            } else {
                let baseline_time = baseline(first);
                (subject(second), baseline_time)
            }
        })
        .collect()
}
