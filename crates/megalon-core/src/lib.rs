//! The megalon protocol: sharing objects between hosts over partly-coherent CXL memory.
//!
//! Hosts in a CXL pod map one memory device. Hardware keeps caches coherent only for a
//! small region (the SCR); the large rest (the LNR) can hold stale lines in any host's
//! cache. This crate lays a pod out ([`Layout`]), creates or opens it on a backing
//! ([`Pod`]: heap, a tmpfs file shared by processes, a DAX device, NUMA-bound), lets hosts
//! join it ([`Host`]), and gives every host one interface to LNR ([`Memory`]) with two
//! implementations: the real hardware with its cache-maintenance instructions, and a
//! simulated non-coherent cache that serves stale lines, so that a missing flush shows up
//! in tests on coherent machines.
//!
//! ```
//! use std::sync::Arc;
//! use megalon_core::{Backing, Host, Join, MemoryKind, Pod, PodConfig};
//!
//! let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap())?);
//! let writer = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(1))?;
//! let reader = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(2))?;
//! let slot = pod.layout().slot_offset(0);
//!
//! let mut seen = [0u8; 8];
//! reader.memory().read(slot, &mut seen); // the reader caches the line
//! writer.memory().write(slot, b"version2");
//! writer.memory().write_back(slot, 8); // the writer's line reaches memory
//! writer.memory().fence();
//!
//! reader.memory().read(slot, &mut seen);
//! assert_eq!(&seen, &[0; 8]); // stale: the reader's cache still has the old line
//! reader.memory().flush(slot, 8);
//! reader.memory().fence();
//! reader.memory().read(slot, &mut seen);
//! assert_eq!(&seen, b"version2"); // fresh after invalidation
//! # Ok::<(), megalon_core::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod arch;
mod backoff;
#[cfg(feature = "chaos")]
pub mod chaos;
#[cfg(not(feature = "chaos"))]
mod chaos;
mod config;
mod counters;
mod error;
pub mod event;
mod header;
mod host;
mod host_table;
mod ids;
mod layout;
pub mod limits;
mod log;
#[cfg(all(test, megalon_loom))]
mod loom_models;
pub mod memory;
pub mod mutants;
mod pod;
mod record;
mod replica;
pub mod rpc;
mod slot;
mod sync;
mod words;

pub use config::{Coherence, PodConfig};
pub use counters::EventCounts;
pub use error::{Error, Region, Result};
pub use event::{Event, OwnedEvent};
pub use header::{fnv1a64, PodHeader};
pub use host::{
    BackgroundErrors, Done, Host, HostOptions, HostStats, Inspect, Join, LoggedEvent, ReadTicket,
    RecordCensus, ReleaseHook, ReleaseReason, Releasing, WriteTicket,
};
pub use host_table::HostInfo;
pub use ids::HostId;
pub use layout::{Layout, ScrUsage};
pub use limits::*;
pub use memory::{Memory, MemoryKind, SimulatedConfig, SimulatedStats};
pub use pod::{numa_nodes, Backing, BackingKind, Pod};
pub use replica::{IndexEntry, Outcome, ReplicatedLock};
pub use slot::slot_claim_batch;
