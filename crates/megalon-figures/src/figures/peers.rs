//! The KV store beside the stores a user would pick instead (megalon-peers): the same
//! keys, values and draws; a get-only phase and a put-only phase, 2 workers (threads or
//! processes) each. Redis runs if `redis-server` is installed; otherwise its row says
//! how to install it.

use std::fmt::Write as _;

use megalon_bench::runner::{csv_field, ratio, Harness, PAPER_OBJECTS, VALUE_BYTES};
use megalon_peers::{Peer, PeerResult, PeerSpec};

use super::draw;
use crate::plot::{self, Chart, Series};

/// Most keys a peer loads.
const MAX_KEYS: u64 = 100_000;

/// One peer's rates (gets and puts per second), if it ran, and its outcome.
struct Rated {
    peer: Peer,
    rates: Option<(f64, f64)>,
    /// `ok`, or why the peer failed.
    outcome: String,
}

pub fn run(h: &mut Harness) -> Result<(), String> {
    if h.counting() {
        h.count_runs(Peer::ALL.len() as u64);
        return Ok(());
    }
    let spec = PeerSpec {
        keys: h.objects(PAPER_OBJECTS).min(MAX_KEYS),
        phase_seconds: h.settings().seconds,
        value_bytes: VALUE_BYTES,
        ..PeerSpec::default()
    };
    let mut results = Vec::new();
    for &peer in &spec.peers {
        h.bar().set_message(format!("peers: {}", peer.name()));
        results.push(megalon_peers::run(peer, &spec));
        h.bar().inc(1);
    }
    let table = megalon_peers::table(&spec, &results);
    h.bar().suspend(|| print!("{table}"));
    let rated: Vec<Rated> = results.iter().map(rated).collect();
    h.write("peers.csv", &csv(&results, &rated))?;
    chart(h, &rated, spec.workers)?;
    rows(h, &rated);
    Ok(())
}

fn rated(r: &PeerResult) -> Rated {
    match &r.outcome {
        Ok(rates) => Rated {
            peer: r.peer,
            rates: Some((
                rates.get_ops_per_second.unwrap_or(0.0),
                rates.put_ops_per_second.unwrap_or(0.0),
            )),
            outcome: "ok".to_string(),
        },
        Err(e) => Rated {
            peer: r.peer,
            rates: None,
            outcome: e.to_string().replace(',', ";"),
        },
    }
}

/// A row per peer: its processes and workers, its rates (0 if it failed), its outcome.
fn csv(results: &[PeerResult], rated: &[Rated]) -> String {
    let mut csv =
        String::from("peer,processes,workers,get_ops_per_second,put_ops_per_second,outcome\n");
    for (r, rated) in results.iter().zip(rated) {
        let (get, put) = rated.rates.unwrap_or((0.0, 0.0));
        let _ = writeln!(
            csv,
            "{},{},{},{get:.0},{put:.0},{}",
            csv_field(r.peer.name()),
            r.processes,
            r.workers,
            csv_field(&rated.outcome.to_string())
        );
    }
    csv
}

/// Bars of gets and puts per second of every peer that ran (with `workers` workers).
fn chart(h: &Harness, rated: &[Rated], workers: usize) -> Result<(), String> {
    let ran: Vec<(Peer, (f64, f64))> = rated
        .iter()
        .filter_map(|r| Some((r.peer, r.rates?)))
        .collect();
    let categories: Vec<String> = ran.iter().map(|(p, _)| p.name().to_string()).collect();
    let series = [
        Series::bars("gets", ran.iter().map(|(_, (gets, _))| *gets)),
        Series::bars("puts", ran.iter().map(|(_, (_, puts))| *puts)),
    ];
    let title = format!("The KV store beside LMDB and Redis ({workers} workers)");
    let chart = Chart::bars(&title, "store", "operations per second", &categories);
    draw(h, "peers.svg", &chart, &series)
}

/// A row per peer beside the KV store on threads: the ratios of gets and of puts.
fn rows(h: &mut Harness, rated: &[Rated]) {
    let ours = rated
        .iter()
        .find(|r| r.peer == Peer::MegalonThreads)
        .and_then(|r| r.rates);
    for r in rated.iter().filter(|r| r.peer != Peer::MegalonThreads) {
        let (ours_text, explain) = match (ours, r.rates) {
            (Some((og, op)), Some((g, p))) => (
                format!("gets {}, puts {}", ratio(og, g), ratio(op, p)),
                format!(
                    "megalon (threads) {} gets/s, {} puts/s; {} {} gets/s, {} puts/s",
                    plot::short(og),
                    plot::short(op),
                    r.peer.name(),
                    plot::short(g),
                    plot::short(p)
                ),
            ),
            _ => ("n/a".into(), r.outcome.clone()),
        };
        h.row(
            "peers",
            format!("megalon (threads) / {}", r.peer.name()),
            ours_text,
            "not in the paper",
            explain,
        );
    }
}
