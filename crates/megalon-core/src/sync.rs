//! The one place the crate takes its atomics, fences and spin hints from.
//!
//! Nothing else in `megalon-core` imports `std::sync::atomic` directly, so a loom build can
//! swap every primitive here for its model-checked twin in one edit (the log issue adds the
//! `megalon_loom` switch together with the models that use it).

pub(crate) use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
