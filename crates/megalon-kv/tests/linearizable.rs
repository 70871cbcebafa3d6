//! The store's histories from several hosts on simulated non-coherent memory, checked for
//! linearizability key by key: every get returns a value some linearization allows, never
//! a stale, torn or deleted one.

use std::sync::Arc;

use megalon_core::{
    Backing, Host, HostOptions, Join, Layout, MemoryKind, Pod, PodConfig, SimulatedConfig,
};
use megalon_kv::checked::{run_checked, seed_from_env, CheckedRun};
use megalon_kv::{Megalon, Scheme, Store};

struct Run {
    seed: u64,
    hosts: usize,
    threads_per_host: usize,
    operations_per_thread: u32,
    keys: u64,
    /// Coherence records the pod has: fewer than keys, so writes churn.
    records: u64,
    record_width_bits: u32,
    /// Local partitions: consecutive accesses before a move (0: off).
    partition_after: u32,
    /// Local copies: reads before a copy (0: off).
    copy_after: u32,
}

impl Run {
    const fn new(seed: u64, hosts: usize, threads_per_host: usize, operations: u32) -> Self {
        Self {
            seed,
            hosts,
            threads_per_host,
            operations_per_thread: operations,
            keys: 96,
            records: 16,
            record_width_bits: 8,
            partition_after: 0,
            copy_after: 0,
        }
    }
}

/// A pod whose SCR leaves exactly `records` records: the rest of it is handed to the
/// application region, which nothing here uses.
fn pod(run: &Run) -> Arc<Pod> {
    let base = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(512)
        .record_width_bits(run.record_width_bits)
        .max_hosts(run.hosts as u32)
        .local_partitions(run.partition_after)
        .local_copies(run.copy_after);
    let all = Layout::new(&base).expect("layout").record_count;
    let record_bytes = u64::from(run.record_width_bits / 8);
    let spare = (all - run.records) * record_bytes / 64 * 64;
    let config = base.app_scr_bytes(spare);
    let layout = Layout::new(&config).expect("layout");
    assert!(layout.record_count >= run.records && layout.record_count < run.records + 64);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn run(run: &Run) -> (megalon_workload::Summary, megalon_kv::Report) {
    let pod = pod(run);
    let hosts: Vec<_> = (0..run.hosts)
        .map(|host| {
            let options = HostOptions::new()
                .memory(MemoryKind::Simulated(SimulatedConfig {
                    seed: run.seed ^ (host as u64 + 1),
                    capacity_lines: 256,
                    random_eviction_one_in: 16,
                }))
                // A stuck RPC fails the run in seconds rather than minutes.
                .wait_limit(std::time::Duration::from_secs(5));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(Megalon::new(pod, hosts));
    let summary = run_checked(
        &store,
        &CheckedRun {
            seed: run.seed,
            hosts: run.hosts,
            threads_per_host: run.threads_per_host,
            operations_per_thread: run.operations_per_thread,
            keys: run.keys,
        },
    )
    .unwrap_or_else(|violation| panic!("{violation}"));
    (summary, store.scheme().report())
}

#[test]
fn three_hosts_on_simulated_memory_with_churn_are_linearizable() {
    let seed = seed_from_env(0x5eed_0001);
    let run_spec = Run::new(seed, 3, 2, 20_000);
    let (summary, report) = run(&run_spec);
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, 6 * 20_000);
    // The run exercised what it is meant to: churn, retries, stale lines dropped.
    let counter = |name| report.counter(name).expect(name);
    assert!(
        counter("churn") > 0,
        "no churn: the records did not run short"
    );
    assert!(counter("record deallocs") > 0);
    assert!(counter("deletes") > 0 && counter("creates") > 0);
    assert!(counter("lines invalidated") > 0);
}

#[test]
fn sixteen_bit_records_without_churn_are_linearizable() {
    let (summary, report) = run(&Run {
        keys: 32,
        records: 512,
        record_width_bits: 16,
        ..Run::new(0x5eed_0002, 2, 2, 3_000)
    });
    assert_eq!(summary.operations, 4 * 3_000);
    assert_eq!(report.counter("churn"), Some(0));
}

/// Objects move to a host's DRAM after two consecutive accesses from it, so with three
/// hosts on the same keys they move there and back all the time: every read or write
/// from another host is an RPC and a move back first.
#[test]
fn local_partitions_moving_back_and_forth_are_linearizable() {
    let seed = seed_from_env(0x5eed_0003);
    let (summary, report) = run(&Run {
        partition_after: 2,
        ..Run::new(seed, 3, 2, 4_000)
    });
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, 6 * 4_000);
    let counter = |name| report.counter(name).expect(name);
    for name in [
        "moves to a host",
        "move-backs",
        "rpcs sent",
        "rpcs served",
        "local reads",
        "local writes",
    ] {
        assert!(counter(name) > 100, "{name}: {}", counter(name));
    }
    assert_eq!(counter("copies made"), 0, "copies are off");
}

/// Copies after two reads from a host, on keys that are written all the time: copies
/// are made and invalidated by writes' log events over and over.
#[test]
fn local_copies_invalidated_by_writes_are_linearizable() {
    let seed = seed_from_env(0x5eed_0004);
    let (summary, report) = run(&Run {
        copy_after: 2,
        ..Run::new(seed, 3, 2, 6_000)
    });
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, 6 * 6_000);
    let counter = |name| report.counter(name).expect(name);
    for name in ["copies made", "copy reads", "copies invalidated"] {
        assert!(counter(name) > 100, "{name}: {}", counter(name));
    }
    assert_eq!(counter("moves to a host"), 0, "partitions are off");
}

/// Both at once.
#[test]
fn local_partitions_and_copies_together_are_linearizable() {
    let seed = seed_from_env(0x5eed_0005);
    let (summary, report) = run(&Run {
        partition_after: 3,
        copy_after: 2,
        ..Run::new(seed, 3, 2, 4_000)
    });
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, 6 * 4_000);
    let counter = |name| report.counter(name).expect(name);
    for name in [
        "moves to a host",
        "move-backs",
        "copies made",
        "copies invalidated",
    ] {
        assert!(counter(name) > 10, "{name}: {}", counter(name));
    }
}
