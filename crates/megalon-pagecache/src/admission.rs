//! Admission: a page that is not cached is read from its file and created in the pod
//! (the paper's section 5: admission = create), under a lock word that keeps a stale
//! admission out, and within the cache's capacity.
//!
//! The race the admission locks close. Host A misses on page P and reads P from the file
//! (`pread`). Meanwhile host B, which had P cached and dirty, evicts it: its release hook
//! writes the new bytes to the file, then its delete removes P from the pod. Then A's
//! `create` succeeds (P is absent) with the *old* bytes A read before B's write-back: the
//! write is lost from the cache, and A's copy goes back to the file the next time P is
//! written. So admission (lookup, `pread`, `create`) and eviction (`delete`, which runs the
//! hook's write-back) of a page each hold the page's admission lock: a word in the SCR that
//! pages hash onto. An admission that takes the lock after an eviction finished reads the
//! written-back bytes; one that takes it before finds the page still cached (its lookup
//! under the lock) and uses it; an eviction cannot start while an admission holds it.
//! A background write-back needs no admission lock: it holds the page's record lock, and
//! the page stays cached, so no admission of it can start.
//!
//! Two admissions of one page: the second takes the lock after the first released it,
//! finds the page, and counts an admission lost. (A create that answers `ObjectExists`,
//! which the lock makes impossible among page caches, counts the same.)
//!
//! Capacity: a coherent counter of cached pages (admitted, or reserved by an admission in
//! progress) is kept at most the capacity; an admission reserves a unit *before* it takes
//! its admission lock, evicting with the clock hand while the cache is full, so that no
//! thread holds one admission lock while it waits for another (the hand only try-locks).

use std::sync::atomic::{AtomicU64, Ordering};

use megalon_core::inspect::fnv1a64;

use crate::cache::Inner;
use crate::clock::Swept;
use crate::error::{Error, Result};
use crate::file::{OpenFile, FILE_PAGE_BYTES, PAGE_KEY_BYTES};
use crate::stats::Counter;
use megalon_core::Backoff;

/// An admission lock this thread holds; released when dropped.
pub(crate) struct AdmissionLock<'a> {
    word: &'a AtomicU64,
}

impl Drop for AdmissionLock<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next holder's CAS; the `pread`, create or
        // delete done under the lock happen before it.
        self.word.store(0, Ordering::Release);
    }
}

/// A unit of the cached-pages counter taken by an admission; given back when dropped
/// unless the admission created the page.
struct Reservation<'a> {
    counter: &'a AtomicU64,
    kept: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            // Relaxed: a count; nothing is published with it.
            self.counter.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Inner {
    /// The cached-pages counter.
    pub(crate) fn cached_pages(&self) -> &AtomicU64 {
        self.shared.pod.scr_u64(self.shared.regions.cached_pages)
    }

    fn lock_word(&self, key: &[u8; PAGE_KEY_BYTES]) -> (u64, &AtomicU64) {
        let regions = &self.shared.regions;
        let index = fnv1a64(key) % regions.admission_locks;
        (index, self.shared.pod.scr_u64(regions.lock(index)))
    }

    /// This host's value in a lock word it holds: its id + 1 (0 is free).
    fn holder_value(&self) -> u64 {
        u64::from(self.host.id()) + 1
    }

    /// Takes `key`'s admission lock if it is free.
    pub(crate) fn try_lock_page(&self, key: &[u8; PAGE_KEY_BYTES]) -> Option<AdmissionLock<'_>> {
        let (_, word) = self.lock_word(key);
        // Acquire: pairs with the Release store of the previous holder's unlock.
        word.compare_exchange(0, self.holder_value(), Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| AdmissionLock { word })
    }

    /// Takes `key`'s admission lock, waiting at most the host's wait limit; past it,
    /// answers an error naming the holder.
    pub(crate) fn lock_page(&self, key: &[u8; PAGE_KEY_BYTES]) -> Result<AdmissionLock<'_>> {
        let (index, word) = self.lock_word(key);
        let mut wait: Option<Backoff> = None;
        loop {
            // Acquire: as in `try_lock_page`.
            match word.compare_exchange(
                0,
                self.holder_value(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(AdmissionLock { word }),
                Err(holder) => {
                    Backoff::snooze_or(&mut wait, self.host.options().wait_limit, |waited_ms| {
                        Error::AdmissionLockBusy {
                            lock: index,
                            holder_host: holder.saturating_sub(1) as u32,
                            waited_ms,
                        }
                    })?;
                }
            }
        }
    }

    /// Reserves room for one page: a unit of the cached-pages counter, evicting with the
    /// clock hand while the cache is full (bounded by the wait limit).
    fn reserve(&self) -> Result<Reservation<'_>> {
        let counter = self.cached_pages();
        let mut wait: Option<Backoff> = None;
        loop {
            // Relaxed: a count; the pages themselves are published by the log.
            let current = counter.load(Ordering::Relaxed);
            if current < self.capacity_pages {
                if counter
                    .compare_exchange_weak(
                        current,
                        current + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return Ok(Reservation {
                        counter,
                        kept: false,
                    });
                }
                continue;
            }
            match self.sweep()? {
                Swept::Evicted => {}
                Swept::Nothing { refusal } => {
                    Backoff::snooze_or(&mut wait, self.host.options().wait_limit, |waited_ms| {
                        refusal.unwrap_or(Error::NoVictim {
                            cached_pages: counter.load(Ordering::Relaxed),
                            capacity_pages: self.capacity_pages,
                            waited_ms,
                        })
                    })?;
                }
            }
        }
    }

    /// Admits page `page` of `file` (key `key`): reads it from the file and creates it,
    /// unless another thread or host admitted it first.
    pub(crate) fn admit(
        &self,
        file: &OpenFile,
        page: u64,
        key: &[u8; PAGE_KEY_BYTES],
    ) -> Result<()> {
        let mut reservation = self.reserve()?;
        let _lock = self.lock_page(key)?;
        // Under the lock: no eviction of the page runs, and a finished one wrote it back
        // (see the module docs). Cached already: someone admitted it since our miss.
        if self.host.lookup(key)?.is_some() {
            self.shared.counters.add(Counter::AdmissionsLost);
            return Ok(());
        }
        let mut bytes = [0u8; FILE_PAGE_BYTES as usize];
        file.read_page(page, &mut bytes)?;
        match self.host.create(key, &bytes) {
            Ok(()) => {}
            Err(megalon_core::Error::ObjectExists) => {
                self.shared.counters.add(Counter::AdmissionsLost);
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        }
        reservation.kept = true;
        self.shared.counters.add(Counter::Admissions);
        // Still under the lock, so the page cannot be evicted and its slot reused before
        // the owner line is written back: the line names the page that lives there, and
        // nobody else writes it until the slot is freed and admitted into again.
        if let Some(entry) = self.host.lookup(key)? {
            self.set_owner(entry.slot, key);
        }
        Ok(())
    }
}
