//! Data files: what a host keeps per open file, and its page reads and writes.
//!
//! A file keeps the length it has when it is opened: reads stop there, writes past it are
//! refused. A page is admitted with the file's bytes as they are then (up to the file's
//! end then: another host may have opened it longer), the rest zeros, and written back
//! only as far as its trailer says the file's bytes and the writes reach
//! ([`crate::page::PageTrailer`]): never the zeros over bytes the file got since, nor
//! short of what a host that opened the file longer wrote.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fence::PageFence;
use crate::page::FILE_PAGE_BYTES;

/// The file's name in the pod: its inode number, mixed with its birth time where the
/// file system keeps one. An inode number alone names another file once the file is
/// removed: ext4 and xfs give it to the next file created, at once, and the pod, which
/// keeps a closed file's pages, served the removed file's bytes as the new file's (and a
/// write-back of one of them would have put them into it). Every host of one kernel
/// reads the same birth time, so they all name the file alike.
pub(crate) fn identity(metadata: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(born) = metadata.created() else {
        return metadata.ino();
    };
    let born = born
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&metadata.ino().to_le_bytes());
    bytes[8..16].copy_from_slice(&born.as_secs().to_le_bytes());
    bytes[16..].copy_from_slice(&born.subsec_nanos().to_le_bytes());
    megalon_core::inspect::fnv1a64(&bytes)
}

/// A file open on this host.
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    /// Its name in the pod ([`identity`]): the inode number, with its birth time.
    pub(crate) inode: u64,
    /// The length when it was opened, which the cache keeps.
    pub(crate) len_bytes: u64,
}

impl OpenFile {
    pub(crate) fn open(path: &Path) -> Result<OpenFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening", path, e))?;
        let metadata = file
            .metadata()
            .map_err(|e| Error::io("reading the metadata of", path, e))?;
        Ok(OpenFile {
            path: path.to_owned(),
            file,
            inode: identity(&metadata),
            len_bytes: metadata.len(),
        })
    }

    /// The bytes of page `page` that lie inside the file: `start..start + len`.
    fn extent(&self, page: u64) -> (u64, usize) {
        let start = page.saturating_mul(FILE_PAGE_BYTES);
        let len = self.len_bytes.saturating_sub(start).min(FILE_PAGE_BYTES);
        (start, len as usize)
    }

    /// Reads page `page` from the file into `bytes`, up to the file's end as it is now
    /// (at least this host's length); what lies past it is zeros. Returns how many bytes
    /// are the file's.
    pub(crate) fn read_page(&self, page: u64, bytes: &mut [u8]) -> Result<usize> {
        let (start, mut len) = self.extent(page);
        if len < FILE_PAGE_BYTES as usize {
            // Past this host's length: another host may have opened the file longer.
            let now = self
                .file
                .metadata()
                .map_err(|e| Error::io("reading the metadata of", &self.path, e))?
                .len();
            len = now
                .max(self.len_bytes)
                .saturating_sub(start)
                .min(FILE_PAGE_BYTES) as usize;
        }
        // Up to `len`, or the end if the file was cut since.
        let read = self.read_within_page(page, 0, &mut bytes[..len])?;
        bytes[read..FILE_PAGE_BYTES as usize].fill(0);
        Ok(read)
    }

    /// Reads the file's bytes of page `page` from byte `from` of the page into `buf`, as
    /// far as the file goes now (the rest of `buf` is left as it is). Returns how many.
    pub(crate) fn read_within_page(&self, page: u64, from: usize, buf: &mut [u8]) -> Result<usize> {
        let start = page.saturating_mul(FILE_PAGE_BYTES) + from as u64;
        let mut read = 0;
        while read < buf.len() {
            match self.file.read_at(&mut buf[read..], start + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("reading a page of", &self.path, e)),
            }
        }
        Ok(read)
    }

    /// Writes page `page` to the file: its first `valid_bytes` bytes (its trailer's
    /// count: the file's bytes when it was admitted and what writes wrote).
    pub(crate) fn write_page(&self, page: u64, bytes: &[u8], valid_bytes: u32) -> Result<()> {
        let start = page.saturating_mul(FILE_PAGE_BYTES);
        let len = (valid_bytes as usize).min(FILE_PAGE_BYTES as usize);
        self.file
            .write_all_at(&bytes[..len], start)
            .map_err(|e| Error::io("writing a page back to", &self.path, e))
    }

    /// Takes this file's fence on page `page`: a write lock on the page's bytes in the
    /// file, which every host's write-back holds from its look at `still_held` through its
    /// `pwrite`, and which waits for the holder another host (or process, or machine) has.
    ///
    /// The lease covers a host paused between two instructions, not one blocked inside
    /// `pwrite`: a write-back that looked, then blocked in the kernel past its lease, would
    /// land its older bytes after its recovery's host wrote and `fsync`ed newer ones. The
    /// lock is the file system's, so it outlives the lease: the later write-back waits
    /// until the blocked `pwrite` returns. It goes with the holder's open file (an
    /// open-file-description lock on Linux), released when it drops or when the holder's
    /// process (or, on a shared file system, its machine) is gone.
    pub(crate) fn fence_page(&self, page: u64) -> Result<PageFence<'_>> {
        self.take_fence(page, true)
            .map(|fence| fence.expect("a waiting lock is taken or fails"))
    }

    /// [`OpenFile::fence_page`] without waiting: `None` while another holder has it.
    pub(crate) fn try_fence_page(&self, page: u64) -> Result<Option<PageFence<'_>>> {
        self.take_fence(page, false)
    }

    fn take_fence(&self, page: u64, wait: bool) -> Result<Option<PageFence<'_>>> {
        let start = page.saturating_mul(FILE_PAGE_BYTES);
        loop {
            match PageFence::take(&self.file, start, FILE_PAGE_BYTES, wait) {
                Ok(fence) => return Ok(Some(fence)),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Held by another (EAGAIN, or EACCES on some systems).
                Err(e)
                    if !wait && matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) =>
                {
                    return Ok(None)
                }
                Err(e) => {
                    return Err(Error::io(
                        "locking a page for its write-back to",
                        &self.path,
                        e,
                    ))
                }
            }
        }
    }

    pub(crate) fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("syncing", &self.path, e))
    }
}
