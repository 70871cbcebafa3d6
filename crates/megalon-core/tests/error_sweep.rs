//! Every point an operation of host `a` reaches (write, two writes, update and an update
//! whose closure panics, delete, delete_unless_busy, make_read_shared, read, read_many,
//! a dropped write ticket, a width switch; in local partitions, moves to and from a
//! host's DRAM), with an append fault forced there or host `b` acting on the same key
//! there (a write, an update, a delete, a make_read_shared, a create, a width switch).
//! Afterwards nothing is pending, locked or leaked, both hosts read the same whole
//! value, and the key is usable from both. The first time each point is reached, in one
//! pod of each kind; `MEGALON_SWEEP=full` runs every setup and the second time each
//! point is reached too (about two minutes), `SWEEP_OP=<Op>` one operation,
//! `SWEEP_NO_COMBINING=1` without flat combining.
#![cfg(feature = "chaos")]

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use common::{at_rest, config, heap_pod, move_into, tag_of, value, SLOT};
use megalon_core::chaos::{self, Fault, Point};
use megalon_core::{CrashSafety, Error, Host, HostOptions, Join, MemoryKind, Pod};

/// The whole sweep (`MEGALON_SWEEP=full`), not CI's part of it.
fn full() -> bool {
    std::env::var("MEGALON_SWEEP").is_ok_and(|v| v == "full")
}

/// Whether CI runs `action` at the point reached `index`-th: a fault at every point, and
/// one of `b`'s operations at each, in turn.
fn in_ci_share(full: bool, action: Action, index: usize) -> bool {
    // `b`'s operations: every action but the two faults.
    let b_actions = &ACTIONS[2..];
    full || matches!(action, Action::Refuse | Action::Unconfirmed)
        || std::mem::discriminant(&b_actions[index % b_actions.len()])
            == std::mem::discriminant(&action)
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Create,
    FirstWrite,
    Write,
    Write2,
    Update,
    UpdatePanic,
    DeleteRecord,
    DeleteRs,
    DeleteUnlessBusy,
    MakeRs,
    Read,
    ReadMany,
    TicketDropped,
    Switch,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Refuse,
    Unconfirmed,
    BWrite,
    BDelete,
    BMakeRs,
    BCreate,
    BSwitch,
    BUpdate,
}

const OPS: [Op; 14] = [
    Op::Create,
    Op::FirstWrite,
    Op::Write,
    Op::Write2,
    Op::Update,
    Op::UpdatePanic,
    Op::DeleteRecord,
    Op::DeleteRs,
    Op::DeleteUnlessBusy,
    Op::MakeRs,
    Op::Read,
    Op::ReadMany,
    Op::TicketDropped,
    Op::Switch,
];
const ACTIONS: [Action; 8] = [
    Action::Refuse,
    Action::Unconfirmed,
    Action::BWrite,
    Action::BDelete,
    Action::BMakeRs,
    Action::BCreate,
    Action::BSwitch,
    Action::BUpdate,
];

#[derive(Clone, Copy, Debug)]
struct Setup {
    width: u32,
    safety: CrashSafety,
    switch: bool,
    all_log: bool,
}

fn options(seed: u64) -> HostOptions {
    HostOptions::new()
        .memory(MemoryKind::simulated(seed))
        .record_watermark(1.0)
        .pump_interval(None)
        .wait_limit(Duration::from_millis(40))
        .flat_combining(std::env::var("SWEEP_NO_COMBINING").is_err())
}

fn pod(s: Setup) -> Arc<Pod> {
    heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(1024)
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

const K: &[u8] = b"k";
const K2: &[u8] = b"k2";

fn prepare(a: &Host, op: Op) {
    match op {
        Op::Create | Op::Switch => {
            if let Op::Switch = op {
                a.create(K, &value(1)).unwrap();
                a.write(K, &value(2)).unwrap();
            }
        }
        Op::FirstWrite | Op::DeleteRs => a.create(K, &value(1)).unwrap(),
        _ => {
            a.create(K, &value(1)).unwrap();
            a.write(K, &value(2)).unwrap();
            a.create(K2, &value(3)).unwrap();
        }
    }
}

fn run(a: &Host, op: Op, width: u32) -> String {
    let r: Result<String, Error> = match op {
        Op::Create => a.create(K, &value(10)).map(|_| String::new()),
        Op::FirstWrite | Op::Write => a.write(K, &value(11)).map(|_| String::new()),
        Op::Write2 => a
            .write(K, &value(12))
            .and_then(|_| a.write(K, &value(13)))
            .map(|_| String::new()),
        Op::Update => a
            .update(K, |b| {
                let t = b[0].wrapping_add(1);
                b.copy_from_slice(&value(t));
            })
            .map(|_| String::new()),
        Op::UpdatePanic => {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.update(K, |b| {
                    b[..100].copy_from_slice(&value(77)[..100]);
                    panic!("closure panics")
                })
            }));
            match r {
                Ok(r) => r.map(|_| String::new()),
                Err(_) => Ok("panicked".into()),
            }
        }
        Op::DeleteRecord | Op::DeleteRs => a.delete(K).map(|_| String::new()),
        Op::DeleteUnlessBusy => a.delete_unless_busy(K).map(|_| String::new()),
        Op::MakeRs => a.make_read_shared(K).map(|b| b.to_string()),
        Op::Read => {
            let mut buf = vec![0; SLOT];
            a.read(K, &mut buf).map(|_| format!("{:?}", tag_of(&buf)))
        }
        Op::ReadMany => {
            let mut b1 = vec![0; SLOT];
            let mut b2 = vec![0; SLOT];
            let mut reads: Vec<(&[u8], &mut [u8])> = vec![(K, &mut b1), (K2, &mut b2)];
            let r = a.read_many(&mut reads);
            Ok(format!("{:?} {:?} {:?}", r, tag_of(&b1), tag_of(&b2)))
        }
        Op::TicketDropped => a.write_start(K).map(|t| {
            t.write(0, &value(20)).unwrap();
            drop(t);
            String::new()
        }),
        Op::Switch => a
            .switch_record_width(if width == 4 { 8 } else { 4 })
            .map(|b| b.to_string()),
    };
    format!("{r:?}")
}

fn act(b: &Host, action: Action, width: u32) -> String {
    match action {
        Action::Refuse => {
            chaos::fail_next_appends(&[Fault::Refuse]);
            String::new()
        }
        Action::Unconfirmed => {
            chaos::fail_next_appends(&[Fault::Unconfirmed]);
            String::new()
        }
        Action::BWrite => format!("{:?}", b.write(K, &value(50))),
        Action::BDelete => format!("{:?}", b.delete(K)),
        Action::BMakeRs => format!("{:?}", b.make_read_shared(K)),
        Action::BCreate => format!("{:?}", b.create(K, &value(51))),
        Action::BSwitch => format!(
            "{:?}",
            b.switch_record_width(if width == 4 { 16 } else { 4 })
        ),
        Action::BUpdate => format!(
            "{:?}",
            b.update(K, |x| x.copy_from_slice(&value(x[0].wrapping_add(3))))
        ),
    }
}

/// The points `op` reaches, in order.
fn points_of(s: Setup, op: Op) -> Vec<Point> {
    let pod = pod(s);
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let _b = Host::join(&pod, Join::As(1), options(2)).unwrap();
    prepare(&a, op);
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let s2 = seen.clone();
    chaos::with_hook(move |p| s2.borrow_mut().push(p), || run(&a, op, s.width));
    let v = seen.borrow().clone();
    v
}

fn check(a: &Host, b: &Host, what: &str) -> Result<(), String> {
    at_rest(a, b, what)?;
    // Both read the same whole value.
    let ra = read_opt(a)?;
    let rb = read_opt(b)?;
    if ra != rb || ra == Some(None) {
        return Err(format!(
            "{what}: a reads {ra:?}, b reads {rb:?} (None: torn)"
        ));
    }
    // Usable.
    if ra.is_none() {
        a.create(K, &value(40))
            .map_err(|e| format!("{what}: create {e}"))?;
    }
    // Each host's write, read by the other.
    for (writer, reader, v, names) in [(a, b, 41, ("a", "b")), (b, a, 42, ("b", "a"))] {
        writer
            .write(K, &value(v))
            .map_err(|e| format!("{what}: write {} {e}", names.0))?;
        if read_opt(reader)? != Some(Some(v)) {
            return Err(format!("{what}: {} after {}'s write", names.1, names.0));
        }
    }
    b.delete(K).map_err(|e| format!("{what}: delete {e}"))?;
    if read_opt(a)?.is_some() {
        return Err(format!("{what}: a reads deleted"));
    }
    a.create(K, &value(43))
        .map_err(|e| format!("{what}: recreate {e}"))?;
    if read_opt(b)? != Some(Some(43)) {
        return Err(format!("{what}: b after create"));
    }
    a.write(K, &value(44))
        .map_err(|e| format!("{what}: write {e}"))?;
    Ok(())
}

fn read_opt(h: &Host) -> Result<Option<Option<u8>>, String> {
    common::read_opt_tag(h, K)
}

fn scenario(s: Setup, op: Op, action: Action, index: usize) -> Result<(String, String), String> {
    let pod = pod(s);
    let a = Host::join(&pod, Join::As(0), options(1)).unwrap();
    let b = Arc::new(Host::join(&pod, Join::As(1), options(2)).unwrap());
    prepare(&a, op);
    chaos::clear_forced_faults();
    let n = Rc::new(Cell::new(0usize));
    let did = Rc::new(std::cell::RefCell::new(String::new()));
    let (n2, did2, b2) = (n.clone(), did.clone(), b.clone());
    let width = s.width;
    let r = chaos::with_hook(
        move |_p| {
            let i = n2.get();
            n2.set(i + 1);
            if i == index {
                *did2.borrow_mut() = act(&b2, action, width);
            }
        },
        || run(&a, op, s.width),
    );
    chaos::clear_forced_faults();
    let did = did.borrow().clone();
    check(
        &a,
        &b,
        &format!("{s:?} {op:?} {action:?} at {index}: op {r} b {did}"),
    )?;
    Ok((r, did))
}

#[test]
fn sweep() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let only_op = std::env::var("SWEEP_OP").ok();
    let full = full();
    let all = [
        Setup {
            width: 4,
            safety: CrashSafety::Off,
            switch: false,
            all_log: false,
        },
        Setup {
            width: 4,
            safety: CrashSafety::Undo,
            switch: false,
            all_log: false,
        },
        Setup {
            width: 4,
            safety: CrashSafety::Undo,
            switch: true,
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
            safety: CrashSafety::Off,
            switch: false,
            all_log: true,
        },
    ];
    // In CI: 4-bit records (a write in two wraps) with undo images and the width gates.
    let setups = if full { &all[..] } else { &all[2..3] };
    let mut failures = Vec::new();
    let mut count = 0;
    for &s in setups {
        for op in OPS {
            if only_op.as_deref().is_some_and(|o| o != format!("{op:?}")) {
                continue;
            }
            if s.all_log && matches!(op, Op::FirstWrite | Op::MakeRs) {
                continue;
            }
            if std::env::var("SWEEP_ALL_LOG").is_ok() && !s.all_log {
                continue;
            }
            if matches!(op, Op::Switch) && !s.switch {
                continue;
            }
            let points = points_of(s, op);
            for action in ACTIONS {
                if matches!(action, Action::BSwitch) && !s.switch {
                    continue;
                }
                let mut seen: Vec<(Point, usize)> = Vec::new();
                for (index, &p) in points.iter().enumerate() {
                    let occ = seen.iter().filter(|(q, _)| *q == p).count();
                    seen.push((p, index));
                    if occ >= if full { 2 } else { 1 } || !in_ci_share(full, action, index) {
                        continue;
                    }
                    count += 1;
                    try_scenario(
                        &mut failures,
                        p,
                        || scenario(s, op, action, index),
                        || format!("{s:?} {op:?} {action:?} at {index} {p:?}"),
                    );
                }
            }
        }
    }
    std::panic::set_hook(quiet);
    judge(count, "scenarios", &failures);
}

/// Runs one scenario at point `p`, noting in `failures` what it returned as an error, or
/// its panic with the scenario `named`.
fn try_scenario<T, E: std::fmt::Display>(
    failures: &mut Vec<String>,
    p: Point,
    run: impl FnOnce() -> Result<T, E>,
    named: impl FnOnce() -> String,
) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => failures.push(format!("{p:?}: {e}")),
        Err(e) => failures.push(format!(
            "{}: panic {:?}",
            named(),
            e.downcast_ref::<String>()
                .cloned()
                .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
        )),
    }
}

/// Prints how many scenarios ran and each failure, and fails if any did.
fn judge(count: usize, what: &str, failures: &[String]) {
    eprintln!("{count} {what}, {} failures", failures.len());
    for f in failures {
        eprintln!("FAIL {f}");
    }
    assert!(failures.is_empty());
}

#[derive(Clone, Copy, Debug)]
enum LOp {
    WriteMine,
    UpdatePanicMine,
    DeleteMine,
    MakeRsMine,
    ReadTheirs,
    WriteTheirs,
    DeleteTheirs,
    ReadMovesHere,
}

fn local_options(seed: u64) -> HostOptions {
    options(seed)
        .wait_limit(Duration::from_millis(150))
        .pump_interval(Some(Duration::from_millis(1)))
}

fn local_scenario(
    safety: CrashSafety,
    record: bool,
    op: LOp,
    action: Action,
    index: Option<usize>,
    seen: &mut Vec<Point>,
) -> Result<(), String> {
    let pod = heap_pod(
        &config()
            .lnr_bytes(4 << 20)
            .log_capacity_entries(1024)
            .crash_safety(safety)
            .local_partitions(2),
    );
    let a = Host::join(&pod, Join::As(0), local_options(1)).unwrap();
    let b = Arc::new(Host::join(&pod, Join::As(1), local_options(2)).unwrap());
    a.create(K, &value(1)).unwrap();
    if record {
        a.write(K, &value(2)).unwrap();
    }
    match op {
        LOp::ReadTheirs | LOp::WriteTheirs | LOp::DeleteTheirs => move_into(&b, K),
        LOp::ReadMovesHere => {
            let _ = read_opt(&a);
        }
        _ => move_into(&a, K),
    }
    chaos::clear_forced_faults();
    let n = Rc::new(Cell::new(0usize));
    let log = Rc::new(std::cell::RefCell::new(Vec::new()));
    let did = Rc::new(std::cell::RefCell::new(String::new()));
    let (n2, did2, b2, log2) = (n.clone(), did.clone(), b.clone(), log.clone());
    let r = chaos::with_hook(
        move |p| {
            let i = n2.get();
            n2.set(i + 1);
            log2.borrow_mut().push(p);
            if Some(i) == index {
                *did2.borrow_mut() = act(&b2, action, 32);
            }
        },
        || -> String {
            let r = match op {
                LOp::WriteMine | LOp::WriteTheirs => a.write(K, &value(11)).map(|_| ()),
                LOp::UpdatePanicMine => {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        a.update(K, |b| {
                            b[..100].copy_from_slice(&value(77)[..100]);
                            panic!("closure panics")
                        })
                    })) {
                        Ok(r) => r.map(|_| ()),
                        Err(_) => Ok(()),
                    }
                }
                LOp::DeleteMine | LOp::DeleteTheirs => a.delete(K),
                LOp::MakeRsMine => a.make_read_shared(K).map(|_| ()),
                LOp::ReadTheirs | LOp::ReadMovesHere => {
                    read_opt(&a).map(|_| ()).map_err(|_| Error::UnknownKey)
                }
            };
            format!("{r:?}")
        },
    );
    chaos::clear_forced_faults();
    *seen = log.borrow().clone();
    let did = did.borrow().clone();
    let what =
        format!("local {safety:?} record {record} {op:?} {action:?} at {index:?}: op {r} b {did}");
    check(&a, &b, &what)?;
    if a.inspect().local_objects().0 + b.inspect().local_objects().0 > 1 {
        return Err(format!(
            "{what}: local objects {:?} {:?}",
            a.inspect().local_objects(),
            b.inspect().local_objects()
        ));
    }
    Ok(())
}

#[test]
fn local_sweep() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut count = 0;
    let full = full();
    let safeties: &[CrashSafety] = if full {
        &[CrashSafety::Off, CrashSafety::Undo]
    } else {
        &[CrashSafety::Undo]
    };
    for &safety in safeties {
        for &record in if full {
            &[false, true][..]
        } else {
            &[true][..]
        } {
            for op in [
                LOp::WriteMine,
                LOp::UpdatePanicMine,
                LOp::DeleteMine,
                LOp::MakeRsMine,
                LOp::ReadTheirs,
                LOp::WriteTheirs,
                LOp::DeleteTheirs,
                LOp::ReadMovesHere,
            ] {
                let mut points = Vec::new();
                if let Err(e) =
                    local_scenario(safety, record, op, Action::Refuse, None, &mut points)
                {
                    failures.push(format!("baseline: {e}"));
                    continue;
                }
                for action in [
                    Action::Refuse,
                    Action::Unconfirmed,
                    Action::BWrite,
                    Action::BDelete,
                    Action::BMakeRs,
                ] {
                    let mut seen: Vec<Point> = Vec::new();
                    for (index, &p) in points.iter().enumerate() {
                        let occ = seen.iter().filter(|q| **q == p).count();
                        seen.push(p);
                        if occ >= if full { 2 } else { 1 }
                            || index > 60
                            || !in_ci_share(full, action, index)
                        {
                            continue;
                        }
                        count += 1;
                        let mut ignored = Vec::new();
                        try_scenario(
                            &mut failures,
                            p,
                            || {
                                local_scenario(
                                    safety,
                                    record,
                                    op,
                                    action,
                                    Some(index),
                                    &mut ignored,
                                )
                            },
                            || {
                                format!(
                                    "local {safety:?} {record} {op:?} {action:?} at {index} {p:?}"
                                )
                            },
                        );
                    }
                }
            }
        }
    }
    std::panic::set_hook(quiet);
    judge(count, "local scenarios", &failures);
}
