//! The store over an AllLog pod (megalon's scheme with every lock and unlock in the
//! log): a call that fails with a refused append (what a full log answers) must have
//! changed nothing, as `Error::Core` says. (Review `kvstore`, 2026-11-30.)
#![cfg(feature = "chaos")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::chaos::{fail_next_appends, with_hook, Fault, Point};
use megalon_core::{Backing, Coherence, HostOptions, MemoryKind, Pod, PodConfig};
use megalon_kv::{Error, Megalon, Store};

fn store() -> Store<Megalon> {
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
        .coherence(Coherence::AllLog);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let options = HostOptions::new()
        .memory(MemoryKind::simulated(5))
        .wait_limit(Duration::from_secs(2));
    Store::new(Megalon::join(pod, 2, &options).unwrap())
}

/// Runs `call` with the append after its first one (a write's `Unlock`, after its `Lock`)
/// refused, as a full log refuses it.
fn with_second_append_refused<R>(call: impl FnOnce() -> R) -> R {
    let mut published = 0;
    with_hook(
        move |point| {
            if point == Point::AppendAfterPublish {
                published += 1;
                if published == 1 {
                    fail_next_appends(&[Fault::Refuse]);
                }
            }
        },
        call,
    )
}

fn is_refused(error: &Error) -> bool {
    matches!(
        error,
        Error::Core(megalon_core::Error::InjectedFault { fault }) if *fault == "append refused"
    )
}

/// The value `key` settles at (reads wait while a write holds the key's lock).
fn settled(kv: &mut megalon_kv::KvHandle<megalon_kv::MegalonHandle>, key: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(value)) = kv.get(key) {
            return value;
        }
        assert!(Instant::now() < deadline, "{key:?} unreadable");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_update_refused_by_the_log_changes_nothing() {
    let store = store();
    let mut kv = store.handle(0).unwrap();
    kv.put(b"n", b"0").unwrap();
    let answer = with_second_append_refused(|| {
        kv.update(b"n", |old, new| {
            let n: u64 = std::str::from_utf8(old.unwrap()).unwrap().parse().unwrap();
            new.extend_from_slice((n + 1).to_string().as_bytes());
            true
        })
    });
    megalon_core::chaos::clear_forced_faults();
    // "A failure before anything reached the log (`LogFull`, ...) changes nothing": a
    // caller that retries the increment must not count it twice. So either the update
    // answers that it took effect, or it answers a refusal and did not.
    let mut other = store.handle(1).unwrap();
    let value = settled(&mut other, b"n");
    match answer {
        Ok(changed) => assert!(changed && value == b"1", "{changed} {value:?}"),
        Err(error) => {
            assert!(is_refused(&error), "{error:?}");
            assert_eq!(value, b"0", "the update answered {error} yet took effect");
        }
    }
}

#[test]
fn a_put_refused_by_the_log_changes_nothing() {
    let store = store();
    let mut kv = store.handle(0).unwrap();
    kv.put(b"k", b"old").unwrap();
    let answer = with_second_append_refused(|| kv.put(b"k", b"new"));
    megalon_core::chaos::clear_forced_faults();
    let mut other = store.handle(1).unwrap();
    let value = settled(&mut other, b"k");
    match answer {
        Ok(()) => assert_eq!(value, b"new"),
        Err(error) => {
            assert!(is_refused(&error), "{error:?}");
            assert_eq!(value, b"old", "the put answered {error} yet took effect");
        }
    }
}

/// The same with a real full log: host 1 never replays (no pump), so the ring fills
/// behind it. Puts of one key (a `Lock` and an `Unlock` each) run until one fails; with
/// one entry left, its `Lock` goes in and its `Unlock` finds the log full. Whatever the
/// failing put answered, the key must hold the last put that answered `Ok`.
#[test]
fn a_put_that_answers_log_full_changes_nothing() {
    for extra_entries in 0..2 {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(4 << 20)
            .slot_size_bytes(128)
            .log_capacity_entries(16)
            .coherence(Coherence::AllLog);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let options = HostOptions::new()
            .memory(MemoryKind::simulated(9))
            .wait_limit(Duration::from_millis(200));
        let a = Arc::new(
            megalon_core::Host::join(&pod, megalon_core::Join::As(0), options.clone()).unwrap(),
        );
        let lagging = Arc::new(
            megalon_core::Host::join(&pod, megalon_core::Join::As(1), options.pump_interval(None))
                .unwrap(),
        );
        let store = Store::new(Megalon::new(pod, vec![a, lagging.clone()]));
        let mut kv = store.handle(0).unwrap();
        kv.put(b"k", b"0").unwrap();
        for i in 0..extra_entries {
            kv.insert(format!("extra{i}").as_bytes(), b"x").unwrap();
        }
        let mut last_ok = b"0".to_vec();
        let (failed, error) = (1..100u32)
            .find_map(|i| {
                let value = i.to_string().into_bytes();
                match kv.put(b"k", &value) {
                    Ok(()) => {
                        last_ok = value;
                        None
                    }
                    Err(error) => Some((value, error)),
                }
            })
            .expect("the log fills");
        // The laggard catches up: the log has room again, the pump's unlock goes in.
        lagging.replay().unwrap();
        let mut other = store.handle(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let value = loop {
            lagging.replay().unwrap();
            if let Ok(Some(value)) = other.get(b"k") {
                break value;
            }
            assert!(Instant::now() < deadline, "k unreadable");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            value, last_ok,
            "{extra_entries} extra: the put of {failed:?} answered {error} (the docs: \
             changes nothing), and k holds {value:?}"
        );
    }
}
