//! AllLog: megalon without the split (the paper's section 6.10, Figure 13). Every
//! object's lock holder and counter are replicated through the shared log instead of
//! living in a coherence record in the SCR: each write appends a `Lock` and an `Unlock`
//! event that every host replays, and no record is ever allocated.
//!
//! The protocol is the core's, on a pod created with
//! [`Coherence::AllLog`](megalon_core::Coherence) (a pod-level mode: every host must
//! follow it, so it is in the pod's header). This scheme is megalon's own [`Megalon`]
//! scheme on such a pod, so that everything but the split is the same code: the index,
//! the log, the reads, the KV framing. With no writes the two perform alike; every write
//! costs AllLog two log entries, appended once and replayed by every host, where megalon
//! pays one CAS and one store on its record.
//!
//! The pod's layout is the same as megalon's: its SCR record array is there but unused
//! (the report shows no record ever in use). What the comparison measures is the log
//! traffic, not SCR.
//!
//! ```
//! use std::sync::Arc;
//! use megalon_baselines::all_log::AllLog;
//! use megalon_core::{Backing, Coherence, HostOptions, MemoryKind, Pod, PodConfig};
//! use megalon_kv::{Scheme, Store};
//!
//! let config = PodConfig::new()
//!     .scr_bytes(64 << 10)
//!     .lnr_bytes(16 << 20)
//!     .slot_size_bytes(256)
//!     .coherence(Coherence::AllLog);
//! let pod = Arc::new(Pod::create(&config, Backing::heap())?);
//! let options = HostOptions::new().memory(MemoryKind::simulated(7));
//! let store = Store::new(AllLog::join(pod, 2, &options)?);
//! store.handle(0)?.put(b"greeting", b"hello")?;
//! assert_eq!(store.handle(1)?.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
//! store.handle(1)?.put(b"greeting", b"hello again")?;
//! let report = store.scheme().report();
//! assert_eq!(report.scheme, "all-log");
//! assert_eq!(report.counter("lock events"), Some(1));
//! assert_eq!(report.counter("record allocs"), Some(0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use megalon_core::{Coherence, EventCounts, Host, HostOptions, Pod};
use megalon_kv::{Limits, Megalon, MegalonHandle, Report, Result, Scheme};

/// megalon's scheme on a pod with [`Coherence::AllLog`]: locks and counters through the
/// log.
pub struct AllLog {
    megalon: Megalon,
}

impl AllLog {
    /// The scheme over `hosts`, which joined `pod`. Answers
    /// [`megalon_core::Error::ParameterMismatch`] (for `coherence`) if the pod was not
    /// created with [`Coherence::AllLog`].
    pub fn new(pod: Arc<Pod>, hosts: Vec<Arc<Host>>) -> Result<Self> {
        check_coherence(&pod)?;
        Ok(Self {
            megalon: Megalon::new(pod, hosts),
        })
    }

    /// Joins `count` new hosts to `pod` (the first free ids), each with `options`. The
    /// pod must have been created with [`Coherence::AllLog`], as for [`AllLog::new`].
    pub fn join(pod: Arc<Pod>, count: usize, options: &HostOptions) -> Result<Self> {
        check_coherence(&pod)?;
        Ok(Self {
            megalon: Megalon::join(pod, count, options)?,
        })
    }

    /// The pod.
    pub fn pod(&self) -> &Arc<Pod> {
        self.megalon.pod()
    }

    /// The hosts, in handle order.
    pub fn hosts(&self) -> &[Arc<Host>] {
        self.megalon.hosts()
    }

    /// The core's event counts summed over the hosts.
    pub fn events(&self) -> EventCounts {
        self.megalon.events()
    }
}

fn check_coherence(pod: &Pod) -> Result<()> {
    let coherence = pod.config().coherence;
    if coherence != Coherence::AllLog {
        return Err(megalon_core::Error::ParameterMismatch {
            parameter: "coherence",
            in_pod: coherence.to_u32().into(),
            expected: Coherence::AllLog.to_u32().into(),
        }
        .into());
    }
    Ok(())
}

impl Scheme for AllLog {
    type Handle = MegalonHandle;

    fn name(&self) -> &'static str {
        "all-log"
    }

    fn limits(&self) -> Limits {
        self.megalon.limits()
    }

    fn hosts(&self) -> usize {
        Scheme::hosts(&self.megalon)
    }

    fn handle(&self, host: usize) -> Result<MegalonHandle> {
        self.megalon.handle(host)
    }

    /// megalon's report under this scheme's name, with the lock events after the counter
    /// wraps (which AllLog never has: the log guards its counters).
    fn report(&self) -> Report {
        let mut report = self.megalon.report();
        report.scheme = self.name();
        let e = self.events();
        let at = report
            .counters
            .iter()
            .position(|(name, _)| *name == "counter wraps")
            .map_or(report.counters.len(), |i| i + 1);
        report.counters.splice(
            at..at,
            [
                ("lock events", e.lock_events),
                ("lock events lost", e.lock_events_lost),
                ("unlock events", e.unlock_events),
            ],
        );
        report
    }
}
