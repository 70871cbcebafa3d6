//! The store's histories from several hosts on simulated non-coherent memory, checked for
//! linearizability key by key: every get returns a value some linearization allows, never
//! a stale, torn or deleted one.

use std::sync::Arc;

use megalon_core::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig};
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
        .max_hosts(run.hosts as u32);
    let all = base.layout().expect("layout").record_count;
    let record_bytes = u64::from(run.record_width_bits / 8);
    let spare = (all - run.records) * record_bytes / 64 * 64;
    let config = base.app_scr_bytes(spare);
    let layout = config.layout().expect("layout");
    assert!(layout.record_count >= run.records && layout.record_count < run.records + 64);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn run(run: &Run) -> (megalon_workload::Summary, megalon_kv::Report) {
    let pod = pod(run);
    let hosts: Vec<_> = (0..run.hosts)
        .map(|host| {
            let options = HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
                seed: run.seed ^ (host as u64 + 1),
                capacity_lines: 256,
                random_eviction_one_in: 16,
            }));
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
    let run_spec = Run {
        seed,
        hosts: 3,
        threads_per_host: 2,
        operations_per_thread: 20_000,
        keys: 96,
        records: 16,
        record_width_bits: 8,
    };
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
        seed: 0x5eed_0002,
        hosts: 2,
        threads_per_host: 2,
        operations_per_thread: 3_000,
        keys: 32,
        records: 512,
        record_width_bits: 16,
    });
    assert_eq!(summary.operations, 4 * 3_000);
    assert_eq!(report.counter("churn"), Some(0));
}
