//! The store's histories from several hosts on simulated non-coherent memory, checked for
//! linearizability key by key: every get returns a value some linearization allows, never
//! a stale, torn or deleted one.

use std::sync::Arc;

use megalon_core::{
    Backing, Host, HostOptions, Join, Layout, MemoryKind, Pod, PodConfig, SimulatedConfig,
};
use megalon_kv::checked::{recorded_operations, run_checked, seed_from_env, CheckedRun};
use megalon_kv::{Megalon, Report, Scheme, Store};

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
    let record_bits = u64::from(run.record_width_bits);
    let spare = (all - run.records) * record_bits / 8 / 64 * 64;
    let config = base.app_scr_bytes(spare);
    let layout = Layout::new(&config).expect("layout");
    assert!(layout.record_count >= run.records && layout.record_count < run.records + 64);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

/// Runs `run` and checks its history; every operation must be in it. Returns the store's
/// report.
fn run(run: &Run) -> Report {
    let pod = pod(run);
    let hosts: Vec<_> = (0..run.hosts)
        .map(|host| {
            let options = HostOptions::new()
                .memory(MemoryKind::Simulated(SimulatedConfig {
                    seed: run.seed ^ (host as u64 + 1),
                    capacity_lines: 256,
                    random_eviction_one_in: 16,
                    ..SimulatedConfig::default()
                }))
                // A stuck RPC fails the run in seconds rather than minutes.
                .wait_limit(std::time::Duration::from_secs(5));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(Megalon::new(pod, hosts));
    let checked = CheckedRun {
        seed: run.seed,
        hosts: run.hosts,
        threads_per_host: run.threads_per_host,
        operations_per_thread: run.operations_per_thread,
        keys: run.keys,
    };
    let summary = run_checked(&store, &checked).unwrap_or_else(|violation| panic!("{violation}"));
    let report = store.scheme().report();
    eprintln!("{summary:?}\n{report}");
    assert_eq!(
        summary.operations,
        recorded_operations(&checked),
        "every operation is checked"
    );
    report
}

/// Runs three hosts of two threads, `operations` each, with local partitions after
/// `partition_after` accesses and copies after `copy_after` reads (0: off), seeded from the
/// environment or else with `seed`.
fn run_local(seed: u64, partition_after: u32, copy_after: u32, operations: u32) -> Report {
    run(&Run {
        partition_after,
        copy_after,
        ..Run::new(seed_from_env(seed), 3, 2, operations)
    })
}

/// Counters of records running short, and of stale lines dropped.
const CHURN_AND_INVALIDATION: &[&str] = &["churn", "record deallocs", "lines invalidated"];
/// Counters of objects moving to a host's DRAM and back.
const MOVES: &[&str] = &["moves to a host", "move-backs"];
/// Counters of RPCs to the host that holds an object, and of that host's own accesses.
const RPCS_AND_LOCAL_ACCESSES: &[&str] =
    &["rpcs sent", "rpcs served", "local reads", "local writes"];
/// Counters of local copies.
const COPIES: &[&str] = &["copies made", "copy reads", "copies invalidated"];

/// Asserts that each counter of `report` named in `names` is above `least`.
#[track_caller]
fn assert_counters_above(report: &Report, least: u64, names: &[&str]) {
    for &name in names {
        let counter = report.counter(name).expect(name);
        assert!(counter > least, "{name}: {counter}, not above {least}");
    }
}

#[test]
fn three_hosts_on_simulated_memory_with_churn_are_linearizable() {
    let seed = seed_from_env(0x5eed_0001);
    let report = run(&Run::new(seed, 3, 2, 20_000));
    // The run exercised what it is meant to: churn (the records ran short), retries,
    // stale lines dropped.
    assert_counters_above(&report, 0, CHURN_AND_INVALIDATION);
    assert_counters_above(&report, 0, &["deletes", "creates"]);
}

#[test]
fn sixteen_bit_records_without_churn_are_linearizable() {
    let report = run(&Run {
        keys: 32,
        records: 512,
        record_width_bits: 16,
        ..Run::new(0x5eed_0002, 2, 2, 3_000)
    });
    assert_eq!(report.counter("churn"), Some(0));
}

/// Objects move to a host's DRAM after two consecutive accesses from it, so with three
/// hosts on the same keys they move there and back all the time: every read or write
/// from another host is an RPC and a move back first.
#[test]
fn local_partitions_moving_back_and_forth_are_linearizable() {
    let report = run_local(0x5eed_0003, 2, 0, 4_000);
    assert_counters_above(&report, 100, MOVES);
    assert_counters_above(&report, 100, RPCS_AND_LOCAL_ACCESSES);
    assert_eq!(report.counter("copies made"), Some(0), "copies are off");
}

/// Copies after two reads from a host, on keys that are written all the time: copies
/// are made and invalidated by writes' log events over and over.
#[test]
fn local_copies_invalidated_by_writes_are_linearizable() {
    let report = run_local(0x5eed_0004, 0, 2, 6_000);
    assert_counters_above(&report, 100, COPIES);
    assert_eq!(
        report.counter("moves to a host"),
        Some(0),
        "partitions are off"
    );
}

/// Both at once.
#[test]
fn local_partitions_and_copies_together_are_linearizable() {
    let report = run_local(0x5eed_0005, 3, 2, 4_000);
    assert_counters_above(&report, 10, MOVES);
    assert_counters_above(&report, 10, &["copies made", "copies invalidated"]);
}

/// A run asking for more hosts than the store has answers an error
/// (or panics) instead of hanging: the worker whose handle fails must not leave the others
/// waiting at the start barrier for ever.
#[test]
fn a_run_on_more_hosts_than_the_store_has_does_not_hang() {
    let checked_run = Run::new(0x5eed_0009, 1, 1, 10);
    let pod = pod(&checked_run);
    let host = Arc::new(Host::join(&pod, Join::AnyFree, HostOptions::new()).expect("join"));
    let store = Arc::new(Store::new(Megalon::new(pod, vec![host])));
    let (done, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let checked = CheckedRun {
            seed: 9,
            hosts: 2,
            threads_per_host: 1,
            operations_per_thread: 10,
            keys: 8,
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_checked(&store, &checked)
        }));
        let _ = done.send(result.is_ok());
    });
    match answer.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(_) => {}
        Err(_) => panic!("run_checked hung: a worker's handle failed before the start barrier"),
    }
}
