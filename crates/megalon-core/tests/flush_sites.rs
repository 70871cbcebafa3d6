//! Flush, invalidate and fence sites of the protocol that no other test notices when they
//! are left out: each test here fails with its site removed (on the simulated memory).
#![cfg(feature = "chaos")]

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{simulated, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::{CrashSafety, Host, HostOptions, Join, Pod};

const LEASE_MS: u32 = 100;

fn config() -> megalon_core::PodConfig {
    common::config()
        .max_hosts(8)
        .record_width_bits(2)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
}

/// Host `id` on a simulated cache that never evicts at random (a stale line stays until
/// something drops it), without a pump, living as long as the test binary.
fn leak(pod: &Arc<Pod>, id: u32) -> &'static Host {
    let options = HostOptions::new()
        .memory(simulated(u64::from(id) + 1, 4096, 0))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_millis(300));
    Box::leak(Box::new(
        Host::join(pod, Join::As(id), options).expect("join"),
    ))
}

fn recover_by_hand(pod: &Pod, dead: u32, r: &Host) {
    r.inspect().watch_hosts();
    std::thread::sleep(Duration::from_millis(u64::from(LEASE_MS) * 2));
    let deadline = Instant::now() + Duration::from_secs(5);
    while pod.hosts().iter().any(|row| row.host == dead) {
        assert!(Instant::now() < deadline, "no recovery");
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `r` recovers `dead`; at every chaos point it reaches on the way its cache holds no
/// dirty line (a recoverer killed there would leave it to land later, over newer bytes:
/// every write of the protocol to LNR is a non-temporal store).
fn recover_leaving_no_dirty_line(pod: &Pod, dead: u32, r: &'static Host) {
    let dirty = Rc::new(Cell::new(0));
    let dirty_in = dirty.clone();
    chaos::with_hook(
        move |_| {
            let now = r.memory().as_simulated().unwrap().dirty_lines();
            dirty_in.set(dirty_in.get().max(now));
        },
        || recover_by_hand(pod, dead, r),
    );
    assert_eq!(dirty.get(), 0, "a dirty line in the recoverer's cache");
}

/// `Log::is_published` reads the alive word from memory: a recoverer about to fill a
/// dead host's reserved position with a `Skip` looks at it again after its last pause
/// ("its announcer published it after we looked: nothing to fill"). Here the dead host,
/// paused past its lease after its row check, publishes its create while the recoverer
/// is paused right before the fill, and another host applies the create. The recoverer's
/// earlier look left the entry's first line in its cache, unpublished: without the
/// flush, its last look is served that stale line, and it writes a `Skip` over the
/// published create (the host that applied it keeps `k`; every other never sees it).
#[test]
fn a_recoverer_sees_an_entry_published_after_its_first_look_and_does_not_skip_it() {
    let pod = common::heap_pod(&config());
    let r = leak(&pod, 0);
    let p = leak(&pod, 1);
    let q = leak(&pod, 2);
    p.create(b"k0", &value(1)).unwrap();
    r.inspect().watch_hosts();
    q.inspect().watch_hosts();
    let (to_main, main_hears) = channel::<&'static str>();
    let (to_p, p_hears) = channel::<()>();
    std::thread::spawn(move || {
        let (to_main, p_hears) = (Mutex::new(to_main), Mutex::new(p_hears));
        chaos::with_hook(
            move |at| {
                if at == Point::AppendBeforeWrite {
                    // Past its row check: it stops here, its row saying it runs elsewhere.
                    p.inspect().pretend_elsewhere();
                    to_main.lock().unwrap().send("reserved").unwrap();
                    p_hears.lock().unwrap().recv().unwrap();
                } else if at == Point::AppendAfterPublish {
                    to_main.lock().unwrap().send("published").unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            || {
                let _ = p.create(b"k", &value(7));
            },
        );
    });
    assert_eq!(main_hears.recv().unwrap(), "reserved");
    let (_, _, tail) = r.inspect().log_cursors();
    let reserved = tail - 1;
    let paused = Rc::new(Cell::new(false));
    let q_saw_k = Rc::new(Cell::new(false));
    let (paused_in, q_saw_k_in) = (paused.clone(), q_saw_k.clone());
    chaos::with_hook(
        move |at| {
            if at == Point::RecoveryBeforeFill && !paused_in.replace(true) {
                // The recoverer looked (unpublished) and pauses before its fill; the dead
                // host resumes and publishes; another host applies its create.
                to_p.send(()).unwrap();
                assert_eq!(main_hears.recv().unwrap(), "published");
                let mut buf = vec![0u8; SLOT];
                q_saw_k_in.set(q.read(b"k", &mut buf).is_ok());
            }
        },
        || recover_by_hand(&pod, p.id(), r),
    );
    assert!(paused.get(), "the recoverer never paused before a fill");
    assert!(q_saw_k.get(), "q applied the published create");
    let logged = r.inspect().read_log(reserved, reserved + 1).unwrap();
    assert!(
        !format!("{:?}", logged[0].event).contains("Skip"),
        "a published create was overwritten by a Skip: {:?}",
        logged[0].event
    );
    let mut buf = vec![0u8; SLOT];
    let r_k = r.read(b"k", &mut buf).map(drop);
    let q_k = q.read(b"k", &mut buf).map(drop);
    assert_eq!(
        r_k.is_ok(),
        q_k.is_ok(),
        "replicas diverge on k: r {r_k:?}, q {q_k:?}"
    );
}

/// Host `seed` of a local-partitions pod: a simulated cache that never evicts at random,
/// no pump (its replays would move the chaos points of the test's thread around).
fn local_host(pod: &Arc<Pod>, seed: u64) -> Host {
    let options = HostOptions::new()
        .memory(simulated(seed, 4096, 0))
        .pump_interval(None);
    Host::join(pod, Join::AnyFree, options).expect("join")
}

/// A move to this host's DRAM copies the object's bytes from its CXL slot after taking
/// the record's lock: its lines cached from this host's own accesses may be older than
/// memory by then (another host wrote between the access that completed the streak and
/// the lock), and the copy must come from memory (`move_here`'s invalidation). Here host
/// `a` reads `k` three times (the third completes its streak and starts the move); while
/// its move catches up with the log, host `b` writes `k`. Without the invalidation, `a`
/// moves its cached old version into its DRAM: `b`'s acknowledged write is lost.
#[test]
fn a_move_to_dram_copies_a_write_made_after_the_streaks_last_access() {
    let pod = common::heap_pod(&common::config().local_partitions(3));
    let a = Arc::new(local_host(&pod, 1));
    let b = Arc::new(local_host(&pod, 2));
    let c = Arc::new(local_host(&pod, 3));
    a.create(b"k", &value(0)).unwrap();
    b.write(b"k", &value(1)).unwrap(); // k has a record now; b accessed it last
    a.replay().unwrap();
    common::read(&a, b"k");
    common::read(&a, b"k");
    // The third read ends the streak: the move's catch-up finds an entry (c's create of
    // `z`, appended after the read's own last catch-up), and b writes k meanwhile.
    let step = Rc::new(Cell::new(0));
    let step_in = step.clone();
    let (b_in, c_in) = (b.clone(), c.clone());
    let on_other_thread = |f: Box<dyn FnOnce() + Send>| {
        std::thread::scope(|s| s.spawn(f).join().unwrap());
    };
    chaos::with_hook(
        move |at| match (step_in.get(), at) {
            (0, Point::ReadBeforeEnd) => {
                step_in.set(1);
                let c = c_in.clone();
                on_other_thread(Box::new(move || c.create(b"y", &value(9)).unwrap()));
            }
            (1, Point::ReplayBeforeCtail) => {
                step_in.set(2);
                let c = c_in.clone();
                on_other_thread(Box::new(move || c.create(b"z", &value(9)).unwrap()));
            }
            (2, Point::ReplayBeforeCtail | Point::ReplayBetweenEntries) => {
                step_in.set(3);
                let b = b_in.clone();
                on_other_thread(Box::new(move || {
                    b.write(b"k", &value(2)).unwrap();
                }));
            }
            _ => {}
        },
        || common::read(&a, b"k"),
    );
    assert_eq!(step.get(), 3, "b wrote during the move's catch-up");
    assert_eq!(
        a.lookup(b"k").unwrap().unwrap().local_owner,
        Some(a.id()),
        "k moved to a's DRAM"
    );
    assert_eq!(
        common::tag_of(&common::read(&a, b"k")),
        Some(2),
        "the object in a's DRAM lost b's write"
    );
}

/// Host `id` of the recovery pod, owned, on a cache that never evicts at random.
fn join_as(pod: &Arc<Pod>, id: u32) -> Host {
    let options = HostOptions::new()
        .memory(simulated(u64::from(id) + 1, 4096, 0))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_millis(300));
    Host::join(pod, Join::As(id), options).expect("join")
}

/// Host `h` (id 1) moves `k` to its DRAM (two reads), writes it there, and dies moving it
/// back with half of its copy in the slot. Returns once it is stopped there.
fn dies_moving_k_back(pod: &Arc<Pod>, r: &'static Host, h: Host, in_dram: u8) {
    common::read(&h, b"k");
    common::read(&h, b"k");
    let entry = h.lookup(b"k").unwrap().unwrap();
    assert_eq!(entry.local_owner, Some(h.id()), "k is in h's DRAM");
    h.write(b"k", &value(in_dram)).unwrap();
    let offset = pod.layout().slot_offset(entry.slot);
    h.inspect().pretend_elsewhere();
    let (copying, is_copying) = channel();
    std::thread::spawn(move || {
        let copying = Mutex::new(copying);
        chaos::with_hook(
            move |point| {
                if point == Point::MoveBackBeforeCopy {
                    r.memory()
                        .write_non_temporal(offset, &value(in_dram)[..SLOT / 2]);
                    r.memory().fence();
                    copying.lock().unwrap().send(()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
            },
            move || drop(h),
        );
    });
    is_copying.recv().unwrap();
}

/// Recovery puts a dead mover's slot image back (`restore_slot_images`), reading the
/// image from memory: the recoverer's cache may hold the same image's lines from when it
/// recovered an earlier life of the same id. Here id 1 dies moving `k` back twice, and
/// host 0 recovers both lives; `k` changed in between (value 2 when it first moved, 5
/// the second time). Without the flush, the second recovery puts back its stale copy of
/// the first image: `k` goes back to value 2, losing the write of value 5. (And the
/// put-back must reach memory: stored into the recoverer's cache, another host reads the
/// half-copied slot.)
#[test]
fn a_second_recovery_of_a_mover_puts_back_the_second_image() {
    let pod = common::heap_pod(&config().local_partitions(2));
    let r = leak(&pod, 0);
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    dies_moving_k_back(&pod, r, join_as(&pod, 1), 3);
    recover_leaving_no_dirty_line(&pod, 1, r);
    // Another host reads what the recovery put back, from memory.
    let q = join_as(&pod, 2);
    assert_eq!(
        common::read(&q, b"k"),
        value(2),
        "first recovery: k as it moved"
    );
    // (One access of r's only: a second in a row would move k to r's DRAM.)
    r.write(b"k", &value(5)).unwrap();
    dies_moving_k_back(&pod, r, join_as(&pod, 1), 6);
    recover_by_hand(&pod, 1, r);
    assert_eq!(
        common::tag_of(&common::read(r, b"k")),
        Some(5),
        "second recovery: k as it moved the second time"
    );
}

/// `host` locks `k`, stores `byte` over its first half (straight to memory) and goes no
/// further; then its process is killed.
fn dies_mid_write(host: Host, byte: u8) {
    let ticket = host.write_start(b"k").unwrap();
    ticket.write(0, &[byte; SLOT / 2]).unwrap();
    host.memory().fence();
    std::mem::forget(ticket);
    megalon_core::inspect::crash(host);
}

/// Recovery restores a dead writer's object from its undo image, read from memory: the
/// recoverer's cache may hold the lines of the same image (same host id, same announce)
/// from its recovery of an earlier life of the id. Id 1 dies in the middle of a write of
/// `k` twice (over value 2, then over value 5); host 0 recovers both. Without the flush
/// of the image, the second restore puts back the first image: `k` is 2 again, the
/// acknowledged write of 5 is lost. (And the restore must not stay in the recoverer's
/// cache.)
#[test]
fn a_second_recovery_of_a_writer_restores_the_second_image() {
    let pod = common::heap_pod(&config());
    let r = leak(&pod, 0);
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    dies_mid_write(join_as(&pod, 1), 0xee);
    recover_leaving_no_dirty_line(&pod, 1, r);
    assert_eq!(
        common::read(r, b"k"),
        value(2),
        "first recovery: the last value"
    );
    r.write(b"k", &value(5)).unwrap();
    dies_mid_write(join_as(&pod, 1), 0xdd);
    recover_by_hand(&pod, 1, r);
    assert_eq!(
        common::tag_of(&common::read(r, b"k")),
        Some(5),
        "second recovery: the last value"
    );
}

/// A server reads a request's lines from memory (`RingGeometry::read` invalidates them
/// first): its own cache keeps the payload lines of the request it served in the same
/// entry a lap before (its response rewrites the header line only). Two entries, six
/// calls of distinct payloads: each answer must be about its own payload.
#[test]
fn a_server_reads_each_laps_payload_not_the_one_it_cached_a_lap_before() {
    use megalon_core::rpc::{self, Response, RingGeometry};
    use megalon_core::{Backing, Memory, PodConfig};
    use std::ops::ControlFlow;
    let entries = 2;
    let entry_bytes = rpc::entry_bytes(16, 128);
    let config = PodConfig::new()
        .app_scr_bytes(rpc::scr_bytes(entries))
        .app_lnr_bytes(entries * entry_bytes);
    let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
    let ring = RingGeometry::in_app_areas(&pod, entries, entry_bytes).unwrap();
    ring.initialize(&pod);
    let sender = Memory::new(Arc::clone(&pod), simulated(1, 4096, 0));
    let server = Memory::new(Arc::clone(&pod), simulated(2, 4096, 0));
    let mut request = vec![0; entry_bytes as usize];
    let mut serving = vec![0; entry_bytes as usize];
    for call in 1..=6u8 {
        let payload = [call; 128];
        let mut serve = || {
            while let Some(claimed) = ring.claim(&pod, &()) {
                let asked = ring.read(&server, claimed, &mut serving, &());
                let detail = serving[asked.payload.clone()]
                    .iter()
                    .map(|&b| u64::from(b))
                    .sum();
                let response = Response {
                    status: asked.op,
                    detail,
                };
                ring.respond(&pod, &server, claimed, &mut serving, response, &());
            }
            ControlFlow::Continue(())
        };
        let response = ring
            .call(
                &pod,
                &sender,
                1,
                &mut request,
                7,
                b"key",
                &payload,
                Duration::from_secs(1),
                &(),
                &mut serve,
            )
            .expect("served");
        assert_eq!(
            response,
            Response {
                status: 7,
                detail: 128 * u64::from(call)
            },
            "call {call}: the server read another lap's payload"
        );
    }
}

/// The log writer's fence between an entry's lines and its alive word: at the moment the
/// alive word is stored (before the fence that completes it), whatever of the entry is in
/// memory with the alive word must be the whole entry: once a reader can see the word, it
/// reads every line as written. Over 64 creates of two-line entries by a host whose
/// simulated cache completes writes in flight as eagerly as it can, a hardware observer
/// looks at memory in that window. (Without the fence the alive word's line may land
/// before the entry's second line: stores to two lines are ordered by nothing else. Only
/// a stress saw it, in one run of four.)
#[test]
fn an_entrys_alive_word_never_reaches_memory_before_its_other_lines() {
    use megalon_core::{Memory, MemoryKind, SimulatedConfig};
    let pod = common::heap_pod(&common::config());
    let layout: &'static megalon_core::Layout = Box::leak(Box::new(pod.layout().clone()));
    let lines = layout.log_entry_bytes as usize / 64;
    assert!(lines >= 2, "an entry of {lines} line: nothing to order");
    let observer: &'static Memory = Box::leak(Box::new(Memory::new(
        Arc::clone(&pod),
        MemoryKind::Hardware,
    )));
    let writer: &'static Host = Box::leak(Box::new(
        Host::join(
            &pod,
            Join::As(0),
            HostOptions::new()
                .memory(MemoryKind::Simulated(SimulatedConfig {
                    seed: 11,
                    capacity_lines: 4096,
                    random_eviction_one_in: 0,
                    settle_one_in: 1,
                }))
                .pump_interval(None),
        )
        .unwrap(),
    ));
    let entry_of = move |position: u64| {
        let index = position % layout.config.log_capacity_entries;
        let mut bytes = vec![0u8; layout.log_entry_bytes as usize];
        observer.read(layout.log_entry_offset(index), &mut bytes);
        bytes
    };
    let mut torn = Vec::new();
    let mut alive_seen = 0;
    for i in 0..64u8 {
        let key = [i; 48];
        // The entry's position, and its bytes in memory when its alive word was stored.
        type AtAlive = Option<(u64, Vec<u8>)>;
        let seen: Rc<Cell<AtAlive>> = Rc::default();
        let in_hook = Rc::clone(&seen);
        chaos::with_hook(
            move |point| {
                if point == Point::LogAfterAlive {
                    let position = writer.inspect().log_cursors().2 - 1;
                    in_hook.set(Some((position, entry_of(position))));
                }
            },
            || writer.create(&key, &value(i)).unwrap(),
        );
        let (position, at_alive) = seen.take().expect("the hook ran");
        let written = entry_of(position);
        // The alive word (the entry's first word) in memory at the hook: the rest must be
        // too.
        if at_alive[..8] == written[..8] {
            alive_seen += 1;
            if at_alive != written {
                torn.push(position);
            }
        }
    }
    assert!(
        torn.is_empty(),
        "entries published before their lines: {torn:?}"
    );
    assert!(
        alive_seen > 0,
        "no alive word reached memory before its fence"
    );
}
