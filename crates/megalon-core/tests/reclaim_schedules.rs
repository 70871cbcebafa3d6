//! Taking a coherence record away from an object (review `reclaim`, 2026-12-03: the
//! reclaimer, `make_read_shared`, a claim that makes room) against the object's writers,
//! deleters and readers on other hosts, each window stretched with a chaos hook that runs
//! the other party's steps inside it.
#![cfg(feature = "chaos")]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, read, tag_of, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{Error, Host, HostOptions, Join, MemoryKind, Pod};

const MAX_RETRIES: u32 = 5;
/// How often the adversary acts at most: far past the bound.
const ADVERSARY_TIMES: u32 = 200;

fn pod(bits: u32, switch: bool) -> Arc<Pod> {
    let config = config()
        .scr_bytes(64 << 10)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096)
        .record_width_bits(bits)
        .record_width_switch(switch);
    heap_pod(&config)
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(seed))
        .record_watermark(1.0)
        .max_retries(MAX_RETRIES)
        .wait_limit(Duration::from_millis(500))
        .pump_interval(None)
}

fn leak(pod: &Arc<Pod>, id: u32, seed: u64) -> &'static Host {
    let host = Host::join(pod, Join::As(id), options(seed)).expect("join");
    Box::leak(Box::new(host))
}

/// Runs `operation` on host `a` with `adversary` (host `b`'s steps) run inside its window
/// at `point`, at most [`ADVERSARY_TIMES`] times; returns the answer and how many times
/// the adversary acted.
fn with_adversary_at<R>(
    point: Point,
    mut adversary: impl FnMut() -> bool + 'static,
    operation: impl FnOnce() -> R,
) -> (R, u32) {
    let acted = Arc::new(AtomicU32::new(0));
    let answer = chaos::with_hook(
        {
            let acted = Arc::clone(&acted);
            move |at| {
                if at == point && acted.load(Ordering::Relaxed) < ADVERSARY_TIMES && adversary() {
                    acted.fetch_add(1, Ordering::Relaxed);
                }
            }
        },
        operation,
    );
    (answer, acted.load(Ordering::Relaxed))
}

/// A write whose object's record another host makes read-shared between the write's
/// lookup and its lock, every time: its lock CAS fails (the word is free now), it looks
/// again, finds no record, allocates one, and meets the same again. Each round is a
/// start-over (an allocation and a deallocation in the log between the write's lookup and
/// its lock), and the write must answer within `max_retries` of them, as a write that
/// backs out does. (Found: a lock that failed on a record freed since was not counted,
/// and the write allocated for as long as someone took its records away.)
#[test]
fn a_write_whose_record_is_taken_before_each_lock_answers_within_its_bound() {
    for bits in [2, 4, 8, 32] {
        for switch in [false, true] {
            let what = format!("{bits} bits, switch {switch}");
            let pod = pod(bits, switch);
            let (a, b) = (leak(&pod, 0, 1), leak(&pod, 1, 2));
            a.create(b"k", &value(1)).unwrap();
            a.write(b"k", &value(2)).unwrap();
            b.replay().unwrap();
            let (written, acted) = with_adversary_at(
                Point::WriteBeforeLock,
                move || b.make_read_shared(b"k").unwrap(),
                || a.write(b"k", &value(3)),
            );
            assert!(
                acted <= MAX_RETRIES + 1,
                "{what}: the write allocated {acted} times ({written:?})"
            );
            assert!(
                matches!(written, Err(Error::RetriesExhausted { .. })),
                "{what}: after {acted}: {written:?}"
            );
            // The object whole and usable.
            assert_eq!(tag_of(&read(b, b"k")), Some(2), "{what}");
            a.write(b"k", &value(4)).unwrap();
            assert_eq!(tag_of(&read(b, b"k")), Some(4), "{what}");
            assert!(a.inspect().record_census().locked.is_empty(), "{what}");
        }
    }
}

/// As the write above, a delete whose object's record another host takes away between the
/// delete's look at the record and its lock, and gives it a record anew (a write), every
/// time: the delete's lock CAS fails, it looks again and finds another record. Each round
/// has a deallocation and an allocation of the object in the log between the delete's
/// lookup and its lock: a start-over, within `max_retries`. The window is the gate's (a
/// pod whose record width may switch, whose gate lies between the load and the CAS).
#[test]
fn a_delete_whose_record_is_taken_and_given_anew_before_each_lock_answers_within_its_bound() {
    for bits in [2, 4, 8, 32] {
        let what = format!("{bits} bits");
        let pod = pod(bits, true);
        let (a, b) = (leak(&pod, 0, 3), leak(&pod, 1, 4));
        a.create(b"k", &value(1)).unwrap();
        a.write(b"k", &value(2)).unwrap();
        b.replay().unwrap();
        let tag = Arc::new(AtomicU32::new(2));
        let (deleted, acted) = with_adversary_at(
            Point::GateAfterRaise,
            {
                let tag = Arc::clone(&tag);
                move || {
                    if !b.make_read_shared(b"k").unwrap() {
                        return false;
                    }
                    let next = tag.fetch_add(1, Ordering::Relaxed) + 1;
                    b.write(b"k", &value(next as u8)).unwrap();
                    true
                }
            },
            || a.delete(b"k"),
        );
        assert!(
            acted <= MAX_RETRIES + 1,
            "{what}: the delete locked {acted} records ({deleted:?})"
        );
        assert!(
            matches!(deleted, Err(Error::RetriesExhausted { .. })),
            "{what}: after {acted}: {deleted:?}"
        );
        let last = tag.load(Ordering::Relaxed) as u8;
        assert_eq!(tag_of(&read(a, b"k")), Some(last), "{what}");
        assert!(a.inspect().record_census().locked.is_empty(), "{what}");
        a.delete(b"k").unwrap();
        assert!(b.lookup(b"k").unwrap().is_none(), "{what}");
    }
}

/// A pod of `bits`-bit records whose width may switch (so that a gate lies between each
/// lock's load and its CAS), with every record line but one taken by the application:
/// few enough records to fill.
fn small_switch_pod(bits: u32) -> Arc<Pod> {
    small_pod(bits, true)
}

/// [`small_switch_pod`], its width switching or fixed.
fn small_pod(bits: u32, switch: bool) -> Arc<Pod> {
    let config = config()
        .scr_bytes(4096)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096)
        .record_width_bits(bits)
        .record_width_switch(switch);
    let layout = megalon_core::Layout::new(&config).expect("layout");
    let bytes = layout.record_count * u64::from(bits) / 8;
    heap_pod(&config.app_scr_bytes(bytes - 64))
}

/// Writes that bring a record of `bits` back to the counter it had.
fn cycle(bits: u32) -> u32 {
    if bits == 2 {
        1
    } else {
        1 << (bits - 3)
    }
}

/// `x` written by `a` (it has a record), every other record taken by objects `o*`, and
/// `y` created read-shared: a record freed is the only free one.
fn x_and_full_records(a: &Host) -> u32 {
    a.create(b"x", &value(1)).unwrap();
    a.write(b"x", &value(2)).unwrap();
    let (in_use, records) = a.inspect().records_in_use();
    for i in in_use..records {
        let key = format!("o{i}");
        a.create(key.as_bytes(), &value(3)).unwrap();
        a.write(key.as_bytes(), &value(4)).unwrap();
    }
    a.create(b"y", &value(5)).unwrap();
    a.lookup(b"x").unwrap().unwrap().record.unwrap()
}

/// What is true of a pod at rest: no record locked, the count of records in use the
/// census's, every record in use named by exactly one object on every host.
fn at_rest(hosts: &[&Host], what: &str) -> Result<(), String> {
    for host in hosts {
        host.replay().map_err(|e| format!("{what}: replay {e}"))?;
        let census = host.inspect().record_census();
        if !census.locked.is_empty() {
            return Err(format!("{what}: locked {:?}", census.locked));
        }
    }
    let (in_use, _) = hosts[0].inspect().records_in_use();
    let census = hosts[0].inspect().record_census();
    if in_use != census.in_use.len() as u64 {
        return Err(format!(
            "{what}: the count {in_use}, in use {:?}",
            census.in_use
        ));
    }
    for &record in &census.in_use {
        let owners: Vec<_> = hosts
            .iter()
            .map(|host| host.record_owner(record).unwrap())
            .collect();
        if owners[0].is_none() || owners.iter().any(|owner| *owner != owners[0]) {
            return Err(format!("{what}: record {record}: {owners:?}"));
        }
    }
    Ok(())
}

/// Two deallocations of one record: host `a`'s `make_read_shared(x)` loaded x's record
/// word and stops before its lock (at its gate); host `b` makes x read-shared, and the
/// record, the only free one, goes to `y` (or back to `x`), written through a whole
/// counter cycle, so that the word is the very one `a` loaded. `a`'s CAS takes the lock:
/// holding it, it must see that x no longer has the record (and let go, the word as it
/// was) or that x has it anew (and deallocate it as x's). Either way every record has one
/// owner, nothing stays locked, and every object reads whole.
#[test]
fn a_deallocation_whose_record_was_deallocated_and_reassigned_before_its_lock() {
    for bits in [2, 4, 8] {
        for back_to_x in [false, true] {
            let what = format!("{bits} bits, back to x {back_to_x}");
            let pod = small_switch_pod(bits);
            let (a, b) = (leak(&pod, 0, 5), leak(&pod, 1, 6));
            let record = x_and_full_records(a);
            b.replay().unwrap();
            let mut once = true;
            let key: &'static [u8] = if back_to_x { b"x" } else { b"y" };
            let (dealt, _) = with_adversary_at(
                Point::GateAfterRaise,
                move || {
                    if !std::mem::take(&mut once) {
                        return false;
                    }
                    assert!(b.make_read_shared(b"x").unwrap());
                    for i in 0..cycle(bits) {
                        b.write(key, &value(20 + i as u8)).unwrap();
                    }
                    assert_eq!(b.lookup(key).unwrap().unwrap().record, Some(record));
                    true
                },
                || a.make_read_shared(b"x"),
            );
            let last = 20 + cycle(bits) as u8 - 1;
            assert_eq!(dealt.unwrap(), back_to_x, "{what}");
            assert_eq!(
                b.lookup(b"y").unwrap().unwrap().record,
                (!back_to_x).then_some(record),
                "{what}"
            );
            at_rest(&[a, b], &what).unwrap();
            let (x, y) = if back_to_x { (last, 5) } else { (2, last) };
            for host in [a, b] {
                assert_eq!(tag_of(&read(host, b"x")), Some(x), "{what}");
                assert_eq!(tag_of(&read(host, b"y")), Some(y), "{what}");
            }
            a.write(b"x", &value(60)).unwrap();
            b.write(b"y", &value(61)).unwrap();
            assert_eq!(tag_of(&read(b, b"x")), Some(60), "{what}");
            assert_eq!(tag_of(&read(a, b"y")), Some(61), "{what}");
            at_rest(&[a, b], &what).unwrap();
        }
    }
}

/// A deallocation whose event is applied and whose record is still locked (before its
/// free): another host deletes the object (read-shared in the log), creates it again and
/// writes it (a record by churn, never the one still locked), and a third reads it. Then
/// the free: the record is free, the new object's record its own, both whole.
#[test]
fn a_delete_and_create_between_a_deallocations_event_and_its_free() {
    for bits in [2, 4, 8, 32] {
        let what = format!("{bits} bits");
        let pod = small_switch_pod(bits);
        let (a, b, r) = (leak(&pod, 0, 7), leak(&pod, 1, 8), leak(&pod, 2, 9));
        let record = x_and_full_records(a);
        let mut once = true;
        let (dealt, _) = with_adversary_at(
            Point::ReleaseBeforeFree,
            move || {
                if !std::mem::take(&mut once) {
                    return false;
                }
                b.delete(b"x").unwrap();
                b.create(b"x", &value(30)).unwrap();
                b.write(b"x", &value(31)).unwrap();
                let new = b.lookup(b"x").unwrap().unwrap().record;
                assert!(new.is_some() && new != Some(record), "{new:?}");
                assert_eq!(tag_of(&read(r, b"x")), Some(31));
                true
            },
            || a.make_read_shared(b"x"),
        );
        assert!(dealt.unwrap(), "{what}");
        at_rest(&[a, b, r], &what).unwrap();
        assert_eq!(b.record_owner(record).unwrap(), None, "{what}");
        for host in [a, b, r] {
            assert_eq!(tag_of(&read(host, b"x")), Some(31), "{what}");
        }
        a.write(b"y", &value(40)).unwrap();
        assert_eq!(tag_of(&read(r, b"y")), Some(40), "{what}");
        at_rest(&[a, b, r], &what).unwrap();
    }
}

/// A reader whose `read_start` saw x's record locked by a deallocation (at 4 bits and
/// more a lock that leaves the counter even is no write: the read goes on), copies half
/// of x, and the rest after the deallocation ended and another host wrote x again (with a
/// record claimed anew: the old one, the only one free, at the counter the reader saw).
/// `read_end` must refuse the copy, or it is one whole version.
#[test]
fn a_read_begun_under_a_deallocations_lock_and_ended_after_x_was_written_anew() {
    for bits in [4, 8, 32] {
        let what = format!("{bits} bits");
        let pod = small_switch_pod(bits);
        let (a, b, r) = (leak(&pod, 0, 10), leak(&pod, 1, 11), leak(&pod, 2, 12));
        let record = x_and_full_records(a);
        // The reader caches x's lines at version 2.
        assert_eq!(tag_of(&read(r, b"x")), Some(2));
        let ticket = Arc::new(std::sync::Mutex::new(None));
        let copy = Arc::new(std::sync::Mutex::new(vec![0u8; SLOT]));
        let mut once = true;
        let (dealt, _) = with_adversary_at(
            Point::ReleaseAfterLock,
            {
                let (ticket, copy) = (Arc::clone(&ticket), Arc::clone(&copy));
                move || {
                    if !std::mem::take(&mut once) {
                        return false;
                    }
                    let t = r.read_start(b"x").unwrap();
                    t.read(0, &mut copy.lock().unwrap()[..SLOT / 2]).unwrap();
                    *ticket.lock().unwrap() = Some(t);
                    true
                }
            },
            || a.make_read_shared(b"x"),
        );
        assert!(dealt.unwrap(), "{what}");
        b.write(b"x", &value(50)).unwrap();
        let t = ticket.lock().unwrap().take().unwrap();
        let mut copy = copy.lock().unwrap();
        t.read(SLOT / 2, &mut copy[SLOT / 2..]).unwrap();
        let accepted = r.read_end(t).unwrap();
        assert!(
            !accepted || matches!(tag_of(&copy), Some(2 | 50)),
            "{what}: accepted {:?} (record {record})",
            &copy[..4]
        );
        assert_eq!(tag_of(&read(r, b"x")), Some(50), "{what}");
        at_rest(&[a, b, r], &what).unwrap();
    }
}

/// Keys of the stress, each with tags of its own (`key * 8 + n % 8`): a read that returns
/// another key's tag read another object's bytes.
const STRESS_KEYS: u8 = 32;

/// Three hosts on a simulated cache, pumps whose reclaimers keep a fifth of the records in
/// use, chaos preemptions, and threads that write, read, delete and create the keys, make
/// them read-shared, and (in pods that may) switch the record width (2, 4, 8 bits) now
/// and then. Every read
/// that succeeds is one whole version of its key; at rest no record is locked, the count
/// is the census's, each record in use has one owner on every host, and every key reads
/// the same whole value on every host.
#[test]
fn reclaimers_deallocations_and_width_switches_under_preemption_keep_every_read_whole() {
    use megalon_core::chaos::ChaosConfig;
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;
    let seconds: u64 = common::env_var("RECLAIM_SCHEDULES_SECONDS").unwrap_or(1);
    // Appends refused and left unconfirmed once in this many (0: never).
    let faults: u32 = common::env_var("RECLAIM_SCHEDULES_FAULTS").unwrap_or(0);
    for (bits, switch) in [(2, true), (4, true), (2, false), (8, false)] {
        let pod = small_pod(bits, switch);
        let hosts: Vec<&'static Host> = (0..3)
            .map(|id| {
                let options = options(20 + u64::from(id))
                    .memory(common::simulated(30 + u64::from(id), 256, 16))
                    .max_retries(10_000)
                    .record_watermark(0.2)
                    .pump_interval(Some(Duration::from_millis(1)))
                    .chaos(ChaosConfig::preemptions(40 + u64::from(id), 8).faults(faults, faults));
                let host = Host::join(&pod, Join::As(id), options).expect("join");
                &*Box::leak(Box::new(host))
            })
            .collect();
        let written: Arc<Mutex<HashMap<u8, HashSet<u8>>>> = Arc::default();
        for key in 0..STRESS_KEYS {
            // (An injected fault may leave a create done, or not.)
            while !matches!(
                hosts[0].create(&[key], &value(key * 8)),
                Ok(()) | Err(Error::ObjectExists)
            ) {}
            written.lock().unwrap().insert(key, [key * 8].into());
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, &host) in hosts.iter().enumerate() {
            let (written, stop) = (Arc::clone(&written), Arc::clone(&stop));
            threads.push(std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9_u64 + i as u64;
                let mut next = |n: u64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % n
                };
                let mut n = 0u8;
                let mut buf = vec![0u8; SLOT];
                while !stop.load(Ordering::Relaxed) {
                    let key = next(u64::from(STRESS_KEYS)) as u8;
                    n = n.wrapping_add(1);
                    let tag = key * 8 + n % 8;
                    match next(16) {
                        0..=5 => {
                            // Noted before: a read may see it as soon as it is written.
                            written.lock().unwrap().get_mut(&key).unwrap().insert(tag);
                            let _ = host.write(&[key], &value(tag));
                        }
                        6..=11 => match host.read(&[key], &mut buf) {
                            Ok(_) => {
                                let got = tag_of(&buf);
                                let ok = got.is_some_and(|got| {
                                    written.lock().unwrap()[&key].contains(&got)
                                });
                                assert!(ok, "{bits} bits: key {key} read {:?}", &buf[..4]);
                            }
                            Err(Error::UnknownKey) => {}
                            Err(_) => {}
                        },
                        12 => {
                            let _ = host.delete(&[key]);
                        }
                        13 => {
                            written.lock().unwrap().get_mut(&key).unwrap().insert(tag);
                            let _ = host.create(&[key], &value(tag));
                        }
                        14 => {
                            let _ = host.make_read_shared(&[key]);
                        }
                        _ => {
                            if switch && i == 0 && next(64) == 0 {
                                let bits = [2, 4, 8][next(3) as usize];
                                let _ = host.switch_record_width(bits);
                            }
                        }
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            thread.join().expect("a stress thread");
        }
        // The pumps' reclaimers may still work: give them a moment, then look.
        std::thread::sleep(Duration::from_millis(50));
        let what = format!("{bits} bits at the start, switch {switch}");
        for key in 0..STRESS_KEYS {
            let seen: Vec<_> = hosts
                .iter()
                .map(|host| common::read_opt_tag(host, &[key]).unwrap())
                .collect();
            assert!(
                seen.iter().all(|tag| *tag == seen[0] && *tag != Some(None)),
                "{what}: key {key}: {seen:?}"
            );
        }
        let deallocs: u64 = hosts.iter().map(|h| h.events().record_deallocs).sum();
        let allocs: u64 = hosts.iter().map(|h| h.events().record_allocs).sum();
        eprintln!(
            "{what}: {allocs} allocs, {deallocs} deallocs, width {:?}, errors {:?}",
            hosts[0].record_width().unwrap(),
            hosts
                .iter()
                .map(|h| h
                    .inspect()
                    .background_errors()
                    .by_kind
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
        assert!(deallocs > 0, "{what}: no deallocation");
        // At rest (a pump's reclaimer may hold a lock for a moment: looked at again).
        let mut rest = at_rest(&hosts, &what);
        for _ in 0..200 {
            if rest.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            rest = at_rest(&hosts, &what);
        }
        rest.unwrap();
    }
}

/// A writer of x on host `a` looked x's record up and stops before its lock: host `b`
/// makes x read-shared and gives the record (the only free one) to y, written through a
/// whole counter cycle, so that the word is the one the writer loaded; with `replayed`,
/// host `a` applies all of that first (its catch-up after the lock then finds nothing
/// new). The writer's CAS locks y's record: it must back out (the record as it was), and
/// write x with a record of x's own. A reader of y on a third host meanwhile reads y's
/// last version whole, and at rest each record has one owner.
#[test]
fn a_writer_whose_record_went_to_another_object_at_the_same_word_backs_out() {
    for bits in [2, 4, 8] {
        for replayed in [false, true] {
            let what = format!("{bits} bits, replayed {replayed}");
            let pod = small_switch_pod(bits);
            let (a, b, r) = (leak(&pod, 0, 13), leak(&pod, 1, 14), leak(&pod, 2, 15));
            let record = x_and_full_records(a);
            b.replay().unwrap();
            let mut once = true;
            let last = 70 + cycle(bits) as u8 - 1;
            let (written, _) = with_adversary_at(
                Point::WriteBeforeLock,
                move || {
                    if !std::mem::take(&mut once) {
                        return false;
                    }
                    assert!(b.make_read_shared(b"x").unwrap());
                    for i in 0..cycle(bits) {
                        b.write(b"y", &value(70 + i as u8)).unwrap();
                    }
                    assert_eq!(b.lookup(b"y").unwrap().unwrap().record, Some(record));
                    if replayed {
                        a.replay().unwrap();
                    }
                    assert_eq!(tag_of(&read(r, b"y")), Some(last));
                    true
                },
                || a.write(b"x", &value(90)),
            );
            written.unwrap();
            let x = a.lookup(b"x").unwrap().unwrap().record;
            assert!(x.is_some() && x != Some(record), "{what}: x's record {x:?}");
            at_rest(&[a, b, r], &what).unwrap();
            for host in [a, b, r] {
                assert_eq!(tag_of(&read(host, b"x")), Some(90), "{what}");
                assert_eq!(tag_of(&read(host, b"y")), Some(last), "{what}");
            }
        }
    }
}

/// A width switch tried while a deallocation holds its lock (before its check, and after
/// its event before its free): the switch cannot drain the record and gives up within its
/// limit, touching nothing (no record zeroed under the lock, no count zeroed before the
/// free's count-off); the deallocation ends as if alone, and a switch after it succeeds.
#[test]
fn a_width_switch_tried_while_a_deallocation_holds_its_lock_gives_up_and_changes_nothing() {
    for point in [Point::ReleaseAfterLock, Point::ReleaseBeforeFree] {
        for bits in [2, 4, 8] {
            let what = format!("{bits} bits at {point:?}");
            let pod = small_switch_pod(bits);
            // With pumps: a switch waits for every host's acknowledgement.
            let pumped = |id: u32| -> &'static Host {
                let options =
                    options(16 + u64::from(id)).pump_interval(Some(Duration::from_millis(1)));
                Box::leak(Box::new(
                    Host::join(&pod, Join::As(id), options).expect("join"),
                ))
            };
            let (a, b) = (pumped(0), pumped(1));
            let record = x_and_full_records(a);
            b.replay().unwrap();
            let to = if bits == 8 { 4 } else { 8 };
            let mut once = true;
            let (dealt, _) = with_adversary_at(
                point,
                move || {
                    if !std::mem::take(&mut once) {
                        return false;
                    }
                    let switched = b.switch_record_width(to);
                    assert!(!matches!(switched, Ok(true)), "{switched:?}");
                    let census = b.inspect().record_census();
                    assert_eq!(census.locked, vec![record]);
                    true
                },
                || a.make_read_shared(b"x"),
            );
            assert!(dealt.unwrap(), "{what}");
            at_rest(&[a, b], &what).unwrap();
            assert_eq!(b.record_width().unwrap().bits, bits, "{what}");
            assert!(b.switch_record_width(to).unwrap(), "{what}");
            at_rest(&[a, b], &what).unwrap();
            a.write(b"x", &value(80)).unwrap();
            b.write(b"y", &value(81)).unwrap();
            assert_eq!(tag_of(&read(b, b"x")), Some(80), "{what}");
            assert_eq!(tag_of(&read(a, b"y")), Some(81), "{what}");
            at_rest(&[a, b], &what).unwrap();
        }
    }
}
