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
    let Some(path) = std::env::var_os(POD_ENV) else {
        return;
    };
    let pod = Arc::new(Pod::open(Backing::file(&path)).unwrap());
    let host = Host::join(&pod, Join::As(1), pumped()).unwrap();
    let (parent, child) = words(&pod);
    eprintln!("child: pid {} in its namespace", std::process::id());
    child.store(1, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(20);
    while parent.load(Ordering::Acquire) < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "child: recovered {} hosts",
        host.inspect().stats().hosts_recovered
    );
    drop(host);
}

/// Two live hosts of one machine, in two pid namespaces (two containers sharing a pod
/// file or a DAX device): the boot id is the same, so each takes the other for a host of
/// its own machine and judges it by a pid that names another process (or none) in its
/// own namespace. A live host must never be taken for dead.
#[test]
fn a_host_in_another_pid_namespace_is_not_taken_for_dead() {
    let unshare_works = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|status| status.success());
    if !unshare_works {
        eprintln!("skipped: unshare --pid is not allowed here");
        return;
    }
    let path = std::path::Path::new("/dev/shm")
        .join(format!("megalon-pid-namespace-{}.pod", std::process::id()));
    let _cleanup = tempfile::TempPath::try_from_path(&path).unwrap();
    let config = PodConfig::new().lnr_bytes(1 << 20).lease_ms(300);
    let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
    let host = Host::join(&pod, Join::As(0), pumped()).unwrap();
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_in_its_own_pid_namespace", "--nocapture"])
        .env(POD_ENV, &path)
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
    parent.store(1, Ordering::Release);
    let _ = child.wait();
    eprintln!("parent: pid {}, rows {rows:?}", std::process::id());
    assert_eq!(
        recovered, 0,
        "a live host of another pid namespace was recovered"
    );
    assert_eq!(rows.len(), 2, "both live hosts keep their rows: {rows:?}");
}
