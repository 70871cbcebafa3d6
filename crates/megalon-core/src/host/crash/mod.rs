//! Hosts that die: the lease and the process check that tell a dead host, the recovery a
//! live host runs for it, and what a writer keeps so that recovery can restore what it
//! was writing.
//!
//! **Telling a dead host.** Every host's pump bumps its heartbeat in the host table. A
//! host on this machine is dead as soon as its process is gone (its pid no longer names
//! the process that joined); a host on another machine is dead once its heartbeat has not
//! moved for the pod's lease (`PodConfig::lease_ms`), by the watcher's clock. Each host's
//! pump watches the others, a few times per lease.
//!
//! **Recovery** (one live host at a time: the pod's recovery word names it, and its life,
//! so that a recoverer that died is taken over, and one that came back under its id is
//! not mistaken for the one that died):
//! 0. Its life is condemned in its row: a host only paused past its lease learns at its
//!    next check that it is dead (before it writes a log entry or a create's bytes into a
//!    slot, takes a lock, or changes a record word or an announce), and from then on leaves all it held to recovery
//!    (`left_to_recovery`: it keeps every announce, stops its heartbeat, and keeps its
//!    row when dropped, so that a recovery stopped half-way is begun again; its
//!    DRAM-only work, such as its slot pool, is moot).
//! 1. The dead host's reservation (the log positions it announced before its CAS on
//!    `tail` and had not published) is filled with `Skip` entries, so that replay goes on.
//!    A position that another live host also announces is that host's: recovery waits.
//!    Its `ltail` is released, so that it no longer holds the log's head back.
//! 2. A `HostDead` event: every replica applies it at one position (the dead host holds
//!    no slots and no object in its DRAM from there on: its free slots go back to the
//!    pod, its objects to their CXL slots), and if the "dead" host still
//!    runs (a lease that ran out on a host that was only paused) it stops there.
//! 3. With undo images: every record lock it announced and still holds is restored:
//!    a write whose undo image was complete (its own, or another dead host's of the same
//!    locked word: only a holder's announce is ever "undo ready") gets its object's last
//!    complete value back and its counter moved on by 2 (a reader that copied torn bytes
//!    fails `read_end`); any other lock (a write that changed nothing yet or had
//!    finished, a delete, a deallocation, a move) is unlocked with its counter moved on
//!    by 2, or its record freed if it has no object any more. A `Recovered` event makes
//!    every host drop its cached lines of the object.
//! 4. Its row is freed (a CAS from its pid): its `ltail` no longer holds the log's head,
//!    and its id can be joined again.
//!
//! **Announces and undo images** (pods with `CrashSafety::Undo`). Before the CAS that
//! locks a record for a write, the writer stores which record and which locked word it
//! is about to set in one of its announce words (the host table, SCR). After the lock,
//! and before the ticket lets a byte change, it copies the object into its undo image
//! (LNR), writes it back, fences, and marks the announce "undo ready". Once its new
//! bytes are written back it lets go of the image (clears "undo ready"), then unlocks,
//! then clears the announce. Every lock of a record is announced so (a write's, a
//! delete's, a deallocation's, a move's, an allocation's claim). A locked word does not
//! name its holder (at 2 bits every lock of a record is the same word), so recovery
//! takes one for the dead host's only while no live host announces the record and none
//! can lock it anew: it stores its intent (the record under recovery, beside the
//! recovery word), then reads the announces, then the word; a host about to lock stores
//! its announce, then reads the intent, and defers to it. A word locked by a live host
//! is never taken. The dead are told by id, pid and life (an id recovered in the same
//! round may be joined again). One recovery at a time per host: a nested one (a stalled
//! replay filling a dead host's holes) fills holes only and leaves the recovery word to
//! the outer one. A recoverer paused past its lease and taken over finds it out before
//! it acts (its own death in the log, the word or the record under recovery another's).
//!
//! **Where each part is.** `watch.rs` tells the dead (the heartbeat, the watch each pump
//! keeps); `recover.rs` is the recovery, steps 0 to 4 above, in that order; `holds.rs` is
//! the writer's side (announces, undo images, the checks that tell a host its locks are
//! its recovery's now); `rescue.rs` is a joiner's recovery of a pod whose hosts all died.

use std::collections::HashMap;
use std::time::Instant;

use crate::host_table;
use crate::ids::HostId;

mod holds;
mod recover;
mod rescue;
mod watch;

pub(super) use holds::Hold;

/// The announce word's "undo image complete" bit.
const UNDO_READY: u64 = 1 << 63;
/// The record field of a move back's announce (no record has this id: the layout keeps
/// record ids below it); its word is the slot the move back writes.
const MOVE_BACK: u32 = (1 << 30) - 2;

/// What one host's pump knows of the others' leases.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// When the pump looks at the host table next.
    next: Option<Instant>,
    /// When a stalled replay looks at it next.
    next_fill: Option<Instant>,
    /// Per host: its holder, life, the heartbeat last seen and when it was first seen.
    seen: HashMap<HostId, (u32, u64, u64, Instant)>,
}

/// A dead host, as the watcher found it, with every host it found dead in the same
/// round (each by its id, pid and life: an id recovered meanwhile may be joined again).
#[derive(Clone, Debug)]
struct Dead {
    host: HostId,
    pid: u32,
    joins: u64,
    others_dead: Vec<(HostId, u32, u64)>,
    /// The dead life's row is this host's: it took the row over as the id's next life
    /// (no live host was left to recover it, `host::rescue`) and recovers the dead life
    /// before its join completes. The row's announces are still the dead life's (the
    /// rescuer takes no lock until its rescue is done), and what tells that the dead life
    /// is not recovered yet is the rescuer's own hold of the row.
    rescue: bool,
    /// In a rescue: the positions an earlier life of the id announced in the row, read
    /// once the row was taken over (no earlier life announces after that: its row check
    /// fails), before the rescuer's own first announce replaces them.
    reserved: std::ops::Range<u64>,
}

impl Dead {
    /// Whether `host` is alive as far as this watch knows: its row is held, and not by
    /// a life found dead (a host that joined under a dead id since is alive).
    fn live(&self, pod: &crate::pod::Pod, host: HostId) -> bool {
        if self.rescue && host == self.host {
            return false;
        }
        host_table::holder(pod, host).is_some_and(|(pid, joins)| {
            (host, pid, joins) != (self.host, self.pid, self.joins)
                && !self.others_dead.contains(&(host, pid, joins))
        })
    }

    /// The other hosts found dead in this round that are still dead and not recovered:
    /// their rows are still held by the lives found dead.
    fn still_dead_others<'a>(
        &'a self,
        pod: &'a crate::pod::Pod,
    ) -> impl Iterator<Item = HostId> + 'a {
        self.others_dead
            .iter()
            .filter(move |&&(host, pid, joins)| {
                host != self.host && host_table::holder(pod, host) == Some((pid, joins))
            })
            .map(|&(host, ..)| host)
    }
}

/// How much of a recovery to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Only fill the dead host's reservation and release its `ltail` (from a stalled
    /// replay or append).
    Reservation,
    /// Everything.
    Whole,
}

fn encode_announce(record: u32, raw_word: u32) -> u64 {
    debug_assert!(record < (1 << 30) - 1, "checked by the layout");
    (u64::from(record) + 1) << 32 | u64::from(raw_word)
}

/// An announce's record, locked word, and whether its undo image is complete. (Which
/// kind of lock it is does not matter: recovery settles a lock by whether an undo image
/// is ready and whether the record has an object.)
fn decode_announce(announce: u64) -> Option<(u32, u32, bool)> {
    let record = (announce & !UNDO_READY) >> 32;
    (record != 0).then(|| {
        (
            (record - 1) as u32,
            announce as u32,
            announce & UNDO_READY != 0,
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::host_table;
    use crate::{Backing, Host, HostOptions, Join, Pod, PodConfig};

    /// A process that has claimed a free row and not yet said who it is (`note_holder`:
    /// its machine and start time) is not taken for dead by what the row's previous
    /// holder left there; one that dies in that window is still found dead, by its lease.
    #[test]
    fn a_claim_not_yet_counted_is_judged_by_its_lease() {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(256)
            .max_hosts(4)
            .lease_ms(1000);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let pumped = || HostOptions::new().pump_interval(Some(Duration::from_millis(1)));
        let a = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
        let b = Host::join(&pod, Join::AnyFree, pumped()).unwrap();
        let id = b.shared.id;
        // b leaves; its row said this process, of this machine.
        drop(b);
        // A process started later than this one claims the row, and is paused before
        // its notes (`note_holder`): its claim by hand, the pid half of the row's holder
        // word.
        std::thread::sleep(Duration::from_millis(20));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let holder = pod.scr_u64(pod.layout().host_entry_offset(id));
        let free = holder.load(Ordering::SeqCst);
        assert_eq!(free as u32, 0, "free");
        let claimed = u64::from(pid) | ((free >> 32) + 1) << 32;
        holder
            .compare_exchange(free, claimed, Ordering::SeqCst, Ordering::SeqCst)
            .unwrap();
        // Two of a's watches (every quarter lease), within one lease: the claim stands.
        std::thread::sleep(Duration::from_millis(600));
        let held = host_table::holder(&pod, id).map(|(holder, _)| holder);
        let recovered = a.inspect().stats().hosts_recovered;
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(held, Some(pid), "a live claimer's row was freed");
        assert_eq!(recovered, 0);
        // Dead in the window: its lease runs out, and a recovers it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while host_table::holder(&pod, id).is_some() {
            assert!(
                Instant::now() < deadline,
                "a claimer that died was never recovered"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(a.inspect().stats().hosts_recovered, 1);
    }
}
