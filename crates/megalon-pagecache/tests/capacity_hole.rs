//! An admission whose create is stuck behind another host's hole (a reservation not yet
//! published) answers an error while its create stays in the log, to apply once the hole
//! fills. It stays counted in its host's word until then: taken out at once, nobody
//! counted that page, further admissions found room that was not there, and the cache
//! held more pages than its capacity. Built with the `chaos` feature only (`cargo test
//! -p megalon-pagecache --features chaos --test capacity_hole`; `cargo xtask ci` runs
//! it).
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{data_file, heap_pod, join, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_core::HostOptions;
use megalon_pagecache::{PageCacheConfig, PageCacheOptions};

fn opts() -> PageCacheOptions {
    PageCacheOptions::new()
        .host(
            HostOptions::new()
                .pump_interval(None)
                .wait_limit(Duration::from_millis(200)),
        )
        .writer_interval(None)
}

#[test]
fn admissions_behind_a_hole_do_not_overfill_the_cache() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let data = data_file(16 * PAGE);
    let a = join(&pod, opts());
    let b = join(&pod, opts());
    let fa = a.open(data.path()).unwrap();
    let fb = b.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    // a gets slots of its own (a slot claim would wait behind the hole below).
    for page in 10..14u64 {
        a.read(fa, page * PAGE as u64, &mut buf).unwrap();
    }
    for page in 10..14u64 {
        assert!(a.evict_page(fa, page).unwrap());
    }
    assert_eq!(a.cached_pages(), 0);

    // b starts an admission and pauses between its reservation of a log position and
    // its publish: a hole. Meanwhile a admits pages: each create lands behind the hole,
    // is unconfirmed, and its admission answers an error.
    let ((), r) = behind_bs_hole(&b, fb, 15, || {
        for page in 0..6u64 {
            let r = a.read(fa, page * PAGE as u64, &mut buf);
            eprintln!("a's admission of page {page}: {r:?}");
        }
    });
    eprintln!("b's admission: {r:?}");
    let cached: Vec<u64> = (0..16).filter(|&p| a.is_cached(fa, p).unwrap()).collect();
    eprintln!("cached pages: {cached:?}, count {}", a.cached_pages());
    assert!(
        cached.len() as u64 <= a.capacity_pages(),
        "a cache of {} pages holds {cached:?}",
        a.capacity_pages()
    );
}

/// Admissions behind a hole, as many as a host has entries of admissions in progress,
/// each answer an error with its create's outcome unknown, and each keeps its entry until
/// this host has applied the log past it. Once the hole fills, the next admission frees
/// them: only a count of the pages in use freed them, and an admission counts them only
/// once it has an entry of its own, so every admission of the host waited out its limit
/// (`AdmissionsBusy`) for as long as nothing else counted.
#[test]
fn admissions_left_unknown_behind_a_hole_do_not_keep_every_entry() {
    const ENTRIES: u64 = 6;
    let pod = heap_pod(
        &PageCacheConfig::new(64)
            .max_hosts(2)
            .admissions_per_host(ENTRIES),
    );
    let data = data_file(64 * PAGE);
    let a = join(&pod, opts());
    let b = join(&pod, opts());
    let fa = a.open(data.path()).unwrap();
    let fb = b.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    // a gets slots of its own (a slot claim would wait behind the hole below).
    for page in 40..40 + ENTRIES + 2 {
        a.read(fa, page * PAGE as u64, &mut buf).unwrap();
    }
    for page in 40..40 + ENTRIES + 2 {
        assert!(a.evict_page(fa, page).unwrap());
    }
    let ((), b_admitted) = behind_bs_hole(&b, fb, 63, || {
        for page in 0..ENTRIES {
            let read = a.read(fa, page * PAGE as u64, &mut buf);
            assert!(read.is_err(), "page {page}: its create is behind the hole");
        }
    });
    b_admitted.expect("b's admission");
    // The hole is filled: the creates behind it applied (`cached_pages` is not called
    // here, as it counts, and would free the entries itself).
    let read = a.read(fa, 20 * PAGE as u64, &mut buf);
    assert!(read.is_ok(), "an admission once the hole filled: {read:?}");
    let cached = (0..64).filter(|&p| a.is_cached(fa, p).unwrap()).count() as u64;
    assert_eq!(
        cached,
        ENTRIES + 2,
        "the creates behind the hole, b's page and page 20"
    );
    assert_eq!(a.cached_pages(), cached);
}

/// Host `a` misses on a page while `b` holds a hole in the log (paused between its
/// reservation and its publish). `a`'s create is refused before it gets a log position
/// (its slot request waits behind the hole: `ReplayStalled`), so nothing was created,
/// but `a` cannot tell yet (the log is behind the hole) and keeps the admission's entry
/// as one of unknown outcome, its position word 0. The hole fills; `a` then does nothing
/// more (a host that only hits would do the same). Every other host goes on counting
/// `a`'s entry as an admission in progress (position 0: "not noted yet"): `b`'s cache of
/// 2 pages holds 1, each admission evicting the page before it for room that is there,
/// for as long as `a` makes no admission of its own (only `a`'s own count frees it).
#[test]
fn an_admission_refused_before_the_log_costs_no_room_while_its_host_is_idle() {
    let pod = heap_pod(&PageCacheConfig::new(2).max_hosts(2));
    let data = data_file(16 * PAGE);
    let a = join(&pod, opts());
    let b = join(&pod, opts());
    let fa = a.open(data.path()).unwrap();
    let fb = b.open(data.path()).unwrap();
    let (behind, b_admitted) = behind_bs_hole(&b, fb, 15, || {
        let mut buf = [0u8; 4];
        a.read(fa, 0, &mut buf)
    });
    assert!(behind.is_err(), "a's admission behind the hole: {behind:?}");
    b_admitted.expect("b's admission");
    // The hole is filled; a stays idle (no call that counts pages on a).
    let mut buf = [0u8; 4];
    for page in [7u64, 8] {
        b.read(fb, page * PAGE as u64, &mut buf).unwrap();
    }
    let cached: Vec<u64> = (0..16).filter(|&p| b.is_cached(fb, p).unwrap()).collect();
    let counted = b.cached_pages();
    assert_eq!(
        cached,
        [7, 8],
        "a cache of 2 pages holds {cached:?}; b counts {counted} pages in use"
    );
}

/// Runs `during` while host `b` is paused in an admission of `page` of `fb`, between its
/// reservation of a log position and its publish (a hole every append after it waits
/// behind); then lets `b` go on. Returns `during`'s answer and `b`'s admission's.
fn behind_bs_hole<R>(
    b: &megalon_pagecache::PageCache,
    fb: megalon_pagecache::FileId,
    page: u64,
    during: impl FnOnce() -> R,
) -> (R, megalon_pagecache::Result<usize>) {
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let pauser = s.spawn(move || {
            let mut paused = false;
            chaos::with_hook(
                move |point| {
                    if point == Point::AppendAfterReserve && !paused {
                        paused = true;
                        paused_tx.send(()).unwrap();
                        go_rx.recv().unwrap();
                    }
                },
                || {
                    let mut buf = [0u8; 4];
                    b.read(fb, page * PAGE as u64, &mut buf)
                },
            )
        });
        paused_rx.recv().unwrap();
        let answered = during();
        go_tx.send(()).unwrap();
        (answered, pauser.join().unwrap())
    })
}

/// How long `call` on host a takes while host b is paused between its reservation of a
/// log position and its publish (a hole every append of a's after it waits behind), and
/// what it answered. a first reads and evicts pages 40 and 41 (slots of its own) and
/// reads page 30 (cached, for an eviction to find).
fn behind_a_hole<R>(
    wait: std::time::Duration,
    call: impl FnOnce(&megalon_pagecache::PageCache, megalon_pagecache::FileId) -> R,
) -> (std::time::Duration, R) {
    let opts = || {
        PageCacheOptions::new()
            .host(HostOptions::new().pump_interval(None).wait_limit(wait))
            .writer_interval(None)
    };
    let pod = heap_pod(&PageCacheConfig::new(16).max_hosts(2));
    let data = data_file(64 * PAGE);
    let a = join(&pod, opts());
    let b = join(&pod, opts());
    let fa = a.open(data.path()).unwrap();
    let fb = b.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    for page in [40u64, 41] {
        a.read(fa, page * PAGE as u64, &mut buf).unwrap();
        assert!(a.evict_page(fa, page).unwrap());
    }
    a.read(fa, 30 * PAGE as u64, &mut buf).unwrap();
    let (answered, b_admitted) = behind_bs_hole(&b, fb, 63, || {
        let began = std::time::Instant::now();
        let answered = call(&a, fa);
        (began.elapsed(), answered)
    });
    b_admitted.expect("b's admission");
    answered
}

/// An admission whose create lies behind the hole answers within about one wait limit:
/// its create's wait for the outcome is that limit, and the look at whether the create
/// took effect waits only what is left of it. (It began a limit of its own: two in all,
/// 1.0 s at a 500 ms limit.)
#[test]
fn an_admission_behind_a_hole_answers_within_one_limit() {
    let wait = Duration::from_millis(500);
    let (took, read) = behind_a_hole(wait, |a, fa| {
        let mut buf = [0u8; 4];
        a.read(fa, 0, &mut buf)
    });
    assert!(
        read.is_err(),
        "page 0's create is behind the hole: {read:?}"
    );
    assert!(
        took < wait + wait / 2,
        "an admission behind a hole took {took:?} (wait limit {wait:?}): {read:?}"
    );
}

/// An eviction whose delete lies behind the hole answers within about one wait limit, as
/// an admission does.
#[test]
fn an_eviction_behind_a_hole_answers_within_one_limit() {
    let wait = Duration::from_millis(500);
    let (took, evicted) = behind_a_hole(wait, |a, fa| a.evict_page(fa, 30));
    assert!(
        evicted.is_err(),
        "page 30's delete is behind the hole: {evicted:?}"
    );
    assert!(
        took < wait + wait / 2,
        "an eviction behind a hole took {took:?} (wait limit {wait:?}): {evicted:?}"
    );
}
