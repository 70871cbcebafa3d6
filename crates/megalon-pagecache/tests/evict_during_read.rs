//! A read of a cached page that started (looked the page and its record up), then, before
//! its copy, saw the page evicted and its slot given to another page whose bytes were
//! written there: the read must answer the first page's bytes, never the second's. (Review `upper`.) Built with
//! the `chaos` feature only (`cargo test -p megalon-pagecache --features chaos --test
//! evict_during_read`).
#![cfg(feature = "chaos")]

mod common;

use std::cell::Cell;
use std::rc::Rc;

use common::{data_file, heap_pod, join, options, simulated, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_pagecache::{PageCache, PageCacheConfig};

fn evicted_and_reused_during_a_read(same_host: bool, dirty: bool) {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(2));
    let data = data_file(2 * PAGE);
    // Left for good (the hook is 'static): a few hosts in a test binary.
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(7)))));
    let b: &'static PageCache = Box::leak(Box::new(join(&pod, options(simulated(8)))));
    let other: &'static PageCache = if same_host { a } else { b };
    let file_a = a.open(data.path()).unwrap();
    let file_o = other.open(data.path()).unwrap();
    // Page 1 cached first, so that its slot is the one page 0 takes later... and page 0
    // cached by the other host, which evicts it below and admits page 1 into its slot.
    let mut buf = [0u8; 16];
    other.read(file_o, 0, &mut buf).unwrap();
    // Written, so that the page has a record (the hook runs in `read_start` after its
    // look at the record, before the copy); clean again if `!dirty`.
    other.write(file_o, 0, b"written page 0!!").unwrap();
    if !dirty {
        other.fsync(file_o).unwrap();
        assert_eq!(other.dirty_pages(), 0);
    }
    let expected = b"written page 0!!".to_vec();
    let slot_of_0 = a.host().lookup(&file_a.page_key(0)).unwrap().unwrap().slot;
    let once = Rc::new(Cell::new(true));
    let reused = Rc::new(Cell::new(false));
    let (once_hook, reused_hook) = (Rc::clone(&once), Rc::clone(&reused));
    let read = chaos::with_hook(
        move |point| {
            if point == Point::ReadAfterCounter && once_hook.replace(false) {
                assert!(other.evict_page(file_o, 0).unwrap());
                let mut other_buf = [0u8; 16];
                other.read(file_o, PAGE as u64, &mut other_buf).unwrap();
                let slot_of_1 = other
                    .host()
                    .lookup(&file_o.page_key(1))
                    .unwrap()
                    .unwrap()
                    .slot;
                reused_hook.set(slot_of_1 == slot_of_0);
            }
        },
        || {
            let mut seen = [0u8; 16];
            a.read(file_a, 0, &mut seen).map(|_| seen)
        },
    );
    assert!(!once.get(), "the hook ran");
    let seen = read.unwrap();
    assert_eq!(
        seen.to_vec(),
        expected,
        "same host {same_host}, dirty {dirty}, slot reused {}",
        reused.get()
    );
    eprintln!(
        "same host {same_host}, dirty {dirty}: slot reused {}",
        reused.get()
    );
}

#[test]
fn a_read_overlapping_an_eviction_and_a_reuse_of_the_slot_answers_the_evicted_page() {
    for same_host in [false, true] {
        for dirty in [false, true] {
            evicted_and_reused_during_a_read(same_host, dirty);
        }
    }
}
