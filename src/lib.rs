//! megalon: share data between hosts over partly-coherent CXL memory.
//!
//! Hosts in a CXL pod map one memory device. The hardware keeps caches coherent only for a
//! small region (the SCR); the large rest (the LNR) can hold stale lines in any host's
//! cache. megalon keeps objects in LNR and makes them safe and fast to share: a read never
//! returns a stale or torn value. Today a pod can be a file on tmpfs shared by processes
//! (or a heap shared by threads emulating hosts, or a NUMA node); tomorrow a `/dev/dax`
//! device.
//!
//! This crate gathers the parts: [`core`] holds the protocol (pods, hosts, the object
//! calls), [`kv`] a linearizable key-value store on top of it, [`pagecache`] a page cache of
//! real files shared by the hosts. The names most programs need are at the top level.
//!
//! # Two hosts sharing a pod file
//!
//! Each host maps the same file (two processes would each run one half of this):
//!
//! ```
//! use std::sync::Arc;
//! use megalon::{Backing, Host, Join, Pod, PodConfig};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("pod");
//! let config = PodConfig::new().scr_bytes(64 << 10).lnr_bytes(16 << 20).slot_size_bytes(256);
//!
//! // The first process creates the pod; the second opens it (checking its header).
//! let pod_a = Arc::new(Pod::create(&config, Backing::file(&path))?);
//! let pod_b = Arc::new(Pod::open(Backing::file(&path))?);
//! let a = Host::join(&pod_a, Join::AnyFree, megalon::HostOptions::new())?;
//! let b = Host::join(&pod_b, Join::AnyFree, megalon::HostOptions::new())?;
//!
//! a.create(b"greeting", b"hello from a")?;
//! let mut buf = [0u8; 12];
//! b.read(b"greeting", &mut buf)?;
//! assert_eq!(&buf, b"hello from a");
//!
//! // Several objects in one call: each read checked on its own, their waits on memory
//! // overlapped; an answer for each.
//! a.create(b"farewell", b"bye from a")?;
//! let (mut first, mut second) = ([0u8; 5], [0u8; 10]);
//! let answers = b.read_many(&mut [
//!     (&b"greeting"[..], &mut first[..]),
//!     (&b"farewell"[..], &mut second[..]),
//!     (&b"nobody"[..], &mut [0u8; 1][..]),
//! ]);
//! assert!(answers[0].is_ok() && answers[1].is_ok());
//! assert!(matches!(answers[2], Err(megalon::Error::UnknownKey)));
//! assert_eq!((&first, &second), (b"hello", b"bye from a"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The KV store across them
//!
//! ```
//! use std::sync::Arc;
//! use megalon::{Backing, Host, HostOptions, Join, Megalon, Pod, PodConfig, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("pod");
//! let config = PodConfig::new().scr_bytes(64 << 10).lnr_bytes(16 << 20).slot_size_bytes(256);
//! let pod_a = Arc::new(Pod::create(&config, Backing::file(&path))?);
//! let pod_b = Arc::new(Pod::open(Backing::file(&path))?);
//!
//! // One store per process, each over the hosts that process runs.
//! let host_a = Arc::new(Host::join(&pod_a, Join::AnyFree, HostOptions::new())?);
//! let host_b = Arc::new(Host::join(&pod_b, Join::AnyFree, HostOptions::new())?);
//! let store_a = Store::new(Megalon::new(pod_a, vec![host_a]));
//! let store_b = Store::new(Megalon::new(pod_b, vec![host_b]));
//!
//! let mut on_a = store_a.handle(0)?;
//! let mut on_b = store_b.handle(0)?;
//! on_a.put(b"user:1", b"ada")?;
//! assert_eq!(on_b.get(b"user:1")?.as_deref(), Some(&b"ada"[..]));
//! let both = on_b.get_many(&[&b"user:1"[..], &b"user:2"[..]]);
//! assert_eq!(both[0].as_ref().ok(), Some(&Some(b"ada".to_vec())));
//! assert_eq!(both[1].as_ref().ok(), Some(&None));
//! on_b.delete(b"user:1")?;
//! assert_eq!(on_a.get(b"user:1")?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The four calls on one object
//!
//! `read_start`/`read_end` and `write_start`/`write_end` are the object protocol itself;
//! the safe calls (`read`, `read_many`, `write`, `update`) are built on them:
//!
//! ```
//! use std::sync::Arc;
//! use megalon::{Backing, Host, Join, MemoryKind, Pod, PodConfig};
//!
//! let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap())?);
//! // Simulated non-coherent caches: a missing invalidation would show here.
//! let a = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(1))?;
//! let b = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(2))?;
//! a.create(b"k", b"version 1")?;
//!
//! let write = b.write_start(b"k")?; // the object's record is locked
//! write.write(0, b"version 2")?; // bounded: a write past the object is an error
//! b.write_end(write)?;
//!
//! let mut copy = [0u8; 9];
//! loop {
//!     let read = a.read_start(b"k")?;
//!     read.read(0, &mut copy)?;
//!     if a.read_end(read)? {
//!         break; // the copy is one whole version
//!     }
//! }
//! assert_eq!(&copy, b"version 2");
//! # Ok::<(), megalon::Error>(())
//! ```
//!
//! Rules a user must know are on [`core`]'s front page; how a page cache shares files is
//! on [`pagecache`]'s.

#![forbid(unsafe_code)]

pub use megalon_core as core;
pub use megalon_core::{
    Backing, Coherence, Done, Error, Host, HostId, HostOptions, Join, Layout, Memory, MemoryKind,
    Pod, PodConfig, ReadTicket, RecordShape, ScrUsage, WidthPolicy, WriteTicket,
};
pub use megalon_kv as kv;
pub use megalon_kv::{KvHandle, Megalon, Store};
pub use megalon_pagecache as pagecache;
pub use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions};
