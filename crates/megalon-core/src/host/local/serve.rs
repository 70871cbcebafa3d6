//! The host-to-host RPC this host serves: other hosts ask it, over its ring, to move an
//! object in its DRAM back to CXL.

use super::{
    failure_detail, MovedBack, BUSY, FAILED, FAILED_OTHER, MISSING, MOVED_BACK, NOT_HERE,
    OP_MOVE_BACK, SERVER_GONE,
};

use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};
use crate::host::Shared;
use crate::rpc::{Response, RingGeometry, Tally};

/// The RPC rings of a pod: one per host.
pub(in crate::host) struct Rpc {
    pub(in crate::host) rings: Vec<RingGeometry>,
    pub(in crate::host) entry_bytes: usize,
}

impl Rpc {
    pub(in crate::host) fn new(layout: &crate::layout::Layout) -> Option<Self> {
        let entries = u64::from(layout.config.rpc_ring_entries);
        if entries == 0 {
            return None;
        }
        let rings = (0..layout.config.max_hosts)
            .map(|host| RingGeometry::of_host(layout, host))
            .collect();
        Some(Self {
            rings,
            entry_bytes: layout.rpc_entry_bytes as usize,
        })
    }
}

impl Tally for ThreadCounters {
    fn scr_atomics(&self, n: u64) {
        self.add(Counter::ScrAtomics, n);
    }

    fn lines_written_back(&self, n: u64) {
        self.add(Counter::LinesWrittenBack, n);
    }

    fn lines_invalidated(&self, n: u64) {
        self.add(Counter::LinesInvalidated, n);
    }
}

impl Shared {
    /// Serves this host's ring if a request waits (two SCR loads, hits when none does): every
    /// read and write of a pod with rings polls, so that a host that needs an object in
    /// this host's DRAM waits for one of its operations, not for its pump's next round.
    #[inline]
    pub(in crate::host) fn poll_rpcs(&self) {
        if self.rpc.is_some() {
            let _ = self.serve_rpcs();
        }
    }

    /// Settles what life `life` of dead host `dead` left in the rings: as a sender, in
    /// every host's ([`RingGeometry::recover_sender`]), and as a server, in its own
    /// ([`RingGeometry::recover_server`]: requests it claimed are answered
    /// `SERVER_GONE`, and their senders look again). `Ok(false)`: `still_recovering` said
    /// no before the server's ring, which is left alone.
    pub(in crate::host) fn recover_rpcs(
        &self,
        dead: crate::ids::HostId,
        life: u64,
        still_recovering: impl FnOnce() -> Result<bool>,
    ) -> Result<bool> {
        if let Some(rpc) = &self.rpc {
            // Its life's sessions, and any earlier life's of the id left by a take-over
            // (`host::rescue`): every life of the id up to `life` is dead.
            let dead_sender = |word: u64| {
                let (host, of) = crate::host_table::session_of(word);
                host == dead && of <= life
            };
            for ring in &rpc.rings {
                ring.recover_senders(&self.pod, dead_sender);
            }
            self.chaos.point(crate::chaos::Point::RecoveryInRpcs);
            // Looked at again after the senders' entries (every ring's): a recoverer
            // paused here past its lease and taken over may find the dead host recovered
            // and its id joined again, the ring served by the next life; a claim of that
            // server's is not the dead one's to answer "gone" (its sender would ask again
            // while the live server moves the object back, and the entry, answered, read
            // and reserved for the next lap, could be the one the server then reads).
            if !crate::mutants::skipped(crate::mutants::Step::RecovererChecksBeforeTheServersRing)
                && !still_recovering()?
            {
                return Ok(false);
            }
            let gone = Response {
                status: SERVER_GONE,
                detail: 0,
            };
            rpc.rings[dead as usize].recover_server(&self.pod, &self.memory, gone);
        }
        Ok(true)
    }

    /// Serves the requests waiting in this host's ring. Returns how many it served. The
    /// look at the ring is not counted here: one that finds nothing reads lines nothing
    /// changed, hits in the coherent cache, as the look at `ctail` that finds nothing new
    /// and HCMeta's idle poll (the CXL model charges what is counted, and must charge
    /// every scheme's polls alike); one that finds a request is counted by the claim,
    /// which loads the same two words again.
    pub(in crate::host) fn serve_rpcs(&self) -> Result<u64> {
        self.serve_rpcs_until(None)
    }

    /// [`Shared::serve_rpcs`], beginning no request past `deadline`: a thread that serves
    /// while it waits for another host's answer (`ask_back`) looks at its own limit
    /// before each handler, so that its call outlasts the limit by one handler at most.
    /// (It served the whole queue first: a call at a limit of 200 ms answered after
    /// 1.25 s, eight move backs later.)
    pub(in crate::host) fn serve_rpcs_until(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Result<u64> {
        let Some(rpc) = &self.rpc else {
            return Ok(0);
        };
        if !self.serving.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(0);
        }
        self.chaos
            .point(crate::chaos::Point::ServeAfterServingCheck);
        let ring = &rpc.rings[self.id as usize];
        if !ring.pending(&self.pod) {
            return Ok(0);
        }
        // A host declared dead serves no more: its recovery answers what it claimed, and
        // the id's next life serves the ring from its head.
        self.holds_its_row()?;
        // One server at a time: another thread of this host is at it.
        let Some(_serving) = self.rpc_server.try_lock() else {
            return Ok(0);
        };
        self.with_counters(|c| {
            let mut buf = vec![0u8; rpc.entry_bytes];
            let mut served = 0;
            let failed = Response {
                status: FAILED,
                detail: 0,
            };
            // Our row is looked at again before each claim: a server paused past its
            // lease in a handler (a move back waiting for the log) and recovered must not
            // claim, when it resumes, requests meant for the id's next life. So is the
            // serving flag: this thread may have been preempted between its look above
            // and the ring's, and a request sent once `set_serving(false)` returned must
            // find nobody (it stores the flag, then takes this lock: under the lock we
            // see its store, or it waits for us).
            while self.holds_its_row().is_ok()
                && self.serving.load(std::sync::atomic::Ordering::Relaxed)
                && deadline.is_none_or(|deadline| std::time::Instant::now() < deadline)
            {
                let Some(claimed) = ring.claim(&self.pod, c) else {
                    break;
                };
                ring.serve(
                    &self.pod,
                    &self.memory,
                    claimed,
                    &mut buf,
                    c,
                    failed,
                    |request, buf| {
                        let (status, detail) = match request.op {
                            OP_MOVE_BACK => {
                                match self.move_back(&buf[request.key.clone()], true, c) {
                                    Ok(MovedBack::Moved) => (MOVED_BACK, 0),
                                    Ok(MovedBack::NotHere) => (NOT_HERE, 0),
                                    Ok(MovedBack::Missing) => (MISSING, 0),
                                    // Declared dead in the move: its recovery hands
                                    // the object back.
                                    Err(Error::HostDeclaredDead { .. }) => (SERVER_GONE, 0),
                                    // A writer of ours has it: asked again.
                                    Err(Error::LocalObjectBusy { .. }) => (BUSY, 0),
                                    Err(error) => (FAILED, failure_detail(&error)),
                                }
                            }
                            _ => (FAILED, FAILED_OTHER),
                        };
                        Response { status, detail }
                    },
                );
                c.add(Counter::RpcsServed, 1);
                served += 1;
            }
            Ok(served)
        })
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};

    /// A served request counts its look at the ring once: the look that finds it and
    /// the claim right after load the same two SCR words, which nothing changed between
    /// them, and the claim after it that finds nothing counts nothing, as a poll that
    /// finds nothing does not. Serving another host's move back of an object counts what
    /// a move back of one alike counts, and the ring's six: the head and the state
    /// loaded, the claim and the head's pass by CAS, the state looked at again before
    /// the answer, its publish. (With the look counted twice: ten; with the claim that
    /// found nothing counted: eight.)
    #[test]
    fn a_served_move_back_counts_the_look_at_the_ring_once() {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(256)
            .max_key_bytes(48)
            .log_capacity_entries(256)
            .max_hosts(2)
            .local_partitions(2);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let options = |seed| {
            HostOptions::new()
                .memory(MemoryKind::simulated(seed))
                .pump_interval(None)
                .wait_limit(Duration::from_secs(30))
        };
        let a = Host::join(&pod, Join::AnyFree, options(1)).unwrap();
        let b = Host::join(&pod, Join::AnyFree, options(2)).unwrap();
        let mut buf = [0u8; 5];
        for key in [&b"asked"[..], b"alike"] {
            a.create(key, b"value").unwrap();
            for _ in 0..2 {
                a.read(key, &mut buf).unwrap();
            }
        }
        a.replay().unwrap();
        assert_eq!(a.inspect().local_objects(), (2, 0), "both in a's DRAM");
        let scr = |host: &Host| host.events().scr_atomics;

        let before = scr(&a);
        let moved = a
            .shared
            .with_counters(|c| a.shared.move_back(b"alike", true, c));
        assert!(matches!(moved, Ok(super::MovedBack::Moved)));
        let move_back = scr(&a) - before;

        let ring = &a.shared.rpc.as_ref().unwrap().rings[a.id() as usize];
        let served = std::thread::scope(|scope| {
            let asker = scope.spawn(|| {
                let mut buf = [0u8; 5];
                b.read(b"asked", &mut buf).map(|_| buf)
            });
            let started = Instant::now();
            while !ring.pending(&pod) {
                assert!(started.elapsed() < Duration::from_secs(60), "no request");
                std::thread::yield_now();
            }
            let before = scr(&a);
            assert_eq!(a.shared.serve_rpcs().unwrap(), 1);
            let served = scr(&a) - before;
            assert_eq!(asker.join().unwrap().unwrap(), *b"value");
            served
        });
        assert_eq!(
            served,
            move_back + 6,
            "a served move back, a move back alone"
        );
    }
}
