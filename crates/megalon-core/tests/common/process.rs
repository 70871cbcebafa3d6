//! Plumbing of the tests that run a second process on one pod file: the test binary
//! re-runs itself as the child (`current_exe() --exact <child test>`), with the pod's path
//! and the memory kind in its environment; the child test returns at once in a normal run,
//! where they are absent. The parent creates the pod and joins as host 0, the child opens
//! it and joins as host 1.
//!
//! Two words in the unused upper half of the reclaimer's line are the [`mailbox`]: the
//! first is the parent's, the second the child's. Each process stores its phase in its own
//! word with Release and waits for the other's with Acquire. Every wait is bounded by
//! [`WAIT_BOUND`]; the parent also stops waiting as soon as the child exits, and kills the
//! child if the test fails first.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig};
use tempfile::TempPath;

/// Longest wait on the other process.
pub const WAIT_BOUND: Duration = Duration::from_secs(20);

/// The pod file the child opens; absent in a normal test run.
const POD_ENV: &str = "MEGALON_TEST_CHILD_POD";
/// The memory kind of the run, by its name (`hardware` or `simulated`).
const MEMORY_ENV: &str = "MEGALON_TEST_CHILD_MEMORY";

/// The parent's host id.
pub const PARENT_HOST: u32 = 0;
/// The child's host id.
pub const CHILD_HOST: u32 = 1;

// Not every test binary that includes this module uses the macro.
#[allow(unused_macros)]
/// The two tests of a parent function: `$parent` run on real memory by the test
/// `$hardware`, and on simulated caches by the test `$simulated`.
macro_rules! parent_tests {
    ($parent:ident: $hardware:ident, $simulated:ident) => {
        #[test]
        fn $hardware() {
            $parent(megalon_core::MemoryKind::Hardware);
        }

        #[test]
        fn $simulated() {
            $parent(megalon_core::MemoryKind::simulated(0));
        }
    };
}
#[allow(unused_imports)]
pub(crate) use parent_tests;

/// The options of host `host` in a run on `memory`.
pub type Options = fn(memory: &MemoryKind, host: u32) -> HostOptions;

/// The parent's side of a run, as [`start_parent`] leaves it.
pub struct Parent {
    /// The parent's host, [`PARENT_HOST`].
    pub host: Host,
    /// The child, which joins as [`CHILD_HOST`].
    pub child: ChildProcess,
    /// The pod file.
    pub path: PathBuf,
    /// Files removed when the test ends, however it ends: the pod file, and any other put
    /// here.
    pub files: Vec<TempPath>,
}

/// Creates a pod of `config` in a file on tmpfs, joins it as [`PARENT_HOST`] and starts the
/// child running `child_test` on it, all on `memory` (each host with its `options`).
pub fn start_parent(
    child_test: &str,
    config: &PodConfig,
    memory: &MemoryKind,
    options: Options,
) -> Parent {
    let name = format!("megalon-{child_test}-{}-{memory}.pod", std::process::id());
    let path = megalon_workload::processes::shared_memory_dir().join(name);
    let files = vec![TempPath::try_from_path(&path).expect("an absolute path")];
    let pod = Arc::new(Pod::create(config, Backing::file(&path)).expect("creating the pod"));
    let host = Host::join(&pod, Join::As(PARENT_HOST), options(memory, PARENT_HOST))
        .expect("joining as the parent's host");
    let child = ChildProcess::spawn(child_test, &path, memory);
    Parent {
        host,
        child,
        path,
        files,
    }
}

/// In the child: opens the pod file its parent named and joins it as [`CHILD_HOST`] on the
/// memory its parent named, with `options`; `None` in a normal test run. Returns the host
/// and the pod file's path.
pub fn join_parents_pod(options: Options) -> Option<(Host, PathBuf)> {
    let path = PathBuf::from(std::env::var_os(POD_ENV)?);
    let memory = std::env::var(MEMORY_ENV).expect("the parent names the memory");
    let memory: MemoryKind = memory
        .parse()
        .unwrap_or_else(|e| panic!("{MEMORY_ENV}: {e}"));
    let pod = Arc::new(Pod::open(Backing::file(&path)).expect("opening the parent's pod"));
    let host = Host::join(&pod, Join::As(CHILD_HOST), options(&memory, CHILD_HOST))
        .expect("joining as the child's host");
    Some((host, path))
}

/// `memory` with a simulated cache (if it is one) of `capacity_lines` lines that evicts a
/// random line once in `eviction_one_in` accesses (0: only when full).
pub fn with_cache(memory: &MemoryKind, capacity_lines: usize, eviction_one_in: u64) -> MemoryKind {
    match memory {
        MemoryKind::Simulated(config) => MemoryKind::Simulated(SimulatedConfig {
            capacity_lines,
            random_eviction_one_in: eviction_one_in,
            ..config.clone()
        }),
        other => other.clone(),
    }
}

/// `(parent's word, child's word)`: the phases of the two processes.
pub fn mailbox(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    // The upper half of the reclaimer's line is unused; the lower half counts records.
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

/// The child's side of a wait: until the parent's `word` reaches `phase`.
pub fn wait_for_parent(word: &AtomicU64, phase: u64, what: &str) {
    let deadline = Instant::now() + WAIT_BOUND;
    // Acquire: pairs with the parent's Release store of `phase` (or is merely a stronger
    // load, for a progress word).
    while word.load(Ordering::Acquire) < phase {
        assert!(
            Instant::now() < deadline,
            "child: waited {WAIT_BOUND:?} for the parent {what} (phase {phase})"
        );
        std::thread::yield_now();
    }
}

/// The child process; killed on drop if it is still running (the test failed first).
pub struct ChildProcess {
    child: Child,
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Runs the test `child_test` of this test binary as a child, on the pod file `pod`
    /// with `memory` (see [`join_parents_pod`]).
    pub fn spawn(child_test: &str, pod: &Path, memory: &MemoryKind) -> ChildProcess {
        let child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
            .env(POD_ENV, pod)
            .env(MEMORY_ENV, memory.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the child process");
        ChildProcess {
            child,
            status: None,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("polling the child");
        }
        self.status
    }

    /// Everything the child printed (call once it has exited).
    pub fn output(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut pipe) = self.child.stdout.take() {
            let _ = pipe.read_to_string(&mut text);
        }
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    }

    /// Waits for one of the child's words to reach `phase`; fails if the child exits
    /// first or past the bound.
    pub fn wait_for(&mut self, child_word: &AtomicU64, phase: u64, what: &str) {
        let deadline = Instant::now() + WAIT_BOUND;
        // Acquire: pairs with the child's Release store of `phase` (or is merely a
        // stronger load, for a progress word).
        while child_word.load(Ordering::Acquire) < phase {
            if let Some(status) = self.exited() {
                panic!(
                    "the child exited ({status}) while we waited for it {what} (phase {phase}); \
                     its output:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "parent: waited {WAIT_BOUND:?} for the child {what} (phase {phase})"
            );
            std::thread::yield_now();
        }
    }

    /// Kills the child with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("killing the child");
        self.status = Some(self.child.wait().expect("reaping the child"));
    }

    /// Waits for the child to exit and asserts it succeeded.
    pub fn assert_exits_successfully(&mut self) {
        let deadline = Instant::now() + WAIT_BOUND;
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not exit within {WAIT_BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(
            status.success(),
            "the child failed ({status}); its output:\n{}",
            self.output()
        );
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
