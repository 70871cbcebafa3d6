//! A pod with undo images whose record width may switch, and a host process killed
//! (SIGKILL) with a record claimed for an object and its alloc not yet logged: the claim's
//! announce holds every switch off until the host's recovery has settled it. Its process
//! is gone, so the host acknowledges every freeze, and a claim locks nothing: only the
//! announce keeps a switch from zeroing the array under it, which its recovery would
//! then read at the new width. The parent runs without a pump, so the recovery runs only
//! when the test asks. Built with the `chaos` feature only (the child stops at a hook);
//! the test binary re-runs itself as the child (see `common::process`).
//!
//! | phase | child (host 1)                                  | parent (host 0)                       |
//! |-------|-------------------------------------------------|---------------------------------------|
//! | 1     |                                                 | created `k` (no record yet)           |
//! | 1     | writes `k`: claims a record, stops after it     |                                       |
//! | -     | killed by the parent                            | a switch gives up; recovery; switches |

#![cfg(all(target_os = "linux", feature = "chaos"))]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::process::{join_parents_pod, mailbox, start_parent, wait_for_parent, with_cache};
use megalon_core::chaos::{self, Point};
use megalon_core::{CrashSafety, Error, HostOptions, MemoryKind, PodConfig, RecordShape};

const CHILD_TEST: &str = "child_dies_holding_a_claim";
const SLOT: usize = 1024;
const LEASE_MS: u32 = 500;
/// The parent's wait limit: how long its first switch waits for the dead host's announce.
const PARENT_WAIT: Duration = Duration::from_secs(1);
/// How long the recovery may take, at most, on a loaded machine.
const BOUND: Duration = Duration::from_secs(5);

fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    let options = HostOptions::new().memory(with_cache(memory, 1024, 64).for_host(0x3_3000, host));
    if host == 0 {
        options.wait_limit(PARENT_WAIT).pump_interval(None)
    } else {
        options.wait_limit(Duration::from_secs(20))
    }
}

fn config() -> PodConfig {
    PodConfig::new()
        .lnr_bytes(8 << 20)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
        .record_width_switch(true)
}

fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

/// The child: once the parent created `k`, writes it; its write claims a record for `k`
/// (announced), says so, and stops there until it is killed.
#[test]
fn child_dies_holding_a_claim() {
    let Some((host, _)) = join_parents_pod(options) else {
        return;
    };
    let (parent_word, _) = mailbox(host.pod());
    wait_for_parent(parent_word, 1, "to create k");
    let pod = std::sync::Arc::clone(host.pod());
    let written = chaos::with_hook(
        move |at| {
            if at == Point::AllocAfterClaim {
                mailbox(&pod).1.store(1, Ordering::Release);
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        },
        || host.write(b"k", &value(2)),
    );
    panic!("the write claimed no record: {written:?}");
}

fn dead_claimer(memory: MemoryKind) {
    let mut parent = start_parent(CHILD_TEST, &config(), &memory, options);
    let host = &parent.host;
    let (parent_word, child_word) = mailbox(host.pod());
    host.create(b"k", &value(1)).unwrap();
    parent_word.store(1, Ordering::Release);
    parent
        .child
        .wait_for(child_word, 1, "to claim a record for k");
    parent.child.kill();
    // Its process is gone: it acknowledges the freeze, and its claim locks nothing. Its
    // announce is left, and nothing recovers it yet (this host has no pump).
    let switched = host.switch_record_width(8);
    assert!(
        matches!(switched, Err(Error::RecordWidthSwitching { .. })),
        "a switch past a dead host's announce: {switched:?}"
    );
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    let deadline = Instant::now() + BOUND;
    while host.inspect().stats().hosts_recovered < 1 {
        assert!(Instant::now() < deadline, "the dead host was not recovered");
        host.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        host.inspect().record_census().in_use.is_empty(),
        "the claim freed"
    );
    assert!(host.switch_record_width(8).unwrap());
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 8 }
    );
    host.write(b"k", &value(3)).unwrap();
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(3));
    let census = host.inspect().record_census();
    assert_eq!(census.in_use.len(), 1, "k's record, of the new width");
    assert!(census.locked.is_empty());
}

common::process::parent_tests!(dead_claimer: a_dead_claimer_hardware, a_dead_claimer_simulated);
