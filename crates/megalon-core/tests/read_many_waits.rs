//! What a `read_many` waits for: objects whose records another host holds locked (a
//! writer stopped or slow with its tickets open) make the call wait one wait limit in
//! all, not one for each such object. And a `delete_unless_busy` of such an object waits
//! for none.

mod common;

use std::time::{Duration, Instant};

use common::value;
use megalon_core::{Error, Host, HostOptions, Join};

/// Host b holds write tickets of four objects and does nothing more (stopped, its lease
/// long); a `read_many` of them on host a answers each `RecordBusy` within about one wait
/// limit. (Each read waited a limit of its own, one after another: 1.2 s at 300 ms.)
#[test]
fn a_read_many_of_objects_a_stopped_writer_holds_waits_one_limit() {
    let wait = Duration::from_millis(300);
    let options = |id: u64| {
        HostOptions::new()
            .memory(common::simulated(id + 1, 4096, 0))
            .pump_interval(None)
            .wait_limit(wait)
    };
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(1)).unwrap();
    let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("k{i}").into_bytes()).collect();
    for key in &keys {
        a.create(key, &value(1)).unwrap();
        // Written once: the object has a record, which a writer locks.
        a.write(key, &value(2)).unwrap();
    }
    b.replay().unwrap();
    let tickets: Vec<_> = keys.iter().map(|key| b.write_start(key).unwrap()).collect();
    let mut bufs = vec![vec![0u8; common::SLOT]; keys.len()];
    let mut reads: Vec<(&[u8], &mut [u8])> = keys
        .iter()
        .zip(bufs.iter_mut())
        .map(|(key, buf)| (&key[..], &mut buf[..]))
        .collect();
    let began = Instant::now();
    let answers = a.read_many(&mut reads);
    let took = began.elapsed();
    for answer in &answers {
        assert!(
            matches!(answer, Err(Error::RecordBusy { .. })),
            "each object is locked: {answers:?}"
        );
    }
    assert!(
        took < wait + wait / 2,
        "a read_many of {} objects locked by a stopped writer took {took:?} (wait limit \
         {wait:?})",
        keys.len()
    );
    for ticket in tickets {
        b.write_end(ticket).unwrap();
    }
    assert_eq!(
        a.read_many(&mut reads).iter().filter(|r| r.is_ok()).count(),
        4
    );
}

/// Host b holds a write ticket of an object: a's `delete_unless_busy` answers `RecordBusy`
/// at once (a `delete` waits out its limit), the object untouched; once b's write ends,
/// the same call deletes it.
#[test]
fn a_delete_unless_busy_of_a_locked_object_answers_at_once_and_deletes_nothing() {
    let wait = Duration::from_secs(2);
    let options = |id: u64| {
        HostOptions::new()
            .memory(common::simulated(id + 1, 4096, 0))
            .pump_interval(None)
            .wait_limit(wait)
    };
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(1)).unwrap();
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
