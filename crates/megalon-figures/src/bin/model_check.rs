//! `cargo xtask model-check`: does the CXL cost model add to an operation what it says it
//! adds?
//!
//! Two pods, built alike: one whose hosts use this machine's memory (`hardware`), one whose
//! hosts use the CXL cost model (`cxl`, or the `--memory` given). Each side has two hosts
//! and one thread that drives both (the same thread for both hosts, so the two sides run the
//! same operations in the same order and replay does the same work: no pump, no
//! background thread). The operations are the object paths: reads and writes of 1 KiB
//! objects, half of them read-write-shared (written from both hosts, so reads miss after
//! the other host's writes), half read-shared (never written: cached lines stay valid).
//!
//! A third pod runs the model with every latency 0: its bookkeeping (its line table,
//! its counts), with nothing to charge. The sides run in turns over blocks of the same
//! operations (which goes first rotates), so drift of a shared machine hits them alike,
//! and each block is timed in its thread's CPU time (what a spin takes), so time other
//! processes take from the shared cores is not counted. The added time per operation is
//! the median over blocks of `(cxl block - zero-latency block) / operations`: what the
//! model's charges add. The bookkeeping (`zero-latency - hardware`) is printed beside
//! it; it is not charged, and it moves with the machine's state (30 ns per operation on
//! some days, 60 to 80 on others).
//! The prediction is the model's own: the events it charged in those blocks (rounds of
//! misses, rounds of write-backs, SCR accesses) times their latencies, per operation. The
//! check passes when the two agree within `--limit` percent (10 by default). `--predict`
//! computes the prediction with other latencies than the ones charged, to see the check
//! fail.

use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Arc;

use megalon_core::memory::cxl::{spin_rate, CxlCharges};
use megalon_core::{
    Backing, CxlModel, EventCounts, Host, HostOptions, Join, MemoryKind, Pod, PodConfig,
};
use megalon_workload::{RandomSource, SplitMix64};

/// Objects of each kind (read-write-shared and read-shared).
const OBJECTS_PER_KIND: u64 = 512;
/// Bytes of each object.
const OBJECT_BYTES: usize = 1024;
/// Blocks run and dropped before measuring (first reads, first records).
const WARM_UP_BLOCKS: usize = 3;

struct Args {
    model: CxlModel,
    predict: Option<CxlModel>,
    blocks: usize,
    ops_per_block: usize,
    limit_percent: f64,
}

const USAGE: &str = "usage: cargo xtask model-check [--memory cxl[:name=value,...]] [--predict cxl[:name=value,...]]
                              [--blocks N] [--ops N] [--limit PERCENT]

  --memory   the model to run (default: cxl, the model's defaults)
  --predict  the latencies the prediction uses (default: the ones run); a wrong one must fail
  --blocks   measured blocks per side (default 400)
  --ops      operations per block (default 4000)
  --limit    largest difference accepted, in percent of the prediction (default 10)";

fn model_of(flag: &str, given: &str) -> Result<CxlModel, String> {
    match given.parse::<MemoryKind>() {
        Ok(MemoryKind::Cxl(model)) => Ok(model),
        Ok(other) => Err(format!("{flag} {given}: {other} is not a CXL model")),
        Err(e) => Err(format!("{flag}: {e}")),
    }
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let mut parsed = Args {
            model: CxlModel::default(),
            predict: None,
            blocks: 400,
            ops_per_block: 4000,
            limit_percent: 10.0,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .as_str();
            let count = || {
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag} {value}: not a positive count"))
            };
            match flag.as_str() {
                "--memory" => parsed.model = model_of(flag, value)?,
                "--predict" => parsed.predict = Some(model_of(flag, value)?),
                "--blocks" => parsed.blocks = count()?,
                "--ops" => parsed.ops_per_block = count()?,
                "--limit" => {
                    parsed.limit_percent = value
                        .parse()
                        .ok()
                        .filter(|l: &f64| l.is_finite() && *l >= 0.0)
                        .ok_or_else(|| format!("--limit {value}: not a percentage"))?;
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(parsed)
    }
}

/// One side: a pod, its two hosts, and the objects loaded.
struct Side {
    hosts: [Host; 2],
    keys: Vec<[u8; 24]>,
}

fn key(n: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..4].copy_from_slice(b"chk:");
    key[4..].copy_from_slice(format!("{n:020}").as_bytes());
    key
}

impl Side {
    fn new(memory: &MemoryKind) -> Side {
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).expect("a heap pod"));
        let options = || {
            HostOptions::new()
                .memory(memory.clone())
                .pump_interval(None)
        };
        let hosts = [0, 1].map(|_| Host::join(&pod, Join::AnyFree, options()).expect("a host"));
        let keys: Vec<_> = (0..2 * OBJECTS_PER_KIND).map(key).collect();
        for (n, key) in keys.iter().enumerate() {
            hosts[n % 2]
                .create(key, &[n as u8; OBJECT_BYTES])
                .expect("creating an object");
        }
        Side { hosts, keys }
    }

    /// Runs `ops` operations drawn from `seed`; returns the nanoseconds of this thread's
    /// CPU time they took.
    fn block(&self, seed: u64, ops: usize) -> u64 {
        let mut rng = SplitMix64::new(seed);
        let mut buf = [0u8; OBJECT_BYTES];
        let began = thread_cpu_ns();
        for _ in 0..ops {
            let draw = rng.next_u64();
            let host = &self.hosts[(draw & 1) as usize];
            let n = (draw >> 1) % (2 * OBJECTS_PER_KIND);
            let write = n < OBJECTS_PER_KIND && (draw >> 32) & 1 == 1;
            let key = &self.keys[n as usize];
            if write {
                buf[0] = draw as u8;
                host.write(key, &buf).expect("a write");
            } else {
                host.read(key, &mut buf).expect("a read");
            }
        }
        thread_cpu_ns() - began
    }

    fn events(&self) -> EventCounts {
        self.hosts[0].events() + self.hosts[1].events()
    }
}

/// What a side's thread answers for a block: nanoseconds, and what the model charged.
type Answer = (u64, CxlCharges);

/// A side on a thread of its own (a thread keeps the model's SCR binding of the last CXL
/// memory it used, so the hardware side must never run on the CXL side's thread).
struct Worker {
    ask: mpsc::Sender<Option<(u64, usize)>>,
    answer: mpsc::Receiver<Answer>,
    thread: std::thread::JoinHandle<(EventCounts, EventCounts)>,
}

impl Worker {
    fn start(memory: MemoryKind) -> Worker {
        let (ask, asked) = mpsc::channel::<Option<(u64, usize)>>();
        let (answered, answer) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let side = Side::new(&memory);
            let before = side.events();
            while let Ok(Some((seed, ops))) = asked.recv() {
                let charged = CxlCharges::this_thread();
                let ns = side.block(seed, ops);
                answered
                    .send((ns, CxlCharges::this_thread() - charged))
                    .expect("the checker waits");
            }
            (before, side.events())
        });
        Worker {
            ask,
            answer,
            thread,
        }
    }

    fn run(&self, seed: u64, ops: usize) -> Answer {
        self.ask.send(Some((seed, ops))).expect("the side runs");
        self.answer.recv().expect("the side answers")
    }

    /// The protocol's counters before the first block and after the last.
    fn finish(self) -> (EventCounts, EventCounts) {
        self.ask.send(None).expect("the side runs");
        self.thread.join().expect("the side's thread")
    }
}

/// The calling thread's CPU time, in nanoseconds. The model charges by spinning, which
/// takes CPU time; measuring CPU time, not wall time, keeps the time other processes
/// take from the shared cores out of the comparison.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill; the clock id is a constant
    // every Linux has.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn run(args: &Args) -> bool {
    let predict = args.predict.unwrap_or(args.model);
    println!(
        "model-check: {} blocks of {} operations per side (1 KiB objects, {} read-write-shared, \
         {} read-shared, 2 hosts, reads and writes); a read of the spin's clock takes {:.1} ns",
        args.blocks,
        args.ops_per_block,
        OBJECTS_PER_KIND,
        OBJECTS_PER_KIND,
        spin_rate().clock_read_ps as f64 / 1000.0,
    );
    println!("model run: {:?}", args.model);
    if args.predict.is_some() {
        println!("model predicted with: {predict:?}");
    }
    let hardware = Worker::start(MemoryKind::Hardware);
    let cxl = Worker::start(MemoryKind::Cxl(args.model));
    // The model with nothing to charge: its bookkeeping (its line table, its counts)
    // without a spin. What the model adds is the difference between it and `cxl`.
    let zero = Worker::start(MemoryKind::Cxl(CxlModel {
        lnr_miss_ns: 0,
        write_back_ns: 0,
        scr_ns: 0,
        ..args.model
    }));
    let (mut added, mut kept) = (Vec::new(), Vec::new());
    let (mut hardware_ns, mut cxl_ns) = (Vec::new(), Vec::new());
    let mut charged = CxlCharges::default();
    let ops = args.ops_per_block;
    for block in 0..WARM_UP_BLOCKS + args.blocks {
        let seed = 0x00c0_ffee ^ (block as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The three sides in turn, each going first, second and third alike.
        let mut answers: [Option<Answer>; 3] = [None, None, None];
        for side in (0..3).map(|i| (i + block) % 3) {
            let worker = [&hardware, &zero, &cxl][side];
            answers[side] = Some(worker.run(seed, ops));
        }
        let [Some(off), Some(bare), Some(on)] = answers else {
            unreachable!("every side ran");
        };
        if block < WARM_UP_BLOCKS {
            continue;
        }
        let per_op = |ns: u64| ns as f64 / ops as f64;
        added.push(per_op(on.0) - per_op(bare.0));
        kept.push(per_op(bare.0) - per_op(off.0));
        hardware_ns.push(per_op(off.0));
        cxl_ns.push(per_op(on.0));
        charged = charged + on.1;
    }
    let cxl_events = cxl.finish();
    let hardware_events = hardware.finish();
    let _ = zero.finish();
    let total_ops = (args.blocks * ops) as f64;
    let per_op = |n: u64| n as f64 / total_ops;
    let predicted = predict.predicted_ns(&charged) as f64 / total_ops;
    let measured = median(&mut added);
    println!(
        "per operation: hardware {:.0} ns, cxl {:.0} ns (medians over blocks); the model's \
         bookkeeping, with nothing charged, {:.0} ns over hardware",
        median(&mut hardware_ns),
        median(&mut cxl_ns),
        median(&mut kept)
    );
    println!(
        "model's events per operation: {:.2} lines missed in {:.3} rounds, {:.2} lines written back \
         in {:.3} rounds, {:.2} SCR accesses; spin asked {:.0} ns",
        per_op(charged.lines_missed),
        per_op(charged.miss_rounds),
        per_op(charged.lines_written_back),
        per_op(charged.write_back_rounds),
        per_op(charged.scr_accesses),
        per_op(charged.charged_ns),
    );
    let protocol = |(before, after): &(EventCounts, EventCounts)| {
        let ops = (after.reads + after.writes - before.reads - before.writes).max(1) as f64;
        let per_op = |a: u64, b: u64| (a - b) as f64 / ops;
        format!(
            "{:.2} lines invalidated, {:.2} written back, {:.2} SCR atomics",
            per_op(after.lines_invalidated, before.lines_invalidated),
            per_op(after.lines_written_back, before.lines_written_back),
            per_op(after.scr_atomics, before.scr_atomics)
        )
    };
    println!(
        "protocol's counters per operation (every block, warm-up included): cxl side {}; hardware side {}",
        protocol(&cxl_events),
        protocol(&hardware_events)
    );
    let within = (measured - predicted).abs() / predicted * 100.0;
    println!(
        "cxl model: predicted {predicted:.0} ns/op, measured {measured:.0} ns/op, within {within:.1}%"
    );
    if within <= args.limit_percent {
        true
    } else {
        println!(
            "model-check: FAILED: the measured added time is {within:.1}% off the prediction (limit {}%)",
            args.limit_percent
        );
        false
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match Args::parse(&args) {
        Ok(args) if run(&args) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
