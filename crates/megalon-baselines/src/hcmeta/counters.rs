//! Event counters: each thread that works on a host (a handle, the host's background
//! server) adds to a block of its own, with a plain load and store on a line no other
//! thread writes; a report sums every block.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam::utils::CachePadded;
use megalon_core::limits::LINE_BYTES;
use megalon_core::memory::cxl::ScrAccess;
use megalon_core::rpc::Tally;
use parking_lot::Mutex;

/// What the counters count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    Reads,
    Writes,
    Creates,
    Deletes,
    Retries,
    LockWaits,
    LinesInvalidated,
    LinesWrittenBack,
    ScrAtomics,
    Churn,
    Rpcs,
    RequestsServed,
    Shares,
    Unshares,
    ClockBitsCleared,
    RowsCopied,
}

const COUNTERS: usize = Counter::RowsCopied as usize + 1;

/// The counters' names in reports, in [`Counter`] order: the same names as megalon's
/// report where they mean the same.
pub(crate) const NAMES: [&str; COUNTERS] = [
    "reads",
    "writes",
    "creates",
    "deletes",
    "retries",
    "waits for a lock",
    "lines invalidated",
    "lines written back",
    "SCR atomics",
    "churn",
    "rpcs",
    "requests served",
    "shares",
    "unshares",
    "clock bits cleared",
    "rows copied",
];

/// One thread's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    counts: [AtomicU64; COUNTERS],
}

impl Counters {
    /// Adds `n` to `counter`. Only the owning thread calls this. SCR accesses are also
    /// charged to the thread under the CXL cost model, as megalon's are
    /// ([`megalon_core::memory::cxl::charge_scr`]).
    #[inline]
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        if counter == Counter::ScrAtomics {
            megalon_core::memory::cxl::charge_scr(n);
        }
        self.count(counter, n);
    }

    /// One access to the SCR word `word`: counted as one SCR atomic, and charged under
    /// the CXL cost model by whether this host holds its line, as megalon's record words
    /// are ([`megalon_core::memory::cxl::charge_scr_at`]).
    #[inline]
    pub(crate) fn add_scr(&self, word: &AtomicU64, access: ScrAccess) {
        megalon_core::memory::cxl::charge_scr_at(|| word as *const AtomicU64 as usize, access);
        self.count(Counter::ScrAtomics, 1);
    }

    /// `words` SCR words from `first` on, loaded (or stored) one after the other (an
    /// index entry's link and inline key): counted as `words` accesses, as everywhere,
    /// but charged under the CXL cost model by the lines they span, each as one access,
    /// the line fetches real hardware makes for them. (Charged word by word, an HCMeta
    /// lookup at 16-byte keys paid three accesses for its entry's one line, at 90-byte
    /// keys up to thirteen for two.)
    #[inline]
    pub(crate) fn add_scr_words(&self, first: &AtomicU64, words: u64, access: ScrAccess) {
        let first = first as *const AtomicU64 as usize;
        let line = LINE_BYTES as usize;
        let last = first + words as usize * 8 - 1;
        for at in (first / line..=last / line).map(|l| l * line) {
            megalon_core::memory::cxl::charge_scr_at(|| at, access);
        }
        self.count(Counter::ScrAtomics, words);
    }

    #[inline]
    fn count(&self, counter: Counter, n: u64) {
        let slot = &self.counts[counter as usize];
        // Relaxed load and store: this thread is the only writer; a report may read a
        // slightly old count, never a torn one.
        slot.store(slot.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// The count of `counter` so far.
    #[cfg(test)]
    pub(crate) fn get(&self, counter: Counter) -> u64 {
        self.counts[counter as usize].load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> [u64; COUNTERS] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

/// The RPC ring counts its costs in the same counters as everything else.
impl Tally for Counters {
    #[inline]
    fn scr_atomics(&self, n: u64) {
        self.add(Counter::ScrAtomics, n);
    }

    #[inline]
    fn lines_written_back(&self, n: u64) {
        self.add(Counter::LinesWrittenBack, n);
    }

    #[inline]
    fn lines_invalidated(&self, n: u64) {
        self.add(Counter::LinesInvalidated, n);
    }
}

/// A thread's block, padded to its own lines.
pub(crate) type ThreadCounters = Arc<CachePadded<Counters>>;

/// A host's threads' blocks.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    threads: Mutex<Vec<ThreadCounters>>,
}

impl Registry {
    /// A new block for a thread (at handle creation, never on an operation).
    pub(crate) fn register(&self) -> ThreadCounters {
        let block: ThreadCounters = Arc::default();
        self.threads.lock().push(Arc::clone(&block));
        block
    }

    /// Adds every block's counts into `sums`.
    pub(crate) fn sum_into(&self, sums: &mut [u64; COUNTERS]) {
        for block in self.threads.lock().iter() {
            for (sum, count) in sums.iter_mut().zip(block.snapshot()) {
                *sum += count;
            }
        }
    }
}

/// Zeroed sums for [`Registry::sum_into`].
pub(crate) fn zero_sums() -> [u64; COUNTERS] {
    [0; COUNTERS]
}
