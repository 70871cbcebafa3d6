//! Lines that come back on their own: on the hardware a line a flush or a non-temporal
//! store dropped from a host's cache may come back into it at any moment, before the host
//! asks for it (the hardware prefetchers, a speculative load down a branch not taken, an
//! explicit `prefetcht0`: `Memory::prefetch`, a no-op on the simulation), holding memory's
//! bytes of *that* moment. The simulation filled a line only when the host loaded or
//! stored it, so "drop the line, then wait for a flag, then load" (an invalidation placed
//! before the check that says the bytes are there) passed on it and serves stale bytes on
//! the hardware; and a flush whose only job is to drop such a stray line (the RPC ring's
//! header flushes, which the entry's own non-temporal store already dropped) could be
//! removed with no test noticing. Now a cache brings a line it dropped lately back now
//! and then (`refill_at_random`), and the ring's two flushes each have a test here that
//! stands a load of the same host in for the prefetch.

mod common;

use std::ops::ControlFlow;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use common::eager;
use megalon_core::limits::LINE_BYTES;
use megalon_core::memory::Memory;
use megalon_core::rpc::Response;
use megalon_core::MemoryKind;

const LINE: usize = LINE_BYTES as usize;

/// The gap itself. A reader flushes a line and fences (it holds no copy now); a writer on
/// another host then stores new bytes to memory and fences; the reader loads the line
/// without flushing again. On the hardware the line may have come back into the reader's
/// cache between its fence and the writer's store (a prefetch, a speculative load), and
/// the load is served the old bytes. Over many seeds the simulation must do so at least
/// once (it never did while a fill happened only at the reader's own access).
#[test]
fn a_line_dropped_by_a_flush_can_come_back_before_the_next_load() {
    let (pod, ring) = common::ring_pod(4, 200);
    let line = ring.entries_offset;
    let mut stale = 0;
    for seed in 0..256u64 {
        let reader = Memory::new(Arc::clone(&pod), eager(seed));
        let writer = Memory::new(Arc::clone(&pod), eager(seed ^ 0xabcd));
        let round = (seed % 250) as u8 + 1;
        let mut buf = [0u8; LINE];
        reader.read(line, &mut buf);
        // Dropped and fenced: the reader holds no copy of the line now.
        reader.flush(line, LINE);
        reader.fence();
        // Unrelated work of the reader (the prefetcher runs ahead of it).
        let mut other = [0u8; 8];
        reader.read(line + 2 * LINE_BYTES, &mut other);
        reader.fence();
        writer.write_non_temporal(line, &[round; LINE]);
        writer.fence();
        // Told (through the coherent region, say) that the bytes are there, the reader
        // loads them without a flush of its own after that news.
        reader.read(line, &mut buf);
        if buf[0] != round {
            stale += 1;
        }
    }
    assert!(
        stale > 0,
        "a line dropped by a flush never came back before the reader's next load: the \
         simulation cannot show an invalidation placed before the check it depends on"
    );
}

/// The RPC sender's flush of its entry's header before it reads the response
/// (`RingGeometry::call_while`, `memory.flush(entry, RING_HEADER_BYTES)`): no test of the
/// suite notices its removal, since the sender's non-temporal store of the request dropped
/// the line and nothing of the sender loads it again on the simulation. On the hardware a
/// prefetch may bring it back while the server works (the request's bytes), and the
/// sender, without the flush, reads its own request as the response. Here a load of the
/// sender's host (while it waits) stands for that prefetch. Fails with the flush removed.
#[test]
fn a_sender_reads_the_response_even_if_its_entrys_header_came_back_into_its_cache() {
    let (pod, ring) = common::ring_pod(4, 200);
    let server = Memory::new(Arc::clone(&pod), MemoryKind::simulated(2));
    let (to_server, server_hears) = channel::<()>();
    let sender = {
        let (pod, ring) = (Arc::clone(&pod), ring.clone());
        std::thread::spawn(move || {
            let memory = Memory::new(Arc::clone(&pod), MemoryKind::simulated(1));
            let mut buf = vec![0u8; ring.entry_bytes as usize];
            let mut strayed = false;
            ring.call(
                &pod,
                &memory,
                1,
                &mut buf,
                1,
                b"key",
                b"",
                Duration::from_secs(5),
                &(),
                &mut || {
                    if !strayed {
                        strayed = true;
                        // The prefetcher: the entry's header line comes back into the
                        // sender's cache with the request's bytes.
                        let mut header = [0u8; LINE];
                        memory.read(ring.entries_offset, &mut header);
                        to_server.send(()).unwrap();
                    }
                    ControlFlow::Continue(())
                },
            )
        })
    };
    server_hears.recv().unwrap();
    let claimed = ring.claim(&pod, &()).expect("the request is waiting");
    let mut buf = vec![0u8; ring.entry_bytes as usize];
    ring.serve(
        &pod,
        &server,
        claimed,
        &mut buf,
        &(),
        Response {
            status: 99,
            detail: 0,
        },
        |_, _| Response {
            status: 42,
            detail: 0x5eed,
        },
    );
    let response = sender.join().unwrap().expect("answered");
    assert_eq!(
        (response.status, response.detail),
        (42, 0x5eed),
        "the sender read its own request's header as the response"
    );
}

/// The server's flush of a claimed entry's header before it reads the request
/// (`RingGeometry::read`, `memory.flush(entry, header)`): no test of the suite notices
/// its removal (the server's own non-temporal response dropped the line a lap before).
/// On the hardware a prefetch may bring the line back before the sender's next request
/// reaches memory; the server, without the flush, reads the entry's old header. Fails (the
/// server's "not its sender's" check panics) with the flush removed.
#[test]
fn a_server_reads_the_request_even_if_its_entrys_header_came_back_into_its_cache() {
    let (pod, ring) = common::ring_pod(1, 200);
    let server = Memory::new(Arc::clone(&pod), MemoryKind::simulated(2));
    let sender = Memory::new(Arc::clone(&pod), MemoryKind::simulated(1));
    let mut served = vec![0u8; ring.entry_bytes as usize];
    for lap in 0..3u8 {
        // The prefetcher, before this lap's request is written: the server's host loads
        // the entry's header line (the last lap's bytes).
        let mut header = [0u8; LINE];
        server.read(ring.entries_offset, &mut header);
        let mut buf = vec![0u8; ring.entry_bytes as usize];
        let (pod_s, ring_s, server_ref, served_ref) = (&pod, &ring, &server, &mut served);
        let response = std::thread::scope(|scope| {
            let answering = scope.spawn(move || loop {
                if let Some(claimed) = ring_s.claim(pod_s, &()) {
                    ring_s.serve(
                        pod_s,
                        server_ref,
                        claimed,
                        served_ref,
                        &(),
                        Response {
                            status: 99,
                            detail: 0,
                        },
                        |request, bytes| Response {
                            status: request.op,
                            detail: u64::from(bytes[request.key.clone()][0]),
                        },
                    );
                    return;
                }
                std::thread::yield_now();
            });
            let response = ring.call(
                &pod,
                &sender,
                1,
                &mut buf,
                lap + 1,
                &[b'a' + lap],
                b"",
                Duration::from_secs(5),
                &(),
                &mut || ControlFlow::Continue(()),
            );
            answering
                .join()
                .expect("the server read a stale request header");
            response
        });
        let response = response.expect("answered");
        assert_eq!(
            (response.status, response.detail),
            (lap + 1, u64::from(b'a' + lap))
        );
    }
}
