//! Plumbing of the tests that run a second process on one pod file: the test binary
//! re-runs itself as the child (`current_exe() --exact <child test>`), which returns at
//! once in a normal run because its environment variable is absent.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest wait on the other process.
pub const WAIT_BOUND: Duration = Duration::from_secs(20);

/// Removes files (the pod, reports) when the test ends, however it ends.
pub struct RemoveOnDrop(pub Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The child process; killed on drop if it is still running (the test failed first).
pub struct ChildProcess {
    child: Child,
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Runs the test `child_test` of this test binary as a child, with `env` set.
    pub fn spawn(child_test: &str, env: &[(&str, &std::ffi::OsStr)]) -> ChildProcess {
        let child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied())
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
