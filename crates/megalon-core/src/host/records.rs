//! Coherence records, from this host's side: finding and claiming a free record,
//! allocating it through the log, deallocating (reclaim, make read-shared) and freeing,
//! with the release hook asked first.

use super::width::Gate;
use super::{Host, Settle, Shared};

use crate::chaos::Point;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ids::HostId;
use crate::memory::cxl::ScrAccess;
use crate::mutants::{self, Step};
use crate::record::{RecordShape, RecordWord, Records};
use crate::replica::Outcome;
use crate::sync::{AtomicU64, Ordering};

/// Records the log says are free that a claim tries per round (a taken one costs a load).
const FREE_RECORD_TRIES: u32 = 16;
/// Random probes of the whole array per round, for a record freed without an event (an
/// alloc refused before it reached the log).
const FREE_RECORD_PROBES: u32 = 4;
/// Records the reclaimer samples to choose one to deallocate.
const RECLAIM_SAMPLES: u32 = 8;
/// Rounds of sampling a synchronous reclaim tries before giving up.
const RECLAIM_ROUNDS: u32 = 64;
/// Rounds of a synchronous reclaim that take only records of objects in CXL; from then on
/// a round that samples only records of objects in hosts' DRAM brings one back to CXL and
/// takes its record (with local partitions, every record may be held by objects in DRAM,
/// whose writes there use none, and a write needing one failed with
/// `ScrRecordsExhausted`).
const RECLAIM_ROUNDS_BEFORE_BRING_BACK: u32 = 4;
/// Records the background reclaimer frees per pump round at most.
const RECLAIM_BATCH: u32 = 32;

/// The records the log says are free, as this host's replica has applied it: every
/// record starts free; an alloc that wins takes its record out; a dealloc or a delete that
/// frees one puts it back. In DRAM, and a hint only: the record's word decides (a claim
/// loads it and CASes it from free). It runs ahead of the words (a record whose alloc is
/// on its way is claimed already; one whose release is applied is freed a moment later)
/// and misses nothing for long: every way a record becomes free or taken is in the log.
///
/// A bit per record and a summary bit per 64 of them (set while any of the 64 is free): a
/// few bits of DRAM per record, and a pick that looks at a summary word, a word and a bit.
#[derive(Debug, Default)]
pub(super) struct FreeRecords {
    words: Vec<u64>,
    summary: Vec<u64>,
    len: usize,
}

/// A set bit of `word` (which has one), chosen with `rng`.
fn any_set_bit(word: u64, rng: &mut u64) -> u32 {
    let turn = (next_random(rng) % 64) as u32;
    (word.rotate_right(turn).trailing_zeros() + turn) % 64
}

impl FreeRecords {
    /// Every one of `count` records free.
    pub(super) fn new(count: u64) -> Self {
        let words = count.div_ceil(64) as usize;
        let mut free = FreeRecords {
            words: vec![u64::MAX; words],
            summary: vec![u64::MAX; words.div_ceil(64)],
            len: count as usize,
        };
        // Past the last record and the last word: nothing.
        if !count.is_multiple_of(64) {
            free.words[words - 1] = (1 << (count % 64)) - 1;
        }
        if !words.is_multiple_of(64) {
            free.summary[words / 64] = (1 << (words % 64)) - 1;
        }
        free
    }

    /// Free records known.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// A free record, chosen with `rng`: a random summary word on, the first with a free
    /// record, then a random one of its words' and of that word's free records.
    fn pick(&self, rng: &mut u64) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let start = (next_random(rng) % self.summary.len() as u64) as usize;
        let s = (0..self.summary.len())
            .map(|i| (start + i) % self.summary.len())
            .find(|&s| self.summary[s] != 0)?;
        let w = s * 64 + any_set_bit(self.summary[s], rng) as usize;
        let bit = any_set_bit(self.words[w], rng);
        Some((w * 64) as u32 + bit)
    }

    /// `record` is free (its release was applied).
    pub(super) fn insert(&mut self, record: u32) {
        let (w, bit) = (record as usize / 64, record % 64);
        if self.words[w] & 1 << bit == 0 {
            self.words[w] |= 1 << bit;
            self.summary[w / 64] |= 1 << (w % 64);
            self.len += 1;
        }
    }

    /// `record` is taken (its alloc won).
    pub(super) fn remove(&mut self, record: u32) {
        let (w, bit) = (record as usize / 64, record % 64);
        if self.words[w] & 1 << bit != 0 {
            self.words[w] &= !(1 << bit);
            if self.words[w] == 0 {
                self.summary[w / 64] &= !(1 << (w % 64));
            }
            self.len -= 1;
        }
    }
}

/// Why an object is losing its coherence record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// It turns read-shared: reclaimed (background or to make room) or
    /// [`Host::make_read_shared`].
    MakeReadShared,
    /// It is being deleted.
    Delete,
}

/// An object about to lose its coherence record, handed to the host's
/// [`ReleaseHook`](crate::ReleaseHook) with the record locked by the caller: no write can
/// start on it until the hook returns, and the last write's bytes are in memory.
pub struct Releasing<'a> {
    shared: &'a Shared,
    key: &'a [u8],
    record: u32,
    offset: u64,
    len: usize,
    reason: ReleaseReason,
}

impl Releasing<'_> {
    /// The object's key.
    pub fn key(&self) -> &[u8] {
        self.key
    }

    /// The record it is losing (locked now).
    pub fn record(&self) -> u32 {
        self.record
    }

    /// Why.
    pub fn reason(&self) -> ReleaseReason {
        self.reason
    }

    /// Copies the object's first `buf.len()` bytes (at most the slot size) into `buf`,
    /// from memory: this host's cached lines of it are invalidated first.
    pub fn read(&self, buf: &mut [u8]) {
        let len = buf.len().min(self.len);
        self.shared.memory.flush(self.offset, len);
        // The invalidation is done before the loads; the lock's acquire (our CAS) already
        // ordered them after the last writer's release.
        self.shared.memory.fence();
        self.shared.memory.read(self.offset, &mut buf[..len]);
    }

    /// Whether the caller still holds the record's lock: `false` once this host knows it
    /// was declared dead (paused past its lease, or its pump died) in a pod with undo
    /// images, where its recovery may have unlocked the record and others may have
    /// written the object since. As [`WriteTicket::still_held`](crate::WriteTicket::still_held):
    /// look before acting on the lock's behalf outside the object.
    pub fn still_held(&self) -> bool {
        let held = !self.shared.left_to_recovery();
        if held {
            self.shared.chaos.point(Point::HeldAfterLook);
        }
        held
    }
}

/// Who reclaims a record, and how far it may go.
#[derive(Clone, Copy)]
pub(super) enum Reclaim<'a> {
    /// The pump's reclaimer: a choice, on the thread that must keep beating; it waits for
    /// no announce word and brings no object back from a host's DRAM.
    Background,
    /// A claim that found no free record: it waits for an announce word, and with
    /// `bring_back` it may have an object brought back from a host's DRAM for its record,
    /// but not from what `skip` names (failed once in this claim already).
    ForClaim {
        bring_back: bool,
        skip: &'a BringBackSkip,
    },
}

/// What a claim's bring-backs that failed rule out for the rest of the claim.
#[derive(Default)]
pub(super) struct BringBackSkip {
    /// Holders that did not bring one back (unresponsive, failing): each is asked once
    /// per claim, as each such ask waits up to the wait limit.
    holders: Vec<HostId>,
    /// Records of objects a writer of their holder had (busy): asked once, without waiting.
    records: Vec<u32>,
}

/// What one [`Shared::reclaim_one`] did.
pub(super) enum Reclaimed {
    /// A record was deallocated (its release is in the log).
    Freed,
    /// Nothing this time.
    Nothing,
    /// Bringing an object back from this holder's DRAM failed (not answering, failing).
    BringBackFailed(HostId),
    /// The object of this record was busy in its holder's DRAM (a writer there has it).
    BringBackBusy(u32),
}

/// A small xorshift for picking records at random (per thread; quality hardly matters).
fn next_random(state: &mut u64) -> u64 {
    if *state == 0 {
        *state = 0x9e37_79b9_7f4a_7c15;
    }
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

impl Host {
    /// Makes object `key` read-shared: deallocates its coherence record (through the log)
    /// if it has one and no write is in progress. Returns whether it did. The reclaimer
    /// does this to the least-written objects when records run short.
    pub fn make_read_shared(&self, key: &[u8]) -> Result<bool> {
        self.shared.check_key(key)?;
        self.shared.with_counters(|c| {
            let mut brought_back = 0;
            loop {
                self.shared.catch_up()?;
                let (entry, shape) = {
                    let index = self.shared.replica.read();
                    (index.lookup(key), index.shape())
                };
                let Some(entry) = entry else {
                    return Err(Error::UnknownKey);
                };
                if let Some(owner) = entry.local_owner {
                    // In a host's DRAM: its bytes in CXL are old. Back first.
                    self.shared
                        .bring_back_counted(owner, key, &mut brought_back, c)?;
                    continue;
                }
                return match entry.record {
                    Some(record) => self.shared.deallocate(key, record, shape, c, true),
                    None => Ok(false),
                };
            }
        })
    }

    /// The key of the object that holds `record`, as this host's replica knows it after
    /// catching up with the log; `None` if no object does (free, or claimed by an
    /// allocation whose event is not in the log yet).
    pub fn record_owner(&self, record: u32) -> Result<Option<Vec<u8>>> {
        self.shared.catch_up()?;
        Ok(self.shared.replica.read().record_owner_key(record))
    }
}

impl Shared {
    /// The record array at the width this host's replica has applied last (a width
    /// switch applied after it leaves its record ids to another array: ask again).
    pub(super) fn records(&self) -> Records<'_> {
        Records::of(&self.pod, self.replica.shape())
    }

    /// The count of records in use, kept in the reclaimer's line of the SCR.
    pub(super) fn records_in_use(&self) -> &AtomicU64 {
        self.pod.scr_u64(self.pod.layout().reclaimer_offset)
    }

    /// Allocates a record for `key` through the log. Returns the record to write with
    /// when a mutant skips using the winner's; normally `None`: look the key up again.
    pub(super) fn allocate_record(&self, key: &[u8], c: &ThreadCounters) -> Result<Option<u32>> {
        let (record, claimed, hold, shape) = self.claim_record(c)?;
        self.chaos.point(Point::AllocAfterClaim);
        // A refused alloc frees the record; one whose outcome we miss keeps it if it won.
        let settle = Settle::Claimed {
            record,
            claimed,
            hold,
            shape,
        };
        let alloc = Event::RecordAlloc {
            key,
            record,
            epoch: shape.epoch,
        };
        match self.submit_settled(&alloc, settle)? {
            Outcome::RecordAllocated => {
                self.end_hold_of(hold);
                c.add(Counter::RecordAllocs, 1);
                Ok(None)
            }
            Outcome::RecordAllocStale => {
                // A width switch freed the record (zeroed its word): look again.
                self.end_hold_of(hold);
                c.add(Counter::RecordAllocsLost, 1);
                Ok(None)
            }
            Outcome::RecordAllocLost { .. } => {
                c.add(Counter::RecordAllocsLost, 1);
                if mutants::skipped(Step::AllocLoserUsesWinnersRecord) {
                    self.end_hold_of(hold);
                    return Ok(Some(record));
                }
                c.add_scr_at(
                    || Records::of(&self.pod, shape).address(record),
                    ScrAccess::Update,
                );
                self.free_claimed(record, claimed, hold, shape);
                Ok(None)
            }
            _ => {
                c.add_scr_at(
                    || Records::of(&self.pod, shape).address(record),
                    ScrAccess::Update,
                );
                self.free_claimed(record, claimed, hold, shape);
                Err(Error::UnknownKey)
            }
        }
    }

    /// Claims a free record: one the log says is free ([`FreeRecords`], chosen at
    /// random so that hosts do not all try the same one), then a few random probes if the
    /// count says some are free; when none is found, deallocates another object's record
    /// (churn), whose release the log then shows free. Never scans the array: a claim
    /// costs a bounded number of SCR loads and CASes whatever the array's size. Returns
    /// the record, its claimed word, the claim's announce (pods with undo images) and the
    /// record width the record is of.
    pub(super) fn claim_record(
        &self,
        c: &ThreadCounters,
    ) -> Result<(u32, RecordWord, Option<u64>, RecordShape)> {
        let mut records = self.records();
        // A wait for a width switch under way (pods whose width may switch).
        let mut backoff = None;
        let mut rng = c.random_seed();
        let mut churned = false;
        // Holders and objects that did not come back: not asked again in this claim; the
        // others may still be.
        let mut skip = BringBackSkip::default();
        for round in 0..RECLAIM_ROUNDS {
            // Taken for this round's claims and let go before the deallocation below,
            // which needs one of its own: a thread holds one announce word at a time here,
            // so threads waiting for one never wait on each other's.
            let hold = self.take_hold()?;
            // The gate, raised for the round's claims (a pod whose width may switch): the
            // array at the width the candidates are of.
            let gate = loop {
                records = self.records();
                if let Some(gate) = self.pass_gate(records.shape(), &mut backoff, c)? {
                    break gate;
                }
            };
            let count = records.count();
            let mut candidates =
                Vec::with_capacity((FREE_RECORD_TRIES + FREE_RECORD_PROBES) as usize);
            {
                let free = self.free_records.lock();
                // (A width switch applied since `records` was read rebuilt the set for
                // another count: only ids of this array.)
                candidates.extend(
                    (0..FREE_RECORD_TRIES.min(free.len() as u32))
                        .filter_map(|_| free.pick(&mut rng))
                        .filter(|&record| u64::from(record) < count),
                );
            }
            if self.records_in_use().load(Ordering::Relaxed) < count {
                candidates.extend(
                    (0..FREE_RECORD_PROBES).map(|_| (next_random(&mut rng) % count) as u32),
                );
            }
            for record in candidates {
                let word = records.load(record);
                c.add_scr_at(|| records.address(record), ScrAccess::Load);
                if word.in_use {
                    continue;
                }
                let claimed = RecordWord {
                    in_use: true,
                    ..word
                };
                if !self.announce(&hold, &records, record, claimed)? {
                    // Under recovery: another candidate.
                    continue;
                }
                c.add_scr_at(|| records.address(record), ScrAccess::Update);
                // Counted before the CAS, taken back if it fails: a claimer killed between
                // its CAS and its count left a claim that its recovery frees and takes
                // off the count, which never had it (the count wrapped below 0). Killed
                // between the count and the CAS, the count is one high instead, as for a
                // free whose holder died before it took its record off.
                self.records_in_use().fetch_add(1, Ordering::Relaxed);
                self.chaos.point(Point::ClaimBeforeCas);
                let won = if mutants::skipped(Step::ClaimByCas) {
                    records.store(record, claimed);
                    true
                } else {
                    records.compare_exchange(record, word, claimed).is_ok()
                };
                if won {
                    self.chaos.point(Point::ClaimAfterCas);
                    c.set_random_seed(rng);
                    if churned {
                        c.add(Counter::Churn, 1);
                    }
                    drop(gate);
                    return Ok((record, claimed, hold.into_index(), records.shape()));
                }
                self.records_in_use().fetch_sub(1, Ordering::Relaxed);
            }
            // Nothing free: make a record free (it may be claimed by someone else first).
            // After a few rounds that found only records of objects in hosts' DRAM
            // (whose writes there use no record), one of those comes back to CXL first.
            drop(gate);
            drop(hold);
            // One that fails (a holder busy or not answering) is not tried again: each
            // waits up to the wait limit.
            let bring_back = round >= RECLAIM_ROUNDS_BEFORE_BRING_BACK;
            let how = Reclaim::ForClaim {
                bring_back,
                skip: &skip,
            };
            match self.reclaim_one(&mut rng, c, how)? {
                Reclaimed::Freed => churned = true,
                Reclaimed::Nothing => {}
                Reclaimed::BringBackFailed(owner) => skip.holders.push(owner),
                Reclaimed::BringBackBusy(record) => skip.records.push(record),
            }
            // Its release is in the log: apply it, so that the record is a candidate.
            self.catch_up()?;
        }
        c.set_random_seed(rng);
        Err(Error::ScrRecordsExhausted {
            records: records.count(),
            in_use: self.records_in_use().load(Ordering::Relaxed),
        })
    }

    /// Samples a few records and deallocates the least written unlocked one this replica
    /// knows the owner of, in CXL (or, as `how` allows, one brought back from a host's
    /// DRAM first).
    pub(super) fn reclaim_one(
        &self,
        rng: &mut u64,
        c: &ThreadCounters,
        how: Reclaim<'_>,
    ) -> Result<Reclaimed> {
        let records = self.records();
        let count = records.count();
        let mut sampled: Vec<(u32, RecordWord)> = Vec::with_capacity(RECLAIM_SAMPLES as usize);
        for _ in 0..RECLAIM_SAMPLES {
            let record = (next_random(rng) % count) as u32;
            let word = records.load(record);
            c.add_scr_at(|| records.address(record), ScrAccess::Load);
            if word.in_use && !word.locked {
                sampled.push((record, word));
            }
        }
        if sampled.is_empty() {
            return Ok(Reclaimed::Nothing);
        }
        sampled.sort_unstable_by_key(|&(_, word)| word.counter);
        self.catch_up()?;
        // The least written whose object this replica knows and is not in a host's DRAM:
        // a deallocation leaves such an object alone (a move holds its record), and its
        // counter, which its writes in DRAM do not move, made it the least written of
        // every sample (with local partitions, every round of a claim picked one and
        // deallocated nothing, and the claim ran out of rounds: `ScrRecordsExhausted`
        // with records to reclaim).
        //
        // Else (`bring_back`: a claim that found nothing else for a few rounds) the least
        // written of an object in a host's DRAM, once its holder moved it back.
        let mut in_dram = None;
        let owned = {
            let replica = self.replica.read();
            sampled.iter().find_map(|&(record, _)| {
                // Without an owner: claimed by an alloc whose event is still on its way,
                // not ours to take.
                let key = replica.record_owner_key(record)?;
                match replica.lookup(&key).and_then(|entry| entry.local_owner) {
                    Some(owner) => {
                        let failed = match how {
                            Reclaim::ForClaim { skip, .. } => {
                                skip.holders.contains(&owner) || skip.records.contains(&record)
                            }
                            Reclaim::Background => false,
                        };
                        if !failed {
                            in_dram.get_or_insert((record, key, owner));
                        }
                        None
                    }
                    None => Some((record, key)),
                }
            })
        };
        let (record, key) = match (owned, in_dram, how) {
            (Some(owned), ..) => owned,
            (
                None,
                Some((record, key, owner)),
                Reclaim::ForClaim {
                    bring_back: true, ..
                },
            ) => {
                // Asked once, without waiting for a writer of the holder's that has it:
                // another object may come back in its place.
                match self.bring_back_unless_busy(owner, &key, c) {
                    Ok(()) => {}
                    Err(error @ Error::HostDeclaredDead { .. }) => return Err(error),
                    Err(Error::LocalObjectBusy { .. }) => {
                        return Ok(Reclaimed::BringBackBusy(record))
                    }
                    // Unresponsive, failing, ...: the caller asks that holder no more.
                    Err(_) => return Ok(Reclaimed::BringBackFailed(owner)),
                }
                // The deallocation makes sure, under the record's lock, that the object
                // is in CXL and still has the record (its holder may have moved it back
                // to its DRAM already).
                (record, key)
            }
            _ => return Ok(Reclaimed::Nothing),
        };
        let wait_for_hold = matches!(how, Reclaim::ForClaim { .. });
        Ok(
            if self.deallocate(&key, record, records.shape(), c, wait_for_hold)? {
                Reclaimed::Freed
            } else {
                Reclaimed::Nothing
            },
        )
    }

    /// Makes `key` read-shared: locks `record` (of the width `shape`), appends the dealloc
    /// event, and frees the record once the event is applied here. Returns whether it
    /// did (not while a switch of the width is under way, or past `shape`).
    pub(super) fn deallocate(
        &self,
        key: &[u8],
        record: u32,
        shape: RecordShape,
        c: &ThreadCounters,
        wait_for_hold: bool,
    ) -> Result<bool> {
        let records = Records::of(&self.pod, shape);
        let word = records.load(record);
        c.add_scr_at(|| records.address(record), ScrAccess::Load);
        // Lock without changing the counter: no write happens; the event tells readers.
        // A locked record (a write or another deallocation in progress) is left alone.
        let lock = !mutants::skipped(Step::LockBeforeDealloc);
        if !word.in_use || (lock && word.locked) {
            return Ok(false);
        }
        let locked = RecordWord {
            locked: lock,
            ..word
        };
        // Freed on every way out before the settle takes it (after any unlock).
        // A reclaim is a choice (and may run on the pump, which must keep beating): it
        // does not wait for an announce word.
        let hold = if wait_for_hold {
            self.take_hold()?
        } else {
            match self.try_take_hold() {
                Some(hold) => hold,
                None => return Ok(false),
            }
        };
        if lock {
            // The gate, as a write's; a reclaim is a choice: it does not wait for a switch.
            let Gate::Open(gate) = self.enter_gate(shape, c) else {
                return Ok(false);
            };
            // Under recovery, or busy: another record.
            if !self.announce(&hold, &records, record, locked)? {
                return Ok(false);
            }
            c.add_scr_at(|| records.address(record), ScrAccess::Update);
            let taken = records.compare_exchange(record, word, locked).is_ok();
            drop(gate);
            if !taken {
                // Its announce goes before the hold drops, as a delete's
                // (`lock_for_delete`): the winner's lock may be the very word.
                self.withdraw(&hold);
                return Ok(false);
            }
        }
        self.chaos.point(Point::ReleaseAfterLock);
        // From here on the record is ours: every way out frees or restores it.
        // The lookup that named the record may be stale (it was deallocated since, and
        // allocated to another object): holding the lock, make sure the object still has
        // it before the release hook hears that it loses it (the dealloc event would be
        // ignored, but the hook would act on another object's record, unlocked).
        if lock && !mutants::skipped(Step::DeallocChecksItsRecordAfterLock) {
            let still_its = self.catch_up().map(|()| {
                // Not in a host's DRAM (a move needs this lock): the hook reads CXL.
                self.replica
                    .read()
                    .lookup(key)
                    .filter(|entry| entry.local_owner.is_none())
                    .and_then(|entry| entry.record)
            });
            if !matches!(still_its, Ok(Some(named)) if named == record) {
                self.unlock_record(record, locked, word, c);
                self.withdraw(&hold);
                return still_its.map(|_| false);
            }
        }
        match self.release_allowed(key, record, ReleaseReason::MakeReadShared) {
            Ok(true) => {}
            Ok(false) => {
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                self.withdraw(&hold);
                return Ok(false);
            }
            Err(panic) => {
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                self.withdraw(&hold);
                // Its announce goes with the lock: dropped while unwinding, a hold keeps
                // its announce for recovery (a lock still held), and this one would stop
                // every recovery of the record for as long as the host lives.
                drop(hold);
                std::panic::resume_unwind(panic);
            }
        }
        let hold = hold.into_index();
        let settle = if lock {
            self.settle_locked(record, locked, word, hold)
        } else {
            Settle::Nothing
        };
        match self.submit_settled(&Event::RecordDealloc { key, record }, settle)? {
            Outcome::RecordDeallocated => {
                self.free_released(record, locked, c);
                self.end_hold_of(hold);
                c.add(Counter::RecordDeallocs, 1);
                Ok(true)
            }
            _ => {
                // The object lost the record, or is gone, in the meantime: put it back.
                if lock {
                    self.unlock_record(record, locked, word, c);
                }
                self.end_hold_of(hold);
                Ok(false)
            }
        }
    }

    /// Asks the host's release hook, if it has one, whether `key` may lose `record` now
    /// (the caller holds the record's lock, or a mutant skipped it). `Err` carries a panic
    /// of the hook, for the caller to resume once it has restored the record.
    pub(super) fn release_allowed(
        &self,
        key: &[u8],
        record: u32,
        reason: ReleaseReason,
    ) -> std::thread::Result<bool> {
        let Some(hook) = &self.options.release_hook else {
            return Ok(true);
        };
        let Some(entry) = self.replica.read().lookup(key) else {
            // Gone already: the event we are about to append will find nothing.
            return Ok(true);
        };
        let place = self.place(&entry);
        let (offset, len) = (place.offset, place.len);
        let releasing = Releasing {
            shared: self,
            key,
            record,
            offset,
            len,
            reason,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (hook.0)(&releasing)))
    }

    /// Frees `record`, whose dealloc or delete won in the log, by a CAS from `held` (the
    /// word our lock put there): no host can have changed a record we hold locked.
    pub(super) fn free_released(&self, record: u32, held: RecordWord, c: &ThreadCounters) {
        self.chaos.point(Point::ReleaseBeforeFree);
        let free = RecordWord {
            in_use: false,
            locked: false,
            counter: held.counter & !1,
        };
        // Recovery frees it (and counts it) if this host was declared dead.
        self.counted_off(|| {
            // One SCR access: the CAS, counted by `unlock_record` (or the mutant's store).
            if held.locked {
                self.unlock_record(record, held, free, c)
            } else {
                // A mutant skipped the lock: free whatever the word holds (the defect it
                // shows).
                c.add(Counter::ScrAtomics, 1);
                self.records().store(record, free);
                true
            }
        });
    }

    /// Runs `free`, the CAS that frees a record whose release won (`true` if it did), and
    /// counts the record off the records in use: before the CAS (and back if it fails) in
    /// a pod without undo images, after it in a pod with them; returns what `free` did.
    /// Before: a switch of the width, which zeroes the count once it sees no record
    /// locked, comes after the count-off. After: a holder killed between the two leaves a
    /// record its recovery frees and counts off, and a count-off before the CAS was
    /// counted twice (the count wrapped below 0); the switch waits for the lock's
    /// announce, which goes after the count-off. Killed between the CAS and the count-off,
    /// the count is one high, as for a claim killed between its count and its CAS.
    pub(super) fn counted_off(&self, free: impl FnOnce() -> bool) -> bool {
        let first = !self.undo_images();
        if first {
            self.records_in_use().fetch_sub(1, Ordering::Relaxed);
        }
        let freed = free();
        match (first, freed) {
            (true, false) => self.records_in_use().fetch_add(1, Ordering::Relaxed),
            (false, true) => self.records_in_use().fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
        freed
    }

    /// The background reclaimer's round: while more records than the watermark allows are
    /// in use, deallocate some (a bounded batch per round).
    pub(super) fn reclaim_to_watermark(&self) -> Result<()> {
        let count = self.records().count();
        let limit = (count as f64 * self.options.record_watermark) as u64;
        self.with_counters(|c| {
            let mut rng = c.random_seed();
            for _ in 0..RECLAIM_BATCH {
                if self.records_in_use().load(Ordering::Relaxed) <= limit {
                    break;
                }
                self.reclaim_one(&mut rng, c, Reclaim::Background)?;
            }
            c.set_random_seed(rng);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::FreeRecords;

    #[test]
    fn free_records_track_inserts_and_removes_and_pick_only_free_ones() {
        let mut free = FreeRecords::new(10);
        assert!(
            (0..100).all(|_| free.pick(&mut 7).is_some_and(|r| r < 10)),
            "picks only records of the array"
        );
        assert_eq!(free.len(), 10);
        for record in [3, 7, 0, 9, 3] {
            free.remove(record);
        }
        assert_eq!(free.len(), 6);
        let mut rng = 1;
        for _ in 0..200 {
            let picked = free.pick(&mut rng).unwrap();
            assert!(
                ![0, 3, 7, 9].contains(&picked),
                "picked taken record {picked}"
            );
        }
        free.insert(7);
        free.insert(7);
        assert_eq!(free.len(), 7);
        for record in 0..10 {
            free.remove(record);
        }
        assert_eq!(free.len(), 0);
        assert_eq!(free.pick(&mut rng), None);
        free.insert(4);
        assert_eq!(free.pick(&mut rng), Some(4));
        // Across summary words: one free record far from the first.
        let mut big = FreeRecords::new(100_000);
        for record in 0..100_000 {
            big.remove(record);
        }
        big.insert(77_777);
        assert_eq!(big.pick(&mut rng), Some(77_777));
        assert_eq!(big.len(), 1);
    }
}

#[cfg(test)]
mod hold_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{Backing, CrashSafety, Host, HostOptions, Join, Pod, PodConfig};

    fn undo_pod() -> Arc<Pod> {
        let config = PodConfig::new()
            .scr_bytes(3 * 4096)
            .lnr_bytes(4 << 20)
            .slot_size_bytes(256)
            .max_hosts(2)
            .crash_safety(CrashSafety::Undo);
        Arc::new(Pod::create(&config, Backing::heap()).unwrap())
    }

    fn join(pod: &Arc<Pod>) -> Host {
        let options = HostOptions::new()
            .pump_interval(None)
            .record_watermark(1.0)
            .wait_limit(Duration::from_millis(200));
        Host::join(pod, Join::AnyFree, options).unwrap()
    }

    /// Takes all of `host`'s announce words but one, until dropped.
    fn all_holds_but_one(host: &Host) -> Vec<crate::host::crash::Hold<'_>> {
        (1..crate::limits::HOLDS_PER_HOST)
            .map(|_| host.shared.take_hold().unwrap())
            .collect()
    }

    /// A write that must take a record from another object (every record in use) while
    /// this host has one announce word left: the claim and the deallocation it makes room
    /// with each need one, and the claim lets go of its own first (it held it through
    /// the deallocation, which then waited for a word that only its own caller could
    /// free, and failed with `TooManyLocksHeld`).
    #[test]
    fn a_claim_that_makes_room_needs_one_announce_word_at_a_time() {
        let pod = undo_pod();
        let host = join(&pod);
        let records = pod.layout().record_count;
        for i in 0..=records {
            let key = format!("k{i}");
            host.create(key.as_bytes(), &[1]).unwrap();
        }
        // Every record in use.
        for i in 0..records {
            host.write(format!("k{i}").as_bytes(), &[2]).unwrap();
        }
        assert_eq!(host.inspect().records_in_use().0, records);
        let others = all_holds_but_one(&host);
        let last = format!("k{records}");
        let written = host.write(last.as_bytes(), &[3]);
        drop(others);
        assert!(written.is_ok(), "{written:?}");
        assert_eq!(
            host.events().record_deallocs,
            1,
            "one record taken from another object"
        );
    }

    /// A write that found its object's record taken away between its lookup and its lock
    /// (host `b` made it read-shared) starts over and allocates a record, with one
    /// announce word left: it lets go of the one it took for its lock attempt first (it
    /// held it through the allocation, whose claim then waited for a word only its own
    /// caller could free, and failed with `TooManyLocksHeld`).
    #[cfg(feature = "chaos")]
    #[test]
    fn a_write_that_starts_over_and_allocates_needs_one_announce_word_at_a_time() {
        use crate::chaos::{self, Point};
        let pod = undo_pod();
        let a = join(&pod);
        let b: &'static Host = Box::leak(Box::new(join(&pod)));
        a.create(b"y", &[1]).unwrap();
        a.write(b"y", &[2]).unwrap();
        let others = all_holds_but_one(&a);
        let mut once = true;
        let written = chaos::with_hook(
            move |point| {
                if point == Point::WriteBeforeLock && std::mem::take(&mut once) {
                    assert!(b.make_read_shared(b"y").unwrap());
                }
            },
            || a.write(b"y", &[3]),
        );
        drop(others);
        assert!(written.is_ok(), "{written:?}");
        assert_eq!(a.events().record_allocs, 2, "y's record, then another");
    }
}
