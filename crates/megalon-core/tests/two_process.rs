//! Two processes share one pod file on tmpfs: each sees the other's SCR words, its row
//! in the host table, and the LNR bytes it wrote once both follow the flush protocol.
//!
//! The test binary re-runs itself as the second process: the parent test spawns
//! `current_exe() --exact child_host`, with the pod's path and the memory kind in the
//! environment; `child_host` does nothing when that variable is absent (a normal run).
//! The parent creates the pod and joins as host 0, the child opens it and joins as host 1.
//!
//! Two words in the unused upper half of the reclaimer's line are the mailbox:
//! the first is the parent's, the second the child's. Each process stores its phase in
//! its own word with Release and waits for the other's with Acquire:
//!
//! | phase | child (host 1) has              | parent (host 0) has                           |
//! |-------|---------------------------------|-----------------------------------------------|
//! | 1     | joined, read (cached) slot 1    | seen both hosts in the table, cached slot 0   |
//! | 2     | written slot 0 back and fenced  | read slot 0, written slot 1 back and fenced   |
//! | 3     | read slot 1                     | seen the child done: the child may leave      |
//!
//! With simulated memory each reader first reads its cached copy without a flush and
//! sees the old bytes, then flushes, fences and sees the new ones.
//!
//! Every wait is bounded by [`WAIT_BOUND`]; the parent also stops waiting as soon as the
//! child exits, and kills the child if the test fails first.

#![cfg(target_os = "linux")]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{ChildProcess, RemoveOnDrop, WAIT_BOUND};
use megalon_core::{Backing, Host, HostOptions, Join, MemoryKind, Pod, PodConfig, SimulatedConfig};

/// The pod file the child opens; absent in a normal test run.
const POD_ENV: &str = "MEGALON_TWO_PROCESS_POD";
/// The child's memory kind: `hardware` or `simulated`.
const MEMORY_ENV: &str = "MEGALON_TWO_PROCESS_MEMORY";
/// The test the child runs.
const CHILD_TEST: &str = "child_host";

const PARENT_HOST: u32 = 0;
const CHILD_HOST: u32 = 1;
/// Spans two lines, as a log entry does.
const MESSAGE_BYTES: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Hardware,
    Simulated,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Hardware => "hardware",
            Kind::Simulated => "simulated",
        }
    }

    fn parse(name: &str) -> Kind {
        match name {
            "hardware" => Kind::Hardware,
            "simulated" => Kind::Simulated,
            other => panic!("{MEMORY_ENV}={other}: expected hardware or simulated"),
        }
    }

    /// No pump (its log replay would touch the cache between the test's accesses), and
    /// random eviction off, so a cached line stays cached until flushed.
    fn options(self, seed: u64) -> HostOptions {
        HostOptions::new()
            .memory(self.memory(seed))
            .pump_interval(None)
    }

    fn memory(self, seed: u64) -> MemoryKind {
        match self {
            Kind::Hardware => MemoryKind::Hardware,
            Kind::Simulated => MemoryKind::Simulated(SimulatedConfig {
                seed,
                capacity_lines: 1024,
                random_eviction_one_in: 0,
            }),
        }
    }
}

fn config() -> PodConfig {
    PodConfig::new().lnr_bytes(1 << 20)
}

/// The bytes host `writer` puts in its slot: no other writer's look the same.
fn message(writer: u32) -> Vec<u8> {
    (0..MESSAGE_BYTES)
        .map(|i| (i as u8).wrapping_mul(3) ^ (0xa0 + writer as u8))
        .collect()
}

/// The slot host `writer` writes and the other host reads.
fn slot_of(pod: &Pod, writer: u32) -> u64 {
    pod.layout().slot_offset(u64::from(writer))
}

/// `(parent's word, child's word)`.
fn mailbox(pod: &Pod) -> (&AtomicU64, &AtomicU64) {
    // The upper half of the reclaimer's line is unused; the lower half counts records.
    let at = pod.layout().reclaimer_offset + 32;
    (pod.scr_u64(at), pod.scr_u64(at + 8))
}

fn read(host: &Host, offset: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MESSAGE_BYTES];
    host.memory().read(offset, &mut buf);
    buf
}

/// The writer's side of publishing LNR bytes: write, write back, fence, then the Release
/// store of `phase` (paired with the reader's Acquire load in its wait).
fn publish(host: &Host, offset: u64, bytes: &[u8], word: &AtomicU64, phase: u64) {
    host.memory().write(offset, bytes);
    host.memory().write_back(offset, bytes.len());
    host.memory().fence();
    word.store(phase, Ordering::Release);
}

/// The reader's side, after its Acquire load saw the writer's phase: with simulated
/// memory, show the line cached before the update is stale; then flush, fence, read.
fn read_published(host: &Host, kind: Kind, offset: u64, expected: &[u8]) {
    if kind == Kind::Simulated {
        let stale_before = host
            .memory()
            .simulated_stats()
            .expect("simulated")
            .stale_lines_served;
        assert_eq!(
            read(host, offset),
            vec![0; MESSAGE_BYTES],
            "host {}: without a flush the lines cached before the update answer",
            host.id()
        );
        let stale_after = host
            .memory()
            .simulated_stats()
            .expect("simulated")
            .stale_lines_served;
        assert_eq!(stale_after - stale_before, 2, "both lines were stale");
    }
    host.memory().flush(offset, expected.len());
    host.memory().fence();
    assert_eq!(
        read(host, offset),
        expected,
        "host {}: after flush and fence the other process's bytes",
        host.id()
    );
}

fn host_rows(pod: &Pod) -> Vec<(u32, u32)> {
    pod.hosts()
        .iter()
        .map(|info| (info.host, info.pid))
        .collect()
}

/// The child process, run by the parent tests below; a no-op in a normal run.
#[test]
fn child_host() {
    let Ok(path) = std::env::var(POD_ENV) else {
        return;
    };
    let kind = Kind::parse(&std::env::var(MEMORY_ENV).expect("the parent names the memory"));
    let pod = Arc::new(Pod::open(Backing::file(&path)).expect("opening the parent's pod"));
    let host = Host::join(&pod, Join::As(CHILD_HOST), kind.options(2)).expect("joining as 1");
    let (parent_word, child_word) = mailbox(&pod);
    let parent_slot = slot_of(&pod, PARENT_HOST);
    let wait_parent = |phase: u64, what: &str| {
        let deadline = Instant::now() + WAIT_BOUND;
        // Acquire: pairs with the parent's Release store of `phase`.
        while parent_word.load(Ordering::Acquire) < phase {
            assert!(
                Instant::now() < deadline,
                "child: waited {WAIT_BOUND:?} for the parent {what} (phase {phase})"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };

    assert_eq!(read(&host, parent_slot), vec![0; MESSAGE_BYTES]);
    // Release: pairs with the parent's Acquire wait; our host-table row is written.
    child_word.store(1, Ordering::Release);
    wait_parent(1, "to see us joined");
    let parent_pid = std::os::unix::process::parent_id();
    assert_eq!(
        host_rows(&pod),
        [(PARENT_HOST, parent_pid), (CHILD_HOST, std::process::id())]
    );

    publish(
        &host,
        slot_of(&pod, CHILD_HOST),
        &message(CHILD_HOST),
        child_word,
        2,
    );
    wait_parent(2, "to publish its slot");
    read_published(&host, kind, parent_slot, &message(PARENT_HOST));
    child_word.store(3, Ordering::Release);
    wait_parent(3, "to let us leave");
    host.leave();
}

/// Removes the pod file when the test ends, however it ends.
fn parent(kind: Kind, test_name: &str) {
    let path = PathBuf::from(format!(
        "/dev/shm/megalon-{}-{}.pod",
        std::process::id(),
        test_name
    ));
    let _remove = RemoveOnDrop(vec![path.clone()]);
    let pod = Arc::new(Pod::create(&config(), Backing::file(&path)).expect("creating the pod"));
    let host = Host::join(&pod, Join::As(PARENT_HOST), kind.options(1)).expect("joining as 0");
    let (parent_word, child_word) = mailbox(&pod);
    let child_slot = slot_of(&pod, CHILD_HOST);
    let mut child = ChildProcess::spawn(
        CHILD_TEST,
        &[
            (POD_ENV, path.as_os_str()),
            (MEMORY_ENV, kind.name().as_ref()),
        ],
    );

    child.wait_for(child_word, 1, "to join");
    let both = [(PARENT_HOST, std::process::id()), (CHILD_HOST, child.pid())];
    assert_eq!(host_rows(&pod), both, "both processes in the host table");
    assert_eq!(read(&host, child_slot), vec![0; MESSAGE_BYTES]);
    parent_word.store(1, Ordering::Release);

    child.wait_for(child_word, 2, "to publish its slot");
    read_published(&host, kind, child_slot, &message(CHILD_HOST));
    publish(
        &host,
        slot_of(&pod, PARENT_HOST),
        &message(PARENT_HOST),
        parent_word,
        2,
    );

    child.wait_for(child_word, 3, "to read our slot");
    assert_eq!(host_rows(&pod), both, "both still joined");
    parent_word.store(3, Ordering::Release);
    child.assert_exits_successfully();
    assert_eq!(
        host_rows(&pod),
        [(PARENT_HOST, std::process::id())],
        "the child left"
    );
}

#[test]
fn processes_exchange_lnr_bytes_with_hardware_memory() {
    parent(Kind::Hardware, "hardware");
}

#[test]
fn processes_exchange_lnr_bytes_with_simulated_memory() {
    parent(Kind::Simulated, "simulated");
}
