//! Flat combining: threads of one host hand their log operations to one combiner, which
//! appends them as one batch (one CAS on `tail` per batch), replays once, and hands each
//! thread its outcome.
//!
//! A thread queues its request, then either becomes the combiner (if nobody is) or waits
//! for its outcome. A combiner serves every request queued when it starts, then lets go;
//! a waiter whose request is still queued when the combiner lets go becomes the next one.
//!
//! Each request carries its [`Settle`]: what the appender's host must do with what the
//! request's thread holds (a record's lock, a claimed record) if the outcome never reaches
//! that thread. The append runs it for requests it refuses or cannot confirm; a request
//! withdrawn from the queue unserved is answered [`Error::CombinerStalled`] and its thread
//! settles it (and, if the log is full then, answers [`Error::LogFull`] in its place: what
//! held the combiner was its wait for room).
//!
//! A request's wait limit counts from its call: a combiner gives each request of its batch
//! what is left of its limit for the wait for room in the log (a request queued behind a
//! batch that waited out its own limit waited a whole limit more). A batch waits for room
//! for all of it until its earliest limit runs out, then appends what the log has room
//! for, the earliest limits first, and the rest wait on, each within its own limit. (It
//! refused its requests one at a time as their limits ran out, each of which would have
//! fit.) Those requests wait on queued again, for the next combiner (one of their own
//! threads): the combiner's thread, whose own request may have been answered, does not
//! wait out the rest's limits before it answers its caller. A batch larger than the ring
//! is appended a ring's worth at a time, and when one of those is refused for room (all
//! of its requests out of time), the ones after it, with later limits, are queued again
//! too (they were refused with it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Settle;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::event::OwnedEvent;
use crate::replica::Outcome;
use crate::sync::Mutex;

/// One queued operation and, once served, its outcome.
#[derive(Debug)]
struct Request {
    event: OwnedEvent,
    settle: Settle,
    /// When its thread queued it.
    queued: Instant,
    outcome: Mutex<Option<Result<Outcome>>>,
}

/// Answers every request of a batch with [`Error::CombinerPanicked`] if dropped during a
/// panic of the combiner (forgotten on the normal path).
struct AnswerOnUnwind<'a>(&'a [Arc<Request>]);

impl Drop for AnswerOnUnwind<'_> {
    fn drop(&mut self) {
        for request in self.0 {
            let mut outcome = request.outcome.lock();
            if outcome.is_none() {
                *outcome = Some(Err(Error::CombinerPanicked));
            }
        }
    }
}

/// How an append answers the request at an index of its batch.
pub(crate) type Answer<'a> = dyn FnMut(usize, Result<Outcome>) + 'a;

/// The combining queue of one host.
#[derive(Debug, Default)]
pub(crate) struct Combiner {
    queue: Mutex<Vec<Arc<Request>>>,
    combining: Mutex<()>,
}

impl Combiner {
    /// Runs `event` through the combiner: `append` is called by whichever thread combines,
    /// with every queued event and its settle and what is left of each one's wait limit,
    /// and gives each event its result (by its index) through its last argument, at most
    /// once, as soon as it has it. The events it gives none are queued again, for a later
    /// batch: an append that has answered part of its batch (the log had room for part of
    /// it) leaves the rest's wait for room to their own threads.
    pub(crate) fn submit(
        &self,
        event: OwnedEvent,
        settle: Settle,
        wait_limit: Duration,
        append: impl Fn(&[(OwnedEvent, Settle)], &[Duration], &mut Answer<'_>),
    ) -> Result<Outcome> {
        let request = Arc::new(Request {
            event,
            settle,
            queued: Instant::now(),
            outcome: Mutex::new(None),
        });
        self.queue.lock().push(Arc::clone(&request));
        let mut backoff = Backoff::new(wait_limit);
        // Past the limit: the request is withdrawn only after one more look at its
        // outcome and at the combining lock (taken if free). The wait's last pause could
        // outlast the combiner's release: the request answered `CombinerStalled` while
        // the lock was free, its own thread about to combine it.
        let mut expired = false;
        loop {
            if let Some(outcome) = request.outcome.lock().take() {
                return outcome;
            }
            if let Some(_combining) = self.combining.try_lock() {
                let batch = std::mem::take(&mut *self.queue.lock());
                if !batch.is_empty() {
                    let events: Vec<(OwnedEvent, Settle)> =
                        batch.iter().map(|r| (r.event.clone(), r.settle)).collect();
                    // If `append` panics, the guard answers every taken request, so
                    // their threads do not wait for an outcome that never comes.
                    let guard = AnswerOnUnwind(&batch);
                    let limits: Vec<Duration> = batch
                        .iter()
                        .map(|r| wait_limit.saturating_sub(r.queued.elapsed()))
                        .collect();
                    let mut answered = vec![false; batch.len()];
                    append(&events, &limits, &mut |i, result| {
                        *batch[i].outcome.lock() = Some(result);
                        answered[i] = true;
                    });
                    std::mem::forget(guard);
                    // The requests it left for a later batch go back to the queue, first
                    // (their threads, this one among them, combine them next, each within
                    // what is left of its limit, or withdraw them past it).
                    let left: Vec<Arc<Request>> = batch
                        .iter()
                        .zip(&answered)
                        .filter(|(_, &answered)| !answered)
                        .map(|(request, _)| Arc::clone(request))
                        .collect();
                    if !left.is_empty() {
                        self.queue.lock().splice(0..0, left);
                    }
                    continue;
                }
                // Our request was taken by a combiner that finished between our check
                // and the lock: its outcome is there or about to be.
            }
            if expired {
                // Withdraw the request if no combiner took it; if one did, its append is
                // itself bounded, so keep waiting for the outcome rather than report a
                // failure for an operation that may still take effect.
                let mut queue = self.queue.lock();
                if let Some(at) = queue.iter().position(|r| Arc::ptr_eq(r, &request)) {
                    queue.swap_remove(at);
                    return Err(Error::CombinerStalled {
                        waited_ms: backoff.waited().as_millis() as u64,
                    });
                }
            }
            expired = !backoff.snooze();
        }
    }
}

/// The waiter's last look at its limit, under a stress of threads whose combiners answer,
/// refuse or leave requests at random (review `fresh`, 2026-12-03, found it sound).
#[cfg(all(test, not(megalon_loom)))]
mod last_look {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::Combiner;
    use crate::error::Error;
    use crate::event::{Event, OwnedEvent};
    use crate::host::Settle;
    use crate::replica::Outcome;
    use crate::sync::Mutex;

    fn id_of(event: &OwnedEvent) -> u64 {
        match event.event() {
            Event::ClaimSlots { count } => count,
            _ => unreachable!(),
        }
    }

    /// Every request answered `Ok` was appended once; one withdrawn (`CombinerStalled`)
    /// or refused was never appended, then or later; none appended twice; each call
    /// answers within its limit and one combiner's hold.
    #[test]
    fn no_request_is_both_withdrawn_and_appended() {
        let combiner = Arc::new(Combiner::default());
        let appended: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let combiner = Arc::clone(&combiner);
                let appended = Arc::clone(&appended);
                std::thread::spawn(move || {
                    let rng = std::cell::Cell::new((t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                    let draw = || {
                        let mut x = rng.get();
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        rng.set(x);
                        x
                    };
                    let mut answers = Vec::new();
                    for i in 0..300u64 {
                        let id = t << 32 | i;
                        let limit = Duration::from_micros(200 + (i % 7) * 150);
                        let event = OwnedEvent::new(&Event::ClaimSlots { count: id });
                        let called = Instant::now();
                        let answer = combiner.submit(
                            event,
                            Settle::Nothing,
                            limit,
                            |requests, limits, answer| {
                                for (index, (event, _)) in requests.iter().enumerate() {
                                    match draw() % 4 {
                                        0 | 1 => {
                                            *appended.lock().entry(id_of(event)).or_default() += 1;
                                            answer(index, Ok(Outcome::Noted));
                                        }
                                        // Refused: nothing reached the log.
                                        2 => answer(
                                            index,
                                            Err(Error::InjectedFault { fault: "refuse" }),
                                        ),
                                        // As `append_batch`: a request out of time is
                                        // answered, never left for a later batch.
                                        3 if limits[index].is_zero() => answer(
                                            index,
                                            Err(Error::InjectedFault { fault: "refuse" }),
                                        ),
                                        // Left for a later batch (the log had room
                                        // for the ones before it only).
                                        _ => {}
                                    }
                                }
                                std::thread::sleep(Duration::from_micros(draw() % 400));
                            },
                        );
                        answers.push((id, answer, called.elapsed(), limit));
                    }
                    answers
                })
            })
            .collect();
        let answers: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let appended = appended.lock();
        let mut wrong = Vec::new();
        let mut kinds = HashMap::<&str, u64>::new();
        let mut slowest = Duration::ZERO;
        for (id, answer, took, limit) in &answers {
            let times = appended.get(id).copied().unwrap_or(0);
            let kind = match answer {
                Ok(_) => "ok",
                Err(Error::CombinerStalled { .. }) => "stalled",
                Err(Error::InjectedFault { .. }) => "refused",
                Err(_) => "other",
            };
            *kinds.entry(kind).or_default() += 1;
            let right = match kind {
                "ok" => times == 1,
                "stalled" | "refused" => times == 0,
                _ => false,
            };
            if !right {
                wrong.push(format!("{id:#x}: {answer:?}, appended {times} times"));
            }
            slowest = slowest.max(took.saturating_sub(*limit));
        }
        eprintln!("{kinds:?}; slowest past its limit by {slowest:?}");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // A combiner holds the lock at most its append (a sleep under 400 us): a bound
        // far above that, for a busy machine, against a wait that never ends.
        assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    }
}
