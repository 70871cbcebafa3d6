//! A recoverer restoring a dead host's record lock, against live hosts locking the same
//! record. A lock word does not name its holder (every lock of a 2-bit record is the
//! same word), so recovery must never take a live lock for the dead host's: every lock
//! is announced, and a host about to lock defers to a recoverer's intent. Built with the
//! `chaos` feature only (the tests hold threads at chosen points).
#![cfg(feature = "chaos")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{simulated, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, Pod};

const LEASE_MS: u32 = 100;
/// How long after the lease recovery may take, at most, on a loaded machine.
const BOUND: Duration = Duration::from_secs(5);

/// A pod of 2-bit records with undo images and a short lease.
fn config() -> megalon_core::PodConfig {
    common::config()
        .record_width_bits(2)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
}

/// A host that lives as long as the test binary (hooks are `'static`), with a pump or
/// without (it then replays in its operations, and recovers when told to).
fn leak(pod: &Arc<Pod>, id: u32, pump: bool, wait_limit: Duration) -> &'static Host {
    let options = HostOptions::new()
        .memory(simulated(u64::from(id) + 1, 4096, 0))
        .record_watermark(1.0)
        .wait_limit(wait_limit)
        .pump_interval(pump.then(|| Duration::from_millis(1)));
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options).expect("join"),
    ))
}

/// `dead` runs `call` on a thread of its own and dies at `point`, where it stays.
fn dies_at(dead: &'static Host, point: Point, call: fn(&'static Host)) {
    let (frozen, is_frozen) = channel();
    std::thread::spawn(move || {
        let frozen = Mutex::new(frozen);
        chaos::with_hook(
            move |at| {
                if at == point {
                    dead.inspect().freeze();
                    frozen.lock().unwrap().send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            || call(dead),
        );
    });
    is_frozen.recv().unwrap();
}

/// `dead` announces a write lock of `k`'s record and dies before its CAS: its announce
/// names the word every lock of a 2-bit record has.
fn dies_announcing_a_lock_of_k(dead: &'static Host) {
    dies_at(dead, Point::WriteBeforeLock, |dead| {
        let _ = dead.write_start(b"k");
    });
}

/// A host joined without a pump (it recovers nobody), owned (for `crash`).
fn join(pod: &Arc<Pod>, id: u32) -> Host {
    let options = HostOptions::new()
        .memory(simulated(u64::from(id) + 1, 4096, 0))
        .record_watermark(1.0)
        .pump_interval(None);
    Host::join(pod, Join::As(id), options).expect("join")
}

/// The record of `k` and whether some host holds it locked, as `host` sees the array.
fn k_record_locked(host: &Host) -> (u32, bool) {
    let record = host
        .inspect()
        .replica_snapshot()
        .into_iter()
        .find(|(key, _)| key == b"k")
        .and_then(|(_, entry)| entry.record)
        .expect("k has a record");
    (
        record,
        host.inspect().record_census().locked.contains(&record),
    )
}

fn read(host: &Host) -> Vec<u8> {
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).expect("read");
    buf
}

/// A live host moving `k` to its DRAM holds the record's lock while its move's event is
/// appended. The recoverer of a dead host that announced the same lock word must wait
/// for it, not unlock it (it did, when a move did not announce its lock: a writer then
/// locked the record beside the move, and a read returned its half-written value).
#[test]
fn recovery_never_takes_a_live_moves_lock_for_a_dead_hosts() {
    // Local partitions: an object moves to a host after two accesses in a row from it.
    let pod = common::heap_pod(&config().local_partitions(2));
    // Without a pump: the test runs its recovery, at the moment it chooses.
    let r = leak(&pod, 0, false, Duration::from_millis(300));
    let d = leak(&pod, 1, false, Duration::from_millis(300));
    // Without a pump either, so that r alone recovers, in the window held open below
    // (a pump would watch too, and could recover d before the move locks the record).
    let h = leak(&pod, 2, false, Duration::from_millis(300));
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    read(h); // h's first read of two in a row
    dies_announcing_a_lock_of_k(d);
    // h's second read moves k here; hold it while it appends the move's event, holding
    // the record's lock, while r runs its watch for four leases: once d's lease has run
    // out, every round tries to recover d.
    let taken = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let (taken_in, held_in) = (taken.clone(), held.clone());
    chaos::with_hook(
        move |point| {
            if point != Point::ReserveBeforeCas || held_in.swap(true, Ordering::SeqCst) {
                return;
            }
            assert!(k_record_locked(h).1, "h holds k's record during its move");
            let lease = Duration::from_millis(u64::from(LEASE_MS));
            let start = Instant::now();
            let mut rounds_after_lease = 0;
            while (start.elapsed() < 4 * lease || rounds_after_lease < 10)
                && !taken_in.load(Ordering::SeqCst)
            {
                r.inspect().watch_hosts();
                if start.elapsed() > 2 * lease {
                    rounds_after_lease += 1;
                }
                if !k_record_locked(h).1 {
                    taken_in.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        },
        || read(h),
    );
    assert!(held.load(Ordering::SeqCst), "the move ran");
    assert!(
        !taken.load(Ordering::SeqCst),
        "recovery unlocked k's record while h's move held it"
    );
    // Once the move let go, the dead host is recovered, and k reads whole (from h's
    // DRAM: h serves no calls from the others without a pump).
    recover_by_hand(&pod, d.id(), r);
    assert_eq!(read(h), value(2));
    h.write(b"k", &value(3)).unwrap();
    assert_eq!(read(h), value(3));
}

/// Runs `r`'s watch until `dead` is recovered (by `r` or another host).
#[track_caller]
fn recover_by_hand(pod: &Pod, dead: u32, r: &Host) {
    let deadline = Instant::now() + Duration::from_millis(u64::from(LEASE_MS)) + BOUND;
    while pod.hosts().iter().any(|row| row.host == dead) {
        assert!(
            Instant::now() < deadline,
            "no recovery: {:?}",
            r.inspect().background_errors()
        );
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The race the intent closes: the recoverer looked at the announces and found none of
/// the record's; before it looks at the word, a live writer announces and locks it. The
/// word is then the dead host's announced word, and only the intent tells the writer to
/// defer: it does (its wait gives up), and recovery finds the record unlocked.
#[test]
fn a_host_that_locks_after_the_recoverer_looked_defers_to_it() {
    let pod = common::heap_pod(&config());
    let r = leak(&pod, 0, false, Duration::from_millis(300));
    let d = leak(&pod, 1, false, Duration::from_millis(300));
    let w = leak(&pod, 2, false, Duration::from_millis(100));
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    dies_announcing_a_lock_of_k(d);
    let attempt = Arc::new(Mutex::new(None));
    let attempt_in = attempt.clone();
    let deadline = Instant::now() + Duration::from_millis(u64::from(LEASE_MS)) + BOUND;
    chaos::with_hook(
        move |point| {
            let mut attempt = attempt_in.lock().unwrap();
            if point == Point::RecoveryAfterScan && attempt.is_none() {
                *attempt = Some(w.write_start(b"k").map(|ticket| {
                    ticket.write(0, &value(9)[..SLOT / 2]).unwrap();
                    std::mem::forget(ticket);
                }));
            }
        },
        || {
            while r.inspect().stats().hosts_recovered < 1 {
                assert!(Instant::now() < deadline, "no recovery");
                r.inspect().watch_hosts();
                std::thread::sleep(Duration::from_millis(5));
            }
        },
    );
    let attempt = attempt
        .lock()
        .unwrap()
        .take()
        .expect("recovery reached its check");
    match attempt {
        Ok(()) => panic!(
            "w locked k's record while recovery was about to restore it; locked after \
             recovery: {}",
            k_record_locked(r).1
        ),
        Err(error) => assert!(matches!(error, Error::RecordBusy { .. }), "{error:?}"),
    }
    assert!(!k_record_locked(r).1);
    assert_eq!(read(r), value(2));
    w.write(b"k", &value(3)).unwrap();
    assert_eq!(read(r), value(3));
}

/// Two dead hosts announce the same lock word of `k`'s record: one never took it (it
/// died before its CAS), the other holds it in the middle of a write (half of a new
/// value in memory, its undo image ready). Recovering the first, the recoverer must find
/// the second's image among the dead and put it back, not unlock over the torn bytes.
#[test]
fn a_writer_that_died_mid_write_is_found_among_the_dead() {
    let pod = common::heap_pod(&config());
    // Without a pump: recovery runs once both are dead, whatever the machine's load.
    let r = leak(&pod, 0, false, Duration::from_millis(300));
    let never_took = leak(&pod, 1, false, Duration::from_millis(300));
    let writer = join(&pod, 2);
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    dies_announcing_a_lock_of_k(never_took);
    let ticket = writer.write_start(b"k").unwrap();
    ticket.write(0, &[0xee; SLOT / 2]).unwrap();
    writer.memory().write_back(ticket.offset(), SLOT);
    writer.memory().fence();
    std::mem::forget(ticket);
    let writer_id = writer.id();
    megalon_core::inspect::crash(writer);
    recover_by_hand(&pod, never_took.id(), r);
    recover_by_hand(&pod, writer_id, r);
    assert_eq!(read(r), value(2), "the last complete value, whole");
    r.write(b"k", &value(3)).unwrap();
    assert_eq!(read(r), value(3));
}

/// A writer dies after its unlock, before it clears its announce: the write is complete
/// (another host reads it). Another host then locks the record (the same word, at 2
/// bits) and dies too. The first announce must not bring back its old image over the
/// write that was read since: a writer lets go of its image before it unlocks.
#[test]
fn an_announce_left_after_an_unlock_never_undoes_the_write() {
    let pod = common::heap_pod(&config());
    // Without a pump: recovery runs once both are dead, whatever the machine's load.
    let r = leak(&pod, 0, false, Duration::from_millis(300));
    let finished = leak(&pod, 1, false, Duration::from_millis(300));
    let locker = join(&pod, 2);
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    dies_at(finished, Point::WriteAfterUnlock, |host| {
        host.write(b"k", &value(3)).unwrap();
    });
    assert_eq!(read(r), value(3), "the write is done");
    let ticket = locker.write_start(b"k").unwrap();
    std::mem::forget(ticket);
    let locker_id = locker.id();
    megalon_core::inspect::crash(locker);
    recover_by_hand(&pod, finished.id(), r);
    recover_by_hand(&pod, locker_id, r);
    assert_eq!(read(r), value(3), "the write read before stays");
}
