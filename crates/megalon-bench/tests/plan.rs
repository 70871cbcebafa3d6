//! The benchmark runner's plans: keys of any length, YCSB's workloads with their
//! operations (D's inserts, F's read-modify-writes), counted as YCSB counts them.

use std::sync::Arc;
use std::time::Duration;

use megalon_bench::mix::{self, Choice, MixRun, Plan};
use megalon_core::{Backing, HostOptions, MemoryKind, Pod, PodConfig};
use megalon_kv::{Megalon, Store};
use megalon_workload::Workload;

/// A two-host store over simulated memory for keys of up to `key_bytes`, loaded with a
/// plan of `choice` over 500 keys of `key_bytes`, then run on it for `run_ms`: the store,
/// the plan and the run.
fn load_and_run(choice: Choice, key_bytes: usize, run_ms: u64) -> (Store<Megalon>, Plan, MixRun) {
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(8 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(key_bytes as u32)
        .max_hosts(2);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let options = HostOptions::new().memory(MemoryKind::simulated(5));
    let store = Store::new(Megalon::join(pod, 2, &options).unwrap());
    let plan = Plan {
        keys: 500,
        key_bytes,
        value_bytes: 64,
        choice,
        seed: 11,
    };
    mix::load_all(&store, &plan, 2, |_| {}).unwrap();
    let run = mix::run_plan(&store, &plan, 2, Duration::from_millis(run_ms), |_, _| {}).unwrap();
    (store, plan, run)
}

#[test]
fn keys_have_the_length_asked_for() {
    assert_eq!(mix::key_of_len(7, 16), mix::key(7));
    assert_eq!(mix::key_of_len(7, 40).len(), 40);
    assert_eq!(mix::key_of_len(7, 3).len(), mix::KEY_BYTES);
    assert_ne!(mix::key_of_len(7, 40), mix::key_of_len(8, 40));
    assert_eq!(mix::key_of_len(0, 16), b"user000000000000");
    assert_eq!(mix::key_of_len(1_234_567, 20), b"user0000000001234567");
    assert_eq!(
        mix::key_of_len(u64::MAX, 24),
        format!("user{:020}", u64::MAX).as_bytes()
    );
}

#[test]
fn workload_d_inserts_new_keys_that_every_host_reads() {
    let (store, plan, run) = load_and_run(Choice::Ycsb(Workload::D), 32, 300);
    let inserts = run.report.counter("creates").unwrap();
    assert!(inserts > 0, "D inserted nothing");
    assert_eq!(run.operations(), run.gets() + run.puts());
    // The inserted keys follow the loaded ones, with no gap, and every host has them.
    let mut kv = store.handle(1).unwrap();
    for index in [plan.keys, plan.keys + inserts - 1] {
        let key = mix::key_of_len(index, 32);
        assert!(kv.get(&key).unwrap().is_some(), "key {index} missing");
    }
    assert!(kv
        .get(&mix::key_of_len(plan.keys + inserts, 32))
        .unwrap()
        .is_none());
}

#[test]
fn workload_f_counts_a_read_modify_write_once() {
    let (_, _, run) = load_and_run(Choice::Ycsb(Workload::F), 16, 300);
    // Half the operations read, half read and then write: gets = operations, puts ~ half.
    assert_eq!(run.gets(), run.operations());
    let half = run.puts() as f64 / run.operations() as f64;
    assert!((0.45..0.55).contains(&half), "{half} of operations wrote");
    assert_eq!(run.report.counter("creates"), Some(0));
}

#[test]
fn a_mix_plan_runs_its_write_ratio() {
    let read_only = Choice::Mix {
        write_ratio: 0.0,
        skew: 0.99,
    };
    let (_, _, run) = load_and_run(read_only, 16, 200);
    assert!(run.gets() > 0);
    assert_eq!(run.puts(), 0);
    assert_eq!(run.report.counter("writes"), Some(0));
}

/// Found by a review (2026-11-29): under `--numa` megalon's and AllLog's pods were bound
/// to the emulated CXL node and HCMeta's was not (it never paid the far node's latency).
/// Every scheme binds its pod to the setup's node: one that does not exist is refused.
#[test]
fn every_scheme_binds_its_pod_to_the_setups_numa_node() {
    use megalon_bench::lineup::{self, Kind, Setup};
    let setup = Setup {
        hosts: 3,
        keys: 1_000,
        extra_keys: 0,
        key_bytes: 24,
        value_bytes: 100,
        scr_bytes: 64 << 10,
        record_bits: 32,
        numa_node: Some(4000),
        partition_after: 0,
        copy_after: 0,
        cxl: None,
    };
    for kind in Kind::ALL {
        assert!(
            lineup::build(kind, &setup).is_err(),
            "{} built its pod ignoring NUMA node 4000",
            kind.name()
        );
    }
}
