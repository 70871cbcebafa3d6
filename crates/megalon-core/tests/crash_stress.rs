//! The crash stress behind `cargo xtask crash`: several host processes on one pod file in
//! `/dev/shm`, each running a seeded random mix of puts, gets, creates and deletes on a
//! few keys (so operations conflict), while the parent kills one of them with SIGKILL
//! about every second and starts another that joins again, as the dead host's id once a
//! live host has recovered it and freed its row, or as any free id. At the end every
//! process's history is merged and checked for linearizability.
//!
//! **Histories that survive a kill.** Each worker journals its operations to a file of its
//! own as it goes ([`ThreadRecorder::journaled`]): the invocation line is written (one
//! `write` on an unbuffered `File`, so it is in the kernel) before the call, the response
//! line after it. What a killed worker did is on disk; its call in flight has no response
//! line and is of unknown outcome ([`Outcome::Unknown`]): it may have taken effect or not.
//! Timestamps come from `CLOCK_MONOTONIC`, one clock for every process of the machine.
//!
//! **Who is killed.** A worker that has joined, at seeded random intervals
//! ([`KILL_INTERVAL_MS`]), chosen at random; never the last joined one, since a host that
//! joins after the log recycled needs a live host to stream it the index, and a dead host
//! needs a live one to recover it.
//!
//! **At the end**, the parent joins the pod itself (served by a live worker), stops the
//! workers (it closes their standard input) and, with every worker gone, checks what a
//! history cannot show: the host table holds only itself (every dead host's row was
//! freed) and no record is left locked. Then it reads every key, recording the reads into
//! the history too, so the final state is checked with the rest.
//!
//! Workers die with the parent (`PR_SET_PDEATHSIG`). The pod file lives in a directory in
//! `/dev/shm`, the histories and the workers' stderr in one in the temporary directory;
//! both are removed at the end, however the run ends (unless the parent itself is
//! killed).
//!
//! **Local partitions and copies** (`--partition-after N`, `--copy-after N`). Objects move
//! into a worker's DRAM and back by RPC; each worker sends half its operations to a key
//! of its own, so streaks of accesses happen. A killed worker takes what it wrote into
//! its DRAM with it, by design: the object goes back to its bytes in CXL. So a killed
//! worker's puts done in its DRAM took effect within their calls or never, and its gets
//! served there (which may have read such a put) are ignored
//! ([`ThreadLog::with_lost_writes`]; each worker notes which of its operations its DRAM
//! served); everything else it did, and everything the others did, is checked as
//! before. At the end no object may be named as held by any
//! host.
//!
//! `crash_from_env` is ignored in `cargo test`; `cargo xtask crash` runs it with its
//! parameters in `MEGALON_CRASH_*` variables, and it prints one final line:
//! `crash: K hosts killed and rejoined, N operations checked: linearizable`, or the
//! violation with the seed. The seed fixes the choices (operations, keys, kill times,
//! victims, how they rejoin), not the timing of the processes.

#![cfg(target_os = "linux")]

mod common;

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};
use megalon_workload::{
    check, Call, Clock, History, KnownWrites, Operation, Outcome, ProcessId, RandomSource,
    SplitMix64, ThreadLog, ThreadRecorder, Value,
};

/// Bytes of an object slot: four lines, so a write cut short by a kill could tear.
const SLOT_BYTES: u64 = 1024;
/// The pod's lease. A host on this machine is declared dead as soon as its process is
/// gone; the lease sets how often the pumps look (a few times per lease).
const LEASE_MS: u32 = 300;
/// Log entries: few, so the log recycles within a second and most rejoins are late joins.
const LOG_CAPACITY_ENTRIES: u64 = 1024;
/// Hosts the pod holds: the workers, the parent's host at the end, and rows of killed
/// hosts that no live host has recovered yet.
const POD_MAX_HOSTS: u32 = 16;
/// Most worker processes at once: half the host table, the rest left for the others.
const MAX_WORKERS: u32 = POD_MAX_HOSTS / 2;
/// Time between two kills, drawn uniformly from this range (ms).
const KILL_INTERVAL_MS: std::ops::Range<u64> = 500..1500;
/// Percent of replacements that die while they join, by default.
const DEFAULT_DOOMED_JOINS: u32 = 25;
/// When a doomed worker kills itself, after it starts to join, drawn uniformly from this
/// range (us): about as long as a join takes here (the report gives the joins' times).
const DOOMED_AFTER_US: std::ops::Range<u64> = 0..JOIN_WINDOW_US;
const JOIN_WINDOW_US: u64 = 3000;
/// Longest a worker tries to join (the row of a killed host is freed within about a
/// quarter of the lease, once a live host's pump finds the process gone).
const JOIN_BOUND: Duration = Duration::from_secs(30);
/// Longest wait for the workers to stop once told to, and for the host table to empty.
const EXIT_BOUND: Duration = Duration::from_secs(30);
/// How often the parent looks at its workers.
const POLL: Duration = Duration::from_millis(5);
/// The operations' mix, in percent: gets, then puts, then creates; deletes take the rest.
const GET_PERCENT: u64 = 40;
const PUT_PERCENT: u64 = 30;
const CREATE_PERCENT: u64 = 15;
/// Operations on the failing key a violation's report shows, besides the checker's own.
const REPORT_OPERATIONS: usize = 40;
/// The name of the worker's test, which the parent runs as each child process.
const WORKER_TEST: &str = "crash_worker";
/// The lines of a worker's notes: it joined as a host, a join attempt failed, and what
/// its host did for the others (see [`Counters`]).
const JOINED: &str = "joined host ";
/// A notes line: how long the join took, in microseconds.
const JOIN_TOOK: &str = "join took us ";
const JOIN_FAILED: &str = "join failed: ";
const COUNTERS: &str = "counters ";
/// A notes line naming (by its index in the history) an operation served from the
/// worker's DRAM, whose effect a kill may undo.
const IN_MEMORY: &str = "in memory ";
/// The start of a worker's stderr line about a call that failed.
const FAILED_CALL: &str = "failed call: ";
/// A call this slow (ms) fails the run: a quarter of the workers' wait limit (10 s by default),
/// where the slowest in a run is about a lease (300 ms) or less.
const SLOW_CALL_MS: u64 = 2500;
/// Kinds of call failures a run's report quotes.
const REPORT_CALL_FAILURES: usize = 3;
/// Join failures a run's report quotes.
const REPORT_JOIN_FAILURES: usize = 3;

/// Where the parent finds its parameters.
const ENV_PREFIX: &str = "MEGALON_CRASH_";
/// Where a worker finds its own (absent in a normal test run).
const WORKER_ENV: &str = "MEGALON_CRASH_WORKER";

/// What one crash run does.
#[derive(Clone, Debug)]
struct Crash {
    seconds: f64,
    seed: u64,
    /// Worker processes running at once.
    hosts: u32,
    keys: u32,
    memory: MemoryKind,
    /// Bits of a coherence record.
    record_bits: u32,
    /// Accesses after which an object moves to a host's DRAM (0: never).
    partition_after: u32,
    /// Reads after which a host keeps a copy of a read-shared object (0: never).
    copy_after: u32,
    /// Percent of the replacements of killed workers that die while they join.
    doomed_joins: u32,
    /// Each worker switches the record width about this often (0: a pod whose width is
    /// fixed), through [`SWITCH_WIDTHS`].
    switch_width_every_ms: u64,
}

/// The widths the workers of a run that switches go through, each from its own place.
const SWITCH_WIDTHS: [u32; 5] = [16, 2, 32, 4, 8];

impl Crash {
    /// The parameters from `MEGALON_CRASH_*`; the seed, if not given, from the clock.
    fn from_env() -> Crash {
        let crash = Crash {
            seconds: env_var("SECONDS").unwrap_or(10.0),
            seed: env_var("SEED").unwrap_or_else(monotonic_ns),
            hosts: env_var("HOSTS").unwrap_or(4),
            keys: env_var("KEYS").unwrap_or(8),
            memory: env_var("MEMORY").unwrap_or(MemoryKind::simulated(0)),
            record_bits: env_var("RECORD_BITS").unwrap_or(32),
            partition_after: env_var("PARTITION_AFTER").unwrap_or(0),
            copy_after: env_var("COPY_AFTER").unwrap_or(0),
            doomed_joins: env_var("DOOMED_JOINS").unwrap_or(DEFAULT_DOOMED_JOINS),
            switch_width_every_ms: env_var("SWITCH_WIDTH_EVERY_MS").unwrap_or(0),
        };
        assert!(
            (2..=MAX_WORKERS).contains(&crash.hosts),
            "{ENV_PREFIX}HOSTS must be 2 to {MAX_WORKERS}: a kill needs another joined host"
        );
        assert!(crash.keys > 0, "{ENV_PREFIX}KEYS must be positive");
        assert!(
            crash.doomed_joins <= 100,
            "{ENV_PREFIX}DOOMED_JOINS is a percentage"
        );
        crash
    }

    fn config(&self) -> PodConfig {
        // A pod in a file: `CrashSafety::Auto` keeps undo images.
        PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(8 << 20)
            .slot_size_bytes(SLOT_BYTES)
            .max_key_bytes(32)
            .log_capacity_entries(LOG_CAPACITY_ENTRIES)
            .max_hosts(POD_MAX_HOSTS)
            .lease_ms(LEASE_MS)
            .record_width_bits(self.record_bits)
            .local_partitions(self.partition_after)
            .local_copies(self.copy_after)
            .record_width_switch(self.switch_width_every_ms > 0)
    }

    /// Whether a host's DRAM holds objects, whose writes a kill loses.
    fn local(&self) -> bool {
        self.partition_after > 0
    }
}

/// `MEGALON_CRASH_<name>`, parsed, if it is set.
fn env_var<T: std::str::FromStr>(name: &str) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    common::env_var(&format!("{ENV_PREFIX}{name}"))
}

/// Nanoseconds of `CLOCK_MONOTONIC`: one clock for every process of the machine, so the
/// workers' timestamps compare. The checker needs more than that of a clock (see
/// [`Clock`]): a reading taken after an operation's effect must come after the effect in
/// every other process's view. The SeqCst fences keep the caller's memory accesses from
/// moving across the reading (an effect's stores are visible before the response's
/// reading, and the next call's loads come after its invocation's); the rest is the
/// kernel's promise that the clock never goes backwards, across CPUs too. Equal readings
/// are concurrent to the checker.
fn monotonic_ns() -> u64 {
    fence(Ordering::SeqCst);
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live, writable timespec that clock_gettime fills; nothing else
    // refers to it.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(result, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    fence(Ordering::SeqCst);
    (now.tv_sec as u64) * 1_000_000_000 + now.tv_nsec as u64
}

fn key(i: u64) -> Vec<u8> {
    format!("crash-key-{i:03}").into_bytes()
}

// ---- the worker (a child process) ----

/// A worker's orders, from its environment.
struct Orders {
    pod: PathBuf,
    history: PathBuf,
    notes: PathBuf,
    /// Which worker process of the run this is, from 0: its process in the history and
    /// the writer of its values, so no two processes write the same value.
    incarnation: u32,
    join: Join,
    seed: u64,
    keys: u32,
    memory: MemoryKind,
    parent_pid: u32,
    /// Kill itself this long after it starts to join.
    die_joining_after: Option<Duration>,
    /// Switch the record width about this often (0: never).
    switch_width_every_ms: u64,
}

impl Orders {
    /// The orders the parent gave in the environment; `None` in a normal test run.
    fn from_env() -> Option<Orders> {
        let var = |name: &str| {
            std::env::var(format!("{WORKER_ENV}_{name}"))
                .unwrap_or_else(|_| panic!("the parent sets {WORKER_ENV}_{name}"))
        };
        let number = |name: &str| -> u64 {
            var(name)
                .parse()
                .unwrap_or_else(|e| panic!("{WORKER_ENV}_{name}: {e}"))
        };
        std::env::var_os(format!("{WORKER_ENV}_POD"))?;
        let join = match var("JOIN").as_str() {
            "any" => Join::AnyFree,
            id => Join::As(id.parse().expect("a host id or `any`")),
        };
        Some(Orders {
            pod: var("POD").into(),
            history: var("HISTORY").into(),
            notes: var("NOTES").into(),
            incarnation: number("INCARNATION") as u32,
            join,
            seed: number("SEED"),
            keys: number("KEYS") as u32,
            memory: var("MEMORY").parse().expect("a memory kind"),
            parent_pid: number("PARENT") as u32,
            die_joining_after: std::env::var(format!("{WORKER_ENV}_DIE_JOINING_US"))
                .ok()
                .map(|us| Duration::from_micros(us.parse().expect("microseconds"))),
            switch_width_every_ms: number("SWITCH_WIDTH_EVERY_MS"),
        })
    }
}

/// Asks the kernel to SIGKILL this process when the parent's thread that started it ends,
/// and exits at once if the parent is gone already (it died before the request).
fn die_with_parent(parent_pid: u32) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory of ours.
    let result = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    assert_eq!(result, 0, "prctl(PR_SET_PDEATHSIG)");
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } as u32 != parent_pid {
        std::process::exit(1);
    }
}

/// Joins as `join` says, trying again while the id is taken (its last holder is dead but
/// not recovered yet) or the table is full, and after any other error (handed to
/// `failed`), up to [`JOIN_BOUND`].
fn join_again(
    pod: &Arc<Pod>,
    join: Join,
    options: impl Fn() -> HostOptions,
    mut failed: impl FnMut(&Error),
) -> Host {
    let deadline = Instant::now() + JOIN_BOUND;
    loop {
        let error = match Host::join(pod, join, options()) {
            Ok(host) => return host,
            Err(error @ (Error::HostTaken { .. } | Error::HostTableFull { .. })) => error,
            Err(error) => {
                failed(&error);
                error
            }
        };
        assert!(
            Instant::now() < deadline,
            "could not join as {join:?} within {JOIN_BOUND:?}: {error}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a failed call tells the checker: no effect for certain, or perhaps one.
fn unknown_or_failed(error: &Error) -> Outcome {
    match error {
        Error::KeyTooLarge { .. }
        | Error::ValueTooLarge { .. }
        | Error::RetriesExhausted { .. } => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// Put: write the object if it exists, else create it; a create that finds it made by
/// someone else meanwhile starts over. Each attempt is atomic, so this is a put. A write
/// fails only before its first byte (`write_start` is its only fallible step, and a
/// failed one restores the object): no effect.
fn put(host: &Host, key: &[u8], bytes: &[u8]) -> Result<Outcome, (Outcome, Error)> {
    loop {
        match host.write(key, bytes) {
            Ok(_) => return Ok(Outcome::Ok),
            Err(Error::UnknownKey) => match host.create(key, bytes) {
                Ok(()) => return Ok(Outcome::Ok),
                Err(Error::ObjectExists) => continue,
                Err(error) => return Err((unknown_or_failed(&error), error)),
            },
            Err(error) => return Err((Outcome::Failed, error)),
        }
    }
}

/// Runs one operation on `host` and answers its outcome, or, if it failed, its outcome
/// for the checker and the error.
fn attempt(
    host: &Host,
    key: &[u8],
    call: Call,
    buf: &mut [u8],
) -> Result<Outcome, (Outcome, Error)> {
    let bytes = |value: Value| value.encode(SLOT_BYTES as usize).expect("encodes");
    let failed = |error: Error| (unknown_or_failed(&error), error);
    match call {
        Call::Get => match host.read(key, buf) {
            Ok(_) => Ok(Outcome::of_read(Some(buf))),
            Err(Error::UnknownKey) => Ok(Outcome::Absent),
            Err(error) => Err(failed(error)),
        },
        Call::Put(value) => put(host, key, &bytes(value)),
        Call::Create(value) => match host.create(key, &bytes(value)) {
            Ok(()) => Ok(Outcome::Created),
            Err(Error::ObjectExists) => Ok(Outcome::Exists),
            Err(error) => Err(failed(error)),
        },
        Call::Delete => match host.delete(key) {
            Ok(()) => Ok(Outcome::Deleted),
            Err(Error::UnknownKey) => Ok(Outcome::Absent),
            Err(error) => Err(failed(error)),
        },
    }
}

/// Runs one operation on `host` and answers its outcome. A failure is written to stderr
/// (a line starting with [`FAILED_CALL`]), where the parent counts them by error.
fn operate(host: &Host, key: &[u8], call: Call, buf: &mut [u8]) -> Outcome {
    attempt(host, key, call, buf).unwrap_or_else(|(outcome, error)| {
        eprintln!(
            "{FAILED_CALL}{call} on {:?} answered {outcome}: {error}",
            String::from_utf8_lossy(key)
        );
        outcome
    })
}

/// A worker: joins, then runs random operations until its standard input closes, each
/// journaled to its history file, and leaves. Its notes file says how the join went and
/// holds its host's [`Counters`] as they change.
#[test]
#[ignore = "a child process of crash_from_env (run by cargo xtask crash)"]
fn crash_worker() {
    let Some(orders) = Orders::from_env() else {
        return;
    };
    die_with_parent(orders.parent_pid);
    let history = File::create(&orders.history).expect("creating the history file");
    let mut notes = File::create(&orders.notes).expect("creating the notes file");
    let clock = Clock::external(monotonic_ns);
    let process = ProcessId::new(orders.incarnation, 0);
    let mut recorder = ThreadRecorder::journaled(process, clock, history).expect("journal");
    let pod = Arc::new(Pod::open(Backing::file(&orders.pod)).expect("opening the pod"));
    let memory = orders.memory.for_host(orders.seed, orders.incarnation);
    if let Some(after) = orders.die_joining_after {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            // SAFETY: kill(2) of our own pid with a signal number touches no memory.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
    }
    let joining = Instant::now();
    let host = join_again(
        &pod,
        orders.join,
        || HostOptions::new().memory(memory.clone()),
        |error| write_line(&mut notes, &format!("{JOIN_FAILED}{error}")),
    );
    let took = joining.elapsed().as_micros();
    write_line(&mut notes, &format!("{JOINED}{}", host.id()));
    write_line(&mut notes, &format!("{JOIN_TOOK}{took}"));

    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    std::thread::spawn(move || {
        // The parent closes our stdin to stop us (or dies, which closes it too).
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        // Relaxed: only a flag; the loop looks again at the next operation.
        stopping.store(true, Ordering::Relaxed);
    });
    let host = Arc::new(host);
    let switcher = (orders.switch_width_every_ms > 0).then(|| {
        let (host, stop) = (Arc::clone(&host), Arc::clone(&stop));
        let every = Duration::from_millis(orders.switch_width_every_ms);
        let first = orders.incarnation as usize;
        std::thread::spawn(move || switch_widths(&host, &stop, every, first))
    });

    let mut rng = SplitMix64::new(orders.seed);
    let mut buf = vec![0u8; SLOT_BYTES as usize];
    let mut sequence = 0u64;
    // The index of the next operation in the history.
    let mut index = 0usize;
    let mut counters = Counters::of(&host);
    counters.write(&mut notes);
    // With local partitions, half the operations go to a key of this worker's own, so
    // that objects see streaks of one host's accesses and move.
    let local = pod.config().partition_after_accesses > 0;
    let own_key = u64::from(orders.incarnation) % u64::from(orders.keys);
    while !stop.load(Ordering::Relaxed) {
        let key = key(if local && rng.next_u64().is_multiple_of(2) {
            own_key
        } else {
            rng.next_u64() % u64::from(orders.keys)
        });
        let mut value = || {
            sequence += 1;
            Value::new(orders.incarnation, sequence)
        };
        let call = match rng.next_u64() % 100 {
            c if c < GET_PERCENT => Call::Get,
            c if c < GET_PERCENT + PUT_PERCENT => Call::Put(value()),
            c if c < GET_PERCENT + PUT_PERCENT + CREATE_PERCENT => Call::Create(value()),
            _ => Call::Delete,
        };
        let pending = recorder
            .invoke(&key, call)
            .expect("journaling an invocation");
        let before = in_memory(&host);
        let outcome = operate(&host, &key, call, &mut buf);
        if in_memory(&host) != before {
            // Noted before the response: a kill in between leaves the call of unknown
            // outcome anyway.
            write_line(&mut notes, &format!("{IN_MEMORY}{index}"));
        }
        index += 1;
        recorder
            .complete(pending, outcome)
            .expect("journaling a response");
        let now = Counters::of(&host);
        if now != counters {
            counters = now;
            counters.write(&mut notes);
        }
    }
    if let Some(switcher) = switcher {
        switcher.join().expect("the width switcher");
    }
    Arc::into_inner(host).expect("the worker's host").leave();
}

/// A worker's width switches, until `stop`: every `every`, a switch to the next width of
/// [`SWITCH_WIDTHS`] (from the `first`), whatever it answers. A switch gives up (it waits
/// for a held record, or a killed host's announces until its recovery, past the wait
/// limit), meets another host's, or finds the width already there: the history does not
/// record switches, only what the operations beside them saw.
fn switch_widths(host: &Host, stop: &AtomicBool, every: Duration, first: usize) {
    let mut next = first;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(every);
        let bits = SWITCH_WIDTHS[next % SWITCH_WIDTHS.len()];
        next += 1;
        match host.switch_record_width(bits) {
            Ok(_)
            | Err(Error::RecordWidthSwitching { .. })
            | Err(Error::HostDeclaredDead { .. }) => {}
            Err(error) => panic!("a switch to {bits} bits: {error}"),
        }
    }
}

/// Reads and writes this thread of `host` served from its DRAM (objects in its partition).
fn in_memory(host: &Host) -> (u64, u64) {
    let events = host.inspect().thread_events();
    (events.local_reads, events.local_writes)
}

/// Appends `line` and a newline to a worker's notes in one `write`: a reader (or a kill)
/// never sees part of a line followed by more.
fn write_line(notes: &mut File, line: &str) {
    notes
        .write_all(format!("{line}\n").as_bytes())
        .expect("writing the notes");
}

/// What a worker's host did for the others, written into its notes each time it changes,
/// so that what a killed worker did is counted too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    hosts_recovered: u64,
    locks_recovered: u64,
    entries_skipped: u64,
    joins_served: u64,
    /// Local partitions and copies: objects moved into its DRAM, moved back, writes done
    /// there, move-back RPCs it served, copies it made.
    moves_to_host: u64,
    move_backs: u64,
    local_writes: u64,
    rpcs_served: u64,
    copies_made: u64,
    /// The record width switches its replica has applied (the pod's, not its own: the
    /// sum of two workers' is their larger).
    width_switches: u64,
}

impl Counters {
    fn of(host: &Host) -> Counters {
        let stats = host.inspect().stats();
        let events = host.events();
        Counters {
            hosts_recovered: stats.hosts_recovered,
            locks_recovered: stats.locks_recovered,
            entries_skipped: stats.entries_skipped,
            joins_served: stats.joins_served,
            moves_to_host: events.moves_to_host,
            move_backs: events.move_backs,
            local_writes: events.local_writes,
            rpcs_served: events.rpcs_served,
            copies_made: events.copies_made,
            width_switches: host
                .record_width()
                .map_or(0, |shape| u64::from(shape.epoch)),
        }
    }

    fn numbers(&self) -> [u64; 10] {
        [
            self.hosts_recovered,
            self.locks_recovered,
            self.entries_skipped,
            self.joins_served,
            self.moves_to_host,
            self.move_backs,
            self.local_writes,
            self.rpcs_served,
            self.copies_made,
            self.width_switches,
        ]
    }

    fn write(&self, notes: &mut File) {
        let numbers: Vec<String> = self.numbers().iter().map(u64::to_string).collect();
        write_line(notes, &format!("{COUNTERS}{}", numbers.join(" ")));
    }

    /// The counters of a notes line after [`COUNTERS`].
    fn parse(text: &str) -> Option<Counters> {
        let numbers: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        match numbers[..] {
            [hosts_recovered, locks_recovered, entries_skipped, joins_served, moves_to_host, move_backs, local_writes, rpcs_served, copies_made, width_switches] => {
                Some(Counters {
                    width_switches,
                    hosts_recovered,
                    locks_recovered,
                    entries_skipped,
                    joins_served,
                    moves_to_host,
                    move_backs,
                    local_writes,
                    rpcs_served,
                    copies_made,
                })
            }
            _ => None,
        }
    }
}

impl std::ops::Add for Counters {
    type Output = Counters;

    fn add(self, other: Counters) -> Counters {
        Counters {
            hosts_recovered: self.hosts_recovered + other.hosts_recovered,
            locks_recovered: self.locks_recovered + other.locks_recovered,
            entries_skipped: self.entries_skipped + other.entries_skipped,
            joins_served: self.joins_served + other.joins_served,
            moves_to_host: self.moves_to_host + other.moves_to_host,
            move_backs: self.move_backs + other.move_backs,
            local_writes: self.local_writes + other.local_writes,
            rpcs_served: self.rpcs_served + other.rpcs_served,
            copies_made: self.copies_made + other.copies_made,
            width_switches: self.width_switches.max(other.width_switches),
        }
    }
}

/// What a worker's notes say so far (whole lines only: the last may be being written).
#[derive(Debug, Default)]
struct Notes {
    /// The host id it joined as, once it has.
    host: Option<u32>,
    /// Its failed join attempts (other than a taken id or a full table).
    join_failures: Vec<String>,
    /// Its counters as it last wrote them.
    counters: Counters,
    /// Its operations served from its DRAM, by their index in its history.
    in_memory: hashbrown::HashSet<usize>,
    /// How long its join took (us), once it has joined.
    join_took_us: Option<u64>,
}

impl Notes {
    fn read(path: &Path) -> Notes {
        let mut notes = Notes::default();
        let Ok(text) = std::fs::read_to_string(path) else {
            return notes;
        };
        let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
        for line in whole.lines() {
            if let Some(host) = line.strip_prefix(JOINED) {
                notes.host = host.parse().ok();
            } else if let Some(error) = line.strip_prefix(JOIN_FAILED) {
                notes.join_failures.push(error.to_owned());
            } else if let Some(counters) = line.strip_prefix(COUNTERS).and_then(Counters::parse) {
                notes.counters = counters;
            } else if let Some(us) = line.strip_prefix(JOIN_TOOK) {
                notes.join_took_us = us.parse().ok();
            } else if let Some(index) = line.strip_prefix(IN_MEMORY) {
                notes.in_memory.extend(index.parse::<usize>().ok());
            }
        }
        notes
    }
}

// ---- the parent ----

/// A worker process the parent started.
struct Worker {
    incarnation: u32,
    child: Child,
    /// Its standard input; closing it stops the worker.
    stdin: Option<ChildStdin>,
    /// The host id it joined as, once its notes say so.
    host: Option<u32>,
    /// It kills itself while it joins (see [`Crash::doomed_joins`]).
    doomed: bool,
}

/// The run's files and its workers; every worker still running is killed on drop (the
/// run failed first), and then the directory is removed.
struct Run {
    workers: Vec<Worker>,
    pod_path: PathBuf,
    crash: Crash,
    /// Workers started so far (the next one's incarnation).
    started: u32,
    /// The incarnations killed so far (by the parent, or by themselves while joining).
    killed: Vec<u32>,
    /// Killed incarnations whose row (host id, process id) the pod still holds: their
    /// recovery is not done.
    recovering: Vec<(u32, u32, u32)>,
    /// When each killed incarnation's row was first seen freed (its recovery done: nothing
    /// it did can take effect after): its calls cut off by the kill end by then.
    recovered_at: hashbrown::HashMap<u32, u64>,
    /// The pod, as the parent sees it.
    pod: Arc<Pod>,
    /// Doomed workers that killed themselves, and how many of them before their join was
    /// done.
    doomed_died: u64,
    joins_cut: u64,
    /// The parent's generator: kill times, victims, how the replacements join, and the
    /// workers' seeds.
    rng: SplitMix64,
    /// The histories and the workers' stderr (in the temporary directory: they grow by
    /// about 80 bytes an operation, more than a small `/dev/shm` holds). Last, with the
    /// pod's, so they are removed after the workers are killed.
    dir: tempfile::TempDir,
    /// The pod file's directory, in `/dev/shm`.
    _pod_dir: tempfile::TempDir,
}

impl Run {
    fn history_path(&self, incarnation: u32) -> PathBuf {
        self.dir
            .path()
            .join(format!("worker-{incarnation}.history"))
    }

    fn notes_path(&self, incarnation: u32) -> PathBuf {
        self.dir.path().join(format!("worker-{incarnation}.notes"))
    }

    fn stderr_path(&self, incarnation: u32) -> PathBuf {
        self.dir.path().join(format!("worker-{incarnation}.stderr"))
    }

    /// Starts a worker that joins as `join`, and kills itself `die_joining_after` after it
    /// starts to join, if given.
    fn start(&mut self, join: Join, die_joining_after: Option<Duration>) {
        let incarnation = self.started;
        self.started += 1;
        let join = match join {
            Join::As(id) => id.to_string(),
            Join::AnyFree => "any".to_owned(),
        };
        let stderr = File::create(self.stderr_path(incarnation)).expect("a stderr file");
        let env = |name: &str| format!("{WORKER_ENV}_{name}");
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        if let Some(after) = die_joining_after {
            command.env(env("DIE_JOINING_US"), after.as_micros().to_string());
        }
        let mut child = command
            .args(["--exact", WORKER_TEST, "--ignored", "--nocapture"])
            .args(["--test-threads=1"])
            .env(env("POD"), &self.pod_path)
            .env(env("HISTORY"), self.history_path(incarnation))
            .env(env("NOTES"), self.notes_path(incarnation))
            .env(env("INCARNATION"), incarnation.to_string())
            .env(env("JOIN"), join)
            .env(env("SEED"), self.rng.next_u64().to_string())
            .env(env("KEYS"), self.crash.keys.to_string())
            .env(env("MEMORY"), self.crash.memory.name())
            .env(env("PARENT"), std::process::id().to_string())
            .env(
                env("SWITCH_WIDTH_EVERY_MS"),
                self.crash.switch_width_every_ms.to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("starting a worker");
        self.workers.push(Worker {
            incarnation,
            stdin: child.stdin.take(),
            child,
            host: None,
            doomed: die_joining_after.is_some(),
        });
    }

    /// What worker `incarnation` printed on stderr, for an error. An empty one is said to
    /// be, with the room left where it is written: a worker whose history write finds the
    /// disk full panics, and its panic's message finds no room either.
    fn stderr_of(&self, incarnation: u32) -> String {
        let path = self.stderr_path(incarnation);
        let text = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) => format!("(could not read {}: {error})", path.display()),
        };
        if text.trim().is_empty() {
            let room = match free_bytes(self.dir.path()) {
                Ok(bytes) => format!("{bytes} bytes"),
                Err(error) => format!("unknown ({error})"),
            };
            return format!(
                "(empty: the worker wrote nothing there, or could not; room left in {}, \
                 where its history and stderr are: {room})",
                self.dir.path().display()
            );
        }
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Fails if a worker has exited (none may, before it is told to stop), and notes the
    /// host ids of the workers that have joined since the last look.
    /// A doomed worker that killed itself is replaced by one that is not.
    fn look(&mut self) -> Result<(), String> {
        self.note_recoveries();
        let mut i = 0;
        while i < self.workers.len() {
            let incarnation = self.workers[i].incarnation;
            if let Some(status) = self.workers[i].child.try_wait().expect("polling a worker") {
                if !(self.workers[i].doomed && killed_by_sigkill(status)) {
                    return Err(format!(
                        "worker {incarnation} exited ({status}) before it was stopped; its stderr:\n{}",
                        self.stderr_of(incarnation)
                    ));
                }
                let worker = self.workers.swap_remove(i);
                self.died_joining(worker.incarnation, worker.child.id());
                let join = worker.host.map_or(Join::AnyFree, Join::As);
                self.start(join, None);
                continue;
            }
            if self.workers[i].host.is_none() {
                self.workers[i].host = Notes::read(&self.notes_path(incarnation)).host;
            }
            i += 1;
        }
        Ok(())
    }

    /// Notes the time at which each killed worker's row is first seen freed.
    fn note_recoveries(&mut self) {
        if self.recovering.is_empty() {
            return;
        }
        let rows = self.pod.hosts();
        let now = monotonic_ns();
        self.recovering.retain(|&(incarnation, host, pid)| {
            let held = rows.iter().any(|row| row.host == host && row.pid == pid);
            if !held {
                self.recovered_at.insert(incarnation, now);
            }
            held
        });
    }

    /// Counts doomed worker `incarnation` (process `pid`), which killed itself. One that
    /// had joined may have been in the middle of a call (its join can end before its
    /// timer): its recovery is timed as a killed worker's is, so that call ends by then.
    fn died_joining(&mut self, incarnation: u32, pid: u32) {
        self.killed.push(incarnation);
        self.doomed_died += 1;
        match Notes::read(&self.notes_path(incarnation)).host {
            None => self.joins_cut += 1,
            Some(host) => self.recovering.push((incarnation, host, pid)),
        }
    }

    /// Kills a random joined worker, unless it is the only one not doomed, and starts its
    /// replacement: joining as its host id or as any free one, at random, and doomed to
    /// die while it joins [`Crash::doomed_joins`] percent of the time. Answers whether it
    /// killed one.
    fn kill_one(&mut self) -> bool {
        let joined: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.workers[i].host.is_some())
            .collect();
        let lasting = joined.iter().filter(|&&i| !self.workers[i].doomed).count();
        if lasting < 2 {
            return false;
        }
        let victim = joined[(self.rng.next_u64() % joined.len() as u64) as usize];
        let mut worker = self.workers.swap_remove(victim);
        let pid = worker.child.id();
        // SIGKILL, as a crash would.
        worker.child.kill().expect("killing a worker");
        worker.child.wait().expect("reaping a worker");
        self.killed.push(worker.incarnation);
        let host = worker.host.expect("a joined worker");
        self.recovering.push((worker.incarnation, host, pid));
        let join = if self.rng.next_u64().is_multiple_of(2) {
            Join::As(host)
        } else {
            Join::AnyFree
        };
        let doomed = self.rng.next_u64() % 100 < u64::from(self.crash.doomed_joins);
        let span = DOOMED_AFTER_US.end - DOOMED_AFTER_US.start;
        let after = Duration::from_micros(DOOMED_AFTER_US.start + self.rng.next_u64() % span);
        self.start(join, doomed.then_some(after));
        true
    }

    /// Waits until every worker has joined.
    fn wait_joined(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + JOIN_BOUND + EXIT_BOUND;
        loop {
            self.look()?;
            let waiting: Vec<u32> = self
                .workers
                .iter()
                .filter(|w| w.host.is_none())
                .map(|w| w.incarnation)
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let stderr: Vec<String> = waiting.iter().map(|&i| self.stderr_of(i)).collect();
                return Err(format!(
                    "workers {waiting:?} did not join; their stderr:\n{}",
                    stderr.join("\n--\n")
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Closes every worker's stdin and waits for each to exit successfully.
    fn stop_all(&mut self) -> Result<(), String> {
        for worker in &mut self.workers {
            worker.stdin = None;
        }
        let deadline = Instant::now() + EXIT_BOUND;
        for i in 0..self.workers.len() {
            let incarnation = self.workers[i].incarnation;
            let status = loop {
                if let Some(status) = self.workers[i].child.try_wait().expect("polling") {
                    break status;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "worker {incarnation} did not stop within {EXIT_BOUND:?}; its stderr:\n{}",
                        self.stderr_of(incarnation)
                    ));
                }
                std::thread::sleep(POLL);
            };
            if self.workers[i].doomed && killed_by_sigkill(status) {
                let pid = self.workers[i].child.id();
                self.died_joining(incarnation, pid);
                continue;
            }
            if !status.success() {
                return Err(format!(
                    "worker {incarnation} failed ({status}); its stderr:\n{}",
                    self.stderr_of(incarnation)
                ));
            }
        }
        self.workers.clear();
        Ok(())
    }

    /// Every worker's history and `more`, merged. Each is read as the merge takes it, so
    /// only one is in memory besides the merged history. A killed worker's puts and gets
    /// served from its DRAM are of uncertain and unknown outcome (see the module's docs),
    /// but for a get the other logs show stale: a first pass notes every write whose
    /// effect is known (`KnownWrites`), so that a get of a lost value that another write
    /// had overwritten before it began is still judged.
    fn history(&self, more: ThreadLog) -> Result<History, String> {
        let mut known = KnownWrites::default();
        for incarnation in 0..self.started {
            let log = self.log(incarnation, &known)?;
            known.add(&log);
        }
        known.add(&more);
        known.seal();
        let mut unreadable = None;
        let logs = (0..self.started).map_while(|incarnation| match self.log(incarnation, &known) {
            Ok(log) => Some(log),
            Err(error) => {
                unreadable = Some(error);
                None
            }
        });
        let merged = History::merge(logs.chain([more]));
        match (unreadable, merged) {
            (Some(error), _) => Err(error),
            (None, merged) => merged.map_err(|e| format!("merging the histories: {e}")),
        }
    }

    /// Worker `incarnation`'s history as the checker takes it: a killed worker's calls
    /// served from its DRAM made uncertain or unknown (judged `against` the known writes:
    /// see `history`), its calls cut off by the kill bounded by its recovery.
    fn log(&self, incarnation: u32, against: &KnownWrites) -> Result<ThreadLog, String> {
        let path = self.history_path(incarnation);
        let log = File::open(&path)
            .map_err(megalon_workload::Error::from)
            .and_then(|file| ThreadLog::read_from(BufReader::new(file)))
            .map_err(|error| format!("{}: {error}", path.display()))?;
        if !self.killed.contains(&incarnation) {
            return Ok(log);
        }
        let in_memory = Notes::read(&self.notes_path(incarnation)).in_memory;
        // Doomed workers that killed themselves before their join was done are not
        // timed: they made no call.
        let recovered_by = self.recovered_at.get(&incarnation).copied();
        let log = log.with_lost_writes_against(|index| in_memory.contains(&index), against);
        Ok(match recovered_by {
            Some(by) => log.with_unfinished_ending_by(by),
            None => log,
        })
    }

    /// The errors of the calls that failed, from every worker's stderr, with their digits
    /// left out (host ids, times), each with how often it occurred, most frequent first.
    fn call_failures(&self) -> Vec<(String, u64)> {
        let mut counts: std::collections::HashMap<String, u64> = Default::default();
        for incarnation in 0..self.started {
            let text = std::fs::read_to_string(self.stderr_path(incarnation)).unwrap_or_default();
            for line in text.lines().filter(|line| line.starts_with(FAILED_CALL)) {
                let error = line
                    .split_once(" answered ")
                    .and_then(|(_, rest)| rest.split_once(": "))
                    .map_or(line, |(_, error)| error);
                let kind: String = error
                    .chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .collect();
                *counts.entry(kind).or_default() += 1;
            }
        }
        let mut counts: Vec<(String, u64)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        counts
    }

    /// What every worker's notes say: the sum of their counters, their join failures,
    /// and how long their joins took (us, sorted).
    fn notes(&self) -> (Counters, Vec<String>, Vec<u64>) {
        let mut counters = Counters::default();
        let mut join_failures = Vec::new();
        let mut joins_took_us = Vec::new();
        for incarnation in 0..self.started {
            let notes = Notes::read(&self.notes_path(incarnation));
            counters = counters + notes.counters;
            joins_took_us.extend(notes.join_took_us);
            join_failures.extend(
                notes
                    .join_failures
                    .into_iter()
                    .map(|error| format!("worker {incarnation}: {error}")),
            );
        }
        joins_took_us.sort_unstable();
        (counters, join_failures, joins_took_us)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.kill();
            let _ = worker.child.wait();
        }
    }
}

/// The bytes an unprivileged process may still write in the file system of `path`.
fn free_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct, filled below.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a writable statvfs, both live
    // for the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat.f_bavail * stat.f_frsize)
}

/// Whether a worker's exit status says SIGKILL ended it.
fn killed_by_sigkill(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// A random pause between two kills.
fn kill_interval(rng: &mut SplitMix64) -> Duration {
    let span = KILL_INTERVAL_MS.end - KILL_INTERVAL_MS.start;
    Duration::from_millis(KILL_INTERVAL_MS.start + rng.next_u64() % span)
}

/// What a run found: how many hosts were killed (and rejoined), and the history.
struct Outcomes {
    kills: u64,
    history: History,
    counters: Counters,
    join_failures: Vec<String>,
    /// The errors of failed calls, by kind (see [`Run::call_failures`]).
    call_failures: Vec<(String, u64)>,
    /// Doomed replacements that killed themselves, and how many before their join was
    /// done.
    doomed_died: u64,
    joins_cut: u64,
    /// How long every join took (us, sorted).
    joins_took_us: Vec<u64>,
}

/// Runs the workers, kills and restarts them until the time is up, stops them and checks
/// what they left; answers the merged history, or what went wrong.
fn run(crash: &Crash) -> Result<Outcomes, String> {
    let pod_dir = tempfile::Builder::new()
        .prefix("megalon-crash-")
        .tempdir_in(megalon_workload::processes::shared_memory_dir())
        .expect("a directory for the pod");
    let dir = tempfile::Builder::new()
        .prefix("megalon-crash-")
        .tempdir()
        .expect("a directory for the histories");
    let pod_path = pod_dir.path().join("crash.pod");
    let pod =
        Arc::new(Pod::create(&crash.config(), Backing::file(&pod_path)).expect("creating the pod"));
    assert!(pod.config().undo_images(), "a file pod keeps undo images");
    let mut run = Run {
        workers: Vec::new(),
        pod_path,
        crash: crash.clone(),
        started: 0,
        killed: Vec::new(),
        recovering: Vec::new(),
        recovered_at: hashbrown::HashMap::new(),
        pod: Arc::clone(&pod),
        doomed_died: 0,
        joins_cut: 0,
        rng: SplitMix64::new(crash.seed),
        dir,
        _pod_dir: pod_dir,
    };
    for host in 0..crash.hosts {
        run.start(Join::As(host), None);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(crash.seconds);
    let mut next_kill = Instant::now() + kill_interval(&mut run.rng);
    let mut kills = 0;
    while Instant::now() < deadline {
        run.look()?;
        if Instant::now() >= next_kill && run.kill_one() {
            kills += 1;
            next_kill = Instant::now() + kill_interval(&mut run.rng);
        }
        std::thread::sleep(POLL);
    }
    run.wait_joined()?;

    // The parent's host joins while the workers run (a late join needs a live host to
    // send it the index), then they stop.
    let parent = join_again(&pod, Join::AnyFree, HostOptions::new, |error| {
        eprintln!("the parent's join failed: {error}")
    });
    run.stop_all()?;
    let deadline = Instant::now() + EXIT_BOUND;
    while pod.hosts().len() > 1 {
        if Instant::now() > deadline {
            return Err(format!(
                "NOT clean: with every worker gone, the host table still holds {:?} besides the parent's host {}",
                pod.hosts(),
                parent.id()
            ));
        }
        std::thread::sleep(POLL);
    }
    // Every row but the parent's is free: every killed worker's recovery is done.
    run.note_recoveries();
    assert!(run.recovering.is_empty(), "rows freed: {:?}", pod.hosts());
    let census = parent.inspect().record_census();
    if !census.locked.is_empty() {
        return Err(format!(
            "NOT clean: with every worker gone, records {:?} are still locked",
            census.locked
        ));
    }
    // No object is left named as held in a host's DRAM: each worker that stopped moved
    // its objects back as it left, and each killed one's went back to CXL on recovery.
    for i in 0..u64::from(crash.keys) {
        let key = key(i);
        match parent.lookup(&key) {
            Ok(Some(entry)) if entry.local_owner.is_some() => {
                return Err(format!(
                    "NOT clean: with every worker gone, {:?} is held in host {:?}'s DRAM",
                    String::from_utf8_lossy(&key),
                    entry.local_owner
                ))
            }
            Ok(_) => {}
            Err(error) => return Err(format!("looking {key:?} up after the run: {error}")),
        }
    }
    // The final state, read by the parent, is part of the history.
    let mut recorder = ThreadRecorder::new(
        ProcessId::new(run.started, 0),
        Clock::external(monotonic_ns),
    );
    let mut buf = vec![0u8; SLOT_BYTES as usize];
    for i in 0..u64::from(crash.keys) {
        let key = key(i);
        let pending = recorder.invoke(&key, Call::Get).expect("recording");
        let outcome = match parent.read(&key, &mut buf) {
            Ok(_) => Outcome::of_read(Some(&buf)),
            Err(Error::UnknownKey) => Outcome::Absent,
            Err(error) => return Err(format!("reading {key:?} after the run: {error}")),
        };
        recorder.complete(pending, outcome).expect("recording");
    }
    parent.leave();
    let history = run.history(recorder.finish())?;
    let (counters, join_failures, joins_took_us) = run.notes();
    Ok(Outcomes {
        kills,
        history,
        counters,
        join_failures,
        call_failures: run.call_failures(),
        doomed_died: run.doomed_died,
        joins_cut: run.joins_cut,
        joins_took_us,
    })
}

/// One operation of `history`, as a line of a violation's report.
fn operation_line(history: &History, op: &Operation) -> String {
    format!(
        "\n   [{:>20}, {:>20}] {} on {:?}: {} -> {}",
        op.invoked_at,
        op.returned_at.map_or("never".into(), |t| t.to_string()),
        op.process,
        String::from_utf8_lossy(history.key(op.key)),
        op.call,
        op.outcome
    )
}

/// Runs and checks; `Ok` holds the verdict line, `Err` the violation with the seed.
fn run_and_check(crash: &Crash) -> Result<String, String> {
    let reproduce = format!(
        "seed {} (cargo xtask crash --seconds {} --seed {} --hosts {} --keys {} --memory {} --record-bits {} --partition-after {} --copy-after {} --doomed-joins {} --switch-width-every-ms {}; the seed fixes the choices, not the timing)",
        crash.seed,
        crash.seconds,
        crash.seed,
        crash.hosts,
        crash.keys,
        crash.memory.name(),
        crash.record_bits,
        crash.partition_after,
        crash.copy_after,
        crash.doomed_joins,
        crash.switch_width_every_ms
    );
    let outcomes = run(crash).map_err(|e| format!("crash: {e}\n{reproduce}"))?;
    let history = &outcomes.history;
    // Calls that returned an error (as the workers wrote them), and calls cut off by a
    // kill.
    let failed_calls: u64 = outcomes.call_failures.iter().map(|(_, count)| count).sum();
    // How long the slowest calls took (a host that waits on a dead one, until its
    // recovery), in ms.
    let mut took: Vec<u64> = (history.operations().iter())
        .filter_map(|op| op.returned_at.map(|at| (at - op.invoked_at) / 1_000_000))
        .collect();
    took.sort_unstable();
    let slowest = took.last().copied().unwrap_or(0);
    let over_100ms = took.iter().rev().take_while(|&&ms| ms >= 100).count();
    let cut = history
        .operations()
        .iter()
        .filter(|op| op.returned_at.is_none())
        .count();
    let c = outcomes.counters;
    let failures = &outcomes.join_failures;
    let quoted: Vec<&str> = failures
        .iter()
        .take(REPORT_JOIN_FAILURES)
        .map(String::as_str)
        .collect();
    let kinds: Vec<String> = (outcomes.call_failures.iter())
        .take(REPORT_CALL_FAILURES)
        .map(|(error, count)| format!("{count} {error}"))
        .collect();
    let errors = if kinds.is_empty() {
        failed_calls.to_string()
    } else {
        format!("{failed_calls} ({})", kinds.join("; "))
    };
    let took = &outcomes.joins_took_us;
    let joins = format!(
        "; {} replacements killed themselves while joining ({} before their join was done); joins took {} us (median), {} us at most",
        outcomes.doomed_died,
        outcomes.joins_cut,
        took.get(took.len() / 2).copied().unwrap_or(0),
        took.last().copied().unwrap_or(0)
    );
    let local = if crash.local() || crash.copy_after > 0 {
        format!(
            "; {} objects moved into a worker's DRAM, {} moved back, {} move-back RPCs served, {} writes done in DRAM, {} copies made",
            c.moves_to_host, c.move_backs, c.rpcs_served, c.local_writes, c.copies_made
        )
    } else {
        String::new()
    };
    let switches = if crash.switch_width_every_ms > 0 {
        format!("; the record width switched {} times", c.width_switches)
    } else {
        String::new()
    };
    println!(
        "crash: {reproduce}: {} workers at once, {} keys, {} memory, {}-bit records; {cut} calls cut off by a kill, {errors} calls failed, {over_100ms} calls took 100 ms or more (the slowest {slowest} ms); the workers recovered {} dead hosts and {} record locks, skipped {} log positions, served {} late joins{joins}{local}{switches}; {} join attempts failed{}{}",
        crash.hosts,
        crash.keys,
        crash.memory.name(),
        crash.record_bits,
        c.hosts_recovered,
        c.locks_recovered,
        c.entries_skipped,
        c.joins_served,
        failures.len(),
        if quoted.is_empty() { "" } else { ": " },
        quoted.join("; ")
    );
    // Every call a kill cut off ends by its host's recovery
    // (`ThreadLog::with_unfinished_ending_by`); left of unknown outcome, it could take
    // effect at any later time and excuse a stale read of its key for the rest of the run.
    // Every dead host's row is freed by the end, so none may be left unbounded.
    if cut > 0 {
        return Err(format!(
            "crash: NOT clean: {cut} calls cut off by a kill were never bounded by their host's recovery (of unknown outcome to the end)\n{reproduce}"
        ));
    }
    if outcomes.kills == 0 {
        return Err(format!(
            "crash: no host was killed in {} s: the run shows nothing\n{reproduce}",
            crash.seconds
        ));
    }
    // A host that waits on a dead one waits for its recovery (a lease and a pump's round),
    // not for its wait limit, and gets its answer: a failed call, or one slow enough to
    // have waited out most of a wait limit, says a wait did not end when it should have.
    if failed_calls > 0 || slowest >= SLOW_CALL_MS {
        return Err(format!(
            "crash: NOT clean: {failed_calls} calls failed, the slowest took {slowest} ms (at most {SLOW_CALL_MS} ms allowed)\n{reproduce}"
        ));
    }
    if crash.local() && c.moves_to_host == 0 {
        return Err(format!(
            "crash: local partitions on, and no object moved into a worker's DRAM in {} s: the run shows nothing of them\n{reproduce}",
            crash.seconds
        ));
    }
    if crash.switch_width_every_ms > 0 && c.width_switches == 0 {
        return Err(format!(
            "crash: width switches asked for, and the width never switched in {} s: the run shows nothing of them\n{reproduce}",
            crash.seconds
        ));
    }
    match check(history) {
        Ok(summary) => Ok(format!(
            "crash: {} hosts killed and rejoined, {} operations checked: linearizable",
            outcomes.kills, summary.operations
        )),
        Err(error) => {
            let mut around = String::new();
            if let Some(violation) = error.violation() {
                let failing = violation.failing_operation();
                let until = failing.returned_at.unwrap_or(u64::MAX);
                let mut before: Vec<&Operation> = history
                    .operations()
                    .iter()
                    .filter(|op| history.key(op.key) == &violation.key[..])
                    .filter(|op| op.invoked_at <= until)
                    .collect();
                before.sort_by_key(|op| op.invoked_at);
                let shown = &before[before.len().saturating_sub(REPORT_OPERATIONS)..];
                around.push_str(&format!(
                    "\nthe last {} operations on the key invoked before the failing one returned:",
                    shown.len()
                ));
                for op in shown {
                    around.push_str(&operation_line(history, op));
                }
            }
            Err(format!(
                "crash: NOT linearizable after {} hosts killed and rejoined, {} operations, {reproduce}: {error}{around}",
                outcomes.kills,
                history.len()
            ))
        }
    }
}

/// The run behind `cargo xtask crash`: parameters from `MEGALON_CRASH_*`.
#[test]
#[ignore = "run by cargo xtask crash"]
fn crash_from_env() {
    let crash = Crash::from_env();
    match run_and_check(&crash) {
        Ok(line) => println!("{line}"),
        Err(report) => {
            // On stdout, where `cargo xtask crash` looks for it.
            println!("{report}");
            panic!("the crash stress failed (report above)");
        }
    }
}
