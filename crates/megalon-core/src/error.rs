//! The crate's error type: one variant per thing that can go wrong, each carrying the
//! values a caller needs to act on it.

use crate::ids::HostId;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// A part of the pod, named in errors about sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The small coherent region.
    Scr,
    /// The large non-coherent region.
    Lnr,
    /// The whole mapping (header + SCR + LNR) against a device of fixed length.
    Device,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Region::Scr => "SCR",
            Region::Lnr => "LNR",
            Region::Device => "the device",
        })
    }
}

/// Everything `megalon-core` can refuse.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- creating a pod: the configuration ----
    /// A size parameter is zero.
    #[error("{parameter} is 0; it must be positive")]
    ZeroSize {
        /// The configuration field.
        parameter: &'static str,
    },
    /// A size parameter is not a multiple of the alignment it needs.
    #[error("{parameter} = {value} is not a multiple of {alignment}")]
    UnalignedSize {
        /// The configuration field.
        parameter: &'static str,
        /// The value given.
        value: u64,
        /// The multiple it must be.
        alignment: u64,
    },
    /// The slot size is not a whole number of cache lines.
    #[error("slot size of {slot_size_bytes} bytes is not a multiple of the 64-byte cache line")]
    SlotSizeNotLineMultiple {
        /// The value given.
        slot_size_bytes: u64,
    },
    /// The record width is not one of 2, 4, 8, 16, 32.
    #[error("record width of {bits} bits is not supported (2, 4, 8, 16 or 32)")]
    UnsupportedRecordWidth {
        /// The value given.
        bits: u32,
    },
    /// More hosts than the host table can hold.
    #[error("{requested} hosts requested; the host table holds at most {limit}")]
    TooManyHosts {
        /// The value given.
        requested: u32,
        /// [`crate::limits::MAX_HOSTS_LIMIT`].
        limit: u32,
    },
    /// A parameter is above its documented limit.
    #[error("{parameter} = {value} is above the limit of {limit}")]
    AboveLimit {
        /// The configuration field.
        parameter: &'static str,
        /// The value given.
        value: u64,
        /// The named constant that bounds it.
        limit: u64,
    },
    /// A parameter is below its documented minimum.
    #[error("{parameter} = {value} is below the minimum of {minimum}")]
    BelowMinimum {
        /// The configuration field.
        parameter: &'static str,
        /// The value given.
        value: u64,
        /// The named constant that bounds it.
        minimum: u64,
    },
    /// The fixed parts of a region do not fit in the size given for it.
    #[error("the layout does not fit in {region}: it needs at least {needed_bytes} bytes, {available_bytes} are given")]
    LayoutDoesNotFit {
        /// Which region.
        region: Region,
        /// The least size that would fit.
        needed_bytes: u64,
        /// The size given.
        available_bytes: u64,
    },

    /// An area the application asked of a pod's application SCR or LNR is larger than the
    /// pod was made with ([`PodConfig::app_scr_bytes`](crate::PodConfig::app_scr_bytes),
    /// [`PodConfig::app_lnr_bytes`](crate::PodConfig::app_lnr_bytes)).
    #[error("{what} needs {needed_bytes} bytes of the application's {region}; the pod has {available_bytes}")]
    AppAreaTooSmall {
        /// What was asked for (a ring, say, with its size).
        what: String,
        /// Which of the two application areas.
        region: Region,
        /// The bytes it needs there.
        needed_bytes: u64,
        /// The bytes the pod was made with there.
        available_bytes: u64,
    },

    // ---- opening a pod ----
    /// The file does not start with megalon's magic number.
    #[error("{path}: not a megalon pod (magic {found:#018x})", path = path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first eight bytes, little-endian.
        found: u64,
    },
    /// The pod was made by a version of megalon with another layout.
    #[error("{path}: pod layout version {found}, this build reads version {supported}", path = path.display())]
    UnknownVersion {
        /// The file.
        path: PathBuf,
        /// The version in the header.
        found: u32,
        /// [`crate::limits::LAYOUT_VERSION`].
        supported: u32,
    },
    /// The pod's log entries are in a format this build does not read.
    #[error("{path}: log format version {found}, this build reads version {supported}", path = path.display())]
    UnknownLogFormat {
        /// The file.
        path: PathBuf,
        /// The version in the header.
        found: u32,
        /// [`crate::limits::LOG_FORMAT_VERSION`].
        supported: u32,
    },
    /// The file is shorter than its header or than the layout its header describes (on
    /// open), or a DAX stand-in file is shorter than the length asked for (on create).
    #[error("{path}: {file_bytes} bytes, but the pod needs {needed_bytes}", path = path.display())]
    FileTooSmall {
        /// The file.
        path: PathBuf,
        /// Its length.
        file_bytes: u64,
        /// The length the header (or its layout) needs.
        needed_bytes: u64,
    },
    /// The header's checksum does not match its contents.
    #[error("{path}: header checksum {stored:#018x}, contents hash to {computed:#018x}", path = path.display())]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// The checksum stored in the header.
        stored: u64,
        /// The checksum of the stored fields.
        computed: u64,
    },
    /// The header's checksum matches but its fields do not describe a valid layout.
    #[error("{path}: header describes no valid layout: {reason}", path = path.display())]
    HeaderInvalid {
        /// The file.
        path: PathBuf,
        /// What the layout check said.
        reason: Box<Error>,
    },
    /// The header names a coherence mode this build does not know.
    #[error("coherence mode {found} is not one this build knows (0: split, 1: all-log)")]
    UnknownCoherence {
        /// The value in the header.
        found: u32,
    },
    /// A join could not be served: a host joining after the log recycled waited in vain
    /// for a live host to send it the index (late joins need a live host whose pump
    /// runs), or found every holder of the table dead after the log recycled (nobody
    /// holds the index), or took a dead host's row over and could not finish its
    /// recovery within the wait limit (another recovery held what it waited for).
    /// `cause` says which.
    #[error("host {host} could not join (it waited {waited_ms} ms): {cause}")]
    JoinNotServed {
        /// The joining host.
        host: HostId,
        /// How long it waited.
        waited_ms: u64,
        /// Why.
        cause: JoinNotServedCause,
    },
    /// A host streaming the index to a late joiner stopped: the joiner stopped reading.
    #[error("host {host}, joining late, stopped reading the index (waited {waited_ms} ms)")]
    JoinerGone {
        /// The joining host.
        host: HostId,
        /// How long the server waited.
        waited_ms: u64,
    },
    /// The snapshot of an index that a joining host received does not decode.
    #[error("the index snapshot a live host sent is damaged: {what}")]
    CorruptSnapshot {
        /// What did not decode.
        what: &'static str,
    },
    /// A pod file that a process has open, or live hosts still use: creating a pod there
    /// would split them from the new one without either noticing.
    #[error("the pod at {} is in use: a process has it open, its live hosts are {hosts:?} (drop every Pod of it first, or replace it with Pod::create_replacing)", path.display())]
    PodInUse {
        /// The pod file.
        path: PathBuf,
        /// Its live hosts (none, for a pod open in a process whose hosts have left or
        /// not joined yet).
        hosts: Vec<HostId>,
    },
    /// A file backing's path names something a pod file may not replace.
    #[error("{} is {found}, not a pod file", path.display())]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        found: &'static str,
    },
    /// The file system of a pod file has less room than the pod needs (a pod's pages are
    /// taken as they are first touched, and one that finds no room kills the process).
    #[error("a pod of {needed_bytes} bytes at {} does not fit: its file system has {available_bytes} bytes free", path.display())]
    NoRoomForPod {
        /// The pod file.
        path: PathBuf,
        /// Bytes the pod needs.
        needed_bytes: u64,
        /// Bytes the file system has free.
        available_bytes: u64,
    },
    /// Every announce word of this host is in use: it holds that many record locks at once.
    #[error("host {host} holds {limit} record locks at once, the most a host can hold in a pod with undo images (waited {waited_ms} ms for one to end)")]
    TooManyLocksHeld {
        /// This host.
        host: HostId,
        /// Locks a host may hold at once.
        limit: u64,
        /// How long it waited.
        waited_ms: u64,
    },
    /// A record locked by a dead host changed while a live host recovered it: the
    /// protocol is broken (only a lock's holder changes a locked record).
    #[error("record {record}, locked by a dead host, changed while it was recovered")]
    RecordChangedUnderRecovery {
        /// The record.
        record: u32,
    },
    /// Another host declared this one dead (its lease ran out while it was paused) and
    /// recovered what it held: this host must stop; a new one may join.
    #[error("host {host} (life {life}) was declared dead by another host: its lease ran out; join again as a new host")]
    HostDeclaredDead {
        /// This host.
        host: HostId,
        /// Which life of the id.
        life: u64,
    },
    /// The header names a crash-safety mode this build does not create pods with.
    #[error("crash-safety mode {found} is not one a pod is created with (1: undo, 2: off)")]
    UnknownCrashSafety {
        /// The value in the header.
        found: u32,
    },
    /// Local partitions and local copies follow the split protocol (records and log);
    /// a pod with another coherence mode cannot have them.
    #[error("{parameter} needs split coherence")]
    NeedsSplitCoherence {
        /// The configuration field that is on.
        parameter: &'static str,
    },
    /// A pod whose record width may change at run time
    /// ([`PodConfig::record_width_switch`](crate::PodConfig::record_width_switch)) cannot
    /// have this too (yet): local partitions, whose moves lock records for long (and
    /// whose move-back announces name slots, not records).
    #[error("record_width_switch cannot be on with {parameter}")]
    NotWithWidthSwitch {
        /// The configuration field that is on.
        parameter: &'static str,
    },
    /// Local partitions in a pod that processes share (a file, a DAX device) without undo
    /// images ([`CrashSafety::Off`](crate::CrashSafety::Off)): a process killed while it
    /// copies an object from its DRAM back to CXL would leave the object with part of each
    /// value, which reads could not tell from a whole one. Use
    /// [`CrashSafety::Undo`](crate::CrashSafety::Undo) (the default for these backings).
    #[error("{parameter} in a pod shared by processes needs undo images (crash_safety Undo)")]
    NeedsUndoImages {
        /// The configuration field that is on.
        parameter: &'static str,
    },
    /// The pod was created with another value of a parameter than the caller expects.
    #[error("pod has {parameter} = {in_pod}, the caller expects {expected}")]
    ParameterMismatch {
        /// The configuration field.
        parameter: &'static str,
        /// The value in the pod's header.
        in_pod: u64,
        /// The value the caller asked for.
        expected: u64,
    },
    /// A heap pod lives only in the process that created it.
    #[error("a heap pod cannot be opened; create it, or use a file backing to share it")]
    HeapNotOpenable,

    // ---- the operating system ----
    /// A system call on the backing failed.
    #[error("{operation} {path}: {source}", path = path.display())]
    Io {
        /// What we were doing.
        operation: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The NUMA node does not exist on this machine.
    #[error("NUMA node {node} does not exist; this machine has nodes {available:?}")]
    NumaNodeMissing {
        /// The node asked for.
        node: u32,
        /// The nodes that exist.
        available: Vec<u32>,
    },
    /// `mbind` refused to bind the mapping.
    #[error("binding the pod to NUMA node {node}: {source}")]
    NumaBind {
        /// The node asked for.
        node: u32,
        /// What the OS said.
        #[source]
        source: Arc<std::io::Error>,
    },

    // ---- hosts ----
    /// The host id is past the pod's maximum.
    #[error("host {host} does not exist: the pod has hosts 0..{max_hosts}")]
    HostOutOfRange {
        /// The id asked for.
        host: u32,
        /// The pod's `max_hosts`.
        max_hosts: u32,
    },
    /// Another participant holds the host id.
    #[error("host {host} is taken (by process {holder_pid})")]
    HostTaken {
        /// The id asked for.
        host: u32,
        /// The process id recorded by the holder.
        holder_pid: u32,
    },
    /// Every host id is taken.
    #[error("the host table is full: all {max_hosts} hosts are joined")]
    HostTableFull {
        /// The pod's `max_hosts`.
        max_hosts: u32,
    },
    /// The log has recycled entries since position 0 and the pod has no join area
    /// ([`PodConfig::join_area_bytes`](crate::PodConfig::join_area_bytes) 0), so a new
    /// host could not rebuild its replica: in such a pod every host must join before the
    /// log first wraps around (with a join area, a live host streams a late joiner its
    /// index). Also the answer of
    /// [`Inspect::read_log`](crate::inspect::Inspect::read_log) for positions below the
    /// log's head.
    #[error("the log has recycled its entries below position {head}: they cannot be read, and in a pod without a join area no host can join any more")]
    LogRecycled {
        /// Where the log's head is.
        head: u64,
    },

    // ---- the log ----
    /// The log stayed full past the wait limit: one host has not applied old entries.
    #[error("the log is full ({capacity_entries} entries, tail at {tail}): {}; waited {waited_ms} ms", laggard_text(*lagging_host, *lagging_alive, *lagging_position))]
    LogFull {
        /// The host whose applied position holds the head back (`None`: no host's did
        /// at the last look, its holder having left or replayed meanwhile, and the head
        /// was at `lagging_position`).
        lagging_host: Option<HostId>,
        /// Whether it lives (`None`: it runs on another machine, where only its lease can
        /// tell).
        lagging_alive: Option<bool>,
        /// Its applied position.
        lagging_position: u64,
        /// The log's tail.
        tail: u64,
        /// The log's capacity.
        capacity_entries: u64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The log has used every position it can count: 2^52 of them (the `head` word
    /// shares its bits with a count of joins), 14 years of appends at ten million a
    /// second. The pod must be created anew.
    #[error("the log has used its {positions} positions (tail at {tail}): create the pod anew")]
    LogExhausted {
        /// The log's tail.
        tail: u64,
        /// The most positions a log has.
        positions: u64,
    },
    /// Host `host` did not answer an RPC within the wait limit (it stopped serving, or
    /// is stuck): the object it holds in its DRAM could not be brought back. The request
    /// was withdrawn unless the host had taken it already, in which case it may yet take
    /// effect.
    #[error("host {host} did not answer within {waited_ms} ms")]
    HostUnresponsive {
        /// The host asked.
        host: u32,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The index says host `host` holds the object in its DRAM, and it does not (or not
    /// the current bytes): a move whose log append failed after its entry was written (a
    /// stalled log).
    #[error("the index says host {host} holds the object in its DRAM, but it does not")]
    LocalObjectMissing {
        /// This host.
        host: u32,
    },
    /// An object in host `host`'s DRAM stayed busy past the wait limit: a local write in
    /// progress (or a move back to CXL) did not end.
    #[error("an object in host {host}'s DRAM stayed busy for {waited_ms} ms")]
    LocalObjectBusy {
        /// The host whose DRAM holds the object.
        host: u32,
        /// How long we waited.
        waited_ms: u64,
    },
    /// Host `host` could not move an object in its DRAM back to CXL (its log append
    /// failed); the object stays where it is.
    #[error("host {host} could not move the object back to CXL: {cause}")]
    MoveBackFailed {
        /// The host that holds the object.
        host: u32,
        /// Why, as the holder said: "the log is full" (try again once the log has room),
        /// "a replay stalled on an unpublished entry", or "another error".
        cause: &'static str,
    },
    /// A log entry below the completed tail is not published: its writer stopped midway.
    /// A call that answers this after its own entry reached the log (an append waiting
    /// for its outcome behind the unpublished one) may still take effect: its entry
    /// applies when replay gets past the hole (a dead writer's is filled by its
    /// recovery), so read again to know.
    #[error("log entry {position} is not published after {waited_ms} ms, though the log says it is complete")]
    ReplayStalled {
        /// The entry's position.
        position: u64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// A log entry holds something no writer writes.
    #[error("log entry {position} is corrupt: {what}")]
    CorruptLogEntry {
        /// The entry's position.
        position: u64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The thread combining this request panicked while appending it: whether it took
    /// effect is unknown.
    #[error("the thread combining this request panicked; whether it took effect is unknown")]
    CombinerPanicked,
    /// A task of the host's pump panicked. In its background reclaimer (most likely in
    /// the release hook it calls, `task` "reclaimer"): what the task held was let go (the
    /// record unlocked), and the pump goes on. Anywhere else (`task` "pump"): the pump
    /// stopped and the host left as a dead one does, for the others to recover once its
    /// lease runs out. Seen in [`crate::inspect::BackgroundErrors`].
    #[error("the pump's {task} panicked: {message}")]
    BackgroundPanicked {
        /// The task.
        task: &'static str,
        /// The panic's message, if it was a string.
        message: String,
    },
    /// A recovery of a dead host stopped before it was done, for `cause` (a full log, an
    /// append refused, this host found dead itself, ...). The pump's watch begins it
    /// again a quarter lease later (or another host's does); until it is done the dead
    /// host's row stays taken and what it held stays held. Seen in
    /// [`crate::inspect::BackgroundErrors`].
    #[error("the recovery of host {host} (life {life}) stopped: {cause}")]
    RecoveryStopped {
        /// The dead host.
        host: HostId,
        /// Its life (how many times its id had been joined).
        life: u64,
        /// Why it stopped.
        cause: Box<Error>,
    },
    /// A fault injected by schedule chaos (builds with the `chaos` feature only): a log
    /// append refused before anything was reserved, or left unconfirmed after its entries
    /// were published (they take effect when replay reaches them).
    #[error("injected fault: {fault}")]
    InjectedFault {
        /// Which fault.
        fault: &'static str,
    },
    /// A thread's request waited for a combiner past the wait limit and was withdrawn
    /// (nothing of it reached the log). When the log is full at that moment the request
    /// answers [`Error::LogFull`] instead: the combiner was waiting for room.
    #[error("no combiner served the request within {waited_ms} ms; it was withdrawn")]
    CombinerStalled {
        /// How long we waited.
        waited_ms: u64,
    },

    // ---- objects ----
    /// A read or write under a ticket reaches past the object's end.
    #[error("bytes {at}..{end} are outside the object of {object_bytes} bytes", end = .at.saturating_add(*.len))]
    OutsideObject {
        /// Where the range starts.
        at: usize,
        /// Its length.
        len: usize,
        /// The object's size (the slot size).
        object_bytes: usize,
    },
    /// The key is longer than the pod's maximum.
    #[error("key of {key_bytes} bytes is longer than the pod's maximum of {max_key_bytes}")]
    KeyTooLarge {
        /// The key's length.
        key_bytes: usize,
        /// The pod's `max_key_bytes`.
        max_key_bytes: u32,
    },
    /// The value does not fit in a slot.
    #[error("value of {value_bytes} bytes does not fit in a {slot_size_bytes}-byte slot")]
    ValueTooLarge {
        /// The value's length.
        value_bytes: usize,
        /// The pod's `slot_size_bytes`.
        slot_size_bytes: u64,
    },
    /// A word named for a create's position is not an 8-aligned word of the application
    /// SCR ([`Host::create_noting_position`](crate::Host::create_noting_position)).
    #[error("offset {offset} is not an 8-aligned word of the application SCR")]
    OutsideApplicationScr {
        /// The offset given.
        offset: u64,
    },
    /// Create found the key already there.
    #[error("an object with this key exists")]
    ObjectExists,
    /// No object has the key.
    #[error("no object has this key")]
    UnknownKey,
    /// Every coherence record is in use and none could be reclaimed within the bound.
    #[error(
        "all {records} coherence records are in use ({in_use} counted) and none could be reclaimed"
    )]
    ScrRecordsExhausted {
        /// Records in the pod.
        records: u64,
        /// Records counted in use.
        in_use: u64,
    },
    /// The host's release hook refused to let an object lose its record (the page cache:
    /// a dirty page could not be written back), so the delete did not happen.
    #[error("the release hook refused to release record {record}; nothing was deleted")]
    ReleaseRefused {
        /// The record the object keeps.
        record: u32,
    },
    /// A record stayed locked (or its deallocation unapplied) past the wait limit.
    #[error("record {record} stayed busy for {waited_ms} ms{}", holder_text(*holder, *holder_alive))]
    RecordBusy {
        /// The record.
        record: u32,
        /// How long we waited.
        waited_ms: u64,
        /// The host that announced the lock, if known (pods with undo images).
        holder: Option<HostId>,
        /// Whether that host lives (`None`: only its lease can tell, or no holder known).
        holder_alive: Option<bool>,
    },
    /// A switch of the record width
    /// ([`Host::switch_record_width`](crate::Host::switch_record_width)) kept the records
    /// frozen past the wait limit, or (for the switch itself) another switch is under way
    /// or the records did not drain within it.
    #[error("a switch of the record width kept the records frozen for {waited_ms} ms")]
    RecordWidthSwitching {
        /// How long we waited.
        waited_ms: u64,
    },
    /// An object's replicated lock (in a pod with [`Coherence::AllLog`](crate::Coherence))
    /// stayed held past the wait limit.
    #[error("the object stayed locked by host {holder} for {waited_ms} ms")]
    ObjectLocked {
        /// The host holding the lock when we gave up.
        holder: u32,
        /// How long we waited.
        waited_ms: u64,
    },
    /// A read kept being invalidated by writes and events past the host's retry bound.
    #[error("gave up after {retries} retries")]
    RetriesExhausted {
        /// The bound ([`crate::HostOptions::max_retries`]).
        retries: u32,
    },
    /// The pod has unclaimed slots, but each slot this host claimed for the create was
    /// taken first by another of its threads (their own creates) until the wait limit ran
    /// out: the pod is busy, not full, and a later try finds a slot
    /// ([`Error::SlotsExhausted`] is the full pod's answer).
    #[error("host {host}'s other threads took each slot it claimed first, for {waited_ms} ms; the pod has unclaimed slots: try again")]
    SlotsContended {
        /// The host that claimed.
        host: u32,
        /// How long it claimed.
        waited_ms: u64,
    },
    /// No free slot could be found or granted within the wait limit.
    #[error("host {host} has no free slot and none was granted (the pod has {slot_count} slots)")]
    SlotsExhausted {
        /// The host that asked.
        host: u32,
        /// The pod's slots.
        slot_count: u64,
    },
}

impl Error {
    /// The variant's name (`"CorruptLogEntry"`), for harnesses that count errors by kind.
    pub fn kind_name(&self) -> String {
        if let Error::RecoveryStopped { cause, .. } = self {
            return format!("RecoveryStopped({})", cause.kind_name());
        }
        let debug = format!("{self:?}");
        debug
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// ", locked by host H (alive)" and the like, or nothing when no holder is known.
fn holder_text(holder: Option<HostId>, alive: Option<bool>) -> String {
    match holder {
        Some(host) => format!(", locked by host {host}{}", alive_text(alive)),
        None => String::new(),
    }
}

/// " (alive)", " (its process is gone: recovery is due)", or nothing when unknown.
/// Why a join was not served: [`Error::JoinNotServed`]'s `cause`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinNotServedCause {
    /// It joined after the log recycled, and no live host sent it the index (a late join
    /// needs a live host whose pump runs), or the hosts that began to send it kept
    /// stopping until the wait ran out, or a rescue found every holder dead but one was
    /// only paused and moved the log's head meanwhile (a retry is served once it recovered
    /// the row).
    NoServer,
    /// Every holder of the host table is dead and the log has recycled: nobody holds the
    /// index any more.
    NoHolder,
    /// It took a dead host's row over and could not finish that host's recovery within
    /// the wait (another recovery held what it waited for); the row is left to the next
    /// joiner's rescue.
    RescueUnfinished,
}

impl fmt::Display for JoinNotServedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinNotServedCause::NoServer => {
                "no live host sent it the index (a late join needs a live host with a pump)"
            }
            JoinNotServedCause::NoHolder => {
                "every host of the pod is dead and the log has recycled: nobody holds the index"
            }
            JoinNotServedCause::RescueUnfinished => {
                "it took a dead host's row over and could not finish its recovery (another recovery held what it waited for)"
            }
        })
    }
}

/// What [`Error::LogFull`] says of the host holding the log's head back.
fn laggard_text(host: Option<HostId>, alive: Option<bool>, position: u64) -> String {
    match host {
        Some(host) => format!(
            "host {host}{} has applied only up to {position}",
            alive_text(alive)
        ),
        None => format!("no host held its head back at the last look (the head at {position})"),
    }
}

fn alive_text(alive: Option<bool>) -> &'static str {
    match alive {
        Some(true) => " (alive)",
        Some(false) => " (its process is gone: recovery is due)",
        None => "",
    }
}
