//! What HCMeta's hosts ask each other over the core's RPC ring
//! ([`megalon_core::rpc`]): each host has one ring (placed by [`super::geometry`]), and
//! a request's op byte is one of these.

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    /// Share the object (put it in the CXL index) if it exists.
    Share = 1,
    /// Create the object with the payload's bytes.
    Create = 2,
    /// Delete the object.
    Delete = 3,
}

// The ring's op 0 is no request: none of ours may be it.
const _: () = assert!(Op::Share as u8 != megalon_core::rpc::NO_OP);

impl Op {
    /// The op of a request's byte; `None` for anything else (a request the ring could
    /// not fit in its entry reads as [`megalon_core::rpc::NO_OP`]).
    pub(crate) fn from_byte(byte: u8) -> Option<Op> {
        match byte {
            1 => Some(Op::Share),
            2 => Some(Op::Create),
            3 => Some(Op::Delete),
            _ => None,
        }
    }
}
