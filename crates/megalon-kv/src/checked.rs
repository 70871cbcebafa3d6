//! The history every scheme is checked with: threads on several hosts put, get, insert
//! and delete a few skewed keys through one [`Store`], each call recorded with its
//! invocation and response; the history is then checked for linearizability key by key
//! (every get returns a value some linearization allows, never a stale, torn or deleted
//! one). megalon and each baseline run the same workload and the same checker.

use std::sync::Barrier;
use std::thread;

use megalon_workload::{check, Call, Clock, History, Outcome, ProcessId, ThreadRecorder, Value};

use crate::error::Error;
use crate::scheme::Scheme;
use crate::store::Store;

/// Keys of one `get_many` in a checked run.
const MANY_KEYS: u64 = 3;

/// Which call a draw makes, 0 to 9: gets, a `get_many` ([`GET_MANY`]), puts, an insert,
/// a delete (the match in [`run_checked`]).
fn call_of(draw: u64) -> u64 {
    (draw >> 40) % 10
}

/// The call of [`call_of`] that is a `get_many`.
const GET_MANY: u64 = 4;

/// The operations a checked run's history holds: one per call, but one per key (three) for a
/// `get_many` (the calls a thread makes are drawn from its seed alone, so they are known
/// before the run).
pub fn recorded_operations(run: &CheckedRun) -> usize {
    (0..run.hosts * run.threads_per_host)
        .map(|worker| {
            let mut rng = worker_seed(run, worker);
            (0..run.operations_per_thread)
                .map(|_| match call_of(xorshift(&mut rng)) {
                    GET_MANY => MANY_KEYS as usize,
                    _ => 1,
                })
                .sum::<usize>()
        })
        .sum()
}

fn worker_seed(run: &CheckedRun, worker: usize) -> u64 {
    run.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (worker as u64 + 1)
}

/// One checked run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedRun {
    /// Seed of every thread's draws (each thread mixes in its number).
    pub seed: u64,
    /// Hosts the threads are spread over (round robin; at most the scheme's hosts).
    pub hosts: usize,
    /// Threads on each host.
    pub threads_per_host: usize,
    /// Calls each thread makes.
    pub operations_per_thread: u32,
    /// Keys `k0..k{keys}`; half of the calls go to the first eighth of them.
    pub keys: u64,
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `run` on `store` and checks the history: 40% gets, 10% `get_many` of three keys
/// (a get of each in the history), 30% puts, 10% inserts, 10% deletes, values of random
/// length up to the store's largest. Returns the checker's summary, whose operations
/// [`recorded_operations`] counts, or a description of the violation naming the seed. Panics if the store
/// fails a call with anything but the errors the call allows (an unknown key for a
/// delete, an existing key for an insert).
pub fn run_checked<S: Scheme>(
    store: &Store<S>,
    run: &CheckedRun,
) -> Result<megalon_workload::Summary, String> {
    let max_value = store.max_value_bytes();
    let clock = Clock::counter();
    let start = Barrier::new(run.hosts * run.threads_per_host);
    let logs = thread::scope(|scope| {
        let workers: Vec<_> = (0..run.hosts * run.threads_per_host)
            .map(|worker| {
                let (clock, start) = (clock.clone(), &start);
                scope.spawn(move || {
                    let host = worker % run.hosts;
                    let process = ProcessId::new(host as u32, worker as u32);
                    let mut recorder = ThreadRecorder::new(process, clock);
                    let mut rng = worker_seed(run, worker);
                    let mut out = Vec::new();
                    start.wait();
                    // After the barrier: a worker that panics before it would leave the
                    // others waiting there for ever.
                    let mut kv = store.handle(host).expect("handle");
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
                        match call_of(draw) {
                            GET_MANY => {
                                // Gets of this key and the next two in one `get_many`: each a
                                // get of its own, in flight for the whole call.
                                let keys: Vec<Vec<u8>> = (0..MANY_KEYS)
                                    .map(|k| {
                                        format!("k{}", (key_index + k) % run.keys).into_bytes()
                                    })
                                    .collect();
                                let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                                let pending: Vec<_> = keys
                                    .iter()
                                    .map(|key| recorder.invoke(key, Call::Get).unwrap())
                                    .collect();
                                let answers = kv.get_many(&asked);
                                for (pending, answer) in pending.into_iter().zip(answers) {
                                    let found = answer.expect("get_many");
                                    recorder.complete_read(pending, found.as_deref()).unwrap();
                                }
                            }
                            0..=3 => {
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
    let history = History::merge(logs).map_err(|e| format!("seed {}: {e}", run.seed))?;
    check(&history).map_err(|error| format!("seed {}: not linearizable: {error}", run.seed))
}

/// The seed of a checked test: `MEGALON_SEED` if set, else `default`; printed so that a
/// failure replays.
pub fn seed_from_env(default: u64) -> u64 {
    let seed = std::env::var("MEGALON_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("seed {seed} (rerun with MEGALON_SEED={seed})");
    seed
}
