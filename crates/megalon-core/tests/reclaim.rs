//! Releasing a coherence record (`make_read_shared`, the background reclaimer): what the
//! release hook sees of an object held in a host's DRAM, and a reclaimer on the pump
//! that must not stop the pump's heartbeat.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{config, heap_pod, read, value, SLOT};
use megalon_core::{Host, HostOptions, Join, MemoryKind, ReleaseHook, Releasing};

fn options() -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(7))
        .record_watermark(1.0)
        .wait_limit(Duration::from_millis(500))
        .pump_interval(None)
}

/// `Releasing` promises "the last write's bytes are in memory" and "no write can start on
/// it until the hook returns". An object held in a host's DRAM (local partitions) keeps
/// its record; a deallocation of that record (`make_read_shared`, the reclaimer) brings
/// the object back first, or leaves the record alone. (It did not: the hook read the CXL
/// slot, which held the bytes of the object as it moved, not the last write's.)
#[test]
fn the_release_hook_of_an_object_in_a_hosts_dram_sees_the_last_write() {
    let pod = heap_pod(&config().local_partitions(2));
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let hook = {
        let seen = Arc::clone(&seen);
        ReleaseHook::new(move |releasing: &Releasing<'_>| {
            let mut buf = vec![0u8; SLOT];
            releasing.read(&mut buf);
            seen.lock().unwrap().push(buf);
            true
        })
    };
    // a serves b's request to bring k back (its pump).
    let a = Host::join(
        &pod,
        Join::As(0),
        options().pump_interval(Some(Duration::from_millis(1))),
    )
    .unwrap();
    let b = Host::join(&pod, Join::As(1), options().release_hook(hook)).unwrap();
    b.create(b"k", &value(0)).unwrap();
    b.write(b"k", &value(1)).unwrap();
    assert!(b.lookup(b"k").unwrap().unwrap().record.is_some());
    // Two accesses in a row by a: k moves to a's DRAM, keeping its record.
    assert_eq!(read(&a, b"k"), value(1));
    assert_eq!(read(&a, b"k"), value(1));
    let entry = b.lookup(b"k").unwrap().unwrap();
    assert_eq!(entry.local_owner, Some(a.id()), "k is in a's DRAM");
    assert!(entry.record.is_some(), "with its record");
    // The last write, in a's DRAM.
    a.write(b"k", &value(9)).unwrap();
    assert!(b.make_read_shared(b"k").unwrap(), "k's record deallocated");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "the hook was asked once");
    assert_eq!(
        seen[0][..8],
        value(9)[..8],
        "the hook saw the bytes k had when it moved, not the last write's"
    );
}

/// The background reclaimer runs on the pump's thread, and a deallocation takes an
/// announce word (pods with undo images). A host whose threads hold all its announce
/// words (16 write tickets, say the page cache's write-backs waiting on a slow disk)
/// while records run over the watermark: the reclaimer gives up on the record rather than
/// wait for a word. (It waited up to the host's wait limit, with no heartbeat: a host
/// judged by its lease, on another machine, was declared dead and recovered alive.)
#[test]
fn a_reclaimer_waiting_for_an_announce_word_does_not_stop_the_pumps_heartbeat() {
    use megalon_core::CrashSafety;
    const LEASE_MS: u32 = 100;
    let config = config().lease_ms(LEASE_MS).crash_safety(CrashSafety::Undo);
    let pod = heap_pod(&config);
    let records = pod.layout().record_count;
    let pumped = |seed: u64| {
        HostOptions::new()
            .memory(common::simulated(seed, 512, 64))
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(3))
    };
    // Reclaim once more than 16 records are in use.
    let a = Host::join(
        &pod,
        Join::As(0),
        pumped(1).record_watermark(16.5 / records as f64),
    )
    .unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2).record_watermark(1.0)).unwrap();
    let keys: Vec<Vec<u8>> = (0..16).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &keys {
        a.create(key, &value(0)).unwrap();
        a.write(key, &value(1)).unwrap();
    }
    a.inspect().pretend_elsewhere();
    // All of a's announce words, held by write tickets.
    let tickets: Vec<_> = keys.iter().map(|key| a.write_start(key).unwrap()).collect();
    // One more record in use: a's reclaimer wants to deallocate it.
    b.create(b"x", &value(0)).unwrap();
    b.write(b"x", &value(1)).unwrap();
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) * 10));
    let ended: Vec<_> = tickets.into_iter().map(|t| a.write_end(t)).collect();
    let recovered = b.inspect().stats().hosts_recovered;
    assert_eq!(
        recovered, 0,
        "b declared the live host a dead (its pump stood still in the reclaimer): {ended:?}"
    );
    assert!(ended.iter().all(Result::is_ok), "{ended:?}");
}
