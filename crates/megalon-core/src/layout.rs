//! Where everything lives in a pod, as offsets from its first byte.
//!
//! ```text
//! +--------+------------------------------ SCR ------------------------------+------ LNR ------+
//! | header | log cursors | host table | rpc | app | record array | reclaimer | . | log | undo | join | app | rpc | acc | slots | . |
//! +--------+-------------+------------+-----+-----+--------------+-----------+---+-----+------+------+-----+-----+-----+-------+---+
//! ```
//!
//! The two `app` regions are the application's ([`PodConfig::app_scr_bytes`],
//! [`PodConfig::app_lnr_bytes`]), empty unless configured. The `rpc` regions hold each
//! host's RPC ring (cursors and state words in SCR, entries in LNR), empty unless
//! [`PodConfig::rpc_ring_entries`] is set; `acc` is two bytes per slot, the object's last
//! accessor and how often it bounced, for the local-partition policy, empty unless
//! [`PodConfig::partition_after_accesses`] is set; `undo` holds each host's undo images,
//! empty unless the pod has [`CrashSafety::Undo`](crate::CrashSafety::Undo); `join` is
//! the area through which a live host streams its index to a late joiner.
//!
//! Computed once from a [`PodConfig`], the same way by every host, so nothing in the pod
//! holds a pointer: each host maps the pod at its own address. Each log cursor and each
//! host's applied position sits on a line of its own, so hosts that update different
//! cursors do not contend for one line in the coherent region. Every region starts on a
//! line; SCR and LNR start on a page.

use std::fmt;

use crate::config::PodConfig;
use crate::error::{Error, Region, Result};
use crate::limits::*;

/// Bytes of a ring entry before its key: the request and response header, a line.
pub(crate) const RING_HEADER_BYTES: u64 = LINE_BYTES;
/// Bytes of a ring's cursors in SCR: `tail` and `head`, a line each.
pub(crate) const RING_CURSOR_BYTES: u64 = 2 * LINE_BYTES;
/// Bytes of an RPC ring entry ([`crate::rpc`]) for keys up to `max_key_bytes` and payloads up to
/// `payload_bytes`: the header line, the key padded to whole words, the payload, in whole
/// lines.
pub fn ring_entry_bytes(max_key_bytes: usize, payload_bytes: u64) -> u64 {
    (RING_HEADER_BYTES + ring_key_area(max_key_bytes) + payload_bytes).next_multiple_of(LINE_BYTES)
}

/// SCR bytes of an RPC ring of `entries` entries: the cursors, then one state word per
/// entry and one sender word per entry, each array in whole lines.
pub fn ring_scr_bytes(entries: u64) -> u64 {
    RING_CURSOR_BYTES + 2 * ring_words_bytes(entries)
}

/// Bytes of one word per entry of a ring of `entries`, in whole lines.
pub(crate) fn ring_words_bytes(entries: u64) -> u64 {
    (entries * 8).next_multiple_of(LINE_BYTES)
}

pub(crate) fn ring_key_area(key_bytes: usize) -> u64 {
    (key_bytes as u64).next_multiple_of(8)
}

/// The most records `config`'s pod may have at any width: a lock announce (pods with undo
/// images) holds the record id + 1 in 30 bits.
fn max_records(config: &PodConfig) -> u64 {
    if config.undo_images() {
        MAX_RECORDS.min((1 << 30) - 2)
    } else {
        MAX_RECORDS
    }
}

/// The whole pod's bytes. The whole pod must be addressable; every offset of the layout is
/// less than this sum, so the arithmetic after this check cannot overflow.
fn total_bytes(config: &PodConfig) -> Result<u64> {
    [HEADER_REGION_BYTES, config.scr_bytes, config.lnr_bytes]
        .iter()
        .try_fold(0u64, |sum, part| sum.checked_add(*part))
        .filter(|total| usize::try_from(*total).is_ok())
        .ok_or(Error::LayoutDoesNotFit {
            region: Region::Device,
            needed_bytes: HEADER_REGION_BYTES
                .saturating_add(config.scr_bytes)
                .saturating_add(config.lnr_bytes),
            available_bytes: usize::MAX as u64,
        })
}

/// Bytes of one host's entry in the host table: a line, and with undo images one announce
/// word per lock it may hold.
fn host_entry_bytes(config: &PodConfig) -> u64 {
    let announces = if config.undo_images() {
        (HOLDS_PER_HOST * 8).next_multiple_of(LINE_BYTES)
    } else {
        0
    };
    HOST_ENTRY_BYTES + announces
}

/// The SCR's parts: cursors, host table, RPC rings, the application's region, then
/// records fill what the reclaimer line leaves.
struct ScrParts {
    scr_offset: u64,
    cursors_offset: u64,
    cursors_bytes: u64,
    host_table_offset: u64,
    host_table_bytes: u64,
    rpc_scr_offset: u64,
    rpc_scr_bytes_per_host: u64,
    app_scr_offset: u64,
    records_offset: u64,
    record_count: u64,
    record_bytes: u64,
    reclaimer_offset: u64,
}

impl ScrParts {
    fn new(config: &PodConfig) -> Result<Self> {
        let hosts = u64::from(config.max_hosts);
        let record_bits = u64::from(config.record_width_bits);
        // The word a record is read and CASed in: records narrower than a byte share one.
        let record_bytes = record_bits.div_ceil(8);
        let scr_offset = HEADER_REGION_BYTES;
        let cursors_bytes = (SHARED_CURSORS + hosts) * LINE_BYTES;
        let host_table_bytes = hosts * host_entry_bytes(config);
        let ring_entries = u64::from(config.rpc_ring_entries);
        let rpc_scr_bytes_per_host = if ring_entries == 0 {
            0
        } else {
            ring_scr_bytes(ring_entries)
        };
        let rpc_scr_bytes = hosts * rpc_scr_bytes_per_host;
        // At least one line of records, or the pod could never make an object writable.
        let fixed = checked(
            Region::Scr,
            &[
                cursors_bytes,
                host_table_bytes,
                rpc_scr_bytes,
                config.app_scr_bytes,
                RECLAIMER_BYTES,
                LINE_BYTES,
            ],
            config.scr_bytes,
        )? - LINE_BYTES;
        // `scr_bytes - fixed` is a multiple of 64 and a record's bits divide 64, so the
        // array ends on a line. (Divided before it is multiplied: an SCR of 2^61 bytes
        // or more would overflow the other way round.)
        let records_bytes = config.scr_bytes - fixed;
        let record_count = records_bytes / record_bits * 8;
        debug_assert_eq!(records_bytes % LINE_BYTES, 0);
        let cursors_offset = scr_offset;
        let host_table_offset = cursors_offset + cursors_bytes;
        let rpc_scr_offset = host_table_offset + host_table_bytes;
        let app_scr_offset = rpc_scr_offset + rpc_scr_bytes;
        let records_offset = app_scr_offset + config.app_scr_bytes;
        Ok(Self {
            scr_offset,
            cursors_offset,
            cursors_bytes,
            host_table_offset,
            host_table_bytes,
            rpc_scr_offset,
            rpc_scr_bytes_per_host,
            app_scr_offset,
            records_offset,
            record_count,
            record_bytes,
            reclaimer_offset: records_offset + records_bytes,
        })
    }
}

/// The LNR's parts: the log ring, the application's region, the RPC rings' entries, the
/// accessor words (local partitions), then slots.
struct LnrParts {
    lnr_offset: u64,
    log_offset: u64,
    log_entry_bytes: u64,
    undo_offset: u64,
    undo_bytes: u64,
    join_area_offset: u64,
    app_lnr_offset: u64,
    rpc_lnr_offset: u64,
    rpc_entry_bytes: u64,
    accessors_offset: u64,
    accessors_bytes: u64,
    slots_offset: u64,
    slot_count: u64,
}

impl LnrParts {
    fn new(config: &PodConfig, lnr_offset: u64) -> Result<Self> {
        let hosts = u64::from(config.max_hosts);
        let ring_entries = u64::from(config.rpc_ring_entries);
        let log_entry_bytes = config.log_entry_bytes();
        let log_bytes = config.log_capacity_entries.saturating_mul(log_entry_bytes);
        let rpc_entry_bytes = ring_entry_bytes(config.max_key_bytes as usize, 0);
        let rpc_lnr_bytes = hosts * ring_entries * rpc_entry_bytes;
        let partitions = config.partition_after_accesses > 0;
        let undo_bytes = if config.undo_images() {
            hosts * HOLDS_PER_HOST * config.slot_size_bytes
        } else {
            0
        };
        checked(
            Region::Lnr,
            &[
                log_bytes,
                undo_bytes,
                config.join_area_bytes,
                config.app_lnr_bytes,
                rpc_lnr_bytes,
                if partitions { LINE_BYTES } else { 0 },
                config.slot_size_bytes,
            ],
            config.lnr_bytes,
        )?;
        let log_offset = lnr_offset;
        let undo_offset = log_offset + log_bytes;
        let join_area_offset = undo_offset + undo_bytes;
        let app_lnr_offset = join_area_offset + config.join_area_bytes;
        let rpc_lnr_offset = app_lnr_offset + config.app_lnr_bytes;
        let accessors_offset = rpc_lnr_offset + rpc_lnr_bytes;
        let available = config.lnr_bytes
            - log_bytes
            - undo_bytes
            - config.join_area_bytes
            - config.app_lnr_bytes
            - rpc_lnr_bytes;
        let accessors_bytes = |slots: u64| {
            if partitions {
                (slots * ACCESSOR_BYTES).div_ceil(LINE_BYTES) * LINE_BYTES
            } else {
                0
            }
        };
        // Each slot costs its bytes and, with local partitions, its accessor word (whole
        // lines): the most slots that fit with their words.
        let per_slot = config.slot_size_bytes + if partitions { ACCESSOR_BYTES } else { 0 };
        let mut slot_count = available / per_slot;
        while slot_count * config.slot_size_bytes + accessors_bytes(slot_count) > available {
            slot_count -= 1;
        }
        let accessors_bytes = accessors_bytes(slot_count);
        Ok(Self {
            lnr_offset,
            log_offset,
            log_entry_bytes,
            undo_offset,
            undo_bytes,
            join_area_offset,
            app_lnr_offset,
            rpc_lnr_offset,
            rpc_entry_bytes,
            accessors_offset,
            accessors_bytes,
            slots_offset: accessors_offset + accessors_bytes,
            slot_count,
        })
    }
}

/// The computed layout of a pod. Every `*_offset` is from the pod's first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The configuration the layout was computed from.
    pub config: PodConfig,
    /// Start of the small coherent region.
    pub scr_offset: u64,
    /// Start of the log cursors: `tail`, `head`, `ctail`, the recovery word, the
    /// join mailbox, the width word, then one `ltail` (and gate word) per host.
    pub cursors_offset: u64,
    /// Bytes of the log cursors.
    pub cursors_bytes: u64,
    /// Start of the host table.
    pub host_table_offset: u64,
    /// Bytes of the host table.
    pub host_table_bytes: u64,
    /// Bytes of one host's entry in the host table.
    pub host_entry_bytes: u64,
    /// Start of the RPC rings' SCR part: each host's cursors and state words in turn.
    pub rpc_scr_offset: u64,
    /// SCR bytes of one host's ring (0 without rings).
    pub rpc_scr_bytes_per_host: u64,
    /// Start of the application's SCR region ([`PodConfig::app_scr_bytes`] long).
    pub app_scr_offset: u64,
    /// Start of the coherence record array.
    pub records_offset: u64,
    /// Coherence records in the array.
    pub record_count: u64,
    /// Bytes of the word a record is read and changed in: a record's bytes, or 1 for
    /// records narrower than a byte (which share it).
    pub record_bytes: u64,
    /// Start of the reclaimer's counters (records in use and the like).
    pub reclaimer_offset: u64,
    /// Start of the large non-coherent region.
    pub lnr_offset: u64,
    /// Start of the log's entry ring.
    pub log_offset: u64,
    /// Bytes of one log entry.
    pub log_entry_bytes: u64,
    /// Start of the undo images: [`HOLDS_PER_HOST`] slots per host (pods with
    /// [`CrashSafety::Undo`](crate::CrashSafety::Undo)).
    pub undo_offset: u64,
    /// Bytes of the undo images (0 without them).
    pub undo_bytes: u64,
    /// Start of the join area ([`PodConfig::join_area_bytes`] long): a live host streams
    /// its index through it to a host joining late.
    pub join_area_offset: u64,
    /// Start of the application's LNR region ([`PodConfig::app_lnr_bytes`] long).
    pub app_lnr_offset: u64,
    /// Start of the RPC rings' entries: each host's in turn.
    pub rpc_lnr_offset: u64,
    /// Bytes of one RPC ring entry: the header line and the longest key.
    pub rpc_entry_bytes: u64,
    /// Start of the accessor words, [`ACCESSOR_BYTES`] per slot: the object's last accessor
    /// and its bounces (the local-partition policy).
    pub accessors_offset: u64,
    /// Bytes of the last-accessor array (whole lines; 0 without local partitions).
    pub accessors_bytes: u64,
    /// Start of the object slots.
    pub slots_offset: u64,
    /// Object slots.
    pub slot_count: u64,
    /// Bytes the mapping needs: header, SCR, LNR.
    pub total_bytes: u64,
}

/// SCR bytes by category; the categories add up to the SCR size exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrUsage {
    /// `tail`, `head`, `ctail`, the recovery word, the join mailbox, the width word and
    /// one `ltail` (and gate word) per host, a line each.
    pub log_cursors_bytes: u64,
    /// One line per host, and with undo images one announce word per lock it may hold.
    pub host_table_bytes: u64,
    /// The hosts' RPC rings: cursors and state words.
    pub rpc_bytes: u64,
    /// Reserved for the application ([`PodConfig::app_scr_bytes`]).
    pub application_bytes: u64,
    /// The coherence record array.
    pub records_bytes: u64,
    /// The reclaimer's counters.
    pub reclaimer_bytes: u64,
    /// What no category uses (too little for one more record).
    pub unused_bytes: u64,
}

impl ScrUsage {
    /// Sum of every category: the pod's SCR size.
    pub fn total_bytes(&self) -> u64 {
        self.log_cursors_bytes
            + self.host_table_bytes
            + self.rpc_bytes
            + self.application_bytes
            + self.records_bytes
            + self.reclaimer_bytes
            + self.unused_bytes
    }
}

impl fmt::Display for ScrUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total_bytes();
        let row = |f: &mut fmt::Formatter<'_>, name: &str, bytes: u64| {
            let percent = if total == 0 {
                0.0
            } else {
                bytes as f64 * 100.0 / total as f64
            };
            writeln!(f, "  {name:<18} {bytes:>12} B  {percent:>5.1}%")
        };
        writeln!(f, "SCR usage ({total} bytes):")?;
        row(f, "log cursors", self.log_cursors_bytes)?;
        row(f, "host table", self.host_table_bytes)?;
        if self.rpc_bytes > 0 {
            row(f, "rpc rings", self.rpc_bytes)?;
        }
        if self.application_bytes > 0 {
            row(f, "application", self.application_bytes)?;
        }
        row(f, "coherence records", self.records_bytes)?;
        row(f, "reclaimer", self.reclaimer_bytes)?;
        row(f, "unused", self.unused_bytes)
    }
}

/// Checks that `parts` fit in `available_bytes` of `region`. On failure, reports the least
/// region size that fits and can be configured: whole pages.
fn checked(region: Region, parts: &[u64], available_bytes: u64) -> Result<u64> {
    let needed = parts
        .iter()
        .fold(0u64, |sum, part| sum.saturating_add(*part));
    if needed > available_bytes {
        return Err(Error::LayoutDoesNotFit {
            region,
            needed_bytes: needed.div_ceil(PAGE_BYTES).saturating_mul(PAGE_BYTES),
            available_bytes,
        });
    }
    Ok(needed)
}

impl Layout {
    /// Lays a pod out, or says which parameter or region stops it.
    /// [`CrashSafety::Auto`](crate::CrashSafety::Auto) is laid out, and kept in
    /// [`Layout::config`], as `Off` (an in-process pod's); [`Pod::create`](crate::Pod::create)
    /// decides it by the backing first.
    pub fn new(config: &PodConfig) -> Result<Layout> {
        let resolved;
        let config = if config.crash_safety == crate::config::CrashSafety::Auto {
            resolved = config.clone().crash_safety(crate::config::CrashSafety::Off);
            &resolved
        } else {
            config
        };
        config.validate()?;
        let total_bytes = total_bytes(config)?;
        let scr = ScrParts::new(config)?;
        let lnr = LnrParts::new(config, HEADER_REGION_BYTES + config.scr_bytes)?;
        let max_records = max_records(config);
        for (parameter, value, limit) in [
            ("slot count", lnr.slot_count, MAX_SLOTS),
            ("record count", scr.record_count, max_records),
        ] {
            if value > limit {
                return Err(Error::AboveLimit {
                    parameter,
                    value,
                    limit,
                });
            }
        }
        Ok(Layout {
            config: config.clone(),
            scr_offset: scr.scr_offset,
            cursors_offset: scr.cursors_offset,
            cursors_bytes: scr.cursors_bytes,
            host_table_offset: scr.host_table_offset,
            host_table_bytes: scr.host_table_bytes,
            host_entry_bytes: host_entry_bytes(config),
            rpc_scr_offset: scr.rpc_scr_offset,
            rpc_scr_bytes_per_host: scr.rpc_scr_bytes_per_host,
            app_scr_offset: scr.app_scr_offset,
            records_offset: scr.records_offset,
            record_count: scr.record_count,
            record_bytes: scr.record_bytes,
            reclaimer_offset: scr.reclaimer_offset,
            lnr_offset: lnr.lnr_offset,
            log_offset: lnr.log_offset,
            log_entry_bytes: lnr.log_entry_bytes,
            undo_offset: lnr.undo_offset,
            undo_bytes: lnr.undo_bytes,
            join_area_offset: lnr.join_area_offset,
            app_lnr_offset: lnr.app_lnr_offset,
            rpc_lnr_offset: lnr.rpc_lnr_offset,
            rpc_entry_bytes: lnr.rpc_entry_bytes,
            accessors_offset: lnr.accessors_offset,
            accessors_bytes: lnr.accessors_bytes,
            slots_offset: lnr.slots_offset,
            slot_count: lnr.slot_count,
            total_bytes,
        })
    }

    /// Offset of the log's `tail` (next position to reserve).
    pub fn tail_offset(&self) -> u64 {
        self.cursors_offset
    }

    /// Offset of the log's `head` (oldest position still needed by some host).
    pub fn head_offset(&self) -> u64 {
        self.cursors_offset + LINE_BYTES
    }

    /// Offset of the log's `ctail` (highest position whose append has completed).
    pub fn ctail_offset(&self) -> u64 {
        self.cursors_offset + 2 * LINE_BYTES
    }

    /// Offset of the recovery word: 0, or 1 + the live host recovering a dead one.
    pub fn recovery_offset(&self) -> u64 {
        self.cursors_offset + 3 * LINE_BYTES
    }

    /// Offset of the record under recovery: 0, or 1 + the record whose dead holder's
    /// lock the recoverer is about to restore (on the recovery word's line). A host about
    /// to lock that record defers to it (`host::crash`).
    pub fn recovery_intent_offset(&self) -> u64 {
        self.recovery_offset() + 8
    }

    /// Offset of the join mailbox's first word (a line of words: see `host::join`).
    pub fn join_mailbox_offset(&self) -> u64 {
        self.cursors_offset + 4 * LINE_BYTES
    }

    /// Offset of the width word: the record width's epoch (the width switches begun),
    /// whether a switch is draining the records, and who drains them (`host::width`).
    pub fn width_offset(&self) -> u64 {
        self.cursors_offset + 5 * LINE_BYTES
    }

    /// Offset of host `host`'s acknowledgement of a record width switch's freeze (on its
    /// `ltail`'s line): the width word it saw draining once none of its threads was
    /// between a look at that word and a change of a record word.
    pub fn gate_offset(&self, host: u32) -> u64 {
        self.ltail_offset(host) + 8
    }

    /// Offset of host `host`'s applied position `ltail[host]`.
    pub fn ltail_offset(&self, host: u32) -> u64 {
        debug_assert!(host < self.config.max_hosts);
        self.cursors_offset + (SHARED_CURSORS + u64::from(host)) * LINE_BYTES
    }

    /// Offset of host `host`'s entry in the host table.
    pub fn host_entry_offset(&self, host: u32) -> u64 {
        debug_assert!(host < self.config.max_hosts);
        self.host_table_offset + u64::from(host) * self.host_entry_bytes
    }

    /// Offset of host `host`'s announce word `hold` (pods with undo images).
    pub fn announce_offset(&self, host: u32, hold: u64) -> u64 {
        debug_assert!(self.config.undo_images() && hold < HOLDS_PER_HOST);
        self.host_entry_offset(host) + HOST_ENTRY_BYTES + hold * 8
    }

    /// Offset of host `host`'s undo image `hold` (a slot's bytes).
    pub fn undo_image_offset(&self, host: u32, hold: u64) -> u64 {
        debug_assert!(self.undo_bytes > 0 && hold < HOLDS_PER_HOST);
        self.undo_offset + (u64::from(host) * HOLDS_PER_HOST + hold) * self.config.slot_size_bytes
    }

    /// Offset of slot `slot`'s accessor word (the pod must have local partitions).
    pub fn accessor_offset(&self, slot: u64) -> u64 {
        debug_assert!(slot < self.slot_count && self.accessors_bytes > 0);
        self.accessors_offset + slot * ACCESSOR_BYTES
    }

    /// The most records the pod may have at any width (a switch to a width with more is
    /// refused).
    pub fn max_records(&self) -> u64 {
        max_records(&self.config)
    }

    /// Bytes of the record array.
    pub fn records_bytes(&self) -> u64 {
        self.record_count * u64::from(self.config.record_width_bits) / 8
    }

    /// Offset of record `record` (of the byte that holds it, for records narrower than a
    /// byte).
    pub fn record_offset(&self, record: u64) -> u64 {
        debug_assert!(record < self.record_count);
        self.records_offset + record * u64::from(self.config.record_width_bits) / 8
    }

    /// Offset of log entry `index` in the ring (`position % capacity`).
    pub fn log_entry_offset(&self, index: u64) -> u64 {
        debug_assert!(index < self.config.log_capacity_entries);
        self.log_offset + index * self.log_entry_bytes
    }

    /// Offset of slot `slot`.
    pub fn slot_offset(&self, slot: u64) -> u64 {
        debug_assert!(slot < self.slot_count);
        self.slots_offset + slot * self.config.slot_size_bytes
    }

    /// SCR bytes by category.
    pub fn scr_usage(&self) -> ScrUsage {
        let records_bytes = self.records_bytes();
        let rpc_bytes = u64::from(self.config.max_hosts) * self.rpc_scr_bytes_per_host;
        let used = self.cursors_bytes
            + self.host_table_bytes
            + rpc_bytes
            + self.config.app_scr_bytes
            + records_bytes
            + RECLAIMER_BYTES;
        ScrUsage {
            log_cursors_bytes: self.cursors_bytes,
            host_table_bytes: self.host_table_bytes,
            rpc_bytes,
            application_bytes: self.config.app_scr_bytes,
            records_bytes,
            reclaimer_bytes: RECLAIMER_BYTES,
            unused_bytes: self.config.scr_bytes - used,
        }
    }

    /// Where the log's entries end: a new pod's format zeroes everything below it (the
    /// header region, the SCR, the log).
    pub fn log_end(&self) -> u64 {
        self.log_offset + self.config.log_capacity_entries * self.log_entry_bytes
    }

    /// Every region as `(name, offset, bytes)`, in address order (the application's
    /// regions only when configured).
    pub fn regions(&self) -> Vec<(&'static str, u64, u64)> {
        let log_bytes = self.log_end() - self.log_offset;
        let hosts = u64::from(self.config.max_hosts);
        vec![
            ("header", 0, HEADER_REGION_BYTES),
            ("log cursors", self.cursors_offset, self.cursors_bytes),
            ("host table", self.host_table_offset, self.host_table_bytes),
            (
                "rpc SCR",
                self.rpc_scr_offset,
                hosts * self.rpc_scr_bytes_per_host,
            ),
            ("app SCR", self.app_scr_offset, self.config.app_scr_bytes),
            ("records", self.records_offset, self.records_bytes()),
            ("reclaimer", self.reclaimer_offset, RECLAIMER_BYTES),
            ("log entries", self.log_offset, log_bytes),
            ("undo images", self.undo_offset, self.undo_bytes),
            (
                "join area",
                self.join_area_offset,
                self.config.join_area_bytes,
            ),
            ("app LNR", self.app_lnr_offset, self.config.app_lnr_bytes),
            (
                "rpc LNR",
                self.rpc_lnr_offset,
                hosts * u64::from(self.config.rpc_ring_entries) * self.rpc_entry_bytes,
            ),
            ("accessors", self.accessors_offset, self.accessors_bytes),
            (
                "slots",
                self.slots_offset,
                self.slot_count * self.config.slot_size_bytes,
            ),
        ]
        .into_iter()
        .filter(|(name, _, bytes)| {
            !(name.starts_with("app")
                || name.starts_with("rpc")
                || *name == "accessors"
                || *name == "undo images"
                || *name == "join area")
                || *bytes > 0
        })
        .collect()
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "pod of {} bytes: SCR {} B at {:#x}, LNR {} B at {:#x}",
            self.total_bytes, c.scr_bytes, self.scr_offset, c.lnr_bytes, self.lnr_offset
        )?;
        for (name, offset, bytes) in self.regions() {
            writeln!(f, "  {name:<12} {offset:>#14x}  {bytes:>12} B")?;
        }
        writeln!(
            f,
            "  {} records of {} bits, {} slots of {} B, {} log entries of {} B, {} hosts, keys up to {} B",
            self.record_count,
            c.record_width_bits,
            self.slot_count,
            c.slot_size_bytes,
            c.log_capacity_entries,
            self.log_entry_bytes,
            c.max_hosts,
            c.max_key_bytes
        )
    }
}
