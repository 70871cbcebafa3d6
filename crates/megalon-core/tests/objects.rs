//! The object protocol across hosts of one process, on simulated non-coherent memory.

use std::sync::Arc;

use megalon_core::{
    Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, ReleaseHook,
    ReleaseReason, Releasing, SimulatedConfig,
};

fn pod(record_width_bits: u32, scr_bytes: u64) -> Arc<Pod> {
    let config = PodConfig::new()
        .scr_bytes(scr_bytes)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(256)
        .max_key_bytes(48)
        .log_capacity_entries(256)
        .record_width_bits(record_width_bits)
        .max_hosts(4);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines: 512,
        random_eviction_one_in: 64,
    }))
}

fn host(pod: &Arc<Pod>, seed: u64) -> Host {
    Host::join(pod, Join::AnyFree, options(seed)).expect("join")
}

fn value(tag: u8) -> Vec<u8> {
    (0..256).map(|i| tag.wrapping_add(i as u8)).collect()
}

#[test]
fn a_write_on_one_host_is_read_on_another_without_stale_lines() {
    let pod = pod(32, 64 << 10);
    let a = host(&pod, 1);
    let b = host(&pod, 2);
    a.create(b"k", &value(0)).unwrap();
    let mut buf = vec![0u8; 256];
    b.read(b"k", &mut buf).unwrap(); // b caches the object's lines
    assert_eq!(buf, value(0));
    for round in 1..20u8 {
        a.write(b"k", &value(round)).unwrap();
        b.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, value(round), "round {round}");
        a.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, value(round));
    }
    let events = a.events();
    assert_eq!(events.writes, 19);
    assert_eq!(events.record_allocs, 1, "one record for one object");
    assert!(b.events().lines_invalidated > 0);
}

#[test]
fn eight_bit_records_wrap_through_the_log_and_stay_correct() {
    let pod = pod(8, 64 << 10);
    let a = host(&pod, 3);
    let b = host(&pod, 4);
    a.create(b"k", &value(0)).unwrap();
    let mut buf = vec![0u8; 256];
    for round in 1..=200u32 {
        let writer = if round % 3 == 0 { &b } else { &a };
        writer.write(b"k", &value(round as u8)).unwrap();
        let reader = if round % 3 == 0 { &a } else { &b };
        reader.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, value(round as u8), "round {round}");
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
    let mut buf = vec![0u8; 256];
    for i in 0..objects {
        let key = format!("k{i}");
        a.write(key.as_bytes(), &value(i as u8 ^ 0x55)).unwrap();
        b.read(key.as_bytes(), &mut buf).unwrap();
        assert_eq!(buf, value(i as u8 ^ 0x55), "object {i}");
    }
    records
}

#[test]
fn too_few_records_churn_instead_of_failing() {
    let pod = pod(32, 4096);
    // No background reclaim: allocation itself must take other objects' records.
    let a = Host::join(&pod, Join::AnyFree, options(6).record_watermark(1.0)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, options(7).record_watermark(1.0)).unwrap();
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
    let pod = pod(32, 4096);
    let a = Host::join(&pod, Join::AnyFree, options(8).record_watermark(0.5)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, options(9).record_watermark(0.5)).unwrap();
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
    let pod = pod(16, 64 << 10);
    let a = host(&pod, 8);
    let b = host(&pod, 9);
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().records_in_use().0, 1);
    b.delete(b"k").unwrap();
    assert_eq!(a.inspect().records_in_use().0, 0);
    let mut buf = vec![0u8; 256];
    assert!(matches!(a.read(b"k", &mut buf), Err(Error::UnknownKey)));
    assert!(matches!(a.write(b"k", &value(3)), Err(Error::UnknownKey)));
    b.create(b"k", &value(4)).unwrap();
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(4));
}

#[test]
fn update_and_partial_writes_keep_the_rest_of_the_object() {
    let pod = pod(32, 64 << 10);
    let a = host(&pod, 10);
    let b = host(&pod, 11);
    a.create(b"k", &value(0)).unwrap();
    let mut buf = vec![0u8; 256];
    b.read(b"k", &mut buf).unwrap();
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
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, expected);
    let (copy, done) = a.read_with(b"k", |bytes| bytes.to_vec()).unwrap();
    assert_eq!((copy, done.retries), (expected, 0));
}

#[test]
fn bad_input_is_refused() {
    let pod = pod(32, 64 << 10);
    let a = host(&pod, 12);
    let mut big = vec![0u8; 257];
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
    // invalidates its stale lines before a partial write. Random eviction is off so that
    // b's stale line stays cached.
    let pod = pod(32, 64 << 10);
    let quiet = |seed| {
        HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
            seed,
            capacity_lines: 512,
            random_eviction_one_in: 0,
        }))
    };
    let a = Host::join(&pod, Join::AnyFree, quiet(13)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, quiet(14)).unwrap();
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap(); // the object has a record now
    let mut buf = vec![0u8; 256];
    b.read(b"k", &mut buf).unwrap(); // b caches version 1
    a.write(b"k", &value(2)).unwrap();
    b.write_at(b"k", 0, &[0xee; 8]).unwrap();
    let mut expected = value(2);
    expected[..8].fill(0xee);
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, expected);
}

#[test]
fn a_write_in_progress_keeps_its_record() {
    let pod = pod(32, 64 << 10);
    let a = host(&pod, 15);
    let b = host(&pod, 16);
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let ticket = a.write_start(b"k").unwrap();
    // The deallocator must take the record's lock first: held by the writer, it fails.
    assert!(
        !b.make_read_shared(b"k").unwrap(),
        "no deallocation under a writer"
    );
    a.memory().write(ticket.offset(), &value(2));
    a.write_end(ticket).unwrap();
    let mut buf = vec![0u8; 256];
    b.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(2));
    // With no write in progress it succeeds, and the object reads the same.
    assert!(b.make_read_shared(b"k").unwrap());
    assert!(!b.make_read_shared(b"k").unwrap(), "read-shared already");
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(2));
    assert_eq!(b.events().record_deallocs, 1);
}

#[test]
fn no_free_and_no_reclaimable_record_is_a_typed_error_that_loses_nothing() {
    // Every record held by a write in progress: nothing is free and nothing can be
    // reclaimed (a locked record is never taken), so one more write must fail cleanly.
    let pod = pod(32, 4096);
    let a = Host::join(&pod, Join::AnyFree, options(17).record_watermark(1.0)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, options(18).record_watermark(1.0)).unwrap();
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
    let mut buf = vec![0u8; 256];
    for i in 0..records {
        b.read(format!("k{i}").as_bytes(), &mut buf).unwrap();
        assert_eq!(buf, value(i as u8 ^ 0x0f), "object {i}");
    }
    b.read(last.as_bytes(), &mut buf).unwrap();
    assert_eq!(
        buf,
        value(records as u8),
        "the refused write left the object as it was"
    );
    b.write(last.as_bytes(), &value(0xff)).unwrap();
    a.read(last.as_bytes(), &mut buf).unwrap();
    assert_eq!(buf, value(0xff));
}

#[test]
fn a_reader_in_the_middle_of_a_deleted_object_retries_and_finds_it_gone() {
    let pod = pod(32, 64 << 10);
    let a = host(&pod, 19);
    let b = host(&pod, 20);
    for (key, written) in [(&b"shared"[..], false), (&b"written"[..], true)] {
        a.create(key, &value(1)).unwrap();
        if written {
            a.write(key, &value(2)).unwrap(); // read-write-shared: it has a record
        }
        let ticket = b.read_start(key).unwrap();
        let mut copy = vec![0u8; 256];
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

fn hooked_host(pod: &Arc<Pod>, seed: u64, allow: bool) -> (Host, Seen) {
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
    let host = Host::join(pod, Join::AnyFree, options(seed).release_hook(hook)).expect("join");
    (host, seen)
}

#[test]
fn the_release_hook_sees_the_last_write_before_a_record_goes() {
    let pod = pod(32, 64 << 10);
    let (a, seen) = hooked_host(&pod, 11, true);
    let b = host(&pod, 12);
    a.create(b"k", &value(0)).unwrap();
    b.write(b"k", &value(5)).unwrap(); // allocates the record (an event a replays)
    let mut buf = vec![0u8; 256];
    a.read(b"k", &mut buf).unwrap(); // a caches the object's lines at version 5
    b.write(b"k", &value(7)).unwrap(); // no event: a's lines are stale now
    let record = a
        .lookup(b"k")
        .unwrap()
        .unwrap()
        .record
        .expect("written: has a record");
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
    a.read(b"k", &mut buf).unwrap();
    b.write(b"k", &value(10)).unwrap();
    let record = a
        .lookup(b"k")
        .unwrap()
        .unwrap()
        .record
        .expect("written again");
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
    let pod = pod(32, 64 << 10);
    let (a, seen) = hooked_host(&pod, 13, false);
    let b = host(&pod, 14);
    a.create(b"k", &value(0)).unwrap();
    b.write(b"k", &value(3)).unwrap();
    let record = a
        .lookup(b"k")
        .unwrap()
        .unwrap()
        .record
        .expect("written: has a record");
    assert!(!a.make_read_shared(b"k").unwrap());
    let Err(Error::ReleaseRefused { record: kept }) = a.delete(b"k") else {
        panic!("a refused delete must say so");
    };
    assert_eq!(kept, record);
    assert_eq!(seen.lock().len(), 2);
    // Nothing changed: the record is unlocked (b writes again) and the object is whole.
    assert_eq!(a.lookup(b"k").unwrap().unwrap().record, Some(record));
    b.write(b"k", &value(4)).unwrap();
    let mut buf = vec![0u8; 256];
    a.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(4));
    // Another host without the hook deletes it.
    b.delete(b"k").unwrap();
    assert!(matches!(a.read(b"k", &mut buf), Err(Error::UnknownKey)));
}
