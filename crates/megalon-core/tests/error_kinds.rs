//! The errors the append-fault sweep (`tests/error_sweep.rs`) does not provoke, at each operation: a log really full behind a host that stops replaying
//! (`LogFull`, through the combiner's wait for room rather than a forced refusal), and a
//! wait limit that runs out while another host holds the object's lock (`RecordBusy`).
//! Afterwards nothing is pending, locked or leaked, both hosts read the same whole value,
//! the key is usable, and the error told the truth: an operation refused for room
//! changed nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{at_rest, config, heap_pod, move_into, tag_of, value, SLOT};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, MemoryKind, Pod};

const K: &[u8] = b"k";
const K2: &[u8] = b"k2";

#[derive(Clone, Copy, Debug)]
struct Setup {
    width: u32,
    safety: CrashSafety,
    switch: bool,
    all_log: bool,
}

const SETUPS: [Setup; 4] = [
    Setup {
        width: 4,
        safety: CrashSafety::Undo,
        switch: true,
        all_log: false,
    },
    Setup {
        width: 32,
        safety: CrashSafety::Off,
        switch: false,
        all_log: false,
    },
    Setup {
        width: 8,
        safety: CrashSafety::Off,
        switch: true,
        all_log: false,
    },
    Setup {
        width: 32,
        safety: CrashSafety::Undo,
        switch: false,
        all_log: true,
    },
];

fn options(seed: u64, combining: bool) -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(seed))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_millis(40))
        .flat_combining(combining)
}

fn pod(s: Setup, log: u64) -> Arc<Pod> {
    heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(log)
            .record_width_bits(s.width)
            .crash_safety(s.safety)
            .record_width_switch(s.switch)
            .coherence(if s.all_log {
                megalon_core::Coherence::AllLog
            } else {
                megalon_core::Coherence::Split
            }),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    FirstWrite,
    Write,
    WriteAt,
    Update,
    UpdatePanic,
    DeleteRecord,
    DeleteRs,
    DeleteUnlessBusy,
    MakeRs,
    TicketFirst,
    TicketDropped,
    Switch,
    Read,
    ReadPrefix,
    ReadMany,
}

const OPS: [Op; 16] = [
    Op::Create,
    Op::FirstWrite,
    Op::Write,
    Op::WriteAt,
    Op::Update,
    Op::UpdatePanic,
    Op::DeleteRecord,
    Op::DeleteRs,
    Op::DeleteUnlessBusy,
    Op::MakeRs,
    Op::TicketFirst,
    Op::TicketDropped,
    Op::Switch,
    Op::Read,
    Op::ReadPrefix,
    Op::ReadMany,
];

/// Makes K (and K2) as `op` needs; returns K's tag before the operation (None: absent).
fn prepare(a: &Host, op: Op) -> Option<u8> {
    match op {
        Op::Create => None,
        Op::FirstWrite | Op::DeleteRs | Op::TicketFirst => {
            a.create(K, &value(1)).unwrap();
            Some(1)
        }
        _ => {
            a.create(K, &value(1)).unwrap();
            a.write(K, &value(2)).unwrap();
            a.create(K2, &value(3)).unwrap();
            Some(2)
        }
    }
}

/// Runs `op` on `a`: its result, and the tag K holds if it succeeded (`Some(None)`: K is
/// gone; `None`: the op does not change K's value).
fn run(a: &Host, op: Op, width: u32) -> (Result<String, Error>, Option<Option<u8>>) {
    match op {
        Op::Create => (
            a.create(K, &value(10)).map(|_| String::new()),
            Some(Some(10)),
        ),
        Op::FirstWrite | Op::Write => (
            a.write(K, &value(11)).map(|_| String::new()),
            Some(Some(11)),
        ),
        Op::WriteAt => (
            a.write_at(K, 0, &value(12)).map(|_| String::new()),
            Some(Some(12)),
        ),
        Op::Update => (
            a.update(K, |b| b.copy_from_slice(&value(13)))
                .map(|_| String::new()),
            Some(Some(13)),
        ),
        Op::UpdatePanic => {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.update(K, |b| {
                    b[..100].copy_from_slice(&value(77)[..100]);
                    panic!("closure panics")
                })
            }));
            match r {
                Ok(r) => (r.map(|_| String::new()), None),
                Err(_) => (Ok("panicked".into()), None),
            }
        }
        Op::DeleteRecord | Op::DeleteRs => (a.delete(K).map(|_| String::new()), Some(None)),
        Op::DeleteUnlessBusy => (a.delete_unless_busy(K).map(|_| String::new()), Some(None)),
        Op::MakeRs => (a.make_read_shared(K).map(|b| b.to_string()), None),
        Op::TicketFirst => (
            a.write_start(K).and_then(|t| {
                t.write(0, &value(20))?;
                a.write_end(t).map(|_| String::new())
            }),
            Some(Some(20)),
        ),
        Op::TicketDropped => (
            a.write_start(K).map(|t| {
                t.write(0, &value(21)).unwrap();
                drop(t);
                String::new()
            }),
            Some(Some(21)),
        ),
        Op::Switch => (
            a.switch_record_width(if width == 4 { 8 } else { 4 })
                .map(|b| b.to_string()),
            None,
        ),
        Op::Read => {
            let mut buf = vec![0; SLOT];
            (
                a.read(K, &mut buf).map(|_| format!("{:?}", tag_of(&buf))),
                None,
            )
        }
        Op::ReadPrefix => {
            let mut buf = vec![0; SLOT];
            (
                a.read_prefix(K, &mut buf, &|_| SLOT)
                    .map(|_| format!("{:?}", tag_of(&buf))),
                None,
            )
        }
        Op::ReadMany => {
            let mut b1 = vec![0; SLOT];
            let mut b2 = vec![0; SLOT];
            let mut reads: Vec<(&[u8], &mut [u8])> = vec![(K, &mut b1), (K2, &mut b2)];
            let r = a.read_many(&mut reads);
            (
                Ok(format!("{:?} {:?} {:?}", r, tag_of(&b1), tag_of(&b2))),
                None,
            )
        }
    }
}

fn read_opt(h: &Host) -> Result<Option<Option<u8>>, String> {
    common::read_opt_tag(h, K)
}

/// Nothing pending, nothing locked, every record in use named by one object, the count
/// right, both hosts read the same whole value (returned), and the key usable from both.
fn check(a: &Host, b: &Host, what: &str) -> Result<Option<u8>, String> {
    for _ in 0..3 {
        let _ = a.replay();
        let _ = b.replay();
        let _ = a.inspect().settle_pending();
        let _ = b.inspect().settle_pending();
    }
    at_rest(a, b, what)?;
    let ra = read_opt(a).map_err(|e| format!("{what}: {e}"))?;
    let rb = read_opt(b).map_err(|e| format!("{what}: {e}"))?;
    if ra != rb || ra == Some(None) {
        return Err(format!(
            "{what}: a reads {ra:?}, b reads {rb:?} (None: torn)"
        ));
    }
    let before = ra.map(|t| t.unwrap());
    if ra.is_none() {
        a.create(K, &value(40))
            .map_err(|e| format!("{what}: create {e}"))?;
    }
    for (writer, reader, v, names) in [(a, b, 41, ("a", "b")), (b, a, 42, ("b", "a"))] {
        writer
            .write(K, &value(v))
            .map_err(|e| format!("{what}: write {} {e}", names.0))?;
        if read_opt(reader).map_err(|e| format!("{what}: {e}"))? != Some(Some(v)) {
            return Err(format!("{what}: {} after {}'s write", names.1, names.0));
        }
    }
    b.delete(K).map_err(|e| format!("{what}: delete {e}"))?;
    a.create(K, &value(43))
        .map_err(|e| format!("{what}: recreate {e}"))?;
    if read_opt(b).map_err(|e| format!("{what}: {e}"))? != Some(Some(43)) {
        return Err(format!("{what}: b after create"));
    }
    Ok(before)
}

/// Whether setup `s` runs `op`: AllLog allocates no records, and only some setups switch
/// the record width.
fn supported(s: Setup, op: Op) -> bool {
    let allocates = matches!(op, Op::FirstWrite | Op::MakeRs | Op::TicketFirst);
    let switches = matches!(op, Op::Switch);
    !(s.all_log && allocates) && (s.switch || !switches)
}

/// The log fills behind host `lag` (no pump, no operation), then `a` runs `op`.
fn full_log_scenario(s: Setup, op: Op, combining: bool) -> Result<(), String> {
    let pod = pod(s, 64);
    let a = Host::join(&pod, Join::As(0), options(1, combining)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(2, combining)).unwrap();
    let lag = Host::join(&pod, Join::As(2), options(3, combining)).unwrap();
    let old = prepare(&a, op);
    b.replay().unwrap();
    let mut filler = 0;
    loop {
        match a.create(format!("f{filler}").as_bytes(), &value(0xee)) {
            Ok(()) => filler += 1,
            Err(Error::LogFull { .. }) => break,
            Err(e) => return Err(format!("filling: {e}")),
        }
    }
    let (r, new) = run(&a, op, s.width);
    let what = format!("{s:?} {op:?} full log (combining {combining}): {r:?}");
    if std::env::var("MEGALON_SHOW_ERRORS").is_ok() {
        println!("{what}");
    }
    lag.replay()
        .map_err(|e| format!("{what}: lag replay {e}"))?;
    drop(lag);
    let after = check(&a, &b, &what)?;
    // Truth: refused for room, nothing changed; done, the new value.
    match (&r, new) {
        (Err(Error::LogFull { .. }), _) if after != old => Err(format!(
            "{what}: refused for room, yet K went from {old:?} to {after:?}"
        )),
        (Ok(_), Some(new)) if after != new => {
            Err(format!("{what}: done, yet K is {after:?}, not {new:?}"))
        }
        _ => Ok(()),
    }
}

fn quiet<R>(f: impl FnOnce() -> R) -> R {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = f();
    std::panic::set_hook(hook);
    r
}

fn sweep(f: impl Fn(Setup, Op) -> Result<(), String>) {
    let mut failures = Vec::new();
    let mut count = 0;
    quiet(|| {
        for s in SETUPS {
            for op in OPS {
                if !supported(s, op) {
                    continue;
                }
                count += 1;
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(s, op))) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(e),
                    Err(e) => failures.push(format!(
                        "{s:?} {op:?}: panic {:?}",
                        e.downcast_ref::<String>()
                            .cloned()
                            .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
                    )),
                }
            }
        }
    });
    eprintln!("{count} scenarios, {} failures", failures.len());
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(failures.is_empty());
}

#[test]
fn every_operation_refused_by_a_full_log_leaves_the_pod_clean_and_unchanged() {
    sweep(|s, op| full_log_scenario(s, op, true));
}

#[test]
fn every_operation_refused_by_a_full_log_without_combining() {
    sweep(|s, op| full_log_scenario(s, op, false));
}

/// `b` holds K's lock (a write ticket) while `a` runs `op`; then `b` ends its write.
fn busy_scenario(s: Setup, op: Op) -> Result<(), String> {
    let pod = pod(s, 1024);
    let a = Host::join(&pod, Join::As(0), options(1, true)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(2, true)).unwrap();
    let old = prepare(&a, op);
    if old.is_none() {
        return Ok(());
    }
    let ticket = b.write_start(K).map_err(|e| format!("b's ticket {e}"))?;
    ticket.write(0, &value(60)).unwrap();
    let (r, _) = run(&a, op, s.width);
    let what = format!("{s:?} {op:?} busy: {r:?}");
    if std::env::var("MEGALON_SHOW_ERRORS").is_ok() {
        println!("{what}");
    }
    b.write_end(ticket)
        .map_err(|e| format!("{what}: b's write_end {e}"))?;
    let after = check(&a, &b, &what)?;
    if r.is_err() && after != Some(60) {
        return Err(format!("{what}: failed, yet K is {after:?}, not b's 60"));
    }
    Ok(())
}

#[test]
fn every_operation_that_waits_out_another_hosts_lock_leaves_the_pod_clean() {
    sweep(busy_scenario);
}

/// `a` holds the most record locks a host may hold at once (16 write tickets of other
/// objects, in a pod with undo images) while it runs `op`; then it ends them.
fn holds_scenario(s: Setup, op: Op) -> Result<(), String> {
    if s.safety != CrashSafety::Undo || s.all_log {
        return Ok(());
    }
    let pod = pod(s, 1024);
    let a = Host::join(&pod, Join::As(0), options(1, true)).unwrap();
    let b = Host::join(&pod, Join::As(1), options(2, true)).unwrap();
    let old = prepare(&a, op);
    let keys: Vec<Vec<u8>> = (0..16).map(|i| format!("h{i}").into_bytes()).collect();
    for k in &keys {
        a.create(k, &value(5)).unwrap();
    }
    let tickets: Vec<_> = keys
        .iter()
        .map(|k| a.write_start(k).map_err(|e| format!("ticket {e}")))
        .collect::<Result<_, _>>()?;
    let (r, new) = run(&a, op, s.width);
    let what = format!("{s:?} {op:?} holds: {r:?}");
    if std::env::var("MEGALON_SHOW_ERRORS").is_ok() {
        println!("{what}");
    }
    for t in tickets {
        t.write(0, &value(6)).unwrap();
        a.write_end(t)
            .map_err(|e| format!("{what}: write_end {e}"))?;
    }
    let after = check(&a, &b, &what)?;
    match (&r, new) {
        (Err(Error::TooManyLocksHeld { .. }), _) if after != old => Err(format!(
            "{what}: refused, yet K went from {old:?} to {after:?}"
        )),
        (Ok(_), Some(new)) if after != new => {
            Err(format!("{what}: done, yet K is {after:?}, not {new:?}"))
        }
        _ => Ok(()),
    }
}

#[test]
fn every_operation_of_a_host_holding_its_most_locks_leaves_the_pod_clean() {
    sweep(holds_scenario);
}

fn local_pod(safety: CrashSafety, log: u64) -> Arc<Pod> {
    let mut c = config()
        .lnr_bytes(4 << 20)
        .log_capacity_entries(log)
        .crash_safety(safety)
        .local_partitions(2);
    c.lease_ms = 300;
    heap_pod(&c)
}

fn pumped(seed: u64) -> HostOptions {
    options(seed, true)
        .wait_limit(Duration::from_millis(150))
        .pump_interval(Some(Duration::from_millis(1)))
}

/// Reads K on `h` until it answers (another host's recovery may have to run first).
fn read_eventually(h: &Host, what: &str) -> Result<Option<Option<u8>>, String> {
    let start = std::time::Instant::now();
    loop {
        match read_opt(h) {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() > Duration::from_secs(5) => {
                return Err(format!("{what}: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum LocalFull {
    /// `b` reads K, held in `a`'s DRAM, while the log is full.
    BReads,
    /// `b` writes K.
    BWrites,
    /// `b` deletes K.
    BDeletes,
    /// `a` leaves holding K.
    ALeaves,
}

/// `a` holds K in its DRAM and wrote 30 there (acknowledged); the log fills behind a
/// host that stops replaying; then `action`.
fn local_full_scenario(safety: CrashSafety, action: LocalFull) -> Result<(), String> {
    let pod = local_pod(safety, 64);
    let a = Host::join(&pod, Join::As(0), pumped(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2)).unwrap();
    a.create(K, &value(1)).unwrap();
    a.write(K, &value(2)).unwrap();
    move_into(&a, K);
    a.write(K, &value(30)).unwrap();
    let lag = Host::join(&pod, Join::As(2), options(3, true)).unwrap();
    let mut filler = 0;
    loop {
        match b.create(format!("f{filler}").as_bytes(), &value(0xee)) {
            Ok(()) => filler += 1,
            Err(Error::LogFull { .. }) => break,
            Err(e) => return Err(format!("filling: {e}")),
        }
    }
    let what;
    let expect: Option<Option<u8>>;
    let mut a = Some(a);
    match action {
        LocalFull::BReads => {
            let r = read_opt(&b);
            what = format!("{safety:?} {action:?}: {r:?}");
            expect = Some(Some(30));
            match r {
                Ok(v) if v != Some(Some(30)) => {
                    return Err(format!("{what}: b read {v:?}, not a's acknowledged 30"));
                }
                Ok(_) => {}
                // The holder's move back is refused for room, and the error says so.
                Err(e) if !e.contains("could not move the object back to CXL: the log is full") => {
                    return Err(format!(
                        "{what}: not the move back's error naming the full log"
                    ));
                }
                Err(_) => {}
            }
        }
        LocalFull::BWrites => {
            let r = b.write(K, &value(50));
            what = format!("{safety:?} {action:?}: {r:?}");
            expect = Some(Some(if r.is_ok() { 50 } else { 30 }));
        }
        LocalFull::BDeletes => {
            let r = b.delete(K);
            what = format!("{safety:?} {action:?}: {r:?}");
            expect = if r.is_ok() { None } else { Some(Some(30)) };
        }
        LocalFull::ALeaves => {
            drop(a.take());
            what = format!("{safety:?} {action:?}");
            expect = Some(Some(30));
        }
    }
    if std::env::var("MEGALON_SHOW_ERRORS").is_ok() {
        println!("{what}");
    }
    lag.replay()
        .map_err(|e| format!("{what}: lag replay {e}"))?;
    drop(lag);
    let got = read_eventually(&b, &what)?;
    if got != expect {
        return Err(format!("{what}: K reads {got:?} on b, expected {expect:?}"));
    }
    if let Some(a) = &a {
        let after = check(a, &b, &what)?;
        if after.map(Some) != expect {
            return Err(format!("{what}: K {after:?}, expected {expect:?}"));
        }
        if a.inspect().local_objects().0 + b.inspect().local_objects().0 > 1 {
            return Err(format!("{what}: local objects"));
        }
    } else {
        let a2 =
            Host::join(&pod, Join::As(0), pumped(4)).map_err(|e| format!("{what}: rejoin {e}"))?;
        check(&a2, &b, &what)?;
    }
    Ok(())
}

#[test]
fn a_local_object_under_a_full_log_keeps_its_acknowledged_writes() {
    let mut failures = Vec::new();
    quiet(|| {
        for safety in [CrashSafety::Undo, CrashSafety::Off] {
            for action in [
                LocalFull::BReads,
                LocalFull::BWrites,
                LocalFull::BDeletes,
                LocalFull::ALeaves,
            ] {
                match std::panic::catch_unwind(|| local_full_scenario(safety, action)) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(e),
                    Err(e) => failures.push(format!(
                        "{safety:?} {action:?}: panic {:?}",
                        e.downcast_ref::<String>()
                            .cloned()
                            .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
                    )),
                }
            }
        }
    });
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(failures.is_empty());
}

/// `b` reads K from a copy in its DRAM; `a`'s first write of K (its alloc), a delete and
/// a make_read_shared are refused by a full log; `b` keeps reading the value K has, and
/// once the log has room again reads `a`'s next write.
#[test]
fn a_copy_outlives_refused_events_and_drops_at_the_next_one() {
    let mut c = config()
        .lnr_bytes(4 << 20)
        .log_capacity_entries(64)
        .local_copies(3);
    c.lease_ms = 300;
    let pod = heap_pod(&c);
    let a = Host::join(&pod, Join::As(0), pumped(1)).unwrap();
    let b = Host::join(&pod, Join::As(1), pumped(2)).unwrap();
    a.create(K, &value(1)).unwrap();
    for _ in 0..4 {
        assert_eq!(read_opt(&b).unwrap(), Some(Some(1)));
    }
    assert_eq!(b.inspect().local_objects().1, 1, "b holds a copy");
    let lag = Host::join(&pod, Join::As(2), options(3, true)).unwrap();
    let mut filler = 0;
    loop {
        match a.create(format!("f{filler}").as_bytes(), &value(0xee)) {
            Ok(()) => filler += 1,
            Err(Error::LogFull { .. }) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    assert!(matches!(a.write(K, &value(2)), Err(Error::LogFull { .. })));
    assert!(matches!(a.delete(K), Err(Error::LogFull { .. })));
    assert_eq!(read_opt(&b).unwrap(), Some(Some(1)));
    assert_eq!(read_opt(&a).unwrap(), Some(Some(1)));
    lag.replay().unwrap();
    drop(lag);
    a.write(K, &value(3)).unwrap();
    assert_eq!(read_opt(&b).unwrap(), Some(Some(3)));
    check(&a, &b, "copies").unwrap();
}
