//! YCSB's core workloads A, B, C, D and F on every scheme (megalon, HCMeta,
//! HCMeta-Local, HCMeta-Unlimited, AllLog) at a small scale: the paper's Figure 14
//! setting (1 KiB objects, 24-byte keys, the paper's ratio of dataset to SCR: 18M
//! objects to 200 MB) scaled to 20,000 objects, 3 hosts x 2 threads.
//!
//! Each sample runs the workload with every thread for a fixed slice of time and
//! reports the time per operation of the whole store (the slice over the operations all
//! threads completed), so criterion's throughput is the store's operations per second.
//! The same store serves every sample of a workload; workloads run C, B, A, F, D on it
//! (read-only first, inserts last). Warm-up and measurement are bounded (1 s and 2 s per
//! benchmark) so that D's inserts fit the store. The full-size comparison is `cargo xtask figures
//! --only 14`.
//!
//! ```text
//! cargo bench --bench ycsb
//! ```

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use megalon_bench::lineup::{self, Kind, Setup, Workers};
use megalon_bench::mix::{Choice, Plan};
use megalon_workload::Workload;

mod common;

/// Objects loaded, and the SCR the paper's ratio gives them.
const OBJECTS: u64 = 20_000;
const SCR_BYTES: u64 = (200_000_000 * OBJECTS / 18_000_000).next_multiple_of(4096);
const HOSTS: usize = 3;
const WORKERS: usize = 6;
/// Wall-clock time of one sample.
const SLICE: Duration = Duration::from_millis(40);

fn setup() -> Setup {
    Setup {
        hosts: HOSTS,
        keys: OBJECTS,
        // D inserts 5% of its operations: room for every sample of a run (3 s at a few
        // million operations per second).
        extra_keys: 20 * OBJECTS,
        key_bytes: 24,
        value_bytes: 1020,
        scr_bytes: SCR_BYTES,
        record_bits: 32,
        numa_node: common::numa_node(),
        partition_after: 0,
        copy_after: 0,
        cxl: common::cxl(),
    }
}

fn ycsb(c: &mut Criterion) {
    let setup = setup();
    for kind in Kind::ALL {
        let bench = lineup::build(kind, &setup).expect("a scheme");
        let plan = |workload| Plan {
            keys: setup.keys,
            key_bytes: setup.key_bytes,
            value_bytes: setup.value_bytes,
            choice: Choice::Ycsb(workload),
            seed: 0x0c5b,
        };
        bench
            .load(&plan(Workload::C), Workers::new(WORKERS))
            .expect("load");
        let mut group = c.benchmark_group(format!("ycsb/{}", kind.name()));
        group.throughput(Throughput::Elements(1));
        group.sample_size(10);
        // Bounded, so that D's inserts fit the room the setup leaves.
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(2));
        // Every slice, of every workload, draws keys of its own: with one seed each slice
        // replayed the keys of the slice before it on the same store, and HCMeta found
        // shared the objects that slice had made it share (it churned 0.02-0.18 an
        // operation after its first slice of C, against 0.30-0.40 on draws of its own).
        let mut slices = 0u64;
        for workload in [
            Workload::C,
            Workload::B,
            Workload::A,
            Workload::F,
            Workload::D,
        ] {
            let mut plan = plan(workload);
            group.bench_function(BenchmarkId::from_parameter(workload.name()), |b| {
                b.iter_custom(|iters| {
                    slices += 1;
                    plan.seed = 0x0c5b ^ slices.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let run = bench.run(&plan, Workers::new(WORKERS), SLICE).expect("run");
                    // D's next sample inserts after the keys this one inserted.
                    plan.keys += run.report.counter("creates").unwrap_or(0);
                    let per_op = run.seconds / run.operations().max(1) as f64;
                    Duration::from_secs_f64(per_op * iters as f64)
                })
            });
        }
        group.finish();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    ycsb(&mut c);
    c.final_summary();
}
