//! Bad input answers typed errors, never a panic, and changes nothing: writes past a
//! file's end, handles of files not open on the host, missing files, pods that are not
//! page caches, configurations out of their limits.

mod common;

use common::{data_file, heap_pod, join, on_disk, options, original_byte, PAGE};
use megalon_core::{Backing, Join, MemoryKind, Pod, PodConfig};
use megalon_pagecache::{
    Error, PageCache, PageCacheConfig, MAX_ADMISSIONS_PER_HOST, MAX_ADMISSION_LOCKS,
};

#[test]
fn writes_past_the_end_are_refused_whole() {
    let len = 2 * PAGE - 10;
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(1));
    let data = data_file(len);
    let cache = join(&pod, options(MemoryKind::Hardware));
    let file = cache.open(data.path()).unwrap();
    assert_eq!(cache.file_len(file).unwrap(), len as u64);

    for (offset, bytes) in [(len as u64 - 4, 5), (len as u64 + 1, 0), (u64::MAX, 1)] {
        match cache.write(file, offset, &vec![0xee; bytes]) {
            Err(Error::WritePastEnd {
                path,
                offset: at,
                len_bytes,
                file_len_bytes,
            }) => {
                assert_eq!(path, data.path());
                assert_eq!(
                    (at, len_bytes, file_len_bytes),
                    (offset, bytes as u64, len as u64)
                );
            }
            other => panic!("write of {bytes} at {offset}: {other:?}"),
        }
    }
    // Up to the last byte is fine; nothing of the refused writes landed anywhere.
    cache.write(file, len as u64 - 4, b"last").unwrap();
    cache.write(file, len as u64, b"").unwrap();
    let mut buf = vec![0u8; 2 * PAGE];
    assert_eq!(cache.read(file, 0, &mut buf).unwrap(), len);
    assert_eq!(&buf[len - 4..len], b"last");
    assert!(buf[..len - 4]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == original_byte(i)));
    assert_eq!(
        buf[len..],
        vec![0u8; 2 * PAGE - len],
        "untouched past the end"
    );
    // Reads at or past the end read nothing; one across it stops there.
    assert_eq!(cache.read(file, len as u64, &mut buf).unwrap(), 0);
    assert_eq!(cache.read(file, u64::MAX, &mut buf).unwrap(), 0);
    assert_eq!(cache.read(file, len as u64 - 2, &mut buf).unwrap(), 2);
    // The page's tail past the end is never written to the file.
    cache.fsync(file).unwrap();
    assert_eq!(on_disk(data.path()).len(), len);
}

#[test]
fn handles_of_files_not_open_here_are_unknown() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(2));
    let data = data_file(PAGE);
    let a = join(&pod, options(MemoryKind::Hardware));
    let b = join(&pod, options(MemoryKind::Hardware));
    let file = a.open(data.path()).unwrap();
    assert_eq!(
        a.open(data.path()).unwrap(),
        file,
        "opening twice: one handle"
    );
    let unknown = |result: Result<(), Error>| match result {
        Err(Error::UnknownFile { file: named }) => assert_eq!(named, file),
        other => panic!("expected UnknownFile, got {other:?}"),
    };
    // b never opened it.
    unknown(b.read(file, 0, &mut [0u8; 8]).map(drop));
    unknown(b.write(file, 0, b"x"));
    unknown(b.fsync(file));
    unknown(b.evict_page(file, 0).map(drop));
    unknown(b.file_len(file).map(drop));
    unknown(b.close(file));
    // a closed it.
    a.write(file, 0, b"closing").unwrap();
    a.close(file).unwrap();
    assert_eq!(
        &on_disk(data.path())[..7],
        b"closing",
        "close wrote it back"
    );
    unknown(a.read(file, 0, &mut [0u8; 8]).map(drop));
    unknown(a.write(file, 0, b"x"));
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(1));
    let cache = join(&pod, options(MemoryKind::Hardware));
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    match cache.open(&missing) {
        Err(Error::Io { path, source, .. }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn a_pod_that_is_not_a_page_cache_is_refused() {
    let plain = std::sync::Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).unwrap());
    let result = PageCache::join(&plain, Join::AnyFree, options(MemoryKind::Hardware));
    assert!(
        matches!(result, Err(Error::NotAPageCachePod { .. })),
        "{result:?}"
    );
    // Sized right (its own pod configuration) but never formatted: no magic.
    let config = PageCacheConfig::new(4).pod_config().unwrap();
    let unformatted = std::sync::Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let result = PageCache::join(&unformatted, Join::AnyFree, options(MemoryKind::Hardware));
    assert!(
        matches!(result, Err(Error::NotAPageCachePod { .. })),
        "{result:?}"
    );
    // Formatted, with a header word out of its range (the admissions per host, the
    // fourth): refused with the word named, before any of it is used to find the rest.
    for bad in [0, MAX_ADMISSIONS_PER_HOST + 1, u64::MAX] {
        let pod = heap_pod(&PageCacheConfig::new(4));
        let word = pod.scr_u64(pod.layout().app_scr_offset + 24);
        assert_eq!(word.load(std::sync::atomic::Ordering::SeqCst), 16);
        word.store(bad, std::sync::atomic::Ordering::SeqCst);
        let result = PageCache::join(&pod, Join::AnyFree, options(MemoryKind::Hardware));
        assert!(
            matches!(
                result,
                Err(Error::NotAPageCachePod { reason }) if reason.contains("admissions per host")
            ),
            "{bad}: {result:?}"
        );
    }
    // A host id past the pod's hosts: the core's error, wrapped.
    let pod = heap_pod(&PageCacheConfig::new(4).max_hosts(1));
    let result = PageCache::join(&pod, Join::As(3), options(MemoryKind::Hardware));
    assert!(
        matches!(
            result,
            Err(Error::Core(megalon_core::Error::HostOutOfRange {
                host: 3,
                ..
            }))
        ),
        "{result:?}"
    );
}

#[test]
fn configurations_out_of_their_limits_are_named() {
    let bad = [
        (PageCacheConfig::new(0), "cache_pages"),
        (
            PageCacheConfig::new(4).coherence_records(0),
            "coherence_records",
        ),
        (
            PageCacheConfig::new(4).admission_locks(0),
            "admission_locks",
        ),
        (
            PageCacheConfig::new(4).admission_locks(MAX_ADMISSION_LOCKS + 1),
            "admission_locks",
        ),
        (
            PageCacheConfig::new(4).admissions_per_host(0),
            "admissions_per_host",
        ),
        (
            PageCacheConfig::new(4).admissions_per_host(MAX_ADMISSIONS_PER_HOST + 1),
            "admissions_per_host",
        ),
        (PageCacheConfig::new(4).max_hosts(0), "max_hosts"),
        (PageCacheConfig::new(4).max_hosts(65), "max_hosts"),
        (
            PageCacheConfig::new(4).log_capacity_entries(1),
            "log_capacity_entries",
        ),
        // Its bytes overflowed the pod's sizing (a panic) before it had a limit.
        (
            PageCacheConfig::new(4).log_capacity_entries(u64::MAX),
            "log_capacity_entries",
        ),
    ];
    for (config, parameter) in bad {
        match PageCache::create_pod(&config, Backing::heap()) {
            Err(Error::BadConfig {
                parameter: named, ..
            }) => assert_eq!(named, parameter),
            other => panic!("{config:?}: {other:?}"),
        }
    }
}
