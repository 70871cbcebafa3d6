//! The shared log: a ring of fixed-size entries in LNR, its cursors in SCR.
//!
//! Node replication adapted to a pod. Positions are `u64` that only grow; position `p`
//! lives in entry `p % capacity`, and is published when that entry's alive word holds
//! `p / capacity + 1` (a per-lap value, so entries are never cleared).
//!
//! Cursors (SCR, a line each): `tail` (next position to reserve), `head` (oldest
//! position some live host still needs, and a count of the claims made at it), `ctail`
//! (every position below it is published and applied by at least the host that advanced
//! it), and one `ltail[h]` per host (what host `h` has applied, and which life of the id
//! stored it: every change of it is a CAS from its life's word). A host that joins while
//! the head is at 0 replays from position 0; once the head has left 0, the ring may have
//! recycled entries, and a host joins late (from a snapshot another host sends it).
//!
//! Writing an entry: write all of it (alive word 0), make every line reach memory,
//! fence, then store the alive word and make that line reach memory too, fence.
//! Reading: invalidate the first line, fence, read it; if the alive word says published,
//! invalidate the other lines, fence, read them. Reading the alive word before touching
//! the other lines means they are loaded only once they are known to be in memory.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::chaos::{Chaos, Point};
use crate::error::{Error, Result};
use crate::host_table;
use crate::ids::HostId;
use crate::limits::LINE_BYTES;
use crate::memory::cxl::ScrAccess;
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::pod::{Cursor, Pod};
use crate::sync::{AtomicU64, Ordering};

/// Bits of the `head` word that hold the head's position; the bits above them count the
/// claims made since the head last moved ([`Log::hold_head`]), modulo 4,096. 52 bits are
/// 4.5 * 10^15 positions: 14 years of appends at ten million a second.
const HEAD_POSITION_BITS: u32 = 52;
const HEAD_POSITION_MASK: u64 = (1 << HEAD_POSITION_BITS) - 1;
/// The bits above the position in a `head` or `ltail` word.
const HEAD_CLAIMS_MAX: u64 = u64::MAX >> HEAD_POSITION_BITS;

/// An `ltail` word holds the position its host has applied in the same low bits, and in
/// the bits above them the life of the host id that stored it (its low 12 bits): a
/// change of an `ltail` is a CAS from what its life stored last, so a host declared dead
/// (only paused past its lease) cannot move its id's next life's, nor a recoverer or a
/// server that paused.
const LTAIL_LIFE_MASK: u64 = HEAD_CLAIMS_MAX;
/// The position of an `ltail` that holds nothing back: released by a recoverer.
const RELEASED_AT: u64 = HEAD_POSITION_MASK;
/// The position of an `ltail` whose life has claimed its row and does not hold the head
/// yet (`Log::hold_head`).
const WAITING_AT: u64 = HEAD_POSITION_MASK - 1;

/// Charges the CXL cost model one access to the cursor `word`, by whether this host holds
/// its line (nothing on other memories): an append's load and CAS of `tail`, a replay's
/// raise of its `ltail`, a closer's look at every `ltail`. Before the access, as the
/// protocol's counts of record words are. (A tail check's load of `ctail` is charged by
/// `Shared::catch_up`, [`crate::memory::cxl::charge_tail_check`].)
#[inline]
fn charge(word: &AtomicU64, access: ScrAccess) {
    #[cfg(not(megalon_loom))]
    crate::memory::cxl::charge_cursor_at(word, access);
    #[cfg(megalon_loom)]
    let _ = (word, access);
}

/// `word.load(order)`, charged first.
#[inline]
fn load(word: &AtomicU64, order: Ordering) -> u64 {
    charge(word, ScrAccess::Load);
    word.load(order)
}

/// `word.compare_exchange(current, new)`, SeqCst both ways, charged first as an update (a
/// CAS that fails too: the core takes the line for it).
#[inline]
fn cas(word: &AtomicU64, current: u64, new: u64) -> std::result::Result<u64, u64> {
    charge(word, ScrAccess::Update);
    word.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
}

fn ltail_word(position: u64, life: u64) -> u64 {
    position | (life & LTAIL_LIFE_MASK) << HEAD_POSITION_BITS
}

fn ltail_life(word: u64) -> u64 {
    word >> HEAD_POSITION_BITS
}

fn head_position(word: u64) -> u64 {
    word & HEAD_POSITION_MASK
}

#[cfg(test)]
fn head_claims(word: u64) -> u64 {
    word >> HEAD_POSITION_BITS
}

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

    /// The `head` word: the position in its low [`HEAD_POSITION_BITS`], the claims
    /// counted at it above them.
    #[inline]
    fn head_word(pod: &Pod) -> &AtomicU64 {
        pod.cursor(Cursor::Head)
    }

    /// Every claim ever made ([`Log::hold_head`]), on the `head`'s line: a closer looks
    /// at it before and after its look at the rows.
    fn claims_word(pod: &Pod) -> &AtomicU64 {
        pod.scr_u64(pod.layout().head_offset() + 8)
    }

    /// The oldest position some live host still needs. SeqCst: pairs with the CAS that
    /// moved it (and orders this load with the loads of `ltail`s and states around it).
    #[inline]
    pub(crate) fn head(pod: &Pod) -> u64 {
        head_position(load(Self::head_word(pod), Ordering::SeqCst))
    }

    /// The most positions the log has: past them, `reserve` answers
    /// [`Error::LogExhausted`]. (The two above it mark `ltail`s that hold nothing.)
    pub(crate) const MAX_POSITION: u64 = WAITING_AT - 1;

    #[inline]
    pub(crate) fn ctail(pod: &Pod) -> &AtomicU64 {
        pod.cursor(Cursor::Ctail)
    }

    /// A replay that applied every position below `position` raises `ctail` to it (if it
    /// is not past it already). AcqRel: Release pairs with the Acquire in every host's
    /// tail check.
    pub(crate) fn raise_ctail(pod: &Pod, position: u64) {
        let ctail = Self::ctail(pod);
        charge(ctail, ScrAccess::Update);
        ctail.fetch_max(position, Ordering::AcqRel);
    }

    /// Host `host`'s `ltail` word (see [`LTAIL_LIFE_MASK`]).
    fn ltail(pod: &Pod, host: HostId) -> &AtomicU64 {
        pod.scr_u64(pod.layout().ltail_offset(host))
    }

    /// Stores `position` as what life `life` of `host` has applied (a test's stand-in for
    /// that host's replay).
    #[cfg(test)]
    pub(crate) fn store_ltail(pod: &Pod, host: HostId, life: u64, position: u64) {
        Self::ltail(pod, host).store(ltail_word(position, life), Ordering::SeqCst);
    }

    /// The position life `life` of `host` has applied, as its `ltail` says; `None` when
    /// the word is another life's, released, or not holding the head yet.
    pub(crate) fn ltail_of(pod: &Pod, host: HostId, life: u64) -> Option<u64> {
        let word = load(Self::ltail(pod, host), Ordering::SeqCst);
        let position = head_position(word);
        (ltail_life(word) == life & LTAIL_LIFE_MASK && position < WAITING_AT).then_some(position)
    }

    /// Life `life` of `host` (this host) has applied up to `to`, from `from` (what it
    /// stored last): one CAS, which fails if the word is no longer what the life stored,
    /// released by its recoverer or taken by the id's next life. `false`: it failed.
    pub(crate) fn raise_own_ltail(pod: &Pod, host: HostId, life: u64, from: u64, to: u64) -> bool {
        let ltail = Self::ltail(pod, host);
        if mutants::skipped(Step::OwnLtailMovedByCas) {
            charge(ltail, ScrAccess::Update);
            ltail.store(ltail_word(to, life), Ordering::SeqCst);
            return true;
        }
        cas(ltail, ltail_word(from, life), ltail_word(to, life)).is_ok()
    }

    /// A server pins life `life` of `host` (a late joiner) at `to`: raises its `ltail` to
    /// `to` while the word is that life's and holds the head (never lowers it: the head may
    /// be at it). `false`: the word is not that life's, or does not hold the head.
    pub(crate) fn pin_ltail(pod: &Pod, host: HostId, life: u64, to: u64) -> bool {
        let word = Self::ltail(pod, host);
        let mut seen = load(word, Ordering::SeqCst);
        loop {
            let position = head_position(seen);
            if ltail_life(seen) != life & LTAIL_LIFE_MASK || position >= WAITING_AT {
                return false;
            }
            if position >= to {
                return true;
            }
            match cas(word, seen, ltail_word(to, life)) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }

    /// A recoverer releases the `ltail` of life `life` of `host` (dead): it no longer holds
    /// the head back. Only while the word is that life's: one of the id's next life stays.
    pub(crate) fn release_ltail(pod: &Pod, host: HostId, life: u64) {
        let word = Self::ltail(pod, host);
        let released = ltail_word(RELEASED_AT, life);
        let mut seen = load(word, Ordering::SeqCst);
        while ltail_life(seen) == life & LTAIL_LIFE_MASK && seen != released {
            match cas(word, seen, released) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// The error of a join from position 0 once the head has left 0.
    pub(crate) fn recycled(pod: &Pod) -> Error {
        Error::LogRecycled {
            head: Self::head(pod),
        }
    }

    /// Holds the head for life `life` of `host`, whose row this process has just claimed
    /// and counted: stores its `ltail`, then counts the claim twice: in the claims word,
    /// and in the `head` word by a CAS from the word it loaded before the store. A closer
    /// ([`Log::advance_head`]) that may have looked at this row before the store loaded
    /// the claims word before the count: it finds it changed after its look, or, if the
    /// count came after that second load, its CAS of the `head` word fails. Either way it
    /// looks again; one that loads the claims word after the count sees the `ltail`. So
    /// from the count on, the head never passes this row's `ltail` (which only grows).
    ///
    /// The `head` word's count wraps (at 4,096): it only has to change between a closer's
    /// last look at the claims word and its CAS, two instructions. (A count that stopped
    /// when full had to move the head on: a pod whose ring never filled and whose hosts
    /// came and went 4,095 times at one position could then be joined early no more, or
    /// not at all once nobody held the head.)
    /// Returns the position the host replays from: 0 while the head is at 0 (an early
    /// join: the ring has recycled nothing, and will not while this row holds 0), else
    /// the head (a late join, which `late_allowed` must allow: else
    /// [`Error::LogRecycled`]). Also called again by a late joiner whose server died
    /// (which may have pinned it past where the next server is).
    pub(crate) fn hold_head(
        &self,
        pod: &Pod,
        host: HostId,
        life: u64,
        late_allowed: bool,
    ) -> Result<u64> {
        let word = Self::head_word(pod);
        let ltail = Self::ltail(pod, host);
        let dead = || Error::HostDeclaredDead { host, life };
        // The word becomes this life's, holding nothing yet; unless a recoverer took this
        // life for dead and released it.
        let waiting = ltail_word(WAITING_AT, life);
        let mut mine = load(ltail, Ordering::SeqCst);
        while mine != waiting {
            if mine == ltail_word(RELEASED_AT, life) && host_table::condemned(pod, host, life) {
                return Err(dead());
            }
            // Another life's word is ours to take only while the row is this life's: a
            // joiner paused past its lease here, recovered, and its id claimed again,
            // would overwrite the next life's word (which then held the head for nobody).
            let held = host_table::holder(pod, host).is_some_and(|(_, holder)| holder == life);
            if ltail_life(mine) != life & LTAIL_LIFE_MASK && !held {
                return Err(dead());
            }
            match cas(ltail, mine, waiting) {
                Ok(_) => mine = waiting,
                Err(now) => mine = now,
            }
        }
        loop {
            let seen = load(word, Ordering::SeqCst);
            let from = head_position(seen);
            if from > 0 && !late_allowed {
                return Err(Error::LogRecycled { head: from });
            }
            let next = ltail_word(from, life);
            // SeqCst, before the counts: a closer that loads the claims word after ours
            // sees this store in its look at the rows. A CAS from what we stored: a
            // recoverer may have released it.
            if cas(ltail, mine, next).is_err() {
                return Err(dead());
            }
            mine = next;
            let claims = Self::claims_word(pod);
            charge(claims, ScrAccess::Update);
            claims.fetch_add(1, Ordering::SeqCst);
            if cas(word, seen, seen.wrapping_add(1 << HEAD_POSITION_BITS)).is_ok() {
                // A recoverer that took this life for dead may have released the word
                // between our store and our count: then nothing holds the head for us.
                if load(ltail, Ordering::SeqCst) != next {
                    return Err(dead());
                }
                return Ok(from);
            }
            // The head moved, or another claim was counted: look again. (Until our count
            // our `ltail` holds nothing: a closer may have passed it.)
        }
    }

    /// Moves `head` to the lowest `ltail` of the joined hosts. Returns the new head and,
    /// when it is held back, the host holding it.
    ///
    /// The look at the rows takes one row at a time: a host may claim a row this look
    /// already passed (free, or with its previous life's `ltail`), with an `ltail` below
    /// the lowest seen. So the head moves only if the claims word is what it was before
    /// the look, and by a CAS from the `head` word loaded before the look: a claim
    /// counted since ([`Log::hold_head`]) changes one or the other, and we look again.
    /// (A `fetch_max` of the lowest seen, as before layout version 9, moved the head past
    /// such a host when the closer paused between its look and its move.)
    pub(crate) fn advance_head(&self, pod: &Pod, chaos: &Chaos) -> (u64, Option<Laggard>) {
        let word = Self::head_word(pod);
        let claims_word = Self::claims_word(pod);
        loop {
            // Before the look (SeqCst, as the loads in it).
            let seen = load(word, Ordering::SeqCst);
            let claims = load(claims_word, Ordering::SeqCst);
            let head = head_position(seen);
            let Some(laggard) = Self::lowest(pod, chaos) else {
                return (head, None);
            };
            if laggard.position <= head {
                return (head, Some(laggard));
            }
            let mutated = mutants::skipped(Step::HeadMovesFromTheWordBeforeTheLook);
            let seen = if mutated {
                // A word loaded after the look, and no look at the claims: as a
                // `fetch_max` of what it found would.
                let now = load(word, Ordering::SeqCst);
                if head_position(now) >= laggard.position {
                    return (head_position(now), Some(laggard));
                }
                now
            } else {
                seen
            };
            if !mutated && load(claims_word, Ordering::SeqCst) != claims {
                continue;
            }
            // The claims count starts again at 0 at the new position.
            if cas(word, seen, laggard.position).is_ok() {
                return (laggard.position, Some(laggard));
            }
        }
    }

    /// The joined host with the lowest `ltail`, one row at a time.
    fn lowest(pod: &Pod, chaos: &Chaos) -> Option<Laggard> {
        let mut lowest: Option<Laggard> = None;
        for h in 0..pod.config().max_hosts {
            if h > 0 {
                chaos.point(Point::HeadLookBetweenRows);
            }
            // A row's `ltail` counts when it is the life that holds the row now (a word
            // left by an earlier life is that life's, whose row was freed), and holds the
            // head.
            let Some((_, life)) = host_table::holder(pod, h) else {
                continue;
            };
            let Some(position) = Self::ltail_of(pod, h, life) else {
                continue;
            };
            if lowest.is_none_or(|l| position < l.position) {
                lowest = Some(Laggard { host: h, position });
            }
        }
        lowest
    }

    /// [`Error::LogFull`]: `laggard` holds the head at `head`; the caller waited
    /// `waited`.
    fn full(
        &self,
        pod: &Pod,
        laggard: Option<Laggard>,
        head: u64,
        tail: u64,
        waited: Duration,
    ) -> Error {
        // A hole at the head (a position reserved and not yet published) holds every
        // host's replay there: the hosts at the head tie, and the lowest id of them (the
        // caller's own host, maybe) held nothing back. Its reserver is named instead
        // (not a condemned one: its recovery fills its positions, or has).
        let laggard = laggard.map(|l| {
            let reserver = (0..pod.config().max_hosts).find(|&h| {
                host_table::holder(pod, h).is_some_and(|(_, life)| {
                    !host_table::condemned(pod, h, life)
                        && host_table::holders_reservation(pod, h).contains(&l.position)
                })
            });
            match reserver {
                Some(host) if host != l.host => Laggard { host, ..l },
                _ => l,
            }
        });
        Error::LogFull {
            lagging_host: laggard.map(|l| l.host),
            lagging_alive: laggard.and_then(|l| host_table::alive(pod, l.host)),
            lagging_position: laggard.map_or(head, |l| l.position),
            tail,
            capacity_entries: self.capacity,
            waited_ms: waited.as_millis() as u64,
        }
    }

    /// [`Error::LogFull`] if the log has no room for one more entry now (after moving
    /// the head as far as the hosts' `ltail`s allow), for a caller that waited `waited`
    /// for something that waits for room (a combiner's batch).
    pub(crate) fn full_now(&self, pod: &Pod, chaos: &Chaos, waited: Duration) -> Option<Error> {
        // The tail before the look at the rows: the head it gives may be a row's `ltail`
        // read early in the look (that host replayed since), so it says the log was full
        // only against a tail that was already there when the row was read. A tail loaded
        // after it could have reached the head's lap only once the head could move on.
        let tail = load(Self::tail(pod), Ordering::Acquire);
        let (head, laggard) = self.advance_head(pod, chaos);
        (tail + 1 > head + self.capacity).then(|| self.full(pod, laggard, head, tail, waited))
    }

    /// Reserves `wanted.end()` consecutive positions (one CAS on `tail`), waiting for space
    /// up to `limit`; once that wait is over, takes as many as fit if that is at least
    /// `wanted.start()` (a batch whose first request's limit ran out appends what the log
    /// has room for, rather than refuse requests each of which would fit). With fewer
    /// positions left below [`Log::MAX_POSITION`] than `wanted.end()` it waits for room
    /// for what is left of them, and only fewer than `wanted.start()` left is
    /// [`Error::LogExhausted`]. Returns the first position and how many it took. While
    /// it waits it calls `help` (the caller replays its own replica so that it is not the
    /// host holding everyone back). Before each CAS it calls `announce` with the positions
    /// it is about to take, from and end (the caller says so in its host-table row, for a
    /// recoverer to fill them should it die before publishing them).
    pub(crate) fn reserve(
        &self,
        pod: &Pod,
        wanted: RangeInclusive<u64>,
        limit: Duration,
        chaos: &Chaos,
        mut announce: impl FnMut(u64, u64) -> Result<()>,
        mut help: impl FnMut() -> Result<()>,
    ) -> Result<(u64, u64)> {
        let (fewest, count) = (*wanted.start(), *wanted.end());
        assert!(
            count <= self.capacity,
            "batches are split to the ring's size"
        );
        assert!(fewest > 0 && fewest <= count, "at least one position");
        let tail = Self::tail(pod);
        let mut backoff = Backoff::new(limit);
        // Set once the wait is over: from then on a CAS takes what fits, down to `fewest`.
        let mut last_look = false;
        loop {
            let position = load(tail, Ordering::Acquire);
            let left = Self::MAX_POSITION.saturating_sub(position);
            if left < fewest {
                return Err(Error::LogExhausted {
                    tail: position,
                    positions: Self::MAX_POSITION,
                });
            }
            // Past the last position the batch whole never fits: what is left of them does.
            let need = (if last_look { fewest } else { count }).min(left);
            // SeqCst (Acquire would do): pairs with the CAS in `advance_head`, so the
            // entries below head have been applied by every live host before we overwrite
            // them.
            let head = Self::head(pod);
            // Not below zero: `tail` may be stale (other hosts may have appended and
            // replayed past it, so `head` can exceed it), but it was loaded before `head`,
            // which never decreases, so it is at most a ring above it.
            let room = (head + self.capacity).saturating_sub(position);
            let take = count.min(room).min(left);
            if take >= need {
                // A stale head only makes this check stricter: head never decreases.
                // Relaxed would do for the reservation itself; AcqRel keeps the order of
                // reservations and our later entry writes obvious.
                announce(position, position + take)?;
                chaos.point(Point::ReserveBeforeCas);
                charge(tail, ScrAccess::Update);
                if tail
                    .compare_exchange_weak(
                        position,
                        position + take,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return Ok((position, take));
                }
                continue;
            }
            let (new_head, _) = self.advance_head(pod, chaos);
            if position + need <= new_head + self.capacity {
                continue;
            }
            help()?;
            if !backoff.snooze() {
                // `help` may have made room (a late joiner's pin) while it ran: one last
                // look, which takes what fits.
                let (new_head, laggard) = self.advance_head(pod, chaos);
                let now = load(tail, Ordering::Acquire);
                if !last_look && now + fewest <= new_head + self.capacity {
                    last_look = true;
                    continue;
                }
                return Err(self.full(pod, laggard, new_head, position, backoff.waited()));
            }
        }
    }

    /// Writes and publishes the entry at `position` (reserved by us) from `entry`, which
    /// [`crate::event::Event::encode`] filled (alive word 0).
    pub(crate) fn write(&self, memory: &Memory, position: u64, entry: &[u8]) {
        debug_assert_eq!(entry.len(), self.entry_bytes);
        debug_assert_eq!(&entry[..8], &[0; 8], "published only below");
        let offset = self.entry_offset(position);
        // The reservation that let us write here came after the head passed the lap
        // before (a host's `ltail` released by its recoverer first): this fence orders
        // that before every byte below, for a replay of that lap that copies any of them
        // and then finds its `ltail` released (`ltail_holds_head`'s Acquire fence). A
        // SeqCst load or CAS is not a release fence. By the argument of `create`'s fence
        // before an object's bytes; unlike that one, no loom model has shown it (a model
        // of a replay racing a lap's write passed without it). Free on x86.
        crate::sync::fence(Ordering::Release);
        // Straight to memory, never left in this host's cache: a writer that stops here
        // for good leaves nothing that could land later, over the `Skip` its recovery
        // writes or a later lap's entry (`docs/memory.md`, "What a stopped process
        // leaves").
        mutants::store(memory, Step::LogWriteBackBeforePublish, offset, entry);
        // Every line of the entry is in memory before the alive word is.
        if !mutants::skipped(Step::LogEntryFencedBeforeAlive) {
            memory.fence();
        }
        memory.write_non_temporal(offset, &self.alive_value(position).to_ne_bytes());
        Chaos::none().point(Point::LogAfterAlive);
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
    /// `head` must not be read (its entry may belong to a later lap): a reader whose
    /// `ltail` the head may have passed checks it after the copy.
    pub(crate) fn read(&self, memory: &Memory, position: u64, entry: &mut [u8]) -> bool {
        debug_assert_eq!(entry.len(), self.entry_bytes);
        let offset = self.entry_offset(position);
        let line = LINE_BYTES as usize;
        let invalidate = !mutants::skipped(Step::LogInvalidateBeforeRead);
        if invalidate {
            memory.flush(offset, line);
            memory.fence();
        }
        if memory.load_u64(offset) != self.alive_value(position) {
            // Not published yet, or (for a reader recovered while it was paused, whose
            // `ltail` no longer holds the head) already a later lap's: the reader tells
            // the two apart by its `ltail`.
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

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Backing, PodConfig};

    fn pod() -> Arc<Pod> {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(64)
            .log_capacity_entries(64)
            .max_hosts(2)
            .join_area_bytes(0);
        Arc::new(Pod::create(&config, Backing::heap()).unwrap())
    }

    /// Claims row `host` as a joiner would (its first life), holding the head; `Ok(0)`:
    /// an early join.
    fn join(pod: &Pod, host: HostId, late_allowed: bool) -> Result<u64> {
        assert_eq!(host_table::claim_and_count(pod, host), Ok(1));
        Log::new(pod).hold_head(pod, host, 1, late_allowed)
    }

    /// A test's stand-in for host `host`'s replay (its first life).
    fn applied(pod: &Pod, host: HostId, position: u64) {
        Log::store_ltail(pod, host, 1, position);
    }

    fn ltail(pod: &Pod, host: HostId) -> Option<u64> {
        Log::ltail_of(pod, host, 1)
    }

    /// A host moving the head looks at row 0 (free), and, before it looks at row 1, host
    /// 0 joins early (the head at 0) and replays to 10, host 1 replays from 5 to 20, and
    /// another host moves the head to 10. The first must not move the head to 20, past
    /// the joiner: its look at row 0 came before the claim. (It did, by a `fetch_max` of
    /// what it found, before layout version 9.)
    #[cfg(feature = "chaos")]
    #[test]
    fn a_host_that_looked_at_a_row_before_its_claim_does_not_move_the_head_past_the_joiner() {
        use crate::chaos;
        let pod = pod();
        assert!(matches!(join(&pod, 1, false), Ok(0)));
        applied(&pod, 1, 5);
        let mut joined = false;
        let hook = {
            let pod = Arc::clone(&pod);
            move |point| {
                if point != Point::HeadLookBetweenRows || joined {
                    return;
                }
                joined = true;
                assert!(matches!(join(&pod, 0, false), Ok(0)), "an early join");
                applied(&pod, 0, 10);
                applied(&pod, 1, 20);
                let (head, _) = Log::new(&pod).advance_head(&pod, &Chaos::none());
                assert_eq!(head, 10);
            }
        };
        let log = Log::new(&pod);
        chaos::with_hook(hook, || log.advance_head(&pod, &Chaos::none()));
        let (head, joiner) = (Log::head(&pod), ltail(&pod, 0).unwrap());
        assert!(
            head <= joiner,
            "the head {head} passed the joiner's ltail {joiner}"
        );
    }

    /// A claim counted in the `head` word makes a host that loaded the word before it
    /// look again, and a move of the head starts the count again at 0.
    #[test]
    fn claims_are_counted_in_the_head_word_until_the_head_moves() {
        let pod = pod();
        let log = Log::new(&pod);
        let word = Log::head_word(&pod);
        assert!(matches!(join(&pod, 0, false), Ok(0)));
        assert!(matches!(join(&pod, 1, false), Ok(0)));
        assert_eq!(head_claims(word.load(Ordering::SeqCst)), 2);
        applied(&pod, 0, 7);
        applied(&pod, 1, 9);
        let (head, laggard) = log.advance_head(&pod, &Chaos::none());
        assert_eq!((head, laggard.map(|l| l.host)), (7, Some(0)));
        assert_eq!(word.load(Ordering::SeqCst), 7, "the count starts again");
        // The head has left 0: a join is late, or refused where the pod cannot serve one.
        host_table::release(&pod, 0, 1);
        assert_eq!(host_table::claim_and_count(&pod, 0), Ok(2));
        assert!(matches!(
            log.hold_head(&pod, 0, 2, false),
            Err(Error::LogRecycled { head: 7 })
        ));
        assert!(matches!(log.hold_head(&pod, 0, 2, true), Ok(7)));
        assert_eq!(Log::ltail_of(&pod, 0, 2), Some(7));
        assert_eq!(head_claims(word.load(Ordering::SeqCst)), 1);
    }

    /// Joins and leaves of row 0, one after another, 4,096 and more while the head
    /// stays at 0 (the ring never fills): each join is still early, whether another host
    /// has applied past 0 or none is joined. (The count stopped when full, and the joiner
    /// that found it so moved the head on: the join after the 4,095th was refused
    /// `LogRecycled` in a pod without a join area, or `LogFull` naming no host when none
    /// held the head.)
    #[test]
    fn joins_past_a_full_count_at_one_position_are_still_early() {
        for other_host in [true, false] {
            let pod = pod();
            Log::tail(&pod).store(3, Ordering::SeqCst);
            if other_host {
                assert!(matches!(join(&pod, 1, false), Ok(0)));
                applied(&pod, 1, 3);
            }
            let log = Log::new(&pod);
            for life in 1..=HEAD_CLAIMS_MAX + 2 {
                assert_eq!(host_table::claim_and_count(&pod, 0), Ok(life));
                let from = log.hold_head(&pod, 0, life, false);
                assert!(
                    matches!(from, Ok(0)),
                    "another host joined: {other_host}; join {life} of row 0: {from:?}"
                );
                host_table::release(&pod, 0, life);
            }
            assert_eq!(Log::head(&pod), 0);
        }
    }

    /// A closer looks at row 0 (free); before it looks at row 1 (host 1, applied to 5),
    /// row 0 is joined and left 4,095 times, then joined early once more and held at 0:
    /// the `head` word's count has wrapped to what the closer loaded. It must not move
    /// the head to 5, past the joiner: the claims word changed since its look began.
    #[cfg(feature = "chaos")]
    #[test]
    fn a_closer_whose_look_spans_a_wrap_of_the_count_looks_again() {
        use crate::chaos;
        let pod = pod();
        assert!(matches!(join(&pod, 1, false), Ok(0)));
        applied(&pod, 1, 5);
        let word_before = Log::head_word(&pod).load(Ordering::SeqCst);
        let mut joined = false;
        let hook = {
            let pod = Arc::clone(&pod);
            move |point| {
                if point != Point::HeadLookBetweenRows || joined {
                    return;
                }
                joined = true;
                let log = Log::new(&pod);
                for life in 1..=HEAD_CLAIMS_MAX + 1 {
                    assert_eq!(host_table::claim_and_count(&pod, 0), Ok(life));
                    assert!(matches!(log.hold_head(&pod, 0, life, false), Ok(0)));
                    if life <= HEAD_CLAIMS_MAX {
                        host_table::release(&pod, 0, life);
                    }
                }
                assert_eq!(
                    Log::head_word(&pod).load(Ordering::SeqCst),
                    word_before,
                    "the count wrapped"
                );
            }
        };
        let log = Log::new(&pod);
        chaos::with_hook(hook, || log.advance_head(&pod, &Chaos::none()));
        let joiner = Log::ltail_of(&pod, 0, HEAD_CLAIMS_MAX + 1).unwrap();
        let head = Log::head(&pod);
        assert!(
            head <= joiner,
            "the head {head} passed the joiner's ltail {joiner}"
        );
    }

    /// Every change of an `ltail` is one life's: a host declared dead whose replay runs
    /// on (its `ltail` released, or its id joined again), a server pinning a joiner that
    /// has died, a recoverer releasing a life that is gone, each changes nothing of the
    /// id's next life's word, even at the same position.
    #[test]
    fn an_ltail_changes_only_for_the_life_that_holds_it() {
        let pod = pod();
        assert_eq!(host_table::claim_and_count(&pod, 0), Ok(1));
        applied(&pod, 0, 4);
        // Life 1 is recovered; its replay runs on.
        Log::release_ltail(&pod, 0, 1);
        assert_eq!(ltail(&pod, 0), None);
        assert!(!Log::raise_own_ltail(&pod, 0, 1, 4, 9));
        assert_eq!(ltail(&pod, 0), None, "still released");
        // Life 2 holds the row at the same position 4.
        Log::store_ltail(&pod, 0, 2, 4);
        assert!(!Log::raise_own_ltail(&pod, 0, 1, 4, 9), "life 1's replay");
        assert!(!Log::pin_ltail(&pod, 0, 1, 9), "a pin of life 1");
        Log::release_ltail(&pod, 0, 1);
        assert_eq!(Log::ltail_of(&pod, 0, 2), Some(4));
        // Life 2's own changes: a pin raises it and never lowers it, its replay moves it
        // on from what it stored, its recoverer releases it.
        assert!(Log::pin_ltail(&pod, 0, 2, 6));
        assert!(Log::pin_ltail(&pod, 0, 2, 5));
        assert_eq!(Log::ltail_of(&pod, 0, 2), Some(6));
        assert!(Log::raise_own_ltail(&pod, 0, 2, 6, 8));
        Log::release_ltail(&pod, 0, 2);
        assert_eq!(Log::ltail_of(&pod, 0, 2), None);
        assert!(!Log::pin_ltail(&pod, 0, 2, 9), "released: no pin");
    }

    /// A joiner (life 1) paused past its lease after its claim and before it holds the
    /// head is recovered, and the id claimed by life 2, which holds the head. Life 1
    /// resumes: it must not take life 2's word for its own (it did, from whatever life:
    /// nothing held the head for life 2 then, and life 2's own raises all failed).
    #[test]
    fn a_joiner_recovered_before_it_holds_the_head_leaves_the_next_lifes_ltail() {
        let pod = pod();
        assert_eq!(host_table::claim_and_count(&pod, 0), Ok(1));
        host_table::condemn(&pod, 0, 1);
        assert!(host_table::release_dead(&pod, 0, std::process::id(), 1));
        assert_eq!(host_table::claim_and_count(&pod, 0), Ok(2));
        let log = Log::new(&pod);
        assert_eq!(log.hold_head(&pod, 0, 2, false).unwrap(), 0);
        let late = log.hold_head(&pod, 0, 1, false);
        assert!(
            matches!(late, Err(Error::HostDeclaredDead { host: 0, life: 1 })),
            "{late:?}"
        );
        assert_eq!(Log::ltail_of(&pod, 0, 2), Some(0), "life 2's word");
    }

    /// `log.reserve(wanted)` waiting at most `limit`, each range it announces pushed to
    /// `announced`.
    fn reserve_noting(
        log: &Log,
        pod: &Pod,
        wanted: RangeInclusive<u64>,
        limit: Duration,
        announced: &mut Vec<(u64, u64)>,
    ) -> Result<(u64, u64)> {
        let announce = |from, end| {
            announced.push((from, end));
            Ok(())
        };
        log.reserve(pod, wanted, limit, &Chaos::none(), announce, || Ok(()))
    }

    /// Once its wait is over, a reservation takes what fits, down to the fewest it
    /// wants, and announces just those positions; with less room than that (or none) it
    /// is refused and takes nothing.
    #[test]
    fn a_reservation_takes_what_fits_once_its_wait_is_over() {
        let pod = pod();
        let log = Log::new(&pod);
        let capacity = log.capacity();
        // Nobody holds the head at 0: two positions free.
        Log::tail(&pod).store(capacity - 2, Ordering::SeqCst);
        let mut announced = Vec::new();
        let mut reserve =
            |wanted| reserve_noting(&log, &pod, wanted, Duration::ZERO, &mut announced);
        assert!(matches!(reserve(3..=4), Err(Error::LogFull { .. })));
        assert!(matches!(reserve(1..=4), Ok((p, 2)) if p == capacity - 2));
        assert!(matches!(reserve(1..=1), Err(Error::LogFull { .. })));
        assert_eq!(announced, [(capacity - 2, capacity)], "only what it took");
        assert_eq!(load(Log::tail(&pod), Ordering::SeqCst), capacity);
    }

    /// A reservation past the positions the `head` word can count is refused by name.
    #[test]
    fn a_log_out_of_positions_refuses_the_reservation() {
        let pod = pod();
        let log = Log::new(&pod);
        let last = Log::MAX_POSITION - 1;
        Log::tail(&pod).store(last, Ordering::SeqCst);
        Log::head_word(&pod).store(last, Ordering::SeqCst);
        let reserve = |count| {
            log.reserve(
                &pod,
                count..=count,
                Duration::ZERO,
                &Chaos::none(),
                |_, _| Ok(()),
                || Ok(()),
            )
        };
        assert!(matches!(reserve(1), Ok((p, 1)) if p == last));
        assert!(matches!(
            reserve(1),
            Err(Error::LogExhausted { tail, .. }) if tail == Log::MAX_POSITION
        ));
    }

    /// A batch that runs into the last position takes what is left of the positions, as
    /// it takes what fits of a full log, and is refused only with fewer left than the
    /// fewest it wants: room for the whole never comes. (It was refused whole at once,
    /// while one whose wait began lower took what was left once its wait was over.)
    #[test]
    fn a_batch_at_the_last_positions_takes_what_is_left_of_them() {
        let pod = pod();
        let log = Log::new(&pod);
        let first = Log::MAX_POSITION - 2;
        Log::tail(&pod).store(first, Ordering::SeqCst);
        Log::head_word(&pod).store(first, Ordering::SeqCst);
        let mut announced = Vec::new();
        let mut reserve =
            |wanted| reserve_noting(&log, &pod, wanted, Duration::from_secs(5), &mut announced);
        let started = std::time::Instant::now();
        assert!(matches!(
            reserve(3..=4),
            Err(Error::LogExhausted { tail, .. }) if tail == first
        ));
        let taken = reserve(1..=4);
        assert!(matches!(taken, Ok((p, 2)) if p == first), "{taken:?}");
        // Well within the limit: a wait for positions that never come waits all of it.
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "no wait for positions that never come"
        );
        assert_eq!(announced, [(first, Log::MAX_POSITION)], "what it took");
        assert_eq!(load(Log::tail(&pod), Ordering::SeqCst), Log::MAX_POSITION);
    }
}
