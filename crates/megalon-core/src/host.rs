//! Hosts: the host table in SCR, joining as a given id or the first free one, the
//! heartbeat word, leaving.
//!
//! Each entry is one line: `holder` (0 when free, else the holder's process id, set by the
//! one CAS that claims the id, so a reader never sees a claimed entry without its pid), a
//! heartbeat the holder bumps, and how many times the id has been joined. A host is one
//! OS process or a group of threads emulating one; every host has its own view of LNR (its
//! [`Memory`]) and, later, its own replica of the index.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory::{Memory, MemoryKind};
use crate::pod::Pod;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Identifier of a host: its index in the host table, below the pod's `max_hosts`.
pub type HostId = u32;

/// `holder` of a free entry. Process id 0 is the kernel's, never a user process's.
const FREE: u32 = 0;
const HOLDER_OFFSET: u64 = 0;
const HEARTBEAT_OFFSET: u64 = 8;
const JOINS_OFFSET: u64 = 16;

/// One row of the host table, as read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The host's id.
    pub host: HostId,
    /// Process id of the holder.
    pub pid: u32,
    /// The holder's heartbeat count (it carries over from the id's previous holders).
    pub heartbeat: u64,
    /// How many times this id has been joined since the pod was created (counted just
    /// after the claim, so a reader racing a join may see the previous count).
    pub joins: u64,
}

struct HostEntry<'a> {
    holder: &'a AtomicU32,
    heartbeat: &'a AtomicU64,
    joins: &'a AtomicU64,
}

fn entry(pod: &Pod, host: HostId) -> HostEntry<'_> {
    let base = pod.layout().host_entry_offset(host);
    HostEntry {
        holder: pod.scr_u32(base + HOLDER_OFFSET),
        heartbeat: pod.scr_u64(base + HEARTBEAT_OFFSET),
        joins: pod.scr_u64(base + JOINS_OFFSET),
    }
}

/// Which host id to join as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Exactly this id; an error if it is taken or past the maximum.
    As(HostId),
    /// The lowest free id; an error if the table is full.
    AnyFree,
}

/// A joined host: its id, the pod, and its own view of LNR. Leaves the table on drop.
pub struct Host {
    pod: Arc<Pod>,
    id: HostId,
    memory: Memory,
}

impl Host {
    /// Joins `pod` as `which`, touching LNR through `memory`.
    pub fn join(pod: &Arc<Pod>, which: Join, memory: MemoryKind) -> Result<Host> {
        let max_hosts = pod.config().max_hosts;
        let id = match which {
            Join::As(host) => {
                if host >= max_hosts {
                    return Err(Error::HostOutOfRange { host, max_hosts });
                }
                if let Err(holder_pid) = try_claim(pod, host) {
                    return Err(Error::HostTaken { host, holder_pid });
                }
                host
            }
            Join::AnyFree => (0..max_hosts)
                .find(|host| try_claim(pod, *host).is_ok())
                .ok_or(Error::HostTableFull { max_hosts })?,
        };
        entry(pod, id).joins.fetch_add(1, Ordering::Relaxed);
        Ok(Host {
            pod: Arc::clone(pod),
            id,
            memory: Memory::new(Arc::clone(pod), memory),
        })
    }

    /// This host's id.
    pub fn id(&self) -> HostId {
        self.id
    }

    /// The pod.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// This host's view of LNR.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Bumps this host's heartbeat word; returns the new count.
    pub fn heartbeat(&self) -> u64 {
        // Relaxed: the heartbeat only says "alive"; nothing is published with it.
        entry(&self.pod, self.id)
            .heartbeat
            .fetch_add(1, Ordering::Relaxed)
            + 1
    }

    /// Leaves the host table, freeing the id for another participant.
    pub fn leave(self) {
        drop(self)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the CAS in `try_claim` of the next holder,
        // which then sees this holder's last writes to the row.
        entry(&self.pod, self.id)
            .holder
            .store(FREE, Ordering::Release);
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("id", &self.id)
            .field("memory", &self.memory.kind_name())
            .finish_non_exhaustive()
    }
}

/// Claims `host` for this process, or returns the pid of its holder.
fn try_claim(pod: &Pod, host: HostId) -> Result<(), u32> {
    // AcqRel: Acquire pairs with the Release in `Host::drop` of the previous holder.
    entry(pod, host)
        .holder
        .compare_exchange(
            FREE,
            std::process::id(),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map(drop)
}

impl Pod {
    /// The joined hosts, as the host table shows them now.
    pub fn hosts(&self) -> Vec<HostInfo> {
        (0..self.config().max_hosts)
            .filter_map(|host| {
                let row = entry(self, host);
                // Acquire: pairs with the AcqRel claim.
                let pid = row.holder.load(Ordering::Acquire);
                (pid != FREE).then(|| HostInfo {
                    host,
                    pid,
                    heartbeat: row.heartbeat.load(Ordering::Relaxed),
                    joins: row.joins.load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}
