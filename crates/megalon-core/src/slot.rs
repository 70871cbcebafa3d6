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
//! - a host that leaves gives its free slots back to the pod (`ReturnSlots`, a range at
//!   a time), and `HostLeft` makes its count 0 (what it could not give back is lost, as a
//!   dead host's slots are): a host that is gone is never the one asked. A `ClaimSlots`
//!   takes slots given back once the unclaimed range is used up.
//!
//! A creator writes the object's bytes into the slot *before* it appends the create event,
//! so a shared free list would let two creators overwrite each other; with owned pools two
//! hosts never write into the same free slot.

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

    /// Every slot, as ranges `(first, count)`, adjacent slots merged: what a host that
    /// leaves gives back.
    pub(crate) fn into_ranges(self) -> Vec<(u64, u64)> {
        let mut spans: Vec<Range<u64>> = self.ranges;
        spans.extend(self.singles.into_iter().map(|slot| slot..slot + 1));
        spans.sort_unstable_by_key(|span| span.start);
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for span in spans {
            match merged.last_mut() {
                Some((first, count)) if *first + *count == span.start => {
                    *count += span.end - span.start;
                }
                _ => merged.push((span.start, span.end - span.start)),
            }
        }
        merged
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

/// The replicated part of slot ownership: the unclaimed range and every host's count of
/// free slots, the same on every replica at the same log position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotAccounting {
    pub(crate) unclaimed: Range<u64>,
    pub(crate) free_counts: Vec<i64>,
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
            free_counts: vec![0; max_hosts as usize],
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
        self.free_counts[host] += n as i64;
        (first, n)
    }

    /// `host` gives back `count` of its free slots from `first` on.
    pub(crate) fn give_back(&mut self, host: usize, first: u64, count: u64) {
        self.free_counts[host] -= count as i64;
        if count > 0 {
            self.returned.push(first..first + count);
        }
    }

    /// `from` grants `count` of its free slots from `first` on to `to`: `to`'s, unless
    /// `to` is gone (then the pod's). Whether `to` gets them.
    pub(crate) fn grant(&mut self, from: usize, to: usize, first: u64, count: u64) -> bool {
        if self.gone[to] {
            self.give_back(from, first, count);
            return false;
        }
        self.free_counts[from] -= count as i64;
        self.free_counts[to] += count as i64;
        true
    }

    /// `host` left or died (`gone`), or joined again: its pool is gone with it either
    /// way, so its count is 0.
    pub(crate) fn set_gone(&mut self, host: usize, gone: bool) {
        self.free_counts[host] = 0;
        self.gone[host] = gone;
    }

    /// `host`'s id joined again as its `life`-th holder (its `HostJoined`).
    pub(crate) fn joined(&mut self, host: usize, life: u64) {
        self.lives[host] = self.lives[host].max(life);
    }

    /// The host that answers a `NeedSlots` from `requester`: the most free slots, the
    /// lowest id on a tie, never the requester; none if nobody has any.
    pub(crate) fn donor(&self, requester: usize) -> Option<usize> {
        self.free_counts
            .iter()
            .enumerate()
            .filter(|&(host, &count)| host != requester && count > 0 && !self.gone[host])
            .max_by_key(|&(host, &count)| (count, std::cmp::Reverse(host)))
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
        slots.free_counts[1] = 5;
        assert_eq!(slots.donor(2), Some(1));
        assert_eq!(slots.donor(1), Some(0));
        slots.free_counts = vec![0, 0, 3];
        assert_eq!(slots.donor(2), None);
    }

    #[test]
    fn a_pool_given_back_merges_adjacent_slots() {
        let mut pool = SlotPool::default();
        pool.add_range(10, 3);
        pool.push(13);
        pool.push(9);
        pool.push(20);
        pool.add_range(21, 2);
        pool.push(30);
        assert_eq!(pool.into_ranges(), vec![(9, 5), (20, 3), (30, 1)]);
    }

    #[test]
    fn slots_given_back_are_claimed_once_the_unclaimed_range_is_used_up() {
        let mut slots = SlotAccounting::new(10, 2);
        assert_eq!(slots.claim(0, 10), (0, 10));
        slots.give_back(0, 2, 3);
        slots.give_back(0, 7, 1);
        assert_eq!(slots.free_counts[0], 6);
        assert!(slots.claimable());
        assert_eq!(slots.claim(1, 4), (7, 1), "the last range given back");
        assert_eq!(slots.claim(1, 2), (2, 2));
        assert_eq!(slots.claim(1, 2), (4, 1));
        assert!(!slots.claimable());
        assert_eq!(slots.claim(1, 2), (10, 0));
        assert_eq!(slots.free_counts[1], 4);
    }
}
