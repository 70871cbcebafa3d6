//! Adversarial clients: a request that fills the input buffer to its last byte, a command
//! refused part-way through its keys.

mod common;

use std::io::Write as _;
use std::time::Duration;

use common::{bulk, err, ok, scratch_dir, Server};
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
