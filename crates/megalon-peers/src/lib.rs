//! The megalon KV store beside the stores a user would pick instead, measured side by
//! side in one run on the same workload.
//!
//! The peers ([`Peer`]):
//!
//! - **megalon (threads)**: the KV store on an in-process pod, one host per worker thread
//!   (as `examples/kv.rs` runs it).
//! - **megalon (processes)**: the KV store on a pod file in `/dev/shm`, one child process
//!   per worker, each its own host (as `examples/kv_cluster.rs` runs it).
//! - **LMDB** (through `heed`): one environment in `/dev/shm`, one child process per
//!   worker, each opening it. A get is a read transaction; a put is a write transaction
//!   committed at once (LMDB lets one writer in at a time). Opened with `NO_SYNC` and
//!   `NO_META_SYNC`: on tmpfs there is no disk to sync to, and a commit is atomic and
//!   visible to the other process without it.
//! - **Redis** over a Unix socket: a `redis-server` started for the run (no persistence:
//!   `--save "" --appendonly no`, no TCP: `--port 0`), one client thread per worker in
//!   this process speaking RESP, one request at a time (no pipelining), as the KV store's
//!   calls are. Without `redis-server` the result says [`PeerError::Unavailable`] and how
//!   to install it.
//!
//! The workload is the same for every peer: keys [`megalon_bench::mix::key`] (`user` and
//! 12 digits), values of [`PeerSpec::value_bytes`], key choice by YCSB's scrambled
//! Zipfian ([`megalon_bench::mix::Draws`], the draws the benchmarks' mix makes on the KV
//! store, worker by worker), run by one loop for every peer (the default `Worker::run`
//! in `drive.rs`: the key written into one buffer, one call at a time, no clock read per
//! operation).
//! Each run loads every key, then runs one timed phase per write ratio (default: 0%, only
//! gets, then 100%, only puts), then checks a few keys: each worker writes some of them
//! with known bytes and every worker reads all of them back and compares. A get that finds
//! no key, or a value that differs, fails the peer.
//!
//! Trade-offs of the comparison: every peer runs its workers on the same cores as
//! everything else here (Redis's server thread too), so the figures compare the peers on
//! this machine, not their capacity; LMDB commits each put on its own, since each of the
//! KV store's puts is complete and visible to every host when it returns, and that is
//! LMDB's slowest way to write.
//!
//! # Children
//!
//! The multi-process peers start `std::env::current_exe()` again as their children, with
//! an environment variable naming the child's role. A binary that runs peers must call
//! [`run_child_if_requested`] first thing in `main`:
//!
//! ```no_run
//! // First thing in `main`; in a child it serves and exits, never returning.
//! megalon_peers::run_child_if_requested();
//! let spec = megalon_peers::PeerSpec::default();
//! let results = megalon_peers::run_all(&spec);
//! print!("{}", megalon_peers::table(&spec, &results));
//! ```
//!
//! Every wait is bounded ([`PeerSpec::wait_seconds`] beyond a phase's own seconds); a
//! child that fails or hangs fails its peer with its name and stderr, and is killed; every
//! child is reaped and every pod file, LMDB environment and Redis directory is removed.
//!
//! # Measured
//!
//! See `README.md` beside this crate: the table at the default spec, its command and the
//! machine.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod drive;
mod lmdb;
mod megalon;
mod redis;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use megalon_workload::processes::printed_suffix;
pub use megalon_workload::processes::ChildError;

/// The environment variable that makes a process a peer's child (its value names the role).
pub const CHILD_ROLE_ENV: &str = "MEGALON_PEERS_CHILD";

/// A store measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Peer {
    /// The megalon KV store, one host per worker thread, in this process.
    MegalonThreads,
    /// The megalon KV store, one host per child process, on a pod file.
    MegalonProcesses,
    /// LMDB through `heed`, one child process per worker, on tmpfs.
    Lmdb,
    /// Redis over a Unix socket, one client thread per worker.
    Redis,
}

impl Peer {
    /// Every peer, in the order [`run_all`] runs them by default.
    pub const ALL: [Peer; 4] = [
        Peer::MegalonThreads,
        Peer::MegalonProcesses,
        Peer::Lmdb,
        Peer::Redis,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Peer::MegalonThreads => "megalon (threads)",
            Peer::MegalonProcesses => "megalon (processes)",
            Peer::Lmdb => "LMDB (heed)",
            Peer::Redis => "Redis (unix socket)",
        }
    }
}

/// The longest phase, and the longest wait, in seconds: a year (far below what a
/// `Duration` added to an `Instant` can hold).
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerSpec {
    /// The peers [`run_all`] runs, in order.
    pub peers: Vec<Peer>,
    /// Workers of every peer: threads or child processes (one host each for megalon).
    pub workers: usize,
    /// Keys `0..keys`, all loaded before the timed phases.
    pub keys: u64,
    /// Bytes of every value.
    pub value_bytes: usize,
    /// Zipfian constant of the key choice (YCSB's scrambled Zipfian); 0: uniform.
    pub skew: f64,
    /// One timed phase per entry: the fraction of its operations that are puts.
    pub write_ratios: Vec<f64>,
    /// Seconds of each timed phase.
    pub phase_seconds: f64,
    /// Seed of every worker's draws.
    pub seed: u64,
    /// Longest wait on a child, a server or a host beyond a phase's own seconds (and for
    /// the load).
    pub wait_seconds: f64,
    /// Where pod files and LMDB environments go (default: `/dev/shm`, else the temporary
    /// directory).
    pub dir: PathBuf,
    /// The Redis server to start: a path, or a name looked up on `PATH`.
    pub redis_server: PathBuf,
    /// For tests of the harness: make the last child of a multi-process peer fail.
    pub child_fault: Option<ChildFault>,
}

/// A failure a child is told to have, to test that the parent reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildFault {
    /// Exit with status 3 when told to run the first phase.
    Exit,
    /// Stop answering when told to run the first phase (the parent's wait must end).
    Hang,
}

impl Default for PeerSpec {
    /// Every peer, 2 workers, 100,000 keys of 1 KiB, Zipfian 0.99, a get-only and a
    /// put-only phase of 3 seconds each.
    fn default() -> Self {
        PeerSpec {
            peers: Peer::ALL.to_vec(),
            workers: 2,
            keys: 100_000,
            value_bytes: 1024,
            skew: 0.99,
            write_ratios: vec![0.0, 1.0],
            phase_seconds: 3.0,
            seed: 1,
            wait_seconds: 60.0,
            dir: megalon_workload::processes::shared_memory_dir(),
            redis_server: PathBuf::from("redis-server"),
            child_fault: None,
        }
    }
}

impl PeerSpec {
    /// Refuses a spec no run can use.
    pub fn check(&self) -> Result<(), PeerError> {
        let bad = |what: &str| Err(PeerError::Spec(what.to_owned()));
        if self.workers == 0 || self.keys == 0 || self.value_bytes == 0 {
            return bad("workers, keys and value_bytes must be at least 1");
        }
        if self.workers > drive::MAX_WORKERS {
            return Err(PeerError::Spec(format!(
                "at most {} workers (the put stamp keeps 16 bits of the worker)",
                drive::MAX_WORKERS
            )));
        }
        if self.write_ratios.is_empty()
            || !self.write_ratios.iter().all(|r| (0.0..=1.0).contains(r))
        {
            return bad("write_ratios: at least one, each a fraction between 0 and 1");
        }
        if !(self.phase_seconds > 0.0 && self.phase_seconds.is_finite()) {
            return bad("phase_seconds must be positive");
        }
        if !(self.wait_seconds > 0.0 && self.wait_seconds.is_finite()) {
            return bad("wait_seconds must be positive");
        }
        // Past what a `Duration` holds (1e300), the first wait panicked making one.
        if self.phase_seconds > MAX_SECONDS || self.wait_seconds > MAX_SECONDS {
            return bad("phase_seconds and wait_seconds are at most a year (31536000)");
        }
        if !(0.0..1.0).contains(&self.skew) {
            return bad("skew is a Zipfian constant in [0, 1)");
        }
        Ok(())
    }
}

/// One timed phase of one peer, summed over its workers.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// The fraction of puts asked for.
    pub write_ratio: f64,
    /// Gets done.
    pub gets: u64,
    /// Puts done.
    pub puts: u64,
    /// The longest of the workers' own timings of the phase.
    pub seconds: f64,
    /// Gets per second: each worker's gets over its own seconds, summed.
    pub get_ops_per_second: f64,
    /// Puts per second, likewise.
    pub put_ops_per_second: f64,
}

impl Phase {
    /// Gets and puts per second.
    pub fn ops_per_second(&self) -> f64 {
        self.get_ops_per_second + self.put_ops_per_second
    }
}

/// What a peer measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    /// Gets per second of the get-only phase (write ratio 0), if there was one.
    pub get_ops_per_second: Option<f64>,
    /// Puts per second of the put-only phase (write ratio 1), if there was one.
    pub put_ops_per_second: Option<f64>,
    /// Every phase, in the spec's order.
    pub phases: Vec<Phase>,
    /// Keys inserted per second while loading.
    pub load_ops_per_second: f64,
    /// Keys whose bytes every worker read back after the phases (as written).
    pub keys_checked: u64,
}

impl Rates {
    fn from_phases(phases: Vec<Phase>, load_ops_per_second: f64, keys_checked: u64) -> Self {
        let rate = |ratio: f64, of: fn(&Phase) -> f64| {
            phases.iter().find(|p| p.write_ratio == ratio).map(of)
        };
        Rates {
            get_ops_per_second: rate(0.0, |p| p.get_ops_per_second),
            put_ops_per_second: rate(1.0, |p| p.put_ops_per_second),
            load_ops_per_second,
            keys_checked,
            phases,
        }
    }
}

/// One peer's run.
#[derive(Debug)]
pub struct PeerResult {
    /// Which peer.
    pub peer: Peer,
    /// Processes doing the work (for Redis: the server and this process).
    pub processes: usize,
    /// Workers (threads or processes) issuing operations.
    pub workers: usize,
    /// How the peer was set up: flags, versions, what a put commits.
    pub notes: Vec<String>,
    /// The rates, or why there are none.
    pub outcome: Result<Rates, PeerError>,
}

impl PeerResult {
    /// Gets per second of the get-only phase, if it ran and the peer did not fail.
    pub fn get_ops_per_second(&self) -> Option<f64> {
        self.outcome.as_ref().ok()?.get_ops_per_second
    }

    /// Puts per second of the put-only phase, if it ran and the peer did not fail.
    pub fn put_ops_per_second(&self) -> Option<f64> {
        self.outcome.as_ref().ok()?.put_ops_per_second
    }
}

/// Why a peer has no rates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer's software is not on this machine.
    #[error("unavailable: {reason} (install: {how_to_install})")]
    Unavailable {
        /// What is missing.
        reason: String,
        /// How to install it.
        how_to_install: String,
    },
    /// A spec no run can use.
    #[error("bad spec: {0}")]
    Spec(String),
    /// A child process failed, hung or could not start.
    #[error(transparent)]
    Child(#[from] ChildError),
    /// A child answered something the parent did not expect.
    #[error("{name} answered {line:?}, expected {expected}")]
    Protocol {
        /// The child's name.
        name: String,
        /// What it answered.
        line: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The megalon KV store failed.
    #[error("megalon KV store: {0}")]
    Kv(#[from] megalon_kv::Error),
    /// The megalon pod could not be made, opened or joined.
    #[error("megalon pod: {0}")]
    Pod(#[from] megalon_core::Error),
    /// LMDB failed.
    #[error("LMDB: {0}")]
    Lmdb(#[from] heed::Error),
    /// The Redis server answered an error, or something that is not RESP.
    #[error("Redis: {0}")]
    Redis(String),
    /// The Redis server did not start.
    #[error(
        "redis-server did not start: {reason}{}",
        printed_suffix("its log ends", log)
    )]
    ServerStart {
        /// Why.
        reason: String,
        /// The end of its log.
        log: String,
    },
    /// A worker's thread panicked.
    #[error("worker {worker} panicked: {message}")]
    Panicked {
        /// The worker.
        worker: usize,
        /// The panic's message.
        message: String,
    },
    /// A get found no key, though every key was loaded and nothing deletes.
    #[error("worker {worker}: {absent} gets found no key")]
    Absent {
        /// The worker.
        worker: usize,
        /// Gets that found none.
        absent: u64,
    },
    /// A value read back is not the value written.
    #[error("worker {worker} read key {key_index} back wrong: {detail}")]
    ReadBack {
        /// The worker that read it.
        worker: usize,
        /// The key's index.
        key_index: u64,
        /// How it differs.
        detail: String,
    },
    /// Files, sockets or pipes.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A new path in `dir` for one peer's files: `megalon-peers-<process>-<n>.<what>`.
fn unique_path(dir: &Path, what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("megalon-peers-{}-{n}.{what}", std::process::id()))
}

/// Removes a file, or a directory and what it holds, when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = if self.0.is_dir() {
            std::fs::remove_dir_all(&self.0)
        } else {
            std::fs::remove_file(&self.0)
        };
    }
}

/// Runs one peer on `spec`. Never panics on a peer's failure: it is in the outcome.
pub fn run(peer: Peer, spec: &PeerSpec) -> PeerResult {
    let (processes, workers) = match peer {
        Peer::MegalonThreads => (1, spec.workers),
        Peer::MegalonProcesses | Peer::Lmdb => (spec.workers, spec.workers),
        Peer::Redis => (2, spec.workers),
    };
    let mut notes = Vec::new();
    let outcome = spec.check().and_then(|()| match peer {
        Peer::MegalonThreads => megalon::run_threads(spec, &mut notes),
        Peer::MegalonProcesses => megalon::run_processes(spec, &mut notes),
        Peer::Lmdb => lmdb::run(spec, &mut notes),
        Peer::Redis => redis::run(spec, &mut notes),
    });
    PeerResult {
        peer,
        processes,
        workers,
        notes,
        outcome,
    }
}

/// Runs every peer of `spec.peers`, one after the other.
pub fn run_all(spec: &PeerSpec) -> Vec<PeerResult> {
    spec.peers.iter().map(|&peer| run(peer, spec)).collect()
}

/// If this process was started as a peer's child, runs it and exits (status 0 when it
/// did its part, 1 with the error on stderr when not); otherwise returns at once. Call it
/// first thing in `main` of any binary that runs the multi-process peers.
pub fn run_child_if_requested() {
    let Some(role) = std::env::var_os(CHILD_ROLE_ENV) else {
        return;
    };
    let code = match child_main(&role.to_string_lossy()) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("megalon-peers child: {error}");
            1
        }
    };
    std::process::exit(code);
}

/// A child's `main`: reads its work from the environment and serves as `role`.
fn child_main(role: &str) -> Result<(), PeerError> {
    let (work, path) = drive::child_work()?;
    match role {
        "megalon" => megalon::child(&work, &path),
        "lmdb" => lmdb::child(&work, &path),
        other => Err(PeerError::Spec(format!(
            "no peer has children of role {other:?} (roles: {})",
            [Peer::MegalonProcesses, Peer::Lmdb]
                .map(|p| p.name())
                .join(", ")
        ))),
    }
}

/// `per_second` as a short rate.
pub fn rate(per_second: f64) -> String {
    megalon_bench::mix::rate(per_second)
}

/// A table of the results: one row per peer, one column per phase (operations per
/// second), then each peer's notes and failures.
pub fn table(spec: &PeerSpec, results: &[PeerResult]) -> String {
    let mut out = String::new();
    let _ = write!(out, "{:<22} {:>5} {:>7}", "peer", "procs", "workers");
    for ratio in &spec.write_ratios {
        let _ = write!(out, " {:>14}", format!("{:.0}% puts", ratio * 100.0));
    }
    let _ = writeln!(out, " {:>10}", "load");
    for result in results {
        let _ = write!(
            out,
            "{:<22} {:>5} {:>7}",
            result.peer.name(),
            result.processes,
            result.workers
        );
        match &result.outcome {
            Ok(rates) => {
                for phase in &rates.phases {
                    let _ = write!(out, " {:>14}", rate(phase.ops_per_second()));
                }
                let _ = writeln!(out, " {:>10}", rate(rates.load_ops_per_second));
            }
            Err(PeerError::Unavailable { .. }) => {
                let _ = writeln!(out, " unavailable (below)");
            }
            Err(_) => {
                let _ = writeln!(out, " failed (below)");
            }
        }
    }
    for result in results {
        let _ = writeln!(out, "{}:", result.peer.name());
        for note in &result.notes {
            let _ = writeln!(out, "  {note}");
        }
        match &result.outcome {
            Ok(rates) => {
                let _ = writeln!(
                    out,
                    "  {} keys read back as written by every worker",
                    rates.keys_checked
                );
            }
            Err(error) => {
                let _ = writeln!(out, "  {error}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_past_a_year_are_refused() {
        for spec in [
            PeerSpec {
                phase_seconds: 1e300,
                ..PeerSpec::default()
            },
            PeerSpec {
                wait_seconds: 1e300,
                ..PeerSpec::default()
            },
        ] {
            match spec.check() {
                Err(PeerError::Spec(why)) => assert!(why.contains("at most a year"), "{why}"),
                other => panic!("{spec:?}: {other:?}"),
            }
        }
        let year = PeerSpec {
            phase_seconds: MAX_SECONDS,
            wait_seconds: MAX_SECONDS,
            ..PeerSpec::default()
        };
        assert!(year.check().is_ok());
    }
}
