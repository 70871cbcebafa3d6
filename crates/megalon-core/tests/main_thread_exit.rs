//! A host process whose main thread ends (`pthread_exit`) while its other threads go on
//! using the host: the process lives (`kill(pid, 0)` succeeds, its threads run), but the
//! kernel shows its thread-group leader as a zombie in `/proc/PID/stat`. A host of the
//! same machine must not take it for dead and recover it from under its writers.
//!
//! (A C program whose `main` calls `pthread_exit` is one.)
//! Its own `main` (`harness = false`): the test harness runs tests on threads of its own,
//! and only code on the main thread can end it. The binary re-runs itself as the child.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};

const POD_ENV: &str = "MEGALON_MAIN_THREAD_EXIT_POD";
const LEASE_MS: u32 = 300;
const BOUND: Duration = Duration::from_secs(20);

fn pumped() -> HostOptions {
    HostOptions::new().pump_interval(Some(Duration::from_millis(1)))
}

/// `(parent's word, child's word)` in the unused upper half of the reclaimer's line.
fn mailbox(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

/// The child: joins as host 1, ends its main thread, and writes `k` from another thread
/// for several leases. Its word: 1 joined, 2 every write succeeded, 3 a write failed.
fn child(path: &std::ffi::OsStr) {
    let pod = Arc::new(Pod::open(Backing::file(path)).unwrap());
    let host = Host::join(&pod, Join::As(1), pumped()).unwrap();
    std::thread::spawn(move || {
        let (_, word) = mailbox(host.pod());
        let start = Instant::now();
        let mut failed = None;
        while start.elapsed() < Duration::from_millis(u64::from(LEASE_MS) * 5) {
            if let Err(error) = host.write(b"k", &[7u8; 64]) {
                failed = Some(error);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("child: its writes ended with {failed:?}");
        word.store(if failed.is_some() { 3 } else { 2 }, Ordering::Release);
        // Until the parent has looked (once the process ends, its host is dead).
        let (parent, _) = mailbox(host.pod());
        let deadline = Instant::now() + BOUND;
        while parent.load(Ordering::Acquire) < 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Ends the process (the host stays joined: the parent only looks at its words).
        std::process::exit(0);
    });
    let (_, word) = mailbox(&pod);
    word.store(1, Ordering::Release);
    // SAFETY: the `exit` system call (not `exit_group`) ends the calling (main) thread
    // only, without unwinding (`pthread_exit` unwinds, and Rust's `main` catches that and
    // aborts); the other threads go on, and the one above ends the process.
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    unreachable!("the main thread ended");
}

fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn main() {
    if let Some(path) = std::env::var_os(POD_ENV) {
        child(&path);
        return;
    }
    // Ignore the harness's arguments (`--nocapture`, a filter) but a filter that is not
    // this test's name.
    if let Some(filter) = std::env::args().skip(1).find(|arg| !arg.starts_with('-')) {
        if !"a_process_whose_main_thread_ended_is_not_taken_for_dead".contains(&filter) {
            return;
        }
    }
    let path = std::path::Path::new("/dev/shm").join(format!(
        "megalon-main-thread-exit-{}.pod",
        std::process::id()
    ));
    let _cleanup = tempfile::TempPath::try_from_path(&path).unwrap();
    let config = PodConfig::new().lnr_bytes(1 << 20).lease_ms(LEASE_MS);
    let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
    let host = Host::join(&pod, Join::As(0), pumped()).unwrap();
    host.create(b"k", &[1u8; 64]).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(POD_ENV, &path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (_, word) = mailbox(&pod);
    let deadline = Instant::now() + BOUND;
    while word.load(Ordering::Acquire) < 1 {
        assert!(Instant::now() < deadline, "the child never joined");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut leader_zombie = false;
    while word.load(Ordering::Acquire) < 2 {
        leader_zombie |= state_of(child.id()) == Some('Z');
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the child never finished its writes");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let recovered = host.inspect().stats().hosts_recovered;
    let outcome = word.load(Ordering::Acquire);
    let (parent, _) = mailbox(&pod);
    parent.store(1, Ordering::Release);
    let _ = child.wait();
    println!(
        "test a_process_whose_main_thread_ended_is_not_taken_for_dead: leader seen as a \
         zombie: {leader_zombie}, hosts recovered: {recovered}, child's word: {outcome}"
    );
    assert!(
        recovered == 0 && outcome == 2,
        "a live process whose main thread ended was taken for dead: its host was \
         recovered ({recovered}) and its writes failed (word {outcome})"
    );
}
