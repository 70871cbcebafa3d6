//! The one place the crate takes its atomics, fences, locks and spin hints from.
//!
//! Nothing else in `megalon-core` imports `std::sync::atomic` or `parking_lot` directly,
//! so a loom build (`--cfg megalon_loom`, run by `cargo xtask loom`) swaps every
//! primitive here for its model-checked twin.

#[cfg(not(megalon_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(megalon_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(megalon_loom))]
pub(crate) use std::hint::spin_loop;

/// A mutual-exclusion lock whose `lock()` returns the guard directly.
#[cfg(not(megalon_loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

/// A reader-writer lock whose `read()`/`write()` return guards directly.
#[cfg(not(megalon_loom))]
pub(crate) type RwLock<T> = parking_lot::RwLock<T>;

/// What `Mutex::lock` returns.
#[cfg(not(megalon_loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(megalon_loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// What `RwLock::read` returns.
#[cfg(not(megalon_loom))]
pub(crate) type RwLockReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
#[cfg(megalon_loom)]
pub(crate) type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;

/// What `RwLock::write` returns.
#[cfg(not(megalon_loom))]
pub(crate) type RwLockWriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;
#[cfg(megalon_loom)]
pub(crate) type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

#[cfg(megalon_loom)]
pub(crate) use loom_locks::{Mutex, RwLock};

#[cfg(megalon_loom)]
mod loom_locks {
    //! loom's locks, with parking_lot's signatures (no poisoning).

    /// See the non-loom `Mutex`.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("no poisoning in models")
        }
        pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    /// See the non-loom `RwLock`.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }
        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().expect("no poisoning in models")
        }
        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().expect("no poisoning in models")
        }
    }
}
