//! One host as the workers see it: its store, the limits it serves with, its counts of
//! connections and commands, INFO's text, and the process's shutdown it listens to.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use megalon_core::Host;
use megalon_kv::{Megalon, Store};
use mio::Waker;

use crate::resp;

/// The version redis-cli and redis-benchmark are told (they check features by it).
pub const REDIS_VERSION: &str = "7.0.0";

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
    pub(crate) fn of(store: &Store<Megalon>) -> Self {
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

/// Stops the process's threads: set once, by `SHUTDOWN`, a signal, or a host of the
/// process found declared dead.
#[derive(Default)]
pub struct Shutdown {
    requested: AtomicBool,
    wakers: Mutex<Vec<Arc<Waker>>>,
    /// The host, and its life, whose death stopped the process (the first one found).
    declared_dead: Mutex<Option<(u32, u64)>>,
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

    /// Host `host` (life `life`) of the process was declared dead by the pod's other
    /// hosts: every operation of it fails from now on, and the process stops as a
    /// shutdown does, to exit with a status that says so (a supervisor restarts it as
    /// the id's next life).
    pub fn host_declared_dead(&self, host: u32, life: u64) {
        self.declared_dead
            .lock()
            .expect("declared dead")
            .get_or_insert((host, life));
        self.trigger();
    }

    /// The host (and its life) found declared dead, if that stopped the process.
    pub fn declared_dead(&self) -> Option<(u32, u64)> {
        *self.declared_dead.lock().expect("declared dead")
    }

    pub(crate) fn watch(&self, waker: Arc<Waker>) {
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
    command_panics: AtomicU64,
    relief_threads: AtomicUsize,
    next_client_id: AtomicU64,
    /// Each worker's count of commands run.
    commands: Mutex<Vec<Arc<AtomicU64>>>,
    started: Instant,
}

impl HostServer {
    /// The host of `store`, serving `workers` workers and at most `max_clients`
    /// connections on `socket` (and `tcp`), stopped by `shutdown`.
    pub(crate) fn new(
        store: Store<Megalon>,
        socket: PathBuf,
        tcp: Option<SocketAddr>,
        workers: usize,
        max_clients: usize,
        shutdown: Arc<Shutdown>,
    ) -> Self {
        Self {
            host_id: store.scheme().hosts()[0].id(),
            limits: Limits::of(&store),
            store,
            max_clients,
            shutdown,
            socket,
            tcp,
            workers,
            clients: AtomicUsize::new(0),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            command_panics: AtomicU64::new(0),
            relief_threads: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(0),
            commands: Mutex::new(Vec::new()),
            started: Instant::now(),
        }
    }

    /// The host underneath.
    pub fn host(&self) -> &Arc<Host> {
        &self.store.scheme().hosts()[0]
    }

    /// Keys in the pod: this host's replica once it has applied every log entry whose
    /// append had completed when the call began ([`Host::object_count`]). It only
    /// counts: a replay would also serve other hosts' requests for slots (appends, which
    /// in a full log wait out the host's wait limit and fail) and a switch of the record
    /// width under way, and DBSIZE answered their error, INFO no `db0`. (The server's
    /// hosts run a pump, which does that work.)
    pub fn keys(&self) -> Result<u64, megalon_kv::Error> {
        Ok(self.host().object_count()?)
    }

    /// Connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// A connection closed.
    pub fn client_left(&self) {
        self.clients.fetch_sub(1, Ordering::Relaxed);
    }

    /// A command panicked (its connection was closed).
    pub(crate) fn command_panicked(&self) {
        self.command_panics.fetch_add(1, Ordering::Relaxed);
    }

    /// Commands that panicked since the start, each closing its connection (INFO's
    /// `megalon_command_panics`: 0 unless the server or the store has a defect).
    pub fn command_panics(&self) -> u64 {
        self.command_panics.load(Ordering::Relaxed)
    }

    /// A worker started a thread to serve its connections while a turn waits.
    pub(crate) fn relief_thread_started(&self) {
        self.relief_threads.fetch_add(1, Ordering::Relaxed);
    }

    /// A thread started for relief ended, idle.
    pub(crate) fn relief_thread_ended(&self) {
        self.relief_threads.fetch_sub(1, Ordering::Relaxed);
    }

    /// Threads the workers run now beyond their first, started while turns waited in the
    /// store (INFO's `megalon_relief_threads`).
    pub fn relief_threads(&self) -> usize {
        self.relief_threads.load(Ordering::Relaxed)
    }

    /// A new client's id.
    pub fn client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Takes a place for a new connection, or `false` if the host has `max_clients`.
    pub(crate) fn admit(&self) -> bool {
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
                line("redis_version", &REDIS_VERSION),
                line("megalon_server_version", &env!("CARGO_PKG_VERSION")),
                line("redis_mode", &"standalone"),
                line("process_id", &std::process::id()),
                line("tcp_port", &self.tcp.map_or(0, |a| a.port())),
                line("unix_socket", &self.socket.display()),
                line("uptime_in_seconds", &self.started.elapsed().as_secs()),
                line("worker_threads", &self.workers),
                line("megalon_relief_threads", &self.relief_threads()),
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
                line("megalon_command_panics", &self.command_panics()),
            ],
        );
        let (log_head, _, log_tail) = self.host().inspect().log_cursors();
        section(
            "Pod",
            &[
                line("host", &self.host_id),
                line("hosts_joined", &self.store.scheme().pod().hosts().len()),
                line("log_capacity_entries", &config.log_capacity_entries),
                line("log_head", &log_head),
                line("log_tail", &log_tail),
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
