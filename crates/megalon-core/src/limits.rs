//! Every limit and fixed size of a pod, in one place: what a configuration may ask for,
//! what the layout and the formats in the pod are built from, and their versions.

/// Bytes in one cache line: slots and log entries are whole numbers of lines.
pub const LINE_BYTES: u64 = 64;
/// SCR and LNR sizes are multiples of a page, so every region can be mapped and bound to a
/// NUMA node on its own. (A line in loom models, whose pods are small heaps of model
/// atomics.)
pub const PAGE_BYTES: u64 = if cfg!(megalon_loom) { 64 } else { 4096 };
/// Most hosts one pod can have: host bitmaps (in the baselines) are one `u64`.
pub const MAX_HOSTS_LIMIT: u32 = 64;
/// Longest key a pod can be configured for: keys travel inline in log entries.
pub const MAX_KEY_BYTES_LIMIT: u32 = 1024;
/// Largest object slot a pod can be configured for.
pub const MAX_SLOT_SIZE_BYTES: u64 = 16 << 20;
/// Fewest log entries a pod can be configured with.
pub const MIN_LOG_CAPACITY_ENTRIES: u64 = 2;
/// Bytes of a log entry before its inline key: kind, lengths, slot, record, host, lap.
pub const LOG_ENTRY_HEADER_BYTES: u64 = 32;
/// The record widths a pod supports, in bits (2 of them are the free and lock bits).
pub const RECORD_WIDTHS_BITS: [u32; 5] = [2, 4, 8, 16, 32];
/// Consecutive accesses from one host after which an object moves to that host's DRAM,
/// when [`PodConfig::local_partitions`](crate::PodConfig::local_partitions) is turned on without a count of its own.
pub const DEFAULT_PARTITION_ACCESSES: u32 = 5;
/// Entries of each host's RPC ring that turning local partitions on sets when the pod has
/// no rings yet.
pub const DEFAULT_RPC_RING_ENTRIES: u32 = 16;

/// Bytes reserved for the header at the start of the pod (one page).
pub const HEADER_REGION_BYTES: u64 = 4096;
/// Bytes of the first line of a host-table entry (holder, heartbeat, joins, machine,
/// process start, reservation, the last condemned life).
pub(crate) const HOST_ENTRY_BYTES: u64 = LINE_BYTES;
/// Record locks one host may hold at once in a pod with undo images: each has an announce
/// word in the host's table entry (after its first line) and an undo image in LNR.
pub const HOLDS_PER_HOST: u64 = 16;
/// The default [`PodConfig::lease_ms`](crate::PodConfig::lease_ms).
pub const DEFAULT_LEASE_MS: u32 = 2000;
/// The default [`PodConfig::join_area_bytes`](crate::PodConfig::join_area_bytes): 32 KiB.
pub const DEFAULT_JOIN_AREA_BYTES: u64 = 32 << 10;
/// Most bytes of a join area: its size is stored in the header as a count of lines in 32
/// bits.
pub const MAX_JOIN_AREA_BYTES: u64 = (u32::MAX as u64) * LINE_BYTES;
/// The shortest lease a pod accepts.
pub const MIN_LEASE_MS: u32 = 20;
/// Bytes of the reclaimer's counters (one line).
pub(crate) const RECLAIMER_BYTES: u64 = LINE_BYTES;
/// Log cursors shared by every host, each on its own line: `tail`, `head`, `ctail`, the
/// recovery word (which live host is recovering a dead one), the join mailbox (a late
/// joiner and the live host streaming it the index) and the width word (the record
/// width's epoch, and whether a switch drains the records).
pub(crate) const SHARED_CURSORS: u64 = 6;
/// Most slots a pod can have: slot ids are 32-bit in the replica.
pub const MAX_SLOTS: u64 = u32::MAX as u64;
/// Most records a pod can have: record ids are 32-bit, and `u32::MAX` means none.
pub const MAX_RECORDS: u64 = u32::MAX as u64 - 1;
/// Bytes per slot of the accessor array (pods with local partitions): the last accessor
/// (host + 1, 0: none) and how many times another host asked the object back.
pub const ACCESSOR_BYTES: u64 = 2;

/// First eight bytes of every pod: `"MEGALON\0"` read as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"MEGALON\0");
/// Version of the layout and of everything stored in the pod. Bumped whenever any format
/// in the pod changes; a pod of another version is refused when opened. Version 3 stores
/// the pod's [`Coherence`](crate::Coherence) mode where version 2 had a reserved zero word; version 4 adds
/// local partitions, local copies and the RPC rings (their SCR and LNR regions); version 5
/// adds the lease and crash safety (the recovery word, machine, process start and
/// reservation words in the host table, lock announce words and undo images); version 6
/// adds the record under recovery (a word beside the recovery word), which every host
/// about to lock a record checks; version 7 names the join mailbox's server by its
/// session (id and life) where 6 had 1 + its id, keeps the last condemned life in each
/// host-table row (a word 6 left zero), and gives each RPC ring entry a sender word;
/// version 8 keeps only the "closed" bit in the log's registration word, where 7 also
/// counted the hosts joining (a joiner's row holds the head at 0 instead); version 9 has
/// no registration word (a host joins from position 0 while the head is at 0) and counts
/// the claims of host-table rows in the `head` word's top 12 bits, its position in the
/// other 52; each `ltail` word names the life that stored it in its top 12 bits; a
/// host-table row's `holder` word holds the pid and the life (the count of joins, whose
/// own word is unused), and its `machine` and `started` notes name the life in their low
/// and high 24 bits; the join mailbox's position word is unused (the stream starts
/// with a header: the joiner's session, the snapshot's position, a checksum); version 10
/// names the life in a host-table row's reservation words (their top 12 bits, as
/// `ltail`'s), where 9 held positions alone; version 11 lets the `head` word's count of
/// claims wrap, and counts every claim in the word after it on the `head`'s line (zero
/// in 10).
pub const LAYOUT_VERSION: u32 = 12;
/// Bytes of the encoded header.
pub const HEADER_BYTES: usize = 136;

/// Version of the entry format and of the meaning of every kind. Version 2 adds `Lock`
/// and `Unlock` (pods with [`Coherence::AllLog`](crate::Coherence)); version 3 gives
/// `MoveToHost` the stamp it expects, makes `MoveToCxl` win only for the holder, and
/// makes a delete of an object in a host's DRAM lose; version 4 adds `Skip`, `HostJoined`,
/// `HostDead` and `Recovered` (hosts that die and come back); version 5 adds
/// `ReturnSlots` and `HostLeft` (a host that leaves gives its free slots back), and
/// marks a host that left or died gone (no donor; a grant to it goes to the pod) until
/// its id joins again; version 6 gives `HostJoined` the life that joined, and a `HostDead`
/// of an earlier life than the id's last `HostJoined` changes nothing; version 7 gives a
/// host's free slots back to the pod when it dies, leaves or its id joins again (every
/// replica knows which they are, and a late joiner's snapshot carries them).
pub const LOG_FORMAT_VERSION: u32 = 8;
