//! The AllLog variant of the object protocol (pods with `Coherence::AllLog`) across hosts
//! of one process, on simulated non-coherent memory: locks and counters replicated
//! through the log, no coherence record ever allocated.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    config, heap_pod, host, join, partial_write_over_stale_lines, read, small_cache, two_hosts,
    value, write_on_one_read_on_both, SLOT,
};
use megalon_core::{
    event::Event, inspect::ReplicatedLock, Coherence, Error, Host, HostOptions, Pod, WriteTicket,
};

fn pod() -> Arc<Pod> {
    heap_pod(&config().coherence(Coherence::AllLog))
}

/// A small simulated cache that never evicts at random: every cached line stays until it
/// is flushed.
fn sticky(seed: u64) -> HostOptions {
    HostOptions::new().memory(common::simulated(seed, 512, 0))
}

/// How many `Lock` and `Unlock` events the log holds so far.
fn lock_events_in_log(host: &Host) -> (usize, usize) {
    let (_, _, tail) = host.inspect().log_cursors();
    let events = host.inspect().read_log(0, tail).unwrap();
    let count = |f: fn(&Event<'_>) -> bool| events.iter().filter(|e| f(&e.event.event())).count();
    (
        count(|e| matches!(e, Event::Lock { .. })),
        count(|e| matches!(e, Event::Unlock { .. })),
    )
}

#[test]
fn every_write_is_a_lock_and_an_unlock_event_and_no_record_is_allocated() {
    let (a, b) = two_hosts(&pod(), small_cache, 1);
    write_on_one_read_on_both(&a, &b);
    let events = a.events();
    assert_eq!(
        (events.writes, events.lock_events, events.unlock_events),
        (19, 19, 19)
    );
    assert_eq!(events.record_allocs + b.events().record_allocs, 0);
    assert_eq!(a.inspect().records_in_use().0, 0, "no record in use");
    assert_eq!(lock_events_in_log(&a), (19, 19));
    assert_eq!(
        b.inspect().replicated_lock(b"k").unwrap(),
        Some(ReplicatedLock {
            holder: None,
            counter: 38
        })
    );
    assert_eq!(a.lookup(b"k").unwrap().unwrap().record, None);
    assert!(!b.make_read_shared(b"k").unwrap(), "nothing to deallocate");
    // The writer's own reads need no invalidation: its Unlock set its host counter.
    assert_eq!(a.lookup(b"k").unwrap().unwrap().host_counter, Some(38));
}

#[test]
fn a_split_pod_has_no_replicated_locks_and_no_lock_events() {
    let config = megalon_core::PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20);
    let a = host(&heap_pod(&config), 3);
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    assert_eq!(a.inspect().replicated_lock(b"k").unwrap(), None);
    assert_eq!(lock_events_in_log(&a), (0, 0));
    assert_eq!(a.events().lock_events, 0);
    assert_eq!(a.events().record_allocs, 1);
}

/// `result` is `ObjectLocked` naming `holder`, for the call `what`.
#[track_caller]
fn assert_locked_by<T: std::fmt::Debug>(result: Result<T, Error>, holder: &Host, what: &str) {
    match result {
        Err(Error::ObjectLocked { holder: named, .. }) => assert_eq!(named, holder.id(), "{what}"),
        other => panic!("{what}: expected ObjectLocked, got {other:?}"),
    }
}

/// `writer` ends its write of `k` (`ticket`) with `value(2)`, which `reader` then reads:
/// what the calls refused meanwhile changed nothing (`why`).
#[track_caller]
fn end_the_write(writer: &Host, ticket: WriteTicket<'_>, reader: &Host, why: &str) {
    writer.memory().write(ticket.offset(), &value(2));
    writer.write_end(ticket).unwrap();
    assert_eq!(read(reader, b"k"), value(2), "{why}");
}

#[test]
fn a_write_in_progress_holds_off_writers_readers_and_deleters_by_name() {
    let pod = pod();
    let a = host(&pod, 4);
    let b = join(&pod, small_cache(5).wait_limit(Duration::from_millis(50)));
    a.create(b"k", &value(1)).unwrap();
    let ticket = a.write_start(b"k").unwrap();
    assert_eq!(ticket.record(), megalon_core::event::NO_RECORD);
    let held = b.inspect().replicated_lock(b"k").unwrap().unwrap();
    assert_eq!(held.holder, Some(a.id()));
    let mut buf = vec![0u8; SLOT];
    for (what, result) in [
        ("write", b.write(b"k", &value(9)).map(drop)),
        ("read", b.read(b"k", &mut buf).map(drop)),
        ("delete", b.delete(b"k")),
    ] {
        assert_locked_by(result, &a, what);
    }
    assert!(b.events().waits_for_writer > 0);
    end_the_write(&a, ticket, &b, "the refused calls changed nothing");
    b.delete(b"k").unwrap();
    assert!(matches!(a.read(b"k", &mut buf), Err(Error::UnknownKey)));
    assert!(matches!(a.write(b"k", &value(3)), Err(Error::UnknownKey)));
    // The delete took the lock through the log first.
    assert_eq!(b.events().lock_events, 1);
    assert_eq!(lock_events_in_log(&a), (2, 1));
    b.create(b"k", &value(4)).unwrap();
    assert_eq!(read(&a, b"k"), value(4));
    assert_eq!(
        a.inspect().replicated_lock(b"k").unwrap().unwrap().counter,
        0,
        "a new object"
    );
}

#[test]
fn a_reader_overlapping_a_write_or_a_delete_retries() {
    let (a, b) = two_hosts(&pod(), small_cache, 6);
    a.create(b"k", &value(1)).unwrap();
    let mut copy = vec![0u8; SLOT];
    let ticket = b.read_start(b"k").unwrap();
    b.memory().read(ticket.offset(), &mut copy);
    a.write(b"k", &value(2)).unwrap();
    assert!(
        !b.read_end(ticket).unwrap(),
        "the write invalidates the read"
    );
    assert_eq!(read(&b, b"k"), value(2));
    let ticket = b.read_start(b"k").unwrap();
    b.memory().read(ticket.offset(), &mut copy);
    a.delete(b"k").unwrap();
    assert!(
        !b.read_end(ticket).unwrap(),
        "the delete invalidates the read"
    );
    assert!(matches!(b.read(b"k", &mut copy), Err(Error::UnknownKey)));
    assert_eq!(b.events().read_retries_event, 2);
}

#[test]
fn a_reader_overlapping_a_write_in_progress_retries() {
    // The reader starts, then a writer on another host locks and writes part of the
    // object, its dirty lines reach memory (as an eviction may do), and the reader copies:
    // the Lock alone must make the read fail, before any Unlock.
    let (a, b) = two_hosts(&pod(), sticky, 12);
    a.create(b"k", &value(1)).unwrap();
    let ticket = b.read_start(b"k").unwrap();
    let write = a.write_start(b"k").unwrap();
    a.memory().write(write.offset(), &[0xee; 64]);
    a.memory().write_back(write.offset(), 64);
    a.memory().fence();
    let mut copy = vec![0u8; SLOT];
    b.memory().read(ticket.offset(), &mut copy);
    assert_eq!(&copy[..64], &[0xee; 64], "the copy is torn");
    assert!(
        !b.read_end(ticket).unwrap(),
        "the Lock invalidates the read"
    );
    a.write_end(write).unwrap();
    let mut expected = value(1);
    expected[..64].fill(0xee);
    assert_eq!(read(&b, b"k"), expected);
}

/// a holds the replicated lock of an object (a write in progress): b's
/// `delete_unless_busy` looks once and answers `ObjectLocked`, the object as it was, and
/// deletes it once the write ends. (It waited out b's wait limit, as `delete` does: the
/// AllLog delete took no wait of the caller's.)
#[test]
fn a_delete_unless_busy_of_a_locked_object_answers_at_once() {
    let wait = Duration::from_secs(2);
    let pod = pod();
    let a = host(&pod, 6);
    let b = join(&pod, small_cache(7).wait_limit(wait));
    a.create(b"k", &value(1)).unwrap();
    let ticket = a.write_start(b"k").unwrap();
    let began = std::time::Instant::now();
    let answer = b.delete_unless_busy(b"k");
    let took = began.elapsed();
    assert_locked_by(answer, &a, "delete_unless_busy");
    assert!(took < wait / 4, "it waited {took:?} (limit {wait:?})");
    end_the_write(&a, ticket, &b, "the refused delete changed nothing");
    b.delete_unless_busy(b"k").unwrap();
    assert!(a.lookup(b"k").unwrap().is_none());
}

#[test]
fn a_partial_write_keeps_the_other_hosts_bytes() {
    // b caches the object, a rewrites all of it, then b writes 8 bytes into its first
    // line: the rest of that line must be a's bytes. Random eviction is off so that b's
    // cached lines stay until something drops them.
    let (a, b) = two_hosts(&pod(), sticky, 8);
    a.create(b"k", &value(0)).unwrap();
    let mut expected = partial_write_over_stale_lines(&a, &b);
    // A partial write on top of the writer's own current lines.
    b.write_at(b"k", 200, &[0xdd; 8]).unwrap();
    expected[200..208].fill(0xdd);
    assert_eq!(read(&a, b"k"), expected);
    let (old, _) = a
        .update(b"k", |bytes| {
            let old = bytes[0];
            bytes[0] = 0x11;
            old
        })
        .unwrap();
    assert_eq!(old, 0xee);
    expected[0] = 0x11;
    assert_eq!(read(&b, b"k"), expected);
}

#[test]
fn a_write_reaches_memory_before_its_unlock() {
    // Nothing evicts a's dirty lines: only the write-back before the Unlock puts them in
    // memory, where b (whose replay of the Unlock dropped its lines) reads them.
    let (a, b) = two_hosts(&pod(), sticky, 10);
    a.create(b"k", &value(0)).unwrap();
    for round in 1..4u8 {
        a.write(b"k", &value(round)).unwrap();
        assert_eq!(read(&b, b"k"), value(round), "round {round}");
    }
}

#[test]
fn threads_of_several_hosts_writing_one_object_take_turns() {
    // Every write adds one to a counter in the object under its lock (read-modify-write):
    // a lost update means two writers held the lock at once.
    let pod = pod();
    let hosts: Vec<Host> = (0..3).map(|h| host(&pod, 20 + h)).collect();
    hosts[0].create(b"counter", &0u64.to_le_bytes()).unwrap();
    const ROUNDS: u64 = 150;
    std::thread::scope(|scope| {
        for host in &hosts {
            for _ in 0..2 {
                scope.spawn(move || {
                    for _ in 0..ROUNDS {
                        host.update(b"counter", |bytes| {
                            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                            bytes[..8].copy_from_slice(&(n + 1).to_le_bytes());
                        })
                        .unwrap();
                    }
                });
            }
        }
    });
    let mut buf = [0u8; 8];
    for host in &hosts {
        host.read(b"counter", &mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), 6 * ROUNDS);
    }
    let events = hosts
        .iter()
        .fold(megalon_core::EventCounts::default(), |sum, h| {
            sum + h.events()
        });
    assert_eq!(events.lock_events, 6 * ROUNDS);
    assert_eq!(events.unlock_events, 6 * ROUNDS);
    assert_eq!(events.record_allocs, 0);
    assert_eq!(
        hosts[1].inspect().replicated_lock(b"counter").unwrap(),
        Some(ReplicatedLock {
            holder: None,
            counter: (2 * 6 * ROUNDS) as u32
        })
    );
}
