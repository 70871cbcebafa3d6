//! Coherence records: one word per read-write-shared object in the SCR record array.
//!
//! A record of `W` bits (2, 4, 8, 16 or 32) holds, from the top: the in-use bit (the
//! "free bit" of DESIGN section 7, inverted so that a zeroed SCR means every record is
//! free), the lock bit, and a counter of `W - 2` bits. The counter is odd while a write is
//! in progress. Records of 2 and 4 bits share a byte, four or two to a byte: each is read
//! from it and changed by a CAS of the whole byte that leaves the others as it found them.
//! A 2-bit record has no counter at all: a read tells a write in progress by the lock bit
//! (and waits for a delete's or a deallocation's lock too, which it cannot tell apart),
//! and every write appends a wrap event, so that a reader whose copy a whole write
//! overlapped finds it in the log. A record keeps its counter across owners: the log's alloc event makes every
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

use crate::mutants::{self, Step};
use crate::pod::Pod;
use crate::sync::Ordering;

/// The record array of one pod, by width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Records<'p> {
    pod: &'p Pod,
    width_bits: u32,
    epoch: u32,
    offset: u64,
    count: u64,
}

/// The width of a pod's records as its log has set it: the width the pod was created
/// with at epoch 0, then the width each switch
/// ([`Host::switch_record_width`](crate::Host::switch_record_width)) names, one epoch on
/// each. The record array's bytes stay the same; how many records they hold follows the
/// width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordShape {
    /// Width switches applied before it.
    pub epoch: u32,
    /// Bits per record: 2, 4, 8, 16 or 32.
    pub bits: u32,
}

impl RecordShape {
    /// The shape a pod starts with.
    pub(crate) fn initial(pod: &Pod) -> Self {
        Self {
            epoch: 0,
            bits: pod.layout().config.record_width_bits,
        }
    }

    /// As one word (the replica keeps it in an atomic).
    pub(crate) fn word(self) -> u64 {
        u64::from(self.epoch) << 32 | u64::from(self.bits)
    }

    pub(crate) fn from_word(word: u64) -> Self {
        Self {
            epoch: (word >> 32) as u32,
            bits: word as u32,
        }
    }

    /// Records in an array of `bytes` at this width (a power of two: a shift, on every
    /// read of a record).
    pub(crate) fn count_in(self, bytes: u64) -> u64 {
        (bytes * 8) >> self.bits.trailing_zeros()
    }

    /// Whether `bits` is a width a record may have.
    pub(crate) fn valid_bits(bits: u32) -> bool {
        matches!(bits, 2 | 4 | 8 | 16 | 32)
    }
}

/// A record word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordWord {
    pub(crate) in_use: bool,
    pub(crate) locked: bool,
    pub(crate) counter: u32,
}

impl<'p> Records<'p> {
    /// The array of a pod whose record width never changes
    /// ([`PodConfig::record_width_switch`](crate::PodConfig::record_width_switch) off: its
    /// paths for undo images and local partitions, which a pod that may switch has not).
    pub(crate) fn fixed(pod: &'p Pod) -> Self {
        debug_assert!(!pod.layout().config.record_width_switch);
        Self::of(pod, RecordShape::initial(pod))
    }

    /// The array as `shape` lays it out.
    pub(crate) fn of(pod: &'p Pod, shape: RecordShape) -> Self {
        let layout = pod.layout();
        Self {
            pod,
            width_bits: shape.bits,
            epoch: shape.epoch,
            offset: layout.records_offset,
            count: shape.count_in(layout.records_bytes()),
        }
    }

    /// Records in the array.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The width this handle reads records at.
    pub(crate) fn shape(&self) -> RecordShape {
        RecordShape {
            epoch: self.epoch,
            bits: self.width_bits,
        }
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
        // A 2-bit record has no counter: the protocol's arithmetic on it (an odd counter
        // while locked) is kept to its mask of 0.
        debug_assert!(self.width_bits == 2 || word.counter <= self.counter_mask());
        (if word.in_use { self.in_use_bit() } else { 0 })
            | (if word.locked { self.lock_bit() } else { 0 })
            | word.counter & self.counter_mask()
    }

    /// Whether a record has no counter (2 bits: in use and locked only). Every write of
    /// one wraps (a log event).
    pub(crate) fn counterless(&self) -> bool {
        self.width_bits == 2
    }

    /// Whether `word` may be a write in progress: its counter is odd, or, in a record
    /// without a counter, it is locked (a delete's or a deallocation's lock looks the
    /// same there).
    pub(crate) fn writing(&self, word: RecordWord) -> bool {
        !word.counter.is_multiple_of(2)
            || self.counterless() && word.locked && !mutants::skipped(Step::CounterlessLockIsAWrite)
    }

    /// Whether `word`, loaded after a read's copy, says the record still holds the
    /// version `counter` the read began at: in use, the same counter, no write in progress.
    pub(crate) fn still(&self, word: RecordWord, counter: u32) -> bool {
        word.in_use && word.counter == counter && !self.writing(word)
    }

    #[inline]
    fn byte_offset(&self, record: u32) -> u64 {
        if u64::from(record) >= self.count {
            record_past_the_array(record, self.count);
        }
        self.offset + u64::from(record) * u64::from(self.width_bits) / 8
    }

    /// Where a record narrower than a byte sits in its byte: the shift of its bits.
    fn shift(&self, record: u32) -> u32 {
        (record % (8 / self.width_bits)) * self.width_bits
    }

    /// The record's bits in its byte, as a mask.
    fn field_mask(&self) -> u8 {
        ((1u32 << self.width_bits) - 1) as u8
    }

    /// The address of the byte that holds record `record` in this process: where the CXL
    /// cost model finds its SCR line.
    #[inline]
    pub(crate) fn address(&self, record: u32) -> usize {
        self.pod.address_of(self.byte_offset(record))
    }

    /// Tells the CXL cost model this host now holds the line of the byte at `at` alone,
    /// as every store and CAS of a record word leaves it (on real hardware, whether or not
    /// a counter charges the access): other hosts' next accesses to it miss.
    #[inline]
    fn note_update(&self, at: u64) {
        #[cfg(not(megalon_loom))]
        crate::memory::cxl::note_scr_update(|| self.pod.address_of(at));
        #[cfg(megalon_loom)]
        let _ = at;
    }

    /// Loads record `record` (Acquire: pairs with the Release of every store and CAS
    /// below, so a reader that sees a counter sees the object bytes written before it).
    pub(crate) fn load(&self, record: u32) -> RecordWord {
        self.decode(self.load_raw(record))
    }

    /// [`load`](Self::load)'s bits of the record before they are decoded (the record's
    /// field, shifted down): two loads of a record give the same bits only if it holds
    /// the same word. Inline: a read's end loads its record with it.
    #[inline(always)]
    pub(crate) fn load_raw(&self, record: u32) -> u32 {
        let at = self.byte_offset(record);
        match self.width_bits {
            32 => self.pod.scr_u32(at).load(Ordering::Acquire),
            16 => u32::from(self.pod.scr_u16(at).load(Ordering::Acquire)),
            8 => u32::from(self.pod.scr_u8(at).load(Ordering::Acquire)),
            _ => {
                let byte = self.pod.scr_u8(at).load(Ordering::Acquire);
                u32::from(byte >> self.shift(record) & self.field_mask())
            }
        }
    }

    /// Replaces `current` with `new` if the record still holds `current` (AcqRel).
    pub(crate) fn compare_exchange(
        &self,
        record: u32,
        current: RecordWord,
        new: RecordWord,
    ) -> Result<(), RecordWord> {
        let at = self.byte_offset(record);
        self.note_update(at);
        let (current, new) = (self.encode(current), self.encode(new));
        // The CAS of a record that fills the atomic `$word` of type `$ty`, widened.
        macro_rules! whole {
            ($word:expr, $ty:ty) => {
                $word
                    .compare_exchange(
                        current as $ty,
                        new as $ty,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .map(u32::from)
                    .map_err(u32::from)
            };
        }
        let result = match self.width_bits {
            2 | 4 => self.compare_exchange_in_byte(record, at, current, new),
            8 => whole!(self.pod.scr_u8(at), u8),
            16 => whole!(self.pod.scr_u16(at), u16),
            _ => self.pod.scr_u32(at).compare_exchange(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ),
        };
        result.map(drop).map_err(|raw| self.decode(raw))
    }

    /// A record narrower than a byte: replaces its bits `current` with `new` by a CAS of
    /// its byte, again while only the other records of the byte changed (AcqRel, as for
    /// a whole-byte record). `Err`: the record's bits now.
    fn compare_exchange_in_byte(
        &self,
        record: u32,
        at: u64,
        current: u32,
        new: u32,
    ) -> std::result::Result<u32, u32> {
        let (shift, mask) = (self.shift(record), self.field_mask());
        let byte = self.pod.scr_u8(at);
        let mut seen = byte.load(Ordering::Acquire);
        loop {
            let field = u32::from(seen >> shift & mask);
            if field != current {
                return Err(field);
            }
            let replaced = seen & !(mask << shift) | (new as u8) << shift;
            if mutants::skipped(Step::RecordByteCasKeepsNeighbours) {
                byte.store(replaced, Ordering::Release);
                return Ok(current);
            }
            match byte.compare_exchange(seen, replaced, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(current),
                // Another record of the byte changed (or ours): look again.
                Err(now) => seen = now,
            }
        }
    }

    /// Stores zero over every record of the array, word by word at this width (zero is
    /// a free record at every width): a width switch's drain, with no record word
    /// changing meanwhile. Asks `still` before each line's words, and stops (answering
    /// `false`) once it says no: a drainer declared dead (paused past its lease) must not
    /// zero the locks of the width that followed its switch, and a loop over the whole
    /// array is a long pause of its own.
    pub(crate) fn zero_all_while(&self, still: impl Fn() -> bool) -> bool {
        let (word_bytes, words) = match self.width_bits {
            2 | 4 | 8 => (1, self.count * u64::from(self.width_bits) / 8),
            16 => (2, self.count),
            _ => (4, self.count),
        };
        for i in 0..words {
            let at = self.offset + i * word_bytes;
            if at.is_multiple_of(crate::limits::LINE_BYTES) || i == 0 {
                if !still() {
                    return false;
                }
                self.note_update(at);
            }
            match word_bytes {
                1 => self.pod.scr_u8(at).store(0, Ordering::Relaxed),
                2 => self.pod.scr_u16(at).store(0, Ordering::Relaxed),
                _ => self.pod.scr_u32(at).store(0, Ordering::Relaxed),
            }
        }
        true
    }

    /// Stores `word` (Release: the writer's write-back and fence come before it).
    pub(crate) fn store(&self, record: u32, word: RecordWord) {
        let at = self.byte_offset(record);
        self.note_update(at);
        let raw = self.encode(word);
        match self.width_bits {
            2 | 4 => {
                let (shift, mask) = (self.shift(record), self.field_mask());
                // A store of our bits only: the other record of the byte is left alone.
                let _ = self.pod.scr_u8(at).fetch_update(
                    Ordering::Release,
                    Ordering::Relaxed,
                    |seen| Some(seen & !(mask << shift) | (raw as u8) << shift),
                );
            }
            8 => self.pod.scr_u8(at).store(raw as u8, Ordering::Release),
            16 => self.pod.scr_u16(at).store(raw as u16, Ordering::Release),
            _ => self.pod.scr_u32(at).store(raw, Ordering::Release),
        }
    }
}

/// The panic of a record number past the array: out of line, so that the checks on every
/// object path stay a compare and a branch.
#[cold]
#[inline(never)]
fn record_past_the_array(record: u32, count: u64) -> ! {
    panic!("record {record} past the array of {count}")
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use crate::config::PodConfig;
    use crate::pod::{Backing, Pod};

    fn pod(bits: u32) -> Pod {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .record_width_bits(bits);
        Pod::create(&config, Backing::heap()).unwrap()
    }

    fn word(in_use: bool, locked: bool, counter: u32) -> RecordWord {
        RecordWord {
            in_use,
            locked,
            counter,
        }
    }

    #[test]
    fn four_bit_records_sharing_a_byte_change_alone() {
        let pod = pod(4);
        let records = Records::fixed(&pod);
        assert_eq!(records.counter_mask(), 3);
        let free = word(false, false, 0);
        records
            .compare_exchange(0, free, word(true, false, 0))
            .unwrap();
        records
            .compare_exchange(1, free, word(true, true, 1))
            .unwrap();
        assert_eq!(records.load(0), word(true, false, 0));
        assert_eq!(records.load(1), word(true, true, 1));
        assert_eq!(records.load(2), free, "the next byte is untouched");
        // A CAS from a word the record does not hold fails with what it holds, and
        // leaves both records of the byte alone.
        assert_eq!(
            records.compare_exchange(0, free, word(true, true, 3)),
            Err(word(true, false, 0))
        );
        records.store(0, word(true, false, 2));
        assert_eq!(records.load(0), word(true, false, 2));
        assert_eq!(records.load(1), word(true, true, 1));
    }

    #[test]
    fn two_bit_records_four_to_a_byte_have_no_counter() {
        let pod = pod(2);
        let records = Records::fixed(&pod);
        assert!(records.counterless());
        assert_eq!(records.counter_mask(), 0);
        let free = word(false, false, 0);
        // The protocol's locked word has an odd counter: kept to no counter at all.
        records
            .compare_exchange(2, free, word(true, true, 1))
            .unwrap();
        assert_eq!(records.load(2), word(true, true, 0));
        for other in [0, 1, 3, 4] {
            assert_eq!(records.load(other), free, "record {other}");
        }
        records
            .compare_exchange(2, word(true, true, 1), word(true, false, 2))
            .unwrap();
        assert_eq!(records.load(2), word(true, false, 0));
    }

    #[test]
    fn four_bit_records_of_one_byte_take_racing_cases_from_two_threads() {
        let pod = pod(4);
        let records = Records::fixed(&pod);
        const ROUNDS: u32 = 100_000;
        // Both threads start together, so that their CASes overlap (one thread could
        // otherwise finish before the other starts).
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            for record in [6, 7] {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    for i in 0..ROUNDS {
                        let from = word(i % 2 == 1, false, i % 4);
                        let to = word(i % 2 == 0, false, (i + 1) % 4);
                        records.compare_exchange(record, from, to).unwrap();
                    }
                });
            }
        });
        for record in [6, 7] {
            assert_eq!(records.load(record), word(false, false, ROUNDS % 4));
        }
    }
}
