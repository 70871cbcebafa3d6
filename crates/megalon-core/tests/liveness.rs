//! How a host is found dead or alive, and what its options may make of that.

mod common;

use std::time::Duration;

use megalon_core::{Host, HostOptions, Join};

/// A host whose pump runs less often than the pod's lease (an idle host that need not
/// replay often: a pump every 5 s, the lease 200 ms), judged by its lease (another
/// machine, another pid namespace): it is alive and idle, and must not be declared dead.
/// Its pump was its only heartbeat, and `Host::join` took the interval without a word: the
/// others recovered it a lease after its last beat, and its next write answered
/// `HostDeclaredDead`.
#[test]
fn an_idle_host_whose_pump_interval_outlasts_the_lease_is_not_declared_dead() {
    let pod = common::heap_pod(&common::config().lease_ms(200));
    let watcher = Host::join(&pod, Join::As(0), HostOptions::new()).unwrap();
    let slow = Host::join(
        &pod,
        Join::As(1),
        HostOptions::new().pump_interval(Some(Duration::from_secs(5))),
    )
    .unwrap();
    slow.inspect().pretend_elsewhere();
    // Five leases, idle.
    std::thread::sleep(Duration::from_millis(1000));
    let recovered = watcher.inspect().stats().hosts_recovered;
    let write = slow.create(b"k", &common::value(1));
    assert!(
        recovered == 0 && write.is_ok(),
        "a live idle host was declared dead: recovered {recovered}, its create: {write:?}"
    );
}

/// Every host of a pod died and their rows fill the host table (two of two: machines that
/// went down, or processes killed). A host that joins afterwards must get a row once the
/// dead ones' leases have run out: only a joined host recovers a dead one, so nobody ever
/// freed them, and every join answered `HostTableFull` (or `HostTaken`, for a dead id) for
/// good: the pod could never be used again. (megalon-server works around an id held by a
/// dead process by joining under another id first, whose pump recovers it: with the table
/// full there is none.) Now the joiner takes a dead holder's row over and recovers it
/// itself (`Host::join`'s rescue; its races in `tests/rescue.rs`).
#[test]
fn a_pod_whose_hosts_all_died_with_its_table_full_can_be_joined_again() {
    let pod = common::heap_pod(&common::config().max_hosts(2).lease_ms(100));
    let a = Host::join(&pod, Join::As(0), HostOptions::new()).unwrap();
    let b = Host::join(&pod, Join::As(1), HostOptions::new()).unwrap();
    a.create(b"k", &common::value(1)).unwrap();
    megalon_core::inspect::crash(a);
    megalon_core::inspect::crash(b);
    // Well past both leases.
    std::thread::sleep(Duration::from_millis(500));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let joined = loop {
        match Host::join(&pod, Join::AnyFree, HostOptions::new()) {
            Ok(host) => break Ok(host),
            Err(error) if std::time::Instant::now() >= deadline => break Err(error),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let host = joined.unwrap_or_else(|error| {
        panic!("no join once every host of the pod died, for 5 s: {error:?}")
    });
    assert_eq!(common::read(&host, b"k"), common::value(1));
}
