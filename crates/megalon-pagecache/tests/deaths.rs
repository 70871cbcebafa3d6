//! A host that dies in the middle of an admission or an eviction leaves the cache its
//! whole capacity once the core has recovered it: its admission in progress counts no
//! more, and a page it created but never named in its owner line is found by the hand.
//! (Each left a cache of one page full for good, with or without a page in it.) Built
//! with the `chaos` feature only (`cargo test -p megalon-pagecache --features chaos
//! --test deaths`; `cargo xtask ci` runs it).
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc::channel;
use std::sync::Mutex;
use std::time::Duration;

use common::{data_file, heap_pod, join, options, simulated, wait_recovered, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_core::HostOptions;
use megalon_pagecache::{FileId, PageCache, PageCacheConfig};

/// `a` runs `call` on a thread of its own and dies (is frozen: its pump stops, its row
/// says it runs elsewhere, so only its lease tells) the first time it reaches `point`.
fn dies_at(a: &'static PageCache, point: Point, call: impl FnOnce() + Send + 'static) {
    let (frozen, is_frozen) = channel();
    std::thread::spawn(move || {
        let frozen = Mutex::new(frozen);
        chaos::with_hook(
            move |at| {
                if at == point {
                    a.host().inspect().freeze();
                    frozen.lock().unwrap().send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            call,
        );
    });
    is_frozen.recv().unwrap();
}

/// A host killed between its admission's reservation and its create. (The unit of the
/// cached-pages counter it reserved was never given back: a cache of one page was "full"
/// with nothing in it, and every admission by every other host failed for good.)
#[test]
fn an_admission_killed_midway_gives_its_room_back() {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(2));
    let data = data_file(4 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let file_a = a.open(data.path()).unwrap();
    let a_id = a.host().id();
    dies_at(a, Point::CreateBeforeEvent, move || {
        let mut buf = [0u8; 4];
        let _ = a.read(file_a, 0, &mut buf);
    });
    let b = join(&pod, options(simulated(2)));
    wait_recovered(&pod, a_id);
    let file_b = b.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    assert!(
        !b.is_cached(file_b, 0).unwrap(),
        "a's create never happened"
    );
    let read = b.read(file_b, PAGE as u64, &mut buf);
    assert!(
        read.is_ok(),
        "an empty cache (cached_pages = {}) refuses to admit: {read:?}",
        b.cached_pages()
    );
}

/// `a` admits page `page` of `file` on a thread of its own and dies (frozen) once its
/// create's entry is published, before the owner line it writes for the clock hand.
fn dies_before_its_owner_line(a: &'static PageCache, file: FileId, page: u64) {
    let (frozen, is_frozen) = channel();
    std::thread::spawn(move || {
        let frozen = Mutex::new(frozen);
        let creating = std::cell::Cell::new(false);
        chaos::with_hook(
            move |at| {
                if at == Point::CreateBeforeEvent {
                    creating.set(true);
                }
                // The create's entry is published: it takes effect whatever a does next.
                if creating.get() && at == Point::AppendAfterPublish {
                    a.host().inspect().freeze();
                    frozen.lock().unwrap().send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            move || {
                let mut buf = [0u8; 4];
                let _ = a.read(file, page * PAGE as u64, &mut buf);
            },
        );
    });
    is_frozen.recv().unwrap();
}

/// A host killed between its admission's create (published in the log) and the owner
/// line it writes for the clock hand: the page is cached. (The hand never found it, so it
/// was never evicted: a cache of one page refused every other page for good.)
#[test]
fn a_page_whose_admitter_died_before_its_owner_line_is_evictable() {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(2));
    let data = data_file(4 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let file_a = a.open(data.path()).unwrap();
    let a_id = a.host().id();
    dies_before_its_owner_line(a, file_a, 0);
    let b = join(&pod, options(simulated(2)));
    wait_recovered(&pod, a_id);
    let file_b = b.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    assert!(b.is_cached(file_b, 0).unwrap(), "a's create took effect");
    let read = b.read(file_b, PAGE as u64, &mut buf);
    assert!(
        read.is_ok(),
        "a cache of one page (cached_pages = {}) refuses to admit: {read:?}",
        b.cached_pages(),
    );
}

/// The hand's first turn meets a page whose release b's hook refuses (page 0 of G, dirty
/// on c; G is not open on b) and passes over a page no owner line names (a died before
/// naming it). The sweep names that page and turns again, from the slot it began at, and
/// evicts it there before it meets the refused page. The first turn's refusal was
/// dropped: nobody was told that a dirty page was passed over (within one turn, a refusal
/// before an eviction is kept for `take_error`).
#[test]
fn a_refusal_before_a_page_was_named_is_kept_when_the_next_turn_evicts() {
    let config = PageCacheConfig::new(2).max_hosts(3);
    let pod = heap_pod(&config);
    let f = data_file(4 * PAGE);
    let g = data_file(8 * PAGE);
    // a admits first: its page takes a slot the hand meets before c's.
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let a_id = a.host().id();
    let file_a = a.open(f.path()).unwrap();
    dies_before_its_owner_line(a, file_a, 0);
    let c = join(&pod, options(simulated(3)));
    // c recovers a before its own admission: on a loaded machine an admission of c's
    // that overlapped the recovery sometimes found no room and evicted a's page (2 runs
    // in 33 beside three busy loops), which this test needs cached.
    wait_recovered(&pod, a_id);
    let gc = c.open(g.path()).unwrap();
    c.write(gc, 0, b"GGGG").unwrap();
    assert_eq!(c.stats().evictions, 0, "c's admission found room");
    let b = join(&pod, options(simulated(2)));
    let fb = b.open(f.path()).unwrap();
    assert!(b.is_cached(fb, 0).unwrap(), "a's create took effect");
    assert!(b.take_error().is_none());
    let refusals = b.stats().releases_refused;
    let evicted = b.evict_one();
    assert!(matches!(evicted, Ok(true)), "{evicted:?}");
    assert!(!b.is_cached(fb, 0).unwrap(), "the named page was evicted");
    assert!(
        b.stats().releases_refused > refusals,
        "b's hook refused page 0 of G"
    );
    let told = b.take_error();
    assert!(
        matches!(told, Some(megalon_pagecache::Error::FileNotOpen { .. })),
        "the refused release of a dirty page was told to nobody: {told:?}"
    );
}

/// A host killed after its eviction's delete reached the log, before it took the page
/// off the count. (The page was gone, and the count kept it for good.)
#[test]
fn an_eviction_killed_after_its_delete_gives_its_room_back() {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(2));
    let data = data_file(4 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let file_a = a.open(data.path()).unwrap();
    let a_id = a.host().id();
    let mut buf = [0u8; 4];
    a.read(file_a, 0, &mut buf).unwrap();
    dies_at(a, Point::AppendAfterPublish, move || {
        let _ = a.evict_page(file_a, 0);
    });
    let b = join(&pod, options(simulated(2)));
    wait_recovered(&pod, a_id);
    let file_b = b.open(data.path()).unwrap();
    assert!(!b.is_cached(file_b, 0).unwrap(), "a's delete took effect");
    let read = b.read(file_b, PAGE as u64, &mut buf);
    assert!(
        read.is_ok(),
        "an empty cache (cached_pages = {}) refuses to admit: {read:?}",
        b.cached_pages()
    );
}

/// `a`, frozen (past its lease: its pump stops) on a thread of its own the first time it
/// reaches `point` in `call`, until `goes_on`.
struct Paused<T> {
    go: std::sync::mpsc::Sender<()>,
    call: std::thread::JoinHandle<T>,
}

impl<T> Paused<T> {
    /// `a` wakes up and finishes its call; its answer.
    fn goes_on(self) -> T {
        self.go.send(()).unwrap();
        self.call.join().unwrap()
    }
}

fn pauses_at<T: Send + 'static>(
    a: &'static PageCache,
    point: Point,
    call: impl FnOnce() -> T + Send + 'static,
) -> Paused<T> {
    let (paused, is_paused) = channel();
    let (go, resume) = channel::<()>();
    let call = std::thread::spawn(move || {
        let paused = Mutex::new(paused);
        let resume = Mutex::new(resume);
        let done = std::cell::Cell::new(false);
        chaos::with_hook(
            move |at| {
                if at == point && !done.get() {
                    done.set(true);
                    a.host().inspect().freeze();
                    paused.lock().unwrap().send(()).unwrap();
                    resume.lock().unwrap().recv().unwrap();
                }
            },
            call,
        )
    });
    is_paused.recv().unwrap();
    Paused { go, call }
}

/// An admitter paused past its lease between its `pread` of page 0 (the file's bytes)
/// and its create's event is recovered; `b` takes its admission lock over, writes the
/// page and evicts it (written back). Then the admitter goes on: its create must not put
/// its copy, older than the file, in the cache (a guard: the create's append looks at
/// its row; without that look `b`'s write would be read as the file's old bytes).
#[test]
fn an_admitter_resumed_after_its_recovery_caches_no_stale_page() {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(3));
    let data = data_file(4 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let file_a = a.open(data.path()).unwrap();
    let a_id = a.host().id();
    let admitting = pauses_at(a, Point::CreateBeforeEvent, move || {
        let mut buf = [0u8; 4];
        a.read(file_a, 0, &mut buf)
    });
    let b = join(&pod, options(simulated(2)));
    wait_recovered(&pod, a_id);
    let file_b = b.open(data.path()).unwrap();
    b.write(file_b, 0, b"BBBB").unwrap();
    assert!(b.evict_page(file_b, 0).unwrap());
    assert_eq!(&common::on_disk(data.path())[..4], b"BBBB");
    let late = admitting.goes_on();
    assert!(late.is_err(), "a was declared dead: {late:?}");
    let mut buf = [0u8; 4];
    b.read(file_b, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"BBBB", "a's stale copy of page 0 was cached");
    // The cache of one page still turns over.
    b.read(file_b, PAGE as u64, &mut buf).unwrap();
    b.read(file_b, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"BBBB");
    assert!(b.cached_pages() <= 1);
}

/// The key slot `slot`'s owner line names, as `host` reads it from memory (the layout of
/// `layout.rs`: a line per slot from the application LNR's start, the key then the magic).
fn owner_line(host: &PageCache, slot: u64) -> Option<[u8; 16]> {
    let at = host.host().pod().layout().app_lnr_offset + slot * megalon_core::limits::LINE_BYTES;
    let memory = host.host().memory();
    memory.flush(at, 24);
    memory.fence();
    let mut line = [0u8; 24];
    memory.read(at, &mut line);
    (line[16..] == *b"mgPCownr").then(|| line[..16].try_into().unwrap())
}

/// An admitter whose create returned is paused past its lease in the catch-up of its
/// look at the page's slot (after applying another host's entries, before `ctail`), with
/// the page's admission lock held. It is recovered; `b` takes the lock over, evicts the
/// page and admits another into the freed slot, naming it in the slot's owner line. Then
/// the admitter goes on: its replica still has its page in the slot, and it named it in
/// the line over `b`'s (the hand then never found `b`'s page, until a sweep that found no
/// victim repaired the lines).
#[test]
fn an_admitter_paused_in_its_catch_up_names_no_slot_another_page_took() {
    let pod = heap_pod(&PageCacheConfig::new(3).max_hosts(3));
    let data = data_file(4 * PAGE);
    // a's pump off: it would apply b's create (below) before a's lookup catches up,
    // which then never pauses.
    let a_options = options(simulated(1)).host(
        HostOptions::new()
            .memory(simulated(1))
            .wait_limit(Duration::from_secs(5))
            .pump_interval(None),
    );
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, a_options)));
    let b: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(2)))));
    let file_a = a.open(data.path()).unwrap();
    let file_b = b.open(data.path()).unwrap();
    let a_id = a.host().id();
    // In a's create's replay: b admits page 2 (an entry a's next catch-up applies).
    let (created, is_created) = channel::<()>();
    let (appended, b_appended) = channel::<()>();
    let (paused, is_paused) = channel::<()>();
    let (go, resume) = channel::<()>();
    let admitting = std::thread::spawn(move || {
        let stage = std::cell::Cell::new(0);
        let created = Mutex::new(created);
        let b_appended = Mutex::new(b_appended);
        let paused = Mutex::new(paused);
        let resume = Mutex::new(resume);
        chaos::with_hook(
            move |at| match (stage.get(), at) {
                (0, Point::CreateBeforeEvent) => stage.set(1),
                (1, Point::ReplayBeforeCtail) => {
                    stage.set(2);
                    created.lock().unwrap().send(()).unwrap();
                    b_appended.lock().unwrap().recv().unwrap();
                }
                (2, Point::ReplayBeforeCtail) => {
                    stage.set(3);
                    a.host().inspect().freeze();
                    paused.lock().unwrap().send(()).unwrap();
                    resume.lock().unwrap().recv().unwrap();
                }
                _ => {}
            },
            move || {
                let mut buf = [0u8; 4];
                a.read(file_a, 0, &mut buf)
            },
        )
    });
    is_created.recv().unwrap();
    let mut buf = [0u8; 4];
    b.read(file_b, 2 * PAGE as u64, &mut buf).unwrap();
    appended.send(()).unwrap();
    if is_paused.recv().is_err() {
        panic!(
            "a never paused in a second catch-up; its read answered {:?}",
            admitting.join().unwrap()
        );
    }
    wait_recovered(&pod, a_id);
    let slot_of = |page: u64| {
        b.host()
            .lookup(&file_b.page_key(page))
            .unwrap()
            .unwrap()
            .slot
    };
    let a_slot = slot_of(0);
    assert!(b.evict_page(file_b, 0).unwrap(), "a's page was cached");
    b.read(file_b, PAGE as u64, &mut buf).unwrap();
    let slot = slot_of(1);
    assert_eq!(slot, a_slot, "b's page took the slot a's page left");
    assert_eq!(owner_line(b, slot), Some(file_b.page_key(1)));
    go.send(()).unwrap();
    let _ = admitting.join().unwrap();
    assert_eq!(
        owner_line(b, slot),
        Some(file_b.page_key(1)),
        "a, resumed, named its evicted page 0 in the line of b's page 1"
    );
}

/// Host a dies (frozen) once its admission's create is published, before it takes its
/// admission out of its word; c admits while a's recovery is paused after its `HostDead`
/// was published, before a's row is freed. a's page counts once among the pod's objects:
/// c's admission finds room (two pages, one cached). (a's word counted it a second time
/// until its row was freed, and c evicted a's page for nothing.)
#[test]
fn an_admission_during_a_dead_admitter_s_recovery_counts_its_page_once() {
    let config = PageCacheConfig::new(2).max_hosts(3);
    let pod = heap_pod(&config);
    let f = data_file(4 * PAGE);
    let g = data_file(8 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let a_id = a.host().id();
    let file_a = a.open(f.path()).unwrap();
    dies_before_its_owner_line(a, file_a, 0);
    // c has no pump: the thread below is the only one to recover a. No combiner either:
    // that thread, paused in its append, would hold the role and c's create with it.
    let c: &'static PageCache = Box::leak(Box::new(join(
        &pod,
        options(simulated(3)).host(
            HostOptions::new()
                .memory(simulated(3))
                .wait_limit(Duration::from_secs(5))
                .pump_interval(None)
                .flat_combining(false),
        ),
    )));
    let (paused, is_paused) = channel();
    let (go, goes_on) = channel::<()>();
    let recoverer_pod = pod.clone();
    let recoverer = std::thread::spawn(move || {
        let (paused, goes_on) = (Mutex::new(paused), Mutex::new(goes_on));
        let once = std::cell::Cell::new(false);
        chaos::with_hook(
            move |at| {
                // The recovery's only append: its `HostDead`.
                if at == Point::AppendAfterPublish && !once.get() {
                    once.set(true);
                    paused.lock().unwrap().send(()).unwrap();
                    goes_on.lock().unwrap().recv().unwrap();
                }
            },
            || {
                let start = std::time::Instant::now();
                while recoverer_pod.hosts().iter().any(|row| row.host == a_id) {
                    assert!(start.elapsed() < common::WAIT_BOUND, "a never recovered");
                    c.host().inspect().watch_hosts();
                    std::thread::sleep(Duration::from_millis(10));
                }
            },
        );
    });
    is_paused
        .recv_timeout(common::WAIT_BOUND)
        .expect("the recovery of a paused after its HostDead");
    assert!(
        pod.hosts().iter().any(|row| row.host == a_id),
        "a's row is not freed yet"
    );
    let gc = c.open(g.path()).unwrap();
    // A page of G whose admission lock is not the one a died holding (its row is still
    // its own: c would wait for it, whatever the room).
    let lock_of = |file: FileId, page: u64| {
        megalon_core::inspect::fnv1a64(&file.page_key(page)) % config.admission_locks
    };
    let page = (0..8)
        .find(|&page| lock_of(gc, page) != lock_of(file_a, 0))
        .expect("eight pages on one lock word in 64");
    let in_use = c.cached_pages();
    let written = c.write(gc, page * PAGE as u64, b"GGGG");
    let stats = c.stats();
    go.send(()).unwrap();
    recoverer.join().unwrap();
    wait_recovered(&pod, a_id);
    let fc = c.open(f.path()).unwrap();
    assert!(c.is_cached(fc, 0).unwrap(), "a's create took effect");
    assert!(
        written.is_ok() && stats.evictions == 0,
        "c's admission found no room in a cache of two pages holding one (pages in use \
         {in_use}): {written:?}, {stats:?}"
    );
}
