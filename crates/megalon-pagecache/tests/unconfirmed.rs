//! Admissions and evictions whose log append reached the log without the host learning its
//! outcome (an unconfirmed append: a replay stalled behind another host's hole, injected
//! here): the cache's count and owner lines follow what the log did. Built with the
//! `chaos` feature only (`cargo test -p megalon-pagecache --features chaos --test
//! unconfirmed`; `cargo xtask ci` runs it).
#![cfg(feature = "chaos")]

mod common;

use std::time::Duration;

use common::{data_file, heap_pod, join, simulated, PAGE};
use megalon_core::chaos::{self, Fault, Point};
use megalon_core::HostOptions;
use megalon_pagecache::{PageCacheConfig, PageCacheOptions};

fn unpumped(seed: u64) -> PageCacheOptions {
    PageCacheOptions::new()
        .host(
            HostOptions::new()
                .memory(simulated(seed))
                .pump_interval(None)
                .wait_limit(Duration::from_millis(300)),
        )
        .writer_interval(None)
}

/// An eviction whose delete took effect without its appender learning it answered an
/// error and never took the page off the count: a cache of one page was then full with
/// no page in it, and every admission failed (`NoVictim`) for good.
#[test]
fn an_eviction_whose_delete_is_unconfirmed_gives_its_room_back() {
    let pod = heap_pod(&PageCacheConfig::new(1).max_hosts(2));
    let data = data_file(4 * PAGE);
    let a = join(&pod, unpumped(1));
    let file = a.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    a.read(file, 0, &mut buf).unwrap();
    assert_eq!(a.cached_pages(), 1);
    chaos::fail_next_appends(&[Fault::Unconfirmed]);
    let evicted = a.evict_page(file, 0);
    chaos::clear_forced_faults();
    assert!(
        matches!(evicted, Ok(true)),
        "the delete took effect: {evicted:?}"
    );
    assert!(!a.is_cached(file, 0).unwrap());
    assert_eq!(a.cached_pages(), 0);
    a.read(file, PAGE as u64, &mut buf)
        .expect("an empty cache of one page admits a page");
}

/// An admission whose create took effect without its appender learning it answered an
/// error and gave its room back: the page was cached but not counted, with no owner
/// line, so the clock hand never found it (a cache of two pages held three).
#[test]
fn an_admission_whose_create_is_unconfirmed_is_counted_and_evictable() {
    let pod = heap_pod(&PageCacheConfig::new(2).max_hosts(2));
    let data = data_file(4 * PAGE);
    let a = join(&pod, unpumped(1));
    let file = a.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    // A first admission, so that this host has slots of its own (no slot claim below,
    // whose append would take the forced fault).
    a.read(file, 3 * PAGE as u64, &mut buf).unwrap();
    let read = chaos::with_hook(
        |point| {
            if point == Point::CreateBeforeEvent {
                chaos::fail_next_appends(&[Fault::Unconfirmed]);
            }
        },
        || a.read(file, 0, &mut buf),
    );
    chaos::clear_forced_faults();
    read.expect("the create took effect: the page is admitted");
    assert!(a.is_cached(file, 0).unwrap());
    assert_eq!(a.cached_pages(), 2);
    a.read(file, PAGE as u64, &mut buf).unwrap();
    a.read(file, 2 * PAGE as u64, &mut buf).unwrap();
    let cached: Vec<u64> = (0..4).filter(|&p| a.is_cached(file, p).unwrap()).collect();
    assert_eq!(cached.len(), 2, "a cache of two pages holds {cached:?}");
    assert_eq!(a.cached_pages(), 2);
}
