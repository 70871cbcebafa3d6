//! The page cache's configuration ([`PageCacheConfig`]: what a pod is created with) and
//! options ([`PageCacheOptions`]: how one host runs), and the sizing of a pod from them.

use std::time::Duration;

use megalon_core::{
    limits::{LINE_BYTES, PAGE_BYTES},
    HostOptions, Layout, MemoryKind, PodConfig,
};

use crate::error::{Error, Result};
use crate::layout::{app_lnr_bytes, app_scr_bytes};
use crate::page::{PAGE_KEY_BYTES, PAGE_OBJECT_BYTES};

/// Most admission lock words a pod can have.
pub const MAX_ADMISSION_LOCKS: u64 = 1 << 16;
/// The most [`PageCacheConfig::admissions_per_host`] can be.
pub const MAX_ADMISSIONS_PER_HOST: u64 = 1 << 12;
/// Most pages a cache can hold (slot ids are 32-bit in the core).
pub const MAX_CACHE_PAGES: u64 = 1 << 31;
/// Most entries of the pod's log: 2^32 (at most 4 TiB of log with the largest keys of a
/// page, far more than any pod holds), so that the pod's sizes are computed without
/// overflow.
pub const MAX_LOG_CAPACITY_ENTRIES: u64 = 1 << 32;

/// The sizes of a page cache's pod, fixed when it is created; a builder. It computes the
/// [`PodConfig`] (slots, records, the application regions) so that nobody lays a pod out
/// by hand.
///
/// ```
/// use megalon_core::Layout;
/// use megalon_pagecache::PageCacheConfig;
/// let config = PageCacheConfig::new(1024).max_hosts(4).coherence_records(256);
/// let pod_config = config.pod_config()?;
/// let layout = Layout::new(&pod_config)?;
/// assert!(layout.slot_count > 1024, "slack for the hosts' slot batches");
/// assert_eq!(layout.record_count, 256);
/// # Ok::<(), megalon_pagecache::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCacheConfig {
    /// Pages the cache holds at most (its capacity). The pod gets more slots than this:
    /// see [`slot_count_for`].
    pub cache_pages: u64,
    /// Hosts that can share the cache.
    pub max_hosts: u32,
    /// Coherence records (rounded up to a whole line of records): how many pages can be
    /// read-write-shared at once. Pages past that are made read-shared (written back
    /// first) by the core's reclaimer.
    pub coherence_records: u64,
    /// Bits of one coherence record: 8, 16 or 32.
    pub record_width_bits: u32,
    /// Entries in the pod's log.
    pub log_capacity_entries: u64,
    /// Admission lock words in the SCR (pages hash onto them; see the crate docs).
    pub admission_locks: u64,
    /// Admissions (misses being read from their files and created) one host can have in
    /// progress at once: a thread past them waits for one to end, up to its wait limit
    /// (then [`Error::AdmissionsBusy`]). Each costs 16 bytes of SCR per host, and a host
    /// counting the cache's pages reads every host's up to the most it has used.
    pub admissions_per_host: u64,
}

impl PageCacheConfig {
    /// A cache of `cache_pages` pages, for 4 hosts, with a record per page (32-bit), a log
    /// of 4096 entries, 64 admission locks and 16 admissions in progress per host.
    pub fn new(cache_pages: u64) -> Self {
        Self {
            cache_pages,
            max_hosts: 4,
            coherence_records: cache_pages,
            record_width_bits: 32,
            log_capacity_entries: 4096,
            admission_locks: 64,
            admissions_per_host: 16,
        }
    }

    megalon_core::setters! { PageCacheConfig:
        max_hosts: u32,
        coherence_records: u64,
        record_width_bits: u32,
        log_capacity_entries: u64,
        admission_locks: u64,
        admissions_per_host: u64,
    }

    fn validate(&self) -> Result<()> {
        let checks = [
            ("cache_pages", self.cache_pages, 1, MAX_CACHE_PAGES),
            (
                "log_capacity_entries",
                self.log_capacity_entries,
                megalon_core::limits::MIN_LOG_CAPACITY_ENTRIES,
                MAX_LOG_CAPACITY_ENTRIES,
            ),
            (
                "coherence_records",
                self.coherence_records,
                1,
                u64::from(u32::MAX) - 1,
            ),
            (
                "admission_locks",
                self.admission_locks,
                1,
                MAX_ADMISSION_LOCKS,
            ),
            (
                "admissions_per_host",
                self.admissions_per_host,
                1,
                MAX_ADMISSIONS_PER_HOST,
            ),
            (
                "max_hosts",
                u64::from(self.max_hosts),
                1,
                u64::from(megalon_core::limits::MAX_HOSTS_LIMIT),
            ),
        ];
        for (parameter, value, least, most) in checks {
            if value < least {
                return Err(Error::BadConfig {
                    parameter,
                    value,
                    reason: "below the minimum of",
                    bound: least,
                });
            }
            if value > most {
                return Err(Error::BadConfig {
                    parameter,
                    value,
                    reason: "above the limit of",
                    bound: most,
                });
            }
        }
        Ok(())
    }

    /// The pod configuration: slots of a page and its trailer line (4160 bytes), 16-byte keys, [`slot_count_for`] slots, the
    /// records asked for, and the application regions sized for them.
    ///
    /// Both application regions are sized exactly for the final counts: the SCR is
    /// rounded up to whole pages and what the rounding adds goes to the application
    /// region, not to extra records (so the record count is what was asked for, rounded
    /// up to a line); the same in LNR for slots.
    pub fn pod_config(&self) -> Result<PodConfig> {
        self.pod_config_for(&megalon_core::Backing::heap())
    }

    /// [`PageCacheConfig::pod_config`] for a pod on `backing`: one in a file or on a
    /// device keeps undo images ([`megalon_core::CrashSafety::Auto`]), sized in too.
    pub fn pod_config_for(&self, backing: &megalon_core::Backing) -> Result<PodConfig> {
        self.validate()?;
        let crash_safety = PodConfig::new().resolved_for(backing).crash_safety;
        let base = PodConfig::new()
            .crash_safety(crash_safety)
            .slot_size_bytes(PAGE_OBJECT_BYTES)
            .max_key_bytes(PAGE_KEY_BYTES as u32)
            .log_capacity_entries(self.log_capacity_entries)
            .record_width_bits(self.record_width_bits)
            .max_hosts(self.max_hosts);
        let record_bytes = u64::from(self.record_width_bits / 8);
        if record_bytes == 0
            || !megalon_core::limits::RECORD_WIDTHS_BITS.contains(&self.record_width_bits)
        {
            return Err(megalon_core::Error::UnsupportedRecordWidth {
                bits: self.record_width_bits,
            }
            .into());
        }

        // LNR: the log, the slots, and the application's lines; the page rounding goes to
        // the application region, so the slot count is exact.
        let slot_count = slot_count_for(self.cache_pages, self.max_hosts);
        let log_bytes = self
            .log_capacity_entries
            .saturating_mul(base.log_entry_bytes());
        // The log, the join area (late joiners get the index through it) and the undo
        // images.
        let undo_bytes = if base.undo_images() {
            u64::from(self.max_hosts) * megalon_core::limits::HOLDS_PER_HOST * PAGE_OBJECT_BYTES
        } else {
            0
        };
        let log_bytes = log_bytes
            .saturating_add(base.join_area_bytes)
            .saturating_add(undo_bytes);
        let lnr_bytes = log_bytes
            .saturating_add(app_lnr_bytes(slot_count))
            .saturating_add(slot_count * PAGE_OBJECT_BYTES)
            .div_ceil(PAGE_BYTES)
            * PAGE_BYTES;
        let app_lnr = lnr_bytes - log_bytes - slot_count * PAGE_OBJECT_BYTES;

        // SCR: grow a page at a time (from the least that could do) until what records
        // alone would fill holds the records asked for and the application's words; the
        // rest goes to the application.
        let records_bytes =
            (self.coherence_records * record_bytes).div_ceil(LINE_BYTES) * LINE_BYTES;
        let record_count = records_bytes / record_bytes;
        let app_scr_needed = app_scr_bytes(
            record_count,
            self.admission_locks,
            self.admissions_per_host,
            self.max_hosts,
        );
        let mut scr_bytes = (records_bytes + app_scr_needed).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let app_scr = loop {
            let probe = base.clone().scr_bytes(scr_bytes).lnr_bytes(lnr_bytes);
            match Layout::new(&probe) {
                Ok(layout) => {
                    // With no application region, records fill all the fixed parts leave.
                    let fill = layout.record_count * record_bytes;
                    if fill >= records_bytes + app_scr_needed {
                        break fill - records_bytes;
                    }
                }
                Err(megalon_core::Error::LayoutDoesNotFit {
                    region: megalon_core::Region::Scr,
                    ..
                }) => {}
                Err(error) => return Err(error.into()),
            }
            scr_bytes += PAGE_BYTES;
        };

        let config = base
            .scr_bytes(scr_bytes)
            .lnr_bytes(lnr_bytes)
            .app_scr_bytes(app_scr)
            .app_lnr_bytes(app_lnr);
        let layout = Layout::new(&config)?;
        debug_assert_eq!(layout.record_count, record_count);
        debug_assert_eq!(layout.slot_count, slot_count);
        Ok(config)
    }
}

/// Slots a pod needs for a cache of `cache_pages` pages shared by `max_hosts` hosts: the
/// pages, plus slack.
///
/// Free slots belong to hosts (the core partitions them, DESIGN section 6): each host
/// claims them from the unclaimed range in batches of
/// [`megalon_core::inspect::slot_claim_batch`], and one that has none asks
/// the host with the most through the log, which grants what its pool holds *then*. So
/// with the cache full, free slots may sit in other hosts' pools, and a pool can be
/// momentarily empty while its creates are in flight. The slack is one claim batch per
/// host plus two slots per host in flight, so that while unclaimed slots last a create
/// finds one without waiting for another host's grant. Once they are used up it may
/// still wait for one: a delete's slot goes to the pool of the host that deleted (an
/// eviction's, to the evicting host's), so a host whose pool is empty asks the host with
/// the most (the core answers `SlotsExhausted` at once only when no host has a free slot,
/// and after asking one, within the wait limit, when one has).
pub fn slot_count_for(cache_pages: u64, max_hosts: u32) -> u64 {
    let hosts = u64::from(max_hosts.max(1));
    let mut slots = cache_pages + 2 * hosts;
    loop {
        let batch = megalon_core::inspect::slot_claim_batch(slots, max_hosts);
        let needed = cache_pages + hosts * batch + 2 * hosts;
        if slots >= needed {
            return slots;
        }
        slots = needed;
    }
}

/// How one page-cache host runs.
#[derive(Clone, Debug)]
pub struct PageCacheOptions {
    /// The core host's options (memory kind, pump, wait limit, retries, record
    /// watermark). Its release hook is replaced by the page cache's own.
    pub host: HostOptions,
    /// How often the background writer writes dirty pages back; `None`: no writer
    /// (dirty pages reach the file through `fsync`, eviction and reclaim only).
    pub writer_interval: Option<Duration>,
}

impl Default for PageCacheOptions {
    fn default() -> Self {
        Self {
            host: HostOptions::default(),
            writer_interval: Some(Duration::from_millis(50)),
        }
    }
}

impl PageCacheOptions {
    /// The core's default host options and a writer every 50 ms.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`PageCacheOptions::host`].
    #[must_use]
    pub fn host(mut self, host: HostOptions) -> Self {
        self.host = host;
        self
    }

    /// Sets the host's memory kind.
    #[must_use]
    pub fn memory(mut self, memory: MemoryKind) -> Self {
        self.host = self.host.memory(memory);
        self
    }

    /// Sets the host's wait limit (also the bound of every wait of the page cache).
    #[must_use]
    pub fn wait_limit(mut self, limit: Duration) -> Self {
        self.host = self.host.wait_limit(limit);
        self
    }

    /// Sets [`PageCacheOptions::writer_interval`].
    #[must_use]
    pub fn writer_interval(mut self, interval: Option<Duration>) -> Self {
        self.writer_interval = interval;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cover_the_pages_and_a_batch_per_host() {
        for (pages, hosts) in [(1, 1), (8, 2), (1000, 4), (1 << 20, 16)] {
            let slots = slot_count_for(pages, hosts);
            let batch = (slots / (8 * u64::from(hosts))).clamp(1, 4096);
            assert!(
                slots >= pages + u64::from(hosts) * (batch + 2),
                "{pages} {hosts}"
            );
        }
    }

    #[test]
    fn pod_config_has_the_asked_counts_and_fitting_regions() {
        for (pages, records, width, hosts) in [(8, 16, 32, 2), (100, 1, 8, 3), (3000, 5000, 16, 8)]
        {
            let config = PageCacheConfig::new(pages)
                .coherence_records(records)
                .record_width_bits(width)
                .max_hosts(hosts)
                .log_capacity_entries(256);
            let pod = config.pod_config().unwrap();
            let layout = Layout::new(&pod).unwrap();
            assert_eq!(layout.slot_count, slot_count_for(pages, hosts));
            let per_line = LINE_BYTES / u64::from(width / 8);
            assert_eq!(layout.record_count, records.div_ceil(per_line) * per_line);
            assert!(pod.app_scr_bytes >= app_scr_bytes(layout.record_count, 64, 16, pod.max_hosts));
            assert!(pod.app_lnr_bytes >= app_lnr_bytes(layout.slot_count));
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let Err(Error::BadConfig { parameter, .. }) = PageCacheConfig::new(0).pod_config() else {
            panic!("zero pages accepted");
        };
        assert_eq!(parameter, "cache_pages");
        // A log too large to size (its bytes overflowed a u64: a panic) or too small.
        for entries in [u64::MAX, 1 << 56, MAX_LOG_CAPACITY_ENTRIES + 1, 0, 1] {
            let config = PageCacheConfig::new(8).log_capacity_entries(entries);
            let Err(Error::BadConfig { parameter, .. }) = config.pod_config() else {
                panic!("a log of {entries} entries accepted");
            };
            assert_eq!(parameter, "log_capacity_entries");
        }
        let Err(Error::Core(megalon_core::Error::UnsupportedRecordWidth { bits: 12 })) =
            PageCacheConfig::new(4).record_width_bits(12).pod_config()
        else {
            panic!("a 12-bit record accepted");
        };
    }
}
