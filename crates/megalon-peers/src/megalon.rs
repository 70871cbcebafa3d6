//! The megalon KV store as a peer: on an in-process pod (one host per worker thread), and
//! on a pod file shared by child processes (one host each). Its workers load through the
//! benchmarks' mix, as every other run of the KV store does ([`megalon_bench::mix::load`]),
//! and run the loop every peer runs ([`Worker::run`]'s default: the same draws, one
//! operation at a time, no clock read per operation), so that the rates differ only by
//! the stores.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use megalon_bench::mix::{self, Mix};
use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};
use megalon_kv::{KvHandle, Megalon, MegalonHandle, Store};

use crate::drive::{self, Work, Worker};
use crate::{PeerError, PeerSpec, Rates};

/// Bytes of the pod's coherent region (SCR), as the KV store examples default to.
const SCR_BYTES: u64 = 1 << 20;
/// Bits of a coherence record, as the KV store examples default to.
const RECORD_WIDTH_BITS: u32 = 16;

/// The pod of a run: [`Mix::pod_config`] for the keys and values, one host per worker,
/// the SCR of the KV store examples.
fn pod_config(work: &Work) -> PodConfig {
    work.mix(0.0)
        .pod_config(work.workers as u32)
        .scr_bytes(SCR_BYTES)
        .record_width_bits(RECORD_WIDTH_BITS)
}

fn describe_pod(config: &PodConfig) -> String {
    format!(
        "SCR {} KiB of {}-bit records, LNR {} MiB, hardware memory (this machine's coherent caches, real flushes)",
        config.scr_bytes >> 10,
        config.record_width_bits,
        config.lnr_bytes >> 20
    )
}

/// One worker: a host of the store, and its handle on it (made once: a handle holds the
/// buffer its calls frame objects in).
struct MegalonWorker<'s> {
    store: &'s Store<Megalon>,
    host: usize,
    handle: KvHandle<MegalonHandle>,
}

impl<'s> MegalonWorker<'s> {
    fn new(store: &'s Store<Megalon>, host: usize) -> Result<Self, PeerError> {
        Ok(Self {
            store,
            host,
            handle: store.handle(host)?,
        })
    }
}

impl Worker for MegalonWorker<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, PeerError> {
        Ok(self.handle.get_into(key, out)?)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), PeerError> {
        Ok(self.handle.put(key, value)?)
    }

    fn load(&mut self, mix: &Mix, first: u64, step: u64) -> Result<u64, PeerError> {
        let loaded = AtomicU64::new(0);
        mix::load(self.store, self.host, mix, first, step, &loaded)?;
        Ok(loaded.load(Ordering::Relaxed))
    }
}

/// The store on an in-process pod: worker `i` is host `i`, on a thread of its own.
pub(crate) fn run_threads(spec: &PeerSpec, notes: &mut Vec<String>) -> Result<Rates, PeerError> {
    let work = Work::new(spec, 0);
    let config = pod_config(&work);
    let pod = Arc::new(Pod::create(&config, Backing::heap())?);
    let options = HostOptions::new().wait_limit(work.wait());
    let hosts = (0..spec.workers)
        .map(|_| Host::join(&pod, Join::AnyFree, options.clone()).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let store = Store::new(Megalon::new(pod, hosts));
    notes.push(format!(
        "{} hosts in this process, one worker thread each; pod in this process's memory: {}",
        spec.workers,
        describe_pod(&config)
    ));
    let mut workers = (0..spec.workers)
        .map(|host| MegalonWorker::new(&store, host))
        .collect::<Result<Vec<_>, _>>()?;
    drive::on_threads(spec, &mut workers)
}

/// The store on a pod file in `spec.dir`: child `i` is host `i`. The file is removed at
/// the end.
pub(crate) fn run_processes(spec: &PeerSpec, notes: &mut Vec<String>) -> Result<Rates, PeerError> {
    let config = pod_config(&Work::new(spec, 0));
    let path = crate::unique_path(&spec.dir, "pod");
    let _remove = crate::RemoveOnDrop(path.clone());
    drop(Pod::create(&config, Backing::file(&path))?);
    notes.push(format!(
        "{} child processes, one host each, on the pod file {}: {}",
        spec.workers,
        path.display(),
        describe_pod(&config)
    ));
    drive::on_processes(spec, "megalon", &path)
}

/// A child: joins the pod at `path` as host `work.worker` and serves.
pub(crate) fn child(work: &Work, path: &Path) -> Result<(), PeerError> {
    let pod = Arc::new(Pod::open_expecting(
        Backing::file(PathBuf::from(path)),
        &pod_config(work),
    )?);
    let host = Host::join(
        &pod,
        Join::As(work.worker as u32),
        HostOptions::new().wait_limit(work.wait()),
    )?;
    let store = Store::new(Megalon::new(pod, vec![Arc::new(host)]));
    drive::serve(work, &mut MegalonWorker::new(&store, 0)?)
}
