//! The HCMeta schemes under the checker every scheme runs: threads on three hosts put,
//! get, insert and delete skewed keys on simulated non-coherent memory (a different
//! eviction seed per host), and every history must be linearizable. The budgets are
//! tight, so objects are shared, unshared and shared again during the run.

use std::time::{Duration, Instant};

use megalon_baselines::hcmeta::{scr_bytes_per_shared_object, HcMeta, HcMetaConfig, Placement};
use megalon_core::{MemoryKind, SimulatedConfig};
use megalon_kv::checked::{recorded_operations, run_checked, seed_from_env, CheckedRun};
use megalon_kv::{Report, Scheme, Store};

const HOSTS: usize = 3;
const KEYS: u64 = 96;
const MAX_KEY_BYTES: usize = 16;

fn config(budget_objects: Option<u64>, placement: Placement) -> HcMetaConfig {
    HcMetaConfig::new(HOSTS, KEYS, 128)
        .max_key_bytes(MAX_KEY_BYTES)
        .scr_budget_bytes(budget_objects.map(|n| n * scr_bytes_per_shared_object(MAX_KEY_BYTES)))
        .placement(placement)
        .ring_entries(8)
        .wait_limit(Duration::from_secs(5))
}

fn run(config: HcMetaConfig, seed: u64, operations_per_thread: u32) -> Report {
    let started = Instant::now();
    let scheme = HcMeta::new(config, |host| {
        MemoryKind::Simulated(SimulatedConfig {
            seed: seed ^ (host as u64 + 1),
            capacity_lines: 256,
            random_eviction_one_in: 16,
            ..SimulatedConfig::default()
        })
    })
    .expect("scheme");
    let name = scheme.name();
    let store = Store::new(scheme);
    let checked = CheckedRun {
        seed,
        hosts: HOSTS,
        threads_per_host: 2,
        operations_per_thread,
        keys: KEYS,
    };
    let summary =
        run_checked(&store, &checked).unwrap_or_else(|violation| panic!("{name}: {violation}"));
    let report = store.report();
    eprintln!(
        "{name}: {summary:?} in {:.1} s\n{report}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(summary.operations, recorded_operations(&checked));
    report
}

fn counter(report: &Report, name: &str) -> u64 {
    report
        .counter(name)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// What every run must show: the operations, and stale lines dropped.
fn assert_did_the_work(report: &Report) {
    for name in [
        "reads",
        "writes",
        "creates",
        "deletes",
        "lines invalidated",
        "rpcs",
    ] {
        assert!(counter(report, name) > 0, "{name} is 0");
    }
}

/// Each of `counters` moved: the sharing budget made the scheme share and unshare.
#[track_caller]
fn assert_the_budget_bound(report: &Report, counters: &[&str]) {
    for name in counters {
        assert!(
            counter(report, name) > 0,
            "{name} is 0: the budget did not bind"
        );
    }
}

#[test]
fn hcmeta_with_a_tight_budget_is_linearizable() {
    let seed = seed_from_env(0x4c_0001);
    // Four shared objects per host, for 32 keys per host: sharing churns.
    let report = run(config(Some(4), Placement::Cxl), seed, 10_000);
    assert_did_the_work(&report);
    assert_the_budget_bound(
        &report,
        &["churn", "shares", "unshares", "clock bits cleared"],
    );
    assert_eq!(counter(&report, "rows copied"), 0);
    assert!(counter(&report, "shared objects") <= 3 * 4);
}

#[test]
fn hcmeta_local_with_a_tight_budget_is_linearizable() {
    let seed = seed_from_env(0x4c_0002);
    let report = run(config(Some(4), Placement::Local), seed, 10_000);
    assert_did_the_work(&report);
    assert_the_budget_bound(&report, &["churn", "shares", "unshares", "rows copied"]);
}

#[test]
fn hcmeta_unlimited_is_linearizable_and_never_unshares() {
    let seed = seed_from_env(0x4c_0003);
    let report = run(config(None, Placement::Cxl), seed, 10_000);
    assert_did_the_work(&report);
    // Every object is shared when it is created: nothing is shared on demand.
    assert!(counter(&report, "shares") > 0);
    assert_eq!(counter(&report, "unshares"), 0);
    assert_eq!(counter(&report, "churn"), 0);
}
