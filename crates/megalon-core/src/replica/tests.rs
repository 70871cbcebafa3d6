//! The replica's rules, event by event, on one index.

use super::*;
use crate::config::Coherence;
use crate::error::Error;
use crate::event::{Event, LOCK_HELD, NO_RECORD};
use crate::ids::HostId;
use crate::slot::SlotPool;

fn index() -> Index {
    Index::with_records(1000, 100, 4, Coherence::Split)
}

/// An index of objects a, b and c (slots 3, 4 and 5; log positions 0 to 2, by host 1),
/// and host 0's slot pool.
fn index_of_a_b_c() -> (Index, SlotPool) {
    let mut index = index();
    let mut pool = SlotPool::default();
    for (position, (key, slot)) in [(b"a", 3), (b"b", 4), (b"c", 5)].into_iter().enumerate() {
        let create = Event::Create { key, slot };
        index
            .apply(position as u64, 1, &create, 0, &mut pool)
            .unwrap();
    }
    (index, pool)
}

#[test]
// Over 70 lines on purpose: A scenario: every key length, created, looked up and deleted.
fn create_lookup_delete_round_trip_with_every_key_length() {
    let mut index = index();
    let mut pool = SlotPool::default();
    for len in 0..40usize {
        let key: Vec<u8> = (0..len as u8).collect();
        let applied = index
            .apply(
                len as u64,
                1,
                &Event::Create {
                    key: &key,
                    slot: len as u64,
                },
                0,
                &mut pool,
            )
            .unwrap();
        assert_eq!(applied.outcome, Outcome::Created);
        assert_eq!(
            applied.drop_slot,
            Some(len as u64),
            "another host's create drops the slot"
        );
    }
    assert_eq!(index.len(), 40);
    for len in 0..40usize {
        let key: Vec<u8> = (0..len as u8).collect();
        let entry = index.lookup(&key).expect("present");
        assert_eq!(
            (entry.slot, entry.stamp, entry.record, entry.host_counter),
            (len as u64, len as u64, None, None)
        );
        let mut longer = key.clone();
        longer.push(0);
        assert_ne!(
            index.lookup(&longer).map(|e| e.slot),
            Some(len as u64 + 100)
        );
    }
    let applied = index
        .apply(
            100,
            0,
            &Event::Delete {
                key: &[0, 1, 2],
                record: NO_RECORD,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(
        applied.outcome,
        Outcome::Deleted {
            slot: 3,
            record: None
        }
    );
    assert_eq!(applied.drop_slot, None, "our own delete drops nothing");
    assert_eq!(pool.pop(), Some(3), "the deleter owns the slot now");
    assert!(index.lookup(&[0, 1, 2]).is_none());
    // The freed arena record is reused by a key of the same length.
    index
        .apply(
            101,
            2,
            &Event::Create {
                key: b"abc",
                slot: 500,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(index.lookup(b"abc").map(|e| e.slot), Some(500));
    assert_eq!(index.snapshot().len(), 40);
}

#[test]
fn a_lost_create_keeps_the_slot_with_its_owner() {
    let mut index = index();
    let mut pool = SlotPool::default();
    index
        .apply(0, 1, &Event::Create { key: b"k", slot: 7 }, 0, &mut pool)
        .unwrap();
    let applied = index
        .apply(1, 0, &Event::Create { key: b"k", slot: 8 }, 0, &mut pool)
        .unwrap();
    assert_eq!(applied.outcome, Outcome::AlreadyExists);
    assert_eq!(pool.pop(), Some(8));
    assert_eq!(index.lookup(b"k").map(|e| e.slot), Some(7));
}

#[test]
// Over 70 lines on purpose: A scenario: one object's record events in log order, with the
// state after each.
fn record_events_follow_log_order_and_stamp_the_object() {
    let mut index = index();
    let mut pool = SlotPool::default();
    index
        .apply(0, 1, &Event::Create { key: b"k", slot: 7 }, 0, &mut pool)
        .unwrap();
    let first = index
        .apply(
            5,
            1,
            &Event::RecordAlloc {
                key: b"k",
                record: 3,
                epoch: 0,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(first.outcome, Outcome::RecordAllocated);
    let second = index
        .apply(
            6,
            0,
            &Event::RecordAlloc {
                key: b"k",
                record: 4,
                epoch: 0,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(second.outcome, Outcome::RecordAllocLost { existing: 3 });
    let entry = index.lookup(b"k").unwrap();
    assert_eq!((entry.record, entry.stamp), (Some(3), 5));
    index.set_host_counter(entry.handle, Some(12));
    assert_eq!(
        index.current(entry.handle, 5).unwrap().host_counter,
        Some(12)
    );
    let wrap = index
        .apply(9, 2, &Event::Wrap { key: b"k" }, 0, &mut pool)
        .unwrap();
    assert_eq!((wrap.outcome, wrap.drop_slot), (Outcome::Wrapped, Some(7)));
    assert!(index.current(entry.handle, 5).is_none(), "the stamp moved");
    assert_eq!(
        index.lookup(b"k").unwrap().host_counter,
        None,
        "an event makes it unknown"
    );
    // A move made from a copy older than the last event loses.
    let late = index
        .apply(
            10,
            3,
            &Event::MoveToHost {
                key: b"k",
                host: 3,
                stamp: 5,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!((late.outcome, late.drop_slot), (Outcome::MoveLost, None));
    let moved = index
        .apply(
            11,
            3,
            &Event::MoveToHost {
                key: b"k",
                host: 3,
                stamp: 9,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(
        (moved.outcome, moved.drop_slot, moved.touched_slot),
        (Outcome::Moved, Some(7), Some(7))
    );
    let entry = index.lookup(b"k").unwrap();
    assert_eq!(
        (entry.local_owner, entry.stamp, entry.record),
        (Some(3), 11, Some(3))
    );
    index.set_host_counter(entry.handle, Some(4));
    assert_eq!(
        index.lookup(b"k").unwrap().local_owner,
        Some(3),
        "readers keep the owner"
    );
    // Only the holder moves it back; a delete of an object in a host's DRAM loses.
    let not_holder = index
        .apply(12, 0, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
        .unwrap();
    assert_eq!(not_holder.outcome, Outcome::MoveLost);
    let delete = Event::Delete {
        key: b"k",
        record: 3,
    };
    assert_eq!(
        index.apply(13, 3, &delete, 0, &mut pool).unwrap().outcome,
        Outcome::DeleteLost
    );
    let back = index
        .apply(14, 3, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
        .unwrap();
    assert_eq!((back.outcome, back.drop_slot), (Outcome::Moved, Some(7)));
    let own = index
        .apply(
            15,
            0,
            &Event::MoveToHost {
                key: b"k",
                host: 0,
                stamp: 14,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(
        (own.outcome, own.drop_slot, own.touched_slot),
        (Outcome::Moved, None, Some(7)),
        "the mover keeps its lines; its copy, if any, goes"
    );
    let own_back = index
        .apply(16, 0, &Event::MoveToCxl { key: b"k" }, 0, &mut pool)
        .unwrap();
    assert_eq!(own_back.outcome, Outcome::Moved);
    assert_eq!(index.lookup(b"k").unwrap().local_owner, None);
    let stale = index
        .apply(
            17,
            2,
            &Event::RecordDealloc {
                key: b"k",
                record: 4,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(stale.outcome, Outcome::RecordDeallocIgnored);
    let dealloc = index
        .apply(
            18,
            2,
            &Event::RecordDealloc {
                key: b"k",
                record: 3,
            },
            0,
            &mut pool,
        )
        .unwrap();
    assert_eq!(dealloc.outcome, Outcome::RecordDeallocated);
    assert_eq!(index.lookup(b"k").unwrap().record, None);
}

#[test]
fn out_of_range_fields_are_a_corrupt_log() {
    let mut index = index();
    let mut pool = SlotPool::default();
    for event in [
        Event::Create {
            key: b"k",
            slot: 1000,
        },
        Event::GrantSlots {
            to: 9,
            first: 0,
            count: 1,
        },
        Event::GrantSlots {
            to: 1,
            first: 999,
            count: 2,
        },
        Event::MoveToHost {
            key: b"k",
            host: 1,
            stamp: 0,
        },
    ] {
        assert!(matches!(
            index.apply(3, 0, &event, 0, &mut pool),
            Err(Error::CorruptLogEntry { position: 3, .. })
        ));
    }
    assert!(index
        .apply(3, 4, &Event::Wrap { key: b"k" }, 0, &mut pool)
        .is_err());
    // Lock events belong to AllLog pods; records to split ones.
    assert!(index
        .apply(3, 0, &Event::Lock { key: b"k" }, 0, &mut pool)
        .is_err());
    let mut all_log = Index::with_records(1000, 100, 4, Coherence::AllLog);
    assert!(all_log
        .apply(
            3,
            0,
            &Event::RecordAlloc {
                key: b"k",
                record: 1,
                epoch: 0,
            },
            0,
            &mut pool
        )
        .is_err());
}

#[test]
// Over 70 lines on purpose: A scenario: one object's locks in log order, with the state
// after each.
fn all_log_locks_follow_log_order_and_move_the_stamp_and_counter() {
    let mut index = Index::with_records(1000, 100, 4, Coherence::AllLog);
    let mut pool = SlotPool::default();
    let me = 0;
    let mut apply = |index: &mut Index, position: u64, author: HostId, event: &Event<'_>| {
        index.apply(position, author, event, me, &mut pool).unwrap()
    };
    // Keys of several lengths: the lock word sits after the key.
    for (i, key) in [&b"k"[..], b"a longer key of 21 b", b""]
        .into_iter()
        .enumerate()
    {
        let base = i as u64 * 100;
        apply(&mut index, base, 1, &Event::Create { key, slot: base });
        let lock = |index: &Index| index.lookup_locked(key).unwrap().1;
        assert_eq!(
            lock(&index),
            ReplicatedLock {
                holder: None,
                counter: 0
            }
        );
        // Host 2 locks first; host 0's lock loses and changes nothing.
        let won = apply(&mut index, base + 1, 2, &Event::Lock { key });
        assert_eq!((won.outcome, won.drop_slot), (Outcome::Locked, Some(base)));
        let lost = apply(&mut index, base + 2, 0, &Event::Lock { key });
        assert_eq!(
            (lost.outcome, lost.drop_slot),
            (Outcome::LockLost { holder: 2 }, None)
        );
        let (entry, held) = index.lookup_locked(key).unwrap();
        assert_eq!(
            (held.holder, held.counter, entry.stamp),
            (Some(2), 0, base + 1)
        );
        // Only the holder unlocks; a delete that holds no lock loses.
        let stray = apply(&mut index, base + 3, 1, &Event::Unlock { key });
        assert_eq!(stray.outcome, Outcome::NotLocked);
        let delete = Event::Delete {
            key,
            record: NO_RECORD,
        };
        assert_eq!(
            apply(&mut index, base + 4, 0, &delete).outcome,
            Outcome::DeleteLost
        );
        let unlocked = apply(&mut index, base + 5, 2, &Event::Unlock { key });
        assert_eq!(unlocked.outcome, Outcome::Unlocked { counter: 2 });
        let (entry, lock_now) = index.lookup_locked(key).unwrap();
        assert_eq!(
            (lock_now.holder, entry.stamp, entry.host_counter),
            (None, base + 5, None)
        );
        // Our own lock keeps our host counter, our unlock sets it.
        index.set_host_counter(entry.handle, Some(2));
        apply(&mut index, base + 6, me, &Event::Lock { key });
        assert_eq!(index.lookup_locked(key).unwrap().0.host_counter, Some(2));
        let mine = apply(&mut index, base + 7, me, &Event::Unlock { key });
        assert_eq!(
            (mine.outcome, mine.drop_slot),
            (Outcome::Unlocked { counter: 4 }, None)
        );
        assert_eq!(index.lookup_locked(key).unwrap().0.host_counter, Some(4));
        // A delete by the lock's holder wins.
        apply(&mut index, base + 8, 3, &Event::Lock { key });
        let held_by_3 = Event::Delete {
            key,
            record: LOCK_HELD,
        };
        assert_eq!(
            apply(&mut index, base + 9, 1, &held_by_3).outcome,
            Outcome::DeleteLost
        );
        assert!(matches!(
            apply(&mut index, base + 10, 3, &held_by_3).outcome,
            Outcome::Deleted { record: None, .. }
        ));
        // Created again (a reused arena record): unlocked, counter 0.
        apply(
            &mut index,
            base + 11,
            1,
            &Event::Create {
                key,
                slot: base + 1,
            },
        );
        assert_eq!(
            lock(&index),
            ReplicatedLock {
                holder: None,
                counter: 0
            }
        );
    }
}

/// A replica whose index holds `k`, in slot 3.
fn replica_with_k_in_slot_3() -> Replica {
    let mut index = index();
    let create = Event::Create { key: b"k", slot: 3 };
    index
        .apply(0, 1, &create, 0, &mut SlotPool::default())
        .unwrap();
    Replica::new(index, 64)
}

/// The seqlock of lookups without the lock: a lookup that a replay overlapped (begun
/// before it, or begun and ended inside it) is not answered; one that none overlapped is.
#[test]
fn a_lookup_without_the_lock_that_a_replay_overlaps_is_not_trusted() {
    let replica = replica_with_k_in_slot_3();
    let found = |view: &View| view.lookup(b"k").map(|entry| entry.slot);
    let answer = |answered: Option<(Option<u64>, u64)>| answered.map(|(slot, _)| slot);
    let (slot, version) = replica.optimistic(found).expect("nothing overlaps");
    assert_eq!(slot, Some(3));
    assert!(replica.unchanged_since(version), "no replay since");
    let inside = replica.optimistic(|view| {
        let before = found(view);
        drop(replica.write());
        before
    });
    assert_eq!(
        answer(inside),
        None,
        "a replay began and ended during the lookup"
    );
    assert!(
        !replica.unchanged_since(version),
        "a replay since the answer"
    );
    let replay = replica.write();
    assert_eq!(
        answer(replica.optimistic(found)),
        None,
        "a replay is under way"
    );
    assert!(!replica.unchanged_since(version), "a replay under way");
    drop(replay);
    let (slot, after) = replica.optimistic(found).expect("it ended");
    assert_eq!(slot, Some(3));
    let (_, locked) = replica.read_versioned();
    assert_eq!(
        locked, after,
        "under the read lock, the version of the answer"
    );
}

/// A replay that panics half-way (a bug, or no memory for a growing table) leaves an
/// index nobody may trust: lookups without the lock are not answered, and every later
/// use of the replica panics, naming the cause, instead of answering from it.
#[test]
fn a_replay_that_panics_poisons_the_replica() {
    let replica = replica_with_k_in_slot_3();
    let found = |view: &View| view.lookup(b"k").map(|entry| entry.slot);
    // A replay made whole while the thread unwinds from a panic elsewhere (a ticket's
    // drop ends its write) does not poison it.
    struct ReplaysOnDrop<'a>(&'a Replica);
    impl Drop for ReplaysOnDrop<'_> {
        fn drop(&mut self) {
            drop(self.0.write());
        }
    }
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _replays = ReplaysOnDrop(&replica);
        panic!("elsewhere");
    }));
    assert!(unwound.is_err());
    assert!(replica.optimistic(found).is_some(), "not poisoned");
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _replay = replica.write();
        panic!("half-way");
    }));
    assert!(unwound.is_err());
    assert!(replica.optimistic(found).is_none(), "never answered again");
    let message = |caught: Box<dyn std::any::Any + Send>| {
        caught
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| caught.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    };
    let uses: [&dyn Fn(); 3] = [
        &|| drop(replica.read()),
        &|| drop(replica.read_versioned()),
        &|| drop(replica.write()),
    ];
    for (i, used) in uses.into_iter().enumerate() {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(used))
            .expect_err("a poisoned replica is not used");
        assert!(
            message(caught).contains("half-changed by a panic during its replay"),
            "use {i}"
        );
    }
}

/// `HostDead` of a holder, and `HostJoined` of a new life of a holder's id, hand every
/// object named as held in that host's DRAM back to CXL: no owner, a new stamp, and its
/// slot in `handed_back` (the replayer drops every host's lines of it). Objects of other
/// hosts stay where they are.
#[test]
fn a_holder_s_death_or_its_id_s_next_life_hands_its_objects_back() {
    let (mut index, mut pool) = index_of_a_b_c();
    let mut position = 3;
    let mut move_to = |index: &mut Index, key: &[u8], host: HostId| {
        let stamp = index.lookup(key).unwrap().stamp;
        let event = Event::MoveToHost { key, host, stamp };
        let applied = index.apply(position, host, &event, 0, &mut pool).unwrap();
        position += 1;
        assert_eq!(applied.outcome, Outcome::Moved);
    };
    move_to(&mut index, b"a", 2);
    move_to(&mut index, b"b", 2);
    move_to(&mut index, b"c", 3);
    let dead = Event::HostDead { host: 2, joins: 1 };
    index.apply(10, 0, &dead, 0, &mut pool).unwrap();
    let mut handed_back = std::mem::take(&mut index.handed_back);
    handed_back.sort_unstable();
    assert_eq!(handed_back, [3, 4]);
    for key in [b"a", b"b"] {
        let entry = index.lookup(key).unwrap();
        assert_eq!((entry.local_owner, entry.stamp), (None, 10), "{key:?}");
    }
    assert_eq!(index.lookup(b"c").unwrap().local_owner, Some(3));
    // Host 3's id joined again (its last life left c named as held, as it should not).
    index
        .apply(11, 3, &Event::HostJoined { life: 2 }, 0, &mut pool)
        .unwrap();
    assert_eq!(index.handed_back, [5]);
    let entry = index.lookup(b"c").unwrap();
    assert_eq!((entry.local_owner, entry.stamp), (None, 11));
    // A join of an id that held nothing hands nothing back.
    index
        .apply(12, 1, &Event::HostJoined { life: 2 }, 0, &mut pool)
        .unwrap();
    assert!(index.handed_back.is_empty());
}

/// A `HostDead` of an id's earlier life, applied after the id's next life joined (its
/// recoverer was paused past its lease before appending it, taken over, and the id
/// recovered and joined again): the next life keeps its objects and its place as a
/// donor. One of the id's latest life still applies, and a late joiner's snapshot knows
/// which life that is.
#[test]
fn a_dead_life_s_host_dead_after_the_id_s_next_join_changes_nothing() {
    let mut index = index();
    let mut pool = SlotPool::default();
    // Slot 3 claimed first: a snapshot of an object in a slot counted free (here still
    // unclaimed) is refused (review `snap`).
    index
        .apply(0, 1, &Event::ClaimSlots { count: 4 }, 0, &mut pool)
        .unwrap();
    index
        .apply(0, 1, &Event::Create { key: b"a", slot: 3 }, 0, &mut pool)
        .unwrap();
    // Host 2's second life joins, then holds a in its DRAM.
    index
        .apply(1, 2, &Event::HostJoined { life: 2 }, 0, &mut pool)
        .unwrap();
    let stamp = index.lookup(b"a").unwrap().stamp;
    let moved = Event::MoveToHost {
        key: b"a",
        host: 2,
        stamp,
    };
    assert_eq!(
        index.apply(2, 2, &moved, 0, &mut pool).unwrap().outcome,
        Outcome::Moved
    );
    let stale = Event::HostDead { host: 2, joins: 1 };
    let applied = index.apply(3, 1, &stale, 0, &mut pool).unwrap();
    assert_eq!(applied.outcome, Outcome::Noted);
    let entry = index.lookup(b"a").unwrap();
    assert_eq!(
        (entry.local_owner, entry.stamp),
        (Some(2), 2),
        "the stale death changed the next life's object"
    );
    assert!(index.handed_back.is_empty());
    assert!(!index.slots.gone[2], "the next life is not gone");
    // A late joiner's index, from a snapshot here, ignores it too.
    let mut joiner = self::index();
    joiner.decode_snapshot(&index.encode_snapshot()).unwrap();
    assert_eq!(joiner.slots, index.slots);
    joiner.apply(3, 1, &stale, 0, &mut pool).unwrap();
    assert_eq!(joiner.lookup(b"a").unwrap().local_owner, Some(2));
    // The second life's own death hands a back.
    let dead = Event::HostDead { host: 2, joins: 2 };
    index.apply(4, 1, &dead, 0, &mut pool).unwrap();
    assert_eq!(index.handed_back, [3]);
    assert_eq!(index.lookup(b"a").unwrap().local_owner, None);
    assert!(index.slots.gone[2]);
}

fn alloc(key: &[u8], record: u32, epoch: u32) -> Event<'_> {
    Event::RecordAlloc { key, record, epoch }
}

/// A `WidthEnd` takes every object's record (a new stamp, its host counter unknown, its
/// slot handed back for the replayer to drop every host's lines), leaves objects without
/// one alone, and counts the array's records at the new width; allocs of the old width
/// that come after it lose, and only the next epoch's switch counts.
#[test]
// Over 70 lines on purpose: A scenario: one switch, then what comes after it in the log.
fn a_width_switch_takes_every_record_and_counts_the_array_at_the_new_width() {
    let (mut index, mut pool) = index_of_a_b_c();
    index.apply(3, 1, &alloc(b"a", 7, 0), 0, &mut pool).unwrap();
    index.apply(4, 1, &alloc(b"b", 8, 0), 0, &mut pool).unwrap();
    let a = index.lookup(b"a").unwrap();
    index.set_host_counter(a.handle, Some(6));
    assert_eq!(index.record_count(), 100);
    index.handed_back.clear();
    let switch = Event::WidthEnd { epoch: 1, bits: 8 };
    let applied = index.apply(10, 2, &switch, 0, &mut pool).unwrap();
    assert_eq!(
        applied.outcome,
        Outcome::WidthSwitched { epoch: 1, bits: 8 }
    );
    for key in [b"a", b"b"] {
        let entry = index.lookup(key).unwrap();
        assert_eq!(
            (entry.record, entry.stamp, entry.host_counter),
            (None, 10, None),
            "{key:?}"
        );
    }
    assert_eq!(index.lookup(b"c").unwrap().stamp, 2, "c had no record");
    let mut handed_back = std::mem::take(&mut index.handed_back);
    handed_back.sort_unstable();
    assert_eq!(handed_back, [3, 4]);
    assert_eq!(index.record_owner_key(7), None);
    // The array's 400 bytes hold 400 records of 8 bits.
    assert_eq!(index.record_count(), 400);
    assert_eq!(
        index.shape(),
        crate::record::RecordShape { epoch: 1, bits: 8 }
    );
    // A claim of the old width, logged after the switch: it freed that record.
    let stale = index
        .apply(11, 1, &alloc(b"a", 7, 0), 0, &mut pool)
        .unwrap();
    assert_eq!(stale.outcome, Outcome::RecordAllocStale);
    assert_eq!(index.lookup(b"a").unwrap().record, None);
    // One of the new width, past the old width's count.
    let fresh = index
        .apply(12, 1, &alloc(b"a", 399, 1), 0, &mut pool)
        .unwrap();
    assert_eq!(fresh.outcome, Outcome::RecordAllocated);
    // A replaced drainer's repeat of the switch changes nothing.
    let again = index.apply(13, 3, &switch, 0, &mut pool).unwrap();
    assert_eq!(again.outcome, Outcome::WidthRepeated);
    assert_eq!(index.lookup(b"a").unwrap().record, Some(399));
    // What no appender writes: an epoch skipped, a width no record has, an alloc of a
    // width not switched to.
    for (position, event) in [
        (14, Event::WidthEnd { epoch: 3, bits: 8 }),
        (15, Event::WidthEnd { epoch: 2, bits: 3 }),
        (16, alloc(b"b", 1, 2)),
    ] {
        assert!(
            matches!(
                index.apply(position, 1, &event, 0, &mut pool),
                Err(Error::CorruptLogEntry { .. })
            ),
            "{event:?}"
        );
    }
}

/// An index of a pod whose keys are at most `max_key_bytes`.
fn index_with_keys_of(max_key_bytes: u32) -> Index {
    let shape = crate::record::RecordShape { epoch: 0, bits: 32 };
    Index::new(1 << 20, 400, shape, 4, max_key_bytes, Coherence::Split)
}

/// A log entry of a pod of 16-byte keys is one line (32 header bytes + 16, rounded up to
/// 64): `Event::decode` takes any key that fits the entry (up to 32 bytes here), and
/// `apply` takes what it decodes. A key past the pod's maximum is damage, as a slot past
/// the pod's slots is (`out_of_range_fields_are_a_corrupt_log`): it must be
/// `CorruptLogEntry`, not an object nobody can name, that every snapshot carries and
/// every joiner refuses.
#[test]
fn a_logged_key_past_the_pods_maximum_is_a_corrupt_entry() {
    let config = crate::PodConfig {
        max_key_bytes: 16,
        ..crate::PodConfig::default()
    };
    let mut entry = vec![0u8; config.log_entry_bytes() as usize];
    let long = [b'x'; 30];
    Event::Create {
        key: &long,
        slot: 7,
    }
    .encode(1, &mut entry);
    let (author, event) = Event::decode(5, &entry).expect("decodes: the key fits the entry");
    let mut index = index_with_keys_of(16);
    let applied = index.apply(5, author, &event, 0, &mut SlotPool::default());
    // What follows from accepting it: the replica's snapshot names a key its own decode
    // refuses, so no host can ever join late from it.
    let snapshot = index.encode_snapshot();
    let joined = index_with_keys_of(16).decode_snapshot(&snapshot);
    assert!(
        matches!(applied, Err(Error::CorruptLogEntry { position: 5, .. })),
        "applied: {applied:?}; a late joiner's decode of the snapshot then: {joined:?}"
    );
}

/// The same in a pod of the largest keys (1024 bytes, entries of 1088): a 1056-byte key
/// decodes, and the table's next growth rehashes it through a 1024-byte buffer: the
/// replay panics, and every replica of the pod is poisoned at the same entry.
#[test]
fn a_logged_key_past_the_largest_maximum_does_not_panic_replay() {
    let max = crate::limits::MAX_KEY_BYTES_LIMIT;
    let config = crate::PodConfig {
        max_key_bytes: max,
        ..crate::PodConfig::default()
    };
    let entry_bytes = config.log_entry_bytes() as usize;
    let long = vec![b'y'; entry_bytes - crate::limits::LOG_ENTRY_HEADER_BYTES as usize];
    let mut entry = vec![0u8; entry_bytes];
    Event::Create {
        key: &long,
        slot: 0,
    }
    .encode(1, &mut entry);
    let replica = Replica::new(index_with_keys_of(max), entry_bytes);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut pool = SlotPool::default();
        let mut index = replica.write();
        let (author, event) = Event::decode(0, &entry).expect("fits the entry");
        let first = index.apply(0, author, &event, 0, &mut pool);
        // Ordinary creates after it, until the table grows.
        for i in 1..40u64 {
            let key = i.to_le_bytes();
            let create = Event::Create { key: &key, slot: i };
            index.apply(i, 1, &create, 0, &mut pool).expect("a create");
        }
        first
    }));
    assert!(
        matches!(outcome, Ok(Err(Error::CorruptLogEntry { .. }))),
        "replay of a {}-byte key: {}; replica poisoned: {}",
        long.len(),
        match &outcome {
            Ok(applied) => format!("{applied:?}"),
            Err(_) => "panicked".to_string(),
        },
        replica.is_poisoned()
    );
}
