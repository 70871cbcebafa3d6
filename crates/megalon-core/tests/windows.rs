//! Windows between two protocol steps, stretched on purpose: a test's hook runs at a
//! chosen [`Point`] (other hosts' operations, a signal to another thread) and forced
//! faults make a chosen log append fail. Built with the `chaos` feature only (`cargo
//! xtask mutants` and `cargo xtask stress --chaos` turn it on); each test names the
//! defect it would catch.
#![cfg(feature = "chaos")]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use megalon_core::chaos::{self, Fault, Point};
use megalon_core::{Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};

const SLOT: usize = 256;
const WAIT: Duration = Duration::from_secs(10);

fn pod(record_width_bits: u32, scr_bytes: u64) -> Arc<Pod> {
    let config = PodConfig::new()
        .scr_bytes(scr_bytes)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(SLOT as u64)
        .max_key_bytes(48)
        .log_capacity_entries(4096)
        .record_width_bits(record_width_bits)
        .max_hosts(4);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
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

fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

fn read(host: &Host, key: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; SLOT];
    host.read(key, &mut buf).expect("read");
    buf
}

/// Defect 1 of issue 13: `read_end` checked the log first and the counter second. A
/// reader's copy is torn by a write; between its two checks the writer ends that write and
/// makes 31 more, a full cycle of a 6-bit counter (its wrap event appended after the
/// reader's tail check). Checking the counter first sees the write in progress; checking
/// the log second sees the wrap event.
#[test]
fn a_full_counter_cycle_between_the_checks_of_read_end_is_caught() {
    let pod = pod(8, 64 << 10);
    // Real memory: the reader's copy sees the writer's stores as they happen.
    let writer = leak(&pod, 0, options().memory(MemoryKind::Hardware));
    let reader = leak(&pod, 1, options().memory(MemoryKind::Hardware));
    writer.create(b"k", &value(0)).unwrap();
    writer.write(b"k", &value(1)).unwrap();
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
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
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
    let mut named: Vec<u32> = b
        .inspect()
        .replica_snapshot()
        .iter()
        .filter_map(|(_, entry)| entry.record)
        .collect();
    named.sort_unstable();
    assert_eq!(
        census.in_use, named,
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
    let pod = pod(32, 64 << 10);
    // Real memory: the reader copies what the creator wrote as soon as it is written.
    let a = leak(&pod, 0, options().memory(MemoryKind::Hardware));
    let reader = leak(&pod, 1, options().memory(MemoryKind::Hardware));
    a.create(b"gone", &value(1)).unwrap();
    a.create(b"other", &value(2)).unwrap();
    let ticket = reader.read_start(b"gone").unwrap();

    let (to_main, main_hears) = channel();
    let (to_deleter, deleter_hears) = channel();
    let deleter = std::thread::spawn({
        let to_main = to_main.clone();
        move || {
            let mut held = false;
            chaos::with_hook(
                move |point| {
                    if point == Point::ReplayBeforeCtail && !held {
                        held = true;
                        to_main.send("delete applied").unwrap();
                        expect(&deleter_hears, "go on");
                    }
                },
                || a.delete(b"gone").unwrap(),
            );
        }
    });
    expect(&main_hears, "delete applied");
    let creator = std::thread::spawn(move || {
        let mut written = false;
        chaos::with_hook(
            move |point| {
                if point == Point::CreateBeforeEvent && !written {
                    written = true;
                    to_main.send("bytes written").unwrap();
                }
            },
            || a.create(b"new", &value(9)).unwrap(),
        );
    });
    expect(&main_hears, "bytes written");
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    let accepted = reader.read_end(ticket).unwrap();
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
    let s = leak(&pod, 0, options().memory(MemoryKind::Hardware));
    let b = leak(&pod, 1, options().memory(MemoryKind::Hardware));
    let reader = leak(&pod, 2, options().memory(MemoryKind::Hardware));
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
            let mut looked_up = false;
            let to_main_in_hook = to_main.clone();
            let ticket = chaos::with_hook(
                move |point| {
                    if point == Point::WriteBeforeLock && !looked_up {
                        looked_up = true;
                        to_main_in_hook.send("s looked y up").unwrap();
                        expect(&s_lock_hears, "lock");
                    }
                },
                || s.write_start(b"y").unwrap(),
            );
            ticket.write(0, &value(7)[..SLOT / 2]).unwrap();
            to_main.send("half written").unwrap();
            expect(&s_finish_hears, "finish");
            ticket.write(SLOT / 2, &value(7)[SLOT / 2..]).unwrap();
            s.write_end(ticket).unwrap();
        }
    });
    expect(&main_hears, "s looked y up");
    assert!(b.make_read_shared(b"y").unwrap());
    let writer_b = std::thread::spawn(move || {
        let mut allocated = false;
        chaos::with_hook(
            move |point| {
                if point == Point::WriteBeforeLock && !allocated {
                    allocated = true;
                    to_main.send("q allocated").unwrap();
                    expect(&b_hears, "lock");
                }
            },
            || b.write(b"q", &value(5)).unwrap(),
        );
    });
    expect(&main_hears, "q allocated");
    let ticket = reader.read_start(b"y").unwrap();
    to_s_lock.send("lock").unwrap();
    expect(&main_hears, "half written");
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    let accepted = reader.read_end(ticket).unwrap();
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
