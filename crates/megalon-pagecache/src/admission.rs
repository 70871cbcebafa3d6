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
//! A lock outlives no host: its word holds the holder's id and the life of that id (how
//! many times it was joined). A host that finds the word held by an id whose row in the
//! host table is free, or of another life, takes the lock over by a CAS from that word:
//! the holder left, or died and was recovered (the core frees a dead host's row only
//! after every replica has applied its death, so it does nothing more). A live holder's
//! lock is only waited for, within the wait limit. An unlock is a CAS from the holder's
//! own value, so that a host that was paused past its lease cannot free a lock taken
//! over meanwhile.
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
use crate::file::OpenFile;
use crate::page::{PageTrailer, FILE_PAGE_BYTES, PAGE_KEY_BYTES, PAGE_OBJECT_BYTES};
use crate::stats::Counter;
use megalon_core::{Backoff, HostId};

/// An admission lock this thread holds; released when dropped.
pub(crate) struct AdmissionLock<'a> {
    word: &'a AtomicU64,
    /// Our value in the word.
    value: u64,
}

impl Drop for AdmissionLock<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next holder's CAS; the `pread`, create or
        // delete done under the lock happen before it. A CAS from our value: a host whose
        // lease ran out while it held the lock may find it taken over, and must not free
        // the new holder's.
        let _ = self
            .word
            .compare_exchange(self.value, 0, Ordering::Release, Ordering::Relaxed);
    }
}

/// The host id in a lock word's value (`cache::lock_value`).
fn holder_of(value: u64) -> HostId {
    ((value & 0xff) as HostId).saturating_sub(1)
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

    /// One try at `word`: takes it if it is free, or if its holder is gone (the lock
    /// outlived its host: the host table has no row of its life any more, which the
    /// core frees once it has recovered a dead host, or once a host left). `Err`: the
    /// live holder's value.
    fn try_take<'a>(&self, word: &'a AtomicU64) -> std::result::Result<AdmissionLock<'a>, u64> {
        let mine = self.lock_value;
        let mut seen = 0;
        loop {
            // Acquire: pairs with the Release of the previous holder's unlock.
            match word.compare_exchange(seen, mine, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(AdmissionLock { word, value: mine }),
                Err(holder) if holder != 0 && !self.holder_gone(holder) => return Err(holder),
                // Free again, or a dead holder's: take it from what it holds now.
                Err(holder) => seen = holder,
            }
        }
    }

    /// Whether the host whose lock value is `holder` is gone: no row of the host table
    /// is its id in that life.
    fn holder_gone(&self, holder: u64) -> bool {
        let (host, life) = (holder_of(holder), holder >> 8);
        !self
            .shared
            .pod
            .hosts()
            .iter()
            .any(|row| row.host == host && row.joins == life)
    }

    /// Takes `key`'s admission lock if it is free (or its holder gone).
    pub(crate) fn try_lock_page(&self, key: &[u8; PAGE_KEY_BYTES]) -> Option<AdmissionLock<'_>> {
        let (_, word) = self.lock_word(key);
        self.try_take(word).ok()
    }

    /// Takes `key`'s admission lock, waiting at most the host's wait limit; past it,
    /// answers an error naming the holder.
    pub(crate) fn lock_page(&self, key: &[u8; PAGE_KEY_BYTES]) -> Result<AdmissionLock<'_>> {
        let (index, word) = self.lock_word(key);
        let mut wait: Option<Backoff> = None;
        loop {
            match self.try_take(word) {
                Ok(lock) => return Ok(lock),
                Err(holder) => {
                    Backoff::snooze_or(&mut wait, self.host.options().wait_limit, |waited_ms| {
                        Error::AdmissionLockBusy {
                            lock: index,
                            holder_host: holder_of(holder),
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
        let mut bytes = [0u8; PAGE_OBJECT_BYTES as usize];
        let valid = file.read_page(page, &mut bytes[..FILE_PAGE_BYTES as usize])?;
        let trailer = PageTrailer {
            valid_bytes: valid as u32,
        };
        bytes[PageTrailer::AT..PageTrailer::AT + 4].copy_from_slice(&trailer.bytes());
        match self.host.create(key, &bytes) {
            Ok(()) => {}
            Err(megalon_core::Error::ObjectExists) => {
                self.shared.counters.add(Counter::AdmissionsLost);
                return Ok(());
            }
            // The create may have reached the log (its append was not confirmed): if it
            // took effect, the page is ours to count and to name in its owner line (or
            // the clock hand would never find it).
            Err(error) => {
                if self.cached_after_failure(key)? != Some(true) {
                    return Err(error.into());
                }
            }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use megalon_core::{Backing, Join};

    use crate::config::{PageCacheConfig, PageCacheOptions};
    use crate::error::Error;
    use crate::PageCache;

    fn join(pod: &std::sync::Arc<megalon_core::Pod>) -> PageCache {
        let options = PageCacheOptions::new().wait_limit(Duration::from_millis(50));
        PageCache::join(pod, Join::AnyFree, options).unwrap()
    }

    /// A host that holds an admission lock and goes (its row freed: it left, or the core
    /// recovered it after it died) leaves the lock to the next admission; a live holder's
    /// lock is waited for, and never taken.
    #[test]
    fn a_lock_whose_holder_is_gone_is_taken_over_and_a_live_ones_is_not() {
        let pod =
            PageCache::create_pod(&PageCacheConfig::new(8).max_hosts(3), Backing::heap()).unwrap();
        let (a, b) = (join(&pod), join(&pod));
        let key = [7u8; crate::page::PAGE_KEY_BYTES];
        let held = a.inner.lock_page(&key).unwrap();
        assert!(matches!(
            b.inner.lock_page(&key),
            Err(Error::AdmissionLockBusy { holder_host, .. }) if holder_host == a.inner.host.id()
        ));
        assert!(b.inner.try_lock_page(&key).is_none());
        // a goes with the lock held (as a host killed in an admission would).
        std::mem::forget(held);
        drop(a);
        let taken = b
            .inner
            .lock_page(&key)
            .expect("taken over from a host that is gone");
        // A host that comes back under a's id is another life: the lock is still b's.
        let c = join(&pod);
        assert!(
            c.inner.try_lock_page(&key).is_none(),
            "b's lock is not c's to take"
        );
        drop(taken);
        assert!(c.inner.try_lock_page(&key).is_some(), "free again");
    }

    /// The unlock of a host whose lock was taken over (it was paused past its lease, and
    /// comes back) leaves the new holder's lock alone.
    #[test]
    fn a_taken_over_lock_is_not_freed_by_its_old_holder() {
        let pod =
            PageCache::create_pod(&PageCacheConfig::new(8).max_hosts(2), Backing::heap()).unwrap();
        let b = join(&pod);
        let key = [9u8; crate::page::PAGE_KEY_BYTES];
        let (_, word) = b.inner.lock_word(&key);
        let gone = crate::cache::lock_value(&pod, 1) + (5 << 8); // host 1 in a life it never had
        word.store(gone, std::sync::atomic::Ordering::SeqCst);
        let taken = b.inner.lock_page(&key).expect("its holder is gone");
        drop(super::AdmissionLock { word, value: gone });
        assert_eq!(
            word.load(std::sync::atomic::Ordering::SeqCst),
            b.inner.lock_value
        );
        drop(taken);
        assert_eq!(word.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
