//! A worker: one thread of a host, with its handle on the store, serving the
//! connections the acceptor hands it from one readiness loop. Each connection reads
//! what has arrived, runs every whole command in it, in order, and writes the replies
//! before it reads more: a pipeline's replies go out in as few writes as it came in, and
//! a client that does not read its replies stops being read (its memory stays bounded
//! by one buffer of requests and their replies; one command's reply is built whole, so
//! an MGET of many keys of large values holds up to its keys times the largest value).
//!
//! A connection that closes, or errs, is dropped with everything it held: its buffers
//! and its place in the host's count. Between commands it holds nothing in the store
//! (every store call is whole), so a client that disconnects mid-pipeline leaves no lock
//! behind.

use std::io::{self, Read, Write};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

use crate::command::{Executor, Session};
use crate::host::{HostServer, Shutdown};
use crate::resp::{self, Next, Reader, Refusal};

/// Bytes one connection may read in one turn before the others get theirs.
const TURN_BYTES: usize = 256 * 1024;
/// Replies buffered before they are written, even if more commands are waiting.
const FLUSH_BYTES: usize = 64 * 1024;
/// The output buffer a connection keeps between replies (a larger one is freed).
const KEPT_OUTPUT_BYTES: usize = 64 * 1024;
/// The waker's token (connections are 0..).
const WAKER: Token = Token(usize::MAX);

/// What a connection needs of its socket: to read it, write it and have the poll watch
/// it. The host's Unix socket and its loopback TCP port both give that, so a connection
/// holds either as a [`Stream`].
pub trait Socket: Read + Write + mio::event::Source + Send {}

impl<T: Read + Write + mio::event::Source + Send> Socket for T {}

/// A client's socket: on the host's Unix socket, or on its loopback TCP port.
pub type Stream = Box<dyn Socket>;

/// What a connection's turn ended with.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// Waiting for the socket (readable or writable).
    Wait,
    /// Its share of the turn is used up with more to read: give it another.
    Again,
    /// Closed: drop it.
    Closed,
}

/// One client.
struct Connection {
    stream: Stream,
    reader: Reader,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    written: usize,
    session: Session,
}

impl Connection {
    /// Writes, runs and reads until the socket would block, the client is gone, the
    /// turn is used up, or the process is stopping.
    fn turn(&mut self, executor: &mut Executor, shutdown: &Shutdown) -> Turn {
        let mut read_this_turn = 0;
        loop {
            while self.written < self.out.len() {
                match self.stream.write(&self.out[self.written..]) {
                    Ok(0) => return Turn::Closed,
                    Ok(n) => self.written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Turn::Closed,
                }
            }
            self.out.clear();
            self.written = 0;
            if self.out.capacity() > KEPT_OUTPUT_BYTES {
                self.out = Vec::with_capacity(KEPT_OUTPUT_BYTES);
            }
            if self.session.quit {
                return Turn::Closed;
            }
            // Stopping: the replies so far are written (as far as the socket takes them),
            // the commands behind them not run. A pipeline of creates each waiting for
            // log room held the shutdown up to the wait limit per command.
            if shutdown.requested() {
                return Turn::Wait;
            }
            if self.run_buffered(executor, shutdown) {
                continue;
            }
            if read_this_turn >= TURN_BYTES {
                return Turn::Again;
            }
            match self.stream.read(self.reader.spare()) {
                Ok(0) => return Turn::Closed,
                Ok(n) => {
                    self.reader.filled(n);
                    read_this_turn += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Idle until its client sends more: it keeps little meanwhile.
                    self.reader.waiting();
                    return Turn::Wait;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Turn::Closed,
            }
        }
    }

    /// Runs the whole commands buffered (until the replies are large enough to write
    /// first). Returns whether it replied to anything.
    fn run_buffered(&mut self, executor: &mut Executor, shutdown: &Shutdown) -> bool {
        let mut replied = false;
        while self.out.len() < FLUSH_BYTES && !self.session.quit && !shutdown.requested() {
            match self.reader.next() {
                Next::Command(args) => executor.run(args, &mut self.session, &mut self.out),
                Next::Refused(refusal) => {
                    resp::error(&mut self.out, format_args!("{refusal}"));
                    // Not RESP: nothing says where the next command starts, and the rest
                    // of the frame, read later, would run as commands (text inside a
                    // value, say). The error goes out, then the connection closes, as
                    // Redis closes it.
                    if matches!(refusal, Refusal::Malformed(_)) {
                        self.session.quit = true;
                    }
                }
                Next::More => break,
            }
            replied = true;
        }
        replied
    }
}

/// One worker thread's state.
pub struct Worker {
    host: Arc<HostServer>,
    poll: Poll,
    incoming: mpsc::Receiver<Stream>,
    connections: Vec<Option<Connection>>,
    free: Vec<usize>,
    commands: Arc<AtomicU64>,
}

impl Worker {
    /// A worker of `host`, and how to hand it a connection and wake it.
    #[allow(clippy::type_complexity)]
    pub fn new(host: Arc<HostServer>) -> io::Result<(Worker, (mpsc::Sender<Stream>, Arc<Waker>))> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (sender, incoming) = mpsc::channel();
        let commands = host.command_counter();
        Ok((
            Worker {
                host,
                poll,
                incoming,
                connections: Vec::new(),
                free: Vec::new(),
                commands,
            },
            (sender, waker),
        ))
    }

    /// Serves until the process shuts down.
    pub fn run(mut self) {
        let mut executor = match Executor::new(Arc::clone(&self.host), Arc::clone(&self.commands)) {
            Ok(executor) => executor,
            Err(e) => {
                eprintln!(
                    "megalon-server: host {}: a worker's handle: {e}",
                    self.host.host_id
                );
                self.host.shutdown.trigger();
                return;
            }
        };
        let mut events = Events::with_capacity(256);
        let mut again: Vec<usize> = Vec::new();
        let mut turns: Vec<usize> = Vec::new();
        while !self.host.shutdown.requested() {
            let timeout = (!again.is_empty()).then_some(Duration::ZERO);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("megalon-server: a worker's poll: {e}; stopping");
                self.host.shutdown.trigger();
                break;
            }
            turns.clear();
            turns.append(&mut again);
            for event in &events {
                if event.token() == WAKER {
                    self.take_new(&mut turns);
                } else {
                    turns.push(event.token().0);
                }
            }
            turns.sort_unstable();
            turns.dedup();
            for &slot in &turns {
                let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut)
                else {
                    continue;
                };
                match connection.turn(&mut executor, &self.host.shutdown) {
                    Turn::Wait => {}
                    Turn::Again => again.push(slot),
                    Turn::Closed => self.close(slot),
                }
            }
        }
        for slot in 0..self.connections.len() {
            if self.connections[slot].is_some() {
                self.close(slot);
            }
        }
    }

    /// Registers the connections the acceptor sent; each gets a first turn (bytes may
    /// have arrived before the registration).
    fn take_new(&mut self, turns: &mut Vec<usize>) {
        while let Ok(mut stream) = self.incoming.try_recv() {
            let slot = self.free.pop().unwrap_or(self.connections.len());
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                eprintln!("megalon-server: registering a connection: {e}");
                self.host.client_left();
                continue;
            }
            let connection = Connection {
                stream,
                reader: Reader::new(self.host.limits.resp),
                out: Vec::new(),
                written: 0,
                session: Session::new(self.host.client_id()),
            };
            if slot == self.connections.len() {
                self.connections.push(Some(connection));
            } else {
                self.connections[slot] = Some(connection);
            }
            turns.push(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut connection) = self.connections[slot].take() {
            let _ = self.poll.registry().deregister(&mut connection.stream);
            self.free.push(slot);
            self.host.client_left();
        }
    }
}
