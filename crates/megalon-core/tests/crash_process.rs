//! A host process killed (SIGKILL) while it holds a record lock mid-write: the other host
//! finds its process gone, restores the object from the dead writer's undo image, and
//! reads it whole (the old value, never a mix) and writes it, within the lease and a
//! bound. The test binary re-runs itself as the child (see `common::process`).
//!
//! | phase | child (host 1)                                        | parent (host 0)             |
//! |-------|-------------------------------------------------------|-----------------------------|
//! | 1     |                                                       | created and written `k`     |
//! | 1     | locked `k`, wrote half of it into memory, waits       |                             |
//! | -     | killed by the parent                                  | reads `k` whole, writes it  |

#![cfg(target_os = "linux")]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::process::{join_parents_pod, mailbox, start_parent, wait_for_parent, with_cache};
use megalon_core::{Host, HostOptions, MemoryKind, PodConfig};

const CHILD_TEST: &str = "child_dies_mid_write";
const SLOT: usize = 1024;
const LEASE_MS: u32 = 500;
/// How long after the lease recovery may take, at most, on a loaded machine.
const BOUND: Duration = Duration::from_secs(5);

fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    HostOptions::new().memory(with_cache(memory, 1024, 64).for_host(0x3_1000, host))
}

fn config() -> PodConfig {
    // A pod in a file: `CrashSafety::Auto` keeps undo images.
    PodConfig::new().lnr_bytes(8 << 20).lease_ms(LEASE_MS)
}

fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

fn read(host: &Host) -> Vec<u8> {
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).expect("read");
    buf
}

/// The child: locks `k`, writes half of a new value and puts it in memory (as an eviction
/// would), says so, and waits to be killed.
#[test]
fn child_dies_mid_write() {
    let Some((host, _)) = join_parents_pod(options) else {
        return;
    };
    let (parent_word, child_word) = mailbox(host.pod());
    wait_for_parent(parent_word, 1, "to create k");
    let ticket = host.write_start(b"k").expect("locking k");
    ticket.write(0, &[0xee; SLOT / 2]).unwrap();
    host.memory().write_back(ticket.offset(), SLOT);
    host.memory().fence();
    child_word.store(1, Ordering::Release);
    std::thread::sleep(common::process::WAIT_BOUND);
    panic!("the parent did not kill us");
}

fn killed_writer(memory: MemoryKind) {
    let mut parent = start_parent(CHILD_TEST, &config(), &memory, options);
    let host = &parent.host;
    assert!(
        host.pod().config().undo_images(),
        "a file pod keeps undo images"
    );
    let (parent_word, child_word) = mailbox(host.pod());
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    parent_word.store(1, Ordering::Release);
    parent.child.wait_for(child_word, 1, "to lock k mid-write");
    parent.child.kill();
    let killed = Instant::now();
    assert_eq!(read(host), value(2), "the old value, whole");
    host.write(b"k", &value(3)).unwrap();
    assert_eq!(read(host), value(3));
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(LEASE_MS.into()) + BOUND,
        "recovered in {took:?}"
    );
    // The row is freed after the lock is restored: the recovery may still be finishing.
    while host.inspect().stats().hosts_recovered == 0 {
        assert!(killed.elapsed() < Duration::from_millis(LEASE_MS.into()) + BOUND);
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = host.inspect().stats();
    assert_eq!((stats.hosts_recovered, stats.locks_recovered), (1, 1));
    assert_eq!(host.pod().hosts().len(), 1, "the dead host's row is free");
}

common::process::parent_tests!(killed_writer: a_killed_writer_hardware, a_killed_writer_simulated);

/// [`child_dies_mid_write`], for [`every_host_died`] (a pod file of its own).
#[test]
fn child_dies_mid_write_in_a_pod_of_two() {
    child_dies_mid_write();
}

/// Every host of the pod died: the parent's own host (as on a machine that went down:
/// judged by its lease) and the child, killed mid-write (its process gone). No live host
/// is left to recover either, so a join of the killed child's id takes its row over and
/// recovers it itself: the old value whole, then a write. The parent's dead host is
/// recovered by the new host's pump.
fn every_host_died(memory: MemoryKind) {
    let common::process::Parent {
        host,
        mut child,
        files: _files,
        ..
    } = start_parent(
        "child_dies_mid_write_in_a_pod_of_two",
        &config().max_hosts(2),
        &memory,
        options,
    );
    let pod = std::sync::Arc::clone(host.pod());
    let (parent_word, child_word) = mailbox(&pod);
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    parent_word.store(1, Ordering::Release);
    child.wait_for(child_word, 1, "to lock k mid-write");
    megalon_core::inspect::crash(host);
    child.kill();
    let killed = Instant::now();
    let host = Host::join(&pod, megalon_core::Join::As(1), options(&memory, 1))
        .expect("a join once every host died");
    assert_eq!(read(&host), value(2), "the old value, whole");
    host.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&host), value(3));
    while host.pod().hosts().len() > 1 {
        assert!(
            killed.elapsed() < Duration::from_millis(LEASE_MS.into()) + BOUND,
            "the parent's dead host was never recovered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = host.inspect().stats();
    assert_eq!((stats.hosts_recovered, stats.locks_recovered), (2, 1));
}

common::process::parent_tests!(every_host_died: every_host_died_hardware, every_host_died_simulated);
