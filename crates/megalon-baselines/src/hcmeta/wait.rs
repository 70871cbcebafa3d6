//! Bounded waiting on another thread or host: spin, then yield, then sleep a little, and
//! give up past a limit so that the caller can name whom it waited for.

use std::time::{Duration, Instant};

const SPINS: u32 = 16;
/// After spinning, a waiter yields its core until it has waited this long, then sleeps:
/// hosts emulated by threads share few cores, and the thread we wait for may need ours.
const YIELD_FOR: Duration = Duration::from_millis(1);
/// Then it sleeps this long between looks.
const SLEEP: Duration = Duration::from_micros(50);

/// A bounded wait. Call [`Backoff::snooze`] each time the awaited condition is false.
#[derive(Debug)]
pub(crate) struct Backoff {
    started: Instant,
    limit: Duration,
    rounds: u32,
}

impl Backoff {
    /// A wait that gives up after `limit`.
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            started: Instant::now(),
            limit,
            rounds: 0,
        }
    }

    /// Waits a little (longer each round). Returns `false` once the limit has passed.
    pub(crate) fn snooze(&mut self) -> bool {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds <= SPINS {
            for _ in 0..(1u32 << self.rounds.min(6)) {
                std::hint::spin_loop();
            }
        } else if self.started.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(SLEEP);
        }
        self.started.elapsed() < self.limit
    }

    /// How long we have waited, in whole milliseconds.
    pub(crate) fn waited_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}
