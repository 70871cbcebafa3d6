//! Sequential histories across three hosts whose simulated caches keep every line they
//! load (no eviction, a million lines): any stale line a protocol step fails to drop is
//! served. One thread drives the hosts at random, so every get must return exactly what a
//! plain map holds, and every update must see exactly the map's old value. Values grow
//! and shrink (empty, near the longest, any length between).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use megalon_core::{
    Backing, Coherence, CrashSafety, Host, HostOptions, Join, Layout, MemoryKind, Pod, PodConfig,
    SimulatedConfig,
};
use megalon_kv::{Error, Megalon, Store};

/// One history's pod and hosts.
#[derive(Clone, Copy, Debug)]
struct History {
    seed: u64,
    width: u32,
    /// Records in the pod (at most): few, and they churn.
    records: u64,
    partitions: u32,
    copies: u32,
    undo: bool,
    pump: bool,
    all_log: bool,
    operations: u32,
}

const BASE: History = History {
    seed: 1,
    width: 8,
    records: 8,
    partitions: 0,
    copies: 0,
    undo: false,
    pump: false,
    all_log: false,
    operations: 20_000,
};

/// Keys of a history: few, so that most operations meet an object another host touched.
const KEYS: u64 = 24;

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn store(h: &History) -> Store<Megalon> {
    let config = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(256)
        .max_key_bytes(16)
        .log_capacity_entries(4096)
        .record_width_bits(h.width)
        .max_hosts(3)
        .local_partitions(h.partitions)
        .local_copies(h.copies)
        .crash_safety(if h.undo {
            CrashSafety::Undo
        } else {
            CrashSafety::Off
        })
        .coherence(if h.all_log {
            Coherence::AllLog
        } else {
            Coherence::Split
        });
    // The SCR the records beyond `h.records` would take goes to the application instead.
    let all = Layout::new(&config).expect("a layout").record_count;
    let spare = (all - h.records.min(all)) * u64::from(h.width) / 8 / 64 * 64;
    let pod = Pod::create(&config.app_scr_bytes(spare), Backing::heap()).expect("a pod");
    let pod = Arc::new(pod);
    let hosts = (0..3)
        .map(|i| {
            let memory = MemoryKind::Simulated(SimulatedConfig {
                seed: h.seed ^ (i + 1),
                capacity_lines: 1 << 20,
                random_eviction_one_in: 0,
                settle_one_in: 0,
            });
            let options = HostOptions::new()
                .memory(memory)
                .pump_interval(h.pump.then_some(Duration::from_millis(1)))
                .wait_limit(Duration::from_secs(5));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("a host"))
        })
        .collect();
    Store::new(Megalon::new(pod, hosts))
}

fn run(h: History) {
    let store = store(&h);
    let max = store.max_value_bytes();
    let mut handles: Vec<_> = (0..3).map(|i| store.handle(i).expect("a handle")).collect();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = h.seed | 1;
    for op in 0..h.operations {
        let d = xorshift(&mut rng);
        let host = (d % 3) as usize;
        let key = format!("k{}", (d >> 8) % KEYS).into_bytes();
        let len = match (d >> 20) % 4 {
            0 => (d >> 24) as usize % 5,
            1 => max - (d >> 24) as usize % 3,
            _ => (d >> 24) as usize % (max + 1),
        };
        let value: Vec<u8> = (0..len)
            .map(|i| (op as usize * 31 + i * 7 + host) as u8)
            .collect();
        let kv = &mut handles[host];
        let at = format!(
            "{h:?}, operation {op} on host {host}, key {:?}",
            String::from_utf8_lossy(&key)
        );
        match (d >> 40) % 12 {
            0..=3 => assert_eq!(
                kv.get(&key).expect("get").as_ref(),
                model.get(&key),
                "get: {at}"
            ),
            4 => {
                let keys: Vec<Vec<u8>> = (0..5)
                    .map(|i| format!("k{}", ((d >> 8) + i * 3) % KEYS).into_bytes())
                    .collect();
                let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                for (key, got) in keys.iter().zip(kv.get_many(&asked)) {
                    let got = got.expect("get_many");
                    assert_eq!(got.as_ref(), model.get(key), "get_many of {key:?}: {at}");
                }
            }
            5 | 6 => {
                kv.put(&key, &value).expect("put");
                model.insert(key, value);
            }
            7 => match kv.insert(&key, &value) {
                Ok(()) => assert!(model.insert(key, value).is_none(), "insert: {at}"),
                Err(Error::KeyExists) => assert!(model.contains_key(&key), "insert: {at}"),
                Err(e) => panic!("insert: {e}: {at}"),
            },
            8 | 9 => match kv.delete(&key) {
                Ok(()) => assert!(model.remove(&key).is_some(), "delete: {at}"),
                Err(Error::UnknownKey) => assert!(!model.contains_key(&key), "delete: {at}"),
                Err(e) => panic!("delete: {e}: {at}"),
            },
            _ => {
                let mut seen = None;
                let stored = kv
                    .update(&key, |old, new| {
                        seen = Some(old.map(<[u8]>::to_vec));
                        new.extend_from_slice(&value);
                        true
                    })
                    .expect("update");
                assert!(stored, "update: {at}");
                assert_eq!(
                    seen.expect("change ran"),
                    model.get(&key).cloned(),
                    "update saw: {at}"
                );
                model.insert(key, value);
            }
        }
    }
}

#[test]
fn eight_records_that_churn() {
    run(History { seed: 11, ..BASE });
}

#[test]
fn two_bit_records() {
    run(History {
        seed: 12,
        width: 2,
        ..BASE
    });
}

#[test]
fn a_record_for_every_key() {
    run(History {
        seed: 13,
        records: 4096,
        width: 16,
        ..BASE
    });
}

#[test]
fn local_copies() {
    run(History {
        seed: 14,
        copies: 1,
        ..BASE
    });
}

#[test]
fn local_partitions() {
    run(History {
        seed: 15,
        partitions: 1,
        pump: true,
        operations: 5000,
        ..BASE
    });
}

#[test]
fn local_partitions_and_copies_with_undo_images() {
    let h = History {
        seed: 16,
        partitions: 2,
        copies: 1,
        undo: true,
        pump: true,
        ..BASE
    };
    run(History {
        operations: 5000,
        ..h
    });
}

#[test]
fn four_bit_records_with_undo_images_and_pumps() {
    run(History {
        seed: 17,
        undo: true,
        pump: true,
        width: 4,
        ..BASE
    });
}

#[test]
fn all_log() {
    run(History {
        seed: 18,
        all_log: true,
        ..BASE
    });
}

#[test]
fn all_log_with_undo_images_and_pumps() {
    run(History {
        seed: 19,
        all_log: true,
        undo: true,
        pump: true,
        ..BASE
    });
}
