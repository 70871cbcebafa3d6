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
