//! Reads of narrow records (2, 4 and 8 bits) whose window between `read_start` and
//! `read_end` is stretched while another host writes the object through whole counter
//! cycles, deallocates its record and gives it to another object, deletes and re-creates
//! it. A read that `read_end` accepts must hold one whole version that was current at
//! some moment of its window. (Review `narrow`, 2026-11-30.)
#![cfg(feature = "chaos")]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use common::{one_record_line_pod, simulated, tag_of, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{Host, HostOptions, Join, Pod};

fn options(seed: u64) -> HostOptions {
    // No random eviction: a stale line stays until something drops it.
    HostOptions::new()
        .memory(simulated(seed, 4096, 0))
        .record_watermark(1.0)
        .wait_limit(std::time::Duration::from_millis(500))
        .pump_interval(None)
}

fn leak(pod: &Arc<Pod>, id: u32, seed: u64) -> &'static Host {
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options(seed)).expect("join"),
    ))
}

/// Writes of `k` that bring a record of `bits` back to the counter it had.
fn cycle(bits: u32) -> u32 {
    if bits == 2 {
        1
    } else {
        1 << (bits - 3)
    }
}

/// What the other host does inside the reader's window.
#[derive(Clone, Copy, Debug)]
enum Adversary {
    /// A whole counter cycle of writes (one wrap event).
    Cycle,
    /// Two cycles.
    TwoCycles,
    /// `k` made read-shared, its record given to `j`, `j` written through a cycle, and
    /// `k` written again (with another record, by churn).
    Reassign,
    /// `k` deleted and created again, then written through a cycle.
    Recreate,
    /// `k` made read-shared and written again: its record, the only one free, comes back
    /// to it, its word as the read's start saw it (at 2 bits, any record in use and
    /// unlocked is), and `k` is written through a cycle less the write that took it.
    Realloc,
}

struct World {
    reader: &'static Host,
    writer: &'static Host,
    /// Tags `k` held from the start of the window on.
    allowed: Arc<Mutex<BTreeSet<u8>>>,
    next: Arc<Mutex<u8>>,
    bits: u32,
}

impl World {
    fn new(bits: u32, seed: u64) -> World {
        let pod = one_record_line_pod(bits);
        let writer = leak(&pod, 0, seed);
        let reader = leak(&pod, 1, seed + 1);
        writer.create(b"k", &value(1)).unwrap();
        writer.write(b"k", &value(2)).unwrap();
        // Fill every record but none: `j` then gets `k`'s once `k` lets it go.
        let (in_use, records) = writer.inspect().records_in_use();
        for i in in_use..records {
            let key = format!("o{i}");
            writer.create(key.as_bytes(), &value(3)).unwrap();
            writer.write(key.as_bytes(), &value(4)).unwrap();
        }
        writer.create(b"j", &value(5)).unwrap();
        reader.replay().unwrap();
        // The reader caches k's lines of version 2 at the record's counter.
        let mut buf = vec![0u8; SLOT];
        reader.read(b"k", &mut buf).unwrap();
        assert_eq!(tag_of(&buf), Some(2));
        // Then the writer moves k on a cycle less one write: the reader's lines stale.
        let mut next = 10u8;
        for _ in 0..cycle(bits).saturating_sub(1) {
            writer.write(b"k", &value(next)).unwrap();
            next += 1;
        }
        let current = next - 1;
        let current = if cycle(bits) == 1 { 2 } else { current };
        World {
            reader,
            writer,
            allowed: Arc::new(Mutex::new([current].into())),
            next: Arc::new(Mutex::new(next)),
            bits,
        }
    }

    /// The adversary's actions, as a closure the reader's hook may run once.
    fn act(&self, adversary: Adversary) -> impl FnMut() + Send + 'static {
        let (writer, allowed, next, bits) = (
            self.writer,
            Arc::clone(&self.allowed),
            Arc::clone(&self.next),
            self.bits,
        );
        move || {
            let write_k = |n: u32| {
                for _ in 0..n {
                    let mut next = next.lock().unwrap();
                    writer.write(b"k", &value(*next)).unwrap();
                    allowed.lock().unwrap().insert(*next);
                    *next += 1;
                }
            };
            match adversary {
                Adversary::Cycle => write_k(cycle(bits)),
                Adversary::TwoCycles => write_k(2 * cycle(bits)),
                Adversary::Reassign => {
                    let record = writer.lookup(b"k").unwrap().unwrap().record;
                    assert!(writer.make_read_shared(b"k").unwrap());
                    for i in 0..cycle(bits) {
                        writer.write(b"j", &value(100 + i as u8)).unwrap();
                    }
                    assert_eq!(writer.lookup(b"j").unwrap().unwrap().record, record);
                    write_k(cycle(bits));
                }
                Adversary::Realloc => {
                    let record = writer.lookup(b"k").unwrap().unwrap().record;
                    assert!(writer.make_read_shared(b"k").unwrap());
                    write_k(cycle(bits));
                    assert_eq!(writer.lookup(b"k").unwrap().unwrap().record, record);
                }
                Adversary::Recreate => {
                    writer.delete(b"k").unwrap();
                    let tag = {
                        let mut next = next.lock().unwrap();
                        *next += 1;
                        *next - 1
                    };
                    writer.create(b"k", &value(tag)).unwrap();
                    allowed.lock().unwrap().insert(tag);
                    write_k(cycle(bits));
                }
            }
        }
    }

    fn check(&self, what: &str, copy: &[u8]) {
        let tag = tag_of(copy).unwrap_or_else(|| panic!("{what}: a torn copy accepted"));
        let allowed = self.allowed.lock().unwrap();
        assert!(
            allowed.contains(&tag),
            "{what}: accepted version {tag}, not current during the read ({allowed:?})"
        );
    }
}

const ADVERSARIES: [Adversary; 5] = [
    Adversary::Cycle,
    Adversary::TwoCycles,
    Adversary::Reassign,
    Adversary::Recreate,
    Adversary::Realloc,
];

/// Points inside `read_start` and `read_end` where the adversary acts.
const POINTS: [Point; 4] = [
    Point::ReadAfterTailCheck,
    Point::ReadAfterCounter,
    Point::ReadEndBetweenChecks,
    Point::LookBeforeValidation,
];

/// The ticket calls: the adversary at a point inside the read, or between the copy's two
/// halves, or between `read_start` and the copy.
#[test]
fn a_ticket_read_accepts_only_a_whole_current_version() {
    for bits in [2, 4, 8] {
        for adversary in ADVERSARIES {
            for where_ in 0..POINTS.len() + 2 {
                let world = World::new(bits, 40 + u64::from(bits));
                let what = format!("{bits} bits, {adversary:?}, at {where_}");
                let mut act = Some(world.act(adversary));
                let point = POINTS.get(where_).copied();
                let reader = world.reader;
                let mut copy = vec![0u8; SLOT];
                let accepted = if let Some(point) = point {
                    chaos::with_hook(
                        move |at| {
                            if at == point {
                                if let Some(mut act) = act.take() {
                                    act();
                                }
                            }
                        },
                        || {
                            let ticket = reader.read_start(b"k").unwrap();
                            ticket.read(0, &mut copy).unwrap();
                            reader.read_end(ticket).unwrap()
                        },
                    )
                } else {
                    let ticket = reader.read_start(b"k").unwrap();
                    let mut act = act.take().unwrap();
                    if where_ == POINTS.len() {
                        act();
                        ticket.read(0, &mut copy).unwrap();
                    } else {
                        ticket.read(0, &mut copy[..SLOT / 2]).unwrap();
                        act();
                        ticket.read(SLOT / 2, &mut copy[SLOT / 2..]).unwrap();
                    }
                    reader.read_end(ticket).unwrap()
                };
                if accepted {
                    world.check(&what, &copy);
                }
                // And the next read sees the last version.
                let mut buf = vec![0u8; SLOT];
                reader.read(b"k", &mut buf).unwrap();
                let last = *world.allowed.lock().unwrap().iter().next_back().unwrap();
                assert_eq!(tag_of(&buf), Some(last), "{what}: the read after");
            }
        }
    }
}

/// The safe calls (`read`, `read_prefix`, `read_many` with `k` twice among others): the
/// adversary at a point of the first try.
#[test]
fn the_safe_reads_accept_only_a_whole_current_version() {
    for bits in [2, 4, 8] {
        for adversary in ADVERSARIES {
            for point in POINTS.into_iter().chain([Point::ReadBeforeEnd]) {
                for call in 0..3 {
                    let world = World::new(bits, 70 + u64::from(bits));
                    let what = format!("{bits} bits, {adversary:?}, at {point:?}, call {call}");
                    let mut act = Some(world.act(adversary));
                    let reader = world.reader;
                    let copies = chaos::with_hook(
                        move |at| {
                            if at == point {
                                if let Some(mut act) = act.take() {
                                    act();
                                }
                            }
                        },
                        || {
                            let mut buf = vec![0u8; SLOT];
                            match call {
                                0 => {
                                    reader.read(b"k", &mut buf).unwrap();
                                    vec![buf]
                                }
                                1 => {
                                    let (n, _) =
                                        reader.read_prefix(b"k", &mut buf, &|_| SLOT).unwrap();
                                    assert_eq!(n, SLOT);
                                    vec![buf]
                                }
                                _ => {
                                    let mut bufs = vec![vec![0u8; SLOT]; 3];
                                    let keys: [&[u8]; 3] = [b"k", b"j", b"k"];
                                    let mut reads: Vec<(&[u8], &mut [u8])> = keys
                                        .iter()
                                        .copied()
                                        .zip(bufs.iter_mut().map(Vec::as_mut_slice))
                                        .collect();
                                    for answer in reader.read_many(&mut reads) {
                                        answer.unwrap();
                                    }
                                    vec![bufs[0].clone(), bufs[2].clone()]
                                }
                            }
                        },
                    );
                    for copy in copies {
                        world.check(&what, &copy);
                    }
                }
            }
        }
    }
}

/// The sibling of issue 13's defect 1 at 4 and 8 bits: a copy torn by a write in
/// progress, and between `read_end`'s two checks the writer ends that write and brings
/// the record back to the counter the reader saw, either through a whole cycle of `k`'s
/// writes or by giving the record to `j` (dealloc, alloc) and writing `j` until the word
/// matches. Checking the counter first sees the write in progress either way.
#[test]
fn a_torn_copy_is_refused_whatever_brings_the_word_back_between_the_checks() {
    for bits in [4, 8] {
        for reassign in [true, false] {
            let world = World::new(bits, 90 + u64::from(bits));
            let (reader, writer) = (world.reader, world.writer);
            let what = format!("{bits} bits, reassign {reassign}");
            let record = writer.lookup(b"k").unwrap().unwrap().record.unwrap();
            let ticket = reader.read_start(b"k").unwrap();
            let write = writer.write_start(b"k").unwrap();
            write.write(0, &value(200)[..SLOT / 2]).unwrap();
            // The simulated memory completes a store to memory at the writer's next fence.
            writer.memory().fence();
            let mut copy = vec![0u8; SLOT];
            ticket.read(0, &mut copy).unwrap();
            assert!(tag_of(&copy).is_none(), "{what}: the copy is torn");
            let mut write = Some(write);
            let accepted = chaos::with_hook(
                move |point| {
                    if point != Point::ReadEndBetweenChecks {
                        return;
                    }
                    let Some(write) = write.take() else { return };
                    write.write(SLOT / 2, &value(200)[SLOT / 2..]).unwrap();
                    writer.write_end(write).unwrap();
                    let key: &[u8] = if reassign {
                        assert!(writer.make_read_shared(b"k").unwrap());
                        b"j"
                    } else {
                        b"k"
                    };
                    // Write until the word is back where the reader saw it: one write
                    // less than a cycle (the write above was one; a record keeps its
                    // counter across owners).
                    let writes = cycle(bits) - 1;
                    for i in 0..writes {
                        writer.write(key, &value(201 + i as u8)).unwrap();
                    }
                    if reassign {
                        assert_eq!(writer.lookup(b"j").unwrap().unwrap().record, Some(record));
                    }
                },
                || reader.read_end(ticket).unwrap(),
            );
            assert!(!accepted, "{what}: read_end accepted a torn copy");
        }
    }
}

/// A write in progress from before the reader's tail check: the writer has locked `k`
/// (at 2 bits its wrap event is in the log already) and written half of a new value
/// when the reader starts. The tail check of
/// `read_start` finds nothing new then, and neither does `read_end`'s once the write
/// ends, so at 2 bits (no counter) only the lock tells the reader that a write is in
/// progress: it must wait for it in `read_start`. The writer ends its write at the
/// reader's second look at the record (`ReadAfterCounter`), or else between the copy and
/// `read_end`. The defect it would catch: a 2-bit reader that takes a locked word for a
/// version (as at 4 bits and more, where only an odd counter means a write) copies the
/// half-written value, and `read_end` accepts it.
#[test]
fn a_read_waits_for_a_write_that_began_before_its_tail_check() {
    use std::cell::RefCell;
    use std::rc::Rc;
    for bits in [2, 4, 8] {
        for ticket_calls in [false, true] {
            let world = World::new(bits, 110 + u64::from(bits));
            let (reader, writer) = (world.reader, world.writer);
            let what = format!("{bits} bits, ticket calls {ticket_calls}");
            let write = writer.write_start(b"k").unwrap();
            write.write(0, &value(200)[..SLOT / 2]).unwrap();
            // The simulated memory completes a store to memory at the writer's next fence.
            writer.memory().fence();
            world.allowed.lock().unwrap().insert(200);
            let write = Rc::new(RefCell::new(Some(write)));
            let finish = {
                let write = Rc::clone(&write);
                move || {
                    if let Some(write) = write.borrow_mut().take() {
                        write.write(SLOT / 2, &value(200)[SLOT / 2..]).unwrap();
                        writer.write_end(write).unwrap();
                    }
                }
            };
            let mut looks = 0;
            let mut copy = vec![0u8; SLOT];
            let accepted = chaos::with_hook(
                {
                    let finish = finish.clone();
                    move |at| match at {
                        Point::ReadAfterCounter => {
                            looks += 1;
                            if looks == 2 {
                                finish();
                            }
                        }
                        Point::ReadBeforeEnd => finish(),
                        _ => {}
                    }
                },
                || {
                    if ticket_calls {
                        let ticket = reader.read_start(b"k").unwrap();
                        ticket.read(0, &mut copy).unwrap();
                        finish();
                        reader.read_end(ticket).unwrap()
                    } else {
                        reader.read(b"k", &mut copy).unwrap();
                        true
                    }
                },
            );
            assert!(write.borrow().is_none(), "{what}: the write ended");
            if accepted {
                world.check(&what, &copy);
            }
        }
    }
}
