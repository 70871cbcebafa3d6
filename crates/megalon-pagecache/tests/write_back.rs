//! Dirty pages are never lost: a page that loses its coherence record (reclaim,
//! `make_read_shared`) or leaves the cache (eviction) reaches its file first; a host that
//! cannot write a page back refuses to let it go and says why; the background writer and
//! `fsync` clean pages other hosts dirtied.

mod common;

use std::time::{Duration, Instant};

use common::{data_file, heap_pod, join, on_disk, options, original_byte, simulated, PAGE};
use megalon_core::{HostOptions, MemoryKind};
use megalon_pagecache::{Error, FileId, PageCache, PageCacheConfig, PageCacheOptions};
use tempfile::NamedTempFile;

/// Page `page`'s bytes after [`write_pattern`].
fn pattern(page: usize) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (page * 31 + i * 7) as u8 | 0x80)
        .collect()
}

fn expected_page(disk: &[u8], page: usize) -> &[u8] {
    &disk[page * PAGE..(page + 1) * PAGE]
}

/// A new pod of `pod_pages` pages for two hosts; hosts a and b on simulated caches seeded
/// `seed` and `seed + 1`; and a data file of `file_pages` pages both have open, as
/// `(file, a, b, a's handle, b's handle)`.
fn two_hosts(
    pod_pages: u64,
    file_pages: usize,
    seed: u64,
) -> (NamedTempFile, PageCache, PageCache, FileId, FileId) {
    let pod = heap_pod(&PageCacheConfig::new(pod_pages).max_hosts(2));
    let data = data_file(file_pages * PAGE);
    let a = join(&pod, options(simulated(seed)));
    let b = join(&pod, options(simulated(seed + 1)));
    let file_a = a.open(data.path()).unwrap();
    let file_b = b.open(data.path()).unwrap();
    (data, a, b, file_a, file_b)
}

#[test]
fn dirty_pages_survive_record_reclaim() {
    const PAGES: usize = 40;
    // 16 coherence records (one line of 32-bit records) for 40 written pages: writes
    // must take records from other pages, which turns those read-shared.
    let config = PageCacheConfig::new(64)
        .max_hosts(2)
        .coherence_records(16)
        .log_capacity_entries(1024);
    let pod = heap_pod(&config);
    assert_eq!(pod.layout().record_count, 16);
    let data = data_file(PAGES * PAGE);
    let writer = join(&pod, options(simulated(1)));
    let reader = join(&pod, options(simulated(2)));
    let file = writer.open(data.path()).unwrap();
    let reader_file = reader.open(data.path()).unwrap();
    for page in 0..PAGES {
        writer
            .write(file, (page * PAGE) as u64, &pattern(page))
            .unwrap();
    }

    // Every page that is read-shared now lost its record after its write: its file has
    // the write, though nobody wrote pages back on purpose (no writer, no fsync). (The
    // pumps' reclaimers keep running: look first, then read the file.)
    let read_shared: Vec<usize> = (0..PAGES)
        .filter(|&page| {
            let key = file.page_key(page as u64);
            let entry = writer.host().lookup(&key).unwrap().expect("cached");
            entry.record.is_none()
        })
        .collect();
    let disk = on_disk(data.path());
    for &page in &read_shared {
        assert!(
            expected_page(&disk, page) == pattern(page),
            "page {page} turned read-shared without reaching its file"
        );
    }
    let read_shared = read_shared.len();
    assert!(
        read_shared >= PAGES - 16,
        "only {read_shared} pages lost their record"
    );
    // Both hosts' pumps reclaim (down to the watermark), and each host's hook wrote
    // back what it released.
    let (w, r) = (writer.stats(), reader.stats());
    assert!(
        w.write_backs_release + r.write_backs_release >= read_shared as u64,
        "{w:?} {r:?}"
    );

    // A page made read-shared by hand: clean, in its file, and still reads right. The
    // pumps' reclaimers may have taken any page's record since the look above (the last
    // page's, 1 run in 159 with three copies of this binary at once): the last page that
    // still has one, and gives it up here.
    let last = (0..PAGES)
        .rev()
        .find(|&page| {
            let key = file.page_key(page as u64);
            writer.host().make_read_shared(&key).unwrap()
        })
        .expect("some page kept its record");
    assert_eq!(expected_page(&on_disk(data.path()), last), pattern(last));

    // Every page reads back right from the other host, and nothing is dirty but pages
    // that still have a record.
    for page in 0..PAGES {
        let mut buf = vec![0u8; PAGE];
        reader
            .read(reader_file, (page * PAGE) as u64, &mut buf)
            .unwrap();
        assert_eq!(buf, pattern(page), "page {page}");
    }
    let (in_use, _) = writer.host().inspect().records_in_use();
    assert!(writer.dirty_pages() <= in_use);
    assert!(writer.take_error().is_none());
}

#[test]
fn evicting_a_dirty_page_writes_it_back_first() {
    let (data, a, b, file_a, file_b) = two_hosts(2, 4, 3);

    // By hand: a dirties page 0 (across its end into page 1), b evicts it.
    a.write(file_a, (PAGE - 8) as u64, b"0123456789abcdef")
        .unwrap();
    assert!(b.evict_page(file_b, 0).unwrap());
    assert!(!b.is_cached(file_b, 0).unwrap());
    assert!(!b.evict_page(file_b, 0).unwrap(), "not cached any more");
    let disk = on_disk(data.path());
    assert_eq!(&disk[PAGE - 8..PAGE], b"01234567");
    assert_eq!(b.stats().write_backs_release, 1);
    assert_eq!(b.stats().evictions, 1);
    // Admitted again from the file.
    let mut buf = [0u8; 16];
    assert_eq!(a.read(file_a, (PAGE - 8) as u64, &mut buf).unwrap(), 16);
    assert_eq!(&buf, b"0123456789abcdef");

    // By the clock hand: the cache holds two pages, both dirty; a read of a third evicts
    // one of them, which reaches the file.
    a.write(file_a, 0, &[0xd0; 16]).unwrap();
    a.write(file_a, PAGE as u64, &[0xd1; 16]).unwrap();
    assert_eq!(a.cached_pages(), 2);
    b.read(file_b, 3 * PAGE as u64, &mut buf).unwrap();
    assert_eq!(buf[0], original_byte(3 * PAGE));
    assert_eq!(a.cached_pages(), 2);
    let disk = on_disk(data.path());
    let evicted: Vec<u64> = (0..2)
        .filter(|&page| !a.is_cached(file_a, page).unwrap())
        .collect();
    assert_eq!(evicted.len(), 1, "one of the dirty pages made room");
    let page = evicted[0] as usize;
    assert_eq!(disk[page * PAGE..page * PAGE + 16], [0xd0 + page as u8; 16]);
    assert!(a.take_error().is_none() && b.take_error().is_none());
}

#[test]
fn a_host_without_the_file_refuses_to_release_a_dirty_page() {
    let config = PageCacheConfig::new(1).max_hosts(2);
    let pod = heap_pod(&config);
    let data = data_file(2 * PAGE);
    let a = join(&pod, options(MemoryKind::Hardware));
    // b never opens the file: it cannot write a's dirty page back.
    let b = join(
        &pod,
        options(MemoryKind::Hardware).wait_limit(Duration::from_millis(200)),
    );
    let file = a.open(data.path()).unwrap();
    a.write(file, 0, b"dirty").unwrap();

    match b.evict_one() {
        Err(Error::FileNotOpen { inode, page, host }) => {
            assert_eq!((inode, page, host), (file.inode(), 0, b.host().id()));
        }
        other => panic!("expected FileNotOpen, got {other:?}"),
    }
    assert!(a.is_cached(file, 0).unwrap(), "the page stays cached");
    assert_eq!(a.dirty_pages(), 1, "and dirty");
    assert!(b.stats().releases_refused >= 1);
    assert_eq!(&on_disk(data.path())[..5], &[1, 2, 3, 4, 5]);

    // The host that has the file open evicts it, writing it back.
    assert!(a.evict_one().unwrap());
    assert_eq!(&on_disk(data.path())[..5], b"dirty");
    assert_eq!(a.dirty_pages(), 0);
    assert!(!a.evict_one().unwrap(), "nothing cached");
}

#[test]
fn the_background_writer_cleans_pages_any_host_dirtied() {
    let config = PageCacheConfig::new(8).max_hosts(2);
    let pod = heap_pod(&config);
    let data = data_file(4 * PAGE);
    let quiet = join(&pod, options(simulated(5)));
    let cleaner = join(
        &pod,
        PageCacheOptions::new()
            .host(HostOptions::new().memory(simulated(6)))
            .writer_interval(Some(Duration::from_millis(2))),
    );
    let file = quiet.open(data.path()).unwrap();
    cleaner.open(data.path()).unwrap();
    for page in 0..4u64 {
        quiet
            .write(file, page * PAGE as u64 + 100, b"late")
            .unwrap();
    }
    let deadline = Instant::now() + common::WAIT_BOUND;
    while quiet.dirty_pages() > 0 {
        assert!(Instant::now() < deadline, "the writer left pages dirty");
        std::thread::sleep(Duration::from_millis(2));
    }
    let disk = on_disk(data.path());
    for page in 0..4 {
        assert_eq!(&disk[page * PAGE + 100..page * PAGE + 104], b"late");
    }
    assert!(cleaner.stats().write_backs_background >= 4);
    assert_eq!(quiet.stats().write_backs_background, 0);
    assert!(cleaner.take_error().is_none());
}

#[test]
fn fsync_on_one_host_writes_back_what_another_dirtied() {
    let (data, a, b, file_a, file_b) = two_hosts(8, 3, 7);
    let other_data = data_file(PAGE);
    let other = a.open(other_data.path()).unwrap();
    b.open(other_data.path()).unwrap();
    a.write(file_a, 10, b"from a").unwrap();
    b.write(file_b, 2 * PAGE as u64, b"from b").unwrap();
    a.write(other, 0, b"another file").unwrap();

    a.fsync(file_a).unwrap();
    let disk = on_disk(data.path());
    assert_eq!(&disk[10..16], b"from a");
    assert_eq!(&disk[2 * PAGE..2 * PAGE + 6], b"from b");
    assert_eq!(a.stats().write_backs_fsync, 2);
    // Another file's dirty page is not this fsync's business.
    assert_eq!(a.dirty_pages(), 1);
    assert_eq!(on_disk(other_data.path())[0], original_byte(0));
    b.close(file_b).unwrap();
    assert!(matches!(
        b.read(file_b, 0, &mut [0u8; 4]),
        Err(Error::UnknownFile { .. })
    ));
}

/// Hosts that opened the file at different lengths (it grew in between): b writes a page
/// past a's length, and a writes it back (its eviction here; its background writer would
/// too). a wrote none of its bytes (the page lay past the length a opened the file at),
/// marked it clean and let it go: b's write was lost, `fsync` or not. A page written back
/// is now cut to the file's length as it is, not to the writer-back's.
#[test]
fn a_page_past_the_length_one_host_opened_the_file_at_is_written_back_whole() {
    use std::io::Write;
    let pod = heap_pod(&PageCacheConfig::new(8).max_hosts(2));
    let mut data = data_file(PAGE);
    let unpumped = |seed| {
        PageCacheOptions::new()
            .host(
                HostOptions::new()
                    .memory(simulated(seed))
                    .pump_interval(None),
            )
            .writer_interval(None)
    };
    let a = join(&pod, unpumped(1));
    let b = join(&pod, unpumped(2));
    let file_a = a.open(data.path()).unwrap();
    data.as_file_mut().write_all(&vec![7u8; PAGE]).unwrap();
    let file_b = b.open(data.path()).unwrap();
    b.write(file_b, PAGE as u64, b"BBBB").unwrap();
    assert!(a.evict_page(file_a, 1).unwrap(), "a evicts page 1");
    b.fsync(file_b).unwrap();
    let disk = on_disk(data.path());
    assert_eq!(disk.len(), 2 * PAGE);
    assert_eq!(&disk[PAGE..PAGE + 4], b"BBBB", "b's write reached the file");
    assert_eq!(
        &disk[PAGE + 4..],
        &vec![7u8; PAGE - 4][..],
        "the rest of page 1 kept"
    );
}

/// A page admitted while the file ended inside it holds zeros past that end; the file
/// then grows outside the cache. Writing the page back must not put those zeros over
/// the bytes the file got: a page is written back only as far as its trailer says the
/// file's bytes and the writes reach. (Written up to the file's length as it was at the
/// write-back, the page zeroed them.)
#[test]
fn a_page_written_back_leaves_bytes_the_file_got_since_its_admission() {
    use std::io::Write;
    let pod = heap_pod(&PageCacheConfig::new(8).max_hosts(2));
    let mut data = data_file(PAGE + 100);
    let a = join(&pod, options(simulated(40)));
    let file = a.open(data.path()).unwrap();
    a.write(file, PAGE as u64, b"AAAA").unwrap();
    data.as_file_mut()
        .write_all(&vec![7u8; PAGE - 100])
        .unwrap();
    a.fsync(file).unwrap();
    let disk = on_disk(data.path());
    assert_eq!(disk.len(), 2 * PAGE);
    assert_eq!(&disk[PAGE..PAGE + 4], b"AAAA");
    let original: Vec<u8> = (PAGE + 4..PAGE + 100).map(original_byte).collect();
    assert_eq!(&disk[PAGE + 4..PAGE + 100], &original[..]);
    assert_eq!(
        &disk[PAGE + 100..],
        &vec![7u8; PAGE - 100][..],
        "the file's new bytes kept"
    );
}

/// A write past the file's bytes of a page (by a host that opened the file longer than
/// the page's admitter saw it) raises the page's trailer: the write-back carries it.
#[test]
fn a_write_past_the_bytes_a_page_was_admitted_with_is_written_back() {
    use std::io::Write;
    let pod = heap_pod(&PageCacheConfig::new(8).max_hosts(2));
    let mut data = data_file(PAGE + 100);
    let a = join(&pod, options(simulated(42)));
    let b = join(&pod, options(simulated(43)));
    let file_a = a.open(data.path()).unwrap();
    let mut buf = [0u8; 4];
    a.read(file_a, PAGE as u64, &mut buf).unwrap(); // admits page 1, 100 bytes of the file's
    data.as_file_mut()
        .write_all(&vec![7u8; PAGE - 100])
        .unwrap();
    let file_b = b.open(data.path()).unwrap();
    b.write(file_b, (PAGE + 200) as u64, b"BBBB").unwrap();
    a.fsync(file_a).unwrap();
    let disk = on_disk(data.path());
    assert_eq!(
        &disk[PAGE + 200..PAGE + 204],
        b"BBBB",
        "b's write reached the file"
    );
    // The bytes between the page's admitted end and the write are the file's, not the
    // cache's zeros (a review found them zeroed: the trailer counted the gap).
    assert_eq!(
        &disk[PAGE + 100..PAGE + 200],
        &[7u8; 100][..],
        "the gap kept"
    );
    assert_eq!(&disk[PAGE + 204..], &vec![7u8; PAGE - 204][..]);
}

/// A read past the bytes a page was admitted with, by a host that opened the file longer
/// (it grew outside the cache since the admission), returns the file's bytes, not the
/// zeros the page holds there; and once a write of that host raises the page's count,
/// its bytes (the cache's). (A review found the zeros returned.)
#[test]
fn a_read_past_the_bytes_a_page_was_admitted_with_returns_the_files() {
    use std::io::Write;
    let pod = heap_pod(&PageCacheConfig::new(8).max_hosts(2));
    let mut data = data_file(100);
    let a = join(&pod, options(simulated(44)));
    let b = join(&pod, options(simulated(45)));
    let file_a = a.open(data.path()).unwrap();
    let mut buf = [0u8; 10];
    a.read(file_a, 0, &mut buf).unwrap(); // admits page 0, 100 bytes of the file's
    data.as_file_mut().write_all(&[b'G'; 400]).unwrap();
    data.as_file_mut().flush().unwrap();
    let file_b = b.open(data.path()).unwrap();
    assert_eq!(b.file_len(file_b).unwrap(), 500);
    assert_eq!(b.read(file_b, 300, &mut buf).unwrap(), 10);
    assert_eq!(buf, [b'G'; 10], "the file's bytes past the page's");
    // Across the page's count: the admitted bytes, then the file's.
    let mut across = [0u8; 20];
    b.read(file_b, 90, &mut across).unwrap();
    let expected: Vec<u8> = (90..100).map(original_byte).chain([b'G'; 10]).collect();
    assert_eq!(&across[..], &expected[..]);
    assert!(
        b.is_cached(file_b, 0).unwrap(),
        "read through the cached page"
    );
    // A write past the count raises it; the write's bytes are read from the cache.
    b.write(file_b, 400, b"WWWW").unwrap();
    b.read(file_b, 398, &mut buf[..8]).unwrap();
    assert_eq!(&buf[..8], b"GGWWWWGG");
}
