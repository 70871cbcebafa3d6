//! A write across pages that fails at a later page (its admission's append refused, as a
//! full log refuses it) after an earlier page took its bytes: the caller must learn what
//! reached the cache. (Review `upper`.) Built with the `chaos` feature only (`cargo test
//! -p megalon-pagecache --features chaos --test partial_write`).
#![cfg(feature = "chaos")]

mod common;

use common::{data_file, heap_pod, join, on_disk, options, original_byte, simulated, PAGE};
use megalon_core::chaos::{self, Fault, Point};
use megalon_pagecache::{Error, PageCacheConfig};

#[test]
fn a_write_that_fails_at_its_second_page_says_what_it_wrote() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let data = data_file(2 * PAGE);
    let a = join(&pod, options(simulated(3)));
    let b = join(&pod, options(simulated(4)));
    let file = a.open(data.path()).unwrap();
    let file_b = b.open(data.path()).unwrap();
    // Page 0 cached and written once (it has its record): the write below appends
    // nothing for it; page 1 is not cached, its admission appends a create.
    a.write(file, 0, b"x").unwrap();
    let at = PAGE - 4;
    let written = chaos::with_hook(
        |point| {
            if point == Point::CreateBeforeEvent {
                chaos::fail_next_appends(&[Fault::Refuse]);
            }
        },
        || a.write(file, at as u64, b"ABCDEFGH"),
    );
    chaos::clear_forced_faults();
    let mut seen = [0u8; 8];
    b.read(file_b, at as u64, &mut seen).unwrap();
    match written {
        Ok(()) => panic!("the refused append was not met"),
        // What the caller is told reached the cache, and nothing more, did.
        Err(Error::WriteIncomplete { written_bytes, .. }) => {
            assert_eq!(written_bytes, 4);
            assert_eq!(&seen[..4], b"ABCD");
            let rest: Vec<u8> = (at + 4..at + 8).map(original_byte).collect();
            assert_eq!(&seen[4..], &rest[..]);
        }
        Err(error) => {
            // An error that says nothing of what was written must mean nothing was.
            let before: Vec<u8> = (at..at + 8).map(original_byte).collect();
            assert_eq!(
                seen.to_vec(),
                before,
                "the write answered {error:?}, yet part of it is in the cache"
            );
        }
    }
    // The cache goes on: the write again succeeds whole and reaches the file.
    a.write(file, at as u64, b"ABCDEFGH").unwrap();
    a.fsync(file).unwrap();
    assert_eq!(&on_disk(data.path())[at..at + 8], b"ABCDEFGH");
}

/// Found by a review (2026-12-01): a write across pages whose host is declared dead
/// (paused past its lease) in its second page's write, after that page's bytes reached
/// memory (`WriteBeforeUnlock`, its undo image let go: what recovery keeps), answered
/// `WriteIncomplete` naming only the first page's bytes, and the docs said the rest were
/// not in the cache: they were (recovery kept them). The docs now say so of
/// `HostDeclaredDead`: the page it stopped at is whole or absent, nothing after it is.
#[test]
fn a_write_whose_host_is_declared_dead_at_its_second_page_says_what_it_wrote() {
    use std::sync::mpsc::channel;
    use std::sync::Mutex;

    // In a file: the pod keeps undo images (a heap pod's recovery leaves a dead
    // writer's record to it, and its write goes through).
    let dir = tempfile::tempdir_in(common::tmpfs_dir()).unwrap();
    let pod = megalon_pagecache::PageCache::create_pod(
        &PageCacheConfig::new(4).max_hosts(3),
        megalon_core::Backing::file(dir.path().join("pod")),
    )
    .unwrap();
    let data = data_file(2 * PAGE);
    let a: &'static megalon_pagecache::PageCache =
        Box::leak(Box::new(join(&pod, options(simulated(3)))));
    let b = join(&pod, options(simulated(4)));
    let file = a.open(data.path()).unwrap();
    let file_b = b.open(data.path()).unwrap();
    // Both pages cached and written once: the write below only writes.
    a.write(file, 0, b"x").unwrap();
    a.write(file, PAGE as u64, b"y").unwrap();
    let a_id = a.host().id();
    let at = PAGE - 4;
    let (paused, is_paused) = channel();
    let (go, resume) = channel::<()>();
    let call = std::thread::spawn(move || {
        let (paused, resume) = (Mutex::new(paused), Mutex::new(resume));
        let seen = std::cell::Cell::new(0);
        chaos::with_hook(
            move |point| {
                if point == Point::WriteBeforeUnlock {
                    seen.set(seen.get() + 1);
                    if seen.get() == 2 {
                        a.host().inspect().freeze();
                        paused.lock().unwrap().send(()).unwrap();
                        resume.lock().unwrap().recv().unwrap();
                    }
                }
            },
            || a.write(file, at as u64, b"ABCDEFGH"),
        )
    });
    is_paused.recv().unwrap();
    common::wait_recovered(&pod, a_id);
    go.send(()).unwrap();
    let written = call.join().unwrap();
    let mut seen = [0u8; 8];
    b.read(file_b, at as u64, &mut seen).unwrap();
    let Err(Error::WriteIncomplete {
        written_bytes,
        source,
    }) = &written
    else {
        panic!("a was declared dead in its second page: {written:?}");
    };
    assert_eq!(*written_bytes, 4);
    assert!(matches!(
        **source,
        Error::Core(megalon_core::Error::HostDeclaredDead { .. })
    ));
    // The first page's part, as told; the second page's whole (its recovery kept it),
    // which only `HostDeclaredDead` allows.
    assert_eq!(&seen, b"ABCDEFGH");
}
