//! Windows between two protocol steps, stretched on purpose: a test's hook runs at a
//! chosen [`Point`] (other hosts' operations, a signal to another thread) and forced
//! faults make a chosen log append fail. Built with the `chaos` feature only (`cargo
//! xtask mutants` and `cargo xtask stress --chaos` turn it on); each test names the
//! defect it would catch.
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, named_records, read, value, written_k, SLOT};
use megalon_core::chaos::{self, Fault, Point};
use megalon_core::{Error, Host, HostOptions, Join, MemoryKind, Pod, ReadTicket};

const WAIT: Duration = Duration::from_secs(10);

fn pod(record_width_bits: u32, scr_bytes: u64) -> Arc<Pod> {
    let config = config()
        .scr_bytes(scr_bytes)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096)
        .record_width_bits(record_width_bits);
    heap_pod(&config)
}

fn options() -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(7))
        .record_watermark(1.0)
        .wait_limit(Duration::from_millis(500))
}

/// A host that lives as long as the test binary, so that hooks (which are `'static`)
/// and tickets moved into them can hold it. No pump: it replays only in its operations.
fn leak(pod: &Arc<Pod>, id: u32, options: HostOptions) -> &'static Host {
    let host = Host::join(pod, Join::As(id), options.pump_interval(None)).expect("join");
    Box::leak(Box::new(host))
}

/// A [`leak`]ed host on real memory: another host's copy sees its stores as they happen.
fn on_hardware(pod: &Arc<Pod>, id: u32) -> &'static Host {
    leak(pod, id, options().memory(MemoryKind::Hardware))
}

/// Hosts 0 and 1, [`on_hardware`], on a new pod of `record_width_bits`-bit records.
fn two_on_hardware(record_width_bits: u32) -> (&'static Host, &'static Host) {
    let pod = pod(record_width_bits, 64 << 10);
    (on_hardware(&pod, 0), on_hardware(&pod, 1))
}

/// Defect 1 of issue 13: `read_end` checked the log first and the counter second. A
/// reader's copy is torn by a write; between its two checks the writer ends that write and
/// makes 31 more, a full cycle of a 6-bit counter (its wrap event appended after the
/// reader's tail check). Checking the counter first sees the write in progress; checking
/// the log second sees the wrap event.
#[test]
fn a_full_counter_cycle_between_the_checks_of_read_end_is_caught() {
    let (writer, reader) = two_on_hardware(8);
    written_k(writer);
    let ticket = reader.read_start(b"k").unwrap();
    let write = writer.write_start(b"k").unwrap();
    write.write(0, &value(2)[..SLOT / 2]).unwrap();
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    let mut torn = value(2)[..SLOT / 2].to_vec();
    torn.extend_from_slice(&value(1)[SLOT / 2..]);
    assert_eq!(copy, torn, "the copy is torn");
    let mut write = Some(write);
    let accepted = chaos::with_hook(
        move |point| {
            if point == Point::ReadEndBetweenChecks {
                if let Some(write) = write.take() {
                    write.write(SLOT / 2, &value(2)[SLOT / 2..]).unwrap();
                    writer.write_end(write).unwrap();
                    for round in 3..34u8 {
                        writer.write(b"k", &value(round)).unwrap();
                    }
                }
            }
        },
        || reader.read_end(ticket).unwrap(),
    );
    assert_eq!(
        writer.events().wraps,
        1,
        "the cycle wrapped the counter once"
    );
    assert!(!accepted, "read_end accepted a torn copy");
    assert_eq!(read(reader, b"k"), value(33));
}

/// Defect 2 of issue 13, on each path that holds a record's lock and appends: refused
/// (nothing reaches the log) the record is restored; unconfirmed (the entry is in the log
/// but its outcome did not reach the appender) it stays locked until replay applies the
/// entry, then is freed if the event won.
#[test]
fn a_dealloc_or_delete_whose_append_fails_never_leaves_the_record_locked() {
    let pod = pod(32, 64 << 10);
    let a = leak(&pod, 0, options());
    let b = leak(&pod, 1, options());
    written_k(a);
    let (in_use, _) = a.inspect().records_in_use();
    assert_eq!(in_use, 1);

    chaos::fail_next_appends(&[Fault::Refuse]);
    assert!(matches!(
        b.make_read_shared(b"k"),
        Err(Error::InjectedFault { .. })
    ));
    assert!(b.inspect().record_census().locked.is_empty(), "restored");
    a.write(b"k", &value(2)).unwrap();

    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    assert!(matches!(
        b.make_read_shared(b"k"),
        Err(Error::InjectedFault { .. })
    ));
    let census = b.inspect().record_census();
    assert_eq!(census.locked.len(), 1, "held until the dealloc is decided");
    assert_eq!(b.inspect().settle_pending().unwrap(), 0);
    let census = b.inspect().record_census();
    assert!(
        census.locked.is_empty() && census.in_use.is_empty(),
        "{census:?}"
    );
    assert_eq!(read(a, b"k"), value(2));
    a.write(b"k", &value(3)).unwrap();

    chaos::fail_next_appends(&[Fault::Refuse]);
    assert!(matches!(b.delete(b"k"), Err(Error::InjectedFault { .. })));
    assert!(b.inspect().record_census().locked.is_empty(), "restored");
    assert_eq!(read(b, b"k"), value(3));

    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    assert!(matches!(b.delete(b"k"), Err(Error::InjectedFault { .. })));
    assert_eq!(b.inspect().record_census().locked.len(), 1);
    assert_eq!(b.inspect().settle_pending().unwrap(), 0);
    let census = b.inspect().record_census();
    assert!(
        census.locked.is_empty() && census.in_use.is_empty(),
        "{census:?}"
    );
    assert!(matches!(
        a.read(b"k", &mut [0u8; 4]),
        Err(Error::UnknownKey)
    ));
}

/// A write whose alloc event is refused, or left unconfirmed, frees its claimed record
/// (refused, or lost) or keeps it for the object (unconfirmed and won).
#[test]
fn an_alloc_whose_append_fails_frees_or_keeps_its_record_exactly() {
    let pod = pod(32, 64 << 10);
    let a = leak(&pod, 0, options());
    a.create(b"k", &value(0)).unwrap();
    chaos::fail_next_appends(&[Fault::Refuse]);
    assert!(matches!(
        a.write(b"k", &value(1)),
        Err(Error::InjectedFault { .. })
    ));
    assert_eq!(
        a.inspect().records_in_use().0,
        0,
        "the claimed record is free again"
    );
    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    assert!(matches!(
        a.write(b"k", &value(1)),
        Err(Error::InjectedFault { .. })
    ));
    assert_eq!(a.inspect().settle_pending().unwrap(), 0);
    let record = a.lookup(b"k").unwrap().expect("object").record;
    assert!(record.is_some(), "the alloc applied");
    assert_eq!(a.inspect().record_census().in_use, vec![record.unwrap()]);
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().records_in_use().0, 1);
}

/// Waits for one message, failing the test (not hanging it) if none comes.
fn expect(from: &Receiver<&'static str>, what: &str) {
    let got = from
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("no {what}"));
    assert_eq!(got, what);
}

/// Copies the object through `ticket` and ends the read: the copy, and whether `read_end`
/// accepted it.
fn copy_and_end(reader: &Host, ticket: ReadTicket<'_>) -> (Vec<u8>, bool) {
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    (copy, reader.read_end(ticket).unwrap())
}

/// A thread that runs [`stop_once_at`]`(point, tell, until, operation)`.
fn spawn_stopping_once_at<R: Send + 'static>(
    point: Point,
    tell: (Sender<&'static str>, &'static str),
    until: Option<(Receiver<&'static str>, &'static str)>,
    operation: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<R> {
    std::thread::spawn(move || stop_once_at(point, tell, until, operation))
}

/// Runs `operation` with a hook that, the first time the operation reaches `point`, sends
/// the message of `tell` and then, if `until` names a message, waits for it.
fn stop_once_at<R>(
    point: Point,
    (to, told): (Sender<&'static str>, &'static str),
    until: Option<(Receiver<&'static str>, &'static str)>,
    operation: impl FnOnce() -> R,
) -> R {
    let mut stopped = false;
    chaos::with_hook(
        move |at| {
            if at == point && !stopped {
                stopped = true;
                to.send(told).unwrap();
                if let Some((from, what)) = &until {
                    expect(from, what);
                }
            }
        },
        operation,
    )
}

/// Defect 3 of issue 13: an allocator that lost in the log freed its claimed record with
/// a plain store. Host s, acting on an entry that still names the record for object y
/// (deallocated meanwhile), locks the record in the window between the loser's claim and
/// its free; the store then unlocks s's lock under it. With a CAS the free waits for s
/// to back out, and nothing is leaked.
#[test]
fn a_losing_allocator_frees_its_record_by_cas_under_a_stale_writers_lock() {
    // Few enough records to fill: then y's, once deallocated, is the only free one, and
    // the losing allocator must claim it.
    let pod = pod(32, 4096);
    let s = leak(&pod, 0, options());
    let a = leak(&pod, 1, options());
    let b = leak(&pod, 2, options());
    b.create(b"y", &value(0)).unwrap();
    s.write(b"y", &value(1)).unwrap();
    let record_y = s.lookup(b"y").unwrap().unwrap().record.unwrap();
    let (_, records) = b.inspect().records_in_use();
    for i in 1..records {
        let key = format!("o{i}");
        b.create(key.as_bytes(), &value(2)).unwrap();
        b.write(key.as_bytes(), &value(3)).unwrap();
    }
    assert_eq!(b.inspect().records_in_use(), (records, records));
    b.create(b"z", &value(4)).unwrap();

    let (to_s, s_hears): (Sender<&'static str>, _) = channel();
    let (to_a, a_hears) = channel();
    let (to_main, main_hears) = channel();
    let allocator = std::thread::spawn(move || {
        expect(&a_hears, "start");
        let mut step = 0;
        let to_s_in_hook = to_s.clone();
        let a_in_hook = a_hears;
        chaos::with_hook(
            move |point| match (step, point) {
                // a has claimed y's old record: b's alloc of z lands first in the log.
                (0, Point::AllocAfterClaim) => {
                    let census = a.inspect().record_census();
                    assert!(
                        census.in_use.contains(&record_y),
                        "a claimed y's old record"
                    );
                    b.write(b"z", &value(5)).unwrap();
                    step = 1;
                }
                // a lost: before it frees the record, let s lock it.
                (1, Point::AllocLostBeforeFree) => {
                    to_s_in_hook.send("go").unwrap();
                    expect(&a_in_hook, "locked");
                    step = 2;
                }
                _ => {}
            },
            || a.write(b"z", &value(6)).unwrap(),
        );
        to_s.send("freed").unwrap();
    });
    let stale = std::thread::spawn(move || {
        let mut step = 0;
        let (to_a, to_main) = (to_a.clone(), to_main.clone());
        chaos::with_hook(
            move |point| match (step, point) {
                // s looked y up (record_y): now y's record goes, and a claims it.
                (0, Point::WriteBeforeLock) => {
                    assert!(b.make_read_shared(b"y").unwrap());
                    let census = b.inspect().record_census();
                    assert_eq!(census.in_use.len() as u64, records - 1);
                    assert!(!census.in_use.contains(&record_y), "y's record is free");
                    to_a.send("start").unwrap();
                    expect(&s_hears, "go");
                    step = 1;
                }
                // s locked a's claimed record, on its stale entry.
                (1, Point::WriteAfterLock) => {
                    to_main.send("s locked").unwrap();
                    to_a.send("locked").unwrap();
                    expect(&s_hears, "freed");
                    step = 2;
                }
                _ => {}
            },
            || s.write(b"y", &value(7)).unwrap(),
        );
    });
    expect(&main_hears, "s locked");
    allocator.join().expect("the allocator");
    stale
        .join()
        .expect("the stale writer backs out and writes y");
    for host in [s, a, b] {
        assert_eq!(host.inspect().settle_pending().unwrap(), 0);
    }
    let census = b.inspect().record_census();
    assert!(census.locked.is_empty(), "{census:?}");
    assert_eq!(
        census.in_use,
        named_records(b),
        "records in use are those the index names"
    );
    assert_eq!(read(b, b"y"), value(7));
    assert_eq!(read(s, b"z"), value(6));
}

/// Found by the chaos stress: a host's replay of its own delete gave the object's slot to
/// its pool before advancing `ctail`, and another of its threads created an object in
/// that slot while a reader on another host was still copying the deleted object. The
/// reader's tail check, not yet covering the delete, accepted the new object's bytes.
/// Slots now join the pool only once `ctail` covers the events that free them.
#[test]
fn a_deleted_objects_slot_is_not_written_before_ctail_covers_the_delete() {
    // Real memory: the reader copies what the creator wrote as soon as it is written.
    let (a, reader) = two_on_hardware(32);
    a.create(b"gone", &value(1)).unwrap();
    a.create(b"other", &value(2)).unwrap();
    let ticket = reader.read_start(b"gone").unwrap();

    let (to_main, main_hears) = channel();
    let (to_deleter, deleter_hears) = channel();
    let deleter = spawn_stopping_once_at(
        Point::ReplayBeforeCtail,
        (to_main.clone(), "delete applied"),
        Some((deleter_hears, "go on")),
        move || a.delete(b"gone").unwrap(),
    );
    expect(&main_hears, "delete applied");
    let creator = spawn_stopping_once_at(
        Point::CreateBeforeEvent,
        (to_main, "bytes written"),
        None,
        move || a.create(b"new", &value(9)).unwrap(),
    );
    expect(&main_hears, "bytes written");
    let (copy, accepted) = copy_and_end(reader, ticket);
    to_deleter.send("go on").unwrap();
    deleter.join().expect("the deleter");
    creator.join().expect("the creator");
    assert!(
        !accepted || copy == value(1),
        "a read of the deleted object accepted another object's bytes"
    );
    assert_eq!(read(reader, b"new"), value(9));
    assert_eq!(read(reader, b"other"), value(2));
}

/// The window the event check after a writer's lock closes (until now caught only by
/// chance in the stress): between writer s's lookup of y (record r) and its lock, y's
/// record is deallocated and r allocated to another object q, unchanged. s's CAS then
/// succeeds on a record that guards q, and s writes y, now read-shared, under it: a reader
/// of y overlapping that write sees no event and accepts a torn copy. Holding the lock, s
/// must catch up, see y's dealloc, and back out.
#[test]
fn a_writer_that_locks_a_record_reassigned_since_its_lookup_backs_out() {
    let pod = pod(32, 4096);
    let (s, b, reader) = (
        on_hardware(&pod, 0),
        on_hardware(&pod, 1),
        on_hardware(&pod, 2),
    );
    b.create(b"y", &value(0)).unwrap();
    b.write(b"y", &value(1)).unwrap();
    let (_, records) = b.inspect().records_in_use();
    for i in 1..records {
        let key = format!("o{i}");
        b.create(key.as_bytes(), &value(2)).unwrap();
        b.write(key.as_bytes(), &value(3)).unwrap();
    }
    b.create(b"q", &value(4)).unwrap();

    let (to_main, main_hears) = channel();
    let (to_s_lock, s_lock_hears) = channel();
    let (to_s_finish, s_finish_hears) = channel();
    let (to_b, b_hears) = channel();
    let writer_s = std::thread::spawn({
        let to_main = to_main.clone();
        move || {
            let tell = (to_main.clone(), "s looked y up");
            let until = Some((s_lock_hears, "lock"));
            let ticket = stop_once_at(Point::WriteBeforeLock, tell, until, || {
                s.write_start(b"y").unwrap()
            });
            ticket.write(0, &value(7)[..SLOT / 2]).unwrap();
            to_main.send("half written").unwrap();
            expect(&s_finish_hears, "finish");
            ticket.write(SLOT / 2, &value(7)[SLOT / 2..]).unwrap();
            s.write_end(ticket).unwrap();
        }
    });
    expect(&main_hears, "s looked y up");
    assert!(b.make_read_shared(b"y").unwrap());
    let writer_b = spawn_stopping_once_at(
        Point::WriteBeforeLock,
        (to_main, "q allocated"),
        Some((b_hears, "lock")),
        move || b.write(b"q", &value(5)).unwrap(),
    );
    expect(&main_hears, "q allocated");
    let ticket = reader.read_start(b"y").unwrap();
    to_s_lock.send("lock").unwrap();
    expect(&main_hears, "half written");
    let (copy, accepted) = copy_and_end(reader, ticket);
    to_s_finish.send("finish").unwrap();
    to_b.send("lock").unwrap();
    writer_s.join().expect("writer s");
    writer_b.join().expect("writer b");
    assert!(
        !accepted || copy == value(1) || copy == value(7),
        "a read of y accepted a torn copy"
    );
    assert_eq!(read(reader, b"y"), value(7));
    assert_eq!(read(reader, b"q"), value(5));
}

/// The same window, the events applied by the writer's own host: between writer s's
/// lookup of y (record r, slot p) and its lock, another host deletes y and creates it
/// again in another slot, and allocates r to the new y (unchanged since: its word is
/// the one s loaded); then another thread of s replays all of it. s's CAS succeeds, and
/// its catch-up holding the lock finds nothing new: only the index's version at s's
/// lookup (not at its lock) tells that the index changed since, and the stamp check
/// then sends s back. The defect it would catch: s writes the new y's value into p, the
/// deleted y's slot, and a read of y never sees it.
#[test]
fn a_writer_whose_own_host_applies_a_delete_and_create_of_its_key_before_its_lock_backs_out() {
    let pod = pod(32, 4096);
    let (s, b) = (leak(&pod, 0, options()), leak(&pod, 1, options()));
    b.create(b"y", &value(0)).unwrap();
    b.write(b"y", &value(1)).unwrap();
    let old = s.lookup(b"y").unwrap().unwrap();
    fill_records(b);

    let (to_main, main_hears) = channel();
    let (to_s, s_hears) = channel();
    let (to_b, b_hears) = channel();
    let writer_s = spawn_stopping_once_at(
        Point::WriteBeforeLock,
        (to_main.clone(), "s looked y up"),
        Some((s_hears, "lock")),
        move || s.write(b"y", &value(7)).unwrap(),
    );
    expect(&main_hears, "s looked y up");
    b.delete(b"y").unwrap();
    // The deleted y's slot goes to another object: the new y is elsewhere.
    b.create(b"taker", &value(2)).unwrap();
    b.create(b"y", &value(8)).unwrap();
    let writer_b = spawn_stopping_once_at(
        Point::WriteBeforeLock,
        (to_main, "new y allocated"),
        Some((b_hears, "lock")),
        move || b.write(b"y", &value(5)).unwrap(),
    );
    expect(&main_hears, "new y allocated");
    s.replay().unwrap();
    let new = s.lookup(b"y").unwrap().unwrap();
    assert_eq!(
        new.record, old.record,
        "the new y has the deleted y's record"
    );
    assert_ne!(new.slot, old.slot, "the new y is in another slot");
    to_s.send("lock").unwrap();
    writer_s.join().expect("writer s");
    assert_eq!(read(b, b"y"), value(7), "s's write of y reached y");
    to_b.send("lock").unwrap();
    writer_b.join().expect("writer b");
    assert_eq!(read(s, b"y"), value(5));
    assert!(b.inspect().record_census().locked.is_empty());
}

/// A record of 4 bits has a counter of 2: two writes bring it back to where it was (the
/// second one's wrap event says so). Between s's lookup of y (its host counter known: s
/// has just read y, and caches its lines) and its lock, another host writes y twice;
/// s's CAS then succeeds, its own write does not wrap the counter (no event of its own
/// to wait for), and only the event check holding the lock tells s that its entry is
/// stale. Without it, s's update skips the invalidation its stale host counter says it
/// need not do, and changes y as it was before those writes (still in its cache): they
/// are lost.
#[test]
fn an_update_whose_lookup_a_full_counter_cycle_follows_starts_from_its_end() {
    let pod = pod(4, 64 << 10);
    // No random eviction: s's lines of y stay cached until something drops them.
    let quiet = options().memory(common::simulated(7, 512, 0));
    let (s, b) = (leak(&pod, 0, quiet), leak(&pod, 1, options()));
    b.create(b"y", &value(0)).unwrap();
    b.write(b"y", &value(1)).unwrap();
    b.write(b"y", &value(2)).unwrap();
    assert_eq!(read(s, b"y"), value(2));

    let (to_main, main_hears) = channel();
    let (to_s, s_hears) = channel();
    let updater = spawn_stopping_once_at(
        Point::WriteBeforeLock,
        (to_main, "s looked y up"),
        Some((s_hears, "lock")),
        move || {
            s.update(b"y", |bytes| {
                let seen = bytes.to_vec();
                bytes.copy_from_slice(&value(7));
                seen
            })
            .unwrap()
            .0
        },
    );
    expect(&main_hears, "s looked y up");
    b.write(b"y", &value(4)).unwrap();
    b.write(b"y", &value(5)).unwrap();
    to_s.send("lock").unwrap();
    let seen = updater.join().expect("the updater");
    assert_eq!(
        seen,
        value(5),
        "the update started from y before b's writes"
    );
    assert_eq!(read(b, b"y"), value(7));
}

/// A read of `read_many` whose check fails starts over alone, and the bound counts the
/// failed try: with `max_retries` 0 it gives up at once, as a lone read does; with 1 it
/// reads again once and answers one retry. The defect: the read alone started its own
/// count, one more try than the host allows.
#[test]
fn a_read_many_read_that_a_write_overlaps_starts_over_within_the_bound() {
    for max_retries in [0, 1] {
        let pod = pod(32, 64 << 10);
        let writer = on_hardware(&pod, 0);
        let reader = leak(
            &pod,
            1,
            options()
                .memory(MemoryKind::Hardware)
                .max_retries(max_retries),
        );
        written_k(writer);
        let mut pending_write = Some(value(2));
        let answer = chaos::with_hook(
            move |point| {
                if point == Point::ReadBeforeEnd {
                    if let Some(bytes) = pending_write.take() {
                        writer.write(b"k", &bytes).unwrap();
                    }
                }
            },
            || {
                let mut buf = vec![0u8; SLOT];
                let answer = reader.read_many(&mut [(&b"k"[..], &mut buf[..])]).remove(0);
                answer.map(|done| (done, buf))
            },
        );
        match max_retries {
            0 => assert!(
                matches!(answer, Err(Error::RetriesExhausted { retries: 0 })),
                "{answer:?}"
            ),
            _ => {
                let (done, bytes) = answer.unwrap();
                assert_eq!(done.retries, 1);
                assert_eq!(bytes, value(2), "the read after the write sees it");
            }
        }
    }
}

/// Hosts 0 and 1 on a new pod with local partitions after two accesses, and `k` (value
/// 1), created by host 1 and read once by host 0.
fn k_read_once_by_0_with_partitions() -> (&'static Host, &'static Host) {
    let pod = heap_pod(&config().local_partitions(2));
    let a = leak(&pod, 0, options());
    let b = leak(&pod, 1, options());
    b.create(b"k", &value(1)).unwrap();
    assert_eq!(read(a, b"k"), value(1));
    (a, b)
}

/// A move to a host's DRAM whose append published its entry but did not learn its
/// outcome (unconfirmed, as a stalled replay makes it) orphans the object, and an orphan
/// goes back to CXL without its bytes (the record was let go, so CXL may be newer). The
/// event applied meanwhile (another host's replay moved `ctail` over it, and the mover's
/// host caught up): a write of another thread of that host found the object in its DRAM,
/// wrote it there and answered `Ok`, and the orphaning then lost it. Objects arrive in a
/// state that reads may use and writes wait out, until the mover knows whether its move
/// won.
#[test]
fn a_local_write_is_not_lost_to_a_move_whose_append_failed() {
    let (a, b) = k_read_once_by_0_with_partitions();
    let acked = std::rc::Rc::new(std::cell::RefCell::new(None));
    let answer = std::rc::Rc::clone(&acked);
    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    chaos::with_hook(
        move |point| {
            if point == Point::MoveHereAfterAppend && answer.borrow().is_none() {
                // b replays the published move: `ctail` covers it.
                b.replay().unwrap();
                // A write of another thread of a, run here at that moment: its catch-up
                // applies the move.
                *answer.borrow_mut() = Some(a.write(b"k", &value(9)));
            }
        },
        // a's second access in a row moves k to a's DRAM (its append unconfirmed).
        || {
            let _ = a.read(b"k", &mut [0u8; SLOT]);
        },
    );
    let acked = acked
        .borrow_mut()
        .take()
        .expect("the move reached the point");
    // Run on the mover's own thread, the write can only wait out its limit; had it been
    // answered `Ok`, its value must stay.
    let expected = match acked {
        Ok(_) => value(9),
        Err(Error::LocalObjectBusy { .. }) => value(1),
        Err(other) => panic!("the write failed otherwise: {other:?}"),
    };
    assert_eq!(
        read(a, b"k"),
        expected,
        "a reads back what was acknowledged"
    );
    assert_eq!(read(b, b"k"), expected, "b reads what was acknowledged");
}

/// A move back whose `MoveToCxl` was unconfirmed (in the log, applied later) left its
/// object in the partition, leaving, for good: nothing took it out once the event
/// applied, and a move here refuses a slot that holds an object, so the object never
/// moved to that host again.
#[test]
fn a_move_back_whose_append_failed_does_not_keep_the_slot_from_moving_again() {
    let (a, _b) = k_read_once_by_0_with_partitions();
    read(a, b"k");
    assert_eq!(a.lookup(b"k").unwrap().unwrap().local_owner, Some(a.id()));
    assert_eq!(a.inspect().local_objects(), (1, 0));
    a_move_back_of_k_unconfirmed_then_k_moves_again(a);
}

/// `a` holds `k` in its DRAM: a ticket's write moves it back first, and that move back's
/// append is unconfirmed (applied by the replay after it). Two accesses in a row then
/// move `k` to `a`'s DRAM again, and the partition holds it alone.
fn a_move_back_of_k_unconfirmed_then_k_moves_again(a: &Host) {
    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    let moved_back = a.write_start(b"k").map(drop);
    chaos::clear_forced_faults();
    assert!(moved_back.is_err(), "the move back's append is unconfirmed");
    a.replay().unwrap();
    assert_eq!(a.lookup(b"k").unwrap().unwrap().local_owner, None);
    read(a, b"k");
    read(a, b"k");
    assert_eq!(
        a.lookup(b"k").unwrap().unwrap().local_owner,
        Some(a.id()),
        "two accesses in a row move k to a's DRAM again"
    );
    assert_eq!(a.inspect().local_objects(), (1, 0));
}

/// Every record of `b`'s pod in use but the ones already taken: objects `o1`, `o2`, ...
/// created and written by `b`.
fn fill_records(b: &Host) {
    let (in_use, records) = b.inspect().records_in_use();
    for i in in_use..records {
        let key = format!("o{i}");
        b.create(key.as_bytes(), &value(2)).unwrap();
        b.write(key.as_bytes(), &value(3)).unwrap();
    }
    assert_eq!(b.inspect().records_in_use(), (records, records));
}

/// What a release hook heard: the key, the record, that record's owner then, and
/// whether a write of `y` inside the hook went through.
type Heard = (Vec<u8>, u32, Option<Vec<u8>>, bool);

/// The scene of a release on a stale lookup: host b creates and writes `y` and fills the
/// record array; host d (whose release hook notes what it hears, and, if
/// `write_y_in_hook`, tries a write of `y` on b inside the hook) runs `release` of `y`.
/// Right after d's tail check read `ctail`, b makes `y` read-shared and writes `q`, which
/// takes `y`'s old record. Returns `release`'s answer, what the hook heard, and b and d.
fn release_on_a_stale_lookup<T>(
    write_y_in_hook: bool,
    release: impl FnOnce(&'static Host) -> T,
) -> (T, Vec<Heard>, &'static Host, &'static Host) {
    let pod = pod(32, 4096);
    let b_for_hook: Arc<std::sync::OnceLock<&'static Host>> = Arc::default();
    let heard: Arc<std::sync::Mutex<Vec<Heard>>> = Arc::default();
    let hook = {
        let (heard, b) = (Arc::clone(&heard), Arc::clone(&b_for_hook));
        megalon_core::ReleaseHook::new(move |releasing: &megalon_core::Releasing<'_>| {
            let (key, record) = (releasing.key().to_vec(), releasing.record());
            let b = b.get().expect("b joined");
            let owner = b.record_owner(record).unwrap();
            let wrote = write_y_in_hook && key == b"y" && b.write(b"y", &value(9)).is_ok();
            heard.lock().unwrap().push((key, record, owner, wrote));
            true
        })
    };
    let d = leak(&pod, 0, options().release_hook(hook));
    let b = leak(&pod, 1, options());
    b_for_hook.set(b).unwrap();
    b.create(b"y", &value(0)).unwrap();
    b.write(b"y", &value(1)).unwrap();
    let record_y = b.lookup(b"y").unwrap().unwrap().record.unwrap();
    fill_records(b);
    assert_eq!(d.lookup(b"y").unwrap().unwrap().record, Some(record_y));
    // An entry for d's next catch-up to apply, so that its replay reaches the point.
    b.create(b"q", &value(4)).unwrap();
    let mut once = true;
    let answer = chaos::with_hook(
        move |point| {
            // d's tail check has read `ctail`: what b does now, d's lookup does not see.
            if point == Point::ReplayBeforeCtail && std::mem::take(&mut once) {
                assert!(b.make_read_shared(b"y").unwrap());
                b.write(b"q", &value(5)).unwrap();
                assert_eq!(
                    b.lookup(b"q").unwrap().unwrap().record,
                    Some(record_y),
                    "q has y's old record"
                );
            }
        },
        || release(d),
    );
    let heard = std::mem::take(&mut *heard.lock().unwrap());
    (answer, heard, b, d)
}

/// Checks that every release the hook heard of was of the record's owner, then that no
/// record is left locked and `q` reads what b wrote.
fn heard_only_own_records(heard: &[Heard], b: &Host, d: &Host) {
    for (key, record, owner, wrote) in heard {
        assert_eq!(
            owner.as_deref(),
            Some(key.as_slice()),
            "the hook heard that {:?} loses record {record}, whose owner is {:?} (a \
             write of y inside the hook went through: {wrote})",
            String::from_utf8_lossy(key),
            owner
                .as_ref()
                .map(|o| String::from_utf8_lossy(o).into_owned()),
        );
    }
    assert!(b.inspect().record_census().locked.is_empty());
    assert_eq!(read(d, b"q"), value(5));
}

/// A deallocation (`make_read_shared`, the reclaimer) looks the object's record up, then
/// locks it: between the two, the record was deallocated by another host and allocated
/// to another object. Its lock then succeeded on the other object's record and it told
/// its release hook that `y` loses that record, locked ("no write can start on it until
/// the hook returns"), while `y` had no lock at all: a write of `y` went through inside
/// the hook. (The dealloc event itself was ignored by replay, so the core stayed
/// consistent; the page cache's hook, which writes a dirty page back and clears the
/// record's dirty bit, would write `y`'s old slot, now another page's, to `y`'s offset,
/// and clear the other page's dirty bit: its write never reached the file.) Holding the
/// lock, a deallocation now checks that the object still has the record.
#[test]
fn a_deallocation_on_a_stale_lookup_tells_the_hook_only_of_the_objects_own_record() {
    let (answer, heard, b, d) = release_on_a_stale_lookup(true, |d| d.make_read_shared(b"y"));
    assert!(
        matches!(answer, Ok(false)),
        "nothing to deallocate: {answer:?}"
    );
    heard_only_own_records(&heard, b, d);
}

/// The same window for a delete (`lock_for_delete`): it looks `y`'s record up, then locks
/// it; between the two, another host deallocated `y` and gave the record to `q`. Holding
/// the lock, the delete checks that no event about `y` was applied since its lookup
/// (`still_current`) before its release hook hears of the record: without that check the
/// hook hears that `y` loses `q`'s record (the delete event itself then loses in the log,
/// and the delete starts over on the read-shared `y`).
#[test]
fn a_delete_on_a_stale_lookup_tells_the_hook_only_of_the_objects_own_record() {
    let (answer, heard, b, d) = release_on_a_stale_lookup(false, |d| d.delete(b"y"));
    assert!(answer.is_ok(), "y deleted: {answer:?}");
    heard_only_own_records(&heard, b, d);
    assert!(d.lookup(b"y").unwrap().is_none());
}

/// A donor whose free slots are not one range grants them as several `GrantSlots`
/// events; the `n`-th append of its serving fails (refused, or published unconfirmed).
/// Every slot is still counted once: the requester gets exactly the three slots (served
/// by later rounds, asking again), no fourth, and the donor keeps none. (When the first
/// one's append was refused, the grant returned at once: the other ranges, already taken
/// from the donor's pool, were neither granted nor put back, slots lost to the pod for
/// good, the replicated counts still naming the donor as holding them.)
#[test]
fn a_grant_failing_part_way_loses_no_slot_and_doubles_none() {
    for fault in [Fault::Refuse, Fault::Unconfirmed] {
        for n in 0..3 {
            let config = megalon_core::PodConfig::new()
                .scr_bytes(64 << 10)
                .lnr_bytes(512 * 64 + 64 * 256)
                .slot_size_bytes(256)
                .max_key_bytes(16)
                .log_capacity_entries(512)
                .max_hosts(2)
                .join_area_bytes(0);
            let pod = common::heap_pod(&config);
            let slot_count = pod.layout().slot_count;
            let a = Host::join(&pod, Join::As(0), HostOptions::new().pump_interval(None)).unwrap();
            let b = Host::join(
                &pod,
                Join::As(1),
                HostOptions::new()
                    .pump_interval(None)
                    .wait_limit(Duration::from_millis(50)),
            )
            .unwrap();
            for i in 0..slot_count {
                a.create(format!("a{i}").as_bytes(), b"x").unwrap();
            }
            for i in [1, 5, 9] {
                a.delete(format!("a{i}").as_bytes()).unwrap();
            }
            a.replay().unwrap();
            assert_eq!(a.inspect().free_slots(), 3);
            assert!(matches!(
                b.create(b"b0", b"y"),
                Err(Error::SlotsExhausted { .. })
            ));
            let served = common::with_append_failing(n, fault, || a.replay());
            assert!(
                served.is_err(),
                "{fault:?} at {n}: the fault hit a grant: {served:?}"
            );
            let mut made = 0;
            for i in 0..5 {
                let key = format!("b{i}");
                let mut result = b.create(key.as_bytes(), b"y");
                for _ in 0..6 {
                    if !matches!(result, Err(Error::SlotsExhausted { .. })) {
                        break;
                    }
                    a.replay().unwrap();
                    b.replay().unwrap();
                    result = b.create(key.as_bytes(), b"y");
                }
                if result.is_ok() {
                    made += 1;
                }
            }
            a.replay().unwrap();
            b.replay().unwrap();
            assert_eq!(
                (made, a.inspect().free_slots(), b.inspect().free_slots()),
                (3, 0, 0),
                "{fault:?} at grant append {n}"
            );
        }
    }
}

/// A move here whose append was unconfirmed orphans the object; its event applied (the
/// move won), and the next access moved it back, unconfirmed too, applied later. The
/// orphan stayed in the partition for good: a move here refused the slot (only a leaving
/// leftover was taken out), so the object never moved to that host again.
#[test]
fn an_orphan_whose_move_back_failed_does_not_keep_the_slot_from_moving_again() {
    let (a, _b) = k_read_once_by_0_with_partitions();
    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    // a's second access in a row moves k here; its append is unconfirmed: orphaned.
    let _ = a.read(b"k", &mut [0u8; SLOT]);
    chaos::clear_forced_faults();
    a.replay().unwrap();
    assert_eq!(
        a.lookup(b"k").unwrap().unwrap().local_owner,
        Some(a.id()),
        "the unconfirmed move applied"
    );
    // The next access finds the orphan and moves it back: unconfirmed as well.
    a_move_back_of_k_unconfirmed_then_k_moves_again(a);
    assert_eq!(read(a, b"k"), value(1));
}

/// A writer that loaded `k`'s unlocked record word, and before its CAS another host
/// locked the record (a write in progress): its CAS fails, and it waits for that write;
/// it never holds `k` at the same time. (A plain store in place of the CAS took the lock
/// over the other writer's: two writers held one object, which only the stresses saw.)
#[test]
fn a_writer_whose_record_was_locked_after_its_load_does_not_take_it_too() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let pod = pod(32, 64 << 10);
    let a = leak(&pod, 0, options().wait_limit(Duration::from_millis(300)));
    let b = leak(&pod, 1, options());
    written_k(a);
    let held: Rc<RefCell<Option<megalon_core::WriteTicket<'static>>>> = Rc::default();
    let hook_held = Rc::clone(&held);
    let answer = chaos::with_hook(
        move |point| {
            if point == Point::WriteBeforeLock && hook_held.borrow().is_none() {
                // b locks k between a's load of the word and a's CAS, and keeps it.
                *hook_held.borrow_mut() = Some(b.write_start(b"k").expect("b locks k"));
            }
        },
        // A ticket a should not have is not ended: its end would unlock b's lock (and
        // panic in a debug build, then again in b's ticket's drop: an abort, not a
        // failure the mutants' run can read).
        || a.write_start(b"k").map(std::mem::forget),
    );
    // b's write ends first, whatever a got, so that a failed check below unwinds
    // holding no ticket.
    let ticket = held.borrow_mut().take().expect("the hook ran");
    ticket.write(0, &value(5)).unwrap();
    b.write_end(ticket).unwrap();
    assert!(
        matches!(answer, Err(Error::RecordBusy { .. })),
        "a's write_start while b held k: {answer:?}"
    );
    assert_eq!(read(a, b"k"), value(5));
}

/// A pod whose records are exactly `records`, 32-bit (the application's SCR takes the
/// rest of a 4 KiB SCR).
fn pod_of_records(records: u64) -> Arc<Pod> {
    let config = config()
        .scr_bytes(4096)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096);
    let count = megalon_core::Layout::new(&config).unwrap().record_count;
    let config = config.app_scr_bytes((count - records) * 4);
    let pod = heap_pod(&config);
    assert_eq!(pod.layout().record_count, records);
    pod
}

/// One free record left, and two hosts' allocations want it: `a` loaded its free word
/// and, before its CAS, `b` claimed it and wrote its object. `a`'s claim fails and it
/// finds another record (releasing one); the two objects never share one. (A plain store
/// in place of the claim's CAS gave the record to both: no test caught it.)
#[test]
fn a_claim_whose_free_record_was_claimed_after_its_load_takes_another() {
    let pod = pod_of_records(16);
    let a = leak(&pod, 0, options());
    let b = leak(&pod, 1, options());
    for i in 0..15u8 {
        let key = format!("k{i}");
        a.create(key.as_bytes(), &value(i)).unwrap();
        a.write(key.as_bytes(), &value(i)).unwrap();
    }
    assert_eq!(named_records(a).len(), 15, "one record left");
    a.create(b"x", &value(100)).unwrap();
    b.create(b"y", &value(101)).unwrap();
    let mut done = false;
    chaos::with_hook(
        move |point| {
            if point == Point::ClaimBeforeCas && !done {
                done = true;
                b.write(b"y", &value(102)).expect("b takes the last record");
            }
        },
        || a.write(b"x", &value(103)).expect("a finds a record"),
    );
    b.inspect().settle_pending().unwrap();
    let named = named_records(b);
    let mut unique = named.clone();
    unique.dedup();
    assert_eq!(named, unique, "two objects on one record");
    assert_eq!(read(b, b"y"), value(102));
    assert_eq!(read(b, b"x"), value(103));
    assert_eq!(read(a, b"y"), value(102));
}
