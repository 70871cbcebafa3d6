//! What every peer shares: a worker's part ([`Worker`]: load its share of the keys, run a
//! timed phase, the read-back check), the run on threads of this process
//! ([`on_threads`]) or on child processes ([`on_processes`]), and the child's side of
//! that conversation ([`serve`]).
//!
//! The parent and its children talk in lines. A child loads its share as soon as it
//! starts and says `megalon-peers loaded ...`; the parent waits until every child has
//! (so no phase starts while another worker still loads), then sends `run <ratio>
//! <seconds>` to all and waits for every `megalon-peers ran ...`; then `write-check` and
//! `read-check` likewise; then it closes their stdin, and each exits.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use megalon_bench::mix::{self, Draw, Draws, Mix};
use megalon_workload::processes::Children;

use crate::{ChildFault, PeerError, PeerSpec, Phase, Rates, CHILD_ROLE_ENV};

/// Most workers of one peer: a put's stamp keeps 16 bits of its worker's number.
pub(crate) const MAX_WORKERS: usize = 0xffff;

/// Keys written with known bytes and read back by every worker after the phases.
const CHECK_KEYS: u64 = 8;

/// The byte of every loaded value, as [`megalon_bench::mix::load`] writes.
pub(crate) const LOAD_BYTE: u8 = 0x5a;

/// The workload parameters of a child, in its environment.
const WORK_ENV: &str = "MEGALON_PEERS_WORK";
/// The path a child opens (pod file, LMDB directory), in its environment.
const PATH_ENV: &str = "MEGALON_PEERS_PATH";

/// What starts every line a child answers with.
const ANSWER: &str = "megalon-peers";

/// How often a waiting thread looks at the clock and the workers.
const POLL: Duration = Duration::from_millis(5);

/// The workload, as a child needs it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Work {
    /// This worker's number (a child's), `0..workers`.
    pub worker: usize,
    pub workers: usize,
    pub keys: u64,
    pub value_bytes: usize,
    pub skew: f64,
    pub seed: u64,
    pub wait_seconds: f64,
    pub fault: Option<ChildFault>,
}

impl Work {
    pub fn new(spec: &PeerSpec, worker: usize) -> Self {
        Work {
            worker,
            workers: spec.workers,
            keys: spec.keys,
            value_bytes: spec.value_bytes,
            skew: spec.skew,
            seed: spec.seed,
            wait_seconds: spec.wait_seconds,
            fault: spec.child_fault,
        }
    }

    /// The mix of a phase with `write_ratio` puts.
    pub fn mix(&self, write_ratio: f64) -> Mix {
        Mix {
            keys: self.keys,
            value_bytes: self.value_bytes,
            write_ratio,
            skew: self.skew,
            seed: self.seed,
        }
    }

    pub fn wait(&self) -> Duration {
        Duration::from_secs_f64(self.wait_seconds)
    }

    fn encode(&self) -> String {
        let fault = match self.fault {
            None => "none",
            Some(ChildFault::Exit) => "exit",
            Some(ChildFault::Hang) => "hang",
        };
        format!(
            "worker={} workers={} keys={} value_bytes={} skew={} seed={} wait_seconds={} fault={fault}",
            self.worker,
            self.workers,
            self.keys,
            self.value_bytes,
            self.skew,
            self.seed,
            self.wait_seconds
        )
    }

    fn decode(text: &str) -> Result<Self, String> {
        fn get<T: std::str::FromStr>(text: &str, name: &str) -> Result<T, String> {
            field(text, name)
                .ok_or_else(|| format!("no {name}= in {WORK_ENV}"))?
                .parse()
                .map_err(|_| format!("{name}= in {WORK_ENV} does not parse"))
        }
        let fault = match field(text, "fault") {
            Some("exit") => Some(ChildFault::Exit),
            Some("hang") => Some(ChildFault::Hang),
            _ => None,
        };
        Ok(Work {
            worker: get(text, "worker")?,
            workers: get(text, "workers")?,
            keys: get(text, "keys")?,
            value_bytes: get(text, "value_bytes")?,
            skew: get(text, "skew")?,
            seed: get(text, "seed")?,
            wait_seconds: get(text, "wait_seconds")?,
            fault,
        })
    }
}

/// The value of `name=` in a line of `name=value` words.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

/// What a worker did in one phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub gets: u64,
    pub puts: u64,
    pub gets_absent: u64,
    /// The worker's own timing of its phase.
    pub seconds: f64,
}

/// One worker of a peer: a client of the store, used by one thread at a time.
pub(crate) trait Worker {
    /// Reads `key` into `out`; false if it is absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, PeerError>;

    /// Writes `value` under `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), PeerError>;

    /// Inserts keys `first, first + step, ...` below `mix.keys`, each with a value of
    /// [`LOAD_BYTE`]s; answers how many. By default a put each.
    fn load(&mut self, mix: &Mix, first: u64, step: u64) -> Result<u64, PeerError> {
        let value = vec![LOAD_BYTE; mix.value_bytes];
        let mut loaded = 0;
        for index in (first..mix.keys).step_by(step.max(1) as usize) {
            self.put(&mix::key(index), &value)?;
            loaded += 1;
        }
        Ok(loaded)
    }

    /// Runs `mix` as worker `worker` until `stop` is set. By default the mix's own draws
    /// ([`Draws`]) through [`Worker::get`] and [`Worker::put`], one at a time.
    fn run(&mut self, mix: &Mix, worker: u64, stop: &AtomicBool) -> Result<Counts, PeerError> {
        let began = Instant::now();
        let mut draws = Draws::new(mix, worker);
        let mut value = vec![LOAD_BYTE; mix.value_bytes];
        let mut out = Vec::with_capacity(mix.value_bytes);
        let mut key = Vec::with_capacity(mix::KEY_BYTES);
        let mut counts = Counts::default();
        while !stop.load(Ordering::Relaxed) {
            let draw = draws.next(&mut value);
            // Into one buffer, as the KV store's own workers do: no allocation per draw.
            mix::write_key(draw.index(), mix::KEY_BYTES, &mut key);
            match draw {
                Draw::Put { .. } => {
                    self.put(&key, &value)?;
                    counts.puts += 1;
                }
                Draw::Get { index } => {
                    if self.get(&key, &mut out)? {
                        if out.len() != mix.value_bytes {
                            return Err(PeerError::ReadBack {
                                worker: worker as usize,
                                key_index: index,
                                detail: format!(
                                    "{} bytes, expected {}",
                                    out.len(),
                                    mix.value_bytes
                                ),
                            });
                        }
                    } else {
                        counts.gets_absent += 1;
                    }
                    counts.gets += 1;
                }
            }
        }
        counts.seconds = began.elapsed().as_secs_f64();
        Ok(counts)
    }
}

/// The keys of the read-back check.
fn check_indexes(keys: u64) -> Vec<u64> {
    let count = CHECK_KEYS.min(keys);
    let mut indexes: Vec<u64> = (0..count).map(|i| i * keys / count).collect();
    indexes.dedup();
    indexes
}

/// The bytes the check writes under key `index`: different for every key and byte, and
/// unlike anything the phases write.
pub(crate) fn check_value(index: u64, value_bytes: usize) -> Vec<u8> {
    let mixed = (index + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..value_bytes)
        .map(|byte| (mixed >> (8 * (byte % 8))) as u8 ^ (byte / 8) as u8 ^ 0xa5)
        .collect()
}

/// Worker `work.worker` writes its share of the check keys.
fn write_checks<W: Worker + ?Sized>(worker: &mut W, work: &Work) -> Result<u64, PeerError> {
    let mut written = 0;
    for (i, index) in check_indexes(work.keys).into_iter().enumerate() {
        if i % work.workers == work.worker {
            worker.put(&mix::key(index), &check_value(index, work.value_bytes))?;
            written += 1;
        }
    }
    Ok(written)
}

/// Worker `work.worker` reads every check key and compares it with what was written.
fn read_checks<W: Worker + ?Sized>(worker: &mut W, work: &Work) -> Result<u64, PeerError> {
    let mut out = Vec::new();
    let indexes = check_indexes(work.keys);
    for &index in &indexes {
        let wrong = |detail: String| PeerError::ReadBack {
            worker: work.worker,
            key_index: index,
            detail,
        };
        if !worker.get(&mix::key(index), &mut out)? {
            return Err(wrong("absent".into()));
        }
        let expected = check_value(index, work.value_bytes);
        if out.len() != expected.len() {
            return Err(wrong(format!(
                "{} bytes, expected {}",
                out.len(),
                expected.len()
            )));
        }
        if let Some(byte) = (0..out.len()).find(|&b| out[b] != expected[b]) {
            return Err(wrong(format!(
                "byte {byte} is {:#04x}, expected {:#04x}",
                out[byte], expected[byte]
            )));
        }
    }
    Ok(indexes.len() as u64)
}

/// Sums the workers' counts of one phase.
fn phase(write_ratio: f64, counts: &[Counts]) -> Result<Phase, PeerError> {
    if let Some((worker, c)) = counts.iter().enumerate().find(|(_, c)| c.gets_absent > 0) {
        return Err(PeerError::Absent {
            worker,
            absent: c.gets_absent,
        });
    }
    let per_second = |n: u64, c: &Counts| n as f64 / c.seconds.max(f64::MIN_POSITIVE);
    Ok(Phase {
        write_ratio,
        gets: counts.iter().map(|c| c.gets).sum(),
        puts: counts.iter().map(|c| c.puts).sum(),
        seconds: counts.iter().map(|c| c.seconds).fold(0.0, f64::max),
        get_ops_per_second: counts.iter().map(|c| per_second(c.gets, c)).sum(),
        put_ops_per_second: counts.iter().map(|c| per_second(c.puts, c)).sum(),
    })
}

fn panicked(worker: usize, payload: Box<dyn std::any::Any + Send>) -> PeerError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    PeerError::Panicked { worker, message }
}

/// Runs `spec` with one thread of this process per worker.
pub(crate) fn on_threads<W: Worker + Send>(
    spec: &PeerSpec,
    workers: &mut [W],
) -> Result<Rates, PeerError> {
    let count = workers.len();
    let work = Work::new(spec, 0);

    // Load: each worker its share.
    let began = Instant::now();
    let mix = work.mix(0.0);
    let loaded = thread::scope(|scope| {
        let loaders: Vec<_> = workers
            .iter_mut()
            .enumerate()
            .map(|(i, w)| {
                let mix = &mix;
                scope.spawn(move || w.load(mix, i as u64, count as u64))
            })
            .collect();
        let mut loaded = 0;
        for (i, loader) in loaders.into_iter().enumerate() {
            loaded += loader.join().map_err(|p| panicked(i, p))??;
        }
        Ok::<_, PeerError>(loaded)
    })?;
    let load_ops_per_second = loaded as f64 / began.elapsed().as_secs_f64();

    // The timed phases: all workers at once until the phase's seconds are up.
    let mut phases = Vec::new();
    for &write_ratio in &spec.write_ratios {
        let mix = work.mix(write_ratio);
        let stop = AtomicBool::new(false);
        let duration = Duration::from_secs_f64(spec.phase_seconds);
        let counts = thread::scope(|scope| {
            let began = Instant::now();
            let runners: Vec<_> = workers
                .iter_mut()
                .enumerate()
                .map(|(i, w)| {
                    let (mix, stop) = (&mix, &stop);
                    scope.spawn(move || w.run(mix, i as u64, stop))
                })
                .collect();
            while began.elapsed() < duration && runners.iter().all(|r| !r.is_finished()) {
                thread::sleep(POLL.min(duration.saturating_sub(began.elapsed())));
            }
            stop.store(true, Ordering::Relaxed);
            runners
                .into_iter()
                .enumerate()
                .map(|(i, r)| r.join().map_err(|p| panicked(i, p))?)
                .collect::<Result<Vec<_>, _>>()
        })?;
        phases.push(phase(write_ratio, &counts)?);
    }

    // The read-back check: each worker writes its keys, then every worker reads them all.
    for (i, w) in workers.iter_mut().enumerate() {
        write_checks(w, &Work::new(spec, i))?;
    }
    let mut checked = 0;
    for (i, w) in workers.iter_mut().enumerate() {
        checked = read_checks(w, &Work::new(spec, i))?;
    }
    Ok(Rates::from_phases(phases, load_ops_per_second, checked))
}

/// Runs `spec` with one child process per worker, each started as `role` on `path`.
pub(crate) fn on_processes(spec: &PeerSpec, role: &str, path: &Path) -> Result<Rates, PeerError> {
    let exe = std::env::current_exe()?;
    let commands = (0..spec.workers).map(|worker| {
        let mut command = Command::new(&exe);
        command
            .env(CHILD_ROLE_ENV, role)
            .env(WORK_ENV, Work::new(spec, worker).encode())
            .env(PATH_ENV, path);
        (format!("{role} child {worker}"), command)
    });
    let mut children = Children::spawn(commands)?;
    let wait = Duration::from_secs_f64(spec.wait_seconds);

    // Each child opens the store and loads its share before it answers.
    let answers = children.line_from_each(Instant::now() + wait)?;
    let mut loaded = 0;
    let mut load_seconds: f64 = 0.0;
    for (child, line) in answers.iter().enumerate() {
        loaded += answer(&children, child, line, "loaded", "keys")? as u64;
        load_seconds = load_seconds.max(answer(&children, child, line, "loaded", "seconds")?);
    }

    let mut phases = Vec::new();
    for &write_ratio in &spec.write_ratios {
        let deadline = Instant::now() + Duration::from_secs_f64(spec.phase_seconds) + wait;
        children.send_all(
            &format!("run {write_ratio} {}", spec.phase_seconds),
            deadline,
        )?;
        let answers = children.line_from_each(deadline)?;
        let mut counts = Vec::new();
        for (child, line) in answers.iter().enumerate() {
            let get = |name| answer(&children, child, line, "ran", name);
            counts.push(Counts {
                gets: get("gets")? as u64,
                puts: get("puts")? as u64,
                gets_absent: get("absent")? as u64,
                seconds: get("seconds")?,
            });
        }
        phases.push(phase(write_ratio, &counts)?);
    }

    let mut checked = 0.0;
    for step in ["write-check", "read-check"] {
        let deadline = Instant::now() + wait;
        children.send_all(step, deadline)?;
        let answers = children.line_from_each(deadline)?;
        for (child, line) in answers.iter().enumerate() {
            checked = answer(&children, child, line, "checked", "keys")?;
        }
    }
    children.close_stdin();
    children.wait_all(Instant::now() + wait)?;
    Ok(Rates::from_phases(
        phases,
        loaded as f64 / load_seconds.max(f64::MIN_POSITIVE),
        checked as u64,
    ))
}

/// The number `name=` of a child's answer `megalon-peers <what> ...`.
fn answer(
    children: &Children,
    child: usize,
    line: &str,
    what: &'static str,
    name: &str,
) -> Result<f64, PeerError> {
    let protocol = || PeerError::Protocol {
        name: children.name(child).to_owned(),
        line: line.to_owned(),
        expected: what,
    };
    let mut words = line.split_whitespace();
    if words.next() != Some(ANSWER) || words.next() != Some(what) {
        return Err(protocol());
    }
    field(line, name)
        .and_then(|v| v.parse().ok())
        .ok_or_else(protocol)
}

/// What a child was started to do: its work and the path it opens, from its
/// environment.
pub(crate) fn child_work() -> Result<(Work, PathBuf), PeerError> {
    let work = std::env::var(WORK_ENV)
        .map_err(|_| PeerError::Spec(format!("a child needs {WORK_ENV}")))
        .and_then(|text| Work::decode(&text).map_err(PeerError::Spec))?;
    let path = std::env::var_os(PATH_ENV)
        .ok_or_else(|| PeerError::Spec(format!("a child needs {PATH_ENV}")))?;
    Ok((work, PathBuf::from(path)))
}

/// The child's side: load, answer, then do what the parent's lines say until stdin ends.
pub(crate) fn serve<W: Worker>(work: &Work, worker: &mut W) -> Result<(), PeerError> {
    let mut stdout = std::io::stdout().lock();
    let began = Instant::now();
    let loaded = worker.load(&work.mix(0.0), work.worker as u64, work.workers as u64)?;
    writeln!(
        stdout,
        "{ANSWER} loaded keys={loaded} seconds={}",
        began.elapsed().as_secs_f64()
    )?;
    stdout.flush()?;
    let mut phases_run = 0;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["run", ratio, seconds] => {
                let bad = || PeerError::Spec(format!("a run line that does not parse: {line:?}"));
                let write_ratio: f64 = ratio.parse().map_err(|_| bad())?;
                let seconds: f64 = seconds.parse().map_err(|_| bad())?;
                if phases_run == 0 && work.worker + 1 == work.workers {
                    injected(work.fault);
                }
                let counts = timed(Duration::from_secs_f64(seconds), |stop| {
                    worker.run(&work.mix(write_ratio), work.worker as u64, stop)
                })?;
                phases_run += 1;
                writeln!(
                    stdout,
                    "{ANSWER} ran gets={} puts={} absent={} seconds={}",
                    counts.gets, counts.puts, counts.gets_absent, counts.seconds
                )?;
            }
            ["write-check"] => {
                let written = write_checks(worker, work)?;
                writeln!(stdout, "{ANSWER} checked keys={written}")?;
            }
            ["read-check"] => {
                let read = read_checks(worker, work)?;
                writeln!(stdout, "{ANSWER} checked keys={read}")?;
            }
            _ => {
                return Err(PeerError::Spec(format!(
                    "the parent sent a line no child understands: {line:?}"
                )))
            }
        }
        stdout.flush()?;
    }
    Ok(())
}

/// Fails as the spec's [`ChildFault`] says (for tests of the parent).
fn injected(fault: Option<ChildFault>) {
    match fault {
        None => {}
        Some(ChildFault::Exit) => {
            eprintln!("exiting on purpose (ChildFault::Exit)");
            std::process::exit(3);
        }
        Some(ChildFault::Hang) => {
            eprintln!("hanging on purpose (ChildFault::Hang)");
            loop {
                thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}

/// Runs `f` on this thread with a flag that a timer sets after `duration` (or once `f`
/// has returned, so the timer never outlives it).
fn timed<T>(duration: Duration, f: impl FnOnce(&AtomicBool) -> T) -> T {
    let stop = AtomicBool::new(false);
    let returned = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            let began = Instant::now();
            while began.elapsed() < duration && !returned.load(Ordering::Relaxed) {
                thread::sleep(POLL.min(duration.saturating_sub(began.elapsed())));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let result = f(&stop);
        returned.store(true, Ordering::Relaxed);
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_goes_through_the_environment_unchanged() {
        let spec = PeerSpec {
            skew: 0.7,
            wait_seconds: 2.5,
            child_fault: Some(ChildFault::Hang),
            ..PeerSpec::default()
        };
        let work = Work::new(&spec, 1);
        assert_eq!(Work::decode(&work.encode()), Ok(work));
    }

    #[test]
    fn check_keys_are_distinct_and_their_values_differ() {
        assert_eq!(check_indexes(3), [0, 1, 2]);
        assert_eq!(check_indexes(100), [0, 12, 25, 37, 50, 62, 75, 87]);
        assert_ne!(check_value(0, 64), check_value(1, 64));
        assert_ne!(check_value(0, 64), vec![LOAD_BYTE; 64]);
    }

    /// A store of one map, for the default worker methods.
    struct Map(std::collections::HashMap<Vec<u8>, Vec<u8>>);

    impl Worker for Map {
        fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, PeerError> {
            out.clear();
            match self.0.get(key) {
                Some(v) => {
                    out.extend_from_slice(v);
                    Ok(true)
                }
                None => Ok(false),
            }
        }

        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), PeerError> {
            self.0.insert(key.to_vec(), value.to_vec());
            Ok(())
        }
    }

    #[test]
    fn the_default_worker_loads_runs_and_checks() {
        let spec = PeerSpec {
            workers: 1,
            keys: 50,
            value_bytes: 16,
            ..PeerSpec::default()
        };
        let work = Work::new(&spec, 0);
        let mut map = Map(Default::default());
        assert_eq!(map.load(&work.mix(0.0), 0, 1).unwrap(), 50);
        let counts = timed(Duration::from_millis(20), |stop| {
            map.run(&work.mix(0.5), 0, stop)
        })
        .unwrap();
        assert!(counts.gets > 0 && counts.puts > 0 && counts.gets_absent == 0);
        assert_eq!(write_checks(&mut map, &work).unwrap(), 8);
        assert_eq!(read_checks(&mut map, &work).unwrap(), 8);
        map.0.get_mut(&mix::key(12)).unwrap()[3] ^= 1;
        assert!(matches!(
            read_checks(&mut map, &work),
            Err(PeerError::ReadBack { key_index: 12, .. })
        ));
    }
}
