//! The store's histories from several hosts on simulated non-coherent memory, checked for
//! linearizability key by key: every get returns a value some linearization allows, never
//! a stale, torn or deleted one.

use std::sync::{Arc, Barrier};
use std::thread;

use megalon_core::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig};
use megalon_kv::{Error, Megalon, Scheme, Store};
use megalon_workload::{check, Call, Clock, History, Outcome, ProcessId, ThreadRecorder, Value};

struct Run {
    seed: u64,
    hosts: usize,
    threads_per_host: usize,
    operations_per_thread: u32,
    keys: u64,
    /// Coherence records the pod has: fewer than keys, so writes churn.
    records: u64,
    record_width_bits: u32,
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A pod whose SCR leaves exactly `records` records: the rest of it is handed to the
/// application region, which nothing here uses.
fn pod(run: &Run) -> Arc<Pod> {
    let base = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(512)
        .record_width_bits(run.record_width_bits)
        .max_hosts(run.hosts as u32);
    let all = base.layout().expect("layout").record_count;
    let record_bytes = u64::from(run.record_width_bits / 8);
    let spare = (all - run.records) * record_bytes / 64 * 64;
    let config = base.app_scr_bytes(spare);
    let layout = config.layout().expect("layout");
    assert!(layout.record_count >= run.records && layout.record_count < run.records + 64);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn run(run: &Run) -> (megalon_workload::Summary, megalon_kv::Report) {
    let pod = pod(run);
    let hosts: Vec<_> = (0..run.hosts)
        .map(|host| {
            let options = HostOptions::new().memory(MemoryKind::Simulated(SimulatedConfig {
                seed: run.seed ^ (host as u64 + 1),
                capacity_lines: 256,
                random_eviction_one_in: 16,
            }));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(Megalon::new(pod, hosts));
    let max_value = store.max_value_bytes();
    let clock = Clock::counter();
    let start = Barrier::new(run.hosts * run.threads_per_host);
    let logs = thread::scope(|scope| {
        let workers: Vec<_> = (0..run.hosts * run.threads_per_host)
            .map(|worker| {
                let (store, clock, start) = (&store, clock.clone(), &start);
                scope.spawn(move || {
                    let host = worker % run.hosts;
                    let mut kv = store.handle(host).expect("handle");
                    let process = ProcessId::new(host as u32, worker as u32);
                    let mut recorder = ThreadRecorder::new(process, clock);
                    let mut rng =
                        run.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (worker as u64 + 1);
                    let mut out = Vec::new();
                    start.wait();
                    for sequence in 0..run.operations_per_thread {
                        // Skewed: half the operations go to the first eighth of the keys.
                        let draw = xorshift(&mut rng);
                        let key_index = if draw & 1 == 0 {
                            (draw >> 8) % (run.keys / 8).max(1)
                        } else {
                            (draw >> 8) % run.keys
                        };
                        let key = format!("k{key_index}").into_bytes();
                        let len = 24 + (draw >> 32) as usize % (max_value - 24 + 1);
                        let value = Value::new(worker as u32, u64::from(sequence));
                        let bytes = value.encode(len).expect("encode");
                        match (draw >> 40) % 10 {
                            0..=4 => {
                                let pending = recorder.invoke(&key, Call::Get).unwrap();
                                let found = kv.get_into(&key, &mut out).expect("get");
                                recorder
                                    .complete_read(pending, found.then_some(&out[..]))
                                    .unwrap();
                            }
                            5..=7 => {
                                let pending = recorder.invoke(&key, Call::Put(value)).unwrap();
                                kv.put(&key, &bytes).expect("put");
                                recorder.complete(pending, Outcome::Ok).unwrap();
                            }
                            8 => {
                                let pending = recorder.invoke(&key, Call::Create(value)).unwrap();
                                let outcome = match kv.insert(&key, &bytes) {
                                    Ok(()) => Outcome::Created,
                                    Err(Error::KeyExists) => Outcome::Exists,
                                    Err(other) => panic!("insert: {other}"),
                                };
                                recorder.complete(pending, outcome).unwrap();
                            }
                            _ => {
                                let pending = recorder.invoke(&key, Call::Delete).unwrap();
                                let outcome = match kv.delete(&key) {
                                    Ok(()) => Outcome::Deleted,
                                    Err(Error::UnknownKey) => Outcome::Absent,
                                    Err(other) => panic!("delete: {other}"),
                                };
                                recorder.complete(pending, outcome).unwrap();
                            }
                        }
                    }
                    recorder.finish()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("worker"))
            .collect::<Vec<_>>()
    });
    let history = History::merge(logs).expect("merge");
    let summary = check(&history).unwrap_or_else(|error| {
        panic!("seed {}: not linearizable: {error}", run.seed);
    });
    (summary, store.scheme().report())
}

#[test]
fn three_hosts_on_simulated_memory_with_churn_are_linearizable() {
    let seed = std::env::var("MEGALON_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001);
    eprintln!("seed {seed} (rerun with MEGALON_SEED={seed})");
    let run_spec = Run {
        seed,
        hosts: 3,
        threads_per_host: 2,
        operations_per_thread: 20_000,
        keys: 96,
        records: 16,
        record_width_bits: 8,
    };
    let (summary, report) = run(&run_spec);
    eprintln!("{summary:?}\n{report}");
    assert_eq!(summary.operations, 6 * 20_000);
    // The run exercised what it is meant to: churn, retries, stale lines dropped.
    let counter = |name| report.counter(name).expect(name);
    assert!(
        counter("churn") > 0,
        "no churn: the records did not run short"
    );
    assert!(counter("record deallocs") > 0);
    assert!(counter("deletes") > 0 && counter("creates") > 0);
    assert!(counter("lines invalidated") > 0);
}

#[test]
fn sixteen_bit_records_without_churn_are_linearizable() {
    let (summary, report) = run(&Run {
        seed: 0x5eed_0002,
        hosts: 2,
        threads_per_host: 2,
        operations_per_thread: 3_000,
        keys: 32,
        records: 512,
        record_width_bits: 16,
    });
    assert_eq!(summary.operations, 4 * 3_000);
    assert_eq!(report.counter("churn"), Some(0));
}
