//! The simulated non-coherent memory (DESIGN section 4), seen from hosts of one pod.
//!
//! Every test here joins two or more hosts to a heap pod, each with its own simulated
//! cache, and shows one rule of a non-coherent cache: stale hits, what does and does not
//! make a dirty line reach memory, the whole-line write-back hazard, reproducible
//! seeded eviction, and byte-exact reads at any offset. Random eviction is off (except in
//! the eviction tests) so every result is deterministic. "Memory" is read through a
//! host with [`MemoryKind::Hardware`], which sees the pod's bytes as they are.

mod common;

use std::sync::Arc;

use common::simulated as simulated_with;
use megalon_core::memory::SimulatedMemory;
use megalon_core::{
    inspect::SimulatedStats, limits::LINE_BYTES, memory::SimulatedConfig, Host, HostOptions, Join,
    Memory, MemoryKind, Pod, PodConfig,
};

const LINE: usize = LINE_BYTES as usize;

fn heap_pod() -> Arc<Pod> {
    common::heap_pod(&PodConfig::new())
}

/// A simulated cache that never evicts at random: only a full cache evicts.
fn simulated(seed: u64) -> MemoryKind {
    simulated_with(seed, 1024, 0)
}

/// A new pod, and a host on it per seed, each on a [`simulated`] cache seeded so.
fn pod_and_hosts<const N: usize>(seeds: [u64; N]) -> (Arc<Pod>, [Host; N]) {
    let pod = heap_pod();
    let hosts = seeds.map(|seed| join(&pod, simulated(seed)));
    (pod, hosts)
}

/// A writer (seed 1) and a third host (seed 3) on a new pod, and the offset of slot 1,
/// where the writer has written `bytes` (into its cache).
fn written_by_writer(bytes: &[u8]) -> (Arc<Pod>, Host, Host, u64) {
    let (pod, [writer, third]) = pod_and_hosts([1, 3]);
    let slot = pod.layout().slot_offset(1);
    writer.memory().write(slot, bytes);
    (pod, writer, third, slot)
}

fn join(pod: &Arc<Pod>, memory: MemoryKind) -> Host {
    // No pump: its log replay would touch this host's cache between the test's accesses.
    let options = HostOptions::new().memory(memory).pump_interval(None);
    Host::join(pod, Join::AnyFree, options).expect("joining a host")
}

/// The simulated cache of `host`, for the cache-state queries [`Memory`] does not expose.
fn cache(host: &Host) -> &SimulatedMemory {
    match host.memory() {
        Memory::Simulated(memory) => memory,
        other => panic!("host {} uses {} memory", host.id(), other.kind_name()),
    }
}

fn stats(host: &Host) -> SimulatedStats {
    host.memory()
        .simulated_stats()
        .expect("a simulated host has stats")
}

fn read(host: &Host, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    host.memory().read(offset, &mut buf);
    buf
}

/// The bytes in memory, as a host with hardware memory (no simulated cache) reads them.
fn memory_bytes(pod: &Arc<Pod>, offset: u64, len: usize) -> Vec<u8> {
    let observer = join(pod, MemoryKind::Hardware);
    read(&observer, offset, len)
}

/// What a third host reads after invalidating its own copy: memory, through a cache.
fn flushed_read(host: &Host, offset: u64, len: usize) -> Vec<u8> {
    host.memory().flush(offset, len);
    host.memory().fence();
    read(host, offset, len)
}

// ---- stale lines ----

/// A writer (seed 1) and a reader (seed 2) on a new pod, and the offset of slot 0: the
/// reader caches its old line, then the writer writes `version2` there, writes it back and
/// fences.
#[track_caller]
fn published_over_a_cached_line() -> (Arc<Pod>, Host, Host, u64) {
    let (pod, [writer, reader]) = pod_and_hosts([1, 2]);
    let slot = pod.layout().slot_offset(0);
    assert_eq!(
        read(&reader, slot, 8),
        [0; 8],
        "the reader caches the old line"
    );
    writer.memory().write(slot, b"version2");
    writer.memory().write_back(slot, 8);
    writer.memory().fence();
    (pod, writer, reader, slot)
}

#[test]
fn reader_without_flush_is_served_its_stale_line() {
    let (pod, _writer, reader, slot) = published_over_a_cached_line();
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        b"version2",
        "memory has the new bytes"
    );
    assert_eq!(stats(&reader).stale_lines_served, 0);

    assert_eq!(
        read(&reader, slot, 8),
        [0; 8],
        "no flush: the cached line answers"
    );
    assert_eq!(stats(&reader).stale_lines_served, 1);
}

#[test]
fn reader_that_flushes_and_fences_sees_the_writers_bytes() {
    let (_pod, _writer, reader, slot) = published_over_a_cached_line();
    reader.memory().flush(slot, 8);
    reader.memory().fence();
    assert!(!cache(&reader).is_cached(slot), "a flush drops the line");
    assert_eq!(read(&reader, slot, 8), b"version2");
    assert_eq!(stats(&reader).stale_lines_served, 0);
}

#[test]
fn a_stale_read_of_several_lines_counts_each_stale_line() {
    let (pod, [writer, reader]) = pod_and_hosts([1, 2]);
    let slot = pod.layout().slot_offset(0);
    let len = 3 * LINE;

    assert_eq!(read(&reader, slot, len), vec![0; len]);
    // New bytes in the first and third line only; the middle line stays as it was.
    writer.memory().write(slot, &[1; LINE]);
    writer.memory().write(slot + 2 * LINE_BYTES, &[3; LINE]);
    writer.memory().write_back(slot, len);
    writer.memory().fence();

    assert_eq!(read(&reader, slot, len), vec![0; len]);
    assert_eq!(stats(&reader).stale_lines_served, 2);
}

// ---- how a dirty line reaches memory ----

#[test]
fn plain_write_stays_in_the_writers_cache() {
    let (pod, writer, third, slot) = written_by_writer(b"unpublished");
    writer.memory().fence();
    assert!(cache(&writer).is_dirty(slot));
    assert_eq!(
        read(&writer, slot, 11),
        b"unpublished",
        "the writer reads its own bytes"
    );
    assert_eq!(
        stats(&writer).stale_lines_served,
        0,
        "own writes are not stale"
    );

    assert_eq!(
        flushed_read(&third, slot, 11),
        [0; 11],
        "memory still has the old bytes"
    );
    assert_eq!(memory_bytes(&pod, slot, 11), [0; 11]);
    assert_eq!(stats(&writer).lines_written_back, 0);
}

#[test]
fn flush_writes_a_dirty_line_back_and_drops_it() {
    let (_pod, writer, third, slot) = written_by_writer(b"flushed");
    writer.memory().flush(slot, 7);
    writer.memory().fence();

    assert!(!cache(&writer).is_cached(slot));
    assert_eq!(stats(&writer).lines_written_back, 1);
    assert_eq!(flushed_read(&third, slot, 7), b"flushed");
}

#[test]
fn write_back_writes_a_dirty_line_and_keeps_it_cached_and_clean() {
    let (_pod, writer, third, slot) = written_by_writer(b"clwb");
    assert!(cache(&writer).is_dirty(slot));
    writer.memory().write_back(slot, 4);
    writer.memory().fence();

    assert!(cache(&writer).is_cached(slot), "clwb keeps the line");
    assert!(!cache(&writer).is_dirty(slot), "clwb leaves the line clean");
    assert_eq!(stats(&writer).lines_written_back, 1);
    assert_eq!(flushed_read(&third, slot, 4), b"clwb");

    // A clean line has nothing to write back.
    writer.memory().write_back(slot, 4);
    assert_eq!(stats(&writer).lines_written_back, 1);
}

#[test]
fn evict_all_writes_every_dirty_line_back() {
    let (pod, [writer, third]) = pod_and_hosts([1, 3]);
    let first = pod.layout().slot_offset(2);
    let second = pod.layout().slot_offset(7) + 3 * LINE_BYTES;

    writer.memory().write(first, b"evicted one");
    writer.memory().write(second, b"evicted two");
    assert_eq!(read(&writer, pod.layout().slot_offset(9), 4), [0; 4]); // a clean line
    cache(&writer).evict_all();
    writer.memory().fence();

    for offset in [first, second, pod.layout().slot_offset(9)] {
        assert!(!cache(&writer).is_cached(offset));
    }
    let after = stats(&writer);
    assert_eq!(after.evictions, 3);
    assert_eq!(
        after.lines_written_back, 2,
        "only the dirty lines are written"
    );
    assert_eq!(flushed_read(&third, first, 11), b"evicted one");
    assert_eq!(flushed_read(&third, second, 11), b"evicted two");
}

#[test]
fn a_full_cache_evicts_a_dirty_line_to_memory_to_make_room() {
    let pod = heap_pod();
    let writer = join(&pod, simulated_with(1, 1, 0));
    let third = join(&pod, simulated(3));
    let dirty = pod.layout().slot_offset(3);
    let other = pod.layout().slot_offset(4);

    writer.memory().write(dirty, b"made room");
    assert_eq!(flushed_read(&third, dirty, 9), [0; 9], "not yet in memory");
    assert_eq!(read(&writer, other, 8), [0; 8]); // the one-line cache is full: evicts
    writer.memory().fence();

    assert!(!cache(&writer).is_cached(dirty));
    assert!(cache(&writer).is_cached(other));
    assert_eq!(stats(&writer).evictions, 1);
    assert_eq!(flushed_read(&third, dirty, 9), b"made room");
}

#[test]
fn non_temporal_store_reaches_memory_and_drops_the_writers_copy() {
    let (pod, [writer, third]) = pod_and_hosts([1, 3]);
    let slot = pod.layout().slot_offset(5);

    assert_eq!(read(&writer, slot, 8), [0; 8], "the writer caches the line");
    writer.memory().write_non_temporal(slot, b"streamed");
    writer.memory().fence();

    assert!(!cache(&writer).is_cached(slot));
    assert_eq!(stats(&writer).non_temporal_lines, 1);
    assert_eq!(flushed_read(&third, slot, 8), b"streamed");
    assert_eq!(
        read(&writer, slot, 8),
        b"streamed",
        "the next read fills from memory"
    );
    assert_eq!(stats(&writer).stale_lines_served, 0);
}

#[test]
fn non_temporal_store_writes_the_writers_dirty_copy_back_first() {
    let pod = heap_pod();
    let writer = join(&pod, simulated(1));
    let slot = pod.layout().slot_offset(5);

    writer.memory().write(slot + 32, b"dirty!!!");
    writer.memory().write_non_temporal(slot, b"streamed");
    writer.memory().fence();

    let line = memory_bytes(&pod, slot, LINE);
    assert_eq!(&line[..8], b"streamed");
    assert_eq!(&line[32..40], b"dirty!!!", "the dirty bytes were not lost");
}

// ---- the whole-line write-back hazard ----

/// Host A caches a line; host B writes and writes back the line's first half; A writes
/// the second half and writes the line back. Returns the line in memory afterwards.
/// With `a_flushes_first`, A flush-invalidates the line before its partial write, as the
/// protocol's write_start does when its cached copy may be stale.
fn partial_writes_to_one_line(a_flushes_first: bool) -> Vec<u8> {
    let (pod, [a, b]) = pod_and_hosts([1, 2]);
    let line = pod.layout().slot_offset(6);
    let half = LINE / 2;

    assert_eq!(read(&a, line, LINE), vec![0; LINE], "A caches the old line");
    b.memory().write(line, &vec![0xbb; half]);
    b.memory().write_back(line, half);
    b.memory().fence();
    assert_eq!(memory_bytes(&pod, line, half), vec![0xbb; half]);

    if a_flushes_first {
        a.memory().flush(line, LINE);
        a.memory().fence();
    }
    a.memory().write(line + half as u64, &vec![0xaa; half]);
    a.memory().write_back(line, LINE);
    a.memory().fence();
    memory_bytes(&pod, line, LINE)
}

#[test]
fn partial_write_over_a_stale_line_puts_the_stale_bytes_back() {
    let line = partial_writes_to_one_line(false);
    let half = LINE / 2;
    assert_eq!(
        line[..half],
        vec![0; half],
        "A's stale first half overwrote B's bytes"
    );
    assert_eq!(line[half..], vec![0xaa; half]);
}

#[test]
fn flush_before_a_partial_write_keeps_the_other_hosts_bytes() {
    let line = partial_writes_to_one_line(true);
    let half = LINE / 2;
    assert_eq!(line[..half], vec![0xbb; half], "B's first half survives");
    assert_eq!(line[half..], vec![0xaa; half]);
}

// ---- seeded eviction ----

/// Two simulated hosts, both seeded from `seed`, write (and now and then read) a long
/// deterministic sequence of small unaligned values over the first slots, with no flush
/// and random eviction one line access in four, so that only random evictions move bytes
/// to memory (the caches are larger than the lines touched: none fills up). Returns the
/// whole slot region of memory and both hosts' stats.
fn eviction_run(seed: u64) -> (Vec<u8>, [SimulatedStats; 2]) {
    // A small LNR keeps the slot region, read back in full, small.
    let pod = common::heap_pod(&PodConfig::new().lnr_bytes(1 << 20));
    let hosts = [
        join(&pod, simulated_with(seed, 4096, 4)),
        join(
            &pod,
            simulated_with(seed.wrapping_mul(31).wrapping_add(7), 4096, 4),
        ),
    ];
    let layout = pod.layout();
    let slots = layout.slots_offset;
    let slot_region_bytes = (layout.slot_count * layout.config.slot_size_bytes) as usize;
    let written_bytes = 64 * 1024u64; // 1024 lines
    let mut state = 0x1234_5678_u64; // the sequence itself does not depend on `seed`
    for i in 0..4000u64 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let offset = slots + (state >> 33) % (written_bytes - 16);
        let value = (i + 1).to_le_bytes();
        let host = &hosts[(i % 2) as usize];
        let reads = (state >> 20) % 5 == 4; // one access in five is a read
        if reads {
            let mut seen = [0u8; 12];
            host.memory().read(offset, &mut seen);
        } else {
            host.memory().write(offset, &value);
        }
    }
    let memory = memory_bytes(&pod, slots, slot_region_bytes);
    (memory, [stats(&hosts[0]), stats(&hosts[1])])
}

/// Both hosts of a run evicted dirty lines at random, and memory shows it: otherwise
/// comparing two runs would prove nothing.
fn assert_evicted(seed: u64, memory: &[u8], stats: &[SimulatedStats; 2]) {
    for (host, stats) in stats.iter().enumerate() {
        assert!(
            stats.evictions > 0 && stats.lines_written_back > 0,
            "seed {seed:#x}: host {host} must evict dirty lines: {stats:?}"
        );
    }
    assert!(
        memory.iter().any(|byte| *byte != 0),
        "seed {seed:#x}: evictions put bytes in memory"
    );
}

#[test]
fn random_eviction_with_the_same_seed_is_reproducible() {
    let seed = 0x5eed_0001;
    let (memory_1, stats_1) = eviction_run(seed);
    let (memory_2, stats_2) = eviction_run(seed);
    assert_evicted(seed, &memory_1, &stats_1);
    assert_eq!(stats_1, stats_2, "seed {seed:#x}: same seed, same stats");
    assert!(
        memory_1 == memory_2,
        "seed {seed:#x}: same seed, different memory (first difference at byte {:?})",
        memory_1.iter().zip(&memory_2).position(|(a, b)| a != b)
    );
}

#[test]
fn random_eviction_with_another_seed_evicts_differently() {
    let (seed_1, seed_2) = (0x5eed_0001, 0x5eed_0002);
    let (memory_1, stats_1) = eviction_run(seed_1);
    let (memory_2, stats_2) = eviction_run(seed_2);
    assert_evicted(seed_1, &memory_1, &stats_1);
    assert_evicted(seed_2, &memory_2, &stats_2);
    for host in 0..2 {
        assert_ne!(
            stats_1[host], stats_2[host],
            "host {host}, seeds {seed_1:#x} and {seed_2:#x}: same stats"
        );
    }
    assert!(
        memory_1 != memory_2,
        "seeds {seed_1:#x} and {seed_2:#x} left the same memory"
    );
}

// ---- byte-exact access at any offset ----

/// A pattern no shifted copy of itself matches: byte `i` is `i * 7 + 3` (mod 251).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + 3) % 251) as u8).collect()
}

#[test]
fn reads_across_line_boundaries_and_at_unaligned_offsets_return_memory_bytes() {
    let pod = heap_pod();
    let writer = join(&pod, MemoryKind::Hardware);
    let reader = join(&pod, simulated(2));
    let base = pod.layout().slot_offset(8);
    let bytes = pattern(4 * LINE);
    writer.memory().write(base, &bytes);
    writer.memory().fence();

    // The second line is cached before the others, so reads mix hits and misses.
    assert_eq!(
        read(&reader, base + LINE_BYTES + 5, 3),
        bytes[LINE + 5..LINE + 8]
    );
    for start in [0usize, 1, 7, 8, 31, 63, 64, 65, 100, 127, 129] {
        for len in [1usize, 2, 7, 8, 9, 63, 64, 65, 128, 129] {
            if start + len > bytes.len() {
                continue;
            }
            assert_eq!(
                read(&reader, base + start as u64, len),
                bytes[start..start + len],
                "read of {len} bytes at {start}"
            );
        }
    }
    assert_eq!(stats(&reader).stale_lines_served, 0);
}

#[test]
fn unaligned_writes_across_line_boundaries_round_trip_through_cache_and_memory() {
    let (pod, [writer, reader]) = pod_and_hosts([1, 2]);
    let base = pod.layout().slot_offset(9);
    let mut expected = vec![0u8; 4 * LINE];
    let writes = [(3usize, 70usize), (61, 7), (120, 9), (190, 60), (255, 1)];
    for (n, (start, len)) in writes.into_iter().enumerate() {
        let data: Vec<u8> = pattern(len).iter().map(|b| b ^ (n as u8 + 1)).collect();
        writer.memory().write(base + start as u64, &data);
        expected[start..start + len].copy_from_slice(&data);
    }
    writer.memory().store_u64(base + 136, 0x0102_0304_0506_0708);
    expected[136..144].copy_from_slice(&0x0102_0304_0506_0708_u64.to_ne_bytes());

    assert_eq!(
        read(&writer, base, expected.len()),
        expected,
        "from the cache"
    );
    assert_eq!(read(&writer, base + 62, 5), expected[62..67]);
    assert_eq!(writer.memory().load_u64(base + 136), 0x0102_0304_0506_0708);

    writer.memory().write_back(base, expected.len());
    writer.memory().fence();
    assert_eq!(
        flushed_read(&reader, base, expected.len()),
        expected,
        "from memory"
    );
    assert_eq!(reader.memory().load_u64(base + 136), 0x0102_0304_0506_0708);
}

/// A line moves between a cache and memory whole, as on the hardware, where a fill and a
/// write-back are one transfer each: a host that fills a line while another host writes
/// it back gets the line before or after, never words of both. (A fill copied with an
/// unordered `rep movsb` once took some words before a write-back and some after: the
/// log's alive word of a new lap with the event bytes of the old one, and the replicas
/// of the stress diverged.)
#[test]
fn a_line_is_filled_whole_while_another_host_writes_it_back() {
    let (pod, [writer, reader]) = pod_and_hosts([1, 2]);
    let line = pod.layout().slot_offset(3);
    let rounds: u64 = 200_000;
    let torn = std::thread::scope(|scope| {
        scope.spawn(|| {
            for n in 1..=rounds {
                // Every word of the line says `n`; one write-back puts it in memory.
                let bytes: Vec<u8> = (0..LINE / 8).flat_map(|_| n.to_ne_bytes()).collect();
                writer.memory().write(line, &bytes);
                writer.memory().write_back(line, LINE);
                writer.memory().fence();
            }
        });
        let reader = scope.spawn(|| {
            let mut torn = 0u64;
            let mut last = 0;
            while last < rounds {
                reader.memory().flush(line, LINE);
                reader.memory().fence();
                let bytes = read(&reader, line, LINE);
                let words: Vec<u64> = bytes
                    .chunks_exact(8)
                    .map(|w| u64::from_ne_bytes(w.try_into().expect("8")))
                    .collect();
                torn += u64::from(words.iter().any(|w| *w != words[0]));
                last = words[0];
            }
            torn
        });
        reader.join().expect("reader")
    });
    assert_eq!(torn, 0, "fills that mixed two write-backs of the line");
}

// ---- flushes, write-backs and non-temporal stores complete at a fence ----

/// A writer and a reader on a new pod whose caches complete nothing before a fence (one
/// access in `u64::MAX` settles at random: never, in a test), and the offset of slot 5.
fn unsettled_pair() -> (Arc<Pod>, Host, Host, u64) {
    unsettled_pair_of(1024)
}

/// [`unsettled_pair`] with caches of `capacity_lines` lines.
fn unsettled_pair_of(capacity_lines: usize) -> (Arc<Pod>, Host, Host, u64) {
    let pod = heap_pod();
    let unsettled = |seed| {
        MemoryKind::Simulated(SimulatedConfig {
            seed,
            capacity_lines,
            random_eviction_one_in: 0,
            settle_one_in: u64::MAX,
        })
    };
    let writer = join(&pod, unsettled(1));
    let reader = join(&pod, unsettled(2));
    let slot = pod.layout().slot_offset(5);
    (pod, writer, reader, slot)
}

#[test]
fn a_write_back_reaches_memory_at_the_writers_fence() {
    let (pod, writer, _, slot) = unsettled_pair();
    writer.memory().write(slot, b"version2");
    writer.memory().write_back(slot, 8);
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        [0; 8],
        "in flight before the fence"
    );
    assert_eq!(
        read(&writer, slot, 8),
        b"version2",
        "the writer reads its own bytes"
    );
    writer.memory().fence();
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        b"version2",
        "in memory after the fence"
    );
    assert_eq!(stats(&writer).completed_by_fence, 1);
}

/// A fence orders only its own thread's write-backs, flushes and non-temporal stores (as
/// `sfence` orders only its core's): another thread of the same host fencing leaves them
/// in flight. (A fence completed the whole host's: a thread that left out its own fence
/// was covered by a sibling's, the combiner's say, and no test could see it.)
#[test]
fn a_fence_completes_only_its_own_threads_writes() {
    let (pod, writer, _, slot) = unsettled_pair();
    let next = slot + LINE_BYTES;
    writer.memory().write(slot, b"version2");
    writer.memory().write_back(slot, 8);
    std::thread::scope(|s| {
        s.spawn(|| {
            writer.memory().write_non_temporal(next, &[7; LINE]);
            writer.memory().fence();
        });
    });
    assert_eq!(
        memory_bytes(&pod, next, 1),
        [7],
        "the other thread's store, fenced"
    );
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        [0; 8],
        "still in flight after another thread's fence"
    );
    writer.memory().fence();
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        b"version2",
        "at its own thread's fence"
    );
}

#[test]
fn a_flushed_line_is_still_served_until_the_readers_fence() {
    let (_, writer, reader, slot) = unsettled_pair();
    assert_eq!(
        read(&reader, slot, 8),
        [0; 8],
        "the reader caches the old line"
    );
    writer.memory().write(slot, b"version2");
    writer.memory().write_back(slot, 8);
    writer.memory().fence();
    reader.memory().flush(slot, 8);
    assert_eq!(
        read(&reader, slot, 8),
        [0; 8],
        "the flush has not completed"
    );
    assert!(cache(&reader).is_cached(slot));
    reader.memory().fence();
    assert!(!cache(&reader).is_cached(slot), "dropped at the fence");
    assert_eq!(read(&reader, slot, 8), b"version2");
}

#[test]
fn a_flush_of_a_dirty_line_writes_it_back_at_the_fence() {
    let (pod, writer, _, slot) = unsettled_pair();
    writer.memory().write(slot, b"version2");
    writer.memory().flush(slot, 8);
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        [0; 8],
        "in flight before the fence"
    );
    assert!(
        !cache(&writer).is_dirty(slot),
        "clean, its bytes on their way"
    );
    writer.memory().fence();
    assert_eq!(memory_bytes(&pod, slot, 8), b"version2");
    assert!(!cache(&writer).is_cached(slot));
}

#[test]
fn a_non_temporal_store_reaches_memory_at_the_fence_after_the_dirty_line_it_drops() {
    let (pod, writer, _, slot) = unsettled_pair();
    // The dirty line's other bytes go first, then the store's word over them.
    writer.memory().write(slot, &[7u8; 16]);
    writer.memory().write_non_temporal(slot, b"version2");
    assert_eq!(
        memory_bytes(&pod, slot, 16),
        [0; 16],
        "in flight before the fence"
    );
    let mut own = b"version2".to_vec();
    own.extend_from_slice(&[7u8; 8]);
    assert_eq!(
        read(&writer, slot, 16),
        own,
        "the writer reads its own store"
    );
    writer.memory().fence();
    assert_eq!(memory_bytes(&pod, slot, 16), own);
}

#[test]
fn a_dirty_line_evicted_with_an_older_write_back_in_flight_lands_last() {
    // A cache of one line: a store to another line evicts this one.
    let (pod, writer, _, slot) = unsettled_pair_of(1);
    writer.memory().write(slot, b"version1");
    writer.memory().write_back(slot, 8);
    writer.memory().write(slot, b"version2");
    // The dirty line goes to memory now, after the write in flight.
    writer.memory().write(slot + 2 * LINE_BYTES, &[1]);
    assert_eq!(memory_bytes(&pod, slot, 8), b"version2");
    writer.memory().fence();
    assert_eq!(
        memory_bytes(&pod, slot, 8),
        b"version2",
        "the fence puts nothing older back"
    );
}

/// A non-temporal store waits in its own core's write-combining buffer until that core
/// fences: another thread of the same host that loads the line neither completes it
/// (another host still reads memory's old bytes) nor sees it. (A fill completed every
/// thread's writes in flight of the line: a thread that left out the fence after its
/// non-temporal store was covered by a sibling's load of the line, as a sibling's fence
/// covered it before `f5c32c8`.)
/// A thread of `writer` stores `bytes` non-temporally at `at`; while it is alive (its
/// store in flight), this thread runs `between`; then the other fences if `fence` says so,
/// and ends. Returns what `between` returned.
fn with_a_siblings_store<R: Send>(
    writer: &Host,
    at: u64,
    bytes: &[u8],
    fence: bool,
    between: impl FnOnce() -> R,
) -> R {
    let (stored_tx, stored_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            writer.memory().write_non_temporal(at, bytes);
            stored_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            if fence {
                writer.memory().fence();
            }
        });
        stored_rx.recv().unwrap();
        let result = between();
        go_tx.send(()).unwrap();
        handle.join().unwrap();
        result
    })
}

#[test]
fn another_threads_load_does_not_complete_a_non_temporal_store() {
    let (pod, writer, _, slot) = unsettled_pair();
    // The storing thread alive, unfenced, while this one loads the line.
    let (seen, in_memory) = with_a_siblings_store(&writer, slot, &[7; LINE], false, || {
        (read(&writer, slot, 1), memory_bytes(&pod, slot, 1))
    });
    assert_eq!(
        in_memory,
        [0],
        "the storing thread never fenced: still in flight after a sibling's load"
    );
    assert_eq!(
        seen,
        [0],
        "a sibling's load does not see another core's buffer"
    );
}

/// Once the storing thread fences, its non-temporal store is in memory, and a sibling that
/// had cached the line's old bytes meanwhile reads the new ones (the store invalidates the
/// line in every cache of its host, as the hardware does).
#[test]
fn a_non_temporal_store_completed_later_invalidates_a_siblings_stale_line() {
    let (pod, writer, _, slot) = unsettled_pair();
    with_a_siblings_store(&writer, slot, &[7; LINE], true, || {
        let _ = read(&writer, slot, 1);
    });
    assert_eq!(memory_bytes(&pod, slot, 1), [7]);
    assert_eq!(read(&writer, slot, 1), [7]);
}

/// A fence completes its own thread's non-temporal store, not another thread's store to
/// other bytes of the same line (each in its own core's write-combining buffer): the other
/// host reads the fenced bytes, and memory's old ones where the unfenced store went.
/// (A fence completed every earlier write of each line it completed, whatever bytes it
/// wrote: the accessor words of neighbouring slots share a line, and a thread that left
/// out the fence after its byte was covered by a sibling's fence after its own.)
#[test]
fn a_fence_leaves_another_threads_store_to_other_bytes_of_the_line_in_flight() {
    let (pod, writer, _, slot) = unsettled_pair();
    let in_memory = with_a_siblings_store(&writer, slot, &[7], false, || {
        writer.memory().write_non_temporal(slot + 8, &[9]);
        writer.memory().fence();
        memory_bytes(&pod, slot, 9)
    });
    assert_eq!(in_memory[8], 9, "its own store, fenced");
    assert_eq!(
        in_memory[0], 0,
        "the other thread's store to other bytes is still in flight"
    );
}

/// A thread's non-temporal store to bytes 0..8 of a line is in
/// flight; a sibling thread of the same host, which does not see it, caches the line
/// (old bytes) and stores to bytes 8..16 (dirty). The storing thread fences: its store is
/// in memory. On hardware the store's completion invalidates the line in every cache of
/// its host, a dirty copy written back first, so memory holds both. (The simulator dropped
/// only a clean copy: the sibling's dirty one stayed, and its later write-back, a whole
/// line, put the old bytes 0..8 back over the fenced store.)
#[test]
fn a_fenced_non_temporal_store_survives_a_siblings_dirty_copy_of_the_line() {
    let (pod, writer, _, slot) = unsettled_pair();
    with_a_siblings_store(&writer, slot, &[7; 8], true, || {
        writer.memory().write(slot + 8, &[9; 8]);
    });
    assert_eq!(memory_bytes(&pod, slot, 1), [7], "fenced");
    writer.memory().write_back(slot + 8, 8);
    writer.memory().fence();
    let in_memory = memory_bytes(&pod, slot, 16);
    assert_eq!(
        in_memory,
        [[7u8; 8], [9u8; 8]].concat(),
        "the sibling's write-back put back old bytes over a fenced non-temporal store"
    );
}

/// A write ticket's `offset` asks `write_end` to write the object's lines back, so a
/// plain store there reaches memory; its `slot`, where the same bytes are, asks nothing
/// (the page cache names a page by it, and its writes go through the ticket).
#[test]
fn a_tickets_offset_has_its_lines_written_back_and_its_slot_does_not() {
    let (pod, [writer]) = pod_and_hosts([1]);
    for (key, by_offset) in [(&b"slot"[..], false), (b"offset", true)] {
        writer.create(key, &[1; 64]).unwrap();
        let ticket = writer.write_start(key).unwrap();
        let slot = writer.lookup(key).unwrap().expect("created").slot;
        assert_eq!(ticket.slot(), slot);
        let offset = pod.layout().slot_offset(ticket.slot());
        if by_offset {
            assert_eq!(ticket.offset(), offset);
        }
        writer.memory().write(offset, &[2; 64]);
        writer.write_end(ticket).unwrap();
        let expected = if by_offset { [2; 64] } else { [1; 64] };
        assert_eq!(
            memory_bytes(&pod, offset, 64),
            expected,
            "by offset: {by_offset}"
        );
    }
}
