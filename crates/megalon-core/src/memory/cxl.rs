//! The CXL cost model: this machine's memory, plus a calibrated spin for what the
//! far-memory traffic of each access would cost on a CXL pod.
//!
//! [`CxlMemory`] does exactly what [`HardwareMemory`] does (the same loads, stores and
//! cache-maintenance instructions, on the same mapping) and, before the call's own
//! instructions, makes the calling thread spin for what the call would add on CXL
//! memory. A stalled core does no other work, so a spin is the honest way to pay it: the
//! time is taken from the thread's own core, as a stall would. A spin waits on the clock
//! ([`spin_ns`]), whose cost is measured once per process ([`spin_rate`]).
//!
//! What is charged (the defaults and where they come from are in `docs/memory.md`):
//!
//! - **An LNR line read that would miss**: a line this host does not hold valid in the
//!   model's cache (never read by it, flushed since it last read it, or pushed out by
//!   another line). A store to such a line fills it first (a read for ownership) and is
//!   charged the same. Lines this host holds valid cost nothing.
//! - **A write-back**: a dirty line pushed to memory by a flush, a `clwb` or a
//!   non-temporal store (which writes every line it covers).
//! - **An SCR access that would miss**: SCR words are not reached through this interface
//!   (they are direct atomics on the pod), so the protocol's own count of them
//!   (`Counter::ScrAtomics`, at the sites that access records) charges them, on the
//!   thread that counted them. Where the count gives the word's address
//!   ([`charge_scr_at`]: megalon's record words, HCMeta's index and records), it is a
//!   miss only if this host does not hold the word's line: the SCR is coherent, so a
//!   host keeps a line it loaded until another host writes it, and a line it wrote
//!   until another host touches it. A directory of the pod's SCR lines (one per pod)
//!   says which hosts hold each ([`CxlModel::scr_cache`]). Counts without an address
//!   (the log's cursor when it moved, the RPC ring, undo announces) pay every access
//!   ([`charge_scr`]).
//!
//! The lines of one call are charged in rounds: [`CxlModel::lines_in_flight`] misses (or
//! write-backs) overlap, so a call that misses `n` lines costs `ceil(n / lines_in_flight)`
//! latencies, not `n`.
//!
//! **How misses are known.** The hardware's caches cannot be asked what they hold, so each
//! host keeps a model of its cache: a direct-mapped table of line tags (the line's index
//! and a dirty bit) of [`CxlModel::cache_bytes`] / 64 entries, indexed by the line's
//! address like a real cache's sets. A read or store of a line whose tag is there is a
//! hit; any other is a miss that puts the tag there (pushing out whatever line had its
//! entry). A flush or a non-temporal store removes the tag; a write-back clears the dirty
//! bit. The threads of a host share the table with relaxed word accesses: two threads
//! racing on one entry may lose an update, which makes the model's cache a little wrong,
//! never the pod's data (the table holds no data).
//!
//! **What it leaves out** (also in `docs/memory.md`): bandwidth limits and queueing at the
//! device (every charge is a latency, however many threads miss at once); SCR accesses
//! nobody charges (the host table, heartbeats, recovery's looks at the log's `tail`; the
//! log's cursors are charged apart from the protocol's counts, [`charge_cursor_at`],
//! and a join's claim of its row is charged to nobody, [`uncharged`]); hosts in other
//! processes in the pod's SCR directory (a pod across processes takes `scr_cache=0`); what a
//! miss on an SCR line another host holds dirty costs over one nobody holds (both pay
//! [`CxlModel::scr_ns`]); write-backs of dirty lines pushed out by other lines (the
//! hardware does them in the background); and what this machine's own DRAM already costs
//! (a flushed line is a real local miss here too, paid on top).
//!
//! **Which thread pays for an SCR access.** A counted SCR access has no memory handle, so
//! each call on a `CxlMemory` binds the calling thread to that memory's SCR cost, each
//! call on hardware or simulated memory (through [`super::Memory`]) binds it to nothing,
//! and [`charge_scr`] charges the thread's binding; each operation of a host binds its
//! thread first (`Memory::bind_scr`), so that a thread working for several hosts in turn
//! charges each access to the host that made it (HCMeta's operations bind too: its
//! Local workers reading their own partitions never touch LNR). A thread bound to
//! nothing yet pays every SCR access at the cost of the `CxlMemory` made last in the
//! process, while one lives. A thread that works for hosts of both kinds in turn pays by
//! the kind it touched last. The binding holds the directory of the bound memory's pod
//! (an `Arc`: it outlives nothing it points at), so a bound thread's SCR lines go to its
//! host's pod; an unbound thread's go to the directory of the live pod whose SCR holds
//! the word, with no host's bit.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::HardwareMemory;
use crate::limits::LINE_BYTES;
use crate::pod::Pod;
use crate::sync::{AtomicU64, Ordering};

/// The latencies a CXL pod would add, in nanoseconds, and the model's cache. Every field
/// can be set (`CxlModel { scr_ns: 600, ..CxlModel::default() }`, or
/// `cxl:scr_ns=600` on a command line, see [`CxlModel::parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CxlModel {
    /// One round of LNR line misses: the latency of a load from CXL memory.
    pub lnr_miss_ns: u64,
    /// One round of LNR write-backs: a flushed dirty line reaching CXL memory (the fence
    /// after it waits for it).
    pub write_back_ns: u64,
    /// One SCR access counted by the protocol (a load, store or CAS of a record word).
    pub scr_ns: u64,
    /// Misses (or write-backs) of one call that overlap in one round: the core's
    /// outstanding line requests.
    pub lines_in_flight: u64,
    /// Size of each host's modeled cache of LNR lines (rounded down to a power of two
    /// lines, at least one line).
    pub cache_bytes: u64,
    /// 1 (the default): a counted SCR access to a line this host holds in its coherent
    /// cache is free (a load of a line no other host wrote since this host last touched
    /// it; a store or CAS of a line no other host holds), as on real hardware; the
    /// model keeps the pod's SCR lines in a directory of which hosts hold each (one per
    /// pod, up to 64 hosts with a bit in it at once). 0: every counted SCR access pays
    /// [`scr_ns`](Self::scr_ns), as the model did before. The directory is in this
    /// process: hosts in other processes are not in it, so a pod whose hosts run in
    /// several processes takes 0 (`kv_cluster` sets it).
    pub scr_cache: u64,
}

impl Default for CxlModel {
    /// The numbers `docs/memory.md` cites: 259 ns for a CXL load and write-back (the
    /// CXL 1.1 device of the Tigon paper's testbed, Intel MLC, 3:1 reads to writes), the
    /// same for an SCR access, 10 lines in flight, a 32 MiB cache per host, SCR lines
    /// held in it.
    fn default() -> Self {
        Self {
            lnr_miss_ns: 259,
            write_back_ns: 259,
            scr_ns: 259,
            lines_in_flight: 10,
            cache_bytes: 32 << 20,
            scr_cache: 1,
        }
    }
}

/// The largest [`CxlModel::cache_bytes`] [`CxlModel::parse`] takes.
pub const MAX_CACHE_BYTES: u64 = 4 << 30;

/// The largest latency (`lnr_miss_ns`, `write_back_ns`, `scr_ns`) [`CxlModel::parse`]
/// takes: 1 ms, thousands of times a CXL load. A charge is rounds times a latency, in
/// picoseconds in an `i64` ([`spin_ns`]): a latency near `u64::MAX` overflowed it.
pub const MAX_LATENCY_NS: u64 = 1_000_000;

/// The parameter names [`CxlModel::parse`] reads, in the order [`CxlModel`]'s `Display`
/// writes them.
pub const CXL_PARAMETERS: [&str; 6] = [
    "lnr_miss_ns",
    "write_back_ns",
    "scr_ns",
    "lines_in_flight",
    "cache_bytes",
    "scr_cache",
];

/// A CXL model's parameters that do not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cxl model parameter {given:?}: {why} (parameters: lnr_miss_ns, write_back_ns, scr_ns, lines_in_flight, cache_bytes, scr_cache)")]
pub struct BadCxlParameter {
    /// The `name=value` given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl CxlModel {
    fn fields(&self) -> [u64; 6] {
        [
            self.lnr_miss_ns,
            self.write_back_ns,
            self.scr_ns,
            self.lines_in_flight,
            self.cache_bytes,
            self.scr_cache,
        ]
    }

    fn field_mut(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "lnr_miss_ns" => &mut self.lnr_miss_ns,
            "write_back_ns" => &mut self.write_back_ns,
            "scr_ns" => &mut self.scr_ns,
            "lines_in_flight" => &mut self.lines_in_flight,
            "cache_bytes" => &mut self.cache_bytes,
            "scr_cache" => &mut self.scr_cache,
            _ => return None,
        })
    }

    /// The defaults with the `name=value` pairs of `parameters` (comma-separated; empty:
    /// the defaults) applied, e.g. `scr_ns=600,lines_in_flight=1`.
    pub fn parse(parameters: &str) -> Result<CxlModel, BadCxlParameter> {
        let mut model = CxlModel::default();
        for pair in parameters.split(',').filter(|p| !p.is_empty()) {
            let bad = |why| BadCxlParameter {
                given: pair.to_owned(),
                why,
            };
            let (name, value) = pair.split_once('=').ok_or_else(|| bad("not name=value"))?;
            let field = model
                .field_mut(name.trim())
                .ok_or_else(|| bad("unknown name"))?;
            *field = value
                .trim()
                .parse()
                .map_err(|_| bad("not a whole number"))?;
        }
        if model.lines_in_flight == 0 {
            return Err(BadCxlParameter {
                given: "lines_in_flight=0".into(),
                why: "at least one line is in flight",
            });
        }
        for (name, ns) in [
            ("lnr_miss_ns", model.lnr_miss_ns),
            ("write_back_ns", model.write_back_ns),
            ("scr_ns", model.scr_ns),
        ] {
            if ns > MAX_LATENCY_NS {
                return Err(BadCxlParameter {
                    given: format!("{name}={ns}"),
                    why: "a modeled latency is at most 1 ms (1000000 ns)",
                });
            }
        }
        if model.scr_cache > 1 {
            return Err(BadCxlParameter {
                given: format!("scr_cache={}", model.scr_cache),
                why: "1 (SCR lines held in the cache) or 0 (every SCR access a miss)",
            });
        }
        if model.cache_bytes > MAX_CACHE_BYTES {
            return Err(BadCxlParameter {
                given: format!("cache_bytes={}", model.cache_bytes),
                why: "a modeled cache is at most 4 GiB (its tags take an eighth of it)",
            });
        }
        Ok(model)
    }

    /// What `charges` cost under this model: its rounds of misses and of write-backs and
    /// its SCR accesses (the log's cursors' too), each times its latency (the model's own
    /// prediction, in ns).
    pub fn predicted_ns(&self, charges: &CxlCharges) -> u64 {
        charges.miss_rounds * self.lnr_miss_ns
            + charges.write_back_rounds * self.write_back_ns
            + (charges.scr_accesses + charges.cursor_accesses) * self.scr_ns
    }

    fn rounds(&self, lines: u64) -> u64 {
        lines.div_ceil(self.lines_in_flight.max(1))
    }
}

impl std::fmt::Display for CxlModel {
    /// The parameters that differ from the defaults, as [`CxlModel::parse`] reads them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let defaults = CxlModel::default().fields();
        let mut first = true;
        for ((name, value), default) in CXL_PARAMETERS.iter().zip(self.fields()).zip(defaults) {
            if value != default {
                write!(f, "{}{name}={value}", if first { "" } else { "," })?;
                first = false;
            }
        }
        Ok(())
    }
}

/// What the model charged the calling thread since it started: counts and nanoseconds.
/// Take two snapshots and subtract them for one stretch of work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CxlCharges {
    /// LNR lines read (or filled for a store) that missed the model's cache.
    pub lines_missed: u64,
    /// Rounds those misses were charged in (one per call, per `lines_in_flight` lines).
    pub miss_rounds: u64,
    /// Dirty LNR lines written back (flush, `clwb`) or written by non-temporal stores.
    pub lines_written_back: u64,
    /// Rounds those write-backs were charged in.
    pub write_back_rounds: u64,
    /// SCR accesses charged (counted by the protocol, see [`charge_scr`]): those that
    /// missed the model's SCR directory ([`CxlModel::scr_cache`]).
    pub scr_accesses: u64,
    /// Counted SCR accesses that hit: lines this host held, not charged.
    pub scr_hits: u64,
    /// Accesses to the log's cursors in SCR (`tail`, `head`, `ctail`, the `ltail`s) that
    /// missed the model's SCR directory, charged as `scr_accesses` are
    /// ([`charge_cursor_at`]). The protocol does not count them: they are the log's.
    pub cursor_accesses: u64,
    /// Accesses to the log's cursors that hit, not charged.
    pub cursor_hits: u64,
    /// Nanoseconds of spin asked for (the sum of rounds and accesses times their costs).
    pub charged_ns: u64,
    /// Nanoseconds the spins took, as their own clock reads saw them (with the reads'
    /// own time): `charged_ns` give or take the carry of [`spin_ns`].
    pub spun_ns: u64,
}

impl CxlCharges {
    /// The calling thread's charges so far.
    pub fn this_thread() -> CxlCharges {
        CxlCharges {
            spun_ns: SPUN_PS.with(Cell::get) / 1000,
            ..CHARGES.with(Cell::get)
        }
    }
}

impl std::ops::Sub for CxlCharges {
    type Output = CxlCharges;
    fn sub(self, earlier: CxlCharges) -> CxlCharges {
        CxlCharges {
            lines_missed: self.lines_missed - earlier.lines_missed,
            miss_rounds: self.miss_rounds - earlier.miss_rounds,
            lines_written_back: self.lines_written_back - earlier.lines_written_back,
            write_back_rounds: self.write_back_rounds - earlier.write_back_rounds,
            scr_accesses: self.scr_accesses - earlier.scr_accesses,
            scr_hits: self.scr_hits - earlier.scr_hits,
            cursor_accesses: self.cursor_accesses - earlier.cursor_accesses,
            cursor_hits: self.cursor_hits - earlier.cursor_hits,
            charged_ns: self.charged_ns - earlier.charged_ns,
            spun_ns: self.spun_ns - earlier.spun_ns,
        }
    }
}

impl std::ops::Add for CxlCharges {
    type Output = CxlCharges;
    fn add(self, other: CxlCharges) -> CxlCharges {
        CxlCharges {
            lines_missed: self.lines_missed + other.lines_missed,
            miss_rounds: self.miss_rounds + other.miss_rounds,
            lines_written_back: self.lines_written_back + other.lines_written_back,
            write_back_rounds: self.write_back_rounds + other.write_back_rounds,
            scr_accesses: self.scr_accesses + other.scr_accesses,
            scr_hits: self.scr_hits + other.scr_hits,
            cursor_accesses: self.cursor_accesses + other.cursor_accesses,
            cursor_hits: self.cursor_hits + other.cursor_hits,
            charged_ns: self.charged_ns + other.charged_ns,
            spun_ns: self.spun_ns + other.spun_ns,
        }
    }
}

thread_local! {
    /// What the model charged this thread.
    static CHARGES: Cell<CxlCharges> = const { Cell::new(CxlCharges {
        lines_missed: 0,
        miss_rounds: 0,
        lines_written_back: 0,
        write_back_rounds: 0,
        scr_accesses: 0,
        scr_hits: 0,
        cursor_accesses: 0,
        cursor_hits: 0,
        charged_ns: 0,
        spun_ns: 0,
    }) };
    /// The SCR cost of the `CxlMemory` this thread last used, that memory's id, and its
    /// bit in its pod's SCR directory (0: none); id 0: not bound; id [`NOT_CXL`]: the
    /// thread last used another kind of memory.
    static SCR_BINDING: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
    /// The SCR directory of the pod of the `CxlMemory` this thread is bound to (none: its
    /// pod has none, or the thread is not bound to a `CxlMemory`), set with
    /// [`SCR_BINDING`]. An `Arc`: the directory lives as long as a thread bound to it,
    /// whatever is dropped meanwhile. Looked at only under the model, out of line.
    static SCR_LINES: std::cell::RefCell<Option<Arc<ScrDirectory>>> =
        const { std::cell::RefCell::new(None) };
    /// Picoseconds this thread's spins still owe (negative: spun ahead), see [`spin_ns`].
    static OWED_PS: Cell<i64> = const { Cell::new(0) };
    /// Picoseconds this thread's spins took (see [`CxlCharges::spun_ns`]).
    static SPUN_PS: Cell<u64> = const { Cell::new(0) };
}

/// The binding of a thread that last used hardware or simulated memory.
const NOT_CXL: u64 = u64::MAX;

/// How many `CxlMemory` values live in the process, and the SCR cost of the one made last:
/// what a thread that never touched LNR is charged.
static LIVE: std::sync::Mutex<(u64, u64)> = std::sync::Mutex::new((0, 0));
/// `LIVE`'s SCR cost while any lives, else 0 (read without the lock).
static UNBOUND_SCR_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a `CxlMemory` made (`Some(its SCR cost)`) or dropped (`None`).
fn count_live(made: Option<u64>) {
    let mut live = LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match made {
        Some(scr_ns) => *live = (live.0 + 1, scr_ns),
        None => live.0 -= 1,
    }
    let unbound = if live.0 > 0 { live.1 } else { 0 };
    // Relaxed: the cost is a parameter, not data; a thread that reads the old one while
    // memories are made or dropped charges one access at the old cost.
    UNBOUND_SCR_NS.store(unbound, std::sync::atomic::Ordering::Relaxed);
}

/// Marks the calling thread as working on memory that is not under the model, so that its
/// SCR accesses are not charged. `Memory` calls it on its hardware and simulated paths.
#[inline]
pub(crate) fn bind_not_cxl() {
    SCR_BINDING.with(|b| {
        if b.get().1 != NOT_CXL {
            b.set((0, NOT_CXL, 0));
        }
    });
}

/// Runs `work` with the calling thread's SCR accesses charged to nobody, and leaves its
/// binding as it found it: for work done for no host's operation, or before the host
/// has a memory (a join's claim of its row and its hold on the log's head, which ran at
/// the cost of whatever host the thread last worked for, or of none, and charged a
/// hardware host's join when some CXL memory lived in the process), and for a look by a
/// test. What it changes in SCR reaches no host's directory bits either: a joiner's
/// first raise of its `ltail` after its claim pays a miss its coherent cache would not.
pub fn uncharged<R>(work: impl FnOnce() -> R) -> R {
    struct Restore((u64, u64, u64), Option<Arc<ScrDirectory>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCR_BINDING.with(|b| b.set(self.0));
            SCR_LINES.with_borrow_mut(|lines| *lines = self.1.take());
        }
    }
    let _restore = Restore(
        SCR_BINDING.with(Cell::get),
        SCR_LINES.with_borrow_mut(Option::take),
    );
    bind_not_cxl();
    work()
}

/// Charges the calling thread `accesses` SCR accesses at the cost of the CXL memory it
/// last used; nothing if it last used hardware or simulated memory; and if it has used no
/// memory yet (a thread whose work never reaches LNR, such as HCMeta-Local's reads of its
/// own partition), the cost of the CXL memory made last in the process, if one lives.
/// Every one is charged as a miss: the protocol's counts of SCR words whose addresses it
/// does not give ([`charge_scr_at`] for those it does).
#[inline]
pub fn charge_scr(accesses: u64) {
    let (scr_ns, _) = scr_cost(SCR_BINDING.with(Cell::get));
    if scr_ns == 0 {
        return;
    }
    pay_scr(accesses, scr_ns, ScrWord::Counted);
}

/// What an SCR access costs a thread of this binding, and its host's directory bit: the
/// bound memory's cost; an unbound thread's, the memory made last (no bit); nothing on
/// other memories.
#[inline]
fn scr_cost((bound_ns, id, bit): (u64, u64, u64)) -> (u64, u64) {
    match id {
        0 => (UNBOUND_SCR_NS.load(std::sync::atomic::Ordering::Relaxed), 0),
        NOT_CXL => (0, 0),
        _ => (bound_ns, bit),
    }
}

fn pay_scr(accesses: u64, scr_ns: u64, word: ScrWord) {
    let ns = accesses * scr_ns;
    CHARGES.with(|c| {
        let mut charges = c.get();
        match word {
            ScrWord::Counted => charges.scr_accesses += accesses,
            ScrWord::Cursor => charges.cursor_accesses += accesses,
        }
        charges.charged_ns += ns;
        c.set(charges);
    });
    spin_ns(ns);
}

/// Whose SCR word an access is to, for which of [`CxlCharges`]' counts it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScrWord {
    /// One the protocol counts (a record word, HCMeta's bucket and entry words).
    Counted,
    /// A log cursor.
    Cursor,
}

/// What an SCR access asks of its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrAccess {
    /// A load: free if this host holds the line (it loaded or wrote it, and no other host
    /// wrote it since).
    Load,
    /// A store, a CAS (one that fails too: the core takes the line exclusive for it) or
    /// another read-modify-write: free only if no other host holds the line.
    Update,
}

/// Charges the calling thread one SCR access to the word at the address `word` gives (a
/// pointer into the pod's SCR, as an integer; asked only under the model), by the
/// model's directory of SCR lines: a miss pays as [`charge_scr`] does, a hit nothing
/// (counted in [`CxlCharges::scr_hits`]). Under a model with [`CxlModel::scr_cache`] 0,
/// or on a thread not bound to a `CxlMemory`, every access is a miss.
#[inline]
pub fn charge_scr_at(word: impl FnOnce() -> usize, access: ScrAccess) {
    charge_word_at(word, access, ScrWord::Counted);
}

/// Charges the calling thread one access to the log cursor `word` (in the pod's SCR), as
/// [`charge_scr_at`] charges a counted word, in [`CxlCharges::cursor_accesses`] or
/// [`CxlCharges::cursor_hits`]. The protocol counts no cursor access: an append's CAS on
/// `tail` and a replay's raise of `ctail` and of its `ltail` are the log's, not an
/// object's.
#[inline]
pub fn charge_cursor_at(word: &std::sync::atomic::AtomicU64, access: ScrAccess) {
    charge_word_at(|| word.as_ptr() as usize, access, ScrWord::Cursor);
}

/// Charges the calling thread a tail check's load of `ctail` (the log cursor `word`),
/// which `moved` past what its host's replica covers. With the model's SCR lines, by the
/// line, as [`charge_cursor_at`] charges a load: a miss whenever another host's replay
/// raised `ctail` since this host last touched the line (a raise is a locked
/// read-modify-write: it takes the line whether or not it moves the position), which
/// need not be when the position moved past this replica. Without them
/// ([`CxlModel::scr_cache`] 0, or a host without a bit), only a load that found it
/// `moved` pays, as a counted access (as it did before the line was looked at: a load
/// of an unchanged line is a hit, and that model cannot tell).
#[inline]
pub fn charge_tail_check(word: &std::sync::atomic::AtomicU64, moved: bool) {
    let binding = SCR_BINDING.with(Cell::get);
    if binding.1 == NOT_CXL {
        return;
    }
    // A host with a bit has a directory: its pod's, which its binding holds.
    let by_line = scr_cost(binding).1 != 0;
    if by_line || moved {
        let kind = if by_line {
            ScrWord::Cursor
        } else {
            ScrWord::Counted
        };
        charge_scr_line(binding, word.as_ptr() as usize, ScrAccess::Load, kind);
    }
}

/// [`charge_scr_at`] and [`charge_cursor_at`]: the address is asked for only on a thread
/// that may be under the model.
#[inline]
fn charge_word_at(word: impl FnOnce() -> usize, access: ScrAccess, kind: ScrWord) {
    let binding = SCR_BINDING.with(Cell::get);
    if binding.1 != NOT_CXL {
        charge_scr_line(binding, word(), access, kind);
    }
}

/// [`charge_word_at`] on a thread that may be under the model: out of line, so that the
/// paths that call it on other memories carry one compare of it.
#[inline(never)]
fn charge_scr_line(binding: (u64, u64, u64), word: usize, access: ScrAccess, kind: ScrWord) {
    let (scr_ns, bit) = scr_cost(binding);
    if scr_ns == 0 {
        return;
    }
    let line = word as u64 / LINE_BYTES;
    let hit = in_directory(binding.1, bit, line, |directory, bit| {
        if bit == 0 {
            // A thread with no bit (unbound, or its host past the 64 bits of its pod)
            // holds nothing, but its store or CAS still takes the line from every host
            // that did, as `note_scr_update` does on such a thread: HCMeta's writes reach
            // the directory only through their counts.
            if access == ScrAccess::Update {
                directory.take(line, 0);
            }
            false
        } else {
            directory.access(line, bit, access)
        }
    });
    if hit == Some(true) {
        CHARGES.with(|c| {
            let mut charges = c.get();
            match kind {
                ScrWord::Counted => charges.scr_hits += 1,
                ScrWord::Cursor => charges.cursor_hits += 1,
            }
            c.set(charges);
        });
        return;
    }
    pay_scr(1, scr_ns, kind);
}

/// Runs `f` on the directory of `line`'s pod with the bit the calling thread's host has
/// in it: for a thread bound (`id`) to a `CxlMemory`, its binding's directory and `bit`,
/// if the line is in that pod's SCR; for an unbound thread (`id` 0), the directory of the
/// live pod whose SCR holds the line, with no bit (a look under a lock, while some
/// directory lives). `None`: no directory to look in (a bound host's pod has none, or
/// the line is not in its SCR; or no live pod's SCR holds the line).
fn in_directory<R>(
    id: u64,
    bit: u64,
    line: u64,
    f: impl FnOnce(&ScrDirectory, u64) -> R,
) -> Option<R> {
    if id != 0 {
        // `try_with`: a thread whose locals are torn down has no directory.
        return SCR_LINES
            .try_with(|lines| match &*lines.borrow() {
                Some(directory) if directory.covers(line) => Some(f(directory, bit)),
                _ => None,
            })
            .ok()
            .flatten();
    }
    ScrDirectory::covering(line).map(|directory| f(&directory, 0))
}

/// Notes a store or CAS of the SCR word at the address `word` gives, which no counter
/// may charge (a record freed by replay or recovery, say): the writing host now holds
/// the line alone, so every other host's next access to it misses. Free; nothing on a
/// thread bound to other memory. (On an unbound thread, no host holds it after.)
#[inline]
pub fn note_scr_update(word: impl FnOnce() -> usize) {
    let (_, id, bit) = SCR_BINDING.with(Cell::get);
    if id != NOT_CXL {
        note_scr_line(id, word(), bit);
    }
}

#[inline(never)]
fn note_scr_line(id: u64, word: usize, bit: u64) {
    let line = word as u64 / LINE_BYTES;
    in_directory(id, bit, line, |directory, bit| directory.take(line, bit));
}

/// The model's SCR lines of one pod: for each (direct-mapped by line address, as the LNR
/// table is), the line it holds (its index + 1; 0: none) and the bits of the hosts that
/// hold it in their coherent caches, one bit per live `CxlMemory` on the pod whose model
/// keeps SCR lines ([`CxlModel::scr_cache`]). One per pod, made with the first such
/// memory on it ([`ScrDirectory::of_pod`]) and kept while a memory on it, or a thread
/// bound to one ([`SCR_LINES`]), holds it: pods in one process (tests running side by
/// side, the model check's pods) neither push out each other's lines nor share bits.
///
/// It has an entry for each line of the pod's SCR (rounded up to a power of two), up to
/// [`MAX_SCR_DIRECTORY_ENTRIES`] (32 MiB of SCR lines), beside each host's modeled LNR
/// cache, not inside it: an SCR past 32 MiB (HCMeta's index at the paper's sizes) misses
/// on conflicts here, one under it never does, and never competes with LNR lines for
/// room. A line pushed out by another line of its entry leaves every host's cache at once
/// (a real host keeps its own lines). Relaxed accesses: two threads racing on an entry
/// may lose an update, which makes the model a little wrong, never the pod's data.
struct ScrDirectory {
    /// The pod whose SCR this is: which directory a new memory on a pod takes, and
    /// whether the pod still lives when an unbound thread looks for a line's directory.
    pod: std::sync::Weak<Pod>,
    /// The pod's SCR, as line numbers in this process (address / 64).
    scr_lines: std::ops::Range<u64>,
    lines: Box<[std::sync::atomic::AtomicU64]>,
    holders: Box<[std::sync::atomic::AtomicU64]>,
    /// The bits of the pod's live `CxlMemory` values that keep SCR lines (one per host;
    /// the 65th live at once on the pod gets none and misses every access).
    bits: std::sync::atomic::AtomicU64,
}

/// The most entries an SCR directory has: 32 MiB of SCR lines.
const MAX_SCR_DIRECTORY_ENTRIES: u64 = 1 << 19;

/// The directories of the pods of this process that have one, for [`ScrDirectory::of_pod`]
/// and [`ScrDirectory::covering`]. Weak: a directory goes with the last memory and thread
/// binding that hold it; dead entries are swept when one is added.
static SCR_DIRECTORIES: std::sync::Mutex<Vec<std::sync::Weak<ScrDirectory>>> =
    std::sync::Mutex::new(Vec::new());

/// How many directories live: an unbound thread's access looks for its line's directory
/// (under [`SCR_DIRECTORIES`]' lock) only while one does.
static LIVE_SCR_DIRECTORIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ScrDirectory {
    fn directories() -> std::sync::MutexGuard<'static, Vec<std::sync::Weak<ScrDirectory>>> {
        SCR_DIRECTORIES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `pod`'s directory, made if it has none and `make`.
    fn of_pod(pod: &Arc<Pod>, make: bool) -> Option<Arc<ScrDirectory>> {
        let mut directories = Self::directories();
        let found = directories.iter().find_map(|d| {
            d.upgrade()
                .filter(|d| std::ptr::eq(d.pod.as_ptr(), Arc::as_ptr(pod)))
        });
        if found.is_some() || !make {
            return found;
        }
        let layout = pod.layout();
        let first = pod.address_of(layout.scr_offset) as u64 / LINE_BYTES;
        let end = (pod.address_of(layout.lnr_offset) as u64).div_ceil(LINE_BYTES);
        let entries = (end - first)
            .next_power_of_two()
            .min(MAX_SCR_DIRECTORY_ENTRIES) as usize;
        let zeroed = || {
            (0..entries)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect()
        };
        let directory = Arc::new(ScrDirectory {
            pod: Arc::downgrade(pod),
            scr_lines: first..end,
            lines: zeroed(),
            holders: zeroed(),
            bits: std::sync::atomic::AtomicU64::new(0),
        });
        LIVE_SCR_DIRECTORIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        directories.retain(|d| d.strong_count() > 0);
        directories.push(Arc::downgrade(&directory));
        Some(directory)
    }

    /// The directory of the live pod whose SCR holds `line`, if it has one: for an access
    /// by a thread bound to no memory, which has no directory of its own. (Live pods'
    /// mappings do not overlap; a directory a thread still holds for a dropped pod is
    /// passed over, its addresses may be another pod's now.)
    #[cold]
    fn covering(line: u64) -> Option<Arc<ScrDirectory>> {
        if LIVE_SCR_DIRECTORIES.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        Self::directories().iter().find_map(|d| {
            d.upgrade()
                .filter(|d| d.covers(line) && d.pod.strong_count() > 0)
        })
    }

    /// Whether `line` is in this directory's pod's SCR.
    fn covers(&self, line: u64) -> bool {
        self.scr_lines.contains(&line)
    }

    fn entry(&self, line: u64) -> usize {
        line as usize & (self.lines.len() - 1)
    }

    /// An access by the host of `bit` to `line`: whether it hit. After it, the host holds
    /// the line (alone, for an update).
    fn access(&self, line: u64, bit: u64, access: ScrAccess) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let i = self.entry(line);
        if self.lines[i].load(Relaxed) != line + 1 {
            self.lines[i].store(line + 1, Relaxed);
            self.holders[i].store(bit, Relaxed);
            return false;
        }
        let holders = self.holders[i].load(Relaxed);
        match access {
            ScrAccess::Load if holders & bit != 0 => true,
            ScrAccess::Load => {
                self.holders[i].fetch_or(bit, Relaxed);
                false
            }
            ScrAccess::Update if holders == bit => true,
            ScrAccess::Update => {
                self.holders[i].store(bit, Relaxed);
                false
            }
        }
    }

    /// The host of `bit` (0: none) holds `line` alone.
    fn take(&self, line: u64, bit: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let i = self.entry(line);
        if self.lines[i].load(Relaxed) != line + 1 {
            self.lines[i].store(line + 1, Relaxed);
        }
        self.holders[i].store(bit, Relaxed);
    }

    /// A host's bit, for a new `CxlMemory` on this pod; 0 if all 64 are taken.
    fn take_bit(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let mut taken = self.bits.load(Relaxed);
        loop {
            let free = !taken;
            if free == 0 {
                return 0;
            }
            let bit = free & free.wrapping_neg();
            match self
                .bits
                .compare_exchange(taken, taken | bit, Relaxed, Relaxed)
            {
                Ok(_) => return bit,
                Err(now) => taken = now,
            }
        }
    }

    /// Gives a dropped memory's bit back, first taking it out of every line: the next
    /// memory to get it holds nothing.
    fn give_back(&self, bit: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        for holders in &self.holders[..] {
            if holders.load(Relaxed) & bit != 0 {
                holders.fetch_and(!bit, Relaxed);
            }
        }
        self.bits.fetch_and(!bit, Relaxed);
    }
}

impl Drop for ScrDirectory {
    fn drop(&mut self) {
        LIVE_SCR_DIRECTORIES.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How the spin keeps time on this machine, measured once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinRate {
    /// Picoseconds of one read of the clock: the part of a spin its own clock reads do
    /// not see (before the first read returns, after the last), counted as spun.
    pub clock_read_ps: u64,
}

/// The clock's cost on this machine, measured on first use: the fastest of several
/// batches of clock reads (a batch another thread interrupted only looks slower).
pub fn spin_rate() -> SpinRate {
    static RATE: OnceLock<SpinRate> = OnceLock::new();
    *RATE.get_or_init(|| {
        const READS: u64 = 4096;
        let clock_read_ps = (0..9)
            .map(|_| {
                let began = Instant::now();
                for _ in 0..READS {
                    std::hint::black_box(Instant::now());
                }
                began.elapsed().as_nanos() as u64 * 1000 / READS
            })
            .min()
            .expect("nine batches");
        SpinRate { clock_read_ps }
    })
}

/// Busy-waits until `ps` picoseconds after the call began, on the monotonic clock (a
/// read of the time-stamp counter through the vDSO where the kernel's clock source is
/// the TSC); returns the picoseconds it waited, as its clock saw them. A wall-clock
/// deadline, not a count of iterations: a stall lasts as long however fast the core runs
/// other work (a busy sibling hyperthread slows a loop, not a stall). No `spin_loop`
/// hint: in a virtual machine a run of `pause` instructions can make the hypervisor
/// deschedule the virtual CPU.
#[inline(never)]
fn spin_for(ps: u64) -> u64 {
    let began = Instant::now();
    loop {
        let waited_ps = began.elapsed().as_nanos() as u64 * 1000;
        if waited_ps >= ps {
            return waited_ps;
        }
    }
}

/// Spins the calling thread for `ns` nanoseconds of its core's time, give or take one
/// read of the clock. What a spin waits beyond what it owes (the clock read that ends it
/// comes after the deadline; up to four reads' worth) is deducted from the thread's next
/// spin, and what it falls short is added, so the thread's spins add up to what it was
/// charged. A charge shorter than the two clock reads a spin takes is owed, not spun,
/// until the thread's debts add up to one.
#[inline]
pub fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let clock_read_ps = spin_rate().clock_read_ps as i64;
    OWED_PS.with(|owed| {
        let due = owed.get() + ns as i64 * 1000;
        // The clock reads' own time (one before the wait starts, one after it ends) is
        // spent too, but the wait does not see it.
        let wait_ps = due - 2 * clock_read_ps;
        if wait_ps <= 0 {
            owed.set(due);
            return;
        }
        let spent_ps = spin_for(wait_ps as u64) as i64 + 2 * clock_read_ps;
        SPUN_PS.with(|spun| spun.set(spun.get() + spent_ps as u64));
        // A wait that ran far past its deadline was descheduled: the time it was away is
        // not the core's, so it is not carried over (at most a few clock reads are).
        owed.set((due - spent_ps).max(-4 * clock_read_ps));
    });
}

/// Ids of `CxlMemory` values, for the SCR binding.
static NEXT_MEMORY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A host's access to LNR under the CXL cost model: [`HardwareMemory`] plus the charges.
pub struct CxlMemory {
    hardware: HardwareMemory,
    model: CxlModel,
    id: u64,
    /// The model's cache: per set, 0 (empty) or `(line + 1) << 1 | dirty`.
    tags: Box<[AtomicU64]>,
    set_mask: u64,
    /// This host's bit in its pod's SCR directory; 0: none (the model keeps no SCR lines,
    /// or 64 hosts of the pod had them all).
    scr_bit: u64,
    /// The pod's SCR directory: made with this memory if its model keeps SCR lines and
    /// the pod has none yet; else the one the pod has, if any (a memory whose model keeps
    /// none still takes lines with its stores). What a thread bound to this memory holds.
    scr_directory: Option<Arc<ScrDirectory>>,
}

impl std::fmt::Debug for CxlMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CxlMemory")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// How a line stands in the model's cache.
enum Tag {
    Absent,
    Clean,
    Dirty,
}

const DIRTY: u64 = 1;

fn tag_of(line: u64) -> u64 {
    (line + 1) << 1
}

impl CxlMemory {
    /// Access to `pod`'s LNR under `model`; measures the spin rate if this process has
    /// not yet.
    pub fn new(pod: Arc<Pod>, model: CxlModel) -> Self {
        spin_rate();
        // No larger than the LNR rounded up to a power of two (every line has a set of its
        // own then: the sets are a power of two, rounded down below), nor than the
        // parser's limit, for a model made by hand: the tags are this host's DRAM.
        let lnr_bytes = pod.layout().total_bytes - pod.layout().lnr_offset;
        let cache_bytes = model
            .cache_bytes
            .min(lnr_bytes.next_power_of_two())
            .min(MAX_CACHE_BYTES);
        let sets = (cache_bytes / LINE_BYTES).max(1);
        let sets = 1u64 << (63 - sets.leading_zeros());
        count_live(Some(model.scr_ns));
        let scr_directory = ScrDirectory::of_pod(&pod, model.scr_cache != 0);
        let scr_bit = match &scr_directory {
            Some(directory) if model.scr_cache != 0 => directory.take_bit(),
            _ => 0,
        };
        Self {
            hardware: HardwareMemory::new(pod),
            model,
            id: NEXT_MEMORY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            tags: (0..sets).map(|_| AtomicU64::new(0)).collect(),
            set_mask: sets - 1,
            scr_bit,
            scr_directory,
        }
    }

    /// The model's parameters.
    pub fn model(&self) -> &CxlModel {
        &self.model
    }

    fn set(&self, line: u64) -> &AtomicU64 {
        &self.tags[(line & self.set_mask) as usize]
    }

    fn state(&self, line: u64) -> Tag {
        // Relaxed: the table is the model's guess of a cache, not data (module doc).
        Self::state_in(self.set(line).load(Ordering::Relaxed), line)
    }

    /// How `line` stands, given the tag of its set.
    fn state_in(tag: u64, line: u64) -> Tag {
        if tag & !DIRTY != tag_of(line) {
            Tag::Absent
        } else if tag & DIRTY != 0 {
            Tag::Dirty
        } else {
            Tag::Clean
        }
    }

    fn lines(offset: u64, len: usize) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        offset / LINE_BYTES..(offset + len as u64).div_ceil(LINE_BYTES)
    }

    /// Binds the calling thread's SCR charges to this memory (each call on it does; a
    /// thread that reaches SCR before LNR calls this first, see
    /// [`super::Memory::bind_scr`]).
    #[inline]
    pub fn bind(&self) {
        if SCR_BINDING.with(|b| b.get().1 != self.id) {
            self.rebind();
        }
    }

    /// [`bind`](Self::bind) on a thread bound to another memory, or to none: out of line,
    /// so that a call on a memory the thread is bound to carries one compare. The
    /// directory is the pod's: a thread that moves between hosts of one pod keeps it
    /// (no count of references changes).
    #[inline(never)]
    fn rebind(&self) {
        SCR_BINDING.with(|b| b.set((self.model.scr_ns, self.id, self.scr_bit)));
        let _ = SCR_LINES.try_with(|lines| {
            let mut lines = lines.borrow_mut();
            let same = match (&*lines, &self.scr_directory) {
                (Some(held), Some(ours)) => Arc::ptr_eq(held, ours),
                (held, ours) => held.is_none() && ours.is_none(),
            };
            if !same {
                *lines = self.scr_directory.clone();
            }
        });
    }

    /// Counts and pays `missed` misses and `written_back` write-backs of one call. Called
    /// before the call's own instructions, so that the spin does not overlap them (a spin
    /// after a flush would hide the flush's real latency, which the fence after it waits
    /// for).
    fn charge(&self, missed: u64, written_back: u64) {
        if missed == 0 && written_back == 0 {
            return;
        }
        let miss_rounds = self.model.rounds(missed);
        let write_back_rounds = self.model.rounds(written_back);
        let ns =
            miss_rounds * self.model.lnr_miss_ns + write_back_rounds * self.model.write_back_ns;
        CHARGES.with(|c| {
            let mut charges = c.get();
            charges.lines_missed += missed;
            charges.miss_rounds += miss_rounds;
            charges.lines_written_back += written_back;
            charges.write_back_rounds += write_back_rounds;
            charges.charged_ns += ns;
            c.set(charges);
        });
        spin_ns(ns);
    }

    /// Brings the lines of a read (or, `dirty`, a store) into the model's cache; returns
    /// how many missed.
    fn touch(&self, offset: u64, len: usize, dirty: bool) -> u64 {
        self.bind();
        let mut missed = 0;
        for line in Self::lines(offset, len) {
            let set = self.set(line);
            let tag = set.load(Ordering::Relaxed);
            let state = Self::state_in(tag, line);
            missed += u64::from(matches!(state, Tag::Absent));
            let want = tag_of(line) | u64::from(dirty || matches!(state, Tag::Dirty));
            if tag != want {
                set.store(want, Ordering::Relaxed);
            }
        }
        missed
    }

    /// Takes the lines of a range out of the model's cache (`drop`) or marks them clean;
    /// returns how many were dirty.
    fn push(&self, offset: u64, len: usize, drop: bool) -> u64 {
        self.bind();
        let mut dirty = 0;
        for line in Self::lines(offset, len) {
            let set = self.set(line);
            match Self::state_in(set.load(Ordering::Relaxed), line) {
                Tag::Absent => continue,
                Tag::Dirty => dirty += 1,
                Tag::Clean if !drop => continue,
                Tag::Clean => {}
            }
            set.store(if drop { 0 } else { tag_of(line) }, Ordering::Relaxed);
        }
        dirty
    }

    /// See [`super::Memory::read`].
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        let missed = self.touch(offset, buf.len(), false);
        self.charge(missed, 0);
        self.hardware.read(offset, buf);
    }

    /// See [`super::Memory::prefetch`]: the lines are asked for at once, so the misses
    /// among them are charged here as one call's, in rounds of `lines_in_flight`, and the
    /// reads that copy them next find them held. (A line prefetched and then not read is
    /// charged as read: the callers prefetch what they are about to copy.)
    #[inline]
    pub(crate) fn prefetch(&self, offset: u64, len: usize) {
        let missed = self.touch(offset, len, false);
        self.charge(missed, 0);
        self.hardware.prefetch(offset, len);
    }

    /// See [`super::Memory::write`].
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) {
        let missed = self.touch(offset, data.len(), true);
        self.charge(missed, 0);
        self.hardware.write(offset, data);
    }

    /// See [`super::Memory::load_u64`].
    #[inline]
    pub fn load_u64(&self, offset: u64) -> u64 {
        let missed = self.touch(offset, 8, false);
        self.charge(missed, 0);
        self.hardware.load_u64(offset)
    }

    /// See [`super::Memory::store_u64`].
    #[inline]
    pub fn store_u64(&self, offset: u64, value: u64) {
        let missed = self.touch(offset, 8, true);
        self.charge(missed, 0);
        self.hardware.store_u64(offset, value);
    }

    /// See [`super::Memory::flush`].
    #[inline]
    pub fn flush(&self, offset: u64, len: usize) {
        let dirty = self.push(offset, len, true);
        self.charge(0, dirty);
        self.hardware.flush(offset, len);
    }

    /// See [`super::Memory::write_back`].
    #[inline]
    pub fn write_back(&self, offset: u64, len: usize) {
        let dirty = self.push(offset, len, false);
        self.charge(0, dirty);
        self.hardware.write_back(offset, len);
    }

    /// See [`super::Memory::write_non_temporal`]: every line of it goes to memory.
    #[inline]
    pub fn write_non_temporal(&self, offset: u64, data: &[u8]) {
        self.push(offset, data.len(), true);
        self.charge(0, Self::lines(offset, data.len()).count() as u64);
        self.hardware.write_non_temporal(offset, data);
    }

    /// See [`super::Memory::fence`]. Free in the model: the write-backs it waits for were
    /// charged when they were issued.
    #[inline]
    pub fn fence(&self) {
        self.hardware.fence()
    }

    /// Whether the model's cache holds the line of `offset` (dirty or clean).
    pub fn is_cached(&self, offset: u64) -> bool {
        !matches!(self.state(offset / LINE_BYTES), Tag::Absent)
    }
}

impl Drop for CxlMemory {
    /// Unbinds the dropping thread if this memory was its binding.
    fn drop(&mut self) {
        count_live(None);
        // `try_with`: a memory dropped while its thread's locals are torn down has nothing
        // to unbind.
        let _ = SCR_BINDING.try_with(|b| {
            if b.get().1 == self.id {
                b.set((0, 0, 0));
                let _ = SCR_LINES.try_with(|lines| lines.borrow_mut().take());
            }
        });
        if let Some(directory) = &self.scr_directory {
            if self.scr_bit != 0 {
                directory.give_back(self.scr_bit);
            }
        }
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use crate::{Backing, MemoryKind, PodConfig};

    fn memory(model: CxlModel) -> (Arc<Pod>, CxlMemory) {
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).expect("a pod"));
        let memory = CxlMemory::new(Arc::clone(&pod), model);
        (pod, memory)
    }

    fn charged(f: impl FnOnce()) -> CxlCharges {
        let before = CxlCharges::this_thread();
        f();
        CxlCharges::this_thread() - before
    }

    /// Misses (1) and hits (0) of counted SCR accesses by `host` to the words given, on a
    /// fresh thread bound to it.
    fn misses_on(host: &CxlMemory, accesses: &[(usize, ScrAccess)]) -> Vec<u64> {
        std::thread::scope(|s| {
            s.spawn(|| {
                host.bind();
                accesses
                    .iter()
                    .map(|&(at, access)| charged(|| charge_scr_at(|| at, access)).scr_accesses)
                    .collect()
            })
            .join()
            .expect("the thread")
        })
    }

    #[test]
    fn charges_shorter_than_a_clock_read_add_up_to_their_spin() {
        // 2,000 charges of 5 ns: each shorter than the two clock reads a spin takes, so
        // they are owed until they add up, then spun: 10 us in all, less at most the two
        // reads still owed at the end. (Only a floor: a spin the scheduler interrupts
        // runs long, and that is not carried over.)
        let began = Instant::now();
        let before = CxlCharges::this_thread();
        for _ in 0..2_000 {
            spin_ns(5);
        }
        let spun = (CxlCharges::this_thread() - before).spun_ns;
        let took = began.elapsed().as_nanos() as u64;
        let owed = 2 * spin_rate().clock_read_ps / 1000 + 1;
        assert!(
            spun + owed >= 10_000,
            "spun {spun} ns for 10,000 ns charged"
        );
        assert!(
            took + owed >= 10_000,
            "took {took} ns for 10,000 ns charged"
        );
    }

    #[test]
    fn a_line_misses_once_until_it_is_flushed() {
        let (pod, memory) = memory(CxlModel::default());
        let at = pod.layout().slot_offset(0);
        let mut buf = [0u8; 1024];
        let first = charged(|| memory.read(at, &mut buf));
        assert_eq!((first.lines_missed, first.miss_rounds), (16, 2));
        assert_eq!(first.charged_ns, 2 * 259);
        assert_eq!(charged(|| memory.read(at, &mut buf)), CxlCharges::default());
        let flushed = charged(|| memory.flush(at, 1024));
        assert_eq!(
            flushed.lines_written_back, 0,
            "clean lines cost nothing to drop"
        );
        assert_eq!(charged(|| memory.read(at, &mut buf)).lines_missed, 16);
    }

    #[test]
    fn dirty_lines_are_written_back_once() {
        let (pod, memory) = memory(CxlModel {
            lines_in_flight: 1,
            ..CxlModel::default()
        });
        let at = pod.layout().slot_offset(1);
        let write = charged(|| memory.write(at, &[7u8; 128]));
        assert_eq!((write.lines_missed, write.miss_rounds), (2, 2));
        let back = charged(|| memory.write_back(at, 128));
        assert_eq!((back.lines_written_back, back.write_back_rounds), (2, 2));
        assert_eq!(
            charged(|| memory.write_back(at, 128)),
            CxlCharges::default()
        );
        assert!(memory.is_cached(at), "clwb keeps the line");
        let nt = charged(|| memory.write_non_temporal(at, &[1u8; 64]));
        assert_eq!(nt.lines_written_back, 1);
        assert!(!memory.is_cached(at), "a non-temporal store drops the line");
    }

    #[test]
    fn scr_accesses_are_charged_by_the_threads_binding() {
        let (pod, memory) = memory(CxlModel {
            scr_ns: 100,
            ..CxlModel::default()
        });
        let at = pod.layout().slot_offset(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                bind_not_cxl();
                assert_eq!(
                    charged(|| charge_scr(3)),
                    CxlCharges::default(),
                    "on hardware"
                );
                memory.load_u64(at);
                let scr = charged(|| charge_scr(3));
                assert_eq!((scr.scr_accesses, scr.charged_ns), (3, 300));
            });
            s.spawn(|| {
                // Unbound: the cost of the CXL memory made last (another test's may be
                // made meanwhile, with the default cost).
                let scr = charged(|| charge_scr(1));
                assert_eq!(scr.scr_accesses, 1, "a thread that never touched LNR pays");
            });
        });
    }

    #[test]
    fn parameters_parse_and_print() {
        assert_eq!(CxlModel::parse(""), Ok(CxlModel::default()));
        assert_eq!(CxlModel::default().to_string(), "");
        let model = CxlModel::parse("scr_ns=600, lines_in_flight=1").expect("parses");
        assert_eq!((model.scr_ns, model.lines_in_flight), (600, 1));
        assert_eq!(model.to_string(), "scr_ns=600,lines_in_flight=1");
        assert_eq!(CxlModel::parse(&model.to_string()), Ok(model));
        assert_eq!(CxlModel::parse("scr=1").unwrap_err().why, "unknown name");
        assert!(CxlModel::parse("lines_in_flight=0").is_err());
        assert!(CxlModel::parse("scr_ns=-1").is_err());
        // A cache of 2^64 - 1 bytes parsed, then its tags aborted the process.
        assert!(CxlModel::parse(&format!("cache_bytes={}", u64::MAX)).is_err());
        assert!(CxlModel::parse(&format!("cache_bytes={MAX_CACHE_BYTES}")).is_ok());
        // A latency of 2^64 - 1 ns parsed, then its first charge overflowed (a panic in
        // the pump of a debug build).
        for name in ["lnr_miss_ns", "write_back_ns", "scr_ns"] {
            let refused = CxlModel::parse(&format!("{name}={}", u64::MAX)).unwrap_err();
            assert_eq!(refused.given, format!("{name}={}", u64::MAX));
            assert!(CxlModel::parse(&format!("{name}={MAX_LATENCY_NS}")).is_ok());
        }
    }

    /// A model made by hand with a huge cache: its tags are bounded by the LNR, and every
    /// line of the LNR keeps a set of its own (a first bound, the LNR rounded down, took
    /// an LNR of 20 MiB to 16 MiB of sets: lines that never conflicted missed).
    #[test]
    fn a_cache_larger_than_the_lnr_takes_no_more_than_it() {
        let config = PodConfig::new().lnr_bytes(20 << 20);
        for cache_bytes in [u64::MAX, CxlModel::default().cache_bytes] {
            let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("a pod"));
            let lnr_lines = (pod.layout().total_bytes - pod.layout().lnr_offset) / LINE_BYTES;
            let model = CxlModel {
                cache_bytes,
                ..CxlModel::default()
            };
            let memory = CxlMemory::new(pod, model);
            let sets = memory.tags.len() as u64;
            assert!(sets >= lnr_lines && sets < 2 * lnr_lines, "{sets} sets");
        }
    }

    /// `work` on hosts a and b of a fresh pod whose hosts are under `model` (no pumps),
    /// on a fresh thread: no binding left by another test.
    fn on_two_hosts<R: Send>(
        model: CxlModel,
        work: impl FnOnce(&crate::Host, &crate::Host) -> R + Send,
    ) -> R {
        use crate::{Host, HostOptions, Join};
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).expect("a pod"));
        let options = || {
            HostOptions::new()
                .memory(MemoryKind::Cxl(model))
                .pump_interval(None)
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let a = Host::join(&pod, Join::AnyFree, options()).expect("host a");
                let b = Host::join(&pod, Join::AnyFree, options()).expect("host b");
                work(&a, &b)
            })
            .join()
            .expect("the thread")
        })
    }

    /// What a write and two reads from another host are charged, under `model`.
    fn a_write_and_two_reads(model: CxlModel) -> (CxlCharges, CxlCharges, CxlCharges) {
        on_two_hosts(model, |a, b| {
            a.create(b"key", &[1u8; 256]).expect("create");
            a.write(b"key", &[2u8; 256]).expect("a write");
            let mut buf = [0u8; 256];
            b.read(b"key", &mut buf).expect("b's first read");
            let write = charged(|| {
                a.write(b"key", &[3u8; 256]).expect("a write");
            });
            let read = charged(|| {
                b.read(b"key", &mut buf).expect("a read after a write");
            });
            let again = charged(|| {
                b.read(b"key", &mut buf)
                    .expect("a read of an unchanged object");
            });
            (write, read, again)
        })
    }

    #[test]
    fn a_host_pays_for_its_record_and_its_object() {
        let every_access_misses = CxlModel {
            scr_cache: 0,
            ..CxlModel::default()
        };
        let (write, read, again) = a_write_and_two_reads(every_access_misses);
        assert!(
            write.scr_accesses >= 2 && write.scr_hits == 0,
            "a write locks and unlocks: {write:?}"
        );
        assert_eq!(write.lines_written_back, 4, "{write:?}");
        assert_eq!(
            read.lines_missed, 4,
            "a reader refetches what was written: {read:?}"
        );
        assert!(read.scr_accesses >= 2, "{read:?}");
        assert_eq!(again.lines_missed, 0, "valid lines are free: {again:?}");
        assert!(again.scr_accesses >= 2, "{again:?}");
        assert_eq!(again.charged_ns, again.scr_accesses * 259);
    }

    /// A read of a prefix (`Host::read_prefix`, every read of the KV store and of the
    /// figures) prefetches the object's lines before it copies its first line, then
    /// copies the rest: on CXL hardware all its misses are in flight at once, so a read
    /// of a 1 KiB object another host wrote waits `ceil(16 / lines_in_flight)` rounds,
    /// as one read of all its lines. (The model ignored the prefetch and charged the
    /// first line's round, then the rest's: three rounds, not two.)
    #[test]
    fn a_prefetched_read_waits_for_its_lines_in_one_go() {
        let read = on_two_hosts(CxlModel::default(), |a, b| {
            a.create(b"key", &[1u8; 1024]).expect("create");
            a.write(b"key", &[2u8; 1024]).expect("a write");
            let mut buf = [0u8; 1024];
            let whole = |_: &[u8]| 1024;
            b.read_prefix(b"key", &mut buf, &whole)
                .expect("b's first read");
            a.write(b"key", &[3u8; 1024]).expect("a write");
            charged(|| {
                b.read_prefix(b"key", &mut buf, &whole)
                    .expect("a read after a write");
                assert_eq!(buf, [3u8; 1024]);
            })
        });
        assert_eq!(read.lines_missed, 16, "{read:?}");
        assert_eq!(read.miss_rounds, 2, "16 lines, 10 in flight: {read:?}");
    }

    /// A read's tail check loads `ctail`, whose line every replay takes (its raise is a
    /// `fetch_max`, a locked read-modify-write, whether or not it moves the value): a
    /// host whose `ctail` line another host's replay took since misses on it, even when
    /// its own replica already covers the position. Host a creates an object (and
    /// replays it, raising `ctail`) and reads it; b reads it, catching up and raising `ctail` too;
    /// a's next read of the read-shared object (no record: the tail checks are its only
    /// SCR accesses) misses once on `ctail`, then holds it. (The model charged the
    /// load only when it found the position moved past the replica: a's read was free.)
    #[test]
    fn a_tail_check_pays_for_a_ctail_line_another_host_took() {
        let [first, again] = on_two_hosts(CxlModel::default(), |a, b| {
            a.create(b"key", &[1u8; 64]).expect("create");
            let mut buf = [0u8; 64];
            a.read(b"key", &mut buf)
                .expect("a's read: its line in a's cache");
            b.read(b"key", &mut buf).expect("b's read");
            let mut read = || {
                charged(|| {
                    a.read(b"key", &mut buf).expect("a's read");
                })
            };
            [read(), read()]
        });
        let misses = |c: &CxlCharges| c.scr_accesses + c.cursor_accesses;
        assert_eq!(misses(&first), 1, "b's replay took the line: {first:?}");
        assert_eq!(misses(&again), 0, "a holds it now: {again:?}");
        assert_eq!(first.charged_ns, CxlModel::default().scr_ns, "{first:?}");
    }

    /// What three creates cost in the log's cursors, under `model`: one by host a after
    /// one by host b, another by a, then one by b (each appends, and replays what it
    /// appended).
    fn three_appends(model: CxlModel) -> [CxlCharges; 3] {
        on_two_hosts(model, |a, b| {
            a.create(b"a0", &[1u8; 64]).expect("a create");
            b.create(b"b0", &[1u8; 64]).expect("b create");
            let after_b = charged(|| a.create(b"a1", &[1u8; 64]).expect("a create"));
            let again = charged(|| a.create(b"a2", &[1u8; 64]).expect("a create"));
            let b_next = charged(|| b.create(b"b1", &[1u8; 64]).expect("b create"));
            [after_b, again, b_next]
        })
    }

    /// An append's cursors (`tail`'s load and CAS, `head`, and its replay's raise of
    /// `ctail` and its `ltail`) are charged by line: a host that appended last holds them
    /// all and pays nothing for its next append; one after another host's pays for the
    /// lines that host took (`tail` twice, for its load and its CAS, and `ctail`). Without
    /// the model's SCR lines, every one is a miss. They are the log's: none is counted in
    /// `scr_accesses`. Exact counts: an access charged twice, or one left out, fails.
    #[test]
    fn an_append_pays_for_the_logs_cursors() {
        let held = three_appends(CxlModel::default());
        let every_access_misses = CxlModel {
            scr_cache: 0,
            ..CxlModel::default()
        };
        let missed = three_appends(every_access_misses);
        let [after_b, again, b_next] = held;
        let misses_of = |c: &CxlCharges| (c.cursor_accesses, c.cursor_accesses + c.cursor_hits);
        assert_eq!(
            misses_of(&again),
            (0, 7),
            "a's second append in a row: {again:?}"
        );
        assert_eq!(misses_of(&after_b), (3, 9), "after b's: {after_b:?}");
        assert_eq!(misses_of(&b_next), (3, 9), "b after a's: {b_next:?}");
        for charges in &missed {
            assert_eq!(
                every_access_misses.predicted_ns(charges),
                charges.charged_ns,
                "the model's prediction counts the cursors: {charges:?}"
            );
        }
        for (held, missed) in held.iter().zip(&missed) {
            let accesses = held.cursor_accesses + held.cursor_hits;
            assert_eq!((missed.cursor_accesses, missed.cursor_hits), (accesses, 0));
            assert_eq!((held.scr_accesses, missed.scr_accesses), (0, 0));
            assert_eq!(
                missed.charged_ns - held.charged_ns,
                held.cursor_hits * CxlModel::default().scr_ns,
                "each cursor access costs an SCR miss: {held:?} {missed:?}"
            );
        }
    }

    /// A host on other memory is charged nothing, its join included, while a `CxlMemory`
    /// lives in the process: a join claims its row and holds the log's head before the
    /// host has a memory, and those cursor accesses were charged at the cost of the CXL
    /// memory made last (a review's find).
    #[test]
    fn a_hardware_hosts_join_is_charged_nothing() {
        use crate::{Host, HostOptions, Join};
        let (_cxl_pod, _cxl) = memory(CxlModel::default());
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).expect("a pod"));
        let options = HostOptions::new()
            .memory(MemoryKind::Hardware)
            .pump_interval(None);
        let join = std::thread::scope(|s| {
            s.spawn(|| {
                charged(|| {
                    let host = Host::join(&pod, Join::AnyFree, options).expect("a host");
                    host.create(b"k", &[1u8; 64]).expect("a create");
                })
            })
            .join()
            .expect("the thread")
        });
        assert_eq!(join, CxlCharges::default(), "a hardware host was charged");
    }

    /// With the model's SCR lines (the default), a record word's line costs what it
    /// would on a coherent cache: the writer's look at the record hits (it and the reader
    /// share the line), its lock misses (the reader's copy must go), its unlock hits; the reader's first load after the write misses, its second
    /// (`read_end`'s) hits; a read of an unchanged object pays nothing at all.
    #[test]
    fn a_record_line_a_host_holds_is_free() {
        let (write, read, again) = a_write_and_two_reads(CxlModel::default());
        assert_eq!((write.scr_accesses, write.scr_hits), (1, 2), "{write:?}");
        assert_eq!(write.lines_written_back, 4, "{write:?}");
        assert_eq!((read.scr_accesses, read.scr_hits), (1, 1), "{read:?}");
        assert_eq!(read.lines_missed, 4, "{read:?}");
        assert_eq!((again.scr_accesses, again.scr_hits), (0, 2), "{again:?}");
        assert_eq!(again.charged_ns, 0, "{again:?}");
    }

    /// A counted store or CAS by a thread without a bit (one not bound to a host yet, or
    /// bound to a host that got none: past 64, or a model without SCR lines) pays, and
    /// takes the line from the hosts that held it, as an uncounted store does
    /// (`note_scr_update`). HCMeta's writes reach the directory only through their
    /// counts: left out, its readers hit a line another host had written.
    #[test]
    fn a_counted_update_without_a_bit_takes_the_line() {
        let (pod, a) = memory(CxlModel::default());
        let bitless = CxlMemory::new(
            Arc::clone(&pod),
            CxlModel {
                scr_cache: 0,
                ..CxlModel::default()
            },
        );
        let word = pod.address_of(pod.layout().scr_offset);
        let misses = |bind: &(dyn Fn() + Sync), access: ScrAccess| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    bind();
                    charged(|| charge_scr_at(|| word, access)).scr_accesses
                })
                .join()
                .expect("the thread")
            })
        };
        let on_a = || a.bind();
        assert_eq!(misses(&on_a, ScrAccess::Load), 1);
        assert_eq!(misses(&on_a, ScrAccess::Load), 0, "a holds it");
        assert_eq!(misses(&|| {}, ScrAccess::Update), 1, "an unbound thread");
        assert_eq!(
            misses(&on_a, ScrAccess::Load),
            1,
            "the unbound thread wrote it"
        );
        assert_eq!(misses(&on_a, ScrAccess::Load), 0);
        assert_eq!(misses(&|| bitless.bind(), ScrAccess::Update), 1);
        assert_eq!(
            misses(&on_a, ScrAccess::Load),
            1,
            "a host without a bit wrote it"
        );
    }

    /// The directory of SCR lines by itself: a load hits a line this host holds, a store
    /// or CAS only a line it holds alone; a store no counter charges still takes the
    /// line; a dropped host's lines are not its successor's.
    #[test]
    fn scr_lines_are_held_until_another_host_takes_them() {
        let (pod, a) = memory(CxlModel::default());
        let b = CxlMemory::new(Arc::clone(&pod), CxlModel::default());
        let word = pod.address_of(pod.layout().scr_offset);
        let neighbour = word + 8;
        let (load, update) = (ScrAccess::Load, ScrAccess::Update);
        let on = misses_on;
        assert_eq!(on(&a, &[(word, load), (neighbour, load)]), [1, 0]);
        assert_eq!(
            on(&b, &[(word, load), (word, update)]),
            [1, 1],
            "a holds it too"
        );
        assert_eq!(on(&b, &[(neighbour, update), (word, load)]), [0, 0]);
        assert_eq!(on(&a, &[(word, load), (word, load)]), [1, 0], "b wrote it");
        assert_eq!(on(&a, &[(word, update), (word, update)]), [1, 0]);
        std::thread::scope(|s| {
            s.spawn(|| {
                b.bind();
                note_scr_update(|| word);
            });
        });
        assert_eq!(
            on(&a, &[(word, load), (word, load)]),
            [1, 0],
            "b's store, though not charged, took the line"
        );
        drop(a);
        let c = CxlMemory::new(Arc::clone(&pod), CxlModel::default());
        assert_eq!(on(&c, &[(word, load)]), [1], "a's line is not c's");
        let every_access_misses = CxlMemory::new(
            Arc::clone(&pod),
            CxlModel {
                scr_cache: 0,
                ..CxlModel::default()
            },
        );
        assert_eq!(
            on(&every_access_misses, &[(word, load), (word, load)]),
            [1, 1]
        );
    }

    /// Each pod has its own directory: a line of one pod in the entry a line of another
    /// pod would take in a directory of 2^19 entries (the process-wide one's, indexed by
    /// the line's address) does not push the other out. (With one directory for the
    /// process, b's update of its line pushed out a's, and a's next load missed: tests
    /// running side by side could see an extra miss.)
    #[test]
    fn a_pods_scr_lines_are_not_another_pods() {
        let (pod_a, a) = memory(CxlModel::default());
        // An SCR of more than 2^19 lines has a line in every entry of such a directory.
        let entries = MAX_SCR_DIRECTORY_ENTRIES;
        let config = PodConfig::new().scr_bytes(entries * LINE_BYTES + (1 << 20));
        let pod_b = Arc::new(Pod::create(&config, Backing::heap()).expect("a pod"));
        let b = CxlMemory::new(Arc::clone(&pod_b), CxlModel::default());
        let word_a = pod_a.address_of(pod_a.layout().scr_offset);
        let line_a = word_a as u64 / LINE_BYTES;
        let scr_b = pod_b.address_of(pod_b.layout().scr_offset) as u64 / LINE_BYTES;
        let line_b = scr_b + (line_a.wrapping_sub(scr_b) & (entries - 1));
        assert!(line_b < pod_b.address_of(pod_b.layout().lnr_offset) as u64 / LINE_BYTES);
        assert_eq!(line_a % entries, line_b % entries);
        let word_b = (line_b * LINE_BYTES) as usize;
        let (load, update) = (ScrAccess::Load, ScrAccess::Update);
        assert_eq!(misses_on(&a, &[(word_a, load), (word_a, load)]), [1, 0]);
        assert_eq!(misses_on(&b, &[(word_b, update), (word_b, load)]), [1, 0]);
        assert_eq!(misses_on(&a, &[(word_a, load)]), [0], "a holds its line");
        assert_eq!(misses_on(&b, &[(word_b, load)]), [0], "b holds its line");
    }

    /// Each pod has 64 bits of its own: 65 memories on 65 pods, all live at once, each
    /// hold the lines they load (the 65th live in the process got no bit and missed every
    /// access). The 65th live memory on one pod gets none.
    #[test]
    fn every_pod_has_bits_for_64_hosts() {
        let config = PodConfig::new().scr_bytes(64 << 10).lnr_bytes(4 << 20);
        // A small modeled LNR cache: 65 of the default's tags would take 260 MiB.
        let model = CxlModel {
            cache_bytes: 4096,
            ..CxlModel::default()
        };
        let memories: Vec<(Arc<Pod>, CxlMemory)> = (0..65)
            .map(|_| {
                let pod = Arc::new(Pod::create(&config, Backing::heap()).expect("a pod"));
                let memory = CxlMemory::new(Arc::clone(&pod), model);
                (pod, memory)
            })
            .collect();
        for (i, (pod, memory)) in memories.iter().enumerate() {
            let word = pod.address_of(pod.layout().scr_offset);
            let accesses = [(word, ScrAccess::Load), (word, ScrAccess::Load)];
            assert_eq!(misses_on(memory, &accesses), [1, 0], "memory {i}");
        }
        let pod = &memories[0].0;
        let more: Vec<CxlMemory> = (0..64)
            .map(|_| CxlMemory::new(Arc::clone(pod), model))
            .collect();
        assert!(more[..63].iter().all(|memory| memory.scr_bit != 0));
        assert_eq!(more[63].scr_bit, 0, "the pod's 65th live memory");
        let word = pod.address_of(pod.layout().scr_offset);
        let accesses = [(word, ScrAccess::Load), (word, ScrAccess::Load)];
        assert_eq!(misses_on(&more[63], &accesses), [1, 1]);
    }
}
