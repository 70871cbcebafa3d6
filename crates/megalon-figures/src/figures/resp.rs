//! megalon-server beside redis-server, both judged by `redis-benchmark` (issue 18): the
//! same client, the same commands (`-t set,get,incr,mset -c 50 -P 16 -d 1024 -r
//! 100000`), over Unix sockets. megalon-server runs 1, 2 and 3 hosts, one process each
//! over a pod file in `/dev/shm`, the 50 clients split over the hosts (one
//! redis-benchmark per host, run together; the rate is all their requests over the
//! slowest one's time); Redis runs as the peers figure starts it (no persistence, no
//! TCP). Without redis-benchmark the row says how to install it; without redis-server
//! only megalon-server's rates are written.
//!
//! The server binary is built (`cargo build -p megalon-server`, in this binary's
//! profile) beside this one before the runs.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use megalon_bench::runner::{csv_field, ratio, Harness};

use super::draw;
use crate::plot::{self, Chart, Series};

/// redis-benchmark's tests, as it names them in its CSV.
const TESTS: [(&str, &str); 4] = [
    ("set", "SET"),
    ("get", "GET"),
    ("incr", "INCR"),
    ("mset", "MSET (10 keys)"),
];
/// Clients in all, split over the hosts.
const CLIENTS: usize = 50;
/// Requests each client pipelines.
const PIPELINE: usize = 16;
/// Value bytes.
const VALUE_BYTES: usize = 1024;
/// Keys drawn from.
const KEYSPACE: usize = 100_000;
/// megalon-server's hosts, one process each.
const HOSTS: [usize; 3] = [1, 2, 3];
/// Requests per second of run asked for (at least [`MIN_REQUESTS`]).
const REQUESTS_PER_SECOND_OF_RUN: f64 = 100_000.0;
const MIN_REQUESTS: usize = 20_000;
/// The longest a server may take to answer on its socket.
const START_WAIT: Duration = Duration::from_secs(30);
/// How to get the tools.
const HOW_TO_INSTALL: &str = "apt-get install redis-tools redis-server";

/// One configuration's rates: requests per second per test (0 if it failed).
struct Rates {
    name: String,
    per_test: Vec<f64>,
}

pub fn run(h: &mut Harness) -> Result<(), String> {
    if h.counting() {
        h.count_runs(HOSTS.len() as u64 + 1);
        return Ok(());
    }
    if !runs("redis-benchmark") {
        h.row(
            "resp",
            "megalon-server / Redis (redis-benchmark)",
            "n/a".into(),
            "not in the paper",
            format!("redis-benchmark is not installed: {HOW_TO_INSTALL}"),
        );
        return Ok(());
    }
    let server = build_server()?;
    let requests = ((h.settings().seconds * REQUESTS_PER_SECOND_OF_RUN) as usize).max(MIN_REQUESTS);
    let dir = scratch_dir()?;
    let mut rated = Vec::new();
    let mut notes = Vec::new();
    for hosts in HOSTS {
        h.bar()
            .set_message(format!("resp: megalon-server, {hosts} host(s)"));
        let outcome = megalon(&server, &dir, hosts, requests);
        h.bar().inc(1);
        rated.push(Rates {
            name: format!(
                "megalon-server, {hosts} host{}",
                if hosts > 1 { "s" } else { "" }
            ),
            per_test: outcome.unwrap_or_else(|e| {
                notes.push(format!("megalon-server with {hosts} hosts failed: {e}"));
                vec![0.0; TESTS.len()]
            }),
        });
    }
    h.bar().set_message("resp: redis-server");
    let redis = if runs("redis-server") {
        redis(&dir, requests).map_err(|e| notes.push(format!("redis-server failed: {e}")))
    } else {
        notes.push(format!("redis-server is not installed: {HOW_TO_INSTALL}"));
        Err(())
    };
    h.bar().inc(1);
    if let Ok(per_test) = &redis {
        rated.push(Rates {
            name: "Redis".into(),
            per_test: per_test.clone(),
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    let command = format!(
        "redis-benchmark -t set,get,incr,mset -c {CLIENTS} -P {PIPELINE} -n {requests} -d {VALUE_BYTES} -r {KEYSPACE} --csv"
    );
    h.bar().suspend(|| {
        println!("resp: {command}");
        for r in &rated {
            let line: Vec<String> = (TESTS.iter().zip(&r.per_test))
                .map(|((_, name), rps)| format!("{name} {}", plot::short(*rps)))
                .collect();
            println!("  {:<26} {}", r.name, line.join(", "));
        }
        for note in &notes {
            println!("  {note}");
        }
    });
    h.write("resp.csv", &csv(&rated))?;
    chart(h, &rated)?;
    rows(h, &rated, redis.ok().as_deref(), &command, &notes);
    Ok(())
}

/// Whether `program --version` runs.
fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds megalon-server in this binary's profile and returns its path (beside this
/// binary).
fn build_server() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let dir = me.parent().ok_or("this binary has no directory")?;
    let release = dir.ends_with("release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "-p", "megalon-server"]);
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| format!("cargo build -p megalon-server: {e}"))?;
    let server = dir.join("megalon-server");
    if !status.success() || !server.exists() {
        return Err(format!(
            "cargo build -p megalon-server exited with {status}; no {}",
            server.display()
        ));
    }
    Ok(server)
}

/// A new directory for pod files and sockets: in `/dev/shm` where there is one.
fn scratch_dir() -> Result<PathBuf, String> {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("megalon-resp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// A server process, killed and reaped if still running when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `command` (its output to `log`) and waits until `socket` answers.
fn start(mut command: Command, socket: &Path, log: &Path) -> Result<Process, String> {
    let output = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = command
        .stdin(Stdio::null())
        .stdout(output.try_clone().map_err(|e| e.to_string())?)
        .stderr(output)
        .spawn()
        .map_err(|e| format!("starting {command:?}: {e}"))?;
    let mut process = Process(child);
    let deadline = Instant::now() + START_WAIT;
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Ok(Some(status)) = process.0.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("it exited with {status}: {}", log.trim()));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not answer within {START_WAIT:?}",
                socket.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(process)
}

/// megalon-server with `hosts` processes over one pod file: each test run on every
/// host at once.
fn megalon(server: &Path, dir: &Path, hosts: usize, requests: usize) -> Result<Vec<f64>, String> {
    let pod = dir.join(format!("pod-{hosts}"));
    let _ = std::fs::remove_file(&pod);
    // Every key of the keyspace, twice (keys and counters), in slots that hold a value.
    let slot_bytes = (VALUE_BYTES + 4).div_ceil(64) * 64;
    let lnr_mib = (2 * KEYSPACE * slot_bytes * 2).div_ceil(1 << 20);
    let mut processes = Vec::new();
    let mut sockets = Vec::new();
    for host in 0..hosts {
        let socket = dir.join(format!("megalon-{hosts}-{host}.sock"));
        let mut command = Command::new(server);
        command
            .arg("--pod")
            .arg(&pod)
            .args(["--host", &host.to_string(), "--port", "0"])
            .arg("--socket")
            .arg(&socket)
            .args(["--slot-bytes", &slot_bytes.to_string()])
            .args(["--lnr-mib", &lnr_mib.to_string()]);
        let log = dir.join(format!("megalon-{hosts}-{host}.log"));
        processes.push(start(command, &socket, &log)?);
        sockets.push(socket);
    }
    let rates = TESTS
        .iter()
        .map(|(test, name)| benchmark(&sockets, test, name, requests))
        .collect::<Result<Vec<f64>, String>>();
    for socket in &sockets {
        shut_down(socket);
    }
    drop(processes);
    let _ = std::fs::remove_file(&pod);
    rates
}

/// redis-server on a Unix socket, no persistence, no TCP.
fn redis(dir: &Path, requests: usize) -> Result<Vec<f64>, String> {
    let socket = dir.join("redis.sock");
    let mut command = Command::new("redis-server");
    command
        .args(["--save", "", "--appendonly", "no", "--port", "0"])
        .arg("--unixsocket")
        .arg(&socket)
        .args(["--unixsocketperm", "700", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir);
    let process = start(command, &socket, &dir.join("redis.log"))?;
    let rates = TESTS
        .iter()
        .map(|(test, name)| benchmark(std::slice::from_ref(&socket), test, name, requests))
        .collect();
    shut_down(&socket);
    drop(process);
    rates
}

/// Asks the server on `socket` to stop (both understand `SHUTDOWN NOSAVE`).
fn shut_down(socket: &Path) {
    let _ = Command::new("redis-cli")
        .arg("-s")
        .arg(socket)
        .args(["SHUTDOWN", "NOSAVE"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs redis-benchmark's `test` on every socket at once, the clients and requests
/// split over them; returns all their requests over the slowest one's seconds.
fn benchmark(sockets: &[PathBuf], test: &str, name: &str, requests: usize) -> Result<f64, String> {
    // Exactly CLIENTS clients and `requests` requests in all, as Redis gets them.
    let clients = split(CLIENTS, sockets.len());
    let per_socket = split(requests, sockets.len());
    let children = sockets
        .iter()
        .zip(clients.iter().zip(&per_socket))
        .map(|(socket, (clients, per_socket))| {
            Command::new("redis-benchmark")
                .arg("-s")
                .arg(socket)
                .args(["-t", test, "--csv"])
                .args(["-c", &clients.to_string(), "-P", &PIPELINE.to_string()])
                .args([
                    "-n",
                    &per_socket.to_string(),
                    "-d",
                    &VALUE_BYTES.to_string(),
                ])
                .args(["-r", &KEYSPACE.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("redis-benchmark: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut slowest_seconds: f64 = 0.0;
    for (child, per_socket) in children.into_iter().zip(&per_socket) {
        let output = child
            .wait_with_output()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() || stderr.to_lowercase().contains("error") {
            return Err(format!(
                "redis-benchmark -t {test} exited with {}: {}",
                output.status,
                stderr.trim()
            ));
        }
        let rps = csv_rate(&stdout, name)
            .ok_or_else(|| format!("redis-benchmark -t {test} printed no {name} rate: {stdout}"))?;
        slowest_seconds = slowest_seconds.max(*per_socket as f64 / rps);
    }
    Ok(per_socket.iter().sum::<usize>() as f64 / slowest_seconds)
}

/// `total` split over `parts` as evenly as whole numbers go (the first ones one more),
/// summing to `total` (at least one each).
fn split(total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| (total / parts + usize::from(i < total % parts)).max(1))
        .collect()
}

/// The requests per second of test `name` in redis-benchmark's CSV
/// (`"SET","105708.25",...`).
fn csv_rate(csv: &str, name: &str) -> Option<f64> {
    csv.lines().find_map(|line| {
        let mut fields = line.split(',').map(|f| f.trim_matches('"'));
        (fields.next()? == name).then_some(())?;
        fields.next()?.parse().ok().filter(|r: &f64| *r > 0.0)
    })
}

fn csv(rated: &[Rates]) -> String {
    let mut csv = String::from("server,test,requests_per_second\n");
    for r in rated {
        for ((_, test), rps) in TESTS.iter().zip(&r.per_test) {
            let _ = writeln!(csv, "{},{},{rps:.0}", csv_field(&r.name), csv_field(test));
        }
    }
    csv
}

/// Bars of requests per second per command, a series per server.
fn chart(h: &Harness, rated: &[Rates]) -> Result<(), String> {
    let categories: Vec<String> = TESTS.iter().map(|(_, name)| name.to_string()).collect();
    let series: Vec<Series> = rated
        .iter()
        .map(|r| Series::bars(r.name.clone(), r.per_test.iter().copied()))
        .collect();
    let title = format!(
        "redis-benchmark: megalon-server ({}-{} hosts) and Redis (-c {CLIENTS} -P {PIPELINE} \
         -d {VALUE_BYTES})",
        HOSTS[0],
        HOSTS[HOSTS.len() - 1]
    );
    let chart = Chart::bars(&title, "command", "requests per second", &categories);
    draw(h, "resp.svg", &chart, &series)
}

/// A row per megalon-server configuration: its rate over Redis's per command.
fn rows(h: &mut Harness, rated: &[Rates], redis: Option<&[f64]>, command: &str, notes: &[String]) {
    for r in rated.iter().filter(|r| r.name != "Redis") {
        let ours = match redis {
            Some(redis) => (TESTS.iter().zip(&r.per_test).zip(redis))
                .map(|(((_, name), m), r)| format!("{} {}", short_name(name), ratio(*m, *r)))
                .collect::<Vec<_>>()
                .join(", "),
            None => "n/a".into(),
        };
        let mut explain = (TESTS.iter().zip(&r.per_test).enumerate())
            .map(|(i, ((_, name), m))| {
                let theirs =
                    redis.map_or(String::new(), |r| format!(" (Redis {})", plot::short(r[i])));
                format!("{} {}/s{theirs}", short_name(name), plot::short(*m))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(explain, "; {command}");
        for note in notes {
            let _ = write!(explain, "; {note}");
        }
        h.row(
            "resp",
            format!("{} / Redis", r.name),
            ours,
            "not in the paper",
            explain,
        );
    }
}

fn short_name(test: &str) -> &str {
    test.split(' ').next().unwrap_or(test)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// megalon-server's hosts share the clients and requests Redis gets alone: the
    /// same 50 clients in all (17 per host of 3 made 51), the same requests.
    #[test]
    fn every_host_count_gets_the_clients_and_requests_redis_gets() {
        for hosts in HOSTS {
            let clients = split(CLIENTS, hosts);
            assert_eq!(
                clients.iter().sum::<usize>(),
                CLIENTS,
                "{hosts} hosts: {clients:?}"
            );
            assert_eq!(
                split(MIN_REQUESTS, hosts).iter().sum::<usize>(),
                MIN_REQUESTS
            );
        }
        assert_eq!(split(50, 3), [17, 17, 16]);
    }

    #[test]
    fn rates_are_read_from_redis_benchmarks_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"105708.25\",\"5.1\"\n\"MSET (10 keys)\",\"66511.48\",\"8.0\"\n";
        assert_eq!(csv_rate(csv, "SET"), Some(105708.25));
        assert_eq!(csv_rate(csv, "MSET (10 keys)"), Some(66511.48));
        assert_eq!(csv_rate(csv, "GET"), None);
    }
}
