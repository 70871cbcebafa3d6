//! The 8-byte record of a shared object, in SCR (Tigon's HWcc record), and its lock.
//!
//! ```text
//!  63      62..55     54      53     52     51..36          35..0
//! writer | readers | in use | dirty | clock | host bitmap | row offset (lines from the app LNR)
//! ```
//!
//! - **Lock**: Tigon's 2PL lock field used as a reader-writer lock. A read takes a shared
//!   lock (readers + 1), so reads of one hot object from many hosts do not serialize; a
//!   write takes the writer bit, which stops new readers, then waits for the readers to
//!   leave (writer preference: a stream of readers cannot starve a writer). Both are one
//!   CAS to take and one atomic to release.
//! - **In use**: the record holds a shared object. The owner clears it when it unshares
//!   or deletes the object, with the writer bit held.
//! - **Dirty** (Tigon's is-dirty): the object was written since it was shared. In
//!   HCMeta-Local the owner reads a clean shared row from its DRAM, and unsharing copies a
//!   dirty row back.
//! - **Clock**: set by every non-owner access; the owner's CLOCK hand clears it and
//!   unshares objects whose bit is already clear.
//! - **Host bitmap** (Tigon's SWcc bitmap): bit `h` set means host `h`'s cached lines of
//!   the row are current. A reader whose bit is clear invalidates the row's lines before
//!   it copies and sets its bit when it releases its lock (not before: another thread of
//!   its host must not trust the bit until the invalidation is done; no write can happen
//!   while the read lock is held, so setting it at release is safe). A writer leaves only
//!   its own bit set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use megalon_core::limits::LINE_BYTES;

use megalon_core::memory::cxl::ScrAccess;

use super::counters::{Counter, Counters};
use megalon_core::Backoff;

/// Bits of the row's offset, in lines from the application LNR (4 TiB of lines).
pub(crate) const OFFSET_BITS: u32 = 36;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const BITMAP_SHIFT: u32 = OFFSET_BITS;
/// Hosts the bitmap has bits for.
pub(crate) const BITMAP_HOSTS: usize = 16;
const BITMAP_MASK: u64 = 0xffff << BITMAP_SHIFT;
pub(crate) const CLOCK: u64 = 1 << 52;
pub(crate) const DIRTY: u64 = 1 << 53;
pub(crate) const IN_USE: u64 = 1 << 54;
const READER_ONE: u64 = 1 << 55;
const READERS_MASK: u64 = 0xff << 55;
pub(crate) const WRITER: u64 = 1 << 63;

/// Host `host`'s bit in the bitmap.
#[inline]
pub(crate) fn host_bit(host: usize) -> u64 {
    debug_assert!(host < BITMAP_HOSTS);
    1 << (BITMAP_SHIFT + host as u32)
}

/// A record for a row at `row_offset` (bytes from the application LNR, line-aligned),
/// in use, with only `owner`'s bit set and its clock bit set (a freshly shared object
/// survives the hand's next pass).
pub(crate) fn new_record(row_offset: u64, owner: usize) -> u64 {
    debug_assert_eq!(row_offset % LINE_BYTES, 0);
    let lines = row_offset / LINE_BYTES;
    debug_assert!(lines <= OFFSET_MASK);
    lines | host_bit(owner) | IN_USE | CLOCK
}

/// The row's offset in bytes from the application LNR.
#[inline]
pub(crate) fn row_offset(word: u64) -> u64 {
    (word & OFFSET_MASK) * LINE_BYTES
}

#[inline]
fn readers(word: u64) -> u64 {
    (word & READERS_MASK) >> 55
}

/// Whether anyone holds or waits for the lock.
#[inline]
pub(crate) fn latched(word: u64) -> bool {
    word & (WRITER | READERS_MASK) != 0
}

/// Why a lock was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotLocked {
    /// The record holds no object (unshared or deleted since the caller looked it up).
    Stale,
    /// The lock stayed busy past the wait limit.
    Busy {
        /// How long we waited.
        waited_ms: u64,
    },
}

/// A relaxed load of `record`, counted as one SCR atomic.
fn load(record: &AtomicU64, c: &Counters) -> u64 {
    c.add_scr(record, ScrAccess::Load);
    record.load(Ordering::Relaxed)
}

/// The waits of one lock attempt: each is counted and backs off, until the wait limit.
struct Waits<'a> {
    backoff: Option<Backoff>,
    wait_limit: Duration,
    c: &'a Counters,
}

impl<'a> Waits<'a> {
    fn new(wait_limit: Duration, c: &'a Counters) -> Self {
        Self {
            backoff: None,
            wait_limit,
            c,
        }
    }

    /// Waits once more; `Busy` once the wait limit has passed.
    fn another(&mut self) -> Result<(), NotLocked> {
        self.c.add(Counter::LockWaits, 1);
        Backoff::snooze_or(&mut self.backoff, self.wait_limit, |waited_ms| {
            NotLocked::Busy { waited_ms }
        })
    }
}

/// CASes `record`, a word in use, to `next(word)` once `busy(word)` no longer holds,
/// waiting (counted, backing off) while it does. Returns the word it set.
fn lock_when(
    record: &AtomicU64,
    waits: &mut Waits,
    busy: impl Fn(u64) -> bool,
    next: impl Fn(u64) -> u64,
) -> Result<u64, NotLocked> {
    let c = waits.c;
    let mut word = load(record, c);
    loop {
        if word & IN_USE == 0 {
            return Err(NotLocked::Stale);
        }
        if busy(word) {
            waits.another()?;
            word = load(record, c);
            continue;
        }
        let locked = next(word);
        c.add_scr(record, ScrAccess::Update);
        match record.compare_exchange_weak(word, locked, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(locked),
            Err(now) => word = now,
        }
    }
}

/// Takes a shared lock on `record`, setting `extra` (the clock bit for a non-owner).
/// Returns the word after the lock was taken.
pub(crate) fn read_lock(
    record: &AtomicU64,
    extra: u64,
    wait_limit: Duration,
    c: &Counters,
) -> Result<u64, NotLocked> {
    // The CAS's Acquire pairs with the last writer's Release in `write_unlock` (and the
    // owner's Release when it shared the row): its bytes reached memory before.
    lock_when(
        record,
        &mut Waits::new(wait_limit, c),
        |word| word & WRITER != 0 || readers(word) == readers(READERS_MASK),
        |word| (word + READER_ONE) | extra,
    )
}

/// Releases a shared lock taken as `locked` (the word [`read_lock`] returned), setting
/// `set_bits` (the reader's host bit, when it invalidated the row's lines before
/// copying). Every SCR access it makes is counted: one atomic without bits to set; with
/// bits, one CAS from `locked` (the word is unchanged unless other readers came or left,
/// or the clock bit was set, since the lock), and one more from the word each failure
/// returns.
pub(crate) fn read_unlock(record: &AtomicU64, locked: u64, set_bits: u64, c: &Counters) {
    // Release: the copy's loads happen before a writer that waits for the readers to
    // leave (its Acquire load in `write_lock`) stores anything.
    if set_bits == 0 {
        c.add_scr(record, ScrAccess::Update);
        record.fetch_sub(READER_ONE, Ordering::Release);
        return;
    }
    let mut word = locked;
    loop {
        debug_assert!(readers(word) > 0);
        c.add_scr(record, ScrAccess::Update);
        match record.compare_exchange_weak(
            word,
            (word - READER_ONE) | set_bits,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(now) => word = now,
        }
    }
}

/// Takes the write lock on `record`, setting `extra`: the writer bit first (new readers
/// wait), then waits until the readers have left. Returns the word then.
pub(crate) fn write_lock(
    record: &AtomicU64,
    extra: u64,
    wait_limit: Duration,
    c: &Counters,
) -> Result<u64, NotLocked> {
    let mut waits = Waits::new(wait_limit, c);
    let locked = lock_when(
        record,
        &mut waits,
        |word| word & WRITER != 0,
        |word| word | WRITER | extra,
    )?;
    if readers(locked) == 0 {
        // Nobody inside when our CAS set the bit, and nobody can enter after it. Its
        // Acquire pairs with the Release of every reader that left before it (their
        // RMWs are in the release sequence our CAS read from).
        return Ok(locked);
    }
    // Holding the writer bit: no reader can enter and the owner cannot unshare; the
    // readers inside leave by themselves.
    loop {
        // Acquire: pairs with each leaving reader's Release in `read_unlock`.
        let word = record.load(Ordering::Acquire);
        c.add_scr(record, ScrAccess::Load);
        if readers(word) == 0 {
            return Ok(word);
        }
        if let Err(busy) = waits.another() {
            c.add_scr(record, ScrAccess::Update);
            record.fetch_and(!WRITER, Ordering::Release);
            return Err(busy);
        }
    }
}

/// Takes the write lock only if nobody holds or waits for it and the clock bit is
/// clear (the CLOCK hand's victim test). Returns the word then.
pub(crate) fn try_write_lock_unreferenced(record: &AtomicU64, c: &Counters) -> Option<u64> {
    let word = load(record, c);
    if word & IN_USE == 0 || latched(word) || word & CLOCK != 0 {
        return None;
    }
    c.add_scr(record, ScrAccess::Update);
    record
        .compare_exchange(word, word | WRITER, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| word | WRITER)
}

/// Releases a write lock taken as `locked` after a write by `host`: only `host`'s bit
/// stays set (everyone else's cached lines are now stale), and the row is dirty.
pub(crate) fn write_unlock(record: &AtomicU64, locked: u64, host: usize, c: &Counters) {
    debug_assert!(locked & WRITER != 0 && readers(locked) == 0);
    let released = (locked & !(WRITER | BITMAP_MASK)) | host_bit(host) | DIRTY;
    c.add_scr(record, ScrAccess::Update);
    // A plain store: while the writer bit is set no reader enters and the CLOCK hand
    // skips the record, so nobody else changes the word. Release: the row's bytes
    // (written back and fenced) reach memory before any later locker can see the lock
    // free; pairs with the Acquire of `read_lock`/`write_lock`.
    record.store(released, Ordering::Release);
}

/// Releases a write lock taken as `locked` without writing (a lookup that turned out
/// stale): the word goes back as it was, less the writer bit.
pub(crate) fn write_abandon(record: &AtomicU64, locked: u64, c: &Counters) {
    c.add_scr(record, ScrAccess::Update);
    record.store(locked & !WRITER, Ordering::Release);
}

/// Clears the clock bit if it is set and nobody holds the lock. Returns whether it did.
pub(crate) fn clear_clock(record: &AtomicU64, word: u64, c: &Counters) -> bool {
    c.add_scr(record, ScrAccess::Update);
    record
        .compare_exchange(word, word & !CLOCK, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_excludes_them() {
        let c = Counters::default();
        let limit = Duration::from_millis(20);
        let record = AtomicU64::new(new_record(640, 2));
        assert_eq!(row_offset(record.load(Ordering::Relaxed)), 640);
        let a = read_lock(&record, CLOCK, limit, &c).unwrap();
        let b = read_lock(&record, 0, limit, &c).unwrap();
        assert_eq!(readers(record.load(Ordering::Relaxed)), 2);
        assert!(a & CLOCK != 0);
        // A writer cannot get in while readers hold the lock; it backs out.
        assert!(matches!(
            write_lock(&record, 0, limit, &c),
            Err(NotLocked::Busy { .. })
        ));
        assert_eq!(record.load(Ordering::Relaxed) & WRITER, 0);
        read_unlock(&record, a, host_bit(3), &c);
        read_unlock(&record, b, 0, &c);
        let locked = write_lock(&record, 0, limit, &c).unwrap();
        assert!(read_lock(&record, 0, Duration::ZERO, &c).is_err());
        write_unlock(&record, locked, 1, &c);
        let word = record.load(Ordering::Relaxed);
        assert_eq!(word & BITMAP_MASK, host_bit(1));
        assert!(word & DIRTY != 0 && !latched(word));
    }

    /// Found by a review (2026-12-01): a reader that sets its bit as it leaves loaded the
    /// word and then CASed it (two SCR accesses, more when other readers came and went)
    /// but counted one, so the report and the CXL model's charge had HCMeta's reads that
    /// invalidate cheaper than they were. Each access it makes is counted now, and it
    /// makes one when nobody changed the word since its lock (its CAS starts from the
    /// word its lock left).
    #[test]
    fn a_reader_that_sets_its_bit_counts_every_access_it_makes() {
        let c = Counters::default();
        let limit = Duration::from_millis(20);
        let record = AtomicU64::new(new_record(640, 2));
        let count = || c.get(Counter::ScrAtomics);
        // Alone: one CAS, from the word the lock left.
        let alone = read_lock(&record, 0, limit, &c).unwrap();
        let before = count();
        read_unlock(&record, alone, host_bit(3), &c);
        assert_eq!(count() - before, 1);
        assert_eq!(
            record.load(Ordering::Relaxed) & BITMAP_MASK,
            host_bit(2) | host_bit(3)
        );
        // Another reader came after our lock: the CAS from our word fails, the next one
        // (from the word the failure returned) succeeds.
        let first = read_lock(&record, 0, limit, &c).unwrap();
        let second = read_lock(&record, 0, limit, &c).unwrap();
        let before = count();
        read_unlock(&record, first, host_bit(4), &c);
        assert_eq!(count() - before, 2);
        read_unlock(&record, second, 0, &c);
        let word = record.load(Ordering::Relaxed);
        assert!(!latched(word));
        assert_eq!(word & BITMAP_MASK, host_bit(2) | host_bit(3) | host_bit(4));
    }

    /// Found by a review (2026-12-01): a writer whose CAS took the writer bit from a word
    /// with no readers loaded the word once more to see the readers leave (three SCR
    /// accesses where the design needs two: none can enter once the bit is set, and the
    /// CAS's Acquire already follows every earlier reader's Release). It returns at once
    /// now, and waits only for readers its CAS saw inside.
    #[test]
    fn a_write_lock_with_no_reader_inside_is_a_load_and_a_cas() {
        let c = Counters::default();
        let limit = Duration::from_millis(20);
        let record = AtomicU64::new(new_record(640, 2));
        let before = c.get(Counter::ScrAtomics);
        let locked = write_lock(&record, 0, limit, &c).unwrap();
        assert_eq!(c.get(Counter::ScrAtomics) - before, 2);
        write_unlock(&record, locked, 1, &c);
        // With a reader inside, the writer waits for it to leave.
        let reader = read_lock(&record, 0, limit, &c).unwrap();
        assert!(matches!(
            write_lock(&record, 0, limit, &c),
            Err(NotLocked::Busy { .. })
        ));
        read_unlock(&record, reader, 0, &c);
        assert!(!latched(record.load(Ordering::Relaxed)));
    }

    #[test]
    fn a_free_record_is_stale() {
        let c = Counters::default();
        let record = AtomicU64::new(0);
        assert_eq!(
            read_lock(&record, 0, Duration::ZERO, &c),
            Err(NotLocked::Stale)
        );
        assert_eq!(
            write_lock(&record, 0, Duration::ZERO, &c),
            Err(NotLocked::Stale)
        );
    }
}
