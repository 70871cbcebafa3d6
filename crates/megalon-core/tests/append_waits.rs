//! Waits of an append against their limit: a create whose claimed slots other threads
//! of its host keep taking first (`take_slot`), and a waiter of the combiner whose last
//! pause outlasts the combiner's hold. (Review `slots`, 2026-12-03: the create claimed on
//! for many limits, and the waiter answered `CombinerStalled` with the lock free.)
#![cfg(feature = "chaos")]

mod common;

use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megalon_core::chaos::{self, Point};
use megalon_core::inspect::slot_claim_batch;
use megalon_core::{Error, HostOptions, Layout, Pod};

/// A pod of few slots, shared by 16 hosts: a claim gets one slot.
fn one_slot_claims_pod() -> Arc<Pod> {
    let config = common::config().lnr_bytes(96 << 10).max_hosts(16);
    let layout = Layout::new(&config).expect("layout");
    assert_eq!(slot_claim_batch(layout.slot_count, 16), 1, "{layout:?}");
    assert!(layout.slot_count >= 32, "{}", layout.slot_count);
    common::heap_pod(&config)
}

fn options(limit: Duration) -> HostOptions {
    HostOptions::new().pump_interval(None).wait_limit(limit)
}

/// A create whose claimed slots other threads of its host keep taking first (each
/// claim gets one slot) claims again and again without looking at its wait limit: it
/// answers only once the pod's unclaimed range is used up, many limits later.
#[test]
fn a_create_whose_claims_are_taken_first_answers_within_its_limit() {
    let pod = one_slot_claims_pod();
    let limit = Duration::from_millis(30);
    let host = Arc::new(common::join(&pod, options(limit)));
    let steals = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let thief_host = Arc::clone(&host);
    let stolen = Arc::clone(&steals);
    let thieves = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawned = Arc::clone(&thieves);
    let started = Instant::now();
    let answer = chaos::with_hook(
        move |point| {
            if point != Point::AppendAfterPublish {
                return;
            }
            // The entry just published (this thread's claim, say) is applied by another
            // thread of the host, which then takes the slot it claimed (as a create of
            // that thread that came first would), before this thread looks at its pool.
            let host = Arc::clone(&thief_host);
            let (popped, took) = channel();
            let n = stolen.load(std::sync::atomic::Ordering::Relaxed);
            let thief = std::thread::spawn(move || {
                host.replay().expect("replay");
                if host.inspect().free_slots() == 0 {
                    popped.send(false).unwrap();
                    return;
                }
                let tell = popped.clone();
                let mut told = false;
                chaos::with_hook(
                    move |point| {
                        if point == Point::CreateBeforeWrite && !told {
                            told = true;
                            tell.send(true).unwrap();
                        }
                    },
                    || host.create(format!("thief-{n}").as_bytes(), b"x"),
                )
                .expect("the thief's create");
            });
            spawned.lock().unwrap().push(thief);
            if took.recv().unwrap() {
                stolen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // An append of a busy pod.
                std::thread::sleep(Duration::from_millis(2));
            }
        },
        || host.create(b"victim", b"v"),
    );
    let elapsed = started.elapsed();
    let steals = steals.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("answer {answer:?} after {elapsed:?}, {steals} claims taken first");
    assert!(
        elapsed < limit * 3,
        "the create answered {answer:?} after {elapsed:?}, its wait limit {limit:?} \
         ({steals} of its claims taken by other threads)"
    );
    // Nothing lost: every slot taken from a claim holds an object, and the create can
    // be made again (from the pool, or a claim).
    for thief in thieves.lock().unwrap().drain(..) {
        thief.join().unwrap();
    }
    let created = u64::from(answer.is_ok());
    assert_eq!(host.object_count().unwrap(), steals + created);
    if answer.is_err() {
        assert!(
            matches!(answer, Err(Error::SlotsExhausted { .. })),
            "{answer:?}"
        );
        host.create(b"victim", b"v").unwrap();
    }
}

/// A waiter whose request is still queued when the combiner lets go, a little before the
/// waiter's limit, must not answer that the combiner stalled (nor that the log is full):
/// the combining lock was free before its limit passed.
#[test]
fn a_waiter_does_not_give_up_while_the_combining_lock_is_free() {
    let pod = common::heap_pod(&common::config());
    let limit = Duration::from_millis(20);
    let host = Arc::new(common::join(&pod, options(limit)));
    // Slots in the pool: the creates below append their create event only.
    host.create(b"prime", b"p").unwrap();
    let mut wrong = Vec::new();
    for trial in 0..30u32 {
        // The combiner: a create stopped after its publish, holding the combining lock.
        let combiner_host = Arc::clone(&host);
        let key = format!("c{trial}");
        let paused = common::pauses_when(
            Point::AppendAfterPublish,
            || true,
            move || {
                let answer = combiner_host.create(key.as_bytes(), b"c");
                (answer, Instant::now())
            },
        );
        // The waiter: queued behind it.
        let waiter_host = Arc::clone(&host);
        let key = format!("w{trial}");
        let (tx, rx) = channel();
        let t0 = Instant::now();
        std::thread::spawn(move || {
            let answer = waiter_host.create(key.as_bytes(), b"w");
            tx.send((answer, Instant::now())).unwrap();
        });
        // Let go a little before the waiter's limit: 100 to 600 us before it.
        let before = Duration::from_micros(100 + u64::from(trial % 6) * 100);
        let release_at = t0 + limit - before;
        while Instant::now() < release_at {
            std::thread::sleep(Duration::from_micros(50));
        }
        let (combiner_answer, let_go) = paused.resume();
        combiner_answer.unwrap();
        let (answer, answered) = rx.recv().unwrap();
        let free_for = (t0 + limit).saturating_duration_since(let_go);
        if let Err(error) = &answer {
            if free_for >= Duration::from_micros(50) {
                wrong.push(format!(
                    "trial {trial}: {error:?}, the combining lock free {free_for:?} before \
                     the limit, answered {:?} after the call",
                    answered - t0
                ));
            }
        }
        // Nothing lost: a create that answered an error left no object.
        let exists = common::read_opt_tag(&host, format!("w{trial}").as_bytes()).unwrap();
        assert_eq!(
            exists.is_some(),
            answer.is_ok(),
            "trial {trial}: {answer:?}"
        );
        if let Err(error) = &answer {
            assert!(
                matches!(error, Error::CombinerStalled { .. } | Error::LogFull { .. }),
                "{error:?}"
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
