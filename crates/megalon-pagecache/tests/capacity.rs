//! The cache never holds more pages than its capacity while hosts admit and evict at
//! once: a third host counts the pod's objects all along, at every log position it
//! applies. (Each admission counts itself in an entry of its host's before it counts
//! every host's entries and the pages; of two admissions at once one sees the other; an
//! entry counts until the counting host's replica has applied its create.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{data_file, heap_pod, join, PAGE};
use megalon_core::{HostOptions, MemoryKind};
use megalon_pagecache::{PageCacheConfig, PageCacheOptions};

/// Hosts on the machine's memory (many admissions a second); with the `chaos` feature,
/// their threads preempted at the core's points now and then, which stretches the windows
/// between an admission's steps (its create's note, publish and replay).
fn options(seed: u64) -> PageCacheOptions {
    let host = HostOptions::new()
        .memory(MemoryKind::Hardware)
        .wait_limit(Duration::from_secs(5));
    #[cfg(feature = "chaos")]
    let host = host.chaos(megalon_core::chaos::ChaosConfig::preemptions(seed, 16));
    #[cfg(not(feature = "chaos"))]
    let _ = seed;
    PageCacheOptions::new().host(host).writer_interval(None)
}

#[test]
fn admissions_from_two_hosts_at_once_never_overfill_the_cache() {
    const CAPACITY: u64 = 4;
    const PAGES: u64 = 48;
    const THREADS: u64 = 3;
    let pod = heap_pod(&PageCacheConfig::new(CAPACITY).max_hosts(3));
    let data = data_file(PAGES as usize * PAGE);
    let hosts: Vec<_> = (1..=2)
        .map(|seed| Arc::new(join(&pod, options(seed))))
        .collect();
    let watcher = join(&pod, options(3));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = hosts
        .iter()
        .flat_map(|host| (0..THREADS).map(move |t| (Arc::clone(host), t)))
        .map(|(host, t)| {
            let (stop, path) = (Arc::clone(&stop), data.path().to_owned());
            std::thread::spawn(move || {
                let file = host.open(&path).unwrap();
                let mut buf = [0u8; 16];
                let (mut page, mut reads) = (t * 7 + u64::from(host.host().id()) * 13, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    // A walk that misses nearly always: 48 pages through a cache of 4.
                    page = (page * 31 + 17) % PAGES;
                    host.read(file, page * PAGE as u64, &mut buf).unwrap();
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let (mut most, mut looks) = (0, 0u64);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let objects = watcher.host().object_count().unwrap();
        most = most.max(objects);
        looks += 1;
        if objects > CAPACITY {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let evictions: u64 = hosts.iter().map(|h| h.stats().evictions).sum();
    eprintln!("{reads} reads, {evictions} evictions, {looks} looks, at most {most} pages");
    assert!(evictions > 500, "the cache churned: {evictions} evictions");
    assert!(
        most <= CAPACITY,
        "the pod held {most} pages in a cache of {CAPACITY}"
    );
}
