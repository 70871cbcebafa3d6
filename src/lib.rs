//! megalon: share data between hosts over partly-coherent CXL memory.
//!
//! This facade re-exports the parts: [`core`] holds the protocol (pod layout, memory
//! access, the shared log, the replicated index, coherence records and the object API);
//! [`kv`] is the linearizable key-value store on top of it; [`pagecache`] is the page
//! cache of file pages shared by the hosts. See the README for the two commands to start
//! with.

#![forbid(unsafe_code)]

pub use megalon_core as core;
pub use megalon_core::{
    Backing, Error, Host, Join, Layout, Memory, MemoryKind, Pod, PodConfig, ScrUsage,
};
pub use megalon_kv as kv;
pub use megalon_pagecache as pagecache;
