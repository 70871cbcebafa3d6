//! The schemes megalon is compared with, each behind the KV store's
//! [`Scheme`](megalon_kv::Scheme) trait so that one harness, one workload and one
//! linearizability checker run them all (`megalon_bench::lineup` builds each of them
//! over the same sizes):
//!
//! - **HCMeta** (Tigon's scheme): each owner host's index and 8-byte records in SCR;
//!   when its SCR budget is full the owner unshares objects with CLOCK; a host that needs
//!   an unshared object asks its owner through a shared-memory RPC ring.
//! - **HCMeta-Local**: HCMeta with each owner's partition in its local DRAM; sharing
//!   copies the object into CXL.
//! - **HCMeta-Unlimited**: HCMeta without a budget (never churns).
//! - **AllLog**: megalon with lock and counter replicated through the log.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod all_log;
pub mod hcmeta;

pub use all_log::AllLog;
pub use hcmeta::{HcMeta, HcMetaConfig, HcMetaHandle, Placement};
