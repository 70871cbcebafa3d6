//! Coherence records: one word per read-write-shared object in the SCR record array.
//!
//! A record of `W` bits (8, 16 or 32) holds, from the top: the in-use bit (the "free bit"
//! of DESIGN section 7, inverted so that a zeroed SCR means every record is free), the
//! lock bit, and a counter of `W - 2` bits. The counter is odd while a write is in
//! progress. A record keeps its counter across owners: the log's alloc event makes every
//! host's host counter for the new owner unknown, so an old value means nothing.
//!
//! Transitions (each one CAS or store on the word; readers never write it):
//!
//! | from | to | by |
//! | --- | --- | --- |
//! | free, c | in use, c | allocation (claim, then the alloc event) |
//! | in use, c even | in use + lock, c + 1 | `write_start` |
//! | in use + lock, c + 1 | in use, c + 2 (mod 2^(W-2)) | `write_end` (a wrap event first if it wraps) |
//! | in use + lock, c + 1 | in use, c | `write_start` backing out (an event arrived) |
//! | in use, c even | in use + lock, c | deallocation or delete (then the event) |
//! | in use + lock, c | free, c | after the dealloc or delete event is applied |
//! | in use, c | free, c | an allocation that lost its race in the log |

use crate::pod::Pod;
use crate::sync::Ordering;

/// The record array of one pod, by width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Records<'p> {
    pod: &'p Pod,
    width_bits: u32,
    offset: u64,
    count: u64,
}

/// A record word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordWord {
    pub(crate) in_use: bool,
    pub(crate) locked: bool,
    pub(crate) counter: u32,
}

impl<'p> Records<'p> {
    pub(crate) fn new(pod: &'p Pod) -> Self {
        let layout = pod.layout();
        Self {
            pod,
            width_bits: layout.config.record_width_bits,
            offset: layout.records_offset,
            count: layout.record_count,
        }
    }

    /// Records in the array.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    fn in_use_bit(&self) -> u32 {
        1 << (self.width_bits - 1)
    }

    fn lock_bit(&self) -> u32 {
        1 << (self.width_bits - 2)
    }

    /// The largest counter value (`2^(W-2) - 1`).
    pub(crate) fn counter_mask(&self) -> u32 {
        self.lock_bit() - 1
    }

    pub(crate) fn decode(&self, raw: u32) -> RecordWord {
        RecordWord {
            in_use: raw & self.in_use_bit() != 0,
            locked: raw & self.lock_bit() != 0,
            counter: raw & self.counter_mask(),
        }
    }

    pub(crate) fn encode(&self, word: RecordWord) -> u32 {
        debug_assert!(word.counter <= self.counter_mask());
        (if word.in_use { self.in_use_bit() } else { 0 })
            | (if word.locked { self.lock_bit() } else { 0 })
            | word.counter
    }

    fn byte_offset(&self, record: u32) -> u64 {
        assert!(
            u64::from(record) < self.count,
            "record {record} past the array"
        );
        self.offset + u64::from(record) * u64::from(self.width_bits / 8)
    }

    /// Loads record `record` (Acquire: pairs with the Release of every store and CAS
    /// below, so a reader that sees a counter sees the object bytes written before it).
    pub(crate) fn load(&self, record: u32) -> RecordWord {
        let at = self.byte_offset(record);
        let raw = match self.width_bits {
            8 => u32::from(self.pod.scr_u8(at).load(Ordering::Acquire)),
            16 => u32::from(self.pod.scr_u16(at).load(Ordering::Acquire)),
            _ => self.pod.scr_u32(at).load(Ordering::Acquire),
        };
        self.decode(raw)
    }

    /// Replaces `current` with `new` if the record still holds `current` (AcqRel).
    pub(crate) fn compare_exchange(
        &self,
        record: u32,
        current: RecordWord,
        new: RecordWord,
    ) -> Result<(), RecordWord> {
        let at = self.byte_offset(record);
        let (current, new) = (self.encode(current), self.encode(new));
        let result = match self.width_bits {
            8 => self
                .pod
                .scr_u8(at)
                .compare_exchange(
                    current as u8,
                    new as u8,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .map(u32::from)
                .map_err(u32::from),
            16 => self
                .pod
                .scr_u16(at)
                .compare_exchange(
                    current as u16,
                    new as u16,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .map(u32::from)
                .map_err(u32::from),
            _ => self.pod.scr_u32(at).compare_exchange(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ),
        };
        result.map(drop).map_err(|raw| self.decode(raw))
    }

    /// Stores `word` (Release: the writer's write-back and fence come before it).
    pub(crate) fn store(&self, record: u32, word: RecordWord) {
        let at = self.byte_offset(record);
        let raw = self.encode(word);
        match self.width_bits {
            8 => self.pod.scr_u8(at).store(raw as u8, Ordering::Release),
            16 => self.pod.scr_u16(at).store(raw as u16, Ordering::Release),
            _ => self.pod.scr_u32(at).store(raw, Ordering::Release),
        }
    }
}
