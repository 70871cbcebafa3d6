//! The one place the crate takes its atomics from.
//!
//! The workload crate has no loom models of its own, but it keeps the workspace's habit:
//! nothing else imports `std::sync::atomic` directly, so a reader finds every atomic the
//! crate relies on (the shared history clock, the checker's work queue) from here.

pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
