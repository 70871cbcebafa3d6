//! What `Pod::create` refuses to replace: a pod in use, asked for with a shorter length
//! than it has (a DAX device), and a pod file cut short of what its header says.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use megalon_core::{
    limits::PAGE_BYTES, Backing, Error, Host, HostOptions, Join, Layout, Pod, PodConfig,
};
use tempfile::TempDir;

fn small_config() -> PodConfig {
    PodConfig::new()
        .scr_bytes(4 * PAGE_BYTES)
        .lnr_bytes(64 * PAGE_BYTES)
        .slot_size_bytes(1024)
        .max_key_bytes(64)
        .log_capacity_entries(64)
        .record_width_bits(32)
        .max_hosts(4)
}

fn fake_device() -> (TempDir, PathBuf, u64) {
    let resolved = small_config().resolved_for(&Backing::dax("/dev/dax0.0", 0));
    let total = Layout::new(&resolved).unwrap().total_bytes;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dax0.0");
    fs::File::create(&path).unwrap().set_len(total).unwrap();
    (dir, path, total)
}

/// A stand-in device as `fake_device` makes, as long as a pod of a larger configuration
/// (returned with its length) needs: the device, that configuration, its length, and the
/// length `small_config` needs.
fn device_of_a_larger_pod() -> (TempDir, PathBuf, PodConfig, u64, u64) {
    let big = small_config().lnr_bytes(128 * PAGE_BYTES);
    let resolved = big.resolved_for(&Backing::dax("/dev/dax0.0", 0));
    let big_total = Layout::new(&resolved).unwrap().total_bytes;
    let (dir, path, small_total) = fake_device();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(big_total)
        .unwrap();
    (dir, path, big, big_total, small_total)
}

/// Cuts the file at `path` one page short (its header whole).
fn cut_a_page_short(path: &std::path::Path) {
    let total = fs::metadata(path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(total - PAGE_BYTES)
        .unwrap();
}

/// Drops this process's `flock`s on `path` (every descriptor of it), as if the pod's
/// hosts ran on another machine: the locks are this machine's only.
fn unlock_as_if_elsewhere(path: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let ino = fs::metadata(path).unwrap().ino();
    for entry in fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if fs::metadata(entry.path()).is_ok_and(|m| m.ino() == ino) {
            // SAFETY: flock(2) on a descriptor of this process.
            unsafe { libc::flock(fd, libc::LOCK_UN) };
        }
    }
}

/// `Pod::create` refuses a DAX device whose pod has live hosts (on other machines: the
/// `flock` is this machine's only). But it asks the old pod through an open with the
/// *new* length: when the old pod is larger than that, the open answers `FileTooSmall`,
/// which `refuse_a_pod_in_use` takes for "not a pod", and the device is formatted under
/// the live hosts: their row, log and objects are gone.
#[test]
fn dax_create_with_a_shorter_length_over_a_larger_pod_in_use_is_refused() {
    let (_dir, path, big, big_total, small_total) = device_of_a_larger_pod();
    assert!(small_total < big_total);

    let pod = Arc::new(Pod::create(&big, Backing::dax(&path, big_total)).unwrap());
    let host = Host::join(&pod, Join::As(0), HostOptions::new()).unwrap();
    host.create(b"k", &[7; 64]).unwrap();
    megalon_core::inspect::pretend_row_elsewhere(&pod, 0);
    unlock_as_if_elsewhere(&path);
    assert_eq!(pod.live_hosts(), [0], "host 0 beats: live");

    let created = Pod::create(&small_config(), Backing::dax(&path, small_total)).map(drop);
    let after = host.lookup(b"k");
    assert!(
        matches!(&created, Err(Error::PodInUse { hosts, .. }) if hosts == &[0]),
        "create over a live pod answered {created:?}; the live host's lookup now {after:?}, rows {:?}",
        pod.hosts()
    );
}

/// The same line (`FileTooSmall` taken for "not a pod") on a file: a pod file cut short
/// (its header whole, checksum and all) is a pod this build cannot open, as one with
/// another layout version or a damaged header is, and those `Pod::create` refuses. This one
/// it replaces without a word: what was left of its log and objects is gone.
#[test]
fn create_over_a_pod_file_cut_short_is_refused_as_a_damaged_pod() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    let config = small_config();
    let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
    let host = Host::join(&pod, Join::As(0), HostOptions::new().pump_interval(None)).unwrap();
    host.create(b"k", &[7; 64]).unwrap();
    drop(host);
    drop(pod);
    cut_a_page_short(&path);
    let opened = Pod::open(Backing::file(&path)).map(drop);
    assert!(
        matches!(opened, Err(Error::FileTooSmall { .. })),
        "{opened:?}"
    );

    let created = Pod::create(&config, Backing::file(&path)).map(drop);
    assert!(
        created.is_err(),
        "a damaged pod was replaced: create answered {created:?} (the file is now {} bytes)",
        fs::metadata(&path).unwrap().len()
    );
}

/// The other side of the first test: with no live host, the larger pod on the device is
/// replaced by a create with the shorter length (a device reformatted smaller), and a
/// pod file cut short is replaced by `create_replacing`.
#[test]
fn a_larger_pod_with_no_live_host_and_a_cut_short_file_are_replaced_on_request() {
    let (_dir, path, big, big_total, small_total) = device_of_a_larger_pod();
    let pod = Pod::create(&big, Backing::dax(&path, big_total)).unwrap();
    drop(pod);
    let pod = Pod::create(&small_config(), Backing::dax(&path, small_total)).unwrap();
    assert_eq!(pod.layout().total_bytes, small_total);
    drop(pod);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    drop(Pod::create(&small_config(), Backing::file(&path)).unwrap());
    cut_a_page_short(&path);
    let pod = Pod::create_replacing(&small_config(), Backing::file(&path)).unwrap();
    drop(pod);
    assert!(Pod::open(Backing::file(&path)).is_ok());
}

/// Local partitions in a pod shared by processes need undo images: without them a
/// process killed in the middle of a move back leaves the object with part of each value,
/// and reads could not tell. A file pod with both is refused; with undo images (the
/// default for a file) it is made; a heap pod (whose hosts die together) may have both.
#[test]
fn local_partitions_in_a_shared_pod_without_undo_images_are_refused() {
    use megalon_core::CrashSafety;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    let local = small_config().local_partitions(2);
    let refused = Pod::create(
        &local.clone().crash_safety(CrashSafety::Off),
        Backing::file(&path),
    )
    .map(drop);
    assert!(
        matches!(
            refused,
            Err(Error::NeedsUndoImages {
                parameter: "partition_after_accesses"
            })
        ),
        "{refused:?}"
    );
    assert!(!path.exists(), "nothing was made");
    let pod = Pod::create(&local, Backing::file(&path)).unwrap();
    assert_eq!(pod.config().crash_safety, CrashSafety::Undo);
    drop(pod);
    drop(Pod::create(&local.crash_safety(CrashSafety::Off), Backing::heap()).unwrap());
}
