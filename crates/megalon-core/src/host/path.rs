//! The read and write paths of the safe calls: from this host's DRAM when local
//! partitions or copies hold the object, otherwise from CXL with the object protocol,
//! retried within the host's bound.

use super::local::Place;
use super::ticket::{store_object_bytes, Done, Source, Target, WriteState};
use super::{Host, Shared};

use crate::backoff::Backoff;
use crate::counters::{Counter, ThreadCounters};
use crate::error::{Error, Result};

/// Ends a write in CXL if dropped while it still holds it (a panic of the caller's change).
struct EndOnUnwind<'a> {
    shared: &'a Shared,
    state: Option<WriteState>,
    c: &'a ThreadCounters,
}

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            if !crate::mutants::skipped(crate::mutants::Step::LockedRecordRestoredOnError) {
                let _ = self.shared.write_end(state, self.c);
            }
        }
    }
}

impl Host {
    /// Reads object `key` into `buf` (its first `buf.len()` bytes), retrying within the
    /// host's bound. `buf` may be at most the slot size. With local partitions or copies
    /// on, the bytes may come from this host's DRAM.
    pub fn read(&self, key: &[u8], buf: &mut [u8]) -> Result<Done> {
        self.shared.check_access(key, buf.len())?;
        self.shared.with_counters(|c| {
            let (_, done) = self.shared.read_via(key, c, &mut |source, _| {
                source.copy(0, buf);
                buf.len()
            })?;
            Ok(done)
        })
    }

    /// Writes `data` at the start of object `key`.
    pub fn write(&self, key: &[u8], data: &[u8]) -> Result<Done> {
        self.write_at(key, 0, data)
    }

    /// Writes `data` at byte `at` of object `key` (the rest of the object is kept).
    pub fn write_at(&self, key: &[u8], at: usize, data: &[u8]) -> Result<Done> {
        self.shared
            .check_access(key, at.saturating_add(data.len()))?;
        self.shared.with_counters(|c| {
            let ((), done) = self.shared.write_via(key, c, |target| match target {
                Target::Dram(bytes) => bytes[at..at + data.len()].copy_from_slice(data),
                Target::Pod(memory, offset, _) => {
                    store_object_bytes(memory, offset + at as u64, data)
                }
            })?;
            Ok(done)
        })
    }

    /// Read-modify-write of the whole object `key` under its lock: `f` gets the current
    /// bytes and changes them in place. `f` must not call this host's object API: it runs
    /// holding the object (its record, or its local lock in this host's DRAM): other
    /// writers of it, and a move of it back to CXL that another host asked for, wait for
    /// it within their wait limits.
    pub fn update<R>(&self, key: &[u8], f: impl FnOnce(&mut [u8]) -> R) -> Result<(R, Done)> {
        self.shared.check_key(key)?;
        self.shared.with_counters(|c| {
            self.shared.write_via(key, c, |target| match target {
                Target::Dram(bytes) => f(bytes),
                Target::Pod(memory, offset, len) => {
                    // Under the lock the object cannot change, and write_start
                    // invalidated any stale line: this copy is the current version.
                    let mut buf = vec![0u8; len];
                    memory.read(offset, &mut buf);
                    let result = f(&mut buf);
                    // This host may have been declared dead while `f` ran (its pump died,
                    // or its process was paused past its lease), and its recovery put the
                    // undo image back and unlocked: others may have written the object
                    // since. Store nothing then (`write_end` answers `HostDeclaredDead`),
                    // as a write in this host's DRAM does.
                    if !self.shared.left_to_recovery() {
                        store_object_bytes(memory, offset, &buf);
                    }
                    result
                }
            })
        })
    }
    /// Reads the first bytes of object `key` into `buf`: `extent` gets the first
    /// [`FIRST_READ_BYTES`](Self::FIRST_READ_BYTES) (or fewer) bytes copied and says how
    /// many bytes the read needs in all; the rest are copied only if it needs them. For
    /// objects whose length is in their first bytes (the KV store's values). Returns how
    /// many bytes were copied. `extent` may see bytes of a write in progress: it only
    /// decides how much to copy; a copy that overlapped a write is thrown away and the
    /// read starts over. `extent` must not call this host's API: for an object in this
    /// host's DRAM (local partitions, copies) it runs under the replica's read lock, and
    /// a call that replays would wait for that lock for good.
    pub fn read_prefix(
        &self,
        key: &[u8],
        buf: &mut [u8],
        extent: &dyn Fn(&[u8]) -> usize,
    ) -> Result<(usize, super::Done)> {
        self.shared.check_access(key, buf.len())?;
        self.shared.with_counters(|c| {
            self.shared.read_via(key, c, &mut |source, len| {
                // The rest is likely wanted too (a value as long as the slot): its lines
                // load while the first ones do, not after `extent` has seen them.
                source.prefetch(buf.len().min(len));
                copy_prefix(source, len, buf, extent)
            })
        })
    }
}

/// [`Host::read_prefix`]'s copy of an object of `len` bytes from `source` into `buf`: the
/// first [`Host::FIRST_READ_BYTES`] (or fewer), then the rest `extent` asks for. Returns
/// the bytes copied.
pub(super) fn copy_prefix(
    source: &Source<'_>,
    len: usize,
    buf: &mut [u8],
    extent: &dyn Fn(&[u8]) -> usize,
) -> usize {
    let len = buf.len().min(len);
    let first = len.min(Host::FIRST_READ_BYTES);
    source.copy(0, &mut buf[..first]);
    let total = extent(&buf[..first]).clamp(first, len);
    if total > first {
        source.copy(first, &mut buf[first..total]);
    }
    total
}

impl Shared {
    /// [`Shared::bring_back`], counting the times in `count`: past the host's retry bound
    /// (the holder keeps moving the object back to its DRAM), [`Error::RetriesExhausted`].
    pub(super) fn bring_back_counted(
        &self,
        owner: crate::host::HostId,
        key: &[u8],
        count: &mut u32,
        c: &ThreadCounters,
    ) -> Result<()> {
        *count += 1;
        if *count > self.options.max_retries {
            return Err(Error::RetriesExhausted {
                retries: self.options.max_retries,
            });
        }
        self.bring_back(owner, key, c)
    }
    /// Reads object `key` with `copy`, which gets where the bytes are and the object's
    /// length and returns how many bytes it copied: from this host's partition, from a
    /// copy, or from CXL with the read protocol (retried within the bound).
    pub(super) fn read_via(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        copy: &mut impl FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<(usize, super::Done)> {
        self.read_via_after(key, c, 0, None, copy)
    }

    /// [`Shared::read_via`] of a read that has already started over `retries` times (a
    /// read of `read_many` whose check failed): the bound counts those too. Its waits for
    /// a writer in CXL go on with `writers`, the wait of the call it is part of (a
    /// `read_many`'s, whose reads wait one limit in all); `None` (a lone read): each try
    /// waits a limit of its own.
    pub(super) fn read_via_after(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        mut retries: u32,
        mut writers: Option<&mut Option<Backoff>>,
        copy: &mut impl FnMut(&Source<'_>, usize) -> usize,
    ) -> Result<(usize, super::Done)> {
        let max_retries = self.options.max_retries;
        if retries > max_retries {
            return Err(Error::RetriesExhausted {
                retries: max_retries,
            });
        }
        self.poll_rpcs();
        let mut writer_wait: Option<Backoff> = None;
        loop {
            let done = super::Done { retries };
            let in_cxl = match &self.local {
                None => true,
                Some(local) => match self.read_local(local, key, c, copy)? {
                    Place::Done(copied) => return Ok((copied, done)),
                    // A local write in progress: wait for it as for a writer in CXL.
                    // (`Wait` is a write's answer only.)
                    Place::Retry | Place::Wait => {
                        c.add(Counter::WaitsForWriter, 1);
                        self.wait_for_local_writer(&mut writer_wait)?;
                        continue;
                    }
                    Place::Held(owner) => {
                        self.bring_back(owner, key, c)?;
                        false
                    }
                    Place::Cxl => true,
                },
            };
            if in_cxl {
                let ticket = match writers.as_deref_mut() {
                    Some(writers) => self.read_start_within(key, c, writers)?,
                    None => self.read_start(key, c)?,
                };
                let copied = copy(
                    &Source::Pod(&self.memory, ticket.place.offset),
                    ticket.place.len,
                );
                self.chaos.point(crate::chaos::Point::ReadBeforeEnd);
                if self.read_end(&ticket, c)? {
                    if let Some(local) = &self.local {
                        self.after_cxl_access(local, key, ticket.slot(), Some(ticket.guard()), c);
                    }
                    return Ok((copied, done));
                }
            }
            retries += 1;
            if retries > max_retries {
                return Err(Error::RetriesExhausted {
                    retries: max_retries,
                });
            }
        }
    }

    /// Changes object `key` with `change`: in this host's partition under the local lock
    /// ([`Target::Dram`], the whole object), or in CXL between `write_start` and
    /// `write_end` ([`Target::Pod`]). Returns `change`'s result.
    pub(super) fn write_via<R>(
        &self,
        key: &[u8],
        c: &ThreadCounters,
        change: impl FnOnce(Target<'_>) -> R,
    ) -> Result<(R, super::Done)> {
        self.poll_rpcs();
        let mut retries = 0u32;
        let mut change = Some(change);
        if let Some(local) = &self.local {
            let mut leaving_wait: Option<Backoff> = None;
            loop {
                match self.write_local(local, key, c, &mut change)? {
                    Place::Done(result) => return Ok((result, super::Done { retries })),
                    // On its way back to CXL: wait until it is there, while a move back is
                    // under way (it holds `moving` through its append). None is: the
                    // append of the last one failed (its event may yet apply, or never),
                    // so move it back again: `move_back` appends `MoveToCxl` for a
                    // leaving object without copying it, and a second one that loses to
                    // the first changes nothing.
                    Place::Retry => {
                        if local.moving.try_lock().is_some() {
                            self.bring_back(self.id, key, c)?;
                        } else {
                            self.wait_for_local_writer(&mut leaving_wait)?;
                        }
                        continue;
                    }
                    // On its way here: the mover says `HELD` (or orphans it) once it
                    // knows its append's outcome, holding `moving` till then. Or another
                    // writer of this host has it.
                    Place::Wait => {
                        self.wait_for_local_writer(&mut leaving_wait)?;
                        continue;
                    }
                    Place::Held(owner) => self.bring_back(owner, key, c)?,
                    Place::Cxl => break,
                }
                retries += 1;
                if retries > self.options.max_retries {
                    return Err(Error::RetriesExhausted {
                        retries: self.options.max_retries,
                    });
                }
            }
        }
        let (state, more) = self.write_start_counted(key, c)?;
        let change = change.take().expect("called once");
        // A panic in `change` must not leave the record locked: the write ends on unwind
        // as a dropped ticket's does (its bytes reach memory, the record is unlocked).
        let mut guard = EndOnUnwind {
            shared: self,
            state: Some(state),
            c,
        };
        let result = change(Target::Pod(
            &self.memory,
            state.place.offset,
            state.place.len,
        ));
        let state = guard.state.take().expect("ended once");
        let slot = state.place.slot;
        self.write_end(state, c)?;
        if let Some(local) = &self.local {
            self.after_cxl_access(local, key, slot, None, c);
        }
        Ok((
            result,
            super::Done {
                retries: retries + more,
            },
        ))
    }
}
