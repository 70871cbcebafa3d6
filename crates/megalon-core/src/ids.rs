//! Identifiers shared by every layer: who appended an event, whose replica, whose ring.

/// Identifier of a host: its index in the host table, below the pod's `max_hosts`.
pub type HostId = u32;
