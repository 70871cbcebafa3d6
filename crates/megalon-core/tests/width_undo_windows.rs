//! Windows of a record width switch in a pod with undo images, each stretched with a hook
//! at a chaos point. A switch there drains only once no announce is left, so an
//! announce kept while its host waits for the switch holds the switch off until one of
//! the two gives up. Built with the `chaos` feature only.
#![cfg(feature = "chaos")]

mod common;

use std::time::Duration;

use common::{config, heap_pod, read_tag, simulated, stopped_at, value};
use megalon_core::chaos::Point;
use megalon_core::{CrashSafety, Host, HostOptions, Join, Pod, RecordShape};

fn options(seed: u64, wait: Duration) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 512, 64))
        .wait_limit(wait)
}

fn leak(pod: &std::sync::Arc<Pod>, id: u32, options: HostOptions) -> &'static Host {
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options).expect("join"),
    ))
}

/// A writer whose lock lost its CAS (another writer of the object won it first) goes
/// round again, and meets a switch frozen meanwhile at its gate: it waits for the switch.
/// The announce of the lock it did not take must be gone by then: the switch's drain
/// waits until no announce is left, so a writer that kept it and waited at its gate held
/// the switch off until the drainer gave up (and waited out the drainer's whole limit
/// itself).
#[test]
fn a_writer_whose_lock_lost_withdraws_its_announce_before_it_waits_for_a_switch() {
    let pod = heap_pod(
        &config()
            .record_width_switch(true)
            .crash_safety(CrashSafety::Undo),
    );
    // The writer waits longer than the drainer: the drainer gives up first if it waits
    // on the writer's announce. The writer's host has no pump: its gates look at the
    // width word in the SCR (a pump's copy of the word would let the writer by on its
    // second try whenever the pump had not seen the freeze yet).
    let a = leak(
        &pod,
        0,
        options(1, Duration::from_secs(5)).pump_interval(None),
    );
    let b = leak(&pod, 1, options(2, Duration::from_millis(500)));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    // Announced its lock, stopped before the CAS.
    let (stopped, go, writer) = stopped_at(Point::WriteBeforeLock, move || {
        a.write(b"k", &value(2)).map(drop)
    });
    assert_eq!(stopped.recv().unwrap(), "stopped");
    // Another thread of `a` writes the object meanwhile: the stopped writer's CAS fails.
    a.write(b"k", &value(3)).unwrap();
    // The switch freezes the array, and waits for `a`'s gate (the stopped writer's).
    let (frozen, go_on, drainer) =
        stopped_at(Point::WidthAfterFreeze, move || b.switch_record_width(8));
    assert_eq!(frozen.recv().unwrap(), "stopped");
    go_on.send("go").unwrap();
    // The writer's CAS fails; it goes round again and meets the freeze at its gate.
    go.send("go").unwrap();
    let switched = drainer.join().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        matches!(switched, Ok(true)),
        "a switch held off by the announce of a lock never taken: {switched:?}"
    );
    assert_eq!(b.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    assert_eq!(read_tag(b, b"k"), Some(2));
    a.write(b"k", &value(4)).unwrap();
    assert_eq!(read_tag(b, b"k"), Some(4));
    assert!(b.inspect().record_census().locked.is_empty());
}

/// A drainer that dies after its `WidthEnd` reached the log and before it opened the
/// width word at the new epoch, in a pod with undo images: its recovery must complete
/// (no announce is left anywhere: the drain waited for that, and none is made while the
/// word is draining), so that its row is freed and a host past its event takes the
/// switch over. The recovery waited instead for the word to be open at the epoch its
/// replica was at, which only the takeover that waits for the recovery does: the dead
/// drainer was never recovered, and every write waited on the switch for good.
#[test]
fn a_drainer_dead_after_its_append_is_recovered_and_taken_over_in_a_pod_with_undo_images() {
    let pod = heap_pod(
        &config()
            .record_width_switch(true)
            .crash_safety(CrashSafety::Undo)
            .lease_ms(100),
    );
    let fast = |seed| {
        options(seed, Duration::from_millis(500)).pump_interval(Some(Duration::from_millis(1)))
    };
    let a = leak(&pod, 0, fast(1));
    let b = leak(&pod, 1, fast(2));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let (stopped, _go, _drainer) =
        stopped_at(Point::AppendAfterPublish, move || b.switch_record_width(8));
    assert_eq!(stopped.recv().unwrap(), "stopped");
    b.inspect().freeze();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.inspect().stats().hosts_recovered < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead drainer was never recovered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(a.record_width().unwrap(), RecordShape { epoch: 1, bits: 8 });
    a.write(b"k", &value(2)).unwrap();
    assert_eq!(a.inspect().width_drainer(), None);
    assert_eq!(read_tag(a, b"k"), Some(2));
    a.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(a, b"k"), Some(3));
    assert!(a.inspect().record_census().locked.is_empty());
}
