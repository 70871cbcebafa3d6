//! Two processes append to one log on a tmpfs pod at the same time and converge.
//!
//! The test binary re-runs itself as the second process (as `two_process.rs` does): the
//! parent test spawns `current_exe() --exact log_child`, with the pod's path and the
//! memory kind in the environment; `log_child` does nothing when that variable is absent
//! (a normal run). The parent creates the pod and joins as host 0, the child opens it and
//! joins as host 1. Each runs its own fixed sequence of creates and deletes; half of them
//! are on keys both use, so creates race and lose and deletes find nothing.
//!
//! Two words in the unused upper half of the reclaimer's line are the mailbox: the first is the
//! parent's, the second the child's. Each process stores its phase in its own word with
//! Release and waits for the other's with Acquire:
//!
//! | phase | child (host 1) has                 | parent (host 0) has                       |
//! |-------|------------------------------------|-------------------------------------------|
//! | 1     | joined                             | seen the child joined: start              |
//! | 2     | seen the parent start: starts too  | (runs its operations once it sees this)   |
//! | 3     | finished appending                 | finished appending and seen the child's   |
//!
//! While they run, the next two words count the operations each has finished, and neither
//! runs more than [`LAG_OPS`] operations ahead of the other, so their appends interleave
//! (waits spin, yielding). After phase 3 no entry is appended any more. Each process replays and writes a report:
//! its results, its replica as `(key, slot, stamp)` and the whole log as it reads it. The
//! child writes its report to a file next to the pod and exits; the parent compares the
//! replicas and logs line for line, and checks both processes' results against a
//! sequential model of the log (each process runs one thread, so its events are in the
//! log in the order of its operations).
//!
//! Every wait is bounded by [`WAIT_BOUND`]; the parent also stops waiting as soon as the
//! child exits, and kills the child if the test fails first.

#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{ChildProcess, RemoveOnDrop, WAIT_BOUND};
use megalon_core::{
    event::Event, Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};

/// The pod file the child opens; absent in a normal test run.
const POD_ENV: &str = "MEGALON_LOG_TWO_PROCESS_POD";
/// The child's memory kind: `hardware` or `simulated`.
const MEMORY_ENV: &str = "MEGALON_LOG_TWO_PROCESS_MEMORY";
/// The test the child runs.
const CHILD_TEST: &str = "log_child";

const PARENT_HOST: u32 = 0;
const CHILD_HOST: u32 = 1;
/// Operations each process runs.
const OPS: usize = 300;
/// Keys both processes use, and keys each uses alone.
const SHARED_KEYS: u64 = 12;
const OWN_KEYS: u64 = 12;
const SLOT_SIZE_BYTES: u64 = 256;
/// How far (in operations) one process may run ahead of the other: without pacing, one
/// process often finishes before the other has started.
const LAG_OPS: u64 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Hardware,
    Simulated,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Hardware => "hardware",
            Kind::Simulated => "simulated",
        }
    }

    fn parse(name: &str) -> Kind {
        match name {
            "hardware" => Kind::Hardware,
            "simulated" => Kind::Simulated,
            other => panic!("{MEMORY_ENV}={other}: expected hardware or simulated"),
        }
    }

    /// Pumps on, so neither process holds the other back while it waits. The simulated
    /// cache is large and evicts at random only now and then, so that lines a process
    /// cached (its own objects' bytes, an entry read before it was published) often
    /// survive until a missing flush or invalidation would show.
    fn options(self, host: u32) -> HostOptions {
        let memory = match self {
            Kind::Hardware => MemoryKind::Hardware,
            Kind::Simulated => MemoryKind::Simulated(SimulatedConfig {
                seed: 0x10_6000 + u64::from(host),
                capacity_lines: 4096,
                random_eviction_one_in: 256,
            }),
        };
        HostOptions::new()
            .memory(memory)
            .pump_interval(Some(Duration::from_millis(1)))
    }
}

/// 128-byte entries (keys reach the second line); a ring that holds every entry of the
/// test, so both processes can read the whole log at the end.
fn config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(SLOT_SIZE_BYTES)
        .max_key_bytes(48)
        .log_capacity_entries(2048)
        .max_hosts(2)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Create { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// splitmix64 (Steele, Lea, Flood 2014).
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The operations host `host` runs: the same in the parent (which checks them) and in
/// the process that runs them. Keys are 40 bytes or so, reaching an entry's second line.
fn workload(host: u32) -> Vec<Op> {
    let mut state = 0xc0ffee ^ u64::from(host);
    (0..OPS)
        .map(|i| {
            let r = next_random(&mut state);
            let key = if r.is_multiple_of(2) {
                format!(
                    "shared-key-padded-to-the-second-line/{}",
                    (r >> 8) % SHARED_KEYS
                )
            } else {
                format!(
                    "host-{host}-key-padded-to-the-second-line/{}",
                    (r >> 8) % OWN_KEYS
                )
            }
            .into_bytes();
            if (r >> 16) % 5 < 3 {
                let len = ((r >> 24) % (SLOT_SIZE_BYTES + 1)) as usize;
                let value = (0..len)
                    .map(|j| (j as u8).wrapping_mul(13) ^ (i as u8) ^ (host as u8 * 0x80))
                    .collect();
                Op::Create { key, value }
            } else {
                Op::Delete { key }
            }
        })
        .collect()
}

/// What an operation did, as its caller saw it or as the model says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Created,
    Exists,
    Deleted,
    Unknown,
}

impl Seen {
    fn name(self) -> &'static str {
        match self {
            Seen::Created => "created",
            Seen::Exists => "exists",
            Seen::Deleted => "deleted",
            Seen::Unknown => "unknown",
        }
    }

    fn parse(name: &str) -> Seen {
        match name {
            "created" => Seen::Created,
            "exists" => Seen::Exists,
            "deleted" => Seen::Deleted,
            "unknown" => Seen::Unknown,
            other => panic!("a result named {other:?}"),
        }
    }
}

/// Runs this host's workload. Before operation `i` it calls `pace(i)`, which keeps the two
/// processes within [`LAG_OPS`] operations of each other; after it, it stores `i + 1` in
/// `progress`.
fn run_workload(host: &Host, progress: &AtomicU64, mut pace: impl FnMut(u64)) -> Vec<Seen> {
    let mut results = Vec::with_capacity(OPS);
    for (i, op) in workload(host.id()).iter().enumerate() {
        pace(i as u64);
        results.push(match op {
            Op::Create { key, value } => match host.create(key, value) {
                Ok(()) => Seen::Created,
                Err(Error::ObjectExists) => Seen::Exists,
                Err(e) => panic!("host {} op {i}: create: {e}", host.id()),
            },
            Op::Delete { key } => match host.delete(key) {
                Ok(()) => Seen::Deleted,
                Err(Error::UnknownKey) => Seen::Unknown,
                Err(e) => panic!("host {} op {i}: delete: {e}", host.id()),
            },
        });
        // Relaxed: only pacing; nothing is published with it.
        progress.store(i as u64 + 1, Ordering::Relaxed);
    }
    results
}

/// What one process saw, as text: one line per result, per object of its replica, and per
/// log entry.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    results: Vec<String>,
    replica: Vec<String>,
    log: Vec<String>,
    /// Per object: its key and the bytes of its whole slot, read without a flush (replay
    /// must have dropped whatever lines of it this process had cached and another made
    /// stale).
    bytes: Vec<String>,
}

impl Report {
    /// Replays `host` (every append is over) and describes what it sees.
    fn of(host: &Host, results: &[Seen]) -> Report {
        host.replay().expect("replaying");
        let (head, ctail, tail) = host.inspect().log_cursors();
        assert_eq!((head, ctail), (0, tail), "host {}: cursors", host.id());
        assert_eq!(
            host.inspect().applied_position(),
            tail,
            "host {}",
            host.id()
        );
        let log = host.inspect().read_log(0, tail).expect("reading the log");
        assert_eq!(
            log.len() as u64,
            tail,
            "host {} reads every entry",
            host.id()
        );
        let snapshot = host.inspect().replica_snapshot();
        let bytes = snapshot
            .iter()
            .map(|(key, entry)| {
                let mut bytes = vec![0u8; SLOT_SIZE_BYTES as usize];
                let offset = host.pod().layout().slot_offset(entry.slot);
                host.memory().read(offset, &mut bytes);
                format!("{} {}", hex(key), hex(&bytes))
            })
            .collect();
        Report {
            results: results.iter().map(|seen| seen.name().to_owned()).collect(),
            replica: snapshot
                .iter()
                .map(|(key, entry)| {
                    format!(
                        "{} {} {} {:?} {:?}",
                        hex(key),
                        entry.slot,
                        entry.stamp,
                        entry.record,
                        entry.host_counter
                    )
                })
                .collect(),
            log: log
                .iter()
                .map(|l| format!("{} {} {:?}", l.position, l.host, l.event.event()))
                .collect(),
            bytes,
        }
    }

    fn write(&self, path: &Path) {
        let mut text = String::new();
        for (section, lines) in [
            ("result", &self.results),
            ("object", &self.replica),
            ("log", &self.log),
            ("bytes", &self.bytes),
        ] {
            for line in lines {
                writeln!(text, "{section} {line}").expect("formatting");
            }
        }
        std::fs::write(path, text).expect("writing the report");
    }

    fn read(path: &Path) -> Report {
        let text = std::fs::read_to_string(path).expect("reading the child's report");
        let mut report = Report::default();
        for line in text.lines() {
            let (section, rest) = line.split_once(' ').expect("a section");
            let lines = match section {
                "result" => &mut report.results,
                "object" => &mut report.replica,
                "log" => &mut report.log,
                "bytes" => &mut report.bytes,
                other => panic!("a report section named {other:?}"),
            };
            lines.push(rest.to_owned());
        }
        report
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex"))
        .collect()
}

/// Replays the log read by `host` sequentially and checks its replica and both
/// processes' results against it: each process's object events, in log order, are its
/// operations in program order, and each result is what the model says its event did.
/// Returns every object's key and the bytes the operation that created it wrote.
fn check_against_model(host: &Host, results: [&[Seen]; 2]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (_, _, tail) = host.inspect().log_cursors();
    let log = host.inspect().read_log(0, tail).expect("reading the log");
    let mut objects: BTreeMap<Vec<u8>, (u64, u64)> = BTreeMap::new();
    let mut values: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut next = [0usize; 2];
    let ops = [workload(PARENT_HOST), workload(CHILD_HOST)];
    for logged in &log {
        let h = logged.host as usize;
        let (op, seen) = match logged.event.event() {
            Event::Create { key, slot } => {
                let seen = if objects.contains_key(key) {
                    Seen::Exists
                } else {
                    objects.insert(key.to_vec(), (slot, logged.position));
                    Seen::Created
                };
                (Some(key), seen)
            }
            Event::Delete { key, .. } => {
                let seen = match objects.remove(key) {
                    Some(_) => Seen::Deleted,
                    None => Seen::Unknown,
                };
                (None, seen)
            }
            Event::ClaimSlots { .. } | Event::NeedSlots { .. } | Event::GrantSlots { .. } => {
                continue
            }
            other => panic!("position {}: unexpected {other:?}", logged.position),
        };
        let i = next[h];
        next[h] += 1;
        let expected = ops[h].get(i).unwrap_or_else(|| {
            panic!(
                "position {}: host {h} appended more than it ran",
                logged.position
            )
        });
        let key = match logged.event.event() {
            Event::Create { key, .. } | Event::Delete { key, .. } => key,
            _ => unreachable!("object events only"),
        };
        let same_op = match expected {
            Op::Create { key: k, .. } => op.is_some() && k == key,
            Op::Delete { key: k } => op.is_none() && k == key,
        };
        assert!(
            same_op,
            "position {}: host {h}'s op {i} is {expected:?}, the log says {:?}",
            logged.position,
            logged.event.event()
        );
        assert_eq!(
            results[h][i], seen,
            "host {h} op {i} ({expected:?}) at position {}",
            logged.position
        );
        match (expected, seen) {
            (Op::Create { key, value }, Seen::Created) => {
                values.insert(key.clone(), value.clone());
            }
            (Op::Delete { key }, Seen::Deleted) => {
                values.remove(key);
            }
            _ => {}
        }
    }
    assert_eq!(next, [OPS, OPS], "every operation is in the log once");
    let replica: Vec<(Vec<u8>, u64, u64)> = host
        .inspect()
        .replica_snapshot()
        .into_iter()
        .map(|(key, entry)| (key, entry.slot, entry.stamp))
        .collect();
    let model: Vec<(Vec<u8>, u64, u64)> = objects
        .into_iter()
        .map(|(key, (slot, stamp))| (key, slot, stamp))
        .collect();
    assert_eq!(replica, model, "the replica is the model of the log");
    let mut slots: Vec<u64> = model.iter().map(|&(_, slot, _)| slot).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), model.len(), "every object in its own slot");
    values
}

/// `(parent's word, child's word)`: phases.
fn mailbox(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    // The upper half of the reclaimer's line is unused; the lower half counts records.
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

/// `(parent's, child's)`: operations each has finished.
fn progress(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at + 16), pod.scr_u64(at + 24))
}

fn report_path(pod_path: &Path) -> PathBuf {
    let mut path = pod_path.as_os_str().to_owned();
    path.push(".child-report");
    PathBuf::from(path)
}

/// The child process, run by the parent tests below; a no-op in a normal run.
#[test]
fn log_child() {
    let Ok(path) = std::env::var(POD_ENV) else {
        return;
    };
    let kind = Kind::parse(&std::env::var(MEMORY_ENV).expect("the parent names the memory"));
    let pod = Arc::new(Pod::open(Backing::file(&path)).expect("opening the parent's pod"));
    let host =
        Host::join(&pod, Join::As(CHILD_HOST), kind.options(CHILD_HOST)).expect("joining as 1");
    let (parent_word, child_word) = mailbox(&pod);
    let (parent_done, child_done) = progress(&pod);
    let wait_parent = |phase: u64, what: &str| {
        let deadline = Instant::now() + WAIT_BOUND;
        // Acquire: pairs with the parent's Release store of `phase`.
        while parent_word.load(Ordering::Acquire) < phase {
            assert!(
                Instant::now() < deadline,
                "child: waited {WAIT_BOUND:?} for the parent {what} (phase {phase})"
            );
            std::thread::yield_now();
        }
    };

    // Release: pairs with the parent's Acquire wait; we are in the host table.
    child_word.store(1, Ordering::Release);
    wait_parent(1, "to start");
    child_word.store(2, Ordering::Release);
    let results = run_workload(&host, child_done, |next| {
        let deadline = Instant::now() + WAIT_BOUND;
        while parent_done.load(Ordering::Relaxed) < next.saturating_sub(LAG_OPS) {
            assert!(
                Instant::now() < deadline,
                "child: waited {WAIT_BOUND:?} for the parent to catch up with op {next}"
            );
            std::thread::yield_now();
        }
    });
    // Release: our appends completed before this.
    child_word.store(3, Ordering::Release);
    wait_parent(3, "to finish appending");
    Report::of(&host, &results).write(&report_path(Path::new(&path)));
    host.leave();
}

/// Asserts two reports' sections are equal, naming the first line that differs.
fn assert_same_lines(section: &str, parent: &[String], child: &[String]) {
    if let Some(at) = (0..parent.len().max(child.len())).find(|&i| parent.get(i) != child.get(i)) {
        panic!(
            "{section}: the processes differ first at line {at} of {}/{}: parent {:?}, \
             child {:?}",
            parent.len(),
            child.len(),
            parent.get(at),
            child.get(at)
        );
    }
}

fn parent(kind: Kind) {
    let path = PathBuf::from(format!(
        "/dev/shm/megalon-log-{}-{}.pod",
        std::process::id(),
        kind.name()
    ));
    let _remove = RemoveOnDrop(vec![path.clone(), report_path(&path)]);
    let pod = Arc::new(Pod::create(&config(), Backing::file(&path)).expect("creating the pod"));
    let host =
        Host::join(&pod, Join::As(PARENT_HOST), kind.options(PARENT_HOST)).expect("joining as 0");
    let (parent_word, child_word) = mailbox(&pod);
    let mut child = ChildProcess::spawn(
        CHILD_TEST,
        &[
            (POD_ENV, path.as_os_str()),
            (MEMORY_ENV, kind.name().as_ref()),
        ],
    );

    child.wait_for(child_word, 1, "to join");
    // Release: pairs with the child's Acquire wait.
    parent_word.store(1, Ordering::Release);
    child.wait_for(child_word, 2, "to start");
    let (parent_done, child_done) = progress(&pod);
    let results = run_workload(&host, parent_done, |next| {
        child.wait_for(child_done, next.saturating_sub(LAG_OPS), "to catch up");
    });
    child.wait_for(child_word, 3, "to finish appending");
    // Release: our appends completed before this.
    parent_word.store(3, Ordering::Release);
    let ours = Report::of(&host, &results);
    child.assert_exits_successfully();
    let theirs = Report::read(&report_path(&path));

    assert_same_lines("log", &ours.log, &theirs.log);
    assert_same_lines("replica", &ours.replica, &theirs.replica);
    let child_results: Vec<Seen> = theirs.results.iter().map(|s| Seen::parse(s)).collect();
    assert_eq!(child_results.len(), OPS, "the child reports every result");
    let values = check_against_model(&host, [&results, &child_results]);
    for (process, report) in [("parent", &ours), ("child", &theirs)] {
        assert_eq!(report.bytes.len(), values.len(), "{process}: objects");
        for (line, (key, value)) in report.bytes.iter().zip(&values) {
            let (read_key, read_bytes) = line.split_once(' ').expect("key and bytes");
            assert_eq!(unhex(read_key), *key, "{process}: objects in key order");
            assert_eq!(
                &unhex(read_bytes)[..value.len()],
                &value[..],
                "{process} reads key {read_key} as other bytes than its create wrote"
            );
        }
    }
    let creates_lost = results
        .iter()
        .chain(&child_results)
        .filter(|&&seen| seen == Seen::Exists)
        .count();
    assert!(
        creates_lost > 0,
        "some creates lose (keys are reused and shared)"
    );
}

#[test]
fn processes_append_concurrently_and_converge_with_hardware_memory() {
    parent(Kind::Hardware);
}

#[test]
fn processes_append_concurrently_and_converge_with_simulated_memory() {
    parent(Kind::Simulated);
}
