//! Late joins: a host that joins after the log recycled its first entries cannot rebuild
//! its replica from position 0. A live host streams it a snapshot of its own index instead,
//! taken at the position it had applied, through the pod's join area (LNR); the joiner
//! replays from that position on.
//!
//! The join mailbox (a line of SCR words): `request` (the joiner's session: its id and
//! which life of the id it is, taken by one CAS: one late join at a time), `server` (the
//! serving host's session, taken by one CAS), `ready` (the joiner's session, once
//! `total` is its stream's), `total` (bytes), `chunk` (chunks the server has put in the
//! area) and `acked` (chunks the joiner has read). The stream is a header (the joiner's
//! session, the position the snapshot was taken at, a checksum of the snapshot) and the
//! snapshot. A session names a life, not only an id: a joiner killed mid-stream and
//! started again under its id is another session, and never reads what was streamed to
//! the dead one; a server killed mid-stream is gone to its joiner even once its id lives
//! again. A joiner whose server died mid-stream, or whose stream is not its session's
//! whole snapshot pinned where it was taken, joins again as the id's next life: a server
//! declared dead (paused past its lease) may still pin the old life's `ltail` and store
//! the old session's mailbox words, and neither touches the new life.
//!
//! The server, in its pump: takes `server`; holding its replay lock (so that its
//! `applied` and `ltail` stay at one position `P`) encodes its index and raises the
//! joiner's `ltail` to `P` (by a CAS from the joiner's life's word: it never goes down,
//! the head may be at it): from then on the log's head cannot pass `P` before the joiner
//! has replayed past it. It then writes the snapshot into the area a chunk at a time,
//! each written back and fenced before `chunk` counts it, and waits for the joiner's
//! `acked` before overwriting the area. The joiner flushes the area's lines before it
//! reads each chunk. The server lets go of `server` once the joiner has let go of
//! `request`, or when it gives up waiting for the joiner; `ready` stays, and marks the
//! session served: one session is served once (a second server would pin the joiner's
//! `ltail` past the position it replays from). A joiner whose server let go before the
//! end of its stream joins again as a new session. Until the snapshot is pinned, the joiner's
//! `ltail` holds the head at the position the joiner saw when it claimed its id. Every
//! wait is bounded, and ends early when the other side is gone (its row freed or claimed
//! by another life, or its process gone on this machine); a stale session in the mailbox
//! is cleared by the next joiner.

use super::Shared;

use crate::backoff::Backoff;
use crate::error::{Error, JoinNotServedCause, Result};
use crate::host_table::{session, session_gone, session_of};
use crate::ids::HostId;
use crate::log::Log;
use crate::pod::Pod;
use crate::sync::{AtomicU64, Ordering};

struct Mailbox<'p> {
    request: &'p AtomicU64,
    server: &'p AtomicU64,
    ready: &'p AtomicU64,
    total: &'p AtomicU64,
    chunk: &'p AtomicU64,
    acked: &'p AtomicU64,
}

impl Mailbox<'_> {
    /// Ends joiner session `me`, whose server (session `server`) is gone: its words are
    /// cleared by CASes from what this session and that server left, so the next session
    /// is served from the start. Only those: a joiner paused here past its lease (and
    /// recovered) may resume after another joiner took the mailbox and another server
    /// stored `ready` for it, and a plain store of 0 would wipe that, leaving the new
    /// joiner to wait out its whole limit for a snapshot it was being sent.
    fn end_gone_session(&self, me: u64, server: u64) {
        let _ = (self.ready).compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst);
        let _ = (self.server).compare_exchange(server, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// What `server` holds while life `life` of host `id` serves the mailbox: its session,
/// as `request` holds the joiner's. (An id alone would name a later life too: a server
/// killed mid-stream whose id is claimed again before its joiner looks would look alive
/// to every joiner for as long as the new life lives, and no one would serve again.)
fn server_word(id: HostId, life: u64) -> u64 {
    session(id, life)
}

/// Slots a late joiner drops the lines of between two beats of its lease.
const SLOTS_PER_BEAT: u64 = 1 << 14;

/// Bytes the stream has before the snapshot: the joiner's session, the position the
/// snapshot was taken at, and a checksum of the snapshot.
const STREAM_HEADER_BYTES: usize = 24;

/// What a server streams to the joiner of session `session`: the header, then
/// `snapshot` (taken at `position`).
fn stream(session: u64, position: u64, snapshot: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(STREAM_HEADER_BYTES + snapshot.len());
    for word in [session, position, checksum(snapshot)] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.extend_from_slice(snapshot);
    bytes
}

/// The position and the snapshot of a stream made by [`stream`] for `session`; `None`
/// when it is not that: another session's, cut short, or mixed with another stream.
fn open_stream(bytes: &[u8], session: u64) -> Option<(u64, &[u8])> {
    let (header, snapshot) = bytes.split_at_checked(STREAM_HEADER_BYTES)?;
    let word = |i: usize| u64::from_le_bytes(header[8 * i..8 * i + 8].try_into().unwrap());
    (word(0) == session && word(2) == checksum(snapshot)).then_some((word(1), snapshot))
}

/// A checksum of `bytes`, a word at a time (it tells a stream from one mixed with another
/// server's chunks; nobody forges one here).
fn checksum(bytes: &[u8]) -> u64 {
    let mut hash = 0x6a09_e667_f3bc_c908 ^ bytes.len() as u64;
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = (hash ^ u64::from_le_bytes(word))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    hash
}

fn mailbox(pod: &Pod) -> Mailbox<'_> {
    let base = pod.layout().join_mailbox_offset();
    let word = |i: u64| pod.scr_u64(base + 8 * i);
    Mailbox {
        request: word(0),
        server: word(1),
        ready: word(2),
        // Word 3 held the snapshot's position until layout version 9 (now in the
        // stream's header).
        total: word(4),
        chunk: word(5),
        acked: word(6),
    }
}

impl Shared {
    /// Waits (bounded by the wait limit) until `done` holds; `Err`: the milliseconds
    /// waited. Heartbeats as it waits: a joiner has no pump yet, and a server's pump is
    /// this wait, which the wait limit (10 s by default) lets outlast the lease (2 s); a
    /// host on another machine that stopped beating would be declared dead while alive.
    fn wait_until(&self, done: impl FnMut() -> bool) -> std::result::Result<(), u64> {
        self.wait_until_by(None, done)
    }

    /// [`Shared::wait_until`], also bounded by `deadline` if there is one.
    fn wait_until_by(
        &self,
        deadline: Option<std::time::Instant>,
        mut done: impl FnMut() -> bool,
    ) -> std::result::Result<(), u64> {
        let limit = deadline.map_or(self.options.wait_limit, |deadline| {
            deadline
                .saturating_duration_since(std::time::Instant::now())
                .min(self.options.wait_limit)
        });
        let mut backoff = Backoff::new(limit);
        while !done() {
            if !backoff.snooze() {
                return Err(backoff.waited().as_millis() as u64);
            }
            self.beat();
        }
        Ok(())
    }

    /// The joiner's side: receives a live host's index and starts replay where it was
    /// taken. Called before this host serves or appends anything. `Ok(false)`: its server
    /// died mid-stream, or what it received was not its session's whole snapshot (a
    /// server declared dead, paused past its lease, wrote into the stream): it must join
    /// again as a new life (`Host::join` does).
    pub(super) fn join_late(&self) -> Result<bool> {
        let mailbox = mailbox(&self.pod);
        let me = session(self.id, self.life);
        let not_served = |waited_ms| Error::JoinNotServed {
            host: self.id,
            waited_ms,
            cause: JoinNotServedCause::NoServer,
        };
        self.wait_until(|| {
            match mailbox
                .request
                .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => true,
                Err(other) => {
                    // A session whose joiner is gone leaves the mailbox to us.
                    if session_gone(&self.pod, other) {
                        let _ = mailbox.request.compare_exchange(
                            other,
                            0,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                    }
                    false
                }
            }
        })
        .map_err(not_served)?;
        let received = self.receive_snapshot(&mailbox, me);
        let server = mailbox.server.load(Ordering::SeqCst);
        let server_gone = server != 0 && self.server_gone(server);
        // The request goes first: a gone server's words cleared while it stayed, another
        // server could take the mailbox, find `ready` no longer this session's and pin
        // it a second time (past where a session received whole replays from).
        let _ = mailbox
            .request
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst);
        if server_gone {
            mailbox.end_gone_session(me, server);
        }
        match received {
            Err(_) if server_gone => Ok(false),
            received => received,
        }
    }

    /// Whether the host serving the mailbox (`server`, its session) is gone.
    fn server_gone(&self, server: u64) -> bool {
        session_gone(&self.pod, server)
    }

    /// `Ok(false)`: what arrived is not this session's whole snapshot, pinned where it
    /// was taken.
    fn receive_snapshot(&self, mailbox: &Mailbox<'_>, me: u64) -> Result<bool> {
        let not_served = |waited_ms| Error::JoinNotServed {
            host: self.id,
            waited_ms,
            cause: JoinNotServedCause::NoServer,
        };
        // Waits for `done`, giving up early if the serving host is gone (`Err`), or once
        // the stream has begun, if it let go of the session before the end (`Ok(false)`:
        // a session is served once, so nobody else will finish it).
        let wait_for = |done: &dyn Fn() -> bool, streaming: bool| {
            let (mut gone, mut let_go) = (false, false);
            self.wait_until(|| {
                let server = mailbox.server.load(Ordering::SeqCst);
                gone = server != 0 && self.server_gone(server);
                let_go = streaming && server == 0;
                done() || gone || let_go
            })
            .map_err(not_served)?;
            if done() {
                Ok(true)
            } else if gone {
                Err(not_served(0))
            } else {
                Ok(false)
            }
        };
        wait_for(&|| mailbox.ready.load(Ordering::SeqCst) == me, false)?;
        let total = mailbox.total.load(Ordering::SeqCst) as usize;
        let layout = self.pod.layout();
        let area = layout.join_area_offset;
        let area_bytes = layout.config.join_area_bytes as usize;
        let mut bytes = vec![0u8; total];
        for (k, chunk) in bytes.chunks_mut(area_bytes).enumerate() {
            let k = k as u64;
            if !wait_for(&|| mailbox.chunk.load(Ordering::SeqCst) > k, true)? {
                return Ok(false);
            }
            // The server wrote the chunk back and fenced before counting it; our cache
            // may hold the area's lines from an earlier chunk.
            self.memory.flush(area, chunk.len());
            self.memory.fence();
            self.memory.read(area, chunk);
            mailbox.acked.store(k + 1, Ordering::SeqCst);
            self.chaos.point(crate::chaos::Point::JoinBetweenChunks);
        }
        // Only this session's snapshot, whole: a server declared dead may have stored
        // its `total`, or written a chunk, over the live server's.
        let Some((position, snapshot)) = open_stream(&bytes, me) else {
            return Ok(false);
        };
        // Pinned by the server: our `ltail` is `position`, and the head has not passed it
        // (our row's count in the head word keeps it from passing our `ltail`, which
        // only grows). Checked: a pin of a server declared dead may have raised our
        // `ltail` past where the live one pinned it, and replaying from a position the
        // log recycled would read entries of a later lap.
        let pinned = Log::ltail_of(&self.pod, self.id, self.life);
        if pinned != Some(position) || position < Log::head(&self.pod) {
            return Ok(false);
        }
        self.chaos.point(crate::chaos::Point::JoinBeforeDecode);
        let mut index = self.replica.write();
        index.decode_snapshot_beating(snapshot, &mut || self.beat())?;
        // The records the snapshot's objects have are not free (of the snapshot's width).
        let mut free = self.free_records.lock();
        *free = super::records::FreeRecords::new(index.record_count());
        for record in index.records_owned() {
            free.remove(record);
        }
        drop(free);
        // A replay from the log's start would have dropped every object's lines as it
        // applied its create; this host replays none of that. Lines an earlier process
        // of this machine left in its caches (of an object since deleted, whose slot
        // holds another now; read-shared objects have no counter to tell) would be read.
        let slot_bytes = self.pod.layout().config.slot_size_bytes as usize;
        let mut dropped = 0;
        for slot in index.slots() {
            self.memory
                .flush(self.pod.layout().slot_offset(slot), slot_bytes);
            dropped += 1;
            if dropped % SLOTS_PER_BEAT == 0 {
                // Millions of objects take a while: a joiner on another machine is judged
                // by its lease.
                self.beat();
            }
        }
        self.memory.fence();
        self.counters
            .slots_dropped
            .fetch_add(dropped, std::sync::atomic::Ordering::Relaxed);
        drop(index);
        // Our `ltail` is `position` (the server pinned it): replay goes on from there.
        self.replica.applied.store(position, Ordering::Release);
        Ok(true)
    }

    /// The server's side, in the pump: if a late joiner waits and no one serves it,
    /// streams it this host's index.
    pub(super) fn serve_join(&self) -> Result<()> {
        self.serve_join_by(None)
    }

    /// [`Shared::serve_join`], the whole serve also bounded by `deadline` if there is one
    /// (a writer waiting for room serves holding its host's append lock, within its own
    /// wait; the pump's serve bounds each wait for the joiner by the wait limit).
    pub(super) fn serve_join_by(&self, deadline: Option<std::time::Instant>) -> Result<()> {
        if self.pod.layout().config.join_area_bytes == 0 {
            return Ok(());
        }
        let mailbox = mailbox(&self.pod);
        let request = mailbox.request.load(Ordering::SeqCst);
        if request == 0 || mailbox.server.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        if session_gone(&self.pod, request) {
            // Its joiner died (and was recovered): nobody will read a snapshot. Cleared
            // (by a CAS from that session: a new joiner's stays), or every pump would
            // encode its index for it every round until the next late join. Before the
            // look at `ready`: a joiner killed mid-stream leaves its session both served
            // and in `request`, and nobody else clears it.
            let _ =
                (mailbox.request).compare_exchange(request, 0, Ordering::SeqCst, Ordering::SeqCst);
            return Ok(());
        }
        if mailbox.ready.load(Ordering::SeqCst) == request {
            // Pinned by a server already, which let go (it gave up waiting): a session is
            // served once. A second pin would raise the joiner's `ltail` past the position
            // it replays from, where its own raises (CASes from what it stored) would
            // never move it again, and the head would stop there for good. The joiner
            // learns it was let go, and joins again as a new session.
            return Ok(());
        }
        // A server declared dead (paused past its lease) takes no mailbox.
        self.holds_its_row()?;
        // Its snapshot is taken holding the replay lock. Taken now, or this host does
        // not serve: another thread of it holds the lock (a replay waiting for a hole,
        // up to its wait limit), and a server that took the mailbox and then waited for
        // the lock kept every other host from serving, while the joiner's `ltail` held
        // the log's head (full for every host).
        let Some(replaying) = self.replica.replay.try_lock() else {
            return Ok(());
        };
        let me = server_word(self.id, self.life);
        self.chaos.point(crate::chaos::Point::ServeBeforeTake);
        if mailbox
            .server
            .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(());
        }
        // Again, holding the mailbox: a server that stores `ready` holds `server` until
        // then, so a look now sees whether one served the session since the look above
        // (this thread stopped in between, while another host pinned, streamed and let
        // go of the session). A second pin, after the joiner checked the first, left its
        // `ltail` past where it replays from, and the head there for good.
        if mailbox.ready.load(Ordering::SeqCst) == request {
            let _ = (mailbox.server).compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst);
            return Ok(());
        }
        let sent = self.send_snapshot(&mailbox, request, deadline, replaying);
        // Only while the mailbox is still this server's, and this server alive: one taken
        // for dead and recovered meanwhile may find its joiner served by another (its
        // joiner cleared `server`), whose `ready` holds the same session. (The joiner
        // clears the words of a server that is gone.)
        // `ready` stays: it marks the session served.
        if self.row_is_mine() && mailbox.server.load(Ordering::SeqCst) == me {
            let _ = (mailbox.server).compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
        sent
    }

    fn send_snapshot(
        &self,
        mailbox: &Mailbox<'_>,
        request: u64,
        deadline: Option<std::time::Instant>,
        replaying: crate::sync::MutexGuard<'_, crate::replica::ReplayState>,
    ) -> Result<()> {
        let (joiner, joiner_life) = session_of(request);
        mailbox.chunk.store(0, Ordering::SeqCst);
        mailbox.acked.store(0, Ordering::SeqCst);
        // The session is over: its joiner gave up, or is gone.
        let over = || {
            mailbox.request.load(Ordering::SeqCst) != request || session_gone(&self.pod, request)
        };
        let bytes = {
            let _replaying = replaying;
            // Holding the replay lock: our `ltail` is `applied`, and holds the head.
            let position = self.replica.applied.load(Ordering::Acquire);
            let snapshot = self
                .replica
                .read()
                .encode_snapshot_beating(&mut || self.beat());
            let bytes = stream(request, position, &snapshot);
            if over() {
                return Ok(());
            }
            self.chaos.point(crate::chaos::Point::ServeBeforePin);
            // Raised, never lowered (the head may be at it), and only while it is that
            // joiner's life's: a server paused here past its joiner's death must not pin
            // the id's next life.
            if !Log::pin_ltail(&self.pod, joiner, joiner_life, position) {
                return Ok(());
            }
            // The head moves past the joiner's claim now: a joiner let go and joining
            // again claims where it is, not back where the pin freed it from.
            self.log.advance_head(&self.pod, &self.chaos);
            bytes
        };
        self.chaos.point(crate::chaos::Point::ServeAfterPin);
        mailbox.total.store(bytes.len() as u64, Ordering::SeqCst);
        mailbox.ready.store(request, Ordering::SeqCst);
        let layout = self.pod.layout();
        let area = layout.join_area_offset;
        let gone = |waited_ms| Error::JoinerGone {
            host: joiner,
            waited_ms,
        };
        let chunks = bytes.chunks(layout.config.join_area_bytes as usize);
        let count = chunks.len() as u64;
        for (k, chunk) in chunks.enumerate() {
            let k = k as u64;
            self.wait_until_by(deadline, || {
                mailbox.acked.load(Ordering::SeqCst) >= k || over()
            })
            .map_err(gone)?;
            if over() {
                return Err(gone(0));
            }
            // A server declared dead (paused past its lease) must not write into the area
            // another server may be streaming through by now.
            self.holds_its_row()?;
            self.memory.write_non_temporal(area, chunk);
            // The chunk is in memory before `chunk` counts it.
            self.memory.fence();
            mailbox.chunk.store(k + 1, Ordering::SeqCst);
            self.beat();
            self.chaos.point(crate::chaos::Point::ServeAfterChunk);
        }
        // Until the joiner has taken everything and let go of the mailbox, `server` stays
        // ours: another host that saw the request still there would serve it again, and
        // pin the joiner's `ltail` past the position it is about to replay from. A
        // joiner that took every chunk was sent the index, whether or not it lets go
        // within our wait.
        let took_all = self.wait_until_by(deadline, || {
            mailbox.acked.load(Ordering::SeqCst) >= count || over()
        });
        if mailbox.acked.load(Ordering::SeqCst) < count {
            return Err(gone(took_all.err().unwrap_or(0)));
        }
        self.counters.joins_served.fetch_add(1, Ordering::Relaxed);
        self.wait_until_by(deadline, over).map_err(gone)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
