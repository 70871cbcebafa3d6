//! Stops of the test process (a SIGSTOP, or a loaded machine that does not run it for a
//! while), for the tests that bound an elapsed time (the core's, through its tests'
//! `common::stops`, and the server's): a bound is checked over a span the
//! process ran through. [`timed_unstopped`] runs a test's attempt again when a watcher
//! thread, which sleeps [`TICK`] at a time, woke more than [`NOTICED`] late during the span
//! the attempt timed; only if every attempt was stopped is the bound widened by the stop.
//!
//! A stop spends the protocol's own waits (their deadlines are on the wall clock), so a
//! stopped span says little either way; widening the bound by the stop would let a defect
//! that overshoots by less than the stop through, which a run again does not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The watcher's sleep.
pub const TICK: Duration = Duration::from_millis(10);

/// A wake of the watcher this much after its last is a stop of the process (a loaded
/// machine's ordinary latency is well under it).
pub const NOTICED: Duration = Duration::from_millis(100);

/// Attempts of [`timed_unstopped`]: three stops in a row within a span of a few seconds
/// do not happen on a machine that runs the process at all.
pub const ATTEMPTS: u32 = 3;

/// What the watcher has seen: each late wake as `(slept from, woke at)`, and its last wake.
struct Seen {
    stops: Vec<(Instant, Instant)>,
    last_wake: Instant,
}

/// A thread that notes every stop of the process until dropped.
pub struct StopWatch {
    seen: Arc<Mutex<Seen>>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StopWatch {
    /// Starts the watcher thread.
    pub fn start() -> StopWatch {
        let seen = Arc::new(Mutex::new(Seen {
            stops: Vec::new(),
            last_wake: Instant::now(),
        }));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, done) = (Arc::clone(&seen), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut slept_from = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    let woke = Instant::now();
                    let mut seen = seen.lock().unwrap();
                    if woke - slept_from > NOTICED {
                        seen.stops.push((slept_from, woke));
                    }
                    seen.last_wake = woke;
                    slept_from = woke;
                }
            })
        };
        StopWatch {
            seen,
            done,
            thread: Some(thread),
        }
    }

    /// How long the process was seen stopped between `from` and `to` (a stop that ended
    /// by `to` is seen: this waits for the watcher's first wake after `to`).
    pub fn stopped_between(&self, from: Instant, to: Instant) -> Duration {
        loop {
            {
                let seen = self.seen.lock().unwrap();
                if seen.last_wake > to {
                    return seen
                        .stops
                        .iter()
                        .map(|&(slept, woke)| {
                            woke.min(to).saturating_duration_since(slept.max(from))
                        })
                        .sum();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for StopWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An attempt's value, how long the span it timed took, and how long the process was
/// seen stopped in that span (zero unless every attempt was stopped).
pub struct Timed<T> {
    /// What the attempt returned.
    pub value: T,
    /// How long the span it timed took.
    pub took: Duration,
    /// How long the process was seen stopped in that span (zero unless every attempt was).
    pub stopped: Duration,
}

/// Runs `attempt`, which returns its value and the span it timed (`from`, `to`), again
/// while the process was seen stopped in that span, at most [`ATTEMPTS`] times.
pub fn timed_unstopped<T>(mut attempt: impl FnMut() -> (T, Instant, Instant)) -> Timed<T> {
    let watch = StopWatch::start();
    let mut tries = 0;
    loop {
        tries += 1;
        let (value, from, to) = attempt();
        let took = to.saturating_duration_since(from);
        let stopped = watch.stopped_between(from, to);
        if stopped.is_zero() || tries == ATTEMPTS {
            if !stopped.is_zero() {
                eprintln!("attempt {tries} stopped for {stopped:?} of its {took:?}: the last");
            }
            return Timed {
                value,
                took,
                stopped,
            };
        }
        eprintln!("attempt {tries} stopped for {stopped:?} of its {took:?}: once more");
    }
}
