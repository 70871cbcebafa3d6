//! Concurrent writers, readers, evictors, background writer and fsync on
//! two hosts over simulated non-coherent memory; each page has one writer that writes whole
//! pages of one version number; readers check that they see one version, never older than
//! the last write that completed before their read began; fsync checks the disk (the
//! pagecache2 review, 2026-11-30: it found creates answering `SlotsExhausted` while
//! another host held free slots).

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{heap_pod, join, on_disk, simulated, PAGE};
use megalon_core::HostOptions;
use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions};

const PAGES: usize = 6;
const FILE_LEN: usize = PAGES * PAGE - 96;

fn page_len(page: usize) -> usize {
    (FILE_LEN - page * PAGE).min(PAGE)
}

fn versioned(version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        v.extend_from_slice(&version.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn versions_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn opts(seed: u64, writer: Option<Duration>) -> PageCacheOptions {
    let host = HostOptions::new()
        .memory(simulated(seed))
        .wait_limit(Duration::from_secs(2));
    // With the chaos feature, `PAGECACHE_STRESS_FAULTS=N`: appends refused one in N,
    // unconfirmed one in 2N, and preemptions.
    #[cfg(feature = "chaos")]
    let host = match std::env::var("PAGECACHE_STRESS_FAULTS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        Some(rate) => host
            .chaos(megalon_core::chaos::ChaosConfig::preemptions(seed, 50).faults(rate, rate * 2)),
        None => host,
    };
    PageCacheOptions::new().host(host).writer_interval(writer)
}

fn stress(seed: u64, config: PageCacheConfig, seconds: u64) {
    let mut data = tempfile::NamedTempFile::new().unwrap();
    let mut init = Vec::new();
    for p in 0..PAGES {
        init.extend(versioned(1, page_len(p)));
    }
    data.write_all(&init).unwrap();
    data.flush().unwrap();
    let pod = heap_pod(&config);
    let hosts: Vec<Arc<PageCache>> = vec![
        Arc::new(join(&pod, opts(seed, None))),
        Arc::new(join(&pod, opts(seed + 1, Some(Duration::from_millis(1))))),
    ];
    let files: Vec<_> = hosts.iter().map(|h| h.open(data.path()).unwrap()).collect();
    let completed: Arc<Vec<AtomicU64>> = Arc::new((0..PAGES).map(|_| AtomicU64::new(1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let note = {
        let errors = Arc::clone(&errors);
        move |what: &str, e: &megalon_pagecache::Error| {
            let name = format!("{what}: {e:?}");
            let name: String = name.chars().take(90).collect();
            *errors.lock().unwrap().entry(name).or_default() += 1;
        }
    };
    let mut threads = Vec::new();
    // Writers: host h owns pages p with p % 2 == h.
    for h in 0..2usize {
        let (host, file, completed, stop, note) = (
            Arc::clone(&hosts[h]),
            files[h],
            Arc::clone(&completed),
            Arc::clone(&stop),
            note.clone(),
        );
        let other = Arc::clone(&hosts[1 - h]);
        threads.push(std::thread::spawn(move || {
            let mut next = 2u64;
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let page = (i % (PAGES / 2)) * 2 + h;
                i += 1;
                let v = next;
                next += 1;
                let written = host.write(file, (page * PAGE) as u64, &versioned(v, page_len(page)));
                match written {
                    Ok(()) => completed[page].store(v, Ordering::SeqCst),
                    Err(e) => {
                        if matches!(e, megalon_pagecache::Error::Core(megalon_core::Error::SlotsExhausted { .. })) {
                            eprintln!("SlotsExhausted on host {h}: free slots here {}, objects {}, cached_pages {}; other host's pool {}; bg errors here {:?} there {:?}", host.host().inspect().free_slots(), host.host().inspect().replica_len(), host.cached_pages(), other.host().inspect().free_slots(), host.host().inspect().background_errors(), other.host().inspect().background_errors());
                        }
                        note("write", &e)
                    }
                }
            }
        }));
    }
    // Readers, one per host.
    for h in 0..2usize {
        let (host, file, completed, stop, note) = (
            Arc::clone(&hosts[h]),
            files[h],
            Arc::clone(&completed),
            Arc::clone(&stop),
            note.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; PAGE];
            let mut i = 7usize * (h + 1);
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_mul(31).wrapping_add(17);
                let page = i % PAGES;
                let min = completed[page].load(Ordering::SeqCst);
                let len = page_len(page);
                let got = host.read(file, (page * PAGE) as u64, &mut buf[..len]);
                match got {
                    Ok(n) => {
                        assert_eq!(n, len);
                        let vs = versions_of(&buf[..len]);
                        let first = vs[0];
                        assert!(
                            vs.iter().all(|&v| v == first),
                            "host {h} read page {page} torn: {:?}",
                            &vs.iter().collect::<std::collections::BTreeSet<_>>()
                        );
                        assert!(
                            first >= min,
                            "host {h} read page {page} at version {first}, older than {min}, a write that completed before the read"
                        );
                    }
                    Err(e) => note("read", &e),
                }
            }
        }));
    }
    // Evictor on host 0: the hand, forced evictions and make_read_shared.
    {
        let (host, file, stop, note) = (
            Arc::clone(&hosts[0]),
            files[0],
            Arc::clone(&stop),
            note.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut i = 3usize;
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_mul(13).wrapping_add(5);
                let page = (i / 3) % PAGES;
                match i % 3 {
                    0 => {
                        if let Err(e) = host.evict_one() {
                            note("evict_one", &e)
                        }
                    }
                    1 => {
                        if let Err(e) = host.evict_page(file, page as u64) {
                            note("evict_page", &e)
                        }
                    }
                    _ => match host.host().make_read_shared(&file.page_key(page as u64)) {
                        Ok(_) | Err(megalon_core::Error::UnknownKey) => {}
                        Err(e) => note("make_read_shared", &e.into()),
                    },
                }
            }
        }));
    }
    // fsync checker on host 0.
    let checker = {
        let (host, file, completed, stop, note, path) = (
            Arc::clone(&hosts[0]),
            files[0],
            Arc::clone(&completed),
            Arc::clone(&stop),
            note.clone(),
            data.path().to_owned(),
        );
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let before: Vec<u64> = completed.iter().map(|c| c.load(Ordering::SeqCst)).collect();
                match host.fsync(file) {
                    Ok(()) => {
                        rounds += 1;
                        let disk = on_disk(&path);
                        for p in 0..PAGES {
                            let vs = versions_of(&disk[p * PAGE..p * PAGE + page_len(p)]);
                            let low = *vs.iter().min().unwrap();
                            assert!(
                                low >= before[p],
                                "after an fsync that answered Ok, page {p} on disk holds version {low}, older than {} (completed before the fsync)",
                                before[p]
                            );
                        }
                    }
                    Err(e) => note("fsync", &e),
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            rounds
        })
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(50));
        if threads.iter().any(|t| t.is_finished()) || checker.is_finished() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut panics = Vec::new();
    for t in threads {
        if let Err(p) = t.join() {
            panics.push(p);
        }
    }
    let rounds = match checker.join() {
        Ok(r) => r,
        Err(p) => {
            panics.push(p);
            0
        }
    };
    eprintln!(
        "fsync rounds {rounds}, completed {:?}",
        completed
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect::<Vec<_>>()
    );
    eprintln!("errors: {:#?}", errors.lock().unwrap());
    for h in &hosts {
        eprintln!("stats {:?} take_error {:?}", h.stats(), h.take_error());
    }
    if let Some(p) = panics.into_iter().next() {
        std::panic::resume_unwind(p);
    }
    // Without injected faults no call may fail: an error here (the `SlotsExhausted` this
    // stress was written to find, a read or an fsync that failed) is a defect, not noise.
    // (Every error was only noted and printed, and the run passed.)
    let faults_injected =
        cfg!(feature = "chaos") && std::env::var_os("PAGECACHE_STRESS_FAULTS").is_some();
    if !faults_injected {
        let errors = errors.lock().unwrap();
        assert!(
            errors.is_empty(),
            "calls failed without injected faults: {errors:#?}"
        );
    }
    // And the run did what it checks: fsyncs checked the disk, and every page was written.
    assert!(
        rounds > 0,
        "no fsync answered Ok: nothing on disk was checked"
    );
    for (p, c) in completed.iter().enumerate() {
        assert!(c.load(Ordering::SeqCst) > 1, "page {p}: no write completed");
    }
    // Quiet now: no record stays locked, the cache holds at most its capacity, and an
    // fsync (retried past injected faults) leaves every completed write on disk.
    std::thread::sleep(Duration::from_millis(200));
    let capacity = hosts[0].capacity_pages();
    for h in &hosts {
        let _ = h.host().replay();
        assert!(
            h.host().inspect().record_census().locked.is_empty(),
            "records left locked: {:?}",
            h.host().inspect().record_census().locked
        );
        assert!(
            h.cached_pages() <= capacity,
            "cached {} of {capacity}",
            h.cached_pages()
        );
    }
    let mut synced = hosts[0].fsync(files[0]);
    for _ in 0..50 {
        if synced.is_ok() {
            break;
        }
        synced = hosts[0].fsync(files[0]);
    }
    synced.expect("a final fsync");
    let disk = on_disk(data.path());
    for p in 0..PAGES {
        let vs = versions_of(&disk[p * PAGE..p * PAGE + page_len(p)]);
        let want = completed[p].load(Ordering::SeqCst);
        assert!(
            vs.iter().all(|&v| v >= want),
            "page {p} on disk below {want}: {:?}",
            vs.iter().min()
        );
    }
    assert_eq!(
        hosts[0].dirty_pages(),
        0,
        "dirty pages after a final fsync by a host with the file open"
    );
}

#[test]
fn stress_small_cache() {
    let config = PageCacheConfig::new(2).max_hosts(2).admission_locks(2);
    stress(1, config, 3);
}

#[test]
fn stress_few_records() {
    let config = PageCacheConfig::new(4)
        .max_hosts(2)
        .coherence_records(1)
        .record_width_bits(8);
    stress(100, config, 3);
}
