//! Events: what a log entry says, and how it is laid out in LNR.
//!
//! An entry is `log_entry_bytes` long (a whole number of lines):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | alive word: `lap + 1` once published for position `lap * capacity + index`, so entries are never cleared |
//! | 8 | kind |
//! | 9 | host that appended it |
//! | 10..12 | key length |
//! | 12..16 | record id (or host, for slot grants) |
//! | 16..24 | slot (or first slot of a range) |
//! | 24..32 | argument (a count) |
//! | 32.. | key, zero-padded to the end of the entry |
//!
//! Adding a kind: a variant here, its encoding in [`Event::encode`] and
//! [`Event::decode`], its rule in the replica's `apply`, and a bump of
//! [`LOG_FORMAT_VERSION`] (stored in the pod header; a pod with another log format is
//! refused when opened).

use crate::error::{Error, Result};
use crate::ids::HostId;
use crate::limits::*;
use crate::words::{u32_at, u64_at};

/// A record id that means "no record".
pub const NO_RECORD: u32 = u32::MAX;
/// In a pod with [`Coherence::AllLog`](crate::Coherence), the `record` of a delete whose
/// appender holds the object's replicated lock (it won a `Lock` event). Never a record
/// id: ids stay below [`crate::limits::MAX_RECORDS`].
pub const LOCK_HELD: u32 = u32::MAX - 1;
const _: () = assert!(MAX_RECORDS <= LOCK_HELD as u64);

const KIND_AT: usize = 8;
const HOST_AT: usize = 9;
const KEY_LEN_AT: usize = 10;
const RECORD_AT: usize = 12;
const SLOT_AT: usize = 16;
const ARG_AT: usize = 24;
const KEY_AT: usize = LOG_ENTRY_HEADER_BYTES as usize;
const _: () = assert!(KEY_AT == ARG_AT + 8);

/// What a log entry changes. Keys are borrowed from the entry buffer or the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'k> {
    /// The appender claims `count` never-used slots from the unclaimed range.
    ClaimSlots {
        /// How many it asks for (it gets fewer if fewer are left).
        count: u64,
    },
    /// A new object `key` whose bytes the appender already wrote into `slot`, a slot it
    /// owns. Loses (and the slot stays with its owner) if `key` exists.
    Create {
        /// The object.
        key: &'k [u8],
        /// Where its bytes are.
        slot: u64,
    },
    /// Removes `key` if it still has the record `record` (or none, for `NO_RECORD`): the
    /// record whose lock the appender holds. If the object got another record in the
    /// meantime (an alloc that came first in the log), the delete loses and changes nothing.
    /// The slot of a deleted object goes to the appender's free slots.
    ///
    /// In a pod with [`Coherence::AllLog`](crate::Coherence) objects have no records:
    /// `record` is [`LOCK_HELD`] (the appender holds the object's replicated lock; it wins
    /// if it still does) or [`NO_RECORD`] (it wins only if no host holds the lock).
    Delete {
        /// The object.
        key: &'k [u8],
        /// The record the appender locked, or [`NO_RECORD`].
        record: u32,
    },
    /// The appender claimed `record` for `key` (first write to a read-shared object).
    /// Loses if `key` has a record already: the appender frees `record`. Loses too if a
    /// `WidthEnd` came first in the log since the claim (`epoch` is the width switches the
    /// appender had applied): the switch freed every record, this one with them.
    RecordAlloc {
        /// The object.
        key: &'k [u8],
        /// The record the appender claimed.
        record: u32,
        /// The record width's epoch the record id is of.
        epoch: u32,
    },
    /// `key` gives up `record` and becomes read-shared.
    RecordDealloc {
        /// The object.
        key: &'k [u8],
        /// The record it had.
        record: u32,
    },
    /// The counter of `key`'s record wrapped around: every host drops its cached lines.
    Wrap {
        /// The object.
        key: &'k [u8],
    },
    /// The appender has no free slot: the host with the most free slots grants some.
    NeedSlots {
        /// How many it asks for.
        count: u64,
    },
    /// `key` now lives in host `host`'s local DRAM (its slot stays reserved for it): only
    /// that host touches it until it moves back. Wins only if the object is in its CXL
    /// slot and no event about it came after the one at `stamp` (the appender copied the
    /// object as of then, holding its record's lock if it has one).
    MoveToHost {
        /// The object.
        key: &'k [u8],
        /// The host that holds it (the appender).
        host: HostId,
        /// The object's stamp when the appender copied it.
        stamp: u64,
    },
    /// `key` lives in its CXL slot again; the host that held it wrote it back first.
    /// Wins only if the appender holds the object.
    MoveToCxl {
        /// The object.
        key: &'k [u8],
    },
    /// Pods with [`Coherence::AllLog`](crate::Coherence) only: the appender takes `key`'s
    /// replicated lock to write (or delete) it. The first `Lock` on an unlocked object
    /// wins; one on a locked object loses and changes nothing.
    Lock {
        /// The object.
        key: &'k [u8],
    },
    /// Pods with [`Coherence::AllLog`](crate::Coherence) only: the lock holder has
    /// written the object back; its counter moves on by 2 and the lock is released.
    Unlock {
        /// The object.
        key: &'k [u8],
    },
    /// The appender gives `count` of its free slots from `first` on to host `to`.
    GrantSlots {
        /// The receiving host.
        to: HostId,
        /// First slot of the range.
        first: u64,
        /// Slots in the range.
        count: u64,
    },
    /// Nothing: written by a live host in place of an entry that a dead host reserved and
    /// never published, so that replay goes on past it.
    Skip,
    /// The appender joined under an id that an earlier participant held, as the id's
    /// `life`-th holder: what replay gave that participant (its free slots) is not the
    /// appender's, and a `HostDead` of an earlier life applied after this one is stale.
    HostJoined {
        /// Which life of the id joined ([`crate::inspect::HostInfo::joins`]).
        life: u64,
    },
    /// The appender, leaving, gives `count` of its free slots from `first` on back to the
    /// pod: a later `ClaimSlots` takes them once the unclaimed range is used up.
    ReturnSlots {
        /// First slot of the range.
        first: u64,
        /// Slots in the range.
        count: u64,
    },
    /// The appender leaves: it holds no free slots from here on (what it did not give back
    /// is lost), so no `NeedSlots` asks it, and no object in its DRAM.
    HostLeft,
    /// Host `host`, in its `joins`-th life, is dead (its process is gone, or its lease ran
    /// out): it holds no slots, no object in its DRAM and no replicated lock from here on,
    /// and if it is still running it must stop.
    HostDead {
        /// The dead host.
        host: HostId,
        /// Which of its lives died ([`crate::inspect::HostInfo::joins`]).
        joins: u64,
    },
    /// Every record is free from here on, and records are `bits` wide: the record width's
    /// `epoch`-th switch. Every object loses its record (and its host counters), as by a
    /// dealloc. The appender froze and zeroed the record array first; only the first
    /// `WidthEnd` of an epoch counts (a replaced appender's repeat changes nothing).
    WidthEnd {
        /// The epoch the switch begins.
        epoch: u32,
        /// Bits per record from here on.
        bits: u32,
    },
    /// `record`, locked by a host that died, was restored and unlocked by the appender;
    /// `key`'s bytes may have been put back to their last complete value, so every host
    /// drops its cached lines (as for a wrap).
    Recovered {
        /// The object.
        key: &'k [u8],
        /// Its record.
        record: u32,
    },
}

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ClaimSlots = 1,
    Create = 2,
    Delete = 3,
    RecordAlloc = 4,
    RecordDealloc = 5,
    Wrap = 6,
    NeedSlots = 7,
    GrantSlots = 8,
    MoveToHost = 9,
    MoveToCxl = 10,
    Lock = 11,
    Unlock = 12,
    Skip = 13,
    HostJoined = 14,
    HostDead = 15,
    Recovered = 16,
    ReturnSlots = 17,
    HostLeft = 18,
    WidthEnd = 19,
}

impl Kind {
    fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::ClaimSlots,
            2 => Kind::Create,
            3 => Kind::Delete,
            4 => Kind::RecordAlloc,
            5 => Kind::RecordDealloc,
            6 => Kind::Wrap,
            7 => Kind::NeedSlots,
            8 => Kind::GrantSlots,
            9 => Kind::MoveToHost,
            10 => Kind::MoveToCxl,
            11 => Kind::Lock,
            12 => Kind::Unlock,
            13 => Kind::Skip,
            14 => Kind::HostJoined,
            15 => Kind::HostDead,
            16 => Kind::Recovered,
            17 => Kind::ReturnSlots,
            18 => Kind::HostLeft,
            19 => Kind::WidthEnd,
            _ => return None,
        })
    }
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

impl<'k> Event<'k> {
    /// The object the event is about, if it is about one.
    pub fn key(&self) -> Option<&'k [u8]> {
        match *self {
            Event::Create { key, .. }
            | Event::Delete { key, .. }
            | Event::RecordAlloc { key, .. }
            | Event::RecordDealloc { key, .. }
            | Event::Wrap { key }
            | Event::MoveToHost { key, .. }
            | Event::MoveToCxl { key }
            | Event::Lock { key }
            | Event::Unlock { key }
            | Event::Recovered { key, .. } => Some(key),
            Event::ClaimSlots { .. }
            | Event::NeedSlots { .. }
            | Event::GrantSlots { .. }
            | Event::Skip
            | Event::HostJoined { .. }
            | Event::ReturnSlots { .. }
            | Event::HostLeft
            | Event::HostDead { .. }
            | Event::WidthEnd { .. } => None,
        }
    }

    /// Writes the entry (all but the alive word, which is left 0) into `buf`, which is
    /// one entry long. The caller has checked the key against the pod's maximum.
    pub fn encode(&self, host: HostId, buf: &mut [u8]) {
        buf.fill(0);
        let (kind, key, record, slot, arg): (Kind, &[u8], u32, u64, u64) = match *self {
            Event::ClaimSlots { count } => (Kind::ClaimSlots, &[], NO_RECORD, 0, count),
            Event::Create { key, slot } => (Kind::Create, key, NO_RECORD, slot, 0),
            Event::Delete { key, record } => (Kind::Delete, key, record, 0, 0),
            Event::RecordAlloc { key, record, epoch } => {
                (Kind::RecordAlloc, key, record, u64::from(epoch), 0)
            }
            Event::RecordDealloc { key, record } => (Kind::RecordDealloc, key, record, 0, 0),
            Event::Wrap { key } => (Kind::Wrap, key, NO_RECORD, 0, 0),
            Event::NeedSlots { count } => (Kind::NeedSlots, &[], NO_RECORD, 0, count),
            Event::GrantSlots { to, first, count } => (Kind::GrantSlots, &[], to, first, count),
            Event::MoveToHost { key, host, stamp } => (Kind::MoveToHost, key, host, 0, stamp),
            Event::MoveToCxl { key } => (Kind::MoveToCxl, key, NO_RECORD, 0, 0),
            Event::Lock { key } => (Kind::Lock, key, NO_RECORD, 0, 0),
            Event::Unlock { key } => (Kind::Unlock, key, NO_RECORD, 0, 0),
            Event::Skip => (Kind::Skip, &[], NO_RECORD, 0, 0),
            Event::HostJoined { life } => (Kind::HostJoined, &[], NO_RECORD, 0, life),
            Event::ReturnSlots { first, count } => {
                (Kind::ReturnSlots, &[], NO_RECORD, first, count)
            }
            Event::HostLeft => (Kind::HostLeft, &[], NO_RECORD, 0, 0),
            Event::HostDead { host, joins } => (Kind::HostDead, &[], host, 0, joins),
            Event::Recovered { key, record } => (Kind::Recovered, key, record, 0, 0),
            Event::WidthEnd { epoch, bits } => (Kind::WidthEnd, &[], bits, 0, u64::from(epoch)),
        };
        assert!(
            KEY_AT + key.len() <= buf.len(),
            "key checked against the pod's maximum"
        );
        buf[KIND_AT] = kind as u8;
        buf[HOST_AT] = u8::try_from(host).expect("host ids fit a byte (MAX_HOSTS_LIMIT)");
        put(buf, KEY_LEN_AT, &(key.len() as u16).to_le_bytes());
        put(buf, RECORD_AT, &record.to_le_bytes());
        put(buf, SLOT_AT, &slot.to_le_bytes());
        put(buf, ARG_AT, &arg.to_le_bytes());
        put(buf, KEY_AT, key);
    }

    /// Reads the entry at log position `position` from `buf`: the appending host and the
    /// event. An entry that decodes to nothing valid is a corrupt log.
    pub fn decode(position: u64, buf: &'k [u8]) -> Result<(HostId, Event<'k>)> {
        let corrupt = |what: &'static str| Error::CorruptLogEntry { position, what };
        let kind = Kind::from_u8(buf[KIND_AT]).ok_or(corrupt("unknown kind"))?;
        let host = HostId::from(buf[HOST_AT]);
        let key_len = usize::from(u16::from_le_bytes([buf[KEY_LEN_AT], buf[KEY_LEN_AT + 1]]));
        let key = buf
            .get(KEY_AT..KEY_AT + key_len)
            .ok_or(corrupt("key longer than the entry"))?;
        let record = u32_at(buf, RECORD_AT);
        let slot = u64_at(buf, SLOT_AT);
        let arg = u64_at(buf, ARG_AT);
        let event = match kind {
            Kind::ClaimSlots => Event::ClaimSlots { count: arg },
            Kind::Create => Event::Create { key, slot },
            Kind::Delete => Event::Delete { key, record },
            Kind::RecordAlloc => Event::RecordAlloc {
                key,
                record,
                epoch: u32::try_from(slot).map_err(|_| corrupt("record epoch past 32 bits"))?,
            },
            Kind::RecordDealloc => Event::RecordDealloc { key, record },
            Kind::Wrap => Event::Wrap { key },
            Kind::NeedSlots => Event::NeedSlots { count: arg },
            Kind::GrantSlots => Event::GrantSlots {
                to: record,
                first: slot,
                count: arg,
            },
            Kind::MoveToHost => Event::MoveToHost {
                key,
                host: record,
                stamp: arg,
            },
            Kind::MoveToCxl => Event::MoveToCxl { key },
            Kind::Lock => Event::Lock { key },
            Kind::Unlock => Event::Unlock { key },
            Kind::Skip => Event::Skip,
            Kind::HostJoined => Event::HostJoined { life: arg },
            Kind::ReturnSlots => Event::ReturnSlots {
                first: slot,
                count: arg,
            },
            Kind::HostLeft => Event::HostLeft,
            Kind::HostDead => Event::HostDead {
                host: record,
                joins: arg,
            },
            Kind::Recovered => Event::Recovered { key, record },
            Kind::WidthEnd => Event::WidthEnd {
                epoch: u32::try_from(arg).map_err(|_| corrupt("record epoch past 32 bits"))?,
                bits: record,
            },
        };
        Ok((host, event))
    }
}

/// An event with its key owned, for handing between threads (flat combining).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedEvent {
    kind: OwnedKind,
    key: Box<[u8]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnedKind {
    ClaimSlots { count: u64 },
    Create { slot: u64 },
    Delete { record: u32 },
    RecordAlloc { record: u32, epoch: u32 },
    RecordDealloc { record: u32 },
    Wrap,
    NeedSlots { count: u64 },
    GrantSlots { to: HostId, first: u64, count: u64 },
    MoveToHost { host: HostId, stamp: u64 },
    MoveToCxl,
    Lock,
    Unlock,
    Skip,
    HostJoined { life: u64 },
    ReturnSlots { first: u64, count: u64 },
    HostLeft,
    HostDead { host: HostId, joins: u64 },
    Recovered { record: u32 },
    WidthEnd { epoch: u32, bits: u32 },
}

impl OwnedEvent {
    /// Copies `event`.
    pub fn new(event: &Event<'_>) -> Self {
        let kind = match *event {
            Event::ClaimSlots { count } => OwnedKind::ClaimSlots { count },
            Event::Create { slot, .. } => OwnedKind::Create { slot },
            Event::Delete { record, .. } => OwnedKind::Delete { record },
            Event::RecordAlloc { record, epoch, .. } => OwnedKind::RecordAlloc { record, epoch },
            Event::RecordDealloc { record, .. } => OwnedKind::RecordDealloc { record },
            Event::Wrap { .. } => OwnedKind::Wrap,
            Event::NeedSlots { count } => OwnedKind::NeedSlots { count },
            Event::GrantSlots { to, first, count } => OwnedKind::GrantSlots { to, first, count },
            Event::MoveToHost { host, stamp, .. } => OwnedKind::MoveToHost { host, stamp },
            Event::MoveToCxl { .. } => OwnedKind::MoveToCxl,
            Event::Lock { .. } => OwnedKind::Lock,
            Event::Unlock { .. } => OwnedKind::Unlock,
            Event::Skip => OwnedKind::Skip,
            Event::HostJoined { life } => OwnedKind::HostJoined { life },
            Event::ReturnSlots { first, count } => OwnedKind::ReturnSlots { first, count },
            Event::HostLeft => OwnedKind::HostLeft,
            Event::HostDead { host, joins } => OwnedKind::HostDead { host, joins },
            Event::Recovered { record, .. } => OwnedKind::Recovered { record },
            Event::WidthEnd { epoch, bits } => OwnedKind::WidthEnd { epoch, bits },
        };
        Self {
            kind,
            key: event.key().unwrap_or_default().into(),
        }
    }

    /// The event, borrowing the key.
    pub fn event(&self) -> Event<'_> {
        let key = &self.key[..];
        match self.kind {
            OwnedKind::ClaimSlots { count } => Event::ClaimSlots { count },
            OwnedKind::Create { slot } => Event::Create { key, slot },
            OwnedKind::Delete { record } => Event::Delete { key, record },
            OwnedKind::RecordAlloc { record, epoch } => Event::RecordAlloc { key, record, epoch },
            OwnedKind::RecordDealloc { record } => Event::RecordDealloc { key, record },
            OwnedKind::Wrap => Event::Wrap { key },
            OwnedKind::NeedSlots { count } => Event::NeedSlots { count },
            OwnedKind::GrantSlots { to, first, count } => Event::GrantSlots { to, first, count },
            OwnedKind::MoveToHost { host, stamp } => Event::MoveToHost { key, host, stamp },
            OwnedKind::MoveToCxl => Event::MoveToCxl { key },
            OwnedKind::Lock => Event::Lock { key },
            OwnedKind::Unlock => Event::Unlock { key },
            OwnedKind::Skip => Event::Skip,
            OwnedKind::HostJoined { life } => Event::HostJoined { life },
            OwnedKind::ReturnSlots { first, count } => Event::ReturnSlots { first, count },
            OwnedKind::HostLeft => Event::HostLeft,
            OwnedKind::HostDead { host, joins } => Event::HostDead { host, joins },
            OwnedKind::Recovered { record } => Event::Recovered { key, record },
            OwnedKind::WidthEnd { epoch, bits } => Event::WidthEnd { epoch, bits },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds(key: &[u8]) -> Vec<Event<'_>> {
        vec![
            Event::ClaimSlots { count: 1024 },
            Event::Create { key, slot: 77 },
            Event::Delete { key, record: 4 },
            Event::Delete {
                key,
                record: NO_RECORD,
            },
            Event::RecordAlloc {
                key,
                record: 5,
                epoch: 3,
            },
            Event::RecordDealloc { key, record: 9 },
            Event::Wrap { key },
            Event::NeedSlots { count: 3 },
            Event::GrantSlots {
                to: 2,
                first: 100,
                count: 50,
            },
            Event::MoveToHost {
                key,
                host: 3,
                stamp: 1 << 40,
            },
            Event::MoveToCxl { key },
            Event::Lock { key },
            Event::Unlock { key },
            Event::Delete {
                key,
                record: LOCK_HELD,
            },
            Event::Skip,
            Event::HostJoined { life: 4 },
            Event::WidthEnd { epoch: 2, bits: 4 },
            Event::ReturnSlots {
                first: 1 << 33,
                count: 7,
            },
            Event::HostLeft,
            Event::HostDead { host: 5, joins: 3 },
            Event::Recovered { key, record: 11 },
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        let key = b"a key of some length";
        let mut buf = vec![0u8; 64];
        for event in all_kinds(key) {
            event.encode(7, &mut buf);
            assert_eq!(&buf[..8], &[0; 8], "the alive word is left for publishing");
            let (host, decoded) = Event::decode(0, &buf).expect("valid");
            assert_eq!((host, decoded), (7, event));
            assert_eq!(OwnedEvent::new(&event).event(), event);
        }
    }

    #[test]
    fn garbage_is_a_corrupt_entry_not_a_panic() {
        let mut buf = vec![0u8; 64];
        assert!(matches!(
            Event::decode(3, &buf),
            Err(Error::CorruptLogEntry { position: 3, .. })
        ));
        Event::Delete {
            key: b"k",
            record: NO_RECORD,
        }
        .encode(0, &mut buf);
        buf[KEY_LEN_AT] = 200; // longer than the entry
        assert!(matches!(
            Event::decode(4, &buf),
            Err(Error::CorruptLogEntry { position: 4, .. })
        ));
    }
}
