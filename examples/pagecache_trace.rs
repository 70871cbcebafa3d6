//! Replays a block-read trace (the ARC traces in `../shared/traces/arc`, or any file of
//! that format, zstd-compressed or not) through the shared page cache: a file of the
//! trace's size, a cache of a given number of 4 KiB pages. One host replays the whole
//! trace in order, and its hit ratio stands beside the one an exact LRU cache of the same
//! size gets on the same order (computed here). Then several hosts replay it together,
//! each its share of the requests, and the example reports what sharing the cache gave.
//!
//! ```text
//! cargo run --release --example pagecache_trace -- --trace ../shared/traces/arc/OLTP.lis.zst
//! cargo run --release --example pagecache_trace -- --trace ../shared/traces/arc/P3.lis.zst --cache-pages 5000 --hosts 3
//! ```
//!
//! Traces: N. Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low Overhead Replacement
//! Cache", USENIX FAST 2003.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::limits::MAX_HOSTS_LIMIT;
use megalon::core::{Backing, Join, MemoryKind};
use megalon::pagecache::{
    Error, PageCache, PageCacheConfig, PageCacheOptions, PageCacheStats, MAX_CACHE_PAGES,
};
use megalon_workload::trace::{LruSimulator, Trace, BLOCK_SIZE_BYTES};

mod common;

/// Replay a block-read trace through megalon's shared page cache, and set its hit ratio
/// beside an exact LRU's of the same size.
///
/// The trace's blocks are read from a sparse file of the trace's size through a page
/// cache of `--cache-pages` 4 KiB pages held in the pod (CLOCK eviction). First one host
/// replays every request in trace order: the same page order an exact LRU of the same
/// size sees, so the two hit ratios compare. Then, with `--hosts` above 1, that many
/// hosts replay the trace together, request i on host i mod hosts, concurrently: the
/// order in which the cache sees the pages depends on how the hosts interleave, so this
/// run's hit ratio differs from the 1-host one and from run to run, and is reported on its
/// own.
#[derive(Debug, Parser)]
#[command(name = "pagecache_trace")]
struct Args {
    /// The trace (lines of: first 512-byte block, blocks, ignored, request number).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/traces/arc/OLTP.lis.zst"))]
    trace: PathBuf,
    /// Cache size in 4 KiB pages (default: 5% of the pages the trace touches).
    #[arg(long)]
    cache_pages: Option<u64>,
    /// Hosts sharing the cache in the second replay; request i goes to host i mod hosts.
    /// 1: only the replay in trace order.
    #[arg(long, default_value_t = 2)]
    hosts: u32,
    /// Replay only the first this many requests.
    #[arg(long)]
    limit: Option<usize>,
    /// Memory the hosts use: this machine's, with real cache-maintenance instructions; a
    /// simulated non-coherent cache per host; or this machine's under the CXL cost model
    /// (`cxl`).
    #[arg(long, default_value = "hardware", value_parser = common::memory_kind())]
    memory: MemoryKind,
    /// Seed of the simulated memory.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The data file (default: a new sparse file in the temporary directory, removed at
    /// the end). A file shorter than the trace is grown to the trace's size (sparse,
    /// zeros at its end) and kept so; the replay only reads it.
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    main_of(&Args::parse())
}

/// What `main` does with its flags: runs the replays, stopped by SIGINT, SIGTERM or
/// SIGHUP (then the data file is removed as at any other end, and the run fails).
fn main_of(args: &Args) -> ExitCode {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(signal, Arc::clone(&interrupted)) {
            return common::exit_code(Err(format!("watching signals: {e}").into()));
        }
    }
    common::exit_code(run(args, &interrupted))
}

/// The error of a replay stopped by a signal.
const INTERRUPTED: &str = "interrupted (SIGINT, SIGTERM or SIGHUP)";

fn run(args: &Args, interrupted: &AtomicBool) -> common::Result {
    if args.hosts == 0 {
        return Err("--hosts 0: at least 1 is needed".into());
    }
    let started = Instant::now();
    let trace = Trace::open(&args.trace)?;
    let requests = &trace.requests()[..args.limit.unwrap_or(usize::MAX).min(trace.request_count())];
    if requests.is_empty() {
        return Err(format!("{}: no requests to replay", args.trace.display()).into());
    }
    let trace = Trace::from_requests(requests.to_vec());
    let distinct = trace.distinct_page_count();
    let cache_pages = args.cache_pages.unwrap_or((distinct as u64 / 20).max(16));
    // Refuse a cache or a count of hosts the page cache cannot make before replaying.
    for hosts in [1, args.hosts] {
        let config = PageCacheConfig::new(cache_pages).max_hosts(hosts);
        config.pod_config().map_err(explain)?;
    }
    println!(
        "trace {}: {} requests, {} page accesses over {} distinct pages (read in {:.2} s)",
        args.trace.display(),
        trace.request_count(),
        trace.page_access_count(),
        distinct,
        started.elapsed().as_secs_f64()
    );
    println!(
        "cache: {} pages ({:.1}% of the trace's pages), CLOCK eviction, {} memory",
        cache_pages,
        cache_pages as f64 * 100.0 / distinct.max(1) as f64,
        args.memory
    );

    // The exact LRU of the same size, on the same page sequence.
    let mut lru = LruSimulator::new(cache_pages as usize);
    for page in trace.pages() {
        lru.access(page);
    }

    // A sparse file of the trace's size.
    let (path, remove) = match &args.data_file {
        Some(path) => (path.clone(), false),
        None => (
            std::env::temp_dir().join(format!("megalon-trace-{}.data", std::process::id())),
            true,
        ),
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("opening the data file {}: {e}", path.display()))?;
    // A trace past what a file can hold failed here with the bare OS error (or "out of
    // range integral type conversion attempted"), and left the new file behind.
    let grown = file
        .metadata()
        .and_then(|m| {
            if m.len() < trace.size_bytes() {
                file.set_len(trace.size_bytes())
            } else {
                Ok(())
            }
        })
        .map_err(|e| {
            format!(
                "growing the data file {} to the trace's {} bytes: {e}",
                path.display(),
                trace.size_bytes()
            )
        });
    drop(file);
    let result = grown.map_err(Into::into).and_then(|()| {
        replay_both(
            args,
            &trace,
            cache_pages,
            &path,
            lru.hit_ratio(),
            interrupted,
        )
    });
    if remove {
        let _ = std::fs::remove_file(&path);
    }
    result
}

/// The replay in trace order beside LRU's hit ratio, then the shared one, if `--hosts`
/// asks for more than 1.
fn replay_both(
    args: &Args,
    trace: &Trace,
    cache_pages: u64,
    path: &Path,
    lru_hit_ratio: f64,
    interrupted: &AtomicBool,
) -> common::Result {
    let (stats, seconds) = replay(args, trace, cache_pages, path, 1, interrupted)?;
    println!("1 host, every request in trace order (the order the LRU sees):");
    println!(
        "  hit ratio {:.2}%   exact LRU of {cache_pages} pages, same order: {:.2}%",
        hit_ratio(&stats) * 100.0,
        lru_hit_ratio * 100.0
    );
    print_replay(trace, &stats, seconds);
    if args.hosts > 1 {
        let (stats, seconds) = replay(args, trace, cache_pages, path, args.hosts, interrupted)?;
        println!(
            "{hosts} hosts sharing the cache, request i on host i mod {hosts}, concurrently:",
            hosts = args.hosts
        );
        println!(
            "  hit ratio {:.2}% (the hosts interleave in no fixed order: this varies from run \
             to run, and is not LRU's order)",
            hit_ratio(&stats) * 100.0
        );
        print_replay(trace, &stats, seconds);
    }
    Ok(())
}

fn hit_ratio(stats: &PageCacheStats) -> f64 {
    stats.hits as f64 / (stats.hits + stats.misses).max(1) as f64
}

/// Throughput and counters of one replay.
fn print_replay(trace: &Trace, stats: &PageCacheStats, seconds: f64) {
    println!(
        "  {} requests in {:.2} s: {:.0} requests/s, {:.0} page accesses/s",
        trace.request_count(),
        seconds,
        trace.request_count() as f64 / seconds,
        (stats.hits + stats.misses) as f64 / seconds
    );
    println!(
        "  hits {}, misses {}, admissions {} (lost to another host: {}), evictions {}",
        stats.hits, stats.misses, stats.admissions, stats.admissions_lost, stats.evictions
    );
    println!(
        "  protocol: {} object reads, {} read retries, {} creates, {} deletes, {} lines invalidated",
        stats.core.reads,
        stats.core.read_retries(),
        stats.core.creates,
        stats.core.deletes,
        stats.core.lines_invalidated
    );
}

/// The page cache's refusal of a configuration, said with the flag that set the value
/// and the limit it breaks.
fn explain(error: Error) -> Box<dyn std::error::Error> {
    match &error {
        Error::BadConfig {
            parameter: "max_hosts",
            value,
            ..
        } => format!("--hosts {value}: a pod holds 1 to {MAX_HOSTS_LIMIT} hosts ({error})").into(),
        Error::BadConfig {
            parameter: "cache_pages",
            value,
            ..
        } => format!("--cache-pages {value}: a cache holds 1 to {MAX_CACHE_PAGES} pages ({error})")
            .into(),
        _ => error.into(),
    }
}

/// Replays the trace on `hosts` hosts of a new pod, request i on host i mod `hosts`;
/// returns their summed counters and the seconds.
fn replay(
    args: &Args,
    trace: &Trace,
    cache_pages: u64,
    path: &Path,
    hosts: u32,
    interrupted: &AtomicBool,
) -> common::Result<(PageCacheStats, f64)> {
    let config = PageCacheConfig::new(cache_pages).max_hosts(hosts);
    let pod = PageCache::create_pod(&config, Backing::heap()).map_err(explain)?;
    let caches = (0..hosts)
        .map(|host| {
            let options = PageCacheOptions::new().memory(args.memory.for_host(args.seed, host));
            PageCache::join(&pod, Join::AnyFree, options)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(trace.request_count() as u64);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{:>7} [{{bar:40}}] {{percent:>3}}% {{msg}}",
                format!("{hosts} host{}", if hosts == 1 { "" } else { "s" })
            ))
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar
    };
    let done = AtomicU64::new(0);
    let began = Instant::now();
    let step = hosts as usize;
    thread::scope(|scope| -> Result<(), Error> {
        let workers: Vec<_> = caches
            .iter()
            .enumerate()
            .map(|(host, cache)| {
                let (done, requests) = (&done, trace.requests());
                scope.spawn(move || -> Result<(), Error> {
                    let file = cache.open(path)?;
                    let mut buf = Vec::new();
                    for request in requests.iter().skip(host).step_by(step) {
                        if interrupted.load(Ordering::Relaxed) {
                            break;
                        }
                        let len = (request.block_count() * BLOCK_SIZE_BYTES) as usize;
                        buf.resize(len, 0);
                        cache.read(file, request.first_block() * BLOCK_SIZE_BYTES, &mut buf)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        while workers.iter().any(|w| !w.is_finished()) {
            let n = done.load(Ordering::Relaxed);
            bar.set_position(n);
            bar.set_message(format!(
                "{:.0} requests/s",
                n as f64 / began.elapsed().as_secs_f64()
            ));
            thread::sleep(Duration::from_millis(100));
        }
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("replayer panicked"))
    })?;
    if interrupted.load(Ordering::Relaxed) {
        bar.abandon();
        return Err(INTERRUPTED.into());
    }
    let seconds = began.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let mut total = PageCacheStats::default();
    for cache in &caches {
        let s = cache.stats();
        total.hits += s.hits;
        total.misses += s.misses;
        total.admissions += s.admissions;
        total.admissions_lost += s.admissions_lost;
        total.evictions += s.evictions;
        total.core = total.core + s.core;
    }
    Ok((total, seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Where a test asks this test binary, started again, to replay a trace as `main`
    /// does ([`replay_process`]): the trace's path.
    const REPLAY_TRACE: &str = "MEGALON_PAGECACHE_TRACE_REPLAY";

    /// A replay stopped by Ctrl-C (SIGINT) or SIGTERM removes the data file it made: its
    /// `--help` says the file is "removed at the end", but the signal killed the process
    /// before the removal and left a sparse file of the trace's size (5 GiB for P3) in
    /// the temporary directory, one per interrupted run.
    #[test]
    fn an_interrupted_replay_removes_its_data_file() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace.lis");
        let mut text = String::new();
        for i in 0..400_000u64 {
            // Scattered 4 KiB reads over 4 GiB: mostly misses, slow enough to interrupt.
            let block = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) * 8;
            text += &format!("{block} 8 0 {i}\n");
        }
        std::fs::write(&trace, text).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::replay_process", "--nocapture"])
            .env(REPLAY_TRACE, &trace)
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let data_files = || std::fs::read_dir(&tmp).unwrap().count();
        let deadline = Instant::now() + Duration::from_secs(60);
        while data_files() == 0 {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the replay ended first"
            );
            assert!(Instant::now() < deadline, "no data file after 60 s");
            thread::sleep(Duration::from_millis(10));
        }
        thread::sleep(Duration::from_millis(200));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the replay ended first"
        );
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exited = child.wait().unwrap();
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left after {exited}: {left:?}");
        assert!(!exited.success(), "an interrupted replay fails: {exited}");
    }

    /// The replay of [`an_interrupted_replay_removes_its_data_file`], run as `main` runs
    /// it (nothing in a normal test run).
    #[test]
    fn replay_process() {
        let Ok(trace) = std::env::var(REPLAY_TRACE) else {
            return;
        };
        let args =
            common::parse_flags::<Args>(&["--trace", &trace, "--hosts", "1", "--quiet"]).unwrap();
        std::process::exit(match main_of(&args) {
            code if code == ExitCode::SUCCESS => 0,
            _ => 1,
        });
    }

    #[test]
    fn a_missing_trace_is_one_line_naming_it() {
        assert_eq!(
            common::failure(
                &["--trace", "/nonexistent.zst", "--quiet"],
                |args: &Args| run(args, &AtomicBool::new(false))
            ),
            "error: reading trace /nonexistent.zst: No such file or directory (os error 2)"
        );
    }

    /// A trace whose pages end past what a file can hold (past `i64::MAX` bytes, on any
    /// file system): the error names the data file, and the temporary one is removed.
    #[test]
    fn a_data_file_too_large_is_named_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace.lis");
        std::fs::write(&trace, "36028797018963900 8 0 0\n").unwrap();
        let failure = common::failure(
            &["--trace", trace.to_str().unwrap(), "--quiet"],
            |args: &Args| run(args, &AtomicBool::new(false)),
        );
        let data = std::env::temp_dir().join(format!("megalon-trace-{}.data", std::process::id()));
        let named = format!(
            "error: growing the data file {} to the trace's 18446744073709522944 bytes: ",
            data.display()
        );
        assert!(failure.starts_with(&named), "{failure}");
        assert!(!data.exists(), "{} left behind", data.display());
    }

    #[test]
    fn a_refused_configuration_names_the_flag_and_the_limit() {
        let error = PageCacheConfig::new(16)
            .max_hosts(100)
            .pod_config()
            .unwrap_err();
        assert_eq!(
            explain(error).to_string(),
            "--hosts 100: a pod holds 1 to 64 hosts (max_hosts = 100 is invalid: above the limit of 64)"
        );
        let error = PageCacheConfig::new(0).pod_config().unwrap_err();
        assert!(explain(error)
            .to_string()
            .starts_with("--cache-pages 0: a cache holds 1 to "));
    }
}
