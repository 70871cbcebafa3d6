//! Deciding whether a history of key-value operations is linearizable.
//!
//! # Model
//!
//! Each key is one map entry whose state is `Option<Value>`, `None` at the start. A put
//! sets it. A get returns it (`Absent` iff `None`). A create sets it iff it is `None` and
//! answers `Created`, else answers `Exists` and changes nothing. A delete clears it iff it
//! is `Some` and answers `Deleted`, else answers `Absent`. An operation of
//! [`Outcome::Unknown`] outcome may take effect at any time after its invocation, or
//! never (its response is at infinity and it need not be linearized); one of
//! [`Outcome::Uncertain`] outcome took effect before its response or never (at its
//! response, configurations that did not linearize it drop it for good); an unknown get is
//! ignored, as is an operation that [`Outcome::Failed`].
//!
//! # Per key
//!
//! Linearizability is local (Herlihy and Wing 1990, Theorem 1): a history is
//! linearizable iff its subhistory on each object is. The keys are independent objects
//! of the model, so the checker splits the history by key and checks each alone
//! ("P-compositionality", Horn and Kroening 2015).
//!
//! # Per key: just-in-time linearization over the in-flight window
//!
//! The search of Wing and Gong, as improved by Lowe ("Testing for linearizability",
//! 2017), looks for a linearization point for every operation, caching each
//! (set of linearized operations, state) it has seen so it never searches from one
//! twice. Over a whole hot key that set is a bitset of tens of thousands of operations,
//! and the search can wander far back. This checker uses Lowe's just-in-time form, which
//! only ever looks at a sliding window: the operations *in flight* (invoked, not yet
//! returned) at the current time.
//!
//! It sweeps the key's invocations and responses in time order (invocations before
//! responses at equal times: equal times are concurrent) and keeps a set of
//! *configurations*, each a model state plus which in-flight operations it has already
//! linearized. A configuration stands for all the linearizations of the operations
//! invoked so far in which exactly those in flight are linearized and the rest are not.
//!
//! - At an invocation, the operation joins the window, not linearized in any
//!   configuration.
//! - At the response of operation `o`, every configuration must have linearized `o`: one
//!   that has keeps going; one that has not is extended in every way that linearizes some
//!   in-flight operations, in any order, and then `o`, each step allowed only if the model
//!   gives the recorded result. Operations after `o` are not tried now: they can be
//!   linearized at a later response just as well ("just in time").
//! - Then `o` leaves the window and its bit is cleared everywhere: it is *finalized*.
//!   Its effect lives on only in the states of the configurations.
//!
//! Why this is exact:
//!
//! - *Sound.* A configuration that survives the last event places every known operation
//!   between its invocation and its response (it joins the window at the one and must be
//!   placed by the other), so if `a` returned before `b` was invoked, `a` is placed
//!   before `b`; and every placement was checked against the model. That is a
//!   linearization.
//! - *Complete.* Take any linearization `L`. After each event at time `t`, let `P` be the
//!   shortest prefix of `L` holding every operation that has returned by `t`. Every
//!   operation in `P` was invoked by `t` (if one `p` were invoked after the response of
//!   the last operation `r` of `P`, real time would put `r` before `p`, not after). The
//!   configuration (state after `P`, the in-flight operations in `P`) is in the set: at
//!   an invocation `P` does not change; at the response of `o`, either `o` was in `P`
//!   already, or the new `P` is the old one followed by the operations of `L` up to `o`,
//!   all in flight (invoked, and not returned, else they were in the old `P`), which is
//!   one of the orders the search tries. (With the prunings below, a configuration at
//!   least as good is in the set instead.) So if the set becomes empty, no `L` exists.
//!
//! This is the windowing argument: after each response, all that matters about the past
//! is in the set of (state, linearized in-flight operations). An operation is finalized
//! at its response; in particular one that returned before every operation now in flight
//! was invoked precedes all of them in every linearization and appears in no bitset.
//! The memory and the work per event are bounded by the number of operations in flight
//! (about the number of threads touching the key at once), not by the length of the
//! key's history: a hot key with 20k operations costs 20k small steps, not a search over
//! 2^20k subsets.
//!
//! Four prunings keep the configuration sets small, the first three by *dominance*:
//! configuration `A` dominates `B` if every way to finish from `B` also finishes from `A`,
//! so dropping `B` loses nothing.
//!
//! - *Pure operations are linearized eagerly.* A get, a create answering `Exists` and a
//!   delete answering `Absent` never change the state. When one is in flight and the
//!   current state gives its result, linearizing it at once dominates waiting: any
//!   finish that linearizes it later goes through the same states without it. So every
//!   configuration is closed under this, and the search branches only on operations
//!   that change the state.
//! - *An unknown operation that would change nothing is not linearized*: keeping it
//!   available dominates spending it.
//! - *Fewer spent unknown operations dominate more.* Of two configurations with the same
//!   state and the same known in-flight operations linearized, where one has spent a
//!   subset of the other's unknown operations, the other is dropped, both in the search
//!   at a response (which explores those that spent fewer first) and in the set kept
//!   after it. An unknown operation every configuration has spent is finalized like a
//!   returned one.
//! - *Unknown operations nobody could observe are dropped* before the search (see
//!   `Observers` in the source for the proof): in a put-and-get workload, an unknown put
//!   whose value no later read returned. Otherwise an unknown operation that never took
//!   effect stays in the window to the end of the key's history.
//!
//! The cost is still exponential in the number of state-changing operations in flight at
//! once on one key: 9 processes that are always all in flight on a single key, with 50%
//! reads, explore about 65 configurations per response (see `benches/check.rs`).
//!
//! # Reports
//!
//! Before the search, each key is scanned for torn reads and for reads of values nobody
//! wrote to it, which get reports of their own kinds. When the search fails at the
//! response of `o`, the report shrinks the key's operations to a few that still fail at
//! that same response: the operations in flight at `o`'s response and the last `n` before
//! it (for growing `n`), plus a writer of each value they read, then dropping one
//! operation at a time while the rest still fail exactly there. A subset that fails
//! earlier, or where a read lost its value's only writer, is refused, since that would be a new violation made by the dropping (a create
//! answering `Created` after its delete was dropped), not the one found. If that finds
//! nothing within [`MAX_SHRINK_CANDIDATES`] operations, the report holds `o`, the
//! operations in flight with it, and the writers of the states the key could have had
//! and of what `o` read. When several keys fail, the report is of the most specific kind
//! (torn, never written, not linearizable), then of the earliest failure.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use hashbrown::{HashMap, HashSet};

use crate::history::KeyDisplay;
use crate::sync::{AtomicUsize, Ordering};
use crate::{Call, History, KeyId, Operation, Outcome, Value};

/// The most operations of one key that may be in flight at once, unknown-outcome ones
/// included (they stay in flight until every configuration has linearized them). A
/// configuration keeps them in a `u128` bitset.
pub const MAX_IN_FLIGHT_OPERATIONS_PER_KEY: usize = 128;

/// The most configurations the search of one key may hold or visit at one response
/// before it gives up ([`CheckError::TooManyConfigurations`]).
pub const MAX_CONFIGURATIONS_PER_KEY: usize = 1 << 20;

/// The most operations of one key a violation report is shrunk from; past it, the
/// report shows the operations around the failure without shrinking.
pub const MAX_SHRINK_CANDIDATES: usize = 1024;

/// Histories with fewer operations than this are checked on the calling thread only.
const MIN_OPERATIONS_FOR_THREADS: usize = 20_000;

/// What a successful check saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Keys checked.
    pub keys: usize,
    /// Operations in the history.
    pub operations: usize,
    /// Operations of unknown outcome among them.
    pub unknown_outcome_operations: usize,
    /// Most operations of one key in flight at once.
    pub max_in_flight_operations: usize,
    /// Most configurations held at once for one key.
    pub max_configurations: usize,
    /// Configurations created by the search, over all keys.
    pub explored_configurations: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "linearizable: {} operations ({} of unknown outcome) on {} keys; at most {} \
             in flight and {} configurations per key; {} configurations explored",
            self.operations,
            self.unknown_outcome_operations,
            self.keys,
            self.max_in_flight_operations,
            self.max_configurations,
            self.explored_configurations
        )
    }
}

/// What kind of violation a key shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A get read bytes that do not decode as any value.
    TornRead,
    /// A get read a value that no put or create on this key wrote.
    NeverWritten,
    /// No order of the key's operations that respects real time explains the results.
    NotLinearizable,
}

/// A key whose operations show a bug, with the operations that show it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The key.
    pub key: Box<[u8]>,
    /// What is wrong.
    pub kind: ViolationKind,
    /// The operations that show it, by invocation time.
    pub operations: Vec<Operation>,
    /// Which of [`operations`](Self::operations) is the one that failed.
    pub failing: usize,
    /// For [`ViolationKind::NotLinearizable`]: the states the key could hold just before
    /// the failing operation's response, in every order of what came before.
    pub possible_states: Vec<Option<Value>>,
}

impl Violation {
    /// The operation that failed.
    pub fn failing_operation(&self) -> &Operation {
        &self.operations[self.failing]
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failing = self.failing_operation();
        let key = KeyDisplay(&self.key);
        let what = format!("{} by {}", failing.call, failing.process);
        match self.kind {
            ViolationKind::TornRead => {
                write!(f, "torn read of key {key}: {what} read {}", failing.outcome)?
            }
            ViolationKind::NeverWritten => write!(
                f,
                "read of a value never written to key {key}: {what} answered {}",
                failing.outcome
            )?,
            ViolationKind::NotLinearizable => {
                write!(
                    f,
                    "key {key} is not linearizable: {what} answered {}, but the key could \
                     then only be ",
                    failing.outcome
                )?;
                for (i, state) in self.possible_states.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " or " };
                    match state {
                        Some(value) => write!(f, "{sep}{value}")?,
                        None => write!(f, "{sep}absent")?,
                    }
                }
            }
        }
        writeln!(f, "\noperations that show it, by invocation time:")?;
        for (i, operation) in self.operations.iter().enumerate() {
            let mark = if i == self.failing { "-> " } else { "   " };
            let returned = match (operation.returned_at, &operation.outcome) {
                (_, Outcome::Unknown) => "unknown".to_string(),
                (Some(at), _) => at.to_string(),
                (None, _) => "never".to_string(),
            };
            writeln!(
                f,
                "{mark}[{:>6}, {returned:>7}] {}: {} -> {}",
                operation.invoked_at, operation.process, operation.call, operation.outcome
            )?;
        }
        Ok(())
    }
}

/// Why a history did not check.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The history is not linearizable (or has a torn read).
    #[error("{0}")]
    Violation(Box<Violation>),
    /// More operations of one key were in flight at once than the checker can track.
    #[error(
        "key {}: more than {limit} operations in flight at time {at_time} \
         (unknown-outcome ones stay in flight)",
        KeyDisplay(key)
    )]
    TooManyInFlight {
        /// The key.
        key: Box<[u8]>,
        /// [`MAX_IN_FLIGHT_OPERATIONS_PER_KEY`].
        limit: usize,
        /// The invocation that found no room.
        at_time: u64,
    },
    /// The search of one key grew past its limit; this says nothing about whether the
    /// history is linearizable.
    #[error(
        "key {}: the search needed more than {limit} configurations at time {at_time}",
        KeyDisplay(key)
    )]
    TooManyConfigurations {
        /// The key.
        key: Box<[u8]>,
        /// [`MAX_CONFIGURATIONS_PER_KEY`].
        limit: usize,
        /// The response being linearized.
        at_time: u64,
    },
}

impl CheckError {
    /// The violation, if this is one.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            CheckError::Violation(violation) => Some(violation),
            _ => None,
        }
    }
}

/// Checks that `history` is linearizable, key by key; see the module docs.
///
/// Large histories are checked on several threads (one key at a time each). The answer
/// does not depend on how many: every key is checked, and when several fail the one
/// reported is chosen as the module docs say.
pub fn check(history: &History) -> Result<Summary, CheckError> {
    let threads = if history.len() < MIN_OPERATIONS_FOR_THREADS {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(16))
    };
    check_with_threads(history, threads)
}

/// [`check`] on `threads` threads (at least one: the caller's).
pub fn check_with_threads(history: &History, threads: usize) -> Result<Summary, CheckError> {
    let mut by_key: Vec<Vec<u32>> = vec![Vec::new(); history.key_count()];
    for (index, operation) in history.operations().iter().enumerate() {
        let index = u32::try_from(index).expect("a history holds fewer than 2^32 operations");
        by_key[operation.key.0 as usize].push(index);
    }
    // Biggest keys first, so no thread is left with a hot key at the end.
    let mut order: Vec<usize> = (0..by_key.len()).collect();
    order.sort_by_key(|&key| Reverse(by_key[key].len()));

    let next_key = AtomicUsize::new(0);
    let work = || {
        let mut checker = KeyChecker::new(history);
        let mut result = KeysResult::default();
        loop {
            // Relaxed: the counter only hands out indices; `by_key` and `history` are
            // shared read-only and were written before the threads were spawned.
            let i = next_key.fetch_add(1, Ordering::Relaxed);
            let Some(&key) = order.get(i) else {
                return result;
            };
            result.add(checker.check_key(KeyId(key as u32), &by_key[key]));
        }
    };
    let mut result = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.max(1)).map(|_| scope.spawn(work)).collect();
        let mut result = work();
        for helper in helpers {
            result.merge(helper.join().expect("a checker thread panicked"));
        }
        result
    });
    if let Some((_, error)) = result.error.take() {
        return Err(error);
    }
    result.summary.keys = history.key_count();
    result.summary.operations = history.len();
    result.summary.unknown_outcome_operations = history
        .operations()
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Unknown | Outcome::Uncertain))
        .count();
    Ok(result.summary)
}

/// Which error to report when several keys fail: lower first (kind, then time, then key).
type Rank = (u8, u64, KeyId);

/// The results of the keys one thread checked.
#[derive(Default)]
struct KeysResult {
    summary: Summary,
    /// The error to report so far, with its rank.
    error: Option<(Rank, CheckError)>,
}

impl KeysResult {
    fn add(&mut self, outcome: Result<KeyStats, (Rank, CheckError)>) {
        match outcome {
            Ok(stats) => {
                let summary = &mut self.summary;
                summary.max_in_flight_operations =
                    summary.max_in_flight_operations.max(stats.max_in_flight);
                summary.max_configurations =
                    summary.max_configurations.max(stats.max_configurations);
                summary.explored_configurations += stats.explored;
            }
            Err((rank, error)) => {
                if self.error.as_ref().is_none_or(|(best, _)| rank < *best) {
                    self.error = Some((rank, error));
                }
            }
        }
    }

    fn merge(&mut self, other: KeysResult) {
        self.add(Ok(KeyStats {
            max_in_flight: other.summary.max_in_flight_operations,
            max_configurations: other.summary.max_configurations,
            explored: other.summary.explored_configurations,
        }));
        if let Some(error) = other.error {
            self.add(Err(error));
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct KeyStats {
    max_in_flight: usize,
    max_configurations: usize,
    explored: u64,
}

/// How the search of one key (or of a subset of its operations) failed. Operations are
/// named by their index in the history.
#[derive(Debug)]
enum KeyFailure {
    Torn(u32),
    NeverWritten(u32),
    NotLinearizable {
        failing: u32,
        states: Vec<State>,
        in_flight: Vec<u32>,
    },
    TooManyInFlight {
        at_time: u64,
    },
    TooManyConfigurations {
        at_time: u64,
    },
}

/// The model's state of one key.
type State = Option<Value>;

/// An operation as the model sees it: the call together with the result it must give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Put(Value),
    GetFound(Value),
    GetAbsent,
    CreateCreated(Value),
    CreateExists,
    DeleteDeleted,
    DeleteAbsent,
    MaybePut(Value),
    MaybeCreate(Value),
    MaybeDelete,
}

impl Step {
    /// The step of `operation`, `None` if it cannot affect the search (an unknown get,
    /// a failed anything, a torn read, which the scan before the search reports).
    fn of(operation: &Operation) -> Option<Step> {
        Some(match (operation.call, &operation.outcome) {
            (_, Outcome::Failed)
            | (Call::Get, Outcome::Unknown | Outcome::Uncertain | Outcome::Torn(_)) => return None,
            (Call::Put(value), Outcome::Unknown | Outcome::Uncertain) => Step::MaybePut(value),
            (Call::Create(value), Outcome::Unknown | Outcome::Uncertain) => {
                Step::MaybeCreate(value)
            }
            (Call::Delete, Outcome::Unknown | Outcome::Uncertain) => Step::MaybeDelete,
            (Call::Put(value), _) => Step::Put(value),
            (Call::Get, Outcome::Found(value)) => Step::GetFound(*value),
            (Call::Get, _) => Step::GetAbsent,
            (Call::Create(value), Outcome::Created) => Step::CreateCreated(value),
            (Call::Create(_), _) => Step::CreateExists,
            (Call::Delete, Outcome::Deleted) => Step::DeleteDeleted,
            (Call::Delete, _) => Step::DeleteAbsent,
        })
    }

    /// The state after this step from `state`, or `None` if the model would not give the
    /// recorded result there.
    fn apply(self, state: State) -> Option<State> {
        match (self, state) {
            (Step::Put(value) | Step::MaybePut(value), _) => Some(Some(value)),
            (Step::GetFound(want), Some(value)) if value == want => Some(state),
            (Step::GetAbsent | Step::DeleteAbsent, None) => Some(None),
            (Step::CreateCreated(value) | Step::MaybeCreate(value), None) => Some(Some(value)),
            (Step::CreateExists | Step::MaybeCreate(_), Some(_)) => Some(state),
            (Step::DeleteDeleted, Some(_)) | (Step::MaybeDelete, _) => Some(None),
            _ => None,
        }
    }

    /// Never changes the state, wherever it is linearized.
    fn is_pure(self) -> bool {
        matches!(
            self,
            Step::GetFound(_) | Step::GetAbsent | Step::CreateExists | Step::DeleteAbsent
        )
    }

    fn is_unknown(self) -> bool {
        matches!(
            self,
            Step::MaybePut(_) | Step::MaybeCreate(_) | Step::MaybeDelete
        )
    }

    /// The value this step may write.
    fn written(self) -> Option<Value> {
        match self {
            Step::Put(value)
            | Step::MaybePut(value)
            | Step::CreateCreated(value)
            | Step::MaybeCreate(value) => Some(value),
            _ => None,
        }
    }
}

/// Which operations of a key could tell whether an unknown operation took effect.
///
/// An unknown put or create of `v` invoked at `t` can be dropped (treated as never
/// taking effect) if no get that returned at or after `t` read `v` and no create that
/// answered `Exists` nor delete that answered `Deleted` returned at or after `t`. Proof:
/// take a linearization that applies it; only operations that returned at or after `t`
/// can come after it. Drop it; the states change only from it to the next operation
/// that overwrites the key (a put, a delete that deletes, an unknown delete), from
/// `Some(v)` back to what was there before. In between, no get read `v`; a get of
/// anything else or `absent`, a create answering `Created`, a delete answering `Absent`
/// cannot be there (they would have failed on `Some(v)`); `Exists` and `Deleted` are
/// excluded; an unknown create there did nothing and may as well not be applied. So the
/// rest is still a linearization.
///
/// Likewise an unknown delete invoked at `t` can be dropped if no get answering
/// `absent`, create answering `Created` or delete answering `Absent` returned at or after
/// `t`, and the key has no unknown create (which the emptied key could have let create).
///
/// In put-and-get workloads this drops every unknown put whose value nobody read, so
/// writes lost by dead processes cost the search nothing.
struct Observers {
    /// Per value, the last response of a get that read it.
    last_read: HashMap<Value, u64>,
    /// The last response of a create answering `Exists` or a delete answering `Deleted`.
    last_some_observer: Option<u64>,
    /// The last response of a get answering `absent`, a create answering `Created` or a
    /// delete answering `Absent`.
    last_none_observer: Option<u64>,
    has_unknown_create: bool,
}

impl Observers {
    fn of(operations: &[KeyOp]) -> Self {
        let mut observers = Observers {
            last_read: HashMap::new(),
            last_some_observer: None,
            last_none_observer: None,
            has_unknown_create: false,
        };
        for operation in operations {
            let Some(step) = operation.step else {
                continue;
            };
            let returned_at = operation.returned_at;
            let last = match step {
                Step::GetFound(value) => observers.last_read.entry(value).or_insert(0),
                Step::CreateExists | Step::DeleteDeleted => {
                    observers.last_some_observer.get_or_insert(0)
                }
                Step::GetAbsent | Step::CreateCreated(_) | Step::DeleteAbsent => {
                    observers.last_none_observer.get_or_insert(0)
                }
                Step::MaybeCreate(_) => {
                    observers.has_unknown_create = true;
                    continue;
                }
                Step::Put(_) | Step::MaybePut(_) | Step::MaybeDelete => continue,
            };
            *last = (*last).max(returned_at);
        }
        observers
    }

    /// Whether `step`, invoked at `invoked_at`, must take part in the search.
    fn may_observe(&self, step: Step, invoked_at: u64) -> bool {
        let after = |last: Option<u64>| last.is_some_and(|last| last >= invoked_at);
        match step {
            Step::MaybePut(value) | Step::MaybeCreate(value) => {
                after(self.last_read.get(&value).copied()) || after(self.last_some_observer)
            }
            Step::MaybeDelete => self.has_unknown_create || after(self.last_none_observer),
            _ => true,
        }
    }
}

/// One point of the search: a state and which in-flight slots it has linearized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Config {
    state: State,
    linearized: u128,
}

/// One operation of the key being searched.
#[derive(Clone, Copy, Debug)]
struct KeyOp {
    /// Index in the history.
    index: u32,
    /// `None`: the operation cannot affect the search.
    step: Option<Step>,
    torn: bool,
    invoked_at: u64,
    /// `u64::MAX` for an unknown outcome: it may take effect until the end.
    returned_at: u64,
}

#[derive(Clone, Copy)]
struct Slot {
    /// Index of the operation in the history.
    operation: u32,
    step: Step,
}

/// The search over one key at a time; its buffers are reused from key to key.
struct KeyChecker<'h> {
    history: &'h History,
    slots: [Slot; MAX_IN_FLIGHT_OPERATIONS_PER_KEY],
    /// Slots holding an in-flight operation.
    used: u128,
    /// Used slots whose operation is pure ([`Step::is_pure`]).
    pure: u128,
    /// Used slots whose operation is of unknown outcome.
    unknown: u128,
    configs: Vec<Config>,
    next: HashSet<Config>,
    visited: HashSet<Config>,
    /// Configurations still to extend, fewest unknown operations spent first.
    frontier: BinaryHeap<(Reverse<u32>, Config)>,
    /// Per (state, known operations linearized): the fewest unknown operations spent by
    /// a configuration visited at this response (see [`Self::dominated`]).
    fewest_spent: HashMap<(State, u128), u128>,
    /// (time, 0 for an invocation or 1 for a response, index in the key's operations).
    events: Vec<(u64, u8, u32)>,
    /// Slot of each of the key's operations while it is in flight.
    slot_of: Vec<u8>,
    /// The key's operations, as the search needs them.
    key_ops: Vec<KeyOp>,
    stats: KeyStats,
}

impl<'h> KeyChecker<'h> {
    fn new(history: &'h History) -> Self {
        KeyChecker {
            history,
            slots: [Slot {
                operation: 0,
                step: Step::GetAbsent,
            }; MAX_IN_FLIGHT_OPERATIONS_PER_KEY],
            used: 0,
            pure: 0,
            unknown: 0,
            configs: Vec::new(),
            next: HashSet::new(),
            visited: HashSet::new(),
            frontier: BinaryHeap::new(),
            fewest_spent: HashMap::new(),
            events: Vec::new(),
            slot_of: Vec::new(),
            key_ops: Vec::new(),
            stats: KeyStats::default(),
        }
    }

    fn operation(&self, index: u32) -> &'h Operation {
        &self.history.operations()[index as usize]
    }

    /// Checks the operations `operations` (history indices, ascending) of `key`.
    fn check_key(
        &mut self,
        key: KeyId,
        operations: &[u32],
    ) -> Result<KeyStats, (Rank, CheckError)> {
        let failure = match self.search(operations) {
            Ok(stats) => return Ok(stats),
            Err(failure) => failure,
        };
        let history = self.history;
        let key_bytes = || Box::<[u8]>::from(history.key(key));
        let (rank, error) = match failure {
            KeyFailure::Torn(failing) => (
                0,
                self.report(
                    key,
                    ViolationKind::TornRead,
                    failing,
                    vec![failing],
                    Vec::new(),
                ),
            ),
            KeyFailure::NeverWritten(failing) => {
                // Show who wrote the value, if someone wrote it to another key.
                let mut shown = vec![failing];
                if let Outcome::Found(value) = self.operation(failing).outcome {
                    shown.extend(
                        (0..history.len() as u32)
                            .filter(|&i| {
                                Step::of(self.operation(i)).and_then(Step::written) == Some(value)
                            })
                            .take(4),
                    );
                }
                (
                    1,
                    self.report(key, ViolationKind::NeverWritten, failing, shown, Vec::new()),
                )
            }
            KeyFailure::NotLinearizable {
                failing,
                states,
                in_flight,
            } => {
                let (shown, states) = match self.shrink(operations, failing) {
                    Some(shrunk) => shrunk,
                    None => (
                        self.witnesses(operations, failing, &states, &in_flight),
                        states,
                    ),
                };
                (
                    2,
                    self.report(key, ViolationKind::NotLinearizable, failing, shown, states),
                )
            }
            KeyFailure::TooManyInFlight { at_time } => (
                3,
                CheckError::TooManyInFlight {
                    key: key_bytes(),
                    limit: MAX_IN_FLIGHT_OPERATIONS_PER_KEY,
                    at_time,
                },
            ),
            KeyFailure::TooManyConfigurations { at_time } => (
                3,
                CheckError::TooManyConfigurations {
                    key: key_bytes(),
                    limit: MAX_CONFIGURATIONS_PER_KEY,
                    at_time,
                },
            ),
        };
        let at = match &error {
            CheckError::Violation(violation) => violation
                .failing_operation()
                .returned_at
                .unwrap_or(u64::MAX),
            CheckError::TooManyInFlight { at_time, .. }
            | CheckError::TooManyConfigurations { at_time, .. } => *at_time,
        };
        Err(((rank, at, key), error))
    }

    /// The scan for bad reads, then the search, over `operations` (history indices,
    /// ascending) of one key.
    fn search(&mut self, operations: &[u32]) -> Result<KeyStats, KeyFailure> {
        // One pass over the history's (large, scattered) operations; the rest works on
        // this compact copy.
        let history = self.history;
        self.key_ops.clear();
        self.key_ops.extend(operations.iter().map(|&index| {
            let operation = &history.operations()[index as usize];
            KeyOp {
                index,
                step: Step::of(operation),
                torn: matches!(operation.outcome, Outcome::Torn(_)),
                invoked_at: operation.invoked_at,
                returned_at: match operation.outcome {
                    Outcome::Unknown => u64::MAX,
                    _ => operation.returned_at.unwrap_or(u64::MAX),
                },
            }
        }));
        self.scan_reads()?;
        let observers = Observers::of(&self.key_ops);
        self.events.clear();
        for (local, op) in self.key_ops.iter().enumerate() {
            let Some(step) = op.step else {
                continue;
            };
            if !observers.may_observe(step, op.invoked_at) {
                continue;
            }
            self.events.push((op.invoked_at, 0, local as u32));
            // An unknown operation never responds; an uncertain one does (any effect it
            // had was before).
            if op.returned_at != u64::MAX {
                self.events.push((op.returned_at, 1, local as u32));
            } else {
                debug_assert!(step.is_unknown(), "validated: a known outcome returned");
            }
        }
        self.events.sort_unstable();
        self.slot_of.clear();
        self.slot_of.resize(operations.len(), 0);
        self.used = 0;
        self.pure = 0;
        self.unknown = 0;
        self.configs.clear();
        self.configs.push(Config {
            state: None,
            linearized: 0,
        });
        self.stats = KeyStats {
            max_in_flight: 0,
            max_configurations: 1,
            explored: 0,
        };
        for event in 0..self.events.len() {
            let (time, kind, local) = self.events[event];
            if kind == 0 {
                self.invoke(local, time)?;
            } else {
                self.respond(local, time)?;
            }
        }
        Ok(self.stats)
    }

    /// Finds the first torn read, else the first read of a value nobody wrote to the key.
    fn scan_reads(&self) -> Result<(), KeyFailure> {
        let first = |failed: &dyn Fn(&KeyOp) -> bool| {
            self.key_ops
                .iter()
                .filter(|op| failed(op))
                .min_by_key(|op| (op.returned_at, op.index))
                .map(|op| op.index)
        };
        if let Some(torn) = first(&|op| op.torn) {
            return Err(KeyFailure::Torn(torn));
        }
        let written: HashSet<Value> = self
            .key_ops
            .iter()
            .filter_map(|op| op.step.and_then(Step::written))
            .collect();
        let never_written = first(
            &|op| matches!(op.step, Some(Step::GetFound(value)) if !written.contains(&value)),
        );
        match never_written {
            Some(failing) => Err(KeyFailure::NeverWritten(failing)),
            None => Ok(()),
        }
    }

    fn invoke(&mut self, local: u32, time: u64) -> Result<(), KeyFailure> {
        let op = self.key_ops[local as usize];
        let step = op.step.expect("only operations with a step have events");
        let free = !self.used;
        if free == 0 {
            return Err(KeyFailure::TooManyInFlight { at_time: time });
        }
        let slot = free.trailing_zeros();
        let bit = 1u128 << slot;
        self.slots[slot as usize] = Slot {
            operation: op.index,
            step,
        };
        self.slot_of[local as usize] = slot as u8;
        self.used |= bit;
        self.stats.max_in_flight = self
            .stats
            .max_in_flight
            .max(self.used.count_ones() as usize);
        if step.is_unknown() {
            self.unknown |= bit;
        }
        if step.is_pure() {
            self.pure |= bit;
            // Linearize it at once wherever the state gives its result (see the module
            // docs). Configurations stay distinct: the new bit depends on the state only.
            for config in &mut self.configs {
                if step.apply(config.state).is_some() {
                    config.linearized |= bit;
                }
            }
        }
        Ok(())
    }

    fn respond(&mut self, local: u32, time: u64) -> Result<(), KeyFailure> {
        let slot = self.slot_of[local as usize];
        let bit = 1u128 << slot;
        let Slot {
            operation: index,
            step,
        } = self.slots[slot as usize];
        if self.used & bit == 0 || self.key_ops[local as usize].index != index {
            // An uncertain operation that every configuration spent before its response
            // was finalized then (its slot may serve another operation now).
            debug_assert!(self.key_ops[local as usize]
                .step
                .is_some_and(Step::is_unknown));
            return Ok(());
        }
        let optional = step.is_unknown();
        if self
            .configs
            .iter()
            .all(|config| config.linearized & bit != 0)
        {
            // Every configuration has linearized it already (a read linearized on the
            // spot, say): finalize it. No two configurations become equal, as they all
            // had the bit.
            for config in &mut self.configs {
                config.linearized &= !bit;
            }
            return self.finalized(bit, time);
        }
        self.next.clear();
        self.visited.clear();
        self.frontier.clear();
        self.fewest_spent.clear();
        for i in 0..self.configs.len() {
            let config = self.configs[i];
            if config.linearized & bit != 0 {
                self.next.insert(config);
            } else {
                if optional {
                    // An uncertain operation may never have taken effect: configurations
                    // without it go on as they are (it leaves the window below).
                    self.next.insert(config);
                }
                self.visit(config);
            }
        }
        while let Some((_, config)) = self.frontier.pop() {
            if self.dominated(config) {
                continue;
            }
            // Linearize the responding operation now...
            if let Some(state) = step.apply(config.state) {
                let done = self.closed(Config {
                    state,
                    linearized: config.linearized | bit,
                });
                self.next.insert(done);
            }
            // ... or first another in-flight operation that changes the state.
            let mut others = self.used & !config.linearized & !self.pure & !bit;
            while others != 0 {
                let other = others.trailing_zeros();
                others &= others - 1;
                let other_step = self.slots[other as usize].step;
                let Some(state) = other_step.apply(config.state) else {
                    continue;
                };
                if other_step.is_unknown() && state == config.state {
                    continue; // Keeping it available dominates spending it on nothing.
                }
                let extended = self.closed(Config {
                    state,
                    linearized: config.linearized | 1 << other,
                });
                self.stats.explored += 1;
                if extended.linearized & bit != 0 {
                    self.next.insert(extended); // The closure linearized a pure `o`.
                } else {
                    self.visit(extended);
                    if self.visited.len() > MAX_CONFIGURATIONS_PER_KEY {
                        return Err(KeyFailure::TooManyConfigurations { at_time: time });
                    }
                }
            }
        }
        if self.next.is_empty() {
            let mut states: Vec<State> = self.configs.iter().map(|config| config.state).collect();
            states.sort_unstable();
            states.dedup();
            let mut in_flight = Vec::new();
            let mut used = self.used & !bit;
            while used != 0 {
                in_flight.push(self.slots[used.trailing_zeros() as usize].operation);
                used &= used - 1;
            }
            return Err(KeyFailure::NotLinearizable {
                failing: index,
                states,
                in_flight,
            });
        }
        // `o` is finalized: it leaves the window and its bit is cleared everywhere.
        self.configs.clear();
        self.configs.extend(self.next.drain().map(|config| Config {
            state: config.state,
            linearized: config.linearized & !bit,
        }));
        if optional {
            // Some configurations spent it and some did not: with the bit cleared, two
            // may now be equal.
            self.configs
                .sort_unstable_by_key(|config| (config.state, config.linearized));
            self.configs.dedup();
        }
        self.finalized(bit, time)
    }

    /// Frees the slot `bit` of an operation that every configuration has linearized and
    /// no longer marks.
    fn finalized(&mut self, bit: u128, time: u64) -> Result<(), KeyFailure> {
        self.used &= !bit;
        self.pure &= !bit;
        self.unknown &= !bit;
        if self.unknown != 0 {
            self.prune_unknown();
        }
        if self.configs.len() > MAX_CONFIGURATIONS_PER_KEY {
            return Err(KeyFailure::TooManyConfigurations { at_time: time });
        }
        self.stats.max_configurations = self.stats.max_configurations.max(self.configs.len());
        Ok(())
    }

    /// Queues `config` to be extended, unless it was visited or is dominated.
    fn visit(&mut self, config: Config) {
        if self.dominated(config) || !self.visited.insert(config) {
            return;
        }
        let spent = config.linearized & self.unknown;
        if self.unknown != 0 {
            let group = (config.state, config.linearized & !self.unknown);
            let fewest = self.fewest_spent.entry(group).or_insert(spent);
            if spent.count_ones() < fewest.count_ones() {
                *fewest = spent;
            }
        }
        self.frontier.push((Reverse(spent.count_ones()), config));
    }

    /// Whether a configuration visited at this response has the same state, the same
    /// known operations linearized and spent strictly fewer unknown operations (a
    /// subset): everything `config` leads to, that one leads to with more to spare.
    /// Exploring those that spent fewer first makes this prune more.
    fn dominated(&self, config: Config) -> bool {
        if self.unknown == 0 {
            return false;
        }
        let spent = config.linearized & self.unknown;
        let group = (config.state, config.linearized & !self.unknown);
        self.fewest_spent
            .get(&group)
            .is_some_and(|&fewest| fewest != spent && fewest & !spent == 0)
    }

    /// `config` with every pure in-flight operation linearized that its state allows.
    fn closed(&self, mut config: Config) -> Config {
        let mut pending = self.used & self.pure & !config.linearized;
        while pending != 0 {
            let slot = pending.trailing_zeros();
            pending &= pending - 1;
            if self.slots[slot as usize].step.apply(config.state).is_some() {
                config.linearized |= 1 << slot;
            }
        }
        config
    }

    /// Finalizes unknown operations every configuration has spent, and drops
    /// configurations that spent a superset of the unknown operations another with the
    /// same state and the same known operations spent.
    fn prune_unknown(&mut self) {
        let spent_everywhere = self
            .configs
            .iter()
            .fold(self.unknown, |spent, config| spent & config.linearized);
        if spent_everywhere != 0 {
            for config in &mut self.configs {
                config.linearized &= !spent_everywhere;
            }
            self.used &= !spent_everywhere;
            self.unknown &= !spent_everywhere;
        }
        let unknown = self.unknown;
        let group = |config: &Config| (config.state, config.linearized & !unknown);
        // Within a group, fewer spent first: a subset sorts before its supersets.
        self.configs.sort_unstable_by_key(|config| {
            (
                group(config),
                (config.linearized & unknown).count_ones(),
                config.linearized,
            )
        });
        self.configs.dedup();
        let mut kept = 0;
        let mut group_start = 0;
        for i in 0..self.configs.len() {
            let config = self.configs[i];
            if kept > group_start && group(&self.configs[group_start]) != group(&config) {
                group_start = kept;
            }
            let spent = config.linearized & unknown;
            let dominated = self.configs[group_start..kept]
                .iter()
                .any(|better| better.linearized & unknown & !spent == 0);
            if !dominated {
                self.configs[kept] = config;
                kept += 1;
            }
        }
        self.configs.truncate(kept);
    }

    /// The smallest subset of `operations` (one key's) found that fails at the same
    /// response as the whole, with the states the key could have had there.
    ///
    /// The candidates are the operations in flight at the failure plus the last `n` to
    /// respond before it, for growing `n`, plus a writer of every value they read; then
    /// every operation but the failing one is dropped in turn if the rest still fails at
    /// that same response, until none can be. A subset that fails *earlier* is refused:
    /// that would be a new problem made by the removal (a create answering `Created`
    /// whose delete was dropped), not the one found; so is one where a read lost its
    /// value's only writer (the scan reports it as never written, not as failing here).
    fn shrink(&mut self, operations: &[u32], failing: u32) -> Option<(Vec<u32>, Vec<State>)> {
        let failed_at = self.operation(failing).returned_at?;
        let mut before: Vec<u32> = Vec::new();
        let mut around: Vec<u32> = Vec::new();
        for &i in operations.iter().filter(|&&i| i != failing) {
            let op = self.operation(i);
            match (op.returned_at, &op.outcome) {
                (_, Outcome::Unknown) | (None, _) if op.invoked_at <= failed_at => {
                    around.push(i);
                }
                (_, Outcome::Unknown) | (None, _) => {}
                (Some(returned_at), _) if returned_at <= failed_at => before.push(i),
                (Some(_), _) if op.invoked_at <= failed_at => around.push(i),
                _ => {}
            }
        }
        before.sort_unstable_by_key(|&i| self.operation(i).returned_at);
        let mut last = 16;
        loop {
            let mut candidates: Vec<u32> = before[before.len().saturating_sub(last)..].to_vec();
            candidates.extend(&around);
            candidates.push(failing);
            self.add_writers(operations, &mut candidates);
            if candidates.len() > MAX_SHRINK_CANDIDATES {
                return None;
            }
            if let Some(states) = self.fails_at(&candidates, failing) {
                // Until no single operation can go: dropping one may let another go.
                let mut states = states;
                let mut shrunk = true;
                while shrunk {
                    shrunk = false;
                    let mut i = 0;
                    while i < candidates.len() {
                        let dropped = candidates[i];
                        if dropped == failing {
                            i += 1;
                            continue;
                        }
                        candidates.remove(i);
                        match self.fails_at(&candidates, failing) {
                            Some(smaller) => {
                                states = smaller;
                                shrunk = true;
                            }
                            None => {
                                candidates.insert(i, dropped);
                                i += 1;
                            }
                        }
                    }
                }
                return Some((candidates, states));
            }
            if last >= before.len() {
                return None;
            }
            last *= 4;
        }
    }

    /// Whether the search of `subset` fails first at `failing`'s response, and with
    /// which possible states.
    fn fails_at(&mut self, subset: &[u32], failing: u32) -> Option<Vec<State>> {
        match self.search(subset) {
            Err(KeyFailure::NotLinearizable {
                failing: failed,
                states,
                ..
            }) if failed == failing => Some(states),
            _ => None,
        }
    }

    /// Adds to `subset` (and sorts it) a writer of every value it reads.
    fn add_writers(&self, operations: &[u32], subset: &mut Vec<u32>) {
        let read: Vec<Value> = subset
            .iter()
            .filter_map(|&i| match self.operation(i).outcome {
                Outcome::Found(value) => Some(value),
                _ => None,
            })
            .collect();
        for value in read {
            let writes =
                |i: &u32| Step::of(self.operation(*i)).and_then(Step::written) == Some(value);
            if !subset.iter().any(writes) {
                subset.extend(operations.iter().find(|i| writes(i)));
            }
        }
        subset.sort_unstable();
        subset.dedup();
    }

    /// Without a shrunk subset: the failing operation, those in flight with it, the
    /// writers of the states the key could have had and of what it read, and the last
    /// delete before it if the key could have been absent.
    fn witnesses(
        &self,
        operations: &[u32],
        failing: u32,
        states: &[State],
        in_flight: &[u32],
    ) -> Vec<u32> {
        let failing_op = self.operation(failing);
        let mut shown = vec![failing];
        shown.extend(in_flight);
        let mut wanted: Vec<Value> = states.iter().flatten().copied().collect();
        if let Outcome::Found(value) = failing_op.outcome {
            wanted.push(value);
        }
        shown.extend(operations.iter().copied().filter(|&i| {
            Step::of(self.operation(i))
                .and_then(Step::written)
                .is_some_and(|value| wanted.contains(&value))
        }));
        if states.contains(&None) {
            let failed_at = failing_op.returned_at.unwrap_or(u64::MAX);
            let last_delete = operations
                .iter()
                .copied()
                .filter(|&i| {
                    matches!(
                        Step::of(self.operation(i)),
                        Some(Step::DeleteDeleted | Step::MaybeDelete)
                    ) && self.operation(i).invoked_at < failed_at
                })
                .max_by_key(|&i| self.operation(i).invoked_at);
            shown.extend(last_delete);
        }
        shown
    }

    fn report(
        &self,
        key: KeyId,
        kind: ViolationKind,
        failing: u32,
        mut shown: Vec<u32>,
        possible_states: Vec<State>,
    ) -> CheckError {
        // History indices are in invocation order.
        shown.sort_unstable();
        shown.dedup();
        let operations = shown.iter().map(|&i| self.operation(i).clone()).collect();
        let failing = shown
            .binary_search(&failing)
            .expect("the failing operation is shown");
        CheckError::Violation(Box::new(Violation {
            key: self.history.key(key).into(),
            kind,
            operations,
            failing,
            possible_states,
        }))
    }
}

#[cfg(test)]
mod tests;
