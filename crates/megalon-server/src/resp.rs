//! RESP2 on the wire: the [`Reader`] that cuts one connection's bytes into commands
//! (arrays of bulk strings, as every Redis client sends them, or inline lines, as typed
//! into a terminal), with the limits that keep one client from holding unbounded memory,
//! and the writers of replies.
//!
//! The reader is flat on purpose: a request is an array of bulk strings, nothing nests,
//! so parsing needs no recursion (a general RESP decoder recurses once per nested array,
//! with no bound a client could not exceed), and each bulk string's length is checked
//! from its header, before its bytes arrive. A command it refuses (a bulk string over the
//! limit, too many arguments, a request over the limit) is answered with one error and
//! its remaining bytes are skipped as they arrive, without buffering them, so the
//! connection goes on at the next command. Bytes that are not RESP at all (a bad length,
//! an element that is not a bulk string) leave no way to find where the next command
//! starts: the reader answers one error and drops what it has buffered.

use std::fmt;
use std::io::Write as _;
use std::ops::Range;

/// Longest inline command line, in bytes (Redis's limit too).
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Most arguments of one command.
pub const MAX_ARGS: usize = 64 * 1024;
/// Longest `*N` or `$N` line, CRLF included: the sign, 19 digits and some slack.
const MAX_LENGTH_LINE_BYTES: usize = 32;
/// Bytes the input buffer starts with (and goes back to when idle).
const INITIAL_BUFFER_BYTES: usize = 16 * 1024;
/// Argument ranges a connection keeps room for while its client waits (a wider command
/// took more, given back then).
const KEPT_ARGS: usize = 1024;

/// What a [`Reader`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (argument), in bytes: the longest value the store takes.
    pub max_bulk_bytes: usize,
    /// Longest request (all of one command's bytes, headers included).
    pub max_request_bytes: usize,
}

/// Why the reader refused a command. Its text is the error reply, less the `-`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A bulk string longer than [`Limits::max_bulk_bytes`]; the rest of the command is
    /// skipped.
    BulkTooLong {
        /// Bytes the header announced.
        bulk_bytes: u64,
        /// The limit.
        max_bulk_bytes: usize,
    },
    /// A request longer than [`Limits::max_request_bytes`]; the rest of it is skipped.
    RequestTooLong {
        /// Bytes of the request up to the argument that went over.
        request_bytes: u64,
        /// The limit.
        max_request_bytes: usize,
    },
    /// More than [`MAX_ARGS`] arguments; they are skipped.
    TooManyArgs {
        /// Arguments the header announced.
        args: u64,
    },
    /// Not RESP: what was wrong. Everything buffered was dropped.
    Malformed(&'static str),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::BulkTooLong {
                bulk_bytes,
                max_bulk_bytes,
            } => write!(
                f,
                "ERR argument of {bulk_bytes} bytes is longer than the limit of {max_bulk_bytes} bytes"
            ),
            Refusal::RequestTooLong {
                request_bytes,
                max_request_bytes,
            } => write!(
                f,
                "ERR request of at least {request_bytes} bytes is longer than the limit of {max_request_bytes} bytes"
            ),
            Refusal::TooManyArgs { args } => write!(
                f,
                "ERR command of {args} arguments is over the limit of {MAX_ARGS}"
            ),
            Refusal::Malformed(what) => write!(f, "ERR Protocol error: {what}"),
        }
    }
}

/// What [`Reader::next`] found.
#[derive(Debug)]
pub enum Next<'a> {
    /// A whole command.
    Command(Args<'a>),
    /// A command refused: answer the error (the reader skips what is left of it).
    Refused(Refusal),
    /// No whole command buffered: read more.
    More,
}

/// A command's arguments, borrowed from the reader's buffer (the name is the first).
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    buf: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    /// Arguments, the name included.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Argument `i` (0 is the name). Panics past [`Args::len`].
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.buf[self.ranges[i].clone()]
    }

    /// Every argument from `from` on.
    pub fn from(&self, from: usize) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let buf = self.buf;
        self.ranges[from.min(self.ranges.len())..]
            .iter()
            .map(move |r| &buf[r.clone()])
    }
}

/// What one step of reading found (the lifetime-free form of [`Next`]).
enum Step {
    /// A command, its arguments in `Reader::args`.
    Command,
    Refused(Refusal),
    More,
    /// Something consumed (an empty line, `*0`, a skipped argument): look again.
    Again,
}

/// One length line (`*N\r\n` or `$N\r\n`, the type byte already checked).
enum Length {
    /// The value and the bytes of the line, CRLF included.
    Line(i64, usize),
    /// Not all of it is here.
    More,
    /// Not a length.
    Bad,
}

fn length_line(bytes: &[u8]) -> Length {
    // The CR at most one byte before the limit, so that a line still waiting for its LF
    // holds less than `MAX_LENGTH_LINE_BYTES` (the buffer has room for the LF).
    let window = &bytes[..bytes.len().min(MAX_LENGTH_LINE_BYTES - 1)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        return if bytes.len() >= MAX_LENGTH_LINE_BYTES - 1 {
            Length::Bad
        } else {
            Length::More
        };
    };
    match bytes.get(cr + 1) {
        None => return Length::More,
        Some(b'\n') => {}
        Some(_) => return Length::Bad,
    }
    let digits = &bytes[1..cr];
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Length::Bad;
    }
    // As Redis reads a length: no leading zero, and no sign on 0 (`$04`, `*-0` refused).
    if digits[0] == b'0' && (digits.len() > 1 || negative) {
        return Length::Bad;
    }
    // 19 digits fit a u64; past an i64 is not a length (as Redis's `string2ll`): read as
    // the largest i64 it named a length the client never sent.
    let magnitude = digits
        .iter()
        .fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    match value {
        Some(value) => Length::Line(value, cr + 2),
        None => Length::Bad,
    }
}

/// A connection's input: the bytes read and not yet consumed, cut into commands.
#[derive(Debug)]
pub struct Reader {
    limits: Limits,
    buf: Vec<u8>,
    /// First unread byte.
    start: usize,
    /// One past the last byte read.
    end: usize,
    /// Bytes of a refused command still to drop when they arrive.
    skip_bytes: u64,
    /// Arguments of a refused command still to drop.
    skip_args: u64,
    /// The last command's arguments, as ranges of `buf`; while a multibulk command is
    /// only partly here, the arguments parsed so far, as ranges from `start`.
    args: Vec<Range<usize>>,
    /// A multibulk command only partly here: where its parse goes on when more arrives
    /// (each argument is looked at once, not again at every read: a request sent an
    /// argument at a time made the reader start over at every read, a time quadratic in
    /// its arguments).
    partial: Option<Partial>,
    /// Bytes from `start` of an inline line only partly here that hold no newline: the
    /// search goes on from there when more arrives (it started over at every read, a
    /// time quadratic in the line for a line sent a byte at a time).
    scanned: usize,
    /// Arguments parsed (their length lines read), for the tests' count of work.
    #[cfg(test)]
    parsed_args: u64,
}

/// How far a multibulk command has been parsed.
#[derive(Clone, Copy, Debug)]
struct Partial {
    /// Its arguments.
    count: u64,
    /// Arguments parsed.
    parsed: u64,
    /// Bytes from `start` the parsed part takes.
    at: usize,
}

impl Reader {
    /// An empty reader.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            buf: vec![0; INITIAL_BUFFER_BYTES],
            start: 0,
            end: 0,
            skip_bytes: 0,
            skip_args: 0,
            args: Vec::new(),
            partial: None,
            scanned: 0,
            #[cfg(test)]
            parsed_args: 0,
        }
    }

    /// Most bytes the buffer ever holds: one whole request, or one inline line.
    fn max_buffer_bytes(&self) -> usize {
        self.limits.max_request_bytes.max(MAX_INLINE_BYTES) + MAX_LENGTH_LINE_BYTES
    }

    /// Room to read into: compacts or grows the buffer first if it is full. Empty only
    /// if a command the limits allow could not fit, which they rule out.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > INITIAL_BUFFER_BYTES * 4 {
                // Idle after a large request: give the memory back.
                self.buf = vec![0; INITIAL_BUFFER_BYTES];
            }
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < self.max_buffer_bytes() {
                let len = (self.buf.len() * 2).min(self.max_buffer_bytes());
                self.buf.resize(len, 0);
            }
        }
        debug_assert!(self.end < self.buf.len(), "the limits bound every command");
        &mut self.buf[self.end..]
    }

    /// The connection waits for its client (its socket has nothing more to read): the
    /// memory a large request or a command of many arguments took is given back, all
    /// but what is buffered still needs. Without it, a connection kept the largest
    /// buffer and the widest list of arguments it ever needed for as long as it lived
    /// (the buffer went back only when nothing at all was buffered): each of
    /// `--max-clients` idle clients held up to 16 MiB and 1 MiB.
    pub fn waiting(&mut self) {
        let unread = self.end - self.start;
        if self.buf.len() > INITIAL_BUFFER_BYTES * 4 && unread <= INITIAL_BUFFER_BYTES / 2 {
            // The parse of a command only partly here goes on: its offsets are from
            // `start`.
            let mut buf = vec![0; INITIAL_BUFFER_BYTES];
            buf[..unread].copy_from_slice(&self.buf[self.start..self.end]);
            self.buf = buf;
            self.start = 0;
            self.end = unread;
        }
        if self.partial.is_none() {
            // The last command's arguments, answered already.
            self.args.clear();
        }
        // Those of a command only partly here stay. Shrunk only to half its room or less,
        // so that a command whose arguments come one per wait is not copied at each.
        let keep = self.args.len().max(KEPT_ARGS);
        if self.args.capacity() > 2 * keep {
            self.args.shrink_to(keep);
        }
    }

    /// Counts `bytes` read into [`Reader::spare`].
    pub fn filled(&mut self, bytes: usize) {
        debug_assert!(self.end + bytes <= self.buf.len());
        self.end += bytes;
    }

    /// Whether bytes are buffered that no command consumed yet.
    #[cfg(test)]
    pub fn has_unread(&self) -> bool {
        self.start < self.end
    }

    /// Drops everything buffered and any skip in progress.
    fn drop_all(&mut self, what: &'static str) -> Step {
        self.partial = None;
        self.scanned = 0;
        self.start = self.end;
        self.skip_bytes = 0;
        self.skip_args = 0;
        Step::Refused(Refusal::Malformed(what))
    }

    /// The next command, a refusal, or [`Next::More`].
    pub fn next(&mut self) -> Next<'_> {
        loop {
            match self.step() {
                Step::Command => {
                    return Next::Command(Args {
                        buf: &self.buf,
                        ranges: &self.args,
                    })
                }
                Step::Refused(refusal) => return Next::Refused(refusal),
                Step::More => return Next::More,
                Step::Again => {}
            }
        }
    }

    fn step(&mut self) -> Step {
        let unread = (self.end - self.start) as u64;
        if self.skip_bytes > 0 {
            let dropped = unread.min(self.skip_bytes);
            self.start += dropped as usize;
            self.skip_bytes -= dropped;
            return if self.skip_bytes > 0 {
                Step::More
            } else {
                Step::Again
            };
        }
        if unread == 0 {
            return Step::More;
        }
        if self.skip_args > 0 {
            // An argument of a refused command: drop its header, then its bytes.
            let bytes = &self.buf[self.start..self.end];
            if bytes[0] != b'$' {
                return self.drop_all("expected '$' for an argument");
            }
            return match length_line(bytes) {
                Length::More => Step::More,
                Length::Line(len, header) if len >= 0 => {
                    self.start += header;
                    self.skip_bytes = len as u64 + 2;
                    self.skip_args -= 1;
                    Step::Again
                }
                _ => self.drop_all("invalid bulk length"),
            };
        }
        if self.buf[self.start] == b'*' {
            self.multibulk()
        } else {
            self.inline()
        }
    }

    /// Keeps how far a multibulk command was parsed, and asks for more.
    fn more(&mut self, partial: Partial) -> Step {
        self.partial = Some(partial);
        Step::More
    }

    /// `*N\r\n` then N bulk strings, `$len\r\n` bytes `\r\n` each.
    fn multibulk(&mut self) -> Step {
        let bytes = &self.buf[self.start..self.end];
        let (count, mut at, first) = match self.partial.take() {
            Some(partial) => (partial.count, partial.at, partial.parsed),
            None => {
                let (count, header) = match length_line(bytes) {
                    Length::Line(count, header) => (count, header),
                    Length::More => return Step::More,
                    Length::Bad => return self.drop_all("invalid multibulk length"),
                };
                if count <= 0 {
                    // `*0` and `*-1`: nothing to run (Redis ignores them too).
                    self.start += header;
                    return Step::Again;
                }
                let count = count as u64;
                if count > MAX_ARGS as u64 {
                    self.start += header;
                    self.skip_args = count;
                    return Step::Refused(Refusal::TooManyArgs { args: count });
                }
                self.args.clear();
                (count, header, 0)
            }
        };
        for i in first..count {
            let rest = &bytes[at..];
            let Some(&kind) = rest.first() else {
                return self.more(Partial {
                    count,
                    parsed: i,
                    at,
                });
            };
            if kind != b'$' {
                return self.drop_all("expected '$' for an argument");
            }
            let (len, header) = match length_line(rest) {
                Length::Line(len, header) if len >= 0 => (len as u64, header),
                Length::More => {
                    return self.more(Partial {
                        count,
                        parsed: i,
                        at,
                    });
                }
                _ => return self.drop_all("invalid bulk length"),
            };
            #[cfg(test)]
            {
                self.parsed_args += 1;
            }
            let request_bytes = (at + header) as u64 + len + 2;
            let refusal = if len > self.limits.max_bulk_bytes as u64 {
                Some(Refusal::BulkTooLong {
                    bulk_bytes: len,
                    max_bulk_bytes: self.limits.max_bulk_bytes,
                })
            } else if request_bytes > self.limits.max_request_bytes as u64 {
                Some(Refusal::RequestTooLong {
                    request_bytes,
                    max_request_bytes: self.limits.max_request_bytes,
                })
            } else {
                None
            };
            if let Some(refusal) = refusal {
                // Answered now; this argument's bytes and the arguments after it are
                // dropped as they arrive.
                self.start += at + header;
                self.skip_bytes = len + 2;
                self.skip_args = count - i - 1;
                return Step::Refused(refusal);
            }
            let len = len as usize;
            if rest.len() < header + len + 2 {
                return self.more(Partial {
                    count,
                    parsed: i,
                    at,
                });
            }
            if &rest[header + len..header + len + 2] != b"\r\n" {
                return self.drop_all("expected CRLF after a bulk string");
            }
            let from = at + header;
            self.args.push(from..from + len);
            at += header + len + 2;
        }
        // Whole: the ranges, from `start` so far, become ranges of the buffer.
        let start = self.start;
        for range in &mut self.args {
            *range = range.start + start..range.end + start;
        }
        self.start += at;
        Step::Command
    }

    /// A line of words separated by blanks (spaces, tabs, CRs; VT and FF too, but not
    /// inside a word), split as Redis splits it: a word may hold double-quoted parts
    /// (with the escapes `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH`, and `\` before any
    /// other byte for that byte) and single-quoted parts (with `\'`), each closed before
    /// a blank or the line's end. Unquoted in place.
    fn inline(&mut self) -> Step {
        let bytes = &self.buf[self.start..self.end];
        let window = &bytes[..bytes.len().min(MAX_INLINE_BYTES)];
        let from = self.scanned.min(window.len());
        let Some(newline) = window[from..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|at| from + at)
        else {
            if bytes.len() >= MAX_INLINE_BYTES {
                return self.drop_all("too big inline request");
            }
            self.scanned = window.len();
            return Step::More;
        };
        self.scanned = 0;
        let line_end = if newline > 0 && bytes[newline - 1] == b'\r' {
            newline - 1
        } else {
            newline
        };
        self.args.clear();
        let line = self.start..self.start + line_end;
        if !split_inline(&mut self.buf[line], self.start, &mut self.args) {
            self.start += newline + 1;
            return self.drop_all("unbalanced quotes in request");
        }
        self.start += newline + 1;
        if self.args.is_empty() {
            return Step::Again;
        }
        if self.args.len() > MAX_ARGS {
            return Step::Refused(Refusal::TooManyArgs {
                args: self.args.len() as u64,
            });
        }
        Step::Command
    }
}

/// Splits inline `line` (the bytes of `buf` from `base` on) into `words`, unquoting
/// them in place: each word's bytes are written over the line from its start, never past
/// where they were read. `false`: a quote is never closed, or is closed inside a word.
fn split_inline(line: &mut [u8], base: usize, words: &mut Vec<Range<usize>>) -> bool {
    // As Redis's `sdssplitargs`: between words and after a closing quote, any of C's
    // `isspace`; a word outside quotes ends at a space, tab or CR (VT and FF are part of
    // it).
    let blank = |b: u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c);
    let ends_word = |b: u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let (mut read, mut written) = (0, 0);
    let n = line.len();
    loop {
        while read < n && blank(line[read]) {
            read += 1;
        }
        if read == n {
            return true;
        }
        let from = written;
        // The quote the word is inside now, if any.
        let mut quote = None;
        loop {
            let Some(&b) = line.get(read) else {
                if quote.is_some() {
                    return false;
                }
                break;
            };
            let (byte, used) = match (quote, b) {
                (None, b'"' | b'\'') => {
                    quote = Some(b);
                    read += 1;
                    continue;
                }
                (None, _) if ends_word(b) => break,
                (Some(q), _) if b == q => {
                    read += 1;
                    // A closing quote ends its word.
                    if read < n && !blank(line[read]) {
                        return false;
                    }
                    break;
                }
                (Some(b'"'), b'\\') => match line.get(read + 1) {
                    Some(b'x') => match (
                        line.get(read + 2).and_then(|&h| hex(h)),
                        line.get(read + 3).and_then(|&l| hex(l)),
                    ) {
                        (Some(high), Some(low)) => (high << 4 | low, 4),
                        _ => (b'x', 2),
                    },
                    Some(&escaped) => (
                        match escaped {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        },
                        2,
                    ),
                    None => (b, 1),
                },
                (Some(b'\''), b'\\') if line.get(read + 1) == Some(&b'\'') => (b'\'', 2),
                _ => (b, 1),
            };
            line[written] = byte;
            written += 1;
            read += used;
        }
        words.push(base + from..base + written);
    }
}

/// `+text`.
pub fn simple(out: &mut Vec<u8>, text: &str) {
    out.push(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `-text`, from a format (one line: CR and LF become spaces).
pub fn error(out: &mut Vec<u8>, text: fmt::Arguments<'_>) {
    out.push(b'-');
    let from = out.len();
    let _ = out.write_fmt(text);
    for b in &mut out[from..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `$len` and the bytes.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    let _ = write!(out, "${}\r\n", bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// The null bulk string.
pub fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// `:n`.
pub fn integer(out: &mut Vec<u8>, n: i64) {
    let _ = write!(out, ":{n}\r\n");
}

/// The header of an array of `len` elements (write them next).
pub fn array(out: &mut Vec<u8>, len: usize) {
    let _ = write!(out, "*{len}\r\n");
}

/// A request as a client sends it: an array of bulk strings (tests' clients).
#[cfg(test)]
pub(crate) fn command(words: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    array(&mut out, words.len());
    for w in words {
        bulk(&mut out, w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const LIMITS: Limits = Limits {
        max_bulk_bytes: 100,
        max_request_bytes: 1000,
    };

    /// Writes `bytes` into the reader's spare room, as reads would, all of them.
    pub(super) fn feed(reader: &mut Reader, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let spare = reader.spare();
            assert!(!spare.is_empty(), "no room to read into");
            let n = spare.len().min(bytes.len());
            spare[..n].copy_from_slice(&bytes[..n]);
            reader.filled(n);
            bytes = &bytes[n..];
        }
    }

    /// What the reader makes of everything buffered: commands as their words, refusals
    /// as their text.
    fn drain(reader: &mut Reader) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match reader.next() {
                Next::Command(args) => seen.push(
                    args.from(0)
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                Next::Refused(refusal) => seen.push(format!("-{refusal}")),
                Next::More => return seen,
            }
        }
    }

    /// What a fresh reader makes of `input` arriving in two parts, cut at `cut`.
    fn read_cut_at(input: &[u8], cut: usize) -> Vec<String> {
        let mut reader = Reader::new(LIMITS);
        feed(&mut reader, &input[..cut]);
        let mut seen = drain(&mut reader);
        feed(&mut reader, &input[cut..]);
        seen.extend(drain(&mut reader));
        assert!(!reader.has_unread(), "cut at {cut}");
        seen
    }

    #[test]
    fn a_pipeline_split_anywhere_reads_the_same() {
        let mut input = command(&[b"SET", b"k", b"v\r\nwith crlf"]);
        input.extend(command(&[b"GET", b"k"]));
        input.extend_from_slice(b"PING  hello\r\n\r\n");
        input.extend(command(&[b"ECHO", b""]));
        let expected = ["SET k v\r\nwith crlf", "GET k", "PING hello", "ECHO "];
        for cut in 0..=input.len() {
            assert_eq!(read_cut_at(&input, cut), expected, "cut at {cut}");
        }
    }

    /// A reader that gives back its memory while its client waits, after a large
    /// request and a wide command, reads what comes next the same, wherever the client
    /// paused in it: a command partly here keeps its bytes and the arguments it parsed.
    #[test]
    fn a_reader_that_gives_memory_back_while_waiting_reads_the_same() {
        let limits = Limits {
            max_bulk_bytes: 100_000,
            max_request_bytes: 1 << 20,
        };
        let big = vec![b'x'; 100_000];
        let wide: Vec<&[u8]> = std::iter::once(&b"EXISTS"[..])
            .chain(std::iter::repeat_n(&b"k"[..], 5000))
            .collect();
        let mut before = command(&[b"ECHO", &big]);
        before.extend(command(&wide));
        let mut next = command(&[b"SET", b"k", b"v\r\nwith crlf"]);
        next.extend_from_slice(b"PING  hello\r\n");
        next.extend(command(&[b"ECHO", b""]));
        let expected = ["SET k v\r\nwith crlf", "PING hello", "ECHO "];
        for cut in 0..=next.len() {
            let mut reader = Reader::new(limits);
            feed(&mut reader, &before);
            feed(&mut reader, &next[..cut]);
            let mut seen = drain(&mut reader);
            assert!(seen.len() >= 2, "cut at {cut}: {seen:?}");
            assert!(seen[1].starts_with("EXISTS k k"), "cut at {cut}");
            reader.waiting();
            assert_eq!(reader.buf.len(), INITIAL_BUFFER_BYTES, "cut at {cut}");
            assert!(
                reader.args.capacity() <= 2 * KEPT_ARGS,
                "cut at {cut}: room for {} arguments kept",
                reader.args.capacity()
            );
            feed(&mut reader, &next[cut..]);
            seen.extend(drain(&mut reader));
            assert_eq!(seen[2..], expected, "cut at {cut}");
            assert!(!reader.has_unread(), "cut at {cut}");
        }
    }

    #[test]
    fn a_bulk_over_the_limit_is_refused_and_skipped_as_it_arrives() {
        let big = vec![b'x'; 150];
        let mut input = command(&[b"SET", b"k", &big, b"NX"]);
        input.extend(command(&[b"PING"]));
        for cut in 0..=input.len() {
            assert_eq!(
                read_cut_at(&input, cut),
                [
                    "-ERR argument of 150 bytes is longer than the limit of 100 bytes",
                    "PING"
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn requests_and_argument_counts_over_the_limits_are_refused() {
        let arg = [b'x'; 90];
        let many: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
            .chain(std::iter::repeat_n(&arg[..], 12))
            .collect();
        let mut reader = Reader::new(LIMITS);
        let mut input = command(&many);
        input.extend(command(&[b"PING"]));
        feed(&mut reader, &input);
        let seen = drain(&mut reader);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(
            seen[0].starts_with("-ERR request of at least 1")
                && seen[0].ends_with("longer than the limit of 1000 bytes"),
            "{seen:?}"
        );
        assert_eq!(seen[1], "PING");

        let mut reader = Reader::new(LIMITS);
        let header = format!("*{}\r\n", MAX_ARGS + 1);
        feed(&mut reader, header.as_bytes());
        assert_eq!(
            drain(&mut reader),
            [format!(
                "-ERR command of {} arguments is over the limit of {MAX_ARGS}",
                MAX_ARGS + 1
            )]
        );
    }

    #[test]
    fn malformed_input_is_one_error_and_the_reader_goes_on() {
        for bad in [
            &b"*x\r\n"[..],
            b"*2\r\n$3\r\nGET\r\n:1\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$3\r\nGETxx",
            b"*99999999999999999999999999999999999\r\n",
            b"*1\r\n$1\rx",
            b"*1\r\n$04\r\nPING\r\n",
            b"*01\r\n$4\r\nPING\r\n",
            b"*1\r\n$-0\r\n",
        ] {
            let mut reader = Reader::new(LIMITS);
            feed(&mut reader, bad);
            let seen = drain(&mut reader);
            assert_eq!(seen.len(), 1, "{bad:?}: {seen:?}");
            assert!(seen[0].starts_with("-ERR Protocol error: "), "{seen:?}");
            assert!(!reader.has_unread());
            feed(&mut reader, &command(&[b"PING"]));
            assert_eq!(drain(&mut reader), ["PING"]);
        }
        let mut reader = Reader::new(LIMITS);
        feed(&mut reader, &vec![b'a'; MAX_INLINE_BYTES + 1]);
        assert_eq!(
            drain(&mut reader),
            ["-ERR Protocol error: too big inline request"]
        );
    }

    /// A length past an i64 is not RESP (Redis's `string2ll` refuses it: "invalid bulk
    /// length"), not the largest i64: it was read as 9223372036854775807, so a `$` of 19
    /// nines answered an error naming a length the client never sent and then swallowed
    /// every later byte of the connection as that argument's, and a `*-` of 19 nines was
    /// taken for `*-1` and ignored.
    #[test]
    fn a_length_past_an_i64_is_malformed_not_the_largest_i64() {
        for bad in [
            &b"*1\r\n$9999999999999999999\r\n"[..],
            b"*1\r\n$9223372036854775808\r\n",
            b"*9999999999999999999\r\n",
            b"*-9999999999999999999\r\n",
        ] {
            let mut reader = Reader::new(LIMITS);
            feed(&mut reader, bad);
            let seen = drain(&mut reader);
            assert_eq!(seen.len(), 1, "{bad:?}: {seen:?}");
            assert!(
                seen[0].starts_with("-ERR Protocol error: "),
                "{:?}: {seen:?}",
                String::from_utf8_lossy(bad)
            );
            feed(&mut reader, &command(&[b"PING"]));
            assert_eq!(drain(&mut reader), ["PING"], "{bad:?}");
        }
        // The extremes an i64 holds still read as lengths.
        assert!(matches!(
            length_line(b"$9223372036854775807\r\n"),
            Length::Line(i64::MAX, 22)
        ));
        assert!(matches!(
            length_line(b"*-9223372036854775808\r\n"),
            Length::Line(i64::MIN, 23)
        ));
    }

    #[test]
    fn a_deep_nest_of_arrays_is_refused_without_recursion() {
        let mut reader = Reader::new(Limits {
            max_bulk_bytes: 100,
            max_request_bytes: 1 << 20,
        });
        feed(&mut reader, &b"*1\r\n".repeat(100_000));
        let seen = drain(&mut reader);
        assert_eq!(seen, ["-ERR Protocol error: expected '$' for an argument"]);
    }

    #[test]
    fn replies_decode_with_an_independent_decoder() {
        use redis_protocol::resp2::decode::decode;
        use redis_protocol::resp2::types::OwnedFrame;
        let mut out = Vec::new();
        simple(&mut out, "OK");
        error(&mut out, format_args!("ERR two\r\nlines"));
        bulk(&mut out, b"bytes\r\n\0");
        null(&mut out);
        integer(&mut out, -42);
        array(&mut out, 2);
        bulk(&mut out, b"");
        integer(&mut out, i64::MAX);
        let mut frames = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let (frame, used) = decode(&out[at..]).unwrap().unwrap();
            frames.push(frame);
            at += used;
        }
        assert_eq!(
            frames,
            [
                OwnedFrame::SimpleString(b"OK".to_vec()),
                OwnedFrame::Error("ERR two  lines".into()),
                OwnedFrame::BulkString(b"bytes\r\n\0".to_vec()),
                OwnedFrame::Null,
                OwnedFrame::Integer(-42),
                OwnedFrame::Array(vec![
                    OwnedFrame::BulkString(Vec::new()),
                    OwnedFrame::Integer(i64::MAX)
                ]),
            ]
        );
    }

    #[test]
    fn requests_from_an_independent_encoder_read_whole() {
        use redis_protocol::resp2::encode::encode;
        use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};
        let frame = OwnedFrame::Array(vec![
            OwnedFrame::BulkString(b"MSET".to_vec()),
            OwnedFrame::BulkString(b"a".to_vec()),
            OwnedFrame::BulkString(vec![0, 13, 10, 255]),
        ]);
        let mut buf = vec![0; frame.encode_len(false)];
        encode(&mut buf, &frame, false).unwrap();
        let mut reader = Reader::new(LIMITS);
        feed(&mut reader, &buf);
        match reader.next() {
            Next::Command(args) => {
                assert_eq!(args.len(), 3);
                assert_eq!(args.get(0), b"MSET");
                assert_eq!(args.get(2), [0, 13, 10, 255]);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Inline words are split as Redis splits them: quoted parts unquoted, escapes read,
    /// quotes inside a word joined to it; a quote never closed, or closed inside a word,
    /// refused. Each line read whole and a byte at a time.
    #[test]
    fn inline_quotes_are_read_as_redis_reads_them() {
        let cases: [(&[u8], &[&[u8]]); 9] = [
            (b"SET \"k\" \"v\"\r\n", &[b"SET", b"k", b"v"]),
            (b"SET 'a b' \"c\\td\"\n", &[b"SET", b"a b", b"c\td"]),
            (
                b"ECHO \"\\x41\\x4a\\xzz\\\\\\\"\"\r\n",
                &[b"ECHO", b"AJxzz\\\""],
            ),
            (
                b"ECHO 'it\\'s' \"\\n\\r\\a\\b\"\n",
                &[b"ECHO", b"it's", b"\n\r\x07\x08"],
            ),
            (b"ECHO a\"b c\"\n", &[b"ECHO", b"ab c"]),
            (b"ECHO \"\" ''\n", &[b"ECHO", b"", b""]),
            (b"  PING\t \n", &[b"PING"]),
            (b"ECHO \"\\xFf\"\n", &[b"ECHO", b"\xff"]),
            (b"ECHO '\\n'\n", &[b"ECHO", b"\\n"]),
        ];
        for (line, words) in cases {
            for whole in [true, false] {
                let mut reader = Reader::new(LIMITS);
                let mut seen = Vec::new();
                if whole {
                    feed(&mut reader, line);
                    seen.extend(all_args(&mut reader));
                } else {
                    for byte in line {
                        feed(&mut reader, std::slice::from_ref(byte));
                        seen.extend(all_args(&mut reader));
                    }
                }
                let want: Vec<Vec<u8>> = words.iter().map(|w| w.to_vec()).collect();
                assert_eq!(seen, [want], "{:?}", String::from_utf8_lossy(line));
            }
        }
        for bad in [
            &b"SET \"k v\n"[..],
            b"SET 'k\n",
            b"SET \"k\"v\n",
            b"SET 'k'v\n",
            b"ECHO \"a\\\"\n",
        ] {
            let mut reader = Reader::new(LIMITS);
            feed(&mut reader, bad);
            feed(&mut reader, b"PING\r\n");
            assert_eq!(
                drain(&mut reader),
                ["-ERR Protocol error: unbalanced quotes in request"],
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Inline words are split where Redis's `sdssplitargs` splits them: blanks between
    /// words are any of `isspace` (space, tab, CR, LF, VT, FF), a word outside quotes ends
    /// at a space, tab or CR, and a closing quote may be followed by any of `isspace`.
    /// Each case's words are what redis-server 7.0.15 answered (its unknown-command error
    /// lists them). Before, only spaces and tabs were blanks: `SET k v\r\r\n` stored
    /// `v\r`, and `ECHO "a"\rb` closed the connection as unbalanced quotes.
    #[test]
    fn inline_words_split_at_the_blanks_redis_splits_at() {
        let cases: [(&[u8], &[&[u8]]); 8] = [
            (b"SET k v\r\r\n", &[b"SET", b"k", b"v"]),
            (b"FOO \x0b\r1\r\n", &[b"FOO", b"1"]),
            (b"FOO \"a\"\rb\n", &[b"FOO", b"a", b"b"]),
            (b"FOO 'a'\x0cb\n", &[b"FOO", b"a", b"b"]),
            (b"FOO a\x0bb\n", &[b"FOO", b"a\x0bb"]),
            (b"\x0c\x0bFOO x\n", &[b"FOO", b"x"]),
            (b"FOO a\x0c b\n", &[b"FOO", b"a\x0c", b"b"]),
            (b"FOO \"a\"\x0b\n", &[b"FOO", b"a"]),
        ];
        for (line, words) in cases {
            let mut reader = Reader::new(LIMITS);
            feed(&mut reader, line);
            let seen: Vec<Vec<Vec<u8>>> = all_args(&mut reader);
            let want: Vec<Vec<u8>> = words.iter().map(|w| w.to_vec()).collect();
            assert_eq!(seen, [want], "{:?}", String::from_utf8_lossy(line));
        }
    }

    /// Every command's arguments, as bytes.
    fn all_args(reader: &mut Reader) -> Vec<Vec<Vec<u8>>> {
        let mut seen = Vec::new();
        loop {
            match reader.next() {
                Next::Command(args) => seen.push(args.from(0).map(|a| a.to_vec()).collect()),
                Next::Refused(refusal) => panic!("refused: {refusal}"),
                Next::More => return seen,
            }
        }
    }

    /// An inline line that arrives a byte at a time is looked at once, not again from
    /// its start at every read: the search for its newline started over at each, a time
    /// quadratic in the line (2^31 bytes looked at for the longest line, 64 KiB), during
    /// which the worker's other clients waited.
    #[test]
    fn an_inline_line_that_arrives_in_pieces_is_scanned_once() {
        let mut reader = Reader::new(LIMITS);
        let mut line = b"EXISTS".to_vec();
        while line.len() < MAX_INLINE_BYTES - 2 {
            line.extend_from_slice(b" k");
        }
        line.truncate(MAX_INLINE_BYTES - 2);
        let started = std::time::Instant::now();
        for b in &line {
            feed(&mut reader, std::slice::from_ref(b));
            assert!(drain(&mut reader).is_empty());
        }
        feed(&mut reader, b"\r\n");
        let seen = drain(&mut reader);
        let took = started.elapsed();
        assert_eq!(seen.len(), 1);
        assert!(seen[0].starts_with("EXISTS k k"));
        assert!(
            took < std::time::Duration::from_secs(1),
            "{took:?} to read a line of {} bytes a byte at a time",
            line.len()
        );
    }

    /// A request that arrives an argument at a time is parsed once, not again from its
    /// start at every read (which made a slow client's request cost time quadratic in its
    /// arguments, and stalled the other clients of its worker).
    #[test]
    fn a_request_that_arrives_in_pieces_is_parsed_once() {
        let limits = Limits {
            max_bulk_bytes: 100,
            max_request_bytes: 1 << 20,
        };
        let mut reader = Reader::new(limits);
        let args = 10_000;
        let mut first = format!("*{}\r\n$6\r\nEXISTS\r\n", args + 1).into_bytes();
        feed(&mut reader, &first);
        first.clear();
        assert!(drain(&mut reader).is_empty());
        for i in 0..args {
            let arg = format!("{}", i % 10);
            feed(
                &mut reader,
                format!("${}\r\n{arg}\r\n", arg.len()).as_bytes(),
            );
            let seen = drain(&mut reader);
            if i + 1 < args {
                assert!(
                    seen.is_empty(),
                    "a command before its last argument: {seen:?}"
                );
            } else {
                assert_eq!(seen.len(), 1);
                let words: Vec<&str> = seen[0].split(' ').collect();
                assert_eq!(words.len(), args + 1);
                assert_eq!((words[0], words[args]), ("EXISTS", "9"));
            }
        }
        assert!(
            reader.parsed_args <= 2 * (args as u64 + 1),
            "{} arguments parsed for {} in the request",
            reader.parsed_args,
            args + 1
        );
    }
}

/// Property tests of the reader: what it makes of a stream does not depend on how the
/// stream is cut into reads (nor on `waiting` between them), up to the first error that
/// closes the connection; and well-formed streams read as a model of the limits says.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use super::tests::{feed, LIMITS};

    /// Drains; `true` once a Malformed was seen (the connection closes there).
    fn drain(reader: &mut Reader, seen: &mut Vec<String>) -> bool {
        loop {
            match reader.next() {
                Next::Command(args) => seen.push(format!(
                    "{:?}",
                    args.from(0).map(|a| a.to_vec()).collect::<Vec<_>>()
                )),
                Next::Refused(refusal) => {
                    seen.push(format!("-{refusal}"));
                    if matches!(refusal, Refusal::Malformed(_)) {
                        return true;
                    }
                }
                Next::More => return false,
            }
        }
    }

    fn read_in_pieces(input: &[u8], cuts: &[usize], wait: &[bool]) -> Vec<String> {
        let mut reader = Reader::new(LIMITS);
        let mut seen = Vec::new();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.push(input.len());
        cuts.sort();
        let mut from = 0;
        for (i, &cut) in cuts.iter().enumerate() {
            feed(&mut reader, &input[from..cut]);
            from = cut;
            if drain(&mut reader, &mut seen) {
                return seen;
            }
            if wait.get(i).copied().unwrap_or(false) {
                reader.waiting();
            }
        }
        seen
    }

    fn piece() -> impl Strategy<Value = Vec<u8>> {
        let arg = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..8),
            proptest::collection::vec(any::<u8>(), 90..130),
        ];
        prop_oneof![
            4 => proptest::collection::vec(arg, 1..5).prop_map(|args| {
                let words: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
                command(&words)
            }),
            2 => proptest::collection::vec("[a-z\"' \\\\x0-9]{0,6}", 1..5)
                .prop_map(|w| format!("{}\r\n", w.join(" ")).into_bytes()),
            1 => Just(b"*0\r\n".to_vec()),
            1 => Just(b"*-1\r\n".to_vec()),
            1 => Just(b"\r\n".to_vec()),
            1 => Just(b"\n".to_vec()),
            1 => (0u64..2000).prop_map(|n| format!("*2\r\n$4\r\nECHO\r\n${n}\r\n").into_bytes()),
            1 => (0u64..2000).prop_map(|n| format!("*{n}\r\n").into_bytes()),
            1 => proptest::collection::vec(
                prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'-'), Just(b'1'), Just(b'0'), any::<u8>()], 0..12),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn any_stream_reads_the_same_however_it_is_cut(
            pieces in proptest::collection::vec(piece(), 1..12),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            wait in proptest::collection::vec(any::<bool>(), 0..10),
        ) {
            let input: Vec<u8> = pieces.concat();
            let whole = read_in_pieces(&input, &[], &[]);
            let cut = read_in_pieces(&input, &cuts, &wait);
            prop_assert_eq!(whole, cut);
        }

        #[test]
        fn well_formed_streams_read_as_a_model_says(
            items in proptest::collection::vec(prop_oneof![
                3 => proptest::collection::vec(prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..8),
                    proptest::collection::vec(any::<u8>(), 95..105),
                    proptest::collection::vec(any::<u8>(), 0..300),
                ], 1..14).prop_map(|a| (0u8, a)),
                2 => proptest::collection::vec("[a-zA-Z0-9]{1,6}", 1..5)
                    .prop_map(|w| (1u8, w.into_iter().map(String::into_bytes).collect())),
                1 => Just((2u8, vec![])),
            ], 1..10),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            wait in proptest::collection::vec(any::<bool>(), 0..10),
        ) {
            let mut input = Vec::new();
            let mut want = Vec::new();
            for (kind, args) in &items {
                match kind {
                    0 => {
                        let words: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
                        let bytes = command(&words);
                        let mut at = format!("*{}\r\n", args.len()).len() as u64;
                        let mut refused = None;
                        for a in args {
                            let header = format!("${}\r\n", a.len()).len() as u64;
                            let request = at + header + a.len() as u64 + 2;
                            if a.len() > 100 {
                                refused = Some(format!("-ERR argument of {} bytes is longer than the limit of 100 bytes", a.len()));
                                break;
                            }
                            if request > 1000 {
                                refused = Some(format!("-ERR request of at least {request} bytes is longer than the limit of 1000 bytes"));
                                break;
                            }
                            at = request;
                        }
                        want.push(refused.unwrap_or_else(|| format!("{:?}", args)));
                        input.extend(bytes);
                    }
                    1 => {
                        want.push(format!("{:?}", args));
                        let words: Vec<String> = args.iter().map(|a| String::from_utf8(a.clone()).unwrap()).collect();
                        input.extend(format!(" {}\r\n", words.join("  ")).into_bytes());
                    }
                    _ => input.extend_from_slice(b"*0\r\n\r\n*-1\r\n"),
                }
            }
            prop_assert_eq!(read_in_pieces(&input, &cuts, &wait), want);
        }

        #[test]
        fn any_stream_byte_at_a_time(
            pieces in proptest::collection::vec(piece(), 1..6),
        ) {
            let input: Vec<u8> = pieces.concat();
            let whole = read_in_pieces(&input, &[], &[]);
            let cuts: Vec<usize> = (0..input.len()).collect();
            let wait: Vec<bool> = (0..input.len()).map(|i| i % 3 == 0).collect();
            let cut = read_in_pieces(&input, &cuts, &wait);
            prop_assert_eq!(whole, cut);
        }
    }
}
