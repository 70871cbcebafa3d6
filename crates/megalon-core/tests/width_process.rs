//! A host process killed (SIGKILL) while it drains the records for a switch of the record
//! width: the other host finds the switch's drainer gone once its row is recovered, takes
//! the switch over and ends it (here: opens the width word again, nothing having reached
//! the log), and writes go on. The test binary re-runs itself as the child (see
//! `common::process`).
//!
//! | phase | child (host 1)                                     | parent (host 0)                  |
//! |-------|----------------------------------------------------|----------------------------------|
//! | 1     |                                                    | wrote `k`, holds its write       |
//! | 1     | begins a switch to 8 bits: drains, waits for `k`   |                                  |
//! | -     | killed by the parent                               | ends its write, writes `j`       |

#![cfg(target_os = "linux")]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::process::{join_parents_pod, mailbox, start_parent, wait_for_parent, with_cache};
use megalon_core::{CrashSafety, HostOptions, MemoryKind, PodConfig, RecordShape};

const CHILD_TEST: &str = "child_dies_draining_a_switch";
const SLOT: usize = 1024;
const LEASE_MS: u32 = 500;
/// How long after the kill the takeover may take, at most, on a loaded machine.
const BOUND: Duration = Duration::from_secs(5);

fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    let wait = if host == 0 { 2 } else { 20 };
    HostOptions::new()
        .memory(with_cache(memory, 1024, 64).for_host(0x3_2000, host))
        .wait_limit(Duration::from_secs(wait))
}

fn config() -> PodConfig {
    PodConfig::new()
        .lnr_bytes(8 << 20)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Off)
        .record_width_switch(true)
}

fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

/// The child: once the parent holds `k`'s write, says so and begins a switch, which waits
/// for `k`'s lock until it is killed.
#[test]
fn child_dies_draining_a_switch() {
    let Some((host, _)) = join_parents_pod(options) else {
        return;
    };
    let (parent_word, child_word) = mailbox(host.pod());
    wait_for_parent(parent_word, 1, "to hold k's write");
    child_word.store(1, Ordering::Release);
    let switched = host.switch_record_width(8);
    panic!("the parent did not kill us; the switch answered {switched:?}");
}

fn killed_drainer(memory: MemoryKind) {
    let mut parent = start_parent(CHILD_TEST, &config(), &memory, options);
    let host = &parent.host;
    let (parent_word, child_word) = mailbox(host.pod());
    host.create(b"k", &value(1)).unwrap();
    host.create(b"j", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    let ticket = host.write_start(b"k").unwrap();
    ticket.write(0, &value(3)).unwrap();
    parent_word.store(1, Ordering::Release);
    parent.child.wait_for(child_word, 1, "to begin its switch");
    let deadline = Instant::now() + BOUND;
    while host.inspect().width_drainer() != Some(1) {
        assert!(Instant::now() < deadline, "the child never began to drain");
        std::thread::sleep(Duration::from_millis(1));
    }
    parent.child.kill();
    let killed = Instant::now();
    // A lock's holder ends its write whatever the width word says.
    host.write_end(ticket).unwrap();
    // Writes go on: a write passes the gate on this host's copy of the width word if its
    // pump has not acknowledged the freeze yet, or waits for the switch, finds the drainer
    // gone (once its row is recovered), takes the switch over and opens the word again:
    // nothing reached the log. Either way the pump takes it over if no write did.
    host.write(b"j", &value(4)).unwrap();
    while host.inspect().width_drainer().is_some() {
        assert!(killed.elapsed() < BOUND, "the switch was not taken over");
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = killed.elapsed();
    assert!(took < BOUND, "the takeover took {took:?}");
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(3));
    // The pod switches on.
    assert!(host.switch_record_width(8).unwrap());
    host.write(b"k", &value(5)).unwrap();
    host.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(5));
}

common::process::parent_tests!(killed_drainer: a_killed_drainer_hardware, a_killed_drainer_simulated);
