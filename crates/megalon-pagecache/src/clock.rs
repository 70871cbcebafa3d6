//! Eviction: a CLOCK hand over the pod's slots (the paper's section 5: eviction = delete).
//!
//! Every slot has an access count (a byte in the application LNR, bumped on each access
//! without atomics, so it may lose updates; it is a hint) and an owner line (the key of the
//! page admitted into the slot, written by the admitter under the page's admission lock).
//! One hand position, shared by every host, lives in the SCR; each step takes the next
//! slot with one `fetch_add`. A step:
//!
//! 1. reads the slot's owner line (after invalidating it: another host may have written
//!    it); no key: next slot;
//! 2. reads the count (after invalidating its line); nonzero: decrement, next slot;
//! 3. try-locks the page's admission lock (never waits: the caller may be an admission
//!    that reserved room before its own lock, and a wait here could only slow it);
//! 4. checks with `lookup` that the key still lives in this slot: the owner line may be
//!    stale (the page evicted, the slot reused by a page whose admitter has not written
//!    the line yet, or free);
//! 5. deletes the page. The core calls the release hook first (with the record locked),
//!    which writes a dirty page back; a refused release (its file not open here, a failed
//!    write) leaves the page cached, and the hand moves on, as it does past a page whose
//!    record a writer holds past the wait limit.
//!
//! A sweep gives up after `MAX_ACCESS_COUNT + 2` turns of the clock without a victim.
//! Before it does, it names in their owner lines the pages whose lines do not name them
//! (their admitter died, or failed, between its create and its line: the hand could
//! never find them), and if it named any, turns once more.

use crate::admission_lock::AdmissionLock;
use crate::cache::Inner;
use crate::error::{Error, Result};
use crate::layout::{OWNER_BYTES, OWNER_MAGIC};
use crate::page::PAGE_KEY_BYTES;
use crate::stats::Counter;
use megalon_core::Backoff;

/// The most an access count holds: a page accessed this often survives this many turns
/// of the hand.
pub const MAX_ACCESS_COUNT: u8 = 3;

/// What a sweep of the hand did.
pub(crate) enum Swept {
    /// It evicted a page.
    Evicted,
    /// It found nothing to evict; `refusal` is the last release a hook refused, if any.
    Nothing { refusal: Option<Error> },
}

impl Inner {
    /// Bumps the access count of the slot at `slot_offset` (sloppy: no atomics, so two
    /// hosts may lose each other's updates, as may a hand that decrements a neighbour).
    pub(crate) fn touch(&self, slot_offset: u64) {
        let regions = &self.shared.regions;
        let at = regions.count(regions.slot_at(slot_offset));
        let memory = self.host.memory();
        let mut count = [0u8];
        memory.read(at, &mut count);
        if count[0] < MAX_ACCESS_COUNT {
            // Straight to memory, for the other hosts' hands, and only this byte (a line
            // written back would put its neighbours' counts back as this host last saw
            // them); no fence: a hint may be late.
            memory.write_non_temporal(at, &[count[0] + 1]);
        }
    }

    /// Writes `key` into `slot`'s owner line and zeroes its count; called by the admitter
    /// with the page's admission lock held, `lock`, right after a lookup found the page in
    /// `slot`. Returns whether it wrote: not if the lock is no longer this host's. (The
    /// lookup's catch-up is a pause: a host paused there past its lease was declared dead
    /// and recovered, another took the lock over, evicted the page and admitted another
    /// into the slot, and the resumed host, its replica behind, named its page in the
    /// line over the other's, which the hand then never found.)
    pub(crate) fn set_owner(
        &self,
        slot: u64,
        key: &[u8; PAGE_KEY_BYTES],
        lock: &AdmissionLock<'_>,
    ) -> bool {
        if !self.still_holds(lock) {
            return false;
        }
        let regions = &self.shared.regions;
        let at = regions.owner(slot);
        let memory = self.host.memory();
        let mut line = [0u8; OWNER_BYTES];
        line[..PAGE_KEY_BYTES].copy_from_slice(key);
        line[PAGE_KEY_BYTES..].copy_from_slice(&OWNER_MAGIC.to_le_bytes());
        // Straight to memory, never left in this host's cache (an admitter killed here
        // would leave the line to land over a later admitter's).
        memory.write_non_temporal(at, &line);
        let count = regions.count(slot);
        memory.write_non_temporal(count, &[0]);
        // The line reaches memory before the admission lock's release: an eviction of the
        // page (which takes the lock next) then a reuse of the slot come after it.
        memory.fence();
        true
    }

    /// The key `slot`'s owner line names, read from memory.
    fn owner(&self, slot: u64) -> Option<[u8; PAGE_KEY_BYTES]> {
        let at = self.shared.regions.owner(slot);
        let memory = self.host.memory();
        memory.flush(at, OWNER_BYTES);
        memory.fence();
        let mut line = [0u8; OWNER_BYTES];
        memory.read(at, &mut line);
        let magic = u64::from_le_bytes(line[PAGE_KEY_BYTES..].try_into().expect("8 bytes"));
        (magic == OWNER_MAGIC).then(|| line[..PAGE_KEY_BYTES].try_into().expect("16 bytes"))
    }

    /// Decrements `slot`'s access count if it is nonzero; returns whether it was.
    fn age(&self, slot: u64) -> bool {
        let at = self.shared.regions.count(slot);
        let memory = self.host.memory();
        // Our own bumps go to memory, and other hosts' become visible.
        memory.flush(at, 1);
        memory.fence();
        let mut count = [0u8];
        memory.read(at, &mut count);
        if count[0] == 0 {
            return false;
        }
        memory.write_non_temporal(at, &[count[0] - 1]);
        true
    }

    /// Deletes page `key`, which the caller checked is cached and holds the admission lock
    /// of. Returns whether this call deleted it. A page whose record a writer holds locked
    /// is waited for, up to the wait limit, if `wait` says so; otherwise it answers
    /// `RecordBusy` after one look (the hand, which passes over a busy page: it waited a
    /// whole limit on each, one after another).
    fn delete(&self, key: &[u8; PAGE_KEY_BYTES], wait: bool) -> Result<bool> {
        let deleted = || {
            self.shared.counters.add(Counter::Evictions);
            Ok(true)
        };
        self.shared.clear_refusal();
        let called = std::time::Instant::now();
        let result = if wait {
            self.host.delete(key)
        } else {
            self.host.delete_unless_busy(key)
        };
        match result {
            Ok(()) => deleted(),
            Err(megalon_core::Error::UnknownKey) => Ok(false),
            // Answered before anything reached the log.
            Err(error @ megalon_core::Error::RecordBusy { .. }) => Err(error.into()),
            // The hook's own refusal, handed to this thread: `last_error` may hold another
            // thread's error by now (the background writer's, another eviction's).
            Err(megalon_core::Error::ReleaseRefused { record }) => Err(self
                .shared
                .take_refusal()
                .unwrap_or(Error::Core(megalon_core::Error::ReleaseRefused { record }))),
            // The delete may have reached the log (its append was not confirmed): if it
            // took effect, the page is gone.
            Err(error) => match self.cached_after_failure(key, called)? {
                Some(false) => deleted(),
                _ => Err(error.into()),
            },
        }
    }

    /// After a create or a delete of page `key` answered an error, holding its admission
    /// lock (nobody else creates or deletes it): whether the page is cached once this host
    /// has applied every entry the log had reserved when the error came back (the call's
    /// entry, if it reached the log, is one of them), waiting at most what is left of the
    /// wait limit since the call was `called`: the call's own wait for its entry's outcome
    /// (a hole another host leaves, say) is part of that one limit. (It waited a limit of
    /// its own after the call's: two in all.) `None`: the log did not get there in time,
    /// and what the call did stays unknown.
    pub(crate) fn cached_after_failure(
        &self,
        key: &[u8; PAGE_KEY_BYTES],
        called: std::time::Instant,
    ) -> Result<Option<bool>> {
        let (_, _, tail) = self.host.inspect().log_cursors();
        let left = self
            .host
            .options()
            .wait_limit
            .saturating_sub(called.elapsed());
        let mut wait = Backoff::new(left);
        loop {
            let applied = match self.host.replay() {
                Ok(applied) => applied,
                // `replay` applies the log, then serves the slot requests it found: a
                // grant whose append failed is not this call's to answer (a later round
                // serves it), and the log was applied.
                Err(error) => {
                    let applied = self.host.inspect().applied_position();
                    if applied < tail {
                        return Err(error.into());
                    }
                    applied
                }
            };
            if applied >= tail {
                return Ok(Some(self.host.lookup(key)?.is_some()));
            }
            if !wait.snooze() {
                return Ok(None);
            }
        }
    }

    /// Evicts page `key` if it is cached; returns whether it was.
    pub(crate) fn evict_page(&self, key: &[u8; PAGE_KEY_BYTES]) -> Result<bool> {
        let _lock = self.lock_page(key)?;
        if self.host.lookup(key)?.is_none() {
            return Ok(false);
        }
        self.delete(key, true)
    }

    /// Runs the hand until it evicts a page, within the wait limit. Returns `false` if no
    /// page is cached.
    pub(crate) fn evict_one(&self) -> Result<bool> {
        let mut wait = Backoff::new(self.host.options().wait_limit);
        loop {
            if self.pages_in_use()? == 0 {
                return Ok(false);
            }
            match self.sweep()? {
                Swept::Evicted => return Ok(true),
                Swept::Nothing { refusal } => {
                    if !wait.snooze() {
                        return Err(refusal.unwrap_or(Error::NoVictim {
                            cached_pages: self.pages_in_use()?,
                            capacity_pages: self.capacity_pages,
                            waited_ms: wait.waited_ms(),
                        }));
                    }
                }
            }
        }
    }

    /// Moves the hand until it evicts a page or has turned `MAX_ACCESS_COUNT + 2` times
    /// (then repairs the owner lines, and if it named a page, turns as many times again).
    pub(crate) fn sweep(&self) -> Result<Swept> {
        match self.turn(None)? {
            Swept::Nothing { refusal } if self.name_unnamed_pages()? == 0 => {
                Ok(Swept::Nothing { refusal })
            }
            // The first turn's refusal goes on into the second, as one met earlier in a
            // turn does: answered if nothing is evicted, kept for `take_error` if a page
            // is (the second turn may evict the page just named before it meets the
            // refused one again).
            Swept::Nothing { refusal } => self.turn(refusal),
            evicted => Ok(evicted),
        }
    }

    /// Names in its slot's owner line every page whose line does not name it, under the
    /// page's admission lock (a page an admission holds the lock of is being named by
    /// it). Returns how many it named.
    fn name_unnamed_pages(&self) -> Result<u64> {
        // Caught up with the log first: the snapshot then names every page created so far.
        self.host.object_count()?;
        let mut named = 0;
        for (key, entry) in self.host.inspect().replica_snapshot() {
            let Ok(key) = <[u8; PAGE_KEY_BYTES]>::try_from(&key[..]) else {
                continue;
            };
            if self.owner(entry.slot) == Some(key) {
                continue;
            }
            let Some(lock) = self.try_lock_page(&key) else {
                continue;
            };
            match self.host.lookup(&key)? {
                Some(now) if now.slot == entry.slot && self.set_owner(entry.slot, &key, &lock) => {
                    named += 1
                }
                _ => continue,
            }
        }
        Ok(named)
    }

    /// The hand's moves of [`Inner::sweep`], until it evicts a page or has turned
    /// `MAX_ACCESS_COUNT + 2` times; `refusal`, a refused release met before.
    fn turn(&self, mut refusal: Option<Error>) -> Result<Swept> {
        let regions = &self.shared.regions;
        let hand = self.shared.pod.scr_u64(regions.hand);
        let steps = regions.slot_count * (u64::from(MAX_ACCESS_COUNT) + 2);
        for _ in 0..steps {
            // Relaxed: the position only spreads the hosts' steps over the slots; what a
            // slot holds is checked through the log (`lookup`) before anything is done.
            let slot = hand.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % regions.slot_count;
            let Some(key) = self.owner(slot) else {
                continue;
            };
            if self.age(slot) {
                continue;
            }
            let Some(_lock) = self.try_lock_page(&key) else {
                continue;
            };
            match self.host.lookup(&key)? {
                Some(entry) if entry.slot == slot => {}
                _ => continue,
            }
            match self.delete(&key, false) {
                Ok(true) => {
                    if let Some(error) = refusal {
                        // Nobody else will be told: keep it for `take_error`.
                        self.shared.remember(error);
                    }
                    return Ok(Swept::Evicted);
                }
                Ok(false) => {}
                // A writer holds the page's record (a write in progress, or one
                // descheduled): a page locked now is passed over at once, as one whose
                // admission lock is held; the caller's wait covers the whole sweep.
                Err(Error::Core(megalon_core::Error::RecordBusy { .. })) => {}
                Err(
                    error @ (Error::FileNotOpen { .. }
                    | Error::Io { .. }
                    | Error::Core(megalon_core::Error::ReleaseRefused { .. })),
                ) => refusal = Some(error),
                Err(error) => return Err(error),
            }
        }
        Ok(Swept::Nothing { refusal })
    }
}
