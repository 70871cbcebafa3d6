//! The server of one process: the hosts it runs (each with its store, its sockets and
//! its workers), the thread that accepts connections and hands them to workers within
//! each host's limit, and the shutdown that stops them all and lets the hosts leave the
//! pod.
//!
//! Threads: one acceptor for every listener of the process, and a fixed pool of workers
//! per host, each serving many connections from one readiness loop with one handle on
//! the store. Connections are spread over a host's workers round robin. A fixed pool,
//! not a thread per connection: the store's per-thread state (its event counters) lives
//! as long as the host, so threads that come and go with connections would pile it up;
//! and 50 clients on 2 cores run no faster on 50 threads.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use megalon_core::Host;
use megalon_kv::{Megalon, Store};
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::resp;
use crate::worker::{Stream, Worker};

/// The refusal a connection over a host's limit gets before it is closed (Redis's text).
const REFUSAL: &[u8] = b"-ERR max number of clients reached\r\n";

/// Longest request at least (a request may always hold a few of the longest values).
const MIN_MAX_REQUEST_BYTES: usize = 16 << 20;

/// The limits one host serves with.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest key.
    pub max_key_bytes: usize,
    /// Longest value.
    pub max_value_bytes: usize,
    /// What the RESP reader accepts.
    pub resp: resp::Limits,
}

impl Limits {
    fn of(store: &Store<Megalon>) -> Self {
        let (max_key_bytes, max_value_bytes) = (store.max_key_bytes(), store.max_value_bytes());
        let max_bulk_bytes = max_key_bytes.max(max_value_bytes);
        Self {
            max_key_bytes,
            max_value_bytes,
            resp: resp::Limits {
                max_bulk_bytes,
                max_request_bytes: MIN_MAX_REQUEST_BYTES.max(4 * max_bulk_bytes + 4096),
            },
        }
    }
}

/// Stops the process's threads: set once, by `SHUTDOWN` or a signal.
#[derive(Default)]
pub struct Shutdown {
    requested: AtomicBool,
    wakers: Mutex<Vec<Arc<Waker>>>,
}

impl Shutdown {
    /// Whether a shutdown was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// Asks every thread to stop, and wakes them.
    pub fn trigger(&self) {
        // Release: pairs with the Acquire of `requested` in the woken loops.
        self.requested.store(true, Ordering::Release);
        for waker in self.wakers.lock().expect("wakers").iter() {
            let _ = waker.wake();
        }
    }

    fn watch(&self, waker: Arc<Waker>) {
        self.wakers.lock().expect("wakers").push(waker);
        // A trigger that came before this registration did not wake it.
        if self.requested() {
            let _ = self.wakers.lock().expect("wakers").last().map(|w| w.wake());
        }
    }
}

/// One host as the workers see it: its store, its limits, its counts.
pub struct HostServer {
    /// The store over this one host.
    pub store: Store<Megalon>,
    /// The pod's id of this host.
    pub host_id: u32,
    /// The limits.
    pub limits: Limits,
    /// Most connections at once.
    pub max_clients: usize,
    /// The process's shutdown.
    pub shutdown: Arc<Shutdown>,
    /// Where it listens.
    pub socket: PathBuf,
    /// Its TCP address, if any.
    pub tcp: Option<SocketAddr>,
    /// Workers serving it.
    pub workers: usize,
    clients: AtomicUsize,
    connections_received: AtomicU64,
    rejected_connections: AtomicU64,
    next_client_id: AtomicU64,
    /// Each worker's count of commands run.
    commands: Mutex<Vec<Arc<AtomicU64>>>,
    started: Instant,
}

impl HostServer {
    /// The host underneath.
    pub fn host(&self) -> &Arc<Host> {
        &self.store.scheme().hosts()[0]
    }

    /// Keys in the pod: this host's replica once it has applied every log entry
    /// published so far.
    pub fn keys(&self) -> Result<u64, megalon_kv::Error> {
        self.host().replay()?;
        Ok(self.host().inspect().replica_len())
    }

    /// Connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// A connection closed.
    pub fn client_left(&self) {
        self.clients.fetch_sub(1, Ordering::Relaxed);
    }

    /// A new client's id.
    pub fn client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Takes a place for a new connection, or `false` if the host has `max_clients`.
    fn admit(&self) -> bool {
        self.connections_received.fetch_add(1, Ordering::Relaxed);
        let admitted = self
            .clients
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_clients).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            self.rejected_connections.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// A new worker's count of commands.
    pub fn command_counter(&self) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        self.commands
            .lock()
            .expect("counters")
            .push(Arc::clone(&counter));
        counter
    }

    /// INFO's text: the sections named in `wanted` (every one if empty, or `all`,
    /// `everything`, `default`), as `# Section` headers and `name:value` lines.
    pub fn info(&self, wanted: &[&[u8]]) -> String {
        let every = wanted.is_empty()
            || wanted.iter().any(|w| {
                [&b"all"[..], b"everything", b"default"]
                    .iter()
                    .any(|a| w.eq_ignore_ascii_case(a))
            });
        let wants = |section: &str| {
            every
                || wanted
                    .iter()
                    .any(|w| w.eq_ignore_ascii_case(section.as_bytes()))
        };
        let mut text = String::new();
        let mut section = |name: &str, lines: &[(String, String)]| {
            if wants(name) {
                if !text.is_empty() {
                    text.push_str("\r\n");
                }
                let _ = write!(text, "# {name}\r\n");
                for (key, value) in lines {
                    let _ = write!(text, "{key}:{value}\r\n");
                }
            }
        };
        let line = |k: &str, v: &dyn std::fmt::Display| (k.to_string(), v.to_string());
        let config = self.store.scheme().pod().config();
        section(
            "Server",
            &[
                line("redis_version", &crate::command::REDIS_VERSION),
                line("megalon_server_version", &env!("CARGO_PKG_VERSION")),
                line("redis_mode", &"standalone"),
                line("process_id", &std::process::id()),
                line("tcp_port", &self.tcp.map_or(0, |a| a.port())),
                line("unix_socket", &self.socket.display()),
                line("uptime_in_seconds", &self.started.elapsed().as_secs()),
                line("worker_threads", &self.workers),
            ],
        );
        section(
            "Clients",
            &[
                line("connected_clients", &self.clients()),
                line("maxclients", &self.max_clients),
            ],
        );
        let commands: u64 = (self.commands.lock().expect("counters").iter())
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        section(
            "Stats",
            &[
                line(
                    "total_connections_received",
                    &self.connections_received.load(Ordering::Relaxed),
                ),
                line("total_commands_processed", &commands),
                line(
                    "rejected_connections",
                    &self.rejected_connections.load(Ordering::Relaxed),
                ),
            ],
        );
        section(
            "Pod",
            &[
                line("host", &self.host_id),
                line("hosts_joined", &self.store.scheme().pod().hosts().len()),
                line("max_hosts", &config.max_hosts),
                line("scr_bytes", &config.scr_bytes),
                line("lnr_bytes", &config.lnr_bytes),
                line("slot_size_bytes", &config.slot_size_bytes),
                line("max_key_bytes", &self.limits.max_key_bytes),
                line("max_value_bytes", &self.limits.max_value_bytes),
                line("coherence", &config.coherence.name()),
            ],
        );
        if wants("Megalon") || wants("SCR") {
            let report = self.store.report();
            let name = |n: &str| n.replace([' ', '-'], "_").to_lowercase();
            let counters: Vec<_> = (report.counters.iter().chain(&report.gauges))
                .map(|(n, v)| (name(n), v.to_string()))
                .collect();
            section("Megalon", &counters);
            let scr: Vec<_> = (report.scr.iter())
                .map(|(n, v)| (format!("scr_{}_bytes", name(n)), v.to_string()))
                .collect();
            section("SCR", &scr);
        }
        let keys = self.keys().unwrap_or(0);
        section(
            "Keyspace",
            &if keys > 0 {
                vec![line("db0", &format!("keys={keys},expires=0,avg_ttl=0"))]
            } else {
                Vec::new()
            },
        );
        text
    }
}

/// What one host of the process serves on.
pub struct Listen {
    /// The Unix socket's path (replaced if a dead server left it; an error if a live
    /// one answers there).
    pub socket: PathBuf,
    /// The loopback TCP port, if any.
    pub tcp_port: Option<u16>,
}

/// How the process serves.
#[derive(Clone, Copy, Debug)]
pub struct Serving {
    /// Workers per host.
    pub workers: usize,
    /// Connections per host at most.
    pub max_clients: usize,
}

/// A running server: its threads, and the hosts they serve.
pub struct Server {
    hosts: Vec<Arc<HostServer>>,
    shutdown: Arc<Shutdown>,
    threads: Vec<JoinHandle<()>>,
}

/// A listener and the host it belongs to.
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Binds `path`, replacing a socket file no server answers on.
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: a server answers there already", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path)
}

impl Server {
    /// Serves `stores` (one host each) on `listen` (one each), with `serving`'s workers
    /// and limits. Returns once every socket is bound and every thread started.
    pub fn start(
        stores: Vec<Store<Megalon>>,
        listen: Vec<Listen>,
        serving: Serving,
    ) -> io::Result<Server> {
        assert_eq!(stores.len(), listen.len(), "one listen per host");
        let shutdown = Arc::new(Shutdown::default());
        let poll = Poll::new()?;
        let mut listeners = Vec::new();
        let mut hosts = Vec::new();
        for (store, listen) in stores.into_iter().zip(listen) {
            let mut unix = bind_unix(&listen.socket).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {e}", listen.socket.display()))
            })?;
            poll.registry()
                .register(&mut unix, Token(listeners.len()), Interest::READABLE)?;
            listeners.push((hosts.len(), Listener::Unix(unix)));
            let mut tcp_addr = None;
            if let Some(port) = listen.tcp_port {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let mut tcp = TcpListener::bind(addr)
                    .map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))?;
                tcp_addr = Some(tcp.local_addr()?);
                poll.registry()
                    .register(&mut tcp, Token(listeners.len()), Interest::READABLE)?;
                listeners.push((hosts.len(), Listener::Tcp(tcp)));
            }
            let host_id = store.scheme().hosts()[0].id();
            let limits = Limits::of(&store);
            hosts.push(Arc::new(HostServer {
                store,
                host_id,
                limits,
                max_clients: serving.max_clients,
                shutdown: Arc::clone(&shutdown),
                socket: listen.socket,
                tcp: tcp_addr,
                workers: serving.workers,
                clients: AtomicUsize::new(0),
                connections_received: AtomicU64::new(0),
                rejected_connections: AtomicU64::new(0),
                next_client_id: AtomicU64::new(0),
                commands: Mutex::new(Vec::new()),
                started: Instant::now(),
            }));
        }
        let mut threads = Vec::new();
        let mut workers = Vec::new();
        for host in &hosts {
            let mut senders = Vec::new();
            for w in 0..serving.workers {
                let (worker, sender) = Worker::new(Arc::clone(host))?;
                shutdown.watch(Arc::clone(&sender.1));
                senders.push(sender);
                threads.push(
                    thread::Builder::new()
                        .name(format!("megalon-server-h{}-w{w}", host.host_id))
                        .spawn(move || worker.run())?,
                );
            }
            workers.push(senders);
        }
        let waker = Arc::new(Waker::new(poll.registry(), Token(usize::MAX))?);
        shutdown.watch(waker);
        let acceptor = Acceptor {
            poll,
            listeners,
            hosts: hosts.clone(),
            workers,
            next: vec![0; hosts.len()],
            shutdown: Arc::clone(&shutdown),
        };
        threads.push(
            thread::Builder::new()
                .name("megalon-server-accept".into())
                .spawn(move || acceptor.run())?,
        );
        Ok(Server {
            hosts,
            shutdown,
            threads,
        })
    }

    /// The hosts served, in the order given.
    pub fn hosts(&self) -> &[Arc<HostServer>] {
        &self.hosts
    }

    /// The process's shutdown (to trigger it from a signal).
    pub fn shutdown(&self) -> &Arc<Shutdown> {
        &self.shutdown
    }

    /// Waits until a shutdown is triggered and every thread has stopped; then removes
    /// the sockets. The hosts leave the pod when the returned stores are dropped.
    pub fn wait(self) -> Vec<Store<Megalon>> {
        for thread in self.threads {
            let _ = thread.join();
        }
        self.hosts
            .into_iter()
            .map(|host| {
                let _ = std::fs::remove_file(&host.socket);
                match Arc::try_unwrap(host) {
                    Ok(host) => host.store,
                    Err(_) => unreachable!("every thread holding a host has stopped"),
                }
            })
            .collect()
    }
}

/// The thread that accepts every listener's connections.
struct Acceptor {
    poll: Poll,
    listeners: Vec<(usize, Listener)>,
    hosts: Vec<Arc<HostServer>>,
    /// Each host's workers: where to send a connection, and how to wake the worker.
    workers: Vec<Vec<(mpsc::Sender<Stream>, Arc<Waker>)>>,
    /// Each host's next worker (round robin).
    next: Vec<usize>,
    shutdown: Arc<Shutdown>,
}

impl Acceptor {
    fn run(mut self) {
        let mut events = Events::with_capacity(64);
        while !self.shutdown.requested() {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("megalon-server: polling the listeners: {e}; stopping");
                self.shutdown.trigger();
                return;
            }
            for event in &events {
                if let Some(i) = (event.token().0 < self.listeners.len()).then_some(event.token().0)
                {
                    self.accept_all(i);
                }
            }
        }
    }

    /// Accepts every connection waiting on listener `i`.
    fn accept_all(&mut self, i: usize) {
        loop {
            let (host, listener) = &self.listeners[i];
            let accepted = match listener {
                Listener::Unix(l) => l.accept().map(|(s, _)| Box::new(s) as Stream),
                Listener::Tcp(l) => l.accept().map(|(s, _)| {
                    let _ = s.set_nodelay(true);
                    Box::new(s) as Stream
                }),
            };
            let mut stream = match accepted {
                Ok(stream) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, a connection reset before it was taken: the
                    // listener stays; the next readiness tries again.
                    eprintln!("megalon-server: accepting a connection: {e}");
                    return;
                }
            };
            let host = *host;
            if !self.hosts[host].admit() {
                // The socket's buffer is empty: the short refusal goes in whole.
                let _ = stream.write(REFUSAL);
                continue;
            }
            let workers = &self.workers[host];
            let (sender, waker) = &workers[self.next[host] % workers.len()];
            self.next[host] = self.next[host].wrapping_add(1);
            if sender.send(stream).is_ok() {
                let _ = waker.wake();
            } else {
                // The worker has stopped (a shutdown is under way).
                self.hosts[host].client_left();
            }
        }
    }
}
