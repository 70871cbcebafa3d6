//! A page cache's pod file, from the moment it appears at its path, is a page cache's:
//! another process that opens it then and joins is not refused. Built with the `chaos`
//! feature only (`cargo test -p megalon-pagecache --features chaos --test published`).
#![cfg(feature = "chaos")]

mod common;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use common::{options, simulated, tmpfs_dir};
use megalon_core::chaos::{self, Point};
use megalon_core::{Backing, Join, Pod};
use megalon_pagecache::{PageCache, PageCacheConfig};

/// The creator stopped the moment its pod file takes the path (`PodPublished`), and
/// there another opener of the path joins it, as a process started beside the creator
/// that waits for the file to appear would. Before `create_pod` wrote its header through
/// `Pod::create_with`, the pod took its path without the page cache's magic, and that
/// join was refused with `NotAPageCachePod`.
#[test]
fn a_page_cache_pod_joined_the_moment_it_appears_is_a_page_cache() {
    let path: PathBuf = tmpfs_dir().join(format!(
        "megalon-pagecache-published-{}",
        std::process::id()
    ));
    let _cleanup = tempfile::TempPath::try_from_path(&path).expect("an absolute path");
    let config = PageCacheConfig::new(4).max_hosts(2);
    let joined = Rc::new(RefCell::new(None));
    let pod = chaos::with_hook(
        {
            let (path, joined) = (path.clone(), Rc::clone(&joined));
            move |at| {
                if at != Point::PodPublished {
                    return;
                }
                let opened = Pod::open(Backing::file(&path)).expect("opening the published pod");
                let outcome = PageCache::join(
                    &std::sync::Arc::new(opened),
                    Join::AnyFree,
                    options(simulated(1)),
                )
                .map(|cache| cache.host().id())
                .map_err(|e| e.to_string());
                *joined.borrow_mut() = Some(outcome);
            }
        },
        || PageCache::create_pod(&config, Backing::file(&path)).expect("creating the pod"),
    );
    let joined = joined
        .take()
        .expect("the creator's pod took its path (PodPublished ran)");
    assert!(
        joined.is_ok(),
        "a join the moment the pod appeared was refused: {joined:?}"
    );
    // And the creator's own join after it.
    PageCache::join(&pod, Join::AnyFree, options(simulated(2))).expect("the creator joins");
}
