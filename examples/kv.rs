//! The KV store on an in-process pod: several hosts (each with its own view of the pod's
//! memory: hardware, simulated non-coherent, or hardware under the CXL cost model, which
//! makes each thread pay what its far-memory traffic would cost on a CXL pod; see
//! `docs/memory.md`) load keys, run a YCSB-like mix of gets and puts for a few seconds,
//! and report throughput, latency, what the protocol did, and where the coherent memory
//! went.
//!
//! ```text
//! cargo run --release --example kv
//! cargo run --release --example kv -- --hosts 4 --threads 1 --write-ratio 0.5 --skew 0.7
//! cargo run --release --example kv -- --memory simulated --seconds 2
//! cargo run --release --example kv -- --memory cxl
//! cargo run --release --example kv -- --local-partitions 5 --local-copies 4
//! cargo run --release --example kv -- --help
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{Backing, Host, Join, Pod};
use megalon::kv::{Megalon, Store};
use megalon_bench::mix::{self, Plan};

mod common;
use common::kv_args::KvArgs;

/// Run megalon's KV store on an in-process pod: hosts load keys and run a mix of gets and
/// puts; prints throughput, latency and what the protocol did.
///
/// Every host is a group of threads in this process with its own view of the pod's
/// memory. The hosts load `--keys` keys, run a YCSB-like mix of gets and puts on them for
/// `--seconds`, then every host reads a sample of keys and the example checks that they
/// agree. The report gives throughput and latency, what the protocol did (the counters
/// that are not zero, with a legend) and where the coherent memory (SCR) went.
#[derive(Debug, Parser)]
#[command(name = "kv")]
struct Args {
    #[command(flatten)]
    kv: KvArgs,
}

fn main() -> ExitCode {
    common::exit_code(run(&Args::parse()))
}

fn run(args: &Args) -> common::Result {
    let kv = &args.kv;
    kv.check()?;
    let config = kv.pod_config();
    let pod = Arc::new(Pod::create(&config, Backing::heap()).map_err(|e| kv.explain(e))?);
    let hosts = (0..kv.hosts)
        .map(|host| {
            let options = kv.host_options(host);
            Host::join(&pod, Join::AnyFree, options).map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let store = Store::new(Megalon::new(pod.clone(), hosts));
    let workers = kv.hosts as usize * kv.threads;
    let layout = pod.layout();
    println!(
        "megalon KV store: {} hosts x {} threads, {}, {} memory",
        kv.hosts,
        kv.threads,
        kv.describe_workload(),
        kv.memory
    );
    println!(
        "pod: SCR {} KiB ({} records of {} bits{}), LNR {} MiB ({} slots of {} B)",
        config.scr_bytes / 1024,
        layout.record_count,
        kv.record_bits,
        if kv.adaptive_width {
            " to start with: the width adapts"
        } else {
            ""
        },
        config.lnr_bytes >> 20,
        layout.slot_count,
        config.slot_size_bytes
    );

    // Load: every worker inserts its share of the keys.
    let bar = progress(kv, kv.keys, "load");
    let started = Instant::now();
    let plan = Plan::from(&kv.mix());
    mix::load_all(&store, &plan, workers, |loaded| bar.set_position(loaded))?;
    bar.finish_and_clear();
    let load_seconds = started.elapsed().as_secs_f64();
    println!(
        "load: {} keys in {:.2} s ({})",
        kv.keys,
        load_seconds,
        mix::rate(kv.keys as f64 / load_seconds)
    );

    // Run: the mix, for `seconds`.
    let duration = Duration::from_secs_f64(kv.seconds);
    let bar = progress(kv, (kv.seconds * 10.0).ceil() as u64, "run");
    let run = mix::run_plan(&store, &plan, workers, duration, |done, elapsed| {
        let elapsed = elapsed.as_secs_f64();
        bar.set_position((elapsed * 10.0) as u64);
        bar.set_message(mix::rate(done as f64 / elapsed));
    })?;
    bar.finish_and_clear();
    print!("{}", common::report::run_report(&run));

    // Every host reads a sample of keys; they must agree.
    let sample: Vec<u64> = (0..kv.keys)
        .step_by((kv.keys / 1000).max(1) as usize)
        .collect();
    let mut handles = (0..kv.hosts as usize)
        .map(|host| store.handle(host))
        .collect::<Result<Vec<_>, _>>()?;
    for index in &sample {
        let key = mix::key(*index);
        let first = handles[0].get(&key)?;
        for (host, handle) in handles.iter_mut().enumerate().skip(1) {
            if handle.get(&key)? != first {
                return Err(format!("host {host} disagrees with host 0 on key {index}").into());
            }
        }
    }
    println!(
        "check: {} keys read on all {} hosts: every host read the same values",
        sample.len(),
        kv.hosts
    );
    Ok(())
}

fn progress(kv: &KvArgs, len: u64, what: &str) -> ProgressBar {
    if kv.quiet {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_hosts_is_one_line_naming_the_limit() {
        assert_eq!(
            common::failure(&["--hosts", "65", "--quiet"], run),
            "error: 65 hosts requested; the host table holds at most 64"
        );
    }

    /// A size the pod refuses is named by the flag that set it, not by the pod's own
    /// parameter ("scr_bytes = 1024 is not a multiple of 4096" for `--scr-kib 1`).
    #[test]
    fn a_refused_pod_size_names_its_flag() {
        for (flags, said) in [
            (
                ["--scr-kib", "1"],
                "error: --scr-kib 1: scr_bytes = 1024 is not a multiple of 4096",
            ),
            (
                ["--local-copies", "1000"],
                "error: --local-copies 1000: copy_after_reads = 1000 is above the limit of 255",
            ),
        ] {
            let flags = [&flags[..], &["--quiet"]].concat();
            assert_eq!(common::failure(&flags, run), said);
        }
    }

    #[test]
    fn a_small_run_checks_out() {
        common::run_with(&["--keys", "500", "--seconds", "0.2", "--quiet"], run).unwrap();
    }
}
