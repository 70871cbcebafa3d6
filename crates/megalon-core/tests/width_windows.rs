//! Windows of a record width switch, each stretched with a hook at a chaos point: a writer
//! inside its gate when the switch begins, an alloc claimed before a switch and logged
//! after it. Built with the `chaos` feature only.
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc::{channel, Sender};
use std::time::Duration;

use common::{config, heap_pod, read_tag, simulated, stopped_at, tag_of, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{Error, Host, HostOptions, Join, Pod, ReadTicket, RecordShape};

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 512, 64))
        .wait_limit(Duration::from_millis(400))
}

fn leak(pod: &std::sync::Arc<Pod>, id: u32, seed: u64) -> &'static Host {
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options(seed)).expect("join"),
    ))
}

/// A writer stopped between its gate and its lock's CAS keeps a switch from draining:
/// the switch waits for the gate, gives up past its limit and changes nothing, and the
/// write then goes through. (Without the gate the switch drains past the writer, which
/// then locks a record of the old width over the bytes of the new.)
#[test]
fn a_switch_waits_for_a_writer_inside_its_gate() {
    let pod = heap_pod(&config().record_width_switch(true));
    let a = leak(&pod, 0, 1);
    let b = leak(&pod, 1, 2);
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let (stopped, go, writer) = stopped_at(Point::WriteBeforeLock, move || {
        a.write(b"k", &value(2)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    let switched = b.switch_record_width(8);
    assert!(
        matches!(switched, Err(Error::RecordWidthSwitching { .. })),
        "a switch past a raised gate: {switched:?}"
    );
    assert_eq!(
        b.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    go.send("go").unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(read_tag(b, b"k"), Some(2));
    assert!(b.switch_record_width(8).unwrap());
    assert_eq!(read_tag(b, b"k"), Some(2));
    a.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(3));
}

/// `b`'s switch to 8 bits, `at_freeze` run once the word is draining, and a write of
/// `a`'s tried once every lock was seen free, before the switch's event. Returns the
/// switch's answer and the write's (a ticket the gate let through would hold a lock the
/// switch zeroes: kept, the caller's test fails on it anyway).
fn a_write_tried_before_the_event(
    a: &'static Host,
    b: &'static Host,
    mut at_freeze: impl FnMut() + 'static,
) -> (Result<bool, Error>, Result<(), Error>) {
    use std::cell::RefCell;
    use std::rc::Rc;

    let tried = Rc::new(RefCell::new(None));
    let answer = Rc::clone(&tried);
    let switched = chaos::with_hook(
        move |at| match at {
            Point::WidthAfterFreeze => at_freeze(),
            Point::WidthBeforeEvent if tried.borrow().is_none() => {
                let write = a.write_start(b"k").map(std::mem::forget);
                *tried.borrow_mut() = Some(write);
            }
            _ => {}
        },
        || b.switch_record_width(8),
    );
    let answer = answer
        .borrow_mut()
        .take()
        .expect("the drainer reached its event");
    (switched, answer)
}

/// A host that acknowledged a freeze keeps its changers out until the switch ends, though
/// its DRAM copy of the width word was open at their last look: the acknowledgement puts
/// the freeze into the copy before it looks at the gate. Host a acknowledges (by hand);
/// then, every lock seen free and the drainer about to append its event, a write of a's
/// tries to lock: it waits for the switch and gives up. (Were the copy left open, the
/// write would pass the gate on it and lock a record of the old width, which the switch
/// then zeroes under its lock.)
#[test]
fn a_writer_of_a_host_that_acknowledged_a_freeze_stays_out_of_it() {
    let pod = heap_pod(&config().record_width_switch(true));
    let a = leak(&pod, 0, 1);
    let b = leak(&pod, 1, 2);
    a.create(b"k", &value(0)).unwrap();
    // Written once: the object has a record, and a's copy of the width word is open.
    a.write(b"k", &value(1)).unwrap();
    let (switched, answer) = a_write_tried_before_the_event(a, b, move || {
        a.replay().unwrap();
    });
    assert!(
        matches!(answer, Err(Error::RecordWidthSwitching { .. })),
        "a write of a host that acknowledged the freeze: {answer:?}"
    );
    assert!(switched.unwrap());
    assert_eq!(read_tag(b, b"k"), Some(1));
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(2));
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
}

/// A record claimed before a switch, its alloc logged after the switch: the alloc loses
/// (the switch freed the record), and the write claims one of the new width. (Were the
/// alloc to win, the object would name an id of the old width in the new array, a free
/// record there, and its write would wait on it until its limit.)
#[test]
fn an_alloc_claimed_before_a_switch_and_logged_after_it_loses() {
    let pod = heap_pod(&config().record_width_switch(true));
    let a = leak(&pod, 0, 1);
    let b = leak(&pod, 1, 2);
    a.create(b"k", &value(0)).unwrap();
    let (stopped, go, writer) = stopped_at(Point::AllocAfterClaim, move || {
        a.write(b"k", &value(5)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    assert_eq!(a.inspect().record_census().in_use.len(), 1, "claimed");
    assert!(b.switch_record_width(8).unwrap());
    assert!(b.inspect().record_census().in_use.is_empty(), "zeroed");
    go.send("go").unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(read_tag(b, b"k"), Some(5));
    let record = b.lookup(b"k").unwrap().unwrap().record.expect("a record");
    let census = b.inspect().record_census();
    assert_eq!(census.in_use, [record]);
    assert_eq!(b.inspect().records_in_use().0, 1);
}

/// A drainer whose thread unwinds before its append (a panic there is a bug, here a
/// hook's) opens the width word again: the width stays, writes go on, the next switch
/// goes through.
#[test]
fn a_drainer_that_unwinds_before_its_append_opens_the_word_again() {
    let pod = heap_pod(&config().record_width_switch(true));
    let a = leak(&pod, 0, 1);
    let b = leak(&pod, 1, 2);
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        chaos::with_hook(
            |at| {
                if at == Point::WidthBeforeEvent {
                    panic!("the drainer's thread unwinds");
                }
            },
            || b.switch_record_width(8),
        )
    }));
    assert!(unwound.is_err());
    assert_eq!(a.inspect().width_drainer(), None);
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(2));
    assert_eq!(
        b.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    assert!(b.switch_record_width(8).unwrap());
    a.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(3));
}

/// What keeps a dead drainer's thread stopped at its point: its "go" and its thread.
type StoppedDrainer = (
    Sender<&'static str>,
    std::thread::JoinHandle<Result<bool, Error>>,
);

/// A pod of host 0 (`a`, returned) and host 1, whose switch to `bits` stopped at `point`;
/// host 1 is then frozen (dead by its lease) and recovered by `a`. Host 0 wrote `k`
/// (`value(1)`) before the switch.
fn drainer_dead_at(
    point: Point,
    bits: u32,
) -> (std::sync::Arc<Pod>, &'static Host, StoppedDrainer) {
    let pod = heap_pod(&config().record_width_switch(true).lease_ms(100));
    let fast = |seed| options(seed).pump_interval(Some(Duration::from_millis(1)));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), fast(1)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), fast(2)).unwrap()));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let (stopped, go, drainer) = stopped_at(point, move || b.switch_record_width(bits));
    assert_eq!(stopped.recv().unwrap(), "stopped");
    b.inspect().freeze();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.inspect().stats().hosts_recovered < 1 {
        assert!(std::time::Instant::now() < deadline, "b never recovered");
        std::thread::sleep(Duration::from_millis(5));
    }
    (pod, a, (go, drainer))
}

/// A drainer that dies after its `WidthEnd` reached the log and before it opened the
/// word: once its row is recovered, a host that applied the event takes the switch over
/// and ends it (the records zeroed, the word open at the new epoch), and its write goes
/// on at the new width.
#[test]
fn a_drainer_dead_after_its_append_is_taken_over_by_a_host_past_its_event() {
    let (_pod, a, _drainer) = drainer_dead_at(Point::AppendAfterPublish, 8);
    assert_eq!(
        a.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 8 },
        "the event is in the log"
    );
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().width_drainer(), None);
    assert_eq!(read_tag(a, b"k"), Some(2));
    a.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(3));
}

/// A drainer that dies mid-drain, its id joined again by a new life before any host took
/// the switch over: the width word names the id, whose holder lives, so nobody found the
/// drainer gone and every write waited on the switch for good. The new life takes the
/// switch over when it joins.
#[test]
fn a_switch_whose_drainer_s_id_joins_again_is_taken_over() {
    let (pod, a, _drainer) = drainer_dead_at(Point::WidthAfterGates, 8);
    let b2 = leak(&pod, 1, 3);
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().width_drainer(), None);
    b2.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(3));
    assert_eq!(
        a.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    assert!(b2.switch_record_width(8).unwrap());
    assert_eq!(read_tag(a, b"k"), Some(3));
}

/// A switch begun while another host's switch is left draining by a drainer that died
/// mid-drain (its row recovered): it takes that switch over and goes through. (It
/// answered `RecordWidthSwitching` at once, for as long as no write took the switch over:
/// in a pod that is only read, for good.)
#[test]
fn a_switch_takes_over_one_whose_drainer_is_gone() {
    let (_pod, a, _drainer) = drainer_dead_at(Point::WidthAfterGates, 16);
    let switched = a.switch_record_width(8);
    assert!(matches!(switched, Ok(true)), "{switched:?}");
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    assert_eq!(read_tag(a, b"k"), Some(1));
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(2));
}

/// A switch whose drainer is gone is taken over by a host's pump, with no change of a
/// record word to meet it: a pod only read (or whose writes pass their gates on their
/// host's open copy of the width word) is not left frozen. (Only a gate or a switch took
/// it over: the word stayed draining.)
#[test]
fn a_pump_takes_over_a_switch_whose_drainer_is_gone() {
    let (_pod, a, _drainer) = drainer_dead_at(Point::WidthAfterGates, 16);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.inspect().width_drainer().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the switch was left frozen"
        );
        assert_eq!(read_tag(a, b"k"), Some(1));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        a.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(2));
}

/// A pod of [`config`] whose record array is one line: 16 records of 32 bits, 64 of 8.
fn one_line_of_records() -> megalon_core::PodConfig {
    let switchable = config().record_width_switch(true);
    let records_bytes = megalon_core::Layout::new(&switchable)
        .expect("layout")
        .records_bytes();
    switchable.app_scr_bytes(records_bytes - 64)
}

/// A writer whose lookup is older than the record array: it caught up, then a whole
/// switch (32 to 8 bits) went by before its lookup, which names a record of the old
/// width over bytes that hold records of the new (here four in use, the first locked by
/// a write: at 32 bits, an unlocked word with an odd counter). It backs off at its gate
/// and writes at the new width. (A debug assertion, before the gate, took that word for
/// a broken one and panicked the writer.)
#[test]
fn a_writer_whose_lookup_is_older_than_the_record_array_backs_off() {
    let pod = heap_pod(&one_line_of_records());
    let a: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(0), options(1).record_watermark(1.0)).unwrap(),
    ));
    // Without a pump: its replica applies nothing it is not asked to.
    let b: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    b.create(b"k", &value(0)).unwrap();
    b.write(b"k", &value(1)).unwrap();
    let old = b.lookup(b"k").unwrap().unwrap().record.expect("a record");
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &keys {
        a.create(key, &value(0)).unwrap();
    }
    let (stopped, go, writer) = stopped_at(Point::LookBeforeValidation, move || {
        b.write(b"k", &value(7)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    // b acknowledges the freeze by hand (no pump), before the switch's event.
    let switched = chaos::with_hook(
        |at| {
            if at == Point::WidthAfterFreeze {
                b.replay().unwrap();
            }
        },
        || a.switch_record_width(8),
    );
    assert!(switched.unwrap());
    // Every record of the new width in use; the first of those under `old`'s bytes
    // locked by a write.
    for key in &keys {
        a.write(key, &value(2)).unwrap();
    }
    assert_eq!(a.inspect().records_in_use(), (64, 64));
    let held = a
        .record_owner(old * 4)
        .unwrap()
        .expect("every record in use");
    let ticket = a.write_start(&held).unwrap();
    go.send("go").unwrap();
    let written = writer.join();
    a.write_end(ticket).unwrap();
    assert!(
        matches!(written, Ok(Ok(()))),
        "the writer: {:?}",
        written.map_err(|_| "panicked")
    );
    assert_eq!(read_tag(a, b"k"), Some(7));
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    let census = a.inspect().record_census();
    assert!(census.locked.is_empty());
    assert_eq!(a.inspect().records_in_use().0, census.in_use.len() as u64);
}

/// A `read_many` on host b whose wait host a's write of x spent, then (in a second group)
/// a read of k whose lookup is older than the record array: between k's tail check and
/// its lookup, x's write ends and a switches from 32 to 8 bits, then writes at 8 bits
/// until every record is in use, and holds the one under the first byte of k's old
/// record locked. k has no record any more (nobody holds it), but its lookup names the
/// old record, whose bytes read at 32 bits as a write in progress. One more look (its
/// tail check applies the switch) reads it, as a lone read does. (Answered `RecordBusy`
/// without that look, the call's wait being spent: records of another width read as a
/// locked one.)
#[test]
// Over 70 lines on purpose: one scenario, its setup, the window and what it must leave.
fn a_read_many_whose_wait_is_spent_reads_an_object_a_switch_took_the_record_of() {
    use std::cell::RefCell;
    use std::rc::Rc;

    let pod = heap_pod(&one_line_of_records());
    let a: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(0), options(1).record_watermark(1.0)).unwrap(),
    ));
    // Without a pump: its replica applies nothing it is not asked to.
    let b: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    // The first group: x (locked by a below), then read-shared objects; k opens the second.
    let mut keys: Vec<Vec<u8>> = vec![b"x".to_vec()];
    keys.extend((0..15).map(|i| format!("s{i}").into_bytes()));
    keys.push(b"k".to_vec());
    for key in &keys {
        a.create(key, &value(1)).unwrap();
    }
    for key in [&b"x"[..], b"k"] {
        // Written once: the object has a record.
        a.write(key, &value(2)).unwrap();
    }
    let old = a.lookup(b"k").unwrap().unwrap().record.expect("a record");
    let fill: Vec<Vec<u8>> = (0..64).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &fill {
        a.create(key, &value(0)).unwrap();
    }
    b.replay().unwrap();
    let x_ticket = Some(a.write_start(b"x").unwrap());
    let held = Rc::new(RefCell::new(None));
    let mut bufs = vec![vec![0u8; common::SLOT]; keys.len()];
    let mut reads = common::reads(&keys, &mut bufs);
    // The first group's copies come after all its reads started (x's too): the first
    // tail check after a copy is k's.
    let (mut copied, mut x_ticket, in_hook) = (false, x_ticket, Rc::clone(&held));
    let answers = chaos::with_hook(
        move |at| match at {
            Point::ReadBeforeEnd => copied = true,
            Point::ReadAfterTailCheck if copied && x_ticket.is_some() => {
                a.write_end(x_ticket.take().unwrap()).unwrap();
                // b acknowledges the freeze by hand (no pump), before the switch's event.
                let switched = chaos::with_hook(
                    |at| {
                        if at == Point::WidthAfterFreeze {
                            b.replay().unwrap();
                        }
                    },
                    || a.switch_record_width(8),
                );
                assert!(switched.unwrap());
                for key in &fill {
                    a.write(key, &value(3)).unwrap();
                }
                assert_eq!(a.inspect().records_in_use(), (64, 64));
                let under = a
                    .record_owner(old * 4)
                    .unwrap()
                    .expect("every record in use");
                *in_hook.borrow_mut() = Some(a.write_start(&under).unwrap());
            }
            _ => {}
        },
        || b.read_many(&mut reads),
    );
    let ticket = held.borrow_mut().take().expect("the window was reached");
    a.write_end(ticket).unwrap();
    common::only_the_first_busy(
        &answers,
        "k, nobody's to wait for, its record taken by the switch",
    );
    assert_eq!(bufs[16][..], value(2)[..]);
    assert_eq!(b.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    assert!(b.lookup(b"k").unwrap().unwrap().record.is_none());
}

/// Host b's `delete_unless_busy` of k whose lookup is older than the record array:
/// between its tail check and its lookup, a switches from 32 to 8 bits, writes at 8 bits
/// until every record is in use, and holds the one under the last byte of k's old record
/// locked. k has no record any more (nobody holds it), but its lookup names the old
/// record, whose bytes read at 32 bits as a locked one. One more look (its tail check
/// applies the switch) deletes it, as `delete` does. (It answered `RecordBusy` at once:
/// records of another width taken for a locked one.)
#[test]
fn a_delete_unless_busy_deletes_an_object_a_switch_took_the_record_of() {
    use std::cell::RefCell;
    use std::rc::Rc;

    let pod = heap_pod(&one_line_of_records());
    let a: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(0), options(1).record_watermark(1.0)).unwrap(),
    ));
    // Without a pump: its replica applies nothing it is not asked to.
    let b: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    a.create(b"k", &value(1)).unwrap();
    // Written once: the object has a record.
    a.write(b"k", &value(2)).unwrap();
    let old = a.lookup(b"k").unwrap().unwrap().record.expect("a record");
    let fill: Vec<Vec<u8>> = (0..64).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &fill {
        a.create(key, &value(0)).unwrap();
    }
    b.replay().unwrap();
    let held = Rc::new(RefCell::new(None));
    let in_hook = Rc::clone(&held);
    let answer = chaos::with_hook(
        move |at| {
            if at == Point::DeleteAfterTailCheck && in_hook.borrow().is_none() {
                // b acknowledges the freeze by hand (no pump), before the switch's event.
                let switched = chaos::with_hook(
                    |at| {
                        if at == Point::WidthAfterFreeze {
                            b.replay().unwrap();
                        }
                    },
                    || a.switch_record_width(8),
                );
                assert!(switched.unwrap());
                for key in &fill {
                    a.write(key, &value(3)).unwrap();
                }
                assert_eq!(a.inspect().records_in_use(), (64, 64));
                let under = a
                    .record_owner(old * 4 + 3)
                    .unwrap()
                    .expect("every record in use");
                *in_hook.borrow_mut() = Some(a.write_start(&under).unwrap());
            }
        },
        || b.delete_unless_busy(b"k"),
    );
    let ticket = held.borrow_mut().take().expect("the window was reached");
    a.write_end(ticket).unwrap();
    assert!(answer.is_ok(), "nobody holds k: {answer:?}");
    assert!(a.lookup(b"k").unwrap().is_none());
    assert!(b.lookup(b"k").unwrap().is_none());
}

/// A read begun at 4 bits and ended after a switch to 8 bits, its copy torn by a write at
/// the new width: the bytes of its old record, read at 4 bits, are what its start saw (in
/// use, unlocked, counter 2: the new record over them in use with the counter it needs),
/// so only the log tells. `read_end`'s tail check applies the switch and the write's
/// alloc, and the stamp check throws the copy away. (Fails with the mutant
/// `post-read-event-check`: a torn copy accepted.)
#[test]
fn a_read_across_a_switch_whose_old_record_reads_unchanged_is_thrown_away() {
    let pod = heap_pod(&one_line_of_records().record_width_bits(4));
    // Written once: a record of 4 bits, its counter 2.
    let HalfRead {
        a,
        b,
        ticket,
        mut copy,
        old,
    } = a_read_half_copied_across_a_switch(&pod, 64, 8, "4 to 8 bits");
    // The 8-bit record over `old`'s bits: its low half (counter 10) or its high half
    // (in use, unlocked, counter 32) reads as `old` in use at counter 2.
    let owner = a
        .record_owner(old / 2)
        .unwrap()
        .expect("every record in use");
    let writes = if old.is_multiple_of(2) { 5 } else { 16 };
    for _ in 1..writes {
        a.write(&owner, &value(4)).unwrap();
    }
    ticket.read(SLOT / 2, &mut copy[SLOT / 2..]).unwrap();
    assert_eq!(tag_of(&copy), None, "the copy is torn");
    assert!(!b.read_end(ticket).unwrap(), "a torn copy accepted");
    assert_eq!(read_tag(b, b"k"), Some(9));
}

/// A stale acknowledgement's store into the copy, and a changer's refresh of the copy
/// from it, reopen the copy under an acknowledged freeze. Host a (its pump asleep for
/// the whole test: a host without one looks at the word itself) acknowledged
/// a first freeze, which was then given up (b held a lock). Then, of a's threads: `stale`
/// loaded that first freeze for an acknowledgement of its own and stopped before its
/// store into the copy; `refresher` found the copy not open (the first freeze), loaded
/// the word (open again) and stopped before its refresh of the copy. A second freeze:
/// `acker` stores it into the copy and stops before its look at the gate; `stale` stores
/// the first freeze over it; `refresher` refreshes the copy from the first freeze (what
/// it saw) to open, writes and lowers its gate; `acker` finds the gate lowered and
/// acknowledges. With every lock seen free, a write of a's then finds the copy open: it
/// must wait for the switch, not lock a record the switch zeroes.
#[test]
// Over 70 lines on purpose: one schedule of four threads, each step in its order.
fn a_stale_acknowledgement_does_not_reopen_the_copy_under_a_later_freeze() {
    use std::cell::RefCell;
    use std::rc::Rc;

    let pod = heap_pod(&config().record_width_switch(true).lease_ms(60_000));
    let asleep = options(1).pump_interval(Some(Duration::from_secs(600)));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), asleep).unwrap()));
    let b = leak(&pod, 1, 2);
    a.create(b"k", &value(0)).unwrap();
    b.create(b"h", &value(0)).unwrap();
    // Written once: each object has a record, and a's copy of the width word is open.
    a.write(b"k", &value(1)).unwrap();
    b.write(b"h", &value(1)).unwrap();
    // The first freeze: a acknowledges it, `stale` loads it; b's lock makes it give up.
    let held = b.write_start(b"h").unwrap();
    let stale = Rc::new(RefCell::new(None));
    let in_hook = Rc::clone(&stale);
    let first = chaos::with_hook(
        move |at| {
            if at == Point::WidthAfterFreeze {
                let (stopped, go, thread) =
                    stopped_at(Point::AckBeforeCopy, move || a.replay().map(drop));
                assert_eq!(stopped.recv().unwrap(), "stopped");
                *in_hook.borrow_mut() = Some((go, thread));
                a.replay().unwrap();
            }
        },
        || b.switch_record_width(8),
    );
    assert!(
        matches!(first, Err(Error::RecordWidthSwitching { .. })),
        "{first:?}"
    );
    b.write_end(held).unwrap();
    let (stale_go, stale) = stale.borrow_mut().take().expect("the first freeze");
    // `refresher`: the copy holds the first freeze, the word is open again.
    let (stopped, refresher_go, refresher) = stopped_at(Point::GateAfterWordLoad, move || {
        a.write(b"k", &value(2)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    let mut refresher_go = Some((refresher_go, refresher, stale_go, stale));
    let (second, answer) = a_write_tried_before_the_event(a, b, move || {
        let (stopped, acker_go, acker) =
            stopped_at(Point::AckAfterCopy, move || a.replay().map(drop));
        assert_eq!(stopped.recv().unwrap(), "stopped");
        let (refresher_go, refresher, stale_go, stale) = refresher_go.take().unwrap();
        stale_go.send("go").unwrap();
        stale.join().unwrap().unwrap();
        refresher_go.send("go").unwrap();
        refresher.join().unwrap().unwrap();
        acker_go.send("go").unwrap();
        acker.join().unwrap().unwrap();
    });
    assert!(
        matches!(answer, Err(Error::RecordWidthSwitching { .. })),
        "a write of a host that acknowledged the second freeze: {answer:?}"
    );
    assert!(second.unwrap());
    assert_eq!(read_tag(b, b"k"), Some(2));
    a.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(3));
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
}

/// A drainer dead after its `WidthEnd` reached the log (its row recovered), and two
/// takers of its switch: a write of host 0's (`taker`), which found the drainer's row free
/// and stopped before its CAS, and a new life of the drainer's id, which takes the switch
/// over as it joins and ends it. Then the new life writes and holds the object's lock at
/// the new width, and `taker` goes on: it must find the switch taken, not end it a second
/// time and zero the record under that lock. (The new life's takeover stored the word it
/// found, naming the same id: `taker`'s CAS from it went through, and both ended it.)
/// Hosts without a pump: nothing takes a switch over but the takers of a test.
fn no_pump(seed: u64) -> HostOptions {
    options(seed).pump_interval(None)
}

/// [`drainer_dead_at`] with hosts without a pump: a pod of host 0 (`a`, returned) and
/// host 1, whose switch to 8 bits (a acknowledging the freeze by hand) stopped at
/// `point`; host 1 is then frozen and recovered by `a` by hand. Host 0 wrote `k`
/// (`value(1)`) before the switch.
fn pumpless_drainer_dead_at(point: Point) -> (std::sync::Arc<Pod>, &'static Host, StoppedDrainer) {
    let pod = heap_pod(&config().record_width_switch(true).lease_ms(100));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), no_pump(1)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(2)).unwrap()));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let (to_main, main_hears) = channel();
    let (go, drainer_hears) = channel::<&'static str>();
    let drainer = std::thread::spawn(move || {
        // From the freeze on (a catch-up before it replays too), and once: a drainer let
        // go on (a process paused past its lease wakes) may pass the point again.
        let (mut armed, mut stopped) = (false, false);
        chaos::with_hook(
            move |at| {
                if at == Point::WidthAfterFreeze {
                    a.replay().unwrap();
                }
                armed |= at == Point::WidthAfterFreeze;
                if armed && at == point && !std::mem::replace(&mut stopped, true) {
                    to_main.send("stopped").unwrap();
                    let _ = drainer_hears.recv();
                }
            },
            || b.switch_record_width(8),
        )
    });
    assert_eq!(main_hears.recv().unwrap(), "stopped");
    b.inspect().freeze();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.inspect().stats().hosts_recovered < 1 {
        assert!(std::time::Instant::now() < deadline, "b never recovered");
        std::thread::sleep(Duration::from_millis(20));
        a.inspect().watch_hosts();
    }
    (pod, a, (go, drainer))
}

/// The width word in the SCR, raw.
fn width_word(pod: &Pod) -> u64 {
    pod.scr_u64(pod.layout().width_offset())
        .load(std::sync::atomic::Ordering::SeqCst)
}

/// A drainer paused past its lease right after its `WidthEnd` reached the log, or once
/// its own replay applied it (before `ctail` moves), or about to zero the records,
/// declared dead and recovered; host 0 takes the switch over, ends it, and holds `k`'s
/// lock at the new width. Then the drainer goes on: it must change no record word (host
/// 0's lock stays) and not the width word, and answer that it was declared dead.
#[test]
fn a_drainer_declared_dead_after_its_append_changes_nothing_when_it_goes_on() {
    for point in [
        Point::AppendAfterPublish,
        Point::ReplayBeforeCtail,
        Point::WidthBeforeZeroing,
    ] {
        a_drainer_declared_dead_at_changes_nothing_when_it_goes_on(point);
    }
}

fn a_drainer_declared_dead_at_changes_nothing_when_it_goes_on(point: Point) {
    let (pod, a, (go, drainer)) = pumpless_drainer_dead_at(point);
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().width_drainer(), None);
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    // Not dropped on a failed assertion: a ticket's drop unlocks, and asserts on a word
    // zeroed under it.
    let held = std::mem::ManuallyDrop::new(a.write_start(b"k").unwrap());
    let word = width_word(&pod);
    go.send("go").unwrap();
    let answer = drainer.join().unwrap();
    assert!(
        matches!(answer, Err(Error::HostDeclaredDead { .. })),
        "{point:?}: {answer:?}"
    );
    assert_eq!(
        a.inspect().record_census().locked.len(),
        1,
        "{point:?}: a's lock"
    );
    assert_eq!(
        width_word(&pod),
        word,
        "{point:?}: the dead drainer stored the width word"
    );
    let b2 = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(3)).unwrap()));
    let second = b2.write_start(b"k").map(std::mem::forget);
    assert!(
        second.is_err(),
        "{point:?}: two writers of k at once: {second:?}"
    );
    a.write_end(std::mem::ManuallyDrop::into_inner(held))
        .unwrap();
    assert_eq!(read_tag(a, b"k"), Some(2));
}

/// A drainer paused past its lease between its zeroing and its reopening of the width
/// word (`WidthBeforeReopen`), declared dead and recovered; host 0 takes the switch over
/// and ends it, then begins a switch of its own (to 16 bits). The paused drainer goes on
/// while host 0 drains: its reopening must not land on host 0's freeze. (It did, with a
/// plain store: a writer of a new life of the drainer's id, which acknowledged the
/// freeze, then found the word open, locked `k`'s 8-bit record after host 0's drain saw
/// every lock free, and host 0's switch zeroed that lock: two writers of `k` at once,
/// and a write that ended lost under one that had not.)
#[test]
fn a_drainer_declared_dead_before_its_reopening_leaves_another_switchs_freeze() {
    use std::cell::RefCell;
    use std::rc::Rc;

    let (pod, a, (go, drainer)) = pumpless_drainer_dead_at(Point::WidthBeforeReopen);
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().width_drainer(), None);
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    let b2: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(3)).unwrap()));
    let answer = Rc::new(RefCell::new(None));
    let tried = Rc::new(RefCell::new(None));
    let (answer_in_hook, tried_in_hook) = (Rc::clone(&answer), Rc::clone(&tried));
    let mut drainer = Some((go, drainer));
    let switched = chaos::with_hook(
        move |at| match at {
            Point::WidthAfterFreeze => {
                // b2 acknowledges a's freeze (by hand: it has no pump); the paused drainer
                // goes on, its reopening after a's freeze.
                b2.replay().unwrap();
                if let Some((go, drainer)) = drainer.take() {
                    go.send("go").unwrap();
                    *answer_in_hook.borrow_mut() = Some(drainer.join().unwrap());
                }
            }
            Point::WidthBeforeEvent if tried_in_hook.borrow().is_none() => {
                // a's drain saw every lock free: b2 tries to write k.
                let ticket = b2.write_start(b"k").map(|t| {
                    let record = t.record();
                    std::mem::forget(t);
                    record
                });
                *tried_in_hook.borrow_mut() = Some(ticket);
            }
            _ => {}
        },
        || a.switch_record_width(16),
    );
    assert!(
        matches!(answer.take(), Some(Err(Error::HostDeclaredDead { .. }))),
        "the dead drainer's answer"
    );
    let tried = tried.take().expect("a's switch reached its event");
    assert!(
        matches!(tried, Err(Error::RecordWidthSwitching { .. })),
        "b2 locked k during a's drain: {tried:?}"
    );
    assert!(switched.unwrap());
    assert_eq!(
        a.record_width().unwrap(),
        RecordShape { epoch: 2, bits: 16 }
    );
    b2.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(3));
}

#[test]
fn a_new_life_of_the_drainer_and_a_gate_do_not_both_take_a_switch_over() {
    let (pod, a, _drainer) = pumpless_drainer_dead_at(Point::AppendAfterPublish);
    assert_eq!(a.inspect().width_drainer(), Some(1));
    // `taker`: stopped before its CAS, then at the next point it reaches after it.
    let (to_main, main_hears) = channel();
    let (to_taker, taker_hears) = channel::<&'static str>();
    let taker = std::thread::spawn(move || {
        let mut stops = 0;
        chaos::with_hook(
            move |at| {
                if (stops == 0 && at == Point::WidthBeforeTakeover) || stops == 1 {
                    stops += 1;
                    to_main.send(at).unwrap();
                    assert_eq!(taker_hears.recv().unwrap(), "go");
                }
            },
            || a.write(b"k", &value(2)).map(drop),
        )
    });
    assert_eq!(main_hears.recv().unwrap(), Point::WidthBeforeTakeover);
    // The new life takes the switch over as it joins; `taker` tries its CAS meanwhile.
    let release = to_taker.clone();
    let next = chaos::with_hook(
        move |at| {
            if at == Point::WidthAfterTakeover {
                to_taker.send("go").unwrap();
                let at = main_hears.recv().unwrap();
                assert_ne!(at, Point::WidthBeforeTakeover);
                // Kept there until the new life holds its lock.
            }
        },
        || Host::join(&pod, Join::As(1), no_pump(3)).unwrap(),
    );
    let b2: &'static Host = Box::leak(Box::new(next));
    assert_eq!(a.inspect().width_drainer(), None);
    assert_eq!(
        b2.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 8 }
    );
    b2.write(b"k", &value(3)).unwrap();
    // Not dropped on a failed assertion (a ticket's drop unlocks, and panics on a word
    // zeroed under it).
    let held = std::mem::ManuallyDrop::new(b2.write_start(b"k").unwrap());
    assert_eq!(a.inspect().record_census().locked.len(), 1);
    release.send("go").unwrap();
    let _ = taker.join().unwrap();
    assert_eq!(
        a.inspect().record_census().locked.len(),
        1,
        "the lock the new life holds was zeroed by a second taker"
    );
    b2.write_end(std::mem::ManuallyDrop::into_inner(held))
        .unwrap();
    assert_eq!(read_tag(a, b"k"), Some(3));
}

/// A host whose takeover of a switch (its drainer dead, its row recovered) is stopped
/// after the CAS that names it, while a new life joins the drainer's id (it finds the
/// switch another host's) and the taker is declared dead and recovered: the switch is
/// left for a host that finds the taker gone. (The taker, finding itself dead as it
/// caught up, put the word back as it found it, naming the drainer's id: its holder, the
/// new life, lives and took nothing over, and every write waited on the switch for
/// good.)
#[test]
fn a_taker_declared_dead_leaves_the_switch_to_a_host_that_finds_it_gone() {
    let (pod, a, _drainer) = pumpless_drainer_dead_at(Point::WidthAfterGates);
    let (stopped, go, taker) = stopped_at(Point::WidthAfterTakeover, move || {
        a.write(b"k", &value(2)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    assert_eq!(a.inspect().width_drainer(), Some(0));
    let b2: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(3)).unwrap()));
    assert_eq!(a.inspect().width_drainer(), Some(0));
    a.inspect().freeze();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while b2.inspect().stats().hosts_recovered < 1 {
        assert!(std::time::Instant::now() < deadline, "a never recovered");
        std::thread::sleep(Duration::from_millis(20));
        b2.inspect().watch_hosts();
    }
    go.send("go").unwrap();
    let answer = taker.join().unwrap();
    assert!(
        matches!(answer, Err(Error::HostDeclaredDead { .. })),
        "{answer:?}"
    );
    let written = b2.write(b"k", &value(3)).map(drop);
    assert!(
        written.is_ok(),
        "a write after the taker's death: {written:?}"
    );
    assert_eq!(b2.inspect().width_drainer(), None);
    assert_eq!(read_tag(b2, b"k"), Some(3));
    assert_eq!(
        b2.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
}

/// The read across a switch above at the narrow widths, both ways between 2 and 4 bits,
/// where the record check alone is blindest: at 2 bits every record in use and unlocked
/// reads the same, and a record of the old width read over records of the new reads
/// in use, unlocked, at the counter the read's start saw once every record of the new
/// width is in use (4 to 2 bits: a counter of 2 is the bits of a 2-bit record in use;
/// 2 to 4 bits: a 4-bit record in use at counter 2 holds, at either half of its bits, a
/// 2-bit record in use). Only the log tells: `read_end`'s tail check applies the switch,
/// and the stamp check throws the torn copy away. (Fails with the mutant
/// `post-read-event-check`, at both.)
#[test]
fn a_read_across_a_switch_between_2_and_4_bits_whose_old_record_reads_unchanged_is_thrown_away() {
    for (from, to) in [(2, 4), (4, 2)] {
        let what = format!("{from} to {to} bits");
        // A record array of one line (256 records of 2 bits, 128 of 4), and a log long
        // enough for b (no pump) to hold its head through every write below.
        let base = one_line_of_records()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(4096);
        let pod = heap_pod(&base.record_width_bits(from));
        let HalfRead {
            b,
            ticket,
            mut copy,
            ..
        } = a_read_half_copied_across_a_switch(&pod, 64 * 8 / to, to, &what);
        ticket.read(SLOT / 2, &mut copy[SLOT / 2..]).unwrap();
        assert_eq!(tag_of(&copy), None, "{what}: the copy is torn");
        assert!(!b.read_end(ticket).unwrap(), "{what}: a torn copy accepted");
        assert_eq!(read_tag(b, b"k"), Some(9), "{what}: the read after");
    }
}

/// What [`a_read_half_copied_across_a_switch`] leaves.
struct HalfRead {
    a: &'static Host,
    b: &'static Host,
    ticket: ReadTicket<'static>,
    copy: Vec<u8>,
    /// `k`'s record at the old width.
    old: u32,
}

/// On `pod` (of one line of records): host a (its reclaimer frees no record) creates `k`
/// and writes it once (a record; at 4 bits, its counter 2), and creates `records - 1`
/// more objects; host b (no pump: its replica applies nothing it is not asked to) begins
/// a read of `k` and copies its first half; a switches the width to `to` bits, b
/// acknowledging the freeze by hand before the switch's event; then a writes `k` (value
/// 9) and every other object once, so that all `records` records of the new width are
/// in use and unlocked.
fn a_read_half_copied_across_a_switch(
    pod: &std::sync::Arc<Pod>,
    records: u32,
    to: u32,
    what: &str,
) -> HalfRead {
    let a: &'static Host = Box::leak(Box::new(
        Host::join(pod, Join::As(0), options(1).record_watermark(1.0)).unwrap(),
    ));
    let b: &'static Host = Box::leak(Box::new(
        Host::join(pod, Join::As(1), options(2).pump_interval(None)).unwrap(),
    ));
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    let old = a.lookup(b"k").unwrap().unwrap().record.expect("a record");
    let fill: Vec<Vec<u8>> = (1..records).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &fill {
        a.create(key, &value(0)).unwrap();
    }
    b.replay().unwrap();
    let ticket = b.read_start(b"k").unwrap();
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy[..SLOT / 2]).unwrap();
    let switched = chaos::with_hook(
        |at| {
            if at == Point::WidthAfterFreeze {
                b.replay().unwrap();
            }
        },
        || a.switch_record_width(to),
    );
    assert!(switched.unwrap(), "{what}: switched");
    a.write(b"k", &value(9)).unwrap();
    for key in &fill {
        a.write(key, &value(3)).unwrap();
    }
    assert_eq!(
        a.inspect().records_in_use(),
        (u64::from(records), u64::from(records)),
        "{what}: every record in use"
    );
    HalfRead {
        a,
        b,
        ticket,
        copy,
        old,
    }
}

/// A host paused past its lease, declared dead and recovered (its row taken by the id's
/// next life), wakes inside a gate and must not acknowledge a current freeze on the id's
/// behalf while the next life has a writer between its gate and its lock's CAS. (It
/// did, with no look at its row: the drain went past that writer, whose lock of the old
/// width the switch then zeroed, and a second writer got the object.) Hosts without a
/// pump, a pod without undo images (heap: `CrashSafety::Off`; with undo images the
/// drain's wait for announces held the switch off).
/// 1. `zombie` (host 1, first life) starts a write of `k` and stops at `GateAfterRaise`
///    (its gate raised, the width word not yet loaded); host 1 is frozen and recovered
///    by host 0 (`a`), its row freed.
/// 2. `b2` (host 1, next life) joins; its writer passes its gate (the word open at 0)
///    and stops at `WriteBeforeLock`: b2's gate is raised.
/// 3. `a` freezes the width word (switch to 8 bits). At `WidthAfterFreeze` the zombie
///    goes on: its gate loads the draining word, lowers its own gate (in its own DRAM)
///    and acknowledges the freeze into host 1's acknowledgement word.
/// 4. The drain finds host 1 acknowledged and no record locked; at `WidthBeforeEvent`
///    b2's writer goes on: it locks `k`'s 32-bit record, passes its event check, writes
///    and stops before its unlock, the lock held.
/// 5. The switch appends `WidthEnd`, zeroes the records (b2's lock with them), reopens.
///    A write of `a` then locks `k` at the new width: two writers of `k` at once.
#[test]
fn a_recovered_life_does_not_acknowledge_a_freeze_for_its_ids_next_life() {
    let pod = heap_pod(&config().record_width_switch(true).lease_ms(100));
    assert!(!pod.config().undo_images(), "a pod without undo images");
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), no_pump(1)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(2)).unwrap()));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();

    // 1. The zombie, inside its gate before its look at the word.
    let (stopped, zombie_go, zombie) = stopped_at(Point::GateAfterRaise, move || {
        b.write(b"k", &value(7)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    b.inspect().freeze();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.inspect().stats().hosts_recovered < 1 {
        assert!(std::time::Instant::now() < deadline, "b never recovered");
        std::thread::sleep(Duration::from_millis(20));
        a.inspect().watch_hosts();
    }

    // 2. The id's next life, a writer of it between its gate and its lock.
    let b2: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), no_pump(3)).unwrap()));
    let (to_main, main_hears) = channel::<&'static str>();
    let (writer_go, writer_hears) = channel::<&'static str>();
    let writer = std::thread::spawn(move || {
        let (mut before_lock, mut before_unlock) = (false, false);
        chaos::with_hook(
            move |at| {
                let stop = match at {
                    Point::WriteBeforeLock => !std::mem::replace(&mut before_lock, true),
                    Point::WriteBeforeUnlock => !std::mem::replace(&mut before_unlock, true),
                    _ => false,
                };
                // (Once the switch's hook is gone, nobody listens: no stop.)
                let said = if at == Point::WriteBeforeLock {
                    "before lock"
                } else {
                    "holding"
                };
                if stop && to_main.send(said).is_ok() {
                    let _ = writer_hears.recv();
                }
            },
            || b2.write(b"k", &value(2)).map(drop),
        )
    });
    assert_eq!(main_hears.recv().unwrap(), "before lock");

    // 3-5. a's switch.
    let mut zombie_slot = Some((zombie_go, zombie));
    let zombie_answer = std::rc::Rc::new(std::cell::RefCell::new(None));
    let writer_locked = std::rc::Rc::new(std::cell::Cell::new(false));
    let (zombie_answer_in, writer_locked_in) = (
        std::rc::Rc::clone(&zombie_answer),
        std::rc::Rc::clone(&writer_locked),
    );
    let writer_go_in = writer_go.clone();
    let switched = chaos::with_hook(
        move |at| match at {
            Point::WidthAfterFreeze => {
                if let Some((go, zombie)) = zombie_slot.take() {
                    go.send("go").unwrap();
                    *zombie_answer_in.borrow_mut() = Some(zombie.join().unwrap());
                }
            }
            Point::WidthBeforeEvent if !writer_locked_in.get() => {
                // The drain saw host 1 acknowledged and every lock free: b2's writer goes on.
                writer_go_in.send("go").unwrap();
                let heard = main_hears.recv_timeout(Duration::from_secs(5));
                writer_locked_in.set(heard == Ok("holding"));
            }
            _ => {}
        },
        || a.switch_record_width(8),
    );
    eprintln!("zombie's answer: {:?}", zombie_answer.borrow());
    eprintln!(
        "switch: {switched:?}; b2's writer held k's lock across it: {}",
        writer_locked.get()
    );
    if writer_locked.get() {
        // The harm, shown: a second writer of k while b2's writer still holds its lock.
        let census = a.inspect().record_census();
        eprintln!(
            "records locked after the switch (b2's lock zeroed?): {:?}",
            census.locked
        );
        let second = a.write_start(b"k").map(std::mem::forget);
        eprintln!(
            "a's write_start of k while b2 holds it: {:?}",
            second.as_ref().map(|_| "a ticket")
        );
        // b2's writer goes on (it unlocks what it thinks is its record).
        writer_go.send("go").unwrap();
        let b2_answer = writer.join();
        eprintln!("b2's writer's answer: {b2_answer:?}");
        panic!(
            "the switch drained past b2's writer inside its gate (acknowledged by host 1's \
             recovered life): b2 locked k's old record during the drain; a second writer: \
             {:?}",
            second.map(|_| "a ticket")
        );
    }
    assert!(
        matches!(switched, Err(Error::RecordWidthSwitching { .. })),
        "a switch past b2's raised gate: {switched:?}"
    );
    writer_go.send("go").unwrap();
    writer.join().unwrap().unwrap();
    // The switch again, b2 acknowledging it by hand (it has no pump).
    let again = chaos::with_hook(
        move |at| {
            if at == Point::WidthAfterFreeze {
                b2.replay().unwrap();
            }
        },
        || a.switch_record_width(8),
    );
    assert!(again.unwrap());
    assert_eq!(common::read_tag(a, b"k"), Some(2));
}
