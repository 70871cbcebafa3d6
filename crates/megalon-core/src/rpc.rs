//! A host's RPC ring: the requests other hosts send it through the pod, as Tigon's hosts
//! message each other through CXL memory (the core asks a host to move an object back
//! from its local DRAM; HCMeta asks an owner to share, create or delete a key).
//!
//! One ring per host, many senders (every thread of every other host), one server at a
//! time (the caller makes sure of that, e.g. with a serving lock). Cursors and one state
//! word per entry live in SCR; the entries (a header line, the key, the payload) live in
//! LNR. Where the ring is ([`RingGeometry`]) and what its operations mean (the `op` byte,
//! the response's status and detail) are the user's choice; the ring only moves them.
//!
//! ```text
//! state word of entry i:  ticket << 3 | state      (ticket t uses entry t % entries)
//! free(t) --sender reserves t (CAS tail), writes, writes back--> request(t)
//! request(t) --server claims--> claimed(t) --server writes the response back--> response(t)
//! response(t) --sender reads it--> free(t + entries)
//! request(t) --sender gives up--> withdrawn(t) --server skips it--> free(t + entries)
//! claimed(t) --sender gives up--> abandoned(t) --server answers nobody--> free(t + entries)
//! claimed(t) --the dead server's recovery--> answering(t) --writes the header--> response(t)
//! answering(t) --sender gives up--> abandoned-answering(t) --recovery--> free(t + entries)
//! ```
//!
//! Each entry also has a sender word (SCR): the sender holding it, from its reservation
//! (it takes the word by a CAS from 0 before its CAS on `tail`, and only the word's holder
//! moves `tail` past the entry's ticket) until it is done with it. A sender that dies
//! anywhere in a call is named by the entries it holds: whoever recovers it settles each
//! as it would have had it given up ([`RingGeometry::recover_sender`]: a reservation not
//! yet published or an unclaimed request withdrawn, a claimed one abandoned, an unread
//! answer freed). A server that dies leaves what it claimed: whoever recovers it (no new
//! server may run until then) answers those requests for it and frees the abandoned ones
//! ([`RingGeometry::recover_server`]). Every move after a reservation, the sender's and
//! the server's, is a CAS from the state it leaves, so a party only paused while it was
//! recovered changes no state word when it resumes. Its late writes of an entry's lines
//! (a request, a response header) may land on the entry's next use: the lease's usual
//! assumption, and the ticket echo makes such a line a failed assertion, never an answer.
//!
//! An entry's header line:
//!
//! ```text
//! byte 0: op (never 0)   byte 1: status   bytes 2..4: key bytes   bytes 4..8: payload bytes
//! bytes 8..16: ticket (written by the sender, echoed by the server)   bytes 16..24: detail
//! ```
//!
//! then the key padded to whole words, then the payload, in whole lines.
//!
//! Both sides follow the flush rules: the writer of an entry's lines writes them back and
//! fences before the Release store of the state word that publishes them; the reader
//! invalidates them after its Acquire load of that word and before it reads.
//!
//! A sender reserves an entry only once it is free (it never holds a ticket it cannot
//! use), so a sender that gives up leaves nothing behind (it lets go of the entry's
//! sender word once it has withdrawn, abandoned or freed it). Waiting for an entry or for a
//! response is bounded: the sender serves its own host's ring meanwhile (so two hosts
//! asking each other both progress), and past the wait limit it withdraws an unclaimed
//! request and reports the server unresponsive. It withdraws it at once when its caller
//! knows the server will not answer (the callback breaks: the server died, and what it
//! was asked for was done without it). A request the server already claimed is
//! waited for up to twice the limit; past that, whether it took effect is unknown.
//!
//! ```
//! use std::ops::ControlFlow;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use megalon_core::rpc::{self, RingGeometry, Response};
//! use megalon_core::{Backing, Memory, MemoryKind, Pod, PodConfig};
//!
//! let entries = 4;
//! let entry_bytes = rpc::entry_bytes(16, 64);
//! let config = PodConfig::new()
//!     .app_scr_bytes(rpc::scr_bytes(entries))
//!     .app_lnr_bytes(entries * entry_bytes);
//! let pod = Arc::new(Pod::create(&config, Backing::heap())?);
//! let ring = RingGeometry::in_app_areas(&pod, entries, entry_bytes)?;
//! ring.initialize(&pod);
//!
//! let sender = Memory::new(Arc::clone(&pod), MemoryKind::simulated(1));
//! let server = Memory::new(Arc::clone(&pod), MemoryKind::simulated(2));
//! let mut request = vec![0; entry_bytes as usize];
//! let mut serving = vec![0; entry_bytes as usize];
//! let mut serve = || {
//!     // The sender's callback plays the server here; usually another host runs it.
//!     while let Some(claimed) = ring.claim(&pod, &()) {
//!         let asked = ring.read(&server, claimed, &mut serving, &());
//!         let response = Response { status: asked.op, detail: asked.key.len() as u64 };
//!         ring.respond(&pod, &server, claimed, &mut serving, response, &());
//!     }
//!     ControlFlow::Continue(()) // wait on
//! };
//! let response = ring
//!     .call(&pod, &sender, 1, &mut request, 7, b"key", b"", Duration::from_secs(1), &(), &mut serve)
//!     .expect("served");
//! assert_eq!(response, Response { status: 7, detail: 3 });
//! # Ok::<(), megalon_core::Error>(())
//! ```

use std::ops::{ControlFlow, Range};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::error::{Error, Region};
use crate::limits::LINE_BYTES;
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::pod::Pod;
use crate::sync::{AtomicU64, Ordering};

/// The op no request has: a zeroed entry never reads as a request, and [`RingGeometry::read`]
/// answers it for a request whose lengths do not fit its entry.
pub const NO_OP: u8 = 0;

const FREE: u64 = 0;
const REQUEST: u64 = 1;
const CLAIMED: u64 = 2;
const RESPONSE: u64 = 3;
const WITHDRAWN: u64 = 4;
const ABANDONED: u64 = 5;
/// Claimed by a server that died, and being answered by its recovery: as claimed for its
/// sender, but the dead server (only paused, say) can neither answer nor free it, so the
/// recovery's header line lands on this request and no other.
const ANSWERING: u64 = 6;
/// Answering, and its sender gave up: the recovery frees it once its header is written.
const ABANDONED_ANSWERING: u64 = 7;

fn pack(ticket: u64, state: u64) -> u64 {
    ticket << 3 | state
}

/// The ticket and the state a state word holds (see [`pack`]).
fn unpack(word: u64) -> (u64, u64) {
    (word >> 3, word & 7)
}

pub use crate::layout::{ring_entry_bytes as entry_bytes, ring_scr_bytes as scr_bytes};
use crate::layout::{
    ring_key_area as key_area, ring_words_bytes, RING_CURSOR_BYTES, RING_HEADER_BYTES,
};

/// Where the ring's costs are counted: each operation reports the SCR atomics it made
/// and the LNR lines it wrote back or invalidated (the counts a report compares between
/// schemes). `()` counts nothing.
pub trait Tally {
    /// `n` loads, stores or read-modify-writes of SCR words.
    fn scr_atomics(&self, n: u64);
    /// `n` LNR lines written back.
    fn lines_written_back(&self, n: u64);
    /// `n` LNR lines invalidated.
    fn lines_invalidated(&self, n: u64);
}

impl Tally for () {
    #[inline]
    fn scr_atomics(&self, _: u64) {}
    #[inline]
    fn lines_written_back(&self, _: u64) {}
    #[inline]
    fn lines_invalidated(&self, _: u64) {}
}

/// The server's answer: a status and a detail word, both the user's to define.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// How the request went.
    pub status: u8,
    /// A word more (a count, a limit that was hit, an offset).
    pub detail: u64,
}

/// A request the server has claimed: it must [`read`](RingGeometry::read) it and
/// [`respond`](RingGeometry::respond) to it.
#[derive(Clone, Copy, Debug)]
pub struct Claimed {
    ticket: u64,
}

impl Claimed {
    /// The request's ticket (its entry is `ticket % entries`).
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

/// A request as the server read it: the key is `buf[key]`, the payload `buf[payload]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// What the sender asks ([`NO_OP`] if the request's lengths do not fit its entry).
    pub op: u8,
    /// Where the key is in the server's buffer.
    pub key: Range<usize>,
    /// Where the payload is in the server's buffer.
    pub payload: Range<usize>,
}

/// Where one host's ring is: offsets from the pod's first byte.
///
/// The cursors and state words must lie in SCR (8-byte words, the cursors a line each so
/// that senders' and the server's cursor do not share a line), the entries in LNR from a
/// line boundary, each `entry_bytes` long, a whole number of lines (an entry's lines are
/// written back whole: sharing a line with a neighbour would write the neighbour's stale
/// bytes back). [`RingGeometry::new`] lays them out so; a hand-made geometry is checked
/// by [`RingGeometry::initialize`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// The senders' cursor: the next ticket to reserve (SCR).
    pub tail_offset: u64,
    /// The server's cursor: the next ticket to serve (SCR).
    pub head_offset: u64,
    /// The first of `entries` state words (SCR).
    pub states_offset: u64,
    /// The first of `entries` sender words (SCR): the sender holding the entry (its
    /// `sender` of [`RingGeometry::call`]), from its reservation until it is done with it;
    /// 0 for none.
    pub senders_offset: u64,
    /// The first entry (LNR).
    pub entries_offset: u64,
    /// Entries of the ring.
    pub entries: u64,
    /// Bytes of one entry (see [`entry_bytes`]).
    pub entry_bytes: u64,
}

impl RingGeometry {
    /// A ring whose [`scr_bytes`]`(entries)` of SCR start at `scr_offset` (tail, head,
    /// then the state words) and whose `entries * entry_bytes` of LNR start at
    /// `entries_offset`.
    ///
    /// # Panics
    /// If the geometry breaks a rule of [`RingGeometry`] (no entries, an entry that is
    /// not whole lines, a misaligned offset): offsets come from a layout, not from users.
    pub fn new(scr_offset: u64, entries_offset: u64, entries: u64, entry_bytes: u64) -> Self {
        let ring = Self {
            tail_offset: scr_offset,
            head_offset: scr_offset + LINE_BYTES,
            states_offset: scr_offset + RING_CURSOR_BYTES,
            senders_offset: scr_offset + RING_CURSOR_BYTES + ring_words_bytes(entries),
            entries_offset,
            entries,
            entry_bytes,
        };
        ring.check();
        ring
    }

    /// A ring of `entries` entries of `entry_bytes` at the start of `pod`'s application
    /// areas: a pod made with [`PodConfig::app_scr_bytes`](crate::PodConfig::app_scr_bytes)
    /// of at least [`scr_bytes`]`(entries)` and
    /// [`PodConfig::app_lnr_bytes`](crate::PodConfig::app_lnr_bytes) of at least
    /// `entries * entry_bytes`.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for no entries; [`Error::UnalignedSize`] or
    /// [`Error::BelowMinimum`] for an entry that is not whole lines or has no room for
    /// its header (make it with [`entry_bytes`]); [`Error::AppAreaTooSmall`] if the pod's
    /// application areas are smaller than the ring. Nothing of the pod is touched.
    pub fn in_app_areas(pod: &Pod, entries: u64, entry_bytes: u64) -> Result<Self, Error> {
        if entries == 0 {
            return Err(Error::ZeroSize {
                parameter: "entries",
            });
        }
        if !entry_bytes.is_multiple_of(LINE_BYTES) {
            return Err(Error::UnalignedSize {
                parameter: "entry_bytes",
                value: entry_bytes,
                alignment: LINE_BYTES,
            });
        }
        if entry_bytes < RING_HEADER_BYTES {
            return Err(Error::BelowMinimum {
                parameter: "entry_bytes",
                value: entry_bytes,
                minimum: RING_HEADER_BYTES,
            });
        }
        let config = pod.config();
        // Past this many entries their words alone would not fit in a u64.
        let needed_scr = if entries <= u64::MAX / 32 {
            scr_bytes(entries)
        } else {
            u64::MAX
        };
        let areas = [
            (Region::Scr, needed_scr, config.app_scr_bytes),
            (
                Region::Lnr,
                entries.saturating_mul(entry_bytes),
                config.app_lnr_bytes,
            ),
        ];
        if let Some(&(region, needed_bytes, available_bytes)) = areas
            .iter()
            .find(|(_, needed, available)| available < needed)
        {
            return Err(Error::AppAreaTooSmall {
                what: format!("a ring of {entries} entries of {entry_bytes} bytes"),
                region,
                needed_bytes,
                available_bytes,
            });
        }
        let layout = pod.layout();
        Ok(Self::new(
            layout.app_scr_offset,
            layout.app_lnr_offset,
            entries,
            entry_bytes,
        ))
    }

    fn check(&self) {
        assert!(self.entries > 0, "a ring needs an entry");
        assert!(
            self.entry_bytes >= RING_HEADER_BYTES && self.entry_bytes.is_multiple_of(LINE_BYTES),
            "ring entries of {} bytes are not whole lines with a header",
            self.entry_bytes
        );
        assert!(
            self.entries_offset.is_multiple_of(LINE_BYTES),
            "ring entries at {:#x} do not start on a line",
            self.entries_offset
        );
    }

    fn tail<'p>(&self, pod: &'p Pod) -> &'p AtomicU64 {
        pod.scr_u64(self.tail_offset)
    }

    fn head<'p>(&self, pod: &'p Pod) -> &'p AtomicU64 {
        pod.scr_u64(self.head_offset)
    }

    fn state<'p>(&self, pod: &'p Pod, ticket: u64) -> &'p AtomicU64 {
        pod.scr_u64(self.states_offset + (ticket % self.entries) * 8)
    }

    fn sender<'p>(&self, pod: &'p Pod, ticket: u64) -> &'p AtomicU64 {
        pod.scr_u64(self.senders_offset + (ticket % self.entries) * 8)
    }

    /// Lets go of `ticket`'s entry as its sender (a CAS from `sender`: a recovery that
    /// settled the entry for us, if we were taken for dead, has let go of it already).
    fn let_go(&self, pod: &Pod, ticket: u64, sender: u64) {
        let _ = self.sender(pod, ticket).compare_exchange(
            sender,
            0,
            Ordering::SeqCst,
            Ordering::Relaxed,
        );
    }

    /// Whether `state` (the entry's word) says the entry is free for `ticket`: freed for
    /// it by the previous lap, or (zero) never used, for the first lap's tickets. So a
    /// zeroed SCR is a ring of free entries.
    fn is_free(&self, ticket: u64, state: u64) -> bool {
        state == pack(ticket, FREE) || (state == 0 && ticket < self.entries)
    }

    fn entry(&self, ticket: u64) -> u64 {
        self.entries_offset + (ticket % self.entries) * self.entry_bytes
    }

    /// Host `host`'s ring in a pod laid out as `layout` (the pod must have rings).
    pub fn of_host(layout: &crate::layout::Layout, host: u32) -> Self {
        debug_assert!(host < layout.config.max_hosts && layout.config.rpc_ring_entries > 0);
        let entries = u64::from(layout.config.rpc_ring_entries);
        Self::new(
            layout.rpc_scr_offset + u64::from(host) * layout.rpc_scr_bytes_per_host,
            layout.rpc_lnr_offset + u64::from(host) * entries * layout.rpc_entry_bytes,
            entries,
            layout.rpc_entry_bytes,
        )
    }

    /// Sets both cursors to ticket 0 and makes every entry free for its first ticket, for
    /// a ring whose words may hold anything (a zeroed ring needs nothing: a zero state
    /// word is free for the first lap). Once, before any host uses the ring.
    ///
    /// # Panics
    /// If the geometry breaks a rule of [`RingGeometry`] or lies outside the pod's SCR.
    pub fn initialize(&self, pod: &Pod) {
        self.check();
        self.tail(pod).store(0, Ordering::Relaxed);
        self.head(pod).store(0, Ordering::Relaxed);
        for ticket in 0..self.entries {
            self.state(pod, ticket)
                .store(pack(ticket, FREE), Ordering::Release);
            self.sender(pod, ticket).store(0, Ordering::Release);
        }
    }

    /// Sends a request and waits for the response (any host but the server's). `buf` is
    /// the sender's scratch entry; `serve` serves the sender's own ring while it waits,
    /// and breaks when the sender knows the server will not answer (it died, and what the
    /// request asked for was done without it): the wait for room in a full ring or for an
    /// unclaimed request's claim then stops at once, as past the limit (a claimed request
    /// is waited for all the same: its server, or the server's recovery, answers it).
    /// `Err(waited_ms)` if the server did not answer within `wait_limit` (the request
    /// withdrawn, or, claimed but unanswered after twice the limit, of unknown effect).
    /// The limit is looked at between calls of `serve`: a `serve` that begins no request
    /// past the limit lets the call outlast its bound (the limit, or twice it for a
    /// claimed request) by the one request it began within the limit at most.
    ///
    /// # Panics
    /// If `op` is [`NO_OP`], or the request does not fit an entry or `buf` (the caller
    /// sized the ring with [`entry_bytes`] and checks its keys and payloads first).
    #[allow(clippy::too_many_arguments)]
    // Over 70 lines on purpose: The call's phases in order (reserve, write, publish, await,
    // read, free), so that every change of the entry's state reads here; each phase's work
    // is a function of its own.
    pub fn call(
        &self,
        pod: &Pod,
        memory: &Memory,
        sender: u64,
        buf: &mut [u8],
        op: u8,
        key: &[u8],
        payload: &[u8],
        wait_limit: Duration,
        tally: &dyn Tally,
        serve: &mut dyn FnMut() -> ControlFlow<()>,
    ) -> Result<Response, u64> {
        self.call_while(
            pod,
            memory,
            (sender, &|| true),
            buf,
            (op, key, payload),
            wait_limit,
            tally,
            serve,
        )
    }

    /// [`RingGeometry::call`] for a sender whose recovery may settle its entries
    /// ([`RingGeometry::recover_sender`]): `lives` says whether the sender has not been
    /// taken for dead (its recovery not begun), and is asked once the sender holds an
    /// entry's sender word, before it reserves the entry, and again once it has reserved
    /// it. A sender recovered before it took the word (paused past its lease, say) was
    /// settled with nothing of it in the ring, and nobody would settle an entry it went on
    /// to reserve: it lets the word go and sends nothing. (Recovery marks the sender dead
    /// before it looks at the words, and both are `SeqCst`: either it sees the word, or the
    /// sender sees itself dead.) The second look is for a sender recovered between the
    /// first and its reservation: the word it finds may be a sibling thread's of the same
    /// life (the word names the life), and only `lives` tells.
    #[allow(clippy::too_many_arguments)]
    // Over 70 lines on purpose: The call's phases in order (reserve, write, publish, await,
    // read, free), so that every change of the entry's state reads here; each phase's work
    // is a function of its own.
    pub fn call_while(
        &self,
        pod: &Pod,
        memory: &Memory,
        (sender, lives): (u64, &dyn Fn() -> bool),
        buf: &mut [u8],
        (op, key, payload): (u8, &[u8], &[u8]),
        wait_limit: Duration,
        tally: &dyn Tally,
        serve: &mut dyn FnMut() -> ControlFlow<()>,
    ) -> Result<Response, u64> {
        let key_at = RING_HEADER_BYTES as usize;
        let payload_at = key_at + key_area(key.len()) as usize;
        let used = (payload_at + payload.len()).next_multiple_of(LINE_BYTES as usize);
        assert_ne!(op, NO_OP, "op {NO_OP} is no request");
        assert!(
            key.len() <= usize::from(u16::MAX)
                && used as u64 <= self.entry_bytes
                && used <= buf.len(),
            "a request of a {}-byte key and a {}-byte payload needs {used} bytes: \
             more than a {}-byte ring entry or a {}-byte buffer",
            key.len(),
            payload.len(),
            self.entry_bytes,
            buf.len()
        );

        assert_ne!(sender, 0, "sender 0 names nobody");
        // Yielding from the first round: the answer needs the server's thread to run,
        // and where threads outnumber cores a spinning sender keeps it off the core (on 2
        // cores, HCMeta's hosts ran 3-4 times slower with every wait spinning first).
        let mut backoff = Backoff::yielding(wait_limit);
        let mut reserved = self.reserve(pod, (sender, lives), &mut backoff, tally, serve)?;
        let (ticket, free) = (reserved.ticket, reserved.free.expect("reserved"));
        let entry = self.entry(ticket);
        Self::encode(buf, op, ticket, key, payload, used);
        // Never left in this host's cache (a sender that stops for good here leaves
        // nothing to land over a later lap's entry).
        memory.write_non_temporal(entry, &buf[..used]);
        memory.fence();
        tally.lines_written_back(used as u64 / LINE_BYTES);
        let state = self.state(pod, ticket);
        tally.scr_atomics(1);
        // Release: the request's lines reached memory (written back, fenced) before the
        // server can see it; pairs with the server's Acquire in `claim`. A CAS from the
        // free state we reserved: if it fails, we were taken for dead (paused past the
        // pod's lease, say) and our reservation was withdrawn by our recovery.
        if state
            .compare_exchange(
                free,
                pack(ticket, REQUEST),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // (The guard's withdrawal, a CAS from the free state, finds it changed.)
            drop(reserved);
            return Err(waited_ms(&backoff));
        }
        reserved.done = true;
        // From here on the entry is ours until we free it: if `serve` (the caller's) or
        // anything below panics, the guard lets the entry go, or the ring would jam a lap
        // later.
        let mut pending = PendingCall {
            ring: self,
            pod,
            ticket,
            sender,
            done: false,
        };
        if let Err(waited) =
            self.await_response(pod, ticket, wait_limit, &mut backoff, tally, serve)
        {
            self.let_go(pod, ticket, sender);
            pending.done = true;
            return Err(waited);
        }

        #[cfg(all(test, not(megalon_loom)))]
        tests::before_response_read(ticket);
        // Read the response from memory, then free the entry for the next lap.
        memory.flush(entry, RING_HEADER_BYTES as usize);
        memory.fence();
        tally.lines_invalidated(1);
        let mut header = [0u8; RING_HEADER_BYTES as usize];
        memory.read(entry, &mut header);
        let response = Response {
            status: header[1],
            detail: u64::from_le_bytes(header[16..24].try_into().expect("8 bytes")),
        };
        tally.scr_atomics(2);
        // Release: our reads of the entry are done before the next sender writes it;
        // pairs with the next sender's Acquire when it reserves the entry. (Freed before
        // the check below, which panics: a broken protocol must not jam the ring too.)
        // A CAS, as every move of ours after the publish: a recovery that took us for
        // dead may have freed it for the next lap already.
        let freed = state.compare_exchange(
            pack(ticket, RESPONSE),
            pack(ticket + self.entries, FREE),
            Ordering::Release,
            Ordering::Relaxed,
        );
        self.let_go(pod, ticket, sender);
        pending.done = true;
        if freed.is_err() {
            // Settled for us since the answer came (we were taken for dead, paused past
            // the pod's lease, and recovered): the entry may serve the next lap already,
            // and the line we read be its request. No answer, as a recovered sender's.
            return Err(waited_ms(&backoff));
        }
        // The server echoes the ticket: a response line that is not this request's (a
        // stale line, a lost write-back) is a broken protocol, not an answer.
        assert_eq!(
            header[8..16],
            ticket.to_le_bytes(),
            "response of ring entry {ticket} is not the server's"
        );
        Ok(response)
    }

    /// Reserves the next ticket whose entry is free, serving our own ring while the ring
    /// is full (bounded: `Err` is how long we waited). Returns the ticket and the free
    /// state its entry had.
    ///
    /// The entry's sender word is taken first (a CAS from 0 to `sender`), then the ticket
    /// (the CAS on `tail`): only the sender holding the word moves `tail` past the
    /// entry's ticket, so a sender that dies anywhere from here on is named by its entry,
    /// and its recovery ([`RingGeometry::recover_sender`]) can tell whether it reserved
    /// the ticket (`tail` is past it) and settle the entry.
    fn reserve<'r>(
        &'r self,
        pod: &'r Pod,
        (sender, lives): (u64, &dyn Fn() -> bool),
        backoff: &mut Backoff,
        tally: &dyn Tally,
        serve: &mut dyn FnMut() -> ControlFlow<()>,
    ) -> Result<Reserving<'r>, u64> {
        // The tail and the state the last look found: a look that finds a word as the last
        // one did reads a line nobody changed since, a hit in the coherent cache, and is
        // not counted (as a server's poll that finds nothing): a sender waiting out a full
        // ring counts the lines that changed, not its looks.
        let mut last: Option<(u64, u64)> = None;
        loop {
            let ticket = self.tail(pod).load(Ordering::SeqCst);
            // Acquire: pairs with the Release that freed the entry (the last sender's in
            // `call`, or the server's in `claim` for a withdrawn one); whoever used it
            // last is done with its lines.
            let state = self.state(pod, ticket).load(Ordering::Acquire);
            let seen = last.replace((ticket, state));
            tally.scr_atomics(
                u64::from(seen.map(|(t, _)| t) != Some(ticket))
                    + u64::from(seen != Some((ticket, state))),
            );
            if self.is_free(ticket, state) {
                tally.scr_atomics(2);
                let word = self.sender(pod, ticket);
                if word
                    .compare_exchange(0, sender, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    // Another sender is reserving it (a dead one until its recovery).
                    let give_up = serve().is_break();
                    if !backoff.snooze() || give_up {
                        return Err(waited_ms(backoff));
                    }
                    continue;
                }
                // The word is let go of on every way out but the reservation's, a panic of
                // `lives` (the caller's) included: a word left taken stops every sender at
                // this entry for as long as we live.
                let mut reserving = Reserving {
                    ring: self,
                    pod,
                    ticket,
                    sender,
                    free: None,
                    done: false,
                };
                // Taken for dead before the word was ours: our recovery found nothing of
                // ours here, and will not look again. (The look after the tail CAS below
                // would find it too; this one spares a reservation to withdraw.)
                if !mutants::skipped(Step::RingSenderChecksItLives) && !lives() {
                    return Err(waited_ms(backoff));
                }
                #[cfg(all(test, not(megalon_loom)))]
                tests::before_tail_cas(ticket);
                if self
                    .tail(pod)
                    .compare_exchange(ticket, ticket + 1, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    // A sender paused past its lease before this CAS was recovered: the
                    // tail not past the ticket yet, its recovery let the word go and
                    // settled nothing. The ticket is its own now, and nobody else's to
                    // settle: it withdraws it (the server skips it) and sends nothing. (A
                    // CAS from the free state: settled since, it is left as it is.)
                    // The look at the word this thread's CAS took a moment ago is a hit in
                    // the coherent cache unless a recovery moved it: not counted.
                    // (The guard withdraws it; its let-go, a CAS from our word, finds
                    // another's or none.)
                    reserving.free = Some(state);
                    // And our life looked at again: the word names a life, not a thread,
                    // and a sibling thread of ours may hold it for a moment, taken once
                    // our recovery let it go (its CAS from 0 comes before its own look at
                    // our life). The word alone then says "ours", and we would publish
                    // with nobody named by the entry once the sibling lets go: stopped
                    // for good then (the process exits), the ring jams a lap later. Our
                    // life is marked dead before our recovery loads the words, so a life
                    // found alive here is one whose recovery, if any comes, finds this
                    // word ours and the tail past the ticket.
                    let looks = !mutants::skipped(Step::RingSenderChecksItLives)
                        && !mutants::skipped(Step::RingSenderLooksAgainOnceReserved);
                    if word.load(Ordering::SeqCst) != sender || (looks && !lives()) {
                        return Err(waited_ms(backoff));
                    }
                    return Ok(reserving);
                }
                // Reserved, used and freed since we looked: not ours (the guard lets the
                // word go).
                continue;
            }
            if unpack(state).0 < ticket {
                // The ring is full: the entry still serves the previous lap.
                let give_up = serve().is_break();
                if !backoff.snooze() || give_up {
                    return Err(waited_ms(backoff));
                }
            }
            // Otherwise another sender reserved `ticket` since we loaded the tail: look
            // again at the next one.
        }
    }

    /// Writes a request into `buf`, in whole lines (`used` bytes): header, key, payload.
    fn encode(buf: &mut [u8], op: u8, ticket: u64, key: &[u8], payload: &[u8], used: usize) {
        let key_at = RING_HEADER_BYTES as usize;
        let payload_at = key_at + key_area(key.len()) as usize;
        buf[..key_at].fill(0);
        buf[0] = op;
        buf[2..4].copy_from_slice(&(key.len() as u16).to_le_bytes());
        buf[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        buf[8..16].copy_from_slice(&ticket.to_le_bytes());
        buf[key_at..key_at + key.len()].copy_from_slice(key);
        buf[key_at + key.len()..payload_at].fill(0);
        buf[payload_at..payload_at + payload.len()].copy_from_slice(payload);
        buf[payload_at + payload.len()..used].fill(0);
    }

    /// Waits for the response to `ticket`, serving our own ring meanwhile. Past the wait
    /// limit (or at once, when `serve` breaks) an unclaimed request is withdrawn, and past
    /// twice the limit a claimed one is abandoned (the server frees it when it answers): `Err` is how long we waited, and
    /// the entry is no longer ours.
    fn await_response(
        &self,
        pod: &Pod,
        ticket: u64,
        wait_limit: Duration,
        backoff: &mut Backoff,
        tally: &dyn Tally,
        serve: &mut dyn FnMut() -> ControlFlow<()>,
    ) -> Result<(), u64> {
        let state = self.state(pod, ticket);
        // Compared as a duration: doubled in whole milliseconds, a limit of 1.999 ms gave up
        // on a claimed request at 2 ms, and one under 1 ms at once.
        let claimed_limit = wait_limit.saturating_mul(2);
        // What the last poll found: a poll that finds the same reads a line nobody changed
        // since, a hit in the coherent cache, and is not counted (as a server's poll that
        // finds nothing). A wait counts the moves of the entry it sees, not its spins. The
        // first finds the request this sender published, unless the server moved it.
        let mut last = Some(pack(ticket, REQUEST));
        loop {
            // Acquire: pairs with the server's Release in `respond`.
            let now = state.load(Ordering::Acquire);
            if last.replace(now) != Some(now) {
                tally.scr_atomics(1);
            }
            if now == pack(ticket, RESPONSE) {
                return Ok(());
            }
            if now != pack(ticket, REQUEST)
                && now != pack(ticket, CLAIMED)
                && now != pack(ticket, ANSWERING)
            {
                // Settled for us: we were taken for dead (paused past the pod's lease)
                // and recovered; the entry is no longer ours, and no answer comes.
                return Err(waited_ms(backoff));
            }
            let give_up = serve().is_break();
            backoff.snooze();
            // Past the limit, or told the server will not answer: an unclaimed request is
            // withdrawn. A claimed one is waited for until twice the limit.
            let withdraw_now = give_up && now == pack(ticket, REQUEST);
            if !(backoff.expired() || withdraw_now) {
                continue;
            }
            if now == pack(ticket, REQUEST) {
                // The server may claim the request between our load and this CAS; then
                // the CAS fails and we wait on for its response. If the CAS wins, the
                // server's claim CAS fails and it skips the entry.
                tally.scr_atomics(1);
                if state
                    .compare_exchange(
                        now,
                        pack(ticket, WITHDRAWN),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return Err(waited_ms(backoff));
                }
                continue; // claimed meanwhile: wait on
            }
            if backoff.waited() >= claimed_limit {
                // The server holds the request: it frees the entry when it answers (or,
                // if it answered just now, we read its response after all).
                tally.scr_atomics(1);
                let abandoned = if now == pack(ticket, ANSWERING) {
                    pack(ticket, ABANDONED_ANSWERING)
                } else {
                    pack(ticket, ABANDONED)
                };
                if state
                    .compare_exchange(now, abandoned, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return Err(waited_ms(backoff));
                }
            }
        }
    }

    /// Serves one claimed request: reads it into `buf`, has `handle` answer it, and
    /// responds. If `read`, `handle` or `tally` panics before the response is published,
    /// the request is answered `on_panic` before the panic goes on, so that its sender is
    /// not left waiting and the entry is freed (a claimed request nobody answers holds its
    /// entry for good).
    #[allow(clippy::too_many_arguments)]
    pub fn serve(
        &self,
        pod: &Pod,
        memory: &Memory,
        claimed: Claimed,
        buf: &mut [u8],
        tally: &dyn Tally,
        on_panic: Response,
        handle: impl FnOnce(&Request, &[u8]) -> Response,
    ) {
        struct AnswerOnUnwind<'a> {
            ring: &'a RingGeometry,
            pod: &'a Pod,
            memory: &'a Memory,
            claimed: Claimed,
            response: Option<Response>,
        }
        impl Drop for AnswerOnUnwind<'_> {
            fn drop(&mut self) {
                if let Some(response) = self.response.take() {
                    let mut header = [0u8; RING_HEADER_BYTES as usize];
                    header[8..16].copy_from_slice(&self.claimed.ticket.to_le_bytes());
                    self.ring.respond(
                        self.pod,
                        self.memory,
                        self.claimed,
                        &mut header,
                        response,
                        &(),
                    );
                }
            }
        }
        let mut guard = AnswerOnUnwind {
            ring: self,
            pod,
            memory,
            claimed,
            response: Some(on_panic),
        };
        let request = self.read(memory, claimed, buf, tally);
        let response = handle(&request, buf);
        // Disarmed only once answered: `respond` counts with the caller's tally before it
        // publishes, and a panic there left the request claimed and answered by nobody
        // (its sender gave up after twice its limit, and the entry stayed abandoned). The
        // guard's answer is published in its place (`respond` answers only a request
        // still claimed).
        self.respond(pod, memory, claimed, buf, response, tally);
        guard.response = None;
    }

    /// Whether a request (or a withdrawn one) waits at the head: two SCR loads, what a
    /// server pays to poll. Not counted: a poll that finds nothing reads lines nothing
    /// changed (hits in the coherent cache), and one that finds a request is followed by
    /// [`claim`](Self::claim), which loads the same two words again and counts them.
    #[inline]
    pub fn pending(&self, pod: &Pod) -> bool {
        let head = self.head(pod).load(Ordering::Relaxed);
        let state = self.state(pod, head).load(Ordering::Relaxed);
        state == pack(head, REQUEST) || state == pack(head, WITHDRAWN)
    }

    /// Claims the request at the head, skipping withdrawn ones (the server: one at a
    /// time per ring). `None` if none is waiting.
    pub fn claim(&self, pod: &Pod, tally: &dyn Tally) -> Option<Claimed> {
        // The head our last round left: a head found elsewhere was moved by another
        // (our recovery, the id's next life: we were taken for dead, paused past the
        // lease) and what waits there is not ours to claim.
        let mut expected = None;
        loop {
            // Relaxed: only the server moves the head, and one server runs at a time
            // (the caller's serving lock orders one server after the last).
            let head = self.head(pod).load(Ordering::Relaxed);
            if expected.is_some_and(|expected| expected != head) {
                return None;
            }
            let state = self.state(pod, head);
            // Acquire: pairs with the sender's Release that published the request.
            let now = state.load(Ordering::Acquire);
            if now != pack(head, WITHDRAWN) && now != pack(head, REQUEST) {
                // Nothing waits: not counted, as a poll that finds nothing is not (after
                // a served request, the words this server just moved: hits).
                return None;
            }
            tally.scr_atomics(2);
            if now == pack(head, WITHDRAWN) {
                #[cfg(all(test, not(megalon_loom)))]
                tests::before_skip_store(head);
                // The sender gave up and touches the entry no more. Release: pairs with
                // the next sender's Acquire when it reserves the entry. CASes, as every
                // move of the server's: one paused here through its recovery (and the
                // next server's laps) changes nothing when it resumes.
                let _ = state.compare_exchange(
                    now,
                    pack(head + self.entries, FREE),
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                let passed = self.pass(pod, head);
                tally.scr_atomics(2);
                if !passed {
                    return None;
                }
                expected = Some(head + 1);
                continue;
            }
            tally.scr_atomics(2);
            if state
                .compare_exchange(
                    now,
                    pack(head, CLAIMED),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                expected = Some(head);
                continue; // withdrawn just now
            }
            #[cfg(all(test, not(megalon_loom)))]
            tests::before_claim_pass(head);
            // The head moved by another between our claim and our pass: a recoverer of
            // this id (we were taken for dead, or one of an earlier life paused through
            // ours) took the claim at its head for the dead server's and answers it.
            if !self.pass(pod, head) {
                return None;
            }
            return Some(Claimed { ticket: head });
        }
    }

    /// Moves the head from `ticket` past it, by a CAS: a server paused through its
    /// recovery never moves back a head that the recovery or the next server moved on.
    /// Release: the claim (or the skip) of `ticket` comes before the head past it; pairs
    /// with the Acquire (SeqCst) load of the head in `recover_server`, which takes every
    /// entry below the head as settled or claimed by the dead server. (Relaxed held on
    /// x86 only: elsewhere the recoverer could see the head moved and the request still
    /// unclaimed, and leave it claimed by nobody.)
    fn pass(&self, pod: &Pod, ticket: u64) -> bool {
        self.head(pod)
            .compare_exchange(ticket, ticket + 1, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Reads a claimed request into `buf` from memory (invalidating its lines first).
    ///
    /// # Panics
    /// If `buf` is shorter than an entry, or the entry's header does not carry the
    /// claimed ticket (a stale or lost request line: a broken protocol).
    pub fn read(
        &self,
        memory: &Memory,
        claimed: Claimed,
        buf: &mut [u8],
        tally: &dyn Tally,
    ) -> Request {
        assert!(
            buf.len() as u64 >= self.entry_bytes,
            "a {}-byte buffer for {}-byte ring entries",
            buf.len(),
            self.entry_bytes
        );
        let entry = self.entry(claimed.ticket);
        let header = RING_HEADER_BYTES as usize;
        memory.flush(entry, header);
        memory.fence();
        memory.read(entry, &mut buf[..header]);
        let key_len = u16::from_le_bytes([buf[2], buf[3]]) as usize;
        let payload_len = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
        // The sender wrote its ticket: any other value is a stale or lost request line.
        assert_eq!(
            buf[8..16],
            claimed.ticket.to_le_bytes(),
            "request in ring entry {} is not its sender's",
            claimed.ticket
        );
        let payload_at = header + key_area(key_len) as usize;
        let end = payload_at + payload_len;
        let op = if (end as u64) <= self.entry_bytes {
            buf[0]
        } else {
            NO_OP
        };
        let end = end.min(self.entry_bytes as usize);
        memory.flush(entry + header as u64, end - header);
        memory.fence();
        memory.read(entry + header as u64, &mut buf[header..end]);
        tally.lines_invalidated((end as u64).div_ceil(LINE_BYTES));
        Request {
            op,
            key: header..header + key_len.min(end - header),
            payload: payload_at.min(end)..end,
        }
    }

    /// Answers a claimed request: writes `response` into its header line, writes it
    /// back, then publishes it. `buf` holds the request's header as [`read`](Self::read)
    /// left it.
    pub fn respond(
        &self,
        pod: &Pod,
        memory: &Memory,
        claimed: Claimed,
        buf: &mut [u8],
        response: Response,
        tally: &dyn Tally,
    ) {
        let entry = self.entry(claimed.ticket);
        let header = &mut buf[..RING_HEADER_BYTES as usize];
        debug_assert_eq!(header[8..16], claimed.ticket.to_le_bytes());
        // Still ours to answer? A server taken for dead (paused past the pod's lease in
        // its handler) was recovered, and its recovery answered for it: the entry may
        // serve the next lap already, and our header line would land over that request
        // (even once we know we are dead: a move back that finds so answers "gone").
        // Only the window from this look to the store is left to the lease.
        let now = self.state(pod, claimed.ticket).load(Ordering::Acquire);
        tally.scr_atomics(1);
        if now != pack(claimed.ticket, CLAIMED) && now != pack(claimed.ticket, ABANDONED) {
            return;
        }
        header[1] = response.status;
        header[16..24].copy_from_slice(&response.detail.to_le_bytes());
        memory.write_non_temporal(entry, header);
        memory.fence();
        tally.lines_written_back(1);
        // Release: the response line reached memory before the sender can see it; pairs
        // with the sender's Acquire load in `call`. A sender that gave up (abandoned) reads
        // nothing: the entry is free for the next lap at once.
        tally.scr_atomics(1);
        self.publish_response(pod, claimed.ticket);
    }

    /// Moves `ticket`'s entry from claimed to answered, or, if its sender abandoned it, to
    /// free for the next lap: each by a CAS from the state it leaves, so that one who comes
    /// late (a server only paused while its ring was recovered) changes nothing.
    fn publish_response(&self, pod: &Pod, ticket: u64) {
        let state = self.state(pod, ticket);
        if state
            .compare_exchange(
                pack(ticket, CLAIMED),
                pack(ticket, RESPONSE),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            let _ = state.compare_exchange(
                pack(ticket, ABANDONED),
                pack(ticket + self.entries, FREE),
                Ordering::Release,
                Ordering::Relaxed,
            );
        }
    }

    /// After the sender `sender` died (its host declared dead): settles every entry it
    /// held, as it would have had it given up, and lets go of it. A reservation it made
    /// and never published (`tail` is past the entry's free ticket) is withdrawn (the
    /// server skips it); an unclaimed request is withdrawn; a claimed one abandoned (the
    /// server frees it when it answers); an answer it never read freed for the next lap.
    /// Without this the first stops the server at that ticket for good, and the others
    /// leave the entry taken: a lap later the ring is full for every sender. Each move is
    /// a CAS from the state found, and the sender's own moves after its reservation are
    /// CASes too, so a sender only paused while it was recovered changes nothing when it
    /// resumes. Returns how many entries it held.
    pub fn recover_sender(&self, pod: &Pod, sender: u64) -> u64 {
        self.recover_senders(pod, |word| sender != 0 && word == sender)
    }

    /// [`RingGeometry::recover_sender`] for every sender whose word `dead` says is dead: the
    /// sessions of an id's earlier lives, say, when one of them was taken over by a
    /// joiner that died in its rescue before it recovered them.
    pub fn recover_senders(&self, pod: &Pod, dead: impl Fn(u64) -> bool) -> u64 {
        let mut held = 0;
        for index in 0..self.entries {
            let word = self.sender(pod, index);
            let sender = word.load(Ordering::SeqCst);
            if sender == 0 || !dead(sender) {
                continue;
            }
            // The ring's server lives and moves the entry on meanwhile (claims, answers):
            // settled from the state it is in, again until the CAS holds, or there is
            // nothing of the sender's to settle (the states only move forward, and past
            // an answer only the sender moves them).
            while let Some((now, to)) = self.settle_for_dead_sender(pod, index) {
                // Still the dead sender's entry? One only paused may have resumed since
                // the look at its word, finished with the entry and let go of it, and a
                // live sender reserved the entry's next lap: that state is not ours to
                // settle. (Looked at after the state: a state it still holds is the one
                // its holder reserved, and a later holder took the word first.)
                if word.load(Ordering::SeqCst) != sender {
                    break;
                }
                #[cfg(all(test, not(megalon_loom)))]
                tests::before_recovery_cas(index);
                // Release: pairs with the server's Acquire (withdrawn) or the next
                // sender's (free).
                if self
                    .state(pod, index)
                    .compare_exchange(now, to, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
            }
            self.let_go(pod, index, sender);
            held += 1;
        }
        held
    }

    /// Entry `index`'s state now, and what it becomes for a sender that died holding it
    /// (`None`: nothing to do).
    fn settle_for_dead_sender(&self, pod: &Pod, index: u64) -> Option<(u64, u64)> {
        let now = self.state(pod, index).load(Ordering::SeqCst);
        // A zero word is the first lap's free state of ticket `index`.
        let (ticket, kind) = if now == 0 { (index, FREE) } else { unpack(now) };
        let to = match kind {
            // SeqCst: the tail read after the word (its holder moves the tail only
            // holding it).
            FREE if self.tail(pod).load(Ordering::SeqCst) > ticket => pack(ticket, WITHDRAWN),
            REQUEST => pack(ticket, WITHDRAWN),
            CLAIMED => pack(ticket, ABANDONED),
            ANSWERING => pack(ticket, ABANDONED_ANSWERING),
            RESPONSE => pack(ticket + self.entries, FREE),
            _ => return None,
        };
        Some((now, to))
    }

    /// After this ring's server died (its host declared dead: none of its threads runs
    /// any more, and no new server runs before its recovery is done): answers `response`
    /// to every request it claimed and never answered, and frees the entry of every one
    /// whose sender gave up on it. Without this such an entry stays taken for good, and a
    /// lap later the ring is full for every sender (the next holder of the id serves from
    /// where the dead one's head was). Returns how many entries it settled.
    pub fn recover_server(&self, pod: &Pod, memory: &Memory, response: Response) -> u64 {
        // The server that moved the head is gone (the caller knows it).
        let head = self.head(pod).load(Ordering::SeqCst);
        let mut settled = 0;
        let mut header = [0u8; RING_HEADER_BYTES as usize];
        // A claimed request is below the head, less than a lap below it, or at the head
        // itself: a server dies between its claim's CAS and its move of the head.
        for ticket in head.saturating_sub(self.entries)..=head {
            let state = self.state(pod, ticket);
            // Acquire: pairs with the sender's Release that published the request.
            let mut now = state.load(Ordering::Acquire);
            // A claim at the head we loaded may be a live server's: one paused here and
            // taken over, its id recovered again and served by the id's next life, which
            // claimed the request at that head and moved the head on. Not the dead
            // server's to answer (nor, abandoned, ours to free). (The window from this
            // look to the CAS is the lease's.)
            // So a claim at the head is ours only once we moved the head past it (the
            // claimant's own pass then fails, and it serves nothing): a server between
            // its claim's CAS and its pass has the head not moved yet.
            if ticket == head
                && (now == pack(ticket, CLAIMED) || now == pack(ticket, ABANDONED))
                && self
                    .head(pod)
                    .compare_exchange(head, head + 1, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if now == pack(ticket, CLAIMED) {
                #[cfg(all(test, not(megalon_loom)))]
                tests::before_server_answer(ticket);
                // Taken from the dead server before its header line is written: one only
                // paused may answer it meanwhile, its sender read the answer and free the
                // entry, and a live sender publish the next lap's request there; the
                // header written then lands over that request. A CAS from claimed: if it
                // fails, the request was answered after all, or its sender gave up.
                now = match state.compare_exchange(
                    now,
                    pack(ticket, ANSWERING),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => pack(ticket, ANSWERING),
                    Err(found) => found,
                };
            }
            if now == pack(ticket, ANSWERING) {
                #[cfg(all(test, not(megalon_loom)))]
                tests::before_recovery_header(ticket);
                let entry = self.entry(ticket);
                memory.flush(entry, header.len());
                memory.fence();
                memory.read(entry, &mut header);
                // The sender's ticket, echoed, and the response: what `respond` writes.
                header[8..16].copy_from_slice(&ticket.to_le_bytes());
                header[1] = response.status;
                header[16..24].copy_from_slice(&response.detail.to_le_bytes());
                // Still answering? Answering is no recoverer's own: one paused since its
                // CAS and taken over may find the request answered by the next recovery
                // of the server, read and freed, and the entry serving the next lap; its
                // header would land over that request. (The window from this look to the
                // store is the lease's, as in `respond`.)
                if state.load(Ordering::Acquire) == now {
                    memory.write_non_temporal(entry, &header);
                    memory.fence();
                }
                // Release: the header reached memory before the sender can see it.
                if state
                    .compare_exchange(
                        now,
                        pack(ticket, RESPONSE),
                        Ordering::Release,
                        Ordering::Relaxed,
                    )
                    .is_err()
                {
                    let _ = state.compare_exchange(
                        pack(ticket, ABANDONED_ANSWERING),
                        pack(ticket + self.entries, FREE),
                        Ordering::Release,
                        Ordering::Relaxed,
                    );
                }
                settled += 1;
            } else if now == pack(ticket, ABANDONED_ANSWERING) {
                // An earlier recovery died after its header: nobody reads the entry.
                let _ = state.compare_exchange(
                    now,
                    pack(ticket + self.entries, FREE),
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                settled += 1;
            } else if now == pack(ticket, ABANDONED) {
                self.publish_response(pod, ticket);
                settled += 1;
            }
        }
        // The entry at the head went past it (claimed, now answered or freed; or a
        // withdrawn one the dead server freed before it moved the head): the next server
        // starts after it. A CAS: a recoverer paused and taken over must not move back a
        // head a new server has moved since.
        let now = self.state(pod, head).load(Ordering::SeqCst);
        let (ticket, kind) = unpack(now);
        let past = now != 0
            && (ticket > head
                || (ticket == head
                    // (A claim at the head moved it in the loop above: one found claimed
                    // here now is a live server's, between its claim and its pass.)
                    && matches!(kind, RESPONSE | ANSWERING | ABANDONED_ANSWERING)));
        if past {
            let _ = self.head(pod).compare_exchange(
                head,
                head + 1,
                Ordering::SeqCst,
                Ordering::Relaxed,
            );
        }
        settled
    }
}

/// A sender's published request, until it reads the response or gives the entry up:
/// dropped early (a panic), it gives the entry up as a timed-out sender would.
struct PendingCall<'a> {
    ring: &'a RingGeometry,
    pod: &'a Pod,
    ticket: u64,
    sender: u64,
    done: bool,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let state = self.ring.state(self.pod, self.ticket);
        let ticket = self.ticket;
        // Unclaimed: withdraw it (the server skips and frees it). Claimed: abandon it (the
        // server frees it when it answers). Answered: free it ourselves. Then the entry's
        // sender word.
        let _let_go = LetGo(self.ring, self.pod, self.ticket, self.sender);
        for (from, to) in [
            (pack(ticket, REQUEST), pack(ticket, WITHDRAWN)),
            (pack(ticket, CLAIMED), pack(ticket, ABANDONED)),
            (pack(ticket, ANSWERING), pack(ticket, ABANDONED_ANSWERING)),
            (
                pack(ticket, RESPONSE),
                pack(ticket + self.ring.entries, FREE),
            ),
        ] {
            // Release: our reads of the entry (if any) are done before its next user's.
            if state
                .compare_exchange(from, to, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// A sender's entry from the moment its sender word is taken until its request is
/// published (or it gives up): dropped before (`done` unset), by a way out or a panic of
/// the caller's `lives` or `tally`, it withdraws the ticket if it reserved it (the server
/// skips it, as a recovered sender's) and lets go of the word. A reservation left
/// unpublished stopped the server at its ticket for good, and a word left taken stopped
/// every sender at its entry, for as long as the sender's host lived.
struct Reserving<'a> {
    ring: &'a RingGeometry,
    pod: &'a Pod,
    ticket: u64,
    sender: u64,
    /// The entry's free state, once the ticket is reserved (the tail past it).
    free: Option<u64>,
    /// Published: the entry is [`PendingCall`]'s now.
    done: bool,
}

impl Drop for Reserving<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(free) = self.free {
            // A CAS from the free state we reserved: settled since (our recovery
            // withdrew it, and a later lap may use it), it is left as it is.
            let _ = self.ring.state(self.pod, self.ticket).compare_exchange(
                free,
                pack(self.ticket, WITHDRAWN),
                Ordering::Release,
                Ordering::Relaxed,
            );
        }
        self.ring.let_go(self.pod, self.ticket, self.sender);
    }
}

/// Lets go of an entry's sender word when dropped ([`RingGeometry::let_go`]).
struct LetGo<'a>(&'a RingGeometry, &'a Pod, u64, u64);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        self.0.let_go(self.1, self.2, self.3);
    }
}

fn waited_ms(backoff: &Backoff) -> u64 {
    backoff.waited().as_millis() as u64
}

#[cfg(all(test, not(megalon_loom)))]
mod tests;
