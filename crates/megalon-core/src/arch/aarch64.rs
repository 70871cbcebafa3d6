//! aarch64: `dc civac` (clean and invalidate to the point of coherency), `dc cvac` (clean
//! to the point of coherency), `dsb`.
//!
//! Reference: Arm Architecture Reference Manual for A-profile, section D7.5.9 (data cache
//! maintenance instructions) and B2.3.12 (DSB). The point of coherency is where every
//! agent sees the same copy: memory, for a CXL device. There is no non-temporal store
//! that bypasses the cache on write-back memory, so a "non-temporal" store is a store
//! followed by clean-and-invalidate of its line.

use std::arch::asm;

use super::{Features, FlushInstruction};

#[inline]
pub(super) fn features() -> Features {
    Features {
        clflushopt: true,
        clwb: true,
        flushes_reach_memory: true,
    }
}

/// # Safety
/// `line` must point into a live mapping.
#[inline]
pub(super) unsafe fn flush_line(instruction: FlushInstruction, line: *const u8) {
    // SAFETY: data cache maintenance by virtual address on a mapped address moves the
    // line between cache and memory without changing its bytes.
    unsafe {
        match instruction {
            FlushInstruction::Clflush => {
                asm!("dc civac, {}", "dsb sy", in(reg) line, options(nostack, preserves_flags))
            }
            FlushInstruction::Clflushopt => {
                asm!("dc civac, {}", in(reg) line, options(nostack, preserves_flags))
            }
            FlushInstruction::Clwb => {
                asm!("dc cvac, {}", in(reg) line, options(nostack, preserves_flags))
            }
        }
    }
}

/// # Safety
/// `dst` must be 8-byte aligned inside a live mapping.
#[inline]
pub(super) unsafe fn store_non_temporal_u64(dst: *mut u64, value: u64) {
    // SAFETY: `dst` is valid and aligned (caller); the clean-and-invalidate that follows
    // only moves the line to memory.
    unsafe {
        std::ptr::write_volatile(dst, value);
        asm!("dc civac, {}", in(reg) dst, options(nostack, preserves_flags));
    }
}

/// Stores `bytes` (fewer than 8, inside one aligned word) at `dst`, then cleans and
/// invalidates the line, as [`store_non_temporal_u64`] does.
///
/// # Safety
/// `[dst, dst + bytes.len())` must lie inside a live mapping, within one aligned word.
#[inline]
pub(super) unsafe fn store_non_temporal_part(dst: *mut u8, bytes: &[u8]) {
    for (i, &byte) in bytes.iter().enumerate() {
        // SAFETY: inside the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), byte) };
    }
    // SAFETY: `dst` is mapped (caller); the clean-and-invalidate only moves the line.
    unsafe { asm!("dc civac, {}", in(reg) dst, options(nostack, preserves_flags)) };
}

#[inline]
pub(super) fn store_fence() {
    // SAFETY: a barrier touches no memory or register.
    unsafe { asm!("dsb st", options(nostack, preserves_flags)) };
}

#[inline]
pub(super) fn full_fence() {
    // SAFETY: a barrier touches no memory or register.
    unsafe { asm!("dsb sy", options(nostack, preserves_flags)) };
}

#[inline]
pub(super) fn prefetch_line(line: *const u8) {
    // SAFETY: PRFM is a hint: it reads no value and does not fault, whatever the address.
    unsafe {
        asm!("prfm pldl1keep, [{}]", in(reg) line, options(nostack, preserves_flags, readonly))
    };
}
