//! The linearizability stress: several hosts with several threads each over one pod, on
//! the simulated non-coherent memory by default, Zipfian keys, a mix of reads, writes,
//! creates and deletes, an SCR small enough that records churn and 8-bit records so
//! counters wrap. Every operation is recorded; the history is checked with
//! `megalon-workload`'s checker. The same stress runs on pods with AllLog coherence
//! (locks and counters through the log), so the protocol mutants cover that path too.
//!
//! `stress_short` runs in `cargo test` (and so in every run of `cargo xtask mutants`).
//! `stress_from_env` is the long form behind `cargo xtask stress`, which sets its
//! parameters through `MEGALON_STRESS_*` variables and prints one final line:
//! `checked N operations from H hosts: linearizable`, or the first violation with the
//! seed that reproduces it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{
    Backing, Coherence, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig,
};
use megalon_workload::{check, Call, Clock, History, Outcome, ProcessId, ThreadRecorder, Value};

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
}

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
        }
    }
}

const SLOT_BYTES: u64 = 128;
/// The pod holds room for this many hosts, though only `hosts` join: the host table and
/// cursors then leave few records in a 4 KiB SCR (704 of 8 bits), so records churn.
const POD_MAX_HOSTS: u32 = 24;

/// splitmix64: the stress's own generator, so a seed means the same choices everywhere.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

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

    fn sample(&self, state: &mut u64) -> u64 {
        let total = *self.cumulative.last().expect("keys > 0");
        let u = (next(state) >> 11) as f64 / (1u64 << 53) as f64 * total;
        self.cumulative.partition_point(|&c| c < u) as u64
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("stress-key-{i:06}").into_bytes()
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
/// someone else meanwhile starts over. Each attempt is atomic, so this is a put.
fn put(host: &Host, key: &[u8], bytes: &[u8]) -> Result<(), Error> {
    loop {
        match host.write(key, bytes) {
            Ok(_) => return Ok(()),
            Err(Error::UnknownKey) => match host.create(key, bytes) {
                Ok(()) => return Ok(()),
                Err(Error::ObjectExists) => continue,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

struct Report {
    history: History,
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
    // The same records as without rings: the rings' SCR comes on top.
    let rings = if stress.partition_after > 0 {
        u64::from(POD_MAX_HOSTS) * megalon_core::rpc::scr_bytes(RING_ENTRIES.into())
    } else {
        0
    };
    let config = PodConfig::new()
        .scr_bytes((4096 + rings).next_multiple_of(4096))
        .rpc_ring_entries(if stress.partition_after > 0 {
            RING_ENTRIES
        } else {
            0
        })
        .local_partitions(stress.partition_after)
        .local_copies(stress.copy_after)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(SLOT_BYTES)
        .max_key_bytes(32)
        .log_capacity_entries(1024)
        .record_width_bits(stress.record_bits)
        .max_hosts(POD_MAX_HOSTS)
        .coherence(stress.coherence);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
    let hosts: Vec<Host> = (0..stress.hosts)
        .map(|h| {
            let memory = if stress.simulated {
                MemoryKind::Simulated(SimulatedConfig {
                    seed: stress.seed.wrapping_mul(31).wrapping_add(u64::from(h)),
                    capacity_lines: 1024,
                    random_eviction_one_in: 64,
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
                .wait_limit(Duration::from_secs(5));
            Host::join(&pod, Join::As(h), options).expect("join")
        })
        .collect();
    let clock = Clock::counter();
    let zipf = Zipf::new(stress.keys, stress.zipf);
    let deadline = Instant::now() + Duration::from_secs_f64(stress.seconds);
    let errors = std::sync::atomic::AtomicU64::new(0);
    let logs = std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for (h, host) in hosts.iter().enumerate() {
            for t in 0..stress.threads {
                let (clock, zipf, errors) = (clock.clone(), &zipf, &errors);
                let seed = stress.seed
                    ^ (((h as u64) << 32) | u64::from(t)).wrapping_mul(0x2545_f491_4f6c_dd1d);
                workers.push(scope.spawn(move || {
                    let mut rng = seed;
                    let writer = ((h as u32) << 8) | t;
                    let mut recorder = ThreadRecorder::new(ProcessId::new(h as u32, t), clock);
                    let mut buf = vec![0u8; SLOT_BYTES as usize];
                    let mut sequence = 0u64;
                    while Instant::now() < deadline {
                        let key = key(zipf.sample(&mut rng));
                        let choice = next(&mut rng) % 100;
                        let mut value = || {
                            sequence += 1;
                            let value = Value::new(writer, sequence);
                            (value, value.encode(SLOT_BYTES as usize).expect("encodes"))
                        };
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
                                Err(e) => unknown_or_failed(&e),
                            },
                            (Call::Put(_), Some(bytes)) => match put(host, &key, &bytes) {
                                Ok(()) => Outcome::Ok,
                                Err(e) => unknown_or_failed(&e),
                            },
                            (Call::Create(_), Some(bytes)) => match host.create(&key, &bytes) {
                                Ok(()) => Outcome::Created,
                                Err(Error::ObjectExists) => Outcome::Exists,
                                Err(e) => unknown_or_failed(&e),
                            },
                            (Call::Delete, _) => match host.delete(&key) {
                                Ok(()) => Outcome::Deleted,
                                Err(Error::UnknownKey) => Outcome::Absent,
                                Err(e) => unknown_or_failed(&e),
                            },
                            _ => unreachable!("every write carries its bytes"),
                        };
                        if matches!(outcome, Outcome::Unknown | Outcome::Failed) {
                            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
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
        errors: errors.into_inner(),
        churn: events.churn,
        wraps: events.wraps,
        retries: events.read_retries(),
        lock_events: events.lock_events,
        stale_lines_served,
        events,
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
    let details = format!(
        "({} coherence, seed {}, {} errors, {} churn, {} wraps, {} lock events, {} read retries, {} stale lines served by the simulated caches, {} moves to a host, {} move-backs, {} rpcs, {} copies made, {} copy reads, {} copies invalidated)",
        stress.coherence.name(),
        stress.seed,
        report.errors,
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
                let from = failing.invoked_at.saturating_sub(400);
                for op in report.history.operations() {
                    if report.history.key(op.key) == &violation.key[..]
                        && op.invoked_at >= from
                        && op.invoked_at <= failing.returned_at.unwrap_or(u64::MAX)
                    {
                        neighbourhood.push_str(&format!(
                            "\n   [{:>8}, {:>8}] {}: {} -> {}",
                            op.invoked_at,
                            op.returned_at.map_or("-".into(), |t| t.to_string()),
                            op.process,
                            op.call,
                            op.outcome
                        ));
                    }
                }
            }
            Err(format!(
                "NOT linearizable after {operations} operations from {} hosts, reproduce with --seed {}: {error} {details}\nevery operation on the key from shortly before:{neighbourhood}",
                stress.hosts, stress.seed
            ))
        }
    }
}

/// Runs and checks `stress`: prints the verdict, or panics with the violation.
fn assert_linearizable(stress: &Stress) {
    match run_and_check(stress) {
        Ok(line) => println!("{line}"),
        Err(violation) => panic!("{violation}"),
    }
}

#[test]
fn stress_short() {
    let stress = Stress::default();
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_16_bit_records_on_hardware_memory() {
    let stress = Stress {
        seconds: 1.0,
        record_bits: 16,
        simulated: false,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_a_reclaimer_racing_writers() {
    // A few hot objects, and host 0 deallocating every record it can find all the time:
    // deallocations meet writes in progress.
    let stress = Stress {
        seconds: 1.5,
        keys: 8,
        zipf: 0.5,
        reclaim_watermark: 0.0,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_a_reclaimer_racing_writers_on_hardware_memory() {
    // The same race on real memory, where operations are fast enough to hit the window
    // between a writer's lookup and its lock (the event check after the lock) often.
    let stress = Stress {
        seconds: 1.5,
        keys: 8,
        zipf: 0.5,
        reclaim_watermark: 0.0,
        simulated: false,
        record_bits: 16,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_all_log_coherence() {
    let stress = Stress {
        seconds: 1.5,
        coherence: Coherence::AllLog,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_all_log_coherence_on_hot_keys_on_hardware_memory() {
    // A few hot objects on real memory: Lock events race and lose often.
    let stress = Stress {
        seconds: 1.0,
        keys: 8,
        zipf: 0.5,
        simulated: false,
        coherence: Coherence::AllLog,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_local_partitions() {
    // Objects move to a host after two consecutive accesses from it: the hot ones move
    // there and back (by RPC) all the time.
    let stress = Stress {
        seconds: 1.5,
        keys: 64,
        partition_after: 2,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_local_copies() {
    // Copies after two reads, on keys written all the time: made and invalidated.
    let stress = Stress {
        seconds: 1.5,
        keys: 64,
        copy_after: 2,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

#[test]
fn stress_short_with_local_partitions_and_copies() {
    let stress = Stress {
        seconds: 1.5,
        keys: 64,
        partition_after: 3,
        copy_after: 2,
        ..Stress::default()
    };
    assert_linearizable(&stress);
}

/// The long form for `cargo xtask stress`: parameters from `MEGALON_STRESS_*`.
#[test]
#[ignore = "run by cargo xtask stress"]
fn stress_from_env() {
    let var = |name: &str| std::env::var(format!("MEGALON_STRESS_{name}")).ok();
    let mut stress = Stress::default();
    if let Some(v) = var("SECONDS") {
        stress.seconds = v.parse().expect("MEGALON_STRESS_SECONDS: a number");
    }
    if let Some(v) = var("HOSTS") {
        stress.hosts = v.parse().expect("MEGALON_STRESS_HOSTS: a number");
    }
    if let Some(v) = var("THREADS") {
        stress.threads = v.parse().expect("MEGALON_STRESS_THREADS: a number");
    }
    if let Some(v) = var("SEED") {
        stress.seed = v.parse().expect("MEGALON_STRESS_SEED: a number");
    }
    if let Some(v) = var("RECORD_BITS") {
        stress.record_bits = v.parse().expect("MEGALON_STRESS_RECORD_BITS: 8, 16 or 32");
    }
    if let Some(v) = var("MEMORY") {
        stress.simulated = match v.as_str() {
            "simulated" => true,
            "hardware" => false,
            other => panic!("MEGALON_STRESS_MEMORY={other}: hardware or simulated"),
        };
    }
    if let Some(v) = var("COHERENCE") {
        stress.coherence = match v.as_str() {
            "split" => Coherence::Split,
            "all-log" => Coherence::AllLog,
            other => panic!("MEGALON_STRESS_COHERENCE={other}: split or all-log"),
        };
    }
    if let Some(v) = var("PARTITION_AFTER") {
        stress.partition_after = v.parse().expect("MEGALON_STRESS_PARTITION_AFTER: a number");
    }
    if let Some(v) = var("COPY_AFTER") {
        stress.copy_after = v.parse().expect("MEGALON_STRESS_COPY_AFTER: a number");
    }
    assert!(
        (1..=POD_MAX_HOSTS).contains(&stress.hosts),
        "--hosts must be 1..={POD_MAX_HOSTS}"
    );
    assert_linearizable(&stress);
}
