//! The megalon protocol: sharing objects between hosts over partly-coherent CXL memory.
//!
//! Hosts in a CXL pod map one memory device. Hardware keeps caches coherent only for a
//! small region (the SCR); the large rest (the LNR) can hold stale lines in any host's
//! cache. This crate lays a pod out ([`Layout`]), creates or opens it on a backing
//! ([`Pod`]: heap, a tmpfs file shared by processes, a DAX device, NUMA-bound), and lets
//! hosts join it ([`Host`]) and share objects in LNR through the object protocol: a read
//! never returns a stale or torn value, on any memory, whatever the other hosts do.
//!
//! # The four calls on one object
//!
//! ```
//! use std::sync::Arc;
//! use megalon_core::{Backing, Host, Join, MemoryKind, Pod, PodConfig};
//!
//! let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap())?);
//! // Two hosts, each with its own simulated non-coherent cache of LNR.
//! let a = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(1))?;
//! let b = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(2))?;
//! a.create(b"k", b"version 1")?;
//!
//! // A write: the object's coherence record is locked until write_end.
//! let write = b.write_start(b"k")?;
//! write.write(0, b"version 2")?;
//! b.write_end(write)?;
//!
//! // A read: copy under a ticket, and trust the copy only if read_end says so.
//! let mut copy = [0u8; 9];
//! loop {
//!     let read = a.read_start(b"k")?;
//!     read.read(0, &mut copy)?;
//!     if a.read_end(read)? {
//!         break;
//!     }
//! }
//! assert_eq!(&copy, b"version 2");
//!
//! // The safe calls do the same, retried within the host's bound.
//! a.write(b"k", b"version 3")?;
//! b.read(b"k", &mut copy)?;
//! assert_eq!(&copy, b"version 3");
//! # Ok::<(), megalon_core::Error>(())
//! ```
//!
//! # Rules a user must know
//!
//! - **Touch objects through the tickets** ([`ReadTicket::read`], [`WriteTicket::write`])
//!   or the safe calls: they stay inside the object and answer
//!   [`Error::OutsideObject`] otherwise. [`Memory`] is the raw, unchecked layer under
//!   them (loads, stores, flushes at any offset), for tools and tests.
//! - **Copies are only valid once `read_end` says so**: the bytes of a read that must
//!   start over may be torn.
//! - **A write always ends**: dropping a [`WriteTicket`] (a panic included) ends the
//!   write as [`Host::write_end`] would; a failed call never leaves an object locked.
//! - **Every wait on another host is bounded** ([`HostOptions::wait_limit`]); past it, the
//!   error names whom it waited for.
//! - **A host whose replay panicked is done**: a panic while its replica changes (a bug,
//!   or no memory for a growing index) leaves the replica poisoned, and every later call
//!   on that host panics rather than answer from a half-changed index. Drop the host
//!   (its drop leaves it as a dead host would) and join again: the others recover it,
//!   with any write it held, once its lease runs out. A panic in the middle of a log
//!   append (a bug) leaves the calls it carried without their outcomes: the host goes on,
//!   and leaves as a dead host does when it is dropped, for its recovery to settle the
//!   records those calls held (in a pod with undo images).
//! - **Pods are shared by hosts that join the same file** ([`Backing::file`]); a heap pod
//!   lives in one process. [`Pod::create`] builds a new pod beside the path and puts it
//!   there whole, and refuses a pod that a process has open or live hosts use
//!   ([`Error::PodInUse`]), a pod this build cannot open, and anything but a regular file.
//!
//! # When hosts die
//!
//! **What survives: any host's death, at any point** (a `kill -9`, a crash, a host on
//! another machine that stops answering; on one machine, a process that exists is alive,
//! so a stopped one holds up what waits for it, within the wait limit). The other hosts
//! go on: the dead host's unpublished log positions are
//! filled, its hold on the log's head is released, every replica learns of the death at
//! one log position (a `HostDead` event: objects it held in its DRAM go back to their
//! CXL slots, as they were when they moved there), and its host id is free again. In a
//! pod with [`CrashSafety::Undo`] (the default for a pod in a file or on a device) every
//! write keeps an undo image of its object before its first byte changes, so an object
//! whose writer died mid-write is restored to its last complete value and unlocked: no
//! read ever sees the torn bytes. Without undo images ([`CrashSafety::Off`], the default
//! for a heap pod, whose hosts die together) such an object stays locked.
//!
//! **How long the others wait.** A host on the same machine is found dead as soon as its
//! process is gone (within a quarter of the lease, by each host's pump). A host on another
//! machine is dead once its heartbeat has not moved for [`PodConfig::lease_ms`] (2 s by
//! default); a host that was only paused that long finds itself declared dead and its
//! calls answer [`Error::HostDeclaredDead`] (recovery condemns it first thing, and from
//! its next check on it changes nothing in the pod: what it held is its recovery's). A lock whose holder is alive is never taken
//! from it. What the lease cannot rule out: a host paused longer than the lease between
//! one of its checks and the store that follows (a CAS, a write of bytes) makes that one
//! store late; it learns of its death at its next check. Meanwhile reads and writes of
//! what the dead host held wait within their bound ([`HostOptions::wait_limit`]), and go
//! on as soon as its recovery has let go of it (an object in the dead host's DRAM: once
//! the `HostDead` puts it back in CXL).
//!
//! **Joining at any time.** A host may join after the log has recycled its first
//! entries: a live host streams it its index through the pod's join area
//! ([`PodConfig::join_area_bytes`]), and it replays from there. A restarted process
//! joins as a new host, or under its old id once that is free. When no host is alive to
//! recover the dead ones (all died, the host table full of them), a joiner that finds
//! every holder dead takes one dead host's row over and recovers it itself before its
//! join completes; only while the log has recycled nothing (past that no replica holds
//! the index, and the join answers [`Error::JoinNotServed`]).
//!
//! **What does not survive:** the loss of the CXL device itself, and the pod across a
//! power cycle (the SCR's words are not persistent). Writes made in a dead host's DRAM
//! (local partitions) since its objects moved there are lost with it (with undo images,
//! one that died while copying an object back to CXL has it put back as it moved there;
//! without them, such an object may be left with part of each value). The AllLog
//! baseline keeps no undo images: an object whose replicated lock a dead host held stays
//! locked.
//!
//! # The record width at run time
//!
//! A pod created with [`PodConfig::record_width_switch`] may change the width of its
//! coherence records while hosts run: [`Host::switch_record_width`] moves every host to
//! the new width at one log position (every object loses its record and is read-shared
//! until its next write), and [`HostOptions::width_policy`] lets the hosts' pumps do it
//! themselves, narrower while writes keep allocating records into a full array, wider
//! while they keep wrapping counters. Writes, deletes and record allocations wait while
//! a switch drains the records (reads do not), each paying one SCR load for it; pods
//! whose width is fixed (the default) pay nothing. In a pod with undo images a switch
//! also waits until no lock or claim is announced (a dead host's, until its recovery
//! settles it). Pods with local partitions cannot switch yet
//! ([`Error::NotWithWidthSwitch`]).
//!
//! # Where things are
//!
//! [`Pod`], [`PodConfig`] and [`Layout`] for the pod; [`Host`] and [`HostOptions`] for a
//! participant; [`limits`] for every fixed size and version; [`memory`] for the two
//! implementations of LNR access (hardware with its cache-maintenance instructions, and a
//! simulated non-coherent cache that serves stale lines, so that a missing flush shows in
//! tests on coherent machines); [`event`] for what the shared log holds; [`rpc`] for the
//! host-to-host request rings; [`inspect`] for what tests, benches and figures look at
//! ([`Host::inspect`]). With the `chaos` feature, `chaos` stretches protocol windows and
//! injects faults (tests only).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// loom builds compile the protocol for the models alone: no pump thread, no reclaimer, no
// joiner's snapshot, so what only those call is dead there (and only there).
#![cfg_attr(megalon_loom, allow(dead_code))]

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
#[cfg(feature = "mutants")]
pub mod mutants;
#[cfg(not(feature = "mutants"))]
mod mutants;
mod pod;
#[cfg(not(megalon_loom))]
mod pod_file;
mod record;
mod replica;
pub mod rpc;
mod slot;
mod sync;
mod words;

pub use backoff::Backoff;
pub use config::{Coherence, CrashSafety, PodConfig};
pub use counters::EventCounts;
pub use error::{Error, JoinNotServedCause, Region, Result};
pub use host::{
    Done, Host, HostOptions, Join, ReadTicket, ReleaseHook, ReleaseReason, Releasing, WidthPolicy,
    WriteTicket,
};
pub use ids::HostId;
pub use layout::{Layout, ScrUsage};
pub use memory::{CxlModel, Memory, MemoryKind, SimulatedConfig};
pub use pod::{numa_nodes, Backing, BackingKind, Pod};
pub use record::RecordShape;
pub use replica::IndexEntry;

/// What tests, benches and figures inspect: a host's state ([`Host::inspect`]), the host
/// table, the pod's header, what replay answered. Nothing here is needed to share data.
pub mod inspect {
    pub use crate::header::{fnv1a64, PodHeader};
    pub use crate::host::{
        crash, pretend_row_elsewhere, BackgroundErrors, HostStats, Inspect, LoggedEvent,
        RecordCensus,
    };
    pub use crate::host_table::HostInfo;
    pub use crate::memory::SimulatedStats;
    pub use crate::replica::{Outcome, ReplicatedLock};
    pub use crate::slot::slot_claim_batch;
}
