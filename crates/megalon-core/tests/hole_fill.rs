//! Two threads of one host that would fill a dead host's reservation at once (the pump's
//! whole recovery, holding the recovery word, and a replay stalled on the hole, which
//! `recover` lets fill too, the word being its own host's): one fills, the other leaves it
//! (the host's `filling` lock). (Both filled: the second, paused between its look at the
//! position and its write, wrote its `Skip` over the entry of the ring's next lap, and
//! every host that had not applied that entry stalled there for good.) And waits behind
//! a hole. Built with the `chaos` feature only.
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::stops::{timed_unstopped, Timed};
use common::value;
use megalon_core::chaos::{self, Point};
use megalon_core::inspect::crash;
use megalon_core::{Host, HostOptions, Join, Pod};

const LEASE_MS: u32 = 100;

fn options(id: u32) -> HostOptions {
    HostOptions::new()
        .memory(common::simulated(u64::from(id) + 1, 4096, 0))
        .pump_interval(None)
        .wait_limit(Duration::from_secs(2))
}

#[test]
fn a_second_filler_of_a_dead_hosts_hole_leaves_the_next_laps_entry_alone() {
    let config = common::config().lease_ms(LEASE_MS);
    let pod: Arc<Pod> = common::heap_pod(&config);
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let c = Host::join(&pod, Join::As(2), options(2)).unwrap();
    let d = Host::join(&pod, Join::As(1), options(1)).unwrap();
    a.create(b"x", &value(1)).unwrap();
    c.replay().unwrap();
    // d reserves a position, publishes nothing, and dies.
    let p = d.inspect().reserve_unpublished(1).unwrap();
    crash(d);
    // a's watch first sees d's heartbeat, then the lease runs out.
    a.inspect().watch_hosts();
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) * 3));
    // Thread w of a: the whole recovery of d, paused before it writes its `Skip` at p.
    let (paused, is_paused) = channel();
    let (go, resume) = channel::<()>();
    let resume = Mutex::new(resume);
    let w = std::thread::spawn(move || {
        let paused = Mutex::new(paused);
        let mut once = true;
        chaos::with_hook(
            move |at| {
                if at == Point::RecoveryBeforeFill && once {
                    once = false;
                    paused.lock().unwrap().send(()).unwrap();
                    resume.lock().unwrap().recv().unwrap();
                }
            },
            || a.inspect().watch_hosts(),
        );
    });
    is_paused.recv().unwrap();
    // Another thread of a appends; its replay stalls on p. It fills nothing while w
    // holds the host's `filling` lock: it leaves p to w (a nested fill that went ahead
    // and paused past the outer recovery is
    // `a_nested_fill_paused_past_the_outer_recovery_never_writes_over_the_next_lap`, in
    // `recovery_races.rs`).
    let filled = a.create(b"y", &value(2));
    assert_eq!(
        a.inspect().stats().entries_skipped,
        0,
        "a second filler filled p ({p})"
    );
    assert!(filled.is_err(), "y's create waited behind p: {filled:?}");
    // w resumes and fills p once: y's entry, behind p, applies then on every host.
    go.send(()).unwrap();
    w.join().unwrap();
    assert_eq!(a.inspect().stats().entries_skipped, 1, "w filled p");
    let _ = c.replay();
    assert!(
        c.lookup(b"y").unwrap().is_some(),
        "y applies once p is filled"
    );
    assert!(a.lookup(b"y").unwrap().is_some());
    assert!(c.lookup(b"x").unwrap().is_some());
}

/// Host a's append waits behind a hole (host d reserved a position and has not published
/// it: slow, alive), its replay having applied every entry below the hole, so a's replica
/// covers `ctail`. A read on a needs nothing past the hole and answers at once. (It waited
/// on the replay lock for as long as the append waited, up to the wait limit: the round's
/// position reached `applied` only when the whole replay ended.)
#[test]
fn a_read_does_not_wait_behind_an_append_stalled_on_a_hole() {
    let wait = Duration::from_secs(3);
    let options = |id: u32| options(id).wait_limit(wait);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    let d: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    a.create(b"x", &value(1)).unwrap();
    b.replay().unwrap();
    d.replay().unwrap();
    // A thread of a creates y; between its tail check and its event, b appends (`ctail`
    // moves past a's replica), then d reserves a position and is slow: y's append waits
    // behind that hole, its replay having applied b's entry.
    let (hole_at, hole) = channel();
    let (applied, is_applied) = channel();
    let appender = std::thread::spawn(move || {
        let applied = Mutex::new(Some(applied));
        let mut before = true;
        chaos::with_hook(
            move |at| {
                if at == Point::CreateBeforeEvent && std::mem::take(&mut before) {
                    b.create(b"z", &value(2)).unwrap();
                    hole_at
                        .send(d.inspect().reserve_unpublished(1).unwrap())
                        .unwrap();
                }
                if at == Point::ReplayBeforeCtail && !before {
                    if let Some(applied) = applied.lock().unwrap().take() {
                        applied.send(()).unwrap();
                    }
                }
            },
            || a.create(b"y", &value(3)),
        )
    });
    let hole = hole.recv().unwrap();
    is_applied.recv().unwrap();
    let (_, ctail, _) = a.inspect().log_cursors();
    assert!(ctail <= hole, "ctail {ctail} stops at the hole {hole}");
    // The round ends (its settles run) just after that point: then a's replica covers it.
    let settled = std::time::Instant::now() + wait / 4;
    while a.inspect().applied_position() < ctail && std::time::Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(1));
    }
    let began = std::time::Instant::now();
    let mut buf = vec![0u8; common::SLOT];
    a.read(b"x", &mut buf).unwrap();
    let took = began.elapsed();
    assert_eq!(buf, value(1));
    let _ = appender.join().unwrap();
    assert!(
        took < wait / 4,
        "a read of x waited {took:?} behind an append stalled on the hole at {hole}"
    );
}

/// Without flat combining: a thread of host a publishes its create's entry and, before it
/// confirms it, host d reserves the next position (slow, alive) and another thread of a
/// appends behind it. That thread's replay applies the create's entry and waits for the
/// hole, holding the replay lock. The create's outcome is applied: it answers at once.
/// (It waited on the replay lock until the other gave up, a whole wait limit.)
#[test]
fn an_append_a_siblings_replay_applied_does_not_wait_for_the_siblings_hole() {
    let wait = Duration::from_secs(3);
    let options = |id: u32| options(id).wait_limit(wait).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let d: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    a.create(b"x", &value(1)).unwrap();
    d.replay().unwrap();
    let creator = std::thread::spawn(move || {
        type Behind = Option<std::thread::JoinHandle<megalon_core::Result<()>>>;
        let behind: std::rc::Rc<std::cell::RefCell<Behind>> = Default::default();
        let resumed: std::rc::Rc<std::cell::Cell<Option<std::time::Instant>>> = Default::default();
        let created = chaos::with_hook(
            {
                let (behind, resumed) = (behind.clone(), resumed.clone());
                move |at| {
                    if at != Point::AppendAfterPublish || behind.borrow().is_some() {
                        return;
                    }
                    let hole = d.inspect().reserve_unpublished(1).unwrap();
                    *behind.borrow_mut() =
                        Some(std::thread::spawn(move || a.create(b"z", &value(3))));
                    // Until the other thread's replay has applied everything below the hole.
                    let deadline = std::time::Instant::now() + wait / 2;
                    while a.inspect().applied_position() < hole {
                        assert!(std::time::Instant::now() < deadline, "z's replay stalled");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    resumed.set(Some(std::time::Instant::now()));
                }
            },
            || a.create(b"y", &value(2)),
        );
        let took = resumed.get().expect("paused after the publish").elapsed();
        let _ = behind.take().expect("z appended").join().unwrap();
        (created, took)
    });
    let (created, took) = creator.join().unwrap();
    created.unwrap();
    assert!(
        took < wait / 4,
        "y's create, applied, waited {took:?} for the hole after it"
    );
}

/// How long the appender of [`beside_a_siblings_wait_for_a_hole`] stays paused in its
/// replay's round.
const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// When the other thread of [`beside_a_siblings_wait_for_a_hole`] makes its call.
#[derive(Clone, Copy)]
enum Begin {
    /// While the appender's round is paused.
    InRound,
    /// This long after the round, the appender waiting for the hole.
    InWait(Duration),
}

/// The scene of the two tests below. Without flat combining: a thread of host a creates
/// y; between its tail check and its event, b appends z (`ctail` moves past a's replica)
/// and d reserves the next position (slow, alive). y's append waits behind that hole: its
/// replay applies z, then waits for the hole, holding the replay lock, up to the wait
/// limit. Another thread of a makes `call`, begun while that replay's round is under way
/// (paused in it for [`ROUND_PAUSE`]: its tail check finds a's replica below `ctail`,
/// which the round then covers), or during the wait. Timed over a run the process was not
/// stopped in (a stop spends the waits at once and overshoots any bound: run again, see
/// `common::stops`). Returns what `call` answered, how long it took, and how long of that
/// the process was stopped (zero unless every attempt was).
fn beside_a_siblings_wait_for_a_hole<R: Send + 'static>(
    wait: Duration,
    begin: Begin,
    call: fn(&'static Host) -> R,
) -> Timed<R> {
    timed_unstopped(|| the_scene_beside_a_siblings_wait_for_a_hole(wait, begin, call))
}

/// One run of [`beside_a_siblings_wait_for_a_hole`]: what `call` answered, and when it
/// began and ended.
fn the_scene_beside_a_siblings_wait_for_a_hole<R: Send + 'static>(
    wait: Duration,
    begin: Begin,
    call: fn(&'static Host) -> R,
) -> (R, Instant, Instant) {
    let options = |id: u32| options(id).wait_limit(wait).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    let d: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    a.create(b"x", &value(1)).unwrap();
    b.replay().unwrap();
    d.replay().unwrap();
    let (in_round, is_in_round) = channel();
    let (go, resume) = channel::<()>();
    let appender = std::thread::spawn(move || {
        let mut hole = None;
        let mut paused = false;
        chaos::with_hook(
            move |at| {
                if at == Point::CreateBeforeEvent && hole.is_none() {
                    b.create(b"z", &value(2)).unwrap();
                    hole = Some(d.inspect().reserve_unpublished(1).unwrap());
                }
                match hole {
                    Some(hole) if at == Point::ReplayBeforeCtail && !paused => {
                        paused = true;
                        in_round.send(hole).unwrap();
                        resume.recv().unwrap();
                    }
                    _ => {}
                }
            },
            || a.create(b"y", &value(3)),
        )
    });
    let hole = is_in_round.recv().unwrap();
    let (_, ctail, _) = a.inspect().log_cursors();
    assert!(
        a.inspect().applied_position() < ctail && ctail <= hole,
        "a's replica below ctail {ctail}, which stops at the hole {hole}"
    );
    let caller = move || {
        std::thread::spawn(move || {
            let began = Instant::now();
            let answered = call(a);
            (answered, began, Instant::now())
        })
    };
    let caller = match begin {
        Begin::InRound => {
            let caller = caller();
            // The caller's tail check reads a's `applied`, below `ctail`, in the meantime.
            std::thread::sleep(ROUND_PAUSE);
            go.send(()).unwrap();
            caller
        }
        Begin::InWait(after) => {
            std::thread::sleep(ROUND_PAUSE);
            go.send(()).unwrap();
            std::thread::sleep(after);
            caller()
        }
    };
    let called = caller.join().unwrap();
    let _ = appender.join().unwrap();
    called
}

/// A lookup on a needs nothing past the hole: once the sibling's round covers `ctail`, it
/// answers. (Its tail check, begun before that round ended, waited on the replay lock for
/// the sibling's whole wait for the hole, a wait limit.)
#[test]
fn a_tail_check_begun_in_a_siblings_round_does_not_wait_for_the_siblings_hole() {
    let wait = Duration::from_millis(500);
    let Timed {
        value: found,
        took,
        stopped,
    } = beside_a_siblings_wait_for_a_hole(wait, Begin::InRound, |a| a.lookup(b"x"));
    // Stopped in every attempt, the lookup's wait may have been spent before the round
    // covered `ctail`.
    assert!(
        matches!(found, Ok(Some(_)))
            || (!stopped.is_zero()
                && matches!(found, Err(megalon_core::Error::ReplayStalled { .. }))),
        "the lookup of x: {found:?}"
    );
    assert!(
        took < ROUND_PAUSE + wait / 4 + stopped,
        "a lookup of x, paused {ROUND_PAUSE:?} behind a sibling's round, took {took:?} \
         ({stopped:?} of it stopped; wait limit {wait:?})"
    );
}

/// A delete on a, begun in the sibling's round: its own append lies past the hole, and
/// waits for it, within its wait limit. (Its tail check first waited on the replay lock
/// for the sibling's whole wait for the hole, and its confirm then waited a limit of its
/// own: about two limits.)
#[test]
fn a_delete_begun_in_a_siblings_round_waits_one_limit_for_the_hole() {
    let wait = Duration::from_millis(500);
    let Timed {
        value: deleted,
        took,
        stopped,
    } = beside_a_siblings_wait_for_a_hole(wait, Begin::InRound, |a| a.delete(b"x"));
    assert!(
        matches!(deleted, Err(megalon_core::Error::ReplayStalled { .. })),
        "the delete lies past the hole, never filled: {deleted:?}"
    );
    assert!(
        took < ROUND_PAUSE + wait + wait / 2 + stopped,
        "a delete, paused {ROUND_PAUSE:?} behind a sibling's round, took {took:?} \
         ({stopped:?} of it stopped; wait limit {wait:?})"
    );
}

/// A delete on a, begun halfway through the sibling's wait for the hole: its confirm
/// watches `applied` while the sibling holds the replay lock, then replays itself once the
/// sibling gives up, waiting what is left of its one limit. (Its replay began a limit of
/// its own there: one and a half in all.)
#[test]
fn a_delete_begun_in_a_siblings_wait_for_a_hole_waits_one_limit() {
    let wait = Duration::from_millis(500);
    let Timed {
        value: deleted,
        took,
        stopped,
    } = beside_a_siblings_wait_for_a_hole(wait, Begin::InWait(wait / 2), |a| a.delete(b"x"));
    assert!(
        matches!(deleted, Err(megalon_core::Error::ReplayStalled { .. })),
        "the delete lies past the hole, never filled: {deleted:?}"
    );
    assert!(
        took < wait + wait / 4 + stopped,
        "a delete begun {:?} into a sibling's wait for a hole took {took:?} ({stopped:?} of \
         it stopped; wait limit {wait:?})",
        wait / 2
    );
}

/// Without flat combining: a thread of host a deletes x (written: the delete holds its
/// record's lock), its entry published behind a hole (host d reserved the position before
/// it and is slow, beating), and its wait for the outcome fails (forced: as a confirm that
/// waited out its limit fails). Right then another thread of a deletes w behind the same
/// hole, and its replay holds the replay lock through its wait for the hole, a limit
/// begun after the first's. The first delete answers at once, its settle left to the
/// replay that applies its entry. (It took the replay lock to decide that, and waited out
/// the other's whole limit: two limits in all, had its own confirm waited one.) Once d
/// dies and its hole is filled, both deletes apply and each record is freed once.
#[test]
fn an_unconfirmed_append_does_not_wait_out_a_siblings_wait_for_a_hole() {
    let wait = Duration::from_millis(500);
    let options = |id: u32| options(id).wait_limit(wait).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(300));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let d: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    for key in [&b"x"[..], b"w"] {
        a.create(key, &value(1)).unwrap();
        a.write(key, &value(2)).unwrap();
    }
    d.replay().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beating = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                d.inspect().heartbeat();
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let hole = d.inspect().reserve_unpublished(1).unwrap();
    let deleter = std::thread::spawn(move || {
        type Sibling = Option<std::thread::JoinHandle<megalon_core::Result<()>>>;
        let sibling: std::rc::Rc<std::cell::RefCell<Sibling>> = Default::default();
        let resumed: std::rc::Rc<std::cell::Cell<Option<std::time::Instant>>> = Default::default();
        chaos::fail_next_appends(&[chaos::Fault::Unconfirmed]);
        let deleted = chaos::with_hook(
            {
                let (sibling, resumed) = (sibling.clone(), resumed.clone());
                move |at| {
                    if at != Point::AppendAfterPublish || sibling.borrow().is_some() {
                        return;
                    }
                    let (published, is_published) = channel();
                    *sibling.borrow_mut() = Some(std::thread::spawn(move || {
                        let published = Mutex::new(Some(published));
                        chaos::with_hook(
                            move |at| {
                                if at == Point::AppendAfterPublish {
                                    if let Some(published) = published.lock().unwrap().take() {
                                        published.send(()).unwrap();
                                    }
                                }
                            },
                            || a.delete(b"w"),
                        )
                    }));
                    is_published.recv().unwrap();
                    // The sibling's confirm takes the free replay lock and waits for the
                    // hole.
                    std::thread::sleep(Duration::from_millis(50));
                    resumed.set(Some(std::time::Instant::now()));
                }
            },
            || a.delete(b"x"),
        );
        let took = resumed.get().expect("paused after the publish").elapsed();
        let behind = sibling.take().expect("w's delete made").join().unwrap();
        (deleted, took, behind)
    });
    let (deleted, took, behind) = deleter.join().unwrap();
    assert!(
        matches!(deleted, Err(megalon_core::Error::InjectedFault { .. })),
        "x's delete, unconfirmed: {deleted:?}"
    );
    assert!(
        matches!(behind, Err(megalon_core::Error::ReplayStalled { .. })),
        "w's delete lies past the hole at {hole}: {behind:?}"
    );
    assert!(
        took < wait / 4,
        "x's delete, unconfirmed, waited {took:?} for a sibling's wait for the hole at {hole} \
         (wait limit {wait:?})"
    );
    // d dies; its hole is filled, and both deletes apply, each settle run once.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    beating.join().unwrap();
    d.inspect().freeze();
    a.inspect().watch_hosts();
    std::thread::sleep(Duration::from_millis(900));
    a.inspect().watch_hosts();
    assert_eq!(a.inspect().settle_pending().unwrap(), 0);
    assert!(a.lookup(b"x").unwrap().is_none());
    assert!(a.lookup(b"w").unwrap().is_none());
    assert_eq!(a.inspect().outcomes_held(), 0);
    let census = a.inspect().record_census();
    assert!(census.locked.is_empty(), "records left locked: {census:?}");
    assert!(census.in_use.is_empty(), "records left in use: {census:?}");
}

/// Without flat combining: a thread of host a deletes x, its wait for the outcome failing
/// (forced), while another thread's replay round has applied its entry and is paused
/// before it moves `ctail`. The delete answers its outcome only once that round ends: a
/// lookup on host b right after it finds x gone. (Answered from the outcome as the round
/// put it there, it returned before `ctail` covered the delete.)
#[test]
fn an_unconfirmed_append_applied_by_a_round_under_way_answers_once_the_round_ends() {
    let options = |id: u32| options(id).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    a.create(b"x", &value(1)).unwrap();
    a.write(b"x", &value(2)).unwrap();
    b.replay().unwrap();
    let (in_round, is_in_round) = channel();
    let (go, resume) = channel::<()>();
    let resume = Arc::new(Mutex::new(resume));
    let deleter = std::thread::spawn(move || {
        type Replayer = Option<std::thread::JoinHandle<megalon_core::Result<u64>>>;
        let replayer: std::rc::Rc<std::cell::RefCell<Replayer>> = Default::default();
        chaos::fail_next_appends(&[chaos::Fault::Unconfirmed]);
        let deleted = chaos::with_hook(
            {
                let replayer = replayer.clone();
                move |at| {
                    if at != Point::AppendAfterPublish || replayer.borrow().is_some() {
                        return;
                    }
                    let (in_round, resume) = (in_round.clone(), Arc::clone(&resume));
                    let (paused, is_paused) = channel();
                    *replayer.borrow_mut() = Some(std::thread::spawn(move || {
                        let mut once = true;
                        chaos::with_hook(
                            move |at| {
                                if at == Point::ReplayBeforeCtail && std::mem::take(&mut once) {
                                    paused.send(()).unwrap();
                                    in_round.send(()).unwrap();
                                    resume.lock().unwrap().recv().unwrap();
                                }
                            },
                            || a.replay(),
                        )
                    }));
                    is_paused.recv().unwrap();
                }
            },
            || a.delete(b"x"),
        );
        // Right after the delete answers: every host's tail check finds it.
        let seen = b.lookup(b"x");
        let replayed = replayer.take().expect("replayed").join().unwrap();
        (deleted, seen, replayed)
    });
    is_in_round.recv().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    go.send(()).unwrap();
    let (deleted, seen, replayed) = deleter.join().unwrap();
    replayed.unwrap();
    deleted.unwrap();
    assert!(seen.unwrap().is_none(), "x, deleted, still found on b");
    assert_eq!(a.inspect().settle_pending().unwrap(), 0);
    assert_eq!(a.inspect().outcomes_held(), 0);
    let census = a.inspect().record_census();
    assert!(
        census.locked.is_empty() && census.in_use.is_empty(),
        "{census:?}"
    );
}

/// With flat combining: two threads of host a delete x and y (each written: each delete
/// holds its record's lock), their requests combined into one batch whose wait for the
/// outcome fails (forced), while another thread's replay round has applied the batch's
/// first entry and is paused before the second. The first delete answers its outcome,
/// once that round ends (a lookup on host b right after it finds its object gone); the
/// second answers the error, its settle left to the round, which frees its record once.
/// (Waiting for the round only when the batch's last entry was found, the first delete
/// answered while the round had not moved `ctail` over it.)
#[test]
fn an_unconfirmed_batch_half_applied_by_a_round_under_way_answers_each_entry_once() {
    let options = |id: u32| options(id).flat_combining(true);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    for key in [&b"x"[..], b"y"] {
        a.create(key, &value(1)).unwrap();
        a.write(key, &value(2)).unwrap();
    }
    a.create(b"z", &value(3)).unwrap();
    b.replay().unwrap();
    // Thread t0 of a combines a delete of z and stays paused after its publish, holding the
    // combiner: the deletes of x and y queue behind it, and the next combiner takes both.
    let (t0_paused, is_t0_paused) = channel();
    let (t0_go, t0_resume) = channel::<()>();
    let t0_resume = Mutex::new(t0_resume);
    let t0 = std::thread::spawn(move || {
        let mut once = true;
        chaos::with_hook(
            move |at| {
                if at == Point::AppendAfterPublish && std::mem::take(&mut once) {
                    // b covers `ctail` once this delete is confirmed: its tail check finds
                    // nothing more until a round moves `ctail` past the batch.
                    b.replay().unwrap();
                    t0_paused.send(()).unwrap();
                    t0_resume.lock().unwrap().recv().unwrap();
                }
            },
            || a.delete(b"z"),
        )
    });
    is_t0_paused.recv().unwrap();
    // The replay round that a delete's combiner starts at its publish, paused after the
    // batch's first entry.
    let (round_paused, is_round_paused) = channel();
    let round_paused = Arc::new(Mutex::new(round_paused));
    let (round_go, round_resume) = channel::<()>();
    let round_resume = Arc::new(Mutex::new(round_resume));
    let replayer: Arc<Mutex<Option<std::thread::JoinHandle<megalon_core::Result<u64>>>>> =
        Arc::default();
    let deleter = |key: &'static [u8]| {
        let (round_paused, round_resume) = (Arc::clone(&round_paused), Arc::clone(&round_resume));
        let replayer = Arc::clone(&replayer);
        std::thread::spawn(move || {
            chaos::fail_next_appends(&[chaos::Fault::Unconfirmed]);
            let deleted = chaos::with_hook(
                move |at| {
                    let mut replayer = replayer.lock().unwrap();
                    if at != Point::AppendAfterPublish || replayer.is_some() {
                        return;
                    }
                    let (round_paused, round_resume) =
                        (Arc::clone(&round_paused), Arc::clone(&round_resume));
                    let (paused, is_paused) = channel();
                    *replayer = Some(std::thread::spawn(move || {
                        let mut once = true;
                        chaos::with_hook(
                            move |at| {
                                if at == Point::ReplayBetweenEntries && std::mem::take(&mut once) {
                                    paused.send(()).unwrap();
                                    round_paused.lock().unwrap().send(()).unwrap();
                                    round_resume.lock().unwrap().recv().unwrap();
                                }
                            },
                            || a.replay(),
                        )
                    }));
                    drop(replayer);
                    is_paused.recv().unwrap();
                },
                || a.delete(key),
            );
            // Right after the delete answers: every host's tail check finds what it did.
            let seen = b.lookup(key);
            chaos::clear_forced_faults();
            (deleted, seen)
        })
    };
    let (dx, dy) = (deleter(b"x"), deleter(b"y"));
    // Both queued behind t0 (their tail checks and record locks take microseconds).
    std::thread::sleep(Duration::from_millis(200));
    t0_go.send(()).unwrap();
    t0.join().unwrap().unwrap();
    is_round_paused.recv().unwrap();
    // The combiner decides while the round is paused, then waits for its end.
    std::thread::sleep(Duration::from_millis(100));
    round_go.send(()).unwrap();
    let answers = [dx.join().unwrap(), dy.join().unwrap()];
    let replayed = replayer.lock().unwrap().take().expect("a round paused");
    replayed.join().unwrap().unwrap();
    let found = answers
        .iter()
        .filter(|(deleted, _)| deleted.is_ok())
        .count();
    assert_eq!(found, 1, "one entry applied, one not: {answers:?}");
    for (deleted, seen) in &answers {
        match deleted {
            Ok(()) => assert!(
                seen.as_ref().unwrap().is_none(),
                "deleted, still found on b: {answers:?}"
            ),
            Err(megalon_core::Error::InjectedFault { .. }) => {}
            other => panic!("the second delete, unconfirmed: {other:?}"),
        }
    }
    assert_eq!(a.inspect().settle_pending().unwrap(), 0);
    assert_eq!(a.inspect().outcomes_held(), 0);
    assert!(a.lookup(b"x").unwrap().is_none());
    assert!(a.lookup(b"y").unwrap().is_none());
    let census = a.inspect().record_census();
    assert!(
        census.locked.is_empty() && census.in_use.is_empty(),
        "{census:?}"
    );
}

/// A wait for a hole whose limit passes while its thread is stopped, the entry published
/// meanwhile, looks at the log once more before it gives up: the append behind the hole
/// answers. (It answered `ReplayStalled` at its first look at the clock after the pause,
/// though the entry it waited for was there.)
#[test]
fn a_wait_for_a_hole_filled_while_its_thread_was_stopped_looks_once_more() {
    let wait = Duration::from_millis(200);
    let options = |id: u32| options(id).wait_limit(wait).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let d: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    // d reserves a position for its create and is slow to write it: a hole.
    let (reserved, is_reserved) = channel();
    let (go, resume) = channel::<()>();
    let (published, is_published) = channel();
    let slow = std::thread::spawn(move || {
        let mut once = true;
        let created = chaos::with_hook(
            move |at| {
                if at == Point::AppendBeforeWrite && std::mem::take(&mut once) {
                    reserved.send(()).unwrap();
                    resume.recv().unwrap();
                }
            },
            || d.create(b"d", &value(1)),
        );
        published.send(()).unwrap();
        created
    });
    is_reserved.recv().unwrap();
    // a's create lies behind the hole. Its replay looks, finds the hole, pauses; at its
    // second look the hole is filled while the thread is stopped past its whole limit.
    let mut waits = 0;
    let began = std::time::Instant::now();
    let created = chaos::with_hook(
        move |at| {
            if at == Point::ReplayBeforeWait {
                waits += 1;
                if waits == 2 {
                    go.send(()).unwrap();
                    is_published.recv().unwrap();
                    std::thread::sleep(wait + wait / 2);
                }
            }
        },
        || a.create(b"a", &value(2)),
    );
    let took = began.elapsed();
    assert!(
        created.is_ok(),
        "a's create, its hole filled while it was stopped, answered {created:?} after \
         {took:?}"
    );
    slow.join().unwrap().unwrap();
    let mut buf = vec![0u8; common::SLOT];
    a.read(b"d", &mut buf).unwrap();
    assert_eq!(buf, value(1));
}

/// The same for a tail check that watches a sibling's replay (which holds the replay
/// lock): its limit passes while its thread is stopped, the sibling's round having
/// covered `ctail` meanwhile; it looks once more and answers. (It answered
/// `ReplayStalled`.) An append needs no such look: a confirm given up looks for its
/// outcomes anyway.
#[test]
fn a_tail_check_behind_a_siblings_replay_stopped_past_its_limit_looks_once_more() {
    let wait = Duration::from_millis(500);
    let options = |id: u32| options(id).wait_limit(wait).flat_combining(false);
    let pod = common::heap_pod(&common::config().lease_ms(60_000));
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let b: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    a.create(b"x", &value(1)).unwrap();
    // b's create moves `ctail` past a's replica; a sibling on a replays it, its round
    // paused before it covers `ctail`.
    b.create(b"z", &value(2)).unwrap();
    let (in_round, is_in_round) = channel();
    let (go, resume) = channel::<()>();
    let sibling = std::thread::spawn(move || {
        let mut once = true;
        chaos::with_hook(
            move |at| {
                if at == Point::ReplayBeforeCtail && std::mem::take(&mut once) {
                    in_round.send(()).unwrap();
                    resume.recv().unwrap();
                }
            },
            || a.replay(),
        )
    });
    is_in_round.recv().unwrap();
    let (_, ctail, _) = a.inspect().log_cursors();
    assert!(a.inspect().applied_position() < ctail);
    // This thread's read checks the tail: it watches the sibling's round. At its second
    // look the round goes on and covers `ctail` while this thread is stopped past its
    // whole limit.
    let mut waits = 0;
    let mut buf = vec![0u8; common::SLOT];
    let read = chaos::with_hook(
        move |at| {
            if at == Point::ReplayBeforeWait {
                waits += 1;
                if waits == 2 {
                    go.send(()).unwrap();
                    while a.inspect().applied_position() < ctail {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(wait + wait / 2);
                }
            }
        },
        || a.read(b"z", &mut buf),
    );
    assert!(
        read.is_ok(),
        "a's read, its tail covered by a sibling while it was stopped, answered {read:?}"
    );
    assert_eq!(buf, value(2));
    sibling.join().unwrap().unwrap();
}
