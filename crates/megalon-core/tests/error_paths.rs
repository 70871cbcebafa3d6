//! Every fallible step of the object protocol, failed on purpose, then the pod checked:
//! no record locked, none leaked, the key usable again.
#![cfg(feature = "chaos")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, move_into, named_records, read, value};
use megalon_core::chaos::{self, Fault, Point};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, MemoryKind, Pod};

fn options() -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(7))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_millis(300))
}

fn pod(width: u32, safety: CrashSafety) -> Arc<Pod> {
    heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(4096)
            .record_width_bits(width)
            .crash_safety(safety),
    )
}

/// Nothing pending, no record locked, every record in use named by exactly one object,
/// and the count of records in use right.
#[track_caller]
fn clean(hosts: &[&Host], what: &str) {
    for h in hosts {
        assert_eq!(h.inspect().settle_pending().unwrap(), 0, "{what}: pending");
    }
    let census = hosts[0].inspect().record_census();
    assert!(
        census.locked.is_empty(),
        "{what}: locked {:?}",
        census.locked
    );
    for h in hosts {
        assert_eq!(named_records(h), census.in_use, "{what}: named vs in use");
    }
    assert_eq!(
        hosts[0].inspect().records_in_use().0 as usize,
        census.in_use.len(),
        "{what}: count of records in use"
    );
}

/// The key is usable from both hosts: write, read, delete, create again.
#[track_caller]
fn usable(a: &Host, b: &Host, key: &[u8], what: &str) {
    a.inspect().settle_pending().unwrap();
    b.inspect().settle_pending().unwrap();
    if a.lookup(key).unwrap().is_none() {
        a.create(key, &value(40))
            .unwrap_or_else(|e| panic!("{what}: create {e}"));
    }
    a.write(key, &value(41))
        .unwrap_or_else(|e| panic!("{what}: write {e}"));
    assert_eq!(read(b, key), value(41), "{what}");
    b.write(key, &value(42))
        .unwrap_or_else(|e| panic!("{what}: write b {e}"));
    assert_eq!(read(a, key), value(42), "{what}");
    b.delete(key)
        .unwrap_or_else(|e| panic!("{what}: delete {e}"));
    assert!(
        matches!(a.read(key, &mut [0; 4]), Err(Error::UnknownKey)),
        "{what}"
    );
    a.create(key, &value(43)).unwrap();
    assert_eq!(read(b, key), value(43), "{what}");
    clean(&[a, b], what);
}

/// Runs `op` with `fault` forced on the first append made after `point` (or the first
/// append at all if `point` is None).
fn with_fault_at<R>(point: Option<Point>, fault: Fault, op: impl FnOnce() -> R) -> R {
    chaos::clear_forced_faults();
    match point {
        None => {
            chaos::fail_next_appends(&[fault]);
            let r = op();
            chaos::clear_forced_faults();
            r
        }
        Some(p) => {
            let mut once = true;
            let r = chaos::with_hook(
                move |at| {
                    if at == p && std::mem::take(&mut once) {
                        chaos::fail_next_appends(&[fault]);
                    }
                },
                op,
            );
            chaos::clear_forced_faults();
            r
        }
    }
}

fn matrix(width: u32, safety: CrashSafety) {
    let pod = pod(width, safety);
    let a = Host::join(&pod, Join::As(0), options()).unwrap();
    let b = Host::join(&pod, Join::As(1), options()).unwrap();
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        let tag = format!("{width} bits {safety:?} {fault:?}");
        // create
        let r = with_fault_at(Some(Point::CreateBeforeEvent), fault, || {
            a.create(b"c", &value(1))
        });
        assert!(r.is_err(), "{tag} create {r:?}");
        usable(&a, &b, b"c", &format!("{tag} create"));
        // first write: alloc
        a.create(b"w", &value(1)).unwrap();
        let r = with_fault_at(Some(Point::AllocAfterClaim), fault, || {
            a.write(b"w", &value(2))
        });
        assert!(r.is_err(), "{tag} alloc {r:?}");
        usable(&a, &b, b"w", &format!("{tag} alloc"));
        // delete with a record
        a.write(b"w", &value(3)).unwrap();
        let r = with_fault_at(Some(Point::ReleaseAfterLock), fault, || a.delete(b"w"));
        assert!(r.is_err(), "{tag} delete {r:?}");
        usable(&a, &b, b"w", &format!("{tag} delete"));
        // delete read-shared
        a.create(b"r", &value(1)).unwrap();
        let r = with_fault_at(None, fault, || a.delete(b"r"));
        assert!(r.is_err(), "{tag} delete rs {r:?}");
        usable(&a, &b, b"r", &format!("{tag} delete rs"));
        // dealloc
        a.write(b"w", &value(3)).unwrap();
        let r = with_fault_at(Some(Point::ReleaseAfterLock), fault, || {
            a.make_read_shared(b"w")
        });
        assert!(r.is_err(), "{tag} dealloc {r:?}");
        usable(&a, &b, b"w", &format!("{tag} dealloc"));
        // update
        a.write(b"w", &value(3)).unwrap();
        let r = with_fault_at(Some(Point::AllocAfterClaim), fault, || {
            b.update(b"w", |bytes| bytes[0] = 9)
        });
        let _ = r;
        usable(&a, &b, b"w", &format!("{tag} update"));
        // wrap
        a.create(b"x", &value(1)).unwrap();
        for i in 0..(1u32 << (width.min(8) - 1)) {
            let r = with_fault_at(Some(Point::WriteAfterEventCheck), fault, || {
                a.write(b"x", &value(i as u8))
            });
            let _ = r;
        }
        usable(&a, &b, b"x", &format!("{tag} wrap"));
        // leftovers
        for k in [&b"c"[..], b"w", b"r", b"x"] {
            let _ = a.delete(k);
        }
        clean(&[&a, &b], &tag);
    }
}

#[test]
fn every_append_fault_leaves_the_pod_clean_32_off() {
    matrix(32, CrashSafety::Off);
}

#[test]
fn every_append_fault_leaves_the_pod_clean_4_undo() {
    matrix(4, CrashSafety::Undo);
}

#[test]
fn every_append_fault_leaves_the_pod_clean_2_undo() {
    matrix(2, CrashSafety::Undo);
}

/// A deallocation (`make_read_shared`) or a delete whose append is published but not
/// confirmed leaves its record locked until a replay of its host applies the entry and
/// runs the settle. With no pump, and nothing else raising `ctail` over the entry, the
/// host's own next operation on the key is what replays it: a tail check alone covers
/// `ctail` only, and the operation would wait on its own host's settle until
/// `RecordBusy`. Asked at once, with nothing settled in between.
#[test]
fn the_next_operation_of_a_host_settles_its_own_unconfirmed_dealloc_or_delete() {
    for width in [4, 8, 32] {
        for safety in [CrashSafety::Off, CrashSafety::Undo] {
            let tag = format!("{width} bits {safety:?}");
            let pod = pod(width, safety);
            let a = Host::join(&pod, Join::As(0), options()).unwrap();
            let b = Host::join(&pod, Join::As(1), options()).unwrap();
            for fault in [Fault::Refuse, Fault::Unconfirmed] {
                let tag = format!("{tag} {fault:?}");
                a.create(b"k", &value(1)).unwrap();
                a.write(b"k", &value(2)).unwrap();
                let r = with_fault_at(None, fault, || b.make_read_shared(b"k"));
                assert!(
                    matches!(r, Err(Error::InjectedFault { .. })),
                    "{tag}: {r:?}"
                );
                b.write(b"k", &value(3))
                    .unwrap_or_else(|e| panic!("{tag}: the write after the dealloc: {e}"));
                assert_eq!(read(&a, b"k"), value(3), "{tag}");
                clean(&[&a, &b], &format!("{tag} after the dealloc"));
                let r = with_fault_at(None, fault, || b.delete(b"k"));
                assert!(
                    matches!(r, Err(Error::InjectedFault { .. })),
                    "{tag}: {r:?}"
                );
                // A delete in the log: the key is gone, not busy. One refused: still there.
                let r = b.write(b"k", &value(4));
                if fault == Fault::Unconfirmed {
                    assert!(matches!(r, Err(Error::UnknownKey)), "{tag}: {r:?}");
                } else {
                    assert!(r.is_ok(), "{tag}: {r:?}");
                    assert_eq!(read(&a, b"k"), value(4), "{tag}");
                    b.delete(b"k").unwrap();
                }
                assert!(
                    matches!(a.read(b"k", &mut [0; 4]), Err(Error::UnknownKey)),
                    "{tag}"
                );
                clean(&[&a, &b], &format!("{tag} after the delete"));
            }
        }
    }
}
fn local_pod(safety: CrashSafety) -> Arc<Pod> {
    heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(4096)
            .crash_safety(safety)
            .local_partitions(2),
    )
}

fn local_matrix(safety: CrashSafety) {
    let pod = local_pod(safety);
    let pumped = || options().pump_interval(Some(Duration::from_millis(1)));
    let a = Host::join(&pod, Join::As(0), pumped()).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped()).unwrap();
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        for with_record in [false, true] {
            let tag = format!("local {safety:?} {fault:?} record {with_record}");
            a.create(b"m", &value(1)).unwrap();
            if with_record {
                a.write(b"m", &value(2)).unwrap();
            }
            // move here fails
            if !with_record {
                read(&a, b"m");
            }
            let before = a.inspect().chaos_counts();
            let r = with_fault_at(None, fault, || read(&a, b"m"));
            let _ = r;
            let after = a.inspect().chaos_counts();
            assert_ne!(before, after, "{tag}: the fault hit the move");
            a.inspect().settle_pending().unwrap();
            b.inspect().settle_pending().unwrap();
            // whatever happened, both hosts read and write it
            b.write(b"m", &value(5)).unwrap();
            assert_eq!(read(&a, b"m"), value(5), "{tag}");
            a.write(b"m", &value(6)).unwrap();
            assert_eq!(read(&b, b"m"), value(6), "{tag}");
            usable(&a, &b, b"m", &format!("{tag} move here"));
            b.delete(b"m").unwrap();
            clean(&[&a, &b], &tag);
            assert_eq!(
                a.inspect().local_objects().0,
                0,
                "{tag} leftover in a's DRAM"
            );

            // move back fails: asked by b (RPC) and by a itself (delete)
            a.create(b"m", &value(1)).unwrap();
            if with_record {
                a.write(b"m", &value(2)).unwrap();
            }
            move_into(&a, b"m");
            a.write(b"m", &value(7)).unwrap();
            let r = with_fault_at(Some(Point::MoveBackBeforeCopy), fault, || a.delete(b"m"));
            let _ = r;
            a.inspect().settle_pending().unwrap();
            b.inspect().settle_pending().unwrap();
            if a.lookup(b"m").unwrap().is_some() {
                assert_eq!(read(&b, b"m"), value(7), "{tag} move back");
                assert_eq!(read(&a, b"m"), value(7), "{tag} move back");
                b.write(b"m", &value(8)).unwrap();
                assert_eq!(read(&a, b"m"), value(8), "{tag} move back");
                a.delete(b"m").unwrap();
            }
            clean(&[&a, &b], &tag);
            a.inspect().settle_pending().unwrap();
        }
    }
}

#[test]
fn local_partition_faults_leave_the_pod_clean_off() {
    local_matrix(CrashSafety::Off);
}

#[test]
fn local_partition_faults_leave_the_pod_clean_undo() {
    local_matrix(CrashSafety::Undo);
}

/// An AllLog pod and its two hosts.
fn all_log_pair() -> (Arc<Pod>, Host, Host) {
    let pod = heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(4096)
            .coherence(megalon_core::Coherence::AllLog),
    );
    let a = Host::join(&pod, Join::As(0), options()).unwrap();
    let b = Host::join(&pod, Join::As(1), options()).unwrap();
    (pod, a, b)
}

#[test]
fn all_log_faults_leave_the_pod_clean() {
    let (_pod, a, b) = all_log_pair();
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        let tag = format!("all-log {fault:?}");
        a.create(b"k", &value(1)).unwrap();
        // Lock fails
        let r = with_fault_at(None, fault, || a.write(b"k", &value(2)));
        assert!(r.is_err());
        a.inspect().settle_pending().unwrap();
        b.write(b"k", &value(3)).unwrap();
        assert_eq!(read(&a, b"k"), value(3), "{tag} lock");
        // Unlock fails
        let t = a.write_start(b"k").unwrap();
        t.write(0, &value(4)).unwrap();
        chaos::fail_next_appends(&[fault]);
        let r = a.write_end(t);
        chaos::clear_forced_faults();
        // The write is done (its Unlock goes in later, the pump's or replay's): an error
        // would tell the caller it changed nothing.
        assert!(r.is_ok(), "{tag} unlock: {r:?}");
        assert_eq!(a.inspect().settle_pending().unwrap(), 0, "{tag} unlock");
        assert_eq!(read(&b, b"k"), value(4), "{tag} unlock");
        b.write(b"k", &value(5)).unwrap();
        assert_eq!(read(&a, b"k"), value(5), "{tag} unlock");
        // Delete fails (its Lock)
        let r = with_fault_at(None, fault, || a.delete(b"k"));
        assert!(r.is_err());
        a.inspect().settle_pending().unwrap();
        b.inspect().settle_pending().unwrap();
        for k in [&b"k"[..], b"d"] {
            if a.lookup(k).unwrap().is_some() {
                b.write(k, &value(9))
                    .unwrap_or_else(|e| panic!("{tag} {e}"));
                a.delete(k).unwrap_or_else(|e| panic!("{tag} {e}"));
            }
        }
    }
}

/// Runs `op` with `fault` forced on its `n`-th append (1-based).
fn with_fault_on_append<R>(n: u32, fault: Fault, op: impl FnOnce() -> R) -> R {
    if n == 1 {
        return with_fault_at(None, fault, op);
    }
    chaos::clear_forced_faults();
    let mut published = 0;
    let r = chaos::with_hook(
        move |at| {
            if at == Point::AppendAfterPublish {
                published += 1;
                if published == n - 1 {
                    chaos::fail_next_appends(&[fault]);
                }
            }
        },
        op,
    );
    chaos::clear_forced_faults();
    r
}

/// A write that must take another object's record (every record in use) fails its
/// deallocation's append, then its allocation's: nothing locked or leaked, every key
/// usable from both hosts.
#[test]
fn a_claim_that_makes_room_leaves_the_pod_clean_whichever_append_fails() {
    for width in [2, 4, 8, 32] {
        for safety in [CrashSafety::Off, CrashSafety::Undo] {
            for fault in [Fault::Refuse, Fault::Unconfirmed] {
                for n in 1..=2 {
                    let tag = format!("{width} bits {safety:?} {fault:?} append {n}");
                    let config = common::config()
                        .scr_bytes(3 * 4096)
                        .lnr_bytes(4 << 20)
                        .log_capacity_entries(4096)
                        .record_width_bits(width)
                        .crash_safety(safety);
                    // Every record line but one taken by the application's SCR.
                    let probe = heap_pod(&config);
                    let records_bytes = probe.layout().record_count * u64::from(width) / 8;
                    drop(probe);
                    let pod = heap_pod(&config.app_scr_bytes(records_bytes - 64));
                    let a = Host::join(&pod, Join::As(0), options()).unwrap();
                    let b = Host::join(&pod, Join::As(1), options()).unwrap();
                    let records = pod.layout().record_count;
                    let key = |i: u64| format!("k{i}").into_bytes();
                    for i in 0..=records {
                        a.create(&key(i), &value(1)).unwrap();
                    }
                    for i in 0..records {
                        b.write(&key(i), &value(2)).unwrap();
                    }
                    let before = a.inspect().chaos_counts();
                    let r = with_fault_on_append(n, fault, || a.write(&key(records), &value(3)));
                    assert!(r.is_err(), "{tag}: {r:?}");
                    assert_ne!(before, a.inspect().chaos_counts(), "{tag}: the fault hit");
                    clean(&[&a, &b], &tag);
                    a.write(&key(records), &value(4))
                        .unwrap_or_else(|e| panic!("{tag}: {e}"));
                    assert_eq!(read(&b, &key(records)), value(4), "{tag}");
                    for i in 0..records {
                        b.write(&key(i), &value(5))
                            .unwrap_or_else(|e| panic!("{tag}: k{i} {e}"));
                        assert_eq!(read(&a, &key(i)), value(5), "{tag}");
                    }
                    clean(&[&a, &b], &tag);
                }
            }
        }
    }
}

/// An AllLog delete whose `Lock` won and whose `Delete` append fails: the lock is
/// unlocked later (deferred), and the object stays usable from both hosts.
#[test]
fn all_log_delete_whose_delete_append_fails_after_its_lock_leaves_the_object_usable() {
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        let (_pod, a, b) = all_log_pair();
        a.create(b"k", &value(1)).unwrap();
        let before = a.inspect().chaos_counts();
        let r = with_fault_on_append(2, fault, || a.delete(b"k"));
        assert!(r.is_err(), "{fault:?}: {r:?}");
        assert_ne!(
            before,
            a.inspect().chaos_counts(),
            "{fault:?}: the fault hit"
        );
        assert_eq!(a.inspect().settle_pending().unwrap(), 0, "{fault:?}");
        b.inspect().settle_pending().unwrap();
        if a.lookup(b"k").unwrap().is_some() {
            let lock = b.inspect().replicated_lock(b"k").unwrap().unwrap();
            assert_eq!(lock.holder, None, "{fault:?}");
            b.write(b"k", &value(3)).unwrap();
            assert_eq!(read(&a, b"k"), value(3), "{fault:?}");
            a.write(b"k", &value(4)).unwrap();
            assert_eq!(read(&b, b"k"), value(4), "{fault:?}");
        } else {
            a.create(b"k", &value(5)).unwrap();
            assert_eq!(read(&b, b"k"), value(5), "{fault:?}");
        }
    }
}

/// An AllLog write whose `Unlock` fails (refused: the pump appends it again; or published
/// and not confirmed: a replay of this host applies it) leaves the replicated lock with
/// its host. With no pump, that host's next write of the object, at once, is what ends
/// it, and then the other host writes too.
#[test]
fn the_next_write_of_a_host_ends_its_own_failed_all_log_unlock() {
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        let (_pod, a, b) = all_log_pair();
        a.create(b"k", &value(1)).unwrap();
        let t = a.write_start(b"k").unwrap();
        t.write(0, &value(2)).unwrap();
        chaos::fail_next_appends(&[fault]);
        let r = a.write_end(t);
        chaos::clear_forced_faults();
        assert!(r.is_ok(), "{fault:?}: {r:?}");
        a.write(b"k", &value(3))
            .unwrap_or_else(|e| panic!("{fault:?}: the write after: {e}"));
        assert_eq!(read(&b, b"k"), value(3), "{fault:?}");
        b.write(b"k", &value(4)).unwrap();
        assert_eq!(read(&a, b"k"), value(4), "{fault:?}");
        assert_eq!(a.inspect().settle_pending().unwrap(), 0, "{fault:?}");
    }
}

/// An AllLog write whose `Unlock` was refused leaves the replicated lock with its host
/// until that host appends it again: on a host run without a pump, its `replay` (what
/// the pump does each round) does, as `Inspect::settle_pending` does. It once did not:
/// the lock stayed held, and the other host's writes waited, until a write of the same
/// host.
#[test]
fn a_replay_of_a_host_without_a_pump_appends_its_refused_all_log_unlock() {
    let (_pod, a, b) = all_log_pair();
    a.create(b"k", &value(1)).unwrap();
    let t = a.write_start(b"k").unwrap();
    t.write(0, &value(2)).unwrap();
    chaos::fail_next_appends(&[Fault::Refuse]);
    let r = a.write_end(t);
    chaos::clear_forced_faults();
    assert!(r.is_ok(), "{r:?}");
    let held = |h: &Host| h.inspect().replicated_lock(b"k").unwrap().unwrap().holder;
    assert!(held(&b).is_some(), "the refused unlock left the lock held");
    a.replay().unwrap();
    b.replay().unwrap();
    assert_eq!(held(&b), None, "a's replay appended its unlock");
    b.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&a, b"k"), value(3));
}

/// An AllLog write whose `Lock` landed behind another host's hole (its confirm gave up),
/// then its host leaves. The leave's settle cannot pass the hole; the hole is filled
/// while the leave's `HostLeft` waits, so that confirm applies the `Lock` (it won), whose
/// settle leaves the `Unlock` it owes as deferred work. The leave must append it before
/// it frees its row. (It freed the row with the `Unlock` never appended: the object
/// stayed locked for good by an id nobody recovers.)
#[test]
fn a_leave_whose_host_left_applies_its_won_all_log_lock_unlocks_it() {
    let (pod, a, b) = all_log_pair();
    let c = Arc::new(Host::join(&pod, Join::As(2), options()).unwrap());
    a.create(b"k", &value(1)).unwrap();
    b.replay().unwrap();
    c.replay().unwrap();
    // c reserves a position and stops before it writes its entry: a hole.
    let (c_stopped, c_go, c_thread) = {
        let c = Arc::clone(&c);
        common::stopped_at(Point::AppendAfterReserve, move || {
            c.create(b"other", &value(7))
        })
    };
    assert_eq!(c_stopped.recv().unwrap(), "stopped");
    let r = a.write_start(b"k").map(drop);
    assert!(
        matches!(r, Err(Error::ReplayStalled { .. })),
        "the lock's confirm waits for the hole: {r:?}"
    );
    // a leaves; the hole is filled once the leave waits for a position (its
    // `HostLeft`'s confirm: the settle before it replays without waiting).
    let leaving = std::thread::spawn(move || {
        let mut go = Some(c_go);
        chaos::with_hook(
            move |at| {
                if at == Point::ReplayBeforeWait {
                    if let Some(go) = go.take() {
                        go.send("go").unwrap();
                    }
                }
            },
            move || drop(a),
        )
    });
    leaving.join().unwrap();
    c_thread.join().unwrap().unwrap();
    b.replay().unwrap();
    let lock = b.inspect().replicated_lock(b"k").unwrap().unwrap();
    assert_eq!(lock.holder, None, "a left holding k's lock: {lock:?}");
    b.write(b"k", &value(3)).unwrap();
    assert_eq!(read(&c, b"k"), value(3));
    // Host 0's row is free: the id joins again.
    Host::join(&pod, Join::As(0), options()).unwrap();
}
