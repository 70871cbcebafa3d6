//! AllLog through the same linearizability checker as megalon (`megalon_kv::checked`):
//! hosts on simulated non-coherent memory put, get, insert and delete skewed keys; every
//! get must return a value some linearization allows.

use std::sync::Arc;

use megalon_baselines::all_log::AllLog;
use megalon_core::{
    Backing, Coherence, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig,
};
use megalon_kv::checked::{recorded_operations, run_checked, seed_from_env, CheckedRun};
use megalon_kv::{Scheme, Store};

const HOSTS: usize = 3;

fn config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(512)
        .max_hosts(HOSTS as u32)
        .coherence(Coherence::AllLog)
}

#[test]
fn three_hosts_on_simulated_memory_are_linearizable() {
    let seed = seed_from_env(0x5eed_a110);
    let pod = Arc::new(Pod::create(&config(), Backing::heap()).expect("pod"));
    let hosts: Vec<_> = (0..HOSTS)
        .map(|host| {
            let options = HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
                seed: seed ^ (host as u64 + 1),
                capacity_lines: 256,
                random_eviction_one_in: 16,
                ..SimulatedConfig::default()
            }));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(AllLog::new(pod, hosts).expect("an AllLog pod"));
    assert_eq!(store.scheme().name(), "all-log");
    let run = CheckedRun {
        seed,
        hosts: HOSTS,
        threads_per_host: 2,
        operations_per_thread: 17_000,
        keys: 96,
    };
    let summary = run_checked(&store, &run).unwrap_or_else(|violation| panic!("{violation}"));
    let report = store.scheme().report();
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, recorded_operations(&run));
    assert_eq!(report.scheme, "all-log");
    let counter = |name| report.counter(name).expect(name);
    // Writes took their locks through the log, and no record was ever allocated.
    assert!(counter("lock events") > 0);
    assert!(counter("unlock events") > 0);
    assert!(counter("writes") > 0 && counter("deletes") > 0 && counter("creates") > 0);
    assert_eq!(counter("record allocs"), 0);
    assert_eq!(counter("records in use"), 0);
    assert_eq!(counter("churn"), 0);
    // Unlocks follow writes one for one; locks also precede deletes of keys that were
    // there (a delete that found none and won, the key created meanwhile, took none).
    assert_eq!(counter("unlock events"), counter("writes"));
    assert!(counter("lock events") >= counter("writes"));
    assert!(counter("lock events") <= counter("writes") + counter("deletes"));
    assert!(counter("lines invalidated") > 0);
}

#[test]
fn a_split_pod_is_refused_by_name() {
    let pod =
        Arc::new(Pod::create(&config().coherence(Coherence::Split), Backing::heap()).expect("pod"));
    let options = HostOptions::new().memory(MemoryKind::simulated(1));
    match AllLog::join(pod, 1, &options) {
        Err(megalon_kv::Error::Core(megalon_core::Error::ParameterMismatch {
            parameter,
            in_pod,
            expected,
        })) => assert_eq!((parameter, in_pod, expected), ("coherence", 0, 1)),
        Err(other) => panic!("expected a coherence mismatch, got {other}"),
        Ok(_) => panic!("a split pod taken for an AllLog one"),
    }
}
