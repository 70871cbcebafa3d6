//! The shared log: a ring of fixed-size entries in LNR, its cursors in SCR.
//!
//! Node replication adapted to a pod. Positions are `u64` that only grow; position `p`
//! lives in entry `p % capacity`, and is published when that entry's alive word holds
//! `p / capacity + 1` (a per-lap value, so entries are never cleared).
//!
//! Cursors (SCR, a line each): `tail` (next position to reserve), `head` (oldest
//! position some live host still needs), `ctail` (every position below it is published
//! and applied by at least the host that advanced it), one `ltail[h]` per host (what
//! host `h` has applied), and `registration` (open until the ring recycles its first
//! entry, then closed for good, since a host that joins later could not rebuild its
//! replica from position 0).
//!
//! Writing an entry: write all of it (alive word 0), make every line reach memory,
//! fence, then store the alive word and make that line reach memory too, fence.
//! Reading: invalidate the first line, fence, read it; if the alive word says published,
//! invalidate the other lines, fence, read them. Reading the alive word before touching
//! the other lines means they are loaded only once they are known to be in memory.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::chaos::{Chaos, Point};
use crate::error::{Error, Result};
use crate::host_table::{self, TableState};
use crate::ids::HostId;
use crate::limits::LINE_BYTES;
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::pod::{Cursor, Pod};
use crate::sync::{AtomicU64, Ordering};

/// `registration` bit meaning "closed: the ring has recycled entries, no host may join
/// from position 0". (Layout version 7 counted the hosts joining in the other bits.)
const REGISTRATION_CLOSED: u64 = 1 << 63;

/// The log of one pod, as seen by one host.
#[derive(Debug)]
pub(crate) struct Log {
    capacity: u64,
    entry_bytes: usize,
    log_offset: u64,
}

/// Which host holds `head` back, and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Laggard {
    pub(crate) host: HostId,
    pub(crate) position: u64,
}

impl Log {
    /// An `ltail` that holds nothing back: a dead host's, released by its recoverer.
    pub(crate) const RELEASED: u64 = u64::MAX;

    pub(crate) fn new(pod: &Pod) -> Self {
        let layout = pod.layout();
        Self {
            capacity: layout.config.log_capacity_entries,
            entry_bytes: layout.log_entry_bytes as usize,
            log_offset: layout.log_offset,
        }
    }

    /// Entries in the ring.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of one entry.
    pub(crate) fn entry_bytes(&self) -> usize {
        self.entry_bytes
    }

    fn entry_offset(&self, position: u64) -> u64 {
        self.log_offset + (position % self.capacity) * self.entry_bytes as u64
    }

    fn alive_value(&self, position: u64) -> u64 {
        position / self.capacity + 1
    }

    #[inline]
    pub(crate) fn tail(pod: &Pod) -> &AtomicU64 {
        pod.cursor(Cursor::Tail)
    }

    #[inline]
    pub(crate) fn head(pod: &Pod) -> &AtomicU64 {
        pod.cursor(Cursor::Head)
    }

    #[inline]
    pub(crate) fn ctail(pod: &Pod) -> &AtomicU64 {
        pod.cursor(Cursor::Ctail)
    }

    pub(crate) fn ltail(pod: &Pod, host: HostId) -> &AtomicU64 {
        pod.scr_u64(pod.layout().ltail_offset(host))
    }

    fn registration(pod: &Pod) -> &AtomicU64 {
        pod.scr_u64(pod.layout().registration_offset())
    }

    /// Whether registration is closed: the ring has recycled entries (or is about to), and
    /// a host that joins now cannot replay from position 0. A load: a first look.
    pub(crate) fn registration_closed(pod: &Pod) -> bool {
        Self::registration(pod).load(Ordering::SeqCst) & REGISTRATION_CLOSED != 0
    }

    /// [`Log::registration_closed`], for a joiner that has claimed its row and stored its
    /// `ltail` 0 (the look that decides): open, it may replay from 0. The closer in
    /// [`Log::advance_head`] closes by an RMW of the same word and then looks at every
    /// `ltail`; this look is an RMW too (it changes nothing), so the two are ordered in
    /// the word's modification order, and the second reads what the first wrote (SeqCst,
    /// so Release and Acquire both ways): if the joiner's comes first, the closer's look
    /// at the `ltail`s comes after the joiner's store of 0, and the head stays at 0; if
    /// the closer's comes first, the joiner finds registration closed. (Two plain SeqCst
    /// loads would do on paper; the loom model of this race checks only what Acquire and
    /// Release promise.) What protects a join is the joiner's own row: a joiner that dies
    /// is recovered with it, where a count of joiners (layout version 7) stayed up for
    /// good.
    pub(crate) fn registration_closed_after_claim(pod: &Pod) -> bool {
        Self::registration(pod).fetch_or(0, Ordering::SeqCst) & REGISTRATION_CLOSED != 0
    }

    /// The error of a join from position 0 once registration is closed.
    pub(crate) fn recycled(pod: &Pod) -> Error {
        Error::LogRecycled {
            head: Self::head(pod).load(Ordering::SeqCst),
        }
    }

    /// Moves `head` to the lowest `ltail` of the joined hosts. Returns the new head and,
    /// when it is held back, the host holding it.
    pub(crate) fn advance_head(&self, pod: &Pod) -> (u64, Option<Laggard>) {
        let lowest = || {
            let mut lowest: Option<Laggard> = None;
            for h in 0..pod.config().max_hosts {
                let position = match host_table::table_state(pod, h) {
                    TableState::Free => continue,
                    TableState::Joined => Self::ltail(pod, h).load(Ordering::SeqCst),
                };
                if position == Self::RELEASED {
                    continue;
                }
                if lowest.is_none_or(|l| position < l.position) {
                    lowest = Some(Laggard { host: h, position });
                }
            }
            lowest
        };
        let head = Self::head(pod);
        let Some(mut laggard) = lowest() else {
            return (head.load(Ordering::SeqCst), None);
        };
        if laggard.position > 0 && head.load(Ordering::SeqCst) == 0 {
            // The ring's first recycle: close registration, then look again. An RMW even
            // when another closer closed it already: a joiner whose look (an RMW of the
            // same word, `registration_closed_after_claim`) came before ours found it
            // open and had stored its `ltail` 0 before that; ours reads after its in the
            // word's order, so the look below sees the 0, and the head stays at 0. (A
            // closer that only loaded the word, closed by another, would act on a look
            // at the `ltail`s taken before it: one that may miss the joiner.)
            Self::registration(pod).fetch_or(REGISTRATION_CLOSED, Ordering::SeqCst);
            match lowest() {
                Some(now) => laggard = now,
                None => return (head.load(Ordering::SeqCst), None),
            }
        }
        // SeqCst: orders this with the SeqCst loads of states and ltails above.
        let previous = head.fetch_max(laggard.position, Ordering::SeqCst);
        (previous.max(laggard.position), Some(laggard))
    }

    /// Reserves `count` consecutive positions (one CAS on `tail`), waiting for space up to
    /// `limit`. While it waits it calls `help` (the caller replays its own replica so that
    /// it is not the host holding everyone back). Before each CAS it calls `announce` with
    /// the positions it is about to take (the caller says so in its host-table row, for a
    /// recoverer to fill them should it die before publishing them).
    pub(crate) fn reserve(
        &self,
        pod: &Pod,
        count: u64,
        limit: Duration,
        chaos: &Chaos,
        mut announce: impl FnMut(u64),
        mut help: impl FnMut() -> Result<()>,
    ) -> Result<u64> {
        assert!(
            count > 0 && count <= self.capacity,
            "batches are split to the ring's size"
        );
        let tail = Self::tail(pod);
        let mut backoff = Backoff::new(limit);
        loop {
            let position = tail.load(Ordering::Acquire);
            // Acquire: pairs with the SeqCst fetch_max in `advance_head`, so the entries
            // below head have been applied by every live host before we overwrite them.
            let head = Self::head(pod).load(Ordering::Acquire);
            // Compared without subtracting: `tail` may be stale, and other hosts may have
            // appended and replayed past it, so `head` can exceed `position + count`.
            if position + count <= head + self.capacity {
                // A stale head only makes this check stricter: head never decreases.
                // Relaxed would do for the reservation itself; AcqRel keeps the order of
                // reservations and our later entry writes obvious.
                announce(position);
                chaos.point(Point::ReserveBeforeCas);
                if tail
                    .compare_exchange_weak(
                        position,
                        position + count,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return Ok(position);
                }
                continue;
            }
            let (new_head, laggard) = self.advance_head(pod);
            if position + count <= new_head + self.capacity {
                continue;
            }
            help()?;
            if !backoff.snooze() {
                let laggard = laggard.unwrap_or(Laggard {
                    host: HostId::MAX,
                    position: new_head,
                });
                return Err(Error::LogFull {
                    lagging_host: laggard.host,
                    lagging_alive: host_table::alive(pod, laggard.host),
                    lagging_position: laggard.position,
                    tail: position,
                    capacity_entries: self.capacity,
                    waited_ms: backoff.waited().as_millis() as u64,
                });
            }
        }
    }

    /// Writes and publishes the entry at `position` (reserved by us) from `entry`, which
    /// [`crate::event::Event::encode`] filled (alive word 0).
    pub(crate) fn write(&self, memory: &Memory, position: u64, entry: &[u8]) {
        debug_assert_eq!(entry.len(), self.entry_bytes);
        debug_assert_eq!(&entry[..8], &[0; 8], "published only below");
        let offset = self.entry_offset(position);
        memory.write(offset, entry);
        if !mutants::skipped(Step::LogWriteBackBeforePublish) {
            memory.write_back(offset, self.entry_bytes);
        }
        // Every line of the entry is in memory before the alive word is.
        memory.fence();
        memory.store_u64(offset, self.alive_value(position));
        memory.write_back(offset, LINE_BYTES as usize);
        // The alive word is in memory before anything we do next (ctail, replies).
        memory.fence();
    }

    /// Whether the entry at `position` is published (its alive word, read from memory).
    pub(crate) fn is_published(&self, memory: &Memory, position: u64) -> bool {
        let offset = self.entry_offset(position);
        memory.flush(offset, LINE_BYTES as usize);
        memory.fence();
        memory.load_u64(offset) == self.alive_value(position)
    }

    /// Reads the entry at `position` into `entry` if it is published. A position below
    /// `head` must not be read (its entry may belong to a later lap).
    pub(crate) fn read(&self, memory: &Memory, position: u64, entry: &mut [u8]) -> bool {
        debug_assert_eq!(entry.len(), self.entry_bytes);
        let offset = self.entry_offset(position);
        let line = LINE_BYTES as usize;
        let invalidate = !mutants::skipped(Step::LogInvalidateBeforeRead);
        if invalidate {
            memory.flush(offset, line);
            memory.fence();
        }
        let alive = memory.load_u64(offset);
        if alive != self.alive_value(position) {
            debug_assert!(
                alive < self.alive_value(position),
                "a writer lapped a reader"
            );
            return false;
        }
        if invalidate && self.entry_bytes > line {
            memory.flush(offset + LINE_BYTES, self.entry_bytes - line);
        }
        // Pairs with the fence in `write` between the entry and its alive word: the loads
        // below see the entry of this lap, not of an earlier one, even where loads may be
        // reordered (the alive word was read with a plain load). It also orders the
        // invalidation just above before those loads.
        memory.fence();
        memory.read(offset, entry);
        true
    }
}
