//! A host paused past its lease in the middle of a write-back (holding a page's record
//! lock, its bytes read) is declared dead and recovered; it then goes on. What it does
//! after its recovery must not undo what the other hosts did since: their writes must
//! still reach the file at their `fsync`. Built with the `chaos` feature only (`cargo test
//! -p megalon-pagecache --features chaos --test late_writer`).
#![cfg(feature = "chaos")]

mod common;

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use common::{data_file, join, on_disk, options, simulated, tmpfs_dir, wait_recovered, PAGE};
use megalon_core::chaos::{self, Point};
use megalon_core::{Backing, MemoryKind, Pod, SimulatedConfig};
use megalon_pagecache::{PageCache, PageCacheConfig};

/// A pod in a file on tmpfs (so with undo images: recovery unlocks a dead host's locks),
/// removed when the returned path drops.
fn file_pod(config: &PageCacheConfig) -> (Arc<Pod>, tempfile::TempPath) {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let path: PathBuf = tmpfs_dir().join(format!(
        "megalon-pagecache-late-writer-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let cleanup = tempfile::TempPath::try_from_path(&path).expect("an absolute path");
    let pod = PageCache::create_pod(config, Backing::file(path)).expect("creating the pod");
    assert!(pod.config().undo_images());
    (pod, cleanup)
}

/// A simulated cache that never evicts on its own: lines it holds stay (stale, once
/// another host writes the page).
fn keeping(seed: u64) -> MemoryKind {
    MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines: 8192,
        random_eviction_one_in: 0,
        settle_one_in: 0,
    })
}

/// Host `a` writes page 0 back (`fsync`) and is paused past its lease with the page's
/// record locked, after `write_start`: it is declared dead and recovered (its lock
/// undone), and `b` writes the page (its dirty bit set again) — then `a` goes on: its
/// copy of the page (what it held before the pause), its `pwrite`, and its clear of the
/// page's dirty bit. (It cleared the bit `b` had set: `b`'s `fsync` then found nothing
/// dirty and answered Ok with `a`'s bytes in the file, and an eviction dropped the page
/// as clean: `b`'s fsynced write was lost.)
#[test]
fn a_write_back_paused_past_its_lease_leaves_a_later_write_dirty() {
    let scene = a_write_back_paused_past_its_lease(1, 2);
    let PausedWriteBack {
        data, b, file_b, a, ..
    } = scene;
    b.write(file_b, 0, b"BBBB").unwrap();
    assert_eq!(b.dirty_pages(), 1, "b's write left the page dirty");
    // a wakes up and goes on with its write-back.
    a.goes_on();

    let dirty = b.dirty_pages();
    b.fsync(file_b).unwrap();
    let disk = on_disk(data.path());
    assert_eq!(
        &disk[..4],
        b"BBBB",
        "b's write was fsynced (Ok), the file holds {:?} (dirty pages before: {dirty})",
        String::from_utf8_lossy(&disk[..4])
    );
    evicted_then_read_as_bs(&b, file_b);
}

/// As above, but `b` also `fsync`s its write while `a` is paused: its bytes are in the
/// file, the page clean, and `a`, going on, must not write its older copy of the page
/// over them. (A guard: `a` finds the bit clear and writes nothing, before the fix too;
/// a pause between its look at the bit and its `pwrite` would still write, which only
/// the look at `still_held` before the `pwrite` rules out.)
#[test]
fn a_write_back_paused_past_its_lease_writes_nothing_over_a_later_fsync() {
    let scene = a_write_back_paused_past_its_lease(3, 4);
    let PausedWriteBack {
        data, b, file_b, a, ..
    } = scene;
    b.write(file_b, 0, b"BBBB").unwrap();
    b.fsync(file_b).unwrap();
    assert_eq!(&on_disk(data.path())[..4], b"BBBB");
    a.goes_on();

    let disk = on_disk(data.path());
    assert_eq!(
        &disk[..4],
        b"BBBB",
        "b's write was fsynced (Ok), the file holds {:?} after a went on",
        String::from_utf8_lossy(&disk[..4])
    );
    evicted_then_read_as_bs(&b, file_b);
}

/// `a` paused past its lease right after its write-back looked that it still held the
/// page's lock, before its `pwrite` (as one blocked inside `pwrite` past the lease is):
/// `b`'s write and `fsync` of the page must not be overwritten by `a`'s older bytes when
/// `a` goes on. `b`'s `fsync` waits for the page's fence, which `a` holds, until `a`'s
/// `pwrite` is done. (Before the fence, `b`'s `fsync` wrote `B`s, and `a` then wrote its
/// `A`s over them: the file held `A`s after an `fsync` of `B`s answered Ok.)
#[test]
fn a_write_back_past_its_lease_after_its_look_lands_before_a_later_fsync() {
    let scene = a_write_back_paused_past_its_lease_at(Point::HeldAfterLook, 5, 6);
    let PausedWriteBack {
        data, b, file_b, a, ..
    } = scene;
    b.write(file_b, 0, b"BBBB").unwrap();
    std::thread::scope(|scope| {
        let (done, fsynced) = channel();
        let b = &b;
        let fsync = scope.spawn(move || {
            let result = b.fsync(file_b);
            done.send(()).unwrap();
            result
        });
        // Without the fence, b's fsync finishes while a is paused.
        let finished_first = fsynced
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_ok();
        a.goes_on();
        fsync.join().unwrap().unwrap();
        let disk = on_disk(data.path());
        assert_eq!(
            &disk[..4],
            b"BBBB",
            "b's write was fsynced (Ok), the file holds {:?} after a went on (b's fsync \
             finished before a went on: {finished_first})",
            String::from_utf8_lossy(&disk[..4])
        );
    });
    evicted_then_read_as_bs(&b, file_b);
}

/// As above, but `b` evicts the page, whose release hook writes it back: the hook does
/// not wait for the fence (it may run on the pump), so the release is refused while `a`
/// holds it, and goes through once `a` is done.
#[test]
fn a_release_refused_while_a_write_back_past_its_lease_holds_the_page() {
    let scene = a_write_back_paused_past_its_lease_at(Point::HeldAfterLook, 7, 8);
    let PausedWriteBack {
        data, b, file_b, a, ..
    } = scene;
    b.write(file_b, 0, b"BBBB").unwrap();
    let refused = b.evict_page(file_b, 0);
    a.goes_on();
    assert!(
        matches!(
            &refused,
            Err(megalon_pagecache::Error::WriteBackInFlight { page: 0, .. })
        ),
        "b's eviction while a's write-back held the page: {refused:?}"
    );
    assert!(
        b.evict_page(file_b, 0).unwrap(),
        "the page was still cached"
    );
    assert_eq!(&on_disk(data.path())[..4], b"BBBB");
    let mut buf = [0u8; 4];
    b.read(file_b, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"BBBB");
}

/// `b` evicts page 0 and reads it back from the file: `b`'s `B`s.
fn evicted_then_read_as_bs(b: &PageCache, file_b: megalon_pagecache::FileId) {
    b.evict_page(file_b, 0).unwrap();
    let mut buf = [0u8; 4];
    b.read(file_b, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"BBBB");
}

/// `a` (a simulated cache of `seed_a` that keeps its lines) has written page 0 of a data
/// file as `A`s and read it back, and is paused past its lease in its `fsync`'s
/// write-back, holding the page's record locked after `write_start`; it has been declared
/// dead and recovered. `b` (of `seed_b`) has joined and opened the file.
struct PausedWriteBack {
    _pod_file: tempfile::TempPath,
    data: tempfile::NamedTempFile,
    b: PageCache,
    file_b: megalon_pagecache::FileId,
    a: APaused,
}

/// `a`, paused in its write-back.
struct APaused {
    go: std::sync::mpsc::Sender<()>,
    writer: std::thread::JoinHandle<megalon_pagecache::Result<()>>,
}

fn a_write_back_paused_past_its_lease(seed_a: u64, seed_b: u64) -> PausedWriteBack {
    a_write_back_paused_past_its_lease_at(Point::WriteAfterEventCheck, seed_a, seed_b)
}

/// As [`a_write_back_paused_past_its_lease`], `a` paused at `point` instead.
fn a_write_back_paused_past_its_lease_at(
    point: Point,
    seed_a: u64,
    seed_b: u64,
) -> PausedWriteBack {
    let (pod, pod_file) = file_pod(&PageCacheConfig::new(4).max_hosts(2));
    let data = data_file(2 * PAGE);
    let a: &'static PageCache = Box::leak(Box::new(join(&pod, options(keeping(seed_a)))));
    let file_a = a.open(data.path()).unwrap();
    let a_id = a.host().id();
    a.write(file_a, 0, &vec![b'A'; PAGE]).unwrap();
    // Its cache holds the page's lines, of the version it then locks.
    let mut page = vec![0u8; PAGE];
    a.read(file_a, 0, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == b'A'));

    let (paused, is_paused) = channel();
    let (go, resume) = channel::<()>();
    let writer = std::thread::spawn(move || {
        let paused = Mutex::new(paused);
        let resume = Mutex::new(resume);
        let done = Cell::new(false);
        chaos::with_hook(
            move |at| {
                if at == point && !done.get() {
                    done.set(true);
                    // Paused past its lease: its pump stops beating too.
                    a.host().inspect().freeze();
                    paused.lock().unwrap().send(()).unwrap();
                    resume.lock().unwrap().recv().unwrap();
                }
            },
            move || a.fsync(file_a),
        )
    });
    is_paused.recv().unwrap();
    let b = join(&pod, options(simulated(seed_b)));
    wait_recovered(&pod, a_id);
    let file_b = b.open(data.path()).unwrap();
    PausedWriteBack {
        _pod_file: pod_file,
        data,
        b,
        file_b,
        a: APaused { go, writer },
    }
}

impl APaused {
    /// `a` wakes up and goes on with its write-back, which answers that it was declared
    /// dead.
    fn goes_on(self) {
        self.go.send(()).unwrap();
        let late = self.writer.join().unwrap();
        assert!(late.is_err(), "a was declared dead: {late:?}");
    }
}
