//! Figure 8: what one churn costs each scheme. Each runs the same workload (5% writes,
//! zipf 0.99, 18M objects) twice, once churning and once not (megalon: a fresh store,
//! then the same store again; HCMeta: the paper's 200 MB SCR, and no budget). The extra
//! mean latency over the extra churns per operation is the cost of one churn, under the
//! same threads and load as every other figure.

use std::fmt::Write as _;

use megalon_bench::lineup::Kind;
use megalon_bench::mix::Choice;
use megalon_bench::runner::{explain, ratio, Harness, Measured, PAPER_OBJECTS};

use super::{draw, writes};
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
        format!(
            "{} ({:.2} vs {:.2} us)",
            ratio(hc.per_churn_us, m.per_churn_us),
            hc.per_churn_us,
            m.per_churn_us
        ),
        "HCMeta's churn (an RPC to the owner) costs more; Tigon's artifact ~55 us",
        explain(&[&m.without, &m.with, &hc.without, &hc.with]),
    );
    Ok(())
}

/// `kind`'s run without churns and its run with them, over `keys` keys.
fn runs(
    h: &mut Harness,
    kind: Kind,
    keys: u64,
    choice: Choice,
) -> Result<(Measured, Measured), String> {
    let tight = h.setup(keys);
    let mut ample = tight;
    ample.scr_bytes = (keys * 4 + (256 << 10)).next_multiple_of(4096);
    if kind == Kind::Megalon {
        // megalon churns when an object is first written (a record allocation), at any
        // SCR size: the first run on a fresh store churns, a second run on the same
        // store finds the records in place. Records for every object, so neither run
        // frees one.
        let plans = [
            (1.0, "first run".to_string(), Harness::plan(&ample, choice)),
            (0.0, "second run".to_string(), Harness::plan(&ample, choice)),
        ];
        let runs = h.measure(kind, &ample, kind.name(), &plans)?;
        Ok((runs[1].clone(), runs[0].clone()))
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
        Ok((without[0].clone(), with[0].clone()))
    }
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
            c.kind.name(),
            c.without.mean_latency_us,
            c.with.mean_latency_us,
            c.without.churn(),
            c.with.churn(),
            c.per_churn_us
        );
    }
    csv
}
