//! Two processes share one pod file on tmpfs: each sees the other's SCR words, its row
//! in the host table, and the LNR bytes it wrote once both follow the flush protocol.
//!
//! The test binary re-runs itself as the second process, `child_host` (see
//! `common::process`). The phases of the mailbox:
//!
//! | phase | child (host 1) has              | parent (host 0) has                           |
//! |-------|---------------------------------|-----------------------------------------------|
//! | 1     | joined, read (cached) slot 1    | seen both hosts in the table, cached slot 0   |
//! | 2     | written slot 0 back and fenced  | read slot 0, written slot 1 back and fenced   |
//! | 3     | read slot 1                     | seen the child done: the child may leave      |
//!
//! With simulated memory each reader first reads its cached copy without a flush and
//! sees the old bytes, then flushes, fences and sees the new ones.

#![cfg(target_os = "linux")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::process::{
    join_parents_pod, mailbox, start_parent, wait_for_parent, with_cache, Parent, CHILD_HOST,
    PARENT_HOST,
};
use megalon_core::{Host, HostOptions, MemoryKind, Pod, PodConfig};

/// The test the child runs.
const CHILD_TEST: &str = "child_host";
/// Spans two lines, as a log entry does.
const MESSAGE_BYTES: usize = 128;

/// No pump (its log replay would touch the cache between the test's accesses), and random
/// eviction off, so a cached line stays cached until flushed.
fn options(memory: &MemoryKind, host: u32) -> HostOptions {
    HostOptions::new()
        .memory(with_cache(memory, 1024, 0).for_host(0x2_9000, host))
        .pump_interval(None)
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
fn read_published(host: &Host, offset: u64, expected: &[u8]) {
    if let Some(before) = host.memory().simulated_stats() {
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
        assert_eq!(
            stale_after - before.stale_lines_served,
            2,
            "both lines were stale"
        );
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
    let Some((host, _)) = join_parents_pod(options) else {
        return;
    };
    let pod = host.pod();
    let (parent_word, child_word) = mailbox(pod);
    let parent_slot = slot_of(pod, PARENT_HOST);
    let wait_parent = |phase: u64, what: &str| wait_for_parent(parent_word, phase, what);

    assert_eq!(read(&host, parent_slot), vec![0; MESSAGE_BYTES]);
    // Release: pairs with the parent's Acquire wait; our host-table row is written.
    child_word.store(1, Ordering::Release);
    wait_parent(1, "to see us joined");
    let parent_pid = std::os::unix::process::parent_id();
    assert_eq!(
        host_rows(pod),
        [(PARENT_HOST, parent_pid), (CHILD_HOST, std::process::id())]
    );

    publish(
        &host,
        slot_of(pod, CHILD_HOST),
        &message(CHILD_HOST),
        child_word,
        2,
    );
    wait_parent(2, "to publish its slot");
    read_published(&host, parent_slot, &message(PARENT_HOST));
    child_word.store(3, Ordering::Release);
    wait_parent(3, "to let us leave");
    host.leave();
}

fn parent(memory: MemoryKind) {
    let Parent {
        host,
        mut child,
        files: _files,
        ..
    } = start_parent(CHILD_TEST, &config(), &memory, options);
    let pod = host.pod();
    let (parent_word, child_word) = mailbox(pod);
    let child_slot = slot_of(pod, CHILD_HOST);

    child.wait_for(child_word, 1, "to join");
    let both = [(PARENT_HOST, std::process::id()), (CHILD_HOST, child.pid())];
    assert_eq!(host_rows(pod), both, "both processes in the host table");
    assert_eq!(read(&host, child_slot), vec![0; MESSAGE_BYTES]);
    parent_word.store(1, Ordering::Release);

    child.wait_for(child_word, 2, "to publish its slot");
    read_published(&host, child_slot, &message(CHILD_HOST));
    publish(
        &host,
        slot_of(pod, PARENT_HOST),
        &message(PARENT_HOST),
        parent_word,
        2,
    );

    child.wait_for(child_word, 3, "to read our slot");
    assert_eq!(host_rows(pod), both, "both still joined");
    parent_word.store(3, Ordering::Release);
    child.assert_exits_successfully();
    assert_eq!(
        host_rows(pod),
        [(PARENT_HOST, std::process::id())],
        "the child left"
    );
}

common::process::parent_tests!(
    parent: processes_exchange_lnr_bytes_with_hardware_memory,
    processes_exchange_lnr_bytes_with_simulated_memory
);
