//! Memory access: the one interface every LNR access goes through.
//!
//! Load, store, flush (write back if dirty, then invalidate), write back and keep
//! (`clwb`), non-temporal store, fence: two implementations behind one enum.
//!
//! - [`HardwareMemory`]: plain loads and stores on the mapping and the real instructions
//!   (see [`crate::arch`]).
//! - [`SimulatedMemory`]: a private software cache of 64-byte lines per host that serves
//!   stale lines the way a non-coherent cache does. It is what makes a missing flush
//!   observable on this machine's coherent hardware.
//! - [`CxlMemory`]: [`HardwareMemory`] under the CXL cost model ([`cxl`]): each call also
//!   spins for what its far-memory traffic would cost on a CXL pod.
//!
//! Offsets are from the pod's first byte and must lie in the LNR (checked: an offset
//! outside panics, since offsets come from the layout, never from users).
//!
//! **Why an enum and not a generic parameter.** Which memory a run uses is a runtime
//! choice (`--memory simulated` in the examples, the stress test and the harness), and a
//! type parameter would spread through every type above (pod handles, hosts, the KV
//! store, the page cache, each baseline). The cost is one predictable branch per call;
//! calls move whole objects or ranges of lines, so it is paid once per copy, not once per
//! byte. `benches/memory.rs` measures it against calling [`HardwareMemory`] directly
//! (results in `docs/memory.md`).
//!
//! Object bytes are copied out with one `rep movsb` on x86-64 (an atomic byte copy in
//! effect: `crate::arch::copy_bytes`) or atomic word loads elsewhere (`copy_out`), and in
//! with atomic word stores (`copy_in`), never through a `&[u8]` into memory another host
//! may be writing: such a read is a race by design (the seqlock check after it decides
//! whether to trust it).

pub mod cxl;
mod hardware;
mod simulated;

use std::sync::Arc;

pub use cxl::{CxlMemory, CxlModel};
pub use hardware::HardwareMemory;
pub use simulated::{SimulatedConfig, SimulatedMemory, SimulatedStats};

use crate::pod::Pod;
use crate::sync::Ordering;
#[cfg(not(megalon_loom))]
use crate::sync::{AtomicU64, AtomicU8};

/// Which implementation a host uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Real loads, stores and cache-maintenance instructions.
    Hardware,
    /// A simulated non-coherent cache per host.
    Simulated(SimulatedConfig),
    /// Real memory under the CXL cost model (see [`cxl`]).
    Cxl(CxlModel),
}

impl MemoryKind {
    /// A simulated cache with default capacity and eviction rate, seeded with `seed`.
    pub fn simulated(seed: u64) -> Self {
        MemoryKind::Simulated(SimulatedConfig {
            seed,
            ..SimulatedConfig::default()
        })
    }

    /// The same kind for host `host` of a run seeded with `seed`: a simulated cache gets a
    /// seed of its own (so hosts evict differently, and the run replays from `seed`);
    /// hardware is hardware.
    #[must_use]
    pub fn for_host(&self, seed: u64, host: u32) -> Self {
        match self {
            MemoryKind::Simulated(config) => MemoryKind::Simulated(SimulatedConfig {
                seed: seed ^ u64::from(host).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ..config.clone()
            }),
            MemoryKind::Hardware | MemoryKind::Cxl(_) => self.clone(),
        }
    }

    /// `"hardware"`, `"simulated"` or `"cxl"`: the name
    /// [`MemoryKind::from_str`](std::str::FromStr) reads and `Display` writes.
    pub fn name(&self) -> &'static str {
        match self {
            MemoryKind::Hardware => "hardware",
            MemoryKind::Simulated(_) => "simulated",
            MemoryKind::Cxl(_) => "cxl",
        }
    }
}

/// The names [`MemoryKind`] parses, for command lines.
pub const MEMORY_KIND_NAMES: [&str; 3] = ["hardware", "simulated", "cxl"];

impl std::fmt::Display for MemoryKind {
    /// The name; a CXL model whose parameters are not the defaults adds them after a
    /// colon (`cxl:scr_ns=600`), as `from_str` reads them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())?;
        match self {
            MemoryKind::Cxl(model) if *model != CxlModel::default() => write!(f, ":{model}"),
            _ => Ok(()),
        }
    }
}

/// A memory kind that is none of [`MEMORY_KIND_NAMES`], or a CXL model's parameters that
/// do not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnknownMemoryKind {
    /// Not a name of a memory kind.
    #[error("unknown memory kind {given:?}: hardware, simulated or cxl[:name=value,...]")]
    Name {
        /// What was given.
        given: String,
    },
    /// `cxl:` followed by parameters that do not parse.
    #[error(transparent)]
    CxlParameter(#[from] cxl::BadCxlParameter),
}

impl std::str::FromStr for MemoryKind {
    type Err = UnknownMemoryKind;

    /// `hardware`; `simulated` (a simulated cache with the default capacity, eviction
    /// rate and seed; see [`MemoryKind::for_host`]); `cxl` (the CXL cost model with its
    /// defaults), or `cxl:name=value,...` with some of its parameters set
    /// ([`CxlModel::parse`]).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.split_once(':') {
            Some(("cxl", parameters)) => return Ok(MemoryKind::Cxl(CxlModel::parse(parameters)?)),
            Some(_) => {}
            None => match name {
                "hardware" => return Ok(MemoryKind::Hardware),
                "simulated" => return Ok(MemoryKind::Simulated(SimulatedConfig::default())),
                "cxl" => return Ok(MemoryKind::Cxl(CxlModel::default())),
                _ => {}
            },
        }
        Err(UnknownMemoryKind::Name {
            given: name.to_owned(),
        })
    }
}

/// One host's access to LNR.
#[derive(Debug)]
pub enum Memory {
    /// See [`HardwareMemory`].
    Hardware(HardwareMemory),
    /// See [`SimulatedMemory`].
    Simulated(SimulatedMemory),
    /// See [`CxlMemory`].
    Cxl(CxlMemory),
}

macro_rules! dispatch {
    ($self:ident, $memory:ident => $call:expr) => {
        match $self {
            Memory::Hardware($memory) => {
                cxl::bind_not_cxl();
                $call
            }
            Memory::Simulated($memory) => {
                cxl::bind_not_cxl();
                $call
            }
            Memory::Cxl($memory) => $call,
        }
    };
}

impl Memory {
    /// Access to `pod`'s LNR of the given kind.
    pub fn new(pod: Arc<Pod>, kind: MemoryKind) -> Memory {
        match kind {
            MemoryKind::Hardware => Memory::Hardware(HardwareMemory::new(pod)),
            MemoryKind::Simulated(config) => Memory::Simulated(SimulatedMemory::new(pod, config)),
            MemoryKind::Cxl(model) => Memory::Cxl(CxlMemory::new(pod, model)),
        }
    }

    /// Binds the calling thread's SCR charges under the CXL cost model to this host, as
    /// every call on LNR does: for a thread whose work may reach the SCR before its first
    /// call on LNR. See [`cxl::charge_scr_at`]. On other memories it unbinds the thread,
    /// as their calls on LNR do: an append reaches the log's cursors before the entry's
    /// lines, and a fresh thread's first append on a hardware host was charged at the
    /// cost of the CXL memory made last in the process.
    #[inline]
    pub fn bind_scr(&self) {
        match self {
            Memory::Cxl(memory) => memory.bind(),
            _ => cxl::bind_not_cxl(),
        }
    }

    /// `"hardware"`, `"simulated"` or `"cxl"`, as [`MemoryKind::name`] says.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Memory::Hardware(_) => "hardware",
            Memory::Simulated(_) => "simulated",
            Memory::Cxl(_) => "cxl",
        }
    }

    /// Copies `buf.len()` bytes at `offset` into `buf` (through this host's cache).
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        dispatch!(self, m => m.read(offset, buf))
    }

    /// Starts loading `[offset, offset + len)` into this host's cache without waiting
    /// (a hint: the next [`read`](Self::read) of it finds its lines on their way, all
    /// in flight at once instead of one miss after another). The simulated memory
    /// ignores it; the CXL model charges the misses among its lines here, in rounds, as
    /// one read of them all ([`CxlMemory::prefetch`]).
    #[inline]
    pub(crate) fn prefetch(&self, offset: u64, len: usize) {
        match self {
            Memory::Hardware(m) => m.prefetch(offset, len),
            Memory::Cxl(m) => m.prefetch(offset, len),
            Memory::Simulated(_) => {}
        }
    }

    /// Copies `data` to `offset` (into this host's cache; see [`Memory::write_back`]).
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) {
        dispatch!(self, m => m.write(offset, data))
    }

    /// Loads the 8-aligned word at `offset`.
    #[inline]
    pub fn load_u64(&self, offset: u64) -> u64 {
        dispatch!(self, m => m.load_u64(offset))
    }

    /// Stores the 8-aligned word at `offset`.
    #[inline]
    pub fn store_u64(&self, offset: u64, value: u64) {
        dispatch!(self, m => m.store_u64(offset, value))
    }

    /// Flush-invalidates every line overlapping `[offset, offset + len)`: dirty lines are
    /// written back, then dropped, so the next read comes from memory. Needs a
    /// [`Memory::fence`] before loads that must see memory.
    #[inline]
    pub fn flush(&self, offset: u64, len: usize) {
        dispatch!(self, m => m.flush(offset, len))
    }

    /// Writes back every dirty line overlapping the range and keeps it cached (`clwb`).
    /// Needs a [`Memory::fence`] before the store that publishes it.
    #[inline]
    pub fn write_back(&self, offset: u64, len: usize) {
        dispatch!(self, m => m.write_back(offset, len))
    }

    /// Stores `data` at `offset` straight to memory, dropping this host's copies of the
    /// lines (written back first if dirty): no line of it stays in this host's cache,
    /// so nothing of it can reach memory later, after this host is gone. At any
    /// alignment: the bytes of a word it covers in part are stored alone. Needs a
    /// [`Memory::fence`] before the store that publishes it. Every write of the protocol
    /// to LNR goes this way (`docs/memory.md`, "What a stopped process leaves").
    #[inline]
    pub fn write_non_temporal(&self, offset: u64, data: &[u8]) {
        dispatch!(self, m => m.write_non_temporal(offset, data))
    }

    /// Orders every earlier access, flush and write-back before every later access.
    #[inline]
    pub fn fence(&self) {
        dispatch!(self, m => m.fence())
    }

    /// The simulated cache, or `None` on hardware.
    pub fn as_simulated(&self) -> Option<&SimulatedMemory> {
        match self {
            Memory::Simulated(m) => Some(m),
            Memory::Hardware(_) | Memory::Cxl(_) => None,
        }
    }

    /// What the simulated cache has done, or `None` on hardware.
    pub fn simulated_stats(&self) -> Option<SimulatedStats> {
        self.as_simulated().map(SimulatedMemory::stats)
    }

    /// The CXL cost model this memory charges under, or `None`.
    pub fn cxl_model(&self) -> Option<&CxlModel> {
        match self {
            Memory::Cxl(m) => Some(m.model()),
            Memory::Hardware(_) | Memory::Simulated(_) => None,
        }
    }
}

/// The model words of `[offset, offset + len)` in LNR, in order: loom's pods move whole
/// words.
#[cfg(megalon_loom)]
fn model_words(
    pod: &Pod,
    offset: u64,
    len: usize,
) -> impl Iterator<Item = &crate::sync::AtomicU64> {
    pod.assert_in_lnr(offset, len);
    assert!(
        offset.is_multiple_of(8) && len.is_multiple_of(8),
        "models move whole words"
    );
    (0..len as u64 / 8).map(move |i| pod.word(offset + i * 8))
}

/// Copies `buf.len()` bytes of the pod's memory at `offset` (in LNR) into `buf`
/// ([`copy_out`]); no cache is involved beyond the hardware's own.
pub(crate) fn read_shared(pod: &Pod, offset: u64, buf: &mut [u8]) {
    #[cfg(not(megalon_loom))]
    {
        let src = pod.lnr_ptr(offset, buf.len());
        // SAFETY: `lnr_ptr` checked the range is inside the LNR of the live mapping.
        unsafe { copy_out(src, buf) }
    }
    #[cfg(megalon_loom)]
    {
        for (word, chunk) in model_words(pod, offset, buf.len()).zip(buf.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
    }
}

/// Copies `data` into the pod's memory at `offset` (in LNR) with atomic word stores.
pub(crate) fn write_shared(pod: &Pod, offset: u64, data: &[u8]) {
    #[cfg(not(megalon_loom))]
    {
        let dst = pod.lnr_ptr(offset, data.len());
        // SAFETY: as in `read_shared`.
        unsafe { copy_in(dst, data) }
    }
    #[cfg(megalon_loom)]
    {
        for (word, chunk) in model_words(pod, offset, data.len()).zip(data.chunks_exact(8)) {
            word.store(
                u64::from_ne_bytes(chunk.try_into().expect("8")),
                Ordering::Relaxed,
            );
        }
    }
}

/// Copies `dst.len()` bytes from shared memory at `src`: on x86-64 with one `rep movsb`
/// ([`crate::arch::copy_bytes`]), elsewhere with atomic (relaxed) loads
/// ([`copy_out_words`]).
///
/// # Safety
/// `[src, src + dst.len())` must lie inside a live mapping of pod memory, which is only
/// ever accessed atomically, by these copies, or by cache-maintenance instructions.
#[cfg(not(megalon_loom))]
#[inline]
pub(crate) unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    // SAFETY: as the caller promised; `dst` is a buffer of its own.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        crate::arch::copy_bytes(src, dst.as_mut_ptr(), dst.len())
    }
    // SAFETY: as the caller promised.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        copy_out_words(src, dst)
    }
}

/// [`copy_out`] with atomic (relaxed) loads: bytes up to an 8-byte boundary, then words,
/// then the remaining bytes.
///
/// # Safety
/// As for [`copy_out`].
#[cfg(not(megalon_loom))]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
pub(crate) unsafe fn copy_out_words(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    let head = (src as usize).wrapping_neg() % 8;
    let head = head.min(len);
    for (i, byte) in dst[..head].iter_mut().enumerate() {
        // SAFETY: in bounds (caller); every byte is a valid `AtomicU8`.
        *byte = unsafe { &*(src.add(i) as *const AtomicU8) }.load(Ordering::Relaxed);
    }
    let words = (len - head) / 8;
    for w in 0..words {
        let at = head + w * 8;
        // SAFETY: in bounds (caller) and 8-aligned (`head` brought us to a boundary).
        let word = unsafe { &*(src.add(at) as *const AtomicU64) }.load(Ordering::Relaxed);
        dst[at..at + 8].copy_from_slice(&word.to_ne_bytes());
    }
    let tail = head + words * 8;
    for (i, byte) in dst[tail..].iter_mut().enumerate() {
        // SAFETY: in bounds (caller).
        *byte = unsafe { &*(src.add(tail + i) as *const AtomicU8) }.load(Ordering::Relaxed);
    }
}

/// Copies `src` to shared memory at `dst` with atomic (relaxed) stores: bytes up to an
/// 8-byte boundary, then words, then the remaining bytes. (Not `rep movsb`, as
/// [`copy_out`] is on x86-64: a write copies and then writes its lines back, and with
/// `rep movsb` the peers' puts ran 7% to 9% slower, 1.51M-1.54M against 1.65M-1.82M per
/// second.)
///
/// # Safety
/// As for [`copy_out`].
#[cfg(not(megalon_loom))]
#[inline]
pub(crate) unsafe fn copy_in(dst: *mut u8, src: &[u8]) {
    let len = src.len();
    let head = ((dst as usize).wrapping_neg() % 8).min(len);
    for (i, byte) in src[..head].iter().enumerate() {
        // SAFETY: in bounds (caller).
        unsafe { &*(dst.add(i) as *const AtomicU8) }.store(*byte, Ordering::Relaxed);
    }
    let words = (len - head) / 8;
    for w in 0..words {
        let at = head + w * 8;
        let word = u64::from_ne_bytes(src[at..at + 8].try_into().expect("8"));
        // SAFETY: in bounds (caller) and 8-aligned.
        unsafe { &*(dst.add(at) as *const AtomicU64) }.store(word, Ordering::Relaxed);
    }
    let tail = head + words * 8;
    for (i, byte) in src[tail..].iter().enumerate() {
        // SAFETY: in bounds (caller).
        unsafe { &*(dst.add(tail + i) as *const AtomicU8) }.store(*byte, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod tests {
    use super::*;

    type CopyIn = unsafe fn(*mut u8, &[u8]);
    type CopyOut = unsafe fn(*const u8, &mut [u8]);

    /// Every start in a word and lengths around words and lines: each byte lands in
    /// place, nothing around it changes, and it reads back.
    fn round_trips_at_every_alignment(copy_in: CopyIn, copy_out: CopyOut) {
        let mut backing = vec![0u64; 64];
        for start in 0..16usize {
            for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 200] {
                backing.fill(u64::from_ne_bytes([0xa5; 8]));
                let base = backing.as_mut_ptr() as *mut u8;
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + start) as u8).collect();
                // SAFETY: start + len <= 216 < 512 bytes of `backing`, accessed only
                // through these helpers.
                unsafe { copy_in(base.add(start), &data) };
                // In place, and nothing around it touched (a copy in and out that were
                // wrong alike would still round-trip).
                let bytes: Vec<u8> = backing.iter().flat_map(|w| w.to_ne_bytes()).collect();
                assert_eq!(
                    &bytes[start..start + len],
                    &data[..],
                    "start {start} len {len}"
                );
                assert!(
                    bytes[..start]
                        .iter()
                        .chain(&bytes[start + len..])
                        .all(|&b| b == 0xa5),
                    "start {start} len {len}: bytes around the copy changed"
                );
                let mut out = vec![0u8; len];
                // SAFETY: as above.
                unsafe { copy_out(base.add(start), &mut out) };
                assert_eq!(out, data, "start {start} len {len}");
            }
        }
    }

    #[test]
    fn copies_round_trip_at_every_alignment() {
        round_trips_at_every_alignment(copy_in, copy_out);
    }

    #[test]
    fn word_copies_round_trip_at_every_alignment() {
        round_trips_at_every_alignment(copy_in, copy_out_words);
    }
}

#[cfg(all(test, not(megalon_loom)))]
mod kind_tests {
    use super::*;

    #[test]
    fn memory_kinds_parse_and_print_by_name() {
        for name in MEMORY_KIND_NAMES {
            let kind: MemoryKind = name.parse().expect("a known name");
            assert_eq!(kind.to_string(), name);
        }
        let wrong = "coherent".parse::<MemoryKind>().unwrap_err();
        assert_eq!(
            wrong.to_string(),
            "unknown memory kind \"coherent\": hardware, simulated or cxl[:name=value,...]"
        );
        assert!("hardware:scr_ns=1".parse::<MemoryKind>().is_err());
        let model: MemoryKind = "cxl:scr_ns=600".parse().expect("a model");
        assert_eq!(
            model,
            MemoryKind::Cxl(CxlModel {
                scr_ns: 600,
                ..CxlModel::default()
            })
        );
        assert_eq!(model.to_string(), "cxl:scr_ns=600");
        assert!("cxl:scr_ns".parse::<MemoryKind>().is_err());
        let seeded = MemoryKind::simulated(0).for_host(7, 1);
        assert_ne!(seeded, MemoryKind::simulated(0).for_host(7, 2));
        assert_eq!(MemoryKind::Hardware.for_host(7, 1), MemoryKind::Hardware);
    }
}
