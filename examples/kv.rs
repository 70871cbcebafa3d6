//! The KV store on an in-process pod: several hosts (each with its own view of the pod's
//! memory, hardware or simulated non-coherent) load keys, run a YCSB-like mix of gets and
//! puts for a few seconds, and report throughput, latency, what the protocol did, and
//! where the coherent memory went.
//!
//! ```text
//! cargo run --release --example kv
//! cargo run --release --example kv -- --hosts 4 --threads 1 --write-ratio 0.5 --skew 0.7
//! cargo run --release --example kv -- --memory simulated --seconds 2
//! cargo run --release --example kv -- --local-partitions 5 --local-copies 4
//! cargo run --release --example kv -- --help
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{Backing, Host, HostOptions, Join, MemoryKind, Pod};
use megalon_kv::mix::{self, Plan};
use megalon_kv::{Megalon, Store};

#[path = "common/mod.rs"]
mod common;
use common::MixArgs;

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
    #[command(flatten)]
    run: MixArgs,
    /// Memory the hosts use.
    #[arg(long, value_enum, default_value_t = MemoryArg::Hardware)]
    memory: MemoryArg,
    /// Seed of the key choice and of the simulated memory.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress bars (for logs).
    #[arg(long)]
    quiet: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    args.run.check()?;
    let run_args = &args.run;
    let config = run_args.pod_config();
    let pod = Arc::new(Pod::create(&config, Backing::heap())?);
    let hosts = (0..run_args.hosts)
        .map(|host| {
            let memory = match args.memory {
                MemoryArg::Hardware => MemoryKind::Hardware,
                MemoryArg::Simulated => MemoryKind::simulated(args.seed ^ host as u64),
            };
            Host::join(&pod, Join::AnyFree, HostOptions::new().memory(memory)).map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let store = Store::new(Megalon::new(pod.clone(), hosts));
    let mix = run_args.mix(args.seed);
    let workers = run_args.hosts * run_args.threads;
    let layout = pod.layout();
    println!(
        "megalon KV store: {} hosts x {} threads, {} keys, {} B values, {:.0}% puts, {}, {} memory",
        run_args.hosts,
        run_args.threads,
        run_args.keys,
        run_args.value_bytes,
        run_args.write_ratio * 100.0,
        if run_args.skew > 0.0 {
            format!("Zipfian keys (skew {})", run_args.skew)
        } else {
            "uniform keys".to_owned()
        },
        format!("{:?}", args.memory).to_lowercase(),
    );
    println!(
        "pod: SCR {} KiB ({} records of {} bits), LNR {} MiB ({} slots of {} B)",
        config.scr_bytes / 1024,
        layout.record_count,
        run_args.record_bits,
        config.lnr_bytes >> 20,
        layout.slot_count,
        config.slot_size_bytes
    );

    // Load: every worker inserts its share of the keys.
    let bar = progress(&args, run_args.keys, "load");
    let started = Instant::now();
    let plan = Plan::from(&mix);
    mix::load_all(&store, &plan, workers, |loaded| bar.set_position(loaded))?;
    bar.finish_and_clear();
    let load_seconds = started.elapsed().as_secs_f64();
    println!(
        "load: {} keys in {:.2} s ({})",
        run_args.keys,
        load_seconds,
        mix::rate(run_args.keys as f64 / load_seconds)
    );

    // Run: the mix, for `seconds`.
    let duration = Duration::from_secs_f64(run_args.seconds);
    let bar = progress(&args, (run_args.seconds * 10.0).ceil() as u64, "run");
    let run = mix::run_plan(&store, &plan, workers, duration, |done, elapsed| {
        let elapsed = elapsed.as_secs_f64();
        bar.set_position((elapsed * 10.0) as u64);
        bar.set_message(mix::rate(done as f64 / elapsed));
    })?;
    bar.finish_and_clear();
    print!("{run}");

    // Every host reads a sample of keys; they must agree.
    let sample: Vec<u64> = (0..run_args.keys)
        .step_by((run_args.keys / 1000).max(1) as usize)
        .collect();
    let mut handles = (0..run_args.hosts)
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
        run_args.hosts
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
