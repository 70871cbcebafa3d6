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

/// One thread's handle on the store, through one host. Not shared between threads.
pub struct KvHandle<H: SchemeHandle> {
    inner: H,
    limits: Limits,
    /// One object's bytes, for framing (the calls do not allocate).
    buf: Vec<u8>,
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
        // The read is one whole version, so its prefix is one a put wrote; clamped all
        // the same, for an object some other program wrote into the pod.
        let len = (framed_len(&self.buf[..read]) - LENGTH_PREFIX_BYTES)
            .min(read.saturating_sub(LENGTH_PREFIX_BYTES));
        out.extend_from_slice(&self.buf[LENGTH_PREFIX_BYTES..LENGTH_PREFIX_BYTES + len]);
        Ok(true)
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
}
