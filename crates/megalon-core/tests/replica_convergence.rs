//! Replicas converge: hosts whose threads create and delete at the same time end with
//! identical replicas, and (while the log keeps every entry) with the replica a sequential
//! model computes from the log.
//!
//! What each test is for, and the protocol mutants (`--features mutants`,
//! `MEGALON_MUTANT=<name>`) it fails under:
//!
//! | test | memory | checks | fails under |
//! | --- | --- | --- | --- |
//! | `concurrent_hosts_agree_with_the_log_model` | hardware | replicas, results, slots, bytes against the model | none (coherent hardware hides them) |
//! | `concurrent_hosts_agree_with_the_log_model_on_simulated_memory` | simulated, random evictions | the same | all three |
//! | `a_small_ring_wraps_and_hosts_still_converge` | simulated, random evictions, 16-entry ring | hosts agree with each other, invariants that need no log | all three |
//! | `replay_drops_the_lines_of_a_slot_another_host_reused` | simulated, no evictions | a host reads the new object in a reused slot | `replay-drops-lines` (and, stalling, `log-invalidate-before-read`) |
//! | `appenders_on_a_two_entry_ring_converge` | hardware, 2-entry ring | hosts agree; the reservation survives `head` passing a stale `tail` | none (it is about the cursors) |
//!
//! How the mutants show: an entry published before its second line reached memory decodes
//! to another key on the other hosts (replicas differ); a reader that does not invalidate
//! keeps a cached line that says "not published yet" and stops short of the log (or, with
//! a wrapped ring, a line of an earlier lap); a replay that keeps a reused slot's lines
//! serves the old object's bytes.
//!
//! Keys are up to 48 bytes, so entries are 128 bytes (two lines) and a key longer than 32
//! bytes spills into an entry's second line: a reader that gets a stale second line
//! decodes another key, which the checks notice.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{heap_pod, Seen};
use megalon_core::{
    event::Event, inspect::LoggedEvent, Host, HostId, HostOptions, Join, MemoryKind, Pod, PodConfig,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const SLOT_SIZE_BYTES: u64 = 256;
const MAX_KEY_BYTES: u32 = 48;
const MAX_HOSTS: u32 = 4;
/// Lengths of the keys of the key space, long ones first so that a case with few keys
/// still has keys that reach an entry's second line. The empty key is a key too.
const KEY_LENGTHS: [usize; 8] = [40, 1, 48, 0, 33, 31, 47, 7];

/// Key `index` of the key space. The bytes differ between keys at every offset, so a
/// stale line from another key's entry never reads as the right key.
fn key(index: usize) -> Vec<u8> {
    (0..KEY_LENGTHS[index])
        .map(|j| 0x21 + ((index * 31 + j * 7) % 90) as u8)
        .collect()
}

fn key_index(bytes: &[u8]) -> Option<usize> {
    (0..KEY_LENGTHS.len()).find(|&i| key(i) == bytes)
}

/// The bytes op `index` of thread `thread` on host `host` creates: a tag, then a pattern.
fn value(host: usize, thread: usize, index: usize, len: usize) -> Vec<u8> {
    let tag = [host as u8, thread as u8, index as u8, (index >> 8) as u8];
    (0..len)
        .map(|j| match tag.get(j) {
            Some(&b) => b,
            None => (j as u8).wrapping_mul(7) ^ tag[0].wrapping_mul(61) ^ tag[2],
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create { key: usize, value_bytes: usize },
    Delete { key: usize },
}

impl Op {
    fn key(self) -> usize {
        match self {
            Op::Create { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// Per host, per thread, the operations that thread runs in order.
#[derive(Clone, Debug)]
struct Plan {
    flat_combining: bool,
    hosts: Vec<Vec<Vec<Op>>>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEY_LENGTHS.len(), 0..=SLOT_SIZE_BYTES as usize)
            .prop_map(|(key, value_bytes)| Op::Create { key, value_bytes }),
        2 => (0..KEY_LENGTHS.len()).prop_map(|key| Op::Delete { key }),
    ]
}

/// 2 to 4 hosts of 1 or 2 threads, each with up to `ops_per_thread` operations on the
/// first 1 to 8 keys.
fn plan(ops_per_thread: usize) -> impl Strategy<Value = Plan> {
    (
        2..=MAX_HOSTS as usize,
        1..=2usize,
        1..=KEY_LENGTHS.len(),
        any::<bool>(),
    )
        .prop_flat_map(move |(hosts, threads, key_count, flat_combining)| {
            let key_op = op().prop_map(move |op| match op {
                Op::Create { key, value_bytes } => Op::Create {
                    key: key % key_count,
                    value_bytes,
                },
                Op::Delete { key } => Op::Delete {
                    key: key % key_count,
                },
            });
            vec(vec(vec(key_op, 0..=ops_per_thread), threads), hosts).prop_map(move |hosts| Plan {
                flat_combining,
                hosts,
            })
        })
}

fn config(log_capacity_entries: u64) -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(SLOT_SIZE_BYTES)
        .max_key_bytes(MAX_KEY_BYTES)
        .log_capacity_entries(log_capacity_entries)
        .max_hosts(MAX_HOSTS)
}

/// Simulated memory for host `host` of a case seeded `seed`: a small cache that evicts at
/// random, so stale lines come and go.
fn simulated(seed: u64, host: usize) -> MemoryKind {
    let seed = seed.wrapping_mul(0x9e37_79b9).wrapping_add(host as u64);
    common::simulated(seed, 128, 8)
}

/// Per host, per thread, each operation and what it did.
type Results = Vec<Vec<Vec<(Op, Seen)>>>;
/// What one thread saw, or the first unexpected error it hit.
type ThreadResults = Result<Vec<(Op, Seen)>, String>;

/// Runs `plan` with every thread on its own OS thread (all start together), then replays
/// every host. Returns the results each thread saw, per host and thread.
fn run(
    pod: &Arc<Pod>,
    plan: &Plan,
    memory: impl Fn(usize) -> MemoryKind,
) -> Result<(Vec<Host>, Results), TestCaseError> {
    let hosts: Vec<Host> = (0..plan.hosts.len())
        .map(|h| {
            let options = HostOptions::new()
                .memory(memory(h))
                .pump_interval(Some(Duration::from_millis(1)))
                .flat_combining(plan.flat_combining);
            Host::join(pod, Join::As(h as HostId), options).expect("joining")
        })
        .collect();
    let threads = plan.hosts.iter().map(Vec::len).sum();
    let start = Barrier::new(threads);
    let results: Vec<Vec<ThreadResults>> = std::thread::scope(|s| {
        let handles: Vec<Vec<_>> = plan
            .hosts
            .iter()
            .enumerate()
            .map(|(h, threads)| {
                threads
                    .iter()
                    .enumerate()
                    .map(|(t, ops)| {
                        let (host, start) = (&hosts[h], &start);
                        s.spawn(move || {
                            start.wait();
                            ops.iter()
                                .enumerate()
                                .map(|(i, &op)| Ok((op, execute(host, op, h, t, i)?)))
                                .collect()
                        })
                    })
                    .collect()
            })
            .collect();
        handles
            .into_iter()
            .map(|threads| {
                threads
                    .into_iter()
                    .map(|handle| handle.join().expect("an operation thread panicked"))
                    .collect()
            })
            .collect()
    });
    let mut seen = Results::new();
    for (h, threads) in results.into_iter().enumerate() {
        let mut host = Vec::new();
        for (t, thread) in threads.into_iter().enumerate() {
            host.push(thread.map_err(|e| {
                TestCaseError::fail(format!("host {h} thread {t}: unexpected error: {e}"))
            })?);
        }
        seen.push(host);
    }
    for host in &hosts {
        host.replay()
            .map_err(|e| TestCaseError::fail(format!("host {} replay: {e}", host.id())))?;
    }
    Ok((hosts, seen))
}

fn execute(host: &Host, op: Op, h: usize, t: usize, i: usize) -> Result<Seen, String> {
    let seen = match op {
        Op::Create {
            key: k,
            value_bytes,
        } => Seen::of_create(host.create(&key(k), &value(h, t, i, value_bytes))),
        Op::Delete { key: k } => Seen::of_delete(host.delete(&key(k))),
    };
    seen.map_err(|e| format!("op {i} {op:?}: {e}"))
}

/// A replica as plain values: `(key, slot, stamp)`, sorted by key. Every object must be
/// read-shared with its host counter unknown (nothing here allocates records or reads).
fn replica(host: &Host) -> Result<Vec<(Vec<u8>, u64, u64)>, TestCaseError> {
    host.inspect()
        .replica_snapshot()
        .into_iter()
        .map(|(key, entry)| {
            prop_assert_eq!(entry.record, None, "host {}: no records here", host.id());
            prop_assert_eq!(entry.host_counter, None, "host {}", host.id());
            Ok((key, entry.slot, entry.stamp))
        })
        .collect()
}

/// The index and slot ownership, computed sequentially from the log.
#[derive(Debug)]
struct Model {
    /// Key to `(slot, stamp)`.
    objects: BTreeMap<Vec<u8>, (u64, u64)>,
    /// Free slots of each host.
    free: Vec<BTreeSet<u64>>,
    unclaimed: Range<u64>,
    /// What the event at each position did, if it is about an object.
    seen: Vec<Option<Seen>>,
}

impl Model {
    fn new(slot_count: u64) -> Self {
        Self {
            objects: BTreeMap::new(),
            free: vec![BTreeSet::new(); MAX_HOSTS as usize],
            unclaimed: 0..slot_count,
            seen: Vec::new(),
        }
    }

    /// Applies `logged`, the event at the next position.
    fn apply(&mut self, logged: &LoggedEvent) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            logged.position,
            self.seen.len() as u64,
            "positions in order"
        );
        let author = logged.host as usize;
        prop_assert!(author < MAX_HOSTS as usize, "{:?}", logged);
        let free = &mut self.free[author];
        let seen = match logged.event.event() {
            Event::ClaimSlots { count } => {
                let n = count.min(self.unclaimed.end - self.unclaimed.start);
                free.extend(self.unclaimed.start..self.unclaimed.start + n);
                self.unclaimed.start += n;
                None
            }
            Event::Create { key, slot } => {
                prop_assert!(
                    free.contains(&slot),
                    "{:?}: host {} creates in slot {} it does not own",
                    logged,
                    author,
                    slot
                );
                if self.objects.contains_key(key) {
                    Some(Seen::Exists)
                } else {
                    free.remove(&slot);
                    self.objects.insert(key.to_vec(), (slot, logged.position));
                    Some(Seen::Created)
                }
            }
            Event::Delete { key, .. } => match self.objects.remove(key) {
                Some((slot, _)) => {
                    prop_assert!(free.insert(slot), "{:?}: slot {} was free", logged, slot);
                    Some(Seen::Deleted)
                }
                None => Some(Seen::Unknown),
            },
            Event::NeedSlots { .. } => None,
            Event::GrantSlots { to, first, count } => {
                for slot in first..first + count {
                    prop_assert!(
                        self.free[author].remove(&slot),
                        "{:?}: grants a slot it lacks",
                        logged
                    );
                    prop_assert!(self.free[to as usize].insert(slot));
                }
                None
            }
            other => {
                return Err(TestCaseError::fail(format!(
                    "position {}: unexpected event {other:?}",
                    logged.position
                )))
            }
        };
        self.seen.push(seen);
        Ok(())
    }
}

/// One object event of one host, for matching with the results of its threads.
#[derive(Clone, Debug)]
struct Appended {
    #[allow(dead_code, reason = "printed when no interleaving matches")]
    position: u64,
    create: bool,
    key: usize,
    seen: Seen,
    /// For the create of a live object: the operations whose bytes its slot holds.
    allowed: Option<Vec<(usize, usize)>>,
}

/// Assigns each object event of one host (in log order) to the thread operation that
/// appended it, as `(thread, op index)`.
///
/// A thread runs one operation at a time and its operation's entry is in the log before
/// the call returns, so each thread's operations appear in the log in its program order.
/// The threads of one host interleave arbitrarily (the combiner batches whoever is
/// queued), so this searches for an interleaving of the threads' sequences that matches
/// the events one for one: same kind, same key, the result the thread saw equal to what
/// the model says the event did, and for a live object's create an operation whose bytes
/// its slot holds. `None` if there is none. (Several interleavings may match when threads
/// run alike operations; any one will do.)
fn interleave(threads: &[Vec<(Op, Seen)>], events: &[Appended]) -> Option<Vec<(usize, usize)>> {
    fn matches(thread: usize, index: usize, op: Op, seen: Seen, event: &Appended) -> bool {
        matches!(op, Op::Create { .. }) == event.create
            && op.key() == event.key
            && seen == event.seen
            && event
                .allowed
                .as_ref()
                .is_none_or(|allowed| allowed.contains(&(thread, index)))
    }
    fn search(
        threads: &[Vec<(Op, Seen)>],
        events: &[Appended],
        at: &mut Vec<usize>,
        dead: &mut HashSet<Vec<usize>>,
        path: &mut Vec<(usize, usize)>,
    ) -> bool {
        let done = path.len();
        if done == events.len() {
            return at.iter().zip(threads).all(|(&i, ops)| i == ops.len());
        }
        if dead.contains(at) {
            return false;
        }
        for t in 0..threads.len() {
            let i = at[t];
            if let Some(&(op, seen)) = threads[t].get(i) {
                if matches(t, i, op, seen, &events[done]) {
                    at[t] += 1;
                    path.push((t, i));
                    if search(threads, events, at, dead, path) {
                        return true;
                    }
                    path.pop();
                    at[t] -= 1;
                }
            }
        }
        dead.insert(at.clone());
        false
    }
    let mut at = vec![0; threads.len()];
    let mut path = Vec::with_capacity(events.len());
    search(threads, events, &mut at, &mut HashSet::new(), &mut path).then_some(path)
}

/// Reads `len` bytes of `slot` through `host`'s memory, without flushing first: replay
/// must have dropped every line of it that another host's events made stale.
fn read_slot(pod: &Pod, host: &Host, slot: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    host.memory()
        .read(pod.layout().slot_offset(slot), &mut bytes);
    bytes
}

/// Every check that needs no log: the hosts' replicas are identical, their objects sit in
/// distinct slots, every host has applied and the free-slot counts add up, per key the
/// successful creates and deletes alternate, and every object holds the bytes of one of
/// the successful creates of its key. Returns the common replica.
fn check_without_log(
    pod: &Pod,
    hosts: &[Host],
    results: &Results,
) -> Result<Vec<(Vec<u8>, u64, u64)>, TestCaseError> {
    let (head, ctail, tail) = hosts[0].inspect().log_cursors();
    prop_assert_eq!(ctail, tail, "every append completed");
    let first = replica(&hosts[0])?;
    for host in hosts {
        prop_assert_eq!(
            host.inspect().applied_position(),
            tail,
            "host {} applied all",
            host.id()
        );
        prop_assert_eq!(
            host.inspect().stats().entries_replayed,
            tail,
            "host {} replayed each entry once",
            host.id()
        );
        prop_assert_eq!(&replica(host)?, &first, "host {} vs host 0", host.id());
    }
    let appended: u64 = hosts
        .iter()
        .map(|h| h.inspect().stats().entries_appended)
        .sum();
    prop_assert_eq!(appended, tail, "every entry appended by one of the hosts");

    // Every host reads the same entries where the ring still holds them.
    let window = hosts[0]
        .inspect()
        .read_log(head, tail)
        .map_err(|e| TestCaseError::fail(format!("read_log: {e}")))?;
    prop_assert_eq!(
        window.len() as u64,
        tail - head,
        "host 0 reads all of the ring"
    );
    for host in &hosts[1..] {
        let theirs = host
            .inspect()
            .read_log(head, tail)
            .map_err(|e| TestCaseError::fail(format!("read_log: {e}")))?;
        prop_assert_eq!(
            &theirs,
            &window,
            "host {} reads the log as host 0",
            host.id()
        );
    }

    let slots: BTreeSet<u64> = first.iter().map(|&(_, slot, _)| slot).collect();
    prop_assert_eq!(
        slots.len(),
        first.len(),
        "objects share a slot: {:?}",
        first
    );
    let free: u64 = hosts.iter().map(|h| h.inspect().free_slots()).sum();
    prop_assert!(
        free + first.len() as u64 <= pod.layout().slot_count,
        "{} free + {} live > {} slots",
        free,
        first.len(),
        pod.layout().slot_count
    );

    for k in 0..KEY_LENGTHS.len() {
        let count = |wanted: Seen| {
            results
                .iter()
                .flatten()
                .flatten()
                .filter(|&&(op, seen)| op.key() == k && seen == wanted)
                .count()
        };
        let live = first.iter().any(|(bytes, _, _)| *bytes == key(k));
        prop_assert_eq!(
            count(Seen::Created),
            count(Seen::Deleted) + usize::from(live),
            "key {}: successful creates and deletes alternate in the log",
            k
        );
    }
    for (bytes, slot, _) in &first {
        let k = key_index(bytes)
            .ok_or_else(|| TestCaseError::fail(format!("unknown key {bytes:?}")))?;
        let candidates: Vec<Vec<u8>> = results
            .iter()
            .enumerate()
            .flat_map(|(h, threads)| {
                threads.iter().enumerate().flat_map(move |(t, ops)| {
                    ops.iter()
                        .enumerate()
                        .filter_map(move |(i, &(op, seen))| match op {
                            Op::Create { key, value_bytes }
                                if key == k && seen == Seen::Created =>
                            {
                                Some(value(h, t, i, value_bytes))
                            }
                            _ => None,
                        })
                })
            })
            .collect();
        for host in hosts {
            prop_assert!(
                candidates
                    .iter()
                    .any(|v| read_slot(pod, host, *slot, v.len()) == *v),
                "host {} reads key {} in slot {} as none of its creates",
                host.id(),
                k,
                slot
            );
        }
    }
    Ok(first)
}

/// The operations `(thread, index)` of host `h` that created key `key` (as their threads
/// saw it) and whose bytes every host reads in `slot`. Fails if there is none.
fn creators(
    pod: &Pod,
    hosts: &[Host],
    h: usize,
    threads: &[Vec<(Op, Seen)>],
    key: usize,
    slot: u64,
) -> Result<Vec<(usize, usize)>, TestCaseError> {
    let mut allowed = Vec::new();
    for (t, ops) in threads.iter().enumerate() {
        for (i, &(op, seen)) in ops.iter().enumerate() {
            let Op::Create { value_bytes, .. } = op else {
                continue;
            };
            if op.key() != key || seen != Seen::Created {
                continue;
            }
            let bytes = value(h, t, i, value_bytes);
            if hosts
                .iter()
                .all(|host| read_slot(pod, host, slot, bytes.len()) == bytes)
            {
                allowed.push((t, i));
            }
        }
    }
    prop_assert!(
        !allowed.is_empty(),
        "key {} in slot {}: some host reads bytes that no create of host {} wrote \
         (host 0 reads {:?})",
        key,
        slot,
        h,
        read_slot(pod, &hosts[0], slot, SLOT_SIZE_BYTES as usize)
    );
    Ok(allowed)
}

/// The checks against the sequential model; the log must hold every entry.
fn check_against_model(pod: &Pod, hosts: &[Host], results: &Results) -> Result<(), TestCaseError> {
    let replica = check_without_log(pod, hosts, results)?;
    let (head, _, tail) = hosts[0].inspect().log_cursors();
    prop_assert_eq!(head, 0, "the ring is large enough to keep every entry");
    let log = hosts[0]
        .inspect()
        .read_log(0, tail)
        .map_err(|e| TestCaseError::fail(format!("read_log: {e}")))?;
    prop_assert_eq!(log.len() as u64, tail);

    let mut model = Model::new(pod.layout().slot_count);
    for logged in &log {
        model.apply(logged)?;
    }
    let expected: Vec<(Vec<u8>, u64, u64)> = model
        .objects
        .iter()
        .map(|(key, &(slot, stamp))| (key.clone(), slot, stamp))
        .collect();
    prop_assert_eq!(&replica, &expected, "replicas against the model");

    // Results: each host's object events are its threads' operations, interleaved, and
    // every live object holds, on every host, the bytes of the operation that created it.
    for (h, host) in hosts.iter().enumerate() {
        let threads = &results[h];
        let mut events = Vec::new();
        for logged in log.iter().filter(|l| l.host as usize == h) {
            let (create, bytes) = match logged.event.event() {
                Event::Create { key, .. } => (true, key),
                Event::Delete { key, .. } => (false, key),
                _ => continue,
            };
            let key = key_index(bytes)
                .ok_or_else(|| TestCaseError::fail(format!("{logged:?}: a key nobody used")))?;
            let seen = model.seen[logged.position as usize].expect("an object event");
            let live = model
                .objects
                .get(bytes)
                .filter(|&&(_, stamp)| stamp == logged.position);
            let allowed = match live {
                Some(&(slot, _)) => Some(creators(pod, hosts, h, threads, key, slot)?),
                None => None,
            };
            events.push(Appended {
                position: logged.position,
                create,
                key,
                seen,
                allowed,
            });
        }
        let ops: usize = threads.iter().map(Vec::len).sum();
        prop_assert_eq!(events.len(), ops, "host {}: one event per operation", h);
        prop_assert!(
            interleave(threads, &events).is_some(),
            "host {}: no interleaving of its threads' results {:?} matches its events {:?}",
            h,
            threads,
            events
        );
        // Slots: this host's free pool is what the model says it owns.
        prop_assert_eq!(
            host.inspect().free_slots(),
            model.free[h].len() as u64,
            "host {} free slots",
            h
        );
        // Replay dropped the slot of every object event another host appended.
        let expected_drops = log
            .iter()
            .filter(|l| l.host as usize != h)
            .filter(|l| {
                matches!(
                    model.seen[l.position as usize],
                    Some(Seen::Created | Seen::Deleted)
                )
            })
            .count() as u64;
        prop_assert_eq!(
            host.inspect().stats().slots_dropped,
            expected_drops,
            "host {}",
            h
        );
    }
    for (h, free) in model.free.iter().enumerate().skip(hosts.len()) {
        prop_assert!(free.is_empty(), "host {} never joined", h);
    }
    let claimed = model.unclaimed.start;
    let free: u64 = hosts.iter().map(|h| h.inspect().free_slots()).sum();
    prop_assert_eq!(
        free + replica.len() as u64,
        claimed,
        "no slot lost or doubled"
    );

    Ok(())
}

/// Runs `plan` (see [`run`]) on a new pod whose ring holds `log_capacity_entries`, each host
/// on `memory(host)`, and checks the outcome with `check`.
fn run_and_check<R>(
    log_capacity_entries: u64,
    plan: &Plan,
    memory: impl Fn(usize) -> MemoryKind,
    check: impl Fn(&Pod, &[Host], &Results) -> Result<R, TestCaseError>,
) -> Result<R, TestCaseError> {
    let pod = heap_pod(&config(log_capacity_entries));
    let (hosts, results) = run(&pod, plan, memory)?;
    check(&pod, &hosts, &results)
}

/// `cases` cases of a property. A failing case may take a host's whole wait limit (a
/// replay that stalls on a stale line): shrinking stops after a while and prints what it
/// has come to.
fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_time: 20_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(48))]

    /// Real memory: replicas, results and slots agree with the sequential model.
    #[test]
    fn concurrent_hosts_agree_with_the_log_model(plan in plan(16)) {
        run_and_check(1024, &plan, |_| MemoryKind::Hardware, check_against_model)?;
    }
}

proptest! {
    #![proptest_config(cases(32))]

    /// Simulated non-coherent memory, a ring that keeps every entry: the same checks. A
    /// writer that publishes an entry before its second line reaches memory makes the
    /// other hosts decode a different key.
    #[test]
    fn concurrent_hosts_agree_with_the_log_model_on_simulated_memory(
        plan in plan(16),
        seed in any::<u64>(),
    ) {
        run_and_check(1024, &plan, |h| simulated(seed, h), check_against_model)?;
    }

    /// Simulated memory and a ring of 16 entries that wraps many times (the pumps keep
    /// every host replaying): hosts agree with each other. A reader that does not
    /// invalidate an entry before reading it keeps a line of an earlier lap.
    #[test]
    fn a_small_ring_wraps_and_hosts_still_converge(
        plan in plan(40),
        seed in any::<u64>(),
    ) {
        run_and_check(16, &plan, |h| simulated(seed, h), check_without_log)?;
    }
}

/// Host A caches an object's bytes; host B deletes it and creates another object in the
/// same slot (a deleter owns the slot it freed, and reuses it first). A's next lookup
/// replays both events, which must drop A's cached lines of the slot: A then reads the
/// new bytes, not the ones it cached.
#[test]
fn replay_drops_the_lines_of_a_slot_another_host_reused() {
    let pod = heap_pod(&config(1024));
    let no_eviction = |seed| {
        HostOptions::new()
            .pump_interval(None)
            .memory(common::simulated(seed, 4096, 0))
    };
    let a = Host::join(&pod, Join::As(0), no_eviction(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), no_eviction(2)).unwrap();
    let read = |host: &Host, key: &[u8], len: usize| {
        let entry = host.lookup(key).unwrap().expect("the object exists");
        (entry.slot, read_slot(&pod, host, entry.slot, len))
    };
    let len = SLOT_SIZE_BYTES as usize;
    // The object of round `r` is `k{r / 2}`: from an even round to the next odd one the
    // new object has the old key, from an odd round to the next even one another key.
    let key_of = |round: usize| format!("k{}", round / 2).into_bytes();
    b.create(&key_of(0), &value(1, 0, 0, len)).unwrap();
    for round in 1..8usize {
        let (old, new) = (key_of(round - 1), key_of(round));
        let (slot, bytes) = read(&a, &old, len);
        assert_eq!(
            bytes,
            value(1, 0, round - 1, len),
            "round {round}: A reads it"
        );
        b.delete(&old).unwrap();
        b.create(&new, &value(1, 0, round, len)).unwrap();
        let (new_slot, bytes) = read(&a, &new, len);
        assert_eq!(new_slot, slot, "round {round}: B reused the slot it freed");
        assert_eq!(
            bytes,
            value(1, 0, round, len),
            "round {round}: A reads the new object in slot {slot}, not its cached lines"
        );
    }
    let stale = a.memory().simulated_stats().unwrap().stale_lines_served;
    assert_eq!(stale, 0, "A never read a stale line");
}

/// Twelve threads on four hosts append to a ring of two entries, so `head` and `tail`
/// race past each other all the time: an appender's view of `tail` is often stale by the
/// time it reads `head` (which may then be past it). Hosts still converge.
#[test]
fn appenders_on_a_two_entry_ring_converge() {
    let thread_ops = |t: usize| -> Vec<Op> {
        (0..200)
            .map(|i| match i % 2 {
                0 => Op::Create {
                    key: (i / 2 + t) % 4,
                    value_bytes: i % 70,
                },
                _ => Op::Delete {
                    key: (i / 2 + t) % 4,
                },
            })
            .collect()
    };
    for flat_combining in [false, true] {
        let plan = Plan {
            flat_combining,
            hosts: vec![(0..3).map(thread_ops).collect(); MAX_HOSTS as usize],
        };
        let checked = run_and_check(2, &plan, |_| MemoryKind::Hardware, check_without_log);
        if let Err(error) = checked {
            panic!("flat combining {flat_combining}: {error}");
        }
    }
}
