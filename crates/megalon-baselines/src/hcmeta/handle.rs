//! A thread's handle on one host: the operations of the [`SchemeHandle`] trait, on the
//! host's own partition (through its local index and latches) or on another host's
//! (through that owner's CXL index and records, asking the owner when the object is not
//! shared).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use megalon_core::Memory;

use megalon_kv::scheme::Extent;
use megalon_kv::{Error, Result, SchemeHandle};

use super::counters::{Counter, Counters, ThreadCounters};
use super::hash::KeyHash;
use super::index::Found;
use super::owner::{busy, decode, shared_read, shared_update, shared_write};
use super::record::{self, NotLocked, CLOCK};
use super::ring::Op;
use super::{Inner, Settings, SERVE_BATCH};

/// One thread's access to the objects, through one host. Not shared between threads.
pub struct HcMetaHandle {
    inner: Arc<Inner>,
    host: usize,
    counters: ThreadCounters,
    /// The scratch ring entry this thread's requests are built in.
    request: Vec<u8>,
    /// One object's bytes: an update's copy of an object in CXL.
    scratch: Vec<u8>,
}

/// Sends `op` on `key` (and `payload`) to `owner` from host `me`, serving `me`'s ring
/// while waiting, and turns the answer into a result (its detail: for a share, 1 if
/// the request shared the object).
#[allow(clippy::too_many_arguments)]
fn call(
    inner: &Inner,
    me: usize,
    c: &ThreadCounters,
    request: &mut [u8],
    owner: usize,
    op: Op,
    key: &[u8],
    payload: &[u8],
) -> Result<u64> {
    c.add(Counter::Rpcs, 1);
    let tally: &Counters = c;
    let response = inner.hosts[owner]
        .geometry
        .ring
        .call(
            &inner.pod,
            &inner.hosts[me].memory,
            me as u64 + 1,
            request,
            op as u8,
            key,
            payload,
            inner.settings.wait_limit,
            tally,
            &mut || {
                inner.serve(me, c, SERVE_BATCH);
                std::ops::ControlFlow::Continue(())
            },
        )
        .map_err(|waited_ms| Error::OwnerUnresponsive { owner, waited_ms })?;
    decode(response, owner, &inner.settings)
}

impl std::fmt::Debug for HcMetaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcMetaHandle")
            .field("scheme", &self.inner.config.name())
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl HcMetaHandle {
    pub(crate) fn new(inner: &Arc<Inner>, host: usize) -> Result<Self> {
        let state = inner.hosts.get(host).ok_or(Error::UnknownHost {
            host,
            hosts: inner.hosts.len(),
        })?;
        Ok(Self {
            inner: Arc::clone(inner),
            host,
            counters: state.counters.register(),
            request: vec![0; inner.ring_entry_bytes()],
            scratch: vec![0; inner.settings.object_bytes],
        })
    }

    /// The host this handle works on.
    pub fn host(&self) -> usize {
        self.host
    }

    /// Serves requests waiting on this host's ring (what every operation does first).
    pub fn poll(&self) -> usize {
        self.inner.serve(self.host, &self.counters, SERVE_BATCH)
    }

    fn check_key(&self, key: &[u8]) -> Result<KeyHash> {
        let max_key_bytes = self.inner.settings.max_key_bytes;
        if key.len() > max_key_bytes {
            return Err(Error::KeyTooLarge {
                key_bytes: key.len(),
                max_key_bytes,
            });
        }
        Ok(KeyHash::of(key))
    }

    fn check_object(&self, object: &[u8]) -> Result<()> {
        let object_bytes = self.inner.settings.object_bytes;
        if object.len() > object_bytes {
            return Err(Error::ValueTooLarge {
                value_bytes: object.len(),
                max_value_bytes: object_bytes,
            });
        }
        Ok(())
    }

    /// Locks the record of `key`'s object, owned by host `owner` (not this one): finds
    /// it in the owner's CXL index, asking the owner to share the object when it is not
    /// there; locks it (shared to read, exclusive to write, setting its clock bit); and
    /// checks the index still maps the key to it. Returns the entry and the record word
    /// once locked.
    fn remote_lock(
        &mut self,
        owner: usize,
        hash: KeyHash,
        key: &[u8],
        write: bool,
    ) -> Result<(u32, u64)> {
        let Self {
            inner,
            host,
            counters: c,
            request,
            ..
        } = self;
        let inner: &Inner = inner;
        let s = &inner.settings;
        let index = &inner.hosts[owner].geometry.index;
        let mut churned = false;
        for _ in 0..=s.max_retries {
            let Some(found): Option<Found> = index.find(&inner.pod, hash, key, c) else {
                // Not shared, or not there: ask the owner to share it (or say it does
                // not exist). If our request shared it, that is churn.
                let shared = call(inner, *host, c, request, owner, Op::Share, key, &[])?;
                if shared == 1 && !churned {
                    c.add(Counter::Churn, 1);
                    churned = true;
                }
                continue;
            };
            let record = index.record(&inner.pod, found.entry);
            let locked = if write {
                record::write_lock(record, CLOCK, s.wait_limit, c)
            } else {
                record::read_lock(record, CLOCK, s.wait_limit, c)
            };
            let word = match locked {
                Ok(word) => word,
                Err(NotLocked::Stale) => {
                    // Unshared (or deleted) since we looked: look again.
                    c.add(Counter::Retries, 1);
                    continue;
                }
                Err(busy_lock) => return Err(busy(found.entry, busy_lock)),
            };
            // Locked, the record cannot be unshared; but it may have been unshared and
            // reused for another object between the lookup and the lock. The owner
            // unlinks an entry before it frees its record, so an unchanged bucket means
            // the entry is still this key's.
            if !index.unchanged(&inner.pod, &found, c) {
                if write {
                    record::write_abandon(record, word, c);
                } else {
                    record::read_unlock(record, word, 0, c);
                }
                c.add(Counter::Retries, 1);
                continue;
            }
            return Ok((found.entry, word));
        }
        Err(Error::Core(megalon_core::Error::RetriesExhausted {
            retries: s.max_retries,
        }))
    }
}

impl HcMetaHandle {
    /// [`route`](Self::route), after checking that `object` fits a row.
    fn route_object(&mut self, key: &[u8], object: &[u8]) -> Result<(KeyHash, usize)> {
        self.check_object(object)?;
        self.route(key)
    }

    /// Checks `key`, serves this host's ring, and says who owns the key. The CXL cost
    /// model charges this thread's SCR accesses from here on to this host (as megalon's
    /// do: a thread's first SCR access may come before its first call on LNR).
    fn route(&mut self, key: &[u8]) -> Result<(KeyHash, usize)> {
        self.inner.hosts[self.host].memory.bind_scr();
        let hash = self.check_key(key)?;
        self.poll();
        Ok((hash, hash.owner(self.inner.settings.hosts)))
    }

    /// Asks `owner` by RPC to do `op` on `key` with `payload`.
    fn ask(&mut self, owner: usize, op: Op, key: &[u8], payload: &[u8]) -> Result<u64> {
        let inner: &Inner = &self.inner;
        call(
            inner,
            self.host,
            &self.counters,
            &mut self.request,
            owner,
            op,
            key,
            payload,
        )
    }

    /// Writes the object `key` of another host's partition under its record's write lock
    /// (shared on request first if its owner has it unshared): `change` gets the record,
    /// this host's memory, the settings and the locked word.
    fn write_remote(
        &mut self,
        owner: usize,
        hash: KeyHash,
        key: &[u8],
        change: impl FnOnce(&AtomicU64, &Memory, &Settings, u64, &mut Vec<u8>, &ThreadCounters),
    ) -> Result<()> {
        let (entry, word) = self.remote_lock(owner, hash, key, true)?;
        let inner: &Inner = &self.inner;
        let c = &self.counters;
        let record = inner.hosts[owner].geometry.index.record(&inner.pod, entry);
        let memory = &inner.hosts[self.host].memory;
        change(record, memory, &inner.settings, word, &mut self.scratch, c);
        record::write_unlock(record, word, self.host, c);
        c.add(Counter::Writes, 1);
        Ok(())
    }
}

impl SchemeHandle for HcMetaHandle {
    fn create(&mut self, key: &[u8], object: &[u8]) -> Result<()> {
        let (hash, owner) = self.route_object(key, object)?;
        if owner == self.host {
            let inner: &Inner = &self.inner;
            let s = &inner.settings;
            inner.hosts[owner].create(&inner.pod, s, hash, key, object, &self.counters)?;
        } else {
            self.ask(owner, Op::Create, key, object)?;
        }
        self.counters.add(Counter::Creates, 1);
        Ok(())
    }

    fn write(&mut self, key: &[u8], object: &[u8]) -> Result<()> {
        let (hash, owner) = self.route_object(key, object)?;
        if owner == self.host {
            let inner: &Inner = &self.inner;
            let s = &inner.settings;
            return inner.hosts[owner].write(&inner.pod, s, hash, key, object, &self.counters);
        }
        let host = self.host;
        self.write_remote(owner, hash, key, |_, memory, s, word, _, c| {
            shared_write(memory, s, host, word, object, c);
        })
    }

    fn read(&mut self, key: &[u8], buf: &mut [u8], extent: Extent<'_>) -> Result<usize> {
        let (hash, owner) = self.route(key)?;
        let inner: &Inner = &self.inner;
        let (s, c) = (&inner.settings, &self.counters);
        if owner == self.host {
            return inner.hosts[owner].read(&inner.pod, s, hash, key, buf, extent, c);
        }
        let (entry, word) = self.remote_lock(owner, hash, key, false)?;
        let inner: &Inner = &self.inner;
        let c = &self.counters;
        let record = inner.hosts[owner].geometry.index.record(&inner.pod, entry);
        let memory = &inner.hosts[self.host].memory;
        let read = shared_read(
            record,
            memory,
            &inner.settings,
            self.host,
            word,
            buf,
            extent,
            c,
        );
        c.add(Counter::Reads, 1);
        Ok(read)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        let (hash, owner) = self.route(key)?;
        if owner == self.host {
            let inner: &Inner = &self.inner;
            inner.hosts[owner].delete(&inner.pod, &inner.settings, hash, key, &self.counters)?;
        } else {
            self.ask(owner, Op::Delete, key, &[])?;
        }
        self.counters.add(Counter::Deletes, 1);
        Ok(())
    }

    fn update(&mut self, key: &[u8], change: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        let (hash, owner) = self.route(key)?;
        if owner == self.host {
            let inner: &Inner = &self.inner;
            let (s, c) = (&inner.settings, &self.counters);
            let scratch = &mut self.scratch;
            return inner.hosts[owner].update(&inner.pod, s, hash, key, change, scratch, c);
        }
        let host = self.host;
        self.write_remote(owner, hash, key, |record, memory, s, word, scratch, c| {
            shared_update(record, memory, s, host, word, scratch, change, c);
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use megalon_core::{MemoryKind, SimulatedConfig};
    use megalon_kv::Store;

    use crate::hcmeta::{scr_bytes_per_shared_object, HcMeta, HcMetaConfig, Placement};

    const HOSTS: usize = 3;
    const KEYS: usize = 6;

    /// Counters on every host's partition, updated from every host with a budget of two
    /// shared objects per host: updates run on the owner's rows (shared or not) and on
    /// other hosts' through their records, while the rows are shared and unshared.
    fn counters_add_up(placement: Placement) {
        const THREADS_PER_HOST: usize = 2;
        const UPDATES: usize = 120;
        let config = HcMetaConfig::new(HOSTS, 64, 128)
            .max_key_bytes(16)
            .scr_budget_bytes(Some(2 * scr_bytes_per_shared_object(16)))
            .placement(placement)
            .ring_entries(8)
            .wait_limit(Duration::from_secs(5));
        let scheme = HcMeta::new(config, |host| {
            MemoryKind::Simulated(SimulatedConfig {
                seed: host as u64 + 1,
                capacity_lines: 64,
                random_eviction_one_in: 8,
                ..SimulatedConfig::default()
            })
        })
        .expect("scheme");
        let store = Store::new(scheme);
        std::thread::scope(|scope| {
            for worker in 0..HOSTS * THREADS_PER_HOST {
                let store = &store;
                scope.spawn(move || {
                    let mut kv = store.handle(worker % HOSTS).unwrap();
                    for i in 0..UPDATES {
                        let key = format!("counter{}", (i + worker) % KEYS);
                        kv.update(key.as_bytes(), |old, new| {
                            let n: u64 =
                                old.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
                            new.extend_from_slice((n + 1).to_string().as_bytes());
                            true
                        })
                        .unwrap();
                    }
                });
            }
        });
        let mut kv = store.handle(0).unwrap();
        let total: u64 = (0..KEYS)
            .map(|k| {
                let value = kv.get(format!("counter{k}").as_bytes()).unwrap().unwrap();
                std::str::from_utf8(&value).unwrap().parse::<u64>().unwrap()
            })
            .sum();
        assert_eq!(total, (HOSTS * THREADS_PER_HOST * UPDATES) as u64);
    }

    #[test]
    fn updates_from_every_host_add_up_in_cxl() {
        counters_add_up(Placement::Cxl);
    }

    #[test]
    fn updates_from_every_host_add_up_in_local_dram() {
        counters_add_up(Placement::Local);
    }
}
