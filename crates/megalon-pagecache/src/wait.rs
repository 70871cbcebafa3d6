//! The one helper for waiting on another thread or host: spin, then yield, then sleep a
//! little longer each round, and give up past a deadline so that the caller can name whom
//! it waited for. (The core's helper is private to it; this one behaves the same.)

use std::time::{Duration, Instant};

const SPINS: u32 = 32;
const YIELDS: u32 = 32;
const MAX_SLEEP: Duration = Duration::from_micros(500);

/// A bounded wait. Call [`BoundedWait::snooze`] each time the awaited condition is false.
#[derive(Debug)]
pub(crate) struct BoundedWait {
    started: Instant,
    limit: Duration,
    rounds: u32,
}

impl BoundedWait {
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
        } else if self.rounds <= SPINS + YIELDS {
            std::thread::yield_now();
        } else {
            let sleep = Duration::from_micros(u64::from(self.rounds - SPINS - YIELDS) * 10);
            std::thread::sleep(sleep.min(MAX_SLEEP));
        }
        self.started.elapsed() < self.limit
    }

    /// Milliseconds waited so far.
    pub(crate) fn waited_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}
