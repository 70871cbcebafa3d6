//! Adversarial uses of the public API by a user (review `layers`, 2026-11-30).

use std::sync::Arc;
use std::time::Duration;

use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};
use megalon_kv::{Megalon, Store};

fn config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(4 << 20)
        .slot_size_bytes(128)
}

/// "No limit" spelled as `Duration::MAX`: a host that waits without bound works, and
/// leaves the pod, without a panic (an `Instant + wait_limit` overflowed).
#[test]
fn a_wait_limit_of_duration_max_does_not_panic() {
    let pod = Arc::new(Pod::create(&config(), Backing::heap()).unwrap());
    let options = HostOptions::new().wait_limit(Duration::MAX);
    let host = Arc::new(Host::join(&pod, Join::AnyFree, options).unwrap());
    let store = Store::new(Megalon::new(Arc::clone(&pod), vec![host]));
    let mut kv = store.handle(0).unwrap();
    kv.put(b"k", b"v").unwrap();
    assert_eq!(kv.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(kv);
    drop(store); // the host leaves the pod
}

/// `Megalon::new` over hosts that joined another pod than the one it is given (the
/// podopen review, 2026-11-30). The check was a `debug_assert!`: in release the scheme
/// took the given pod's limits (a 1024-byte slot) over hosts of 128-byte slots, and an
/// update to a value of 500 bytes, within those limits, panicked inside the held update
/// (`range end index 504 out of range for slice of length 128`, store.rs) instead of
/// answering an error. Now the scheme is refused when it is made, in every build.
#[test]
fn a_store_over_hosts_of_another_pod_is_refused_before_it_touches_them() {
    let big = Arc::new(Pod::create(&config().slot_size_bytes(1024), Backing::heap()).unwrap());
    let small = Arc::new(Pod::create(&config(), Backing::heap()).unwrap());
    let host = Arc::new(Host::join(&small, Join::AnyFree, HostOptions::new()).unwrap());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let store = Store::new(Megalon::new(Arc::clone(&big), vec![Arc::clone(&host)]));
        let mut kv = store.handle(0).unwrap();
        kv.put(b"k", b"v").unwrap();
        kv.update(b"k", |_, new| {
            new.extend_from_slice(&[7; 500]);
            true
        })
    }));
    let message = outcome.as_ref().err().and_then(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
    });
    eprintln!(
        "outcome: {:?}",
        outcome.as_ref().map(|_| ()).map_err(|_| &message)
    );
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.starts_with("Megalon::new")),
        "a store over hosts of another pod was made: {message:?}"
    );
    // Refused before it put anything in the hosts' pod.
    assert!(matches!(
        host.read(b"k", &mut [0u8; 128]),
        Err(megalon_core::Error::UnknownKey)
    ));
}

/// [`Megalon::try_new`] answers the same refusal as an error.
#[test]
fn try_new_refuses_hosts_of_another_pod_with_an_error() {
    let big = Arc::new(Pod::create(&config().slot_size_bytes(1024), Backing::heap()).unwrap());
    let small = Arc::new(Pod::create(&config(), Backing::heap()).unwrap());
    let host = Arc::new(Host::join(&small, Join::AnyFree, HostOptions::new()).unwrap());
    let refused = Megalon::try_new(Arc::clone(&big), vec![Arc::clone(&host)]);
    assert!(
        matches!(
            refused,
            Err(megalon_kv::Error::HostOfAnotherPod { host: 0 })
        ),
        "try_new took a host of another pod"
    );
    assert!(Megalon::try_new(small, vec![host]).is_ok());
}
