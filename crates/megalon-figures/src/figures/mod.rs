//! The figures: one module per figure of the paper (and the peers and RESP panels), each a
//! function over the harness that measures its points, writes its CSV and charts, and
//! adds its rows to the summary. What several figures share is here: the list, a
//! panel's files, the charts a panel draws, the write mixes.

mod figure_10;
mod figure_11;
mod figure_12;
mod figure_13;
mod figure_14;
mod figure_15;
mod figure_4;
mod figure_5;
mod figure_6;
mod figure_7;
mod figure_8;
mod figure_9;
mod peers;
mod resp;

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::mix::Choice;
use megalon_bench::runner::{explain, find, ratio, Harness, Measured, PlanAt};

use crate::plot::{self, Chart, Series};

/// A figure's body: measures, writes its files, adds its rows.
pub type Figure = fn(&mut Harness) -> Result<(), String>;

/// Every figure: its name on the command line (`--only`), what it shows, its body.
pub const FIGURES: &[(&str, &str, Figure)] = &[
    ("4", "threads, read-only", figure_4::run),
    ("5", "dataset size, read-only", figure_5::run),
    ("6", "dataset size, 5% and 50% writes", figure_6::run),
    ("7", "SCR size sweep", figure_7::run),
    ("8", "cost of one churn", figure_8::run),
    ("9", "key size", figure_9::run),
    ("10", "record width", figure_10::run),
    ("11", "shared ratio, local partitions", figure_11::run),
    ("12", "local copies", figure_12::run),
    ("13", "AllLog", figure_13::run),
    ("14", "YCSB A/B/C/D/F", figure_14::run),
    ("15", "page-sized objects", figure_15::run),
    ("peers", "the KV store beside LMDB and Redis", peers::run),
    (
        "resp",
        "megalon-server beside redis-server, by redis-benchmark",
        resp::run,
    ),
];

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

/// Writes a panel's CSV and its charts, one per `charts` (nothing while counting).
fn panel(
    h: &Harness,
    panel: Panel<'_>,
    points: &[Measured],
    charts: &[Plotted],
) -> Result<(), String> {
    if h.counting() {
        return Ok(());
    }
    h.write_csv(panel.stem, points)?;
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
        let chart = Chart {
            title: panel.title,
            x_label: panel.x_label,
            y_label: plotted.y_label,
            categories: panel.categories,
            log_x: panel.log_x,
        };
        draw(
            h,
            &format!("{}{}.svg", panel.stem, plotted.suffix),
            &chart,
            &series,
        )?;
    }
    Ok(())
}

/// A summary row: the throughput of the point at `over` (a series and an x) over that of
/// the point at `base`, with the counters of both; no row if either point is missing.
fn throughput_row(
    h: &mut Harness,
    figure: &'static str,
    what: String,
    points: &[Measured],
    (base, over): ((&str, f64), (&str, f64)),
    paper: &'static str,
) {
    if let (Some(b), Some(o)) = (find(points, base.0, base.1), find(points, over.0, over.1)) {
        let ours = ratio(o.ops_per_second, b.ops_per_second);
        h.row(figure, what, ours, paper, explain(&[b, o]));
    }
}

/// Draws `series` into `file` in the output directory; an error names the path.
fn draw(h: &Harness, file: &str, chart: &Chart<'_>, series: &[Series]) -> Result<(), String> {
    let path = h.path(file);
    plot::draw(&path, chart, series).map_err(|e| format!("{}: {e}", path.display()))
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

/// Read-only, 5% and 50% writes at zipf 0.99 over `setup`, on megalon and on `theirs`
/// (Figures 13 and 15): one bar panel of throughput, the mixes at x = 0, 1, 2, written as
/// `stem`. Returns the points and the mixes' names.
fn write_mix_bars(
    h: &mut Harness,
    setup: &Setup,
    theirs: Kind,
    stem: &str,
    title: &str,
) -> Result<(Vec<Measured>, Vec<String>), String> {
    let plans: Vec<PlanAt> = [0.0, 0.05, 0.5]
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            (
                i as f64,
                format!("{}% writes", w * 100.0),
                Harness::plan(setup, writes(w, 0.99)),
            )
        })
        .collect();
    let points = h.measure_each(&[Kind::Megalon, theirs], setup, &plans)?;
    let mixes = categories(&plans);
    panel(
        h,
        Panel {
            stem,
            title,
            x_label: "write mix",
            log_x: false,
            categories: Some(&mixes),
        },
        &points,
        &[THROUGHPUT],
    )?;
    Ok((points, mixes))
}

/// The names of the x values of `plans`, for a bar chart's categories.
fn categories(plans: &[PlanAt]) -> Vec<String> {
    plans.iter().map(|p| p.1.clone()).collect()
}
