//! How much DRAM one host's replica of the index costs per object, with 24-byte keys:
//! `replica_heap_bytes() / replica_len()` at 100k, 300k and 1M objects, the worst point
//! from 100k on (just after the table grows; below that the first 256 KiB arena chunk
//! dominates), and a plain
//! `hashbrown::HashMap<Vec<u8>, (u64, u32, u64, u32)>` holding the same keys for
//! comparison. Every host holds every object, so this is paid once per host. Results:
//! `docs/log.md`.
//!
//! ```text
//! cargo run --release --example replica_memory
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use megalon::core::{Backing, Host, HostOptions, Join, Pod, PodConfig};

mod common;

const KEY_BYTES: usize = 24;
const CHECKPOINTS: [u64; 3] = [100_000, 300_000, 1_000_000];
/// How often (in objects) the worst point is sampled.
const SAMPLE_EVERY: u64 = 1_000;

/// Measure how much DRAM one host's replica of the index costs per object.
///
/// Creates 1,000,000 objects with 24-byte keys on one host and prints, at 100k, 300k and
/// 1M objects, the replica's heap bytes per object beside a plain `hashbrown::HashMap`
/// holding the same keys, then the worst point from 100k objects on. Every host holds
/// every object, so this is paid once per host. Results: `docs/log.md`.
#[derive(Debug, Parser)]
#[command(name = "replica_memory")]
struct Args {}

fn main() -> ExitCode {
    common::main_without_flags::<Args>(measure)
}

fn measure() -> common::Result {
    let objects = *CHECKPOINTS.last().expect("checkpoints");
    let config = PodConfig::new()
        .slot_size_bytes(64)
        .max_key_bytes(32)
        .log_capacity_entries(1 << 16)
        .max_hosts(1);
    let slots = objects + objects / 64 + 8192;
    let lnr_bytes =
        (config.log_capacity_entries * config.log_entry_bytes() + slots * 64).div_ceil(4096) * 4096;
    let pod = Arc::new(Pod::create(&config.lnr_bytes(lnr_bytes), Backing::heap())?);
    let host = Host::join(
        &pod,
        Join::AnyFree,
        HostOptions::new().pump_interval(None).flat_combining(false),
    )?;
    let mut plain: hashbrown::HashMap<Vec<u8>, (u64, u32, u64, u32)> = hashbrown::HashMap::new();

    println!("{KEY_BYTES}-byte keys; replica = replica_heap_bytes(); plain map = its table");
    println!("plus {KEY_BYTES} requested bytes per key (the allocator adds its own rounding)");
    println!();
    println!("| objects | replica bytes | replica B/object | plain map bytes | plain B/object |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    let mut worst = (0.0f64, 0u64);
    for n in 0..objects {
        let key = format!("obj:{n:020}");
        debug_assert_eq!(key.len(), KEY_BYTES);
        host.create(key.as_bytes(), key.as_bytes())?;
        plain.insert(key.into_bytes(), (n, u32::MAX, n, u32::MAX));
        let len = n + 1;
        if len >= CHECKPOINTS[0] && len % SAMPLE_EVERY == 0 {
            let per_object =
                host.inspect().replica_heap_bytes() as f64 / host.inspect().replica_len() as f64;
            if per_object > worst.0 {
                worst = (per_object, len);
            }
        }
        if CHECKPOINTS.contains(&len) {
            assert_eq!(host.inspect().replica_len(), len);
            let replica = host.inspect().replica_heap_bytes();
            let plain_bytes = (plain.allocation_size() + plain.len() * KEY_BYTES) as u64;
            println!(
                "| {len} | {replica} | {:.1} | {plain_bytes} | {:.1} |",
                replica as f64 / len as f64,
                plain_bytes as f64 / len as f64
            );
        }
    }
    println!();
    println!(
        "worst replica B/object from {} objects on (sampled every {SAMPLE_EVERY}): \
         {:.1} at {} objects",
        CHECKPOINTS[0], worst.0, worst.1
    );
    Ok(())
}
