//! What one page-cache host has done: its own counters, and the core's event counts.

use std::sync::atomic::{AtomicU64, Ordering};

use megalon_core::EventCounts;

/// Counts of one page-cache host since it joined. A read or write that spans several
/// pages counts one access (hit or miss) per page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Page accesses that found the page cached.
    pub hits: u64,
    /// Page accesses that did not (and admitted it, or found it admitted meanwhile).
    pub misses: u64,
    /// Pages this host read from disk and created in the pod.
    pub admissions: u64,
    /// Admissions that found another thread or host had admitted the page first (found
    /// under the admission lock, or a create that lost).
    pub admissions_lost: u64,
    /// Pages this host deleted from the pod (the clock hand or [`evict_page`]).
    ///
    /// [`evict_page`]: crate::PageCache::evict_page
    pub evictions: u64,
    /// Dirty pages the background writer wrote back.
    pub write_backs_background: u64,
    /// Dirty pages `fsync` (and `close`, and `write_back_dirty`) wrote back.
    pub write_backs_fsync: u64,
    /// Dirty pages the release hook wrote back before they lost their record (reclaim or
    /// eviction).
    pub write_backs_release: u64,
    /// Releases the hook refused (the file not open here, or the write failed).
    pub releases_refused: u64,
    /// The core's event counts, summed over this host's threads.
    pub core: EventCounts,
}

/// Which path wrote a dirty page back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteBack {
    Background,
    Fsync,
    Release,
}

/// The live counters (relaxed: they publish nothing).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    admissions: AtomicU64,
    admissions_lost: AtomicU64,
    evictions: AtomicU64,
    write_backs_background: AtomicU64,
    write_backs_fsync: AtomicU64,
    write_backs_release: AtomicU64,
    releases_refused: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    Hits,
    Misses,
    Admissions,
    AdmissionsLost,
    Evictions,
    ReleasesRefused,
}

impl Counters {
    fn cell(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::Hits => &self.hits,
            Counter::Misses => &self.misses,
            Counter::Admissions => &self.admissions,
            Counter::AdmissionsLost => &self.admissions_lost,
            Counter::Evictions => &self.evictions,
            Counter::ReleasesRefused => &self.releases_refused,
        }
    }

    pub(crate) fn add(&self, counter: Counter) {
        self.cell(counter).fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wrote_back(&self, path: WriteBack) {
        match path {
            WriteBack::Background => &self.write_backs_background,
            WriteBack::Fsync => &self.write_backs_fsync,
            WriteBack::Release => &self.write_backs_release,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, core: EventCounts) -> PageCacheStats {
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        PageCacheStats {
            hits: load(&self.hits),
            misses: load(&self.misses),
            admissions: load(&self.admissions),
            admissions_lost: load(&self.admissions_lost),
            evictions: load(&self.evictions),
            write_backs_background: load(&self.write_backs_background),
            write_backs_fsync: load(&self.write_backs_fsync),
            write_backs_release: load(&self.write_backs_release),
            releases_refused: load(&self.releases_refused),
            core,
        }
    }
}
