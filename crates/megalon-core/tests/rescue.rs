//! Joins of a pod whose hosts all died: no live host is left to recover the dead holders
//! of the host table, so a joiner takes a dead holder's row over and recovers it itself
//! (`Host::join`'s rescue). The races: two joiners at once, a holder that was only
//! paused, a joiner that dies mid-rescue, a log that lapped. Built with the `chaos`
//! feature only (the tests hold threads at chosen points).
#![cfg(feature = "chaos")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::stops::{timed_unstopped, Timed};
use common::{pauses_when, simulated, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, JoinNotServedCause, Pod};

const LEASE_MS: u32 = 100;

/// A pod of 2-bit records with undo images, a short lease and `max_hosts` hosts.
fn pod(max_hosts: u32) -> Arc<Pod> {
    common::heap_pod(
        &common::config()
            .max_hosts(max_hosts)
            .record_width_bits(2)
            .lease_ms(LEASE_MS)
            .crash_safety(CrashSafety::Undo),
    )
}

/// Simulated memory (seeded by `seed`), a pump, waits of at most a second.
fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 4096, 0))
        .wait_limit(Duration::from_secs(1))
}

/// Joins with `which`, trying again while the answer is "no row" (up to 5 s).
fn join_retrying(pod: &Arc<Pod>, which: Join, seed: u64) -> Host {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Host::join(pod, which, options(seed)) {
            Ok(host) => return host,
            Err(error @ (Error::HostTableFull { .. } | Error::HostTaken { .. }))
                if Instant::now() < deadline =>
            {
                let _ = error;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("no join: {error:?}"),
        }
    }
}

/// `k`'s whole slot, as `host` reads it.
#[track_caller]
fn read(host: &Host) -> Vec<u8> {
    common::read(host, b"k")
}

/// `host` locks `k` for a write, puts `byte` over its first half, makes that reach
/// memory, and goes no further (the ticket is forgotten: the lock stays).
fn half_write(host: &Host, byte: u8) {
    let ticket = host.write_start(b"k").unwrap();
    ticket.write(0, &[byte; SLOT / 2]).unwrap();
    host.memory().write_back(ticket.offset(), SLOT);
    host.memory().fence();
    std::mem::forget(ticket);
}

/// Past every lease of the pod's dead hosts.
fn leases_run_out() {
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) * 3));
}

/// Hosts 0 and 1 of `pod` join, and both die (crashed, their leases run out): host 0 in
/// the middle of a write of `k` (value 2 written before; its undo image ready, half of
/// 0xee in memory), and, with `with_a_hole`, holding a log position it never published.
fn both_die_host_0_mid_write(pod: &Arc<Pod>, with_a_hole: bool) {
    let writer = Host::join(pod, Join::As(0), options(1)).unwrap();
    let other = Host::join(pod, Join::As(1), options(2)).unwrap();
    writer.create(b"k", &value(1)).unwrap();
    writer.write(b"k", &value(2)).unwrap();
    half_write(&writer, 0xee);
    if with_a_hole {
        writer.inspect().reserve_unpublished(1).unwrap();
    }
    megalon_core::inspect::crash(writer);
    megalon_core::inspect::crash(other);
    leases_run_out();
}

/// Both hosts of a full table died, one in the middle of a write of `k` (its undo image
/// ready, half its new bytes in memory). A joiner takes the writer's row over: its rescue
/// puts the last complete value back and unlocks, before the join completes; the other
/// row is recovered by the joiner's pump.
#[test]
fn a_rescue_restores_the_dead_holders_half_write() {
    let pod = pod(2);
    both_die_host_0_mid_write(&pod, false);
    let host = join_retrying(&pod, Join::AnyFree, 3);
    assert_eq!(host.id(), 0, "the first dead row is taken over");
    assert_eq!(read(&host), value(2), "the last complete value, whole");
    host.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&host), value(3));
    // The other dead row is recovered by the new host's pump, and can be joined.
    let second = join_retrying(&pod, Join::AnyFree, 4);
    assert_eq!(second.id(), 1);
    assert_eq!(read(&second), value(3));
}

/// A dead holder of a full table that reserved log positions and published nothing: the
/// rescue fills them with `Skip` before its replay (which would stall at them for good).
#[test]
fn a_rescue_fills_the_dead_holders_reservation() {
    let pod = pod(1);
    let dead = Host::join(&pod, Join::As(0), options(1)).unwrap();
    dead.create(b"k", &value(1)).unwrap();
    dead.inspect().reserve_unpublished(2).unwrap();
    megalon_core::inspect::crash(dead);
    leases_run_out();
    let host = join_retrying(&pod, Join::As(0), 2);
    assert_eq!(read(&host), value(1));
    host.create(b"j", &value(5)).unwrap();
    assert_eq!(common::read(&host, b"j"), value(5));
}

/// A dead id whose row is the only one held, the others free, and no live host: joined
/// as itself (it answered `HostTaken` for good; megalon-server's way around, a join under
/// a free id first whose pump recovers it, is not needed).
#[test]
fn a_dead_id_is_joined_as_itself_with_no_live_host() {
    let pod = pod(4);
    let dead = Host::join(&pod, Join::As(2), options(1)).unwrap();
    dead.create(b"k", &value(1)).unwrap();
    megalon_core::inspect::crash(dead);
    leases_run_out();
    let host = join_retrying(&pod, Join::As(2), 2);
    assert_eq!(read(&host), value(1));
}

/// A holder that lives (its pump beats), judged by its lease: a join of a full table is
/// refused as before (`HostTableFull`), within its wait limit (it watches the holder's
/// row for a lease at most), and the holder is not taken over. Timed over a run the
/// process was not stopped in (a stop overshoots any bound: run again, see
/// `common::stops`).
#[test]
fn a_live_holder_of_a_full_table_is_not_taken_over() {
    let Timed {
        value: (_pod, live, join),
        took,
        stopped,
    } = timed_unstopped(|| {
        let pod = pod(1);
        let live = Host::join(&pod, Join::As(0), options(1)).unwrap();
        live.inspect().pretend_elsewhere();
        live.create(b"k", &value(1)).unwrap();
        let started = Instant::now();
        let join = Host::join(&pod, Join::AnyFree, options(2));
        let ended = Instant::now();
        ((pod, live, join), started, ended)
    });
    assert!(
        matches!(join, Err(Error::HostTableFull { .. })),
        "a join took a live holder's row: {:?}",
        join.map(|host| host.id())
    );
    assert!(
        took < Duration::from_secs(1) + stopped,
        "bounded by a lease: {took:?} ({stopped:?} of it stopped)"
    );
    live.write(b"k", &value(2)).unwrap();
    assert_eq!(read(&live), value(2));
}

/// Two joiners at once, both past their look at the dead rows (every host dead) before
/// either takes one over: one takes the row, the other's CAS from the dead holder's word
/// fails and it answers `HostTableFull`; tried again, it joins the other row once the
/// first joiner's pump has recovered it. No row is held twice, no life recovered twice.
#[test]
fn two_joiners_at_once_take_a_dead_row_over_once() {
    let pod = pod(2);
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(2)).unwrap();
    a.create(b"k", &value(1)).unwrap();
    megalon_core::inspect::crash(a);
    megalon_core::inspect::crash(b);
    leases_run_out();
    let both_looked = Arc::new(Barrier::new(2));
    let joiners: Vec<_> = (0..2u64)
        .map(|n| {
            let (pod, both_looked) = (Arc::clone(&pod), Arc::clone(&both_looked));
            std::thread::spawn(move || {
                let once = AtomicBool::new(true);
                let first = chaos::with_hook(
                    move |at| {
                        if at == Point::RescueBeforeTakeOver && once.swap(false, Ordering::SeqCst) {
                            both_looked.wait();
                        }
                    },
                    || Host::join(&pod, Join::AnyFree, options(10 + n)),
                );
                let first_error = first.as_ref().err().cloned();
                let host = first.unwrap_or_else(|_| join_retrying(&pod, Join::AnyFree, 20 + n));
                (first_error, host)
            })
        })
        .collect();
    let mut joined: Vec<_> = joiners.into_iter().map(|j| j.join().unwrap()).collect();
    joined.sort_by_key(|(_, host)| host.id());
    let firsts: Vec<_> = joined.iter().map(|(first, _)| first.clone()).collect();
    assert!(
        firsts.iter().filter(|first| first.is_none()).count() == 1
            && firsts
                .iter()
                .flatten()
                .all(|error| matches!(error, Error::HostTableFull { .. })),
        "one rescue, the other refused: {firsts:?}"
    );
    let ids: Vec<_> = joined.iter().map(|(_, host)| host.id()).collect();
    assert_eq!(ids, vec![0, 1]);
    for (_, host) in &joined {
        assert_eq!(read(host), value(1));
    }
    let recovered: u64 = joined
        .iter()
        .map(|(_, host)| host.inspect().stats().hosts_recovered)
        .sum();
    assert_eq!(recovered, 2, "each dead life recovered once");
    joined[0].1.write(b"k", &value(2)).unwrap();
    assert_eq!(read(&joined[1].1), value(2));
}

/// The only holder of a one-row table, only paused (no heartbeat past its lease) in the
/// middle of a write: a joiner takes its row over and restores the write's undo image.
/// The holder resumes: its write ends in `HostDeclaredDead` and its unlock does not touch
/// the joiner's own lock of the record (the same word, at 2 bits); dropped, it leaves the
/// row to the joiner.
#[test]
fn a_holder_only_paused_is_taken_over_and_changes_nothing_after() {
    let pod = pod(1);
    let paused = Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap();
    paused.inspect().pretend_elsewhere();
    paused.create(b"k", &value(1)).unwrap();
    let ticket = paused.write_start(b"k").unwrap();
    ticket.write(0, &[0xee; SLOT / 2]).unwrap();
    paused.memory().write_back(ticket.offset(), SLOT);
    paused.memory().fence();
    leases_run_out();
    let host = join_retrying(&pod, Join::AnyFree, 2);
    assert_eq!(read(&host), value(1), "the undo image, whole");
    // The joiner holds the record locked (its own write); the paused holder resumes.
    let mine = host.write_start(b"k").unwrap();
    mine.write(0, &value(2)).unwrap();
    let late = paused.write_end(ticket);
    assert!(
        matches!(late, Err(Error::HostDeclaredDead { .. })),
        "the paused holder's write ended: {late:?}"
    );
    let create = paused.create(b"j", &value(9));
    assert!(
        matches!(create, Err(Error::HostDeclaredDead { .. })),
        "{create:?}"
    );
    host.write_end(mine).unwrap();
    assert_eq!(read(&host), value(2));
    drop(paused);
    assert_eq!(pod.hosts().len(), 1, "the joiner's row stays held");
    host.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&host), value(3));
}

/// A joiner that dies in the middle of its rescue (here: right after its `HostDead` of
/// the dead holder was published, before the holder's lock is restored) leaves the row
/// as a dead holder's: the next joiner takes it over from that life, and recovers what
/// both left (the first holder's half write, whose announce is still in the row).
#[test]
fn a_joiner_that_dies_mid_rescue_is_rescued_by_the_next() {
    let pod = pod(1);
    let writer = Host::join(&pod, Join::As(0), options(1)).unwrap();
    writer.create(b"k", &value(1)).unwrap();
    writer.write(b"k", &value(2)).unwrap();
    half_write(&writer, 0xee);
    megalon_core::inspect::crash(writer);
    leases_run_out();
    let pod_of_first = Arc::clone(&pod);
    let first = std::thread::spawn(move || {
        chaos::with_hook(
            |at| {
                if at == Point::AppendAfterPublish {
                    panic!("the first joiner dies after its HostDead");
                }
            },
            || Host::join(&pod_of_first, Join::AnyFree, options(2)).map(|host| host.id()),
        )
    })
    .join();
    assert!(first.is_err(), "the first joiner died: {first:?}");
    leases_run_out();
    let host = join_retrying(&pod, Join::AnyFree, 3);
    assert_eq!(read(&host), value(2), "the last complete value, whole");
    host.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&host), value(3));
}

/// A joiner that dies between two `Skip`s of the dead holder's reservation: the next
/// joiner fills the rest (the words name the first holder's life, not the dead joiner's).
#[test]
fn a_joiner_that_dies_mid_fill_leaves_the_rest_to_the_next() {
    let pod = pod(1);
    let dead = Host::join(&pod, Join::As(0), options(1)).unwrap();
    dead.create(b"k", &value(1)).unwrap();
    dead.inspect().reserve_unpublished(3).unwrap();
    megalon_core::inspect::crash(dead);
    leases_run_out();
    let pod_of_first = Arc::clone(&pod);
    let first = std::thread::spawn(move || {
        let mut fills = 0;
        chaos::with_hook(
            move |at| {
                if at == Point::RecoveryBeforeFill {
                    fills += 1;
                    if fills == 2 {
                        panic!("the first joiner dies between two fills");
                    }
                }
            },
            || Host::join(&pod_of_first, Join::AnyFree, options(2)).map(|host| host.id()),
        )
    })
    .join();
    assert!(first.is_err(), "the first joiner died: {first:?}");
    leases_run_out();
    let host = join_retrying(&pod, Join::AnyFree, 3);
    assert_eq!(read(&host), value(1));
    host.create(b"j", &value(5)).unwrap();
    assert_eq!(common::read(&host, b"j"), value(5));
}

/// Every host died after the log recycled entries: the index is in no replica and no
/// checkpoint (a late join streams a live host's), so a join answers `JoinNotServed`,
/// typed and bounded, and takes no row over (a second join answers the same).
#[test]
fn a_pod_whose_log_lapped_before_its_hosts_died_answers_join_not_served() {
    let pod = common::heap_pod(
        &common::config()
            .max_hosts(2)
            .log_capacity_entries(16)
            .lease_ms(LEASE_MS),
    );
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(2)).unwrap();
    for round in 0..40u8 {
        a.create(b"k", &value(round)).unwrap();
        b.replay().unwrap();
        a.delete(b"k").unwrap();
        b.replay().unwrap();
    }
    a.create(b"k", &value(1)).unwrap();
    b.replay().unwrap();
    let (head, ..) = a.inspect().log_cursors();
    assert!(head > 0, "the log lapped (head {head})");
    let rows = pod.hosts();
    megalon_core::inspect::crash(a);
    megalon_core::inspect::crash(b);
    leases_run_out();
    for _ in 0..2 {
        let join = Host::join(&pod, Join::AnyFree, options(3));
        assert!(
            matches!(
                join,
                Err(Error::JoinNotServed {
                    cause: JoinNotServedCause::NoHolder,
                    ..
                })
            ),
            "{:?}",
            join.map(|host| host.id())
        );
        let now: Vec<_> = pod
            .hosts()
            .iter()
            .map(|row| (row.host, row.pid, row.joins))
            .collect();
        let before: Vec<_> = rows
            .iter()
            .map(|row| (row.host, row.pid, row.joins))
            .collect();
        assert_eq!(now, before, "no row taken over");
    }
}

/// The only holder, only paused in the middle of a write, resumes right after a joiner
/// took its row over and before the joiner's recovery began: it must know it is dead
/// already (the take-over condemns its life before the CAS), and leave its lock and
/// undo image to the rescue, which puts the last complete value back. Had it unlocked,
/// its half-written bytes would stand as a complete value.
#[test]
fn a_holder_that_resumes_right_after_the_take_over_leaves_its_write_to_the_rescue() {
    let pod = pod(1);
    let paused = Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap();
    paused.inspect().pretend_elsewhere();
    paused.create(b"k", &value(1)).unwrap();
    let ticket = paused.write_start(b"k").unwrap();
    ticket.write(0, &[0xee; SLOT / 2]).unwrap();
    paused.memory().write_back(ticket.offset(), SLOT);
    paused.memory().fence();
    leases_run_out();
    let (taken, is_taken) = std::sync::mpsc::channel();
    let (resume, resumed) = std::sync::mpsc::channel::<()>();
    let pod_of_joiner = Arc::clone(&pod);
    let joiner = std::thread::spawn(move || {
        let (taken, resumed) = (std::sync::Mutex::new(taken), std::sync::Mutex::new(resumed));
        chaos::with_hook(
            move |at| {
                if at == Point::RescueAfterTakeOver {
                    taken.lock().unwrap().send(()).unwrap();
                    resumed.lock().unwrap().recv().unwrap();
                }
            },
            || Host::join(&pod_of_joiner, Join::AnyFree, options(2)),
        )
    });
    is_taken.recv().unwrap();
    let late = paused.write_end(ticket);
    resume.send(()).unwrap();
    let host = joiner.join().unwrap().expect("the rescue");
    assert!(
        matches!(late, Err(Error::HostDeclaredDead { .. })),
        "the paused holder's write ended: {late:?}"
    );
    assert_eq!(read(&host), value(1), "the undo image, whole");
}

/// The only holder, only paused between the announce of its reservation and its `tail`
/// CAS, resumes after a joiner took its row over and looked at the tail (nothing of its
/// reserved yet, nothing to fill), and before the joiner's own first reservation: its
/// CAS wins, it finds its row taken and writes nothing, and the joiner's `HostDead` lands
/// past a hole. The joiner's stalled replay must fill it (the row's words are the
/// joiner's own by then, and no watch looks at its own row), or every replay of the pod
/// stalls there for good.
#[test]
fn a_holder_paused_before_its_tail_cas_leaves_no_hole_the_rescue_cannot_fill() {
    let pod = pod(1);
    let paused: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap(),
    ));
    paused.inspect().pretend_elsewhere();
    paused.create(b"k", &value(1)).unwrap();
    let (before_cas, is_before_cas) = std::sync::mpsc::channel();
    let (go_on, goes_on) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let (before_cas, goes_on) = (
            std::sync::Mutex::new(before_cas),
            std::sync::Mutex::new(goes_on),
        );
        let once = AtomicBool::new(true);
        chaos::with_hook(
            move |at| {
                if at == Point::ReserveBeforeCas && once.swap(false, Ordering::SeqCst) {
                    before_cas.lock().unwrap().send(()).unwrap();
                    goes_on.lock().unwrap().recv().unwrap();
                }
            },
            || paused.create(b"late", &value(7)),
        )
    });
    is_before_cas.recv().unwrap();
    leases_run_out();
    let (joiner_before_cas, joiner_is_before_cas) = std::sync::mpsc::channel();
    let (joiner_go_on, joiner_goes_on) = std::sync::mpsc::channel::<()>();
    let pod_of_joiner = Arc::clone(&pod);
    let joiner = std::thread::spawn(move || {
        let (before_cas, goes_on) = (
            std::sync::Mutex::new(joiner_before_cas),
            std::sync::Mutex::new(joiner_goes_on),
        );
        let once = AtomicBool::new(true);
        chaos::with_hook(
            move |at| {
                if at == Point::ReserveBeforeCas && once.swap(false, Ordering::SeqCst) {
                    before_cas.lock().unwrap().send(()).unwrap();
                    goes_on.lock().unwrap().recv().unwrap();
                }
            },
            || Host::join(&pod_of_joiner, Join::AnyFree, options(2)),
        )
    });
    joiner_is_before_cas.recv().unwrap();
    // The holder's CAS takes the position the joiner was about to reserve.
    go_on.send(()).unwrap();
    let late = holder.join().unwrap();
    assert!(
        matches!(late, Err(Error::HostDeclaredDead { .. })),
        "the paused holder's create: {late:?}"
    );
    joiner_go_on.send(()).unwrap();
    let host = joiner.join().unwrap().expect("the rescue");
    assert_eq!(read(&host), value(1));
    assert_eq!(
        host.lookup(b"late").unwrap(),
        None,
        "the late create never landed"
    );
    host.create(b"j", &value(5)).unwrap();
    assert_eq!(common::read(&host, b"j"), value(5));
}

/// A joiner that died between two `Skip`s of the row it took over, and a second joiner
/// that rescues the other dead row: the first joiner's row is recovered the ordinary way
/// (the second's watch, its replay stalled at the hole), and that recovery fills what
/// the row's first holder reserved (the words name that life, not the dead joiner's).
#[test]
fn a_dead_rescuers_row_is_recovered_with_what_the_life_it_took_over_left() {
    let pod = pod(2);
    let first = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let other = Host::join(&pod, Join::As(1), options(2)).unwrap();
    first.create(b"k", &value(1)).unwrap();
    other.replay().unwrap();
    first.inspect().reserve_unpublished(3).unwrap();
    megalon_core::inspect::crash(first);
    megalon_core::inspect::crash(other);
    leases_run_out();
    let pod_of_rescuer = Arc::clone(&pod);
    let rescuer = std::thread::spawn(move || {
        let mut fills = 0;
        chaos::with_hook(
            move |at| {
                if at == Point::RecoveryBeforeFill {
                    fills += 1;
                    if fills == 2 {
                        panic!("the rescuer of row 0 dies between two fills");
                    }
                }
            },
            || Host::join(&pod_of_rescuer, Join::As(0), options(3)).map(|host| host.id()),
        )
    })
    .join();
    assert!(rescuer.is_err(), "the rescuer died: {rescuer:?}");
    leases_run_out();
    let host = join_retrying(&pod, Join::As(1), 4);
    assert_eq!(read(&host), value(1));
    host.create(b"j", &value(5)).unwrap();
    // Row 0 recovered by `host`'s pump and free: joined the ordinary way.
    let again = join_retrying(&pod, Join::As(0), 5);
    assert_eq!(common::read(&again, b"j"), value(5));
}

/// Two joiners at once, each of its own dead id (`Join::As`), whose dead lives both
/// announced the same lock of `k`: row 0's a lock it never took, row 1's its write in the
/// middle (its undo image ready). Both take their rows over before either recovers.
/// Each rescuer then sees the other's row as live, so neither settles the lock while the
/// other's announce is there: never the lock without its undo image (a torn value). They
/// wait on each other until their wait limits run out (`JoinNotServed`, each row left as
/// a dead holder's), each having logged its `HostDead` once (a first version logged one
/// every millisecond of its wait: the log lapped with no live host, and no join could
/// ever rescue the pod again); a later join then recovers both.
#[test]
fn two_rescuers_of_one_record_never_settle_it_without_its_undo_image() {
    let pod = pod(2);
    let never_took: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap(),
    ));
    let writer = Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap();
    writer.create(b"k", &value(1)).unwrap();
    writer.write(b"k", &value(2)).unwrap();
    never_took.replay().unwrap();
    // Host 0 announces a write lock of k and dies before its CAS.
    let (frozen, is_frozen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let frozen = std::sync::Mutex::new(frozen);
        chaos::with_hook(
            move |at| {
                if at == Point::WriteBeforeLock {
                    never_took.inspect().freeze();
                    frozen.lock().unwrap().send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            || {
                let _ = never_took.write_start(b"k");
            },
        );
    });
    is_frozen.recv().unwrap();
    half_write(&writer, 0xee);
    megalon_core::inspect::crash(writer);
    leases_run_out();
    let both_looked = Arc::new(Barrier::new(2));
    let joiners: Vec<_> = (0..2u32)
        .map(|id| {
            let (pod, both_looked) = (Arc::clone(&pod), Arc::clone(&both_looked));
            std::thread::spawn(move || {
                chaos::with_hook(
                    move |at| {
                        // Both looked at the rows, then both took theirs over.
                        if matches!(at, Point::RescueBeforeTakeOver | Point::RescueAfterTakeOver) {
                            both_looked.wait();
                        }
                    },
                    || Host::join(&pod, Join::As(id), options(10 + u64::from(id))),
                )
            })
        })
        .collect();
    let joined: Vec<_> = joiners.into_iter().map(|j| j.join().unwrap()).collect();
    for join in &joined {
        match join {
            Ok(host) => assert_eq!(read(host), value(2), "k whole, by host {}", host.id()),
            // Both rescues waited on each other; or one finished first and its pump
            // recovered the other's row before that one's take-over (its CAS failed: it
            // answers as before, and a retry joins the freed row).
            Err(error) => assert!(
                matches!(
                    error,
                    Error::JoinNotServed {
                        cause: JoinNotServedCause::RescueUnfinished,
                        ..
                    } | Error::HostTaken { .. }
                ),
                "a rescue failed untyped: {error:?}"
            ),
        }
    }
    if joined.iter().all(Result::is_err) {
        leases_run_out();
        let host = join_retrying(&pod, Join::AnyFree, 30);
        // Each rescue that waited logged its `HostDead` once, not once a round: a log
        // that laps while no live host holds its head could never be rescued again. Four
        // at most: the two rescuers' of the first lives, and this join's of the rows they
        // left (its rescue's, and its pump's of the other row, if it came already).
        let (head, _, tail) = host.inspect().log_cursors();
        let deaths = host
            .inspect()
            .read_log(head, tail)
            .unwrap()
            .iter()
            .filter(|e| matches!(e.event.event(), megalon_core::event::Event::HostDead { .. }))
            .count();
        assert!(
            head == 0 && deaths <= 4,
            "head {head}, {deaths} HostDead entries"
        );
        assert_eq!(read(&host), value(2), "k whole, after both rescues gave up");
        host.write(b"k", &value(3)).unwrap();
        assert_eq!(read(&host), value(3));
    } else if let Some(Err(_)) = joined.iter().find(|join| join.is_err()) {
        let host = join_retrying(&pod, Join::AnyFree, 31);
        assert_eq!(read(&host), value(2), "k whole, after both rescues gave up");
        host.write(b"k", &value(3)).unwrap();
        assert_eq!(read(&host), value(3));
    }
}

/// A full table of two: `a` died with a reservation unpublished; `b` (no pump: its watch
/// is driven by hand) found it dead and began its recovery (it holds the recovery word),
/// then died itself right before its fill (`RecoveryBeforeFill`, never resumed: a host
/// killed mid-recovery). Every host is dead, and the word names `b`'s life. A joiner
/// (`Join::AnyFree`) takes the lowest dead row over (`a`'s) and must recover it: the word
/// is a dead host's found dead with it (condemned before anything is settled, as the
/// ordinary recovery takes the word of the host it recovers). It waited for the word
/// until its wait limit (`JoinNotServed`), and every later `AnyFree` join did the same:
/// the pod could never be joined again but by `Join::As` of the word's holder.
#[test]
fn a_rescue_takes_the_recovery_word_of_a_host_found_dead_with_it() {
    let pod = pod(2);
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    a.create(b"k", &value(1)).unwrap();
    a.inspect().reserve_unpublished(1).unwrap();
    megalon_core::inspect::crash(a);
    let b: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    b.inspect().pretend_elsewhere();
    b.inspect().watch_hosts(); // its watch of a begins
    leases_run_out();
    let watcher = pauses_when(
        Point::RecoveryBeforeFill,
        || true,
        || b.inspect().watch_hosts(),
    );
    // b dies there: no pump, no beat, its row says it runs elsewhere.
    leases_run_out();
    let started = Instant::now();
    let join = Host::join(&pod, Join::AnyFree, options(3));
    let host = match join {
        Ok(host) => host,
        Err(error) => panic!(
            "the rescue of a pod whose recovery word a dead host holds: {error:?} after {:?}",
            started.elapsed()
        ),
    };
    assert_eq!(host.id(), 0);
    assert_eq!(read(&host), value(1));
    host.create(b"j", &value(5)).unwrap();
    // b, found dead, is recovered by the new host's pump: its row can be joined.
    let second = join_retrying(&pod, Join::AnyFree, 4);
    assert_eq!(second.id(), 1);
    assert_eq!(common::read(&second, b"j"), value(5));
    // b resumes: it was condemned, and changes nothing.
    let _ = watcher.finish();
    assert_eq!(read(&second), value(1));
    host.write(b"k", &value(6)).unwrap();
    assert_eq!(read(&second), value(6));
}

/// `p` beating, as its pump would (every tenth of a lease), until stopped.
struct Beating {
    on: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Beating {
    fn start(p: &'static Host) -> Beating {
        let on = Arc::new(AtomicBool::new(true));
        let on_in = Arc::clone(&on);
        let thread = std::thread::spawn(move || {
            while on_in.load(Ordering::SeqCst) {
                p.inspect().heartbeat();
                std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) / 10));
            }
        });
        Beating { on, thread }
    }

    fn stop(self) {
        self.on.store(false, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

/// A full table of two: `x` died; `p` was only paused past its lease (no beat: found dead
/// by the joiner's watch). The joiner takes `x`'s row over and pauses
/// (`RescueAfterTakeOver`); `p` resumes meanwhile: it beats again and goes on (a create,
/// done). The rescue then recovers `x` with `p` still counted dead from its one look
/// before the take-over: it condemned `p`, whose heartbeat moved (an ordinary watch looks
/// again each round and lets a host that beat live), and `p`'s next call answered
/// `HostDeclaredDead` although it never stopped beating since.
#[test]
fn a_host_that_beats_again_before_the_rescue_recovers_is_not_condemned_by_it() {
    let pod = pod(2);
    let x = Host::join(&pod, Join::As(0), options(1)).unwrap();
    x.create(b"k", &value(1)).unwrap();
    megalon_core::inspect::crash(x);
    let p: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    p.inspect().pretend_elsewhere();
    let pod_of_joiner = Arc::clone(&pod);
    let joiner = pauses_when(
        Point::RescueAfterTakeOver,
        || true,
        move || Host::join(&pod_of_joiner, Join::AnyFree, options(3)),
    );
    // p resumes: it beats (as its pump would, every eighth of a lease) from here on.
    let beater = Beating::start(p);
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) / 2));
    p.create(b"p1", &value(7)).unwrap();
    let host = joiner.resume().expect("the rescue");
    assert_eq!(host.id(), 0);
    assert_eq!(read(&host), value(1));
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) * 2));
    let after = p.create(b"p2", &value(8));
    beater.stop();
    assert!(
        after.is_ok(),
        "p beat all along since before the rescue recovered, and was declared dead: {after:?}"
    );
    assert_eq!(common::read(&host, b"p2"), value(8));
}

/// A full table of two: `x` died (its `ltail` past 0); `p` was only paused past its
/// lease. The joiner looks at the head (0), takes `x`'s row over and pauses
/// (`RescueAfterTakeOver`); `p` resumes and appends a lap, and the head moves past 0.
/// The join must answer as the rescue's doc says for a log that recycled entries
/// (`JoinNotServed` with a join area: typed, and a retry is served once `p` recovered the
/// row), not `LogRecycled`, which says the pod is past joining without a join area.
#[test]
fn a_head_that_moves_during_the_rescue_answers_join_not_served() {
    let pod = common::heap_pod(
        &common::config()
            .max_hosts(2)
            .log_capacity_entries(16)
            .lease_ms(LEASE_MS),
    );
    let x = Host::join(&pod, Join::As(0), options(1)).unwrap();
    for round in 0..4u8 {
        x.create(&[b'x', round], &value(round)).unwrap();
    }
    megalon_core::inspect::crash(x);
    let p: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    p.replay().unwrap();
    p.inspect().pretend_elsewhere();
    let pod_of_joiner = Arc::clone(&pod);
    let joiner = pauses_when(
        Point::RescueAfterTakeOver,
        || true,
        move || Host::join(&pod_of_joiner, Join::AnyFree, options(3)).map(|host| host.id()),
    );
    let beater = Beating::start(p);
    let mut round = 0u8;
    while p.inspect().log_cursors().0 == 0 && round < 40 {
        let _ = p.create(&[b'p', round], &value(round));
        let _ = p.replay();
        round += 1;
    }
    let head = p.inspect().log_cursors().0;
    let join = joiner.resume();
    beater.stop();
    eprintln!("head {head} after {round} creates; join {join:?}");
    assert!(head > 0, "the head moved");
    assert!(
        matches!(
            join,
            Err(Error::JoinNotServed {
                cause: JoinNotServedCause::NoServer,
                ..
            }) | Ok(_)
        ),
        "{join:?}"
    );
}

/// Row `host` says "another machine" for every life that takes it, until `stop`: a
/// joiner there is judged by its lease from the moment it writes its note.
fn row_elsewhere(pod: &Arc<Pod>, host: u32, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (pod, stop) = (Arc::clone(pod), Arc::clone(stop));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            megalon_core::inspect::pretend_row_elsewhere(&pod, host);
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Both hosts of a full table died with a long log (head 0). A joiner on another machine
/// rescues one row and replays the log from 0, for longer than the lease (each entry
/// made slow, 50 us of work: 2 s in all); a second joiner on another machine comes a moment later.
/// The first, alive and working, keeps its row: its replay beats. (A replay beat only
/// while it waited: the second took the working rescuer's row over, and its join
/// answered `HostDeclaredDead`.)
#[test]
fn a_rescuer_elsewhere_whose_replay_outlasts_the_lease_keeps_its_row() {
    const ENTRIES: u64 = 40_000;
    const ENTRY_WORK: Duration = Duration::from_micros(50);
    // Long enough that a loaded machine does not starve a live host past it (at a load of
    // 17 on 2 cores, one entry's 50 us took up to 0.9 s).
    const LONG_LEASE_MS: u32 = 1000;
    let pod = common::heap_pod(
        &common::config()
            .lnr_bytes(8 << 20)
            .log_capacity_entries(ENTRIES + 64)
            .max_hosts(2)
            .lease_ms(LONG_LEASE_MS)
            .crash_safety(CrashSafety::Undo),
    );
    let options = || {
        HostOptions::new()
            .memory(megalon_core::MemoryKind::Hardware)
            .wait_limit(Duration::from_secs(5))
    };
    let a = Host::join(&pod, Join::As(0), options()).unwrap();
    let b = Host::join(&pod, Join::As(1), options()).unwrap();
    while a.inspect().log_cursors().2 < ENTRIES {
        a.create(b"x", b"v").unwrap();
        a.delete(b"x").unwrap();
    }
    b.replay().unwrap();
    assert_eq!(a.inspect().log_cursors().0, 0, "the log recycled nothing");
    megalon_core::inspect::crash(a);
    megalon_core::inspect::crash(b);
    std::thread::sleep(Duration::from_millis(u64::from(LONG_LEASE_MS) * 3));
    let stop = Arc::new(AtomicBool::new(false));
    let note = row_elsewhere(&pod, 1, &stop);
    let row = pod.scr_u64(pod.layout().host_entry_offset(1));
    let before = row.load(Ordering::SeqCst);
    let first = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || {
            let started = Instant::now();
            let joined = chaos::with_hook(
                |point| {
                    if point == Point::ReplayBetweenEntries {
                        let until = Instant::now() + ENTRY_WORK;
                        while Instant::now() < until {}
                    }
                },
                || Host::join(&pod, Join::As(1), options()).map(std::mem::forget),
            );
            (started.elapsed(), joined)
        })
    };
    // The first took the row over: the second comes, and tries while the first joins.
    let deadline = Instant::now() + Duration::from_secs(5);
    while row.load(Ordering::SeqCst) == before {
        assert!(
            Instant::now() < deadline && !first.is_finished(),
            "no take-over"
        );
        std::thread::yield_now();
    }
    let second = loop {
        match Host::join(&pod, Join::As(1), options()) {
            Err(Error::HostTaken { .. } | Error::HostTableFull { .. }) if !first.is_finished() => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => break other.map(std::mem::forget),
        }
    };
    let (took, first) = first.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    note.join().unwrap();
    assert!(
        took > Duration::from_millis(u64::from(LONG_LEASE_MS)),
        "the rescue took {took:?}, not past the lease"
    );
    assert!(
        first.is_ok(),
        "a live rescuer (its join took {took:?}) was taken over: {first:?}; the second: {second:?}"
    );
}

/// The injected fault `fault`, or a stopped recovery of host 0's earlier life that names
/// it as its cause.
fn is_fault(error: &Error, fault: chaos::Fault) -> bool {
    match error {
        Error::InjectedFault { fault: f } => *f == fault.name(),
        Error::RecoveryStopped { host: 0, cause, .. } => is_fault(cause, fault),
        _ => false,
    }
}

/// What the rescue of host 0 leaves, whichever join completed it: the last complete value
/// of `k`, whole and unlocked; no hole in the log; the table's other dead row recovered
/// and joined again.
fn rescued(pod: &Arc<Pod>, host: &Host, what: &str) {
    assert_eq!(read(host), value(2), "{what}: the last complete value");
    host.write(b"k", &value(3)).unwrap();
    let second = join_retrying(pod, Join::As(1), 5);
    assert_eq!(read(&second), value(3), "{what}");
    let (_, _, tail) = second.inspect().log_cursors();
    second.inspect().settle_pending().unwrap();
    assert_eq!(second.inspect().applied_position(), tail, "{what}: a hole");
    let census = second.inspect().record_census();
    assert!(census.locked.is_empty(), "{what}: {census:?}");
}

/// Each append of a rescue (the dead holder's `HostDead`, the `Recovered` of its
/// half-write of `k`) refused or left unconfirmed once: the join's next round makes it
/// good within the join (before, the join answered the fault and left the pod to the
/// next joiner, a lease later). The join's own append after the rescue refused or left
/// unconfirmed: the join answers the fault, typed, and the next joiner's join completes.
#[test]
fn a_rescue_whose_append_fails_once_is_made_good_by_its_next_round() {
    for fault in [chaos::Fault::Refuse, chaos::Fault::Unconfirmed] {
        for n in 0..3 {
            let what = format!("{fault:?} of append {n}");
            let pod = pod(2);
            both_die_host_0_mid_write(&pod, true);
            let first =
                common::with_append_failing(n, fault, || Host::join(&pod, Join::As(0), options(3)));
            let host = match first {
                Ok(host) => {
                    let counts = host.inspect().chaos_counts();
                    assert_eq!(
                        counts.refused + counts.unconfirmed,
                        1,
                        "{what}: the fault happened in the join"
                    );
                    host
                }
                // The rescue's appends are the first two.
                Err(error) if n >= 2 && is_fault(&error, fault) => {
                    leases_run_out();
                    join_retrying(&pod, Join::As(0), 4)
                }
                Err(error) => panic!("{what}: the join answered {error:?}"),
            };
            rescued(&pod, &host, &what);
        }
    }
}

/// A rescue whose appends keep failing past its wait limit: the join answers that the
/// recovery of host 0's earlier life stopped, with the fault as its cause, and leaves the
/// row as a dead holder's; the next joiner's rescue completes it.
#[test]
fn a_rescue_whose_appends_keep_failing_stops_its_join_and_the_next_joiner_completes_it() {
    for fault in [chaos::Fault::Refuse, chaos::Fault::Unconfirmed] {
        let what = format!("{fault:?} of every append");
        let pod = pod(2);
        both_die_host_0_mid_write(&pod, true);
        chaos::fail_next_appends(&[fault; 1000]);
        let first = Host::join(&pod, Join::As(0), options(3));
        chaos::clear_forced_faults();
        match first {
            Err(Error::RecoveryStopped {
                host: 0,
                life,
                cause,
            }) if is_fault(&cause, fault) => {
                assert!(life > 0, "{what}: an earlier life of host 0's, not {life}")
            }
            other => panic!(
                "{what}: the join answered {:?}",
                other.map(|host| host.id())
            ),
        }
        leases_run_out();
        let host = join_retrying(&pod, Join::As(0), 4);
        rescued(&pod, &host, &what);
    }
}

/// (Review of 629f69d.) both hosts die holding free slots (claims, and slots their deletes
/// freed); a joiner takes host 0's row over (its replay rebuilds that life's pool, which
/// its `HostDead` gives to the pod), and a second joiner takes host 1's. Both fill the
/// pod: every free slot is used once, every object keeps its bytes.
#[test]
fn a_rescue_gives_the_dead_lives_free_slots_out_once() {
    let pod = pod(2);
    let slots = pod.layout().slot_count;
    {
        let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
        let b = Host::join(&pod, Join::As(1), options(2)).unwrap();
        for i in 0..4u8 {
            a.create(&[b'a', i], &value(i)).unwrap();
            b.create(&[b'b', i], &value(i)).unwrap();
        }
        a.delete(&[b'b', 0]).unwrap();
        b.delete(&[b'a', 0]).unwrap();
        megalon_core::inspect::crash(a);
        megalon_core::inspect::crash(b);
    }
    leases_run_out();
    let a = join_retrying(&pod, Join::AnyFree, 3);
    assert_eq!(a.id(), 0);
    let b = join_retrying(&pod, Join::AnyFree, 4);
    assert_eq!(b.id(), 1);
    let live = 6u64;
    let mut made = 0u64;
    let (mut a_full, mut b_full) = (false, false);
    while !(a_full && b_full) {
        for (host, full, tag) in [(&a, &mut a_full, 'A'), (&b, &mut b_full, 'B')] {
            if !*full {
                match host.create(format!("{tag}{made}").as_bytes(), &value(made as u8)) {
                    Ok(()) => made += 1,
                    Err(_) => *full = true,
                }
            }
        }
    }
    for i in 1..4u8 {
        assert_eq!(common::read(&b, &[b'a', i]), value(i));
        assert_eq!(common::read(&a, &[b'b', i]), value(i));
    }
    for n in 0..made {
        for key in [format!("A{n}"), format!("B{n}")] {
            if b.lookup(key.as_bytes()).unwrap().is_some() {
                assert_eq!(common::read(&a, key.as_bytes()), value(n as u8), "{key}");
            }
        }
    }
    assert_eq!(made, slots - live, "every free slot used once");
}
