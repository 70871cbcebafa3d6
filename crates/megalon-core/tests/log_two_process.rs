//! Two processes append to one log on a tmpfs pod at the same time and converge.
//!
//! The test binary re-runs itself as the second process, `log_child` (see
//! `common::process`). Each runs its own fixed sequence of creates and deletes; half of
//! them are on keys both use, so creates race and lose and deletes find nothing. The
//! phases of the mailbox:
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

#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::process::{
    join_parents_pod, mailbox, start_parent, wait_for_parent, with_cache, Parent, CHILD_HOST,
    PARENT_HOST,
};
use common::Seen;
use megalon_core::{event::Event, Host, HostOptions, MemoryKind, Pod, PodConfig};
use megalon_workload::{RandomSource, SplitMix64};
use tempfile::TempPath;

/// The test the child runs.
const CHILD_TEST: &str = "log_child";

/// Operations each process runs.
const OPS: usize = 300;
/// Keys both processes use, and keys each uses alone.
const SHARED_KEYS: u64 = 12;
const OWN_KEYS: u64 = 12;
const SLOT_SIZE_BYTES: u64 = 256;
/// How far (in operations) one process may run ahead of the other: without pacing, one
/// process often finishes before the other has started.
const LAG_OPS: u64 = 8;

/// Pumps on, so neither process holds the other back while it waits. The simulated cache
/// is large and evicts at random only now and then, so that lines a process cached (its
/// own objects' bytes, an entry read before it was published) often survive until a
/// missing flush or invalidation would show.
fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    HostOptions::new()
        .memory(with_cache(memory, 4096, 256).for_host(0x10_6000, host))
        .pump_interval(Some(Duration::from_millis(1)))
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

/// The operations host `host` runs: the same in the parent (which checks them) and in
/// the process that runs them. Keys are 40 bytes or so, reaching an entry's second line.
fn workload(host: u32) -> Vec<Op> {
    let mut random = SplitMix64::new(0xc0ffee ^ u64::from(host));
    (0..OPS)
        .map(|i| {
            let r = random.next_u64();
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

/// Runs this host's workload. Before operation `i` it calls `pace(i)`, which keeps the two
/// processes within [`LAG_OPS`] operations of each other; after it, it stores `i + 1` in
/// `progress`.
fn run_workload(host: &Host, progress: &AtomicU64, mut pace: impl FnMut(u64)) -> Vec<Seen> {
    let mut results = Vec::with_capacity(OPS);
    for (i, op) in workload(host.id()).iter().enumerate() {
        pace(i as u64);
        let seen = match op {
            Op::Create { key, value } => Seen::of_create(host.create(key, value)),
            Op::Delete { key } => Seen::of_delete(host.delete(key)),
        };
        results.push(seen.unwrap_or_else(|e| panic!("host {} op {i}: {e}", host.id())));
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
            results: results.iter().map(|seen| format!("{seen:?}")).collect(),
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
            // Slot events; a process that left gives its free slots back.
            Event::ClaimSlots { .. }
            | Event::NeedSlots { .. }
            | Event::GrantSlots { .. }
            | Event::ReturnSlots { .. }
            | Event::HostLeft => continue,
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
    let Some((host, path)) = join_parents_pod(options) else {
        return;
    };
    let (parent_word, child_word) = mailbox(host.pod());
    let (parent_done, child_done) = progress(host.pod());

    // Release: pairs with the parent's Acquire wait; we are in the host table.
    child_word.store(1, Ordering::Release);
    wait_for_parent(parent_word, 1, "to start");
    child_word.store(2, Ordering::Release);
    let results = run_workload(&host, child_done, |next| {
        wait_for_parent(parent_done, next.saturating_sub(LAG_OPS), "to catch up");
    });
    // Release: our appends completed before this.
    child_word.store(3, Ordering::Release);
    wait_for_parent(parent_word, 3, "to finish appending");
    Report::of(&host, &results).write(&report_path(&path));
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

fn parent(memory: MemoryKind) {
    let Parent {
        host,
        mut child,
        path,
        mut files,
    } = start_parent(CHILD_TEST, &config(), &memory, options);
    files.push(TempPath::try_from_path(report_path(&path)).expect("an absolute path"));
    let pod = host.pod();
    let (parent_word, child_word) = mailbox(pod);

    child.wait_for(child_word, 1, "to join");
    // Release: pairs with the child's Acquire wait.
    parent_word.store(1, Ordering::Release);
    child.wait_for(child_word, 2, "to start");
    let (parent_done, child_done) = progress(pod);
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

common::process::parent_tests!(
    parent: processes_append_concurrently_and_converge_with_hardware_memory,
    processes_append_concurrently_and_converge_with_simulated_memory
);
