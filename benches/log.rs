//! Benchmarks of the shared log and the replica (DESIGN.md sections 5, 6 and 12), each
//! against its ceiling in the same run. Results and how to read them: `docs/log.md`.
//!
//! - `lookup/*`: `Host::lookup` when the log has nothing new (tail check, read lock,
//!   index lookup) against a plain `hashbrown::HashMap<Vec<u8>, _>` lookup of the same
//!   24-byte keys, in the same pre-shuffled order, at 100k and 1M objects; plus the plain
//!   map behind a reader-writer lock, and both with each lookup depending on the last.
//!   After criterion's runs, each pair is also measured interleaved (blocks of the two
//!   alternating) and the median ratio printed: the figure to quote on a noisy machine.
//! - `append/*`: log entries appended per second by 1, 2 and 4 threads of one host doing
//!   `create` + `delete` of distinct keys, with and without flat combining. The batching
//!   factor (entries per `tail` CAS) is printed after each configuration.
//! - `replay/*`: entries per second host B's `replay` applies, after host A appended them
//!   while B was idle (no pump).
//!
//! Every pod is a heap pod with hardware memory. Replica memory per object is not a
//! timing: `cargo run --release --example replica_memory` prints it.
//!
//! ```text
//! cargo bench --bench log -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode,
    Throughput,
};
use megalon::core::{Host, HostOptions, Join, Pod};

mod common;

use common::{key, Key};

/// Bytes of one object slot.
const SLOT_BYTES: u64 = 64;

/// The keys `0..count` in a seeded random order ([`common::shuffle`]).
fn shuffled_keys(prefix: &[u8; 4], count: u64, seed: u64) -> Vec<Key> {
    let mut keys: Vec<Key> = (0..count).map(|n| key(prefix, n)).collect();
    common::shuffle(&mut keys, seed);
    keys
}

/// A heap pod with 64-byte slots for `objects` objects (plus room for every host's
/// first claimed chunk), a ring of `log_entries` one-line entries, and `max_hosts` hosts.
fn pod(objects: u64, log_entries: u64, max_hosts: u32) -> Arc<Pod> {
    let slots = objects + objects / 64 + 8192 * u64::from(max_hosts);
    common::heap_pod(SLOT_BYTES, slots, log_entries, max_hosts)
}

/// A host with the benchmarks' memory (hardware unless `MEGALON_BENCH_MEMORY` says
/// otherwise) and no pump: the benchmarks drive replay themselves.
fn join(pod: &Arc<Pod>, flat_combining: bool) -> Host {
    let options = HostOptions::new()
        .memory(common::memory())
        .pump_interval(None)
        .flat_combining(flat_combining);
    Host::join(pod, Join::AnyFree, options).expect("a free host id")
}

/// Looks up the key at `*next` and moves `*next` on to the following key, wrapping
/// around; returns what the lookup found. `lookup` returns the object's slot and what the
/// caller gets. Unchained, consecutive lookups are independent (the CPU may overlap their
/// cache misses: throughput); chained, the next key's position depends on this lookup's
/// slot (through `zero`, a zero the compiler cannot see), so they cannot overlap
/// (latency). `CHAINED` is a constant: as a run-time flag the compiler may turn the `if`
/// into a select, which chains the unchained lookups too.
#[inline(always)]
fn look_up_next<const CHAINED: bool, R>(
    keys: &[Key],
    next: &mut usize,
    zero: u64,
    lookup: &impl Fn(&Key) -> (u64, R),
) -> R {
    let (slot, found) = lookup(black_box(&keys[*next]));
    *next += 1;
    if CHAINED {
        *next += (slot & zero) as usize;
    }
    if *next >= keys.len() {
        *next = 0;
    }
    found
}

/// Runs `lookup` over `keys` in order, wrapping around, under `id` (chained or not, as in
/// [`look_up_next`]).
fn lookups<const CHAINED: bool, R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    keys: &[Key],
    lookup: impl Fn(&Key) -> (u64, R),
) {
    group.bench_function(id, |b| {
        // Opaque to the compiler, so `slot & zero` is a real data dependency.
        let zero = black_box(0u64);
        let mut next = 0usize;
        b.iter(|| black_box(look_up_next::<CHAINED, _>(keys, &mut next, zero, &lookup)))
    });
}

/// Times `count` lookups of `keys` from position `start` on, wrapping around (chained or
/// not, as in [`look_up_next`]).
fn walk<const CHAINED: bool, R>(
    keys: &[Key],
    start: usize,
    count: usize,
    lookup: impl Fn(&Key) -> (u64, R),
) -> Duration {
    let zero = black_box(0u64);
    let mut next = start;
    let started = Instant::now();
    for _ in 0..count {
        black_box(look_up_next::<CHAINED, _>(keys, &mut next, zero, &lookup));
    }
    started.elapsed()
}

/// Rounds of [`interleaved`], and lookups per block.
const INTERLEAVED_ROUNDS: usize = 100;
const INTERLEAVED_BLOCK: usize = 20_000;

/// The ratio `subject` / `baseline` measured in alternation ([`common::alternate`]): each
/// round times one block of keys with each, back to back (which goes first alternates).
/// On a shared, noisy machine the load drifts between criterion's separate runs of the
/// two; within a round it hardly does. Prints the median ratio.
fn interleaved<const CHAINED: bool, R, S>(
    name: &str,
    keys: &[Key],
    subject: impl Fn(&Key) -> (u64, R) + Copy,
    baseline: impl Fn(&Key) -> (u64, S) + Copy,
) {
    let mut ratios = Vec::with_capacity(INTERLEAVED_ROUNDS);
    let (mut subject_ns, mut baseline_ns) = (Vec::new(), Vec::new());
    // Different keys for the two, so that neither finds lines the other just loaded (the
    // pair may share a map).
    let start = |block: usize| (block * INTERLEAVED_BLOCK) % keys.len();
    let rounds = common::alternate(
        INTERLEAVED_ROUNDS,
        |block| walk::<CHAINED, _>(keys, start(block), INTERLEAVED_BLOCK, subject),
        |block| walk::<CHAINED, _>(keys, start(block), INTERLEAVED_BLOCK, baseline),
    );
    for (s, b) in rounds {
        ratios.push(s.as_secs_f64() / b.as_secs_f64());
        subject_ns.push(s.as_nanos() as f64 / INTERLEAVED_BLOCK as f64);
        baseline_ns.push(b.as_nanos() as f64 / INTERLEAVED_BLOCK as f64);
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let quartiles = {
        let mut sorted = ratios.clone();
        sorted.sort_by(f64::total_cmp);
        (sorted[sorted.len() / 4], sorted[sorted.len() * 3 / 4])
    };
    let ratio = median(&mut ratios);
    println!(
        "{name}: {ratio:.2}x (quartiles {:.2}-{:.2}; medians {:.0} ns vs {:.0} ns; \
         {INTERLEAVED_ROUNDS} interleaved rounds of {INTERLEAVED_BLOCK} lookups)",
        quartiles.0,
        quartiles.1,
        median(&mut subject_ns),
        median(&mut baseline_ns)
    );
}

/// The values a replica entry carries: slot, record, stamp, host counter.
type PlainEntry = (u64, u32, u64, u32);
/// The plain map the replica is measured against.
type PlainMap = hashbrown::HashMap<Vec<u8>, PlainEntry>;

/// `key`'s entry in `plain` (present), and its slot.
fn plain_lookup(plain: &PlainMap, key: &Key) -> (u64, PlainEntry) {
    let value = plain.get(key.as_slice()).copied().expect("present");
    (value.0, value)
}

/// Index lookup through the replica against a plain hash map lookup of the same keys in
/// the same order. The headline pair is `replica` / `hashmap`; `hashmap_rwlock` (the plain
/// map behind a `std` reader-writer lock) and the `_chained` pair say where the difference
/// goes.
fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for objects in [100_000u64, 1_000_000] {
        let started = Instant::now();
        let pod = pod(objects, 1 << 16, 1);
        let host = join(&pod, false);
        let mut plain = PlainMap::new();
        for n in 0..objects {
            let key = key(b"obj:", n);
            host.create(&key, &key).expect("create");
            plain.insert(key.to_vec(), (n, u32::MAX, n, u32::MAX));
        }
        let keys = shuffled_keys(b"obj:", objects, 0x6c6f_6f6b_7570 ^ objects);
        assert_eq!(host.inspect().replica_len(), objects);
        println!(
            "lookup setup: {objects} objects created in {:.1} s",
            started.elapsed().as_secs_f64()
        );

        let replica = |key: &Key| {
            let entry = host.lookup(key).expect("lookup").expect("present");
            (entry.slot, entry)
        };
        let map = |key: &Key| plain_lookup(&plain, key);
        let locked = std::sync::RwLock::new(&plain);
        let locked_map = |key: &Key| plain_lookup(&locked.read().expect("never poisoned"), key);
        let id = |name| BenchmarkId::new(name, objects);
        lookups::<false, _>(&mut group, id("replica"), &keys, replica);
        lookups::<false, _>(&mut group, id("hashmap"), &keys, map);
        lookups::<false, _>(&mut group, id("hashmap_rwlock"), &keys, locked_map);
        lookups::<true, _>(&mut group, id("replica_chained"), &keys, replica);
        lookups::<true, _>(&mut group, id("hashmap_chained"), &keys, map);
        let name = |pair: &str| format!("lookup/{objects}: {pair}");
        interleaved::<false, _, _>(&name("replica / hashmap"), &keys, replica, map);
        interleaved::<false, _, _>(&name("hashmap_rwlock / hashmap"), &keys, locked_map, map);
        interleaved::<true, _, _>(
            &name("replica_chained / hashmap_chained"),
            &keys,
            replica,
            map,
        );
    }
    group.finish();
}

/// `iters` create + delete pairs of fresh keys, split over `threads` threads of `host`;
/// the time from when they all start to when the last one ends.
fn create_delete(host: &Host, threads: u64, iters: u64, next_key: &AtomicU64) -> Duration {
    let barrier = Barrier::new(threads as usize + 1);
    let started = std::thread::scope(|scope| {
        for thread in 0..threads {
            let count = iters / threads + u64::from(thread < iters % threads);
            let barrier = &barrier;
            scope.spawn(move || {
                let first = next_key.fetch_add(count, Ordering::Relaxed);
                barrier.wait();
                for n in first..first + count {
                    let key = key(b"app:", n);
                    host.create(&key, &key).expect("create");
                    host.delete(&key).expect("delete");
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    started.elapsed()
}

/// Appends per second, with and without flat combining.
fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    // One iteration is one create and one delete: two log entries.
    group.throughput(Throughput::Elements(2));
    for flat_combining in [false, true] {
        let name = if flat_combining {
            "combining"
        } else {
            "direct"
        };
        for threads in [1u64, 2, 4] {
            let pod = pod(0, 4096, 1);
            let host = join(&pod, flat_combining);
            let next_key = AtomicU64::new(0);
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| create_delete(&host, threads, iters, &next_key))
            });
            let stats = host.inspect().stats();
            println!(
                "append/{name}/{threads}: {} entries in {} batches: {:.2} entries per batch",
                stats.entries_appended,
                stats.batches_appended,
                stats.entries_appended as f64 / stats.batches_appended.max(1) as f64
            );
        }
    }
    group.finish();
}

/// Entries per second one host replays after another appended them.
fn replay(c: &mut Criterion) {
    /// Objects both replicas hold before the measured entries, so that replay inserts
    /// into and removes from a table of realistic size.
    const PRELOADED: u64 = 100_000;
    const LOG_ENTRIES: u64 = 1 << 16;
    let mut group = c.benchmark_group("replay");
    // Each measured iteration needs its entries appended first (untimed, and several
    // times slower than replaying them): keep the measured time short so the run is.
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for entries in [1_000u64, 16_000] {
        let pod = pod(PRELOADED, LOG_ENTRIES, 2);
        let appender = join(&pod, false);
        let replayer = join(&pod, false);
        for n in 0..PRELOADED {
            let key = key(b"pre:", n);
            appender.create(&key, &key).expect("create");
            if n % 10_000 == 0 {
                replayer.replay().expect("replay");
            }
        }
        replayer.replay().expect("replay");
        assert_eq!(replayer.inspect().replica_len(), PRELOADED);
        let mut next_key = 0u64;
        group.throughput(Throughput::Elements(entries));
        group.bench_function(BenchmarkId::new("entries", entries), |b| {
            b.iter_custom(|iters| {
                let mut measured = Duration::ZERO;
                for _ in 0..iters {
                    // Half creates, half deletes of fresh keys: the table keeps its size.
                    for n in next_key..next_key + entries / 2 {
                        let key = key(b"new:", n);
                        appender.create(&key, &key).expect("create");
                        appender.delete(&key).expect("delete");
                    }
                    next_key += entries / 2;
                    let from = replayer.inspect().applied_position();
                    let started = Instant::now();
                    let to = replayer.replay().expect("replay");
                    measured += started.elapsed();
                    // Claims of fresh slots are the only other entries.
                    assert!(to - from >= entries);
                    black_box(to);
                }
                measured
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup, append, replay);
criterion_main!(benches);
