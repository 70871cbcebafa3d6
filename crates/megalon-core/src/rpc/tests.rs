//! The ring's tests: calls and answers across two hosts' simulated caches, senders and
//! servers that give up, panic or die, and their recoveries, each window held open by a
//! seam of the ring's code.

use std::cell::Cell;
use std::sync::Arc;

use super::*;
use crate::{inspect::fnv1a64, Backing, MemoryKind, PodConfig};

/// Long enough that a served request never meets it, even on a loaded machine.
const WAIT_LIMIT: Duration = Duration::from_secs(5);

/// What the tests' recoveries answer for a request their dead server claimed, and
/// their servers for a request whose serving failed: a status no test request uses.
const GONE: Response = Response {
    status: 99,
    detail: 0,
};
const MAX_KEY_BYTES: usize = 32;
const PAYLOAD_BYTES: u64 = 200;
/// The sender the tests' calls name.
const SENDER: u64 = 1;

fn ring_pod(entries: u64) -> (Arc<Pod>, RingGeometry) {
    let entry_bytes = entry_bytes(MAX_KEY_BYTES, PAYLOAD_BYTES);
    let config = PodConfig::new()
        .app_scr_bytes(scr_bytes(entries))
        .app_lnr_bytes(entries * entry_bytes);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
    let ring = RingGeometry::in_app_areas(&pod, entries, entry_bytes).expect("ring");
    ring.initialize(&pod);
    (pod, ring)
}

fn host_memory(pod: &Arc<Pod>, seed: u64) -> Memory {
    Memory::new(Arc::clone(pod), MemoryKind::simulated(seed))
}

/// A ring of `entries` in a pod of its own, and the memories of its sender (host 1)
/// and its server (host 2).
fn sides(entries: u64) -> (Arc<Pod>, RingGeometry, Memory, Memory) {
    let (pod, ring) = ring_pod(entries);
    let (sender, server) = (host_memory(&pod, 1), host_memory(&pod, 2));
    (pod, ring, sender, server)
}

/// `ring.call` of `request` (op, key, payload) with the tests' wait limit, nothing
/// counted and nothing to serve.
fn call(
    ring: &RingGeometry,
    pod: &Pod,
    memory: &Memory,
    buf: &mut [u8],
    (op, key, payload): (u8, &[u8], &[u8]),
) -> Result<Response, u64> {
    ring.call(
        pod,
        memory,
        SENDER,
        buf,
        op,
        key,
        payload,
        WAIT_LIMIT,
        &(),
        &mut || ControlFlow::Continue(()),
    )
}

/// A call of `(op, key)`, with no payload, from a sender whose memory is
/// `host_memory(pod, seed)`, on a thread of its own.
fn call_on_thread(
    pod: &Arc<Pod>,
    ring: &RingGeometry,
    seed: u64,
    (op, key): (u8, &'static [u8]),
) -> std::thread::JoinHandle<Result<Response, u64>> {
    let (pod, ring) = (Arc::clone(pod), ring.clone());
    std::thread::spawn(move || {
        let memory = host_memory(&pod, seed);
        let mut buf = vec![0; ring.entry_bytes as usize];
        call(&ring, &pod, &memory, &mut buf, (op, key, b""))
    })
}

/// Waits until the state word of `ticket`'s entry is `word`; panics, naming `what`,
/// after [`WAIT_LIMIT`].
fn wait_for_state(pod: &Pod, ring: &RingGeometry, ticket: u64, word: u64, what: &str) {
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    while ring.state(pod, ticket).load(Ordering::SeqCst) != word {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

/// A call of op 1 with key "x" that nobody serves: it gives up after 20 ms and withdraws
/// its request (the entry's state says so until a server skips it).
fn withdrawn_call(pod: &Pod, ring: &RingGeometry, sender: &Memory) {
    let mut buf = vec![0; ring.entry_bytes as usize];
    let limit = Duration::from_millis(20);
    let withdrawn = call_serving(ring, pod, sender, &mut buf, b"x", limit, &mut || {
        ControlFlow::Continue(())
    });
    assert!(withdrawn.is_err());
}

/// Answers every request waiting in `ring` as the test server does (`answer`), one at
/// a time; returns how many.
fn serve_waiting(pod: &Pod, ring: &RingGeometry, memory: &Memory, buf: &mut [u8]) -> usize {
    let mut served = 0;
    while let Some(claimed) = ring.claim(pod, &()) {
        let request = ring.read(memory, claimed, buf, &());
        let response = answer(request.op, &buf[request.key.clone()], b"");
        ring.respond(pod, memory, claimed, buf, response, &());
        served += 1;
    }
    served
}

/// Declares each seam of the ring's code: a thread-local hook, and the function the
/// ring calls there (its argument, a ticket or a position, names the spot for a
/// reader), which runs the calling thread's hook once.
macro_rules! seams {
    ($($(#[$doc:meta])* $run:ident / $seam:ident;)*) => {$(
        thread_local! {
            $(#[$doc])*
            static $seam: Seam = const { std::cell::RefCell::new(None) };
        }
        $(#[$doc])*
        pub(super) fn $run(_at: u64) {
            run_once(&$seam);
        }
    )*};
}

seams! {
    /// Run once by `recover_sender` between its load of an entry's state and its
    /// CAS (the window in which the ring's live server moves the entry on).
    before_recovery_cas / BEFORE_RECOVERY_CAS;
    /// Run once by `claim` between its load of a withdrawn state and its skip.
    before_skip_store / BEFORE_SKIP_STORE;
    /// Run once by `reserve` between its CAS of the entry's sender word and its CAS
    /// of the tail.
    before_tail_cas / BEFORE_TAIL_CAS;
    /// Run once by `recover_server` between its load of a claimed state and its
    /// write of the answer's header line.
    before_server_answer / BEFORE_SERVER_ANSWER;
    /// Run once by `call` between its wait's answer and its read of the response.
    before_response_read / BEFORE_RESPONSE_READ;
    /// Run once by `recover_server` between its move to answering and its header.
    before_recovery_header / BEFORE_RECOVERY_HEADER;
    /// Run once by `claim` between its CAS to claimed and its move of the head.
    before_claim_pass / BEFORE_CLAIM_PASS;
}

/// A seam's hook, run once by the ring's code when a test has put one there.
type Seam = std::cell::RefCell<Option<Box<dyn FnOnce()>>>;

/// Puts `hook` in `seam` on this thread, for the ring's code to run once.
fn set_seam(seam: &'static std::thread::LocalKey<Seam>, hook: impl FnOnce() + 'static) {
    seam.with(|slot| *slot.borrow_mut() = Some(Box::new(hook)));
}

/// Runs, once, the hook a test put in `seam` on this thread (a seam of the ring's
/// code: `before_tail_cas`, `before_skip_store`, `before_recovery_cas` and the rest).
fn run_once(seam: &'static std::thread::LocalKey<Seam>) {
    if let Some(hook) = seam.with(|hook| hook.borrow_mut().take()) {
        hook();
    }
}

/// `ring.call` of op 1 with `key` and no payload, waiting at most `limit` and running
/// `serve` in each round of its wait (as a host serves its own ring), nothing counted.
fn call_serving(
    ring: &RingGeometry,
    pod: &Pod,
    memory: &Memory,
    buf: &mut [u8],
    key: &[u8],
    limit: Duration,
    serve: &mut dyn FnMut() -> ControlFlow<()>,
) -> Result<Response, u64> {
    ring.call(pod, memory, SENDER, buf, 1, key, b"", limit, &(), serve)
}

/// What the test server answers: the op as the status, and a hash of the key and the
/// payload as the detail, so that a sender tells its own answer from any other.
fn answer(op: u8, key: &[u8], payload: &[u8]) -> Response {
    let mut both = key.to_vec();
    both.push(0xff);
    both.extend_from_slice(payload);
    Response {
        status: op,
        detail: fnv1a64(&both),
    }
}

/// The server's claim of the next request, once a sender has published it. Panics if
/// none comes for twice [`WAIT_LIMIT`] (a sender that gave up first), rather than
/// spinning for good.
fn claim_when_sent(pod: &Pod, ring: &RingGeometry) -> Claimed {
    let deadline = std::time::Instant::now() + 2 * WAIT_LIMIT;
    loop {
        if let Some(claimed) = ring.claim(pod, &()) {
            return claimed;
        }
        assert!(std::time::Instant::now() < deadline, "no request to claim");
        std::thread::yield_now();
    }
}

/// A request as the server saw it.
type Seen = (u8, Vec<u8>, Vec<u8>);

/// Serves `requests` requests, one at a time as a host's server does, and returns
/// them in the order served. Panics if no request comes for [`WAIT_LIMIT`].
fn serve(pod: &Pod, ring: &RingGeometry, memory: &Memory, requests: usize) -> Vec<Seen> {
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut seen = Vec::with_capacity(requests);
    let mut backoff = Backoff::new(WAIT_LIMIT);
    while seen.len() < requests {
        let Some(claimed) = ring.claim(pod, &()) else {
            assert!(
                backoff.snooze(),
                "the server waited {WAIT_LIMIT:?} for request {} of {requests}",
                seen.len()
            );
            continue;
        };
        let request = ring.read(memory, claimed, &mut buf, &());
        let key = buf[request.key.clone()].to_vec();
        let payload = buf[request.payload.clone()].to_vec();
        let response = answer(request.op, &key, &payload);
        ring.respond(pod, memory, claimed, &mut buf, response, &());
        seen.push((request.op, key, payload));
        backoff = Backoff::new(WAIT_LIMIT);
    }
    seen
}

/// Call `(2, "next", "")` from `sender`, with one request served by `server`: its
/// outcome.
fn next_call(
    pod: &Pod,
    ring: &RingGeometry,
    sender: &Memory,
    server: &Memory,
) -> Result<Response, u64> {
    let mut buf = vec![0; ring.entry_bytes as usize];
    std::thread::scope(|scope| {
        let serving = scope.spawn(|| serve(pod, ring, server, 1));
        let response = call(ring, pod, sender, &mut buf, (2, b"next", b""));
        serving.join().expect("the server");
        response
    })
}

/// Counts what the ring reports (one thread's).
#[derive(Default)]
struct Counts {
    scr_atomics: Cell<u64>,
    lines_written_back: Cell<u64>,
    lines_invalidated: Cell<u64>,
}

impl Tally for Counts {
    fn scr_atomics(&self, n: u64) {
        self.scr_atomics.set(self.scr_atomics.get() + n);
    }
    fn lines_written_back(&self, n: u64) {
        self.lines_written_back
            .set(self.lines_written_back.get() + n);
    }
    fn lines_invalidated(&self, n: u64) {
        self.lines_invalidated.set(self.lines_invalidated.get() + n);
    }
}

#[test]
fn a_request_and_its_response_cross_between_two_hosts_caches() {
    let (pod, ring, sender, server) = sides(4);
    let long_key = [0xab; MAX_KEY_BYTES];
    let long_payload: Vec<u8> = (0..PAYLOAD_BYTES as u8).collect();
    let sent: Vec<Seen> = vec![
        (1, b"alpha".to_vec(), Vec::new()),
        (2, long_key.to_vec(), long_payload),
        (3, b"c".to_vec(), vec![7]),
    ];
    let counts = Counts::default();
    let seen = std::thread::scope(|scope| {
        let serving = scope.spawn(|| serve(&pod, &ring, &server, sent.len()));
        let mut buf = vec![0; ring.entry_bytes as usize];
        for (op, key, payload) in &sent {
            let response = ring.call(
                &pod,
                &sender,
                SENDER,
                &mut buf,
                *op,
                key,
                payload,
                WAIT_LIMIT,
                &counts,
                &mut || ControlFlow::Continue(()),
            );
            assert_eq!(response, Ok(answer(*op, key, payload)), "op {op}");
        }
        serving.join().expect("the server")
    });
    assert_eq!(seen, sent);
    // Each request's lines written back (the header and a line of key; the header
    // and four lines of key and payload; the header and a line), each response's
    // header line invalidated; at least eight SCR accesses a call (reserve: two loads
    // and two CASes; publish; the poll that finds the response; free and let go).
    assert_eq!(counts.lines_written_back.get(), 2 + 5 + 2);
    assert_eq!(counts.lines_invalidated.get(), 3);
    assert!(counts.scr_atomics.get() >= 3 * 8);
    assert!(!ring.pending(&pod));
}

/// A call whose request its own wait serves (as a host serves its own ring), at the
/// `answer_at`-th turn of its wait, so that its polls are known: each SCR access of each
/// side counted once, whatever the polls; a look at a line this side's own last access
/// left as it was is a hit in the coherent cache, not counted. The sender: the tail and
/// the entry's state loaded, the sender word and the tail taken by CAS, the publish, the
/// poll that finds the response (not the polls that find the request it published: as a
/// poll that finds what the last one found, they read a line nobody changed), the free
/// and the word let go: 8. (Its look at the word right after its CAS took it, and its
/// first poll, each counted once too: 10.) The server: the head and the state loaded, the
/// claim and the head's pass by CAS, the state looked at again before the answer, and
/// its publish: 6. (The answer counted one access too many: 7; and every poll counted,
/// a wait of 200 turns counted 209.)
fn counts_of_a_call_answered_at(answer_at: u32) -> (u64, u64) {
    let (pod, ring, sender, server) = sides(2);
    let (sent, served) = (Counts::default(), Counts::default());
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut serving = vec![0; ring.entry_bytes as usize];
    let mut turns = 0;
    let response = ring.call(
        &pod,
        &sender,
        SENDER,
        &mut buf,
        1,
        b"key",
        b"",
        WAIT_LIMIT,
        &sent,
        &mut || {
            turns += 1;
            if turns < answer_at {
                return ControlFlow::Continue(());
            }
            if let Some(claimed) = ring.claim(&pod, &served) {
                let request = ring.read(&server, claimed, &mut serving, &served);
                let response = answer(request.op, &serving[request.key.clone()], b"");
                ring.respond(&pod, &server, claimed, &mut serving, response, &served);
            }
            ControlFlow::Continue(())
        },
    );
    assert_eq!(response, Ok(answer(1, b"key", b"")));
    assert_eq!(turns, answer_at, "answered at the turn asked");
    (sent.scr_atomics.get(), served.scr_atomics.get())
}

#[test]
fn each_scr_access_of_a_call_and_of_its_serving_is_counted_once() {
    assert_eq!(counts_of_a_call_answered_at(1), (8, 6), "(sender, server)");
}

#[test]
fn a_long_wait_for_an_answer_counts_the_lines_that_changed_not_its_polls() {
    assert_eq!(
        counts_of_a_call_answered_at(200),
        (8, 6),
        "(sender, server)"
    );
}

/// A sender's wait for its answer yields from its first turn on, spinning none: the
/// answer needs the server's thread, which a spin keeps off the core where threads
/// outnumber cores. (With the spins every other wait makes first, all 20 of its turns
/// spun.)
#[test]
fn a_senders_wait_for_its_answer_yields_and_never_spins() {
    let spun = || crate::backoff::SPUN_ROUNDS.with(std::cell::Cell::get);
    let before = spun();
    assert_eq!(counts_of_a_call_answered_at(20), (8, 6), "(sender, server)");
    assert_eq!(spun() - before, 0, "rounds of the wait that spun");
}

/// A sender that finds a one-entry ring full waits for the entry's last lap to end: it
/// counts the tail and the state it first finds, then each change of the state it sees
/// (the last lap's claim, answer and free: at most four moves), not each look. (With
/// every look counted, its 200 turns counted over 400.)
#[test]
fn a_wait_for_a_full_ring_counts_the_lines_that_changed_not_its_looks() {
    let (pod, ring, sender, server) = sides(1);
    let first = call_on_thread(&pod, &ring, 3, (1, b"first"));
    wait_for_state(&pod, &ring, 0, pack(0, REQUEST), "the first request sent");
    let counts = Counts::default();
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut serving = vec![0; ring.entry_bytes as usize];
    let mut turns = 0;
    let response = ring.call(
        &pod,
        &sender,
        SENDER + 1,
        &mut buf,
        2,
        b"second",
        b"",
        WAIT_LIMIT,
        &counts,
        &mut || {
            turns += 1;
            // The first request, once 200 turns have seen the ring full; then ours.
            if turns >= 200 {
                serve_waiting(&pod, &ring, &server, &mut serving);
            }
            ControlFlow::Continue(())
        },
    );
    assert_eq!(response, Ok(answer(2, b"second", b"")));
    assert_eq!(
        first.join().expect("the first sender"),
        Ok(answer(1, b"first", b""))
    );
    assert!(turns > 200, "the second call waited for the ring");
    let counted = counts.scr_atomics.get();
    assert!(
        (8..=8 + 4).contains(&counted),
        "{counted} SCR accesses counted for a call that waited out a full ring"
    );
}

#[test]
fn a_call_abandoned_after_the_server_claimed_it_frees_its_entry_when_answered() {
    // One entry: the server claims the request and answers only after the sender gave
    // up; the entry must then be free for the next call.
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut server_buf = vec![0; ring.entry_bytes as usize];
    let limit = Duration::from_millis(30);
    // The server claims while the sender waits (from the sender's own rounds: a
    // server thread not run within the limit would find the request withdrawn).
    let mut claimed = None;
    let abandoned = call_serving(&ring, &pod, &sender, &mut buf, b"slow", limit, &mut || {
        if claimed.is_none() {
            claimed = ring.claim(&pod, &());
        }
        ControlFlow::Continue(())
    });
    let claimed = claimed.expect("claimed while the sender waited");
    let waited_ms = abandoned.expect_err("nobody answered in time");
    assert!(waited_ms >= 2 * limit.as_millis() as u64, "{waited_ms} ms");
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::Relaxed),
        pack(0, ABANDONED)
    );
    let request = ring.read(&server, claimed, &mut server_buf, &());
    assert_eq!(&server_buf[request.key], b"slow");
    let late = Response {
        status: 9,
        detail: 9,
    };
    ring.respond(&pod, &server, claimed, &mut server_buf, late, &());
    assert_eq!(ring.state(&pod, 0).load(Ordering::Relaxed), pack(1, FREE));
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

#[test]
fn a_sender_told_the_server_will_not_answer_withdraws_at_once_and_the_entry_serves_on() {
    // No server claims the request; the sender's closure breaks on its fifth round.
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut rounds = 0;
    let started = std::time::Instant::now();
    let given_up = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"never",
        WAIT_LIMIT,
        &mut || {
            rounds += 1;
            if rounds < 5 {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        },
    );
    assert!(given_up.is_err(), "{given_up:?}");
    assert_eq!(rounds, 5, "given up at the first break");
    assert!(
        started.elapsed() < WAIT_LIMIT / 2,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::Relaxed),
        pack(0, WITHDRAWN)
    );
    // The server skips the withdrawn request; the next lap is served.
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

#[test]
fn a_sender_told_the_server_will_not_answer_waits_on_for_a_claimed_request() {
    // The server has claimed the request: its answer (or its recovery's) is coming,
    // and the sender's closure, which breaks every round, must not stop the wait.
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut server_buf = vec![0; ring.entry_bytes as usize];
    let answered = std::thread::scope(|scope| {
        scope.spawn(|| {
            let claimed = claim_when_sent(&pod, &ring);
            // Long enough for the sender to have broken many times.
            std::thread::sleep(Duration::from_millis(50));
            ring.read(&server, claimed, &mut server_buf, &());
            let response = Response {
                status: 7,
                detail: 7,
            };
            ring.respond(&pod, &server, claimed, &mut server_buf, response, &());
        });
        call_serving(
            &ring,
            &pod,
            &sender,
            &mut buf,
            b"claimed",
            WAIT_LIMIT,
            &mut || {
                // Only once the request is claimed: before, a break withdraws it.
                if ring.state(&pod, 0).load(Ordering::Relaxed) == pack(0, CLAIMED) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )
    });
    assert_eq!(
        answered,
        Ok(Response {
            status: 7,
            detail: 7
        })
    );
}

#[test]
fn a_sender_whose_serve_closure_panics_gives_its_entry_up() {
    // One entry: after a sender panicked while it waited (in the closure that serves
    // its own ring), the entry must serve the next calls, lap after lap.
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        call_serving(
            &ring,
            &pod,
            &sender,
            &mut buf,
            b"doomed",
            WAIT_LIMIT,
            &mut || panic!("the caller's serve fails"),
        )
    }));
    assert!(panicked.is_err());
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::Relaxed),
        pack(0, WITHDRAWN),
        "the unclaimed request is withdrawn"
    );
    std::thread::scope(|scope| {
        let serving = scope.spawn(|| serve(&pod, &ring, &server, 3));
        for n in 0..3u8 {
            let response = call(&ring, &pod, &sender, &mut buf, (2, &[n], b""));
            assert_eq!(response, Ok(answer(2, &[n], b"")));
        }
        serving.join().expect("the server");
    });
}

#[test]
fn a_server_that_panics_answers_the_request_and_frees_the_entry() {
    let (pod, ring, sender, server) = sides(1);
    let failed = GONE;
    let responses = std::thread::scope(|scope| {
        let serving = scope.spawn(|| {
            let mut buf = vec![0; ring.entry_bytes as usize];
            let mut served = 0;
            while served < 2 {
                let Some(claimed) = ring.claim(&pod, &()) else {
                    std::thread::yield_now();
                    continue;
                };
                let first = served == 0;
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    ring.serve(
                        &pod,
                        &server,
                        claimed,
                        &mut buf,
                        &(),
                        failed,
                        |request, buf| {
                            assert!(!first, "the handler fails on the first request");
                            answer(request.op, &buf[request.key.clone()], b"")
                        },
                    )
                }));
                assert_eq!(outcome.is_err(), first);
                served += 1;
            }
        });
        let mut buf = vec![0; ring.entry_bytes as usize];
        let mut responses = Vec::new();
        for key in [b"one", b"two"] {
            responses.push(call(&ring, &pod, &sender, &mut buf, (3, key, b"")));
        }
        serving.join().expect("the server");
        responses
    });
    assert_eq!(responses, vec![Ok(failed), Ok(answer(3, b"two", b""))]);
}

/// The sender the recovery tests let die.
const DEAD: u64 = 2;

/// A sender paused past its lease between its take of the entry's sender word and
/// its CAS of the tail is recovered meanwhile (the tail not past its ticket: the word
/// let go, nothing settled). Resumed, its CAS wins the ticket: it must send nothing and
/// leave the entry for the server to skip. (It sent its request holding no word: had
/// it then died, nobody would ever have settled the entry, and the ring lost it.)
#[test]
fn a_sender_recovered_before_its_tail_cas_sends_nothing() {
    let (pod, ring, sender, server) = sides(2);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let (in_hook, ring_in_hook) = (Arc::clone(&pod), ring.clone());
    set_seam(&BEFORE_TAIL_CAS, move || {
        assert_eq!(ring_in_hook.recover_sender(&in_hook, SENDER), 1);
        assert_eq!(ring_in_hook.sender(&in_hook, 0).load(Ordering::SeqCst), 0);
    });
    let mut served = 0;
    let mut serving = vec![0; ring.entry_bytes as usize];
    let outcome = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"late",
        WAIT_LIMIT,
        &mut || {
            served += serve_waiting(&pod, &ring, &server, &mut serving);
            ControlFlow::Continue(())
        },
    );
    assert!(outcome.is_err(), "a recovered sender's call: {outcome:?}");
    assert_eq!(served, 0, "a recovered sender sent its request");
    // The server skips the entry, and the ring serves on.
    assert!(ring.claim(&pod, &()).is_none());
    let next = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"next",
        WAIT_LIMIT,
        &mut || {
            serve_waiting(&pod, &ring, &server, &mut serving);
            ControlFlow::Continue(())
        },
    );
    assert_eq!(next, Ok(answer(1, b"next", b"")));
}

/// The ring's server is recovered (it claimed nothing), then the id's next life serves
/// three calls of the sender (tickets 1, 2 and 3) in the sender's own rounds.
fn recovered_then_served_by_the_next_life(pod: &Arc<Pod>, ring: &RingGeometry) {
    assert_eq!(ring.recover_server(pod, &host_memory(pod, 3), GONE), 0);
    let (sender, next) = (host_memory(pod, 1), host_memory(pod, 4));
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut serving = vec![0; ring.entry_bytes as usize];
    for n in 1..=3u8 {
        let response = call_serving(ring, pod, &sender, &mut buf, &[n], WAIT_LIMIT, &mut || {
            serve_waiting(pod, ring, &next, &mut serving);
            ControlFlow::Continue(())
        });
        assert_eq!(response, Ok(answer(1, &[n], b"")));
    }
}

/// A server paused past its lease in `claim`, between its load of a withdrawn request
/// at its head and its skip, is recovered; the id's next life serves the ring on, a
/// lap and more. The old server resumes: it must change no state word (the module's
/// promise). It stored the entry's free state of a lap before and moved the head
/// back: the entry never read free again, and no later call was served.
#[test]
fn a_server_paused_in_its_skip_and_recovered_changes_nothing_when_it_resumes() {
    let (pod, ring, sender, server) = sides(2);
    withdrawn_call(&pod, &ring, &sender);
    let (in_hook, ring_in_hook) = (Arc::clone(&pod), ring.clone());
    set_seam(&BEFORE_SKIP_STORE, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // Recovered (nothing it claimed), then the next life serves, in the
        // sender's rounds: tickets 1, 2 and 3 (2 in the withdrawn one's entry).
        recovered_then_served_by_the_next_life(pod, ring);
    });
    // The old server, in its claim: paused at the skip (the hook), then resumed.
    assert!(ring.claim(&pod, &()).is_none());
    let mut buf = vec![0; ring.entry_bytes as usize];
    let mut serving = vec![0; ring.entry_bytes as usize];
    let next = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"next",
        Duration::from_millis(200),
        &mut || {
            serve_waiting(&pod, &ring, &server, &mut serving);
            ControlFlow::Continue(())
        },
    );
    assert_eq!(
        next,
        Ok(answer(1, b"next", b"")),
        "head {}, tail {}, states {:?}",
        ring.head(&pod).load(Ordering::SeqCst),
        ring.tail(&pod).load(Ordering::SeqCst),
        (0..2)
            .map(|i| unpack(ring.state(&pod, i).load(Ordering::SeqCst)))
            .collect::<Vec<_>>()
    );
}

/// Recovery of a dead sender loads its published request; the live server claims and
/// answers it before recovery's CAS to withdrawn. Recovery must settle the entry from
/// the state it is in now (it let go of the sender word after its CAS failed: the
/// answer was never freed, and a lap later the ring was full for good).
#[test]
fn a_dead_senders_recovery_racing_the_server_frees_the_answer() {
    let (pod, ring, sender, server) = sides(1);
    let dead = host_memory(&pod, 3);
    let ticket = reserve_and_die(&ring, &pod, &dead, true);
    let (in_hook, ring_in_hook) = (Arc::clone(&pod), ring.clone());
    set_seam(&BEFORE_RECOVERY_CAS, move || {
        serve(&in_hook, &ring_in_hook, &host_memory(&in_hook, 9), 1);
    });
    assert_eq!(ring.recover_sender(&pod, DEAD), 1);
    let state = ring.state(&pod, ticket).load(Ordering::SeqCst);
    assert_eq!(state, pack(ticket + 1, FREE), "the answer is freed");
    let next = next_call(&pod, &ring, &sender, &server);
    assert_eq!(next, Ok(answer(2, b"next", b"")));
}

/// The same with the request claimed when recovery looks: the server answers before
/// recovery's CAS to abandoned.
#[test]
fn a_dead_senders_recovery_racing_the_answer_frees_it() {
    let (pod, ring, sender, server) = sides(1);
    let dead = host_memory(&pod, 3);
    let ticket = reserve_and_die(&ring, &pod, &dead, true);
    let claimed = ring.claim(&pod, &()).expect("claims");
    let (in_hook, ring_in_hook) = (Arc::clone(&pod), ring.clone());
    set_seam(&BEFORE_RECOVERY_CAS, move || {
        let server = host_memory(&in_hook, 9);
        let mut buf = vec![0; ring_in_hook.entry_bytes as usize];
        ring_in_hook.read(&server, claimed, &mut buf, &());
        let response = Response {
            status: 1,
            detail: 1,
        };
        ring_in_hook.respond(&in_hook, &server, claimed, &mut buf, response, &());
    });
    assert_eq!(ring.recover_sender(&pod, DEAD), 1);
    let state = ring.state(&pod, ticket).load(Ordering::SeqCst);
    assert_eq!(state, pack(ticket + 1, FREE), "the answer is freed");
    let next = next_call(&pod, &ring, &sender, &server);
    assert_eq!(next, Ok(answer(2, b"next", b"")));
}

/// The server dies between its claim's CAS and its move of the head: the claimed
/// request is at the head. Its recovery must answer it and move the head on (it
/// looked below the head only: the sender waited in vain, and the next server
/// stopped at that ticket for good).
#[test]
fn a_dead_servers_claim_at_its_head_is_answered_and_passed() {
    let (pod, ring, sender, server) = sides(2);
    let failed = Response {
        status: 99,
        detail: 7,
    };
    let mut buf = vec![0; ring.entry_bytes as usize];
    let state = ring.state(&pod, 0);
    let mut settled = None;
    // While the sender waits (in its own rounds, so that no thread of the test can
    // come too late): `claim` up to its CAS, the server dies before it moves the
    // head, and a live host recovers it.
    let waited = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"waits",
        Duration::from_millis(500),
        &mut || {
            if settled.is_none() && state.load(Ordering::SeqCst) == pack(0, REQUEST) {
                claim_by_hand(state);
                settled = Some(ring.recover_server(&pod, &host_memory(&pod, 3), failed));
            }
            ControlFlow::Continue(())
        },
    );
    assert_eq!((settled, waited), (Some(1), Ok(failed)));
    let next = next_call(&pod, &ring, &sender, &server);
    assert_eq!(next, Ok(answer(2, b"next", b"")));
}

/// The server dies skipping a withdrawn request, after it freed the entry for the
/// next lap and before it moved the head: its recovery moves the head on.
#[test]
fn a_dead_servers_skip_at_its_head_is_passed() {
    let (pod, ring, sender, server) = sides(2);
    withdrawn_call(&pod, &ring, &sender);
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::SeqCst),
        pack(0, WITHDRAWN)
    );
    // `claim`'s skip up to its free of the entry; the server dies before the head.
    ring.state(&pod, 0).store(pack(2, FREE), Ordering::Release);
    let failed = GONE;
    assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), failed), 0);
    let next = next_call(&pod, &ring, &sender, &server);
    assert_eq!(next, Ok(answer(2, b"next", b"")));
}

/// Sender [`DEAD`] reserves the next ticket and, if `publish`, publishes a request in
/// it; then it dies (it does nothing more). Returns the ticket.
fn reserve_and_die(ring: &RingGeometry, pod: &Pod, memory: &Memory, publish: bool) -> u64 {
    let mut backoff = Backoff::new(WAIT_LIMIT);
    let mut reserved = ring
        .reserve(pod, (DEAD, &|| true), &mut backoff, &(), &mut || {
            ControlFlow::Continue(())
        })
        .expect("reserves");
    // It dies holding the entry: nothing of it lets go.
    reserved.done = true;
    let (ticket, free) = (reserved.ticket, reserved.free.expect("reserved"));
    if publish {
        let mut buf = vec![0; ring.entry_bytes as usize];
        let used = LINE_BYTES as usize * 2;
        RingGeometry::encode(&mut buf, 5, ticket, b"dead", b"", used);
        memory.write(ring.entry(ticket), &buf[..used]);
        memory.write_back(ring.entry(ticket), used);
        memory.fence();
        ring.state(pod, ticket)
            .compare_exchange(
                free,
                pack(ticket, REQUEST),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .expect("publishes");
    }
    ticket
}

/// A sender that dies after it reserved a ticket and before it published its request
/// stops the server at that ticket: no later request is served (each gives up after
/// its wait). Its recovery withdraws the reservation: the server skips it and serves
/// the next call.
#[test]
fn a_sender_that_died_before_its_publish_is_withdrawn_by_its_recovery() {
    let (pod, ring, sender, server) = sides(4);
    let dead = host_memory(&pod, 3);
    let ticket = reserve_and_die(&ring, &pod, &dead, false);
    assert_eq!(ring.sender(&pod, ticket).load(Ordering::Relaxed), DEAD);
    assert_eq!(ring.recover_sender(&pod, DEAD), 1);
    assert_eq!(ring.sender(&pod, ticket).load(Ordering::Relaxed), 0);
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
    assert_eq!(ring.recover_sender(&pod, DEAD), 0, "it holds nothing now");
}

/// A sender that dies between taking an entry's sender word and its ticket holds the
/// word: every sender after it waits for the entry. Its recovery lets go of the word
/// (it reserved nothing: the entry stays free for its ticket).
#[test]
fn a_sender_that_died_holding_an_entrys_word_lets_go_of_it_in_its_recovery() {
    let (pod, ring, sender, server) = sides(2);
    ring.sender(&pod, 0).store(DEAD, Ordering::SeqCst);
    assert_eq!(ring.recover_sender(&pod, DEAD), 1);
    assert_eq!(ring.state(&pod, 0).load(Ordering::Relaxed), pack(0, FREE));
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

/// A sender that dies after it published its request leaves the answer unread: a lap
/// later every sender finds the ring full. Its recovery frees the entry.
#[test]
fn a_sender_that_died_waiting_has_its_answer_freed_by_its_recovery() {
    let (pod, ring, sender, server) = sides(1);
    let dead = host_memory(&pod, 3);
    let ticket = reserve_and_die(&ring, &pod, &dead, true);
    assert_eq!(serve(&pod, &ring, &server, 1)[0].1, b"dead");
    assert_eq!(
        ring.state(&pod, ticket).load(Ordering::Relaxed),
        pack(ticket, RESPONSE)
    );
    assert_eq!(ring.recover_sender(&pod, DEAD), 1);
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

/// The server claims a request and dies before it answers. Its recovery answers for
/// it: a sender still waiting gets that answer, and a sender that gave up (abandoned
/// the entry) has its entry freed: the next lap's call is served (the entry stayed
/// abandoned, and every later call found the ring full).
#[test]
fn a_dead_servers_claimed_requests_are_answered_and_freed_by_its_recovery() {
    let (pod, ring, sender, server) = sides(1);
    let failed = Response {
        status: 99,
        detail: 7,
    };
    let mut buf = vec![0; ring.entry_bytes as usize];
    // Waiting: the recovery's answer reaches it. The server claims and dies, and a
    // live host recovers it, while the sender waits (in the sender's own rounds: a
    // thread of the test not run within the sender's limit would find the request
    // withdrawn, and wait for a claim for good).
    let mut recovered = false;
    let answered = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"waits",
        WAIT_LIMIT,
        &mut || {
            if !recovered && ring.claim(&pod, &()).is_some() {
                let recoverer = host_memory(&pod, 3);
                assert_eq!(ring.recover_server(&pod, &recoverer, failed), 1);
                recovered = true;
            }
            ControlFlow::Continue(())
        },
    );
    assert_eq!(answered, Ok(failed));
    // Gave up: abandoned, then freed by the recovery.
    let limit = Duration::from_millis(30);
    let mut claimed = false;
    let abandoned = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"gives up",
        limit,
        &mut || {
            claimed = claimed || ring.claim(&pod, &()).is_some();
            ControlFlow::Continue(())
        },
    );
    assert!(claimed, "claimed while the sender waited");
    assert!(abandoned.is_err(), "{abandoned:?}");
    assert_eq!(
        ring.state(&pod, 1).load(Ordering::Relaxed),
        pack(1, ABANDONED)
    );
    assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), failed), 1);
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

#[test]
fn an_unserved_call_gives_up_and_its_entry_is_free_for_the_next_sender() {
    // One entry: the second call can only have it once the server skipped the
    // withdrawn request.
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let limit = Duration::from_millis(50);
    let mut served_own_ring = 0;
    let unanswered = call_serving(&ring, &pod, &sender, &mut buf, b"first", limit, &mut || {
        served_own_ring += 1;
        ControlFlow::Continue(())
    });
    let waited_ms = unanswered.expect_err("nobody serves the ring");
    assert!(
        waited_ms >= limit.as_millis() as u64,
        "gave up after {waited_ms} ms"
    );
    assert!(
        served_own_ring > 0,
        "the sender serves its own ring while it waits"
    );
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::Relaxed),
        pack(0, WITHDRAWN)
    );
    assert!(
        ring.pending(&pod),
        "a withdrawn request waits to be skipped"
    );

    let seen = std::thread::scope(|scope| {
        let serving = scope.spawn(|| serve(&pod, &ring, &server, 1));
        let response = call(&ring, &pod, &sender, &mut buf, (2, b"second", b""));
        assert_eq!(response, Ok(answer(2, b"second", b"")));
        serving.join().expect("the server")
    });
    assert_eq!(seen, vec![(2, b"second".to_vec(), Vec::new())]);
    assert_eq!(ring.state(&pod, 0).load(Ordering::Relaxed), pack(2, FREE));
    assert_eq!(ring.head(&pod).load(Ordering::Relaxed), 2);
    assert_eq!(ring.tail(&pod).load(Ordering::Relaxed), 2);
}

/// A sender paused past its lease while it waits for its answer is recovered
/// meanwhile (`recover_sender` withdraws its unclaimed request, abandons a claimed
/// one, frees an answer). Resumed, it must give up: the entry is no longer its own.
/// (It waited for good: no state of its ticket it knew came again.)
#[test]
fn a_sender_recovered_while_it_waited_gives_up_when_it_resumes() {
    for stage in ["unclaimed", "claimed", "answered"] {
        let (pod, ring, sender, server) = sides(2);
        let mut buf = vec![0; ring.entry_bytes as usize];
        let limit = Duration::from_millis(20);
        let started = std::time::Instant::now();
        let mut recovered = false;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            call_serving(
                &ring,
                &pod,
                &sender,
                &mut buf,
                b"paused",
                limit,
                &mut || {
                    if !recovered {
                        match stage {
                            "claimed" => drop(ring.claim(&pod, &()).expect("claims")),
                            "answered" => drop(serve(&pod, &ring, &server, 1)),
                            _ => {}
                        }
                        // Paused here past its lease: its host is recovered.
                        assert_eq!(ring.recover_sender(&pod, SENDER), 1);
                        recovered = true;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(2),
                        "{stage}: still waiting 2 s after a {limit:?} limit"
                    );
                    ControlFlow::Continue(())
                },
            )
        }));
        let outcome = outcome.unwrap_or_else(|panic| {
            panic!(
                "{}",
                panic.downcast_ref::<String>().cloned().unwrap_or_default()
            )
        });
        assert!(outcome.is_err(), "{stage}: {outcome:?}");
    }
}

#[test]
fn the_ticket_echo_holds_over_many_laps_of_two_senders() {
    const ENTRIES: u64 = 4;
    const SENDERS: u64 = 2;
    const CALLS_PER_SENDER: u64 = 150;
    let (pod, ring) = ring_pod(ENTRIES);
    let server = host_memory(&pod, 100);
    let requests = (SENDERS * CALLS_PER_SENDER) as usize;
    std::thread::scope(|scope| {
        let serving = scope.spawn(|| serve(&pod, &ring, &server, requests));
        for sender in 0..SENDERS {
            let (pod, ring) = (&pod, &ring);
            scope.spawn(move || {
                let memory = host_memory(pod, sender + 1);
                let mut buf = vec![0; ring.entry_bytes as usize];
                for n in 0..CALLS_PER_SENDER {
                    let op = 1 + (n % 200) as u8;
                    let key = format!("sender {sender} call {n}");
                    let payload = vec![n as u8; (n % PAYLOAD_BYTES) as usize];
                    let response =
                        call(ring, pod, &memory, &mut buf, (op, key.as_bytes(), &payload));
                    assert_eq!(response, Ok(answer(op, key.as_bytes(), &payload)), "{key}");
                }
            });
        }
        assert_eq!(serving.join().expect("the server").len(), requests);
    });
    let tickets = SENDERS * CALLS_PER_SENDER;
    assert!(tickets > 10 * ENTRIES, "many laps");
    assert_eq!(ring.tail(&pod).load(Ordering::Relaxed), tickets);
    assert_eq!(ring.head(&pod).load(Ordering::Relaxed), tickets);
    for ticket in tickets..tickets + ENTRIES {
        assert_eq!(
            ring.state(&pod, ticket).load(Ordering::Relaxed),
            pack(ticket, FREE),
            "entry {} is free for the next lap",
            ticket % ENTRIES
        );
    }
}
/// Many senders on a ring of two entries, each giving up now and then
/// (short limits, breaks), a server that answers late at random: every answer a
/// sender gets is its own request's, and the ring serves on afterwards.
#[test]
fn many_senders_giving_up_on_a_small_ring_get_only_their_own_answers() {
    const ENTRIES: u64 = 2;
    const SENDERS: u64 = 4;
    const CALLS: u64 = 400;
    let (pod, ring) = ring_pod(ENTRIES);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let serving = scope.spawn(|| {
            let server = host_memory(&pod, 100);
            let mut buf = vec![0; ring.entry_bytes as usize];
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut served = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let Some(claimed) = ring.claim(&pod, &()) else {
                    std::thread::yield_now();
                    continue;
                };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng.is_multiple_of(4) {
                    std::thread::sleep(Duration::from_micros(rng % 3000));
                }
                let request = ring.read(&server, claimed, &mut buf, &());
                let key = buf[request.key.clone()].to_vec();
                let payload = buf[request.payload.clone()].to_vec();
                if rng % 8 == 1 {
                    std::thread::sleep(Duration::from_micros(rng % 3000));
                }
                let response = answer(request.op, &key, &payload);
                ring.respond(&pod, &server, claimed, &mut buf, response, &());
                served += 1;
            }
            served
        });
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let (pod, ring) = (&pod, &ring);
                scope.spawn(move || {
                    let memory = host_memory(pod, sender + 1);
                    let mut buf = vec![0; ring.entry_bytes as usize];
                    let mut rng = 0x1234_5678u64 + sender * 7919;
                    let mut ok = 0;
                    for n in 0..CALLS {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let op = 1 + (n % 200) as u8;
                        let key = format!("s{sender} c{n}");
                        let payload = vec![n as u8; (rng % PAYLOAD_BYTES) as usize];
                        let limit = Duration::from_micros(500 + rng % 5000);
                        let mut rounds = 0u64;
                        let breaks_at = if rng % 8 == 3 { rng % 64 } else { u64::MAX };
                        let response = ring.call(
                            pod,
                            &memory,
                            sender + 1,
                            &mut buf,
                            op,
                            key.as_bytes(),
                            &payload,
                            limit,
                            &(),
                            &mut || {
                                rounds += 1;
                                if rounds == breaks_at {
                                    ControlFlow::Break(())
                                } else {
                                    ControlFlow::Continue(())
                                }
                            },
                        );
                        if let Ok(response) = response {
                            assert_eq!(response, answer(op, key.as_bytes(), &payload), "{key}");
                            ok += 1;
                        }
                    }
                    ok
                })
            })
            .collect();
        let ok: u64 = senders.into_iter().map(|s| s.join().expect("sender")).sum();
        // Drain: the server skips what is left, then one more call is served.
        let sender = host_memory(&pod, 50);
        let mut buf = vec![0; ring.entry_bytes as usize];
        let last = ring.call(
            &pod,
            &sender,
            77,
            &mut buf,
            3,
            b"last",
            b"",
            WAIT_LIMIT,
            &(),
            &mut || ControlFlow::Continue(()),
        );
        stop.store(true, Ordering::SeqCst);
        let served = serving.join().expect("server");
        assert_eq!(last, Ok(answer(3, b"last", b"")), "ok {ok} served {served}");
        eprintln!("ok {ok} of {} served {served}", SENDERS * CALLS);
    });
    let tail = ring.tail(&pod).load(Ordering::SeqCst);
    assert_eq!(ring.head(&pod).load(Ordering::SeqCst), tail);
    for ticket in tail..tail + ENTRIES {
        assert_eq!(
            ring.state(&pod, ticket).load(Ordering::SeqCst),
            pack(ticket, FREE)
        );
        assert_eq!(ring.sender(&pod, ticket).load(Ordering::SeqCst), 0);
    }
}
/// Recovery of a sender that was only paused, and resumes while it is
/// recovered (the module's own case): it reads its answer, frees the entry and lets go
/// of its word between recovery's look at the word and its CAS; a live sender then
/// reserves the entry's next lap and publishes. Recovery's CAS fails, and it settles
/// the entry again from the state it now finds, the live sender's, without looking
/// whose it is: it withdrew a live request, and the live sender's call failed with
/// the server alive and serving.
#[test]
fn a_senders_recovery_leaves_a_live_senders_next_lap_alone() {
    let (pod, ring, _sender, server) = sides(1);
    let dead = host_memory(&pod, 3);
    let ticket = reserve_and_die(&ring, &pod, &dead, true);
    assert_eq!(serve(&pod, &ring, &server, 1)[0].1, b"dead");
    let live: LaterCall = Arc::default();
    let (in_hook, ring_in_hook, live_in_hook) = (Arc::clone(&pod), ring.clone(), Arc::clone(&live));
    set_seam(&BEFORE_RECOVERY_CAS, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // The paused sender resumes: reads its answer, frees the entry, lets go.
        ring.state(pod, ticket)
            .compare_exchange(
                pack(ticket, RESPONSE),
                pack(ticket + 1, FREE),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .expect("frees its answer");
        ring.let_go(pod, ticket, DEAD);
        // A live sender (another host) calls and publishes on the next lap.
        *live_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 1, (2, b"live")));
        wait_for_state(
            pod,
            ring,
            ticket + 1,
            pack(ticket + 1, REQUEST),
            "the live call publishes",
        );
    });
    ring.recover_sender(&pod, DEAD);
    let live = live.lock().unwrap().take().expect("the live sender");
    let mut serving = vec![0; ring.entry_bytes as usize];
    while !live.is_finished() {
        serve_waiting(&pod, &ring, &server, &mut serving);
        std::thread::yield_now();
    }
    assert_eq!(
        live.join().expect("the live sender"),
        Ok(answer(2, b"live", b"")),
        "a live sender's request, settled by another sender's recovery"
    );
}
/// A call started in a hook, joined by the test.
type LaterCall = Arc<std::sync::Mutex<Option<std::thread::JoinHandle<Result<Response, u64>>>>>;

/// A server only paused between its claim and its answer is
/// recovered; it resumes while `recover_server` is between its load of the claimed
/// state and its write of the answer's header: it answers, its sender reads the
/// answer and frees the entry, and a live sender publishes the entry's next lap.
/// Recovery then writes its header (the old ticket) over the live request: the next
/// server's read panics ("not its sender's"), and the live sender gets the panic's
/// answer instead of its own.
#[test]
fn a_servers_recovery_writes_no_header_over_a_live_request() {
    let (pod, ring, _sender, server) = sides(1);
    let gone = GONE;
    // The first call, claimed by the server that will be paused.
    let first = call_on_thread(&pod, &ring, 1, (1, b"first"));
    let claimed = claim_when_sent(&pod, &ring);
    let mut old_buf = vec![0; ring.entry_bytes as usize];
    ring.read(&server, claimed, &mut old_buf, &());
    let second: LaterCall = Arc::default();
    let (in_hook, ring_in_hook, second_in_hook) =
        (Arc::clone(&pod), ring.clone(), Arc::clone(&second));
    let old_server = host_memory(&pod, 2);
    set_seam(&BEFORE_SERVER_ANSWER, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // The paused server resumes and answers; its sender reads the answer.
        let answer_first = answer(1, b"first", b"");
        ring.respond(pod, &old_server, claimed, &mut old_buf, answer_first, &());
        wait_for_state(pod, ring, 1, pack(1, FREE), "the first call reads");
        // A live sender publishes on the entry's next lap.
        *second_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 5, (2, b"second")));
        wait_for_state(pod, ring, 1, pack(1, REQUEST), "the second call publishes");
    });
    ring.recover_server(&pod, &host_memory(&pod, 3), gone);
    assert_eq!(first.join().expect("first"), Ok(answer(1, b"first", b"")));
    // The id's next life serves the ring (as the core's server does: a panic in
    // `read` answers `on_panic`).
    let second = second.lock().unwrap().take().expect("the second sender");
    let next = host_memory(&pod, 4);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let claimed = claim_when_sent(&pod, &ring);
        ring.serve(&pod, &next, claimed, &mut buf, &(), gone, |request, buf| {
            answer(request.op, &buf[request.key.clone()], b"")
        });
    }));
    let second = second.join().expect("the second sender");
    assert!(
        served.is_ok(),
        "the next life's server panicked on a live request"
    );
    assert_eq!(second, Ok(answer(2, b"second", b"")));
}
/// A sender paused past its lease between the answer's state and its
/// read of the answer's line is recovered (its answer freed), and a live sender
/// publishes the entry's next lap. Resumed, it reads the live request's header: it
/// must give up as a recovered sender does (`Err`), not panic on the ticket echo.
#[test]
fn a_sender_recovered_before_it_read_its_answer_gives_up() {
    let (pod, ring, sender, server) = sides(1);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let live: LaterCall = Arc::default();
    let (in_hook, ring_in_hook, live_in_hook) = (Arc::clone(&pod), ring.clone(), Arc::clone(&live));
    set_seam(&BEFORE_RESPONSE_READ, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        assert_eq!(ring.recover_sender(pod, SENDER), 1);
        *live_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 5, (2, b"live")));
        wait_for_state(pod, ring, 1, pack(1, REQUEST), "the live call publishes");
    });
    let mut serving = vec![0; ring.entry_bytes as usize];
    let mut served = false;
    let resumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        call_serving(
            &ring,
            &pod,
            &sender,
            &mut buf,
            b"paused",
            WAIT_LIMIT,
            &mut || {
                if !served {
                    served = serve_waiting(&pod, &ring, &server, &mut serving) > 0;
                }
                ControlFlow::Continue(())
            },
        )
    }));
    let live = live.lock().unwrap().take().expect("the live sender");
    while !live.is_finished() {
        serve_waiting(&pod, &ring, &server, &mut serving);
        std::thread::yield_now();
    }
    assert_eq!(live.join().expect("live"), Ok(answer(2, b"live", b"")));
    let resumed = resumed.unwrap_or_else(|panic| {
        panic!(
            "the resumed sender panicked: {}",
            panic.downcast_ref::<String>().cloned().unwrap_or_default()
        )
    });
    assert!(resumed.is_err(), "{resumed:?}");
}
/// The fix's own case: a server's recovery that dies after it took
/// a claimed request for answering leaves it answering; its sender gives up on it
/// (abandons it), and the next recovery frees it: the ring serves on. And one still
/// awaited is answered by the next recovery.
#[test]
fn a_request_left_answering_is_answered_or_freed_by_the_next_recovery() {
    let (pod, ring, sender, server) = sides(1);
    let gone = GONE;
    let mut buf = vec![0; ring.entry_bytes as usize];
    let state = ring.state(&pod, 0);
    let limit = Duration::from_millis(20);
    // Claimed by the server, taken by a recovery that died at once.
    let given_up = call_serving(&ring, &pod, &sender, &mut buf, b"x", limit, &mut || {
        if ring.claim(&pod, &()).is_some() {
            state.store(pack(0, ANSWERING), Ordering::SeqCst);
        }
        ControlFlow::Continue(())
    });
    assert!(given_up.is_err());
    assert_eq!(state.load(Ordering::SeqCst), pack(0, ABANDONED_ANSWERING));
    assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), gone), 1);
    assert_eq!(state.load(Ordering::SeqCst), pack(1, FREE));
    // Awaited: the next recovery answers it.
    let mut recovered = false;
    let answered = call_serving(
        &ring,
        &pod,
        &sender,
        &mut buf,
        b"y",
        WAIT_LIMIT,
        &mut || {
            if !recovered && ring.claim(&pod, &()).is_some() {
                state.store(pack(1, ANSWERING), Ordering::SeqCst);
                assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), gone), 1);
                recovered = true;
            }
            ControlFlow::Continue(())
        },
    );
    assert_eq!(answered, Ok(gone));
    assert_eq!(
        next_call(&pod, &ring, &sender, &server),
        Ok(answer(2, b"next", b""))
    );
}

/// a server's recoverer takes a claimed request for answering and is
/// paused before its header; it is taken over, and a second recovery of the same
/// server answers the request (answering is not the first recoverer's), its sender
/// reads the answer and frees the entry, and a live sender publishes the entry's next
/// lap. The first recoverer resumes and writes its header over the live request.
#[test]
fn a_paused_recoverer_writes_no_header_over_a_live_request() {
    let (pod, ring, _sender, server) = sides(1);
    let gone = GONE;
    let first = call_on_thread(&pod, &ring, 1, (1, b"first"));
    // The dead server's claim.
    let _claimed = claim_when_sent(&pod, &ring);
    let second: LaterCall = Arc::default();
    let (in_hook, ring_in_hook, second_in_hook) =
        (Arc::clone(&pod), ring.clone(), Arc::clone(&second));
    set_seam(&BEFORE_RECOVERY_HEADER, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // The recoverer that took over does the whole recovery.
        assert_eq!(ring.recover_server(pod, &host_memory(pod, 6), gone), 1);
        wait_for_state(pod, ring, 1, pack(1, FREE), "the first call reads");
        *second_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 5, (2, b"second")));
        wait_for_state(pod, ring, 1, pack(1, REQUEST), "the second call publishes");
    });
    ring.recover_server(&pod, &host_memory(&pod, 3), gone);
    assert_eq!(first.join().expect("first"), Ok(gone));
    let second = second.lock().unwrap().take().expect("the second sender");
    let mut buf = vec![0; ring.entry_bytes as usize];
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let claimed = claim_when_sent(&pod, &ring);
        ring.serve(
            &pod,
            &server,
            claimed,
            &mut buf,
            &(),
            gone,
            |request, buf| answer(request.op, &buf[request.key.clone()], b""),
        );
    }));
    let second = second.join().expect("the second sender");
    assert!(
        served.is_ok(),
        "the next life's server panicked on a live request"
    );
    assert_eq!(second, Ok(answer(2, b"second", b"")));
}

/// a server's recoverer loads the head and is paused (here at its
/// first claimed entry, before its CAS); it is taken over, a second recovery of the
/// same server settles everything, the id's next life serves the ring and claims the
/// request at that head. The first recoverer resumes, finds that live claim at the
/// head it loaded, takes it for the dead server's and answers it "gone": the live
/// server's effect runs, and its sender is told the server is gone.
#[test]
fn a_paused_recoverer_leaves_the_next_servers_claim_alone() {
    let (pod, ring, _sender, server) = sides(2);
    let gone = GONE;
    let first = call_on_thread(&pod, &ring, 1, (1, b"first"));
    // The dead server's claim of ticket 0 (the head at 1).
    let _claimed = claim_when_sent(&pod, &ring);
    let second: LaterCall = Arc::default();
    let live_claim: Arc<std::sync::Mutex<Option<Claimed>>> = Arc::default();
    let (in_hook, ring_in_hook, second_in_hook, claim_in_hook) = (
        Arc::clone(&pod),
        ring.clone(),
        Arc::clone(&second),
        Arc::clone(&live_claim),
    );
    set_seam(&BEFORE_SERVER_ANSWER, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // The recoverer that took over does the whole recovery.
        assert_eq!(ring.recover_server(pod, &host_memory(pod, 6), gone), 1);
        wait_for_state(pod, ring, 0, pack(2, FREE), "the first call reads");
        // The id's next life serves; a live sender calls; it is claimed.
        *second_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 5, (2, b"second")));
        *claim_in_hook.lock().unwrap() = Some(claim_when_sent(pod, ring));
    });
    ring.recover_server(&pod, &host_memory(&pod, 3), gone);
    assert_eq!(first.join().expect("first"), Ok(gone));
    // The live server answers its claim.
    let claimed = live_claim.lock().unwrap().take().expect("the live claim");
    let mut buf = vec![0; ring.entry_bytes as usize];
    ring.serve(
        &pod,
        &server,
        claimed,
        &mut buf,
        &(),
        gone,
        |request, buf| answer(request.op, &buf[request.key.clone()], b""),
    );
    let second = second.lock().unwrap().take().expect("the second sender");
    assert_eq!(
        second.join().expect("the second sender"),
        Ok(answer(2, b"second", b"")),
        "a live server's answer replaced by a paused recoverer's"
    );
}

/// a server paused in `claim` before its skip of a withdrawn request
/// is recovered, and the id's next life serves on; a live sender publishes. The old
/// server resumes: its skip's CAS and its move of the head fail (as they should), but
/// its loop goes on from the head the next life moved, and claims the live request:
/// a dead server (killed now, say) holds it; the live sender's call fails with the
/// next life serving, and the entry is abandoned for good.
#[test]
fn a_server_resumed_in_its_skip_claims_nothing_more() {
    let (pod, ring, sender, server) = sides(2);
    withdrawn_call(&pod, &ring, &sender);
    let live: LaterCall = Arc::default();
    let (in_hook, ring_in_hook, live_in_hook) = (Arc::clone(&pod), ring.clone(), Arc::clone(&live));
    set_seam(&BEFORE_SKIP_STORE, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        recovered_then_served_by_the_next_life(pod, ring);
        // A live sender publishes ticket 4.
        let (pod2, ring2) = (Arc::clone(pod), ring.clone());
        *live_in_hook.lock().unwrap() = Some(std::thread::spawn(move || {
            let memory = host_memory(&pod2, 5);
            let mut buf = vec![0; ring2.entry_bytes as usize];
            call_serving(
                &ring2,
                &pod2,
                &memory,
                &mut buf,
                b"live",
                Duration::from_millis(200),
                &mut || ControlFlow::Continue(()),
            )
        }));
        wait_for_state(pod, ring, 4, pack(4, REQUEST), "the live call publishes");
    });
    // The old server, in its claim: paused at the skip (the hook), then resumed; it
    // is killed after `claim` returns (whatever it claimed is never answered).
    let resumed = ring.claim(&pod, &());
    let live = live.lock().unwrap().take().expect("the live sender");
    let mut serving = vec![0; ring.entry_bytes as usize];
    while !live.is_finished() {
        serve_waiting(&pod, &ring, &server, &mut serving);
        std::thread::yield_now();
    }
    let live = live.join().expect("the live sender");
    assert_eq!(
        (resumed.map(|c| c.ticket()), live),
        (None, Ok(answer(1, b"live", b""))),
        "a recovered server resumed in its claim loop claimed a live request"
    );
}

/// A recoverer of the id's previous life is paused at its
/// first claimed entry (head loaded: 1) and taken over; the take-over settles
/// everything; the id's next life serves and claims the request at ticket 1, the
/// head the paused recoverer loaded, and is between its claim's CAS and its `pass`
/// (the head not moved yet). The paused recoverer resumes: the head is still the one
/// it loaded, so it takes the live claim for the dead server's and answers it "gone".
/// The live server then runs the request's effect: the sender was told the server is
/// gone while its request took effect (a look at the head alone missed it).
#[test]
fn a_paused_recoverer_leaves_a_claim_alone_before_its_servers_pass() {
    let (pod, ring, _sender, server) = sides(2);
    let gone = GONE;
    let first = call_on_thread(&pod, &ring, 1, (1, b"first"));
    // The dead (previous life's) server's claim of ticket 0 (the head at 1).
    let _claimed = claim_when_sent(&pod, &ring);
    let second: LaterCall = Arc::default();
    type Live = Arc<std::sync::Mutex<Option<std::thread::JoinHandle<bool>>>>;
    let live: Live = Arc::default();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (in_hook, ring_in_hook, second_in_hook, live_in_hook) = (
        Arc::clone(&pod),
        ring.clone(),
        Arc::clone(&second),
        Arc::clone(&live),
    );
    set_seam(&BEFORE_SERVER_ANSWER, move || {
        let (pod, ring) = (&in_hook, &ring_in_hook);
        // The recoverer that took over does the whole recovery.
        assert_eq!(ring.recover_server(pod, &host_memory(pod, 6), gone), 1);
        wait_for_state(pod, ring, 0, pack(2, FREE), "the first call reads");
        // A live sender calls (ticket 1).
        *second_in_hook.lock().unwrap() = Some(call_on_thread(pod, ring, 5, (2, b"second")));
        // The id's next life claims it and is paused before its pass.
        let (pod3, ring3) = (Arc::clone(pod), ring.clone());
        let (claimed_tx, claimed_rx) = std::sync::mpsc::channel::<()>();
        *live_in_hook.lock().unwrap() = Some(std::thread::spawn(move || {
            set_seam(&BEFORE_CLAIM_PASS, move || {
                claimed_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            wait_for_state(&pod3, &ring3, 1, pack(1, REQUEST), "the second call");
            // (None: the head was moved under its claim, the recoverer answers.)
            let Some(claimed) = ring3.claim(&pod3, &()) else {
                return false;
            };
            let memory = host_memory(&pod3, 4);
            let mut buf = vec![0; ring3.entry_bytes as usize];
            let mut effect = false;
            ring3.serve(
                &pod3,
                &memory,
                claimed,
                &mut buf,
                &(),
                gone,
                |request, buf| {
                    effect = true; // the request's effect runs
                    answer(request.op, &buf[request.key.clone()], b"")
                },
            );
            effect
        }));
        claimed_rx.recv_timeout(WAIT_LIMIT).expect("the live claim");
        assert_eq!(ring.state(pod, 1).load(Ordering::SeqCst), pack(1, CLAIMED));
    });
    ring.recover_server(&pod, &host_memory(&pod, 3), gone);
    go_tx.send(()).unwrap();
    assert_eq!(first.join().expect("first"), Ok(gone));
    let effect = live
        .lock()
        .unwrap()
        .take()
        .expect("live")
        .join()
        .expect("live server");
    let second = second.lock().unwrap().take().expect("the second sender");
    let second = second.join().expect("the second sender");
    assert!(
        !(effect && second == Ok(gone)),
        "the live server ran the request's effect, and its sender was told 'gone': \
         effect {effect}, answer {second:?}"
    );
    let _ = server;
}

/// A server's claim of lap 0's request at `state`, up to its CAS (a server that dies
/// before it moves the head).
fn claim_by_hand(state: &AtomicU64) {
    state
        .compare_exchange(
            pack(0, REQUEST),
            pack(0, CLAIMED),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .expect("claims");
}

/// A recovery of ring `ring`'s dead server, on a thread of its own, killed right after
/// its CAS of a claimed request to answering (its seam panics: nothing of the ring's
/// code runs after it, as after a kill).
fn recovery_killed_after_its_cas_to_answering(pod: &Arc<Pod>, ring: &RingGeometry) {
    let (pod, ring) = (Arc::clone(pod), ring.clone());
    let killed = std::thread::spawn(move || {
        set_seam(&BEFORE_RECOVERY_HEADER, || {
            panic!("the recoverer is killed")
        });
        ring.recover_server(&pod, &host_memory(&pod, 6), GONE)
    })
    .join();
    assert!(
        killed.is_err(),
        "the recoverer ran past its seam: {killed:?}"
    );
}

/// A server dies between its claim's CAS and its
/// move of the head (the claim at the head), and its recoverer is killed right after it
/// moved the head past the claim and took it for answering. The sender waits on (to it
/// answering is claimed); the next recovery of the same server (the host's take-over of
/// a recovery whose recoverer is gone: the dead server's row is released only once a
/// recovery of it is done) answers it "gone", and the id's next life serves the ring,
/// the entry's next lap included.
#[test]
fn a_recoverer_killed_after_its_cas_to_answering_leaves_the_answer_to_the_next_recovery() {
    let (pod, ring, _sender, _server) = sides(2);
    let first = call_on_thread(&pod, &ring, 1, (1, b"first"));
    wait_for_state(&pod, &ring, 0, pack(0, REQUEST), "the first call publishes");
    // `claim` up to its CAS: the server dies before it moves the head.
    claim_by_hand(ring.state(&pod, 0));
    recovery_killed_after_its_cas_to_answering(&pod, &ring);
    assert_eq!(
        (
            ring.state(&pod, 0).load(Ordering::SeqCst),
            ring.head(&pod).load(Ordering::SeqCst)
        ),
        (pack(0, ANSWERING), 1),
        "the killed recoverer moved the head past the claim and took it for answering"
    );
    assert!(
        !first.is_finished(),
        "the sender waits on an answering request"
    );
    // The next recovery of the same server finds it below the head it loads.
    assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), GONE), 1);
    assert_eq!(first.join().expect("first"), Ok(GONE));
    // Nothing left to settle; the next life serves tickets 1, 2 (entry 0's next lap), 3.
    recovered_then_served_by_the_next_life(&pod, &ring);
}

/// The same with the sender giving up first (the next recovery comes after twice its
/// limit): it is told its limit, the entry is abandoned-answering, and the next recovery
/// of the server frees it; the next life serves the ring on, the entry's next lap
/// included. (Until that recovery the entry is taken: a lap later every call waits.)
#[test]
fn a_request_abandoned_after_its_recoverer_was_killed_is_freed_by_the_next_recovery() {
    let (pod, ring, sender, _server) = sides(2);
    let mut buf = vec![0; ring.entry_bytes as usize];
    let limit = Duration::from_millis(30);
    // In the sender's own rounds (no thread of the test can come too late): the dead
    // server's claim (the head at 1), then its recoverer, killed.
    let mut killed = false;
    let given_up = call_serving(&ring, &pod, &sender, &mut buf, b"x", limit, &mut || {
        if !killed && ring.claim(&pod, &()).is_some() {
            recovery_killed_after_its_cas_to_answering(&pod, &ring);
            killed = true;
        }
        ControlFlow::Continue(())
    });
    assert!(
        killed,
        "claimed and taken for answering while the sender waited"
    );
    let waited_ms = given_up.expect_err("nobody answers");
    assert!(waited_ms >= 2 * limit.as_millis() as u64, "{waited_ms} ms");
    assert_eq!(
        ring.state(&pod, 0).load(Ordering::SeqCst),
        pack(0, ABANDONED_ANSWERING)
    );
    assert_eq!(ring.recover_server(&pod, &host_memory(&pod, 3), GONE), 1);
    assert_eq!(ring.state(&pod, 0).load(Ordering::SeqCst), pack(2, FREE));
    recovered_then_served_by_the_next_life(&pod, &ring);
}

/// A ring asked of application areas too small for it, or with entries it cannot lay out,
/// is refused by a typed error that names what it needs, not laid over what follows the
/// areas.
#[test]
fn a_ring_larger_than_the_application_areas_is_refused() {
    let entry_bytes = entry_bytes(MAX_KEY_BYTES, PAYLOAD_BYTES);
    let config = PodConfig::new()
        .app_scr_bytes(scr_bytes(4))
        .app_lnr_bytes(3 * entry_bytes);
    let pod = Pod::create(&config, Backing::heap()).expect("pod");
    match RingGeometry::in_app_areas(&pod, 4, entry_bytes) {
        Err(Error::AppAreaTooSmall {
            region: Region::Lnr,
            needed_bytes,
            available_bytes,
            ..
        }) => {
            assert_eq!(
                (needed_bytes, available_bytes),
                (4 * entry_bytes, 3 * entry_bytes)
            );
        }
        other => panic!("a ring of 4 entries in room for 3: {other:?}"),
    }
    // A state and a sender word an entry, in whole lines: 9 entries need a line more of
    // each than the 4 the area was made for.
    let err = RingGeometry::in_app_areas(&pod, 9, entry_bytes).expect_err("9 entries");
    assert!(
        matches!(err, Error::AppAreaTooSmall { region: Region::Scr, needed_bytes, .. }
            if needed_bytes == scr_bytes(9)),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("a ring of 9 entries of 320 bytes needs"),
        "{err}"
    );
    let err = RingGeometry::in_app_areas(&pod, u64::MAX, entry_bytes).expect_err("huge");
    assert!(
        matches!(
            err,
            Error::AppAreaTooSmall {
                region: Region::Scr,
                ..
            }
        ),
        "{err:?}"
    );
    let err = RingGeometry::in_app_areas(&pod, 0, entry_bytes).expect_err("none");
    assert!(
        matches!(
            err,
            Error::ZeroSize {
                parameter: "entries"
            }
        ),
        "{err:?}"
    );
    let err = RingGeometry::in_app_areas(&pod, 3, entry_bytes + 8).expect_err("unaligned");
    assert!(
        matches!(
            err,
            Error::UnalignedSize {
                parameter: "entry_bytes",
                ..
            }
        ),
        "{err:?}"
    );
    let err = RingGeometry::in_app_areas(&pod, 3, 0).expect_err("no header");
    assert!(
        matches!(
            err,
            Error::BelowMinimum {
                parameter: "entry_bytes",
                ..
            }
        ),
        "{err:?}"
    );
    let ring = RingGeometry::in_app_areas(&pod, 3, entry_bytes).expect("3 entries fit");
    assert_eq!(ring.entries, 3);
}

/// A sender taken for dead before it took an entry's sender word (its recovery found no
/// word of it) sends nothing: once the word is its, it looks that it lives, lets the word
/// go and answers `Err`, with the tail where it was. The next sender's call is served.
#[test]
fn a_sender_taken_for_dead_before_it_holds_a_word_reserves_nothing() {
    let (pod, ring) = ring_pod(2);
    let (sender, server) = (host_memory(&pod, 1), host_memory(&pod, 2));
    let mut buf = vec![0; ring.entry_bytes as usize];
    let tail = ring.tail(&pod).load(Ordering::SeqCst);
    let called = ring.call_while(
        &pod,
        &sender,
        (DEAD, &|| false),
        &mut buf,
        (5, b"dead", b""),
        WAIT_LIMIT,
        &(),
        &mut || ControlFlow::Continue(()),
    );
    assert!(called.is_err(), "{called:?}");
    assert_eq!(
        ring.tail(&pod).load(Ordering::SeqCst),
        tail,
        "nothing reserved"
    );
    assert_eq!(
        ring.sender(&pod, tail).load(Ordering::SeqCst),
        0,
        "the word let go"
    );
    assert!(!ring.pending(&pod));
    let next = next_call(&pod, &ring, &sender, &server);
    assert_eq!(next, Ok(answer(2, b"next", b"")));
}
