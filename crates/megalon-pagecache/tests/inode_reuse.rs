//! A file removed and another created in its place: ext4 and xfs give the new file the
//! inode number the old one had, at once. The pod still holds the old file's pages
//! (a closed file's pages stay in the pod), keyed by that number alone.

use std::os::unix::fs::MetadataExt;

use megalon_core::{Backing, Join};
use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions};

/// The new file reads its own bytes, not the cached pages of the removed file whose
/// inode number it got (review `layers`, 2026-11-30).
#[test]
fn a_new_file_on_a_reused_inode_number_reads_its_own_bytes() {
    // On the target directory's file system (ext4 here; tmpfs numbers inodes afresh).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pod =
        PageCache::create_pod(&PageCacheConfig::new(8).max_hosts(1), Backing::heap()).unwrap();
    let cache = PageCache::join(&pod, Join::AnyFree, PageCacheOptions::new()).unwrap();

    let old = dir.path().join("old");
    std::fs::write(&old, vec![1u8; 4096]).unwrap();
    let old_inode = std::fs::metadata(&old).unwrap().ino();
    let file = cache.open(&old).unwrap();
    let mut buf = [0u8; 16];
    cache.read(file, 0, &mut buf).unwrap();
    assert_eq!(buf, [1u8; 16]);
    cache.close(file).unwrap(); // its pages stay in the pod
    std::fs::remove_file(&old).unwrap();

    let mut reused = None;
    for i in 0..16 {
        let new = dir.path().join(format!("new{i}"));
        std::fs::write(&new, vec![2u8; 4096]).unwrap();
        if std::fs::metadata(&new).unwrap().ino() == old_inode {
            reused = Some(new);
            break;
        }
    }
    let Some(new) = reused else {
        eprintln!("skipped: this file system did not give the inode number again");
        return;
    };
    let file = cache.open(&new).unwrap();
    cache.read(file, 0, &mut buf).unwrap();
    assert_eq!(
        buf, [2u8; 16],
        "the new file read the removed file's cached bytes"
    );
}
