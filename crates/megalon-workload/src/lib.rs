//! Workloads and checkers shared by megalon's tests and benches.
//!
//! A test runs a key-value or object store on several hosts (threads, or processes on
//! one pod file), under simulated non-coherent memory, and must notice when a host reads
//! a stale value, a half-written (torn) value, or a key that was deleted. This crate gives
//! it three things:
//!
//! - [`Value`]: a (writer, sequence) pair encoded into bytes of any length, with a
//!   checksum and a payload pattern, so a torn read fails to decode.
//! - [`ThreadRecorder`]: each thread records its invocations and responses with
//!   timestamps from one shared [`Clock`], lock-free; [`History::merge`] merges the
//!   threads' logs, also from other processes through a line-based text format.
//! - [`check()`]: decides whether the history is linearizable, key by key, exactly
//!   (including operations whose outcome is unknown), and explains a violation with the
//!   few operations that show it.
//!
//! [`generator`] ports YCSB's key generators and core workloads A–F, for driving the stores;
//! [`processes`] runs the child processes of a multi-process run, with bounded waits;
//! [`stops`] runs again a timed attempt that a stop of the process spanned.
//!
//! The checker's cost grows with the number of operations in flight on a key at once, not
//! with the length of the history: see the [`check`](mod@check) module for the algorithm and
//! why it only needs a sliding window. It assumes the keys are independent (no operation
//! touches two keys) and every key starts absent: record the load phase too.
//!
//! ```
//! use std::thread;
//! use megalon_workload::{check, Call, Clock, History, ProcessId, ThreadRecorder, Value};
//!
//! // A correct store: one lock around a map.
//! let store = parking_lot::Mutex::new(std::collections::HashMap::<Vec<u8>, Vec<u8>>::new());
//! let clock = Clock::counter();
//! let logs = thread::scope(|scope| {
//!     let workers: Vec<_> = (0..4u32)
//!         .map(|thread| {
//!             let (store, clock) = (&store, clock.clone());
//!             scope.spawn(move || {
//!                 let mut recorder = ThreadRecorder::new(ProcessId::new(0, thread), clock);
//!                 for sequence in 0..100 {
//!                     let key = [b'k', (sequence % 3) as u8];
//!                     let value = Value::new(thread, sequence);
//!                     let put = recorder.invoke(&key, Call::Put(value)).unwrap();
//!                     store.lock().insert(key.to_vec(), value.encode(32).unwrap());
//!                     recorder.complete(put, megalon_workload::Outcome::Ok).unwrap();
//!
//!                     let get = recorder.invoke(&key, Call::Get).unwrap();
//!                     let read = store.lock().get(&key[..]).cloned();
//!                     recorder.complete_read(get, read.as_deref()).unwrap();
//!                 }
//!                 recorder.finish()
//!             })
//!         })
//!         .collect();
//!     workers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>()
//! });
//! let history = History::merge(logs)?;
//! let summary = check(&history)?;
//! assert_eq!(summary.operations, 800);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod fixtures;
mod fnv;
pub mod generator;
mod history;
pub mod latency;
pub mod processes;
mod recorder;
pub mod stops;
mod sync;
mod text;
pub mod trace;
mod value;

pub use check::{check, check_with_threads, CheckError, Summary, Violation, ViolationKind};
pub use generator::{
    fnvhash64, GeneratorError, KeyChooser, KeyDistribution, RandomSource,
    ScrambledZipfianGenerator, SkewedLatestGenerator, SplitMix64, UniformGenerator, Workload,
    ZipfianGenerator,
};
pub use history::{Call, History, HistoryBuilder, KeyId, Operation, Outcome, ProcessId};
pub use latency::LatencyHistogram;
pub use recorder::{Clock, KnownWrites, Pending, ThreadLog, ThreadRecorder};
pub use value::{Torn, TornReason, Value, MAX_ENCODED_LEN_BYTES, MIN_ENCODED_LEN_BYTES};

/// Errors of encoding values, recording, building and reading histories.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value's encoding was asked for at a length outside the limits.
    #[error("a value encoding of {len_bytes} bytes is outside {min_bytes}..={max_bytes}")]
    ValueLength {
        /// The length asked for.
        len_bytes: usize,
        /// [`MIN_ENCODED_LEN_BYTES`].
        min_bytes: usize,
        /// [`MAX_ENCODED_LEN_BYTES`].
        max_bytes: usize,
    },
    /// An outcome the call cannot give (a put that answered `found`).
    #[error("`{call}` cannot answer `{outcome}`")]
    OutcomeMismatch {
        /// The call.
        call: Call,
        /// The outcome given for it.
        outcome: Outcome,
    },
    /// A response time earlier than the invocation time.
    #[error("an operation returned at {returned_at}, before it was invoked at {invoked_at}")]
    ReturnBeforeInvoke {
        /// When it was invoked.
        invoked_at: u64,
        /// When it returned.
        returned_at: u64,
    },
    /// A time of `u64::MAX`: the checker's mark of a call that never returned (a known
    /// outcome that returned then would never be made to take effect).
    #[error("time {} is reserved for a call that never returned", u64::MAX)]
    TimeReserved,
    /// A known outcome without a response time.
    #[error("`{call}` answered `{outcome}` but has no response time")]
    MissingReturnTime {
        /// The call.
        call: Call,
        /// Its outcome.
        outcome: Outcome,
    },
    /// A pending operation handed to a recorder that did not start it, or completed twice.
    #[error("an operation of {pending} cannot be completed by the recorder of {recorder}")]
    ForeignPending {
        /// Whose operation it is.
        pending: ProcessId,
        /// Which recorder was asked to complete it.
        recorder: ProcessId,
    },
    /// Two thread logs of one process merged into one history.
    #[error("two thread logs of {process}")]
    DuplicateProcess {
        /// The process.
        process: ProcessId,
    },
    /// More distinct keys than a [`KeyId`] can number.
    #[error("more than {limit} distinct keys")]
    TooManyKeys {
        /// The limit.
        limit: usize,
    },
    /// A line of a thread log that does not parse.
    #[error("thread log line {line}: {message}")]
    Parse {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Reading or writing a thread log or journal failed.
    #[error("thread log I/O: {0}")]
    Io(#[from] std::io::Error),
}
