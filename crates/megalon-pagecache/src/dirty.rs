//! Dirty pages: the dirty bitmap in SCR, the release hook that makes a page clean before
//! it loses its coherence record, and the write-back that the background writer and
//! `fsync` run.
//!
//! A dirty bit belongs to a coherence *record*, not to a page: a page that is written has
//! a record for as long as the write lasts, and every change of bit `r` happens with
//! record `r` locked. A writer sets it between `write_start` and `write_end`; a write-back
//! (background, `fsync`, or the release hook) clears it after the page's bytes reached
//! the file, still under the lock. So:
//!
//! - bit `r` set means record `r` belongs to a page whose cached bytes are newer than its
//!   file, and it stays set until one of those write-backs has put them in the file;
//! - the release hook runs with the record locked before the record goes, writes the page
//!   back if its bit is set, and clears it: a read-shared page is always clean, and a
//!   deleted (evicted) page reached its file first;
//! - `fsync` sees every page dirtied by a write that completed before it was called: its
//!   bit is set (it writes the page back) or was cleared by a write-back that locked the
//!   record after that write, so it read the write's bytes, and its `pwrite` returned
//!   before the clear that the scan loaded (Acquire/Release on the bitmap word); the
//!   kernel holds them, and `sync_data` makes them durable.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use megalon_core::{Pod, ReleaseReason, Releasing};
use parking_lot::{Mutex, RwLock};

use crate::error::Error;
use crate::file::OpenFile;
use crate::layout::Regions;
use crate::page::{decode_key, PageTrailer, PAGE_OBJECT_BYTES};
use crate::stats::{Counter, Counters, WriteBack};

thread_local! {
    /// Refusals of a delete's release hook, for the deleting thread's caller: the host
    /// (its `Shared`'s address), the number `remember` gave the error, the error.
    static REFUSED: RefCell<Vec<(usize, u64, Error)>> = const { RefCell::new(Vec::new()) };
}

/// What a host's page cache shares with its release hook (which the core calls on any of
/// the host's threads, the pump's included): never the host itself, which owns the hook.
pub(crate) struct Shared {
    pub(crate) pod: Arc<Pod>,
    pub(crate) regions: Regions,
    /// Files open on this host, by inode.
    pub(crate) files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    pub(crate) counters: Counters,
    /// The last error background work hit (the writer, refused releases), with the
    /// number `remember` gave it.
    pub(crate) last_error: Mutex<Option<(u64, Error)>>,
    /// Numbers the errors `remember` stores.
    pub(crate) errors_remembered: AtomicU64,
    /// This host's id, once joined (for errors the hook reports).
    pub(crate) host_id: AtomicU32,
}

impl Shared {
    pub(crate) fn file(&self, inode: u64) -> Option<Arc<OpenFile>> {
        self.files.read().get(&inode).cloned()
    }

    /// Stores `error` for `take_error`; returns its number (for `forget`).
    pub(crate) fn remember(&self, error: Error) -> u64 {
        let mut last = self.last_error.lock();
        let number = self.errors_remembered.fetch_add(1, Ordering::Relaxed) + 1;
        *last = Some((number, error));
        number
    }

    /// Takes the error `remember` numbered `number` back, if it is still the last one
    /// (its caller was told of it; one stored since is someone else's, and stays).
    pub(crate) fn forget(&self, number: u64) {
        let mut last = self.last_error.lock();
        if last.as_ref().is_some_and(|(stored, _)| *stored == number) {
            *last = None;
        }
    }

    /// A refusal of this host's hook: stored for `take_error`, and, for a delete, handed
    /// to the deleting thread (the hook runs on it), whose caller answers it
    /// (`Inner::delete`): `last_error` may hold another thread's error by the time the
    /// delete returns, or an older one if the hook refused storing nothing.
    fn refuse(&self, object: &Releasing<'_>, error: Error) -> bool {
        self.counters.add(Counter::ReleasesRefused);
        let delete = object.reason() == ReleaseReason::Delete;
        let number = self.remember(error.clone());
        if delete {
            let me = self as *const Shared as usize;
            REFUSED.with(|refused| {
                // One a host: a delete called on the core host directly takes none.
                let mut refused = refused.borrow_mut();
                refused.retain(|(host, ..)| *host != me);
                refused.push((me, number, error));
            });
        }
        false
    }

    /// Forgets what this host's hook handed this thread (before a delete).
    pub(crate) fn clear_refusal(&self) {
        let me = self as *const Shared as usize;
        REFUSED.with(|refused| refused.borrow_mut().retain(|(host, ..)| *host != me));
    }

    /// The refusal this host's hook handed this thread in the delete that just answered
    /// `ReleaseRefused`, if it stored one (a hook that finds its host declared dead
    /// refuses without one); taken out of `take_error`'s keeping, unless another error
    /// came since.
    pub(crate) fn take_refusal(&self) -> Option<Error> {
        let me = self as *const Shared as usize;
        let (_, number, error) = REFUSED.with(|refused| {
            let mut refused = refused.borrow_mut();
            let at = refused.iter().rposition(|(host, ..)| *host == me)?;
            Some(refused.remove(at))
        })?;
        self.forget(number);
        Some(error)
    }

    fn dirty_word(&self, record: u32) -> (&AtomicU64, u64) {
        let record = u64::from(record);
        debug_assert!(record < self.regions.record_count);
        (
            self.pod.scr_u64(self.regions.dirty_word(record / 64)),
            1 << (record % 64),
        )
    }

    /// Whether record `record`'s page is dirty. Call with the record locked for an answer
    /// that stays true.
    pub(crate) fn is_dirty(&self, record: u32) -> bool {
        let (word, bit) = self.dirty_word(record);
        // Acquire: pairs with the Release of `clear_dirty`: a clear bit means the page's
        // bytes were handed to the kernel before.
        word.load(Ordering::Acquire) & bit != 0
    }

    /// Marks record `record`'s page dirty; the caller holds the record's lock (its
    /// `write_end` publishes the bit to the next holder).
    pub(crate) fn set_dirty(&self, record: u32) {
        let (word, bit) = self.dirty_word(record);
        // AcqRel: a read-modify-write of a word other records share; Release also orders
        // the bit before the unlock that follows, for scanners that do not lock.
        word.fetch_or(bit, Ordering::AcqRel);
    }

    /// Marks record `record`'s page clean, after its bytes reached the file; the caller
    /// holds the record's lock.
    pub(crate) fn clear_dirty(&self, record: u32) {
        let (word, bit) = self.dirty_word(record);
        // Release: the pwrite before it happens before a scanner's Acquire load that sees
        // the bit clear (`is_dirty`, `dirty_records`).
        word.fetch_and(!bit, Ordering::AcqRel);
    }

    /// The records whose dirty bits are set now, in order.
    pub(crate) fn dirty_records(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.regions.bitmap_words).flat_map(move |index| {
            // Acquire: pairs with the Release of `clear_dirty` (see `is_dirty`).
            let mut bits = self
                .pod
                .scr_u64(self.regions.dirty_word(index))
                .load(Ordering::Acquire);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let bit = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                Some((index * 64 + bit) as u32)
            })
        })
    }

    /// The release hook: called by the core with `object`'s record locked, right before
    /// the object loses it (turns read-shared, or is deleted). A dirty page is written to
    /// its file and marked clean; if its file is not open here or the write fails, the
    /// release is refused (the page keeps its record and stays cached) and the error is
    /// remembered.
    pub(crate) fn release(&self, object: &Releasing<'_>) -> bool {
        let record = object.record();
        if !self.is_dirty(record) {
            return true;
        }
        let Some((inode, page)) = decode_key(object.key()) else {
            // Not a page: nobody sets a dirty bit for it.
            return true;
        };
        let Some(file) = self.file(inode) else {
            let host = self.host_id.load(Ordering::Relaxed);
            return self.refuse(object, Error::FileNotOpen { inode, page, host });
        };
        let mut bytes = [0u8; PAGE_OBJECT_BYTES as usize];
        // From memory: the last writer's bytes reached it before it unlocked.
        object.read(&mut bytes);
        // Declared dead since the core locked the record (paused past its lease): the
        // lock is its recovery's, and another host may have written the page and set its
        // bit since; neither these bytes nor the clear are this host's to put anywhere
        // (the core's release fails anyway). Looked at again after the pwrite. The look
        // and the pwrite are inside the page's fence (as a write-back's), taken without
        // waiting: this hook may run on the pump, which must keep beating.
        let _fence = match file.try_fence_page(page) {
            Ok(Some(fence)) => fence,
            Ok(None) => {
                let path = file.path.clone();
                return self.refuse(object, Error::WriteBackInFlight { path, page });
            }
            Err(error) => return self.refuse(object, error),
        };
        if !object.still_held() {
            return false;
        }
        match file.write_page(page, &bytes, PageTrailer::of(&bytes).valid_bytes) {
            Ok(()) if !object.still_held() => false,
            Ok(()) => {
                self.clear_dirty(record);
                self.counters.wrote_back(WriteBack::Release);
                true
            }
            Err(error) => self.refuse(object, error),
        }
    }
}
