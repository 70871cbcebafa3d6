//! The KV store across real processes: one pod file on tmpfs, one child process per host.
//! Each child joins the pod as its host, loads its share of the keys, runs the mix of gets
//! and puts for a few seconds, and then, once every host has stopped writing, reads every
//! key and prints a digest of what it read. The parent prints each host's throughput and
//! latency and checks that every host read the same values. A child that dies is reported
//! with its exit status; none can hang the parent (every wait is bounded).
//!
//! ```text
//! cargo run --release --example kv_cluster
//! cargo run --release --example kv_cluster -- --hosts 4 --keys 20000 --seconds 2
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use megalon::core::{
    inspect::fnv1a64, limits::LINE_BYTES, Backing, Host, HostOptions, Join, Pod, PodConfig,
};
use megalon_kv::mix::{self, MixRun};
use megalon_kv::{Megalon, Store};
use megalon_workload::processes::{shared_memory_dir, Children};

#[path = "common/mod.rs"]
mod common;
use common::MixArgs;

/// Run the megalon KV store with one process per host on a shared pod file.
#[derive(Clone, Debug, Parser)]
#[command(about)]
struct Args {
    #[command(flatten)]
    run: MixArgs,
    /// The pod file (default: a new file in /dev/shm, or the temporary directory).
    #[arg(long)]
    pod: Option<PathBuf>,
    /// Longest wait on another host, in seconds, beyond the run itself.
    #[arg(long, default_value_t = 60)]
    wait_seconds: u64,
    /// Keep the pod file at the end.
    #[arg(long)]
    keep: bool,
    /// Internal: run as the child for this host.
    #[arg(long, hide = true)]
    child: Option<u32>,
}

/// Words in the pod's application SCR through which the hosts meet between phases: how
/// many hosts have loaded, and how many have finished running.
const LOADED: u64 = 0;
const RAN: u64 = 8;

fn pod_config(args: &Args) -> PodConfig {
    args.run.pod_config().app_scr_bytes(LINE_BYTES)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.child {
        Some(host) => child(&args, host),
        None => parent(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kv_cluster: {error}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

// ---------------------------------------------------------------- the parent

fn default_pod_path() -> PathBuf {
    shared_memory_dir().join(format!("megalon-kv-cluster-{}.pod", std::process::id()))
}

fn parent(args: &Args) -> Result<()> {
    args.run.check()?;
    let path = args.pod.clone().unwrap_or_else(default_pod_path);
    let config = pod_config(args);
    let pod = Pod::create(&config, Backing::file(&path))?;
    println!(
        "megalon KV store across {} processes: pod file {} ({} MiB), {} keys, {} B values, {:.0}% puts, skew {}",
        args.run.hosts,
        path.display(),
        pod.layout().total_bytes >> 20,
        args.run.keys,
        args.run.value_bytes,
        args.run.write_ratio * 100.0,
        args.run.skew
    );
    drop(pod);
    let outcome = run_children(args, &path);
    if !args.keep {
        let _ = std::fs::remove_file(&path);
    }
    outcome
}

fn run_children(args: &Args, path: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    let commands = (0..args.run.hosts).map(|host| {
        let mut command = Command::new(&exe);
        command
            .args(std::env::args_os().skip(1))
            .arg("--child")
            .arg(host.to_string())
            .arg("--pod")
            .arg(path);
        (format!("host {host}"), command)
    });
    // Within the run's time and the wait bound; a failure or a hang ends the wait, and
    // the children still running are killed when `children` is dropped.
    let deadline = Instant::now()
        + Duration::from_secs_f64(args.run.seconds)
        + Duration::from_secs(args.wait_seconds) * 2;
    let mut children = Children::spawn(commands)?;
    let outputs = children.wait_all(deadline)?;
    report(&outputs)
}

/// The value of `name=` in a child's line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

/// Each host's lines, in host order.
fn report(outputs: &[Vec<String>]) -> Result<()> {
    let mut digests = Vec::new();
    let mut total = 0.0;
    println!(
        "host   load/s      ops/s      gets/s     puts/s   get p50 us  get p99 us  put p99 us"
    );
    for (host, lines) in outputs.iter().enumerate() {
        let line = |kind: &str| {
            lines
                .iter()
                .find(|l| l.starts_with(kind))
                .ok_or_else(|| format!("host {host} printed no {kind} line"))
        };
        let run = line("run ")?;
        let get = |name| -> Result<f64> {
            Ok(field(run, name)
                .ok_or_else(|| format!("host {host}: no {name}"))?
                .parse()?)
        };
        total += get("ops_per_s")?;
        println!(
            "{host:>4} {:>8} {:>10} {:>10} {:>10} {:>11.2} {:>11.2} {:>11.2}",
            mix::rate(get("load_per_s")?),
            mix::rate(get("ops_per_s")?),
            mix::rate(get("gets_per_s")?),
            mix::rate(get("puts_per_s")?),
            get("get_p50_ns")? / 1e3,
            get("get_p99_ns")? / 1e3,
            get("put_p99_ns")? / 1e3,
        );
        let digest = line("digest ")?;
        digests.push((
            host,
            field(digest, "keys").unwrap_or("?").to_owned(),
            field(digest, "fnv").unwrap_or("?").to_owned(),
        ));
    }
    println!(
        "all:  {} over {} processes",
        mix::rate(total),
        outputs.len()
    );
    for (host, keys, fnv) in &digests {
        println!("host {host} read {keys} keys, digest {fnv}");
    }
    let (_, keys, first) = &digests[0];
    if digests.iter().any(|(_, k, d)| d != first || k != keys) {
        return Err("the hosts read different values".into());
    }
    println!(
        "check: all {} hosts read every key ({keys}) and agree",
        digests.len()
    );
    Ok(())
}

// ---------------------------------------------------------------- a child (one host)

/// Adds this host to the count in `word` and waits, bounded, until every host has.
fn meet(pod: &Pod, word: u64, hosts: usize, bound: Duration, what: &str) -> Result<()> {
    let counter = pod.scr_u64(pod.layout().app_scr_offset + word);
    counter.fetch_add(1, Ordering::AcqRel);
    let deadline = Instant::now() + bound;
    loop {
        let arrived = counter.load(Ordering::Acquire);
        if arrived >= hosts as u64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "waited {bound:?} for the other hosts to {what}: {arrived} of {hosts} did"
            )
            .into());
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn child(args: &Args, host: u32) -> Result<()> {
    let path = args.pod.clone().ok_or("a child needs --pod")?;
    let pod = Arc::new(Pod::open_expecting(
        Backing::file(&path),
        &pod_config(args),
    )?);
    let bound = Duration::from_secs(args.wait_seconds);
    let joined = Host::join(&pod, Join::As(host), HostOptions::new().wait_limit(bound))?;
    let store = Store::new(Megalon::new(pod.clone(), vec![Arc::new(joined)]));
    let mix = args.run.mix(1);
    let (hosts, threads) = (args.run.hosts as u64, args.run.threads as u64);

    // Load this host's share: keys whose index is the host's modulo the hosts.
    let started = Instant::now();
    let loaded = AtomicU64::new(0);
    thread::scope(|scope| {
        let loaders: Vec<_> = (0..threads)
            .map(|t| {
                let (store, mix, loaded) = (&store, &mix, &loaded);
                let first = u64::from(host) + t * hosts;
                scope.spawn(move || mix::load(store, 0, mix, first, hosts * threads, loaded))
            })
            .collect();
        loaders
            .into_iter()
            .try_for_each(|l| l.join().expect("loader panicked"))
    })?;
    let load_per_s = loaded.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    meet(&pod, LOADED, args.run.hosts, bound, "load")?;

    // Run the mix.
    let before = store.report();
    let (done, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (runs, seconds) = thread::scope(|scope| {
        let began = Instant::now();
        let runners: Vec<_> = (0..threads)
            .map(|t| {
                let (store, mix, done, stop) = (&store, &mix, &done, &stop);
                let worker = u64::from(host) * threads + t;
                scope.spawn(move || mix::run_worker(store, 0, worker, mix, stop, done))
            })
            .collect();
        thread::sleep(Duration::from_secs_f64(args.run.seconds));
        stop.store(true, Ordering::Relaxed);
        let runs: std::result::Result<Vec<_>, megalon_kv::Error> = runners
            .into_iter()
            .map(|r| r.join().expect("worker panicked"))
            .collect();
        (runs, began.elapsed().as_secs_f64())
    });
    let run = MixRun {
        workers: runs?,
        seconds,
        report: store.report().since(&before),
    };
    let (get, put) = (run.get_latency(), run.put_latency());
    println!(
        "run host={host} load_per_s={load_per_s:.0} ops_per_s={:.0} gets_per_s={:.0} puts_per_s={:.0} get_p50_ns={} get_p99_ns={} put_p99_ns={} churn={} read_retries={}",
        run.ops_per_second(),
        run.gets() as f64 / seconds,
        run.puts() as f64 / seconds,
        get.quantile(0.5).as_nanos(),
        get.quantile(0.99).as_nanos(),
        put.quantile(0.99).as_nanos(),
        run.report.counter("churn").unwrap_or(0),
        run.report.counter("read retries").unwrap_or(0),
    );
    meet(&pod, RAN, args.run.hosts, bound, "finish the run")?;

    // Nobody writes any more: read every key and digest what we read.
    let mut kv = store.handle(0)?;
    let mut digest = Vec::with_capacity(16 * args.run.keys as usize);
    let mut value = Vec::new();
    let mut found = 0u64;
    for index in 0..args.run.keys {
        let key = mix::key(index);
        if kv.get_into(&key, &mut value)? {
            found += 1;
        }
        digest.extend_from_slice(&fnv1a64(&value).to_le_bytes());
    }
    println!(
        "digest host={host} keys={found} fnv={:016x}",
        fnv1a64(&digest)
    );
    Ok(())
}
