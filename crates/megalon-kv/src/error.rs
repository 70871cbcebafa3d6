//! The store's one error type.

/// What a store call can answer besides success.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is longer than the scheme's limit.
    #[error("key of {key_bytes} bytes is longer than the limit of {max_key_bytes} bytes")]
    KeyTooLarge {
        /// Bytes of the key given.
        key_bytes: usize,
        /// The longest key the scheme takes.
        max_key_bytes: usize,
    },
    /// The value is longer than the scheme's limit (its object size less the store's
    /// length prefix).
    #[error("value of {value_bytes} bytes is longer than the limit of {max_value_bytes} bytes")]
    ValueTooLarge {
        /// Bytes of the value given.
        value_bytes: usize,
        /// The longest value the store takes.
        max_value_bytes: usize,
    },
    /// The key is not in the store (a delete, or a write that needs it).
    #[error("no such key")]
    UnknownKey,
    /// The key is already in the store (an insert).
    #[error("the key already exists")]
    KeyExists,
    /// No such host in this scheme.
    #[error("host {host} is not one of this scheme's {hosts} hosts")]
    UnknownHost {
        /// The host asked for.
        host: usize,
        /// Hosts the scheme runs in this process.
        hosts: usize,
    },
    /// A put found the key deleted and re-created under it this many times in a row.
    #[error("put gave up after {rounds} rounds of racing creates and deletes of its key")]
    PutContended {
        /// Rounds tried.
        rounds: u32,
    },
    /// The host that owns the key did not answer a request within the wait limit (it
    /// stopped serving, or is stuck). The request was withdrawn unless the owner had
    /// already taken it, in which case it may yet take effect.
    #[error("host {owner}, which owns the key, did not answer within {waited_ms} ms")]
    OwnerUnresponsive {
        /// The owner.
        owner: usize,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The sharing scheme failed (a full log, no SCR record to take, a host that does not
    /// answer, ...): see the inner error. A call that changes the store and fails this
    /// way may still take effect: an insert or a delete whose log entry was published
    /// but whose outcome did not reach this host in time (`ReplayStalled`: another host
    /// left a hole before it) applies when replay gets there, as may a put that had to
    /// create its key. A failure before anything reached the log (`LogFull`,
    /// `RecordBusy`, a key or value too large) changes nothing. Read the key again to
    /// know.
    #[error(transparent)]
    Core(megalon_core::Error),
    /// A scheme was given a host that joined another pod than the scheme's (its limits,
    /// the pod's, would not be the host's).
    #[error("host {host} joined another pod than the scheme's")]
    HostOfAnotherPod {
        /// The host's id in the pod it joined.
        host: u32,
    },
}

impl From<megalon_core::Error> for Error {
    fn from(error: megalon_core::Error) -> Self {
        match error {
            megalon_core::Error::UnknownKey => Error::UnknownKey,
            megalon_core::Error::ObjectExists => Error::KeyExists,
            other => Error::Core(other),
        }
    }
}

/// Results of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;
