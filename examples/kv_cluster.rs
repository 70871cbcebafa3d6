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

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{
    inspect::fnv1a64, limits::LINE_BYTES, Backing, Host, HostOptions, Join, Pod, PodConfig,
};
use megalon::kv::{Megalon, Store};
use megalon_bench::mix::{self, MixRun};
use megalon_workload::processes::{shared_memory_dir, ChildError, Children};

mod common;
use common::{kv_args::KvArgs, Result};

/// Run megalon's KV store with one process per host on a shared pod file, and check that
/// every host reads the same values.
///
/// The parent creates the pod file (on tmpfs where there is one) and starts one child
/// process per host. Each child joins the pod as its host, loads its share of the keys,
/// runs the mix of gets and puts for `--seconds`, then, once every host has stopped
/// writing, reads every key and prints a digest of what it read. The parent prints each
/// host's throughput and latency and checks that the digests agree. The flags of the
/// workload are those of the `kv` example.
#[derive(Clone, Debug, Parser)]
#[command(name = "kv_cluster")]
struct Args {
    #[command(flatten)]
    kv: KvArgs,
    /// The pod file (default: a new file in /dev/shm, or the temporary directory).
    #[arg(long)]
    pod: Option<PathBuf>,
    /// Longest wait on another host, in seconds, beyond the run itself.
    #[arg(long, default_value_t = 60)]
    wait_seconds: u64,
    /// Keep the pod file at the end.
    #[arg(long)]
    keep: bool,
    /// Internal: run as the child for this host (set by the parent, with --child-pod).
    #[arg(long, hide = true, requires = "child_pod")]
    child: Option<u32>,
    /// Internal: the pod file a child opens (set by the parent, with --child).
    #[arg(long, hide = true, requires = "child")]
    child_pod: Option<PathBuf>,
}

/// Words in the pod's application SCR through which the hosts meet between phases: how
/// many hosts have loaded, and how many have finished running.
const LOADED: u64 = 0;
const RAN: u64 = 8;

fn pod_config(args: &Args) -> PodConfig {
    args.kv.pod_config().app_scr_bytes(LINE_BYTES)
}

fn main() -> ExitCode {
    let args = Args::parse();
    common::exit_code(match (args.child, &args.child_pod) {
        (Some(host), Some(path)) => child(&args, host, path),
        _ => parent(&args),
    })
}

// ---------------------------------------------------------------- the parent

fn default_pod_path() -> PathBuf {
    shared_memory_dir().join(format!("megalon-kv-cluster-{}.pod", std::process::id()))
}

fn parent(args: &Args) -> Result {
    args.kv.check()?;
    let path = args.pod.clone().unwrap_or_else(default_pod_path);
    let config = pod_config(args);
    let pod = Pod::create(&config, Backing::file(&path))?;
    println!(
        "megalon KV store: {} processes (hosts) x {} threads, {}, {} memory; pod file {} ({} MiB)",
        args.kv.hosts,
        args.kv.threads,
        args.kv.describe_workload(),
        args.kv.memory,
        path.display(),
        pod.layout().total_bytes >> 20,
    );
    drop(pod);
    let outcome = run_children(args, &path);
    if !args.keep {
        let _ = std::fs::remove_file(&path);
    }
    outcome
}

fn run_children(args: &Args, path: &Path) -> Result {
    let exe = std::env::current_exe()?;
    let commands = (0..args.kv.hosts).map(|host| {
        let mut command = Command::new(&exe);
        command.args(child_args(std::env::args_os().skip(1), host, path));
        (format!("host {host}"), command)
    });
    // Within the run's time and the wait bound; a failure or a hang ends the wait, and
    // the children still running are killed when `children` is dropped.
    let deadline = Instant::now()
        + Duration::from_secs_f64(args.kv.seconds)
        + Duration::from_secs(args.wait_seconds) * 2;
    let mut children = Children::spawn(commands).map_err(one_line)?;

    // Each child says when it has loaded its share; then they run for `seconds`.
    let bar = progress(
        args,
        ProgressBar::new_spinner(),
        "load",
        "{what} {spinner} {msg} ({elapsed})",
    );
    bar.set_message(format!("{} keys on {} hosts", args.kv.keys, args.kv.hosts));
    bar.enable_steady_tick(Duration::from_millis(100));
    let loaded = children.line_from_each(deadline).map_err(one_line)?;
    bar.finish_and_clear();
    let load_per_s = loaded
        .iter()
        .map(|line| field(line, "load_per_s").and_then(|v| v.parse::<f64>().ok()))
        .collect::<Option<Vec<f64>>>()
        .ok_or("a host printed no load rate")?;
    let bar = progress(
        args,
        ProgressBar::new((args.kv.seconds * 10.0).ceil() as u64),
        "run",
        "{what} [{bar:40}] {percent:>3}%",
    );
    if !bar.is_hidden() {
        let began = Instant::now();
        while began.elapsed().as_secs_f64() < args.kv.seconds {
            bar.set_position((began.elapsed().as_secs_f64() * 10.0) as u64);
            thread::sleep(Duration::from_millis(100));
        }
    }
    bar.finish_and_clear();
    let outputs = children.wait_all(deadline).map_err(one_line)?;
    report(&load_per_s, &outputs)
}

/// The flags of the child for `host`: the parent's own (so that it runs the same
/// workload; a `--pod` among them is left to the parent), then which host it is and which
/// file to open, in flags of its own.
fn child_args(parent: impl Iterator<Item = OsString>, host: u32, path: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = parent.collect();
    args.extend([
        "--child".into(),
        host.to_string().into(),
        "--child-pod".into(),
        path.into(),
    ]);
    args
}

/// `bar` drawn with `template` (`{what}` replaced), or a hidden bar with `--quiet`.
fn progress(args: &Args, bar: ProgressBar, what: &str, template: &str) -> ProgressBar {
    if args.kv.quiet {
        return ProgressBar::hidden();
    }
    bar.set_style(
        ProgressStyle::with_template(&template.replace("{what}", &format!("{what:>5}")))
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// A child's failure as one line: what happened to it and, from its stderr, its own
/// `error: ...` line (else the lines it printed, joined).
fn one_line(error: ChildError) -> Box<dyn std::error::Error> {
    let (what, stderr) = match &error {
        ChildError::Exited {
            name,
            status,
            stderr,
        } => (format!("{name} exited with {status}"), stderr),
        ChildError::TimedOut {
            names,
            waited,
            stderr,
        } => (
            format!("{} did not answer within {waited:?}", names.join(", ")),
            stderr,
        ),
        _ => return error.into(),
    };
    let said = match stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
    {
        Some(said) => said.to_owned(),
        None => stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note:"))
            .collect::<Vec<_>>()
            .join(" / "),
    };
    if said.is_empty() {
        what.into()
    } else {
        format!("{what}: {said}").into()
    }
}

/// The value of `name=` in a child's line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

/// Each host's lines, in host order, after its load rate.
fn report(load_per_s: &[f64], outputs: &[Vec<String>]) -> Result {
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
            mix::rate(load_per_s[host]),
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
fn meet(pod: &Pod, word: u64, hosts: u32, bound: Duration, what: &str) -> Result {
    let counter = pod.scr_u64(pod.layout().app_scr_offset + word);
    counter.fetch_add(1, Ordering::AcqRel);
    let deadline = Instant::now() + bound;
    loop {
        let arrived = counter.load(Ordering::Acquire);
        if arrived >= u64::from(hosts) {
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

fn child(args: &Args, host: u32, path: &Path) -> Result {
    let pod = Arc::new(Pod::open_expecting(Backing::file(path), &pod_config(args))?);
    let bound = Duration::from_secs(args.wait_seconds);
    let options = HostOptions::new()
        .wait_limit(bound)
        .memory(args.kv.memory_of(host));
    let joined = Host::join(&pod, Join::As(host), options)?;
    let store = Store::new(Megalon::new(pod.clone(), vec![Arc::new(joined)]));
    let mix = args.kv.mix();
    let (hosts, threads) = (u64::from(args.kv.hosts), args.kv.threads as u64);

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
    // The parent waits for this line from every host before it shows the run's progress.
    println!("loaded host={host} load_per_s={load_per_s:.0}");
    meet(&pod, LOADED, args.kv.hosts, bound, "load")?;

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
        thread::sleep(Duration::from_secs_f64(args.kv.seconds));
        stop.store(true, Ordering::Relaxed);
        let runs: std::result::Result<Vec<_>, megalon::kv::Error> = runners
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
        "run host={host} ops_per_s={:.0} gets_per_s={:.0} puts_per_s={:.0} get_p50_ns={} get_p99_ns={} put_p99_ns={} churn={} read_retries={}",
        run.ops_per_second(),
        run.gets() as f64 / seconds,
        run.puts() as f64 / seconds,
        get.quantile(0.5).as_nanos(),
        get.quantile(0.99).as_nanos(),
        put.quantile(0.99).as_nanos(),
        run.report.counter("churn").unwrap_or(0),
        run.report.counter("read retries").unwrap_or(0),
    );
    meet(&pod, RAN, args.kv.hosts, bound, "finish the run")?;

    // Nobody writes any more: read every key and digest what we read.
    let mut kv = store.handle(0)?;
    let mut digest = Vec::with_capacity(16 * args.kv.keys as usize);
    let mut value = Vec::new();
    let mut found = 0u64;
    for index in 0..args.kv.keys {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    #[test]
    fn a_child_takes_the_parent_s_flags_and_its_own() {
        let parent = ["--pod", "/dev/shm/a.pod", "--keys", "10", "--skew", "0"];
        let flags = child_args(
            parent.iter().map(OsString::from),
            2,
            Path::new("/dev/shm/a.pod"),
        );
        let child = Args::try_parse_from(std::iter::once("kv_cluster".into()).chain(flags))
            .expect("the child parses its flags");
        assert_eq!(child.child, Some(2));
        assert_eq!(
            child.child_pod.as_deref(),
            Some(Path::new("/dev/shm/a.pod"))
        );
        assert_eq!((child.kv.keys, child.kv.skew), (10, 0.0));
        assert!(Args::try_parse_from(["kv_cluster", "--child", "1"]).is_err());
    }

    #[test]
    fn a_child_s_failure_is_one_line_with_its_own_error() {
        let exited = |stderr: &str| {
            one_line(ChildError::Exited {
                name: "host 1".into(),
                status: ExitStatus::from_raw(1 << 8),
                stderr: stderr.into(),
            })
            .to_string()
        };
        assert_eq!(
            exited("error: the pod file is from another version\n"),
            "host 1 exited with exit status: 1: the pod file is from another version"
        );
        assert_eq!(
            exited("thread 'main' panicked at kv_cluster.rs:1:1:\nboom\nnote: run with RUST_BACKTRACE=1\n"),
            "host 1 exited with exit status: 1: thread 'main' panicked at kv_cluster.rs:1:1: / boom"
        );
        assert_eq!(exited(""), "host 1 exited with exit status: 1");
    }
}
