//! Helpers shared by the core's integration tests: the pods, hosts and object bytes of
//! the tests of the object protocol (here), the plumbing of the tests that run a
//! second process on one pod file ([`process`]), and the stops of the process that the
//! tests bounding an elapsed time run again after ([`stops`]).

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

pub mod process;
/// Shared with the other crates' tests (in megalon-workload).
#[allow(unused_imports)]
pub use megalon_workload::stops;

use std::sync::Arc;
use std::time::Duration;

use megalon_core::{
    Backing, Error, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig,
};

/// Bytes of an object slot in the pods of [`config`].
pub const SLOT: usize = 256;

/// The object tests' pod: 64 KiB SCR, 1 MiB LNR, [`SLOT`]-byte slots, keys up to 48 bytes
/// (log entries of two lines), 256 log entries, 32-bit records, four hosts.
pub fn config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(1 << 20)
        .slot_size_bytes(SLOT as u64)
        .max_key_bytes(48)
        .log_capacity_entries(256)
        .max_hosts(4)
}
/// Whether host `id`'s row is freed (the host gone: left, or recovered) within `within`.
pub fn row_freed_within(pod: &Pod, id: megalon_core::HostId, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if pod.hosts().iter().all(|row| row.host != id) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Each of `watchers` looks at the host table once (it sees every lease as it stands),
/// then two leases of `lease_ms` pass: to each of them, a host frozen before now is dead.
pub fn leases_run_out(watchers: &[&Host], lease_ms: u32) {
    for watcher in watchers {
        watcher.inspect().watch_hosts();
    }
    std::thread::sleep(Duration::from_millis(u64::from(lease_ms) * 2));
}

/// Runs `r`'s watch (recovery of the dead it finds) until `done`; fails with `what` past
/// `within`.
#[track_caller]
pub fn watch_until(r: &Host, what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {:?}",
            r.inspect().background_errors()
        );
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A ring of `entries` entries (keys up to 32 bytes, payloads up to `payload` bytes) in
/// the app areas of a heap pod of its own, initialized.
pub fn ring_pod(entries: u64, payload: u64) -> (Arc<Pod>, megalon_core::rpc::RingGeometry) {
    use megalon_core::rpc;
    let entry_bytes = rpc::entry_bytes(32, payload);
    let config = PodConfig::new()
        .app_scr_bytes(rpc::scr_bytes(entries))
        .app_lnr_bytes(entries * entry_bytes);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("pod"));
    let ring = rpc::RingGeometry::in_app_areas(&pod, entries, entry_bytes).expect("ring");
    ring.initialize(&pod);
    (pod, ring)
}

/// A pod of `config` on the heap.
pub fn heap_pod(config: &PodConfig) -> Arc<Pod> {
    Arc::new(Pod::create(config, Backing::heap()).expect("creating the pod"))
}

/// A pod of [`config`] with `bits`-bit records (4 KiB SCR, 4 MiB LNR, 4096 log entries)
/// whose application SCR takes every record line but one: few enough records to fill.
pub fn one_record_line_pod(bits: u32) -> Arc<Pod> {
    let config = config()
        .scr_bytes(4096)
        .lnr_bytes(4 << 20)
        .log_capacity_entries(4096)
        .record_width_bits(bits);
    let layout = megalon_core::Layout::new(&config).expect("layout");
    let bytes = layout.record_count * u64::from(bits) / 8;
    heap_pod(&config.app_scr_bytes(bytes - 64))
}

/// A simulated non-coherent cache of `capacity_lines` lines that evicts a random line once
/// in `eviction_one_in` accesses (0: only when it is full, so a stale line stays until
/// something drops it).
pub fn simulated(seed: u64, capacity_lines: usize, eviction_one_in: u64) -> MemoryKind {
    MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines,
        random_eviction_one_in: eviction_one_in,
        ..SimulatedConfig::default()
    })
}

/// A cache that completes one line's writes in flight at every access it can (the most
/// eager drain the simulation has), never evicting at random.
pub fn eager(seed: u64) -> MemoryKind {
    MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines: 1024,
        random_eviction_one_in: 0,
        settle_one_in: 1,
    })
}

/// Options of a host on a small simulated cache (512 lines) that evicts a random line once
/// in 64 accesses.
pub fn small_cache(seed: u64) -> HostOptions {
    HostOptions::new().memory(simulated(seed, 512, 64))
}

/// Joins `pod` as any free host, with `options`.
pub fn join(pod: &Arc<Pod>, options: HostOptions) -> Host {
    Host::join(pod, Join::AnyFree, options).expect("joining the pod")
}

/// A host of `pod` on a [`small_cache`] seeded with `seed`.
pub fn host(pod: &Arc<Pod>, seed: u64) -> Host {
    join(pod, small_cache(seed))
}

/// Two hosts of `pod`, joined with `options(seed)` and `options(seed + 1)`.
pub fn two_hosts(pod: &Arc<Pod>, options: impl Fn(u64) -> HostOptions, seed: u64) -> (Host, Host) {
    (join(pod, options(seed)), join(pod, options(seed + 1)))
}

/// The reads of one `read_many` call: key `i` into buffer `i`.
pub fn reads<'a>(keys: &'a [Vec<u8>], bufs: &'a mut [Vec<u8>]) -> Vec<(&'a [u8], &'a mut [u8])> {
    keys.iter()
        .zip(bufs.iter_mut())
        .map(|(key, buf)| (key.as_slice(), buf.as_mut_slice()))
        .collect()
}

/// The answers of a `read_many` of a locked object, 15 read-shared ones and a last one
/// that nobody holds (`last`: why): the first `RecordBusy`, every other one read.
pub fn only_the_first_busy<T: std::fmt::Debug>(
    answers: &[Result<T, megalon_core::Error>],
    last: &str,
) {
    assert!(
        matches!(answers[0], Err(megalon_core::Error::RecordBusy { .. })),
        "the first is locked: {:?}",
        answers[0]
    );
    assert!(
        answers[1..16].iter().all(Result::is_ok),
        "the read-shared objects: {answers:?}"
    );
    assert!(answers[16].is_ok(), "{last}: {:?}", answers[16]);
}

/// The bytes of version `tag` of an object: a whole slot, byte `i` being `tag + i`.
pub fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

/// The tag of `copy` if it is one whole version (`value(tag)`), else `None` (torn).
pub fn tag_of(copy: &[u8]) -> Option<u8> {
    let tag = copy[0];
    (copy == value(tag).as_slice()).then_some(tag)
}

/// `key` read by `host`: `None` if absent, else its version's tag (`None` if torn); any
/// other error as text.
pub fn read_opt_tag(host: &Host, key: &[u8]) -> Result<Option<Option<u8>>, String> {
    let mut buf = vec![0; SLOT];
    match host.read(key, &mut buf) {
        Ok(_) => Ok(Some(tag_of(&buf))),
        Err(Error::UnknownKey) => Ok(None),
        Err(e) => Err(format!("read {e}")),
    }
}

/// Moves `key` into `host`'s DRAM (local partitions): reads it until the index names
/// `host`.
pub fn move_into(host: &Host, key: &[u8]) {
    for _ in 0..10 {
        if host.lookup(key).unwrap().unwrap().local_owner == Some(host.id()) {
            return;
        }
        let _ = read_opt_tag(host, key);
    }
    panic!("never moved");
}

/// `key` read whole by `host`: its version's tag, or `None` if torn.
pub fn read_tag(host: &Host, key: &[u8]) -> Option<u8> {
    let mut buf = vec![0u8; SLOT];
    host.read(key, &mut buf).expect("read");
    tag_of(&buf)
}

/// A whole slot of `key`'s bytes, as `host` reads them.
#[track_caller]
pub fn read(host: &Host, key: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; SLOT];
    host.read(key, &mut buf).expect("read");
    buf
}

/// What a create or a delete did, as its caller saw it or as a model of the log says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Created,
    Exists,
    Deleted,
    Unknown,
}

impl Seen {
    /// What a create that answered `result` did; any other error is passed on.
    pub fn of_create(result: Result<(), Error>) -> Result<Seen, Error> {
        match result {
            Ok(()) => Ok(Seen::Created),
            Err(Error::ObjectExists) => Ok(Seen::Exists),
            Err(e) => Err(e),
        }
    }

    /// What a delete that answered `result` did; any other error is passed on.
    pub fn of_delete(result: Result<(), Error>) -> Result<Seen, Error> {
        match result {
            Ok(()) => Ok(Seen::Deleted),
            Err(Error::UnknownKey) => Ok(Seen::Unknown),
            Err(e) => Err(e),
        }
    }

    /// The `Seen` whose `Debug` text is `name`.
    pub fn parse(name: &str) -> Seen {
        [Seen::Created, Seen::Exists, Seen::Deleted, Seen::Unknown]
            .into_iter()
            .find(|seen| format!("{seen:?}") == name)
            .unwrap_or_else(|| panic!("a result named {name:?}"))
    }
}

/// `host` creates `k` (`value(0)`) and writes it once (`value(1)`): `k` has a record.
#[track_caller]
pub fn written_k(host: &Host) {
    host.create(b"k", &value(0)).unwrap();
    host.write(b"k", &value(1)).unwrap();
}

/// The records the index of `host`'s replica names, sorted.
pub fn named_records(host: &Host) -> Vec<u32> {
    let mut named: Vec<u32> = host
        .inspect()
        .replica_snapshot()
        .iter()
        .filter_map(|(_, entry)| entry.record)
        .collect();
    named.sort_unstable();
    named
}

/// Hosts `a` and `b` at rest: nothing pending on either (after three rounds of settling),
/// no record locked, the records in use exactly those each replica's index names, and
/// the count of records in use right. `Err` names what is not, after `what`.
pub fn at_rest(a: &Host, b: &Host, what: &str) -> Result<(), String> {
    for _ in 0..3 {
        let _ = a.inspect().settle_pending();
        let _ = b.inspect().settle_pending();
    }
    for h in [a, b] {
        let p = h
            .inspect()
            .settle_pending()
            .map_err(|e| format!("{what}: settle {e}"))?;
        if p != 0 {
            return Err(format!("{what}: pending {p}"));
        }
    }
    let census = a.inspect().record_census();
    if !census.locked.is_empty() {
        return Err(format!("{what}: locked {:?}", census.locked));
    }
    for h in [a, b] {
        if named_records(h) != census.in_use {
            return Err(format!(
                "{what}: named {:?} vs in use {:?}",
                named_records(h),
                census.in_use
            ));
        }
    }
    if a.inspect().records_in_use().0 as usize != census.in_use.len() {
        return Err(format!(
            "{what}: count {} vs {}",
            a.inspect().records_in_use().0,
            census.in_use.len()
        ));
    }
    Ok(())
}

/// `a` creates `k` and `b` reads it (caching its lines); then, 19 times, `a` writes a new
/// version and `b`, then `a`, read it: a host that serves a stale line fails its round.
#[track_caller]
pub fn write_on_one_read_on_both(a: &Host, b: &Host) {
    a.create(b"k", &value(0)).unwrap();
    assert_eq!(read(b, b"k"), value(0));
    for round in 1..20u8 {
        a.write(b"k", &value(round)).unwrap();
        assert_eq!(read(b, b"k"), value(round), "round {round}");
        assert_eq!(read(a, b"k"), value(round));
    }
}

/// `b` reads `k` (caching its lines), `a` rewrites all of it, then `b` writes 8 bytes into
/// its first line: the rest of that line must be `a`'s bytes, not `b`'s stale cached ones,
/// as `a` reads them. Returns the object's bytes.
#[track_caller]
pub fn partial_write_over_stale_lines(a: &Host, b: &Host) -> Vec<u8> {
    read(b, b"k");
    a.write(b"k", &value(2)).unwrap();
    b.write_at(b"k", 0, &[0xee; 8]).unwrap();
    let mut expected = value(2);
    expected[..8].fill(0xee);
    assert_eq!(read(a, b"k"), expected);
    expected
}

/// The environment variable `var`, parsed, if it is set (how the long runs behind
/// `cargo xtask` take their settings). Panics naming the variable if it does not parse.
pub fn env_var<T: std::str::FromStr>(var: &str) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    let text = std::env::var(var).ok()?;
    let parsed = text.parse().unwrap_or_else(|e| panic!("{var}={text}: {e}"));
    Some(parsed)
}

#[cfg(feature = "chaos")]
/// Runs `operation` on a thread of its own, stopped the first time it reaches `point`:
/// it sends "stopped", and goes on when it hears "go".
pub fn stopped_at<R: Send + 'static>(
    point: megalon_core::chaos::Point,
    operation: impl FnOnce() -> R + Send + 'static,
) -> (
    std::sync::mpsc::Receiver<&'static str>,
    std::sync::mpsc::Sender<&'static str>,
    std::thread::JoinHandle<R>,
) {
    let (to_main, main_hears) = std::sync::mpsc::channel();
    let (to_thread, thread_hears) = std::sync::mpsc::channel::<&'static str>();
    let thread = std::thread::spawn(move || {
        let mut stopped = false;
        megalon_core::chaos::with_hook(
            move |at| {
                if at == point && !stopped {
                    stopped = true;
                    to_main.send("stopped").unwrap();
                    assert_eq!(thread_hears.recv().unwrap(), "go");
                }
            },
            operation,
        )
    });
    (main_hears, to_thread, thread)
}

/// A call paused at a chaos point by [`pauses_when`].
#[cfg(feature = "chaos")]
pub struct Paused<T> {
    pub resume: std::sync::mpsc::Sender<()>,
    pub outcome: std::sync::mpsc::Receiver<T>,
}

#[cfg(feature = "chaos")]
impl<T> Paused<T> {
    /// Lets the call go on, and returns its answer.
    pub fn resume(self) -> T {
        self.resume.send(()).unwrap();
        self.outcome.recv().unwrap()
    }

    /// Lets the call go on and waits for it to end: its answer, or `None` if it panicked.
    pub fn finish(self) -> Option<T> {
        let _ = self.resume.send(());
        self.outcome.recv().ok()
    }
}

/// `call` on a thread of its own, paused the first time it reaches `point` while `when`
/// holds, until resumed (the hook runs on that thread only).
#[cfg(feature = "chaos")]
pub fn pauses_when<T: Send + 'static>(
    point: megalon_core::chaos::Point,
    when: impl Fn() -> bool + Send + 'static,
    call: impl FnOnce() -> T + Send + 'static,
) -> Paused<T> {
    use std::sync::mpsc::channel;
    use std::sync::Mutex;
    let (paused, is_paused) = channel::<()>();
    let (resume, resumed) = channel::<()>();
    let (answered, outcome) = channel();
    std::thread::spawn(move || {
        let (paused, resumed) = (Mutex::new(paused), Mutex::new(resumed));
        let mut once = false;
        let answer = megalon_core::chaos::with_hook(
            move |at| {
                // `when` is asked only until the pause (it may act, as `pauses_at`'s does).
                if at == point && !once && when() {
                    once = true;
                    paused.lock().unwrap().send(()).unwrap();
                    resumed.lock().unwrap().recv().unwrap();
                }
            },
            call,
        );
        answered.send(answer).unwrap();
    });
    // Bounded: a call that never reaches the point (it answered first, or loops without
    // it) fails the test, naming the point, rather than hanging it.
    if is_paused
        .recv_timeout(std::time::Duration::from_secs(20))
        .is_err()
    {
        panic!("the call never paused at {point:?}");
    }
    Paused { resume, outcome }
}

/// Runs `body` with the `n`-th log append (from 0) of the calling thread failing with
/// `fault` (if it makes that many).
#[cfg(feature = "chaos")]
pub fn with_append_failing<T>(
    n: usize,
    fault: megalon_core::chaos::Fault,
    body: impl FnOnce() -> T,
) -> T {
    use megalon_core::chaos::{self, Fault, Point};
    let (mut reserved, mut published) = (0, 0);
    if n == 0 && fault == Fault::Refuse {
        chaos::fail_next_appends(&[fault]);
    }
    let answer = chaos::with_hook(
        move |point| {
            let arm = match (point, fault) {
                (Point::AppendAfterReserve, Fault::Unconfirmed) => {
                    reserved += 1;
                    reserved == n + 1
                }
                (Point::AppendAfterPublish, Fault::Refuse) => {
                    published += 1;
                    published == n
                }
                _ => false,
            };
            if arm {
                chaos::fail_next_appends(&[fault]);
            }
        },
        body,
    );
    chaos::clear_forced_faults();
    answer
}

/// What the panics tests cause on purpose say: [`quiet_on_purpose`] keeps the panic hook
/// quiet about them (and only them: a test's own failure is reported as usual).
#[allow(dead_code)]
pub const ON_PURPOSE: &str = "(on purpose)";

/// Silences the panics whose message says [`ON_PURPOSE`], and a poisoned replica's
/// answer to a call after such a panic, once per process.
#[allow(dead_code)]
pub fn quiet_on_purpose() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = (payload.downcast_ref::<&str>().copied())
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            if !message.contains(ON_PURPOSE) && !message.contains("half-changed by a panic") {
                default(info);
            }
        }));
    });
}

/// A pod of few slots, shared by 16 hosts: a claim gets one slot.
#[allow(dead_code)]
pub fn one_slot_claims_pod() -> Arc<Pod> {
    let config = config().lnr_bytes(96 << 10).max_hosts(16);
    let layout = megalon_core::Layout::new(&config).expect("layout");
    let batch = megalon_core::inspect::slot_claim_batch(layout.slot_count, 16);
    assert_eq!(batch, 1, "{layout:?}");
    assert!(layout.slot_count >= 32, "{}", layout.slot_count);
    heap_pod(&config)
}
