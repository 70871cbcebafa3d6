//! megalon: share data between hosts over partly-coherent CXL memory.
//!
//! This facade re-exports the parts: [`core`] holds the protocol (pod layout, memory
//! access, and, as they land, the log, the replica, records and the object API).
//! See the README for the two commands to start with.

#![forbid(unsafe_code)]

pub use megalon_core as core;
pub use megalon_core::{
    Backing, Error, Host, Join, Layout, Memory, MemoryKind, Pod, PodConfig, ScrUsage,
};
