//! Bad input to creating and opening a pod: each answers its own error variant, carrying
//! the values a caller needs, and never panics. A failed open never writes to the file.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use megalon_core::{
    inspect::fnv1a64,
    limits::{
        DEFAULT_JOIN_AREA_BYTES, HEADER_BYTES, HEADER_REGION_BYTES, LAYOUT_VERSION, LINE_BYTES,
        LOG_FORMAT_VERSION, MAGIC, MAX_HOSTS_LIMIT, MAX_KEY_BYTES_LIMIT, MAX_SLOT_SIZE_BYTES,
        MIN_LOG_CAPACITY_ENTRIES, PAGE_BYTES,
    },
    numa_nodes, Backing, Coherence, CrashSafety, Error, Host, HostOptions, Join, Layout,
    MemoryKind, Pod, PodConfig, Region,
};
use tempfile::TempDir;

// Byte offsets of header fields (see header.rs: little-endian, field by field).
const VERSION_AT: usize = 8;
const SCR_BYTES_AT: usize = 24;
const RECORD_WIDTH_AT: usize = 60;
const LOG_ENTRY_BYTES_AT: usize = 68;
const CHECKSUM_AT: usize = HEADER_BYTES - 8;
/// Where the header keeps the log format version.
const LOG_FORMAT_AT: usize = 72;
/// Where the header keeps the coherence mode.
const COHERENCE_AT: usize = 76;

/// A small pod: 16 KiB SCR, 256 KiB LNR, 64 log entries of 128 bytes.
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

/// Creating with `config` on the heap fails; the layout computation fails the same way.
fn create_error(config: &PodConfig) -> Error {
    let error = Pod::create(config, Backing::heap()).unwrap_err();
    let from_layout = Layout::new(config).unwrap_err();
    assert_eq!(format!("{error:?}"), format!("{from_layout:?}"));
    error
}

/// A tempdir holding a pod file made with `config`, and the file's path.
fn pod_file(config: &PodConfig) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    drop(Pod::create(config, Backing::file(&path)).unwrap());
    (dir, path)
}

/// Replaces the header's checksum with the one the bytes before it hash to.
fn fix_checksum(bytes: &mut [u8]) {
    let checksum = fnv1a64(&bytes[..CHECKSUM_AT]);
    bytes[CHECKSUM_AT..HEADER_BYTES].copy_from_slice(&checksum.to_le_bytes());
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Applies `patch` to the whole file's bytes and writes them back.
fn patch_file(path: &Path, patch: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).unwrap();
    patch(&mut bytes);
    fs::write(path, bytes).unwrap();
}

/// A pod file of `config` whose header field at `at` holds `value` (under a checksum that
/// matches), the error opening it answers, and the file's path.
fn open_with_header_field(config: &PodConfig, at: usize, value: u32) -> (TempDir, PathBuf, Error) {
    let (dir, path) = pod_file(config);
    patch_file(&path, |bytes| {
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        fix_checksum(bytes);
    });
    let error = open_error(Backing::file(&path), None, &path);
    (dir, path, error)
}

/// Asserts `error` is `expected`, field for field. (Errors are compared by their `Debug`
/// text: they carry `io::Error`s, which are not `PartialEq`.)
#[track_caller]
fn assert_error(error: Error, expected: Error) {
    assert_eq!(format!("{error:?}"), format!("{expected:?}"));
}

/// A file's contents and modification time.
#[derive(Debug, PartialEq)]
struct Snapshot {
    bytes: Vec<u8>,
    modified: SystemTime,
}

fn snapshot(path: &Path) -> Snapshot {
    Snapshot {
        bytes: fs::read(path).unwrap(),
        modified: fs::metadata(path).unwrap().modified().unwrap(),
    }
}

/// Opens `backing` (expecting `expected` if given), which must fail without changing the
/// file at `path`.
fn open_error(backing: Backing, expected: Option<&PodConfig>, path: &Path) -> Error {
    let before = snapshot(path);
    let result = match expected {
        Some(config) => Pod::open_expecting(backing, config),
        None => Pod::open(backing),
    };
    let error = result.unwrap_err();
    let after = snapshot(path);
    assert!(
        before == after,
        "a failed open ({error}) changed {}",
        path.display()
    );
    error
}

// ---------------------------------------------------------------- creating: zero sizes

#[test]
fn zero_sizes() {
    let config = small_config;
    for (config, name) in [
        (config().scr_bytes(0), "scr_bytes"),
        (config().lnr_bytes(0), "lnr_bytes"),
        (config().slot_size_bytes(0), "slot_size_bytes"),
        (config().max_key_bytes(0), "max_key_bytes"),
        (config().log_capacity_entries(0), "log_capacity_entries"),
        (config().max_hosts(0), "max_hosts"),
    ] {
        let Error::ZeroSize { parameter } = create_error(&config) else {
            panic!("expected ZeroSize for {name}");
        };
        assert_eq!(parameter, name);
    }
}

// ---------------------------------------------------------------- creating: alignment

/// The regions are whole pages; the application's parts of them whole lines.
#[test]
fn sizes_not_a_multiple_of_their_alignment() {
    let (scr_bytes, lnr_bytes) = (4 * PAGE_BYTES + LINE_BYTES, 64 * PAGE_BYTES - 1);
    let config = small_config;
    #[rustfmt::skip]
    let cases = [
        (config().scr_bytes(scr_bytes), "scr_bytes", scr_bytes, PAGE_BYTES),
        (config().lnr_bytes(lnr_bytes), "lnr_bytes", lnr_bytes, PAGE_BYTES),
        (config().app_scr_bytes(LINE_BYTES + 8), "app_scr_bytes", LINE_BYTES + 8, LINE_BYTES),
        (config().app_lnr_bytes(100), "app_lnr_bytes", 100, LINE_BYTES),
    ];
    for (config, parameter, value, alignment) in cases {
        let expected = Error::UnalignedSize {
            parameter,
            value,
            alignment,
        };
        assert_error(create_error(&config), expected);
    }
}

#[test]
fn application_regions_too_large_for_their_part() {
    let config = small_config();
    for (config, region) in [
        (config.clone().app_scr_bytes(config.scr_bytes), Region::Scr),
        (config.clone().app_lnr_bytes(config.lnr_bytes), Region::Lnr),
    ] {
        let error = create_error(&config);
        assert!(
            matches!(
                error,
                Error::LayoutDoesNotFit { region: found, needed_bytes, available_bytes }
                    if found == region && needed_bytes > available_bytes
            ),
            "expected LayoutDoesNotFit for {region}, got {error:?}"
        );
    }
}

#[test]
fn slot_size_not_a_line_multiple() {
    let config = small_config().slot_size_bytes(1000);
    let slot_size_bytes = 1000;
    assert_error(
        create_error(&config),
        Error::SlotSizeNotLineMultiple { slot_size_bytes },
    );
}

// ---------------------------------------------------------------- creating: fitting

/// The `LayoutDoesNotFit` of `config`, after checking its region and available bytes.
fn does_not_fit(config: &PodConfig, expected_region: Region, available: u64) -> u64 {
    let Error::LayoutDoesNotFit {
        region,
        needed_bytes,
        available_bytes,
    } = create_error(config)
    else {
        panic!("expected LayoutDoesNotFit in {expected_region}");
    };
    assert_eq!(region, expected_region);
    assert_eq!(available_bytes, available);
    assert!(needed_bytes > available_bytes);
    needed_bytes
}

/// `needed` bytes of `region` (the `needed_bytes` of `config`'s `LayoutDoesNotFit`) is the
/// least size that fits: it is accepted, a page less is not. Returns the pod made with it.
fn needed_is_the_least_that_fits(config: &PodConfig, region: Region, needed: u64) -> Pod {
    let sized = |bytes| match region {
        Region::Scr => config.clone().scr_bytes(bytes),
        Region::Lnr => config.clone().lnr_bytes(bytes),
        Region::Device => unreachable!("the device's length is not a config parameter"),
    };
    let pod = Pod::create(&sized(needed), Backing::heap())
        .unwrap_or_else(|e| panic!("creating with needed_bytes = {needed}: {e}"));
    does_not_fit(&sized(needed - PAGE_BYTES), region, needed - PAGE_BYTES);
    pod
}

#[test]
fn scr_too_small_for_cursors_host_table_and_one_line_of_records() {
    let hosts = u64::from(MAX_HOSTS_LIMIT);
    let config = small_config()
        .max_hosts(MAX_HOSTS_LIMIT)
        .scr_bytes(2 * PAGE_BYTES);
    let needed = does_not_fit(&config, Region::Scr, 2 * PAGE_BYTES);
    // tail, head, ctail and one ltail per host; one host-table line per host; the
    // reclaimer's line; one line of records.
    let fixed = (3 + hosts) * LINE_BYTES + hosts * LINE_BYTES + LINE_BYTES + LINE_BYTES;
    assert!(
        needed >= fixed,
        "needs {needed}, the fixed parts take {fixed}"
    );
    let pod = needed_is_the_least_that_fits(&config, Region::Scr, needed);
    assert!(pod.layout().record_count >= 1);
}

#[test]
fn lnr_too_small_for_the_log_and_one_slot() {
    // 64 entries of 64 bytes (keys up to 32 bytes), the join area and one 4 KiB slot.
    let config = small_config()
        .max_key_bytes(32)
        .log_capacity_entries(64)
        .slot_size_bytes(PAGE_BYTES)
        .lnr_bytes(PAGE_BYTES);
    let needed = does_not_fit(&config, Region::Lnr, PAGE_BYTES);
    assert_eq!(needed, 64 * 64 + DEFAULT_JOIN_AREA_BYTES + PAGE_BYTES);
    let pod = Pod::create(&config.clone().lnr_bytes(needed), Backing::heap()).unwrap();
    assert_eq!(pod.layout().slot_count, 1);
}

#[test]
fn lnr_too_small_needed_bytes_is_a_size_that_can_be_given() {
    // 64 entries of 128 bytes and one 1 KiB slot: 9 KiB, not a whole number of pages.
    let config = small_config()
        .max_key_bytes(64)
        .log_capacity_entries(64)
        .slot_size_bytes(1024)
        .lnr_bytes(2 * PAGE_BYTES);
    let needed = does_not_fit(&config, Region::Lnr, 2 * PAGE_BYTES);
    assert!(needed >= 64 * 128 + 1024);
    let pod = needed_is_the_least_that_fits(&config, Region::Lnr, needed);
    assert!(pod.layout().slot_count >= 1);
}

#[test]
fn log_capacity_whose_bytes_overflow_does_not_fit() {
    let config = small_config().log_capacity_entries(u64::MAX);
    does_not_fit(&config, Region::Lnr, 64 * PAGE_BYTES);
}

#[test]
fn sizes_whose_sum_overflows_do_not_fit_the_address_space() {
    let huge = u64::MAX / PAGE_BYTES * PAGE_BYTES;
    let half = 1 << 63;
    for (scr_bytes, lnr_bytes, log_capacity_entries) in [
        (huge, 64 * PAGE_BYTES, 64),
        (4 * PAGE_BYTES, huge, 64),
        (huge, huge, 64),
        // The log alone fills the upper half of the address space.
        (half, half, (half - 1024) / 128),
    ] {
        let config = small_config()
            .scr_bytes(scr_bytes)
            .lnr_bytes(lnr_bytes)
            .log_capacity_entries(log_capacity_entries);
        let Error::LayoutDoesNotFit {
            region,
            available_bytes,
            ..
        } = create_error(&config)
        else {
            panic!("expected LayoutDoesNotFit for {config:?}");
        };
        assert_eq!(region, Region::Device, "{config:?}");
        assert_eq!(available_bytes, usize::MAX as u64, "{config:?}");
    }
}

/// An SCR of 2^61 bytes or more fits the address space, but its record count overflowed
/// a multiplication (a panic in debug builds, a wrong count in release ones, even from a
/// pod file's header): it is now the limit on records, by name.
#[test]
fn an_scr_too_large_for_its_records_is_above_the_record_limit() {
    for scr_bytes in [1 << 61, 1 << 62, (1 << 61) + 64 * PAGE_BYTES] {
        let error = Layout::new(&small_config().scr_bytes(scr_bytes)).unwrap_err();
        let Error::AboveLimit {
            parameter, value, ..
        } = error
        else {
            panic!("scr_bytes {scr_bytes}: {error:?}");
        };
        // At least a record per 8 bytes (32-bit records, the widest): a wrapped count
        // was far below.
        assert_eq!(parameter, "record count");
        assert!(value >= scr_bytes / 8, "scr_bytes {scr_bytes}: {error}");
    }
}

// ---------------------------------------------------------------- creating: limits

#[test]
fn record_width_other_than_2_4_8_16_32() {
    for bits in [0, 1, 3, 7, 12, 24, 33, 64, u32::MAX] {
        let config = small_config().record_width_bits(bits);
        assert_error(
            create_error(&config),
            Error::UnsupportedRecordWidth { bits },
        );
    }
    for bits in [2, 4, 8, 16, 32] {
        Pod::create(&small_config().record_width_bits(bits), Backing::heap()).unwrap();
    }
}

#[test]
fn more_hosts_than_the_table_holds() {
    for requested in [MAX_HOSTS_LIMIT + 1, u32::MAX] {
        let limit = MAX_HOSTS_LIMIT;
        assert_error(
            create_error(&small_config().max_hosts(requested)),
            Error::TooManyHosts { requested, limit },
        );
    }
    Pod::create(&small_config().max_hosts(MAX_HOSTS_LIMIT), Backing::heap()).unwrap();
}

#[test]
fn key_limit_above_its_constant() {
    let config = small_config().max_key_bytes(MAX_KEY_BYTES_LIMIT + 1);
    let limit = u64::from(MAX_KEY_BYTES_LIMIT);
    assert_error(
        create_error(&config),
        Error::AboveLimit {
            parameter: "max_key_bytes",
            value: limit + 1,
            limit,
        },
    );
    let at_limit = small_config().max_key_bytes(MAX_KEY_BYTES_LIMIT);
    Pod::create(&at_limit.lnr_bytes(1 << 20), Backing::heap()).unwrap();
}

#[test]
fn slot_size_above_its_constant() {
    let config = small_config()
        .slot_size_bytes(MAX_SLOT_SIZE_BYTES + LINE_BYTES)
        .lnr_bytes(32 << 20);
    let expected = Error::AboveLimit {
        parameter: "slot_size_bytes",
        value: MAX_SLOT_SIZE_BYTES + LINE_BYTES,
        limit: MAX_SLOT_SIZE_BYTES,
    };
    assert_error(create_error(&config), expected);
    let at_limit = Layout::new(&config.slot_size_bytes(MAX_SLOT_SIZE_BYTES)).unwrap();
    assert_eq!(at_limit.slot_count, 1);
}

#[test]
fn log_capacity_below_its_minimum() {
    let minimum = MIN_LOG_CAPACITY_ENTRIES;
    let config = small_config().log_capacity_entries(minimum - 1);
    let expected = Error::BelowMinimum {
        parameter: "log_capacity_entries",
        value: minimum - 1,
        minimum,
    };
    assert_error(create_error(&config), expected);
    Pod::create(
        &small_config().log_capacity_entries(minimum),
        Backing::heap(),
    )
    .unwrap();
}

// ---------------------------------------------------------------- creating: DAX

/// A tempdir holding a regular file of `len` bytes standing in for a DAX device.
fn fake_device(len: u64) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dax0.0");
    let file = fs::File::create(&path).unwrap();
    file.set_len(len).unwrap();
    (dir, path)
}

/// `config` as a pod on a DAX device resolves it, and that pod's bytes: a pod on a
/// device keeps undo images (`CrashSafety::Auto`), so it is sized for them.
fn on_dax(config: &PodConfig) -> (PodConfig, u64) {
    let resolved = config.resolved_for(&Backing::dax("/dev/dax0.0", 0));
    let total = Layout::new(&resolved).unwrap().total_bytes;
    (resolved, total)
}

/// Creates `small_config()` on a DAX device `dax_bytes` long, backed by a regular file of
/// `file_bytes`; the create must fail without writing to the file. Answers its error,
/// and the file's path.
fn dax_create_error(file_bytes: u64, dax_bytes: u64) -> (TempDir, PathBuf, Error) {
    let (dir, path) = fake_device(file_bytes);
    let before = snapshot(&path);
    let error = Pod::create(&small_config(), Backing::dax(&path, dax_bytes)).unwrap_err();
    assert_eq!(
        snapshot(&path),
        before,
        "a failed create wrote to the device"
    );
    (dir, path, error)
}

#[test]
fn dax_device_shorter_than_the_layout() {
    let total = Layout::new(&small_config()).unwrap().total_bytes;
    let (_dir, _path, error) = dax_create_error(total - PAGE_BYTES, total - PAGE_BYTES);
    assert_error(
        error,
        Error::LayoutDoesNotFit {
            region: Region::Device,
            needed_bytes: total,
            available_bytes: total - PAGE_BYTES,
        },
    );
}

#[test]
fn dax_length_longer_than_the_regular_file_behind_it() {
    let total = Layout::new(&small_config()).unwrap().total_bytes;
    let (_dir, path, error) = dax_create_error(total - PAGE_BYTES, total);
    assert_error(
        error,
        Error::FileTooSmall {
            path,
            file_bytes: total - PAGE_BYTES,
            needed_bytes: total,
        },
    );
}

#[test]
fn dax_create_and_open_on_a_regular_file_of_the_right_length() {
    let config = small_config();
    let (resolved, total) = on_dax(&config);
    let (_dir, path) = fake_device(total);
    let created = Pod::create(&config, Backing::dax(&path, total)).unwrap();
    let created_layout = created.layout().clone();
    drop(created);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        total,
        "DAX is never resized"
    );
    let opened = Pod::open(Backing::dax(&path, total)).unwrap();
    assert_eq!(opened.layout(), &created_layout);
    let opened = Pod::open_expecting(Backing::dax(&path, total), &config).unwrap();
    assert_eq!(opened.config(), &resolved);
}

// ---------------------------------------------------------------- creating: what is at the path

/// Found by a review (2026-11-29): creating a DAX pod zeroed the host table and log of a
/// pod live hosts were using (the file backing refused; the device did not look).
#[test]
fn dax_create_over_a_pod_in_use_is_refused() {
    let config = small_config();
    let (_, total) = on_dax(&config);
    let (_dir, path) = fake_device(total);
    let pod = Arc::new(Pod::create(&config, Backing::dax(&path, total)).unwrap());
    let host = Host::join(&pod, Join::AnyFree, HostOptions::new().pump_interval(None)).unwrap();
    host.create(b"k", &[7; 64]).unwrap();
    let refused = Pod::create(&config, Backing::dax(&path, total)).map(drop);
    assert!(
        matches!(&refused, Err(Error::PodInUse { hosts, .. }) if hosts == &[host.id()]),
        "{refused:?}"
    );
    assert_eq!(pod.live_hosts(), [host.id()], "the live pod is untouched");
    host.create(b"k2", &[9; 64]).unwrap();
}

/// Found by a review (2026-11-29): two processes creating a pod at one path at once both
/// got one, on different files (the second unlinked the first's file): the first's hosts
/// went on alone. One gets it; the other is told it is in use.
#[test]
fn two_creators_at_one_path_do_not_both_get_a_pod() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    let config = small_config();
    for round in 0..40 {
        let _ = fs::remove_file(&path);
        let barrier = std::sync::Barrier::new(2);
        let create = || {
            barrier.wait();
            Pod::create(&config, Backing::file(&path))
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(create);
            let b = s.spawn(create);
            (a.join().unwrap(), b.join().unwrap())
        });
        match (&a, &b) {
            (Ok(_), Err(Error::PodInUse { .. })) | (Err(Error::PodInUse { .. }), Ok(_)) => {}
            _ => panic!(
                "round {round}: {:?} and {:?}",
                a.as_ref().map(drop),
                b.as_ref().map(drop)
            ),
        }
        let created = a.or(b).unwrap();
        let opened = Pod::open(Backing::file(&path)).unwrap();
        let at = created.layout().app_scr_offset;
        created.scr_u64(at).store(round + 1, Ordering::SeqCst);
        assert_eq!(
            opened.scr_u64(at).load(Ordering::SeqCst),
            round + 1,
            "one file"
        );
    }
}

/// A pod some process has open is in use though no host has joined yet (a pod just
/// created has none): another creator must not replace it under its creator.
#[test]
fn a_pod_open_in_a_process_is_in_use_before_any_host_joins() {
    let (_dir, path) = pod_file(&small_config());
    let opened = Pod::open(Backing::file(&path)).unwrap();
    let refused = Pod::create(&small_config(), Backing::file(&path)).map(drop);
    assert!(
        matches!(&refused, Err(Error::PodInUse { hosts, .. }) if hosts.is_empty()),
        "{refused:?}"
    );
    drop(opened);
    Pod::create(&small_config(), Backing::file(&path)).unwrap();
}

/// An opener racing a replacer of the file: what it maps is the file whose header it
/// checked (it opened the path twice, and could map a shorter pod of another size under
/// the first one's layout: a fault past its end).
#[test]
fn an_opener_racing_a_replacer_maps_the_pod_it_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    let small = small_config();
    let large = small_config().lnr_bytes(small.lnr_bytes * 2);
    drop(Pod::create(&small, Backing::file(&path)).unwrap());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..200 {
                let config = if i % 2 == 0 { &large } else { &small };
                drop(Pod::create_replacing(config, Backing::file(&path)).unwrap());
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut buf = vec![0u8; 64];
        while !stop.load(Ordering::SeqCst) {
            let Ok(pod) = Pod::open(Backing::file(&path)) else {
                continue;
            };
            let layout = pod.layout().clone();
            let memory = megalon_core::Memory::new(Arc::new(pod), MemoryKind::Hardware);
            // The last slot's first line: past the end of a shorter file.
            memory.read(layout.slot_offset(layout.slot_count - 1), &mut buf);
        }
    });
}

/// Found by a review (2026-11-29): a pod this build cannot open (another layout
/// version, say) was taken for "not a pod" and replaced, its hosts of another build
/// split off. It is refused with what the open says, unless replaced on purpose.
#[test]
fn create_over_a_pod_of_another_version_is_refused_unless_replacing() {
    let config = small_config();
    let (_dir, path) = pod_file(&config);
    patch_file(&path, |bytes| {
        bytes[8..12].copy_from_slice(&(LAYOUT_VERSION + 1).to_le_bytes());
        fix_checksum(bytes);
    });
    let before = fs::read(&path).unwrap();
    let refused = Pod::create(&config, Backing::file(&path)).map(drop);
    assert!(
        matches!(refused, Err(Error::UnknownVersion { .. })),
        "{refused:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), before, "the file is untouched");
    Pod::create_replacing(&config, Backing::file(&path)).unwrap();
    Pod::open(Backing::file(&path)).unwrap();
}

/// Found by a review (2026-11-29): a file backing naming a device node (`/dev/dax0.0`
/// given to `Backing::file`, say) unlinked the node and put a pod file in its place; a
/// symbolic link was replaced too. Both are refused by name and left alone.
#[test]
fn create_over_a_device_or_a_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    fs::write(&target, b"not a pod").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let refused = Pod::create(&small_config(), Backing::file(&link)).map(drop);
    assert!(
        matches!(refused, Err(Error::NotARegularFile { .. })),
        "{refused:?}"
    );
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let refused = Pod::create(&small_config(), Backing::file(dir.path())).map(drop);
    assert!(
        matches!(refused, Err(Error::NotARegularFile { .. })),
        "{refused:?}"
    );
    // A character device (made only where this process may make one: as root).
    let node = dir.path().join("dax0.0");
    let c_node = std::ffi::CString::new(node.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod(2) of a path in our own directory.
    let made = unsafe { libc::mknod(c_node.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    if made == 0 {
        let refused = Pod::create(&small_config(), Backing::file(&node)).map(drop);
        assert!(
            matches!(refused, Err(Error::NotARegularFile { .. })),
            "{refused:?}"
        );
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::symlink_metadata(&node)
            .unwrap()
            .file_type()
            .is_char_device());
    }
}

/// A pod larger than its file system's free room is refused up front: its pages are
/// taken as they are first touched, and one that finds no room kills the process
/// (`SIGBUS`: the default pod is larger than a container's 64 MiB `/dev/shm`).
#[test]
fn a_pod_larger_than_its_file_systems_room_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    let config = small_config().lnr_bytes(1 << 46).slot_size_bytes(1 << 16);
    let refused = Pod::create(&config, Backing::file(&path)).map(drop);
    assert!(
        matches!(refused, Err(Error::NoRoomForPod { .. })),
        "{refused:?}"
    );
    assert!(!path.exists());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "no file left");
}

// ---------------------------------------------------------------- opening

#[test]
fn open_wrong_magic() {
    let (_dir, path) = pod_file(&small_config());
    patch_file(&path, |bytes| bytes[0] ^= 0x20);
    let found = u64_at(&fs::read(&path).unwrap(), 0);
    assert_ne!(found, MAGIC);
    let error = open_error(Backing::file(&path), None, &path);
    assert_error(error, Error::BadMagic { path, found });
}

#[test]
fn open_a_file_that_is_not_a_pod() {
    let (_dir, path) = fake_device(Layout::new(&small_config()).unwrap().total_bytes);
    let error = open_error(Backing::file(&path), None, &path);
    assert!(
        matches!(error, Error::BadMagic { found: 0, .. }),
        "expected BadMagic of 0, got {error:?}"
    );
}

/// A header naming a layout or log format newer than this build's is refused by name, with
/// the version found and the one supported.
#[test]
fn open_a_layout_or_log_format_version_newer_than_this_build() {
    for (at, supported) in [
        (VERSION_AT, LAYOUT_VERSION),
        (LOG_FORMAT_AT, LOG_FORMAT_VERSION),
    ] {
        let found = supported + 1;
        let (_dir, path, error) = open_with_header_field(&small_config(), at, found);
        let expected = if at == VERSION_AT {
            Error::UnknownVersion {
                path,
                found,
                supported,
            }
        } else {
            Error::UnknownLogFormat {
                path,
                found,
                supported,
            }
        };
        assert_error(error, expected);
    }
}

#[test]
fn open_a_pod_of_the_previous_layout_version() {
    // A pod made by a build of layout version 11 (without the width word among the log's
    // cursors, and a header 8 bytes shorter): its header says 11, with a checksum that
    // matches. This build refuses it by name.
    let previous = LAYOUT_VERSION - 1;
    assert_eq!(previous, 11);
    let (_dir, _path, error) = open_with_header_field(&small_config(), VERSION_AT, previous);
    assert!(
        matches!(
            error,
            Error::UnknownVersion {
                found: 11,
                supported: LAYOUT_VERSION,
                ..
            }
        ),
        "expected UnknownVersion of 11, got {error:?}"
    );
}

#[test]
fn open_a_crash_safety_mode_no_pod_is_created_with() {
    // Byte 108: the crash-safety word. `Auto` (0) is decided at creation, never stored.
    for found in [0, 3] {
        let (_dir, _path, error) = open_with_header_field(&small_config(), 108, found);
        let Error::HeaderInvalid { reason, .. } = error else {
            panic!("expected HeaderInvalid, got {error:?}");
        };
        assert!(
            matches!(*reason, Error::UnknownCrashSafety { found: f } if f == found),
            "{reason:?}"
        );
    }
}

#[test]
fn open_unknown_coherence_mode() {
    let (_dir, _path, error) = open_with_header_field(&small_config(), COHERENCE_AT, 7);
    let Error::HeaderInvalid { reason, .. } = error else {
        panic!("expected HeaderInvalid, got {error:?}");
    };
    assert!(
        matches!(*reason, Error::UnknownCoherence { found: 7 }),
        "{reason:?}"
    );
}

/// A header (checksum and all) that says local partitions without undo images: what
/// `Pod::create` refuses on every shared backing (a process killed while it moves an
/// object back leaves part of each value, and no read can tell). Another build's file, or
/// a header written by hand, opened and its hosts moved objects with nothing to restore
/// them from.
#[test]
fn open_partitions_without_undo_images() {
    const PARTITION_AFTER_ACCESSES_AT: usize = 96;
    let config = small_config()
        .rpc_ring_entries(4)
        .crash_safety(CrashSafety::Off);
    let (_dir, _path, error) = open_with_header_field(&config, PARTITION_AFTER_ACCESSES_AT, 2);
    let Error::HeaderInvalid { reason, .. } = error else {
        panic!("expected HeaderInvalid, got {error:?}");
    };
    assert!(
        matches!(
            *reason,
            Error::NeedsUndoImages {
                parameter: "partition_after_accesses"
            }
        ),
        "{reason:?}"
    );
}

/// Truncates the pod file at `path` to each of `lengths`; opening it must answer
/// `FileTooSmall` of `needed_bytes`.
fn assert_truncated_file_too_small(path: &Path, lengths: [u64; 3], needed_bytes: u64) {
    for file_bytes in lengths {
        let file = fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(file_bytes).unwrap();
        drop(file);
        let error = open_error(Backing::file(path), None, path);
        let path = path.to_owned();
        assert_error(
            error,
            Error::FileTooSmall {
                path,
                file_bytes,
                needed_bytes,
            },
        );
    }
}

#[test]
fn open_file_shorter_than_the_header() {
    let (_dir, path) = pod_file(&small_config());
    let header = HEADER_BYTES as u64;
    assert_truncated_file_too_small(&path, [0, 1, header - 1], header);
}

#[test]
fn open_file_shorter_than_its_layout() {
    let config = small_config();
    let total = Layout::new(&config).unwrap().total_bytes;
    let (_dir, path) = pod_file(&config);
    let lengths = [HEADER_BYTES as u64, HEADER_REGION_BYTES, total - 1];
    assert_truncated_file_too_small(&path, lengths, total);
}

#[test]
fn open_dax_length_shorter_than_the_header_region_or_the_layout() {
    let config = small_config();
    let (_, total) = on_dax(&config);
    let (_dir, path) = fake_device(total);
    drop(Pod::create(&config, Backing::dax(&path, total)).unwrap());
    for (len, needed) in [
        (0, HEADER_REGION_BYTES),
        (HEADER_REGION_BYTES - 1, HEADER_REGION_BYTES),
        (HEADER_REGION_BYTES, total),
        (total - 1, total),
    ] {
        let error = open_error(Backing::dax(&path, len), None, &path);
        assert!(
            matches!(
                error,
                Error::FileTooSmall { file_bytes, needed_bytes, .. }
                    if (file_bytes, needed_bytes) == (len, needed)
            ),
            "expected FileTooSmall of {needed} for length {len}, got {error:?}"
        );
    }
}

#[test]
fn open_header_checksum_mismatch() {
    let (_dir, path) = pod_file(&small_config());
    let stored = u64_at(&fs::read(&path).unwrap(), CHECKSUM_AT);
    patch_file(&path, |bytes| bytes[SCR_BYTES_AT + 2] ^= 0x01);
    let computed = fnv1a64(&fs::read(&path).unwrap()[..CHECKSUM_AT]);
    assert_ne!(stored, computed);
    let error = open_error(Backing::file(&path), None, &path);
    assert_error(
        error,
        Error::ChecksumMismatch {
            path,
            stored,
            computed,
        },
    );
}

#[test]
fn open_header_with_a_valid_checksum_but_an_invalid_parameter() {
    let (_dir, path, error) = open_with_header_field(&small_config(), RECORD_WIDTH_AT, 12);
    let reason = Box::new(Error::UnsupportedRecordWidth { bits: 12 });
    assert_error(error, Error::HeaderInvalid { path, reason });
}

#[test]
fn open_header_whose_derived_log_entry_size_disagrees() {
    let config = small_config();
    let entry_bytes = config.log_entry_bytes();
    let wrong = entry_bytes as u32 + LINE_BYTES as u32;
    let (_dir, _path, error) = open_with_header_field(&config, LOG_ENTRY_BYTES_AT, wrong);
    let Error::HeaderInvalid { reason, .. } = error else {
        panic!("expected HeaderInvalid, got {error:?}");
    };
    let Error::ParameterMismatch {
        in_pod, expected, ..
    } = *reason
    else {
        panic!("expected a ParameterMismatch reason, got {reason:?}");
    };
    // The error must show the values that disagree, or the user cannot tell what is wrong.
    assert_eq!(
        (in_pod, expected),
        (u64::from(wrong), entry_bytes),
        "the reported values are not the disagreeing log entry sizes"
    );
}

#[test]
fn open_expecting_other_parameters() {
    let config = small_config();
    let (_dir, path) = pod_file(&config);
    Pod::open_expecting(Backing::file(&path), &config).unwrap();
    // The pod's config with one parameter changed.
    let other = || config.clone();
    #[rustfmt::skip]
    let cases: [(&str, PodConfig, u64, u64); 8] = [
        ("scr_bytes", other().scr_bytes(8 * PAGE_BYTES), config.scr_bytes, 8 * PAGE_BYTES),
        ("lnr_bytes", other().lnr_bytes(128 * PAGE_BYTES), config.lnr_bytes, 128 * PAGE_BYTES),
        ("slot_size_bytes", other().slot_size_bytes(2048), config.slot_size_bytes, 2048),
        ("max_key_bytes", other().max_key_bytes(65), config.max_key_bytes.into(), 65),
        ("log_capacity_entries", other().log_capacity_entries(65), config.log_capacity_entries, 65),
        ("record_width_bits", other().record_width_bits(16), config.record_width_bits.into(), 16),
        ("max_hosts", other().max_hosts(5), config.max_hosts.into(), 5),
        ("coherence", other().coherence(Coherence::AllLog), 0, 1),
    ];
    for (parameter, expecting, in_pod, expected) in cases {
        let error = open_error(Backing::file(&path), Some(&expecting), &path);
        assert_error(
            error,
            Error::ParameterMismatch {
                parameter,
                in_pod,
                expected,
            },
        );
    }
}

#[test]
fn open_a_file_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing");
    let error = Pod::open(Backing::file(&path)).unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Io { path: reported, source, .. }
                if *reported == path && source.kind() == std::io::ErrorKind::NotFound
        ),
        "expected Io NotFound on {}, got {error:?}",
        path.display()
    );
    assert!(!path.exists(), "a failed open created the file");
}

#[test]
fn heap_pod_cannot_be_opened() {
    assert!(matches!(
        Pod::open(Backing::heap()).unwrap_err(),
        Error::HeapNotOpenable
    ));
    assert!(matches!(
        Pod::open_expecting(Backing::heap(), &small_config()).unwrap_err(),
        Error::HeapNotOpenable
    ));
}

// ---------------------------------------------------------------- NUMA

const NO_SUCH_NODE: u32 = 9999;

fn assert_numa_node_missing(error: Error) {
    let Error::NumaNodeMissing { node, available } = error else {
        panic!("expected NumaNodeMissing, got {error:?}");
    };
    assert_eq!(node, NO_SUCH_NODE);
    assert_eq!(available, numa_nodes());
    assert!(!available.contains(&NO_SUCH_NODE));
}

#[test]
fn create_on_a_numa_node_that_does_not_exist() {
    let error = Pod::create(&small_config(), Backing::heap().numa_node(NO_SUCH_NODE)).unwrap_err();
    assert_numa_node_missing(error);
}

#[test]
fn open_on_a_numa_node_that_does_not_exist() {
    let (_dir, path) = pod_file(&small_config());
    let error = open_error(Backing::file(&path).numa_node(NO_SUCH_NODE), None, &path);
    assert_numa_node_missing(error);
}

#[test]
fn numa_node_0_works_where_it_exists() {
    if !Path::new("/sys/devices/system/node/node0").exists() {
        eprintln!("skipped: this machine has no NUMA node 0 in sysfs");
        return;
    }
    assert!(numa_nodes().contains(&0));
    let pod = Pod::create(&small_config(), Backing::heap().numa_node(0)).unwrap();
    assert_eq!(pod.backing().numa_node, Some(0));
    let (_dir, path) = pod_file(&small_config());
    Pod::open(Backing::file(&path).numa_node(0)).unwrap();
}

/// Found by a review (2026-11-29): the room check did not count the room of the file the
/// new pod replaces, so re-creating a pod at its path on a small tmpfs (`/dev/shm` in a
/// container, a server restarted) was refused where it fit. Runs only where this process
/// may mount a tmpfs (as root).
#[test]
fn a_pod_replacing_a_file_counts_the_room_that_file_gives_back() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mounted) = SmallTmpfs::mount(dir.path(), 8 << 20) else {
        eprintln!("SKIPPED: no tmpfs could be mounted here (not root?)");
        return;
    };
    let path = dir.path().join("pod");
    let config = small_config()
        .lnr_bytes(5 << 20)
        .slot_size_bytes(4096)
        .join_area_bytes(0);
    {
        let pod = Arc::new(Pod::create(&config, Backing::file(&path)).unwrap());
        let options = HostOptions::new()
            .pump_interval(None)
            .wait_limit(std::time::Duration::from_millis(50));
        let host = Host::join(&pod, Join::AnyFree, options).unwrap();
        let mut made = 0u32;
        while host.create(&made.to_le_bytes(), &[7; 4096]).is_ok() {
            made += 1;
        }
        assert!(made > 1000, "the pod's pages are taken: {made} objects");
    }
    Pod::create(&config, Backing::file(&path)).unwrap();
    Pod::create_replacing(&config, Backing::file(&path)).unwrap();
}

/// A tmpfs mounted on a directory for a test, unmounted when dropped.
struct SmallTmpfs(std::ffi::CString);

impl SmallTmpfs {
    fn mount(dir: &Path, bytes: u64) -> Option<SmallTmpfs> {
        let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let options = std::ffi::CString::new(format!("size={bytes}")).unwrap();
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        (mounted == 0).then_some(SmallTmpfs(target))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        // SAFETY: umount2(2) of the directory mounted above; lazily, in case a file is
        // still open.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}
