//! Adversarial clients and starts: a request that fills the input buffer to its last
//! byte, a pipeline sent whole before its replies are read, a command refused part-way
//! through its keys, two processes creating one pod file at once, `SHUTDOWN` with
//! options.

mod common;

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bulk, err, host_process, ok, run_to_exit, scratch_dir, Server};
use redis_protocol::resp2::types::OwnedFrame;

fn one_host(extra: &[&str]) -> Server {
    let dir = scratch_dir();
    let socket = dir.path().join("h{host}.sock");
    let socket_text = socket.display().to_string();
    let mut args = vec!["--hosts", "1", "--socket", &socket_text, "--lnr-mib", "16"];
    args.extend(extra);
    Server::start(&args, vec![dir.path().join("h0.sock")]).owning(dir)
}

/// A request of exactly the longest length (16 MiB), then the next argument's length
/// line of 32 bytes whose LF has not arrived yet: the buffer (16 MiB + 32) is full, the
/// reader wants more, and `spare()` has no room. A read into an empty slice returns 0,
/// which the worker takes for the client closing (release), or the debug_assert in
/// `spare` panics the worker thread (debug): every connection of that worker is dropped,
/// its places in the host's count leak, and each later connection handed to it is closed.
#[test]
fn a_request_that_fills_the_buffer_exactly_keeps_its_connection_and_worker() {
    let server = one_host(&["--workers", "1"]);
    let mut bystander = server.client(0);
    assert_eq!(bystander.cmd("SET before yes"), ok());

    const MAX_REQUEST: usize = 16 << 20;
    let mut request = b"*65536\r\n".to_vec();
    let arg = vec![b'x'; 4000];
    let mut one = b"$4000\r\n".to_vec();
    one.extend_from_slice(&arg);
    one.extend_from_slice(b"\r\n");
    while request.len() + one.len() <= MAX_REQUEST - 3552 {
        request.extend_from_slice(&one);
    }
    let last = MAX_REQUEST - request.len() - 1 - 4 - 2 - 2;
    assert_eq!(last.to_string().len(), 4);
    request.extend_from_slice(format!("${last}\r\n").as_bytes());
    request.extend(std::iter::repeat_n(b'y', last));
    request.extend_from_slice(b"\r\n");
    assert_eq!(request.len(), MAX_REQUEST);
    // A length line of 32 bytes, its LF still to come.
    request.push(b'$');
    request.extend(std::iter::repeat_n(b'0', 30));
    request.push(b'\r');

    let mut c = server.client(0);
    c.send_raw(&request);
    std::thread::sleep(Duration::from_millis(1000));
    // The worker's other client is still served.
    bystander.send(&[b"GET", b"before"]);
    assert_eq!(
        bystander.try_recv(),
        Some(bulk(b"yes")),
        "the bystander lost its connection"
    );
    // The line is complete now: not a length (too many digits), so one protocol error.
    let _ = c.stream.write_all(b"\n");
    match c.try_recv() {
        Some(OwnedFrame::Error(text)) => assert!(text.starts_with("ERR Protocol error"), "{text}"),
        other => panic!("the connection ended with {other:?} instead of an error"),
    }
    // The worker still serves its other client, and new ones.
    assert_eq!(bystander.cmd("GET before"), bulk(b"yes"));
    assert_eq!(server.client(0).cmd("GET before"), bulk(b"yes"));
}

/// DEL with a key over the limit after keys that exist: the reply is an error (as if the
/// command were refused) but the keys before it were deleted. MSET checks every key
/// first for this reason ("a key or value over the limits sets nothing"); DEL deletes as
/// it goes (command.rs `del`).
/// A pipeline sent whole before any reply is read, as redis-py's `Pipeline.execute` and
/// Jedis's `Pipeline.sync` send one (one blocking write of every command, then the
/// replies): 20,000 GETs of a 4,000-byte value, 440 KB of requests and 80 MB of replies.
/// The server once stopped reading a connection whose replies the socket did not take:
/// its replies filled the socket toward the client, the client's requests the socket
/// toward the server, and each waited for the other for good. Redis answers it at once.
#[test]
fn a_pipeline_sent_whole_before_its_replies_are_read_is_answered() {
    let server = one_host(&["--workers", "1"]);
    let mut bystander = server.client(0);
    let value = vec![b'v'; 4000];
    assert_eq!(bystander.call(&[b"SET", b"big", &value]), ok());

    const GETS: usize = 20_000;
    let pipeline = common::Client::encode(&[b"GET", b"big"]).repeat(GETS);
    let reply_bytes = GETS * (format!("${}\r\n", value.len()).len() + value.len() + 2);
    let mut stream = UnixStream::connect(&server.sockets[0]).expect("connect");
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("a write timeout");
    let started = Instant::now();
    let written = stream.write_all(&pipeline);
    assert!(
        written.is_ok(),
        "the pipeline's {} bytes were not taken in {:?} ({written:?}): the server stopped \
         reading them while its replies waited",
        pipeline.len(),
        started.elapsed()
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    let (mut got, mut buf) = (0, vec![0; 1 << 20]);
    while got < reply_bytes {
        match stream.read(&mut buf) {
            Ok(0) => panic!("closed after {got} bytes of replies"),
            Ok(n) => got += n,
            Err(e) => panic!("after {got} bytes of replies: {e}"),
        }
    }
    assert_eq!(got, reply_bytes);
    // The worker's other connection is served as before.
    assert_eq!(bystander.cmd("GET big"), bulk(&value));
}

#[test]
fn a_refused_del_deletes_nothing() {
    let server = one_host(&["--slot-bytes", "256", "--max-key-bytes", "16"]);
    let mut c = server.client(0);
    assert_eq!(c.cmd("SET a 1"), ok());
    let long = [b'k'; 17];
    let reply = c.call(&[b"DEL", b"a", &long]);
    assert_eq!(
        reply,
        err("ERR key of 17 bytes is longer than the limit of 16 bytes")
    );
    assert_eq!(
        c.cmd("GET a"),
        bulk(b"1"),
        "a DEL answered with an error deleted a key"
    );
}

/// README, "Redis clients": two processes started on one new pod file at once, as the
/// README's example runs them (`&`, then the next). Both find no file and create it; the
/// core answers the loser `PodInUse`, and it opens the winner's pod (it gave up, and one
/// of the two hosts never served).
#[test]
fn two_processes_started_together_on_a_new_pod_file_both_serve() {
    for round in 0..3 {
        let dir = scratch_dir();
        let pod = dir.path().join("pod");
        let mut children = Vec::new();
        let mut sockets = Vec::new();
        for host in 0..2 {
            let socket = dir.path().join(format!("h{host}.sock"));
            let child = Command::new(env!("CARGO_BIN_EXE_megalon-server"))
                .args(["--pod", pod.to_str().unwrap(), "--host", &host.to_string()])
                .args(["--socket", socket.to_str().unwrap(), "--port", "0"])
                .args(["--lnr-mib", "16"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            children.push(child);
            sockets.push(socket);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut failure = None;
        'wait: for (host, socket) in sockets.iter().enumerate() {
            while UnixStream::connect(socket).is_err() {
                if let Some(status) = children[host].try_wait().unwrap() {
                    let mut text = String::new();
                    use std::io::Read as _;
                    let _ = children[host]
                        .stderr
                        .take()
                        .unwrap()
                        .read_to_string(&mut text);
                    failure = Some(format!(
                        "round {round}: host {host}'s process exited ({status}): {text}"
                    ));
                    break 'wait;
                }
                assert!(Instant::now() < deadline, "host {host} did not serve");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(failure) = failure {
            panic!("{failure}");
        }
    }
}

/// `SHUTDOWN ABORT` (Redis 7.0, which the server says it is) cancels a shutdown in
/// progress and answers `-ERR No shutdown in progress.` when there is none; `SHUTDOWN`
/// with an option Redis does not know, or with both `SAVE` and `NOSAVE`, is a syntax
/// error. None stops the server (each did: a client's refused command stopped every
/// host of the process).
#[test]
fn shutdown_abort_does_not_shut_the_server_down() {
    let dir = scratch_dir();
    let socket = dir.path().join("h{host}.sock");
    let socket_text = socket.display().to_string();
    let server = Server::start(
        &["--hosts", "1", "--socket", &socket_text, "--lnr-mib", "16"],
        vec![dir.path().join("h0.sock")],
    )
    .owning(dir);
    let mut c = server.client(0);
    assert_eq!(c.cmd("SET k v"), ok());
    c.send(&[b"SHUTDOWN", b"ABORT"]);
    let reply = c.try_recv();
    assert_eq!(
        reply,
        Some(err("ERR No shutdown in progress.")),
        "SHUTDOWN ABORT"
    );
    c.send(&[b"SHUTDOWN", b"BOGUS"]);
    assert_eq!(
        c.try_recv(),
        Some(err("ERR syntax error")),
        "SHUTDOWN BOGUS"
    );
    // SAVE with NOSAVE, in any order: Redis's illegal combination.
    let combinations: [&[&[u8]]; 3] = [
        &[b"SHUTDOWN", b"NOSAVE", b"SAVE"],
        &[b"SHUTDOWN", b"save", b"nosave"],
        &[b"SHUTDOWN", b"NOSAVE", b"NOW", b"SAVE"],
    ];
    for command in combinations {
        c.send(command);
        let shown = String::from_utf8_lossy(&command.join(&b" "[..])).into_owned();
        assert_eq!(c.try_recv(), Some(err("ERR syntax error")), "{shown}");
    }
    assert_eq!(
        server.client(0).cmd("PING"),
        OwnedFrame::SimpleString(b"PONG".to_vec())
    );
}

/// `--lnr-mib` and `--scr-mib` past what a u64 of bytes holds: the size wrapped (a shift
/// by 20 drops the high bits), and the server created a pod of what was left (2^44 + 64
/// MiB made a 64 MiB LNR) without a word. A size no pod can have is refused, naming it.
#[test]
fn pod_sizes_past_a_u64_of_bytes_are_refused_not_wrapped() {
    for (flag, value) in [
        ("--lnr-mib", "17592186044480"),
        ("--scr-mib", "17592186044420"),
    ] {
        let dir = scratch_dir();
        let (status, text) = run_to_exit(&[flag, value], &dir.path().join("h.sock"));
        assert!(
            matches!(status, Some(status) if !status.success()) && text.contains(flag),
            "{flag} {value}: the server started ({status:?}), stderr {text:?}"
        );
    }
}

/// `--wait-limit-ms 0` was accepted: the server served, and every command that met
/// another client's write failed at once ("ERR record N stayed busy for 0 ms", INCRs of
/// two redis-benchmark clients). A wait limit of 0 is refused, naming the flag.
#[test]
fn a_wait_limit_of_zero_is_refused_by_name() {
    let dir = scratch_dir();
    let (status, text) = run_to_exit(&["--wait-limit-ms", "0"], &dir.path().join("h.sock"));
    assert!(
        matches!(status, Some(status) if !status.success()) && text.contains("--wait-limit-ms"),
        "--wait-limit-ms 0: the server started ({status:?}), stderr {text:?}"
    );
}

/// `--hosts 9` on a heap pod of the default `--max-hosts 8` failed with "joining the pod:
/// the host table is full: all 8 hosts are joined", naming no flag to change.
#[test]
fn more_hosts_than_max_hosts_names_both_flags() {
    let dir = scratch_dir();
    let (status, text) = run_to_exit(&["--hosts", "9"], &dir.path().join("h{host}.sock"));
    assert!(
        matches!(status, Some(status) if !status.success()) && text.contains("--max-hosts"),
        "--hosts 9: {status:?}, stderr {text:?}"
    );
}

/// A server stopping (SIGTERM) closes its listener at once, but removed its socket file
/// only after every worker had finished: a worker in a store call (here a create waiting
/// for log room behind a stopped host, up to the wait limit) kept it going for seconds.
/// A server started meanwhile on the same path found a socket nobody answered, replaced
/// it, and served; then the first one removed the new server's socket file, and the new
/// server, alive, could be reached by no client.
#[test]
fn a_stopping_server_leaves_alone_the_socket_a_new_server_bound_at_its_path() {
    let dir = scratch_dir();
    let (mut a, stopped) = a_create_waiting_for_log_room(dir.path(), "2000");
    let path = a.sockets[0].clone();
    a.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&path).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the stopping server still answers"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Another server (a heap pod of its own) at the same path, as a restart would be.
    let path_text = path.display().to_string();
    let b = Server::start(
        &["--socket", &path_text, "--lnr-mib", "16"],
        vec![path.clone()],
    );
    assert!(
        exit_within(&mut a, Duration::from_secs(30)).is_some(),
        "the stopping server did not exit"
    );
    stopped.signal("CONT");
    assert!(
        UnixStream::connect(&path).is_ok(),
        "the new server, alive, lost its socket file {} to the old one's exit",
        path.display()
    );
    assert_eq!(
        b.client(0).cmd("PING"),
        OwnedFrame::SimpleString(b"PONG".to_vec())
    );
}

/// Host 0 of a pod file, one worker, whose host 1 is stopped (`SIGSTOP`) and whose log
/// (64 entries) is full: a create is in the worker's hands, waiting up to the wait limit
/// (`wait_ms`) for log room, and more are behind it. A shutdown of host 0 waits for it.
/// Returns host 0's server and the stopped one (`SIGCONT` it before it drops).
fn a_create_waiting_for_log_room(dir: &std::path::Path, wait_ms: &str) -> (Server, Server) {
    let extra = [
        "--workers",
        "1",
        "--wait-limit-ms",
        wait_ms,
        "--lnr-mib",
        "16",
        "--log-entries",
        "64",
    ];
    let a = host_process(dir, 0, &extra);
    let stopped = host_process(dir, 1, &extra);
    stopped.signal("STOP");
    // Sent, not answered: the worker takes them in turn until one waits for room.
    let mut c = a.client(0);
    for i in 0..200 {
        c.send(&[b"SET", format!("k{i}").as_bytes(), b"v"]);
    }
    std::thread::sleep(Duration::from_millis(300));
    (a, stopped)
}

/// How `server` exited, waiting for it up to `limit`.
fn exit_within(server: &mut Server, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = server.exited() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shutdown waits for the command in a worker's hands (here a create behind a stopped
/// host, up to the wait limit of 2 s), not for the pipeline behind it: the server exits
/// 0 in about one wait limit. Before, the worker ran every command its client had sent,
/// each waiting the limit (136 of them: past four minutes).
#[test]
fn a_shutdown_runs_the_command_in_hand_not_the_pipeline_behind_it() {
    let dir = scratch_dir();
    let (mut a, stopped) = a_create_waiting_for_log_room(dir.path(), "2000");
    a.signal("TERM");
    let status = exit_within(&mut a, Duration::from_secs(20));
    stopped.signal("CONT");
    assert!(
        status.is_some_and(|s| s.success()),
        "the shutdown ran the pipeline: {status:?}"
    );
}

/// A shutdown waits for the commands in its workers' hands, each up to the wait limit
/// (here a create behind a stopped host, 30 s). A second signal ends the process at
/// once, without leaving the pod (status 130); the pod's other host recovers its host
/// afterwards and serves. Before, a second signal did nothing: the shutdown went on.
#[test]
fn a_second_signal_ends_a_waiting_shutdown_at_once() {
    let dir = scratch_dir();
    let (mut a, stopped) = a_create_waiting_for_log_room(dir.path(), "30000");
    a.signal("INT");
    assert_eq!(
        exit_within(&mut a, Duration::from_secs(1)),
        None,
        "the shutdown did not wait for the create in its worker's hands"
    );
    a.signal("INT");
    let status = exit_within(&mut a, Duration::from_secs(10));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "a second signal did not end the shutdown: {status:?}"
    );
    // The pod goes on without it: host 1 recovers host 0 (its process is gone) and
    // serves, its writes finding log room.
    stopped.signal("CONT");
    let mut c = stopped.client(0);
    for i in 0..100 {
        assert_eq!(
            c.call(&[b"SET", format!("after{i}").as_bytes(), b"v"]),
            ok(),
            "host 1 after host 0's forced exit"
        );
    }
}

/// SIGHUP (the terminal closed) stops the server as SIGTERM does: its hosts leave the
/// pod, its socket goes, exit 0. Before, it killed the process, which left its hosts to
/// the pod's recovery and its socket file behind.
#[test]
fn sighup_stops_the_server_as_sigterm_does() {
    let mut server = one_host(&[]);
    assert_eq!(server.client(0).cmd("SET k v"), ok());
    let socket = server.sockets[0].clone();
    server.signal("HUP");
    let status = exit_within(&mut server, Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "SIGHUP: {status:?}");
    assert!(!socket.exists(), "the socket file was left behind");
}

/// A server of one host on `socket` (16 MiB of LNR), its stdout `stdout`.
fn bare_server(socket: &std::path::Path, stdout: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_megalon-server"))
        .args(["--socket", socket.to_str().unwrap(), "--port", "0"])
        .args(["--lnr-mib", "16"])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits, `pause` between looks, until `child` answers on `socket`, by `deadline`.
fn serving_by(
    child: &mut std::process::Child,
    socket: &std::path::Path,
    deadline: Instant,
    pause: Duration,
) {
    while UnixStream::connect(socket).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server exited with {status} before it served");
        }
        assert!(Instant::now() < deadline, "the server did not serve");
        std::thread::sleep(pause);
    }
}

/// A SIGTERM sent the moment the socket answers (a supervisor stopping a server it just
/// saw come up) stops the server as any other: exit 0, its socket file removed. The
/// signals were caught only once the server had started and printed its banner: one in
/// that window met its default action and killed the process (a third of the tries),
/// which left its hosts to the pod's recovery and its socket file behind. Sent straight
/// from the test (`kill(2)`): the `kill` program takes a millisecond to start, past the
/// window.
#[test]
fn a_sigterm_as_soon_as_the_socket_answers_stops_the_server_cleanly() {
    for attempt in 0..12 {
        let dir = scratch_dir();
        let socket = dir.path().join("h0.sock");
        let mut child = bare_server(&socket, Stdio::null());
        let deadline = Instant::now() + Duration::from_secs(20);
        // As tight as it goes: the signal's window opens as the socket answers.
        serving_by(&mut child, &socket, deadline, Duration::ZERO);
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: a signal to the child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("attempt {attempt}: SIGTERM did not stop the server");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(
            status.success(),
            "attempt {attempt}: a SIGTERM as the socket answered: {status}"
        );
        assert!(
            !socket.exists(),
            "attempt {attempt}: the socket file was left behind"
        );
    }
}

/// A server whose stdout is a pipe whose reader is gone (`megalon-server ... | head -1`)
/// serves and stops as any other: its banner's write fails, nothing more. Before, the
/// banner's `println!` panicked the main thread, and the process exited (101) with its
/// hosts never leaving the pod.
#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    let dir = scratch_dir();
    let socket = dir.path().join("h0.sock");
    let mut child = bare_server(&socket, Stdio::piped());
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    serving_by(&mut child, &socket, deadline, Duration::from_millis(20));
    // Still there once the banner's writes have failed.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(child.try_wait().unwrap(), None, "the server exited");
    let mut c = common::Client::connect(&socket);
    assert_eq!(c.cmd("PING"), OwnedFrame::SimpleString(b"PONG".to_vec()));
    drop(c);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "SIGTERM did not stop the server");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// `--socket ''` is refused by name (it was taken: the server said it was ready on "").
#[test]
fn an_empty_socket_path_is_refused() {
    let dir = scratch_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_megalon-server"))
        .args(["--socket", "", "--port", "0"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("--socket '' was taken: the server ran");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("--socket ''"), "{stderr}");
}

/// A signal while the server joins the pod (here its `--host` id is held by a stopped
/// process: the join waits for the id, up to the wait limit of 30 s, meanwhile holding
/// another id as its helper) stops it before it serves: exit 0, its helper left the
/// pod, no socket bound. Before, the signal met its default action and killed the process
/// mid-join, its hosts left to the pod's recovery.
#[test]
fn a_signal_while_the_server_joins_the_pod_stops_it_before_it_serves() {
    let dir = scratch_dir();
    let held = host_process(dir.path(), 0, &["--lnr-mib", "16"]);
    held.signal("STOP");
    let pod = dir.path().join("pod");
    let socket = dir.path().join("second.sock");
    let mut second = Command::new(env!("CARGO_BIN_EXE_megalon-server"))
        .args(["--pod", pod.to_str().unwrap(), "--host", "0"])
        .args(["--socket", socket.to_str().unwrap(), "--port", "0"])
        .args(["--wait-limit-ms", "30000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second server did not wait to join"
    );
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(second.id() as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    held.signal("CONT");
    assert!(
        status.is_some_and(|s| s.success()),
        "a SIGTERM while joining: {status:?}"
    );
    assert!(!socket.exists(), "the server bound its socket");
    // The pod goes on: host 0's own server serves.
    assert_eq!(held.client(0).cmd("SET k v"), ok());
}
