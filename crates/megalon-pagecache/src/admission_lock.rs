//! Admission locks: a word in the SCR per group of pages (pages hash onto the words),
//! held by an admission or an eviction of a page for the time it reads or writes the
//! page's file and creates or deletes its object.
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

use std::sync::atomic::{AtomicU64, Ordering};

use megalon_core::inspect::fnv1a64;
use megalon_core::{Backoff, HostId};

use crate::cache::Inner;
use crate::error::{Error, Result};
use crate::page::PAGE_KEY_BYTES;

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

impl Inner {
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

    /// Whether `lock` is still this host's: the word still holds our value, and the host
    /// table still has our row in our life. Once the row is freed (this host was declared
    /// dead, paused past its lease, and recovered) the next admission or eviction takes
    /// the lock over, and may evict the page and give its slot to another; until then
    /// nobody can. Look right before acting on the lock's behalf outside the log after a
    /// pause (a catch-up): the log's own operations look at the row themselves.
    pub(crate) fn still_holds(&self, lock: &AdmissionLock<'_>) -> bool {
        lock.word.load(Ordering::SeqCst) == lock.value && !self.holder_gone(lock.value)
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
