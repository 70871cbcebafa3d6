//! The log at its limits: rings of two and three entries under load from three hosts, and
//! `Inspect::read_log` while the ring laps under it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Coherence, Error, Host, HostOptions, Join, PodConfig};

/// The object tests' pod with a ring of `capacity` entries and records of `width` bits.
fn tiny(capacity: u64, width: u32, coherence: Coherence) -> PodConfig {
    common::config()
        .coherence(coherence)
        .log_capacity_entries(capacity)
        .record_width_bits(width)
}

/// Bytes of the values: three lines of the four of a slot.
const VALUE: usize = 192;

/// [`VALUE`] bytes of one word repeated: a torn copy shows.
fn value(v: u64) -> Vec<u8> {
    v.to_le_bytes().repeat(VALUE / 8)
}

fn whole(buf: &[u8]) -> bool {
    buf[..VALUE].chunks(8).all(|word| word == &buf[..8])
}

/// Whether `result` is a success or one of the errors a full ring, a short wait limit or
/// the keys' races may answer; panics on any other.
fn ok_or_expected(result: megalon_core::Result<()>) -> bool {
    match result {
        Ok(()) => true,
        Err(
            Error::LogFull { .. }
            | Error::CombinerStalled { .. }
            | Error::ReplayStalled { .. }
            | Error::RecordBusy { .. }
            | Error::ObjectExists
            | Error::UnknownKey
            | Error::InjectedFault { .. }
            | Error::ObjectLocked { .. },
        ) => false,
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

/// Three hosts of two threads on the smallest rings, wait limit short: writes that wrap
/// narrow counters (a `Wrap` event every other write at 4 bits), creates, deletes and
/// reads. No read accepts a torn copy, no call answers an error other than the ring's or
/// the keys' own, and once the load stops every host creates again, the replicas agree,
/// no record or replicated lock is left held, and the records in use are the objects'.
#[test]
fn the_smallest_rings_under_load_keep_going() {
    rings_under_load(|i| common::small_cache(100 + i));
}

/// The same, with preemptions at every chaos point and refused and unconfirmed appends.
#[cfg(feature = "chaos")]
#[test]
fn the_smallest_rings_under_load_and_chaos_keep_going() {
    rings_under_load(|i| {
        common::small_cache(200 + i)
            .chaos(megalon_core::chaos::ChaosConfig::preemptions(i, 8).faults(16, 16))
    });
}

fn rings_under_load(options: fn(u64) -> HostOptions) {
    for (capacity, width, coherence) in [
        (2, 4, Coherence::Split),
        (3, 4, Coherence::Split),
        (2, 8, Coherence::Split),
        (2, 32, Coherence::AllLog),
    ] {
        let what = format!("a ring of {capacity}, {width}-bit records, {coherence:?}");
        let pod = common::heap_pod(&tiny(capacity, width, coherence));
        let hosts: Vec<Arc<Host>> = (0..3)
            .map(|i| {
                let options = options(i).wait_limit(Duration::from_millis(20));
                Arc::new(common::join(&pod, options))
            })
            .collect();
        for k in 0..4 {
            while !matches!(
                hosts[0].create(format!("k{k}").as_bytes(), &value(0)),
                Ok(()) | Err(Error::ObjectExists)
            ) {}
        }
        let stop = Arc::new(AtomicBool::new(false));
        let values = Arc::new(AtomicU64::new(1));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let host = Arc::clone(&hosts[t / 2]);
                let (stop, values) = (Arc::clone(&stop), Arc::clone(&values));
                std::thread::spawn(move || load(&host, t, &stop, &values))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(600));
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            thread.join().expect("a load thread");
        }
        for (h, host) in hosts.iter().enumerate() {
            let key = format!("after{h}");
            let created = (0..200).any(|_| {
                matches!(
                    host.create(key.as_bytes(), &value(9)),
                    Ok(()) | Err(Error::ObjectExists)
                )
            });
            assert!(created, "{what}: host {h} creates nothing after the load");
        }
        let entries = |host: &Host| -> Vec<_> {
            host.replay().expect("replay");
            let snapshot = host.inspect().replica_snapshot();
            snapshot
                .into_iter()
                .map(|(key, e)| (key, e.slot, e.record, e.stamp))
                .collect()
        };
        let first = entries(&hosts[0]);
        for host in &hosts[1..] {
            assert_eq!(entries(host), first, "{what}: replicas differ");
        }
        for host in &hosts {
            while host.inspect().settle_pending().expect("settle") > 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            for k in 0..4 {
                let lock = host.inspect().replicated_lock(format!("k{k}").as_bytes());
                let held = lock.expect("replica").and_then(|lock| lock.holder);
                assert!(held.is_none(), "{what}: replicated lock of k{k} left held");
            }
        }
        let census = hosts[0].inspect().record_census();
        assert!(
            census.locked.is_empty(),
            "{what}: records left locked {:?}",
            census.locked
        );
        let with_record = first.iter().filter(|entry| entry.2.is_some()).count();
        assert_eq!(census.in_use.len(), with_record, "{what}: records in use");
    }
}

/// Thread `t`'s mix on four shared keys until `stop`: a create and a delete of keys of
/// its own, two reads, two writes of fresh values, in turn.
fn load(host: &Host, t: usize, stop: &AtomicBool, values: &AtomicU64) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = format!("k{}", (i + t as u64) % 4);
        match i % 5 {
            0 => {
                ok_or_expected(host.create(format!("c{t}.{i}").as_bytes(), &value(7)));
                ok_or_expected(host.delete(format!("c{t}.{}", i - 5).as_bytes()));
            }
            1 | 2 => {
                let mut buf = vec![0u8; common::SLOT];
                if let Ok(ticket) = host.read_start(key.as_bytes()) {
                    ticket.read(0, &mut buf).expect("in the object");
                    if let Ok(true) = host.read_end(ticket) {
                        assert!(whole(&buf), "a torn read accepted: {:?}", &buf[..VALUE]);
                    }
                }
            }
            _ => {
                let written = host.write_start(key.as_bytes()).and_then(|ticket| {
                    let v = values.fetch_add(1, Ordering::Relaxed);
                    ticket.write(0, &value(v)).expect("in the object");
                    host.write_end(ticket)
                });
                ok_or_expected(written);
            }
        }
    }
}

/// A key of five 8-byte words that are all `n`: a copy that mixes two keys shows.
fn pattern_key(n: u64) -> Vec<u8> {
    format!("{n:08x}").repeat(5).into_bytes()
}

/// `Inspect::read_log` once looked at the head before its loop only: an entry that every
/// host replayed while it was copied (the head moved past it) and that the ring wrote a
/// later lap over mid-copy was handed out torn, a key of two creates. Host w creates and
/// deletes keys whose words are all one number in a ring of two; host r, whose pump
/// replays, reads the log from the head over and over.
#[test]
fn read_log_never_hands_out_an_entry_the_ring_wrote_over() {
    let config = common::config().slot_size_bytes(64).log_capacity_entries(2);
    let pod = common::heap_pod(&config);
    let quick = || HostOptions::new().pump_interval(Some(Duration::from_micros(50)));
    let w = Arc::new(Host::join(&pod, Join::AnyFree, quick()).expect("w joins"));
    let r = Host::join(&pod, Join::AnyFree, quick()).expect("r joins");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (w, stop) = (Arc::clone(&w), Arc::clone(&stop));
        std::thread::spawn(move || {
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let _ = w.create(&pattern_key(n), b"v");
                let _ = w.delete(&pattern_key(n));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut read, mut torn) = (0u64, None);
    while Instant::now() < deadline && torn.is_none() {
        let (head, _, tail) = r.inspect().log_cursors();
        let Ok(events) = r.inspect().read_log(head, tail.max(head + 2)) else {
            continue;
        };
        for logged in events {
            read += 1;
            let event = logged.event.event();
            let key = event.key().unwrap_or_default();
            if key.chunks(8).any(|word| word != &key[..8]) {
                torn = Some((logged.position, String::from_utf8_lossy(key).into_owned()));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    assert!(read > 0, "no entry read in 2 s");
    assert!(
        torn.is_none(),
        "after {read} entries read, a torn one: {torn:?}"
    );
}

/// A `LogFull` found behind a hole at the head (chaos holds the hole's writer).
#[cfg(feature = "chaos")]
mod hole_at_head {
    use super::*;
    use megalon_core::chaos::{self, Point};
    use std::sync::mpsc::channel;

    /// A thread of `host` making `create(key)`, stopped the first time it reaches `point`
    /// until `go` is sent.
    fn create_held_at(
        host: &std::sync::Arc<Host>,
        key: &'static [u8],
        point: Point,
    ) -> (
        std::thread::JoinHandle<megalon_core::Result<()>>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (inside, wait_inside) = channel();
        let (go, wait_go) = channel::<()>();
        let host = std::sync::Arc::clone(host);
        let held = std::thread::spawn(move || {
            let mut held = false;
            let hook = move |at| {
                if at == point && !held {
                    held = true;
                    inside.send(()).unwrap();
                    let _ = wait_go.recv_timeout(Duration::from_secs(30));
                }
            };
            chaos::with_hook(hook, || host.create(key, b"v"))
        });
        wait_inside
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the create never reached {point:?}"));
        (held, go)
    }

    /// The combiner of host 0 is held in its confirm, which waits for a hole: host 1 reserved
    /// the position before it and has not published it (stopped in its append). Host 2 then
    /// fills the log. A request of host 0 queued behind that combiner is withdrawn past its
    /// limit with the log full, and its `LogFull` names host 1, whose unpublished reservation
    /// holds every host's replay, and so the head, where it is. (Review `grants`, 2026-12-03:
    /// it named host 0 itself, the lowest id of the hosts tied at the hole, which held nothing
    /// back, and sent the caller to look at its own host.)
    #[test]
    fn a_log_full_behind_a_hole_names_the_host_whose_reservation_holds_it() {
        use megalon_core::chaos::Fault;
        const CAPACITY: u64 = 8;
        const LIMIT: Duration = Duration::from_millis(300);
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .slot_size_bytes(256)
            .max_key_bytes(48)
            .log_capacity_entries(CAPACITY)
            .max_hosts(4);
        let pod = common::heap_pod(&config);
        let quiet = HostOptions::new().pump_interval(None).wait_limit(LIMIT);
        let busy =
            Arc::new(Host::join(&pod, Join::As(0), quiet.clone().flat_combining(true)).unwrap());
        let holer =
            Arc::new(Host::join(&pod, Join::As(1), quiet.clone().flat_combining(false)).unwrap());
        let other = Host::join(&pod, Join::As(2), quiet.flat_combining(false)).unwrap();
        // Slots claimed, so that a create is one entry; every replica at the tail.
        busy.create(b"b", b"v").unwrap();
        holer.create(b"h0", b"v").unwrap();
        other.create(b"o", b"v").unwrap();
        for host in [&*busy, &*holer, &other] {
            host.replay().unwrap();
        }
        let (_, _, hole) = busy.inspect().log_cursors();
        // Host 1 reserves `hole` and stops before it writes its entry.
        let (holed, publish) = create_held_at(&holer, b"h1", Point::AppendBeforeWrite);
        // Host 0's combiner appends the next and waits in its confirm for the hole.
        let (combiner, release) = create_held_at(&busy, b"first", Point::ReplayBeforeWait);
        // Host 2 fills the rest of the ring (its appends unconfirmed: none waits on the hole).
        for i in 0.. {
            let (_, _, tail) = busy.inspect().log_cursors();
            if tail == hole + CAPACITY {
                break;
            }
            assert!(i < 2 * CAPACITY, "host 2 could not fill the log");
            chaos::fail_next_appends(&[Fault::Unconfirmed]);
            let _ = other.create(format!("o{i}").as_bytes(), b"v");
            chaos::clear_forced_faults();
        }
        // Queued behind the held combiner, withdrawn past its limit.
        let withdrawn = busy.create(b"second", b"v");
        publish.send(()).unwrap();
        release.send(()).unwrap();
        let _ = holed.join().unwrap();
        let _ = combiner.join().unwrap();
        match withdrawn {
            Err(Error::LogFull {
                lagging_host,
                lagging_position,
                ..
            }) => {
                assert_eq!(lagging_position, hole);
                assert_eq!(
                    lagging_host,
                    Some(1),
                    "LogFull at the hole {hole} named host {lagging_host:?}, not host 1, whose \
                     reservation of it was not published"
                );
            }
            other => panic!("the withdrawn request: {other:?}"),
        }
    }
}
