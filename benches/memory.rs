//! What it costs to push an object to memory, and what the `Memory` enum costs.
//!
//! Every result is read as a ratio against a baseline measured in the same run: the
//! machines this runs on are shared and noisy, so absolute times drift between runs and
//! even between two benchmarks of one run. `docs/memory.md` has the numbers.
//!
//! - `push_1KiB`, `push_4KiB`: per object, a plain copy into a line-aligned buffer (the
//!   baseline); the same copy followed by `clflush` per line (with and without a closing
//!   `sfence`), by `clflushopt` per line and `sfence`, by `clwb` per line and `sfence`;
//!   and non-temporal stores of the object and `sfence` instead of the copy. Each
//!   iteration takes the next object of a [`RING_BYTES`] buffer (4096 objects of 1 KiB,
//!   1024 of 4 KiB), so the lines it flushes were really just written and are not the
//!   same few hot lines every time.
//! - `dispatch`: `read` of 1 KiB, `write` of 1 KiB and `load_u64` on a heap pod, through
//!   the [`Memory`] enum (hardware variant; under `MEGALON_BENCH_MEMORY=cxl`, the CXL
//!   cost model's, whose bookkeeping the pairs then measure) and through
//!   [`HardwareMemory`] directly. The
//!   reference to the memory goes through `black_box` every iteration, so the compiler
//!   cannot see which variant the enum holds and must branch each time.
//!
//! Each comparison runs twice. First as criterion benchmarks, one after the other:
//! absolute times with criterion's confidence interval. Then, under `cargo bench` only,
//! *paired*: blocks of the variant and its baseline alternate (which goes first
//! alternates too) for [`PAIRED_ROUNDS`] rounds, each side with its own buffer, and the
//! quartiles of the per-round ratio are printed. Drift of a shared machine hits both
//! halves of a round alike and the median ignores the rounds another tenant interrupted,
//! so the paired ratio is the one to quote; the criterion times say what one call costs.
//!
//! Run: `cargo bench --bench memory -- --warm-up-time 1 --measurement-time 3`
//! (about 100 seconds; a criterion filter after `--` skips criterion benchmarks but not
//! the paired runs).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use megalon_core::arch::{self, FlushInstruction};

const LINE_BYTES: usize = megalon_core::limits::LINE_BYTES as usize;
use megalon_core::memory::HardwareMemory;
use megalon_core::{Backing, Memory, Pod, PodConfig};

mod common;

/// Bytes of the buffer each push benchmark cycles through, whatever the object size:
/// more than a core's L2 cache, so a line has left L1 and L2 before its object comes
/// round again, and small enough that the two buffers of a paired run both fit in a
/// server's L3, so neither side evicts the other's.
const RING_BYTES: usize = 4 << 20;

/// Object sizes the push benchmarks measure.
const OBJECT_SIZES_BYTES: [usize; 2] = [1024, 4096];

/// Bytes of the object the dispatch benchmarks read and write.
const DISPATCH_OBJECT_BYTES: usize = 1024;

/// Slots the dispatch benchmarks cycle through: 16 KiB, small enough to stay in L1, so
/// the branch is not hidden behind cache misses.
const DISPATCH_SLOTS: u64 = 16;

/// Rounds of each paired comparison; odd, so the median is one round's ratio.
const PAIRED_ROUNDS: usize = 1001;

/// Least time the baseline's half of a paired round takes: long against the clock's
/// resolution, short against a scheduler's time slice, so most rounds run undisturbed.
const PAIRED_BLOCK_MIN: Duration = Duration::from_micros(50);

/// One cache line of the destination buffer; a `Vec` of them is line-aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE_BYTES]);

const _: () = assert!(std::mem::size_of::<Line>() == LINE_BYTES);
const _: () = assert!(std::mem::align_of::<Line>() == LINE_BYTES);

/// A line-aligned buffer of [`RING_BYTES`] cut into objects of one size, touched only
/// through raw pointers (the flush instructions take addresses, not references).
struct ObjectRing {
    lines: Vec<Line>,
    object_bytes: usize,
    objects: usize,
    next: usize,
}

impl ObjectRing {
    fn new(object_bytes: usize) -> Self {
        assert_eq!(object_bytes % LINE_BYTES, 0, "objects are whole lines");
        assert_eq!(RING_BYTES % object_bytes, 0, "the ring is whole objects");
        let mut lines = vec![Line([0; LINE_BYTES]); RING_BYTES / LINE_BYTES];
        // Touch every page now, so no iteration pays for a first-touch page fault.
        lines.iter_mut().for_each(|line| line.0[0] = 1);
        Self {
            lines,
            object_bytes,
            objects: RING_BYTES / object_bytes,
            next: 0,
        }
    }

    /// The start of the next object, cycling through the ring.
    #[inline]
    fn next_object(&mut self) -> *mut u8 {
        let index = self.next;
        self.next = (self.next + 1) % self.objects;
        // SAFETY: `index < objects`, so the object lies inside `lines`, which is
        // `objects * object_bytes` long.
        unsafe { (self.lines.as_mut_ptr() as *mut u8).add(index * self.object_bytes) }
    }
}

/// The copy every push variant starts with (all but the non-temporal one): a plain
/// `memcpy` of the object into its place in the ring.
///
/// # Safety
/// `[dst, dst + src.len())` must lie inside a live buffer no one else accesses.
#[inline]
unsafe fn copy_object(dst: *mut u8, src: &[u8]) {
    // SAFETY: `dst` is valid for `src.len()` bytes (caller) and cannot overlap `src`,
    // which is a separate allocation.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// How one push variant gets the object to memory.
#[derive(Clone, Copy)]
enum Push {
    /// The baseline: the copy alone; the lines stay dirty in this host's cache.
    Copy,
    /// The copy, then `instruction` on every line, then `sfence` if `fence`.
    CopyThenFlush {
        instruction: FlushInstruction,
        fence: bool,
    },
    /// Non-temporal stores of the object, then `sfence`.
    NonTemporal,
}

impl Push {
    const ALL: [Push; 6] = [
        Push::Copy,
        Push::CopyThenFlush {
            instruction: FlushInstruction::Clflush,
            fence: false,
        },
        // `clflush` again, with the closing fence the weakly-ordered instructions need,
        // so that it and `clflushopt` differ only in the instruction.
        Push::CopyThenFlush {
            instruction: FlushInstruction::Clflush,
            fence: true,
        },
        Push::CopyThenFlush {
            instruction: FlushInstruction::Clflushopt,
            fence: true,
        },
        Push::CopyThenFlush {
            instruction: FlushInstruction::Clwb,
            fence: true,
        },
        Push::NonTemporal,
    ];

    fn name(self) -> String {
        match self {
            Push::Copy => "copy".to_owned(),
            Push::CopyThenFlush { instruction, fence } => format!(
                "copy+{}{}",
                instruction.name(),
                if fence { "+sfence" } else { "" }
            ),
            Push::NonTemporal => "nt_store+sfence".to_owned(),
        }
    }

    /// Pushes `object` to `dst`.
    ///
    /// # Safety
    /// As for [`copy_object`]; `dst` is line-aligned.
    #[inline]
    unsafe fn run(self, dst: *mut u8, object: &[u8]) {
        match self {
            Push::Copy => {
                // SAFETY: the caller's contract.
                unsafe { copy_object(dst, object) };
            }
            Push::CopyThenFlush { instruction, fence } => {
                // SAFETY: the caller's contract, for both calls.
                unsafe {
                    copy_object(dst, object);
                    arch::flush_with(instruction, dst, object.len());
                }
                if fence {
                    arch::store_fence();
                }
            }
            Push::NonTemporal => {
                // SAFETY: the caller's contract; `dst` is line-aligned and the object is
                // whole lines, so both are multiples of 8.
                unsafe { arch::store_non_temporal(dst, object) };
                arch::store_fence();
            }
        }
    }
}

/// The body of one push benchmark: the next object of its own ring, pushed with `push`.
fn push_body(push: Push, object: &[u8]) -> impl FnMut() + '_ {
    let mut ring = ObjectRing::new(object.len());
    move || {
        let dst = ring.next_object();
        // SAFETY: `dst` is a line-aligned object of `object.len()` bytes inside the ring,
        // which only this closure touches.
        unsafe { push.run(dst, black_box(object)) };
    }
}

/// Checks that every push variant leaves the object's bytes in place.
fn check_push(object: &[u8]) {
    let mut ring = ObjectRing::new(object.len());
    for push in Push::ALL {
        let dst = ring.next_object();
        // SAFETY: `dst` is a line-aligned object of `object.len()` bytes inside the ring,
        // which only this function touches.
        let written = unsafe {
            std::ptr::write_bytes(dst, 0, object.len());
            push.run(dst, object);
            std::slice::from_raw_parts(dst, object.len())
        };
        assert_eq!(written, object, "{} lost bytes", push.name());
    }
}

fn bench_push(c: &mut Criterion, paired_runs: bool) {
    for object_bytes in OBJECT_SIZES_BYTES {
        let object: Vec<u8> = (0..object_bytes).map(|i| (i * 31 + 7) as u8).collect();
        check_push(&object);
        let group_name = format!("push_{}KiB", object_bytes / 1024);
        let mut group = c.benchmark_group(&group_name);
        for push in Push::ALL {
            let mut body = push_body(push, &object);
            group.bench_function(push.name(), |b| b.iter(&mut body));
        }
        group.finish();
        if paired_runs {
            let baseline = Push::ALL[0];
            for &push in &Push::ALL[1..] {
                paired(
                    &group_name,
                    (&push.name(), push_body(push, &object)),
                    (&baseline.name(), push_body(baseline, &object)),
                );
            }
        }
    }
}

/// The three operations the dispatch benchmarks time, on either receiver. Each method
/// forwards to the inherent method of the same name and is inlined, so the enum and the
/// direct loops are the same generic code apart from the receiver's type.
trait Access {
    fn read(&self, offset: u64, buf: &mut [u8]);
    fn write(&self, offset: u64, data: &[u8]);
    fn load_u64(&self, offset: u64) -> u64;
}

impl Access for Memory {
    #[inline]
    fn read(&self, offset: u64, buf: &mut [u8]) {
        Memory::read(self, offset, buf)
    }
    #[inline]
    fn write(&self, offset: u64, data: &[u8]) {
        Memory::write(self, offset, data)
    }
    #[inline]
    fn load_u64(&self, offset: u64) -> u64 {
        Memory::load_u64(self, offset)
    }
}

impl Access for HardwareMemory {
    #[inline]
    fn read(&self, offset: u64, buf: &mut [u8]) {
        HardwareMemory::read(self, offset, buf)
    }
    #[inline]
    fn write(&self, offset: u64, data: &[u8]) {
        HardwareMemory::write(self, offset, data)
    }
    #[inline]
    fn load_u64(&self, offset: u64) -> u64 {
        HardwareMemory::load_u64(self, offset)
    }
}

/// Hands out `offsets` in turn, round and round.
fn cycle(offsets: &[u64]) -> impl FnMut() -> u64 + '_ {
    let mut next = 0usize;
    move || {
        let offset = offsets[next];
        next = (next + 1) % offsets.len();
        offset
    }
}

/// A dispatch benchmark's own buffer, page-aligned so that the enum's and the direct
/// side's buffers sit at the same place relative to the slots (the same cache sets, the
/// same 4 KiB aliasing): only the receiver differs.
#[repr(C, align(4096))]
struct PageAligned([u8; DISPATCH_OBJECT_BYTES]);

/// The body of the `read` benchmark: 1 KiB from the next offset into a buffer.
fn read_body<'a, M: Access>(memory: &'a M, offsets: &'a [u64]) -> impl FnMut() + 'a {
    let mut next_offset = cycle(offsets);
    let mut buffer = Box::new(PageAligned([0; DISPATCH_OBJECT_BYTES]));
    move || {
        black_box(memory).read(next_offset(), &mut buffer.0);
        black_box(&buffer);
    }
}

/// The body of the `write` benchmark: 1 KiB to the next offset.
fn write_body<'a, M: Access>(memory: &'a M, offsets: &'a [u64]) -> impl FnMut() + 'a {
    let mut next_offset = cycle(offsets);
    let mut object = Box::new(PageAligned([0; DISPATCH_OBJECT_BYTES]));
    object
        .0
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    move || black_box(memory).write(next_offset(), black_box(&object.0))
}

/// The body of the `load_u64` benchmark: the first word at the next offset.
fn load_body<'a, M: Access>(memory: &'a M, offsets: &'a [u64]) -> impl FnMut() + 'a {
    let mut next_offset = cycle(offsets);
    move || {
        black_box(black_box(memory).load_u64(next_offset()));
    }
}

/// Times one operation through the enum and directly, back to back, then paired.
fn compare_dispatch(
    group: &mut BenchmarkGroup<'_, WallTime>,
    operation: &str,
    mut through_enum: impl FnMut(),
    mut direct: impl FnMut(),
    paired_runs: bool,
) {
    group.bench_function(BenchmarkId::new(operation, "enum"), |b| {
        b.iter(&mut through_enum)
    });
    group.bench_function(BenchmarkId::new(operation, "direct"), |b| {
        b.iter(&mut direct)
    });
    if paired_runs {
        paired(
            &format!("dispatch/{operation}"),
            ("enum", through_enum),
            ("direct", direct),
        );
    }
}

fn bench_dispatch(c: &mut Criterion, paired_runs: bool) {
    let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).expect("a heap pod"));
    assert!(pod.config().slot_size_bytes >= DISPATCH_OBJECT_BYTES as u64);
    let offsets: Vec<u64> = (0..DISPATCH_SLOTS)
        .map(|slot| pod.layout().slot_offset(slot))
        .collect();
    // Under `MEGALON_BENCH_MEMORY=cxl` the enum holds the CXL cost model, and the pairs
    // measure what its bookkeeping adds to a call whose lines it holds valid (16 slots:
    // after the first round every line is a hit, nothing is charged).
    let kind = common::memory();
    let through_enum = Memory::new(Arc::clone(&pod), kind.clone());
    assert_eq!(through_enum.kind_name(), kind.name());
    let direct = HardwareMemory::new(Arc::clone(&pod));

    let mut group = c.benchmark_group("dispatch");
    // Each pair back to back, so slow drift of the machine touches both alike.
    compare_dispatch(
        &mut group,
        "read_1KiB",
        read_body(&through_enum, &offsets),
        read_body(&direct, &offsets),
        paired_runs,
    );
    compare_dispatch(
        &mut group,
        "write_1KiB",
        write_body(&through_enum, &offsets),
        write_body(&direct, &offsets),
        paired_runs,
    );
    compare_dispatch(
        &mut group,
        "load_u64",
        load_body(&through_enum, &offsets),
        load_body(&direct, &offsets),
        paired_runs,
    );
    group.finish();
}

/// Runs `variant` and `baseline` in alternating blocks of the same number of iterations
/// (which goes first alternates too: [`common::alternate`]) for [`PAIRED_ROUNDS`] rounds,
/// and prints the quartiles of the per-round ratio variant / baseline and the median time
/// per iteration of each.
fn paired(group: &str, variant: (&str, impl FnMut()), baseline: (&str, impl FnMut())) {
    fn block(iterations: u64, body: &mut impl FnMut()) -> Duration {
        let start = Instant::now();
        for _ in 0..iterations {
            body();
        }
        start.elapsed()
    }
    let (variant_name, mut variant) = variant;
    let (baseline_name, mut baseline) = baseline;
    // The fastest of three, so one interrupted block does not stop the doubling early.
    let mut iterations = 1u64;
    while (0..3)
        .map(|_| block(iterations, &mut baseline))
        .min()
        .expect("three blocks")
        < PAIRED_BLOCK_MIN
    {
        iterations *= 2;
    }
    block(iterations, &mut variant); // warm-up
    let mut ratios = Vec::with_capacity(PAIRED_ROUNDS);
    let mut variant_ns = Vec::with_capacity(PAIRED_ROUNDS);
    let mut baseline_ns = Vec::with_capacity(PAIRED_ROUNDS);
    let rounds = common::alternate(
        PAIRED_ROUNDS,
        |_| block(iterations, &mut variant),
        |_| block(iterations, &mut baseline),
    );
    for (variant_time, baseline_time) in rounds {
        ratios.push(variant_time.as_secs_f64() / baseline_time.as_secs_f64());
        variant_ns.push(variant_time.as_secs_f64() * 1e9 / iterations as f64);
        baseline_ns.push(baseline_time.as_secs_f64() * 1e9 / iterations as f64);
    }
    for samples in [&mut ratios, &mut variant_ns, &mut baseline_ns] {
        samples.sort_by(f64::total_cmp);
    }
    let quartile = |samples: &[f64], q: usize| samples[(samples.len() - 1) * q / 4];
    println!(
        "paired {group}: {variant_name} / {baseline_name} = {:.3} \
         (quartiles {:.3}..{:.3}, range {:.3}..{:.3}); \
         median {:.2} ns vs {:.2} ns; {PAIRED_ROUNDS} rounds of {iterations}",
        quartile(&ratios, 2),
        quartile(&ratios, 1),
        quartile(&ratios, 3),
        quartile(&ratios, 0),
        quartile(&ratios, 4),
        quartile(&variant_ns, 2),
        quartile(&baseline_ns, 2),
    );
}

fn main() {
    let features = arch::features();
    println!("memory bench: cache-line instructions on this CPU ({features:?}):");
    for instruction in FlushInstruction::ALL {
        println!(
            "  {:<10} {}",
            instruction.name(),
            if instruction.is_supported() {
                "native"
            } else {
                "missing: falls back to clflush"
            }
        );
    }
    let paired_runs = common::paired_runs();
    let mut criterion = Criterion::default().configure_from_args();
    bench_push(&mut criterion, paired_runs);
    bench_dispatch(&mut criterion, paired_runs);
    criterion.final_summary();
}
