//! Steps of the object protocol that no mutant switches off and no other test caught when
//! removed by hand (a review of 2026-11-30): each test holds the window the
//! step closes and fails without the step.
#![cfg(feature = "chaos")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, pauses_when, read, simulated, value};
use megalon_core::chaos::Point;
use megalon_core::{Host, HostOptions, Join, MemoryKind, Pod};

fn pod(record_width_bits: u32) -> Arc<Pod> {
    let config = config()
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096)
        .record_width_bits(record_width_bits);
    heap_pod(&config)
}

/// A host that lives as long as the test binary (hooks and threads hold it), without a
/// pump: it replays only in its own calls.
fn leak(pod: &Arc<Pod>, id: u32, memory: MemoryKind) -> &'static Host {
    let options = HostOptions::new()
        .memory(memory)
        .record_watermark(1.0)
        .wait_limit(Duration::from_secs(10))
        .pump_interval(None);
    let host = Host::join(pod, Join::As(id), options).expect("join");
    Box::leak(Box::new(host))
}

/// A simulated cache that holds every line of these tests and never evicts at random: a
/// line stays cached until the protocol drops it.
fn keeping_cache(seed: u64) -> MemoryKind {
    simulated(seed, 8192, 0)
}

/// `write_end` notes the new counter as this host's host counter *before* it unlocks (the
/// comment there gives a delete's reuse of the handle as the reason). Noted after the
/// unlock, it can overwrite what this host learned since: with 4-bit records (a 2-bit
/// counter), host A's write ends at counter 2 and pauses after its unlock; host B writes
/// (2 -> 0, a wrap event), A's other thread reads that version (its lines cached, its host
/// counter 0); the paused write then notes 2. B writes again (0 -> 2, no event), and A's
/// next read, finding counter 2 equal to its host counter, skips the pre-read
/// invalidation and serves B's previous version from its cache.
#[test]
fn a_write_notes_its_host_counter_before_its_unlock_not_over_a_later_read() {
    let pod = pod(4);
    let a = leak(&pod, 0, keeping_cache(11));
    let b = leak(&pod, 1, keeping_cache(12));
    a.create(b"k", &value(0)).unwrap();
    assert_eq!(read(b, b"k"), value(0));
    // A's first write allocates the record (counter 0) and ends at 2: paused after its
    // unlock.
    let paused = pauses_when(
        Point::WriteAfterUnlock,
        || true,
        move || a.write(b"k", &value(1)).map(|_| ()),
    );
    // B: 2 -> 3 -> 0, its wrap event appended at its write_start.
    b.write(b"k", &value(2)).unwrap();
    assert_eq!(b.events().wraps, 1, "B's write wrapped the counter");
    // A's other thread reads B's version: its lines cached, host counter 0.
    assert_eq!(read(a, b"k"), value(2));
    paused.resume().unwrap();
    // B: 0 -> 1 -> 2, no event.
    b.write(b"k", &value(3)).unwrap();
    assert_eq!(b.events().wraps, 1, "no second wrap");
    let got = read(a, b"k");
    assert!(
        got == value(3),
        "A read version {} (its cached lines) under counter 2, after B's version 3",
        got[0]
    );
}

/// A move to a host's DRAM copies the object from memory: it invalidates the mover's
/// cached lines first (`copy_and_move`). The policy moves an object right after an access
/// through CXL, and a write that lands between that access and the move's lock (here a
/// ticket write of host B, which the policy does not count, made while A's read replays
/// an unrelated create) leaves A's lines of the object stale under the record. Copied
/// from those lines, A's DRAM holds the version before B's write: the write is lost.
#[test]
fn a_move_to_a_hosts_dram_copies_the_object_from_memory() {
    let pod = heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(4096)
            .local_partitions(2),
    );
    let a = leak(&pod, 0, keeping_cache(51));
    let b = leak(&pod, 1, keeping_cache(52));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap(); // the record; A's first access
    let mut step = 0;
    let got = megalon_core::chaos::with_hook(
        move |point| match (step, point) {
            // A's second access has copied version 1: an unrelated event for its
            // read_end to replay.
            (0, Point::ReadBeforeEnd) => {
                b.create(b"z", &value(9)).unwrap();
                step = 1;
            }
            // In that replay, after read_end loaded the record's word: B writes k.
            (1, Point::ReplayBeforeCtail) => {
                let ticket = b.write_start(b"k").unwrap();
                ticket.write(0, &value(2)).unwrap();
                b.write_end(ticket).unwrap();
                step = 2;
            }
            _ => {}
        },
        || read(a, b"k"),
    );
    assert_eq!(got, value(1), "A's read took effect before B's write");
    assert_eq!(
        a.lookup(b"k").unwrap().unwrap().local_owner,
        Some(a.id()),
        "A's second access moved k to its DRAM"
    );
    let got = read(a, b"k");
    assert!(
        got == value(2),
        "A's DRAM holds version {}: B's acknowledged write of version 2 is lost",
        got[0]
    );
}
