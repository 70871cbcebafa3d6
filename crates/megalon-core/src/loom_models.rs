//! loom models of the log's atomic protocols: publication and replay with two hosts on a
//! ring of two entries (wrap-around included), and `ctail` linearizability.
//!
//! Run by `cargo xtask loom` (`RUSTFLAGS="--cfg megalon_loom"`, release, a bound on
//! preemptions). Under loom the pod is a heap of model atomics, flushes do nothing and
//! fences are model fences: the model checks the orderings of the cursors and the alive
//! word; the simulated memory (in the ordinary tests) checks the flushes.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering};

use crate::{Backing, Event, Host, HostOptions, Join, Outcome, Pod, PodConfig};

/// Two hosts, a ring of two 64-byte entries, small everything else.
fn pod() -> Arc<Pod> {
    let config = PodConfig::new()
        .scr_bytes(4096)
        .lnr_bytes(4096)
        .slot_size_bytes(64)
        .max_key_bytes(8)
        .log_capacity_entries(2)
        .max_hosts(2);
    Arc::new(Pod::create(&config, Backing::heap()).expect("pod"))
}

fn host(pod: &Arc<Pod>, id: u32) -> Host {
    let options = HostOptions::new().pump_interval(None).flat_combining(false);
    Host::join(pod, Join::As(id), options).expect("join")
}

fn create(host: &Host, key: &[u8], slot: u64) -> Outcome {
    host.append_event(&Event::Create { key, slot })
        .expect("append")
}

#[test]
fn loom_two_hosts_append_across_the_wrap_and_replay_the_same_log() {
    loom::model(|| {
        let pod = pod();
        let a = Arc::new(host(&pod, 0));
        let b = Arc::new(host(&pod, 1));
        // Lap 1, one host at a time: both replicas apply it, so the ring can wrap.
        assert_eq!(create(&a, b"k0", 0), Outcome::Created);
        assert_eq!(create(&b, b"k1", 1), Outcome::Created);
        a.replay().expect("replay");
        // Lap 2, concurrently: positions 2 and 3 reuse entries 0 and 1.
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let ta = loom::thread::spawn(move || create(&a2, b"k2", 2));
        let tb = loom::thread::spawn(move || create(&b2, b"k2", 3));
        let outcomes = [ta.join().unwrap(), tb.join().unwrap()];
        // One create of k2 wins in log order, the other finds it.
        assert!(outcomes.contains(&Outcome::Created), "{outcomes:?}");
        assert!(outcomes.contains(&Outcome::AlreadyExists), "{outcomes:?}");
        a.replay().expect("replay");
        b.replay().expect("replay");
        let snapshot = a.replica_snapshot();
        assert_eq!(snapshot.len(), 3);
        assert_eq!(snapshot, b.replica_snapshot());
        assert_eq!(a.applied_position(), 4);
    });
}

#[test]
fn loom_a_completed_append_is_seen_by_every_later_lookup() {
    loom::model(|| {
        let pod = pod();
        let a = host(&pod, 0);
        let b = host(&pod, 1);
        let done = Arc::new(AtomicBool::new(false));
        let done_by_a = Arc::clone(&done);
        let writer = loom::thread::spawn(move || {
            assert_eq!(create(&a, b"key", 0), Outcome::Created);
            // Release: pairs with the reader's Acquire; the append completed before.
            done_by_a.store(true, Ordering::Release);
            a
        });
        let completed = done.load(Ordering::Acquire);
        let found = b.lookup(b"key").expect("lookup").is_some();
        assert!(
            !completed || found,
            "an append that completed before the lookup began is seen"
        );
        let _a = writer.join().unwrap();
        assert!(b.lookup(b"key").expect("lookup").is_some());
    });
}
