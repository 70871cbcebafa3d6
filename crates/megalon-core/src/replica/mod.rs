//! The replica: one host's copy of the index, in its own DRAM, changed only by replay.
//!
//! The index maps a key to its object: slot, record (if read-write-shared), stamp (log
//! position of the last event about it) and this host's host counter (the record counter
//! it last read validly, or unknown).
//!
//! Memory matters here: every host holds every object. Entries live in a chunked arena
//! of 64-bit words (three words of fields, then the key, padded to a word), and the hash
//! table holds only a 4-byte handle into the arena. With 24-byte keys an object costs 48
//! arena bytes plus 5 table bytes per bucket; `docs/log.md` has the measurement.
//!
//! Arena record (64-bit words, little-endian packing of the key):
//!
//! | word | field |
//! | --- | --- |
//! | 0 | stamp |
//! | 1 | slot (low half), record id or `NO_RECORD` (high half) |
//! | 2 | host counter (low half; `UNKNOWN_COUNTER` or a counter), key length (bits 32..48), local owner + 1 (48..64; 0: in its CXL slot) |
//! | 3.. | key bytes, eight per word, zero-padded |
//!
//! Only the host counter is written under the read lock (by readers, after checking the
//! stamp); they rewrite word 2 whole, with the key length and owner they read from it,
//! which only the write lock changes.
//!
//! In a pod with [`Coherence::AllLog`] a record has one more word after the key: the
//! object's replicated lock, its counter (low half) and its holder + 1 (bits 32..40; 0:
//! unlocked), changed only by replaying `Lock` and `Unlock` events. Split pods do not
//! have the word, so their records, lookups and memory per object are unchanged.

use crate::ids::HostId;

mod apply;
mod arena;
mod index;
mod snapshot;
#[cfg(test)]
mod tests;

pub use apply::Outcome;
pub(crate) use index::Index;
pub use index::{IndexEntry, ReplicatedLock};

/// One host's replica: the index, how far it has applied the log, and the replayer's
/// state (one replayer at a time).
#[derive(Debug)]
pub(crate) struct Replica {
    pub(crate) index: crate::sync::RwLock<Index>,
    /// Log positions below this are applied (this host's copy of its `ltail`).
    pub(crate) applied: crate::sync::AtomicU64,
    pub(crate) replay: crate::sync::Mutex<ReplayState>,
}

/// What the replayer keeps between rounds.
#[derive(Debug)]
pub(crate) struct ReplayState {
    /// One entry's bytes.
    pub(crate) entry: Vec<u8>,
    /// Outcomes of this host's own entries, by position, until its appender takes them.
    pub(crate) outcomes: std::collections::HashMap<u64, Outcome>,
    /// Slots this host must grant: `(to, count)`.
    pub(crate) grants: Vec<(HostId, u64)>,
}

impl Replica {
    pub(crate) fn new(index: Index, entry_bytes: usize) -> Self {
        Self {
            index: crate::sync::RwLock::new(index),
            applied: crate::sync::AtomicU64::new(0),
            replay: crate::sync::Mutex::new(ReplayState {
                entry: vec![0; entry_bytes],
                outcomes: std::collections::HashMap::new(),
                grants: Vec::new(),
            }),
        }
    }
}
