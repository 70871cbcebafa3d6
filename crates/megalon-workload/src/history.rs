//! Histories: what every process called, on which key, what it got back, and when.
//!
//! An [`Operation`] is one call on one key by one process, with the times of its
//! invocation and response on a clock shared by every process of the run. A [`History`] is
//! all the operations of a run, merged from the threads' logs
//! ([`History::merge`](crate::History::merge)) or written out by hand
//! ([`HistoryBuilder`]); [`check`](crate::check()) decides whether it is linearizable.
//!
//! Operation `a` *precedes* `b` in real time iff `a` returned strictly before `b` was
//! invoked (`a.returned_at < b.invoked_at`); equal times count as concurrent, so a coarse
//! clock only makes the checker more lenient, never wrong.

use std::fmt;

use hashbrown::HashMap;

use crate::{Error, Value};

/// One process of a run: a thread `thread` of host `host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId {
    /// The host (an OS process, or a group of threads emulating one).
    pub host: u32,
    /// The thread within the host.
    pub thread: u32,
}

impl ProcessId {
    /// Thread `thread` of host `host`.
    pub const fn new(host: u32, thread: u32) -> Self {
        ProcessId { host, thread }
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host {} thread {}", self.host, self.thread)
    }
}

/// A key of a [`History`]: an index into its table of keys ([`History::key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u32);

/// What an operation asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// Set the key to the value, whether or not it exists. Answers [`Outcome::Ok`].
    Put(Value),
    /// Read the key. Answers [`Outcome::Found`], [`Outcome::Absent`] or [`Outcome::Torn`].
    Get,
    /// Set the key to the value if it does not exist. Answers [`Outcome::Created`], or
    /// [`Outcome::Exists`] without changing anything.
    Create(Value),
    /// Remove the key if it exists. Answers [`Outcome::Deleted`], or [`Outcome::Absent`].
    Delete,
}

/// What an operation answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A put took effect.
    Ok,
    /// A get read this value.
    Found(Value),
    /// A get found no value, or a delete found nothing to delete.
    Absent,
    /// A get read these bytes, which do not decode: a torn read.
    Torn(Box<[u8]>),
    /// A create made the key.
    Created,
    /// A create found the key already there and changed nothing.
    Exists,
    /// A delete removed the key.
    Deleted,
    /// The call failed and certainly had no effect (a full store, a key too long): the
    /// checker ignores the operation.
    Failed,
    /// Nobody knows: the call failed in a way that may hide an effect, or its process
    /// died. The operation may have taken effect at any time after its invocation, or
    /// never.
    Unknown,
    /// The call failed in a way that may hide an effect, but any effect happened before
    /// it returned (the caller waited until whatever it had set going was done): the
    /// operation took effect between its invocation and its return, or never. Narrower
    /// than [`Outcome::Unknown`], so the checker can settle it at its return.
    Uncertain,
}

impl Outcome {
    /// The outcome of a get that read `bytes` (`None`: the key was absent): the decoded
    /// value, or [`Outcome::Torn`] with a copy of the bytes when they do not decode.
    pub fn of_read(bytes: Option<&[u8]>) -> Outcome {
        match bytes {
            None => Outcome::Absent,
            Some(bytes) => match Value::decode(bytes) {
                Ok(value) => Outcome::Found(value),
                Err(_) => Outcome::Torn(bytes.into()),
            },
        }
    }

    /// Whether `call` can answer this outcome.
    pub fn answers(&self, call: Call) -> bool {
        matches!(
            (call, self),
            (_, Outcome::Unknown | Outcome::Uncertain | Outcome::Failed)
                | (Call::Put(_), Outcome::Ok)
                | (
                    Call::Get,
                    Outcome::Found(_) | Outcome::Absent | Outcome::Torn(_)
                )
                | (Call::Create(_), Outcome::Created | Outcome::Exists)
                | (Call::Delete, Outcome::Deleted | Outcome::Absent)
        )
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Put(value) => write!(f, "put {value}"),
            Call::Get => write!(f, "get"),
            Call::Create(value) => write!(f, "create {value}"),
            Call::Delete => write!(f, "delete"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => write!(f, "ok"),
            Outcome::Found(value) => write!(f, "found {value}"),
            Outcome::Absent => write!(f, "absent"),
            Outcome::Torn(bytes) => match Value::decode(bytes) {
                Err(torn) => write!(f, "{torn}"),
                Ok(value) => write!(f, "torn (yet decodes as {value})"),
            },
            Outcome::Created => write!(f, "created"),
            Outcome::Exists => write!(f, "exists"),
            Outcome::Deleted => write!(f, "deleted"),
            Outcome::Failed => write!(f, "failed"),
            Outcome::Unknown => write!(f, "unknown"),
            Outcome::Uncertain => write!(f, "uncertain"),
        }
    }
}

/// One call on one key by one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Who called.
    pub process: ProcessId,
    /// On which key (see [`History::key`]).
    pub key: KeyId,
    /// What was asked.
    pub call: Call,
    /// What was answered.
    pub outcome: Outcome,
    /// Clock reading taken before the call started.
    pub invoked_at: u64,
    /// Clock reading taken after the call returned; `None` only when the call never
    /// returned (its outcome is then [`Outcome::Unknown`]). For an unknown outcome the
    /// checker ignores it: such an operation may take effect at any time after its
    /// invocation.
    pub returned_at: Option<u64>,
}

impl Operation {
    /// Checks what the recorder and the builder promise about an operation.
    pub(crate) fn validate(
        call: Call,
        outcome: &Outcome,
        invoked_at: u64,
        returned_at: Option<u64>,
    ) -> Result<(), Error> {
        if !outcome.answers(call) {
            return Err(Error::OutcomeMismatch {
                call,
                outcome: outcome.clone(),
            });
        }
        if invoked_at == u64::MAX || returned_at == Some(u64::MAX) {
            // The checker's mark of a call that never returned.
            return Err(Error::TimeReserved);
        }
        match returned_at {
            None if *outcome != Outcome::Unknown => Err(Error::MissingReturnTime {
                call,
                outcome: outcome.clone(),
            }),
            Some(returned_at) if returned_at < invoked_at => Err(Error::ReturnBeforeInvoke {
                invoked_at,
                returned_at,
            }),
            _ => Ok(()),
        }
    }
}

/// The operations of a run, on keys interned in one table, ordered by invocation time.
#[derive(Clone, Debug, Default)]
pub struct History {
    keys: Vec<Box<[u8]>>,
    operations: Vec<Operation>,
}

impl History {
    /// A builder for a history written by hand or converted from another source.
    pub fn builder() -> HistoryBuilder {
        HistoryBuilder::default()
    }

    /// All operations, ordered by invocation time (ties by process).
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The bytes of key `key`.
    ///
    /// # Panics
    ///
    /// If `key` is not a key of this history.
    pub fn key(&self, key: KeyId) -> &[u8] {
        &self.keys[key.0 as usize]
    }

    /// How many distinct keys the history touches.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether there are no operations.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    pub(crate) fn from_parts(keys: Vec<Box<[u8]>>, mut operations: Vec<Operation>) -> Self {
        operations.sort_by_key(|op| (op.invoked_at, op.process));
        History { keys, operations }
    }
}

/// Builds a [`History`] one operation at a time, checking each.
#[derive(Debug, Default)]
pub struct HistoryBuilder {
    keys: Vec<Box<[u8]>>,
    key_ids: HashMap<Box<[u8]>, KeyId>,
    operations: Vec<Operation>,
}

impl HistoryBuilder {
    /// Adds one operation of `process` on `key`.
    ///
    /// `returned_at` is `None` only for an operation that never returned, whose outcome
    /// must then be [`Outcome::Unknown`]. Errors: an outcome `call` cannot answer, a
    /// response before the invocation, too many keys.
    pub fn push(
        &mut self,
        process: ProcessId,
        key: &[u8],
        call: Call,
        outcome: Outcome,
        invoked_at: u64,
        returned_at: Option<u64>,
    ) -> Result<&mut Self, Error> {
        Operation::validate(call, &outcome, invoked_at, returned_at)?;
        let key = intern(&mut self.keys, &mut self.key_ids, key)?;
        self.operations.push(Operation {
            process,
            key,
            call,
            outcome,
            invoked_at,
            returned_at,
        });
        Ok(self)
    }

    /// The history of every operation pushed so far.
    pub fn build(self) -> History {
        History::from_parts(self.keys, self.operations)
    }
}

/// The id of `key` in `keys`, adding it if it is new.
pub(crate) fn intern(
    keys: &mut Vec<Box<[u8]>>,
    key_ids: &mut HashMap<Box<[u8]>, KeyId>,
    key: &[u8],
) -> Result<KeyId, Error> {
    if let Some(&id) = key_ids.get(key) {
        return Ok(id);
    }
    let id = KeyId(u32::try_from(keys.len()).map_err(|_| Error::TooManyKeys {
        limit: u32::MAX as usize,
    })?);
    keys.push(key.into());
    key_ids.insert(key.into(), id);
    Ok(id)
}

/// Shows a key as a quoted string when it is printable ASCII, else as hex.
pub(crate) struct KeyDisplay<'a>(pub(crate) &'a [u8]);

impl fmt::Display for KeyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let printable = self
            .0
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if printable {
            write!(f, "\"{}\"", String::from_utf8_lossy(self.0))
        } else {
            write!(f, "0x")?;
            self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ProcessId = ProcessId::new(0, 1);

    #[test]
    fn builder_orders_by_invocation_and_interns_keys() {
        let mut builder = History::builder();
        builder
            .push(P, b"b", Call::Get, Outcome::Absent, 5, Some(6))
            .unwrap()
            .push(
                P,
                b"a",
                Call::Put(Value::new(1, 1)),
                Outcome::Ok,
                1,
                Some(2),
            )
            .unwrap()
            .push(P, b"b", Call::Delete, Outcome::Absent, 3, Some(4))
            .unwrap();
        let history = builder.build();
        let times: Vec<u64> = history.operations().iter().map(|o| o.invoked_at).collect();
        assert_eq!(times, [1, 3, 5]);
        assert_eq!(history.key_count(), 2);
        assert_eq!(history.key(history.operations()[0].key), b"a");
        assert_eq!(history.operations()[1].key, history.operations()[2].key);
    }

    #[test]
    fn rejects_an_outcome_the_call_cannot_answer() {
        let mut builder = History::builder();
        for (call, outcome) in [
            (Call::Put(Value::new(1, 1)), Outcome::Absent),
            (Call::Get, Outcome::Ok),
            (Call::Create(Value::new(1, 1)), Outcome::Deleted),
            (Call::Delete, Outcome::Found(Value::new(1, 1))),
            (Call::Delete, Outcome::Torn(Box::new([1, 2]))),
        ] {
            assert!(
                matches!(
                    builder.push(P, b"k", call, outcome.clone(), 1, Some(2)),
                    Err(Error::OutcomeMismatch { .. })
                ),
                "{call} -> {outcome}"
            );
        }
    }

    #[test]
    fn rejects_a_response_before_the_invocation_or_a_missing_response() {
        let mut builder = History::builder();
        assert!(matches!(
            builder.push(P, b"k", Call::Get, Outcome::Absent, 5, Some(4)),
            Err(Error::ReturnBeforeInvoke {
                invoked_at: 5,
                returned_at: 4
            })
        ));
        assert!(matches!(
            builder.push(P, b"k", Call::Get, Outcome::Absent, 5, None),
            Err(Error::MissingReturnTime { .. })
        ));
        assert!(builder
            .push(P, b"k", Call::Delete, Outcome::Unknown, 5, None)
            .is_ok());
    }

    /// Found by a review (2026-11-29): a known call that returned at `u64::MAX`, the
    /// checker's mark of a call that never returned, was never made to take effect (a
    /// stale read there passed in release builds).
    #[test]
    fn rejects_the_time_reserved_for_a_call_that_never_returned() {
        let mut builder = History::builder();
        let found = Outcome::Found(Value::new(1, 1));
        assert!(matches!(
            builder.push(P, b"k", Call::Get, found.clone(), 4, Some(u64::MAX)),
            Err(Error::TimeReserved)
        ));
        assert!(matches!(
            builder.push(P, b"k", Call::Delete, Outcome::Unknown, u64::MAX, None),
            Err(Error::TimeReserved)
        ));
        assert!(builder
            .push(P, b"k", Call::Get, found, 4, Some(u64::MAX - 1))
            .is_ok());
    }

    #[test]
    fn of_read_decodes_or_keeps_the_torn_bytes() {
        let bytes = Value::new(2, 3).encode(32).unwrap();
        assert_eq!(
            Outcome::of_read(Some(&bytes)),
            Outcome::Found(Value::new(2, 3))
        );
        assert_eq!(Outcome::of_read(None), Outcome::Absent);
        assert_eq!(
            Outcome::of_read(Some(&bytes[..30])),
            Outcome::Torn(bytes[..30].into())
        );
    }

    #[test]
    fn keys_display_as_text_or_hex() {
        assert_eq!(KeyDisplay(b"user42").to_string(), "\"user42\"");
        assert_eq!(KeyDisplay(&[0, 255]).to_string(), "0x00ff");
        assert_eq!(KeyDisplay(b"a\"b").to_string(), "0x612262");
    }
}
