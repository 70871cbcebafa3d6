//! Admission from several hosts at once: two hosts that miss on one page together admit
//! it once; an admission racing a write-back-and-evict of the same page never caches
//! stale bytes.

mod common;

use std::sync::{Arc, Barrier};

use common::{data_file, heap_pod, join, on_disk, options, original_byte, simulated, PAGE};
use megalon_core::MemoryKind;
use megalon_pagecache::{PageCacheConfig, PageCacheStats};

#[test]
fn two_hosts_missing_on_one_page_admit_it_once() {
    const PAGES: u64 = 64;
    // Room for every page and for both hosts' reservations in flight: nothing is evicted.
    let config = PageCacheConfig::new(PAGES + 2).max_hosts(2);
    let pod = heap_pod(&config);
    let data = data_file(PAGES as usize * PAGE);
    let hosts = [
        Arc::new(join(&pod, options(MemoryKind::Hardware))),
        Arc::new(join(&pod, options(MemoryKind::Hardware))),
    ];
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = hosts
        .iter()
        .map(|host| {
            let (host, barrier) = (Arc::clone(host), Arc::clone(&barrier));
            let path = data.path().to_owned();
            std::thread::spawn(move || {
                let file = host.open(&path).unwrap();
                let mut pages = Vec::new();
                for page in 0..PAGES {
                    // Both miss on the same page at the same moment.
                    barrier.wait();
                    let mut buf = vec![0u8; PAGE];
                    assert_eq!(host.read(file, page * PAGE as u64, &mut buf).unwrap(), PAGE);
                    pages.push(buf);
                }
                pages
            })
        })
        .collect();
    let seen: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let disk = on_disk(data.path());
    for page in 0..PAGES as usize {
        assert!(
            seen[0][page] == seen[1][page],
            "page {page}: the hosts disagree"
        );
        assert!(
            seen[0][page] == disk[page * PAGE..(page + 1) * PAGE],
            "page {page}"
        );
    }
    let (a, b) = (hosts[0].stats(), hosts[1].stats());
    assert_eq!(a.admissions + b.admissions, PAGES, "{a:?} {b:?}");
    assert_eq!(
        a.core.creates + b.core.creates,
        PAGES,
        "one create per page won"
    );
    // Every miss admitted the page or found it admitted (no page was evicted here).
    for stats in [a, b] {
        assert_eq!(
            stats.misses,
            stats.admissions + stats.admissions_lost,
            "{stats:?}"
        );
        assert_eq!(stats.hits + stats.misses, PAGES, "{stats:?}");
    }
    assert!(
        a.admissions_lost + b.admissions_lost + a.hits + b.hits == PAGES,
        "the second host of each page lost its admission or hit: {a:?} {b:?}"
    );
    assert_eq!(a.evictions + b.evictions, 0);
    // Cached once: one object per page in both replicas, counted once.
    assert_eq!(hosts[0].cached_pages(), PAGES);
    assert_eq!(hosts[0].host().inspect().replica_len(), PAGES);
    assert_eq!(hosts[1].host().inspect().replica_len(), PAGES);
}

/// Host A keeps reading page 0 (admitting it whenever it is gone) while host B appends
/// numbers to it, each time writing one more number and evicting the page (the release
/// hook writes it back). An admission that read the file before B's write-back and
/// created the page after B's eviction would cache a page that lacks B's last number:
/// B's next write would then go into that stale page, and the number is lost for good.
/// Returns the reader's stats.
fn admission_racing_eviction(seed: u64) -> PageCacheStats {
    const ROUNDS: u64 = 500;
    let config = PageCacheConfig::new(4).max_hosts(2).admission_locks(1);
    let pod = heap_pod(&config);
    let data = data_file(PAGE);
    let reader = Arc::new(join(&pod, options(simulated(seed))));
    let writer = join(&pod, options(simulated(seed + 1)));
    let path = data.path().to_owned();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reading = {
        let (reader, stop) = (Arc::clone(&reader), Arc::clone(&stop));
        std::thread::spawn(move || {
            let file = reader.open(&path).unwrap();
            let mut highest = 0u64;
            let mut buf = vec![0u8; PAGE];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match reader.read(file, 0, &mut buf) {
                    Ok(_) => {}
                    // Evicted again each time it was admitted, before this read could use
                    // it: the bounded answer to an eviction storm (the writer evicts the
                    // page after each of its writes), with nothing read to check.
                    Err(megalon_pagecache::Error::PageKeptLeaving { .. }) => continue,
                    Err(error) => panic!("the reader's read: {error}"),
                }
                // Numbers 1..=n at slots 0..n: the page holds a prefix, never a gap.
                let numbers: Vec<u64> = buf[..ROUNDS as usize * 8]
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .take_while(|&n| n != u64::from_le_bytes([original_byte(0); 8]))
                    .collect();
                let count = numbers
                    .iter()
                    .enumerate()
                    .take_while(|&(i, &n)| n == i as u64 + 1)
                    .count() as u64;
                assert!(
                    count >= highest,
                    "the page went back from {highest} numbers to {count}"
                );
                highest = count;
            }
            reader.stats()
        })
    };
    let file = writer.open(data.path()).unwrap();
    for n in 1..=ROUNDS {
        writer.write(file, (n - 1) * 8, &n.to_le_bytes()).unwrap();
        writer.evict_page(file, 0).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reader_stats = reading.join().unwrap();
    writer.fsync(file).unwrap();
    let disk = on_disk(data.path());
    for n in 1..=ROUNDS {
        let at = (n as usize - 1) * 8;
        assert_eq!(
            u64::from_le_bytes(disk[at..at + 8].try_into().unwrap()),
            n,
            "number {n} was lost ({reader_stats:?})"
        );
    }
    reader_stats
}

#[test]
fn an_admission_racing_an_eviction_never_caches_stale_bytes() {
    // Whether the reader wins an admission in a run is up to the scheduler (the writer
    // admits the page too, and on a busy machine it may win every race of a run): runs
    // go on, each checked, until one had the reader admit, at most ATTEMPTS of them.
    const ATTEMPTS: u64 = 10;
    let mut runs = Vec::new();
    for attempt in 0..ATTEMPTS {
        let stats = admission_racing_eviction(21 + 2 * attempt);
        let admitted = stats.admissions > 0;
        runs.push(stats);
        if admitted {
            return;
        }
    }
    panic!("the reader admitted the page in none of {ATTEMPTS} runs: {runs:?}");
}
