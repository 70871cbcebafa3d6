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
mod combiner;
mod config;
mod counters;
mod error;
pub mod event;
mod header;
mod host;
mod layout;
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

pub use config::{
    Coherence, PodConfig, DEFAULT_PARTITION_ACCESSES, DEFAULT_RPC_RING_ENTRIES, LINE_BYTES,
    LOG_ENTRY_HEADER_BYTES, MAX_HOSTS_LIMIT, MAX_KEY_BYTES_LIMIT, MAX_SLOT_SIZE_BYTES,
    MIN_LOG_CAPACITY_ENTRIES, PAGE_BYTES, RECORD_WIDTHS_BITS,
};
pub use counters::EventCounts;
pub use error::{Error, Region, Result};
pub use event::{Event, OwnedEvent, LOG_FORMAT_VERSION};
pub use header::{fnv1a64, PodHeader, HEADER_BYTES, LAYOUT_VERSION, MAGIC};
pub use host::{
    BackgroundErrors, Done, Host, HostId, HostInfo, HostOptions, HostStats, Inspect, Join,
    LoggedEvent, ReadTicket, RecordCensus, ReleaseHook, ReleaseReason, Releasing, WriteTicket,
};
pub use layout::{Layout, ScrUsage, ACCESSOR_BYTES, HEADER_REGION_BYTES, MAX_RECORDS, MAX_SLOTS};
pub use memory::{Memory, MemoryKind, SimulatedConfig, SimulatedStats};
pub use pod::{numa_nodes, Backing, BackingKind, Pod};
pub use replica::{IndexEntry, Outcome, ReplicatedLock};
pub use slot::slot_claim_batch;
