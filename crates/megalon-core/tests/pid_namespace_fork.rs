//! A host table row names its holder's machine with a hash (`host_table::this_machine`)
//! of the boot id *and the process's pid and time namespaces*. It was computed once per
//! process, and a child made by `fork` kept the parent's, even when the parent had moved
//! its children into a new pid namespace (`unshare(CLONE_NEWPID)`, then `fork`: what a
//! supervisor that sandboxes its workers without `exec` does). The child's row then
//! claimed the parent's "machine", and each side judged the other's row by the process
//! its pid names in its *own* namespace: the child's host found no process of the parent
//! host's pid and recovered the parent's live host at once. The hash is now computed
//! again in a forked child. The same child run by `exec` (`pid_namespaces.rs`) always had
//! its own hash, and is judged by its lease.
//!
//! Linux only, run as root (or where `unshare --pid --mount` is allowed); skipped
//! otherwise. One test in this file: a fork of a process with other tests' threads
//! running would copy their locks.

#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};

fn pumped() -> HostOptions {
    HostOptions::new().pump_interval(Some(Duration::from_millis(1)))
}

/// Two words in the unused upper half of the reclaimer's line (as `common::process`).
fn words(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

/// The grandchild: pid 1 of a new pid namespace, with a `/proc` of its own (as `unshare
/// --pid --fork --mount-proc`), made by `fork` alone. Joins host 1 and stays until the
/// parent is done. Never returns.
fn grandchild(path: &std::path::Path) -> ! {
    let code = std::panic::catch_unwind(|| {
        let proc_ = CString::new("proc").unwrap();
        let target = CString::new("/proc").unwrap();
        // SAFETY: mount(2) with NUL-terminated strings, in a private mount namespace.
        let mounted = unsafe {
            libc::mount(
                proc_.as_ptr(),
                target.as_ptr(),
                proc_.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if mounted != 0 {
            return 10;
        }
        let pod = Arc::new(Pod::open(Backing::file(path)).unwrap());
        let host = Host::join(&pod, Join::As(1), pumped()).unwrap();
        let (parent, child) = words(&pod);
        child.store(1, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(20);
        while parent.load(Ordering::Acquire) < 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let dead = host.create(b"child", &[1; 8]).is_err();
        std::mem::forget(host);
        if dead {
            11
        } else {
            0
        }
    })
    .unwrap_or(12);
    // SAFETY: ends this process at once.
    unsafe { libc::_exit(code) }
}

/// Two live hosts, one in a child forked into its own pid namespace (with its own
/// `/proc`): neither may take the other for dead. The child's host does: the child kept
/// the parent's machine hash, so the parent's row looks like one of its own machine, and
/// the parent's pid names no process of the child's namespace: host 0 is recovered (its
/// row freed, its writes answer `HostDeclaredDead`) while it lives.
#[test]
fn a_host_forked_into_its_own_pid_namespace_is_not_taken_for_dead() {
    let path = std::path::Path::new("/dev/shm")
        .join(format!("megalon-forked-pidns-{}.pod", std::process::id()));
    let _cleanup = tempfile::TempPath::try_from_path(&path).unwrap();
    let config = PodConfig::new().lnr_bytes(1 << 20).lease_ms(300);
    let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
    // Joining computes (and keeps) this process's machine hash.
    let host = Host::join(&pod, Join::As(0), pumped()).unwrap();

    // SAFETY: the child calls only async-signal-safe functions (unshare, mount, fork,
    // waitpid, _exit) until it forks the grandchild, which runs the host.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        unsafe {
            if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0 {
                libc::_exit(77);
            }
            let root = b"/\0";
            if libc::mount(
                std::ptr::null(),
                root.as_ptr().cast(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                libc::_exit(78);
            }
            let grand = libc::fork();
            if grand == 0 {
                grandchild(&path);
            }
            let mut status = 0;
            libc::waitpid(grand, &mut status, 0);
            libc::_exit(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                13
            });
        }
    }
    let wait_child = || {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        libc::WEXITSTATUS(status)
    };
    let (parent, joined) = words(&pod);
    let deadline = Instant::now() + Duration::from_secs(20);
    while joined.load(Ordering::Acquire) < 1 {
        let mut status = 0;
        // SAFETY: polls our own child.
        if unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == child {
            let code = libc::WEXITSTATUS(status);
            if code == 77 || code == 78 {
                eprintln!("skipped: unshare or mount not allowed here ({code})");
                return;
            }
            panic!("the child ended before it joined: {code}");
        }
        assert!(Instant::now() < deadline, "the child never joined");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Three leases: the pumps watch a few times per lease.
    std::thread::sleep(Duration::from_millis(900));
    let rows: Vec<_> = pod.hosts().iter().map(|row| (row.host, row.pid)).collect();
    let recovered = host.inspect().stats().hosts_recovered;
    parent.store(1, Ordering::Release);
    let code = wait_child();
    let parents_write = host.create(b"parent", &[2; 8]);
    eprintln!("rows {rows:?}, recovered {recovered}, child's exit {code}, parent's write {parents_write:?}");
    assert_eq!(rows.len(), 2, "both live hosts keep their rows: {rows:?}");
    parents_write.expect("the parent's live host was declared dead by the child's");
    assert_eq!(
        recovered, 0,
        "a live host forked into another pid namespace was recovered (rows {rows:?})"
    );
    assert_eq!(code, 0, "the child's host was declared dead while alive");
}
