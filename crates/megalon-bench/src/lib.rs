//! The benchmark harness: what the examples, the criterion benchmarks, the peers
//! comparison and `cargo xtask figures` run, kept apart from the KV store so that the
//! store's crate holds the store and nothing that measures it.
//!
//! - [`mix`]: a YCSB-like mix of gets and puts over a [`Store`](megalon_kv::Store)
//!   ([`mix::Mix`]), generalised to any key length and to YCSB's core workloads
//!   ([`mix::Plan`]): load the keys, run workers for a while, sum up what they did
//!   ([`mix::MixRun`]). [`mix::Draws`] gives the same operations to stores measured
//!   beside ours.
//! - [`lineup`]: every scheme (megalon, HCMeta and its variants, AllLog) built over the
//!   same sizes ([`lineup::Setup`]) behind one object-safe interface
//!   ([`lineup::Bench`]).
//! - [`runner`]: what `cargo xtask figures` runs the figures with: the paper's setup
//!   scaled to this machine, schemes built, loaded and run over it, each run's point
//!   ([`runner::Measured`]), the CSV of a panel and the summary's rows.
//!
//! Trade-offs: the workers draw their keys and stamp their values themselves, on the
//! same cores as the store, so the numbers are the store's and the harness's together
//! (the harness does not allocate or format per operation, to keep its share small);
//! a run lasts a fixed wall-clock time, not a fixed count of operations.
//!
//! ```
//! use std::time::Duration;
//! use megalon_bench::lineup::{self, Kind, Setup, Workers};
//! use megalon_bench::mix::{Choice, Plan};
//!
//! let setup = Setup {
//!     hosts: 2,
//!     keys: 1_000,
//!     extra_keys: 0,
//!     key_bytes: 24,
//!     value_bytes: 100,
//!     scr_bytes: 64 << 10,
//!     record_bits: 32,
//!     numa_node: None,
//!     partition_after: 0,
//!     copy_after: 0,
//!     cxl: None,
//! };
//! let plan = Plan {
//!     keys: setup.keys,
//!     key_bytes: setup.key_bytes,
//!     value_bytes: setup.value_bytes,
//!     choice: Choice::Mix { write_ratio: 0.05, skew: 0.99 },
//!     seed: 7,
//! };
//! let megalon = lineup::build(Kind::Megalon, &setup)?;
//! megalon.load(&plan, Workers::new(2))?;
//! let run = megalon.run(&plan, Workers::new(2), Duration::from_millis(50))?;
//! assert!(run.operations() > 0);
//! println!("{run}");
//! # Ok::<(), String>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod lineup;
pub mod mix;
pub mod runner;
