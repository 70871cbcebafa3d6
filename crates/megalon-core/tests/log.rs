//! The shared log and the replicated index, across hosts of one process.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::stops::{timed_unstopped, Timed};
use megalon_core::{
    event::Event, Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};

fn pod(config: PodConfig) -> Arc<Pod> {
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

/// The log's capacity in `small_config`.
const CAPACITY: u64 = 8;

fn small_config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(256)
        .max_key_bytes(48) // 128-byte entries: two lines each
        .log_capacity_entries(CAPACITY)
        .max_hosts(4)
}

fn simulated(seed: u64) -> HostOptions {
    HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines: 256,
        random_eviction_one_in: 16,
        ..SimulatedConfig::default()
    }))
}

#[test]
fn a_create_on_one_host_is_seen_by_the_next_lookup_on_another() {
    let pod = pod(small_config());
    let a = Host::join(&pod, Join::AnyFree, simulated(1)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, simulated(2)).unwrap();
    a.create(b"apple", b"red").unwrap();
    let entry = b
        .lookup(b"apple")
        .unwrap()
        .expect("b sees a's completed create");
    assert_eq!(entry.record, None);
    assert_eq!(a.lookup(b"apple").unwrap(), Some(entry));
    assert!(matches!(
        b.create(b"apple", b"green"),
        Err(Error::ObjectExists)
    ));
    b.delete(b"apple").unwrap();
    assert_eq!(a.lookup(b"apple").unwrap(), None);
    assert!(matches!(a.delete(b"apple"), Err(Error::UnknownKey)));
}

#[test]
fn keys_and_values_past_the_limits_are_refused_whole() {
    let pod = pod(small_config());
    let host = Host::join(&pod, Join::AnyFree, MemoryKind::Hardware).unwrap();
    let long_key = vec![7u8; 49];
    assert!(matches!(
        host.create(&long_key, b"v"),
        Err(Error::KeyTooLarge {
            key_bytes: 49,
            max_key_bytes: 48
        })
    ));
    assert!(matches!(
        host.lookup(&long_key),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        host.delete(&long_key),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        host.create(b"k", &[0u8; 257]),
        Err(Error::ValueTooLarge {
            value_bytes: 257,
            slot_size_bytes: 256
        })
    ));
    // Nothing reached the log, and the maximum itself is fine.
    assert_eq!(host.inspect().log_cursors().2, 0);
    host.create(&long_key[..48], b"v").unwrap();
}

#[test]
fn the_ring_wraps_many_times_and_every_replica_converges() {
    let pod = pod(small_config());
    let hosts: Vec<Host> = (0..3)
        .map(|i| Host::join(&pod, Join::AnyFree, simulated(10 + i)).unwrap())
        .collect();
    for round in 0..40u32 {
        let host = &hosts[round as usize % 3];
        let key = format!("key-{}", round % 7);
        match host.create(key.as_bytes(), &round.to_le_bytes()) {
            Ok(()) | Err(Error::ObjectExists) => {}
            Err(e) => panic!("create: {e}"),
        }
        if round % 3 == 0 {
            let _ = hosts[(round as usize + 1) % 3].delete(key.as_bytes());
        }
    }
    let (_, _, tail) = hosts[0].inspect().log_cursors();
    assert!(
        tail > 4 * 8,
        "the ring of 8 wrapped several times (tail {tail})"
    );
    for host in &hosts {
        host.replay().unwrap();
    }
    let first = hosts[0].inspect().replica_snapshot();
    for host in &hosts[1..] {
        assert_eq!(host.inspect().replica_snapshot(), first);
    }
}

/// Three hosts of three threads each create and delete keys of their own in a log of 8
/// entries, with a wait limit of 2 ms: batches find the log full, or room for part of
/// them, all the time. An answer that says the log was full (or that no combiner served
/// it) changed nothing; a create or a delete answered `Ok` took effect; any other error
/// leaves the key unknown until the next answer about it. At the end every key the
/// answers tell of is as they say, on every replica. (Outcomes handed to the wrong
/// requests of a batch, or a refused request's entry in the log, show here.)
#[test]
fn answers_hold_with_a_log_full_all_the_time() {
    const THREADS: usize = 3;
    const KEYS: usize = 4;
    let pod = pod(small_config());
    let options = HostOptions::new().wait_limit(Duration::from_millis(2));
    let hosts: Vec<Arc<Host>> = (0..3)
        .map(|_| Arc::new(Host::join(&pod, Join::AnyFree, options.clone()).unwrap()))
        .collect();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let workers: Vec<_> = hosts
        .iter()
        .enumerate()
        .flat_map(|(h, host)| (0..THREADS).map(move |t| (h, t, Arc::clone(host))))
        .map(|(h, t, host)| {
            std::thread::spawn(move || {
                // Each key: `Some(present)` as the answers tell, `None` unknown.
                let mut model = [Some(false); KEYS];
                let (mut refused, mut made) = (0u64, 0u64);
                let mut round = 0usize;
                while Instant::now() < deadline {
                    let k = round % KEYS;
                    round += 1;
                    let key = format!("h{h}t{t}k{k}");
                    let create = model[k] != Some(true);
                    let answer = if create {
                        host.create(key.as_bytes(), b"v")
                    } else {
                        host.delete(key.as_bytes())
                    };
                    model[k] = match answer {
                        Ok(()) => {
                            made += 1;
                            Some(create)
                        }
                        Err(Error::ObjectExists) => Some(true),
                        Err(Error::UnknownKey) => Some(false),
                        Err(Error::LogFull { .. } | Error::CombinerStalled { .. }) => {
                            refused += 1;
                            model[k]
                        }
                        Err(_) => None,
                    };
                }
                (key_names(h, t), model, refused, made)
            })
        })
        .collect();
    fn key_names(h: usize, t: usize) -> Vec<String> {
        (0..KEYS).map(|k| format!("h{h}t{t}k{k}")).collect()
    }
    let (mut refused, mut made, mut known) = (0, 0, 0);
    let mut models = Vec::new();
    for worker in workers {
        let (keys, model, r, m) = worker.join().unwrap();
        refused += r;
        made += m;
        models.push((keys, model));
    }
    for host in &hosts {
        host.replay().unwrap();
    }
    for (keys, model) in &models {
        for (key, present) in keys.iter().zip(model) {
            let Some(present) = present else { continue };
            known += 1;
            for host in &hosts {
                assert_eq!(
                    host.lookup(key.as_bytes()).unwrap().is_some(),
                    *present,
                    "{key} on host {}",
                    host.id()
                );
            }
        }
    }
    eprintln!("{made} made, {refused} refused, {known} keys known");
    assert!(made > 100 && refused > 10, "{made} made, {refused} refused");
    let first = hosts[0].inspect().replica_snapshot();
    for host in &hosts[1..] {
        assert_eq!(host.inspect().replica_snapshot(), first);
    }
}

#[test]
fn a_host_that_never_replays_fills_the_log_and_is_named() {
    let pod = pod(small_config());
    let quick = HostOptions::new().wait_limit(Duration::from_millis(200));
    let busy = Host::join(&pod, Join::As(0), quick.clone()).unwrap();
    let _idle = Host::join(&pod, Join::As(1), quick.pump_interval(None)).unwrap();
    let mut error = None;
    for i in 0..20u32 {
        if let Err(e) = busy.create(format!("k{i}").as_bytes(), b"v") {
            error = Some(e);
            break;
        }
    }
    match error {
        Some(Error::LogFull {
            lagging_host: Some(1),
            lagging_position: 0,
            capacity_entries: 8,
            ..
        }) => {}
        other => panic!("expected LogFull naming host 1, got {other:?}"),
    }
}

/// Creates keys on `busy` until the log is full (another host holds its head back).
fn fill_the_log(busy: &Host) {
    for i in 0..20u32 {
        match busy.create(format!("k{i}").as_bytes(), b"v") {
            Ok(()) => {}
            Err(Error::LogFull { .. }) => return,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the log never filled");
}

/// Two threads of one host append into a full log, the second half a wait limit after the
/// first: the combiner takes the second's request only when the first's batch gives up,
/// and the second must still answer within its own wait limit, counted from its call (it
/// waited a whole limit more: a server's SET answered `LogFull` after 4.5 s of a 3 s
/// limit).
#[test]
fn an_append_queued_behind_a_batch_waiting_for_room_waits_at_most_its_limit() {
    a_second_append_into_a_full_log_waits_at_most_its_limit(true);
}

/// Two threads of one host append into a full log, the second half a wait limit after
/// the first; the second answers `LogFull` within its own limit, counted from its call.
/// Timed over a run the process was not stopped in (a stop spends the waits at once and
/// overshoots any bound: run again, see `common::stops`).
fn a_second_append_into_a_full_log_waits_at_most_its_limit(combining: bool) {
    const LIMIT: Duration = Duration::from_millis(2000);
    let Timed {
        value: (first, second),
        took,
        stopped,
    } = timed_unstopped(|| {
        let pod = pod(small_config());
        let options = HostOptions::new()
            .wait_limit(LIMIT)
            .flat_combining(combining);
        let busy = Arc::new(Host::join(&pod, Join::As(0), options).unwrap());
        let _idle = Host::join(&pod, Join::As(1), HostOptions::new().pump_interval(None)).unwrap();
        fill_the_log(&busy);
        let first = {
            let busy = Arc::clone(&busy);
            std::thread::spawn(move || busy.create(b"first", b"v"))
        };
        std::thread::sleep(LIMIT / 2);
        let started = Instant::now();
        let second = busy.create(b"second", b"v");
        let ended = Instant::now();
        ((first.join().unwrap(), second), started, ended)
    });
    // Stopped in every attempt, the second's wait may have been spent while its request
    // was still queued behind the first's batch: withdrawn unserved, within its limit too,
    // and answered `LogFull` all the same.
    // Its answer says how long it waited from its call, not how long its own batch did
    // (half a limit: "waited 1000 ms" for a call of 2 s).
    assert!(
        matches!(second, Err(Error::LogFull { waited_ms, .. })
            if u128::from(waited_ms) >= LIMIT.as_millis() * 9 / 10),
        "the second: {second:?}"
    );
    assert!(matches!(first, Err(Error::LogFull { .. })), "the first");
    assert!(
        took < LIMIT + LIMIT / 4 + stopped,
        "the second append waited {took:?} ({stopped:?} of it stopped) with a limit of \
         {LIMIT:?}"
    );
}

/// Creates `key` on `host` on a thread of its own, held at the first `point` it reaches
/// (inside its append, as the host's combiner) until the returned sender says go (or for
/// 30 s); returns once it is held.
#[cfg(feature = "chaos")]
fn create_held_at(
    host: &Arc<Host>,
    key: &'static [u8],
    point: megalon_core::chaos::Point,
) -> (
    std::thread::JoinHandle<megalon_core::Result<()>>,
    std::sync::mpsc::Sender<()>,
) {
    use std::sync::mpsc::channel;
    let (inside, wait_inside) = channel();
    let (go, wait_go) = channel::<()>();
    let host = Arc::clone(host);
    let held = std::thread::spawn(move || {
        let mut held = false;
        let hook = move |at| {
            if at == point && !held {
                held = true;
                inside.send(()).unwrap();
                let _ = wait_go.recv_timeout(Duration::from_secs(30));
            }
        };
        megalon_core::chaos::with_hook(hook, || host.create(key, b"v"))
    });
    wait_inside
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the create never reached {point:?}"));
    (held, go)
}

/// A request withdrawn from the combining queue because the combiner held it past its
/// limit, while the log is full: it answers `LogFull` (naming the host that holds the
/// head), as its own append would have, not that no combiner served it. The combiner is
/// held inside its wait for room by a hook until the queued request has answered.
#[cfg(feature = "chaos")]
#[test]
fn a_request_withdrawn_behind_a_combiner_waiting_for_room_answers_log_full() {
    use megalon_core::chaos::Point;
    const LIMIT: Duration = Duration::from_millis(300);
    let pod = pod(small_config());
    let options = HostOptions::new().wait_limit(LIMIT).flat_combining(true);
    let busy = Arc::new(Host::join(&pod, Join::As(0), options).unwrap());
    let _idle = Host::join(&pod, Join::As(1), HostOptions::new().pump_interval(None)).unwrap();
    fill_the_log(&busy);
    let (combiner, go) = create_held_at(&busy, b"first", Point::HeadLookBetweenRows);
    let withdrawn = busy.create(b"second", b"v");
    go.send(()).unwrap();
    let first = combiner.join().unwrap();
    assert!(
        matches!(
            withdrawn,
            Err(Error::LogFull {
                lagging_host: Some(1),
                ..
            })
        ),
        "the withdrawn request: {withdrawn:?}"
    );
    assert!(
        matches!(first, Err(Error::LogFull { .. })),
        "the combiner's: {first:?}"
    );
    assert_eq!(
        busy.lookup(b"second").unwrap(),
        None,
        "nothing of it reached the log"
    );
}

/// Host 0 of `pod`, without pump, combining, waiting at most `limit`.
#[cfg(feature = "chaos")]
fn combining_unpumped(pod: &Arc<Pod>, limit: Duration) -> Arc<Host> {
    let options = HostOptions::new()
        .pump_interval(None)
        .wait_limit(limit)
        .flat_combining(true);
    Arc::new(Host::join(pod, Join::As(0), options).unwrap())
}

/// A pod of [`small_config`] whose log has `free` entries left: host 0 (combining, no
/// pump, waiting at most `limit`) appended the rest, and host 1 (no pump) holds the
/// head. Host 0 holds claimed slots, so that a create is one entry. Returns both and the
/// position host 1 is at.
#[cfg(feature = "chaos")]
fn with_room_for(free: u64, limit: Duration) -> (Arc<Host>, Host, u64) {
    let pod = pod(small_config());
    let quiet = HostOptions::new().pump_interval(None);
    let busy = combining_unpumped(&pod, limit);
    let idle = Host::join(&pod, Join::As(1), quiet).unwrap();
    busy.create(b"warm", b"v").unwrap();
    idle.replay().unwrap();
    let start = idle.inspect().applied_position();
    for i in 0.. {
        let (_, _, tail) = busy.inspect().log_cursors();
        if tail == start + CAPACITY - free {
            break;
        }
        busy.create(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    (busy, idle, start)
}
/// A request withdrawn from the combining queue hears `LogFull` only if the log had no
/// room at some instant of the look: here the combiner is held with room in the log, and
/// while the withdrawn request's look at the rows has read host 1's `ltail` at the head,
/// host 1 replays and host 2 appends the entry that brings the tail to the head's lap
/// (no room by the stale look, room for seven more by the rows as they are). A look at
/// the tail after the head's took the stale head against a fresh tail and answered
/// `LogFull` naming host 1, which had applied past that position before the log reached it.
#[cfg(feature = "chaos")]
#[test]
fn a_request_withdrawn_while_the_log_has_room_does_not_answer_log_full() {
    use megalon_core::chaos::{self, Point};
    const LIMIT: Duration = Duration::from_millis(300);
    let pod = pod(small_config());
    let quiet = HostOptions::new().pump_interval(None);
    let busy = combining_unpumped(&pod, LIMIT);
    let idle = Arc::new(Host::join(&pod, Join::As(1), quiet.clone()).unwrap());
    let other = Arc::new(Host::join(&pod, Join::As(2), quiet.flat_combining(false)).unwrap());
    // Slots claimed, so that a create is one entry; every replica at the tail.
    busy.create(b"b", b"v").unwrap();
    other.create(b"o", b"v").unwrap();
    for host in [&busy, &idle, &other] {
        host.replay().unwrap();
    }
    let (_, _, start) = busy.inspect().log_cursors();
    // Host 2 appends until one entry is free, the head moved to `start` (hosts 0 and 1
    // there), host 0 then at the tail.
    for i in 0.. {
        let (_, _, tail) = busy.inspect().log_cursors();
        if tail == start + CAPACITY - 1 {
            break;
        }
        other.create(format!("o{i}").as_bytes(), b"v").unwrap();
    }
    busy.replay().unwrap();
    assert_eq!(busy.inspect().log_cursors().0, start, "the head at host 1");
    let (combiner, go) = create_held_at(&busy, b"first", Point::ReserveBeforeCas);
    // The second look between rows of the withdrawn request's look at the head: rows 0
    // and 1 read.
    let mut between = 0;
    let (i2, o2) = (Arc::clone(&idle), Arc::clone(&other));
    let hook = move |point: Point| {
        if point == Point::HeadLookBetweenRows {
            between += 1;
            if between == 2 {
                i2.replay().unwrap();
                o2.create(b"last", b"v").unwrap();
            }
        }
    };
    let withdrawn = chaos::with_hook(hook, || busy.create(b"second", b"v"));
    go.send(()).unwrap();
    let _ = combiner.join().unwrap();
    let (_, _, tail) = busy.inspect().log_cursors();
    assert_eq!(
        tail,
        start + CAPACITY + 1,
        "host 2's entry and the combiner's"
    );
    assert!(
        matches!(withdrawn, Err(Error::CombinerStalled { .. })),
        "the withdrawn request, with room in the log: {withdrawn:?}"
    );
}

/// A batch the log has room for only part of appends that part once its wait is over:
/// with the log three entries short of full (another host holds its head) and five
/// creates queued behind a combiner held inside its append, the five's batch makes three
/// and refuses two with `LogFull`. (It waited for room for all five, then refused its
/// requests one at a time, each when its limit ran out: all five, each of which alone
/// would have fit.)
#[cfg(feature = "chaos")]
#[test]
fn a_batch_the_log_has_room_for_in_part_appends_that_part() {
    use megalon_core::chaos::Point;
    const LIMIT: Duration = Duration::from_millis(500);
    const QUEUED: usize = 5;
    let (busy, _idle, start) = with_room_for(4, LIMIT);
    // The combiner's own entry takes one of the four.
    let (combiner, go) = create_held_at(&busy, b"first", Point::AppendAfterReserve);
    let queued: Vec<_> = (0..QUEUED)
        .map(|i| {
            let busy = Arc::clone(&busy);
            std::thread::spawn(move || busy.create(format!("q{i}").as_bytes(), b"v"))
        })
        .collect();
    // Queued behind it (a thread not queued yet joins a later batch: three made all
    // the same, each batch taking what fits).
    std::thread::sleep(LIMIT / 5);
    go.send(()).unwrap();
    combiner.join().unwrap().unwrap();
    let answers: Vec<_> = queued.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        answers.iter().filter(|answer| answer.is_ok()).count(),
        3,
        "{answers:?}"
    );
    for (i, answer) in answers.iter().enumerate() {
        let made = busy.lookup(format!("q{i}").as_bytes()).unwrap().is_some();
        match answer {
            Ok(()) => assert!(made, "q{i} answered made"),
            Err(Error::LogFull {
                lagging_host: Some(1),
                ..
            }) => assert!(!made, "q{i} answered refused"),
            Err(error) => panic!("q{i}: {error}"),
        }
    }
    assert_eq!(busy.inspect().log_cursors().2, start + CAPACITY, "full");
}

/// A request of a batch that the log had room for only part of answers once its part is
/// appended, not once the rest of the batch has waited out its own limits: with one entry
/// free (another host holds the head) and two creates queued behind a held combiner, the
/// second half a limit after the first, the batch appends the first when the first's
/// limit runs out, and the second waits on for room that never comes. The first must
/// answer within its own limit. (It answered with the second, refused half a limit
/// later: a create made at 1 s of its 1 s limit answered after 1.5 s.)
#[cfg(feature = "chaos")]
#[test]
fn a_request_appended_in_part_of_a_batch_answers_within_its_limit() {
    use megalon_core::chaos::Point;
    const LIMIT: Duration = Duration::from_millis(1000);
    let Timed {
        value: (early, late),
        took,
        stopped,
    } = timed_unstopped(|| {
        let (busy, _idle, _) = with_room_for(2, LIMIT);
        // The combiner's own entry takes one of the two.
        let (combiner, go) = create_held_at(&busy, b"first", Point::AppendAfterReserve);
        let spawn = |key: &'static [u8]| {
            let busy = Arc::clone(&busy);
            std::thread::spawn(move || {
                let started = Instant::now();
                let answer = busy.create(key, b"v");
                (answer, started, Instant::now())
            })
        };
        let early = spawn(b"early");
        std::thread::sleep(LIMIT / 2);
        let late = spawn(b"late");
        // Both queued, each well within its limit: one batch, with 0.3 of a limit left
        // of the early one's and 0.8 of the late one's.
        std::thread::sleep(LIMIT / 5);
        go.send(()).unwrap();
        combiner.join().unwrap().unwrap();
        let (early, from, to) = early.join().unwrap();
        let (late, ..) = late.join().unwrap();
        ((early, late), from, to)
    });
    assert!(early.is_ok(), "the early create: {early:?}");
    assert!(
        matches!(late, Err(Error::LogFull { .. })),
        "the late create: {late:?}"
    );
    assert!(
        took < LIMIT + LIMIT / 4 + stopped,
        "the early create, appended, answered after {took:?} ({stopped:?} of it stopped) \
         with a limit of {LIMIT:?}"
    );
}

/// Hosts 0, 1 and 2 (a, b and d) of `pod`, without pumps or flat combining, each waiting
/// at most `wait`, but b `b_wait`. Each holds claimed slots, so that a create is one
/// entry. Returns them and the position every replica is at.
fn three_unpumped(
    pod: &Arc<Pod>,
    wait: Duration,
    b_wait: Duration,
) -> (&'static Host, &'static Host, Host, u64) {
    let options = |limit| {
        HostOptions::new()
            .pump_interval(None)
            .flat_combining(false)
            .wait_limit(limit)
    };
    let a: &'static Host = Box::leak(Box::new(
        Host::join(pod, Join::As(0), options(wait)).unwrap(),
    ));
    let b: &'static Host = Box::leak(Box::new(
        Host::join(pod, Join::As(1), options(b_wait)).unwrap(),
    ));
    let d = Host::join(pod, Join::As(2), options(wait)).unwrap();
    for (i, host) in [b, a, &d].into_iter().enumerate() {
        host.create(format!("warm-{i}").as_bytes(), b"v").unwrap();
    }
    for host in [a, b, &d] {
        host.replay().unwrap();
    }
    let s = a.inspect().applied_position();
    (a, b, d, s)
}

/// From [`three_unpumped`]'s `s`: b appends `CAPACITY - 2` entries, d reserves the next
/// position (the hole: d alive, slow) and a appends after it on a thread of its own.
/// Returns once a's replay has applied everything below the hole, which it waits for:
/// the hole and a's append.
fn a_waiting_for_ds_hole(
    (a, b, d, s): (&'static Host, &Host, &Host, u64),
    wait: Duration,
) -> (u64, std::thread::JoinHandle<megalon_core::Result<()>>) {
    for i in 0..CAPACITY - 2 {
        b.create(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    d.replay().unwrap();
    let hole = d.inspect().reserve_unpublished(1).unwrap();
    assert_eq!(hole, s + CAPACITY - 2, "one entry a create");
    let behind = std::thread::spawn(move || a.create(b"z", b"v"));
    let deadline = std::time::Instant::now() + wait / 2;
    while a.inspect().applied_position() < hole {
        assert!(std::time::Instant::now() < deadline, "a's replay stalled");
        std::thread::sleep(Duration::from_millis(1));
    }
    (hole, behind)
}

/// Three hosts without pumps on a log of 8: every replica at `s`, b appends six entries,
/// d reserves the next position (alive, slow) and a appends one after it. a's replay
/// applies the six and waits for d's hole. What it applied is no longer its own: its
/// `ltail` covers it while it waits, so the log has room for b (b's reservation waited
/// the whole of its limit and answered `LogFull`, naming a at `s`, while a's replay
/// waited: its `ltail` moved only when the replay ended).
#[test]
fn a_replay_waiting_for_a_hole_frees_the_log_it_applied() {
    let wait = Duration::from_secs(3);
    let pod = pod(small_config());
    let (a, b, d, s) = three_unpumped(&pod, wait, wait / 6);
    let (_, behind) = a_waiting_for_ds_hole((a, b, &d, s), wait);
    let started = std::time::Instant::now();
    let reserved = b.inspect().reserve_unpublished(1);
    let took = started.elapsed();
    assert!(
        reserved.is_ok(),
        "b's reservation, with a's replay past its entries: {reserved:?} after {took:?}"
    );
    assert!(
        matches!(behind.join().unwrap(), Err(Error::ReplayStalled { .. })),
        "a's create waits for d's hole"
    );
    std::mem::forget(d);
}

/// Three hosts without pumps on a log of 8, every replica at `s`. a appends six entries
/// and b reserves the next position (alive, slow); a thread of a appends after it, and its
/// replay waits for b's hole, holding a's replay lock. The log is full: d has not replayed
/// since `s`. A second thread of a appends and waits for room; d replays, and the room is
/// there. The second thread takes it at once (its wait for room replayed on the lock the
/// first held, and saw no room until the first gave up on the hole: 2.8 s later).
#[test]
fn an_append_waiting_for_room_sees_it_while_a_sibling_waits_for_a_hole() {
    let wait = Duration::from_secs(3);
    let pod = pod(small_config());
    let (a, b, d, s) = three_unpumped(&pod, wait, wait);
    for i in 0..CAPACITY - 2 {
        a.create(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    let hole = b.inspect().reserve_unpublished(1).unwrap();
    assert_eq!(hole, s + CAPACITY - 2, "one entry a create");
    let first = std::thread::spawn(move || a.create(b"first", b"v"));
    let deadline = std::time::Instant::now() + wait / 4;
    while a.inspect().log_cursors().2 < hole + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first never appended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    b.replay().unwrap();
    let second = std::thread::spawn(move || a.create(b"second", b"v"));
    std::thread::sleep(wait / 10);
    assert_eq!(a.inspect().log_cursors().2, hole + 2, "the log is full");
    let room = std::time::Instant::now();
    d.replay().unwrap();
    while a.inspect().log_cursors().2 < hole + 3 {
        assert!(
            room.elapsed() < wait,
            "the second never took the room d's replay made"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = room.elapsed();
    assert!(
        took < wait / 5,
        "the second took the room {took:?} after d's replay made it"
    );
    for thread in [first, second] {
        let created = thread.join().unwrap();
        assert!(
            matches!(created, Err(Error::ReplayStalled { .. })),
            "each waits for b's hole: {created:?}"
        );
    }
    std::mem::forget(d);
}

/// a_replay_waiting_for_a_hole_frees_the_log_it_applied, on: with a's replay past its
/// entries and waiting for d's hole, b appends a lap over them; d dies and a's wait
/// fills its hole. a's replay goes on from the hole, never back over what the ring
/// wrote over: its create is confirmed, and its replica is b's.
#[test]
fn a_replay_that_freed_the_log_it_applied_goes_on_past_the_lap_written_over_it() {
    let wait = Duration::from_secs(3);
    let pod = pod(small_config().lease_ms(100));
    let (a, b, d, s) = three_unpumped(&pod, wait, wait);
    let (hole, behind) = a_waiting_for_ds_hole((a, b, &d, s), wait);
    let deadline = std::time::Instant::now() + wait / 2;
    b.replay().unwrap();
    // A lap over what a applied (z's is the one entry between), each create waiting
    // for d's hole once it is published.
    let lap: Vec<_> = (0..CAPACITY - 2)
        .map(|i| std::thread::spawn(move || b.create(format!("l{i}").as_bytes(), b"v")))
        .collect();
    while b.inspect().log_cursors().2 < hole + CAPACITY {
        assert!(
            std::time::Instant::now() < deadline,
            "b's lap never appended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // d dies: the waits fill its hole.
    megalon_core::inspect::crash(d);
    let created = behind.join().unwrap();
    assert!(matches!(created, Ok(())), "a's create: {created:?}");
    for thread in lap {
        let created = thread.join().unwrap();
        assert!(matches!(created, Ok(())), "b's create: {created:?}");
    }
    let (at_a, at_b) = (a.replay().unwrap(), b.replay().unwrap());
    assert_eq!(at_a, hole + CAPACITY);
    assert_eq!(at_a, at_b);
    assert_eq!(
        a.inspect().replica_snapshot(),
        b.inspect().replica_snapshot()
    );
}

#[test]
fn an_idle_host_with_a_pump_never_blocks_the_others() {
    let pod = pod(small_config());
    let busy = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
    let _idle = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
    for i in 0..100u32 {
        busy.create(format!("k{i}").as_bytes(), b"v").unwrap();
        busy.delete(format!("k{i}").as_bytes()).unwrap();
    }
}

#[test]
fn no_host_can_join_once_the_log_has_recycled_entries_in_a_pod_without_a_join_area() {
    // With a join area a live host streams its index to a late joiner (`late_join.rs`).
    let pod = pod(small_config().join_area_bytes(0));
    let host = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
    for i in 0..12u32 {
        host.create(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    assert!(host.inspect().log_cursors().0 > 0, "head moved");
    assert!(matches!(
        Host::join(&pod, Join::AnyFree, HostOptions::new()),
        Err(Error::LogRecycled { .. })
    ));
    assert!(matches!(
        host.inspect().read_log(0, 1),
        Err(Error::LogRecycled { .. })
    ));
}

#[test]
fn racing_creates_of_one_key_leave_the_losers_slot_with_its_owner() {
    let pod = pod(small_config());
    let a = Host::join(&pod, Join::AnyFree, HostOptions::new().pump_interval(None)).unwrap();
    let b = Host::join(&pod, Join::AnyFree, HostOptions::new().pump_interval(None)).unwrap();
    a.create(b"warm-a", b"").unwrap(); // both hosts hold claimed slots
    b.create(b"warm-b", b"").unwrap();
    let (a_free, b_free) = (a.inspect().free_slots(), b.inspect().free_slots());
    let results: Vec<_> = std::thread::scope(|s| {
        let ta = s.spawn(|| a.create(b"same", b"from a"));
        let tb = s.spawn(|| b.create(b"same", b"from b"));
        vec![ta.join().unwrap(), tb.join().unwrap()]
    });
    let winners = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1, "{results:?}");
    a.replay().unwrap();
    b.replay().unwrap();
    // The winner spent one slot; the loser got its slot back.
    assert_eq!(
        a.inspect().free_slots() + b.inspect().free_slots(),
        a_free + b_free - 1
    );
    let loser = if results[0].is_ok() { &b } else { &a };
    let loser_free = if results[0].is_ok() { b_free } else { a_free };
    assert_eq!(loser.inspect().free_slots(), loser_free);
}

#[test]
fn slots_move_between_hosts_only_through_the_log() {
    // 2 slots in all: host 0 takes them all, then host 1 must be granted one.
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(64 * 64 + 2 * 4096)
        .slot_size_bytes(4096)
        .max_key_bytes(16)
        .log_capacity_entries(64)
        .max_hosts(2)
        .join_area_bytes(0);
    let pod = pod(config);
    assert_eq!(pod.layout().slot_count, 2);
    let a = Host::join(&pod, Join::As(0), HostOptions::new()).unwrap();
    let b = Host::join(
        &pod,
        Join::As(1),
        HostOptions::new().wait_limit(Duration::from_secs(5)),
    )
    .unwrap();
    a.create(b"a1", b"x").unwrap();
    a.create(b"a2", b"x").unwrap();
    a.delete(b"a1").unwrap();
    assert_eq!(a.inspect().free_slots(), 1);
    b.create(b"b1", b"y").unwrap();
    assert_eq!(a.inspect().free_slots(), 0, "a granted its free slot to b");
    let events = b.inspect().read_log(0, 100).unwrap();
    assert!(events
        .iter()
        .any(|e| matches!(e.event.event(), Event::NeedSlots { .. }) && e.host == 1));
    assert!(events
        .iter()
        .any(|e| matches!(e.event.event(), Event::GrantSlots { to: 1, .. }) && e.host == 0));
}

/// A request queued just before a batch that waited out its limit gave up is
/// combined with one queued long before it; the combiner gives the batch what is left
/// of the earliest request's limit (nothing), and the fresh request is refused `LogFull`
/// after a small part of its own limit, though the log made room well within it.
#[test]
fn a_fresh_append_combined_with_one_at_its_deadline_still_waits_its_own_limit() {
    const LIMIT: Duration = Duration::from_millis(2000);
    let pod = pod(small_config());
    let busy =
        Arc::new(Host::join(&pod, Join::As(0), HostOptions::new().wait_limit(LIMIT)).unwrap());
    let idle = Host::join(&pod, Join::As(1), HostOptions::new().pump_interval(None)).unwrap();
    fill_the_log(&busy);
    let t0 = std::time::Instant::now();
    let spawn = |key: &'static [u8]| {
        let busy = Arc::clone(&busy);
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            (busy.create(key, b"v"), started.elapsed())
        })
    };
    // The combiner of the first waits out its limit; the second queues behind it.
    let first = spawn(b"first");
    std::thread::sleep(LIMIT / 10);
    let second = spawn(b"second");
    // The third queues just before the first's batch gives up. (Saturating: a process
    // stopped past that point goes on at once, where the subtraction panicked.)
    std::thread::sleep((LIMIT * 9 / 10).saturating_sub(t0.elapsed()));
    let third = spawn(b"third");
    // The laggard applies what it had not a quarter of a limit after the first gave up:
    // room, well within the third's limit.
    std::thread::sleep((LIMIT * 5 / 4).saturating_sub(t0.elapsed()));
    idle.replay().unwrap();
    let (first, _) = first.join().unwrap();
    let (second, _) = second.join().unwrap();
    let (third, took) = third.join().unwrap();
    eprintln!("first {first:?}\nsecond {second:?}\nthird {third:?} after {took:?}");
    assert!(
        third.is_ok(),
        "the third append was refused after {took:?} of its {LIMIT:?} limit, the log having \
         made room at {:?} of it: {third:?}",
        LIMIT * 5 / 4 - LIMIT * 9 / 10
    );
}

/// Without flat combining, an append waits for the host's append lock, which
/// another thread's append holds while it waits for room; its own wait for room then
/// began when it got the lock, a whole limit more.
#[test]
fn without_combining_an_append_behind_one_waiting_for_room_waits_at_most_its_limit() {
    a_second_append_into_a_full_log_waits_at_most_its_limit(false);
}
