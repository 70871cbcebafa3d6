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

/// A pod of 64 slots for the tests of slots a leaving host holds: claims of 2 slots
/// (an eighth of a fair share), short waits.
fn small_slot_pod() -> Arc<Pod> {
    let config = PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(512 * 64 + 64 * 256)
        .slot_size_bytes(256)
        .max_key_bytes(16)
        .log_capacity_entries(512)
        .max_hosts(MAX_HOSTS)
        .join_area_bytes(0);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("creating a heap pod"));
    assert_eq!(pod.layout().slot_count, 64);
    pod
}

fn join_waiting_briefly(pod: &Arc<Pod>, id: u32) -> Host {
    let options = HostOptions::new()
        .pump_interval(None)
        .wait_limit(std::time::Duration::from_millis(200));
    Host::join(pod, Join::As(id), options).expect("joining")
}

/// `host` creates objects `tag0`, `tag1`, ... until the pod's unclaimed slots are used
/// up and its own pool is empty; returns how many.
fn create_until_full(host: &Host, tag: &str) -> u64 {
    let mut made = 0;
    while host.create(format!("{tag}{made}").as_bytes(), b"x").is_ok() {
        made += 1;
    }
    made
}

/// Found by a review (2026-11-29): a host that left cleanly holding free slots (of
/// objects it deleted) stayed the host with the most, by the replicated counts, so every
/// `NeedSlots` named it, nobody granted, and creates answered `SlotsExhausted` for as long
/// as the pod lived, half its slots free. It now gives them back as it leaves.
#[test]
fn a_host_that_left_gives_its_free_slots_back() {
    let pod = small_slot_pod();
    let (a, b, c) = (
        join_waiting_briefly(&pod, 0),
        join_waiting_briefly(&pod, 1),
        join_waiting_briefly(&pod, 2),
    );
    for i in 0..4 {
        a.create(format!("a{i}").as_bytes(), b"x").unwrap();
    }
    let made = create_until_full(&b, "b");
    for i in 0..made / 2 {
        b.delete(format!("b{i}").as_bytes()).unwrap();
    }
    drop(b);
    a.replay().unwrap();
    for i in 0..made / 2 {
        c.create(format!("c{i}").as_bytes(), b"y")
            .unwrap_or_else(|error| panic!("c's create {i} of {}: {error}", made / 2));
        a.replay().unwrap();
    }
}

/// The last host of a pod leaves with free slots; a host of another id that joins later
/// gets them.
#[test]
fn free_slots_outlive_the_last_host() {
    let pod = small_slot_pod();
    let a = join_waiting_briefly(&pod, 0);
    let made = create_until_full(&a, "a");
    for i in 0..made {
        a.delete(format!("a{i}").as_bytes()).unwrap();
    }
    drop(a);
    let b = join_waiting_briefly(&pod, 1);
    assert_eq!(create_until_full(&b, "b"), made, "every slot a freed");
}
