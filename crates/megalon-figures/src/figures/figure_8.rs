//! Figure 8: what one churn costs each scheme. Each runs the same workload (5% writes,
//! zipf 0.99, 18M objects) twice, once churning and once not (megalon: records not yet
//! allocated, and allocated; HCMeta: the paper's 200 MB SCR, and no budget). The extra
//! mean latency over the extra churns per operation is the cost of one churn, under the
//! same threads and load as every other figure. All four measured runs are alike but
//! for the churn: each on a fresh store, after a warm-up run of its own (dropped) that
//! replays the load's log and warms the caches; the churning ones after a read-only
//! warm-up, the others after a warm-up of the measured workload (megalon's records of
//! the written objects allocated).

use std::fmt::Write as _;

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::mix::Choice;
use megalon_bench::runner::{csv_field, explain, ratio, Harness, Measured, PAPER_OBJECTS};

use super::{draw, read_only, writes};
use crate::plot::{Chart, Series};

/// One scheme's cost of a churn, and the two runs it comes from.
struct Cost {
    kind: Kind,
    /// Microseconds of mean latency per extra churn per operation.
    per_churn_us: f64,
    without: Measured,
    with: Measured,
}

pub fn run(h: &mut Harness) -> Result<(), String> {
    let keys = h.objects(PAPER_OBJECTS);
    let choice = writes(0.05, 0.99);
    let mut costs = Vec::new();
    for kind in [Kind::Megalon, Kind::HcMeta] {
        let (without, with) = runs(h, kind, keys, choice)?;
        let extra_churn = with.churn() - without.churn();
        let per_churn_us = if extra_churn > 0.0 {
            (with.mean_latency_us - without.mean_latency_us) / extra_churn
        } else {
            0.0
        };
        costs.push(Cost {
            kind,
            per_churn_us,
            without,
            with,
        });
    }
    if h.counting() {
        return Ok(());
    }
    h.write("figure_8.csv", &csv(&costs))?;
    let categories: Vec<String> = costs.iter().map(|c| c.kind.name().to_string()).collect();
    let y_label = "microseconds per churn";
    let series = [Series::bars(y_label, costs.iter().map(|c| c.per_churn_us))];
    let chart = Chart::bars(
        "Figure 8: cost of one churn",
        "scheme",
        y_label,
        &categories,
    );
    draw(h, "figure_8.svg", &chart, &series)?;
    let (m, hc) = (&costs[0], &costs[1]);
    h.row(
        "8",
        "one churn: hcmeta / megalon (microseconds of latency per churn)",
        if hc.per_churn_us > 0.0 && m.per_churn_us > 0.0 {
            format!(
                "{} ({:.2} vs {:.2} us)",
                ratio(hc.per_churn_us, m.per_churn_us),
                hc.per_churn_us,
                m.per_churn_us
            )
        } else {
            // A cost that is not positive (latency that fell as churn grew, or no extra
            // churn) is the runs' noise, not a churn's cost: no ratio of it.
            format!(
                "n/a: not measured (hcmeta {:.2} us, megalon {:.2} us per churn; a cost \
                 not above zero is noise)",
                hc.per_churn_us, m.per_churn_us
            )
        },
        "HCMeta's churn (an RPC to the owner) costs more; Tigon's artifact ~55 us",
        explain(&[&m.without, &m.with, &hc.without, &hc.with]),
    );
    Ok(())
}

/// `kind`'s run without churns and its run with them, over `keys` keys: each on a fresh
/// store after a warm-up run (dropped), read-only before the churning run, of `choice`
/// before the other.
fn runs(
    h: &mut Harness,
    kind: Kind,
    keys: u64,
    choice: Choice,
) -> Result<(Measured, Measured), String> {
    let tight = h.setup(keys);
    let mut ample = tight;
    ample.scr_bytes = (keys * 4 + (256 << 10)).next_multiple_of(4096);
    // megalon churns when an object is first written (a record allocation), at any SCR
    // size: on a store whose warm-up wrote nothing it churns, on one whose warm-up ran
    // the workload it finds the records of the objects it writes in place. Records for
    // every object, so neither run frees one. HCMeta churns when the budget is too
    // small: without a budget it never does.
    let (without_kind, without_setup, with_setup) = match kind {
        Kind::Megalon => (Kind::Megalon, ample, ample),
        _ => (Kind::HcMetaUnlimited, ample, tight),
    };
    let warm_read_only = read_only(0.99);
    let (without_name, with_name) = match kind {
        Kind::Megalon => ("records allocated", "records not allocated"),
        _ => ("no budget", "paper's SCR"),
    };
    let without = warm_run(
        h,
        without_kind,
        kind,
        &without_setup,
        choice,
        choice,
        without_name,
    )?;
    let with = warm_run(
        h,
        kind,
        kind,
        &with_setup,
        warm_read_only,
        choice,
        with_name,
    )?;
    Ok((without, with))
}

/// `measured` on a fresh store of `kind` over `setup` after a warm-up run of `warm_up`
/// (dropped), as series `series.name()`, at x `name`.
fn warm_run(
    h: &mut Harness,
    kind: Kind,
    series: Kind,
    setup: &Setup,
    warm_up: Choice,
    measured: Choice,
    name: &str,
) -> Result<Measured, String> {
    let plans = [
        (
            -1.0,
            format!("{name} (warm-up)"),
            Harness::plan(setup, warm_up),
        ),
        (0.0, name.to_string(), Harness::plan(setup, measured)),
    ];
    let points = h.measure_as_given(kind, setup, series.name(), &plans, h.all_workers())?;
    Ok(points[1].clone())
}

/// Each scheme's two runs and the cost of a churn they give.
fn csv(costs: &[Cost]) -> String {
    let mut csv = String::from(
        "scheme,latency_without_us,latency_with_us,churn_without,churn_with,per_churn_us\n",
    );
    for c in costs {
        let _ = writeln!(
            csv,
            "{},{:.3},{:.3},{:.5},{:.5},{:.3}",
            csv_field(c.kind.name()),
            c.without.mean_latency_us,
            c.with.mean_latency_us,
            c.without.churn(),
            c.with.churn(),
            c.per_churn_us
        );
    }
    csv
}
