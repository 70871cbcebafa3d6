//! The megalon KV store beside LMDB and Redis on the same workload, in one run, as a
//! table: operations per second of each timed phase (by default a get-only and a put-only
//! one), and each peer's setup.
//!
//! ```text
//! cargo run --release -p megalon-peers --example peers
//! cargo run --release -p megalon-peers --example peers -- --workers 4 --seconds 5
//! cargo run --release -p megalon-peers --example peers -- --peers lmdb,redis --write-ratios 0,0.05,1
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use megalon_peers::{Peer, PeerError, PeerSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PeerArg {
    /// The megalon KV store, one host per thread, in this process.
    MegalonThreads,
    /// The megalon KV store, one host per child process, on a pod file.
    MegalonProcesses,
    /// LMDB (heed), one child process per worker.
    Lmdb,
    /// Redis over a Unix socket, one client thread per worker.
    Redis,
}

impl From<PeerArg> for Peer {
    fn from(arg: PeerArg) -> Peer {
        match arg {
            PeerArg::MegalonThreads => Peer::MegalonThreads,
            PeerArg::MegalonProcesses => Peer::MegalonProcesses,
            PeerArg::Lmdb => Peer::Lmdb,
            PeerArg::Redis => Peer::Redis,
        }
    }
}

/// Measure the megalon KV store and the stores a user would pick instead, side by side.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// Peers to run, in order (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    peers: Vec<PeerArg>,
    /// Workers of every peer (threads or processes).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Keys loaded before the timed phases.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes of every value.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Zipfian skew of the key choice (YCSB's scrambled Zipfian); 0 for uniform.
    #[arg(long, default_value_t = 0.99)]
    skew: f64,
    /// Fractions of puts, one timed phase each.
    #[arg(long, value_delimiter = ',', default_values_t = [0.0, 1.0])]
    write_ratios: Vec<f64>,
    /// Seconds of each timed phase.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Longest wait on a child, the server or a host, beyond a phase's seconds.
    #[arg(long, default_value_t = 60.0)]
    wait_seconds: f64,
    /// Where pod files and LMDB environments go (default: /dev/shm).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The Redis server to start (a path, or a name on PATH).
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
}

fn main() -> ExitCode {
    megalon_peers::run_child_if_requested();
    let args = Args::parse();
    let defaults = PeerSpec::default();
    let spec = PeerSpec {
        peers: if args.peers.is_empty() {
            Peer::ALL.to_vec()
        } else {
            args.peers.iter().map(|&p| p.into()).collect()
        },
        workers: args.workers,
        keys: args.keys,
        value_bytes: args.value_bytes,
        skew: args.skew,
        write_ratios: args.write_ratios,
        phase_seconds: args.seconds,
        wait_seconds: args.wait_seconds,
        dir: args.dir.unwrap_or(defaults.dir),
        redis_server: args.redis_server,
        ..defaults
    };
    if let Err(error) = spec.check() {
        eprintln!("peers: {error}");
        return ExitCode::from(2);
    }
    println!(
        "{} workers per peer, {} keys, {} B values, {}, phases of {} s at {} puts",
        spec.workers,
        spec.keys,
        spec.value_bytes,
        if spec.skew > 0.0 {
            format!("Zipfian keys (skew {})", spec.skew)
        } else {
            "uniform keys".to_owned()
        },
        spec.phase_seconds,
        spec.write_ratios
            .iter()
            .map(|r| format!("{:.0}%", r * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut results = Vec::new();
    for &peer in &spec.peers {
        eprintln!("running {} ...", peer.name());
        results.push(megalon_peers::run(peer, &spec));
    }
    print!("{}", megalon_peers::table(&spec, &results));
    let failed = results
        .iter()
        .any(|r| matches!(&r.outcome, Err(e) if !matches!(e, PeerError::Unavailable { .. })));
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
