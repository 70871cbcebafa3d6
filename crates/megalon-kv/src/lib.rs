//! A linearizable key-value store shared by the hosts of a CXL pod.
//!
//! Each key is one object of the pod, its value framed as a 4-byte length and the bytes;
//! so keys go up to the pod's `max_key_bytes` and values up to its slot size less 4 bytes.
//! `put` updates the object if it exists and creates it otherwise; `insert` only creates;
//! `get` reads one whole version, never a stale or torn one, even when the memory under
//! it is not coherent; `delete` removes it; `update` reads, changes and writes one value
//! holding its object, so that read-modify-writes from every host lose nothing (a
//! counter's increments add up).
//!
//! The store runs over any sharing [`Scheme`]: megalon's own ([`Megalon`]: a replicated
//! index fed by a shared log, coherence records only for written objects), or the
//! baselines it is compared with, so that examples, checkers and benchmarks are written
//! once (the benchmarks' mix of gets and puts is `megalon_bench::mix`). A handle
//! ([`KvHandle`]) belongs to one thread and one host.
//!
//! Trade-offs: the store keeps no data of its own (no disk, no checkpoint: a pod that is
//! gone takes the store with it, as in the paper's fail-stop model); a value always costs
//! one whole slot; and a put of an absent key goes through the shared log (a create),
//! while a put of a present key does only when the object has no coherence record (its
//! first write since it was created, or since its record was reclaimed or the width
//! switched, appends the record's allocation); later puts of it do not.
//!
//! ```
//! use std::sync::Arc;
//! use megalon_core::{Backing, HostOptions, MemoryKind, Pod, PodConfig};
//! use megalon_kv::{Megalon, Store};
//!
//! let config = PodConfig::new().scr_bytes(64 << 10).lnr_bytes(16 << 20).slot_size_bytes(256);
//! let pod = Arc::new(Pod::create(&config, Backing::heap())?);
//! // Two hosts on simulated non-coherent memory.
//! let options = HostOptions::new().memory(MemoryKind::simulated(7));
//! let store = Store::new(Megalon::join(pod, 2, &options)?);
//!
//! let mut on_host_0 = store.handle(0)?;
//! let mut on_host_1 = store.handle(1)?;
//! on_host_0.put(b"greeting", b"hello")?;
//! assert_eq!(on_host_1.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
//! on_host_1.put(b"greeting", b"hello again")?;
//! assert_eq!(on_host_0.get(b"greeting")?.as_deref(), Some(&b"hello again"[..]));
//! assert!(matches!(on_host_0.insert(b"greeting", b"x"), Err(megalon_kv::Error::KeyExists)));
//! on_host_0.delete(b"greeting")?;
//! assert_eq!(on_host_1.get(b"greeting")?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checked;
mod error;
mod megalon;
pub mod scheme;
mod store;

pub use error::{Error, Result};
pub use megalon::{Megalon, MegalonHandle};
pub use scheme::{Limits, Report, Scheme, SchemeHandle};
pub use store::{KvHandle, Store, LENGTH_PREFIX_BYTES};
