//! The sharing scheme behind the store: how objects of a fixed size are created, read,
//! written and deleted by the hosts of a pod. megalon's object protocol is one
//! ([`crate::Megalon`]); the baselines it is compared with are others. The store frames
//! values into objects and gives every scheme the same linearizable interface, so one
//! example, one checker and one harness run them all.

use std::fmt;

use crate::error::Result;

/// The limits a scheme puts on keys and objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Bytes of one object: what a value and the store's length prefix share.
    pub object_bytes: usize,
}

/// A sharing scheme: the hosts of one pod that this process runs, and how to get a
/// handle on one of them for a thread.
pub trait Scheme: Send + Sync {
    /// A thread's handle on one host.
    type Handle: SchemeHandle;

    /// A short name for reports ("megalon", "hcmeta", ...).
    fn name(&self) -> &'static str;

    /// The scheme's limits.
    fn limits(&self) -> Limits;

    /// Hosts of the pod that this process runs (handles exist for `0..hosts()`).
    fn hosts(&self) -> usize;

    /// A handle for one thread on host `host` (an index in `0..hosts()`).
    fn handle(&self, host: usize) -> Result<Self::Handle>;

    /// What the scheme has done so far, summed over this process's hosts.
    fn report(&self) -> Report;

    /// The host through which `key` is best created, if the scheme has one (HCMeta: the
    /// key's owner, which creates it without a request). Loaders use it; the default is
    /// none: every host is as good.
    fn home_host(&self, _key: &[u8]) -> Option<usize> {
        None
    }
}

/// How many bytes an object holds, told from its first bytes (at most a line): how much
/// a read copies past them ([`SchemeHandle::read`]).
pub type Extent<'a> = &'a dyn Fn(&[u8]) -> usize;

/// One thread's access to the objects, through one host. Every call is linearizable on
/// its own; a read sees a whole object as one write left it, never a torn or stale one.
pub trait SchemeHandle: Send {
    /// Creates object `key` holding `object` (at most [`Limits::object_bytes`]; the rest
    /// of the object is unspecified: the slot's earlier bytes may be there, so a reader
    /// copies only what the object's own framing says it holds). Fails with [`Error::KeyExists`](crate::Error::KeyExists)
    /// if it exists, changing nothing.
    fn create(&mut self, key: &[u8], object: &[u8]) -> Result<()>;

    /// Overwrites the first `object.len()` bytes of object `key`. Fails with
    /// [`Error::UnknownKey`](crate::Error::UnknownKey) if it does not exist.
    fn write(&mut self, key: &[u8], object: &[u8]) -> Result<()>;

    /// Reads object `key` into `buf`: first `min(buf.len(), LINE)` bytes, then as many as
    /// `extent` (given those first bytes) says the object holds, at most `buf.len()`; all
    /// of it from one version of the object. Returns the bytes read. Fails with
    /// [`Error::UnknownKey`](crate::Error::UnknownKey) if it does not exist.
    fn read(&mut self, key: &[u8], buf: &mut [u8], extent: Extent<'_>) -> Result<usize>;

    /// Reads several objects, each as [`read`](Self::read) reads one: object
    /// `reads[i].0` into `reads[i].1`, the answer at `i` being that read's. Not atomic
    /// across the objects. The default reads them one after another; a scheme that can
    /// overlap the reads' waits on memory does so.
    fn read_many(
        &mut self,
        reads: &mut [(&[u8], &mut [u8])],
        extent: Extent<'_>,
    ) -> Vec<Result<usize>> {
        reads
            .iter_mut()
            .map(|(key, buf)| self.read(key, buf, extent))
            .collect()
    }

    /// Deletes object `key`. Fails with [`Error::UnknownKey`](crate::Error::UnknownKey)
    /// if it does not exist.
    fn delete(&mut self, key: &[u8]) -> Result<()>;

    /// Read-modify-write of object `key`: `change` gets the object's current bytes (all
    /// [`Limits::object_bytes`] of them) and changes them in place, holding the object
    /// throughout, so no other write, update or delete of it comes between what `change`
    /// read and what it left. `change` runs at most once (exactly once on success).
    /// Fails with [`Error::UnknownKey`](crate::Error::UnknownKey) if the object does not
    /// exist (without calling `change`). `change` must not call this scheme: it runs
    /// holding the object's lock.
    fn update(&mut self, key: &[u8], change: &mut dyn FnMut(&mut [u8])) -> Result<()>;
}

/// Bytes of the first part of a read (one cache line): what [`SchemeHandle::read`] hands
/// to `extent`.
pub const FIRST_READ_BYTES: usize = megalon_core::Host::FIRST_READ_BYTES;

/// What a scheme did: named counters, and where its coherent memory (SCR) went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The scheme's name.
    pub scheme: &'static str,
    /// Counters, in the order they are best read in: totals since the scheme started.
    pub counters: Vec<(&'static str, u64)>,
    /// Levels now (records in use, ...): not summed, not subtracted.
    pub gauges: Vec<(&'static str, u64)>,
    /// SCR bytes by use, adding up to the SCR size.
    pub scr: Vec<(&'static str, u64)>,
}

impl Report {
    /// The counter or gauge called `name`, if there is one.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .chain(&self.gauges)
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// Counters that grew between `earlier` and `self` (a run's share of a report).
    pub fn since(&self, earlier: &Report) -> Report {
        let counters = self
            .counters
            .iter()
            .map(|&(name, value)| {
                (
                    name,
                    value.saturating_sub(earlier.counter(name).unwrap_or(0)),
                )
            })
            .collect();
        Report {
            scheme: self.scheme,
            counters,
            gauges: self.gauges.clone(),
            scr: self.scr.clone(),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} counters:", self.scheme)?;
        for (name, value) in &self.counters {
            writeln!(f, "  {name:<28} {value:>14}")?;
        }
        for (name, value) in &self.gauges {
            writeln!(f, "  {name:<28} {value:>14}")?;
        }
        let total: u64 = self.scr.iter().map(|(_, bytes)| bytes).sum();
        writeln!(f, "SCR ({total} bytes):")?;
        for (name, bytes) in &self.scr {
            let percent = if total == 0 {
                0.0
            } else {
                *bytes as f64 * 100.0 / total as f64
            };
            writeln!(f, "  {name:<28} {bytes:>14} B {percent:>6.1}%")?;
        }
        Ok(())
    }
}
