//! The store's histories under chaos (preemptions at the core's points, refused and
//! unconfirmed appends) on simulated non-coherent memory with few records (churn):
//! linearizable key by key, counting an error's call as failed if the store's docs say it
//! changed nothing (a refused append) and as unknown otherwise; afterwards nothing locked
//! and every key still usable from every host. (Review `kvstore`, 2026-11-30.)
#![cfg(feature = "chaos")]

use std::sync::{Arc, Barrier};
use std::time::Duration;

use megalon_core::chaos::ChaosConfig;
use megalon_core::{
    Backing, Coherence, CrashSafety, Host, HostOptions, Join, Layout, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};
use megalon_kv::{Error, Megalon, Store};
use megalon_workload::{check, Call, Clock, History, Outcome, ProcessId, ThreadRecorder, Value};

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Nothing reached the log: the store's docs say the call changed nothing.
fn refused(error: &Error) -> bool {
    matches!(error, Error::Core(megalon_core::Error::InjectedFault { fault }) if *fault == "append refused")
        || matches!(error, Error::Core(megalon_core::Error::LogFull { .. }))
}

fn outcome_of_error(error: &Error) -> Outcome {
    if refused(error) {
        Outcome::Failed
    } else {
        Outcome::Unknown
    }
}

struct Params {
    seed: u64,
    width: u32,
    records: u64,
    partitions: u32,
    copies: u32,
    refuse_one_in: u32,
    unconfirm_one_in: u32,
    operations: u32,
    keys: u64,
    use_update: bool,
    undo: bool,
    all_log: bool,
}

fn pod(p: &Params) -> Arc<Pod> {
    let base = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(1024)
        .record_width_bits(p.width)
        .max_hosts(3)
        .local_partitions(p.partitions)
        .local_copies(p.copies)
        .crash_safety(if p.undo {
            CrashSafety::Undo
        } else {
            CrashSafety::Off
        })
        .coherence(if p.all_log {
            Coherence::AllLog
        } else {
            Coherence::Split
        });
    let all = Layout::new(&base).expect("layout").record_count;
    let spare = (all - p.records) * u64::from(p.width) / 8 / 64 * 64;
    let config = base.app_scr_bytes(spare);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn run(p: &Params) {
    let pod = pod(p);
    eprintln!("records {}", pod.layout().record_count);
    let hosts: Vec<_> = (0..3u64)
        .map(|host| {
            let options = HostOptions::new()
                .memory(MemoryKind::Simulated(SimulatedConfig {
                    seed: p.seed ^ (host + 1),
                    capacity_lines: 256,
                    random_eviction_one_in: std::env::var("KV_EVICT")
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(16),
                    ..SimulatedConfig::default()
                }))
                .wait_limit(Duration::from_secs(5))
                .chaos(
                    ChaosConfig::preemptions(
                        p.seed + host,
                        std::env::var("KV_PREEMPT")
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(40),
                    )
                    .faults(p.refuse_one_in, p.unconfirm_one_in),
                );
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(Megalon::new(pod, hosts.clone()));
    let max_value = store.max_value_bytes();
    let clock = Clock::counter();
    let threads = 6usize;
    let start = Barrier::new(threads);
    let logs = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let (clock, start, store) = (clock.clone(), &start, &store);
                scope.spawn(move || {
                    let host = worker % 3;
                    let mut kv = store.handle(host).expect("handle");
                    let mut recorder =
                        ThreadRecorder::new(ProcessId::new(host as u32, worker as u32), clock);
                    let mut rng = p.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (worker as u64 + 1);
                    start.wait();
                    for sequence in 0..p.operations {
                        let draw = xorshift(&mut rng);
                        let key = format!("k{}", (draw >> 8) % p.keys).into_bytes();
                        let len = 24 + (draw >> 32) as usize % (max_value - 24 + 1);
                        let value = Value::new(worker as u32, u64::from(sequence));
                        let bytes = value.encode(len).expect("encode");
                        match (draw >> 40) % 10 {
                            0..=3 => {
                                let pending = recorder.invoke(&key, Call::Get).unwrap();
                                match kv.get(&key) {
                                    Ok(found) => {
                                        recorder.complete_read(pending, found.as_deref()).unwrap()
                                    }
                                    Err(_) => recorder.complete(pending, Outcome::Failed).unwrap(),
                                }
                            }
                            4..=6 => {
                                let pending = recorder.invoke(&key, Call::Put(value)).unwrap();
                                let result = if p.use_update && draw & 1 == 0 {
                                    kv.update(&key, |_, new| {
                                        new.extend_from_slice(&bytes);
                                        true
                                    })
                                    .map(|_| ())
                                } else {
                                    kv.put(&key, &bytes)
                                };
                                let outcome = match result {
                                    Ok(()) => Outcome::Ok,
                                    Err(e) => outcome_of_error(&e),
                                };
                                recorder.complete(pending, outcome).unwrap();
                            }
                            7 => {
                                let pending = recorder.invoke(&key, Call::Create(value)).unwrap();
                                let outcome = match kv.insert(&key, &bytes) {
                                    Ok(()) => Outcome::Created,
                                    Err(Error::KeyExists) => Outcome::Exists,
                                    Err(e) => outcome_of_error(&e),
                                };
                                recorder.complete(pending, outcome).unwrap();
                            }
                            _ => {
                                let pending = recorder.invoke(&key, Call::Delete).unwrap();
                                let outcome = match kv.delete(&key) {
                                    Ok(()) => Outcome::Deleted,
                                    Err(Error::UnknownKey) => Outcome::Absent,
                                    Err(e) => outcome_of_error(&e),
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
            .map(|w| w.join().expect("worker"))
            .collect::<Vec<_>>()
    });
    let history = History::merge(logs).unwrap();
    let summary =
        check(&history).unwrap_or_else(|e| panic!("seed {}: not linearizable: {e}", p.seed));
    let counts: Vec<_> = hosts.iter().map(|h| h.inspect().chaos_counts()).collect();
    eprintln!("{summary:?}\nchaos {counts:?}");
    // The history was checked under the faults asked for, not without them.
    let sum = |count: fn(&megalon_core::chaos::ChaosCounts) -> u64| -> u64 {
        counts.iter().map(count).sum()
    };
    assert!(sum(|c| c.preemptions) > 0, "seed {}: no preemption", p.seed);
    assert!(
        p.refuse_one_in == 0 || sum(|c| c.refused) > 0,
        "seed {}: no append refused: {counts:?}",
        p.seed
    );
    assert!(
        p.unconfirm_one_in == 0 || sum(|c| c.unconfirmed) > 0,
        "seed {}: no append left unconfirmed: {counts:?}",
        p.seed
    );
    // Every key still usable from every host, and nothing left locked.
    for key in 0..p.keys {
        let key = format!("k{key}").into_bytes();
        for host in 0..3 {
            let mut kv = store.handle(host).unwrap();
            let value = Value::new(99, host as u64).encode(40).unwrap();
            megalon_core::chaos::clear_forced_faults();
            let mut tries = 0;
            loop {
                match kv.put(&key, &value) {
                    Ok(()) => break,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                    }
                    Err(e) => panic!("put of {key:?} from host {host}: {e}"),
                }
            }
            let mut got = None;
            for _ in 0..50 {
                if let Ok(v) = kv.get(&key) {
                    got = Some(v);
                    break;
                }
            }
            assert_eq!(got, Some(Some(value.clone())), "{key:?} from host {host}");
        }
    }
    // At rest: nothing pending, no record locked.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pending: usize = hosts
            .iter()
            .map(|h| h.inspect().settle_pending().unwrap_or(1))
            .sum();
        let census = hosts[0].inspect().record_census();
        if pending == 0 && census.locked.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not at rest: {pending} pending, locked {:?}",
            census.locked
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn params(seed: u64) -> Params {
    let seed = std::env::var("KV_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    let operations = std::env::var("KV_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    eprintln!("seed {seed}");
    Params {
        seed,
        width: 8,
        records: 16,
        partitions: 0,
        copies: 0,
        refuse_one_in: 30,
        unconfirm_one_in: 40,
        operations,
        keys: 160,
        use_update: true,
        undo: false,
        all_log: false,
    }
}

#[test]
fn faults_and_churn_8_bits() {
    run(&params(0xc4a0_0001));
}

#[test]
fn faults_and_churn_2_bits() {
    run(&Params {
        width: 2,
        ..params(0xc4a0_0002)
    });
}

#[test]
fn faults_with_partitions_and_copies() {
    run(&Params {
        partitions: 2,
        copies: 2,
        ..params(0xc4a0_0003)
    });
}

#[test]
fn faults_only_refused() {
    run(&Params {
        unconfirm_one_in: 0,
        refuse_one_in: 10,
        ..params(0xc4a0_0004)
    });
}

#[test]
fn faults_4_bits_undo() {
    run(&Params {
        width: 4,
        undo: true,
        ..params(0xc4a0_0005)
    });
}

#[test]
fn faults_32_bits_undo_partitions() {
    run(&Params {
        width: 32,
        undo: true,
        partitions: 3,
        ..params(0xc4a0_0006)
    });
}

#[test]
fn faults_all_log() {
    run(&Params {
        all_log: true,
        ..params(0xc4a0_0007)
    });
}
