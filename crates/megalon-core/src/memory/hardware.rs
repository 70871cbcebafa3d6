//! Real memory: atomic loads and stores on the mapping (a copy out is one `rep movsb` on
//! x86-64, an atomic byte copy in effect) and the real cache-maintenance instructions.
//!
//! In a loom model (`--cfg megalon_loom`) the same calls move model atomics, flushes do
//! nothing (the model's memory is coherent: loom checks orderings, the simulated memory
//! checks flushes) and the fence is a model fence.

use std::sync::Arc;

use super::{read_shared, write_shared};
use crate::pod::Pod;
use crate::sync::Ordering;

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
        read_shared(&self.pod, offset, buf)
    }

    /// See [`super::Memory::write`].
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) {
        write_shared(&self.pod, offset, data)
    }

    /// See [`super::Memory::prefetch`].
    #[inline]
    pub(crate) fn prefetch(&self, offset: u64, len: usize) {
        #[cfg(not(megalon_loom))]
        crate::arch::prefetch(self.pod.lnr_ptr(offset, len), len);
        #[cfg(megalon_loom)]
        self.pod.assert_in_lnr(offset, len);
    }

    /// See [`super::Memory::load_u64`].
    #[inline]
    pub fn load_u64(&self, offset: u64) -> u64 {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        self.pod.assert_in_lnr(offset, 8);
        self.pod.word(offset).load(Ordering::Relaxed)
    }

    /// See [`super::Memory::store_u64`].
    #[inline]
    pub fn store_u64(&self, offset: u64, value: u64) {
        assert_eq!(offset % 8, 0, "unaligned word at {offset:#x}");
        self.pod.assert_in_lnr(offset, 8);
        self.pod.word(offset).store(value, Ordering::Relaxed)
    }

    /// See [`super::Memory::flush`].
    #[inline]
    pub fn flush(&self, offset: u64, len: usize) {
        self.push_lines(offset, len, crate::arch::flush_invalidate);
    }

    /// See [`super::Memory::write_back`].
    #[inline]
    pub fn write_back(&self, offset: u64, len: usize) {
        self.push_lines(offset, len, crate::arch::write_back);
    }

    /// Runs `push` (one of `arch`'s line flushes) on `[offset, offset + len)` of LNR;
    /// under loom, which models no caches, only checks the range.
    #[inline]
    fn push_lines(&self, offset: u64, len: usize, push: unsafe fn(*const u8, usize)) {
        #[cfg(not(megalon_loom))]
        {
            let ptr = self.pod.lnr_ptr(offset, len);
            // SAFETY: the range is inside the live mapping (checked), as `push` asks.
            unsafe { push(ptr, len) }
        }
        #[cfg(megalon_loom)]
        {
            let _ = push;
            self.pod.assert_in_lnr(offset, len);
        }
    }

    /// See [`super::Memory::write_non_temporal`].
    #[inline]
    pub fn write_non_temporal(&self, offset: u64, data: &[u8]) {
        #[cfg(not(megalon_loom))]
        {
            let dst = self.pod.lnr_ptr(offset, data.len());
            // SAFETY: in the LNR (checked). Other threads may touch the same words only
            // through atomics; a non-temporal store is a plain store of its bytes.
            unsafe { crate::arch::store_non_temporal(dst, data) }
        }
        #[cfg(megalon_loom)]
        write_shared(&self.pod, offset, data);
    }

    /// See [`super::Memory::fence`].
    #[inline]
    pub fn fence(&self) {
        #[cfg(not(megalon_loom))]
        crate::arch::full_fence();
        #[cfg(megalon_loom)]
        crate::sync::fence(Ordering::SeqCst);
    }
}
