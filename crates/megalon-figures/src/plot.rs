//! Charts of a figure's points as SVG: lines over a numeric x (threads, dataset size, SCR
//! size, key size, record width), grouped bars over named x values (workloads, mixes).

use std::path::Path;

use plotters::prelude::*;

/// One scheme's (or variant's) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// What a chart shows.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Names of the x values when they are categories (0, 1, ... in `points`).
    pub categories: Option<&'a [String]>,
    /// A logarithmic x axis (dataset and SCR sizes double from point to point).
    pub log_x: bool,
}

impl Series {
    /// A series of bars: `values` in the order of the chart's categories (at x = 0, 1, ...).
    pub fn bars(name: impl Into<String>, values: impl IntoIterator<Item = f64>) -> Self {
        Series {
            name: name.into(),
            points: (values.into_iter().enumerate())
                .map(|(i, value)| (i as f64, value))
                .collect(),
        }
    }
}

impl<'a> Chart<'a> {
    /// A bar chart: a group of bars (one per series) at each of `categories`.
    pub fn bars(
        title: &'a str,
        x_label: &'a str,
        y_label: &'a str,
        categories: &'a [String],
    ) -> Self {
        Chart {
            title,
            x_label,
            y_label,
            categories: Some(categories),
            log_x: false,
        }
    }
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws `series` into an SVG file at `path`.
pub fn draw(path: &Path, chart: &Chart<'_>, series: &[Series]) -> DrawResult {
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    match chart.categories {
        Some(categories) => bars(&root, chart, categories, series, y_max)?,
        None if chart.log_x => lines_log(&root, chart, series, y_max)?,
        None => lines(&root, chart, series, y_max)?,
    }
    root.present()?;
    Ok(())
}

fn x_range(series: &[Series]) -> (f64, f64) {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if lo > hi {
        (0.0, 1.0)
    } else if lo == hi {
        (lo * 0.5, hi * 1.5 + 1.0)
    } else {
        (lo, hi)
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Axes, lines with a dot per point, and the legend, over any x coordinate (linear or
/// logarithmic: their types differ).
macro_rules! line_chart {
    ($root:expr, $chart:expr, $series:expr, $x_range:expr, $y_max:expr) => {{
        let mut ctx = ChartBuilder::on($root)
            .caption($chart.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d($x_range, 0.0..$y_max)?;
        ctx.configure_mesh()
            .x_desc($chart.x_label)
            .y_desc($chart.y_label)
            .y_label_formatter(&|y| short(*y))
            .x_label_formatter(&|x| short(*x))
            .draw()?;
        for (i, s) in $series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            ctx.draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }};
}

fn lines(root: &Area<'_>, chart: &Chart<'_>, series: &[Series], y_max: f64) -> DrawResult {
    let (lo, hi) = x_range(series);
    line_chart!(root, chart, series, lo..hi, y_max);
    Ok(())
}

fn lines_log(root: &Area<'_>, chart: &Chart<'_>, series: &[Series], y_max: f64) -> DrawResult {
    let (lo, hi) = x_range(series);
    line_chart!(root, chart, series, (lo * 0.9..hi * 1.1).log_scale(), y_max);
    Ok(())
}

fn bars(
    root: &Area<'_>,
    chart: &Chart<'_>,
    categories: &[String],
    series: &[Series],
    y_max: f64,
) -> DrawResult {
    let n = categories.len().max(1) as f64;
    let mut ctx = ChartBuilder::on(root)
        .caption(chart.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_max)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len())
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .y_label_formatter(&|y| short(*y))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < categories.len() {
                categories[i as usize].clone()
            } else {
                String::new()
            }
        })
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let left = -0.4 + i as f64 * width;
        ctx.draw_series(s.points.iter().map(|&(x, y)| {
            Rectangle::new([(x + left, 0.0), (x + left + width, y)], color.filled())
        }))?
        .label(s.name.as_str())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

/// `1.5M`, `250k`, `12`, `0.25`: axis labels that fit.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 || (v.fract() == 0.0) {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
