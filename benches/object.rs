//! Benchmarks of the object protocol (DESIGN.md sections 7, 8 and 12), each against its
//! ceiling in the same run. Results and how to read them: `docs/object.md`.
//!
//! One heap pod with hardware memory, one host without a pump, 1 KiB objects, 24-byte
//! keys: [`OBJECTS`] read-shared objects (created, never written: no record) and as
//! many read-write-shared ones (created, then written once in setup: each has a record
//! and this host's host counter equals it). Every side walks its set in one seeded
//! random order; the sets are 100 MB each, so objects come from memory, not from cache.
//!
//! - `ceiling`: a plain `hashbrown::HashMap<Vec<u8>, u64>` from key to the object's
//!   offset, then `host.memory().read` of 1 KiB: the same lookup and copy from the same
//!   memory with no protocol (DESIGN section 12's ceiling).
//! - `ceiling_locked`: the ceiling with the plain map behind a `std::sync::RwLock`,
//!   read-locked twice per operation (for the lookup, and after the copy), as
//!   `Host::read` takes the replica's read lock in `read_start` and in `read_end`.
//! - `ceiling_replica`: `host.lookup(key)` (tail check, the replica's read lock, its
//!   index) and the same copy: the ceiling with the replica's own index.
//! - `copy`: the copy alone, from offsets computed in setup (no lookup).
//! - `read` (`object/read/read_shared`, `object/read/read_write`): `host.read(key, &mut
//!   buf)` of a read-shared object, and of a read-write-shared one whose counter has not
//!   changed since this host wrote it.
//! - `read_many` (`object/read_many/read_shared`, `.../read_write`): `host.read_many` of
//!   [`BATCH`] whole objects a call, timed per object; `read_each` is `read` again, one
//!   object a call, as its baseline.
//! - `write`: `host.write(key, &object)` of a read-write-shared object (lock, the copy
//!   stored straight to memory, fence, unlock); `write_ceiling`: the plain map lookup,
//!   then `memory.write_non_temporal` of 1 KiB and `memory.fence`; `write_ceiling_cached`
//!   the lookup, then `memory.write`, `memory.write_back` and `memory.fence` (how writes
//!   went before they bypassed the cache).
//! - `crash_safety` (`crash_safety/write_undo`, `write_off`, `write_off_imaged`, each on
//!   `1KiB` and `64B` objects): what `CrashSafety::Undo` costs a write. Two more heap pods
//!   per object size, alike but for their crash safety, each with its own host (hardware
//!   memory, no pump) and the same keys in the same order ([`CRASH_SAFETY_SETS`]),
//!   every object written once in setup. `write_undo` is `host.write(key, &object)` on
//!   the pod with `Undo` (announce, lock, undo image of the object, copy, unlock, clear
//!   the announce), `write_off` the same on the pod with `Off`, and `write_off_imaged`
//!   that write after what the undo image itself costs with no protocol: the object read,
//!   written to one place in the pod's application region, its lines written back, a
//!   fence.
//!
//! Each benchmark runs once under criterion (absolute times), then, under `cargo bench`
//! only, each pair is measured interleaved: blocks of the two sides alternate (which goes
//! first alternates too), on different objects so neither finds lines the other just
//! loaded, and the median per-round ratio is printed: the figure to quote on a shared,
//! noisy machine. Around each protocol benchmark the host's event counters are read and
//! printed per operation (lines invalidated, written back, SCR atomics, retries). Last,
//! the SCR each read-write-shared object costs for each record width, from the layout.
//! A criterion filter after `--` also picks the interleaved pairs: they run when
//! criterion ran their protocol side (every pod is still built).
//!
//! ```text
//! cargo bench --bench object -- --warm-up-time 1 --measurement-time 2
//! cargo bench --bench object -- crash_safety --warm-up-time 1 --measurement-time 2
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use megalon::core::{
    limits::RECORD_WIDTHS_BITS, CrashSafety, EventCounts, Host, HostOptions, Join, PodConfig,
};

mod common;

use common::{key, Key};

/// Bytes of one object, and of its slot.
const OBJECT_BYTES: usize = 1024;
/// Objects in each set (read-shared, read-write-shared): 100 MB of objects each, three
/// times the 32 MiB L3 of the machine the results come from.
const OBJECTS: u64 = 100_000;
/// Entries in the log's ring.
const LOG_ENTRIES: u64 = 4096;
/// SCR of the table of section 5: the paper's figure for MEGALON ("with a 200MB SCR ...
/// up to 50M objects"), as a whole number of pages.
const TABLE_SCR_BYTES: u64 = 200 << 20;
/// SCR bytes per object of HCMeta in the paper (section 3.2): a 40-byte key, a 4-byte
/// record and two 4-byte pointers.
const HCMETA_PAPER_BYTES_PER_OBJECT: u64 = 52;
/// The same layout with this bench's 24-byte keys.
const HCMETA_24_BYTE_KEY_BYTES_PER_OBJECT: u64 = 24 + 4 + 2 * 4;

/// The crash-safety pairs: a name, the bytes of each object, and the objects on each
/// side: 100 MB of 1 KiB objects (as the sets above) and 64 MB of 64-byte ones, more
/// than a 32 MiB L3. (Where the L3 is larger the ratio hardly moves: `docs/object.md`.)
const CRASH_SAFETY_SETS: [(&str, usize, u64); 2] =
    [("1KiB", 1024, OBJECTS), ("64B", 64, 1_000_000)];

/// Rounds of an interleaved pair, and operations per block.
const INTERLEAVED_ROUNDS: usize = 100;
const INTERLEAVED_BLOCK: usize = 10_000;

/// One set of objects: keys in a seeded random order ([`common::shuffle`]), and each
/// object's offset.
struct ObjectSet {
    name: &'static str,
    keys: Vec<Key>,
    offsets: Vec<u64>,
}

/// The bytes of one object (or of a read buffer), page-aligned so that every side's
/// buffer sits at the same place relative to the slots: only the path differs.
#[repr(C, align(4096))]
struct Buffer([u8; OBJECT_BYTES]);

fn buffer() -> Box<Buffer> {
    let mut buffer = Box::new(Buffer([0; OBJECT_BYTES]));
    buffer
        .0
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i * 31 + 7) as u8);
    buffer
}

/// The pod, its host, both object sets and the plain map of the ceiling.
struct Setup {
    host: Host,
    map: hashbrown::HashMap<Vec<u8>, u64>,
    read_shared: ObjectSet,
    read_write: ObjectSet,
}

fn setup() -> Setup {
    let started = Instant::now();
    // Both sets, and room for the host's claimed chunk to run over.
    let slots = 2 * OBJECTS + 8192;
    let pod = common::heap_pod(OBJECT_BYTES as u64, slots, LOG_ENTRIES, 1);
    assert!(
        pod.layout().record_count >= OBJECTS,
        "a record for every read-write-shared object"
    );
    let options = HostOptions::new()
        .memory(common::memory())
        .pump_interval(None);
    let host = Host::join(&pod, Join::AnyFree, options).expect("a free host id");
    let object = buffer();
    let read_shared = create_set(
        &host,
        "read_shared",
        b"rds:",
        0x7264_7300,
        OBJECTS,
        &object.0,
    );
    let read_write = create_set(
        &host,
        "read_write",
        b"rws:",
        0x7277_7300,
        OBJECTS,
        &object.0,
    );
    let mut map = hashbrown::HashMap::new();
    for set in [&read_shared, &read_write] {
        for (key, offset) in set.keys.iter().zip(&set.offsets) {
            map.insert(key.to_vec(), *offset);
        }
    }
    write_once(&host, &read_write, &object.0);
    for key in [&read_shared.keys[0], &read_write.keys[0]] {
        let entry = host.lookup(key).expect("lookup").expect("present");
        println!(
            "object setup: {} has record {:?}, host counter {:?}",
            String::from_utf8_lossy(key),
            entry.record,
            entry.host_counter
        );
    }
    println!(
        "object setup: {} objects created, {} written once, in {:.1} s; pod {} MB, {} \
         records of {} bits",
        2 * OBJECTS,
        OBJECTS,
        started.elapsed().as_secs_f64(),
        pod.layout().total_bytes >> 20,
        pod.layout().record_count,
        pod.config().record_width_bits
    );
    Setup {
        host,
        map,
        read_shared,
        read_write,
    }
}

/// Creates `count` objects holding `object` on `host`, keyed `prefix` and a number, and
/// returns them in a random order fixed by `seed` with each one's offset.
fn create_set(
    host: &Host,
    name: &'static str,
    prefix: &[u8; 4],
    seed: u64,
    count: u64,
    object: &[u8],
) -> ObjectSet {
    let layout = host.pod().layout();
    let mut keys: Vec<Key> = (0..count).map(|n| key(prefix, n)).collect();
    for key in &keys {
        host.create(key, object).expect("create");
    }
    common::shuffle(&mut keys, seed);
    let offsets = keys
        .iter()
        .map(|key| {
            let entry = host.lookup(key).expect("lookup").expect("created");
            layout.slot_offset(entry.slot)
        })
        .collect();
    ObjectSet {
        name,
        keys,
        offsets,
    }
}

/// Writes every object of `set` once, the first write of each: it gets a record, and
/// the host counter equals the record's counter. Asserts one new record per object.
fn write_once(host: &Host, set: &ObjectSet, object: &[u8]) {
    let (allocs_before, in_use_before) = (
        host.events().record_allocs,
        host.inspect().records_in_use().0,
    );
    for key in &set.keys {
        host.write(key, object).expect("write");
    }
    let written = set.keys.len() as u64;
    assert_eq!(
        host.events().record_allocs - allocs_before,
        written,
        "one record per written object"
    );
    assert_eq!(host.inspect().records_in_use().0 - in_use_before, written);
}

impl Setup {
    /// The ceilings' lookup: object `i` of `set` in the plain map (its offset).
    #[inline]
    fn plain_lookup(&self, set: &ObjectSet, i: usize) -> u64 {
        *self
            .map
            .get(black_box(&set.keys[i]).as_slice())
            .expect("present")
    }
}

/// One operation on object `i` of a set (its key, its offset).
trait Operation: FnMut(usize) {}
impl<F: FnMut(usize)> Operation for F {}

/// The ceiling: plain map lookup, then the copy.
fn ceiling<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let memory = setup.host.memory();
    let mut buf = buffer();
    move |i| {
        let offset = setup.plain_lookup(set, i);
        memory.read(offset, &mut buf.0);
        black_box(&buf);
    }
}

/// The ceiling with a reader-writer lock around it as `Host::read` has: the plain map
/// behind a `std::sync::RwLock`, read-locked for the lookup and again after the copy (as
/// `read_start` and `read_end` each take the replica's read lock).
fn ceiling_locked<'a>(
    locked: &'a std::sync::RwLock<&'a hashbrown::HashMap<Vec<u8>, u64>>,
    setup: &'a Setup,
    set: &'a ObjectSet,
) -> impl Operation + 'a {
    let memory = setup.host.memory();
    let mut buf = buffer();
    move |i| {
        let offset = *locked
            .read()
            .expect("never poisoned")
            .get(black_box(&set.keys[i]).as_slice())
            .expect("present");
        memory.read(offset, &mut buf.0);
        black_box(locked.read().expect("never poisoned").len());
        black_box(&buf);
    }
}

/// The ceiling with the replica's own index (`Host::lookup`), then the copy.
fn ceiling_replica<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let host = &setup.host;
    let layout = host.pod().layout();
    let mut buf = buffer();
    move |i| {
        let entry = host
            .lookup(black_box(&set.keys[i]))
            .expect("lookup")
            .expect("present");
        host.memory()
            .read(layout.slot_offset(entry.slot), &mut buf.0);
        black_box(&buf);
    }
}

/// The copy alone, from the offset found in setup.
fn copy<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let memory = setup.host.memory();
    let mut buf = buffer();
    move |i| {
        memory.read(black_box(set.offsets[i]), &mut buf.0);
        black_box(&buf);
    }
}

/// `Host::read` of the whole object.
fn read<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let host = &setup.host;
    let mut buf = buffer();
    move |i| {
        let done = host
            .read(black_box(&set.keys[i]), &mut buf.0)
            .expect("read");
        black_box((&buf, done));
    }
}

/// Objects a `read_many` call reads in [`read_many`].
const BATCH: usize = 16;

/// `Host::read_many` of whole objects, [`BATCH`] at a time: the call on object `i` reads
/// objects `i + 1 - BATCH..=i` when `i + 1` is a multiple of [`BATCH`] and does nothing
/// otherwise, so that a walk's time per object is the call's share per object.
fn read_many<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let host = &setup.host;
    let mut bufs: Vec<Box<Buffer>> = (0..BATCH).map(|_| buffer()).collect();
    move |i| {
        if (i + 1) % BATCH != 0 {
            return;
        }
        let first = i + 1 - BATCH;
        let mut reads: Vec<(&[u8], &mut [u8])> = set.keys[first..=i]
            .iter()
            .zip(bufs.iter_mut())
            .map(|(key, buf)| (black_box(key.as_slice()), &mut buf.0[..]))
            .collect();
        for answer in host.read_many(&mut reads) {
            black_box(answer.expect("read"));
        }
        black_box(&bufs);
    }
}

/// `Host::write` of the whole object, of `object_bytes`.
fn write<'a>(host: &'a Host, set: &'a ObjectSet, object_bytes: usize) -> impl Operation + 'a {
    let object = buffer();
    move |i| {
        let done = host
            .write(
                black_box(&set.keys[i]),
                black_box(&object.0[..object_bytes]),
            )
            .expect("write");
        black_box(done);
    }
}

/// What an undo image costs with no protocol, then `Host::write` of the whole object (of
/// `object_bytes`): the object read, stored straight to memory at `image_offset`, a
/// fence, as `CrashSafety::Undo` does between the lock and the first byte changed.
fn write_imaged<'a>(
    host: &'a Host,
    set: &'a ObjectSet,
    object_bytes: usize,
    image_offset: u64,
) -> impl Operation + 'a {
    let memory = host.memory();
    let object = buffer();
    let mut image = buffer();
    move |i| {
        let image = &mut image.0[..object_bytes];
        memory.read(black_box(set.offsets[i]), image);
        memory.write_non_temporal(image_offset, image);
        memory.fence();
        let done = host
            .write(
                black_box(&set.keys[i]),
                black_box(&object.0[..object_bytes]),
            )
            .expect("write");
        black_box(done);
    }
}

/// The write's ceiling: plain map lookup, the object stored straight to memory
/// (non-temporally, as a write does), fence.
fn write_ceiling<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let memory = setup.host.memory();
    let object = buffer();
    move |i| {
        let offset = setup.plain_lookup(set, i);
        memory.write_non_temporal(offset, black_box(&object.0));
        memory.fence();
    }
}

/// The write ceiling through the cache: the bytes stored into it, written back, fenced
/// (the way megalon wrote objects before its writes went straight to memory).
fn write_ceiling_cached<'a>(setup: &'a Setup, set: &'a ObjectSet) -> impl Operation + 'a {
    let memory = setup.host.memory();
    let object = buffer();
    move |i| {
        let offset = setup.plain_lookup(set, i);
        memory.write(offset, black_box(&object.0));
        memory.write_back(offset, OBJECT_BYTES);
        memory.fence();
    }
}

/// Runs `operation` on objects `start..start + count` of a set of `len`, wrapping around.
fn walk(operation: &mut impl Operation, len: usize, start: usize, count: usize) -> Duration {
    let started = Instant::now();
    let mut i = start % len;
    for _ in 0..count {
        operation(i);
        i += 1;
        if i == len {
            i = 0;
        }
    }
    started.elapsed()
}

/// Criterion's measurement of `operation` as `group/name/set`, walking the set from
/// where it last stopped. Whether criterion ran it: not when a filter after `--` leaves
/// it out (nor under `--list`).
fn bench(
    c: &mut Criterion,
    group_name: &str,
    name: &str,
    set: &ObjectSet,
    operation: &mut impl Operation,
) -> bool {
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));
    let len = set.keys.len();
    let mut next = 0usize;
    let mut ran = false;
    group.bench_function(BenchmarkId::new(name, set.name), |b| {
        ran = true;
        b.iter(|| {
            operation(next);
            next += 1;
            if next == len {
                next = 0;
            }
        })
    });
    group.finish();
    ran
}

/// The ratio `subject` / `baseline` measured in alternation ([`common::alternate`]): each
/// round times one block of objects with each, back to back (which goes first
/// alternates), on different objects. Prints the median ratio, its quartiles and the
/// median ns per operation.
fn interleaved(
    name: &str,
    len: usize,
    subject: &mut impl Operation,
    baseline: &mut impl Operation,
) {
    let mut ratios = Vec::with_capacity(INTERLEAVED_ROUNDS);
    let (mut subject_ns, mut baseline_ns) = (Vec::new(), Vec::new());
    let per_op = |d: Duration| d.as_nanos() as f64 / INTERLEAVED_BLOCK as f64;
    // Warm-up: one block each.
    walk(subject, len, 0, INTERLEAVED_BLOCK);
    walk(baseline, len, INTERLEAVED_BLOCK, INTERLEAVED_BLOCK);
    let rounds = common::alternate(
        INTERLEAVED_ROUNDS,
        |block| walk(subject, len, block * INTERLEAVED_BLOCK, INTERLEAVED_BLOCK),
        |block| walk(baseline, len, block * INTERLEAVED_BLOCK, INTERLEAVED_BLOCK),
    );
    for (s, b) in rounds {
        ratios.push(s.as_secs_f64() / b.as_secs_f64());
        subject_ns.push(per_op(s));
        baseline_ns.push(per_op(b));
    }
    for samples in [&mut ratios, &mut subject_ns, &mut baseline_ns] {
        samples.sort_by(f64::total_cmp);
    }
    let quartile = |samples: &[f64], q: usize| samples[(samples.len() - 1) * q / 4];
    println!(
        "interleaved {name}: {:.3}x (quartiles {:.3}-{:.3}; medians {:.1} ns vs {:.1} ns; \
         {INTERLEAVED_ROUNDS} rounds of {INTERLEAVED_BLOCK})",
        quartile(&ratios, 2),
        quartile(&ratios, 1),
        quartile(&ratios, 3),
        quartile(&subject_ns, 2),
        quartile(&baseline_ns, 2),
    );
}

/// Prints what the protocol did per operation between two readings of the counters.
fn print_events(name: &str, before: EventCounts, after: EventCounts) {
    let reads = after.reads - before.reads;
    let writes = after.writes - before.writes;
    let operations = (reads + writes).max(1) as f64;
    let per_op = |a: u64, b: u64| (b - a) as f64 / operations;
    println!(
        "events {name}: {reads} reads, {writes} writes; per operation: lines invalidated \
         {:.3} (total {}), lines written back {:.3}, SCR atomics {:.3}, read retries {:.4}, \
         waits for a writer {}, record allocs {}, deallocs {}, wraps {}",
        per_op(before.lines_invalidated, after.lines_invalidated),
        after.lines_invalidated - before.lines_invalidated,
        per_op(before.lines_written_back, after.lines_written_back),
        per_op(before.scr_atomics, after.scr_atomics),
        per_op(before.read_retries(), after.read_retries()),
        after.waits_for_writer - before.waits_for_writer,
        after.record_allocs - before.record_allocs,
        after.record_deallocs - before.record_deallocs,
        after.wraps - before.wraps,
    );
}

/// What every comparison of the main pod runs with.
struct Comparisons<'a> {
    c: Criterion,
    paired_runs: bool,
    host: &'a Host,
}

impl Comparisons<'_> {
    /// Criterion runs of the protocol's operation `subject` and its ceilings, the
    /// interleaved pairs (if criterion's filter selected `subject`), and the protocol's
    /// events per operation over both.
    fn compare(
        &mut self,
        set: &ObjectSet,
        subject_name: &str,
        subject: &mut impl Operation,
        baselines: &mut [(&str, &mut dyn FnMut(usize))],
    ) {
        let (c, paired_runs, host) = (&mut self.c, self.paired_runs, self.host);
        let before = host.events();
        let selected = bench(c, "object", subject_name, set, subject);
        let after_criterion = host.events();
        for (name, baseline) in baselines.iter_mut() {
            bench(c, "object", name, set, baseline);
        }
        if !selected {
            return;
        }
        if paired_runs {
            for (name, baseline) in baselines.iter_mut() {
                interleaved(
                    &format!("{subject_name}/{} / {name}", set.name),
                    set.keys.len(),
                    subject,
                    baseline,
                );
            }
        }
        let after = host.events();
        print_events(
            &format!("{subject_name}/{} (criterion)", set.name),
            before,
            after_criterion,
        );
        print_events(
            &format!("{subject_name}/{} (interleaved)", set.name),
            after_criterion,
            after,
        );
    }
}

/// One side of a crash-safety pair: a heap pod with `crash_safety` and one host (hardware
/// memory, no pump), holding `count` read-write-shared objects of `object_bytes`, each
/// written once in setup, and an application LNR region of one object.
struct CrashSide {
    host: Host,
    set: ObjectSet,
}

impl CrashSide {
    /// Where [`write_imaged`] keeps its image: the application's LNR region.
    fn image_offset(&self) -> u64 {
        self.host.pod().layout().app_lnr_offset
    }
}

fn crash_side(
    crash_safety: CrashSafety,
    name: &'static str,
    object_bytes: usize,
    count: u64,
) -> CrashSide {
    let config = PodConfig::new();
    // Room for a record per object: the default SCR, or twice the records' bytes.
    let record_bits = u64::from(config.record_width_bits);
    let scr_bytes = (2 * count * record_bits / 8)
        .next_power_of_two()
        .max(config.scr_bytes);
    let config = config
        .slot_size_bytes(object_bytes as u64)
        .max_key_bytes(common::MAX_KEY_BYTES)
        .log_capacity_entries(LOG_ENTRIES)
        .max_hosts(1)
        .scr_bytes(scr_bytes)
        .app_lnr_bytes(object_bytes as u64)
        .crash_safety(crash_safety);
    // The set, and room for the host's claimed chunk to run over.
    let pod = common::heap_pod_of(config, count + 8192);
    assert_eq!(pod.config().crash_safety, crash_safety);
    assert!(pod.layout().record_count >= count, "a record per object");
    let options = HostOptions::new()
        .memory(common::memory())
        .pump_interval(None);
    let host = Host::join(&pod, Join::AnyFree, options).expect("a free host id");
    let object = buffer();
    let object = &object.0[..object_bytes];
    // The same keys in the same order on both sides of a pair.
    let set = create_set(&host, name, b"crs:", 0x6372_7300, count, object);
    write_once(&host, &set, object);
    CrashSide { host, set }
}

/// What crash safety costs a write: `Host::write` of whole objects of each size in
/// [`CRASH_SAFETY_SETS`] on a pod with [`CrashSafety::Undo`] against the same write on
/// a pod with [`CrashSafety::Off`], and against that write after an undo image made with
/// no protocol ([`write_imaged`]): criterion's times, the interleaved ratios, and each
/// side's events per write.
fn crash_safety(c: &mut Criterion, paired_runs: bool) {
    for (name, object_bytes, count) in CRASH_SAFETY_SETS {
        let started = Instant::now();
        let undo = crash_side(CrashSafety::Undo, name, object_bytes, count);
        let off = crash_side(CrashSafety::Off, name, object_bytes, count);
        println!(
            "crash_safety setup: two pods of {count} objects of {object_bytes} bytes, each \
             written once, in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let (undo_before, off_before) = (undo.host.events(), off.host.events());
        let mut write_undo = write(&undo.host, &undo.set, object_bytes);
        let mut write_off = write(&off.host, &off.set, object_bytes);
        let mut write_off_imaged =
            write_imaged(&off.host, &off.set, object_bytes, off.image_offset());
        let selected = bench(c, "crash_safety", "write_undo", &undo.set, &mut write_undo);
        bench(c, "crash_safety", "write_off", &off.set, &mut write_off);
        bench(
            c,
            "crash_safety",
            "write_off_imaged",
            &off.set,
            &mut write_off_imaged,
        );
        if !selected {
            continue;
        }
        if paired_runs {
            interleaved(
                &format!("crash_safety/write/{name} undo / off"),
                count as usize,
                &mut write_undo,
                &mut write_off,
            );
            interleaved(
                &format!("crash_safety/write/{name} undo / off_imaged"),
                count as usize,
                &mut write_undo,
                &mut write_off_imaged,
            );
        }
        for (side, host, before) in [
            ("undo", &undo.host, undo_before),
            ("off", &off.host, off_before),
        ] {
            print_events(
                &format!("crash_safety/write_{side}/{name}"),
                before,
                host.events(),
            );
        }
    }
}

/// SCR per read-write-shared object for each record width, from the layout, against
/// HCMeta's SCR per object.
fn scr_table(setup: &Setup) {
    let pod = setup.host.pod();
    let layout = pod.layout();
    println!(
        "scr: bench pod: {} records of {} bytes in {} SCR bytes; {}",
        layout.record_count,
        layout.record_bytes,
        pod.config().scr_bytes,
        pod.scr_usage()
            .to_string()
            .lines()
            .skip(1)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!(
        "scr: per read-write-shared object in a {} MiB SCR (max_hosts 8), read-shared \
         objects take none:",
        TABLE_SCR_BYTES >> 20
    );
    for width_bits in RECORD_WIDTHS_BITS {
        let config = PodConfig::new()
            .scr_bytes(TABLE_SCR_BYTES)
            .record_width_bits(width_bits);
        let layout = megalon_core::Layout::new(&config).expect("a layout");
        let usage = layout.scr_usage();
        assert_eq!(usage.total_bytes(), TABLE_SCR_BYTES);
        println!(
            "scr: megalon {width_bits:>2}-bit records: {:.1} B per record, {} records \
             ({:.2} M objects), SCR bytes per object {:.4} (records {} B, other {} B, \
             unused {} B)",
            f64::from(width_bits) / 8.0,
            layout.record_count,
            layout.record_count as f64 / 1e6,
            TABLE_SCR_BYTES as f64 / layout.record_count as f64,
            usage.records_bytes,
            usage.log_cursors_bytes + usage.host_table_bytes + usage.reclaimer_bytes,
            usage.unused_bytes,
        );
    }
    for (name, bytes) in [
        ("hcmeta (paper: 40-byte key)", HCMETA_PAPER_BYTES_PER_OBJECT),
        ("hcmeta (24-byte key)", HCMETA_24_BYTE_KEY_BYTES_PER_OBJECT),
    ] {
        println!(
            "scr: {name}: {bytes} B per object, {:.2} M objects",
            (TABLE_SCR_BYTES / bytes) as f64 / 1e6
        );
    }
}

fn main() {
    let paired_runs = common::paired_runs();
    let setup = setup();
    let host = &setup.host;
    let (rs, rw) = (&setup.read_shared, &setup.read_write);
    let locked = std::sync::RwLock::new(&setup.map);
    let mut runs = Comparisons {
        c: Criterion::default().configure_from_args(),
        paired_runs,
        host,
    };

    // Reads first: the read-write-shared objects are then exactly as setup left them.
    runs.compare(
        rs,
        "read",
        &mut read(&setup, rs),
        &mut [
            ("ceiling", &mut ceiling(&setup, rs)),
            ("ceiling_locked", &mut ceiling_locked(&locked, &setup, rs)),
            ("ceiling_replica", &mut ceiling_replica(&setup, rs)),
            ("copy", &mut copy(&setup, rs)),
        ],
    );
    for set in [rs, rw] {
        runs.compare(
            set,
            "read_many",
            &mut read_many(&setup, set),
            &mut [
                ("ceiling", &mut ceiling(&setup, set)),
                ("read_each", &mut read(&setup, set)),
            ],
        );
    }
    runs.compare(
        rw,
        "read",
        &mut read(&setup, rw),
        &mut [
            ("ceiling", &mut ceiling(&setup, rw)),
            ("ceiling_replica", &mut ceiling_replica(&setup, rw)),
        ],
    );
    runs.compare(
        rw,
        "write",
        &mut write(host, rw, OBJECT_BYTES),
        &mut [
            ("write_ceiling", &mut write_ceiling(&setup, rw)),
            (
                "write_ceiling_cached",
                &mut write_ceiling_cached(&setup, rw),
            ),
        ],
    );
    // Its own pods, after the others' measurements.
    crash_safety(&mut runs.c, paired_runs);
    scr_table(&setup);
    runs.c.final_summary();
}
