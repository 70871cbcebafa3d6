//! Redis as a peer: a `redis-server` started for the run on a Unix socket, with no
//! persistence and no TCP port, and one client thread per worker in this process, each
//! with its own connection, one request at a time (no pipelining), as the KV store's
//! calls are. The client is a small hand-written RESP one: `GET` and `SET` of bulk
//! strings.
//!
//! Without `redis-server` (on `PATH`, or at [`PeerSpec::redis_server`]) the peer answers
//! [`PeerError::Unavailable`] with how to install it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::drive::{self, Worker};
use crate::{PeerError, PeerSpec, Rates};

/// How to get `redis-server`.
pub(crate) const HOW_TO_INSTALL: &str = "apt-get install redis-server (Debian, Ubuntu); brew install redis (macOS); or set PeerSpec::redis_server to its path";

/// Longest wait for the server to exit after `SHUTDOWN NOSAVE` before it is killed.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// How often the start looks for the socket.
const START_POLL: Duration = Duration::from_millis(10);
/// Bytes of the server's log kept for errors (the last ones).
const LOG_KEPT_BYTES: usize = 4096;

/// Redis for `spec`: checks that the server is there, starts it, runs one client thread
/// per worker, shuts it down.
pub(crate) fn run(spec: &PeerSpec, notes: &mut Vec<String>) -> Result<Rates, PeerError> {
    let version = server_version(&spec.redis_server)?;
    let wait = Duration::from_secs_f64(spec.wait_seconds);
    let server = Server::start(&spec.redis_server, wait)?;
    notes.push(format!(
        "{version}, started for the run on the Unix socket {}: --save \"\" --appendonly no --port 0",
        server.socket.display()
    ));
    notes.push(format!(
        "{} client threads in this process, one connection each, one request at a time (no pipelining)",
        spec.workers
    ));
    let mut clients = (0..spec.workers)
        .map(|_| Client::connect(&server.socket, wait))
        .collect::<io::Result<Vec<_>>>()?;
    let rates = drive::on_threads(spec, &mut clients);
    drop(clients);
    server.shut_down();
    rates
}

/// `redis-server --version`'s version (`redis-server 7.0.15`), or why there is none.
fn server_version(server: &Path) -> Result<String, PeerError> {
    let output = match Command::new(server).arg("--version").output() {
        Ok(output) => output,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(PeerError::Unavailable {
                reason: format!("{} is not installed (not found)", server.display()),
                how_to_install: HOW_TO_INSTALL.to_owned(),
            })
        }
        Err(error) => return Err(error.into()),
    };
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !text.starts_with("Redis server") {
        return Err(PeerError::ServerStart {
            reason: format!(
                "{} --version exited with {} and said {:?}",
                server.display(),
                output.status,
                text.trim()
            ),
            log: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or("(version unknown)");
    Ok(format!("redis-server {version}"))
}

/// A running `redis-server` and its directory; shut down, reaped and removed when
/// dropped.
struct Server {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Server {
    /// Starts `program` on a Unix socket in a new directory, and waits (at most `wait`)
    /// until it answers `PING`.
    fn start(program: &Path, wait: Duration) -> Result<Server, PeerError> {
        let dir = crate::unique_path(&std::env::temp_dir(), "redis");
        std::fs::create_dir(&dir)?;
        let socket = dir.join("redis.sock");
        let output = match File::create(dir.join("output.txt")) {
            Ok(file) => file,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error.into());
            }
        };
        let spawned = Command::new(program)
            .args(["--save", "", "--appendonly", "no", "--port", "0"])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error.into());
            }
        };
        // From here on, dropping `server` stops the process and removes the directory.
        let mut server = Server { child, dir, socket };
        let deadline = Instant::now() + wait;
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(PeerError::ServerStart {
                    reason: format!("it exited with {status}"),
                    log: server.log(),
                });
            }
            if let Ok(mut client) = Client::connect(&server.socket, wait) {
                let mut reply = Vec::new();
                match client.call(&[b"PING"], &mut reply)? {
                    Reply::Status if client.line == b"PONG" => return Ok(server),
                    other => {
                        return Err(PeerError::ServerStart {
                            reason: format!("it answered PING with {other:?}"),
                            log: server.log(),
                        })
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(PeerError::ServerStart {
                    reason: format!("no answer on {} within {wait:?}", server.socket.display()),
                    log: server.log(),
                });
            }
            thread::sleep(START_POLL);
        }
    }

    /// The end of what the server printed.
    fn log(&self) -> String {
        let text = std::fs::read(self.dir.join("output.txt")).unwrap_or_default();
        let start = text.len().saturating_sub(LOG_KEPT_BYTES);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    /// Asks the server to exit without saving; kills it if it has not within
    /// [`SHUTDOWN_WAIT`]. Reaps it and removes its directory.
    fn shut_down(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Ok(mut client) = Client::connect(&self.socket, SHUTDOWN_WAIT) {
                // The server closes the connection as it exits: no reply to wait for.
                let _ = client.send(&[b"SHUTDOWN", b"NOSAVE"]);
            }
            let deadline = Instant::now() + SHUTDOWN_WAIT;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(START_POLL);
            }
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A reply's kind; a status's or an error's text is left in the client's line buffer, a
/// bulk string's bytes in the buffer passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    /// `+text`.
    Status,
    /// `-text`.
    Error,
    /// `:n`.
    Integer(i64),
    /// `$n` and n bytes.
    Bulk,
    /// `$-1`: no value.
    Nil,
    /// `*n`: an array of n replies (this client never asks for one).
    Array(i64),
}

/// Writes a command of bulk strings into `request` (cleared first).
fn encode(request: &mut Vec<u8>, args: &[&[u8]]) {
    request.clear();
    // Writing into a Vec cannot fail.
    let _ = write!(request, "*{}\r\n", args.len());
    for arg in args {
        let _ = write!(request, "${}\r\n", arg.len());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply from `reader`: its first line into `line` (without the type byte and
/// the CRLF), a bulk string's bytes into `bulk`.
fn read_reply<R: BufRead>(
    reader: &mut R,
    line: &mut Vec<u8>,
    bulk: &mut Vec<u8>,
) -> Result<Reply, PeerError> {
    let not_resp = |what: &str, line: &[u8]| {
        PeerError::Redis(format!("{what}: {:?}", String::from_utf8_lossy(line)))
    };
    line.clear();
    if reader.read_until(b'\n', line)? == 0 {
        return Err(PeerError::Redis("the server closed the connection".into()));
    }
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(not_resp("a reply line that is not a type and CRLF", line));
    }
    line.truncate(line.len() - 2);
    let kind = line.remove(0);
    let number = |line: &[u8]| -> Result<i64, PeerError> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| not_resp("a number that does not parse", line))
    };
    match kind {
        b'+' => Ok(Reply::Status),
        b'-' => Ok(Reply::Error),
        b':' => Ok(Reply::Integer(number(line)?)),
        b'*' => Ok(Reply::Array(number(line)?)),
        b'$' => {
            let length = number(line)?;
            if length == -1 {
                return Ok(Reply::Nil);
            }
            let length =
                usize::try_from(length).map_err(|_| not_resp("a negative bulk length", line))?;
            bulk.resize(length, 0);
            reader.read_exact(bulk)?;
            let mut end = [0u8; 2];
            reader.read_exact(&mut end)?;
            if &end != b"\r\n" {
                return Err(not_resp("a bulk string not ended by CRLF", &end));
            }
            Ok(Reply::Bulk)
        }
        _ => {
            line.insert(0, kind);
            Err(not_resp("not a RESP reply", line))
        }
    }
}

/// One connection to the server.
pub(crate) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    request: Vec<u8>,
    line: Vec<u8>,
}

impl Client {
    /// Connects to `socket`; every read and write on it waits at most `timeout`.
    fn connect(socket: &Path, timeout: Duration) -> io::Result<Client> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            request: Vec::new(),
            line: Vec::new(),
        })
    }

    fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        encode(&mut self.request, args);
        self.writer.write_all(&self.request)
    }

    /// Sends a command and reads its reply (a bulk string into `bulk`).
    fn call(&mut self, args: &[&[u8]], bulk: &mut Vec<u8>) -> Result<Reply, PeerError> {
        self.send(args)?;
        read_reply(&mut self.reader, &mut self.line, bulk)
    }

    /// The error for a reply `command` should not get.
    fn unexpected(&self, command: &str, reply: Reply) -> PeerError {
        let text = String::from_utf8_lossy(&self.line);
        match reply {
            Reply::Error => PeerError::Redis(format!("{command}: {text}")),
            other => PeerError::Redis(format!("{command} answered {other:?} {text:?}")),
        }
    }
}

impl Worker for Client {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, PeerError> {
        match self.call(&[b"GET", key], out)? {
            Reply::Bulk => Ok(true),
            Reply::Nil => Ok(false),
            other => Err(self.unexpected("GET", other)),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), PeerError> {
        let mut none = Vec::new();
        match self.call(&[b"SET", key, value], &mut none)? {
            Reply::Status if self.line == b"OK" => Ok(()),
            other => Err(self.unexpected("SET", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> (Result<Reply, PeerError>, Vec<u8>, Vec<u8>) {
        let (mut line, mut bulk) = (Vec::new(), Vec::new());
        let reply = read_reply(&mut &bytes[..], &mut line, &mut bulk);
        (reply, line, bulk)
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut request = Vec::new();
        encode(&mut request, &[b"SET", b"user1", b"a\r\nb"]);
        assert_eq!(
            request,
            b"*3\r\n$3\r\nSET\r\n$5\r\nuser1\r\n$4\r\na\r\nb\r\n"
        );
    }

    #[test]
    fn replies_parse() {
        let (reply, line, _) = parse(b"+OK\r\n");
        assert_eq!((reply.unwrap(), &line[..]), (Reply::Status, &b"OK"[..]));
        let (reply, line, _) = parse(b"-ERR wrong type\r\n");
        assert_eq!(
            (reply.unwrap(), &line[..]),
            (Reply::Error, &b"ERR wrong type"[..])
        );
        assert_eq!(parse(b":42\r\n").0.unwrap(), Reply::Integer(42));
        assert_eq!(parse(b"*2\r\n").0.unwrap(), Reply::Array(2));
        assert_eq!(parse(b"$-1\r\n").0.unwrap(), Reply::Nil);
        let (reply, _, bulk) = parse(b"$4\r\na\r\nb\r\n");
        assert_eq!((reply.unwrap(), &bulk[..]), (Reply::Bulk, &b"a\r\nb"[..]));
        let (reply, _, bulk) = parse(b"$0\r\n\r\n");
        assert_eq!((reply.unwrap(), bulk.len()), (Reply::Bulk, 0));
    }

    #[test]
    fn what_is_not_resp_is_an_error() {
        for bad in [
            &b"hello\r\n"[..],
            b"+OK\n",
            b":x\r\n",
            b"$3\r\nabcd\r\n",
            b"$-2\r\n",
        ] {
            assert!(
                matches!(parse(bad).0, Err(PeerError::Redis(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(matches!(parse(b"$5\r\nab").0, Err(PeerError::Io(_))));
        assert!(matches!(parse(b"").0, Err(PeerError::Redis(_))));
    }

    #[test]
    fn a_missing_server_is_unavailable_with_how_to_install() {
        match server_version(Path::new("megalon-peers-no-such-redis-server")) {
            Err(PeerError::Unavailable {
                reason,
                how_to_install,
            }) => {
                assert!(reason.contains("megalon-peers-no-such-redis-server"));
                assert!(how_to_install.contains("apt-get install redis-server"));
                assert!(how_to_install.contains("brew install redis"));
            }
            other => panic!("expected Unavailable: {other:?}"),
        }
    }
}
