//! The pod's configuration: every size fixed at creation, with its limits.

use crate::error::{Error, Result};
use crate::limits::*;

/// How the hosts of a pod keep objects coherent: a pod-level mode, fixed at creation and
/// stored in the header, because every host must follow the same protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Coherence {
    /// megalon: the index is replicated through the log, while locks and counters live in
    /// coherence records in the SCR, allocated only for objects that are written.
    #[default]
    Split,
    /// The AllLog variant (the paper's section 6.10): no coherence records at all; every
    /// object's lock holder and counter are part of the replicated index, and every lock
    /// and unlock is a log event that every host replays. The baseline that shows what
    /// the split saves.
    AllLog,
}

impl Coherence {
    /// The value stored in the pod header.
    pub fn to_u32(self) -> u32 {
        match self {
            Coherence::Split => 0,
            Coherence::AllLog => 1,
        }
    }

    /// The mode a header value names, if any.
    pub fn from_u32(value: u32) -> Option<Coherence> {
        match value {
            0 => Some(Coherence::Split),
            1 => Some(Coherence::AllLog),
            _ => None,
        }
    }

    /// A short name for reports: `"split"` or `"all-log"`.
    pub fn name(self) -> &'static str {
        match self {
            Coherence::Split => "split",
            Coherence::AllLog => "all-log",
        }
    }
}

/// What a pod keeps so that a host may die in the middle of a write (see the crate's
/// failure model). Fixed at creation and stored in the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CrashSafety {
    /// Chosen by the backing when the pod is created: [`CrashSafety::Undo`] for a file or
    /// a DAX device (pods shared by processes, any of which may be killed),
    /// [`CrashSafety::Off`] for an in-process pod (its hosts die together). A
    /// [`Layout`](crate::Layout) computed from this value counts it as `Off` (an
    /// in-process pod's): size a device with [`PodConfig::resolved_for`] its backing.
    #[default]
    Auto,
    /// Every write keeps an undo image of its object (in a per-host area of LNR) before
    /// its first byte changes, and every record lock is announced in its holder's row of
    /// the host table: a host that dies mid-write leaves the last complete value, which
    /// recovery restores and unlocks.
    Undo,
    /// No undo images and no announced locks: a host that dies holding a record lock
    /// leaves that object locked (its reads and writes answer
    /// [`Error::RecordBusy`]). One that died while it copied an object from its DRAM back
    /// to CXL (local partitions) would leave that object with part of each value, so a pod
    /// in a file or on a device (whose processes die one by one) cannot have both
    /// ([`Error::NeedsUndoImages`]). The pod itself survives (log, host table,
    /// reservations), as with `Undo`.
    Off,
}

impl CrashSafety {
    /// The value stored in the pod header.
    pub fn to_u32(self) -> u32 {
        match self {
            CrashSafety::Auto => 0,
            CrashSafety::Undo => 1,
            CrashSafety::Off => 2,
        }
    }

    /// The value a header value names, if any.
    pub fn from_u32(value: u32) -> Option<CrashSafety> {
        match value {
            0 => Some(CrashSafety::Auto),
            1 => Some(CrashSafety::Undo),
            2 => Some(CrashSafety::Off),
            _ => None,
        }
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CrashSafety::Auto => "auto",
            CrashSafety::Undo => "undo",
            CrashSafety::Off => "off",
        }
    }
}

/// The sizes of a pod, fixed when it is created; a builder.
///
/// ```
/// use megalon_core::{Layout, PodConfig};
/// let config = PodConfig::new()
///     .scr_bytes(1 << 20)
///     .lnr_bytes(64 << 20)
///     .slot_size_bytes(1024)
///     .record_width_bits(16)
///     .max_hosts(4);
/// let layout = Layout::new(&config)?;
/// assert!(layout.slot_count > 0);
/// # Ok::<(), megalon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodConfig {
    /// Bytes of the small coherent region (multiple of [`PAGE_BYTES`]). What the log
    /// cursors and host table leave is filled with coherence records.
    pub scr_bytes: u64,
    /// Bytes of the large non-coherent region (multiple of [`PAGE_BYTES`]). What the log
    /// leaves is cut into slots.
    pub lnr_bytes: u64,
    /// Bytes of one object slot (multiple of [`LINE_BYTES`]).
    pub slot_size_bytes: u64,
    /// Longest key, in bytes (at most [`MAX_KEY_BYTES_LIMIT`]).
    pub max_key_bytes: u32,
    /// Entries in the log's ring (at least [`MIN_LOG_CAPACITY_ENTRIES`]).
    pub log_capacity_entries: u64,
    /// Bits of one coherence record: 2, 4, 8, 16 or 32 (narrower records share a byte;
    /// a 4-bit record's counter wraps every second write, a 2-bit record has none).
    pub record_width_bits: u32,
    /// Hosts the host table holds (at most [`MAX_HOSTS_LIMIT`]).
    pub max_hosts: u32,
    /// SCR bytes reserved for the application (a multiple of [`LINE_BYTES`], 0 for none),
    /// at [`Layout::app_scr_offset`](crate::Layout::app_scr_offset): coherent words that
    /// every host reads and updates atomically with [`Pod::scr_u64`](crate::Pod::scr_u64).
    /// The page cache keeps a dirty bit per record there. Taken from what would be
    /// records.
    pub app_scr_bytes: u64,
    /// LNR bytes reserved for the application (a multiple of [`LINE_BYTES`], 0 for none),
    /// at [`Layout::app_lnr_offset`](crate::Layout::app_lnr_offset): non-coherent memory
    /// reached through [`Memory`](crate::Memory) with its flush rules. The page cache keeps
    /// its access counts there. Taken from what would be slots.
    pub app_lnr_bytes: u64,
    /// How hosts keep objects coherent: [`Coherence::Split`] (megalon, the default) or
    /// [`Coherence::AllLog`] (the baseline with every lock and unlock in the log).
    pub coherence: Coherence,
    /// Local DRAM partitions (the paper's section 3.5.2): after this many consecutive
    /// accesses from one host, an object moves to that host's DRAM, and another host that
    /// needs it asks the holder by RPC to move it back. 0 (the default): off. Needs split
    /// coherence and RPC rings ([`PodConfig::rpc_ring_entries`]).
    pub partition_after_accesses: u32,
    /// Local data copies (the paper's section 3.5.3): after this many reads of a
    /// read-shared object from one host, that host keeps a copy in its DRAM and reads it
    /// there until a write (or any other event about the object) invalidates it through
    /// the log. 0 (the default): off. Needs split coherence.
    pub copy_after_reads: u32,
    /// Entries of each host's RPC ring (state words in SCR, entries in LNR); 0 (the
    /// default): the pod has no rings.
    pub rpc_ring_entries: u32,
    /// How long a host on another machine may go without renewing its lease (its
    /// heartbeat in the host table) before any live host declares it dead and recovers
    /// what it held. A host on this machine is declared dead as soon as its process is
    /// gone. Default 2000 ms.
    pub lease_ms: u32,
    /// What the pod keeps so that a host can die mid-write: [`CrashSafety::Auto`] (the
    /// default) decides by the backing.
    pub crash_safety: CrashSafety,
    /// Bytes of LNR through which a live host streams its index to a host that joins
    /// after the log has recycled its first entries (a multiple of [`LINE_BYTES`]; default
    /// [`DEFAULT_JOIN_AREA_BYTES`]). 0: no late joins; such a join answers
    /// [`Error::LogRecycled`].
    pub join_area_bytes: u64,
    /// Whether the record width may change at run time
    /// ([`Host::switch_record_width`](crate::Host::switch_record_width), or the hosts'
    /// pumps: [`HostOptions::width_policy`](crate::HostOptions#structfield.width_policy)).
    /// Every change of a record word that takes a record (a write's or a delete's lock, a
    /// claim, a deallocation) then passes the host's gate, so that a switch can freeze the
    /// record array: a few DRAM accesses while no switch goes on (a load of the width
    /// word in the SCR on a host without a pump, whose gates acknowledge a switch), and a
    /// load of the width word in the SCR once a switch has gone by. With undo images, a
    /// switch also waits until no lock or claim is announced (a dead host's until its
    /// recovery has settled it). Needs split coherence and no local partitions. Default
    /// off.
    pub record_width_switch: bool,
}

impl Default for PodConfig {
    fn default() -> Self {
        Self {
            scr_bytes: 1 << 20,
            lnr_bytes: 64 << 20,
            slot_size_bytes: 1024,
            max_key_bytes: 64,
            log_capacity_entries: 4096,
            record_width_bits: 32,
            max_hosts: 8,
            app_scr_bytes: 0,
            app_lnr_bytes: 0,
            coherence: Coherence::Split,
            partition_after_accesses: 0,
            copy_after_reads: 0,
            rpc_ring_entries: 0,
            lease_ms: DEFAULT_LEASE_MS,
            crash_safety: CrashSafety::Auto,
            join_area_bytes: DEFAULT_JOIN_AREA_BYTES,
            record_width_switch: false,
        }
    }
}

/// Builder setters for a config struct's plain fields: `setters! { Type: field: type, ... }`
/// writes `pub fn field(mut self, value: type) -> Self` for each, documented as setting
/// `Type::field`; doc lines written before a field are added to its setter's.
#[doc(hidden)]
#[macro_export]
macro_rules! setters {
    ($owner:ident: $($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets [`", stringify!($owner), "::", stringify!($name), "`].")]
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$name = value;
                self
            }
        )*
    };
}

impl PodConfig {
    /// The defaults: 1 MiB SCR, 64 MiB LNR, 1 KiB slots, 64-byte keys, 4096 log entries,
    /// 32-bit records, 8 hosts, split coherence.
    pub fn new() -> Self {
        Self::default()
    }

    crate::setters! { PodConfig:
        scr_bytes: u64,
        lnr_bytes: u64,
        slot_size_bytes: u64,
        max_key_bytes: u32,
        log_capacity_entries: u64,
        record_width_bits: u32,
        max_hosts: u32,
        app_scr_bytes: u64,
        app_lnr_bytes: u64,
        coherence: Coherence,
        /// 0: local copies off.
        copy_after_reads: u32,
        /// 0: no RPC rings.
        rpc_ring_entries: u32,
        lease_ms: u32,
        crash_safety: CrashSafety,
        /// 0: no late joins.
        join_area_bytes: u64,
        record_width_switch: bool,
    }

    /// Whether writes keep undo images and announce their locks: [`CrashSafety::Undo`]
    /// (`Auto` counts as `Off` until [`PodConfig::resolved_for`] decides it).
    pub fn undo_images(&self) -> bool {
        self.crash_safety == CrashSafety::Undo
    }

    /// This config with [`CrashSafety::Auto`] decided for a pod on `backing`: `Undo` for
    /// a file or a DAX device, `Off` on the heap.
    pub fn resolved_for(&self, backing: &crate::Backing) -> PodConfig {
        let mut config = self.clone();
        if config.crash_safety == CrashSafety::Auto {
            config.crash_safety = if backing.is_shared() {
                CrashSafety::Undo
            } else {
                CrashSafety::Off
            };
        }
        config
    }

    /// Turns local DRAM partitions on: an object moves to a host's DRAM after
    /// `accesses` consecutive accesses from it ([`DEFAULT_PARTITION_ACCESSES`] is the
    /// paper's choice); 0 turns them off. Gives the pod RPC rings of
    /// [`DEFAULT_RPC_RING_ENTRIES`] entries if it has none: moving an object back is an
    /// RPC to the host that holds it.
    ///
    /// A host that dies loses the writes it made to objects in its DRAM since they moved
    /// there: its recovery hands them back to CXL as they were when they moved.
    #[must_use]
    pub fn local_partitions(mut self, accesses: u32) -> Self {
        self.partition_after_accesses = accesses;
        if accesses > 0 && self.rpc_ring_entries == 0 {
            self.rpc_ring_entries = DEFAULT_RPC_RING_ENTRIES;
        }
        self
    }

    /// Turns local data copies on: a host keeps a copy of a read-shared object after
    /// `reads` reads of it; 0 turns them off. The same as
    /// [`PodConfig::copy_after_reads`].
    #[must_use]
    pub fn local_copies(self, reads: u32) -> Self {
        self.copy_after_reads(reads)
    }

    /// Bytes of one log entry: its header and the longest key, rounded up to whole lines.
    pub fn log_entry_bytes(&self) -> u64 {
        (LOG_ENTRY_HEADER_BYTES + u64::from(self.max_key_bytes)).div_ceil(LINE_BYTES) * LINE_BYTES
    }

    /// Checks every parameter against its limit, alone (not whether they fit together).
    // Over 70 lines on purpose: One check per field, in the order of the fields: a flat list
    // a reader can scan.
    pub(crate) fn validate(&self) -> Result<()> {
        for (parameter, value) in [
            ("scr_bytes", self.scr_bytes),
            ("lnr_bytes", self.lnr_bytes),
            ("slot_size_bytes", self.slot_size_bytes),
            ("max_key_bytes", u64::from(self.max_key_bytes)),
            ("log_capacity_entries", self.log_capacity_entries),
            ("max_hosts", u64::from(self.max_hosts)),
        ] {
            if value == 0 {
                return Err(Error::ZeroSize { parameter });
            }
        }
        for (parameter, value) in [("scr_bytes", self.scr_bytes), ("lnr_bytes", self.lnr_bytes)] {
            if !value.is_multiple_of(PAGE_BYTES) {
                return Err(Error::UnalignedSize {
                    parameter,
                    value,
                    alignment: PAGE_BYTES,
                });
            }
        }
        for (parameter, value) in [
            ("app_scr_bytes", self.app_scr_bytes),
            ("app_lnr_bytes", self.app_lnr_bytes),
            ("join_area_bytes", self.join_area_bytes),
        ] {
            if !value.is_multiple_of(LINE_BYTES) {
                return Err(Error::UnalignedSize {
                    parameter,
                    value,
                    alignment: LINE_BYTES,
                });
            }
        }
        if !self.slot_size_bytes.is_multiple_of(LINE_BYTES) {
            return Err(Error::SlotSizeNotLineMultiple {
                slot_size_bytes: self.slot_size_bytes,
            });
        }
        if self.join_area_bytes > MAX_JOIN_AREA_BYTES {
            return Err(Error::AboveLimit {
                parameter: "join_area_bytes",
                value: self.join_area_bytes,
                limit: MAX_JOIN_AREA_BYTES,
            });
        }
        if self.slot_size_bytes > MAX_SLOT_SIZE_BYTES {
            return Err(Error::AboveLimit {
                parameter: "slot_size_bytes",
                value: self.slot_size_bytes,
                limit: MAX_SLOT_SIZE_BYTES,
            });
        }
        if self.max_key_bytes > MAX_KEY_BYTES_LIMIT {
            return Err(Error::AboveLimit {
                parameter: "max_key_bytes",
                value: u64::from(self.max_key_bytes),
                limit: u64::from(MAX_KEY_BYTES_LIMIT),
            });
        }
        if self.log_capacity_entries < MIN_LOG_CAPACITY_ENTRIES {
            return Err(Error::BelowMinimum {
                parameter: "log_capacity_entries",
                value: self.log_capacity_entries,
                minimum: MIN_LOG_CAPACITY_ENTRIES,
            });
        }
        if self.lease_ms < MIN_LEASE_MS {
            return Err(Error::BelowMinimum {
                parameter: "lease_ms",
                value: self.lease_ms.into(),
                minimum: MIN_LEASE_MS.into(),
            });
        }
        if !RECORD_WIDTHS_BITS.contains(&self.record_width_bits) {
            return Err(Error::UnsupportedRecordWidth {
                bits: self.record_width_bits,
            });
        }
        if self.max_hosts > MAX_HOSTS_LIMIT {
            return Err(Error::TooManyHosts {
                requested: self.max_hosts,
                limit: MAX_HOSTS_LIMIT,
            });
        }
        if self.coherence != Coherence::Split {
            for (parameter, value) in [
                ("partition_after_accesses", self.partition_after_accesses),
                ("copy_after_reads", self.copy_after_reads),
            ] {
                if value > 0 {
                    return Err(Error::NeedsSplitCoherence { parameter });
                }
            }
        }
        if self.record_width_switch {
            if self.coherence != Coherence::Split {
                return Err(Error::NeedsSplitCoherence {
                    parameter: "record_width_switch",
                });
            }
            if self.partition_after_accesses > 0 {
                return Err(Error::NotWithWidthSwitch {
                    parameter: "partition_after_accesses",
                });
            }
        }
        if self.partition_after_accesses > 0 && self.rpc_ring_entries == 0 {
            return Err(Error::BelowMinimum {
                parameter: "rpc_ring_entries",
                value: 0,
                minimum: 1,
            });
        }
        // Counts of accesses are kept in a byte per slot.
        for (parameter, value) in [
            ("partition_after_accesses", self.partition_after_accesses),
            ("copy_after_reads", self.copy_after_reads),
        ] {
            if value > u32::from(u8::MAX) {
                return Err(Error::AboveLimit {
                    parameter,
                    value: value.into(),
                    limit: u8::MAX.into(),
                });
            }
        }
        Ok(())
    }

    /// The first parameter that differs from `other`, as `(name, self's, other's)`.
    #[cfg_attr(megalon_loom, allow(dead_code))]
    pub(crate) fn first_difference(&self, other: &PodConfig) -> Option<(&'static str, u64, u64)> {
        self.parameters()
            .into_iter()
            .zip(other.parameters())
            // `Auto` crash safety (asked for) matches whatever the backing chose.
            .find(|((name, a), (_, b))| {
                a != b && !(*name == "crash_safety" && (*a == 0 || *b == 0))
            })
            .map(|((name, a), (_, b))| (name, a, b))
    }

    /// Every parameter, named, as a number.
    #[cfg_attr(megalon_loom, allow(dead_code))]
    fn parameters(&self) -> [(&'static str, u64); 17] {
        [
            ("scr_bytes", self.scr_bytes),
            ("lnr_bytes", self.lnr_bytes),
            ("slot_size_bytes", self.slot_size_bytes),
            ("max_key_bytes", self.max_key_bytes.into()),
            ("log_capacity_entries", self.log_capacity_entries),
            ("record_width_bits", self.record_width_bits.into()),
            ("max_hosts", self.max_hosts.into()),
            ("app_scr_bytes", self.app_scr_bytes),
            ("app_lnr_bytes", self.app_lnr_bytes),
            ("coherence", self.coherence.to_u32().into()),
            (
                "partition_after_accesses",
                self.partition_after_accesses.into(),
            ),
            ("copy_after_reads", self.copy_after_reads.into()),
            ("rpc_ring_entries", self.rpc_ring_entries.into()),
            ("lease_ms", self.lease_ms.into()),
            ("crash_safety", self.crash_safety.to_u32().into()),
            ("join_area_bytes", self.join_area_bytes),
            ("record_width_switch", self.record_width_switch.into()),
        ]
    }
}
