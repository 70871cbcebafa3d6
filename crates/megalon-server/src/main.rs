//! `megalon-server`: the megalon KV store behind the Redis protocol (RESP2), so that
//! `redis-cli`, `redis-benchmark` and any Redis client share a pod's objects.
//!
//! One process serves the hosts of a pod it runs, each on its own Unix socket and
//! loopback TCP port, with a pool of worker threads per host. The pod is a file that
//! processes share (`--pod PATH`: created with the size flags if absent, opened if not;
//! one process per host is the usual way, like real hosts), or, without `--pod`, a heap
//! pod in this one process (`--hosts H`: H hosts, one socket each). A value written
//! through any host is read through every other; `INCR` from clients of different hosts
//! adds up exactly (the read, the sum and the write hold the object).
//!
//! ```sh
//! megalon-server --hosts 2 --socket /tmp/megalon-{host}.sock --port 0
//! redis-cli -s /tmp/megalon-0.sock SET k v
//! redis-cli -s /tmp/megalon-1.sock GET k        # "v"
//! ```
//!
//! Trade-offs against Redis: keys do not expire (`SET ... EX` is refused); a value is
//! at most one slot less 4 bytes (`INFO pod` says how long); `MSET` is not atomic across
//! keys (each key is linearizable on its own; an error after some of its pairs says how
//! many it set, as DEL's says how many keys it deleted); only strings, no other data types; no
//! persistence beyond the pod. `SHUTDOWN`, SIGINT, SIGTERM or SIGHUP stop the process and its
//! hosts leave the pod.
//!
//! A host of the process declared dead by the pod's other hosts (the process paused past
//! its lease where they can tell its death only by the lease, or the host's pump
//! panicked) answers every operation with an error from then on: the server stops as a
//! shutdown does (the command in hand gets the error, connections close), says so on
//! stderr, and exits with status 75, for a supervisor to start it again; started again
//! as its `--host`, it rejoins as the id's next life.

#![forbid(unsafe_code)]

mod command;
mod host;
mod resp;
mod server;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use megalon_core::{Backing, Backoff, Host, HostOptions, Join, MemoryKind, Pod, PodConfig};
use megalon_kv::{Megalon, Store};

use server::{Listen, Server, Serving};

/// The seed of simulated memory (each host mixes in its index).
const SIMULATED_SEED: u64 = 0x5e12_7e12;

/// For tests only: set to `1`, the process's hosts say in the host table that they run
/// on another machine (`Inspect::pretend_elsewhere`), so that the pod's other hosts can
/// tell whether they live only by their lease, as across machines or pid namespaces (on
/// one machine a stopped process is never declared dead: it exists). A test stops such a
/// server past its lease to have its hosts declared dead while it lives.
const PRETEND_ELSEWHERE: &str = "MEGALON_SERVER_TEST_PRETEND_ELSEWHERE";

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "megalon-server",
    args_override_self = true,
    about = "The megalon KV store behind the Redis protocol (RESP2): one socket per host of a pod",
    after_help = "Point redis-cli at a host: redis-cli -s /tmp/megalon-0.sock (or -p 6380).\n`SHUTDOWN`, SIGINT, SIGTERM or SIGHUP stop the server; its hosts leave the pod (a second signal: at once, its hosts left to the pod's recovery).\n\nExit status: 0 after a shutdown; 1 on an error (at start, say); 130 after a second signal; 75 when a host of the server was declared dead by the pod's other hosts (its process paused past its lease where they tell its death by the lease alone: another machine, another pid namespace; or its pump panicked): it stops serving, and started again (as the same --host) it rejoins as the id's next life."
)]
struct Args {
    /// A pod file shared with other processes: opened if it exists, else created with
    /// the sizes below. Without it, a heap pod in this process.
    #[arg(long)]
    pod: Option<PathBuf>,
    /// Hosts this process runs (each on its own socket and port).
    #[arg(long, default_value_t = 1)]
    hosts: usize,
    /// Join as this host id (one host only); the first free id otherwise.
    #[arg(long)]
    host: Option<u32>,
    /// Unix socket of each host; `{host}` becomes the host's id in the pod.
    #[arg(long, default_value = "/tmp/megalon-{host}.sock")]
    socket: String,
    /// Loopback TCP port of host 0; host h listens on PORT + h. 0: no TCP.
    #[arg(long, default_value_t = 6380)]
    port: u16,
    /// Worker threads per host.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Connections per host at once; past it, a refusal.
    #[arg(long, default_value_t = 1000)]
    max_clients: usize,
    /// Memory access: hardware, or simulated (a non-coherent cache per host).
    #[arg(long, default_value = "hardware")]
    memory: MemoryKind,
    /// Longest any wait on another host may last, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    wait_limit_ms: u64,
    /// A new pod's SCR (coherent region), in MiB.
    #[arg(long, default_value_t = 4)]
    scr_mib: u64,
    /// A new pod's LNR (where the values live), in MiB.
    #[arg(long, default_value_t = 1024)]
    lnr_mib: u64,
    /// A new pod's slot: a value takes one, less 4 bytes of length (a multiple of 64).
    #[arg(long, default_value_t = 4096)]
    slot_bytes: u64,
    /// A new pod's longest key.
    #[arg(long, default_value_t = 64)]
    max_key_bytes: u32,
    /// A new pod's log, in entries.
    #[arg(long, default_value_t = 16384)]
    log_entries: u64,
    /// A new pod's most hosts.
    #[arg(long, default_value_t = 8)]
    max_hosts: u32,
}

impl Args {
    fn pod_config(&self) -> Result<PodConfig, String> {
        // Checked: a shift drops the high bits, and a size past a u64 of bytes made a pod
        // of what was left.
        let bytes = |flag: &str, mib: u64| {
            mib.checked_mul(1 << 20)
                .ok_or(format!("{flag} {mib}: more bytes than a u64 holds"))
        };
        Ok(PodConfig::new()
            .scr_bytes(bytes("--scr-mib", self.scr_mib)?)
            .lnr_bytes(bytes("--lnr-mib", self.lnr_mib)?)
            .slot_size_bytes(self.slot_bytes)
            .max_key_bytes(self.max_key_bytes)
            .log_capacity_entries(self.log_entries)
            .max_hosts(self.max_hosts))
    }
}

/// The exit status of a server stopped because one of its hosts was declared dead by
/// the pod's other hosts (`EX_TEMPFAIL`: started again, it rejoins).
const DECLARED_DEAD_STATUS: u8 = 75;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("megalon-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The pod: `--pod`'s file, opened or created, or a heap pod.
fn pod(args: &Args) -> Result<(Pod, &'static str), String> {
    let config = args.pod_config()?;
    match &args.pod {
        Some(path) if path.exists() => Pod::open(Backing::file(path))
            .map(|pod| (pod, "opened"))
            .map_err(|e| e.to_string()),
        Some(path) => match Pod::create(&config, Backing::file(path)) {
            Ok(pod) => Ok((pod, "created")),
            // Another process started at the same time created it first: open theirs
            // (what the core's `PodInUse` for a racing create says to do).
            Err(megalon_core::Error::PodInUse { .. }) => Pod::open(Backing::file(path))
                .map(|pod| (pod, "opened"))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        None => Pod::create(&config, Backing::heap())
            .map(|pod| (pod, "created in this process"))
            .map_err(|e| e.to_string()),
    }
}

/// `bytes` in MiB when whole MiB, else in KiB: an opened pod's SCR of 64 KiB said
/// "0 MiB SCR".
fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// `println!` that lets a closed stdout be (the reader of a pipe gone, `| head -1`): no
/// reason to stop serving, where `println!` panicked.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

fn socket_path(pattern: &str, host: u32) -> PathBuf {
    PathBuf::from(pattern.replace("{host}", &host.to_string()))
}

/// Joins as `which` says. A host id still held by a process that was killed is freed by
/// a live host of the pod within a fraction of the lease: a restarted server waits for
/// that, up to `bound`, rather than failing at once. When no live host is left to free
/// it (every process of the pod was killed, or the server ran alone), the server joins
/// the pod meanwhile as another host of its own, whose pump recovers the dead holder,
/// and leaves it once it has the id it asked for.
///
/// `None`: a signal came meanwhile (`stop`); the server stops before it serves.
fn join_pod(
    pod: &Arc<Pod>,
    which: Join,
    options: HostOptions,
    bound: Duration,
    stop: &Stop,
) -> Result<Option<Host>, String> {
    let mut backoff = Backoff::new(bound);
    let mut helper: Option<Host> = None;
    loop {
        if stop.requested() {
            return Ok(None);
        }
        match Host::join(pod, which, options.clone()) {
            // A full table may hold a row of a killed process, freed as a taken id is:
            // a server started in its place without `--host` waits for it too.
            Err(
                megalon_core::Error::HostTaken { .. } | megalon_core::Error::HostTableFull { .. },
            ) if backoff.snooze() => {
                if let (None, Join::As(wanted)) = (&helper, which) {
                    // The id may have been freed since: a helper that took it leaves it
                    // at once (it is free again for the next try).
                    helper = Host::join(pod, Join::AnyFree, options.clone())
                        .ok()
                        .filter(|h| h.id() != wanted);
                }
            }
            Err(e) => return Err(format!("joining the pod: {e}")),
            Ok(host) => return Ok(Some(host)),
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    if args.hosts == 0 || args.workers == 0 || args.max_clients == 0 {
        return Err("--hosts, --workers and --max-clients must be positive".into());
    }
    if args.wait_limit_ms == 0 {
        return Err(
            "--wait-limit-ms 0: at least 1 is needed (every wait on another host would fail at once)"
                .into(),
        );
    }
    if args.socket.is_empty() {
        return Err("--socket '': a Unix socket needs a path".into());
    }
    if args.hosts > 1 && !args.socket.contains("{host}") {
        return Err(format!(
            "--socket {} names one socket for {} hosts: put {{host}} in it",
            args.socket, args.hosts
        ));
    }
    if args.pod.is_none() && args.hosts > args.max_hosts as usize {
        // The heap pod is new: its table holds --max-hosts (the join said only "the host
        // table is full: all 8 hosts are joined").
        return Err(format!(
            "--hosts {} with --max-hosts {}: the new pod holds at most --max-hosts hosts; raise it",
            args.hosts, args.max_hosts
        ));
    }
    if args.host.is_some() && args.hosts > 1 {
        return Err("--host names one host; it does not go with --hosts".into());
    }
    // Caught before the pod is joined: a signal that came while a host joined (a late
    // join copies the pod's index; a restarted server waits for its id to be freed) met
    // its default action, which killed the process mid-join, its hosts left to the pod's
    // recovery. Now the join goes on (it cannot be cut short), the hosts joined leave,
    // and the server stops before it serves; a second signal still ends it at once.
    let stop = Arc::new(Stop::default());
    let signals = watch_signals(catch_signals()?, Arc::clone(&stop))?;
    let (pod, how) = pod(args)?;
    let pod = Arc::new(pod);
    let pretend_elsewhere = std::env::var_os(PRETEND_ELSEWHERE).is_some_and(|v| v == "1");
    let mut stores = Vec::new();
    let mut listen = Vec::new();
    for i in 0..args.hosts {
        let options = HostOptions::new()
            .memory(args.memory.for_host(SIMULATED_SEED, i as u32))
            .wait_limit(Duration::from_millis(args.wait_limit_ms));
        let join = args.host.map_or(Join::AnyFree, Join::As);
        let joined = join_pod(
            &pod,
            join,
            options,
            Duration::from_millis(args.wait_limit_ms),
            &stop,
        )?;
        let Some(host) = joined.filter(|_| !stop.requested()) else {
            // The hosts joined so far leave as they drop.
            drop(stores);
            signals.close();
            say!("megalon-server: stopped by a signal while joining the pod; its hosts left");
            return Ok(ExitCode::SUCCESS);
        };
        if pretend_elsewhere {
            host.inspect().pretend_elsewhere();
        }
        let id = host.id();
        listen.push(Listen {
            socket: socket_path(&args.socket, id),
            tcp_port: (args.port != 0)
                .then(|| args.port.checked_add(id as u16))
                .map(|p| p.ok_or(format!("--port {} + host {id} is past 65535", args.port)))
                .transpose()?,
        });
        stores.push(Store::new(Megalon::new(
            Arc::clone(&pod),
            vec![Arc::new(host)],
        )));
    }
    let config = pod.config().clone();
    // A signal from here on (one sent as soon as a socket answers, say: a supervisor
    // stopping the server it just saw come up) stops the server once it serves.
    let server = Server::start(
        stores,
        listen,
        Serving {
            workers: args.workers,
            max_clients: args.max_clients,
        },
    )
    .map_err(|e| format!("listening: {e}"))?;
    let pod_name = args
        .pod
        .as_deref()
        .map_or_else(|| "heap".to_string(), |p: &Path| p.display().to_string());
    say!(
        "megalon-server: pod {pod_name} {how} (slots of {} bytes, keys up to {} bytes, {} LNR, {} SCR); {} worker(s) per host",
        config.slot_size_bytes,
        config.max_key_bytes,
        size(config.lnr_bytes),
        size(config.scr_bytes),
        args.workers
    );
    for host in server.hosts() {
        let tcp = host
            .tcp
            .map_or_else(|| "no TCP".to_string(), |a| a.to_string());
        say!(
            "megalon-server: host {} ready on {} and {tcp}",
            host.host_id,
            host.socket.display()
        );
    }
    let shutdown = Arc::clone(server.shutdown());
    stop.serving(Arc::clone(&shutdown));
    let stores = server.wait();
    let declared_dead = shutdown.declared_dead();
    if let Some((host, life)) = declared_dead {
        // Said before the hosts leave (up to the wait limit): what a supervisor's log
        // shows first.
        let again = if args.pod.is_some() {
            format!(
                "started again as host {host}, the server rejoins the pod as the id's next life"
            )
        } else {
            "the pod was this process's heap: started again, the server makes a new one".into()
        };
        eprintln!(
            "megalon-server: host {host} (life {life}) was declared dead by the pod's other hosts (its lease ran out while this process was paused, or its pump stopped); stopped serving, exiting with status {DECLARED_DEAD_STATUS}: {again}"
        );
    }
    // Leaving waits too (for log room, up to the wait limit): a second signal still ends
    // it at once.
    drop(stores);
    signals.close();
    if declared_dead.is_some() {
        return Ok(ExitCode::from(DECLARED_DEAD_STATUS));
    }
    say!("megalon-server: stopped; its hosts left the pod");
    Ok(ExitCode::SUCCESS)
}

/// SIGINT, SIGTERM and SIGHUP, caught (no longer ending the process) and kept until
/// [`watch_signals`] takes them.
fn catch_signals() -> Result<signal_hook::iterator::Signals, String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("watching signals: {e}"))
}

/// A stop asked for by a signal: before the server serves (the joins look at it), then
/// the server's shutdown.
#[derive(Default)]
struct Stop {
    requested: std::sync::atomic::AtomicBool,
    /// The server's shutdown, once it serves. Under the lock, `request` and `serving`
    /// each see what the other did before it: a SeqCst flag beside a `OnceLock` (whose
    /// set is a Release and whose get an Acquire) let both miss the other, the signal
    /// lost (a store then a load on each side, as in Dekker's).
    shutdown: std::sync::Mutex<Option<Arc<host::Shutdown>>>,
}

impl Stop {
    fn requested(&self) -> bool {
        self.requested.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A signal came: the server's shutdown if it serves, else a stop its start sees.
    fn request(&self) {
        let shutdown = {
            let shutdown = self.shutdown.lock().expect("stop");
            self.requested
                .store(true, std::sync::atomic::Ordering::SeqCst);
            shutdown.clone()
        };
        if let Some(shutdown) = shutdown {
            shutdown.trigger();
        }
    }

    /// The server serves: a signal from now on triggers `shutdown`, and one that came
    /// before it did already.
    fn serving(&self, shutdown: Arc<host::Shutdown>) {
        let requested = {
            let mut serving = self.shutdown.lock().expect("stop");
            *serving = Some(Arc::clone(&shutdown));
            self.requested()
        };
        if requested {
            shutdown.trigger();
        }
    }
}

/// Turns SIGINT, SIGTERM and SIGHUP (the terminal closed), caught by [`catch_signals`]
/// (those that came since included), into a stop (`Stop::request`); a second one ends
/// the process at once.
///
/// A shutdown waits for commands in the workers' hands, each up to the wait limit (a
/// create behind a stopped host waits for log room). A second signal does not wait: the
/// process exits (status 130) without leaving the pod, and the pod's other hosts
/// recover its hosts as they would a killed process's.
fn watch_signals(
    mut signals: signal_hook::iterator::Signals,
    stop: Arc<Stop>,
) -> Result<signal_hook::iterator::Handle, String> {
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("megalon-server-signals".into())
        .spawn(move || {
            let mut signals = signals.forever();
            if signals.next().is_some() {
                stop.request();
            }
            if signals.next().is_some() {
                eprintln!(
                    "megalon-server: a second signal; exiting now, without leaving the pod (its other hosts recover this process's hosts)"
                );
                std::process::exit(130);
            }
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(handle)
}
