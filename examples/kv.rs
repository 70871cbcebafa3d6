//! The KV store on an in-process pod: several hosts (each with its own view of the pod's
//! memory, hardware or simulated non-coherent) load keys, run a YCSB-like mix of gets and
//! puts for a few seconds, and report throughput, latency, what the protocol did, and
//! where the coherent memory went.
//!
//! ```text
//! cargo run --release --example kv
//! cargo run --release --example kv -- --hosts 4 --threads 1 --write-ratio 0.5 --skew 0.7
//! cargo run --release --example kv -- --memory simulated --seconds 2
//! cargo run --release --example kv -- --help
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{Backing, HostOptions, MemoryKind, Pod, PodConfig, LINE_BYTES, PAGE_BYTES};
use megalon_kv::mix::{self, Mix, MixRun};
use megalon_kv::{Megalon, Store, LENGTH_PREFIX_BYTES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MemoryArg {
    /// This machine's memory with real cache-maintenance instructions.
    Hardware,
    /// A simulated non-coherent cache per host (slower; stale lines show).
    Simulated,
}

/// Run the megalon KV store on an in-process pod of several hosts.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// Hosts sharing the pod.
    #[arg(long, default_value_t = 3)]
    hosts: usize,
    /// Worker threads per host.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Keys loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes of every value.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Fraction of operations that are puts (the rest are gets).
    #[arg(long, default_value_t = 0.05)]
    write_ratio: f64,
    /// Zipfian skew of the key choice (YCSB's scrambled Zipfian); 0 for uniform.
    #[arg(long, default_value_t = 0.99)]
    skew: f64,
    /// Seconds of the mixed run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Memory the hosts use.
    #[arg(long, value_enum, default_value_t = MemoryArg::Hardware)]
    memory: MemoryArg,
    /// KiB of the pod's coherent region (SCR).
    #[arg(long, default_value_t = 1024)]
    scr_kib: u64,
    /// Bits of one coherence record: 8, 16 or 32.
    #[arg(long, default_value_t = 16)]
    record_bits: u32,
    /// Seed of the key choice and of the simulated memory.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress bars (for logs).
    #[arg(long)]
    quiet: bool,
}

/// The pod a run of `keys` values of `value_bytes` needs: a slot per key and a quarter
/// more, the log, whole pages.
fn pod_config(args: &Args) -> PodConfig {
    let slot_size_bytes =
        ((LENGTH_PREFIX_BYTES + args.value_bytes) as u64).next_multiple_of(LINE_BYTES);
    let config = PodConfig::new()
        .scr_bytes(args.scr_kib * 1024)
        .slot_size_bytes(slot_size_bytes)
        .max_key_bytes(32)
        .log_capacity_entries(16_384)
        .record_width_bits(args.record_bits)
        .max_hosts(args.hosts as u32);
    let log_bytes = config.log_capacity_entries * config.log_entry_bytes();
    let slots = args.keys + args.keys / 4 + 1024;
    config.lnr_bytes((log_bytes + slots * slot_size_bytes).next_multiple_of(PAGE_BYTES))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.hosts == 0 || args.threads == 0 || args.keys == 0 {
        return Err("--hosts, --threads and --keys must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&args.write_ratio) {
        return Err("--write-ratio is a fraction between 0 and 1".into());
    }
    let config = pod_config(&args);
    let pod = Arc::new(Pod::create(&config, Backing::heap())?);
    let hosts = (0..args.hosts)
        .map(|host| {
            let memory = match args.memory {
                MemoryArg::Hardware => MemoryKind::Hardware,
                MemoryArg::Simulated => MemoryKind::simulated(args.seed ^ host as u64),
            };
            Megalon::join(pod.clone(), 1, &HostOptions::new().memory(memory))
                .map(|one| one.hosts()[0].clone())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let store = Store::new(Megalon::new(pod.clone(), hosts));
    let mix = Mix {
        keys: args.keys,
        value_bytes: args.value_bytes,
        write_ratio: args.write_ratio,
        skew: args.skew,
        seed: args.seed,
    };
    let workers = args.hosts * args.threads;
    let layout = pod.layout();
    println!(
        "megalon KV store: {} hosts x {} threads, {} keys, {} B values, {:.0}% puts, {}, {} memory",
        args.hosts,
        args.threads,
        args.keys,
        args.value_bytes,
        args.write_ratio * 100.0,
        if args.skew > 0.0 {
            format!("Zipfian keys (skew {})", args.skew)
        } else {
            "uniform keys".to_owned()
        },
        format!("{:?}", args.memory).to_lowercase(),
    );
    println!(
        "pod: SCR {} KiB ({} records of {} bits), LNR {} MiB ({} slots of {} B)",
        config.scr_bytes / 1024,
        layout.record_count,
        args.record_bits,
        config.lnr_bytes >> 20,
        layout.slot_count,
        config.slot_size_bytes
    );

    // Load: every worker inserts its share of the keys.
    let bar = progress(&args, args.keys, "load");
    let started = Instant::now();
    let loaded = AtomicU64::new(0);
    thread::scope(|scope| {
        let loaders: Vec<_> = (0..workers)
            .map(|worker| {
                let (store, mix, loaded) = (&store, &mix, &loaded);
                scope.spawn(move || {
                    mix::load(
                        store,
                        worker % args.hosts,
                        mix,
                        worker as u64,
                        workers as u64,
                        loaded,
                    )
                })
            })
            .collect();
        while loaders.iter().any(|l| !l.is_finished()) {
            bar.set_position(loaded.load(Ordering::Relaxed));
            thread::sleep(Duration::from_millis(50));
        }
        loaders
            .into_iter()
            .try_for_each(|l| l.join().expect("loader panicked"))
    })?;
    bar.finish_and_clear();
    let load_seconds = started.elapsed().as_secs_f64();
    println!(
        "load: {} keys in {:.2} s ({})",
        args.keys,
        load_seconds,
        mix::rate(args.keys as f64 / load_seconds)
    );

    // Run: the mix, for `seconds`.
    let before = store.report();
    let duration = Duration::from_secs_f64(args.seconds);
    let bar = progress(&args, (args.seconds * 10.0).ceil() as u64, "run");
    let (done, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (workers_runs, seconds) = thread::scope(|scope| {
        let began = Instant::now();
        let runners: Vec<_> = (0..workers)
            .map(|worker| {
                let (store, mix, done, stop) = (&store, &mix, &done, &stop);
                scope.spawn(move || {
                    mix::run_worker(store, worker % args.hosts, worker as u64, mix, stop, done)
                })
            })
            .collect();
        while began.elapsed() < duration && runners.iter().all(|r| !r.is_finished()) {
            thread::sleep(Duration::from_millis(100).min(duration.saturating_sub(began.elapsed())));
            let elapsed = began.elapsed().as_secs_f64();
            bar.set_position((elapsed * 10.0) as u64);
            bar.set_message(mix::rate(done.load(Ordering::Relaxed) as f64 / elapsed));
        }
        stop.store(true, Ordering::Relaxed);
        let runs: Result<Vec<_>, megalon_kv::Error> = runners
            .into_iter()
            .map(|r| r.join().expect("worker panicked"))
            .collect();
        (runs, began.elapsed().as_secs_f64())
    });
    bar.finish_and_clear();
    let run = MixRun {
        workers: workers_runs?,
        seconds,
        report: store.report().since(&before),
    };
    print!("{run}");

    // Every host reads a sample of keys; they must agree.
    let sample: Vec<u64> = (0..args.keys)
        .step_by((args.keys / 1000).max(1) as usize)
        .collect();
    let mut handles = (0..args.hosts)
        .map(|host| store.handle(host))
        .collect::<Result<Vec<_>, _>>()?;
    for index in &sample {
        let key = mix::key(*index);
        let first = handles[0].get(&key)?;
        for (host, kv) in handles.iter_mut().enumerate().skip(1) {
            if kv.get(&key)? != first {
                return Err(format!("host {host} disagrees with host 0 on key {index}").into());
            }
        }
    }
    println!(
        "check: {} keys read on all {} hosts: every host read the same values",
        sample.len(),
        args.hosts
    );
    Ok(())
}

fn progress(args: &Args, len: u64, what: &str) -> ProgressBar {
    if args.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!("{what:>5} [{{bar:40}}] {{percent:>3}}% {{msg}}"))
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}
