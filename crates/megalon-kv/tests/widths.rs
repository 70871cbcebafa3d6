//! The checked history of `checked::run_checked` at every record width, with churn, with
//! and without undo images, local partitions and copies, seeds from `KV_SEED`.
//! (Review `kvstore`, 2026-11-30.)

use std::sync::Arc;

use megalon_core::{
    Backing, CrashSafety, Host, HostOptions, Join, Layout, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};
use megalon_kv::checked::{run_checked, CheckedRun};
use megalon_kv::{Megalon, Store};

fn run(seed: u64, width: u32, undo: bool, partitions: u32, copies: u32) {
    let seed = std::env::var("KV_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    let ops = std::env::var("KV_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    eprintln!("seed {seed}");
    let base = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(192)
        .max_key_bytes(16)
        .log_capacity_entries(512)
        .record_width_bits(width)
        .max_hosts(3)
        .local_partitions(partitions)
        .local_copies(copies)
        .crash_safety(if undo {
            CrashSafety::Undo
        } else {
            CrashSafety::Off
        });
    let all = Layout::new(&base).unwrap().record_count;
    let spare = (all - 16) * u64::from(width) / 8 / 64 * 64;
    let pod = Arc::new(Pod::create(&base.app_scr_bytes(spare), Backing::heap()).unwrap());
    let hosts: Vec<_> = (0..3u64)
        .map(|h| {
            let options = HostOptions::new()
                .memory(MemoryKind::Simulated(SimulatedConfig {
                    seed: seed ^ (h + 1),
                    capacity_lines: 128,
                    random_eviction_one_in: 8,
                    ..SimulatedConfig::default()
                }))
                .wait_limit(std::time::Duration::from_secs(5));
            Arc::new(Host::join(&pod, Join::AnyFree, options).unwrap())
        })
        .collect();
    let store = Store::new(Megalon::new(pod, hosts));
    let run = CheckedRun {
        seed,
        hosts: 3,
        threads_per_host: 2,
        operations_per_thread: ops,
        keys: 48,
    };
    run_checked(&store, &run).unwrap_or_else(|v| panic!("{v}"));
}

#[test]
fn two_bits() {
    run(0x3d01, 2, false, 0, 0);
}
#[test]
fn four_bits_undo() {
    run(0x3d02, 4, true, 0, 0);
}
#[test]
fn two_bits_undo_local() {
    run(0x3d03, 2, true, 2, 2);
}
#[test]
fn thirty_two_bits_copies() {
    run(0x3d04, 32, false, 0, 2);
}
