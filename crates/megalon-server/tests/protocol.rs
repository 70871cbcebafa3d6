//! The RESP reader against a real server, as an adversarial client drives it: what a
//! connection keeps once its client waits, after a command of many arguments or a large
//! request (measured as the process's resident memory).

mod common;

use std::time::{Duration, Instant};

use common::{err, ok, scratch_dir, Client, Server};
use redis_protocol::resp2::types::OwnedFrame;

fn one_host(extra: &[&str]) -> Server {
    let dir = scratch_dir();
    let socket = dir.path().join("h{host}.sock");
    let socket_text = socket.display().to_string();
    let mut args = vec![
        "--hosts",
        "1",
        "--socket",
        &socket_text,
        "--lnr-mib",
        "16",
        "--workers",
        "2",
    ];
    args.extend(extra);
    Server::start(&args, vec![dir.path().join("h0.sock")]).owning(dir)
}

/// The process's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Waits until the server's resident memory holds still (its workers have gone back to
/// waiting), at most a few seconds: the last reading.
fn settled_rss_kib(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = rss_kib(pid);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rss_kib(pid);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// An unknown command of `args` empty arguments besides its name.
fn wide_unknown_command(args: usize) -> Vec<u8> {
    let mut request = format!("*{}\r\n$6\r\nNOSUCH\r\n", args + 1).into_bytes();
    for _ in 0..args {
        request.extend_from_slice(b"$0\r\n\r\n");
    }
    request
}

fn is_unknown_command(reply: &OwnedFrame) -> bool {
    matches!(reply, OwnedFrame::Error(text) if text.starts_with("ERR unknown command 'NOSUCH'"))
}

/// A connection whose client sent one command of many arguments (65,536, the limit; 393
/// KB on the wire) and then waits keeps a few KiB, not a table of 65,536 ranges (1 MiB):
/// the reader's list of arguments kept the size of the widest command it ever read, for
/// as long as the connection lived, so 100 such idle clients held 100 MiB (1,000, the
/// default `--max-clients`, 1 GiB), where the input buffer goes back to 16 KiB. A
/// command only partly read as the client waits keeps what it parsed.
#[test]
fn a_wide_command_leaves_no_memory_behind_its_waiting_connection() {
    let server = one_host(&[]);
    let pid = server.pid();
    let mut bystander = server.client(0);
    assert_eq!(bystander.cmd("SET before yes"), ok());
    let before = settled_rss_kib(pid);

    const CLIENTS: usize = 100;
    let wide = wide_unknown_command(65_535);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = server.client(0);
        c.send_raw(&wide);
        let reply = c.recv();
        assert!(is_unknown_command(&reply), "{reply:?}");
        // A SET of which two arguments are here, the third still to come.
        c.send_raw(b"*3\r\n$3\r\nSET\r\n$4\r\nwide\r\n");
        clients.push(c);
    }
    let after = settled_rss_kib(pid);
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 25,
        "{CLIENTS} waiting connections, each after one command of 65,536 arguments, grew \
         the server by {grown_mib} MiB ({before} KiB -> {after} KiB)"
    );
    // Each connection's SET goes on where it was.
    for (i, c) in clients.iter_mut().enumerate() {
        c.send_raw(format!("${}\r\n{i}\r\n", i.to_string().len()).as_bytes());
        assert_eq!(c.recv(), ok(), "client {i}");
    }
    assert_eq!(
        bystander.cmd("GET wide"),
        OwnedFrame::BulkString((CLIENTS - 1).to_string().into_bytes())
    );
    assert_eq!(bystander.cmd("GET before"), common::bulk(b"yes"));
}

/// A connection whose client sent a large request (2 MB) and then waits with a few bytes
/// of its next command buffered keeps a buffer of about those bytes, not of the large
/// request: the input buffer went back to 16 KiB only when nothing at all was buffered,
/// so a client that left one byte of a next command kept 2 MiB (a request of the longest,
/// 16 MiB) for as long as it waited: 40 such clients, 80 MiB. The bytes kept are the
/// command's, and it goes on once the rest arrives.
#[test]
fn a_large_request_leaves_no_memory_behind_while_its_client_waits() {
    let server = one_host(&[]);
    let pid = server.pid();
    let mut bystander = server.client(0);
    assert_eq!(bystander.cmd("SET before yes"), ok());
    let before = settled_rss_kib(pid);

    // 500 arguments of 4,000 bytes: 2 MB, within the default slot of 4 KiB.
    let mut large = b"*501\r\n$6\r\nNOSUCH\r\n".to_vec();
    for _ in 0..500 {
        large.extend_from_slice(b"$4000\r\n");
        large.extend(std::iter::repeat_n(b'x', 4000));
        large.extend_from_slice(b"\r\n");
    }
    const CLIENTS: usize = 40;
    let next = Client::encode(&[b"SET", b"large", b"done"]);
    let (head, tail) = next.split_at(10);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = server.client(0);
        c.send_raw(&large);
        c.send_raw(head);
        let reply = c.recv();
        assert!(is_unknown_command(&reply), "{reply:?}");
        clients.push(c);
    }
    let after = settled_rss_kib(pid);
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 20,
        "{CLIENTS} waiting connections, each after a request of 2 MB with 10 bytes of the \
         next buffered, grew the server by {grown_mib} MiB ({before} KiB -> {after} KiB)"
    );
    for (i, c) in clients.iter_mut().enumerate() {
        c.send_raw(tail);
        assert_eq!(c.recv(), ok(), "client {i}");
    }
    assert_eq!(bystander.cmd("GET large"), common::bulk(b"done"));
    // A malformed command still gets its error after all this.
    let mut c = server.client(0);
    c.send_raw(b"*1\r\n$x\r\n");
    assert_eq!(c.recv(), err("ERR Protocol error: invalid bulk length"));
}
