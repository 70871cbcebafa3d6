//! Admission: a page that is not cached is read from its file and created in the pod
//! (the paper's section 5: admission = create), under a lock word that keeps a stale
//! admission out (`admission_lock.rs`), and within the cache's capacity.
//!
//! Two admissions of one page: the second takes the lock after the first released it,
//! finds the page, and counts an admission lost. (A create that answers `ObjectExists`,
//! which the lock makes impossible among page caches, counts the same.)
//!
//! Capacity: the pages cached (the pod's objects, which every replica counts once it has
//! caught up with the log) and the admissions in progress are kept at most the capacity.
//! An admission counts itself in an entry of its host's (tagged with the host's life)
//! *before* it takes its admission lock, then counts every host's entries and the pages;
//! over the capacity, it takes itself out and evicts with the clock hand, so that no
//! thread holds one admission lock while it waits for another (the hand only try-locks).
//! Of two admissions that count themselves at once, at least one sees the other
//! (sequentially consistent words), so the two never both take the last room.
//!
//! An admission's page must count once, in its entry or among the objects, never in
//! neither. It leaves its entry only once its create returned, by which time the log's
//! `ctail` covers the page: a host that reads the entry after that catches up past it.
//! And the core notes its create's log position in the entry before the entry is
//! published: a host whose replica has applied the log past that position counts the
//! page among the objects, and the entry no more. So a host that dies right after its
//! create was published leaves its page counted once. (Its entry counted it a second
//! time until its row was freed, its lease and its recovery later: meanwhile another
//! host's admission found no room in a cache that had some, and waited, failed, or
//! evicted a page for nothing.) A host that dies in the middle leaves nothing standing:
//! its entries count only while its row is its life's (the core frees it once every
//! replica has applied its death), and what it created or deleted is in the log. (A
//! single coherent counter of pages drifted for good when a host died between its
//! create or delete and its update of the count.)

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::Inner;
use crate::clock::Swept;
use crate::error::{Error, Result};
use crate::file::OpenFile;
use crate::page::{PageTrailer, FILE_PAGE_BYTES, PAGE_KEY_BYTES, PAGE_OBJECT_BYTES};
use crate::stats::Counter;
use megalon_core::{Backoff, HostId};

/// An entry of admissions in progress (`Regions::admitting`): its state word holds the
/// life of its host's id in the high half and its state in the low half; its position
/// word, the log position past its create's entry once the core noted it (0 before).
const LIFE_SHIFT: u32 = 32;
const LIFE_MASK: u64 = (1 << LIFE_SHIFT) - 1;
/// Free (with the whole word 0: a free entry's position word is 0 too).
const FREE: u64 = 0;
/// An admission in progress: it counts until the reader's replica has applied the log
/// past its position word (if noted).
const TAKEN: u64 = 1;
/// Being taken from an earlier life of the id, whose position word it clears: counts,
/// whatever its position word holds.
const CLEARING: u64 = 2;

/// An admission in progress, counted in an entry of its host's until dropped (once its
/// create returned, the page counts as one of the pod's objects).
struct Reservation<'a> {
    inner: &'a Inner,
    index: u64,
    /// Our value in the entry's state word.
    value: u64,
}

impl Reservation<'_> {
    /// The pod offset of the entry's position word, for the core to note the create's
    /// position in.
    fn note_at(&self) -> u64 {
        self.inner.entry_offsets(self.index).1
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.inner.release_entry(self.index, self.value);
    }
}

impl Inner {
    /// This host's life, as its entries of admissions in progress are tagged with it.
    fn life(&self) -> u64 {
        (self.lock_value >> 8) & LIFE_MASK
    }

    fn entry_offsets(&self, index: u64) -> (u64, u64) {
        self.shared.regions.admitting(self.host.id(), index)
    }

    fn entry_words(&self, host: HostId, index: u64) -> (&AtomicU64, &AtomicU64) {
        let (state, position) = self.shared.regions.admitting(host, index);
        let pod = &self.shared.pod;
        (pod.scr_u64(state), pod.scr_u64(position))
    }

    /// Counts an admission of this host's in a free entry of its, or in one an earlier
    /// life of the id left (a later life's are the id's next holder's: this host was
    /// declared dead, paused past its lease, and what it takes counts for nobody, as its
    /// life is not its row's). Every entry taken: frees those of admissions whose
    /// create's outcome is known by now, else waits for one, within the wait limit.
    fn count_admission(&self) -> Result<Reservation<'_>> {
        let life = self.life();
        let taken = life << LIFE_SHIFT | TAKEN;
        let high = self
            .shared
            .pod
            .scr_u64(self.shared.regions.admitting_high(self.host.id()));
        let mut wait: Option<Backoff> = None;
        loop {
            for index in 0..self.shared.regions.admissions_per_host {
                // Readers look at the entries below `high` only: raised before the entry
                // is taken (both SeqCst, before this host's loads in `pages_in_use`), so a
                // reader that does not see it raised is one this admission sees.
                if index >= high.load(Ordering::SeqCst) {
                    high.fetch_max(index + 1, Ordering::SeqCst);
                }
                let (state, position) = self.entry_words(self.host.id(), index);
                // SeqCst: before the loads of every host's entries (`pages_in_use`).
                let seen = state.load(Ordering::SeqCst);
                if seen == FREE {
                    // A free entry's position word is 0 (`release_entry`).
                    if state
                        .compare_exchange(FREE, taken, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        return Ok(Reservation {
                            inner: self,
                            index,
                            value: taken,
                        });
                    }
                } else if seen >> LIFE_SHIFT < life {
                    // Left by an earlier life (which died in an admission): its position
                    // word may hold a position long applied, which would have a reader
                    // count this admission nowhere. Cleared while the entry counts whatever
                    // it holds.
                    let clearing = life << LIFE_SHIFT | CLEARING;
                    if state
                        .compare_exchange(seen, clearing, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        position.store(0, Ordering::SeqCst);
                        state.store(taken, Ordering::SeqCst);
                        return Ok(Reservation {
                            inner: self,
                            index,
                            value: taken,
                        });
                    }
                }
            }
            // Every entry taken: some may be kept by admissions whose create's outcome
            // was unknown, which only a count of the pages in use frees (and an admission
            // counts only once it has an entry: left to it, they were kept for good).
            if self.settle_unknown_admissions()? {
                continue;
            }
            Backoff::snooze_or(&mut wait, self.host.options().wait_limit, |waited_ms| {
                Error::AdmissionsBusy {
                    in_progress: self.shared.regions.admissions_per_host,
                    waited_ms,
                }
            })?;
        }
    }

    /// Frees entry `index` if it still holds `value` (a host declared dead, resumed, must
    /// not free the entry of the id's next life): its position word first, so that a
    /// free entry's is 0 (the next admission in it counts until its own create is noted).
    fn release_entry(&self, index: u64, value: u64) {
        let (state, position) = self.entry_words(self.host.id(), index);
        if state.load(Ordering::SeqCst) != value {
            return;
        }
        // A pause here past our lease, the entry taken over meanwhile: the next holder's
        // admission counts until its create returns (0 reads as not noted yet), never less.
        position.store(0, Ordering::SeqCst);
        #[cfg(test)]
        tests::between_release_stores();
        let _ = state.compare_exchange(value, FREE, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Pages the cache holds or is admitting now: the admissions in progress of every
    /// host whose row is still its entries' life, then the pod's objects once this host
    /// has caught up with the log. An admission counts until its create returned (by then
    /// the log covers its page), or until this replica applied the position it noted
    /// before its create was published: then the page counts among the objects, even if
    /// its admitter died right after the publish.
    pub(crate) fn pages_in_use(&self) -> Result<u64> {
        self.settle_unknown_admissions()?;
        // Admissions whose create is not noted, and the positions of those that are.
        let (mut unnoted, mut noted) = (0, Vec::new());
        for row in self.shared.pod.hosts() {
            // SeqCst: after this host's own count (`count_admission`).
            let high = self
                .shared
                .pod
                .scr_u64(self.shared.regions.admitting_high(row.host))
                .load(Ordering::SeqCst)
                .min(self.shared.regions.admissions_per_host);
            for index in 0..high {
                let (state, position) = self.entry_words(row.host, index);
                let seen = state.load(Ordering::SeqCst);
                if seen >> LIFE_SHIFT != row.joins & LIFE_MASK {
                    continue;
                }
                match seen & LIFE_MASK {
                    TAKEN => match position.load(Ordering::SeqCst) {
                        0 => unnoted += 1,
                        at => noted.push(at),
                    },
                    CLEARING => unnoted += 1,
                    _ => {}
                }
            }
        }
        // Caught up: covers every create whose admission left its entry before the loads.
        self.host.object_count()?;
        // Then the position applied, and the objects of a replica at least there: a
        // create noted below it counts among them.
        let applied = self.host.inspect().applied_position();
        let objects = self.host.inspect().replica_len();
        let admitting = unnoted + noted.iter().filter(|&&at| at > applied).count() as u64;
        Ok(objects + admitting)
    }

    /// Frees the entries of the admissions whose create's outcome was unknown (`admit`),
    /// once this host has applied the log past the tail each names: by then `ctail` is
    /// past the create too, so a host that reads the entry after this catches up past it.
    /// Returns whether it freed any.
    fn settle_unknown_admissions(&self) -> Result<bool> {
        let mut unknown = self.unknown_admissions.lock();
        if unknown.is_empty() {
            return Ok(false);
        }
        let before = unknown.len();
        self.host.object_count()?; // caught up with `ctail`
        let applied = self.host.inspect().applied_position();
        unknown.retain(|&(index, value, tail)| {
            let settled = applied >= tail;
            if settled {
                self.release_entry(index, value);
            }
            !settled
        });
        Ok(unknown.len() < before)
    }

    /// Reserves room for one page: counts the admission in, and while that takes the cache
    /// past its capacity, takes it out and evicts with the clock hand (bounded by the wait
    /// limit).
    fn reserve(&self) -> Result<Reservation<'_>> {
        let mut wait: Option<Backoff> = None;
        loop {
            let reservation = self.count_admission()?;
            let in_use = self.pages_in_use()?;
            if in_use <= self.capacity_pages {
                return Ok(reservation);
            }
            drop(reservation);
            match self.sweep()? {
                Swept::Evicted => {}
                Swept::Nothing { refusal } => {
                    Backoff::snooze_or(&mut wait, self.host.options().wait_limit, |waited_ms| {
                        refusal.unwrap_or(Error::NoVictim {
                            cached_pages: in_use - 1,
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
        let reservation = self.reserve()?;
        let lock = self.lock_page(key)?;
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
        let called = std::time::Instant::now();
        match self
            .host
            .create_noting_position(key, &bytes, reservation.note_at())
        {
            Ok(()) => {}
            Err(megalon_core::Error::ObjectExists) => {
                self.shared.counters.add(Counter::AdmissionsLost);
                return Ok(());
            }
            // The create may have reached the log (its append was not confirmed): if it
            // took effect, the page is ours to name in its owner line (or the clock hand
            // would find it only once a sweep that found nothing repairs the lines).
            Err(error) => {
                // The core notes the create's position (never 0) once it has one, before
                // its entry is written, and never after the call returned: a position
                // word still 0 is a create that never reached the log (its slot, say,
                // was refused), whose outcome is known. Kept as unknown, its entry would
                // count on every host as an admission in progress until this host next
                // counted the pages, which a host that then only hits never does.
                let noted = self
                    .shared
                    .pod
                    .scr_u64(reservation.note_at())
                    .load(Ordering::SeqCst);
                if noted == 0 {
                    return Err(error.into());
                }
                let (_, _, tail) = self.host.inspect().log_cursors();
                match self.cached_after_failure(key, called) {
                    Ok(Some(true)) => {}
                    Ok(Some(false)) => return Err(error.into()),
                    // Still unknown (its entry may be behind another host's hole): the
                    // create may apply later, uncounted by anyone, and every admission
                    // until then would find room that is not there. Its entry stays taken
                    // until this host has applied the log past it.
                    unknown => {
                        let entry = (reservation.index, reservation.value, tail);
                        std::mem::forget(reservation);
                        self.unknown_admissions.lock().push(entry);
                        unknown?;
                        return Err(error.into());
                    }
                }
            }
        }
        self.shared.counters.add(Counter::Admissions);
        // Still under the lock, so the page cannot be evicted and its slot reused before
        // the owner line is written back: the line names the page that lives there, and
        // nobody else writes it until the slot is freed and admitted into again. (Unless
        // this host was declared dead meanwhile, paused in the lookup's catch-up past its
        // lease: `set_owner` looks.)
        if let Some(entry) = self.host.lookup(key)? {
            self.set_owner(entry.slot, key, &lock);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use megalon_core::{Backing, Join};

    use crate::config::{PageCacheConfig, PageCacheOptions};
    use crate::error::Error;
    use crate::PageCache;

    thread_local! {
        /// Run by this thread's `release_entry` between its two stores (the position
        /// word's and the state word's), once.
        static BETWEEN_RELEASE_STORES: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    pub(super) fn between_release_stores() {
        if let Some(hook) = BETWEEN_RELEASE_STORES.with(|hook| hook.borrow_mut().take()) {
            hook();
        }
    }

    fn join(pod: &std::sync::Arc<megalon_core::Pod>) -> PageCache {
        let options = PageCacheOptions::new().wait_limit(Duration::from_millis(50));
        PageCache::join(pod, Join::AnyFree, options).unwrap()
    }

    /// Host a is paused past its lease in an admission, recovered, and its id joined
    /// again by c, which admits. When a resumes and counts itself in, it must leave c's
    /// entries alone: it reset c's word (a count per host) to its own life's, c's
    /// admission in progress counted no more, and b took the room c held (the cache went
    /// over its capacity).
    #[test]
    fn a_paused_host_s_count_leaves_the_next_life_s_word_alone() {
        let pod =
            PageCache::create_pod(&PageCacheConfig::new(1).max_hosts(2), Backing::heap()).unwrap();
        let a = join(&pod);
        let b = join(&pod);
        let a_id = a.inner.host.id();
        a.inner.host.inspect().freeze(); // paused past its lease
        let start = std::time::Instant::now();
        while pod.hosts().iter().any(|row| row.host == a_id) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "a never recovered"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = join(&pod); // a's id, its next life
        assert_eq!(c.inner.host.id(), a_id);
        let in_progress = c.inner.reserve().expect("an empty cache has room");
        // a resumes at the top of reserve's loop: counts, fails its look, takes itself out.
        drop(a.inner.count_admission());
        assert!(a.inner.pages_in_use().is_err(), "a knows it is dead by now");
        let taken = b.inner.reserve();
        assert!(
            matches!(taken, Err(Error::NoVictim { .. })),
            "b took room that c's admission holds (pages in use {:?}): {:?}",
            b.inner.pages_in_use(),
            taken.as_ref().map(|_| ())
        );
        drop(in_progress);
        std::mem::forget(a);
    }

    /// A host's threads have at most `admissions_per_host` admissions in progress: one
    /// more waits for an entry, and past the wait limit answers `AdmissionsBusy`.
    #[test]
    fn an_admission_past_every_entry_taken_waits_for_one() {
        for per_host in [1, 16, 37] {
            let config = PageCacheConfig::new(64)
                .max_hosts(2)
                .admissions_per_host(per_host);
            let pod = PageCache::create_pod(&config, Backing::heap()).unwrap();
            let _other = join(&pod); // host 0: a's entries are not the first in the SCR
            let a = join(&pod);
            let held: Vec<_> = (0..per_host)
                .map(|_| a.inner.count_admission().expect("a free entry"))
                .collect();
            assert_eq!(a.inner.pages_in_use().unwrap(), per_host);
            assert!(matches!(
                a.inner.count_admission(),
                Err(Error::AdmissionsBusy { in_progress, .. }) if in_progress == per_host
            ));
            drop(held);
            assert_eq!(a.inner.pages_in_use().unwrap(), 0, "every entry freed");
            let again = a.inner.count_admission().expect("an entry freed");
            assert_eq!(a.inner.pages_in_use().unwrap(), 1);
            drop(again);
        }
    }

    /// An entry left taken by an earlier life of the id (it died in an admission, its
    /// create noted and long applied) is taken by the next life's admission, which counts
    /// until its own create is noted and applied: read with the earlier life's position,
    /// it counted nowhere, and two admissions could take the last room.
    #[test]
    fn an_entry_an_earlier_life_left_counts_the_next_life_s_admission() {
        let pod =
            PageCache::create_pod(&PageCacheConfig::new(8).max_hosts(2), Backing::heap()).unwrap();
        drop(join(&pod));
        let a = join(&pod); // the id's next life
        let life = a.inner.life();
        assert!(life > 0);
        a.inner.host.object_count().unwrap();
        let applied = a.inner.host.inspect().applied_position();
        assert!(applied > 0);
        let (state, position) = a.inner.entry_words(a.inner.host.id(), 0);
        state.store(
            (life - 1) << super::LIFE_SHIFT | super::TAKEN,
            Ordering::SeqCst,
        );
        position.store(applied, Ordering::SeqCst);
        let in_progress = a.inner.count_admission().unwrap();
        assert_eq!(in_progress.index, 0, "the earlier life's entry, the first");
        assert_eq!(
            a.inner.pages_in_use().unwrap(),
            1,
            "the admission in progress counts"
        );
        drop(in_progress);
        assert_eq!(
            (
                state.load(Ordering::SeqCst),
                position.load(Ordering::SeqCst)
            ),
            (0, 0),
            "free"
        );
    }

    /// A thread of the host takes an entry while another thread of it frees one whose
    /// create was noted and long applied (the page counts among the objects). Whatever it
    /// takes, its admission must count: freed state first, position second, it could take
    /// the entry with the applied position still in it, count nowhere, and two admissions
    /// take the last room.
    #[test]
    fn an_entry_taken_while_another_is_freed_counts() {
        let pod =
            PageCache::create_pod(&PageCacheConfig::new(4).max_hosts(2), Backing::heap()).unwrap();
        drop(join(&pod)); // its leave in the log: a position to note
        let a = std::sync::Arc::new(join(&pod));
        a.inner.host.object_count().unwrap();
        let applied = a.inner.host.inspect().applied_position();
        assert!(applied > 0);
        let noted = a.inner.count_admission().unwrap();
        assert_eq!(noted.index, 0);
        let (_, position) = a.inner.entry_words(a.inner.host.id(), 0);
        position.store(applied, Ordering::SeqCst); // its create noted, and applied
        assert_eq!(
            a.inner.pages_in_use().unwrap(),
            0,
            "counted among the objects"
        );
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (inner, into) = (std::sync::Arc::clone(&a), std::sync::Arc::clone(&seen));
        BETWEEN_RELEASE_STORES.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                let taken = inner.inner.count_admission().expect("a free entry");
                *into.lock().unwrap() = Some((taken.index, inner.inner.pages_in_use()));
                drop(taken);
            }))
        });
        drop(noted);
        let (index, in_use) = seen.lock().unwrap().take().expect("the hook ran");
        assert!(
            in_use.as_ref().is_ok_and(|&pages| pages >= 1),
            "an admission in entry {index} counted nowhere: pages in use {in_use:?}"
        );
    }
}
