//! `cargo xtask figures` (this binary, built in release): the paper's experiments rerun on this machine, scaled to fit.
//!
//! The paper's setup is 18M objects of 1 KiB, a 200 MB SCR, 3 hosts. Here the object
//! count is scaled down (1M by default, `--scale` multiplies it, `--quick` divides it)
//! and every size the paper ties to it is scaled by the same factor: the SCR, the
//! dataset sweeps, the SCR sweep. Ratios that decide the outcome stay the paper's:
//! dataset to SCR, object size, skew, write mix, key size, record width.
//!
//! Each figure writes a CSV and SVG charts into the output directory, and rows into
//! `summary.md` there: our ratio next to the paper's, with the counters per operation
//! that explain a difference.

mod numa;
mod plot;

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use megalon_bench::mix::{Choice, MixRun, Plan};
use megalon_workload::Workload;

use megalon_bench::lineup::{self as schemes, Kind, Setup};
use numa::Placement;
use plot::{Chart, Series};

/// The paper's object count and SCR size, which every size here is scaled from.
const PAPER_OBJECTS: f64 = 18e6;
const PAPER_SCR_BYTES: f64 = 200e6;
/// Objects at the default scale.
const DEFAULT_OBJECTS: f64 = 1e6;
/// Objects with `--quick`.
const QUICK_OBJECTS: f64 = 40e3;

const HOSTS: usize = 3;
/// The paper's key size ("each object has a 24-byte key").
const KEY_BYTES: usize = 24;
const VALUE_BYTES: usize = 1020; // with the 4-byte length: 1 KiB objects
const PAGE_VALUE_BYTES: usize = 4092; // 4 KiB page objects

/// The command line.
struct Args {
    quick: bool,
    scale: f64,
    numa: bool,
    only: Option<Vec<String>>,
    out: Option<PathBuf>,
    seconds: Option<f64>,
    threads_per_host: usize,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let mut parsed = Args {
            quick: false,
            scale: 1.0,
            numa: false,
            only: None,
            out: None,
            seconds: None,
            threads_per_host: 2,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "--quick" => parsed.quick = true,
                "--numa" => parsed.numa = true,
                "--scale" => {
                    let v = value("--scale")?;
                    parsed.scale = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s > 0.0)
                        .ok_or_else(|| format!("--scale {v}: not a positive number"))?;
                }
                "--only" => {
                    let v = value("--only")?;
                    parsed.only = Some(v.split(',').map(|s| s.trim().to_string()).collect());
                }
                "--out" => parsed.out = Some(PathBuf::from(value("--out")?)),
                "--seconds" => {
                    let v = value("--seconds")?;
                    parsed.seconds = Some(
                        v.parse()
                            .ok()
                            .filter(|s: &f64| s.is_finite() && *s > 0.0)
                            .ok_or_else(|| format!("--seconds {v}: not a positive number"))?,
                    );
                }
                "--threads" => {
                    let v = value("--threads")?;
                    parsed.threads_per_host = v
                        .parse()
                        .ok()
                        .filter(|t| *t > 0)
                        .ok_or_else(|| format!("--threads {v}: not a positive count"))?;
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(parsed)
    }
}

/// One measured point.
#[derive(Clone, Debug)]
struct Measured {
    scheme: &'static str,
    /// The series within the panel (the scheme, or the scheme and a variant).
    series: String,
    x: f64,
    x_name: String,
    ops_per_second: f64,
    mean_latency_us: f64,
    p99_latency_us: f64,
    operations: u64,
    /// Every counter of the scheme over the run, per operation.
    per_op: Vec<(&'static str, f64)>,
}

impl Measured {
    fn from_run(
        scheme: &'static str,
        series: String,
        x: f64,
        x_name: String,
        run: &MixRun,
    ) -> Self {
        let mut latency = run.get_latency();
        latency.merge(&run.put_latency());
        let operations = run.operations().max(1);
        Measured {
            scheme,
            series,
            x,
            x_name,
            ops_per_second: run.ops_per_second(),
            mean_latency_us: latency.mean().as_secs_f64() * 1e6,
            p99_latency_us: latency.quantile(0.99).as_secs_f64() * 1e6,
            operations: run.operations(),
            per_op: run
                .report
                .counters
                .iter()
                .map(|&(name, v)| (name, v as f64 / operations as f64))
                .collect(),
        }
    }

    fn per_op(&self, name: &str) -> f64 {
        self.per_op
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Churns per operation, in the paper's sense ([`Kind::churn_counter`]).
    fn churn(&self) -> f64 {
        self.per_op(Kind::named(self.scheme).map_or("churn", Kind::churn_counter))
    }
}

/// A row of the summary: our ratio beside the paper's.
struct Row {
    figure: &'static str,
    what: String,
    ours: String,
    paper: &'static str,
    explain: String,
}

/// The run: sizes, where things go, what was measured so far.
struct Harness {
    objects: f64,
    seconds: f64,
    threads_per_host: usize,
    placement: Option<Placement>,
    out: PathBuf,
    /// Counting runs only (to size the progress bar): nothing is built or written.
    dry: bool,
    runs: u64,
    bar: ProgressBar,
    rows: Vec<Row>,
}

impl Harness {
    fn factor(&self) -> f64 {
        self.objects / PAPER_OBJECTS
    }

    /// The paper's object count `paper` scaled.
    fn objects(&self, paper: f64) -> u64 {
        ((paper * self.factor()).round() as u64).max(64)
    }

    /// The paper's SCR size `paper_mb` (in MB) scaled, in whole pages.
    fn scr(&self, paper_mb: f64) -> u64 {
        ((paper_mb * 1e6 * self.factor()) as u64)
            .next_multiple_of(4096)
            .max(8 << 10)
    }

    fn setup(&self, keys: u64) -> Setup {
        Setup {
            hosts: HOSTS,
            keys,
            extra_keys: 0,
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
            scr_bytes: self.scr(PAPER_SCR_BYTES / 1e6),
            record_bits: 32,
            numa_node: self.placement.as_ref().map(|p| p.pod_node),
            partition_after: 0,
            copy_after: 0,
        }
    }

    fn plan(setup: &Setup, choice: Choice) -> Plan {
        Plan {
            keys: setup.keys,
            key_bytes: setup.key_bytes,
            value_bytes: setup.value_bytes,
            choice,
            seed: 0x00f1_9e5e,
        }
    }

    /// Builds `kind` over `setup`, loads it, and runs each plan in order on it.
    fn measure(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[(f64, String, Plan)],
    ) -> Result<Vec<Measured>, String> {
        self.measure_threads(kind, setup, series, plans, HOSTS * self.threads_per_host)
    }

    /// [`measure`](Self::measure) for each of `kinds` in turn, each its own series.
    fn measure_each(
        &mut self,
        kinds: &[Kind],
        setup: &Setup,
        plans: &[(f64, String, Plan)],
    ) -> Result<Vec<Measured>, String> {
        let mut points = Vec::new();
        for &kind in kinds {
            points.extend(self.measure(kind, setup, kind.name(), plans)?);
        }
        Ok(points)
    }

    fn measure_threads(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[(f64, String, Plan)],
        workers: usize,
    ) -> Result<Vec<Measured>, String> {
        if self.dry {
            self.runs += plans.len() as u64;
            return Ok(plans
                .iter()
                .map(|(x, x_name, _)| Measured {
                    scheme: kind.name(),
                    series: series.into(),
                    x: *x,
                    x_name: x_name.clone(),
                    ops_per_second: 0.0,
                    mean_latency_us: 0.0,
                    p99_latency_us: 0.0,
                    operations: 0,
                    per_op: Vec::new(),
                })
                .collect());
        }
        let placement = self.placement.clone();
        let pin = move |host: usize| {
            if let Some(p) = &placement {
                p.pin(host);
            }
        };
        self.bar
            .set_message(format!("{series}: loading {} keys", setup.keys));
        let bench = schemes::build(kind, setup)?;
        let first = &plans.first().expect("a plan").2;
        bench.load(first, workers, &pin)?;
        let mut out = Vec::new();
        for (x, x_name, plan) in plans {
            self.bar
                .set_message(format!("{series}: {x_name}, {}", plan.describe()));
            let duration = Duration::from_secs_f64(self.seconds);
            let run = bench.run(plan, workers, duration, &pin, &mut |_, _| {})?;
            out.push(Measured::from_run(
                bench.name(),
                series.into(),
                *x,
                x_name.clone(),
                &run,
            ));
            self.bar.inc(1);
        }
        Ok(out)
    }

    /// Writes a panel's CSV and charts.
    fn panel(
        &self,
        panel: Panel<'_>,
        points: &[Measured],
        charts: &[Plotted],
    ) -> Result<(), String> {
        if self.dry {
            return Ok(());
        }
        let mut csv = String::from(
            "series,scheme,x,x_name,ops_per_second,mean_latency_us,p99_latency_us,operations",
        );
        let counter_names: Vec<&str> = points
            .first()
            .map(|p| p.per_op.iter().map(|(n, _)| *n).collect())
            .unwrap_or_default();
        let all_names: Vec<&str> = {
            let mut names = counter_names.clone();
            for p in points {
                for (n, _) in &p.per_op {
                    if !names.contains(n) {
                        names.push(n);
                    }
                }
            }
            names
        };
        for name in &all_names {
            let _ = write!(csv, ",{} per op", name);
        }
        csv.push('\n');
        for p in points {
            let _ = write!(
                csv,
                "{},{},{},{},{:.0},{:.3},{:.3},{}",
                p.series,
                p.scheme,
                p.x,
                p.x_name,
                p.ops_per_second,
                p.mean_latency_us,
                p.p99_latency_us,
                p.operations
            );
            for name in &all_names {
                let _ = write!(csv, ",{:.6}", p.per_op(name));
            }
            csv.push('\n');
        }
        let path = self.out.join(format!("{}.csv", panel.stem));
        fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
        for plotted in charts {
            let mut series: Vec<Series> = Vec::new();
            for p in points {
                let point = (p.x, (plotted.value)(p));
                match series.iter_mut().find(|s| s.name == p.series) {
                    Some(s) => s.points.push(point),
                    None => series.push(Series {
                        name: p.series.clone(),
                        points: vec![point],
                    }),
                }
            }
            let path = self
                .out
                .join(format!("{}{}.svg", panel.stem, plotted.suffix));
            let chart = Chart {
                title: panel.title,
                x_label: panel.x_label,
                y_label: plotted.y_label,
                categories: panel.categories,
                log_x: panel.log_x,
            };
            plot::draw(&path, &chart, &series).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn row(
        &mut self,
        figure: &'static str,
        what: impl Into<String>,
        ours: String,
        paper: &'static str,
        explain: String,
    ) {
        if !self.dry {
            self.rows.push(Row {
                figure,
                what: what.into(),
                ours,
                paper,
                explain,
            });
        }
    }
}

/// What a panel is: its files' stem, its charts' title and x axis.
struct Panel<'a> {
    stem: &'a str,
    title: &'a str,
    x_label: &'a str,
    log_x: bool,
    /// Names of the x values, for bar charts.
    categories: Option<&'a [String]>,
}

/// One chart of a panel: its file suffix, its y axis, the value it plots.
struct Plotted {
    suffix: &'static str,
    y_label: &'static str,
    value: fn(&Measured) -> f64,
}

const THROUGHPUT: Plotted = Plotted {
    suffix: "",
    y_label: "operations per second",
    value: |m| m.ops_per_second,
};
const LATENCY: Plotted = Plotted {
    suffix: "_latency",
    y_label: "mean latency (us)",
    value: |m| m.mean_latency_us,
};
const CHURN: Plotted = Plotted {
    suffix: "_churn",
    y_label: "churns per operation",
    value: |m| m.churn(),
};

/// `a / b` as `"4.2x"`.
fn ratio(a: f64, b: f64) -> String {
    if b <= 0.0 {
        "n/a".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

fn find<'a>(points: &'a [Measured], scheme: &str, x: f64) -> Option<&'a Measured> {
    points.iter().find(|p| p.scheme == scheme && p.x == x)
}

/// The point of series `series` at `x` (for panels with two series of one scheme).
fn find_series<'a>(points: &'a [Measured], series: &str, x: f64) -> Option<&'a Measured> {
    points.iter().find(|p| p.series == series && p.x == x)
}

/// The counters per operation that explain a comparison, for the summary.
fn explain(points: &[&Measured]) -> String {
    points
        .iter()
        .map(|p| {
            let mut parts = vec![format!("churn {:.3}", p.churn())];
            for name in [
                "rpcs",
                "rpcs sent",
                "moves to a host",
                "move-backs",
                "local reads",
                "copy reads",
                "lines invalidated",
                "SCR atomics",
                "scr atomics",
                "log entries appended",
                "log entries replayed",
            ] {
                let v = p.per_op(name);
                if v > 0.0 {
                    parts.push(format!("{name} {v:.2}"));
                }
            }
            format!("{} at {}: {}", p.series, p.x_name, parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

type Figure = fn(&mut Harness) -> Result<(), String>;

const FIGURES: &[(&str, &str, Figure)] = &[
    ("4", "threads, read-only", figure_4),
    ("5", "dataset size, read-only", figure_5),
    ("6", "dataset size, 5% and 50% writes", figure_6),
    ("7", "SCR size sweep", figure_7),
    ("8", "cost of one churn", figure_8),
    ("9", "key size", figure_9),
    ("10", "record width", figure_10),
    ("11", "shared ratio, local partitions", figure_11),
    ("12", "local copies", figure_12),
    ("13", "AllLog", figure_13),
    ("14", "YCSB A/B/C/D/F", figure_14),
    ("15", "page-sized objects", figure_15),
    ("peers", "the KV store beside LMDB and Redis", peers),
];

const USAGE: &str =
    "usage: cargo xtask figures [--quick] [--scale F] [--only 4,7,...] [--seconds S]
                            [--threads PER_HOST] [--out DIR] [--numa]

  --quick     every figure at 1/25 of the default size, 0.3 s per run (a few minutes)
  --scale F   F times the default size (1M objects, 1/18 of the paper's 18M)
  --only      some figures: 4 5 6 7 8 9 10 11 12 13 14 15 peers
  --seconds   seconds per run (default 3; 0.3 with --quick)
  --threads   threads per host (default 2; 3 hosts)
  --out       where CSV, SVG and summary.md go (default docs/figures; target/figures-quick
              with --quick)
  --numa      bind the pod to the first NUMA node and each host's threads to another
              node's CPUs (a single-node machine says so and runs unpinned)";

fn main() -> ExitCode {
    // The peers' child processes are this binary too.
    megalon_peers::run_child_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match Args::parse(&args) {
        Ok(args) if run(&args) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Runs the figures; returns whether all of them ran.
fn run(args: &Args) -> bool {
    let objects = if args.quick {
        QUICK_OBJECTS
    } else {
        DEFAULT_OBJECTS
    } * args.scale;
    let seconds = args.seconds.unwrap_or(if args.quick { 0.3 } else { 3.0 });
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(if args.quick {
            "target/figures-quick"
        } else {
            "docs/figures"
        })
    });
    let placement = if args.numa {
        match Placement::detect() {
            Ok(p) => {
                println!("--numa: {}", p.describe());
                Some(p)
            }
            Err(why) => {
                println!("--numa: {why}");
                None
            }
        }
    } else {
        None
    };
    let selected: Vec<&(&str, &str, Figure)> = FIGURES
        .iter()
        .filter(|(id, _, _)| args.only.as_ref().is_none_or(|o| o.iter().any(|s| s == id)))
        .collect();
    if selected.is_empty() {
        eprintln!("--only names no figure (figures: 4 5 6 7 8 9 10 13 14 15 peers)");
        return false;
    }
    if let Err(e) = fs::create_dir_all(&out) {
        eprintln!("{}: {e}", out.display());
        return false;
    }
    let mut h = Harness {
        objects,
        seconds,
        threads_per_host: args.threads_per_host,
        placement,
        out: out.clone(),
        dry: true,
        runs: 0,
        bar: ProgressBar::hidden(),
        rows: Vec::new(),
    };
    for (_, _, figure) in &selected {
        figure(&mut h).expect("counting runs builds nothing");
    }
    let total = h.runs;
    h.dry = false;
    h.bar = ProgressBar::new(total);
    h.bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    println!(
        "figures: {} objects (paper 18M; factor 1/{:.0}), SCR {} KB (paper 200 MB), {} s per \
         run, {} hosts x {} threads, {} runs, into {}",
        h.objects(PAPER_OBJECTS),
        1.0 / h.factor(),
        h.scr(200.0) / 1000,
        seconds,
        HOSTS,
        args.threads_per_host,
        total,
        out.display()
    );
    let started = Instant::now();
    let mut ok = true;
    for (id, name, figure) in &selected {
        let began = Instant::now();
        match figure(&mut h) {
            Ok(()) => h.bar.suspend(|| {
                println!(
                    "figure {id} ({name}): done in {:.1} s",
                    began.elapsed().as_secs_f64()
                )
            }),
            Err(e) => {
                h.bar
                    .suspend(|| println!("figure {id} ({name}): FAILED: {e}"));
                ok = false;
            }
        }
    }
    h.bar.finish_and_clear();
    let mut summary = format!(
        "# Figures at {} objects ({} s per run, {} hosts x {} threads)\n\n\
         | figure | comparison | ours | paper | counters per operation |\n\
         | --- | --- | --- | --- | --- |\n",
        h.objects(PAPER_OBJECTS),
        seconds,
        HOSTS,
        args.threads_per_host
    );
    for r in &h.rows {
        let _ = writeln!(
            summary,
            "| {} | {} | {} | {} | {} |",
            r.figure, r.what, r.ours, r.paper, r.explain
        );
    }
    print!("\n{summary}");
    let path = out.join("summary.md");
    if let Err(e) = fs::write(&path, &summary) {
        eprintln!("{}: {e}", path.display());
        ok = false;
    }
    println!(
        "\nfigures: {} in {:.1} s; CSV, SVG and summary.md in {}",
        if ok { "all ran" } else { "SOME FAILED" },
        started.elapsed().as_secs_f64(),
        out.display()
    );
    ok
}

/// Read-only, 5% and 50% writes at zipf 0.99, at x = 0, 1, 2 (Figures 13 and 15).
fn write_mixes(setup: &Setup) -> Vec<(f64, String, Plan)> {
    [0.0, 0.05, 0.5]
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            (
                i as f64,
                format!("{}% writes", w * 100.0),
                Harness::plan(setup, writes(w, 0.99)),
            )
        })
        .collect()
}

fn read_only(skew: f64) -> Choice {
    Choice::Mix {
        write_ratio: 0.0,
        skew,
    }
}

fn writes(write_ratio: f64, skew: f64) -> Choice {
    Choice::Mix { write_ratio, skew }
}

/// Figure 4: throughput and latency as threads grow, read-only, 18M objects.
fn figure_4(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plan = Harness::plan(&setup, read_only(0.99));
    let threads: &[usize] = if h.seconds < 1.0 { &[1, 2] } else { &[1, 2, 4] };
    let mut points = Vec::new();
    for kind in [
        Kind::Megalon,
        Kind::HcMeta,
        Kind::HcMetaLocal,
        Kind::HcMetaUnlimited,
    ] {
        for &per_host in threads {
            let workers = HOSTS * per_host;
            let plans = [(workers as f64, format!("{workers} threads"), plan)];
            points.extend(h.measure_threads(kind, &setup, kind.name(), &plans, workers)?);
        }
    }
    h.panel(
        Panel {
            stem: "figure_4",
            title: "Figure 4: read-only, threads",
            x_label: "threads",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, LATENCY],
    )?;
    let most = (HOSTS * threads[threads.len() - 1]) as f64;
    if let (Some(m), Some(hc), Some(un)) = (
        find(&points, "megalon", most),
        find(&points, "hcmeta", most),
        find(&points, "hcmeta-unlimited", most),
    ) {
        h.row(
            "4",
            format!("read-only, {most} threads: megalon / hcmeta"),
            ratio(m.ops_per_second, hc.ops_per_second),
            "HCMeta and HCMeta-Local do not scale (churn); no figure given",
            explain(&[m, hc]),
        );
        h.row(
            "4",
            format!("read-only, {most} threads: megalon / hcmeta-unlimited"),
            ratio(m.ops_per_second, un.ops_per_second),
            "> 1 (local index vs shared metadata); no figure given",
            explain(&[m, un]),
        );
    }
    Ok(())
}

/// Dataset sizes of figures 5 and 6, in the paper's objects.
const DATASETS: [f64; 5] = [1.5e6, 3e6, 6e6, 12e6, 24e6];

fn datasets(h: &Harness) -> &'static [f64] {
    if h.seconds < 1.0 {
        &[1.5e6, 6e6, 24e6]
    } else {
        &DATASETS
    }
}

/// Figure 5: read-only as the dataset grows: throughput, latency, normalized churn.
fn figure_5(h: &mut Harness) -> Result<(), String> {
    let mut points = Vec::new();
    for kind in [Kind::Megalon, Kind::HcMeta, Kind::HcMetaLocal] {
        for &paper in datasets(h) {
            let setup = h.setup(h.objects(paper));
            let plans = [(
                paper / 1e6,
                format!("{}M objects (paper)", paper / 1e6),
                Harness::plan(&setup, read_only(0.99)),
            )];
            points.extend(h.measure(kind, &setup, kind.name(), &plans)?);
        }
    }
    h.panel(
        Panel {
            stem: "figure_5",
            title: "Figure 5: read-only, dataset size",
            x_label: "dataset (paper's M objects)",
            log_x: true,
            categories: None,
        },
        &points,
        &[THROUGHPUT, LATENCY, CHURN],
    )?;
    let (small, large) = (
        datasets(h)[0] / 1e6,
        datasets(h)[datasets(h).len() - 1] / 1e6,
    );
    for (x, paper) in [
        (small, "1.2x (no churn anywhere)"),
        (large, "15.25x (24.4 vs 1.6 M ops/s at 24M)"),
    ] {
        if let (Some(m), Some(hc)) = (find(&points, "megalon", x), find(&points, "hcmeta", x)) {
            h.row(
                "5",
                format!("read-only, {x}M objects: megalon / hcmeta"),
                ratio(m.ops_per_second, hc.ops_per_second),
                paper,
                explain(&[m, hc]),
            );
        }
    }
    Ok(())
}

/// Figure 6: 5% and 50% writes as the dataset grows.
fn figure_6(h: &mut Harness) -> Result<(), String> {
    for (stem, write_ratio, paper) in [
        ("figure_6a", 0.05, "10x at 24M objects"),
        ("figure_6b", 0.5, "4x"),
    ] {
        let mut points = Vec::new();
        for kind in [Kind::Megalon, Kind::HcMeta] {
            for &objects in datasets(h) {
                let setup = h.setup(h.objects(objects));
                let plans = [(
                    objects / 1e6,
                    format!("{}M objects (paper)", objects / 1e6),
                    Harness::plan(&setup, writes(write_ratio, 0.99)),
                )];
                points.extend(h.measure(kind, &setup, kind.name(), &plans)?);
            }
        }
        let title = format!("Figure 6: {}% writes, dataset size", write_ratio * 100.0);
        h.panel(
            Panel {
                stem,
                title: &title,
                x_label: "dataset (paper's M objects)",
                log_x: true,
                categories: None,
            },
            &points,
            &[THROUGHPUT, CHURN],
        )?;
        let large = datasets(h)[datasets(h).len() - 1] / 1e6;
        if let (Some(m), Some(hc)) = (
            find(&points, "megalon", large),
            find(&points, "hcmeta", large),
        ) {
            h.row(
                "6",
                format!(
                    "{}% writes, {large}M objects: megalon / hcmeta",
                    write_ratio * 100.0
                ),
                ratio(m.ops_per_second, hc.ops_per_second),
                paper,
                explain(&[m, hc]),
            );
        }
    }
    Ok(())
}

/// Figure 7: the SCR size sweep at 18M objects, 5% and 50% writes, skew 0.99 and 0.7.
fn figure_7(h: &mut Harness) -> Result<(), String> {
    let sizes: &[f64] = if h.seconds < 1.0 {
        &[32.0, 128.0, 512.0]
    } else {
        &[32.0, 64.0, 128.0, 256.0, 512.0, 1024.0]
    };
    for (stem, write_ratio, skew) in [
        ("figure_7a_i", 0.05, 0.99),
        ("figure_7a_ii", 0.05, 0.7),
        ("figure_7b_i", 0.5, 0.99),
        ("figure_7b_ii", 0.5, 0.7),
    ] {
        let mut points = Vec::new();
        for kind in [Kind::Megalon, Kind::HcMeta] {
            for &mb in sizes {
                let mut setup = h.setup(h.objects(PAPER_OBJECTS));
                setup.scr_bytes = h.scr(mb);
                let plans = [(
                    mb,
                    format!("SCR {mb} MB (paper)"),
                    Harness::plan(&setup, writes(write_ratio, skew)),
                )];
                points.extend(h.measure(kind, &setup, kind.name(), &plans)?);
            }
        }
        let title = format!(
            "Figure 7: {}% writes, zipf {skew}, SCR size",
            write_ratio * 100.0
        );
        h.panel(
            Panel {
                stem,
                title: &title,
                x_label: "SCR (paper's MB)",
                log_x: true,
                categories: None,
            },
            &points,
            &[THROUGHPUT, CHURN],
        )?;
        let at = if sizes.contains(&64.0) { 64.0 } else { 32.0 };
        if let (Some(m), Some(hc)) = (find(&points, "megalon", at), find(&points, "hcmeta", at)) {
            let paper = if write_ratio < 0.1 && skew > 0.9 {
                "11x at 64 MB; megalon flat down to 128 MB, HCMeta needs > 512 MB"
            } else {
                "megalon ahead at every size; no figure given"
            };
            h.row(
                "7",
                format!(
                    "{}% writes, zipf {skew}, SCR {at} MB: megalon / hcmeta",
                    write_ratio * 100.0
                ),
                ratio(m.ops_per_second, hc.ops_per_second),
                paper,
                explain(&[m, hc]),
            );
        }
    }
    Ok(())
}

/// Figure 8: what one churn costs each scheme. Each runs the same workload (5% writes,
/// zipf 0.99, 18M objects) twice, once churning and once not (megalon: a fresh store,
/// then the same store again; HCMeta: the paper's 200 MB SCR, and no budget). The extra
/// mean latency over the extra churns per operation is the cost of one churn, under the
/// same threads and load as every other figure.
fn figure_8(h: &mut Harness) -> Result<(), String> {
    let keys = h.objects(PAPER_OBJECTS);
    let choice = writes(0.05, 0.99);
    let mut points = Vec::new();
    let mut csv = String::from(
        "scheme,latency_without_us,latency_with_us,churn_without,churn_with,per_churn_us\n",
    );
    for (i, kind) in [Kind::Megalon, Kind::HcMeta].into_iter().enumerate() {
        let tight = h.setup(keys);
        let mut ample = tight;
        ample.scr_bytes = (keys * 4 + (256 << 10)).next_multiple_of(4096);
        let (without, with) = if kind == Kind::Megalon {
            // megalon churns when an object is first written (a record allocation), at
            // any SCR size: the first run on a fresh store churns, a second run on the
            // same store finds the records in place. Records for every object, so
            // neither run frees one.
            let plans = [
                (1.0, "first run".to_string(), Harness::plan(&ample, choice)),
                (0.0, "second run".to_string(), Harness::plan(&ample, choice)),
            ];
            let runs = h.measure(kind, &ample, kind.name(), &plans)?;
            (runs[1].clone(), runs[0].clone())
        } else {
            // HCMeta churns when the budget is too small: without a budget it never does.
            let plan = [(0.0, "no budget".to_string(), Harness::plan(&ample, choice))];
            let without = h.measure(Kind::HcMetaUnlimited, &ample, kind.name(), &plan)?;
            let plan = [(
                1.0,
                "paper's SCR".to_string(),
                Harness::plan(&tight, choice),
            )];
            let with = h.measure(kind, &tight, kind.name(), &plan)?;
            (without[0].clone(), with[0].clone())
        };
        let (a, b) = (without, with);
        let extra_churn = b.churn() - a.churn();
        let cost = if extra_churn > 0.0 {
            (b.mean_latency_us - a.mean_latency_us) / extra_churn
        } else {
            0.0
        };
        let _ = writeln!(
            csv,
            "{},{:.3},{:.3},{:.5},{:.5},{:.3}",
            kind.name(),
            a.mean_latency_us,
            b.mean_latency_us,
            a.churn(),
            b.churn(),
            cost
        );
        points.push((kind, i, cost, a, b));
    }
    if h.dry {
        return Ok(());
    }
    let path = h.out.join("figure_8.csv");
    fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
    let categories: Vec<String> = points.iter().map(|p| p.0.name().to_string()).collect();
    let series = vec![Series {
        name: "microseconds per churn".into(),
        points: points.iter().map(|p| (p.1 as f64, p.2)).collect(),
    }];
    let path = h.out.join("figure_8.svg");
    plot::draw(
        &path,
        &Chart {
            title: "Figure 8: cost of one churn",
            x_label: "scheme",
            y_label: "microseconds per churn",
            categories: Some(&categories),
            log_x: false,
        },
        &series,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let (m, hc) = (&points[0], &points[1]);
    h.row(
        "8",
        "one churn: hcmeta / megalon (microseconds of latency per churn)",
        format!("{} ({:.2} vs {:.2} us)", ratio(hc.2, m.2), hc.2, m.2),
        "HCMeta's churn (an RPC to the owner) costs more; Tigon's artifact ~55 us",
        explain(&[&m.3, &m.4, &hc.3, &hc.4]),
    );
    Ok(())
}

/// Figure 9: key size, read-only, 4.8M objects.
fn figure_9(h: &mut Harness) -> Result<(), String> {
    let sizes: &[usize] = if h.seconds < 1.0 {
        &[16, 50, 90]
    } else {
        &[16, 30, 50, 70, 90]
    };
    let mut points = Vec::new();
    for kind in [Kind::Megalon, Kind::HcMeta] {
        for &key_bytes in sizes {
            let mut setup = h.setup(h.objects(4.8e6));
            setup.key_bytes = key_bytes;
            let plans = [(
                key_bytes as f64,
                format!("{key_bytes} B keys"),
                Harness::plan(&setup, read_only(0.99)),
            )];
            points.extend(h.measure(kind, &setup, kind.name(), &plans)?);
        }
    }
    h.panel(
        Panel {
            stem: "figure_9",
            title: "Figure 9: read-only, key size",
            x_label: "key bytes",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    let (lo, hi) = (sizes[0] as f64, sizes[sizes.len() - 1] as f64);
    if let (Some(m0), Some(m1), Some(h0), Some(h1)) = (
        find(&points, "megalon", lo),
        find(&points, "megalon", hi),
        find(&points, "hcmeta", lo),
        find(&points, "hcmeta", hi),
    ) {
        h.row(
            "9",
            format!("megalon at {hi} B / at {lo} B keys"),
            ratio(m1.ops_per_second, m0.ops_per_second),
            "~1 (the index is not in SCR)",
            explain(&[m0, m1]),
        );
        h.row(
            "9",
            format!("hcmeta at {hi} B / at {lo} B keys"),
            ratio(h1.ops_per_second, h0.ops_per_second),
            "< 1 (inline keys fill the SCR: more churn)",
            explain(&[h0, h1]),
        );
    }
    Ok(())
}

/// Figure 10: record width, 50% writes, zipf 0.7, SCR 32 MB, 18M objects.
fn figure_10(h: &mut Harness) -> Result<(), String> {
    let mut points = Vec::new();
    for bits in [32u32, 16, 8] {
        let mut setup = h.setup(h.objects(PAPER_OBJECTS));
        setup.scr_bytes = h.scr(32.0);
        setup.record_bits = bits;
        let plans = [(
            f64::from(bits),
            format!("{bits}-bit records"),
            Harness::plan(&setup, writes(0.5, 0.7)),
        )];
        points.extend(h.measure(Kind::Megalon, &setup, "megalon", &plans)?);
    }
    h.panel(
        Panel {
            stem: "figure_10",
            title: "Figure 10: 50% writes, zipf 0.7, SCR 32 MB, record width",
            x_label: "record bits",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    if let (Some(w32), Some(w8)) = (
        find(&points, "megalon", 32.0),
        find(&points, "megalon", 8.0),
    ) {
        h.row("10", "8-bit / 32-bit records (50% writes, zipf 0.7, SCR 32 MB)", ratio(w8.ops_per_second, w32.ops_per_second), "> 1: 8-bit records all fit and match Figure 7(b)(ii)'s best; below 8 bits wraps hurt (not supported here)", explain(&[w32, w8]));
    }
    Ok(())
}

/// Figure 13: megalon against AllLog at 0, 5 and 50% writes.
fn figure_13(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plans = write_mixes(&setup);
    let points = h.measure_each(&[Kind::Megalon, Kind::AllLog], &setup, &plans)?;
    let categories: Vec<String> = plans.iter().map(|p| p.1.clone()).collect();
    h.panel(
        Panel {
            stem: "figure_13",
            title: "Figure 13: megalon vs AllLog",
            x_label: "write mix",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    for (x, paper) in [(0.0, "~1x (no locks, no counters)"), (2.0, "4.14x")] {
        if let (Some(m), Some(a)) = (find(&points, "megalon", x), find(&points, "all-log", x)) {
            h.row(
                "13",
                format!("{}: megalon / all-log", categories[x as usize]),
                ratio(m.ops_per_second, a.ops_per_second),
                paper,
                explain(&[m, a]),
            );
        }
    }
    Ok(())
}

/// x of a warm-up run, whose point is dropped: objects move to their hosts' DRAM, and
/// copies are made, only after some accesses.
const WARM_UP: f64 = -1.0;

/// Runs each of `plans` on `kind` over `setup` as series `series`, each on a store of
/// its own (built and loaded afresh: where objects sit depends on the plans before) and
/// after a warm-up run of itself (objects settle where the plan puts them), and drops
/// the warm-ups' points.
fn measure_warm(
    h: &mut Harness,
    kind: Kind,
    setup: &Setup,
    series: &str,
    plans: &[(f64, String, Plan)],
) -> Result<Vec<Measured>, String> {
    let mut points = Vec::new();
    for plan in plans {
        let warm = [
            (WARM_UP, format!("{} (warm-up)", plan.1), plan.2),
            plan.clone(),
        ];
        points.extend(h.measure(kind, setup, series, &warm)?);
    }
    Ok(points.into_iter().filter(|p| p.x != WARM_UP).collect())
}

/// Figure 11: read-only Zipfian over partitioned data as the shared ratio grows: megalon
/// with local partitions (objects move to the DRAM of the host that keeps accessing
/// them) against HCMeta-Local (each owner's partition in its DRAM, shared objects copied
/// to CXL), and megalon without partitions for reference.
fn figure_11(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let ratios: &[f64] = if h.seconds < 1.0 {
        &[0.0, 0.2, 1.0]
    } else {
        &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    };
    let plans: Vec<(f64, String, Plan)> = ratios
        .iter()
        .map(|&shared_ratio| {
            (
                shared_ratio * 100.0,
                format!("{}% shared", shared_ratio * 100.0),
                Harness::plan(
                    &setup,
                    Choice::Partitioned {
                        shared_ratio,
                        skew: 0.99,
                    },
                ),
            )
        })
        .collect();
    let partitioned = Setup {
        partition_after: megalon_core::limits::DEFAULT_PARTITION_ACCESSES,
        ..setup
    };
    let mut points = measure_warm(h, Kind::Megalon, &partitioned, PARTITIONS, &plans)?;
    points.extend(measure_warm(
        h,
        Kind::HcMetaLocal,
        &setup,
        Kind::HcMetaLocal.name(),
        &plans,
    )?);
    points.extend(measure_warm(h, Kind::Megalon, &setup, "megalon", &plans)?);
    h.panel(
        Panel {
            stem: "figure_11",
            title: "Figure 11: read-only, shared ratio",
            x_label: "shared objects (%)",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    let last = ratios[ratios.len() - 1] * 100.0;
    for (x, paper) in [
        (
            0.0,
            "~1x (megalon matches HCMeta-Local when nothing is shared)",
        ),
        (20.0, "~1x (both local at low sharing)"),
        (
            last,
            "significantly > 1 (HCMeta-Local churns as sharing grows)",
        ),
    ] {
        if let (Some(m), Some(l)) = (
            find_series(&points, PARTITIONS, x),
            find(&points, "hcmeta-local", x),
        ) {
            h.row(
                "11",
                format!("{x}% shared: megalon + partitions / hcmeta-local"),
                ratio(m.ops_per_second, l.ops_per_second),
                paper,
                explain(&[m, l]),
            );
        }
    }
    Ok(())
}

/// The series of megalon with local partitions.
const PARTITIONS: &str = "megalon + partitions";
/// The series of megalon with local copies (MEGALON-DATA-COPY).
const COPIES: &str = "megalon + copies";
/// Reads from a host before it keeps a copy, in Figure 12.
const COPY_AFTER_READS: u32 = 4;

/// Figure 12: read-only Zipfian latency with and without local copies of read-shared
/// objects.
fn figure_12(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plans = [(
        0.0,
        "read-only, zipf 0.99".to_string(),
        Harness::plan(&setup, read_only(0.99)),
    )];
    let copies = Setup {
        copy_after: COPY_AFTER_READS,
        ..setup
    };
    let mut points = measure_warm(h, Kind::Megalon, &setup, "megalon", &plans)?;
    points.extend(measure_warm(h, Kind::Megalon, &copies, COPIES, &plans)?);
    let categories = vec![plans[0].1.clone()];
    h.panel(
        Panel {
            stem: "figure_12",
            title: "Figure 12: local copies",
            x_label: "workload",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[LATENCY, THROUGHPUT],
    )?;
    if let (Some(m), Some(c)) = (
        find_series(&points, "megalon", 0.0),
        find_series(&points, COPIES, 0.0),
    ) {
        h.row(
            "12",
            "read-only latency: megalon / megalon + copies",
            ratio(m.mean_latency_us, c.mean_latency_us),
            "1.3x (copies avoid CXL accesses)",
            format!(
                "{}; copies made {:.4} per op; p99 {:.1} vs {:.1} us",
                explain(&[m, c]),
                c.per_op("copies made"),
                m.p99_latency_us,
                c.p99_latency_us
            ),
        );
    }
    Ok(())
}

/// Figure 14: YCSB A, B, C, D, F.
fn figure_14(h: &mut Harness) -> Result<(), String> {
    let mut setup = h.setup(h.objects(PAPER_OBJECTS));
    // D inserts 5% of its operations: room for a run at several million operations/s.
    setup.extra_keys = setup.keys / 2 + 200_000;
    // Read-only C first; D last (it adds keys).
    let order = [
        Workload::C,
        Workload::B,
        Workload::A,
        Workload::F,
        Workload::D,
    ];
    let plans: Vec<(f64, String, Plan)> = order
        .iter()
        .map(|w| {
            let x = Workload::CORE
                .iter()
                .position(|c| c.name() == w.name())
                .unwrap_or(0) as f64;
            (
                x,
                format!("YCSB {}", w.name()),
                Harness::plan(&setup, Choice::Ycsb(*w)),
            )
        })
        .collect();
    let mut points = h.measure_each(&[Kind::Megalon, Kind::HcMeta], &setup, &plans)?;
    points.sort_by(|a, b| a.series.cmp(&b.series).then(a.x.total_cmp(&b.x)));
    let categories: Vec<String> = Workload::CORE
        .iter()
        .map(|w| w.name().to_string())
        .collect();
    h.panel(
        Panel {
            stem: "figure_14",
            title: "Figure 14: YCSB workloads",
            x_label: "workload",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    let paper = [
        "3.93x",
        "9.12x-14.18x (B and C)",
        "9.12x-14.18x (B and C)",
        "4.55x",
        "3.18x",
    ];
    for (i, name) in categories.iter().enumerate() {
        if let (Some(m), Some(hc)) = (
            find(&points, "megalon", i as f64),
            find(&points, "hcmeta", i as f64),
        ) {
            h.row(
                "14",
                format!("YCSB {name}: megalon / hcmeta"),
                ratio(m.ops_per_second, hc.ops_per_second),
                paper[i],
                explain(&[m, hc]),
            );
        }
    }
    Ok(())
}

/// Figure 15: the page-cache comparison, as 4 KiB page objects shared through each
/// scheme: 48 GB of pages in the paper (12M pages), reads with 0, 5 and 50% writes.
fn figure_15(h: &mut Harness) -> Result<(), String> {
    let mut setup = h.setup(h.objects(12e6));
    setup.value_bytes = PAGE_VALUE_BYTES;
    let plans = write_mixes(&setup);
    let points = h.measure_each(&[Kind::Megalon, Kind::HcMeta], &setup, &plans)?;
    let categories: Vec<String> = plans.iter().map(|p| p.1.clone()).collect();
    h.panel(
        Panel {
            stem: "figure_15",
            title: "Figure 15: 4 KiB pages",
            x_label: "write mix",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    for (i, name) in categories.iter().enumerate() {
        if let (Some(m), Some(hc)) = (
            find(&points, "megalon", i as f64),
            find(&points, "hcmeta", i as f64),
        ) {
            h.row(
                "15",
                format!("4 KiB pages, {name}: megalon / hcmeta"),
                ratio(m.ops_per_second, hc.ops_per_second),
                "notably higher (HCMeta churns); no figure given",
                explain(&[m, hc]),
            );
        }
    }
    Ok(())
}

/// The KV store beside the stores a user would pick instead (megalon-peers): the same
/// keys, values and draws; a get-only phase and a put-only phase, 2 workers (threads or
/// processes) each. Redis runs if `redis-server` is installed; otherwise its row says
/// how to install it.
fn peers(h: &mut Harness) -> Result<(), String> {
    use megalon_peers::{Peer, PeerSpec};
    if h.dry {
        h.runs += Peer::ALL.len() as u64;
        return Ok(());
    }
    let spec = PeerSpec {
        keys: h.objects(PAPER_OBJECTS).min(100_000),
        phase_seconds: h.seconds,
        value_bytes: VALUE_BYTES,
        ..PeerSpec::default()
    };
    let mut results = Vec::new();
    for &peer in &spec.peers {
        h.bar.set_message(format!("peers: {}", peer.name()));
        results.push(megalon_peers::run(peer, &spec));
        h.bar.inc(1);
    }
    let table = megalon_peers::table(&spec, &results);
    h.bar.suspend(|| print!("{table}"));
    let mut csv =
        String::from("peer,processes,workers,get_ops_per_second,put_ops_per_second,outcome\n");
    let mut series = vec![
        Series {
            name: "gets".into(),
            points: Vec::new(),
        },
        Series {
            name: "puts".into(),
            points: Vec::new(),
        },
    ];
    let mut categories = Vec::new();
    let mut rates = Vec::new();
    for r in &results {
        let (get, put, outcome) = match &r.outcome {
            Ok(rates) => (
                rates.get_ops_per_second.unwrap_or(0.0),
                rates.put_ops_per_second.unwrap_or(0.0),
                "ok".to_string(),
            ),
            Err(e) => (0.0, 0.0, e.to_string().replace(',', ";")),
        };
        let _ = writeln!(
            csv,
            "{},{},{},{get:.0},{put:.0},{outcome}",
            r.peer.name(),
            r.processes,
            r.workers
        );
        if r.outcome.is_ok() {
            let x = categories.len() as f64;
            categories.push(r.peer.name().to_string());
            series[0].points.push((x, get));
            series[1].points.push((x, put));
        }
        rates.push((r.peer, r.outcome.is_ok().then_some((get, put)), outcome));
    }
    let path = h.out.join("peers.csv");
    fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
    let path = h.out.join("peers.svg");
    plot::draw(
        &path,
        &Chart {
            title: "The KV store beside LMDB and Redis (2 workers)",
            x_label: "store",
            y_label: "operations per second",
            categories: Some(&categories),
            log_x: false,
        },
        &series,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let ours = rates
        .iter()
        .find(|(p, _, _)| *p == Peer::MegalonThreads)
        .and_then(|(_, r, _)| *r);
    for (peer, r, outcome) in &rates {
        if *peer == Peer::MegalonThreads {
            continue;
        }
        let (ours_text, explain) = match (ours, r) {
            (Some((og, op)), Some((g, p))) => (
                format!("gets {}, puts {}", ratio(og, *g), ratio(op, *p)),
                format!(
                    "megalon (threads) {} gets/s, {} puts/s; {} {} gets/s, {} puts/s",
                    plot::short(og),
                    plot::short(op),
                    peer.name(),
                    plot::short(*g),
                    plot::short(*p)
                ),
            ),
            _ => ("n/a".into(), outcome.clone()),
        };
        h.row(
            "peers",
            format!("megalon (threads) / {}", peer.name()),
            ours_text,
            "not in the paper",
            explain,
        );
    }
    Ok(())
}
