//! A host's announces that name a record it does not (or no longer) hold: a lock or a
//! claim whose CAS lost, a write stopped between its unlock and its withdrawal, a host
//! declared dead in that window. Recovery must not take another host's live lock or
//! claim of the same record for the dead host's, and a wait that gives up must not name
//! the stale announcer as the holder. Built with the `chaos` feature only.
#![cfg(feature = "chaos")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{pauses_when, simulated, value, Paused, SLOT};
use megalon_core::chaos::Point;
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, Pod, PodConfig};

const LEASE_MS: u32 = 100;
const BOUND: Duration = Duration::from_secs(5);

fn config(bits: u32) -> PodConfig {
    common::config()
        .max_hosts(4)
        .record_width_bits(bits)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
}

/// A pod with undo images whose records fill one SCR line (256 at 2 bits, 128 at 4, 64
/// at 8): few enough to leave exactly one free.
fn one_line_pod(bits: u32) -> Arc<Pod> {
    let config = config(bits)
        .scr_bytes(4096)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096);
    let layout = megalon_core::Layout::new(&config).expect("layout");
    let bytes = layout.record_count * u64::from(bits) / 8;
    common::heap_pod(&config.app_scr_bytes(bytes - 64))
}

fn options(id: u32, wait: Duration) -> HostOptions {
    HostOptions::new()
        .memory(simulated(u64::from(id) + 1, 4096, 0))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(wait)
}

fn leak(pod: &Arc<Pod>, id: u32, wait: Duration) -> &'static Host {
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options(id, wait)).expect("join"),
    ))
}

/// `host` runs `call` on a thread of its own and pauses at `point` (the first time),
/// its row saying it runs elsewhere: only its lease tells whether it lives.
fn paused_elsewhere<T: Send + 'static>(
    host: &'static Host,
    point: Point,
    call: impl FnOnce() -> T + Send + 'static,
) -> Paused<T> {
    pauses_when(
        point,
        move || {
            host.inspect().pretend_elsewhere();
            true
        },
        call,
    )
}

/// [`common::leases_run_out`] at this file's lease.
fn leases_run_out(watchers: &[&Host]) {
    common::leases_run_out(watchers, LEASE_MS);
}

/// [`common::watch_until`] within the lease and [`BOUND`].
#[track_caller]
fn watch_until(r: &Host, what: &str, done: impl Fn() -> bool) {
    common::watch_until(
        r,
        what,
        Duration::from_millis(LEASE_MS.into()) + BOUND,
        done,
    );
}

/// A few rounds of `r`'s watch (recovery of whom it finds dead, as far as it gets).
fn watch_for_a_while(r: &Host) {
    for _ in 0..20 {
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn recovered(pod: &Pod, dead: u32) -> bool {
    pod.hosts().iter().all(|row| row.host != dead)
}

fn record_of(host: &Host, key: &[u8]) -> Option<u32> {
    host.lookup(key).unwrap().and_then(|entry| entry.record)
}

fn locked(host: &Host, record: u32) -> bool {
    host.inspect().record_census().locked.contains(&record)
}

/// `host` locks `key` for a write and puts `byte` over its first half (in memory); the
/// ticket is handed back, still held.
fn half_write<'a>(host: &'a Host, key: &[u8], byte: u8) -> megalon_core::WriteTicket<'a> {
    let ticket = host.write_start(key).unwrap();
    ticket.write(0, &[byte; SLOT / 2]).unwrap();
    host.memory().write_back(ticket.offset(), SLOT);
    host.memory().fence();
    ticket
}

/// Ends `ticket`'s write with the rest of `value(tag)` (its first half was written
/// over), so that the object reads `value(tag)` whole.
fn finish_write(host: &Host, ticket: megalon_core::WriteTicket<'_>, tag: u8) {
    ticket.write(0, &value(tag)).unwrap();
    host.write_end(ticket).unwrap();
}

#[track_caller]
fn read(host: &Host, key: &[u8]) -> Vec<u8> {
    common::read(host, key)
}

// ---------------------------------------------------------------------------------------
// The holder a busy record names.

/// Host 0 finished a write of `k` (unlocked) and stopped before it withdrew its announce
/// (at 2 bits every lock of a record is one word); host 1 then holds `k`'s lock for a
/// write. Host 2's write gives up: its `RecordBusy` must not name host 0, whose announce
/// is stale, as the holder (it named the first host whose announce matched the word).
#[test]
fn a_busy_record_does_not_name_a_host_whose_announce_is_left_from_an_unlock() {
    let pod = common::heap_pod(&config(2));
    let stale = leak(&pod, 0, Duration::from_millis(300));
    let holder = leak(&pod, 1, Duration::from_millis(300));
    let waiter = leak(&pod, 2, Duration::from_millis(50));
    stale.create(b"k", &value(1)).unwrap();
    stale.write(b"k", &value(2)).unwrap();
    // Live, only slow: its row stays its own (no `pretend_elsewhere`).
    let paused = pauses_when(
        Point::WriteAfterUnlock,
        || true,
        move || stale.write(b"k", &value(3)),
    );
    let ticket = half_write(holder, b"k", 0xee);
    let busy = waiter.write(b"k", &value(4));
    finish_write(holder, ticket, 5);
    paused.resume().unwrap();
    match busy {
        Err(Error::RecordBusy { holder: named, .. }) => assert!(
            named == Some(holder.id()) || named.is_none(),
            "the busy record names host {named:?}; host {} holds it",
            holder.id()
        ),
        other => panic!("expected RecordBusy, got {other:?}"),
    }
    assert_eq!(read(waiter, b"k"), value(5));
}

/// As above, with the stale announcer declared dead: host 0 announced a write lock of
/// `k` and was paused (past its lease) before its CAS; host 1 took the lock meanwhile
/// (the very word host 0 announced, at every width); host 0 resumes, condemned, and its
/// CAS loses. Host 0's recovery waits for host 1's lock, and host 0 keeps its announce
/// (it is its recovery's); a wait that gives up meanwhile named host 0, dead, as the
/// holder. Then host 1's write completes, and recovery neither unlocks its lock nor puts
/// an image back over its bytes.
fn a_lock_lost_to_a_live_writer_by_a_host_declared_dead(bits: u32) {
    let pod = common::heap_pod(&config(bits));
    let r = leak(&pod, 3, Duration::from_millis(300));
    let dead = leak(&pod, 0, Duration::from_millis(300));
    let holder = leak(&pod, 1, Duration::from_millis(300));
    let waiter = leak(&pod, 2, Duration::from_millis(50));
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    let record = record_of(r, b"k").unwrap();
    let paused = paused_elsewhere(dead, Point::WriteBeforeLock, move || {
        dead.write(b"k", &value(9))
    });
    let ticket = half_write(holder, b"k", 0xee);
    leases_run_out(&[r, holder, waiter]);
    watch_for_a_while(r);
    assert!(
        locked(r, record),
        "{bits} bits: the live writer's lock was taken"
    );
    // Condemned, it resumes: its CAS loses to the live lock, and its announce stays
    // (its recovery's). (Resumed after its recovery instead, its CAS at 2 bits finds the
    // very word recovery left: the lease's window, `recovery_races.rs`.)
    let resumed = paused.resume();
    assert!(
        matches!(resumed, Err(Error::HostDeclaredDead { .. })),
        "{bits} bits: {resumed:?}"
    );
    watch_for_a_while(r);
    assert!(
        locked(r, record),
        "{bits} bits: the live writer's lock was taken"
    );
    let busy = waiter.write(b"k", &value(4));
    finish_write(holder, ticket, 5);
    watch_until(r, "the dead host never recovered", || recovered(&pod, 0));
    assert_eq!(read(waiter, b"k"), value(5), "{bits} bits: the live write");
    match busy {
        Err(Error::RecordBusy { holder: named, .. }) => assert!(
            named == Some(holder.id()) || named.is_none(),
            "{bits} bits: the busy record names host {named:?} (declared dead); host {} \
             holds it",
            holder.id()
        ),
        other => panic!("{bits} bits: expected RecordBusy, got {other:?}"),
    }
    waiter.write(b"k", &value(6)).unwrap();
    assert_eq!(read(r, b"k"), value(6));
}

#[test]
fn a_lock_lost_by_a_host_declared_dead_2_bits() {
    a_lock_lost_to_a_live_writer_by_a_host_declared_dead(2);
}

#[test]
fn a_lock_lost_by_a_host_declared_dead_4_bits() {
    a_lock_lost_to_a_live_writer_by_a_host_declared_dead(4);
}

#[test]
fn a_lock_lost_by_a_host_declared_dead_8_bits() {
    a_lock_lost_to_a_live_writer_by_a_host_declared_dead(8);
}

// ---------------------------------------------------------------------------------------
// A claim that lost.

/// Every record of a one-line pod in use but one: `r` creates and writes objects `f..`.
fn all_records_but_one_in_use(pod: &Pod, r: &Host) {
    let count = pod.layout().record_count;
    for i in 0..count - 1 {
        let key = format!("f{i}");
        r.create(key.as_bytes(), &value(1)).unwrap();
        r.write(key.as_bytes(), &value(2)).unwrap();
    }
    assert_eq!(r.inspect().record_census().in_use.len() as u64, count - 1);
}

/// A host announces its claim of the pod's one free record and is paused (past its
/// lease) before its CAS; a live host claims the same record for another object (the
/// same claimed word) and writes it. The paused host's claim, when it resumes, loses.
/// Its recovery, meanwhile, must leave the live host's record alone: whether the live
/// host's write is half done or done while recovery runs, and after it
/// the live object reads whole, keeps its record, and takes writes.
fn a_claim_lost_to_a_live_claim(bits: u32, live_write_done_first: bool) {
    let pod = one_line_pod(bits);
    let r = leak(&pod, 3, Duration::from_millis(300));
    let dead = leak(&pod, 0, Duration::from_millis(300));
    let live = leak(&pod, 1, Duration::from_millis(300));
    all_records_but_one_in_use(&pod, r);
    r.create(b"a", &value(10)).unwrap();
    r.create(b"b", &value(20)).unwrap();
    let paused = paused_elsewhere(dead, Point::ClaimBeforeCas, move || {
        dead.write(b"a", &value(11))
    });
    // The same free record, claimed by the live host: its CAS wins.
    let ticket = half_write(live, b"b", 0xee);
    let record = record_of(live, b"b").expect("b has the free record");
    let ticket = if live_write_done_first {
        finish_write(live, ticket, 21);
        None
    } else {
        Some(ticket)
    };
    leases_run_out(&[r, live]);
    watch_for_a_while(r);
    if let Some(ticket) = ticket {
        assert!(
            locked(r, record),
            "{bits} bits: the live writer's lock of b's record was taken"
        );
        finish_write(live, ticket, 21);
    }
    watch_until(r, "the dead host never recovered", || recovered(&pod, 0));
    let resumed = paused.resume();
    assert!(resumed.is_err(), "{bits} bits: {resumed:?}");
    assert_eq!(read(r, b"b"), value(21), "{bits} bits: b's live write");
    assert_eq!(record_of(r, b"b"), Some(record), "{bits} bits: b's record");
    assert!(
        r.inspect().record_census().in_use.contains(&record),
        "{bits} bits: b's record freed under it"
    );
    r.write(b"b", &value(22)).unwrap();
    assert_eq!(read(live, b"b"), value(22));
    // `a` gets a record in turn (b's is not handed out twice).
    r.write(b"a", &value(12)).unwrap();
    assert_ne!(record_of(r, b"a"), Some(record));
    assert_eq!(read(live, b"a"), value(12));
    assert_eq!(read(live, b"b"), value(22));
}

#[test]
fn a_claim_lost_to_a_live_writer_2_bits() {
    a_claim_lost_to_a_live_claim(2, false);
}

#[test]
fn a_claim_lost_to_a_live_writer_4_bits() {
    a_claim_lost_to_a_live_claim(4, false);
}

#[test]
fn a_claim_lost_to_a_live_writer_8_bits() {
    a_claim_lost_to_a_live_claim(8, false);
}

#[test]
fn a_claim_lost_to_a_live_object_2_bits() {
    a_claim_lost_to_a_live_claim(2, true);
}

#[test]
fn a_claim_lost_to_a_live_object_4_bits() {
    a_claim_lost_to_a_live_claim(4, true);
}

// ---------------------------------------------------------------------------------------
// A lock that lost to a record reclaimed and allocated again meanwhile.

/// A host announces a write lock of `k`'s record and is paused (past its lease) before
/// its CAS. Meanwhile `k` loses its record (made read-shared), and a live host allocates
/// that record (the pod's only free one) to `k2` at the same counter and takes it for a
/// write: the very word the paused host announced, at every width. The paused host
/// resumes, condemned: its CAS loses. Its recovery must wait for the live writer (not
/// unlock its lock, nor put the paused host's image or any other over its bytes), and
/// both objects read whole after.
fn a_lock_lost_to_a_record_allocated_again(bits: u32) {
    let pod = one_line_pod(bits);
    let r = leak(&pod, 3, Duration::from_millis(300));
    let dead = leak(&pod, 0, Duration::from_millis(300));
    let live = leak(&pod, 1, Duration::from_millis(300));
    all_records_but_one_in_use(&pod, r);
    r.create(b"k", &value(10)).unwrap();
    r.write(b"k", &value(11)).unwrap();
    r.create(b"k2", &value(20)).unwrap();
    let record = record_of(r, b"k").unwrap();
    let paused = paused_elsewhere(dead, Point::WriteBeforeLock, move || {
        dead.write(b"k", &value(99))
    });
    assert!(r.make_read_shared(b"k").unwrap());
    let ticket = half_write(live, b"k2", 0xee);
    assert_eq!(
        record_of(live, b"k2"),
        Some(record),
        "k's record, allocated again"
    );
    leases_run_out(&[r, live]);
    watch_for_a_while(r);
    assert!(
        locked(r, record),
        "{bits} bits: the live writer's lock was taken"
    );
    let resumed = paused.resume();
    assert!(resumed.is_err(), "{bits} bits: {resumed:?}");
    watch_for_a_while(r);
    assert!(
        locked(r, record),
        "{bits} bits: the live writer's lock was taken"
    );
    finish_write(live, ticket, 21);
    watch_until(r, "the dead host never recovered", || recovered(&pod, 0));
    assert_eq!(read(r, b"k2"), value(21), "{bits} bits: k2's live write");
    assert_eq!(read(r, b"k"), value(11), "{bits} bits: k, read-shared");
    r.write(b"k2", &value(22)).unwrap();
    assert_eq!(read(live, b"k2"), value(22));
}

#[test]
fn a_lock_lost_to_a_record_allocated_again_2_bits() {
    a_lock_lost_to_a_record_allocated_again(2);
}

#[test]
fn a_lock_lost_to_a_record_allocated_again_4_bits() {
    a_lock_lost_to_a_record_allocated_again(4);
}

#[test]
fn a_lock_lost_to_a_record_allocated_again_8_bits() {
    a_lock_lost_to_a_record_allocated_again(8);
}
