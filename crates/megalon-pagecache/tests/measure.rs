//! Measurements printed by hand, not checks: run with
//! `cargo test --release -p megalon-pagecache --test measure -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use common::{data_file, heap_pod, join, options, PAGE};
use megalon_core::MemoryKind;
use megalon_pagecache::PageCacheConfig;

/// Writes to cached pages (whole pages, and 64 bytes at a time) on hardware memory, and
/// the write-back of dirty pages: nanoseconds per call, the median of five runs.
#[test]
#[ignore = "prints measurements; run by hand in release mode"]
fn page_writes() {
    const PAGES: u64 = 64;
    const WRITES: u64 = 100_000;
    let config = PageCacheConfig::new(PAGES + 2);
    let pod = heap_pod(&config);
    let data = data_file(PAGES as usize * PAGE);
    let host = join(&pod, options(MemoryKind::Hardware));
    let file = host.open(data.path()).unwrap();
    let page = vec![7u8; PAGE];
    // Every page cached and dirty.
    for p in 0..PAGES {
        host.write(file, p * PAGE as u64, &page).unwrap();
    }
    for (name, len) in [("whole page", PAGE), ("64 bytes", 64)] {
        let mut runs: Vec<f64> = (0..5)
            .map(|_| {
                let started = Instant::now();
                for i in 0..WRITES {
                    let at = (i % PAGES) * PAGE as u64 + (i * 64) % PAGE as u64;
                    let at = at.min((i % PAGES + 1) * PAGE as u64 - len as u64);
                    host.write(file, at, &page[..len]).unwrap();
                }
                started.elapsed().as_nanos() as f64 / WRITES as f64
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        println!("write, {name}: {:.0} ns (runs {runs:.0?})", runs[2]);
    }
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            for p in 0..PAGES {
                host.write(file, p * PAGE as u64, &page[..64]).unwrap();
            }
            let started = Instant::now();
            host.fsync(file).unwrap();
            started.elapsed().as_nanos() as f64 / PAGES as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    println!("fsync of a dirty page: {:.0} ns (runs {runs:.0?})", runs[2]);
}

/// Reads of cached pages (whole pages, and 64 bytes at a time) on hardware memory, in a
/// seeded random order over 64 MiB of pages (more than the last-level cache of the
/// machines the results come from): nanoseconds per call, the median of five runs.
#[test]
#[ignore = "prints measurements; run by hand in release mode"]
fn page_reads() {
    const PAGES: u64 = 16_384;
    const READS: u64 = 200_000;
    let config = PageCacheConfig::new(PAGES + 2);
    let pod = heap_pod(&config);
    let data = data_file(PAGES as usize * PAGE);
    let host = join(&pod, options(MemoryKind::Hardware));
    let file = host.open(data.path()).unwrap();
    let mut buf = vec![0u8; PAGE];
    // Every page cached (read once: admitted).
    for p in 0..PAGES {
        host.read(file, p * PAGE as u64, &mut buf[..1]).unwrap();
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let order: Vec<u64> = (0..READS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % PAGES
        })
        .collect();
    for (name, len) in [("whole page", PAGE), ("64 bytes", 64)] {
        let mut runs: Vec<f64> = (0..5)
            .map(|_| {
                let started = Instant::now();
                for (i, &p) in order.iter().enumerate() {
                    let at = p * PAGE as u64 + ((i as u64 * 64) % (PAGE - len + 1) as u64);
                    host.read(file, at, &mut buf[..len]).unwrap();
                }
                started.elapsed().as_nanos() as f64 / READS as f64
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        println!("read, {name}: {:.0} ns (runs {runs:.0?})", runs[2]);
    }
}
