//! Host processes killed (SIGKILL, by themselves, from a chaos hook) at an exact protocol
//! point, where no other test kills one: a recoverer in the middle of recovering another
//! dead host (at each step, then with or without a live host left), a drainer at each
//! step of a switch of the record width, a late joiner at each step of its join, and the
//! server of a late join at each step of its stream (the joiner served by the other). The parent
//! then recovers whoever is dead, by hand, and checks that nothing is left behind: every
//! row free, no record locked or leaked, no announce, the recovery word and its intent
//! clear, the object whole at its last complete value, writes going on, the dead ids
//! joining again, and the log's ring turning over. The test binary re-runs itself as each
//! child (the ignored test `kill_point_child`), with its role, its point and which hit of
//! the point it dies at in its environment.
//!
//! | scenario  | host 1 (a child)                              | host 2 (a child)                 |
//! |-----------|-----------------------------------------------|----------------------------------|
//! | recoverer | dies holding `k`'s lock (undo image ready, half its new bytes in memory) and a reservation | recovers host 1 by hand, dies at the point |
//! | rescue    | as above; then host 0 dies too, and a joiner of id 1 rescues the pod | as above |
//! | drainer   | switches the record width, dies at the point  | -                                |
//! | joiner    | joins late (its id's second life), dies at the point; host 0 serves it | -          |
//! | server    | serves host 3's late join (in the parent) from its pump; the one serving dies at the point | the same |
//! | mover     | moves `k` to its DRAM, writes it there, dies at the point (moving it here, or back: by itself or asked by host 0) | - |
//! | drainer, next life | as drainer; recovered, its switch left as it was, id 1 joins again and ends it | - |
//! | two       | moves `k` to its DRAM, dies moving it back for host 0 | recovers host 1 by hand, dies at the point |
//! | at once   | writes `k`, stops at a point of the write (`Mid`: its lock, undo image ready, half its new bytes in memory); maybe then reserves a position | writes `k2` or `k` (after host 1), stops at its point; maybe reserves: both are killed at once, and host 0 recovers both, by hand or by its pump (or dies too, and a joiner of id 1 rescues the pod); the two ids swapped |
//! | three     | stops at a point of its write of `k2` (or announcing a lock of `k` that host 3 took) | recovers host 3 (dead holding `k`'s lock) by hand, stops at the point: both are killed at once |
//!
//! Hosts killed at once (as two machines that lose power together) stop at their point
//! and wait there: the parent kills them together, once each stands at its point, so
//! that neither acts after the other is gone. Their objects must be whole at the last
//! complete write (a write stopped once its bytes were in memory and its undo image let
//! go is kept, any other is undone), at 2 bits (every lock of a record one word: a dead
//! host's stale announce or lost lock attempt names the other's lock) and 8.

#![cfg(all(target_os = "linux", feature = "chaos"))]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::with_cache;
use megalon_core::chaos::{self, Point};
use megalon_core::limits::HOLDS_PER_HOST;
use megalon_core::{Backing, CrashSafety, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};

const SLOT: usize = 256;
const LEASE_MS: u32 = 200;
/// How long a child's or the parent's wait on the other may take at most.
const BOUND: Duration = Duration::from_secs(15);

const POD_ENV: &str = "MEGALON_KP_POD";
const ROLE_ENV: &str = "MEGALON_KP_ROLE";
const POINT_ENV: &str = "MEGALON_KP_POINT";
const NTH_ENV: &str = "MEGALON_KP_NTH";
const BITS_ENV: &str = "MEGALON_KP_BITS";
const MEMORY_ENV: &str = "MEGALON_KP_MEMORY";
/// A pair's: its host id, the key it writes, the value's tag, and whether it reserves too.
const ID_ENV: &str = "MEGALON_KP_ID";
const KEY_ENV: &str = "MEGALON_KP_KEY";
const TAG_ENV: &str = "MEGALON_KP_TAG";
const RESERVE_ENV: &str = "MEGALON_KP_RESERVE";

fn config(bits: u32, switch: bool) -> PodConfig {
    common::config()
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
        .record_width_bits(bits)
        .record_width_switch(switch)
}

fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    HostOptions::new()
        .memory(with_cache(memory, 1024, 64).for_host(0x4_4000, host))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_secs(8))
}

fn value(tag: u8) -> Vec<u8> {
    (0..SLOT).map(|i| tag.wrapping_add(i as u8)).collect()
}

/// Word `i` of the mailbox: 0 the parent's, 1 host 1's, 2 host 2's (the unused upper
/// half of the reclaimer's line).
fn word(pod: &Pod, i: u64) -> &AtomicU64 {
    pod.scr_u64(pod.layout().reclaimer_offset + 32 + 8 * i)
}

fn wait_word(w: &AtomicU64, at_least: u64, what: &str) {
    let deadline = Instant::now() + BOUND;
    while w.load(Ordering::Acquire) < at_least {
        assert!(Instant::now() < deadline, "waited {BOUND:?} for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn row_free(pod: &Pod, host: u32) -> bool {
    pod.scr_u64(pod.layout().host_entry_offset(host))
        .load(Ordering::SeqCst) as u32
        == 0
}

/// Kills this process where it stands, once `nth` hits of `point` have been seen.
fn killer(pod: Arc<Pod>, me: u64, point: String, nth: u64) -> impl FnMut(Point) {
    let mut seen = 0;
    move |at| {
        if format!("{at:?}") == point {
            seen += 1;
            if seen == nth {
                word(&pod, me).store(100, Ordering::SeqCst);
                // SAFETY: a plain syscall on our own pid.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                loop {
                    std::thread::park();
                }
            }
        }
    }
}

/// Stops this thread where it stands, for good, once `nth` hits of `point` have been
/// seen, having stored `signal` in its word: the parent kills the process there.
fn parker(pod: Arc<Pod>, me: u64, point: String, nth: u64, signal: u64) -> impl FnMut(Point) {
    let mut seen = 0;
    move |at| {
        if format!("{at:?}") == point {
            seen += 1;
            if seen == nth {
                word(&pod, me).store(signal, Ordering::SeqCst);
                loop {
                    std::thread::park();
                }
            }
        }
    }
}

fn park_for_good() -> ! {
    loop {
        std::thread::park();
    }
}

/// Each child, by its role (absent: a normal test run, nothing to do).
#[test]
#[ignore = "a child of the tests here"]
fn kill_point_child() {
    let Some(path) = std::env::var_os(POD_ENV) else {
        return;
    };
    let role = std::env::var(ROLE_ENV).unwrap();
    let point = std::env::var(POINT_ENV).unwrap();
    let nth: u64 = std::env::var(NTH_ENV).unwrap().parse().unwrap();
    let memory: MemoryKind = std::env::var(MEMORY_ENV).unwrap().parse().unwrap();
    let pod = Arc::new(Pod::open(Backing::file(Path::new(&path))).unwrap());
    match role.as_str() {
        "holder" => {
            let host = Host::join(&pod, Join::As(1), options(&memory, 1)).unwrap();
            let (locked, is_locked) = std::sync::mpsc::channel();
            std::thread::scope(|s| {
                let host = &host;
                s.spawn(move || {
                    let ticket = host.write_start(b"k").unwrap();
                    ticket.write(0, &[0xee; SLOT / 2]).unwrap();
                    host.memory().write_back(ticket.offset(), SLOT);
                    host.memory().fence();
                    locked.send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                });
                is_locked.recv().unwrap();
                word(&pod, 1).store(1, Ordering::SeqCst);
                let created = chaos::with_hook(
                    killer(Arc::clone(&pod), 1, "AppendAfterReserve".into(), 1),
                    || host.create(b"n", &value(7)),
                );
                panic!("the holder's create answered {created:?}");
            });
        }
        "recoverer" => {
            let host = Host::join(&pod, Join::As(2), options(&memory, 2)).unwrap();
            word(&pod, 2).store(1, Ordering::SeqCst);
            wait_word(word(&pod, 0), 2, "the holder's death");
            chaos::with_hook(killer(Arc::clone(&pod), 2, point, nth), || {
                let deadline = Instant::now() + BOUND;
                while !row_free(&pod, 1) {
                    assert!(Instant::now() < deadline, "host 1 never recovered");
                    host.inspect().watch_hosts();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            // The point was not reached: say so, and leave.
            word(&pod, 2).store(50, Ordering::SeqCst);
        }
        "drainer" => {
            let host = Host::join(&pod, Join::As(1), options(&memory, 1)).unwrap();
            word(&pod, 1).store(1, Ordering::SeqCst);
            let bits: u32 = std::env::var(BITS_ENV).unwrap().parse().unwrap();
            let switched = chaos::with_hook(killer(Arc::clone(&pod), 1, point, nth), || {
                host.switch_record_width(bits)
            });
            word(&pod, 1).store(50, Ordering::SeqCst);
            switched.unwrap();
        }
        "joiner" => {
            let joined = chaos::with_hook(killer(Arc::clone(&pod), 1, point, nth), || {
                Host::join(&pod, Join::As(1), options(&memory, 1))
            });
            word(&pod, 1).store(50, Ordering::SeqCst);
            joined.unwrap().leave();
        }
        server if server.starts_with("server") => {
            // Host 1 or 2, serving late joins from its pump; the first of the two to reach
            // the point dies there (word 3 names it).
            let id: u32 = server["server".len()..].parse().unwrap();
            let seen = AtomicU64::new(0);
            let dies = {
                let pod = Arc::clone(&pod);
                move |at: Point| {
                    if format!("{at:?}") == point
                        && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth
                        && word(&pod, 3)
                            .compare_exchange(0, u64::from(id), Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        word(&pod, u64::from(id)).store(100, Ordering::SeqCst);
                        // SAFETY: a plain syscall on our own pid.
                        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                        loop {
                            std::thread::park();
                        }
                    }
                }
            };
            chaos::with_process_hook(dies, || {
                let pumped = options(&memory, id).pump_interval(Some(Duration::from_millis(1)));
                let host = Host::join(&pod, Join::As(id), pumped).unwrap();
                word(&pod, u64::from(id)).store(1, Ordering::SeqCst);
                wait_word(word(&pod, 0), 3, "the parent's word to leave");
                host.leave();
            });
            word(&pod, u64::from(id)).store(50, Ordering::SeqCst);
        }
        mover if mover.starts_with("mover") => {
            // Host 1 moves `k` to its DRAM (its second read), writes value 3 there, then
            // (`mover-own`) moves it back itself, or (`mover-rpc`) waits for the parent to
            // ask it back; it dies at the point (any thread: its pump serves the ring),
            // counted from the move on (`MoveHereAfterAppend`) or once `k` is here.
            let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            // `k`'s slot, once it is here.
            let slot = Arc::new(AtomicU64::new(0));
            let seen = AtomicU64::new(0);
            let dies = {
                let (pod, armed, slot) = (Arc::clone(&pod), Arc::clone(&armed), Arc::clone(&slot));
                move |at: Point| {
                    let name = format!("{at:?}");
                    if name == point
                        && (armed.load(Ordering::SeqCst) || name == "MoveHereAfterAppend")
                        && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth
                    {
                        if at == Point::MoveBackBeforeCopy {
                            // Half of the copy reached memory; then the host is gone.
                            let memory =
                                megalon_core::Memory::new(Arc::clone(&pod), MemoryKind::Hardware);
                            let offset = slot.load(Ordering::SeqCst);
                            memory.write(offset, &value(3)[..SLOT / 2]);
                            memory.write_back(offset, SLOT / 2);
                            memory.fence();
                        }
                        word(&pod, 1).store(100, Ordering::SeqCst);
                        // SAFETY: a plain syscall on our own pid.
                        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                        loop {
                            std::thread::park();
                        }
                    }
                }
            };
            chaos::with_process_hook(dies, || {
                let pumped = options(&memory, 1).pump_interval(Some(Duration::from_millis(1)));
                let host = Host::join(&pod, Join::As(1), pumped).unwrap();
                let mut buf = vec![0u8; SLOT];
                host.read(b"k", &mut buf).unwrap();
                host.read(b"k", &mut buf).unwrap();
                assert_eq!(host.inspect().local_objects().0, 1, "k moved here");
                let (_, entry) = host
                    .inspect()
                    .replica_snapshot()
                    .into_iter()
                    .find(|(key, _)| key == b"k")
                    .unwrap();
                slot.store(pod.layout().slot_offset(entry.slot), Ordering::SeqCst);
                host.write(b"k", &value(3)).unwrap();
                armed.store(true, Ordering::SeqCst);
                word(&pod, 1).store(1, Ordering::SeqCst);
                if mover == "mover-own" {
                    wait_word(word(&pod, 0), 1, "the parent's word to move k back");
                    let _ = host.read_start(b"k").unwrap();
                    word(&pod, 1).store(2, Ordering::SeqCst);
                }
                wait_word(word(&pod, 0), 3, "the parent's word to leave");
                host.leave();
            });
            word(&pod, 1).store(50, Ordering::SeqCst);
        }
        "pair" => {
            // Host `id` writes its key (value `tag`) and stops at the point, holding what
            // the write holds there (`Mid`: its lock, its undo image ready and half of its
            // new bytes in memory); then (`reserve`), told to, it creates `n<id>` and
            // stops with the create's position reserved. The parent kills it there.
            let id: u32 = std::env::var(ID_ENV).unwrap().parse().unwrap();
            let key = std::env::var(KEY_ENV).unwrap();
            let tag: u8 = std::env::var(TAG_ENV).unwrap().parse().unwrap();
            let reserve = std::env::var(RESERVE_ENV).unwrap() == "1";
            let me = u64::from(id);
            let host = Host::join(&pod, Join::As(id), options(&memory, id)).unwrap();
            std::thread::scope(|s| {
                let (host, pod) = (&host, &pod);
                s.spawn(move || {
                    if point == "Mid" {
                        let ticket = host.write_start(key.as_bytes()).unwrap();
                        ticket.write(0, &[0xee; SLOT / 2]).unwrap();
                        host.memory().write_back(ticket.offset(), SLOT);
                        host.memory().fence();
                        word(pod, me).store(2, Ordering::SeqCst);
                        park_for_good();
                    }
                    // `delete:<point>`: a delete of the key, `shared:<point>` a deallocation
                    // of its record, stopped at the point.
                    let (op, point) = match point.split_once(':') {
                        Some((op, point)) => (op.to_string(), point.to_string()),
                        None => ("write".to_string(), point),
                    };
                    let hook = parker(Arc::clone(pod), me, point, nth, 2);
                    let done = chaos::with_hook(hook, || match op.as_str() {
                        "delete" => host.delete(key.as_bytes()).map(drop),
                        "shared" => host.make_read_shared(key.as_bytes()).map(drop),
                        _ => host.write(key.as_bytes(), &value(tag)).map(drop),
                    });
                    panic!("host {id}'s write or delete answered {done:?}");
                });
                wait_word(word(pod, me), 2, "this host's write to stop");
                if reserve {
                    wait_word(word(pod, 0), 1, "the parent's word to reserve");
                    let hook = parker(Arc::clone(pod), me, "AppendAfterReserve".into(), 1, 3);
                    let created = chaos::with_hook(hook, || {
                        host.create(format!("n{id}").as_bytes(), &value(7))
                    });
                    panic!("host {id}'s create answered {created:?}");
                }
                park_for_good();
            })
        }
        "recoverer3" => {
            // Host 2 recovers host 3 by hand and stops at the point (50 in its word if
            // the recovery ended first). The parent kills it there.
            let host = Host::join(&pod, Join::As(2), options(&memory, 2)).unwrap();
            word(&pod, 2).store(1, Ordering::SeqCst);
            wait_word(word(&pod, 0), 2, "host 3's death");
            chaos::with_hook(parker(Arc::clone(&pod), 2, point, nth, 100), || {
                let deadline = Instant::now() + BOUND;
                while !row_free(&pod, 3) {
                    assert!(Instant::now() < deadline, "host 3 never recovered");
                    host.inspect().watch_hosts();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            word(&pod, 2).store(50, Ordering::SeqCst);
            park_for_good();
        }
        other => panic!("no role {other}"),
    }
}

fn spawn(path: &Path, memory: &MemoryKind, role: &str, point: &str, nth: u64, bits: u32) -> Child {
    spawn_with(path, memory, role, point, nth, bits, &[])
}

/// [`spawn`], with more of the child's environment.
fn spawn_with(
    path: &Path,
    memory: &MemoryKind,
    role: &str,
    point: &str,
    nth: u64,
    bits: u32,
    env: &[(&str, String)],
) -> Child {
    let child = Command::new(std::env::current_exe().unwrap())
        .envs(env.iter().map(|(name, value)| (name, value)))
        .args([
            "--exact",
            "kill_point_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(POD_ENV, path)
        .env(ROLE_ENV, role)
        .env(POINT_ENV, point)
        .env(NTH_ENV, nth.to_string())
        .env(BITS_ENV, bits.to_string())
        .env(MEMORY_ENV, memory.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Child(child)
}

/// A child process, killed and reaped on drop if still running.
struct Child(std::process::Child);

impl Child {
    /// Waits for its exit: whether it was killed (by a signal).
    fn wait_exit(&mut self) -> bool {
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                if status.code().is_some() && !status.success() {
                    let mut text = String::new();
                    use std::io::Read;
                    let _ = self.0.stdout.take().unwrap().read_to_string(&mut text);
                    let _ = self.0.stderr.take().unwrap().read_to_string(&mut text);
                    panic!("the child failed ({status}):\n{text}");
                }
                return status.code().is_none();
            }
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What must hold once every dead host is recovered: `host` alone in the table, nothing
/// locked, leaked or announced, `k` whole at `k_now`, writes and creates going on, the
/// dead ids joining again, and the ring turning over.
fn nothing_left(pod: &Arc<Pod>, host: &Host, memory: &MemoryKind, k_now: &[Vec<u8>], what: &str) {
    let layout = pod.layout();
    let me = host.id();
    for id in (0..4).filter(|&id| id != me) {
        assert!(row_free(pod, id), "{what}: row {id} held");
        for hold in 0..HOLDS_PER_HOST {
            let announce = pod
                .scr_u64(layout.announce_offset(id, hold))
                .load(Ordering::SeqCst);
            assert_eq!(announce, 0, "{what}: host {id}'s announce {hold} left");
        }
    }
    assert_eq!(
        pod.scr_u64(layout.recovery_offset()).load(Ordering::SeqCst),
        0,
        "{what}: the recovery word held"
    );
    assert_eq!(
        pod.scr_u64(layout.recovery_intent_offset())
            .load(Ordering::SeqCst),
        0,
        "{what}: a record under recovery left"
    );
    let census = host.inspect().record_census();
    assert!(
        census.locked.is_empty(),
        "{what}: locked {:?}",
        census.locked
    );
    let mut in_use = census.in_use.clone();
    in_use.sort_unstable();
    assert_eq!(
        in_use,
        common::named_records(host),
        "{what}: records in use and records named"
    );
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).unwrap();
    assert!(k_now.contains(&buf), "{what}: k reads {:?}..", &buf[..8]);
    host.write(b"k", &value(30)).unwrap();
    host.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(30), "{what}");
    host.create(b"m", &value(31)).unwrap();
    for id in (0..3).filter(|&id| id != me) {
        let again = Host::join(pod, Join::As(id), options(memory, id)).unwrap();
        again.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, value(30), "{what}: host {id}'s next life");
        again.write(b"m", &value(32 + id as u8)).unwrap();
        again.leave();
    }
    // The ring turns over (256 entries): nobody holds the head.
    for round in 0..150u32 {
        host.create(b"r", &value(round as u8)).unwrap();
        host.delete(b"r").unwrap();
    }
    let (head, ..) = host.inspect().log_cursors();
    assert!(head > 0, "{what}: the head never moved");
}

fn file_pod(config: &PodConfig, tag: &str) -> (Arc<Pod>, tempfile::TempPath) {
    let name = format!("megalon-kp-{tag}-{}.pod", std::process::id());
    let path = megalon_workload::processes::shared_memory_dir().join(name);
    let temp = tempfile::TempPath::try_from_path(&path).unwrap();
    let pod = Arc::new(Pod::create(config, Backing::file(&path)).unwrap());
    (pod, temp)
}

/// Host 1 dies holding `k`'s lock and a reservation; host 2, recovering it, dies at the
/// `nth` hit of `point`. Then host 0 recovers both (or, with `rescue`, dies too, and a
/// joiner of id 1 finds every host dead and rescues the pod). Returns whether it got
/// there.
fn recoverer_dies_at(memory: &MemoryKind, bits: u32, point: &str, nth: u64, rescue: bool) -> bool {
    let tag = format!("rec-{point}-{nth}-{bits}-{memory}-{rescue}");
    let (pod, temp) = file_pod(&config(bits, false), &tag);
    let path: &Path = &temp;
    let host = Host::join(&pod, Join::As(0), options(memory, 0)).unwrap();
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    let mut recoverer = spawn(path, memory, "recoverer", point, nth, bits);
    wait_word(word(&pod, 2), 1, "the recoverer's join");
    let mut holder = spawn(path, memory, "holder", "", 0, bits);
    wait_word(word(&pod, 1), 1, "the holder's lock");
    assert!(holder.wait_exit(), "the holder was not killed");
    assert_eq!(word(&pod, 1).load(Ordering::SeqCst), 100);
    word(&pod, 0).store(2, Ordering::SeqCst);
    let killed = recoverer.wait_exit();
    let reached = word(&pod, 2).load(Ordering::SeqCst) == 100;
    assert_eq!(killed, reached);
    let host = if rescue {
        rescue_as_1(&pod, host, memory, &tag)
    } else {
        host
    };
    let deadline = Instant::now() + BOUND;
    while !(0..3).all(|id| id == host.id() || row_free(&pod, id)) {
        assert!(
            Instant::now() < deadline,
            "{tag}: not recovered: rows {} {} {}, {:?}",
            row_free(&pod, 0),
            row_free(&pod, 1),
            row_free(&pod, 2),
            host.inspect().background_errors()
        );
        host.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = host.replay();
    nothing_left(&pod, &host, memory, &[value(2)], &tag);
    reached
}

const RECOVERY_POINTS: &[(&str, u64)] = &[
    ("RecoveryBeforeFill", 1),
    ("RecoveryBeforeFillWrite", 1),
    ("AppendAfterReserve", 1),
    ("AppendAfterPublish", 1),
    ("ReplayBeforeCtail", 1),
    ("RecoveryBeforeIntentCleared", 1),
    ("RecoveryBeforeIntent", 1),
    ("RecoveryAfterScan", 1),
    ("AppendAfterReserve", 2),
    ("AppendAfterPublish", 2),
    ("RecoveryAfterRestore", 1),
];

fn recoverers(memory: MemoryKind, bits: u32, rescue: bool) {
    let mut missed = Vec::new();
    for &(point, nth) in RECOVERY_POINTS {
        if !recoverer_dies_at(&memory, bits, point, nth, rescue) {
            missed.push((point, nth));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

#[test]
fn a_recoverer_killed_at_each_step_is_taken_over_32_bits() {
    recoverers(MemoryKind::Hardware, 32, false);
}

#[test]
fn a_recoverer_killed_at_each_step_then_every_host_dead_is_rescued() {
    recoverers(MemoryKind::Hardware, 2, true);
}

#[test]
fn a_recoverer_killed_at_each_step_is_taken_over_2_bits_simulated() {
    recoverers(MemoryKind::simulated(5), 2, false);
}

/// What [`a_drainer_run`] leaves.
struct Drained {
    pod: Arc<Pod>,
    temp: tempfile::TempPath,
    host: Host,
    /// Whether the drainer reached its point (and was killed there).
    reached: bool,
}

/// A pod file of 32-bit records that may switch, host 0 (in this process, no pump) with
/// `k` written (it has a record), and host 1 (a child) switching the width to 8 bits to
/// die at the `nth` hit of `point`; host 0 acknowledges the freeze until the child exits.
fn a_drainer_run(memory: &MemoryKind, point: &str, nth: u64, tag: &str) -> Drained {
    let (pod, temp) = file_pod(&config(32, true), tag);
    let host = Host::join(&pod, Join::As(0), options(memory, 0)).unwrap();
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    let mut drainer = spawn(&temp, memory, "drainer", point, nth, 8);
    wait_word(word(&pod, 1), 1, "the drainer's join");
    let deadline = Instant::now() + BOUND;
    while drainer.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{tag}: the drainer hangs");
        let _ = host.replay();
        std::thread::sleep(Duration::from_millis(1));
    }
    let reached = word(&pod, 1).load(Ordering::SeqCst) == 100;
    assert_eq!(drainer.wait_exit(), reached, "{tag}");
    Drained {
        pod,
        temp,
        host,
        reached,
    }
}

/// Host 1 switches the width to `bits` and dies at the `nth` hit of `point`, with `k`
/// written (it has a record). Returns whether it got there.
fn drainer_dies_at(memory: &MemoryKind, point: &str, nth: u64) -> bool {
    let tag = format!("drain-{point}-{nth}-{memory}");
    let Drained {
        pod,
        temp: _temp,
        host,
        reached,
    } = a_drainer_run(memory, point, nth, &tag);
    let deadline = Instant::now() + BOUND;
    while !row_free(&pod, 1) || host.inspect().width_drainer().is_some() {
        assert!(
            Instant::now() < deadline,
            "{tag}: not recovered: row free {}, drainer {:?}, {:?}",
            row_free(&pod, 1),
            host.inspect().width_drainer(),
            host.inspect().background_errors()
        );
        host.inspect().watch_hosts();
        let _ = host.replay();
        std::thread::sleep(Duration::from_millis(5));
    }
    // Writes go on at whichever width the switch ended at.
    host.write(b"k", &value(3)).unwrap();
    nothing_left(&pod, &host, memory, &[value(3)], &tag);
    let width = host.record_width().unwrap();
    // And the pod switches on.
    let to = if width.bits == 8 { 16 } else { 8 };
    assert!(host.switch_record_width(to).unwrap(), "{tag}");
    host.write(b"k", &value(40)).unwrap();
    let census = host.inspect().record_census();
    assert!(census.locked.is_empty());
    reached
}

const DRAIN_POINTS: &[(&str, u64)] = &[
    ("WidthAfterFreeze", 1),
    ("WidthAfterGates", 1),
    ("WidthBeforeEvent", 1),
    ("AppendAfterReserve", 1),
    ("AppendBeforeWrite", 1),
    ("AppendAfterPublish", 1),
    ("ReplayBeforeCtail", 1),
    ("WidthBeforeZeroing", 1),
    ("WidthBeforeReopen", 1),
];

fn drainers(memory: MemoryKind) {
    let mut missed = Vec::new();
    for &(point, nth) in DRAIN_POINTS {
        if !drainer_dies_at(&memory, point, nth) {
            missed.push((point, nth));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

#[test]
fn a_drainer_killed_at_each_step_is_taken_over() {
    drainers(MemoryKind::Hardware);
}

#[test]
fn a_drainer_killed_at_each_step_is_taken_over_simulated() {
    drainers(MemoryKind::simulated(9));
}

/// The late joins' pod: a small join area (a snapshot of a few hundred objects takes
/// several chunks).
fn join_config() -> PodConfig {
    let mut config = config(32, false);
    config.join_area_bytes = 1024;
    config
}

/// `host` creates `k` (written: it has a record) and 150 objects, then turns the ring
/// over: a host that joins now joins late.
fn objects_and_a_recycled_log(host: &Host) {
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    for i in 0..150u32 {
        host.create(format!("o{i}").as_bytes(), &value(i as u8))
            .unwrap();
    }
    for round in 0..150u32 {
        host.create(b"r", &value(round as u8)).unwrap();
        host.delete(b"r").unwrap();
    }
    assert!(host.inspect().log_cursors().0 > 0, "the log recycled");
}

fn reads_every_object(host: &Host, what: &str) {
    let mut buf = vec![0u8; SLOT];
    for i in 0..150u32 {
        host.read(format!("o{i}").as_bytes(), &mut buf).unwrap();
        assert_eq!(buf, value(i as u8), "{what}: o{i}");
    }
}

fn mailbox_clear(pod: &Pod) -> bool {
    let base = pod.layout().join_mailbox_offset();
    (0..2).all(|i| pod.scr_u64(base + 8 * i).load(Ordering::SeqCst) == 0)
}

/// Host 1 (its second life) joins late and dies at the `nth` hit of `point`; host 0
/// serves it and recovers it, and then id 1 joins again. Returns whether it got there.
fn joiner_dies_at(memory: &MemoryKind, point: &str, nth: u64) -> bool {
    let tag = format!("joiner-{point}-{nth}-{memory}");
    let (pod, temp) = file_pod(&join_config(), &tag);
    let path: &Path = &temp;
    let pumped = |id| options(memory, id).pump_interval(Some(Duration::from_millis(1)));
    let host = Host::join(&pod, Join::As(0), pumped(0)).unwrap();
    Host::join(&pod, Join::As(1), options(memory, 1))
        .unwrap()
        .leave();
    objects_and_a_recycled_log(&host);
    let mut joiner = spawn(path, memory, "joiner", point, nth, 32);
    let killed = joiner.wait_exit();
    let reached = word(&pod, 1).load(Ordering::SeqCst) == 100;
    assert_eq!(killed, reached, "{tag}");
    let deadline = Instant::now() + BOUND;
    while !row_free(&pod, 1) || !mailbox_clear(&pod) {
        assert!(
            Instant::now() < deadline,
            "{tag}: row 1 free {}, mailbox clear {}, {:?}",
            row_free(&pod, 1),
            mailbox_clear(&pod),
            host.inspect().background_errors()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let again = Host::join(&pod, Join::As(1), options(memory, 1)).unwrap();
    reads_every_object(&again, &tag);
    again.leave();
    nothing_left(&pod, &host, memory, &[value(2)], &tag);
    reached
}

const JOINER_POINTS: &[(&str, u64)] = &[
    ("JoinBetweenChunks", 1),
    ("JoinBetweenChunks", 4),
    ("JoinBeforeDecode", 1),
    ("AppendAfterReserve", 1),
    ("AppendAfterPublish", 1),
    ("ReplayBetweenEntries", 1),
    ("ReplayBeforeCtail", 1),
];

#[test]
fn a_late_joiner_killed_at_each_step_is_recovered_and_its_id_joins_again() {
    let memory = MemoryKind::Hardware;
    let mut missed = Vec::new();
    for &(point, nth) in JOINER_POINTS {
        if !joiner_dies_at(&memory, point, nth) {
            missed.push((point, nth));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

/// Kills child `pid` (SIGKILL) and waits until it is gone (a zombie, not reaped: its
/// `Child` reaps it).
fn kill_child(pid: u32) {
    // SAFETY: plain syscalls on a child of ours, not yet reaped (its pid is not reused).
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        );
    }
}

/// How long a late join whose server is killed may take, from its start to its end, at
/// most (the joiner's wait limit is twice that).
const JOIN_BOUND: Duration = Duration::from_secs(3);

/// Hosts 1 and 2 (children, with pumps) serve host 3's late join (in this process); the
/// one that serves it is killed at the `nth` hit of `point`: by this process at a point
/// of the joiner's, by itself at a point of the server's. The joiner must be served by the
/// other within [`JOIN_BOUND`] (as the id's next life if it must), the dead server
/// recovered, nothing left behind. Returns whether the point was reached.
fn server_dies_at(memory: &MemoryKind, point: &'static str, nth: u64, joiners: bool) -> bool {
    let tag = format!("server-{point}-{nth}-{memory}");
    let (pod, temp) = file_pod(&join_config(), &tag);
    let path: &Path = &temp;
    let host = Host::join(&pod, Join::As(0), options(memory, 0)).unwrap();
    let servers_point = if joiners { "" } else { point };
    let mut servers = [
        spawn(path, memory, "server1", servers_point, nth, 32),
        spawn(path, memory, "server2", servers_point, nth, 32),
    ];
    wait_word(word(&pod, 1), 1, "host 1's join");
    wait_word(word(&pod, 2), 1, "host 2's join");
    objects_and_a_recycled_log(&host);
    host.leave();
    let pids = [servers[0].0.id(), servers[1].0.id()];
    let hook = {
        let pod = Arc::clone(&pod);
        let mut seen = 0;
        move |at: Point| {
            if !joiners || format!("{at:?}") != point {
                return;
            }
            seen += 1;
            if seen == nth {
                let server = word_of_mailbox(&pod, 1);
                let id = (server & 0xffff) - 1;
                assert!(id == 1 || id == 2, "served by {server:#x}");
                word(&pod, 3).store(id, Ordering::SeqCst);
                word(&pod, id).store(100, Ordering::SeqCst);
                kill_child(pids[id as usize - 1]);
            }
        }
    };
    let started = Instant::now();
    let joined = chaos::with_hook(hook, || {
        let pumped = options(memory, 3).pump_interval(Some(Duration::from_millis(1)));
        Host::join(&pod, Join::As(3), pumped.wait_limit(2 * JOIN_BOUND))
    });
    let took = started.elapsed();
    let joiner = joined.unwrap_or_else(|error| panic!("{tag}: {error} after {took:?}"));
    eprintln!(
        "{tag}: joined in {took:?}, life {}",
        joiner.inspect().life()
    );
    assert!(took < JOIN_BOUND, "{tag}: the join took {took:?}");
    let dead = word(&pod, 3).load(Ordering::SeqCst);
    let reached = dead != 0;
    let deadline = Instant::now() + BOUND;
    while reached && (!row_free(&pod, dead as u32) || !mailbox_clear(&pod)) {
        assert!(
            Instant::now() < deadline,
            "{tag}: row {dead} free {}, mailbox clear {}",
            row_free(&pod, dead as u32),
            mailbox_clear(&pod),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    reads_every_object(&joiner, &tag);
    word(&pod, 0).store(3, Ordering::SeqCst);
    for (i, server) in servers.iter_mut().enumerate() {
        assert_eq!(
            server.wait_exit(),
            dead == i as u64 + 1,
            "{tag}: host {}",
            i + 1
        );
    }
    nothing_left(&pod, &joiner, memory, &[value(2)], &tag);
    reached
}

/// Word `i` of the join mailbox (0 `request`, 1 `server`, 2 `ready`).
fn word_of_mailbox(pod: &Pod, i: u64) -> u64 {
    pod.scr_u64(pod.layout().join_mailbox_offset() + 8 * i)
        .load(Ordering::SeqCst)
}

/// The points, whether each is the joiner's.
const SERVER_POINTS: &[(&str, u64, bool)] = &[
    ("JoinBetweenChunks", 1, true),
    ("JoinBetweenChunks", 3, true),
    ("JoinBeforeDecode", 1, true),
    ("ServeBeforePin", 1, false),
    ("ServeAfterPin", 1, false),
];

#[test]
fn a_server_killed_mid_stream_leaves_its_late_joiner_to_the_other() {
    let memory = MemoryKind::Hardware;
    let mut missed = Vec::new();
    for &(point, nth, joiners) in SERVER_POINTS {
        if !server_dies_at(&memory, point, nth, joiners) {
            missed.push((point, nth));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

/// The local partitions' pod: `k` moves to a host's DRAM at its second access in a row,
/// and the rings are short (a lap is soon over).
fn local_config() -> PodConfig {
    let mut config = config(32, false).local_partitions(2);
    config.rpc_ring_entries = 4;
    config
}

/// Host 1 (a child) moves `k` (value 2) to its DRAM, writes value 3 there, and dies at the
/// `nth` hit of `point`: on the move, or moving `k` back, by itself (`own`) or asked by
/// host 0 (this process, with a pump: it recovers host 1), whose read must end. `k` must
/// then read whole, one of `k_now`, alike on every host, and nothing be left. Returns
/// whether it got there.
fn mover_dies_at(memory: &MemoryKind, point: &str, nth: u64, own: bool, k_now: &[u8]) -> bool {
    let tag = format!("mover-{point}-{nth}-{own}-{memory}");
    let (pod, temp) = file_pod(&local_config(), &tag);
    let path: &Path = &temp;
    let pumped = options(memory, 0).pump_interval(Some(Duration::from_millis(1)));
    let host = Host::join(&pod, Join::As(0), pumped).unwrap();
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    let role = if own { "mover-own" } else { "mover-rpc" };
    let mut mover = spawn(path, memory, role, point, nth, 32);
    wait_word(word(&pod, 1), 1, "k in host 1's DRAM");
    let k_now: Vec<Vec<u8>> = k_now.iter().map(|&tag| value(tag)).collect();
    let mut buf = vec![0u8; SLOT];
    let mut asked = None;
    if word(&pod, 1).load(Ordering::SeqCst) == 1 {
        if own {
            word(&pod, 0).store(1, Ordering::SeqCst);
            let deadline = Instant::now() + BOUND;
            while word(&pod, 1).load(Ordering::SeqCst) == 1 {
                assert!(Instant::now() < deadline, "{tag}: the move back hangs");
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            // Asks host 1 to move `k` back, and must get an answer.
            let started = Instant::now();
            host.read(b"k", &mut buf)
                .unwrap_or_else(|error| panic!("{tag}: the read asking k back: {error}"));
            asked = Some(started.elapsed());
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{tag}: the asking read took {asked:?}"
            );
            assert!(
                k_now.contains(&buf),
                "{tag}: the asking read got {:?}..",
                &buf[..8]
            );
        }
    }
    let reached = word(&pod, 1).load(Ordering::SeqCst) == 100;
    if !reached {
        word(&pod, 0).store(3, Ordering::SeqCst);
    }
    assert_eq!(mover.wait_exit(), reached, "{tag}");
    eprintln!(
        "{tag}: reached {reached}, the asking read took {asked:?}, read {}",
        buf[0]
    );
    let deadline = Instant::now() + BOUND;
    while !row_free(&pod, 1) {
        assert!(Instant::now() < deadline, "{tag}: host 1 not recovered");
        std::thread::sleep(Duration::from_millis(5));
    }
    host.read(b"k", &mut buf).unwrap();
    assert!(k_now.contains(&buf), "{tag}: k reads {:?}..", &buf[..8]);
    if asked.is_some() {
        assert_eq!(buf, value(buf[0]), "{tag}");
    }
    ping_pong(&pod, &host, memory, 1, buf, &tag);
    reached
}

/// Host `id`'s next life (in this process) reads `k` as `seen`, then it and `host` move
/// `k` to their DRAM and ask each other for it, more than a lap of both rings: every
/// entry a dead host left in them is free. Then nothing is left.
fn ping_pong(pod: &Arc<Pod>, host: &Host, memory: &MemoryKind, id: u32, seen: Vec<u8>, tag: &str) {
    let mut buf = vec![0u8; SLOT];
    let again = Host::join(pod, Join::As(id), pumped_options(memory, id)).unwrap();
    for round in 0..6 {
        again.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, seen, "{tag}: round {round}");
        again.read(b"k", &mut buf).unwrap();
        host.read(b"k", &mut buf).unwrap();
        assert_eq!(buf, seen, "{tag}: round {round}, asked back");
        host.read(b"k", &mut buf).unwrap();
    }
    again.leave();
    let _ = host.replay();
    nothing_left(pod, host, memory, &[seen], tag);
}

fn pumped_options(memory: &MemoryKind, id: u32) -> HostOptions {
    options(memory, id).pump_interval(Some(Duration::from_millis(1)))
}

/// Crashes `host` (the last live one) and joins id 1 again, with a pump, until the join
/// rescues the pod; returns the new host.
fn rescue_as_1(pod: &Arc<Pod>, host: Host, memory: &MemoryKind, tag: &str) -> Host {
    megalon_core::inspect::crash(host);
    let deadline = Instant::now() + BOUND;
    loop {
        match Host::join(pod, Join::As(1), pumped_options(memory, 1)) {
            Ok(host) => break host,
            Err(error) => {
                assert!(Instant::now() < deadline, "{tag}: no rescue: {error}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The points, whether host 1 moves `k` back itself, and the values `k` may read after.
const MOVER_POINTS: &[(&str, u64, bool, &[u8])] = &[
    ("MoveHereAfterAppend", 1, true, &[2]),
    ("MoveBackBeforeCopy", 1, true, &[2]),
    ("AppendAfterReserve", 1, true, &[2, 3]),
    ("AppendAfterPublish", 1, true, &[3]),
    ("MoveBackBeforeCopy", 1, false, &[2]),
    ("AppendAfterReserve", 1, false, &[2, 3]),
    ("AppendAfterPublish", 1, false, &[3]),
];

#[test]
fn a_host_killed_moving_an_object_to_or_from_its_dram_leaves_it_whole() {
    let memory = MemoryKind::Hardware;
    let mut missed = Vec::new();
    for &(point, nth, own, k_now) in MOVER_POINTS {
        if !mover_dies_at(&memory, point, nth, own, k_now) {
            missed.push((point, nth, own));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

/// Host 1 (a child) holds `k` in its DRAM at value 3 and dies moving it back for host 0
/// (this process, no pump), which waits for it, half of the copy in the slot; host 2 (a
/// child) recovering host 1 dies at the `nth` hit of `point`. Host 0 then recovers both:
/// its read ends with `k` whole at value 2. Returns whether it got there.
fn mover_and_recoverer_die(memory: &MemoryKind, point: &str, nth: u64) -> bool {
    let tag = format!("two-{point}-{nth}-{memory}");
    let (pod, temp) = file_pod(&local_config(), &tag);
    let path: &Path = &temp;
    let host = Host::join(&pod, Join::As(0), options(memory, 0)).unwrap();
    host.create(b"k", &value(1)).unwrap();
    host.write(b"k", &value(2)).unwrap();
    let mut recoverer = spawn(path, memory, "recoverer", point, nth, 32);
    wait_word(word(&pod, 2), 1, "the recoverer's join");
    let mut mover = spawn(path, memory, "mover-rpc", "MoveBackBeforeCopy", 1, 32);
    wait_word(word(&pod, 1), 1, "k in host 1's DRAM");
    let reached = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut buf = vec![0u8; SLOT];
            let started = Instant::now();
            host.read(b"k", &mut buf).map(|_| (buf, started.elapsed()))
        });
        wait_word(word(&pod, 1), 100, "host 1's death");
        assert!(mover.wait_exit(), "{tag}: host 1 was not killed");
        word(&pod, 0).store(2, Ordering::SeqCst);
        let killed = recoverer.wait_exit();
        let reached = word(&pod, 2).load(Ordering::SeqCst) == 100;
        assert_eq!(killed, reached, "{tag}");
        let deadline = Instant::now() + BOUND;
        while !(row_free(&pod, 1) && row_free(&pod, 2)) {
            assert!(Instant::now() < deadline, "{tag}: not recovered");
            host.inspect().watch_hosts();
            std::thread::sleep(Duration::from_millis(5));
        }
        let (buf, took) = reader
            .join()
            .unwrap()
            .unwrap_or_else(|error| panic!("{tag}: the read asking k back: {error}"));
        eprintln!("{tag}: reached {reached}, the asking read took {took:?}");
        assert_eq!(buf, value(2), "{tag}: the asking read");
        assert!(
            took < Duration::from_secs(3),
            "{tag}: the asking read took {took:?}"
        );
        reached
    });
    let mut buf = vec![0u8; SLOT];
    host.read(b"k", &mut buf).unwrap();
    assert_eq!(buf, value(2), "{tag}");
    // With a pump now (its ring is served while it waits on another's).
    host.leave();
    let host = Host::join(&pod, Join::As(0), pumped_options(memory, 0)).unwrap();
    ping_pong(&pod, &host, memory, 1, value(2), &tag);
    reached
}

#[test]
fn a_recoverer_killed_recovering_a_host_killed_moving_an_object_back_is_taken_over() {
    let memory = MemoryKind::Hardware;
    let mut missed = Vec::new();
    for (point, nth) in [("RecoveryBeforeSlotImage", 1), ("RecoveryInRpcs", 1)] {
        if !mover_and_recoverer_die(&memory, point, nth) {
            missed.push(point);
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

/// Host 1 switches the width to 8 bits and dies at the `nth` hit of `point`; host 0
/// recovers it (its row freed) without taking the switch over, and id 1 joins again at
/// once, the switch still the dead life's: the new life takes it over. Returns whether it
/// got there.
fn drainers_next_life_at(memory: &MemoryKind, point: &str, nth: u64) -> bool {
    let tag = format!("drain-next-{point}-{nth}-{memory}");
    let Drained {
        pod,
        temp: _temp,
        host,
        reached,
    } = a_drainer_run(memory, point, nth, &tag);
    let deadline = Instant::now() + BOUND;
    while !row_free(&pod, 1) {
        assert!(Instant::now() < deadline, "{tag}: host 1 not recovered");
        host.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        host.inspect().width_drainer(),
        Some(1),
        "{tag}: the switch is still the dead life's"
    );
    // Host 0 stands still meanwhile: the new life ends the switch by itself.
    let again = Host::join(&pod, Join::As(1), options(memory, 1));
    let again = again.unwrap_or_else(|error| panic!("{tag}: the next life: {error}"));
    assert_eq!(
        host.inspect().width_drainer(),
        None,
        "{tag}: the switch left"
    );
    again.write(b"k", &value(3)).unwrap();
    again.leave();
    let _ = host.replay();
    host.write(b"k", &value(4)).unwrap();
    nothing_left(&pod, &host, memory, &[value(4)], &tag);
    reached
}

#[test]
fn a_drainers_next_life_joining_before_its_switch_is_taken_over_ends_it() {
    let memory = MemoryKind::Hardware;
    let mut missed = Vec::new();
    for &(point, nth) in &DRAIN_POINTS[..4] {
        if !drainers_next_life_at(&memory, point, nth) {
            missed.push((point, nth));
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

/// Where one of two hosts killed at once stops: the key it writes and the point.
#[derive(Clone, Copy, Debug)]
struct Stop {
    key: &'static str,
    point: &'static str,
}

const fn stop(key: &'static str, point: &'static str) -> Stop {
    Stop { key, point }
}

/// Points of a write at which the new value is whole in memory and kept by recovery
/// (the undo image let go); at the others (and `Mid`) recovery gives the old one back.
const DONE_POINTS: &[&str] = &["WriteBeforeUnlock", "UnlockAfterCheck", "WriteAfterUnlock"];

/// Starts host `id` (a child) writing `stop.key` to value `tag`, and waits until it stands
/// at `stop.point`.
fn a_pair_stops(
    path: &Path,
    memory: &MemoryKind,
    bits: u32,
    id: u32,
    tag: u8,
    stop: Stop,
    reserve: bool,
) -> Child {
    let env = [
        (ID_ENV, id.to_string()),
        (KEY_ENV, stop.key.to_string()),
        (TAG_ENV, tag.to_string()),
        (RESERVE_ENV, u8::from(reserve).to_string()),
    ];
    let child = spawn_with(path, memory, "pair", stop.point, 1, bits, &env);
    let pod = Pod::open(Backing::file(path)).unwrap();
    wait_word(word(&pod, u64::from(id)), 2, "a pair's write to stop");
    child
}

/// Kills every child in `children` at once: each stands at its point, and none acts
/// again before the last is gone.
fn kill_at_once(children: &mut [&mut Child]) {
    for child in children.iter() {
        // SAFETY: a plain syscall on a child of ours, not yet reaped.
        unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGKILL) };
    }
    for child in children.iter_mut() {
        assert!(child.wait_exit(), "a child was not killed");
    }
}

/// Waits until every row but `host`'s is free: by `host`'s watch by hand, or (`pump`) by
/// its pump's.
fn recovered(pod: &Pod, host: &Host, pump: bool, tag: &str) {
    let deadline = Instant::now() + BOUND;
    while !(0..4).all(|id| id == host.id() || row_free(pod, id)) {
        assert!(
            Instant::now() < deadline,
            "{tag}: not recovered: rows {:?}, {:?}",
            (0..4).map(|id| row_free(pod, id)).collect::<Vec<_>>(),
            host.inspect().background_errors()
        );
        if !pump {
            host.inspect().watch_hosts();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = host.replay();
}

/// Who recovers two hosts killed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    /// Host 0, its watch called by hand.
    Hand,
    /// Host 0's pump.
    Pump,
    /// Host 0 dies too (every host of the pod dead), and a joiner of id 1 rescues the
    /// pod.
    Rescue,
}

/// Hosts 1 and 2 (children) each write a key (value 3, then value 4) and stop at their
/// point, host 1 first (host 2, if `swapped`) (on the same key: host 2's write follows host 1's); with
/// `reserve`, each then creates `n<id>` and stops with its position reserved. Both are
/// killed at once, and host 0 (this process) recovers both, by hand or by its pump (or
/// dies too, and a joiner rescues the pod): each
/// key is whole at its last complete value, no create of theirs is there, and nothing is
/// left.
fn two_die_at(
    memory: &MemoryKind,
    config: &PodConfig,
    stops: [Stop; 2],
    reserve: bool,
    by: By,
    swapped: bool,
) {
    let bits = config.record_width_bits;
    let tag = format!(
        "two-{}-{}-{}-{}-{bits}-{memory}-{}-{reserve}-{by:?}-{swapped}",
        stops[0].key,
        stops[0].point,
        stops[1].key,
        stops[1].point,
        config.crash_safety.name()
    );
    let (pod, temp) = file_pod(config, &tag);
    let path: &Path = &temp;
    let host = if by == By::Pump {
        Host::join(&pod, Join::As(0), pumped_options(memory, 0)).unwrap()
    } else {
        Host::join(&pod, Join::As(0), options(memory, 0)).unwrap()
    };
    let mut expected: Vec<(&str, u8)> = Vec::new();
    for key in ["k", "k2"] {
        host.create(key.as_bytes(), &value(1)).unwrap();
        host.write(key.as_bytes(), &value(2)).unwrap();
        expected.push((key, 2));
    }
    // Without a record: a write claims one.
    host.create(b"f", &value(1)).unwrap();
    expected.push(("f", 1));
    let mut children = Vec::new();
    for (i, stop) in stops.into_iter().enumerate() {
        // Host 2 first, if `swapped`: recovery goes by id, so each of the two is
        // recovered first in one of the orders.
        let id = if swapped { 2 - i as u32 } else { i as u32 + 1 };
        let new = i as u8 + 3;
        children.push(a_pair_stops(path, memory, bits, id, new, stop, reserve));
        if DONE_POINTS.contains(&stop.point) {
            expected
                .iter_mut()
                .find(|(key, _)| *key == stop.key)
                .unwrap()
                .1 = new;
        }
    }
    if reserve {
        word(&pod, 0).store(1, Ordering::SeqCst);
        wait_word(word(&pod, 1), 3, "host 1's reservation");
        wait_word(word(&pod, 2), 3, "host 2's reservation");
    }
    let [one, two] = &mut children[..] else {
        unreachable!()
    };
    kill_at_once(&mut [one, two]);
    let host = if by == By::Rescue {
        rescue_as_1(&pod, host, memory, &tag)
    } else {
        host
    };
    recovered(&pod, &host, by != By::Hand, &tag);
    let mut buf = vec![0u8; SLOT];
    for &(key, now) in &expected {
        host.read(key.as_bytes(), &mut buf).unwrap();
        assert!(buf == value(now), "{tag}: {key} reads {:?}..", &buf[..8]);
        host.write(key.as_bytes(), &value(20)).unwrap();
        host.read(key.as_bytes(), &mut buf).unwrap();
        assert!(buf == value(20), "{tag}: {key} written");
        host.write(key.as_bytes(), &value(now)).unwrap();
    }
    for n in ["n1", "n2"] {
        let read = host.read(n.as_bytes(), &mut buf);
        assert!(read.is_err(), "{tag}: {n}, never published, reads {read:?}");
    }
    eprintln!("{tag}: {:?}", host.inspect().stats());
    let k_now = expected[0].1;
    nothing_left(&pod, &host, memory, &[value(k_now)], &tag);
}

/// Pairs of stops: on two objects, and on the same one in sequence (host 2's write comes
/// after host 1's lock or unlock, at 2 bits from the very word host 1 announced).
const PAIRS: &[[Stop; 2]] = &[
    [stop("k", "Mid"), stop("k2", "Mid")],
    [stop("k", "WriteAfterLock"), stop("k2", "WriteBeforeUnlock")],
    [stop("k", "WriteAfterUnlock"), stop("k", "Mid")],
    [stop("k", "WriteAfterUnlock"), stop("k", "WriteAfterLock")],
    [stop("k", "WriteBeforeLock"), stop("k", "Mid")],
    [stop("k", "WriteBeforeLock"), stop("k", "UnlockAfterCheck")],
    [
        stop("k", "WriteAfterUnlock"),
        stop("k", "delete:ReleaseAfterLock"),
    ],
    [stop("k", "delete:ReleaseAfterLock"), stop("k2", "Mid")],
    [stop("f", "AllocAfterClaim"), stop("f", "AllocAfterClaim")],
    [stop("f", "ClaimAfterCas"), stop("f", "WriteAfterLock")],
    [stop("f", "AllocAfterClaim"), stop("f", "Mid")],
    [stop("k", "shared:ReleaseBeforeFree"), stop("k", "Mid")],
    [stop("k", "shared:ReleaseAfterLock"), stop("k2", "Mid")],
    [
        stop("k", "WriteAfterUnlock"),
        stop("k", "shared:ReleaseBeforeFree"),
    ],
    [
        stop("k", "shared:AppendAfterPublish"),
        stop("k", "WriteBeforeUnlock"),
    ],
];

#[test]
fn two_hosts_killed_at_once_holding_locks_are_recovered_by_hand() {
    for bits in [2, 8] {
        for &stops in PAIRS {
            for swapped in [false, true] {
                let config = config(bits, false);
                two_die_at(
                    &MemoryKind::Hardware,
                    &config,
                    stops,
                    false,
                    By::Hand,
                    swapped,
                );
            }
        }
    }
}

#[test]
fn two_hosts_killed_at_once_holding_locks_and_reservations_are_recovered_by_the_pump() {
    for bits in [2, 8] {
        for &stops in PAIRS {
            // A host stopped inside an append holds its appends: it reserves nothing more.
            let reserve = !stops.iter().any(|stop| stop.point.contains("Append"));
            two_die_at(
                &MemoryKind::Hardware,
                &config(bits, false),
                stops,
                reserve,
                By::Pump,
                bits == 8,
            );
        }
    }
}

#[test]
fn two_hosts_killed_at_once_in_a_pod_of_the_default_crash_safety_simulated() {
    // `CrashSafety::Auto`: undo images, as for every pod of a file.
    let config = common::config().lease_ms(LEASE_MS).record_width_bits(2);
    for (stops, reserve) in [(PAIRS[0], true), (PAIRS[2], false), (PAIRS[4], true)] {
        two_die_at(
            &MemoryKind::simulated(5),
            &config,
            stops,
            reserve,
            By::Hand,
            false,
        );
    }
}

/// Host 3 (a child) dies holding `k`'s lock (`Mid`), host 1 (a child) stands at `held`,
/// and host 2 (a child), recovering host 3 by hand, stops at the `nth` hit of `point`;
/// hosts 1 and 2 are killed at once, and host 0 (this process) recovers all three by
/// hand. Returns whether host 2 got to its point.
fn one_dies_holding_the_other_recovering(
    memory: &MemoryKind,
    bits: u32,
    held: Stop,
    point: &str,
    nth: u64,
) -> bool {
    let tag = format!(
        "three-{}-{}-{point}-{nth}-{bits}-{memory}",
        held.key, held.point
    );
    let (pod, temp) = file_pod(&config(bits, false), &tag);
    let path: &Path = &temp;
    let host = Host::join(&pod, Join::As(0), options(memory, 0)).unwrap();
    for key in ["k", "k2"] {
        host.create(key.as_bytes(), &value(1)).unwrap();
        host.write(key.as_bytes(), &value(2)).unwrap();
    }
    let mut recoverer = spawn(path, memory, "recoverer3", point, nth, bits);
    wait_word(word(&pod, 2), 1, "the recoverer's join");
    let mut one = a_pair_stops(path, memory, bits, 1, 3, held, false);
    let three = stop("k", "Mid");
    let mut third = a_pair_stops(path, memory, bits, 3, 5, three, false);
    kill_at_once(&mut [&mut third]);
    word(&pod, 0).store(2, Ordering::SeqCst);
    wait_word(word(&pod, 2), 50, "the recoverer to stop");
    let reached = word(&pod, 2).load(Ordering::SeqCst) == 100;
    kill_at_once(&mut [&mut one, &mut recoverer]);
    recovered(&pod, &host, false, &tag);
    let mut buf = vec![0u8; SLOT];
    let k2_now = if held.key == "k2" && DONE_POINTS.contains(&held.point) {
        3
    } else {
        2
    };
    host.read(b"k2", &mut buf).unwrap();
    assert!(buf == value(k2_now), "{tag}: k2 reads {:?}..", &buf[..8]);
    host.write(b"k2", &value(20)).unwrap();
    eprintln!("{tag}: reached {reached}, {:?}", host.inspect().stats());
    nothing_left(&pod, &host, memory, &[value(2)], &tag);
    reached
}

/// The recoverer's points, and where host 1 stands: at its own lock of `k2`, or
/// announcing a lock of `k` that host 3 took first (the recoverer waits for it).
const THREE_POINTS: &[(Stop, &str, u64)] = &[
    (stop("k2", "Mid"), "RecoveryBeforeIntent", 1),
    (stop("k2", "Mid"), "RecoveryAfterScan", 1),
    (stop("k2", "Mid"), "AppendAfterReserve", 2),
    (stop("k2", "WriteAfterUnlock"), "RecoveryAfterRestore", 1),
    (stop("k", "WriteBeforeLock"), "RecoveryFoundLiveAnnounce", 1),
];

#[test]
fn a_host_holding_a_lock_and_a_recoverer_killed_at_once_are_recovered() {
    let mut missed = Vec::new();
    for bits in [2, 8] {
        for &(stop, point, nth) in THREE_POINTS {
            if !one_dies_holding_the_other_recovering(&MemoryKind::Hardware, bits, stop, point, nth)
            {
                missed.push((bits, point, nth));
            }
        }
    }
    assert!(missed.is_empty(), "points never reached: {missed:?}");
}

#[test]
fn two_hosts_killed_at_once_holding_locks_then_every_host_dead_are_rescued() {
    for bits in [2, 8] {
        for stops in [PAIRS[0], PAIRS[2], PAIRS[4]] {
            two_die_at(
                &MemoryKind::Hardware,
                &config(bits, false),
                stops,
                true,
                By::Rescue,
                false,
            );
        }
    }
}
