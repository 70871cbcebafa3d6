//! The join's tests, across hosts of one process: servers and joiners that die, pause
//! past their lease or wait for room in the log, and joins while the log first recycles.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{mailbox, server_word};
use crate::host_table;
use crate::inspect::crash;
use crate::{Backing, Error, Host, HostOptions, Join, Pod, PodConfig};

const SLOT: usize = 256;

fn value(i: u8) -> Vec<u8> {
    (0..SLOT).map(|b| i.wrapping_add(b as u8)).collect()
}

/// A server killed mid-stream leaves its word in `server`. Once a live host has
/// recovered it, its id may be claimed again, by a new life, before a joiner looks:
/// the joiner must still see that the server is gone, and be served by another host.
/// (With `server` naming only the id, the joiner saw the id alive and waited out its
/// wait limit, and so did every joiner after it while the new life lived.)
#[test]
fn a_server_that_died_mid_stream_is_gone_though_its_id_lives_again() {
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(SLOT as u64)
        .max_key_bytes(48)
        .log_capacity_entries(256)
        .max_hosts(4)
        .lease_ms(100)
        .join_area_bytes(128);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let pumped = || HostOptions::new().pump_interval(Some(Duration::from_millis(1)));
    let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let server = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let (id, life) = (server.shared.id, server.shared.life);
    crash(server);
    // `a` recovers the dead host within its lease; then the id is claimed again.
    let deadline = Instant::now() + Duration::from_secs(5);
    let again = loop {
        match Host::join(&pod, Join::As(id), pumped()) {
            Ok(host) => break host,
            Err(Error::HostTaken { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(error) => panic!("rejoining as {id}: {error}"),
        }
    };
    assert!(again.shared.life > life);
    // The log recycles: a host that joins now is a late joiner.
    for i in 0..200 {
        a.create(&[b'a', i], &value(i)).unwrap();
        a.delete(&[b'a', i]).unwrap();
        a.create(&[b'a', i], &value(i)).unwrap();
    }
    assert!(a.inspect().log_cursors().0 > 0, "the log recycled");
    // What the dead server left behind: its word, as it took the mailbox.
    mailbox(&pod)
        .server
        .store(server_word(id, life), Ordering::SeqCst);
    let started = Instant::now();
    let late = Host::join(
        &pod,
        Join::AnyFree,
        pumped().wait_limit(Duration::from_secs(2)),
    )
    .expect("a late join served by a live host");
    let mut buf = vec![0u8; SLOT];
    for i in 0..200 {
        late.read(&[b'a', i], &mut buf).unwrap();
        assert_eq!(buf, value(i), "object {i}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "served in {:?}",
        started.elapsed()
    );
}

/// A server on another machine waiting for a slow joiner's acknowledgement keeps
/// beating: it is not declared dead while alive (nor does it go on streaming after
/// being declared dead, which would mix its chunks with another server's).
#[test]
fn a_server_waiting_for_a_slow_joiner_stays_alive() {
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(SLOT as u64)
        .max_hosts(4)
        // Not shorter: the lib tests run side by side on a machine of two cores, and
        // a server thread not run for a lease is rightly taken for dead.
        .lease_ms(300)
        .join_area_bytes(128);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let pumped = || {
        HostOptions::new()
            .pump_interval(Some(Duration::from_millis(1)))
            .wait_limit(Duration::from_secs(3))
    };
    let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let b = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    for i in 0..20 {
        a.create(&[b'k', i], &value(i)).unwrap();
    }
    // Both judged by their leases, as hosts of another machine are.
    a.inspect().pretend_elsewhere();
    b.inspect().pretend_elsewhere();
    // A slow joiner, by hand: it asks, then takes its time over the first chunk.
    let joiner = (0..4)
        .find(|&host| host_table::holder(&pod, host).is_none())
        .unwrap();
    let life = host_table::claim_and_count(&pod, joiner).unwrap();
    let log = crate::log::Log::new(&pod);
    log.hold_head(&pod, joiner, life, true).unwrap();
    let mailbox = mailbox(&pod);
    mailbox
        .request
        .store(host_table::session(joiner, life), Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(2);
    while mailbox.chunk.load(Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline, "nobody serves");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (server, server_life) = host_table::session_of(mailbox.server.load(Ordering::SeqCst));
    // Six leases before the first acknowledgement.
    std::thread::sleep(Duration::from_millis(1800));
    let row = host_table::holder(&pod, server);
    mailbox.acked.store(1, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(3);
    while mailbox.chunk.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the server stopped streaming");
        std::thread::sleep(Duration::from_millis(1));
    }
    mailbox.request.store(0, Ordering::SeqCst);
    host_table::release(&pod, joiner, life);
    assert_eq!(
        row.map(|(_, life)| life),
        Some(server_life),
        "the server was declared dead while it waited"
    );
    let recovered = a.inspect().stats().hosts_recovered + b.inspect().stats().hosts_recovered;
    assert_eq!(recovered, 0);
}

/// A joiner that takes every chunk of its index, then is slow to let go of the mailbox
/// (past its server's wait), was sent the index whole: its server counts the join served
/// (it did not), and answers that the joiner is gone.
#[test]
fn a_join_whose_joiner_took_every_chunk_counts_though_it_lets_go_late() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let s = Host::join(&pod, Join::AnyFree, unpumped(Duration::from_millis(300))).unwrap();
    for i in 0..20 {
        s.create(&[b'k', i], &value(i)).unwrap();
    }
    let (joiner, joiner_life, session) = ask_by_hand(&pod);
    let mb = mailbox(&pod);
    let shared = Arc::clone(&s.shared);
    let server = std::thread::spawn(move || shared.serve_join());
    wait_for("the server is ready", || {
        mb.ready.load(Ordering::SeqCst) == session
    });
    let chunks = mb
        .total
        .load(Ordering::SeqCst)
        .div_ceil(pod.layout().config.join_area_bytes);
    assert!(chunks > 1, "{chunks} chunks");
    for k in 0..chunks {
        wait_for("the next chunk", || mb.chunk.load(Ordering::SeqCst) > k);
        mb.acked.store(k + 1, Ordering::SeqCst);
    }
    // The joiner holds on to the mailbox past the server's wait.
    let answer = server.join().unwrap();
    mb.request.store(0, Ordering::SeqCst);
    host_table::release(&pod, joiner, joiner_life);
    assert!(
        matches!(answer, Err(Error::JoinerGone { .. })),
        "{answer:?}"
    );
    assert_eq!(s.inspect().stats().joins_served, 1);
}

// Found by an eighth review (2026-11-29), of joins under kills and pauses.

fn small_config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(SLOT as u64)
        .max_key_bytes(48)
        .log_capacity_entries(256)
        .max_hosts(6)
        .lease_ms(100)
        .join_area_bytes(128)
}

fn pumped() -> HostOptions {
    HostOptions::new()
        .pump_interval(Some(Duration::from_millis(1)))
        .wait_limit(Duration::from_secs(2))
}

/// A host without a pump (it replays and serves only when the test says so).
fn unpumped(wait_limit: Duration) -> HostOptions {
    HostOptions::new()
        .pump_interval(None)
        .wait_limit(wait_limit)
}

/// A joiner by hand: claims a free id, holds the log's head as `join_late` does, and
/// asks for an index. Its id, life and session.
fn ask_by_hand(pod: &Arc<Pod>) -> (crate::ids::HostId, u64, u64) {
    let joiner = (0..pod.config().max_hosts)
        .find(|&h| host_table::holder(pod, h).is_none())
        .unwrap();
    let life = host_table::claim_and_count(pod, joiner).unwrap();
    crate::log::Log::new(pod)
        .hold_head(pod, joiner, life, true)
        .unwrap();
    let session = host_table::session(joiner, life);
    mailbox(pod).request.store(session, Ordering::SeqCst);
    (joiner, life, session)
}

#[track_caller]
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Host z is paused past its lease: its recoverer condemns it and frees its row, and
/// the id's next life k joins, with no pump (it lags). z's process resumes, and its
/// pump replays on: it must not store its `ltail` over k's, or the head passes k's
/// position (it did: the head reached 454 with k at 2, and k's replay stalled for
/// good, or a debug build panicked, "a writer lapped a reader").
#[test]
fn a_host_declared_dead_whose_pump_runs_on_leaves_the_next_lifes_ltail_alone() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let z = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let (id, life) = (z.shared.id, z.shared.life);
    z.inspect().pretend_elsewhere();
    host_table::condemn(&pod, id, life);
    wait_for("a recovers z", || host_table::holder(&pod, id).is_none());
    let lagging = unpumped(Duration::from_secs(2));
    let k = Host::join(&pod, Join::As(id), lagging).unwrap();
    let k_applied = k.shared.replica.applied.load(Ordering::SeqCst);
    a_fills_the_log_behind(&pod, &a, k_applied);
    drop(z);
}

/// Server s1 streams to a joiner, is paused past its lease and recovered; the joiner
/// clears `server`, and s2 serves it. s1 resumes, finds itself dead, and must leave
/// the mailbox as it is (it stored 0 in `server` and `ready`: a third server took the
/// mailbox in the middle of s2's stream, and reset it).
#[test]
fn a_server_declared_dead_leaves_the_next_servers_mailbox_words() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let options = || unpumped(Duration::from_secs(3));
    let s1 = Host::join(&pod, Join::AnyFree, options()).unwrap();
    let s2 = Host::join(&pod, Join::AnyFree, options()).unwrap();
    for i in 0..20 {
        s1.create(&[b'k', i], &value(i)).unwrap();
    }
    s2.replay().unwrap();
    let (joiner, joiner_life, session) = ask_by_hand(&pod);
    let mb = mailbox(&pod);
    let shared = Arc::clone(&s1.shared);
    let first = std::thread::spawn(move || shared.serve_join());
    wait_for("s1 streams a chunk", || {
        mb.chunk.load(Ordering::SeqCst) >= 1
    });
    let w1 = mb.server.load(Ordering::SeqCst);
    assert_eq!(w1, server_word(s1.shared.id, s1.shared.life));
    // s1 paused past its lease and recovered; the joiner clears `server`, as `join_late`
    // does for a server that is gone.
    host_table::condemn(&pod, s1.shared.id, s1.shared.life);
    assert!(host_table::release_dead(
        &pod,
        s1.shared.id,
        std::process::id(),
        s1.shared.life
    ));
    assert!(host_table::session_gone(&pod, w1));
    mb.ready.store(0, Ordering::SeqCst);
    mb.server
        .compare_exchange(w1, 0, Ordering::SeqCst, Ordering::SeqCst)
        .unwrap();
    let shared = Arc::clone(&s2.shared);
    let second = std::thread::spawn(move || shared.serve_join());
    wait_for("s2 streams a chunk", || {
        mb.ready.load(Ordering::SeqCst) == session && mb.chunk.load(Ordering::SeqCst) >= 1
    });
    let w2 = mb.server.load(Ordering::SeqCst);
    assert_eq!(w2, server_word(s2.shared.id, s2.shared.life));
    // The joiner acks s2's first chunk: s1 resumes too, and finds itself dead.
    mb.acked.store(1, Ordering::SeqCst);
    let s1_answered = first.join().unwrap();
    assert!(
        matches!(s1_answered, Err(Error::HostDeclaredDead { .. })),
        "{s1_answered:?}"
    );
    let (server, ready) = (
        mb.server.load(Ordering::SeqCst),
        mb.ready.load(Ordering::SeqCst),
    );
    mb.request.store(0, Ordering::SeqCst);
    let _ = second.join();
    host_table::release(&pod, joiner, joiner_life);
    assert_eq!(
        (server, ready),
        (w2, session),
        "s2's words, as s2 left them"
    );
}

/// A joiner that found its server gone ends only its own session: resumed after a pause
/// past its lease, by when another joiner took the mailbox and another server stored
/// `ready` and `server` for it, it leaves those words as they are (a plain store of 0 to
/// `ready` made the new joiner wait out its limit for a snapshot being sent to it).
#[test]
fn a_joiner_ending_its_gone_session_leaves_the_next_sessions_words() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let mb = mailbox(&pod);
    let (old, new) = (host_table::session(3, 1), host_table::session(4, 1));
    let (old_server, new_server) = (server_word(1, 1), server_word(2, 1));
    // `ready` and `server` after the old session's end, from `ready` and `server`.
    let ended_from = |ready, server| {
        mb.ready.store(ready, Ordering::SeqCst);
        mb.server.store(server, Ordering::SeqCst);
        mb.end_gone_session(old, old_server);
        (
            mb.ready.load(Ordering::SeqCst),
            mb.server.load(Ordering::SeqCst),
        )
    };
    // Another session's, stored while this joiner was paused: left.
    assert_eq!(ended_from(new, new_server), (new, new_server));
    // Its own: cleared.
    assert_eq!(ended_from(old, old_server), (0, 0));
}

/// A late joiner killed while it waited in the mailbox, and recovered: its session
/// stays in `request` until the next late join. A pump must not serve it (every
/// pump took the mailbox every round and encoded its whole index under its replay
/// lock), and clears it.
#[test]
fn a_dead_joiners_request_is_cleared_not_served() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    let mb = mailbox(&pod);
    let dead = host_table::session(4, 1);
    assert!(host_table::session_gone(&pod, dead));
    mb.request.store(dead, Ordering::SeqCst);
    mb.chunk.store(99, Ordering::SeqCst);
    wait_for("a's pump clears the request", || {
        mb.request.load(Ordering::SeqCst) == 0
    });
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(mb.chunk.load(Ordering::SeqCst), 99, "nobody served it");
    drop(a);
}

/// A joiner killed after it claimed its row (the log not recycled yet), before its
/// join was counted: its row holds the head at 0 only until it is recovered, and the
/// log goes on. (With a count of joiners in the
/// registration word, layout version 7, a joiner killed between its registration and
/// its end kept the head at 0 for good: the 128th create of this test answered
/// `LogFull`, and every append after it.)
#[test]
fn a_joiner_killed_inside_its_claim_holds_the_head_only_until_its_recovery() {
    let config = small_config().join_area_bytes(0);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
    // Another process's join, killed after its claim, before its count: the row (a
    // fresh one: its count and `ltail` 0) holds the head at 0.
    host_table::try_claim(&pod, 4).unwrap();
    for i in 0..400u32 {
        let key = i.to_le_bytes();
        let done = a.create(&key, &value(1)).and_then(|()| a.delete(&key));
        assert!(done.is_ok(), "operation {i}: {done:?}");
    }
    assert!(crate::log::Log::head(&pod) > 0);
    // The pump's recovery frees the row (the appends needed only its `ltail`
    // released, which a host waiting for room does at once).
    wait_for("the row recovered", || {
        host_table::holder(&pod, 4).is_none()
    });
}

/// A claimer paused past its lease between its claim and its notes of who holds the
/// row (its row recovered and freed meanwhile) resumes: its notes must change nothing,
/// whether the row is still free or the id's next life holds it. (A review found a
/// claimer resuming its count (then separate from the claim) after the next life
/// counted bumped the count past the new life's, whose `ltail` then no longer named
/// the row's life: the head passed it; and one resuming while the row was free joined
/// without it.)
#[test]
fn a_claimer_resuming_its_notes_after_its_recovery_changes_nothing() {
    use crate::log::Log;
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let quiet = || unpumped(Duration::from_millis(200));
    let a = Host::join(&pod, Join::As(0), quiet()).unwrap();
    // The claimer: its claim (life 1), then paused; recovered.
    let late = host_table::try_claim(&pod, 3).unwrap();
    host_table::condemn(&pod, 3, late);
    Log::release_ltail(&pod, 3, late);
    assert!(host_table::release_dead(&pod, 3, std::process::id(), late));
    // It resumes while the row is free: no notes, no row.
    assert!(!host_table::note_holder(
        &pod,
        3,
        late,
        host_table::own_start()
    ));
    assert_eq!(host_table::holder(&pod, 3), None);
    // The next life joins (its notes succeed at once: nothing of the claimer's is
    // left), and lags.
    let k = Host::join(&pod, Join::As(3), quiet()).unwrap();
    assert_eq!(k.shared.life, 2);
    let k_applied = k.shared.replica.applied.load(Ordering::SeqCst);
    // The claimer's notes again, now over the next life's row.
    assert!(!host_table::note_holder(
        &pod,
        3,
        late,
        host_table::own_start()
    ));
    assert!(k.shared.row_is_mine(), "k's row is still k's");
    assert_eq!(
        host_table::process_gone(&pod, 3, std::process::id(), 2),
        Some(false)
    );
    a_fills_the_log_behind(&pod, &a, k_applied);
}

/// `a` creates and deletes until the log is full: the head must stop at live host
/// k's applied position `k_applied` (k does not replay), and `a` hear `LogFull`.
fn a_fills_the_log_behind(pod: &Pod, a: &Host, k_applied: u64) {
    let mut refused = None;
    for i in 0..300u32 {
        let key = i.to_le_bytes();
        if let Err(e) = a.create(&key, &value(2)).and_then(|()| a.delete(&key)) {
            refused = Some(e);
            break;
        }
    }
    let head = crate::log::Log::head(pod);
    assert!(
        head <= k_applied,
        "the head {head} passed live host k's applied position {k_applied} (a: {refused:?})"
    );
    assert!(
        matches!(refused, Some(Error::LogFull { .. })),
        "k holds the head: {refused:?}"
    );
}

/// Two hosts of one process: a claim of one, paused before its notes and recovered,
/// must not free the row the other has joined with since (a row freed by pid alone
/// was the other's; a review's finding).
#[test]
fn a_failed_claim_leaves_a_row_another_host_of_the_process_holds_alone() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let quiet = || HostOptions::new().pump_interval(None);
    let late = host_table::try_claim(&pod, 3).unwrap();
    host_table::condemn(&pod, 3, late);
    assert!(host_table::release_dead(&pod, 3, std::process::id(), late));
    let b = Host::join(&pod, Join::As(3), quiet()).unwrap();
    // The paused claim resumes: its notes fail, it gives the row up.
    assert!(!host_table::note_holder(
        &pod,
        3,
        late,
        host_table::own_start()
    ));
    host_table::release(&pod, 3, late);
    assert!(b.shared.row_is_mine(), "b's row is still b's");
}

/// Hosts join, one after another, while another host's creates make the log recycle
/// for the first time: a joiner that found the head at 0 holds it there and replays
/// the log from the start, one that found it past 0 joins late. Every host
/// joined reads every object created before it joined. Every 100 creates the writer
/// waits for a join begun after them, so joins land on both sides of the recycle
/// whatever the schedule (unpaced, a loaded machine's joins were once slow enough
/// that every one came before it).
#[test]
fn hosts_joining_while_the_log_first_recycles_read_everything() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let a = Arc::new(Host::join(&pod, Join::AnyFree, pumped()).unwrap());
    let created = Arc::new(std::sync::atomic::AtomicU32::new(0));
    // The `created` a join began at, once it is done (the largest so far).
    let joined = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer = {
        let (a, created, joined) = (Arc::clone(&a), Arc::clone(&created), Arc::clone(&joined));
        std::thread::spawn(move || {
            for i in 0..600u32 {
                if i % 100 == 0 {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while joined.load(Ordering::SeqCst) < i {
                        assert!(Instant::now() < deadline, "no join after {i} creates");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                a.create(&i.to_le_bytes(), &value(i as u8)).unwrap();
                created.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    let mut buf = vec![0u8; SLOT];
    let mut joins = 0;
    while !writer.is_finished() {
        let before = created.load(Ordering::SeqCst);
        let host = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
        for i in 0..before {
            host.read(&i.to_le_bytes(), &mut buf).unwrap();
            assert_eq!(buf, value(i as u8), "host {} key {i}", host.id());
        }
        joins += 1;
        joined.fetch_max(before, Ordering::SeqCst);
    }
    writer.join().unwrap();
    let late = a.inspect().stats().joins_served;
    assert!(
        late > 0 && late < joins,
        "{joins} joins, {late} of them late"
    );
}

/// A joiner on another machine (only its lease tells whether it lives) waits for room
/// for its `HostJoined` while a live laggard holds the head, longer than the lease.
/// It must beat as it waits (it did not: its recoverer condemned it, and its join
/// answered `HostDeclaredDead`).
#[test]
fn a_joiner_waiting_for_room_in_the_log_beats() {
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let quick = pumped().wait_limit(Duration::from_millis(200));
    let a = Host::join(&pod, Join::As(0), quick).unwrap();
    let old = Host::join(&pod, Join::As(1), pumped()).unwrap();
    let id = old.id();
    let laggard =
        Arc::new(Host::join(&pod, Join::As(2), HostOptions::new().pump_interval(None)).unwrap());
    drop(old);
    for i in 0u32.. {
        match a.create(&i.to_le_bytes(), &value(3)) {
            Ok(()) => {}
            Err(Error::LogFull { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let helper = {
        let (pod, laggard) = (Arc::clone(&pod), Arc::clone(&laggard));
        std::thread::spawn(move || {
            // Once it has noted who holds the row (a note made later would undo the
            // pretence).
            wait_for("the new life noted", || {
                host_table::holder(&pod, id).is_some_and(|(_, life)| life == 2)
                    && host_table::process_gone(&pod, id, std::process::id(), 2).is_some()
            });
            // The joiner runs on another machine.
            host_table::pretend_elsewhere(&pod, id);
            // The laggard catches up later, within the joiner's wait limit.
            std::thread::sleep(Duration::from_millis(600));
            laggard.replay().unwrap();
        })
    };
    let joined = Host::join(
        &pod,
        Join::As(id),
        pumped().wait_limit(Duration::from_secs(3)),
    );
    helper.join().unwrap();
    assert!(joined.is_ok(), "a live joiner failed: {:?}", joined.err());
}

/// A joiner paused past its lease between its claim and its notes (its row names no
/// machine yet, so only the lease tells): a host waiting for room in the log takes
/// it for dead. When it resumes, it gives its row up; its next claim holds the head
/// for its own life. (Before layout version 9 the joiner stored its `ltail` before its
/// count, the recoverer's release undid it, and the joiner replayed from 0 with
/// nothing holding the head there: "a writer lapped a reader".)
#[test]
fn a_joiner_taken_for_dead_before_its_notes_gives_its_row_up() {
    use crate::log::Log;
    let config = small_config().join_area_bytes(0);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let a = Host::join(&pod, Join::As(0), HostOptions::new().pump_interval(None)).unwrap();
    a.create(b"first", &value(1)).unwrap();
    // `claim_id`: its claim (life 1), then paused before its notes and its hold: it
    // names no machine, so only its lease tells, and it holds nothing yet.
    let life = host_table::try_claim(&pod, 3).unwrap();
    assert_eq!(Log::ltail_of(&pod, 3, life), None, "holds nothing");
    // a's appender, waiting for room, looks at dead hosts (`unblock_log`): it
    // condemns the joiner.
    a.shared.unblock_log();
    std::thread::sleep(Duration::from_millis(300));
    a.shared.unblock_log();
    assert!(host_table::condemned(&pod, 3, life));
    // It resumes: its notes fail (its life condemned), and it leaves its row to the
    // recovery that has begun (a claimer that freed it would let the id's next life
    // claim it under that recovery's later steps).
    let noted = host_table::note_holder(&pod, 3, life, host_table::own_start());
    assert!(!noted);
    let gave_up = crate::host::give_up_row(&pod, 3, life);
    assert!(
        matches!(gave_up, Err(Error::HostDeclaredDead { host: 3, .. })),
        "{gave_up:?}"
    );
    assert!(
        host_table::holder(&pod, 3).is_some(),
        "left to its recovery"
    );
    // The recovery frees it.
    a.shared.watch_hosts();
    assert_eq!(host_table::holder(&pod, 3), None);
    // Had it held the head before it was condemned, its hold would have been released
    // (its recovery releases its life's `ltail`) and its own hold would fail.
    let again = host_table::claim_and_count(&pod, 3).unwrap();
    assert_eq!(again, 2);
    let held = Log::new(&pod).hold_head(&pod, 3, again, false);
    assert!(matches!(held, Ok(0)), "an early join: {held:?}");
    a.replay().unwrap();
    Log::new(&pod).advance_head(&pod, &crate::chaos::Chaos::none());
    assert_eq!(Log::head(&pod), 0, "held at the joiner's 0");
    // It dies before its join is done (its row freed here): the log goes on.
    host_table::release(&pod, 3, again);
    for i in 0..300u32 {
        a.create(&i.to_le_bytes(), &value(2)).unwrap();
        a.delete(&i.to_le_bytes()).unwrap();
    }
    let again = Host::join(&pod, Join::As(3), HostOptions::new().pump_interval(None));
    assert!(
        matches!(again, Err(Error::LogRecycled { .. })),
        "no join area: {:?}",
        again.err()
    );
}

/// When server s1, paused past its lease before its pin (its snapshot encoded at
/// p1), resumes: at once after its joiner found it gone, or only once the joiner has
/// joined through s2.
#[cfg(feature = "chaos")]
#[derive(Clone, Copy, PartialEq)]
enum Resumes {
    WhenItsJoinerLeftItsSession,
    WhenItsJoinerHasJoined,
}

/// s1 serves a late joiner, and is paused past its lease before its pin: recovered.
/// Its joiner finds it gone; s2, which has applied less (p2 < p1), serves it. s1
/// resumes, pins, stores its mailbox words, then finds itself dead. The joiner must
/// end with s2's index and replay on from p2: a review found it took s1's p1 with
/// s2's index and never applied p2..p1 (the first test fails so with the joiner
/// served again in the same life and its check of the pin left out). The review also
/// found s1's pin, landing between the join and the joiner's first replay, raised
/// its `ltail` past its replay for good; that window is gone (a life is served by one
/// server: the joiner of a dead server joins again as the next life, whose `ltail`
/// s1's pin cannot touch), and the second test, where s1 resumes once the join is
/// done, checks the end to end (it passes with the same-life retry too: the joiner's
/// `catch_up` has moved its `ltail` past p1 by then).
#[cfg(feature = "chaos")]
fn a_dead_servers_late_pin(resumes: Resumes) {
    use crate::chaos::{self, Point};
    use std::sync::atomic::AtomicBool;
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let options = || unpumped(Duration::from_secs(3));
    let s1 = Arc::new(Host::join(&pod, Join::As(0), options()).unwrap());
    let s2 = Arc::new(Host::join(&pod, Join::As(1), options()).unwrap());
    // The log recycles (a join is late), then s2 stops at p2 and s1 goes on to p1.
    for i in 0..300u32 {
        s1.create(&i.to_le_bytes(), &value(1)).unwrap();
        s1.delete(&i.to_le_bytes()).unwrap();
        s2.replay().unwrap();
    }
    for i in 0..10u8 {
        s1.create(&[b'k', i], &value(i)).unwrap();
    }
    let p2 = s2.replay().unwrap();
    s1.delete(&[b'k', 0]).unwrap();
    s1.create(&[b'k', 100], &value(100)).unwrap();
    let p1 = s1.replay().unwrap();
    assert!(p1 > p2 && crate::log::Log::head(&pod) > 0);
    let joiner = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || Host::join(&pod, Join::As(2), options()))
    };
    let mb = mailbox(&pod);
    wait_for("the joiner's request", || {
        mb.request.load(Ordering::SeqCst) != 0
    });
    let resume = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let first = {
        let (pod, s1, resume) = (Arc::clone(&pod), Arc::clone(&s1), Arc::clone(&resume));
        let paused = Arc::clone(&paused);
        std::thread::spawn(move || {
            let (id, life) = (s1.shared.id, s1.shared.life);
            let hook = move |point| {
                if point != Point::ServeBeforePin || paused.swap(true, Ordering::SeqCst) {
                    return;
                }
                // Taken for dead and recovered.
                host_table::condemn(&pod, id, life);
                crate::log::Log::release_ltail(&pod, id, life);
                assert!(host_table::release_dead(&pod, id, std::process::id(), life));
                let mb = mailbox(&pod);
                wait_for("the joiner finds it gone", || {
                    mb.server.load(Ordering::SeqCst) == 0
                });
                wait_for("resume", || resume.load(Ordering::SeqCst));
            };
            chaos::with_hook(hook, || s1.shared.serve_join())
        })
    };
    wait_for("s1 paused before its pin", || paused.load(Ordering::SeqCst));
    let mut first = Some(first);
    if resumes == Resumes::WhenItsJoinerLeftItsSession {
        resume.store(true, Ordering::SeqCst);
        let _ = first.take().unwrap().join().unwrap();
    }
    // s2 serves the joiner, in its pump's place.
    while !joiner.is_finished() {
        if mb.server.load(Ordering::SeqCst) == 0 {
            let _ = s2.shared.serve_join();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let joined = joiner.join().unwrap().expect("joined");
    if let Some(first) = first {
        resume.store(true, Ordering::SeqCst);
        let _ = first.join().unwrap();
    }
    // The joiner has every entry s2 has.
    s2.replay().unwrap();
    joined.replay().unwrap();
    let objects = |host: &Host| {
        let snapshot = host.inspect().replica_snapshot();
        snapshot
            .into_iter()
            .map(|(key, entry)| (key, entry.slot, entry.stamp))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        objects(&joined),
        objects(&s2),
        "the joiner's replica (s2 at {p2}, s1 at {p1})"
    );
    // And holds the head no further than where it is: the log goes on.
    for i in 0..600u32 {
        let key = i.to_le_bytes();
        let done = s2.create(&key, &value(1)).and_then(|()| s2.delete(&key));
        assert!(done.is_ok(), "{done:?}");
        joined.replay().unwrap();
    }
    std::mem::forget(s1);
}

#[cfg(feature = "chaos")]
#[test]
fn a_dead_servers_late_pin_and_mailbox_words_leave_its_joiners_next_session_alone() {
    a_dead_servers_late_pin(Resumes::WhenItsJoinerLeftItsSession);
}

#[cfg(feature = "chaos")]
#[test]
fn a_dead_servers_pin_after_its_joiner_joined_does_not_hold_the_head() {
    a_dead_servers_late_pin(Resumes::WhenItsJoinerHasJoined);
}

// Found by a review of the append's wait for room (2026-11-30).

/// Three hosts without pumps on a log of 16, every replica and the head at `s`, and a
/// late joiner j waiting to be served (its `ltail` holds the head at `s`). a appends up
/// to a hole b leaves (alive, slow); a thread of a appends after it, and its replay
/// waits for the hole, holding a's replay lock. A second thread of a appends into the
/// full log, and its wait for room serves j, whose snapshot needs the lock the first
/// holds. d, whose replay lock is free, serves j as its pump would: the joiner must be
/// d's to serve (the second took the mailbox, then waited on the lock until the first
/// gave up on the hole, 3 s, and nobody else could serve j, whose `ltail` held the log
/// full for every host meanwhile).
#[test]
fn an_append_waiting_for_room_leaves_a_joiner_to_a_host_that_can_serve_it() {
    let wait = Duration::from_secs(3);
    let capacity = 16;
    let config = small_config()
        .log_capacity_entries(capacity)
        .lease_ms(10_000);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let options = || unpumped(wait).flat_combining(false);
    let a: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options()).unwrap()));
    let b = Host::join(&pod, Join::As(1), options()).unwrap();
    let d = Host::join(&pod, Join::As(2), options()).unwrap();
    // Each holds claimed slots, so that a create is one entry; and the log recycles (a
    // join is late).
    for (i, host) in [&b, &d].into_iter().enumerate() {
        host.create(&[b'w', i as u8], &value(0)).unwrap();
    }
    for i in 0..2 * capacity as u8 {
        a.create(&[b'r', i], &value(i)).unwrap();
        a.delete(&[b'r', i]).unwrap();
        b.replay().unwrap();
        d.replay().unwrap();
    }
    a.replay().unwrap();
    let s = a.inspect().applied_position();
    let (head, _) = a.shared.log.advance_head(&pod, &a.shared.chaos);
    assert_eq!(head, s, "every replica at s");
    let joiner = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || Host::join(&pod, Join::As(3), unpumped(wait)))
    };
    let mb = mailbox(&pod);
    wait_for("the joiner's request", || {
        mb.request.load(Ordering::SeqCst) != 0
    });
    let request = mb.request.load(Ordering::SeqCst);
    for i in 0..capacity - 2 {
        a.create(&[b'k', i as u8], &value(1)).unwrap();
    }
    let hole = b.inspect().reserve_unpublished(1).unwrap();
    assert_eq!(hole, s + capacity - 2, "one entry a create");
    b.replay().unwrap();
    let first = std::thread::spawn(move || a.create(b"first", &value(2)));
    wait_for("the first appended", || {
        a.inspect().log_cursors().2 == hole + 2
    });
    let second = std::thread::spawn(move || a.create(b"second", &value(3)));
    std::thread::sleep(wait / 10);
    assert_eq!(a.inspect().log_cursors().2, hole + 2, "the log is full");
    let started = Instant::now();
    let deadline = started + wait / 4;
    while mb.ready.load(Ordering::SeqCst) != request && Instant::now() < deadline {
        // As d's pump does each round.
        d.shared.serve_join().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    assert_eq!(
        mb.ready.load(Ordering::SeqCst),
        request,
        "the joiner was not served {took:?} after d began to serve"
    );
    let created = first.join().unwrap();
    assert!(
        matches!(created, Err(Error::ReplayStalled { .. })),
        "the first waits for b's hole: {created:?}"
    );
    let _ = (second.join().unwrap(), joiner.join().unwrap());
    std::mem::forget((b, d));
}

// Found by a review of the tail check's wait beside a sibling (`0de3aa0`).

/// A tail check on a host one of whose threads holds the replay lock without replaying
/// (a server encoding its snapshot for a late joiner, paused before its pin): host b
/// created e (its replay moved `ctail` past e), and a lookup of e on s begins while the
/// server holds s's lock. `applied` stays below `ctail` all the while: the check watches
/// it, then replays once the lock is free, and finds e. (A check that took a held lock
/// for a replay about to cover `ctail` answered that e did not exist.)
#[cfg(feature = "chaos")]
#[test]
fn a_tail_check_beside_a_sibling_holding_the_replay_lock_still_covers_ctail() {
    use crate::chaos::{self, Point};
    use std::sync::atomic::AtomicBool;
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let options = || unpumped(Duration::from_secs(3));
    let s: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options()).unwrap()));
    let b = Host::join(&pod, Join::As(1), options()).unwrap();
    // The log recycles (a join is late, and asks for a server); then the head comes up to
    // both replicas, so that b's create below finds room past the joiner's claim.
    for i in 0..300u32 {
        s.create(&i.to_le_bytes(), &value(1)).unwrap();
        s.delete(&i.to_le_bytes()).unwrap();
        b.replay().unwrap();
    }
    s.replay().unwrap();
    let _ = s.shared.log.advance_head(&pod, &s.shared.chaos);
    let joiner = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || Host::join(&pod, Join::As(2), options()))
    };
    let mb = mailbox(&pod);
    wait_for("the joiner's request", || {
        mb.request.load(Ordering::SeqCst) != 0
    });
    let (paused, resume) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let server = {
        let (paused, resume) = (Arc::clone(&paused), Arc::clone(&resume));
        std::thread::spawn(move || {
            let hook = move |point| {
                if point == Point::ServeBeforePin && !paused.swap(true, Ordering::SeqCst) {
                    wait_for("resume", || resume.load(Ordering::SeqCst));
                }
            };
            chaos::with_hook(hook, || s.shared.serve_join())
        })
    };
    wait_for("the server paused holding s's replay lock", || {
        paused.load(Ordering::SeqCst)
    });
    b.create(b"e", &value(2)).unwrap();
    let ctail = crate::log::Log::ctail(&pod).load(Ordering::SeqCst);
    assert!(
        s.inspect().applied_position() < ctail,
        "s's replica below ctail {ctail}"
    );
    let lookup = std::thread::spawn(move || s.lookup(b"e"));
    std::thread::sleep(Duration::from_millis(50));
    resume.store(true, Ordering::SeqCst);
    let found = lookup.join().unwrap();
    server.join().unwrap().expect("served");
    joiner.join().unwrap().expect("joined");
    assert!(
        matches!(found, Ok(Some(_))),
        "a lookup of e, created before it began, beside a server holding the replay lock: \
         {found:?}"
    );
}

/// Host b looks at the join mailbox (a request, no server, `ready` not the request's) and
/// stops right before it takes it (`ServeBeforeTake`), while host a serves the whole
/// session: pins the joiner at a's position p_a, stores `ready`, streams, and gives up
/// waiting for the joiner's let-go (the joiner is still decoding), so it lets go of
/// `server`. Then b goes on: it must find the session served and leave it. (Its CAS of
/// `server` from 0 went through and nothing after it looked at `ready`: b pinned the
/// session again at its own position p_b > p_a, after the joiner had checked its pin,
/// and the joiner's `ltail` stayed at p_b, where its own raises never move it: the log
/// was full for every host behind a live, caught-up joiner.)
#[cfg(feature = "chaos")]
#[test]
fn a_server_stopped_before_it_takes_the_mailbox_leaves_a_session_served_meanwhile() {
    use crate::chaos::{self, Point};
    use crate::log::Log;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    // a gives up waiting for the joiner's let-go soon (as an append's serve does, within
    // what is left of its wait).
    let a = Host::join(&pod, Join::As(0), unpumped(Duration::from_millis(300))).unwrap();
    let b = Host::join(&pod, Join::As(1), unpumped(Duration::from_secs(3))).unwrap();
    for i in 0..300u32 {
        a.create(&i.to_le_bytes(), &value(1)).unwrap();
        a.delete(&i.to_le_bytes()).unwrap();
        b.replay().unwrap();
    }
    let p_a = a.replay().unwrap();
    // b goes further than a (a replays nothing more until the joiner is served).
    for i in 0..5u8 {
        b.create(&[b'b', i], &value(i)).unwrap();
    }
    let p_b = b.replay().unwrap();
    assert!(p_b > p_a, "p_a {p_a}, p_b {p_b}");
    let (at_decode_tx, at_decode) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    let joiner = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || {
            let mut stopped = false;
            let hook = move |point| {
                if point == Point::JoinBeforeDecode && !std::mem::replace(&mut stopped, true) {
                    at_decode_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                }
            };
            chaos::with_hook(hook, || {
                Host::join(&pod, Join::As(2), unpumped(Duration::from_secs(3)))
            })
        })
    };
    let mailbox = mailbox(&pod);
    wait_for("the joiner's request", || {
        mailbox.request.load(Ordering::SeqCst) != 0
    });
    let request = mailbox.request.load(Ordering::SeqCst);
    let (j_id, j_life) = host_table::session_of(request);
    let (b_stopped, b_go) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let served_by_b = std::thread::scope(|scope| {
        let b = &b;
        let (stopped, resume) = (Arc::clone(&b_stopped), Arc::clone(&b_go));
        let server = scope.spawn(move || {
            let hook = move |point| {
                if point == Point::ServeBeforeTake && !stopped.swap(true, Ordering::SeqCst) {
                    wait_for("b let go on", || resume.load(Ordering::SeqCst));
                }
            };
            chaos::with_hook(hook, || b.shared.serve_join())
        });
        wait_for("b stopped before it takes the mailbox", || {
            b_stopped.load(Ordering::SeqCst)
        });
        // a serves the whole session, and gives up on the let-go.
        let served = a.shared.serve_join();
        at_decode.recv().unwrap();
        assert!(
            matches!(served, Err(Error::JoinerGone { .. })),
            "{served:?}"
        );
        assert_eq!(Log::ltail_of(&pod, j_id, j_life), Some(p_a), "a's pin");
        assert_eq!(mailbox.server.load(Ordering::SeqCst), 0, "a let go");
        assert_eq!(
            mailbox.request.load(Ordering::SeqCst),
            request,
            "the joiner has not"
        );
        b_go.store(true, Ordering::SeqCst);
        server.join().unwrap()
    });
    assert_eq!(
        Log::ltail_of(&pod, j_id, j_life),
        Some(p_a),
        "pinned again, at b's position {p_b} (b's serve: {served_by_b:?})"
    );
    assert!(served_by_b.is_ok(), "{served_by_b:?}");
    assert_eq!(mailbox.server.load(Ordering::SeqCst), 0, "b let go");
    // The log goes on before the joiner's first replay, as other hosts append.
    a.create(b"after", &value(4)).unwrap();
    go.send(()).unwrap();
    let joined = joiner.join().unwrap().expect("joined");
    // Its `ltail` moves with its replay: the log goes on laps past it.
    for i in 0..600u32 {
        let key = i.to_le_bytes();
        let done = a.create(&key, &value(1)).and_then(|()| a.delete(&key));
        assert!(
            done.is_ok(),
            "append {i}: {done:?}; the joiner applied {}, its ltail {:?}",
            joined.inspect().applied_position(),
            Log::ltail_of(&pod, j_id, j_life)
        );
        joined.replay().unwrap();
        b.replay().unwrap();
    }
}

/// Server s3 serves an earlier joiner x and is paused past its lease after its pin,
/// before its stores of `total` and `ready`: recovered; x, finding it gone, ends its
/// session. Joiner j asks next; s1 pins it at p1 and streams it the whole snapshot, and
/// j stops before its look at the pin; s1 gives up waiting for j's let-go and lets go of
/// `server`. s3 resumes and stores x's `ready` over j's: the session no longer looks
/// served, and s2, which has applied more (p2 > p1), takes the mailbox and pins j again
/// at p2. j must find its `ltail` not at its stream's p1 and join again. (Without its
/// check of the pin, j decoded s1's index as of p1 and replayed from there, while its
/// `ltail` stayed at p2, where its own raises, CASes from what it applied, never move it:
/// the head stopped at p2, and the log was full for every host a lap later.)
#[cfg(feature = "chaos")]
#[test]
fn a_joiner_pinned_again_past_its_streams_position_joins_again() {
    use crate::chaos::{self, Point};
    use crate::log::Log;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    let pod = Arc::new(Pod::create(&small_config(), Backing::heap()).unwrap());
    let area = pod.layout().config.join_area_bytes;
    // s1 gives up waiting for its joiner's let-go soon, and for room in the log.
    let s1 = Host::join(&pod, Join::As(0), unpumped(Duration::from_millis(300))).unwrap();
    let s2 = Arc::new(Host::join(&pod, Join::As(1), unpumped(Duration::from_secs(3))).unwrap());
    let s3 = Arc::new(Host::join(&pod, Join::As(2), unpumped(Duration::from_secs(3))).unwrap());
    // The log recycles (a join is late).
    for i in 0..300u32 {
        s1.create(&i.to_le_bytes(), &value(1)).unwrap();
        s1.delete(&i.to_le_bytes()).unwrap();
        s2.replay().unwrap();
        s3.replay().unwrap();
    }
    for i in 0..10u8 {
        s1.create(&[b'k', i], &value(i)).unwrap();
    }
    s2.replay().unwrap();
    s3.replay().unwrap();
    let p1 = s1.replay().unwrap();
    let mb = mailbox(&pod);
    // Joiner x (by hand), served by s3, which stops after its pin.
    let (x, x_life, x_session) = ask_by_hand(&pod);
    let (s3_paused, s3_go) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let third = {
        let (s3, paused, resume) = (Arc::clone(&s3), Arc::clone(&s3_paused), Arc::clone(&s3_go));
        std::thread::spawn(move || {
            let hook = move |point| {
                if point == Point::ServeAfterPin && !paused.swap(true, Ordering::SeqCst) {
                    wait_for("s3 resumes", || resume.load(Ordering::SeqCst));
                }
            };
            chaos::with_hook(hook, || s3.shared.serve_join())
        })
    };
    wait_for("s3 paused after its pin", || {
        s3_paused.load(Ordering::SeqCst)
    });
    let w3 = server_word(s3.shared.id, s3.shared.life);
    assert_eq!(mb.server.load(Ordering::SeqCst), w3);
    // s3 taken for dead and recovered; x finds it gone and ends its session (as
    // `join_late` does), then gives its row up.
    let (id3, life3) = (s3.shared.id, s3.shared.life);
    host_table::condemn(&pod, id3, life3);
    Log::release_ltail(&pod, id3, life3);
    assert!(host_table::release_dead(
        &pod,
        id3,
        std::process::id(),
        life3
    ));
    mb.request
        .compare_exchange(x_session, 0, Ordering::SeqCst, Ordering::SeqCst)
        .unwrap();
    mb.end_gone_session(x_session, w3);
    host_table::release(&pod, x, x_life);
    // Joiner j, which stops after it has taken the last chunk of its first stream.
    let (at_last_tx, at_last) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    let joiner = {
        let pod = Arc::clone(&pod);
        std::thread::spawn(move || {
            let mut stopped = false;
            let watched = Arc::clone(&pod);
            let hook = move |point| {
                let mb = mailbox(&watched);
                let last =
                    mb.acked.load(Ordering::SeqCst) * area >= mb.total.load(Ordering::SeqCst);
                if point == Point::JoinBetweenChunks
                    && last
                    && !std::mem::replace(&mut stopped, true)
                {
                    at_last_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                }
            };
            chaos::with_hook(hook, || {
                Host::join(&pod, Join::As(4), unpumped(Duration::from_secs(3)))
            })
        })
    };
    wait_for("j's request", || mb.request.load(Ordering::SeqCst) != 0);
    let j_session = mb.request.load(Ordering::SeqCst);
    let (j, j_life) = host_table::session_of(j_session);
    // s1 serves j whole, then gives up on its let-go.
    let served = s1.shared.serve_join();
    at_last.recv().unwrap();
    assert!(
        matches!(served, Err(Error::JoinerGone { .. })),
        "{served:?}"
    );
    assert_eq!(Log::ltail_of(&pod, j, j_life), Some(p1), "s1's pin");
    assert_eq!(mb.server.load(Ordering::SeqCst), 0, "s1 let go");
    assert_eq!(mb.ready.load(Ordering::SeqCst), j_session);
    // s3 resumes: its stores of x's session's words, then it finds itself dead.
    s3_go.store(true, Ordering::SeqCst);
    let s3_answered = third.join().unwrap();
    assert!(s3_answered.is_err(), "{s3_answered:?}");
    assert_eq!(
        mb.ready.load(Ordering::SeqCst),
        x_session,
        "s3's late `ready`"
    );
    // s2 goes past p1, and serves j again (as its pump would): its pin moves j's `ltail`.
    for i in 0..5u8 {
        s2.create(&[b'b', i], &value(i)).unwrap();
    }
    let p2 = s2.replay().unwrap();
    assert!(p2 > p1, "p1 {p1}, p2 {p2}");
    let second = {
        let s2 = Arc::clone(&s2);
        std::thread::spawn(move || s2.shared.serve_join())
    };
    wait_for("s2 streams to j", || {
        mb.ready.load(Ordering::SeqCst) == j_session && mb.chunk.load(Ordering::SeqCst) >= 1
    });
    assert_eq!(Log::ltail_of(&pod, j, j_life), Some(p2), "s2's pin");
    // The log goes on past p2 before j's first replay.
    s1.create(b"after", &value(7)).unwrap();
    go.send(()).unwrap();
    // s2 serves j's next life, if it asks, as its pump would.
    while !joiner.is_finished() {
        if mb.server.load(Ordering::SeqCst) == 0 {
            let _ = s2.shared.serve_join();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let joined = joiner.join().unwrap().expect("joined");
    let _ = second.join().unwrap();
    // Its `ltail` moves with its replay: the log goes on laps past it.
    for i in 0..600u32 {
        let key = i.to_le_bytes();
        let done = s1.create(&key, &value(1)).and_then(|()| s1.delete(&key));
        assert!(
            done.is_ok(),
            "append {i}: {done:?}; the joiner (life {}) applied {}, its ltail {:?} \
             (p1 {p1}, p2 {p2})",
            joined.shared.life,
            joined.inspect().applied_position(),
            Log::ltail_of(&pod, joined.shared.id, joined.shared.life)
        );
        joined.replay().unwrap();
        s2.replay().unwrap();
    }
    // And has every object s2 has.
    let objects = |host: &Host| {
        let snapshot = host.inspect().replica_snapshot();
        snapshot
            .into_iter()
            .map(|(key, entry)| (key, entry.slot, entry.stamp))
            .collect::<Vec<_>>()
    };
    assert_eq!(objects(&joined), objects(&s2));
    assert_eq!(
        joined.shared.life,
        j_life + 1,
        "j joined again, as the id's next life"
    );
    std::mem::forget(s3);
}
