//! A file-system page cache shared by the hosts of a CXL pod, on megalon's object
//! protocol (the MEGALON paper's section 5, DESIGN section 9).
//!
//! Each page of a real file, `(inode, page)`, is one object of the pod: its 4 KiB and a
//! trailer line that counts how many of them are the file's or a write's. Every host
//! that joins the pod sees the same cached pages: a page one host read from disk is a hit
//! for the others, and a page one host wrote is read by the others at its newest version
//! (the object protocol keeps their non-coherent caches right). What it does:
//!
//! - **Admission = create**: a miss reads the page from its file (`pread`) and creates it.
//!   An admission lock per page (a word in the SCR that pages hash onto) keeps an
//!   admission from reading the file while another host writes the page back and evicts
//!   it, which would cache stale bytes (see the `admission` module).
//! - **Eviction = delete**, by a CLOCK hand over the slots: access counts and each slot's
//!   owner key live in the application LNR (the counts are sloppy hints), the hand
//!   position in the SCR. The cache holds at most its configured capacity; the pod has
//!   slack slots on top, so creates never run the pod out of slots.
//! - **Dirty bits in the SCR**, one per coherence record: a write sets its page's bit
//!   before `write_end`. A background writer (and `fsync`, synchronously) writes dirty
//!   pages back under `write_start`/`write_end`. The release hook writes a dirty page back
//!   before it loses its record, so read-shared pages are always clean and an evicted page
//!   reaches its file first.
//! - **`fsync`** makes every write that completed before it durable.
//!
//! Trade-offs and limits: files keep the length they have when opened (a write past the
//! end is an error; reads stop at the end; a page is written back as far as the file's
//! bytes when it was admitted and the writes into it reach, never further, so a host that
//! opened a file shorter than another did writes that host's writes back, and bytes the
//! file got outside the cache past a cached page's are left alone; a host that opened it
//! longer reads those bytes from the file); files are named by inode, so they must live on
//! one file system, seen by every host through one kernel (hosts of one machine, or a file
//! system whose `fsync` covers every host's writes); a dirty page can only be written back
//! by a host that has its file open; failures are fail-stop (a killed host's admission
//! locks wait, and its admission in progress counts against the capacity, until the core
//! has recovered it; then the next admission takes the locks over, and a page it created
//! but never named for the clock hand is named by the next sweep that finds no victim).
//!
//! ```
//! use std::io::Write;
//! use megalon_core::{Backing, Join, MemoryKind};
//! use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions};
//!
//! let mut data = tempfile::NamedTempFile::new()?;
//! data.write_all(&[7u8; 3 * 4096])?;
//!
//! let pod = PageCache::create_pod(&PageCacheConfig::new(2).max_hosts(2), Backing::heap())?;
//! let options = || PageCacheOptions::new().memory(MemoryKind::simulated(1));
//! let a = PageCache::join(&pod, Join::AnyFree, options())?;
//! let b = PageCache::join(&pod, Join::AnyFree, options())?;
//! let file_a = a.open(data.path())?;
//! let file_b = b.open(data.path())?;
//!
//! a.write(file_a, 4090, b"across two pages")?; // admits pages 0 and 1
//! let mut buf = [0u8; 16];
//! assert_eq!(b.read(file_b, 4090, &mut buf)?, 16); // hits: a's bytes, in the pod
//! assert_eq!(&buf, b"across two pages");
//!
//! b.read(file_b, 2 * 4096, &mut buf)?; // the cache holds 2 pages: one is evicted,
//! assert_eq!(a.cached_pages(), 2); //     written back first if dirty
//! a.fsync(file_a)?;
//! let on_disk = std::fs::read(data.path())?;
//! assert_eq!(&on_disk[4090..4106], b"across two pages");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// `deny`, not `forbid`: `fence` allows it for its one `fcntl`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod admission;
mod admission_lock;
mod cache;
mod clock;
mod config;
mod dirty;
mod error;
mod fence;
mod file;
mod layout;
mod page;
mod stats;

pub use cache::{PageCache, MAX_ADMISSION_ROUNDS};
pub use clock::MAX_ACCESS_COUNT;
pub use config::{
    slot_count_for, PageCacheConfig, PageCacheOptions, MAX_ADMISSIONS_PER_HOST,
    MAX_ADMISSION_LOCKS, MAX_CACHE_PAGES,
};
pub use error::{Error, Result};
pub use page::{FileId, FILE_PAGE_BYTES, PAGE_KEY_BYTES};
pub use stats::PageCacheStats;
