//! Data files: what a host keeps per open file, and its page reads and writes.
//!
//! A file keeps the length it has when it is opened: reads stop there, writes past it are
//! refused, the part of the last page past the end is zeros in the cache and is never
//! written to the file. Writing a page back is the exception: another host may have
//! opened the file longer (it grew in between) and written the page, so a page that
//! reaches past this host's length is written up to the file's length now.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::page::FILE_PAGE_BYTES;

/// A file open on this host.
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) inode: u64,
    /// The length when it was opened, which the cache keeps.
    pub(crate) len_bytes: u64,
}

impl OpenFile {
    pub(crate) fn open(path: &Path) -> Result<OpenFile> {
        use std::os::unix::fs::MetadataExt;
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
            inode: metadata.ino(),
            len_bytes: metadata.len(),
        })
    }

    /// The bytes of page `page` that lie inside the file: `start..start + len`.
    fn extent(&self, page: u64) -> (u64, usize) {
        let start = page.saturating_mul(FILE_PAGE_BYTES);
        let len = self.len_bytes.saturating_sub(start).min(FILE_PAGE_BYTES);
        (start, len as usize)
    }

    /// Reads page `page` from the file into `bytes`; what lies past the end is zeros.
    pub(crate) fn read_page(
        &self,
        page: u64,
        bytes: &mut [u8; FILE_PAGE_BYTES as usize],
    ) -> Result<()> {
        let (start, len) = self.extent(page);
        self.file
            .read_exact_at(&mut bytes[..len], start)
            .map_err(|e| Error::io("reading a page of", &self.path, e))?;
        bytes[len..].fill(0);
        Ok(())
    }

    /// Writes page `page` to the file: only the part inside the file, as long as the
    /// file is now (at least this host's length: a page another host wrote past it is
    /// that host's to keep, not cut to this host's view).
    pub(crate) fn write_page(
        &self,
        page: u64,
        bytes: &[u8; FILE_PAGE_BYTES as usize],
    ) -> Result<()> {
        let (start, mut len) = self.extent(page);
        if len < bytes.len() {
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
        self.file
            .write_all_at(&bytes[..len], start)
            .map_err(|e| Error::io("writing a page back to", &self.path, e))
    }

    pub(crate) fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("syncing", &self.path, e))
    }
}
