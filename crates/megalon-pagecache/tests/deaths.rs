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

use common::{data_file, heap_pod, join, options, simulated, wait_recovered, PAGE};
use megalon_core::chaos::{self, Point};
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
    let pod = heap_pod(&PageCacheConfig::new(2).max_hosts(3));
    let f = data_file(4 * PAGE);
    let g = data_file(PAGE);
    // a admits first: its page takes a slot the hand meets before c's.
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(1)))));
    let a_id = a.host().id();
    let file_a = a.open(f.path()).unwrap();
    dies_before_its_owner_line(a, file_a, 0);
    let c = join(&pod, options(simulated(3)));
    let gc = c.open(g.path()).unwrap();
    c.write(gc, 0, b"GGGG").unwrap();
    // c recovers a.
    wait_recovered(&pod, a_id);
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
