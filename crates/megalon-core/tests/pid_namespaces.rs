//! Hosts of one kernel in two pid namespaces (two containers sharing a pod file): a pid
//! names a process only within its namespace, so each is judged by its lease, as a host
//! of another machine is. (Each took the other's pid for one of its own namespace: a live
//! host was declared dead at once, and recovered from under its writers.) Skipped where
//! `unshare --pid` is not allowed.

#![cfg(target_os = "linux")]

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::stops::{StopWatch, ATTEMPTS};
use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};

const POD_ENV: &str = "MEGALON_PID_NAMESPACE_POD";

fn pumped() -> HostOptions {
    HostOptions::new().pump_interval(Some(Duration::from_millis(1)))
}

/// Two words in the unused upper half of the reclaimer's line (as `common::process`).
fn words(pod: &Pod) -> (&std::sync::atomic::AtomicU64, &std::sync::atomic::AtomicU64) {
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

/// The child: joins the parent's pod as host 1 from its own pid namespace (a container
/// on the same kernel: same boot id), says so, and stays joined until the parent is done.
#[test]
fn child_in_its_own_pid_namespace() {
    joins_as_host_1_until_the_parent_is_done(POD_ENV);
}

/// A child's part: joins the pod file `env` names as host 1 (if the variable is set: a
/// child run), says so (its word 1), and stays joined until the parent is done. Its word
/// then says how long the child was seen stopped since it joined (1 + milliseconds): a
/// host stopped past its lease is dead by it, and the parent's look counts for nothing.
fn joins_as_host_1_until_the_parent_is_done(env: &str) {
    let Some(path) = std::env::var_os(env) else {
        return;
    };
    let watch = StopWatch::start();
    let joining = Instant::now();
    let pod = Arc::new(Pod::open(Backing::file(&path)).unwrap());
    let host = Host::join(&pod, Join::As(1), pumped()).unwrap();
    let (parent, child) = words(&pod);
    eprintln!("child: pid {} in its namespace", std::process::id());
    child.store(1, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(20);
    while parent.load(Ordering::Acquire) < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stopped = watch.stopped_between(joining, Instant::now());
    child.store(
        1 + u64::try_from(stopped.as_millis()).unwrap(),
        Ordering::Release,
    );
    eprintln!(
        "child: recovered {} hosts; stopped for {stopped:?}",
        host.inspect().stats().hosts_recovered
    );
    drop(host);
}

/// The parent's part: host 0 of a new pod file beside a child test `child_test` run under
/// `unshare` with `unshare_args` (`env` naming the pod file), for three leases once the
/// child joined. Returns how many hosts host 0 recovered and the table's rows, or `None`
/// if `unshare` with those arguments is not allowed here (skipped). Looked at over a run
/// neither process was stopped in (a host stopped past its 300 ms lease is dead by it, and
/// its row rightly recovered: run again, see `common::stops`); stopped in every attempt,
/// nothing is checked (`None` too).
fn host_beside_a_child_under_unshare(
    unshare_args: &[&str],
    child_test: &str,
    env: &str,
) -> Option<(u64, Vec<(u32, u32)>)> {
    let unshare_works = Command::new("unshare")
        .args(unshare_args)
        .arg("true")
        .status()
        .is_ok_and(|status| status.success());
    if !unshare_works {
        eprintln!("skipped: unshare {unshare_args:?} is not allowed here");
        return None;
    }
    let watch = StopWatch::start();
    for attempt in 1..=ATTEMPTS {
        let Run {
            recovered,
            rows,
            looked_over: (from, to),
            child_stopped,
        } = one_run_beside_a_child(unshare_args, child_test, env, attempt);
        let stopped = watch.stopped_between(from, to);
        if stopped.is_zero() && child_stopped.is_zero() {
            return Some((recovered, rows));
        }
        eprintln!(
            "attempt {attempt}: this process stopped for {stopped:?}, the child for \
             {child_stopped:?} of {:?}",
            to.saturating_duration_since(from)
        );
    }
    eprintln!("stopped in every attempt: nothing checked");
    None
}

/// What one run of [`host_beside_a_child_under_unshare`] saw.
struct Run {
    /// How many hosts host 0 recovered.
    recovered: u64,
    /// The table's rows: (host, pid).
    rows: Vec<(u32, u32)>,
    /// The span this process's host looked over: from its join to its look at the rows.
    looked_over: (Instant, Instant),
    /// How long the child was seen stopped, from its join to its end.
    child_stopped: Duration,
}

/// One run of [`host_beside_a_child_under_unshare`].
fn one_run_beside_a_child(unshare_args: &[&str], child_test: &str, env: &str, attempt: u32) -> Run {
    let path = std::path::Path::new("/dev/shm").join(format!(
        "megalon-{child_test}-{}-{attempt}.pod",
        std::process::id()
    ));
    let _cleanup = tempfile::TempPath::try_from_path(&path).unwrap();
    let config = PodConfig::new().lnr_bytes(1 << 20).lease_ms(300);
    let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
    let joining = Instant::now();
    let host = Host::join(&pod, Join::As(0), pumped()).unwrap();
    let mut child = Command::new("unshare")
        .args(unshare_args)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child_test, "--nocapture"])
        .env(env, &path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (parent, joined) = words(&pod);
    let deadline = Instant::now() + Duration::from_secs(20);
    while joined.load(Ordering::Acquire) < 1 {
        assert!(Instant::now() < deadline, "the child never joined");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Three leases: both pumps watch a few times per lease.
    std::thread::sleep(Duration::from_millis(900));
    let rows: Vec<_> = pod.hosts().iter().map(|row| (row.host, row.pid)).collect();
    let recovered = host.inspect().stats().hosts_recovered;
    let looked = Instant::now();
    parent.store(1, Ordering::Release);
    let _ = child.wait();
    let child_stopped = Duration::from_millis(joined.load(Ordering::Acquire).saturating_sub(1));
    eprintln!("parent: pid {}, rows {rows:?}", std::process::id());
    Run {
        recovered,
        rows,
        looked_over: (joining, looked),
        child_stopped,
    }
}

/// Two live hosts of one machine, in two pid namespaces (two containers sharing a pod
/// file or a DAX device): the boot id is the same, so each takes the other for a host of
/// its own machine and judges it by a pid that names another process (or none) in its
/// own namespace. A live host must never be taken for dead.
#[test]
fn a_host_in_another_pid_namespace_is_not_taken_for_dead() {
    let Some((recovered, rows)) = host_beside_a_child_under_unshare(
        &["--pid", "--fork", "--mount-proc"],
        "child_in_its_own_pid_namespace",
        POD_ENV,
    ) else {
        return;
    };
    assert_eq!(
        recovered, 0,
        "a live host of another pid namespace was recovered"
    );
    assert_eq!(rows.len(), 2, "both live hosts keep their rows: {rows:?}");
}

const NO_PROC_POD_ENV: &str = "MEGALON_PID_NAMESPACE_NO_PROC_POD";
const NO_PROC_PID_ENV: &str = "MEGALON_PID_NAMESPACE_NO_PROC_PID";

/// The child of `a_pid_namespace_without_its_own_proc_takes_no_live_host_for_dead`: runs
/// in a pid namespace of its own whose `/proc` is still the parent namespace's (`unshare
/// --pid --fork` without `--mount-proc`), as the pid the parent chose, joins two hosts and
/// lets their pumps watch each other for a few leases. Exits 0 if neither took the other
/// for dead.
#[test]
fn child_in_a_pid_namespace_without_its_own_proc() {
    let Some(path) = std::env::var_os(NO_PROC_POD_ENV) else {
        return;
    };
    let wanted: u32 = std::env::var(NO_PROC_PID_ENV).unwrap().parse().unwrap();
    eprintln!(
        "child: pid {} in its namespace (wanted {wanted}); /proc/self is {:?}",
        std::process::id(),
        std::fs::read_link("/proc/self").ok()
    );
    let pod = Arc::new(Pod::open(Backing::file(&path)).unwrap());
    let a = Host::join(&pod, Join::As(0), pumped()).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped()).unwrap();
    // Several leases (300 ms): both pumps watch a few times per lease.
    std::thread::sleep(Duration::from_millis(1200));
    let recovered = a.inspect().stats().hosts_recovered + b.inspect().stats().hosts_recovered;
    let write = a.create(b"key", b"value");
    eprintln!("child: recovered {recovered}, a's create: {write:?}");
    std::process::exit(if recovered == 0 && write.is_ok() {
        0
    } else {
        1
    });
}

/// Two live hosts of one process in a pid namespace whose `/proc` is the parent
/// namespace's (`unshare --pid --fork` without `--mount-proc`, a container that did not
/// mount its own): a pid of the namespace read in `/proc` names another process there
/// (here a zombie of the parent's namespace with the same number). A live host must never
/// be taken for dead by a host of its own process.
#[test]
fn a_pid_namespace_without_its_own_proc_takes_no_live_host_for_dead() {
    let unshare_works = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|status| status.success());
    if !unshare_works {
        eprintln!("skipped: unshare --pid is not allowed here");
        return;
    }
    let path = std::path::Path::new("/dev/shm").join(format!(
        "megalon-pid-namespace-no-proc-{}.pod",
        std::process::id()
    ));
    let _cleanup = tempfile::TempPath::try_from_path(&path).unwrap();
    let config = PodConfig::new().lnr_bytes(1 << 20).lease_ms(300);
    drop(Pod::create(&config, Backing::file(&path)).unwrap());
    // A process of this namespace that exits and is not reaped: a zombie, whose pid the
    // child takes in its own namespace.
    let mut zombie = Command::new("true").spawn().unwrap();
    let pid = zombie.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .starts_with('Z')
        {
            break;
        }
        assert!(Instant::now() < deadline, "no zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("unshare")
        .args(["--pid", "--fork", "sh", "-c"])
        .arg(format!(
            "echo {} > /proc/sys/kernel/ns_last_pid || exit 77; \"$@\"; status=$?; exit $status",
            pid - 1
        ))
        .arg("sh")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_in_a_pid_namespace_without_its_own_proc",
            "--nocapture",
        ])
        .env(NO_PROC_POD_ENV, &path)
        .env(NO_PROC_PID_ENV, pid.to_string())
        .stdin(Stdio::null())
        .status()
        .unwrap();
    let _ = zombie.wait();
    if status.code() == Some(77) {
        eprintln!("skipped: ns_last_pid is not writable here");
        return;
    }
    assert!(
        status.success(),
        "a live host was taken for dead by a host of its own process ({status})"
    );
}

const TIME_POD_ENV: &str = "MEGALON_TIME_NAMESPACE_POD";

/// The child of `a_host_in_another_time_namespace_is_not_taken_for_dead`: joins as host 1
/// from a time namespace of its own (same pid namespace), says so, and stays joined until
/// the parent is done.
#[test]
fn child_in_its_own_time_namespace() {
    joins_as_host_1_until_the_parent_is_done(TIME_POD_ENV);
}

/// Two live hosts of one machine and one pid namespace, one of them in a time namespace
/// of its own (`unshare --time --boottime`, as a container restored by CRIU runs): the
/// kernel shows a process's start time (`/proc/PID/stat`, in clock ticks after boot)
/// shifted by the reader's boot-time offset, so the start time each host noted of itself
/// is not the one the other reads. A live host must never be taken for dead.
#[test]
fn a_host_in_another_time_namespace_is_not_taken_for_dead() {
    let Some((recovered, rows)) = host_beside_a_child_under_unshare(
        &["--time", "--fork", "--boottime", "1000000"],
        "child_in_its_own_time_namespace",
        TIME_POD_ENV,
    ) else {
        return;
    };
    assert_eq!(
        recovered, 0,
        "a live host of another time namespace was recovered"
    );
    assert_eq!(rows.len(), 2, "both live hosts keep their rows: {rows:?}");
}
