//! The pod header: magic, layout version, every parameter, and a checksum over them.
//!
//! Stored little-endian at offset 0, field by field, so a pod made on one host reads the
//! same on every other. The checksum is FNV-1a (64-bit) over every byte before it: each
//! step of FNV-1a is a bijection of the running hash, so changing any single byte always
//! changes the checksum.

use std::path::Path;

use crate::config::{Coherence, CrashSafety, PodConfig};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::limits::*;
use crate::words::{u32_at, u64_at};

const _: () = assert!(HEADER_BYTES as u64 <= HEADER_REGION_BYTES);

/// The header as stored (`#[repr(C)]`, fixed-width fields, little-endian on disk).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub layout_version: u32,
    /// Bytes reserved for the header region.
    pub header_region_bytes: u32,
    /// Bytes the whole pod needs.
    pub total_bytes: u64,
    /// [`PodConfig::scr_bytes`].
    pub scr_bytes: u64,
    /// [`PodConfig::lnr_bytes`].
    pub lnr_bytes: u64,
    /// [`PodConfig::slot_size_bytes`].
    pub slot_size_bytes: u64,
    /// [`PodConfig::log_capacity_entries`].
    pub log_capacity_entries: u64,
    /// [`PodConfig::max_key_bytes`].
    pub max_key_bytes: u32,
    /// [`PodConfig::record_width_bits`].
    pub record_width_bits: u32,
    /// [`PodConfig::max_hosts`].
    pub max_hosts: u32,
    /// Bytes of one log entry (derived; stored so a reader can check it).
    pub log_entry_bytes: u32,
    /// [`crate::limits::LOG_FORMAT_VERSION`]: the format and meaning of log entries.
    pub log_format_version: u32,
    /// [`PodConfig::coherence`], as [`Coherence::to_u32`] stores it.
    pub coherence: u32,
    /// [`PodConfig::app_scr_bytes`].
    pub app_scr_bytes: u64,
    /// [`PodConfig::app_lnr_bytes`].
    pub app_lnr_bytes: u64,
    /// [`PodConfig::partition_after_accesses`].
    pub partition_after_accesses: u32,
    /// [`PodConfig::copy_after_reads`].
    pub copy_after_reads: u32,
    /// [`PodConfig::rpc_ring_entries`].
    pub rpc_ring_entries: u32,
    /// [`PodConfig::crash_safety`], as [`CrashSafety::to_u32`] stores it (never `Auto`:
    /// the pod's creation decides it).
    pub crash_safety: u32,
    /// [`PodConfig::lease_ms`].
    pub lease_ms: u32,
    /// [`PodConfig::join_area_bytes`], in lines.
    pub join_area_lines: u32,
    /// [`PodConfig::record_width_switch`]: 1 if the record width may change at run time.
    pub record_width_switch: u32,
    /// Zero (keeps the checksum on an 8-byte boundary).
    pub reserved: u32,
    /// FNV-1a of the 128 bytes before it.
    pub checksum: u64,
}

const _: () = assert!(std::mem::size_of::<PodHeader>() == HEADER_BYTES);
const _: () = assert!(std::mem::align_of::<PodHeader>() == 8);

/// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl PodHeader {
    /// The header of a pod with this layout.
    pub fn new(layout: &Layout) -> Self {
        let c = &layout.config;
        let mut header = PodHeader {
            magic: MAGIC,
            layout_version: LAYOUT_VERSION,
            header_region_bytes: HEADER_REGION_BYTES as u32,
            total_bytes: layout.total_bytes,
            scr_bytes: c.scr_bytes,
            lnr_bytes: c.lnr_bytes,
            slot_size_bytes: c.slot_size_bytes,
            log_capacity_entries: c.log_capacity_entries,
            max_key_bytes: c.max_key_bytes,
            record_width_bits: c.record_width_bits,
            max_hosts: c.max_hosts,
            log_entry_bytes: layout.log_entry_bytes as u32,
            log_format_version: LOG_FORMAT_VERSION,
            coherence: c.coherence.to_u32(),
            app_scr_bytes: c.app_scr_bytes,
            app_lnr_bytes: c.app_lnr_bytes,
            partition_after_accesses: c.partition_after_accesses,
            copy_after_reads: c.copy_after_reads,
            rpc_ring_entries: c.rpc_ring_entries,
            crash_safety: c.crash_safety.to_u32(),
            lease_ms: c.lease_ms,
            join_area_lines: (c.join_area_bytes / LINE_BYTES) as u32,
            record_width_switch: u32::from(c.record_width_switch),
            reserved: 0,
            checksum: 0,
        };
        header.checksum = fnv1a64(&header.encode()[..HEADER_BYTES - 8]);
        header
    }

    /// The configuration the header describes. (A coherence value no build writes reads
    /// as the default; [`PodHeader::decode`] refuses such a header.)
    pub fn config(&self) -> PodConfig {
        PodConfig {
            scr_bytes: self.scr_bytes,
            lnr_bytes: self.lnr_bytes,
            slot_size_bytes: self.slot_size_bytes,
            max_key_bytes: self.max_key_bytes,
            log_capacity_entries: self.log_capacity_entries,
            record_width_bits: self.record_width_bits,
            max_hosts: self.max_hosts,
            app_scr_bytes: self.app_scr_bytes,
            app_lnr_bytes: self.app_lnr_bytes,
            coherence: Coherence::from_u32(self.coherence).unwrap_or_default(),
            partition_after_accesses: self.partition_after_accesses,
            copy_after_reads: self.copy_after_reads,
            rpc_ring_entries: self.rpc_ring_entries,
            lease_ms: self.lease_ms,
            crash_safety: CrashSafety::from_u32(self.crash_safety).unwrap_or_default(),
            join_area_bytes: u64::from(self.join_area_lines) * LINE_BYTES,
            record_width_switch: self.record_width_switch != 0,
        }
    }

    /// The stored bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&self.magic.to_le_bytes());
        put(&self.layout_version.to_le_bytes());
        put(&self.header_region_bytes.to_le_bytes());
        put(&self.total_bytes.to_le_bytes());
        put(&self.scr_bytes.to_le_bytes());
        put(&self.lnr_bytes.to_le_bytes());
        put(&self.slot_size_bytes.to_le_bytes());
        put(&self.log_capacity_entries.to_le_bytes());
        put(&self.max_key_bytes.to_le_bytes());
        put(&self.record_width_bits.to_le_bytes());
        put(&self.max_hosts.to_le_bytes());
        put(&self.log_entry_bytes.to_le_bytes());
        put(&self.log_format_version.to_le_bytes());
        put(&self.coherence.to_le_bytes());
        put(&self.app_scr_bytes.to_le_bytes());
        put(&self.app_lnr_bytes.to_le_bytes());
        put(&self.partition_after_accesses.to_le_bytes());
        put(&self.copy_after_reads.to_le_bytes());
        put(&self.rpc_ring_entries.to_le_bytes());
        put(&self.crash_safety.to_le_bytes());
        put(&self.lease_ms.to_le_bytes());
        put(&self.join_area_lines.to_le_bytes());
        put(&self.record_width_switch.to_le_bytes());
        put(&self.reserved.to_le_bytes());
        put(&self.checksum.to_le_bytes());
        debug_assert_eq!(at, HEADER_BYTES);
        out
    }

    /// Parses and checks stored bytes: magic, then version, then checksum, then that the
    /// fields describe a valid layout that agrees with the derived fields. `path` names
    /// the pod in errors. Returns the header and its layout.
    // Over 70 lines on purpose: Field by field, in the header's byte order: split up, the
    // offsets would no longer read as one table.
    pub fn decode(bytes: &[u8; HEADER_BYTES], path: &Path) -> Result<(PodHeader, Layout)> {
        let u64_at = |at: usize| u64_at(bytes, at);
        let u32_at = |at: usize| u32_at(bytes, at);
        let header = PodHeader {
            magic: u64_at(0),
            layout_version: u32_at(8),
            header_region_bytes: u32_at(12),
            total_bytes: u64_at(16),
            scr_bytes: u64_at(24),
            lnr_bytes: u64_at(32),
            slot_size_bytes: u64_at(40),
            log_capacity_entries: u64_at(48),
            max_key_bytes: u32_at(56),
            record_width_bits: u32_at(60),
            max_hosts: u32_at(64),
            log_entry_bytes: u32_at(68),
            log_format_version: u32_at(72),
            coherence: u32_at(76),
            app_scr_bytes: u64_at(80),
            app_lnr_bytes: u64_at(88),
            partition_after_accesses: u32_at(96),
            copy_after_reads: u32_at(100),
            rpc_ring_entries: u32_at(104),
            crash_safety: u32_at(108),
            lease_ms: u32_at(112),
            join_area_lines: u32_at(116),
            record_width_switch: u32_at(120),
            reserved: u32_at(124),
            checksum: u64_at(128),
        };
        if header.magic != MAGIC {
            return Err(Error::BadMagic {
                path: path.to_owned(),
                found: header.magic,
            });
        }
        if header.layout_version != LAYOUT_VERSION {
            return Err(Error::UnknownVersion {
                path: path.to_owned(),
                found: header.layout_version,
                supported: LAYOUT_VERSION,
            });
        }
        let computed = fnv1a64(&bytes[..HEADER_BYTES - 8]);
        if computed != header.checksum {
            return Err(Error::ChecksumMismatch {
                path: path.to_owned(),
                stored: header.checksum,
                computed,
            });
        }
        if header.log_format_version != LOG_FORMAT_VERSION {
            return Err(Error::UnknownLogFormat {
                path: path.to_owned(),
                found: header.log_format_version,
                supported: LOG_FORMAT_VERSION,
            });
        }
        let invalid = |reason: Error| Error::HeaderInvalid {
            path: path.to_owned(),
            reason: Box::new(reason),
        };
        if Coherence::from_u32(header.coherence).is_none() {
            return Err(invalid(Error::UnknownCoherence {
                found: header.coherence,
            }));
        }
        if CrashSafety::from_u32(header.crash_safety).is_none_or(|c| c == CrashSafety::Auto) {
            return Err(invalid(Error::UnknownCrashSafety {
                found: header.crash_safety,
            }));
        }
        let layout = Layout::new(&header.config()).map_err(invalid)?;
        // A header whose checksum matches was written by some build of this version; its
        // derived fields must agree with what this build derives, or the two builds
        // disagree on the layout.
        let derived = PodHeader::new(&layout);
        for (parameter, in_pod, expected) in [
            (
                "header_region_bytes",
                u64::from(header.header_region_bytes),
                u64::from(derived.header_region_bytes),
            ),
            ("total_bytes", header.total_bytes, derived.total_bytes),
            (
                "log_entry_bytes",
                u64::from(header.log_entry_bytes),
                u64::from(derived.log_entry_bytes),
            ),
        ] {
            if in_pod != expected {
                return Err(invalid(Error::ParameterMismatch {
                    parameter,
                    in_pod,
                    expected,
                }));
            }
        }
        Ok((header, layout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        // From the FNV reference test suite: "" and "a".
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn magic_spells_megalon() {
        assert_eq!(&MAGIC.to_le_bytes(), b"MEGALON\0");
    }
}
