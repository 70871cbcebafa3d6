//! Where the page cache keeps its shared state: the pod's application regions.
//!
//! Application SCR (coherent words; every host reads and updates them atomically):
//!
//! | line  | words                                                                        |
//! |-------|------------------------------------------------------------------------------|
//! | 0     | magic, capacity in pages, admission locks, admissions per host (written once |
//! |       | at creation, magic last)                                                     |
//! | 1     | the clock hand: a position that only grows; its slot is `position % slots`  |
//! | 2..   | admissions in progress, per host: the entries it has taken at most, then     |
//! |       | an entry of two words per admission it may have in progress: its life and    |
//! |       | its state, then its create's log position once noted                         |
//! | ..    | admission lock words: 0 free, else the holder's host id + 1 and its life   |
//! | ..    | the dirty bitmap: bit `r % 64` of word `r / 64` for coherence record `r`    |
//!
//! The pages cached are the pod's objects (every replica counts them); an admission in
//! progress counts in an entry of its host's until its create returned, or until the
//! reader's replica has applied the create, so that the capacity holds while creates are
//! on their way, a host that dies in the middle counts no more once its row is free, and
//! a page whose admitter died after its create counts once (`admission.rs`).
//!
//! Application LNR (non-coherent, through [`megalon_core::Memory`]):
//!
//! - owner lines, one line per slot: the key of the page admitted into the slot and
//!   [`OWNER_MAGIC`]. The admitting host writes it under the page's admission lock and
//!   writes it back; a hand on any host invalidates the line before reading it. A whole
//!   line per slot, so two hosts admitting into neighbouring slots never write one line.
//! - access counts, a byte per slot: bumped by any host on every access without atomics,
//!   decremented by the hand. A line written back by one host can undo another host's
//!   updates of its neighbours' counts: the counts are hints for the clock and may lose
//!   updates (DESIGN section 4). They never share a line with the owner lines.

use megalon_core::{limits::LINE_BYTES, Layout};

use crate::error::{Error, Result};
use crate::page::{PAGE_KEY_BYTES, PAGE_OBJECT_BYTES};

/// First word of the application SCR of a pod formatted for a page cache (and its
/// format version).
/// Version 2: a page's object is the page and a trailer line (its valid bytes). Version
/// 3: admissions in progress are counted per host, and the pages cached are the pod's
/// objects (a coherent counter of both drifted for good when a host died mid-admission
/// or mid-eviction). Version 4: files are named by inode number and birth time (an
/// inode number alone named the next file given it). Version 5: an admission in
/// progress is an entry of its host's that notes its create's log position (a count per
/// host counted the page of an admitter that died after its create twice, until the
/// host's row was freed).
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"mgPCv005");
/// Marks an owner line that holds a key (a fresh pod's zeros hold none).
pub(crate) const OWNER_MAGIC: u64 = u64::from_le_bytes(*b"mgPCownr");
/// Bytes of an owner line that mean something: the key, then the magic.
pub(crate) const OWNER_BYTES: usize = PAGE_KEY_BYTES + 8;
/// Lines of the application SCR before the words of admissions in progress: header, hand.
const FIXED_LINES: u64 = 2;
/// Bytes of an entry of admissions in progress: its state word, its position word.
const ADMISSION_ENTRY_BYTES: u64 = 16;

fn whole_lines(bytes: u64) -> u64 {
    bytes.div_ceil(LINE_BYTES) * LINE_BYTES
}

/// Application SCR bytes a page cache needs with `record_count` records, `admission_locks`
/// lock words, `admissions_per_host` entries of admissions in progress per host and
/// `max_hosts` hosts.
pub(crate) fn app_scr_bytes(
    record_count: u64,
    admission_locks: u64,
    admissions_per_host: u64,
    max_hosts: u32,
) -> u64 {
    FIXED_LINES * LINE_BYTES
        + u64::from(max_hosts) * admitting_host_bytes(admissions_per_host)
        + whole_lines(admission_locks * 8)
        + whole_lines(record_count.div_ceil(64) * 8)
}

/// Bytes of a host's admissions in progress: a word of how many entries it has taken at
/// most (readers look at those only), then its entries, on lines of their own.
fn admitting_host_bytes(admissions_per_host: u64) -> u64 {
    whole_lines(8 + admissions_per_host * ADMISSION_ENTRY_BYTES)
}

/// Application LNR bytes a page cache needs with `slot_count` slots.
pub(crate) fn app_lnr_bytes(slot_count: u64) -> u64 {
    slot_count * LINE_BYTES + whole_lines(slot_count)
}

/// Offsets of everything the page cache keeps in a pod, computed the same way on every
/// host from the pod's layout and the page-cache header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Regions {
    /// The header line: magic, capacity, admission locks.
    pub(crate) header: u64,
    /// The clock hand.
    pub(crate) hand: u64,
    /// The first host's admissions in progress.
    pub(crate) admitting: u64,
    /// Entries of admissions in progress per host.
    pub(crate) admissions_per_host: u64,
    /// The first admission lock word.
    pub(crate) locks: u64,
    /// Admission lock words.
    pub(crate) admission_locks: u64,
    /// The first word of the dirty bitmap.
    pub(crate) bitmap: u64,
    /// Words of the dirty bitmap.
    pub(crate) bitmap_words: u64,
    /// Coherence records in the pod.
    pub(crate) record_count: u64,
    /// Slots in the pod.
    pub(crate) slot_count: u64,
    /// The first slot.
    pub(crate) slots: u64,
    /// The first owner line.
    pub(crate) owners: u64,
    /// The first access count.
    pub(crate) counts: u64,
}

impl Regions {
    /// The regions of `layout` with `admission_locks` lock words and `admissions_per_host`
    /// entries of admissions in progress per host, or why the layout cannot hold a page
    /// cache.
    pub(crate) fn new(
        layout: &Layout,
        admission_locks: u64,
        admissions_per_host: u64,
    ) -> Result<Regions> {
        let config = &layout.config;
        if config.slot_size_bytes != PAGE_OBJECT_BYTES {
            return Err(Error::NotAPageCachePod {
                reason: "its slots are not 4160 bytes (a page and its trailer)",
            });
        }
        if (config.max_key_bytes as usize) < PAGE_KEY_BYTES {
            return Err(Error::NotAPageCachePod {
                reason: "its keys cannot hold 16 bytes",
            });
        }
        if config.app_scr_bytes
            < app_scr_bytes(
                layout.record_count,
                admission_locks,
                admissions_per_host,
                config.max_hosts,
            )
        {
            return Err(Error::NotAPageCachePod {
                reason: "its application SCR is too small for the locks and the dirty bitmap",
            });
        }
        if config.app_lnr_bytes < app_lnr_bytes(layout.slot_count) {
            return Err(Error::NotAPageCachePod {
                reason: "its application LNR is too small for the owner lines and access counts",
            });
        }
        let header = layout.app_scr_offset;
        let admitting = header + FIXED_LINES * LINE_BYTES;
        let locks =
            admitting + u64::from(config.max_hosts) * admitting_host_bytes(admissions_per_host);
        let owners = layout.app_lnr_offset;
        Ok(Regions {
            header,
            hand: header + LINE_BYTES,
            admitting,
            admissions_per_host,
            locks,
            admission_locks,
            bitmap: locks + whole_lines(admission_locks * 8),
            bitmap_words: layout.record_count.div_ceil(64),
            record_count: layout.record_count,
            slot_count: layout.slot_count,
            slots: layout.slots_offset,
            owners,
            counts: owners + layout.slot_count * LINE_BYTES,
        })
    }

    /// Offset of header word `index` (0 magic, 1 capacity, 2 admission locks, 3
    /// admissions per host).
    pub(crate) fn header_word(layout: &Layout, index: u64) -> Option<u64> {
        (layout.config.app_scr_bytes >= FIXED_LINES * LINE_BYTES)
            .then(|| layout.app_scr_offset + 8 * index)
    }

    /// Entry `index` of host `host`'s admissions in progress: the offsets of its state
    /// word and of its position word.
    pub(crate) fn admitting(&self, host: megalon_core::HostId, index: u64) -> (u64, u64) {
        debug_assert!(index < self.admissions_per_host);
        let entry = self.admitting_high(host) + 8 + index * ADMISSION_ENTRY_BYTES;
        (entry, entry + 8)
    }

    /// Host `host`'s word of how many of its entries of admissions in progress it has
    /// taken at most (one past the highest index; it only grows). On the line of its
    /// first entries: a host with few threads has a reader load one line.
    pub(crate) fn admitting_high(&self, host: megalon_core::HostId) -> u64 {
        self.admitting + u64::from(host) * admitting_host_bytes(self.admissions_per_host)
    }

    pub(crate) fn lock(&self, index: u64) -> u64 {
        debug_assert!(index < self.admission_locks);
        self.locks + 8 * index
    }

    pub(crate) fn dirty_word(&self, index: u64) -> u64 {
        debug_assert!(index < self.bitmap_words);
        self.bitmap + 8 * index
    }

    pub(crate) fn owner(&self, slot: u64) -> u64 {
        debug_assert!(slot < self.slot_count);
        self.owners + slot * LINE_BYTES
    }

    pub(crate) fn count(&self, slot: u64) -> u64 {
        debug_assert!(slot < self.slot_count);
        self.counts + slot
    }

    /// The slot whose bytes start at `offset` (a ticket's offset).
    pub(crate) fn slot_at(&self, offset: u64) -> u64 {
        let slot = (offset - self.slots) / PAGE_OBJECT_BYTES;
        debug_assert!(
            slot < self.slot_count && (offset - self.slots).is_multiple_of(PAGE_OBJECT_BYTES)
        );
        slot
    }
}
