//! The KV store across real processes: one pod file on tmpfs, one child process per host.
//! Each child joins the pod as its host, loads its share of the keys, runs the mix of gets
//! and puts, and tells the parent every put it got acknowledged. Once every host has
//! stopped writing, each reads every key and reports what it read. The parent prints each
//! host's throughput and latency and checks that every host read the same values, and that
//! every acknowledged put is there or was overwritten by a later one.
//!
//! With `--crash-every`, the parent also kills a random host's process with `SIGKILL` now
//! and then and starts it again: the other hosts' pumps declare the dead host dead, recover
//! what it held, and free its row; the new process rejoins as that host and goes on. A put
//! the killed process had not reported has an unknown outcome: it may be there or not.
//!
//! A child dies with its parent (on Linux, by the parent-death signal; elsewhere when its
//! standard input closes); a child that fails is reported with its exit status; none can
//! hang the parent (every wait is bounded). The pod file is removed at the end, however
//! the run ends, unless `--keep` (a parent killed with `SIGKILL` can remove nothing).
//!
//! ```text
//! cargo run --release --example kv_cluster
//! cargo run --release --example kv_cluster -- --hosts 4 --keys 20000 --seconds 2
//! cargo run --release --example kv_cluster -- --crash-every 2 --seconds 10
//! ```

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use megalon::core::{
    inspect::fnv1a64,
    limits::{LINE_BYTES, PAGE_BYTES},
    Backing, Backoff, CxlModel, Host, HostOptions, Join, MemoryKind, Pod, PodConfig,
};
use megalon::kv::{Megalon, Store};
use megalon_bench::mix::{self, Draw, Draws, Mix, MixRun, WorkerRun};
use megalon_workload::generator::{RandomSource, SplitMix64};
use megalon_workload::processes::{shared_memory_dir, ChildError, Children};
use megalon_workload::Clock;

mod common;
use common::{kv_args::KvArgs, Result};

/// Run megalon's KV store with one process per host on a shared pod file, and check that
/// every host reads the same values and every acknowledged put is kept.
///
/// The parent creates the pod file (on tmpfs where there is one) and starts one child
/// process per host. Each child joins the pod as its host, loads its share of the keys,
/// runs the mix of gets and puts for `--seconds`, then, once every host has stopped
/// writing, reads every key. The parent prints each host's throughput and latency and
/// checks that the hosts agree on every key and that every put a host acknowledged is
/// there or was overwritten by a later one. With `--crash-every`, it kills a random host's
/// process now and then and starts it again. The flags of the workload are those of the
/// `kv` example.
#[derive(Clone, Debug, Parser)]
#[command(name = "kv_cluster")]
struct Args {
    #[command(flatten)]
    kv: KvArgs,
    /// The pod file (default: a new file in /dev/shm, or the temporary directory).
    #[arg(long)]
    pod: Option<PathBuf>,
    /// Longest wait on another host, in seconds, beyond the run itself.
    #[arg(long, default_value_t = 60)]
    wait_seconds: u64,
    /// Keep the pod file at the end.
    #[arg(long)]
    keep: bool,
    /// Every this many seconds of the run, kill a random host's process with SIGKILL and
    /// start it again: it rejoins as the same host and goes on with the mix. The last host
    /// that has joined is spared (a host rejoins from a live one).
    #[arg(long, allow_negative_numbers = true)]
    crash_every: Option<f64>,
    /// Entries of the pod's log (default: the mix's). A host that rejoins after the log
    /// has recycled its first entries must join late, where the pod allows it; in a log
    /// that holds the whole run it replays the log from its start instead.
    #[arg(long)]
    log_entries: Option<u64>,
    /// Internal: run as the child for this host (set by the parent, with the other
    /// --child flags).
    #[arg(long, hide = true, requires_all = ["child_start", "child_parent", "child_pod"])]
    child: Option<u32>,
    /// Internal: which start of a host this child is, counted over all hosts from 0.
    #[arg(long, hide = true, requires = "child")]
    child_start: Option<u32>,
    /// Internal: the parent's process id.
    #[arg(long, hide = true, requires = "child")]
    child_parent: Option<u32>,
    /// Internal: the pod file a child opens.
    #[arg(long, hide = true, requires = "child")]
    child_pod: Option<PathBuf>,
}

/// What the parent tells one child: which host it is, which start, whose child, which
/// pod file.
#[derive(Clone, Debug, PartialEq)]
struct Role {
    host: u32,
    /// Starts are numbered over all hosts from 0: the first `hosts` are the hosts' first,
    /// which load the keys; later ones rejoin. A start's workers are numbered from
    /// `start * threads` ([`Role::first_worker`]), so no two processes stamp alike.
    start: u32,
    /// The parent's process id.
    parent: u32,
    pod: PathBuf,
}

impl Role {
    fn first_worker(&self, threads: usize) -> u64 {
        u64::from(self.start) * threads as u64
    }

    /// The flags that give a child this role.
    fn flags(&self) -> [OsString; 8] {
        [
            "--child".into(),
            self.host.to_string().into(),
            "--child-start".into(),
            self.start.to_string().into(),
            "--child-parent".into(),
            self.parent.to_string().into(),
            "--child-pod".into(),
            self.pod.clone().into(),
        ]
    }
}

impl Args {
    /// The child's role, if these are a child's flags.
    fn role(&self) -> Option<Role> {
        Some(Role {
            host: self.child?,
            start: self.child_start?,
            parent: self.child_parent?,
            pod: self.child_pod.clone()?,
        })
    }

    /// Refuses what the flags of the `kv` example allow but this one cannot run, naming
    /// the flag and the value given.
    fn check(&self) -> Result<(), String> {
        self.kv.check()?;
        if self.kv.value_bytes < STAMP_BYTES {
            return Err(format!(
                "--value-bytes {}: each put stamps its value with {STAMP_BYTES} bytes, so at least {STAMP_BYTES} are needed",
                self.kv.value_bytes
            ));
        }
        if let Some(every) = self.crash_every {
            if !(every > 0.0 && every.is_finite()) {
                return Err(format!(
                    "--crash-every {every}: a positive number of seconds is needed"
                ));
            }
            if self.kv.hosts < 2 {
                return Err(format!(
                    "--crash-every with --hosts {}: at least 2 hosts are needed, as the last host that has joined is never killed",
                    self.kv.hosts
                ));
            }
        }
        if self.wait_seconds == 0 {
            return Err(
                "--wait-seconds 0: at least 1 is needed (every wait on another host would fail at once)"
                    .into(),
            );
        }
        if self.wait_seconds > common::kv_args::MAX_SECONDS {
            return Err(format!(
                "--wait-seconds {}: at most {} (a year) is supported",
                self.wait_seconds,
                common::kv_args::MAX_SECONDS
            ));
        }
        let starts = u64::from(self.kv.hosts).saturating_add(self.kills_at_most());
        if starts.saturating_mul(self.kv.threads as u64) > MAX_WORKERS {
            return Err(format!(
                "--hosts {} --threads {} with a kill every {:?} s over {} s: {starts} starts of {} workers each; the stamps number at most {MAX_WORKERS} workers",
                self.kv.hosts,
                self.kv.threads,
                self.crash_every.unwrap_or(0.0),
                self.kv.seconds,
                self.kv.threads
            ));
        }
        Ok(())
    }

    /// The most kills the run can have.
    fn kills_at_most(&self) -> u64 {
        self.crash_every
            .map_or(0, |every| (self.kv.seconds / every).ceil() as u64)
    }
}

/// The word in the pod's application SCR that is the hosts' clock: a counter every reading
/// adds 1 to ([`Clock`]), read before and after every put.
const CLOCK: u64 = 0;

/// Bytes at the front of each put's value that say which put wrote it ([`Draws`] stamps
/// them): the puts its worker drew before it, and the worker's number in the low 16 bits.
const STAMP_BYTES: usize = 8;

/// Workers the stamps can tell apart.
const MAX_WORKERS: u64 = 1 << 16;

/// The byte every loaded value is made of: `mix::load` writes values of it.
const LOADED_BYTE: u8 = 0x5a;

/// Acknowledged puts a worker reports in one line, at most.
const ACKS_PER_LINE: usize = 256;

/// Longest a worker keeps acknowledged puts before it reports them: what a host killed
/// now has done in the last this long has an unknown outcome.
const ACK_INTERVAL: Duration = Duration::from_millis(20);

/// Keys per `values` line of the final read.
const VALUES_PER_LINE: u64 = 1000;

/// How often the parent looks at the clock while it waits for lines (progress, kills).
const PARENT_TICK: Duration = Duration::from_millis(100);

fn pod_config(args: &Args) -> PodConfig {
    let config = args.kv.pod_config().app_scr_bytes(LINE_BYTES);
    match args.log_entries {
        // The log is part of LNR: grow or shrink LNR with it. (Past 2^64 bytes, an LNR
        // size the pod refuses, naming it.)
        Some(entries) => {
            let entry_bytes = config.log_entry_bytes();
            let lnr_bytes = (config.lnr_bytes - config.log_capacity_entries * entry_bytes)
                .saturating_add(entries.saturating_mul(entry_bytes));
            config.log_capacity_entries(entries).lnr_bytes(
                lnr_bytes
                    .checked_next_multiple_of(PAGE_BYTES)
                    .unwrap_or(u64::MAX),
            )
        }
        None => config,
    }
}

fn main() -> ExitCode {
    let flags: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = Args::parse_from(std::env::args_os().take(1).chain(flags.iter().cloned()));
    common::exit_code(match args.role() {
        Some(role) => child(&args, &role),
        None => interrupted_by_signals()
            .and_then(|interrupted| parent(&args, &flags, &interrupted).map(drop)),
    })
}

/// How a put's value, or a key's absence, is told: what the hosts read at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    Absent,
    /// The value the load wrote.
    Loaded,
    /// A put's value, by its stamp.
    Put(u64),
    /// A value no put writes: its length.
    Odd(usize),
}

impl Held {
    /// What `value` (`None`: the key is absent) is, for values of `value_bytes`.
    fn of(value: Option<&[u8]>, value_bytes: usize) -> Held {
        let Some(value) = value else {
            return Held::Absent;
        };
        if value.len() != value_bytes {
            return Held::Odd(value.len());
        }
        if value.iter().all(|&b| b == LOADED_BYTE) {
            return Held::Loaded;
        }
        // A put writes its stamp, then zeros.
        let (stamp, rest) = value.split_at(STAMP_BYTES);
        if rest.iter().any(|&b| b != 0) {
            return Held::Odd(value.len());
        }
        Held::Put(u64::from_le_bytes(stamp.try_into().expect("STAMP_BYTES")))
    }
}

/// A stamp's worker.
fn worker_of(stamp: u64) -> u64 {
    stamp & (MAX_WORKERS - 1)
}

/// A stamp's put: how many puts its worker drew before it.
fn put_of(stamp: u64) -> u64 {
    stamp >> 16
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::Absent => f.write_str("absent"),
            Held::Loaded => f.write_str("loaded"),
            Held::Put(stamp) => write!(f, "{stamp:x}"),
            Held::Odd(len) => write!(f, "odd:{len}"),
        }
    }
}

impl FromStr for Held {
    type Err = String;

    fn from_str(text: &str) -> Result<Held, String> {
        let odd = |len: &str| len.parse().map(Held::Odd);
        let stamp = |hex: &str| u64::from_str_radix(hex, 16).map(Held::Put);
        match text {
            "absent" => Ok(Held::Absent),
            "loaded" => Ok(Held::Loaded),
            _ => match text.strip_prefix("odd:") {
                Some(len) => odd(len).map_err(|e| e.to_string()),
                None => stamp(text).map_err(|e| e.to_string()),
            },
        }
        .map_err(|e| format!("{text:?} is no value a host reads: {e}"))
    }
}

/// A put as errors name it.
fn put_name(stamp: u64) -> String {
    format!(
        "worker {}'s put {} (stamp {stamp:x})",
        worker_of(stamp),
        put_of(stamp)
    )
}

/// A key as errors name it.
fn key_name(index: u64) -> String {
    String::from_utf8_lossy(&mix::key(index)).into_owned()
}

// ---------------------------------------------------------------- the parent

fn default_pod_path() -> PathBuf {
    shared_memory_dir().join(format!("megalon-kv-cluster-{}.pod", std::process::id()))
}

/// The pod file, removed when this is dropped (however the parent ends) unless kept.
struct PodFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for PodFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What a run ended with, for its summary line (and the tests).
#[derive(Debug)]
struct Summary {
    hosts: u32,
    killed: u32,
    operations: u64,
    acknowledged_puts: u64,
    keys: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kv_cluster: {} hosts, {} killed and rejoined, {} operations, {} acknowledged puts kept or overwritten later, every host agrees on {} keys",
            self.hosts, self.killed, self.operations, self.acknowledged_puts, self.keys
        )
    }
}

/// A flag set by SIGINT, SIGTERM and SIGHUP (the terminal closed): the parent's waits see
/// it and fail, which kills the hosts and removes the pod file as any failure does. (A
/// Ctrl-C also reaches the hosts, which die of it; the parent then fails on their exit.)
fn interrupted_by_signals() -> Result<Arc<AtomicBool>> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, interrupted.clone())?;
    }
    Ok(interrupted)
}

/// Refuses a `--pod` path that holds a file: `Pod::create` replaces anything that is not
/// a pod and any pod not in use, and the run removes its pod file at the end, so a
/// mistyped path cost the file it named, and a pod kept from an earlier run (`--keep`) or
/// another program's was replaced and then removed.
fn refuse_an_existing_file(path: &Path) -> Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let what = match Pod::open(Backing::file(path)) {
        Err(megalon::core::Error::BadMagic { .. } | megalon::core::Error::FileTooSmall { .. }) => {
            "a file that is not a pod"
        }
        _ => "a pod file",
    };
    Err(format!(
        "--pod {}: {what} is there; it is left as it is (remove it, or name a new path)",
        path.display()
    )
    .into())
}

/// Runs the hosts on a new pod file, reports and checks what they did. `flags` are the
/// parent's own, which it hands on to the hosts; once `interrupted` is set, the next wait
/// fails.
fn parent(args: &Args, flags: &[OsString], interrupted: &AtomicBool) -> Result<Summary> {
    args.check()?;
    let path = args.pod.clone().unwrap_or_else(default_pod_path);
    refuse_an_existing_file(&path)?;
    let pod =
        Pod::create(&pod_config(args), Backing::file(&path)).map_err(|e| args.kv.explain(e))?;
    // Created: from here on the file is ours to remove.
    let _file = PodFile {
        path: path.clone(),
        keep: args.keep,
    };
    let crashes = match args.crash_every {
        Some(every) => format!("; a random host killed and restarted every {every} s"),
        None => String::new(),
    };
    println!(
        "megalon KV store: {} processes (hosts) x {} threads, {}, {} memory; pod file {} ({} MiB){crashes}",
        args.kv.hosts,
        args.kv.threads,
        args.kv.describe_workload(),
        across_processes(args.kv.memory.clone()),
        path.display(),
        pod.layout().total_bytes >> 20,
    );
    // Held (and with it the pod file's shared lock) until the end: between this create
    // and the hosts' opens, another creator at the path would otherwise find it unused
    // and replace it under the hosts.
    let _pod = pod;
    let mut cluster = Cluster::start(args, flags, &path, interrupted)?;
    cluster.load()?;
    cluster.run()?;
    let tally = cluster.finish()?;
    tally.report()?;
    let summary = tally.check()?;
    println!("{summary}");
    Ok(summary)
}

/// The command that runs a child of `role`: this program with the parent's `flags` (so
/// that it runs the same workload on the same pod configuration) and the role's.
#[cfg(not(test))]
fn host_command(flags: &[OsString], role: &Role) -> Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(child_flags(flags, role));
    Ok(command)
}

#[cfg(test)]
use tests::host_command;

/// The parent's `flags`, then `role`'s. A `--pod` among the parent's is harmless: a child
/// opens the file its role names.
fn child_flags(flags: &[OsString], role: &Role) -> Vec<OsString> {
    flags.iter().cloned().chain(role.flags()).collect()
}

/// The hosts' processes, and what the parent learns from them.
struct Cluster<'a> {
    args: &'a Args,
    /// The parent's flags, handed on to every host.
    flags: &'a [OsString],
    pod: &'a Path,
    /// Once set, the next wait fails.
    interrupted: &'a AtomicBool,
    /// Killed and reaped when dropped, however the parent ends.
    children: Children,
    tally: Tally,
    /// The end of every wait: the run's time and twice the wait bound, from the start.
    deadline: Instant,
}

impl<'a> Cluster<'a> {
    /// Starts one process per host on the pod file `pod`.
    fn start(
        args: &'a Args,
        flags: &'a [OsString],
        pod: &'a Path,
        interrupted: &'a AtomicBool,
    ) -> Result<Self> {
        let deadline = Instant::now()
            + Duration::from_secs_f64(args.kv.seconds)
            + Duration::from_secs(args.wait_seconds) * 2;
        let role = |host| Role {
            host,
            start: host,
            parent: std::process::id(),
            pod: pod.to_owned(),
        };
        let commands = (0..args.kv.hosts)
            .map(|host| Ok((format!("host {host}"), host_command(flags, &role(host))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Cluster {
            args,
            flags,
            pod,
            interrupted,
            children: Children::spawn(commands).map_err(one_line)?,
            tally: Tally::new(args),
            deadline,
        })
    }

    /// Waits until every host has loaded its share.
    fn load(&mut self) -> Result {
        let bar = progress(
            self.args,
            ProgressBar::new_spinner(),
            "load",
            "{what} {spinner} {msg} ({elapsed})",
        );
        bar.set_message(format!(
            "{} keys on {} hosts",
            self.args.kv.keys, self.args.kv.hosts
        ));
        bar.enable_steady_tick(Duration::from_millis(100));
        self.take_until("load their keys", |t| t.loaded.iter().all(Option::is_some))?;
        bar.finish_and_clear();
        Ok(())
    }

    /// Runs the mix for `--seconds`, killing a random host every `--crash-every`.
    fn run(&mut self) -> Result {
        let args = self.args;
        let bar = progress(
            args,
            ProgressBar::new((args.kv.seconds * 10.0).ceil() as u64),
            "run",
            "{what} [{bar:40}] {percent:>3}%",
        );
        self.children
            .send_all("run", self.deadline)
            .map_err(one_line)?;
        let began = Instant::now();
        let end = began + Duration::from_secs_f64(args.kv.seconds);
        let every = args.crash_every.map(Duration::from_secs_f64);
        let mut next_kill = every.map(|every| began + every);
        let mut random = SplitMix64::new(args.kv.seed);
        while Instant::now() < end {
            match (next_kill, every) {
                (Some(kill_at), Some(every)) if Instant::now() >= kill_at => {
                    let hosts = self.tally.may_kill();
                    let host = hosts[(random.next_u64() % hosts.len() as u64) as usize];
                    let killed = self.kill_and_restart(host)?;
                    let at = began.elapsed().as_secs_f64();
                    say(
                        &bar,
                        format!("killed {killed} at {at:.1} s and started it again"),
                    );
                    next_kill = Some(kill_at + every);
                }
                _ => {
                    let wake = next_kill.map_or(end, |kill_at| kill_at.min(end));
                    if let Some((host, line)) = self.next_line(wake)? {
                        self.tally.take(host, &line)?;
                    }
                    bar.set_position((began.elapsed().as_secs_f64() * 10.0) as u64);
                }
            }
        }
        bar.finish_and_clear();
        Ok(())
    }

    /// Kills `host`'s process with SIGKILL, reaps it, and starts the host again, running
    /// the mix; answers what was killed, as the run's output says it.
    fn kill_and_restart(&mut self, host: u32) -> Result<String> {
        let (child, pid) = (host as usize, self.children.id(host as usize));
        let (killed, start) = self.tally.restart(host);
        let role = Role {
            host,
            start,
            parent: std::process::id(),
            pod: self.pod.to_owned(),
        };
        let command = host_command(self.flags, &role)?;
        self.children
            .restart(child, command, self.deadline)
            .map_err(one_line)?;
        self.children
            .send(child, "run", self.deadline)
            .map_err(one_line)?;
        // Everything the killed process printed is in: whether it had joined, say.
        for line in self.children.take_lines(child) {
            self.tally.take(child, &line)?;
        }
        let joined = self.tally.starts[killed as usize].joined;
        let joining = if joined { "" } else { ", still joining" };
        Ok(format!("host {host} (process {pid}{joining})"))
    }

    /// Stops every host's writes, then has every host read every key, and waits for them
    /// to exit.
    fn finish(mut self) -> Result<Tally> {
        // Every host stops writing before any reads what is left.
        self.children
            .send_all("stop", self.deadline)
            .map_err(one_line)?;
        self.take_until("stop", |t| t.ran.iter().all(Option::is_some))?;
        self.children
            .send_all("read", self.deadline)
            .map_err(one_line)?;
        let rest = self.children.wait_all(self.deadline).map_err(one_line)?;
        for (host, lines) in rest.iter().enumerate() {
            for line in lines {
                self.tally.take(host, line)?;
            }
        }
        Ok(self.tally)
    }

    /// Takes in what the hosts print until `done` holds, or fails at the deadline (naming
    /// what they did not do).
    fn take_until(&mut self, what: &str, done: impl Fn(&Tally) -> bool) -> Result {
        while !done(&self.tally) {
            match self.next_line(self.deadline)? {
                Some((host, line)) => self.tally.take(host, &line)?,
                None if Instant::now() >= self.deadline => {
                    return Err(format!("the hosts did not {what} in time").into())
                }
                None => {}
            }
        }
        Ok(())
    }

    /// The next line a host printed: waits until `until` at most, a [`PARENT_TICK`] at a
    /// time, and fails once the parent is interrupted.
    fn next_line(&mut self, until: Instant) -> Result<Option<(usize, String)>> {
        let interrupted = || self.interrupted.load(Ordering::Relaxed);
        let interruption = || "interrupted (SIGINT, SIGTERM or SIGHUP)".into();
        if interrupted() {
            return Err(interruption());
        }
        let until = until.min(Instant::now() + PARENT_TICK);
        // A Ctrl-C reaches the hosts too: then their exit is the interruption.
        self.children.next_line(until).map_err(|error| {
            if interrupted() {
                interruption()
            } else {
                one_line(error)
            }
        })
    }
}

/// `line` above the progress bar, or on stdout when there is none.
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        println!("{line}");
    } else {
        bar.println(line);
    }
}

/// `bar` drawn with `template` (`{what}` replaced), or a hidden bar with `--quiet`.
fn progress(args: &Args, bar: ProgressBar, what: &str, template: &str) -> ProgressBar {
    if args.kv.quiet {
        return ProgressBar::hidden();
    }
    bar.set_style(
        ProgressStyle::with_template(&template.replace("{what}", &format!("{what:>5}")))
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// A child's failure as one line: what happened to it and, from its stderr, its own
/// `error: ...` line (else the lines it printed, joined).
fn one_line(error: ChildError) -> Box<dyn std::error::Error> {
    let (what, stderr) = match &error {
        ChildError::Exited {
            name,
            status,
            stderr,
        } => (format!("{name} exited with {status}"), stderr),
        ChildError::TimedOut {
            names,
            waited,
            stderr,
        } => (
            format!("{} did not answer within {waited:?}", names.join(", ")),
            stderr,
        ),
        _ => return error.into(),
    };
    let said = match stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
    {
        Some(said) => said.to_owned(),
        None => stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note:"))
            .collect::<Vec<_>>()
            .join(" / "),
    };
    if said.is_empty() {
        what.into()
    } else {
        format!("{what}: {said}").into()
    }
}

/// The value of `name=` in a child's line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

/// The value of `name=` in a child's line, parsed; an error names the line.
fn parsed<T: FromStr>(line: &str, name: &str) -> Result<T> {
    field(line, name)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {name}=... in a host's line: {line:?}").into())
}

/// One start of a host.
#[derive(Clone, Copy, Debug)]
struct Start {
    host: u32,
    /// It said it had joined the pod.
    joined: bool,
    /// It was killed: the puts it had not reported have unknown outcomes.
    killed: bool,
}

impl Start {
    fn new(host: u32) -> Self {
        Start {
            host,
            joined: false,
            killed: false,
        }
    }
}

/// Every put acknowledged to the parent, as much of it as the check needs.
#[derive(Debug, Default)]
struct Acknowledged {
    /// Puts acknowledged, of which this keeps the last of each worker to each key.
    puts: u64,
    /// Per key (by index) and worker: the stamp of the worker's last acknowledged put of
    /// the key, and the clock's reading after it.
    last: HashMap<(u64, u64), (u64, u64)>,
    /// Per key: the acknowledged put invoked last, by the clock's reading before it, and
    /// its stamp.
    invoked_last: HashMap<u64, (u64, u64)>,
}

impl Acknowledged {
    fn take(&mut self, index: u64, stamp: u64, invoked: u64, acked: u64) {
        let worker = worker_of(stamp);
        let last = self.last.entry((index, worker)).or_insert((stamp, acked));
        if put_of(stamp) >= put_of(last.0) {
            *last = (stamp, acked);
        }
        let latest = self.invoked_last.entry(index).or_insert((invoked, stamp));
        if invoked >= latest.0 {
            *latest = (invoked, stamp);
        }
    }

    /// Whether key `index` holding `held` at the end keeps every acknowledged put: the
    /// put that wrote it was not over before an acknowledged put of the key began (that
    /// put would come after it in any order of the puts, and be what the key holds).
    /// `starts` tells which worker was killed: a put it did not report may or may not
    /// have taken effect, and ended whenever.
    fn check(&self, index: u64, held: Held, starts: &[Start], threads: usize) -> Result {
        let key = key_name(index);
        let latest = self.invoked_last.get(&index).copied();
        let acked = match held {
            Held::Absent => {
                return Err(
                    format!("key {key} is missing: every key was loaded and none deleted").into(),
                )
            }
            Held::Odd(len) => {
                return Err(format!("key {key} holds a value no put wrote ({len} bytes)").into())
            }
            Held::Loaded => match latest {
                None => return Ok(()),
                Some((_, stamp)) => {
                    return Err(format!(
                        "key {key} still holds its loaded value, but {} was acknowledged",
                        put_name(stamp)
                    )
                    .into())
                }
            },
            Held::Put(stamp) => {
                let worker = worker_of(stamp);
                let Some(start) = starts.get((worker / threads as u64) as usize) else {
                    return Err(format!(
                        "key {key} holds {}, but no such worker ran",
                        put_name(stamp)
                    )
                    .into());
                };
                match self.last.get(&(index, worker)) {
                    Some(&(last, acked)) if last == stamp => Some(acked),
                    Some(&(last, _)) if put_of(stamp) < put_of(last) => {
                        return Err(format!(
                            "key {key} holds {}, but the same worker's later put {} was acknowledged",
                            put_name(stamp),
                            put_of(last)
                        )
                        .into())
                    }
                    // Drawn after its worker's last report, by a process that was killed:
                    // the put may have taken effect.
                    _ if start.killed => None,
                    _ => {
                        return Err(format!(
                            "key {key} holds {}, which host {} never acknowledged (its process ended normally)",
                            put_name(stamp),
                            start.host
                        )
                        .into())
                    }
                }
            }
        };
        match (acked, latest) {
            (Some(acked), Some((invoked, stamp))) if acked < invoked => Err(format!(
                "key {key} holds a put acknowledged at clock {acked}, but {}, invoked after that at clock {invoked} and acknowledged, is lost",
                put_name(stamp)
            )
            .into()),
            _ => Ok(()),
        }
    }
}

/// What the parent learns from the hosts' lines.
struct Tally {
    hosts: u32,
    keys: u64,
    threads: usize,
    /// Every start, by its number.
    starts: Vec<Start>,
    /// Per host: its current start.
    current: Vec<u32>,
    /// Per worker: the operations it reported last.
    operations: Vec<u64>,
    acknowledged: Acknowledged,
    /// Per host: its load rate, its `ran` line (of its current start), what it read of
    /// each key, and its digest line.
    loaded: Vec<Option<f64>>,
    ran: Vec<Option<String>>,
    values: Vec<Vec<Option<Held>>>,
    digests: Vec<Option<String>>,
}

impl Tally {
    fn new(args: &Args) -> Self {
        let hosts = args.kv.hosts;
        let per_host = hosts as usize;
        Tally {
            hosts,
            keys: args.kv.keys,
            threads: args.kv.threads,
            starts: (0..hosts).map(Start::new).collect(),
            current: (0..hosts).collect(),
            operations: Vec::new(),
            acknowledged: Acknowledged::default(),
            loaded: vec![None; per_host],
            ran: vec![None; per_host],
            values: vec![vec![None; args.kv.keys as usize]; per_host],
            digests: vec![None; per_host],
        }
    }

    /// The hosts the parent may kill now: all but the last that has joined. A host that
    /// rejoins once the log has recycled gets its index from a live host, and only a live
    /// host declares a dead one dead: with none left, no host could join again.
    fn may_kill(&self) -> Vec<u32> {
        let joined = |host: &u32| self.starts[self.current[*host as usize] as usize].joined;
        let hosts = 0..self.hosts;
        match hosts.clone().filter(joined).collect::<Vec<_>>()[..] {
            [last] => hosts.filter(|&host| host != last).collect(),
            _ => hosts.collect(),
        }
    }

    /// Marks `host`'s current start killed and numbers its next; answers both.
    fn restart(&mut self, host: u32) -> (u32, u32) {
        let killed = self.current[host as usize];
        self.starts[killed as usize].killed = true;
        self.ran[host as usize] = None;
        let start = self.starts.len() as u32;
        self.starts.push(Start::new(host));
        self.current[host as usize] = start;
        (killed, start)
    }

    /// Takes in one line `host` printed. A line of a kind not listed here is not the
    /// hosts' (the test harness prints some when the tests run the hosts) and is skipped.
    fn take(&mut self, host: usize, line: &str) -> Result {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("joined") => {
                let start: usize = parsed(line, "start")?;
                let start = self
                    .starts
                    .get_mut(start)
                    .ok_or_else(|| format!("host {host} says it is start {start}"))?;
                start.joined = true;
            }
            Some("loaded") => self.loaded[host] = Some(parsed(line, "load_per_s")?),
            // Cut short: the last words of a killed host. Its puts have unknown outcomes.
            Some("acked") if !line.ends_with(" end") => {}
            Some("acked") => {
                let worker: u64 = parsed(line, "worker")?;
                let operations = parsed(line, "operations")?;
                self.acknowledged.puts += parsed::<u64>(line, "puts")?;
                let slot = worker as usize;
                if self.operations.len() <= slot {
                    self.operations.resize(slot + 1, 0);
                }
                self.operations[slot] = self.operations[slot].max(operations);
                for put in words.skip(3).take_while(|&word| word != "end") {
                    let numbers: Vec<u64> = put
                        .split(':')
                        .enumerate()
                        .map(|(i, n)| u64::from_str_radix(n, if i == 1 { 16 } else { 10 }))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("host {host}: acknowledged put {put:?}: {e}"))?;
                    let [index, stamp, invoked, acked] = numbers[..] else {
                        return Err(format!("host {host}: acknowledged put {put:?}").into());
                    };
                    self.acknowledged.take(index, stamp, invoked, acked);
                }
            }
            Some("ran") => self.ran[host] = Some(line.to_owned()),
            Some("values") => {
                let first: u64 = parsed(line, "first")?;
                for (i, held) in words.skip(1).enumerate() {
                    let index = first + i as u64;
                    let slot = self.values[host]
                        .get_mut(index as usize)
                        .ok_or_else(|| format!("host {host} read key {index} of {}", self.keys))?;
                    *slot = Some(held.parse()?);
                }
            }
            Some("digest") => self.digests[host] = Some(line.to_owned()),
            _ => {}
        }
        Ok(())
    }

    /// Each host's lines, in host order: the throughput and latency of its last start,
    /// how many times it was killed, and what it read.
    fn report(&self) -> Result {
        let mut total = 0.0;
        println!(
            "host   load/s      ops/s      gets/s     puts/s   get p50 us  get p99 us  put p99 us  killed"
        );
        for host in 0..self.hosts as usize {
            let missing = |kind: &str| format!("host {host} printed no {kind} line");
            let ran = self.ran[host].as_deref().ok_or_else(|| missing("ran"))?;
            let get = |name| parsed::<f64>(ran, name);
            total += get("ops_per_s")?;
            let killed = self
                .starts
                .iter()
                .filter(|s| s.host as usize == host && s.killed);
            println!(
                "{host:>4} {:>8} {:>10} {:>10} {:>10} {:>11.2} {:>11.2} {:>11.2} {:>7}",
                mix::rate(self.loaded[host].ok_or_else(|| missing("loaded"))?),
                mix::rate(get("ops_per_s")?),
                mix::rate(get("gets_per_s")?),
                mix::rate(get("puts_per_s")?),
                get("get_p50_ns")? / 1e3,
                get("get_p99_ns")? / 1e3,
                get("put_p99_ns")? / 1e3,
                killed.count(),
            );
        }
        println!("all:  {} over {} processes", mix::rate(total), self.hosts);
        for (host, digest) in self.digests.iter().enumerate() {
            let digest = digest
                .as_deref()
                .ok_or_else(|| format!("host {host} printed no digest line"))?;
            println!(
                "host {host} read {} keys, digest {}; records of {} bits, width switches: {}",
                field(digest, "keys").unwrap_or("?"),
                field(digest, "fnv").unwrap_or("?"),
                field(digest, "bits").unwrap_or("?"),
                field(digest, "switches").unwrap_or("?")
            );
        }
        Ok(())
    }

    /// Whether the hosts agree on every key (the first key they disagree on, else), and
    /// every acknowledged put is kept or overwritten by a later one.
    fn check(&self) -> Result<Summary> {
        for index in 0..self.keys {
            let read = |host: usize| {
                self.values[host][index as usize]
                    .ok_or_else(|| format!("host {host} did not say what key {index} holds"))
            };
            let first = read(0)?;
            for host in 1..self.hosts as usize {
                let other = read(host)?;
                if other != first {
                    return Err(format!(
                        "the hosts disagree on key {}: host 0 read {first}, host {host} read {other}",
                        key_name(index)
                    )
                    .into());
                }
            }
        }
        // The same stamps; the digests cover every byte.
        let digest = |host: usize| self.digests[host].as_deref().and_then(|d| field(d, "fnv"));
        if let Some(host) = (1..self.hosts as usize).find(|&h| digest(h) != digest(0)) {
            return Err(format!(
                "hosts 0 and {host} read the same puts but different bytes (digests {} and {})",
                digest(0).unwrap_or("?"),
                digest(host).unwrap_or("?")
            )
            .into());
        }
        for (index, held) in self.values[0].iter().enumerate() {
            let held = held.expect("checked above");
            self.acknowledged
                .check(index as u64, held, &self.starts, self.threads)?;
        }
        let present = self.values[0]
            .iter()
            .filter(|held| !matches!(held, Some(Held::Absent)))
            .count();
        Ok(Summary {
            hosts: self.hosts,
            killed: self.starts.iter().filter(|s| s.killed).count() as u32,
            operations: self.operations.iter().sum(),
            acknowledged_puts: self.acknowledged.puts,
            keys: present as u64,
        })
    }
}

// ---------------------------------------------------------------- a child (one host)

/// Makes the kernel kill this process when its parent dies, so that no host outlives the
/// run that started it, and fails if the parent (process `parent`) is gone already.
///
/// The signal comes when the *thread* that started us ends: the parent starts every host
/// from one thread that lives until the hosts are done.
#[cfg(target_os = "linux")]
fn die_with_parent(parent: u32) -> Result {
    // SAFETY: prctl(PR_SET_PDEATHSIG, signal) reads its integer arguments only; no memory
    // of ours is passed. The signal goes as an unsigned long, the width the kernel reads.
    let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    if set != 0 {
        return Err(format!(
            "asking to die with the parent: {}",
            std::io::Error::last_os_error()
        )
        .into());
    }
    // The parent may have died before the call: then no signal comes, and we have been
    // handed to another parent already.
    let now = std::os::unix::process::parent_id();
    if now != parent {
        return Err(
            format!("the parent (process {parent}) is gone; process {now} is ours now").into(),
        );
    }
    Ok(())
}

/// Elsewhere a child ends when its standard input closes ([`commands_from_parent`]).
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_parent: u32) -> Result {
    Ok(())
}

/// The parent's commands (`run`, `stop`, `read`), one a line on standard input. When it
/// closes, the parent is gone: the process exits at once, as a killed host would.
fn commands_from_parent() -> Receiver<String> {
    let (sender, commands) = mpsc::channel();
    thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                return;
            }
        }
        eprintln!("error: the parent closed our standard input");
        std::process::exit(1);
    });
    commands
}

/// Waits for the parent's command `expected`.
fn expect(commands: &Receiver<String>, expected: &str) -> Result {
    match commands.recv() {
        Ok(command) if command == expected => Ok(()),
        Ok(command) => Err(format!("the parent said {command:?}, expected {expected:?}").into()),
        Err(_) => Err(format!("the parent's commands ended before {expected:?}").into()),
    }
}

/// Joins as `role`'s host. A host that starts again waits, up to `bound`, until the other
/// hosts have declared its killed process dead and freed its row.
fn join(pod: &Arc<Pod>, role: &Role, options: HostOptions, bound: Duration) -> Result<Host> {
    let mut backoff = Backoff::new(bound);
    loop {
        match Host::join(pod, Join::As(role.host), options.clone()) {
            Err(megalon::core::Error::HostTaken { .. }) if backoff.snooze() => {}
            Err(error) => {
                return Err(format!(
                    "joining as host {} (start {}, after {:?}): {error}",
                    role.host,
                    role.start,
                    backoff.waited()
                )
                .into())
            }
            Ok(host) => return Ok(host),
        }
    }
}

/// `memory` for a host whose pod has hosts in other processes: under the CXL cost model,
/// every SCR access a miss (`scr_cache=0`), since the model's directory of SCR lines is
/// one process's and cannot see another process's writes.
fn across_processes(memory: MemoryKind) -> MemoryKind {
    match memory {
        MemoryKind::Cxl(model) => MemoryKind::Cxl(CxlModel {
            scr_cache: 0,
            ..model
        }),
        other => other,
    }
}

fn child(args: &Args, role: &Role) -> Result {
    die_with_parent(role.parent)?;
    let commands = commands_from_parent();
    let pod = Arc::new(Pod::open_expecting(
        Backing::file(&role.pod),
        &pod_config(args),
    )?);
    let bound = Duration::from_secs(args.wait_seconds);
    let options = args
        .kv
        .host_options(role.host)
        .memory(across_processes(args.kv.memory_of(role.host)))
        .wait_limit(bound);
    let joined = join(&pod, role, options, bound)?;
    println!("joined host={} start={}", role.host, role.start);
    let store = Store::new(Megalon::new(pod.clone(), vec![Arc::new(joined)]));
    let (host, hosts) = (role.host, args.kv.hosts);
    if role.start < hosts {
        load(args, host, &store)?;
    }

    expect(&commands, "run")?;
    let run = run_mix(args, role, &store, &commands)?;
    let (get, put, seconds) = (run.get_latency(), run.put_latency(), run.seconds);
    // The parent waits for this line from every host before it asks them to read.
    println!(
        "ran host={host} start={} ops_per_s={:.0} gets_per_s={:.0} puts_per_s={:.0} get_p50_ns={} get_p99_ns={} put_p99_ns={} churn={} read_retries={}",
        role.start,
        run.ops_per_second(),
        run.gets() as f64 / seconds,
        run.puts() as f64 / seconds,
        get.quantile(0.5).as_nanos(),
        get.quantile(0.99).as_nanos(),
        put.quantile(0.99).as_nanos(),
        run.report.counter("churn").unwrap_or(0),
        run.report.counter("read retries").unwrap_or(0),
    );

    expect(&commands, "read")?;
    read_every_key(args, host, &store)
}

/// Loads this host's share: keys whose index is the host's modulo the hosts.
fn load(args: &Args, host: u32, store: &Store<Megalon>) -> Result {
    let (hosts, threads) = (u64::from(args.kv.hosts), args.kv.threads as u64);
    let mix = args.kv.mix();
    let started = Instant::now();
    let loaded = AtomicU64::new(0);
    thread::scope(|scope| {
        let loaders: Vec<_> = (0..threads)
            .map(|t| {
                let (mix, loaded) = (&mix, &loaded);
                let first = u64::from(host) + t * hosts;
                scope.spawn(move || mix::load(store, 0, mix, first, hosts * threads, loaded))
            })
            .collect();
        loaders
            .into_iter()
            .try_for_each(|l| l.join().expect("loader panicked"))
    })?;
    let load_per_s = loaded.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    // The parent waits for this line from every host before it starts the run.
    println!("loaded host={host} load_per_s={load_per_s:.0}");
    Ok(())
}

/// Runs the mix on every thread until the parent says `stop` (or a worker fails).
fn run_mix(
    args: &Args,
    role: &Role,
    store: &Store<Megalon>,
    commands: &Receiver<String>,
) -> Result<MixRun> {
    let mix = args.kv.mix();
    let pod = store.scheme().pod().clone();
    let clock_offset = pod.layout().app_scr_offset + CLOCK;
    // AcqRel, as `Clock` asks: the readings order the puts of every process as they
    // happened (see `Clock`).
    let clock = Clock::external(move || pod.scr_u64(clock_offset).fetch_add(1, Ordering::AcqRel));
    let before = store.report();
    let stop = AtomicBool::new(false);
    let (runs, said, seconds) = thread::scope(|scope| {
        let began = Instant::now();
        let workers: Vec<_> = (0..args.kv.threads)
            .map(|t| {
                let (mix, clock, stop) = (&mix, &clock, &stop);
                let worker = role.first_worker(args.kv.threads) + t as u64;
                scope.spawn(move || work(store, role.host, mix, worker, clock, stop))
            })
            .collect();
        let said = loop {
            match commands.recv_timeout(PARENT_TICK) {
                Ok(command) if command == "stop" => break None,
                Ok(command) => break Some(command),
                Err(RecvTimeoutError::Timeout) if workers.iter().any(|w| w.is_finished()) => {
                    break None
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break None,
            }
        };
        stop.store(true, Ordering::Relaxed);
        let runs: Result<Vec<_>, WorkerError> = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect();
        (runs, said, began.elapsed().as_secs_f64())
    });
    let workers = runs.map_err(|error| -> Box<dyn std::error::Error> { error })?;
    if let Some(said) = said {
        return Err(format!("the parent said {said:?} during the run, expected \"stop\"").into());
    }
    Ok(MixRun {
        workers,
        seconds,
        report: store.report().since(&before),
    })
}

/// A worker's acknowledged puts not reported yet, and how it reports them: lines of
/// `acked worker=W operations=N puts=P`, then `INDEX:STAMP:INVOKED:ACKED` for the last of
/// the `P` puts to each key (the stamp in hexadecimal, the clock's readings before and
/// after the put), then `end`. The worker's earlier puts to a key need no check of their
/// own: a value that keeps its last put keeps them. A host killed as it writes a line
/// leaves it cut short, without its `end`: the parent skips it.
struct Acks {
    worker: u64,
    /// `(index, stamp, invoked, acked)` of each put not reported yet.
    puts: Vec<(u64, u64, u64, u64)>,
    /// The line being sent.
    line: String,
    reported: Instant,
}

impl Acks {
    fn new(worker: u64) -> Self {
        Acks {
            worker,
            puts: Vec::with_capacity(ACKS_PER_LINE),
            line: String::with_capacity(ACKS_PER_LINE * 48 + 64),
            reported: Instant::now(),
        }
    }

    /// The put of `stamp` to key `index` was acknowledged; the clock read `invoked`
    /// before it and `acked` after.
    fn push(&mut self, index: u64, stamp: u64, invoked: u64, acked: u64) {
        self.puts.push((index, stamp, invoked, acked));
    }

    /// Reports the puts kept, and the worker's `operations` so far, if a line is full or
    /// [`ACK_INTERVAL`] has passed since the last report by `now`.
    fn report_if_due(&mut self, operations: u64, now: Instant) -> std::io::Result<()> {
        if self.puts.len() >= ACKS_PER_LINE || now.duration_since(self.reported) >= ACK_INTERVAL {
            self.report(operations, now)?;
        }
        Ok(())
    }

    /// Reports the puts kept, and the worker's `operations` so far: one line, written
    /// whole under stdout's lock, so lines of workers do not mix.
    fn report(&mut self, operations: u64, now: Instant) -> std::io::Result<()> {
        let line = &mut self.line;
        line.clear();
        let (worker, puts) = (self.worker, self.puts.len());
        write!(
            line,
            "acked worker={worker} operations={operations} puts={puts}"
        )
        .expect("a String");
        // By key, and a key's puts in the order they were drawn (stamps grow): each
        // key's last put ends its run.
        self.puts
            .sort_unstable_by_key(|&(index, stamp, ..)| (index, stamp));
        for (i, &(index, stamp, invoked, acked)) in self.puts.iter().enumerate() {
            if self.puts.get(i + 1).is_none_or(|next| next.0 != index) {
                write!(line, " {index}:{stamp:x}:{invoked}:{acked}").expect("a String");
            }
        }
        line.push_str(" end\n");
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes())?;
        out.flush()?;
        self.puts.clear();
        self.reported = now;
        Ok(())
    }
}

/// What stops a worker: the store's refusal, or stdout's.
type WorkerError = Box<dyn std::error::Error + Send + Sync>;

/// Runs [`Draws`]' operations as worker `worker` of host `host` until `stop`, reading
/// `clock` before and after each put and reporting every acknowledged put ([`Acks`]).
fn work(
    store: &Store<Megalon>,
    host: u32,
    mix: &Mix,
    worker: u64,
    clock: &Clock,
    stop: &AtomicBool,
) -> Result<WorkerRun, WorkerError> {
    let mut kv = store.handle(0)?;
    let mut draws = Draws::new(mix, worker);
    // A put's value: its stamp (Draws writes it), then zeros.
    let mut value = vec![0u8; mix.value_bytes];
    let mut read = Vec::with_capacity(mix.value_bytes);
    let mut key = Vec::with_capacity(mix::KEY_BYTES);
    let mut run = WorkerRun::new(host as usize);
    let mut acks = Acks::new(worker);
    while !stop.load(Ordering::Relaxed) {
        let draw = draws.next(&mut value);
        mix::write_key(draw.index(), mix::KEY_BYTES, &mut key);
        let began = Instant::now();
        match draw {
            Draw::Get { .. } => {
                let found = kv.get_into(&key, &mut read)?;
                run.get_latency.record(began.elapsed());
                run.gets += 1;
                run.gets_absent += u64::from(!found);
            }
            Draw::Put { index } => {
                let invoked = clock.now();
                kv.put(&key, &value)?;
                let acked = clock.now();
                run.put_latency.record(began.elapsed());
                run.puts += 1;
                let stamp = u64::from_le_bytes(value[..STAMP_BYTES].try_into().expect("8"));
                acks.push(index, stamp, invoked, acked);
            }
        }
        run.operations += 1;
        acks.report_if_due(run.operations, began)?;
    }
    acks.report(run.operations, Instant::now())?;
    Ok(run)
}

/// Nobody writes any more: reads every key and reports what it holds, and a digest of
/// every byte read.
fn read_every_key(args: &Args, host: u32, store: &Store<Megalon>) -> Result {
    let mut kv = store.handle(0)?;
    let mut digest = Vec::with_capacity(8 * args.kv.keys as usize);
    let (mut value, mut key, mut line) = (Vec::new(), Vec::new(), String::new());
    let mut found = 0u64;
    for index in 0..args.kv.keys {
        if index % VALUES_PER_LINE == 0 {
            if !line.is_empty() {
                println!("{line}");
            }
            line = format!("values first={index}");
        }
        mix::write_key(index, mix::KEY_BYTES, &mut key);
        let present = kv.get_into(&key, &mut value)?;
        found += u64::from(present);
        digest.extend_from_slice(&fnv1a64(&value).to_le_bytes());
        let held = Held::of(present.then_some(&value[..]), args.kv.value_bytes);
        write!(line, " {held}").expect("a String");
    }
    println!("{line}");
    // The record width its replica is at, and how many switches brought it there.
    let width = store.scheme().hosts()[0].record_width()?;
    println!(
        "digest host={host} keys={found} fnv={:016x} bits={} switches={}",
        fnv1a64(&digest),
        width.bits,
        width.epoch
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    /// Where a test's parent puts a host's flags (one a line) for the host it starts.
    const HOST_FLAGS: &str = "MEGALON_KV_CLUSTER_HOST_FLAGS";

    /// In the tests, a host is this test binary started again to run [`host_process`]
    /// on the flags in [`HOST_FLAGS`].
    pub(super) fn host_command(flags: &[OsString], role: &Role) -> Result<Command> {
        let flags = child_flags(flags, role)
            .into_iter()
            .map(|flag| flag.into_string().map_err(|f| format!("{f:?}: not UTF-8")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["--exact", "tests::host_process", "--nocapture"])
            .env(HOST_FLAGS, flags.join("\n"));
        Ok(command)
    }

    /// A host started by a test's parent; nothing in a normal test run. It exits itself,
    /// with the host's exit code, before the test harness says anything more.
    #[test]
    fn host_process() {
        let Ok(flags) = std::env::var(HOST_FLAGS) else {
            return;
        };
        let flags: Vec<&str> = flags.split('\n').collect();
        let host = common::parse_flags::<Args>(&flags)
            .map_err(|e| e.into())
            .and_then(|args| match args.role() {
                Some(role) => child(&args, &role),
                None => Err(format!("{flags:?} give no host's role").into()),
            });
        std::process::exit(match host {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("{}", common::error_line(&*error));
                1
            }
        });
    }

    /// Runs the parent on `flags`, as `main` would.
    fn parent_on(flags: &[&str]) -> Result<Summary> {
        let args: Args = common::parse_flags(flags)?;
        let flags: Vec<OsString> = flags.iter().map(OsString::from).collect();
        parent(&args, &flags, &AtomicBool::new(false))
    }

    /// Runs 3 hosts for 3 seconds of mostly puts, killing one every 0.7 s, on a log of
    /// `log_entries`, and checks the summary and that the pod file is gone.
    fn killed_and_started_again(log_entries: &str) {
        let pod = shared_memory_dir().join(format!(
            "megalon-kv-cluster-test-{}-{log_entries}.pod",
            std::process::id()
        ));
        let pod_flag = pod.to_str().expect("a UTF-8 path");
        // --wait-seconds 10: a failure shows in seconds, not minutes.
        let mut flags: Vec<&str> = "--hosts 3 --threads 1 --keys 2000 --value-bytes 64 \
            --write-ratio 0.5 --seconds 3 --crash-every 0.7 --wait-seconds 10 --quiet"
            .split_whitespace()
            .collect();
        flags.extend(["--log-entries", log_entries, "--pod", pod_flag]);
        let summary = parent_on(&flags).unwrap_or_else(|e| panic!("{}", common::error_line(&*e)));
        assert!(summary.killed >= 1, "{summary}");
        assert_eq!(summary.keys, 2000, "{summary}");
        assert!(summary.acknowledged_puts > 0, "{summary}");
        assert!(!pod.exists(), "the pod file is removed at the end");
    }

    /// A log that holds the whole run: a host that starts again replays it from the start.
    #[test]
    fn hosts_killed_and_started_again_agree_and_keep_every_acknowledged_put() {
        killed_and_started_again("100000");
    }

    /// A log that recycles during the load: every host that starts again joins late.
    #[test]
    fn hosts_killed_and_started_again_join_late() {
        killed_and_started_again("256");
    }

    /// A short run of one host on the pod file `file`, or the reason it was refused.
    fn short_run_on(file: &Path) -> std::result::Result<Summary, String> {
        parent_on(&[
            "--hosts",
            "1",
            "--threads",
            "1",
            "--keys",
            "100",
            "--seconds",
            "0.2",
            "--wait-seconds",
            "5",
            "--quiet",
            "--pod",
            file.to_str().unwrap(),
        ])
        .map_err(|e| e.to_string())
    }

    /// `--pod` naming a file of the user's that is not a pod (a typo, say): the file is
    /// left as it is and the run refused. It was replaced by the pod (the core's
    /// `Pod::create` replaces anything that is not a pod), then removed at the end: a
    /// mistyped flag cost the file it named.
    #[test]
    fn a_pod_path_that_names_a_file_that_is_not_a_pod_is_refused_and_the_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, b"precious notes, not a pod").unwrap();
        let run = short_run_on(&file);
        assert_eq!(
            std::fs::read(&file).ok().as_deref(),
            Some(&b"precious notes, not a pod"[..]),
            "the run answered {run:?}"
        );
        let refusal = run.expect_err("a file that is not a pod is refused");
        assert!(refusal.contains("not a pod"), "{refusal}");
    }

    /// `--pod` naming a pod (one kept by an earlier run, another program's): left as it
    /// is and the run refused. It was replaced by the run's pod, then removed at the end.
    #[test]
    fn a_pod_path_that_names_a_pod_is_refused_and_the_pod_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kept.pod");
        let config = PodConfig::new()
            .scr_bytes(64 << 10)
            .lnr_bytes(16 << 20)
            .slot_size_bytes(256);
        drop(Pod::create(&config, Backing::file(&file)).unwrap());
        let before = std::fs::read(&file).unwrap();
        let run = short_run_on(&file);
        assert!(
            std::fs::read(&file).ok() == Some(before),
            "the pod file changed or went; the run answered {run:?}"
        );
        let refusal = run.expect_err("a pod file is refused");
        assert!(refusal.contains("a pod file is there"), "{refusal}");
    }

    /// A second creator at the run's pod path is refused for the whole run, also in the
    /// moment between the parent's create and its hosts' opens.
    #[test]
    fn a_second_creator_is_refused_while_the_hosts_start() {
        let pod = shared_memory_dir().join(format!(
            "megalon-kv-cluster-test-{}-race.pod",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&pod);
        let pod_flag = pod.to_str().expect("a UTF-8 path").to_owned();
        let done = AtomicBool::new(false);
        let (replaced, run) = thread::scope(|scope| {
            let racer = scope.spawn(|| {
                let config = PodConfig::new()
                    .scr_bytes(64 << 10)
                    .lnr_bytes(16 << 20)
                    .slot_size_bytes(256);
                while !pod.exists() {
                    if done.load(Ordering::Relaxed) {
                        return false;
                    }
                    thread::sleep(Duration::from_micros(50));
                }
                // The run lasts 3 s; the hosts start within the first few hundred ms.
                let until = Instant::now() + Duration::from_millis(500);
                while Instant::now() < until {
                    if Pod::create(&config, Backing::file(&pod)).is_ok() {
                        return true;
                    }
                }
                false
            });
            let run = parent_on(&[
                "--hosts",
                "2",
                "--threads",
                "1",
                "--keys",
                "1000",
                "--seconds",
                "3",
                "--wait-seconds",
                "5",
                "--quiet",
                "--pod",
                &pod_flag,
            ])
            .map_err(|e| e.to_string());
            done.store(true, Ordering::Relaxed);
            (racer.join().unwrap(), run)
        });
        let _ = std::fs::remove_file(&pod);
        assert!(
            !replaced,
            "another process's Pod::create replaced the run's pod file as its hosts started; the run answered {run:?}"
        );
        run.expect("the run");
    }

    #[test]
    fn a_child_takes_the_parent_s_flags_and_its_own() {
        let parent = ["--pod", "/dev/shm/a.pod", "--keys", "10", "--skew", "0"];
        let role = Role {
            host: 2,
            start: 5,
            parent: 77,
            pod: "/dev/shm/a.pod".into(),
        };
        let flags = child_flags(&parent.map(OsString::from), &role);
        let child = Args::try_parse_from(std::iter::once("kv_cluster".into()).chain(flags))
            .expect("the child parses its flags");
        assert_eq!(child.role(), Some(role));
        assert_eq!((child.kv.keys, child.kv.skew), (10, 0.0));
        assert!(Args::try_parse_from(["kv_cluster", "--child", "1"]).is_err());
        assert_eq!(common::parse_flags::<Args>(&parent).unwrap().role(), None);
    }

    #[test]
    fn flags_no_run_can_use_are_refused_by_name() {
        let refused = |flags: &[&str]| parent_on(flags).map(drop).unwrap_err().to_string();
        assert_eq!(
            refused(&["--value-bytes", "4"]),
            "--value-bytes 4: each put stamps its value with 8 bytes, so at least 8 are needed"
        );
        assert_eq!(
            refused(&["--crash-every", "0"]),
            "--crash-every 0: a positive number of seconds is needed"
        );
        assert_eq!(
            refused(&["--crash-every", "1", "--hosts", "1"]),
            "--crash-every with --hosts 1: at least 2 hosts are needed, as the last host that has joined is never killed"
        );
    }

    /// Numbers too large for a run are refused by name by the check, before any pod file
    /// or process exists, not met later as a panic or a wrapped count.
    #[test]
    fn numbers_too_large_are_refused_by_the_check() {
        for flags in [
            &["--seconds", "1e300"][..],
            &["--seconds", "1e18"],
            &["--wait-seconds", "18446744073709551615"],
            // A kill every 1e-300 s over 5 s is more starts than the stamps number.
            &["--crash-every", "1e-300", "--threads", "64"],
        ] {
            let args: Args = common::parse_flags(flags).unwrap();
            let checked = std::panic::catch_unwind(|| args.check());
            assert!(matches!(&checked, Ok(Err(_))), "{flags:?}: {checked:?}");
        }
    }

    #[test]
    fn the_pod_file_goes_unless_kept() {
        let dir = tempfile::tempdir().unwrap();
        for keep in [false, true] {
            let path = dir.path().join(format!("keep-{keep}.pod"));
            std::fs::write(&path, b"pod").unwrap();
            drop(PodFile {
                path: path.clone(),
                keep,
            });
            assert_eq!(path.exists(), keep);
        }
    }

    #[test]
    fn what_a_host_read_reads_back() {
        let value_bytes = 16;
        let mut put = vec![0u8; value_bytes];
        put[..8].copy_from_slice(&(7u64 << 16 | 3).to_le_bytes());
        let mut torn = put.clone();
        torn[12] = 1;
        for (value, held) in [
            (None, Held::Absent),
            (Some(vec![LOADED_BYTE; value_bytes]), Held::Loaded),
            (Some(put), Held::Put(7 << 16 | 3)),
            (Some(torn), Held::Odd(16)),
            (Some(vec![0; 3]), Held::Odd(3)),
        ] {
            assert_eq!(Held::of(value.as_deref(), value_bytes), held);
            assert_eq!(held.to_string().parse::<Held>(), Ok(held));
        }
        assert_eq!(put_name(7 << 16 | 3), "worker 3's put 7 (stamp 70003)");
    }

    #[test]
    fn a_lost_acknowledged_put_is_named() {
        let starts = [
            Start::new(0),
            Start {
                killed: true,
                ..Start::new(1)
            },
        ];
        let mut acks = Acknowledged::default();
        // Worker 0 put 1 of key 9, over at clock 11; worker 1 then put 1 of it, from 12.
        acks.take(9, 1 << 16, 10, 11);
        acks.take(9, 1 << 16 | 1, 12, 13);
        let check = |held| acks.check(9, held, &starts, 1).map_err(|e| e.to_string());
        assert_eq!(check(Held::Put(1 << 16 | 1)), Ok(()));
        assert_eq!(
            check(Held::Put(1 << 16)),
            Err("key user000000000009 holds a put acknowledged at clock 11, but worker 1's put 1 (stamp 10001), invoked after that at clock 12 and acknowledged, is lost".into())
        );
        // Worker 1 was killed: a later put it never reported may be there.
        assert_eq!(check(Held::Put(2 << 16 | 1)), Ok(()));
        assert_eq!(
            check(Held::Put(2 << 16)),
            Err("key user000000000009 holds worker 0's put 2 (stamp 20000), which host 0 never acknowledged (its process ended normally)".into())
        );
        assert_eq!(
            check(Held::Put(1)),
            Err("key user000000000009 holds worker 1's put 0 (stamp 1), but the same worker's later put 1 was acknowledged".into())
        );
        assert!(check(Held::Loaded)
            .unwrap_err()
            .contains("still holds its loaded value"));
        assert!(check(Held::Absent).unwrap_err().contains("is missing"));
        assert_eq!(
            acks.check(8, Held::Loaded, &starts, 1)
                .map_err(|e| e.to_string()),
            Ok(())
        );
    }

    #[test]
    fn acknowledged_puts_count_only_from_whole_lines() {
        let args: Args = common::parse_flags(&["--hosts", "2", "--threads", "1"]).unwrap();
        let mut tally = Tally::new(&args);
        let mut acks = Acks::new(1);
        acks.push(9, 1 << 16 | 1, 5, 6);
        acks.push(4, 2 << 16 | 1, 7, 8);
        acks.push(9, 3 << 16 | 1, 9, 10);
        acks.report(4, Instant::now()).unwrap();
        let line = acks.line.trim_end().to_owned();
        // The last put to each key, by key.
        assert_eq!(
            line,
            "acked worker=1 operations=4 puts=3 4:20001:7:8 9:30001:9:10 end"
        );
        // The last words of a killed host, cut short as it wrote them: skipped.
        tally.take(1, &line[..line.len() - 2]).unwrap();
        assert_eq!((tally.acknowledged.puts, tally.operations.len()), (0, 0));
        tally.take(1, &line).unwrap();
        assert_eq!((tally.acknowledged.puts, tally.operations[1]), (3, 4));
        assert_eq!(tally.acknowledged.last[&(9, 1)], (3 << 16 | 1, 10));
        assert_eq!(tally.acknowledged.invoked_last[&4], (7, 2 << 16 | 1));
        // Lines that are not the hosts' (the test harness's) are skipped too.
        tally.take(0, "running 1 test").unwrap();
    }

    #[test]
    fn the_last_host_that_has_joined_is_spared() {
        let args: Args = common::parse_flags(&["--hosts", "3"]).unwrap();
        let mut tally = Tally::new(&args);
        assert_eq!(tally.may_kill(), [0, 1, 2], "none has joined yet");
        tally.take(1, "joined host=1 start=1").unwrap();
        assert_eq!(tally.may_kill(), [0, 2]);
        tally.take(2, "joined host=2 start=2").unwrap();
        assert_eq!(tally.may_kill(), [0, 1, 2]);
        assert_eq!(tally.restart(2), (2, 3));
        assert_eq!(tally.may_kill(), [0, 2], "host 2 joins again, as start 3");
        tally.take(2, "joined host=2 start=3").unwrap();
        assert_eq!(tally.may_kill(), [0, 1, 2]);
    }

    /// Where a test asks this test binary, started again, to be a parent that gets a
    /// hangup ([`hangup_process`]).
    const HANGUP: &str = "MEGALON_KV_CLUSTER_HANGUP";

    /// A parent whose terminal closes (SIGHUP, an ssh session that drops) is interrupted
    /// as by Ctrl-C: its waits fail and the pod file is removed. SIGHUP was not watched,
    /// so it killed the parent on the spot and left the pod file (132 MiB by default) in
    /// /dev/shm, which the docs say goes "however the run ends" but for SIGKILL.
    #[test]
    fn a_hangup_interrupts_the_parent_as_ctrl_c_does() {
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::hangup_process", "--nocapture"])
            .env(HANGUP, "1")
            .status()
            .unwrap();
        assert_eq!(
            (status.code(), status.signal()),
            (Some(0), None),
            "the parent got SIGHUP: {status}"
        );
    }

    /// The parent of [`a_hangup_interrupts_the_parent_as_ctrl_c_does`]: watches the
    /// signals as `main` does, gets a SIGHUP, exits 0 if it was told (nothing in a normal
    /// test run).
    #[test]
    fn hangup_process() {
        if std::env::var(HANGUP).is_err() {
            return;
        }
        let interrupted = interrupted_by_signals().unwrap();
        signal_hook::low_level::raise(signal_hook::consts::SIGHUP).unwrap();
        std::process::exit(if interrupted.load(Ordering::Relaxed) {
            0
        } else {
            3
        });
    }

    /// A wait limit of 0 s fails the first wait on another host ("no combiner served the
    /// request within 0 ms"): a run of it fails after starting every host, naming
    /// nothing the user set. Refused by name, before any pod file exists.
    #[test]
    fn a_wait_of_zero_seconds_is_refused_by_name() {
        let args: Args = common::parse_flags(&["--wait-seconds", "0"]).unwrap();
        assert_eq!(
            args.check().unwrap_err(),
            "--wait-seconds 0: at least 1 is needed (every wait on another host would fail at once)"
        );
    }

    #[test]
    fn a_child_s_failure_is_one_line_with_its_own_error() {
        let exited = |stderr: &str| {
            one_line(ChildError::Exited {
                name: "host 1".into(),
                status: ExitStatus::from_raw(1 << 8),
                stderr: stderr.into(),
            })
            .to_string()
        };
        assert_eq!(
            exited("error: the pod file is from another version\n"),
            "host 1 exited with exit status: 1: the pod file is from another version"
        );
        assert_eq!(
            exited("thread 'main' panicked at kv_cluster.rs:1:1:\nboom\nnote: run with RUST_BACKTRACE=1\n"),
            "host 1 exited with exit status: 1: thread 'main' panicked at kv_cluster.rs:1:1: / boom"
        );
        assert_eq!(exited(""), "host 1 exited with exit status: 1");
    }
}
