//! The store: values framed into objects (a 4-byte little-endian length, then the value
//! bytes), and the four calls on top of a scheme's handle.

use crate::error::{Error, Result};
use crate::scheme::{Limits, Report, Scheme, SchemeHandle};

/// Bytes of the length prefix in front of every value.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Rounds a put tries (update, else create, else update again...) before giving up: each
/// round is lost only to a delete or a create of the same key by someone else in between.
const PUT_ROUNDS: u32 = 64;

/// A key-value store over a sharing scheme. Share it by reference; each thread takes a
/// [`KvHandle`] on one host with [`Store::handle`].
pub struct Store<S: Scheme> {
    scheme: S,
}

impl<S: Scheme> Store<S> {
    /// The store over `scheme`.
    pub fn new(scheme: S) -> Self {
        Self { scheme }
    }

    /// The scheme.
    pub fn scheme(&self) -> &S {
        &self.scheme
    }

    /// Longest key.
    pub fn max_key_bytes(&self) -> usize {
        self.scheme.limits().max_key_bytes
    }

    /// Longest value: the scheme's object less the length prefix.
    pub fn max_value_bytes(&self) -> usize {
        max_value_bytes(self.scheme.limits())
    }

    /// A handle for the calling thread on host `host` (in `0..scheme().hosts()`).
    pub fn handle(&self, host: usize) -> Result<KvHandle<S::Handle>> {
        Ok(KvHandle {
            inner: self.scheme.handle(host)?,
            limits: self.scheme.limits(),
            buf: vec![0; self.scheme.limits().object_bytes],
            many: Vec::new(),
            new_value: Vec::with_capacity(max_value_bytes(self.scheme.limits())),
        })
    }

    /// What the scheme has done so far.
    pub fn report(&self) -> Report {
        self.scheme.report()
    }
}

fn max_value_bytes(limits: Limits) -> usize {
    limits.object_bytes.saturating_sub(LENGTH_PREFIX_BYTES)
}

/// How many bytes of an object a read needs, given its first bytes: the prefix and the
/// value it announces (a garbage length, from a torn copy that the read will throw away,
/// is clamped by the caller).
fn framed_len(first: &[u8]) -> usize {
    match first.get(..LENGTH_PREFIX_BYTES) {
        Some(prefix) => {
            let len = u32::from_le_bytes(prefix.try_into().expect("4 bytes")) as usize;
            LENGTH_PREFIX_BYTES.saturating_add(len)
        }
        None => first.len(),
    }
}

/// Keys a [`KvHandle::get_many`] hands the scheme at once: the handle keeps an object's
/// buffer for each (so an MGET of many keys does not hold as many objects' bytes).
const GET_MANY_CHUNK: usize = 16;

/// The value in the `read` bytes of an object: after the length prefix, as long as the
/// prefix says. The read is one whole version, so its prefix is one a put wrote; clamped
/// all the same, for an object some other program wrote into the pod.
fn unframe(read: &[u8]) -> &[u8] {
    let len = (framed_len(read) - LENGTH_PREFIX_BYTES)
        .min(read.len().saturating_sub(LENGTH_PREFIX_BYTES));
    &read[LENGTH_PREFIX_BYTES.min(read.len())..][..len]
}

/// One thread's handle on the store, through one host. Not shared between threads.
pub struct KvHandle<H: SchemeHandle> {
    inner: H,
    limits: Limits,
    /// One object's bytes, for framing (the calls do not allocate).
    buf: Vec<u8>,
    /// An object's bytes for each read of a `get_many` chunk, kept between calls.
    many: Vec<Vec<u8>>,
    /// The value an update's change builds, kept between calls.
    new_value: Vec<u8>,
}

impl<H: SchemeHandle> KvHandle<H> {
    /// The scheme's handle underneath.
    pub fn scheme_handle(&mut self) -> &mut H {
        &mut self.inner
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() > self.limits.max_key_bytes {
            return Err(Error::KeyTooLarge {
                key_bytes: key.len(),
                max_key_bytes: self.limits.max_key_bytes,
            });
        }
        Ok(())
    }

    /// Frames `value` into `self.buf`; returns the framed length.
    fn frame(&mut self, key: &[u8], value: &[u8]) -> Result<usize> {
        self.check_key(key)?;
        let max_value_bytes = max_value_bytes(self.limits);
        if value.len() > max_value_bytes {
            return Err(Error::ValueTooLarge {
                value_bytes: value.len(),
                max_value_bytes,
            });
        }
        let framed = LENGTH_PREFIX_BYTES + value.len();
        self.buf[..LENGTH_PREFIX_BYTES].copy_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf[LENGTH_PREFIX_BYTES..framed].copy_from_slice(value);
        Ok(framed)
    }

    /// Sets `key` to `value`, creating it if absent.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let framed = self.frame(key, value)?;
        let object = &self.buf[..framed];
        // Linearizes at the update or the create that succeeds. An update finding no key
        // and then a create finding one means a create by someone else came in between:
        // update that one.
        for _ in 0..PUT_ROUNDS {
            match self.inner.write(key, object) {
                Err(Error::UnknownKey) => {}
                done => return done,
            }
            match self.inner.create(key, object) {
                Err(Error::KeyExists) => {}
                done => return done,
            }
        }
        Err(Error::PutContended { rounds: PUT_ROUNDS })
    }

    /// Creates `key` with `value`; fails with [`Error::KeyExists`] if it is there.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let framed = self.frame(key, value)?;
        self.inner.create(key, &self.buf[..framed])
    }

    /// Reads `key`'s value into `out` (replacing its contents). Returns whether the key
    /// exists (`out` is empty if not).
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_key(key)?;
        out.clear();
        let read = match self.inner.read(key, &mut self.buf, &framed_len) {
            Err(Error::UnknownKey) => return Ok(false),
            other => other?,
        };
        out.extend_from_slice(unframe(&self.buf[..read]));
        Ok(true)
    }

    /// The values of `keys`, each read as [`get`](Self::get) reads one; the answer at `i`
    /// is `keys[i]`'s. Not atomic across the keys: each read is linearizable on its own.
    /// Faster per key than a loop of `get` where the scheme overlaps the reads' waits on
    /// memory (megalon: [`Host::read_many`](megalon_core::Host::read_many)).
    pub fn get_many(&mut self, keys: &[&[u8]]) -> Vec<Result<Option<Vec<u8>>>> {
        let mut answers = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(GET_MANY_CHUNK) {
            self.get_chunk(chunk, &mut answers);
        }
        answers
    }

    /// [`get_many`](Self::get_many) of at most [`GET_MANY_CHUNK`] keys, their answers
    /// pushed in order.
    fn get_chunk(&mut self, keys: &[&[u8]], answers: &mut Vec<Result<Option<Vec<u8>>>>) {
        let object_bytes = self.limits.object_bytes;
        if self.many.len() < keys.len() {
            self.many.resize_with(keys.len(), || vec![0; object_bytes]);
        }
        let first = answers.len();
        answers.extend(keys.iter().map(|key| self.check_key(key).map(|()| None)));
        // The keys that passed the check, each with its buffer, to the scheme at once.
        let mut reads: Vec<(&[u8], &mut [u8])> = Vec::with_capacity(keys.len());
        let mut asked = Vec::with_capacity(keys.len());
        for (i, (key, buf)) in keys.iter().zip(self.many.iter_mut()).enumerate() {
            if answers[first + i].is_ok() {
                reads.push((key, buf));
                asked.push(first + i);
            }
        }
        let read = self.inner.read_many(&mut reads, &framed_len);
        debug_assert_eq!(read.len(), reads.len(), "an answer for every read");
        for ((answer, i), (_, buf)) in read.into_iter().zip(asked).zip(reads) {
            answers[i] = match answer {
                Ok(read) => Ok(Some(unframe(&buf[..read]).to_vec())),
                Err(Error::UnknownKey) => Ok(None),
                Err(error) => Err(error),
            };
        }
    }

    /// `key`'s value, or `None`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Deletes `key`; fails with [`Error::UnknownKey`] if it is not there.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.check_key(key)?;
        self.inner.delete(key)
    }

    /// Read-modify-write of `key`'s value. `change` gets the current value (`None` if
    /// the key is absent) and an empty `new`; it fills `new` and answers `true` to store
    /// it (creating the key if absent), or `false` to leave the key as it is. Returns
    /// what the last run of `change` answered.
    ///
    /// Linearizes at the store: a present key is held from the read that `change` sees
    /// to the write of `new` (the scheme's [`SchemeHandle::update`]), so concurrent
    /// updates of one key from any host lose nothing (counters add up); an absent key is
    /// created with `new`, and if someone else created it first, `change` runs again on
    /// their value. So `change` may run more than once: only its last run counts, and
    /// what it captured from earlier runs must be overwritten. A `new` longer than the
    /// longest value fails with [`Error::ValueTooLarge`], changing nothing.
    pub fn update(
        &mut self,
        key: &[u8],
        mut change: impl FnMut(Option<&[u8]>, &mut Vec<u8>) -> bool,
    ) -> Result<bool> {
        self.check_key(key)?;
        let max_value_bytes = max_value_bytes(self.limits);
        let mut new = std::mem::take(&mut self.new_value);
        let result = self.update_rounds(key, max_value_bytes, &mut new, &mut change);
        new.clear();
        self.new_value = new;
        result
    }

    fn update_rounds(
        &mut self,
        key: &[u8],
        max_value_bytes: usize,
        new: &mut Vec<u8>,
        change: &mut impl FnMut(Option<&[u8]>, &mut Vec<u8>) -> bool,
    ) -> Result<bool> {
        for _ in 0..PUT_ROUNDS {
            // Present: change it in place, holding the object.
            let mut outcome = Ok(false);
            let held = self.inner.update(key, &mut |object: &mut [u8]| {
                // Held, the bytes are one whole version; clamped all the same, for an
                // object some other program wrote into the pod.
                let len = (framed_len(object) - LENGTH_PREFIX_BYTES)
                    .min(object.len().saturating_sub(LENGTH_PREFIX_BYTES));
                new.clear();
                if !change(
                    Some(&object[LENGTH_PREFIX_BYTES..LENGTH_PREFIX_BYTES + len]),
                    new,
                ) {
                    outcome = Ok(false);
                    return;
                }
                if new.len() > max_value_bytes {
                    outcome = Err(Error::ValueTooLarge {
                        value_bytes: new.len(),
                        max_value_bytes,
                    });
                    return;
                }
                object[..LENGTH_PREFIX_BYTES].copy_from_slice(&(new.len() as u32).to_le_bytes());
                object[LENGTH_PREFIX_BYTES..LENGTH_PREFIX_BYTES + new.len()].copy_from_slice(new);
                outcome = Ok(true);
            });
            match held {
                Ok(()) => return outcome,
                Err(Error::UnknownKey) => {}
                Err(other) => return Err(other),
            }
            // Absent: decide on nothing, then create. A create finding the key means a
            // create by someone else came in between: change theirs.
            new.clear();
            if !change(None, new) {
                return Ok(false);
            }
            let framed = self.frame(key, new)?;
            match self.inner.create(key, &self.buf[..framed]) {
                Err(Error::KeyExists) => {}
                Ok(()) => return Ok(true),
                Err(other) => return Err(other),
            }
        }
        Err(Error::PutContended { rounds: PUT_ROUNDS })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

    use megalon_core::{Backing, HostOptions, MemoryKind, Pod, PodConfig};

    use super::*;
    use crate::Megalon;

    fn store(hosts: usize) -> Store<Megalon> {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(4 << 20)
            .slot_size_bytes(128);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
        let options = HostOptions::new().memory(MemoryKind::simulated(11));
        Store::new(Megalon::join(pod, hosts, &options).expect("hosts"))
    }

    fn add_one(old: Option<&[u8]>, new: &mut Vec<u8>) -> bool {
        let n: u64 = old.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
        new.extend_from_slice((n + 1).to_string().as_bytes());
        true
    }

    #[test]
    fn update_creates_changes_and_keeps() {
        let store = store(2);
        let mut kv = store.handle(0).unwrap();
        assert!(kv.update(b"n", add_one).unwrap());
        assert!(kv.update(b"n", add_one).unwrap());
        assert_eq!(store.handle(1).unwrap().get(b"n").unwrap().unwrap(), b"2");
        // Declining leaves the key as it is, present or absent.
        assert!(!kv.update(b"n", |_, _| false).unwrap());
        assert!(!kv.update(b"absent", |_, _| false).unwrap());
        assert_eq!(kv.get(b"absent").unwrap(), None);
        assert_eq!(kv.get(b"n").unwrap().unwrap(), b"2");
        // A shorter value replaces a longer one whole.
        kv.put(b"s", b"longer value").unwrap();
        kv.update(b"s", |old, new| {
            assert_eq!(old, Some(&b"longer value"[..]));
            new.extend_from_slice(b"short");
            true
        })
        .unwrap();
        assert_eq!(kv.get(b"s").unwrap().unwrap(), b"short");
    }

    #[test]
    fn update_past_the_longest_value_changes_nothing() {
        let store = store(1);
        let max = store.max_value_bytes();
        let mut kv = store.handle(0).unwrap();
        kv.put(b"k", b"v").unwrap();
        for key in [&b"k"[..], b"absent"] {
            let error = kv
                .update(key, |_, new| {
                    new.resize(max + 1, b'x');
                    true
                })
                .unwrap_err();
            assert!(
                matches!(error, Error::ValueTooLarge { value_bytes, max_value_bytes }
                    if value_bytes == max + 1 && max_value_bytes == max),
                "{error:?}"
            );
        }
        assert_eq!(kv.get(b"k").unwrap().unwrap(), b"v");
        assert_eq!(kv.get(b"absent").unwrap(), None);
        let long_key = vec![b'k'; store.max_key_bytes() + 1];
        assert!(matches!(
            kv.update(&long_key, add_one),
            Err(Error::KeyTooLarge { .. })
        ));
    }

    #[test]
    fn concurrent_updates_from_every_host_lose_nothing() {
        const HOSTS: usize = 3;
        const THREADS_PER_HOST: usize = 2;
        const UPDATES: usize = 300;
        let store = store(HOSTS);
        thread::scope(|scope| {
            for worker in 0..HOSTS * THREADS_PER_HOST {
                let store = &store;
                scope.spawn(move || {
                    let mut kv = store.handle(worker % HOSTS).unwrap();
                    for _ in 0..UPDATES {
                        kv.update(b"counter", add_one).unwrap();
                    }
                });
            }
        });
        let total = (HOSTS * THREADS_PER_HOST * UPDATES).to_string();
        for host in 0..HOSTS {
            let value = store
                .handle(host)
                .unwrap()
                .get(b"counter")
                .unwrap()
                .unwrap();
            assert_eq!(value, total.as_bytes(), "host {host}");
        }
    }
}
