//! Helpers shared by the page cache's integration tests: data files, pods, hosts, and the
//! plumbing of the tests that run a child process (the test binary re-runs itself as the
//! child, `current_exe() --exact <child test>`, which returns at once in a normal run
//! because its environment variable is absent; the pattern of megalon-core's
//! `tests/common`).

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use megalon_core::{Backing, HostOptions, Join, MemoryKind, Pod, SimulatedConfig};
use megalon_pagecache::{PageCache, PageCacheConfig, PageCacheOptions, FILE_PAGE_BYTES};

/// Longest wait on anything another thread or process does.
pub const WAIT_BOUND: Duration = Duration::from_secs(20);
/// Bytes of a page, as a `usize`.
pub const PAGE: usize = FILE_PAGE_BYTES as usize;

/// The byte a fresh test file holds at `offset` (never 0, so a page read as zeros shows).
pub fn original_byte(offset: usize) -> u8 {
    (offset % 251) as u8 + 1
}

/// A temporary data file of `len_bytes` bytes holding [`original_byte`].
pub fn data_file(len_bytes: usize) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    let bytes: Vec<u8> = (0..len_bytes).map(original_byte).collect();
    file.write_all(&bytes).expect("writing the data file");
    file.flush().expect("flushing the data file");
    file
}

/// A simulated non-coherent cache that evicts often and holds little (two pages' lines),
/// so that a missing flush or write-back shows.
pub fn simulated(seed: u64) -> MemoryKind {
    MemoryKind::Simulated(SimulatedConfig {
        seed,
        capacity_lines: 128,
        random_eviction_one_in: 16,
        ..SimulatedConfig::default()
    })
}

/// Options for a test host: `memory`, no background writer (tests drive write-back), and
/// waits bounded well below the test's own bound.
pub fn options(memory: MemoryKind) -> PageCacheOptions {
    PageCacheOptions::new()
        .host(
            HostOptions::new()
                .memory(memory)
                .wait_limit(Duration::from_secs(5)),
        )
        .writer_interval(None)
}

/// A heap pod for `config`.
pub fn heap_pod(config: &PageCacheConfig) -> Arc<Pod> {
    PageCache::create_pod(config, Backing::heap()).expect("creating the pod")
}

/// Joins `pod` with `options`.
pub fn join(pod: &Arc<Pod>, options: PageCacheOptions) -> PageCache {
    PageCache::join(pod, Join::AnyFree, options).expect("joining the pod")
}

/// The file's bytes on disk, read with plain `std::fs`.
pub fn on_disk(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("reading the data file")
}

/// A directory on tmpfs for pod files: `/dev/shm` if present, else the temp directory.
pub fn tmpfs_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// A child process running one test of this binary, its stdout read line by line on a
/// thread; killed (SIGKILL) on drop if it is still running.
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl ChildProcess {
    /// Runs the test `child_test` of this test binary as a child, with `env` set.
    pub fn spawn(child_test: &str, env: &[(&str, &std::ffi::OsStr)]) -> ChildProcess {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the child process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProcess {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most [`WAIT_BOUND`]) for the child to print a line containing `marker`
    /// (the test harness may have started the line), and returns it; fails if the
    /// child's output ends first.
    pub fn wait_for_line(&mut self, marker: &str) -> String {
        let deadline = std::time::Instant::now() + WAIT_BOUND;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return line,
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "the child printed no line with {marker:?} within {WAIT_BOUND:?}; \
                     it printed:\n{}",
                    self.seen.join("\n")
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "the child exited ({:?}) before printing {marker:?}; it printed:\n{}",
                    self.child.try_wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until the host table has no row for `id` (its recovery ended).
pub fn wait_recovered(pod: &Arc<Pod>, id: u32) {
    let start = std::time::Instant::now();
    while pod.hosts().iter().any(|row| row.host == id) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "host {id} never recovered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
