//! `fsync` makes writes durable: a child process (this test binary re-running itself)
//! writes a data file through two page-cache hosts on a pod file on tmpfs, fsyncs it from
//! one host, prints that fsync returned and sleeps; the parent kills it with SIGKILL right
//! then and checks, with plain `std::fs`, that the file holds every fsync'ed byte, then
//! reads it back through a new page cache on a new pod.
//!
//! The child's hosts run no background writer and the pod holds every page, so only
//! `fsync` can have put the writes in the file (a SIGKILL does not lose what the kernel
//! holds, so this checks that fsync wrote every dirty page back, including pages the
//! other host dirtied). The child never outlives its bound: it exits after [`WAIT_BOUND`]
//! if nobody killed it, and the parent gives up on it after the same bound.

#![cfg(target_os = "linux")]

mod common;

use std::io::Write;
use std::path::PathBuf;

use common::{
    data_file, heap_pod, join, on_disk, options, original_byte, tmpfs_dir, ChildProcess, PAGE,
    WAIT_BOUND,
};
use megalon_core::{Backing, Join, MemoryKind};
use megalon_pagecache::{PageCache, PageCacheConfig};

/// The pod file the child creates; absent in a normal test run.
const POD_ENV: &str = "MEGALON_PAGECACHE_DURABILITY_POD";
/// The data file the child writes.
const DATA_ENV: &str = "MEGALON_PAGECACHE_DURABILITY_DATA";
/// The test the child runs.
const CHILD_TEST: &str = "child_writes_fsyncs_and_waits_to_be_killed";
/// What the child prints once fsync returned.
const FSYNC_RETURNED: &str = "FSYNC RETURNED";

const PAGES: usize = 6;
const FILE_LEN: usize = PAGES * PAGE - 123;

/// The writes the child makes: `(host, offset, bytes)`, spanning pages, from both hosts.
fn writes() -> Vec<(usize, usize, Vec<u8>)> {
    let run =
        |seed: u8, len: usize| -> Vec<u8> { (0..len).map(|i| seed ^ (i % 253) as u8).collect() };
    vec![
        (0, 0, run(0x11, 100)),
        (1, PAGE - 50, run(0x22, 3 * PAGE)),
        (0, 2 * PAGE + 7, run(0x33, 10)),
        (1, FILE_LEN - 40, run(0x44, 40)),
        (0, 5 * PAGE - 1, run(0x55, 2)),
    ]
}

/// The file after every write.
fn expected() -> Vec<u8> {
    let mut model: Vec<u8> = (0..FILE_LEN).map(original_byte).collect();
    for (_, offset, bytes) in writes() {
        model[offset..offset + bytes.len()].copy_from_slice(&bytes);
    }
    model
}

fn pod_config() -> PageCacheConfig {
    PageCacheConfig::new(PAGES as u64 + 2)
        .max_hosts(2)
        .log_capacity_entries(256)
}

/// The child: does nothing unless the parent set its environment.
#[test]
fn child_writes_fsyncs_and_waits_to_be_killed() {
    let (Some(pod_path), Some(data_path)) = (std::env::var_os(POD_ENV), std::env::var_os(DATA_ENV))
    else {
        return;
    };
    let pod = PageCache::create_pod(&pod_config(), Backing::file(PathBuf::from(pod_path))).unwrap();
    let hosts = [
        PageCache::join(&pod, Join::As(0), options(MemoryKind::Hardware)).unwrap(),
        PageCache::join(&pod, Join::As(1), options(MemoryKind::simulated(9))).unwrap(),
    ];
    let files: Vec<_> = hosts.iter().map(|h| h.open(&data_path).unwrap()).collect();
    for (host, offset, bytes) in writes() {
        hosts[host]
            .write(files[host], offset as u64, &bytes)
            .unwrap();
    }
    assert!(hosts[0].dirty_pages() > 0);
    hosts[0].fsync(files[0]).unwrap();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{FSYNC_RETURNED}").unwrap();
    stdout.flush().unwrap();
    // Wait to be killed; never longer than the parent waits.
    std::thread::sleep(WAIT_BOUND);
    panic!("nobody killed the child within {WAIT_BOUND:?}");
}

#[test]
fn fsynced_writes_survive_a_sigkill_of_the_writer() {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let data = data_file(FILE_LEN);
    let pod_path = tmpfs_dir().join(format!(
        "megalon-pagecache-durability-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _cleanup = tempfile::TempPath::try_from_path(&pod_path).expect("an absolute path");

    let mut child = ChildProcess::spawn(
        CHILD_TEST,
        &[
            (POD_ENV, pod_path.as_os_str()),
            (DATA_ENV, data.path().as_os_str()),
        ],
    );
    child.wait_for_line(FSYNC_RETURNED);
    child.kill();

    let model = expected();
    let disk = on_disk(data.path());
    assert_eq!(
        disk.len(),
        FILE_LEN,
        "the cache never changes a file's length"
    );
    if let Some(first) = (0..FILE_LEN).find(|&i| disk[i] != model[i]) {
        panic!(
            "byte {first} (page {}) is {:#04x} on disk, {:#04x} was fsync'ed",
            first / PAGE,
            disk[first],
            model[first]
        );
    }

    // Read back through a new cache on a new pod (a heap one, smaller than the file).
    let pod = heap_pod(&PageCacheConfig::new(2).max_hosts(1));
    let cache = join(&pod, options(MemoryKind::simulated(10)));
    let file = cache.open(data.path()).unwrap();
    let mut buf = vec![0u8; FILE_LEN + 100];
    assert_eq!(cache.read(file, 0, &mut buf).unwrap(), FILE_LEN);
    assert!(
        buf[..FILE_LEN] == model[..],
        "read back through a new cache"
    );
}
