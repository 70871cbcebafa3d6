//! The crate's error type: everything the page cache can refuse, each variant carrying
//! what a caller needs to act on it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::page::FileId;

/// Everything `megalon-pagecache` can refuse.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object protocol refused (full log, busy record, exhausted slots, ...).
    #[error(transparent)]
    Core(#[from] megalon_core::Error),
    /// A system call on a data file failed.
    #[error("{operation} {path}: {source}", path = path.display())]
    Io {
        /// What we were doing.
        operation: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The handle names no file open on this host (never opened here, or closed).
    #[error("{file} is not open on this host")]
    UnknownFile {
        /// The handle given.
        file: FileId,
    },
    /// A write would end past the end of the file. Files keep the length they have when
    /// they are opened: the cache never grows a file.
    #[error(
        "a write of {len_bytes} bytes at offset {offset} ends past the end of {path} \
         ({file_len_bytes} bytes, fixed when it was opened)",
        path = path.display()
    )]
    WritePastEnd {
        /// The file.
        path: PathBuf,
        /// Where the write starts.
        offset: u64,
        /// How long it is.
        len_bytes: u64,
        /// The file's length when it was opened.
        file_len_bytes: u64,
    },
    /// A dirty page could not be written back because its file is not open on the host
    /// that had to write it (in its release hook): the page keeps its record and stays
    /// cached until a host that has the file open writes it back.
    #[error("page {page} of inode {inode} is dirty, but its file is not open on host {host}")]
    FileNotOpen {
        /// The page's file.
        inode: u64,
        /// The page's index in the file.
        page: u64,
        /// The host that tried.
        host: u32,
    },
    /// A dirty page's release found its file's fence on the page held: another write-back
    /// of it (one of a host declared dead, whose `pwrite` may not have returned yet) has
    /// not finished. The release is refused (the page keeps its record and stays cached)
    /// rather than have its bytes overwritten by that write's older ones.
    #[error("page {page} of {path} is being written back by another holder", path = path.display())]
    WriteBackInFlight {
        /// The file.
        path: PathBuf,
        /// The page's index in the file.
        page: u64,
    },
    /// The pod was not formatted by [`PageCache::create_pod`](crate::PageCache::create_pod).
    #[error("the pod is not formatted for a page cache: {reason}")]
    NotAPageCachePod {
        /// What does not match.
        reason: &'static str,
    },
    /// A configuration parameter is outside its limits.
    #[error("{parameter} = {value} is invalid: {reason} {bound}")]
    BadConfig {
        /// The configuration field.
        parameter: &'static str,
        /// The value given.
        value: u64,
        /// Which limit it breaks: "below the minimum of" or "above the limit of".
        reason: &'static str,
        /// The limit.
        bound: u64,
    },
    /// A page's admission lock stayed held past the host's wait limit.
    #[error("admission lock {lock} stayed held by host {holder_host} for {waited_ms} ms")]
    AdmissionLockBusy {
        /// The lock word's index.
        lock: u64,
        /// The host that held it when we gave up.
        holder_host: u32,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The cache is full and the clock hand found no page it could evict (every page
    /// recently used, locked, or refused by its release hook) within the wait limit.
    #[error(
        "the cache is full ({cached_pages} of {capacity_pages} pages) and the clock hand \
         evicted nothing in {waited_ms} ms"
    )]
    NoVictim {
        /// Pages counted in the cache (admitted or being admitted).
        cached_pages: u64,
        /// The cache's capacity.
        capacity_pages: u64,
        /// How long we tried.
        waited_ms: u64,
    },
    /// Every entry of this host's admissions in progress stayed taken by its other
    /// threads' admissions past the wait limit.
    #[error("{in_progress} admissions of this host stayed in progress for {waited_ms} ms")]
    AdmissionsBusy {
        /// Admissions a host can have in progress at once.
        in_progress: u64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// A page was evicted again each time it was admitted, before this thread could use it.
    #[error("page {page} of {path} was evicted {rounds} times before it could be used", path = path.display())]
    PageKeptLeaving {
        /// The file.
        path: PathBuf,
        /// The page's index in the file.
        page: u64,
        /// Admissions tried.
        rounds: u32,
    },
    /// A write across pages failed at a page after the pages before it took their bytes:
    /// the first `written_bytes` bytes of the write are in the cache (dirty, on their way
    /// to the file like any write's), the rest are not. A page's write is all or nothing;
    /// a write across pages is not. Write the rest again to finish it. (If `source` is
    /// `HostDeclaredDead`, the page it stopped at may be in the cache too, whole: its
    /// recovery kept it if its bytes had reached memory. Nothing after that page is.)
    #[error("a write stopped after its first {written_bytes} bytes: {source}")]
    WriteIncomplete {
        /// Bytes of the write, from its start, that are in the cache.
        written_bytes: u64,
        /// Why the rest is not.
        #[source]
        source: Box<Error>,
    },
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        operation: &'static str,
        path: &std::path::Path,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            operation,
            path: path.to_owned(),
            source: Arc::new(source),
        }
    }
}
