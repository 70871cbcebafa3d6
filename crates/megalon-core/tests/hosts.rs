//! The host table: joining as a given id or the first free one, the errors for a taken
//! id, an id past the maximum and a full table, leaving, the listing and the heartbeat.

use std::sync::Arc;

use megalon_core::{inspect::HostInfo, Backing, Error, Host, HostOptions, Join, Pod, PodConfig};

const MAX_HOSTS: u32 = 3;

fn heap_pod() -> Arc<Pod> {
    let config = PodConfig::new().max_hosts(MAX_HOSTS);
    Arc::new(Pod::create(&config, Backing::heap()).expect("creating a heap pod"))
}

/// Joins without a background pump: the pump bumps the heartbeat, and these tests count
/// heartbeats exactly.
fn join(pod: &Arc<Pod>, which: Join) -> Result<Host, Error> {
    Host::join(pod, which, HostOptions::new().pump_interval(None))
}

fn joined_ids(pod: &Pod) -> Vec<u32> {
    pod.hosts().iter().map(|info| info.host).collect()
}

#[test]
fn join_as_a_given_id_takes_that_id() {
    let pod = heap_pod();
    let host = join(&pod, Join::As(2)).expect("host 2 is free");
    assert_eq!(host.id(), 2);
    assert_eq!(joined_ids(&pod), [2]);
}

#[test]
fn join_any_free_takes_the_lowest_free_id() {
    let pod = heap_pod();
    let one = join(&pod, Join::As(1)).expect("host 1 is free");
    let first = join(&pod, Join::AnyFree).expect("a free id");
    let second = join(&pod, Join::AnyFree).expect("a free id");
    assert_eq!((first.id(), one.id(), second.id()), (0, 1, 2));
}

#[test]
fn joining_a_taken_id_answers_host_taken_with_the_holders_pid() {
    let pod = heap_pod();
    let _holder = join(&pod, Join::As(1)).expect("host 1 is free");
    let error = join(&pod, Join::As(1)).expect_err("host 1 is taken");
    assert!(
        matches!(error, Error::HostTaken { host: 1, holder_pid } if holder_pid == std::process::id()),
        "{error:?}"
    );
    assert_eq!(joined_ids(&pod), [1], "the failed join changed nothing");
}

#[test]
fn joining_past_max_hosts_answers_host_out_of_range() {
    let pod = heap_pod();
    for host in [MAX_HOSTS, MAX_HOSTS + 1, u32::MAX] {
        let error = join(&pod, Join::As(host)).expect_err("no such host");
        assert!(
            matches!(error, Error::HostOutOfRange { host: h, max_hosts: MAX_HOSTS } if h == host),
            "{error:?}"
        );
    }
    assert!(pod.hosts().is_empty());
}

#[test]
fn joining_a_full_table_answers_host_table_full() {
    let pod = heap_pod();
    let _hosts: Vec<Host> = (0..MAX_HOSTS)
        .map(|_| join(&pod, Join::AnyFree).expect("a free id"))
        .collect();
    let error = join(&pod, Join::AnyFree).expect_err("the table is full");
    assert!(
        matches!(
            error,
            Error::HostTableFull {
                max_hosts: MAX_HOSTS
            }
        ),
        "{error:?}"
    );
}

#[test]
fn leaving_frees_the_id() {
    let pod = heap_pod();
    let host = join(&pod, Join::As(1)).expect("host 1 is free");
    host.leave();
    assert!(pod.hosts().is_empty());
    let again = join(&pod, Join::As(1)).expect("host 1 is free again");
    assert_eq!(again.id(), 1);
}

#[test]
fn dropping_a_host_frees_the_id() {
    let pod = heap_pod();
    let zero = join(&pod, Join::As(0)).expect("host 0 is free");
    let one = join(&pod, Join::As(1)).expect("host 1 is free");
    let two = join(&pod, Join::As(2)).expect("host 2 is free");
    drop(one);
    assert_eq!(joined_ids(&pod), [0, 2]);
    let again = join(&pod, Join::AnyFree).expect("host 1 is free again");
    assert_eq!(again.id(), 1);
    assert_eq!((zero.id(), two.id()), (0, 2));
}

#[test]
fn hosts_lists_joined_hosts_with_this_process_pid() {
    let pod = heap_pod();
    let zero = join(&pod, Join::As(0)).expect("host 0 is free");
    let two = join(&pod, Join::As(2)).expect("host 2 is free");
    let pid = std::process::id();
    assert_eq!(
        pod.hosts(),
        [
            HostInfo {
                host: 0,
                pid,
                heartbeat: 0,
                joins: 1,
                same_machine: true,
            },
            HostInfo {
                host: 2,
                pid,
                heartbeat: 0,
                joins: 1,
                same_machine: true,
            },
        ]
    );
    drop(zero);
    drop(two);
    let again = join(&pod, Join::As(0)).expect("host 0 is free again");
    let listed = pod.hosts();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].host, listed[0].pid), (again.id(), pid));
    assert_eq!(listed[0].joins, 2, "joins counts every join of the id");
}

#[test]
fn heartbeat_increments_and_shows_in_the_host_table() {
    let pod = heap_pod();
    let host = join(&pod, Join::As(1)).expect("host 1 is free");
    let other = join(&pod, Join::As(0)).expect("host 0 is free");
    assert_eq!(host.inspect().heartbeat(), 1);
    assert_eq!(host.inspect().heartbeat(), 2);
    assert_eq!(host.inspect().heartbeat(), 3);
    let listed = pod.hosts();
    assert_eq!(listed[1].host, 1);
    assert_eq!(listed[1].heartbeat, 3);
    assert_eq!(
        listed[0].heartbeat, 0,
        "another host's heartbeat is its own"
    );
    drop(other);
}
