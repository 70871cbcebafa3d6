//! Reads of several objects in one call. Each is the read protocol of one object
//! (`read_start`, the copy, `read_end`: DESIGN section 8, unchanged); what the call adds
//! is the order: the reads of a group take each step together, and the lines every
//! step waits on (the index's buckets, its records, the objects) are asked for a step
//! ahead, so that they load at the same time rather than one read after another.

use super::path::copy_prefix;
use super::ticket::{Done, ReadState, Source};
use super::{Host, Shared};

use crate::backoff::Backoff;
use crate::chaos::Point;
use crate::counters::ThreadCounters;
use crate::error::Result;

/// Reads that take each step together: enough lines in flight to hide most of a miss,
/// few enough that the first read's lines are still cached when its copy comes.
const GROUP: usize = 16;

/// How one read of a group copies: from where the object is, its length, into the
/// read's buffer; returns the bytes copied.
type Copy<'f> = dyn FnMut(&Source<'_>, usize, &mut [u8]) -> usize + 'f;

impl Host {
    /// Reads several objects: `reads[i].1` gets the first `reads[i].1.len()` bytes of
    /// object `reads[i].0`, and the answer at `i` says how that read went, as
    /// [`Host::read`] would (an unknown key is
    /// [`Error::UnknownKey`](crate::Error::UnknownKey) there, and the other reads go on).
    /// Every read is checked as `read` checks one; one that overlapped a write starts
    /// over alone, within the host's bound. Their waits for writers share one wait limit:
    /// once it is spent, a read that finds its object locked answers
    /// [`Error::RecordBusy`](crate::Error::RecordBusy) without waiting (with local
    /// partitions or copies on, or all-log coherence, each read waits its own).
    ///
    /// Faster per object than a loop of `read` when the objects and the index come from
    /// memory: a lone read waits on two loads of the index and then on the object, one
    /// after the other, where a group of reads waits on each step once. With local
    /// partitions or copies on, or in a pod whose coherence is all-log, the reads run one
    /// after another.
    pub fn read_many(&self, reads: &mut [(&[u8], &mut [u8])]) -> Vec<Result<Done>> {
        self.read_many_with(reads, &mut |source, _, buf| {
            source.copy(0, buf);
            buf.len()
        })
        .into_iter()
        .map(|answer| answer.map(|(_, done)| done))
        .collect()
    }

    /// [`Host::read_many`] of objects whose length is in their first bytes, each read as
    /// [`Host::read_prefix`] reads one: the answer at `i` says how many bytes of
    /// `reads[i].1` it copied. As there, `extent` must not call this host's API.
    pub fn read_many_prefix(
        &self,
        reads: &mut [(&[u8], &mut [u8])],
        extent: &dyn Fn(&[u8]) -> usize,
    ) -> Vec<Result<(usize, Done)>> {
        self.read_many_with(reads, &mut |source, len, buf| {
            copy_prefix(source, len, buf, extent)
        })
    }

    fn read_many_with(
        &self,
        reads: &mut [(&[u8], &mut [u8])],
        copy: &mut Copy<'_>,
    ) -> Vec<Result<(usize, Done)>> {
        let mut answers = Vec::with_capacity(reads.len());
        let one_by_one = self.shared.local.is_some() || self.shared.all_log;
        self.shared.with_counters(|c| {
            if one_by_one {
                for (key, buf) in reads.iter_mut() {
                    answers.push(self.shared.read_one(key, buf, c, copy));
                }
                return;
            }
            // One wait for writers for the whole call: objects another host holds locked
            // (a writer stopped with its tickets open) make it wait one limit in all, the
            // later ones answering `RecordBusy` after one look. (Each waited a limit of
            // its own, one after another.)
            let mut writers = None;
            for group in reads.chunks_mut(GROUP) {
                self.shared
                    .read_group(group, c, copy, &mut writers, &mut answers);
            }
        });
        answers
    }
}

impl Shared {
    /// The reads of one group (at most [`GROUP`]), their answers pushed in order.
    fn read_group(
        &self,
        group: &mut [(&[u8], &mut [u8])],
        c: &ThreadCounters,
        copy: &mut Copy<'_>,
        writers: &mut Option<Backoff>,
        answers: &mut Vec<Result<(usize, Done)>>,
    ) {
        let n = group.len();
        debug_assert!(n <= GROUP);
        // Ask for the index's lines: the home buckets, then (once those are in) the
        // records they point at. Hints only: the lookups below check everything.
        let mut hashes = [0u64; GROUP];
        let mut key_lens = [0usize; GROUP];
        self.replica.hint(|view| {
            for (i, (key, _)) in group.iter().enumerate() {
                hashes[i] = view.hash(key);
                key_lens[i] = key.len();
            }
            view.prefetch_buckets(&hashes[..n]);
        });
        self.replica
            .hint(|view| view.prefetch_records(&hashes[..n], &key_lens[..n]));
        // Steps 1-3 of each read; each object's lines are asked for once its read has
        // started (after its pre-read check dropped any stale line).
        let mut started: [Option<Result<ReadState>>; GROUP] = std::array::from_fn(|_| None);
        for (i, (key, buf)) in group.iter().enumerate() {
            let ticket = self
                .check_access(key, buf.len())
                .and_then(|()| self.read_start_within(key, c, writers));
            if let Ok(ticket) = &ticket {
                Source::Pod(&self.memory, ticket.place.offset)
                    .prefetch(buf.len().min(ticket.place.len));
            }
            started[i] = Some(ticket);
        }
        // The copies and steps 4-6, in order; a read whose check fails starts over alone.
        for (i, (key, buf)) in group.iter_mut().enumerate() {
            let answer = match started[i].take().expect("every read started") {
                Err(error) => Err(error),
                Ok(ticket) => {
                    let source = Source::Pod(&self.memory, ticket.place.offset);
                    let copied = copy(&source, ticket.place.len, buf);
                    self.chaos.point(Point::ReadBeforeEnd);
                    match self.read_end(&ticket, c) {
                        Ok(true) => Ok((copied, Done { retries: 0 })),
                        // Started over alone, this try counted in the bound, its waits
                        // for writers within the call's one limit.
                        Ok(false) => {
                            self.read_via_after(key, c, 1, Some(writers), &mut |source, len| {
                                copy(source, len, buf)
                            })
                        }
                        Err(error) => Err(error),
                    }
                }
            };
            answers.push(answer);
        }
    }

    /// One read on its own, as [`Host::read`] makes it, copied with `copy`.
    fn read_one(
        &self,
        key: &[u8],
        buf: &mut [u8],
        c: &ThreadCounters,
        copy: &mut Copy<'_>,
    ) -> Result<(usize, Done)> {
        self.check_access(key, buf.len())?;
        self.read_via(key, c, &mut |source, len| copy(source, len, buf))
    }
}
