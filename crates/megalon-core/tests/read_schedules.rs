//! Reads under schedules of an adversary's choosing, on narrow records (2, 4, 8 bits):
//! several read tickets open at once on one host, each copied in two halves, and between
//! any two of their steps another host (or the reader's own) writes through counter
//! cycles (exactly one, one less, one more), deletes and re-creates, or lets the record
//! go. Every copy `read_end` accepts must be one whole version current during its
//! ticket, and a plain read (and a `read_many`) afterwards must give the last version: a
//! host counter noted wrong by one of the interleaved tickets would serve stale lines
//! there. `read_many` is also run with the adversary inside a later read of the call, at
//! each of its chaos points. Built with the `chaos` feature only (`cargo xtask mutants`
//! runs it unmutated; `MEGALON_READ_SCHEDULES_ROUNDS` sets the rounds per width).
#![cfg(feature = "chaos")]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{one_record_line_pod, simulated, tag_of, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{Host, HostOptions, Join, Pod, ReadTicket};

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 4096, 0))
        .record_watermark(1.0)
        .wait_limit(std::time::Duration::from_millis(200))
        .pump_interval(None)
}

fn join(pod: &Arc<Pod>, id: u32, seed: u64) -> Arc<Host> {
    Arc::new(Host::join(pod, Join::As(id), options(seed)).expect("join"))
}

fn cycle(bits: u32) -> u32 {
    if bits == 2 {
        1
    } else {
        1 << (bits - 3)
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Open<'h> {
    ticket: ReadTicket<'h>,
    copy: Vec<u8>,
    halves: [bool; 2],
    allowed: BTreeSet<u8>,
}

struct World {
    reader: Arc<Host>,
    writer: Arc<Host>,
    bits: u32,
    tag: u8,
    current: u8,
}

impl World {
    fn new(bits: u32, seed: u64) -> World {
        let pod = one_record_line_pod(bits);
        let writer = join(&pod, 0, seed);
        let reader = join(&pod, 1, seed + 1);
        writer.create(b"k", &value(1)).unwrap();
        writer.write(b"k", &value(2)).unwrap();
        writer.create(b"j", &value(3)).unwrap();
        writer.write(b"j", &value(4)).unwrap();
        reader.replay().unwrap();
        World {
            reader,
            writer,
            bits,
            tag: 10,
            current: 2,
        }
    }

    fn next_tag(&mut self) -> u8 {
        let t = self.tag;
        self.tag = self.tag.wrapping_add(1).max(10);
        t
    }

    /// One adversary action; returns a description.
    fn act(&mut self, rng: &mut Rng, open: &mut [Option<Open<'_>>]) -> String {
        let choice = rng.below(9);
        let writes = |w: &mut World, host: &Host, n: u32, open: &mut [Option<Open<'_>>]| {
            for _ in 0..n {
                let t = w.next_tag();
                host.write(b"k", &value(t)).unwrap();
                w.current = t;
                for o in open.iter_mut().flatten() {
                    o.allowed.insert(t);
                }
            }
        };
        let c = cycle(self.bits);
        let writer = Arc::clone(&self.writer);
        let reader = Arc::clone(&self.reader);
        match choice {
            0 => {
                writes(self, &writer, c, open);
                format!("writer: {c} writes")
            }
            1 => {
                writes(self, &writer, c.saturating_sub(1).max(1), open);
                "writer: cycle-1 writes".into()
            }
            2 => {
                writes(self, &writer, c + 1, open);
                "writer: cycle+1 writes".into()
            }
            3 => {
                writes(self, &writer, 1, open);
                "writer: 1 write".into()
            }
            4 => {
                writes(self, &reader, 1, open);
                "reader host: 1 write".into()
            }
            5 => {
                writer.delete(b"k").unwrap();
                let t = self.next_tag();
                writer.create(b"k", &value(t)).unwrap();
                self.current = t;
                for o in open.iter_mut().flatten() {
                    o.allowed.insert(t);
                }
                "writer: delete and create".into()
            }
            6 => {
                let _ = writer.make_read_shared(b"k").unwrap();
                "writer: make k read-shared".into()
            }
            7 => {
                reader.replay().unwrap();
                "reader host: replay".into()
            }
            _ => {
                let mut buf = vec![0u8; SLOT];
                reader.read(b"k", &mut buf).unwrap();
                assert_eq!(
                    tag_of(&buf),
                    Some(self.current),
                    "a plain read in the middle"
                );
                "reader host: a plain read".into()
            }
        }
    }
}

#[test]
fn interleaved_tickets_and_adversaries_accept_only_current_versions() {
    let rounds: u64 = std::env::var("MEGALON_READ_SCHEDULES_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    for bits in [2u32, 4, 8] {
        for round in 0..rounds {
            let seed = 1000 * u64::from(bits) + round;
            let mut rng = Rng(seed);
            let mut world = World::new(bits, seed);
            let reader = Arc::clone(&world.reader);
            let mut open: Vec<Option<Open<'_>>> = (0..3).map(|_| None).collect();
            let mut trace: Vec<String> = Vec::new();
            for _step in 0..30 {
                let i = rng.below(3) as usize;
                match rng.below(5) {
                    0 => {
                        if open[i].is_none() {
                            let ticket = reader.read_start(b"k").unwrap();
                            open[i] = Some(Open {
                                ticket,
                                copy: vec![0u8; SLOT],
                                halves: [false; 2],
                                allowed: [world.current].into(),
                            });
                            trace.push(format!("start {i}"));
                        }
                    }
                    1 | 2 => {
                        if let Some(o) = open[i].as_mut() {
                            let h = rng.below(2) as usize;
                            let range = h * SLOT / 2..(h + 1) * SLOT / 2;
                            o.ticket
                                .read(range.start, &mut o.copy[range.clone()])
                                .unwrap();
                            o.halves[h] = true;
                            trace.push(format!("copy {i} half {h}"));
                        }
                    }
                    3 => {
                        if let Some(o) = open[i].take() {
                            let ok = reader.read_end(o.ticket).unwrap();
                            trace.push(format!("end {i}: {ok}"));
                            if ok && o.halves == [true, true] {
                                let what = format!("bits {bits} seed {seed}: {trace:#?}");
                                let tag = tag_of(&o.copy)
                                    .unwrap_or_else(|| panic!("torn copy accepted, {what}"));
                                assert!(
                                    o.allowed.contains(&tag),
                                    "accepted {tag}, allowed {:?}, {what}",
                                    o.allowed
                                );
                            }
                        }
                    }
                    _ => {
                        let d = world.act(&mut rng, &mut open);
                        trace.push(d);
                    }
                }
            }
            for o in open.iter_mut() {
                if let Some(o) = o.take() {
                    let _ = reader.read_end(o.ticket);
                }
            }
            let what = format!("bits {bits} seed {seed}: {trace:#?}");
            let mut buf = vec![0u8; SLOT];
            reader.read(b"k", &mut buf).unwrap();
            assert_eq!(tag_of(&buf), Some(world.current), "the read after, {what}");
            let mut bufs = [vec![0u8; SLOT], vec![0u8; SLOT]];
            let [a, b] = &mut bufs;
            let mut reads: Vec<(&[u8], &mut [u8])> = vec![(b"k", a), (b"j", b)];
            for answer in reader.read_many(&mut reads) {
                answer.unwrap();
            }
            assert_eq!(
                tag_of(&bufs[0]),
                Some(world.current),
                "read_many after, {what}"
            );
        }
    }
}

/// `read_many` of `[k, j, k, k]`, the adversary acting at the `n`th time the reader's
/// thread passes `point` (so inside a later read of the call, after earlier reads of `k`
/// started): every accepted copy of `k` is whole and was current during the call.
#[test]
fn read_many_with_the_adversary_inside_a_later_read() {
    let points = [
        Point::ReadAfterTailCheck,
        Point::LookBeforeValidation,
        Point::ReadAfterCounter,
        Point::ReadBeforeEnd,
        Point::ReadEndBetweenChecks,
    ];
    for bits in [2u32, 4, 8] {
        for point in points {
            for nth in 1..=6u32 {
                for action in 0..4u32 {
                    let mut world = World::new(bits, 77 + u64::from(nth));
                    // Cache version 2 at its counter on the reader.
                    let mut buf = vec![0u8; SLOT];
                    world.reader.read(b"k", &mut buf).unwrap();
                    let (writer, reader) = (Arc::clone(&world.writer), Arc::clone(&world.reader));
                    let c = cycle(bits);
                    let allowed = Arc::new(std::sync::Mutex::new(BTreeSet::from([2u8])));
                    let tags = Arc::new(std::sync::Mutex::new(10u8));
                    let act = {
                        let allowed = Arc::clone(&allowed);
                        let tags = Arc::clone(&tags);
                        move || {
                            let write = |n: u32| {
                                for _ in 0..n {
                                    let mut t = tags.lock().unwrap();
                                    writer.write(b"k", &value(*t)).unwrap();
                                    allowed.lock().unwrap().insert(*t);
                                    *t += 1;
                                }
                            };
                            match action {
                                0 => write(c),
                                1 => write(c + 1),
                                2 => {
                                    writer.delete(b"k").unwrap();
                                    let mut t = tags.lock().unwrap();
                                    writer.create(b"k", &value(*t)).unwrap();
                                    allowed.lock().unwrap().insert(*t);
                                    *t += 1;
                                    drop(t);
                                    write(c);
                                }
                                _ => {
                                    writer.make_read_shared(b"k").unwrap();
                                    write(c);
                                }
                            }
                        }
                    };
                    let mut act = Some(act);
                    let mut seen = 0;
                    let bufs = chaos::with_hook(
                        move |at| {
                            if at == point {
                                seen += 1;
                                if seen == nth {
                                    if let Some(act) = act.take() {
                                        act();
                                    }
                                }
                            }
                        },
                        || {
                            let mut bufs = vec![vec![0u8; SLOT]; 4];
                            let keys: [&[u8]; 4] = [b"k", b"j", b"k", b"k"];
                            let mut reads: Vec<(&[u8], &mut [u8])> = keys
                                .iter()
                                .copied()
                                .zip(bufs.iter_mut().map(Vec::as_mut_slice))
                                .collect();
                            for answer in reader.read_many(&mut reads) {
                                answer.unwrap();
                            }
                            bufs
                        },
                    );
                    let what = format!("{bits} bits, {point:?} #{nth}, action {action}");
                    let allowed = allowed.lock().unwrap().clone();
                    for i in [0, 2, 3] {
                        let tag =
                            tag_of(&bufs[i]).unwrap_or_else(|| panic!("{what}: read {i} torn"));
                        assert!(
                            allowed.contains(&tag),
                            "{what}: read {i} gave {tag}, {allowed:?}"
                        );
                    }
                    let last = *allowed.iter().next_back().unwrap();
                    world.current = last;
                    let mut buf = vec![0u8; SLOT];
                    reader.read(b"k", &mut buf).unwrap();
                    assert_eq!(tag_of(&buf), Some(last), "{what}: the read after");
                }
            }
        }
    }
}
