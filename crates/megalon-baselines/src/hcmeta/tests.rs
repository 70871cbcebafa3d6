//! Races of serving and stopping, made to happen: a seam in [`Inner::serve`] where a
//! test stops a server thread while the host is stopped around it.

use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::MemoryKind;
use megalon_kv::{Error, Store};

use super::{scr_bytes_per_shared_object, HcMeta, HcMetaConfig};

/// A seam's hook, run once by the serving code when a test has put one there.
type Seam = RefCell<Option<Box<dyn FnOnce()>>>;

thread_local! {
    /// Run once by `Inner::serve` on this thread between its look at the stop flag and
    /// its look at the ring (the window of a server preempted as the host stops).
    static AFTER_STOP_CHECK: Seam = const { RefCell::new(None) };
}

/// Runs, once, the hook a test put after the stop check on this thread.
pub(super) fn after_stop_check() {
    if let Some(hook) = AFTER_STOP_CHECK.with(|seam| seam.borrow_mut().take()) {
        hook();
    }
}

/// A server that saw the host serving just before it was stopped, and went on only once
/// a request sent after the stop waited in the ring, claims nothing: the request waits
/// out the limit and names its owner, as if no server had been at work.
#[test]
fn a_server_that_looked_before_the_stop_claims_nothing_after_it() {
    let config = HcMetaConfig::new(2, 64, 128)
        .scr_budget_bytes(Some(scr_bytes_per_shared_object(32)))
        .wait_limit(Duration::from_millis(300));
    let store = Store::new(HcMeta::new(config, |h| MemoryKind::simulated(h as u64)).unwrap());
    let mut keys = (0..)
        .map(|i| format!("key{i}"))
        .filter(|key| store.scheme().owner_of(key.as_bytes()) == 1);
    let (filler, key) = (keys.next().unwrap(), keys.next().unwrap());
    // The first key takes host 1's one shared entry: the second stays unshared, and a
    // read of it from host 0 has to ask host 1.
    let mut owner = store.handle(1).unwrap();
    owner.insert(filler.as_bytes(), b"filler").unwrap();
    owner.insert(key.as_bytes(), b"value").unwrap();

    let inner = Arc::clone(&store.scheme().inner);
    let (looked, has_looked) = mpsc::channel();
    let (go_on, may_go_on) = mpsc::channel::<()>();
    let server = std::thread::spawn({
        let inner = Arc::clone(&inner);
        move || {
            AFTER_STOP_CHECK.with(|seam| {
                *seam.borrow_mut() = Some(Box::new(move || {
                    looked.send(()).unwrap();
                    may_go_on.recv().unwrap();
                }))
            });
            let c = inner.hosts[1].counters.register();
            inner.serve(1, &c, usize::MAX)
        }
    });
    has_looked.recv().unwrap();
    store.scheme().set_serving(1, false).unwrap();
    std::thread::scope(|scope| {
        let asker = scope.spawn(|| store.handle(0).unwrap().get(key.as_bytes()));
        let started = Instant::now();
        while !inner.hosts[1].geometry.ring.pending(&inner.pod) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the request never reached the ring"
            );
            std::thread::yield_now();
        }
        go_on.send(()).unwrap();
        assert_eq!(server.join().unwrap(), 0, "served after the stop");
        match asker.join().unwrap() {
            Err(Error::OwnerUnresponsive { owner: 1, .. }) => {}
            other => panic!("expected OwnerUnresponsive from host 1, got {other:?}"),
        }
    });
    // Serving again, host 1 shares the key for the same read.
    store.scheme().set_serving(1, true).unwrap();
    let value = store.handle(0).unwrap().get(key.as_bytes()).unwrap();
    assert_eq!(value.as_deref(), Some(&b"value"[..]));
}

/// Waits (up to a minute) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The CLOCK hand that finds every entry held waits for one holding the share state; a
/// delete of a shared object, holding its record's write lock, waits for the share
/// state to free the entry. Each waited for the other until the hand gave up at the wait
/// limit: the share request failed with `ScrRecordsExhausted` although the delete was
/// freeing an entry, and every access to the deleted object meanwhile waited on its
/// record (`RecordBusy` past the limit). The hand now lets the share state go while it
/// waits, and takes the entry the delete freed.
#[test]
fn a_clock_hand_that_waits_lets_a_delete_free_an_entry() {
    use megalon_kv::{Scheme, SchemeHandle};
    use std::sync::atomic::Ordering;
    use std::sync::Barrier;

    let config = HcMetaConfig::new(2, 64, 128)
        .scr_budget_bytes(Some(scr_bytes_per_shared_object(32)))
        .wait_limit(Duration::from_secs(3));
    let scheme = HcMeta::new(config, |h| MemoryKind::simulated(h as u64)).unwrap();
    let mut keys = (0..)
        .map(|i| format!("key{i}"))
        .filter(|key| scheme.owner_of(key.as_bytes()) == 1);
    let (shared, unshared) = (keys.next().unwrap(), keys.next().unwrap());
    let (shared, unshared) = (shared.as_bytes(), unshared.as_bytes());
    let mut owner = scheme.handle(1).unwrap();
    // Host 1 has one entry: the first key takes it, the second stays unshared.
    owner.create(shared, &[1; 128]).unwrap();
    owner.create(unshared, &[2; 128]).unwrap();
    let inner = Arc::clone(&scheme.inner);
    let record = inner.hosts[1].geometry.index.record(&inner.pod, 0);
    let in_extent = Barrier::new(2);
    // The reader leaves its extent when told, or when the test body ends without telling
    // it (a failed check: the sender is dropped as the panic unwinds, before the scope
    // waits for the reader).
    let (leave_extent, leave) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let leave_extent = leave_extent;
        let (in_extent, scheme) = (&in_extent, &scheme);
        // Host 0 reads the shared object and stays in the read (its extent), holding
        // the record's read lock.
        let reader = scope.spawn(move || {
            let mut buf = [0u8; 128];
            let extent = |_: &[u8]| {
                in_extent.wait();
                let _ = leave.recv();
                128
            };
            scheme.handle(0).unwrap().read(shared, &mut buf, &extent)
        });
        in_extent.wait();
        // Host 0 reads the unshared one: host 1's server looks for an entry, finds the
        // only one held, and waits (the share state let go, see `evict`).
        let asker = scope.spawn(|| {
            let mut buf = [0u8; 128];
            scheme.handle(0).unwrap().read(unshared, &mut buf, &|_| 128)
        });
        // (Not by watching the share state held: between its waits the hand holds it
        // for microseconds, which a look every millisecond missed on a loaded machine for
        // the whole wait limit, and the test then waited forever on the reader.)
        wait_until("the CLOCK hand waits", || inner.hosts[1].hand_waits() > 0);
        // Host 1 deletes the shared object: it takes the writer bit and waits for the
        // reader.
        let deleter = scope.spawn(|| scheme.handle(1).unwrap().delete(shared));
        wait_until("the delete holds the writer bit", || {
            record.load(Ordering::Relaxed) & super::record::WRITER != 0
        });
        leave_extent.send(()).unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), 128);
        let started = Instant::now();
        deleter.join().unwrap().unwrap();
        assert_eq!(asker.join().unwrap().unwrap(), 128);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the delete and the share waited {:?}",
            started.elapsed()
        );
    });
    // The delete left nothing held: the entry shares the other key.
    assert_eq!(inner.hosts[1].shared_now(), 1);
    assert!(!super::record::latched(record.load(Ordering::Relaxed)));
}

/// A served request counts its look at the ring once. The server's look that finds a
/// request and the claim's look right after it load the same two SCR words, which
/// nothing changed between them (a hit the second time, as a poll that finds nothing
/// is), and the claim after it that finds nothing counts nothing: one served read of an
/// unshared key counts what a claim and a serve by hand count for another alike, the
/// owner's handling included. (With the look counted twice, or the claim that found
/// nothing counted, the server counted 2 more than by hand.)
#[test]
fn a_served_request_counts_its_look_at_the_ring_once() {
    use super::counters::Counter;
    use std::sync::atomic::Ordering;
    let config = HcMetaConfig::new(2, 64, 128)
        .scr_budget_bytes(Some(scr_bytes_per_shared_object(32)))
        .wait_limit(Duration::from_secs(30));
    let store = Store::new(HcMeta::new(config, |h| MemoryKind::simulated(h as u64)).unwrap());
    let inner = Arc::clone(&store.scheme().inner);
    // Host 1 has one shared entry: the last key inserted takes it, and each read
    // from host 0 of another has to ask host 1.
    let keys: Vec<String> = (0..)
        .map(|i| format!("key{i}"))
        .filter(|key| store.scheme().owner_of(key.as_bytes()) == 1)
        .take(24)
        .collect();
    {
        let mut owner = store.handle(1).unwrap();
        for key in &keys {
            owner.insert(key.as_bytes(), b"value").unwrap();
        }
    }
    let state = &inner.hosts[1];
    let ring = &state.geometry.ring;
    // This thread serves host 1's ring (a server that serves between two of the
    // background server's sleeps may still be at it: then another key).
    state.background_paused.store(true, Ordering::Relaxed);
    let mut fresh = keys.iter().take(keys.len() - 1);
    // Host 0 reads an unshared key of host 1's, and this thread serves it.
    let mut counted = |by_hand: bool| -> u64 {
        loop {
            let key = fresh.next().expect("a key left to serve by this thread");
            let c = state.counters.register();
            let served = std::thread::scope(|scope| {
                let asker = scope.spawn(|| store.handle(0).unwrap().get(key.as_bytes()));
                wait_until("the request in the ring", || {
                    ring.pending(&inner.pod) || asker.is_finished()
                });
                let served = if by_hand {
                    match ring.claim(&inner.pod, &**c) {
                        Some(claimed) => {
                            let mut buf = state.serving.lock();
                            ring.serve(
                                &inner.pod,
                                &state.memory,
                                claimed,
                                &mut buf,
                                &**c,
                                super::owner::server_failed(),
                                |request, buf| {
                                    state.handle(&inner.pod, &inner.settings, request, buf, &c)
                                },
                            );
                            true
                        }
                        None => false,
                    }
                } else {
                    inner.serve(1, &c, usize::MAX) == 1
                };
                let value = asker.join().unwrap().unwrap();
                assert_eq!(value.as_deref(), Some(&b"value"[..]));
                served
            });
            if served {
                return c.get(Counter::ScrAtomics);
            }
        }
    };
    // The first share evicts the last key inserted, as every later one evicts the one
    // before: not counted.
    counted(false);
    let by_hand = counted(true);
    let served = counted(false);
    assert!(by_hand > 0);
    assert_eq!(
        served, by_hand,
        "SCR accesses of a served request: server, by hand"
    );
}
