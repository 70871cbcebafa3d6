//! LMDB (through `heed`) as a peer: one environment in a directory on tmpfs, one child
//! process per worker, each opening it.
//!
//! A get is a read transaction (a snapshot; the value is copied out before it ends). A
//! put is a write transaction committed at once: LMDB lets one writer in at a time,
//! across processes, through its lock file. The load commits [`LOAD_BATCH_KEYS`] keys per
//! transaction. The environment is opened with `NO_SYNC` and `NO_META_SYNC`: on tmpfs
//! there is no disk to sync to, and a commit is atomic and visible to the other process
//! without a sync.

#![allow(unsafe_code)]

use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions};
use megalon_bench::mix::{self, Mix};

use crate::drive::{self, Work, Worker};
use crate::{PeerError, PeerSpec, Rates};

/// Keys inserted per write transaction while loading.
pub(crate) const LOAD_BATCH_KEYS: u64 = 1000;

/// The flags the environment is opened with, and why, for the notes.
const FLAGS: EnvFlags = EnvFlags::NO_SYNC.union(EnvFlags::NO_META_SYNC);
const FLAGS_NOTE: &str = "NO_SYNC | NO_META_SYNC (tmpfs: no disk to sync to)";

/// Bytes LMDB spends on an entry beyond its key and value (node header, page slack).
const ENTRY_OVERHEAD_BYTES: u64 = 64;
/// Room for the pages copy-on-write puts free and reuse.
const MAP_SLACK_BYTES: u64 = 64 << 20;

/// The memory map's size: twice the entries, and slack; whole MiB.
fn map_size_bytes(work: &Work) -> usize {
    let key_bytes = mix::key(0).len() as u64;
    let entry_bytes = key_bytes + work.value_bytes as u64 + ENTRY_OVERHEAD_BYTES;
    let bytes = 2 * work.keys * entry_bytes + MAP_SLACK_BYTES;
    bytes.next_multiple_of(1 << 20) as usize
}

/// One worker: the environment and its unnamed database.
struct LmdbWorker<'e> {
    env: &'e Env,
    db: Database<'e, Bytes, Bytes>,
}

impl Worker for LmdbWorker<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, PeerError> {
        let txn = self.env.read_txn()?;
        let found = match self.db.get(&txn, key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(value);
                true
            }
            None => false,
        };
        // Read-only: nothing to commit; dropping it ends it.
        drop(txn);
        Ok(found)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), PeerError> {
        let mut txn = self.env.write_txn()?;
        self.db.put(&mut txn, key, value)?;
        txn.commit()?;
        Ok(())
    }

    fn load(&mut self, mix: &Mix, first: u64, step: u64) -> Result<u64, PeerError> {
        let value = vec![drive::LOAD_BYTE; mix.value_bytes];
        let indexes: Vec<u64> = (first..mix.keys).step_by(step.max(1) as usize).collect();
        for batch in indexes.chunks(LOAD_BATCH_KEYS as usize) {
            let mut txn = self.env.write_txn()?;
            for &index in batch {
                self.db.put(&mut txn, &mix::key(index), &value)?;
            }
            txn.commit()?;
        }
        Ok(indexes.len() as u64)
    }
}

/// LMDB on a new environment directory in `spec.dir`, removed at the end.
pub(crate) fn run(spec: &PeerSpec, notes: &mut Vec<String>) -> Result<Rates, PeerError> {
    let dir = crate::unique_path(&spec.dir, "lmdb");
    std::fs::create_dir(&dir)?;
    let _remove = crate::RemoveOnDrop(dir.clone());
    notes.push(format!(
        "{} child processes opening one environment in {} (map {} MiB), flags {FLAGS_NOTE}",
        spec.workers,
        dir.display(),
        map_size_bytes(&Work::new(spec, 0)) >> 20
    ));
    notes.push(format!(
        "a get is a read transaction; a put is a write transaction committed alone (one writer at a time); the load commits {LOAD_BATCH_KEYS} keys per transaction"
    ));
    drive::on_processes(spec, "lmdb", &dir)
}

/// A child: opens the environment at `path` and serves.
pub(crate) fn child(work: &Work, path: &Path) -> Result<(), PeerError> {
    let mut options = EnvOpenOptions::new();
    options.map_size(map_size_bytes(work));
    // SAFETY: NO_SYNC and NO_META_SYNC give up durability across a crash of the machine
    // (not atomicity or isolation): the environment lives on tmpfs, which a crash loses
    // anyway, and it is removed at the end of the run.
    unsafe {
        options.flags(FLAGS);
    }
    // SAFETY: the environment's files are this run's own (a new directory, see `run`):
    // only the run's children open them, each once, through LMDB and its lock file, and
    // nothing truncates or rewrites them while they are mapped. The directory is on a
    // local file system (tmpfs), as LMDB requires.
    let env = unsafe { options.open(path)? };
    let wtxn = env.write_txn()?;
    let db: Database<'_, Bytes, Bytes> = env
        .create_databases_and_commit(wtxn, |opener, wtxn| {
            opener
                .create_database(wtxn, None)
                .map(CommitOrAbort::<_, ()>::Commit)
        })?
        .unwrap_commit();
    drive::serve(work, &mut LmdbWorker { env: &env, db })
}
