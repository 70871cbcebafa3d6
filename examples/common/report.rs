//! The KV store examples' report of a run: throughput and latency, what the protocol did
//! (the counters that are not zero, in groups, with a legend), and where the coherent
//! memory (SCR) went.

use std::fmt::Write;

use megalon::kv::Report;
use megalon_bench::mix::MixRun;

/// megalon's counters in the groups they are printed in, each `(name in the report,
/// label)`. The names are those of `megalon::kv::Megalon`'s report; a counter not listed
/// here is printed under "other", so that none is lost.
const GROUPS: &[(&str, &[(&str, &str)])] = &[
    (
        "operations",
        &[
            ("reads", "reads"),
            ("writes", "writes"),
            ("creates", "creates"),
            ("deletes", "deletes"),
        ],
    ),
    (
        "protocol",
        &[
            ("read retries", "read retries"),
            ("waits for a writer", "waits for a writer"),
            ("lines invalidated", "lines invalidated"),
            ("lines written back", "lines written back"),
            ("SCR atomics", "SCR atomics"),
            ("counter wraps", "counter wraps"),
        ],
    ),
    (
        "records",
        &[
            ("record allocs", "allocated"),
            ("record allocs lost", "allocations lost"),
            ("record deallocs", "reclaimed"),
            ("churn", "churn"),
        ],
    ),
    (
        "local DRAM",
        &[
            ("moves to a host", "moves to a host"),
            ("moves lost", "moves lost"),
            ("move-backs", "move-backs"),
            ("local reads", "local reads"),
            ("local writes", "local writes"),
            ("copies made", "copies made"),
            ("copy reads", "copy reads"),
            ("copies invalidated", "copies invalidated"),
            ("rpcs sent", "rpcs sent"),
            ("rpcs served", "rpcs served"),
        ],
    ),
    (
        "log",
        &[
            ("log entries appended", "entries appended"),
            ("log batches appended", "batches appended"),
            ("log entries replayed", "entries replayed"),
        ],
    ),
];

/// What the less obvious counters mean, by their name in the report: the legend under
/// the counters, for those printed.
const LEGEND: &[(&str, &str)] = &[
    (
        "lines invalidated",
        "cache lines dropped so that a read sees memory",
    ),
    ("SCR atomics", "accesses to coherence records"),
    ("counter wraps", "record counters that went round"),
    ("churn", "records taken from another object"),
];

/// Columns of the legend before it wraps.
const LEGEND_WIDTH: usize = 92;

/// The report's name of the gauge of records in use now, and of records in the pod.
const RECORDS_IN_USE: &str = "records in use";
const RECORDS_IN_THE_POD: &str = "records in the pod";
/// The SCR part that holds the records.
const RECORDS_PART: &str = "coherence records";

/// Everything the report says about `run`: its throughput and latency
/// ([`MixRun::write_throughput`]), its counters, its SCR.
pub fn run_report(run: &MixRun) -> String {
    let mut out = String::new();
    // Writing to a `String` cannot fail.
    let _ = run.write_throughput(&mut out);
    out += &counters(&run.report, run.operations());
    out += &scr(&run.report);
    out
}

/// The counters of `report` that are not zero, in their groups, each also per operation
/// (of `operations`), and a legend of the less obvious ones.
pub fn counters(report: &Report, operations: u64) -> String {
    let mut rows: Vec<(&str, &str, &str, u64)> = Vec::new();
    for (group, members) in GROUPS {
        for (name, label) in *members {
            if let Some(value) = report.counter(name).filter(|&v| v > 0) {
                rows.push((group, name, label, value));
            }
        }
    }
    let listed = |name: &str| {
        GROUPS
            .iter()
            .any(|(_, m)| m.iter().any(|(n, _)| *n == name))
    };
    for (name, value) in &report.counters {
        if *value > 0 && !listed(name) {
            rows.push(("other", name, name, *value));
        }
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "what {} did over the run (the counters that are not 0):",
        report.scheme
    );
    let _ = writeln!(
        out,
        "  {:<11} {:<20} {:>14} {:>8}",
        "", "", "count", "per op"
    );
    let operations = operations.max(1) as f64;
    let mut last_group = "";
    for (group, _, label, value) in &rows {
        let shown = if *group == last_group { "" } else { group };
        last_group = group;
        let _ = writeln!(
            out,
            "  {shown:<11} {label:<20} {value:>14} {:>8}",
            per_operation(*value as f64 / operations)
        );
    }
    if rows.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    let legend: Vec<String> = LEGEND
        .iter()
        .filter(|(name, _)| rows.iter().any(|(_, n, _, _)| n == name))
        .map(|(name, meaning)| {
            let label = rows
                .iter()
                .find(|(_, n, _, _)| n == name)
                .map_or(*name, |(_, _, label, _)| *label);
            format!("{label}: {meaning}")
        })
        .collect();
    if !legend.is_empty() {
        out += &wrap(&legend.join("; "), "  (", LEGEND_WIDTH);
        out.pop();
        out += ")\n";
    }
    out
}

/// A count per operation in a few digits: `1.371`, `0.0070`, `1.9e-5`.
fn per_operation(ratio: f64) -> String {
    if ratio == 0.0 {
        "0".to_owned()
    } else if ratio >= 0.1 {
        format!("{ratio:.3}")
    } else if ratio >= 0.001 {
        format!("{ratio:.4}")
    } else {
        format!("{ratio:.1e}")
    }
}

/// `text` in lines of at most `width` columns (a longer word stays whole), the first
/// after `first_indent`, the others indented as far.
fn wrap(text: &str, first_indent: &str, width: usize) -> String {
    let indent = " ".repeat(first_indent.len());
    let mut out = String::new();
    let mut line = first_indent.to_owned();
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            out += &line;
            out.push('\n');
            line = indent.clone();
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line += word;
    }
    out += &line;
    out.push('\n');
    out
}

/// Where the SCR went: the coherence records as how many are reserved (the record array
/// is sized when the pod is made) and how many are in use now, then every other part
/// that holds bytes.
pub fn scr(report: &Report) -> String {
    let total: u64 = report.scr.iter().map(|(_, bytes)| bytes).sum();
    let percent = |bytes: u64| bytes as f64 * 100.0 / total.max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(out, "SCR (the coherent memory, {}):", bytes(total));
    let mut rest = Vec::new();
    for &(part, part_bytes) in &report.scr {
        let records = report
            .counter(RECORDS_IN_THE_POD)
            .zip(report.counter(RECORDS_IN_USE));
        match records {
            Some((reserved, in_use)) if part == RECORDS_PART => {
                let _ = writeln!(
                    out,
                    "  {part}: {reserved} reserved ({:.1}% of SCR), {in_use} in use now ({:.1}%)",
                    percent(part_bytes),
                    in_use as f64 * 100.0 / reserved.max(1) as f64
                );
            }
            _ if part_bytes > 0 => rest.push(format!("{part} {}", bytes(part_bytes))),
            _ => {}
        }
    }
    if !rest.is_empty() {
        let _ = writeln!(out, "  the rest: {}", rest.join(", "));
    }
    // A pod whose record width switched (`--adaptive-width`).
    if let (Some(bits), Some(switches @ 1..)) = (
        report.counter("record bits"),
        report.counter("record width switches"),
    ) {
        let _ = writeln!(
            out,
            "  record width: {bits} bits now, after {switches} switch{}",
            if switches == 1 { "" } else { "es" }
        );
    }
    out
}

/// `bytes` in the largest binary unit that leaves it whole, or in bytes.
fn bytes(bytes: u64) -> String {
    match bytes {
        0 => "0 B".to_owned(),
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(counters: Vec<(&'static str, u64)>) -> Report {
        Report {
            scheme: "megalon",
            counters,
            gauges: vec![(RECORDS_IN_USE, 187), (RECORDS_IN_THE_POD, 65_472)],
            scr: vec![
                ("log cursors", 576),
                ("host table", 192),
                ("application", 0),
                (RECORDS_PART, 1_047_552),
                ("reclaimer", 256),
                ("unused", 0),
            ],
        }
    }

    #[test]
    fn only_counters_that_are_not_zero_are_shown_in_their_groups() {
        let shown = counters(
            &report(vec![
                ("reads", 950),
                ("writes", 50),
                ("deletes", 0),
                ("SCR atomics", 2000),
                ("record allocs", 40),
                ("churn", 0),
                ("log entries appended", 40),
                ("something new", 3),
            ]),
            1000,
        );
        assert_eq!(
            shown,
            "what megalon did over the run (the counters that are not 0):\n\
             \x20                                           count   per op\n\
             \x20 operations  reads                           950    0.950\n\
             \x20             writes                           50   0.0500\n\
             \x20 protocol    SCR atomics                    2000    2.000\n\
             \x20 records     allocated                        40   0.0400\n\
             \x20 log         entries appended                 40   0.0400\n\
             \x20 other       something new                     3   0.0030\n\
             \x20 (SCR atomics: accesses to coherence records)\n"
        );
        assert!(!shown.contains("deletes") && !shown.contains("churn"));
    }

    #[test]
    fn a_long_legend_wraps_under_itself() {
        let shown = counters(
            &report(LEGEND.iter().map(|&(name, _)| (name, 1)).collect()),
            1,
        );
        let legend: Vec<&str> = shown
            .lines()
            .skip_while(|l| !l.starts_with("  ("))
            .collect();
        assert!(legend.len() > 1, "{shown}");
        assert!(legend.iter().all(|l| l.len() <= LEGEND_WIDTH), "{shown}");
        assert!(legend[1..].iter().all(|l| l.starts_with("   ")), "{shown}");
        let words = legend
            .join(" ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            words
                .starts_with("(lines invalidated: cache lines dropped so that a read sees memory;"),
            "{shown}"
        );
        assert!(
            words.ends_with("; churn: records taken from another object)"),
            "{shown}"
        );
    }

    #[test]
    fn the_records_part_says_reserved_and_in_use() {
        assert_eq!(
            scr(&report(vec![])),
            "SCR (the coherent memory, 1 MiB):\n\
             \x20 coherence records: 65472 reserved (99.9% of SCR), 187 in use now (0.3%)\n\
             \x20 the rest: log cursors 576 B, host table 192 B, reclaimer 256 B\n"
        );
    }

    #[test]
    fn per_operation_in_a_few_digits() {
        assert_eq!(per_operation(0.0), "0");
        assert_eq!(per_operation(1.3714), "1.371");
        assert_eq!(per_operation(0.007), "0.0070");
        assert_eq!(per_operation(0.0000187), "1.9e-5");
    }

    #[test]
    fn bytes_in_whole_units() {
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(3 << 10), "3 KiB");
        assert_eq!(bytes(576), "576 B");
        assert_eq!(bytes(0), "0 B");
    }
}
