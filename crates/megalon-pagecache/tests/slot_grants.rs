//! A page-cache admission answered `SlotsExhausted` while the pod had
//! free slots (another host's pool held them), because the thread that asked for slots
//! never asks again once a sibling thread of its host took the slot granted to it.
//! Built with the `chaos` feature (`cargo test -p megalon-pagecache --features chaos
//! --test slot_grants`; the pagecache2 review, 2026-11-30).
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{data_file, heap_pod, join, simulated, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_core::HostOptions;
use megalon_pagecache::{PageCacheConfig, PageCacheOptions};

fn opts(seed: u64) -> PageCacheOptions {
    PageCacheOptions::new()
        .host(
            HostOptions::new()
                .memory(simulated(seed))
                .wait_limit(Duration::from_secs(1))
                // Each thread appends for itself: the schedule below pauses one thread
                // after its append, which a combiner's leader would make the others wait
                // for.
                .flat_combining(false),
        )
        .writer_interval(None)
}

/// Host a owns every free slot of the pod (it claimed them all, then gave them back to
/// its own pool by deleting what it put there); host b owns none. Thread x of b misses
/// on page 0: its create asks a for slots (`NeedSlots`). a grants one; before x looks at
/// its pool again, thread y of b misses on page 1 and its create takes that slot. x never
/// asks again, and its read answers `SlotsExhausted` after the wait limit, though a's
/// pool holds 9 free slots and the cache holds one page of four.
#[test]
fn a_create_whose_granted_slot_a_sibling_thread_took_asks_again() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let slots = pod.layout().slot_count;
    let data = data_file(4 * PAGE);
    let a = join(&pod, opts(1));
    let b = Arc::new(join(&pod, opts(2)));
    // a claims every slot of the pod, then frees them all into its own pool.
    let junk = |i: u64| {
        let mut key = [0xeeu8; 16];
        key[..8].copy_from_slice(&i.to_le_bytes());
        key
    };
    for i in 0..slots {
        a.host().create(&junk(i), b"junk").unwrap();
    }
    for i in 0..slots {
        a.host().delete(&junk(i)).unwrap();
    }
    b.host().replay().unwrap();
    assert_eq!(a.host().inspect().free_slots(), slots);
    assert_eq!(b.host().inspect().free_slots(), 0);
    let file = b.open(data.path()).unwrap();

    // Thread y: reads page 1 when told to.
    let (go, go_rx) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<megalon_pagecache::Result<usize>>();
    let y = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || {
            go_rx.recv().unwrap();
            let mut buf = [0u8; 8];
            done_tx.send(b.read(file, PAGE as u64, &mut buf)).unwrap();
        })
    };

    // Thread x (this one): its first append is the NeedSlots of its create. Once a's grant
    // reached b's pool, y takes it.
    let b_in_hook = Arc::clone(&b);
    let mut fired = false;
    let started = Instant::now();
    let read = chaos::with_hook(
        move |point| {
            if point != Point::AppendAfterPublish || fired {
                return;
            }
            fired = true;
            let start = Instant::now();
            while b_in_hook.host().inspect().free_slots() == 0 {
                assert!(start.elapsed() < Duration::from_secs(10), "a never granted");
                std::thread::sleep(Duration::from_millis(1));
            }
            go.send(()).unwrap();
            let y_read = done.recv().unwrap();
            assert!(y_read.is_ok(), "y's read: {y_read:?}");
        },
        || {
            let mut buf = [0u8; 8];
            b.read(file, 0, &mut buf)
        },
    );
    y.join().unwrap();
    assert!(
        read.is_ok(),
        "x's read after {:?}: {read:?}; free slots: a {} b {}; cached pages {} of {}",
        started.elapsed(),
        a.host().inspect().free_slots(),
        b.host().inspect().free_slots(),
        b.cached_pages(),
        b.capacity_pages()
    );
}
