//! Tickets: what a read or write in progress holds, and the checked ways to touch the
//! object under one; and where an object's bytes are (CXL, or this host's DRAM).

use super::Host;
use crate::layout::Layout;
use crate::record::RecordShape;
use crate::replica::IndexEntry;

use crate::chaos::Point;
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::mutants::{self, Step};
use crate::sync::{AtomicU64, Ordering};

/// A read in progress, from [`Host::read_start`]: where the object's bytes are and what
/// [`Host::read_end`] checks. Copy the bytes with [`ReadTicket::read`]; trust the copy only
/// once `read_end` says so.
#[derive(Clone, Copy, Debug)]
#[must_use = "a read is only valid once read_end says so"]
pub struct ReadTicket<'h> {
    pub(super) host: &'h Host,
    pub(super) state: ReadState,
}

/// Where an object is, as a ticket holds it: its index handle, its slot, and its bytes in
/// the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) handle: u32,
    pub(super) slot: u64,
    pub(super) offset: u64,
    pub(super) len: usize,
}

impl Place {
    /// The place of the object `entry` names, in a pod of `layout`.
    pub(super) fn of(entry: &IndexEntry, layout: &Layout) -> Self {
        Self {
            handle: entry.handle,
            slot: entry.slot,
            offset: layout.slot_offset(entry.slot),
            len: layout.config.slot_size_bytes as usize,
        }
    }
}

/// What a read ticket holds: the object's place, its stamp when the read started, and
/// what else `read_end` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReadState {
    pub(super) place: Place,
    pub(super) stamp: u64,
    pub(super) guard: Guard,
    /// The index's version at the lookup and the host counter it gave, if the lookup
    /// knows them: while the version stays, no replay changed the stamp, and `read_end`
    /// need not look the object up again.
    pub(super) seen: Option<Seen>,
}

/// What `read_start`'s lookup saw, for `read_end`'s stamp check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) version: u64,
    pub(super) host_counter: Option<u32>,
}

/// What guards a read besides the object's stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    /// A read-shared object: only the log can change it, and the stamp says whether it did.
    Log,
    /// A read-write-shared object: its record and the (even) counter seen at the start,
    /// the record's bits as they were then (`raw`, as [`Records::load_raw`] gives them),
    /// and the record width the record is of.
    ///
    /// [`Records::load_raw`]: crate::record::Records::load_raw
    Record {
        record: u32,
        counter: u32,
        raw: u32,
        shape: RecordShape,
    },
    /// An object in a pod with AllLog coherence: the replicated counter seen at the start
    /// (the stamp guards it; the counter is what this host's lines are once it succeeds).
    Replicated { counter: u32 },
}

/// Checks that `at..at + len` lies within an object of `object_bytes`.
fn within(at: usize, len: usize, object_bytes: usize) -> Result<()> {
    if at.checked_add(len).is_none_or(|end| end > object_bytes) {
        return Err(Error::OutsideObject {
            at,
            len,
            object_bytes,
        });
    }
    Ok(())
}

impl ReadTicket<'_> {
    /// Copies the object's bytes `at..at + buf.len()` into `buf`: the way to read under a
    /// ticket. A range past the object's end is [`Error::OutsideObject`]. The copy may be
    /// torn until [`Host::read_end`] validates it.
    pub fn read(&self, at: usize, buf: &mut [u8]) -> Result<()> {
        within(at, buf.len(), self.state.place.len)?;
        self.host
            .memory()
            .read(self.state.place.offset + at as u64, buf);
        Ok(())
    }

    /// Offset of the object's bytes in the pod, for the raw, unchecked [`crate::Memory`]
    /// layer ([`ReadTicket::read`] is the checked way).
    pub fn offset(&self) -> u64 {
        self.state.place.offset
    }

    /// Bytes of the object (the slot size).
    pub fn len(&self) -> usize {
        self.state.place.len
    }

    /// Objects are never empty: always `false`.
    pub fn is_empty(&self) -> bool {
        self.state.place.len == 0
    }
}

impl ReadState {
    pub(super) fn slot(&self) -> u64 {
        self.place.slot
    }

    pub(super) fn guard(&self) -> Guard {
        self.guard
    }
}

/// A write in progress: the object's record is locked (counter odd) until
/// [`Host::write_end`]. Change the object with [`WriteTicket::write`]. Dropping the ticket
/// ends the write as `write_end` would.
///
/// A ticket that is never dropped (`std::mem::forget`) keeps the record locked while its
/// host lives. When the host leaves, in a pod with undo images
/// ([`CrashSafety::Undo`](crate::CrashSafety)) it leaves as a dead host does, and its
/// recovery puts the object's bytes back as they were before the write and unlocks the
/// record; without them the record stays locked, as a dead host's would.
///
/// A ticket stays on the thread that took it (it is not `Send`): its writes are stores
/// that bypass the cache, and the fence `write_end` runs before it lets go of the undo
/// image and unlocks completes only the stores of its own thread. Ended on another
/// thread, the write could be reported done, and the object read unlocked, before its
/// bytes reached memory.
///
/// ```compile_fail
/// # use megalon_core::{Host, PodConfig, Pod, Backing, Join, HostOptions};
/// # let pod = std::sync::Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).unwrap());
/// # let host = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
/// # host.create(b"k", b"v").unwrap();
/// let host = &host;
/// let ticket = host.write_start(b"k").unwrap();
/// std::thread::scope(|s| {
///     s.spawn(move || host.write_end(ticket));
/// });
/// ```
#[must_use = "the record stays locked until write_end"]
pub struct WriteTicket<'h> {
    pub(super) host: &'h Host,
    pub(super) state: Option<WriteState>,
    /// [`WriteTicket::offset`] was asked for: the caller may have written through the raw
    /// [`crate::Memory`] layer, with plain stores `write_end` must write back.
    pub(super) raw: std::cell::Cell<bool>,
    /// Not `Send` (see above).
    pub(super) on_its_thread: std::marker::PhantomData<*const ()>,
}

/// What a write ticket holds: the object's place, the record it locked ([`NO_RECORD`](crate::event::NO_RECORD)
/// with AllLog coherence) and the counter before the write.
#[derive(Clone, Copy, Debug)]
pub(super) struct WriteState {
    pub(super) place: Place,
    pub(super) record: u32,
    pub(super) counter_before: u32,
    /// The announce word (and undo image) of this write's lock, in a pod with undo images.
    pub(super) hold: Option<u64>,
    /// The object may have been written with plain stores (its ticket's offset was asked
    /// for): `write_end` writes its lines back.
    pub(super) raw: bool,
}

impl WriteTicket<'_> {
    fn state(&self) -> &WriteState {
        self.state.as_ref().expect("live ticket")
    }

    /// Writes `bytes` into the object at byte `at`: the way to write under a ticket. A
    /// range past the object's end is [`Error::OutsideObject`] and writes nothing (a write
    /// through the raw [`crate::Memory`] layer would overwrite the next object).
    pub fn write(&self, at: usize, bytes: &[u8]) -> Result<()> {
        let state = self.state();
        within(at, bytes.len(), state.place.len)?;
        // Declared dead since `write_start` (paused past its lease, or its pump died): the
        // lock is its recovery's, which may have put the undo image back and unlocked;
        // others may write the object now.
        self.host.shared.not_left_to_recovery()?;
        store_object_bytes(self.host.memory(), state.place.offset + at as u64, bytes);
        Ok(())
    }

    /// Copies the object's bytes `at..at + buf.len()` into `buf` (the current version:
    /// no one else writes while the lock is held). A range past the object's end is
    /// [`Error::OutsideObject`].
    pub fn read(&self, at: usize, buf: &mut [u8]) -> Result<()> {
        let state = self.state();
        within(at, buf.len(), state.place.len)?;
        let memory = self.host.memory();
        // This ticket's own stores, non-temporal, reach memory before the copy reads them
        // back (it misses: they dropped their lines).
        memory.fence();
        memory.read(state.place.offset + at as u64, buf);
        Ok(())
    }

    /// Offset of the object's bytes in the pod, for the raw, unchecked [`crate::Memory`]
    /// layer ([`WriteTicket::write`] is the checked way). Write there with
    /// [`Memory::write_non_temporal`], as [`WriteTicket::write`] does: a plain
    /// [`Memory::write`] reaches memory at `write_end` (which writes back the lines of
    /// every ticket whose offset was asked for), but the lines of a process killed before
    /// then stay in its machine's caches and may land after its recovery.
    pub fn offset(&self) -> u64 {
        self.raw.set(true);
        self.state().place.offset
    }

    /// The object's slot (as [`IndexEntry::slot`](crate::IndexEntry::slot) names it), to
    /// name the object: a table of the caller's kept by slot, say. Unlike
    /// [`offset`](Self::offset), it does not ask `write_end` to write the object's lines
    /// back: bytes stored in the slot other than through the ticket may never reach
    /// memory.
    pub fn slot(&self) -> u64 {
        self.state().place.slot
    }

    /// Bytes of the object (the slot size).
    pub fn len(&self) -> usize {
        self.state().place.len
    }

    /// The object's coherence record, locked by this write; [`NO_RECORD`](crate::event::NO_RECORD) in a pod with
    /// [`Coherence::AllLog`](crate::Coherence), where the lock is replicated through the
    /// log instead.
    pub fn record(&self) -> u32 {
        self.state().record
    }

    /// Objects are never empty: always `false`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this write still holds the object's lock: `false` once its host knows it
    /// was declared dead (paused past its lease, or its pump died) in a pod with undo
    /// images, where its recovery may have unlocked the record and others may have
    /// written the object since (and [`WriteTicket::write`] refuses). Look before doing
    /// anything on the lock's behalf outside the object (a page written to a file, a
    /// bit of the application's SCR cleared): a host that went on after its recovery
    /// would undo what others did since. (A pause past the lease between the look and
    /// the act remains the lease's assumption.)
    pub fn still_held(&self) -> bool {
        let held = !self.host.shared.left_to_recovery();
        if held {
            self.host.shared.chaos.point(Point::HeldAfterLook);
        }
        held
    }
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        if let Some(mut state) = self.state.take() {
            state.raw = self.raw.get();
            // The caller may have written part of the object (or panicked while writing):
            // finish the write so that the bytes reach memory and the record is unlocked.
            // In a split pod this cannot fail; in an AllLog pod a failed unlock append is
            // retried by the pump.
            let shared = &self.host.shared;
            let _ = shared.with_counters(|c| shared.write_end(state, c));
        }
    }
}

/// What a completed read or write cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Times the operation started over (reads: failed `read_end`; writes: backed out).
    pub retries: u32,
}

/// Most bytes of an object a read asks the cache to load ahead ([`Source::prefetch`]): a
/// bound, so that a read of a large object does not ask for more lines than the cache
/// holds for it.
const PREFETCH_LIMIT_BYTES: usize = 4096;

/// Where a read copies an object's bytes from.
pub(super) enum Source<'a> {
    /// This host's DRAM: a copy.
    Dram(&'a [u8]),
    /// This host's DRAM: an object in its partition, eight bytes to a word.
    Words(&'a [AtomicU64]),
    /// The object's slot in the pod, at this offset, through this host's cache.
    Pod(&'a Memory, u64),
}

impl Source<'_> {
    /// Starts loading the object's first `len` bytes (at most [`PREFETCH_LIMIT_BYTES`])
    /// into the cache, for a read that copies them in more than one step.
    pub(super) fn prefetch(&self, len: usize) {
        if let Source::Pod(memory, offset) = self {
            memory.prefetch(*offset, len.min(PREFETCH_LIMIT_BYTES));
        }
    }

    /// Copies the object's bytes `at..at + buf.len()` into `buf`.
    pub(super) fn copy(&self, at: usize, buf: &mut [u8]) {
        match self {
            Source::Dram(bytes) => buf.copy_from_slice(&bytes[at..at + buf.len()]),
            Source::Words(words) => {
                // A partial first word, whole words, a partial last word.
                let head = ((8 - at % 8) % 8).min(buf.len());
                let (first, rest) = buf.split_at_mut(head);
                if head > 0 {
                    let word = words[at / 8].load(Ordering::Relaxed).to_le_bytes();
                    first.copy_from_slice(&word[at % 8..at % 8 + head]);
                }
                let whole = &words[(at + head) / 8..];
                let rest_whole = rest.len() / 8;
                let mut chunks = rest.chunks_exact_mut(8);
                for (chunk, word) in (&mut chunks).zip(whole) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                }
                let tail = chunks.into_remainder();
                if !tail.is_empty() {
                    let word = whole[rest_whole].load(Ordering::Relaxed).to_le_bytes();
                    tail.copy_from_slice(&word[..tail.len()]);
                }
            }
            Source::Pod(memory, offset) => memory.read(offset + at as u64, buf),
        }
    }
}

/// Where a write changes an object's bytes.
pub(super) enum Target<'a> {
    /// The object in this host's partition, all of it, under its local lock.
    Dram(&'a mut [u8]),
    /// The object's slot in the pod (offset, length), with the record locked: changed
    /// bytes go to memory with [`store_object_bytes`].
    Pod(&'a Memory, u64, usize),
}

/// Stores `data` into an object's slot at `offset`, under its lock: straight to memory,
/// never left in this host's cache. A writer that stops for good in the middle (killed,
/// its machine running on) thus leaves nothing in its machine's caches that could land
/// after its recovery put the object's undo image back (`docs/memory.md`, "What a
/// stopped process leaves").
pub(super) fn store_object_bytes(memory: &Memory, offset: u64, data: &[u8]) {
    mutants::store(memory, Step::WriteBackBeforeUnlock, offset, data);
}

#[cfg(test)]
mod tests {
    use super::Source;
    use crate::sync::AtomicU64;

    /// A copy out of an object's words, at every offset and length of a 40-byte object
    /// (the length not a multiple of eight), gives the bytes as the object holds them.
    #[test]
    fn a_copy_out_of_words_gives_the_objects_bytes_at_every_offset_and_length() {
        let bytes: Vec<u8> = (0..40u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(11))
            .collect();
        let words: Vec<AtomicU64> = bytes
            .chunks(8)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                AtomicU64::new(u64::from_le_bytes(word))
            })
            .collect();
        for at in 0..=bytes.len() {
            for len in 0..=bytes.len() - at {
                let mut buf = vec![0xa5u8; len];
                Source::Words(&words).copy(at, &mut buf);
                assert_eq!(buf, bytes[at..at + len], "at {at}, {len} bytes");
            }
        }
    }
}
