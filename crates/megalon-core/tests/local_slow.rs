//! Holders of objects in DRAM (local partitions) that are slow: a move back that waits
//! behind an `update` outlasting the lease (the holder dying meanwhile, or its pump
//! serving the move back), and a holder that serves a move back while its announce words
//! are all taken. None may lose another host's write or get a live holder declared dead.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{config, heap_pod as pod, read, small_cache, value, SLOT};
use megalon_core::{Error, Host, Join};

/// A holder's move back that waited for the object's local lock behind an `update` writes
/// nothing once it has the lock if the holder was declared dead meanwhile (its pump dies
/// in the closure, and nothing of it beats any more; an `update` in DRAM used to hold the
/// index for as long as its closure ran, and with it the heartbeat), its recovery handed
/// the object back, and another host wrote it. (It wrote the object's DRAM bytes, the lost
/// update's included, into the CXL slot: that host's acknowledged write was lost.)
#[test]
fn a_move_back_waiting_behind_a_slow_update_does_not_overwrite_the_recovered_object() {
    let config = config()
        .local_partitions(2)
        .rpc_ring_entries(4)
        .lease_ms(100);
    let pod = pod(&config);
    let pumped = |seed: u64| {
        small_cache(seed)
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(5))
    };
    let a = Host::join(&pod, Join::As(0), pumped(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2)).unwrap();
    let c = Host::join(&pod, Join::As(2), pumped(3)).unwrap();
    a.create(b"k", &value(0)).unwrap();
    read(&a, b"k");
    read(&a, b"k");
    assert_eq!(a.lookup(b"k").unwrap().unwrap().local_owner, Some(0));
    a.inspect().pretend_elsewhere();
    let stop = AtomicBool::new(false);
    let (updated, deleted, written) = std::thread::scope(|s| {
        // The creates below stop however the scope ends (a failed assert included).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        let update = s.spawn(|| {
            a.update(b"k", |bytes| {
                // a stops beating here (its pump dies), and is recovered past its
                // lease: a process paused past its lease, as far as its waiting move back
                // can tell.
                a.inspect().make_pump_panic();
                std::thread::sleep(Duration::from_millis(1500));
                bytes.copy_from_slice(&value(7));
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        // Another thread of a needs k in CXL (a delete brings it back first): its move
        // back waits for the object's lock, which the update holds.
        let delete = s.spawn(|| a.delete(b"k"));
        std::thread::sleep(Duration::from_millis(50));
        s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let _ = b.create(format!("other-{i}").as_bytes(), &value(1));
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        // a is declared dead and recovered: k is back in CXL, and b writes it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while b.lookup(b"k").unwrap().unwrap().local_owner.is_some() {
            assert!(Instant::now() < deadline, "a never recovered");
            std::thread::sleep(Duration::from_millis(5));
        }
        let written = b.write(b"k", &value(9));
        let updated = update.join().unwrap();
        let deleted = delete.join().unwrap();
        (updated, deleted, written)
    });
    eprintln!("update: {updated:?}; delete: {deleted:?}; b's write: {written:?}");
    assert!(written.is_ok());
    assert!(matches!(updated, Err(Error::HostDeclaredDead { .. })));
    let mut buf = vec![0u8; SLOT];
    c.read(b"k", &mut buf).unwrap();
    assert_eq!(
        buf[0],
        value(9)[0],
        "b's acknowledged write was overwritten by a's late move back"
    );
}

/// A holder's pump that serves a move back waits for an announce word (`take_hold`) for
/// up to its wait limit, and beats while it waits. (It beat nothing: a holder whose
/// threads held every announce word, 16 write tickets in a pod with undo images, for
/// longer than the lease was declared dead alive as soon as another host asked it for an
/// object, and its tickets and the objects in its DRAM were recovered from under it.)
#[test]
fn a_holder_serving_a_move_back_while_its_holds_are_taken_is_not_declared_dead() {
    use megalon_core::CrashSafety;
    let config = config()
        .local_partitions(2)
        .rpc_ring_entries(4)
        .lease_ms(100)
        .crash_safety(CrashSafety::Undo)
        .lnr_bytes(4 << 20);
    let pod = pod(&config);
    let pumped = |seed: u64| {
        small_cache(seed)
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(2))
    };
    let a = Host::join(&pod, Join::As(0), pumped(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2)).unwrap();
    a.create(b"k", &value(0)).unwrap();
    let others: Vec<Vec<u8>> = (0..16).map(|i| format!("o{i}").into_bytes()).collect();
    for key in &others {
        a.create(key, &value(1)).unwrap();
    }
    read(&a, b"k");
    read(&a, b"k");
    assert_eq!(a.lookup(b"k").unwrap().unwrap().local_owner, Some(0));
    a.inspect().pretend_elsewhere();
    // a's threads hold every announce word for a while (well within the wait limit).
    let tickets: Vec<_> = others
        .iter()
        .map(|key| a.write_start(key).unwrap())
        .collect();
    let read_on_b = std::thread::scope(|s| {
        let reader = s.spawn(|| b.read(b"k", &mut [0u8; SLOT]));
        std::thread::sleep(Duration::from_millis(800));
        let ended: Vec<_> = tickets.into_iter().map(|t| a.write_end(t)).collect();
        eprintln!(
            "a's write_ends: {:?}",
            ended.iter().filter(|e| e.is_err()).count()
        );
        reader.join().unwrap()
    });
    eprintln!("b's read: {read_on_b:?}");
    assert_eq!(
        b.inspect().stats().hosts_recovered,
        0,
        "a, alive and beating until b asked it for k, was declared dead"
    );
}

/// Another host asks the holder for an object while an `update` of it runs in the
/// holder's DRAM for longer than the lease, and than the holder's wait limit: the
/// holder's pump, serving the request, answers at once that the object is busy, and the
/// asker asks again within its own wait limit. The update is done, the asker reads it
/// once the object is back, and the holder lives. (The pump waited for the object's lock
/// with no bound and no beat: a holder judged by its lease was declared dead alive, and
/// its update was lost; then, waiting within the holder's wait limit, it answered
/// "failed" past it, and the asker's read failed with `MoveBackFailed`.)
#[test]
fn a_holder_whose_pump_is_asked_for_an_object_under_a_slow_update_stays_alive() {
    let config = config()
        .local_partitions(2)
        .rpc_ring_entries(4)
        .lease_ms(100);
    let pod = pod(&config);
    let pumped = |seed: u64, wait_limit: Duration| {
        small_cache(seed)
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(wait_limit)
    };
    let a = Host::join(&pod, Join::As(0), pumped(1, Duration::from_millis(100))).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2, Duration::from_secs(5))).unwrap();
    a.create(b"k", &value(0)).unwrap();
    read(&a, b"k");
    read(&a, b"k");
    assert_eq!(a.lookup(b"k").unwrap().unwrap().local_owner, Some(0));
    // Judged by its lease, as a host of another machine is.
    a.inspect().pretend_elsewhere();
    let (updated, on_b) = std::thread::scope(|s| {
        let update = s.spawn(|| {
            a.update(b"k", |bytes| {
                std::thread::sleep(Duration::from_millis(600));
                bytes.copy_from_slice(&value(7));
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        // b needs k: a's pump serves its request, behind the update.
        let on_b = b.read(b"k", &mut [0u8; SLOT]).map(|_| read(&b, b"k"));
        (update.join().unwrap(), on_b)
    });
    assert!(updated.is_ok(), "{updated:?}");
    assert_eq!(on_b.unwrap(), value(7), "b reads the update once k is back");
    assert_eq!(read(&a, b"k"), value(7), "a lives on");
    assert!(
        pod.hosts().iter().any(|row| row.host == 0),
        "a's row is a's"
    );
}

/// The same in CXL: an `update` whose host is declared dead while its closure runs (its
/// pump dies in the closure; nothing of it beats any more) and recovered (the record
/// unlocked, the undo image put back), after which another host writes the object, must
/// not store its closure's bytes into the slot when the closure returns: the lock they
/// were made under is gone. (It stored them, over the other host's acknowledged write,
/// and every host then read the lost update's bytes under a valid counter.)
#[test]
fn an_update_in_cxl_whose_host_was_recovered_meanwhile_stores_nothing() {
    let [a, b, c] = a_writing_k_judged_by_its_lease();
    let (updated, written) = std::thread::scope(|s| {
        let update = s.spawn(|| {
            a.update(b"k", |bytes| {
                // a stops beating here (its pump dies), and is recovered past its lease.
                a.inspect().make_pump_panic();
                std::thread::sleep(Duration::from_millis(1500));
                bytes.copy_from_slice(&value(7));
            })
        });
        // a is declared dead and recovered: k's record is unlocked, and b writes it.
        until_recovered_by_either(&b, &c);
        let written = b.write(b"k", &value(9));
        let u = update.join().unwrap();
        // What a's thread stored is in flight in its write-combining buffers, which the
        // hardware drains on its own (the simulation, at the host's next fence).
        a.memory().fence();
        (u, written)
    });
    eprintln!("update: {updated:?}; b's write: {written:?}");
    assert!(written.is_ok(), "{written:?}");
    assert!(
        matches!(updated, Err(Error::HostDeclaredDead { .. })),
        "{updated:?}"
    );
    let mut buf = vec![0u8; SLOT];
    c.read(b"k", &mut buf).unwrap();
    assert_eq!(
        buf,
        value(9),
        "b's acknowledged write was overwritten by a's late update"
    );
}

/// The same with a write ticket held across the host's death: its `write` stores nothing
/// and answers `HostDeclaredDead`.
#[test]
fn a_ticket_write_after_its_host_was_recovered_stores_nothing() {
    let [a, b, c] = a_writing_k_judged_by_its_lease();
    let ticket = a.write_start(b"k").unwrap();
    a.inspect().make_pump_panic();
    until_recovered_by_either(&b, &c);
    b.write(b"k", &value(9)).unwrap();
    let wrote = ticket.write(0, &value(7));
    let ended = a.write_end(ticket);
    a.memory().fence();
    eprintln!("ticket write: {wrote:?}; write_end: {ended:?}");
    assert!(
        matches!(ended, Err(Error::HostDeclaredDead { .. })),
        "{ended:?}"
    );
    let mut buf = vec![0u8; SLOT];
    c.read(b"k", &mut buf).unwrap();
    assert_eq!(
        buf,
        value(9),
        "b's acknowledged write was overwritten by a's late ticket write"
    );
}

/// Hosts 0 (`a`, judged by its lease: it pretends to run elsewhere), 1 and 2 of a pod with
/// undo images and a 100 ms lease, each with a pump; `a` has created and written `k`.
fn a_writing_k_judged_by_its_lease() -> [Host; 3] {
    let config = config()
        .lease_ms(100)
        .crash_safety(megalon_core::CrashSafety::Undo)
        .lnr_bytes(4 << 20);
    let pod = pod(&config);
    let pumped = |seed: u64| {
        small_cache(seed)
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(5))
    };
    let hosts =
        [0, 1, 2].map(|id| Host::join(&pod, Join::As(id), pumped(u64::from(id) + 1)).unwrap());
    hosts[0].create(b"k", &value(0)).unwrap();
    hosts[0].write(b"k", &value(1)).unwrap();
    hosts[0].inspect().pretend_elsewhere();
    hosts
}

/// Waits (at most 5 s) until `b` or `c` has recovered a host.
fn until_recovered_by_either(b: &Host, c: &Host) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.inspect().stats().hosts_recovered + c.inspect().stats().hosts_recovered == 0 {
        assert!(Instant::now() < deadline, "a never recovered");
        std::thread::sleep(Duration::from_millis(5));
    }
}
