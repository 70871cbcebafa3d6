//! The linearizability stress: several hosts with several threads each over one pod, on
//! the simulated non-coherent memory by default, Zipfian keys, a mix of reads, writes,
//! creates and deletes, an SCR small enough that records churn and 8-bit records so
//! counters wrap. Every operation is recorded; the history is checked with
//! `megalon-workload`'s checker. The same stress runs on pods with AllLog coherence
//! (locks and counters through the log), so the protocol mutants cover that path too.
//!
//! After the run, with every host quiet, the stress checks what a history cannot show: no
//! record is left locked, the records in use are exactly those the index names, and every
//! object reads whole on every host. Those final reads (every key, on every host, alone
//! and in `read_many`s) go into the history too, so the checker judges their values: a
//! host that reads a whole but stale value at the end fails the run. Every written value
//! is unique (each thread its own writer id), and the run fails if two writes share one.
//!
//! With the `chaos` feature and `chaos` on, every host's threads are preempted at the
//! protocol's points at a seeded rate, log appends fail at a seeded rate (refused, or left
//! unconfirmed), and wait limits are short: the error paths run as often as the others.
//! Errors are then expected, but only of the kinds `EXPECTED_UNDER_CHAOS` lists: any
//! other, met by a call or only by a host's pump in the background, fails the run.
//!
//! `stress_short` runs in `cargo test` (and so in every run of `cargo xtask mutants`).
//! `stress_from_env` is the long form behind `cargo xtask stress`, which sets its
//! parameters through `MEGALON_STRESS_*` variables and prints one final line:
//! `checked N operations from H hosts: linearizable`, or the first violation with the
//! seed that reproduces it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::named_records;
use megalon_core::{
    Backing, Coherence, CrashSafety, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};
use megalon_workload::{
    check, Call, Clock, History, Operation, Outcome, ProcessId, RandomSource, SplitMix64,
    ThreadLog, ThreadRecorder, Value,
};

/// What one stress run does.
#[derive(Clone, Debug)]
struct Stress {
    seconds: f64,
    hosts: u32,
    threads: u32,
    seed: u64,
    record_bits: u32,
    simulated: bool,
    keys: u64,
    zipf: f64,
    /// Records host 0's background reclaimer keeps in use at most (a fraction).
    reclaim_watermark: f64,
    /// Split (megalon) or AllLog.
    coherence: Coherence,
    /// Local partitions: consecutive accesses before a move to a host's DRAM (0: off).
    partition_after: u32,
    /// Local copies: reads from a host before it keeps a copy (0: off).
    copy_after: u32,
    /// Bytes of every key (over 32, a log entry spans two lines).
    key_bytes: usize,
    /// The simulated caches evict a random line once in this many accesses (0: never).
    eviction_one_in: u64,
    /// Only reads and writes (puts), no creates or deletes: records live long and
    /// counters wrap.
    reads_and_writes_only: bool,
    /// Schedule chaos and injected faults (needs the `chaos` feature).
    chaos: bool,
    /// Lines of records the SCR keeps (the rest goes to the application's SCR); 0: all
    /// it has room for. One line of 2- or 4-bit records: every record in use shares its
    /// byte with others in use.
    record_lines: u64,
    /// Each thread appends for itself instead of through its host's combiner (and waits
    /// for its entries' outcomes beside its siblings' replays).
    no_combining: bool,
    /// A switch of the record width every this many milliseconds, from each host in turn,
    /// through the widths [`SWITCH_WIDTHS`] (0: a pod whose width is fixed).
    switch_width_every_ms: u64,
    /// Writes keep undo images and announce their locks and claims
    /// ([`CrashSafety::Undo`]; no host dies here, but a switch drains only once no
    /// announce is left).
    undo: bool,
}

/// The widths a stress that switches goes through, in turn.
const SWITCH_WIDTHS: [u32; 5] = [16, 2, 32, 4, 8];

impl Default for Stress {
    fn default() -> Self {
        Self {
            seconds: 2.0,
            hosts: 3,
            threads: 2,
            seed: 1,
            record_bits: 8,
            simulated: true,
            keys: 2048,
            zipf: 0.99,
            reclaim_watermark: 0.5,
            coherence: Coherence::Split,
            partition_after: 0,
            copy_after: 0,
            key_bytes: 16,
            eviction_one_in: 64,
            reads_and_writes_only: false,
            chaos: false,
            record_lines: 0,
            no_combining: false,
            switch_width_every_ms: 0,
            undo: false,
        }
    }
}

const SLOT_BYTES: u64 = 128;
/// Keys of one `read_many` (a tenth of the calls, among the gets).
const MANY_KEYS: usize = 4;
/// The pod holds room for this many hosts, though only `hosts` join: the host table and
/// cursors then leave few records in a 4 KiB SCR (704 of 8 bits), so records churn.
const POD_MAX_HOSTS: u32 = 24;

/// Zipfian choice of key `i` with probability proportional to `1 / (i + 1)^s`, by binary
/// search in the cumulative weights.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(keys: u64, s: f64) -> Self {
        let mut sum = 0.0;
        let cumulative = (0..keys)
            .map(|i| {
                sum += 1.0 / ((i + 1) as f64).powf(s);
                sum
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut SplitMix64) -> u64 {
        let total = *self.cumulative.last().expect("keys > 0");
        let u = rng.next_f64() * total;
        self.cumulative.partition_point(|&c| c < u) as u64
    }
}

fn key(i: u64, key_bytes: usize) -> Vec<u8> {
    let mut key = format!("stress-key-{i:06}").into_bytes();
    key.resize(key_bytes.max(key.len()), b'.');
    key
}

/// What a failed call tells the checker: no effect for certain, or perhaps one.
fn unknown_or_failed(error: &Error) -> Outcome {
    match error {
        Error::KeyTooLarge { .. }
        | Error::ValueTooLarge { .. }
        | Error::RetriesExhausted { .. } => Outcome::Failed,
        // Chaos refused an append: nothing of it reached the log, and every append before
        // it in the same call changed no value (a lost delete, a slot claim, a move).
        Error::InjectedFault { fault } if *fault == "append refused" => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// A put that failed: where.
enum PutError {
    /// The write failed before its first byte (split coherence: `write_start` is the
    /// only fallible step of a write, and a failed one restores the object).
    Write(Error),
    /// The write failed with AllLog coherence: its unlock event may have been refused,
    /// and the pump appends it later, which makes the write visible then.
    WriteUnlock(Error),
    /// The create failed.
    Create(Error),
}

/// Put: write the object if it exists, else create it; a create that finds it made by
/// someone else meanwhile starts over. Each attempt is atomic, so this is a put.
fn put(host: &Host, key: &[u8], bytes: &[u8], split: bool) -> Result<(), PutError> {
    loop {
        match host.write(key, bytes) {
            Ok(_) => return Ok(()),
            Err(Error::UnknownKey) => match host.create(key, bytes) {
                Ok(()) => return Ok(()),
                Err(Error::ObjectExists) => continue,
                Err(e) => return Err(PutError::Create(e)),
            },
            Err(e) if split => return Err(PutError::Write(e)),
            Err(e) => return Err(PutError::WriteUnlock(e)),
        }
    }
}

/// The writer id of thread `t` of host `h`: `h * threads + t`, unique as long as
/// `hosts * threads` fits a `u32` (checked when the stress starts). (It was `h << 8 | t`,
/// which gave host 0's thread 256 the id of host 1's thread 0: with 256 threads or more
/// two threads wrote the same values, and a read of one's value passed for the other's.)
fn writer_id(stress: &Stress, h: u32, t: u32) -> u32 {
    h * stress.threads + t
}

/// The kinds of error (the variant's name) a call or a host's pump may meet under chaos,
/// and why. Any other kind fails the stress, met by a call or only in the background (the
/// pump's replay, grants, reclaimer, RPCs): a corrupt log entry, a record changed under
/// recovery, a panic, a host declared dead, a slot or record that ran out, a local object
/// missing, say the protocol broke whatever chaos did. (Without chaos any error fails.)
const EXPECTED_UNDER_CHAOS: &[(&str, &str)] = &[
    (
        "InjectedFault",
        "chaos refused an append, or left it unconfirmed: a call's, or the pump's own (a \
         reclaimer's deallocation, a grant, a move)",
    ),
    (
        "MoveBackFailed",
        "a move back to CXL whose append chaos refused (local partitions)",
    ),
    // Waits past the short wait limit chaos sets (100 ms), on cores shared with the
    // other threads, which chaos preempts inside the protocol's windows.
    (
        "RecordBusy",
        "a record locked by a preempted writer past the wait limit",
    ),
    (
        "ObjectLocked",
        "an AllLog lock held by a preempted writer past the wait limit",
    ),
    (
        "LocalObjectBusy",
        "a preempted local write or move back, past the wait limit",
    ),
    (
        "HostUnresponsive",
        "a preempted pump serving RPCs, past the wait limit",
    ),
    (
        "LogFull",
        "a preempted host's replay holding the head, past the wait limit",
    ),
    (
        "RecordWidthSwitching",
        "a switch of the record width whose drain preempted hosts held up (their \
         acknowledgements, their locks), past the wait limit of a change at the gate",
    ),
    (
        "ReplayStalled",
        "a preempted writer between reserve and publish, past the wait limit",
    ),
    (
        "CombinerStalled",
        "a preempted combiner, past the wait limit",
    ),
    (
        "RetriesExhausted",
        "reads preempted in their windows, invalidated by writes past the retry bound",
    ),
];

/// Whether an error of `kind` may happen under chaos (`EXPECTED_UNDER_CHAOS`).
fn expected_under_chaos(kind: &str) -> bool {
    EXPECTED_UNDER_CHAOS
        .iter()
        .any(|(expected, _)| *expected == kind)
}

/// The kinds of error the calls met, and how often (the variant's name).
#[derive(Default)]
struct ErrorKinds(std::sync::Mutex<std::collections::BTreeMap<String, u64>>);

impl ErrorKinds {
    /// The name of `error`'s variant.
    fn kind(error: &Error) -> String {
        let debug = format!("{error:?}");
        debug
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    fn note(&self, error: &Error) {
        *self.0.lock().unwrap().entry(Self::kind(error)).or_default() += 1;
    }

    /// `outcome`, `error` noted.
    fn noted(&self, error: &Error, outcome: Outcome) -> Outcome {
        self.note(error);
        outcome
    }
}

struct Report {
    history: History,
    /// Each kind of error the calls met, and how often.
    error_kinds: std::collections::BTreeMap<String, u64>,
    /// Calls whose effect is unknown (a subset of `errors`).
    unknown: u64,
    after: After,
    errors: u64,
    churn: u64,
    wraps: u64,
    retries: u64,
    lock_events: u64,
    stale_lines_served: u64,
    events: megalon_core::EventCounts,
}

/// Entries of each host's RPC ring in pods with local partitions.
const RING_ENTRIES: u32 = 4;

fn run(stress: &Stress) -> Report {
    // Writer ids (`writer_id`) and the final reads' thread id (`threads`) must not wrap.
    assert!(
        stress.threads >= 1
            && (stress.hosts.checked_mul(stress.threads)).is_some()
            && stress.threads < u32::MAX,
        "{} hosts of {} threads: too many threads for unique writer ids",
        stress.hosts,
        stress.threads
    );
    // The same records as without rings: the rings' SCR comes on top.
    let rings = if stress.partition_after > 0 {
        u64::from(POD_MAX_HOSTS) * megalon_core::rpc::scr_bytes(RING_ENTRIES.into())
    } else {
        0
    };
    // The announce words and the record under recovery (pods with undo images) too.
    let announces = if stress.undo {
        u64::from(POD_MAX_HOSTS) * megalon_core::limits::HOLDS_PER_HOST * 8 + 64
    } else {
        0
    };
    let config = PodConfig::new()
        .scr_bytes((4096 + rings + announces).next_multiple_of(4096))
        .rpc_ring_entries(if stress.partition_after > 0 {
            RING_ENTRIES
        } else {
            0
        })
        .local_partitions(stress.partition_after)
        .local_copies(stress.copy_after)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(SLOT_BYTES)
        .max_key_bytes(stress.key_bytes.max(32) as u32)
        .log_capacity_entries(1024)
        .record_width_bits(stress.record_bits)
        .max_hosts(POD_MAX_HOSTS)
        .coherence(stress.coherence)
        .record_width_switch(stress.switch_width_every_ms > 0)
        .crash_safety(if stress.undo {
            CrashSafety::Undo
        } else {
            CrashSafety::Off
        });
    let config = if stress.record_lines > 0 {
        let layout = megalon_core::Layout::new(&config).expect("layout");
        let records_bytes = layout.record_count * u64::from(stress.record_bits) / 8;
        config.app_scr_bytes(records_bytes - stress.record_lines * 64)
    } else {
        config
    };
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
    if stress.record_lines > 0 {
        let records = pod.layout().record_count * u64::from(stress.record_bits) / 8 / 64;
        assert_eq!(records, stress.record_lines, "lines of records");
    }
    let hosts: Vec<Host> = (0..stress.hosts)
        .map(|h| {
            let memory = if stress.simulated {
                MemoryKind::Simulated(SimulatedConfig {
                    seed: stress.seed.wrapping_mul(31).wrapping_add(u64::from(h)),
                    capacity_lines: if stress.eviction_one_in == 0 {
                        8192
                    } else {
                        1024
                    },
                    random_eviction_one_in: stress.eviction_one_in,
                    ..SimulatedConfig::default()
                })
            } else {
                MemoryKind::Hardware
            };
            // Host 0 reclaims in the background down to half the records; the others
            // only when an allocation finds none free (churn).
            let watermark = if h == 0 {
                stress.reclaim_watermark
            } else {
                1.0
            };
            let options = HostOptions::new()
                .memory(memory)
                .record_watermark(watermark)
                .flat_combining(!stress.no_combining)
                .wait_limit(Duration::from_secs(5));
            let options = with_chaos(options, stress, h);
            Host::join(&pod, Join::As(h), options).expect("join")
        })
        .collect();
    let clock = Clock::counter();
    let split = stress.coherence == Coherence::Split;
    let zipf = Zipf::new(stress.keys, stress.zipf);
    let deadline = Instant::now() + Duration::from_secs_f64(stress.seconds);
    let errors = std::sync::atomic::AtomicU64::new(0);
    let unknown = std::sync::atomic::AtomicU64::new(0);
    let kinds = ErrorKinds::default();
    let switches = std::sync::atomic::AtomicU64::new(0);
    let logs = std::thread::scope(|scope| {
        if stress.switch_width_every_ms > 0 {
            let (hosts, switches) = (&hosts, &switches);
            scope.spawn(move || {
                let every = Duration::from_millis(stress.switch_width_every_ms);
                let mut turn = 0usize;
                while Instant::now() + every < deadline {
                    std::thread::sleep(every);
                    let bits = SWITCH_WIDTHS[turn % SWITCH_WIDTHS.len()];
                    match hosts[turn % hosts.len()].switch_record_width(bits) {
                        Ok(_) => turn += 1,
                        // A write held its record past the switch's wait: nothing
                        // changed, try again. Under chaos, what a call may meet too (an
                        // append refused, a replay behind a preempted writer).
                        Err(Error::RecordWidthSwitching { .. }) => {}
                        Err(error)
                            if stress.chaos && expected_under_chaos(&ErrorKinds::kind(&error)) => {}
                        Err(error) => panic!("switch to {bits} bits: {error}"),
                    }
                    switches.store(turn as u64, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let mut workers = Vec::new();
        for (h, host) in hosts.iter().enumerate() {
            for t in 0..stress.threads {
                let (clock, zipf, errors, unknown) = (clock.clone(), &zipf, &errors, &unknown);
                let kinds = &kinds;
                let seed = stress.seed
                    ^ (((h as u64) << 32) | u64::from(t)).wrapping_mul(0x2545_f491_4f6c_dd1d);
                workers.push(scope.spawn(move || {
                    // The stress's own generator, so a seed means the same choices everywhere.
                    let mut rng = SplitMix64::new(seed);
                    // Unique among every thread of every host (`writer_id`): values
                    // must be, or the checker cannot tell one write's value from another's.
                    let writer = writer_id(stress, h as u32, t);
                    let mut recorder = ThreadRecorder::new(ProcessId::new(h as u32, t), clock);
                    let mut buf = vec![0u8; SLOT_BYTES as usize];
                    let mut sequence = 0u64;
                    while Instant::now() < deadline {
                        let key = key(zipf.sample(&mut rng), stress.key_bytes);
                        let choice = rng.next_u64()
                            % if stress.reads_and_writes_only {
                                80
                            } else {
                                100
                            };
                        let mut value = || {
                            sequence += 1;
                            let value = Value::new(writer, sequence);
                            (value, value.encode(SLOT_BYTES as usize).expect("encodes"))
                        };
                        if (40..=49).contains(&choice) {
                            // Gets of several keys in one `read_many`: each is a get of its
                            // own, in flight for the whole call.
                            let keys: Vec<Vec<u8>> = (0..MANY_KEYS)
                                .map(|_| self::key(zipf.sample(&mut rng), stress.key_bytes))
                                .collect();
                            let pending: Vec<_> = keys
                                .iter()
                                .map(|key| recorder.invoke(key, Call::Get).expect("record"))
                                .collect();
                            let mut bufs = vec![vec![0u8; SLOT_BYTES as usize]; keys.len()];
                            let mut reads = common::reads(&keys, &mut bufs);
                            // Half of them as prefix reads (two copies each: the first
                            // line, then the rest the extent asks for, here all of it).
                            let answers =
                                read_many_whole(host, &mut reads, !choice.is_multiple_of(2));
                            for ((pending, answer), buf) in
                                pending.into_iter().zip(answers).zip(&bufs)
                            {
                                let outcome = match answer {
                                    Ok(_) => Outcome::of_read(Some(buf)),
                                    Err(Error::UnknownKey) => Outcome::Absent,
                                    // A get changes no value: failed, it had no effect.
                                    Err(e) => {
                                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        kinds.note(&e);
                                        Outcome::Failed
                                    }
                                };
                                recorder.complete(pending, outcome).expect("record");
                            }
                            continue;
                        }
                        let (call, result) = match choice {
                            0..=49 => (Call::Get, None),
                            50..=79 => {
                                let (value, bytes) = value();
                                (Call::Put(value), Some(bytes))
                            }
                            80..=89 => {
                                let (value, bytes) = value();
                                (Call::Create(value), Some(bytes))
                            }
                            _ => (Call::Delete, None),
                        };
                        let pending = recorder.invoke(&key, call).expect("record");
                        let outcome = match (call, result) {
                            (Call::Get, _) => match host.read(&key, &mut buf) {
                                Ok(_) => Outcome::of_read(Some(&buf)),
                                Err(Error::UnknownKey) => Outcome::Absent,
                                Err(e) => kinds.noted(&e, unknown_or_failed(&e)),
                            },
                            (Call::Put(_), Some(bytes)) => match put(host, &key, &bytes, split) {
                                Ok(()) => Outcome::Ok,
                                Err(PutError::Write(e)) => kinds.noted(&e, Outcome::Failed),
                                Err(PutError::WriteUnlock(e)) => kinds.noted(&e, Outcome::Unknown),
                                Err(PutError::Create(e)) => kinds.noted(&e, unknown_or_failed(&e)),
                            },
                            (Call::Create(_), Some(bytes)) => match host.create(&key, &bytes) {
                                Ok(()) => Outcome::Created,
                                Err(Error::ObjectExists) => Outcome::Exists,
                                Err(e) => kinds.noted(&e, unknown_or_failed(&e)),
                            },
                            (Call::Delete, _) => match host.delete(&key) {
                                Ok(()) => Outcome::Deleted,
                                Err(Error::UnknownKey) => Outcome::Absent,
                                Err(e) => kinds.noted(&e, unknown_or_failed(&e)),
                            },
                            _ => unreachable!("every write carries its bytes"),
                        };
                        if matches!(outcome, Outcome::Unknown | Outcome::Failed) {
                            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let outcome = match outcome {
                            Outcome::Unknown if effects_settled(host) => Outcome::Uncertain,
                            Outcome::Unknown => {
                                unknown.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                Outcome::Unknown
                            }
                            known => known,
                        };
                        recorder.complete(pending, outcome).expect("record");
                    }
                    recorder.finish()
                }));
            }
        }
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect::<Vec<_>>()
    });
    let mut logs = logs;
    if stress.switch_width_every_ms > 0 {
        let switches = switches.into_inner();
        assert!(
            switches >= 2,
            "{switches} switches of the record width in the run"
        );
        println!("{switches} switches of the record width");
    }
    let (after, final_reads) = check_after(&hosts, stress, &clock);
    logs.extend(final_reads);
    let events = hosts
        .iter()
        .fold(megalon_core::EventCounts::default(), |a, h| a + h.events());
    let stale_lines_served = hosts
        .iter()
        .filter_map(|h| h.memory().simulated_stats())
        .map(|s| s.stale_lines_served)
        .sum();
    Report {
        history: History::merge(logs).expect("histories merge"),
        error_kinds: kinds.0.into_inner().unwrap(),
        after,
        errors: errors.into_inner(),
        unknown: unknown.into_inner(),
        churn: events.churn,
        wraps: events.wraps,
        retries: events.read_retries(),
        lock_events: events.lock_events,
        stale_lines_served,
        events,
    }
}

/// How often chaos preempts a thread at a point, and how often appends fail: refused
/// appends are frequent; unconfirmed ones rarer, as each leaves its call's outcome unknown
/// to the checker, whose search grows with unknown calls in flight on one key.
#[cfg(feature = "chaos")]
const CHAOS_PREEMPT_ONE_IN: u32 = 16;
#[cfg(feature = "chaos")]
const CHAOS_REFUSE_ONE_IN: u32 = 400;
#[cfg(feature = "chaos")]
const CHAOS_UNCONFIRM_ONE_IN: u32 = 3000;
/// The short wait limit under chaos (a wait that runs out is an error path too).
#[cfg(feature = "chaos")]
const CHAOS_WAIT_LIMIT: Duration = Duration::from_millis(100);

/// After a call that failed in a way that may hide an effect: waits (bounded) until the
/// host has applied every log entry appended so far (the call's own among them, with
/// `ctail` over them) and has no settle or deferred work left (an AllLog unlock the pump
/// appends later). Any effect of the call has then happened, and the call is recorded as
/// uncertain (it took effect before returning, or never) instead of unknown.
fn effects_settled(host: &Host) -> bool {
    let tail = host.inspect().log_cursors().2;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let settled = host
            .inspect()
            .settle_pending()
            .is_ok_and(|pending| pending == 0);
        if settled && host.inspect().applied_position() >= tail {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[cfg(feature = "chaos")]
fn with_chaos(options: HostOptions, stress: &Stress, host: u32) -> HostOptions {
    if !stress.chaos {
        return options;
    }
    let seed = stress.seed ^ (u64::from(host) << 48);
    let config = megalon_core::chaos::ChaosConfig::preemptions(seed, CHAOS_PREEMPT_ONE_IN)
        .faults(CHAOS_REFUSE_ONE_IN, CHAOS_UNCONFIRM_ONE_IN);
    options.chaos(config).wait_limit(CHAOS_WAIT_LIMIT)
}

#[cfg(not(feature = "chaos"))]
fn with_chaos(options: HostOptions, stress: &Stress, _host: u32) -> HostOptions {
    assert!(
        !stress.chaos,
        "chaos needs the `chaos` feature (cargo xtask stress --chaos builds with it)"
    );
    options
}

/// What the run left behind, checked with every host quiet.
#[derive(Debug, Default)]
struct After {
    /// Records whose word says locked.
    locked: usize,
    /// Records in use that no index entry names.
    leaked: usize,
    /// Records an index entry names whose word says free.
    missing: usize,
    /// Objects host 0's index names (every one read, and found whole, on every host).
    objects: usize,
    /// Objects whose bytes did not decode on some host.
    torn: usize,
    /// Objects some host could not read, and the first such error.
    unreadable: usize,
    first_unreadable: Option<String>,
    /// The final reads stopped after `FAILED_FINAL_READS_AT_MOST` failed (the run fails
    /// already; `unreadable` counts the objects read until then).
    final_reads_stopped: bool,
    /// Errors the hosts' pumps met in the background.
    background_errors: u64,
    /// The same by kind: how many, and the first of each.
    background_kinds: std::collections::BTreeMap<String, (u64, Error)>,
    /// What chaos did (preemptions, refused appends, unconfirmed appends).
    chaos: (u64, u64, u64),
}

/// Reads of an object the check makes again after a failed one, before it calls the
/// object unreadable: under chaos only (a refused append of a move back, say). Without
/// chaos a failed read is a defect, and is not made again.
const CHECK_READ_TRIES: u32 = 4;

/// Failed final reads (after their tries) past which the check reads no more: each may
/// have waited out the wait limit, and a diverged replica (the log's write-back switched
/// off, say) fails hundreds of them, which took the stress past ten minutes.
const FAILED_FINAL_READS_AT_MOST: usize = 4;

/// Waits until no host has settles or deferred work pending, every replica covers the
/// log, and the log and the records stay the same for a while (host 0's reclaimer works in
/// the background until records are under its watermark), then checks the records and
/// reads every key on every host, each read recorded (the logs returned, one per host, as
/// its thread `threads`) for the checker to judge with the workers' calls.
fn check_after(hosts: &[Host], stress: &Stress, clock: &Clock) -> (After, Vec<ThreadLog>) {
    let mut after = After::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    let mut quiet_rounds = 0;
    while quiet_rounds < 5 {
        let mut pending = 0;
        for host in hosts {
            pending += host.inspect().settle_pending().unwrap_or(1);
        }
        let tail = hosts[0].inspect().log_cursors().2;
        let behind = hosts.iter().any(|h| h.inspect().applied_position() < tail);
        let now = Some((tail, hosts[0].inspect().record_census()));
        if pending == 0 && !behind && now == last {
            quiet_rounds += 1;
        } else {
            quiet_rounds = 0;
        }
        last = now;
        assert!(
            Instant::now() < deadline,
            "the hosts did not quiesce: {pending} settles pending"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let census = hosts[0].inspect().record_census();
    let named = named_records(&hosts[0]);
    after.locked = census.locked.len();
    after.leaked = census
        .in_use
        .iter()
        .filter(|r| named.binary_search(r).is_err())
        .count();
    after.missing = named
        .iter()
        .filter(|r| census.in_use.binary_search(r).is_err())
        .count();
    // Every key the workers could have touched, read on every host, alone and in
    // `read_many`s, each read recorded into the history (as host h's thread `threads`,
    // which no worker is) after every worker's last call: the checker judges the final
    // values like any other read, so one host's whole but stale value, or a key one host
    // finds and another does not, is a violation. (Checked only for decoding, a stale
    // value passed.)
    let present: std::collections::HashSet<Vec<u8>> = hosts[0]
        .inspect()
        .replica_snapshot()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let keys: Vec<Vec<u8>> = (0..stress.keys).map(|i| key(i, stress.key_bytes)).collect();
    let mut whole = vec![true; keys.len()];
    let mut readable = vec![true; keys.len()];
    let mut logs = Vec::new();
    let tries = if stress.chaos { CHECK_READ_TRIES } else { 0 };
    let mut failed_reads = 0;
    let failed = |answers: &[FinalRead]| {
        answers
            .iter()
            .filter(|a| matches!(a, FinalRead::Failed(_)))
            .count()
    };
    for (h, host) in hosts.iter().enumerate() {
        if after.final_reads_stopped {
            break;
        }
        let process = ProcessId::new(h as u32, stress.threads);
        let mut recorder = ThreadRecorder::new(process, clock.clone());
        for (chunk, indices) in (0..keys.len())
            .collect::<Vec<_>>()
            .chunks(MANY_KEYS)
            .enumerate()
        {
            if failed_reads >= FAILED_FINAL_READS_AT_MOST {
                after.final_reads_stopped = true;
                break;
            }
            // Each key alone, then the chunk in one `read_many` (or its prefix form).
            for &i in indices {
                let answers = read_recorded(&mut recorder, &keys[i..=i], tries, |keys, bufs| {
                    vec![host.read(&keys[0], &mut bufs[0]).map(drop)]
                });
                failed_reads += failed(&answers);
                judge(
                    &mut after,
                    hosts,
                    h,
                    &keys[i],
                    &present,
                    &answers[0],
                    &mut whole[i],
                    &mut readable[i],
                );
            }
            let chunk_keys: Vec<Vec<u8>> = indices.iter().map(|&i| keys[i].clone()).collect();
            let answers = read_recorded(&mut recorder, &chunk_keys, tries, |keys, bufs| {
                let mut reads = common::reads(keys, bufs);
                read_many_whole(host, &mut reads, chunk % 2 != 0)
            });
            failed_reads += failed(&answers);
            for (&i, answer) in indices.iter().zip(&answers) {
                judge(
                    &mut after,
                    hosts,
                    h,
                    &keys[i],
                    &present,
                    answer,
                    &mut whole[i],
                    &mut readable[i],
                );
            }
        }
        logs.push(recorder.finish());
    }
    // (A key host 0 does not have counts too if another host found it torn or could not
    // read it.)
    after.objects = keys.iter().filter(|key| present.contains(*key)).count();
    after.torn = whole.iter().filter(|whole| !**whole).count();
    after.unreadable = readable.iter().filter(|readable| !**readable).count();
    for host in hosts {
        let background = host.inspect().background_errors();
        after.background_errors += background.count;
        for (kind, (count, first)) in background.by_kind {
            after.background_kinds.entry(kind).or_insert((0, first)).0 += count;
        }
        #[cfg(feature = "chaos")]
        {
            let counts = host.inspect().chaos_counts();
            after.chaos.0 += counts.preemptions;
            after.chaos.1 += counts.refused;
            after.chaos.2 += counts.unconfirmed;
        }
    }
    (after, logs)
}

/// What a final read found.
enum FinalRead {
    Whole,
    Torn,
    Absent,
    Failed(Error),
}

/// Counts what host `h`'s final read of `key` found into `whole` and `readable` (an
/// object host 0's index names must be found), and describes the first unreadable one.
#[allow(clippy::too_many_arguments)]
fn judge(
    after: &mut After,
    hosts: &[Host],
    h: usize,
    key: &[u8],
    present: &std::collections::HashSet<Vec<u8>>,
    read: &FinalRead,
    whole: &mut bool,
    readable: &mut bool,
) {
    let error = match read {
        FinalRead::Whole => return,
        FinalRead::Torn => {
            *whole = false;
            return;
        }
        // Absent where host 0 has it is a violation the checker shows too.
        FinalRead::Absent if !present.contains(key) => return,
        FinalRead::Absent => Error::UnknownKey,
        FinalRead::Failed(error) => error.clone(),
    };
    *readable = false;
    let host = &hosts[h];
    after.first_unreadable.get_or_insert_with(|| {
        let entry = host
            .inspect()
            .replica_snapshot()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, entry)| entry);
        let record = entry.as_ref().and_then(|e| e.record);
        let (in_use, locked) = record.map_or((false, false), |r| {
            let now = hosts[0].inspect().record_census();
            (now.in_use.contains(&r), now.locked.contains(&r))
        });
        format!(
            "host {h} reading {:?}: {error} (its index entry: {entry:?}; \
             the record in use: {in_use}, locked: {locked})",
            String::from_utf8_lossy(key)
        )
    });
}

/// Reads `keys` by `read` (their answers, one per key, in order), recording each as a get
/// of its own in flight for the whole call; a read that failed (chaos refused a move
/// back's append, say) is recorded as failed and the whole call is made again, up to
/// `retries` times. Returns the last answers.
fn read_recorded(
    recorder: &mut ThreadRecorder,
    keys: &[Vec<u8>],
    retries: u32,
    read: impl Fn(&[Vec<u8>], &mut [Vec<u8>]) -> Vec<Result<(), Error>>,
) -> Vec<FinalRead> {
    let mut tries = 0;
    loop {
        let pending: Vec<_> = keys
            .iter()
            .map(|key| recorder.invoke(key, Call::Get).expect("record"))
            .collect();
        let mut bufs = vec![vec![0u8; SLOT_BYTES as usize]; keys.len()];
        let answers = read(keys, &mut bufs);
        for ((pending, answer), buf) in pending.into_iter().zip(&answers).zip(&bufs) {
            let outcome = match answer {
                Ok(()) => Outcome::of_read(Some(buf)),
                Err(Error::UnknownKey) => Outcome::Absent,
                Err(_) => Outcome::Failed,
            };
            recorder.complete(pending, outcome).expect("record");
        }
        let failed = answers
            .iter()
            .any(|a| matches!(a, Err(e) if !matches!(e, Error::UnknownKey)));
        if !failed || tries == retries {
            return answers
                .into_iter()
                .zip(bufs)
                .map(|(answer, buf)| match answer {
                    Ok(()) if Value::decode(&buf).is_ok() => FinalRead::Whole,
                    Ok(()) => FinalRead::Torn,
                    Err(Error::UnknownKey) => FinalRead::Absent,
                    Err(error) => FinalRead::Failed(error),
                })
                .collect();
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The errors of a run judged: without chaos nothing refuses an append, so a call's
/// error, or the pump's, is a defect (the checker ignores a failed call, so it would not
/// tell); under chaos so is every kind not `EXPECTED_UNDER_CHAOS`, a call's or only the
/// pump's. `Err` names the kinds that fail the run.
fn judge_errors(
    chaos: bool,
    calls: &std::collections::BTreeMap<String, u64>,
    background: &std::collections::BTreeMap<String, (u64, Error)>,
) -> Result<(), String> {
    let unexpected = |kind: &&String| !chaos || !expected_under_chaos(kind);
    let broken: Vec<&String> = calls.keys().filter(unexpected).collect();
    let broken_background: Vec<String> = (background.iter())
        .filter(|(kind, _)| unexpected(kind))
        .map(|(kind, (count, first))| format!("{kind} x{count}, the first: {first}"))
        .collect();
    if broken.is_empty() && broken_background.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "calls: {broken:?}; in the background: {broken_background:?}"
        ))
    }
}

/// Runs and checks; `Err` holds the violation, described with the seed.
fn run_and_check(stress: &Stress) -> Result<String, String> {
    let report = run(stress);
    let operations = report.history.len();
    if stress.coherence == Coherence::AllLog {
        assert!(
            report.lock_events > 0,
            "AllLog writes take locks through the log"
        );
        assert_eq!(report.churn, 0, "AllLog never allocates a record");
    }
    let e = &report.events;
    if stress.partition_after > 0 {
        assert!(
            e.moves_to_host > 0 && e.move_backs > 0 && e.rpcs_served > 0,
            "objects moved to hosts and back: {e:?}"
        );
    }
    if stress.copy_after > 0 {
        assert!(
            e.copies_made > 0 && e.copy_reads > 0 && e.copies_invalidated > 0,
            "copies were made, read and invalidated: {e:?}"
        );
    }
    let a = &report.after;
    let read_whole = if a.final_reads_stopped {
        format!(
            "the final reads stopped after {FAILED_FINAL_READS_AT_MOST} failed, of {} objects",
            a.objects
        )
    } else {
        format!(
            "{} of {}",
            a.objects.saturating_sub(a.torn + a.unreadable),
            a.objects
        )
    };
    let left_behind = format!(
        "records locked after the run: {}, leaked: {}, named but free: {}, objects read whole on every host: {read_whole}{}",
        a.locked,
        a.leaked,
        a.missing,
        a.first_unreadable
            .as_ref()
            .map_or(String::new(), |first| format!(" ({} unreadable; first: {first})", a.unreadable)),
    );
    let chaos = if stress.chaos {
        format!(
            ", chaos: {} preemptions, {} appends refused, {} unconfirmed, {} background errors",
            a.chaos.0, a.chaos.1, a.chaos.2, a.background_errors
        )
    } else {
        String::new()
    };
    let details = format!(
        "({} coherence{}, seed {}, {} errors ({} of unknown effect), {} churn, {} wraps, {} lock events, {} read retries, {} stale lines served by the simulated caches, {} moves to a host, {} move-backs, {} rpcs, {} copies made, {} copy reads, {} copies invalidated)",
        stress.coherence.name(),
        if stress.no_combining {
            ", no combining"
        } else {
            ""
        },
        stress.seed,
        report.errors,
        report.unknown,
        report.churn,
        report.wraps,
        report.lock_events,
        report.retries,
        report.stale_lines_served,
        e.moves_to_host,
        e.move_backs,
        e.rpcs_sent,
        e.copies_made,
        e.copy_reads,
        e.copies_invalidated,
    );
    let background: std::collections::BTreeMap<&String, u64> = a
        .background_kinds
        .iter()
        .map(|(kind, (count, _))| (kind, *count))
        .collect();
    let details = format!(
        "{left_behind}{chaos} {details}; errors by kind: {:?}; in the background: {background:?}",
        report.error_kinds
    );
    // A chaos run whose chaos did nothing is the plain run under another name: it must
    // have preempted threads and (where calls append often enough to draw a fault at its
    // rate: not reads and writes only) refused appends. (With faults never drawn,
    // `--chaos` passed with "0 appends refused".)
    if stress.chaos && (a.chaos.0 == 0 || (!stress.reads_and_writes_only && a.chaos.1 == 0)) {
        return Err(format!(
            "NOT clean: chaos asked for, and it did nothing ({} preemptions, {} appends \
             refused) after {operations} operations, reproduce with --seed {}: {details}",
            a.chaos.0, a.chaos.1, stress.seed
        ));
    }
    if let Err(broken) = judge_errors(stress.chaos, &report.error_kinds, &a.background_kinds) {
        return Err(format!(
            "NOT clean: errors after {operations} operations from {} hosts ({broken}), \
             reproduce with --seed {}: {details}",
            stress.hosts, stress.seed
        ));
    }
    if a.locked > 0 || a.leaked > 0 || a.missing > 0 || a.torn > 0 || a.unreadable > 0 {
        return Err(format!(
            "NOT clean after {operations} operations from {} hosts, reproduce with --seed {}: {details}",
            stress.hosts, stress.seed
        ));
    }
    // Every written value is one write's: the checker tells writes apart by their values,
    // and two writes of one value would let a read of either pass for the other.
    let mut written = std::collections::HashSet::new();
    for op in report.history.operations() {
        if let Call::Put(value) | Call::Create(value) = op.call {
            if !written.insert(value) {
                return Err(format!(
                    "NOT clean: value {value} written twice ({}), reproduce with --seed {}: {details}",
                    op.process, stress.seed
                ));
            }
        }
    }
    match check(&report.history) {
        Ok(summary) => Ok(format!(
            "checked {} operations from {} hosts: linearizable {details}",
            summary.operations, stress.hosts
        )),
        Err(error) => {
            // The report is shrunk to the fewest operations that still fail; the whole
            // neighbourhood of the key helps to see what happened.
            let mut neighbourhood = String::new();
            if let Some(violation) = error.violation() {
                let failing = violation.failing_operation();
                // From shortly before the failing call, or before the first call that
                // carried the value it read, to its end: every call on its key and on
                // the keys those calls were on.
                let mut from = failing.invoked_at.saturating_sub(400);
                let mut keys = vec![failing.key];
                if let Outcome::Found(read) = failing.outcome {
                    neighbourhood.push_str("\nevery call that carried the value read:");
                    for op in report.history.operations() {
                        if matches!(op.call, Call::Put(v) | Call::Create(v) if v == read) {
                            neighbourhood.push_str(&operation_line(&report.history, op, true));
                            from = from.min(op.invoked_at.saturating_sub(400));
                            if !keys.contains(&op.key) {
                                keys.push(op.key);
                            }
                        }
                    }
                }
                neighbourhood.push_str("\nthe operations that show it:");
                for op in violation.operations.iter().take(40) {
                    neighbourhood.push_str(&operation_line(&report.history, op, true));
                }
                neighbourhood.push_str(&format!(
                    "\nevery operation on the key{} from time {from} on:",
                    if keys.len() > 1 { "s above" } else { "" }
                ));
                let mut shown = 0;
                for op in report.history.operations() {
                    if keys.contains(&op.key)
                        && op.invoked_at >= from
                        && op.invoked_at <= failing.returned_at.unwrap_or(u64::MAX)
                        && shown < 300
                    {
                        neighbourhood.push_str(&operation_line(&report.history, op, true));
                        shown += 1;
                    }
                }
            }
            // A search past the checker's bounds says nothing either way: a failure, but
            // not called a violation.
            let verdict = if error.violation().is_some() {
                "NOT linearizable"
            } else {
                "NOT decided"
            };
            Err(format!(
                "{verdict} after {operations} operations from {} hosts, reproduce with --seed {}: {error} {details}{neighbourhood}",
                stress.hosts, stress.seed
            ))
        }
    }
}

/// One operation of `history`, as a line of a violation's report (naming its key if
/// `with_key`).
fn operation_line(history: &History, op: &Operation, with_key: bool) -> String {
    let key = if with_key {
        format!(" on {:?}", String::from_utf8_lossy(history.key(op.key)))
    } else {
        String::new()
    };
    format!(
        "\n   [{:>8}, {:>8}] {}{key}: {} -> {}",
        op.invoked_at,
        op.returned_at.map_or("-".into(), |t| t.to_string()),
        op.process,
        op.call,
        op.outcome
    )
}

/// Runs and checks `stress`: prints the verdict, or panics with the violation.
fn assert_linearizable(stress: &Stress) {
    match run_and_check(stress) {
        Ok(line) => println!("{line}"),
        Err(violation) => {
            // On stdout too, where `cargo xtask stress` looks for the verdict.
            println!("{violation}");
            panic!("{violation}")
        }
    }
}

/// The short stresses `cargo test` runs, each a test of its own (`cargo xtask mutants`
/// names them): `name { the fields it changes from the default }`.
macro_rules! short_stresses {
    ($($(#[$attribute:meta])* $name:ident { $($field:ident: $value:expr),* $(,)? })*) => {$(
        $(#[$attribute])*
        #[test]
        fn $name() {
            assert_linearizable(&Stress { $($field: $value,)* ..Stress::default() });
        }
    )*};
}

short_stresses! {
    stress_short {}
    stress_short_with_16_bit_records_on_hardware_memory {
        seconds: 1.0, record_bits: 16, simulated: false,
    }
    /// A few hot objects, and host 0 deallocating every record it can find all the time:
    /// deallocations meet writes in progress.
    stress_short_with_a_reclaimer_racing_writers {
        seconds: 1.5, keys: 8, zipf: 0.5, reclaim_watermark: 0.0,
    }
    /// The same race on real memory, where operations are fast enough to hit the window
    /// between a writer's lookup and its lock (the event check after the lock) often.
    stress_short_with_a_reclaimer_racing_writers_on_hardware_memory {
        seconds: 1.5, keys: 8, zipf: 0.5, reclaim_watermark: 0.0, simulated: false, record_bits: 16,
    }
    stress_short_with_all_log_coherence { seconds: 1.5, coherence: Coherence::AllLog }
    /// A few hot objects on real memory: Lock events race and lose often.
    stress_short_with_all_log_coherence_on_hot_keys_on_hardware_memory {
        seconds: 1.0, keys: 8, zipf: 0.5, simulated: false, coherence: Coherence::AllLog,
    }
    /// Objects move to a host after two consecutive accesses from it: the hot ones move
    /// there and back (by RPC) all the time.
    stress_short_with_local_partitions { seconds: 1.5, keys: 64, partition_after: 2 }
    /// Copies after two reads, on keys written all the time: made and invalidated.
    stress_short_with_local_copies { seconds: 1.5, keys: 64, copy_after: 2 }
    stress_short_with_local_partitions_and_copies {
        seconds: 1.5, keys: 64, partition_after: 3, copy_after: 2,
    }
    /// Every log entry spans two lines: an entry whose lines are not all written back
    /// before it is published shows.
    stress_short_with_keys_over_32_bytes { seconds: 1.5, key_bytes: 48 }
    /// Stale lines stay cached (the simulated caches hardly evict), records live long (no
    /// creates or deletes, no background reclaim) and 8-bit counters wrap often: a missing
    /// wrap event or invalidation shows instead of being hidden by eviction.
    stress_short_with_few_keys_little_eviction_reads_and_writes {
        seconds: 1.5, keys: 16, zipf: 0.5, eviction_one_in: 0, reads_and_writes_only: true,
        reclaim_watermark: 1.0,
    }
    /// The same with 4-bit records, two to a byte (each changed by a CAS of the byte that
    /// keeps the other's bits): a 2-bit counter wraps every second write of an object.
    stress_short_with_4_bit_records_on_few_keys_reads_and_writes {
        seconds: 1.0, keys: 16, zipf: 0.5, eviction_one_in: 0, reads_and_writes_only: true,
        reclaim_watermark: 1.0, record_bits: 4,
    }
    /// 2-bit records, four to a byte and no counter: every write appends a wrap event,
    /// the only way a reader whose copy a whole write overlapped learns of it.
    stress_short_with_2_bit_records_on_few_keys_reads_and_writes {
        seconds: 1.0, keys: 16, zipf: 0.5, eviction_one_in: 0, reads_and_writes_only: true,
        reclaim_watermark: 1.0, record_bits: 2,
    }
    /// 2-bit records with creates, deletes and a reclaimer freeing records under writers.
    stress_short_with_2_bit_records_and_a_reclaimer_racing_writers {
        seconds: 1.0, keys: 8, zipf: 0.5, reclaim_watermark: 0.0, record_bits: 2,
    }
    /// One line of 2-bit records (256) for more objects than that: every record in use
    /// shares its byte with three others in use, changed by CASes of that byte, and
    /// records churn (host 0 reclaims down to 60%).
    stress_short_with_2_bit_records_sharing_their_bytes {
        seconds: 1.0, keys: 320, zipf: 0.5, reclaim_watermark: 0.6, record_bits: 2,
        record_lines: 1, simulated: false,
    }
    /// The same with 4-bit records (128 in a line), two to a byte.
    stress_short_with_4_bit_records_sharing_their_bytes {
        seconds: 1.0, keys: 160, zipf: 0.5, reclaim_watermark: 0.6, record_bits: 4,
        record_lines: 1, simulated: false,
    }
    /// The record width switched every 20 ms through every width: objects lose their
    /// records at each switch while writes, deletes and the reclaimer take records.
    stress_short_with_width_switches { seconds: 1.5, switch_width_every_ms: 20 }
    /// The same on real memory, where operations are fast enough to meet a switch's
    /// freeze in every window of the lock and the claim.
    stress_short_with_width_switches_on_hardware_memory {
        seconds: 1.0, simulated: false, switch_width_every_ms: 10,
    }
    #[cfg(feature = "chaos")]
    stress_short_with_chaos_and_width_switches {
        seconds: 2.0, chaos: true, switch_width_every_ms: 20,
    }
    /// Width switches in a pod with undo images: every lock and claim is announced, and
    /// a switch drains only once no announce is left.
    stress_short_with_undo_images_and_width_switches {
        seconds: 1.5, switch_width_every_ms: 20, undo: true,
    }
    #[cfg(feature = "chaos")]
    stress_short_with_chaos { seconds: 2.0, chaos: true }
    #[cfg(feature = "chaos")]
    stress_short_with_chaos_on_few_keys_reads_and_writes {
        seconds: 2.0, keys: 16, zipf: 0.5, eviction_one_in: 0, reads_and_writes_only: true,
        reclaim_watermark: 1.0, chaos: true,
    }
}

/// `MEGALON_STRESS_<name>`, parsed, if it is set.
fn env_var<T: std::str::FromStr>(name: &str) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    common::env_var(&format!("MEGALON_STRESS_{name}"))
}

/// The long form for `cargo xtask stress`: parameters from `MEGALON_STRESS_*`.
#[test]
#[ignore = "run by cargo xtask stress"]
fn stress_from_env() {
    let mut stress = Stress::default();
    stress.seconds = env_var("SECONDS").unwrap_or(stress.seconds);
    stress.hosts = env_var("HOSTS").unwrap_or(stress.hosts);
    stress.threads = env_var("THREADS").unwrap_or(stress.threads);
    stress.seed = env_var("SEED").unwrap_or(stress.seed);
    stress.record_bits = env_var("RECORD_BITS").unwrap_or(stress.record_bits);
    stress.partition_after = env_var("PARTITION_AFTER").unwrap_or(stress.partition_after);
    stress.copy_after = env_var("COPY_AFTER").unwrap_or(stress.copy_after);
    stress.keys = env_var("KEYS").unwrap_or(stress.keys);
    stress.key_bytes = env_var("KEY_BYTES").unwrap_or(stress.key_bytes);
    stress.eviction_one_in = env_var("EVICTION_ONE_IN").unwrap_or(stress.eviction_one_in);
    stress.switch_width_every_ms =
        env_var("SWITCH_WIDTH_EVERY_MS").unwrap_or(stress.switch_width_every_ms);
    if let Some(memory) = env_var::<MemoryKind>("MEMORY") {
        stress.simulated = matches!(memory, MemoryKind::Simulated(_));
    }
    if let Some(name) = env_var::<String>("COHERENCE") {
        stress.coherence = [Coherence::Split, Coherence::AllLog]
            .into_iter()
            .find(|coherence| coherence.name() == name)
            .unwrap_or_else(|| panic!("MEGALON_STRESS_COHERENCE={name}: split or all-log"));
    }
    if env_var::<String>("READS_AND_WRITES").is_some() {
        stress.reads_and_writes_only = true;
        stress.reclaim_watermark = 1.0;
    }
    if env_var::<String>("CHAOS").is_some() {
        stress.chaos = true;
    }
    if env_var::<String>("NO_COMBINING").is_some() {
        stress.no_combining = true;
    }
    if env_var::<String>("UNDO").is_some() {
        stress.undo = true;
    }
    assert!(
        (1..=POD_MAX_HOSTS).contains(&stress.hosts),
        "--hosts must be 1..={POD_MAX_HOSTS}"
    );
    assert_linearizable(&stress);
}

/// Every key, on every host, is read after the run and recorded (as the host's thread
/// `threads`, after every worker's last call), alone and in a `read_many`: the checker
/// judges the final values, and a stale one on any host fails the run.
#[test]
fn the_final_reads_of_every_key_on_every_host_are_in_the_history() {
    let stress = Stress {
        seconds: 0.2,
        keys: 16,
        ..Stress::default()
    };
    let report = run(&stress);
    let last_worker_return = (report.history.operations().iter())
        .filter(|op| op.process.thread < stress.threads)
        .filter_map(|op| op.returned_at)
        .max()
        .expect("the workers ran");
    for h in 0..stress.hosts {
        for i in 0..stress.keys {
            let reads = (report.history.operations().iter())
                .filter(|op| {
                    op.process == ProcessId::new(h, stress.threads)
                        && report.history.key(op.key) == key(i, stress.key_bytes).as_slice()
                })
                .inspect(|op| {
                    assert_eq!(op.call, Call::Get);
                    assert!(op.invoked_at > last_worker_return, "after the workers");
                })
                .count();
            assert!(reads >= 2, "host {h} read key {i} {reads} times at the end");
        }
    }
}

/// Under chaos, an error of a kind chaos does not explain fails the run even if only a
/// host's pump met it (a corrupt log entry the reclaimer met, say); an expected kind does
/// not; without chaos any error does.
#[test]
fn background_errors_of_unexpected_kinds_fail_the_run() {
    let none = std::collections::BTreeMap::new();
    let no_background = std::collections::BTreeMap::new();
    let background = |kind: &str, error: Error| {
        std::collections::BTreeMap::from([(kind.to_owned(), (1, error))])
    };
    let corrupt = background(
        "CorruptLogEntry",
        Error::CorruptLogEntry {
            position: 7,
            what: "test",
        },
    );
    let injected = background(
        "InjectedFault",
        Error::InjectedFault {
            fault: "append refused",
        },
    );
    assert_eq!(
        Error::CorruptLogEntry {
            position: 7,
            what: "test"
        }
        .kind_name(),
        "CorruptLogEntry"
    );
    assert!(judge_errors(true, &none, &corrupt).is_err());
    assert!(judge_errors(true, &none, &injected).is_ok());
    assert!(judge_errors(false, &none, &injected).is_err());
    let calls = std::collections::BTreeMap::from([("SlotsExhausted".to_owned(), 1)]);
    assert!(judge_errors(true, &calls, &no_background).is_err());
    assert!(judge_errors(true, &none, &no_background).is_ok());
}

/// Writer ids stay unique with 256 threads or more (`h << 8 | t` gave host 0's thread
/// 256 host 1's thread 0's id, and their values were the same).
#[test]
fn writer_ids_are_unique_with_many_threads() {
    let stress = Stress {
        hosts: POD_MAX_HOSTS,
        threads: 300,
        ..Stress::default()
    };
    let mut ids = std::collections::HashSet::new();
    for h in 0..stress.hosts {
        for t in 0..stress.threads {
            assert!(ids.insert(writer_id(&stress, h, t)), "host {h} thread {t}");
        }
    }
}

/// `reads` by `read_many`, or by `read_many_prefix` with an extent of the whole object
/// (`prefix`: two copies each, the first line, then the rest), each answer without its
/// outcome's details.
fn read_many_whole(
    host: &Host,
    reads: &mut [(&[u8], &mut [u8])],
    prefix: bool,
) -> Vec<Result<(), Error>> {
    if prefix {
        host.read_many_prefix(reads, &|_| usize::MAX)
            .into_iter()
            .map(|a| a.map(drop))
            .collect()
    } else {
        host.read_many(reads)
            .into_iter()
            .map(|a| a.map(drop))
            .collect()
    }
}
