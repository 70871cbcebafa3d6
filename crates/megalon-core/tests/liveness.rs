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

/// An old life of id 1, paused past its lease inside its beats (each thread of it that
/// beat had looked that it was not condemned, then stopped before its bump), is declared
/// dead and recovered, and the id joins again. The next life dies (on another machine:
/// only its lease tells), and the old life's threads resume, a little under a lease
/// apart: their bumps must not count for the next life. (Review `grants`, 2026-12-03:
/// the word counted any life's beats, and four such threads hid the next life's death
/// for about four leases, not one: dead once its heartbeat stood still for a lease.)
#[cfg(feature = "chaos")]
#[test]
fn an_old_life_s_late_beats_do_not_hide_the_next_life_s_death() {
    use megalon_core::chaos::{self, Point};
    use std::sync::mpsc::channel;
    use std::time::Instant;
    const LEASE_MS: u64 = 200;
    let lease = Duration::from_millis(LEASE_MS);
    let pod = common::heap_pod(&common::config().max_hosts(3).lease_ms(LEASE_MS as u32));
    let watcher = Host::join(&pod, Join::As(0), HostOptions::new()).unwrap();
    // The old life: no pump, judged by its lease.
    let old = Host::join(&pod, Join::As(1), HostOptions::new().pump_interval(None)).unwrap();
    old.inspect().pretend_elsewhere();
    let old_life = old.inspect().life();
    const THREADS: usize = 4;
    std::thread::scope(|s| {
        let old = &old;
        let mut resumes = Vec::new();
        let (arrived, arrivals) = channel::<()>();
        for _ in 0..THREADS {
            let (resume, resumed) = channel::<()>();
            resumes.push(resume);
            let arrived = arrived.clone();
            s.spawn(move || {
                let mut once = false;
                chaos::with_hook(
                    move |at| {
                        if at == Point::BeatAfterCheck && !once {
                            once = true;
                            arrived.send(()).unwrap();
                            resumed.recv().unwrap();
                        }
                    },
                    || old.inspect().heartbeat(),
                );
            });
        }
        for _ in 0..THREADS {
            arrivals
                .recv_timeout(Duration::from_secs(20))
                .expect("a beat of the old life stopped after its check");
        }
        // The old life is declared dead, recovered, and its row freed; the id joins again.
        let deadline = Instant::now() + Duration::from_secs(20);
        let next = loop {
            match Host::join(&pod, Join::As(1), HostOptions::new()) {
                Ok(host) => break host,
                Err(error) => {
                    assert!(Instant::now() < deadline, "id 1 never freed: {error:?}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        assert!(next.inspect().life() > old_life);
        let recovered_before = watcher.inspect().stats().hosts_recovered;
        // The next life beats a while, then dies where it stands (another machine's).
        std::thread::sleep(lease / 2);
        megalon_core::inspect::crash(next);
        let died = Instant::now();
        let watcher = &watcher;
        let watch = s.spawn(move || loop {
            if watcher.inspect().stats().hosts_recovered > recovered_before {
                break died.elapsed();
            }
            assert!(
                died.elapsed() < Duration::from_secs(20),
                "the next life was never recovered"
            );
            std::thread::sleep(Duration::from_millis(2));
        });
        // The old life's threads resume, one every three quarters of a lease.
        for resume in resumes {
            std::thread::sleep(lease * 3 / 4);
            resume.send(()).unwrap();
        }
        let recovered_at = watch.join().unwrap();
        // A lease of standing still, the watch's quarter lease, a pump round, and the
        // one late beat the lease's window allows: well under two and a half leases.
        assert!(
            recovered_at < lease * 5 / 2,
            "the next life, dead, was recovered only {recovered_at:?} after it died \
             (lease {lease:?}): the old life's late beats kept it alive"
        );
    });
    std::mem::forget(old);
}
