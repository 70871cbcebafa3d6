//! The pod: one mapping of header + SCR + LNR on a backing, created or opened.
//!
//! Backings of one layout, one code path above them: the heap (one process), a file at
//! any path (on tmpfs, `/dev/shm/...`, for several processes), a DAX device of a given
//! length (real CXL memory), each optionally bound to a NUMA node with `mbind` (CXL
//! emulated on a NUMA machine). Opening reads and checks the header before mapping
//! anything writable, so a failed open never writes to the file.
//!
//! Under `--cfg megalon_loom` a pod is a heap of model atomics instead of a mapping.

#![cfg_attr(megalon_loom, allow(unused_imports, dead_code))]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};

use crate::chaos::{Chaos, Point};
use crate::config::{CrashSafety, PodConfig};
use crate::error::{Error, Region, Result};
use crate::header::PodHeader;
use crate::layout::{Layout, ScrUsage};
use crate::limits::{HEADER_BYTES, HEADER_REGION_BYTES};
#[cfg(not(megalon_loom))]
use crate::pod_file;
use crate::sync::{AtomicU16, AtomicU32, AtomicU64, AtomicU8};

/// Where a pod's bytes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackingKind {
    /// Anonymous memory of this process: tests and single-process emulation.
    Heap,
    /// A file, sized to the layout on creation. On tmpfs it is shared memory for
    /// several processes.
    File(PathBuf),
    /// A DAX device (`/dev/daxX.Y`) or any existing file, mapped with an explicit length
    /// and never resized.
    Dax {
        /// The device.
        path: PathBuf,
        /// Bytes to map.
        len_bytes: u64,
    },
}

/// A backing and, optionally, the NUMA node its memory must come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backing {
    /// Where the bytes live.
    pub kind: BackingKind,
    /// NUMA node to bind the mapping to with `mbind(MPOL_BIND)`.
    pub numa_node: Option<u32>,
}

impl Backing {
    /// Anonymous memory of this process.
    pub fn heap() -> Self {
        Self {
            kind: BackingKind::Heap,
            numa_node: None,
        }
    }

    /// A file at `path` (on tmpfs for several processes).
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            kind: BackingKind::File(path.into()),
            numa_node: None,
        }
    }

    /// A DAX device of `len_bytes` at `path`.
    pub fn dax(path: impl Into<PathBuf>, len_bytes: u64) -> Self {
        Self {
            kind: BackingKind::Dax {
                path: path.into(),
                len_bytes,
            },
            numa_node: None,
        }
    }

    /// Binds the mapping to NUMA node `node` (checked when the pod is created or opened).
    #[must_use]
    pub fn numa_node(mut self, node: u32) -> Self {
        self.numa_node = Some(node);
        self
    }

    /// Whether processes may share the pod (a file or a DAX device, not the heap).
    pub fn is_shared(&self) -> bool {
        self.kind != BackingKind::Heap
    }

    fn path(&self) -> &Path {
        match &self.kind {
            BackingKind::Heap => Path::new("<heap>"),
            BackingKind::File(path) | BackingKind::Dax { path, .. } => path,
        }
    }
}

/// A mapped pod. Shared between the hosts of one process behind an `Arc`.
pub struct Pod {
    storage: Storage,
    layout: Layout,
    backing: Backing,
}

/// The pod's bytes: a mapping.
#[cfg(not(megalon_loom))]
struct Storage {
    /// Owns the mapping; never borrowed mutably after construction: every access goes
    /// through `base` with atomics or the memory layer.
    _map: MmapMut,
    base: *mut u8,
    /// The pod's file, holding its shared lock while the pod lives (`pod_file`).
    _file: Option<File>,
}

// SAFETY: `base` points into `_map`, which lives as long as the pod and is never
// remapped. Every access to the mapping after construction is an atomic access (SCR
// words, memory-layer copies with atomic words) or a cache-maintenance instruction, so
// sharing the pointer between threads introduces no data race in Rust's model.
#[cfg(not(megalon_loom))]
unsafe impl Send for Storage {}
// SAFETY: as above.
#[cfg(not(megalon_loom))]
unsafe impl Sync for Storage {}

/// The pod's bytes in a loom model: model atomics, made on first use and zero until
/// written. Every word is accessed at one width only (as in the real pod).
#[cfg(megalon_loom)]
#[derive(Default)]
struct Storage {
    u64s: std::sync::Mutex<std::collections::HashMap<u64, Box<AtomicU64>>>,
    u32s: std::sync::Mutex<std::collections::HashMap<u64, Box<AtomicU32>>>,
    u16s: std::sync::Mutex<std::collections::HashMap<u64, Box<AtomicU16>>>,
    u8s: std::sync::Mutex<std::collections::HashMap<u64, Box<AtomicU8>>>,
}

#[cfg(megalon_loom)]
macro_rules! model_cell {
    ($name:ident, $map:ident, $ty:ty) => {
        fn $name(&self, offset: u64) -> &$ty {
            let mut map = self.$map.lock().expect("never poisoned");
            let cell: &$ty = map.entry(offset).or_insert_with(|| Box::new(<$ty>::new(0)));
            // SAFETY: the box is never removed while `self` lives (the map only grows),
            // and moving a `Box` within the map does not move what it points to.
            unsafe { &*(cell as *const $ty) }
        }
    };
}

#[cfg(megalon_loom)]
impl Storage {
    model_cell!(u64_at, u64s, AtomicU64);
    model_cell!(u32_at, u32s, AtomicU32);
    model_cell!(u16_at, u16s, AtomicU16);
    model_cell!(u8_at, u8s, AtomicU8);
}

/// What [`Pod::create`] does with a pod already at its path.
#[cfg(not(megalon_loom))]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// Refused while in use, or unreadable as a pod of this build.
    RefuseInUse,
    /// Replaced.
    Replace,
}

/// [`Error::NeedsUndoImages`] for local partitions without undo images, which a shared
/// pod cannot have: a process killed while it moves an object back leaves part of each
/// value, and no read can tell.
#[cfg(not(megalon_loom))]
fn refuse_partitions_without_undo_images(config: &PodConfig) -> Result<()> {
    if config.crash_safety == CrashSafety::Off && config.partition_after_accesses > 0 {
        return Err(Error::NeedsUndoImages {
            parameter: "partition_after_accesses",
        });
    }
    Ok(())
}

/// [`Error::PodInUse`] for the pod on `backing`, naming its live hosts if it can be read.
#[cfg(not(megalon_loom))]
fn in_use(backing: &Backing) -> Error {
    let hosts = Pod::open_locked(backing, None, false)
        .ok()
        .flatten()
        .map(|pod| pod.live_hosts())
        .unwrap_or_default();
    Error::PodInUse {
        path: backing.path().to_owned(),
        hosts,
    }
}

/// Refuses to create a pod over `backing`'s when live hosts use it (hosts of other
/// machines, on a DAX device), or when it is a pod this build cannot open: another
/// layout or log version, a damaged header (its error says which), a file cut short of
/// what its header says. Anything that is not a pod at all (another magic, too short for
/// a header) may be replaced. A DAX device asked for with a shorter length than the pod
/// on it has is looked at with the pod's length: its hosts may be live.
#[cfg(not(megalon_loom))]
fn refuse_a_pod_in_use(backing: &Backing) -> Result<()> {
    match Pod::open_locked(backing, None, false) {
        // Its header was read: a pod, longer than the backing as given.
        Err(too_short @ Error::FileTooSmall { needed_bytes, .. })
            if needed_bytes > HEADER_REGION_BYTES =>
        {
            match &backing.kind {
                BackingKind::Dax { path, len_bytes } if needed_bytes > *len_bytes => {
                    refuse_a_pod_in_use(&Backing {
                        kind: BackingKind::Dax {
                            path: path.clone(),
                            len_bytes: needed_bytes,
                        },
                        numa_node: backing.numa_node,
                    })
                }
                _ => Err(too_short),
            }
        }
        Ok(Some(old)) => {
            let hosts = old.live_hosts();
            if hosts.is_empty() {
                Ok(())
            } else {
                Err(Error::PodInUse {
                    path: backing.path().to_owned(),
                    hosts,
                })
            }
        }
        Ok(None) => Ok(()),
        Err(Error::BadMagic { .. } | Error::FileTooSmall { .. } | Error::Io { .. }) => Ok(()),
        Err(unreadable) => Err(unreadable),
    }
}

fn io_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        operation,
        path: path.to_owned(),
        source: source.into(),
    }
}

impl Pod {
    /// Creates a pod with `config` on `backing`: computes the layout, maps it, zeroes the
    /// header region, SCR and log, and writes the header (magic last).
    ///
    /// A file backing's new pod is built in a file of its own beside the path and takes
    /// the path whole, once written. What is at the path is replaced, unless it is in use:
    /// a pod some process has open (a [`Pod`] of it lives) or live hosts use, a pod this
    /// build cannot open (another layout version, a damaged header, a file cut short of
    /// what its header says: the error says which),
    /// or anything but a regular file ([`Error::PodInUse`], [`Error::NotARegularFile`];
    /// [`Pod::create_replacing`] replaces a pod anyway). Two processes that create a pod at
    /// one path at once: one gets it, the other [`Error::PodInUse`] (open it instead).
    /// Processes that still map a replaced file keep their (now private) copy.
    ///
    /// A DAX device holding a pod in use (a process of this machine has it open, or live
    /// hosts use it) is refused the same way, also when the pod on it is longer than the
    /// length asked for.
    #[cfg(not(megalon_loom))]
    pub fn create(config: &PodConfig, backing: Backing) -> Result<Pod> {
        Self::create_on(config, backing, Existing::RefuseInUse, |_| {})
    }

    /// [`Pod::create`], with `format` run on the new pod before any other process can
    /// open it: before a file backing's new file takes the path, and on a DAX device
    /// under the lock an opener waits for. An application that keeps a header of its own
    /// in the pod (in its application SCR) writes it here, so that a process opening the
    /// pod the moment it appears never finds the pod without it.
    #[cfg(not(megalon_loom))]
    pub fn create_with(
        config: &PodConfig,
        backing: Backing,
        format: impl FnOnce(&Pod),
    ) -> Result<Pod> {
        Self::create_on(config, backing, Existing::RefuseInUse, format)
    }

    /// [`Pod::create`] without asking whether a pod at the path is in use: it is replaced
    /// regardless, and hosts that still map it go on alone with their (now private) copy.
    #[cfg(not(megalon_loom))]
    pub fn create_replacing(config: &PodConfig, backing: Backing) -> Result<Pod> {
        Self::create_on(config, backing, Existing::Replace, |_| {})
    }

    #[cfg(not(megalon_loom))]
    fn create_on(
        config: &PodConfig,
        backing: Backing,
        existing: Existing,
        format: impl FnOnce(&Pod),
    ) -> Result<Pod> {
        let layout = Layout::new(&config.resolved_for(&backing))?;
        if !matches!(backing.kind, BackingKind::Heap) {
            refuse_partitions_without_undo_images(&layout.config)?;
        }
        let total = layout.total_bytes;
        check_numa_node(backing.numa_node)?;
        match backing.kind.clone() {
            BackingKind::Heap => {
                let map = MmapOptions::new()
                    .len(total as usize)
                    .map_anon()
                    .map_err(io_error("mapping anonymous memory for", backing.path()))?;
                let storage = Storage::new(map, &backing, None)?;
                let pod = Self::initialized(storage, layout, backing);
                format(&pod);
                Ok(pod)
            }
            BackingKind::File(path) => Self::create_file(layout, backing, &path, existing, format),
            BackingKind::Dax { path, len_bytes } => {
                if len_bytes < total {
                    return Err(Error::LayoutDoesNotFit {
                        region: Region::Device,
                        needed_bytes: total,
                        available_bytes: len_bytes,
                    });
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io_error("opening", &path))?;
                check_device_len(&file, &path, len_bytes)?;
                pod_file::refuse_sparse_without_room(&file, &path, total)?;
                // Held while the header is written: an opener waits for it whole.
                if !pod_file::lock(&file, libc::LOCK_EX | libc::LOCK_NB, &path)?
                    && existing == Existing::RefuseInUse
                {
                    return Err(in_use(&backing));
                }
                if existing == Existing::RefuseInUse {
                    refuse_a_pod_in_use(&backing)?;
                }
                let map = map_shared(&file, len_bytes, &path)?;
                let storage = Storage::new(map, &backing, None)?;
                let pod = Self::initialized(storage, layout, backing);
                format(&pod);
                pod_file::lock(&file, libc::LOCK_SH, &path)?;
                Ok(Pod {
                    storage: Storage {
                        _file: Some(file),
                        ..pod.storage
                    },
                    ..pod
                })
            }
        }
    }

    /// A new pod file built beside `path`, then put there (see [`Pod::create`]).
    #[cfg(not(megalon_loom))]
    fn create_file(
        layout: Layout,
        backing: Backing,
        path: &Path,
        existing: Existing,
        format: impl FnOnce(&Pod),
    ) -> Result<Pod> {
        pod_file::refuse_other_than_a_regular_file(path)?;
        let total = layout.total_bytes;
        // The new file's format touches what is below the log's end.
        let replaced_gives_room = existing == Existing::RefuseInUse || pod_file::held_by_none(path);
        pod_file::refuse_without_room(path, total, layout.log_end(), replaced_gives_room)?;
        let (mut new, file) = pod_file::NewFile::beside(path)?;
        // In use from the start: a creator that finds it at the path leaves it.
        pod_file::lock(&file, libc::LOCK_SH, &new.path)?;
        file.set_len(total).map_err(io_error("sizing", &new.path))?;
        let map = map_shared(&file, total, &new.path)?;
        let storage = Storage::new(map, &backing, Some(file))?;
        let pod = Self::initialized(storage, layout, backing);
        format(&pod);
        Self::publish(&mut new, path, existing)?;
        Chaos::none().point(Point::PodPublished);
        Ok(pod)
    }

    /// Puts the new file at `path` (see [`Pod::create`]).
    #[cfg(not(megalon_loom))]
    fn publish(new: &mut pod_file::NewFile, path: &Path, existing: Existing) -> Result<()> {
        // A few rounds at most: each finds the file another creator or replacer put there.
        for _ in 0..100 {
            if new.link(path)? {
                return Ok(());
            }
            let old = match File::open(path) {
                Ok(old) => old,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("opening", path)(e)),
            };
            if existing == Existing::Replace {
                return new.rename(path);
            }
            if !pod_file::lock(&old, libc::LOCK_EX | libc::LOCK_NB, path)? {
                return Err(in_use(&Backing::file(path)));
            }
            if !pod_file::names(path, &old) {
                continue;
            }
            // Nobody has it open; it may still be a pod this build cannot read.
            refuse_a_pod_in_use(&Backing::file(path))?;
            // Holding its lock, which every opener takes (shared) and then checks that
            // the path still names the file: none maps it from now on.
            return new.rename(path);
        }
        Err(Error::PodInUse {
            path: path.to_owned(),
            hosts: Vec::new(),
        })
    }

    /// A pod on `storage`, its header region, SCR and log zeroed and its header written.
    #[cfg(not(megalon_loom))]
    fn initialized(storage: Storage, layout: Layout, backing: Backing) -> Pod {
        let pod = Pod {
            storage,
            layout,
            backing,
        };
        pod.initialize();
        pod
    }

    /// Creates a pod in a loom model: heap backing only, model atomics for its words.
    #[cfg(megalon_loom)]
    pub fn create(config: &PodConfig, backing: Backing) -> Result<Pod> {
        let layout = Layout::new(&config.resolved_for(&backing))?;
        if backing.kind != BackingKind::Heap {
            return Err(Error::HeapNotOpenable);
        }
        let pod = Pod {
            storage: Storage::default(),
            layout,
            backing,
        };
        // Every cell of the pod exists before any model thread runs, as the memory of a
        // real pod does: a cell made lazily by one thread and loaded by another would be
        // an unsynchronized write in the model.
        let layout = &pod.layout;
        for offset in (layout.cursors_offset..layout.host_table_offset).step_by(8) {
            pod.word(offset);
        }
        // The host table's words (64 bits each, the holder's too).
        for host in 0..layout.config.max_hosts {
            let entry = layout.host_entry_offset(host);
            for offset in (entry..entry + layout.host_entry_bytes).step_by(8) {
                pod.word(offset);
            }
        }
        for record in 0..layout.record_count {
            let offset = layout.record_offset(record);
            match layout.record_bytes {
                1 => drop(pod.scr_u8(offset)),
                2 => drop(pod.scr_u16(offset)),
                _ => drop(pod.scr_u32(offset)),
            }
        }
        for offset in (layout.reclaimer_offset..layout.reclaimer_offset + 64).step_by(8) {
            pod.word(offset);
        }
        // The application's SCR words (a model's RPC ring, say).
        let app_scr = layout.app_scr_offset..layout.app_scr_offset + layout.config.app_scr_bytes;
        for offset in app_scr.step_by(8) {
            pod.word(offset);
        }
        for offset in (layout.lnr_offset..layout.total_bytes).step_by(8) {
            pod.word(offset);
        }
        // Every word starts at zero; only the header needs writing.
        let encoded = PodHeader::new(&pod.layout).encode();
        for (i, chunk) in encoded.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(chunk.try_into().expect("8"));
            pod.word(i as u64 * 8)
                .store(word, crate::sync::Ordering::Relaxed);
        }
        Ok(pod)
    }

    /// Opens an existing pod, taking its configuration from its header.
    pub fn open(backing: Backing) -> Result<Pod> {
        Self::open_checked(backing, None)
    }

    /// Opens an existing pod and checks that it was created with `expected`.
    pub fn open_expecting(backing: Backing, expected: &PodConfig) -> Result<Pod> {
        Self::open_checked(backing, Some(expected))
    }

    #[cfg(megalon_loom)]
    // Over 70 lines on purpose: The checks of a pod file in the order a reader of the file
    // must make them.
    fn open_checked(_backing: Backing, _expected: Option<&PodConfig>) -> Result<Pod> {
        Err(Error::HeapNotOpenable)
    }

    #[cfg(not(megalon_loom))]
    fn open_checked(backing: Backing, expected: Option<&PodConfig>) -> Result<Pod> {
        // A few rounds at most: each finds the file that replaced the one it locked.
        for _ in 0..100 {
            if let Some(pod) = Self::open_locked(&backing, expected, true)? {
                return Ok(pod);
            }
        }
        Err(Error::PodInUse {
            path: backing.path().to_owned(),
            hosts: Vec::new(),
        })
    }

    /// Opens the pod through one descriptor: its header read, its size checked and its
    /// bytes mapped from the same file. With `lock`, holding a shared lock on the file for
    /// the pod's life (`None`: the path was given to another file meanwhile; open again).
    #[cfg(not(megalon_loom))]
    // Over 70 lines on purpose: The checks of a pod file in the order a reader of the file
    // must make them.
    fn open_locked(
        backing: &Backing,
        expected: Option<&PodConfig>,
        lock: bool,
    ) -> Result<Option<Pod>> {
        use std::os::unix::fs::FileExt;
        let path = backing.path().to_owned();
        let (file, header_bytes, file_bytes) = match &backing.kind {
            BackingKind::Heap => return Err(Error::HeapNotOpenable),
            BackingKind::File(path) => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(io_error("opening", path))?;
                // Waits for a creator that replaces the file, then sees whether it did.
                if lock
                    && !(pod_file::lock(&file, libc::LOCK_SH, path)?
                        && pod_file::names(path, &file))
                {
                    return Ok(None);
                }
                let file_bytes = file.metadata().map_err(io_error("reading", path))?.len();
                if file_bytes < HEADER_BYTES as u64 {
                    return Err(Error::FileTooSmall {
                        path: path.clone(),
                        file_bytes,
                        needed_bytes: HEADER_BYTES as u64,
                    });
                }
                let mut bytes = [0u8; HEADER_BYTES];
                file.read_exact_at(&mut bytes, 0)
                    .map_err(io_error("reading the header of", path))?;
                (file, bytes, file_bytes)
            }
            BackingKind::Dax { path, len_bytes } => {
                // A DAX device can only be mapped, not read: map it read-only for its
                // header, whole (a device maps only in multiples of its alignment).
                if *len_bytes < HEADER_REGION_BYTES {
                    return Err(Error::FileTooSmall {
                        path: path.clone(),
                        file_bytes: *len_bytes,
                        needed_bytes: HEADER_REGION_BYTES,
                    });
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(io_error("opening", path))?;
                check_device_len(&file, path, *len_bytes)?;
                if lock {
                    pod_file::lock(&file, libc::LOCK_SH, path)?;
                }
                // SAFETY: a read-only shared mapping; we copy the header out at once and
                // drop the mapping.
                let map = unsafe { MmapOptions::new().len(*len_bytes as usize).map(&file) }
                    .map_err(io_error("mapping the header of", path))?;
                let bytes: [u8; HEADER_BYTES] = map[..HEADER_BYTES].try_into().expect("sized");
                (file, bytes, *len_bytes)
            }
        };
        let (header, layout) = PodHeader::decode(&header_bytes, &path)?;
        // Every pod opened is shared: a header written by another build or by hand may
        // break the rule `create_on` keeps.
        if let Err(refused) = refuse_partitions_without_undo_images(&layout.config) {
            return Err(Error::HeaderInvalid {
                path,
                reason: Box::new(refused),
            });
        }
        if file_bytes < layout.total_bytes {
            return Err(Error::FileTooSmall {
                path,
                file_bytes,
                needed_bytes: layout.total_bytes,
            });
        }
        if let Some(expected) = expected {
            if let Some((parameter, in_pod, expected)) = header.config().first_difference(expected)
            {
                return Err(Error::ParameterMismatch {
                    parameter,
                    in_pod,
                    expected,
                });
            }
        }
        check_numa_node(backing.numa_node)?;
        let map = map_shared(&file, file_bytes.max(layout.total_bytes), &path)?;
        let storage = Storage::new(map, backing, lock.then_some(file))?;
        Ok(Some(Pod {
            storage,
            layout,
            backing: backing.clone(),
        }))
    }

    /// Zeroes the header region, SCR and the log ring, then writes the header, magic last,
    /// so that an opener never takes a half-written header for a pod.
    #[cfg(not(megalon_loom))]
    fn initialize(&self) {
        let layout = &self.layout;
        let log_end = layout.log_end();
        for offset in (0..log_end).step_by(8) {
            self.word(offset).store(0, crate::sync::Ordering::Relaxed);
        }
        // RPC rings need nothing more: a zeroed ring is a ring of free entries.
        let encoded = PodHeader::new(layout).encode();
        for (i, chunk) in encoded.chunks_exact(8).enumerate().skip(1) {
            let word = u64::from_le_bytes(chunk.try_into().expect("8"));
            self.word(i as u64 * 8)
                .store(word, crate::sync::Ordering::Relaxed);
        }
        if layout.lnr_offset > 0 {
            // The log's lines must reach memory as zeros before any host reads them
            // through its own cache: before the magic, which a host on another machine
            // may see at once (a dirty zero line written back after its first append
            // would erase the entry).
            // SAFETY: the range is inside the mapping.
            unsafe {
                crate::arch::write_back(
                    self.storage.base.add(layout.lnr_offset as usize),
                    (log_end - layout.lnr_offset) as usize,
                )
            };
            crate::arch::full_fence();
        }
        let magic = u64::from_le_bytes(encoded[..8].try_into().expect("8"));
        // Release: orders the fields (and the log's zeros) before the magic for an opener
        // that maps the device while we write.
        self.word(0).store(magic, crate::sync::Ordering::Release);
    }

    /// The pod's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The pod's configuration.
    pub fn config(&self) -> &PodConfig {
        &self.layout.config
    }

    /// The backing the pod was created or opened on.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// SCR bytes by category; they add up to the SCR size.
    pub fn scr_usage(&self) -> ScrUsage {
        self.layout.scr_usage()
    }

    /// Any 8-byte word of the mapping, as an atomic. Crate-internal: LNR words are only
    /// touched through the memory layer.
    pub(crate) fn word(&self, offset: u64) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.layout.total_bytes,
            "word {offset:#x} outside the pod"
        );
        self.at::<AtomicU64>(offset)
    }

    /// An 8-byte word of the SCR, as an atomic shared with every host of the pod.
    ///
    /// # Panics
    /// If `offset` is not 8-aligned inside the SCR: offsets come from [`Layout`].
    pub fn scr_u64(&self, offset: u64) -> &AtomicU64 {
        self.assert_in_scr(offset, 8);
        self.word(offset)
    }

    /// One of the log's cursors in the SCR, where this pod's layout puts it (inside the
    /// SCR, on a line of its own). Checked in debug builds only: every read loads
    /// `ctail` twice, and the checks of [`scr_u64`](Self::scr_u64) took about 40
    /// instructions each time (a tenth of a read's).
    #[inline]
    pub(crate) fn cursor(&self, cursor: Cursor) -> &AtomicU64 {
        let offset = match cursor {
            Cursor::Tail => self.layout.tail_offset(),
            Cursor::Head => self.layout.head_offset(),
            Cursor::Ctail => self.layout.ctail_offset(),
        };
        debug_assert!(offset.is_multiple_of(crate::limits::LINE_BYTES));
        debug_assert!(offset >= self.layout.scr_offset && offset + 8 <= self.layout.lnr_offset);
        self.at::<AtomicU64>(offset)
    }

    /// A 4-byte word of the SCR (records of 32 bits, host-table fields).
    ///
    /// # Panics
    /// If `offset` is not 4-aligned inside the SCR.
    #[inline]
    pub fn scr_u32(&self, offset: u64) -> &AtomicU32 {
        self.assert_in_scr(offset, 4);
        self.at::<AtomicU32>(offset)
    }

    /// A 2-byte word of the SCR (records of 16 bits).
    ///
    /// # Panics
    /// If `offset` is not 2-aligned inside the SCR.
    #[inline]
    pub fn scr_u16(&self, offset: u64) -> &AtomicU16 {
        self.assert_in_scr(offset, 2);
        self.at::<AtomicU16>(offset)
    }

    /// A byte of the SCR (records of 8 bits).
    ///
    /// # Panics
    /// If `offset` is outside the SCR.
    #[inline]
    pub fn scr_u8(&self, offset: u64) -> &AtomicU8 {
        self.assert_in_scr(offset, 1);
        self.at::<AtomicU8>(offset)
    }

    #[inline]
    fn assert_in_scr(&self, offset: u64, bytes: u64) {
        let scr = self.layout.scr_offset..self.layout.lnr_offset;
        if !(offset.is_multiple_of(bytes) && scr.contains(&offset) && offset + bytes <= scr.end) {
            scr_word_outside(offset, bytes, scr);
        }
    }

    /// Checks that `[offset, offset + len)` is inside the LNR.
    ///
    /// # Panics
    /// If it is not: offsets come from the layout.
    #[inline]
    pub(crate) fn assert_in_lnr(&self, offset: u64, len: usize) {
        assert!(
            offset >= self.layout.lnr_offset
                && offset
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= self.layout.total_bytes),
            "LNR range {offset:#x}+{len} outside the LNR"
        );
    }

    /// The atomic of type `T` at `offset`; the caller checked bounds and alignment.
    #[cfg(not(megalon_loom))]
    #[inline]
    fn at<T>(&self, offset: u64) -> &T {
        debug_assert!(
            offset as usize + std::mem::size_of::<T>() <= self.layout.total_bytes as usize
        );
        // SAFETY: `T` is one of the atomic integer types; the callers checked that
        // `[offset, offset + size_of::<T>())` is inside the mapping and aligned for `T`
        // (the mapping is page-aligned); the mapping lives as long as `self`; every access
        // to pod memory is atomic.
        unsafe { &*(self.storage.base.add(offset as usize) as *const T) }
    }

    /// The model atomic of type `T` at `offset`.
    #[cfg(megalon_loom)]
    fn at<T: ModelCell>(&self, offset: u64) -> &T {
        T::cell(&self.storage, offset)
    }

    /// The address of the pod's byte at `offset` in this process (unchecked), for the
    /// CXL cost model's directory of SCR lines. (In a loom model: `offset`.)
    #[cfg(not(megalon_loom))]
    #[inline]
    pub(crate) fn address_of(&self, offset: u64) -> usize {
        self.storage.base as usize + offset as usize
    }

    #[cfg(megalon_loom)]
    pub(crate) fn address_of(&self, offset: u64) -> usize {
        offset as usize
    }

    /// Pointer to `len` bytes of LNR at `offset`, for the memory layer.
    ///
    /// # Panics
    /// If the range is not inside the LNR.
    #[cfg(not(megalon_loom))]
    #[inline]
    pub(crate) fn lnr_ptr(&self, offset: u64, len: usize) -> *mut u8 {
        self.assert_in_lnr(offset, len);
        // SAFETY: in bounds (checked above).
        unsafe { self.storage.base.add(offset as usize) }
    }
}

/// The panic of an SCR word outside the SCR: out of line, so that the checks of every
/// record and cursor access stay compares and branches.
#[cold]
#[inline(never)]
fn scr_word_outside(offset: u64, bytes: u64, scr: std::ops::Range<u64>) -> ! {
    panic!("{bytes}-byte SCR word at {offset:#x} outside {scr:#x?}")
}

#[cfg(not(megalon_loom))]
impl Storage {
    /// Takes over `map` (and `file`, its lock held), binding it to the backing's NUMA
    /// node if it names one.
    fn new(mut map: MmapMut, backing: &Backing, file: Option<File>) -> Result<Storage> {
        let base = map.as_mut_ptr();
        debug_assert_eq!(
            base as usize % HEADER_REGION_BYTES as usize,
            0,
            "mappings are page-aligned"
        );
        if let Some(node) = backing.numa_node {
            bind_to_node(base, map.len(), node)?;
        }
        Ok(Storage {
            _map: map,
            base,
            _file: file,
        })
    }
}

/// The atomic types a loom pod hands out, each from its own map.
#[cfg(megalon_loom)]
trait ModelCell {
    fn cell(storage: &Storage, offset: u64) -> &Self;
}

#[cfg(megalon_loom)]
macro_rules! model_cell_type {
    ($ty:ty, $at:ident) => {
        impl ModelCell for $ty {
            fn cell(storage: &Storage, offset: u64) -> &Self {
                storage.$at(offset)
            }
        }
    };
}

#[cfg(megalon_loom)]
model_cell_type!(AtomicU64, u64_at);
#[cfg(megalon_loom)]
model_cell_type!(AtomicU32, u32_at);
#[cfg(megalon_loom)]
model_cell_type!(AtomicU16, u16_at);
#[cfg(megalon_loom)]
model_cell_type!(AtomicU8, u8_at);

/// The log's cursors that every host reads often (see [`Pod::cursor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// The next position to reserve.
    Tail,
    /// The oldest position some host still needs.
    Head,
    /// The highest position whose append has completed.
    Ctail,
}

impl std::fmt::Debug for Pod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pod")
            .field("backing", &self.backing)
            .field("total_bytes", &self.layout.total_bytes)
            .finish_non_exhaustive()
    }
}

fn map_shared(file: &File, len: u64, path: &Path) -> Result<MmapMut> {
    // SAFETY: a shared mapping of a file other processes may map too; this crate never
    // forms references to its bytes, only atomics and cache-maintenance instructions, so
    // concurrent writers elsewhere cannot break Rust's aliasing rules here. Truncation by
    // another process would fault; `Pod::create` unlinks instead of truncating.
    unsafe { MmapOptions::new().len(len as usize).map_mut(file) }.map_err(io_error("mapping", path))
}

/// The file or device behind a DAX backing must be at least as long as the mapping: a
/// page mapped past a device's end kills the process (`SIGBUS`) at its first touch. A
/// regular file (tests, emulation) and a block device report their length; a character
/// device (`/dev/daxX.Y`) reports it in sysfs (`/sys/dev/char/MAJOR:MINOR/size`). A
/// device whose length cannot be found is taken at its word.
fn check_device_len(file: &File, path: &Path, len_bytes: u64) -> Result<()> {
    let metadata = file.metadata().map_err(io_error("reading", path))?;
    if let Some(device_bytes) = device_len(file, &metadata) {
        if device_bytes < len_bytes {
            return Err(Error::FileTooSmall {
                path: path.to_owned(),
                file_bytes: device_bytes,
                needed_bytes: len_bytes,
            });
        }
    }
    Ok(())
}

/// The length of the regular file or device `file` is open on, if it can be found.
fn device_len(file: &File, metadata: &std::fs::Metadata) -> Option<u64> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use std::os::unix::io::AsRawFd;
    let kind = metadata.file_type();
    if kind.is_file() {
        Some(metadata.len())
    } else if kind.is_block_device() {
        // SAFETY: lseek(2) on a descriptor we own; only its offset changes, and nothing
        // here reads or writes through it (the header is read through a mapping).
        let end = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
        // SAFETY: as above.
        unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_SET) };
        u64::try_from(end).ok()
    } else if kind.is_char_device() {
        let rdev = metadata.rdev();
        let sysfs = format!(
            "/sys/dev/char/{}:{}/size",
            libc::major(rdev),
            libc::minor(rdev)
        );
        std::fs::read_to_string(sysfs).ok()?.trim().parse().ok()
    } else {
        None
    }
}

/// The NUMA nodes this machine has, from sysfs (empty where sysfs has none).
pub fn numa_nodes() -> Vec<u32> {
    let mut nodes: Vec<u32> = std::fs::read_dir("/sys/devices/system/node")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .collect();
    nodes.sort_unstable();
    nodes
}

fn check_numa_node(node: Option<u32>) -> Result<()> {
    match node {
        Some(node) if !numa_nodes().contains(&node) => Err(Error::NumaNodeMissing {
            node,
            available: numa_nodes(),
        }),
        _ => Ok(()),
    }
}

#[cfg(target_os = "linux")]
fn bind_to_node(base: *mut u8, len: usize, node: u32) -> Result<()> {
    const MPOL_BIND: libc::c_long = 2;
    const MPOL_MF_MOVE: libc::c_ulong = 1 << 1;
    const MASK_WORDS: usize = 16; // 1024 nodes, the kernel's largest MAX_NUMNODES
    let mut mask = [0u64; MASK_WORDS];
    let index = node as usize;
    if index >= MASK_WORDS * 64 {
        return Err(Error::NumaNodeMissing {
            node,
            available: numa_nodes(),
        });
    }
    mask[index / 64] |= 1 << (index % 64);
    // SAFETY: mbind(2) reads `mask` (MASK_WORDS * 64 bits, passed as maxnode + 1 as the
    // kernel expects) and changes the policy of our own mapping [base, base + len).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            base as libc::c_ulong,
            len as libc::c_ulong,
            MPOL_BIND,
            mask.as_ptr(),
            (MASK_WORDS * 64 + 1) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if rc != 0 {
        return Err(Error::NumaBind {
            node,
            source: std::io::Error::last_os_error().into(),
        });
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn bind_to_node(_base: *mut u8, _len: usize, node: u32) -> Result<()> {
    Err(Error::NumaBind {
        node,
        source: std::io::Error::new(std::io::ErrorKind::Unsupported, "mbind is Linux-only").into(),
    })
}
