//! The host table in SCR: one line per host id, `holder` (0 when free, else the holder's
//! process id, set by the one CAS that claims the id, so a reader never sees a claimed
//! entry without its pid), a heartbeat the holder bumps, and how many times the id has
//! been joined. The log reads it to know whose applied position holds its head back; the
//! host claims and frees its row.

use crate::ids::HostId;
use crate::pod::Pod;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

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

/// Whether a host-table entry is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableState {
    Free,
    Joined,
}

pub(crate) fn table_state(pod: &Pod, host: HostId) -> TableState {
    // SeqCst: `Log::advance_head` orders this load with the log's registration word.
    match entry(pod, host).holder.load(Ordering::SeqCst) {
        FREE => TableState::Free,
        _ => TableState::Joined,
    }
}

/// Claims `host` for this process, or returns the pid of its holder.
pub(crate) fn try_claim(pod: &Pod, host: HostId) -> Result<(), u32> {
    // SeqCst: Acquire pairs with the store in `Host::drop` of the previous holder, and
    // `Log::advance_head` orders its loads of holders with this.
    entry(pod, host)
        .holder
        .compare_exchange(FREE, std::process::id(), Ordering::SeqCst, Ordering::SeqCst)
        .map(drop)
}

impl Pod {
    /// The joined hosts, as the host table shows them now.
    pub fn hosts(&self) -> Vec<HostInfo> {
        (0..self.config().max_hosts)
            .filter_map(|host| {
                let row = entry(self, host);
                // Acquire: pairs with the claiming CAS.
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

/// Bumps host `host`'s heartbeat word; returns the new count.
pub(crate) fn heartbeat(pod: &Pod, host: HostId) -> u64 {
    // Relaxed: the heartbeat only says "alive"; nothing is published with it.
    entry(pod, host).heartbeat.fetch_add(1, Ordering::Relaxed) + 1
}

/// Counts a join of `host` (just after its claim).
pub(crate) fn count_join(pod: &Pod, host: HostId) {
    entry(pod, host).joins.fetch_add(1, Ordering::Relaxed);
}

/// Frees `host`'s row (its holder leaves).
pub(crate) fn release(pod: &Pod, host: HostId) {
    // SeqCst (Release would do for the next holder, whose claiming CAS pairs with it):
    // `Log::advance_head` orders its loads of holders with the log's registration.
    entry(pod, host).holder.store(FREE, Ordering::SeqCst);
}
