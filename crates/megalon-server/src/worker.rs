//! A worker: a thread of a host, with its handle on the store, serving the connections
//! the acceptor hands it from one readiness loop. Each connection reads what has
//! arrived, runs every whole command in it, in order, and writes the replies before it
//! reads more: a pipeline's replies go out in as few writes as it came in. A client whose
//! replies the socket does not take goes on being read, and its commands run, with their
//! replies held, up to [`PENDING_OUTPUT_BYTES`] of them: clients that send a whole
//! pipeline before they read a reply (redis-py's and Jedis's pipelines) stop reading
//! until their write ends, and a server that stopped reading first would wait for them
//! for good. Past that bound a client that does not read its replies stops being read
//! (its memory stays bounded by the bound and one buffer of requests; one command's
//! reply is built whole, so an MGET of many keys of large values holds up to its keys
//! times the largest value).
//!
//! A command may wait in the store (a record held by a stopped host of another process,
//! a full log: up to the wait limit, seconds). The loop does not wait with it: a
//! connection's turn runs with the loop let go, and a turn the relief watch finds still
//! running [`RELIEF_TICK`] later goes on by itself on its thread while another thread of
//! the worker (an idle one, or one started for it, at most [`RELIEF_THREADS`]) takes the
//! loop over and serves the other connections. The waiting connection is run by nothing
//! else meanwhile; when its turn ends its thread hands it back to the loop and waits to
//! lead in turn. So each connection's commands still run, and are answered, in order, one
//! at a time, and what a command answers does not change; the usual turn, a few
//! microseconds, costs two atomic operations and a lock more than it did. The first thread
//! of a worker leads again as soon as it waits, and a thread started for relief that has
//! waited [`RELIEF_RETIRE`] ends: a worker none of whose turns waits runs on one thread.
//!
//! A connection that closes, or errs, is dropped with everything it held: its buffers
//! and its place in the host's count. Between commands it holds nothing in the store
//! (every store call is whole), so a client that disconnects mid-pipeline leaves no lock
//! behind.
//!
//! A command that panics (a defect, of the server or of the store) takes only its own
//! connection down: the replies before it go out, then an error in place of its reply,
//! and the connection closes as above; the thread goes on with a new handle on the
//! store, and INFO counts it (`megalon_command_panics`).

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
/// Replies a connection may hold unwritten while it goes on reading and running its
/// client's commands (a client that sends a whole pipeline before it reads a reply).
/// Past it, the connection is read no more until its client takes some.
const PENDING_OUTPUT_BYTES: usize = 256 << 20;
/// The waker's token (connections are 0..).
const WAKER: Token = Token(usize::MAX);
/// How often the relief watch looks at every worker. A turn it sees running at two looks
/// in a row has held the worker's other connections up for at least this long: another
/// thread takes the loop over. A turn of a pipeline is a few microseconds, of a full
/// [`TURN_BYTES`] a few milliseconds; a command waiting on a stopped host, seconds.
pub const RELIEF_TICK: Duration = Duration::from_millis(10);
/// Threads a worker may start, beyond its first, to take its loop over from a turn that
/// waits: so many of its connections may wait in the store at once while the others are
/// served. Past that, a worker whose every thread waits holds its other connections up
/// until one of the waits ends, as one thread did. Started when first needed; one that
/// has waited [`RELIEF_RETIRE`] for the loop ends.
pub const RELIEF_THREADS: usize = 32;
/// How long a thread started for relief waits, idle, for its worker's loop before it ends
/// (the next turn that waits starts another).
pub const RELIEF_RETIRE: Duration = Duration::from_secs(2);
/// How often a thread waiting for its worker's loop looks whether the process stops.
const IDLE_LOOK: Duration = Duration::from_millis(100);

/// What a connection needs of its socket: to read it, write it and have the poll watch
/// it. The host's Unix socket and its loopback TCP port both give that, so a connection
/// holds either as a [`Stream`].
pub trait Socket: Read + Write + mio::event::Source + Send {}

impl<T: Read + Write + mio::event::Source + Send> Socket for T {}

/// A client's socket: on the host's Unix socket, or on its loopback TCP port.
pub type Stream = Box<dyn Socket>;

/// What a connection's turn ended with.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Turn {
    /// Waiting for the socket (readable or writable).
    Wait,
    /// Its share of the turn is used up with more to read: give it another.
    Again,
    /// Closed: drop it.
    Closed,
}

/// How far [`Connection::run_buffered`] went.
enum Ran {
    /// Every whole command buffered ran (`replied`: at least one).
    All { replied: bool },
    /// It stopped with commands perhaps left: replies to write first, a quit, a stop.
    Some,
}

/// One client.
struct Connection {
    stream: Stream,
    reader: Reader,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    written: usize,
    session: Session,
    /// Where in `out` the reply of the command running now begins (`None` between
    /// commands): a command that panics leaves a reply cut anywhere from there on.
    running: Option<usize>,
}

impl Connection {
    /// Writes, runs and reads until the socket would block, the client is gone, the
    /// turn is used up, or the process is stopping.
    fn turn(&mut self, executor: &mut Executor, shutdown: &Shutdown) -> Turn {
        let mut read_this_turn = 0;
        loop {
            let mut blocked = false;
            while self.written < self.out.len() {
                match self.stream.write(&self.out[self.written..]) {
                    Ok(0) => return Turn::Closed,
                    Ok(n) => self.written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Turn::Closed,
                }
            }
            if blocked {
                // The client does not take its replies yet: it may be sending the rest
                // of a pipeline first (redis-py, Jedis), and stops reading replies until
                // its write ends. Reading on (up to a bound) lets it end, as Redis does;
                // stopping here left both sides waiting for the other for good.
                if self.session.quit || self.out.len() - self.written >= PENDING_OUTPUT_BYTES {
                    return Turn::Wait;
                }
                // The written front goes once it is at least half the buffer: each byte
                // is moved a bounded number of times, however slowly the client reads.
                if self.written >= KEPT_OUTPUT_BYTES && 2 * self.written >= self.out.len() {
                    self.out.drain(..self.written);
                    self.written = 0;
                }
            } else {
                self.out.clear();
                self.written = 0;
                if self.out.capacity() > KEPT_OUTPUT_BYTES {
                    self.out = Vec::with_capacity(KEPT_OUTPUT_BYTES);
                }
                if self.session.quit {
                    return Turn::Closed;
                }
            }
            // Stopping: the replies so far are written (as far as the socket takes them),
            // the commands behind them not run. A pipeline of creates each waiting for
            // log room held the shutdown up to the wait limit per command.
            if shutdown.requested() {
                return Turn::Wait;
            }
            let limit = if blocked {
                PENDING_OUTPUT_BYTES
            } else {
                FLUSH_BYTES
            };
            match self.run_buffered(executor, shutdown, limit) {
                // Replies enough to write first (or over the bound): the commands left
                // stay buffered, and nothing is read until they run.
                Ran::Some => continue,
                // Replies to write, to a socket that may take them.
                Ran::All { replied: true } if !blocked => continue,
                Ran::All { .. } => {}
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

    /// Runs the whole commands buffered, until the replies not yet written reach
    /// `limit` bytes (or the client quits, or the process stops).
    fn run_buffered(&mut self, executor: &mut Executor, shutdown: &Shutdown, limit: usize) -> Ran {
        let mut replied = false;
        loop {
            if self.out.len() - self.written >= limit || self.session.quit || shutdown.requested() {
                return Ran::Some;
            }
            match self.reader.next() {
                Next::Command(args) => {
                    self.running = Some(self.out.len());
                    executor.run(args, &mut self.session, &mut self.out);
                    self.running = None;
                }
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
                Next::More => return Ran::All { replied },
            }
            replied = true;
        }
    }

    /// After a panic in this connection's turn: the replies before the command that
    /// panicked go out, then an error for that command in place of whatever part of its
    /// reply it wrote, as far as the socket takes them without waiting; then the
    /// connection closes (what the command did in the store, whole or not at all, is
    /// unknown to its client, as after a lost connection).
    fn after_panic(&mut self) {
        if let Some(start) = self.running.take() {
            self.out.truncate(start);
            resp::error(
                &mut self.out,
                format_args!("ERR the server failed running this command; the connection closes"),
            );
        }
        while self.written < self.out.len() {
            match self.stream.write(&self.out[self.written..]) {
                Ok(n) if n > 0 => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return,
            }
        }
    }
}

/// A connection's place in its worker.
enum Slot {
    Free,
    /// Served by the loop (boxed: a turn moves it out and back).
    Here(Box<Connection>),
    /// Its turn runs, the loop let go. It comes back to its slot when the turn ends (or
    /// through [`Shared::returned`], if another thread took the loop over meanwhile); no
    /// other thread runs it until then.
    Away,
}

/// A worker's readiness loop and its connections: whoever holds it (its mutex) leads the
/// worker, and holds it while it polls; a turn runs without it.
struct Loop {
    poll: Poll,
    events: Events,
    incoming: mpsc::Receiver<Stream>,
    connections: Vec<Slot>,
    free: Vec<usize>,
    /// Connections to give a turn before the next poll, the next one last.
    ready: Vec<usize>,
    /// Connections whose turn was used up with more to read: a turn after the next poll.
    again: Vec<usize>,
}

impl Loop {
    /// The connection in `slot`, marked away, if one is there (a slot named by an event
    /// may have closed, or be away).
    fn take(&mut self, slot: usize) -> Option<Box<Connection>> {
        let place = self.connections.get_mut(slot)?;
        if !matches!(place, Slot::Here(_)) {
            return None;
        }
        match std::mem::replace(place, Slot::Away) {
            Slot::Here(connection) => Some(connection),
            Slot::Free | Slot::Away => unreachable!("matched as here"),
        }
    }

    /// `connection`, back in its `slot` after a turn of this loop's leader.
    fn put_back(
        &mut self,
        slot: usize,
        connection: Box<Connection>,
        turn: Turn,
        host: &HostServer,
    ) {
        self.connections[slot] = Slot::Here(connection);
        match turn {
            Turn::Wait => {}
            Turn::Again => self.again.push(slot),
            Turn::Closed => self.close(slot, host),
        }
    }

    fn close(&mut self, slot: usize, host: &HostServer) {
        if let Slot::Here(mut connection) =
            std::mem::replace(&mut self.connections[slot], Slot::Free)
        {
            let _ = self.poll.registry().deregister(&mut connection.stream);
            self.free.push(slot);
            host.client_left();
        } else {
            debug_assert!(false, "closing slot {slot}, which holds no connection");
        }
    }
}

/// What a worker's threads share.
struct Shared {
    host: Arc<HostServer>,
    /// The worker's place among its host's (its threads' names).
    index: usize,
    /// Commands the worker ran (every thread of it counts here).
    commands: Arc<AtomicU64>,
    looped: Mutex<Loop>,
    waker: Arc<Waker>,
    /// Turns the leader began and ended, counted: odd while one runs (nobody holds the
    /// loop). The relief watch, finding one odd value at two looks, moves it on to the
    /// next even one and hands the loop to another thread; the turn's thread, finding it
    /// moved when its turn ends (its compare-exchange fails), knows it no longer leads,
    /// and hands its connection back through `returned`. Either the turn's thread or the
    /// watch moves it from an odd value, never both, so exactly one thread leads after.
    stamp: AtomicU64,
    /// Connections whose turn ended on a thread that no longer leads, and how it ended.
    returned: Mutex<Vec<(usize, Box<Connection>, Turn)>>,
    pool: Mutex<Pool>,
    /// Signalled when the loop is handed to an idle thread (`Pool::leads`).
    handed: Condvar,
}

/// The threads of a worker beyond its first.
#[derive(Default)]
struct Pool {
    /// Threads started and not ended (at most [`RELIEF_THREADS`]).
    started: usize,
    /// Threads started so far (their names).
    named: usize,
    /// Threads (the first included) waiting to lead.
    idle: usize,
    /// Loops handed to the idle threads and not yet taken (0 or 1).
    leads: usize,
    /// The worker's first thread waits to lead (it is counted in `idle` too).
    first_idle: bool,
    /// The loop is handed back to the first thread, and not yet taken.
    first_leads: bool,
    /// The threads started and not yet joined.
    handles: Vec<JoinHandle<()>>,
}

impl Shared {
    /// Leads the worker, then waits to lead again each time a turn of this thread is
    /// relieved, until the process stops (or, for a thread started for relief, until it
    /// has waited [`RELIEF_RETIRE`]).
    fn serve(&self, mut executor: Executor, started: bool) {
        while self.lead(&mut executor, started) {
            let mut pool = self.pool.lock().expect("pool");
            pool.idle += 1;
            if !started {
                // The leader hands the loop back at its next look (`hand_back`), so that
                // the threads started for relief end once none is needed.
                pool.first_idle = true;
                let _ = self.waker.wake();
            }
            if !self.wait_to_lead(pool, started) {
                return;
            }
        }
    }

    /// Whether a thread started for relief, leading with no turn to run, hands the loop
    /// back to the worker's first thread (waiting to lead); it then waits like any idle
    /// thread, and ends after [`RELIEF_RETIRE`] unless a turn needs it first.
    fn hand_back(&self, started: bool) -> bool {
        if !started {
            return false;
        }
        let mut pool = self.pool.lock().expect("pool");
        if !pool.first_idle || pool.first_leads {
            return false;
        }
        pool.first_leads = true;
        self.handed.notify_all();
        true
    }

    /// Waits until the loop is handed to this thread (`true`), or the process stops, or
    /// (`started`: a thread started for relief) it has waited [`RELIEF_RETIRE`] and ends
    /// (`false`). The caller has counted it in `pool.idle`.
    fn wait_to_lead(&self, mut pool: MutexGuard<'_, Pool>, started: bool) -> bool {
        let idle_since = Instant::now();
        loop {
            if !started && pool.first_leads {
                pool.first_leads = false;
                pool.first_idle = false;
                pool.idle -= 1;
                return true;
            }
            if pool.leads > 0 {
                pool.leads -= 1;
                pool.idle -= 1;
                pool.first_idle &= started;
                return true;
            }
            if self.host.shutdown.requested() {
                pool.idle -= 1;
                return false;
            }
            // No loop is handed to an idle thread here (`leads` is 0 under the lock), so
            // `relieve` sees one idle thread fewer and starts one if it needs one.
            if started && idle_since.elapsed() >= RELIEF_RETIRE {
                pool.idle -= 1;
                pool.started -= 1;
                self.host.relief_thread_ended();
                return false;
            }
            pool = self.handed.wait_timeout(pool, IDLE_LOOK).expect("pool").0;
        }
    }

    /// Runs the loop: polls, and gives the ready connections their turns. Returns `false`
    /// once the process stops, `true` once a turn of this thread was relieved (its
    /// connection handed back; another thread leads) or, on a thread started for relief,
    /// once it handed the loop back to the first.
    fn lead(&self, executor: &mut Executor, started: bool) -> bool {
        let shutdown = &self.host.shutdown;
        let mut looped = self.looped.lock().expect("loop");
        while !shutdown.requested() {
            let Some(slot) = looped.ready.pop() else {
                if self.hand_back(started) {
                    return true;
                }
                if !self.poll_round(&mut looped) {
                    break;
                }
                continue;
            };
            let Some(mut connection) = looped.take(slot) else {
                continue;
            };
            // AcqRel: the watch's compare-exchange (Acquire) sees the turn begun after
            // everything this thread did to the loop.
            let in_turn = self.stamp.fetch_add(1, Ordering::AcqRel) + 1;
            debug_assert!(in_turn % 2 == 1, "a turn began while one ran");
            drop(looped);
            let turn = self.turn(&mut connection, executor);
            let ended = self.stamp.compare_exchange(
                in_turn,
                in_turn + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if ended.is_err() {
                // Relieved: another thread leads, and may be polling with the loop held.
                self.returned
                    .lock()
                    .expect("returned")
                    .push((slot, connection, turn));
                let _ = self.waker.wake();
                return true;
            }
            // Not relieved, and the watch will not relieve a turn that has ended: nobody
            // else takes the loop.
            looped = self.looped.lock().expect("loop");
            looped.put_back(slot, connection, turn, &self.host);
        }
        false
    }

    /// `connection`'s turn. A panic in it (a defect of the server, or of the store
    /// underneath) closes that connection only: the others, the loop and the thread go
    /// on, with a new handle on the store in place of the one the panic left.
    fn turn(&self, connection: &mut Connection, executor: &mut Executor) -> Turn {
        let shutdown = &self.host.shutdown;
        let panicked =
            match panic::catch_unwind(AssertUnwindSafe(|| connection.turn(executor, shutdown))) {
                Ok(turn) => return turn,
                Err(panicked) => panicked,
            };
        self.host.command_panicked();
        let what = (panicked.downcast_ref::<&str>().copied())
            .or_else(|| panicked.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic");
        eprintln!(
            "megalon-server: host {}: a connection's command panicked ({what}); closing that connection",
            self.host.host_id
        );
        connection.after_panic();
        match Executor::new(Arc::clone(&self.host), Arc::clone(&self.commands)) {
            Ok(fresh) => *executor = fresh,
            Err(e) => {
                eprintln!(
                    "megalon-server: host {}: a worker's new handle after a panic: {e}; stopping",
                    self.host.host_id
                );
                shutdown.trigger();
            }
        }
        Turn::Closed
    }

    /// Polls once, and queues the ready connections (new ones, and ones handed back, when
    /// woken). `false`: the poll failed for good, and the process is stopping.
    fn poll_round(&self, looped: &mut Loop) -> bool {
        let timeout = (!looped.again.is_empty()).then_some(Duration::ZERO);
        if let Err(e) = looped.poll.poll(&mut looped.events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                return true;
            }
            eprintln!("megalon-server: a worker's poll: {e}; stopping");
            self.host.shutdown.trigger();
            return false;
        }
        let Loop {
            events,
            ready,
            again,
            ..
        } = looped;
        ready.append(again);
        let mut woken = false;
        for event in events.iter() {
            if event.token() == WAKER {
                woken = true;
            } else {
                ready.push(event.token().0);
            }
        }
        if woken {
            self.take_new(looped);
            self.take_returned(looped);
        }
        // The lowest slot first (popped from the end), each once.
        looped.ready.sort_unstable_by(|a, b| b.cmp(a));
        looped.ready.dedup();
        true
    }

    /// Registers the connections the acceptor sent; each gets a first turn (bytes may
    /// have arrived before the registration).
    fn take_new(&self, looped: &mut Loop) {
        while let Ok(mut stream) = looped.incoming.try_recv() {
            let slot = looped.free.pop().unwrap_or(looped.connections.len());
            if let Err(e) = looped.poll.registry().register(
                &mut stream,
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                eprintln!("megalon-server: registering a connection: {e}");
                if slot < looped.connections.len() {
                    looped.free.push(slot);
                }
                self.host.client_left();
                continue;
            }
            let connection = Box::new(Connection {
                stream,
                reader: Reader::new(self.host.limits.resp),
                out: Vec::new(),
                written: 0,
                session: Session::new(self.host.client_id()),
                running: None,
            });
            if slot == looped.connections.len() {
                looped.connections.push(Slot::Here(connection));
            } else {
                looped.connections[slot] = Slot::Here(connection);
            }
            looped.ready.push(slot);
        }
    }

    /// Puts back the connections whose turns were relieved. Each gets a turn, unless it
    /// closed: the loop dropped the events it had while away.
    fn take_returned(&self, looped: &mut Loop) {
        let returned = std::mem::take(&mut *self.returned.lock().expect("returned"));
        for (slot, connection, turn) in returned {
            debug_assert!(matches!(looped.connections[slot], Slot::Away));
            looped.connections[slot] = Slot::Here(connection);
            match turn {
                Turn::Closed => looped.close(slot, &self.host),
                Turn::Wait | Turn::Again => looped.ready.push(slot),
            }
        }
    }

    /// Relieves the leader's turn if it is the one `seen` at the last look (it has held
    /// the loop for a tick at least): hands the loop to an idle thread, started if none
    /// is and fewer than [`RELIEF_THREADS`] have been.
    fn relieve(self: &Arc<Self>, seen: &mut u64) {
        let stamp = self.stamp.load(Ordering::Acquire);
        let held_up = stamp % 2 == 1 && stamp == *seen;
        *seen = stamp;
        if !held_up {
            return;
        }
        let mut pool = self.pool.lock().expect("pool");
        if pool.idle == pool.leads + usize::from(pool.first_leads) {
            // Checked under the pool's lock: the worker's first thread joins what was
            // started once it sees the process stopping, taking the handles under it.
            if pool.started >= RELIEF_THREADS || self.host.shutdown.requested() {
                return;
            }
            let Ok(executor) = Executor::new(Arc::clone(&self.host), Arc::clone(&self.commands))
            else {
                return;
            };
            let shared = Arc::clone(self);
            let spawned = thread::Builder::new()
                .name(format!(
                    "megalon-server-h{}-w{}-r{}",
                    self.host.host_id, self.index, pool.named
                ))
                .spawn(move || {
                    let pool = shared.pool.lock().expect("pool");
                    if shared.wait_to_lead(pool, true) {
                        shared.serve(executor, true);
                    }
                });
            match spawned {
                Ok(handle) => {
                    pool.started += 1;
                    pool.named += 1;
                    pool.idle += 1;
                    pool.handles.retain(|h| !h.is_finished());
                    pool.handles.push(handle);
                    self.host.relief_thread_started();
                }
                Err(e) => {
                    eprintln!(
                        "megalon-server: host {}: starting a thread for worker {}: {e}",
                        self.host.host_id, self.index
                    );
                    return;
                }
            }
        }
        let relieved =
            self.stamp
                .compare_exchange(stamp, stamp + 1, Ordering::AcqRel, Ordering::Acquire);
        if relieved.is_ok() {
            pool.leads += 1;
            self.handed.notify_one();
        }
    }

    /// Joins the threads the worker started (once the process stops).
    fn join_started(&self) {
        loop {
            let handles = std::mem::take(&mut self.pool.lock().expect("pool").handles);
            if handles.is_empty() {
                return;
            }
            for handle in handles {
                let _ = handle.join();
            }
        }
    }
}

/// One worker: its first thread runs [`Worker::run`].
pub struct Worker {
    shared: Arc<Shared>,
}

/// A worker as the relief watch sees it.
pub struct Relief(Arc<Shared>);

impl Worker {
    /// Worker `index` of `host`, and how to hand it a connection and wake it.
    #[allow(clippy::type_complexity)]
    pub fn new(
        host: Arc<HostServer>,
        index: usize,
    ) -> io::Result<(Worker, (mpsc::Sender<Stream>, Arc<Waker>))> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (sender, incoming) = mpsc::channel();
        let commands = host.command_counter();
        let looped = Loop {
            poll,
            events: Events::with_capacity(256),
            incoming,
            connections: Vec::new(),
            free: Vec::new(),
            ready: Vec::new(),
            again: Vec::new(),
        };
        let shared = Arc::new(Shared {
            host,
            index,
            commands,
            looped: Mutex::new(looped),
            waker: Arc::clone(&waker),
            stamp: AtomicU64::new(0),
            returned: Mutex::new(Vec::new()),
            pool: Mutex::new(Pool::default()),
            handed: Condvar::new(),
        });
        Ok((Worker { shared }, (sender, waker)))
    }

    /// What the relief watch needs of this worker.
    pub fn relief(&self) -> Relief {
        Relief(Arc::clone(&self.shared))
    }

    /// Serves until the process shuts down, then waits for the threads the worker
    /// started (each finishes the turn it runs, writing its replies) and closes every
    /// connection.
    pub fn run(self) {
        let shared = &self.shared;
        match Executor::new(Arc::clone(&shared.host), Arc::clone(&shared.commands)) {
            Ok(executor) => shared.serve(executor, false),
            Err(e) => {
                eprintln!(
                    "megalon-server: host {}: a worker's handle: {e}",
                    shared.host.host_id
                );
                shared.host.shutdown.trigger();
            }
        }
        shared.join_started();
        let mut looped = shared.looped.lock().expect("loop");
        shared.take_returned(&mut looped);
        for slot in 0..looped.connections.len() {
            if matches!(looped.connections[slot], Slot::Here(_)) {
                looped.close(slot, &shared.host);
            }
        }
    }
}

/// The thread that looks at every worker of the process each [`RELIEF_TICK`] and
/// relieves a turn that holds one's loop (see the module's docs).
pub struct ReliefWatch {
    workers: Vec<Relief>,
    shutdown: Arc<Shutdown>,
}

impl ReliefWatch {
    /// The watch over `workers`, stopped by `shutdown`.
    pub fn new(workers: Vec<Relief>, shutdown: Arc<Shutdown>) -> Self {
        Self { workers, shutdown }
    }

    /// Looks until the process stops.
    pub fn run(self) {
        // Even: no turn seen yet.
        let mut seen = vec![0u64; self.workers.len()];
        while !self.shutdown.requested() {
            thread::sleep(RELIEF_TICK);
            for (worker, seen) in self.workers.iter().zip(&mut seen) {
                worker.0.relieve(seen);
            }
        }
    }
}
