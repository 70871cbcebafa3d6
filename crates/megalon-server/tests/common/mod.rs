//! What the server's tests share: a server process started for a test (stopped and
//! reaped when dropped), and a small RESP client over redis-protocol's encoder and
//! decoder, independent of the server's own.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode;
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};

/// How long a server may take to start or stop.
const START_WAIT: Duration = Duration::from_secs(20);
/// How long a reply may take.
const REPLY_WAIT: Duration = Duration::from_secs(20);

/// A directory for a test's pod file and sockets: in `/dev/shm` where there is one.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("megalon-server-test")
            .tempdir_in(shm)
            .expect("a directory in /dev/shm")
    } else {
        tempfile::tempdir().expect("a temporary directory")
    }
}

/// A megalon-server process.
pub struct Server {
    child: Child,
    /// Each host's socket, in the order the process printed them.
    pub sockets: Vec<PathBuf>,
    /// The directory of its pod file and sockets, if it is the server's own: removed
    /// after the process is stopped.
    dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts the server with `args` (and `--port 0` unless they name a port: tests use
    /// the Unix sockets) and waits until every one of `sockets` answers.
    pub fn start(args: &[&str], sockets: Vec<PathBuf>) -> Server {
        Server::start_with(
            Command::new(env!("CARGO_BIN_EXE_megalon-server")),
            args,
            sockets,
            Stdio::inherit(),
        )
    }

    /// [`Server::start`] of a process that may hold at most `descriptors` open files
    /// (`ulimit -n` in a shell that then runs the server).
    pub fn start_with_descriptors(
        descriptors: u32,
        args: &[&str],
        sockets: Vec<PathBuf>,
    ) -> Server {
        let mut shell = Command::new("sh");
        shell.args([
            "-c",
            &format!("ulimit -n {descriptors} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_megalon-server"),
        ]);
        Server::start_with(shell, args, sockets, Stdio::inherit())
    }

    /// [`Server::start`] with `env` in the process's environment, and its stderr kept
    /// for [`Server::wait_exit`] rather than shown.
    pub fn start_with_env(args: &[&str], sockets: Vec<PathBuf>, env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_megalon-server"));
        command.envs(env.iter().copied());
        Server::start_with(command, args, sockets, Stdio::piped())
    }

    fn start_with(
        mut command: Command,
        args: &[&str],
        sockets: Vec<PathBuf>,
        stderr: Stdio,
    ) -> Server {
        let no_port: &[&str] = if args.contains(&"--port") {
            &[]
        } else {
            &["--port", "0"]
        };
        let child = command
            .args(args)
            .args(no_port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("megalon-server starts");
        let mut server = Server {
            child,
            sockets,
            dir: None,
        };
        let deadline = Instant::now() + START_WAIT;
        for socket in server.sockets.clone() {
            loop {
                if let Some(status) = server.child.try_wait().expect("try_wait") {
                    panic!("megalon-server {args:?} exited with {status} before it served");
                }
                if UnixStream::connect(&socket).is_ok() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} did not answer within {START_WAIT:?}",
                    socket.display()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        server
    }

    /// The server, keeping `dir` (where its files are) until it is dropped.
    pub fn owning(mut self, dir: tempfile::TempDir) -> Server {
        self.dir = Some(dir);
        self
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a name `kill` knows: STOP, CONT, KILL) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal}");
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits up to `bound` for the process to exit: how it exited, and what it wrote to
    /// stderr if the test kept it ([`Server::start_with_env`]); `None` if it still runs.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<(std::process::ExitStatus, String)> {
        let deadline = Instant::now() + bound;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        Some((status, text))
    }

    /// A client of host `i` (in `sockets` order).
    pub fn client(&self, i: usize) -> Client {
        Client::connect(&self.sockets[i])
    }

    /// Sends SHUTDOWN and waits for the process to exit; returns whether it exited 0.
    pub fn shut_down(mut self) -> bool {
        let mut client = self.client(0);
        client.send(&[b"SHUTDOWN"]);
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.success();
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A RESP2 client on a Unix socket.
pub struct Client {
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(path: &Path) -> Client {
        let stream = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", path.display()));
        stream.set_read_timeout(Some(REPLY_WAIT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// The bytes of a command: an array of bulk strings.
    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let frame = OwnedFrame::Array(
            args.iter()
                .map(|a| OwnedFrame::BulkString(a.to_vec()))
                .collect(),
        );
        let mut bytes = vec![0; frame.encode_len(false)];
        encode(&mut bytes, &frame, false).expect("encode");
        bytes
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        self.send_raw(&Self::encode(args));
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// The next reply; panics if the connection closes first.
    pub fn recv(&mut self) -> OwnedFrame {
        self.try_recv().expect("the server closed the connection")
    }

    /// The next reply, or `None` if the connection closed.
    pub fn try_recv(&mut self) -> Option<OwnedFrame> {
        loop {
            if let Some((frame, used)) = decode(&self.buf).expect("a reply in RESP2") {
                self.buf.drain(..used);
                return Some(frame);
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = match self.stream.read(&mut chunk) {
                // A stop of this process (SIGSTOP, then SIGCONT) ends a read that has a
                // timeout with EINTR: not restarted, whatever `SA_RESTART` says.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                read => read.expect("a reply in time"),
            };
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn call(&mut self, args: &[&[u8]]) -> OwnedFrame {
        self.send(args);
        self.recv()
    }

    /// `call` with arguments given as one string of words.
    pub fn cmd(&mut self, words: &str) -> OwnedFrame {
        let args: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        self.call(&args)
    }
}

pub fn ok() -> OwnedFrame {
    OwnedFrame::SimpleString(b"OK".to_vec())
}

pub fn bulk(bytes: &[u8]) -> OwnedFrame {
    OwnedFrame::BulkString(bytes.to_vec())
}

pub fn int(n: i64) -> OwnedFrame {
    OwnedFrame::Integer(n)
}

pub fn err(text: &str) -> OwnedFrame {
    OwnedFrame::Error(text.into())
}

/// Whether a program is on PATH; prints why a test skips if not.
pub fn installed(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        eprintln!(
            "SKIPPED: {program} is not installed (apt-get install redis-tools); .ci/run installs it"
        );
    }
    found
}

/// Runs megalon-server with `args` on `socket` (`{host}` in it standing for each of
/// hosts 0 to 3) until it exits or serves (then killed), at most 20 s: how it exited, if
/// it did, and what it wrote to stderr.
pub fn run_to_exit(args: &[&str], socket: &Path) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_megalon-server"))
        .args(args)
        .args(["--socket", socket.to_str().unwrap(), "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        let served = (0..4).any(|h| {
            UnixStream::connect(socket.to_str().unwrap().replace("{host}", &h.to_string())).is_ok()
        });
        if served || Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let mut text = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut text);
    (status, text)
}

/// A server process as host `host` of the pod file `pod` in `dir` (created by the first
/// to start), on the socket `p{host}.sock` there, with `extra` flags.
pub fn host_process(dir: &Path, host: u32, extra: &[&str]) -> Server {
    host_process_with_env(dir, host, extra, &[])
}

/// [`host_process`] with `env` in its environment; if any, its stderr is kept for
/// [`Server::wait_exit`].
pub fn host_process_with_env(
    dir: &Path,
    host: u32,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let pod = dir.join("pod");
    let socket = dir.join(format!("p{host}.sock"));
    let (pod_text, host_text) = (pod.display().to_string(), host.to_string());
    let socket_text = socket.display().to_string();
    let mut args = vec![
        "--pod",
        &pod_text,
        "--host",
        &host_text,
        "--socket",
        &socket_text,
    ];
    args.extend(extra);
    if env.is_empty() {
        Server::start(&args, vec![socket])
    } else {
        Server::start_with_env(&args, vec![socket], env)
    }
}
