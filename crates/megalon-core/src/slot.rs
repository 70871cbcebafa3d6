//! Slot allocation without SCR proportional to the slots.
//!
//! Free slots are partitioned among hosts, and a host writes only into slots it owns.
//! Ownership moves only through log events, applied in the same order by every replica:
//!
//! - `ClaimSlots { count }` gives the appender the next `count` never-used slots of the
//!   unclaimed range (the range is part of the replicated state, so every host computes
//!   the same slots);
//! - a `Create` that wins takes the slot out of its creator's pool; one that loses (the key
//!   exists) leaves the slot with its owner, who put its bytes there;
//! - a `Delete` gives the object's slot to the deleting host;
//! - `NeedSlots { count }` asks the host with the most free slots (by the replicated
//!   counts, so every host agrees which one) to give some with `GrantSlots`;
//! - a host that leaves, dies or whose id joins again gives its free slots back to the
//!   pod (`HostLeft`, `HostDead`, `HostJoined`): every replica knows each host's free
//!   slots (not only how many), from the events above. A host that is gone is never
//!   the one asked. A `ClaimSlots` takes slots given back once the unclaimed range is
//!   used up.
//!
//! A creator writes the object's bytes into the slot *before* it appends the create event,
//! so a shared free list would let two creators overwrite each other; with owned pools two
//! hosts never write into the same free slot. (A host declared dead, paused past its lease
//! with a slot of its pool in hand, whose slots went back to the pod meanwhile, looks at
//! its row before it writes: `Shared::create`.)

use std::collections::BTreeMap;
use std::ops::Range;

/// Slots a host claims from the unclaimed range at a time, in a pod of `slot_count` slots
/// shared by `max_hosts` hosts: an eighth of a fair share, 1 to 4096. A layer that must
/// not run the pod out of slots keeps this much slack per host (free slots sit in hosts'
/// pools until they are granted).
pub fn slot_claim_batch(slot_count: u64, max_hosts: u32) -> u64 {
    (slot_count / (8 * u64::from(max_hosts.max(1)))).clamp(1, 4096)
}

/// The free slots this host owns (local state, not replicated).
#[derive(Debug, Default)]
pub(crate) struct SlotPool {
    /// Claimed or granted ranges, untouched so far.
    ranges: Vec<Range<u64>>,
    /// Single slots given back (deletes, lost creates).
    singles: Vec<u64>,
}

impl SlotPool {
    /// Moves every slot of `other` into this pool.
    pub(crate) fn append(&mut self, other: SlotPool) {
        self.ranges.extend(other.ranges);
        self.singles.extend(other.singles);
    }

    /// Whether the pool holds no slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.singles.is_empty()
    }

    /// Takes a free slot.
    pub(crate) fn pop(&mut self) -> Option<u64> {
        if let Some(slot) = self.singles.pop() {
            return Some(slot);
        }
        let range = self.ranges.last_mut()?;
        let slot = range.start;
        range.start += 1;
        if range.is_empty() {
            self.ranges.pop();
        }
        Some(slot)
    }

    /// Gives a slot back.
    pub(crate) fn push(&mut self, slot: u64) {
        self.singles.push(slot);
    }

    /// Adds `count` slots from `first` on.
    pub(crate) fn add_range(&mut self, first: u64, count: u64) {
        if count > 0 {
            self.ranges.push(first..first + count);
        }
    }

    /// Free slots held.
    pub(crate) fn len(&self) -> u64 {
        self.singles.len() as u64 + self.ranges.iter().map(|r| r.end - r.start).sum::<u64>()
    }

    /// Takes up to `count` slots to give away, as ranges `(first, count)`.
    pub(crate) fn take_for_grant(&mut self, mut count: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while count > 0 {
            if let Some(range) = self.ranges.last_mut() {
                let n = count.min(range.end - range.start);
                out.push((range.start, n));
                range.start += n;
                count -= n;
                if range.is_empty() {
                    self.ranges.pop();
                }
            } else if let Some(slot) = self.singles.pop() {
                out.push((slot, 1));
                count -= 1;
            } else {
                break;
            }
        }
        out
    }
}

/// A host's free slots as every replica knows them: disjoint ranges, adjacent ones merged,
/// by their first slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeSlots {
    /// First slot to one past the last.
    ranges: BTreeMap<u64, u64>,
    len: u64,
}

impl FreeSlots {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Adds `count` slots from `first` on, none of them in here already.
    pub(crate) fn insert(&mut self, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        let (mut start, mut end) = (first, first + count);
        if let Some((&before, &before_end)) = self.ranges.range(..=first).next_back() {
            debug_assert!(before_end <= first, "slot {first} free twice");
            if before_end == first {
                self.ranges.remove(&before);
                start = before;
            }
        }
        if let Some(after_end) = self.ranges.remove(&end) {
            end = after_end;
        }
        debug_assert!(
            self.ranges.range(start..end).next().is_none(),
            "slots {first}..{} free twice",
            first + count
        );
        self.ranges.insert(start, end);
        self.len += count;
    }

    /// Takes `count` slots from `first` on out. Whether they were all in here (if not,
    /// nothing changes: an event naming a slot its author does not hold, which the log's
    /// order rules out).
    pub(crate) fn remove(&mut self, first: u64, count: u64) -> bool {
        if count == 0 {
            return true;
        }
        let Some((&start, &end)) = self.ranges.range(..=first).next_back() else {
            return false;
        };
        if first + count > end {
            return false;
        }
        self.ranges.remove(&start);
        if start < first {
            self.ranges.insert(start, first);
        }
        if first + count < end {
            self.ranges.insert(first + count, end);
        }
        self.len -= count;
        true
    }

    /// Every range, in order.
    pub(crate) fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|(&start, &end)| start..end)
    }

    /// Takes every slot out, as ranges in order.
    fn take(&mut self) -> Vec<Range<u64>> {
        self.len = 0;
        std::mem::take(&mut self.ranges)
            .into_iter()
            .map(|(start, end)| start..end)
            .collect()
    }
}

/// The replicated part of slot ownership: the unclaimed range and every host's free
/// slots, the same on every replica at the same log position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotAccounting {
    pub(crate) unclaimed: Range<u64>,
    /// Each host's free slots (its pool, and the slots of its creates not applied yet).
    pub(crate) pools: Vec<FreeSlots>,
    /// Ranges hosts that left gave back, claimed once `unclaimed` is used up.
    pub(crate) returned: Vec<Range<u64>>,
    /// Hosts that are gone (left or dead, not joined again since): never a donor, and
    /// slots granted to one go back to the pod (a grant can be on its way when its
    /// requester leaves).
    pub(crate) gone: Vec<bool>,
    /// Each id's latest life whose `HostJoined` applied (0 until one did: an id's first
    /// life appends none). A `HostDead` of an earlier life is stale.
    pub(crate) lives: Vec<u64>,
}

impl SlotAccounting {
    pub(crate) fn new(slot_count: u64, max_hosts: u32) -> Self {
        Self {
            unclaimed: 0..slot_count,
            pools: vec![FreeSlots::default(); max_hosts as usize],
            returned: Vec::new(),
            gone: vec![false; max_hosts as usize],
            lives: vec![0; max_hosts as usize],
        }
    }

    /// Whether a `ClaimSlots` would get any slot.
    pub(crate) fn claimable(&self) -> bool {
        !self.unclaimed.is_empty() || !self.returned.is_empty()
    }

    /// Takes up to `count` slots of the unclaimed range for `host`, or once it is used up,
    /// of the last range given back.
    pub(crate) fn claim(&mut self, host: usize, count: u64) -> (u64, u64) {
        let from = if self.unclaimed.is_empty() {
            match self.returned.last_mut() {
                Some(range) => range,
                None => &mut self.unclaimed,
            }
        } else {
            &mut self.unclaimed
        };
        let first = from.start;
        let n = count.min(from.end - first);
        from.start += n;
        if self.returned.last().is_some_and(Range::is_empty) {
            self.returned.pop();
        }
        self.pools[host].insert(first, n);
        (first, n)
    }

    /// `host` gives back `count` of its free slots from `first` on: they go back to the
    /// pod if the replicas count them as `host`'s (`ReturnSlots`, which no host appends
    /// since `HostLeft` gives back all a leaver holds; a grant to a host that is gone).
    pub(crate) fn give_back(&mut self, host: usize, first: u64, count: u64) {
        if count > 0 && self.pools[host].remove(first, count) {
            self.returned.push(first..first + count);
        }
    }

    /// `host`'s create in `slot` won: the slot is the object's.
    pub(crate) fn created(&mut self, host: usize, slot: u64) {
        // Held, by the log's order: the slot came to `host` by an event before this one,
        // and an event of a host that is gone comes before its giving back. (Not asserted:
        // the replica's unit tests create in slots they never claimed.)
        self.pools[host].remove(slot, 1);
    }

    /// `host` deleted the object in `slot`: the slot is `host`'s.
    pub(crate) fn deleted(&mut self, host: usize, slot: u64) {
        self.pools[host].insert(slot, 1);
    }

    /// How many free slots `host` has.
    #[cfg(test)]
    pub(crate) fn free_count(&self, host: usize) -> u64 {
        self.pools[host].len()
    }

    /// `from` grants `count` of its free slots from `first` on to `to`: `to`'s, unless
    /// `to` is gone (then the pod's), or the replicas do not count them as `from`'s. Whether
    /// `to` gets them.
    pub(crate) fn grant(&mut self, from: usize, to: usize, first: u64, count: u64) -> bool {
        if self.gone[to] {
            self.give_back(from, first, count);
            return false;
        }
        // Held by `from`, by the log's order (as a create's slot is). If not, `to` gets
        // nothing: a slot lost is safer than a slot in two pools.
        if !self.pools[from].remove(first, count) {
            return false;
        }
        self.pools[to].insert(first, count);
        true
    }

    /// `host` left or died (`gone`), or joined again: its pool is gone with it either
    /// way. Its free slots go back to the pod (a dead host's pool was in its DRAM, and
    /// each death lost it for good: a pod whose hosts died often enough ran out of slots).
    pub(crate) fn set_gone(&mut self, host: usize, gone: bool) {
        let ranges = self.pools[host].take();
        self.returned.extend(ranges);
        self.gone[host] = gone;
    }

    /// `host`'s id joined again as its `life`-th holder (its `HostJoined`).
    pub(crate) fn joined(&mut self, host: usize, life: u64) {
        self.lives[host] = self.lives[host].max(life);
    }

    /// The host that answers a `NeedSlots` from `requester`: the most free slots, the
    /// lowest id on a tie, never the requester; none if nobody has any.
    pub(crate) fn donor(&self, requester: usize) -> Option<usize> {
        self.pools
            .iter()
            .map(FreeSlots::len)
            .enumerate()
            .filter(|&(host, count)| host != requester && count > 0 && !self.gone[host])
            .max_by_key(|&(host, count)| (count, std::cmp::Reverse(host)))
            .map(|(host, _)| host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_each_slot_once() {
        let mut pool = SlotPool::default();
        pool.add_range(10, 3);
        pool.push(99);
        assert_eq!(pool.len(), 4);
        let mut seen: Vec<u64> = std::iter::from_fn(|| pool.pop()).collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![10, 11, 12, 99]);
    }

    #[test]
    fn grants_come_from_ranges_then_singles() {
        let mut pool = SlotPool::default();
        pool.add_range(0, 5);
        pool.push(42);
        assert_eq!(pool.take_for_grant(3), vec![(0, 3)]);
        assert_eq!(pool.take_for_grant(10), vec![(3, 2), (42, 1)]);
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn claims_stop_at_the_end_and_donor_is_deterministic() {
        let mut slots = SlotAccounting::new(10, 3);
        assert_eq!(slots.claim(0, 4), (0, 4));
        assert_eq!(slots.claim(1, 4), (4, 4));
        assert_eq!(slots.claim(2, 4), (8, 2));
        assert_eq!(slots.claim(2, 4), (10, 0));
        assert_eq!(slots.donor(2), Some(0), "tie between 0 and 1: the lower id");
        slots.deleted(1, 20);
        assert_eq!(slots.donor(2), Some(1));
        assert_eq!(slots.donor(1), Some(0));
        slots.set_gone(0, true);
        slots.set_gone(1, true);
        assert_eq!(slots.donor(2), None);
    }

    #[test]
    fn slots_given_back_are_claimed_once_the_unclaimed_range_is_used_up() {
        let mut slots = SlotAccounting::new(10, 2);
        assert_eq!(slots.claim(0, 10), (0, 10));
        slots.give_back(0, 2, 3);
        slots.give_back(0, 7, 1);
        assert_eq!(slots.free_count(0), 6);
        assert!(slots.claimable());
        assert_eq!(slots.claim(1, 4), (7, 1), "the last range given back");
        assert_eq!(slots.claim(1, 2), (2, 2));
        assert_eq!(slots.claim(1, 2), (4, 1));
        assert!(!slots.claimable());
        assert_eq!(slots.claim(1, 2), (10, 0));
        assert_eq!(slots.free_count(1), 4);
    }

    #[test]
    fn free_slots_merge_split_and_refuse_what_they_do_not_hold() {
        let mut free = FreeSlots::default();
        free.insert(10, 3);
        free.insert(14, 1);
        free.insert(13, 1); // joins both
        assert_eq!(free.ranges().collect::<Vec<_>>(), vec![10..15]);
        assert!(free.remove(12, 2));
        assert_eq!(free.ranges().collect::<Vec<_>>(), vec![10..12, 14..15]);
        assert!(!free.remove(11, 2), "12 is not held");
        assert!(!free.remove(3, 1));
        assert_eq!(free.len(), 3);
        free.insert(9, 1);
        assert_eq!(free.ranges().collect::<Vec<_>>(), vec![9..12, 14..15]);
        assert_eq!(free.take(), vec![9..12, 14..15]);
        assert_eq!(free.len(), 0);
    }

    /// A host that dies (or leaves, or whose id joins again) gives its free slots back:
    /// claimed, granted, freed by its deletes, less those its creates and grants took.
    #[test]
    fn a_gone_host_s_free_slots_go_back_to_the_pod() {
        let mut slots = SlotAccounting::new(100, 2);
        assert_eq!(slots.claim(0, 10), (0, 10));
        assert_eq!(slots.claim(1, 10), (10, 10));
        slots.created(0, 0);
        slots.created(0, 1);
        slots.created(1, 10);
        slots.deleted(0, 10); // host 0 deletes host 1's object
        assert!(slots.grant(0, 1, 5, 3));
        assert_eq!(slots.free_count(0), 10 - 2 + 1 - 3);
        slots.set_gone(0, true);
        assert_eq!(slots.free_count(0), 0);
        let mut back: Vec<u64> = slots.returned.iter().flat_map(Clone::clone).collect();
        back.sort_unstable();
        assert_eq!(back, vec![2, 3, 4, 8, 9, 10]);
        assert_eq!(slots.free_count(1), 9 + 3);
    }
}
