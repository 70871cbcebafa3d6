//! Hand-written histories with known answers, and properties checked on random ones.

use proptest::prelude::*;

use super::*;
use crate::{HistoryBuilder, ProcessId};

/// `v(w, s)`: the value `s` of writer `w`.
fn v(writer: u32, sequence: u64) -> Value {
    Value::new(writer, sequence)
}

/// One operation of a hand-written history on key `"k"`: thread, invocation, response
/// (`None`: never returned), call, outcome.
type Op = (u32, u64, Option<u64>, Call, Outcome);

fn history_on(key: &[u8], ops: &[Op], builder: &mut HistoryBuilder) {
    for (thread, invoked_at, returned_at, call, outcome) in ops.iter().cloned() {
        builder
            .push(
                ProcessId::new(0, thread),
                key,
                call,
                outcome,
                invoked_at,
                returned_at,
            )
            .unwrap();
    }
}

fn history(ops: &[Op]) -> History {
    let mut builder = History::builder();
    history_on(b"k", ops, &mut builder);
    builder.build()
}

#[track_caller]
fn assert_linearizable(ops: &[Op]) {
    let history = history(ops);
    if let Err(error) = check(&history) {
        panic!("expected linearizable, got {error}");
    }
}

/// Checks that the history is not linearizable, and returns the report.
#[track_caller]
fn assert_violation(ops: &[Op], kind: ViolationKind) -> Violation {
    match check(&history(ops)) {
        Ok(summary) => panic!("expected a {kind:?} violation, got {summary}"),
        Err(CheckError::Violation(violation)) => {
            assert_eq!(violation.kind, kind, "{violation}");
            *violation
        }
        Err(other) => panic!("expected a {kind:?} violation, got {other}"),
    }
}

/// The invocation times of the operations a violation shows.
fn shown_times(violation: &Violation) -> Vec<u64> {
    violation
        .operations
        .iter()
        .map(|op| op.invoked_at)
        .collect()
}

use Call::{Create, Delete, Get, Put};
use Outcome::{Absent, Created, Deleted, Exists, Found, Unknown};

/// Two puts overlap; afterwards one thread reads `read` twice.
fn overlapping_puts_then_two_reads(read: Value) -> [Op; 4] {
    [
        (0, 0, Some(10), Put(v(0, 1)), Outcome::Ok),
        (1, 1, Some(9), Put(v(1, 1)), Outcome::Ok),
        (2, 11, Some(12), Get, Found(read)),
        (2, 13, Some(14), Get, Found(read)),
    ]
}

/// A put, then a second put during which a get answers `read`.
fn a_read_during_a_put(read: Outcome) -> [Op; 3] {
    [
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, Some(10), Put(v(0, 2)), Outcome::Ok),
        (1, 3, Some(5), Get, read),
    ]
}

/// A stale read: two puts, then a get that answers the first.
fn a_stale_read() -> [Op; 3] {
    [
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, Some(3), Put(v(0, 2)), Outcome::Ok),
        (1, 4, Some(5), Get, Found(v(0, 1))),
    ]
}

// ---------------------------------------------------------------- linearizable

#[test]
fn a_sequential_history_is_linearizable() {
    assert_linearizable(&[
        (0, 0, Some(1), Get, Absent),
        (0, 2, Some(3), Put(v(0, 1)), Outcome::Ok),
        (1, 4, Some(5), Get, Found(v(0, 1))),
        (1, 6, Some(7), Create(v(1, 1)), Exists),
        (0, 8, Some(9), Delete, Deleted),
        (1, 10, Some(11), Get, Absent),
        (1, 12, Some(13), Delete, Absent),
        (0, 14, Some(15), Create(v(0, 2)), Created),
        (1, 16, Some(17), Get, Found(v(0, 2))),
    ]);
}

#[test]
fn overlapping_writes_may_be_read_as_first_then_second() {
    // Two overlapping puts: afterwards the key holds either; here the second.
    assert_linearizable(&overlapping_puts_then_two_reads(v(1, 1)));
}

#[test]
fn overlapping_writes_may_be_read_as_second_then_first() {
    assert_linearizable(&overlapping_puts_then_two_reads(v(0, 1)));
}

#[test]
fn concurrent_reads_may_each_see_a_different_order_point() {
    // Reads overlapping both writes see first one value, then the other.
    assert_linearizable(&[
        (0, 0, Some(10), Put(v(0, 1)), Outcome::Ok),
        (1, 1, Some(10), Put(v(1, 1)), Outcome::Ok),
        (2, 2, Some(3), Get, Found(v(1, 1))),
        (2, 4, Some(5), Get, Found(v(0, 1))),
    ]);
}

#[test]
fn a_read_concurrent_with_a_write_may_return_the_old_value() {
    assert_linearizable(&a_read_during_a_put(Found(v(0, 1))));
}

#[test]
fn a_read_concurrent_with_a_write_may_return_the_new_value() {
    assert_linearizable(&a_read_during_a_put(Found(v(0, 2))));
}

#[test]
fn a_create_race_has_one_winner() {
    assert_linearizable(&[
        (0, 0, Some(10), Create(v(0, 1)), Exists),
        (1, 1, Some(9), Create(v(1, 1)), Created),
        (2, 2, Some(8), Create(v(2, 1)), Exists),
        (0, 11, Some(12), Get, Found(v(1, 1))),
    ]);
}

#[test]
fn a_delete_then_a_create_makes_a_new_value() {
    assert_linearizable(&[
        (0, 0, Some(1), Create(v(0, 1)), Created),
        (1, 2, Some(3), Delete, Deleted),
        (2, 4, Some(5), Create(v(2, 1)), Created),
        (0, 6, Some(7), Get, Found(v(2, 1))),
        (1, 8, Some(9), Create(v(1, 2)), Exists),
    ]);
}

#[test]
fn an_unknown_outcome_write_may_be_seen() {
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, None, Put(v(0, 2)), Unknown),
        (1, 3, Some(4), Get, Found(v(0, 2))),
    ]);
}

#[test]
fn an_unknown_outcome_write_may_be_not_seen() {
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, Some(3), Put(v(0, 2)), Unknown),
        (1, 4, Some(5), Get, Found(v(0, 1))),
    ]);
}

#[test]
fn an_unknown_outcome_write_may_take_effect_long_after_it_returned() {
    // Its response is at infinity: it may land after reads that did not see it, and
    // after a later put that it then overwrites.
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Unknown),
        (1, 2, Some(3), Get, Absent),
        (1, 4, Some(5), Put(v(1, 1)), Outcome::Ok),
        (1, 6, Some(7), Get, Found(v(1, 1))),
        (1, 8, Some(9), Get, Found(v(0, 1))),
    ]);
}

#[test]
fn unknown_outcome_delete_and_create_may_explain_reads() {
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (1, 2, None, Delete, Unknown),
        (0, 3, Some(4), Get, Found(v(0, 1))),
        (0, 5, Some(6), Get, Absent),
        (2, 7, None, Create(v(2, 1)), Unknown),
        (0, 8, Some(9), Create(v(0, 2)), Exists),
        (0, 10, Some(11), Get, Found(v(2, 1))),
    ]);
}

#[test]
fn an_unknown_delete_may_let_an_unknown_create_land() {
    // No read sees the key absent, yet the delete matters: it lets the create create.
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (1, 2, None, Delete, Unknown),
        (2, 3, None, Create(v(2, 1)), Unknown),
        (0, 4, Some(5), Get, Found(v(2, 1))),
    ]);
}

#[test]
fn either_of_two_unknown_writes_may_explain_one_read_and_the_other_a_later_one() {
    // The create answering `Exists` needs one of the unknown puts to have landed; the put
    // of 2:1 hides which. Only "0:1 landed later" explains the last read, so the search
    // must keep both choices although they reach the same state.
    assert_linearizable(&[
        (0, 0, None, Put(v(0, 1)), Unknown),
        (1, 0, None, Put(v(1, 1)), Unknown),
        (2, 1, Some(2), Create(v(2, 0)), Exists),
        (2, 3, Some(4), Put(v(2, 1)), Outcome::Ok),
        (2, 5, Some(6), Get, Found(v(0, 1))),
    ]);
}

#[test]
fn an_uncertain_write_may_be_seen_or_not_while_it_runs() {
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, Some(9), Put(v(0, 2)), Outcome::Uncertain),
        (1, 3, Some(4), Get, Found(v(0, 1))),
        (1, 5, Some(6), Get, Found(v(0, 2))),
    ]);
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
        (0, 2, Some(3), Put(v(0, 2)), Outcome::Uncertain),
        (1, 4, Some(5), Get, Found(v(0, 1))),
        (1, 6, Some(7), Get, Found(v(0, 1))),
    ]);
}

#[test]
fn an_uncertain_write_cannot_take_effect_after_it_returned() {
    // The same history with an unknown put is linearizable (it may land late); an
    // uncertain one took effect before it returned at 3, or never.
    let ops = |outcome: Outcome, returned_at: Option<u64>| {
        vec![
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (0, 2, returned_at, Put(v(0, 2)), outcome),
            (1, 4, Some(5), Get, Found(v(0, 1))),
            (1, 6, Some(7), Get, Found(v(0, 2))),
        ]
    };
    assert_linearizable(&ops(Unknown, Some(3)));
    assert_violation(
        &ops(Outcome::Uncertain, Some(3)),
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn an_uncertain_delete_is_settled_at_its_return() {
    let ops = |last: Outcome| {
        vec![
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (1, 2, Some(3), Delete, Outcome::Uncertain),
            (0, 4, Some(5), Get, Found(v(0, 1))),
            (0, 6, Some(7), Get, last),
        ]
    };
    assert_linearizable(&ops(Found(v(0, 1))));
    assert_violation(&ops(Absent), ViolationKind::NotLinearizable);
}

#[test]
fn an_uncertain_write_spent_before_it_returns_leaves_the_window_once() {
    // The create answering `Exists` needs the uncertain put to have landed: every
    // configuration spends it at the create's response, long before its own. Its slot is
    // then free for the later put and get, and its own response must not touch it.
    assert_linearizable(&[
        (0, 10, Some(17), Create(v(0, 1)), Exists),
        (1, 16, Some(355), Put(v(1, 1)), Outcome::Uncertain),
        (2, 268, Some(297), Put(v(2, 1)), Outcome::Ok),
        (3, 292, Some(293), Get, Found(v(1, 1))),
    ]);
}

#[test]
fn failed_operations_are_ignored() {
    assert_linearizable(&[
        (0, 0, Some(1), Put(v(0, 1)), Outcome::Failed),
        (1, 2, Some(3), Get, Absent),
        (0, 4, Some(5), Delete, Outcome::Failed),
        (1, 6, Some(7), Get, Outcome::Failed),
    ]);
}

#[test]
fn equal_times_count_as_concurrent() {
    // The get was invoked at the tick the put returned: it may come first.
    assert_linearizable(&[
        (0, 0, Some(5), Put(v(0, 1)), Outcome::Ok),
        (1, 5, Some(6), Get, Absent),
    ]);
}

#[test]
fn keys_are_checked_independently() {
    let mut builder = History::builder();
    history_on(
        b"a",
        &[(0, 0, Some(1), Put(v(0, 1)), Outcome::Ok)],
        &mut builder,
    );
    history_on(b"b", &[(1, 2, Some(3), Get, Absent)], &mut builder);
    history_on(b"a", &[(1, 4, Some(5), Get, Found(v(0, 1)))], &mut builder);
    let summary = check(&builder.build()).unwrap();
    assert_eq!((summary.keys, summary.operations), (2, 3));
}

// ------------------------------------------------------------ not linearizable

#[test]
fn a_stale_read_is_caught() {
    let violation = assert_violation(&a_stale_read(), ViolationKind::NotLinearizable);
    assert_eq!(violation.failing_operation().invoked_at, 4);
    assert_eq!(violation.possible_states, [Some(v(0, 2))]);
    assert_eq!(shown_times(&violation), [0, 2, 4]);
}

#[test]
fn a_stale_read_is_reported_with_only_the_operations_that_show_it() {
    // Noise before and around it that the report leaves out.
    let mut ops: Vec<Op> = (0..50)
        .map(|i| (2, 10 * i, Some(10 * i + 1), Get, Absent))
        .collect();
    ops.extend([
        (0, 1000, Some(1001), Put(v(0, 1)), Outcome::Ok),
        (3, 1000, Some(1010), Get, Found(v(0, 1))),
        (0, 1002, Some(1003), Put(v(0, 2)), Outcome::Ok),
        (3, 1011, Some(1012), Get, Found(v(0, 2))),
        (1, 1004, Some(1005), Get, Found(v(0, 1))),
    ]);
    let violation = assert_violation(&ops, ViolationKind::NotLinearizable);
    assert_eq!(shown_times(&violation), [1000, 1002, 1004], "{violation}");
}

#[test]
fn a_torn_read_is_caught() {
    let old = v(0, 1).encode(64).unwrap();
    let new = v(0, 2).encode(64).unwrap();
    let mut torn = new[..32].to_vec();
    torn.extend_from_slice(&old[32..]);
    let ops = a_read_during_a_put(Outcome::of_read(Some(&torn)));
    let violation = assert_violation(&ops, ViolationKind::TornRead);
    assert_eq!(shown_times(&violation), [3]);
}

#[test]
fn a_read_of_a_deleted_key_is_caught() {
    let violation = assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (0, 2, Some(3), Delete, Deleted),
            (1, 4, Some(5), Get, Found(v(0, 1))),
        ],
        ViolationKind::NotLinearizable,
    );
    assert_eq!(violation.possible_states, [None]);
    assert_eq!(shown_times(&violation), [0, 2, 4]);
}

#[test]
fn two_creates_that_both_created_are_caught() {
    let violation = assert_violation(
        &[
            (0, 0, Some(10), Create(v(0, 1)), Created),
            (1, 1, Some(9), Create(v(1, 1)), Created),
        ],
        ViolationKind::NotLinearizable,
    );
    assert_eq!(shown_times(&violation), [0, 1]);
}

#[test]
fn a_read_of_a_value_never_written_is_caught() {
    let violation = assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (1, 2, Some(3), Get, Found(v(7, 7))),
        ],
        ViolationKind::NeverWritten,
    );
    assert_eq!(shown_times(&violation), [2]);
}

#[test]
fn a_read_of_a_failed_write_is_caught() {
    assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Failed),
            (1, 2, Some(3), Get, Found(v(0, 1))),
        ],
        ViolationKind::NeverWritten,
    );
}

#[test]
fn a_read_that_goes_back_in_time_is_caught() {
    // Both reads overlap the second put, but one thread saw the new value, then the old.
    let violation = assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (0, 2, Some(20), Put(v(0, 2)), Outcome::Ok),
            (1, 3, Some(5), Get, Found(v(0, 2))),
            (1, 6, Some(8), Get, Found(v(0, 1))),
        ],
        ViolationKind::NotLinearizable,
    );
    assert_eq!(violation.failing_operation().invoked_at, 6);
    // The first read is needed to show it, though it returned before the failure.
    assert_eq!(shown_times(&violation), [0, 2, 3, 6], "{violation}");
}

#[test]
fn an_absent_read_after_a_completed_put_is_caught() {
    assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (1, 2, Some(3), Get, Absent),
        ],
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn a_read_from_the_future_is_caught() {
    assert_violation(
        &[
            (1, 0, Some(1), Get, Found(v(0, 1))),
            (0, 2, Some(3), Put(v(0, 1)), Outcome::Ok),
        ],
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn a_create_that_exists_on_an_absent_key_is_caught() {
    assert_violation(
        &[
            (0, 0, Some(1), Put(v(0, 1)), Outcome::Ok),
            (0, 2, Some(3), Delete, Deleted),
            (1, 4, Some(5), Create(v(1, 1)), Exists),
        ],
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn an_unknown_write_cannot_be_seen_before_it_was_invoked() {
    assert_violation(
        &[
            (1, 0, Some(1), Get, Found(v(0, 1))),
            (0, 2, None, Put(v(0, 1)), Unknown),
        ],
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn an_unknown_write_takes_effect_at_most_once() {
    // Seen, overwritten, then seen again: it cannot land twice.
    assert_violation(
        &[
            (0, 0, None, Put(v(0, 1)), Unknown),
            (1, 2, Some(3), Get, Found(v(0, 1))),
            (1, 4, Some(5), Put(v(1, 1)), Outcome::Ok),
            (1, 6, Some(7), Get, Found(v(0, 1))),
        ],
        ViolationKind::NotLinearizable,
    );
}

#[test]
fn the_most_specific_violation_is_reported() {
    let torn = v(0, 1).encode(32).unwrap()[..31].to_vec();
    let mut builder = History::builder();
    history_on(b"stale", &a_stale_read(), &mut builder);
    history_on(
        b"torn",
        &[(1, 100, Some(101), Get, Outcome::Torn(torn.into()))],
        &mut builder,
    );
    let history = builder.build();
    for threads in [1, 3] {
        let error = check_with_threads(&history, threads).unwrap_err();
        let violation = error.violation().unwrap();
        assert_eq!(violation.kind, ViolationKind::TornRead);
        assert_eq!(&*violation.key, b"torn");
    }
}

#[test]
fn a_report_prints_the_key_the_states_and_the_operations() {
    let violation = assert_violation(&a_stale_read(), ViolationKind::NotLinearizable);
    let text = violation.to_string();
    for expected in [
        "key \"k\" is not linearizable",
        "get by host 0 thread 1 answered found 0:1",
        "could then only be 0:2",
        "put 0:2 -> ok",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    let marked: Vec<&str> = text.lines().filter(|line| line.starts_with("->")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(
        marked[0].ends_with("host 0 thread 1: get -> found 0:1"),
        "{text}"
    );
}

#[test]
fn too_many_operations_in_flight_is_an_error_not_a_verdict() {
    let ops: Vec<Op> = (0..=MAX_IN_FLIGHT_OPERATIONS_PER_KEY as u64)
        .map(|i| (i as u32, i, Some(1000), Put(v(i as u32, 1)), Outcome::Ok))
        .collect();
    assert!(matches!(
        check(&history(&ops)),
        Err(CheckError::TooManyInFlight { at_time: 128, .. })
    ));
}

#[test]
fn unknown_puts_nobody_read_cost_nothing() {
    // A dead writer's puts nobody saw, in a put-and-get workload: dropped at once.
    let ops: Vec<Op> = (0..1000u64)
        .flat_map(|i| {
            [
                (0, 3 * i, None, Put(v(0, i)), Unknown),
                (1, 3 * i + 1, Some(3 * i + 2), Put(v(1, i)), Outcome::Ok),
                (2, 3 * i + 2, Some(3 * i + 3), Get, Found(v(1, i))),
            ]
        })
        .collect();
    let summary = check(&history(&ops)).unwrap();
    assert!(summary.max_in_flight_operations <= 2, "{summary}");
}

#[test]
fn unknown_operations_spent_everywhere_leave_the_window() {
    // A thousand unknown puts, each seen: the window never holds more than a few.
    let ops: Vec<Op> = (0..1000u64)
        .flat_map(|i| {
            [
                (0, 4 * i, None, Put(v(0, i)), Unknown),
                (1, 4 * i + 1, Some(4 * i + 2), Get, Found(v(0, i))),
            ]
        })
        .collect();
    let summary = check(&history(&ops)).unwrap();
    assert!(summary.max_in_flight_operations <= 3, "{summary}");
}

// ------------------------------------------------------------------ properties

/// A step of a random run of the model: key, thread, call, and whether the operation's
/// outcome is recorded as unknown / failed.
#[derive(Clone, Debug)]
struct RandomOp {
    key: u8,
    thread: u32,
    kind: u8,
    fate: Fate,
    /// How far the invocation is before and the response after the linearization point.
    before: u64,
    after: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Known,
    /// Unknown outcome; `applied` says whether the run let it take effect; `bounded`, if
    /// it returned, records it as uncertain (it took effect before returning, or never).
    Unknown {
        applied: bool,
        returned: bool,
        bounded: bool,
    },
    Failed,
}

fn random_op(spread: u64, with_unknown: bool) -> impl Strategy<Value = RandomOp> {
    let fate = if with_unknown {
        prop_oneof![
            13 => Just(Fate::Known),
            1 => (any::<bool>(), any::<bool>(), any::<bool>())
                .prop_map(|(applied, returned, bounded)| Fate::Unknown { applied, returned, bounded }),
            1 => Just(Fate::Failed),
        ]
        .boxed()
    } else {
        Just(Fate::Known).boxed()
    };
    (0..3u8, 0..6u32, 0..4u8, fate, 0..=spread, 0..=spread).prop_map(
        |(key, thread, kind, fate, before, after)| RandomOp {
            key,
            thread,
            kind,
            fate,
            before,
            after,
        },
    )
}

/// Runs `ops` through the model in order, operation `i` taking effect at time
/// `1000 + 10 i`, with its invocation and response `before` and `after` around that
/// point: a linearizable history by construction (that order is a witness). Every put
/// and create writes a distinct value.
fn run_model(ops: &[RandomOp]) -> History {
    let mut state: [Option<Value>; 3] = [None; 3];
    let mut builder = History::builder();
    for (i, op) in ops.iter().enumerate() {
        let point = 1000 + 10 * i as u64;
        let value = v(op.thread, i as u64);
        let current = &mut state[op.key as usize];
        let applies = matches!(op.fate, Fate::Known | Fate::Unknown { applied: true, .. });
        let (call, outcome) = match op.kind {
            0 => {
                if applies {
                    *current = Some(value);
                }
                (Put(value), Outcome::Ok)
            }
            1 => (Get, current.map_or(Absent, Found)),
            2 => match *current {
                None => {
                    if applies {
                        *current = Some(value);
                    }
                    (Create(value), Created)
                }
                Some(_) => (Create(value), Exists),
            },
            _ => match *current {
                Some(_) => {
                    if applies {
                        *current = None;
                    }
                    (Delete, Deleted)
                }
                None => (Delete, Absent),
            },
        };
        let (outcome, returned_at) = match op.fate {
            Fate::Known => (outcome, Some(point + op.after)),
            Fate::Unknown {
                returned: true,
                bounded: true,
                ..
            } => (Outcome::Uncertain, Some(point + op.after)),
            Fate::Unknown { returned, .. } => (Unknown, returned.then_some(point + op.after)),
            Fate::Failed => (Outcome::Failed, Some(point + op.after)),
        };
        builder
            .push(
                ProcessId::new(0, op.thread),
                &[op.key],
                call,
                outcome,
                point - op.before,
                returned_at,
            )
            .unwrap();
    }
    builder.build()
}

/// Decides linearizability of one key's operations by trying every subset of the
/// unknown-outcome operations and every order that respects real time.
fn brute_force(ops: &[Operation]) -> bool {
    let ops: Vec<&Operation> = ops
        .iter()
        .filter(|op| {
            !matches!(
                (op.call, &op.outcome),
                (_, Outcome::Failed) | (Get, Unknown | Outcome::Uncertain)
            )
        })
        .collect();
    let maybe = |op: &Operation| matches!(op.outcome, Unknown | Outcome::Uncertain);
    let unknown: Vec<usize> = (0..ops.len()).filter(|&i| maybe(ops[i])).collect();
    let precedes = |a: &Operation, b: &Operation| {
        a.outcome != Unknown && a.returned_at.is_some_and(|at| at < b.invoked_at)
    };
    fn search(
        ops: &[&Operation],
        included: &[bool],
        placed: &mut Vec<bool>,
        state: Option<Value>,
        precedes: &dyn Fn(&Operation, &Operation) -> bool,
    ) -> bool {
        let remaining: Vec<usize> = (0..ops.len())
            .filter(|&i| included[i] && !placed[i])
            .collect();
        if remaining.is_empty() {
            return true;
        }
        for &i in &remaining {
            let ready = remaining
                .iter()
                .all(|&j| j == i || !precedes(ops[j], ops[i]));
            if !ready {
                continue;
            }
            let op = ops[i];
            let next = match (op.call, &op.outcome, state) {
                (Put(value), _, _) => Some(Some(value)),
                (Get, Found(want), Some(have)) if *want == have => Some(state),
                (Get, Absent, None) => Some(None),
                (Create(value), Created | Unknown | Outcome::Uncertain, None) => Some(Some(value)),
                (Create(_), Exists | Unknown | Outcome::Uncertain, Some(_)) => Some(state),
                (Delete, Deleted | Unknown | Outcome::Uncertain, _)
                    if state.is_some() || op.outcome != Deleted =>
                {
                    Some(None)
                }
                (Delete, Absent, None) => Some(None),
                _ => None,
            };
            if let Some(next) = next {
                placed[i] = true;
                let found = search(ops, included, placed, next, precedes);
                placed[i] = false;
                if found {
                    return true;
                }
            }
        }
        false
    }
    (0..1u32 << unknown.len()).any(|subset| {
        let mut included = vec![true; ops.len()];
        for (bit, &i) in unknown.iter().enumerate() {
            included[i] = subset & (1 << bit) != 0;
        }
        search(
            &ops,
            &included,
            &mut vec![false; ops.len()],
            None,
            &precedes,
        )
    })
}

/// A random small history of one key, linearizable or not: random intervals, random
/// results, values from a pool small enough that they repeat.
fn random_small_history() -> impl Strategy<Value = History> {
    let value = (0..2u32, 0..2u64).prop_map(|(w, s)| v(w, s));
    let op = (
        0..12u64,
        0..8u64,
        prop_oneof![
            value.clone().prop_map(Put),
            Just(Get),
            value.clone().prop_map(Create),
            Just(Delete),
        ],
        prop_oneof![
            Just(0u8),
            Just(0),
            Just(0),
            Just(0),
            Just(1),
            Just(2),
            Just(3)
        ],
        value,
        any::<bool>(),
    );
    prop::collection::vec(op, 1..=7).prop_map(|ops| {
        let mut builder = History::builder();
        // Each operation its own process, so that no two operations are equal.
        for (thread, (invoked_at, length, call, unusual, value, flip)) in (0..).zip(ops) {
            let outcome = match (unusual, call) {
                (1, _) => Unknown,
                (2, _) => Outcome::Failed,
                (_, Put(_)) => Outcome::Ok,
                (_, Get) if flip => Found(value),
                (_, Get) => Absent,
                (_, Create(_)) if flip => Created,
                (_, Create(_)) => Exists,
                (_, Delete) if flip => Deleted,
                (_, Delete) => Absent,
            };
            let never_returned = unusual == 3 || (outcome == Unknown && flip);
            let returned_at = if never_returned && outcome == Unknown {
                None
            } else {
                Some(invoked_at + length)
            };
            builder
                .push(
                    ProcessId::new(0, thread),
                    b"k",
                    call,
                    outcome,
                    invoked_at,
                    returned_at,
                )
                .unwrap();
        }
        builder.build()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Sequential runs of the model (no two operations overlap) are linearizable.
    #[test]
    fn sequential_runs_of_the_model_are_linearizable(
        ops in prop::collection::vec(random_op(0, false), 1..200)
    ) {
        let history = run_model(&ops);
        prop_assert!(check(&history).is_ok(), "{}", check(&history).unwrap_err());
    }

    /// Runs of the model with overlapping intervals around the points where each
    /// operation took effect, some of unknown outcome (applied or not) or failed, are
    /// linearizable: the order of the points is a witness.
    #[test]
    fn concurrent_runs_of_the_model_are_linearizable(
        ops in prop::collection::vec(random_op(45, true), 1..300)
    ) {
        let history = run_model(&ops);
        let checked = check_with_threads(&history, 1);
        prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
        // Keys are checked alike whichever thread takes them.
        prop_assert_eq!(check_with_threads(&history, 4).ok(), checked.ok());
    }

    /// A sequential run in which one read's result is replaced by a value that was
    /// written to the key (before or after) but is not its value at that point, or by
    /// `absent` when the key has a value, is caught, at that read.
    ///
    /// This is a violation because nothing overlaps and nothing is of unknown outcome:
    /// real time then forces the one order, and with it the key's value at the read.
    /// With overlaps it need not be one (the read may overlap the write of the new
    /// result, or of the write that replaced it), and with unknown outcomes neither (an
    /// unknown put of the new result may land just before the read); so those are left
    /// to the brute-force comparison below.
    #[test]
    fn a_read_changed_to_another_written_value_is_caught(
        ops in prop::collection::vec(random_op(0, false), 2..150),
        read_choice in any::<prop::sample::Index>(),
        value_choice in any::<prop::sample::Index>(),
    ) {
        let history = run_model(&ops);
        let reads: Vec<usize> = (0..history.len())
            .filter(|&i| history.operations()[i].call == Get)
            .collect();
        prop_assume!(!reads.is_empty());
        let read = reads[read_choice.index(reads.len())];
        let original = &history.operations()[read];
        let mut others: Vec<Outcome> = history
            .operations()
            .iter()
            .filter(|op| op.key == original.key)
            .filter_map(|op| match (op.call, &op.outcome) {
                (Put(value), _) | (Create(value), Created) => Some(Found(value)),
                _ => None,
            })
            .chain([Absent])
            .filter(|outcome| *outcome != original.outcome)
            .collect();
        others.dedup();
        prop_assume!(!others.is_empty());
        let changed = others[value_choice.index(others.len())].clone();

        let mut builder = History::builder();
        for (i, op) in history.operations().iter().enumerate() {
            let outcome = if i == read { changed.clone() } else { op.outcome.clone() };
            builder.push(op.process, history.key(op.key), op.call, outcome,
                         op.invoked_at, op.returned_at).unwrap();
        }
        let error = check(&builder.build()).expect_err("the changed read must be caught");
        let violation = error.violation().expect("a violation");
        prop_assert_eq!(violation.kind, ViolationKind::NotLinearizable);
        prop_assert_eq!(violation.failing_operation().invoked_at, original.invoked_at);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// On small random histories, linearizable or not, the checker agrees with trying
    /// every order.
    #[test]
    fn agrees_with_brute_force_on_small_histories(history in random_small_history()) {
        let expected = brute_force(history.operations());
        let checked = check(&history);
        prop_assert_eq!(
            checked.is_ok(),
            expected,
            "checker: {:?}\nhistory: {:#?}",
            checked.as_ref().err().map(ToString::to_string),
            history.operations()
        );
        // A report's operations are the history's; checked alone, they fail at the same
        // operation; and without any one of them (but that one), they do not.
        if let Err(CheckError::Violation(violation)) = checked {
            prop_assert!(violation.operations.iter().all(|op| history.operations().contains(op)));
            if violation.kind == ViolationKind::NotLinearizable {
                let fails_at_the_same = |shown: &[&Operation]| {
                    let mut builder = History::builder();
                    for op in shown {
                        builder.push(op.process, b"k", op.call, op.outcome.clone(),
                                     op.invoked_at, op.returned_at).unwrap();
                    }
                    match check(&builder.build()) {
                        Err(CheckError::Violation(again)) => {
                            again.kind == ViolationKind::NotLinearizable
                                && again.failing_operation() == violation.failing_operation()
                        }
                        _ => false,
                    }
                };
                let shown: Vec<&Operation> = violation.operations.iter().collect();
                prop_assert!(fails_at_the_same(&shown), "{}", violation);
                for dropped in 0..shown.len() {
                    if dropped == violation.failing {
                        continue;
                    }
                    let mut fewer = shown.clone();
                    fewer.remove(dropped);
                    prop_assert!(!fails_at_the_same(&fewer), "{} could lose op {}", violation, dropped);
                }
            }
        }
    }
}

/// Random small histories with every kind of outcome, `Uncertain`
/// among them (the brute-force comparison above never draws one).
fn random_small_history_with_uncertain() -> impl Strategy<Value = History> {
    let value = (0..3u32, 0..1u64).prop_map(|(w, s)| v(w, s));
    let op = (
        0..20u64,
        0..12u64,
        prop_oneof![
            value.clone().prop_map(Put),
            Just(Get),
            value.clone().prop_map(Create),
            Just(Delete),
        ],
        0..8u8,
        value,
        any::<bool>(),
    );
    prop::collection::vec(op, 1..=9).prop_map(|ops| {
        let mut builder = History::builder();
        for (thread, (invoked_at, length, call, unusual, value, flip)) in (0..).zip(ops) {
            let outcome = match (unusual, call) {
                (1, _) => Unknown,
                (2, _) => Outcome::Failed,
                (3 | 4, _) => Outcome::Uncertain,
                (_, Put(_)) => Outcome::Ok,
                (_, Get) if flip => Found(value),
                (_, Get) => Absent,
                (_, Create(_)) if flip => Created,
                (_, Create(_)) => Exists,
                (_, Delete) if flip => Deleted,
                (_, Delete) => Absent,
            };
            let returned_at = if outcome == Unknown && flip {
                None
            } else {
                Some(invoked_at + length)
            };
            builder
                .push(
                    ProcessId::new(0, thread),
                    b"k",
                    call,
                    outcome,
                    invoked_at,
                    returned_at,
                )
                .unwrap();
        }
        builder.build()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn agrees_with_brute_force_with_uncertain_outcomes(history in random_small_history_with_uncertain()) {
        let expected = brute_force(history.operations());
        let checked = check(&history);
        prop_assert_eq!(
            checked.is_ok(),
            expected,
            "checker: {:?}\nhistory: {:#?}",
            checked.as_ref().err().map(ToString::to_string),
            history.operations()
        );
    }
}
