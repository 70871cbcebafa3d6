//! What a `read_many` waits for: objects whose records another host holds locked (a
//! writer stopped or slow with its tickets open) make the call wait one wait limit in
//! all, not one for each such object. And a `delete_unless_busy` of such an object waits
//! for none. A record found freed (its release's event not applied here yet) is never
//! answered `RecordBusy` without one more look, however the wait was spent. And a read
//! whose check fails and starts over alone waits within the same limit.

mod common;

use std::time::{Duration, Instant};

use common::value;
use megalon_core::{Error, Host, HostOptions, Join};

/// Hosts 0 and 1 of a pod whose leases are long (a stopped writer is not declared dead),
/// without pumps, waiting `wait` at most.
fn two_hosts(wait: Duration) -> (Host, Host) {
    let options = |id: u64| {
        HostOptions::new()
            .memory(common::simulated(id + 1, 4096, 0))
            .pump_interval(None)
            .wait_limit(wait)
    };
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(1)).unwrap();
    (a, b)
}

/// Eight objects `a` created and wrote once (each has a record, which a writer locks),
/// replayed by `b`.
fn eight_written(a: &Host, b: &Host) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..8).map(|i| format!("k{i}").into_bytes()).collect();
    for key in &keys {
        a.create(key, &value(1)).unwrap();
        a.write(key, &value(2)).unwrap();
    }
    b.replay().unwrap();
    keys
}

/// Every answer `RecordBusy`, and the call within four wait limits (eight reads that each
/// waited a limit of their own take eight).
#[track_caller]
fn all_busy_within(
    answers: &[Result<megalon_core::Done, Error>],
    took: Duration,
    wait: Duration,
    how: &str,
) {
    for answer in answers {
        assert!(
            matches!(answer, Err(Error::RecordBusy { .. })),
            "each object is locked: {answers:?}"
        );
    }
    assert!(
        took < 4 * wait,
        "a read_many of {} objects {how} took {took:?} (wait limit {wait:?})",
        answers.len()
    );
}

/// Host b holds write tickets of eight objects and does nothing more (stopped, its lease
/// long); a `read_many` of them on host a answers each `RecordBusy` within about one wait
/// limit. (Each read waited a limit of its own, one after another: eight limits. The
/// bound leaves room for a loaded machine: four objects took up to 970 ms beside two busy
/// loops at a 300 ms limit, and eight took 1.67 s, past five such limits, beside a stress;
/// at a 1 s limit the bound of four leaves 3 s to a stopped process.)
#[test]
fn a_read_many_of_objects_a_stopped_writer_holds_waits_one_limit() {
    let wait = Duration::from_secs(1);
    let (a, b) = two_hosts(wait);
    let keys = eight_written(&a, &b);
    let tickets: Vec<_> = keys.iter().map(|key| b.write_start(key).unwrap()).collect();
    let mut bufs = vec![vec![0u8; common::SLOT]; keys.len()];
    let mut reads = common::reads(&keys, &mut bufs);
    let began = Instant::now();
    let answers = a.read_many(&mut reads);
    all_busy_within(
        &answers,
        began.elapsed(),
        wait,
        "locked by a stopped writer",
    );
    for ticket in tickets {
        b.write_end(ticket).unwrap();
    }
    assert_eq!(
        a.read_many(&mut reads).iter().filter(|r| r.is_ok()).count(),
        keys.len()
    );
}

/// Host b holds a write ticket of x (stopped), and a `read_many` on host a reads x, then
/// (in a second group) y, an object with a record. x spends the call's wait. Between y's
/// tail check and its lookup, b makes y read-shared: its dealloc is in the log, its record
/// free, and a's replica has not applied the dealloc yet, so y's lookup finds the record
/// free. Nobody holds y: one more look (its tail check applies the dealloc) reads it, as a
/// lone read does. (Answered `RecordBusy` without that look, the call's wait being spent:
/// a freed record read as a locked one.)
#[cfg(feature = "chaos")]
#[test]
fn a_read_many_whose_wait_is_spent_still_reads_an_object_whose_record_was_just_freed() {
    use megalon_core::chaos::{self, Point};

    let wait = Duration::from_millis(300);
    let (a, b) = two_hosts(wait);
    let b: &'static Host = Box::leak(Box::new(b));
    // The first group: x (locked by b below), then read-shared objects; y opens the second.
    let mut keys: Vec<Vec<u8>> = vec![b"x".to_vec()];
    keys.extend((0..15).map(|i| format!("s{i}").into_bytes()));
    keys.push(b"y".to_vec());
    for key in &keys {
        a.create(key, &value(1)).unwrap();
    }
    for key in [&b"x"[..], b"y"] {
        // Written once: the object has a record.
        a.write(key, &value(2)).unwrap();
    }
    b.replay().unwrap();
    let ticket = b.write_start(b"x").unwrap();
    let mut bufs = vec![vec![0u8; common::SLOT]; keys.len()];
    let mut reads = common::reads(&keys, &mut bufs);
    // The first group's copies come after all its reads started (x's too): the first
    // tail check after a copy is y's.
    let (mut copied, mut freed) = (false, false);
    let answers = chaos::with_hook(
        move |at| match at {
            Point::ReadBeforeEnd => copied = true,
            Point::ReadAfterTailCheck if copied && !freed => {
                freed = true;
                assert!(b.make_read_shared(b"y").unwrap(), "y had a record");
            }
            _ => {}
        },
        || a.read_many(&mut reads),
    );
    common::only_the_first_busy(&answers, "y, nobody's to wait for, its record freed");
    assert_eq!(bufs[16][..], value(2)[..]);
    assert!(a.lookup(b"y").unwrap().unwrap().record.is_none());
    b.write_end(ticket).unwrap();
}

/// Host b holds a write ticket of an object: a's `delete_unless_busy` answers `RecordBusy`
/// at once (a `delete` waits out its limit), the object untouched; once b's write ends,
/// the same call deletes it.
#[test]
fn a_delete_unless_busy_of_a_locked_object_answers_at_once_and_deletes_nothing() {
    let wait = Duration::from_secs(2);
    let (a, b) = two_hosts(wait);
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    b.replay().unwrap();
    let ticket = b.write_start(b"k").unwrap();
    ticket.write(0, &value(3)).unwrap();
    let began = Instant::now();
    let answer = a.delete_unless_busy(b"k");
    let took = began.elapsed();
    assert!(
        matches!(answer, Err(Error::RecordBusy { .. })),
        "b holds the record: {answer:?}"
    );
    assert!(took < wait / 4, "it waited {took:?} (limit {wait:?})");
    b.write_end(ticket).unwrap();
    let mut buf = vec![0u8; common::SLOT];
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(3), "the object as b's write left it");
    a.delete_unless_busy(b"k").unwrap();
    assert!(matches!(a.read(b"k", &mut buf), Err(Error::UnknownKey)));
    assert!(b.lookup(b"k").unwrap().is_none());
}

/// Host a's `delete_unless_busy` of y, an object with a record: in its tail check (b's
/// create of z to apply), b makes y read-shared, so y's dealloc is in the log, its record
/// free, and a's replica, its round under way, has not applied the dealloc. Nobody holds
/// y: the call deletes it, as `delete` does once its next tail check applies the dealloc.
/// (It answered `RecordBusy` at once: a freed record taken for a locked one.)
#[cfg(feature = "chaos")]
#[test]
fn a_delete_unless_busy_deletes_an_object_whose_record_was_just_freed() {
    use megalon_core::chaos::{self, Point};

    let (a, b) = two_hosts(Duration::from_secs(2));
    let b: &'static Host = Box::leak(Box::new(b));
    a.create(b"y", &value(1)).unwrap();
    // Written once: the object has a record.
    a.write(b"y", &value(2)).unwrap();
    b.create(b"z", &value(3)).unwrap();
    let mut freed = false;
    let answer = chaos::with_hook(
        move |at| {
            if at == Point::ReplayBeforeCtail && !freed {
                freed = true;
                assert!(b.make_read_shared(b"y").unwrap(), "y had a record");
            }
        },
        || a.delete_unless_busy(b"y"),
    );
    assert!(answer.is_ok(), "nobody holds y: {answer:?}");
    assert!(a.lookup(b"y").unwrap().is_none());
    assert!(b.lookup(b"y").unwrap().is_none());
}

/// Host b holds a write ticket of y, an object with a record, and host a runs `op` on y,
/// which waits for it. In a's first pause b ends its write and creates z (an event for
/// a's next tail check); in that tail check, its round under way, b makes y read-shared,
/// so a's next look finds y's record freed, the dealloc not applied here yet. Right
/// before a's pause after that look the test sleeps past the wait limit: the wait runs
/// out in the pause. Returns `op`'s answer, once the test saw every step happen.
#[cfg(feature = "chaos")]
fn freed_as_the_wait_runs_out<T>(
    op: impl FnOnce(&Host) -> Result<T, Error>,
) -> (Host, &'static Host, Result<T, Error>) {
    use megalon_core::chaos::{self, Point};
    use std::cell::Cell;
    use std::rc::Rc;

    let wait = Duration::from_millis(200);
    let (a, b) = two_hosts(wait);
    let b: &'static Host = Box::leak(Box::new(b));
    a.create(b"y", &value(1)).unwrap();
    // Written once: the object has a record.
    a.write(b"y", &value(2)).unwrap();
    b.replay().unwrap();
    let mut ticket = Some(b.write_start(b"y").unwrap());
    ticket.as_ref().unwrap().write(0, &value(3)).unwrap();
    let step = Rc::new(Cell::new(0));
    let seen = Rc::clone(&step);
    let answer = chaos::with_hook(
        move |at| match (step.get(), at) {
            (0, Point::RecordBeforeWait) => {
                step.set(1);
                b.write_end(ticket.take().unwrap()).unwrap();
                b.create(b"z", &value(4)).unwrap();
            }
            (1, Point::ReplayBeforeCtail) => {
                step.set(2);
                assert!(b.make_read_shared(b"y").unwrap(), "y had a record");
            }
            (2, Point::RecordBeforeWait) => {
                step.set(3);
                std::thread::sleep(wait + Duration::from_millis(20));
            }
            _ => {}
        },
        || op(&a),
    );
    assert_eq!(
        seen.get(),
        3,
        "the steps did not all happen: {:?}",
        answer.is_ok()
    );
    (a, b, answer)
}

/// [`freed_as_the_wait_runs_out`] with a read: it reads what b wrote. (It answered
/// `RecordBusy`: the freed record's one more look was given only to a wait spent before
/// the look, not to one that ran out in the pause after it.)
#[cfg(feature = "chaos")]
#[test]
fn a_read_whose_wait_runs_out_after_it_found_the_record_freed_reads() {
    let mut buf = vec![0u8; common::SLOT];
    let (_, _, answer) = freed_as_the_wait_runs_out(|a| a.read(b"y", &mut buf));
    assert!(answer.is_ok(), "nobody holds y: {answer:?}");
    assert_eq!(buf, value(3), "y as b's write left it");
}

/// [`freed_as_the_wait_runs_out`] with a write: it writes, through a new record.
#[cfg(feature = "chaos")]
#[test]
fn a_write_whose_wait_runs_out_after_it_found_the_record_freed_writes() {
    let (a, b, answer) = freed_as_the_wait_runs_out(|a| a.write(b"y", &value(5)));
    assert!(answer.is_ok(), "nobody holds y: {answer:?}");
    let mut buf = vec![0u8; common::SLOT];
    b.read(b"y", &mut buf).unwrap();
    assert_eq!(buf, value(5));
    assert!(a.lookup(b"y").unwrap().unwrap().record.is_some());
}

/// [`freed_as_the_wait_runs_out`] with a delete: it deletes.
#[cfg(feature = "chaos")]
#[test]
fn a_delete_whose_wait_runs_out_after_it_found_the_record_freed_deletes() {
    let (a, b, answer) = freed_as_the_wait_runs_out(|a| a.delete(b"y"));
    assert!(answer.is_ok(), "nobody holds y: {answer:?}");
    assert!(a.lookup(b"y").unwrap().is_none());
    assert!(b.lookup(b"y").unwrap().is_none());
}

/// The same bound for reads whose objects were free when they began: during the group's
/// first copy host b (a writer that then stops, its lease long) locks all eight. Every
/// read's check fails, and each starts over alone, finds its object locked and waited a
/// whole wait limit of its own (review `combiner`, 2026-12-03): eight limits for the call.
#[cfg(feature = "chaos")]
#[test]
fn a_read_many_whose_reads_start_over_alone_still_waits_one_limit() {
    use megalon_core::chaos::{self, Point};

    let wait = Duration::from_secs(1);
    let (a, b) = two_hosts(wait);
    let b: &'static Host = Box::leak(Box::new(b));
    let keys = eight_written(&a, b);
    let mut bufs = vec![vec![0u8; common::SLOT]; keys.len()];
    let mut reads = common::reads(&keys, &mut bufs);
    let locked_keys = keys.clone();
    let mut locked = false;
    let began = Instant::now();
    let answers = chaos::with_hook(
        move |at| {
            if at == Point::ReadBeforeEnd && !locked {
                locked = true;
                for key in &locked_keys {
                    // Held for good: the writer stopped.
                    std::mem::forget(b.write_start(key).unwrap());
                }
            }
        },
        || a.read_many(&mut reads),
    );
    all_busy_within(
        &answers,
        began.elapsed(),
        wait,
        "locked during its first copy",
    );
}

/// Host b holds `key`'s write ticket for `hold`, on a thread of its own; returns once it
/// is held.
#[cfg(feature = "chaos")]
fn hold_write(b: &'static Host, key: &'static [u8], hold: Duration) -> std::thread::JoinHandle<()> {
    let (held, is_held) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let ticket = b.write_start(key).unwrap();
        ticket.write(0, &value(9)).unwrap();
        held.send(()).unwrap();
        std::thread::sleep(hold);
        b.write_end(ticket).unwrap();
    });
    is_held.recv().unwrap();
    writer
}

/// A lone read, unlike a `read_many`, waits a limit of its own at each try: behind two
/// writers one after the other, each holding the record 0.7 of the limit (the first
/// before the read's copy, the second taking the lock during it, so the read's check
/// fails and it starts over), it reads. It answered `RecordBusy` at one limit when its
/// tries shared one wait (review `own`, 2026-12-03, of the change that made a
/// `read_many`'s reads that start over wait within the call's limit).
#[cfg(feature = "chaos")]
#[test]
fn a_lone_read_that_starts_over_gets_a_wait_of_its_own() {
    use megalon_core::chaos::{self, Point};
    use std::cell::RefCell;
    use std::rc::Rc;

    let wait = Duration::from_secs(1);
    let hold = wait * 7 / 10;
    let (a, b) = two_hosts(wait);
    let b: &'static Host = Box::leak(Box::new(b));
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    b.replay().unwrap();
    let first = hold_write(b, b"k", hold);
    let second: Rc<RefCell<Option<std::thread::JoinHandle<()>>>> = Rc::default();
    let mut buf = vec![0u8; common::SLOT];
    let began = Instant::now();
    let hook_second = Rc::clone(&second);
    let answer = chaos::with_hook(
        move |at| {
            let mut second = hook_second.borrow_mut();
            if at == Point::ReadBeforeEnd && second.is_none() {
                *second = Some(hold_write(b, b"k", hold));
            }
        },
        || a.read(b"k", &mut buf),
    );
    let took = began.elapsed();
    first.join().unwrap();
    let second = second.borrow_mut().take();
    second
        .expect("the second writer came in during the copy")
        .join()
        .unwrap();
    assert!(
        answer.is_ok(),
        "a lone read behind two writers that each held the record {hold:?} (limit \
         {wait:?}) answered {answer:?} after {took:?}"
    );
}
