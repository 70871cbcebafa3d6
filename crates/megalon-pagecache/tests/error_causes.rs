//! Errors told to the wrong caller, or when nothing is wrong: a refused eviction that
//! answers another thread's error, an `fsync` that answers `ScrRecordsExhausted` for a page
//! that was written back already, a sweep that gives up on a busy page while another
//! could go. Built with the `chaos` feature (`cargo test -p megalon-pagecache --features
//! chaos --test error_causes`; the pagecache3 review, 2026-11-30).
#![cfg(feature = "chaos")]

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{data_file, heap_pod, join, on_disk, simulated, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_core::HostOptions;
use megalon_pagecache::{PageCacheConfig, PageCacheOptions};

fn opts(seed: u64, wait_limit: Duration, pump: bool, writer: Option<Duration>) -> PageCacheOptions {
    let mut host = HostOptions::new()
        .memory(simulated(seed))
        .wait_limit(wait_limit)
        // No background reclaim: the tests decide which pages hold records.
        .record_watermark(1.0);
    if !pump {
        host = host.pump_interval(None);
    }
    PageCacheOptions::new().host(host).writer_interval(writer)
}

/// A key no page has: a delete of it appends an entry that changes nothing.
const JUNK: [u8; 16] = [0xee; 16];

/// Host b has written 15 pages of file G (open on b only) and page 0 of file F (open on
/// a and b): the pod's 16 records are all in use, by dirty pages. Host a `fsync`s F. Its
/// write-back looks page 0 up (it has a record), and before its `write_start` b reclaims
/// that record (b's release hook writes the page to F: F is clean) and gives it to a 16th
/// page of G. a's `write_start` then finds the page read-shared and allocates a record
/// for it: every record is a dirty page of G, whose release a's hook refuses (G is not
/// open on a), and `fsync(F)` answered `ScrRecordsExhausted` with nothing of F left to
/// write.
#[test]
fn an_fsync_whose_page_lost_its_record_meanwhile_answers_ok() {
    let config = PageCacheConfig::new(24).max_hosts(2).coherence_records(16);
    let pod = heap_pod(&config);
    assert_eq!(pod.layout().record_count, 16);
    let f = data_file(PAGE);
    let g = data_file(16 * PAGE);
    // a has no pump: its own thread applies every entry (the hook counts its replays).
    let a = join(&pod, opts(1, Duration::from_secs(2), false, None));
    let b = Arc::new(join(&pod, opts(2, Duration::from_secs(2), true, None)));
    let (fa, fb, gb) = (
        a.open(f.path()).unwrap(),
        b.open(f.path()).unwrap(),
        b.open(g.path()).unwrap(),
    );
    for page in 0..15 {
        b.write(gb, page * PAGE as u64, b"GGGG").unwrap();
    }
    b.write(fb, 0, b"FFFF").unwrap();
    assert_eq!(b.dirty_pages(), 16);
    let p = fb.page_key(0);
    let p_record = b.host().lookup(&p).unwrap().unwrap().record.unwrap();
    // a's write-back looks at the dirty records in order: each one's owner (a catch-up),
    // and for page 0 of F, the page (a second catch-up).
    let before = (0..15)
        .filter(|&page| {
            let key = gb.page_key(page);
            b.host().lookup(&key).unwrap().unwrap().record.unwrap() < p_record
        })
        .count();
    let lookup_at = before + 2;
    b.host().delete(&JUNK).unwrap_err(); // something for a's first catch-up to apply
    let replays = Rc::new(Cell::new(0usize));
    let fired = Rc::new(Cell::new(false));
    let hook = {
        let (b, replays, fired) = (Arc::clone(&b), Rc::clone(&replays), Rc::clone(&fired));
        move |point| {
            if point != Point::ReplayBeforeCtail || fired.get() {
                return;
            }
            replays.set(replays.get() + 1);
            if replays.get() < lookup_at {
                // Something for a's next catch-up to apply.
                b.host().delete(&JUNK).unwrap_err();
                return;
            }
            fired.set(true);
            // b reclaims page 0's record (its hook writes the page to F), and a 16th page
            // of G takes the record.
            assert!(b.host().make_read_shared(&p).unwrap());
            b.write(gb, 15 * PAGE as u64, b"GGGG").unwrap();
        }
    };
    let fsync = chaos::with_hook(hook, || a.fsync(fa));
    assert!(
        fired.get(),
        "the window was reached ({} replays)",
        replays.get()
    );
    assert_eq!(
        &on_disk(f.path())[..4],
        b"FFFF",
        "b's hook wrote F's page back"
    );
    assert!(
        fsync.is_ok(),
        "fsync(F) with F's page written back and clean: {fsync:?} (a's last error: {:?})",
        a.take_error()
    );
}

/// Runs `write` on a thread of its own that pauses at `WriteBeforeUnlock` (the page's
/// record locked, its dirty bit set); returns once it is paused, with the sender that lets
/// it go on and its handle.
fn paused_write(
    write: impl FnOnce() -> megalon_pagecache::Result<()> + Send + 'static,
) -> (
    mpsc::Sender<()>,
    std::thread::JoinHandle<megalon_pagecache::Result<()>>,
) {
    let (paused, is_paused) = mpsc::channel();
    let (go, resume) = mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut once = false;
        chaos::with_hook(
            move |point| {
                if point == Point::WriteBeforeUnlock && !once {
                    once = true;
                    paused.send(()).unwrap();
                    resume.recv().unwrap();
                }
            },
            write,
        )
    });
    is_paused
        .recv_timeout(Duration::from_secs(20))
        .expect("the write reached its unlock");
    (go, writer)
}

/// The hand of host a finds page 0 of G dirty (b wrote it; G is not open on a): a's
/// release hook refuses (`FileNotOpen`, which it stores for the delete to answer). Before
/// the delete takes it, a's background writer stores an error of its own (`RecordBusy`:
/// page 0 of F is dirty and b holds its record locked, paused in its write). The delete
/// took the writer's error for the hook's, and the sweep, which takes an error other than
/// a refusal for a failure, gave up: `evict_one` answered `RecordBusy` (a record it never
/// touched), though page 1 of F was clean and evictable.
#[test]
fn a_refused_eviction_answers_its_own_refusal_not_the_writer_s_error() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let f = data_file(2 * PAGE);
    let g = data_file(PAGE);
    let interval = Duration::from_millis(20);
    let a = Arc::new(join(
        &pod,
        opts(3, Duration::from_millis(300), true, Some(interval)),
    ));
    let b = Arc::new(join(&pod, opts(4, Duration::from_secs(5), true, None)));
    let fa = a.open(f.path()).unwrap();
    let (fb, gb) = (b.open(f.path()).unwrap(), b.open(g.path()).unwrap());
    let mut buf = [0u8; 4];
    // Page 0 of G: dirty, count 1.
    b.write(gb, 0, b"GGGG").unwrap();
    // Page 0 of F: count 3 (the hand does not reach it); page 1: clean, count 2.
    a.write(fa, 0, b"AAAA").unwrap();
    a.read(fa, 0, &mut buf).unwrap();
    a.read(fa, 0, &mut buf).unwrap();
    a.read(fa, PAGE as u64, &mut buf).unwrap();
    a.read(fa, PAGE as u64, &mut buf).unwrap();
    // b writes page 0 of F and pauses holding its record (the page dirty).
    let (go, writer) = {
        let b = Arc::clone(&b);
        paused_write(move || b.write(fb, 0, b"BBBB"))
    };
    let refusals = a.stats().releases_refused;
    let fired = Rc::new(Cell::new(false));
    let hook = {
        let (a, fired) = (Arc::clone(&a), Rc::clone(&fired));
        move |point| {
            if point != Point::UnlockAfterCheck
                || fired.get()
                || a.stats().releases_refused == refusals
            {
                return;
            }
            fired.set(true);
            // a's hook refused page 0 of G. Its writer meanwhile fails on page 0 of F
            // (busy for its wait limit), and stores that.
            let start = Instant::now();
            let waits = a.stats().core.waits_for_writer;
            while a.stats().core.waits_for_writer == waits {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the writer never ran"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(600));
        }
    };
    let evicted = chaos::with_hook(hook, || a.evict_one());
    go.send(()).unwrap();
    let b_write = writer.join().unwrap();
    assert!(fired.get(), "a's hook refused page 0 of G");
    assert!(b_write.is_ok(), "b's write: {b_write:?}");
    assert!(
        matches!(evicted, Ok(true)),
        "page 1 of F was clean and evictable; evict_one answered {evicted:?}"
    );
}

/// b writes page 0 of F and pauses holding its record (as a writer descheduled for long
/// would). The cache is full (page 0, just admitted by b, count 0; page 1, read by a,
/// count 1), and a reads page 2: its hand reaches page 0 first, its delete waits out the
/// wait limit for the record, and the sweep, which takes anything but a refused release
/// for a failure, gave up: a's read answered `RecordBusy`, though page 1 was clean and
/// evictable (the hand is to pass over a page it cannot take now: `NoVictim` names
/// "locked" pages among those it passed over).
#[test]
fn a_sweep_passes_over_a_page_a_writer_holds() {
    let pod = heap_pod(&PageCacheConfig::new(2).max_hosts(2));
    let f = data_file(3 * PAGE);
    let a = join(&pod, opts(5, Duration::from_millis(300), true, None));
    let b = Arc::new(join(&pod, opts(6, Duration::from_secs(5), true, None)));
    let (fa, fb) = (a.open(f.path()).unwrap(), b.open(f.path()).unwrap());
    let mut buf = [0u8; 4];
    a.read(fa, PAGE as u64, &mut buf).unwrap();
    let (go, writer) = {
        let b = Arc::clone(&b);
        paused_write(move || b.write(fb, 0, b"BBBB"))
    };
    assert_eq!(a.cached_pages(), 2);
    let read = a.read(fa, 2 * PAGE as u64, &mut buf);
    go.send(()).unwrap();
    let b_write = writer.join().unwrap();
    assert!(b_write.is_ok(), "b's write: {b_write:?}");
    assert!(
        read.is_ok(),
        "page 1 was clean and evictable; a's read of page 2 answered {read:?}"
    );
}

/// b writes pages 0, 1 and 2 of F, each from a thread that pauses holding the page's
/// record; a has read page 3 (clean, count 1), and the cache is full. a reads page 4: its
/// hand meets the three locked pages twice (page 3's count keeps it the first time
/// round), and each delete waited out the wait limit before the hand went on: six limits,
/// 6 s at 1 s, for a read that had an evictable page all along. The hand looks once at a
/// locked page now.
#[test]
fn a_sweep_waits_for_no_locked_page_before_it_evicts_another() {
    let limit = Duration::from_secs(1);
    let (read, took) = a_read_beside_three_locked_pages(1, limit, 9);
    assert!(read.is_ok(), "page 3 was evictable: {read:?}");
    assert!(
        took < limit,
        "the read of page 4 took {took:?} with page 3 evictable (limit {limit:?})"
    );
}

/// As above, but every cached page is locked: a's read of page 3 answers `NoVictim`
/// after about one wait limit in all (it waited one limit for each locked page at each
/// of the hand's turns: 12 s at 400 ms).
#[test]
fn a_cache_of_locked_pages_answers_no_victim_within_about_one_limit() {
    let limit = Duration::from_millis(400);
    let (read, took) = a_read_beside_three_locked_pages(0, limit, 11);
    assert!(
        matches!(read, Err(megalon_pagecache::Error::NoVictim { .. })),
        "every page was locked: {read:?}"
    );
    assert!(
        took < 4 * limit,
        "the read of page 3 took {took:?} (limit {limit:?})"
    );
}

/// A cache of `3 + clean` pages, full: b's writes of pages 0, 1 and 2 of a file, each
/// paused holding its page's record, and pages 3.. read by a (wait limit `limit`). Returns
/// what a's read of the next page answered, and how long it took; b's writes then end.
fn a_read_beside_three_locked_pages(
    clean: u64,
    limit: Duration,
    seed: u64,
) -> (megalon_pagecache::Result<()>, Duration) {
    let capacity = 3 + clean;
    let pod = heap_pod(&PageCacheConfig::new(capacity).max_hosts(2));
    let f = data_file((capacity as usize + 1) * PAGE);
    let a = join(&pod, opts(seed, limit, true, None));
    let b = Arc::new(join(
        &pod,
        opts(seed + 1, Duration::from_secs(5), true, None),
    ));
    let (fa, fb) = (a.open(f.path()).unwrap(), b.open(f.path()).unwrap());
    let mut buf = [0u8; 4];
    let writers: Vec<_> = (0..3u64)
        .map(|page| {
            let b = Arc::clone(&b);
            paused_write(move || b.write(fb, page * PAGE as u64, b"BBBB"))
        })
        .collect();
    for page in 3..capacity {
        a.read(fa, page * PAGE as u64, &mut buf).unwrap();
    }
    assert_eq!(a.cached_pages(), capacity);
    let started = Instant::now();
    let read = a.read(fa, capacity * PAGE as u64, &mut buf).map(drop);
    let took = started.elapsed();
    for (go, writer) in writers {
        go.send(()).unwrap();
        let b_write = writer.join().unwrap();
        assert!(b_write.is_ok(), "b's write: {b_write:?}");
    }
    (read, took)
}

/// Host a (no pump) evicts page 0; its delete reaches the log but its append is left
/// unconfirmed, so the eviction looks at the log to learn whether the page is gone. That
/// look was a `replay`, which also serves the slot requests a has applied: b had asked a
/// for slots (a holds every free slot of the pod), and the grant's append was refused.
/// The eviction answered the grant's error, though its delete had taken effect (the page
/// gone, and not counted as evicted). A grant not served is served by a later round.
#[test]
fn an_eviction_that_took_effect_does_not_answer_a_grant_s_error() {
    use megalon_core::chaos::Fault;
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let slots = pod.layout().slot_count;
    let data = data_file(2 * PAGE);
    let a = join(&pod, opts(7, Duration::from_secs(2), false, None));
    let b = Arc::new(join(&pod, opts(8, Duration::from_secs(5), true, None)));
    let (fa, fb) = (a.open(data.path()).unwrap(), b.open(data.path()).unwrap());
    let mut buf = [0u8; 4];
    a.read(fa, 0, &mut buf).unwrap();
    // a claims every other slot of the pod, then frees them into its own pool.
    let junk = |i: u64| {
        let mut key = [0xeeu8; 16];
        key[..8].copy_from_slice(&i.to_le_bytes());
        key
    };
    let mut made = Vec::new();
    for i in 0..slots {
        if a.host().create(&junk(i), b"junk").is_ok() {
            made.push(i);
        }
    }
    for &i in &made {
        a.host().delete(&junk(i)).unwrap();
    }
    b.host().replay().unwrap();
    assert_eq!(b.host().inspect().free_slots(), 0);
    // b misses on page 1: its create asks a for slots, and waits.
    let (_, _, tail) = a.host().inspect().log_cursors();
    let reader = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4];
            b.read(fb, PAGE as u64, &mut buf)
        })
    };
    let start = Instant::now();
    while a.host().inspect().log_cursors().2 == tail {
        assert!(start.elapsed() < Duration::from_secs(10), "b never asked");
        std::thread::sleep(Duration::from_millis(1));
    }
    chaos::fail_next_appends(&[Fault::Unconfirmed, Fault::Refuse]);
    let evicted = a.evict_page(fa, 0);
    chaos::clear_forced_faults();
    // a serves b now.
    let start = Instant::now();
    while !reader.is_finished() {
        assert!(start.elapsed() < Duration::from_secs(10), "b never served");
        let _ = a.host().replay();
        std::thread::sleep(Duration::from_millis(2));
    }
    let read = reader.join().unwrap();
    assert!(read.is_ok(), "b's read: {read:?}");
    assert!(!a.is_cached(fa, 0).unwrap(), "the delete took effect");
    assert!(
        matches!(evicted, Ok(true)),
        "the eviction took effect; evict_page answered {evicted:?}"
    );
    assert_eq!(a.stats().evictions, 1);
}
