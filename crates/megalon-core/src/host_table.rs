//! The host table in SCR: one entry per host id. Its first line holds `holder` (the
//! holder's process id, 0 when free, and how many times the id has been joined: the
//! holder's life; set by the one CAS that claims the id and counts the claim, so a
//! reader never sees a claimed entry without its pid and life), a heartbeat the holder
//! bumps (its lease), the holder's machine and process start time (so that a host on the
//! same machine can tell at once that the holder's process is gone; each note names the
//! life that wrote it), the holder's log reservation (the positions it reserved and has not yet
//! published, so that a host recovering a dead holder can fill them), and the last life
//! of the id a recoverer condemned (set before recovery changes anything of the dead
//! holder's, so that a holder only paused past its lease learns it at its next check,
//! not once its row is freed). In a pod with undo
//! images the entry goes on with one announce word per record lock the holder may hold
//! (see `host::crash`). The log reads the table to know whose applied position holds its
//! head back; the host claims and frees its row.

use crate::ids::HostId;
use crate::pod::Pod;
use crate::sync::{AtomicU64, Ordering};

/// The pid in `holder` of a free entry. Process id 0 is the kernel's, never a user
/// process's.
const FREE: u32 = 0;
/// `holder`: the holder's pid in the low 32 bits (0: free), and in the high 32 how many
/// times the id has been joined (the holder's life; kept when the row is freed), so that
/// one CAS claims a row and counts the claim as the id's next life.
const HOLDER_OFFSET: u64 = 0;
const HEARTBEAT_OFFSET: u64 = 8;
// Bytes 16..24 held the count of joins until layout version 9 (now in `holder`).
const MACHINE_OFFSET: u64 = 24;
const STARTED_OFFSET: u64 = 32;
const RESERVED_FROM_OFFSET: u64 = 40;
const RESERVED_TO_OFFSET: u64 = 48;
const CONDEMNED_OFFSET: u64 = 56;

/// One row of the host table, as read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The host's id.
    pub host: HostId,
    /// Process id of the holder.
    pub pid: u32,
    /// The holder's heartbeat count (it carries over from the id's previous holders).
    pub heartbeat: u64,
    /// How many times this id's row has been claimed since the pod was created: the
    /// holder's life (counted by the claim itself; a join that gives up after its claim,
    /// or joins again, counts too).
    pub joins: u64,
    /// Whether the holder runs on the machine of the caller (its liveness is then its
    /// process's; otherwise its lease's).
    pub same_machine: bool,
}

struct HostEntry<'a> {
    holder: &'a AtomicU64,
    heartbeat: &'a AtomicU64,
    machine: &'a AtomicU64,
    started: &'a AtomicU64,
    reserved_from: &'a AtomicU64,
    reserved_to: &'a AtomicU64,
    condemned: &'a AtomicU64,
}

fn entry(pod: &Pod, host: HostId) -> HostEntry<'_> {
    let base = pod.layout().host_entry_offset(host);
    HostEntry {
        holder: pod.scr_u64(base + HOLDER_OFFSET),
        heartbeat: pod.scr_u64(base + HEARTBEAT_OFFSET),
        machine: pod.scr_u64(base + MACHINE_OFFSET),
        started: pod.scr_u64(base + STARTED_OFFSET),
        reserved_from: pod.scr_u64(base + RESERVED_FROM_OFFSET),
        reserved_to: pod.scr_u64(base + RESERVED_TO_OFFSET),
        condemned: pod.scr_u64(base + CONDEMNED_OFFSET),
    }
}

fn holder_word(pid: u32, life: u64) -> u64 {
    u64::from(pid) | life << 32
}

fn pid_of(word: u64) -> u32 {
    word as u32
}

fn life_of(word: u64) -> u64 {
    word >> 32
}

/// Claims `host` for this process and counts the claim as the id's next life (one CAS),
/// or returns the pid of its holder. Returns which life of the id this is (1 for the
/// first holder).
pub(crate) fn try_claim(pod: &Pod, host: HostId) -> Result<u64, u32> {
    let row = entry(pod, host);
    let mut seen = row.holder.load(Ordering::SeqCst);
    loop {
        if pid_of(seen) != FREE {
            return Err(pid_of(seen));
        }
        let life = life_of(seen) + 1;
        // SeqCst: Acquire pairs with the freeing CAS of the previous holder, and
        // `Log::advance_head` orders its loads of holders with this (and with `hold_head`'s
        // count, after it).
        match row.holder.compare_exchange(
            seen,
            holder_word(this_process(), life),
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => return Ok(life),
            Err(now) => seen = now,
        }
    }
}

impl Pod {
    /// The joined hosts, as the host table shows them now.
    pub fn hosts(&self) -> Vec<HostInfo> {
        (0..self.config().max_hosts)
            .filter_map(|host| {
                let row = entry(self, host);
                // Acquire: pairs with the claiming CAS.
                let word = row.holder.load(Ordering::Acquire);
                (pid_of(word) != FREE).then(|| HostInfo {
                    host,
                    pid: pid_of(word),
                    heartbeat: row.heartbeat.load(Ordering::Relaxed) & BEAT_COUNT_MASK,
                    joins: life_of(word),
                    same_machine: on_this_machine(row.machine.load(Ordering::Relaxed)),
                })
            })
            .collect()
    }

    /// The hosts of the table whose holders live: on this machine, their process runs;
    /// elsewhere, their heartbeat moves within the pod's lease (this waits up to one lease
    /// when a row names another machine).
    #[cfg(not(megalon_loom))]
    pub fn live_hosts(&self) -> Vec<crate::HostId> {
        let rows = self.hosts();
        let lease = std::time::Duration::from_millis(u64::from(self.config().lease_ms));
        let mut live = Vec::new();
        let mut elsewhere = Vec::new();
        for row in rows {
            match process_gone(self, row.host, row.pid, row.joins) {
                Some(false) => live.push(row.host),
                Some(true) => {}
                None => elsewhere.push(row),
            }
        }
        if !elsewhere.is_empty() {
            let start = std::time::Instant::now();
            while !elsewhere.is_empty() && start.elapsed() <= lease {
                std::thread::sleep(lease / 20);
                elsewhere.retain(|row| {
                    let moved = heartbeat_count(self, row.host) != row.heartbeat;
                    if moved {
                        live.push(row.host);
                    }
                    !moved
                });
            }
        }
        live.sort_unstable();
        live
    }
}

/// Bits of the heartbeat word that count beats; the bits above name the life that beat
/// (or joined) last: its low bits, as a note's.
const BEAT_COUNT_BITS: u32 = 40;
const BEAT_COUNT_MASK: u64 = (1 << BEAT_COUNT_BITS) - 1;

/// The heartbeat word of `count` beats, the last of life `life`.
fn beat_word(count: u64, life: u64) -> u64 {
    (count & BEAT_COUNT_MASK) | (life & NOTE_LIFE_MASK) << BEAT_COUNT_BITS
}

/// Bumps life `life`'s heartbeat in `host`'s row (a CAS from what the word holds), unless
/// the word names a later life: the id's next holder stamps its life in the word when it
/// joins (`note_holder`), and a life paused past its lease between its look that it was
/// not condemned and its bump (declared dead, recovered, the id joined again meanwhile)
/// must not beat for it. (A `fetch_add` did: each such thread of the old life bumped the
/// next life's lease once, and a dead next life was recovered a lease after the last.)
/// Returns the count.
pub(crate) fn heartbeat(pod: &Pod, host: HostId, life: u64) -> u64 {
    bump_heartbeat(pod, host, life, false)
}

/// [`heartbeat`], or with `stamp` (a joiner's, in `note_holder`) only if the word names
/// an earlier life (or none yet): it then names `life`, its count unchanged.
fn bump_heartbeat(pod: &Pod, host: HostId, life: u64, stamp: bool) -> u64 {
    let word = entry(pod, host).heartbeat;
    // Relaxed: the heartbeat only says "alive"; nothing is published with it. The CAS
    // orders the old life's bump against the stamp on the one word: before the stamp,
    // or refused.
    let mut seen = word.load(Ordering::Relaxed);
    loop {
        let tag = seen >> BEAT_COUNT_BITS;
        let own = tag == life & NOTE_LIFE_MASK && seen != 0;
        let earlier = replaceable(seen, tag, life) && !own;
        if !(if stamp { earlier } else { own || earlier }) {
            return seen & BEAT_COUNT_MASK;
        }
        // A stamp counts no beat (the count says how often the id's holders beat).
        let next = beat_word((seen & BEAT_COUNT_MASK) + u64::from(!stamp), life);
        match word.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next & BEAT_COUNT_MASK,
            Err(now) => seen = now,
        }
    }
}

/// Bits of a note (`machine`, `started`) that name the life that wrote it (the low bits
/// of its life): a note of another life than the holder's says nothing of the holder.
const NOTE_LIFE_MASK: u64 = (1 << 24) - 1;
/// Bits of `started` that hold the start time (clock ticks after boot: 2^40 of them are
/// 348 years at 100 a second).
const START_MASK: u64 = (1 << 40) - 1;

/// What `machine` says for life `life` of a holder on this machine: the machine's hash
/// (its high 40 bits, never all 0) and the life.
fn machine_note(life: u64) -> u64 {
    (this_machine() & !NOTE_LIFE_MASK) | 1 << 63 | (life & NOTE_LIFE_MASK)
}

/// Whether a `machine` note says this machine (of whichever life).
fn on_this_machine(note: u64) -> bool {
    note & !NOTE_LIFE_MASK == machine_note(0)
}

/// What `started` says for life `life` of a holder that started at `started`.
fn started_note(started: u64, life: u64) -> u64 {
    (started & START_MASK) | (life & NOTE_LIFE_MASK) << 40
}

/// Whether a note of the life it names (its low bits `tag`) may be replaced by one of life
/// `life`: a note of an earlier life (a holder of an earlier turn of the row, paused past
/// its lease, that noted itself late), or none. A note of a later life is never replaced
/// by an earlier one's.
fn replaceable(note: u64, tag: u64, life: u64) -> bool {
    let behind = life.wrapping_sub(tag) & NOTE_LIFE_MASK;
    note == 0 || (behind != 0 && behind < 1 << 23)
}

/// Notes who holds `host`, just claimed by life `life` of this process: this machine and
/// this process (`started`, its start time, read before the claim), each note naming the
/// life. Each is a CAS from what the word held, which must be empty or an earlier life's:
/// a claimer of an earlier turn of the row, paused past its lease between its claim and
/// its notes (its row recovered and freed meanwhile), that resumes, notes nothing over
/// this life's, and a note of its that lands first says nothing of this life (a watcher
/// reads a note only when it names the holder's life). Then it checks that the row is
/// still this life's and not condemned; else (this claimer is that paused one) it takes
/// its notes back, and `false`: the caller gives the row up.
pub(crate) fn note_holder(pod: &Pod, host: HostId, life: u64, started: u64) -> bool {
    let row = entry(pod, host);
    let note = |word: &AtomicU64, tag_of: fn(u64) -> u64, ours: u64| {
        let mut seen = word.load(Ordering::SeqCst);
        while replaceable(seen, tag_of(seen), life) {
            match word.compare_exchange(seen, ours, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
        seen == ours
    };
    // SeqCst: a host that sees the claim and then the row's notes sees this holder's, or
    // ones that do not name its life (judged by its lease).
    let machine = machine_note(life);
    let started = started_note(started, life);
    let noted = note(row.machine, |note| note & NOTE_LIFE_MASK, machine)
        && note(row.started, |note| note >> 40, started);
    let ours = holder(pod, host) == Some((this_process(), life)) && !condemned(pod, host, life);
    if noted && ours {
        // The heartbeat names this life from here: an earlier life's late bump is refused.
        bump_heartbeat(pod, host, life, true);
    }
    if !ours {
        for (word, note) in [(row.started, started), (row.machine, machine)] {
            let _ = word.compare_exchange(note, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
    noted && ours
}

/// Claims `host` for a test and notes the holder: which life it is.
#[cfg(test)]
pub(crate) fn claim_and_count(pod: &Pod, host: HostId) -> Result<u64, u32> {
    let life = try_claim(pod, host)?;
    assert!(
        note_holder(pod, host, life, own_start()),
        "nobody else notes"
    );
    Ok(life)
}

/// This process's id. `getpid` is a system call (about 250 ns on the machine of
/// `docs/`), and a host looks at its row (which names its process) before every append
/// and every write in its DRAM, so the id is kept once read, in a page of its own that
/// the kernel zeroes in every child that does not share the parent's memory
/// (`MADV_WIPEONFORK`): a child made by `fork`, or by the raw `fork` and `clone` system
/// calls (which run no `pthread_atfork` handler), reads its own, and a host of the parent
/// that the child goes on using finds that its row is not the child's. Where the kernel
/// cannot wipe the page (before Linux 4.14), the id is read each time.
#[cfg(target_os = "linux")]
pub(crate) fn this_process() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static KEPT: std::sync::OnceLock<Option<&'static AtomicU32>> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(|| {
        let len = 4096;
        // SAFETY: a new anonymous private mapping, of our own; it is never unmapped once
        // its advice took, so the reference to its first word lives as long as the
        // process, and the page is only ever accessed through that atomic.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if page == libc::MAP_FAILED {
                return None;
            }
            if libc::madvise(page, len, libc::MADV_WIPEONFORK) != 0 {
                libc::munmap(page, len);
                return None;
            }
            Some(&*page.cast::<AtomicU32>())
        }
    });
    let Some(kept) = kept else {
        return std::process::id();
    };
    let pid = kept.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    let pid = std::process::id();
    kept.store(pid, Ordering::Relaxed);
    pid
}

/// This process's id (read each time: no page wiped at a fork here).
#[cfg(not(target_os = "linux"))]
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// This process's start time, as [`note_holder`] notes it (0, unknown, when `/proc` is
/// not this process's pid namespace's: it would be another process's).
pub(crate) fn own_start() -> u64 {
    if !proc_is_ours() {
        return 0;
    }
    process_start(this_process()).unwrap_or(0)
}

/// Whether `/proc` shows this process's pid namespace: `/proc/self` names this process's
/// own id. A pid namespace made without a `/proc` of its own (`unshare --pid --fork`
/// without `--mount-proc`, a container that did not mount one) still sees its parent
/// namespace's, where a pid of this namespace names another process (or none): its
/// start time and state say nothing of the holder.
fn proc_is_ours() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse::<u32>().ok())
        == Some(this_process())
}

/// Frees `host`'s row, which life `life` of this process holds (its holder leaves). A row
/// that is not that life's any more (a recoverer freed it, another life claimed it) is
/// left alone.
pub(crate) fn release(pod: &Pod, host: HostId, life: u64) {
    release_dead(pod, host, this_process(), life);
}

/// Frees `host`'s row if life `life` of process `pid` still holds it (one CAS: a second
/// recoverer, or a new holder, even of the same process, is left alone).
pub(crate) fn release_dead(pod: &Pod, host: HostId, pid: u32, life: u64) -> bool {
    let row = entry(pod, host);
    let held = holder_word(pid, life);
    if row.holder.load(Ordering::SeqCst) != held {
        return false;
    }
    forget_holder(&row, life);
    // SeqCst (Release would do for the next holder, whose claiming CAS pairs with it):
    // `Log::advance_head` orders its loads of holders with its load of the `head` word.
    row.holder
        .compare_exchange(
            held,
            holder_word(FREE, life),
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
}

/// Clears the machine, start time and reservation of a row that life `life` holds and is
/// about to free: each word by a CAS from what it says now, and only if it names that life,
/// so that neither a holder that claimed the row meanwhile nor a second freer of the same
/// life paused here (one that checked the row before the first freed it) clears the next
/// life's. Between the next holder's claim and its `note_holder` the row would otherwise
/// describe the previous holder: a host of that machine would take the new holder's pid
/// for a process that started after the row's, or for one that is not there, and declare a
/// joining host dead. A row that says nothing of its holder is judged by its lease, whose
/// watch starts again for a new pid.
fn forget_holder(row: &HostEntry<'_>, life: u64) {
    // Its reservation too: the next holder's claim does not touch it.
    clear_reservation_word(row.reserved_to, life);
    let tag = life & NOTE_LIFE_MASK;
    clear_if(row.started, |note| note >> 40 == tag, 0);
    clear_if(row.machine, |note| note & NOTE_LIFE_MASK == tag, 0);
}

/// Sets `word` to `cleared` by a CAS from what it holds now, if that is `of_it`'s.
fn clear_if(word: &AtomicU64, of_it: impl Fn(u64) -> bool, cleared: u64) {
    let seen = word.load(Ordering::SeqCst);
    if of_it(seen) {
        let _ = word.compare_exchange(seen, cleared, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Clears the reservation end `word` if life `life` stored it.
fn clear_reservation_word(word: &AtomicU64, life: u64) {
    clear_if(
        word,
        |seen| names_life(seen, life),
        reservation_word(0, life),
    );
}

/// Takes `host`'s row over from life `life` of process `pid`, a holder found dead with
/// no live host left to recover it (see `host::rescue`): condemns that life first (a
/// holder only paused past its lease learns it at its next check, as from a recoverer),
/// then claims the row from its word by one CAS, counted as the id's next life, which
/// returns. `None`: the row is not that life's any more (another rescuer took it, or
/// its holder left). The dead life's words (its reservation, its announces) stay in the
/// row for the new life to recover before it does anything else.
pub(crate) fn take_over(pod: &Pod, host: HostId, pid: u32, life: u64) -> Option<u64> {
    let row = entry(pod, host);
    let dead = holder_word(pid, life);
    if pid == FREE || row.holder.load(Ordering::SeqCst) != dead {
        return None;
    }
    condemn(pod, host, life);
    row.holder
        .compare_exchange(
            dead,
            holder_word(this_process(), life + 1),
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .ok()
        .map(|_| life + 1)
}

/// The positions life `last` of `host`, or an earlier life, announced in the row and may
/// not have published (empty if the words name a later life, or nothing). A row freed
/// by its holder or its recoverer has its words cleared (`forget_holder`), so an earlier
/// life's words are there only when the row was taken over (`take_over`): that life is
/// dead (condemned), and its recovery was not finished (its rescuer died, say). A filler
/// skips what is published, so whichever dead life stored them, they are filled alike.
pub(crate) fn reservation_up_to(pod: &Pod, host: HostId, last: u64) -> std::ops::Range<u64> {
    let row = entry(pod, host);
    let to = row.reserved_to.load(Ordering::SeqCst);
    let tag = to >> RESERVATION_LIFE_SHIFT;
    // Behind `last` by less than half the tags' range: `last` or an earlier life.
    let behind = last.wrapping_sub(tag) & RESERVATION_LIFE_MASK;
    if position_of(to) == 0 || behind >= 1 << (63 - RESERVATION_LIFE_SHIFT) {
        return 0..0;
    }
    let from = row.reserved_from.load(Ordering::SeqCst);
    if from >> RESERVATION_LIFE_SHIFT != tag {
        return 0..0;
    }
    position_of(from)..position_of(to)
}

/// Condemns life `life` of `host` (and every earlier one): a recoverer does it before it
/// fills the dead holder's reservation or settles anything of its. The word only grows
/// (a recoverer taken over late, condemning a life whose id lives again, leaves the later
/// condemnation alone), and a new life is above every condemned one.
pub(crate) fn condemn(pod: &Pod, host: HostId, life: u64) {
    // SeqCst: before the recoverer's first step, so that a holder that checks after it
    // (`condemned`) knows, and one that checked before it had announced what it then
    // does (its reservation, its lock): the recoverer's scan sees that.
    entry(pod, host).condemned.fetch_max(life, Ordering::SeqCst);
}

/// Whether life `life` of `host` has been condemned by a recoverer. (Lives count from
/// 1.)
pub(crate) fn condemned(pod: &Pod, host: HostId, life: u64) -> bool {
    life != 0 && entry(pod, host).condemned.load(Ordering::SeqCst) >= life
}

/// The holder of `host`'s row and which life of the id it is, if held.
pub(crate) fn holder(pod: &Pod, host: HostId) -> Option<(u32, u64)> {
    let word = entry(pod, host).holder.load(Ordering::SeqCst);
    (pid_of(word) != FREE).then(|| (pid_of(word), life_of(word)))
}

/// A reservation word: a log position (below 2^52, as every position the log hands out)
/// and, in the high 12 bits, the life of the id that stored it (as the log's `ltail`
/// words), so that a store of one life never lands in another's.
fn reservation_word(position: u64, life: u64) -> u64 {
    debug_assert!(position < 1 << RESERVATION_LIFE_SHIFT);
    position | (life & RESERVATION_LIFE_MASK) << RESERVATION_LIFE_SHIFT
}

/// Where a reservation word keeps the life that stored it.
const RESERVATION_LIFE_SHIFT: u32 = 52;
const RESERVATION_LIFE_MASK: u64 = (1 << (64 - RESERVATION_LIFE_SHIFT)) - 1;

/// Whether reservation word `word` was stored by life `life`.
fn names_life(word: u64, life: u64) -> bool {
    word >> RESERVATION_LIFE_SHIFT == life & RESERVATION_LIFE_MASK
}

/// The position a reservation word holds.
fn position_of(word: u64) -> u64 {
    word & ((1 << RESERVATION_LIFE_SHIFT) - 1)
}

/// Announces that life `life` of `host` is about to reserve log positions `from..to`
/// (before its CAS on `tail`), so that if it dies before publishing them a recoverer can
/// fill them. Each word changes by a CAS from what it held, while the row is this
/// life's and not condemned: a host paused past its lease never announces over the
/// reservation of its id's next life, nor after its recovery. `false`: the row is not
/// that life's any more, or its recovery has begun; the caller must not reserve.
pub(crate) fn announce_reservation(pod: &Pod, host: HostId, life: u64, from: u64, to: u64) -> bool {
    let row = entry(pod, host);
    let store = |word: &AtomicU64, position: u64| {
        let ours = reservation_word(position, life);
        let mut seen = word.load(Ordering::SeqCst);
        loop {
            // Only while the row is this life's and its recovery has not begun, checked
            // right before the CAS (the lease's rule). Over its own life's word too: a
            // host paused past its lease whose recovery is done (its words cleared, still
            // of its life) would otherwise announce again after its `tail` CAS failed,
            // and reserve positions no recovery fills.
            let mine = holder(pod, host).is_some_and(|(_, holder)| holder == life)
                && !condemned(pod, host, life);
            if !mine {
                return false;
            }
            // SeqCst: a recoverer that reads these words after the holder died reads the
            // last ones stored before the holder's CAS on `tail` (which is SeqCst-ordered
            // after them).
            match word.compare_exchange(seen, ours, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    };
    // The end first, to nothing: a recoverer that reads the pair between the stores finds
    // nothing announced, never one end of each.
    store(row.reserved_to, 0) && store(row.reserved_from, from) && store(row.reserved_to, to)
}

/// Withdraws life `life`'s announce of the positions below `to` (published, or never
/// reserved), by a CAS from `to`: a host paused past its lease whose row has been freed
/// and joined again leaves the next holder's announce alone.
pub(crate) fn withdraw_reservation(pod: &Pod, host: HostId, life: u64, to: u64) {
    if to != 0 {
        let _ = entry(pod, host).reserved_to.compare_exchange(
            reservation_word(to, life),
            reservation_word(0, life),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// The positions life `life` of `host` announced it reserves (`from..to`; empty if none,
/// or if the row's words are another life's).
pub(crate) fn reservation(pod: &Pod, host: HostId, life: u64) -> std::ops::Range<u64> {
    let row = entry(pod, host);
    let to = row.reserved_to.load(Ordering::SeqCst);
    if !names_life(to, life) || position_of(to) == 0 {
        return 0..0;
    }
    let from = row.reserved_from.load(Ordering::SeqCst);
    if !names_life(from, life) {
        return 0..0;
    }
    position_of(from)..position_of(to)
}

/// The positions the holder of `host`'s row announced it reserves (empty if the row is
/// free).
pub(crate) fn holders_reservation(pod: &Pod, host: HostId) -> std::ops::Range<u64> {
    match holder(pod, host) {
        Some((_, life)) => reservation(pod, host, life),
        None => 0..0,
    }
}

/// Life `life`'s reservation, cleared for good by its recoverer before it frees the row
/// (by a CAS: a later life's is left alone).
pub(crate) fn clear_reservation(pod: &Pod, host: HostId, life: u64) {
    clear_reservation_word(entry(pod, host).reserved_to, life);
}

/// Whether the holder of `host`'s row (`pid`) is known to be gone, without a lease: it
/// runs on this machine and its process has exited (or its pid now names another
/// process). `None`: it runs elsewhere (or has not said where yet), so only its lease
/// can tell.
pub(crate) fn process_gone(pod: &Pod, host: HostId, pid: u32, life: u64) -> Option<bool> {
    let row = entry(pod, host);
    // Notes of life `life` only: another life's (a claimer of an earlier turn of the row
    // that noted itself late) say nothing of this holder.
    if row.machine.load(Ordering::SeqCst) != machine_note(life) {
        return None;
    }
    let started = row.started.load(Ordering::SeqCst);
    if started >> 40 != life & NOTE_LIFE_MASK {
        return None;
    }
    // A `/proc` of another pid namespace cannot tell this namespace's processes apart:
    // its lease tells.
    if !proc_is_ours() {
        return None;
    }
    Some(!process_alive(pid, started & START_MASK))
}

/// Whether `host`'s holder lives, as far as this machine can tell at once: `Some` for a
/// holder on this machine (or a free row: `Some(false)`), `None` for one elsewhere.
pub(crate) fn alive(pod: &Pod, host: HostId) -> Option<bool> {
    if host >= pod.config().max_hosts {
        return None;
    }
    match holder(pod, host) {
        None => Some(false),
        Some((pid, life)) => process_gone(pod, host, pid, life).map(|gone| !gone),
    }
}

/// A host's session: its id and which life of the id it is, in one word (never 0).
pub(crate) fn session(host: HostId, life: u64) -> u64 {
    life << 16 | (u64::from(host) + 1)
}

/// The host and life a session names.
pub(crate) fn session_of(session: u64) -> (HostId, u64) {
    (((session & 0xffff) - 1) as HostId, session >> 16)
}

/// Whether the holder of a session is gone: its row is free or another life's, or its
/// process is gone (on this machine).
pub(crate) fn session_gone(pod: &Pod, session: u64) -> bool {
    let (host, life) = session_of(session);
    match holder(pod, host) {
        Some((_, joins)) if joins == life => alive(pod, host) == Some(false),
        _ => true,
    }
}

/// The holder's heartbeat count (its lease: it moves while the holder's pump runs).
pub(crate) fn heartbeat_count(pod: &Pod, host: HostId) -> u64 {
    entry(pod, host).heartbeat.load(Ordering::Relaxed) & BEAT_COUNT_MASK
}

/// Makes `host`'s row say that its holder runs on another machine, so that only its
/// lease tells whether it lives: how a test makes a host of this process look like one
/// that died elsewhere.
pub(crate) fn pretend_elsewhere(pod: &Pod, host: HostId) {
    let Some((_, life)) = holder(pod, host) else {
        return;
    };
    entry(pod, host)
        .machine
        .store(elsewhere_note(life), Ordering::SeqCst);
}

/// Another machine's note of `life` (a later life's notes replace it): this machine's
/// with one bit of the machine flipped.
fn elsewhere_note(life: u64) -> u64 {
    (machine_note(life) ^ 1 << 62) & !NOTE_LIFE_MASK | (life & NOTE_LIFE_MASK)
}

/// [`pretend_elsewhere`], if the row's note is this machine's note of its holder's life
/// (a joiner writes its note after it takes the row): whether it changed the note.
pub(crate) fn pretend_elsewhere_if_here(pod: &Pod, host: HostId) -> bool {
    let Some((_, life)) = holder(pod, host) else {
        return false;
    };
    let (here, elsewhere) = (machine_note(life), elsewhere_note(life));
    entry(pod, host)
        .machine
        .compare_exchange(here, elsewhere, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// This machine, as a number: a hash of the kernel's boot id (a new one at every boot),
/// never 0 (a row whose holder has not said where it runs holds 0).
///
/// Kept with the process it was computed in, and computed again in a child made by
/// `fork`: a parent may have moved its children into a new pid namespace
/// (`unshare(CLONE_NEWPID)`, then `fork`, with no `exec`), and a child that kept its
/// parent's number took the parent's rows for rows of its own namespace, where the
/// parent's pid names no process: it recovered the parent's live host.
pub(crate) fn this_machine() -> u64 {
    // The standard library's atomics (process-wide statics, not the pod's words).
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    static MACHINE: AtomicU64 = AtomicU64::new(0);
    static COMPUTED_IN: AtomicU32 = AtomicU32::new(0);
    let process = this_process();
    // Acquire: pairs with the Release store below (the number stored before it).
    if COMPUTED_IN.load(Ordering::Acquire) == process {
        return MACHINE.load(Ordering::Relaxed);
    }
    let machine = {
        let mut id = std::fs::read("/proc/sys/kernel/random/boot_id")
            .or_else(|_| std::fs::read("/etc/machine-id"))
            .unwrap_or_else(|_| b"unknown machine".to_vec());
        // A pid names a process only within its pid namespace: hosts of one kernel in
        // two namespaces (two containers) are on two "machines", judged by their leases.
        // And a process's start time reads shifted by the reader's boot-time offset: hosts
        // in two time namespaces (`unshare --time`, a container restored by CRIU) each
        // read another start time than the other noted of itself.
        for ns in ["/proc/self/ns/pid", "/proc/self/ns/time"] {
            if let Ok(ns) = std::fs::read_link(ns) {
                id.extend_from_slice(ns.as_os_str().as_encoded_bytes());
            }
        }
        crate::header::fnv1a64(&id) | 1
    };
    // Threads that compute it at once compute the same number.
    MACHINE.store(machine, Ordering::Relaxed);
    COMPUTED_IN.store(process, Ordering::Release);
    machine
}

/// Process `pid`'s state letter and start time (clock ticks after boot), from
/// `/proc/PID/stat`, if it can be read.
fn process_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count fields
    // after its closing parenthesis. State is field 3, start time field 22.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some((state, started))
}

/// When process `pid` started, if known.
fn process_start(pid: u32) -> Option<u64> {
    process_stat(pid).map(|(_, started)| started)
}

/// Whether process `pid` has a thread other than its first (whose id is the pid's) that
/// has not ended: a process whose threads have all ended lists only its first in
/// `/proc/PID/task` (the others go at once; the first stays until the process is reaped).
fn other_threads_run(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|task| task.ok()).any(|task| {
        task.file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
            .is_some_and(|tid| {
                tid != pid
                    && std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
                        .ok()
                        .and_then(|stat| {
                            let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
                            Some(!matches!(state, 'Z' | 'X'))
                        })
                        .unwrap_or(false)
            })
    })
}

/// Whether process `pid` runs and is the one that started at `started` (0: unknown).
fn process_alive(pid: u32, started: u64) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let exists = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match process_stat(pid) {
        // Exited, not yet reaped by its parent; unless only its first thread ended
        // (`pthread_exit` in `main`): the kernel shows a thread-group leader that ended
        // as a zombie while the process's other threads run on.
        Some(('Z' | 'X', now)) => (started == 0 || now == started) && other_threads_run(pid),
        // A reused pid names a process that started later.
        Some((_, now)) => started == 0 || now == started,
        None => true,
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;
    use crate::{Backing, PodConfig};

    /// Whether a child made by `fork` (which returns the child's pid in the parent, 0 in
    /// the child) reads its own id from `this_process`, the parent's id kept first.
    #[cfg(target_os = "linux")]
    fn child_reads_its_own_id(fork: impl FnOnce() -> libc::pid_t) -> bool {
        assert_eq!(this_process(), std::process::id());
        let child = fork();
        assert!(child >= 0, "fork");
        if child == 0 {
            // SAFETY: the child calls only `getpid` (the system call), an atomic load
            // (`this_process`, its page initialized by the parent) and `_exit`, all
            // async-signal-safe, and ends at once, running nothing of the parent's.
            unsafe {
                let own = libc::syscall(libc::SYS_getpid) as u32;
                libc::_exit(if this_process() == own { 0 } else { 1 })
            };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert_eq!(this_process(), std::process::id());
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }

    /// The kept process id is this process's, and a child made by `fork` reads its own:
    /// a host of the parent used in the child must find that its row is not the child's.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_kept_process_id_is_the_callers_own_after_a_fork() {
        // SAFETY: the child does only what `child_reads_its_own_id` says.
        let fork = || unsafe { libc::fork() };
        assert!(
            child_reads_its_own_id(fork),
            "the child read its parent's id"
        );
    }

    /// The same for a child made by the raw `fork` system call, which runs no
    /// `pthread_atfork` handler (as `clone` and glibc's `_Fork` make one): the kept id is
    /// in a page the kernel wipes in such a child too.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn the_kept_process_id_is_the_callers_own_after_a_raw_fork() {
        // SAFETY: the child does only what `child_reads_its_own_id` says.
        let fork = || unsafe { libc::syscall(libc::SYS_fork) } as libc::pid_t;
        assert!(
            child_reads_its_own_id(fork),
            "the child read its parent's id"
        );
    }

    /// A claimer of an earlier turn of a row (life 1), paused past its lease between its
    /// claim and its notes, its row recovered and claimed again (life 2, not noted yet),
    /// notes itself late: a watcher of this machine must not judge life 2 by life 1's
    /// start time (it took the live holder for gone), and life 2's notes replace life 1's,
    /// never the other way round.
    #[test]
    fn a_note_of_an_earlier_life_says_nothing_of_the_holder() {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .max_hosts(4);
        let pod = Pod::create(&config, Backing::heap()).unwrap();
        let pid = std::process::id();
        let first = try_claim(&pod, 3).unwrap();
        condemn(&pod, 3, first);
        assert!(release_dead(&pod, 3, pid, first));
        let second = try_claim(&pod, 3).unwrap();
        assert_eq!((first, second), (1, 2));
        // The first claimer's notes land (a start time no process of this pid has).
        let row = entry(&pod, 3);
        row.machine.store(machine_note(first), Ordering::SeqCst);
        row.started.store(started_note(1, first), Ordering::SeqCst);
        assert_eq!(
            process_gone(&pod, 3, pid, second),
            None,
            "judged by its lease"
        );
        assert_eq!(alive(&pod, 3), None);
        // The second life notes itself over them; the first's notes, again, change nothing.
        assert!(note_holder(&pod, 3, second, own_start()));
        assert!(!note_holder(&pod, 3, first, 1));
        assert_eq!(process_gone(&pod, 3, pid, second), Some(false));
        assert_eq!(alive(&pod, 3), Some(true));
    }

    fn pod_of_four() -> Pod {
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(1 << 20)
            .max_hosts(4);
        Pod::create(&config, Backing::heap()).unwrap()
    }

    /// Row 3's first life announced a reservation and was freed; its second claimed the
    /// row and announced one of its own.
    fn second_life_reserving(pod: &Pod) -> (u64, u64) {
        let first = try_claim(pod, 3).unwrap();
        assert!(note_holder(pod, 3, first, own_start()));
        assert!(announce_reservation(pod, 3, first, 5, 7));
        assert_eq!(reservation(pod, 3, first), 5..7);
        assert!(release_dead(pod, 3, std::process::id(), first));
        assert_eq!(reservation(pod, 3, first), 0..0, "cleared with the row");
        let second = try_claim(pod, 3).unwrap();
        assert!(note_holder(pod, 3, second, own_start()));
        assert!(announce_reservation(pod, 3, second, 10, 12));
        (first, second)
    }

    /// Two freers of one life (a recoverer and the holder leaving, say): the second
    /// checked the row before the first freed it, and resumes clearing the row's words
    /// after the id's next life claimed the row, noted itself and announced a
    /// reservation. That life's reservation and notes stay: had the reservation been
    /// cleared, a recoverer of that life would never fill the positions it reserved (the
    /// log stuck at its hole for good).
    #[test]
    fn a_late_freer_leaves_the_next_lifes_row_alone() {
        let pod = pod_of_four();
        let (first, second) = second_life_reserving(&pod);
        forget_holder(&entry(&pod, 3), first);
        assert_eq!(reservation(&pod, 3, second), 10..12);
        assert_eq!(holders_reservation(&pod, 3), 10..12);
        assert_eq!(
            process_gone(&pod, 3, std::process::id(), second),
            Some(false)
        );
        // Its own freer clears them.
        forget_holder(&entry(&pod, 3), second);
        assert_eq!(reservation(&pod, 3, second), 0..0);
        assert_eq!(process_gone(&pod, 3, std::process::id(), second), None);
    }

    /// A holder paused past its lease between its row check and its announce (its row
    /// recovered, freed and claimed again) announces nothing over the next life's
    /// reservation, and is told not to reserve.
    #[test]
    fn a_late_announce_leaves_the_next_lifes_reservation_alone() {
        let pod = pod_of_four();
        let (first, second) = second_life_reserving(&pod);
        assert!(!announce_reservation(&pod, 3, first, 20, 21));
        assert_eq!(reservation(&pod, 3, second), 10..12);
        assert_eq!(reservation(&pod, 3, first), 0..0);
        // Nor does its withdraw of its old announce.
        withdraw_reservation(&pod, 3, first, 7);
        withdraw_reservation(&pod, 3, first, 12);
        assert_eq!(reservation(&pod, 3, second), 10..12);
        withdraw_reservation(&pod, 3, second, 12);
        assert_eq!(reservation(&pod, 3, second), 0..0);
        // A life whose recovery has begun announces nothing over another life's words.
        condemn(&pod, 3, second);
        assert!(release_dead(&pod, 3, std::process::id(), second));
        let third = try_claim(&pod, 3).unwrap();
        condemn(&pod, 3, third);
        assert!(!announce_reservation(&pod, 3, third, 30, 31));
        assert_eq!(reservation(&pod, 3, third), 0..0);
    }
}
