//! Block traces from the ARC collection, and exact hit-ratio simulators to replay them.
//!
//! The page cache is measured on access patterns nobody in this project chose: the read
//! traces Megiddo and Modha collected for ARC. Any work that uses them must cite
//! N. Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache",
//! USENIX FAST 2003, pp. 115-130.
//!
//! This module owns three things:
//!
//! - [`Trace`]: reads a trace file (zstd-compressed when its name ends in `.zst`, plain
//!   text otherwise) into its [`Request`]s and says which 4 KiB pages they touch.
//! - [`LruSimulator`]: an exact LRU cache of a given number of pages, O(1) per access,
//!   which answers hit or miss; [`lru_hit_ratio`] replays a whole sequence.
//! - [`ClockSimulator`]: the textbook CLOCK with a reference count per frame, the policy
//!   the page cache approximates (DESIGN.md, section 9), for comparison with LRU.
//!
//! Both are a [`CacheSimulator`], which counts accesses and hits, under their
//! [`Replacement`] policy.
//!
//! # Format
//!
//! One request a line: four unsigned integers separated by spaces or tabs,
//!
//! | field | meaning |
//! | --- | --- |
//! | 1 | first 512-byte block |
//! | 2 | number of consecutive 512-byte blocks, at least 1 |
//! | 3 | ignored |
//! | 4 | request number (ignored) |
//!
//! Lines holding only white space are skipped; every other line must be a request, or
//! reading fails with [`TraceError::Malformed`], which names the line. A cache of 4 KiB
//! pages serves blocks `b .. b+n` by touching pages `b/8 ..= (b+n-1)/8`, in that order.
//!
//! # Example
//!
//! ```
//! use megalon_workload::trace::{lru_hit_ratio, Trace};
//!
//! // Blocks 7 and 8 straddle pages 0 and 1; blocks 8..16 are page 1 only.
//! let trace = Trace::from_reader("7 2 0 0\n8 8 0 1\n0 1 0 2\n".as_bytes())?;
//! assert_eq!(trace.request_count(), 3);
//! assert_eq!(trace.pages().collect::<Vec<_>>(), [0, 1, 1, 0]);
//! assert_eq!(trace.distinct_page_count(), 2);
//! assert_eq!(trace.max_page(), Some(1));
//! assert_eq!(trace.size_bytes(), 2 * 4096);
//!
//! // One page of cache: only the second touch of page 1 hits.
//! assert_eq!(lru_hit_ratio(trace.pages(), 1), 0.25);
//! # Ok::<(), megalon_workload::trace::TraceError>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::iter::FusedIterator;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use hashbrown::{HashMap, HashSet};
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// Bytes in one block of a trace.
pub const BLOCK_SIZE_BYTES: u64 = 512;

/// Bytes in one page of the page cache.
pub const PAGE_SIZE_BYTES: u64 = 4096;

/// Blocks in one page.
pub const BLOCKS_PER_PAGE: u64 = PAGE_SIZE_BYTES / BLOCK_SIZE_BYTES;

/// The most blocks one request may read (32 MiB). The ARC traces read at most 128.
///
/// It bounds the pages one line of a trace can make a reader count, so a corrupt line
/// answers an error instead of hours of counting.
pub const MAX_REQUEST_BLOCKS: u64 = 1 << 16;

/// One past the last block a request may read: the end of the largest file, in whole
/// pages, whose size in bytes fits a `u64`, so [`Trace::size_bytes`] cannot overflow.
pub const END_BLOCK_LIMIT: u64 = (u64::MAX / PAGE_SIZE_BYTES) * BLOCKS_PER_PAGE;

/// How many characters of a malformed line an error quotes.
pub const MAX_QUOTED_LINE_CHARS: usize = 120;

/// The fields of one line.
const FIELDS_PER_LINE: usize = 4;

/// Buffer sizes for reading the file and the decompressed text.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Why reading a trace failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Opening, reading or decompressing the trace failed.
    #[error("reading trace {}: {source}", Origin(.path))]
    Read {
        /// The file, when the trace came from one.
        path: Option<PathBuf>,
        /// What failed; a zstd decoding error comes as [`io::ErrorKind::InvalidData`].
        source: io::Error,
    },
    /// A line that is not a request.
    #[error("trace {}, line {line} {text:?}: {problem}", Origin(.path))]
    Malformed {
        /// The file, when the trace came from one.
        path: Option<PathBuf>,
        /// The line, from 1.
        line: usize,
        /// The line, without its line break, cut after [`MAX_QUOTED_LINE_CHARS`]
        /// characters; bytes that are not UTF-8 read as U+FFFD.
        text: String,
        /// What is wrong with it.
        problem: LineProblem,
    },
}

/// Displays an error's file, or says it came from a reader.
struct Origin<'a>(&'a Option<PathBuf>);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(formatter, "{}", path.display()),
            None => formatter.write_str("<reader>"),
        }
    }
}

/// What is wrong with a line of a trace, or with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineProblem {
    /// The line does not have four fields.
    #[error("expected 4 integers separated by spaces, found {found} fields")]
    FieldCount {
        /// How many it has.
        found: usize,
    },
    /// A field is not an unsigned integer that fits 64 bits.
    #[error("field {field} is not an unsigned 64-bit integer")]
    NotAnInteger {
        /// Which, from 1.
        field: usize,
    },
    /// A request of no blocks touches no page.
    #[error("a request of 0 blocks")]
    NoBlocks,
    /// A request of more than [`MAX_REQUEST_BLOCKS`] blocks.
    #[error("a request of {block_count} blocks, more than the limit of {limit}")]
    TooManyBlocks {
        /// The blocks it asks for.
        block_count: u64,
        /// [`MAX_REQUEST_BLOCKS`].
        limit: u64,
    },
    /// A request that reads past [`END_BLOCK_LIMIT`].
    #[error("blocks {first_block} + {block_count} end past block {limit}")]
    PastEnd {
        /// Its first block.
        first_block: u64,
        /// Its number of blocks.
        block_count: u64,
        /// [`END_BLOCK_LIMIT`].
        limit: u64,
    },
}

/// One read: `block_count` consecutive 512-byte blocks from `first_block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    first_block: u64,
    block_count: u64,
}

impl Request {
    /// A read of `block_count` blocks from `first_block`: at least 1 block, at most
    /// [`MAX_REQUEST_BLOCKS`], ending at or before [`END_BLOCK_LIMIT`].
    pub fn new(first_block: u64, block_count: u64) -> Result<Self, LineProblem> {
        if block_count == 0 {
            return Err(LineProblem::NoBlocks);
        }
        if block_count > MAX_REQUEST_BLOCKS {
            return Err(LineProblem::TooManyBlocks {
                block_count,
                limit: MAX_REQUEST_BLOCKS,
            });
        }
        match first_block.checked_add(block_count) {
            Some(end_block) if end_block <= END_BLOCK_LIMIT => Ok(Self {
                first_block,
                block_count,
            }),
            _ => Err(LineProblem::PastEnd {
                first_block,
                block_count,
                limit: END_BLOCK_LIMIT,
            }),
        }
    }

    /// The first block read.
    pub fn first_block(&self) -> u64 {
        self.first_block
    }

    /// How many blocks are read.
    pub fn block_count(&self) -> u64 {
        self.block_count
    }

    /// The pages that serve the request, in order: `b/8 ..= (b+n-1)/8`.
    pub fn pages(&self) -> RangeInclusive<u64> {
        // `new` checked `block_count >= 1` and that the sum does not overflow.
        let last_block = self.first_block + (self.block_count - 1);
        self.first_block / BLOCKS_PER_PAGE..=last_block / BLOCKS_PER_PAGE
    }
}

/// A block trace: its requests in order, and the pages they touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    requests: Vec<Request>,
    page_access_count: u64,
    distinct_page_count: usize,
    max_page: Option<u64>,
}

impl Trace {
    /// Reads a trace file: through a zstd decoder when its name ends in `.zst`, as plain
    /// text otherwise. See the [module docs](self) for the format.
    ///
    /// A `.zst` file may hold several frames one after another (as `cat a.zst b.zst`
    /// makes), and skippable frames; each frame's checksum, when it has one, is checked.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let with_path = |error: TraceError| error.with_path(path);
        let file = File::open(path).map_err(|source| TraceError::Read {
            path: Some(path.to_owned()),
            source,
        })?;
        let file = BufReader::with_capacity(READ_BUFFER_BYTES, file);
        let compressed = path.as_os_str().as_encoded_bytes().ends_with(b".zst");
        if compressed {
            let text = BufReader::with_capacity(READ_BUFFER_BYTES, ZstdFrames::new(file));
            Self::from_reader(text).map_err(with_path)
        } else {
            Self::from_reader(file).map_err(with_path)
        }
    }

    /// Reads a trace from text. See the [module docs](self) for the format.
    pub fn from_reader(mut reader: impl BufRead) -> Result<Self, TraceError> {
        let mut requests = Vec::new();
        let mut line = Vec::new();
        let mut line_number = 0;
        loop {
            line.clear();
            let read = reader
                .read_until(b'\n', &mut line)
                .map_err(|source| TraceError::Read { path: None, source })?;
            if read == 0 {
                break;
            }
            line_number += 1;
            let text = trim_line_break(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let request = parse_request(text).map_err(|problem| TraceError::Malformed {
                path: None,
                line: line_number,
                text: quote(text),
                problem,
            })?;
            requests.push(request);
        }
        Ok(Self::from_requests(requests))
    }

    /// A trace of the given requests.
    pub fn from_requests(requests: Vec<Request>) -> Self {
        let mut distinct_pages = HashSet::new();
        let mut page_access_count = 0;
        let mut max_page = None;
        for request in &requests {
            let pages = request.pages();
            // At most `MAX_REQUEST_BLOCKS / BLOCKS_PER_PAGE + 1` pages per request.
            page_access_count += pages.end() - pages.start() + 1;
            max_page = max_page.max(Some(*pages.end()));
            distinct_pages.extend(pages);
        }
        Self {
            requests,
            page_access_count,
            distinct_page_count: distinct_pages.len(),
            max_page,
        }
    }

    /// The requests, in order.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// How many requests the trace has.
    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    /// The pages the requests touch, in order, a page once for each request that
    /// touches it.
    pub fn pages(&self) -> Pages<'_> {
        Pages {
            requests: self.requests.iter(),
            current: None,
            remaining: self.page_access_count,
        }
    }

    /// How many pages [`pages`](Self::pages) yields.
    pub fn page_access_count(&self) -> u64 {
        self.page_access_count
    }

    /// How many different pages the trace touches: the cache size at which every
    /// access but the first to each page hits.
    pub fn distinct_page_count(&self) -> usize {
        self.distinct_page_count
    }

    /// The highest page touched, `None` for a trace with no requests.
    pub fn max_page(&self) -> Option<u64> {
        self.max_page
    }

    /// The size of a file that holds every page touched: `(max_page + 1) * 4096`, or 0
    /// for a trace with no requests.
    pub fn size_bytes(&self) -> u64 {
        // `Request::new` keeps every block below `END_BLOCK_LIMIT`, so this fits.
        self.max_page
            .map_or(0, |max_page| (max_page + 1) * PAGE_SIZE_BYTES)
    }
}

impl TraceError {
    /// The same error, naming the file it came from.
    fn with_path(mut self, file: &Path) -> Self {
        match &mut self {
            Self::Read { path, .. } | Self::Malformed { path, .. } => {
                *path = Some(file.to_owned());
            }
        }
        self
    }
}

/// The pages a trace touches, in order: see [`Trace::pages`].
#[derive(Clone, Debug)]
pub struct Pages<'a> {
    requests: std::slice::Iter<'a, Request>,
    /// The pages of the request being walked, `None` before the first.
    current: Option<RangeInclusive<u64>>,
    remaining: u64,
}

impl Iterator for Pages<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        loop {
            if let Some(page) = self.current.as_mut().and_then(Iterator::next) {
                self.remaining -= 1;
                return Some(page);
            }
            self.current = Some(self.requests.next()?.pages());
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match usize::try_from(self.remaining) {
            Ok(remaining) => (remaining, Some(remaining)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl FusedIterator for Pages<'_> {}

/// The line without its `\n` or `\r\n`.
fn trim_line_break(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The line as an error quotes it.
fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(MAX_QUOTED_LINE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// Parses one line that is not blank.
fn parse_request(line: &[u8]) -> Result<Request, LineProblem> {
    let mut values = [0u64; FIELDS_PER_LINE];
    let mut found = 0;
    for field in line
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty())
    {
        if found < FIELDS_PER_LINE {
            values[found] =
                parse_u64(field).ok_or(LineProblem::NotAnInteger { field: found + 1 })?;
        }
        found += 1;
    }
    if found != FIELDS_PER_LINE {
        return Err(LineProblem::FieldCount { found });
    }
    let [first_block, block_count, _ignored, _request_number] = values;
    Request::new(first_block, block_count)
}

/// Parses decimal digits, nothing else, into a `u64` that does not overflow.
fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &digit| {
        if !digit.is_ascii_digit() {
            return None;
        }
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

/// The text of a zstd stream of one or more frames, decoded a block at a time.
///
/// ruzstd's `StreamingDecoder` does the same for a single frame but neither goes on to
/// the next frame nor checks the frame's checksum; this does both.
struct ZstdFrames<R> {
    source: R,
    decoder: FrameDecoder,
    /// Whether `decoder` is in a frame whose text has not all been read.
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        Self {
            source,
            decoder: FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// Checks the checksum of a frame whose text has all been read.
    fn check_frame(&self) -> io::Result<()> {
        let stored = self.decoder.get_checksum_from_data();
        let computed = self.decoder.get_calculated_checksum();
        match (stored, computed) {
            (Some(stored), Some(computed)) if stored != computed => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "zstd frame checksum {stored:#010x}, but its text hashes to {computed:#010x}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Starts the next frame, skipping skippable frames; `false` at the end of the stream.
    fn next_frame(&mut self) -> io::Result<bool> {
        loop {
            if self.source.fill_buf()?.is_empty() {
                return Ok(false);
            }
            match self.decoder.reset(&mut self.source) {
                Ok(()) => return Ok(true),
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let length = u64::from(length);
                    let skipped = io::copy(&mut (&mut self.source).take(length), &mut io::sink())?;
                    if skipped != length {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("a skippable zstd frame of {length} bytes has only {skipped}"),
                        ));
                    }
                }
                Err(error) => return Err(io::Error::new(io::ErrorKind::InvalidData, error)),
            }
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if buffer.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                while self.decoder.can_collect() == 0 && !self.decoder.is_finished() {
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBlocks(1))
                        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
                }
                if self.decoder.can_collect() > 0 {
                    return self.decoder.read(buffer);
                }
                // The frame is finished and its text all read.
                self.check_frame()?;
                self.in_frame = false;
            }
            if !self.next_frame()? {
                return Ok(0);
            }
            self.in_frame = true;
        }
    }
}

/// A replacement policy of a [`CacheSimulator`]: which pages are resident, and which one
/// leaves when a page arrives at a full cache.
pub trait Replacement {
    /// Accesses `page` in a cache of `capacity_pages` pages (at least 1): `true` if it was
    /// resident (a hit). Either way it is resident afterwards.
    fn access(&mut self, page: u64, capacity_pages: usize) -> bool;

    /// Whether `page` is resident, without counting an access or changing the state.
    fn contains(&self, page: u64) -> bool;

    /// How many pages are resident.
    fn resident_pages(&self) -> usize;
}

/// A cache of page numbers under the replacement policy `P`: answers whether each access
/// hits, and counts accesses and hits.
#[derive(Clone, Debug)]
pub struct CacheSimulator<P> {
    capacity_pages: usize,
    policy: P,
    access_count: u64,
    hit_count: u64,
}

/// An exact LRU cache of page numbers (see [`Lru`]).
pub type LruSimulator = CacheSimulator<Lru>;

/// The textbook CLOCK cache of page numbers (see [`Clock`]).
pub type ClockSimulator = CacheSimulator<Clock>;

impl<P: Replacement> CacheSimulator<P> {
    fn with_policy(capacity_pages: usize, policy: P) -> Self {
        Self {
            capacity_pages,
            policy,
            access_count: 0,
            hit_count: 0,
        }
    }

    /// Accesses `page`: `true` if it was resident (a hit). With a capacity of 0, every
    /// access misses.
    pub fn access(&mut self, page: u64) -> bool {
        self.access_count += 1;
        if self.capacity_pages == 0 {
            return false;
        }
        let hit = self.policy.access(page, self.capacity_pages);
        self.hit_count += u64::from(hit);
        hit
    }

    /// Whether `page` is resident, without counting an access or changing the state.
    pub fn contains(&self, page: u64) -> bool {
        self.policy.contains(page)
    }

    /// The most pages the cache holds.
    pub fn capacity_pages(&self) -> usize {
        self.capacity_pages
    }

    /// How many pages are resident.
    pub fn resident_pages(&self) -> usize {
        self.policy.resident_pages()
    }

    /// Accesses so far.
    pub fn access_count(&self) -> u64 {
        self.access_count
    }

    /// Accesses so far that hit.
    pub fn hit_count(&self) -> u64 {
        self.hit_count
    }

    /// Hits divided by accesses so far; 0 before the first access.
    pub fn hit_ratio(&self) -> f64 {
        if self.access_count == 0 {
            0.0
        } else {
            self.hit_count as f64 / self.access_count as f64
        }
    }
}

/// The most pages a simulator reserves room for before it is used; it grows past this as
/// pages arrive.
const INITIAL_RESERVE_PAGES: usize = 1 << 16;

/// The end of the recency list, or a free link.
const NO_NODE: usize = usize::MAX;

/// A resident page in the recency list of [`Lru`].
#[derive(Clone, Copy, Debug)]
struct LruNode {
    page: u64,
    /// The node used more recently, or `NO_NODE` for the most recent.
    newer: usize,
    /// The node used less recently, or `NO_NODE` for the least recent.
    older: usize,
}

/// Exact LRU: on a miss in a full cache the least recently used page leaves.
///
/// A hash map finds a page's node in a list, ordered by recency, whose links are indices
/// into a `Vec`; an access moves the node to the front and a miss on a full cache reuses
/// the node at the back, so an access costs O(1) and, once the cache is full, allocates
/// nothing.
#[derive(Clone, Debug)]
pub struct Lru {
    node_of_page: HashMap<u64, usize>,
    nodes: Vec<LruNode>,
    newest: usize,
    oldest: usize,
}

impl LruSimulator {
    /// An empty cache that holds up to `capacity_pages` pages; with 0, every access misses.
    pub fn new(capacity_pages: usize) -> Self {
        let reserve = capacity_pages.min(INITIAL_RESERVE_PAGES);
        let lru = Lru {
            node_of_page: HashMap::with_capacity(reserve),
            nodes: Vec::with_capacity(reserve),
            newest: NO_NODE,
            oldest: NO_NODE,
        };
        Self::with_policy(capacity_pages, lru)
    }
}

impl Replacement for Lru {
    /// The page becomes the most recently used one; on a miss in a full cache the least
    /// recently used one leaves.
    fn access(&mut self, page: u64, capacity_pages: usize) -> bool {
        if let Some(&node) = self.node_of_page.get(&page) {
            if node != self.newest {
                self.unlink(node);
                self.push_newest(node);
            }
            return true;
        }
        let node = if self.nodes.len() < capacity_pages {
            self.nodes.push(LruNode {
                page,
                newer: NO_NODE,
                older: NO_NODE,
            });
            self.nodes.len() - 1
        } else {
            let victim = self.oldest;
            debug_assert_ne!(victim, NO_NODE, "a full cache has a least recent page");
            let evicted = self.nodes[victim].page;
            let removed = self.node_of_page.remove(&evicted);
            debug_assert_eq!(removed, Some(victim));
            self.unlink(victim);
            self.nodes[victim].page = page;
            victim
        };
        self.push_newest(node);
        self.node_of_page.insert(page, node);
        debug_assert_eq!(self.node_of_page.len(), self.nodes.len());
        false
    }

    fn contains(&self, page: u64) -> bool {
        self.node_of_page.contains_key(&page)
    }

    fn resident_pages(&self) -> usize {
        self.nodes.len()
    }
}

impl Lru {
    /// Takes `node` out of the recency list.
    fn unlink(&mut self, node: usize) {
        let LruNode { newer, older, .. } = self.nodes[node];
        match newer {
            NO_NODE => self.newest = older,
            newer => self.nodes[newer].older = older,
        }
        match older {
            NO_NODE => self.oldest = newer,
            older => self.nodes[older].newer = newer,
        }
    }

    /// Puts `node`, not in the list, at its front.
    fn push_newest(&mut self, node: usize) {
        self.nodes[node].newer = NO_NODE;
        self.nodes[node].older = self.newest;
        match self.newest {
            NO_NODE => self.oldest = node,
            newest => self.nodes[newest].newer = node,
        }
        self.newest = node;
    }
}

/// The hit ratio of an LRU cache of `capacity_pages` pages, empty at first, over `pages`.
pub fn lru_hit_ratio(pages: impl IntoIterator<Item = u64>, capacity_pages: usize) -> f64 {
    let mut cache = LruSimulator::new(capacity_pages);
    for page in pages {
        cache.access(page);
    }
    cache.hit_ratio()
}

/// The textbook CLOCK, with a reference count per frame.
///
/// The frames form a ring with a hand. A hit raises the page's count by one, up to the
/// maximum; a page enters with a count of 1 (its first access is a reference). On a
/// miss in a full cache the hand sweeps: a frame with a count above 0 has it lowered and
/// is passed; the first frame at 0 gives up its page to the new one, and the hand moves
/// on past it. With a maximum of 1 this is CLOCK with a reference bit (second chance);
/// larger maximums approach LFU-like behaviour; 0 is FIFO. Each lowering undoes one
/// earlier raise, so an access costs O(1) amortized.
#[derive(Clone, Debug)]
pub struct Clock {
    max_reference_count: u8,
    frame_of_page: HashMap<u64, usize>,
    /// The page in each frame; frames fill from 0 up before the hand first moves.
    pages: Vec<u64>,
    reference_counts: Vec<u8>,
    hand: usize,
}

impl ClockSimulator {
    /// An empty CLOCK cache of `capacity_pages` frames with a reference bit: a
    /// maximum reference count of 1.
    pub fn new(capacity_pages: usize) -> Self {
        Self::with_max_reference_count(capacity_pages, 1)
    }

    /// An empty CLOCK cache of `capacity_pages` frames whose reference counts go up to
    /// `max_reference_count`; with 0 pages, every access misses.
    pub fn with_max_reference_count(capacity_pages: usize, max_reference_count: u8) -> Self {
        let reserve = capacity_pages.min(INITIAL_RESERVE_PAGES);
        let clock = Clock {
            max_reference_count,
            frame_of_page: HashMap::with_capacity(reserve),
            pages: Vec::with_capacity(reserve),
            reference_counts: Vec::with_capacity(reserve),
            hand: 0,
        };
        Self::with_policy(capacity_pages, clock)
    }
}

impl Replacement for Clock {
    fn access(&mut self, page: u64, capacity_pages: usize) -> bool {
        if let Some(&frame) = self.frame_of_page.get(&page) {
            let count = &mut self.reference_counts[frame];
            *count = count.saturating_add(1).min(self.max_reference_count);
            return true;
        }
        let entry_count = self.max_reference_count.min(1);
        if self.pages.len() < capacity_pages {
            self.frame_of_page.insert(page, self.pages.len());
            self.pages.push(page);
            self.reference_counts.push(entry_count);
            return false;
        }
        while self.reference_counts[self.hand] > 0 {
            self.reference_counts[self.hand] -= 1;
            self.hand = (self.hand + 1) % capacity_pages;
        }
        let evicted = self.pages[self.hand];
        let removed = self.frame_of_page.remove(&evicted);
        debug_assert_eq!(removed, Some(self.hand));
        self.frame_of_page.insert(page, self.hand);
        self.pages[self.hand] = page;
        self.reference_counts[self.hand] = entry_count;
        self.hand = (self.hand + 1) % capacity_pages;
        false
    }

    fn contains(&self, page: u64) -> bool {
        self.frame_of_page.contains_key(&page)
    }

    fn resident_pages(&self) -> usize {
        self.pages.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Instant;

    use proptest::prelude::*;
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};

    use super::*;

    fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::from_reader(text.as_bytes())
    }

    fn pages_of(text: &str) -> Vec<u64> {
        parse(text).unwrap().pages().collect()
    }

    /// The line number and problem of a trace that must not parse.
    fn malformed(text: &str) -> (usize, String, LineProblem) {
        match parse(text) {
            Err(TraceError::Malformed {
                line,
                text,
                problem,
                ..
            }) => (line, text, problem),
            other => panic!("{text:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn requests_touch_the_pages_that_hold_their_blocks() {
        // Blocks 7 and 8 are the last of page 0 and the first of page 1.
        assert_eq!(pages_of("7 2 0 0\n"), [0, 1]);
        // Blocks 8..16 are exactly page 1.
        assert_eq!(pages_of("8 8 0 0\n"), [1]);
        assert_eq!(pages_of("0 1 0 0\n"), [0]);
        assert_eq!(pages_of("0 8 0 0\n"), [0]);
        assert_eq!(pages_of("0 9 0 0\n"), [0, 1]);
        assert_eq!(pages_of("15 2 0 0\n"), [1, 2]);
        assert_eq!(pages_of("9 23 0 0\n"), [1, 2, 3]);
        assert_eq!(pages_of("9 24 0 0\n"), [1, 2, 3, 4]);

        let trace = parse("7 2 0 0\n8 8 0 1\n1842745 64 0 2\n0 1 0 3\n").unwrap();
        assert_eq!(trace.request_count(), 4);
        assert_eq!(
            trace.requests()[2],
            Request::new(1_842_745, 64).unwrap(),
            "first block, then block count"
        );
        let pages: Vec<u64> = trace.pages().collect();
        let third: Vec<u64> = (230_343..=230_351).collect();
        assert_eq!(pages[..3], [0, 1, 1]);
        assert_eq!(pages[3..12], third[..]);
        assert_eq!(pages[12..], [0]);
        assert_eq!(trace.page_access_count(), 13);
        assert_eq!(trace.pages().size_hint(), (13, Some(13)));
        assert_eq!(trace.distinct_page_count(), 11);
        assert_eq!(trace.max_page(), Some(230_351));
        assert_eq!(trace.size_bytes(), 230_352 * 4096);
    }

    #[test]
    fn blank_lines_tabs_and_crlf_are_accepted() {
        let trace = parse("\n0 1 0 0\r\n  \n\t8\t1\t0\t1  \n\n").unwrap();
        assert_eq!(trace.request_count(), 2);
        assert_eq!(trace.pages().collect::<Vec<_>>(), [0, 1]);
        // No final line break.
        assert_eq!(pages_of("0 1 0 0\n16 1 5 1"), [0, 2]);
    }

    #[test]
    fn an_empty_trace_has_no_pages() {
        let trace = parse("").unwrap();
        assert_eq!(trace.request_count(), 0);
        assert_eq!(trace.pages().next(), None);
        assert_eq!(trace.distinct_page_count(), 0);
        assert_eq!(trace.max_page(), None);
        assert_eq!(trace.size_bytes(), 0);
    }

    #[test]
    fn bad_lines_are_rejected_with_their_number() {
        assert_eq!(
            malformed("0 1 0 0\n\n1 2 3\n"),
            (3, "1 2 3".to_owned(), LineProblem::FieldCount { found: 3 })
        );
        assert_eq!(
            malformed("1 2 3 4 5\n"),
            (
                1,
                "1 2 3 4 5".to_owned(),
                LineProblem::FieldCount { found: 5 }
            )
        );
        assert_eq!(
            malformed("0 1 0 0\n0 x 0 0\r\n"),
            (
                2,
                "0 x 0 0".to_owned(),
                LineProblem::NotAnInteger { field: 2 }
            )
        );
        assert_eq!(
            malformed("-1 1 0 0\n").2,
            LineProblem::NotAnInteger { field: 1 }
        );
        assert_eq!(
            malformed("1 1 0 18446744073709551616\n").2,
            LineProblem::NotAnInteger { field: 4 }
        );
        assert_eq!(malformed("1 0 0 0\n").2, LineProblem::NoBlocks);
        assert_eq!(
            malformed("1 65537 0 0\n").2,
            LineProblem::TooManyBlocks {
                block_count: 65_537,
                limit: MAX_REQUEST_BLOCKS
            }
        );
        assert!(parse("1 65536 0 0\n").is_ok());
        assert_eq!(
            malformed("18446744073709551615 1 0 0\n").2,
            LineProblem::PastEnd {
                first_block: u64::MAX,
                block_count: 1,
                limit: END_BLOCK_LIMIT
            }
        );
        let last = format!("{} 1 0 0\n", END_BLOCK_LIMIT - 1);
        let trace = parse(&last).unwrap();
        assert_eq!(trace.size_bytes(), u64::MAX / 4096 * 4096);
        assert!(matches!(
            malformed(&format!("{END_BLOCK_LIMIT} 1 0 0\n")).2,
            LineProblem::PastEnd { .. }
        ));

        let (line, text, _) = malformed(&format!("0 1 0 0\n{}\n", "9".repeat(500)));
        assert_eq!(line, 2);
        assert_eq!(text, format!("{}...", "9".repeat(MAX_QUOTED_LINE_CHARS)));

        let error = parse("0 1 0 0\n0 x 0 0\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "trace <reader>, line 2 \"0 x 0 0\": field 2 is not an unsigned 64-bit integer"
        );
    }

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: &[u8]) -> Self {
            let path =
                std::env::temp_dir().join(format!("megalon-trace-{}-{name}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            Self(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn compress(text: &str) -> Vec<u8> {
        compress_to_vec(text.as_bytes(), CompressionLevel::Fastest)
    }

    #[test]
    fn open_reads_plain_and_zstd_files_and_names_them_in_errors() {
        let text = "7 2 0 0\n8 8 0 1\n";
        let plain = TempFile::new("plain.lis", text.as_bytes());
        let compressed = TempFile::new("one.lis.zst", &compress(text));
        let expected = parse(text).unwrap();
        assert_eq!(Trace::open(&plain.0).unwrap(), expected);
        assert_eq!(Trace::open(&compressed.0).unwrap(), expected);

        // Two frames with a skippable frame between them, and a line split across them.
        let mut bytes = compress("7 2 0 0\n8 8");
        bytes.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&compress(" 0 1\n"));
        let frames = TempFile::new("frames.lis.zst", &bytes);
        assert_eq!(Trace::open(&frames.0).unwrap(), expected);

        let bad = TempFile::new("bad.lis.zst", &compress("0 1 0 0\n1 1 0\n"));
        match Trace::open(&bad.0) {
            Err(TraceError::Malformed {
                path, line, text, ..
            }) => {
                assert_eq!(path.as_deref(), Some(bad.0.as_path()));
                assert_eq!((line, text.as_str()), (2, "1 1 0"));
            }
            other => panic!("{other:?}"),
        }

        // Not zstd, a corrupt checksum, a cut-off frame, a missing file.
        let not_zstd = TempFile::new("text.lis.zst", text.as_bytes());
        let mut corrupt = compress(text);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        let corrupt = TempFile::new("corrupt.lis.zst", &corrupt);
        let whole = compress(text);
        let cut = TempFile::new("cut.lis.zst", &whole[..whole.len() - 5]);
        let missing = std::env::temp_dir().join("megalon-trace-no-such-file.lis");
        for path in [&not_zstd.0, &corrupt.0, &cut.0, &missing] {
            match Trace::open(path) {
                Err(error @ TraceError::Read { .. }) => {
                    let TraceError::Read { path: named, .. } = &error else {
                        unreachable!()
                    };
                    assert_eq!(named.as_deref(), Some(path.as_path()));
                    assert!(error.to_string().contains(&*path.to_string_lossy()));
                }
                other => panic!("{} read as {other:?}", path.display()),
            }
        }
    }

    /// LRU the slow way: a queue from least to most recent, searched on every access.
    struct NaiveLru {
        capacity_pages: usize,
        queue: VecDeque<u64>,
    }

    impl NaiveLru {
        fn access(&mut self, page: u64) -> bool {
            let hit = match self.queue.iter().position(|&resident| resident == page) {
                Some(index) => {
                    self.queue.remove(index);
                    true
                }
                None => false,
            };
            self.queue.push_back(page);
            if self.queue.len() > self.capacity_pages {
                self.queue.pop_front();
            }
            hit
        }
    }

    /// FIFO the slow way.
    struct NaiveFifo {
        capacity_pages: usize,
        queue: VecDeque<u64>,
    }

    impl NaiveFifo {
        fn access(&mut self, page: u64) -> bool {
            if self.queue.contains(&page) {
                return true;
            }
            self.queue.push_back(page);
            if self.queue.len() > self.capacity_pages {
                self.queue.pop_front();
            }
            false
        }
    }

    fn lru_hits(capacity_pages: usize, pages: &[u64]) -> Vec<bool> {
        let mut cache = LruSimulator::new(capacity_pages);
        pages.iter().map(|&page| cache.access(page)).collect()
    }

    fn clock_hits(capacity_pages: usize, max_count: u8, pages: &[u64]) -> Vec<bool> {
        let mut cache = ClockSimulator::with_max_reference_count(capacity_pages, max_count);
        pages.iter().map(|&page| cache.access(page)).collect()
    }

    /// Belady's reference string, used in every operating-systems textbook.
    const BELADY: [u64; 12] = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];

    #[test]
    fn lru_matches_hand_worked_examples() {
        // Capacity 2, pages 1 2 1 3 2 (resident pages, most recent first):
        // 1 miss [1]; 2 miss [2 1]; 1 hit [1 2]; 3 miss, evicts 2 [3 1];
        // 2 miss, evicts 1 [2 3]. Only the third access hits.
        assert_eq!(
            lru_hits(2, &[1, 2, 1, 3, 2]),
            [false, false, true, false, false]
        );
        assert_eq!(lru_hit_ratio([1, 2, 1, 3, 2], 2), 0.2);

        // Belady's string, 3 pages: 1 2 3 miss [3 2 1]; 4 evicts 1; 1 evicts 2;
        // 2 evicts 3 [2 1 4]; 5 evicts 4 [5 2 1]; 1 hit; 2 hit [2 1 5]; 3 evicts 5;
        // 4 evicts 1; 5 evicts 2. 10 misses, 2 hits.
        let mut expected = [false; 12];
        expected[7] = true;
        expected[8] = true;
        assert_eq!(lru_hits(3, &BELADY), expected);
        // 4 pages: 1 2 3 4 miss; 1 hit; 2 hit [2 1 4 3]; 5 evicts 3; 1 hit; 2 hit
        // [2 1 5 4]; 3 evicts 4; 4 evicts 5; 5 evicts 1. 8 misses, 4 hits.
        let mut expected = [false; 12];
        for hit in [4, 5, 7, 8] {
            expected[hit] = true;
        }
        assert_eq!(lru_hits(4, &BELADY), expected);

        // No room: nothing hits. Room for everything: all but first touches hit.
        assert_eq!(lru_hits(0, &[1, 1, 1]), [false; 3]);
        assert_eq!(lru_hit_ratio(BELADY, 5), 7.0 / 12.0);

        let mut cache = LruSimulator::new(2);
        assert_eq!(cache.hit_ratio(), 0.0);
        for page in [1, 2, 1, 3] {
            cache.access(page);
        }
        assert!(cache.contains(1) && cache.contains(3) && !cache.contains(2));
        assert_eq!(cache.resident_pages(), 2);
        assert_eq!(cache.capacity_pages(), 2);
        assert_eq!((cache.hit_count(), cache.access_count()), (1, 4));
    }

    #[test]
    fn clock_matches_hand_worked_examples() {
        // A reference bit (maximum count 1), 3 frames, Belady's string. Frames f0 f1 f2
        // as page:count, hand at the frame marked `>`.
        // 1 2 3 miss: >1:1 2:1 3:1.
        // 4: the hand clears all three and evicts 1: 4:1 >2:0 3:0.
        // 1: evicts 2: 4:1 1:1 >3:0.  2: evicts 3: >4:1 1:1 2:1.
        // 5: clears all three, evicts 4: 5:1 >1:0 2:0.  1 hit, 2 hit: 5:1 >1:1 2:1.
        // 3: clears 1, 2, 5, evicts 1: 5:0 3:1 >2:0.  4: evicts 2: >5:0 3:1 4:1.
        // 5 hit. 9 misses, 3 hits.
        let mut expected = [false; 12];
        for hit in [7, 8, 11] {
            expected[hit] = true;
        }
        assert_eq!(clock_hits(3, 1, &BELADY), expected);
        assert!(!ClockSimulator::new(3).access(1), "`new` starts empty");

        // A maximum count of 0 is FIFO: Belady's anomaly, 3 hits with 3 frames but only
        // 2 with 4.
        let hits = |frames| {
            clock_hits(frames, 0, &BELADY)
                .iter()
                .filter(|&&h| h)
                .count()
        };
        assert_eq!((hits(3), hits(4)), (3, 2));

        // Counts above 1 keep a page that was used often. 2 frames, pages 1 1 1 2 3 1.
        // Maximum 3: 1 1 1 -> >1:3; 2 -> >1:3 2:1; 3: the hand lowers 1 to 2, 2 to 0,
        // 1 to 1, and evicts 2 -> >1:1 3:1; 1 hits.
        // Maximum 1: 1 1 1 -> >1:1; 2 -> >1:1 2:1; 3: the hand lowers both and evicts
        // 1 -> 3:1 >2:0; 1 misses.
        assert_eq!(
            clock_hits(2, 3, &[1, 1, 1, 2, 3, 1]),
            [false, true, true, false, false, true]
        );
        assert_eq!(
            clock_hits(2, 1, &[1, 1, 1, 2, 3, 1]),
            [false, true, true, false, false, false]
        );

        let mut cache = ClockSimulator::new(2);
        for page in [1, 2, 1, 3] {
            cache.access(page);
        }
        assert_eq!((cache.hit_count(), cache.access_count()), (1, 4));
        assert_eq!(cache.hit_ratio(), 0.25);
        assert_eq!(cache.resident_pages(), 2);
        assert_eq!(cache.capacity_pages(), 2);
        assert!(cache.contains(3));
        assert_eq!(clock_hits(0, 1, &[1, 1]), [false, false]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn lru_agrees_with_a_naive_lru(
            capacity_pages in 0usize..10,
            pages in prop::collection::vec(0u64..16, 0..300),
        ) {
            let mut naive = NaiveLru { capacity_pages, queue: VecDeque::new() };
            let mut cache = LruSimulator::new(capacity_pages);
            for (index, &page) in pages.iter().enumerate() {
                prop_assert_eq!(cache.access(page), naive.access(page), "access {}", index);
                prop_assert_eq!(cache.resident_pages(), naive.queue.len());
            }
            for &page in &naive.queue {
                prop_assert!(cache.contains(page));
            }
        }

        #[test]
        fn clock_without_reference_counts_agrees_with_a_naive_fifo(
            capacity_pages in 0usize..10,
            pages in prop::collection::vec(0u64..16, 0..300),
        ) {
            let mut naive = NaiveFifo { capacity_pages, queue: VecDeque::new() };
            let mut cache = ClockSimulator::with_max_reference_count(capacity_pages, 0);
            for (index, &page) in pages.iter().enumerate() {
                prop_assert_eq!(cache.access(page), naive.access(page), "access {}", index);
            }
        }

        #[test]
        fn a_cache_that_holds_every_page_misses_each_page_once(
            max_count in 0u8..4,
            pages in prop::collection::vec(0u64..64, 0..300),
        ) {
            let distinct = pages.iter().collect::<HashSet<_>>().len();
            let hits = (pages.len() - distinct) as u64;
            let mut lru = LruSimulator::new(distinct);
            let mut clock = ClockSimulator::with_max_reference_count(distinct, max_count);
            for &page in &pages {
                lru.access(page);
                clock.access(page);
            }
            prop_assert_eq!(lru.hit_count(), hits);
            prop_assert_eq!(clock.hit_count(), hits);
        }

        #[test]
        fn trace_pages_are_the_pages_of_each_block(
            requests in prop::collection::vec((0u64..10_000, 1u64..40), 0..50),
        ) {
            let text: String = requests
                .iter()
                .enumerate()
                .map(|(number, (first, count))| format!("{first} {count} 0 {number}\n"))
                .collect();
            let trace = parse(&text).unwrap();
            let mut expected = Vec::new();
            for &(first, count) in &requests {
                let mut pages: Vec<u64> = (first..first + count).map(|block| block / 8).collect();
                pages.dedup();
                expected.extend(pages);
            }
            prop_assert_eq!(trace.pages().collect::<Vec<_>>(), expected.clone());
            prop_assert_eq!(trace.page_access_count(), expected.len() as u64);
            prop_assert_eq!(trace.max_page(), expected.iter().copied().max());
            let distinct = expected.iter().collect::<HashSet<_>>().len();
            prop_assert_eq!(trace.distinct_page_count(), distinct);
        }
    }

    /// Where the ARC traces are: `$MEGALON_ARC_TRACES`, else `shared/traces/arc` beside
    /// the work tree; `None`, with a note, if they are not there.
    fn arc_traces() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("MEGALON_ARC_TRACES") {
            let dir = PathBuf::from(dir);
            assert!(
                dir.is_dir(),
                "MEGALON_ARC_TRACES={} is not a directory",
                dir.display()
            );
            return Some(dir);
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/arc");
        if dir.is_dir() {
            Some(dir)
        } else {
            eprintln!(
                "note: skipped, no ARC traces at {} (set MEGALON_ARC_TRACES)",
                dir.display()
            );
            None
        }
    }

    /// The traces, their line counts from the README, and counts measured with
    /// `zstd -dc | awk`: page accesses, distinct pages, highest page.
    const ARC_TRACES: [(&str, usize, u64, usize, u64); 2] = [
        ("OLTP.lis.zst", 914_145, 914_145, 23_361, 23_360),
        ("P3.lis.zst", 238_578, 611_918, 102_348, 1_312_344),
    ];

    #[test]
    fn the_arc_traces_have_the_documented_number_of_requests() {
        let Some(dir) = arc_traces() else {
            return;
        };
        for (name, requests, page_accesses, distinct_pages, max_page) in ARC_TRACES {
            let trace = Trace::open(dir.join(name)).unwrap();
            assert_eq!(trace.request_count(), requests, "{name}");
            assert_eq!(trace.page_access_count(), page_accesses, "{name}");
            assert_eq!(trace.distinct_page_count(), distinct_pages, "{name}");
            assert_eq!(trace.max_page(), Some(max_page), "{name}");
        }
    }

    /// Prints how long reading each trace takes and its hit ratios; run with
    /// `cargo test --release -p megalon-workload -- --ignored --nocapture arc_hit_ratios`.
    #[test]
    #[ignore = "prints measurements; run by hand in release mode"]
    fn arc_hit_ratios() {
        let Some(dir) = arc_traces() else {
            return;
        };
        for (name, ..) in ARC_TRACES {
            let started = Instant::now();
            let trace = Trace::open(dir.join(name)).unwrap();
            let read_ms = started.elapsed().as_secs_f64() * 1e3;
            println!(
                "{name}: {} requests, {} page accesses, {} distinct pages, read in {read_ms:.0} ms",
                trace.request_count(),
                trace.page_access_count(),
                trace.distinct_page_count()
            );
            for percent in [1, 5, 20] {
                let capacity_pages = trace.distinct_page_count() * percent / 100;
                let started = Instant::now();
                let lru = lru_hit_ratio(trace.pages(), capacity_pages);
                let lru_ms = started.elapsed().as_secs_f64() * 1e3;
                let mut clock = ClockSimulator::new(capacity_pages);
                trace.pages().for_each(|page| {
                    clock.access(page);
                });
                println!(
                    "  {percent:>2}% = {capacity_pages:>6} pages: LRU {:.2}% ({lru_ms:.0} ms), CLOCK {:.2}%",
                    lru * 100.0,
                    clock.hit_ratio() * 100.0
                );
            }
        }
    }
}
