//! The server of one process: the hosts it runs (each with its store, its sockets and
//! its workers), the thread that accepts connections and hands them to workers within
//! each host's limit, and the shutdown that stops them all and lets the hosts leave the
//! pod.
//!
//! Threads: one acceptor for every listener of the process, and a fixed pool of workers
//! per host, each serving many connections from one readiness loop. Connections are
//! spread over a host's workers round robin. A fixed pool, not a thread per connection:
//! the store's per-thread state (its event counters) lives as long as the host, so
//! threads that come and go with connections would pile it up; and 50 clients on 2 cores
//! run no faster on 50 threads. A worker whose connection's command waits in the store
//! (on a stopped host, for log room) hands its loop to another thread of its own, started
//! when first needed and kept, a few at most (`worker`'s docs); the relief watch, one
//! thread for the process, finds such a command.

use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};

use megalon_kv::{Megalon, Store};
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::host::{HostServer, Shutdown};
use crate::worker::{ReliefWatch, Stream, Worker};

/// The refusal a connection over a host's limit gets before it is closed (Redis's text).
const REFUSAL: &[u8] = b"-ERR max number of clients reached\r\n";

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

/// Binds `path`, replacing a socket file no server answers on. Anything else at `path`
/// (a file, a directory) is left alone and refused: it was deleted, and a mistyped
/// `--socket` cost the file it named.
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if let Ok(metadata) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !metadata.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: not a socket; it is left as it is", path.display()),
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: a server answers there already", path.display()),
            ));
        }
        // Gone already: its server removed it as it stopped.
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
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
        // The socket files bound so far: a start that fails after binding some removes
        // them (the process exits with the error; nothing else would), and stops the
        // workers it started.
        let mut bound = BoundSockets(Vec::new());
        let started = Self::start_binding(stores, listen, serving, &shutdown, &mut bound);
        match started {
            Ok(server) => {
                bound.0.clear();
                Ok(server)
            }
            Err(e) => {
                shutdown.trigger();
                Err(e)
            }
        }
    }

    fn start_binding(
        stores: Vec<Store<Megalon>>,
        listen: Vec<Listen>,
        serving: Serving,
        shutdown: &Arc<Shutdown>,
        bound: &mut BoundSockets,
    ) -> io::Result<Server> {
        let shutdown = Arc::clone(shutdown);
        let poll = Poll::new()?;
        let mut listeners = Vec::new();
        let mut hosts = Vec::new();
        for (store, listen) in stores.into_iter().zip(listen) {
            let mut unix = bind_unix(&listen.socket).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {e}", listen.socket.display()))
            })?;
            bound.0.push(listen.socket.clone());
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
            hosts.push(Arc::new(HostServer::new(
                store,
                listen.socket,
                tcp_addr,
                serving.workers,
                serving.max_clients,
                Arc::clone(&shutdown),
            )));
        }
        let mut threads = Vec::new();
        let mut workers = Vec::new();
        let mut reliefs = Vec::new();
        for host in &hosts {
            let mut senders = Vec::new();
            for w in 0..serving.workers {
                let (worker, sender) = Worker::new(Arc::clone(host), w)?;
                shutdown.watch(Arc::clone(&sender.1));
                reliefs.push(worker.relief());
                senders.push(sender);
                threads.push(
                    thread::Builder::new()
                        .name(format!("megalon-server-h{}-w{w}", host.host_id))
                        .spawn(move || worker.run())
                        .map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!(
                                    "starting worker {w} of {} of host {} (--workers): {e}",
                                    serving.workers, host.host_id
                                ),
                            )
                        })?,
                );
            }
            workers.push(senders);
        }
        let relief = ReliefWatch::new(reliefs, Arc::clone(&shutdown));
        threads.push(
            thread::Builder::new()
                .name("megalon-server-relief".into())
                .spawn(move || relief.run())?,
        );
        let watch = DeathWatch::new(hosts.clone(), Arc::clone(&shutdown))?;
        threads.push(
            thread::Builder::new()
                .name("megalon-server-death-watch".into())
                .spawn(move || watch.run())?,
        );
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

    /// Waits until a shutdown is triggered and every thread has stopped (the acceptor
    /// removes the sockets as it stops). The hosts leave the pod when the returned stores
    /// are dropped.
    pub fn wait(self) -> Vec<Store<Megalon>> {
        for thread in self.threads {
            let _ = thread.join();
        }
        self.hosts
            .into_iter()
            .map(|host| match Arc::try_unwrap(host) {
                Ok(host) => host.store,
                Err(_) => unreachable!("every thread holding a host has stopped"),
            })
            .collect()
    }
}

/// Socket files a start bound; removed when dropped unless emptied (the start succeeded
/// and the acceptor owns them).
struct BoundSockets(Vec<PathBuf>);

impl Drop for BoundSockets {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// How often the death watch asks whether a host was declared dead.
const DEATH_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The thread that stops the process once one of its hosts was declared dead by the
/// pod's other hosts (paused past its lease where they can tell its death only by the
/// lease, or its pump panicked): such a host answers `HostDeclaredDead` to every
/// operation from then on, and a server that went on serving would answer nothing else,
/// with no supervisor restarting it. A command that gets the error stops the process
/// too (`command::store_error`); this finds it with no command running.
struct DeathWatch {
    poll: Poll,
    hosts: Vec<Arc<HostServer>>,
    shutdown: Arc<Shutdown>,
}

impl DeathWatch {
    fn new(hosts: Vec<Arc<HostServer>>, shutdown: Arc<Shutdown>) -> io::Result<Self> {
        let poll = Poll::new()?;
        // Woken by a shutdown: the process does not wait for its next look.
        shutdown.watch(Arc::new(Waker::new(poll.registry(), Token(0))?));
        Ok(Self {
            poll,
            hosts,
            shutdown,
        })
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(4);
        while !self.shutdown.requested() {
            for host in &self.hosts {
                let inspect = host.host().inspect();
                if inspect.declared_dead() {
                    self.shutdown
                        .host_declared_dead(host.host_id, inspect.life());
                    return;
                }
            }
            if self
                .poll
                .poll(&mut events, Some(DEATH_WATCH_INTERVAL))
                .is_err()
            {
                // Interrupted, or a poll that cannot wait: the look goes on, as often.
                thread::sleep(DEATH_WATCH_INTERVAL);
            }
        }
    }
}

/// How long the acceptor waits before it tries a listener again whose accept failed.
const ACCEPT_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

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
        self.serve();
        // The socket files go while the listeners still answer: a server started at the
        // same path meanwhile finds this one alive (and refuses the path) or finds no
        // file. Removed after the workers stopped (seconds, when one is in a store call),
        // the file could be one a new server had bound after these listeners closed.
        for (host, listener) in &self.listeners {
            if let Listener::Unix(_) = listener {
                let _ = std::fs::remove_file(&self.hosts[*host].socket);
            }
        }
    }

    fn serve(&mut self) {
        let mut events = Events::with_capacity(64);
        // Listeners whose last accept failed (out of descriptors, say) with connections
        // perhaps still waiting: readiness is edge-triggered, and those connections
        // raise no new event, so they are tried again after a short wait.
        let mut retry: Vec<usize> = Vec::new();
        while !self.shutdown.requested() {
            let timeout = (!retry.is_empty()).then_some(ACCEPT_RETRY);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("megalon-server: polling the listeners: {e}; stopping");
                self.shutdown.trigger();
                return;
            }
            let retried = std::mem::take(&mut retry);
            let mut ready = retried.clone();
            ready.extend(
                events
                    .iter()
                    .map(|event| event.token().0)
                    .filter(|&i| i < self.listeners.len()),
            );
            ready.sort_unstable();
            ready.dedup();
            for i in ready {
                if let Err(e) = self.accept_all(i) {
                    if !retried.contains(&i) {
                        eprintln!("megalon-server: accepting a connection: {e}; trying again");
                    }
                    retry.push(i);
                }
            }
        }
    }

    /// Accepts every connection waiting on listener `i`. `Err`: it stopped on an error
    /// (out of descriptors), with connections perhaps still waiting.
    fn accept_all(&mut self, i: usize) -> io::Result<()> {
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors, a connection reset before it was taken: the
                // listener stays, and is tried again.
                Err(e) => return Err(e),
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

#[cfg(test)]
mod tests {
    use super::bind_unix;

    /// A `--socket` path that names a file (a typo, say) is refused, and the file kept:
    /// it was deleted and a socket bound in its place. A stale socket is still replaced.
    #[test]
    fn a_socket_path_that_holds_a_file_is_refused_and_the_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("precious.txt");
        std::fs::write(&file, b"data").unwrap();
        let refused = bind_unix(&file).expect_err("a file is no socket");
        assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&file).unwrap(), b"data");
        let socket = dir.path().join("stale.sock");
        drop(bind_unix(&socket).unwrap());
        bind_unix(&socket).expect("a socket nobody answers on is replaced");
    }

    /// A start that fails after some sockets are bound (host 1's TCP port is taken, a
    /// worker thread cannot start) removes the socket files it made: the process exits
    /// with its error, and its sockets were left in /tmp.
    #[test]
    fn a_start_that_fails_leaves_no_socket_files() {
        use std::sync::Arc;

        use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};
        use megalon_kv::{Megalon, Store};

        use super::{Listen, Server, Serving};

        let dir = tempfile::tempdir().unwrap();
        let pod = Arc::new(Pod::create(&PodConfig::new(), Backing::heap()).unwrap());
        let stores = (0..2)
            .map(|_| {
                let host = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
                Store::new(Megalon::new(Arc::clone(&pod), vec![Arc::new(host)]))
            })
            .collect();
        // Host 1's port is taken (by a listener of this test).
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let listen = (0..2)
            .map(|h| Listen {
                socket: dir.path().join(format!("h{h}.sock")),
                tcp_port: (h == 1).then_some(taken_port),
            })
            .collect();
        let serving = Serving {
            workers: 1,
            max_clients: 1,
        };
        let failed = Server::start(stores, listen, serving)
            .err()
            .expect("port taken");
        assert!(failed.to_string().contains("in use"), "{failed}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "socket files left: {left:?}");
    }

    /// A process of two hosts, one of which is declared dead (its pump panicked) with no
    /// command running: the death watch stops the whole process, naming that host; the
    /// other host leaves the pod as a shutdown's does (its row freed), and the dead one
    /// is left to the pod's recovery, which a host outside the process completes.
    #[test]
    fn a_host_declared_dead_stops_the_process_and_its_other_host_leaves_cleanly() {
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};
        use megalon_kv::{Megalon, Store};

        use super::{Listen, Server, Serving};

        let dir = tempfile::tempdir().unwrap();
        let config = PodConfig::new().lnr_bytes(4 << 20).lease_ms(100);
        let pod = Arc::new(Pod::create(&config, Backing::heap()).unwrap());
        let survivor = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
        let mut ids = Vec::new();
        let stores = (0..2)
            .map(|_| {
                let host = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
                ids.push((host.id(), host.inspect().life()));
                Store::new(Megalon::new(Arc::clone(&pod), vec![Arc::new(host)]))
            })
            .collect();
        let listen = (0..2)
            .map(|h| Listen {
                socket: dir.path().join(format!("h{h}.sock")),
                tcp_port: None,
            })
            .collect();
        let serving = Serving {
            workers: 2,
            max_clients: 4,
        };
        let server = Server::start(stores, listen, serving).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!server.shutdown().requested(), "a healthy process stopped");
        server.hosts()[0].host().inspect().make_pump_panic();
        let shutdown = Arc::clone(server.shutdown());
        let started = Instant::now();
        let stores = server.wait();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(shutdown.declared_dead(), Some(ids[0]));
        drop(stores);
        let rows = |pod: &Pod| pod.hosts().iter().map(|row| row.host).collect::<Vec<_>>();
        assert!(
            !rows(&pod).contains(&ids[1].0),
            "host 1 left: {:?}",
            rows(&pod)
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while rows(&pod).contains(&ids[0].0) {
            assert!(
                Instant::now() < deadline,
                "the dead host was never recovered"
            );
            survivor.inspect().watch_hosts();
            std::thread::sleep(Duration::from_millis(20));
        }
        survivor.create(b"after", b"x").unwrap();
    }

    /// The environment variable `name` read as a `T` (a stress's length, say), or
    /// `default`.
    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    /// A server of one host on a new heap pod of 4 MiB of LNR, listening on `h0.sock` in
    /// the returned directory (no TCP port), with `workers` workers and `max_clients`.
    fn one_host_server(workers: usize, max_clients: usize) -> (tempfile::TempDir, super::Server) {
        use std::sync::Arc;

        use megalon_core::{Backing, Host, HostOptions, Join, Pod, PodConfig};
        use megalon_kv::{Megalon, Store};

        use super::{Listen, Server, Serving};

        let dir = tempfile::tempdir().unwrap();
        let pod =
            Arc::new(Pod::create(&PodConfig::new().lnr_bytes(4 << 20), Backing::heap()).unwrap());
        let host = Host::join(&pod, Join::AnyFree, HostOptions::new()).unwrap();
        let stores = vec![Store::new(Megalon::new(
            Arc::clone(&pod),
            vec![Arc::new(host)],
        ))];
        let listen = vec![Listen {
            socket: dir.path().join("h0.sock"),
            tcp_port: None,
        }];
        let serving = Serving {
            workers,
            max_clients,
        };
        (dir, Server::start(stores, listen, serving).unwrap())
    }

    /// A command that panics (a defect of the server or of the store) closes its own
    /// connection, after the replies to the commands before it and an error in place of
    /// its own part-written reply; the worker's other connections, new ones and the
    /// shutdown go on as if nothing happened, and the host's count of clients drops.
    /// Before, the panic ended the worker's thread: the client saw its connection cut
    /// with no error, the count stayed one too high, and the other connections waited
    /// for the relief watch to start a thread.
    #[test]
    fn a_command_that_panics_closes_its_connection_only() {
        use std::io::{Read, Write};
        use std::os::unix::net::UnixStream;
        use std::time::{Duration, Instant};

        let (dir, server) = one_host_server(1, 4);
        let socket = dir.path().join("h0.sock");
        let connect = || {
            let c = UnixStream::connect(&socket).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c
        };
        let call = |c: &mut UnixStream, command: &[u8], reply: &[u8]| {
            c.write_all(command).unwrap();
            let mut got = vec![0u8; reply.len()];
            c.read_exact(&mut got).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(reply)
            );
        };
        let ping = b"*1\r\n$4\r\nPING\r\n";
        let mut other = connect();
        call(&mut other, ping, b"+PONG\r\n");
        let mut panicking = connect();
        panicking
            .write_all(&[&ping[..], b"*1\r\n$10\r\nTEST-PANIC\r\n", ping].concat())
            .unwrap();
        let mut got = Vec::new();
        panicking
            .read_to_end(&mut got)
            .expect("the connection closes");
        assert_eq!(
            String::from_utf8_lossy(&got),
            "+PONG\r\n-ERR the server failed running this command; the connection closes\r\n"
        );
        let host = &server.hosts()[0];
        let deadline = Instant::now() + Duration::from_secs(5);
        while host.clients() != 1 {
            assert!(Instant::now() < deadline, "{} clients", host.clients());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(host.command_panics(), 1);
        let answered = Instant::now();
        call(&mut other, ping, b"+PONG\r\n");
        assert!(
            answered.elapsed() < Duration::from_millis(15),
            "the other connection waited {:?}",
            answered.elapsed()
        );
        let mut late = connect();
        call(
            &mut late,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
            b"+OK\r\n",
        );
        call(&mut late, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$1\r\nv\r\n");
        server.shutdown().trigger();
        let stopped = Instant::now();
        let stores = server.wait();
        assert!(stopped.elapsed() < Duration::from_secs(5));
        assert_eq!(stores.len(), 1);
    }

    /// A stress of the relief protocol (a review's; `STRESS_SECONDS`, `STRESS_CLIENTS`,
    /// `STRESS_SEED` to run it longer): clients of one worker send pipelines of ECHOs,
    /// each naming its place, and sleeps (turns the watch relieves), reconnect now and
    /// then, and now and then open a connection whose command panics (after a sleep, in
    /// a relieved turn, half the time). Every reply comes in order within the read
    /// timeout; afterwards the started threads end, the count of clients drops to 0, the
    /// worker serves and the shutdown returns.
    #[test]
    fn turns_that_wait_or_panic_among_many_connections_keep_every_reply_in_order() {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::net::UnixStream;
        use std::time::{Duration, Instant};

        let seconds: u64 = env_or("STRESS_SECONDS", 3);
        let clients: usize = env_or("STRESS_CLIENTS", 12);
        let seed: u64 = env_or(
            "STRESS_SEED",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64,
        );
        eprintln!("seed {seed}");
        let (dir, server) = one_host_server(1, 256);
        let socket = dir.path().join("h0.sock");
        let encode = crate::resp::command;
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let totals: Vec<(u64, u64, Duration)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..clients)
                .map(|i| {
                    let socket = &socket;
                    scope.spawn(move || {
                        let mut rng = (seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
                        let mut next = move || {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            rng
                        };
                        let connect = || {
                            let c = UnixStream::connect(socket).unwrap();
                            c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
                            c
                        };
                        let mut stream = connect();
                        let mut reader = BufReader::new(stream.try_clone().unwrap());
                        let (mut commands, mut panics, mut slowest) = (0u64, 0u64, Duration::ZERO);
                        let mut seq = 0u64;
                        while Instant::now() < deadline {
                            if next() % 40 == 0 {
                                // A connection whose command panics, mid-pipeline.
                                let mut p = connect();
                                let slow = next() % 2 == 0;
                                let ping = if slow {
                                    encode(&[b"TEST-SLEEP", b"25"])
                                } else {
                                    encode(&[b"PING"])
                                };
                                p.write_all(
                                    &[&ping[..], &encode(&[b"TEST-PANIC"]), &ping].concat(),
                                )
                                .unwrap();
                                let mut got = Vec::new();
                                std::io::Read::read_to_end(&mut p, &mut got)
                                    .expect("the panicking connection closes");
                                assert_eq!(
                                    String::from_utf8_lossy(&got).replace("+SLEPT", "+PONG"),
                                    "+PONG\r\n-ERR the server failed running this command; the connection closes\r\n",
                                    "seed {seed}"
                                );
                                panics += 1;
                            }
                            let n = 1 + next() % 5;
                            let mut pipeline = Vec::new();
                            let mut expect = Vec::new();
                            for _ in 0..n {
                                if next() % 6 == 0 {
                                    let ms = [0u64, 3, 12, 25, 40][(next() % 5) as usize];
                                    pipeline.extend(encode(&[
                                        b"TEST-SLEEP",
                                        ms.to_string().as_bytes(),
                                    ]));
                                    expect.push("+SLEPT".to_string());
                                } else {
                                    let word = format!("c{i}-{seq}");
                                    seq += 1;
                                    pipeline.extend(encode(&[b"ECHO", word.as_bytes()]));
                                    expect.push(format!("${}", word.len()));
                                    expect.push(word);
                                }
                            }
                            let started = Instant::now();
                            stream.write_all(&pipeline).unwrap();
                            for want in expect {
                                let mut line = String::new();
                                reader.read_line(&mut line).unwrap_or_else(|e| {
                                    panic!("client {i}: waiting for {want}: {e} (seed {seed})")
                                });
                                assert_eq!(line.trim_end(), want, "client {i} seed {seed}");
                            }
                            slowest = slowest.max(started.elapsed());
                            commands += n;
                            if next() % 200 == 0 {
                                // Reconnect now and then.
                                stream = connect();
                                reader = BufReader::new(stream.try_clone().unwrap());
                            }
                        }
                        (commands, panics, slowest)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let host = &server.hosts()[0];
        eprintln!(
            "(commands, panics, slowest pipeline) by client {:?}; relief threads {}, panics {}",
            totals,
            host.relief_threads(),
            host.command_panics()
        );
        let ended = Instant::now() + Duration::from_secs(8);
        while host.relief_threads() != 0 || host.clients() != 0 {
            assert!(
                Instant::now() < ended,
                "{} relief threads, {} clients left (seed {seed})",
                host.relief_threads(),
                host.clients()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The worker still serves.
        let mut late = UnixStream::connect(&socket).unwrap();
        late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        late.write_all(&encode(&[b"PING"])).unwrap();
        let mut got = [0u8; 7];
        std::io::Read::read_exact(&mut late, &mut got).unwrap();
        assert_eq!(&got, b"+PONG\r\n");
        server.shutdown().trigger();
        let stopped = Instant::now();
        server.wait();
        assert!(stopped.elapsed() < Duration::from_secs(5));
    }

    /// A shutdown while turns are relieved, threads hand the loop back, or started
    /// threads retire (a review's; `STRESS_ROUNDS` for more, each round another moment):
    /// the server stops within a few seconds, and every client gets a prefix of its
    /// replies, in order, then the end of its stream.
    #[test]
    fn a_shutdown_while_threads_relieve_hand_back_or_retire() {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::net::UnixStream;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        let rounds: u64 = env_or("STRESS_ROUNDS", 2);
        let encode = crate::resp::command;
        for round in 0..rounds {
            let (dir, server) = one_host_server(2, 256);
            let socket = dir.path().join("h0.sock");
            // Load for 600 ms; the shutdown during the load (round 0), as the started threads
            // retire (2 s idle, round 1), or just before the load ends.
            let load = Duration::from_millis(600);
            let at = [
                Duration::from_millis(300),
                load + Duration::from_millis(1990),
                Duration::from_millis(590),
                load + Duration::from_millis(2030),
                load + Duration::from_millis(2060),
                load + Duration::from_millis(150),
            ][round as usize % 6];
            let stopping = AtomicBool::new(false);
            let begun = Instant::now();
            std::thread::scope(|scope| {
                for i in 0..10 {
                    let (socket, stopping, encode) = (&socket, &stopping, &encode);
                    scope.spawn(move || {
                        let stream = UnixStream::connect(socket).unwrap();
                        stream
                            .set_read_timeout(Some(Duration::from_secs(8)))
                            .unwrap();
                        let mut writer = stream.try_clone().unwrap();
                        let mut reader = BufReader::new(stream);
                        let mut seq = 0u64;
                        loop {
                            let loading = begun.elapsed() < load;
                            let pipeline = if loading {
                                [
                                    encode(&[b"TEST-SLEEP", if i % 2 == 0 { b"25" } else { b"0" }]),
                                    encode(&[b"ECHO", format!("c{i}-{seq}").as_bytes()]),
                                ]
                                .concat()
                            } else {
                                std::thread::sleep(Duration::from_millis(30));
                                encode(&[b"ECHO", format!("c{i}-{seq}").as_bytes()])
                            };
                            if writer.write_all(&pipeline).is_err() {
                                assert!(stopping.load(Ordering::SeqCst), "client {i}: write");
                                return;
                            }
                            let mut want = Vec::new();
                            if loading {
                                want.push("+SLEPT".to_string());
                            }
                            let word = format!("c{i}-{seq}");
                            want.push(format!("${}", word.len()));
                            want.push(word);
                            seq += 1;
                            for w in want {
                                let mut line = String::new();
                                match reader.read_line(&mut line) {
                                    Ok(0) => {
                                        assert!(stopping.load(Ordering::SeqCst), "client {i}: EOF");
                                        return;
                                    }
                                    Ok(_) => {
                                        assert_eq!(line.trim_end(), w, "client {i} round {round}")
                                    }
                                    Err(e) => {
                                        assert!(
                                            stopping.load(Ordering::SeqCst)
                                                && e.kind() != std::io::ErrorKind::WouldBlock,
                                            "client {i} round {round}: {e}"
                                        );
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
                std::thread::sleep(at.saturating_sub(begun.elapsed()));
                stopping.store(true, Ordering::SeqCst);
                let relief = server.hosts()[0].relief_threads();
                server.shutdown().trigger();
                eprintln!("round {round}: shutdown at {at:?}, {relief} relief threads");
            });
            let stopped = Instant::now();
            server.wait();
            assert!(stopped.elapsed() < Duration::from_secs(5), "round {round}");
        }
    }
}
