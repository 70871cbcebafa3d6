//! Where everything of the HCMeta schemes lives in the pod, and how much of it there is.
//!
//! The pod's application SCR holds, for each host in turn:
//!
//! ```text
//! +---------------------- share region (the SCR budget) ----------------------+-- ring words --+
//! | buckets: N words | entries: N x (record, link, inline key) | unused budget | tail|head|states|
//! +----------------------------------------------------------------------------+----------------+
//! ```
//!
//! and its application LNR, for each host in turn: the host's row slots (HCMeta: one per
//! row of its partition; HCMeta-Local: one per shareable object) and its ring's entries.
//! `N` is the number of objects the host can have shared at once.

use megalon_core::rpc::{self, RingGeometry};
use megalon_core::Layout;

use super::index::IndexGeometry;

/// Bytes of one bucket word of a CXL index.
pub(crate) const BUCKET_BYTES: u64 = 8;
/// Bytes of an index entry before its inline key: the record word and the link word.
pub(crate) const ENTRY_HEADER_BYTES: u64 = 16;

/// Words of an inline key of up to `max_key_bytes` bytes.
pub(crate) fn key_words(max_key_bytes: usize) -> u64 {
    (max_key_bytes as u64).div_ceil(8)
}

/// Bytes of one CXL index entry: record, link, inline key padded to whole words.
pub(crate) fn entry_bytes(max_key_bytes: usize) -> u64 {
    ENTRY_HEADER_BYTES + 8 * key_words(max_key_bytes)
}

/// SCR bytes one shareable object costs its owner: a bucket word, and an entry with the
/// 8-byte record, the link word and the key inline (padded to whole words).
pub fn scr_bytes_per_shared_object(max_key_bytes: usize) -> u64 {
    BUCKET_BYTES + entry_bytes(max_key_bytes)
}

/// How many objects one host can have shared at once with `scr_budget_bytes` of SCR
/// (before the cap at its partition's rows): `scr_budget_bytes /
/// scr_bytes_per_shared_object(max_key_bytes)`.
pub fn shared_objects_for_budget(scr_budget_bytes: u64, max_key_bytes: usize) -> u64 {
    scr_budget_bytes / scr_bytes_per_shared_object(max_key_bytes)
}

/// Rows of one host's partition when `keys` keys are spread over `hosts` by hash: the
/// mean, six standard deviations, and 64 more.
pub fn rows_per_host(keys: u64, hosts: usize) -> u64 {
    let mean = keys.div_ceil(hosts as u64);
    mean + 6 * (mean as f64).sqrt().ceil() as u64 + 64
}

/// The sizes every host's regions share.
#[derive(Clone, Debug)]
pub(crate) struct Sizes {
    pub(crate) object_bytes: u64,
    pub(crate) max_key_bytes: usize,
    /// Rows of each host's partition.
    pub(crate) rows_per_host: u64,
    /// Objects each host can have shared at once (index entries, records).
    pub(crate) shared_per_host: u64,
    /// SCR bytes of each host's share region (the budget, whole lines).
    pub(crate) share_region_bytes: u64,
    /// LNR slots of each host: every row (HCMeta) or every shareable object (Local).
    pub(crate) slots_per_host: u64,
    pub(crate) ring_entries: u64,
    pub(crate) ring_entry_bytes: u64,
}

impl Sizes {
    /// Bytes of the index (buckets and entries) of one host's share region.
    pub(crate) fn index_bytes(&self) -> u64 {
        self.shared_per_host * scr_bytes_per_shared_object(self.max_key_bytes)
    }

    /// SCR bytes of one host's ring: cursors, and a state word and a sender word per entry,
    /// whole lines.
    pub(crate) fn ring_scr_bytes(&self) -> u64 {
        rpc::scr_bytes(self.ring_entries)
    }

    /// SCR bytes of one host.
    pub(crate) fn scr_per_host(&self) -> u64 {
        self.share_region_bytes + self.ring_scr_bytes()
    }

    /// LNR bytes of one host.
    pub(crate) fn lnr_per_host(&self) -> u64 {
        self.slots_per_host * self.object_bytes + self.ring_entries * self.ring_entry_bytes
    }

    /// Where host `host`'s parts are in a pod laid out as `layout`.
    pub(crate) fn host(&self, layout: &Layout, host: usize) -> HostGeometry {
        let host = host as u64;
        let scr = layout.app_scr_offset + host * self.scr_per_host();
        let lnr = layout.app_lnr_offset + host * self.lnr_per_host();
        let buckets = self.shared_per_host;
        let index = IndexGeometry {
            buckets_offset: scr,
            entries_offset: scr + buckets * BUCKET_BYTES,
            entries: buckets,
            entry_bytes: entry_bytes(self.max_key_bytes),
            key_words: key_words(self.max_key_bytes),
        };
        let ring_scr = scr + self.share_region_bytes;
        let ring = RingGeometry::new(
            ring_scr,
            lnr + self.slots_per_host * self.object_bytes,
            self.ring_entries,
            self.ring_entry_bytes,
        );
        HostGeometry {
            index,
            ring,
            slots_offset: lnr,
            app_lnr_offset: layout.app_lnr_offset,
        }
    }
}

/// One host's parts, as offsets in the pod.
#[derive(Clone, Debug)]
pub(crate) struct HostGeometry {
    pub(crate) index: IndexGeometry,
    pub(crate) ring: RingGeometry,
    /// The host's first LNR slot.
    pub(crate) slots_offset: u64,
    /// The application LNR's start: records hold slot offsets in lines from here.
    pub(crate) app_lnr_offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_object_costs_a_bucket_a_record_a_link_and_its_key() {
        assert_eq!(scr_bytes_per_shared_object(8), 8 + 8 + 8 + 8);
        assert_eq!(scr_bytes_per_shared_object(24), 8 + 8 + 8 + 24);
        assert_eq!(scr_bytes_per_shared_object(25), 8 + 8 + 8 + 32);
        assert_eq!(shared_objects_for_budget(48 * 1000, 24), 1000);
    }
}
