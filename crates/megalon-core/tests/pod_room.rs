//! A pod created where its file system has less room than the new file's format
//! touches: refused `NoRoomForPod`, never killed by `SIGBUS` at the first page that finds
//! no room. Each case runs in a child under `unshare --mount`, on a 16 MiB tmpfs of its
//! own that no other process sees (skipped where `unshare --mount` is not allowed). And a
//! pod on a device shorter than its length (a 1 MiB loop block device standing for
//! `/dev/daxX.Y`; skipped where no loop device can be attached): `FileTooSmall`, for a
//! create and for an open of a header that says more.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use megalon_core::{Backing, Error, Layout, Pod, PodConfig};

const DIR_ENV: &str = "MEGALON_POD_ROOM_DIR";
const CASE_ENV: &str = "MEGALON_POD_ROOM_CASE";

/// A pod whose format touches much: 64 KiB SCR, a log of 32768 entries of 128 bytes
/// (4 MiB, zeroed by the format), 8 MiB LNR in all.
fn big_log_config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(8 << 20)
        .slot_size_bytes(1024)
        .max_key_bytes(64)
        .log_capacity_entries(32 << 10)
        .max_hosts(4)
}

fn free_bytes(dir: &Path) -> u64 {
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs(3) of a NUL-terminated path into a zeroed plain struct.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c_dir.as_ptr(), &mut stats) }, 0);
    stats.f_bavail * stats.f_frsize
}

/// Touches every page of `path` (as a pod whose slots were all written has them).
fn touch_every_page(path: &Path) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let page = [0u8; 4096];
    // Past the header: leaves it as it is.
    let mut at = 4096;
    while at < len {
        file.write_all_at(&page[..1], at).unwrap();
        at += 4096;
    }
}

/// Leaves `keep` bytes free in the file system of `dir` (a file of its own takes the rest).
fn fill_leaving(dir: &Path, keep: u64) {
    let free = free_bytes(dir);
    assert!(free > keep);
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![1u8; 64 << 10];
    let mut left = free - keep;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        filler.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    filler.sync_all().unwrap();
}

/// The child (in a mount namespace of its own, on a 16 MiB tmpfs at `DIR_ENV`).
#[test]
fn child_recreates_a_pod_on_a_nearly_full_tmpfs() {
    let Some(dir) = std::env::var_os(DIR_ENV).map(PathBuf::from) else {
        return;
    };
    let case = std::env::var(CASE_ENV).unwrap();
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mount(2) of a tmpfs on our own directory, in our own mount namespace.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c_dir.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=16m".as_ptr().cast(),
        )
    };
    assert_eq!(mounted, 0, "mount: {}", std::io::Error::last_os_error());
    let path = dir.join("pod");
    let config = big_log_config();
    let total = Layout::new(&config.resolved_for(&Backing::file(&path)))
        .unwrap()
        .total_bytes;
    if case == "dax" {
        // A regular file standing for a device (`Backing::dax` maps "any existing
        // file"), made sparse, on a tmpfs with 1 MiB free.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(total)
            .unwrap();
        fill_leaving(&dir, 1 << 20);
        match Pod::create(&config, Backing::dax(&path, total)) {
            Ok(_) => panic!("child: created, with less room than its format touches"),
            Err(Error::NoRoomForPod { .. }) => eprintln!("child: refused, no room"),
            Err(other) => panic!("child: {other}"),
        }
        return;
    }
    // A pod some hosts used until every page of it was taken.
    let old = Pod::create(&config, Backing::file(&path)).unwrap();
    touch_every_page(&path);
    let kept_open = match case.as_str() {
        // Every process of it gone: `create` may replace it.
        "create" => {
            drop(old);
            None
        }
        // Still mapped by a process: `create_replacing` replaces it anyway.
        "replacing" => Some(old),
        // Every process of it gone: its room comes back at the rename.
        "replacing-unheld" => {
            drop(old);
            None
        }
        other => panic!("case {other}"),
    };
    // To `create`, 1 MiB left: less than the 4 MiB of log the new pod's format zeroes
    // (before the old file gives its room back), more than the new pod's size less the
    // old file's room. To `create_replacing`, 5 MiB: room for the format, not for the
    // whole pod while the old file stays mapped (its room never comes back), and for the
    // whole pod once nobody holds the old file.
    fill_leaving(&dir, if case == "create" { 1 << 20 } else { 5 << 20 });
    eprintln!(
        "child: pod of {total} bytes, {} free, the old file at the path takes {}",
        free_bytes(&dir),
        std::fs::metadata(&path).unwrap().len()
    );
    let created = match case.as_str() {
        "create" => Pod::create(&config, Backing::file(&path)),
        _ => Pod::create_replacing(&config, Backing::file(&path)),
    };
    match created {
        Ok(pod) if case == "replacing-unheld" => {
            touch_every_page(&path);
            drop(pod);
            eprintln!("child: created, every page touched");
        }
        Ok(_) => panic!("child: created, with less room than it needs"),
        Err(Error::NoRoomForPod { .. }) if case != "replacing-unheld" => {
            eprintln!("child: refused, no room")
        }
        Err(other) => panic!("child: {other}"),
    }
    drop(kept_open);
}

/// `create_replacing` over a pod no process holds any more, with room for the new pod's
/// format but not for both files: the old file's room comes back at the rename, so the
/// pod is created (the first room check refused it too), and every page of it can be
/// touched.
#[test]
fn replacing_a_pod_nobody_holds_on_a_nearly_full_tmpfs_counts_its_room() {
    child_answers_as_expected("replacing-unheld");
}

/// Runs `case` in its child: the child must exit as its case expects (refused
/// `NoRoomForPod`, or created with every page touched), never killed by a signal (a
/// `SIGBUS` while formatting).
fn child_answers_as_expected(case: &str) {
    let Some(status) = run_child(case) else {
        return;
    };
    assert_eq!(
        status.signal(),
        None,
        "{case}: the creator was killed by signal {:?} (7 is SIGBUS) formatting the new pod",
        status.signal()
    );
    assert!(status.success(), "{case}: {status}");
}

fn run_child(case: &str) -> Option<std::process::ExitStatus> {
    let works = Command::new("unshare")
        .args(["--mount", "true"])
        .status()
        .is_ok_and(|status| status.success());
    if !works {
        eprintln!("skipped: unshare --mount is not allowed here");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_recreates_a_pod_on_a_nearly_full_tmpfs",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(DIR_ENV, dir.path())
        .env(CASE_ENV, case)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    Some(output.status)
}

/// `Pod::create` over a pod file nobody has open counts the old file's room as free
/// (`refuse_without_room`: "a file at `path`, which the new pod replaces, gives its room
/// back"). But the old file gives its room back only once the new one is renamed over
/// it, and the new pod is formatted before that: its header, SCR and whole log are
/// zeroed (touched) while the old file still holds every page it had. On a tmpfs with
/// less room than the format touches, the creator is killed by `SIGBUS` instead of being
/// told `NoRoomForPod`.
#[test]
fn recreating_a_pod_on_a_nearly_full_tmpfs_is_child_answers_as_expected() {
    child_answers_as_expected("create");
}

/// `create_replacing` over a pod a process still maps, with room for the new pod's format
/// and not for the whole pod: the replaced file's pages stay taken for as long as it is
/// mapped, so they are no room for the new one, even after the rename. (Counted, the pod
/// was created, to be killed at the first write past the room.)
#[test]
fn replacing_a_mapped_pod_on_a_nearly_full_tmpfs_is_refused() {
    child_answers_as_expected("replacing");
}

/// A DAX backing that is a regular file (what `Backing::dax` allows: "a DAX device or any
/// existing file"), sparse, on a tmpfs with less room than the format touches: no room
/// check at all on this path, and the creator is killed by `SIGBUS`.
#[test]
fn a_dax_pod_on_a_sparse_file_of_a_nearly_full_tmpfs_is_child_answers_as_expected() {
    child_answers_as_expected("dax");
}

// ---- a device shorter than the pod

const DEVICE_ENV: &str = "MEGALON_POD_ROOM_DEVICE";

/// A pod of a few MiB, its log (2 MiB) larger than the 1 MiB device below.
fn device_config() -> PodConfig {
    big_log_config()
        .lnr_bytes(4 << 20)
        .log_capacity_entries(16 << 10)
}

fn total_on_dax(config: &PodConfig) -> u64 {
    Layout::new(&config.resolved_for(&Backing::dax("/dev/dax0.0", 0)))
        .unwrap()
        .total_bytes
}

/// A loop block device over a 1 MiB file: a device of a fixed length, as `/dev/daxX.Y`
/// is, which (unlike a regular file) is not resized and reports its length only as a
/// device does. Detached when dropped.
struct LoopDevice {
    device: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    fn attach(bytes: u64) -> Option<LoopDevice> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: not root (a loop device needs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("device.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let output = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&image)
            .output()
            .ok()?;
        if !output.status.success() {
            eprintln!(
                "skipped: losetup failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            return None;
        }
        let device = PathBuf::from(String::from_utf8(output.stdout).unwrap().trim());
        Some(LoopDevice { device, _dir: dir })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

/// The child: creates (or opens) a pod on the device named by `DEVICE_ENV`, with the
/// pod's length as the device's: the device is shorter than that. A typed error is the
/// only right answer; the process must not die of `SIGBUS` when the format touches a
/// page past the device's end.
#[test]
fn child_maps_a_pod_on_a_device_shorter_than_its_layout() {
    let Some(device) = std::env::var_os(DEVICE_ENV).map(PathBuf::from) else {
        return;
    };
    let case = std::env::var(CASE_ENV).unwrap();
    let config = device_config();
    let total = total_on_dax(&config);
    let answer = match case.as_str() {
        "create" => Pod::create(&config, Backing::dax(&device, total)).map(drop),
        "open" => Pod::open(Backing::dax(&device, total)).map(drop),
        other => panic!("case {other}"),
    };
    match answer {
        Ok(()) => panic!("child: a {total}-byte pod on a shorter device was mapped"),
        Err(error @ (Error::FileTooSmall { .. } | Error::LayoutDoesNotFit { .. })) => {
            eprintln!("child: refused: {error}")
        }
        Err(other) => panic!("child: refused with an unexpected error: {other}"),
    }
}

fn run_device_child(case: &str, device: &Path) -> std::process::ExitStatus {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_maps_a_pod_on_a_device_shorter_than_its_layout",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(DEVICE_ENV, device)
        .env(CASE_ENV, case)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    output.status
}

/// `Backing::dax` of a fixed-length device (here a 1 MiB loop block device) with a
/// length longer than the device: the create maps the given length and its format
/// zeroes the header region, the SCR and the whole log, past the device's end: the
/// creator dies of `SIGBUS` instead of getting a typed error (a regular file standing
/// for the device has its length checked; a device had none).
#[test]
fn a_pod_created_on_a_device_shorter_than_its_layout_is_refused_not_killed() {
    let Some(device) = LoopDevice::attach(1 << 20) else {
        return;
    };
    assert!(total_on_dax(&device_config()) > 2 << 20);
    let status = run_device_child("create", &device.device);
    assert_eq!(
        status.signal(),
        None,
        "the creator was killed by signal {:?} (7 is SIGBUS)",
        status.signal()
    );
    assert!(status.success(), "{status}");
}

/// The same device holding a pod whose header says it is longer than the device (a pod
/// made on a larger device whose image was copied to this one, say): the opener maps the
/// length given and believes the header; the device's end is never checked. (Here the
/// header is made by creating the pod on a regular file and copying its first page.)
#[test]
fn a_pod_opened_on_a_device_shorter_than_its_header_says_is_refused_not_killed() {
    let Some(device) = LoopDevice::attach(1 << 20) else {
        return;
    };
    let config = device_config();
    let total = total_on_dax(&config);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(total)
        .unwrap();
    drop(Pod::create(&config, Backing::dax(&file, total)).unwrap());
    let image = std::fs::read(&file).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let dev = std::fs::OpenOptions::new()
            .write(true)
            .open(&device.device)
            .unwrap();
        // The header region and the SCR: what an opener looks at first.
        dev.write_all_at(&image[..256 << 10], 0).unwrap();
        dev.sync_all().unwrap();
    }
    let status = run_device_child("open", &device.device);
    assert_eq!(
        status.signal(),
        None,
        "the opener was killed by signal {:?} (7 is SIGBUS)",
        status.signal()
    );
    assert!(status.success(), "{status}");
}
