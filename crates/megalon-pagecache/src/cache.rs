//! The page cache of one host: creating and joining a pod, files, the read and write
//! paths, `fsync`, and the background writer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use megalon_core::{Backing, Host, HostId, Join, Pod, ReleaseHook};
use parking_lot::{Mutex, RwLock};

use crate::config::{
    PageCacheConfig, PageCacheOptions, MAX_ADMISSIONS_PER_HOST, MAX_ADMISSION_LOCKS,
};
use crate::dirty::Shared;
use crate::error::{Error, Result};
use crate::file::OpenFile;
use crate::layout::{Regions, MAGIC};
use crate::page::{decode_key, page_key, FileId, PageTrailer, FILE_PAGE_BYTES, PAGE_OBJECT_BYTES};
use crate::stats::{Counter, PageCacheStats, WriteBack};

/// Times one page access admits the page before giving up (each time, another thread or
/// host evicted it before this one could use it).
pub const MAX_ADMISSION_ROUNDS: u32 = 64;

/// One host's page cache: a [`Host`] of the pod with the page cache's release hook, the
/// files open on it, and its background writer. Share it between the host's threads
/// (`&PageCache` is enough: it is `Sync`).
///
/// Dropping it stops the writer and leaves the pod; it does not write dirty pages back
/// (they stay in the pod for the other hosts): call [`PageCache::fsync`] or
/// [`PageCache::close`] first for files whose writes must reach the disk.
pub struct PageCache {
    pub(crate) inner: Arc<Inner>,
    writer: Option<JoinHandle<()>>,
}

/// What the host's threads and its background writer share.
pub(crate) struct Inner {
    pub(crate) host: Host,
    pub(crate) shared: Arc<Shared>,
    pub(crate) capacity_pages: u64,
    /// This host's value in an admission lock word it holds (`admission.rs`).
    pub(crate) lock_value: u64,
    /// Admissions whose create's outcome was unknown: the entry each counts in, its value
    /// there, and the log's tail when it failed. Each stays taken until this host has
    /// applied the log past that tail.
    pub(crate) unknown_admissions: Mutex<Vec<(u64, u64, u64)>>,
    stop: AtomicBool,
}

/// Host `host`'s value in an admission lock word it holds (`admission.rs`): the life of
/// its id (how many times the id has been joined) above the id + 1, so that a lock left
/// by a host that died is told from one its id's next holder takes (0 is free).
pub(crate) fn lock_value(pod: &Pod, host: HostId) -> u64 {
    let life = pod
        .hosts()
        .iter()
        .find(|row| row.host == host)
        .map_or(0, |row| row.joins);
    life << 8 | u64::from(host + 1)
}

impl PageCache {
    /// Creates a pod for a page cache on `backing` and formats its application regions.
    /// Hosts then [`join`](PageCache::join) it (a file backing can be opened by other
    /// processes with [`Pod::open`]).
    pub fn create_pod(config: &PageCacheConfig, backing: Backing) -> Result<Arc<Pod>> {
        let pod_config = config.pod_config_for(&backing)?;
        // The header is written before any other process can open the pod: one that
        // joins the moment the file appears finds it (not `NotAPageCachePod`).
        let mut formatted = None;
        let pod = Pod::create_with(&pod_config, backing, |pod| {
            formatted = Some(Self::format(config, pod));
        })?;
        formatted.expect("create_with formats the pod it creates")?;
        Ok(Arc::new(pod))
    }

    /// Writes the page cache's header into `pod`'s application SCR, the magic last.
    fn format(config: &PageCacheConfig, pod: &Pod) -> Result<()> {
        let regions = Regions::new(
            pod.layout(),
            config.admission_locks,
            config.admissions_per_host,
        )?;
        assert!(
            config.cache_pages <= regions.slot_count,
            "pod_config gives more slots than pages"
        );
        let header = regions.header;
        // Relaxed: published by the magic's Release store below.
        pod.scr_u64(header + 8)
            .store(config.cache_pages, Ordering::Relaxed);
        pod.scr_u64(header + 16)
            .store(config.admission_locks, Ordering::Relaxed);
        pod.scr_u64(header + 24)
            .store(config.admissions_per_host, Ordering::Relaxed);
        // Release: pairs with the Acquire load of the magic in `join`.
        pod.scr_u64(header).store(MAGIC, Ordering::Release);
        Ok(())
    }

    /// Joins `pod` (made by [`PageCache::create_pod`]) as host `which`, installs the
    /// release hook, and starts the background writer if `options` asks for one.
    pub fn join(pod: &Arc<Pod>, which: Join, options: PageCacheOptions) -> Result<PageCache> {
        let layout = pod.layout();
        let Some(header) = Regions::header_word(layout, 0) else {
            return Err(Error::NotAPageCachePod {
                reason: "it has no application SCR",
            });
        };
        // Acquire: pairs with the Release store of the magic in `create_pod`.
        if pod.scr_u64(header).load(Ordering::Acquire) != MAGIC {
            return Err(Error::NotAPageCachePod {
                reason: "its application SCR does not start with the page cache's magic",
            });
        }
        let capacity_pages = pod.scr_u64(header + 8).load(Ordering::Relaxed);
        let admission_locks = pod.scr_u64(header + 16).load(Ordering::Relaxed);
        if !(1..=MAX_ADMISSION_LOCKS).contains(&admission_locks) {
            return Err(Error::NotAPageCachePod {
                reason: "its admission lock count is out of range",
            });
        }
        let admissions_per_host = pod.scr_u64(header + 24).load(Ordering::Relaxed);
        if !(1..=MAX_ADMISSIONS_PER_HOST).contains(&admissions_per_host) {
            return Err(Error::NotAPageCachePod {
                reason: "its count of admissions per host is out of range",
            });
        }
        let regions = Regions::new(layout, admission_locks, admissions_per_host)?;
        if capacity_pages == 0 || capacity_pages > regions.slot_count {
            return Err(Error::NotAPageCachePod {
                reason: "its capacity is 0 or more than its slots",
            });
        }
        let shared = Arc::new(Shared {
            pod: Arc::clone(pod),
            regions,
            files: RwLock::default(),
            counters: Default::default(),
            last_error: Mutex::new(None),
            errors_remembered: Default::default(),
            host_id: AtomicU32::new(u32::MAX),
        });
        let hook = {
            let shared = Arc::clone(&shared);
            ReleaseHook::new(move |object| shared.release(object))
        };
        let host = Host::join(pod, which, options.host.release_hook(hook))?;
        shared.host_id.store(host.id(), Ordering::Relaxed);
        let lock_value = lock_value(pod, host.id());
        let inner = Arc::new(Inner {
            host,
            shared,
            capacity_pages,
            lock_value,
            unknown_admissions: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let writer = match options.writer_interval {
            Some(interval) => Some(Inner::start_writer(&inner, interval)?),
            None => None,
        };
        Ok(PageCache { inner, writer })
    }

    /// Opens the file at `path` (read and write) on this host and returns its handle.
    /// Opening a file that is open already returns the same handle. The file keeps the
    /// length it has now: reads stop there, writes past it are refused with
    /// [`Error::WritePastEnd`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FileId> {
        let file = OpenFile::open(path.as_ref())?;
        let id = FileId(file.inode);
        self.inner
            .shared
            .files
            .write()
            .entry(file.inode)
            .or_insert_with(|| Arc::new(file));
        Ok(id)
    }

    /// Writes `file`'s dirty pages back ([`PageCache::fsync`]) and closes it on this host.
    /// Its pages stay in the pod.
    pub fn close(&self, file: FileId) -> Result<()> {
        self.fsync(file)?;
        self.inner.shared.files.write().remove(&file.0);
        Ok(())
    }

    /// `file`'s length in bytes (fixed when it was opened).
    pub fn file_len(&self, file: FileId) -> Result<u64> {
        Ok(self.inner.file(file)?.len_bytes)
    }

    /// Reads `file` at byte `offset` into `buf`; returns the bytes read: fewer than
    /// `buf.len()` only when the file ends first (0 at or past its end). Pages that are
    /// not cached are admitted (read from the file) on the way.
    pub fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let open = self.inner.file(file)?;
        let len = (buf.len() as u64).min(open.len_bytes.saturating_sub(offset)) as usize;
        let mut done = 0;
        while done < len {
            let position = offset + done as u64;
            let page = position / FILE_PAGE_BYTES;
            let at = (position % FILE_PAGE_BYTES) as usize;
            let take = (FILE_PAGE_BYTES as usize - at).min(len - done);
            self.inner
                .read_page(&open, page, at, &mut buf[done..done + take])?;
            done += take;
        }
        Ok(len)
    }

    /// Writes `data` into `file` at byte `offset`, through the cache: the pages are marked
    /// dirty and reach the file later (background writer, eviction, reclaim, `fsync`). A
    /// write that would end past the file's end is refused before anything is written.
    /// Each page's part is written whole or not at all, the pages in order: an error at a
    /// page after the first is [`Error::WriteIncomplete`], naming how many bytes (the
    /// pages before it) are in the cache; any other error means nothing was written.
    /// Except `HostDeclaredDead` (this host was paused past its lease): the page it was
    /// writing is then whole or not at all as its recovery decided (kept, if its bytes had
    /// reached memory), so that page's part may be in the cache too, and nothing after it.
    pub fn write(&self, file: FileId, offset: u64, data: &[u8]) -> Result<()> {
        let open = self.inner.file(file)?;
        let len_bytes = data.len() as u64;
        if offset
            .checked_add(len_bytes)
            .is_none_or(|end| end > open.len_bytes)
        {
            return Err(Error::WritePastEnd {
                path: open.path.clone(),
                offset,
                len_bytes,
                file_len_bytes: open.len_bytes,
            });
        }
        let mut done = 0;
        while done < data.len() {
            let position = offset + done as u64;
            let page = position / FILE_PAGE_BYTES;
            let at = (position % FILE_PAGE_BYTES) as usize;
            let take = (FILE_PAGE_BYTES as usize - at).min(data.len() - done);
            if let Err(error) = self
                .inner
                .write_page(&open, page, at, &data[done..done + take])
            {
                // The pages before this one took their bytes: say so (a page's write is
                // all or nothing, so these are exactly the first `done`; this page's
                // too, if this host was declared dead and its recovery kept them).
                return Err(match done {
                    0 => error,
                    _ => Error::WriteIncomplete {
                        written_bytes: done as u64,
                        source: Box::new(error),
                    },
                });
            }
            done += take;
        }
        Ok(())
    }

    /// Makes every write to `file` that completed before this call durable: writes the
    /// file's dirty pages back (whichever host dirtied them) and syncs the file's data.
    ///
    /// An error from the sync leaves the file as the kernel's `fdatasync` leaves it: the
    /// pages written back are clean in the cache by then, and a second `fsync` that
    /// answers `Ok` does not write them again (nor can the kernel say which of its pages
    /// it lost). Treat a failed `fsync` as data that may not be on disk, as with a file
    /// written without the cache.
    pub fn fsync(&self, file: FileId) -> Result<()> {
        let open = self.inner.file(file)?;
        self.inner.write_back(Some(open.inode), WriteBack::Fsync)?;
        open.sync_data()
    }

    /// Writes every dirty page of the files open on this host back (what the background
    /// writer does each round), without syncing. Returns the first error, after trying
    /// every page.
    pub fn write_back_dirty(&self) -> Result<()> {
        self.inner.write_back(None, WriteBack::Fsync)
    }

    /// Evicts page `page` of `file` from the pod (writing it back first if dirty).
    /// Returns whether it was cached.
    pub fn evict_page(&self, file: FileId, page: u64) -> Result<bool> {
        let open = self.inner.file(file)?;
        self.inner.evict_page(&page_key(open.inode, page))
    }

    /// Runs the clock hand until it evicts one page (of any file: the hand sweeps the
    /// whole pod). Returns `false` if no page is cached.
    pub fn evict_one(&self) -> Result<bool> {
        self.inner.evict_one()
    }

    /// Pages in the pod's cache now (as this host's replica knows them once caught up with
    /// the log), and admissions in progress on every live host.
    pub fn cached_pages(&self) -> u64 {
        self.inner
            .pages_in_use()
            .unwrap_or_else(|_| self.inner.host.inspect().replica_len())
    }

    /// The cache's capacity in pages.
    pub fn capacity_pages(&self) -> u64 {
        self.inner.capacity_pages
    }

    /// Pages whose dirty bit is set now, in the whole pod.
    pub fn dirty_pages(&self) -> u64 {
        self.inner.shared.dirty_records().count() as u64
    }

    /// Whether page `page` of `file` is cached (dirty or not) in the pod now.
    pub fn is_cached(&self, file: FileId, page: u64) -> Result<bool> {
        Ok(self.inner.host.lookup(&file.page_key(page))?.is_some())
    }

    /// What this host has done.
    pub fn stats(&self) -> PageCacheStats {
        self.inner
            .shared
            .counters
            .snapshot(self.inner.host.events())
    }

    /// The last error that background work hit and nobody was told of: a write-back of
    /// the background writer or of the release hook that failed, a release refused
    /// because the file is not open here. Taking it clears it.
    pub fn take_error(&self) -> Option<Error> {
        self.inner
            .shared
            .last_error
            .lock()
            .take()
            .map(|(_, error)| error)
    }

    /// The core host under the cache (for its counters, `lookup`, `make_read_shared`).
    pub fn host(&self) -> &Host {
        &self.inner.host
    }
}

impl Drop for PageCache {
    fn drop(&mut self) {
        // Release: pairs with the writer's Acquire load.
        self.inner.stop.store(true, Ordering::Release);
        if let Some(writer) = self.writer.take() {
            writer.thread().unpark();
            let _ = writer.join();
        }
    }
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("host", &self.inner.host)
            .field("capacity_pages", &self.inner.capacity_pages)
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(crate) fn file(&self, file: FileId) -> Result<Arc<OpenFile>> {
        self.shared.file(file.0).ok_or(Error::UnknownFile { file })
    }

    /// Copies `dst.len()` bytes at `at` of page `page` of `file`, admitting the page if it
    /// is not cached.
    fn read_page(&self, file: &OpenFile, page: u64, at: usize, dst: &mut [u8]) -> Result<()> {
        let key = page_key(file.inode, page);
        let mut missed = false;
        for _ in 0..MAX_ADMISSION_ROUNDS {
            if self.try_read(file, page, &key, at, dst)? {
                if !missed {
                    self.shared.counters.add(Counter::Hits);
                }
                return Ok(());
            }
            if !missed {
                self.shared.counters.add(Counter::Misses);
                missed = true;
            }
            self.admit(file, page, &key)?;
        }
        Err(Error::PageKeptLeaving {
            path: file.path.clone(),
            page,
            rounds: MAX_ADMISSION_ROUNDS,
        })
    }

    /// The hit path: `read_start`, copy only the bytes asked for, `read_end`, retried
    /// within the host's bound. `false` if the page is not cached.
    ///
    /// Bytes past the page's trailer count are not the file's: the page was admitted by a
    /// host that knew the file shorter, and the file grew outside the cache since (this
    /// host opened it longer). Those come from the file, read inside the ticket: a write
    /// that extends the page, or its write-back, meanwhile fails `read_end`, so the two
    /// parts are of one version.
    fn try_read(
        &self,
        file: &OpenFile,
        page: u64,
        key: &[u8],
        at: usize,
        dst: &mut [u8],
    ) -> Result<bool> {
        let retries = self.host.options().max_retries;
        for _ in 0..=retries {
            let ticket = match self.host.read_start(key) {
                Ok(ticket) => ticket,
                Err(megalon_core::Error::UnknownKey) => return Ok(false),
                Err(error) => return Err(error.into()),
            };
            self.host.memory().read(ticket.offset() + at as u64, dst);
            let mut trailer = [0u8; 4];
            self.host
                .memory()
                .read(ticket.offset() + PageTrailer::AT as u64, &mut trailer);
            let valid = PageTrailer::from_bytes(trailer).valid_bytes as usize;
            if at + dst.len() > valid {
                let from = at.max(valid);
                file.read_within_page(page, from, &mut dst[from - at..])?;
            }
            if self.host.read_end(ticket)? {
                self.touch(ticket.offset());
                return Ok(true);
            }
            // A write or an event overlapped the copy: the copy is not trusted; again.
        }
        Err(megalon_core::Error::RetriesExhausted { retries }.into())
    }

    /// The write path: `write_start`, write the bytes, set the page's dirty bit, then
    /// `write_end`; the page is admitted first if it is not cached.
    fn write_page(&self, file: &OpenFile, page: u64, at: usize, src: &[u8]) -> Result<()> {
        let key = page_key(file.inode, page);
        let mut missed = false;
        for _ in 0..MAX_ADMISSION_ROUNDS {
            match self.host.write_start(&key) {
                Ok(ticket) => {
                    // The trailer says how far the page holds what the file or a write put
                    // there (under the lock, the current version: write_start dropped any
                    // stale line).
                    let mut trailer = [0u8; 4];
                    ticket.read(PageTrailer::AT, &mut trailer)?;
                    let valid = u32::from_le_bytes(trailer) as usize;
                    if at > valid {
                        // Between its end and this write the page holds the cache's zeros:
                        // the file's bytes there first (this host has the file open), or
                        // the write-back would put the zeros over them.
                        let mut gap = vec![0u8; at - valid];
                        if let Err(error) = file.read_within_page(page, valid, &mut gap) {
                            self.host.write_end(ticket)?;
                            return Err(error);
                        }
                        ticket.write(valid, &gap)?;
                    }
                    // Through the ticket: straight to memory, never left in this host's
                    // cache (where a process killed in the middle would leave them to
                    // land after its recovery).
                    ticket.write(at, src)?;
                    let end = at + src.len();
                    if end > valid {
                        let trailer = PageTrailer {
                            valid_bytes: end as u32,
                        };
                        ticket.write(PageTrailer::AT, &trailer.bytes())?;
                    }
                    // Before write_end: while the record is locked nobody can write the
                    // page back, and from the unlock on every write-back sees the bit
                    // (DESIGN section 9, the paper's section 5).
                    self.shared.set_dirty(ticket.record());
                    // By its slot, not its offset: the writes went through the ticket,
                    // and an offset asked for has `write_end` write back every line of
                    // the page besides.
                    let offset = self.host.pod().layout().slot_offset(ticket.slot());
                    self.host.write_end(ticket)?;
                    self.touch(offset);
                    if !missed {
                        self.shared.counters.add(Counter::Hits);
                    }
                    return Ok(());
                }
                Err(megalon_core::Error::UnknownKey) => {
                    if !missed {
                        self.shared.counters.add(Counter::Misses);
                        missed = true;
                    }
                    self.admit(file, page, &key)?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(Error::PageKeptLeaving {
            path: file.path.clone(),
            page,
            rounds: MAX_ADMISSION_ROUNDS,
        })
    }

    /// Writes back every dirty page of file `only` (every open file if `None`). Tries
    /// every page and returns the first error.
    fn write_back(&self, only: Option<u64>, path: WriteBack) -> Result<()> {
        let mut first_error = None;
        for record in self.shared.dirty_records() {
            if let Err(error) = self.write_back_record(record, only, path) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes the page that holds `record` back if it is dirty and its file is open here
    /// (and is `only`, if given): `write_start` (no write can run meanwhile), read the
    /// bytes under the lock, `pwrite`, clear the dirty bit, `write_end`.
    fn write_back_record(&self, record: u32, only: Option<u64>, path: WriteBack) -> Result<()> {
        let Some(key) = self.host.record_owner(record)? else {
            // Freed meanwhile (its page was written back by the release hook first).
            return Ok(());
        };
        let Some((inode, page)) = decode_key(&key) else {
            return Ok(());
        };
        if only.is_some_and(|only| only != inode) {
            return Ok(());
        }
        let Some(file) = self.shared.file(inode) else {
            // Another host's file: one that has it open writes it back.
            return Ok(());
        };
        if !matches!(self.host.lookup(&key)?, Some(entry) if entry.record.is_some()) {
            // Gone, or read-shared (its record released meanwhile): the release hook wrote
            // it back, and a read-shared page is clean. (Without this, write_start would
            // allocate a record for a clean page, and maybe take one from another page.)
            return Ok(());
        }
        let ticket = match self.host.write_start(&key) {
            Ok(ticket) => ticket,
            // Evicted meanwhile: the release hook wrote it back.
            Err(megalon_core::Error::UnknownKey) => return Ok(()),
            // The page may have lost its record since the look above (reclaimed: the
            // release hook wrote it back), and write_start, finding it read-shared, tried
            // to allocate one: with every record a page's whose release this host cannot
            // do (its file not open here), `ScrRecordsExhausted`, with nothing of this
            // page left to write. Read-shared or gone now: it is clean.
            Err(error) => {
                return match self.host.lookup(&key)? {
                    Some(entry) if entry.record.is_some() => Err(error.into()),
                    _ => Ok(()),
                }
            }
        };
        // The page may hold another record by now (released, written again): the bit
        // that counts is the one of the record this lock is on.
        let locked = ticket.record();
        let result = if self.shared.is_dirty(locked) {
            let mut bytes = [0u8; PAGE_OBJECT_BYTES as usize];
            // Under the lock the page cannot change, and write_start dropped any stale
            // line: this is the current version.
            ticket.read(0, &mut bytes)?;
            let valid = PageTrailer::of(&bytes).valid_bytes;
            // Declared dead since write_start (paused past its lease): the lock is its
            // recovery's, which unlocked it, and another host may have written the page
            // and set its bit since. These bytes may be older than the file's (another
            // host's fsync may have written the new ones), and the bit is the new
            // write's: neither the pwrite nor the clear (write_end answers
            // HostDeclaredDead). Looked at again after the pwrite, which may be as long.
            // The look and the pwrite are inside the page's fence: a pwrite that blocks
            // past the lease keeps a later write-back of the page waiting until it returns.
            file.fence_page(page).and_then(|_fence| {
                if !ticket.still_held() {
                    return Ok(());
                }
                file.write_page(page, &bytes, valid).map(|()| {
                    if ticket.still_held() {
                        self.shared.clear_dirty(locked);
                        self.shared.counters.wrote_back(path);
                    }
                })
            })
        } else {
            Ok(())
        };
        self.host.write_end(ticket)?;
        result
    }

    fn start_writer(inner: &Arc<Inner>, interval: Duration) -> Result<JoinHandle<()>> {
        let id = inner.host.id();
        let inner = Arc::clone(inner);
        std::thread::Builder::new()
            .name(format!("megalon-pagecache-writer-{id}"))
            .spawn(move || {
                // Acquire: pairs with the Release store in `PageCache::drop`.
                while !inner.stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(interval);
                    if inner.stop.load(Ordering::Acquire) {
                        break;
                    }
                    if let Err(error) = inner.write_back(None, WriteBack::Background) {
                        inner.shared.remember(error);
                    }
                }
            })
            .map_err(|e| {
                Error::io(
                    "starting the background writer of",
                    Path::new(&format!("page cache host {id}")),
                    e,
                )
            })
    }
}
