//! A recorded concurrent run against in-memory stores, and synthetic histories: what the
//! checker's tests and its benchmark run it on.

use std::collections::HashMap;
use std::thread;

use crate::{
    Call, Clock, History, Outcome, ProcessId, RandomSource, SplitMix64, ThreadRecorder, Value,
    ZipfianGenerator,
};
use parking_lot::Mutex;

/// Zipfian ranks in `0..keys`, rank 0 the hottest (YCSB's ZipfianGenerator).
fn zipfian(keys: usize, theta: f64) -> ZipfianGenerator {
    ZipfianGenerator::new(keys as u64, theta).expect("at least one key, theta in (0, 1)")
}

/// A key-value store under test.
pub trait Store: Sync {
    /// Sets `key` to `value`, for thread `thread`.
    fn put(&self, thread: u32, key: &[u8], value: &[u8]);
    /// The value of `key`, as thread `thread` reads it.
    fn get(&self, thread: u32, key: &[u8]) -> Option<Vec<u8>>;
    /// Whether it created the key.
    fn create(&self, thread: u32, key: &[u8], value: &[u8]) -> bool;
    /// Whether it deleted the key.
    fn delete(&self, thread: u32, key: &[u8]) -> bool;
}

const SHARDS: usize = 64;

fn shard_of(key: &[u8]) -> usize {
    key.iter()
        .fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize))
        % SHARDS
}

/// A correct store: a map in shards, each behind a lock.
pub struct LockedStore {
    shards: Vec<Mutex<HashMap<Vec<u8>, Vec<u8>>>>,
}

impl Default for LockedStore {
    fn default() -> Self {
        LockedStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl LockedStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for LockedStore {
    fn put(&self, _: u32, key: &[u8], value: &[u8]) {
        self.shards[shard_of(key)]
            .lock()
            .insert(key.to_vec(), value.to_vec());
    }
    fn get(&self, _: u32, key: &[u8]) -> Option<Vec<u8>> {
        self.shards[shard_of(key)].lock().get(key).cloned()
    }
    fn create(&self, _: u32, key: &[u8], value: &[u8]) -> bool {
        let mut shard = self.shards[shard_of(key)].lock();
        if shard.contains_key(key) {
            return false;
        }
        shard.insert(key.to_vec(), value.to_vec());
        true
    }
    fn delete(&self, _: u32, key: &[u8]) -> bool {
        self.shards[shard_of(key)].lock().remove(key).is_some()
    }
}

/// A store whose threads keep a private copy of what they read and serve it again
/// without looking: the bug of a host that skips invalidating its cache.
pub struct StaleCacheStore {
    inner: LockedStore,
    caches: Mutex<HashMap<CacheKey, Option<Vec<u8>>>>,
}

/// A thread and a key.
type CacheKey = (u32, Vec<u8>);

impl Default for StaleCacheStore {
    fn default() -> Self {
        StaleCacheStore {
            inner: LockedStore::new(),
            caches: Mutex::new(HashMap::new()),
        }
    }
}

impl StaleCacheStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for StaleCacheStore {
    fn put(&self, thread: u32, key: &[u8], value: &[u8]) {
        self.inner.put(thread, key, value);
        self.caches.lock().remove(&(thread, key.to_vec()));
    }
    fn get(&self, thread: u32, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(cached) = self.caches.lock().get(&(thread, key.to_vec())) {
            return cached.clone();
        }
        let read = self.inner.get(thread, key);
        self.caches
            .lock()
            .insert((thread, key.to_vec()), read.clone());
        read
    }
    fn create(&self, thread: u32, key: &[u8], value: &[u8]) -> bool {
        self.caches.lock().remove(&(thread, key.to_vec()));
        self.inner.create(thread, key, value)
    }
    fn delete(&self, thread: u32, key: &[u8]) -> bool {
        self.caches.lock().remove(&(thread, key.to_vec()));
        self.inner.delete(thread, key)
    }
}

/// The shape of a run.
pub struct Run {
    /// Threads, each a process of the history.
    pub threads: u32,
    /// Operations each thread calls.
    pub operations_per_thread: usize,
    /// Keys, chosen by a Zipfian distribution.
    pub keys: usize,
    /// The distribution's theta.
    pub zipf_theta: f64,
    /// Percent of gets, puts and creates; the rest are deletes.
    pub get_percent: u64,
    /// Percent of puts.
    pub put_percent: u64,
    /// Percent of creates.
    pub create_percent: u64,
    /// Bytes of each value.
    pub value_len_bytes: usize,
    /// The seed of every thread's choices.
    pub seed: u64,
}

impl Run {
    /// Runs the threads against `store`, each recording what it does, and merges the
    /// threads' logs.
    pub fn record(&self, store: &impl Store) -> History {
        let clock = Clock::counter();
        let zipf = zipfian(self.keys, self.zipf_theta);
        let logs = thread::scope(|scope| {
            let workers: Vec<_> = (0..self.threads)
                .map(|thread| {
                    let (clock, zipf) = (clock.clone(), &zipf);
                    scope.spawn(move || self.worker(store, thread, clock, zipf))
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap())
                .collect::<Vec<_>>()
        });
        History::merge(logs).unwrap()
    }

    fn worker(
        &self,
        store: &impl Store,
        thread: u32,
        clock: Clock,
        zipf: &ZipfianGenerator,
    ) -> crate::ThreadLog {
        let mut rng = SplitMix64::new(self.seed ^ (u64::from(thread) << 32));
        let mut recorder = ThreadRecorder::new(ProcessId::new(0, thread), clock);
        recorder.reserve(self.operations_per_thread);
        let mut bytes = vec![0; self.value_len_bytes];
        for sequence in 0..self.operations_per_thread as u64 {
            let key = format!("key{}", zipf.next(&mut rng));
            let key = key.as_bytes();
            let value = Value::new(thread, sequence);
            let dice = rng.next_u64() % 100;
            if dice < self.get_percent {
                let get = recorder.invoke(key, Call::Get).unwrap();
                let read = store.get(thread, key);
                recorder.complete_read(get, read.as_deref()).unwrap();
            } else if dice < self.get_percent + self.put_percent {
                value.encode_into(&mut bytes).unwrap();
                let put = recorder.invoke(key, Call::Put(value)).unwrap();
                store.put(thread, key, &bytes);
                recorder.complete(put, Outcome::Ok).unwrap();
            } else if dice < self.get_percent + self.put_percent + self.create_percent {
                value.encode_into(&mut bytes).unwrap();
                let create = recorder.invoke(key, Call::Create(value)).unwrap();
                let created = store.create(thread, key, &bytes);
                let outcome = if created {
                    Outcome::Created
                } else {
                    Outcome::Exists
                };
                recorder.complete(create, outcome).unwrap();
            } else {
                let delete = recorder.invoke(key, Call::Delete).unwrap();
                let deleted = store.delete(thread, key);
                let outcome = if deleted {
                    Outcome::Deleted
                } else {
                    Outcome::Absent
                };
                recorder.complete(delete, outcome).unwrap();
            }
        }
        recorder.finish()
    }
}

/// A linearizable history with as much overlap as asked for, made without threads:
/// `processes` processes each run operations back to back, every one lasting a random
/// 1 to `max_duration` ticks with a random point inside where it takes effect; the
/// model, run in the order of those points, gives the results. The overlaps do not
/// depend on how many cores the machine has, unlike a recorded run's.
pub fn synthetic_history(
    processes: u32,
    operations: usize,
    keys: usize,
    zipf_theta: f64,
    max_duration: u64,
    seed: u64,
) -> History {
    struct Planned {
        process: u32,
        key: usize,
        kind: u64,
        invoked_at: u64,
        returned_at: u64,
        point: u64,
        value: Value,
    }
    let mut rng = SplitMix64::new(seed);
    let zipf = zipfian(keys, zipf_theta);
    let mut now = vec![0u64; processes as usize];
    let mut planned: Vec<Planned> = (0..operations)
        .map(|i| {
            let process = (i % processes as usize) as u32;
            let invoked_at = now[process as usize] + rng.next_u64() % 4;
            let duration = 1 + rng.next_u64() % max_duration;
            let returned_at = invoked_at + duration;
            now[process as usize] = returned_at + 1;
            Planned {
                process,
                key: zipf.next(&mut rng) as usize,
                kind: rng.next_u64() % 100,
                invoked_at,
                returned_at,
                point: invoked_at + rng.next_u64() % (duration + 1),
                value: Value::new(process, i as u64),
            }
        })
        .collect();
    planned.sort_by_key(|op| op.point);
    let mut state: Vec<Option<Value>> = vec![None; keys];
    let mut builder = History::builder();
    for op in planned {
        let current = &mut state[op.key];
        let (call, outcome) = match op.kind {
            0..50 => (Call::Get, current.map_or(Outcome::Absent, Outcome::Found)),
            50..90 => {
                *current = Some(op.value);
                (Call::Put(op.value), Outcome::Ok)
            }
            90..95 => match current {
                None => {
                    *current = Some(op.value);
                    (Call::Create(op.value), Outcome::Created)
                }
                Some(_) => (Call::Create(op.value), Outcome::Exists),
            },
            _ => match current.take() {
                Some(_) => (Call::Delete, Outcome::Deleted),
                None => (Call::Delete, Outcome::Absent),
            },
        };
        builder
            .push(
                ProcessId::new(0, op.process),
                format!("key{}", op.key).as_bytes(),
                call,
                outcome,
                op.invoked_at,
                Some(op.returned_at),
            )
            .unwrap();
    }
    builder.build()
}
