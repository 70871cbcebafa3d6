//! Errors a user sees that name the wrong cause, or come late (review `limits`,
//! 2026-12-04). Defects found and fixed: a create whose claimed slots its host's other
//! threads took first answered `SlotsExhausted` (the server's "OOM the store is full")
//! with most of the pod's slots unclaimed (`SlotsContended` now; the schedule that shows
//! it is `append_waits.rs`'s first test); a call waiting for
//! another host's answer served every request queued in its own ring before it looked
//! at its limit again; writers waiting for another host's locks kept their host's
//! announce words, and a write of a record nobody held waited for one. Probes kept:
//! records and the log under contention.
#![cfg(feature = "chaos")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use megalon_core::chaos::{self, Point};
use megalon_core::inspect::slot_claim_batch;
use megalon_core::{Error, HostOptions, Layout};

/// Threads of one host create at a short limit, each claim a slot, with the pod far
/// from full: none may answer `SlotsExhausted`. (26 of 40 creates a thread answered it at
/// a 2 ms limit, the review `fresh` of 2026-12-03 noticed.)
#[test]
fn siblings_creating_in_a_roomy_pod_never_answer_slots_exhausted() {
    // Each round a pod of its own; one in two or three showed a `SlotsExhausted` before.
    for round in 0..8 {
        let config = common::config().lnr_bytes(256 << 10).max_hosts(64);
        let layout = Layout::new(&config).expect("layout");
        assert_eq!(slot_claim_batch(layout.slot_count, 64), 1, "{layout:?}");
        let pod = common::heap_pod(&config);
        let slot_count = pod.layout().slot_count;
        let host = Arc::new(common::join(
            &pod,
            HostOptions::new()
                .pump_interval(Some(Duration::from_millis(1)))
                .wait_limit(Duration::from_millis(1)),
        ));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let host = Arc::clone(&host);
                std::thread::spawn(move || {
                    let mut kinds = std::collections::BTreeMap::<String, u64>::new();
                    for i in 0..slot_count / 16 {
                        let key = format!("t{t}-{i}");
                        let kind = match host.create(key.as_bytes(), b"v") {
                            Ok(()) => "Ok".to_owned(),
                            Err(e) => e.kind_name(),
                        };
                        *kinds.entry(kind).or_default() += 1;
                    }
                    kinds
                })
            })
            .collect();
        let mut all = std::collections::BTreeMap::<String, u64>::new();
        for thread in threads {
            for (kind, n) in thread.join().unwrap() {
                *all.entry(kind).or_default() += n;
            }
        }
        let objects = host.object_count().unwrap();
        assert!(objects <= slot_count / 4);
        assert_eq!(
            all.get("SlotsExhausted"),
            None,
            "round {round}: {all:?}; {objects} of {slot_count} slots used"
        );
    }
}

/// Host a (no pump) asks b, which does not serve, for an object in b's DRAM. Once it
/// waits, eight requests of host c come to a's ring, and the asking thread serves them
/// while it waits, each handler (a move back) slowed to `handler`. A call's wait is
/// bounded (unclaimed, the request is withdrawn past the wait limit; claimed, it is
/// waited for up to twice the limit): serving may make it outlast that by the one
/// handler that began within it, not by every request queued. (It served the whole
/// queue before it looked at its limit again: eight handlers, 1.3 s at a limit of
/// 200 ms.)
#[test]
fn a_call_serving_its_own_ring_answers_within_its_limit_and_one_handler() {
    use common::{read, small_cache, value, SLOT};
    const QUEUED: usize = 8;
    let limit = Duration::from_millis(200);
    let handler = Duration::from_millis(150);
    let pod = common::heap_pod(&common::config().local_partitions(2));
    let a = Arc::new(common::join(
        &pod,
        small_cache(1).pump_interval(None).wait_limit(limit),
    ));
    let b = common::join(&pod, small_cache(2).pump_interval(None));
    let c = Arc::new(common::join(
        &pod,
        small_cache(3)
            .pump_interval(None)
            .wait_limit(Duration::from_secs(20)),
    ));
    // a holds `a0`..`a7` in its DRAM, b holds `kb` in its own.
    let keys: Vec<String> = (0..QUEUED).map(|i| format!("a{i}")).collect();
    for key in &keys {
        a.create(key.as_bytes(), &value(1)).unwrap();
        read(&a, key.as_bytes());
        read(&a, key.as_bytes());
    }
    b.create(b"kb", &value(2)).unwrap();
    read(&b, b"kb");
    read(&b, b"kb");
    assert_eq!(a.inspect().local_objects(), (QUEUED, 0));
    assert_eq!(b.inspect().local_objects(), (1, 0));
    b.inspect().set_serving(false);
    a.replay().unwrap();
    c.replay().unwrap();
    // Once a's call waits, c's threads ask a for its objects: a has no pump, so their
    // requests wait in its ring for the asking thread to serve them.
    let askers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawned = Arc::clone(&askers);
    let (asking_c, asking_keys) = (Arc::clone(&c), keys.clone());
    let mut sent = false;
    let started = std::time::Instant::now();
    let answer = chaos::with_hook(
        move |point| {
            if point == Point::MoveBackBeforeCopy {
                std::thread::sleep(handler);
            }
            if point != Point::RpcAwaitingResponse || std::mem::replace(&mut sent, true) {
                return;
            }
            for key in &asking_keys {
                let c = Arc::clone(&asking_c);
                let key = key.clone();
                spawned.lock().unwrap().push(std::thread::spawn(move || {
                    let mut buf = vec![0u8; SLOT];
                    c.read(key.as_bytes(), &mut buf).map(|_| buf)
                }));
            }
            std::thread::sleep(Duration::from_millis(50));
        },
        || a.read(b"kb", &mut [0u8; SLOT]),
    );
    let elapsed = started.elapsed();
    // Whatever is left is served now (a's reads poll its ring).
    let mut served = 0;
    for asker in askers.lock().unwrap().drain(..) {
        while !asker.is_finished() {
            let _ = a.read(b"a0", &mut [0u8; SLOT]);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(asker.join().unwrap().expect("c's read"), value(1));
        served += 1;
    }
    eprintln!("answer {answer:?} after {elapsed:?}; {served} reads of c answered");
    assert_eq!(served, QUEUED);
    assert!(
        matches!(answer, Err(Error::HostUnresponsive { .. })),
        "{answer:?}"
    );
    // The limit, one handler begun within it, and slack for a loaded machine.
    let bound = limit + handler + Duration::from_millis(100);
    assert!(
        elapsed < bound,
        "the call answered {answer:?} after {elapsed:?}: past its limit of {limit:?} and \
         one handler of {handler:?} (bound {bound:?})"
    );
}

/// Sixteen threads of host a (as many as its announce words) each lost its lock CAS to
/// host b, which holds the record, and wait for b to let go. A seventeenth thread of a
/// writes an object nobody holds: a holds no lock at all, and the write must not wait for
/// an announce word, nor answer `TooManyLocksHeld` ("host a holds 16 record locks at
/// once"). (Each waiter kept the announce word of its lost CAS for its whole wait: the
/// write waited until the waiters gave up, 398 ms at their limit of 400 ms; had its limit
/// run out first, it answered `TooManyLocksHeld`.)
#[test]
fn writers_waiting_for_another_hosts_locks_do_not_keep_the_announce_words() {
    use megalon_core::limits::HOLDS_PER_HOST;
    use megalon_core::CrashSafety;
    let limit = Duration::from_millis(400);
    let config = common::config().crash_safety(CrashSafety::Undo);
    let pod = common::heap_pod(&config);
    let a = Arc::new(common::join(&pod, HostOptions::new().wait_limit(limit)));
    let b = Arc::new(common::join(
        &pod,
        HostOptions::new().wait_limit(Duration::from_secs(10)),
    ));
    let waiters = HOLDS_PER_HOST as usize;
    let keys: Vec<String> = (0..waiters).map(|i| format!("k{i}")).collect();
    for key in &keys {
        a.create(key.as_bytes(), b"old").unwrap();
    }
    a.create(b"free", b"old").unwrap();
    b.replay().unwrap();
    // b's lockers: each takes its key's lock when a's writer is about to CAS it, and
    // holds it until `release`.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let (lost, all_lost) = std::sync::mpsc::channel::<()>();
    let writers: Vec<_> = keys
        .iter()
        .map(|key| {
            let (a, b, key) = (Arc::clone(&a), Arc::clone(&b), key.clone());
            let released = Arc::clone(&released);
            let lost = lost.clone();
            std::thread::spawn(move || {
                let locker = Arc::new(std::sync::Mutex::new(None));
                let hook_locker = Arc::clone(&locker);
                let hook_key = key.clone();
                let mut told = false;
                let answer = chaos::with_hook(
                    move |point| {
                        let mut locker = hook_locker.lock().unwrap();
                        if point == Point::WriteBeforeLock && locker.is_none() {
                            let (b, key) = (Arc::clone(&b), hook_key.clone());
                            let released = Arc::clone(&released);
                            let (locked, is_locked) = std::sync::mpsc::channel();
                            *locker = Some(std::thread::spawn(move || {
                                let ticket = b.write_start(key.as_bytes()).unwrap();
                                locked.send(()).unwrap();
                                let _ = released.lock().unwrap().recv();
                                b.write_end(ticket).unwrap();
                            }));
                            is_locked.recv().unwrap();
                        } else if point == Point::RecordBeforeWait
                            && locker.is_some()
                            && !std::mem::replace(&mut told, true)
                        {
                            let _ = lost.send(());
                        }
                    },
                    || a.write(key.as_bytes(), b"new"),
                );
                let locker = locker.lock().unwrap().take();
                (answer, locker)
            })
        })
        .collect();
    drop(lost);
    // Every writer of a lost its CAS and waits for b.
    for _ in 0..waiters {
        all_lost
            .recv_timeout(Duration::from_secs(10))
            .expect("a waiter");
    }
    let started = std::time::Instant::now();
    let answer = a.write(b"free", b"new");
    let elapsed = started.elapsed();
    drop(release);
    let mut kinds = std::collections::BTreeMap::<String, u64>::new();
    for writer in writers {
        let (answer, locker) = writer.join().unwrap();
        *kinds
            .entry(answer.map_or_else(|e| e.kind_name(), |_| "Ok".into()))
            .or_default() += 1;
        locker.expect("b locked").join().unwrap();
    }
    eprintln!("free: {answer:?} after {elapsed:?}; the waiters: {kinds:?}");
    assert!(answer.is_ok(), "{answer:?} after {elapsed:?}");
    assert!(elapsed < limit / 2, "{elapsed:?}");
}

/// Threads of one host, or of two, write objects that need a record, in a pod of far
/// fewer records than objects (16, 64 objects), no record held for long, fewer writers
/// than records (12): each write's claim reclaims one (churn), which another claim may
/// take first. None may answer `ScrRecordsExhausted` ("none could be reclaimed", the
/// server's "OOM the store is full"). (With as many writers as records, 16, a few writes
/// of 4,800 answered it in two runs of eighteen, and with 24 one in 60: records held by writes,
/// claims of allocations on their way, lost claims whose free is deferred, and a claim
/// gives up after 64 quick rounds without waiting for one to end. Not asserted here.)
#[test]
fn writers_through_few_records_never_answer_scr_records_exhausted() {
    for (hosts, threads) in [(1usize, 12usize), (2, 12)] {
        // The application's SCR takes all but about 16 records' room.
        let config = (0..)
            .map(|lines: u64| common::config().max_hosts(2).app_scr_bytes(lines * 64))
            .find(|config| Layout::new(config).is_ok_and(|l| l.record_count <= 16))
            .expect("a config");
        let layout = Layout::new(&config).expect("layout");
        let records = layout.record_count;
        assert!(records >= 8, "{layout:?}");
        let pod = common::heap_pod(&config);
        let hosts: Vec<_> = (0..hosts)
            .map(|_| {
                Arc::new(common::join(
                    &pod,
                    HostOptions::new().wait_limit(Duration::from_millis(200)),
                ))
            })
            .collect();
        let objects = records * 4;
        for i in 0..objects {
            hosts[0].create(format!("o{i}").as_bytes(), b"v").unwrap();
        }
        for host in &hosts {
            host.replay().unwrap();
        }
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let host = Arc::clone(&hosts[t % hosts.len()]);
                std::thread::spawn(move || {
                    let mut kinds = std::collections::BTreeMap::<String, u64>::new();
                    let mut x = t as u64 * 0x9e37_79b9 + 1;
                    for _ in 0..300 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = format!("o{}", x % objects);
                        let kind = match host.write(key.as_bytes(), b"w") {
                            Ok(_) => "Ok".to_owned(),
                            Err(e) => e.kind_name(),
                        };
                        *kinds.entry(kind).or_default() += 1;
                    }
                    kinds
                })
            })
            .collect();
        let mut all = std::collections::BTreeMap::<String, u64>::new();
        for worker in workers {
            for (kind, n) in worker.join().unwrap() {
                *all.entry(kind).or_default() += n;
            }
        }
        let what = format!(
            "{} hosts, {threads} threads, {records} records",
            hosts.len()
        );
        eprintln!("{what}, {objects} objects: {all:?}");
        assert_eq!(all.keys().collect::<Vec<_>>(), ["Ok"], "{what}: {all:?}");
    }
}

/// Threads of two live hosts, their pumps running, append through a log of 16 entries at
/// a generous wait limit: the log keeps draining (every host replays within a
/// millisecond or so), so no append may answer `LogFull`, and none other than `Ok`.
#[test]
fn appends_of_two_live_hosts_through_a_small_log_never_answer_log_full() {
    let config = common::config().log_capacity_entries(16);
    let pod = common::heap_pod(&config);
    let options = || {
        HostOptions::new()
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(2))
    };
    let hosts = [
        Arc::new(common::join(&pod, options())),
        Arc::new(common::join(&pod, options())),
    ];
    let workers: Vec<_> = (0..8usize)
        .map(|t| {
            let host = Arc::clone(&hosts[t % 2]);
            std::thread::spawn(move || {
                let mut kinds = std::collections::BTreeMap::<String, u64>::new();
                let mut count = |answer: megalon_core::Result<()>| {
                    let kind = answer.map_or_else(|e| format!("{e}"), |()| "Ok".into());
                    *kinds.entry(kind).or_default() += 1;
                };
                for i in 0..150 {
                    let key = format!("t{t}-{}", i % 4);
                    count(host.create(key.as_bytes(), b"v"));
                    count(host.delete(key.as_bytes()).map(drop));
                }
                kinds
            })
        })
        .collect();
    let mut all = std::collections::BTreeMap::<String, u64>::new();
    for worker in workers {
        for (kind, n) in worker.join().unwrap() {
            *all.entry(kind).or_default() += n;
        }
    }
    eprintln!("{all:?}");
    assert_eq!(all.keys().collect::<Vec<_>>(), ["Ok"], "{all:?}");
}
