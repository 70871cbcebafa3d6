//! The record width switched at run time (`Host::switch_record_width`): every host moves
//! to the new width at one log position, objects keep their bytes, and what a switch
//! races (a write, a claim, a read) stays correct. Hosts run on the simulated
//! non-coherent memory.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{config, heap_pod, join, read_tag, simulated, value, SLOT};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Layout, PodConfig, RecordShape};

fn switchable() -> PodConfig {
    config().record_width_switch(true)
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(simulated(seed, 512, 64))
        .wait_limit(Duration::from_millis(500))
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// Version `version` of an object: the version in its first eight bytes, then bytes that
/// follow from it.
fn versioned(version: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..SLOT)
        .map(|i| (version as u8).wrapping_add(i as u8))
        .collect();
    bytes[..8].copy_from_slice(&version.to_le_bytes());
    bytes
}

/// The version of `copy` if it is one whole version, else `None` (torn).
fn version_of(copy: &[u8]) -> Option<u64> {
    let version = u64::from_le_bytes(copy[..8].try_into().unwrap());
    (copy == versioned(version).as_slice()).then_some(version)
}

/// Records of a pod of `config` at `bits`.
fn records_at(config: &PodConfig, bits: u32) -> u64 {
    let layout = Layout::new(config).expect("layout");
    layout.records_bytes() * 8 / u64::from(bits)
}

#[test]
// Over 70 lines on purpose: A scenario: switches down and up, with what each must leave.
fn a_switch_moves_every_host_to_the_new_width_and_objects_keep_their_bytes() {
    let config = switchable();
    let pod = heap_pod(&config);
    let a = join(&pod, options(1));
    let b = join(&pod, options(2));
    for i in 0..40 {
        a.create(&key(i), &value(0)).unwrap();
        a.write(&key(i), &value(1)).unwrap();
    }
    assert_eq!(a.inspect().records_in_use().0, 40);
    let before = RecordShape { epoch: 0, bits: 32 };
    assert_eq!(b.record_width().unwrap(), before);

    assert!(b.switch_record_width(8).unwrap());
    let after = RecordShape { epoch: 1, bits: 8 };
    for host in [&a, &b] {
        assert_eq!(host.record_width().unwrap(), after);
        assert_eq!(
            host.inspect().records_in_use(),
            (0, records_at(&config, 8)),
            "every record free, four to the bytes of one"
        );
        for i in 0..40 {
            assert_eq!(host.lookup(&key(i)).unwrap().unwrap().record, None);
            assert_eq!(read_tag(host, &key(i)), Some(1), "k{i}");
        }
    }
    assert!(a.inspect().record_census().in_use.is_empty());
    // Writes allocate records of the new width, on both hosts, and read back whole.
    for i in 0..40 {
        let writer = if i % 2 == 0 { &a } else { &b };
        writer.write(&key(i), &value(2 + i as u8)).unwrap();
    }
    for i in 0..40 {
        assert_eq!(read_tag(&a, &key(i)), Some(2 + i as u8));
        assert_eq!(read_tag(&b, &key(i)), Some(2 + i as u8));
    }
    let census = b.inspect().record_census();
    assert_eq!(census.in_use.len(), 40);
    assert_eq!(b.inspect().records_in_use().0, 40);

    assert!(!a.switch_record_width(8).unwrap(), "at 8 bits already");
    // Down to records without a counter, then back up to 16 bits.
    assert!(a.switch_record_width(2).unwrap());
    for i in 0..40 {
        b.write(&key(i), &value(100 + i as u8)).unwrap();
        assert_eq!(read_tag(&a, &key(i)), Some(100 + i as u8));
    }
    assert!(b.switch_record_width(16).unwrap());
    assert_eq!(
        a.record_width().unwrap(),
        RecordShape { epoch: 3, bits: 16 }
    );
    for i in 0..40 {
        a.write(&key(i), &value(200)).unwrap();
        assert_eq!(read_tag(&b, &key(i)), Some(200));
    }
    assert_eq!(a.inspect().records_in_use(), (40, records_at(&config, 16)));
}

#[test]
fn a_pod_whose_width_is_fixed_or_cannot_switch_says_why() {
    let fixed = heap_pod(&config());
    let host = join(&fixed, options(1));
    assert!(matches!(
        host.switch_record_width(8),
        Err(Error::NotWithWidthSwitch { .. })
    ));
    let pod = heap_pod(&switchable());
    let host = join(&pod, options(1));
    assert!(matches!(
        host.switch_record_width(3),
        Err(Error::UnsupportedRecordWidth { bits: 3 })
    ));
    assert!(matches!(
        Layout::new(&switchable().local_partitions(4)),
        Err(Error::NotWithWidthSwitch { .. })
    ));
    // Undo images switch (`a_pod_with_undo_images_restores_dead_writers_at_each_width`):
    // their announces hold a record id + 1 in 30 bits, at every width.
    let undo = Layout::new(&switchable().crash_safety(CrashSafety::Undo)).expect("undo");
    assert_eq!(undo.max_records(), (1 << 30) - 2);
    assert!(matches!(
        Layout::new(&switchable().coherence(megalon_core::Coherence::AllLog)),
        Err(Error::NeedsSplitCoherence { .. })
    ));
}

/// A pod with undo images switches its width. A writer that dies half-way through its
/// write holds a switch off until its recovery has rolled the object back (its lock and
/// its announce both gone); and after a switch, a writer that dies at the new width is
/// rolled back by a recovery that reads its announce at that width. Every read is the
/// last whole value, and the object is written on after each.
#[test]
fn a_pod_with_undo_images_restores_dead_writers_at_each_width() {
    use megalon_core::inspect::crash;

    let config = switchable().crash_safety(CrashSafety::Undo).lease_ms(100);
    let pod = heap_pod(&config);
    let pumped = |seed| {
        options(seed)
            .wait_limit(Duration::from_secs(5))
            .pump_interval(Some(Duration::from_millis(1)))
    };
    let b = join(&pod, pumped(2));
    // A writer of `k` that stops half-way through and dies there.
    let dies_writing = |seed, tag| {
        let a = join(&pod, pumped(seed));
        let ticket = a.write_start(b"k").unwrap();
        ticket.write(0, &value(tag)[..SLOT / 2]).unwrap();
        a.memory().write_back(ticket.offset(), SLOT);
        a.memory().fence();
        std::mem::forget(ticket);
        crash(a);
    };
    b.create(b"k", &value(1)).unwrap();
    b.write(b"k", &value(2)).unwrap();
    dies_writing(1, 0xee);
    assert!(b.switch_record_width(8).unwrap());
    assert_eq!(b.inspect().stats().hosts_recovered, 1, "recovered first");
    assert_eq!(read_tag(&b, b"k"), Some(2), "rolled back whole");
    b.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(&b, b"k"), Some(3));
    // At 8 bits: a writer dies again; its announce is of an 8-bit record.
    dies_writing(3, 0xdd);
    assert!(b.switch_record_width(32).unwrap());
    assert_eq!(b.inspect().stats().hosts_recovered, 2);
    assert_eq!(b.inspect().stats().locks_recovered, 2);
    assert_eq!(read_tag(&b, b"k"), Some(3), "rolled back whole at 8 bits");
    assert_eq!(
        b.record_width().unwrap(),
        RecordShape { epoch: 2, bits: 32 }
    );
    b.write(b"k", &value(4)).unwrap();
    assert_eq!(read_tag(&b, b"k"), Some(4));
    assert!(b.inspect().record_census().locked.is_empty());
}

/// An announce word left set in a free row (a late store of a life paused past its
/// lease, which names no lock: stored here by hand) holds no switch off, and the id's
/// next life clears it as it joins, so it holds none off then either. Before, every
/// switch waited on it and gave up, first while the row was free, then for good.
#[test]
fn a_late_announce_in_a_free_row_holds_no_switch_off() {
    let config = switchable().crash_safety(CrashSafety::Undo);
    let pod = heap_pod(&config);
    let a = join(&pod, options(1));
    let b = join(&pod, options(2));
    let id = b.id();
    drop(b);
    let late = pod.scr_u64(pod.layout().announce_offset(id, 3));
    late.store(6 << 32 | 0x15, std::sync::atomic::Ordering::SeqCst);
    a.create(b"k", &value(1)).unwrap();
    a.write(b"k", &value(2)).unwrap();
    assert!(
        a.switch_record_width(8).unwrap(),
        "past a free row's late announce"
    );
    let again = megalon_core::Host::join(&pod, megalon_core::Join::As(id), options(3)).unwrap();
    assert_eq!(
        late.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "cleared at the join"
    );
    assert!(again.switch_record_width(32).unwrap());
    again.write(b"k", &value(3)).unwrap();
    assert_eq!(read_tag(&a, b"k"), Some(3));
}

/// A write ticket held past the drainer's wait limit keeps the switch from draining: it
/// gives up, changing nothing, and the write ends as if no switch had been tried.
#[test]
fn a_switch_waits_for_a_held_write_and_gives_up_changing_nothing() {
    let pod = heap_pod(&switchable());
    let a = join(&pod, options(1));
    let b = join(&pod, options(2));
    a.create(b"k", &value(0)).unwrap();
    a.write(b"k", &value(1)).unwrap();
    let ticket = a.write_start(b"k").unwrap();
    ticket.write(0, &value(2)[..SLOT / 2]).unwrap();
    let started = std::time::Instant::now();
    assert!(matches!(
        b.switch_record_width(8),
        Err(Error::RecordWidthSwitching { .. })
    ));
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(
        b.record_width().unwrap(),
        RecordShape { epoch: 0, bits: 32 }
    );
    ticket.write(SLOT / 2, &value(2)[SLOT / 2..]).unwrap();
    a.write_end(ticket).unwrap();
    assert_eq!(read_tag(&b, b"k"), Some(2));
    // Another host writes on at the old width; then the switch goes through.
    b.write(b"k", &value(3)).unwrap();
    assert!(b.switch_record_width(8).unwrap());
    assert_eq!(read_tag(&a, b"k"), Some(3));
}

/// Writers of their own keys on three hosts, readers of every key, and switches between
/// every width, all at once: every read is one whole version, never older than the last
/// version its writer finished before the read began.
///
/// Its hosts wait up to 5 s, not `options`' 500 ms: the test fails on any wait that gives
/// up, and a stop of the whole process longer than the limit (a loaded machine's, about a
/// second) spends every wait under way at once, the wait for a hole an appender left
/// between its reservation and its write included. At 500 ms it failed 3 runs of 8
/// beside a stress (`ReplayStalled` after 1.3 s), and 7 of 8 with the process stopped
/// (SIGSTOP) for 1.2 s (`ReplayStalled`, `RecordBusy`, `LogFull`); at 5 s, none of 8.
#[test]
fn writes_and_reads_across_switches_of_every_width_stay_whole_and_fresh() {
    const KEYS: usize = 12;
    let pod = heap_pod(&switchable().scr_bytes(8 << 10));
    let hosts: Vec<Arc<Host>> = (0..3)
        .map(|i| {
            Arc::new(join(
                &pod,
                options(10 + i).wait_limit(Duration::from_secs(5)),
            ))
        })
        .collect();
    for i in 0..KEYS {
        hosts[0].create(&key(i), &value(0)).unwrap();
    }
    for i in 0..KEYS {
        hosts[0].write(&key(i), &versioned(0)).unwrap();
    }
    let done_tags: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (h, host) in hosts.iter().enumerate() {
        // Writer of keys h, h + 3, ...: versions rise by one each write.
        let (host, done_tags, stop) = (Arc::clone(host), Arc::clone(&done_tags), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for i in (h..KEYS).step_by(3) {
                    let version = done_tags[i].load(Ordering::Relaxed) + 1;
                    match host.write(&key(i), &versioned(version)) {
                        Ok(_) => {
                            done_tags[i].store(version, Ordering::Release);
                            writes += 1;
                        }
                        Err(Error::RecordWidthSwitching { .. } | Error::RecordBusy { .. }) => {}
                        Err(error) => panic!("write of k{i}: {error}"),
                    }
                }
            }
            writes
        }));
    }
    let readers: Vec<_> = hosts
        .iter()
        .map(|host| {
            let (host, done_tags, stop) =
                (Arc::clone(host), Arc::clone(&done_tags), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut buf = vec![0u8; SLOT];
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..KEYS {
                        let floor = done_tags[i].load(Ordering::Acquire);
                        host.read(&key(i), &mut buf).expect("read");
                        let version = version_of(&buf).unwrap_or_else(|| panic!("k{i} torn"));
                        let ceiling = done_tags[i].load(Ordering::Acquire) + 1;
                        assert!(
                            (floor..=ceiling).contains(&version),
                            "k{i}: read {version}, its writer had finished {floor} before and \
                             {} after",
                            ceiling - 1
                        );
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let mut switches = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let widths = [8, 2, 16, 4, 32];
    while std::time::Instant::now() < deadline {
        let bits = widths[switches % widths.len()];
        match hosts[switches % 3].switch_record_width(bits) {
            Ok(_) => switches += 1,
            Err(Error::RecordWidthSwitching { .. }) => {}
            Err(error) => panic!("switch to {bits}: {error}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let reads: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(switches >= 10, "{switches} switches");
    assert!(
        writes > 100 && reads > 100,
        "{writes} writes, {reads} reads"
    );
    let census = hosts[0].inspect().record_census();
    assert!(census.locked.is_empty());
    assert_eq!(
        hosts[0].inspect().records_in_use().0,
        census.in_use.len() as u64,
        "the count of records in use is the census's"
    );
}

/// A policy that looks often and judges from few writes.
fn quick_policy() -> megalon_core::WidthPolicy {
    megalon_core::WidthPolicy {
        interval: Duration::from_millis(50),
        min_writes: 300,
        ..megalon_core::WidthPolicy::default()
    }
}

/// Writes `objects` of `host`'s pod in a scrambled order until `done` says so or `for_at_most`
/// passes: what the pumps' policies judge from.
fn write_until(host: &Host, objects: usize, for_at_most: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + for_at_most;
    let mut i = 0usize;
    while !done() && std::time::Instant::now() < deadline {
        i = (i + 7919) % objects;
        host.write(&key(i), &value(i as u8)).unwrap();
    }
}

/// More objects written than 32-bit records can hold: the pump's policy finds its writes
/// churning and halves the width, and stops where the records hold every object written
/// (16 bits here: churn then stays under its bound).
#[test]
fn a_pump_narrows_the_width_while_writes_churn_and_stops_once_they_do_not() {
    let config = switchable().scr_bytes(8 << 10);
    let objects = (records_at(&config, 32) * 5 / 4) as usize;
    assert!((objects as u64) < records_at(&config, 16) * 3 / 4);
    let pod = heap_pod(&config);
    let host = join(&pod, options(1).width_policy(quick_policy()));
    for i in 0..objects {
        host.create(&key(i), &value(0)).unwrap();
    }
    let long = Duration::from_secs(10);
    write_until(&host, objects, long, || {
        host.record_width().unwrap().bits < 32
    });
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 16 }
    );
    // Writes go on at 16 bits without churn: no further switch.
    write_until(&host, objects, Duration::from_secs(1), || false);
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 16 }
    );
    for i in 0..objects {
        let tag = read_tag(&host, &key(i)).unwrap();
        assert!(tag == 0 || tag == i as u8, "k{i}: {tag}");
    }
}

/// A few objects written over and over at 4 bits (a wrap event every second write): the
/// policy doubles the width, and stops at 8 bits (a wrap every 32 writes of an object).
#[test]
fn a_pump_widens_the_width_while_writes_wrap_and_stops_once_they_do_not() {
    let config = switchable().record_width_bits(4);
    let pod = heap_pod(&config);
    let host = join(&pod, options(1).width_policy(quick_policy()));
    for i in 0..16 {
        host.create(&key(i), &value(0)).unwrap();
    }
    let long = Duration::from_secs(10);
    write_until(&host, 16, long, || host.record_width().unwrap().bits > 4);
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 8 }
    );
    write_until(&host, 16, Duration::from_secs(1), || false);
    assert_eq!(
        host.record_width().unwrap(),
        RecordShape { epoch: 1, bits: 8 }
    );
}

/// Host a writes `k` on a thread of its own, over and over, until the switch that `b`
/// makes returns: the switch must go through. a's writes themselves acknowledge the
/// freeze (their gate meets it), whatever a's pump does.
fn switch_while_writing(a_options: HostOptions) -> Result<bool, Error> {
    let pod = heap_pod(&switchable());
    let a = Arc::new(join(&pod, a_options));
    let b = join(&pod, options(2).wait_limit(Duration::from_secs(3)));
    a.create(b"k", &value(0)).unwrap();
    // Written once: the object has a record, and a's copy of the width word is open.
    a.write(b"k", &value(1)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, stop) = (Arc::clone(&a), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut tag = 2u8;
            while !stop.load(Ordering::Relaxed) {
                // Waits (and may give up) while the switch drains.
                if a.write(b"k", &value(tag)).is_ok() {
                    tag = tag.wrapping_add(1).max(2);
                }
            }
        })
    };
    let switched = b.switch_record_width(8);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    switched
}

/// A host run without a pump acknowledges a freeze at its writes' gates: a switch goes
/// through while it writes. (With the gates looking at the host's DRAM copy of the width
/// word only, its writes passed on the copy, open since their first look, and nothing
/// acknowledged the freeze: every switch gave up at its wait limit.)
#[test]
fn a_switch_goes_through_while_a_host_without_a_pump_writes() {
    let switched = switch_while_writing(options(1).pump_interval(None));
    assert!(matches!(switched, Ok(true)), "{switched:?}");
}

/// A host whose pump's rounds are far apart (an idle host that need not replay often)
/// acknowledges a freeze between them, as it beats: a switch goes through while it
/// writes, well within the drainer's limit. (Its writes passed on the DRAM copy of the
/// width word, and only its next round acknowledged, after the drainer's limit.)
#[test]
fn a_switch_goes_through_while_a_host_whose_pump_sleeps_long_writes() {
    let switched = switch_while_writing(options(1).pump_interval(Some(Duration::from_secs(60))));
    assert!(matches!(switched, Ok(true)), "{switched:?}");
}
