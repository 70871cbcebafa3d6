//! The first thing to run: create a pod, print its layout and SCR usage, watch the
//! simulated non-coherent memory serve a stale read until the reader invalidates, then
//! let the object protocol do the invalidating.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use megalon::core::{Backing, Host, Join, MemoryKind, Pod, PodConfig};

mod common;

/// The first thing to run: a tour of a pod, and of a stale read on non-coherent memory.
///
/// Creates a pod in this process, prints its layout and how its coherent region (SCR) is
/// used, then lets one host write a slot of the non-coherent region (LNR) and another
/// read it: on the simulated non-coherent memory the reader sees the old value until it
/// invalidates its cache lines. Last, two hosts share an object through the object
/// protocol, which does the invalidating: every read is fresh with no flush by hand.
#[derive(Debug, Parser)]
#[command(name = "quickstart")]
struct Args {}

fn main() -> ExitCode {
    common::main_without_flags::<Args>(tour)
}

fn tour() -> common::Result {
    let config = PodConfig::new()
        .scr_bytes(1 << 20)
        .lnr_bytes(16 << 20)
        .slot_size_bytes(1024)
        .record_width_bits(16)
        .max_hosts(4);
    let pod = Arc::new(Pod::create(&config, Backing::heap())?);
    println!("{}", pod.layout());
    println!("{}", pod.scr_usage());

    let slot = pod.layout().slot_offset(0);
    for kind in [MemoryKind::simulated(42), MemoryKind::Hardware] {
        let writer = Host::join(&pod, Join::AnyFree, kind.clone())?;
        let reader = Host::join(&pod, Join::AnyFree, kind)?;
        let memory_name = writer.memory().kind_name();
        println!(
            "--- {memory_name} memory: host {} writes, host {} reads ---",
            writer.id(),
            reader.id()
        );

        let mut seen = [0u8; 16];
        reader.memory().read(slot, &mut seen);
        println!(
            "host {} reads slot 0:             {:?}",
            reader.id(),
            text(&seen)
        );

        let value = format!("{memory_name:<9} v2").into_bytes();
        writer.memory().write(slot, &value);
        writer.memory().write_back(slot, value.len());
        writer.memory().fence();
        println!(
            "host {} writes and writes back:   {:?}",
            writer.id(),
            text(&value)
        );

        reader.memory().read(slot, &mut seen);
        let stale = seen[..value.len()] != value[..];
        println!(
            "host {} reads again, no flush:    {:?}{}",
            reader.id(),
            text(&seen),
            if stale {
                "   <- stale: its cache still holds the old line"
            } else {
                "   (this machine's caches are coherent; a CXL pod's LNR is not)"
            }
        );

        reader.memory().flush(slot, value.len());
        reader.memory().fence();
        reader.memory().read(slot, &mut seen);
        println!(
            "host {} flushes, then reads:      {:?}",
            reader.id(),
            text(&seen)
        );
        assert_eq!(
            &seen[..value.len()],
            &value[..],
            "a read after invalidation is fresh"
        );
        if let Some(stats) = reader.memory().simulated_stats() {
            println!(
                "host {} stale lines served: {}",
                reader.id(),
                stats.stale_lines_served
            );
        }
        let joined: Vec<String> = pod
            .hosts()
            .iter()
            .map(|h| format!("host {} (pid {})", h.host, h.pid))
            .collect();
        println!("host table: {}\n", joined.join(", "));
    }

    // The object protocol does the flushing: every read is fresh, with no flush by hand.
    println!("--- the object protocol on simulated memory ---");
    let a = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(7))?;
    let b = Host::join(&pod, Join::AnyFree, MemoryKind::simulated(8))?;
    // Objects are slot-sized bytes with no length of their own: write whole fields.
    a.create(
        b"greeting",
        format!("{:<24}", "hello from host A").as_bytes(),
    )?;
    let mut seen = [0u8; 24];
    b.read(b"greeting", &mut seen)?;
    println!("host {} reads the new object:   {:?}", b.id(), text(&seen));
    for version in 2..=4 {
        let value = format!("{:<24}", format!("version {version} from A"));
        a.write(b"greeting", value.as_bytes())?;
        b.read(b"greeting", &mut seen)?;
        println!("host {} reads after a write:     {:?}", b.id(), text(&seen));
        assert_eq!(&seen[..value.len()], value.as_bytes());
    }
    let (events_a, events_b) = (a.events(), b.events());
    println!(
        "host {}: {} writes, {} record allocated; host {}: {} reads, {} lines invalidated, {} retries",
        a.id(),
        events_a.writes,
        events_a.record_allocs,
        b.id(),
        events_b.reads,
        events_b.lines_invalidated,
        events_b.read_retries()
    );
    Ok(())
}

fn text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| if b == 0 { '.' } else { b as char })
        .collect()
}
