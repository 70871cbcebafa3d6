//! Figure 10: record width, 50% writes, zipf 0.7, SCR 32 MB, 18M objects.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::runner::{Harness, PlanAt, PAPER_OBJECTS};

use super::{panel, throughput_row, writes, Panel, CHURN, THROUGHPUT};

/// Record widths in bits, the paper's sweep.
const WIDTHS: [u32; 5] = [32, 16, 8, 4, 2];
/// The series of the width chosen at run time.
const ADAPTIVE: &str = "megalon (adaptive width)";
/// The gauge of the width switches a pod made (its record width's epoch).
const SWITCHES: &str = "record width switches";
/// Warm-up runs at most: of the adaptive series, waiting for its width to settle; of
/// each fixed width, waiting for its record allocations to stop falling.
const MAX_WARM_UPS: usize = 4;
/// The counter of megalon's record allocations (its churn).
const ALLOCS: &str = "record allocs";
/// The paper's SCR in this figure, in MB.
const SCR_MB: f64 = 32.0;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let sweep: Vec<(Setup, PlanAt)> = WIDTHS
        .iter()
        .map(|&bits| {
            let mut setup = h.setup(h.objects(PAPER_OBJECTS));
            setup.scr_bytes = h.scr(SCR_MB);
            setup.record_bits = bits;
            let plan = (
                f64::from(bits),
                format!("{bits}-bit records"),
                Harness::plan(&setup, writes(0.5, 0.7)),
            );
            (setup, plan)
        })
        .collect();
    // Each width after warm-up runs of its own (dropped): the paper measures a steady
    // state, where the first write of each object (an alloc every width pays alike)
    // is behind it, and what is left is the churn a width causes. One warm-up run wrote
    // too few of the objects where the memory is slow (under the CXL model, 8-bit
    // records still allocated 0.02 times an operation in the measured run, all first
    // writes): warm-up runs until one allocates records no less than nine tenths as
    // often as the run before it (at most `MAX_WARM_UPS`).
    let mut points = Vec::new();
    for (setup, plan) in &sweep {
        let (mut point, warm_ups) = h.measure_until(
            Kind::Megalon,
            setup,
            "megalon",
            plan,
            MAX_WARM_UPS,
            |before, now| Ok(now.per_op(ALLOCS) >= before.per_op(ALLOCS) * 0.9),
        )?;
        point.x_name = format!("{} ({warm_ups} warm-up runs)", point.x_name);
        points.push(point);
    }
    // The width chosen at run time: from 32-bit records, the hosts' pumps switch it
    // (`WidthPolicy::default`); drawn at its start, 32. Measured once it has settled, as
    // each fixed width is after its churn from the first writes: warm-up runs until one
    // switches no more (the records re-allocated after a switch behind it too).
    let (setup, plan) = &sweep[0];
    let start = plan.0;
    let adaptive_plan = (start, format!("adaptive, from {start}-bit records"), plan.2);
    let (mut adaptive, warm_ups) = h.measure_settled(
        Kind::MegalonAdaptive,
        setup,
        ADAPTIVE,
        &adaptive_plan,
        SWITCHES,
        MAX_WARM_UPS,
    )?;
    if let (Some(bits), Some(switches)) = (adaptive.gauge("record bits"), adaptive.gauge(SWITCHES))
    {
        adaptive.x_name = format!(
            "adaptive from {start}-bit records, at {bits} bits after {switches} switches \
             ({warm_ups} warm-up runs)"
        );
    }
    points.push(adaptive);
    panel(
        h,
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
    // Each row: the narrower width's throughput over the wider's, and the paper's shape.
    let rows = [
        (
            32,
            8,
            "> 1: 8-bit records all fit and match Figure 7(b)(ii)'s best; below 8 bits wraps \
             hurt",
        ),
        (
            8,
            4,
            "< 1: below 8 bits wraps hurt (the paper's 4- and 2-bit points fall)",
        ),
        (8, 2, "< 1: every write wraps (a log event per write)"),
    ];
    for (wide, narrow, paper) in rows {
        let what = format!("{narrow}-bit / {wide}-bit records (50% writes, zipf 0.7, SCR 32 MB)");
        let (wide, narrow) = (f64::from(wide), f64::from(narrow));
        let pair = (("megalon", wide), ("megalon", narrow));
        throughput_row(h, "10", what, &points, pair, paper);
    }
    // The adaptive width against where it started and against the best fixed one here.
    for (fixed, paper) in [
        (
            32,
            "not in the paper: > 1 if the policy narrows the width where 32 bits churn",
        ),
        (
            8,
            "not in the paper: about 1 if it settles where the best fixed width is",
        ),
    ] {
        let what = format!(
            "adaptive / {fixed}-bit records (50% writes, zipf 0.7, SCR 32 MB; from {start}-bit)"
        );
        let pair = (("megalon", f64::from(fixed)), (ADAPTIVE, start));
        throughput_row(h, "10", what, &points, pair, paper);
    }
    Ok(())
}
