//! The object protocol across hosts of one process, on simulated non-coherent memory.

mod common;

use std::sync::Arc;

use common::{
    config, heap_pod, host, join, read, small_cache, two_hosts, value, write_on_one_read_on_both,
    written_k, SLOT,
};
use megalon_core::{Error, Host, HostOptions, Pod, ReleaseHook, ReleaseReason, Releasing};

fn pod(record_width_bits: u32, scr_bytes: u64) -> Arc<Pod> {
    heap_pod(
        &config()
            .scr_bytes(scr_bytes)
            .record_width_bits(record_width_bits),
    )
}

/// Options that never reclaim a record in the background.
fn no_reclaim(seed: u64) -> HostOptions {
    small_cache(seed).record_watermark(1.0)
}

/// Options without a pump: a host's replica moves only when its own calls catch up, so
/// a step that catches up (the read's tail check) is the only way a read learns of
/// another host's event, whatever the machine's load (a pump replaying in the background
/// hid a read without its tail check in some runs).
fn no_pump(seed: u64) -> HostOptions {
    small_cache(seed).pump_interval(None)
}

/// The record of `key` on `host`'s replica, which it must have.
fn record_of(host: &Host, key: &[u8]) -> u32 {
    let entry = host.lookup(key).unwrap().expect("the object exists");
    entry.record.expect("written: has a record")
}

/// What replay invalidates is counted with what the object protocol does: the lines of
/// each log entry it reads and of each slot whose lines it drops (another host's events).
/// Host b replays a's three creates: four entries (a claim of slots first), three
/// slots. (Before, its count did
/// not move: the figures' "lines invalidated" left replay out, where HCMeta's counts
/// every request and response it reads from its rings.)
#[test]
fn replay_counts_the_lines_it_invalidates() {
    let pod = pod(32, 64 << 10);
    let (a, b) = two_hosts(&pod, no_pump, 1);
    b.replay().unwrap();
    let (events, stats) = (b.events(), b.inspect().stats());
    for n in 0..3u8 {
        a.create(&[b'k', n], &value(n)).unwrap();
    }
    b.replay().unwrap();
    let stats_after = b.inspect().stats();
    // The creates, and a's claim of slots before the first.
    let entries = stats_after.entries_replayed - stats.entries_replayed;
    assert_eq!(entries, 4);
    assert_eq!(stats_after.slots_dropped - stats.slots_dropped, 3);
    let entry_lines = pod.layout().log_entry_bytes.div_ceil(64);
    let slot_lines = (SLOT as u64).div_ceil(64);
    assert_eq!(
        b.events().lines_invalidated - events.lines_invalidated,
        entries * entry_lines + 3 * slot_lines,
        "{entry_lines} lines an entry, {slot_lines} a slot"
    );
}

#[test]
fn a_write_on_one_host_is_read_on_another_without_stale_lines() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), no_pump, 1);
    write_on_one_read_on_both(&a, &b);
    let events = a.events();
    assert_eq!(events.writes, 19);
    assert_eq!(events.record_allocs, 1, "one record for one object");
    assert!(b.events().lines_invalidated > 0);
}

#[test]
fn eight_bit_records_wrap_through_the_log_and_stay_correct() {
    let (a, b) = two_hosts(&pod(8, 64 << 10), small_cache, 3);
    a.create(b"k", &value(0)).unwrap();
    for round in 1..=200u32 {
        let (writer, reader) = if round % 3 == 0 { (&b, &a) } else { (&a, &b) };
        writer.write(b"k", &value(round as u8)).unwrap();
        assert_eq!(read(reader, b"k"), value(round as u8), "round {round}");
    }
    // 6-bit counters, +2 per write: a wrap every 32 writes.
    let wraps = a.events().wraps + b.events().wraps;
    assert_eq!(wraps, 200 / 32, "a wrap event every 32 writes");
}

/// Writes more objects than the pod has records (a 4 KiB SCR with 4 hosts leaves a few
/// hundred 32-bit records), reading each back on the other host.
fn write_more_objects_than_records(a: &Host, b: &Host) -> u64 {
    let (_, records) = a.inspect().records_in_use();
    let objects = records as u32 + 50;
    for i in 0..objects {
        a.create(format!("k{i}").as_bytes(), &value(i as u8))
            .unwrap();
    }
    for i in 0..objects {
        let key = format!("k{i}");
        a.write(key.as_bytes(), &value(i as u8 ^ 0x55)).unwrap();
        assert_eq!(read(b, key.as_bytes()), value(i as u8 ^ 0x55), "object {i}");
    }
    records
}

#[test]
fn too_few_records_churn_instead_of_failing() {
    // No background reclaim: allocation itself must take other objects' records.
    let (a, b) = two_hosts(&pod(32, 4096), no_reclaim, 6);
    let records = write_more_objects_than_records(&a, &b);
    let (in_use, all) = a.inspect().records_in_use();
    assert_eq!(
        (in_use, all),
        (records, records),
        "every record in use at the end"
    );
    let churn = a.events().churn + b.events().churn;
    assert!(
        churn >= 50,
        "at least one churn per object past the records: {churn}"
    );
    assert!(a.events().record_deallocs + b.events().record_deallocs >= 50);
}

#[test]
fn the_background_reclaimer_keeps_records_under_the_watermark() {
    let reclaim_to_half = |seed| small_cache(seed).record_watermark(0.5);
    let (a, b) = two_hosts(&pod(32, 4096), reclaim_to_half, 8);
    let records = write_more_objects_than_records(&a, &b);
    // The pumps run every millisecond; give them a moment to catch up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while a.inspect().records_in_use().0 > records / 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        a.inspect().records_in_use().0 <= records / 2,
        "{:?}",
        a.inspect().records_in_use()
    );
    let pump_deallocs: u64 = a
        .inspect()
        .per_thread_events()
        .iter()
        .chain(b.inspect().per_thread_events().iter())
        .map(|e| e.record_deallocs)
        .sum();
    assert!(pump_deallocs > 0);
}

#[test]
fn deleting_a_written_object_frees_its_record() {
    let (a, b) = two_hosts(&pod(16, 64 << 10), small_cache, 8);
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().records_in_use().0, 1);
    b.delete(b"k").unwrap();
    assert_eq!(a.inspect().records_in_use().0, 0);
    let mut buf = vec![0u8; SLOT];
    assert!(matches!(a.read(b"k", &mut buf), Err(Error::UnknownKey)));
    assert!(matches!(a.write(b"k", &value(3)), Err(Error::UnknownKey)));
    b.create(b"k", &value(4)).unwrap();
    assert_eq!(read(&a, b"k"), value(4));
}

#[test]
fn update_and_partial_writes_keep_the_rest_of_the_object() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), small_cache, 10);
    a.create(b"k", &value(0)).unwrap();
    read(&b, b"k");
    a.write_at(b"k", 100, &[0xee; 8]).unwrap();
    let (sum, _) = b
        .update(b"k", |bytes| {
            let sum = bytes.iter().map(|&x| u64::from(x)).sum::<u64>();
            bytes[0] = 0xaa;
            sum
        })
        .unwrap();
    let mut expected = value(0);
    expected[100..108].fill(0xee);
    assert_eq!(sum, expected.iter().map(|&x| u64::from(x)).sum::<u64>());
    expected[0] = 0xaa;
    assert_eq!(read(&a, b"k"), expected);
    let mut copy = vec![0u8; expected.len()];
    let done = a.read(b"k", &mut copy).unwrap();
    assert_eq!((copy, done.retries), (expected, 0));
}

#[test]
fn bad_input_is_refused() {
    let a = host(&pod(32, 64 << 10), 12);
    let mut big = vec![0u8; SLOT + 1];
    assert!(matches!(
        a.read(b"absent", &mut [0u8; 8]),
        Err(Error::UnknownKey)
    ));
    assert!(matches!(a.write(b"absent", b"x"), Err(Error::UnknownKey)));
    a.create(b"k", b"v").unwrap();
    assert!(matches!(
        a.read(b"k", &mut big),
        Err(Error::ValueTooLarge {
            value_bytes: 257,
            ..
        })
    ));
    assert!(matches!(
        a.write(b"k", &big),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        a.write_at(b"k", 250, &[0; 7]),
        Err(Error::ValueTooLarge { .. })
    ));
    big.truncate(49);
    assert!(matches!(
        a.read(&big, &mut [0u8; 8]),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        a.write_start(&big),
        Err(Error::KeyTooLarge { .. })
    ));
}

#[test]
fn a_partial_write_over_stale_lines_keeps_the_other_hosts_bytes() {
    // Host b caches the object, a rewrites all of it, then b writes 8 bytes into its first
    // line. The rest of that line must be a's bytes, not b's stale cached ones: the writer
    // stores only its bytes, straight to memory. Random eviction is off so that b's stale
    // line stays cached.
    let quiet = |seed| HostOptions::new().memory(common::simulated(seed, 512, 0));
    let (a, b) = two_hosts(&pod(32, 64 << 10), quiet, 13);
    written_k(&a);
    common::partial_write_over_stale_lines(&a, &b);
}

#[test]
fn a_creator_reads_its_new_object_as_every_other_host_does() {
    // a caches the lines of object x; b rewrites x (a's lines go stale); a deletes x (its
    // slot comes back to a) and creates y, shorter than a slot, in it. y is read-shared:
    // reads make no check. a must read y as b does, from memory, not from the stale
    // lines of x beyond y's value that its create left in its cache.
    let quiet = |seed| HostOptions::new().memory(common::simulated(seed, 512, 0));
    let (a, b) = two_hosts(&pod(32, 64 << 10), quiet, 41);
    a.create(b"x", &value(0)).unwrap();
    b.write(b"x", &value(1)).unwrap();
    let slot = a.lookup(b"x").unwrap().unwrap().slot;
    assert_eq!(read(&a, b"x"), value(1));
    b.write(b"x", &value(2)).unwrap();
    a.delete(b"x").unwrap();
    a.create(b"y", &[7u8; 16]).unwrap();
    assert_eq!(
        a.lookup(b"y").unwrap().unwrap().slot,
        slot,
        "y reuses x's slot"
    );
    let on_b = read(&b, b"y");
    assert_eq!(&on_b[..16], &[7u8; 16]);
    assert_eq!(
        read(&a, b"y"),
        on_b,
        "the creator read stale bytes of the slot's old object"
    );
}

#[test]
fn an_update_and_a_tickets_read_over_stale_lines_see_the_current_version() {
    // Host b caches the object, a rewrites all of it, then b changes one byte of it by
    // `update`, and reads it under a ticket: both must start from a's version, not b's
    // stale lines (the writer drops them when the counter moved). Random eviction is off
    // so that b's stale lines stay cached.
    let quiet = |seed| HostOptions::new().memory(common::simulated(seed, 512, 0));
    let (a, b) = two_hosts(&pod(32, 64 << 10), quiet, 17);
    written_k(&a);
    read(&b, b"k");
    a.write(b"k", &value(2)).unwrap();
    b.update(b"k", |bytes| bytes[100] ^= 0xff).unwrap();
    let mut expected = value(2);
    expected[100] ^= 0xff;
    assert_eq!(
        read(&a, b"k"),
        expected,
        "b's update started from a stale copy"
    );
    read(&b, b"k");
    a.write(b"k", &value(3)).unwrap();
    let ticket = b.write_start(b"k").unwrap();
    let mut seen = vec![0u8; SLOT];
    ticket.read(0, &mut seen).unwrap();
    b.write_end(ticket).unwrap();
    assert_eq!(seen, value(3), "b's ticket read a stale copy");
}

#[test]
fn a_write_in_progress_keeps_its_record() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), small_cache, 15);
    written_k(&a);
    let ticket = a.write_start(b"k").unwrap();
    // The deallocator must take the record's lock first: held by the writer, it fails.
    assert!(
        !b.make_read_shared(b"k").unwrap(),
        "no deallocation under a writer"
    );
    a.memory().write(ticket.offset(), &value(2));
    a.write_end(ticket).unwrap();
    assert_eq!(read(&b, b"k"), value(2));
    // With no write in progress it succeeds, and the object reads the same.
    assert!(b.make_read_shared(b"k").unwrap());
    assert!(!b.make_read_shared(b"k").unwrap(), "read-shared already");
    assert_eq!(read(&a, b"k"), value(2));
    assert_eq!(b.events().record_deallocs, 1);
}

#[test]
fn a_write_ticket_ended_on_another_host_is_refused_and_ends_on_its_own() {
    // b's `write_end` of a's ticket would write back b's lines, not a's, and unlock with
    // a's bytes still in a's cache. It panics instead, and the ticket's drop ends the write
    // on a: the bytes reach memory, the record is unlocked.
    let quiet = |seed| HostOptions::new().memory(common::simulated(seed, 512, 0));
    let (a, b) = two_hosts(&pod(32, 64 << 10), quiet, 16);
    written_k(&a);
    let ticket = a.write_start(b"k").unwrap();
    a.memory().write(ticket.offset(), &value(7));
    let misuse = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.write_end(ticket)));
    assert!(misuse.is_err(), "b ended a's write");
    assert_eq!(read(&b, b"k"), value(7));
    a.write(b"k", &value(8)).expect("the record is unlocked");
    assert_eq!(read(&b, b"k"), value(8));
}

#[test]
fn no_free_and_no_reclaimable_record_is_a_typed_error_that_loses_nothing() {
    // Every record held by a write in progress: nothing is free and nothing can be
    // reclaimed (a locked record is never taken), so one more write must fail cleanly.
    let (a, b) = two_hosts(&pod(32, 4096), no_reclaim, 17);
    let (_, records) = a.inspect().records_in_use();
    for i in 0..=records {
        a.create(format!("k{i}").as_bytes(), &value(i as u8))
            .unwrap();
    }
    let tickets: Vec<_> = (0..records)
        .map(|i| a.write_start(format!("k{i}").as_bytes()).unwrap())
        .collect();
    assert_eq!(a.inspect().records_in_use(), (records, records));
    let last = format!("k{records}");
    match b.write(last.as_bytes(), &value(0xff)) {
        Err(Error::ScrRecordsExhausted {
            records: all,
            in_use,
        }) => {
            assert_eq!((all, in_use), (records, records));
        }
        other => panic!("expected ScrRecordsExhausted, got {other:?}"),
    }
    // Finish the writes in progress: every object holds what was written, the failed
    // write changed nothing, and it succeeds now that records can be reclaimed.
    for (i, ticket) in tickets.into_iter().enumerate() {
        a.memory().write(ticket.offset(), &value(i as u8 ^ 0x0f));
        a.write_end(ticket).unwrap();
    }
    for i in 0..records {
        let key = format!("k{i}");
        assert_eq!(
            read(&b, key.as_bytes()),
            value(i as u8 ^ 0x0f),
            "object {i}"
        );
    }
    assert_eq!(
        read(&b, last.as_bytes()),
        value(records as u8),
        "the refused write left the object as it was"
    );
    b.write(last.as_bytes(), &value(0xff)).unwrap();
    assert_eq!(read(&a, last.as_bytes()), value(0xff));
}

#[test]
fn a_reader_in_the_middle_of_a_deleted_object_retries_and_finds_it_gone() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), no_pump, 19);
    for (key, written) in [(&b"shared"[..], false), (&b"written"[..], true)] {
        a.create(key, &value(1)).unwrap();
        if written {
            a.write(key, &value(2)).unwrap(); // read-write-shared: it has a record
        }
        let ticket = b.read_start(key).unwrap();
        let mut copy = vec![0u8; SLOT];
        b.memory().read(ticket.offset(), &mut copy);
        a.delete(key).unwrap();
        assert!(
            !b.read_end(ticket).unwrap(),
            "{key:?}: the delete invalidates the read"
        );
        assert!(matches!(b.read(key, &mut copy), Err(Error::UnknownKey)));
        assert!(b.events().read_retries_event > 0);
    }
}

// ---------------------------------------------------------------- the release hook

/// What a release hook saw: (reason, key, record, the object's first bytes).
type Seen = Arc<parking_lot::Mutex<Vec<(ReleaseReason, Vec<u8>, u32, Vec<u8>)>>>;

/// On a new pod: host a (seeded `seed`) with a release hook that records what it sees and
/// answers `allow`, host b (seeded `seed + 1`) without one, and the object `k`, created by
/// a.
fn hooked_and_plain_host(seed: u64, allow: bool) -> (Host, Host, Seen) {
    let pod = pod(32, 64 << 10);
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let hook = ReleaseHook::new(move |object: &Releasing<'_>| {
        let mut bytes = vec![0u8; 8];
        object.read(&mut bytes);
        log.lock().push((
            object.reason(),
            object.key().to_vec(),
            object.record(),
            bytes,
        ));
        allow
    });
    let a = join(&pod, small_cache(seed).release_hook(hook));
    let b = host(&pod, seed + 1);
    a.create(b"k", &value(0)).unwrap();
    (a, b, seen)
}

#[test]
fn the_release_hook_sees_the_last_write_before_a_record_goes() {
    let (a, b, seen) = hooked_and_plain_host(11, true);
    b.write(b"k", &value(5)).unwrap(); // allocates the record (an event a replays)
    read(&a, b"k"); // a caches the object's lines at version 5
    b.write(b"k", &value(7)).unwrap(); // no event: a's lines are stale now
    let record = record_of(&a, b"k");
    assert!(a.make_read_shared(b"k").unwrap());
    assert_eq!(
        seen.lock().as_slice(),
        [(
            ReleaseReason::MakeReadShared,
            b"k".to_vec(),
            record,
            value(7)[..8].to_vec()
        )],
        "the hook reads memory, not a's stale lines"
    );
    assert_eq!(a.lookup(b"k").unwrap().unwrap().record, None);

    b.write(b"k", &value(9)).unwrap();
    read(&a, b"k");
    b.write(b"k", &value(10)).unwrap();
    let record = record_of(&a, b"k");
    a.delete(b"k").unwrap();
    assert_eq!(
        seen.lock().last().unwrap(),
        &(
            ReleaseReason::Delete,
            b"k".to_vec(),
            record,
            value(10)[..8].to_vec()
        )
    );
    // A read-shared object has no record to release: its delete does not call the hook.
    a.create(b"r", &value(1)).unwrap();
    a.delete(b"r").unwrap();
    assert_eq!(seen.lock().len(), 2);
}

#[test]
fn a_refusing_release_hook_keeps_the_record_and_the_object() {
    let (a, b, seen) = hooked_and_plain_host(13, false);
    b.write(b"k", &value(3)).unwrap();
    let record = record_of(&a, b"k");
    assert!(!a.make_read_shared(b"k").unwrap());
    let Err(Error::ReleaseRefused { record: kept }) = a.delete(b"k") else {
        panic!("a refused delete must say so");
    };
    assert_eq!(kept, record);
    assert_eq!(seen.lock().len(), 2);
    // Nothing changed: the record is unlocked (b writes again) and the object is whole.
    assert_eq!(a.lookup(b"k").unwrap().unwrap().record, Some(record));
    b.write(b"k", &value(4)).unwrap();
    assert_eq!(read(&a, b"k"), value(4));
    // Another host without the hook deletes it.
    b.delete(b"k").unwrap();
    assert!(matches!(
        a.read(b"k", &mut [0u8; SLOT]),
        Err(Error::UnknownKey)
    ));
}

/// `keys` read with one `read_many` on `host`, each into a whole slot: the answers and
/// the bytes, in order.
fn read_many(host: &Host, keys: &[Vec<u8>]) -> Vec<Result<Vec<u8>, Error>> {
    let mut bufs = vec![vec![0u8; SLOT]; keys.len()];
    let mut reads = common::reads(keys, &mut bufs);
    let answers = host.read_many(&mut reads);
    assert_eq!(answers.len(), keys.len(), "an answer for every read");
    answers
        .into_iter()
        .zip(bufs)
        .map(|(answer, buf)| answer.map(|_| buf))
        .collect()
}

#[test]
fn read_many_answers_every_read_in_order_across_groups() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), small_cache, 11);
    // 37 keys: more than one group, and a group cut short. Every third one is written
    // (it has a record), every seventh is never created.
    let keys: Vec<Vec<u8>> = (0..37).map(|i| format!("many-{i}").into_bytes()).collect();
    for (i, key) in keys.iter().enumerate() {
        if i % 7 != 6 {
            a.create(key, &value(i as u8)).unwrap();
            if i % 3 == 0 {
                a.write(key, &value(i as u8 + 100)).unwrap();
            }
        }
    }
    for host in [&a, &b] {
        for (i, answer) in read_many(host, &keys).into_iter().enumerate() {
            match answer {
                Ok(bytes) => {
                    assert_ne!(i % 7, 6, "key {i} was never created");
                    let tag = if i % 3 == 0 { i as u8 + 100 } else { i as u8 };
                    assert_eq!(bytes, value(tag), "key {i}");
                    assert_eq!(bytes, read(host, &keys[i]), "as read gives it");
                }
                Err(error) => {
                    assert_eq!(i % 7, 6, "key {i}: {error}");
                    assert!(matches!(error, Error::UnknownKey), "key {i}: {error}");
                }
            }
        }
    }
    assert!(a.read_many(&mut []).is_empty());
}

#[test]
fn read_many_refuses_bad_reads_and_still_answers_the_others() {
    let (a, _b) = two_hosts(&pod(32, 64 << 10), small_cache, 13);
    a.create(b"good", &value(1)).unwrap();
    let long_key = vec![b'x'; 49];
    let (mut small, mut big, mut fine, mut fine_too) = (
        vec![0u8; 8],
        vec![0u8; SLOT + 1],
        vec![0u8; SLOT],
        vec![0u8; SLOT],
    );
    let mut reads: Vec<(&[u8], &mut [u8])> = vec![
        (&long_key, &mut fine),
        (b"good", &mut big),
        (b"good", &mut small),
        (b"good", &mut fine_too),
    ];
    let answers = a.read_many(&mut reads);
    assert!(matches!(
        answers[0],
        Err(Error::KeyTooLarge { key_bytes: 49, .. })
    ));
    assert!(
        matches!(answers[1], Err(Error::ValueTooLarge { value_bytes, .. }) if value_bytes == SLOT + 1)
    );
    assert!(answers[2].is_ok() && answers[3].is_ok());
    assert_eq!(small, value(1)[..8]);
    assert_eq!(fine_too, value(1));
}

#[test]
fn read_many_on_another_host_sees_every_write_without_stale_lines() {
    // b's cache keeps lines until something drops them (no random eviction): a stale
    // line of an object a rewrote stays unless the read protocol drops it.
    let options = |seed| HostOptions::new().memory(common::simulated(seed, 4096, 0));
    let (a, b) = two_hosts(&pod(8, 64 << 10), options, 17);
    let keys: Vec<Vec<u8>> = (0..20).map(|i| format!("seen-{i}").into_bytes()).collect();
    for key in &keys {
        a.create(key, &value(0)).unwrap();
    }
    for round in 1..=40u8 {
        // Half the objects rewritten each round (8-bit records: counters wrap).
        for key in keys.iter().skip(usize::from(round % 2)).step_by(2) {
            a.write(key, &value(round)).unwrap();
        }
        for (i, answer) in read_many(&b, &keys).into_iter().enumerate() {
            let last = if round == 1 && i % 2 == 0 {
                0
            } else if i % 2 == usize::from(round % 2) {
                round
            } else {
                round - 1
            };
            assert_eq!(answer.unwrap(), value(last), "round {round}, key {i}");
        }
    }
    assert!(b.events().lines_invalidated > 0);
}

#[test]
fn read_many_prefix_copies_what_each_extent_asks_as_read_prefix_does() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), small_cache, 19);
    // Object i holds its length (10 + 9 i bytes) in its first byte.
    let keys: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("prefix-{i}").into_bytes())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        let mut object = value(i as u8);
        object[0] = 10 + 9 * i as u8;
        a.create(key, &object).unwrap();
        if i % 2 == 0 {
            a.write(key, &object).unwrap();
        }
    }
    let extent = |first: &[u8]| usize::from(first[0]);
    let mut bufs = vec![vec![0u8; SLOT]; keys.len()];
    let mut reads = common::reads(&keys, &mut bufs);
    let answers = b.read_many_prefix(&mut reads, &extent);
    for (i, (answer, buf)) in answers.into_iter().zip(&bufs).enumerate() {
        let (copied, _) = answer.unwrap();
        let mut one = vec![0u8; SLOT];
        let (expected, _) = b.read_prefix(&keys[i], &mut one, &extent).unwrap();
        // The first line always, then as far as the extent says.
        assert_eq!(copied, (10 + 9 * i).max(Host::FIRST_READ_BYTES), "key {i}");
        assert_eq!(copied, expected, "key {i}: as read_prefix copies");
        assert_eq!(buf[..copied], one[..copied], "key {i}");
        assert!(
            buf[copied..].iter().all(|&byte| byte == 0),
            "key {i}: no more copied"
        );
    }
}

/// `read_end`'s check of the record (DESIGN section 8, step 4) on its own: a write that
/// changes no stamp (a steady-state write appends no event) tears the reader's copy, and
/// only the record's counter, odd now, says so. The reader starts, a writer on another host
/// locks the object and writes its first line, which reaches memory (as an eviction may
/// make it), and the reader copies from memory: the copy is torn, and `read_end` must
/// refuse it.
#[test]
fn a_copy_torn_by_a_write_in_progress_is_refused_by_the_record() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), no_pump, 60);
    written_k(&a);
    let ticket = b.read_start(b"k").unwrap();
    let write = a.write_start(b"k").unwrap();
    write.write(0, &[0xee; 64]).unwrap();
    a.memory().write_back(write.offset(), 64);
    a.memory().fence();
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    assert_eq!(&copy[..64], &[0xee; 64], "the copy is torn");
    assert_eq!(&copy[64..], &value(1)[64..], "the copy is torn");
    assert!(
        !b.read_end(ticket).unwrap(),
        "read_end accepted a torn copy"
    );
    a.write_end(write).unwrap();
    let mut expected = value(1);
    expected[..64].fill(0xee);
    assert_eq!(read(&b, b"k"), expected);
}

/// As above, on a host that has read the object once since its last write, so that its
/// index knows the record's counter: `read_end` then checks the record on its short path
/// (the index unchanged, the host counter the record's), which must refuse the torn copy
/// as the full steps do.
#[test]
fn a_copy_torn_by_a_write_in_progress_is_refused_by_the_record_on_a_host_that_knows_it() {
    let (a, b) = two_hosts(&pod(32, 64 << 10), no_pump, 60);
    written_k(&a);
    assert_eq!(read(&b, b"k"), value(1));
    let entry = b.lookup(b"k").unwrap().unwrap();
    assert!(
        entry.host_counter.is_some(),
        "the read told the index the record's counter"
    );
    let ticket = b.read_start(b"k").unwrap();
    let write = a.write_start(b"k").unwrap();
    write.write(0, &[0xee; 64]).unwrap();
    a.memory().write_back(write.offset(), 64);
    a.memory().fence();
    // The reader's lines of the object, from its first read, leave its cache (as a full
    // cache evicts them): its copy comes from memory.
    b.memory().flush(ticket.offset(), SLOT);
    b.memory().fence();
    let mut copy = vec![0u8; SLOT];
    ticket.read(0, &mut copy).unwrap();
    assert_eq!(&copy[..64], &[0xee; 64], "the copy is torn");
    assert!(
        !b.read_end(ticket).unwrap(),
        "read_end accepted a torn copy"
    );
    a.write_end(write).unwrap();
    assert_eq!(
        b.lookup(b"k").unwrap().unwrap().host_counter,
        None,
        "the refusal made the host counter unknown"
    );
    let mut expected = value(1);
    expected[..64].fill(0xee);
    assert_eq!(read(&b, b"k"), expected);
}

/// A read's look at `ctail` counts as an SCR access when it finds entries to replay (its
/// line changed: a coherent miss), not when it finds nothing new (a hit), as HCMeta's
/// ring poll: the CXL cost model charges both schemes' polls alike.
#[test]
fn a_look_at_ctail_counts_only_when_it_finds_something_new() {
    let pod = pod(32, 64 << 10);
    let (a, b) = (
        common::join(&pod, no_pump(1)),
        common::join(&pod, no_pump(2)),
    );
    a.create(b"k", &value(1)).unwrap();
    let scr = |host: &Host| host.events().scr_atomics;
    let before = scr(&b);
    assert_eq!(read(&b, b"k"), value(1));
    assert_eq!(
        scr(&b) - before,
        1,
        "a read-shared read after an append: ctail"
    );
    let before = scr(&b);
    assert_eq!(read(&b, b"k"), value(1));
    assert_eq!(scr(&b) - before, 0, "nothing new");
}

/// A delete of an object with a record makes three SCR accesses more than a delete of a
/// read-shared one: the record's load, the CAS that locks it, and the CAS that frees it
/// (`free_released`). The counter is what the CXL cost model charges: each access counted
/// once. (It counted the free's CAS twice: once in `free_released`, once in the
/// `unlock_record` it calls.)
#[test]
fn a_deletes_record_accesses_are_counted_once_each() {
    let a = common::join(&pod(32, 64 << 10), no_pump(1));
    a.create(b"shared", &value(1)).unwrap();
    a.create(b"written", &value(2)).unwrap();
    a.write(b"written", &value(3)).unwrap();
    assert!(a.lookup(b"written").unwrap().unwrap().record.is_some());
    assert!(a.lookup(b"shared").unwrap().unwrap().record.is_none());
    // Up to date: the deletes' tail checks find nothing new.
    assert_eq!(read(&a, b"shared"), value(1));
    let scr = |host: &Host| host.events().scr_atomics;
    let before = scr(&a);
    a.delete(b"shared").unwrap();
    let read_shared = scr(&a) - before;
    let before = scr(&a);
    a.delete(b"written").unwrap();
    let with_record = scr(&a) - before;
    assert_eq!(
        with_record - read_shared,
        3,
        "load, lock CAS, free CAS (read-shared delete: {read_shared}, with a record: {with_record})"
    );
}
