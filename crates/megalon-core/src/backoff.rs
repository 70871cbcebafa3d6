//! The one helper for waiting on another host (here, in the baselines and in the page
//! cache): spin, then yield, then sleep, and give up past a deadline so that the caller
//! can name whom it waited for.

use std::time::{Duration, Instant};

#[cfg(not(megalon_loom))]
use crate::sync::spin_loop;

#[cfg(not(megalon_loom))]
const SPINS: u32 = 64;
#[cfg(not(megalon_loom))]
const YIELDS: u32 = 64;
#[cfg(not(megalon_loom))]
const MAX_SLEEP: Duration = Duration::from_micros(500);
/// In a loom model, the rounds after which a wait gives up.
#[cfg(megalon_loom)]
const MODEL_ROUNDS: u32 = 64;

#[cfg(all(test, not(megalon_loom)))]
thread_local! {
    /// Rounds this thread's waits spun (tests: which waits spin).
    pub(crate) static SPUN_ROUNDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A bounded wait: the one helper every wait on another host uses (here and in the
/// layers above). Call [`Backoff::snooze`] each time the awaited condition is false; past
/// the limit it answers `false`, and the caller returns an error naming whom it waited
/// for.
#[derive(Debug)]
pub struct Backoff {
    started: Instant,
    limit: Duration,
    rounds: u32,
    /// Rounds that spin before the first yield.
    #[cfg_attr(megalon_loom, allow(dead_code))]
    spins: u32,
}

impl Backoff {
    /// A wait that gives up after `limit`: it spins first (about 4,000 `pause`s in all,
    /// tens of microseconds), for a condition another thread is about to make true while
    /// it runs on a core of its own.
    pub fn new(limit: Duration) -> Self {
        Self {
            started: Instant::now(),
            limit,
            rounds: 0,
            #[cfg(not(megalon_loom))]
            spins: SPINS,
            #[cfg(megalon_loom)]
            spins: 0,
        }
    }

    /// A wait that gives up after `limit` and yields from its first round on, for a
    /// condition only another thread's work makes true (an RPC's answer, which the
    /// server's thread must run to give): where threads outnumber cores, a spin keeps
    /// that thread off the core it waits for.
    pub fn yielding(limit: Duration) -> Self {
        Self {
            spins: 0,
            ..Self::new(limit)
        }
    }

    /// Waits a little (longer each round). Returns `false` once the limit has passed:
    /// the caller then returns its error.
    #[cfg(not(megalon_loom))]
    pub fn snooze(&mut self) -> bool {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds <= self.spins {
            #[cfg(test)]
            SPUN_ROUNDS.with(|spun| spun.set(spun.get() + 1));
            for _ in 0..(1u32 << self.rounds.min(6)) {
                spin_loop();
            }
        } else if self.rounds <= self.spins + YIELDS {
            std::thread::yield_now();
        } else {
            let slept = self.rounds - self.spins - YIELDS;
            let sleep = Duration::from_micros(u64::from(slept) * 10);
            std::thread::sleep(sleep.min(MAX_SLEEP));
        }
        self.started.elapsed() < self.limit
    }

    /// In a loom model: yield to the other model threads; give up after a number of rounds
    /// (time means nothing in a model, and a wait that never ends would hang the model).
    #[cfg(megalon_loom)]
    pub fn snooze(&mut self) -> bool {
        self.rounds = self.rounds.saturating_add(1);
        loom::thread::yield_now();
        self.rounds < MODEL_ROUNDS
    }

    /// Whether the wait has gone past its limit (without waiting more): what a caller
    /// that snoozes unconditionally, then decides what giving up means, asks.
    #[cfg(not(megalon_loom))]
    pub fn expired(&self) -> bool {
        self.started.elapsed() >= self.limit
    }

    /// In a loom model: whether the wait has used its rounds.
    #[cfg(megalon_loom)]
    pub fn expired(&self) -> bool {
        self.rounds >= MODEL_ROUNDS
    }

    /// Snoozes the wait in `wait`, starting it (with `limit`) at the first call, so that
    /// a loop that seldom waits reads no clock until it does. Past the limit, returns the
    /// error `busy` makes of the milliseconds waited.
    pub fn snooze_or<E>(
        wait: &mut Option<Backoff>,
        limit: Duration,
        busy: impl FnOnce(u64) -> E,
    ) -> Result<(), E> {
        let backoff = wait.get_or_insert_with(|| Backoff::new(limit));
        if backoff.snooze() {
            Ok(())
        } else {
            Err(busy(backoff.waited_ms()))
        }
    }

    /// How long we have waited.
    pub fn waited(&self) -> Duration {
        self.started.elapsed()
    }

    /// How long we have waited, in whole milliseconds (what errors report).
    pub fn waited_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}
