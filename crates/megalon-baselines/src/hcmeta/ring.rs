//! A host's RPC ring: the requests other hosts send their owner ("share this key",
//! "create", "delete"), as Tigon's hosts message each other through CXL memory.
//!
//! One ring per host, many senders (every thread of every other host), one server at a
//! time (whichever thread of the owner holds its serving lock). Cursors and one state
//! word per entry live in SCR; the entries (a header line, the key, the object for a
//! create) live in LNR.
//!
//! ```text
//! state word of entry i:  ticket << 3 | state      (ticket t uses entry t % entries)
//! free(t) --sender reserves t (CAS tail), writes, writes back--> request(t)
//! request(t) --server claims--> claimed(t) --server writes the response back--> response(t)
//! response(t) --sender reads it--> free(t + entries)
//! request(t) --sender gives up--> withdrawn(t) --server skips it--> free(t + entries)
//! ```
//!
//! Both sides follow the flush rules: the writer of an entry's lines writes them back and
//! fences before the Release store of the state word that publishes them; the reader
//! invalidates them after its Acquire load of that word and before it reads.
//!
//! A sender reserves an entry only once it is free (it never holds a ticket it cannot
//! use), so a sender that gives up leaves nothing behind. Waiting for an entry or for a
//! response is bounded: the sender serves its own host's ring meanwhile (so two hosts
//! asking each other both progress), and past the wait limit it withdraws an unclaimed
//! request and reports the owner unresponsive. A request the owner already claimed is
//! waited for up to twice the limit; past that, whether it took effect is unknown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use megalon_core::{Memory, Pod, LINE_BYTES};

use super::counters::{Counter, Counters};
use super::geometry::RING_HEADER_BYTES;
use super::wait::Backoff;

const FREE: u64 = 0;
const REQUEST: u64 = 1;
const CLAIMED: u64 = 2;
const RESPONSE: u64 = 3;
const WITHDRAWN: u64 = 4;

fn pack(ticket: u64, state: u64) -> u64 {
    ticket << 3 | state
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    /// Share the object (put it in the CXL index) if it exists.
    Share = 1,
    /// Create the object with the payload's bytes.
    Create = 2,
    /// Delete the object.
    Delete = 3,
}

impl Op {
    fn from_byte(byte: u8) -> Option<Op> {
        match byte {
            1 => Some(Op::Share),
            2 => Some(Op::Create),
            3 => Some(Op::Delete),
            _ => None,
        }
    }
}

/// The owner's answer: a status and a detail word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u8,
    pub(crate) detail: u64,
}

/// A request the server has claimed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claimed {
    ticket: u64,
}

/// A request as the server read it: the key is `buf[key]`, the payload `buf[payload]`.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) op: Option<Op>,
    pub(crate) key: std::ops::Range<usize>,
    pub(crate) payload: std::ops::Range<usize>,
}

/// Where one host's ring is.
#[derive(Clone, Debug)]
pub(crate) struct RingGeometry {
    pub(crate) tail_offset: u64,
    pub(crate) head_offset: u64,
    pub(crate) states_offset: u64,
    /// The first entry (absolute offset, in LNR).
    pub(crate) entries_offset: u64,
    pub(crate) entries: u64,
    pub(crate) entry_bytes: u64,
}

/// Bytes of a ring entry for keys up to `max_key_bytes` and objects of `object_bytes`.
pub(crate) fn entry_bytes(max_key_bytes: usize, object_bytes: u64) -> u64 {
    (RING_HEADER_BYTES + key_area(max_key_bytes) + object_bytes).next_multiple_of(LINE_BYTES)
}

fn key_area(max_key_bytes: usize) -> u64 {
    (max_key_bytes as u64).next_multiple_of(8)
}

impl RingGeometry {
    fn tail<'p>(&self, pod: &'p Pod) -> &'p AtomicU64 {
        pod.scr_u64(self.tail_offset)
    }

    fn head<'p>(&self, pod: &'p Pod) -> &'p AtomicU64 {
        pod.scr_u64(self.head_offset)
    }

    fn state<'p>(&self, pod: &'p Pod, ticket: u64) -> &'p AtomicU64 {
        pod.scr_u64(self.states_offset + (ticket % self.entries) * 8)
    }

    fn entry(&self, ticket: u64) -> u64 {
        self.entries_offset + (ticket % self.entries) * self.entry_bytes
    }

    /// Makes every entry free for its first ticket (a new pod's SCR is zero, which is
    /// only right for entry 0).
    pub(crate) fn initialize(&self, pod: &Pod) {
        for ticket in 0..self.entries {
            self.state(pod, ticket)
                .store(pack(ticket, FREE), Ordering::Release);
        }
    }

    /// Sends a request and waits for the response (any host but the owner). `buf` is
    /// the sender's scratch entry; `serve` serves the sender's own ring while it waits.
    /// `Err(waited_ms)` if the owner did not answer within the limit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call(
        &self,
        pod: &Pod,
        memory: &Memory,
        buf: &mut [u8],
        op: Op,
        key: &[u8],
        payload: &[u8],
        wait_limit: Duration,
        c: &Counters,
        serve: &mut dyn FnMut(),
    ) -> Result<Response, u64> {
        let mut backoff = Backoff::new(wait_limit);
        // Reserve the next ticket whose entry is free.
        let ticket = loop {
            let ticket = self.tail(pod).load(Ordering::Relaxed);
            // Acquire: pairs with the Release that freed the entry; whoever used it last
            // is done with its lines.
            let state = self.state(pod, ticket).load(Ordering::Acquire);
            c.add(Counter::ScrAtomics, 2);
            if state == pack(ticket, FREE) {
                c.add(Counter::ScrAtomics, 1);
                if self
                    .tail(pod)
                    .compare_exchange(ticket, ticket + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    break ticket;
                }
                continue;
            }
            if state >> 3 < ticket {
                // The ring is full: the entry still serves the previous lap.
                serve();
                if !backoff.snooze() {
                    return Err(backoff.waited_ms());
                }
            }
        };

        // Write the request in whole lines, write them back, then publish.
        let key_at = RING_HEADER_BYTES as usize;
        let payload_at = key_at + key_area(key.len()) as usize;
        let used = (payload_at + payload.len()).next_multiple_of(LINE_BYTES as usize);
        debug_assert!(used as u64 <= self.entry_bytes);
        buf[..key_at].fill(0);
        buf[0] = op as u8;
        buf[2..4].copy_from_slice(&(key.len() as u16).to_le_bytes());
        buf[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        buf[8..16].copy_from_slice(&ticket.to_le_bytes());
        buf[key_at..key_at + key.len()].copy_from_slice(key);
        buf[key_at + key.len()..payload_at].fill(0);
        buf[payload_at..payload_at + payload.len()].copy_from_slice(payload);
        buf[payload_at + payload.len()..used].fill(0);
        let entry = self.entry(ticket);
        memory.write(entry, &buf[..used]);
        memory.write_back(entry, used);
        memory.fence();
        c.add(Counter::LinesWrittenBack, used as u64 / LINE_BYTES);
        let state = self.state(pod, ticket);
        c.add(Counter::ScrAtomics, 1);
        // Release: the request's lines reached memory (written back, fenced) before the
        // server can see it; pairs with the server's Acquire in `claim`.
        state.store(pack(ticket, REQUEST), Ordering::Release);

        // Wait for the response, serving our own ring meanwhile.
        let claimed_limit = 2 * wait_limit;
        loop {
            // Acquire: pairs with the server's Release in `respond`.
            let now = state.load(Ordering::Acquire);
            c.add(Counter::ScrAtomics, 1);
            if now == pack(ticket, RESPONSE) {
                break;
            }
            serve();
            backoff.snooze();
            if backoff.expired() {
                if now == pack(ticket, REQUEST) {
                    c.add(Counter::ScrAtomics, 1);
                    if state
                        .compare_exchange(
                            now,
                            pack(ticket, WITHDRAWN),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        return Err(backoff.waited_ms());
                    }
                    continue; // claimed meanwhile: wait on
                }
                if backoff.waited_ms() >= claimed_limit.as_millis() as u64 {
                    return Err(backoff.waited_ms());
                }
            }
        }

        // Read the response from memory, then free the entry for the next lap.
        memory.flush(entry, RING_HEADER_BYTES as usize);
        memory.fence();
        c.add(Counter::LinesInvalidated, 1);
        let mut header = [0u8; RING_HEADER_BYTES as usize];
        memory.read(entry, &mut header);
        // The server echoes the ticket: a response line that is not this request's (a
        // stale line, a lost write-back) is a broken protocol, not an answer.
        assert_eq!(
            header[8..16],
            ticket.to_le_bytes(),
            "response of ring entry {ticket} is not the server's"
        );
        let response = Response {
            status: header[1],
            detail: u64::from_le_bytes(header[16..24].try_into().expect("8 bytes")),
        };
        c.add(Counter::ScrAtomics, 1);
        // Release: our reads of the entry are done before the next sender writes it.
        state.store(pack(ticket + self.entries, FREE), Ordering::Release);
        Ok(response)
    }

    /// Whether a request (or a withdrawn one) waits at the head: two SCR loads, what
    /// every operation on the host pays to poll (counted in `c` if given).
    #[inline]
    pub(crate) fn pending(&self, pod: &Pod, c: Option<&Counters>) -> bool {
        let head = self.head(pod).load(Ordering::Relaxed);
        let state = self.state(pod, head).load(Ordering::Relaxed);
        if let Some(c) = c {
            c.add(Counter::ScrAtomics, 2);
        }
        state == pack(head, REQUEST) || state == pack(head, WITHDRAWN)
    }

    /// Claims the request at the head, skipping withdrawn ones (the server, holding the
    /// host's serving lock). `None` if none is waiting.
    pub(crate) fn claim(&self, pod: &Pod, c: &Counters) -> Option<Claimed> {
        loop {
            let head = self.head(pod).load(Ordering::Relaxed);
            let state = self.state(pod, head);
            // Acquire: pairs with the sender's Release that published the request.
            let now = state.load(Ordering::Acquire);
            c.add(Counter::ScrAtomics, 2);
            if now == pack(head, WITHDRAWN) {
                state.store(pack(head + self.entries, FREE), Ordering::Release);
                self.head(pod).store(head + 1, Ordering::Relaxed);
                c.add(Counter::ScrAtomics, 2);
                continue;
            }
            if now != pack(head, REQUEST) {
                return None;
            }
            c.add(Counter::ScrAtomics, 2);
            if state
                .compare_exchange(
                    now,
                    pack(head, CLAIMED),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue; // withdrawn just now
            }
            self.head(pod).store(head + 1, Ordering::Relaxed);
            return Some(Claimed { ticket: head });
        }
    }

    /// Reads a claimed request into `buf` from memory.
    pub(crate) fn read(
        &self,
        memory: &Memory,
        claimed: Claimed,
        buf: &mut [u8],
        c: &Counters,
    ) -> Request {
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
            Op::from_byte(buf[0])
        } else {
            None
        };
        let end = end.min(self.entry_bytes as usize);
        memory.flush(entry + header as u64, end - header);
        memory.fence();
        memory.read(entry + header as u64, &mut buf[header..end]);
        c.add(Counter::LinesInvalidated, (end as u64).div_ceil(LINE_BYTES));
        Request {
            op,
            key: header..header + key_len.min(end - header),
            payload: payload_at.min(end)..end,
        }
    }

    /// Answers a claimed request: writes `response` into its header line, writes it
    /// back, then publishes it. `buf` holds the request's header as read.
    pub(crate) fn respond(
        &self,
        pod: &Pod,
        memory: &Memory,
        claimed: Claimed,
        buf: &mut [u8],
        response: Response,
        c: &Counters,
    ) {
        let entry = self.entry(claimed.ticket);
        let header = &mut buf[..RING_HEADER_BYTES as usize];
        header[1] = response.status;
        header[16..24].copy_from_slice(&response.detail.to_le_bytes());
        memory.write(entry, header);
        memory.write_back(entry, header.len());
        memory.fence();
        c.add(Counter::LinesWrittenBack, 1);
        c.add(Counter::ScrAtomics, 1);
        // Release: the response line reached memory before the sender can see it; pairs
        // with the sender's Acquire load in `call`.
        self.state(pod, claimed.ticket)
            .store(pack(claimed.ticket, RESPONSE), Ordering::Release);
    }
}
