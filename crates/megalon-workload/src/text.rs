//! The text format of a thread's log: one line per invocation and per response.
//!
//! ```text
//! megalon-history 1
//! process <host> <thread>
//! invoke <index> <time> <key> <call>
//! return <index> <time> <outcome>
//! ```
//!
//! `<index>` numbers the thread's operations from 0 in invocation order; a `return` line
//! names the operation it completes and comes after its `invoke` line (other lines may be
//! in between). `<key>` is the key in lowercase hex, `-` for the empty key. `<call>` is
//! `put W:S`, `get`, `create W:S` or `delete`, where `W:S` is a value's writer and
//! sequence. `<outcome>` is `ok`, `found W:S`, `absent`, `torn HEX` (the bytes read, `-`
//! if none), `created`, `exists`, `deleted`, `failed`, `uncertain` (any effect happened before the return) or `unknown`. An operation with no `return`
//! line never returned: its outcome is unknown. Blank lines and lines starting with `#`
//! are ignored.

use std::fmt::Write as _;
use std::io::BufRead;

use hashbrown::HashMap;

use crate::history::intern;
use crate::{Call, Error, KeyId, Operation, Outcome, ProcessId, ThreadLog, Value};

const MAGIC: &str = "megalon-history 1";

pub(crate) fn header(line: &mut String, process: ProcessId) {
    let _ = writeln!(line, "{MAGIC}\nprocess {} {}", process.host, process.thread);
}

pub(crate) fn invoke(line: &mut String, index: usize, time: u64, key: &[u8], call: Call) {
    let _ = write!(line, "invoke {index} {time} ");
    hex(line, key);
    let _ = writeln!(line, " {call}");
}

pub(crate) fn response(line: &mut String, index: usize, time: u64, outcome: &Outcome) {
    let _ = write!(line, "return {index} {time} ");
    match outcome {
        Outcome::Torn(bytes) => {
            line.push_str("torn ");
            hex(line, bytes);
            line.push('\n');
        }
        other => {
            let _ = writeln!(line, "{other}");
        }
    }
}

fn hex(line: &mut String, bytes: &[u8]) {
    if bytes.is_empty() {
        line.push('-');
    }
    for byte in bytes {
        let _ = write!(line, "{byte:02x}");
    }
}

pub(crate) fn parse(mut input: impl BufRead) -> Result<ThreadLog, Error> {
    let mut parser = Parser::default();
    let mut buf = Vec::new();
    let mut line_number = 0;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_number += 1;
        if buf.last() != Some(&b'\n') {
            // The writer died in the middle of this line; see `ThreadLog::read_from`.
            break;
        }
        let error = |message: String| Error::Parse {
            line: line_number,
            message,
        };
        let line = std::str::from_utf8(&buf)
            .map_err(|_| error("not UTF-8".into()))?
            .trim_end();
        parser.line(line).map_err(error)?;
    }
    parser.finish().map_err(|message| Error::Parse {
        line: line_number,
        message,
    })
}

#[derive(Default)]
struct Parser {
    seen_magic: bool,
    process: Option<ProcessId>,
    keys: Vec<Box<[u8]>>,
    key_ids: HashMap<Box<[u8]>, KeyId>,
    operations: Vec<Operation>,
    returned: Vec<bool>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), String> {
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        if !self.seen_magic {
            if line != MAGIC {
                return Err(format!("expected `{MAGIC}`, found `{line}`"));
            }
            self.seen_magic = true;
            return Ok(());
        }
        let mut words = line.split_ascii_whitespace();
        let word = words.next().unwrap_or_default();
        match (word, self.process) {
            ("process", None) => {
                self.process = Some(ProcessId::new(
                    number(words.next(), "host")?,
                    number(words.next(), "thread")?,
                ));
            }
            ("process", Some(_)) => return Err("a second `process` line".into()),
            (_, None) => return Err(format!("`{word}` before the `process` line")),
            ("invoke", Some(process)) => {
                let index: usize = number(words.next(), "index")?;
                if index != self.operations.len() {
                    return Err(format!(
                        "invocation {index} out of order, expected {}",
                        self.operations.len()
                    ));
                }
                let invoked_at = number(words.next(), "time")?;
                let key = unhex(words.next().ok_or("missing key")?)?;
                let key = intern(&mut self.keys, &mut self.key_ids, &key)
                    .map_err(|error| error.to_string())?;
                let call = match words.next() {
                    Some("put") => Call::Put(value(words.next())?),
                    Some("get") => Call::Get,
                    Some("create") => Call::Create(value(words.next())?),
                    Some("delete") => Call::Delete,
                    other => return Err(format!("unknown call {other:?}")),
                };
                self.operations.push(Operation {
                    process,
                    key,
                    call,
                    outcome: Outcome::Unknown,
                    invoked_at,
                    returned_at: None,
                });
                self.returned.push(false);
            }
            ("return", Some(_)) => {
                let index: usize = number(words.next(), "index")?;
                match self.returned.get(index) {
                    None => return Err(format!("return of operation {index} never invoked")),
                    Some(true) => return Err(format!("second return of operation {index}")),
                    Some(false) => {}
                }
                let returned_at = number(words.next(), "time")?;
                let outcome = match words.next() {
                    Some("ok") => Outcome::Ok,
                    Some("found") => Outcome::Found(value(words.next())?),
                    Some("absent") => Outcome::Absent,
                    Some("torn") => {
                        Outcome::Torn(unhex(words.next().ok_or("missing bytes")?)?.into())
                    }
                    Some("created") => Outcome::Created,
                    Some("exists") => Outcome::Exists,
                    Some("deleted") => Outcome::Deleted,
                    Some("failed") => Outcome::Failed,
                    Some("unknown") => Outcome::Unknown,
                    Some("uncertain") => Outcome::Uncertain,
                    other => return Err(format!("unknown outcome {other:?}")),
                };
                let operation = &mut self.operations[index];
                Operation::validate(
                    operation.call,
                    &outcome,
                    operation.invoked_at,
                    Some(returned_at),
                )
                .map_err(|error| error.to_string())?;
                operation.outcome = outcome;
                operation.returned_at = Some(returned_at);
                self.returned[index] = true;
            }
            _ => return Err(format!("unknown line kind `{word}`")),
        }
        match words.next() {
            None => Ok(()),
            Some(extra) => Err(format!("unexpected `{extra}` at the end of the line")),
        }
    }

    fn finish(self) -> Result<ThreadLog, String> {
        let process = self.process.ok_or("no `process` line")?;
        Ok(ThreadLog {
            process,
            keys: self.keys,
            operations: self.operations,
        })
    }
}

fn number<T: std::str::FromStr>(word: Option<&str>, what: &str) -> Result<T, String> {
    let word = word.ok_or_else(|| format!("missing {what}"))?;
    word.parse()
        .map_err(|_| format!("{what} `{word}` is not a number"))
}

fn value(word: Option<&str>) -> Result<Value, String> {
    let word = word.ok_or("missing value")?;
    let (writer, sequence) = word
        .split_once(':')
        .ok_or_else(|| format!("value `{word}` is not writer:sequence"))?;
    Ok(Value::new(
        number(Some(writer), "writer")?,
        number(Some(sequence), "sequence")?,
    ))
}

fn unhex(word: &str) -> Result<Vec<u8>, String> {
    if word == "-" {
        return Ok(Vec::new());
    }
    if !word.len().is_multiple_of(2) || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{word}` is not hex"));
    }
    (0..word.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&word[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{Clock, History, ThreadRecorder};

    /// A writer the test can look into after the recorder took it.
    #[derive(Clone, Default)]
    struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn every_kind_of_operation(recorder: &mut ThreadRecorder) {
        let v = Value::new(1, 2);
        let torn = v.encode(32).unwrap()[..31].to_vec();
        let steps: [(&[u8], Call, Option<Outcome>); 10] = [
            (b"k", Call::Put(v), Some(Outcome::Ok)),
            (b"k", Call::Get, Some(Outcome::Found(v))),
            (b"", Call::Get, Some(Outcome::Absent)),
            (&[0, 255], Call::Get, Some(Outcome::Torn(torn.into()))),
            (b"k", Call::Create(v), Some(Outcome::Exists)),
            (b"j", Call::Create(v), Some(Outcome::Created)),
            (b"j", Call::Delete, Some(Outcome::Deleted)),
            (b"j", Call::Delete, Some(Outcome::Unknown)),
            (b"j", Call::Put(Value::new(1, 4)), Some(Outcome::Failed)),
            (b"k", Call::Put(Value::new(1, 3)), None),
        ];
        for (key, call, outcome) in steps {
            let pending = recorder.invoke(key, call).unwrap();
            if let Some(outcome) = outcome {
                recorder.complete(pending, outcome).unwrap();
            }
        }
    }

    #[test]
    fn a_log_round_trips_through_text() {
        let mut recorder = ThreadRecorder::new(ProcessId::new(4, 5), Clock::counter());
        every_kind_of_operation(&mut recorder);
        let log = recorder.finish();
        let mut text = Vec::new();
        log.write_to(&mut text).unwrap();
        let read = ThreadLog::read_from(&text[..]).unwrap();
        assert_eq!(read, log, "{}", String::from_utf8_lossy(&text));
    }

    /// A recorder for `process` whose journal is the returned buffer.
    fn journaled(process: ProcessId) -> (ThreadRecorder, SharedBuf) {
        let journal = SharedBuf::default();
        let recorder =
            ThreadRecorder::journaled(process, Clock::counter(), journal.clone()).unwrap();
        (recorder, journal)
    }

    #[test]
    fn a_journal_reads_back_as_the_log() {
        let (mut recorder, journal) = journaled(ProcessId::new(1, 2));
        every_kind_of_operation(&mut recorder);
        let log = recorder.finish();
        let text = journal.0.lock().unwrap().clone();
        assert_eq!(ThreadLog::read_from(&text[..]).unwrap(), log);
    }

    #[test]
    fn a_journal_cut_mid_line_loses_only_that_line() {
        let (mut recorder, journal) = journaled(ProcessId::new(0, 0));
        let put = recorder.invoke(b"k", Call::Put(Value::new(0, 1))).unwrap();
        recorder.complete(put, Outcome::Ok).unwrap();
        let _dies_during = recorder.invoke(b"k", Call::Put(Value::new(0, 2))).unwrap();
        let mut text = journal.0.lock().unwrap().clone();
        // The process died while writing the second put's invocation line...
        text.truncate(text.len() - 3);
        let log = ThreadLog::read_from(&text[..]).unwrap();
        assert_eq!(log.operations().len(), 1);
        assert_eq!(log.operations()[0].outcome, Outcome::Ok);
        // ... or right after writing it: the put is of unknown outcome.
        let text = journal.0.lock().unwrap().clone();
        let log = ThreadLog::read_from(&text[..]).unwrap();
        assert_eq!(log.operations()[1].outcome, Outcome::Unknown);
        assert_eq!(log.operations()[1].returned_at, None);
        assert!(History::merge([log]).is_ok());
    }

    #[test]
    fn bad_lines_are_errors_that_name_the_line() {
        let cases = [
            ("nonsense\n", 1),
            ("megalon-history 1\ninvoke 0 1 6b get\n", 2),
            ("megalon-history 1\nprocess 0 x\n", 2),
            ("megalon-history 1\nprocess 0 0\ninvoke 1 1 6b get\n", 3),
            ("megalon-history 1\nprocess 0 0\ninvoke 0 1 6 get\n", 3),
            ("megalon-history 1\nprocess 0 0\ninvoke 0 1 6b fly\n", 3),
            ("megalon-history 1\nprocess 0 0\ninvoke 0 1 6b put 1\n", 3),
            ("megalon-history 1\nprocess 0 0\nreturn 0 1 ok\n", 3),
            (
                "megalon-history 1\nprocess 0 0\ninvoke 0 5 6b get\nreturn 0 4 absent\n",
                4,
            ),
            (
                "megalon-history 1\nprocess 0 0\ninvoke 0 5 6b get\nreturn 0 6 ok\n",
                4,
            ),
            (
                "megalon-history 1\nprocess 0 0\ninvoke 0 5 6b get\nreturn 0 6 absent\nreturn 0 7 absent\n",
                5,
            ),
            ("megalon-history 1\nprocess 0 0\ninvoke 0 1 6b get now\n", 3),
        ];
        for (text, want_line) in cases {
            match ThreadLog::read_from(text.as_bytes()) {
                Err(Error::Parse { line, .. }) => assert_eq!(line, want_line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(
            ThreadLog::read_from("megalon-history 1\n".as_bytes()),
            Err(Error::Parse { .. })
        ));
    }
}
