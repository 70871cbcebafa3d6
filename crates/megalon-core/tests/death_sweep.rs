//! A host's death at every chaos point of each operation. Host 1 runs one operation on
//! a thread of its own and dies (frozen, judged by its lease) at the `nth` hit of a point;
//! host 0 recovers it, then checks that nothing is left behind: every object whole at an
//! acknowledged or in-flight version, no record locked or leaked, the records-in-use
//! count right (or one high: `docs/decisions.md`, a claim killed between its count and its
//! CAS), no announce or recovery word left, the dead id joining again, the ring turning
//! over, and every slot usable again.
//!
//! Operations: creates, writes, updates, tickets and deletes at 32 and 2 bits, a switch of
//! the record width (the switcher dying, and a host dying while a switch drains), a
//! recoverer dying while it recovers a host that died in each of six states, local
//! partitions' moves and serves, a host leaving, a combiner dying with other threads'
//! requests in its batch, and a host's pump dying while it may serve a late join. Every point is swept at its first three hits: about 530
//! deaths, 6 minutes in release here, so those sweeps are `#[ignore]`d and `cargo xtask
//! death-sweep` runs them (in release); `sample` runs a few of each kind in every test
//! run. Built with the `chaos` feature only.
#![cfg(feature = "chaos")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{simulated, tag_of, value, SLOT};
use megalon_core::chaos::{self, Point};
use megalon_core::limits::HOLDS_PER_HOST;
use megalon_core::{CrashSafety, Host, HostOptions, Join, Pod, PodConfig};

const LEASE_MS: u32 = 100;
const BOUND: Duration = Duration::from_secs(5);

pub const POINTS: &[Point] = &[
    Point::ReadAfterTailCheck,
    Point::LookBeforeValidation,
    Point::ReadAfterCounter,
    Point::ReadBeforeEnd,
    Point::RecordBeforeWait,
    Point::ReadEndBetweenChecks,
    Point::DeleteAfterTailCheck,
    Point::WriteBeforeLock,
    Point::WriteAfterLock,
    Point::WriteAfterEventCheck,
    Point::WriteBeforeUnlock,
    Point::UnlockAfterCheck,
    Point::WriteAfterUnlock,
    Point::ClaimBeforeCas,
    Point::ClaimAfterCas,
    Point::AllocAfterClaim,
    Point::AllocLostBeforeFree,
    Point::GateAfterRaise,
    Point::GateAfterWordLoad,
    Point::AckBeforeCopy,
    Point::AckAfterCopy,
    Point::WidthAfterFreeze,
    Point::WidthAfterGates,
    Point::WidthBeforeEvent,
    Point::JoinBeforeClearAnnounces,
    Point::WidthBeforeZeroing,
    Point::WidthBeforeReopen,
    Point::WidthBeforeTakeover,
    Point::WidthAfterTakeover,
    Point::ReleaseAfterLock,
    Point::ReleaseBeforeFree,
    Point::CreateBeforeWrite,
    Point::CreateBeforeEvent,
    Point::ReserveBeforeCas,
    Point::ServeBeforeTake,
    Point::ServeBeforePin,
    Point::ServeAfterPin,
    Point::ServeAfterChunk,
    Point::JoinBeforeDecode,
    Point::JoinBetweenChunks,
    Point::HeadLookBetweenRows,
    Point::AppendAfterReserve,
    Point::AppendBeforeWrite,
    Point::LogAfterAlive,
    Point::AppendAfterPublish,
    Point::ReplayBetweenEntries,
    Point::ReplayBeforeCtail,
    Point::ReplayBeforeWait,
    Point::MoveBackBeforeCopy,
    Point::MoveHereAfterAppend,
    Point::RpcAwaitingResponse,
    Point::ServeAfterServingCheck,
    Point::RecoveryAfterScan,
    Point::RecoveryAfterRestore,
    Point::RecoveryAfterClaimSettled,
    Point::RecoveryBeforeAnnounceCleared,
    Point::RecoveryBeforeSlotImage,
    Point::RecoveryBeforeFill,
    Point::RecoveryBeforeFillWrite,
    Point::RecoveryBeforeIntentCleared,
    Point::RecoveryInRpcs,
    Point::RecoveryBeforeIntent,
    Point::RecoveryFoundLiveAnnounce,
    Point::RescueBeforeTakeOver,
    Point::RescueAfterTakeOver,
    Point::HeldAfterLook,
    Point::PodPublished,
];

fn config(bits: u32, switch: bool) -> PodConfig {
    PodConfig::new()
        .scr_bytes(64 << 10)
        .lnr_bytes(256 << 10)
        .slot_size_bytes(SLOT as u64)
        .max_key_bytes(48)
        .log_capacity_entries(256)
        .max_hosts(4)
        .lease_ms(LEASE_MS)
        .crash_safety(CrashSafety::Undo)
        .record_width_bits(bits)
        .record_width_switch(switch)
}

fn options(id: u32) -> HostOptions {
    HostOptions::new()
        .memory(simulated(u64::from(id) + 11, 1024, 64))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_secs(2))
}

fn row_free(pod: &Pod, host: u32) -> bool {
    pod.scr_u64(pod.layout().host_entry_offset(host))
        .load(Ordering::SeqCst) as u32
        == 0
}

/// The objects before the operation: `k` (tag 2, with a record), `s` (tag 3,
/// read-shared), `d` (tag 4, with a record).
fn setup(r: &Host) {
    r.create(b"k", &value(1)).unwrap();
    r.write(b"k", &value(2)).unwrap();
    r.create(b"s", &value(3)).unwrap();
    r.create(b"d", &value(4)).unwrap();
    r.write(b"d", &value(4)).unwrap();
}

/// What each key may read after the operation died: its tags (`None`: absent).
type Allowed = BTreeMap<&'static [u8], Vec<Option<u8>>>;

fn before() -> Allowed {
    let mut allowed = Allowed::new();
    allowed.insert(b"k", vec![Some(2)]);
    allowed.insert(b"s", vec![Some(3)]);
    allowed.insert(b"d", vec![Some(4)]);
    allowed
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Create,
    WriteK,
    UpdateK,
    TicketK,
    WriteS,
    DeleteK,
    DeleteS,
    ReadShared,
    ReadK,
    Switch,
}

impl Op {
    fn run(self, v: &Host) -> String {
        let r = match self {
            Op::Create => v.create(b"n", &value(50)).map(drop),
            Op::WriteK => v.write(b"k", &value(51)).map(drop),
            Op::UpdateK => v
                .update(b"k", |bytes| bytes.copy_from_slice(&value(52)))
                .map(drop),
            Op::TicketK => (|| {
                let t = v.write_start(b"k")?;
                t.write(0, &value(53))?;
                v.write_end(t)
            })(),
            Op::WriteS => v.write(b"s", &value(54)).map(drop),
            Op::DeleteK => v.delete(b"k"),
            Op::DeleteS => v.delete(b"s"),
            Op::ReadShared => v.make_read_shared(b"d").map(drop),
            Op::ReadK => {
                let mut buf = vec![0u8; SLOT];
                v.read(b"k", &mut buf).map(drop)
            }
            Op::Switch => v.switch_record_width(8).map(drop),
        };
        format!("{r:?}")
    }

    fn allowed(self) -> Allowed {
        let mut a = before();
        match self {
            Op::Create => {
                a.insert(b"n", vec![None, Some(50)]);
            }
            Op::WriteK => a.get_mut(&b"k"[..]).unwrap().push(Some(51)),
            Op::UpdateK => a.get_mut(&b"k"[..]).unwrap().push(Some(52)),
            Op::TicketK => a.get_mut(&b"k"[..]).unwrap().push(Some(53)),
            Op::WriteS => a.get_mut(&b"s"[..]).unwrap().push(Some(54)),
            Op::DeleteK => a.get_mut(&b"k"[..]).unwrap().push(None),
            Op::DeleteS => a.get_mut(&b"s"[..]).unwrap().push(None),
            Op::ReadShared | Op::ReadK | Op::Switch => {}
        }
        a
    }
}

fn read_opt(host: &Host, key: &[u8]) -> Result<Option<Vec<u8>>, megalon_core::Error> {
    let mut buf = vec![0u8; SLOT];
    match host.read(key, &mut buf) {
        Ok(_) => Ok(Some(buf)),
        Err(megalon_core::Error::UnknownKey) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Host 1 runs `op` and dies at the `nth` hit of `point`; host 0 recovers it and checks.
/// Returns `Ok(false)` if the operation never got there, `Err` with what was left.
fn dies_at(op: Op, bits: u32, switch: bool, point: Point, nth: u32) -> Result<bool, String> {
    let tag = format!("{op:?} at {point:?} #{nth} ({bits} bits)");
    let pod = Arc::new(Pod::create(&config(bits, switch), megalon_core::Backing::heap()).unwrap());
    let r = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let v: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    setup(&r);
    v.replay().unwrap();
    let dies = dying(v, Some((point, nth)), move |v| drop(op.run(v)));
    match dies.recv_timeout(Duration::from_secs(20)) {
        // Never got there.
        Ok(false) => return Ok(false),
        Ok(true) => {}
        Err(_) => return Err(format!("{tag}: the operation neither ended nor stopped")),
    }
    // Recover host 1.
    let deadline = Instant::now() + BOUND;
    while !row_free(&pod, 1) {
        if Instant::now() > deadline {
            return Err(format!(
                "{tag}: host 1 never recovered: {:?}",
                r.inspect().background_errors()
            ));
        }
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = r.replay();
    check(&pod, &r, op.allowed(), &tag)?;
    Ok(true)
}

fn check(pod: &Arc<Pod>, r: &Host, allowed: Allowed, tag: &str) -> Result<(), String> {
    let layout = pod.layout();
    for id in 1..4 {
        if !row_free(pod, id) {
            return Err(format!("{tag}: row {id} held"));
        }
        for hold in 0..HOLDS_PER_HOST {
            let a = pod
                .scr_u64(layout.announce_offset(id, hold))
                .load(Ordering::SeqCst);
            if a != 0 {
                return Err(format!("{tag}: host {id}'s announce {hold} left: {a:#x}"));
            }
        }
    }
    if pod.scr_u64(layout.recovery_offset()).load(Ordering::SeqCst) != 0 {
        return Err(format!("{tag}: recovery word held"));
    }
    if pod
        .scr_u64(layout.recovery_intent_offset())
        .load(Ordering::SeqCst)
        != 0
    {
        return Err(format!("{tag}: recovery intent left"));
    }
    // Every object whole at an allowed version, within the bound.
    for (key, tags) in &allowed {
        let now = read_opt(r, key).map_err(|e| format!("{tag}: read {key:?}: {e:?}"))?;
        let got = now.as_ref().map(|b| tag_of(b));
        let ok = match got {
            None => tags.contains(&None),
            Some(None) => false,
            Some(Some(t)) => tags.contains(&Some(t)),
        };
        if !ok {
            return Err(format!(
                "{tag}: {} reads {:?} (allowed {tags:?})",
                String::from_utf8_lossy(key),
                now.map(|b| b[..4].to_vec())
            ));
        }
    }
    let census = r.inspect().record_census();
    if !census.locked.is_empty() {
        return Err(format!("{tag}: records locked {:?}", census.locked));
    }
    let mut in_use = census.in_use.clone();
    in_use.sort_unstable();
    let named = common::named_records(r);
    if in_use != named {
        return Err(format!("{tag}: records in use {in_use:?}, named {named:?}"));
    }
    let (count, _) = r.inspect().records_in_use();
    // One high is accepted (docs/decisions.md: a claim killed between its count and its
    // CAS, a free killed between its CAS and its count-off).
    if count != in_use.len() as u64 && count != in_use.len() as u64 + 1 {
        return Err(format!(
            "{tag}: records-in-use count {count}, in use {}",
            in_use.len()
        ));
    }
    // Writes go on, on every object, from the survivor.
    for key in allowed.keys() {
        let exists = read_opt(r, key).unwrap().is_some();
        if exists {
            r.write(key, &value(90))
                .map_err(|e| format!("{tag}: write {key:?}: {e:?}"))?;
            let now = read_opt(r, key).unwrap().unwrap();
            if now != value(90) {
                return Err(format!("{tag}: {key:?} not written"));
            }
        }
    }
    // The dead id joins again, reads and writes.
    let again = Host::join(pod, Join::As(1), options(1))
        .map_err(|e| format!("{tag}: id 1 joins again: {e:?}"))?;
    for key in allowed.keys() {
        if let Some(b) = read_opt(&again, key).map_err(|e| format!("{tag}: {e:?}"))? {
            if b != value(90) {
                return Err(format!("{tag}: next life reads {key:?} stale"));
            }
            again
                .write(key, &value(91))
                .map_err(|e| format!("{tag}: next life writes {key:?}: {e:?}"))?;
        }
    }
    again.leave();
    // The ring turns over.
    let (head0, ..) = r.inspect().log_cursors();
    for round in 0..150u32 {
        r.create(b"ring", &value(round as u8))
            .map_err(|e| format!("{tag}: ring create {round}: {e:?}"))?;
        r.delete(b"ring")
            .map_err(|e| format!("{tag}: ring delete {round}: {e:?}"))?;
    }
    let (head1, ..) = r.inspect().log_cursors();
    if head1 <= head0 {
        return Err(format!("{tag}: the head never moved ({head0} -> {head1})"));
    }
    // Every slot usable: create until full.
    let objects = r.object_count().unwrap();
    let slots = pod.layout().slot_count;
    let mut made = 0u64;
    loop {
        let key = format!("fill{made}");
        match r.create(key.as_bytes(), &value(7)) {
            Ok(()) => made += 1,
            Err(megalon_core::Error::SlotsExhausted { .. }) => break,
            Err(e) => return Err(format!("{tag}: fill {made}: {e:?}")),
        }
        if made > slots {
            break;
        }
    }
    if objects + made != slots {
        return Err(format!(
            "{tag}: {objects} objects + {made} created = {} of {slots} slots",
            objects + made
        ));
    }
    Ok(())
}

/// Kills at every point of [`POINTS`] at its first three hits, for each of `items`,
/// through `dies_at(item, point, nth)` (`Ok(false)`: the item never got to that hit);
/// fails naming every death that left something behind.
fn sweep_each<T: Copy>(items: &[T], dies_at: impl Fn(T, Point, u32) -> Result<bool, String>) {
    let mut failures = Vec::new();
    let mut reached = 0;
    for &item in items {
        for &point in POINTS {
            for nth in 1..=3 {
                match dies_at(item, point, nth) {
                    Ok(true) => reached += 1,
                    Ok(false) => break,
                    Err(e) => {
                        eprintln!("FAIL {e}");
                        failures.push(e);
                    }
                }
            }
        }
    }
    eprintln!("{reached} deaths checked");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn sweep(ops: &[Op], bits: u32, switch: bool) {
    sweep_each(ops, |op, point, nth| dies_at(op, bits, switch, point, nth));
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_create() {
    sweep(&[Op::Create], 32, false);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_writes_32() {
    sweep(
        &[Op::WriteK, Op::UpdateK, Op::TicketK, Op::WriteS],
        32,
        false,
    );
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_writes_2() {
    sweep(&[Op::WriteK, Op::TicketK, Op::WriteS], 2, false);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_deletes() {
    sweep(
        &[Op::DeleteK, Op::DeleteS, Op::ReadShared, Op::ReadK],
        32,
        false,
    );
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_switch() {
    sweep(&[Op::Switch, Op::WriteK, Op::WriteS], 32, true);
}

/// Runs `f` on `host` on a thread of its own, which freezes the host (a death, judged by
/// its lease) at the `nth` hit of `point`, or with no point once `f` returns. The
/// receiver hears `true` once it froze at the point, `false` if `f` ended first.
fn dying(
    host: &'static Host,
    at: Option<(Point, u32)>,
    f: impl FnOnce(&'static Host) + Send + 'static,
) -> Receiver<bool> {
    let (tx, rx) = channel::<bool>();
    let tx = Mutex::new(tx);
    std::thread::spawn(move || {
        let mut seen = 0;
        let done = tx.lock().unwrap().clone();
        chaos::with_hook(
            move |p| {
                if let Some((point, nth)) = at {
                    if p == point {
                        seen += 1;
                        if seen == nth {
                            host.inspect().freeze();
                            tx.lock().unwrap().send(true).unwrap();
                            loop {
                                std::thread::park();
                            }
                        }
                    }
                }
            },
            || f(host),
        );
        if at.is_none() {
            host.inspect().freeze();
            let _ = done.send(true);
            loop {
                std::thread::park();
            }
        }
        let _ = done.send(false);
    });
    rx
}

/// [`dying`], waited for: whether `host` stopped at its point (`false`: `f` ended).
fn stopped(
    host: &'static Host,
    at: Option<(Point, u32)>,
    f: impl FnOnce(&'static Host) + Send + 'static,
) -> bool {
    dying(host, at, f)
        .recv_timeout(Duration::from_secs(20))
        .expect("neither ended nor stopped")
}

/// What host 1 was doing when it died, before its recoverer died too.
#[derive(Clone, Copy, Debug)]
enum Held {
    /// Mid-write of `k`: its undo image ready, half its new bytes in memory.
    Mid,
    /// An alloc for `s`, its record claimed.
    Claim,
    /// A delete of `k`, its lock held.
    DeleteLock,
    /// A create of `n`, its position reserved.
    Reserved,
    /// A make-read-shared of `d`, its release won, before the free.
    Release,
    /// A write of `k`, just locked.
    Locked,
}

impl Held {
    fn stop(self, v: &'static Host) -> bool {
        match self {
            Held::Mid => stopped(v, None, |v| {
                let t = v.write_start(b"k").unwrap();
                t.write(0, &[0xee; SLOT / 2]).unwrap();
                v.memory().write_back(t.offset(), SLOT);
                v.memory().fence();
                std::mem::forget(t);
            }),
            Held::Claim => stopped(v, Some((Point::AllocAfterClaim, 1)), |v| {
                let _ = Op::WriteS.run(v);
            }),
            Held::DeleteLock => stopped(v, Some((Point::ReleaseAfterLock, 1)), |v| {
                let _ = Op::DeleteK.run(v);
            }),
            Held::Reserved => stopped(v, Some((Point::AppendAfterReserve, 1)), |v| {
                let _ = Op::Create.run(v);
            }),
            Held::Release => stopped(v, Some((Point::ReleaseBeforeFree, 1)), |v| {
                let _ = Op::ReadShared.run(v);
            }),
            Held::Locked => stopped(v, Some((Point::WriteAfterLock, 1)), |v| {
                let _ = Op::WriteK.run(v);
            }),
        }
    }

    fn allowed(self) -> Allowed {
        match self {
            Held::Mid | Held::Locked => before(),
            Held::Claim => Op::WriteS.allowed(),
            Held::DeleteLock => Op::DeleteK.allowed(),
            Held::Reserved => Op::Create.allowed(),
            Held::Release => Op::ReadShared.allowed(),
        }
    }
}

fn recover_all(pod: &Pod, r: &Host, ids: &[u32], tag: &str) -> Result<(), String> {
    let deadline = Instant::now() + BOUND;
    while !ids.iter().all(|&id| row_free(pod, id)) {
        if Instant::now() > deadline {
            return Err(format!(
                "{tag}: not recovered: rows {:?}, {:?}",
                ids.iter().map(|&id| row_free(pod, id)).collect::<Vec<_>>(),
                r.inspect().background_errors()
            ));
        }
        r.inspect().watch_hosts();
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = r.replay();
    Ok(())
}

/// Host 1 dies holding `held`; host 2, recovering it, dies at the `nth` hit of `point`;
/// host 0 recovers both.
fn recoverer_dies_at(held: Held, bits: u32, point: Point, nth: u32) -> Result<bool, String> {
    let tag = format!("{held:?}, recoverer at {point:?} #{nth} ({bits} bits)");
    let pod = Arc::new(Pod::create(&config(bits, false), megalon_core::Backing::heap()).unwrap());
    let r = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let v: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    let q: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(2), options(2)).unwrap()));
    setup(&r);
    v.replay().unwrap();
    q.replay().unwrap();
    assert!(held.stop(v), "{tag}: host 1 never got to its stop");
    let pod2 = Arc::clone(&pod);
    let reached = stopped(q, Some((point, nth)), move |q| {
        let deadline = Instant::now() + BOUND;
        while !row_free(&pod2, 1) && Instant::now() < deadline {
            q.inspect().watch_hosts();
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    if !reached {
        return Ok(false);
    }
    recover_all(&pod, &r, &[1, 2], &tag)?;
    check(&pod, &r, held.allowed(), &tag)?;
    Ok(true)
}

fn recoverer_sweep(helds: &[Held], bits: u32) {
    sweep_each(helds, |held, point, nth| {
        recoverer_dies_at(held, bits, point, nth)
    });
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_recoverer_32() {
    recoverer_sweep(&[Held::Mid, Held::Claim, Held::DeleteLock], 32);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_recoverer_more_32() {
    recoverer_sweep(&[Held::Reserved, Held::Release, Held::Locked], 32);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_recoverer_2() {
    recoverer_sweep(&[Held::Mid, Held::Claim, Held::DeleteLock, Held::Locked], 2);
}

/// What host 1 does with local partitions on (after 2 accesses).
#[derive(Clone, Copy, Debug)]
enum Local {
    /// Two reads of `k`: the second moves it to host 1's DRAM.
    MoveHere,
    /// `k` in its DRAM, written there (tag 60): a ticket write (tag 61) moves it back first.
    MoveBackOwn,
    /// `k` in its DRAM, written there (tag 60): host 0 reads it, host 1 serves the move
    /// back from its reads of `s`.
    Serve,
    /// `k` in its DRAM, written there (tag 60): it leaves.
    Leave,
}

fn local_dies_at(op: Local, point: Point, nth: u32) -> Result<bool, String> {
    let tag = format!("local {op:?} at {point:?} #{nth}");
    let pod = Arc::new(
        Pod::create(
            &config(32, false).local_partitions(2),
            megalon_core::Backing::heap(),
        )
        .unwrap(),
    );
    // Host 0 serves the next life's requests for objects in its DRAM: its pump.
    let r = Host::join(
        &pod,
        Join::As(0),
        options(0).pump_interval(Some(Duration::from_millis(1))),
    )
    .unwrap();
    let v: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    setup(&r);
    v.replay().unwrap();
    let mut allowed = before();
    if !matches!(op, Local::MoveHere) {
        let mut buf = vec![0u8; SLOT];
        v.read(b"k", &mut buf).unwrap();
        v.read(b"k", &mut buf).unwrap();
        assert_eq!(v.inspect().local_objects().0, 1, "{tag}: k moved");
        v.write(b"k", &value(60)).unwrap();
        allowed.get_mut(&b"k"[..]).unwrap().push(Some(60));
    }
    let requester_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reached = std::thread::scope(|s| {
        let requester = matches!(op, Local::Serve).then(|| {
            let done = Arc::clone(&requester_done);
            let r = &r;
            s.spawn(move || {
                let got = read_opt(r, b"k");
                done.store(true, Ordering::SeqCst);
                got
            })
        });
        let done = Arc::clone(&requester_done);
        let reached = stopped(v, Some((point, nth)), move |v| match op {
            Local::MoveHere => {
                let mut buf = vec![0u8; SLOT];
                let _ = v.read(b"k", &mut buf);
                let _ = v.read(b"k", &mut buf);
            }
            Local::MoveBackOwn => {
                if let Ok(t) = v.write_start(b"k") {
                    let _ = t.write(0, &value(61));
                    let _ = v.write_end(t);
                }
            }
            Local::Serve => {
                let mut buf = vec![0u8; SLOT];
                let deadline = Instant::now() + Duration::from_secs(5);
                while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let _ = v.read(b"s", &mut buf);
                }
            }
            Local::Leave => {
                // A leak of the host: leave takes it by value.
                let host: Host = unsafe { std::ptr::read(v) };
                host.leave();
            }
        });
        if !reached {
            if let Some(requester) = requester {
                let _ = requester.join();
            }
            return Ok(false);
        }
        recover_all(&pod, &r, &[1], &tag)?;
        if let Some(requester) = requester {
            let got = requester.join().unwrap();
            match got {
                Ok(Some(b)) if matches!(tag_of(&b), Some(2) | Some(60)) => {}
                other => {
                    return Err(format!(
                        "{tag}: the requester read {:?}",
                        other.map(|o| o.map(|b| b[..4].to_vec()))
                    ))
                }
            }
        }
        Ok(true)
    })?;
    if !reached {
        return Ok(false);
    }
    if matches!(op, Local::MoveBackOwn) {
        allowed.get_mut(&b"k"[..]).unwrap().push(Some(61));
    }
    check(&pod, &r, allowed, &tag)?;
    if let Some(o) = r.lookup(b"k").unwrap().and_then(|e| e.local_owner) {
        if o == 1 {
            return Err(format!("{tag}: k still named in host 1's DRAM"));
        }
    }
    Ok(true)
}

fn local_sweep(ops: &[Local]) {
    sweep_each(ops, local_dies_at);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_local_moves() {
    local_sweep(&[Local::MoveHere, Local::MoveBackOwn]);
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_local_serve_and_leave() {
    local_sweep(&[Local::Serve, Local::Leave]);
}

/// Host 0 switches the record width (32 to 8), paused once its word is draining; host 1
/// runs `op` meanwhile and dies at the `nth` hit of `point`; host 0's switch goes on, and
/// host 0 recovers host 1. Then the switch is over (or another one gets through) and
/// nothing is left.
fn dies_during_switch(op: Op, point: Point, nth: u32) -> Result<bool, String> {
    let tag = format!("{op:?} during a switch, at {point:?} #{nth}");
    let pod = Arc::new(Pod::create(&config(32, true), megalon_core::Backing::heap()).unwrap());
    let r: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(0), options(0)).unwrap()));
    let v: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    setup(r);
    v.replay().unwrap();
    let (paused_tx, paused) = channel::<()>();
    let (go, go_rx) = channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let paused_tx = Mutex::new(paused_tx);
    let switcher = std::thread::spawn(move || {
        let mut once = false;
        chaos::with_hook(
            move |p| {
                if p == Point::WidthAfterFreeze && !once {
                    once = true;
                    paused_tx.lock().unwrap().send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                }
            },
            || r.switch_record_width(8),
        )
    });
    paused.recv().unwrap();
    // Host 1's operation, on a thread of its own.
    let rx = dying(v, Some((point, nth)), move |v| drop(op.run(v)));
    let mut stopped = rx.recv_timeout(Duration::from_millis(300)).ok();
    go.send(()).unwrap();
    if stopped.is_none() {
        stopped = rx.recv_timeout(Duration::from_secs(20)).ok();
    }
    let Some(stopped) = stopped else {
        return Err(format!("{tag}: host 1 neither ended nor stopped"));
    };
    if !stopped {
        let _ = switcher.join();
        return Ok(false);
    }
    recover_all(&pod, r, &[1], &tag)?;
    let switched = switcher.join().unwrap();
    let _ = r.replay();
    let width = r.record_width().unwrap();
    // Another switch gets through.
    let to = if width.bits == 8 { 32 } else { 8 };
    r.switch_record_width(to).map_err(|e| {
        format!("{tag}: the first switch answered {switched:?}; the next one {e:?}")
    })?;
    check(&pod, r, op.allowed(), &tag)?;
    Ok(true)
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_during_switch() {
    let ops = [
        Op::WriteK,
        Op::WriteS,
        Op::DeleteK,
        Op::ReadShared,
        Op::Create,
        Op::ReadK,
    ];
    sweep_each(&ops, dies_during_switch);
}

/// Host 1's combiner dies with other threads' requests in its batch: thread A creates
/// `n0` and is paused in its batch (at `AppendAfterReserve`); threads B (a write of `s`,
/// its record claimed), C (a delete of `k`, its lock held) and D (a create of `n`) queue
/// behind it; A goes on, and whichever of B, C, D combines the next batch dies at the
/// `nth` hit of `point`. Host 0 recovers host 1.
fn combiner_dies_at(point: Point, nth: u32) -> Result<bool, String> {
    let tag = format!("a combiner at {point:?} #{nth}");
    let pod = Arc::new(Pod::create(&config(32, false), megalon_core::Backing::heap()).unwrap());
    let r = Host::join(&pod, Join::As(0), options(0)).unwrap();
    let v: &'static Host = Box::leak(Box::new(Host::join(&pod, Join::As(1), options(1)).unwrap()));
    setup(&r);
    v.replay().unwrap();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (stop_tx, stop_rx) = channel::<()>();
    let stop_tx = Arc::new(Mutex::new(stop_tx));
    let (a_paused_tx, a_paused) = channel::<()>();
    let (a_go, a_go_rx) = channel::<()>();
    let (a_go_rx, a_paused_tx) = (Mutex::new(a_go_rx), Mutex::new(a_paused_tx));
    let a = std::thread::spawn(move || {
        let mut once = false;
        chaos::with_hook(
            move |p| {
                if p == Point::AppendAfterReserve && !once {
                    once = true;
                    a_paused_tx.lock().unwrap().send(()).unwrap();
                    a_go_rx.lock().unwrap().recv().unwrap();
                }
            },
            || v.create(b"n0", &value(70)),
        )
    });
    a_paused.recv().unwrap();
    let (done_tx, done) = channel::<String>();
    for op in [Op::WriteS, Op::DeleteK, Op::Create] {
        let (armed, seen, stop_tx, done_tx) = (
            Arc::clone(&armed),
            Arc::clone(&seen),
            Arc::clone(&stop_tx),
            done_tx.clone(),
        );
        std::thread::spawn(move || {
            let out = chaos::with_hook(
                move |p| {
                    if p == point
                        && armed.load(Ordering::SeqCst)
                        && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth
                    {
                        v.inspect().freeze();
                        stop_tx.lock().unwrap().send(()).unwrap();
                        loop {
                            std::thread::park();
                        }
                    }
                },
                || op.run(v),
            );
            let _ = done_tx.send(out);
        });
    }
    // Let B, C and D queue (each past its claim or lock).
    std::thread::sleep(Duration::from_millis(100));
    armed.store(true, Ordering::SeqCst);
    a_go.send(()).unwrap();
    // A's create waits for its outcome in its host's queue, behind a combiner that may be
    // the one frozen: withdrawn unserved, it answers `CombinerStalled`, and nothing of it
    // reached the log.
    let a_result = a.join().unwrap();
    let n0_created = a_result.is_ok();
    let mut finished = 0;
    let stopped = loop {
        if stop_rx.try_recv().is_ok() {
            break true;
        }
        if done.recv_timeout(Duration::from_millis(10)).is_ok() {
            finished += 1;
            if finished == 3 {
                break stop_rx.try_recv().is_ok();
            }
        }
    };
    if !stopped {
        return Ok(false);
    }
    recover_all(&pod, &r, &[1], &tag)?;
    let mut allowed = Op::WriteS.allowed();
    allowed.insert(b"k", vec![Some(2), None]);
    allowed.insert(b"n", vec![None, Some(50)]);
    allowed.insert(
        b"n0",
        if n0_created {
            vec![Some(70)]
        } else {
            vec![None, Some(70)]
        },
    );
    check(&pod, &r, allowed, &tag)
        .map_err(|e| format!("{e} (n0's create answered {a_result:?})"))?;
    Ok(true)
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_combiner() {
    sweep_each(&[()], |(), point, nth| combiner_dies_at(point, nth));
}

/// One late join at a time: its death is driven by a hook on every thread of the process.
static LATE_JOIN: Mutex<()> = Mutex::new(());

/// Host 1's pump dies at the `nth` hit of `point` while host 2 joins after the log
/// recycled (a late join, which a live host's pump serves with its index). Host 1's pump
/// runs every millisecond and host 0's every 200, so host 1 is nearly always the one that
/// takes the join: it dies before, while or after it serves, or at any other step of its
/// pump's rounds meanwhile. The joiner must then be served by host 0 (a new life of its
/// own if its server died mid-stream) and read every object whole; host 0 recovers host
/// 1 and the pod is checked as after every death.
fn late_join_dies_at(point: Point, nth: u32) -> Result<bool, String> {
    let _one = LATE_JOIN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tag = format!("a late join's server at {point:?} #{nth}");
    // A join area of one line: the index goes in several chunks.
    let config = config(32, false).join_area_bytes(64);
    let pod = Arc::new(Pod::create(&config, megalon_core::Backing::heap()).unwrap());
    let pumped = |id: u32, ms: u64| options(id).pump_interval(Some(Duration::from_millis(ms)));
    let r = Host::join(&pod, Join::As(0), pumped(0, 200)).unwrap();
    let v: &'static Host = Box::leak(Box::new(
        Host::join(&pod, Join::As(1), pumped(1, 1)).unwrap(),
    ));
    setup(&r);
    let mut round = 0u32;
    while r.inspect().log_cursors().0 == 0 {
        r.create(b"lap", &value(round as u8))
            .and_then(|()| r.delete(b"lap"))
            .and_then(|()| r.replay().map(drop))
            .map_err(|e| format!("{tag}: lapping the log, round {round}: {e:?}"))?;
        round += 1;
    }
    // (armed, hits, frozen): the pump's hook counts hits only while armed.
    let state = Arc::new(Mutex::new((true, 0u32, false)));
    let (frozen_tx, frozen) = channel::<()>();
    let frozen_tx = Mutex::new(frozen_tx);
    let hook_state = Arc::clone(&state);
    let hook = move |p: Point| {
        if p != point || std::thread::current().name() != Some("megalon-pump-1") {
            return;
        }
        {
            let mut s = hook_state.lock().unwrap();
            if !s.0 {
                return;
            }
            s.1 += 1;
            if s.1 != nth {
                return;
            }
            s.2 = true;
        }
        v.inspect().freeze();
        frozen_tx.lock().unwrap().send(()).unwrap();
        loop {
            std::thread::park();
        }
    };
    // Host 0 writes `k` (its value unchanged) meanwhile, so host 1's pump replays while
    // it serves.
    let joining = std::sync::atomic::AtomicBool::new(true);
    let joined = std::thread::scope(|scope| {
        scope.spawn(|| {
            while joining.load(Ordering::SeqCst) {
                let _ = r.write(b"k", &value(2));
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let joined = chaos::with_process_hook(hook, || {
            let joined = Host::join(&pod, Join::As(2), options(2).wait_limit(BOUND));
            let mut s = state.lock().unwrap();
            s.0 = false;
            (joined, s.2)
        });
        joining.store(false, Ordering::SeqCst);
        joined
    });
    let (joined, died) = joined;
    if !died {
        drop(joined);
        // Its pump must not run on: the next death's hook, which knows the pump by its
        // thread's name only, would count its hits as the next host 1's.
        v.inspect().freeze();
        return Ok(false);
    }
    frozen
        .recv_timeout(BOUND)
        .map_err(|_| format!("{tag}: the pump never froze"))?;
    let joiner = joined.map_err(|e| format!("{tag}: the late join failed: {e:?}"))?;
    for (key, tags) in before() {
        let got = read_opt(&joiner, key).map_err(|e| format!("{tag}: the joiner reads: {e:?}"))?;
        if !tags.contains(&got.as_deref().and_then(tag_of)) {
            return Err(format!(
                "{tag}: the joiner reads {} as {:?}",
                String::from_utf8_lossy(key),
                got.map(|b| b[..4].to_vec())
            ));
        }
    }
    joiner.leave();
    recover_all(&pod, &r, &[1], &tag)?;
    check(&pod, &r, before(), &tag)?;
    Ok(true)
}

#[test]
#[ignore = "long: cargo xtask death-sweep"]
fn sweep_late_join_server() {
    sweep_each(&[()], |(), point, nth| late_join_dies_at(point, nth));
}

/// One death and its check: `Ok(false)` if it never got to its point.
type Death = fn() -> Result<bool, String>;

/// A few deaths of each kind, in every test run (the sweeps above take minutes): each
/// must reach its point and leave nothing behind.
#[test]
fn sample() {
    let deaths: [(&str, Death); 9] = [
        ("a write locked", || {
            dies_at(Op::WriteK, 32, false, Point::WriteAfterLock, 1)
        }),
        ("a 2-bit write before its unlock", || {
            dies_at(Op::WriteK, 2, false, Point::WriteBeforeUnlock, 1)
        }),
        ("a delete reserved", || {
            dies_at(Op::DeleteK, 32, false, Point::AppendAfterReserve, 1)
        }),
        ("a claim before its CAS", || {
            dies_at(Op::WriteS, 32, false, Point::ClaimBeforeCas, 1)
        }),
        ("a recoverer after its restore", || {
            recoverer_dies_at(Held::Mid, 32, Point::RecoveryAfterRestore, 1)
        }),
        ("a holder serving a move back", || {
            local_dies_at(Local::Serve, Point::MoveBackBeforeCopy, 1)
        }),
        ("a writer in a draining switch", || {
            dies_during_switch(Op::WriteK, Point::WriteAfterLock, 1)
        }),
        ("a combiner with others' requests", || {
            combiner_dies_at(Point::AppendAfterReserve, 1)
        }),
        ("a late join's server after its pin", || {
            late_join_dies_at(Point::ServeAfterPin, 1)
        }),
    ];
    let failures: Vec<String> = deaths
        .iter()
        .filter_map(|(what, dies)| match dies() {
            Ok(true) => None,
            Ok(false) => Some(format!("{what}: never got to its point")),
            Err(e) => Some(e),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
