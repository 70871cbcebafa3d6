//! The files under a pod: how a new pod file appears at its path whole, and how processes
//! that open, create and replace pod files stay out of each other's way.
//!
//! - A new pod is built in a file of its own beside the path, and appears at the path
//!   only once its header is written (a link, which fails if another file came first; or
//!   a rename over the file it replaces). An opener never maps a half-written pod.
//! - Every `Pod` of a file holds a shared `flock` on it for as long as it lives: a file a
//!   process has open is in use, whether or not its hosts have joined yet (a pod just
//!   created has none). A creator replaces a file only while it holds the exclusive lock,
//!   and an opener takes its shared lock, then checks that the path still names the file
//!   it locked (else it opens the one that replaced it).
//! - An opener reads the header, checks the size and maps through one descriptor: what
//!   it maps is the file whose header it checked.
//!
//! The locks are this machine's only: processes on other machines that map one DAX
//! device are told apart by the host table's live hosts alone.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Takes `operation` (`libc::LOCK_SH` or `libc::LOCK_EX`, with `libc::LOCK_NB` to not
/// wait) on `file`. `Ok(false)`: not waiting, and another holder has it.
pub(crate) fn lock(file: &File, operation: libc::c_int, path: &Path) -> Result<bool> {
    loop {
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if operation & libc::LOCK_NB != 0 => return Ok(false),
            _ => {
                return Err(Error::Io {
                    operation: "locking",
                    path: path.to_owned(),
                    source: error.into(),
                })
            }
        }
    }
}

/// Whether `path` names the file `file` is open on now.
pub(crate) fn names(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(at_path), Ok(open)) => at_path.dev() == open.dev() && at_path.ino() == open.ino(),
        _ => false,
    }
}

/// A file backing must be a regular file, or nothing yet: a creator replaces what is at
/// the path, and a device node or a link replaced by a pod file is a surprise nobody
/// asked for (`Backing::dax` maps a device).
pub(crate) fn refuse_other_than_a_regular_file(path: &Path) -> Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let kind = metadata.file_type();
    let found = if kind.is_file() {
        return Ok(());
    } else if kind.is_symlink() {
        "a symbolic link (name the file it points to)"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device (map a device with Backing::dax)"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    };
    Err(Error::NotARegularFile {
        path: path.to_owned(),
        found,
    })
}

/// Refuses a pod of `total_bytes` in the file system of `path` when it has less room
/// than that: a pod file is sparse, and a page that finds no room when it is first
/// touched kills the process (`SIGBUS`), on tmpfs say. (Room taken by others later
/// still can; the pod is not reserved up front, which would commit its whole size.)
///
/// A file at `path`, which the new pod replaces, gives its room back only once the new
/// file has taken its path, and only if no process maps it (`replaced_gives_room`: a
/// [`Pod::create`](crate::Pod::create), which refuses a pod in use, or a file no process
/// holds, [`held_by_none`]). So the `format_bytes` the new pod's format touches before
/// that must fit in the room free now.
pub(crate) fn refuse_without_room(
    path: &Path,
    total_bytes: u64,
    format_bytes: u64,
    replaced_gives_room: bool,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return Ok(());
    };
    // SAFETY: statvfs(3) fills `stats`, a plain struct, from a NUL-terminated path.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut stats) } != 0 {
        return Ok(());
    }
    let free_bytes = free_bytes(&stats);
    refuse_past(path, format_bytes, free_bytes)?;
    let replaced_bytes = std::fs::symlink_metadata(path)
        .ok()
        .filter(|old| old.is_file() && replaced_gives_room)
        .map_or(0, |old| old.blocks().saturating_mul(512));
    refuse_past(path, total_bytes, free_bytes.saturating_add(replaced_bytes))
}

/// Whether no process holds the pod file at `path` (every process of a pod holds a shared
/// lock on its file for as long as it maps it): then replacing it gives its room back.
/// `false` if there is no such file, or it cannot be looked at.
pub(crate) fn held_by_none(path: &Path) -> bool {
    File::open(path)
        .is_ok_and(|file| matches!(lock(&file, libc::LOCK_EX | libc::LOCK_NB, path), Ok(true)))
}

/// Refuses a pod of `total_bytes` on `file`, a regular file standing for a DAX device
/// ([`Backing::dax`](crate::Backing::dax) maps any existing file), when the pages it has
/// not taken yet do not fit in its file system's room: a sparse file on a full tmpfs
/// kills the process at the format's first touch. A device passes.
pub(crate) fn refuse_sparse_without_room(file: &File, path: &Path, total_bytes: u64) -> Result<()> {
    let Ok(metadata) = file.metadata() else {
        return Ok(());
    };
    if !metadata.is_file() {
        return Ok(());
    }
    // SAFETY: fstatvfs(3) fills `stats`, a plain struct, from a descriptor we own.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut stats) } != 0 {
        return Ok(());
    }
    let taken_bytes = metadata.blocks().saturating_mul(512);
    refuse_past(
        path,
        total_bytes,
        free_bytes(&stats).saturating_add(taken_bytes),
    )
}

/// The room `stats` gives an unprivileged writer.
fn free_bytes(stats: &libc::statvfs) -> u64 {
    #[allow(clippy::useless_conversion)] // u64 on 64-bit Linux, not everywhere
    u64::from(stats.f_bavail).saturating_mul(u64::from(stats.f_frsize))
}

/// [`Error::NoRoomForPod`] when `needed_bytes` are more than `available_bytes`.
fn refuse_past(path: &Path, needed_bytes: u64, available_bytes: u64) -> Result<()> {
    if available_bytes < needed_bytes {
        return Err(Error::NoRoomForPod {
            path: path.to_owned(),
            needed_bytes,
            available_bytes,
        });
    }
    Ok(())
}

/// A new pod's file, beside the path it will take, under a name of its own; removed
/// when dropped unless it was put at its path.
pub(crate) struct NewFile {
    pub(crate) path: PathBuf,
    published: bool,
}

impl NewFile {
    /// Creates it (it must not exist), read-write.
    pub(crate) fn beside(target: &Path) -> Result<(NewFile, File)> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        // At most 200 bytes of the target's name: its own may be as long as a name can
        // be (255 bytes), and the new file's adds to it (a name taken is tried again).
        let name: String = target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .scan(0, |bytes, c| {
                *bytes += c.len_utf8();
                (*bytes <= 200).then_some(c)
            })
            .collect();
        // A name taken is another's: a creator of the same pid killed while it formatted
        // (a process of a pid namespace, a container, has the same pid every run), or
        // one of another pid namespace formatting now. The next name, up to 1000 times.
        let mut tries = 0;
        loop {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = target.with_file_name(format!(".{name}.{}.{n}.new", std::process::id()));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    let new = NewFile {
                        path,
                        published: false,
                    };
                    return Ok((new, file));
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && tries < 1000 => {
                    tries += 1;
                }
                Err(source) => {
                    return Err(Error::Io {
                        operation: "creating",
                        path,
                        source: source.into(),
                    })
                }
            }
        }
    }

    /// Puts it at `target` if nothing is there: `Ok(false)` if a file is.
    pub(crate) fn link(&mut self, target: &Path) -> Result<bool> {
        match std::fs::hard_link(&self.path, target) {
            Ok(()) => {
                // Its own name goes; the file stays at `target`.
                let _ = std::fs::remove_file(&self.path);
                self.published = true;
                Ok(true)
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(source) => Err(Error::Io {
                operation: "putting the new pod at",
                path: target.to_owned(),
                source: source.into(),
            }),
        }
    }

    /// Puts it at `target` in place of what is there.
    pub(crate) fn rename(&mut self, target: &Path) -> Result<()> {
        std::fs::rename(&self.path, target).map_err(|source| Error::Io {
            operation: "putting the new pod at",
            path: target.to_owned(),
            source: source.into(),
        })?;
        self.published = true;
        Ok(())
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
