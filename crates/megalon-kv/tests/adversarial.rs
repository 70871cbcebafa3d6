//! Adversarial uses of the store (review `upper`): a panic in an update's change must
//! leave the value as it was and every key usable from every host.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use megalon_core::{Backing, HostOptions, Layout, MemoryKind, Pod, PodConfig};
use megalon_kv::{Megalon, Store};

/// A store of `hosts` hosts on simulated memory, its pod holding at most `records`
/// records (within a line's worth), local partitions after `partition_after` accesses.
fn store(hosts: usize, records: u64, partition_after: u32, wait: Duration) -> Store<Megalon> {
    let base = PodConfig::new()
        .scr_bytes(8 << 10)
        .lnr_bytes(2 << 20)
        .slot_size_bytes(128)
        .max_key_bytes(16)
        .log_capacity_entries(256)
        .record_width_bits(8)
        .max_hosts(hosts as u32)
        .local_partitions(partition_after);
    let all = Layout::new(&base).unwrap().record_count;
    let spare = (all - records.min(all)) / 64 * 64;
    let config = base.app_scr_bytes(spare);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let options = HostOptions::new()
        .memory(MemoryKind::simulated(5))
        .wait_limit(wait);
    Store::new(Megalon::join(pod, hosts, &options).unwrap())
}

/// An update whose change panics leaves the value as it was and the key usable from
/// every host (its record unlocked), in CXL and in a host's DRAM (local partitions).
#[test]
fn a_panic_in_an_update_changes_nothing_and_locks_nothing() {
    for partition_after in [0, 1] {
        let store = store(2, 1000, partition_after, Duration::from_secs(2));
        let (mut a, mut b) = (store.handle(0).unwrap(), store.handle(1).unwrap());
        a.put(b"k", b"before").unwrap();
        // A few accesses from a: with partitions on, the key moves into a's DRAM.
        for _ in 0..4 {
            assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b"before"[..]));
            a.put(b"k", b"before").unwrap();
        }
        for _ in 0..3 {
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                a.update(b"k", |old, new| {
                    new.extend_from_slice(b"half");
                    assert_eq!(old, Some(&b"before"[..]));
                    panic!("the change panics");
                })
            }));
            assert!(panicked.is_err());
        }
        assert_eq!(
            b.get(b"k").unwrap().as_deref(),
            Some(&b"before"[..]),
            "partition_after {partition_after}"
        );
        assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b"before"[..]));
        b.put(b"k", b"from b").unwrap();
        assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b"from b"[..]));
        assert!(a
            .update(b"k", |_, new| {
                new.extend_from_slice(b"from a");
                true
            })
            .unwrap());
        assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b"from a"[..]));
        b.delete(b"k").unwrap();
        assert_eq!(a.get(b"k").unwrap(), None);
    }
}
