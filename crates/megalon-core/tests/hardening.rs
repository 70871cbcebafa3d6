//! The two rules of DESIGN section 8 on their error paths, and the steps that had no test:
//! a locked record always ends unlocked (a full log, a panicking closure or hook), writes
//! stay inside their object, a create's bytes reach memory before its event, and a
//! deallocating host drops its own old lines of the object. On simulated non-coherent
//! memory unless a test says why not. (Windows that need a preempted thread are in
//! `tests/windows.rs`, behind the `chaos` feature.)

mod common;

use std::time::Duration;

use common::{config, heap_pod, join, read, simulated, value, written_k, SLOT};
use megalon_core::{Error, Host, HostOptions, Join, ReleaseHook};

/// Simulated memory that never evicts at random (a stale line stays until a flush), no
/// background reclaim, short waits.
fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 4096, 0))
        .record_watermark(1.0)
        .wait_limit(Duration::from_millis(200))
}

/// Hosts a and b, with `options(seed)` and `options(seed + 1)`, on a new pod of 32-bit
/// records and 256 log entries.
fn two_hosts(seed: u64) -> (Host, Host) {
    common::two_hosts(&heap_pod(&config()), options, seed)
}

/// Runs `call`, which must panic; then no record may be locked on `host`'s pod.
#[track_caller]
fn assert_panics_leaving_no_record_locked<R>(host: &Host, call: impl FnOnce() -> R) {
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
    assert!(panicked.is_err(), "the panic reaches the caller");
    assert!(host.inspect().record_census().locked.is_empty());
}

/// `b` writes `k` and `a` reads what it wrote: `k` is neither locked nor stale.
#[track_caller]
fn b_writes_k_and_a_reads_it(a: &Host, b: &Host, tag: u8) {
    b.write(b"k", &value(tag)).unwrap();
    assert_eq!(read(a, b"k"), value(tag));
}

#[test]
fn a_wrap_the_full_log_refuses_leaves_the_record_unlocked() {
    // 8-bit records wrap every 32 writes; a 16-entry log fills while host 1 lags (no
    // pump, no operations). The write whose wrap event cannot be appended must fail
    // cleanly, and once the laggard catches up every host reads and writes the object.
    let pod = heap_pod(&config().record_width_bits(8).log_capacity_entries(16));
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let lagging = Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap();
    a.create(b"k", &value(0)).unwrap();
    // Counter 0 -> 62 in 31 writes (the first allocates the record).
    for round in 1..=31u8 {
        a.write(b"k", &value(round)).unwrap();
    }
    let mut filler = 0;
    let full = loop {
        match a.create(format!("filler-{filler}").as_bytes(), &value(0xee)) {
            Ok(()) => filler += 1,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(
            full,
            Error::LogFull {
                lagging_host: Some(1),
                ..
            }
        ),
        "the log fills behind host 1: {full}"
    );
    // The 32nd write wraps the counter: its wrap event finds no room.
    match a.write(b"k", &value(32)) {
        Err(Error::LogFull {
            lagging_host: Some(1),
            ..
        }) => {}
        other => panic!("expected LogFull naming host 1, got {other:?}"),
    }
    assert!(
        a.inspect().record_census().locked.is_empty(),
        "the refused write left its record locked"
    );
    lagging.replay().unwrap();
    assert_eq!(read(&lagging, b"k"), value(31), "the last complete write");
    lagging.write(b"k", &value(33)).unwrap();
    assert_eq!(read(&a, b"k"), value(33));
    a.write(b"k", &value(34)).unwrap();
    assert_eq!(read(&lagging, b"k"), value(34));
    lagging.delete(b"k").unwrap();
    assert!(matches!(
        a.read(b"k", &mut [0u8; 8]),
        Err(Error::UnknownKey)
    ));
}

#[test]
fn an_update_whose_closure_panics_ends_the_write_and_unlocks_the_record() {
    let (a, b) = two_hosts(3);
    written_k(&a);
    assert_panics_leaving_no_record_locked(&a, || {
        a.update(b"k", |bytes| {
            bytes[..4].copy_from_slice(b"half");
            panic!("the caller's closure fails midway");
        })
    });
    // The object is whole (the write ended with the bytes it had: the closure changed a
    // private copy, so the old value) and every host writes it again.
    assert_eq!(read(&b, b"k"), value(1));
    b_writes_k_and_a_reads_it(&a, &b, 2);
}

#[test]
fn a_write_ticket_dropped_by_a_panic_ends_the_write() {
    let (a, b) = two_hosts(5);
    a.create(b"k", &value(0)).unwrap();
    assert_panics_leaving_no_record_locked(&a, || {
        let ticket = a.write_start(b"k").unwrap();
        ticket.write(0, &value(7)).unwrap();
        panic!("the caller fails before write_end");
    });
    assert_eq!(read(&b, b"k"), value(7), "the written bytes reached memory");
    b.write(b"k", &value(8)).unwrap();
}

#[test]
fn a_panicking_release_hook_leaves_the_record_unlocked() {
    let pod = heap_pod(&config());
    let hook = ReleaseHook::new(|_| panic!("the hook fails"));
    let a = join(&pod, options(7).release_hook(hook));
    let b = join(&pod, options(8));
    written_k(&a);
    for attempt in [
        &(|| a.make_read_shared(b"k").map(drop)) as &dyn Fn() -> Result<(), Error>,
        &|| a.delete(b"k"),
    ] {
        assert_panics_leaving_no_record_locked(&a, attempt);
        b_writes_k_and_a_reads_it(&a, &b, 2);
    }
}

#[test]
fn ticket_reads_and_writes_stay_inside_the_object() {
    let (a, b) = two_hosts(9);
    a.create(b"k", &value(1)).unwrap();
    a.create(b"neighbour", &value(2)).unwrap();
    let ticket = a.write_start(b"k").unwrap();
    match ticket.write(0, &[7u8; 600]) {
        Err(Error::OutsideObject {
            at: 0,
            len: 600,
            object_bytes: SLOT,
        }) => {}
        other => panic!("expected OutsideObject, got {other:?}"),
    }
    assert!(ticket.write(SLOT - 6, &[9u8; 6]).is_ok());
    assert!(ticket.write(SLOT - 5, &[9u8; 6]).is_err());
    assert!(ticket.write(usize::MAX, &[9u8; 2]).is_err(), "no overflow");
    let mut buf = vec![0u8; SLOT];
    ticket.read(0, &mut buf).unwrap();
    assert_eq!(&buf[SLOT - 6..], &[9u8; 6]);
    assert!(ticket.read(1, &mut buf).is_err());
    a.write_end(ticket).unwrap();
    let mut expected = value(1);
    expected[SLOT - 6..].copy_from_slice(&[9u8; 6]);
    assert_eq!(read(&b, b"k"), expected);
    assert_eq!(
        read(&b, b"neighbour"),
        value(2),
        "the next object is untouched"
    );

    let ticket = b.read_start(b"k").unwrap();
    let mut long = vec![0u8; SLOT + 1];
    assert!(matches!(
        ticket.read(0, &mut long),
        Err(Error::OutsideObject { .. })
    ));
    ticket.read(0, &mut buf).unwrap();
    assert!(b.read_end(ticket).unwrap());
    assert_eq!(buf, expected);
}

#[test]
fn a_deallocating_host_drops_its_own_old_lines_of_the_object() {
    // Host a caches version 1; b writes version 2 (a's host counter is now stale, and
    // nothing tells a yet). a then deallocates the record: read-shared objects are read
    // with no check, so the replay of a's own dealloc must drop a's old lines.
    let (a, b) = two_hosts(11);
    written_k(&a);
    assert_eq!(read(&a, b"k"), value(1));
    b.write(b"k", &value(2)).unwrap();
    assert!(a.make_read_shared(b"k").unwrap());
    assert_eq!(read(&a, b"k"), value(2), "a served its stale lines");
}

#[test]
fn a_created_object_is_read_whole_on_another_host() {
    // The creator's bytes must be in memory, not only in its cache, before its create
    // event: another host reads them from memory as soon as it replays the event.
    let (a, b) = two_hosts(13);
    for i in 0..8u8 {
        let key = format!("k{i}");
        a.create(key.as_bytes(), &value(i)).unwrap();
        assert_eq!(read(&b, key.as_bytes()), value(i), "object {i}");
    }
}

/// A release hook that panics in the background reclaimer (on the pump's thread) killed
/// the pump: the host replayed, beat and served nothing more, yet lived (on this machine
/// nobody declares it dead), and the log's head would have waited for it for good. The
/// pump now counts the panic as a background error and goes on.
#[test]
fn a_release_hook_that_panics_in_the_reclaimer_does_not_stop_the_pump() {
    let pod = heap_pod(&config().scr_bytes(4096));
    let hook = ReleaseHook::new(|_| panic!("the hook fails"));
    let pumped = options(30)
        .record_watermark(0.5)
        .release_hook(hook)
        .pump_interval(Some(Duration::from_millis(1)));
    let a = join(&pod, pumped);
    // b's creates wait for a's replay when the log is full, and a's pump is slow here: its
    // reclaimer panics in every round, and a panic captures a backtrace when
    // RUST_BACKTRACE is set (at 200 ms, b's creates ran out of log room in 3 of 5 runs
    // on a loaded machine).
    let b = join(&pod, options(31).wait_limit(Duration::from_secs(5)));
    // More records in use than a's watermark allows: a's reclaimer calls the hook.
    let (_, records) = b.inspect().records_in_use();
    for i in 0..records * 3 / 4 {
        let key = format!("o{i}");
        b.create(key.as_bytes(), &value(1)).unwrap();
        b.write(key.as_bytes(), &value(2)).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let panicked = |a: &Host| {
        matches!(
            a.inspect().background_errors().last,
            Some(Error::BackgroundPanicked {
                task: "reclaimer",
                ..
            })
        )
    };
    while !panicked(&a) {
        assert!(
            std::time::Instant::now() < deadline,
            "the reclaimer never ran the hook: {:?}",
            a.inspect().background_errors()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The reclaimer goes on trying (and its hook panicking): a record is locked for a
    // moment in each try, and unlocked after it; none stays locked.
    while !a.inspect().record_census().locked.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "a record stays locked: {:?}",
            a.inspect().record_census().locked
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The pump goes on: it beats, and replays what b appends.
    let (beat, applied) = (a.inspect().heartbeat(), a.inspect().applied_position());
    b.create(b"later", &value(3)).unwrap();
    while a.inspect().heartbeat() == beat || a.inspect().applied_position() <= applied {
        assert!(
            std::time::Instant::now() < deadline,
            "the pump stopped after the panic"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
