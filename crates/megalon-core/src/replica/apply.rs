//! Applying one log event to the index: every replica applies the same events in the
//! same order and reaches the same state; what differs per host (its free slots, what it
//! drops or grants) is returned.

use super::arena::{owner_of, META, STAMP};
use super::index::{Index, ReplicatedLock};

use crate::error::{Error, Result};
use crate::event::{Event, LOCK_HELD, NO_RECORD};
use crate::ids::HostId;
use crate::mutants::{self, Step};
use crate::record::RecordShape;
use crate::slot::SlotPool;

/// What applying an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The appender got slots `first..first + count` (`count` 0: none left unclaimed).
    SlotsClaimed {
        /// First slot.
        first: u64,
        /// How many.
        count: u64,
    },
    /// The object was created.
    Created,
    /// The key existed: the create lost, its slot stays with its owner.
    AlreadyExists,
    /// The object was deleted; its slot went to the deleter.
    Deleted {
        /// Its slot.
        slot: u64,
        /// Its record, which the deleter frees.
        record: Option<u32>,
    },
    /// The key did not exist.
    NotFound,
    /// The delete named another record than the object has now: nothing changed.
    DeleteLost,
    /// The record was attached to the object.
    RecordAllocated,
    /// The object already had a record (another host's alloc came first in the log).
    RecordAllocLost {
        /// The record it has.
        existing: u32,
    },
    /// A width switch came first in the log since the record was claimed: the switch
    /// freed it (its word is zero), and the object was left as it was.
    RecordAllocStale,
    /// The record was detached.
    RecordDeallocated,
    /// The object no longer had that record (already detached or replaced).
    RecordDeallocIgnored,
    /// The object's replicated lock is the appender's now.
    Locked,
    /// The object's replicated lock was held already: nothing changed.
    LockLost {
        /// The host that holds it.
        holder: HostId,
    },
    /// The appender's lock is released and the counter moved on.
    Unlocked {
        /// The object's counter now.
        counter: u32,
    },
    /// The appender did not hold the object's lock: nothing changed. (The protocol never
    /// appends such an unlock.)
    NotLocked,
    /// Every host dropped its lines of the object.
    Wrapped,
    /// The object moved between its CXL slot and a host's local DRAM.
    Moved,
    /// The move changed nothing: the object is gone, already where the event would put
    /// it, held by another host, or (to a host) changed since the appender copied it.
    MoveLost,
    /// Slots were asked for; `donor` is the host that will grant them.
    SlotsRequested {
        /// Who grants.
        donor: Option<HostId>,
    },
    /// Slots changed owner.
    SlotsGranted,
    /// A `Skip`, `HostJoined`, `ReturnSlots`, `HostLeft` or `HostDead`: noted.
    Noted,
    /// A recovered object: every host dropped its lines of it.
    Recovered,
    /// Records are `bits` wide from here on and every object lost its record.
    WidthSwitched {
        /// The epoch the switch began.
        epoch: u32,
        /// Bits per record.
        bits: u32,
    },
    /// A `WidthEnd` of an epoch already begun (a replaced drainer's repeat): nothing.
    WidthRepeated,
}

/// What applying one event asks the replayer to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) outcome: Outcome,
    /// The slot whose cached lines this host must drop (an event from another host about
    /// an object).
    pub(crate) drop_slot: Option<u64>,
    /// The slot of the object the event changed, on every host (the author's too): a
    /// local copy of it is no longer valid.
    pub(crate) touched_slot: Option<u64>,
    /// This host must grant `count` slots to `host`.
    pub(crate) grant: Option<(HostId, u64)>,
}

impl Applied {
    /// The event changed the object in `slot`: every host's copy of it is invalid, and
    /// every host but the author (`mine`) drops its cached lines.
    fn changed(&mut self, slot: u64, mine: bool) {
        self.touched_slot = Some(slot);
        self.drop_slot = (!mine).then_some(slot);
    }
}

/// Who applies which entry: what every rule needs to know besides its event's fields.
#[derive(Clone, Copy)]
struct At {
    position: u64,
    author: HostId,
    /// The author is the host applying it.
    mine: bool,
    /// The host applying it.
    me: HostId,
}

impl At {
    fn corrupt(self, what: &'static str) -> Error {
        Error::CorruptLogEntry {
            position: self.position,
            what,
        }
    }
}

impl Index {
    /// Applies the event at log `position`, appended by `author`, on the replica of host
    /// `me`. Every replica applies the same events in the same order and reaches the same
    /// state; what differs per host (its free slots, what it must drop or grant) is
    /// returned or put in `pool`. One rule per kind of event, below.
    pub(crate) fn apply(
        &mut self,
        position: u64,
        author: HostId,
        event: &Event<'_>,
        me: HostId,
        pool: &mut SlotPool,
    ) -> Result<Applied> {
        let at = At {
            position,
            author,
            mine: author == me,
            me,
        };
        if author >= self.max_hosts {
            return Err(at.corrupt("host past the pod's maximum"));
        }
        // An entry holds a key up to its own room, which rounds the pod's maximum up to a
        // line: a longer key is damage, which an object no user can name (and no snapshot
        // can carry, nor a rehash copy) must not become.
        if event
            .key()
            .is_some_and(|key| key.len() > self.max_key_bytes as usize)
        {
            return Err(at.corrupt("key longer than the pod's keys"));
        }
        let mut applied = Applied {
            outcome: Outcome::NotFound,
            drop_slot: None,
            touched_slot: None,
            grant: None,
        };
        let a = &mut applied;
        match *event {
            Event::ClaimSlots { count } => self.apply_claim_slots(at, count, pool, a),
            Event::Create { key, slot } => self.apply_create(at, key, slot, pool, a)?,
            Event::Delete { key, record } => self.apply_delete(at, key, record, pool, a)?,
            Event::RecordAlloc { key, record, epoch } => {
                self.apply_record_alloc(at, key, record, epoch, a)?
            }
            Event::RecordDealloc { key, record } => self.apply_record_dealloc(at, key, record, a),
            Event::Wrap { key } => self.apply_wrap(at, key, a),
            Event::MoveToHost { key, host, stamp } => {
                self.apply_move_to_host(at, key, host, stamp, a)?
            }
            Event::MoveToCxl { key } => self.apply_move_to_cxl(at, key, a),
            Event::Lock { key } => self.apply_lock(at, key, a)?,
            Event::Unlock { key } => self.apply_unlock(at, key, a)?,
            Event::NeedSlots { count } => self.apply_need_slots(at, count, a),
            Event::GrantSlots { to, first, count } => {
                self.apply_grant_slots(at, to, first, count, pool, a)?
            }
            Event::Skip => a.outcome = Outcome::Noted,
            Event::HostJoined { life } => {
                self.slots.joined(at.author as usize, life);
                self.apply_host_joined(at, false, a)
            }
            Event::HostLeft => self.apply_host_joined(at, true, a),
            Event::ReturnSlots { first, count } => self.apply_return_slots(at, first, count, a)?,
            Event::HostDead { host, joins } => self.apply_host_dead(at, host, joins, a)?,
            Event::WidthEnd { epoch, bits } => self.apply_width_end(at, epoch, bits, a)?,
            Event::Recovered { key, .. } => {
                self.apply_wrap(at, key, a);
                if a.outcome == Outcome::Wrapped {
                    a.outcome = Outcome::Recovered;
                }
            }
        }
        // A touched object's own host counter is unknown on the author too: the touch
        // in each rule covers alloc, dealloc and wrap; create starts unknown; delete
        // removes it.
        Ok(applied)
    }

    /// The author gets the next range of unclaimed slots.
    fn apply_claim_slots(&mut self, at: At, count: u64, pool: &mut SlotPool, a: &mut Applied) {
        let (first, count) = self.slots.claim(at.author as usize, count);
        if at.mine {
            pool.add_range(first, count);
        }
        a.outcome = Outcome::SlotsClaimed { first, count };
    }

    /// The first create of a key in log order wins; a loser's slot stays with its owner.
    fn apply_create(
        &mut self,
        at: At,
        key: &[u8],
        slot: u64,
        pool: &mut SlotPool,
        a: &mut Applied,
    ) -> Result<()> {
        if slot >= self.slot_count {
            return Err(at.corrupt("slot past the pod's slots"));
        }
        if self.find(key).is_some() {
            if at.mine {
                pool.push(slot);
            }
            a.outcome = Outcome::AlreadyExists;
        } else {
            self.insert(key, slot, at.position);
            self.slots.created(at.author as usize, slot);
            a.outcome = Outcome::Created;
            a.changed(slot, at.mine);
        }
        Ok(())
    }

    /// A delete wins only if the object still has the record its appender locked (or, in
    /// an AllLog pod, the lock it holds), and is not in a host's DRAM; its slot goes to
    /// the deleter.
    fn apply_delete(
        &mut self,
        at: At,
        key: &[u8],
        record: u32,
        pool: &mut SlotPool,
        a: &mut Applied,
    ) -> Result<()> {
        if self.all_log && record != LOCK_HELD && record != NO_RECORD {
            return Err(at.corrupt("delete naming a record in an all-log pod"));
        }
        let lost = self.find(key).is_some_and(|handle| {
            // An object in a host's DRAM: the bytes in its slot are old. The deleter
            // brings it back to CXL first, then deletes.
            if owner_of(self.words.get(handle, META)).is_some() {
                return true;
            }
            if self.all_log {
                // AllLog: the deleter holds the object's lock, or no one does.
                let holder = self.replicated_lock(handle).holder;
                holder != (record == LOCK_HELD).then_some(at.author)
            } else {
                self.record_of(handle) != record
            }
        });
        if lost {
            // The object got (or changed) a record after the deleter looked: the deleter
            // does not hold that record's lock, so it must not delete. (AllLog: another
            // host holds its lock, or the deleter no longer does.)
            a.outcome = Outcome::DeleteLost;
        } else if let Some(entry) = self.remove(key) {
            if let Some(record) = entry.record {
                self.record_owners.remove(&record);
            }
            self.slots.deleted(at.author as usize, entry.slot);
            if at.mine {
                pool.push(entry.slot);
            }
            a.outcome = Outcome::Deleted {
                slot: entry.slot,
                record: entry.record,
            };
            a.changed(entry.slot, at.mine);
        }
        Ok(())
    }

    /// The first alloc of an object's record in log order wins; a later one loses and
    /// names the record the object has. One claimed before a width switch that came
    /// first loses too, naming nothing.
    fn apply_record_alloc(
        &mut self,
        at: At,
        key: &[u8],
        record: u32,
        epoch: u32,
        a: &mut Applied,
    ) -> Result<()> {
        if self.all_log {
            return Err(at.corrupt("record alloc in an all-log pod"));
        }
        let current = self.shape();
        if epoch > current.epoch {
            return Err(at.corrupt("record alloc of a width not switched to yet"));
        }
        if epoch < current.epoch && !mutants::skipped(Step::StaleAllocLoses) {
            a.outcome = Outcome::RecordAllocStale;
            return Ok(());
        }
        if u64::from(record) >= self.record_count() {
            return Err(at.corrupt("record past the pod's records"));
        }
        if let Some(handle) = self.find(key) {
            let existing = self.record_of(handle);
            if existing != NO_RECORD {
                a.outcome = Outcome::RecordAllocLost { existing };
            } else {
                self.set_record(handle, record);
                self.record_owners.insert(record, handle);
                self.touch(handle, at.position);
                a.outcome = Outcome::RecordAllocated;
                a.changed(self.slot_of(handle), at.mine);
            }
        }
        Ok(())
    }

    /// The record width's switch to `bits`, beginning `epoch`: every object loses its
    /// record, as by a dealloc (its stamp moves here, its host counter is unknown, every
    /// host drops its cached lines of it: once read-shared, reads make no check), and
    /// the record array holds records of `bits` from here on, all free. Only the epoch
    /// after the current one begins; a repeat of it changes nothing.
    fn apply_width_end(&mut self, at: At, epoch: u32, bits: u32, a: &mut Applied) -> Result<()> {
        if self.all_log {
            return Err(at.corrupt("width switch in an all-log pod"));
        }
        if !RecordShape::valid_bits(bits) {
            return Err(at.corrupt("record width not 2, 4, 8, 16 or 32 bits"));
        }
        let current = self.shape();
        if epoch <= current.epoch {
            a.outcome = Outcome::WidthRepeated;
            return Ok(());
        }
        if epoch != current.epoch + 1 {
            return Err(at.corrupt("width switch past the next epoch"));
        }
        let shape = RecordShape { epoch, bits };
        if shape.count_in(self.records_bytes) > crate::limits::MAX_RECORDS {
            return Err(at.corrupt("more records at a width than record ids"));
        }
        for (_, handle) in std::mem::take(&mut self.record_owners) {
            self.set_record(handle, NO_RECORD);
            self.touch(handle, at.position);
            let slot = self.slot_of(handle);
            self.handed_back.push(slot);
        }
        self.set_shape(shape);
        a.outcome = Outcome::WidthSwitched { epoch, bits };
        Ok(())
    }

    /// A dealloc detaches the record if the object still has it.
    fn apply_record_dealloc(&mut self, at: At, key: &[u8], record: u32, a: &mut Applied) {
        let Some(handle) = self.find(key) else {
            return;
        };
        if self.record_of(handle) == record {
            self.set_record(handle, NO_RECORD);
            self.record_owners.remove(&record);
            self.touch(handle, at.position);
            a.outcome = Outcome::RecordDeallocated;
            // On every host, the author too: once read-shared, reads make no check, and
            // the deallocating host may cache lines of the object from long before (it
            // need not have read it lately).
            a.changed(self.slot_of(handle), at.mine);
            a.drop_slot = a.touched_slot;
        } else {
            a.outcome = Outcome::RecordDeallocIgnored;
        }
    }

    /// A wrap makes every host's host counter of the object unknown.
    fn apply_wrap(&mut self, at: At, key: &[u8], a: &mut Applied) {
        if let Some(handle) = self.find(key) {
            self.touch(handle, at.position);
            a.outcome = Outcome::Wrapped;
            a.changed(self.slot_of(handle), at.mine);
        }
    }

    /// A move to the author's DRAM wins only if the object is in CXL and nothing happened
    /// to it since the author copied it (its stamp is the one the event names).
    fn apply_move_to_host(
        &mut self,
        at: At,
        key: &[u8],
        host: HostId,
        stamp: u64,
        a: &mut Applied,
    ) -> Result<()> {
        if host != at.author {
            return Err(at.corrupt("move to a host other than the appender"));
        }
        a.outcome = Outcome::MoveLost;
        if let Some(handle) = self.find(key) {
            let meta = self.words.get(handle, META);
            if owner_of(meta).is_none() && self.words.get(handle, STAMP) == stamp {
                self.set_owner(handle, Some(host));
                self.touch(handle, at.position);
                a.outcome = Outcome::Moved;
                a.changed(self.slot_of(handle), at.mine);
            }
        }
        Ok(())
    }

    /// A move back to CXL wins only for the object's holder.
    fn apply_move_to_cxl(&mut self, at: At, key: &[u8], a: &mut Applied) {
        a.outcome = Outcome::MoveLost;
        if let Some(handle) = self.find(key) {
            if owner_of(self.words.get(handle, META)) == Some(at.author) {
                self.set_owner(handle, None);
                self.touch(handle, at.position);
                a.outcome = Outcome::Moved;
                a.changed(self.slot_of(handle), at.mine);
            }
        }
    }

    /// A host left (`HostLeft`: it gave back what it could), or joined under an id held
    /// before (`HostJoined`: the earlier holder's DRAM pool is gone): the free slots the
    /// replicas still count as its go back to the pod, and it is no donor. (The joiner
    /// clears the pool its replay rebuilt up to here.) Nor does the new life hold any object in its DRAM
    /// (it appends this before anything else): an object still named as the earlier
    /// holder's goes back to its CXL slot, as for a `HostDead`. None should be (a holder
    /// that leaves moves its objects back, or leaves them to its recovery); if one is,
    /// this keeps the id's new life from being named the holder of an object it never had.
    fn apply_host_joined(&mut self, at: At, gone: bool, a: &mut Applied) {
        self.slots.set_gone(at.author as usize, gone);
        self.hand_back(at, at.author);
        a.outcome = Outcome::Noted;
    }

    /// A leaving host gives slots back to the pod (it took them out of its pool first).
    fn apply_return_slots(
        &mut self,
        at: At,
        first: u64,
        count: u64,
        a: &mut Applied,
    ) -> Result<()> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.slot_count)
        {
            return Err(at.corrupt("slots given back outside the pod"));
        }
        self.slots.give_back(at.author as usize, first, count);
        a.outcome = Outcome::Noted;
        Ok(())
    }

    /// A host died: its free slots go back to the pod (it is no donor), and objects
    /// in its DRAM go back to their CXL slots, holding what they held when they moved
    /// there (writes made in its DRAM since are lost with it). Every replica applies it at
    /// the same position, so all agree on which writes came before the death. An AllLog
    /// object whose replicated lock it held stays locked: the baseline has no undo images.
    ///
    /// Only for the id's latest life the log has seen join: a recoverer paused past its
    /// lease before its `HostDead` can append it after the id was recovered by another
    /// and joined again, and the next life's slots and objects are not the dead one's.
    fn apply_host_dead(&mut self, at: At, host: HostId, joins: u64, a: &mut Applied) -> Result<()> {
        if host >= self.max_hosts {
            return Err(at.corrupt("dead host past the pod's maximum"));
        }
        a.outcome = Outcome::Noted;
        if joins < self.slots.lives[host as usize] {
            self.handed_back.clear();
            return Ok(());
        }
        self.slots.set_gone(host as usize, true);
        self.hand_back(at, host);
        Ok(())
    }

    /// Every object named as held in `host`'s DRAM goes back to its CXL slot (its stamp
    /// moves on); their slots are [`Index::handed_back`], for the replayer.
    fn hand_back(&mut self, at: At, host: HostId) {
        let held: Vec<u32> = self
            .view
            .table
            .handles()
            .into_iter()
            .filter(|&handle| owner_of(self.words.get(handle, META)) == Some(host))
            .collect();
        self.handed_back.clear();
        for handle in held {
            self.set_owner(handle, None);
            self.touch(handle, at.position);
            self.handed_back.push(self.slot_of(handle));
        }
    }

    /// AllLog: the first `Lock` on an unlocked object wins; a later one changes nothing.
    fn apply_lock(&mut self, at: At, key: &[u8], a: &mut Applied) -> Result<()> {
        if !self.all_log {
            return Err(at.corrupt("lock event in a split pod"));
        }
        let Some(handle) = self.find(key) else {
            return Ok(());
        };
        let lock = self.replicated_lock(handle);
        if let Some(holder) = lock.holder {
            // Another lock came first in the log: every replica says so.
            a.outcome = Outcome::LockLost { holder };
            return Ok(());
        }
        self.set_replicated_lock(
            handle,
            ReplicatedLock {
                holder: Some(at.author),
                counter: lock.counter,
            },
        );
        // A read that overlaps the write sees the stamp change. The author's host counter
        // stays: its cached lines are no staler for its own lock. Other hosts drop their
        // lines, as for every event.
        if at.mine {
            self.words.set(handle, STAMP, at.position);
        } else {
            self.touch(handle, at.position);
        }
        a.outcome = Outcome::Locked;
        a.changed(self.slot_of(handle), at.mine);
        Ok(())
    }

    /// AllLog: the holder's `Unlock` moves the counter on by two and unlocks.
    fn apply_unlock(&mut self, at: At, key: &[u8], a: &mut Applied) -> Result<()> {
        if !self.all_log {
            return Err(at.corrupt("unlock event in a split pod"));
        }
        let Some(handle) = self.find(key) else {
            return Ok(());
        };
        let lock = self.replicated_lock(handle);
        if lock.holder != Some(at.author) {
            a.outcome = Outcome::NotLocked;
            return Ok(());
        }
        let counter = lock.counter.wrapping_add(2);
        self.set_replicated_lock(
            handle,
            ReplicatedLock {
                holder: None,
                counter,
            },
        );
        // The author wrote the object back before appending this: its cached lines are
        // this version's. Every other host drops its lines and forgets what it had.
        self.words.set(handle, STAMP, at.position);
        self.set_host_counter(handle, at.mine.then_some(counter));
        a.outcome = Outcome::Unlocked { counter };
        a.changed(self.slot_of(handle), at.mine);
        Ok(())
    }

    /// A request for slots: the host with the most free slots (every replica agrees
    /// which) grants them.
    fn apply_need_slots(&mut self, at: At, count: u64, a: &mut Applied) {
        let donor = self.slots.donor(at.author as usize).map(|d| d as HostId);
        if donor == Some(at.me) {
            a.grant = Some((at.author, count));
        }
        a.outcome = Outcome::SlotsRequested { donor };
    }

    /// Slots change owner.
    fn apply_grant_slots(
        &mut self,
        at: At,
        to: HostId,
        first: u64,
        count: u64,
        pool: &mut SlotPool,
        a: &mut Applied,
    ) -> Result<()> {
        if to >= self.max_hosts
            || first
                .checked_add(count)
                .is_none_or(|end| end > self.slot_count)
        {
            return Err(at.corrupt("slot grant outside the pod"));
        }
        if self
            .slots
            .grant(at.author as usize, to as usize, first, count)
            && to == at.me
        {
            pool.add_range(first, count);
        }
        a.outcome = Outcome::SlotsGranted;
        Ok(())
    }
}
