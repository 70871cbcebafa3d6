//! Lookups without the replica's lock racing replay on the same host (arena records
//! reused by other keys of the same length, the table rebuilt and grown), for `read`,
//! `read_prefix`, `read_many` and `read_many_prefix` (the replicaread review, 2026-11-30).
#![cfg(feature = "chaos")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{config, heap_pod, SLOT};
use megalon_core::chaos::ChaosConfig;
use megalon_core::{Error, Host, HostOptions, Join, MemoryKind};

/// A value naming its key and version: word 0 the key id, word 1 the version, word 2 the
/// length of the value, then bytes derived from all three (a torn copy or another key's
/// bytes show).
fn value(id: u64, version: u64) -> Vec<u8> {
    let len = 24 + (id as usize * 7 + version as usize * 13) % (SLOT - 24);
    let mut bytes = vec![0u8; SLOT];
    bytes[0..8].copy_from_slice(&id.to_le_bytes());
    bytes[8..16].copy_from_slice(&version.to_le_bytes());
    bytes[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    for (i, byte) in bytes.iter_mut().enumerate().skip(24) {
        *byte = (id as u8)
            .wrapping_mul(31)
            .wrapping_add(version as u8)
            .wrapping_add(i as u8);
    }
    bytes
}

fn extent(first: &[u8]) -> usize {
    if first.len() < 24 {
        return first.len();
    }
    u64::from_le_bytes(first[16..24].try_into().unwrap()) as usize
}

/// Checks a copy of `id`'s value (`prefix` bytes of it, or all).
fn check(id: u64, copy: &[u8], what: &str) {
    let got = u64::from_le_bytes(copy[0..8].try_into().unwrap());
    assert_eq!(got, id, "{what}: key {id} answered with key {got}'s bytes");
    let version = u64::from_le_bytes(copy[8..16].try_into().unwrap());
    let whole = value(id, version);
    assert_eq!(
        &whole[..copy.len()],
        copy,
        "{what}: a torn copy of {id} v{version}"
    );
}

fn key(id: u64) -> Vec<u8> {
    format!("key-{id:04}").into_bytes()
}

fn options(seed: u64) -> HostOptions {
    let memory = if common::env_var::<u32>("REPLICAREAD_SIM").unwrap_or(0) == 1 {
        common::simulated(seed, 4096, 64)
    } else {
        MemoryKind::Hardware
    };
    HostOptions::new()
        .memory(memory)
        .record_watermark(0.5)
        .wait_limit(Duration::from_secs(5))
        .max_retries(1000)
        .pump_interval(Some(Duration::from_micros(200)))
        .chaos(ChaosConfig::preemptions(seed, 7))
}

/// Readers on host 1 read keys that hosts 0 and 1 create, write, delete and create again
/// (arena records reused across keys of one length, the table rebuilt), with replay on
/// host 1 (its pump, its own churn) overlapping every lookup.
#[test]
fn reads_without_the_lock_never_answer_another_keys_bytes() {
    let secs: u64 = common::env_var("REPLICAREAD_SECS").unwrap_or(4);
    let pod = heap_pod(
        &config()
            .lnr_bytes(8 << 20)
            .log_capacity_entries(4096)
            .scr_bytes(4096),
    );
    let a = Arc::new(Host::join(&pod, Join::As(0), options(1)).unwrap());
    let b = Arc::new(Host::join(&pod, Join::As(1), options(2)).unwrap());
    let keys: u64 = common::env_var("REPLICAREAD_KEYS").unwrap_or(64);
    for id in 0..keys {
        a.create(&key(id), &value(id, 0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut threads = Vec::new();
    // Churners: host 0 and host 1 each own half the keys: write, delete, create again.
    for (n, host) in [Arc::clone(&a), Arc::clone(&b)].into_iter().enumerate() {
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let mut version = 1u64;
            let keys = keys;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
            while !stop.load(Ordering::Relaxed) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let id = (rng % (keys / 2)) * 2 + n as u64;
                version += 1;
                match rng >> 60 {
                    0..=5 => match host.write(&key(id), &value(id, version)) {
                        Ok(_) | Err(Error::UnknownKey) => {}
                        Err(error) => panic!("write: {error}"),
                    },
                    6..=10 => match host.delete(&key(id)) {
                        Ok(()) | Err(Error::UnknownKey) => {}
                        Err(error) => panic!("delete: {error}"),
                    },
                    _ => match host.create(&key(id), &value(id, version)) {
                        Ok(()) | Err(Error::ObjectExists) => {}
                        Err(error) => panic!("create: {error}"),
                    },
                }
            }
        }));
    }
    // Readers on host 1.
    for r in 0..2u64 {
        let (b, stop, reads) = (Arc::clone(&b), Arc::clone(&stop), Arc::clone(&reads));
        threads.push(std::thread::spawn(move || {
            let mut rng = 0x1234_5678_9abc_def1u64 ^ r;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            while !stop.load(Ordering::Relaxed) {
                let kind = next() % 4;
                let ids: Vec<u64> = (0..1 + next() % 20).map(|_| next() % keys).collect();
                match kind {
                    0 => {
                        let id = ids[0];
                        let mut buf = vec![0u8; SLOT];
                        match b.read(&key(id), &mut buf) {
                            Ok(_) => check(id, &buf, "read"),
                            Err(Error::UnknownKey) => {}
                            Err(error) => panic!("read: {error}"),
                        }
                    }
                    1 => {
                        let id = ids[0];
                        let mut buf = vec![0u8; SLOT];
                        match b.read_prefix(&key(id), &mut buf, &extent) {
                            Ok((n, _)) => {
                                check(id, &buf[..n], "read_prefix");
                                assert_eq!(
                                    n,
                                    extent(&buf[..24])
                                        .clamp(Host::FIRST_READ_BYTES.min(SLOT), SLOT),
                                    "read_prefix length"
                                );
                            }
                            Err(Error::UnknownKey) => {}
                            Err(error) => panic!("read_prefix: {error}"),
                        }
                    }
                    _ => {
                        let keys: Vec<Vec<u8>> = ids.iter().map(|&id| key(id)).collect();
                        let mut bufs = vec![vec![0u8; SLOT]; ids.len()];
                        let mut reads = common::reads(&keys, &mut bufs);
                        let answers: Vec<Result<usize, Error>> = if kind == 2 {
                            b.read_many(&mut reads)
                                .into_iter()
                                .map(|a| a.map(|_| SLOT))
                                .collect()
                        } else {
                            b.read_many_prefix(&mut reads, &extent)
                                .into_iter()
                                .map(|a| a.map(|(n, _)| n))
                                .collect()
                        };
                        drop(reads);
                        for ((answer, id), buf) in answers.into_iter().zip(&ids).zip(&bufs) {
                            match answer {
                                Ok(n) => check(*id, &buf[..n], "read_many"),
                                Err(Error::UnknownKey) => {}
                                Err(error) => panic!("read_many: {error}"),
                            }
                        }
                    }
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    while Instant::now() < end && !threads.iter().any(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    eprintln!("{} reads", reads.load(Ordering::Relaxed));
}

/// A `read_many` whose first read's object is deleted, and its arena record and slot
/// taken by another key of the same length, while the group's second read starts (its
/// hook runs after that read's tail check): the first read's copy holds the other key's
/// bytes, and its `read_end` must throw it away (the reused record's stamp is the
/// create's) and answer `UnknownKey`.
#[test]
fn a_read_many_read_whose_record_and_slot_go_to_another_key_is_refused() {
    use megalon_core::chaos::{self, Point};
    let pod = heap_pod(&config());
    let opts = || {
        HostOptions::new()
            .memory(MemoryKind::Hardware)
            .pump_interval(None)
            .wait_limit(Duration::from_secs(5))
    };
    let writer: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), opts()).unwrap()));
    let reader: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), opts()).unwrap()));
    writer.create(b"key-0001", &value(1, 0)).unwrap();
    writer.create(b"key-0002", &value(2, 0)).unwrap();
    reader.replay().unwrap();
    let slot_before = reader.lookup(b"key-0001").unwrap().unwrap().slot;
    let mut starts = 0;
    let keys = [b"key-0001".to_vec(), b"key-0002".to_vec()];
    let mut bufs = vec![vec![0u8; SLOT]; 2];
    let answers = chaos::with_hook(
        move |point| {
            if point == Point::ReadAfterTailCheck {
                starts += 1;
                if starts == 2 {
                    writer.delete(b"key-0001").unwrap();
                    writer.create(b"key-0003", &value(3, 0)).unwrap();
                    assert_eq!(
                        writer.lookup(b"key-0003").unwrap().unwrap().slot,
                        slot_before,
                        "the deleted object's slot reused"
                    );
                }
            }
        },
        || reader.read_many(&mut common::reads(&keys, &mut bufs)),
    );
    assert!(
        matches!(answers[0], Err(Error::UnknownKey)),
        "{:?}",
        answers[0]
    );
    assert!(answers[1].is_ok());
    check(2, &bufs[1], "second read");
}
