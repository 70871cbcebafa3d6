//! Opening and creating pod files, found by the podopen review: creators that die
//! mid-format, creators of two pid namespaces.

#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use megalon_core::{Backing, Pod, PodConfig};

const POD_ENV: &str = "MEGALON_PODOPEN_POD";
const BIG_ENV: &str = "MEGALON_PODOPEN_BIG";

fn unshare_works() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|status| status.success())
}

/// The child: creates the pod at `POD_ENV` (a big one, slow to format, with `BIG_ENV`),
/// from a pid namespace of its own (a container: its first process is pid 1 every run).
#[test]
fn child_creates_a_pod() {
    let Some(path) = std::env::var_os(POD_ENV) else {
        return;
    };
    let config = if std::env::var_os(BIG_ENV).is_some() {
        // 256 MiB of log to zero: the parent kills it while it formats.
        PodConfig::new()
            .lnr_bytes(512 << 20)
            .log_capacity_entries(1 << 21)
    } else {
        PodConfig::new().lnr_bytes(1 << 20)
    };
    eprintln!("child: pid {} in its namespace", std::process::id());
    match Pod::create(&config, Backing::file(&path)) {
        Ok(_) => eprintln!("child: created"),
        Err(error) => panic!("child: create failed: {error}"),
    }
}

fn child(path: &std::path::Path, big: bool) -> std::process::Child {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_creates_a_pod", "--nocapture"])
        .env(POD_ENV, path)
        .stdin(Stdio::null());
    if big {
        command.env(BIG_ENV, "1");
    }
    command.spawn().unwrap()
}

/// A creator killed while it formats its new file beside the path leaves that file (its
/// `Drop` never runs). Its name is `.NAME.PID.N.new`: a process of a pid namespace (a
/// container) is the same pid, with the same N, every time it starts, so every later
/// create from it must not fail on the name the dead one left.
#[test]
fn a_creator_killed_mid_format_does_not_stop_the_next_create_of_its_pid() {
    if !unshare_works() {
        eprintln!("skipped: unshare --pid is not allowed here");
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("pod");
    let mut dying = child(&path, true);
    let deadline = Instant::now() + Duration::from_secs(60);
    let leftover = loop {
        let found = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .find(|p| p.extension().is_some_and(|e| e == "new"));
        if let Some(found) = found {
            if std::fs::metadata(&found).is_ok_and(|m| m.len() > 0) {
                break found;
            }
        }
        assert!(Instant::now() < deadline, "the child never began to format");
        assert!(dying.try_wait().unwrap().is_none(), "the child ended first");
        std::thread::sleep(Duration::from_millis(1));
    };
    // Killed mid-format (`--kill-child` takes its namespace with it).
    dying.kill().unwrap();
    let _ = dying.wait();
    std::thread::sleep(Duration::from_millis(100));
    eprintln!("parent: left behind {}", leftover.display());
    assert!(leftover.exists());
    assert!(!path.exists(), "a half-formatted pod took the path");
    // The container starts again: same pid, same first name.
    let status = child(&path, false).wait().unwrap();
    assert!(
        status.success(),
        "a create after a creator of the same pid died mid-format failed ({status})"
    );
    Pod::open(Backing::file(&path)).expect("the new pod opens");
}

/// A pod at a path whose file name is as long as a name may be (255 bytes) opens and
/// creates as any other: its new file beside it takes no longer name.
#[test]
fn a_pod_at_a_name_of_the_longest_length_can_be_created() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("p".repeat(255));
    std::fs::write(&path, b"").unwrap(); // the name itself is allowed here
    std::fs::remove_file(&path).unwrap();
    let created = Pod::create(&PodConfig::new().lnr_bytes(1 << 20), Backing::file(&path));
    assert!(created.is_ok(), "refused: {:?}", created.err());
}
