//! How long the linearizability checker takes on large histories of 200k operations by
//! 9 processes, none of them violations:
//!
//! - `recorded_zipf`: 9 threads run against a correct store on Zipfian keys (theta 0.99
//!   over 10k keys: the hottest key gets about a tenth of the operations). How much the
//!   threads overlap depends on the machine's cores.
//! - `synthetic_zipf`: the same key choice, but every process is always in the middle of
//!   an operation, each lasting up to 100 ticks: all 9 always overlap.
//! - `synthetic_one_key`: all 200k operations on one key, 9 always in flight: the worst
//!   case for the search, whose work grows with the operations in flight on a key.
//!
//! `cargo bench -p megalon-workload --bench check`

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use megalon_workload::{check, check_with_threads, History};

use megalon_workload::fixtures::{synthetic_history, LockedStore, Run};

const OPERATIONS: usize = 200_000;
const PROCESSES: u32 = 9;

fn describe(name: &str, history: &History) {
    let mut per_key = vec![0usize; history.key_count()];
    for op in history.operations() {
        per_key[op.key.0 as usize] += 1;
    }
    let hottest = per_key.into_iter().max().unwrap_or(0);
    let started = Instant::now();
    let summary = check(history).expect("the history is linearizable");
    eprintln!(
        "{name}: hottest key has {hottest} operations; checked once in {:?}\n  {summary}",
        started.elapsed()
    );
}

fn checking(c: &mut Criterion) {
    let run = Run {
        threads: PROCESSES,
        operations_per_thread: OPERATIONS / PROCESSES as usize,
        keys: 10_000,
        zipf_theta: 0.99,
        get_percent: 50,
        put_percent: 40,
        create_percent: 5,
        value_len_bytes: 32,
        seed: 1,
    };
    let histories = [
        ("recorded_zipf", run.record(&LockedStore::new())),
        (
            "synthetic_zipf",
            synthetic_history(PROCESSES, OPERATIONS, 10_000, 0.99, 100, 2),
        ),
        (
            "synthetic_one_key",
            synthetic_history(PROCESSES, OPERATIONS, 1, 0.99, 100, 3),
        ),
    ];
    let mut group = c.benchmark_group("check_200k_ops_9_processes");
    group.sample_size(10);
    for (name, history) in &histories {
        describe(name, history);
        group.bench_function(format!("{name}/1_thread"), |b| {
            b.iter(|| check_with_threads(history, 1).unwrap())
        });
        group.bench_function(format!("{name}/all_threads"), |b| {
            b.iter(|| check(history).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, checking);
criterion_main!(benches);
