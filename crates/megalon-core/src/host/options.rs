//! How a host runs: its options, which id it joins as, and the hook called before an
//! object loses its record.

use std::sync::Arc;
use std::time::Duration;

use super::records::Releasing;

use crate::ids::HostId;
use crate::memory::MemoryKind;

/// Which host id to join as.
///
/// When no id is free (or the one asked for is taken) and every holder of the table is
/// dead (its process gone from this machine, or its heartbeat still for a lease, which
/// the join watches), nobody is left to recover them: the join then takes a dead holder's
/// row over (the one asked for, or the lowest) and recovers it before it completes. This
/// needs a log that has recycled nothing yet (the new host replays it from the start);
/// past that, the index of a pod whose hosts all died is nowhere, and the join answers
/// [`Error::JoinNotServed`](crate::Error::JoinNotServed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Exactly this id; an error if it is taken (but see above) or past the maximum.
    As(HostId),
    /// The lowest free id; an error if the table is full (but see above).
    AnyFree,
}

/// How a host runs.
#[derive(Clone, Debug, PartialEq)]
pub struct HostOptions {
    /// How it touches LNR.
    pub memory: MemoryKind,
    /// How often its background pump replays the log (and serves slot requests), so an
    /// idle host never holds the log's head back. It also renews the host's lease: between
    /// rounds it beats at least every eighth of the pod's lease
    /// ([`PodConfig::lease_ms`](crate::PodConfig#structfield.lease_ms)), whatever the
    /// interval. `None`: no pump and no heartbeat (tests that drive replay by hand): a
    /// host that other machines judge by its lease is declared dead once it has been idle
    /// for a lease; in a pod whose record width may switch, its gates load the width
    /// word in the SCR (they acknowledge a switch), and a switch waits for it while it
    /// neither writes nor replays.
    pub pump_interval: Option<Duration>,
    /// How long any wait on another host may last before it answers an error naming
    /// whom it waited for.
    pub wait_limit: Duration,
    /// Whether threads hand log appends to one combiner (one batch per round).
    pub flat_combining: bool,
    /// How many times the safe calls (`read`, `write`, ...) start over before answering
    /// [`Error::RetriesExhausted`](crate::Error::RetriesExhausted).
    pub max_retries: u32,
    /// The background reclaimer keeps the records in use at or below this fraction of
    /// the pod's records (1.0: reclaim only when allocation finds none free).
    pub record_watermark: f64,
    /// Called before an object loses its coherence record on this host (see
    /// [`ReleaseHook`]).
    pub release_hook: Option<ReleaseHook>,
    /// When this host's pump switches the pod's record width by itself, from what its
    /// writes see (a pod created with
    /// [`PodConfig::record_width_switch`](crate::PodConfig#structfield.record_width_switch));
    /// `None` (the default): only [`Host::switch_record_width`](crate::Host::switch_record_width)
    /// does.
    pub width_policy: Option<WidthPolicy>,
    /// Schedule chaos and injected faults for this host's threads (see
    /// [`crate::chaos`]); only in builds with the `chaos` feature.
    #[cfg(feature = "chaos")]
    pub chaos: Option<crate::chaos::ChaosConfig>,
}

/// When a host's pump switches the pod's record width
/// ([`HostOptions::width_policy`]). Every `interval`, if this host wrote at least
/// `min_writes` objects since its last look (and no switch came in the last two looks,
/// whose writes allocate every object's record anew), it halves the width when more than
/// `narrow_above_churn` of its writes allocated a record (churn in the paper's sense)
/// while at least three quarters of the records are in use (too few records for the
/// objects written), down to `narrowest_bits`; and it doubles the width when more than `widen_above_wraps`
/// of its writes appended a wrap event (a counter too short for how often objects are
/// written) while churn stayed under a quarter of its bound and the records in use would
/// fill at most half the wider array, up to `widest_bits`. A switch takes every record
/// back: the bounds keep switches rare.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WidthPolicy {
    /// How often the pump looks.
    pub interval: Duration,
    /// Writes since the last look below which the pump does not judge.
    pub min_writes: u64,
    /// Record allocations per write above which the width halves.
    pub narrow_above_churn: f64,
    /// Wrap events per write above which the width doubles.
    pub widen_above_wraps: f64,
    /// The narrowest width the pump switches to.
    pub narrowest_bits: u32,
    /// The widest width the pump switches to.
    pub widest_bits: u32,
}

impl Default for WidthPolicy {
    /// Every 200 ms, at least 2,000 writes: narrower above 1% churn, down to 8 bits (a
    /// counter of 6 bits: a wrap event every 32 writes of an object); wider above 20%
    /// wraps, up to 32 bits.
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(200),
            min_writes: 2_000,
            narrow_above_churn: 0.01,
            widen_above_wraps: 0.2,
            narrowest_bits: 8,
            widest_bits: 32,
        }
    }
}

/// Called with the record locked before an object loses its coherence record: before a
/// deallocation (reclaim, [`Host::make_read_shared`](crate::Host::make_read_shared)) appends its event, and before a
/// delete of an object that has a record does. Returning `false` refuses: the record is
/// unlocked and kept; a deallocation reports that it did not happen, a delete answers
/// [`Error::ReleaseRefused`](crate::Error::ReleaseRefused).
///
/// The page cache writes a dirty page back to disk here, so that a read-shared page is
/// always clean and an evicted page is never lost. The hook runs on whichever thread
/// releases the record (the background reclaimer, a writer that needs a record, a
/// deleter); it must not call back into this host's object API for the same object. On
/// the reclaimer it runs on the pump's thread, which beats the host's lease: a hook that
/// takes longer than the lease (a write to a slow disk) gets a host that other machines
/// judge by its lease declared dead, and its writes then answer
/// [`Error::HostDeclaredDead`](crate::Error::HostDeclaredDead): keep it well within the
/// lease.
#[derive(Clone)]
pub struct ReleaseHook(pub Arc<dyn Fn(&Releasing<'_>) -> bool + Send + Sync>);

impl ReleaseHook {
    /// Wraps `hook`.
    pub fn new(hook: impl Fn(&Releasing<'_>) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook))
    }
}

impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook(..)")
    }
}

impl PartialEq for ReleaseHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            memory: MemoryKind::Hardware,
            pump_interval: Some(Duration::from_millis(1)),
            wait_limit: Duration::from_secs(10),
            flat_combining: true,
            max_retries: 10_000,
            record_watermark: 0.9,
            release_hook: None,
            width_policy: None,
            #[cfg(feature = "chaos")]
            chaos: None,
        }
    }
}

impl From<MemoryKind> for HostOptions {
    fn from(memory: MemoryKind) -> Self {
        Self {
            memory,
            ..Self::default()
        }
    }
}

impl HostOptions {
    /// The defaults: hardware memory, a pump every millisecond, 10 s waits, combining.
    pub fn new() -> Self {
        Self::default()
    }

    crate::setters! { HostOptions:
        memory: MemoryKind,
        pump_interval: Option<Duration>,
        wait_limit: Duration,
        max_retries: u32,
        flat_combining: bool,
    }

    /// Sets [`HostOptions::record_watermark`] (clamped to 0..=1).
    #[must_use]
    pub fn record_watermark(mut self, fraction: f64) -> Self {
        self.record_watermark = fraction.clamp(0.0, 1.0);
        self
    }

    /// Sets [`HostOptions::release_hook`].
    #[must_use]
    pub fn release_hook(mut self, hook: ReleaseHook) -> Self {
        self.release_hook = Some(hook);
        self
    }

    /// Sets [`HostOptions::width_policy`].
    #[must_use]
    pub fn width_policy(mut self, policy: WidthPolicy) -> Self {
        self.width_policy = Some(policy);
        self
    }

    /// Sets [`HostOptions::chaos`].
    #[cfg(feature = "chaos")]
    #[must_use]
    pub fn chaos(mut self, chaos: crate::chaos::ChaosConfig) -> Self {
        self.chaos = Some(chaos);
        self
    }
}
