//! megalon-server driven from outside, as a Redis client would: the commands and their
//! replies, pipelining, bad input, the connection limit, a client that leaves mid-
//! pipeline, hosts that share their keys (in one process and across processes), and
//! INCRs from every host that add up; then redis-cli and redis-benchmark themselves,
//! where they are installed.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bulk, err, host_process, installed, int, ok, scratch_dir, Client, Server};
use redis_protocol::resp2::types::OwnedFrame;

/// The sizes every test's server runs with: 16 MiB of LNR, 2 workers per host.
const SIZES: [&str; 4] = ["--lnr-mib", "16", "--workers", "2"];

/// A server of `hosts` hosts in one process, started with the flags `extra` besides its
/// sockets, sizes and workers; its pod file and sockets in a scratch directory of its own.
fn in_process(hosts: usize, extra: &[&str]) -> Server {
    let dir = scratch_dir();
    let socket = dir.path().join("h{host}.sock");
    let (hosts_text, socket_text) = (hosts.to_string(), socket.display().to_string());
    let mut args = vec!["--hosts", &hosts_text, "--socket", &socket_text];
    args.extend(SIZES);
    args.extend(extra);
    let sockets = (0..hosts)
        .map(|h| dir.path().join(format!("h{h}.sock")))
        .collect();
    Server::start(&args, sockets).owning(dir)
}

fn info_field(client: &mut Client, section: &str, field: &str) -> String {
    let OwnedFrame::BulkString(text) = client.call(&[b"INFO", section.as_bytes()]) else {
        panic!("INFO is a bulk string");
    };
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_owned))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
}

#[test]
fn commands_answer_as_redis_does() {
    let server = in_process(1, &["--slot-bytes", "256"]);
    let mut c = server.client(0);
    let null = OwnedFrame::Null;
    let cases: &[(&str, OwnedFrame)] = &[
        ("PING", OwnedFrame::SimpleString(b"PONG".to_vec())),
        ("ping hello", bulk(b"hello")),
        ("ECHO hi", bulk(b"hi")),
        ("GET k", null.clone()),
        ("SET k v1", ok()),
        ("GET k", bulk(b"v1")),
        ("SET k v2 NX", null.clone()),
        ("SET n v NX", ok()),
        ("SET absent v XX", null.clone()),
        ("GET absent", null.clone()),
        ("SET k v3 XX", ok()),
        ("SET k v4 GET", bulk(b"v3")),
        ("SET fresh v GET", null.clone()),
        ("GETSET k v5", bulk(b"v4")),
        ("GET k", bulk(b"v5")),
        ("SET k v NX XX", err("ERR syntax error")),
        (
            "SET k v EX 10",
            err("ERR expiry (EX, PX, EXAT, PXAT) is not supported: keys do not expire"),
        ),
        ("SET k v KEEPTTL", ok()),
        ("SET k v BOGUS", err("ERR syntax error")),
        ("EXISTS k n absent k", int(3)),
        ("DEL n absent fresh", int(2)),
        ("MSET a 1 b 2 c 3", ok()),
        (
            "MSET a 1 b",
            err("ERR wrong number of arguments for 'mset' command"),
        ),
        ("INCR a", int(2)),
        ("INCRBY a 40", int(42)),
        ("DECR a", int(41)),
        ("DECRBY a -9", int(50)),
        ("INCR counter", int(1)),
        ("INCR k", err("ERR value is not an integer or out of range")),
        (
            "INCRBY a x",
            err("ERR value is not an integer or out of range"),
        ),
        ("SET big 9223372036854775807", ok()),
        ("INCR big", err("ERR increment or decrement would overflow")),
        (
            "DECRBY a -9223372036854775808",
            err("ERR decrement would overflow"),
        ),
        ("APPEND a 0", int(3)),
        ("GET a", bulk(b"500")),
        ("APPEND new tail", int(4)),
        ("STRLEN a", int(3)),
        ("STRLEN nothing", int(0)),
        ("DBSIZE", int(7)),
        ("SELECT 0", ok()),
        ("SELECT 1", err("ERR DB index is out of range")),
        (
            "SELECT abc",
            err("ERR value is not an integer or out of range"),
        ),
        ("CLIENT GETNAME", null.clone()),
        ("CLIENT SETNAME tester", ok()),
        ("CLIENT GETNAME", bulk(b"tester")),
        ("HELLO 3", err("NOPROTO unsupported protocol version")),
        ("COMMAND COUNT", int(24)),
        ("COMMAND DOCS", OwnedFrame::Array(Vec::new())),
        (
            "CONFIG GET save",
            OwnedFrame::Array(vec![bulk(b"save"), bulk(b"")]),
        ),
        (
            "CONFIG GET appendonly",
            OwnedFrame::Array(vec![bulk(b"appendonly"), bulk(b"no")]),
        ),
        ("CONFIG GET nothing", OwnedFrame::Array(Vec::new())),
        (
            "CONFIG GET",
            err("ERR wrong number of arguments for 'config|get' command"),
        ),
        (
            "GET",
            err("ERR wrong number of arguments for 'get' command"),
        ),
        (
            "FLUSHALL",
            err("ERR unknown command 'FLUSHALL', with args beginning with: "),
        ),
        (
            "LPUSH l x",
            err("ERR unknown command 'LPUSH', with args beginning with: 'l' 'x' "),
        ),
    ];
    for (words, expected) in cases {
        assert_eq!(&c.cmd(words), expected, "{words}");
    }
    assert_eq!(
        c.call(&[b"MGET", b"a", b"nothing", b"b"]),
        OwnedFrame::Array(vec![bulk(b"500"), OwnedFrame::Null, bulk(b"2")])
    );
    // Values are bytes: CR, LF and NUL go through whole.
    assert_eq!(c.call(&[b"SET", b"bin", b"a\r\nb\0c"]), ok());
    assert_eq!(c.call(&[b"GET", b"bin"]), bulk(b"a\r\nb\0c"));
    let OwnedFrame::Array(hello) = c.cmd("HELLO 2") else {
        panic!("HELLO answers an array");
    };
    assert_eq!(hello[4..6], [bulk(b"proto"), int(2)]);
    let OwnedFrame::Array(commands) = c.cmd("COMMAND") else {
        panic!("COMMAND answers an array");
    };
    assert_eq!(commands.len(), 24);
    assert_eq!(
        info_field(&mut c, "keyspace", "db0"),
        "keys=8,expires=0,avg_ttl=0"
    );
    assert_eq!(info_field(&mut c, "pod", "max_value_bytes"), "252");
    assert_eq!(info_field(&mut c, "megalon", "creates"), "10");
    info_field(&mut c, "scr", "scr_coherence_records_bytes");
    // An inline command, as typed into a terminal.
    c.send_raw(b"SET inline   value\r\nGET inline\n");
    assert_eq!(c.recv(), ok());
    assert_eq!(c.recv(), bulk(b"value"));
    assert_eq!(c.cmd("QUIT"), ok());
    assert_eq!(c.try_recv(), None, "QUIT closes the connection");
    assert!(server.shut_down(), "SHUTDOWN stops the server, exit 0");
}

/// `HELLO 2 SETNAME name` names the connection as `CLIENT SETNAME` does (Redis checks
/// the name the same way in both): a name with a space or a newline is refused, and an
/// empty name leaves the connection without one. HELLO took any name as it came: a name
/// `CLIENT SETNAME` refuses was set, and an empty one read back from `CLIENT GETNAME` as
/// an empty string instead of the null Redis answers.
#[test]
fn hello_setname_checks_the_name_as_client_setname_does() {
    let server = in_process(1, &[]);
    let mut c = server.client(0);
    let refused = err("ERR Client names cannot contain spaces, newlines or special characters.");
    for name in [&b"a b"[..], b"a\nb", b"\x7f"] {
        assert_eq!(
            c.call(&[b"CLIENT", b"SETNAME", name]),
            refused,
            "CLIENT SETNAME {name:?}"
        );
        assert_eq!(
            c.call(&[b"HELLO", b"2", b"SETNAME", name]),
            refused,
            "HELLO 2 SETNAME {name:?}"
        );
        assert_eq!(c.cmd("CLIENT GETNAME"), OwnedFrame::Null, "after {name:?}");
    }
    assert!(matches!(
        c.cmd("HELLO 2 SETNAME good"),
        OwnedFrame::Array(_)
    ));
    assert_eq!(c.cmd("CLIENT GETNAME"), bulk(b"good"));
    assert!(matches!(
        c.call(&[b"HELLO", b"2", b"SETNAME", b""]),
        OwnedFrame::Array(_)
    ));
    assert_eq!(
        c.cmd("CLIENT GETNAME"),
        OwnedFrame::Null,
        "an empty name is no name"
    );
}

#[test]
fn a_pipeline_is_answered_in_order() {
    let server = in_process(1, &[]);
    let mut c = server.client(0);
    let mut pipeline = Vec::new();
    for i in 0..2000 {
        let key = format!("key{}", i % 50);
        let value = format!("value{i}");
        pipeline.extend(Client::encode(&[b"SET", key.as_bytes(), value.as_bytes()]));
        pipeline.extend(Client::encode(&[b"GET", key.as_bytes()]));
        pipeline.extend(Client::encode(&[b"INCR", b"pipelined"]));
    }
    c.send_raw(&pipeline);
    for i in 0..2000 {
        assert_eq!(c.recv(), ok(), "SET {i}");
        assert_eq!(c.recv(), bulk(format!("value{i}").as_bytes()), "GET {i}");
        assert_eq!(c.recv(), int(i + 1), "INCR {i}");
    }
}

/// Whether the server closed `c`'s connection (its next read ends, or is reset), rather
/// than leaving it open with nothing to say (the read times out).
fn closed(c: &mut Client) -> bool {
    let mut byte = [0u8; 1];
    match std::io::Read::read(&mut c.stream, &mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

/// Bytes that are not RESP get one `-ERR Protocol error`, and the connection closes (as
/// Redis closes it): nothing says where the next command starts. It stayed open, and the
/// rest of a malformed frame, read later, ran as commands: a bulk length one byte short
/// made text inside a value a `SET`.
#[test]
fn bad_framing_is_an_error_and_closes_the_connection() {
    let server = in_process(1, &["--slot-bytes", "256"]);
    for (bad, error) in [
        (
            &b"*2\r\n$3\r\nGET\r\n:5\r\n"[..],
            "ERR Protocol error: expected '$' for an argument",
        ),
        (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
    ] {
        let mut c = server.client(0);
        c.send_raw(bad);
        assert_eq!(c.recv(), err(error));
        assert!(closed(&mut c), "closed after the error");
    }
    // A value one byte longer than its length says: the frame is broken there, and its
    // rest comes in a later write.
    let mut c = server.client(0);
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nvalue\r\n");
    assert_eq!(
        c.recv(),
        err("ERR Protocol error: expected CRLF after a bulk string")
    );
    // (The server may have closed already: the write may fail.)
    let _ = std::io::Write::write_all(&mut c.stream, b"\r\nSET injected yes\r\n");
    assert!(closed(&mut c), "closed after the error");
    let mut other = server.client(0);
    assert_eq!(
        other.cmd("GET injected"),
        OwnedFrame::Null,
        "nothing of it ran"
    );
    assert_eq!(other.cmd("GET k"), OwnedFrame::Null);
}

#[test]
fn bad_input_is_an_error_and_the_connection_goes_on() {
    let server = in_process(1, &["--slot-bytes", "256", "--max-key-bytes", "16"]);
    let mut c = server.client(0);
    // A value longer than a slot holds, refused from its header, the rest skipped.
    let long = vec![b'x'; 253];
    assert_eq!(
        c.call(&[b"SET", b"k", &long]),
        err("ERR argument of 253 bytes is longer than the limit of 252 bytes")
    );
    let huge = vec![b'x'; 100_000];
    assert_eq!(
        c.call(&[b"SET", b"k", &huge, b"NX"]),
        err("ERR argument of 100000 bytes is longer than the limit of 252 bytes")
    );
    // A key past the same limit is an argument too (not a "value").
    assert_eq!(
        c.call(&[b"GET", &long]),
        err("ERR argument of 253 bytes is longer than the limit of 252 bytes")
    );
    let fits = vec![b'y'; 252];
    assert_eq!(c.call(&[b"SET", b"k", &fits]), ok());
    assert_eq!(
        c.call(&[b"APPEND", b"k", b"z"]),
        err("ERR value of 253 bytes is longer than the limit of 252 bytes")
    );
    assert_eq!(
        c.call(&[b"GET", b"k"]),
        bulk(&fits),
        "a refused APPEND changes nothing"
    );
    // A key longer than the pod's keys.
    let key = [b'k'; 17];
    for command in [&b"SET"[..], b"GET", b"INCR", b"DEL"] {
        let mut args: Vec<&[u8]> = vec![command, &key];
        if command == b"SET" {
            args.push(b"v");
        }
        assert_eq!(
            c.call(&args),
            err("ERR key of 17 bytes is longer than the limit of 16 bytes"),
            "{}",
            String::from_utf8_lossy(command)
        );
    }
    assert_eq!(
        c.call(&[b"MSET", b"a", b"1", &key, b"2"]),
        err("ERR key of 17 bytes is longer than the limit of 16 bytes")
    );
    assert_eq!(
        c.cmd("GET a"),
        OwnedFrame::Null,
        "a refused MSET sets nothing"
    );
    // An MGET with a long key anywhere among its keys is refused whole, as DEL and MSET
    // are: an error inside its array would reach a Redis client as if it were a value.
    // Without one, it answers every key, over more keys than the store reads together.
    assert_eq!(c.cmd("SET present yes"), ok());
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(std::iter::repeat_n(&b"present"[..], 20));
    args.push(b"absent");
    let mut refused = args.clone();
    refused.push(&key);
    assert_eq!(
        c.call(&refused),
        err("ERR key of 17 bytes is longer than the limit of 16 bytes")
    );
    let mut expected = vec![bulk(b"yes"); 20];
    expected.push(OwnedFrame::Null);
    assert_eq!(c.call(&args), OwnedFrame::Array(expected));
    assert_eq!(c.cmd("ECHO still-here"), bulk(b"still-here"));
}

#[test]
fn a_full_store_answers_oom_with_its_numbers() {
    // 1 MiB of LNR in slots of 4 KiB, less the log: a few hundred values at most.
    let server = in_process(
        1,
        &[
            "--lnr-mib",
            "1",
            "--slot-bytes",
            "4096",
            "--log-entries",
            "64",
            "--wait-limit-ms",
            "100",
        ],
    );
    let mut c = server.client(0);
    let mut stored = 0;
    let reply = loop {
        let key = format!("k{stored}");
        match c.call(&[b"SET", key.as_bytes(), b"v"]) {
            OwnedFrame::SimpleString(_) => stored += 1,
            other => break other,
        }
        assert!(stored < 1000, "a 1 MiB pod cannot hold 1000 slots of 4 KiB");
    };
    let OwnedFrame::Error(text) = reply else {
        panic!("{reply:?}");
    };
    assert!(
        text.starts_with("OOM the store is full: host 0 has no free slot"),
        "{text}"
    );
    assert!(
        text.contains("slots)"),
        "names the pod's slot count: {text}"
    );
    // What is stored stays readable and writable.
    assert_eq!(c.cmd("GET k0"), bulk(b"v"));
    // MSET is not atomic across keys (each pair is set in order): a pair that updates a
    // present key, then one that needs a slot. The reply says the first pair was set,
    // which it was. (It said only that the store was full: a client told the command
    // failed found it half done, and nothing said which half.)
    let reply = c.cmd("MSET k0 changed fresh v");
    assert!(
        matches!(&reply, OwnedFrame::Error(text)
            if text.starts_with("OOM") && text.ends_with("; MSET set 1 of its 2 pairs first")),
        "{reply:?}"
    );
    assert_eq!(c.cmd("GET k0"), bulk(b"changed"), "as it says");
    assert_eq!(c.cmd("GET fresh"), OwnedFrame::Null);
    // Nothing set, nothing said.
    let reply = c.cmd("MSET fresh v k0 again");
    assert!(
        matches!(&reply, OwnedFrame::Error(text) if text.starts_with("OOM") && !text.contains("MSET")),
        "{reply:?}"
    );
    assert_eq!(c.cmd("GET k0"), bulk(b"changed"));
    assert_eq!(c.cmd("SET k0 w"), ok());
    assert_eq!(c.cmd("DEL k1"), int(1));
    assert_eq!(
        c.cmd("SET another v"),
        ok(),
        "a deleted key's slot is free again"
    );
}

#[test]
fn connections_past_the_limit_are_refused_clearly() {
    let server = in_process(1, &["--max-clients", "2"]);
    let mut first = server.client(0);
    // The start's probe of the socket was a connection too: wait until it is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut first, "clients", "connected_clients") != "1" {
        assert!(Instant::now() < deadline, "the probe's connection stayed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut second = server.client(0);
    assert_eq!(
        first.cmd("PING"),
        OwnedFrame::SimpleString(b"PONG".to_vec())
    );
    assert_eq!(
        second.cmd("PING"),
        OwnedFrame::SimpleString(b"PONG".to_vec())
    );
    let mut third = server.client(0);
    assert_eq!(third.recv(), err("ERR max number of clients reached"));
    assert_eq!(third.try_recv(), None, "then closed");
    drop(second);
    // The place is given back once the server has seen the close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = server.client(0);
        // A refused connection may be closed before the PING goes out.
        let _ = std::io::Write::write_all(&mut again.stream, &Client::encode(&[b"PING"]));
        match again.try_recv() {
            Some(OwnedFrame::SimpleString(_)) => break,
            refused => assert!(Instant::now() < deadline, "still {refused:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let rejected: u64 = info_field(&mut first, "stats", "rejected_connections")
        .parse()
        .unwrap();
    assert!(rejected >= 1, "INFO counts the refusal");
}

#[test]
fn a_client_that_leaves_mid_pipeline_holds_nothing() {
    let server = in_process(2, &[]);
    for round in 0..5 {
        let mut leaver = server.client(round % 2);
        let mut pipeline = Vec::new();
        for i in 0..5000 {
            let key = format!("held{}", i % 20);
            pipeline.extend(Client::encode(&[b"INCR", key.as_bytes()]));
            pipeline.extend(Client::encode(&[b"SET", b"shared", key.as_bytes()]));
        }
        // Half a command at the end, then gone without reading a reply.
        pipeline.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$4\r\nhal");
        leaver.send_raw(&pipeline);
        drop(leaver);
    }
    let mut c = server.client(1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(&mut c, "clients", "connected_clients") != "1" {
        assert!(
            Instant::now() < deadline,
            "the leavers' connections were not closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every key they touched is free to write, from either host: a lock left behind
    // would answer an error naming its holder once the wait limit ran out.
    for i in 0..20 {
        let key = format!("held{i}");
        let reply = c.call(&[b"INCR", key.as_bytes()]);
        assert!(
            matches!(reply, OwnedFrame::Integer(_)),
            "INCR {key}: {reply:?}"
        );
    }
    assert_eq!(server.client(0).cmd("SET shared mine"), ok());
}

#[test]
fn hosts_in_one_process_share_their_keys() {
    let server = in_process(3, &[]);
    assert_eq!(server.client(0).cmd("SET k v"), ok());
    assert_eq!(server.client(1).cmd("GET k"), bulk(b"v"));
    assert_eq!(server.client(2).cmd("APPEND k w"), int(2));
    assert_eq!(server.client(0).cmd("GET k"), bulk(b"vw"));
    assert_eq!(server.client(1).cmd("DEL k"), int(1));
    assert_eq!(server.client(2).cmd("EXISTS k"), int(0));
}

#[test]
fn each_host_serves_tcp_on_its_own_port() {
    use std::io::{Read, Write};
    // A port the system just gave out and took back: free unless another program takes
    // it in between.
    let base = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .min(u16::MAX - 2);
    let port = base.to_string();
    let server = in_process(2, &["--port", &port]);
    assert_eq!(server.client(0).cmd("SET over-tcp yes"), ok());
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", base + 1)).expect("host 1's port");
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(&Client::encode(&[b"GET", b"over-tcp"]))
        .unwrap();
    let mut reply = [0u8; 9];
    tcp.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"$3\r\nyes\r\n");
}

/// Hosts as processes over one pod file, as on real hosts: the first creates it.
fn processes(dir: &std::path::Path, hosts: u32) -> Vec<Server> {
    (0..hosts).map(|h| host_process(dir, h, &SIZES)).collect()
}

#[test]
fn incrs_from_clients_on_every_host_add_up() {
    const CLIENTS_PER_HOST: usize = 4;
    const INCRS: i64 = 500;
    let dir = scratch_dir();
    let hosts = processes(dir.path(), 3);
    assert_eq!(hosts[0].client(0).cmd("SET k v"), ok());
    assert_eq!(
        hosts[1].client(0).cmd("GET k"),
        bulk(b"v"),
        "another process reads it"
    );
    std::thread::scope(|scope| {
        for host in &hosts {
            for _ in 0..CLIENTS_PER_HOST {
                let mut client = host.client(0);
                scope.spawn(move || {
                    for _ in 0..INCRS {
                        let OwnedFrame::Integer(_) = client.cmd("INCR counter") else {
                            panic!("INCR");
                        };
                    }
                });
            }
        }
    });
    let total = 3 * CLIENTS_PER_HOST as i64 * INCRS;
    for (h, host) in hosts.iter().enumerate() {
        assert_eq!(
            host.client(0).cmd("GET counter"),
            bulk(total.to_string().as_bytes()),
            "host {h}"
        );
    }
    for host in hosts {
        assert!(host.shut_down(), "each process leaves the pod and exits 0");
    }
}

/// `program` (a Redis tool: redis-cli, redis-benchmark) talking to the server's Unix
/// socket at `socket`.
fn redis_tool(program: &str, socket: &Path) -> Command {
    let mut command = Command::new(program);
    command.arg("-s").arg(socket);
    command
}

fn redis_cli(socket: &Path, args: &[&str]) -> String {
    let output = redis_tool("redis-cli", socket)
        .args(args)
        .output()
        .expect("redis-cli runs");
    assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned()
}

#[test]
fn redis_cli_shares_keys_across_hosts() {
    if !installed("redis-cli") {
        return;
    }
    let server = in_process(2, &[]);
    let (host0, host1) = (&server.sockets[0], &server.sockets[1]);
    assert_eq!(redis_cli(host0, &["SET", "k", "v"]), "OK");
    assert_eq!(redis_cli(host1, &["GET", "k"]), "v");
    assert_eq!(redis_cli(host1, &["INCR", "n"]), "1");
    assert_eq!(redis_cli(host0, &["INCRBY", "n", "41"]), "42");
    assert_eq!(redis_cli(host0, &["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(redis_cli(host1, &["MGET", "a", "b", "c"]), "1\n2");
    assert_eq!(redis_cli(host1, &["DBSIZE"]), "4");
    assert_eq!(
        redis_cli(host0, &["SET", "k", "v", "PX", "10"]),
        "ERR expiry (EX, PX, EXAT, PXAT) is not supported: keys do not expire"
    );
    assert_eq!(
        redis_cli(host0, &["NOSUCH"]),
        "ERR unknown command 'NOSUCH', with args beginning with:"
    );
    assert!(redis_cli(host0, &["INFO", "megalon"]).contains("creates:3"));
    // Commands from standard input, as a script pipes them.
    let mut piped = redis_tool("redis-cli", host0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    piped
        .stdin
        .take()
        .unwrap()
        .write_all(b"SET piped yes\nGET piped\nAPPEND piped !\n")
        .unwrap();
    let output = piped.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "OK\nyes\n4\n");
}

#[test]
fn redis_benchmark_runs_without_errors() {
    if !installed("redis-benchmark") {
        return;
    }
    let server = in_process(1, &[]);
    let output = redis_tool("redis-benchmark", &server.sockets[0])
        .args(["-t", "set,get,incr", "-n", "20000", "-q"])
        .output()
        .expect("redis-benchmark runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "redis-benchmark exited with {}",
        output.status
    );
    // With -q it prints each test's final line after carriage returns of progress.
    let finals: Vec<&str> = stdout
        .split(['\r', '\n'])
        .filter(|l| l.contains("requests per second"))
        .collect();
    for test in ["SET", "GET", "INCR"] {
        assert!(
            finals
                .iter()
                .any(|l| l.trim_start().starts_with(&format!("{test}:"))),
            "no {test} result in {stdout}"
        );
    }
    let lower = format!("{stdout}{stderr}").to_lowercase();
    assert!(
        !lower.contains("error") && !lower.contains("err "),
        "{stdout}{stderr}"
    );
    let mut c = server.client(0);
    let commands: u64 = info_field(&mut c, "stats", "total_commands_processed")
        .parse()
        .unwrap();
    assert!(commands >= 60_000, "{commands} commands");
}

/// Out of descriptors, the acceptor stopped at its error and waited for the next
/// readiness of the listener, which is edge-triggered: the connections already waiting
/// raised none, and were served only once some other client connected. Now it tries the
/// listener again shortly: once descriptors are free, they are served.
#[test]
fn connections_that_wait_out_a_lack_of_descriptors_are_served_once_some_are_free() {
    use std::io::{Read, Write};
    let dir = scratch_dir();
    let socket = dir.path().join("h0.sock");
    let socket_text = socket.display().to_string();
    let args = [
        "--socket",
        &socket_text,
        "--lnr-mib",
        "16",
        "--workers",
        "1",
    ];
    let server = Server::start_with_descriptors(48, &args, vec![socket.clone()]).owning(dir);
    // More clients than the server has descriptors for: some wait, unaccepted.
    let mut clients: Vec<std::os::unix::net::UnixStream> = (0..48)
        .map(|_| {
            let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            stream.write_all(b"PING\r\n").unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let answered = |stream: &mut std::os::unix::net::UnixStream, wait: Duration| {
        stream.set_read_timeout(Some(wait)).unwrap();
        let mut reply = [0u8; 7];
        matches!(stream.read_exact(&mut reply), Ok(()) if &reply == b"+PONG\r\n")
    };
    let (mut served, mut waiting): (Vec<_>, Vec<_>) = clients
        .drain(..)
        .partition_map_by(|stream| answered(stream, Duration::from_millis(100)));
    assert!(
        !waiting.is_empty(),
        "the limit left some waiting ({} served)",
        served.len()
    );
    // Free the descriptors of the served ones: the waiting ones are served, with no new
    // connection to wake the acceptor.
    served.clear();
    for stream in &mut waiting {
        assert!(
            answered(stream, Duration::from_secs(5)),
            "served once descriptors are free"
        );
    }
    drop(server);
}

/// `partition` by a predicate that needs the item mutably.
trait PartitionMapBy<T> {
    fn partition_map_by(self, f: impl FnMut(&mut T) -> bool) -> (Vec<T>, Vec<T>);
}

impl<T, I: Iterator<Item = T>> PartitionMapBy<T> for I {
    fn partition_map_by(self, mut f: impl FnMut(&mut T) -> bool) -> (Vec<T>, Vec<T>) {
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        for mut item in self {
            if f(&mut item) {
                yes.push(item);
            } else {
                no.push(item);
            }
        }
        (yes, no)
    }
}

/// An MGET over more keys than it reads at once answers every key in order.
#[test]
fn an_mget_of_many_keys_answers_each_in_order() {
    let server = in_process(1, &["--slot-bytes", "256"]);
    let mut c = server.client(0);
    for i in (0..200).step_by(3) {
        assert_eq!(c.cmd(&format!("SET k{i} v{i}")), ok());
    }
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    let expected: Vec<OwnedFrame> = (0..200)
        .map(|i| {
            if i % 3 == 0 {
                bulk(format!("v{i}").as_bytes())
            } else {
                OwnedFrame::Null
            }
        })
        .collect();
    assert_eq!(c.call(&args), OwnedFrame::Array(expected));
}

/// A host's server killed (SIGKILL) and started again at once as the same host, while
/// another host's server lives on: it joins again (the live host recovers the dead one
/// within a fraction of the lease) and serves what the pod holds.
#[test]
fn a_killed_host_started_again_as_the_same_host_serves() {
    let dir = scratch_dir();
    let mut servers = processes(dir.path(), 2);
    assert_eq!(servers[1].client(0).cmd("SET a 1"), ok());
    // Drop kills the process with SIGKILL and reaps it.
    drop(servers.pop());
    let (pod, socket) = (dir.path().join("pod"), dir.path().join("p1.sock"));
    let (pod_text, socket_text) = (pod.display().to_string(), socket.display().to_string());
    let mut args = vec!["--pod", &pod_text, "--host", "1", "--socket", &socket_text];
    args.extend(SIZES);
    let again = Server::start(&args, vec![socket]);
    assert_eq!(again.client(0).cmd("GET a"), bulk(b"1"));
}
