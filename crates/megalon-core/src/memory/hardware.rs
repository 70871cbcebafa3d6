//! Real memory: plain (atomic-word) loads and stores on the mapping and the real
//! cache-maintenance instructions.

use std::sync::Arc;

use super::{copy_in, copy_out};
use crate::arch;
use crate::pod::Pod;
use crate::sync::{AtomicU64, Ordering};

/// A host's access to LNR on real hardware.
#[derive(Debug)]
pub struct HardwareMemory {
    pod: Arc<Pod>,
}

impl HardwareMemory {
    /// Access to `pod`'s LNR.
    pub fn new(pod: Arc<Pod>) -> Self {
        Self { pod }
    }

    /// See [`super::Memory::read`].
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        let src = self.pod.lnr_ptr(offset, buf.len());
        // SAFETY: `lnr_ptr` checked the range is inside the LNR of the live mapping.
        unsafe { copy_out(src, buf) }
    }

    /// See [`super::Memory::write`].
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) {
        let dst = self.pod.lnr_ptr(offset, data.len());
        // SAFETY: as in `read`.
        unsafe { copy_in(dst, data) }
    }

    /// See [`super::Memory::load_u64`].
    #[inline]
    pub fn load_u64(&self, offset: u64) -> u64 {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        let ptr = self.pod.lnr_ptr(offset, 8);
        // SAFETY: in the LNR (checked) and 8-aligned (checked; the mapping is aligned).
        unsafe { &*(ptr as *const AtomicU64) }.load(Ordering::Relaxed)
    }

    /// See [`super::Memory::store_u64`].
    #[inline]
    pub fn store_u64(&self, offset: u64, value: u64) {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        let ptr = self.pod.lnr_ptr(offset, 8);
        // SAFETY: as in `load_u64`.
        unsafe { &*(ptr as *const AtomicU64) }.store(value, Ordering::Relaxed)
    }

    /// See [`super::Memory::flush`].
    #[inline]
    pub fn flush(&self, offset: u64, len: usize) {
        let ptr = self.pod.lnr_ptr(offset, len);
        // SAFETY: the range is inside the live mapping (checked).
        unsafe { arch::flush_invalidate(ptr, len) }
    }

    /// See [`super::Memory::write_back`].
    #[inline]
    pub fn write_back(&self, offset: u64, len: usize) {
        let ptr = self.pod.lnr_ptr(offset, len);
        // SAFETY: as in `flush`.
        unsafe { arch::write_back(ptr, len) }
    }

    /// See [`super::Memory::write_non_temporal`].
    #[inline]
    pub fn write_non_temporal(&self, offset: u64, data: &[u8]) {
        assert!(
            offset.is_multiple_of(8) && data.len().is_multiple_of(8),
            "non-temporal stores move whole words"
        );
        let dst = self.pod.lnr_ptr(offset, data.len());
        // SAFETY: in the LNR (checked), 8-aligned (checked). Other threads may touch the
        // same words only through atomics; a non-temporal store is a plain word store.
        unsafe { arch::store_non_temporal(dst, data) }
    }

    /// See [`super::Memory::fence`].
    #[inline]
    pub fn fence(&self) {
        arch::full_fence();
    }
}
