//! x86-64: `clflush`, `clflushopt`, `clwb`, `movnti`, `maskmovdqu`, `sfence`, `mfence`.
//!
//! References: Intel 64 and IA-32 Architectures Software Developer's Manual, Vol. 2A
//! (CLFLUSH, CLFLUSHOPT, CLWB, CPUID leaf 07H: EBX bit 23 = CLFLUSHOPT, bit 24 = CLWB),
//! Vol. 2B (MASKMOVDQU, MOVNTI, MFENCE, SFENCE), and Vol. 3A section 8.2 on memory ordering:
//! `clflushopt` and `clwb` are ordered only by fences, locked instructions and older
//! writes to the same line, so every sequence of them ends with a fence before anything
//! that depends on the lines having reached memory.

use std::arch::asm;
use std::arch::x86_64::{
    __cpuid, __cpuid_count, _mm_loadu_si128, _mm_maskmoveu_si128, _mm_stream_si64, CpuidResult,
};
use std::sync::OnceLock;

use super::{Features, FlushInstruction};

static FEATURES: OnceLock<Features> = OnceLock::new();

fn detect() -> Features {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 reports the highest leaf.
    let CpuidResult { eax: max_leaf, .. } = unsafe { __cpuid(0) };
    if max_leaf < 7 {
        return Features {
            clflushopt: false,
            clwb: false,
            flushes_reach_memory: true,
        };
    }
    #[allow(unused_unsafe)]
    // SAFETY: leaf 7 exists (checked above).
    let leaf7 = unsafe { __cpuid_count(7, 0) };
    Features {
        clflushopt: leaf7.ebx & (1 << 23) != 0,
        clwb: leaf7.ebx & (1 << 24) != 0,
        flushes_reach_memory: true,
    }
}

#[inline]
pub(super) fn features() -> Features {
    *FEATURES.get_or_init(detect)
}

/// # Safety
/// `line` must point into a live mapping; `instruction` must be supported by this CPU
/// (callers check [`FlushInstruction::is_supported`] or the detected features).
#[inline]
pub(super) unsafe fn flush_line(instruction: FlushInstruction, line: *const u8) {
    // SAFETY (all three): the address is mapped (caller), the instruction exists
    // (caller), and none of them writes registers or memory visible to Rust: they move a
    // cache line between the cache and memory without changing its bytes.
    unsafe {
        match instruction {
            FlushInstruction::Clflush => {
                asm!("clflush [{}]", in(reg) line, options(nostack, preserves_flags))
            }
            FlushInstruction::Clflushopt => {
                asm!("clflushopt [{}]", in(reg) line, options(nostack, preserves_flags))
            }
            FlushInstruction::Clwb => {
                asm!("clwb [{}]", in(reg) line, options(nostack, preserves_flags))
            }
        }
    }
}

/// # Safety
/// `dst` must be 8-byte aligned inside a live mapping.
#[inline]
pub(super) unsafe fn store_non_temporal_u64(dst: *mut u64, value: u64) {
    // SAFETY: SSE2 (MOVNTI) is part of the x86-64 baseline; `dst` is valid (caller).
    unsafe { _mm_stream_si64(dst as *mut i64, value as i64) };
}

/// Stores `bytes` (fewer than 8, inside one aligned word) at `dst` with a byte-masked
/// non-temporal store (MASKMOVDQU) of the aligned 16 bytes around them: the masked-out
/// bytes are not written.
///
/// # Safety
/// `[dst, dst + bytes.len())` must lie inside a live mapping, within one aligned word.
#[inline]
pub(super) unsafe fn store_non_temporal_part(dst: *mut u8, bytes: &[u8]) {
    let window = dst as usize & !15;
    let at = dst as usize - window;
    debug_assert!(at + bytes.len() <= 16);
    let mut data = [0u8; 16];
    let mut mask = [0u8; 16];
    data[at..at + bytes.len()].copy_from_slice(bytes);
    mask[at..at + bytes.len()].fill(0x80);
    // SAFETY: SSE2 is part of the x86-64 baseline. The 16-aligned window lies in the
    // same cache line, hence the same page, as `dst`, which is mapped (caller); only the
    // bytes whose mask byte has its top bit set are written, and those are the caller's.
    unsafe {
        _mm_maskmoveu_si128(
            _mm_loadu_si128(data.as_ptr().cast()),
            _mm_loadu_si128(mask.as_ptr().cast()),
            window as *mut i8,
        )
    };
}

#[inline]
pub(super) fn store_fence() {
    // SAFETY: SFENCE only orders stores; it touches no memory or register.
    unsafe { asm!("sfence", options(nostack, preserves_flags)) };
}

#[inline]
pub(super) fn full_fence() {
    // SAFETY: MFENCE only orders loads and stores; it touches no memory or register.
    unsafe { asm!("mfence", options(nostack, preserves_flags)) };
}

/// Copies `len` bytes from `src` to `dst` with one `rep movsb`.
///
/// # Safety
/// Both ranges must be valid for `len` bytes and must not overlap.
#[cfg(not(megalon_loom))]
#[inline]
pub(super) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the ranges are valid (caller). The direction flag is clear on entry to an
    // asm block (the ABI), so the copy runs upward; REP MOVSB changes no flag.
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        )
    };
}

#[inline]
pub(super) fn prefetch_line(line: *const u8) {
    // SAFETY: PREFETCHT0 (SSE, part of the x86-64 baseline) is a hint: it reads no value
    // and does not fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line as *const i8)
    };
}
