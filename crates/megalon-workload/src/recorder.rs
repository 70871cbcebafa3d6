//! Recording a history while many threads (and processes) run operations.
//!
//! Every thread owns a [`ThreadRecorder`]: recording takes no lock and, once the thread
//! has seen its keys, allocates nothing but the amortized growth of its own list of
//! operations. All recorders of a run read one [`Clock`], so their timestamps can be
//! compared. When the threads are done, [`ThreadRecorder::finish`] turns each recorder
//! into a [`ThreadLog`] and [`History::merge`] merges the logs.
//!
//! Across processes, each child writes its log as text ([`ThreadLog::write_to`], or line
//! by line as it goes with [`ThreadRecorder::journaled`], which survives the child's
//! death), and the parent reads them back ([`ThreadLog::read_from`]) and merges them. The
//! children must then share a clock: pass [`Clock::external`] a function reading a
//! counter that lives in memory they all map.

use std::fmt;
use std::io::{BufRead, Write};
use std::sync::Arc;

use hashbrown::HashMap;

use crate::history::intern;
use crate::sync::{AtomicU64, Ordering};
use crate::{Call, Error, History, KeyId, Operation, Outcome, ProcessId};

/// The clock every recorder of a run reads its timestamps from.
///
/// It must be one total order that agrees with what happened: if one reading's thread
/// did something (stored a value) before taking it, and another thread took a later
/// reading, that other thread must see what was done. [`Clock::counter`] has this
/// property; an external clock must give it too (a `fetch_add(1, AcqRel)` on a counter
/// in shared memory does).
#[derive(Clone)]
pub struct Clock {
    source: ClockSource,
}

#[derive(Clone)]
enum ClockSource {
    Counter(Arc<AtomicU64>),
    External(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl Clock {
    /// A counter in this process's memory, bumped at every reading: every reading is
    /// distinct, so no two operations of different threads look simultaneous.
    pub fn counter() -> Self {
        Clock {
            source: ClockSource::Counter(Arc::new(AtomicU64::new(0))),
        }
    }

    /// Readings from `now`, e.g. a `fetch_add(1, AcqRel)` on a counter in a memory map
    /// shared by the processes of a run. `now` must never go backwards and must order
    /// readings as described on [`Clock`].
    pub fn external(now: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Clock {
            source: ClockSource::External(Arc::new(now)),
        }
    }

    /// One reading.
    pub fn now(&self) -> u64 {
        match &self.source {
            // AcqRel: a thread takes a reading before invoking an operation and after its
            // response. The Acquire keeps the operation's own accesses from moving
            // before the invocation reading; the Release keeps them from moving after the
            // response reading. Readings are read-modify-writes of one atomic, so if
            // thread A's response reading comes before thread B's invocation reading in
            // the counter's order, B's Acquire reads from A's Release (through the
            // release sequence of RMWs in between): everything A's operation did happens
            // before everything B's does, which is what "A precedes B" must mean.
            ClockSource::Counter(counter) => counter.fetch_add(1, Ordering::AcqRel),
            ClockSource::External(now) => now(),
        }
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            ClockSource::Counter(counter) => f
                .debug_struct("Clock::counter")
                .field("next", &counter.load(Ordering::Relaxed))
                .finish(),
            ClockSource::External(_) => f.write_str("Clock::external"),
        }
    }
}

/// An invoked operation that has not completed yet: hand it to
/// [`ThreadRecorder::complete`] when the call returns. One that is never completed
/// becomes an operation of unknown outcome when the recorder finishes.
#[must_use = "an operation that is never completed is recorded as of unknown outcome"]
#[derive(Debug)]
pub struct Pending {
    process: ProcessId,
    index: usize,
}

/// The recorder of one thread.
///
/// ```
/// use megalon_workload::{check, Call, Clock, History, Outcome, ProcessId, ThreadRecorder, Value};
///
/// let clock = Clock::counter();
/// let mut recorder = ThreadRecorder::new(ProcessId::new(0, 0), clock.clone());
/// let value = Value::new(0, 1);
/// let put = recorder.invoke(b"k", Call::Put(value))?;
/// // ... store.put(b"k", &value.encode(64)?) ...
/// recorder.complete(put, Outcome::Ok)?;
/// let get = recorder.invoke(b"k", Call::Get)?;
/// let read: Option<Vec<u8>> = Some(value.encode(64)?); // ... store.get(b"k") ...
/// recorder.complete_read(get, read.as_deref())?;
///
/// let history = History::merge([recorder.finish()])?;
/// assert!(check(&history).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ThreadRecorder {
    process: ProcessId,
    clock: Clock,
    keys: Vec<Box<[u8]>>,
    key_ids: HashMap<Box<[u8]>, KeyId>,
    /// Operations of this thread; the outcome is `None` while the operation is pending.
    operations: Vec<(Operation, Option<Outcome>)>,
    journal: Option<Journal>,
}

struct Journal {
    out: Box<dyn Write + Send>,
    line: String,
}

impl Journal {
    fn write_line(&mut self) -> Result<(), Error> {
        self.out.write_all(self.line.as_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

impl ThreadRecorder {
    /// A recorder for `process` that keeps its operations in memory.
    pub fn new(process: ProcessId, clock: Clock) -> Self {
        ThreadRecorder {
            process,
            clock,
            keys: Vec::new(),
            key_ids: HashMap::new(),
            operations: Vec::new(),
            journal: None,
        }
    }

    /// A recorder that also writes every invocation and every response to `journal` as
    /// it happens, in the format of [`ThreadLog::write_to`], one `write_all` and `flush`
    /// per line.
    ///
    /// An invocation is written before [`invoke`](Self::invoke) returns, so before the
    /// operation can take effect: if the process dies, [`ThreadLog::read_from`] recovers
    /// every operation it started, those without a response line as of unknown outcome.
    /// Give it an unbuffered writer (a `File`) so a line is in the kernel once written.
    pub fn journaled(
        process: ProcessId,
        clock: Clock,
        journal: impl Write + Send + 'static,
    ) -> Result<Self, Error> {
        let mut journal = Journal {
            out: Box::new(journal),
            line: String::new(),
        };
        crate::text::header(&mut journal.line, process);
        journal.write_line()?;
        Ok(ThreadRecorder {
            journal: Some(journal),
            ..ThreadRecorder::new(process, clock)
        })
    }

    /// The process this recorder records.
    pub fn process(&self) -> ProcessId {
        self.process
    }

    /// Reserves room for `additional` more operations, so recording them does not
    /// allocate.
    pub fn reserve(&mut self, additional: usize) {
        self.operations.reserve(additional);
    }

    /// Records the invocation of `call` on `key`: call it right before calling the store.
    pub fn invoke(&mut self, key: &[u8], call: Call) -> Result<Pending, Error> {
        let key = intern(&mut self.keys, &mut self.key_ids, key)?;
        let index = self.operations.len();
        let invoked_at = self.clock.now();
        if let Some(journal) = &mut self.journal {
            journal.line.clear();
            crate::text::invoke(
                &mut journal.line,
                index,
                invoked_at,
                &self.keys[key.0 as usize],
                call,
            );
            journal.write_line()?;
        }
        self.operations.push((
            Operation {
                process: self.process,
                key,
                call,
                outcome: Outcome::Unknown,
                invoked_at,
                returned_at: None,
            },
            None,
        ));
        Ok(Pending {
            process: self.process,
            index,
        })
    }

    /// Records the response of `pending`: call it right after the store returned.
    ///
    /// Errors: an outcome the call cannot answer, a `pending` of another recorder, a
    /// journal that cannot be written. After an error the operation stays pending (and
    /// becomes of unknown outcome at [`finish`](Self::finish)).
    pub fn complete(&mut self, pending: Pending, outcome: Outcome) -> Result<(), Error> {
        let returned_at = self.clock.now();
        let foreign = Error::ForeignPending {
            pending: pending.process,
            recorder: self.process,
        };
        if pending.process != self.process {
            return Err(foreign);
        }
        let Some((operation, recorded)) = self.operations.get_mut(pending.index) else {
            return Err(foreign);
        };
        if recorded.is_some() {
            return Err(foreign);
        }
        Operation::validate(
            operation.call,
            &outcome,
            operation.invoked_at,
            Some(returned_at),
        )?;
        if let Some(journal) = &mut self.journal {
            journal.line.clear();
            crate::text::response(&mut journal.line, pending.index, returned_at, &outcome);
            journal.write_line()?;
        }
        operation.returned_at = Some(returned_at);
        *recorded = Some(outcome);
        Ok(())
    }

    /// Records the response of a get that read `bytes` (`None`: the key was absent), see
    /// [`Outcome::of_read`]. Allocates only for a torn read.
    pub fn complete_read(&mut self, pending: Pending, bytes: Option<&[u8]>) -> Result<(), Error> {
        self.complete(pending, Outcome::of_read(bytes))
    }

    /// The log of everything recorded; operations still pending are of unknown outcome.
    pub fn finish(self) -> ThreadLog {
        let operations = self
            .operations
            .into_iter()
            .map(|(mut operation, recorded)| {
                operation.outcome = recorded.unwrap_or(Outcome::Unknown);
                operation
            })
            .collect();
        ThreadLog {
            process: self.process,
            keys: self.keys,
            operations,
        }
    }
}

/// The operations of one thread, on keys numbered within the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadLog {
    pub(crate) process: ProcessId,
    pub(crate) keys: Vec<Box<[u8]>>,
    pub(crate) operations: Vec<Operation>,
}

impl ThreadLog {
    /// The thread that recorded the log.
    pub fn process(&self) -> ProcessId {
        self.process
    }

    /// The operations in the order they were invoked. Their key ids are this log's (see
    /// [`key`](Self::key)), not those of a merged history.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The bytes of this log's key `key`.
    ///
    /// # Panics
    ///
    /// If `key` is not a key of this log.
    pub fn key(&self, key: KeyId) -> &[u8] {
        &self.keys[key.0 as usize]
    }

    /// Writes the log as text (see the crate docs for the format).
    pub fn write_to(&self, out: &mut impl Write) -> Result<(), Error> {
        let mut line = String::new();
        crate::text::header(&mut line, self.process);
        for (index, operation) in self.operations.iter().enumerate() {
            crate::text::invoke(
                &mut line,
                index,
                operation.invoked_at,
                self.key(operation.key),
                operation.call,
            );
            if let Some(returned_at) = operation.returned_at {
                crate::text::response(&mut line, index, returned_at, &operation.outcome);
            }
        }
        out.write_all(line.as_bytes())?;
        Ok(())
    }

    /// This log as the checker must take it when the thread's process died, and with it
    /// the effects of the operations `served_in_memory` names (by their index in the
    /// log): a store that keeps objects in a process's own memory (megalon's local
    /// partitions) hands them back as they were before that process wrote them when it
    /// dies. Each such put took effect within its call, or never (lost):
    /// [`Outcome::Uncertain`]. Each such get that read the value of one of those puts may
    /// have read a lost one, and is ignored ([`Outcome::Unknown`]); one that read any
    /// other value (or torn bytes) keeps its outcome: only the process's own puts in its
    /// memory can be lost. The other operations keep their outcomes too: what the process
    /// did outside its memory outlives it.
    ///
    /// [`with_lost_writes_against`](Self::with_lost_writes_against) keeps more of those
    /// gets: the ones the other logs show stale.
    pub fn with_lost_writes(self, served_in_memory: impl Fn(usize) -> bool) -> ThreadLog {
        self.with_lost_writes_against(served_in_memory, &KnownWrites::default())
    }

    /// [`with_lost_writes`](Self::with_lost_writes), but a get served in memory that read
    /// the value of one of this log's lost puts keeps its outcome when `known` (the
    /// writes of every log whose effect is known) holds a write of the key invoked after
    /// that put returned and returned before the get was invoked: the value was
    /// overwritten before the get began, lost or not, so the get read a stale one
    /// (whatever the death later loses cannot make it fresh).
    pub fn with_lost_writes_against(
        mut self,
        served_in_memory: impl Fn(usize) -> bool,
        known: &KnownWrites,
    ) -> ThreadLog {
        let served = |(index, operation): &(usize, &Operation)| {
            operation.returned_at.is_some() && served_in_memory(*index)
        };
        // Each lost value, with when its put returned.
        let lost: hashbrown::HashMap<crate::Value, u64> = (self.operations.iter().enumerate())
            .filter(served)
            .filter_map(|(_, operation)| match operation.call {
                Call::Put(value) => Some((value, operation.returned_at?)),
                _ => None,
            })
            .collect();
        for (index, operation) in self.operations.iter_mut().enumerate() {
            if operation.returned_at.is_none() || !served_in_memory(index) {
                continue;
            }
            match (operation.call, &operation.outcome) {
                (Call::Put(_), _) => operation.outcome = Outcome::Uncertain,
                (Call::Get, Outcome::Found(value)) => {
                    if let Some(&put_returned) = lost.get(value) {
                        let key = &self.keys[operation.key.0 as usize];
                        if !known.between(key, put_returned, operation.invoked_at) {
                            operation.outcome = Outcome::Unknown;
                        }
                    }
                }
                _ => {}
            }
        }
        self
    }

    /// This log with its calls that never returned bounded by `by`: each took effect
    /// before `by`, or never ([`Outcome::Uncertain`] returned at `by`). For a process
    /// that died, `by` a time by which nothing it did can take effect any more (megalon:
    /// once its recovery is done, its row freed). Left [`Outcome::Unknown`], such a call
    /// could take effect at any later time, and excuse one stale read of its key for the
    /// rest of the run. A call invoked after `by` is left as it is.
    pub fn with_unfinished_ending_by(mut self, by: u64) -> ThreadLog {
        for operation in &mut self.operations {
            if operation.returned_at.is_none() && operation.invoked_at <= by && by != u64::MAX {
                operation.returned_at = Some(by);
                operation.outcome = Outcome::Uncertain;
            }
        }
        self
    }

    /// Reads a log written by [`write_to`](Self::write_to) or by a journaled recorder.
    ///
    /// A last line without its newline (its writer died while writing it) is ignored:
    /// an unfinished invocation line is an operation that never started, an unfinished
    /// response line leaves its operation of unknown outcome. Errors name the line.
    pub fn read_from(input: impl BufRead) -> Result<ThreadLog, Error> {
        crate::text::parse(input)
    }
}

/// The writes of a set of logs whose effect is known (a put answered `Ok`, a create
/// `Created`, a delete `Deleted`), by key, for
/// [`ThreadLog::with_lost_writes_against`]. Built by [`add`](Self::add)ing each log
/// (already transformed as the checker will take it), then [`seal`](Self::seal)ed.
#[derive(Debug, Default)]
pub struct KnownWrites {
    /// Per key: `(invoked_at, returned_at)` of each write; once sealed, sorted by
    /// invocation, each `returned_at` replaced by the earliest return of its write and
    /// every write invoked later.
    writes: HashMap<Box<[u8]>, Vec<(u64, u64)>>,
    sealed: bool,
}

impl KnownWrites {
    /// Adds `log`'s writes whose effect is known.
    ///
    /// # Panics
    ///
    /// If already sealed.
    pub fn add(&mut self, log: &ThreadLog) {
        assert!(!self.sealed, "KnownWrites::add after seal");
        for operation in &log.operations {
            let known = matches!(
                (operation.call, &operation.outcome),
                (Call::Put(_), Outcome::Ok)
                    | (Call::Create(_), Outcome::Created)
                    | (Call::Delete, Outcome::Deleted)
            );
            if let (true, Some(returned_at)) = (known, operation.returned_at) {
                self.writes
                    .entry(log.key(operation.key).into())
                    .or_default()
                    .push((operation.invoked_at, returned_at));
            }
        }
    }

    /// Done adding: readies [`between`](Self::between).
    pub fn seal(&mut self) {
        for writes in self.writes.values_mut() {
            writes.sort_unstable();
            let mut earliest = u64::MAX;
            for write in writes.iter_mut().rev() {
                earliest = earliest.min(write.1);
                write.1 = earliest;
            }
        }
        self.sealed = true;
    }

    /// Whether a known write of `key` was invoked after `after` and returned before
    /// `before`. Always `false` before [`seal`](Self::seal) (nothing known yet).
    pub fn between(&self, key: &[u8], after: u64, before: u64) -> bool {
        if !self.sealed {
            return false;
        }
        let Some(writes) = self.writes.get(key) else {
            return false;
        };
        let first_later = writes.partition_point(|&(invoked_at, _)| invoked_at <= after);
        writes
            .get(first_later)
            .is_some_and(|&(_, earliest_return)| earliest_return < before)
    }
}

impl History {
    /// The history of all operations in `logs`, with their keys interned in one table.
    ///
    /// Errors: two logs of the same process (a mistake in the test's numbering, which
    /// would make reports ambiguous), too many keys.
    pub fn merge(logs: impl IntoIterator<Item = ThreadLog>) -> Result<History, Error> {
        let mut keys = Vec::new();
        let mut key_ids = HashMap::new();
        let mut processes = hashbrown::HashSet::new();
        let mut operations = Vec::new();
        for log in logs {
            if !processes.insert(log.process) {
                return Err(Error::DuplicateProcess {
                    process: log.process,
                });
            }
            let mut local_to_merged = Vec::with_capacity(log.keys.len());
            for key in &log.keys {
                local_to_merged.push(intern(&mut keys, &mut key_ids, key)?);
            }
            operations.extend(log.operations.into_iter().map(|mut operation| {
                operation.key = local_to_merged[operation.key.0 as usize];
                operation
            }));
        }
        Ok(History::from_parts(keys, operations))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn recorder(thread: u32, clock: &Clock) -> ThreadRecorder {
        ThreadRecorder::new(ProcessId::new(0, thread), clock.clone())
    }

    #[test]
    fn records_times_from_the_shared_clock_in_order() {
        let clock = Clock::counter();
        let mut a = recorder(0, &clock);
        let mut b = recorder(1, &clock);
        let put = a.invoke(b"k", Call::Put(Value::new(0, 1))).unwrap();
        let get = b.invoke(b"k", Call::Get).unwrap();
        a.complete(put, Outcome::Ok).unwrap();
        b.complete(get, Outcome::Found(Value::new(0, 1))).unwrap();
        let history = History::merge([a.finish(), b.finish()]).unwrap();
        let ops = history.operations();
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].invoked_at, ops[0].returned_at), (0, Some(2)));
        assert_eq!((ops[1].invoked_at, ops[1].returned_at), (1, Some(3)));
        assert_eq!(ops[0].key, ops[1].key);
        assert_eq!(history.key_count(), 1);
    }

    #[test]
    fn lost_writes_leave_a_history_linearizable_that_was_not() {
        let clock = Clock::counter();
        let mut dead = recorder(0, &clock);
        let mut other = recorder(1, &clock);
        let (v1, v2) = (Value::new(0, 1), Value::new(0, 2));
        let put = dead.invoke(b"k", Call::Put(v1)).unwrap();
        dead.complete(put, Outcome::Ok).unwrap();
        let get = other.invoke(b"k", Call::Get).unwrap();
        other.complete(get, Outcome::Found(v1)).unwrap();
        // The dead process's second put and its read of it, both in its memory, then
        // lost: the other process reads the first value again.
        let put = dead.invoke(b"k", Call::Put(v2)).unwrap();
        dead.complete(put, Outcome::Ok).unwrap();
        let get = dead.invoke(b"k", Call::Get).unwrap();
        dead.complete(get, Outcome::Found(v2)).unwrap();
        let delete = dead.invoke(b"j", Call::Delete).unwrap();
        dead.complete(delete, Outcome::Absent).unwrap();
        let get = other.invoke(b"k", Call::Get).unwrap();
        other.complete(get, Outcome::Found(v1)).unwrap();
        let (dead, other) = (dead.finish(), other.finish());

        let kept = History::merge([dead.clone(), other.clone()]).unwrap();
        assert!(crate::check(&kept).is_err(), "a lost put is a violation");
        // Served in memory: the second put and the get (the delete too: it keeps its
        // outcome all the same).
        let lost = dead.clone().with_lost_writes(|index| index >= 1);
        let outcomes: Vec<Outcome> = lost
            .operations()
            .iter()
            .map(|op| op.outcome.clone())
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Ok,
                Outcome::Uncertain,
                Outcome::Unknown,
                Outcome::Absent
            ]
        );
        let history = History::merge([lost, other.clone()]).unwrap();
        assert!(crate::check(&history).is_ok());
        // The first put, done outside the process's memory, stays: it cannot be lost.
        let mut third = recorder(2, &clock);
        let get = third.invoke(b"k", Call::Get).unwrap();
        third.complete(get, Outcome::Absent).unwrap();
        let history = History::merge([
            dead.with_lost_writes(|index| index >= 1),
            other,
            third.finish(),
        ])
        .unwrap();
        assert!(crate::check(&history).is_err(), "the first put is kept");
    }

    /// A dead process's get served in its memory read its own put's value after another
    /// process's put had overwritten it (invoked after the dead one's put returned,
    /// returned before the get was invoked): stale, whatever the death later loses.
    /// `with_lost_writes` ignores it (the checker's review of 2026-11-30 found it so);
    /// against the other logs' known writes it is kept, and caught. With the other put
    /// overlapping the get instead, it is still excused.
    #[test]
    fn a_lost_write_read_after_another_process_overwrote_it_is_still_caught() {
        let clock = Clock::counter();
        let mut dead = recorder(0, &clock);
        let mut other = recorder(1, &clock);
        let (v1, v2) = (Value::new(0, 1), Value::new(1, 1));
        let put = dead.invoke(b"k", Call::Put(v1)).unwrap();
        dead.complete(put, Outcome::Ok).unwrap();
        let put = other.invoke(b"k", Call::Put(v2)).unwrap();
        other.complete(put, Outcome::Ok).unwrap();
        let get = dead.invoke(b"k", Call::Get).unwrap();
        dead.complete(get, Outcome::Found(v1)).unwrap();
        let (dead, other) = (dead.finish(), other.finish());
        assert!(
            crate::check(&History::merge([dead.clone(), other.clone()]).unwrap()).is_err(),
            "a stale read"
        );
        let excused = dead.clone().with_lost_writes(|_| true);
        assert!(crate::check(&History::merge([excused, other.clone()]).unwrap()).is_ok());
        let mut known = KnownWrites::default();
        known.add(&other);
        known.seal();
        let kept = dead.with_lost_writes_against(|_| true, &known);
        assert!(
            crate::check(&History::merge([kept, other]).unwrap()).is_err(),
            "the stale read is caught after the death"
        );

        // The other put overlaps the get: not strictly between, so still excused.
        let clock = Clock::counter();
        let mut dead = recorder(0, &clock);
        let mut other = recorder(1, &clock);
        let put = dead.invoke(b"k", Call::Put(v1)).unwrap();
        dead.complete(put, Outcome::Ok).unwrap();
        let overlapping = other.invoke(b"k", Call::Put(v2)).unwrap();
        let get = dead.invoke(b"k", Call::Get).unwrap();
        other.complete(overlapping, Outcome::Ok).unwrap();
        dead.complete(get, Outcome::Found(v1)).unwrap();
        let (dead, other) = (dead.finish(), other.finish());
        let mut known = KnownWrites::default();
        known.add(&other);
        known.seal();
        let kept = dead.with_lost_writes_against(|_| true, &known);
        assert!(crate::check(&History::merge([kept, other]).unwrap()).is_ok());
    }

    #[test]
    fn lost_writes_never_excuse_a_torn_read_or_one_of_another_value() {
        let clock = Clock::counter();
        let mut writer = recorder(0, &clock);
        let mut dead = recorder(1, &clock);
        let (v1, v2) = (Value::new(0, 1), Value::new(0, 2));
        for value in [v1, v2] {
            let put = writer.invoke(b"k", Call::Put(value)).unwrap();
            writer.complete(put, Outcome::Ok).unwrap();
        }
        // Both reads served from the dead process's memory: torn bytes, and v1 after v2
        // was put (stale; v1 is no put of the dead process's).
        let get = dead.invoke(b"k", Call::Get).unwrap();
        dead.complete(get, Outcome::Torn(vec![1, 2, 3].into()))
            .unwrap();
        let get = dead.invoke(b"k", Call::Get).unwrap();
        dead.complete(get, Outcome::Found(v1)).unwrap();
        let (writer, dead) = (writer.finish(), dead.finish());
        let lost = dead.with_lost_writes(|_| true);
        assert!(
            matches!(lost.operations()[0].outcome, Outcome::Torn(_)),
            "kept"
        );
        assert_eq!(lost.operations()[1].outcome, Outcome::Found(v1), "kept");
        for (kept, what) in [(0, "torn"), (1, "stale")] {
            let one = ThreadLog {
                operations: vec![lost.operations()[kept].clone()],
                ..lost.clone()
            };
            let history = History::merge([writer.clone(), one]).unwrap();
            assert!(crate::check(&history).is_err(), "the {what} read is caught");
        }
    }

    /// Found by a review (2026-11-29): a dead process's put in flight, left unknown, could
    /// take effect any time later, so a read of its value long after the process's
    /// recovery (a recovery that put stale bytes back, say) passed. Bounded by the
    /// recovery, it is caught.
    #[test]
    fn an_unfinished_call_of_a_dead_process_ends_by_its_recovery() {
        let clock = Clock::counter();
        let mut dead = recorder(0, &clock);
        let mut other = recorder(1, &clock);
        let (in_flight, later) = (Value::new(0, 1), Value::new(1, 1));
        let _cut = dead.invoke(b"k", Call::Put(in_flight)).unwrap();
        let recovered_by = clock.now();
        let put = other.invoke(b"k", Call::Put(later)).unwrap();
        other.complete(put, Outcome::Ok).unwrap();
        let get = other.invoke(b"k", Call::Get).unwrap();
        other.complete(get, Outcome::Found(in_flight)).unwrap();
        let (dead, other) = (dead.finish(), other.finish());
        let unbounded = History::merge([dead.clone(), other.clone()]).unwrap();
        assert!(
            crate::check(&unbounded).is_ok(),
            "unknown: it may take effect late"
        );
        let bounded = dead.with_unfinished_ending_by(recovered_by);
        assert_eq!(bounded.operations()[0].outcome, Outcome::Uncertain);
        let history = History::merge([bounded, other]).unwrap();
        assert!(
            crate::check(&history).is_err(),
            "the late resurrection is caught"
        );
    }

    #[test]
    fn pending_operations_finish_as_unknown() {
        let clock = Clock::counter();
        let mut a = recorder(0, &clock);
        let _never_completed = a.invoke(b"k", Call::Delete).unwrap();
        let log = a.finish();
        assert_eq!(log.operations()[0].outcome, Outcome::Unknown);
        assert_eq!(log.operations()[0].returned_at, None);
    }

    #[test]
    fn rejects_a_mismatched_outcome_and_a_foreign_pending() {
        let clock = Clock::counter();
        let mut a = recorder(0, &clock);
        let mut b = recorder(1, &clock);
        let get = a.invoke(b"k", Call::Get).unwrap();
        assert!(matches!(
            a.complete(get, Outcome::Created),
            Err(Error::OutcomeMismatch { .. })
        ));
        let get = a.invoke(b"k", Call::Get).unwrap();
        // `b` has a pending operation at the same index.
        let _b_get = b.invoke(b"k", Call::Get).unwrap();
        let _b_get = b.invoke(b"k", Call::Get).unwrap();
        assert!(matches!(
            b.complete(get, Outcome::Absent),
            Err(Error::ForeignPending { .. })
        ));
        // All stayed pending.
        for log in [a.finish(), b.finish()] {
            assert!(log
                .operations()
                .iter()
                .all(|op| op.outcome == Outcome::Unknown));
        }
    }

    #[test]
    fn merge_rejects_two_logs_of_one_process() {
        let clock = Clock::counter();
        let a = recorder(3, &clock).finish();
        let b = recorder(3, &clock).finish();
        assert!(matches!(
            History::merge([a, b]),
            Err(Error::DuplicateProcess { process }) if process == ProcessId::new(0, 3)
        ));
    }

    #[test]
    fn merge_maps_each_logs_keys_to_one_table() {
        let clock = Clock::counter();
        let mut a = recorder(0, &clock);
        let mut b = recorder(1, &clock);
        for (recorder, keys) in [(&mut a, [b"x", b"y"]), (&mut b, [b"y", b"x"])] {
            for key in keys {
                let get = recorder.invoke(key, Call::Get).unwrap();
                recorder.complete(get, Outcome::Absent).unwrap();
            }
        }
        let history = History::merge([a.finish(), b.finish()]).unwrap();
        let keys: Vec<&[u8]> = history
            .operations()
            .iter()
            .map(|op| history.key(op.key))
            .collect();
        assert_eq!(keys, [b"x", b"y", b"y", b"x"]);
    }

    #[test]
    fn an_external_clock_is_used() {
        let base = Arc::new(AtomicU64::new(1000));
        let shared = Arc::clone(&base);
        let clock = Clock::external(move || shared.fetch_add(10, Ordering::AcqRel));
        let mut a = recorder(0, &clock);
        let get = a.invoke(b"k", Call::Get).unwrap();
        a.complete(get, Outcome::Absent).unwrap();
        let op = &a.finish().operations()[0].clone();
        assert_eq!((op.invoked_at, op.returned_at), (1000, Some(1010)));
    }
}
