//! A host's drop with a panic anywhere in it (its replays, appends, settles, moves back),
//! of its own thread or of its pump, and a drop by a thread that unwinds from a panic of
//! the caller's: the pod stays whole. (Review `fresh`, 2026-12-03, of the drop that
//! survives a panic; the unwinding drop lost what was written in the host's DRAM.)
#![cfg(feature = "chaos")]

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use megalon_core::chaos::{self, Point};
use megalon_core::{Backing, CrashSafety, Error, Host, HostOptions, Join, Layout, Pod, PodConfig};

const LEASE_MS: u32 = 100;
const BOUND: Duration = Duration::from_secs(5);

fn config(local: bool) -> PodConfig {
    let config = common::config()
        .lnr_bytes(128 << 10)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo);
    if local {
        config.local_partitions(2)
    } else {
        config
    }
}

/// Whether `id`'s row is freed within the lease and [`BOUND`].
fn row_freed(pod: &Pod, id: megalon_core::HostId) -> bool {
    common::row_freed_within(pod, id, Duration::from_millis(LEASE_MS.into()) + BOUND)
}

fn value_of(key: &[u8]) -> Vec<u8> {
    let mut value = key.to_vec();
    value.resize(32, 0xa5);
    value
}

/// What a writes into the objects it holds in its DRAM.
fn written_in_dram(key: &[u8]) -> Vec<u8> {
    let mut value = value_of(key);
    value[31] = 0x5a;
    value
}

/// A pod, host a (with or without a pump) holding objects, free slots, a written object
/// and (`local`) objects in its DRAM, written there, and host b (a pump) with entries a
/// has not applied. a is dropped (`unwinding`: by a thread that unwinds from a panic of
/// its own) under a hook that panics at the `panic_at`-th chaos point its thread
/// reaches (none: counts them). Then: a's row is freed, b reads every object (what a
/// wrote in its DRAM, or, if a panic left a to recovery, what the object held when it
/// moved there), and fills the pod: every slot used once (none lost with a's pool, none
/// handed out twice).
fn drop_panicking_at(
    panic_at: Option<usize>,
    pump: bool,
    local: bool,
    unwinding: bool,
) -> Result<usize, String> {
    drop_panicking(panic_at, None, pump, local, unwinding)
}

/// [`drop_panicking_at`], and (`pump_panic_at`) a's pump panics at the n-th chaos point
/// it reaches once the drop began.
fn drop_panicking(
    panic_at: Option<usize>,
    pump_panic_at: Option<usize>,
    pump: bool,
    local: bool,
    unwinding: bool,
) -> Result<usize, String> {
    let config = config(local);
    let slot_count = Layout::new(&config).unwrap().slot_count;
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let a_options = HostOptions::new()
        .pump_interval(pump.then_some(Duration::from_millis(1)))
        .wait_limit(Duration::from_millis(500));
    let a = Host::join(&pod, Join::AnyFree, a_options).unwrap();
    let b = Host::join(
        &pod,
        Join::AnyFree,
        HostOptions::new().pump_interval(Some(Duration::from_millis(1))),
    )
    .unwrap();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 0..6u8 {
        let key = vec![b'a', i];
        a.create(&key, &value_of(&key)).unwrap();
        keys.push(key);
    }
    a.write(b"a\x00", &value_of(b"a\x00")).unwrap();
    if local {
        for i in 0..3u8 {
            let key = [b'a', i];
            common::move_into(&a, &key);
            a.write(&key, &written_in_dram(&key)).unwrap();
        }
    }
    for i in 0..4u8 {
        let key = vec![b'b', i];
        b.create(&key, &value_of(&key)).unwrap();
        keys.push(key);
    }
    let a_id = a.id();
    let points = Rc::new(RefCell::new(Vec::new()));
    let seen = Rc::clone(&points);
    let pump_name = format!("megalon-pump-{a_id}");
    let pump_points = Arc::new(AtomicUsize::new(0));
    let pump_seen = Arc::clone(&pump_points);
    let pump_hook = move |point: Point| {
        if std::thread::current().name() == Some(pump_name.as_str()) {
            let n = pump_seen.fetch_add(1, Ordering::Relaxed) + 1;
            if Some(n) == pump_panic_at {
                panic!("injected in the pump at {point:?}");
            }
        }
    };
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        chaos::with_process_hook(pump_hook, || {
            chaos::with_hook(
                move |point| {
                    seen.borrow_mut().push(point);
                    if Some(seen.borrow().len()) == panic_at {
                        panic!("injected at {point:?}");
                    }
                },
                move || {
                    if unwinding {
                        let _a = a;
                        std::panic::panic_any("the caller's own panic, a held");
                    }
                    drop(a);
                },
            )
        })
    }));
    let pump_reached = pump_points.load(Ordering::Relaxed);
    let points = points.borrow().clone();
    let at = panic_at.map(|n| points.get(n - 1).copied());
    let what = format!(
        "panic at {panic_at:?} ({at:?}), in the pump at {pump_panic_at:?} of {pump_reached}, \
         pump {pump}, local {local}, unwinding {unwinding}"
    );
    let caller_s = dropped
        .as_ref()
        .err()
        .and_then(|panic| panic.downcast_ref::<&str>())
        .is_some_and(|message| message.starts_with("the caller's own"));
    if dropped.is_err() != unwinding || (unwinding && !caller_s) {
        return Err(format!("{what}: the panic escaped the drop"));
    }
    let moved_to_dram = |key: &[u8]| local && key[0] == b'a' && key[1] < 3;
    let panicked = panic_at.is_some() || pump_panic_at.is_some();
    let holds_its_own = |key: &[u8], buf: &[u8]| {
        if !moved_to_dram(key) {
            buf == value_of(key)
        } else if panicked {
            buf == written_in_dram(key) || buf == value_of(key)
        } else {
            buf == written_in_dram(key)
        }
    };
    if !row_freed(&pod, a_id) {
        return Err(format!("{what}: a's row never freed: {:?}", pod.hosts()));
    }
    for key in &keys {
        let mut buf = vec![0u8; 32];
        b.read(key, &mut buf)
            .map_err(|e| format!("{what}: read {key:?}: {e:?}"))?;
        if !holds_its_own(key, &buf) {
            return Err(format!("{what}: {key:?} holds {buf:?}"));
        }
    }
    // Every slot used once.
    let mut made = 0u64;
    loop {
        let key = format!("f{made}").into_bytes();
        match b.create(&key, &value_of(&key)) {
            Ok(()) => {
                keys.push(key);
                made += 1;
            }
            Err(Error::SlotsExhausted { .. }) => break,
            Err(e) => return Err(format!("{what}: fill: {e:?}")),
        }
    }
    let count = b.object_count().unwrap();
    if count != slot_count {
        return Err(format!(
            "{what}: the pod filled at {count} objects of {slot_count} slots"
        ));
    }
    for key in &keys {
        let mut buf = vec![0u8; 32];
        b.read(key, &mut buf)
            .map_err(|e| format!("{what}: read {key:?} after the fill: {e:?}"))?;
        if !holds_its_own(key, &buf) {
            return Err(format!("{what}: {key:?} after the fill holds {buf:?}"));
        }
    }
    Ok(points.len())
}

/// A panic at any chaos point of `Host`'s drop (its replays, appends, settles, moves
/// back) leaves the pod whole: the row freed, every object readable, every slot usable
/// once.
fn sweep(pump: bool, local: bool) {
    let mut wrong = Vec::new();
    for unwinding in [false, true] {
        let total = match drop_panicking_at(None, pump, local, unwinding) {
            Ok(total) => total,
            Err(e) => {
                wrong.push(e);
                continue;
            }
        };
        eprintln!("pump {pump}, local {local}, unwinding {unwinding}: {total} points");
        for n in 1..=total {
            if let Err(e) = drop_panicking_at(Some(n), pump, local, unwinding) {
                wrong.push(e);
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_panic_anywhere_in_a_drop_without_a_pump_leaves_the_pod_whole() {
    sweep(false, false);
}

#[test]
fn a_panic_anywhere_in_a_drop_with_a_pump_leaves_the_pod_whole() {
    sweep(true, false);
}

#[test]
fn a_panic_anywhere_in_a_drop_of_a_host_holding_objects_leaves_the_pod_whole() {
    sweep(false, true);
}

/// a's pump panics at its n-th chaos point once a's drop began (its replays, its
/// watch): the drop, which looked at the pump before, goes on without it.
#[test]
fn a_pump_that_panics_during_the_drop_leaves_the_pod_whole() {
    let mut wrong = Vec::new();
    for n in 1..=40 {
        for local in [false, true] {
            if let Err(e) = drop_panicking(None, Some(n), true, local, false) {
                wrong.push(e);
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A host holding objects in its DRAM, dropped while its thread unwinds from a panic of
/// the caller's own (nothing wrong in the host): its drop moves the objects back, and
/// what was written to them in its DRAM is what every host reads after. (Each move
/// back's hold, ended while the thread unwinds, took itself for one a panic cut short:
/// it kept its `MOVE_BACK` announce and left the host to recovery, whose restore of
/// the slot image put the bytes from before the object's move to DRAM over the
/// object, back in CXL and written since.)
#[test]
fn a_host_dropped_while_its_thread_unwinds_keeps_what_was_written_in_its_dram() {
    let pod = common::heap_pod(&config(true));
    let options = || HostOptions::new().pump_interval(Some(Duration::from_millis(1)));
    let a = Host::join(&pod, Join::AnyFree, options()).unwrap();
    let b = Host::join(&pod, Join::AnyFree, options()).unwrap();
    for i in 0..3u8 {
        let key = [b'k', i];
        a.create(&key, &common::value(i)).unwrap();
        common::move_into(&a, &key);
        a.write(&key, &common::value(100 + i)).unwrap();
    }
    assert_eq!(a.inspect().local_objects().0, 3);
    let a_id = a.id();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _a = a;
        panic!("the caller's own panic, a held");
    }));
    assert!(unwound.is_err());
    assert!(row_freed(&pod, a_id), "a's row never freed");
    // Written since by b (the object back in CXL), then read: b's write stays.
    b.write(&[b'k', 0], &common::value(200)).unwrap();
    let c = Host::join(&pod, Join::AnyFree, options()).unwrap();
    let mut wrong = Vec::new();
    for (i, want) in [(0u8, 200u8), (1, 101), (2, 102)] {
        for (name, host) in [("b", &b), ("c", &c)] {
            let got = common::read_tag(host, &[b'k', i]);
            if got != Some(want) {
                wrong.push(format!("{name} reads k{i} as {got:?}, not {want}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
