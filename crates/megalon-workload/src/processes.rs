//! Child processes of a multi-process run: spawn them with piped standard streams, talk
//! to them in lines, wait for them with a deadline, and never leave one behind.
//!
//! Every wait takes a deadline; a child that exits when an answer was expected, exits
//! with a failure, or is still silent at the deadline ends the wait with a
//! [`ChildError`] naming it and carrying what it printed on stderr. Dropping
//! [`Children`] kills and reaps every child still running, so an error anywhere in the
//! parent (returned with `?`) takes the children with it. A child whose parent dies sees
//! its standard input close. A child can be killed on purpose and started again in its
//! place ([`Children::restart`]), as a crash test does.
//!
//! Also where such runs put the files they share ([`shared_memory_dir`]), and how an error
//! ends with what a process printed ([`printed_suffix`]).

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes of a child's stderr kept for errors (the last ones).
pub const STDERR_KEPT_BYTES: usize = 16 << 10;

/// Longest wait for the rest of an exited child's stderr.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// How often a wait for a child's exit looks again.
const EXIT_POLL: Duration = Duration::from_millis(5);

/// The directory for files that processes share through memory: `/dev/shm` (tmpfs) where
/// there is one, else the temporary directory.
pub fn shared_memory_dir() -> PathBuf {
    let dir = std::path::Path::new("/dev/shm");
    if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A child that did not do what was expected of it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChildError {
    /// It could not be started.
    #[error("{name} could not be started: {source}")]
    Spawn {
        /// The child's name.
        name: String,
        /// Why.
        source: io::Error,
    },
    /// It exited with a failure, or exited (even successfully) while an answer was
    /// expected from it.
    #[error("{name} exited with {status}{}", printed_suffix("its stderr", stderr))]
    Exited {
        /// The child's name.
        name: String,
        /// How it exited.
        status: ExitStatus,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    /// Some children had not answered, or not exited, by the deadline.
    #[error(
        "{} did not answer within {waited:?}{}",
        names.join(", "),
        printed_suffix("its stderr", stderr)
    )]
    TimedOut {
        /// The children waited for.
        names: Vec<String>,
        /// How long the wait was.
        waited: Duration,
        /// The end of what they printed on stderr, each's under its name.
        stderr: String,
    },
    /// Talking to it or waiting for it failed.
    #[error("{name}: {source}")]
    Io {
        /// The child's name.
        name: String,
        /// Why.
        source: io::Error,
    },
}

/// How an error ends with what a process printed: `; <label>:` and `printed` (trimmed) on
/// the lines after it, or nothing if it printed nothing.
pub fn printed_suffix(label: &str, printed: &str) -> String {
    let printed = printed.trim();
    if printed.is_empty() {
        String::new()
    } else {
        format!("; {label}:\n{printed}")
    }
}

/// What a child's stdout reader saw.
enum Seen {
    Line(usize, String),
    Closed(usize),
}

struct Running {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The last [`STDERR_KEPT_BYTES`] of its stderr, filled by a reader thread.
    stderr: Arc<Mutex<VecDeque<u8>>>,
    /// The thread that fills `stderr`; it ends when the stderr pipe closes.
    stderr_reader: thread::JoinHandle<()>,
    /// Lines it printed that nobody asked for yet.
    lines: VecDeque<String>,
    stdout_closed: bool,
    status: Option<ExitStatus>,
}

impl Running {
    /// The end of its stderr. Once the child has exited, waits (a little) for the reader
    /// to drain the pipe, so that the last words before an exit are in.
    fn stderr(&self) -> String {
        if self.status.is_some() {
            let deadline = Instant::now() + STDERR_DRAIN;
            while !self.stderr_reader.is_finished() && Instant::now() < deadline {
                thread::sleep(EXIT_POLL);
            }
        }
        let kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&kept.iter().copied().collect::<Vec<u8>>()).into_owned()
    }

    /// Starts `command` as child `number` with piped stdin, stdout and stderr, and the
    /// threads that read its stdout (into `sender`) and its stderr.
    fn start(
        number: usize,
        name: String,
        mut command: Command,
        sender: Sender<Seen>,
    ) -> Result<Running, ChildError> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| ChildError::Spawn {
            name: name.clone(),
            source,
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(Seen::Line(number, line)).is_err() {
                    return;
                }
            }
            let _ = sender.send(Seen::Closed(number));
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let kept = stderr.clone();
        let stderr_reader = thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                kept.extend(&buffer[..n]);
                let excess = kept.len().saturating_sub(STDERR_KEPT_BYTES);
                kept.drain(..excess);
            }
        });
        Ok(Running {
            name,
            stdin: child.stdin.take(),
            child,
            stderr,
            stderr_reader,
            lines: VecDeque::new(),
            stdout_closed: false,
            status: None,
        })
    }
}

/// Children started together, each with a name used in errors (`host 2`, `worker 0`),
/// numbered from 0 in the order given.
pub struct Children {
    running: Vec<Running>,
    seen: Receiver<Seen>,
    /// What each child's stdout reader sends on; kept for the children started later
    /// ([`Children::restart`]). So the channel never disconnects: only a deadline ends a
    /// wait on it.
    sender: Sender<Seen>,
}

impl Children {
    /// Starts each `(name, command)` with piped stdin, stdout and stderr. If one cannot be
    /// started, those already started are killed.
    pub fn spawn(
        commands: impl IntoIterator<Item = (String, Command)>,
    ) -> Result<Children, ChildError> {
        let (sender, seen) = mpsc::channel();
        let mut children = Children {
            running: Vec::new(),
            seen,
            sender,
        };
        for (number, (name, command)) in commands.into_iter().enumerate() {
            let running = Running::start(number, name, command, children.sender.clone())?;
            children.running.push(running);
        }
        Ok(children)
    }

    /// How many children were started.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The name of child `child`.
    pub fn name(&self, child: usize) -> &str {
        &self.running[child].name
    }

    /// The process id of child `child` (of its latest start).
    pub fn id(&self, child: usize) -> u32 {
        self.running[child].child.id()
    }

    /// The lines child `child` printed that nobody took yet (those received so far), in
    /// order.
    pub fn take_lines(&mut self, child: usize) -> Vec<String> {
        self.running[child].lines.drain(..).collect()
    }

    /// Kills child `child` (`SIGKILL` on Unix), reaps it, and takes in the rest of what it
    /// printed: the lines it wrote before it died stay queued, ahead of any later ones,
    /// for [`Children::next_line`] and the other waits. A child that has exited already is
    /// only reaped. [`ChildError::TimedOut`] if its stdout is still open at `deadline`
    /// (another process holds the pipe).
    pub fn kill(&mut self, child: usize, deadline: Instant) -> Result<ExitStatus, ChildError> {
        let started = Instant::now();
        let running = &mut self.running[child];
        let io = |source| ChildError::Io {
            name: running.name.clone(),
            source,
        };
        let status = match running.status {
            Some(status) => status,
            None => {
                // An error means it has exited already; the wait reaps it either way.
                let _ = running.child.kill();
                let status = running.child.wait().map_err(io)?;
                running.status = Some(status);
                status
            }
        };
        // Its stdout closed as it died; its reader passes on what was still in the pipe
        // before it says so.
        while !self.running[child].stdout_closed {
            if !self.receive(deadline) {
                return Err(self.timed_out(vec![child], started));
            }
        }
        Ok(status)
    }

    /// Kills child `child` as [`Children::kill`] does (until `deadline`), then starts
    /// `command` in its place, under the same name and number. The lines the killed child
    /// printed and nobody took yet stay queued ahead of the new child's.
    pub fn restart(
        &mut self,
        child: usize,
        command: Command,
        deadline: Instant,
    ) -> Result<(), ChildError> {
        self.kill(child, deadline)?;
        let name = self.running[child].name.clone();
        let started = Running::start(child, name, command, self.sender.clone())?;
        let killed = std::mem::replace(&mut self.running[child], started);
        self.running[child].lines = killed.lines;
        Ok(())
    }

    /// Sends `line` and a newline to child `child`'s standard input. A child that is gone
    /// answers [`ChildError::Exited`] (waited for until `deadline`).
    pub fn send(&mut self, child: usize, line: &str, deadline: Instant) -> Result<(), ChildError> {
        let running = &mut self.running[child];
        let Some(stdin) = running.stdin.as_mut() else {
            return Err(ChildError::Io {
                name: running.name.clone(),
                source: io::Error::new(io::ErrorKind::BrokenPipe, "its stdin is closed"),
            });
        };
        let sent = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush());
        match sent {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(self.exited(child, deadline)),
            Err(source) => Err(ChildError::Io {
                name: self.running[child].name.clone(),
                source,
            }),
        }
    }

    /// Sends `line` to every child.
    pub fn send_all(&mut self, line: &str, deadline: Instant) -> Result<(), ChildError> {
        (0..self.len()).try_for_each(|child| self.send(child, line, deadline))
    }

    /// Closes every child's standard input (a child reading it sees its end).
    pub fn close_stdin(&mut self) {
        for running in &mut self.running {
            running.stdin = None;
        }
    }

    /// The next line any child printed, with the child's number (lines already received
    /// first, in child order); `None` at `deadline`. A child that closed its stdout (it
    /// exited, or is exiting) and has no line left answers [`ChildError::Exited`].
    pub fn next_line(&mut self, deadline: Instant) -> Result<Option<(usize, String)>, ChildError> {
        loop {
            if let Some(child) = self.running.iter().position(|r| !r.lines.is_empty()) {
                let line = self.running[child].lines.pop_front().expect("not empty");
                return Ok(Some((child, line)));
            }
            if let Some(closed) = self.running.iter().position(|r| r.stdout_closed) {
                return Err(self.exited(closed, deadline));
            }
            if !self.receive(deadline) {
                return Ok(None);
            }
        }
    }

    /// The next line from each child, in child order. A child that closes its stdout
    /// first (it exited, or is exiting) answers [`ChildError::Exited`]; one still silent
    /// at `deadline` answers [`ChildError::TimedOut`].
    pub fn line_from_each(&mut self, deadline: Instant) -> Result<Vec<String>, ChildError> {
        self.wait_for_each(
            deadline,
            |children| {
                let mut running = children.running.iter();
                match running.position(|r| r.lines.is_empty() && r.stdout_closed) {
                    Some(closed) => Err(children.exited(closed, deadline)),
                    None => Ok(()),
                }
            },
            |r| !r.lines.is_empty(),
            |r| r.lines.pop_front().expect("waited for"),
        )
    }

    /// Waits until every child has exited and returns each's lines not yet taken, in child
    /// order. A child that fails answers [`ChildError::Exited`]; children still running at
    /// `deadline` answer [`ChildError::TimedOut`].
    pub fn wait_all(&mut self, deadline: Instant) -> Result<Vec<Vec<String>>, ChildError> {
        let started = Instant::now();
        self.wait_for_each(
            deadline,
            |children| {
                // A child's stdout closes as it exits; then its status is there, or soon
                // is. A failure ends the wait at once, whoever else is still running.
                for child in 0..children.len() {
                    if children.running[child].stdout_closed {
                        match children.wait_for_exit(child, deadline)? {
                            Some(status) if status.success() => {}
                            Some(_) => return Err(children.exited(child, deadline)),
                            None => return Err(children.timed_out(vec![child], started)),
                        }
                    }
                }
                Ok(())
            },
            |r| r.status.is_some(),
            |r| r.lines.drain(..).collect(),
        )
    }

    /// Receives what the children print until `ready` holds for every child, then answers
    /// `take` of each, in child order. Before each round `failed` may end the wait with an
    /// error; children not ready at `deadline` answer [`ChildError::TimedOut`].
    fn wait_for_each<T>(
        &mut self,
        deadline: Instant,
        mut failed: impl FnMut(&mut Self) -> Result<(), ChildError>,
        ready: impl Fn(&Running) -> bool,
        take: impl FnMut(&mut Running) -> T,
    ) -> Result<Vec<T>, ChildError> {
        let started = Instant::now();
        loop {
            failed(self)?;
            if self.running.iter().all(&ready) {
                return Ok(self.running.iter_mut().map(take).collect());
            }
            if !self.receive(deadline) {
                let waiting = (0..self.len())
                    .filter(|&c| !ready(&self.running[c]))
                    .collect();
                return Err(self.timed_out(waiting, started));
            }
        }
    }

    /// Takes one thing a reader saw, or answers false at `deadline`.
    fn receive(&mut self, deadline: Instant) -> bool {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.seen.recv_timeout(wait) {
            Ok(Seen::Line(child, line)) => {
                self.running[child].lines.push_back(line);
                true
            }
            Ok(Seen::Closed(child)) => {
                self.running[child].stdout_closed = true;
                true
            }
            // `self.sender` keeps the channel open: this is the deadline.
            Err(_) => false,
        }
    }

    /// The child's exit status, waited for until `deadline` (None past it).
    fn wait_for_exit(
        &mut self,
        child: usize,
        deadline: Instant,
    ) -> Result<Option<ExitStatus>, ChildError> {
        let running = &mut self.running[child];
        loop {
            if running.status.is_some() {
                return Ok(running.status);
            }
            running.status = running.child.try_wait().map_err(|source| ChildError::Io {
                name: running.name.clone(),
                source,
            })?;
            if running.status.is_none() {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                thread::sleep(EXIT_POLL);
            }
        }
    }

    /// The error for a child that stopped talking: how it exited, or that it did not by
    /// `deadline` (then it is killed).
    fn exited(&mut self, child: usize, deadline: Instant) -> ChildError {
        // A child that closed its stdout exits soon after; give it a moment even when the
        // deadline has passed, so the error says how it exited.
        let deadline = deadline.max(Instant::now() + Duration::from_secs(1));
        match self.wait_for_exit(child, deadline) {
            Ok(Some(status)) => ChildError::Exited {
                name: self.running[child].name.clone(),
                status,
                stderr: self.running[child].stderr(),
            },
            Ok(None) => {
                let started = Instant::now();
                self.timed_out(vec![child], started)
            }
            Err(error) => error,
        }
    }

    fn timed_out(&self, children: Vec<usize>, started: Instant) -> ChildError {
        let mut stderr = String::new();
        for &child in &children {
            let text = self.running[child].stderr();
            if !text.trim().is_empty() {
                stderr.push_str(&format!(
                    "--- {}:\n{}\n",
                    self.running[child].name,
                    text.trim()
                ));
            }
        }
        ChildError::TimedOut {
            names: children
                .iter()
                .map(|&c| self.running[c].name.clone())
                .collect(),
            waited: started.elapsed(),
            stderr,
        }
    }
}

impl Drop for Children {
    /// Kills and reaps every child still running.
    fn drop(&mut self) {
        for running in &mut self.running {
            running.stdin = None;
            if running.status.is_none() {
                if let Ok(None) = running.child.try_wait() {
                    let _ = running.child.kill();
                }
                let _ = running.child.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(name: &str, script: &str) -> (String, Command) {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script);
        (name.to_owned(), command)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn what_a_process_printed_ends_an_error_if_anything() {
        assert_eq!(
            printed_suffix("its stderr", "\n  boom\n"),
            "; its stderr:\nboom"
        );
        assert_eq!(printed_suffix("its stderr", " \n"), "");
    }

    #[test]
    fn lines_go_both_ways_and_children_exit() {
        let mut children = Children::spawn([
            shell("a", "read x; echo got-$x; read y; echo bye"),
            shell("b", "read x; echo got-$x; echo bye"),
        ])
        .unwrap();
        children.send_all("go", soon()).unwrap();
        assert_eq!(
            children.line_from_each(soon()).unwrap(),
            ["got-go", "got-go"]
        );
        children.send(0, "end", soon()).unwrap();
        let rest = children.wait_all(soon()).unwrap();
        assert_eq!(rest, [vec!["bye".to_owned()], vec!["bye".to_owned()]]);
    }

    #[test]
    fn a_failing_child_is_named_with_its_stderr() {
        let mut children = Children::spawn([
            shell("good", "read x; echo fine"),
            shell("bad", "echo broken >&2; exit 3"),
        ])
        .unwrap();
        let _ = children.send_all("go", soon());
        match children.line_from_each(soon()) {
            Err(ChildError::Exited {
                name,
                status,
                stderr,
            }) => {
                assert_eq!(name, "bad");
                assert_eq!(status.code(), Some(3));
                assert_eq!(stderr.trim(), "broken");
            }
            other => panic!("expected bad to have exited: {other:?}"),
        }
    }

    #[test]
    fn a_silent_child_times_out_and_is_killed() {
        let mut children = Children::spawn([shell("sleeper", "exec sleep 600")]).unwrap();
        let began = Instant::now();
        let error = children
            .line_from_each(Instant::now() + Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(error, ChildError::TimedOut { ref names, .. } if names == &["sleeper"]));
        drop(children);
        assert!(began.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_killed_child_is_reaped_and_its_replacement_goes_on() {
        let mut children = Children::spawn([
            shell("a", "echo first; exec sleep 600"),
            shell("b", "read x; echo b-$x"),
        ])
        .unwrap();
        assert_eq!(
            children.next_line(soon()).unwrap(),
            Some((0, "first".to_owned()))
        );
        let killed = children.id(0);
        // Printed before the kill, taken after the restart: it stays queued.
        children
            .restart(0, shell("a", "echo again; read x; echo a-$x").1, soon())
            .unwrap();
        assert_ne!(children.id(0), killed);
        assert_eq!(
            children.next_line(soon()).unwrap(),
            Some((0, "again".to_owned()))
        );
        // Nothing more until asked.
        let quiet = Instant::now() + Duration::from_millis(100);
        assert_eq!(children.next_line(quiet).unwrap(), None);
        children.send_all("go", soon()).unwrap();
        let rest = children.wait_all(soon()).unwrap();
        assert_eq!(rest, [vec!["a-go".to_owned()], vec!["b-go".to_owned()]]);
        // Reaped: no zombie is left with the killed id (where /proc shows processes).
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{killed}/stat")) {
            assert!(!stat.contains(") Z "), "{stat}");
        }
    }

    #[test]
    fn the_lines_of_a_killed_child_are_kept() {
        // Both lines in one write, so both are in the pipe when it dies.
        let mut children =
            Children::spawn([shell("a", "printf 'one\\ntwo\\n'; exec sleep 600")]).unwrap();
        let first = children.next_line(soon()).unwrap();
        assert_eq!(first, Some((0, "one".to_owned())));
        let status = children.kill(0, soon()).unwrap();
        assert!(!status.success());
        assert_eq!(children.take_lines(0), ["two"]);
        assert!(matches!(
            children.next_line(soon()),
            Err(ChildError::Exited { ref name, .. }) if name == "a"
        ));
    }

    #[test]
    fn a_missing_program_cannot_be_started() {
        let error = Children::spawn([(
            "ghost".to_owned(),
            Command::new("/nonexistent/megalon-no-such-program"),
        )])
        .err()
        .unwrap();
        assert!(matches!(error, ChildError::Spawn { ref name, .. } if name == "ghost"));
    }
}
