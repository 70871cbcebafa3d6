//! Cache-line maintenance instructions, one module per architecture.
//!
//! Stable Rust has no intrinsics for `clflushopt`/`clwb`, so they are issued with `asm!`.
//! Support is detected once (CPUID on x86-64) and cached; every function here picks the
//! best instruction the CPU has, falling back to `clflush`, which every x86-64 CPU has.
//! On aarch64 the data-cache maintenance instructions are always present. Elsewhere the
//! portable fallback only fences: such a build is correct on coherent memory and under
//! the simulated non-coherent memory, not on real non-coherent hardware.

/// Bytes in one cache line: the unit every flush works on.
const LINE_BYTES: usize = crate::limits::LINE_BYTES as usize;

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
use x86_64 as imp;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
use aarch64 as imp;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod portable;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use portable as imp;

/// Copies `len` bytes from `src` to `dst` with one instruction (`rep movsb`), for copies
/// out of pod memory that other threads and hosts may change meanwhile.
///
/// The block is opaque to the compiler, and what it does is a byte-by-byte copy in which
/// each byte is loaded and stored once, single-copy atomically: the effect of a loop of
/// relaxed `AtomicU8` loads and stores, which races with nothing. So it may read bytes
/// that a writer changes meanwhile (the protocol's counters say afterwards whether the
/// copy holds), with none of the undefined behaviour of a plain `memcpy` racing a write.
/// Fast-string microcode moves whole lines where it can, as `memcpy` does.
///
/// # Safety
/// Both ranges must be valid for `len` bytes and must not overlap.
#[cfg(all(target_arch = "x86_64", not(megalon_loom)))]
#[inline]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: as the caller promised.
    unsafe { imp::copy_bytes(src, dst, len) }
}

/// Asks the CPU to start loading the lines of `[ptr, ptr + len)` into its cache, all at
/// once, without waiting for them: a hint, which changes no value and never faults
/// (x86 `prefetcht0`, aarch64 `prfm pldl1keep`; nothing elsewhere).
#[inline]
pub fn prefetch(ptr: *const u8, len: usize) {
    let (first, lines) = line_span(ptr as usize, len);
    for i in 0..lines {
        imp::prefetch_line((first + i * LINE_BYTES) as *const u8);
    }
}

/// One way to push a cache line toward memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushInstruction {
    /// Write back if dirty and invalidate; serialising (x86 `clflush`, aarch64 `dc civac`).
    Clflush,
    /// Write back if dirty and invalidate; weakly ordered, needs a store fence
    /// (x86 `clflushopt`, aarch64 `dc civac`).
    Clflushopt,
    /// Write back if dirty and keep the line valid; weakly ordered
    /// (x86 `clwb`, aarch64 `dc cvac`).
    Clwb,
}

impl FlushInstruction {
    /// Every instruction, in the order benchmarks report them.
    pub const ALL: [FlushInstruction; 3] = [Self::Clflush, Self::Clflushopt, Self::Clwb];

    /// The instruction's name as the manuals spell it on x86-64.
    pub fn name(self) -> &'static str {
        match self {
            Self::Clflush => "clflush",
            Self::Clflushopt => "clflushopt",
            Self::Clwb => "clwb",
        }
    }

    /// Whether this CPU executes the instruction natively (detected once).
    pub fn is_supported(self) -> bool {
        let features = imp::features();
        match self {
            Self::Clflush => true,
            Self::Clflushopt => features.clflushopt,
            Self::Clwb => features.clwb,
        }
    }
}

/// What the CPU supports, detected once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `clflushopt` (x86-64) or an equivalent weakly-ordered invalidate.
    pub clflushopt: bool,
    /// `clwb` (x86-64) or an equivalent clean-without-invalidate.
    pub clwb: bool,
    /// The instructions actually reach memory (false for the portable fallback).
    pub flushes_reach_memory: bool,
}

/// The detected features of this CPU.
pub fn features() -> Features {
    imp::features()
}

/// Index of the first line of `[addr, addr + len)` and the number of lines it spans.
#[inline]
fn line_span(addr: usize, len: usize) -> (usize, usize) {
    if len == 0 {
        return (addr & !(LINE_BYTES - 1), 0);
    }
    let first = addr & !(LINE_BYTES - 1);
    let last = (addr + len - 1) & !(LINE_BYTES - 1);
    (first, (last - first) / LINE_BYTES + 1)
}

/// Write back (if dirty) and invalidate every line overlapping `[ptr, ptr + len)`, with
/// the best invalidating instruction available. Not ordered: call [`full_fence`] before
/// loads that must come from memory, or [`store_fence`] before a store that publishes.
///
/// # Safety
/// `[ptr, ptr + len)` must lie inside one live mapping of this process.
#[inline]
pub unsafe fn flush_invalidate(ptr: *const u8, len: usize) {
    let (first, lines) = line_span(ptr as usize, len);
    let instruction = if imp::features().clflushopt {
        FlushInstruction::Clflushopt
    } else {
        FlushInstruction::Clflush
    };
    for i in 0..lines {
        // SAFETY: the line starts inside the caller's range, which is mapped.
        unsafe { imp::flush_line(instruction, (first + i * LINE_BYTES) as *const u8) };
    }
}

/// Write back (if dirty) every line overlapping `[ptr, ptr + len)`, keeping it valid where
/// `clwb` exists and invalidating it otherwise. Not ordered: see [`flush_invalidate`].
///
/// # Safety
/// `[ptr, ptr + len)` must lie inside one live mapping of this process.
#[inline]
pub unsafe fn write_back(ptr: *const u8, len: usize) {
    let features = imp::features();
    let instruction = if features.clwb {
        FlushInstruction::Clwb
    } else if features.clflushopt {
        FlushInstruction::Clflushopt
    } else {
        FlushInstruction::Clflush
    };
    // SAFETY: the caller's range is mapped.
    unsafe { flush_lines(instruction, ptr, len) }
}

/// Push every line of `[ptr, ptr + len)` with one named instruction, falling back to
/// `clflush` when the CPU lacks it. Benchmarks use this to compare the instructions.
///
/// # Safety
/// `[ptr, ptr + len)` must lie inside one live mapping of this process.
#[inline]
pub unsafe fn flush_with(instruction: FlushInstruction, ptr: *const u8, len: usize) {
    let instruction = if instruction.is_supported() {
        instruction
    } else {
        FlushInstruction::Clflush
    };
    // SAFETY: the caller's range is mapped.
    unsafe { flush_lines(instruction, ptr, len) }
}

/// Push every line overlapping `[ptr, ptr + len)` with `instruction` (supported).
///
/// # Safety
/// `[ptr, ptr + len)` must lie inside one live mapping of this process.
#[inline]
unsafe fn flush_lines(instruction: FlushInstruction, ptr: *const u8, len: usize) {
    let (first, lines) = line_span(ptr as usize, len);
    for i in 0..lines {
        // SAFETY: the line starts inside the caller's range, which is mapped.
        unsafe { imp::flush_line(instruction, (first + i * LINE_BYTES) as *const u8) };
    }
}

/// Copy `src` to `dst` with non-temporal stores where the CPU has them: the bytes go to
/// memory without staying in this host's cache, at any alignment (the words inside the
/// range with whole-word stores, the bytes of a word it covers in part with a byte-masked
/// store that leaves the word's other bytes alone). Lines of `dst` already in the cache
/// are written back and dropped by the hardware. Not ordered: call [`store_fence`] before
/// publishing.
///
/// # Safety
/// `[dst, dst + src.len())` must lie inside one live mapping, and no other thread of this
/// process may access it during the call.
#[inline]
pub unsafe fn store_non_temporal(dst: *mut u8, src: &[u8]) {
    let start = dst as usize;
    let head = ((8 - start % 8) % 8).min(src.len());
    let words = (src.len() - head) / 8;
    let (first, rest) = src.split_at(head);
    let (middle, last) = rest.split_at(words * 8);
    if !first.is_empty() {
        // SAFETY: inside the caller's range, within one aligned word.
        unsafe { imp::store_non_temporal_part(dst, first) };
    }
    for (i, chunk) in middle.chunks_exact(8).enumerate() {
        let word = u64::from_ne_bytes(chunk.try_into().expect("chunks of 8"));
        // SAFETY: in bounds (caller), 8-aligned (after `head`).
        unsafe { imp::store_non_temporal_u64(dst.add(head + i * 8) as *mut u64, word) };
    }
    if !last.is_empty() {
        // SAFETY: inside the caller's range, at the start of an aligned word.
        unsafe { imp::store_non_temporal_part(dst.add(head + words * 8), last) };
    }
}

/// Order every earlier store, flush and non-temporal store before every later store
/// (x86 `sfence`, aarch64 `dsb st`).
#[inline]
pub fn store_fence() {
    imp::store_fence();
}

/// Order every earlier load, store and flush before every later load and store
/// (x86 `mfence`, aarch64 `dsb sy`).
#[inline]
pub fn full_fence() {
    imp::full_fence();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_span_counts_every_touched_line() {
        assert_eq!(line_span(0, 0).1, 0);
        assert_eq!(line_span(0, 1), (0, 1));
        assert_eq!(line_span(0, 64), (0, 1));
        assert_eq!(line_span(0, 65), (0, 2));
        assert_eq!(line_span(63, 2), (0, 2));
        assert_eq!(line_span(128, 1024), (128, 16));
        assert_eq!(line_span(130, 1024), (128, 17));
    }

    #[test]
    fn every_instruction_runs_on_real_memory() {
        let mut buffer = vec![0u8; 4096];
        buffer
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        for instruction in FlushInstruction::ALL {
            // SAFETY: the buffer is live and owned by this test.
            unsafe { flush_with(instruction, buffer.as_ptr(), buffer.len()) };
        }
        // SAFETY: as above.
        unsafe {
            flush_invalidate(buffer.as_ptr(), 100);
            write_back(buffer.as_ptr(), 100);
        }
        prefetch(buffer.as_ptr(), buffer.len());
        // Any address: a hint never faults.
        prefetch(std::ptr::null(), 4096);
        store_fence();
        full_fence();
        // Flushing (and prefetching) never changes the bytes, only where they live.
        assert!(buffer.iter().enumerate().all(|(i, b)| *b == i as u8));
        let words: Vec<u8> = (0..64u8).collect();
        let mut target = vec![0u64; 8];
        // SAFETY: `target` is live, aligned and exclusively ours.
        unsafe { store_non_temporal(target.as_mut_ptr() as *mut u8, &words) };
        store_fence();
        let bytes: Vec<u8> = target.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes, words);
    }

    #[test]
    fn non_temporal_stores_write_exactly_their_bytes_at_every_alignment() {
        let source: Vec<u8> = (1..=130u8).collect();
        for at in 0..24 {
            for len in 0..100 {
                let mut target = vec![u64::from_ne_bytes([0xa5; 8]); 32];
                // SAFETY: `target` is live, exclusively ours, and 256 bytes long.
                unsafe {
                    let base = target.as_mut_ptr() as *mut u8;
                    store_non_temporal(base.add(at), &source[..len]);
                }
                store_fence();
                let bytes: Vec<u8> = target.iter().flat_map(|w| w.to_ne_bytes()).collect();
                assert_eq!(&bytes[at..at + len], &source[..len], "at {at}, {len} bytes");
                assert!(
                    bytes[..at]
                        .iter()
                        .chain(&bytes[at + len..])
                        .all(|&b| b == 0xa5),
                    "a byte around {at}..{} changed",
                    at + len
                );
            }
        }
    }
}
