//! A page's fence in its data file: a write lock on the page's bytes, which every host's
//! write-back of the page holds from its look at `still_held` through its `pwrite`
//! ([`crate::file::OpenFile::fence_page`] says why). The crate's only `unsafe`: the
//! `fcntl` call.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// A page's fence, held until it drops.
#[must_use = "the fence is let go when it drops"]
pub(crate) struct PageFence<'a> {
    file: &'a File,
    start: u64,
    len: u64,
}

impl<'a> PageFence<'a> {
    /// Takes the write lock on bytes `start..start + len` of `file`, waiting for another
    /// holder if `wait` (else failing with `EAGAIN` or `EACCES` while one holds it).
    pub(crate) fn take(file: &'a File, start: u64, len: u64, wait: bool) -> std::io::Result<Self> {
        lock(file, start, len, libc::F_WRLCK as libc::c_short, wait)?;
        Ok(PageFence { file, start, len })
    }
}

impl Drop for PageFence<'_> {
    fn drop(&mut self) {
        // An unlock of a lock held does not fail (its errors are of bad arguments), and
        // the lock goes with the file's description at the latest.
        let _ = lock(
            self.file,
            self.start,
            self.len,
            libc::F_UNLCK as libc::c_short,
            false,
        );
    }
}

/// Sets (`kind` `F_WRLCK`) or clears (`F_UNLCK`) the lock on `start..start + len` of
/// `file`. On Linux an open-file-description lock, so that two hosts of one process (each
/// with the file open on its own) exclude each other; elsewhere a process's lock (hosts of
/// one process share it).
fn lock(file: &File, start: u64, len: u64, kind: libc::c_short, wait: bool) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    let command = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    #[cfg(not(target_os = "linux"))]
    let command = if wait { libc::F_SETLKW } else { libc::F_SETLK };
    let overflow = |_| std::io::Error::from_raw_os_error(libc::EOVERFLOW);
    // SAFETY: all zeroes is a valid `flock` (integers only); `l_pid` stays 0, as
    // open-file-description locks require.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = libc::off_t::try_from(start).map_err(overflow)?;
    lock.l_len = libc::off_t::try_from(len).map_err(overflow)?;
    // SAFETY: fcntl on a descriptor `file` owns, with a pointer to a valid `flock` that
    // lives across the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), command, &mut lock as *mut libc::flock) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
