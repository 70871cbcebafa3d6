//! Calls made from a drop while the thread unwinds, and panics inside them (review
//! `unwind2`, 2026-12-04): a lost lock CAS whose announce looked like a lock the call's
//! own panic left, an append cut short between its reservation and its publish, a replay
//! cut short between two entries.
#![cfg(feature = "chaos")]

mod common;

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use common::{quiet_on_purpose, value, ON_PURPOSE};
use megalon_core::chaos::{self, Point};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, Pod};

/// Runs `call` from a drop while the thread unwinds (a guard of the caller's), and
/// swallows the caller's panic. Returns what `call` answered.
fn from_a_drop_during_an_unwind<T>(call: impl FnOnce() -> T) -> T {
    struct OnDrop<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for OnDrop<F> {
        fn drop(&mut self) {
            assert!(std::thread::panicking());
            (self.0.take().unwrap())();
        }
    }
    quiet_on_purpose();
    let answered = Rc::new(RefCell::new(None));
    let slot = answered.clone();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let _guard = OnDrop(Some(move || *slot.borrow_mut() = Some(call())));
        panic!("the caller's own {ON_PURPOSE}");
    }));
    assert!(result.is_err());
    let answered = answered.borrow_mut().take().expect("called");
    answered
}

/// Runs `check`; the message it panicked with, if it did (`what` if it said nothing).
fn failure_of(what: &str, check: impl FnOnce()) -> Option<String> {
    let panic = catch_unwind(AssertUnwindSafe(check)).err()?;
    Some(
        panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| format!("{what}: failed")),
    )
}

/// A pod of 2-bit records whose width may switch (so a delete passes a gate between its
/// load of the word and its lock CAS), with undo images.
fn pod() -> Arc<Pod> {
    common::heap_pod(
        &common::config()
            .lease_ms(100)
            .crash_safety(CrashSafety::Undo)
            .record_width_bits(2)
            .record_width_switch(true),
    )
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(common::simulated(seed, 512, 64))
        .pump_interval(Some(Duration::from_millis(1)))
        .wait_limit(Duration::from_millis(300))
}

/// A delete made from a drop during an unwind whose lock CAS loses to another host's
/// lock (here a write's, at 2 bits: every lock of a record is one word, the word the
/// delete announced) ends normally: it waits for the holder and deletes. Its lost
/// attempt's hold, dropped without its announce withdrawn, found the record's word equal
/// to its announced locked word (the other host's lock) and was taken for a lock its own
/// call's panic left: the announce was kept for good (every width switch of the pod then
/// waited on it, and answered `RecordWidthSwitching`, for as long as the host lived) and
/// the host, healthy, left as a dead one (recovered a lease later).
#[test]
fn a_delete_from_a_drop_that_loses_its_cas_to_a_held_lock_leaves_nothing_behind() {
    let pod = pod();
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(2)).unwrap()));
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    a.create(b"other", &value(1)).unwrap();
    b.replay().unwrap();
    // 0: before b's lock; 1: b holds it; 2: b ended it.
    let phase = Rc::new(Cell::new(0u8));
    let hook_phase = phase.clone();
    let deleted = from_a_drop_during_an_unwind(|| {
        let ticket = Rc::new(RefCell::new(None));
        chaos::with_hook(
            move |at| match hook_phase.get() {
                0 if at == Point::GateAfterRaise => {
                    *ticket.borrow_mut() = Some(b.write_start(b"k").unwrap());
                    hook_phase.set(1);
                }
                1 if at == Point::RecordBeforeWait => {
                    hook_phase.set(2);
                    let t = ticket.borrow_mut().take().unwrap();
                    t.write(0, &value(9)).unwrap();
                }
                _ => {}
            },
            || a.delete(b"k"),
        )
    });
    assert_eq!(phase.get(), 2, "b locked, and a waited for it");
    deleted.unwrap();
    assert!(matches!(
        b.read(b"k", &mut vec![0; common::SLOT]),
        Err(Error::UnknownKey)
    ));
    // Nothing of a's is announced any more: a width switch drains.
    a.write(b"other", &value(3)).unwrap();
    let switched = b.switch_record_width(4);
    assert!(
        matches!(switched, Ok(true)),
        "a switch after the delete: {switched:?}"
    );
    a.write(b"other", &value(4)).unwrap();
    // And a leaves as a live host does.
    let a_id = a.id();
    drop(a);
    assert!(common::row_freed_within(&pod, a_id, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(300));
    b.replay().unwrap();
    assert_eq!(
        b.inspect().stats().hosts_recovered,
        0,
        "a healthy host left as a dead one"
    );
}

/// Runs `call` with a panic injected at the first `point` it reaches (a bug inside
/// megalon's call), caught right there: from a drop during an unwind if `from_a_drop`.
fn with_a_panic_at(point: Point, from_a_drop: bool, call: impl FnOnce()) {
    let injected = || {
        quiet_on_purpose();
        let fired = Rc::new(Cell::new(false));
        let hook_fired = fired.clone();
        let result = catch_unwind(AssertUnwindSafe(|| {
            chaos::with_hook(
                move |at| {
                    if at == point && !hook_fired.replace(true) {
                        panic!("injected at {at:?} {ON_PURPOSE}");
                    }
                },
                call,
            )
        }));
        assert!(fired.get(), "{point:?} reached");
        assert!(result.is_err());
    };
    if from_a_drop {
        from_a_drop_during_an_unwind(injected);
    } else {
        injected();
    }
}

/// A pod of 2-bit records (every write appends a wrap event) with undo images, hosts a
/// (pump off) and b (pump on).
fn two_hosts() -> (Arc<Pod>, Host, &'static Host) {
    let pod = common::heap_pod(
        &common::config()
            .lease_ms(100)
            .crash_safety(CrashSafety::Undo)
            .record_width_bits(2),
    );
    let a = Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap();
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(2)).unwrap()));
    (pod, a, b)
}

/// Once a's row is free: b writes (or creates) every key of `keys` within a bound,
/// creates a new one, and finds nothing locked.
fn pod_works_after(pod: &Pod, a_id: megalon_core::HostId, b: &Host, keys: &[&[u8]], what: &str) {
    assert!(
        common::row_freed_within(pod, a_id, Duration::from_secs(5)),
        "{what}: a's row: {:?} b's stats {:?} b's errors {:?} b's cursors {:?} b applied {}",
        pod.hosts(),
        b.inspect().stats(),
        b.inspect().background_errors(),
        b.inspect().log_cursors(),
        b.inspect().applied_position()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    for (i, key) in keys.iter().enumerate() {
        loop {
            let written = match b.write(key, &value(40 + i as u8)) {
                Err(Error::UnknownKey) => b.create(key, &value(40 + i as u8)),
                other => other.map(drop),
            };
            match written {
                Ok(()) => break,
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "{what}: b's write of {:?}: {e:?}",
                    String::from_utf8_lossy(key)
                ),
            }
        }
        assert_eq!(common::read(b, key), value(40 + i as u8), "{what}");
    }
    b.create(b"new", &value(50)).unwrap();
    let census = b.inspect().record_census();
    assert!(census.locked.is_empty(), "{what}: locked {census:?}");
}

/// A panic inside an append of a's (a delete, a write at a wrapping counter, a create)
/// made from a drop during an unwind leaves nothing the pod keeps for good once a has
/// left (a hole, a record locked), as one made outside an unwind. (A create's, between
/// its reservation and its publish, failed: its guard, made while the thread already
/// unwound, did not mark a; a went to leave as a live host, its `HostLeft`'s reservation
/// took the row's announce of the hole's (its confirm stalled at the hole, and a left as
/// a dead host after all), and b's recovery of a stalled at the hole for good.
/// Fixed by the append's filling its range as it unwinds, as the next test.)
#[test]
fn a_panic_in_an_append_made_from_a_drop_does_not_outlive_its_host() {
    let points = [
        Point::AppendAfterReserve,
        Point::AppendBeforeWrite,
        Point::AppendAfterPublish,
    ];
    let mut wrong = Vec::new();
    for point in points {
        for from_a_drop in [false, true] {
            for op in ["delete", "write", "create"] {
                let what = format!("{op} at {point:?}, from a drop {from_a_drop}");
                let (pod, a, b) = two_hosts();
                a.create(b"k", &value(1)).unwrap();
                a.write(b"k", &value(2)).unwrap();
                b.replay().unwrap();
                with_a_panic_at(point, from_a_drop, || {
                    let _ = match op {
                        "delete" => a.delete(b"k"),
                        "write" => a.write(b"k", &value(3)).map(drop),
                        _ => a.create(b"c", &value(3)),
                    };
                });
                let a_id = a.id();
                drop(a);
                wrong.extend(failure_of(&what, || {
                    pod_works_after(&pod, a_id, b, &[b"k", b"c"], &what)
                }));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A panic of an append of a's between its reservation and its publish (a bug inside
/// the call, caught by its caller, who goes on with a) left a hole in the log: every
/// replica stalled there for as long as a lived (b's calls answered `ReplayStalled`, and
/// a's own), and a's next reservation took the row's announce of the hole's, so that
/// once a left (as a dead host) its recovery did not fill it either: the pod's log
/// stalled for good. The append now fills what it left of its range with `Skip` as it
/// unwinds.
#[test]
fn an_append_after_one_that_panicked_does_not_hide_its_hole() {
    let mut wrong = Vec::new();
    for point in [Point::AppendAfterReserve, Point::AppendBeforeWrite] {
        for from_a_drop in [false, true] {
            let what = format!("at {point:?}, from a drop {from_a_drop}");
            let (pod, a, b) = two_hosts();
            a.create(b"k", &value(1)).unwrap();
            with_a_panic_at(point, from_a_drop, || {
                let _ = a.create(b"c", &value(3));
            });
            if let Err(e) = b.write(b"k", &value(5)) {
                wrong.push(format!("{what}: b's write while a lives: {e:?}"));
            }
            let next = a.create(b"d", &value(4));
            if let Err(e) = &next {
                wrong.push(format!("{what}: a's next create: {e:?}"));
            }
            let a_id = a.id();
            drop(a);
            let failed = failure_of(&what, || {
                pod_works_after(&pod, a_id, b, &[b"k", b"c", b"d"], &what)
            });
            wrong.extend(failed.map(|message| format!("{message} (a's next create: {next:?})")));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Probe: a width switch of a's whose `WidthEnd` append panics once published, made from
/// a drop during an unwind or not: once a left, b writes and switches again.
#[test]
fn a_panic_in_a_switch_s_append_made_from_a_drop_does_not_outlive_its_host() {
    let mut wrong = Vec::new();
    for point in [Point::AppendAfterReserve, Point::AppendAfterPublish] {
        for from_a_drop in [false, true] {
            let what = format!("switch at {point:?}, from a drop {from_a_drop}");
            let pod = common::heap_pod(
                &common::config()
                    .lease_ms(100)
                    .crash_safety(CrashSafety::Undo)
                    .record_width_bits(8)
                    .record_width_switch(true),
            );
            let a = Host::join(&pod, Join::As(0), options(1).pump_interval(None)).unwrap();
            let b: &'static Host =
                Box::leak(Box::new(Host::join(&pod, Join::As(1), options(2)).unwrap()));
            a.create(b"k", &value(1)).unwrap();
            a.write(b"k", &value(2)).unwrap();
            b.replay().unwrap();
            with_a_panic_at(point, from_a_drop, || {
                let _ = a.switch_record_width(4);
            });
            let a_id = a.id();
            drop(a);
            wrong.extend(failure_of(&what, || {
                pod_works_after(&pod, a_id, b, &[b"k"], &what);
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                loop {
                    match b.switch_record_width(16) {
                        Ok(_) => break,
                        Err(e) => assert!(
                            std::time::Instant::now() < deadline,
                            "{what}: b's switch: {e:?}"
                        ),
                    }
                }
            }));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A panic inside the replay that confirms a create of a's own (a bug, between two
/// entries, under the index's write lock), in a create made from a drop during an unwind.
/// The index's guard, taken while the thread already unwound, took that panic for the
/// call's normal way out: the index was left even (trusted), its position not moved past
/// the create it had applied. a's next replay applied the create again, which lost
/// (the key existed) and gave its slot back to a's pool; a's next create took it: two
/// objects in one slot, on every host (b read "own" as x1's bytes). A replay's guard now
/// poisons on any panic under it, as outside an unwind (a's calls panic; its drop leaves
/// it to recovery).
#[test]
fn a_panic_in_the_replay_of_an_own_create_made_from_a_drop_gives_no_slot_twice() {
    for from_a_drop in [false, true] {
        let (pod, a, b) = two_hosts();
        a.create(b"k", &value(1)).unwrap();
        with_a_panic_at(Point::ReplayBetweenEntries, from_a_drop, || {
            let _ = a.create(b"own", &value(2));
        });
        // a goes on: four creates (each answered, or a panic of a poisoned replica).
        let keys: Vec<Vec<u8>> = (0..4u8).map(|i| format!("x{i}").into_bytes()).collect();
        for (i, key) in keys.iter().enumerate() {
            let _ = catch_unwind(AssertUnwindSafe(|| a.create(key, &value(20 + i as u8))));
        }
        let a_id = a.id();
        drop(a);
        assert!(common::row_freed_within(&pod, a_id, Duration::from_secs(5)));
        b.replay().unwrap();
        let snapshot = b.inspect().replica_snapshot();
        let mut slots: Vec<u64> = snapshot.iter().map(|(_, entry)| entry.slot).collect();
        slots.sort_unstable();
        let all = slots.len();
        slots.dedup();
        assert_eq!(
            all,
            slots.len(),
            "from a drop {from_a_drop}: a slot given twice"
        );
        assert_eq!(common::read_tag(b, b"k"), Some(1));
        for (i, key) in keys.iter().enumerate() {
            if let Ok(Some(tag)) = common::read_opt_tag(b, key) {
                assert_eq!(tag, Some(20 + i as u8), "from a drop {from_a_drop}");
            }
        }
        if let Ok(Some(tag)) = common::read_opt_tag(b, b"own") {
            assert_eq!(tag, Some(2), "from a drop {from_a_drop}: own");
        }
    }
}
