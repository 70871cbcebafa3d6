//! Faults forced into the store's appends (refused, unconfirmed) while threads on three
//! hosts put, insert, update and delete: afterwards, once every key is deleted, the pod
//! holds exactly as many objects as it has slots (no slot leaked by a failed call).
//! (Review `kvstore`, 2026-11-30.)
#![cfg(feature = "chaos")]

use std::sync::Arc;
use std::time::Duration;

use megalon_core::chaos::{fail_next_appends, Fault};
use megalon_core::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};
use megalon_kv::{Error, Megalon, Store};

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn run(seed: u64, partitions: u32) {
    let config = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(256 << 10)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(256)
        .max_hosts(3)
        .local_partitions(partitions);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
    let slots = pod.layout().slot_count;
    eprintln!("slots {slots} records {}", pod.layout().record_count);
    let hosts: Vec<_> = (0..3u64)
        .map(|h| {
            let options = HostOptions::new()
                .memory(MemoryKind::simulated(seed ^ h))
                .wait_limit(Duration::from_secs(2));
            Arc::new(Host::join(&pod, Join::AnyFree, options).expect("join"))
        })
        .collect();
    let store = Store::new(Megalon::new(pod.clone(), hosts.clone()));
    std::thread::scope(|s| {
        for worker in 0..6u64 {
            let store = &store;
            s.spawn(move || {
                let mut kv = store.handle(worker as usize % 3).unwrap();
                let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (worker + 1);
                for _ in 0..3000 {
                    let draw = xorshift(&mut rng);
                    let key = format!("k{}", (draw >> 8) % 40).into_bytes();
                    match draw % 7 {
                        0 => fail_next_appends(&[Fault::Refuse]),
                        1 => fail_next_appends(&[Fault::Unconfirmed]),
                        _ => {}
                    }
                    let value = vec![draw as u8; (draw >> 16) as usize % 100];
                    let _ = match (draw >> 40) % 5 {
                        0 => kv.put(&key, &value),
                        1 => kv.insert(&key, &value),
                        2 => kv
                            .update(&key, |_, new| {
                                new.extend_from_slice(&value);
                                true
                            })
                            .map(drop),
                        _ => kv.delete(&key),
                    };
                    megalon_core::chaos::clear_forced_faults();
                }
            });
        }
    });
    // Every key deleted (an unconfirmed create may apply late: until none is left).
    let mut kv = store.handle(0).unwrap();
    for key in 0..40 {
        let key = format!("k{key}").into_bytes();
        while kv.get(&key).unwrap().is_some() {
            let _ = kv.delete(&key);
        }
    }
    for host in &hosts {
        host.replay().unwrap();
        assert_eq!(host.object_count().unwrap(), 0);
    }
    // Now the pod's every slot takes an object: fill from every host in turn.
    let mut handles: Vec<_> = (0..3).map(|h| store.handle(h).unwrap()).collect();
    let mut live = [true; 3];
    let mut made = 0u64;
    let mut i = 0u64;
    while live.iter().any(|&l| l) {
        for h in 0..3 {
            if !live[h] {
                continue;
            }
            match handles[h].insert(format!("f{i}").as_bytes(), b"x") {
                Ok(()) => made += 1,
                Err(Error::Core(megalon_core::Error::SlotsExhausted { .. })) => live[h] = false,
                Err(e) => panic!("fill: {e}"),
            }
            i += 1;
        }
    }
    let free: Vec<u64> = hosts.iter().map(|h| h.inspect().free_slots()).collect();
    assert_eq!(
        made, slots,
        "objects made of {slots} slots; free slots left per host {free:?}"
    );
}

#[test]
fn forced_faults_leak_no_slot() {
    run(0x51075, 0);
}

#[test]
fn forced_faults_leak_no_slot_with_partitions() {
    run(0x51076, 2);
}
