//! Panics in user code and unwinding through megalon's calls (review `panics`): a host
//! dropped by a panic, calls made from a drop while the thread unwinds, a caller that
//! catches the panic and goes on with the same host, and the RPC ring's user-supplied
//! callbacks (its `Tally`, its `lives`) panicking with an entry held.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{quiet_on_purpose, read, simulated, tag_of, value, ON_PURPOSE};
use megalon_core::{CrashSafety, Host, HostOptions, Join, Pod};

/// Lease of the pods here.
const LEASE_MS: u32 = 100;
/// How long after the lease recovery may take, at most, on a loaded machine.
const BOUND: Duration = Duration::from_secs(5);

/// A heap pod with undo images (as a pod in a file has by default) and local partitions
/// after two accesses.
fn local_undo_pod() -> Arc<Pod> {
    let config = common::config()
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
        .local_partitions(2);
    common::heap_pod(&config)
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 512, 64))
        .pump_interval(Some(Duration::from_millis(1)))
        .wait_limit(Duration::from_millis(300))
}

fn join(pod: &Arc<Pod>, seed: u64) -> Host {
    Host::join(pod, Join::AnyFree, options(seed)).expect("joining")
}

/// Host `host` reads `key` twice: with partitions after two accesses, that moves it to the
/// host's DRAM.
fn move_to(host: &Host, key: &[u8]) {
    read(host, key);
    read(host, key);
    assert_eq!(
        host.lookup(key).unwrap().unwrap().local_owner,
        Some(host.id()),
        "moved to host {}",
        host.id()
    );
}

/// Waits until the pod's table has no row of `id` (its host left, or was recovered), or
/// fails after the lease and [`BOUND`].
#[track_caller]
fn wait_row_free(pod: &Pod, id: megalon_core::HostId) {
    let within = Duration::from_millis(LEASE_MS.into()) + BOUND;
    assert!(
        common::row_freed_within(pod, id, within),
        "row {id} still held: {:?}",
        pod.hosts()
    );
}

/// Runs `body` and swallows the panic it ends with (one it causes on purpose).
fn panicking(body: impl FnOnce()) {
    quiet_on_purpose();
    let result = catch_unwind(AssertUnwindSafe(body));
    assert!(result.is_err(), "the body panics");
}

/// A host owned by a thread that panics is dropped by the unwind: it moves the objects in
/// its DRAM back to CXL and leaves, as a drop does. The move back's announce (its slot
/// image, the object as it was when it moved here) was kept for recovery, as if the move
/// had panicked half-way (a hold dropped while the thread unwinds), and the host left as a
/// dead one: its recovery, a lease later, put the old image back over the slot, losing
/// the write made in its DRAM (acknowledged, and read by another host before).
#[test]
fn a_host_dropped_by_a_panic_moves_its_objects_back_and_its_recovery_puts_back_no_old_image() {
    let pod = local_undo_pod();
    let b = join(&pod, 2);
    let mut a_id = None;
    panicking(|| {
        let a = join(&pod, 1);
        a_id = Some(a.id());
        a.create(b"k", &value(1)).unwrap();
        move_to(&a, b"k");
        // Written in a's DRAM: the slot in CXL still holds value(1).
        a.write(b"k", &value(2)).unwrap();
        panic!("a bug of the caller's, with the host on its stack {ON_PURPOSE}");
    });
    let a_id = a_id.unwrap();
    assert_eq!(read(&b, b"k"), value(2), "moved back whole by the drop");
    // A host that left, or one left to recovery: either way, once its row is free, no
    // recovery of it is pending.
    wait_row_free(&pod, a_id);
    // A host with nothing cached reads what the slot holds.
    let c = join(&pod, 3);
    assert_eq!(
        tag_of(&read(&c, b"k")),
        Some(2),
        "the write made in a's DRAM, after a left"
    );
    assert_eq!(tag_of(&read(&b, b"k")), Some(2), "and in b's cache");
    assert_eq!(
        b.inspect().stats().hosts_recovered,
        0,
        "a host that moved everything back left as a dead one"
    );
}

/// Calls made from a drop while the thread unwinds (a guard of the caller's that cleans
/// up), and a caller that catches the panic and goes on with the same host: each move
/// back the calls made kept its announce word for good (16 per host), so after a few
/// such panics every write of the host waited for a word and answered
/// `TooManyLocksHeld`; and the host, marked as one whose append panicked, left as a dead
/// one, its recovery putting old slot images back.
#[test]
fn calls_from_a_drop_during_an_unwind_give_their_announce_words_back() {
    struct DeleteOnDrop<'a>(&'a Host, Vec<u8>);
    impl Drop for DeleteOnDrop<'_> {
        fn drop(&mut self) {
            // In its DRAM: the delete brings it back to CXL first (a move back).
            self.0.delete(&self.1).unwrap();
        }
    }
    let pod = local_undo_pod();
    let a = join(&pod, 1);
    let b = join(&pod, 2);
    let a_id = a.id();
    for round in 0..20u32 {
        let key = format!("k{round}").into_bytes();
        a.create(&key, &value(round as u8)).unwrap();
        move_to(&a, &key);
        panicking(|| {
            let _guard = DeleteOnDrop(&a, key.clone());
            panic!("a bug of the caller's, round {round} {ON_PURPOSE}");
        });
        assert_eq!(a.lookup(&key).unwrap(), None, "deleted by the guard");
        a.create(b"after", &value(7)).unwrap();
        a.write(b"after", &value(8))
            .unwrap_or_else(|e| panic!("a write after {} caught panics: {e}", round + 1));
        a.delete(b"after").unwrap();
    }
    // The host goes on, and leaves as a live host does.
    b.create(b"k", &value(1)).unwrap();
    move_to(&a, b"k");
    a.write(b"k", &value(2)).unwrap();
    drop(a);
    assert_eq!(read(&b, b"k"), value(2));
    b.write(b"k", &value(3)).unwrap();
    wait_row_free(&pod, a_id);
    std::thread::sleep(Duration::from_millis(3 * u64::from(LEASE_MS)));
    assert_eq!(
        b.inspect().stats().hosts_recovered,
        0,
        "a left as a dead host"
    );
    assert_eq!(read(&b, b"k"), value(3));
}

mod ring {
    //! The RPC ring's callbacks that are the user's (`Tally`, a sender's `lives`, a
    //! server's `handle`) panicking while the call holds an entry.

    use std::ops::ControlFlow;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::Arc;
    use std::time::Duration;

    use super::panicking;
    use megalon_core::rpc::{self, Response, RingGeometry, Tally};
    use megalon_core::{Backing, Memory, MemoryKind, Pod, PodConfig};

    const ENTRIES: u64 = 2;
    const WAIT: Duration = Duration::from_millis(300);

    fn ring() -> (Arc<Pod>, RingGeometry, u64) {
        let entry_bytes = rpc::entry_bytes(16, 64);
        let config = PodConfig::new()
            .app_scr_bytes(rpc::scr_bytes(ENTRIES))
            .app_lnr_bytes(ENTRIES * entry_bytes);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let ring = RingGeometry::in_app_areas(&pod, ENTRIES, entry_bytes).unwrap();
        ring.initialize(&pod);
        (pod, ring, entry_bytes)
    }

    /// A tally that panics at the first count of one kind.
    struct PanicsAt(&'static str);

    impl Tally for PanicsAt {
        fn scr_atomics(&self, _: u64) {
            assert_ne!(
                self.0,
                "scr_atomics",
                "the tally's bug {}",
                super::ON_PURPOSE
            );
        }
        fn lines_written_back(&self, _: u64) {
            assert_ne!(
                self.0,
                "lines_written_back",
                "the tally's bug {}",
                super::ON_PURPOSE
            );
        }
        fn lines_invalidated(&self, _: u64) {
            assert_ne!(
                self.0,
                "lines_invalidated",
                "the tally's bug {}",
                super::ON_PURPOSE
            );
        }
    }

    /// Serves every request waiting in `ring`: status = op, detail = the payload's sum.
    fn serve_all(pod: &Pod, ring: &RingGeometry, memory: &Memory, buf: &mut [u8]) {
        while let Some(claimed) = ring.claim(pod, &()) {
            ring.serve(
                pod,
                memory,
                claimed,
                buf,
                &(),
                Response {
                    status: 255,
                    detail: 0,
                },
                |request, bytes| Response {
                    status: request.op,
                    detail: bytes[request.payload.clone()]
                        .iter()
                        .map(|&b| u64::from(b))
                        .sum(),
                },
            );
        }
    }

    /// A call of `sender`'s, served by the caller's thread while it waits.
    fn call(
        pod: &Arc<Pod>,
        ring: &RingGeometry,
        entry_bytes: u64,
        sender: u64,
        tally: &dyn Tally,
        lives: &dyn Fn() -> bool,
    ) -> Result<Response, u64> {
        let memory = Memory::new(Arc::clone(pod), MemoryKind::Hardware);
        let server = Memory::new(Arc::clone(pod), MemoryKind::Hardware);
        let mut buf = vec![0; entry_bytes as usize];
        let mut serving = vec![0; entry_bytes as usize];
        ring.call_while(
            pod,
            &memory,
            (sender, lives),
            &mut buf,
            (7, b"key", &[3; 8]),
            WAIT,
            tally,
            &mut || {
                serve_all(pod, ring, &server, &mut serving);
                ControlFlow::Continue(())
            },
        )
    }

    /// A sender whose tally panics between its reservation and its publish (its count of
    /// the request's lines written back): the entry was reserved (the tail past it) and
    /// never published, nor withdrawn, and its sender word kept: the server stopped at it
    /// for good, and every later call waited its limit out unanswered.
    #[test]
    fn a_senders_tally_that_panics_before_the_publish_leaves_the_ring_serving() {
        let (pod, ring, entry_bytes) = ring();
        panicking(|| {
            let _ = call(
                &pod,
                &ring,
                entry_bytes,
                1,
                &PanicsAt("lines_written_back"),
                &|| true,
            );
        });
        for sender in [2, 3, 4] {
            let answer = call(&pod, &ring, entry_bytes, sender, &(), &|| true);
            assert_eq!(
                answer,
                Ok(Response {
                    status: 7,
                    detail: 24
                }),
                "sender {sender}, after a panic in sender 1's tally"
            );
        }
    }

    /// A sender whose `lives` panics: it is asked holding the entry's sender word, before
    /// the reservation. The word was kept, and every later sender found the entry being
    /// reserved by someone and waited its limit out.
    #[test]
    fn a_senders_lives_that_panics_lets_go_of_the_entry() {
        let (pod, ring, entry_bytes) = ring();
        panicking(|| {
            let _ = call(&pod, &ring, entry_bytes, 1, &(), &|| {
                panic!("the caller's bug {}", super::ON_PURPOSE)
            });
        });
        for sender in [2, 3, 4] {
            let answer = call(&pod, &ring, entry_bytes, sender, &(), &|| true);
            assert_eq!(
                answer,
                Ok(Response {
                    status: 7,
                    detail: 24
                }),
                "sender {sender}, after a panic in sender 1's lives"
            );
        }
    }

    /// A server whose tally panics as it responds (`serve` answers `on_panic` for a
    /// panic of `read` or `handle`): the response was never published, and its sender
    /// waited twice its limit and gave the entry up, abandoned, answered by nobody.
    #[test]
    fn a_servers_tally_that_panics_as_it_responds_still_answers_the_sender() {
        let (pod, ring, entry_bytes) = ring();
        let memory = Memory::new(Arc::clone(&pod), MemoryKind::Hardware);
        let server = Memory::new(Arc::clone(&pod), MemoryKind::Hardware);
        let mut buf = vec![0; entry_bytes as usize];
        let mut serving = vec![0; entry_bytes as usize];
        let on_panic = Response {
            status: 255,
            detail: 1,
        };
        super::quiet_on_purpose();
        let answer = ring.call(
            &pod,
            &memory,
            1,
            &mut buf,
            7,
            b"key",
            &[3; 8],
            WAIT,
            &(),
            &mut || {
                if let Some(claimed) = ring.claim(&pod, &()) {
                    let served = catch_unwind(AssertUnwindSafe(|| {
                        ring.serve(
                            &pod,
                            &server,
                            claimed,
                            &mut serving,
                            &PanicsAt("scr_atomics"),
                            on_panic,
                            |request, _| Response {
                                status: request.op,
                                detail: 0,
                            },
                        );
                    }));
                    assert!(served.is_err(), "the tally panicked");
                }
                ControlFlow::Continue(())
            },
        );
        assert_eq!(answer, Ok(on_panic));
        // And the ring goes on.
        for sender in [2, 3, 4] {
            let answer = call(&pod, &ring, entry_bytes, sender, &(), &|| true);
            assert!(answer.is_ok(), "sender {sender}: {answer:?}");
        }
    }
}

/// The pods the probes of panicking closures run on: undo images with objects in CXL,
/// undo images with local partitions and copies, and AllLog coherence.
fn probe_pods() -> Vec<(&'static str, Arc<Pod>)> {
    let base = || common::config().lease_ms(LEASE_MS);
    vec![
        (
            "cxl",
            common::heap_pod(&base().crash_safety(CrashSafety::Undo)),
        ),
        ("local", local_undo_pod()),
        (
            "copies",
            common::heap_pod(&base().crash_safety(CrashSafety::Undo).local_copies(2)),
        ),
        (
            "all-log",
            common::heap_pod(&base().coherence(megalon_core::Coherence::AllLog)),
        ),
    ]
}

/// Kept as a regression test (passed before the review's fixes): `update` closures and
/// `read_prefix` extents that panic, caught by the caller, 40 times on one host, in CXL,
/// in the host's DRAM, from copies and in an AllLog pod. Every lock is let go (the other
/// host writes at once, with a short wait limit), nothing is stored of a change that
/// panicked, the host goes on writing (no announce word kept), and when dropped it leaves
/// as a live host does (no recovery of it).
#[test]
fn panicking_updates_and_extents_leave_the_host_and_the_pod_working() {
    for (name, pod) in probe_pods() {
        let a = join(&pod, 1);
        let b = join(&pod, 2);
        let a_id = a.id();
        a.create(b"k", &value(1)).unwrap();
        for round in 0..40u8 {
            // Twice: local partitions move it here, copies copy it.
            read(&a, b"k");
            read(&a, b"k");
            panicking(|| {
                let _ = a.update(b"k", |bytes| {
                    bytes.fill(0xee);
                    panic!("the change's bug {ON_PURPOSE}")
                });
            });
            panicking(|| {
                let mut buf = vec![0; common::SLOT];
                let _ = a.read_prefix(b"k", &mut buf, &|_| panic!("the extent's bug {ON_PURPOSE}"));
            });
            assert_eq!(
                tag_of(&read(&a, b"k")),
                Some(round + 1),
                "{name}: a, round {round}"
            );
            assert_eq!(
                tag_of(&read(&b, b"k")),
                Some(round + 1),
                "{name}: b, round {round}"
            );
            b.write(b"k", &value(round + 2))
                .unwrap_or_else(|e| panic!("{name}: b's write, round {round}: {e}"));
            a.update(b"k", |bytes| assert_eq!(tag_of(bytes), Some(round + 2)))
                .unwrap_or_else(|e| panic!("{name}: a's update, round {round}: {e}"));
        }
        drop(a);
        wait_row_free(&pod, a_id);
        std::thread::sleep(Duration::from_millis(2 * u64::from(LEASE_MS)));
        assert_eq!(
            b.inspect().stats().hosts_recovered,
            0,
            "{name}: a left as a dead host"
        );
        assert_eq!(tag_of(&read(&b, b"k")), Some(41), "{name}");
    }
}

/// A pod with undo images and hosts a and b, `k` created and written by a; `leave` (given
/// a and b) leaves a lock of a's behind; a is dropped, and once its row is free b must
/// write `k` within [`BOUND`]: the lock did not outlive its host.
fn lock_does_not_outlive_its_host(what: &str, leave: impl FnOnce(&Host, &Host)) {
    let pod = common::heap_pod(
        &common::config()
            .lease_ms(LEASE_MS)
            .crash_safety(CrashSafety::Undo),
    );
    let a = join(&pod, 1);
    let b = join(&pod, 2);
    let a_id = a.id();
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    leave(&a, &b);
    drop(a);
    wait_row_free(&pod, a_id);
    let deadline = Instant::now() + BOUND;
    loop {
        match b.write(b"k", &value(4)) {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "{what}: locked after a left: {e}"
            ),
        }
    }
    assert_eq!(read(&b, b"k"), value(4), "{what}");
}

/// A write ticket the caller forgets (`mem::forget`, safe Rust) keeps its record locked
/// for its host's life (docs/decisions.md); once the host is dropped, in a pod with undo
/// images, the lock must not outlive it.
#[test]
fn a_forgotten_write_ticket_does_not_outlive_its_host() {
    lock_does_not_outlive_its_host("a forgotten ticket", |a, b| {
        let ticket = a.write_start(b"k").unwrap();
        ticket.write(0, &value(9)[..8]).unwrap();
        std::mem::forget(ticket);
        assert!(b.write(b"k", &value(3)).is_err(), "locked while a lives");
    });
}

/// A write's lock that a panic inside the write leaves held (one injected after the
/// lock, before the undo image: a bug, as a hold's comment says of "a write's wrap event
/// whose append panicked") must not outlive its host: the host leaves as a dead one and
/// its recovery unlocks the record. That holds when the write was made from a drop during
/// an unwind too (a guard of the caller's): there the hold was taken while the thread
/// already unwound, so its drop by the write's own panic ended it as a call's normal way
/// out, the announce withdrawn, nothing left to recovery, the host left as a live one,
/// and the record stayed locked for good.
#[cfg(feature = "chaos")]
#[test]
fn a_lock_left_by_a_panic_in_a_write_made_from_a_drop_does_not_outlive_its_host() {
    use megalon_core::chaos::{self, Point};

    fn panicking_write(a: &Host) {
        panicking(|| {
            chaos::with_hook(
                |at| {
                    if at == Point::WriteAfterEventCheck {
                        panic!("injected inside the write {ON_PURPOSE}");
                    }
                },
                || a.write(b"k", &value(3)),
            )
            .unwrap();
        });
    }
    struct WriteOnDrop<'a>(&'a Host);
    impl Drop for WriteOnDrop<'_> {
        fn drop(&mut self) {
            panicking_write(self.0);
        }
    }
    lock_does_not_outlive_its_host("a panic inside a write", |a, _| panicking_write(a));
    lock_does_not_outlive_its_host("the same, the write made from a drop", |a, _| {
        panicking(|| {
            let _guard = WriteOnDrop(a);
            panic!("the caller's own {ON_PURPOSE}");
        });
    });
}
