//! Portable fallback for architectures without a cache-maintenance module: fences only.
//!
//! Correct on cache-coherent memory and under the simulated non-coherent memory; on real
//! non-coherent hardware this build would serve stale lines, which is why
//! [`Features::flushes_reach_memory`] is false here.

use super::{Features, FlushInstruction};
use crate::sync::{fence, Ordering};

#[inline]
pub(super) fn features() -> Features {
    Features {
        clflushopt: false,
        clwb: false,
        flushes_reach_memory: false,
    }
}

/// # Safety
/// No requirement: nothing is dereferenced.
#[inline]
pub(super) unsafe fn flush_line(_instruction: FlushInstruction, _line: *const u8) {}

/// # Safety
/// `dst` must be 8-byte aligned inside a live mapping.
#[inline]
pub(super) unsafe fn store_non_temporal_u64(dst: *mut u64, value: u64) {
    // SAFETY: valid and aligned (caller).
    unsafe { std::ptr::write_volatile(dst, value) };
}

/// # Safety
/// `[dst, dst + bytes.len())` must lie inside a live mapping.
#[inline]
pub(super) unsafe fn store_non_temporal_part(dst: *mut u8, bytes: &[u8]) {
    for (i, &byte) in bytes.iter().enumerate() {
        // SAFETY: inside the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), byte) };
    }
}

#[inline]
pub(super) fn store_fence() {
    fence(Ordering::Release);
}

#[inline]
pub(super) fn full_fence() {
    fence(Ordering::SeqCst);
}

#[inline]
pub(super) fn prefetch_line(_line: *const u8) {}
