//! Simulated non-coherent memory: a private cache of 64-byte lines per host over LNR.
//!
//! Exactly the semantics a non-coherent cache has (DESIGN section 4):
//!
//! - a load hits the host's cached copy of a line if it has one, *even if memory changed*
//!   since (a stale hit, counted in [`SimulatedStats::stale_lines_served`]); a miss fills
//!   the line from memory;
//! - a store writes the host's copy (filling it first on a miss) and makes it dirty;
//!   memory does not change;
//! - a flush writes the line back if dirty and drops it;
//! - a write-back (`clwb`) writes the line back if dirty and keeps it, clean;
//! - a non-temporal store writes memory directly and drops the host's copy (a dirty copy
//!   is written back first, as the hardware does);
//! - none of these three is done when its call returns, but when the thread that issued
//!   it next fences ([`SimulatedConfig::settle_one_in`]): until then the bytes written
//!   back are in flight (other hosts' fills miss them) and a flushed line stays cached,
//!   its stale bytes still served to this host's loads, as `clflushopt` and `clwb` are
//!   ordered only by a fence, and only by one of the core that issued them (another
//!   thread's fence, on this host, leaves them in flight). Now and then, at random (at
//!   an access, or right after a call that issues one), one completes earlier: two writes
//!   to different lines reach memory in either order until the fence;
//! - at random moments, driven by a seeded generator, a random line is evicted (written
//!   back if dirty), and a full cache evicts a random line to make room.
//!
//! A write-back always writes the *whole* line, as hardware does: a line that was filled
//! before another host's write and then partly overwritten here puts the old bytes
//! around the new ones back into memory. That is the hazard the writer's "invalidate
//! stale lines before a partial write" step exists for, and the simulation reproduces it.
//!
//! A line moves between a cache and memory whole, as on the hardware, where a fill and a
//! write-back are one transfer each: a fill never takes some words of a line from before
//! another host's write-back of it and some from after. Within a process a lock per line
//! (striped) makes each transfer atomic; across processes the words of a line are
//! copied in order (loads Acquire, stores Release, first word first), which keeps the
//! rule the log relies on (a line whose first word is new is new throughout, when its
//! writer wrote the rest back before that word) but not whole-line atomicity.
//!
//! Threads of one host share its cache (one lock); SCR accesses are not simulated: they
//! stay real atomics, as the hardware keeps SCR coherent.

use std::collections::HashMap;
use std::sync::Arc;

use crate::limits::LINE_BYTES;
use crate::pod::Pod;
use crate::sync::{fence, Mutex, Ordering};

const LINE: usize = LINE_BYTES as usize;

/// Locks that make a line's transfers between caches and memory atomic within the
/// process: a line takes the stripe of its address.
#[cfg(not(megalon_loom))]
static LINE_TRANSFERS: [parking_lot::Mutex<()>; 64] = [const { parking_lot::Mutex::new(()) }; 64];

/// Holds `line`'s stripe for one transfer. (loom models move words, each a step of the
/// model: a real lock held across a step would block the other model threads for real.)
#[cfg(not(megalon_loom))]
fn line_transfer(pod: &Pod, line: u64) -> parking_lot::MutexGuard<'static, ()> {
    let address = std::ptr::from_ref(pod.word(line * LINE_BYTES)) as usize;
    LINE_TRANSFERS[address / LINE % LINE_TRANSFERS.len()].lock()
}

/// What a loom model's transfer holds: nothing (see above).
#[cfg(megalon_loom)]
struct NoStripe;

#[cfg(megalon_loom)]
fn line_transfer(_pod: &Pod, _line: u64) -> NoStripe {
    NoStripe
}

/// How a simulated cache behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimulatedConfig {
    /// Seed of the eviction generator: the same seed and the same sequence of accesses
    /// evict the same lines.
    pub seed: u64,
    /// Lines the cache holds; a fill into a full cache evicts a random line.
    pub capacity_lines: usize,
    /// On average one random eviction every this many line accesses (0: never evict at
    /// random, only when full).
    pub random_eviction_one_in: u64,
    /// Flushes, write-backs and non-temporal stores complete at the next fence of the
    /// thread that issued them, or, on average once every this many line accesses, one line's at random before
    /// it (0: each completes at once, and a missing fence never shows).
    pub settle_one_in: u64,
}

impl Default for SimulatedConfig {
    fn default() -> Self {
        Self {
            seed: 0x5eed,
            capacity_lines: 8192,
            random_eviction_one_in: 512,
            settle_one_in: 16,
        }
    }
}

/// What a simulated cache has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimulatedStats {
    /// Line accesses served from the cache.
    pub hits: u64,
    /// Line accesses that filled from memory.
    pub misses: u64,
    /// Loads served from a cached line whose clean bytes differ from memory: the reads a
    /// real non-coherent cache would have answered with stale data.
    pub stale_lines_served: u64,
    /// Lines evicted (randomly or for room).
    pub evictions: u64,
    /// Lines written to memory by flush, write-back or eviction.
    pub lines_written_back: u64,
    /// Lines written by non-temporal stores.
    pub non_temporal_lines: u64,
    /// Write-backs and flushes completed by a fence that were still in flight: the
    /// completions a fence made (a missing fence would have left them undone).
    pub completed_by_fence: u64,
}

struct Line {
    bytes: [u8; LINE],
    /// Bit `i` set: byte `i` was stored by this host since the line was filled or last
    /// written back. Only used to tell a stale line from this host's own writes.
    dirty_mask: u64,
}

/// The thread that issued a write-back, a flush or a non-temporal store.
type Issuer = std::thread::ThreadId;

fn issuer() -> Issuer {
    std::thread::current().id()
}

/// A line's write-back or non-temporal store, issued and not completed.
struct InFlight {
    line: u64,
    bytes: [u8; LINE],
    /// Which of the bytes it writes (bit per byte).
    mask: u64,
    /// The thread that issued it: only its own fence orders it, as `sfence` orders only
    /// its core's `clwb`, `clflushopt` and `movnt`.
    by: Issuer,
    /// A non-temporal store: until it completes it sits in its core's write-combining
    /// buffer, which no other core's load sees (a write-back's bytes are the line's,
    /// coherent in the host's caches).
    non_temporal: bool,
}

struct Cache {
    /// Line index (offset / 64) to the line and its place in `order`.
    lines: HashMap<u64, (Line, usize)>,
    /// Cached line indices, for picking a random victim in O(1) (insertion order, with
    /// swap-removal), independent of the map's iteration order.
    order: Vec<u64>,
    rng: u64,
    stats: SimulatedStats,
    /// Writes to memory issued and not completed (see [`SimulatedConfig::settle_one_in`]),
    /// oldest first.
    in_flight: Vec<InFlight>,
    /// Lines flushed whose flush has not completed, each with the thread that flushed it:
    /// still cached (clean), and dropped when it does.
    flushing: Vec<(u64, Issuer)>,
    /// Lines dropped lately (flushed, stored non-temporally, evicted): any of them may
    /// come back at any moment, filled from memory as it is then, as a prefetch or a
    /// speculative load brings a line back on the hardware.
    dropped: Vec<u64>,
}

/// How many lately dropped lines a cache remembers as candidates to come back.
const DROPPED_LINES: usize = 32;

/// One host's simulated non-coherent view of LNR.
pub struct SimulatedMemory {
    pod: Arc<Pod>,
    config: SimulatedConfig,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for SimulatedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedMemory")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// splitmix64 (Steele, Lea, Flood 2014): small, fast, and the same sequence everywhere.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SimulatedMemory {
    /// An empty cache over `pod`'s LNR.
    pub fn new(pod: Arc<Pod>, config: SimulatedConfig) -> Self {
        assert!(
            config.capacity_lines > 0,
            "a simulated cache needs at least one line"
        );
        let cache = Cache {
            lines: HashMap::with_capacity(config.capacity_lines.min(1 << 16)),
            order: Vec::with_capacity(config.capacity_lines.min(1 << 16)),
            rng: config.seed,
            stats: SimulatedStats::default(),
            in_flight: Vec::new(),
            flushing: Vec::new(),
            dropped: Vec::new(),
        };
        Self {
            pod,
            config,
            cache: Mutex::new(cache),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimulatedConfig {
        &self.config
    }

    /// What the cache has done.
    pub fn stats(&self) -> SimulatedStats {
        self.cache.lock().stats
    }

    /// Whether the line holding `offset` is cached.
    pub fn is_cached(&self, offset: u64) -> bool {
        self.cache.lock().lines.contains_key(&(offset / LINE_BYTES))
    }

    /// Whether the line holding `offset` is cached and dirty.
    pub fn is_dirty(&self, offset: u64) -> bool {
        self.cache
            .lock()
            .lines
            .get(&(offset / LINE_BYTES))
            .is_some_and(|(line, _)| line.dirty_mask != 0)
    }

    /// How many cached lines are dirty: bytes this host stored into its cache and has not
    /// written back.
    pub fn dirty_lines(&self) -> usize {
        self.cache
            .lock()
            .lines
            .values()
            .filter(|(line, _)| line.dirty_mask != 0)
            .count()
    }

    /// Evicts every cached line (writing dirty ones back), as a cache that is
    /// thrashed by other work would.
    pub fn evict_all(&self) {
        let mut cache = self.cache.lock();
        self.settle_all(&mut cache);
        while let Some(&line) = cache.order.last() {
            self.evict(&mut cache, line);
        }
    }

    /// The words of `line` in memory.
    fn memory_words(&self, line: u64) -> impl Iterator<Item = &crate::sync::AtomicU64> {
        (0..LINE_BYTES / 8).map(move |i| self.pod.word(line * LINE_BYTES + i * 8))
    }

    /// Fills a copy of `line` from memory: one transfer (see the module's docs).
    fn read_memory_line(&self, line: u64) -> [u8; LINE] {
        let _transfer = line_transfer(&self.pod, line);
        let mut bytes = [0u8; LINE];
        for (word, chunk) in self.memory_words(line).zip(bytes.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
        }
        bytes
    }

    /// Writes the bytes of `line` that `mask` names (a bit per byte) to memory: one
    /// transfer. A word named in part keeps its other bytes (a byte-masked store).
    fn write_memory_line(&self, line: u64, bytes: &[u8; LINE], mask: u64) {
        let _transfer = line_transfer(&self.pod, line);
        for (i, (word, chunk)) in self
            .memory_words(line)
            .zip(bytes.chunks_exact(8))
            .enumerate()
        {
            let value = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
            let byte_mask = (mask >> (i * 8)) & 0xff;
            if byte_mask == 0xff {
                word.store(value, Ordering::Release);
            } else if byte_mask != 0 {
                let keep = u64::from_ne_bytes(std::array::from_fn(|b| {
                    if byte_mask & (1 << b) == 0 {
                        0xff
                    } else {
                        0
                    }
                }));
                let mut current = word.load(Ordering::Acquire);
                loop {
                    let merged = (current & keep) | (value & !keep);
                    match word.compare_exchange_weak(
                        current,
                        merged,
                        Ordering::Release,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(now) => current = now,
                    }
                }
            }
        }
    }

    /// Issues a write of `line`'s bytes that `mask` names to memory: done now, or (with
    /// [`SimulatedConfig::settle_one_in`]) in flight until it completes.
    fn issue_write(
        &self,
        cache: &mut Cache,
        line: u64,
        bytes: [u8; LINE],
        mask: u64,
        non_temporal: bool,
    ) {
        if self.config.settle_one_in == 0 {
            self.write_memory_line(line, &bytes, mask);
        } else {
            cache.in_flight.push(InFlight {
                line,
                bytes,
                mask,
                by: issuer(),
                non_temporal,
            });
        }
    }

    /// Completes one write in flight. A non-temporal store invalidates the line in the
    /// host's caches as it completes: a clean copy a sibling thread filled meanwhile (of
    /// memory's older bytes: it did not see the store's buffer) is dropped.
    /// A dirty copy (a sibling's stores over the old bytes) is written back first, then
    /// the store's bytes land over it, as the hardware's snoop does: kept, its later
    /// write-back (a whole line) would put the old bytes back over the store.
    fn complete(&self, cache: &mut Cache, write: InFlight) {
        let line = write.line;
        if write.non_temporal {
            self.drop_line_now(cache, line);
        }
        self.write_memory_line(line, &write.bytes, write.mask);
    }

    /// Before the calling thread fills `line`: completes the line's writes in flight that
    /// its load sees (write-backs, whoever issued them, and its own thread's non-temporal
    /// stores), and before them every earlier write of the line they overlap. Another
    /// thread's non-temporal store stays in its core's buffer. Returns how many.
    fn settle_line_for_fill(&self, cache: &mut Cache, line: u64) -> u64 {
        let me = issuer();
        self.settle_anchored(cache, Some(line), |write| {
            !write.non_temporal || write.by == me
        })
    }

    /// Completes the writes in flight that `anchor` picks (of `line` only, if given), and
    /// before each every earlier write of its line whose bytes overlap it or another one
    /// completed after it (a line's bytes reach memory in the order they were written).
    /// Returns how many.
    fn settle_anchored(
        &self,
        cache: &mut Cache,
        line: Option<u64>,
        anchor: impl Fn(&InFlight) -> bool,
    ) -> u64 {
        let writes = std::mem::take(&mut cache.in_flight);
        let mut selected = vec![false; writes.len()];
        let mut needed: HashMap<u64, u64> = HashMap::new();
        for (i, write) in writes.iter().enumerate().rev() {
            if line.is_some_and(|l| l != write.line) {
                continue;
            }
            let need = needed.entry(write.line).or_insert(0);
            if anchor(write) || write.mask & *need != 0 {
                selected[i] = true;
                *need |= write.mask;
            }
        }
        let mut settled = 0;
        for (write, selected) in writes.into_iter().zip(selected) {
            if selected {
                self.complete(cache, write);
                settled += 1;
            } else {
                cache.in_flight.push(write);
            }
        }
        settled
    }

    /// Completes `line`'s writes in flight, oldest first. Returns how many.
    fn settle_line(&self, cache: &mut Cache, line: u64) -> u64 {
        let mut settled = 0;
        let mut i = 0;
        while i < cache.in_flight.len() {
            if cache.in_flight[i].line == line {
                let write = cache.in_flight.remove(i);
                self.complete(cache, write);
                settled += 1;
            } else {
                i += 1;
            }
        }
        settled
    }

    /// Completes every write in flight and every flush (all of them, whoever issued them).
    /// Returns how many.
    fn settle_all(&self, cache: &mut Cache) -> u64 {
        let writes = std::mem::take(&mut cache.in_flight);
        let flushes = std::mem::take(&mut cache.flushing);
        let settled = (writes.len() + flushes.len()) as u64;
        for write in writes {
            self.complete(cache, write);
        }
        for (line, _) in flushes {
            self.drop_line_now(cache, line);
        }
        settled
    }

    /// Completes every write in flight and every flush that `by` issued (its fence), and
    /// before each of its writes every earlier write of the same line it overlaps (a
    /// line's bytes reach memory in order, whoever wrote them; another core's store to
    /// other bytes stays in its buffer). Returns how many.
    fn settle_issued_by(&self, cache: &mut Cache, by: Issuer) -> u64 {
        let mut settled = self.settle_anchored(cache, None, |write| write.by == by);
        let (flushes, others) = std::mem::take(&mut cache.flushing)
            .into_iter()
            .partition::<Vec<_>, _>(|&(_, issuer)| issuer == by);
        cache.flushing = others;
        settled += flushes.len() as u64;
        for (line, _) in flushes {
            self.drop_line_now(cache, line);
        }
        settled
    }

    /// Now and then (one access in [`SimulatedConfig::settle_one_in`]) completes one
    /// line's writes in flight, and one flush, picked at random, before any fence.
    fn settle_at_random(&self, cache: &mut Cache) {
        let one_in = self.config.settle_one_in;
        if !cache.in_flight.is_empty() && next_random(&mut cache.rng).is_multiple_of(one_in) {
            self.settle_a_line_at_random(cache);
        }
        if !cache.flushing.is_empty() && next_random(&mut cache.rng).is_multiple_of(one_in) {
            let pick = next_random(&mut cache.rng) % cache.flushing.len() as u64;
            let (line, _) = cache.flushing.swap_remove(pick as usize);
            self.drop_line_now(cache, line);
        }
    }

    /// A flush of `line`: written back if dirty and dropped, now or (with
    /// [`SimulatedConfig::settle_one_in`]) with its write-back in flight and the line kept,
    /// clean, until the flush completes. Returns whether it was cached.
    fn drop_line(&self, cache: &mut Cache, line: u64) -> bool {
        if self.config.settle_one_in == 0 {
            return self.drop_line_now(cache, line);
        }
        let Some((data, _)) = cache.lines.get_mut(&line) else {
            return false;
        };
        if data.dirty_mask != 0 {
            data.dirty_mask = 0;
            let bytes = data.bytes;
            cache.in_flight.push(InFlight {
                line,
                bytes,
                mask: u64::MAX,
                by: issuer(),
                non_temporal: false,
            });
            cache.stats.lines_written_back += 1;
        }
        let flush = (line, issuer());
        if !cache.flushing.contains(&flush) {
            cache.flushing.push(flush);
        }
        true
    }

    /// Drops `line` from the cache at once, writing it back if dirty (after its writes in
    /// flight: a line's writes reach memory in order); a flush of it under way is done.
    /// Returns whether it was cached.
    fn drop_line_now(&self, cache: &mut Cache, line: u64) -> bool {
        cache.flushing.retain(|&(l, _)| l != line);
        let Some((data, place)) = cache.lines.remove(&line) else {
            return false;
        };
        cache.order.swap_remove(place);
        if !cache.dropped.contains(&line) {
            if cache.dropped.len() == DROPPED_LINES {
                cache.dropped.remove(0);
            }
            cache.dropped.push(line);
        }
        if let Some(&moved) = cache.order.get(place) {
            cache
                .lines
                .get_mut(&moved)
                .expect("order and lines agree")
                .1 = place;
        }
        if data.dirty_mask != 0 {
            self.settle_line(cache, line);
            self.write_memory_line(line, &data.bytes, u64::MAX);
            cache.stats.lines_written_back += 1;
        }
        true
    }

    fn evict(&self, cache: &mut Cache, line: u64) {
        if self.drop_line_now(cache, line) {
            cache.stats.evictions += 1;
        }
    }

    fn evict_random(&self, cache: &mut Cache) {
        if cache.order.is_empty() {
            return;
        }
        let victim = cache.order[(next_random(&mut cache.rng) % cache.order.len() as u64) as usize];
        self.evict(cache, victim);
    }

    /// Brings `line` into the cache if it is not there. Returns whether it was a hit.
    fn touch(&self, cache: &mut Cache, line: u64) -> bool {
        if self.config.settle_one_in > 0 {
            self.settle_at_random(cache);
            self.refill_at_random(cache);
        }
        let one_in = self.config.random_eviction_one_in;
        if one_in > 0 && next_random(&mut cache.rng).is_multiple_of(one_in) {
            self.evict_random(cache);
        }
        if cache.lines.contains_key(&line) {
            cache.stats.hits += 1;
            return true;
        }
        if cache.order.len() >= self.config.capacity_lines {
            self.evict_random(cache);
        }
        self.fill(cache, line);
        cache.stats.misses += 1;
        false
    }

    /// Brings `line` into `cache`, clean, with memory's bytes. This host's own writes in
    /// flight are visible to its own loads (the hardware forwards them): they complete
    /// before the fill. Not another thread's non-temporal store: it is in that core's
    /// buffer, which this load misses.
    fn fill(&self, cache: &mut Cache, line: u64) {
        self.settle_line_for_fill(cache, line);
        let bytes = self.read_memory_line(line);
        let place = cache.order.len();
        cache.order.push(line);
        cache.lines.insert(
            line,
            (
                Line {
                    bytes,
                    dirty_mask: 0,
                },
                place,
            ),
        );
    }

    /// Now and then (one call in [`SimulatedConfig::settle_one_in`]) brings back a line
    /// dropped lately, filled from memory as it is now (a prefetch, a speculative load):
    /// a flush guarantees only that the next fill comes from memory *after* it, not at
    /// the load that follows.
    fn refill_at_random(&self, cache: &mut Cache) {
        let one_in = self.config.settle_one_in;
        if cache.dropped.is_empty() || !next_random(&mut cache.rng).is_multiple_of(one_in) {
            return;
        }
        let pick = (next_random(&mut cache.rng) % cache.dropped.len() as u64) as usize;
        let line = cache.dropped.swap_remove(pick);
        if cache.lines.contains_key(&line) || cache.order.len() >= self.config.capacity_lines {
            return;
        }
        self.fill(cache, line);
    }

    /// Calls `each(line, start_in_line, range_in_buffer)` for every line of the range.
    fn for_each_line(
        offset: u64,
        len: usize,
        mut each: impl FnMut(u64, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0usize;
        while done < len {
            let at = offset + done as u64;
            let line = at / LINE_BYTES;
            let start = (at % LINE_BYTES) as usize;
            let n = (LINE - start).min(len - done);
            each(line, start, done..done + n);
            done += n;
        }
    }

    /// See [`super::Memory::read`].
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        self.pod.assert_in_lnr(offset, buf.len());
        let mut cache = self.cache.lock();
        Self::for_each_line(offset, buf.len(), |line, start, range| {
            let hit = self.touch(&mut cache, line);
            // (A line with this host's writes in flight differs from memory by its own
            // bytes: not stale.)
            if hit && !cache.in_flight.iter().any(|write| write.line == line) {
                let memory = self.read_memory_line(line);
                let (data, _) = &cache.lines[&line];
                let stale = (0..LINE)
                    .any(|i| data.dirty_mask & (1 << i) == 0 && data.bytes[i] != memory[i]);
                if stale {
                    cache.stats.stale_lines_served += 1;
                }
            }
            let (data, _) = &cache.lines[&line];
            buf[range.clone()].copy_from_slice(&data.bytes[start..start + range.len()]);
        });
    }

    /// See [`super::Memory::write`].
    pub fn write(&self, offset: u64, data: &[u8]) {
        self.pod.assert_in_lnr(offset, data.len());
        let mut cache = self.cache.lock();
        Self::for_each_line(offset, data.len(), |line, start, range| {
            // A store into a line being flushed waits for the flush (a store never
            // lands in a copy about to be dropped).
            if cache.flushing.iter().any(|&(l, _)| l == line) {
                self.drop_line_now(&mut cache, line);
            }
            self.touch(&mut cache, line);
            let (cached, _) = cache.lines.get_mut(&line).expect("touched");
            cached.bytes[start..start + range.len()].copy_from_slice(&data[range.clone()]);
            for i in start..start + range.len() {
                cached.dirty_mask |= 1 << i;
            }
        });
    }

    /// See [`super::Memory::load_u64`].
    pub fn load_u64(&self, offset: u64) -> u64 {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        let mut bytes = [0u8; 8];
        self.read(offset, &mut bytes);
        u64::from_ne_bytes(bytes)
    }

    /// See [`super::Memory::store_u64`].
    pub fn store_u64(&self, offset: u64, value: u64) {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        self.write(offset, &value.to_ne_bytes());
    }

    /// See [`super::Memory::flush`].
    pub fn flush(&self, offset: u64, len: usize) {
        self.pod.assert_in_lnr(offset, len);
        let mut cache = self.cache.lock();
        self.flush_locked(&mut cache, offset, len);
    }

    fn flush_locked(&self, cache: &mut Cache, offset: u64, len: usize) {
        Self::for_each_line(offset, len, |line, _, _| {
            self.drop_line(cache, line);
        });
        self.settle_after_issue(cache);
    }

    /// After a call that issues writes or flushes: now and then one of those in flight
    /// completes, as at an access. Two of them to different lines are ordered by nothing
    /// but a fence (the write-combining buffers drain in any order), so a later one may
    /// reach memory first with no access of this host between it and the fence.
    /// Half as often as at an access: at the most eager rate (one in one) a write issued
    /// first would always complete before the next is issued.
    fn settle_after_issue(&self, cache: &mut Cache) {
        let one_in = self.config.settle_one_in.saturating_mul(2);
        if one_in > 0
            && !cache.in_flight.is_empty()
            && next_random(&mut cache.rng).is_multiple_of(one_in)
        {
            self.settle_a_line_at_random(cache);
        }
    }

    /// Completes the writes in flight of one line, picked at random among them (some
    /// must be in flight).
    fn settle_a_line_at_random(&self, cache: &mut Cache) {
        let pick = next_random(&mut cache.rng) % cache.in_flight.len() as u64;
        let line = cache.in_flight[pick as usize].line;
        self.settle_line(cache, line);
    }

    /// See [`super::Memory::write_back`].
    pub fn write_back(&self, offset: u64, len: usize) {
        self.pod.assert_in_lnr(offset, len);
        let mut cache = self.cache.lock();
        Self::for_each_line(offset, len, |line, _, _| {
            let Some((data, _)) = cache.lines.get_mut(&line) else {
                return;
            };
            if data.dirty_mask != 0 {
                data.dirty_mask = 0;
                let bytes = data.bytes;
                self.issue_write(&mut cache, line, bytes, u64::MAX, false);
                cache.stats.lines_written_back += 1;
            }
        });
        self.settle_after_issue(&mut cache);
    }

    /// See [`super::Memory::write_non_temporal`].
    pub fn write_non_temporal(&self, offset: u64, data: &[u8]) {
        self.pod.assert_in_lnr(offset, data.len());
        // One lock for the whole store, so another thread of this host cannot cache the
        // old line between the drop and the store.
        let mut cache = self.cache.lock();
        // A cached copy (written back if dirty) is dropped first, as the hardware does:
        // at once (a later fill by this host must not find it), its write-back issued
        // before the store's.
        Self::for_each_line(offset, data.len(), |line, start, range| {
            if let Some((cached, _)) = cache.lines.get_mut(&line) {
                if cached.dirty_mask != 0 {
                    cached.dirty_mask = 0;
                    let bytes = cached.bytes;
                    self.issue_write(&mut cache, line, bytes, u64::MAX, false);
                    cache.stats.lines_written_back += 1;
                }
            }
            self.drop_line_now(&mut cache, line);
            // Each line's bytes in one transfer; the other bytes of a word stay.
            let mut bytes = [0u8; LINE];
            bytes[start..start + range.len()].copy_from_slice(&data[range.clone()]);
            let mask = if range.len() == LINE {
                u64::MAX
            } else {
                ((1u64 << range.len()) - 1) << start
            };
            self.issue_write(&mut cache, line, bytes, mask, true);
            cache.stats.non_temporal_lines += 1;
        });
        self.settle_after_issue(&mut cache);
    }

    /// See [`super::Memory::fence`]. Completes the flushes, write-backs and non-temporal
    /// stores in flight that the calling thread issued (atomic stores to memory), and
    /// orders them before the (Release) SCR store that publishes them. Another thread's
    /// stay in flight: a fence orders only its own core's.
    pub fn fence(&self) {
        if self.config.settle_one_in > 0 {
            let mut cache = self.cache.lock();
            if !cache.in_flight.is_empty() || !cache.flushing.is_empty() {
                let settled = self.settle_issued_by(&mut cache, issuer());
                cache.stats.completed_by_fence += settled;
            }
            self.refill_at_random(&mut cache);
        }
        fence(Ordering::SeqCst);
    }
}
