//! Replays a block-read trace (the ARC traces in `../shared/traces/arc`, or any file of
//! that format, zstd-compressed or not) through the shared page cache: a file of the
//! trace's size, several hosts each replaying its share of the requests, a cache of a
//! given number of 4 KiB pages. Prints the hit ratio, throughput and evictions, beside the
//! hit ratio an exact LRU cache of the same size gets on the same trace (computed here).
//!
//! ```text
//! cargo run --release --example pagecache_trace -- --trace ../shared/traces/arc/OLTP.lis.zst
//! cargo run --release --example pagecache_trace -- --trace P3.lis.zst --cache-pages 5000 --hosts 3
//! ```
//!
//! Traces: N. Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low Overhead Replacement
//! Cache", USENIX FAST 2003.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{Backing, Join, MemoryKind};
use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions, PageCacheStats};
use megalon_workload::trace::{LruSimulator, Trace, BLOCK_SIZE_BYTES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MemoryArg {
    /// This machine's memory with real cache-maintenance instructions.
    Hardware,
    /// A simulated non-coherent cache per host.
    Simulated,
}

/// Replay a block trace through the shared page cache and compare with an exact LRU.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// The trace (lines of: first 512-byte block, blocks, ignored, request number).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/traces/arc/OLTP.lis.zst"))]
    trace: PathBuf,
    /// Cache size in 4 KiB pages (default: 5% of the pages the trace touches).
    #[arg(long)]
    cache_pages: Option<u64>,
    /// Hosts sharing the cache; request i goes to host i mod hosts.
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Replay only the first this many requests.
    #[arg(long)]
    limit: Option<usize>,
    /// Memory the hosts use.
    #[arg(long, value_enum, default_value_t = MemoryArg::Hardware)]
    memory: MemoryArg,
    /// The data file (default: a new sparse file in the temporary directory, removed at
    /// the end).
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.hosts == 0 {
        return Err("--hosts must be at least 1".into());
    }
    let started = Instant::now();
    let trace = Trace::open(&args.trace)?;
    let requests = &trace.requests()[..args.limit.unwrap_or(usize::MAX).min(trace.request_count())];
    let trace = Trace::from_requests(requests.to_vec());
    let distinct = trace.distinct_page_count();
    let cache_pages = args.cache_pages.unwrap_or((distinct as u64 / 20).max(16));
    println!(
        "trace {}: {} requests, {} page accesses over {} distinct pages (read in {:.2} s)",
        args.trace.display(),
        trace.request_count(),
        trace.page_access_count(),
        distinct,
        started.elapsed().as_secs_f64()
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
        .open(&path)?;
    if file.metadata()?.len() < trace.size_bytes() {
        file.set_len(trace.size_bytes())?;
    }
    drop(file);
    let result = replay(&args, &trace, cache_pages, &path);
    if remove {
        let _ = std::fs::remove_file(&path);
    }
    let (stats, seconds) = result?;

    let accesses = stats.hits + stats.misses;
    let hit_ratio = stats.hits as f64 / accesses.max(1) as f64;
    println!(
        "cache: {} pages ({:.1}% of the trace's pages), {} hosts, {} memory",
        cache_pages,
        cache_pages as f64 * 100.0 / distinct.max(1) as f64,
        args.hosts,
        format!("{:?}", args.memory).to_lowercase()
    );
    println!(
        "replay: {} requests in {:.2} s: {:.0} requests/s, {:.0} page accesses/s",
        trace.request_count(),
        seconds,
        trace.request_count() as f64 / seconds,
        accesses as f64 / seconds
    );
    println!(
        "hit ratio: {:.2}% (CLOCK, shared by {} hosts)   exact LRU of {} pages: {:.2}%",
        hit_ratio * 100.0,
        args.hosts,
        cache_pages,
        lru.hit_ratio() * 100.0
    );
    println!(
        "hits {}, misses {}, admissions {} (lost to another host: {}), evictions {}",
        stats.hits, stats.misses, stats.admissions, stats.admissions_lost, stats.evictions
    );
    println!(
        "protocol: {} object reads, {} read retries, {} creates, {} deletes, {} lines invalidated",
        stats.core.reads,
        stats.core.read_retries(),
        stats.core.creates,
        stats.core.deletes,
        stats.core.lines_invalidated
    );
    Ok(())
}

/// Replays the trace on `hosts` hosts; returns their summed counters and the seconds.
fn replay(
    args: &Args,
    trace: &Trace,
    cache_pages: u64,
    path: &std::path::Path,
) -> Result<(PageCacheStats, f64), Box<dyn std::error::Error>> {
    let config = PageCacheConfig::new(cache_pages).max_hosts(args.hosts as u32);
    let pod = PageCache::create_pod(&config, Backing::heap())?;
    let caches = (0..args.hosts)
        .map(|host| {
            let memory = match args.memory {
                MemoryArg::Hardware => MemoryKind::Hardware,
                MemoryArg::Simulated => MemoryKind::simulated(host as u64 + 1),
            };
            PageCache::join(&pod, Join::AnyFree, PageCacheOptions::new().memory(memory))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(trace.request_count() as u64);
        bar.set_style(
            ProgressStyle::with_template("replay [{bar:40}] {percent:>3}% {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar
    };
    let done = AtomicU64::new(0);
    let began = Instant::now();
    thread::scope(|scope| -> Result<(), megalon_pagecache::Error> {
        let workers: Vec<_> = caches
            .iter()
            .enumerate()
            .map(|(host, cache)| {
                let (done, requests) = (&done, trace.requests());
                scope.spawn(move || -> Result<(), megalon_pagecache::Error> {
                    let file = cache.open(path)?;
                    let mut buf = Vec::new();
                    for request in requests.iter().skip(host).step_by(args.hosts) {
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
